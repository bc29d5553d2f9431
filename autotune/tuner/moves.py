"""Neighbourhoods of a layout for the local searches (pure numpy, no Optuna).

A :class:`Neighbourhood` (``name``, ``batches(problem, base, fit, memo)``) yields the layouts one
step away from ``base`` in batches (:class:`LayoutBatch`); :func:`scan` simulates them all:

- :class:`SingleLayerMoves`: one layer from mini-stage a to mini-stage b, every (a, b);
- :class:`PairMoves`: two single moves at once, among the best-ranked single moves of a scan;
- :class:`GivenSplits`: given layer splits (e.g. one pair move to descend from);
- :class:`RecomputeTrades`: the split kept, one or two stages' recompute replaced by other
  fitting combinations of their chunks' options;
- :class:`StageTrades`: the single-stage recompute trades of several stages, one stage after the
  other, in one batch;
- :class:`OneOptMoves`: the 1-opt neighbourhood (:func:`one_opt_moves`): one layer moved between
  two mini-stages with every recompute count kept (clipped to the layers left), or one recompute
  count (full, select or comm) changed by ±1 on one mini-stage.

The split moves re-fit the recompute of the stages they touch with a
:class:`~autotune.tuner.fit.RecomputeFit` (each distinct touched column once per problem:
:func:`~autotune.tuner.fit.refit_touched`); the other stages keep ``base``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Protocol

import numpy as np

from autotune.cost.budget import excess_mib, fits
from autotune.cost.inputs import StageCosts
from autotune.cost.simulate import bwd_w_ms, compile_schedule
from autotune.tuner.bounds._paths import CriticalPath, critical_path, one_stay_counts
from autotune.tuner.fit import (GREEDY, RecomputeFit, check_deadline, clock_block, fit_cache, refit_touched,
                                with_deadline)
from autotune.tuner.problem import REL_TOL, Candidate, Problem, first_min, rank_order, tie_key

#: Moves refitted and simulated per batch (bounds memory on large spaces).
MOVE_CHUNK = 20_000


class LayoutBatch(NamedTuple):
    """B layouts of one V: layer, recompute, select and comm counts, int [B, V, P] each."""

    layers: np.ndarray
    rec: np.ndarray
    sel: np.ndarray
    com: np.ndarray

    @staticmethod
    def concat(parts: "list[LayoutBatch]") -> "LayoutBatch":
        """The batches of ``parts`` one after another."""
        return LayoutBatch(*(np.concatenate([b[k] for b in parts]) for k in range(4)))


class Neighbourhood(Protocol):
    """The layouts one move away from a layout (module docstring)."""

    name: str

    def batches(self, problem: Problem, base: Candidate, fit: RecomputeFit,
                memo: dict | None) -> Iterator[LayoutBatch]:
        """The neighbours of ``base`` in batches; ``fit`` / ``memo`` re-fit touched stages."""


#: Simulated ops (moves × the schedule's ops) one single-move scan may spend. Above it the moves
#: take a layer only from the chunks of the busiest stages (:func:`move_sources`), as many stages
#: as fit the cap (at least one): the full neighbourhood of pp 32 × vpp 4 with 256 micro-batches
#: is 16,256 moves × 65,536 ops (~7 s per scan), the busiest stage's 508 moves ~0.2 s. Every
#: problem of ``benchmarks/search_quality.py`` (<= 2.1 M ops per full scan) is under it.
SCAN_OPS = 4e7


def move_sources(problem: Problem, cand: Candidate) -> np.ndarray | None:
    """bool [V·P] (layer order): the mini-stages a single move may take a layer from, or None
    (all) when the full neighbourhood fits :data:`SCAN_OPS`. Otherwise the chunks of the stages
    with the most forward + backward work per micro-batch (replay included, ``cand``'s own
    recompute), as many stages as the cap allows, at least one: a move that shortens the step
    of a long schedule mostly unloads its bottleneck stage. Deterministic (ties: lower stage)."""
    V, P = cand.V, problem.P
    n = V * P
    ops = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num).num_ops
    if n * (n - 1) * ops <= SCAN_OPS:
        return None
    c = problem.costs(V, cand.layers[None], cand.rec[None], cand.sel[None], cand.com[None])
    busy = (c.fwd_ms + c.bwd_ms)[0].sum(axis=0)  # P
    k = max(1, int(SCAN_OPS // (V * (n - 1) * ops)))
    top = np.argsort(-busy, kind="stable")[:k]
    src = np.zeros((V, P), dtype=bool)
    src[:, top] = True
    return src.reshape(-1)


def single_moves(problem: Problem, cand: Candidate, sources: np.ndarray | None = None) -> np.ndarray:
    """All valid splits [B, V, P] one layer away from ``cand`` (a -> b for every pair; only the
    ``a`` with ``sources[a]`` when given, bool [V·P] in layer order)."""
    V, P = cand.V, problem.P
    flat = cand.layers.reshape(-1)
    lo, hi = problem.bounds(V)
    lo, hi = lo.reshape(-1), hi.reshape(-1)
    out = []
    n = V * P
    for a in range(n):
        if flat[a] - 1 < lo[a] or (sources is not None and not sources[a]):
            continue
        for b in range(n):
            if a == b or flat[b] + 1 > hi[b]:
                continue
            f = flat.copy()
            f[a] -= 1
            f[b] += 1
            out.append(f.reshape(V, P))
    return np.asarray(out, dtype=np.int64).reshape(-1, V, P)


def pair_moves(problem: Problem, base: Candidate, singles: np.ndarray, order: np.ndarray,
               top: int) -> np.ndarray:
    """Splits int [M, V, P] two single-layer moves away from ``base``: the sum of every pair of
    the first ``top`` single moves in ``order`` (indices into ``singles``, int [B, V, P]; a move
    may pair with itself: two layers a -> b), kept when within :meth:`Problem.bounds` and really
    two layers moved (neither ``base`` itself nor a single move); distinct, pairs of
    better-ranked single moves first."""
    lo, hi = problem.bounds(base.V)
    d = singles[np.asarray(order)[:top]] - base.layers[None]  # T V P: -1 at a, +1 at b
    i, j = np.triu_indices(len(d))
    o = np.lexsort((j, i + j))  # by rank sum, then by the second move's rank
    i, j = i[o], j[o]
    dd = d[i] + d[j]
    comb = base.layers[None] + dd
    ok = ((comb >= lo) & (comb <= hi)).all(axis=(1, 2)) & (np.abs(dd).sum(axis=(1, 2)) == 4)
    comb = comb[ok]
    if not len(comb):
        return comb
    _, first = np.unique(comb.reshape(len(comb), -1), axis=0, return_index=True)
    return comb[np.sort(first)]


def one_opt_moves(problem: Problem, cand: Candidate) -> LayoutBatch:
    """Every layout one move away from ``cand`` (int [B, V, P] tables), in this order:

    1. one layer from mini-stage a to mini-stage b (every valid pair, :func:`single_moves`' order),
       the recompute counts of every mini-stage kept, those of a clipped to its layers left
       (a count is "the first r layers": MindFormers' recompute / select_recompute /
       select_comm_recompute);
    2. one recompute count of one mini-stage changed by ±1 (full, select, comm; only the kinds in
       ``problem.kinds``), kept within [0, layers].

    The moves a finishing descent must exhaust for the answer to be 1-opt (issue 17)."""
    V, P = cand.V, problem.P
    splits = single_moves(problem, cand)
    B = len(splits)
    tabs = [np.minimum(np.broadcast_to(t, (B, V, P)), splits) for t in (cand.rec, cand.sel, cand.com)]
    parts = [LayoutBatch(splits, *tabs)]
    base = (cand.rec, cand.sel, cand.com)
    for k, kind in enumerate(("full", "select", "comm")):
        if kind not in problem.kinds:
            continue
        for d in (-1, 1):
            t = base[k][None] + d * np.eye(V * P, dtype=np.int64).reshape(V * P, V, P)
            ok = ((t >= 0) & (t <= cand.layers[None])).all(axis=(1, 2))
            t = t[ok]
            n = len(t)
            tabs = [np.broadcast_to(x, (n, V, P)).copy() for x in base]
            tabs[k] = t
            parts.append(LayoutBatch(np.broadcast_to(cand.layers, (n, V, P)).copy(), *tabs))
    return LayoutBatch(*(np.concatenate([b[i] for b in parts]).reshape(-1, V, P) for i in range(4)))


@dataclass(frozen=True)
class GivenSplits:
    """These layer splits int [B, V, P] of ``base``'s V, touched stages re-fitted."""

    splits: np.ndarray
    name: str = "splits"

    def split_moves(self, problem: Problem, base: Candidate) -> np.ndarray:
        return self.splits

    def batches(self, problem: Problem, base: Candidate, fit: RecomputeFit,
                memo: dict | None) -> Iterator[LayoutBatch]:
        splits = self.split_moves(problem, base)
        for lo in range(0, len(splits), MOVE_CHUNK):
            sp = splits[lo:lo + MOVE_CHUNK]
            yield LayoutBatch(sp, *refit_touched(problem, base, sp, memo, fit))


@dataclass(frozen=True)
class SingleLayerMoves(GivenSplits):
    """Every valid move of one layer between two mini-stages (:func:`single_moves`); on long
    schedules only from the busiest stages' chunks (:func:`move_sources`, a work cap)."""

    splits: np.ndarray | None = None
    name: str = "single"

    def split_moves(self, problem: Problem, base: Candidate) -> np.ndarray:
        return single_moves(problem, base, move_sources(problem, base))


@dataclass(frozen=True)
class PairMoves(GivenSplits):
    """Two single moves at once among the first ``top`` of ``singles`` in ``order``
    (:func:`pair_moves`)."""

    splits: np.ndarray | None = None
    singles: np.ndarray | None = None
    order: np.ndarray | None = None
    top: int = 0
    name: str = "pair"

    def split_moves(self, problem: Problem, base: Candidate) -> np.ndarray:
        return pair_moves(problem, base, self.singles, self.order, self.top)


@dataclass(frozen=True)
class RecomputeTrades:
    """``base``'s split with the recompute of one or more stages replaced together: ``trades`` is
    a tuple of (stage, columns int [S, V, 3] (rec, sel, com per chunk)); every combination of one
    column set per traded stage is a neighbour (one batch, in ``np.indices`` order)."""

    trades: tuple[tuple[int, np.ndarray], ...]
    name: str = "recompute"

    def batches(self, problem: Problem, base: Candidate, fit: RecomputeFit,
                memo: dict | None) -> Iterator[LayoutBatch]:
        V, P = base.V, problem.P
        sizes = [len(c) for _, c in self.trades]
        S = int(np.prod(sizes))
        arr = [np.broadcast_to(getattr(base, a), (S, V, P)).copy() for a in ("rec", "sel", "com")]
        grid = np.indices(sizes).reshape(len(sizes), -1)
        for (p, c), g in zip(self.trades, grid):
            for a in range(3):
                arr[a][:, :, p] = c[g, :, a]
        yield LayoutBatch(np.broadcast_to(base.layers, (S, V, P)), *arr)

    def groups(self) -> list[tuple[slice, tuple[int, ...]]]:
        """The batch's rows differ from each other only on the traded stages (:func:`scan`)."""
        return [(slice(0, int(np.prod([len(c) for _, c in self.trades]))), tuple(p for p, _ in self.trades))]


#: Most rows of a :class:`StageTrades` batch (whole stages; bounds the pricing's temporaries,
#: e.g. its layer-class counts [kinds, 5, rows, V, P]). Large on purpose: on scaling.py's pp 32 ×
#: vpp 4 × m 256 MoE problem (~6,400 trades a scan) batches of 2,048 made the study slower (9.9-10.5
#: against 9.2 CPU s) and its peak RSS larger (763-778 against 726 MiB) than one batch.
TRADE_BATCH = 8192


@dataclass(frozen=True)
class StageTrades:
    """The union of the single-stage :class:`RecomputeTrades` ``((p, c),)`` of every (stage p,
    columns c int [S_p, V, 3]) in ``trades``: the neighbours of each stage in turn, in the order
    given, in batches of whole stages (:meth:`segments` gives each stage's rows). One :func:`scan`
    of it prices the memory of a batch at once (each distinct stage column once,
    :func:`~autotune.cost.inputs.stage_costs_distinct`) and simulates the ones its screen keeps
    together, where a scan per stage priced each stage's batch and simulated it apart:
    the same rows and values (a neighbour's cost and step do not depend on the batch it is in)."""

    trades: tuple[tuple[int, np.ndarray], ...]
    name: str = "stage-trades"

    def segments(self) -> list[slice]:
        """Each trade's rows among the scan's (all batches one after another), in order."""
        ends = np.cumsum([0] + [len(c) for _, c in self.trades])
        return [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])]

    def groups(self) -> list[tuple[slice, tuple[int, ...]]]:
        """Each trade's rows differ from each other only on its stage (:func:`scan`)."""
        return [(sl, (p,)) for sl, (p, _) in zip(self.segments(), self.trades)]

    def batches(self, problem: Problem, base: Candidate, fit: RecomputeFit,
                memo: dict | None) -> Iterator[LayoutBatch]:
        """Whole stages' trades, at most :data:`TRADE_BATCH` rows a batch (or one stage's)."""
        parts: list[LayoutBatch] = []
        rows = 0
        for t in self.trades:
            b = next(RecomputeTrades((t,)).batches(problem, base, fit, memo))
            if parts and rows + len(b.layers) > TRADE_BATCH:
                yield LayoutBatch.concat(parts)
                parts, rows = [], 0
            parts.append(b)
            rows += len(b.layers)
        if parts:
            yield LayoutBatch.concat(parts)


