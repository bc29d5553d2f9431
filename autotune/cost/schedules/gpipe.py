"""GPipe (Huang et al. 2019; MindSpore ``gpipe``): all forwards, then all backwards.

Every stage runs F for micro-batches 0..m-1 (chunk by chunk when V > 1), then the backwards in
reverse chunk order. Peak in flight: m micro-batches on every stage (× V chunks); balanced bubble
(P − 1)/m for V = 1 (Narayanan et al. 2021 §2.1).

P = 2, m = 2::

    stage 0: F0 F1 .. .. B0 B1
    stage 1:    F0 F1 B0 B1
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, register


class GPipe(Schedule):
    name = "gpipe"
    description = "GPipe: all forwards, then all backwards"

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        fwd: list[Op] = [(v, j, True) for v in range(V) for j in range(m)]
        bwd: list[Op] = [(v, j, False) for v in reversed(range(V)) for j in range(m)]
        return [fwd + bwd for _ in range(P)]

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        return np.full(P, V * m, dtype=np.int64)


register(GPipe())
