"""Canonical pipeline layout: layers and recompute counts per mini-stage, shape [V][P].

V = ``pp_interleave_num`` (interleave chunks), P = ``pipeline_stage``. Order is MindFormers' own:
chunk-major, mini-stage (v, p) holds the layers after those of (v, p-1) — chunk 0 over stages
0..P-1, then chunk 1, and so on (MindFormers ``LayerSetting``; shared/spec/mindformers-layer-setting.md
§2.1). Recompute counts mean "the first r layers of that mini-stage" (§3.3).

The normalization itself (every MindFormers form, per-version rules, strict checks) lives in
:mod:`autotune.config.layer_setting`; this module holds the result the cost model consumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autotune.config.layer_setting import layout_tables, normalize, split_mtp_layers
from autotune.config.canonical import emit_canonical
from autotune.config.layer_types import AUTOTUNE_SCHEDULERS, DEFAULT_PATTERNS, LayerInputs, LayerSettingResult
from autotune.errors import ConfigError


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
        mtp_in_split: MTP layers MindFormers counts in the layer split of this config (legacy
            ``mtp_depth``; mcore on r1.6/dev), placed after the decoder layers of the last
            mini-stage; ``layers_vp`` holds decoder layers only, and the emitted ``offset`` adds
            these back (:func:`autotune.emit.yaml_block.canonical_values`).
        warnings: what the config reading warned about (objects with ``code``, ``field``,
            ``message``).
    """

    layers_vp: np.ndarray
    recompute_vp: np.ndarray
    select_vp: np.ndarray
    comm_vp: np.ndarray
    select_patterns: dict[str, np.ndarray] = field(default_factory=dict)
    comm_patterns: dict[str, np.ndarray] = field(default_factory=dict)
    mtp_in_split: int = 0
    warnings: tuple = ()

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
    """Normalize bare MindFormers values into a :class:`Layout` with the strict rules of MindFormers
    ``version`` (:func:`autotune.config.layer_setting.layout_tables`; no MTP, no exclude keys: use
    :func:`layout_from_config` for a whole config).

    ``select_vp`` / ``comm_vp`` are the elementwise max over the patterns' tables.

    Raises:
        ConfigError: any LayerSetting rule (R_OFFSET_SUM, R_OFFSET_SHAPE_PP, R_RECOMPUTE_LEN, ...).
    """
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


def layer_inputs_of(cfg: Any) -> LayerInputs:
    """The LayerSetting inputs of a :class:`~autotune.config.training.TrainingConfig`: those read
    from its YAML (``cfg.layer_inputs``, the reader ``check`` uses), with the modelled fields of the
    config object written over them (a caller may have changed those). autotune's own schedule names
    (``1f1b_less_memory``) are ``1f1b`` to MindFormers' LayerSetting."""
    base = cfg.layer_inputs if isinstance(cfg.layer_inputs, LayerInputs) else LayerInputs(cfg.num_layers)
    mb = base.micro_batch_num if base.micro_batch_num is None and cfg.micro_batch_num == 1 else cfg.micro_batch_num
    return replace(base, num_layers=cfg.num_layers, pp=cfg.pipeline_stage, vpp=cfg.pp_interleave_num_raw,
                   pipeline_interleave=cfg.pipeline_interleave,
                   pipeline_scheduler=("1f1b" if cfg.pipeline_scheduler in AUTOTUNE_SCHEDULERS
                                       else cfg.pipeline_scheduler),
                   offset=cfg.offset, recompute=cfg.recompute, select_recompute=cfg.select_recompute,
                   select_comm_recompute=cfg.select_comm_recompute, micro_batch_num=mb,
                   seq_split_num=cfg.seq_split_num, recompute_slice_activation=cfg.recompute_slice_activation,
                   model_mode="legacy" if cfg.use_legacy else "mcore")


def layer_setting_of(cfg: Any, *, emulate: bool = False) -> LayerSettingResult:
    """What MindFormers (``cfg.mindformers_version``) does with the config: the one reading of the
    layer split that ``check``, ``evaluate``, ``search``, ``report`` and ``apply`` share.

    Raises:
        ConfigError: any LayerSetting rule.
    """
    return normalize(layer_inputs_of(cfg), getattr(cfg, "mindformers_version", "1.8"), emulate=emulate)


def _swap_tables(res: LayerSettingResult) -> LayerSettingResult:
    """Swap mode with only true/false values: the count tables they mean (all or none of each
    mini-stage's layers). Layer-id lists have no count form: R_NOT_MODELLED."""
    def table(val: Any) -> np.ndarray:
        if val is True:
            return res.layers_vp.astype(np.int64).copy()
        if val in ([], False):
            return np.zeros_like(res.layers_vp, dtype=np.int64)
        raise ConfigError("swap mode (swap_config.swap: true) reads recompute values as layer-id lists; "
                          "the cost model needs per-mini-stage counts; fix: `autotune check` shows the "
                          "placement; give true/false or evaluate without swap", field="swap_config.swap",
                          value=True, rule="R_NOT_MODELLED")

    return replace(res, recompute_vp=table(res.recompute),
                   select_vp={k: table(v) for k, v in res.select_recompute.items()},
                   comm_vp={k: table(v) for k, v in res.select_comm_recompute.items()})


