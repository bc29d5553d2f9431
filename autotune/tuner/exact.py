"""Exact optimum of the cost model by batched enumeration (small problems; pure numpy, no Optuna).

Why enumeration can skip most recompute vectors (exactness argument):

- a stage's peak memory depends only on its own column of the layout (its layers and recompute);
- recompute changes only backward times, and the simulated step time is monotone non-decreasing
  in every op duration (end = max(deps) + duration, a max-plus system).

So for a fixed split, the optimum takes, on every stage, a memory-feasible recompute choice whose
vector of per-chunk backward times is Pareto-minimal; enumerating splits × the product over stages
of those Pareto sets (one element per stage when V = 1) and simulating them all finds the exact
optimum of the space (cost-model reference §6.2: "brute force for tests"). Splits are visited in
order of their no-recompute step time, a lower bound for every recompute choice on them, and the
scan stops when that bound reaches the incumbent (branch and bound; still exact).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.budget import excess_mib
from autotune.cost.simulate import compile_schedule
from autotune.tuner.problem import Candidate, Problem, compositions, count_splits, first_min, stage_configurations
from autotune.tuner.recompute import recompute_choices


#: Ops of the event simulation charged as one unit of :func:`exact_optimum`'s ``max_work`` per
#: simulated layout (a layout of pp 4 × vpp 2 × m 16, 256 ops, is one unit; pp 16 × vpp 2 × m 64,
#: 4,096 ops, is 16): the budget then stands for about the same CPU time at every size.
SIM_UNIT_OPS = 256
#: :meth:`_Enumeration.project` gives up when the splits still to visit, at the fewest layouts of a
#: split visited so far, would charge more than this many times the budget left. A projection,
#: not a proof (the incumbent can still fall and cut splits, or a later split have fewer picks),
#: so it keeps a wide margin; it only ends a run that would most likely end at the budget anyway,
#: after simulating up to ``max_work`` units for nothing. scaling.py's pp 16 × vpp 2 × m 64 × 32
#: layers (528 splits of 4,608-9,216 layouts each, 4,096 ops a layout): after the first split 452
#: splits are still below the incumbent, 452 × 9,216 × 16 units, 49 × the budget left.
PROJECTION_FACTOR = 4.0


def _chunk_options(n: int, kinds: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """The recompute choices of a mini-stage of n layers (:func:`autotune.tuner.recompute.
    recompute_choices`) in lexicographic (full, select, comm) order, the enumeration's order."""
    return sorted(tuple(int(x) for x in row) for row in recompute_choices(n, kinds))


def space_size(problem: Problem) -> int:
    """Number of distinct layouts (splits × recompute counts) in the problem's space."""
    total = 0
    for V in problem.vpp_candidates:
        lo, hi = problem.bounds(V)
        for split in compositions(problem.N, lo.reshape(-1), hi.reshape(-1)):
            prod = 1
            for n in split:
                prod *= len(recompute_choices(int(n), problem.kinds))
            total += prod
    return total


@dataclass
class ExactResult:
    """Exact optimum: ``best`` (None when nothing fits), layouts simulated, splits enumerated,
    ``work`` = recompute combinations built + layouts simulated (the unit of ``max_work``)."""

    best: Candidate | None
    evaluated: int
    splits: int
    work: int = 0


class ExactBudgetExceeded(ValueError):
    """:func:`exact_optimum` stopped: its work budget or deadline would be exceeded, or is projected
    to be (:data:`PROJECTION_FACTOR`; a projection can stop a run that would have finished), so the
    answer would not be proven optimal. ``work`` = units done when it stopped."""

    def __init__(self, msg: str, work: int) -> None:
        super().__init__(msg)
        self.work = work


