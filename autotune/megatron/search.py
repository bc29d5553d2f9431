"""Search what Megatron-LM's flags can express, and nothing more.

The space (``search_spaces/megatron.yaml``, :class:`MegatronSpace`):

- **layout**: decoder layers per virtual stage through ``--pipeline-model-parallel-layout`` (any
  table [vpp][pp] whose middle virtual stages hold >= 1 layer; E on the first, MTP and L on the
  last), or — ``layout_flags: first_last`` — the older ``--decoder-first/last-pipeline-num-layers``
  (+ ``--num-virtual-stages-per-pipeline-rank``): equal middle ranks, every rank's layers split
  evenly over its virtual stages;
- **recompute**, one choice for the whole run: none; full with ``--recompute-method block
  --recompute-num-layers N`` (the first N layers of every virtual stage; N is one integer for all
  stages in every Megatron release); or selective with one ``--recompute-modules`` set for every
  layer.

Mapping onto the cost model (:mod:`autotune.megatron.profile`): full block N -> recompute count
``min(N, layers)`` in every mini-stage; a module set -> the kinds' ``select`` option, select count =
all layers of every mini-stage.

Method: every (recompute choice, vpp) is scored on seed layouts (even split, the user's, the
first/last-lighter variants, the relaxation's answer; in ``first_last`` mode every valid
(first, last) pair), then the best few are improved by moving one layer between two virtual stages
at a time (all pairs, batched through the cost model) while the step time drops.

**Lower bound**: a relaxation with MindFormers' per-stage freedom — per-mini-stage full and select
counts — on a profile whose ``select`` option is, per layer kind, the least activation and the least
replay time over all candidate module sets (each no larger than any real set's, so every Megatron
config maps to a relaxed config that is no slower and no larger: the event simulation is monotone).
Its bound (from :func:`autotune.search`) is therefore a lower bound on every Megatron config of the
space; the certified gap is (best − bound) / bound. The same search with the winning choice's real
profile shows what per-stage recompute (MindFormers' freedom) would gain over Megatron's flags.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.config.layout import make_layout
from autotune.config.margin import parse_margin_mib
from autotune.config.training import read_yaml
from autotune.cost.inputs import ProfileArrays
from autotune.cost.report import CostReport, evaluate_layout
from autotune.emit.render import report_json
from autotune.errors import ConfigError
from autotune.megatron.emit import flag_lines, flags_for
from autotune.megatron.layout import first_last_counts
from autotune.megatron.memory import theoretical_memory
from autotune.megatron.profile import activation_components, megatron_profile, selective_option, training_config
from autotune.megatron.run import MODULES, MegatronRun
from autotune.profile.analytic import DEFAULT_ASSUMPTIONS, analytic_profile, check_overrides
from autotune.profile.devices import get_device
from autotune.tuner.bounds import BoundContext, BoundOutcome, Delegate, DeviceDP, lower_bound, tighten
from autotune.tuner.problem import Candidate, Problem, better, even_layers, rank_order, runnable_vpp
from autotune.tuner.problem import best_of as _best_of
from autotune.units import BYTES_PER_MIB

DEFAULT_MEGATRON_SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "megatron.yaml"
SCHEDULE = "1f1b"   # Megatron's 1F1B; interleaved 1F1B when vpp > 1


class MegatronSpace(BaseModel):
    """What the Megatron search may change (module docstring; ``search_spaces/megatron.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    virtual_pipeline: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5], min_length=1)
    layout_flags: Literal["layout", "first_last"] = "layout"
    recompute: list[Literal["none", "full", "selective"]] = Field(
        default_factory=lambda: ["none", "full", "selective"], min_length=1)
    recompute_num_layers: list[int] | None = None
    recompute_modules: Literal["subsets"] | list[list[str]] = "subsets"
    max_modules: int = Field(4, ge=1, le=len(MODULES))
    refine: int = Field(3, ge=0, le=64)
    max_moves: int = Field(60, ge=0)
    relaxation_trials: int = Field(40, ge=1)
    compare_mindformers: bool = True


def load_megatron_space(path: str | Path | None = None) -> MegatronSpace:
    """Read a Megatron search space (default ``search_spaces/megatron.yaml``).

    Raises:
        ConfigError: missing file, not YAML, or a field breaking the schema (named).
    """
    if path is None:
        if not DEFAULT_MEGATRON_SPACE.is_file():
            return MegatronSpace()
        path = DEFAULT_MEGATRON_SPACE
    data = read_yaml(path)
    try:
        return MegatronSpace.model_validate(data or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{err['msg']} (search space {path})", field=loc, value=err.get("input"),
                          rule="search_space") from None


