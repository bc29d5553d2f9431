"""Search-space definition (``search_spaces/*.yaml``), validated with pydantic, without Optuna.

Schema (every field optional; the defaults are ``search_spaces/default.yaml``; docs/search_space.md):

- ``pp_interleave_num``: candidate interleave counts (ints >= 1). Candidates that cannot run for the
  config (P·V > N, or a schedule that rejects (P, V, m)) are dropped.
- ``recompute_kinds``: subset of ``full``, ``select``, ``comm`` that the search may set; the others
  stay at zero.
- ``recompute_granularity``: ``mini_stage`` (default: one recompute count per [chunk][stage] cell)
  or ``stage`` (one recompute fraction per pipeline stage, shared by its chunks: fewer free
  parameters; the same as ``mini_stage`` when pp_interleave_num = 1). Emitted as the [V][P] table.
- ``max_abs_offset``: bound on |layers - base| per mini-stage (None = only validity bounds).
- ``pipeline_scheduler``: ``keep`` (the config's own), one scheduler name to pin, or a list of
  candidates (``keep`` allowed in it) searched one by one.
- ``select_patterns`` / ``comm_patterns``: which operators ``select`` / ``comm`` recompute act on:
  ``default`` (the config's own patterns, which the answer keeps, priced per op like ``evaluate``
  prices them; MindFormers' default patterns, the profile's aggregate options, when it names none),
  ``ranked`` (sets chosen from the model's op list: the k ops with the most activation MiB saved per
  replay ms, k = 1 .. ``ranked_max_sets``), or an explicit list of candidate sets, each a list of
  MindFormers patterns (segments separated by ``\\.``, each a full-match regex). Each set is a
  separate sub-problem; the answer is emitted in MindFormers' dict form ``{pattern: [V][P]}``.
- ``recompute_slice_activation``, ``mp_comm_recompute``, ``parallel_optimizer_comm_recompute``:
  ``pinned`` (the config's value, default) or ``free`` (both settings are searched). They change
  the analytic profile, so each setting is a separate sub-problem (needs the analytic profile).
- ``micro_batch_num``: None (pinned, default) or candidate counts searched with the global batch
  ``data_parallel × micro_batch_num × batch_size`` fixed (``runner_config.batch_size`` adapts;
  a candidate that leaves it fractional is dropped). Needs the analytic profile.

Every combination of the sub-problem knobs (scheduler, boolean knobs, micro_batch_num, pattern
sets) is searched as its own problem and the best answer over all of them is returned
(:func:`expand_space`); the lower bound is the least of the sub-problems' bounds.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.config.layout import layout_from_config
from autotune.config.patterns import pattern_scope
from autotune.config.training import config_from_dict, get_path, read_yaml
from autotune.cost.inputs import BOTH, COMM, NONE, SELECT, ProfileArrays
from autotune.cost.schedules import registered
from autotune.cost.select_ops import pattern_matches
from autotune.errors import ConfigError, from_validation_error
from autotune.tuner.inputs import config_schedule, resolve_profile

DEFAULT_SPACE_PATH = Path(__file__).resolve().parents[2] / "search_spaces" / "default.yaml"
KNOBS = ("recompute_slice_activation", "mp_comm_recompute", "parallel_optimizer_comm_recompute")

PatternChoice = Union[Literal["default", "ranked"], list[list[str]]]


class SearchSpace(BaseModel):
    """Which knobs the search may change (see module docstring for each field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pp_interleave_num: list[int] = Field(default_factory=lambda: [1, 2, 3, 4], min_length=1)
    recompute_kinds: list[Literal["full", "select", "comm"]] = Field(
        default_factory=lambda: ["full", "select", "comm"])
    recompute_granularity: Literal["mini_stage", "stage"] = "mini_stage"
    max_abs_offset: int | None = Field(None, ge=0)
    pipeline_scheduler: str | list[str] = "keep"
    select_patterns: PatternChoice = "default"
    comm_patterns: PatternChoice = "default"
    ranked_max_sets: int = Field(4, ge=1, le=32)
    recompute_slice_activation: Literal["pinned", "free"] = "pinned"
    mp_comm_recompute: Literal["pinned", "free"] = "pinned"
    parallel_optimizer_comm_recompute: Literal["pinned", "free"] = "pinned"
    micro_batch_num: list[int] | None = Field(None, min_length=1)

    @field_validator("pp_interleave_num")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError(f"candidates must be >= 1, got {v}")
        return sorted(set(v))

    @field_validator("micro_batch_num")
    @classmethod
    def _mbn_positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x < 1 for x in v):
            raise ValueError(f"candidates must be >= 1, got {v}")
        return None if v is None else sorted(set(v))

    @field_validator("pipeline_scheduler")
    @classmethod
    def _sched(cls, v: str | list[str]) -> str | list[str]:
        names = [v] if isinstance(v, str) else v
        if not names:
            raise ValueError("give at least one scheduler (or keep)")
        for n in names:
            if n != "keep" and n not in registered():
                raise ValueError(f"pipeline_scheduler {n!r} is not modelled; modelled: "
                                 f"keep, {', '.join(registered())}")
        return v if isinstance(v, str) else list(dict.fromkeys(v))

    @field_validator("select_patterns", "comm_patterns")
    @classmethod
    def _patterns(cls, v: PatternChoice) -> PatternChoice:
        if isinstance(v, str):
            return v
        if not v or any(not s for s in v):
            raise ValueError("give a non-empty list of non-empty pattern sets")
        for s in v:
            for pat in s:
                for seg in pat.split("\\."):
                    try:
                        re.compile(seg)
                    except re.error as exc:
                        raise ValueError(f"pattern {pat!r}: segment {seg!r} is not a regular "
                                         f"expression ({exc})") from None
        return v

    @model_validator(mode="after")
    def _kinds_for_patterns(self) -> "SearchSpace":
        if self.select_patterns != "default" and "select" not in self.recompute_kinds:
            raise ValueError("select_patterns needs 'select' in recompute_kinds")
        if self.comm_patterns != "default" and "comm" not in self.recompute_kinds:
            raise ValueError("comm_patterns needs 'comm' in recompute_kinds")
        return self

    def schedulers(self) -> list[str]:
        """Scheduler candidates as written (``keep`` = the config's own)."""
        return [self.pipeline_scheduler] if isinstance(self.pipeline_scheduler, str) else list(self.pipeline_scheduler)

    def free_knobs(self) -> list[str]:
        return [k for k in KNOBS if getattr(self, k) == "free"]


