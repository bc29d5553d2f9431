"""Trial parameters <-> candidate layouts (valid by construction, fixed-size parameter set).

Parameters (all present in every trial, so multivariate TPE models them jointly):

- ``pp_interleave_num``: categorical over the runnable candidates;
- ``w{i}`` for i < Vmax·P: float in [0, 4], the weight of mini-stage i (layer order); the layers
  are apportioned in proportion to the first V·P weights, rounded to whole layers within the
  validity bounds (first/last mini-stage >= 0 layers, others >= 1) — always a valid offset;
- ``{kind}{i}`` for kind in full/select/comm: float in [0, 1], the fraction of mini-stage i's
  layers with that recompute; count = round(fraction × layers). With the space's
  ``recompute_granularity: stage`` (``problem.recompute_granularity``) there is one fraction per
  pipeline stage (i < P), shared by the stage's chunks: count[v, p] = round(fraction_p × layers[v, p]).

Encoding a layout gives parameters that decode back to exactly the same layout (seeds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.tuner.problem import Candidate, Problem

W_MAX = 4.0
KIND_PREFIX = {"full": "full", "select": "sel", "comm": "comm"}


def apportion(N: int, weights: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Split N whole layers in proportion to ``weights`` within [lo, hi] (largest remainder).

    Args: weights, lo, hi: float/int [n]. Returns int [n] summing to N (requires sum(lo) <= N <= sum(hi)).
    """
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    if w.sum() <= 0:
        w = np.ones_like(w)
    target = N * w / w.sum()
    x = np.clip(np.floor(target + 1e-9), lo, hi).astype(np.int64)
    while x.sum() < N:
        gap = np.where(x < hi, target - x, -np.inf)
        x[int(np.argmax(gap))] += 1
    while x.sum() > N:
        gap = np.where(x > lo, x - target, -np.inf)
        x[int(np.argmax(gap))] -= 1
    return x


def granularity(problem: Problem) -> str:
    """``mini_stage`` (default) or ``stage``: how many recompute fractions a trial has."""
    return problem.recompute_granularity


def param_names(problem: Problem) -> list[str]:
    """All float parameter names, in a fixed order."""
    n = max(problem.vpp_candidates) * problem.P
    names = [f"w{i}" for i in range(n)]
    nr = problem.P if granularity(problem) == "stage" else n
    for k in problem.kinds:
        names += [f"{KIND_PREFIX[k]}{i}" for i in range(nr)]
    return names


def decode(problem: Problem, params: dict[str, Any]) -> Candidate:
    """Candidate for a parameter dict (see module docstring)."""
    V = int(params["pp_interleave_num"])
    P = problem.P
    n = V * P
    lo, hi = problem.bounds(V)
    w = np.array([params[f"w{i}"] for i in range(n)])
    layers = apportion(problem.N, w, lo.reshape(-1), hi.reshape(-1)).reshape(V, P)
    tables = {}
    for k in ("full", "select", "comm"):
        if k in problem.kinds:
            if granularity(problem) == "stage":
                f = np.broadcast_to(np.array([params[f"{KIND_PREFIX[k]}{i}"] for i in range(P)]), (V, P))
            else:
                f = np.array([params[f"{KIND_PREFIX[k]}{i}"] for i in range(n)]).reshape(V, P)
            tables[k] = np.minimum(np.rint(f * layers).astype(np.int64), layers)
        else:
            tables[k] = np.zeros((V, P), dtype=np.int64)
    return Candidate(V, layers, tables["full"], tables["select"], tables["comm"])


def encode(problem: Problem, cand: Candidate) -> dict[str, Any]:
    """Parameters that decode to ``cand`` (unused mini-stages of a smaller V get neutral values)."""
    V, P = cand.V, problem.P
    nmax = max(problem.vpp_candidates) * P
    flat = cand.layers.reshape(-1).astype(np.float64)
    mean = problem.N / flat.size
    params: dict[str, Any] = {"pp_interleave_num": V}
    for i in range(nmax):
        params[f"w{i}"] = float(min(W_MAX, flat[i] / mean)) if i < flat.size else 1.0
    for k, table in (("full", cand.rec), ("select", cand.sel), ("comm", cand.com)):
        if k not in problem.kinds:
            continue
        if granularity(problem) == "stage":
            tot_l, tot_t = cand.layers.sum(axis=0), table.sum(axis=0)
            for i in range(P):
                params[f"{KIND_PREFIX[k]}{i}"] = float(tot_t[i] / tot_l[i]) if tot_l[i] > 0 else 0.0
            continue
        t = table.reshape(-1)
        for i in range(nmax):
            params[f"{KIND_PREFIX[k]}{i}"] = float(t[i] / flat[i]) if i < flat.size and flat[i] > 0 else 0.0
    return params


def representable(problem: Problem, cand: Candidate) -> bool:
    """True when ``decode(encode(cand))`` gives ``cand`` back (V runnable, weights in range, the
    recompute kinds used allowed by the space)."""
    if cand.V not in problem.vpp_candidates:
        return False
    back = decode(problem, encode(problem, cand))
    same = np.array_equal(back.layers, cand.layers)
    for k, a, b in (("full", back.rec, cand.rec), ("select", back.sel, cand.sel), ("comm", back.com, cand.com)):
        same = same and (np.array_equal(a, b) if k in problem.kinds else not b.any())
    return bool(same)
