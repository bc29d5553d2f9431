"""Canonical pipeline layout: layers and recompute counts per mini-stage, shape [V][P].

V = ``pp_interleave_num`` (interleave chunks), P = ``pipeline_stage``. Order is MindFormers' own:
chunk-major, mini-stage (v, p) holds the layers after those of (v, p-1) — chunk 0 over stages
0..P-1, then chunk 1, and so on (MindFormers ``LayerSetting``; shared/spec/mindformers-layer-setting.md
§2.1). Recompute counts mean "the first r layers of that mini-stage" (§3.3).

This module covers the common forms (offset 0 / 1-D / 2-D; recompute bool / 1-D / 2-D counts /
string list / dict of pattern -> counts) with the r1.8 checks; the complete per-version rule set
lives in :mod:`autotune.config.layer_setting`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.errors import ConfigError

OFFSET_FIELD = "model.model_config.offset"
_HUGE = 2**31 - 1


@dataclass(frozen=True)
class Layout:
    """A normalized layout. All arrays are int64 of shape [V][P].

    Attributes:
        layers_vp: layers per mini-stage (>= 0, sums to num_layers).
        recompute_vp: fully recomputed layers (the first r of the mini-stage).
        select_vp: layers with select recompute (per pattern: ``select_patterns``; this array is
            the elementwise max over patterns, the count the cost model uses).
        comm_vp: layers with select comm recompute (max over patterns).
        select_patterns / comm_patterns: pattern -> [V][P] count table, as MindFormers formats them.
    """

    layers_vp: np.ndarray
    recompute_vp: np.ndarray
    select_vp: np.ndarray
    comm_vp: np.ndarray
    select_patterns: dict[str, np.ndarray] = field(default_factory=dict)
    comm_patterns: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def vpp(self) -> int:
        return int(self.layers_vp.shape[0])

    @property
    def pp(self) -> int:
        return int(self.layers_vp.shape[1])

    @property
    def num_layers(self) -> int:
        return int(self.layers_vp.sum())

    def offset_vp(self) -> np.ndarray:
        """Offsets against the even split base = N // (P·V), shape [V][P]."""
        base = self.num_layers // (self.pp * self.vpp)
        return self.layers_vp - base

    def key(self) -> tuple:
        """Hashable identity (layers and the three count tables)."""
        return (self.layers_vp.tobytes(), self.recompute_vp.tobytes(), self.select_vp.tobytes(),
                self.comm_vp.tobytes(), self.layers_vp.shape)


