"""Megatron-LM (and MindSpeed) runs: read their arguments, search what their flags can express,
print and write back the flags. See docs/megatron.md.

- :func:`load_megatron` (:func:`autotune.megatron.run.build_run`): YAML/JSON/dict/argv/launch
  script -> :class:`~autotune.megatron.run.MegatronRun`;
- :func:`search_megatron`: the search (:mod:`autotune.megatron.search`);
- :mod:`autotune.megatron.memory`: Megatron's theoretical memory estimate, reproduced;
- :mod:`autotune.megatron.rewrite`: write the tuned flags into the user's file.
"""

from __future__ import annotations

from typing import Any

from autotune.megatron.run import MegatronRun, build_run
from autotune.megatron.search import search_megatron as _search


def load_megatron(source: Any) -> Any:
    """A validated :class:`~autotune.megatron.run.MegatronRun` from a path (YAML, JSON or launch
    script), a mapping of argument names to values, or an argv list. Raises ConfigError."""
    return build_run(source)


def search_megatron(source: Any, **kwargs: Any) -> Any:
    """:func:`autotune.megatron.search.search_megatron` on any input :func:`load_megatron` takes."""
    run = source if isinstance(source, MegatronRun) else load_megatron(source)
    return _search(run, **kwargs)


__all__ = ["load_megatron", "search_megatron"]
