"""Provable lower bounds on the step time of any memory-feasible layout (pure numpy, no Optuna).

Certified gap of an answer = (best - bound) / bound; the bound is a *proof*, not an estimate:
every layout of the search space that fits the HBM budget simulates to a step time >= the bound.

Each bound is one module with a :class:`~autotune.tuner.bounds._base.LowerBound` object
(``name``, ``applies(problem, V)``, ``bound(problem, V, ctx)`` -> :class:`BoundOutcome`):

- :mod:`.path_dp` — :class:`PathDP`, exact path DP for pp_interleave_num 1;
- :mod:`.lagrangian` — :class:`Lagrangian`, the Lagrangian path relaxation with critical-path
  column generation (V > 1, every schedule);
- :mod:`.stage_dp` — :class:`StageDP`, threshold DP over one-stay paths, exact over integer splits;
- :mod:`.device_dp` — :class:`DeviceDP`, device-by-device DP over the no-skip paths with every
  stage's replay counted;
- :mod:`.milp` — :class:`IntegerProgram`, integer program with lazily generated paths (HiGHS);
- :mod:`.wrap_dp` — :class:`WrapDP`, the device DP's stage tables plus the two-stage paths of the
  last and the first stage (they ping-pong across the chunk boundary), coupled in the DP;
- :mod:`.pair_dp` — :class:`PairDP`, the stage DP with the last stage's configuration fixed and the
  paths that stay on the last stage and one other stage priced too (V = 2);
- :mod:`.path_lp` — :class:`PathLP`, the integer program's linear relaxation with every path it
  needs generated (HiGHS through highspy, warm-started), where a V's gap is still over 2 %;
- :mod:`.split_lp` — :class:`SplitLP`, when a V has few layer splits (deep pipelines, one or two
  layers a mini-stage): every split bounded by its own LP over the stages' fitting recompute
  configurations with lazily generated paths, best first (exact on scaling.py's pp 32 / 64 × vpp 2
  rows); its best layout is a seed;
- :mod:`.split_scan` — :class:`SplitScan`, pp_interleave_num 1 with few splits: every split with
  its least-replay recompute (the exact fit), simulated, best first: the exact V = 1 optimum where
  it runs to its end (the path DP's relaxation can stop ~1-5 % under it at pp 2); its best layout
  is a seed;
- :mod:`.work_floor` — :class:`WorkFloor`, the busiest device's work with whole layers (at least
  the average device's share m · W / P; a few ms to ~0.03 s at pp 64 × m 512): what a V gets in
  place of a first proof that would start past its pass's deadline;
- :mod:`.stay_lp` — :class:`StayLP`, one LP over fractional layer counts and recompute with each
  device's one-stay paths and every stage's memory rows (0.07 s on the TeleChat2 example, ~1-1.3 s
  at pp 64 × vpp 4 × m 512):
  what a V the first pass left short gets next (:func:`autotune.tuner.solve.stay_floors`).

Shared code: :mod:`._paths` (dependency-graph paths), :mod:`._relax` (relaxed layers, recompute
fronts). :func:`tighten` combines them: per V the largest proof, over V the least, skipping a V
that cannot change the least. :data:`REGISTRY` lists the passes the search runs
(:func:`autotune.tuner.solve.bound_and_seeds`): a bound joins by one module and one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from autotune.tuner.bounds._base import (BoundContext, BoundOutcome, Delegate, Fallback, LowerBound, Skip,
                                         Tightened, tighten)
from autotune.tuner.bounds._paths import critical_path
from autotune.tuner.bounds._relax import several_kinds
from autotune.tuner.bounds.device_dp import DeviceDP
from autotune.tuner.bounds.lagrangian import Lagrangian
from autotune.tuner.bounds.milp import IntegerProgram
from autotune.tuner.bounds.pair_dp import PairDP
from autotune.tuner.bounds.path_dp import PathDP, path_dp_bound
from autotune.tuner.bounds.path_lp import PathLP
from autotune.tuner.bounds.split_lp import SplitLP
from autotune.tuner.bounds.split_scan import SplitScan
from autotune.tuner.bounds.stage_dp import StageDP
from autotune.tuner.bounds.stay_lp import StayLP, stay_lp_ms
from autotune.tuner.bounds.work_floor import WorkFloor, floor_ms, work_floor_ms
from autotune.tuner.bounds.wrap_dp import WrapDP
from autotune.tuner.problem import Candidate, Problem

#: Subgradient iterations (and stall patience) of the long Lagrangian pass for V > 1 where the
#: integer program does not apply (schedules that split B/W; a work cap).
REFINE_ITERS = 1500
REFINE_PATIENCE = 30


@dataclass(frozen=True)
class Pass:
    """One bound pass of the search: its proofs (tried in order per V), how much of the skip rule
    of :func:`tighten` it uses, and the origin tag of the seeds made from its relaxed splits
    (``<seed_tag>-split-v<V>``)."""

    name: str
    proofs: tuple[LowerBound, ...]
    skip: Skip = "none"
    seed_tag: str = "bound"


#: The bound passes of :func:`autotune.tuner.solve.bound_and_seeds`, in order. The first sets
#: every V's bound before the local search (its splits seed it, and the split LP's best layout,
#: which on the few-split rows it applies to is the answer or within 0.5 % of it); the later ones run after it and
#: raise the V's that can still hold the optimum, against the best layout found: the device DP
#: first (about a second; the integer program then starts from its value and skips a V it
#: settles) and the wrap-pair DP (its tables plus the last / first stage pair; a few seconds,
#: stopping early when it cannot pass the device DP), then the integer program, or the long
#: Lagrangian pass where it does not apply, and last the stage DP again (under a second): against
#: the incumbent its tables drop more configurations, so the other stages' least replay rises
#: (scaling.py's P32 V2 m64 L128 dense 19,102 -> 19,151 ms). It runs after the integer program
#: so that its split, a seed, does not join the layouts whose critical paths start the program's
#: family (a node-capped program's bound moves with its family). Then, for V = 2 where the gap is
#: over 0.5 %, the pair DP (the stage DP's family plus the paths that stay on the last stage and
#: one other; under a second to a few CPU s). Last, where a V's certified gap
#: is still over 2 %, the path LP: the integer program's linear relaxation with its paths
#: generated to convergence under a work cap (a few CPU s; on the MoE rows of scaling.py it
#: prices the paths that stay on several stages, which the DP bounds cannot).
REGISTRY: tuple[Pass, ...] = (
    Pass("relaxations", (PathDP(), SplitScan(), SplitLP(), Lagrangian(), StageDP())),
    Pass("device DP", (DeviceDP(), WrapDP()), skip="upper"),
    Pass("integer program", (Fallback(IntegerProgram(), Lagrangian(REFINE_ITERS, patience=REFINE_PATIENCE,
                                                                     propose=False)),),
         skip="dominated", seed_tag="milp"),
    Pass("stage DP", (StageDP(),), skip="upper", seed_tag="stage-dp"),
    Pass("pair DP", (PairDP(),), skip="dominated", seed_tag="pair-dp"),
    Pass("path LP", (PathLP(),), skip="dominated", seed_tag="path-lp"),
)

#: The anytime pass: :func:`autotune.tuner.solve.bound_and_seeds` runs it right after the first
#: pass when the clock cut that one, or when the user's ``--timeout`` leaves a short bound phase
#: (:data:`autotune.tuner.solve.ANYTIME_HORIZON_S`): the path LP, whose every LP solve is a proof,
#: so that the bound rises steadily for as long as the clock lets it (the later path-LP pass then
#: skips the V's it ran for). Measured on scaling.py's large rows (bound ms after 1.5 s of wall
#: time, against the first pass's Lagrangian after the same 1.5 s): pp 32 × vpp 4 × m 256 MoE
#: 67,740 (its first solve, after 1.2 s of set-up; 79,549 after 2 s) against 62,457; pp 64 × vpp 2
#: × m 512 MoE 101,953 against 62,695; pp 32 × vpp 4 dense 120,862 against 113,156; pp 64 × vpp 2 ×
#: m 512 dense 120,244 against 113,320. The DP bounds prove more on the dense rows, given 5–35 s.
ANYTIME = Pass("anytime path LP", (PathLP(),), skip="dominated", seed_tag="path-lp")


@dataclass(frozen=True)
class Unproven(Delegate):
    """``proof`` only for a V that holds no proof yet (``ctx.lower_ms`` None): a fallback. A V
    with one gets that bound back (not None, which :func:`tighten` reads as a proof the clock or a
    work cap stopped)."""

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        if ctx.lower_ms is not None:
            return BoundOutcome(ctx.lower_ms)
        return self.proof.bound(problem, V, ctx)


@dataclass(frozen=True)
class Until(Delegate):
    """``proof`` with the earlier of the pass's deadline and ``at`` (time.monotonic(); None: the
    pass's) as its own."""

    at: float | None = None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        at = ctx.deadline if self.at is None or (ctx.deadline is not None and ctx.deadline < self.at) else self.at
        return self.proof.bound(problem, V, replace(ctx, deadline=at))