def layers_from_offset(num_layers: int, pp: int, vpp: int, offset: Any, *,
                       field_name: str = OFFSET_FIELD) -> np.ndarray:
    """Layers per mini-stage [V][P] = N // (P·V) + offset, with MindFormers r1.8's checks.

    Accepted offset forms: scalar 0 (or a scalar equal to the remainder when P·V = 1), 1-D of
    length P when V = 1 (or when it sums to 0 so broadcasting is exact), 2-D [V][P] (one row when
    V = 1). Strict: the forms MindFormers silently mis-counts are rejected.

    Raises:
        ConfigError: R_OFFSET_SHAPE_PP / R_OFFSET_SHAPE_VPP / R_OFFSET_SUM / R_OFFSET_OVERCOUNT /
            R_STAGE_NEGATIVE / R_STAGE_EMPTY_MIDDLE / R_RECOMPUTE_TYPE (non-integer offset).
    """
    total = pp * vpp
    base, rem = divmod(num_layers, total)
    if total <= 1:
        return np.array([[num_layers]], dtype=np.int64)
    try:
        arr = np.asarray(offset)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
            raise TypeError
    except (TypeError, ValueError):
        raise ConfigError(f"must be an integer, a list of {pp} integers or a [{vpp}][{pp}] table of "
                          f"integers, got {offset!r}", field=field_name, value=offset,
                          rule="R_OFFSET_TYPE") from None
    arr = arr.astype(np.int64)
    if arr.ndim >= 1 and arr.shape[-1] != pp:
        raise ConfigError(f"last dimension must equal pipeline_stage = {pp}, got shape "
                          f"{list(arr.shape)} ({offset!r})", field=field_name, value=offset,
                          rule="R_OFFSET_SHAPE_PP")
    if arr.ndim >= 2 and (arr.ndim > 2 or arr.shape[0] != vpp):
        raise ConfigError(f"rows must equal pp_interleave_num = {vpp}, got shape {list(arr.shape)} "
                          f"({offset!r})", field=field_name, value=offset, rule="R_OFFSET_SHAPE_VPP")
    if int(arr.sum()) != rem:
        raise ConfigError(f"offset must sum to num_layers % (pipeline_stage × pp_interleave_num) = "
                          f"{num_layers} % {total} = {rem}, got {int(arr.sum())}",
                          field=field_name, value=offset, rule="R_OFFSET_SUM")
    full = np.broadcast_to(arr, (vpp, pp)).astype(np.int64)
    if int(full.sum()) != rem:
        raise ConfigError(f"a {'scalar' if arr.ndim == 0 else '1-D'} offset is added to every "
                          f"{'mini-stage' if arr.ndim == 0 else 'chunk'}, so it places "
                          f"{base * total + int(full.sum())} layers, not {num_layers}; give a "
                          f"[{vpp}][{pp}] table", field=field_name, value=offset,
                          rule="R_OFFSET_OVERCOUNT")
    layers = base + full
    flat = layers.reshape(-1)
    if flat[0] < 0 or flat[-1] < 0:
        raise ConfigError(f"the first and last mini-stage must hold >= 0 layers, got {layers.tolist()}",
                          field=field_name, value=offset, rule="R_STAGE_NEGATIVE")
    if (flat < 0).any():
        raise ConfigError(f"mini-stages must hold >= 0 layers, got {layers.tolist()}",
                          field=field_name, value=offset, rule="R_STAGE_NEGATIVE")
    if total > 2 and (flat[1:-1] < 1).any():
        raise ConfigError(f"every mini-stage other than the first and last must hold >= 1 layer "
                          f"(offset >= {1 - base}), got {layers.tolist()}", field=field_name,
                          value=offset, rule="R_STAGE_EMPTY_MIDDLE")
    return layers


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def count_table(spec: Any, layers_vp: np.ndarray, *, field_name: str) -> np.ndarray:
    """MindFormers' count normaliser F (spec §3.1–3.2): a count spec -> [V][P] table.

    ``True`` = all layers, ``False`` = none, a list of strings = all layers; a 1-D list of ints or
    bools = per-stage counts dealt one at a time to chunk 0, 1, …, skipping full chunks (the
    interleave split); a 2-D list = per mini-stage counts (bools = all/none), capped at the
    mini-stage size. Shorter 1-D lists leave the missing stages at 0.

    Raises:
        ConfigError: R_RECOMPUTE_TYPE (form not accepted), R_RECOMPUTE_LEN (too many entries),
            R_RECOMPUTE_NEGATIVE (negative count: MindFormers would hang or select nothing).
    """
    vpp, pp = layers_vp.shape
    if isinstance(spec, bool):
        return layers_vp.copy() if spec else np.zeros_like(layers_vp)
    if isinstance(spec, (list, tuple)):
        if all(isinstance(x, str) for x in spec) and len(spec) > 0:
            return layers_vp.copy()
        if all(_is_int(x) or isinstance(x, bool) for x in spec):
            if len(spec) > pp:
                raise ConfigError(f"has {len(spec)} entries, more than pipeline_stage = {pp}",
                                  field=field_name, value=spec, rule="R_RECOMPUTE_LEN")
            out = np.zeros_like(layers_vp)
            for j, c in enumerate(spec):
                if c is True:
                    c = _HUGE
                elif c is False:
                    c = 0
                c = int(c)
                if c < 0:
                    raise ConfigError(f"counts must be >= 0, got {c} at stage {j}", field=field_name,
                                      value=spec, rule="R_RECOMPUTE_NEGATIVE")
                c = min(c, int(layers_vp[:, j].sum()))
                while c > 0:
                    for v in range(vpp):
                        if c > 0 and out[v, j] < layers_vp[v, j]:
                            out[v, j] += 1
                            c -= 1
            return out
        if all(isinstance(r, (list, tuple, bool)) for r in spec):
            if len(spec) > vpp:
                raise ConfigError(f"has {len(spec)} rows, more than pp_interleave_num = {vpp}",
                                  field=field_name, value=spec, rule="R_RECOMPUTE_LEN")
            out = np.zeros_like(layers_vp)
            for v, row in enumerate(spec):
                if isinstance(row, bool):
                    out[v] = layers_vp[v] if row else 0
                    continue
                if len(row) != pp:
                    raise ConfigError(f"row {v} has {len(row)} entries, expected pipeline_stage = {pp}",
                                      field=field_name, value=spec, rule="R_RECOMPUTE_LEN")
                for j, c in enumerate(row):
                    if isinstance(c, bool):
                        out[v, j] = layers_vp[v, j] if c else 0
                    elif _is_int(c):
                        if c < 0:
                            raise ConfigError(f"counts must be >= 0, got {c} at [{v}][{j}]",
                                              field=field_name, value=spec, rule="R_RECOMPUTE_NEGATIVE")
                        out[v, j] = min(int(c), int(layers_vp[v, j]))
                    else:
                        raise ConfigError(f"entries must be integers or booleans, got {c!r}",
                                          field=field_name, value=spec, rule="R_RECOMPUTE_TYPE")
            if len(spec) < vpp:
                raise ConfigError(f"has {len(spec)} rows, expected pp_interleave_num = {vpp}",
                                  field=field_name, value=spec, rule="R_RECOMPUTE_LEN")
            return out
    raise ConfigError(f"must be a bool, a list of per-stage counts or a [{vpp}][{pp}] table, got "
                      f"{spec!r}", field=field_name, value=spec, rule="R_RECOMPUTE_TYPE")