def load_search_space(path: str | Path | None = None) -> SearchSpace:
    """Load a search-space YAML (default: ``search_spaces/default.yaml``; built-in defaults when the
    file is not shipped alongside the package).

    Raises:
        ConfigError: missing file, not YAML, or a field breaking the schema (named).
    """
    if path is None:
        if not DEFAULT_SPACE_PATH.is_file():
            return SearchSpace()
        path = DEFAULT_SPACE_PATH
    data = read_yaml(path)
    try:
        return SearchSpace.model_validate(data or {})
    except ValidationError as exc:
        raise from_validation_error(exc, SearchSpace, what=f"search space {path}", rule="search_space") from None


# --------------------------------------------------------------------------------------------------
# Sub-problems


@dataclass
class Variant:
    """One sub-problem of a space: the config with the sub-problem knobs applied, its profile and
    profile arrays (pattern sets folded into the select/comm options), and what to emit.

    ``settings``: the free knobs' values (YAML path -> value) written into the tuned YAML;
    ``select_patterns`` / ``comm_patterns``: the pattern set (None = the config's own, which ``pa``
    folds in; MindFormers' defaults when it names none).
    """

    label: str
    cfg: Any
    profile: Any
    pa: Any
    schedule: str
    settings: dict[str, Any] = field(default_factory=dict)
    select_patterns: list[str] | None = None
    comm_patterns: list[str] | None = None


def _ops_of(pa: Any, side: str) -> list[tuple[str, float, float]]:
    """Distinct ops of the profile's op lists on one side: (path, MiB saved, replay ms) summed
    over kinds weighted by their layer counts (only for ranking)."""
    ops_k = pa.select_ops if side == "select" else pa.comm_ops
    counts = np.diff(pa.kind_prefix[:, [0, -1]], axis=1).reshape(-1)
    acc: dict[str, list[float]] = {}
    for k, ops in enumerate(ops_k or ()):
        if ops is None:
            continue
        for name, act, extra in ops:
            a = acc.setdefault(name, [0.0, 0.0])
            a[0] += float(act) * float(counts[k])
            a[1] += float(extra) * float(counts[k])
    return [(n, a, e) for n, (a, e) in acc.items()]


def escape_op(path: str) -> str:
    """The MindFormers pattern that matches exactly the op at ``path`` (segments escaped)."""
    return "\\.".join(re.escape(part) for part in path.split("."))