@dataclass(frozen=True)
class OneOptMoves:
    """The 1-opt neighbourhood of ``base`` (:func:`one_opt_moves`; ``fit`` / ``memo`` unused: no
    stage is re-fitted), in batches of :data:`MOVE_CHUNK`. With ``fitting_only`` only the moves
    that fit the budget (:func:`~autotune.tuner.problem.fits`; their memory is priced first, no
    simulation) are yielded, in the same order: for a caller that wants the moves better than a
    fitting layout (a move over the budget never is), this skips simulating the rest (on
    pp 32 × vpp 4 × m 256 most of 17,000 moves of 65,536 ops each)."""

    name: str = "one-opt"
    fitting_only: bool = False

    def batches(self, problem: Problem, base: Candidate, fit: RecomputeFit,
                memo: dict | None) -> Iterator[LayoutBatch]:
        allm = one_opt_moves(problem, base)
        for lo in range(0, len(allm.layers), MOVE_CHUNK):
            b = LayoutBatch(*(a[lo:lo + MOVE_CHUNK] for a in allm))
            if self.fitting_only:
                peak = problem.memory_peaks(base.V, problem.costs(base.V, *b), near=base)
                ok = fits(peak.max(axis=1), problem.hbm_mib)
                if not ok.all():
                    b = LayoutBatch(*(a[ok] for a in b))
                if not len(b.layers):
                    continue
            yield b