class _Enumeration:
    """The state of :func:`exact_optimum`: the incumbent, the work charged and the pending batch."""

    def __init__(self, problem: Problem, batch: int, max_work: int | None, deadline: float | None) -> None:
        self.problem, self.batch, self.max_work, self.deadline = problem, batch, max_work, deadline
        self.best: Candidate | None = None
        self.evaluated = self.work = 0
        self.pend: list[tuple[np.ndarray, np.ndarray]] = []
        self.per_layout = 1  # units charged per simulated layout (set per V by :meth:`scan`)
        self.fewest: int | None = None  # fewest layouts of a split visited so far (this V)

    def charge(self, units: int) -> None:
        """Count ``units`` of work; raises :class:`ExactBudgetExceeded` past the budget or deadline."""
        self.work += units
        if self.max_work is not None and self.work > self.max_work:
            raise ExactBudgetExceeded(f"exact enumeration needs more than max_work={self.max_work} units",
                                      self.work)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ExactBudgetExceeded("exact enumeration reached its deadline", self.work)

    def precharge(self, layouts: int) -> None:
        """Raise :class:`ExactBudgetExceeded` now when simulating ``layouts`` more layouts (one
        split's every pick, each charged ``per_layout`` units by :meth:`flush`) would pass ``max_work``: the
        run would raise there anyway, after simulating them. pp 64 × vpp 2 with one layer a
        mini-stage has one split but ~3^64 picks: 430 CPU s of batches before this check."""
        if self.max_work is not None and self.work + (len(self.pend) + layouts) * self.per_layout > self.max_work:
            raise ExactBudgetExceeded(f"exact enumeration needs more than max_work={self.max_work} units "
                                      f"({layouts:.3g} layouts for one split)", self.work)

    def project(self, V: int, lb0_left: np.ndarray) -> None:
        """Raise :class:`ExactBudgetExceeded` when the splits not visited yet (their no-recompute
        times ``lb0_left``, ascending) that are below the incumbent, each at the fewest layouts of a
        split visited so far, would charge more than :data:`PROJECTION_FACTOR` × the budget left.
        Off without a budget, and (``fewest`` 0) once a visited split had no fitting pick. The
        pending batch is simulated first when the projection would fire: its layouts can lower the
        incumbent and so the count."""
        if self.max_work is None or not self.fewest or self.best is None:
            return

        def left() -> int:  # the splits not visited yet whose no-recompute time is below the incumbent
            return int(np.searchsorted(lb0_left, self.best.step_ms - 1e-9))

        def over(k: int) -> bool:
            return k * self.fewest * self.per_layout > PROJECTION_FACTOR * max(0, self.max_work - self.work)
        k = left()
        if over(k) and self.pend:
            self.flush(V)
            k = left()
        if over(k):
            raise ExactBudgetExceeded(f"exact enumeration needs more than max_work={self.max_work} units "
                                      f"(projected: {k} splits left below the incumbent, at least "
                                      f"{self.fewest} layouts each so far)", self.work)

    def stage_set(self, cache: dict, split: np.ndarray, p: int) -> np.ndarray:
        """Pareto-minimal feasible (full, select, comm) [k, 3, V] tables for stage p of ``split``
        (:func:`~autotune.tuner.problem.stage_configurations`; memoised in ``cache`` by the stage's
        column and first-layer indices as the schedule places them)."""
        problem = self.problem
        V = split.shape[0]
        key = (p, tuple(split[:, p]), tuple(problem.first_layers(V, split)[:, p]))
        if key in cache:
            return cache[key]
        opts = [_chunk_options(int(split[v, p]), problem.kinds) for v in range(V)]
        self.charge(int(np.prod([len(o) for o in opts], dtype=np.float64)))
        combos = np.asarray(list(itertools.product(*opts)), dtype=np.int64)  # k, V, 3
        keep, _ = stage_configurations(problem, split, p, combos)
        cache[key] = combos[keep].transpose(0, 2, 1)  # k, 3, V
        return cache[key]

    def add(self, V: int, split: np.ndarray, tables: np.ndarray) -> None:
        """Queue one layout (recompute ``tables`` int [3, V, P]); a full batch is simulated."""
        self.pend.append((split, tables))
        if len(self.pend) >= self.batch:
            self.flush(V)

    def flush(self, V: int) -> None:
        """Simulate the pending layouts and keep the fastest fitting one when it beats the best."""
        if not self.pend:
            return
        problem = self.problem
        L = np.stack([x[0] for x in self.pend])
        T = np.stack([x[1] for x in self.pend])  # B, 3, V, P
        self.pend.clear()
        self.charge(L.shape[0] * self.per_layout)
        s = problem.evaluate(V, L, T[:, 0], T[:, 1], T[:, 2])
        self.evaluated += L.shape[0]
        i = first_min(s.step_ms)
        if self.best is None or s.step_ms[i] < self.best.step_ms - 1e-9:
            peak = float(s.peak_mib[i].max())
            self.best = Candidate(V, L[i], T[i, 0], T[i, 1], T[i, 2], float(s.step_ms[i]), peak,
                                  excess_mib(peak, problem.hbm_mib), origin="exact")

    def scan(self, V: int, splits: np.ndarray) -> None:
        """Every split of one V, by branch and bound: a split's simulated time with no recompute
        (memory ignored) is a lower bound for every recompute choice on it (durations only grow),
        so splits are visited in that order and the scan stops once the bound reaches the
        incumbent. Exact, much faster."""
        problem = self.problem
        P = problem.P
        cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
        # a simulation costs ~ its op count: one unit per SIM_UNIT_OPS ops (at least one)
        self.per_layout = max(1, cs.num_ops // SIM_UNIT_OPS)
        cache: dict[tuple, np.ndarray] = {}
        z = np.zeros_like(splits)
        self.charge(len(splits))
        lb0 = problem.evaluate(V, splits, z, z, z).step_ms
        order = np.argsort(lb0, kind="stable")
        self.fewest = None
        for k, si in enumerate(order):
            if self.best is not None and lb0[si] >= self.best.step_ms - 1e-9:
                if self.pend:
                    self.flush(V)
                if lb0[si] >= self.best.step_ms - 1e-9:
                    break
            self.project(V, lb0[order[k:]])
            split = splits[si]
            sets = [self.stage_set(cache, split, p) for p in range(P)]
            if any(s.shape[0] == 0 for s in sets):
                self.fewest = 0  # a split with no fitting pick: the projection is off for this V
                continue
            picks = int(np.prod([s.shape[0] for s in sets], dtype=np.float64))
            self.precharge(picks)
            self.fewest = picks if self.fewest is None else min(self.fewest, picks)
            for pick in itertools.product(*(range(s.shape[0]) for s in sets)):
                self.add(V, split, np.stack([sets[p][pick[p]] for p in range(P)], axis=-1))  # 3, V, P
        self.flush(V)


def exact_optimum(problem: Problem, *, max_splits: int = 200_000, batch: int = 512,
                  max_work: int | None = None, deadline: float | None = None) -> ExactResult:
    """The memory-feasible layout with the least simulated step time (see module docstring).

    Args:
        max_splits: refuse problems with more layer splits than this.
        batch: layouts simulated per numpy batch.
        max_work: deterministic work budget: recompute combinations built (per stage and split,
            before the Pareto filter) plus layouts simulated, each charged one unit per
            :data:`SIM_UNIT_OPS` of its schedule's ops (at least one); None = unlimited. A stage whose
            combination count alone exceeds the budget stops the run before building it, and so
            does a projection of the splits left over :data:`PROJECTION_FACTOR` × what is left of
            it (:meth:`_Enumeration.project`).
        deadline: ``time.monotonic()`` limit, checked between batches; None = none.

    Raises:
        ValueError: more than ``max_splits`` splits to enumerate (use the lower bounds instead).
        ExactBudgetExceeded: ``max_work`` or ``deadline`` reached, or ``max_work`` projected to be,
            before the optimum was proven.
    """
    n_splits = count_splits(problem)
    if n_splits > max_splits:
        raise ValueError(f"{n_splits} splits exceed max_splits={max_splits}")
    run = _Enumeration(problem, batch, max_work, deadline)
    splits_done = 0
    for V in problem.vpp_candidates:
        lo, hi = problem.bounds(V)
        splits = compositions(problem.N, lo.reshape(-1), hi.reshape(-1)).reshape(-1, V, problem.P)
        splits_done += len(splits)
        run.scan(V, splits)
    return ExactResult(run.best, run.evaluated, splits_done, run.work)