def pattern_sets(pa: Any, side: str, choice: PatternChoice, max_sets: int) -> list[list[str] | None]:
    """Candidate pattern sets of one side (None = MindFormers' defaults / aggregate option).

    ``ranked``: ops ordered by MiB saved per ms replayed (ties: more MiB, then name), sets of the
    first k, k = 1 .. max_sets. Raises ConfigError when the profile lists no ops for ``ranked``.
    """
    if choice == "default":
        return [None]
    if choice == "ranked":
        ops = [o for o in _ops_of(pa, side) if o[1] > 0]
        if not ops:
            raise ConfigError(f"{side}_patterns: ranked needs the profile's op list ({side}_ops), "
                              "and this profile lists none", field=f"{side}_patterns", value=choice,
                              rule="search_space")
        ops.sort(key=lambda o: (-(o[1] / max(o[2], 1e-12)), -o[1], o[0]))
        return [[escape_op(o[0]) for o in ops[:k]] for k in range(1, min(max_sets, len(ops)) + 1)]
    return [list(s) for s in choice]


def config_patterns(cfg: Any) -> tuple[list[str] | None, list[str] | None]:
    """The config's own select / comm pattern sets (None for a side it names none of, or when its
    layout breaks a rule): what the answer keeps when the space's choice is ``default``
    (:func:`autotune.tuner.search._patterns`), so the search prices them per op as ``evaluate``
    does, not with the profile's aggregate (MindFormers' default patterns) options."""
    try:
        lay = layout_from_config(cfg)
    except ConfigError:
        return None, None
    return list(lay.select_patterns) or None, list(lay.comm_patterns) or None


@pattern_scope()
def fold_patterns(pa: Any, select: list[str] | None, comm: list[str] | None) -> Any:
    """Profile arrays whose aggregate ``select`` / ``comm`` / ``both`` options equal the per-op
    savings of the pattern sets applied with one shared count table (what the search emits), so
    the batched cost model scores them exactly as :func:`autotune.cost.select_ops.pattern_stage_costs`
    does for the emitted ``{pattern: table}`` layout. A kind without an op list keeps its aggregate
    option. Both None -> ``pa`` itself.
    """
    if select is None and comm is None:
        return pa
    act, bwd, ws = pa.act_kc.copy(), pa.bwd_kc.copy(), pa.ws_kc.copy()
    sdc = None if pa.static_dc is None else pa.static_dc.copy()
    K = act.shape[0]
    for k in range(K):
        sides = []
        for pats, ops_all, cls, cells in ((select, pa.select_ops, SELECT, True), (comm, pa.comm_ops, COMM, False)):
            ops = ops_all[k] if ops_all else None
            if pats is None or ops is None:
                # aggregate option: (saved, replay, ws, static delta, is_aggregate)
                sides.append((pa.act_kc[k, NONE] - pa.act_kc[k, cls], pa.bwd_kc[k, cls] - pa.bwd_kc[k, NONE],
                               pa.ws_kc[k, cls], None if sdc is None else pa.static_dc[k, cls], True))
                continue
            hit = [i for i, (name, _, _) in enumerate(ops) if any(pattern_matches(p, name, cells=cells) for p in pats)]
            sides.append((sum(ops[i][1] for i in hit), sum(ops[i][2] for i in hit), pa.ws_kc[k, NONE],
                          None if sdc is None else pa.static_dc[k, NONE], False))
        a_none, b_none = pa.act_kc[k, NONE], pa.bwd_kc[k, NONE]
        for (saved, extra, w, sd, _agg), cls in zip(sides, (SELECT, COMM)):
            act[k, cls] = a_none - min(saved, a_none)
            bwd[k, cls] = b_none + extra
            ws[k, cls] = w
            if sdc is not None:
                sdc[k, cls] = sd
        (s1, e1, w1, d1, g1), (s2, e2, w2, d2, g2) = sides
        if g1 and g2:
            continue  # both aggregate: MindFormers' 'both' option as profiled
        # one aggregate side + one op side, or two op sides: savings add (an op counts once per side)
        agg_both = [x for x in sides if x[4]]
        act[k, BOTH] = a_none - min(s1 + s2, a_none)
        bwd[k, BOTH] = b_none + e1 + e2
        ws[k, BOTH] = agg_both[0][2] if agg_both else pa.ws_kc[k, NONE]
        if sdc is not None:
            sdc[k, BOTH] = agg_both[0][3] if agg_both else pa.static_dc[k, NONE]
    return replace(pa, act_kc=act, bwd_kc=bwd, ws_kc=ws, static_dc=sdc, _prefix={})


