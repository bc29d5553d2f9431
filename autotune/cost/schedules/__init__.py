"""Pipeline schedules, registered by MindFormers ``pipeline_scheduler`` name.

Importing this package registers every module in it; see :mod:`._base` for the contract.
"""

from __future__ import annotations

import importlib
import pkgutil

from autotune.cost.schedules._base import KNOBS, W, Op, Schedule, SizeError, get_schedule, register, registered

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["KNOBS", "W", "Op", "Schedule", "SizeError", "get_schedule", "register", "registered"]
