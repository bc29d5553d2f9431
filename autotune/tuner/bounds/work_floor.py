"""The work floor: the average device's share of the step's compute (the busiest device has at
least that), a bound that costs nothing (pure numpy, no Optuna).

Every op of a step runs on one of the P devices, one op at a time, so the step time is at least
the busiest device's busy time, which is at least the average: with W the forward + backward ms of
one micro-batch through every layer, the head and the tail (each layer's backward at its least over
the recompute classes: recompute only adds replay),

    T >= m · W / P        (ms; any schedule, any V, any layer split, any recompute choice).

The ``seq_split_num`` k splits a micro-batch's ops into k parts of 1/k the time each, so the total
is the same. Memory is not looked at, so the floor is weak (it leaves out the pipeline bubble and
every recompute the budget forces): :func:`~autotune.tuner.bounds._base.tighten` gives it to a V
whose proofs would start after their deadline, so that a short ``--timeout`` still ends with a
finite bound for every V instead of running a slow first proof past the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.problem import Problem


def work_floor_ms(problem: Problem) -> float:
    """m · W / P (ms; module docstring): the least step time any layout of ``problem`` can have by
    the busiest device's work alone. Does not depend on V."""
    pa = problem.pa
    per_kind = pa.fwd_k + pa.bwd_kc.min(axis=1)  # [K] ms per micro-batch (replay >= 0: the no-recompute class)
    layers = float(per_kind @ pa.kind_prefix[:, -1].astype(np.float64))
    ends = pa.head.fwd_ms + pa.head.bwd_ms + pa.tail.fwd_ms + pa.tail.bwd_ms
    return problem.m * (layers + ends) / problem.P


@dataclass(frozen=True)
class WorkFloor:
    """:func:`work_floor_ms` as a :class:`~autotune.tuner.bounds._base.LowerBound` (every V)."""

    name: str = "work floor"

    def applies(self, problem: Problem, V: int) -> bool:
        return True

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome:
        return BoundOutcome(work_floor_ms(problem), None, {"work floor": 1})
