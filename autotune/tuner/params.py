"""Trial parameters <-> candidate layouts, in the config's own terms.

A trial's parameters are the layout itself, one integer per mini-stage (stage s, interleave chunk
v of MindFormers' ``[chunk][stage]`` order), so ``study.trials_dataframe()`` and optuna-dashboard
show what a user writes in the YAML:

- ``pp_interleave_num``: categorical over the runnable candidates;
- ``layers_s{s}_v{v}``: layers of mini-stage (v, s), int in [0, num_layers] (the offset is these
  minus the even split);
- ``recompute_s{s}_v{v}``, ``select_recompute_s{s}_v{v}``, ``select_comm_recompute_s{s}_v{v}``:
  how many of its layers get full / select / comm recompute (only the kinds the space may set),
  int in [0, num_layers].

Only the mini-stages of the trial's ``pp_interleave_num`` are suggested (conditional parameters).
:func:`decode` checks a parameter set is a valid layout (:func:`layout_error`); :func:`encode`
is its inverse. With the space's ``recompute_granularity: stage`` a stage's chunks share one
recompute fraction f_s (count[v, s] = round(f_s · layers[v, s])); :func:`representable` rejects
layouts that break it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.tuner.problem import Candidate, Problem

#: Parameter name prefix of each recompute kind (the MindFormers key it counts).
KIND_PREFIX = {"full": "recompute", "select": "select_recompute", "comm": "select_comm_recompute"}


def name(prefix: str, stage: int, chunk: int) -> str:
    """Parameter name of mini-stage (chunk, stage), e.g. ``layers_s0_v1``."""
    return f"{prefix}_s{stage}_v{chunk}"


def granularity(problem: Problem) -> str:
    """``mini_stage`` (default) or ``stage`` (see module docstring)."""
    return problem.recompute_granularity


def param_names(problem: Problem, V: int) -> list[str]:
    """The integer parameter names of a trial with pp_interleave_num ``V``, in suggestion order:
    layers then each allowed recompute kind, chunk-major (MindFormers' order)."""
    prefixes = ["layers"] + [KIND_PREFIX[k] for k in ("full", "select", "comm") if k in problem.kinds]
    return [name(pre, s, v) for pre in prefixes for v in range(V) for s in range(problem.P)]


def layout_error(problem: Problem, cand: Candidate) -> str | None:
    """Why ``cand`` is not a layout of the problem's space (None when it is): V not runnable,
    layers outside :meth:`Problem.bounds` or not summing to num_layers, a recompute count outside
    [0, layers], a kind the space may not set."""
    if cand.V not in problem.vpp_candidates:
        return f"pp_interleave_num {cand.V} is not one of {list(problem.vpp_candidates)}"
    lo, hi = problem.bounds(cand.V)
    if int(cand.layers.sum()) != problem.N:
        return f"layers sum to {int(cand.layers.sum())}, not num_layers {problem.N}"
    if (cand.layers < lo).any() or (cand.layers > hi).any():
        return f"layers {cand.layers.tolist()} outside the bounds {lo.tolist()}..{hi.tolist()}"
    for k, t in (("full", cand.rec), ("select", cand.sel), ("comm", cand.com)):
        if (t < 0).any() or (t > cand.layers).any():
            return f"{KIND_PREFIX[k]} counts {t.tolist()} outside [0, layers]"
        if k not in problem.kinds and t.any():
            return f"{KIND_PREFIX[k]} is not in the searched space"
    return None


def decode(problem: Problem, params: dict[str, Any]) -> Candidate:
    """The candidate of a parameter dict (module docstring).

    Raises:
        KeyError: a parameter of the trial's V is missing. ValueError: not a valid layout
            (:func:`layout_error` says why).
    """
    V, P = int(params["pp_interleave_num"]), problem.P

    def table(prefix: str) -> np.ndarray:
        return np.array([[int(params[name(prefix, s, v)]) for s in range(P)] for v in range(V)], dtype=np.int64)

    z = np.zeros((V, P), dtype=np.int64)
    tabs = [table(KIND_PREFIX[k]) if k in problem.kinds else z.copy() for k in ("full", "select", "comm")]
    cand = Candidate(V, table("layers"), *tabs)
    err = layout_error(problem, cand)
    if err is not None:
        raise ValueError(err)
    return cand


def encode(problem: Problem, cand: Candidate) -> dict[str, Any]:
    """The parameters of ``cand`` (:func:`decode` gives it back)."""
    out: dict[str, Any] = {"pp_interleave_num": int(cand.V)}
    tabs = {"layers": cand.layers, "full": cand.rec, "select": cand.sel, "comm": cand.com}
    for v in range(cand.V):
        for s in range(problem.P):
            out[name("layers", s, v)] = int(cand.layers[v, s])
    for k in ("full", "select", "comm"):
        if k in problem.kinds:
            for v in range(cand.V):
                for s in range(problem.P):
                    out[name(KIND_PREFIX[k], s, v)] = int(tabs[k][v, s])
    return out


def stage_counts(layers: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Recompute counts int [V, P] of a stage-granularity layout: round(fraction[s] · layers[v, s])."""
    return np.minimum(np.rint(np.asarray(fraction)[None, :] * layers).astype(np.int64), layers)


def representable(problem: Problem, cand: Candidate) -> bool:
    """True when ``cand`` is a layout of the space (:func:`layout_error`) and, with
    ``recompute_granularity: stage``, each stage's counts follow one fraction (f_s = the stage's
    recomputed layers / its layers)."""
    if layout_error(problem, cand) is not None:
        return False
    if granularity(problem) != "stage":
        return True
    tot = cand.layers.sum(axis=0)
    for t in (cand.rec, cand.sel, cand.com):
        f = np.where(tot > 0, t.sum(axis=0) / np.maximum(tot, 1), 0.0)
        if not np.array_equal(stage_counts(cand.layers, f), t):
            return False
    return True