@dataclass(frozen=True)
class Choice:
    """One recompute choice: ``kind`` none / full / selective, ``n`` (full block count),
    ``modules`` (selective set)."""

    kind: str
    n: int = 0
    modules: tuple[str, ...] = ()

    def label(self) -> str:
        if self.kind == "full":
            return f"full block {self.n}"
        if self.kind == "selective":
            return "selective " + "+".join(self.modules)
        return "no recompute"


@dataclass
class MegatronResult:
    """Outcome of :func:`search_megatron` (times ms, memory MiB).

    Attributes:
        run: the input run; best / closest: cost report of the best feasible config (closest when
            none fits); choice, vpp, layers_vp: what the flags say; flags: argument name ->
            value to set (None = remove); baselines: ``user``, ``even_full_recompute``,
            ``even_no_recompute``; lower_bound_ms / certified_gap; mindformers: the per-stage-freedom
            answer (report + its recompute table) or None; theoretical: Megatron's own estimate of
            the best config and of the user's (MB); seconds, cpu_seconds; evaluated: configs scored;
            hbm_mib: the HBM budget per GPU as given (MiB); hbm_margin_mib: the safety margin kept
            free below it (MiB; the reports' ``hbm_budget_mib`` is the limit budget − margin that
            ``fits`` was checked against, as in the MindFormers search).
    """

    run: MegatronRun
    best: CostReport | None
    closest: CostReport | None
    choice: Choice
    vpp: int
    layers_vp: list[list[int]]
    flags: dict[str, Any]
    baselines: dict[str, CostReport | None]
    lower_bound_ms: float | None
    certified_gap: float | None
    mindformers: dict[str, Any] | None
    theoretical: dict[str, dict[str, float]]
    seconds: float
    cpu_seconds: float
    evaluated: int
    hbm_mib: float
    device: str
    user_choice: Choice | None = None
    notes: list[str] = field(default_factory=list)
    hbm_margin_mib: float = 0.0

    @property
    def step_time_ms(self) -> float | None:
        return None if self.best is None else self.best.step_time_ms

    def flag_lines(self) -> list[str]:
        """The arguments to paste, one ``--flag value`` per line (removals as comments)."""
        return flag_lines(self.flags)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: the MindFormers ``search --format json`` keys plus ``megatron``; each config
        is :func:`autotune.emit.render.report_json` (budget, margin, limit and headroom explicit;
        ``config`` None for an empty middle stage)."""
        def d(r: CostReport | None) -> dict[str, Any] | None:
            return None if r is None else report_json(r, self.hbm_margin_mib)
        mf = None
        if self.mindformers is not None:
            mf = {k: (d(v) if isinstance(v, CostReport) else v) for k, v in self.mindformers.items()}
        return {"best": d(self.best), "closest": d(self.closest) if self.best is None else None,
                "baselines": {k: d(v) for k, v in self.baselines.items()},
                "lower_bound_ms": self.lower_bound_ms, "certified_gap": self.certified_gap,
                "seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "trials": self.evaluated,
                "hbm_margin_mib": self.hbm_margin_mib,
                "megatron": {"flags": {k: v for k, v in self.flags.items()},
                             "flag_lines": self.flag_lines(), "recompute": self.choice.label(),
                             "virtual_pipeline": self.vpp, "layers_per_virtual_stage": self.layers_vp,
                             "theoretical_memory_mb": self.theoretical, "device": self.device,
                             "hbm_budget_mib": self.hbm_mib, "notes": list(self.notes)},
                "mindformers_per_stage": mf}


def module_sets(run: MegatronRun, space: MegatronSpace) -> list[tuple[str, ...]]:
    """Candidate ``--recompute-modules`` sets: the space's list (modules the model cannot take are
    rejected), or every subset of the applicable modules up to ``max_modules`` without redundant
    members (``moe`` already recomputes ``moe_act`` and ``shared_experts``)."""
    ok = run.applicable_modules()
    if isinstance(space.recompute_modules, list):
        out = []
        for s in space.recompute_modules:
            bad = [x for x in s if x not in ok]
            if bad:
                raise ConfigError(f"module {bad[0]!r} does not apply to this model (applicable: {', '.join(ok)})",
                                  field="recompute_modules", value=s, rule="search_space")
            out.append(tuple(x for x in MODULES if x in s))
        return list(dict.fromkeys(out))
    sets = []
    for k in range(1, min(space.max_modules, len(ok)) + 1):
        for combo in itertools.combinations(ok, k):
            if "moe" in combo and ("moe_act" in combo or "shared_experts" in combo):
                continue
            sets.append(combo)
    return sets


def _prune(run: MegatronRun, sets: list[tuple[str, ...]], base: Any, flops_per_ms: float,
           frac: float) -> tuple[list[tuple[str, ...]], dict[tuple[str, ...], dict[str, tuple[float, float]]]]:
    """Drop module sets another set dominates on every layer kind (keeps no more activation and
    replays no longer); returns the kept sets and each set's (act bytes, replay ms) per kind."""
    vals: dict[tuple[str, ...], dict[str, tuple[float, float]]] = {}
    for s in sets:
        v = {}
        for name, lk in base.kinds.items():
            moe = name == "moe"
            act = sum(activation_components(run, moe).values())
            v[name] = selective_option(run, s, moe, act, lk.bwd_ms, flops_per_ms, frac)
        vals[s] = v
    kept = []
    for s in sets:
        dom = False
        for o in sets:
            if o == s:
                continue
            le = all(vals[o][k][0] <= vals[s][k][0] + 1e-6 and vals[o][k][1] <= vals[s][k][1] + 1e-9 for k in vals[s])
            lt = any(vals[o][k][0] < vals[s][k][0] - 1e-6 or vals[o][k][1] < vals[s][k][1] - 1e-9 for k in vals[s])
            if le and (lt or len(o) < len(s)):
                dom = True
                break
        if not dom:
            kept.append(s)
    return kept, vals


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _tables(ch: Choice, layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (full, select) recompute count tables int [V, P] a choice sets on a layout: full block N
    -> min(N, layers), selective -> every layer, none -> zeros."""
    z = np.zeros_like(layers)
    if ch.kind == "full":
        return np.minimum(layers, ch.n), z
    if ch.kind == "selective":
        return z, layers.copy()
    return z, z


def _best(cands: list[Candidate]) -> Candidate:
    """The best of scored ``cands``: least memory excess, then least step time, the first among
    near-ties (:func:`autotune.tuner.problem.best_of`: ties by position, so a time scale changes
    nothing)."""
    return _best_of(cands)


def _ranked_items(best: dict[tuple[Choice, int], Candidate]) -> list[tuple[tuple[Choice, int], Candidate]]:
    """The (choice, V) -> candidate items best first (:func:`autotune.tuner.problem.rank_order`:
    excess, then step, near-ties by insertion order)."""
    items = list(best.items())
    order = rank_order(np.array([c.step_ms for _, c in items]),
                       np.array([max(0.0, c.excess_mib) for _, c in items]))
    return [items[i] for i in order]


@dataclass
class _Scorer:
    """Scores layouts of one recompute choice and V through the cost model's batched
    :meth:`Problem.score`; ``problems[V][modules]``; ``evaluated`` counts the configs scored."""

    problems: dict[int, dict[tuple[str, ...], Problem]]
    evaluated: int = 0

    def score(self, ch: Choice, V: int, layer_list: list[np.ndarray]) -> list[Candidate]:
        prob = self.problems[V][ch.modules]
        cands = []
        for L in layer_list:
            rec, sel = _tables(ch, L)
            cands.append(Candidate(V, L, rec, sel, np.zeros_like(L), origin=ch.label()))
        self.evaluated += len(cands)
        return prob.score(cands)


def _runnable_vpps(run: MegatronRun, sp: MegatronSpace) -> list[int]:
    """The space's virtual-pipeline sizes this run can use (vpp > 1 on pp 2 needs
    ``--overlap-p2p-communication``).

    Raises:
        ConfigError: none is left (field ``virtual_pipeline``).
    """
    N, P, m = run.num_layers, run.pp, run.m
    Vs = runnable_vpp(N, P, m, SCHEDULE, sp.virtual_pipeline)
    Vs = [V for V in Vs if V == 1 or P > 2 or run.overlap_p2p]
    if sp.layout_flags == "first_last":
        Vs = [V for V in Vs if V == 1 or P > 1]
    if not Vs:
        raise ConfigError(f"no virtual-pipeline size in {sp.virtual_pipeline} can run num_layers {N} on pp {P} "
                          f"with {m} micro-batches", field="virtual_pipeline", value=sp.virtual_pipeline,
                          rule="search_space")
    return Vs


def _choices(sp: MegatronSpace, sets: list[tuple[str, ...]], ns: list[int]) -> list[Choice]:
    """The recompute choices of the space: none, full block n for every n in ``ns``, every module set."""
    choices: list[Choice] = []
    if "none" in sp.recompute:
        choices.append(Choice("none"))
    if "full" in sp.recompute:
        choices += [Choice("full", n=k) for k in ns if k >= 1]
    choices += [Choice("selective", modules=s) for s in sets]
    return choices


def _valid(L: np.ndarray, N: int, layout_flags: str) -> bool:
    """Whether the flags can express layout ``L`` int [V, P]: N layers, >= 1 in every middle virtual
    stage (the first and last may be empty), and in ``first_last`` mode the older flags' shape."""
    lo = np.ones_like(L)
    lo[0, 0] = 0
    lo[-1, -1] = 0
    if (L < lo).any() or int(L.sum()) != N:
        return False
    return layout_flags == "layout" or first_last_counts(L.tolist()) is not None