def _set(raw: dict[str, Any], dotted: str, value: Any) -> None:
    node = raw
    keys = dotted.split(".")
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def micro_batch_candidates(cfg: Any, space: SearchSpace) -> list[tuple[int, int | None]]:
    """(micro_batch_num, runner_config.batch_size or None when the config has none) pairs with
    ``data_parallel × micro_batch_num × batch_size`` equal to the config's; candidates leaving a
    fractional batch size, or below pipeline_stage (rule R_MICRO_BATCH_MIN), are dropped. Pinned:
    the config's own."""
    bs0 = get_path(cfg.raw, "runner_config.batch_size", None)
    if space.micro_batch_num is None:
        return [(cfg.micro_batch_num, None)]
    total = cfg.micro_batch_num * cfg.batch_size
    out = []
    for m in space.micro_batch_num:
        if total % m or m < cfg.pipeline_stage:   # R_MICRO_BATCH_MIN: MindSpore needs m >= pipeline_stage
            continue
        bs = total // m
        if bs0 is None and bs != 1:
            out.append((m, bs))  # the config had no batch_size (1): it is written now
        else:
            out.append((m, None if m == cfg.micro_batch_num else bs))
    return out


def expand_space(cfg: Any, space: SearchSpace, profile: Any = None, *, device: str = "ascend-910b",
                 overrides: dict[str, float] | None = None) -> list[Variant]:
    """Every sub-problem of ``space`` for ``cfg`` (scheduler × boolean knobs × micro_batch_num ×
    select set × comm set), in a fixed order (the config's own settings first).

    Args:
        cfg: the TrainingConfig; profile: a profile path/object, or None for the analytic one.

    Raises:
        ConfigError: free knobs or micro_batch_num candidates with a given profile (they change the
            profile: use the analytic one), no micro_batch_num candidate keeps the global batch, or
            a ``ranked`` pattern choice on a profile without op lists.
    """
    free = space.free_knobs()
    own_sel, own_comm = config_patterns(cfg)   # what a ``default`` side emits (search._patterns)
    mbs = micro_batch_candidates(cfg, space)
    if not mbs:
        raise ConfigError(f"no micro_batch_num candidate in {space.micro_batch_num} keeps the global batch "
                          f"(data_parallel × micro_batch_num × batch_size) of the config whole and is >= "
                          f"pipeline_stage = {cfg.pipeline_stage}",
                          field="micro_batch_num", value=space.micro_batch_num, rule="search_space")
    if profile is not None and (free or space.micro_batch_num is not None):
        what = ", ".join(free + (["micro_batch_num"] if space.micro_batch_num is not None else []))
        raise ConfigError(f"{what} change the layer profile; a given profile cannot follow them: "
                          "pin them in the space or use the analytic profile (no --profile)",
                          field=free[0] if free else "micro_batch_num", value="free", rule="search_space")
    scheds = []
    for s in space.schedulers():
        name = config_schedule(cfg) if s == "keep" else s
        if name not in scheds:
            scheds.append(name)
    knob_vals = [[getattr(cfg, k)] + ([not getattr(cfg, k)] if k in free else []) for k in free]
    out: list[Variant] = []
    base_profile = None
    for sched, kv, (m, bs) in itertools.product(scheds, itertools.product(*knob_vals), mbs):
        settings: dict[str, Any] = {}
        for k, v in zip(free, kv):
            if v != getattr(cfg, k):
                settings[f"recompute_config.{k}"] = v
        if m != cfg.micro_batch_num:
            settings["parallel_config.micro_batch_num"] = m
        if bs is not None:
            settings["runner_config.batch_size"] = bs
        if settings:
            raw = copy.deepcopy(cfg.raw)
            for path, v in settings.items():
                _set(raw, path, v)
            c = config_from_dict(raw, source=cfg.source, hbm_mib=cfg.hbm_mib)
            prof = resolve_profile(c, profile, device=device, overrides=overrides)
        else:
            c = cfg
            if base_profile is None:
                base_profile = resolve_profile(cfg, profile, device=device, overrides=overrides)
            prof = base_profile
        pa0 = ProfileArrays.from_profile(prof)
        if sched != cfg.pipeline_scheduler:
            settings["parallel.pipeline_config.pipeline_scheduler"] = sched
        sels = pattern_sets(pa0, "select", space.select_patterns, space.ranked_max_sets)
        comms = pattern_sets(pa0, "comm", space.comm_patterns, space.ranked_max_sets)
        for sp_, cp_ in itertools.product(sels, comms):
            bits = [f"{k.split('.')[-1]}={v}" for k, v in settings.items()]
            if sp_ is not None:
                bits.append(f"select={'|'.join(sp_)}")
            if cp_ is not None:
                bits.append(f"comm={'|'.join(cp_)}")
            out.append(Variant(", ".join(bits) or "as configured", c, prof, fold_patterns(
                pa0, own_sel if sp_ is None else sp_, own_comm if cp_ is None else cp_),
                               sched, dict(settings), sp_, cp_))
    return out


def space_size_log10(n_variants: int, layouts: int) -> float:
    """log10 of (sub-problems × layouts per sub-problem), for ``--dry-run``."""
    return round(math.log10(max(n_variants, 1)) + math.log10(max(layouts, 1)), 1)
