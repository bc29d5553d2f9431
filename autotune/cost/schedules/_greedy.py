"""Greedy list scheduling: derive a fixed per-stage op order from nominal op times.

Used by schedules whose order is easiest to state as a rule ("run a ready backward first; else a
ready forward, deepest chunk first, while the stage holds fewer than ``cap`` chunk-units") rather
than as a closed table (zero_bubble_v). The order is computed once with nominal times
(forward 1, backward 2, no p2p) and then simulated with the real times, as a runtime with a fixed
schedule does.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op


def greedy_order(P: int, V: int, m: int, pos: np.ndarray, cap: np.ndarray, *, fwd_t: float = 1.0,
                 bwd_t: float = 2.0) -> list[list[Op]]:
    """Per-stage op order by event-driven greedy list scheduling (see module docstring).

    Args:
        P, V, m: stages, chunks per stage, micro-batches.
        pos: int [V, P] pipeline position of each mini-stage (forward flows 0 → V·P−1).
        cap: int [P] live chunk-micro-batches a stage may hold before it stops starting forwards
            (exceeded only when the whole pipeline would otherwise stall).
        fwd_t, bwd_t: nominal durations.

    Each mini-stage runs its forwards and its backwards in micro-batch order.
    """
    last = V * P - 1
    at = {int(pos[v, p]): (v, p) for v in range(V) for p in range(P)}
    f_end: dict[tuple[int, int, int], float] = {}
    b_end: dict[tuple[int, int, int], float] = {}
    next_f = np.zeros((V, P), dtype=np.int64)
    next_b = np.zeros((V, P), dtype=np.int64)
    free = np.zeros(P)
    live = np.zeros(P, dtype=np.int64)
    orders: list[list[Op]] = [[] for _ in range(P)]
    total = 2 * V * m * P
    done = 0
    t = 0.0
    while done < total:
        progressed = False
        for p in range(P):
            if free[p] > t:
                continue
            best: tuple[float, int, bool] | None = None  # (priority, chunk, is_fwd)
            for v in range(V):
                k = int(pos[v, p])
                j = int(next_b[v, p])
                if j < m and (v, p, j) in f_end and f_end[(v, p, j)] <= t:
                    dep_ok = k == last or b_end.get((*at[k + 1], j), np.inf) <= t
                    if dep_ok:
                        cand = (2.0 + k / (last + 1), v, False)
                        best = cand if best is None or cand[0] > best[0] else best
                j = int(next_f[v, p])
                if j < m and live[p] < cap[p]:
                    dep_ok = k == 0 or f_end.get((*at[k - 1], j), np.inf) <= t
                    if dep_ok:
                        cand = (1.0 + k / (last + 1), v, True)
                        best = cand if best is None or cand[0] > best[0] else best
            if best is None:
                continue
            _, v, is_f = best
            if is_f:
                j = int(next_f[v, p])
                next_f[v, p] += 1
                f_end[(v, p, j)] = t + fwd_t
                free[p] = t + fwd_t
                live[p] += 1
            else:
                j = int(next_b[v, p])
                next_b[v, p] += 1
                b_end[(v, p, j)] = t + bwd_t
                free[p] = t + bwd_t
                live[p] -= 1
            orders[p].append((v, j, is_f))
            done += 1
            progressed = True
        if done >= total:
            break
        future = [x for x in list(f_end.values()) + list(b_end.values()) + free.tolist() if x > t]
        if future:
            t = min(future)
        elif not progressed:
            cap = cap + 1  # the cap alone blocks every stage: relax it rather than deadlock
    return orders
