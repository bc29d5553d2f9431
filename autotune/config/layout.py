"""Canonical pipeline layout: layers and recompute counts per mini-stage, shape [V][P].

V = ``pp_interleave_num`` (interleave chunks), P = ``pipeline_stage``. Order is MindFormers' own:
chunk-major, mini-stage (v, p) holds the layers after those of (v, p-1) — chunk 0 over stages
0..P-1, then chunk 1, and so on (MindFormers ``LayerSetting``; shared/spec/mindformers-layer-setting.md
§2.1). Recompute counts mean "the first r layers of that mini-stage" (§3.3).

The normalization itself (every MindFormers form, per-version rules, strict checks) lives in
:mod:`autotune.config.layer_setting`; this module holds the result the cost model consumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np



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


def _max_table(tables: dict[str, np.ndarray], like: np.ndarray) -> np.ndarray:
    if not tables:
        return np.zeros_like(like)
    return np.max(np.stack(list(tables.values())), axis=0)


def layout_from_values(num_layers: int, pp: int, vpp: int, *, offset: Any = 0, recompute: Any = False,
                       select_recompute: Any = False, select_comm_recompute: Any = False,
                       use_legacy: bool = True, version: str = "1.8") -> Layout:
    """Normalize MindFormers values into a :class:`Layout` with the strict rules of MindFormers
    ``version`` (:func:`autotune.config.layer_setting.layout_tables`).

    ``select_vp`` / ``comm_vp`` are the elementwise max over the patterns' tables.

    Raises:
        ConfigError: any LayerSetting rule (R_OFFSET_SUM, R_OFFSET_SHAPE_PP, R_RECOMPUTE_LEN, ...).
    """
    from autotune.config.layer_setting import layout_tables

    layers, rec, sel, com = layout_tables(num_layers, pp, vpp, offset=offset, recompute=recompute,
                                          select_recompute=select_recompute,
                                          select_comm_recompute=select_comm_recompute,
                                          use_legacy=use_legacy, version=version)
    layers = np.asarray(layers, dtype=np.int64)
    sel = {k: np.asarray(v, dtype=np.int64) for k, v in sel.items()}
    com = {k: np.asarray(v, dtype=np.int64) for k, v in com.items()}
    return Layout(layers_vp=layers, recompute_vp=np.asarray(rec, dtype=np.int64),
                  select_vp=_max_table(sel, layers), comm_vp=_max_table(com, layers),
                  select_patterns=sel, comm_patterns=com)


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