@dataclass(frozen=True)
class BoundOnly(Delegate):
    """``proof``'s bound without its relaxed split (no seed from it)."""

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        out = self.proof.bound(problem, V, ctx)
        return None if out is None else replace(out, split=None)


def stage_dp_first(lagrangian_until: float | None) -> Pass:
    """The first pass under a short ``--timeout`` on a model of one layer kind
    (:func:`autotune.tuner.solve.bound_and_seeds`, which gives it the anytime pass's share of the
    time too): the stage DP before the Lagrangian, which runs, to ``lagrangian_until``
    (time.monotonic()), only for a V the stage DP left without a proof (its tables gave up on the
    clock: :func:`~autotune.tuner.bounds._clock.cannot_finish`; or a schedule it does not cover).

    Why: :data:`REGISTRY`'s first pass gets 30 % of a timed bound phase, and on the large rows its
    Lagrangian takes all of it, so the stage DP never runs; yet on a model of one kind (the stage
    DP is exact for it) that proves far more in a few seconds (each alone, the answer as
    incumbent: pp 32 × vpp 4 × m 256 dense 130,025.8 ms in 1.9 CPU s, the Lagrangian 115,640.1 in
    1.7, the path LP 121,394.5 in 23.4). On a model of several kinds (dense + MoE + MTP) it charges
    every layer the cheapest kind and the anytime path LP proves more (pp 32 × vpp 4 MoE: stage DP
    80,310.5 ms in 3.6 s, path LP 89,912.8): there :data:`REGISTRY`'s first pass stays."""
    return Pass("relaxations", (PathDP(), SplitScan(), SplitLP(), BoundOnly(StageDP()),
                                Unproven(Until(Lagrangian(), lagrangian_until))))


