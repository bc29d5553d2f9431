"""The data types of the LayerSetting emulation: inputs, warnings and the result.

Split from :mod:`autotune.config.layer_setting` so that readers (:mod:`autotune.config.layer_yaml`,
:mod:`autotune.config.megatron`) and the normaliser share them without importing each other. Tables
are ``[vpp][pp]`` (chunk-major), as MindFormers logs them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.config.canonical import emit_canonical
from autotune.errors import ConfigError

VERSIONS = ("1.5", "1.7", "1.8")
SCHEDULERS = ("1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp", "zero_bubble_v")
#: Schedules autotune models and writes that MindFormers' YAML cannot name: ``1f1b_less_memory`` is
#: the interleaved order MindSpore runs for ``pipeline_scheduler: 1f1b`` + ``pipeline_interleave``
#: when the environment has ``ENABLE_LESS_MEM_VPP=1`` (InterleavedScheduler::MemoryOptimizedReorder,
#: mindspore ccsrc/frontend/parallel/pipeline_transformer/pipeline_scheduler.cc). ``autotune search``
#: writes the name so that ``evaluate`` reads the same schedule back (its layer split is that of
#: ``1f1b``); ``check`` rejects it (R_SCHEDULER).
AUTOTUNE_SCHEDULERS = ("1f1b_less_memory",)
HUGE = 2**31 - 1              # what MindFormers substitutes for True in a 1-D count list

#: YAML path of each input (messages and JSON errors name these).
FIELDS = {
    "num_layers": "model.model_config.num_layers",
    "pp": "parallel_config.pipeline_stage",
    "vpp": "model.model_config.pp_interleave_num",
    "offset": "model.model_config.offset",
    "recompute": "recompute_config.recompute",
    "select_recompute": "recompute_config.select_recompute",
    "select_comm_recompute": "recompute_config.select_comm_recompute",
    "select_recompute_exclude": "recompute_config.select_recompute_exclude",
    "select_comm_recompute_exclude": "recompute_config.select_comm_recompute_exclude",
    "recompute_slice_activation": "recompute_config.recompute_slice_activation",
    "pipeline_interleave": "parallel.pipeline_config.pipeline_interleave",
    "pipeline_scheduler": "parallel.pipeline_config.pipeline_scheduler",
    "micro_batch_num": "parallel_config.micro_batch_num",
    "seq_split_num": "parallel_config.seq_split_num",
    "swap": "swap_config.swap",
    "start_stage": "model.model_config.pipeline_stage.start_stage",
    "stage_num": "model.model_config.pipeline_stage.stage_num",
    "model_mode": "use_legacy",
    "mtp_num_layers": "model.model_config.mtp_num_layers",
    "mp_comm_recompute": "recompute_config.mp_comm_recompute",
    "parallel_optimizer_comm_recompute": "recompute_config.parallel_optimizer_comm_recompute",
    "micro_batch_interleave_num": "micro_batch_interleave_num",
}

DEFAULT_PATTERNS = {
    ("select_recompute", "legacy"): ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"],
    ("select_recompute", "mcore"): ["mlp\\.shared_experts\\.mul",
                                    "mlp\\.shared_experts\\.activation_func\\.silu",
                                    "mlp\\.mul", "mlp\\.activation_func\\.silu"],
    ("select_comm_recompute", "legacy"): [".*\\.norm"],
    ("select_comm_recompute", "mcore"): [".*\\.norm"],
}
# Top-level cell names of one model family that never occur in the other (W_SELECT_NO_MATCH).
_FAMILY_NAMES = {
    "legacy": {"feed_forward", "attention", "attention_norm", "ffn_norm"},
    "mcore": {"mlp", "self_attention", "input_layernorm", "pre_mlp_layernorm"},
}

class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()   # marks "key not given" (None is a real, invalid value)


@dataclass(frozen=True)
class LayerInputs:
    """The LayerSetting inputs, as a MindFormers YAML gives them (raw values, not validated).

    ``vpp`` is ``pp_interleave_num`` as written (``None`` = absent); ``pipeline_interleave`` None =
    absent (then true when vpp > 1, the project's convention); ``micro_batch_num`` None = not given
    (MindFormers then uses 1; the rules on it are not checked, a warning says so when pp > 1); the
    exclude keys, ``mp_comm_recompute``, ``parallel_optimizer_comm_recompute`` and
    ``micro_batch_interleave_num`` are :data:`ABSENT` when not given; ``pp_given`` False when
    ``parallel_config.pipeline_stage`` is absent (pp is then 1: messages say so); ``from_yaml`` True
    when read from a training YAML (then a missing micro_batch_num is warned about); ``nulls`` names
    the inputs written as an explicit null where MindFormers' validators refuse one
    (``micro_batch_num``, ``seq_split_num``); ``mtp_key`` is
    the key the MTP depth was read from (``mtp_depth`` / ``mtp_num_layers`` /
    ``num_nextn_predict_layers``); ``mtp_counted`` None = decided by version, model path and key
    (§2.5 of the spec; :func:`autotune.config.layer_setting.mtp_in_split`).
    """

    num_layers: Any
    pp: Any = 1
    vpp: Any = None
    offset: Any = 0
    recompute: Any = False
    select_recompute: Any = False
    select_comm_recompute: Any = False
    select_recompute_exclude: Any = ABSENT
    select_comm_recompute_exclude: Any = ABSENT
    pipeline_interleave: Any = None
    pipeline_scheduler: Any = "1f1b"
    swap: Any = False
    start_stage: Any = 0
    stage_num: Any = 0
    stage_offset: Any = ABSENT          # model.model_config.pipeline_stage.offset
    seq_split_num: Any = 1
    micro_batch_num: Any = None
    recompute_slice_activation: Any = False
    model_mode: str = "legacy"
    mtp_num_layers: Any = 0
    mtp_counted: bool | None = None
    mtp_key: str | None = None
    mp_comm_recompute: Any = ABSENT
    parallel_optimizer_comm_recompute: Any = ABSENT
    micro_batch_interleave_num: Any = ABSENT
    pp_given: bool = True
    from_yaml: bool = False
    nulls: frozenset = frozenset()
    fields: dict[str, str] = field(default_factory=dict)
    cell_family: Any = None             # (CellFamily | None, model class) from autotune.config.cells

    def path(self, name: str) -> str:
        """YAML path of input ``name``."""
        return self.fields.get(name) or FIELDS.get(name, name)


@dataclass(frozen=True)
class Warning_:
    """A pitfall that was accepted: stable ``code``, YAML ``field`` and a message with the fix."""

    code: str
    field: str
    message: str


@dataclass
class LayerSettingResult:
    """What MindFormers computes for one config (see module docstring for units/shapes).

    ``layers_vp``/``accumulated_vp``/``effective_vp`` are int arrays [vpp][pp] in execution order
    (under zero_bubble_v row 1 is reversed: logical order). ``recompute`` and the pattern dicts are
    the "Formative" values (nested lists, or raw index lists in swap mode).
    """

    version: str
    emulate: bool
    num_layers: int                    # layers placed (N, + MTP when counted)
    pp: int
    vpp: int
    start_stage: int
    layers_vp: np.ndarray
    accumulated_vp: np.ndarray
    pipeline_ids: list[int]
    interleave_ids: list[int]
    effective_vp: np.ndarray
    recompute: Any
    select_recompute: dict[str, Any]
    select_comm_recompute: dict[str, Any]
    select_recompute_exclude: dict[str, Any] | None
    select_comm_recompute_exclude: dict[str, Any] | None
    full_recompute_layers: list[int]
    select_recompute_layers: dict[str, list[int]]
    select_comm_recompute_layers: dict[str, list[int]]
    select_recompute_exclude_layers: dict[str, list[int]] | None
    select_comm_recompute_exclude_layers: dict[str, list[int]] | None
    warnings: list[Warning_]
    zbv: bool = False
    swap: bool = False
    model_mode: str = "legacy"
    mtp_num_layers: int = 0
    mtp_counted: bool = False
    physical_stage_per_layer: list[int] = field(default_factory=list)
    show_start_stage: bool = False
    recompute_vp: np.ndarray | None = None        # counts table (None in swap mode)
    select_vp: dict[str, np.ndarray] = field(default_factory=dict)
    comm_vp: dict[str, np.ndarray] = field(default_factory=dict)
    select_only_vp: np.ndarray | None = None      # layers with select but not full recompute

    @property
    def warning_codes(self) -> list[str]:
        return [w.code for w in self.warnings]

    def to_json(self) -> dict[str, Any]:
        """The ``--format json`` object: a vector's ``expect`` keys plus ``warnings``."""
        out: dict[str, Any] = {
            "layers_per_stage": self.layers_vp.tolist(),
            "accumulated_layers": self.accumulated_vp.tolist(),
            "pipeline_ids": list(self.pipeline_ids),
            "interleave_ids": list(self.interleave_ids),
            "effective_layers_per_stage": self.effective_vp.tolist(),
            "recompute": self.recompute,
            "select_recompute": self.select_recompute,
            "select_comm_recompute": self.select_comm_recompute,
        }
        if self.select_recompute_exclude is not None:
            out["select_recompute_exclude"] = self.select_recompute_exclude
            out["select_comm_recompute_exclude"] = self.select_comm_recompute_exclude
        out["full_recompute_layers"] = list(self.full_recompute_layers)
        out["select_recompute_layers"] = self.select_recompute_layers
        out["select_comm_recompute_layers"] = self.select_comm_recompute_layers
        if self.select_recompute_exclude_layers is not None:
            out["select_recompute_exclude_layers"] = self.select_recompute_exclude_layers
            out["select_comm_recompute_exclude_layers"] = self.select_comm_recompute_exclude_layers
        if self.zbv:
            out["physical_pipeline_stage_per_layer"] = list(self.physical_stage_per_layer)
        if self.show_start_stage:
            out["logged_pipeline_ids_with_start_stage"] = [i + self.start_stage for i in self.pipeline_ids]
        out["warnings"] = self.warning_codes
        return out

    # ---- derived views used by reports, the cost model and the bug cases -------------------
    def physical_effective_vp(self) -> np.ndarray:
        """Real layer counts [vpp][pp] indexed by physical stage (zbv row 1 un-reversed)."""
        eff = self.effective_vp.copy()
        if self.zbv and self.vpp > 1:
            eff[1] = eff[1][::-1]
        return eff

    def stage_totals(self) -> list[int]:
        """Layers held by each physical stage (all chunks; MTP included when counted)."""
        return self.physical_effective_vp().sum(axis=0).tolist()

    def mtp_stage(self) -> int | None:
        """Physical stage of the MTP block (None without MTP)."""
        if not self.mtp_num_layers:
            return None
        if self.mtp_counted:
            return self.physical_stage_per_layer[self.num_layers - self.mtp_num_layers]
        return 0 if self.zbv else self.pp - 1

    def output_layer_stage(self) -> int:
        """Stage of the LM head / output layer: pp-1, or 0 under zero_bubble_v (§2.5)."""
        return 0 if self.zbv else self.pp - 1

    def decoder_layers_vp(self) -> np.ndarray:
        """Like :meth:`physical_effective_vp` but without MTP layers counted in the split."""
        eff = self.physical_effective_vp()
        if self.mtp_counted and self.mtp_num_layers:
            for i in range(self.num_layers - self.mtp_num_layers, self.num_layers):
                v = self.interleave_ids[i]
                eff[v][self.physical_stage_per_layer[i]] -= 1
        return eff

    def layer_start_index(self) -> list[list[int]]:
        """First layer id of each mini-stage [vpp][pp] (logical order)."""
        return (self.accumulated_vp - self.layers_vp).tolist()

    def canonical(self) -> dict[str, Any]:
        """The canonical MindFormers form of this layout (see :func:`emit_canonical`)."""
        if self.swap or self.recompute_vp is None:
            raise ConfigError("swap mode layouts (layer-index lists) have no canonical count form",
                              field=FIELDS["swap"], value=True, rule="R_SWAP_CANONICAL")
        phys = self.layers_vp.copy()
        rec = self.recompute_vp.copy()
        sel = {k: v.copy() for k, v in self.select_vp.items()}
        com = {k: v.copy() for k, v in self.comm_vp.items()}
        if self.zbv and self.vpp > 1:
            for t in [phys, rec, *sel.values(), *com.values()]:
                t[1] = t[1][::-1].copy()
        return emit_canonical(phys, rec, sel, com, zbv=self.zbv)


# ----------------------------------------------------------------------------------------------
# helpers shared by the rule families


def is_int(x: Any) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def is_intlike(x: Any) -> bool:
    """An integer or a bool: what MindFormers' count lists accept (bools count as ints)."""
    return isinstance(x, (int, np.integer, bool, np.bool_))


def truthy(value: Any) -> bool:
    """Python truthiness, as MindFormers tests it (an object without one counts as true)."""
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - numpy arrays etc.
        return True


#: difflib ratio from which a key counts as a misspelling of a known one.
NEAR_MISS_RATIO = 0.85


def near_key(key: Any, known: Any) -> str | None:
    """The key of ``known`` (an iterable of str) that ``key`` most likely misspells: the closest
    within difflib's :data:`NEAR_MISS_RATIO`, or None."""
    hit = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=NEAR_MISS_RATIO)
    return hit[0] if hit else None


