"""A layout as MindFormers' canonical key values (layer-setting spec §7): the form every
release from r1.3 to master reads the same.

- ``offset``: a [V][P] table (a [P] list when V = 1), against base = N // (P·V);
- ``recompute``: a [V][P] table of non-negative counts (each <= its mini-stage's layers);
- ``select_recompute`` / ``select_comm_recompute``: ``{pattern: [V][P] table}``.
"""

from __future__ import annotations

from typing import Any

from autotune.config.layer_setting import DEFAULT_PATTERNS, emit_canonical
from autotune.config.layout import Layout


def canonical_values(layout: Layout, *, use_legacy: bool = True,
                     select_patterns: list[str] | None = None,
                     comm_patterns: list[str] | None = None) -> dict[str, Any]:
    """Flat dict {offset, pp_interleave_num, recompute, select_recompute, select_comm_recompute}
    from :func:`autotune.config.layer_setting.emit_canonical` (all-zero tables are written False).

    Pattern lists default to the layout's own patterns, else MindFormers' defaults for the model
    path (legacy or mcore). Each pattern gets the layout's select (comm) table.
    """
    mode = "legacy" if use_legacy else "mcore"
    sp = select_patterns if select_patterns is not None else (
        list(layout.select_patterns) or DEFAULT_PATTERNS[("select_recompute", mode)])
    cp = comm_patterns if comm_patterns is not None else (
        list(layout.comm_patterns) or DEFAULT_PATTERNS[("select_comm_recompute", mode)])
    block = emit_canonical(layout.layers_vp, layout.recompute_vp, {p: layout.select_vp for p in sp},
                           {p: layout.comm_vp for p in cp})
    mc, rc = block["model"]["model_config"], block["recompute_config"]
    return {"offset": mc["offset"], "pp_interleave_num": mc["pp_interleave_num"], **rc}
