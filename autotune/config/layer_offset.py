"""Offset rule family (layer-setting spec §1.3–1.5): offset → layers per mini-stage.

The offset is read as MindFormers' int32 array (fractions truncated toward zero), checked for shape
(last dimension = pipeline_stage, rows = pp_interleave_num) and sum (= num_layers mod
(pipeline_stage × pp_interleave_num)), broadcast to [vpp][pp], then checked per release: r1.8+ wants
head/tail mini-stages >= 0 and middle ones >= 1 layer; r1.3–r1.7 accept more (strict mode refuses
what they get wrong: over-counting scalar/1-D offsets, negative head/tail, fractions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.config.canonical import suggest_offset
from autotune.config.layer_types import LayerInputs, Warning_, rule_error, short_repr
from autotune.errors import ConfigError


def pp_hint(inp: LayerInputs) -> str:
    """Tells that pipeline_stage is 1 only because the key is missing (else empty)."""
    return ("" if inp.pp_given else " (pipeline_stage is 1 because parallel_config.pipeline_stage is not "
            "set: is the parallel_config section missing?)")


def offset_array(inp: LayerInputs, offset: Any, warns: list[Warning_], *, strict: bool = False) -> np.ndarray:
    """The offset as MindFormers' int32 array (§1.3): numeric, not ragged, within int32; fractions
    are truncated toward zero (strict: R_OFFSET_FLOAT; emulate: W_OFFSET_FLOAT).

    Raises:
        ConfigError: R_OFFSET_TYPE, R_OFFSET_FLOAT.
    """
    path = inp.path("offset")
    fix = "write an integer, a list of pipeline_stage integers or a [pp_interleave_num][pipeline_stage] table"

    def ok(x: Any, depth: int) -> bool:
        if isinstance(x, (list, tuple)):
            return depth < 8 and all(ok(y, depth + 1) for y in x)
        return isinstance(x, (int, float, bool, np.integer, np.floating, np.bool_))

    if offset is None or not ok(offset, 0):
        raise rule_error("R_OFFSET_TYPE", path, offset, "offset must be numeric", fix)
    try:
        arr = np.array(offset, dtype=np.float64)
    except (ValueError, TypeError):
        raise rule_error("R_OFFSET_TYPE", path, offset,
                         "offset is a ragged list (rows of different lengths); MindFormers' int32 "
                         "conversion raises ValueError", fix) from None
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) >= 2**31):
        raise rule_error("R_OFFSET_TYPE", path, offset, "offset values must fit in int32", fix)
    trunc = np.trunc(arr)
    if np.any(trunc != arr):
        msg = (f"offset has fractions; MindFormers silently truncates them toward zero to "
               f"{trunc.astype(np.int64).tolist()} (int32 conversion)")
        if strict:
            raise rule_error("R_OFFSET_FLOAT", path, offset, msg, "write the integers you mean")
        warns.append(Warning_("W_OFFSET_FLOAT", path, f"{msg} (got {short_repr(offset)}); write integers"))
    return trunc.astype(np.int64)


def _broadcast(inp: LayerInputs, n: int, pp: int, vpp: int, offset: Any, emulate: bool,
               warns: list[Warning_]) -> np.ndarray:
    """Checks 1–3 of §1.4 (shape, sum before broadcasting), then the [vpp][pp] broadcast; strict mode
    refuses a scalar / 1-D offset that over-counts after broadcasting (R_OFFSET_OVERCOUNT)."""
    path = inp.path("offset")
    total = pp * vpp
    base, rem = divmod(n, total)
    arr = offset_array(inp, offset, warns, strict=not emulate)
    if arr.ndim >= 1 and arr.shape[-1] != pp:
        raise rule_error("R_OFFSET_SHAPE_PP", path, offset,
                         f"offset's last dimension must equal pipeline_stage = {pp}, got {arr.shape[-1]}"
                         f"{pp_hint(inp)}",
                         f"give {pp} values per row, e.g. {suggest_offset(n, pp, vpp)}")
    if arr.ndim >= 2 and arr.shape[-2] != vpp:
        extra = (" (pp_interleave_num is forced to 1 because parallel.pipeline_config."
                 "pipeline_interleave is off)" if inp.vpp not in (None, 1) and vpp == 1 else "")
        raise rule_error("R_OFFSET_SHAPE_VPP", path, offset,
                         f"offset's row count must equal pp_interleave_num = {vpp}{extra}, got {arr.shape[-2]}",
                         f"give {vpp} row(s), e.g. {suggest_offset(n, pp, vpp)}")
    if arr.ndim > 2:
        raise rule_error("R_OFFSET_SHAPE_VPP", path, offset,
                         f"offset has {arr.ndim} dimensions; at most 2 ([pp_interleave_num][pipeline_stage])",
                         f"use a [{vpp}][{pp}] table, e.g. {suggest_offset(n, pp, vpp)}")
    s = int(arr.sum())
    if s != rem:
        raise ConfigError(
            f"offset must sum to num_layers % (pipeline_stage × pp_interleave_num) = {rem}, got {s} "
            f"({n} % ({pp} × {vpp}) = {rem}; offset {short_repr(offset)}); fix: change the offsets so they "
            f"sum to {rem}, "
            f"e.g. {suggest_offset(n, pp, vpp)}", field=path, value=offset, rule="R_OFFSET_SUM")
    full = np.broadcast_to(arr, (vpp, pp)).astype(np.int64)
    if arr.ndim == 1 and vpp > 1:
        warns.append(Warning_("W_1D_OFFSET_WITH_VPP", path,
                              f"a 1-D offset is repeated for each of the {vpp} chunks; write the "
                              f"[{vpp}][{pp}] table you mean, e.g. {suggest_offset(n, pp, vpp)}"))
    placed = base * total + int(full.sum())
    if placed != n:
        form = "scalar offset is added to every mini-stage" if arr.ndim == 0 else \
            "1-D offset is repeated for every chunk"
        msg = (f"the sum check passes before broadcasting, but the {form}: the layer table places "
               f"{placed} layers, not {n}, and the last mini-stage(s) silently get fewer")
        if not emulate:
            shape = f"a list of {pp} offsets" if vpp == 1 else f"the [{vpp}][{pp}] table"
            raise rule_error("R_OFFSET_OVERCOUNT", path, offset, msg,
                             f"give {shape}, e.g. {suggest_offset(n, pp, vpp)}")
        warns.append(Warning_("W_OFFSET_OVERCOUNT", path, msg))
    return full


def layers_from_offset(inp: LayerInputs, n: int, pp: int, vpp: int, offset: Any, version: str,
                       emulate: bool, warns: list[Warning_]) -> tuple[np.ndarray, np.ndarray]:
    """(layers per mini-stage as logged [vpp][pp], the broadcast offset) for N layers on pp × vpp,
    with the checks of ``version`` (§1.4: r1.8 ignores the offset when pp·vpp <= 1 and wants
    head/tail >= 0, middle >= 1 layers; r1.3–r1.7 accept more, strict mode refuses negatives).

    Raises:
        ConfigError: R_OFFSET_TYPE / FLOAT / SHAPE_PP / SHAPE_VPP / SUM / OVERCOUNT,
            R_STAGE_NEGATIVE, R_STAGE_EMPTY_MIDDLE.
    """
    path = inp.path("offset")
    total = pp * vpp
    base = n // total
    if version == "1.8" and total <= 1:
        if not offset_is_zero(offset):
            warns.append(Warning_("W_OFFSET_IGNORED_PP1", path,
                                  f"offset {short_repr(offset)} is ignored by MindFormers r1.8+ when "
                                  f"pipeline_stage × pp_interleave_num = {total} (all {n} layers on one "
                                  "stage); remove it (r1.3–r1.7 reject it unless it sums to 0)"))
        return np.full((vpp, pp), base, dtype=np.int64), np.zeros((vpp, pp), dtype=np.int64)
    full = _broadcast(inp, n, pp, vpp, offset, emulate, warns)
    layers = base + full
    flat = layers.reshape(-1)
    if version == "1.8":
        if flat[0] < 0:
            raise rule_error("R_STAGE_NEGATIVE", path, offset,
                             f"head mini-stage gets {flat[0]} layers; offset[0][0] must be >= -{base}",
                             f"raise it to >= -{base}, e.g. {suggest_offset(n, pp, vpp)}")
        if flat[-1] < 0:
            raise rule_error("R_STAGE_NEGATIVE", path, offset,
                             f"tail mini-stage gets {flat[-1]} layers; offset[-1][-1] must be >= -{base}",
                             f"raise it to >= -{base}, e.g. {suggest_offset(n, pp, vpp)}")
        if total > 2 and np.any(flat[1:-1] < 1):
            raise rule_error("R_STAGE_EMPTY_MIDDLE", path, offset,
                             f"a middle mini-stage gets fewer than 1 layer (layers per stage "
                             f"{layers.tolist()}); middle offsets must be >= {1 - base}",
                             f"move layers so every middle mini-stage has >= 1, e.g. {suggest_offset(n, pp, vpp)}")
        return layers, full
    # r1.3-r1.7 accept negative / empty mini-stages
    if total > 2 and np.any(flat[1:-1] < 0):
        raise rule_error("R_STAGE_NEGATIVE", path, offset,
                         f"a middle mini-stage gets a negative layer count ({layers.tolist()}); the "
                         "cumulative table is then unsorted and MindFormers' placement is undefined",
                         f"use non-negative counts, e.g. {suggest_offset(n, pp, vpp)}")
    if flat[0] < 0 or flat[-1] < 0:
        msg = (f"the logged layers per stage {layers.tolist()} contain a negative count; MindFormers "
               f"r1.3–r1.7 accept it but place the layers differently than logged")
        if not emulate:
            raise rule_error("R_STAGE_NEGATIVE", path, offset, msg,
                             f"use non-negative counts, e.g. {suggest_offset(n, pp, vpp)}")
        warns.append(Warning_("W_STAGE_NEGATIVE", path, msg))
    if total > 2 and np.any(flat[1:-1] == 0):
        warns.append(Warning_("W_STAGE_EMPTY_MIDDLE", path,
                              f"a middle mini-stage holds 0 layers ({layers.tolist()}); accepted by "
                              f"r1.3–r1.7 but rejected by r1.8+; e.g. {suggest_offset(n, pp, vpp)}"))
    return layers, full


def offset_is_zero(offset: Any) -> bool:
    """An offset that is 0 everywhere (or empty, or not an array at all: False)."""
    try:
        arr = np.array(offset, dtype=np.float64)
    except (ValueError, TypeError):
        return False
    return bool(arr.size == 0 or np.all(arr == 0))


# ----------------------------------------------------------------------------------------------
# count normaliser F (§3.1-3.2)
