"""zero_bubble_v (MindSpore ``pipeline_scheduler: zero_bubble_v``): ZB-V of Qi et al. (Zero Bubble
Pipeline Parallelism, ICLR 2024, arXiv 2401.10241; "V-ZB" in Pipeline Parallelism with
Controllable Memory, NeurIPS 2024, arXiv 2405.15362): two chunks per stage placed in a V, and the
backward split into B (input gradient) and W (weight gradient).

Placement: chunk 0 of stage p is pipeline position p, chunk 1 of stage p is position 2P − 1 − p,
so chunk 1 runs the stages in reverse and the last layers (output layer, loss) sit on stage 0
(MindFormers r1.7+ mcore places head/MTP accordingly; layer-setting spec §2.4). The hop from
chunk 0 to chunk 1 on stage P − 1 (and back in backward) stays on one device: no p2p there.

B/W split: B of position q needs B of position q + 1 (the input gradient flows back); W of a
(chunk, unit) needs only its own B, on the same device, so W ops can wait and fill bubbles
(Qi et al. §2). A unit's activation stays alive until its W ends (W reads the layer inputs and
the output gradients); the backward's workspace (e.g. a fully recomputed layer re-materialized)
is held from the start of B to the end of W (:mod:`autotune.cost.simulate`).

Order (ours; the paper gives ZB-V as a picture and an automatic scheduler, not a table): list
scheduling in unit time steps with T_F = T_B = T_W (the ZB-V design point). At each step every
stage that is free starts, in this priority:

1. a ready forward, deepest pipeline position first (chunk 1 before chunk 0), while the stage
   holds fewer than 2·P chunk-units (a unit counts from its F until its W ends; 2P chunk-units =
   P whole micro-batches, the 1F1B peak: ZB-V keeps 1F1B's activation memory, reference §3.2,
   §4 ZB table "activation 1×");
2. else a ready B, shallowest position first (chunk 0 before chunk 1: it finishes a micro-batch);
3. else the oldest pending W.

Each mini-stage runs its F, B and W in micro-batch order. The order is computed once per
(P, m) and then simulated with the real F/B/W times, as a runtime with a fixed schedule does.
With T_F = T_B = T_W = t and no p2p it gives the step time 6·m·t + (P − 1)·t (tested for
P = 2..8), the least possible for one step: the last stage cannot start before P − 1 forwards
and then runs its 6·m ops without a gap. The README table's ZBV 0 counts no fill (ZB's optimizer
post-validation overlaps it with the neighbouring steps); within one step the idle time is the
fill, (P − 1)·t per stage, i.e. (P − 1)/(6m) of compute (:meth:`ZeroBubbleV.ideal_bubble`).

P = 2, m = 4, T_F = T_B = T_W (F/B/W chunk 0, f/b/w chunk 1, digit = micro-batch)::

    stage 0: F0 F1 F2 f0 b0 w0 f1 B0 b1 W0 F3 B1 w1 f2 b2 W1 w2 B2 W2 f3 b3 w3 .  B3 W3
    stage 1: .  F0 f0 F1 f1 b0 B0 w0 F2 b1 B1 W0 f2 w1 F3 b2 B2 W1 f3 w2 W2 b3 B3 w3 W3

(rendered by the order's unit-time simulation; step 25 = 6·4 + 1.)

MindFormers rules (r1.7+, layer-setting spec §2.4): pp_interleave_num = 2, pipeline_stage >= 2,
micro_batch_num >= 2·pipeline_stage.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.cost.schedules._base import W, Op, Schedule, SizeError, register


@lru_cache(maxsize=64)
def zbv_order(P: int, m: int) -> tuple[tuple[Op, ...], ...]:
    """Per-stage ZB-V op order (module docstring), as tuples of (chunk, micro_batch, kind).

    Unit-time list scheduling over positions pos[0, p] = p, pos[1, p] = 2P − 1 − p. Cached.
    """
    last = 2 * P - 1
    pos = ((np.arange(P)), (last - np.arange(P)))
    at = {}
    for v in range(2):
        for p in range(P):
            at[int(pos[v][p])] = (v, p)
    never = 1 << 60
    f_end = [[[never] * m for _ in range(P)] for _ in range(2)]
    b_end = [[[never] * m for _ in range(P)] for _ in range(2)]
    next_f = [[0] * P for _ in range(2)]
    next_b = [[0] * P for _ in range(2)]
    pending: list[list[tuple[int, int]]] = [[] for _ in range(P)]
    live = [0] * P
    cap = [2 * P] * P
    orders: list[list[Op]] = [[] for _ in range(P)]
    total = 6 * m * P
    done = 0
    t = 0
    while done < total:
        picks = []
        for p in range(P):
            pick = None
            # 1. forwards, deepest position first (chunk 1 is deeper on every stage)
            if live[p] < cap[p]:
                for v in (1, 0):
                    j = next_f[v][p]
                    q = int(pos[v][p])
                    if j < m and (q == 0 or f_end[at[q - 1][0]][at[q - 1][1]][j] <= t):
                        pick = (v, True)
                        break
            # 2. B, shallowest position first
            if pick is None:
                for v in (0, 1):
                    j = next_b[v][p]
                    q = int(pos[v][p])
                    if j < m and f_end[v][p][j] <= t and (
                            q == last or b_end[at[q + 1][0]][at[q + 1][1]][j] <= t):
                        pick = (v, False)
                        break
            # 3. the oldest pending W
            if pick is None and pending[p]:
                pick = (pending[p][0][0], W)
            picks.append(pick)
        started = False
        for p, pick in enumerate(picks):
            if pick is None:
                continue
            v, kind = pick
            if kind is True:
                j = next_f[v][p]
                next_f[v][p] += 1
                f_end[v][p][j] = t + 1
                live[p] += 1
            elif kind is False:
                j = next_b[v][p]
                next_b[v][p] += 1
                b_end[v][p][j] = t + 1
                pending[p].append((v, j))
            else:
                v, j = pending[p].pop(0)
                live[p] -= 1
            orders[p].append((v, j, kind))
            done += 1
            started = True
        if not started and done < total:
            # only the memory cap blocks every stage: relax it rather than deadlock (never seen
            # for m >= 2P; the contract tests check the in-flight bound)
            cap = [c + 1 for c in cap]
        t += 1
    return tuple(tuple(o) for o in orders)


class ZeroBubbleV(Schedule):
    name = "zero_bubble_v"
    description = "ZB-V: V-shaped two-chunk placement, backward split into B and W (W fills bubbles)"
    splits_backward = True

    def virtual_position(self, P: int, V: int) -> np.ndarray:
        pos = np.empty((V, P), dtype=np.int64)
        pos[0] = np.arange(P)
        pos[1] = 2 * P - 1 - np.arange(P)
        return pos

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        return [list(s) for s in zbv_order(P, m)]

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """2·P chunk-units, a unit counted from its F to the end of its W (= P micro-batches of
        the whole stage, 1F1B's stage-0 peak; reference §3.2 ZB-V row, §4 "activation 1×")."""
        return np.full(P, min(2 * P, 2 * m), dtype=np.int64)

    def ideal_bubble(self, P: int, V: int, m: int, k: int = 1) -> float:
        """(P − 1)/(6·m): balanced stages with T_F = T_B = T_W = t (ZB-V's design point, Qi et al.
        README table) run 6·m·t per stage, and the step is 6·m·t + (P − 1)·t (the pipeline fill,
        the only idle time; 0 in the README, which overlaps it across steps)."""
        return (P - 1) / (6 * m)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        super().check(P, V, m, k)
        if V != 2 or P < 2 or m < 2 * P:
            knob, value = (("pp_interleave_num", V) if V != 2 else ("pipeline_stage", P) if P < 2
                           else ("micro_batch_num", m))
            raise SizeError(f"zero_bubble_v needs pp_interleave_num = 2, pipeline_stage >= 2 and "
                            f"micro_batch_num >= 2·pipeline_stage (got V={V}, P={P}, m={m})", knob, value)


register(ZeroBubbleV())
