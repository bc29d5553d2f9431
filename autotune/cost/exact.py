"""Exact optima of small partition problems (oracles for tests and for measuring search regret).

- :func:`min_max_partition`: contiguous split of a layer sequence over p stages minimizing the
  largest stage cost, by the DP ``D[k][j] = min_{i<j} max(D[k−1][i], C(i, j, k))`` (reference §6.2),
  O(p·L²).
- :func:`brute_force_1f1b`: every split × every "first r layers fully recomputed" vector,
  simulated exactly with the 1F1B event simulation, under a per-stage memory cap (reference §6.2,
  SAPP memory law ``static + (p − i)·act + head/tail``). Only for small L and p.
"""

from __future__ import annotations

import itertools

import numpy as np


def min_max_partition(layer_cost: list[float], p: int, *, head: float = 0.0, tail: float = 0.0,
                      min_layers: int = 1) -> tuple[float, list[int]]:
    """Min-max contiguous partition (see module docstring).

    Args:
        layer_cost: cost of each layer in order.
        p: stages; head is added to stage 0, tail to stage p − 1.
        min_layers: fewest layers per stage.

    Returns:
        (optimal bottleneck, layers per stage of one optimal split — the first found scanning
        split points left to right).

    Raises:
        ValueError: fewer than p·min_layers layers.
    """
    L = len(layer_cost)
    if L < p * min_layers or p < 1:
        raise ValueError(f"cannot split {L} layers into {p} stages of >= {min_layers}")
    pre = np.concatenate([[0.0], np.cumsum(layer_cost)])
    inf = float("inf")
    D = np.full((p + 1, L + 1), inf)
    arg = np.zeros((p + 1, L + 1), dtype=np.int64)
    D[0, 0] = 0.0
    for k in range(1, p + 1):
        extra_k = (head if k == 1 else 0.0) + (tail if k == p else 0.0)
        for j in range(k * min_layers, L + 1):
            best, bi = inf, -1
            for i in range((k - 1) * min_layers, j - min_layers + 1):
                c = max(D[k - 1, i], pre[j] - pre[i] + extra_k)
                if c < best:
                    best, bi = c, i
            D[k, j], arg[k, j] = best, bi
    split = []
    j = L
    for k in range(p, 0, -1):
        i = int(arg[k, j])
        split.append(j - i)
        j = i
    return float(D[p, L]), split[::-1]


def compositions(n: int, p: int, lo: int = 1):
    """All tuples of p integers >= lo summing to n."""
    for cuts in itertools.combinations(range(1, n - p * (lo - 1)), p - 1):
        parts = np.diff((0, *cuts, n - p * (lo - 1)))
        yield tuple(int(x) + lo - 1 for x in parts)


def brute_force_1f1b(pa, p: int, m: int, cap_mib: float, *, max_batch: int = 20000):
    """Exhaustive oracle over splits (>= 1 layer per stage) and full-recompute counts (V = 1).

    Args:
        pa: :class:`~autotune.cost.inputs.ProfileArrays`.
        p, m: stages and micro-batches; cap_mib: per-stage memory cap.

    Returns:
        (best step_ms, layers [p], recompute [p]) over the candidates whose every stage peak is
        <= cap_mib; ties broken by enumeration order. (inf, None, None) when nothing fits.
    """
    from autotune.cost.inputs import stage_costs
    from autotune.cost.simulate import compile_schedule, simulate

    cs = compile_schedule("1f1b", p, 1, m)
    cands_l, cands_r = [], []
    for split in compositions(pa.num_layers, p):
        for rec in itertools.product(*(range(n + 1) for n in split)):
            cands_l.append(split)
            cands_r.append(rec)
    L = np.asarray(cands_l, dtype=np.int64)[:, None, :]
    R = np.asarray(cands_r, dtype=np.int64)[:, None, :]
    best = (float("inf"), None, None)
    for s in range(0, L.shape[0], max_batch):
        lb, rb = L[s:s + max_batch], R[s:s + max_batch]
        z = np.zeros_like(lb)
        costs = stage_costs(pa, lb, rb, z, z)
        sim = simulate(cs, costs, pa.p2p_ms)
        ok = (sim.peak_mib <= cap_mib + 1e-9).all(axis=1)
        if ok.any():
            step = np.where(ok, sim.step_ms, np.inf)
            i = int(np.argmin(step))
            if step[i] < best[0] - 1e-12:
                best = (float(step[i]), lb[i, 0].tolist(), rb[i, 0].tolist())
    return best
