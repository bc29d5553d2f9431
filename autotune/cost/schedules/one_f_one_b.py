"""1F1B (PipeDream-flush / Megatron non-interleaved; MindSpore ``1f1b`` with V = 1).

Stage i runs ``w = min(P - i - 1, m)`` warm-up forwards, then alternates one forward and one
backward, then drains the remaining backwards (Narayanan et al. 2021 §2.2; Megatron
``forward_backward_pipelining_without_interleaving``). Peak in flight on stage i: min(P - i, m)
(cost-model reference §2.3, §3.2). With V > 1 the same name runs interleaved 1F1B
(:mod:`.interleaved`), as MindSpore does for ``pipeline_interleave: true``.

P = 3, m = 4 (F/B = forward/backward of micro-batch j)::

    stage 0: F0 F1 F2 B0 F3 B1 B2 B3
    stage 1:    F0 F1 B0 F2 B1 F3 B2 B3
    stage 2:       F0 B0 F1 B1 F2 B2 F3 B3
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, one_f_one_b_order, register
from autotune.cost.schedules.interleaved import check_interleaved, interleaved_order


class OneFOneB(Schedule):
    """1F1B, and interleaved 1F1B when V > 1 (MindSpore ``1f1b`` with ``pipeline_interleave``)."""

    name = "1f1b"
    description = "1F1B (interleaved 1F1B, Megatron order, when pp_interleave_num > 1)"

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        if V == 1:
            return one_f_one_b_order(P, V, m)
        return interleaved_order(P, V, m)

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """1F1B: min(P − i, m); interleaved: min(V·m, (V+1)·P − 1 − 2i) (reference §3.2)."""
        i = np.arange(P)
        if V == 1:
            return np.minimum(P - i, m)
        return np.minimum(V * m, (V + 1) * P - 1 - 2 * i)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        super().check(P, V, m, k)
        if V > 1:
            check_interleaved(P, V, m)


register(OneFOneB())
