"""zero_bubble_v (MindSpore ``pipeline_scheduler: zero_bubble_v``; ZB-V of Qi et al., ICLR 2024,
arXiv 2401.10241): two chunks per stage placed in a V.

Placement: chunk 0 of stage p is pipeline position p, chunk 1 of stage p is position 2P − 1 − p,
so chunk 1 runs the stages in reverse and the last layers (output layer, loss) sit on stage 0
(MindFormers r1.7+ mcore places head/MTP accordingly). The hop from chunk 0 to chunk 1 on stage
P − 1 (and back in backward) stays on one device: no p2p there.

Order: greedy (:mod:`._greedy`): a ready backward first (deepest position first), else a ready
forward (deepest first) while the stage holds fewer than 2·P chunk-micro-batches (= P whole
micro-batches, the 1F1B peak; ZB-V keeps 1F1B's activation memory, reference §3.2 and §4).
Backward is not split into B and W here (W stays inside backward), so the ideal zero bubble of
ZB-V is not reached; the V placement, the no-p2p turn and the memory balance are modelled.

MindFormers rules (r1.7+, shared/spec/mindformers-layer-setting.md): pp_interleave_num = 2,
pipeline_stage >= 2, micro_batch_num >= 2·pipeline_stage.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, register
from autotune.cost.schedules._greedy import greedy_order


@lru_cache(maxsize=64)
def _order(P: int, m: int) -> tuple[tuple[Op, ...], ...]:
    pos = ZeroBubbleV().virtual_position(P, 2)
    return tuple(tuple(s) for s in greedy_order(P, 2, m, pos, np.full(P, 2 * P)))


class ZeroBubbleV(Schedule):
    name = "zero_bubble_v"
    description = "ZB-V: V-shaped two-chunk placement, greedy 1F1B-like order (B and W not split)"

    def virtual_position(self, P: int, V: int) -> np.ndarray:
        pos = np.empty((V, P), dtype=np.int64)
        pos[0] = np.arange(P)
        pos[1] = 2 * P - 1 - np.arange(P)
        return pos

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        return [list(s) for s in _order(P, m)]

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """2·P chunk-micro-batches (= P micro-batches of the whole stage; reference §3.2 ZB-V)."""
        return np.full(P, min(2 * P, 2 * m), dtype=np.int64)

    def ideal_bubble(self, P: int, V: int, m: int, k: int = 1) -> float:
        """(P − 1)/(2·m): the interleaved closed form with V = 2 (an upper reference here, since
        B/W are not split; ZB-V's own ideal is 0, Qi et al. README table)."""
        return (P - 1) / (2 * m)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        super().check(P, V, m, k)
        if V != 2 or P < 2 or m < 2 * P:
            raise ValueError(f"zero_bubble_v needs pp_interleave_num = 2, pipeline_stage >= 2 and "
                             f"micro_batch_num >= 2·pipeline_stage (got V={V}, P={P}, m={m})")


register(ZeroBubbleV())
