"""autotune: find the best pipeline-parallel layout for a MindFormers training run.

Public API (lazy, so ``import autotune`` does not load Optuna): :func:`load_config`,
:func:`load_profile`, :func:`evaluate`, :func:`search`, :class:`SearchResult`,
:func:`simulate_schedule` (the schedule simulator fed with [chunk][stage] arrays, no YAML).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {"load_config", "load_profile", "resolve_profile", "evaluate", "search", "SearchResult", "load_megatron"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from autotune import api

        return getattr(api, name)
    if name == "simulate_schedule":
        from autotune.cost.public import simulate_schedule

        return simulate_schedule
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = sorted(_API | {"simulate_schedule"})
