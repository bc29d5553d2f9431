"""The canonical MindFormers form of a layout (layer-setting spec §7), and offset suggestions.

The canonical form (``offset`` as a [vpp][pp] table, full [vpp][pp] count tables, select/comm as
``{pattern: table}``) behaves the same in every MindFormers release from r1.3 to master. Pure numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.errors import ConfigError


def suggest_offset(num_layers: int, pp: int, vpp: int) -> list:
    """A valid r1.8 offset for N layers on pp×vpp mini-stages: the N mod (pp·vpp) extra layers go
    to the middle mini-stages first (row-major), then to the head and tail."""
    total = pp * vpp
    base, rem = divmod(num_layers, total)
    flat = [0] * total
    order = list(range(1, total - 1)) + [0, total - 1] if total > 2 else list(range(total))
    for k in order[:rem]:
        flat[k] += 1
    if vpp == 1:
        return flat
    return [flat[v * pp:(v + 1) * pp] for v in range(vpp)]


def emit_canonical(layers_vp: Any, recompute_vp: Any = None, select: dict[str, Any] | None = None,
                   comm: dict[str, Any] | None = None, *, zbv: bool = False) -> dict[str, Any]:
    """The canonical MindFormers keys for a layout (§7 of the spec), as a nested YAML mapping.

    ``layers_vp`` is [vpp][pp] layers per mini-stage in *physical* stage order (under zero_bubble_v
    row 1 is given per physical stage, as the offset is written). Emits ``offset`` as a [vpp][pp]
    table ([pp] list when vpp = 1), ``recompute`` and each select/comm pattern as full [vpp][pp]
    tables of non-negative ints capped at the mini-stage size (an all-zero ``recompute`` or an
    all-zero pattern dict is written as ``False``: same meaning, and seq pipe rejects a truthy
    ``recompute``), and ``pp_interleave_num`` (with
    ``pipeline_interleave: true`` when vpp > 1). This form behaves the same in r1.3 … master.

    Raises:
        ConfigError: R_STAGE_NEGATIVE / R_STAGE_EMPTY_MIDDLE when the layout cannot pass r1.8's
            checks (head/tail >= 0 layers, middle >= 1), R_TYPE for a malformed table.
    """
    try:
        layers = np.atleast_2d(np.asarray(layers_vp, dtype=np.int64))
    except (TypeError, ValueError):
        raise ConfigError("layers_vp must be a [vpp][pp] integer table", field="layers_vp",
                          value=layers_vp, rule="R_TYPE") from None
    if layers.ndim != 2 or layers.size == 0:
        raise ConfigError("layers_vp must be a [vpp][pp] integer table", field="layers_vp",
                          value=layers_vp, rule="R_TYPE")
    vpp, pp = layers.shape
    total = vpp * pp
    n = int(layers.sum())
    flat = layers.reshape(-1)
    if flat[0] < 0 or flat[-1] < 0 or np.any(flat < 0):
        raise ConfigError(f"layer counts must be >= 0, got {layers.tolist()}", field="layers_vp",
                          value=layers.tolist(), rule="R_STAGE_NEGATIVE")
    if total > 2 and np.any(flat[1:-1] < 1):
        raise ConfigError(f"middle mini-stages need >= 1 layer for r1.8, got {layers.tolist()}",
                          field="layers_vp", value=layers.tolist(), rule="R_STAGE_EMPTY_MIDDLE")
    if total > 1 and n < total:
        raise ConfigError(f"{n} layers cannot fill {total} mini-stages", field="layers_vp",
                          value=layers.tolist(), rule="R_NUM_LAYERS_MIN")
    base = n // total
    off = (layers - base).tolist()

    def table(t: Any) -> list:
        if t is None or t is False:
            return np.zeros_like(layers).tolist()
        if t is True:
            return layers.tolist()
        arr = np.atleast_2d(np.asarray(t, dtype=np.int64))
        if arr.shape != layers.shape:
            raise ConfigError(f"recompute table must have shape [{vpp}][{pp}], got {list(arr.shape)}",
                              field="recompute_vp", value=t, rule="R_RECOMPUTE_LEN")
        return np.clip(arr, 0, layers).tolist()

    def patterns(d: dict[str, Any] | None) -> Any:
        tables = {str(k): table(v) for k, v in (d or {}).items()}
        return tables if any(np.any(np.asarray(t)) for t in tables.values()) else False

    rec = table(recompute_vp)
    # an all-zero table is written as False: seq pipe rejects any truthy recompute value
    rc: dict[str, Any] = {"recompute": rec if np.any(np.asarray(rec)) else False,
                          "select_recompute": patterns(select),
                          "select_comm_recompute": patterns(comm)}
    mc: dict[str, Any] = {"offset": off[0] if vpp == 1 else off, "pp_interleave_num": vpp}
    out: dict[str, Any] = {"model": {"model_config": mc}, "parallel_config": {"pipeline_stage": pp},
                           "recompute_config": rc}
    if vpp > 1 or zbv:
        out["parallel"] = {"pipeline_config": {"pipeline_interleave": True}}
    return out
