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
  negative recompute counts, string lists in ``recompute``);
- **emulate**: report what the version really does (``effective_layers_per_stage`` = the real
  placement), with a warning code per pitfall.

Every rejection is a :class:`~autotune.errors.ConfigError` with a stable ``rule`` code, the YAML
path as ``field`` and a message naming the value and the fix. Tables are ``[vpp][pp]``
(chunk-major), as MindFormers logs them. Pure: numpy and ``re`` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.config.cells import family_from_yaml, select_no_match
from autotune.errors import ConfigError

VERSIONS = ("1.5", "1.7", "1.8")
SCHEDULERS = ("1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp", "zero_bubble_v")
MAX_LAYERS = 100_000          # sanity bound: ids are listed per layer
MAX_PP = 4096
HUGE = 2**31 - 1              # what MindFormers substitutes for True in a 1-D count list
VPP_LOW_GAIN_BUBBLE = 0.1     # warn when the 1F1B bubble (pp-1)/m is already at most this

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
    (its rules are then not checked); the exclude keys are :data:`ABSENT` when not given;
    ``mtp_counted`` None = decided by version and model path (§2.5 of the spec).
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
# small helpers

def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_intlike(x: Any) -> bool:
    return isinstance(x, (int, np.integer, bool, np.bool_))


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _err(rule: str, path: str, value: Any, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{problem} (got {_short(value)}); fix: {fix}", field=path, value=value,
                       rule=rule)


def _check_version(version: str) -> str:
    v = str(version)
    if v not in VERSIONS:
        raise ConfigError(f"unknown MindFormers version {v!r}; fix: use one of {', '.join(VERSIONS)}",
                          field="--mindformers-version", value=v, rule="R_VERSION")
    return v


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


# ----------------------------------------------------------------------------------------------
# input resolution

def _pos_int(inp: LayerInputs, name: str, value: Any, *, minimum: int = 1,
             maximum: int | None = None) -> int:
    path = inp.path(name)
    if not _is_int(value):
        raise _err("R_TYPE", path, value, f"{name} must be an integer", f"write a whole number >= {minimum}")
    if value < minimum:
        raise _err("R_RANGE", path, value, f"{name} must be >= {minimum}", f"use a value >= {minimum}")
    if maximum is not None and value > maximum:
        raise _err("R_RANGE", path, value, f"{name} must be <= {maximum} (sanity bound)",
                   f"use a value <= {maximum}")
    return int(value)


def _bool_in(inp: LayerInputs, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _err("R_TYPE", inp.path(name), value, f"{name} must be true or false", "write true or false")
    return bool(value)


def _truthy(value: Any) -> bool:
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - numpy arrays etc.
        return True


# ----------------------------------------------------------------------------------------------
# offset -> layers per mini-stage

def _offset_array(inp: LayerInputs, offset: Any, warns: list[Warning_]) -> np.ndarray:
    path = inp.path("offset")
    fix = "write an integer, a list of pipeline_stage integers or a [pp_interleave_num][pipeline_stage] table"

    def ok(x: Any, depth: int) -> bool:
        if isinstance(x, (list, tuple)):
            return depth < 8 and all(ok(y, depth + 1) for y in x)
        return isinstance(x, (int, float, bool, np.integer, np.floating, np.bool_))

    if offset is None or not ok(offset, 0):
        raise _err("R_OFFSET_TYPE", path, offset, "offset must be numeric", fix)
    try:
        arr = np.array(offset, dtype=np.float64)
    except (ValueError, TypeError):
        raise _err("R_OFFSET_TYPE", path, offset,
                   "offset is a ragged list (rows of different lengths); MindFormers' int32 "
                   "conversion raises ValueError", fix) from None
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) >= 2**31):
        raise _err("R_OFFSET_TYPE", path, offset, "offset values must fit in int32", fix)
    trunc = np.trunc(arr)
    if np.any(trunc != arr):
        warns.append(Warning_("W_OFFSET_FLOAT", path,
                              f"offset {_short(offset)} has fractions; MindFormers truncates them toward "
                              f"zero to {trunc.astype(np.int64).tolist()}; write integers"))
    return trunc.astype(np.int64)


