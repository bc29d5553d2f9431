"""Test oracles: closed forms of pipeline step times and exhaustive optima of small partition
problems, to check the cost model and the search against (not used by autotune itself).

Sources: cost-model reference §6.1 (bounds), §6.2 (min-max DP, brute force), §2.3 (Narayanan et
al. 2021 bubbles), §4 (Zero Bubble, Qi et al. ICLR 2024, README table). Stage times
``t_i = f_i + b_i`` (ms per micro-batch).
"""

from __future__ import annotations

import itertools

import numpy as np

from autotune.cost.inputs import stage_costs
from autotune.cost.simulate import compile_schedule, simulate


def min_max_partition(cost: list[float] | np.ndarray, p: int, *, head: float = 0.0,
                      tail: float = 0.0) -> tuple[float, list[int]]:
    """Exact min over contiguous splits (>= 1 item per part) of the largest part cost (§6.2):
    ``D[k][j] = min_{i<j} max(D[k-1][i], C(i, j, k))`` with ``head`` added to part 0 and ``tail``
    to part p-1, O(p·L²). Returns (optimal bottleneck, one optimal split as part sizes: the first
    found scanning split points left to right).

    Raises:
        ValueError: fewer items than parts, or p < 1.
    """
    c = np.asarray(cost, dtype=np.float64)
    N = c.size
    if p < 1 or N < p:
        raise ValueError(f"need 1 <= p <= number of items, got p={p}, items={N}")
    S = np.concatenate([[0.0], np.cumsum(c)])
    D = np.full((p + 1, N + 1), np.inf)
    arg = np.zeros((p + 1, N + 1), dtype=np.int64)
    D[0, 0] = 0.0
    for k in range(1, p + 1):
        extra = (head if k == 1 else 0.0) + (tail if k == p else 0.0)
        for j in range(k, N + 1):
            i = np.arange(k - 1, j)
            val = np.maximum(D[k - 1, i], S[j] - S[i] + extra)
            a = int(np.argmin(val))
            D[k, j], arg[k, j] = val[a], i[a]
    split, j = [], N
    for k in range(p, 0, -1):
        i = int(arg[k, j])
        split.append(j - i)
        j = i
    return float(D[p, N]), split[::-1]


def sum_plus_max_ms(fwd_ms: np.ndarray, bwd_ms: np.ndarray, m: int) -> float:
    """Alpa/DAPPLE closed form ``Σ_i t_i + (m − 1)·max_i t_i`` (ms).

    Exact for balanced stages or a bottleneck at the end; often above the simulated 1F1B step
    (reference §6.1: p=2, m=2, f=[3,2], b=[6,4] gives 24 vs the simulated 21) but, unlike what
    the reference states, *not* an upper bound: p=3, m=2, f=[3, 1.5, 0.3], b=[2, 5, 0.6] gives
    18.9 ms while the path F0, F1 on stage 0 -> F1 on stage 1 -> B0, B1 on stage 1 -> B1 on
    stage 0 alone is 3 + 3 + 1.5 + 5 + 5 + 2 = 19.5 ms (the simulated step). In 20,000 random
    instances (p <= 5, m <= 9) it was below the simulation 118 times, by up to 9 %, also with
    m >= p. Not used for pruning.
    """
    t = np.asarray(fwd_ms, dtype=float) + np.asarray(bwd_ms, dtype=float)
    return float(t.sum() + (m - 1) * t.max())


def critical_path_lower_bound_ms(fwd_ms: np.ndarray, bwd_ms: np.ndarray, m: int) -> float:
    """1F1B critical-path lower bound ``max_i [Σ_{j<i}(f_j + b_j) + m·t_i]`` (ms; reference §6.1).

    Every micro-batch crosses stages 0..i−1 forward and back before/after stage i's m·t_i of work.
    """
    f = np.asarray(fwd_ms, dtype=float)
    b = np.asarray(bwd_ms, dtype=float)
    t = f + b
    before = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    return float(np.max(before + m * t))


def ideal_step_ms(fwd_ms: np.ndarray, bwd_ms: np.ndarray, m: int) -> float:
    """No bubble, perfect balance: ``T* = m·Σ_i t_i / p`` (ms; reference §6.1)."""
    t = np.asarray(fwd_ms, dtype=float) + np.asarray(bwd_ms, dtype=float)
    return float(m * t.sum() / t.size)


def balanced_bubble(p: int, m: int, v: int = 1) -> float:
    """Idle time relative to ideal compute for balanced stages: ``(p − 1)/(v·m)`` (Narayanan et al.
    2021: 1F1B/GPipe with v = 1, interleaved 1F1B with v chunks)."""
    return (p - 1) / (v * m)


def zero_bubble_rates(p: int, m: int) -> dict[str, float]:
    """Bubble rates of the Zero Bubble schedules with ``T_F = T_B = T_W`` (Qi et al. 2024, README
    table): 1F1B ``(p − 1)/m``; ZB1P ``(p − 1)/(3m)`` (bubble (p−1)(T_F+T_B−T_W) over 3m·T);
    ZB2P and ZBV 0."""
    return {"1F1B": (p - 1) / m, "ZB1P": (p - 1) / (3 * m), "ZB2P": 0.0, "ZBV": 0.0}


def zero_bubble_peak_inflight(p: int) -> dict[str, int]:
    """Peak in-flight micro-batches (reference §3.2): ZB-H1 p, ZB-H2 2p − 1, ZB-V p, V-Half
    (p+2)//2, V-Min (p+4)//3."""
    return {"ZB-H1": p, "ZB-H2": 2 * p - 1, "ZB-V": p, "V-Half": (p + 2) // 2, "V-Min": (p + 4) // 3}


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
