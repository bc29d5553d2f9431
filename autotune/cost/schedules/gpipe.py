"""GPipe (Huang et al. 2019; MindSpore ``gpipe``): all forwards, then all backwards.

Every stage runs F for micro-batches 0..m-1 (chunk by chunk when V > 1), then the backwards in
reverse. Peak in flight: m micro-batches on every stage (× V chunks).
"""

from __future__ import annotations

from autotune.cost.schedules._base import Op, Schedule, register


class GPipe(Schedule):
    name = "gpipe"
    description = "GPipe: all forwards, then all backwards"

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        fwd: list[Op] = [(v, j, True) for v in range(V) for j in range(m)]
        bwd: list[Op] = [(v, j, False) for v in reversed(range(V)) for j in range(m)]
        return [fwd + bwd for _ in range(P)]


register(GPipe())