def _first_last_seeds(N: int, P: int, V: int) -> list[np.ndarray]:
    """Every layout ``--decoder-first/last-pipeline-num-layers`` can write for V (equal middle ranks,
    each rank's layers split evenly over its virtual stages), valid or not."""
    out: list[np.ndarray] = []
    for first in range(0, N + 1):
        for last in range(0, N + 1 - first):
            left = P - 2
            rest = N - first - last
            if P == 1:
                if first or last:
                    continue
                per = [N]
            elif left == 0:
                if rest:
                    continue
                per = [first, last]
            else:
                if rest % left or rest // left < V:
                    continue
                per = [first] + [rest // left] * left + [last]
            if any(x % V for x in per):
                continue
            out.append(np.asarray([[x // V for x in per] for _ in range(V)], dtype=np.int64))
    return out


def _layout_seeds(N: int, P: int, V: int, user_table: np.ndarray) -> list[np.ndarray]:
    """Seeds for ``--pipeline-model-parallel-layout``: the even split, the user's table (same V),
    and the even split with 1-3 layers moved off the first and / or last virtual stage."""
    ev = even_layers(N, P, V)
    out = [ev]
    if user_table.shape == ev.shape:
        out.append(user_table.copy())
    flat = ev.reshape(-1)
    for k1 in range(0, 4):
        for k2 in range(0, 4):
            if not k1 and not k2:
                continue
            f = flat.copy()
            take = min(k1, f[0]), min(k2, f[-1])
            f[0] -= take[0]
            f[-1] -= take[1]
            for i in range(take[0] + take[1]):
                f[1 + i % (len(f) - 2 if len(f) > 2 else 1)] += 1
            out.append(f.reshape(V, P))
    return out


def _seeds(run: MegatronRun, V: int, layout_flags: str) -> list[np.ndarray]:
    """The valid seed layouts for V (``first_last``: every valid (first, last) pair), each once."""
    N, P = run.num_layers, run.pp
    if layout_flags == "first_last":
        return [L for L in _first_last_seeds(N, P, V) if _valid(L, N, layout_flags)]
    user_table = np.asarray(run.layers_vp, dtype=np.int64)
    uniq = {L.tobytes(): L for L in _layout_seeds(N, P, V, user_table) if _valid(L, N, layout_flags)}
    return list(uniq.values())


def _one_layer_moves(L: np.ndarray, N: int, layout_flags: str) -> list[np.ndarray]:
    """Layouts one layer away from ``L``: moves between neighbouring virtual stages and to/from the
    first and last one (the embedding / loss stages), not all S² pairs: a work cap that keeps 40
    stages cheap."""
    flat = L.reshape(-1)
    S = flat.size
    pairs = {(i, i + 1) for i in range(S - 1)} | {(i + 1, i) for i in range(S - 1)}
    pairs |= {(e, j) for e in (0, S - 1) for j in range(S) if j != e}
    pairs |= {(j, e) for e in (0, S - 1) for j in range(S) if j != e}
    moves = []
    for i, j in sorted(pairs):
        if flat[i] == 0:
            continue
        f = flat.copy()
        f[i] -= 1
        f[j] += 1
        M = f.reshape(L.shape)
        if _valid(M, N, layout_flags):
            moves.append(M)
    return moves


def _descend(scorer: _Scorer, ch: Choice, V: int, cand: Candidate, N: int, sp: MegatronSpace
             ) -> tuple[Choice, Candidate]:
    """Steepest descent from ``cand``: single-layer moves (and full block n ± 1), at most
    ``sp.max_moves`` steps, while the rank improves."""
    cur = cand
    for _ in range(sp.max_moves):
        L = cur.layers
        neigh = [(ch, _one_layer_moves(L, N, sp.layout_flags))]
        if ch.kind == "full":
            neigh += [(Choice("full", n=k), [L]) for k in (ch.n - 1, ch.n + 1) if k >= 1]
        best_n = cur
        best_ch = ch
        for c2, layer_list in neigh:
            if not layer_list:
                continue
            top = _best(scorer.score(c2, V, layer_list))
            if better(top, best_n):
                best_n, best_ch = top, c2
        if best_n is cur:
            break
        cur, ch = best_n, best_ch
    return ch, cur


def _screen_and_refine(scorer: _Scorer, run: MegatronRun, sp: MegatronSpace, Vs: list[int],
                       choices: list[Choice]) -> dict[tuple[Choice, int], Candidate]:
    """The best candidate per (choice, V): every pair scored on its seeds, then the best
    ``sp.refine`` improved by :func:`_descend` (``layout`` mode only)."""
    best_of: dict[tuple[Choice, int], Candidate] = {}
    seed_cache = {V: _seeds(run, V, sp.layout_flags) for V in Vs}
    for V in Vs:
        for ch in choices:
            best_of[(ch, V)] = _best(scorer.score(ch, V, seed_cache[V]))
    ranked = _ranked_items(best_of)
    refine = ranked[:sp.refine] if sp.layout_flags == "layout" else []
    for (ch, V), cand in refine:
        ch, cur = _descend(scorer, ch, V, cand, run.num_layers, sp)
        key = (ch, V)
        if key not in best_of or better(cur, best_of[key]):
            best_of[key] = cur
    return best_of


@dataclass
class _Setup:
    """What one Megatron search shares: the space, the device, the budget, the safety margin and
    the limit budget − margin the search packs against (``hbm``; MiB), the analytic
    base profile and assumptions, the module sets with their (act bytes, replay ms) per kind, the
    cost-model profiles and arrays per module set (``()`` = no selective recompute), and V's."""

    run: MegatronRun
    sp: MegatronSpace
    device: str
    dev: Any
    budget: float
    margin_mib: float
    hbm: float
    overrides: dict[str, float] | None
    base: Any
    A: dict[str, float]
    Vs: list[int]
    sets: list[tuple[str, ...]]
    vals: dict
    profiles: dict[tuple[str, ...], Any]
    arrays: dict[tuple[str, ...], ProfileArrays]

    def profile(self, modules: tuple[str, ...]) -> Any:
        """The cost-model profile of a module set (made on first use)."""
        if modules not in self.profiles:
            self.profiles[modules] = megatron_profile(self.run, self.device, modules=modules,
                                                      overrides=self.overrides, base=self.base)
        return self.profiles[modules]

    def evaluate(self, modules: tuple[str, ...], layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                 com: np.ndarray) -> CostReport:
        """The cost report of one layout with its recompute tables."""
        return evaluate_layout(self.profile(modules), make_layout(layers, rec, sel, com),
                               micro_batch_num=self.run.m, schedule=SCHEDULE, hbm_mib=self.hbm)


def _setup(run: MegatronRun, sp: MegatronSpace, device: str, hbm_mib: float | None, hbm_margin: Any,
           overrides: dict[str, float] | None) -> _Setup:
    """Device, budget and limit, base profile, runnable V's and the profiles of every module set kept."""
    dev = get_device(device)
    budget = float(hbm_mib) if hbm_mib is not None else dev.hbm_gib * 1024.0
    margin = parse_margin_mib(hbm_margin, budget)
    hbm = budget - margin
    cfg = training_config(run, hbm_mib=hbm)
    base = analytic_profile(cfg, dev, overrides=overrides)
    A = dict(DEFAULT_ASSUMPTIONS)
    A.update(check_overrides(overrides))
    fpm = dev.peak_tflops * 1e12 * A["efficiency"] / 1e3
    Vs = _runnable_vpps(run, sp)
    plain = megatron_profile(run, device, overrides=overrides, base=base)
    sets: list[tuple[str, ...]] = []
    vals: dict = {}
    if "selective" in sp.recompute:
        sets, vals = _prune(run, module_sets(run, sp), base, fpm, A["select_extra_frac"])
    profiles: dict[tuple[str, ...], Any] = {(): plain}
    arrays: dict[tuple[str, ...], ProfileArrays] = {(): ProfileArrays.from_profile(plain)}
    for s in sets:
        profiles[s] = megatron_profile(run, device, modules=s, overrides=overrides, base=base)
        arrays[s] = ProfileArrays.from_profile(profiles[s])
    return _Setup(run, sp, device, dev, budget, margin, hbm, overrides, base, A, Vs, sets, vals, profiles, arrays)


def _relaxed_problem(su: _Setup) -> Problem:
    """The relaxation: MindFormers' per-stage freedom on a profile whose ``select`` option is, per
    layer kind, the least activation and the least replay over the module sets (module docstring)."""
    run, plain = su.run, su.profiles[()]
    over = {k: (min(su.vals[s_][k][0] for s_ in su.sets) / BYTES_PER_MIB, min(su.vals[s_][k][1] for s_ in su.sets))
            for k in plain.kinds} if su.sets else None
    relaxed = megatron_profile(run, su.device, overrides=su.overrides, base=su.base,
                               select_override=over) if over else plain
    return Problem(ProfileArrays.from_profile(relaxed), P=run.pp, m=run.m, schedule=SCHEDULE, hbm_mib=su.hbm,
                   vpp_candidates=su.Vs, kinds=_relax_kinds(su) or ("full",))


def _relax_kinds(su: _Setup) -> tuple[str, ...]:
    """The relaxation's recompute kinds: full when the space has it, select when it has module sets."""
    return tuple((["full"] if "full" in su.sp.recompute else []) + (["select"] if su.sets else []))


def _answer_bound(su: _Setup, bch: Choice, bV: int, bc: Candidate, gap: float | None,
                  notes: list[str]) -> float:
    """Lower bound (ms): the relaxation's bound against the answer's relaxed score, never above the
    answer's own step time."""
    relax_prob = _relaxed_problem(su)
    rec, sel = _tables(bch, bc.layers)
    ub = relax_prob.score([Candidate(bV, bc.layers, rec, sel, np.zeros_like(rec))])[0]
    lb = min(float(bc.step_ms), relaxation_bound(relax_prob, ub.step_ms if ub.excess_mib <= 0 else bc.step_ms,
                                                 target_gap=gap or 0.0))
    if not _relax_kinds(su):
        notes.append("recompute 'none' only: the bound also allows full recompute (looser)")
    return lb


def _user_choice(run: MegatronRun, max_layers: int) -> Choice:
    """The recompute choice the user's flags make (full without ``block``: ``max_layers``)."""
    if run.granularity == "full":
        return Choice("full", n=run.recompute_num_layers if run.method == "block" else max_layers)
    if run.granularity == "selective":
        return Choice("selective", modules=tuple(x for x in MODULES if x in run.modules))
    return Choice("none")


def _baselines(su: _Setup, user_choice: Choice, notes: list[str]) -> dict[str, CostReport | None]:
    """The user's config as written (None, with a note, when it cannot be evaluated) and the even
    split with full recompute and without recompute at the user's vpp (else the first V)."""
    run = su.run
    baselines: dict[str, CostReport | None] = {"user": None}
    user_table = np.asarray(run.layers_vp, dtype=np.int64)
    try:
        rec, sel = _tables(user_choice, user_table)
        baselines["user"] = su.evaluate(user_choice.modules, user_table, rec, sel, np.zeros_like(user_table))
    except (ValueError, ConfigError) as exc:
        notes.append(f"your own config could not be evaluated: {exc}")
    V0 = run.vpp if run.vpp in su.Vs else su.Vs[0]
    ev = even_layers(run.num_layers, run.pp, V0)
    z = np.zeros_like(ev)
    baselines["even_full_recompute"] = su.evaluate((), ev, ev, z, z)
    baselines["even_no_recompute"] = su.evaluate((), ev, z, z, z)
    return baselines


def _mindformers_gain(su: _Setup, problem: Problem, bch: Choice, bc: Candidate, best_rep: CostReport,
                      notes: list[str]) -> tuple[dict[str, Any] | None, int]:
    """MindFormers' per-stage freedom: per-mini-stage recompute counts from the answer (the
    report and tables when faster, else None; and the configs scored)."""
    pc, scored = per_stage_recompute(problem, bc, bch.kind)
    if pc.step_ms >= bc.step_ms - 1e-6:
        return None, scored
    rep = su.evaluate(bch.modules, pc.layers, pc.rec, pc.sel, pc.com)
    mf = {"report": rep, "step_time_ms": rep.step_time_ms,
          "gain_vs_megatron": rep.step_time_ms / best_rep.step_time_ms - 1.0,
          "recompute": pc.rec.tolist(), "select_recompute": pc.sel.tolist(),
          "layers": pc.layers.tolist(), "modules": list(bch.modules)}
    notes.append(f"per-stage recompute counts (MindFormers' recompute table; Megatron has one "
                 f"--recompute-num-layers / one module set for every stage) would run "
                 f"{rep.step_time_ms:.1f} ms ({mf['gain_vs_megatron']:+.2%}): recompute "
                 f"{pc.rec.tolist() if bch.kind == 'full' else pc.sel.tolist()}")
    return mf, scored


def search_megatron(run: MegatronRun, *, space: MegatronSpace | str | Path | None = None, device: str = "h100",
                    hbm_mib: float | None = None, overrides: dict[str, float] | None = None, seed: int = 0,
                    gap: float | None = 0.005, progress: bool | str = False,
                    hbm_margin: float | str | None = None) -> MegatronResult:
    """Find the fastest Megatron configuration of the space that fits the HBM budget.

    Args:
        run: the Megatron run (:func:`autotune.megatron.run.build_run`).
        space: :class:`MegatronSpace`, a YAML path, or None for ``search_spaces/megatron.yaml``.
        device: device preset (h100, h200, a100, b200, ascend-910b); hbm_mib: budget per GPU (MiB),
            default the device's HBM; overrides: analytic-profile assumptions (``--set``).
        hbm_margin: HBM kept free below the budget: a fraction (0.05, "5%") or a size ("2GB");
            None/0 = none. Every config must peak at most budget − margin
            (:func:`autotune.config.margin.parse_margin_mib`), as in the MindFormers search.
        seed, gap: passed to the relaxation search (:func:`autotune.search`).

    Returns:
        :class:`MegatronResult` with the flags to set, step time, per-stage reports, the lower
        bound and the certified gap.

    Raises:
        ConfigError: bad space, no runnable virtual-pipeline size, unknown device/assumption, a
            bad margin (rule ``R_HBM_MARGIN``, field ``--hbm-margin``).
    """
    t0, c0 = time.monotonic(), _cpu()
    sp = space if isinstance(space, MegatronSpace) else load_megatron_space(space)
    su = _setup(run, sp, device, hbm_mib, hbm_margin, overrides)
    N, P, m, Vs = run.num_layers, run.pp, run.m, su.Vs
    notes: list[str] = []
    max_layers = max(2, -(-N // (P * min(Vs))) + 3)
    choices = _choices(sp, su.sets, sp.recompute_num_layers or list(range(1, max_layers + 1)))
    problems = {V: {key: Problem(su.arrays[key], P=P, m=m, schedule=SCHEDULE, hbm_mib=su.hbm, vpp_candidates=[V])
                    for key in su.arrays} for V in Vs}
    scorer = _Scorer(problems)
    best_of = _screen_and_refine(scorer, run, sp, Vs, choices)
    (bch, bV), bc = _ranked_items(best_of)[0]
    fits = bc.excess_mib <= 0
    lb = _answer_bound(su, bch, bV, bc, gap, notes) if fits else None
    best_rep = su.evaluate(bch.modules, bc.layers, bc.rec, bc.sel, bc.com)
    user_choice = _user_choice(run, max_layers)
    baselines = _baselines(su, user_choice, notes)
    mf = None
    if sp.compare_mindformers and fits and bch.kind != "none":
        mf, scored = _mindformers_gain(su, problems[bV][bch.modules], bch, bc, best_rep, notes)
        scorer.evaluated += scored
    cert = None
    if fits and lb is not None and lb > 0:
        lb = min(lb, best_rep.step_time_ms)
        cert = max(0.0, (best_rep.step_time_ms - lb) / lb)
    theo = {"user": theoretical_memory(run, m),
            "best": theoretical_memory(_with(run, bch, bV, bc.layers.tolist()), m)}
    return MegatronResult(
        run=run, best=best_rep if fits else None, closest=None if fits else best_rep, choice=bch, vpp=bV,
        layers_vp=bc.layers.tolist(), flags=flags_for(run, bch, bc.layers.tolist(), sp.layout_flags),
        baselines=baselines, lower_bound_ms=lb, certified_gap=cert, mindformers=mf, theoretical=theo,
        seconds=time.monotonic() - t0, cpu_seconds=_cpu() - c0, evaluated=scorer.evaluated, hbm_mib=su.budget,
        device=su.dev.name, user_choice=user_choice, notes=notes, hbm_margin_mib=su.margin_mib)


def _with(run: MegatronRun, ch: Choice, V: int, layers: list[list[int]]) -> MegatronRun:
    """A copy of ``run`` with the answer's virtual-pipeline size and recompute (for Megatron's own
    memory estimate of the answer)."""
    gran = {"none": None, "full": "full", "selective": "selective"}[ch.kind]
    return dataclasses.replace(run, vpp=V, layers_vp=layers, granularity=gran,
                               method="block" if ch.kind == "full" else None,
                               recompute_num_layers=ch.n if ch.kind == "full" else None, modules=list(ch.modules))


@dataclass(frozen=True)
class _AgainstIncumbent(Delegate):
    """A :class:`~autotune.tuner.bounds.LowerBound` run against a fixed incumbent ``upper_ms`` (ms),
    whatever ``ctx.upper_ms`` says: :func:`~autotune.tuner.bounds.tighten` then skips by a lower
    threshold (the gap target, see :func:`relaxation_bound`) while the proof still prunes by the
    incumbent."""

    upper_ms: float

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        return self.proof.bound(problem, V, dataclasses.replace(ctx, upper_ms=self.upper_ms))


def relaxation_bound(problem: Problem, upper_ms: float, target_gap: float = 0.0) -> float:
    """A lower bound (ms) on every memory-feasible layout of ``problem`` (all its V candidates):
    the project's path / stage DP bound (:func:`autotune.tuner.bounds.lower_bound`), raised for
    V > 1 by the device-by-device DP (:class:`autotune.tuner.bounds.DeviceDP`) through
    :func:`autotune.tuner.bounds.tighten` with the ``dominated`` skip rule: lowest V first, a V
    skipped once a V that is done is at or below it, or once its bound is within ``target_gap``
    of ``upper_ms`` (the skip threshold is upper_ms / (1 + target_gap); the DP itself prunes
    against ``upper_ms``). Never above ``upper_ms`` (a step time some layout of ``problem``
    reaches). The integer program of the full MindFormers search is skipped: it costs minutes on
    40 virtual stages × 64 micro-batches."""
    b = lower_bound(problem, upper_ms=upper_ms)
    if not b.per_v_ms:
        return float(upper_ms)
    upper = float(upper_ms)
    t = tighten(problem, (_AgainstIncumbent(DeviceDP(), upper),), b.per_v_ms,
                ctx=BoundContext(upper_ms=upper / (1 + target_gap)), skip="dominated")
    return float(min(t.bound_ms, upper))


def per_stage_recompute(problem: Any, cand: Any, kind: str, max_rounds: int = 40) -> tuple[Any, int]:
    """MindFormers' freedom on top of a Megatron answer: coordinate descent on the per-mini-stage
    recompute count (full: ``rec``, selective: ``sel``; the first r layers), one step down or up in
    one mini-stage at a time, batched, keeping the layout. Returns (best candidate, configs scored)."""
    cur = cand
    scored = 0
    for _ in range(max_rounds):
        tab = cur.rec if kind == "full" else cur.sel
        moves = []
        for idx in np.ndindex(tab.shape):
            for d in (-1, 1):
                t2 = tab.copy()
                t2[idx] += d
                if not 0 <= t2[idx] <= cur.layers[idx]:
                    continue
                rec, sel = (t2, cur.sel) if kind == "full" else (cur.rec, t2)
                moves.append(Candidate(cur.V, cur.layers, rec, sel, cur.com, origin="per-stage"))
        if not moves:
            break
        scored += len(moves)
        top = _best(problem.score(moves))
        if not better(top, cur):
            break
        cur = top
    return cur, scored