@dataclass(frozen=True)
class Scan:
    """The neighbours of one :func:`scan`, simulated: layouts (:class:`LayoutBatch` fields, int
    [B, V, P]), step ms [B] and per-stage peak MiB [B, P]."""

    V: int
    layouts: LayoutBatch
    step_ms: np.ndarray
    peak_mib: np.ndarray

    def part(self, rows: slice) -> "Scan":
        """The neighbours ``rows`` of the scan (views)."""
        return Scan(self.V, LayoutBatch(*(a[rows] for a in self.layouts)), self.step_ms[rows], self.peak_mib[rows])

    def excess_mib(self, problem: Problem) -> np.ndarray:
        """[B] MiB over the budget of the worst stage, clipped at 0."""
        return np.maximum(0.0, excess_mib(self.peak_mib.max(axis=1), problem.hbm_mib))

    def candidate(self, problem: Problem, i: int, origin: str = "") -> Candidate:
        """Neighbour i as a scored Candidate."""
        pk = float(self.peak_mib[i].max())
        lay = self.layouts
        return Candidate(self.V, lay.layers[i], lay.rec[i], lay.sel[i], lay.com[i], float(self.step_ms[i]), pk,
                         excess_mib(pk, problem.hbm_mib), origin=origin)

    def best(self, problem: Problem) -> Candidate:
        """The best neighbour by rank: least memory excess, then least step, then first."""
        return self.candidate(problem, int(rank_order(self.step_ms, self.excess_mib(problem))[0]))

    def fastest_fitting(self, problem: Problem) -> tuple[int, float]:
        """(index, step ms) of the fastest neighbour whose every stage fits the budget
        (:func:`~autotune.cost.budget.fits`); step +inf when none fits."""
        step = np.where(fits(self.peak_mib.max(axis=1), problem.hbm_mib), self.step_ms, np.inf)
        i = first_min(step)
        return i, float(step[i])


