"""Lower bound for pp_interleave_num > 1: a compact integer program over layer counts whose
dependency paths are generated lazily (solved by HiGHS through :func:`scipy.optimize.milp`).

The stage DP (:mod:`autotune.tuner.bounds.stage_dp`) is exact over integer splits but only for one-stay
paths whose counts on other stages it bounds by a three-term pattern; the Lagrangian
(:mod:`autotune.tuner.bounds.lagrangian`) keeps exact counts but prices a convex mix of paths, so its
minimiser is fractional. Here both are kept: the exact count vector of every path in a family,
and integer layer counts.

Model (every relaxation below can only lower the optimum, so its value — or any dual bound of
the branch and bound — is a proof):

    minimise T  over  n[v, p] integer (layers of mini-stage (v, p), the problem's bounds),
                      y[v, p, c] >= 0 real (layers of recompute class c; Σ_c y = n),
    s.t.  Σ n = N;
          for every stage p and every undominated live-count vector w of its schedule
              static_p + Σ_v (n·static + Σ_c y_c (w_v·act_c + static_delta_c)) + w·act_end <= HBM;
          for every path π of the family
              Σ_{v,p} cf_π[v,p]·(n f + end_f) + cb_π[v,p]·(n b0 + Σ_c y_c extra_c + end_b)
              + hops_π·p2p <= T.

With several layer kinds that differ (DeepSeek-V3's dense and MoE layers), x[v, p, k] integer
counts the layers of kind k in the mini-stage, within its window of positions (Σ_k x = n, Σ x[., k]
= the model's layers of kind k; :func:`~autotune.tuner.bounds._relax.kind_windows`), and the
classes are per kind: y[v, p, k, c] with Σ_c y[., k, .] = x[., k], each priced with that kind's
forward / backward ms, activation, static change and replay. Before that the cheapest kind per
class stood for every layer: on scaling.py's P8 V4 m128 L256 MoE problem the typed program proves
167,531 ms where that one proved 158,189 (one solve, same node cap; 6 → 12 CPU s). With x real
(fractional kinds) a P4 V2 m16 L24 cut proved 4,655.2 ms, with x integer 4,727.7; its exact
optimum (enumerated) is 4,761.7.

Relaxations: a layer's kind within its window (the kinds' order dropped), a free and fractional
recompute class per layer (not the "first r layers" rule), the workspace of a mini-stage's
full-recompute layers dropped (but for the workspace phase below: the head / tail workspace is
kept), each live-count vector checked separately — the same as the stage DP's (see its docstring). A path
is any chain of the schedule's dependency graph (data edges + p2p, program order on a stage), so
its length under the real durations is <= the simulated step time (cost-model reference §6.1;
:func:`autotune.tuner.bounds.critical_path`).

Family. It starts with every one-stay path (:func:`autotune.tuner.bounds._paths.stage_paths`, with
exact counts) and the longest path of each layout the search already has. After each solve the
longest path of the minimiser's relaxed durations and of each of its single-layer moves joins
(lazy constraint generation). When the minimiser's own longest path is already priced (its length
equals T) and HiGHS proved optimality, the value is the exact optimum of the relaxed problem.
Then, where a recompute class has a workspace, the loop goes on over the same family in the
program with the workspace switches (:data:`WORKSPACE_PHASE`): binary u per mini-stage, on when
it holds a layer of such a class (y_c <= n·u), and its backward's memory rows carry w >= W_c·u
(W_c the cheapest kind's workspace of class c) as well as the head / tail workspace, as the
cost model's peak does.

Work is capped by HiGHS nodes weighted by the LP size and by the number of solves (deterministic:
the same problem gives the same bound); a wall-clock deadline is only a safety net.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.inputs import BOTH, COMM, FULL, SELECT
from autotune.tuner.bounds._base import BoundContext, BoundOutcome, highs_proven
from autotune.tuner.bounds._clock import cannot_finish
from autotune.tuner.bounds._quiet import quiet_native_stdout
from autotune.tuner.bounds._paths import critical_path, one_stay_counts
from autotune.tuner.bounds._relax import (IntegerSetup, RelaxedLayer, integer_setup, kind_windows, typed_layers,
                                          undominated)
from autotune.tuner.problem import Candidate, Problem
from autotune.tuner.recompute import allowed_classes

#: Work cap over all solves, in HiGHS branch-and-bound nodes × (LP variables × rows)²: measured,
#: a node's time grows about with the square of the LP size (2.5 ms on the 24-mini-stage
#: TeleChat2 problem, 14 ms on its 32-mini-stage vpp4 variant). Deterministic (no clock): 1.5e12
#: gives ~1,400 nodes (~4 s) on the first and ~370 (~5 s) on the second; 48 layers pp5 vpp2
#: converges well inside it (~500 nodes of a small LP).
NODE_WORK = 1.5e12
#: While every solve so far finished (HiGHS proved its optimum: each one a proof above the last),
#: the lazy loop of :func:`milp_bound` may go on up to this many times :data:`NODE_WORK`; the first
#: solve cut by its node limit ends it. On small programs a solve converges in a few hundred nodes
#: and each new one raises the bound: scaling.py's pp 4 × vpp 3 × m 8 × 32 layers 4,351.5 ms
#: (1×, 3 solves) → 4,358.8 (2×) → 4,365.6 (3×, 6 solves finished and a 7th cut, 11.7 s) →
#: 4,368.6 (4×, 8 solves, 13.9 s): 3× is the most that keeps that row near 10 s of bound work, and already within 1 %;
#: where the first solve is cut (pp 8 × vpp 2 × m 64, pp 16 × vpp 2 × m 16, pp 8 × vpp 4 × m 128,
#: the shipped examples) nothing changes. Only while the V
#: holds the least bound over V (``extend_below``, the search's other V's): on the corpus's
#: Qwen2-57B, YiZhao-12B 8k and Llama-2-70B 32p the extension had raised a vpp 3 bound far above
#: vpp 4's (which stayed the least) for 4.5–8 CPU s each and no change to the search's bound.
#: Deterministic.
NODE_WORK_CONVERGING = 3.0
#: Work cap of :func:`milp_recompute` (same units as NODE_WORK; the pinned split solves in a few
#: hundred nodes on the benchmark problems).
POLISH_WORK = 2e12
#: Longest-path walks per solve for the minimiser's neighbours (ops × moves; ~1 µs an op).
NEIGHBOUR_OPS = 2_000_000
#: Solves of the lazy loop (each adds the minimiser's and its neighbours' longest paths).
MAX_SOLVES = 12
#: The bound's program is skipped (no proof from it; the device DP's stands) when its first LP
#: has more cells (variables × rows) than this: the node limit does not bound HiGHS's root work,
#: and one solve of pp 16 × vpp 4 (64 mini-stages) took 44 s of CPU. TeleChat2 vpp4 (32
#: mini-stages, the largest shipped problem) starts at ~69,000 cells. Deterministic. Measured at
#: the cap's edge (CPU s of the whole program, one solve): pp 8 × vpp 4 (161,000 cells, any
#: micro_batch_num >= 64: Llama-2-70B's V 4, scaling.py's P8 V4 L256) takes 7-8 s and raised the
#: dense P8 V4 m128 L256 bound 222,130 -> 239,851 ms (certified gap 9.53 -> 1.31 %) and its MoE
#: twin's 123,627 -> 158,189 ms (44.8 -> 13.9 %); pp 32 × vpp 2 m32 L64 (189,000) took 97 s for
#: no gain, pp 16 × vpp 3 (409,000) 8.6 s for none. The cap was 150,000 before. The recompute
#: polish (:func:`milp_recompute`, split pinned) is skipped past it too: on the 31 rows of
#: ``benchmarks/scaling.py`` it never improved a search's answer (each row's answer and bound the
#: same without it) and cost up to ~6 CPU s a row over the cap (P8 V4 m128 L256 dense: 278,000
#: cells; P32 V2 m64 L128: 1.4 M), while under it it is cheap and can win (the corpus's TeleChat2
#: 39B-A12B: 5,700 cells, 0.5 s, 2,524.8 -> 2,523.4 ms; the TeleChat2 example: 12,000).
MAX_LP_CELLS = 175_000
#: Linear-relaxation solves of the path generation that precedes the integer solves (each adds the
#: LP minimiser's longest path; a few ms each). pp4 vpp3 m8, 32 TeleChat2 layers (scaling.py), same
#: node cap: 4,311.8 -> 4,351.5 ms (the program's converged optimum: 4,369.0 ms, 25 CPU s). More
#: rounds add rows that slow HiGHS's root: TeleChat2 vpp4's one integer solve took 10.6 CPU s
#: after 60 rounds, 4.5 after 20, 4.8 with none.
LP_ROUNDS = 20
#: Once the lazy loop converged (every solve finished and the minimiser's longest path was
#: priced: the relaxed program is solved), the loop goes on over the family found, on the program
#: with the workspace switches of :func:`milp_recompute`'s (u binary per mini-stage: a
#: full-recompute layer in it, summed over kind slots, puts that class's workspace, the cheapest
#: kind's, on its backward's memory rows), with a work cap of its own (NODE_WORK_CONVERGING ×
#: NODE_WORK: the first phase showed the program is small; MAX_SOLVES counts both phases),
#: unless the first phase's optimum already meets the workspace rows (then the phase would end
#: at the same value: skipped; on the corpus's Qwen3-32B finetune it had spent 6 CPU s for
#: nothing). scaling.py's pp 4 × vpp 3 × m 8 ×
#: 32 layers MoE (a full-recompute MoE layer needs 1,327.6 MiB of workspace): 3,156.0 → 3,173.3
#: ms, certified gap 2.35 → 1.79 %, 7.7 → 12.6–13.5 CPU s (the only grid row it moved). Only
#: then: switches in every program from the start slowed the solves (pp 16 × vpp 2 × 32 layers
#: 10.8 → 47.6 CPU s) and let the node cap cut them earlier (pp 8 × vpp 4 × m 128 dense
#: 240,165.0 → 239,834.3 ms). Checked against the enumerated optimum on 245 random problems ×
#: 3 incumbents: none above, and above the program without switches on 210 of 735.
WORKSPACE_PHASE = True
#: The lazy loop also counts as solved for WORKSPACE_PHASE (not as converged) once PLATEAU_SOLVES
#: finished solves in a row leave its value where it was (within 1e-9, relative) while the
#: minimiser's longest path is within PLATEAU_TOL (relative) of that value: the program has many
#: optimal minimisers, each a few ms short of priced, and each solve only swaps one for the next
#: (the corpus's Mixtral-8x7B 32k, V 4: 28,370.92 ms from the 4th solve to the 12th, paths
#: 28,373.6–28,387.4 ms, so MAX_SOLVES ended the loop and the workspace phase never ran; gap
#: 0.49 % when a lucky minimiser was priced at the 7th solve, 1.37 % without). Any value of the
#: workspace phase is a proof whatever the family (its paths are real chains), so the rule only
#: decides where the work goes; and the full program's optimum (with every path row) lies between
#: the plateau's value and the minimiser's longest path (that point is feasible for it), so the
#: first phase stops at most PLATEAU_TOL short of it. The first phase stops there also where no
#: workspace phase follows (no class with a workspace, or no budget): fewer solves, at most
#: PLATEAU_TOL of its value. Not for a pinned split (:func:`milp_recompute`), nor within the
#: workspace phase (its solves are the last: nothing to hand the work on to).
PLATEAU_SOLVES = 2
PLATEAU_TOL = 1e-3
#: Whether the recompute polish (a pinned split: not a proof) uses HiGHS's MIP presolve; the
#: bound's solves never do (see :meth:`_Model.solve`). Their cost on scaling.py's grid: pp 16 ×
#: vpp 2 × 32 layers 10.8 → 17.7–17.9 CPU s (the program's node cap reached more slowly; its bound
#: was not the row's), pp 8 × vpp 4 × m 128 dense 240,165.0 → 240,097.9 ms (certified gap 1.31 →
#: 1.33 %); pp 4 × vpp 3 × m 8 dense rose (0.69 → 0.64 %), every other row's bound the same.
MIP_PRESOLVE = True


@dataclass
class MilpBound:
    """Result of :func:`milp_bound`: the bound (ms; +inf when nothing can fit), the relaxed
    minimiser int [V, P] (a seed, not a proof; None when none was found), the family size,
    the solves run and whether the relaxed problem was solved exactly (``converged``)."""

    bound_ms: float
    split: np.ndarray | None
    paths: int
    solves: int
    converged: bool


def milp_bound(problem: Problem, V: int, *, layouts: list | None = None,
               lower_ms: float | None = None, upper_ms: float | None = None,
               node_work: float = NODE_WORK, max_solves: int = MAX_SOLVES,
               deadline: float | None = None, extend_below: float | None = None) -> MilpBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V.

    See the module docstring for the model. Args:
        problem: the tuning problem; V: pp_interleave_num (>= 2).
        layouts: known layouts (:class:`~autotune.tuner.problem.Candidate`); the longest path of
            each one with this V joins the initial family.
        lower_ms: a bound already proven (the result is never below it).
        upper_ms: a feasible step time: T <= it is added (prunes the search); when that makes the
            program infeasible, no layout beats ``upper_ms`` and it is returned as the bound.
        node_work, max_solves: work caps (Σ nodes × (variables × rows)² over all solves, solves);
        deadline: time.monotonic() safety limit.
        extend_below: the work past ``node_work`` (:data:`NODE_WORK_CONVERGING`) is spent only
            while the bound is below this (ms; the least bound of the other V's: above it this
            V no longer holds the least bound over V), None: no such limit.

    Returns None when the bound does not apply (V = 1, a schedule that splits B/W, non-default
    pipeline positions), its program is over :data:`MAX_LP_CELLS`, or scipy is missing.
    """
    out = _milp(problem, V, layouts=layouts, lower_ms=lower_ms, upper_ms=upper_ms, node_work=node_work,
                max_solves=max_solves, deadline=deadline, converging=NODE_WORK_CONVERGING,
                extend_below=extend_below)
    return None if out is None else out[0]