def _layers_from_offset(inp: LayerInputs, n: int, pp: int, vpp: int, offset: Any, version: str,
                        emulate: bool, warns: list[Warning_]) -> tuple[np.ndarray, np.ndarray]:
    """Returns (layers_per_stage as logged [vpp][pp], broadcast offset)."""
    path = inp.path("offset")
    total = pp * vpp
    base, rem = divmod(n, total)
    if version == "1.8" and total <= 1:
        if not _offset_is_zero(offset):
            warns.append(Warning_("W_OFFSET_IGNORED_PP1", path,
                                  f"offset {_short(offset)} is ignored by MindFormers r1.8+ when "
                                  f"pipeline_stage × pp_interleave_num = {total} (all {n} layers on one "
                                  "stage); remove it (r1.3–r1.7 reject it unless it sums to 0)"))
        return np.full((vpp, pp), base, dtype=np.int64), np.zeros((vpp, pp), dtype=np.int64)
    arr = _offset_array(inp, offset, warns)
    if arr.ndim >= 1 and arr.shape[-1] != pp:
        raise _err("R_OFFSET_SHAPE_PP", path, offset,
                   f"offset's last dimension must equal pipeline_stage = {pp}, got {arr.shape[-1]}",
                   f"give {pp} values per row, e.g. {suggest_offset(n, pp, vpp)}")
    if arr.ndim >= 2 and arr.shape[-2] != vpp:
        extra = (" (pp_interleave_num is forced to 1 because parallel.pipeline_config."
                 "pipeline_interleave is off)" if inp.vpp not in (None, 1) and vpp == 1 else "")
        raise _err("R_OFFSET_SHAPE_VPP", path, offset,
                   f"offset's row count must equal pp_interleave_num = {vpp}{extra}, got {arr.shape[-2]}",
                   f"give {vpp} row(s), e.g. {suggest_offset(n, pp, vpp)}")
    if arr.ndim > 2:
        raise _err("R_OFFSET_SHAPE_VPP", path, offset,
                   f"offset has {arr.ndim} dimensions; at most 2 ([pp_interleave_num][pipeline_stage])",
                   f"use a [{vpp}][{pp}] table, e.g. {suggest_offset(n, pp, vpp)}")
    s = int(arr.sum())
    if s != rem:
        raise ConfigError(
            f"offset must sum to num_layers % (pipeline_stage × pp_interleave_num) = {rem}, got {s} "
            f"({n} % ({pp} × {vpp}) = {rem}; offset {_short(offset)}); fix: change the offsets so they "
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
            raise _err("R_OFFSET_OVERCOUNT", path, offset, msg,
                       f"give {shape}, e.g. {suggest_offset(n, pp, vpp)}")
        warns.append(Warning_("W_OFFSET_OVERCOUNT", path, msg))
    layers = base + full
    flat = layers.reshape(-1)
    if version == "1.8":
        if flat[0] < 0:
            raise _err("R_STAGE_NEGATIVE", path, offset,
                       f"head mini-stage gets {flat[0]} layers; offset[0][0] must be >= -{base}",
                       f"raise it to >= -{base}, e.g. {suggest_offset(n, pp, vpp)}")
        if flat[-1] < 0:
            raise _err("R_STAGE_NEGATIVE", path, offset,
                       f"tail mini-stage gets {flat[-1]} layers; offset[-1][-1] must be >= -{base}",
                       f"raise it to >= -{base}, e.g. {suggest_offset(n, pp, vpp)}")
        if total > 2 and np.any(flat[1:-1] < 1):
            raise _err("R_STAGE_EMPTY_MIDDLE", path, offset,
                       f"a middle mini-stage gets fewer than 1 layer (layers per stage "
                       f"{layers.tolist()}); middle offsets must be >= {1 - base}",
                       f"move layers so every middle mini-stage has >= 1, e.g. {suggest_offset(n, pp, vpp)}")
        return layers, full
    # r1.3-r1.7 accept negative / empty mini-stages
    if total > 2 and np.any(flat[1:-1] < 0):
        raise _err("R_STAGE_NEGATIVE", path, offset,
                   f"a middle mini-stage gets a negative layer count ({layers.tolist()}); the "
                   "cumulative table is then unsorted and MindFormers' placement is undefined",
                   f"use non-negative counts, e.g. {suggest_offset(n, pp, vpp)}")
    if flat[0] < 0 or flat[-1] < 0:
        msg = (f"the logged layers per stage {layers.tolist()} contain a negative count; MindFormers "
               f"r1.3–r1.7 accept it but place the layers differently than logged")
        if not emulate:
            raise _err("R_STAGE_NEGATIVE", path, offset, msg,
                       f"use non-negative counts, e.g. {suggest_offset(n, pp, vpp)}")
        warns.append(Warning_("W_STAGE_NEGATIVE", path, msg))
    if total > 2 and np.any(flat[1:-1] == 0):
        warns.append(Warning_("W_STAGE_EMPTY_MIDDLE", path,
                              f"a middle mini-stage holds 0 layers ({layers.tolist()}); accepted by "
                              f"r1.3–r1.7 but rejected by r1.8+; e.g. {suggest_offset(n, pp, vpp)}"))
    return layers, full


def _offset_is_zero(offset: Any) -> bool:
    try:
        arr = np.array(offset, dtype=np.float64)
    except (ValueError, TypeError):
        return False
    return bool(arr.size == 0 or np.all(arr == 0))


# ----------------------------------------------------------------------------------------------
# count normaliser F (§3.1-3.2)

def _is_1d_counts(spec: Any) -> bool:
    return isinstance(spec, (list, tuple)) and all(_is_intlike(x) for x in spec)


def _is_str_list(spec: Any) -> bool:
    return isinstance(spec, (list, tuple)) and all(isinstance(x, str) for x in spec)


def _count_table(spec: Any, layers: np.ndarray, path: str, *, key: str, strict: bool,
                 warns: list[Warning_]) -> tuple[Any, np.ndarray]:
    """Return (formatted value as MindFormers logs it, dense int table [vpp][pp] for lookups)."""
    vpp, pp = layers.shape
    fix = (f"write true/false, a list of up to {pp} per-stage counts, or a [{vpp}][{pp}] table of "
           "non-negative counts")
    if isinstance(spec, (bool, np.bool_)):
        table = layers.copy() if spec else np.zeros_like(layers)
        return table.tolist(), table
    if isinstance(spec, (list, tuple)):
        if _is_1d_counts(spec):
            if len(spec) > pp:
                raise _err("R_RECOMPUTE_LEN", path, spec,
                           f"a per-stage list has {len(spec)} entries, more than pipeline_stage = {pp} "
                           "(IndexError in MindFormers)", f"give at most {pp} entries")
            table = np.zeros_like(layers)
            colsum = layers.sum(axis=0)
            for j, c in enumerate(spec):
                c = HUGE if c is True or c is np.True_ else int(c)
                if c < 0:
                    raise _err("R_RECOMPUTE_NEGATIVE", path, spec,
                               f"count {c} for stage {j} is negative; MindFormers' round-robin split "
                               "never terminates (hang)", "use counts >= 0")
                c = min(c, int(colsum[j]))
                if c < 0:
                    raise _err("R_RECOMPUTE_NEGATIVE", path, spec,
                               f"stage {j} has a negative layer total, so the split never terminates",
                               "fix the offset first")
                room = np.maximum(layers[:, j], 0)
                while c > 0:
                    for v in range(vpp):
                        if c > 0 and table[v, j] < room[v]:
                            table[v, j] += 1
                            c -= 1
            return table.tolist(), table
        if _is_str_list(spec):
            if key == "recompute":
                msg = ("a list of strings in recompute means 'every layer' to MindFormers (shared "
                       "formatter), which is almost never intended")
                if strict:
                    raise _err("R_RECOMPUTE_TYPE", path, spec, msg,
                               "write recompute: true, or move op patterns to select_recompute")
                warns.append(Warning_("W_RECOMPUTE_STRINGS", path, msg))
            table = layers.copy()
            return table.tolist(), table
        if all(isinstance(r, (list, tuple, bool, np.bool_)) for r in spec):
            real_rows = [r for r in spec[vpp:] if not (isinstance(r, (list, tuple)) and len(r) == 0)]
            if len(spec) > vpp and real_rows:
                raise _err("R_RECOMPUTE_LEN", path, spec,
                           f"the table has {len(spec)} rows, more than pp_interleave_num = {vpp} "
                           "(IndexError in MindFormers)", f"give {vpp} row(s) of {pp}")
            out_rows: list[Any] = []
            table = np.zeros_like(layers)
            for v, row in enumerate(spec):
                if v >= vpp:
                    out_rows.append(list(row))
                    continue
                if isinstance(row, (bool, np.bool_)):
                    r = layers[v].copy() if row else np.zeros(pp, dtype=np.int64)
                    table[v] = r
                    out_rows.append(r.tolist())
                    continue
                if len(row) > pp:
                    raise _err("R_RECOMPUTE_LEN", path, spec,
                               f"row {v} has {len(row)} entries, more than pipeline_stage = {pp} "
                               "(IndexError in MindFormers)", f"give {pp} entries per row")
                new_row = []
                for j, c in enumerate(row):
                    if isinstance(c, (bool, np.bool_)):
                        val = int(layers[v, j]) if c else 0
                    elif _is_int(c):
                        val = min(int(c), int(layers[v, j]))
                        if val < 0:
                            msg = (f"count {int(c)} at [{v}][{j}] is negative; MindFormers keeps it "
                                   "and selects no layer")
                            if strict:
                                raise _err("R_RECOMPUTE_NEGATIVE", path, spec, msg, "use counts >= 0")
                            warns.append(Warning_("W_RECOMPUTE_NEGATIVE", path, msg))
                    else:
                        raise _err("R_RECOMPUTE_TYPE", path, spec,
                                   f"illegal entry {c!r} at [{v}][{j}] (MindFormers: 'Illegal input list "
                                   "for select_recompute')", fix)
                    new_row.append(val)
                    table[v, j] = val
                if len(row) < pp and np.any(layers[v, len(row):] > 0):
                    raise _err("R_RECOMPUTE_LEN", path, spec,
                               f"row {v} has {len(row)} entries, fewer than pipeline_stage = {pp}; "
                               "MindFormers raises IndexError when it configures those layers",
                               f"give {pp} entries per row")
                out_rows.append(new_row)
            if len(spec) < vpp and np.any(layers[len(spec):] > 0):
                raise _err("R_RECOMPUTE_LEN", path, spec,
                           f"the table has {len(spec)} rows, fewer than pp_interleave_num = {vpp}; "
                           "MindFormers raises IndexError when it configures those layers",
                           f"give {vpp} row(s) of {pp}")
            return out_rows, table
    raise _err("R_RECOMPUTE_TYPE", path, spec,
               "not an accepted count form (MindFormers: 'Illegal input list for select_recompute')", fix)


def _swap_value(spec: Any, path: str) -> Any:
    """Swap mode: True stays True, False -> [], int list kept as layer ids (§3.5)."""
    if isinstance(spec, (bool, np.bool_)):
        return True if spec else []
    if isinstance(spec, (list, tuple)) and all(_is_int(x) for x in spec):
        return [int(x) for x in spec]
    raise _err("R_RECOMPUTE_TYPE", path, spec,
               "in swap mode (swap_config.swap: true) recompute values are layer-index lists",
               "write true/false or a list of layer ids")


def _patterns(spec: Any, key: str, mode: str, path: str) -> list[tuple[str, Any, str]]:
    """(pattern, count spec, YAML path of the spec) for a select-type key (§4.1)."""
    if _is_str_list(spec):
        return [(p, spec, path) for p in dict.fromkeys(spec)]
    if isinstance(spec, dict):
        out = []
        for k, v in spec.items():
            if not isinstance(k, str):
                raise _err("R_RECOMPUTE_TYPE", path, spec, f"pattern keys must be strings, got {k!r}",
                           "quote the op-name regex, e.g. 'feed_forward\\.mul'")
            out.append((k, v, f"{path}.{k}"))
        return out
    if spec is None:
        raise _err("R_RECOMPUTE_TYPE", path, spec, f"{key} must not be null (ValueError in MindFormers)",
                   "omit the key or write false")
    defaults = DEFAULT_PATTERNS.get((key, mode), [])
    return [(p, spec, path) for p in defaults]


def _compile(pattern: str, path: str) -> list[re.Pattern]:
    try:
        return [re.compile(seg) for seg in pattern.split("\\.")]
    except re.error as exc:
        raise _err("R_SELECT_PATTERN", path, pattern, f"invalid regular expression: {exc}",
                   "fix the pattern; segments are separated by a literal '\\.'") from None


def _conflict(a: str, b: str, path: str) -> bool:
    sa, sb = a.split("\\."), b.split("\\.")
    if len(sa) != len(sb):
        return False
    ca, cb = _compile(a, path), _compile(b, path)
    for x, y, rx, ry in zip(sa, sb, ca, cb):
        if len(x) > 200 or len(y) > 200:
            return False
        if not (rx.fullmatch(y) or ry.fullmatch(x)):
            return False
    return True


def _check_swap_layers(spec: Any, n: int, path: str) -> None:
    if isinstance(spec, list):
        bad = [x for x in spec if not 0 <= x < n]
        if bad:
            raise _err("R_RECOMPUTE_LEN", path, spec, f"layer ids {bad} are outside 0..{n - 1}",
                       f"use layer ids in 0..{n - 1}")


# ----------------------------------------------------------------------------------------------
# main entry

def normalize(inp: LayerInputs, version: str = "1.8", *, emulate: bool = False) -> LayerSettingResult:
    """Compute what MindFormers ``version`` does with ``inp`` (see module docstring).

    Args:
        inp: raw inputs (from :func:`inputs_from_yaml` or built directly).
        version: "1.5" (r1.3–r1.6), "1.7" (r1.7.0) or "1.8" (r1.8.0/master).
        emulate: report pitfalls as warnings instead of rejecting them.

    Raises:
        ConfigError: with a stable rule code (R_OFFSET_SUM, R_OFFSET_SHAPE_PP, ...).
    """
    version = _check_version(version)
    strict = not emulate
    warns: list[Warning_] = []
    mode = inp.model_mode if inp.model_mode in ("legacy", "mcore") else "legacy"
    unified = version in ("1.7", "1.8")

    n = _pos_int(inp, "num_layers", inp.num_layers, maximum=MAX_LAYERS)
    pp_total = _pos_int(inp, "pp", inp.pp, maximum=MAX_PP)
    mtp = _pos_int(inp, "mtp_num_layers", inp.mtp_num_layers, minimum=0, maximum=64)
    mb = None if inp.micro_batch_num is None else _pos_int(inp, "micro_batch_num", inp.micro_batch_num)
    seq_split = _pos_int(inp, "seq_split_num", 1 if inp.seq_split_num is None else inp.seq_split_num)
    sched = "1f1b" if inp.pipeline_scheduler is None else inp.pipeline_scheduler
    if isinstance(sched, str) and sched.lower() == "1f1b_less_memory":
        raise _err("R_SCHEDULER", inp.path("pipeline_scheduler"), sched,
                   "1f1b_less_memory is autotune's name for MindSpore's less-memory interleave, not "
                   "a MindFormers pipeline_scheduler",
                   "write pipeline_scheduler: 1f1b with pipeline_interleave: true and run with the "
                   "environment variable ENABLE_LESS_MEM_VPP=1 (MindSpore InterleavedScheduler, "
                   "jit_level O0/O1)")
    if not isinstance(sched, str) or sched.lower() not in SCHEDULERS:
        raise _err("R_SCHEDULER", inp.path("pipeline_scheduler"), sched, "unknown pipeline_scheduler",
                   f"use one of {', '.join(SCHEDULERS)}")
    sched = sched.lower()
    swap = _bool_in(inp, "swap", False if inp.swap is None else inp.swap)
    slice_act = _bool_in(inp, "recompute_slice_activation",
                         False if inp.recompute_slice_activation is None else inp.recompute_slice_activation)

    # ---- start_stage / stage_num (legacy LLaMA multimodal split) -------------------------------
    start_stage, pp, offset, show_start = 0, pp_total, inp.offset, False
    if mode == "legacy" and (inp.stage_num not in (0, None) or inp.start_stage not in (0, None)):
        ss = _pos_int(inp, "start_stage", inp.start_stage or 0, minimum=0, maximum=MAX_PP)
        sn = _pos_int(inp, "stage_num", inp.stage_num or 0, minimum=0, maximum=MAX_PP)
        show_start = True
        if sn != 0 and ss + sn <= pp_total:
            start_stage, pp = ss, sn
            if inp.stage_offset is not ABSENT:
                offset = inp.stage_offset
        elif sn != 0:
            warns.append(Warning_("W_STAGE_NUM_IGNORED", inp.path("stage_num"),
                                  f"start_stage + stage_num = {ss + sn} > pipeline_stage = {pp_total}; "
                                  "MindFormers ignores the pipeline_stage block"))

    # ---- vpp ------------------------------------------------------------------------------------
    vpp_raw = inp.vpp
    if vpp_raw is not None:
        vpp_raw = _pos_int(inp, "vpp", vpp_raw, maximum=MAX_PP)
    interleave = inp.pipeline_interleave
    if interleave is None:
        interleave = bool(vpp_raw and vpp_raw > 1)
    interleave = _bool_in(inp, "pipeline_interleave", interleave)
    if not interleave:
        vpp = 1
        if vpp_raw and vpp_raw > 1:
            warns.append(Warning_("W_INTERLEAVE_DISABLED", inp.path("pipeline_interleave"),
                                  f"pp_interleave_num = {vpp_raw} is silently treated as 1 because "
                                  "parallel.pipeline_config.pipeline_interleave is false; set it to true "
                                  "or remove pp_interleave_num"))
    elif vpp_raw is None:
        if mode == "mcore":
            raise _err("R_VPP_MISSING", inp.path("vpp"), None,
                       "mcore models need pp_interleave_num when pipeline_interleave is true "
                       "(None -> TypeError in MindFormers)", "add model.model_config.pp_interleave_num: 1")
        vpp = 1
    else:
        vpp = vpp_raw
    total = pp * vpp

    # ---- MTP counting ---------------------------------------------------------------------------
    mtp_counted = inp.mtp_counted
    if mtp_counted is None:
        mtp_counted = mode == "legacy" or version == "1.5"
    n_split = n + (mtp if mtp_counted else 0)
    if n_split > MAX_LAYERS:
        raise _err("R_RANGE", inp.path("num_layers"), n_split, f"num_layers must be <= {MAX_LAYERS}",
                   "use a smaller model")

    # ---- checks outside the class -------------------------------------------------------------
    zbv = sched == "zero_bubble_v"
    rec = inp.recompute
    if mb is not None and mb < pp_total:
        raise ConfigError(f"micro_batch_num must be >= pipeline_stage = {pp_total}, got {mb}; fix: use "
                          f"micro_batch_num >= {pp_total} (fewer only adds bubble; MindSpore enforces it)",
                          field=inp.path("micro_batch_num"), value=mb, rule="R_MICRO_BATCH_MIN")
    if zbv:
        if not unified:
            raise _err("R_ZBV_VERSION", inp.path("pipeline_scheduler"), sched,
                       "zero_bubble_v is handled only by MindFormers r1.7+",
                       "use --mindformers-version 1.7/1.8 or another scheduler")
        if vpp != 2:
            raise ConfigError(f"zero_bubble_v requires pp_interleave_num = 2 (a V schedule: 2 chunks per "
                              f"stage) with pipeline_interleave: true, got {vpp}; fix: set "
                              "pp_interleave_num: 2", field=inp.path("vpp"), value=vpp_raw,
                              rule="R_ZBV_VPP")
        if pp < 2:
            raise _err("R_ZBV_VPP", inp.path("pp"), pp, "zero_bubble_v requires pipeline_stage >= 2",
                       "use pipeline_stage >= 2 or another scheduler")
        if mb is not None and mb < 2 * pp:
            raise ConfigError(f"zero_bubble_v requires micro_batch_num >= 2 × pipeline_stage = {2 * pp}, "
                              f"got {mb}; fix: raise micro_batch_num to >= {2 * pp}",
                              field=inp.path("micro_batch_num"), value=mb, rule="R_ZBV_MICRO")
        if isinstance(rec, (list, tuple)) and (len(rec) < 2 or not isinstance(rec[0], (list, tuple))):
            raise _err("R_ZBV_RECOMPUTE_2D", inp.path("recompute"), rec,
                       "zero_bubble_v needs recompute as a [2][pipeline_stage] table (per chunk, "
                       "physical stage order); a 1-D list is rejected",
                       f"write [[...{pp} counts...], [...{pp} counts...]]")
    if sched == "seqvpp" and seq_split <= 1:
        raise _err("R_SEQVPP_SPLIT", inp.path("seq_split_num"), seq_split,
                   "pipeline_scheduler seqvpp needs seq_split_num > 1", "use seqpipe, or seq_split_num > 1")
    if sched == "seqsmartvpp" and pp % 2:
        raise _err("R_SEQSMARTVPP_PP", inp.path("pp"), pp, "seqsmartvpp needs an even pipeline_stage",
                   "use an even pipeline_stage or another scheduler")
    if seq_split > 1:
        if mode == "mcore" and unified:
            raise _err("R_SEQPIPE_MCORE", inp.path("seq_split_num"), seq_split,
                       "mcore models in MindFormers r1.7+ reject seq_split_num > 1", "use seq_split_num: 1")
        if pp_total > 1 and _truthy(rec):
            raise _err("R_SEQPIPE_RECOMPUTE", inp.path("recompute"), rec,
                       f"seq pipe (seq_split_num = {seq_split} > 1) forbids full recompute; MindFormers "
                       "tests plain truthiness, so even an all-zero list is rejected",
                       "write recompute: false and use select_recompute instead")
    if slice_act and mode == "mcore" and unified:
        raise _err("R_SLICE_ACTIVATION_MCORE", inp.path("recompute_slice_activation"), True,
                   "recompute_slice_activation is not supported for mcore models (r1.7+)",
                   "set recompute_slice_activation: false")
    if pp_total > 1 and n_split < pp:
        raise _err("R_NUM_LAYERS_MIN", inp.path("num_layers"), n,
                   f"num_layers ({n_split}) must be >= pipeline_stage ({pp})", "use fewer pipeline stages")
    if pp_total > 1 and interleave and total > n_split:
        raise _err("R_NUM_LAYERS_MIN", inp.path("vpp"), vpp,
                   f"pipeline_stage × pp_interleave_num = {total} exceeds num_layers = {n_split}",
                   "lower pp_interleave_num")
    keys = ["recompute", "select_recompute", "select_comm_recompute"]
    if not swap or (version == "1.5" and mode == "mcore"):
        for k in keys:
            val = getattr(inp, k)
            if _is_1d_counts(val) and len(val) > pp_total:
                raise _err("R_RECOMPUTE_LEN", inp.path(k), val,
                           f"length of {k} ({len(val)}) must be <= pipeline_stage ({pp_total}) "
                           "(MindFormers check_rules)", f"give at most {pp_total} per-stage counts")

    # ---- layers -----------------------------------------------------------------------------------
    layers, _ = _layers_from_offset(inp, n_split, pp, vpp, offset, version, emulate, warns)
    if zbv:
        layers[1] = layers[1][::-1].copy()
        warns.append(Warning_("W_STAGE0_HOLDS_HEAD", inp.path("pipeline_scheduler"),
                              "under zero_bubble_v the output layer (and MTP) sit on physical stage 0 "
                              "next to the embedding: stage 0 is the memory hot spot; give it fewer layers"))
    acc = np.cumsum(layers.reshape(-1)).reshape(vpp, pp)
    acc_flat = acc.reshape(-1)
    ids = np.arange(n_split)
    # first mini-stage (row-major) whose accumulated count exceeds i; middle stages are >= 0 here,
    # so acc is non-decreasing except possibly a negative head/tail (handled by the linear rule).
    flat_idx = np.empty(n_split, dtype=np.int64)
    if n_split:
        above = acc_flat[None, :] > ids[:, None] if n_split * total <= 4_000_000 else None
        if above is not None:
            flat_idx = np.argmax(above, axis=1)
        else:
            for i in range(n_split):
                flat_idx[i] = int(np.argmax(acc_flat > i))
    pipeline_ids = (flat_idx % pp).tolist()
    interleave_ids = (flat_idx // pp).tolist()
    effective = np.bincount(flat_idx, minlength=total).reshape(vpp, pp).astype(np.int64)
    starts_flat = np.concatenate([[0], acc_flat[:-1]])
    pos = ids - starts_flat[flat_idx]
    v_of, p_of = flat_idx // pp, flat_idx % pp
    if zbv:
        physical = np.where(v_of == 1, pp - 1 - p_of, p_of) + start_stage
    else:
        physical = p_of + start_stage
    physical = physical.tolist()

    # ---- recompute / select / comm / exclude ------------------------------------------------------
    exclude_given = (inp.select_recompute_exclude is not ABSENT
                     or inp.select_comm_recompute_exclude is not ABSENT)
    has_exclude = exclude_given and not (version == "1.5" and mode == "mcore")
    if exclude_given and not has_exclude:
        warns.append(Warning_("W_KEY_IGNORED", inp.path("select_recompute_exclude"),
                              "the exclude keys do not exist in the mcore class of r1.6/dev; they are "
                              "ignored (use --mindformers-version 1.7+)"))
    swap_active = swap and not (version == "1.5" and mode == "mcore")
    if swap and not swap_active:
        warns.append(Warning_("W_KEY_IGNORED", inp.path("swap"),
                              "swap is not supported by the mcore class of r1.6/dev; ignored"))
    if swap_active and pp_total > 1 and version in ("1.5", "1.7"):
        warns.append(Warning_("W_SWAP_NO_STAGE", inp.path("swap"),
                              f"in swap mode MindFormers {version} does not set each layer's pipeline "
                              "stage; do not combine swap with pipeline_stage > 1 on this release"))
    if version == "1.5" and mode == "mcore" and (
            _truthy(inp.select_recompute) or _truthy(inp.select_comm_recompute)):
        warns.append(Warning_("W_SELECT_DROPPED", inp.path("select_recompute"),
                              "on mcore models of r1.6/dev the select keys in recompute_config do not "
                              "reach LayerSetting (dropped in the config conversion)"))

    def zbv_reverse(spec: Any, path: str) -> Any:
        if not zbv or not isinstance(spec, (list, tuple)):
            return spec
        if len(spec) < 2:
            raise _err("R_ZBV_RECOMPUTE_2D", path, spec,
                       "zero_bubble_v reverses element [1] of every list value; this one has fewer than 2 "
                       "elements (IndexError in MindFormers)", f"write a [2][{pp}] table")
        second = spec[1]
        if isinstance(second, str):
            return spec
        if not isinstance(second, (list, tuple)):
            raise _err("R_ZBV_RECOMPUTE_2D", path, spec,
                       "zero_bubble_v reverses element [1] of every list value; a 1-D count list fails "
                       "(TypeError in MindFormers)", f"write a [2][{pp}] table")
        out = list(spec)
        out[1] = list(second)[::-1]
        return out

    def fmt(spec: Any, path: str, key: str) -> tuple[Any, np.ndarray | None]:
        if swap_active:
            val = _swap_value(spec, path)
            _check_swap_layers(val, n_split, path)
            return val, None
        spec = zbv_reverse(spec, path)
        return _count_table(spec, layers, path, key=key, strict=strict, warns=warns)

    rec_fmt, rec_table = fmt(rec, inp.path("recompute"), "recompute")

    def pattern_dict(key: str, value: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        formatted: dict[str, Any] = {}
        tables: dict[str, np.ndarray] = {}
        for pat, spec, path in _patterns(value, key, mode, inp.path(key)):
            _compile(pat, path)
            f, t = fmt(spec, path, key)
            formatted[pat] = f
            if t is not None:
                tables[pat] = t
        return formatted, tables

    sel_fmt, sel_tab = pattern_dict("select_recompute", inp.select_recompute)
    com_fmt, com_tab = pattern_dict("select_comm_recompute", inp.select_comm_recompute)
    selx_fmt = comx_fmt = None
    selx_tab: dict[str, np.ndarray] = {}
    comx_tab: dict[str, np.ndarray] = {}
    if has_exclude:
        ex1 = False if inp.select_recompute_exclude is ABSENT else inp.select_recompute_exclude
        ex2 = False if inp.select_comm_recompute_exclude is ABSENT else inp.select_comm_recompute_exclude
        selx_fmt, selx_tab = pattern_dict("select_recompute_exclude", ex1)
        comx_fmt, comx_tab = pattern_dict("select_comm_recompute_exclude", ex2)
        for ex_fmt, s_fmt, s_tab, key in ((selx_fmt, sel_fmt, sel_tab, "select_recompute"),
                                          (comx_fmt, com_fmt, com_tab, "select_comm_recompute")):
            for ex_pat in ex_fmt:
                for s_pat in list(s_fmt):
                    if _conflict(ex_pat, s_pat, inp.path(key)):
                        del s_fmt[s_pat]
                        s_tab.pop(s_pat, None)
                        warns.append(Warning_("W_SELECT_REMOVED_BY_EXCLUDE", inp.path(key),
                                              f"pattern {s_pat!r} conflicts with exclude pattern "
                                              f"{ex_pat!r} and is removed for every layer"))
                        break

    # ---- per-layer decisions (§5) ----------------------------------------------------------------
    if swap_active:
        rec_list = rec_fmt
        full_mask = np.ones(n_split, bool) if rec_list is True else np.isin(ids, rec_list or [])

        def applied(val: Any) -> np.ndarray:
            return np.ones(n_split, bool) if val is True else np.isin(ids, val or [])

        sel_layers = {k: ids[applied(v) & ~full_mask].tolist() for k, v in sel_fmt.items()
                      if v is True or v}
        com_layers = {k: ids[applied(v) & ~full_mask].tolist() for k, v in com_fmt.items()
                      if v is True or v}
        selx_layers = {k: [] for k in selx_fmt} if selx_fmt is not None else None
        comx_layers = {k: [] for k in comx_fmt} if comx_fmt is not None else None
        select_only = None
    else:
        def mask(table: np.ndarray) -> np.ndarray:
            return pos < table[v_of, p_of] if n_split else np.zeros(0, bool)

        if isinstance(rec, (bool, np.bool_)):
            full_mask = np.full(n_split, bool(rec))
        else:
            full_mask = mask(rec_table) if _truthy(rec) else np.zeros(n_split, bool)
        sel_layers = {k: ids[mask(t) & ~full_mask].tolist() for k, t in sel_tab.items()}
        com_layers = {k: ids[mask(t) & ~full_mask].tolist() for k, t in com_tab.items()}
        selx_layers = {k: ids[mask(t)].tolist() for k, t in selx_tab.items()} if has_exclude else None
        comx_layers = {k: ids[mask(t)].tolist() for k, t in comx_tab.items()} if has_exclude else None
        any_sel = np.zeros(n_split, bool)
        for t in sel_tab.values():
            any_sel |= mask(t)
        select_only = np.bincount(flat_idx[any_sel & ~full_mask], minlength=total).reshape(vpp, pp)

    # ---- warnings ------------------------------------------------------------------------------------
    other = "mcore" if mode == "legacy" else "legacy"
    fam, arch = inp.cell_family or (None, None)
    for key, pats in (("select_recompute", sel_fmt), ("select_comm_recompute", com_fmt)):
        for pat in pats:
            if fam is not None and fam.mode == mode:   # registry of the model class's cell names
                msg = select_no_match(fam, arch, key, pat, pats[pat])
                if msg:
                    warns.append(Warning_("W_SELECT_NO_MATCH", inp.path(key), msg))
                continue
            head = pat.split("\\.")[0]
            if head in _FAMILY_NAMES[other] and head not in _FAMILY_NAMES[mode]:
                warns.append(Warning_("W_SELECT_NO_MATCH", inp.path(key),
                                      f"pattern {pat!r} names {head!r}, a {other}-model cell; on this "
                                      f"{mode} model (use_legacy: {mode == 'legacy'}) it matches no op"))
    if vpp > 1 and mb is not None and not zbv and (pp - 1) / mb <= VPP_LOW_GAIN_BUBBLE:
        warns.append(Warning_("W_VPP_LOW_GAIN", inp.path("vpp"),
                              f"with micro_batch_num = {mb} the 1F1B bubble (pp-1)/m = {(pp - 1) / mb:.3f} "
                              f"is already small; pp_interleave_num = {vpp} adds memory and communication "
                              "and may be slower; try pp_interleave_num: 1"))

    return LayerSettingResult(
        version=version, emulate=emulate, num_layers=n_split, pp=pp, vpp=vpp, start_stage=start_stage,
        layers_vp=layers, accumulated_vp=acc, pipeline_ids=pipeline_ids, interleave_ids=interleave_ids,
        effective_vp=effective, recompute=rec_fmt, select_recompute=sel_fmt,
        select_comm_recompute=com_fmt, select_recompute_exclude=selx_fmt,
        select_comm_recompute_exclude=comx_fmt, full_recompute_layers=ids[full_mask].tolist(),
        select_recompute_layers=sel_layers, select_comm_recompute_layers=com_layers,
        select_recompute_exclude_layers=selx_layers, select_comm_recompute_exclude_layers=comx_layers,
        warnings=warns, zbv=zbv, swap=swap_active, model_mode=mode, mtp_num_layers=mtp,
        mtp_counted=bool(mtp_counted and mtp), physical_stage_per_layer=physical,
        show_start_stage=show_start, recompute_vp=rec_table, select_vp=sel_tab, comm_vp=com_tab,
        select_only_vp=select_only)


# ----------------------------------------------------------------------------------------------
# YAML <-> inputs

_RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute",
                   "select_recompute_exclude", "select_comm_recompute_exclude",
                   "recompute_slice_activation")


def _get(data: Any, path: str, default: Any = ABSENT) -> Any:
    node = data
    walked = []
    for key in path.split("."):
        walked.append(key)
        if node is None:
            return default
        if not isinstance(node, dict):
            raise ConfigError(f"expected a mapping, got {_short(node)}; fix: make it a mapping",
                              field=".".join(walked[:-1]), value=node, rule="R_TYPE")
        if key not in node:
            return default
        node = node[key]
    return node


def inputs_from_yaml(data: dict[str, Any]) -> LayerInputs:
    """Map a MindFormers training YAML (parsed) to :class:`LayerInputs` (paths in §7 of the spec).

    A flat case mapping (``num_layers``, ``pp``/``pipeline_stage``, ... at the top level, as in
    ``shared/cases``) is accepted too, via :func:`case_to_training_yaml`.

    Raises:
        ConfigError: the layer count is missing or a section is not a mapping.
    """
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", field="<file>", value=None, rule="R_TYPE")
    if "num_layers" in data and "model" not in data:
        data = case_to_training_yaml(data)
    mc = "model.model_config."
    n, n_path = ABSENT, mc + "num_layers"
    for key in ("num_layers", "num_hidden_layers", "n_layer"):
        val = _get(data, mc + key)
        if val is not ABSENT and val is not None:
            n, n_path = val, mc + key
            break
    if n is ABSENT:
        raise ConfigError("required key is missing (also looked for num_hidden_layers, n_layer); fix: "
                          "add model.model_config.num_layers", field=mc + "num_layers", value=None,
                          rule="R_MISSING")
    use_legacy = _get(data, "use_legacy", True)
    if not isinstance(use_legacy, bool):
        raise ConfigError(f"use_legacy must be true or false, got {_short(use_legacy)}; fix: write "
                          "true or false", field="use_legacy", value=use_legacy, rule="R_TYPE")
    mode = "legacy" if use_legacy else "mcore"
    fields = {"num_layers": n_path}
    mtp, mtp_counted = 0, None
    for key in ("mtp_depth", "mtp_num_layers", "num_nextn_predict_layers"):
        val = _get(data, mc + key)
        if val not in (ABSENT, None):
            mtp, fields["mtp_num_layers"] = val, mc + key
            if key == "mtp_depth" and mode == "legacy":
                mtp_counted = True
            break
    stage_block = _get(data, mc + "pipeline_stage", None)
    start_stage = stage_num = 0
    stage_offset = ABSENT
    if isinstance(stage_block, dict):
        start_stage = stage_block.get("start_stage", 0)
        stage_num = stage_block.get("stage_num", 0)
        stage_offset = stage_block.get("offset", ABSENT)
        if stage_offset is not ABSENT:
            fields["offset"] = mc + "pipeline_stage.offset"
    elif stage_block is not None:
        raise ConfigError(f"must be a mapping {{start_stage, stage_num, offset}}, got {_short(stage_block)}",
                          field=mc + "pipeline_stage", value=stage_block, rule="R_TYPE")
    rc = _get(data, "recompute_config", None) or {}
    if not isinstance(rc, dict):
        raise ConfigError(f"must be a mapping, got {_short(rc)}", field="recompute_config", value=rc,
                          rule="R_TYPE")

    def d(path: str, default: Any) -> Any:
        val = _get(data, path, default)
        return default if val is None and default is not ABSENT else val

    return LayerInputs(
        num_layers=n,
        pp=d("parallel_config.pipeline_stage", 1),
        vpp=_get(data, mc + "pp_interleave_num", None),
        offset=_get(data, mc + "offset", 0),
        recompute=rc.get("recompute", False),
        select_recompute=rc.get("select_recompute", False),
        select_comm_recompute=rc.get("select_comm_recompute", False),
        select_recompute_exclude=rc.get("select_recompute_exclude", ABSENT),
        select_comm_recompute_exclude=rc.get("select_comm_recompute_exclude", ABSENT),
        recompute_slice_activation=rc.get("recompute_slice_activation", False),
        pipeline_interleave=_get(data, "parallel.pipeline_config.pipeline_interleave", None),
        pipeline_scheduler=d("parallel.pipeline_config.pipeline_scheduler", "1f1b"),
        swap=d("swap_config.swap", False),
        start_stage=start_stage, stage_num=stage_num, stage_offset=stage_offset,
        seq_split_num=d("parallel_config.seq_split_num", 1),
        micro_batch_num=_get(data, "parallel_config.micro_batch_num", None),
        model_mode=mode, mtp_num_layers=mtp, mtp_counted=mtp_counted, fields=fields,
        cell_family=family_from_yaml(data),
    )


def case_to_training_yaml(case: dict[str, Any]) -> dict[str, Any]:
    """A flat case (``shared/cases`` vector or bug-case ``input``) as a MindFormers training YAML
    mapping, following ``shared/cases/README.md``. Megatron cases (``framework: megatron`` with
    ``framework_args``) go through :func:`autotune.config.megatron.megatron_to_case` first."""
    if case.get("framework") == "megatron" and isinstance(case.get("framework_args"), dict):
        from autotune.config.megatron import megatron_to_case
        case = megatron_to_case(case)
    pp = case.get("pp", case.get("pipeline_stage", 1))
    vpp = case.get("vpp", case.get("pp_interleave_num"))
    mc: dict[str, Any] = {"num_layers": case.get("num_layers")}
    if vpp is not None:
        mc["pp_interleave_num"] = vpp
    if "offset" in case:
        mc["offset"] = case["offset"]
    out: dict[str, Any] = {"model": {"model_config": mc}}
    pc: dict[str, Any] = {"pipeline_stage": pp}
    if case.get("stage_num") or case.get("start_stage"):
        ss, sn = case.get("start_stage", 0) or 0, case.get("stage_num", 0) or 0
        mc["pipeline_stage"] = {"start_stage": ss, "stage_num": sn}
        if isinstance(ss, int) and isinstance(sn, int):
            pc["pipeline_stage"] = ss + sn
    for key in ("micro_batch_num", "seq_split_num"):
        if case.get(key) is not None:
            pc[key] = case[key]
    out["parallel_config"] = pc
    pipe: dict[str, Any] = {}
    if "pipeline_interleave" in case:
        pipe["pipeline_interleave"] = case["pipeline_interleave"]
    elif isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 1:
        pipe["pipeline_interleave"] = True
    if case.get("pipeline_scheduler") is not None:
        pipe["pipeline_scheduler"] = case["pipeline_scheduler"]
    if pipe:
        out["parallel"] = {"pipeline_config": pipe}
    rc = {k: case[k] for k in _RECOMPUTE_KEYS if k in case}
    if rc:
        out["recompute_config"] = rc
    if "swap" in case:
        out["swap_config"] = {"swap": case["swap"]}
    mode = case.get("model_mode")
    mtp = case.get("mtp_num_layers")
    if mtp:
        if case.get("mtp_counted_in_layer_split"):
            mc["mtp_depth"] = mtp
            mode = mode or "legacy"
        else:
            mc["mtp_num_layers"] = mtp
            mode = mode or "mcore"
    if mode is not None:
        out["use_legacy"] = mode != "mcore"
    return out


def check_config(data: dict[str, Any], version: str = "1.8", *, emulate: bool = False,
                 source: str = "mindformers") -> LayerSettingResult:
    """:func:`normalize` on a parsed training YAML or flat case mapping.

    ``source="megatron"`` (or a flat case with ``framework: megatron``) reads Megatron arguments
    through :func:`autotune.config.megatron.translate`; its warnings come first in the result.
    """
    extra: list[Warning_] = []
    if isinstance(data, dict) and (source == "megatron" or (
            data.get("framework") == "megatron" and isinstance(data.get("framework_args"), dict))):
        from autotune.config.megatron import translate
        tr = translate(data)
        data, extra = tr.case, tr.warnings
    elif isinstance(data, dict) and not emulate and ("model" in data or "parallel_config" in data):
        from autotune.config.training import check_keys

        check_keys(data)  # strict mode: a misspelled key would silently fall back to its default
    res = normalize(inputs_from_yaml(data), version, emulate=emulate)
    res.warnings[:0] = extra
    return res


# ----------------------------------------------------------------------------------------------
# canonical emit

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


def layout_tables(num_layers: int, pp: int, vpp: int, *, offset: Any = 0, recompute: Any = False,
                  select_recompute: Any = False, select_comm_recompute: Any = False,
                  use_legacy: bool = True, version: str = "1.8"
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Strict normalization for the cost model: (layers_vp, recompute_vp, select tables, comm
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