@dataclass
class BoundResult:
    """A lower bound on the step time (ms) of every memory-feasible layout of a problem.

    Attributes:
        bound_ms: min over V of ``per_v_ms[V]``.
        per_v_ms: V -> bound for layouts with that pp_interleave_num (inf: none fits for sure).
        layers_v: V -> the relaxed problem's best split int [V, P] (a good seed, not a proof).
        iterations: subgradient iterations and DP evaluations done in all.
    """

    bound_ms: float
    per_v_ms: dict[int, float] = field(default_factory=dict)
    layers_v: dict[int, np.ndarray] = field(default_factory=dict)
    iterations: int = 0


def lower_bound(problem: Problem, *, upper_ms: float | None = None, iters: int = 300,
                tol: float = 1e-4, layouts: list[Candidate] | None = None,
                gen_every: int = 10, patience: int = 5, stage_dp: bool = True) -> BoundResult:
    """Lower bound on the step time (ms) of any layout in ``problem`` that fits its HBM budget:
    the first pass of :data:`REGISTRY` (path DP for V = 1; for V > 1 the Lagrangian, then the stage
    DP from its value when ``stage_dp``), every V bounded.

    Args:
        problem: the tuning problem (its V candidates, bounds and recompute kinds are respected).
        upper_ms: the best known feasible step time (ms); the Polyak target, and a V whose bound
            reaches it may stop early (it then cannot beat the incumbent).
        iters, tol, gen_every, patience: the Lagrangian's work (:class:`Lagrangian`).
        layouts: known layouts; the critical path of each one with its V joins that V's family.

    Returns:
        :class:`BoundResult` (``bound_ms`` may be +inf when no layout can fit).
    """
    proofs = (PathDP(), Lagrangian(iters, tol, gen_every, patience)) + ((StageDP(),) if stage_dp else ())
    t = tighten(problem, proofs, ctx=BoundContext(upper_ms=upper_ms, layouts=tuple(layouts or ())))
    work = int(sum(t.work.values()))
    return BoundResult(t.bound_ms, dict(t.per_v_ms), dict(t.splits), work)


__all__ = ["ANYTIME", "BoundContext", "BoundOnly", "BoundOutcome", "BoundResult", "Delegate", "DeviceDP", "Fallback",
           "IntegerProgram", "Lagrangian", "LowerBound", "PairDP", "Pass", "PathDP", "PathLP", "REGISTRY", "SplitLP",
           "SplitScan", "StageDP", "StayLP", "Tightened", "Unproven", "Until", "WorkFloor", "WrapDP", "critical_path",
           "lower_bound", "floor_ms", "path_dp_bound", "several_kinds", "stage_dp_first", "stay_lp_ms", "tighten",
           "work_floor_ms"]
