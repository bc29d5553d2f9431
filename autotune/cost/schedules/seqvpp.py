"""seqvpp (MindSpore ``pipeline_scheduler: seqvpp``): seqpipe with interleaving, as we model it.

The references give the name and the rules only (cost-model reference §3.1, layer-setting spec §7:
seqvpp needs ``seq_split_num > 1``; MindFormers' ``check_rules`` rejects it otherwise), not the
op order MindSpore runs. What we model is the composition of the two schedules this package
already has, and it is an approximation of MindSpore's:

- the scheduling unit is seqpipe's: one sequence chunk of one micro-batch (unit = j·k + s for
  micro-batch j, chunk s of k = ``seq_split_num``), 1/k of the mini-stage's time and activation;
- the order is interleaved 1F1B's (:mod:`.interleaved`, Megatron order, the one ``1f1b`` uses
  with ``pp_interleave_num > 1``) over those units: units are taken in groups of
  G = k·⌈P/k⌉ (the fewest whole micro-batches with G >= P, so that a micro-batch never straddles
  two groups); the forward walk runs, group by group, chunk 0 for the group's units, then
  chunk 1, …; the backward walk is the same with the chunks reversed and, as in seqpipe, each
  micro-batch's sequence chunks in reverse order (a later chunk's attention read the earlier
  chunks' K/V, so its gradient flows back first);
- stage i runs ``2·(P − i − 1) + (V − 1)·G + (k − 1)`` warm-up forwards (interleaved 1F1B's
  warm-up, plus seqpipe's k − 1 so that the first backward, of the micro-batch's last chunk, has
  its forward), then alternates one forward and one backward, then drains.

With V = 1 it is exactly seqpipe; with k = 1 it would be interleaved 1F1B (but k = 1 is rejected,
as MindFormers does). Runnable when ``m % ⌈P/k⌉ == 0`` (whole groups, the analogue of
interleaving's ``m % P == 0``). Peak in flight on stage i: warm-up + 1 =
``min(V·m·k, 2·(P − i − 1) + (V − 1)·G + k)`` units of 1/k micro-batch. Balanced stages give the
interleaved bubble over units, (P − 1)/(V·m·k) (tested). Not modelled, as for seqpipe: the K/V
gradient buffers of earlier chunks and the higher cost of later causal chunks.

P = 2, V = 2, m = 2, k = 2 (G = 2; Fv.js: chunk v, micro-batch j, sequence chunk s = a, b)::

    stage 0: F0.0a F0.0b F1.0a F1.0b F0.1a F0.1b B1.0b F1.1a B1.0a F1.1b B0.0b B0.0a B1.1b B1.1a B0.1b B0.1a
    stage 1: F0.0a F0.0b F1.0a F1.0b B1.0b F0.1a B1.0a F0.1b B0.0b F1.1a B0.0a F1.1b B1.1b B1.1a B0.1b B0.1a

``seqsmartvpp`` (even pipeline_stage only) is not modelled: nothing public says how its order or
placement differs from seqvpp (the even-pp rule suggests stages are paired, which we cannot
derive), and we do not guess one.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, SizeError, one_f_one_b_table, register
from autotune.cost.schedules.seqpipe import SeqPipe


def _group(P: int, k: int) -> int:
    """Units per group: G = k·⌈P/k⌉ (module docstring)."""
    return k * -(-P // k)


def seqvpp_sequences(P: int, V: int, m: int, k: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Forward and backward (chunk, unit) walks shared by all stages (module docstring)."""
    G = _group(P, k)
    U = m * k
    fwd: list[tuple[int, int]] = []
    bwd: list[tuple[int, int]] = []
    for g in range(0, U, G):
        units = list(range(g, min(g + G, U)))
        back = [j * k + s for j in range(g // k, min(g + G, U) // k) for s in reversed(range(k))]
        for v in range(V):
            fwd.extend((v, u) for u in units)
            bwd.extend((V - 1 - v, u) for u in back)
    return fwd, bwd


class SeqVpp(Schedule):
    name = "seqvpp"
    description = ("seqvpp (modelled): seqpipe's sequence-chunk units in interleaved 1F1B order "
                   "(approximation of MindSpore's)")
    splits_sequence = True

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        return self.units_order(P, V, m, 1)

    def units_order(self, P: int, V: int, m: int, k: int = 1) -> list[list[Op]]:
        if V == 1:
            return SeqPipe().units_order(P, 1, m, k)
        fwd, bwd = seqvpp_sequences(P, V, m, k)
        G = _group(P, k)
        return one_f_one_b_table(P, fwd, bwd, [2 * (P - i - 1) + (V - 1) * G + k - 1 for i in range(P)])

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """Units: V = 1 seqpipe's ``P − i + k − 1``; else ``2(P − i − 1) + (V − 1)·G + k``,
        both capped at V·m·k (module docstring)."""
        i = np.arange(P)
        if V == 1:
            return np.minimum(P - i + k - 1, m * k)
        return np.minimum(V * m * k, 2 * (P - i - 1) + (V - 1) * _group(P, k) + k)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        if k <= 1:
            raise SizeError("pipeline_scheduler seqvpp needs seq_split_num > 1 (use seqpipe, or "
                            f"seq_split_num > 1); got {k}", "seq_split_num", k)
        if V > 1 and m % -(-P // k) != 0:
            raise SizeError(f"seqvpp with pp_interleave_num > 1 needs micro_batch_num to be a multiple of "
                            f"ceil(pipeline_stage / seq_split_num) = {-(-P // k)} (got micro_batch_num={m})",
                            "micro_batch_num", m)


register(SeqVpp())