def milp_recompute(problem: Problem, cand, *, max_solves: int = MAX_SOLVES,
                   deadline: float | None = None) -> list:
    """The recompute of ``cand``'s layer split chosen by the integer program with the split fixed
    (a polish of the greedy :func:`autotune.tuner.fit.fit_recompute`; not a proof).

    Per mini-stage the layers of each recompute class are integers, a class with a workspace
    (full recompute) switches the mini-stage's backward workspace on (binary), head / tail
    workspaces are counted, and select-only and comm-only layers exclude each other, so the
    counts map back onto MindFormers' (recompute, select_recompute, select_comm_recompute):
    full = r, select = r + both + select-only, comm = r + both + comm-only (exact for one layer
    kind; with several kinds the cheapest is modelled, so the caller must re-score).

    Returns unscored :class:`~autotune.tuner.problem.Candidate` s, one per distinct solve answer
    (the last first; the work cap may stop the lazy loop before it converges, so the caller scores
    them all); empty when not applicable, when the program is over :data:`MAX_LP_CELLS` (a
    work cap) or when nothing fits the relaxed memory model.
    """
    V = cand.V
    out = _milp(problem, V, layouts=[cand], max_solves=max_solves, deadline=deadline,
                node_work=POLISH_WORK, fixed=np.asarray(cand.layers))
    if out is None:
        return []
    cls = allowed_classes(problem.kinds)
    res = []
    seen = set()
    for yf in reversed(out[1]):  # the last solve first: it priced the most paths
        y = np.rint(yf).astype(np.int64)  # [V, P, C] over allowed classes
        if y.tobytes() in seen:
            continue
        seen.add(y.tobytes())
        cnt = {c: (y[:, :, cls.index(c)] if c in cls else np.zeros_like(y[:, :, 0]))
               for c in (FULL, BOTH, SELECT, COMM)}
        rec = cnt[FULL]
        sel = rec + cnt[BOTH] + cnt[SELECT] if "select" in problem.kinds else np.zeros_like(rec)
        com = rec + cnt[BOTH] + cnt[COMM] if "comm" in problem.kinds else np.zeros_like(rec)
        res.append(Candidate(V, np.asarray(cand.layers).copy(), rec, sel, com,
                             origin=f"{cand.origin}+milp-recompute"))
    return res


