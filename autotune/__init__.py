"""autotune: find the best pipeline-parallel layout for a MindFormers training run.

Public API (lazy, so ``import autotune`` does not load Optuna): :func:`load_config`,
:func:`load_profile`, :func:`evaluate`, :func:`search`, :class:`SearchResult`,
:func:`simulate_schedule` (the schedule simulator fed with [chunk][stage] arrays, no YAML).
"""

from __future__ import annotations

from typing import Any

from autotune.version import __version__ as __version__

_API = {"load_config", "load_profile", "resolve_profile", "evaluate", "search", "SearchResult", "load_megatron"}


def __getattr__(name: str) -> Any:
    if name in _API:
        # lazy facade: the API loads on first use, so "import autotune" stays light (no Optuna)
        from autotune import api  # noqa: PLC0415

        return getattr(api, name)
    if name == "simulate_schedule":
        from autotune.cost.public import simulate_schedule  # noqa: PLC0415 (lazy facade, as above)

        return simulate_schedule
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = sorted(_API | {"simulate_schedule"})
