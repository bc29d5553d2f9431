"""Schedule contract: a pipeline schedule is a pure table of per-stage op orders.

A schedule answers, for (P stages, V chunks per stage, m micro-batches, k = ``seq_split_num``):

1. ``units_order(P, V, m, k)``: for every stage, the list of ops it runs in order, each op
   ``(chunk, unit, kind)``; a *unit* is one micro-batch (k = 1) or one sequence chunk of one
   micro-batch (unit = micro_batch·k + seq_chunk, seqpipe). ``kind`` is ``True`` for a forward,
   ``False`` for a backward and :data:`W` (the string ``"W"``) for a weight-gradient op. A schedule
   with ``splits_backward = False`` runs the whole backward as one op (``False``): 2·m·k·V ops per
   stage. With ``splits_backward = True`` (Zero Bubble, Qi et al. ICLR 2024) ``False`` is B, the
   input-gradient part, and ``W`` the weight-gradient part of the same (chunk, unit), which needs
   only that B and may run later to fill a bubble: 3·m·k·V ops per stage.
   Schedules that do not split sequences implement ``order(P, V, m)`` and reject k > 1.
2. ``virtual_position(P, V)``: int [V][P], the position of mini-stage (chunk v, stage p) in the
   model's layer order (0 = holds the first layers). Forward of a unit flows through positions
   0, 1, …; backward flows back. Default (Megatron / MindSpore interleaving): position = v·P + p.
   V-shaped schedules (zero_bubble_v) override it.
3. ``inflight_bound(P, V, m, k)``: int [P], the analytic bound on live chunk-units per stage (the
   in-flight table of the cost-model reference §3.2); the contract tests check the table never
   exceeds it.
4. ``ideal_bubble(P, V, m, k)``: the bubble of perfectly balanced stages without communication,
   as a fraction of compute (SAPP's ``ideal`` term: (P − 1)/(V·m·k) for the 1F1B family).
5. ``check(P, V, m, k)``: raise :class:`SizeError` (a ValueError naming the knob at fault) when
   the schedule cannot run these sizes.

The event simulation (:mod:`autotune.cost.simulate`) turns the table into times. A new schedule is
one new module in this package that calls :func:`register`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: Kind of a weight-gradient op in an op tuple (see module docstring, point 1).
W = "W"
Op = tuple[int, int, "bool | str"]  # (chunk, unit, kind): True = F, False = B (or whole backward), W
OrderFn = Callable[[int, int, int], list[list[Op]]]
#: The sizes a schedule is asked to run, by their MindFormers key: what :class:`SizeError` names.
KNOBS = ("pipeline_stage", "pp_interleave_num", "micro_batch_num", "seq_split_num")


class SizeError(ValueError):
    """A schedule cannot run these sizes; ``knob`` (one of :data:`KNOBS`) is the size whose
    ``value`` breaks its rule, so that a caller can name that key in its error (not always
    micro_batch_num), with :attr:`rule`."""

    def __init__(self, message: str, knob: str, value: int) -> None:
        if knob not in KNOBS:
            raise ValueError(f"unknown knob {knob!r}")
        super().__init__(message)
        self.knob = knob
        self.value = value

    @property
    def rule(self) -> str:
        """``R_MICRO_BATCH_MIN`` when the micro-batch count breaks the rule, else ``R_SCHEDULE``."""
        return "R_MICRO_BATCH_MIN" if self.knob == "micro_batch_num" else "R_SCHEDULE"


class Schedule:
    """A named schedule (see module docstring)."""

    name: str = ""
    #: One-line description shown in reports.
    description: str = ""
    #: Whether the schedule splits micro-batches along the sequence (``seq_split_num``).
    splits_sequence: bool = False
    #: Whether the backward is split into B (input gradient) and W (weight gradient) ops.
    splits_backward: bool = False

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def units_order(self, P: int, V: int, m: int, k: int = 1) -> list[list[Op]]:
        """Op order over units (see module docstring); default: ``order`` with k = 1."""
        return self.order(P, V, m)

    def virtual_position(self, P: int, V: int) -> np.ndarray:
        """Default chunk-major placement: mini-stage (v, p) is pipeline position v·P + p."""
        return np.arange(V * P, dtype=np.int64).reshape(V, P)

    def inflight_bound(self, P: int, V: int, m: int, k: int = 1) -> np.ndarray:
        """int [P] bound on live chunk-units per stage. Default: everything (V·m·k)."""
        return np.full(P, V * m * k, dtype=np.int64)

    def ideal_bubble(self, P: int, V: int, m: int, k: int = 1) -> float:
        """Balanced-stage bubble / compute: (P − 1)/(V·m·k) (Narayanan et al. 2021 §2.2; SAPP)."""
        return (P - 1) / (V * m * k)

    def check(self, P: int, V: int, m: int, k: int = 1) -> None:
        """Raise :class:`SizeError` when the schedule cannot run (P, V, m, k). Default: k must be 1."""
        if k != 1 and not self.splits_sequence:
            raise SizeError(f"schedule {self.name} does not split sequences; seq_split_num must be 1, "
                            f"got {k} (use pipeline_scheduler: seqpipe)", "seq_split_num", k)


_REGISTRY: dict[str, Schedule] = {}


def register(schedule: Schedule) -> Schedule:
    """Add a schedule instance to the registry under ``schedule.name``."""
    _REGISTRY[schedule.name] = schedule
    return schedule


def get_schedule(name: str) -> Schedule:
    """Look a schedule up by its MindFormers ``pipeline_scheduler`` name.

    Raises:
        KeyError: unknown name (message lists the registered ones).
    """
    if name not in _REGISTRY:
        raise KeyError(f"unknown schedule {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def registered() -> list[str]:
    """Names of all registered schedules."""
    return sorted(_REGISTRY)


def one_f_one_b_table(P: int, fwd: list[tuple[int, int]], bwd: list[tuple[int, int]],
                      warmup: list[int]) -> list[list[Op]]:
    """Generic warm-up / steady 1F1B / cool-down order.

    Args:
        P: stages.
        fwd, bwd: the forward and backward sequences of (chunk, unit) every stage walks.
        warmup: forwards before the first backward on each stage (capped at len(fwd)).

    Stage i runs ``warmup[i]`` forwards, then alternates one forward and one backward, then drains
    the remaining backwards (Narayanan et al. 2021 §2.2).
    """
    total = len(fwd)
    stages: list[list[Op]] = []
    for i in range(P):
        w = min(warmup[i], total)
        ops: list[Op] = [(v, u, True) for v, u in fwd[:w]]
        for j in range(total - w):
            v, u = fwd[w + j]
            ops.append((v, u, True))
            vb, ub = bwd[j]
            ops.append((vb, ub, False))
        ops.extend((v, u, False) for v, u in bwd[total - w:])
        stages.append(ops)
    return stages


def one_f_one_b_order(P: int, V: int, m: int) -> list[list[Op]]:
    """Per-stage 1F1B op order for V = 1: P - 1 - i warm-up forwards on stage i, then one forward
    and one backward in turn, then the remaining backwards (Narayanan et al. 2021;
    :mod:`autotune.cost.schedules.one_f_one_b`).

    Raises:
        SizeError: V != 1.
    """
    if V != 1:
        raise SizeError(f"1F1B without interleaving needs pp_interleave_num = 1, got {V}", "pp_interleave_num", V)
    seq = [(0, j) for j in range(m)]
    return one_f_one_b_table(P, seq, seq, [P - i - 1 for i in range(P)])
