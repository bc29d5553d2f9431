"""Interleaved 1F1B (Narayanan et al. 2021 §2.2; Megatron ``forward_backward_pipelining_with_interleaving``),
the order MindSpore runs for ``pipeline_scheduler: 1f1b`` with ``pipeline_interleave: true``.

Micro-batches are taken in groups of N = P (``microbatch_group_size_per_vp_stage``). The forward
order of every stage walks, group by group, chunk 0 for the group's micro-batches, then chunk 1, …;
the backward order is the same with the chunks reversed. Stage i runs
``min(2·(P - i - 1) + (V - 1)·N, V·m)`` warm-up forwards, then alternates one forward and one
backward, then drains. Peak in flight on stage i: ``min(V·m, (V+1)·P - 1 - 2i)`` chunk-micro-batches
(cost-model reference §2.3, §3.2). Runs when m % P == 0 or m % P >= ... (Megatron's rule:
N <= m and m % N in {0} ∪ [P, N)); with N = P that is m % P == 0.
"""

from __future__ import annotations

from autotune.cost.schedules._base import Op


def check_interleaved(P: int, V: int, m: int) -> None:
    """Raise ValueError unless interleaving can run: m >= P and m % P == 0 (Megatron with N = P)."""
    if m < P or m % P != 0:
        raise ValueError(f"interleaved 1F1B needs micro_batch_num to be a multiple of pipeline_stage "
                         f"(got micro_batch_num={m}, pipeline_stage={P})")


def _table(P: int, V: int, m: int) -> list[tuple[int, int]]:
    """Forward (micro_batch, chunk) order shared by all stages."""
    N = P
    out: list[tuple[int, int]] = []
    for g in range(0, m, N):
        group = range(g, min(g + N, m))
        for v in range(V):
            out.extend((j, v) for j in group)
    return out


def interleaved_order(P: int, V: int, m: int) -> list[list[Op]]:
    """Per-stage interleaved 1F1B op order (see module docstring)."""
    fwd = _table(P, V, m)
    bwd = [(j, V - 1 - v) for j, v in fwd]
    total = V * m
    stages: list[list[Op]] = []
    for i in range(P):
        w = min(2 * (P - i - 1) + (V - 1) * P, total)
        ops: list[Op] = [(v, j, True) for j, v in fwd[:w]]
        for k in range(total - w):
            j, v = fwd[w + k]
            ops.append((v, j, True))
            jb, vb = bwd[k]
            ops.append((vb, jb, False))
        ops.extend((v, j, False) for j, v in bwd[total - w:])
        stages.append(ops)
    return stages