#: Relative margin of :func:`step_floor` below the simulated step time: the float rounding of a
#: sum of up to ~10^5 op durations (~10^-11 relative) against the search's tie tolerance
#: :data:`~autotune.tuner.problem.REL_TOL` (10^-9).
FLOOR_MARGIN = 1e-10


def base_path(problem: Problem, base: Candidate) -> CriticalPath:
    """A longest path of ``base``'s schedule for its own durations
    (:func:`~autotune.tuner.bounds.critical_path`): priced with a neighbour's durations it is a
    lower bound on the neighbour's step time (:func:`step_floor`). Memoised per layout in the
    problem's :func:`~autotune.tuner.fit.fit_cache` (a walk over every op: the sampler's recompute
    trades scan one incumbent once per stage)."""
    memo = fit_cache(problem)
    key = ("base_path",) + base.key()
    if key not in memo:
        V = base.V
        cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
        one = problem.costs(V, base.layers[None], base.rec[None], base.sel[None], base.com[None])
        w = bwd_w_ms(one)[0] if cs.split_bw else None
        memo[key] = critical_path(cs, one.fwd_ms[0], one.bwd_ms[0], problem.pa.p2p_ms, w)
    return memo[key]


def _one_stay_arrays(problem: Problem, V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every one-stay path of V's schedule as arrays: forward / backward counts float [Q, V, P],
    hops float [Q], stage int [Q] (:func:`~autotune.tuner.bounds._paths.one_stay_counts`).
    Memoised per problem."""
    memo = fit_cache(problem)
    key = ("one_stay_arrays", V)
    if key not in memo:
        cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
        rows = [(cf, cb, h, p) for p, per in enumerate(one_stay_counts(cs)) for cf, cb, h in per]
        memo[key] = (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                     np.array([float(r[2]) for r in rows]), np.array([r[3] for r in rows]))
    return memo[key]


def floor_paths(problem: Problem, base: Candidate) -> CriticalPath:
    """The paths :func:`step_floor` prices for ``base``'s neighbours, stacked (cf, cb, cw float
    [K, V, P], hops and length float [K], the lengths under ``base``'s durations): ``base``'s
    longest path (:func:`base_path`) and, for a schedule that runs the backward as one op, each
    stage's longest one-stay path under ``base``'s durations
    (:func:`~autotune.tuner.bounds._paths.one_stay_counts`). Every one is a chain of the
    dependency graph, so each gives a floor. A move that loads a stage other than ``base``'s
    critical one past its step time is caught by that stage's path, which counts the pipeline's
    fill and drain beside the stage's work (by hand: tests/search/test_step_floor.py). Memoised
    per layout."""
    memo = fit_cache(problem)
    key = ("floor_paths",) + base.key()
    if key in memo:
        return memo[key]
    cp = base_path(problem, base)
    V, P = base.V, problem.P
    parts = [(cp.cf, cp.cb, cp.cw, float(cp.hops), cp.length)]
    cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
    if not cs.split_bw:
        CF, CB, H, stage = _one_stay_arrays(problem, V)
        one = problem.costs(V, base.layers[None], base.rec[None], base.sel[None], base.com[None])
        L = ((CF * one.fwd_ms[0]).sum(axis=(1, 2)) + (CB * one.bwd_ms[0]).sum(axis=(1, 2))
             + H * problem.pa.p2p_ms)
        for p in range(P):
            rows = np.flatnonzero(stage == p)
            if rows.size:
                i = int(rows[np.argmax(L[rows])])
                parts.append((CF[i], CB[i], np.zeros((V, P)), float(H[i]), float(L[i])))
    cf, cb, cw, hops, length = (np.array([q[j] for q in parts]) for j in range(5))
    memo[key] = CriticalPath(length, cf, cb, hops, cw)
    return memo[key]


def step_floor(problem: Problem, V: int, costs: StageCosts, path: CriticalPath) -> np.ndarray:
    """float [B] ms: a lower bound on the simulated step time of each layout of ``costs``
    ([B, V, P] arrays), less :data:`FLOOR_MARGIN` of it: the larger of

    - its busiest stage's work, m · Σ_v (forward + backward) per micro-batch (a stage runs its ops
      one after another, and the step ends with every stage's last op:
      :func:`~autotune.cost.simulate.simulate`);
    - the length of ``path``, a chain of the schedule's dependency graph, under its durations
      (Σ cf·f + Σ cb·b + hops·p2p, B and W apart when the backward is split; cost-model
      reference §6.1, :func:`~autotune.tuner.bounds.critical_path`)."""
    f, b = costs.fwd_ms, costs.bwd_ms
    busy = ((f + b).sum(axis=1) * problem.m).max(axis=1)
    if path.cf.ndim == 3:  # several paths (:func:`floor_paths`): the longest of them
        B, K = f.shape[0], path.cf.shape[0]
        length = (f.reshape(B, -1) @ path.cf.reshape(K, -1).T + b.reshape(B, -1) @ path.cb.reshape(K, -1).T
                  + path.hops[None] * problem.pa.p2p_ms)
        if compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num).split_bw:
            length += bwd_w_ms(costs).reshape(B, -1) @ (path.cw - path.cb).reshape(K, -1).T
        return np.maximum(busy, length.max(axis=1)) * (1.0 - FLOOR_MARGIN)
    length = (path.cf[None] * f).sum(axis=(1, 2)) + (path.cb[None] * b).sum(axis=(1, 2)) + path.hops * problem.pa.p2p_ms
    if compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num).split_bw:
        w = bwd_w_ms(costs)  # B ops run bwd − w, W ops w
        length += ((path.cw - path.cb)[None] * w).sum(axis=(1, 2))
    return np.maximum(busy, length) * (1.0 - FLOOR_MARGIN)


def never_faster(problem: Problem, V: int, costs: StageCosts, ref: Candidate) -> np.ndarray:
    """bool [B]: the layouts of ``costs`` whose every op duration is >= ``ref``'s
    (:meth:`~autotune.tuner.problem.Problem.op_durations`), so whose step time is >= its: none of
    them can be faster than ``ref`` (e.g. a recompute trade that only adds replay)."""
    one = problem.costs(V, *(getattr(ref, a)[None] for a in ("layers", "rec", "sel", "com")))
    return (problem.op_durations(V, costs) >= problem.op_durations(V, one)).all(axis=0)


def scan(problem: Problem, base: Candidate, nbhd: Neighbourhood, *, fit: RecomputeFit = GREEDY,
         memo: dict | None = None, beat: bool = False, deadline: float | None = None) -> Scan | None:
    """Simulate every neighbour of ``base`` in ``nbhd`` (batch by batch) and return them all; None
    when ``base`` has no neighbour there.

    ``beat``: the caller wants only the neighbours :func:`~autotune.tuner.problem.better` than
    ``base`` (scored, fitting the budget): those that cannot be faster (:func:`never_faster`, or
    a :func:`step_floor` at ``base``'s step time) are not simulated and get step and peak +inf (so
    they are never better, nor the fastest fitting one). On pp 64 × vpp 2 × m 512 most recompute
    trades add replay only. A neighbourhood with ``groups()`` (the recompute trades) also has the
    rows left simulated in increasing floor, and a row whose every op duration on its group's
    stages is >= a simulated row's that is not better is not simulated either
    (:func:`_simulate_pruned`).

    ``deadline`` (time.monotonic(), None: none) is checked before each batch and by ``fit`` as it
    re-fits (:func:`~autotune.tuner.fit.with_deadline`): past it the scan raises
    :class:`~autotune.tuner.fit.PastDeadline`."""
    fit = with_deadline(fit, deadline)
    parts = []
    screen = beat and np.isfinite(base.step_ms) and bool(fits(base.peak_mib, problem.hbm_mib))
    path = floor_paths(problem, base) if screen else None
    thr = base.step_ms * (1.0 - REL_TOL)  # a neighbour at or above it is not better than base
    groups = nbhd.groups() if screen and hasattr(nbhd, "groups") else None
    lo = 0  # the batch's first row among all of nbhd's
    for b in nbhd.batches(problem, base, fit, memo):
        check_deadline(deadline)
        n = len(b.layers)
        lo += n
        if not screen:
            s = problem.evaluate(base.V, b.layers, b.rec, b.sel, b.com)
            parts.append((b, s.step_ms, s.peak_mib))
            continue
        costs = problem.costs(base.V, b.layers, b.rec, b.sel, b.com)
        floor = step_floor(problem, base.V, costs, path)
        run = ~never_faster(problem, base.V, costs, base) & (floor < thr)
        step = np.full(n, np.inf)
        peak = np.full((n, problem.P), np.inf)
        if run.any() and groups is not None:  # each group's rows within this batch
            a = lo - n
            mine = [(slice(max(sl.start, a) - a, min(sl.stop, lo) - a), st) for sl, st in groups
                    if sl.start < lo and sl.stop > a]
            _simulate_pruned(problem, base.V, costs, np.flatnonzero(run), floor, thr, mine, step, peak,
                             deadline=deadline)
        elif run.any():
            s = problem.score_costs(base.V, costs.take(run))
            step[run], peak[run] = s.step_ms, s.peak_mib
        parts.append((b, step, peak))
    if not parts:
        return None
    if len(parts) == 1:
        b, step, peak = parts[0]
        return Scan(base.V, b, step, peak)
    lay = LayoutBatch.concat([p[0] for p in parts])
    return Scan(base.V, lay, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))


#: Rows :func:`_simulate_pruned` simulates at a time.
PRUNE_BLOCK = 64


def _simulate_pruned(problem: Problem, V: int, costs: StageCosts, rows: np.ndarray, floor: np.ndarray,
                     thr: float, groups: list[tuple[slice, tuple[int, ...]]], step: np.ndarray,
                     peak: np.ndarray, deadline: float | None = None) -> None:
    """Simulate ``rows`` (int indices into the batch ``costs``) in increasing ``floor``, blocks of
    :data:`PRUNE_BLOCK`, writing step ms and peak MiB into ``step`` / ``peak`` (rows never
    simulated keep theirs, +inf), and leave out every row proven to run at ``thr`` ms or more.

    ``groups``: (rows of the batch, stages) pairs; the rows of a group differ only in the
    durations of its stages' ops (e.g. one stage's recompute traded, the rest of the layout
    ``base``'s). The step time never decreases when no op duration does (a max-plus recurrence:
    :meth:`~autotune.tuner.problem.Problem.op_durations`), so a row whose durations on its
    group's stages are all >= those of a simulated row of the same group with step >= ``thr`` has
    step >= ``thr`` too. On ``benchmarks/scaling.py``'s pp 32 × vpp 4 × m 256 MoE problem the
    study's recompute trades simulated 12,872 rows for 776 better ones; ~7,900 of them have
    durations >= a slower simulated one's."""
    dur = problem.op_durations(V, costs)  # [R, B], row kind·V·P + v·P + p
    stage_of = np.arange(dur.shape[0]) % problem.P
    gid = np.full(dur.shape[1], -1)
    feats: list[tuple[int, np.ndarray]] = []
    for g, (sl, stages) in enumerate(groups):
        gid[sl] = g
        feats.append((sl.start, dur[np.isin(stage_of, stages)][:, sl].T))  # [rows of g, its ops]
    todo = rows[np.argsort(floor[rows], kind="stable")]
    while todo.size:
        check_deadline(deadline)  # time.monotonic() limit (PastDeadline), None: none
        blk, todo = todo[:PRUNE_BLOCK], todo[PRUNE_BLOCK:]
        s = problem.score_costs(V, costs.take(blk))
        step[blk], peak[blk] = s.step_ms, s.peak_mib
        slow = blk[s.step_ms >= thr]
        if not (slow.size and todo.size):
            continue
        drop = np.zeros(todo.size, dtype=bool)
        for g in np.unique(gid[slow]):
            mine = np.flatnonzero(gid[todo] == g)
            if g < 0 or not mine.size:
                continue
            start, F = feats[g]
            ref = F[slow[gid[slow] == g] - start]  # [k, ops]
            drop[mine[(F[todo[mine] - start][:, None, :] >= ref[None]).all(axis=2).any(axis=1)]] = True
        todo = todo[~drop]