def _not_modelled(res: LayerSettingResult, cfg: Any) -> LayerSettingResult:
    if res.swap:
        res = _swap_tables(res)
    if res.start_stage or res.pp != cfg.pipeline_stage:
        raise ConfigError(f"the model_config.pipeline_stage block places the model on stages "
                          f"{res.start_stage}..{res.start_stage + res.pp - 1} of {cfg.pipeline_stage} (a "
                          "multimodal split); the cost model needs the whole pipeline; fix: `autotune "
                          "check` shows the placement", field="model.model_config.pipeline_stage",
                          value=res.pp, rule="R_NOT_MODELLED")
    return res


def layout_from_result(res: LayerSettingResult) -> Layout:
    """The decoder-layer :class:`Layout` of a LayerSetting result: MTP layers counted in the split
    are taken out of the mini-stage that holds them, and count tables are capped at what remains.
    Under zero_bubble_v, row 1 is put back in physical stage order (as the offset is written)."""
    layers = res.layers_vp.astype(np.int64).copy()
    mtp = res.mtp_num_layers if res.mtp_counted else 0
    for i in range(res.num_layers - mtp, res.num_layers):
        layers[res.interleave_ids[i], res.pipeline_ids[i]] -= 1
    flip = res.zbv and res.vpp > 1       # zero_bubble_v: LayerSetting's row 1 is in logical order;
    if flip:                             # the cost model (and the offset) use physical stage order
        layers[1] = layers[1][::-1].copy()

    def cap(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64).copy()
        if flip:
            t[1] = t[1][::-1].copy()
        return np.minimum(t, layers)

    sel = {k: cap(v) for k, v in res.select_vp.items()}
    com = {k: cap(v) for k, v in res.comm_vp.items()}
    return Layout(layers_vp=layers, recompute_vp=cap(res.recompute_vp), select_vp=_max_table(sel, layers),
                  comm_vp=_max_table(com, layers), select_patterns=sel, comm_patterns=com, mtp_in_split=mtp,
                  warnings=tuple(res.warnings))


def mtp_layers_in_split(cfg: Any) -> int:
    """MTP layers MindFormers (``cfg.mindformers_version``) counts in this config's layer split
    (:func:`autotune.config.layer_setting.split_mtp_layers`): what the emitted offset adds back."""
    return split_mtp_layers(layer_inputs_of(cfg), getattr(cfg, "mindformers_version", "1.8"))


def layout_from_config(cfg: Any) -> Layout:
    """The layout the cost model evaluates for a config: :func:`layer_setting_of` (strict), MTP
    layers counted in the split taken out (:func:`layout_from_result`).

    Raises:
        ConfigError: any LayerSetting rule; R_NOT_MODELLED for swap mode with layer-id lists and
            the ``model_config.pipeline_stage`` block (``check`` handles both).
    """
    return layout_from_result(_not_modelled(layer_setting_of(cfg), cfg))


def make_layout(layers_vp: Any, recompute_vp: Any = None, select_vp: Any = None,
                comm_vp: Any = None) -> Layout:
    """Build a layout from explicit [V][P] tables (counts are capped at the mini-stage size)."""
    layers = np.atleast_2d(np.asarray(layers_vp, dtype=np.int64))
    def t(x: Any) -> np.ndarray:
        if x is None:
            return np.zeros_like(layers)
        return np.minimum(np.atleast_2d(np.asarray(x, dtype=np.int64)), layers)
    return Layout(layers_vp=layers, recompute_vp=t(recompute_vp), select_vp=t(select_vp), comm_vp=t(comm_vp))


def canonical_values(layout: Layout, *, use_legacy: bool = True,
                     select_patterns: list[str] | None = None,
                     comm_patterns: list[str] | None = None, mtp_in_split: int | None = None) -> dict[str, Any]:
    """Flat dict {offset, pp_interleave_num, recompute, select_recompute, select_comm_recompute}
    from :func:`autotune.config.canonical.emit_canonical` (all-zero tables are written False).

    Pattern lists default to the layout's own patterns, else MindFormers' defaults for the model
    path (legacy or mcore). Each pattern gets the layout's select (comm) table. ``mtp_in_split``
    (default: ``layout.mtp_in_split``) MTP layers that MindFormers counts in the layer split are
    added to the last mini-stage, after its decoder layers, so the offset sums as MindFormers checks
    it (legacy DeepSeek-V3 ``mtp_depth``: num_layers + mtp_depth).
    """
    mode = "legacy" if use_legacy else "mcore"
    sp = select_patterns if select_patterns is not None else (
        list(layout.select_patterns) or DEFAULT_PATTERNS[("select_recompute", mode)])
    cp = comm_patterns if comm_patterns is not None else (
        list(layout.comm_patterns) or DEFAULT_PATTERNS[("select_comm_recompute", mode)])
    mtp = layout.mtp_in_split if mtp_in_split is None else mtp_in_split
    layers = layout.layers_vp
    if mtp:
        layers = layers.copy()
        layers[-1, -1] += mtp
    block = emit_canonical(layers, layout.recompute_vp, {p: layout.select_vp for p in sp},
                           {p: layout.comm_vp for p in cp})
    mc, rc = block["model"]["model_config"], block["recompute_config"]
    return {"offset": mc["offset"], "pp_interleave_num": mc["pp_interleave_num"], **rc}
