"""Emit a layout as MindFormers keys in the canonical form (layer-setting spec §7).

- ``offset``: a [V][P] table (a [P] list when V = 1), against base = N // (P·V);
- ``recompute``: a [V][P] table of non-negative counts (each <= its mini-stage's layers);
- ``select_recompute`` / ``select_comm_recompute``: ``{pattern: [V][P] table}``.

This form behaves the same in every MindFormers release from r1.3 to master.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from autotune.config.layout import canonical_values  # noqa: F401 (re-exported: emit's callers use it here)


def tuned_block(values: dict[str, Any], *, scheduler: str = "1f1b") -> dict[str, Any]:
    """The nested MindFormers mapping of the tuned keys (what a user pastes)."""
    return {
        "model": {"model_config": {"offset": values["offset"],
                                   "pp_interleave_num": values["pp_interleave_num"]}},
        "parallel": {"pipeline_config": {"pipeline_interleave": values["pp_interleave_num"] > 1,
                                         "pipeline_scheduler": scheduler}},
        "recompute_config": {"recompute": values["recompute"],
                             "select_recompute": values["select_recompute"],
                             "select_comm_recompute": values["select_comm_recompute"]},
    }


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``base`` with ``update``'s leaves written over it (mappings merged recursively)."""
    out = copy.deepcopy(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class _Dumper(yaml.SafeDumper):
    pass


def _repr_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(not isinstance(x, dict) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _repr_list)


def dump_yaml(data: dict[str, Any], header: str = "") -> str:
    """YAML text with lists in flow style (``[[1, 0], [0, 1]]``) and keys in insertion order."""
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    return text
