"""Recompute fits: the recompute counts that make a layer split fit the HBM budget (pure numpy, no
Optuna). A stage's peak depends only on its own column, so every fit works stage by stage.

A fit is a :class:`RecomputeFit` (``name``, ``memo_tag``, ``fit(problem, layers, stages=...)``):

- :class:`GreedyFit` (:func:`fit_recompute`): per over-budget stage, the single increment that fits
  at least extra time, else the best MiB saved per ms added, until it fits;
- :class:`ExactFit` (:func:`fit_exact`): the least (weighted) replay per stage that fits, over every
  recompute configuration of its chunks (:func:`edge_weighted_fit` gives interleaved layouts their
  edge-chunk weights).

:func:`fitted` turns splits into scored candidates with either fit; :func:`refit_touched` re-fits
only the stages a move touched, sharing every fitted column through the problem's fit cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.cost.dominance import pareto_mask, pareto_order, undominated
from autotune.cost.inputs import first_layers, stage_costs
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import compile_schedule, peak_activation, stage_peak_activation
from autotune.tuner.problem import REL_TOL, Candidate, Problem, even_layers, first_min, tie_key
from autotune.tuner.recompute import recompute_choices

_KIND_ATTR = {"full": 0, "select": 1, "comm": 2}


class Fitted(NamedTuple):
    """A fit's answer for a batch: recompute / select / comm counts int [B, V, P] and whether every
    stage of each row fits, bool [B]."""

    rec: np.ndarray
    sel: np.ndarray
    com: np.ndarray
    fits: np.ndarray


class PastDeadline(Exception):
    """Raised when a fit or a scan given a ``deadline`` (time.monotonic()) reaches it before
    finishing: the caller gets no result; entries already in the fit cache stay valid, and the cut
    scan is not memoised."""


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`PastDeadline` when ``deadline`` (time.monotonic(); None: none) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise PastDeadline


#: Near a deadline (less than :data:`NEAR_DEADLINE_S` left) the scans simulate this many layouts
#: at a time and check the clock between them (:func:`clock_block`); otherwise a batch at once.
#: The same step times either way (each layout's simulation is its own).
DEADLINE_BLOCK = 512
NEAR_DEADLINE_S = 5.0


def clock_block(n: int, deadline: float | None) -> int:
    """How many of ``n`` rows to simulate at a time (the result is >= 1): all ``n`` when there is
    no ``deadline`` (time.monotonic()) or it is more than :data:`NEAR_DEADLINE_S` away, else
    :data:`DEADLINE_BLOCK`. It does not check whether the deadline has passed
    (:func:`check_deadline` does)."""
    if deadline is None or deadline - time.monotonic() > NEAR_DEADLINE_S:
        return max(1, n)
    return DEADLINE_BLOCK


def with_deadline(fit: "RecomputeFit", deadline: float | None) -> "RecomputeFit":
    """``fit`` checking ``deadline`` (time.monotonic()) as it goes: an :class:`ExactFit` gets the
    deadline (the same recompute, or :class:`PastDeadline`; its greedy fallback checks it too); a
    :class:`GreedyFit`, or any fit when ``deadline`` is None, is returned unchanged. The scans
    (:func:`~autotune.tuner.moves.scan`, :class:`~autotune.tuner.moves.LazyScan`) apply it to
    the fit they are given."""
    if deadline is None or not isinstance(fit, ExactFit):
        return fit
    return dataclasses.replace(fit, deadline=deadline)


class RecomputeFit(Protocol):
    """A way to choose the recompute of layer splits (module docstring)."""

    name: str
    #: Distinguishes this fit's columns in a problem's fit cache (hashable).
    memo_tag: tuple

    def fit(self, problem: Problem, layers: np.ndarray, *, stages: np.ndarray | None = None,
            memo: dict | None = None) -> Fitted:
        """Recompute for splits ``layers`` int [B, V, P]; only the stages in ``stages`` (bool [B, P],
        default all) are fitted, the others get zeros. ``memo``: the problem's fit cache
        (:func:`fit_cache`) for a fit that keeps per-mini-stage work there."""


@dataclass(frozen=True)
class GreedyFit:
    """:func:`fit_recompute` from zero recompute."""

    name: str = "greedy"
    memo_tag: tuple = ()

    def fit(self, problem: Problem, layers: np.ndarray, *, stages: np.ndarray | None = None,
            memo: dict | None = None) -> Fitted:
        z = np.zeros_like(layers)
        return Fitted(*fit_recompute(problem, layers, z, z, z, stages=stages))


@dataclass(frozen=True)
class ExactFit:
    """:func:`fit_exact` with replay weights per chunk (``weights[v]``, None = 1: least stage
    time), its mini-stage fronts kept in the problem's fit cache; with ``deadline``
    (time.monotonic()) it raises :class:`PastDeadline` once that has passed (checked per stage; the
    fit's cache is not part of it, so it is the same fit with or without one)."""

    weights: tuple[float, ...] | None = None
    name: str = "exact"
    deadline: float | None = None

    @property
    def memo_tag(self) -> tuple:
        return ("exact",) if self.weights is None else (("exact", self.weights),)

    def fit(self, problem: Problem, layers: np.ndarray, *, stages: np.ndarray | None = None,
            memo: dict | None = None) -> Fitted:
        w = None if self.weights is None else np.asarray(self.weights, float)[:, None]
        return Fitted(*fit_exact(problem, layers, stages=stages, memo=memo, weights=w, deadline=self.deadline))


#: The default fit.
GREEDY = GreedyFit()
#: Replay weight of the first and last chunk in the exact fit that :func:`edge_weighted_fit` gives
#: the local search of interleaved layouts (the middle chunks weigh 1). With m = P the critical
#: path of 1F1B interleaved repeats one chunk's backward (often the last's) m - 1 times on one
#: stage; spending a stage's replay on its middle chunks gave the best local optima on TeleChat2
#: 96L pp8 (vpp3 6818.6 vs 6875.6 ms unweighted; vpp4 6573.9 vs 6606.5 ms).
EXACT_EDGE_WEIGHT = 1.1


def edge_weighted_fit(V: int) -> ExactFit:
    """The exact fit for V chunks with replay weights :data:`EXACT_EDGE_WEIGHT` on chunks 0 and
    V - 1, 1 elsewhere."""
    return ExactFit(tuple(EXACT_EDGE_WEIGHT if v in (0, V - 1) else 1.0 for v in range(V)))


def search_fit(V: int) -> ExactFit:
    """The fit the local searches and the kick search re-fit touched stages with: the
    edge-weighted exact fit (:func:`edge_weighted_fit`) for V > 1, the plain exact fit (least
    replay per stage) for V = 1, whose one chunk has no edge to weight.

    V = 1 used the greedy fit until issue 17's stay-family measurements: a descent with the exact
    fit from the answers of ``benchmarks/scaling.py``'s three V = 1 rows reached layouts faster than
    the answers and equal to their bounds (pp 64 × m 128 dense 26,931.4 -> 26,804.1 ms, MoE
    24,288.1 -> 24,111.1 ms, pp 16 × m 64 37,098.8 -> 37,077.6 ms: certified gaps 0.48 / 0.73 /
    0.06 % -> 0); the greedy fit takes a full-recompute step where cheaper select / comm steps
    fit (docs/search.md)."""
    return edge_weighted_fit(V) if V > 1 else ExactFit()


#: A problem's fit cache is cleared when it holds more fitted columns than this (bounds memory).
MEMO_MAX = 100_000


def fit_cache(problem: Problem) -> dict:
    """The fitted-column memo shared by every fit and local search on ``problem``: its
    ``fit_cache`` (the problem is frozen, so a fit is never reused for another budget, profile or
    schedule; V is in the keys), cleared first when it outgrew :data:`MEMO_MAX`."""
    if len(problem.fit_cache) > MEMO_MAX:
        problem.fit_cache.clear()
    return problem.fit_cache


def _positions(problem: Problem, V: int) -> np.ndarray | None:
    """Pipeline position [V, P] of each mini-stage as :meth:`Problem.costs` places them (V-shaped
    for zero_bubble_v); None for the default chunk-major order (the cost model's faster path)."""
    pos = get_schedule(problem.schedule).virtual_position(problem.P, V)
    return None if np.array_equal(pos, np.arange(V * problem.P).reshape(V, problem.P)) else pos


def _stage_time(problem: Problem, layers, rec, sel, com, pos: np.ndarray | None = None,
                only: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(peak [B, P] MiB, per-stage fwd+bwd [B, P] ms per micro-batch) for int [B, V, P] arrays.

    ``pos``: :func:`_positions` of this V (the schedule's placement, the one :meth:`Problem.evaluate`
    scores). ``only``: optional bool [B, P]: the peak of just these (row, stage) pairs is computed
    (the same values), the others are 0 (not computed), and so is the time — the greedy fit reads
    only its over-budget stages, a few of the P on a move's row (pp 32 × vpp 4 × m 256: the
    schedule's live-count rows made the full [B, P] peak ~80 % of the greedy's time; pp 8 × vpp 4
    × m 128 MoE: the costs of every stage were ~60 % of it, ~13 % of the pairs asked for;
    :func:`~autotune.cost.inputs.stage_costs` with ``at``)."""
    cs = compile_schedule(problem.schedule, problem.P, layers.shape[1], problem.m, problem.seq_split_num)
    if only is None:
        costs = stage_costs(problem.pa, layers, rec, sel, com, pos=pos)
        peak = costs.static_mib + peak_activation(cs, costs.act_mib, costs.ws_mib)
        return peak, (costs.fwd_ms + costs.bwd_ms).sum(axis=1)
    rows, stg = np.nonzero(only)
    costs = stage_costs(problem.pa, layers, rec, sel, com, pos=pos, at=(rows, stg))
    peak = np.zeros(only.shape)
    t = np.zeros(only.shape)
    for p in np.unique(stg):
        k = np.nonzero(stg == p)[0]
        peak[rows[k], p] = costs.static_mib[k, 0] + stage_peak_activation(
            cs, int(p), costs.act_mib[k, :, 0], costs.ws_mib[k, :, 0])
    t[rows, stg] = (costs.fwd_ms + costs.bwd_ms).sum(axis=1)[:, 0]
    return peak, t


#: Rows per batched simulation in :func:`fit_recompute`'s speculative rounds (a work cap).
SPEC_ROWS = 2048
#: Most greedy rounds one speculative block looks ahead.
SPEC_DEPTH = 64


def _variants(kinds: list[int], lay: np.ndarray, r: np.ndarray, s: np.ndarray, c: np.ndarray,
              over: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy's candidate increments of one state: (rec, sel, com) int [K, b, V, P], K =
    len(kinds)·V; variant j·V + v adds one layer of kind ``kinds[j]`` to chunk v of every stage in
    ``over`` (bool [b, P]); ``lay``, ``r``, ``s``, ``c`` int [b, V, P]."""
    b, V, P = lay.shape
    K = len(kinds) * V
    ar = np.arange(V)
    lt, rt, st, ct = (x.transpose(1, 0, 2) for x in (lay, r, s, c))  # V b P
    R, S, C = (np.broadcast_to(x, (K, b, V, P)).copy() for x in (r, s, c))
    # Fancy index [j·V + v, :, v, :] selects chunk v of variant j·V + v: shape [V, b, P].
    for j, k in enumerate(kinds):
        rows = j * V + ar
        if k == 0:
            R[rows, :, ar, :] = np.where(over, np.minimum(rt + 1, lt), rt)
        elif k == 1:
            S[rows, :, ar, :] = np.where(over, np.minimum(np.maximum(st, rt) + 1, lt), st)
        else:
            C[rows, :, ar, :] = np.where(over, np.minimum(np.maximum(ct, rt) + 1, lt), ct)
    return R, S, C



class _Speculation(NamedTuple):
    """D speculated greedy rounds of a block: the variants of each round (rec, sel, com int
    [K, b, V, P] per round), the variants that change something (``ks``, indices into K) and their
    simulated peak MiB and fwd+bwd ms, float [D, len(ks), b, P]."""

    Rs: list
    Ss: list
    Cs: list
    ks: np.ndarray
    vpeak: np.ndarray
    vt: np.ndarray


def _speculate(problem: Problem, kinds: list[int], lay: np.ndarray, r: np.ndarray, s: np.ndarray, c: np.ndarray,
               over: np.ndarray, g: np.ndarray, D: int, pos: np.ndarray | None) -> _Speculation:
    """The variants of the next D states of every stage, on the guess that each stage repeats its
    last increment ``g`` (int [b, P]), simulated at once (:func:`fit_recompute`)."""
    b, V, P = lay.shape
    K = len(kinds) * V
    bi, pi, ar = np.arange(b)[:, None], np.arange(P)[None, :], np.arange(V)
    Rs, Ss, Cs = [], [], []
    kept = np.zeros(K, dtype=bool)  # variants that change some stage at some depth
    for j in range(D):  # state j + 1 = the guessed variant of state j, for every stage
        R, S, C = _variants(kinds, lay, r, s, c, over)
        Rs.append(R), Ss.append(S), Cs.append(C)
        kept |= ((R != r) | (S != s) | (C != c)).any(axis=(1, 2, 3))
        if j < D - 1:
            gi = (g[:, None, :], bi[:, :, None], ar[None, :, None], pi[None])
            r, s, c = R[gi], S[gi], C[gi]
    # A variant that changes nothing saves nothing: never chosen, so it is not simulated.
    ks = np.nonzero(kept)[0]
    k2 = len(ks)
    n = D * k2 * b
    if n:
        vpeak, vt = _stage_time(problem, np.broadcast_to(lay, (D * k2, b, V, P)).reshape(n, V, P),
                                np.stack([x[ks] for x in Rs]).reshape(n, V, P),
                                np.stack([x[ks] for x in Ss]).reshape(n, V, P),
                                np.stack([x[ks] for x in Cs]).reshape(n, V, P), pos,
                                only=np.broadcast_to(over, (D * k2, b, P)).reshape(n, P))
    else:
        vpeak = vt = np.zeros(n)
    return _Speculation(Rs, Ss, Cs, ks, vpeak.reshape(D, k2, b, P), vt.reshape(D, k2, b, P))


@dataclass
class _GreedyState:
    """The true state of a block's stages during :func:`_replay`: recompute counts int [b, V, P],
    peak MiB and fwd+bwd ms [b, P], the increment each stage took last int [b, P]."""

    r: np.ndarray
    s: np.ndarray
    c: np.ndarray
    peak: np.ndarray
    t: np.ndarray
    g: np.ndarray


def _replay(spec: _Speculation, st: _GreedyState, over: np.ndarray, cap: float, idx: np.ndarray,
            mask: np.ndarray, rounds: np.ndarray, max_rounds: int) -> tuple[np.ndarray, int]:
    """Replay the greedy on the speculated numbers, round by round, updating ``st`` (and
    ``mask`` / ``rounds`` of rows ``idx`` in place); a stage stops where its choice departs from
    the guess. Returns (stages still on the guess after the last round, the last round)."""
    b, P = over.shape
    V = st.r.shape[1]
    ks, k2 = spec.ks, len(spec.ks)
    bi, pi, ar = np.arange(b)[:, None], np.arange(P)[None, :], np.arange(V)
    follow = over.copy()  # stages whose true state is still speculated state j
    j = 0
    for j in range(len(spec.Rs)):
        ov = follow & (st.peak > cap + 1e-9)
        if not ov.any():
            break
        if not k2:  # no increment changes any over-budget stage: all stuck
            sr, sp = np.nonzero(ov)
            mask[idx[sr], sp] = False
            break
        saved = st.peak[None] - spec.vpeak[j]           # K b P
        added = spec.vt[j] - st.t[None]
        useful = saved > 1e-9
        fits_now = useful & (spec.vpeak[j] <= cap + 1e-9)
        big = 1e30
        # Prefer an increment that fits with the least added time; else best MiB per ms.
        cost_fit = np.where(fits_now, added, big)
        ratio = np.where(useful, saved / np.maximum(added, 1e-9), -1.0)
        any_fit = fits_now.any(axis=0)
        choice = np.where(any_fit, first_min(cost_fit, axis=0), first_min(-ratio, axis=0))  # b P
        stuck = ov & ~useful.any(axis=0)
        apply = ov & ~stuck
        pick = np.where(apply, choice, 0)  # b P, among the simulated variants
        choice = ks[pick]  # ... and among all K
        # A stuck stage's column does not change, so it stays stuck: stop fitting it.
        sr, sp = np.nonzero(stuck)
        mask[idx[sr], sp] = False
        gi = (choice[:, None, :], bi[:, :, None], ar[None, :, None], pi[None])  # -> b V P
        a3 = apply[:, None, :]
        st.r = np.where(a3, spec.Rs[j][gi], st.r)
        st.s = np.where(a3, spec.Ss[j][gi], st.s)
        st.c = np.where(a3, spec.Cs[j][gi], st.c)
        # The new peak / time of a changed stage is its chosen variant's (already simulated).
        st.peak = np.where(apply, spec.vpeak[j][pick, bi, pi], st.peak)
        st.t = np.where(apply, spec.vt[j][pick, bi, pi], st.t)
        follow = apply & (choice == st.g) & (rounds[idx] + 1 < max_rounds)
        rounds[idx] += apply
        st.g = np.where(apply, choice, st.g)
    return follow, j


def fit_recompute(problem: Problem, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                  com: np.ndarray, *, max_rounds: int = 10_000,
                  stages: np.ndarray | None = None, deadline: float | None = None) -> tuple[np.ndarray, ...]:
    """Add recompute until every stage fits (see module docstring).

    Args:
        problem: the tuning problem (budget ``hbm_mib`` MiB, allowed ``kinds``).
        layers, rec, sel, com: int [B, V, P] layer counts and starting recompute counts.
        max_rounds: cap on greedy rounds (one increment per over-budget stage per round).
        stages: optional bool [B, P]: fit only these stages; the others keep their recompute
            (they are never treated as over budget). Default: every stage.
        deadline: optional time.monotonic() limit, checked every round (:class:`PastDeadline`).

    Returns (rec, sel, com int [B, V, P], fits [B] bool: every stage of the row, fitted or not, at
    or under the budget). Stages that cannot fit even with every allowed kind on every layer are
    left at their maximum.

    Each (row, stage) follows its own greedy path: a stage's peak depends only on its own column,
    and a stage over budget takes one increment per round until it fits or no increment helps.
    So finished rows drop out, a stage no increment helps is dropped for good, ``stages`` only
    skips work, and rounds are speculated: when few rows remain (long runs on one big chunk), a
    block simulates the variants of the next D states on the guess that each stage repeats its
    last increment, then replays the greedy on those numbers and stops each stage where its
    choice departs from the guess. A stage gets exactly the recompute of the plain round-by-round
    greedy over the whole batch (same simulations per stage state; only the batching differs).
    """
    rec, sel, com = rec.copy(), sel.copy(), com.copy()
    B, V, P = layers.shape
    kinds = [_KIND_ATTR[k] for k in problem.kinds]
    K = len(kinds) * V  # variants: one (kind, chunk) increment each
    cap = hbm_cap(problem.hbm_mib)
    pos = _positions(problem, V)
    mask = np.ones((B, P), dtype=bool) if stages is None else np.array(stages, dtype=bool)
    rounds = np.zeros((B, P), dtype=np.int64)  # increments taken per stage (its greedy round)
    guess = np.zeros((B, P), dtype=np.int64)   # variant each stage is expected to take next
    if K == 0:  # no recompute kind allowed (recompute_kinds: [], or full only with seq_split_num > 1)
        peak, _ = _stage_time(problem, layers, rec, sel, com, pos)
        return rec, sel, com, (peak <= cap + 1e-9).all(axis=1)
    peak, t = _stage_time(problem, layers, rec, sel, com, pos, only=mask)  # others: never over
    idx = np.arange(B)  # rows still being fitted
    grow = 1  # speculation depth that recent blocks earned
    while True:
        check_deadline(deadline)
        mask[idx] &= rounds[idx] < max_rounds
        over = (peak > cap + 1e-9) & mask[idx]
        live = over.any(axis=1)
        if not live.any():
            break
        if not live.all():
            idx, over, peak, t = idx[live], over[live], peak[live], t[live]
        D = int(max(1, min(SPEC_DEPTH, grow, SPEC_ROWS // (K * len(idx)))))
        spec = _speculate(problem, kinds, layers[idx], rec[idx], sel[idx], com[idx], over, guess[idx], D, pos)
        state = _GreedyState(rec[idx], sel[idx], com[idx], peak, t, guess[idx])
        follow, j = _replay(spec, state, over, cap, idx, mask, rounds, max_rounds)
        rec[idx], sel[idx], com[idx] = state.r, state.s, state.c
        peak, t = state.peak, state.t
        guess[idx] = state.g
        grow = 2 * D if follow.any() and j == D - 1 else max(1, D // 2)
    peak, _ = _stage_time(problem, layers, rec, sel, com, pos)
    return rec, sel, com, (peak <= cap + 1e-9).all(axis=1)



def fitted(problem: Problem, V: int, layers: np.ndarray, origin: str, *,
           fit: RecomputeFit = GREEDY) -> list[Candidate]:
    """Candidates for a batch of splits int [B, V, P] with ``fit``'s recompute, scored."""
    f = fit.fit(problem, layers, memo=fit_cache(problem))
    cands = [Candidate(V, layers[i], f.rec[i], f.sel[i], f.com[i], origin=origin) for i in range(layers.shape[0])]
    return problem.score(cands)


def refit_touched(problem: Problem, base: Candidate, splits: np.ndarray, memo: dict | None = None,
                  fit: RecomputeFit = GREEDY) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Recompute [B, V, P] for moves ``splits`` (int [B, V, P]) of ``base``: untouched stages keep
    ``base``'s, each touched stage is re-fitted from zero by ``fit``.

    A stage's peak and the fit's choices depend only on that stage's column (its layer counts
    and first-layer indices), so each distinct touched column is fitted once and shared by every
    move that produces it — the same result as fitting every move, with far fewer simulations
    (V·P distinct decremented / incremented columns instead of (V·P)² moves). Only the touched
    stages of a fitted row are fitted (``fit(stages=...)``).

    ``memo`` (optional, owned by the caller: :func:`fit_cache` of the problem) maps (V, stage,
    column bytes, first-layer indices bytes) + ``fit.memo_tag`` to the fitted (rec, sel, com)
    columns and persists across calls.
    """
    B, V, P = splits.shape
    memo = {} if memo is None else memo
    changed = (splits != base.layers[None]).any(axis=1)  # B P: stages touched
    keep = ~changed[:, None, :]
    rec = np.where(keep, base.rec[None], 0)
    sel = np.where(keep, base.sel[None], 0)
    com = np.where(keep, base.com[None], 0)
    # first-layer indices as the cost model fills pipeline positions (V-shaped for zero_bubble_v)
    starts = first_layers(splits, get_schedule(problem.schedule).virtual_position(P, V))
    todo = np.zeros((B, P), dtype=bool)  # (move, stage) fitted here: one per new column
    keys: dict[tuple, tuple[int, int]] = {}
    uses: list[tuple[int, int, tuple]] = []  # (move, stage, key) filled from the memo
    for b, p in zip(*np.nonzero(changed)):
        b, p = int(b), int(p)
        key = (V, p, splits[b, :, p].tobytes(), starts[b, :, p].tobytes()) + fit.memo_tag
        if key not in memo and key not in keys:
            keys[key] = (b, p)
            todo[b, p] = True
        uses.append((b, p, key))
    rows = np.nonzero(todo.any(axis=1))[0]
    if rows.size:
        f = fit.fit(problem, splits[rows], stages=todo[rows], memo=memo)
        at = {int(b): i for i, b in enumerate(rows)}
        for key, (b, p) in keys.items():
            i = at[b]
            memo[key] = (f.rec[i, :, p].copy(), f.sel[i, :, p].copy(), f.com[i, :, p].copy())
    for b, p, key in uses:
        rec[b, :, p], sel[b, :, p], com[b, :, p] = memo[key]
    return rec, sel, com


#: The exact fit enumerates every recompute configuration of a mini-stage (O(n³) for n layers);
#: a mini-stage with more configurations than this sends its stage to the greedy (a work cap).
EXACT_FIT_MAX_OPTS = 30_000
#: Most partial combinations (over a stage's chunks) the exact fit builds for one stage; a stage
#: that needs more goes to the greedy (a work cap).
EXACT_FIT_MAX_COMBOS = 400_000


def _stage_rows(problem: Problem, V: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stage the memory rows (Nu [R, V], Om [R, V]) of the schedule: the stage's activation
    peak is max_r Nu_r·act + Om_r·ws (act, ws [V] of its mini-stages; :func:`peak_activation`),
    rows dominated by another row dropped (act and ws are >= 0)."""
    cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
    out = []
    for p in range(problem.P):
        if cs.mem_split is not None:
            vec = cs.mem_split[p].astype(float)
            nu, om = vec[:, :V] / cs.k, vec[:, V:]
        else:
            f = cs.mem_fwd[p].astype(float).reshape(-1, V) / cs.k
            bv, bc = cs.mem_bwd[p]
            b = bv.astype(float).reshape(-1, V) / cs.k
            nu = np.concatenate([f, b])
            om = np.concatenate([np.zeros_like(f), np.eye(V)[np.asarray(bc, dtype=np.int64)].reshape(-1, V)])
        row = undominated(np.concatenate([nu, om], axis=1))
        out.append((row[:, :V], row[:, V:]))
    return out


def _option_costs(problem: Problem, layers: np.ndarray, starts: np.ndarray, groups: list, opts: list,
                  pos: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """(act, ws, replay, static delta vs option 0) [O] of every option of every group (key, b, v,
    p, k) of :func:`_frontiers`, options concatenated in group order.

    A mini-stage's costs depend only on its first layer, its layer count, its recompute counts and
    whether it holds the head or the tail, so each is priced on a three-column stand-in layout
    (V = 1: the layers before it, it, the layers after it; ``pos`` puts the head / tail on the
    mini-stage when the real one holds them) instead of the whole [V, P] layout: O·3 cells
    instead of O·V·P. The static delta of an option is its own mini-stage's (the stage's other
    mini-stages keep their layers). Falls back to the whole layout for P·V = 1."""
    V, P = layers.shape[1:]
    tot = sum(g[4] for g in groups)
    N = problem.N
    if V * P == 1:
        L = np.empty((tot, V, P), dtype=np.int64)
        R, S, C = (np.zeros((tot, V, P), dtype=np.int64) for _ in range(3))
        at = 0
        for (_, b, v, p, k), o in zip(groups, opts):
            L[at:at + k] = layers[b]
            R[at:at + k, v, p], S[at:at + k, v, p], C[at:at + k, v, p] = o.T
            at += k
        c = stage_costs(problem.pa, L, R, S, C, pos=pos)
        st = c.static_mib[:, 0]
        first = np.repeat(np.cumsum([0] + [g[4] for g in groups])[:-1], [g[4] for g in groups])
        return c.act_mib[:, 0, 0], c.ws_mib[:, 0, 0], c.recompute_ms[:, 0, 0], st - st[first]
    if pos is None:
        hv, hp, tv, tp = 0, 0, V - 1, P - 1
    else:
        hv, hp = (int(x) for x in np.argwhere(np.asarray(pos) == 0)[0])
        tv, tp = (int(x) for x in np.argwhere(np.asarray(pos) == V * P - 1)[0])
    # stand-in column 1 is the mini-stage; the head sits on position 0, the tail on position 2
    cat_pos = {"mid": None, "head": np.array([[1, 0, 2]]), "tail": np.array([[0, 2, 1]])}
    cats = []
    for _key, _b, v, p, _k in groups:
        cats.append("head" if (v, p) == (hv, hp) else "tail" if (v, p) == (tv, tp) else "mid")
    act, ws, rep, sd = (np.empty(tot) for _ in range(4))
    offs = np.cumsum([0] + [g[4] for g in groups])
    for cat, cp in cat_pos.items():
        sel_g = [i for i, c in enumerate(cats) if c == cat]
        if not sel_g:
            continue
        n_o = sum(groups[i][4] for i in sel_g)
        L = np.zeros((n_o, 1, 3), dtype=np.int64)
        R, S, C = (np.zeros((n_o, 1, 3), dtype=np.int64) for _ in range(3))
        rows, firsts = [], []
        at = 0
        for i in sel_g:
            _, b, v, p, k = groups[i]
            s0, n = int(starts[b, v, p]), int(layers[b, v, p])
            if cat == "head":
                L[at:at + k, 0] = (0, n, N - n)
            elif cat == "tail":
                L[at:at + k, 0] = (s0, n, 0)
            else:
                L[at:at + k, 0] = (s0, n, N - s0 - n)
            R[at:at + k, 0, 1], S[at:at + k, 0, 1], C[at:at + k, 0, 1] = opts[i].T
            rows.append(np.arange(offs[i], offs[i] + k))
            firsts.append(np.full(k, at))
            at += k
        c = stage_costs(problem.pa, L, R, S, C, pos=cp)
        idx, f0 = np.concatenate(rows), np.concatenate(firsts)
        act[idx], ws[idx], rep[idx] = c.act_mib[:, 0, 1], c.ws_mib[:, 0, 1], c.recompute_ms[:, 0, 1]
        st = c.static_mib[:, 1]
        sd[idx] = st - st[f0]  # option 0 of each group: no recompute
    return act, ws, rep, sd


def _digest(front: tuple) -> bytes:
    """A 16-byte digest of a :func:`_frontiers` entry's arrays (values, dtypes and shapes): equal
    digests stand for equal frontiers in :func:`fit_exact`'s stage memo."""
    h = hashlib.blake2b(digest_size=16)
    for x in front:
        x = np.ascontiguousarray(x)
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(x.tobytes())
    return h.digest()


def canon_starts(problem: Problem, layers: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """int [B, V, P]: for each mini-stage of ``layers`` (int [B, V, P]) whose first layers are
    ``starts`` (:func:`~autotune.cost.inputs.first_layers`), the least first-layer index at which
    the model's layers have the same kinds, in the same order, as the mini-stage's own (0 for
    every mini-stage of a single-kind model).

    Every per-layer cost of a profile is per kind (:class:`~autotune.cost.inputs.ProfileArrays`),
    so a mini-stage's recompute options and their costs depend on its layer count, its kind
    sequence and whether it holds the head or the tail, not on where it starts, up to the
    rounding of the cost model's prefix sums (a few ulps). The canonical start is a function of
    the mini-stage alone, not of which fits ran first."""
    memo = problem.fit_cache
    kinds = memo.get(("xkinds",))
    if kinds is None:
        kp = problem.pa.kind_prefix
        kinds = np.argmax(np.diff(kp, axis=1), axis=0) if kp.shape[1] > 1 else np.zeros(0, dtype=np.int64)
        memo[("xkinds",)] = kinds
    if kinds.size == 0 or (kinds == kinds[0]).all():
        return np.zeros_like(starts)
    out = np.zeros_like(starts)
    for n in np.unique(layers):
        n = int(n)
        if n == 0:
            continue
        canon = memo.get(("xcanon", n))
        if canon is None:  # per window of n layers: the first window with the same kinds
            win = np.lib.stride_tricks.sliding_window_view(kinds, n)
            _, first, inv = np.unique(win, axis=0, return_index=True, return_inverse=True)
            canon = memo[("xcanon", n)] = first[inv.reshape(-1)]
        at = layers == n
        out[at] = canon[starts[at]]
    return out


def _frontiers(problem: Problem, layers: np.ndarray, need: list[tuple[int, int, int]],
               memo: dict, pos: np.ndarray | None) -> None:
    """Fill ``memo`` with the undominated recompute options of mini-stages: for each (row b of
    ``layers`` int [B, V, P], chunk v, stage p) in ``need`` whose key is new, key ("xf", V, v, p,
    first layer, layers) -> (options int [F, 3] (rec, sel, com), memory rows' share c [F, R] MiB,
    replay [F] ms, static delta [F] MiB) or None when it has too many options. c_r = Nu_rv·act +
    Om_rv·ws + static delta (vs no recompute), so a stage fits iff static(no recompute) +
    Σ_v c_v <= budget on every row r; options dominated on (c, replay) are dropped.

    Which options are undominated is decided once per (V, v, p, layers, kind sequence), at the
    mini-stage's canonical start (:func:`canon_starts`), and kept under key ("xfi", V, v, p,
    canonical start, layers); every mini-stage then prices just those options at its own first
    layer, ordered by their replay there (ties: option order), as before. Pricing all options
    and filtering them is the costly part (~1 ms a mini-stage), and a layer move shifts the first
    layer of every mini-stage between the two it touches: on ``benchmarks/scaling.py``'s pp 32 ×
    vpp 4 dense problem the kick search's one scan filtered ~880 new (mini-stage, start) pairs,
    3.5 of its 5.1 CPU s. The options kept differ from a filter at the mini-stage's own start
    only where two options' costs tie to within rounding."""
    B, V, P = layers.shape
    starts = first_layers(layers, pos)
    canon = canon_starts(problem, layers, starts)
    rows = _stage_rows(problem, V)
    todo: dict[tuple, tuple[int, int, int]] = {}
    for b, v, p in need:
        key = ("xf", V, v, p, int(starts[b, v, p]), int(layers[b, v, p]))
        if key not in memo and key not in todo:
            todo[key] = (b, v, p)
    if not todo:
        return
    kept = {key: ("xfi", V, v, p, int(canon[b, v, p]), int(layers[b, v, p])) for key, (b, v, p) in todo.items()}
    # 1. the undominated options of each new canonical mini-stage, found at its canonical start
    firsts: dict[tuple, tuple[int, int, int]] = {}
    for key, (b, v, p) in todo.items():
        if kept[key] not in memo:
            firsts.setdefault(kept[key], (b, v, p))
    groups, opts = [], []
    for ikey, (b, v, p) in firsts.items():
        n = int(layers[b, v, p])
        if (n + 1) * (n + 2) * (n + 3) // 3 > EXACT_FIT_MAX_OPTS:
            memo[ikey] = None
            continue
        o = recompute_choices(n, problem.kinds)
        groups.append((ikey, b, v, p, len(o)))
        opts.append(o)
    if groups:
        act_all, ws_all, rep_all, sd_all = _option_costs(problem, layers, canon, groups, opts, pos)
        at = 0
        for ikey, _, v, p, k in groups:
            sl = slice(at, at + k)
            at += k
            memo[ikey] = _undominated_options(act_all[sl], ws_all[sl], rep_all[sl], sd_all[sl], *rows[p], v)
    # 2. every new mini-stage prices those options at its own first layer
    groups, opts = [], []
    for key, (b, v, p) in todo.items():
        idx = memo[kept[key]]
        if idx is None:
            memo[key] = None
            continue
        n = int(layers[b, v, p])
        groups.append((key, b, v, p, len(idx)))
        opts.append(recompute_choices(n, problem.kinds)[idx])
    if not groups:
        return
    act_all, ws_all, rep_all, sd_all = _option_costs(problem, layers, starts, groups, opts, pos)
    at = 0
    for (key, _, v, p, k), o in zip(groups, opts):
        sl = slice(at, at + k)
        at += k
        act, ws, rep, sd = act_all[sl], ws_all[sl], rep_all[sl], sd_all[sl]
        nu, om = rows[p]
        c = act[:, None] * nu[None, :, v] + ws[:, None] * om[None, :, v] + sd[:, None]
        i = np.argsort(rep, kind="stable")
        memo[key] = (o[i], c[i], rep[i], sd[i])
        memo[("xd",) + key] = _digest(memo[key])


def _undominated_options(act: np.ndarray, ws: np.ndarray, rep: np.ndarray, sd: np.ndarray,
                         nu: np.ndarray, om: np.ndarray, v: int) -> np.ndarray:
    """int [F]: the options (indices into [O], ascending) of a mini-stage of chunk v that no other
    option dominates on (share of every memory row of its stage, replay): act, ws, replay, static
    delta [O] of its options, its stage's memory rows Nu, Om [R, V] (:func:`_stage_rows`)."""
    k = len(act)
    c = act[:, None] * nu[None, :, v] + ws[:, None] * om[None, :, v] + sd[:, None]
    # cheap pre-filter on (act, ws, static delta, replay), which implies row dominance ...
    order = np.lexsort((act, rep, sd, ws))
    keep = np.zeros(k, dtype=bool)
    grp = np.stack([ws, sd], axis=1)[order]
    cuts = np.flatnonzero(np.concatenate([[True], (grp[1:] != grp[:-1]).any(axis=1)]))
    for a, b in zip(cuts, np.append(cuts[1:], k)):  # per (ws, sd) group: the (replay, act) front
        g = order[a:b]
        keep[g] = pareto_mask(np.stack([rep[g], act[g]], axis=1), tol=1e-12)
    idx = np.nonzero(keep)[0]
    # ... then the exact dominance on the stage's memory rows and replay
    return idx[pareto_mask(np.concatenate([c[idx], rep[idx, None]], axis=1))]


def _stage_combos(fr: list, room: float, w: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every combination of one option per chunk (``fr``: the chunks' :func:`_frontiers` entries)
    that fits: (option index per chunk int [S, V], Σ_v w_v·replay [S] ms, largest memory-row
    share [S] MiB); ``room`` = budget − static without recompute. None when a chunk has no
    frontier or the partial combinations exceed :data:`EXACT_FIT_MAX_COMBOS`. Partial
    combinations that cannot fit even with the least share of the remaining chunks are dropped
    as they are built."""
    if any(f is None for f in fr):
        return None
    V = len(fr)
    mins = np.array([f[1].min(axis=0) for f in fr])  # V R: least share of each row
    rest = np.concatenate([np.cumsum(mins[::-1], axis=0)[::-1], np.zeros((1, mins.shape[1]))])
    sc = fr[0][1]
    obj = w[0] * fr[0][2]
    idx = np.arange(len(sc))[:, None]
    ok = (sc + rest[1] <= room).all(axis=1)
    sc, obj, idx = sc[ok], obj[ok], idx[ok]
    for v in range(1, V):
        f = fr[v]
        k = len(f[0])
        if len(sc) * k > EXACT_FIT_MAX_COMBOS:
            return None
        nc = (sc[:, None, :] + f[1][None, :, :]).reshape(-1, sc.shape[1])
        nobj = (obj[:, None] + w[v] * f[2][None, :]).reshape(-1)
        nidx = np.concatenate([np.repeat(idx, k, axis=0), np.tile(np.arange(k), len(idx))[:, None]], axis=1)
        ok = (nc + rest[v + 1] <= room).all(axis=1)
        sc, obj, idx = nc[ok], nobj[ok], nidx[ok]
    return idx, obj, sc.max(axis=1) if len(sc) else np.zeros(0)


#: Partial combinations per chunk that :func:`_beam_bound` keeps (a work cap on a heuristic; the
#: bound it gives is always the objective of a fitting combination, so any width is sound).
BEAM_WIDTH = 32
#: Partial combinations above which :func:`_stage_best` skips its Pareto pruning on several memory
#: rows (a quadratic filter) and carries the table as is. 16,384 (the bitset sweep's range) made
#: scaling.py's P8 V4 m128 L256 dense local search 30 -> 26 CPU s but its MoE twin's 122 -> 302 s
#: (~26 memory rows a stage, ~2,200-row tables at chunk 1).
PRUNE_MAX_ROWS = 4096


def _beam_bound(fr: list, room: float, w: np.ndarray, rest: np.ndarray) -> float:
    """Σ_v w_v·replay of one fitting combination of :func:`_stage_best`'s frontiers ``fr``, or inf
    when this beam finds none: an upper bound on the least objective, for pruning.

    After each chunk the partial combinations that can still fit (``rest`` [V + 1, R]: least share
    of the remaining chunks, as in :func:`_stage_best`) are reduced to their front on (largest
    row share + rest − room, objective), at most :data:`BEAM_WIDTH` of it evenly spaced. The last
    chunk's test is :func:`_stage_best`'s (same sums, same order), so the combination it returns
    is one that :func:`_stage_best` counts as fitting."""
    V, R = len(fr), rest.shape[1]
    sc = fr[0][1]
    obj = w[0] * fr[0][2]
    for v in range(V):
        if v:
            f = fr[v]
            sc = (sc[:, None, :] + f[1][None, :, :]).reshape(-1, R)
            obj = (obj[:, None] + w[v] * f[2][None, :]).reshape(-1)
        ok = (sc + rest[v + 1] <= room).all(axis=1)
        sc, obj = sc[ok], obj[ok]
        if not len(sc):
            return np.inf
        if v == V - 1:
            return float(obj.min())
        sel = pareto_order(np.stack([(sc + rest[v + 1]).max(axis=1), obj], axis=1))
        if len(sel) > BEAM_WIDTH:
            sel = sel[np.linspace(0, len(sel) - 1, BEAM_WIDTH).round().astype(np.int64)]
        sc, obj = sc[sel], obj[sel]
    return np.inf


#: Per (memory rows, chunks with a static delta): the row columns :func:`_stage_best` prunes on
#: after each chunk (cleared past 4,096 entries).
_PRUNE_COLS: dict = {}


def _prune_cols(nu: np.ndarray, om: np.ndarray, has_sd: tuple[bool, ...]) -> list[np.ndarray | None]:
    """Per chunk v < V − 1 the memory rows :func:`_stage_best` keys its pruning on after chunk v:
    the rows the remaining chunks touch, one per distinct coefficient prefix (nu, om of chunks
    0..v), in order of first occurrence; None when no remaining chunk touches any row."""
    key = (nu.shape, nu.tobytes(), om.tobytes(), has_sd)
    got = _PRUNE_COLS.get(key)
    if got is not None:
        return got
    V = nu.shape[1]
    coef = (nu != 0) | (om != 0)  # R V
    out: list[np.ndarray | None] = []
    for v in range(V - 1):
        act = coef[:, v + 1:].any(axis=1) | any(has_sd[v + 1:])
        if not act.any():
            out.append(None)
            continue
        pre = np.concatenate([nu[:, :v + 1], om[:, :v + 1]], axis=1)[act]
        _, first = np.unique(pre, axis=0, return_index=True)
        out.append(np.nonzero(act)[0][np.sort(first)])
    if len(_PRUNE_COLS) > 4096:
        _PRUNE_COLS.clear()
    _PRUNE_COLS[key] = out
    return out


def _stage_best(fr: list, room: float, w: np.ndarray, nu: np.ndarray, om: np.ndarray,
                capped: list | None = None) -> tuple[np.ndarray, float, float] | None:
    """The fitting combination of :func:`_stage_combos` with the least Σ_v w_v·replay (ties: the
    least largest memory-row share), by a DP over the chunks: after chunk v the partial
    combinations are feasibility-filtered (least share of the remaining chunks) and pruned to
    those undominated on (partial sums of the rows the remaining chunks still touch, objective).
    Rows with the same coefficients on the chunks placed so far have the same partial sums and
    count once, so for the 1F1B families (nested live-count vectors) the state is one number.
    Returns (option index per chunk int [V], objective, largest row share) or None (no frontier,
    no fitting combination, or over :data:`EXACT_FIT_MAX_COMBOS`; in that last case a 1 is
    appended to ``capped`` when given).

    The partial combinations are also bounded from chunk 0 on: their objective plus the remaining
    chunks' least must not exceed a fitting combination's (:func:`_beam_bound`, found first) by
    more than the tie tolerance. That drops only partial combinations whose every completion is
    above the tie window of the least objective (objectives are >= 0 and the least is <= the
    beam's), and whatever dominates a dropped one on (rows, objective) is dropped too, so the
    survivors in the tie window, their order and the answer are those of the DP without the bound.
    The caps (:data:`EXACT_FIT_MAX_COMBOS`, :data:`PRUNE_MAX_ROWS`) apply to the bounded tables,
    and a product's memory rows are built only for the pairs whose objective passes the bound.
    Before, the bound applied from chunk V − 2 on and the caps to the unbounded tables: on
    scaling.py's P8 V4 m128 L256 dense problem half the stages of the local search (1,095 of 2,162)
    passed the cap and went to the greedy after ~10 ms of DP each; now none does, and the local
    search takes 49.5 → 30.2 CPU s, the whole bound phase 86.4 → 65.3 s (the two versions run
    side by side on one machine), same answer. Its MoE twin is unchanged (118 vs 122 s): there
    most stages still pass the cap at the last chunk (~43,000 partial combinations at chunk 2)."""
    if any(f is None for f in fr):
        return None
    quick = _least_replay_fits(fr, room, w)
    if quick is not None:
        return quick
    V = len(fr)
    R = nu.shape[0]
    mins = np.array([f[1].min(axis=0) for f in fr])
    rest = np.concatenate([np.cumsum(mins[::-1], axis=0)[::-1], np.zeros((1, R))])
    cols = _prune_cols(nu, om, tuple(bool(np.any(f[3])) for f in fr))
    ub = _beam_bound(fr, room, w, rest) if V > 1 else np.inf
    cut = ub + REL_TOL * abs(ub) + 1e-9 * (1.0 + abs(ub))  # inf when the beam found none
    # least objective of chunks v.. (their cheapest options): a partial combination over it is cut
    tail = np.concatenate([np.cumsum([w[u] * fr[u][2].min() for u in range(V)][::-1])[::-1], [0.0]])
    sc = fr[0][1]
    obj = w[0] * fr[0][2]
    idx = np.arange(len(sc))[:, None]
    for v in range(V):
        if v:
            f = fr[v]
            k = len(f[0])
            if len(sc) * k > EXACT_FIT_MAX_COMBOS:
                return _capped(capped)
            # past this many survivors the next product is over the cap unpruned: stop there
            limit = None
            if v < V - 1 and cols[v] is not None and len(cols[v]) > 1:
                limit = max(PRUNE_MAX_ROWS, EXACT_FIT_MAX_COMBOS // len(fr[v + 1][0]))
            got = _extend(sc, obj, idx, f, w[v], rest[v + 1], tail[v + 1], room, cut, limit)
            if got is None:
                return _capped(capped)
            sc, obj, idx = got
        else:
            ok = (sc + rest[1] <= room).all(axis=1) & (obj + tail[1] <= cut)
            sc, obj, idx = sc[ok], obj[ok], idx[ok]
        if not len(sc):
            return None
        if v == V - 1:
            break
        # prune: rows the remaining chunks touch, one per distinct coefficient prefix
        if cols[v] is None:
            i = first_min(obj)
            sc, obj, idx = sc[i:i + 1], obj[i:i + 1], idx[i:i + 1]
            continue
        if len(cols[v]) > 1 and len(sc) > PRUNE_MAX_ROWS:
            continue
        sel = _dominance_prune(sc, obj, cols[v])
        sc, obj, idx = sc[sel], obj[sel], idx[sel]
    top = sc.max(axis=1)
    tie = np.nonzero(obj <= obj.min() + REL_TOL * abs(obj.min()))[0]
    i = int(tie[first_min(top[tie])])  # least memory among the tied, near-ties by position
    return idx[i], float(obj[i]), float(top[i])


def _capped(capped: list | None) -> None:
    """:func:`_stage_best`'s None for a stage over its caps, counted in ``capped``."""
    if capped is not None:
        capped.append(1)


#: Pairs (partial combination, option) :func:`_extend` builds at once.
EXTEND_BLOCK = 65_536


def _extend(sc: np.ndarray, obj: np.ndarray, idx: np.ndarray, f: tuple, wv: float, rest: np.ndarray,
            tail: float, room: float, cut: float, limit: int | None,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One step of :func:`_stage_best`'s DP: every partial combination (row shares ``sc`` [n, R],
    objective ``obj`` [n], option indices ``idx`` [n, v]) times every option of the next chunk's
    frontier ``f``, kept when it can still fit (+ ``rest`` [R], the least share of the chunks after)
    and its objective + ``tail`` (their least) is <= ``cut``; in table order (partial combination,
    then option). None as soon as more than ``limit`` survive (the caller's cap: the rest of the
    table cannot change that).

    The frontier's options are sorted by replay (:func:`_frontiers`), so (obj + w·replay) + tail
    rises with the option and each partial combination passes the objective test on a prefix of
    them: its length is counted by a binary search with a slack of 1e-9 relative, the pairs in
    those prefixes are built (in blocks of about :data:`EXTEND_BLOCK`) and the test is then made
    exactly as written above. The memory rows are then tested one at a time on the pairs still
    in, the row with the largest mean share + rest first, and the kept pairs' row shares are
    summed last. The same pairs are kept, in the same order and with the same sums, as by testing
    every pair on every row (``tests/search/test_fit_extend.py``). Testing every pair on all rows
    at once spent most of the exact fit's time on pairs that fail: on the corpus's Qwen2.5-32B 32k
    (pp 2, V 4, 8 memory rows) 216 M pairs, 155 M under the cut, 17 M kept; this step 11.7 -> 4.6
    s of a 40 s profiled search."""
    k = len(f[0])
    n = len(sc)
    wr = wv * f[2]  # ascending
    thresh = cut - tail - obj
    slack = 1e-9 * (1.0 + abs(cut) + abs(tail) + np.abs(obj).max(initial=0.0) + abs(float(wr[-1])))
    cnt = np.searchsorted(wr, thresh + slack, side="right") if np.isfinite(cut) else np.full(n, k)
    cs = np.concatenate([[0], np.cumsum(cnt)])
    # the memory test one row at a time, on the pairs still in, the rows likeliest to fail first
    scT, fT = sc.T.copy(), f[1].T.copy()
    order = np.argsort(-(sc.mean(axis=0) if n else 0.0) - f[1].mean(axis=0) - rest, kind="stable")
    parts, count, a = [], 0, 0
    while a < n:
        b = min(n, max(a + 1, int(np.searchsorted(cs, cs[a] + EXTEND_BLOCK, side="right")) - 1))
        c = cnt[a:b]
        i = np.repeat(np.arange(a, b), c)
        j = np.arange(cs[b] - cs[a]) - np.repeat(cs[a:b] - cs[a], c)
        o = obj[i] + wr[j]
        keep = o + tail <= cut
        i, j, o = i[keep], j[keep], o[keep]
        for r in order:
            keep = scT[r, i] + fT[r, j] + rest[r] <= room
            i, j, o = i[keep], j[keep], o[keep]
        count += len(i)
        if limit is not None and count > limit:
            return None
        parts.append((sc[i] + f[1][j], o, np.concatenate([idx[i], j[:, None]], axis=1)))
        a = b
    if not parts:
        return sc[:0], obj[:0], np.zeros((0, idx.shape[1] + 1), dtype=idx.dtype)
    return tuple(np.concatenate(x) for x in zip(*parts))


def _dominance_prune(sc: np.ndarray, obj: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """int [k]: the partial combinations (row shares ``sc`` [n, R], objective ``obj`` [n]) that
    :func:`_stage_best` keeps: undominated on (``sc[:, cols]``, obj); one column: sorted sweep
    with a 1e-12 tolerance (:func:`pareto_order`), several: :func:`pareto_mask`, in table order."""
    key = sc[:, cols]
    if key.shape[1] == 1:
        return pareto_order(np.stack([key[:, 0], obj], axis=1), tol=1e-12)
    return np.nonzero(pareto_mask(np.concatenate([key, obj[:, None]], axis=1)))[0]


def _least_replay_fits(fr: list, room: float, w: np.ndarray) -> tuple[np.ndarray, float, float] | None:
    """:func:`_stage_best`'s answer without its DP when every chunk's least-replay option (index 0:
    the frontiers are sorted by replay) fits together and is the only least one: the objective
    Σ_v w_v·replay is separable, so that combination is then the unique minimum (the next best
    is worse by more than the DP's tie tolerance). None otherwise (the DP decides). On a loose
    budget (no recompute needed) this is every call."""
    shares = sum(f[1][0] for f in fr)
    if (shares > room).any():
        return None
    obj = float(sum(wv * f[2][0] for wv, f in zip(w, fr)))
    gaps = [wv * (f[2][1] - f[2][0]) for wv, f in zip(w, fr) if len(f[2]) > 1]
    if gaps and min(gaps) <= REL_TOL * abs(obj):
        return None
    return np.zeros(len(fr), dtype=np.int64), obj, float(shares.max())


def _over_caps(problem: Problem, V: int, memo: dict, pos: np.ndarray | None, rows: list) -> np.ndarray:
    """bool [P]: the pipeline stages that :func:`fit_exact` sends to the greedy without its DP, those
    whose stage of the even split (unit weights) passes the DP's caps (:data:`EXACT_FIT_MAX_COMBOS`).
    Decided once per problem and V (memoised in ``memo``) from the problem alone, so a fit does not
    depend on which fits ran before it (a sweep's workers share trials, not memos). On scaling.py's
    P8 V4 m128 L256 MoE problem (~26 memory rows a stage, ~43,000 partial combinations at chunk 2)
    775 of the local search's 776 DP runs passed the caps, ~36 CPU s of DP for one exact answer;
    there stages 0-6 of the even split pass them and stage 7 (18 memory rows) does not. Its dense
    twin's even split fits every stage exactly (none is sent)."""
    key = ("xcaps", V)
    if key not in memo:
        P, N = problem.P, problem.N
        memo[key] = np.zeros(P, dtype=bool)
        if N >= P * V:
            lay = even_layers(N, P, V)[None]
            _frontiers(problem, lay, [(0, v, p) for v in range(V) for p in range(P)], memo, pos)
            starts = first_layers(lay, pos)
            z = np.zeros_like(lay)
            static0 = problem.costs(V, lay, z, z, z).static_mib[0]
            for p in range(P):
                fr = [memo[("xf", V, v, p, int(starts[0, v, p]), int(lay[0, v, p]))] for v in range(V)]
                capped: list = []
                _stage_best(fr, float(hbm_cap(problem.hbm_mib) - static0[p]), np.ones(V), *rows[p], capped=capped)
                memo[key][p] = bool(capped)
    return memo[key]


def fit_exact(problem: Problem, layers: np.ndarray, *, stages: np.ndarray | None = None,
              weights: np.ndarray | None = None, memo: dict | None = None,
              deadline: float | None = None, inexact: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Least-replay recompute per stage that fits the budget, exactly (no greedy).

    A stage's peak depends only on its own column: static + max over the schedule's memory rows
    of the live activations (+ a backward's workspace). Each mini-stage's configurations (every
    full / select+comm / select-only or comm-only / none class count, in MindFormers' "first r
    layers" order) are reduced to those undominated on (share of every memory row, replay ms);
    the stage takes the combination over its chunks that fits with the least Σ_v weights[v]·replay
    (ties: the lowest peak). A stage with no fitting combination, or too many options
    (:data:`EXACT_FIT_MAX_OPTS`, :data:`EXACT_FIT_MAX_COMBOS`), gets :func:`fit_recompute`'s greedy.

    Args:
        problem: the tuning problem. layers: int [B, V, P] splits.
        stages: optional bool [B, P]: fit only these stages (the others get zeros).
        weights: optional float [V, P] or [B, V, P] replay weights (> 0; default 1: least stage
            time).
        memo: optional dict for the mini-stage frontiers (one per problem; see :func:`fit_cache`).
        deadline: optional time.monotonic() limit, checked before each stage's fit.
        inexact: optional bool [B, P], filled: True where a stage got the greedy because its
            frontiers had too many options or it passed the DP's caps (its recompute may then not
            be the least-replay fitting one), False where the DP decided (also when no
            combination fits: the greedy then runs as well, and the stage does not fit).

    Returns (rec, sel, com int [B, V, P], fits [B] bool) like :func:`fit_recompute` (stages not
    fitted are scored as zeros).

    Raises:
        PastDeadline: ``deadline`` passed before the last stage was fitted.
    """
    B, V, P = layers.shape
    memo = {} if memo is None else memo
    pos = _positions(problem, V)
    mask = np.ones((B, P), dtype=bool) if stages is None else np.asarray(stages, dtype=bool)
    w = np.ones((B, V, P)) if weights is None else np.broadcast_to(np.asarray(weights, float), (B, V, P))
    rec, sel, com = (np.zeros((B, V, P), dtype=np.int64) for _ in range(3))
    cap = hbm_cap(problem.hbm_mib)
    z = np.zeros_like(layers)
    static0 = problem.costs(V, layers, z, z, z).static_mib  # B P
    bs, ps = np.nonzero(mask)
    _frontiers(problem, layers, [(int(b), v, int(p)) for b, p in zip(bs, ps) for v in range(V)], memo, pos)
    starts = first_layers(layers, pos)
    rows = _stage_rows(problem, V)
    greedy = np.zeros((B, P), dtype=bool)
    over_caps = _over_caps(problem, V, memo, pos, rows)
    if inexact is not None:
        inexact[...] = False
    for b, p in zip(bs, ps):
        check_deadline(deadline)
        keys = [("xf", V, v, p, int(starts[b, v, p]), int(layers[b, v, p])) for v in range(V)]
        fr = [memo[k] for k in keys]
        room = float(cap - static0[b, p])
        # mini-stages at other first layers often have equal frontiers (a uniform model's middle
        # layers): a stage with the same frontiers, room and weights has the same answer
        sk = ("xs", V, p, room, w[b, :, p].tobytes(), *(memo.get(("xd",) + k) for k in keys))
        if any(f is None for f in fr) or over_caps[p]:
            # a frontier with too many options, or the problem's stages pass the DP's caps: the
            # greedy, without the DP's work
            got, capped = None, True
        else:
            if sk not in memo:  # (the DP's answer or None, whether its caps stopped it)
                hit: list = []
                memo[sk] = (_stage_best(fr, room, w[b, :, p], *rows[p], capped=hit), bool(hit))
            got, capped = memo[sk]
        if got is None:
            greedy[b, p] = True
            if inexact is not None:
                inexact[b, p] = capped
            continue
        for v in range(V):
            rec[b, v, p], sel[b, v, p], com[b, v, p] = fr[v][0][got[0][v]]
    if greedy.any():
        rows = np.nonzero(greedy.any(axis=1))[0]
        L = layers[rows]
        zz = np.zeros_like(L)
        gr, gs, gc, _ = fit_recompute(problem, L, zz, zz, zz, stages=greedy[rows], deadline=deadline)
        g3 = greedy[rows][:, None, :]
        rec[rows] = np.where(g3, gr, rec[rows])
        sel[rows] = np.where(g3, gs, sel[rows])
        com[rows] = np.where(g3, gc, com[rows])
    peak = problem.evaluate(V, layers, rec, sel, com, memory_only=True).peak_mib
    return rec, sel, com, (peak <= cap).all(axis=1)


def stage_options(problem: Problem, cand: Candidate, top: int, *, deadline: float | None = None
                  ) -> list[np.ndarray | None]:
    """Per stage of ``cand``'s split, the fitting recompute combinations of its chunks'
    undominated options (:func:`_stage_combos`), the ``top`` least-replay ones first: int
    [S, V, 3] (rec, sel, com per chunk); None for a stage with none (or too many options).
    ``deadline`` (time.monotonic()): checked per stage (:class:`PastDeadline`)."""
    V, P = cand.V, problem.P
    memo = fit_cache(problem)
    pos = _positions(problem, V)
    lay = cand.layers[None]
    _frontiers(problem, lay, [(0, v, p) for p in range(P) for v in range(V)], memo, pos)
    starts = first_layers(lay, pos)[0]
    z = np.zeros_like(lay)
    static0 = problem.costs(V, lay, z, z, z).static_mib[0]
    cap = hbm_cap(problem.hbm_mib)
    opts: list[np.ndarray | None] = []
    for p in range(P):
        check_deadline(deadline)
        fr = [memo[("xf", V, v, p, int(starts[v, p]), int(cand.layers[v, p]))] for v in range(V)]
        got = _stage_combos(fr, cap - static0[p], np.ones(V))
        if got is None or not len(got[0]):
            opts.append(None)
            continue
        idx = got[0][np.argsort(tie_key(got[1]), kind="stable")[:top]]  # near-ties by position: scale-free
        opts.append(np.stack([fr[v][0][idx[:, v]] for v in range(V)], axis=1))
    return opts
