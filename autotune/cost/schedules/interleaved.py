"""Interleaved 1F1B (Narayanan et al. 2021 §2.2; Megatron ``forward_backward_pipelining_with_interleaving``),
the order MindSpore runs for ``pipeline_scheduler: 1f1b`` with ``pipeline_interleave: true``, and
its "less memory" variant (MindSpore's interleave with forwards moved later; SAPP ``-lm 1``).

Micro-batches are taken in groups of N = P (``microbatch_group_size_per_vp_stage``). The forward
order of every stage walks, group by group, chunk 0 for the group's micro-batches, then chunk 1, …;
the backward order is the same with the chunks reversed.

- Megatron / large memory: stage i runs ``min(2·(P - i - 1) + (V - 1)·N, V·m)`` warm-up forwards,
  then alternates one forward and one backward, then drains. Peak in flight on stage i:
  ``min(V·m, (V+1)·P - 1 - 2i)`` chunk-micro-batches (cost-model reference §2.3, §3.2).
- Less memory: warm-up ``(V - 1)·P + (P - i - 1)``, so the peak is ``V·P - i`` chunk-micro-batches
  (chunks 0..V-2: P each, last chunk P - i; reference §3.2): stage 0 holds L layer-equivalents,
  no interleaving penalty, at the price of a later first backward on the early stages.

P = 2, V = 2, m = 2 (Fv.j: chunk v of micro-batch j), Megatron order::

    stage 0: F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1
    stage 1: F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 B0.0 B0.1

Runnable when m >= P and m % P == 0 (Megatron with N = P; :func:`vpp_group_rule` states the
general rule for N).
"""

from __future__ import annotations

import numpy as np

from autotune.cost.schedules._base import Op, Schedule, SizeError, one_f_one_b_order, one_f_one_b_table, register


def vpp_group_rule(p: int, m: int, n: int) -> tuple[bool, str]:
    """Megatron's rule for ``microbatch_group_size_per_vp_stage`` N (reference §2.3).

    Valid iff ``p <= N <= m`` and ``m % N`` is 0 or >= p (Megatron after commit 4295be1,
    2024-11-01; before it: m % p == 0 with N = p). Returns (valid, reason).
    """
    if n < p:
        return False, f"N={n} < p={p}"
    if n > m:
        return False, "N>m"
    r = m % n
    if r == 0:
        return True, "m%N==0"
    if r >= p:
        return True, f"m%N={r} (>= p)"
    return False, f"m%N={r} (0<{r}<p)"


def check_interleaved(P: int, V: int, m: int) -> None:
    """Raise SizeError (micro_batch_num) unless interleaving can run: m >= P and m % P == 0 (Megatron with
    N = P)."""
    if m < P or m % P != 0:
        raise SizeError(f"interleaved 1F1B needs micro_batch_num to be a multiple of pipeline_stage "
                        f"(got micro_batch_num={m}, pipeline_stage={P})", "micro_batch_num", m)


def _sequences(P: int, V: int, m: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Forward and backward (chunk, micro_batch) orders shared by all stages."""
    N = P
    fwd: list[tuple[int, int]] = []
    for g in range(0, m, N):
        group = range(g, min(g + N, m))
        for v in range(V):
            fwd.extend((v, j) for j in group)
    bwd = [(V - 1 - v, j) for v, j in fwd]
    return fwd, bwd


def interleaved_order(P: int, V: int, m: int) -> list[list[Op]]:
    """Per-stage interleaved 1F1B op order, Megatron warm-up (see module docstring)."""
    fwd, bwd = _sequences(P, V, m)
    return one_f_one_b_table(P, fwd, bwd, [2 * (P - i - 1) + (V - 1) * P for i in range(P)])


def less_memory_order(P: int, V: int, m: int) -> list[list[Op]]:
    """Per-stage interleaved order with the less-memory warm-up (see module docstring)."""
    fwd, bwd = _sequences(P, V, m)
    return one_f_one_b_table(P, fwd, bwd, [(V - 1) * P + (P - i - 1) for i in range(P)])


class InterleavedLessMemory(Schedule):
    """Interleaved 1F1B, less-memory warm-up. Not a MindSpore ``pipeline_scheduler`` value: SAPP's
    name for the variant MindSpore's interleave runs (``-lm 1``); select it explicitly."""

    name = "1f1b_less_memory"
    description = "interleaved 1F1B with less-memory warm-up (peak V·P − i chunk-micro-batches)"

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:
        if V == 1:
            return one_f_one_b_order(P, V, m)
        return less_memory_order(P, V, m)

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """min(V·m, V·P − i) (reference §3.2, SAPP less memory)."""
        return np.minimum(V * m, V * P - np.arange(P))

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        super().check(P, V, m, k)
        if V > 1:
            check_interleaved(P, V, m)


register(InterleavedLessMemory())