DEFAULT_SELECT = {True: ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"],
                  False: ["mlp\\.shared_experts\\.mul", "mlp\\.shared_experts\\.activation_func\\.silu",
                          "mlp\\.mul", "mlp\\.activation_func\\.silu"]}
DEFAULT_COMM = [".*\\.norm"]


def pattern_tables(spec: Any, layers_vp: np.ndarray, defaults: list[str], *,
                   field_name: str) -> dict[str, np.ndarray]:
    """select_recompute / select_comm_recompute -> {pattern: [V][P] table} (spec §4.1).

    A list of strings gives those patterns with all layers; a dict maps pattern -> count spec;
    anything else applies the whole value to the default patterns.
    """
    if isinstance(spec, (list, tuple)) and all(isinstance(x, str) for x in spec):
        return {p: layers_vp.copy() for p in spec}
    if isinstance(spec, dict):
        return {str(k): count_table(v, layers_vp, field_name=f"{field_name}.{k}") for k, v in spec.items()}
    table = count_table(spec, layers_vp, field_name=field_name)
    return {p: table.copy() for p in defaults}


def _max_table(tables: dict[str, np.ndarray], like: np.ndarray) -> np.ndarray:
    if not tables:
        return np.zeros_like(like)
    return np.max(np.stack(list(tables.values())), axis=0)


def layout_from_values(num_layers: int, pp: int, vpp: int, *, offset: Any = 0, recompute: Any = False,
                       select_recompute: Any = False, select_comm_recompute: Any = False,
                       use_legacy: bool = True) -> Layout:
    """Normalize MindFormers values into a :class:`Layout` (see module docstring).

    Raises:
        ConfigError: see :func:`layers_from_offset` and :func:`count_table`.
    """
    layers = layers_from_offset(num_layers, pp, vpp, offset)
    rec = count_table(recompute, layers, field_name="recompute_config.recompute")
    sel = pattern_tables(select_recompute, layers, DEFAULT_SELECT[use_legacy],
                         field_name="recompute_config.select_recompute")
    com = pattern_tables(select_comm_recompute, layers, DEFAULT_COMM,
                         field_name="recompute_config.select_comm_recompute")
    return Layout(layers_vp=layers, recompute_vp=rec, select_vp=_max_table(sel, layers),
                  comm_vp=_max_table(com, layers), select_patterns=sel, comm_patterns=com)


def layout_from_config(cfg: Any) -> Layout:
    """:func:`layout_from_values` on a :class:`~autotune.config.training.TrainingConfig`."""
    return layout_from_values(cfg.num_layers, cfg.pipeline_stage, cfg.pp_interleave_num,
                              offset=cfg.offset, recompute=cfg.recompute,
                              select_recompute=cfg.select_recompute,
                              select_comm_recompute=cfg.select_comm_recompute,
                              use_legacy=cfg.use_legacy)


def make_layout(layers_vp: Any, recompute_vp: Any = None, select_vp: Any = None,
                comm_vp: Any = None) -> Layout:
    """Build a layout from explicit [V][P] tables (counts are capped at the mini-stage size)."""
    layers = np.atleast_2d(np.asarray(layers_vp, dtype=np.int64))
    def t(x: Any) -> np.ndarray:
        if x is None:
            return np.zeros_like(layers)
        return np.minimum(np.atleast_2d(np.asarray(x, dtype=np.int64)), layers)
    return Layout(layers_vp=layers, recompute_vp=t(recompute_vp), select_vp=t(select_vp), comm_vp=t(comm_vp))