def path_key(cf: np.ndarray, cb: np.ndarray, hops: float) -> bytes:
    """A path's identity in a program's family: its op counts [V, P] and hops, rounded to 1e-9."""
    return np.concatenate([cf.reshape(-1), cb.reshape(-1), [hops]]).round(9).tobytes()


class _Model:
    """The integer program of one (problem, V) (module docstring). Variables, in order: n [V·P]
    (layers per mini-stage j = v·P + p), y [V·P·C] (layers of each allowed class), with a pinned
    split (``fixed``) or ``workspace`` u (class c with a workspace present in j, binary) and w
    (workspace MiB of j), with a pinned split x (select-only 1 / comm-only 0 in j, binary), then T
    (the step-time bound, ms). Rows: the structure and memory rows, then one row per path of the
    family (lazily added)."""

    def __init__(self, problem: Problem, V: int, su: IntegerSetup, fixed: np.ndarray | None,
                 workspace: bool = False) -> None:
        """``workspace``: the bound's program with the workspace switches of a pinned split's
        (u, w: a mini-stage holding a full-recompute layer has that class's workspace during its
        backward; :data:`WORKSPACE_PHASE`); always on with ``fixed``."""
        self.problem, self.V, self.su = problem, V, su
        lay = su.layer
        P, N = problem.P, problem.N
        self.C = C = lay.act_mib.size
        self.lo, self.hi = problem.bounds(V)
        self.exact = exact = fixed is not None
        self.nn = nn = V * P
        # layers of each kind per mini-stage (the static MiB of a model of several kinds)
        self.kinds = kind_windows(problem, V, fixed) if np.isfinite(problem.hbm_mib) or not exact else None
        # typed classes (the bound only): y per (mini-stage, kind its window holds, class) with
        # that kind's forward / backward ms, activation, static change and replay, instead of the
        # cheapest kind's; the pinned split's polish keeps one slot per mini-stage
        self.typed = self.kinds is not None and not exact
        K = 1 if self.kinds is None else self.kinds.counts.size
        self.slot_layers = typed_layers(problem) if self.typed else (lay,)
        # (a window of no position, where the others' lower bounds use every layer: one slot, n = 0)
        self.slots = [([k for k in range(K) if self.kinds.window[j, k] > 0] or [0]) if self.typed else [0]
                      for j in range(nn)]
        # a mini-stage whose window holds one kind prices its n with that kind (x[j, k] = n[j]);
        # only the mixed ones price x
        self.mixed = np.array([len(s) > 1 for s in self.slots])
        one = [self.slot_layers[sl[0]] for sl in self.slots]
        self.n_fwd_ms = np.where(self.mixed, 0.0, [t.fwd_ms for t in one])  # ms per layer on n [V·P]
        self.n_bwd_ms = np.where(self.mixed, 0.0, [t.bwd_ms for t in one])
        self.kind_fwd_ms = np.array([t.fwd_ms for t in self.slot_layers])  # per slot layer [K] (ms)
        self.kind_bwd_ms = np.array([t.bwd_ms for t in self.slot_layers])
        self.ny = ny = C * sum(len(s) for s in self.slots)
        self.yoff = nn + C * np.concatenate([[0], np.cumsum([len(s) for s in self.slots])[:-1]]).astype(np.int64)
        self.cls = cls = allowed_classes(problem.kinds)
        self.wcls = [c for c in range(C) if lay.ws_mib[c] > 0] if exact or workspace else []
        self.excl = exact and SELECT in cls and COMM in cls
        self.nu = nn * len(self.wcls)    # binary: class c present in mini-stage j (its workspace is on)
        self.nw = nn if self.wcls else 0  # workspace MiB of mini-stage j
        self.nx = nn if self.excl else 0  # binary: select-only (1) or comm-only (0) in mini-stage j
        self.iu, self.iw, self.ix = nn + ny, nn + ny + self.nu, nn + ny + self.nu + self.nw
        self.ik = self.ix + self.nx
        self.nk = 0 if self.kinds is None else nn * K
        self.nvar = self.ik + self.nk + 1
        self.iT = self.nvar - 1
        self.cap_j = (np.asarray(fixed) if exact else np.minimum(self.hi, N)).reshape(-1).astype(np.float64)
        self.rows: list[np.ndarray] = []
        self.rlo: list[float] = []
        self.rhi: list[float] = []
        self.seen: set[bytes] = set()
        self.path_rows: list[np.ndarray] = []
        self.path_hi: list[float] = []
        self.path_counts: list[tuple[np.ndarray, np.ndarray, float]] = []  # (cf, cb, hops) per path row
        self._structure_rows()
        if self.kinds is not None:
            self._kind_rows()
        if np.isfinite(problem.hbm_mib):
            self._memory_rows()

    def y_index(self, j: int, s: int, c: int) -> int:
        """Variable index of class c on slot s (the s-th kind of :attr:`slots` [j]) of mini-stage j."""
        return int(self.yoff[j]) + s * self.C + c

    def slot_layer(self, j: int, s: int) -> RelaxedLayer:
        """The layer (relaxed or one kind's) that slot s of mini-stage j prices."""
        return self.slot_layers[self.slots[j][s]]

    def add_row(self, r: np.ndarray, a: float, b: float) -> None:
        self.rows.append(r)
        self.rlo.append(a)
        self.rhi.append(b)

    def _structure_rows(self) -> None:
        """Σ n = N; Σ_c y = n per mini-stage; with the workspace switches (a pinned split, or
        ``workspace``) y_c <= n·u_c (y_c summed over kind slots) and w >= W_c·u_c (W_c: the
        cheapest kind's workspace of class c); with a pinned split select-only / comm-only
        exclusion."""
        nn, C, nvar, cap_j = self.nn, self.C, self.nvar, self.cap_j
        wsmin = self.su.layer.ws_mib  # [C] MiB, cheapest kind per class
        r = np.zeros(nvar)
        r[:nn] = 1.0
        self.add_row(r, self.problem.N, self.problem.N)
        for j in range(nn):  # Σ_c y = n, or per kind slot Σ_c y = x[j, k]
            for s, k in enumerate(self.slots[j]):
                r = np.zeros(nvar)
                if self.mixed[j]:
                    r[self.ik + j * self.kinds.counts.size + k] = -1.0
                else:
                    r[j] = -1.0
                r[self.y_index(j, s, 0):self.y_index(j, s, C)] = 1.0
                self.add_row(r, 0.0, 0.0)
        for j in range(nn):
            for t, c in enumerate(self.wcls):
                r = np.zeros(nvar)
                for s in range(len(self.slots[j])):
                    r[self.y_index(j, s, c)] = 1.0
                r[self.iu + j * len(self.wcls) + t] = -cap_j[j]
                self.add_row(r, -np.inf, 0.0)  # y_c <= n·u_c
                r = np.zeros(nvar)
                r[self.iw + j] = 1.0
                r[self.iu + j * len(self.wcls) + t] = -float(wsmin[c])
                self.add_row(r, 0.0, np.inf)  # ws >= W_c·u_c
            if self.excl:
                r = np.zeros(nvar)
                r[self.y_index(j, 0, self.cls.index(SELECT))] = 1.0
                r[self.ix + j] = -cap_j[j]
                self.add_row(r, -np.inf, 0.0)  # select-only <= n·x
                r = np.zeros(nvar)
                r[self.y_index(j, 0, self.cls.index(COMM))] = 1.0
                r[self.ix + j] = cap_j[j]
                self.add_row(r, -np.inf, cap_j[j])  # comm-only <= n·(1 - x)

    def _kind_rows(self) -> None:
        """With several layer kinds: Σ_k x[j, k] = n[j] per mini-stage and Σ_j x[j, k] = the
        model's layers of kind k (x[j, k] within its window,
        :func:`~autotune.tuner.bounds._relax.kind_windows`)."""
        counts, nn = self.kinds.counts, self.nn
        K = counts.size
        for j in range(nn):
            r = np.zeros(self.nvar)
            r[self.ik + j * K:self.ik + (j + 1) * K] = 1.0
            r[j] = -1.0
            self.add_row(r, 0.0, 0.0)
        for k in range(K):
            r = np.zeros(self.nvar)
            r[self.ik + k:self.ik + nn * K:K] = 1.0
            self.add_row(r, float(counts[k]), float(counts[k]))

    def _memory_rows(self) -> None:
        """Per stage and undominated live-count vector: static + activation (+ the workspace of
        the chunk whose backward runs) <= HBM."""
        problem, su, V = self.problem, self.su, self.V
        cs, lay, P, C = su.cs, su.layer, problem.P, self.C
        for p in range(P):
            # after a forward: live activations; during a backward of chunk ch: + its workspace
            groups = [(np.asarray(cs.mem_fwd[p]).reshape(-1, V), None)]
            vecs, chunks = cs.mem_bwd[p]
            if vecs.size:
                groups += [(vecs[chunks == ch].reshape(-1, V), int(ch)) for ch in np.unique(chunks)]
            for vv, ch in groups:
                if vv.size == 0:
                    continue
                for w in undominated(vv.astype(np.float64)) / cs.k:
                    r = np.zeros(self.nvar)
                    for v in range(V):
                        j = v * P + p
                        if self.kinds is None:
                            r[j] = lay.static_mib
                        else:  # each kind's static MiB on its layers of the mini-stage
                            K = self.kinds.counts.size
                            r[self.ik + j * K:self.ik + (j + 1) * K] = self.kinds.static_mib
                        for t in range(len(self.slots[j])):
                            sl = self.slot_layer(j, t)
                            r[self.y_index(j, t, 0):self.y_index(j, t, C)] = w[v] * sl.act_mib + sl.sdelta_mib
                    room = hbm_cap(problem.hbm_mib) - su.const_static_mib[p] - float(w @ su.end_act_mib[:, p])
                    if ch is not None:
                        if self.nw:
                            r[self.iw + ch * P + p] = 1.0
                        else:
                            room -= float(su.end_ws_mib[ch, p])  # head / tail workspace (a max, so >= it)
                    self.add_row(r, -np.inf, room)

    def add_path(self, cf: np.ndarray, cb: np.ndarray, hops: float) -> bool:
        """Add the row "path length <= T" (op counts [V, P], hops); False when already there."""
        key = path_key(cf, cb, hops)
        if key in self.seen:
            return False
        self.seen.add(key)
        r, hi = self.path_row(cf, cb, hops)
        self.path_counts.append((cf, cb, hops))
        self.path_rows.append(r)
        self.path_hi.append(hi)
        return True

    def path_row(self, cf: np.ndarray, cb: np.ndarray, hops: float) -> tuple[np.ndarray, float]:
        """The row "path length <= T" of op counts cf, cb [V, P] and hops: (coefficients over the
        variables, float [nvar], with -1 on T; upper value, ms)."""
        su, nn, C = self.su, self.nn, self.C
        r = np.zeros(self.nvar)
        cfj, cbj = cf.reshape(-1), cb.reshape(-1)
        r[:nn] = cfj * self.n_fwd_ms + cbj * self.n_bwd_ms
        if self.mixed.any():  # each kind's forward / backward ms on its layers of a mixed mini-stage
            K = self.kinds.counts.size
            per = cfj[:, None] * self.kind_fwd_ms + cbj[:, None] * self.kind_bwd_ms  # [V·P, K]
            r[self.ik:self.ik + nn * K] = (per * self.mixed[:, None]).reshape(-1)
        for j in range(nn):
            for t in range(len(self.slots[j])):
                r[self.y_index(j, t, 0):self.y_index(j, t, C)] = cbj[j] * self.slot_layer(j, t).extra_ms
        r[self.iT] = -1.0
        return r, -float((cf * su.end_fwd_ms).sum() + (cb * su.end_bwd_ms).sum() + hops * su.p2p_ms)

    def layout_path(self, layers: np.ndarray):
        """The longest path (:class:`~autotune.tuner.bounds._paths.CriticalPath`) of a layer
        split int [V, P] under the program's durations without replay (the path is what matters,
        not its length here)."""
        n = np.asarray(layers, dtype=np.float64)
        y = np.zeros(n.shape + (self.C,))
        y[..., 0] = n
        return critical_path(self.su.cs, *self.durations(n, y), self.su.p2p_ms)

    def durations(self, n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Relaxed forward / backward ms [V, P] of layer counts n [V, P] and classes y [V, P, C]
        (the cheapest kind's times)."""
        lay, su = self.su.layer, self.su
        return n * lay.fwd_ms + su.end_fwd_ms, n * lay.bwd_ms + (y * lay.extra_ms).sum(axis=-1) + su.end_bwd_ms

    def solution(self, x: np.ndarray, whole: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Of a solution vector (``whole``: an integer solve's, its counts rounded): layer counts
        float [V, P], class counts float [V, P, C] (summed over kind slots) and the forward /
        backward ms [V, P] the program prices."""
        V, P, C, nn = self.V, self.problem.P, self.C, self.nn
        x = x.copy()
        if whole:
            x[:nn] = np.rint(x[:nn])
            x[self.ik:self.ik + self.nk] = np.rint(x[self.ik:self.ik + self.nk])
        n = x[:nn].reshape(V, P)
        if not self.typed:
            y = np.maximum(x[nn:nn + self.ny].reshape(V, P, C), 0.0)
            return (n, y, *self.durations(n, y))
        y = np.maximum(x[nn:nn + self.ny], 0.0)
        yc = np.zeros((nn, C))
        f = x[:nn] * self.n_fwd_ms
        b = x[:nn] * self.n_bwd_ms
        for j in range(nn):
            for t in range(len(self.slots[j])):
                yj = y[self.y_index(j, t, 0) - nn:self.y_index(j, t, C) - nn]
                yc[j] += yj
                b[j] += float(yj @ self.slot_layer(j, t).extra_ms)
        if self.mixed.any():
            K = self.kinds.counts.size
            xk = np.maximum(x[self.ik:self.ik + nn * K].reshape(nn, K), 0.0) * self.mixed[:, None]
            f += xk @ self.kind_fwd_ms
            b += xk @ self.kind_bwd_ms
        return (n, yc.reshape(V, P, C), f.reshape(V, P) + self.su.end_fwd_ms,
                b.reshape(V, P) + self.su.end_bwd_ms)

    def variable_bounds(self, lower_ms: float | None, upper_ms: float | None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(integrality, lower, upper) per variable; T within [lower_ms, upper_ms] when given."""
        nn, ny, nvar, N = self.nn, self.ny, self.nvar, self.problem.N
        iu, iw, ix, nu, nw, nx = self.iu, self.iw, self.ix, self.nu, self.nw, self.nx
        integ = np.zeros(nvar)
        integ[:nn] = 1
        vlo = np.zeros(nvar)
        vhi = np.full(nvar, np.inf)
        vlo[:nn] = self.lo.reshape(-1)
        vhi[:nn] = np.minimum(self.hi, N).reshape(-1)
        vhi[nn:nn + ny] = N
        if self.kinds is not None:
            vhi[self.ik:self.ik + self.nk] = self.kinds.window.reshape(-1)  # the window's layers of kind k
            integ[self.ik:self.ik + self.nk] = 1  # whole layers of each kind (Σ_k x = n, also whole)
        integ[iu:iu + nu] = 1  # the workspace switches (binary) and MiB (at least the head / tail's)
        vhi[iu:iu + nu] = 1
        vlo[iw:iw + nw] = self.su.end_ws_mib.reshape(-1)[:nw]
        if self.exact:
            vlo[:nn] = vhi[:nn] = self.cap_j
            integ[nn:nn + ny] = 1
            integ[ix:ix + nx] = 1
            vhi[ix:ix + nx] = 1
        if lower_ms is not None and np.isfinite(lower_ms):
            vlo[self.iT] = lower_ms
        if upper_ms is not None and np.isfinite(upper_ms):
            vhi[self.iT] = upper_ms
        return integ, vlo, vhi

    def constraints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row of the program so far, structure and memory rows then the paths: (A float
        [rows, nvar], lower and upper values float [rows])."""
        return (np.asarray(self.rows + self.path_rows), np.asarray(self.rlo + [-np.inf] * len(self.path_rows)),
                np.asarray(self.rhi + self.path_hi))

    def solve(self, bounds: tuple[np.ndarray, np.ndarray, np.ndarray], work_left: float,
              deadline: float | None) -> tuple[Any, float]:
        """One HiGHS solve with the current rows (node limit from ``work_left``, see
        :data:`NODE_WORK`); returns (scipy's result, the work units it used)."""
        # scipy: a heavy import (~0.6 s), needed only when the integer program runs
        from scipy.optimize import Bounds, LinearConstraint, milp  # noqa: PLC0415
        from scipy.sparse import csr_matrix  # noqa: PLC0415

        integ, vlo, vhi = bounds
        A, lo, hi = self.constraints()
        cons = LinearConstraint(csr_matrix(A), lo, hi)
        size = float(self.nvar * (len(self.rows) + len(self.path_rows))) ** 2
        # presolve off for the bound's solves: HiGHS's MIP presolve (scipy 1.17's) can report a
        # feasible but suboptimal point as optimal (ERGO-Code/HiGHS#3094, #3043); on a random 5-layer
        # pp 2 × vpp 2 problem it proved 59.26 ms where the program held a point at 58.57 and the
        # enumerated optimum was 58.89 (MIP_PRESOLVE). The pinned split's polish is not a proof.
        opts = {"node_limit": max(50, int(work_left / size)), "mip_rel_gap": 1e-6, "disp": False,
                "presolve": self.exact and MIP_PRESOLVE}
        if deadline is not None:  # what is left of it (HiGHS returns its dual bound / best point)
            opts["time_limit"] = max(0.05, deadline - time.monotonic())
        obj = np.zeros(self.nvar)
        obj[self.iT] = 1.0
        with quiet_native_stdout():
            res = milp(obj, integrality=integ, bounds=Bounds(vlo, vhi), constraints=cons, options=opts)
        return res, (int(getattr(res, "mip_node_count", 0) or 0) + 1) * size

    def anticipate(self, split: np.ndarray, y: np.ndarray, fx: np.ndarray, bx: np.ndarray, fun: float) -> bool:
        """Add the longest paths of the minimiser's single-layer moves that the minimiser violates
        too (skipped when that would walk more than :data:`NEIGHBOUR_OPS` ops, e.g. 256
        micro-batches); True when one was new."""
        V, P, nn, cs, p2p, lay = self.V, self.problem.P, self.nn, self.su.cs, self.su.p2p_ms, self.su.layer
        flo, fhi = self.lo.reshape(-1), self.hi.reshape(-1)
        flat = split.reshape(-1)
        added = False
        for a in (range(nn) if cs.num_ops * nn * (nn - 1) <= NEIGHBOUR_OPS else ()):
            if flat[a] - 1 < flo[a]:
                continue
            for b in range(nn):
                if a == b or flat[b] + 1 > fhi[b]:
                    continue
                if self.typed:  # the move shifts one (cheapest-kind) layer's times
                    f2, b2 = fx.reshape(-1).copy(), bx.reshape(-1).copy()
                    f2[a] -= lay.fwd_ms
                    f2[b] += lay.fwd_ms
                    b2[a] -= lay.bwd_ms
                    b2[b] += lay.bwd_ms
                    c2 = critical_path(cs, f2.reshape(V, P), b2.reshape(V, P), p2p)
                else:
                    n2 = flat.astype(np.float64)
                    n2[a] -= 1
                    n2[b] += 1
                    c2 = critical_path(cs, *self.durations(n2.reshape(V, P), y), p2p)
                if (c2.cf * fx).sum() + (c2.cb * bx).sum() + c2.hops * p2p > fun * (1 + 1e-7):
                    added |= self.add_path(c2.cf, c2.cb, c2.hops)  # violated at the minimiser too
        return added


def _milp(problem: Problem, V: int, *, layouts: list | None, lower_ms: float | None = None,
          upper_ms: float | None = None, node_work: float, max_solves: int, deadline: float | None,
          fixed: np.ndarray | None = None, lp_rounds: int | None = None,
          converging: float = 1.0, extend_below: float | None = None
          ) -> tuple[MilpBound, list[np.ndarray]] | None:
    """The lazy loop of :func:`milp_bound`; with ``fixed`` (int [V, P]) the split is pinned and
    the recompute classes are modelled exactly (see :func:`milp_recompute`). While every solve
    so far reached its optimum, and the bound is below ``extend_below`` (when given), the work
    cap is ``converging`` × ``node_work`` (:data:`NODE_WORK_CONVERGING`). Returns (result, every
    solve's class counts float [V, P, C], in solve order)."""
    su = integer_setup(problem, V)
    if su is None:
        return None
    model = _Model(problem, V, su, fixed)
    C, cs = model.C, su.cs
    counts = one_stay_counts(cs, deadline)
    if counts is None:
        return None
    t0 = time.monotonic()
    for p, stage_rows in enumerate(counts):
        if cannot_finish(t0, p, len(counts), deadline):  # the set-up proves nothing until it ends
            return None
        for cf, cb, hops in stage_rows:
            model.add_path(cf, cb, hops)
    for c in layouts or []:
        if c.V == V:
            cp = model.layout_path(c.layers)
            model.add_path(cp.cf, cp.cb, cp.hops)
    # the cap counts the program without its kind variables and rows (one class slot per
    # mini-stage), as measured when it was set; the node limit counts them (Model.solve)
    extra_slots = sum(len(s) for s in model.slots) - model.nn
    kind_rows = 0 if model.kinds is None else model.nn + model.kinds.counts.size + extra_slots
    cells = (model.nvar - model.nk - extra_slots * C) * (len(model.rows) - kind_rows + len(model.path_rows))
    if cells > MAX_LP_CELLS:
        return None  # a work cap: too large a program for the node limit to bound (MAX_LP_CELLS)
    # lower_ms is not T's lower bound in the program: every node whose LP value is below it would
    # read lower_ms, and HiGHS's best-bound search could no longer tell the nodes apart (pp4 vpp3
    # m8, 32 TeleChat2 layers, from the first pass's 4,221.5 ms: 4,317.6 ms with it in the
    # program, 4,351.5 ms without, same node cap); the result is max(lower_ms, dual bound)
    bounds = model.variable_bounds(None, upper_ms)
    has_upper = upper_ms is not None and np.isfinite(upper_ms)
    st = _LoopState(best=float(lower_ms) if lower_ms is not None and np.isfinite(lower_ms) else 0.0,
                    limit=float(node_work))
    if not model.exact:
        lp = _lp_paths(model, bounds, LP_ROUNDS if lp_rounds is None else lp_rounds, deadline)
        if lp is None:  # the linear relaxation is infeasible: so is the program
            return MilpBound(float(upper_ms) if has_upper else float("inf"), None, len(model.path_rows), 0,
                             True), st.all_y
        st.best = max(st.best, lp)
    infeasible = _lazy_loop(model, bounds, st, node_work=node_work, max_solves=max_solves, deadline=deadline,
                            converging=converging, extend_below=extend_below)
    if (WORKSPACE_PHASE and not infeasible and not model.exact and (st.converged or st.plateau >= PLATEAU_SOLVES)
            and st.finished
            and np.isfinite(problem.hbm_mib) and (su.layer.ws_mib > 0).any()):
        # the relaxed program is solved: go on with the workspace switches (WORKSPACE_PHASE),
        # unless its optimum already holds with them
        ws_model = _Model(problem, V, su, None, workspace=True)
        for cf, cb, hops in model.path_counts:
            ws_model.add_path(cf, cb, hops)
        if not _holds_with_workspace(model, ws_model, st.x):
            model, st.converged, st.plateau, st.last_fun = ws_model, False, 0, None
            st.work, st.limit = 0.0, converging * float(node_work)  # a work cap of its own
            infeasible = _lazy_loop(model, model.variable_bounds(None, upper_ms), st, node_work=node_work,
                                    max_solves=max_solves, deadline=deadline, converging=converging,
                                    extend_below=extend_below)
    if infeasible:  # nothing fits, or nothing beats upper_ms
        return MilpBound(float(upper_ms) if has_upper else float("inf"), st.split,
                         len(model.path_rows), st.solves, True), st.all_y
    return MilpBound(st.best, st.split, len(model.path_rows), st.solves, st.converged), st.all_y


def _holds_with_workspace(model: _Model, ws_model: _Model, x: np.ndarray | None) -> bool:
    """Whether the optimum ``x`` of ``model`` (a converged program without workspace switches)
    is also a point of ``ws_model`` (the same program and family with them), its switches on
    where a class with a workspace has layers: then the workspace phase would end at the same
    value (the optimum of a tighter program that holds the other's optimum), so it is skipped.
    Within 1e-6 (relative) of each row's bound, HiGHS's feasibility tolerance."""
    if x is None:
        return False
    x2 = np.zeros(ws_model.nvar)
    head = model.nn + model.ny  # n and y: the same places in both
    x2[:head] = x[:head]
    x2[ws_model.ik:ws_model.ik + ws_model.nk] = x[model.ik:model.ik + model.nk]
    x2[ws_model.iT] = x[model.iT]
    nw, W = len(ws_model.wcls), ws_model.su.layer.ws_mib
    ws = ws_model.su.end_ws_mib.reshape(-1).astype(np.float64).copy()
    for j in range(ws_model.nn):
        for t, c in enumerate(ws_model.wcls):
            on = sum(x2[ws_model.y_index(j, s, c)] for s in range(len(ws_model.slots[j]))) > 1e-6
            x2[ws_model.iu + j * nw + t] = float(on)
            ws[j] = max(ws[j], float(W[c]) * on)
    x2[ws_model.iw:ws_model.iw + ws_model.nw] = ws[:ws_model.nw]
    A, lo, hi = ws_model.constraints()
    v = A @ x2
    tol = 1e-6 * np.maximum(1.0, np.abs(np.where(np.isfinite(hi), hi, lo)))
    return bool(np.all(v >= lo - tol) and np.all(v <= hi + tol))


@dataclass
class _LoopState:
    """What the lazy loop of :func:`_milp` carries from one program to the next: the best proof
    (ms), the last minimiser's split, solves and node work so far, the work cap, whether every
    solve finished and whether the last one converged, and every solve's class counts."""

    best: float
    limit: float
    split: np.ndarray | None = None
    solves: int = 0
    work: float = 0.0
    finished: bool = True
    converged: bool = False
    all_y: list[np.ndarray] = field(default_factory=list)
    x: np.ndarray | None = None  # the last solve's solution vector
    plateau: int = 0  # finished solves in a row on a plateau (PLATEAU_SOLVES)
    last_fun: float | None = None  # the last finished solve's optimum (ms)


def _lazy_loop(model: _Model, bounds: tuple[np.ndarray, np.ndarray, np.ndarray], st: _LoopState, *,
               node_work: float, max_solves: int, deadline: float | None, converging: float,
               extend_below: float | None) -> bool:
    """Solve, add the minimiser's longest path (and its moves'), solve again (module docstring),
    within ``st``'s work and solves; updates ``st``. True when a solve proved the program
    infeasible."""
    cs, p2p = model.su.cs, model.su.p2p_ms
    while st.solves < max_solves and st.work < st.limit:
        if deadline is not None and time.monotonic() > deadline:
            break
        res, used = model.solve(bounds, st.limit - st.work, deadline)
        st.solves += 1
        st.work += used
        # a finished solve (status 0) proves its family's optimum; while every solve has, the cap
        # is the converging one; the first cut by its node limit (or the deadline) ends that
        st.finished = st.finished and res.status == 0
        if res.status == 2:  # infeasible: nothing fits, or nothing beats upper_ms
            return True
        dual = getattr(res, "mip_dual_bound", None)
        if res.status == 0 and res.fun is not None:
            dual = res.fun if dual is None else min(float(res.fun), float(dual))
        if dual is not None and np.isfinite(dual):
            # HiGHS proves within its feasibility tolerances (1e-6): keep that much below
            st.best = max(st.best, highs_proven(dual))
        extend = st.finished and (extend_below is None or st.best < extend_below)
        st.limit = float(node_work) * (converging if extend else 1.0)
        if res.x is None:
            break
        st.x = np.asarray(res.x, dtype=np.float64)
        n, y, fx, bx = model.solution(res.x, whole=True)
        st.all_y.append(y)
        st.split = np.rint(n).astype(np.int64)
        cp = critical_path(cs, fx, bx, p2p)
        if res.status == 0 and cp.length <= float(res.fun) * (1 + 1e-7) + 1e-9:
            st.converged = True
            break
        fun = float(res.fun)
        # phase 1 only (no workspace switches: neither a pinned split nor the workspace phase)
        flat = (not model.wcls and res.status == 0 and st.last_fun is not None and fun <= st.last_fun * (1 + 1e-9)
                and cp.length <= fun * (1 + PLATEAU_TOL))
        st.plateau, st.last_fun = (st.plateau + 1 if flat else 0), (fun if res.status == 0 else None)
        if st.plateau >= PLATEAU_SOLVES:
            break  # solved but for a plateau of minimisers: on to the workspace phase (PLATEAU_SOLVES)
        added = model.add_path(cp.cf, cp.cb, cp.hops)
        if model.exact:  # a pinned split has no moves to anticipate
            if not added:
                break
            continue
        if st.solves >= max_solves or st.work >= st.limit:
            break  # no solve left to use new paths
        added |= model.anticipate(st.split, y, fx, bx, float(res.fun))
        if not added:
            break
    return False


def _lp_paths(model: _Model, bounds: tuple[np.ndarray, np.ndarray, np.ndarray], rounds: int,
              deadline: float | None) -> float | None:
    """Path generation on the linear relaxation (layer counts fractional) before the integer
    solves: each LP takes milliseconds where an integer solve over a small family spends
    thousands of nodes on a minimiser that the next paths cut off. Any chain of the dependency
    graph is a path whatever durations found it, so the longest path of the LP minimiser's
    (fractional) durations is a valid row. Returns the last LP value less its safety margin
    (:func:`~autotune.tuner.bounds._base.highs_proven`; a lower bound of the integer program,
    hence a proof), 0.0 when no LP finished, None when the LP is infeasible (then so is the
    integer program)."""
    integ, vlo, vhi = bounds
    cs, p2p = model.su.cs, model.su.p2p_ms
    best = 0.0
    for _ in range(rounds):
        if deadline is not None and time.monotonic() > deadline:
            break
        res, _used = model.solve((np.zeros_like(integ), vlo, vhi), 0.0, deadline)  # an LP: no nodes
        if res.status == 2:
            return None
        if res.status != 0 or res.x is None:
            break
        best = max(best, highs_proven(res.fun))
        cp = critical_path(cs, *model.solution(res.x)[2:], p2p)
        if cp.length <= float(res.fun) * (1 + 1e-7) + 1e-9 or not model.add_path(cp.cf, cp.cb, cp.hops):
            break
    return best


@dataclass(frozen=True)
class IntegerProgram:
    """:func:`milp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1, schedules with
    whole backward ops and chunk-major positions): the known layouts' critical paths seed its
    family, it starts at ``ctx.lower_ms`` and uses ``ctx.upper_ms`` as a cutoff; its split (the
    relaxed minimiser) is a seed."""

    name: str = "integer program"

    def applies(self, problem: Problem, V: int) -> bool:
        return integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        mb = milp_bound(problem, V, layouts=[c for c in ctx.layouts if c.V == V], lower_ms=ctx.lower_ms,
                        upper_ms=ctx.upper_ms, deadline=ctx.deadline, extend_below=ctx.others_ms)
        if mb is None:
            return None
        return BoundOutcome(mb.bound_ms, mb.split, {"solves": mb.solves, "paths": mb.paths})
