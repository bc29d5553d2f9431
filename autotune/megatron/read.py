"""Read a Megatron-LM argument set from any accepted input (a file, a launch script, a mapping or
an argv list; :mod:`autotune.megatron.args` describes them). A module of its own because it uses
both readers: :mod:`autotune.megatron.script` builds on :mod:`autotune.megatron.args`."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.config.safe_yaml import load_yaml_text
from autotune.errors import ConfigError, require_file
from autotune.megatron.args import MegatronArgs, from_argv, from_mapping
from autotune.megatron.script import parse_script


def read_args(source: str | Path | dict | list | MegatronArgs) -> MegatronArgs:
    """Any accepted input -> :class:`MegatronArgs`. A path ending in ``.sh``/``.bash`` (or a file
    whose text is not a YAML/JSON mapping but calls ``pretrain_*.py``) is read as a launch script.

    Raises:
        ConfigError: missing file, unreadable text, no mapping and no training command.
    """
    if isinstance(source, MegatronArgs):
        return source
    if isinstance(source, dict):
        return from_mapping(source)
    if isinstance(source, (list, tuple)):
        return from_argv(list(source))
    p = require_file(source)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("not a text file", field=str(p), value=None, rule="yaml") from None
    if p.suffix in (".sh", ".bash") or (text.startswith("#!") and "pretrain_" in text):
        return parse_script(text, source=str(p))
    data = _load_mapping_text(text, p)
    if data is None:
        if "pretrain_" in text:
            return parse_script(text, source=str(p))
        raise ConfigError("neither a YAML/JSON mapping of Megatron arguments nor a launch script calling "
                          "pretrain_gpt.py / pretrain_mamba.py", field=str(p), value=None, rule="yaml")
    return from_mapping(data, source=str(p), text=text)


def _load_mapping_text(text: str, p: Path) -> dict | None:
    if p.suffix == ".json":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:   # nesting, over-long numbers
            raise ConfigError(f"not JSON autotune can read: {str(exc)[:200]}", field=str(p), value=None,
                              rule="yaml") from None
        return data if isinstance(data, dict) else None
    try:
        data = load_yaml_text(text, where=str(p))        # the bounded safe loader (size, depth, aliases)
    except ConfigError as exc:
        if exc.rule == "yaml" and "pretrain_" in text:
            return None                                  # a launch script, not YAML
        raise
    return data if isinstance(data, dict) else None