#: Neighbours a :class:`LazyScan` simulates at a time (the batched simulation's narrowest chunk).
LAZY_BLOCK = 64


class LazyScan:
    """The neighbours of ``base`` in ``nbhd`` with their memory priced at once and their step times
    simulated lazily, in increasing :func:`step_floor` (the paths of :func:`floor_paths` priced
    with each neighbour's durations): :meth:`settle` ``(k)`` simulates until the first k neighbours by
    :func:`~autotune.tuner.problem.rank_order` are known, and :meth:`scan` is then a
    :class:`Scan` whose first k in rank order, and so its :meth:`Scan.best`, are those of the full
    :func:`scan` (the same rows, values and order; the other rows may hold step +inf).

    Why it is exact: peaks are priced per batch as :func:`scan` prices them, and a neighbour's
    simulated step does not depend on the others simulated with it. Rows rank by the tie key of
    their memory excess first (known for all), then of their step. Once the k-th least simulated
    step s_k of the best excess key's rows and the least floor f of the rows not simulated satisfy
    f >= s_k + 2·unit (unit = REL_TOL · the least step, which is then a simulated one), every row
    not simulated has a step key above s_k's, so it ranks after the first k in both scans. When
    the best excess key holds k rows or fewer, every row is simulated.

    Used by the local searches where a step takes the best neighbour, or the pair-move escape
    the best ``top``: on pp 32 × vpp 4 × m 256 most of a scan's ~500 neighbours are never simulated.

    ``deadline`` (time.monotonic(), None: none): checked before each batch and each simulation,
    and by ``fit`` as it re-fits (:func:`~autotune.tuner.fit.with_deadline`); past it
    :class:`~autotune.tuner.fit.PastDeadline` is raised.
    """

    def __init__(self, problem: Problem, base: Candidate, nbhd: "Neighbourhood", *, fit: RecomputeFit = GREEDY,
                 memo: dict | None = None, deadline: float | None = None) -> None:
        self.problem, self.V, self.deadline = problem, base.V, deadline
        fit = with_deadline(fit, deadline)
        path = floor_paths(problem, base)
        parts = []
        for b in nbhd.batches(problem, base, fit, memo):
            check_deadline(deadline)
            costs = problem.costs(base.V, b.layers, b.rec, b.sel, b.com)
            parts.append((b, costs, problem.score_costs(base.V, costs, memory_only=True).peak_mib,
                          step_floor(problem, base.V, costs, path)))
        self.empty = not parts
        if self.empty:
            return
        self.layouts = LayoutBatch.concat([p[0] for p in parts])
        self.costs = StageCosts.concat([p[1] for p in parts])
        self.peak_mib = np.concatenate([p[2] for p in parts])
        floor = np.concatenate([p[3] for p in parts])
        self.order = np.argsort(floor, kind="stable")
        self.floor_sorted = floor[self.order]
        self.step_ms = np.full(len(floor), np.inf)
        self.done = 0  # rows of ``order`` simulated
        ekey = tie_key(np.maximum(0.0, excess_mib(self.peak_mib.max(axis=1), problem.hbm_mib)))
        self.group = ekey == ekey.min()

    def _simulate(self, n: int) -> None:
        rows = self.order[self.done:self.done + n]
        if not len(rows):
            return
        check_deadline(self.deadline)
        self.step_ms[rows] = self.problem.score_costs(self.V, self.costs.take(rows)).step_ms
        self.done += len(rows)

    def _settled(self, k: int) -> bool:
        s = self.step_ms[self.group]
        s = s[np.isfinite(s)]
        if len(s) < k:
            return False
        lo = float(self.step_ms[np.isfinite(self.step_ms)].min())
        unit = REL_TOL * abs(lo)
        kth = float(np.partition(s, k - 1)[k - 1])
        return unit > 0 and float(self.floor_sorted[self.done]) >= kth + 2.0 * unit

    def settle(self, k: int) -> "LazyScan":
        """Simulate until the first ``k`` (>= 1) neighbours in rank order are known; returns self."""
        n = len(self.step_ms)
        if int(self.group.sum()) <= k:
            self._simulate(n - self.done)
        while self.done < n and not (self.done and self._settled(k)):
            self._simulate(LAZY_BLOCK)
        return self

    def settle_below(self, step_ms: float) -> "LazyScan":
        """Simulate every neighbour whose floor is below ``step_ms`` (so every one faster than it);
        returns self."""
        n = int(np.searchsorted(self.floor_sorted, step_ms, side="left"))
        blk = clock_block(n - self.done, self.deadline)  # near the deadline in blocks, clock checked
        while n > self.done:
            self._simulate(min(blk, n - self.done))
        return self

    def scan(self) -> Scan:
        """The neighbours as a :class:`Scan` (rows not simulated: step +inf, peak as priced)."""
        return Scan(self.V, self.layouts, self.step_ms, self.peak_mib)


def lazy_scan(problem: Problem, base: Candidate, nbhd: "Neighbourhood", k: int, *, fit: RecomputeFit = GREEDY,
              memo: dict | None = None, deadline: float | None = None) -> Scan | None:
    """:class:`LazyScan` settled to its first ``k`` neighbours, as a :class:`Scan`; None when
    ``base`` has no neighbour there. ``base`` must be scored (its longest path prices the floors).
    ``deadline``: as :class:`LazyScan`'s."""
    lz = LazyScan(problem, base, nbhd, fit=fit, memo=memo, deadline=deadline)
    return None if lz.empty else lz.settle(k).scan()