def misspelt_hint(data: Any, names: tuple[str, ...] | list[str]) -> str:
    """For a required ``model.model_config`` key missing under every spelling in ``names``: ``"; found
    'num_layer' there: a misspelling of 'num_layers'?"`` when a key of that section is within
    :data:`NEAR_MISS_RATIO` of one of them (the section's keys are open, so a typo is no error
    of its own), else ``""``."""
    mc = data.get("model") if isinstance(data, dict) else None
    mc = mc.get("model_config") if isinstance(mc, dict) else None
    if not isinstance(mc, dict):
        return ""
    present = [k for k in mc if isinstance(k, str) and k not in names]
    for name in names:
        hit = near_key(name, present)
        if hit:
            return f"; found {hit!r} there: a misspelling of {name!r}?"
    return ""


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr`` cut to ``limit`` characters (messages stay one short line). Containers are cut
    before they are rendered, so a huge value costs O(limit), not O(size)."""
    if isinstance(value, (list, tuple)) and len(value) > limit:
        value = list(value[:limit])
    if isinstance(value, dict) and len(value) > limit:
        value = dict(list(value.items())[:limit])
    try:
        text = repr(value)
    except (RecursionError, ValueError):   # a very deep structure, or an over-long int
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rule_error(rule: str, path: str, value: Any, problem: str, fix: str) -> ConfigError:
    """The one-line error of a broken rule: ``problem (got VALUE); fix: FIX``."""
    return ConfigError(f"{problem} (got {short_repr(value)}); fix: {fix}", field=path, value=value,
                       rule=rule)


def bool_input(inp: LayerInputs, name: str, value: Any) -> bool:
    """A boolean input (R_TYPE otherwise)."""
    if not isinstance(value, (bool, np.bool_)):
        raise rule_error("R_TYPE", inp.path(name), value, f"{name} must be true or false",
                         "write true or false")
    return bool(value)
