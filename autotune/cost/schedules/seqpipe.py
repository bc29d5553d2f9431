"""seqpipe (MindSpore ``pipeline_scheduler: seqpipe``, MindFormers "multi-pipeline interleaving").

Each micro-batch is cut along the sequence into k = ``seq_split_num`` chunks; a chunk is the
scheduling unit (unit = micro_batch·k + seq_chunk). Forwards run the units in order; backwards run
micro-batch by micro-batch with the sequence chunks reversed (a later chunk's attention read the
K/V of the earlier ones, so its gradient flows back first). Stage i runs ``P - i - 1 + k - 1``
warm-up forwards, then 1F1B: peak in flight ``P - i + k - 1`` units of 1/k micro-batch each
(cost-model reference §3.1, §3.2; SAPP). k = 1 is plain 1F1B.

Cost model: a unit takes 1/k of the mini-stage's forward/backward time and keeps 1/k of its
activation (attention cost grows with the chunk's position under a causal mask; the average is
used). Not modelled: the K/V gradient buffers of earlier chunks.

P = 2, m = 2, k = 2 (Fj.s: micro-batch j, sequence chunk s)::

    stage 0: F0.0 F0.1 F1.0 B0.1 F1.1 B0.0 B1.1 B1.0
    stage 1: F0.0 F0.1 B0.1 F1.0 B0.0 F1.1 B1.1 B1.0
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, SizeError, one_f_one_b_table, register


class SeqPipe(Schedule):
    name = "seqpipe"
    description = "seqpipe: sequence chunks (seq_split_num) as extra micro-batches, 1F1B order"
    splits_sequence = True

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        return self.units_order(P, V, m, 1)

    def units_order(self, P: int, V: int, m: int, k: int = 1) -> list[list[Op]]:
        fwd = [(0, u) for u in range(m * k)]
        bwd = [(0, j * k + s) for j in range(m) for s in reversed(range(k))]
        return one_f_one_b_table(P, fwd, bwd, [P - i - 1 + k - 1 for i in range(P)])

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """min(P − i + k − 1, m·k) units (reference §3.2, seqpipe)."""
        return np.minimum(P - np.arange(P) + k - 1, m * k)

    def ideal_bubble(self, P: int, V: int, m: int, k: int = 1) -> float:
        """(P − 1)/(m·k): the fill/drain is one unit (1/k micro-batch) per stage."""
        return (P - 1) / (m * k)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        if V != 1:
            raise SizeError(f"the seqpipe schedule is modelled without virtual stages (pp_interleave_num = 1), "
                            f"got {V}; for sequence chunks with virtual stages use pipeline_scheduler seqvpp",
                            "pp_interleave_num", V)
        if k < 1:
            raise SizeError(f"seq_split_num must be >= 1, got {k}", "seq_split_num", k)


register(SeqPipe())
