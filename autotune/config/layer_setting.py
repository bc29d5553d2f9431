"""MindFormers ``LayerSetting`` emulation: offset, pp_interleave_num and recompute, per release.

Behaviour follows ``shared/spec/mindformers-layer-setting.md`` (paraphrased there from the
MindFormers sources; no code copied). Three targets are modelled:

- ``"1.5"``: r1.3–r1.6 — legacy ``models/utils.py`` (v3: exclude keys, swap) and, for mcore models
  (``use_legacy: False``), the ``parallel_core`` dev class (no exclude, no swap, MTP counted in N);
- ``"1.7"``: the unified r1.7.0 class (zero_bubble_v, MTP not counted for mcore);
- ``"1.8"``: r1.8.0/master (offset ignored when pp·vpp ≤ 1; head/tail ≥ 0, middle ≥ 1 layers).

Two modes:

- **strict** (default): reject what the version rejects, and also what it silently gets wrong or
  hangs on (non-zero scalar / 1-D offsets that over-count after broadcasting, negative mini-stages,
  negative recompute counts, string lists in ``recompute``, fractional offsets);
- **emulate**: report what the version really does (``effective_layers_per_stage`` = the real
  placement), with a warning code per pitfall.

:func:`normalize` runs one small step per MindFormers rule family, in this order:

1. :func:`_read_inputs` — types, ranges and input limits, the scheduler, the ``pipeline_stage``
   block (legacy start_stage / stage_num);
2. :func:`_resolve_vpp` — ``pipeline_interleave`` / ``pp_interleave_num`` (§1.2);
3. :func:`_count_mtp` — whether MTP layers are counted in the split (version quirk, §2.5);
4. :func:`_cross_field_rules` — the checks outside the class (§1.6): micro_batch_num, zero_bubble_v,
   seq pipe, mcore-only rules, layer counts, the recompute-length rule of ``check_rules``;
5. offset family (:mod:`autotune.config.layer_offset`) and :func:`_place` (§2);
6. :func:`_version_quirks` — which keys a release ignores (exclude keys, swap, select on mcore-dev);
7. recompute tables and select / comm patterns (:mod:`autotune.config.layer_counts`,
   :mod:`autotune.config.patterns`), exclude conflicts (§3–§4);
8. :func:`_per_layer` — full > select/comm > exclude precedence (§5);
9. :func:`_advice` — warnings that are advice, not MindFormers behaviour.

Steps 1, 3 and the config-level part of 4 are also :func:`validate_config_level`, which every
command runs when it loads a config; the rest (the layout keys and the scheduler's own rules, which a
search may change) is checked when the layout is derived: ``evaluate`` and ``check`` refuse, and
``search`` reports "your config cannot be evaluated" instead of stopping.

Every rejection is a :class:`~autotune.errors.ConfigError` with a stable ``rule`` code, the YAML
path as ``field`` and a message naming the value and the fix. Tables are ``[vpp][pp]``
(chunk-major), as MindFormers logs them. Pure: numpy and ``regex`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.config.canonical import emit_canonical, suggest_offset
from autotune.config.cells import select_no_match
from autotune.config.layer_counts import (check_swap_layers, count_table, is_1d_counts, patterns_of,
                                          swap_value)
from autotune.config.layer_offset import layers_from_offset, pp_hint
from autotune.config.layer_types import (ABSENT, AUTOTUNE_SCHEDULERS, DEFAULT_PATTERNS, FIELDS, HUGE,
                                         SCHEDULERS, VERSIONS,
                                         LayerInputs, LayerSettingResult, Warning_, bool_input, is_int,
                                         rule_error, truthy)
from autotune.config.limits import (MAX_MICRO_BATCH_NUM, MAX_NUM_LAYERS, MAX_PIPELINE_STAGE,
                                    MAX_PP_INTERLEAVE_NUM, MAX_SCHEDULE_UNITS, MAX_SEQ_SPLIT_NUM,
                                    MAX_STAGE_UNITS)
from autotune.config.patterns import MatchBudget, compile_segments, pattern_scope, patterns_conflict
from autotune.errors import ConfigError

__all__ = ["VERSIONS", "SCHEDULERS", "FIELDS", "DEFAULT_PATTERNS", "HUGE", "ABSENT", "LayerInputs",
           "LayerSettingResult", "Warning_", "normalize", "validate_config_level", "mtp_in_split",
           "split_mtp_layers",
           "emit_canonical", "suggest_offset", "layout_tables"]

VPP_LOW_GAIN_BUBBLE = 0.1     # warn when the 1F1B bubble (pp-1)/m is already at most this
MAX_MTP_LAYERS = 64
# Top-level cell names of one model family that never occur in the other (W_SELECT_NO_MATCH).
_FAMILY_NAMES = {
    "legacy": {"feed_forward", "attention", "attention_norm", "ffn_norm"},
    "mcore": {"mlp", "self_attention", "input_layernorm", "pre_mlp_layernorm"},
}
#: Input name -> (limit, rule) of the input limits (autotune.config.limits).
_LIMITS = {"num_layers": (MAX_NUM_LAYERS, "R_LIMIT_NUM_LAYERS"),
           "pp": (MAX_PIPELINE_STAGE, "R_LIMIT_PIPELINE_STAGE"),
           "vpp": (MAX_PP_INTERLEAVE_NUM, "R_LIMIT_VPP"),
           "micro_batch_num": (MAX_MICRO_BATCH_NUM, "R_LIMIT_MICRO_BATCH"),
           "seq_split_num": (MAX_SEQ_SPLIT_NUM, "R_LIMIT_SEQ_SPLIT"),
           "start_stage": (MAX_PIPELINE_STAGE, "R_LIMIT_PIPELINE_STAGE"),
           "stage_num": (MAX_PIPELINE_STAGE, "R_LIMIT_PIPELINE_STAGE"),
           "mtp_num_layers": (MAX_MTP_LAYERS, "R_RANGE")}


def _check_version(version: str) -> str:
    v = str(version)
    if v not in VERSIONS:
        raise ConfigError(f"unknown MindFormers version {v!r}; fix: use one of {', '.join(VERSIONS)}",
                          field="--mindformers-version", value=v, rule="R_VERSION")
    return v


def _pos_int(inp: LayerInputs, name: str, value: Any, *, minimum: int = 1) -> int:
    """An integer input >= ``minimum`` and within its input limit (R_TYPE / R_RANGE / R_LIMIT_*)."""
    path = inp.path(name)
    if not is_int(value):
        raise rule_error("R_TYPE", path, value, f"{name} must be an integer", f"write a whole number >= {minimum}")
    if value < minimum:
        raise rule_error("R_RANGE", path, value, f"{name} must be >= {minimum}", f"use a value >= {minimum}")
    limit, rule = _LIMITS.get(name, (None, None))
    if limit is not None and value > limit:
        raise rule_error(rule, path, value, f"{name} must be <= {limit} (autotune's input limit, far above "
                         "any real training run; see the README's input limits)", f"use a value <= {limit}")
    return int(value)


@dataclass
class _State:
    """Everything one :func:`normalize` run derives, filled in step by step."""

    inp: LayerInputs
    version: str
    emulate: bool
    warns: list[Warning_] = field(default_factory=list)
    mode: str = "legacy"
    unified: bool = False
    n: int = 0
    pp_total: int = 1
    pp: int = 1
    start_stage: int = 0
    show_start: bool = False
    offset: Any = 0
    mtp: int = 0
    mb: int | None = None
    seq_split: int = 1
    sched: str = "1f1b"
    swap: bool = False
    slice_act: bool = False
    vpp_raw: int | None = None
    interleave: bool = False
    vpp: int = 1
    mtp_counted: bool = False
    n_split: int = 0
    zbv: bool = False
    budget: MatchBudget = field(default_factory=MatchBudget)

    @property
    def strict(self) -> bool:
        return not self.emulate

    @property
    def total(self) -> int:
        return self.pp * self.vpp


# ---- step 1: inputs ------------------------------------------------------------------------------

def _scheduler(st: _State, autotune_names: bool) -> None:
    inp = st.inp
    sched = "1f1b" if inp.pipeline_scheduler is None else inp.pipeline_scheduler
    if sched in AUTOTUNE_SCHEDULERS:
        if not autotune_names:
            raise rule_error("R_SCHEDULER", inp.path("pipeline_scheduler"), sched,
                             "1f1b_less_memory is autotune's name for MindSpore's less-memory interleave, not "
                             "a MindFormers pipeline_scheduler",
                             "write pipeline_scheduler: 1f1b with pipeline_interleave: true and run with the "
                             "environment variable ENABLE_LESS_MEM_VPP=1 (MindSpore InterleavedScheduler, "
                             "jit_level O0/O1)")
        sched = "1f1b"                         # MindFormers' view of it: 1f1b with interleave
    if not isinstance(sched, str) or sched not in SCHEDULERS:
        known = isinstance(sched, str) and sched.lower() in SCHEDULERS
        ours = f" (MindFormers) or {', '.join(AUTOTUNE_SCHEDULERS)} (autotune)" if autotune_names else ""
        raise rule_error("R_SCHEDULER", inp.path("pipeline_scheduler"), sched,
                         "pipeline_scheduler must be written in lower case: MindFormers compares the exact "
                         "string (e.g. == 'zero_bubble_v', != 'seqvpp')" if known else "unknown pipeline_scheduler",
                         f"use one of {', '.join(SCHEDULERS)}{ours}")
    st.sched = sched


def _read_inputs(st: _State, *, autotune_names: bool = False) -> None:
    inp = st.inp
    st.mode = inp.model_mode if inp.model_mode in ("legacy", "mcore") else "legacy"
    st.unified = st.version in ("1.7", "1.8")
    st.n = _pos_int(inp, "num_layers", inp.num_layers)
    st.pp_total = _pos_int(inp, "pp", inp.pp)
    st.mtp = _pos_int(inp, "mtp_num_layers", inp.mtp_num_layers, minimum=0)
    for name in sorted(inp.nulls):  # written as null: MindFormers' validators refuse it
        if name in ("micro_batch_num", "seq_split_num"):
            raise rule_error("R_TYPE", inp.path(name), None, f"{name} must be an integer (MindFormers' "
                             "_PipeLineConfig refuses null)", "write a whole number or remove the key")
        if name == "swap":
            raise rule_error("R_TYPE", inp.path(name), None, "swap must be true or false (MindFormers r1.5.0+ "
                             "check_rules: 'Type of swap must be bool')", "write true or false or remove the key")
    st.mb = None if inp.micro_batch_num is None else _pos_int(inp, "micro_batch_num", inp.micro_batch_num)
    st.seq_split = _pos_int(inp, "seq_split_num", 1 if inp.seq_split_num is None else inp.seq_split_num)
    _scheduler(st, autotune_names)
    st.zbv = st.sched == "zero_bubble_v"
    st.swap = bool_input(inp, "swap", False if inp.swap is None else inp.swap)
    slice_act = inp.recompute_slice_activation
    if slice_act is None and "recompute_slice_activation" not in inp.nulls:
        slice_act = False                                          # not given (built in code)
    for name in ("recompute_slice_activation", "mp_comm_recompute", "parallel_optimizer_comm_recompute"):
        value = slice_act if name == "recompute_slice_activation" else getattr(inp, name)
        if value is not ABSENT and not isinstance(value, (bool, np.bool_)):
            raise rule_error("R_RECOMPUTE_BOOL", inp.path(name), value,
                             f"{name} must be true or false: MindFormers r1.3.0–master rejects anything else "
                             "(TransformerRecomputeConfig: Validator.check_bool)", "write true or false")
    st.slice_act = bool(slice_act)
    _stage_block(st)


def _stage_block(st: _State) -> None:
    """``model.model_config.pipeline_stage: {start_stage, stage_num, offset}`` (legacy LLaMA)."""
    inp = st.inp
    st.pp, st.offset = st.pp_total, inp.offset
    if st.mode == "legacy" and (inp.stage_num not in (0, None) or inp.start_stage not in (0, None)):
        ss = _pos_int(inp, "start_stage", inp.start_stage or 0, minimum=0)
        sn = _pos_int(inp, "stage_num", inp.stage_num or 0, minimum=0)
        st.show_start = True
        if sn != 0 and ss + sn <= st.pp_total:
            st.start_stage, st.pp = ss, sn
            if inp.stage_offset is not ABSENT:
                st.offset = inp.stage_offset
        elif sn != 0:
            st.warns.append(Warning_("W_STAGE_NUM_IGNORED", inp.path("stage_num"),
                                     f"start_stage + stage_num = {ss + sn} > pipeline_stage = {st.pp_total}; "
                                     "MindFormers ignores the pipeline_stage block"))


# ---- step 2: vpp ---------------------------------------------------------------------------------

def _resolve_vpp(st: _State, *, layout: bool = True) -> None:
    inp = st.inp
    if inp.vpp is not None:
        st.vpp_raw = _pos_int(inp, "vpp", inp.vpp)
    interleave = inp.pipeline_interleave
    if interleave is None:
        interleave = bool(st.vpp_raw and st.vpp_raw > 1)
    st.interleave = bool_input(inp, "pipeline_interleave", interleave)
    if not st.interleave:
        st.vpp = 1
        if st.vpp_raw and st.vpp_raw > 1:
            st.warns.append(Warning_("W_INTERLEAVE_DISABLED", inp.path("pipeline_interleave"),
                                     f"pp_interleave_num = {st.vpp_raw} is silently treated as 1 because "
                                     "parallel.pipeline_config.pipeline_interleave is false; set it to true "
                                     "or remove pp_interleave_num"))
    elif st.vpp_raw is None:
        if st.mode == "mcore" and layout:
            raise rule_error("R_VPP_MISSING", inp.path("vpp"), None,
                             "mcore models need pp_interleave_num when pipeline_interleave is true "
                             "(None -> TypeError in MindFormers r1.6.0+ parallel_core LayerSetting)",
                             "add model.model_config.pp_interleave_num: 1")
        st.vpp = 1
    else:
        st.vpp = st.vpp_raw


# ---- step 3: MTP counting (version quirk) --------------------------------------------------------

def mtp_in_split(mode: str, version: str, key: str | None, counted: bool | None = None) -> bool:
    """Whether MindFormers counts the MTP layers in the layer split (spec §2.5), read per release:

    - legacy models: only the research DeepSeek-V3 model builds MTP layers, from ``mtp_depth``, and
      passes ``num_layers + mtp_depth`` to LayerSetting (``research/deepseek3/deepseek2_model.py``,
      r1.5.0–master); other MTP keys are not read by any legacy model;
    - mcore models: ``mtp_depth`` / ``num_nextn_predict_layers`` / ``mtp_num_layers`` all map to
      ``mtp_num_layers``; ``TransformerBlock`` adds it to the split in dev / r1.6.0 ("1.5") and not
      in r1.7.0+ (MTP layers copy the last layer's stage).

    ``counted`` (a flat case's ``mtp_counted_in_layer_split``) overrides.
    """
    if counted is not None:
        return counted
    if mode == "legacy":
        return key in (None, "mtp_depth")
    return version == "1.5"


def _mtp_key_ignored(mode: str, inp: LayerInputs) -> bool:
    """A legacy model given an MTP key other than ``mtp_depth``: no legacy model reads it."""
    return mode == "legacy" and inp.mtp_counted is None and inp.mtp_key not in (None, "mtp_depth")


def split_mtp_layers(inp: LayerInputs, version: str = "1.8") -> int:
    """MTP layers MindFormers ``version`` counts in the layer split for ``inp`` (0 when there are
    none, they are not counted, or no model reads the key); see :func:`mtp_in_split`."""
    mtp, mode = inp.mtp_num_layers, inp.model_mode if inp.model_mode in ("legacy", "mcore") else "legacy"
    if not is_int(mtp) or mtp <= 0 or _mtp_key_ignored(mode, inp):
        return 0
    return int(mtp) if mtp_in_split(mode, version, inp.mtp_key, inp.mtp_counted) else 0


def _count_mtp(st: _State) -> None:
    inp = st.inp
    if st.mtp and _mtp_key_ignored(st.mode, inp):
        st.warns.append(Warning_("W_KEY_IGNORED", inp.path("mtp_num_layers"),
                                 f"legacy models (use_legacy: true) build MTP layers only from "
                                 f"model_config.mtp_depth (research DeepSeek-V3); {inp.mtp_key} is not read, "
                                 "so no MTP layer is built; use mtp_depth, or use_legacy: false"))
        st.mtp = 0
    if st.mode == "mcore" and st.mtp > 1:
        raise rule_error("R_MTP_MCORE", inp.path("mtp_num_layers"), st.mtp,
                         "mcore models support mtp_num_layers <= 1 (MindFormers r1.6.0–master "
                         "TransformerConfig: 'only supports mtp_num_layers = 1')", "use 1 or 0")
    st.mtp_counted = split_mtp_layers(inp, st.version) > 0
    st.n_split = st.n + (st.mtp if st.mtp_counted else 0)
    if st.n_split > MAX_NUM_LAYERS:
        raise rule_error("R_LIMIT_NUM_LAYERS", inp.path("num_layers"), st.n_split,
                         f"num_layers + MTP layers counted in the split must be <= {MAX_NUM_LAYERS} "
                         "(autotune's input limit)", f"use at most {MAX_NUM_LAYERS} layers")


# ---- step 4: rules outside the class (§1.6) ------------------------------------------------------

def _micro_batch_rules(st: _State) -> None:
    inp, mb = st.inp, st.mb
    if mb is not None and mb < st.pp_total:
        raise ConfigError(f"micro_batch_num must be >= pipeline_stage = {st.pp_total}, got {mb}; fix: use "
                          f"micro_batch_num >= {st.pp_total} (MindSpore's pipeline needs at least one "
                          "micro-batch per stage; MindFormers r1.3.0–master documents it in "
                          "TransformerOpParallelConfig)", field=inp.path("micro_batch_num"), value=mb,
                          rule="R_MICRO_BATCH_MIN")
    stage_units = st.vpp * (1 if mb is None else mb) * st.seq_split
    units = st.pp_total * stage_units
    if units > MAX_SCHEDULE_UNITS or stage_units > MAX_STAGE_UNITS:
        raise rule_error("R_LIMIT_SCHEDULE", inp.path("micro_batch_num"), mb,
                         f"pipeline_stage × pp_interleave_num × micro_batch_num × seq_split_num = "
                         f"{st.pp_total} × {st.vpp} × {mb} × {st.seq_split} = {units:,} units ({stage_units:,} per "
                         f"stage) is over autotune's limit of {MAX_SCHEDULE_UNITS:,} ({MAX_STAGE_UNITS:,} per stage) "
                         "simulated units", "use fewer micro-batches")
    imb = inp.micro_batch_interleave_num
    if imb is not ABSENT and st.mode == "mcore" and st.unified and (not is_int(imb) or imb > 1):
        raise rule_error("R_MB_INTERLEAVE_MCORE", inp.path("micro_batch_interleave_num"), imb,
                         "mcore models reject micro_batch_interleave_num > 1 (MindFormers r1.7.0+ "
                         "base_trainer: 'not supported when use_legacy=False')", "use 1")


def _zbv_rules(st: _State, layout: bool) -> None:
    inp, pp, mb = st.inp, st.pp, st.mb
    if not st.unified:
        raise rule_error("R_ZBV_VERSION", inp.path("pipeline_scheduler"), st.sched,
                         "zero_bubble_v is handled only by MindFormers r1.7+",
                         "use --mindformers-version 1.7/1.8 or another scheduler")
    if layout and st.vpp != 2:
        raise ConfigError(f"zero_bubble_v requires pp_interleave_num = 2 (a V schedule: 2 chunks per "
                          f"stage) with pipeline_interleave: true, got {st.vpp}; fix: set "
                          "pp_interleave_num: 2 (MindFormers r1.7.0+ TransformerConfig)", field=inp.path("vpp"),
                          value=st.vpp_raw, rule="R_ZBV_VPP")
    if pp < 2:
        raise rule_error("R_ZBV_VPP", inp.path("pp"), pp, "zero_bubble_v requires pipeline_stage >= 2",
                         "use pipeline_stage >= 2 or another scheduler")
    if mb is not None and mb < 2 * pp:
        raise ConfigError(f"zero_bubble_v requires micro_batch_num >= 2 × pipeline_stage = {2 * pp}, "
                          f"got {mb}; fix: raise micro_batch_num to >= {2 * pp} (MindFormers r1.7.0+ "
                          "TransformerConfig)", field=inp.path("micro_batch_num"), value=mb, rule="R_ZBV_MICRO")
    rec = inp.recompute
    if layout and isinstance(rec, (list, tuple)) and (len(rec) < 2 or not isinstance(rec[0], (list, tuple))):
        raise rule_error("R_ZBV_RECOMPUTE_2D", inp.path("recompute"), rec,
                         "zero_bubble_v needs recompute as a [2][pipeline_stage] table (per chunk, "
                         "physical stage order); a 1-D list is rejected",
                         f"write [[...{pp} counts...], [...{pp} counts...]]")


def _seq_pipe_rules(st: _State, layout: bool) -> None:
    inp = st.inp
    if layout and st.sched == "seqvpp" and st.seq_split <= 1:
        raise rule_error("R_SEQVPP_SPLIT", inp.path("seq_split_num"), st.seq_split,
                         "pipeline_scheduler seqvpp needs seq_split_num > 1 (MindFormers r1.5.0+ check_rules)",
                         "use seqpipe, or seq_split_num > 1")
    if layout and st.sched == "seqsmartvpp" and st.pp % 2:
        raise rule_error("R_SEQSMARTVPP_PP", inp.path("pp"), st.pp, "seqsmartvpp needs an even pipeline_stage",
                         "use an even pipeline_stage or another scheduler")
    if st.seq_split > 1 and st.pp_total > 1:
        if layout and truthy(inp.recompute):
            raise rule_error("R_SEQPIPE_RECOMPUTE", inp.path("recompute"), inp.recompute,
                             f"seq pipe (seq_split_num = {st.seq_split} > 1) forbids full recompute; "
                             "MindFormers r1.5.0–master (base_trainer: 'When using seq pipe, cannot apply "
                             "full recompute') tests plain truthiness, so even an all-zero list is rejected",
                             "write recompute: false and use select_recompute instead")
        if st.mode == "mcore" and st.unified:
            raise rule_error("R_SEQPIPE_MCORE", inp.path("seq_split_num"), st.seq_split,
                             "mcore models reject seq_split_num > 1 with pipeline_stage > 1 (MindFormers "
                             "r1.7.0+ base_trainer: 'not supported when use_legacy=False')", "use seq_split_num: 1")


def _cross_field_rules(st: _State, *, layout: bool = True) -> None:
    inp = st.inp
    _micro_batch_rules(st)
    if st.zbv and layout:      # scheduler rules are layout-level: a search space may change the scheduler
        _zbv_rules(st, layout)
    _seq_pipe_rules(st, layout)
    if st.slice_act and st.mode == "mcore" and st.unified:
        raise rule_error("R_SLICE_ACTIVATION_MCORE", inp.path("recompute_slice_activation"), True,
                         "recompute_slice_activation is not supported for mcore models (MindFormers r1.7.0+ "
                         "TransformerConfig)", "set recompute_slice_activation: false")
    if st.pp_total > 1 and st.n_split < st.pp:
        raise rule_error("R_NUM_LAYERS_MIN", inp.path("num_layers"), st.n,
                         f"num_layers ({st.n_split}) must be >= pipeline_stage ({st.pp}) (MindFormers "
                         "check_pipeline_stage)", "use fewer pipeline stages")
    if not layout:
        return
    if st.pp_total > 1 and st.interleave and st.total > st.n_split:
        raise rule_error("R_NUM_LAYERS_MIN", inp.path("vpp"), st.vpp,
                         f"pipeline_stage × pp_interleave_num = {st.total} exceeds num_layers = {st.n_split}",
                         "lower pp_interleave_num")
    if not st.swap or (st.version == "1.5" and st.mode == "mcore"):
        for k in ("recompute", "select_recompute", "select_comm_recompute"):
            val = getattr(inp, k)
            if is_1d_counts(val) and len(val) > st.pp_total:
                raise rule_error("R_RECOMPUTE_LEN", inp.path(k), val,
                                 f"length of {k} ({len(val)}) must be <= pipeline_stage ({st.pp_total}) "
                                 f"(MindFormers check_rules){pp_hint(inp)}",
                                 f"give at most {st.pp_total} per-stage counts")


def validate_config_level(inp: LayerInputs, version: str = "1.8") -> list[Warning_]:
    """The rules of :func:`normalize` that do not depend on the keys a search may change (offset,
    pp_interleave_num, recompute values, patterns, the scheduler's own rules): types, input limits,
    MTP, micro_batch_num, seq pipe on mcore, mcore-only rules. Every command runs them when it loads a config; the
    loader also takes autotune's own schedule names (:data:`AUTOTUNE_SCHEDULERS`), which ``check``
    (:func:`normalize`) refuses.

    Returns:
        the warnings of those steps.

    Raises:
        ConfigError: as :func:`normalize` (strict mode).
    """
    st = _State(inp, _check_version(version), emulate=False)
    _read_inputs(st, autotune_names=True)
    _resolve_vpp(st, layout=False)
    _count_mtp(st)
    _cross_field_rules(st, layout=False)
    return st.warns


# ---- step 5: placement ---------------------------------------------------------------------------

@dataclass
class _Placement:
    layers: np.ndarray            # [vpp][pp] logged layers per mini-stage
    acc: np.ndarray               # accumulated, [vpp][pp]
    flat_idx: np.ndarray          # mini-stage (row-major) of each layer
    pos: np.ndarray               # position of each layer inside its mini-stage
    v_of: np.ndarray
    p_of: np.ndarray
    effective: np.ndarray
    physical: list[int]

    @property
    def ids(self) -> np.ndarray:
        return np.arange(len(self.flat_idx))


def _place(st: _State) -> _Placement:
    """§2.1: offset → layers per mini-stage (zbv row 1 reversed), ids, positions, physical stage."""
    layers, _ = layers_from_offset(st.inp, st.n_split, st.pp, st.vpp, st.offset, st.version, st.emulate,
                                   st.warns)
    pp, total, n = st.pp, st.total, st.n_split
    if st.zbv:
        layers[1] = layers[1][::-1].copy()
        st.warns.append(Warning_("W_STAGE0_HOLDS_HEAD", st.inp.path("pipeline_scheduler"),
                                 "under zero_bubble_v the output layer (and MTP) sit on physical stage 0 "
                                 "next to the embedding: stage 0 is the memory hot spot; give it fewer layers"))
    acc = np.cumsum(layers.reshape(-1)).reshape(st.vpp, pp)
    acc_flat = acc.reshape(-1)
    ids = np.arange(n)
    # first mini-stage (row-major) whose accumulated count exceeds i; middle stages are >= 0 here,
    # so acc is non-decreasing except possibly a negative head/tail (handled by the linear rule).
    if np.all(np.diff(acc_flat) >= 0):
        flat_idx = np.searchsorted(acc_flat, ids, side="right").astype(np.int64)
    else:                                  # a negative head/tail mini-stage (emulate, r1.3–r1.7)
        flat_idx = np.array([int(np.argmax(acc_flat > i)) for i in ids], dtype=np.int64)
    effective = np.bincount(flat_idx, minlength=total).reshape(st.vpp, pp).astype(np.int64)
    starts_flat = np.concatenate([[0], acc_flat[:-1]])
    pos = ids - starts_flat[flat_idx]
    v_of, p_of = flat_idx // pp, flat_idx % pp
    physical = (np.where(v_of == 1, pp - 1 - p_of, p_of) if st.zbv else p_of) + st.start_stage
    return _Placement(layers, acc, flat_idx, pos, v_of, p_of, effective, physical.tolist())


# ---- step 6: version quirks ----------------------------------------------------------------------

def _version_quirks(st: _State) -> tuple[bool, bool]:
    """(exclude keys active, swap mode active) for this release and model path, with warnings."""
    inp, warns = st.inp, st.warns
    mcore_dev = st.version == "1.5" and st.mode == "mcore"
    exclude_given = (inp.select_recompute_exclude is not ABSENT or inp.select_comm_recompute_exclude is not ABSENT)
    if exclude_given and mcore_dev:
        warns.append(Warning_("W_KEY_IGNORED", inp.path("select_recompute_exclude"),
                              "the exclude keys do not exist in the mcore class of r1.6/dev; they are "
                              "ignored (use --mindformers-version 1.7+)"))
    if st.swap and mcore_dev:
        warns.append(Warning_("W_KEY_IGNORED", inp.path("swap"),
                              "swap is not supported by the mcore class of r1.6/dev; ignored"))
    swap_active = st.swap and not mcore_dev
    if swap_active and st.pp_total > 1 and st.version in ("1.5", "1.7"):
        warns.append(Warning_("W_SWAP_NO_STAGE", inp.path("swap"),
                              f"in swap mode MindFormers {st.version} does not set each layer's pipeline "
                              "stage; do not combine swap with pipeline_stage > 1 on this release"))
    if mcore_dev and (truthy(inp.select_recompute) or truthy(inp.select_comm_recompute)):
        warns.append(Warning_("W_SELECT_DROPPED", inp.path("select_recompute"),
                              "on mcore models of r1.6/dev the select keys in recompute_config do not "
                              "reach LayerSetting (dropped in the config conversion)"))
    return exclude_given and not mcore_dev, swap_active


# ---- step 7: recompute tables and patterns -------------------------------------------------------

@dataclass
class _Tables:
    formatted: dict[str, Any]                        # key -> Formative value (pattern dicts for select keys)
    tables: dict[str, Any]                           # key -> table (recompute) or {pattern: table}


def _zbv_reverse(st: _State, spec: Any, path: str) -> Any:
    """Under zero_bubble_v every list value gets element [1] reversed (§2.4)."""
    if not st.zbv or not isinstance(spec, (list, tuple)):
        return spec
    if len(spec) < 2:
        raise rule_error("R_ZBV_RECOMPUTE_2D", path, spec,
                         "zero_bubble_v reverses element [1] of every list value; this one has fewer than 2 "
                         "elements (IndexError in MindFormers)", f"write a [2][{st.pp}] table")
    second = spec[1]
    if isinstance(second, str):
        return spec
    if not isinstance(second, (list, tuple)):
        raise rule_error("R_ZBV_RECOMPUTE_2D", path, spec,
                         "zero_bubble_v reverses element [1] of every list value; a 1-D count list fails "
                         "(TypeError in MindFormers)", f"write a [2][{st.pp}] table")
    out = list(spec)
    out[1] = list(second)[::-1]
    return out


def _format(st: _State, pl: _Placement, swap_active: bool, spec: Any, path: str,
            key: str) -> tuple[Any, np.ndarray | None]:
    if swap_active:
        val = swap_value(spec, path)
        check_swap_layers(val, st.n_split, path)
        return val, None
    return count_table(_zbv_reverse(st, spec, path), pl.layers, path, key=key, strict=st.strict, warns=st.warns)


def _pattern_dict(st: _State, pl: _Placement, swap_active: bool, key: str,
                  value: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    formatted: dict[str, Any] = {}
    tables: dict[str, np.ndarray] = {}
    for pat, spec, path in patterns_of(value, key, st.mode, st.inp.path(key)):
        compile_segments(pat, path, version=st.version)
        f, t = _format(st, pl, swap_active, spec, path, key)
        formatted[pat] = f
        if t is not None:
            tables[pat] = t
    return formatted, tables


def _recompute_and_patterns(st: _State, pl: _Placement, has_exclude: bool, swap_active: bool) -> _Tables:
    inp = st.inp
    fmt: dict[str, Any] = {}
    tab: dict[str, Any] = {}
    fmt["recompute"], tab["recompute"] = _format(st, pl, swap_active, inp.recompute, inp.path("recompute"),
                                                 "recompute")
    for key in ("select_recompute", "select_comm_recompute"):
        fmt[key], tab[key] = _pattern_dict(st, pl, swap_active, key, getattr(inp, key))
    fmt["select_recompute_exclude"] = fmt["select_comm_recompute_exclude"] = None
    tab["select_recompute_exclude"] = tab["select_comm_recompute_exclude"] = {}
    if has_exclude:
        for key, base in (("select_recompute_exclude", "select_recompute"),
                          ("select_comm_recompute_exclude", "select_comm_recompute")):
            value = getattr(inp, key)
            fmt[key], tab[key] = _pattern_dict(st, pl, swap_active, key, False if value is ABSENT else value)
            _remove_conflicts(st, fmt[key], fmt[base], tab[base], base)
    return _Tables(fmt, tab)


def _remove_conflicts(st: _State, ex_fmt: dict[str, Any], s_fmt: dict[str, Any],
                      s_tab: dict[str, np.ndarray], key: str) -> None:
    """§4.3: each exclude pattern deletes the first select pattern it conflicts with (bounded
    ``regex`` matching with MindFormers' timeout; a timeout is no match)."""
    path = st.inp.path(key)
    for ex_pat in ex_fmt:
        for s_pat in list(s_fmt):
            before = st.budget.timeout_events
            hit = patterns_conflict(ex_pat, s_pat, path, st.budget)
            if st.budget.timeout_events > before:
                st.warns.append(Warning_("W_PATTERN_TIMEOUT", path,
                                         f"matching pattern {s_pat[:60]!r} against exclude pattern "
                                         f"{ex_pat[:60]!r} timed out; like MindFormers r1.6+ (regex, 1 s "
                                         "timeout) this counts as no conflict"))
            if hit:
                del s_fmt[s_pat]
                s_tab.pop(s_pat, None)
                st.warns.append(Warning_("W_SELECT_REMOVED_BY_EXCLUDE", path,
                                         f"pattern {s_pat!r} conflicts with exclude pattern {ex_pat!r} and is "
                                         "removed for every layer"))
                break


# ---- step 8: per-layer decisions (§5) ------------------------------------------------------------

@dataclass
class _Layers:
    full: np.ndarray
    sel: dict[str, list[int]]
    com: dict[str, list[int]]
    selx: dict[str, list[int]] | None
    comx: dict[str, list[int]] | None
    select_only: np.ndarray | None


def _per_layer(st: _State, pl: _Placement, t: _Tables, has_exclude: bool, swap_active: bool) -> _Layers:
    n, ids = st.n_split, pl.ids
    fmt, tab = t.formatted, t.tables
    if swap_active:
        rec_list = fmt["recompute"]
        full = np.ones(n, bool) if rec_list is True else np.isin(ids, rec_list or [])

        def applied(val: Any) -> np.ndarray:
            return np.ones(n, bool) if val is True else np.isin(ids, val or [])

        def lists(d: dict[str, Any]) -> dict[str, list[int]]:
            return {k: ids[applied(v) & ~full].tolist() for k, v in d.items() if v is True or v}

        def none_applied(d: dict[str, Any] | None) -> dict[str, list[int]] | None:   # exclude keys: unused
            return None if d is None else {k: [] for k in d}

        return _Layers(full, lists(fmt["select_recompute"]), lists(fmt["select_comm_recompute"]),
                       none_applied(fmt["select_recompute_exclude"]),
                       none_applied(fmt["select_comm_recompute_exclude"]), None)

    def mask(table: np.ndarray) -> np.ndarray:
        return pl.pos < table[pl.v_of, pl.p_of] if n else np.zeros(0, bool)

    rec = st.inp.recompute
    if isinstance(rec, (bool, np.bool_)):
        full = np.full(n, bool(rec))
    else:
        full = mask(tab["recompute"]) if truthy(rec) else np.zeros(n, bool)
    sel = {k: ids[mask(v) & ~full].tolist() for k, v in tab["select_recompute"].items()}
    com = {k: ids[mask(v) & ~full].tolist() for k, v in tab["select_comm_recompute"].items()}
    selx = {k: ids[mask(v)].tolist() for k, v in tab["select_recompute_exclude"].items()} if has_exclude else None
    comx = {k: ids[mask(v)].tolist() for k, v in tab["select_comm_recompute_exclude"].items()} if has_exclude else None
    any_sel = np.zeros(n, bool)
    for v in tab["select_recompute"].values():
        any_sel |= mask(v)
    select_only = np.bincount(pl.flat_idx[any_sel & ~full], minlength=st.total).reshape(st.vpp, st.pp)
    return _Layers(full, sel, com, selx, comx, select_only)


# ---- step 9: advice ------------------------------------------------------------------------------

def _timeout_warning(path: str, pattern: str, name: str) -> Warning_:
    return Warning_("W_PATTERN_TIMEOUT", path,
                    f"matching pattern {pattern[:60]!r} against the cell / op name {name[:60]!r} timed out; like "
                    "MindFormers r1.6+ (regex, 1 s timeout) this counts as no match")


def _advice(st: _State, t: _Tables) -> None:
    inp, mode = st.inp, st.mode
    other = "mcore" if mode == "legacy" else "legacy"
    fam, arch = inp.cell_family or (None, None)
    for key in ("select_recompute", "select_comm_recompute"):
        pats = t.formatted[key]
        for pat in pats:
            if fam is not None and fam.mode == mode:   # registry of the model class's cell names
                before = st.budget.timeout_events
                msg = select_no_match(fam, arch, key, pat, pats[pat], yaml_field=inp.path(key))
                if st.budget.timeout_events > before:
                    st.warns.append(_timeout_warning(inp.path(key), pat, st.budget.timed_out.get(pat, "")))
                if msg:
                    st.warns.append(Warning_("W_SELECT_NO_MATCH", inp.path(key), msg))
                continue
            head = pat.split("\\.")[0]
            if head in _FAMILY_NAMES[other] and head not in _FAMILY_NAMES[mode]:
                st.warns.append(Warning_("W_SELECT_NO_MATCH", inp.path(key),
                                         f"pattern {pat!r} names {head!r}, a {other}-model cell; on this "
                                         f"{mode} model (use_legacy: {mode == 'legacy'}) it matches no op"))
    mb = st.mb
    if st.vpp > 1 and mb is not None and not st.zbv and (st.pp - 1) / mb <= VPP_LOW_GAIN_BUBBLE:
        st.warns.append(Warning_("W_VPP_LOW_GAIN", inp.path("vpp"),
                                 f"with micro_batch_num = {mb} the 1F1B bubble (pp-1)/m = {(st.pp - 1) / mb:.3f} "
                                 f"is already small; pp_interleave_num = {st.vpp} adds memory and communication "
                                 "and may be slower than pp_interleave_num: 1 (a rule of thumb: `autotune "
                                 "search` prices both and keeps the faster)"))
    if mb is None and st.pp_total > 1 and inp.from_yaml:
        st.warns.append(Warning_("W_MICRO_BATCH_DEFAULT", inp.path("micro_batch_num"),
                                 f"micro_batch_num is not set: MindFormers uses 1, fewer than pipeline_stage = "
                                 f"{st.pp_total}, which MindSpore's pipeline rejects; set micro_batch_num >= "
                                 f"{st.pp_total}"))


# ---- main entry ----------------------------------------------------------------------------------

def normalize(inp: LayerInputs, version: str = "1.8", *, emulate: bool = False) -> LayerSettingResult:
    """Compute what MindFormers ``version`` does with ``inp`` (see module docstring).

    Args:
        inp: raw inputs (from :func:`autotune.config.layer_yaml.inputs_from_yaml` or built directly).
        version: "1.5" (r1.3–r1.6), "1.7" (r1.7.0) or "1.8" (r1.8.0/master).
        emulate: report pitfalls as warnings instead of rejecting them.

    Raises:
        ConfigError: with a stable rule code (R_OFFSET_SUM, R_OFFSET_SHAPE_PP, ...; R_PATTERN_BUDGET
            when matching the select / comm patterns used the config's pattern budget, shared with
            the enclosing :func:`~autotune.config.patterns.pattern_scope`).
    """
    with pattern_scope() as budget:   # one pattern budget per config read (or per enclosing command)
        return _normalize(_State(inp, _check_version(version), emulate, budget=budget))


def _normalize(st: _State) -> LayerSettingResult:
    emulate = st.emulate
    _read_inputs(st)
    _resolve_vpp(st)
    _count_mtp(st)
    _cross_field_rules(st)
    pl = _place(st)
    has_exclude, swap_active = _version_quirks(st)
    t = _recompute_and_patterns(st, pl, has_exclude, swap_active)
    lay = _per_layer(st, pl, t, has_exclude, swap_active)
    _advice(st, t)
    f, tab = t.formatted, t.tables
    return LayerSettingResult(
        version=st.version, emulate=emulate, num_layers=st.n_split, pp=st.pp, vpp=st.vpp,
        start_stage=st.start_stage, layers_vp=pl.layers, accumulated_vp=pl.acc,
        pipeline_ids=(pl.flat_idx % st.pp).tolist(), interleave_ids=(pl.flat_idx // st.pp).tolist(),
        effective_vp=pl.effective, recompute=f["recompute"], select_recompute=f["select_recompute"],
        select_comm_recompute=f["select_comm_recompute"], select_recompute_exclude=f["select_recompute_exclude"],
        select_comm_recompute_exclude=f["select_comm_recompute_exclude"],
        full_recompute_layers=pl.ids[lay.full].tolist(), select_recompute_layers=lay.sel,
        select_comm_recompute_layers=lay.com, select_recompute_exclude_layers=lay.selx,
        select_comm_recompute_exclude_layers=lay.comx, warnings=list(dict.fromkeys(st.warns)), zbv=st.zbv,
        swap=swap_active, model_mode=st.mode, mtp_num_layers=st.mtp, mtp_counted=st.mtp_counted,
        physical_stage_per_layer=pl.physical, show_start_stage=st.show_start,
        recompute_vp=tab["recompute"], select_vp=tab["select_recompute"], comm_vp=tab["select_comm_recompute"],
        select_only_vp=lay.select_only)


def layout_tables(num_layers: int, pp: int, vpp: int, *, offset: Any = 0, recompute: Any = False,
                  select_recompute: Any = False, select_comm_recompute: Any = False,
                  use_legacy: bool = True, version: str = "1.8"
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Strict normalization of bare layout values: (layers_vp, recompute_vp, select tables, comm
    tables), all int64 [vpp][pp]; ``vpp`` is the effective interleave count.

    Raises:
        ConfigError: as :func:`normalize` (strict mode).
    """
    res = normalize(LayerInputs(num_layers=num_layers, pp=pp, vpp=vpp, offset=offset, recompute=recompute,
                                select_recompute=select_recompute,
                                select_comm_recompute=select_comm_recompute,
                                pipeline_interleave=vpp > 1,
                                model_mode="legacy" if use_legacy else "mcore"), version)
    assert res.recompute_vp is not None
    return res.layers_vp, res.recompute_vp, res.select_vp, res.comm_vp
