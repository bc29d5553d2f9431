"""Schedule contract: a pipeline schedule is a pure table of per-stage op orders.

A schedule answers two questions for (P stages, V chunks per stage, m micro-batches):

1. ``order(P, V, m)``: for every stage, the list of ops it runs in order, each op
   ``(chunk, micro_batch, is_forward)``; every stage runs 2·m·V ops.
2. ``virtual_position(P, V)``: int [V][P], the position of mini-stage (chunk v, stage p) in the
   model's layer order (0 = holds the first layers). Forward of a micro-batch flows through
   positions 0, 1, …; backward flows back. Default (Megatron / MindSpore interleaving):
   position = v·P + p.

The event simulation (:mod:`autotune.cost.simulate`) turns the table into times. A new schedule is
one new module in this package that calls :func:`register`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Op = tuple[int, int, bool]  # (chunk, micro_batch, is_forward)
OrderFn = Callable[[int, int, int], list[list[Op]]]


class Schedule:
    """A named schedule (see module docstring)."""

    name: str = ""
    #: One-line description shown in reports.
    description: str = ""

    def order(self, P: int, V: int, m: int) -> list[list[Op]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def virtual_position(self, P: int, V: int) -> np.ndarray:
        """Default chunk-major placement: mini-stage (v, p) is pipeline position v·P + p."""
        return np.arange(V * P, dtype=np.int64).reshape(V, P)

    def check(self, P: int, V: int, m: int) -> None:
        """Raise ValueError when the schedule cannot run (P, V, m). Default: no rule."""


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
