"""Fast deterministic solvers whose answers seed the Optuna study (pure numpy, no Optuna).

- :func:`fit_recompute`: for a batch of layer splits, the cheapest recompute per stage that makes
  every stage fit the HBM budget (greedy: at each round, per over-budget stage, the single
  increment that fits at least extra time, else the best MiB saved per ms added). A stage's peak
  depends only on its own column, so all stages and all candidates are fitted at once, finished
  rows drop out, and long runs of one increment are speculated several rounds per simulation.
- :func:`local_search`: steepest descent over "move one layer from mini-stage a to mini-stage b"
  (re-fitting the recompute of the stages touched, each distinct touched column once per problem)
  until no move lowers the step time; then a pair-move escape (two moves at once, or a descent
  from the best pair moves) and the descent goes on.
"""

from __future__ import annotations

import numpy as np

from autotune.tuner.problem import Candidate, Problem, even_layers

_KIND_ATTR = {"full": 0, "select": 1, "comm": 2}


def _positions(problem: Problem, V: int) -> np.ndarray | None:
    """Pipeline position [V, P] of each mini-stage as :meth:`Problem.costs` places them (V-shaped
    for zero_bubble_v); None for the default chunk-major order (the cost model's faster path)."""
    from autotune.cost.schedules import get_schedule

    pos = get_schedule(problem.schedule).virtual_position(problem.P, V)
    return None if np.array_equal(pos, np.arange(V * problem.P).reshape(V, problem.P)) else pos


def _stage_time(problem: Problem, layers, rec, sel, com, pos: np.ndarray | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """(peak [B, P] MiB, per-stage fwd+bwd [B, P] ms per micro-batch) for int [B, V, P] arrays.

    ``pos``: :func:`_positions` of this V (the schedule's placement, the one :meth:`Problem.evaluate`
    scores)."""
    from autotune.cost.inputs import stage_costs
    from autotune.cost.simulate import compile_schedule, peak_activation

    costs = stage_costs(problem.pa, layers, rec, sel, com, pos=pos)
    cs = compile_schedule(problem.schedule, problem.P, layers.shape[1], problem.m, problem.seq_split_num)
    peak = costs.static_mib + peak_activation(cs, costs.act_mib, costs.ws_mib)
    t = (costs.fwd_ms + costs.bwd_ms).sum(axis=1)
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


def fit_recompute(problem: Problem, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                  com: np.ndarray, *, max_rounds: int = 10_000,
                  stages: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Add recompute until every stage fits (see module docstring).

    Args:
        problem: the tuning problem (budget ``hbm_mib`` MiB, allowed ``kinds``).
        layers, rec, sel, com: int [B, V, P] layer counts and starting recompute counts.
        max_rounds: cap on greedy rounds (one increment per over-budget stage per round).
        stages: optional bool [B, P]: fit only these stages; the others keep their recompute
            (they are never treated as over budget). Default: every stage.

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
    cap = problem.hbm_mib
    pos = _positions(problem, V)
    mask = np.ones((B, P), dtype=bool) if stages is None else np.array(stages, dtype=bool)
    rounds = np.zeros((B, P), dtype=np.int64)  # increments taken per stage (its greedy round)
    guess = np.zeros((B, P), dtype=np.int64)   # variant each stage is expected to take next
    peak, t = _stage_time(problem, layers, rec, sel, com, pos)
    idx = np.arange(B)  # rows still being fitted
    grow = 1  # speculation depth that recent blocks earned
    while True:
        mask[idx] &= rounds[idx] < max_rounds
        over = (peak > cap + 1e-9) & mask[idx]
        live = over.any(axis=1)
        if not live.any():
            break
        if not live.all():
            idx, over, peak, t = idx[live], over[live], peak[live], t[live]
        b = len(idx)
        D = int(max(1, min(SPEC_DEPTH, grow, SPEC_ROWS // (K * b))))
        lay = layers[idx]
        r, s, c = rec[idx], sel[idx], com[idx]
        g = guess[idx]
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
                                    np.stack([x[ks] for x in Cs]).reshape(n, V, P), pos)
        else:
            vpeak = vt = np.zeros(n)
        vpeak = vpeak.reshape(D, k2, b, P)
        vt = vt.reshape(D, k2, b, P)
        r, s, c = rec[idx], sel[idx], com[idx]
        follow = over.copy()  # stages whose true state is still speculated state j
        j = 0
        for j in range(D):
            ov = follow & (peak > cap + 1e-9)
            if not ov.any():
                break
            if not k2:  # no increment changes any over-budget stage: all stuck
                sr, sp = np.nonzero(ov)
                mask[idx[sr], sp] = False
                break
            saved = peak[None] - vpeak[j]           # K b P
            added = vt[j] - t[None]
            useful = saved > 1e-9
            fits_now = useful & (vpeak[j] <= cap + 1e-9)
            big = 1e30
            # Prefer an increment that fits with the least added time; else best MiB per ms.
            cost_fit = np.where(fits_now, added, big)
            ratio = np.where(useful, saved / np.maximum(added, 1e-9), -1.0)
            any_fit = fits_now.any(axis=0)
            choice = np.where(any_fit, cost_fit.argmin(axis=0), ratio.argmax(axis=0))  # b P
            stuck = ov & ~useful.any(axis=0)
            apply = ov & ~stuck
            pick = np.where(apply, choice, 0)  # b P, among the simulated variants
            choice = ks[pick] if k2 else pick  # ... and among all K
            # A stuck stage's column does not change, so it stays stuck: stop fitting it.
            sr, sp = np.nonzero(stuck)
            mask[idx[sr], sp] = False
            gi = (choice[:, None, :], bi[:, :, None], ar[None, :, None], pi[None])  # -> b V P
            a3 = apply[:, None, :]
            r = np.where(a3, Rs[j][gi], r)
            s = np.where(a3, Ss[j][gi], s)
            c = np.where(a3, Cs[j][gi], c)
            # The new peak / time of a changed stage is its chosen variant's (already simulated).
            peak = np.where(apply, vpeak[j][pick, bi, pi], peak)
            t = np.where(apply, vt[j][pick, bi, pi], t)
            follow = apply & (choice == g) & (rounds[idx] + 1 < max_rounds)
            rounds[idx] += apply
            g = np.where(apply, choice, g)
        rec[idx], sel[idx], com[idx] = r, s, c
        guess[idx] = g
        grow = 2 * D if follow.any() and j == D - 1 else max(1, D // 2)
    peak, _ = _stage_time(problem, layers, rec, sel, com, pos)
    return rec, sel, com, (peak <= cap + 1e-9).all(axis=1)


def fitted(problem: Problem, V: int, layers: np.ndarray, origin: str) -> list[Candidate]:
    """Candidates for a batch of splits int [B, V, P] with fitted recompute, scored."""
    z = np.zeros_like(layers)
    rec, sel, com, _ = fit_recompute(problem, layers, z, z, z)
    cands = [Candidate(V, layers[i], rec[i], sel[i], com[i], origin=origin) for i in range(layers.shape[0])]
    return problem.score(cands)


def _moves(problem: Problem, cand: Candidate) -> np.ndarray:
    """All valid splits [B, V, P] one layer away from ``cand`` (a -> b for every pair)."""
    V, P = cand.V, problem.P
    flat = cand.layers.reshape(-1)
    lo, hi = problem.bounds(V)
    lo, hi = lo.reshape(-1), hi.reshape(-1)
    out = []
    n = V * P
    for a in range(n):
        if flat[a] - 1 < lo[a]:
            continue
        for b in range(n):
            if a == b or flat[b] + 1 > hi[b]:
                continue
            f = flat.copy()
            f[a] -= 1
            f[b] += 1
            out.append(f.reshape(V, P))
    return np.asarray(out, dtype=np.int64).reshape(-1, V, P)


def _refit_touched(problem: Problem, base: Candidate, splits: np.ndarray,
                   memo: dict | None = None) -> tuple[np.ndarray, ...]:
    """Recompute [B, V, P] for moves ``splits`` (int [B, V, P]) of ``base``: untouched stages keep
    ``base``'s, each touched stage is re-fitted from zero by :func:`fit_recompute`.

    A stage's peak and the greedy's choices depend only on that stage's column (its layer counts
    and first-layer indices), so each distinct touched column is fitted once and shared by every
    move that produces it — the same result as fitting every move, with far fewer simulations
    (V·P distinct decremented / incremented columns instead of (V·P)² moves). Only the touched
    stages of a fitted row are fitted (``fit_recompute(stages=...)``).

    ``memo`` (optional, owned by the caller) maps (V, stage, column bytes, first-layer indices
    bytes) to the fitted (rec, sel, com) columns and persists across calls: the caller must use
    one memo per :class:`Problem` (same profile, budget, kinds and schedule) and never mutate
    that problem while the memo lives.
    """
    from autotune.cost.inputs import _starts
    from autotune.cost.schedules import get_schedule

    B, V, P = splits.shape
    memo = {} if memo is None else memo
    changed = (splits != base.layers[None]).any(axis=1)  # B P: stages touched
    keep = ~changed[:, None, :]
    rec = np.where(keep, base.rec[None], 0)
    sel = np.where(keep, base.sel[None], 0)
    com = np.where(keep, base.com[None], 0)
    # first-layer indices as the cost model fills pipeline positions (V-shaped for zero_bubble_v)
    starts = _starts(splits, get_schedule(problem.schedule).virtual_position(P, V))
    todo = np.zeros((B, P), dtype=bool)  # (move, stage) fitted here: one per new column
    keys: dict[tuple, tuple[int, int]] = {}
    uses: list[tuple[int, int, tuple]] = []  # (move, stage, key) filled from the memo
    for b, p in zip(*np.nonzero(changed)):
        b, p = int(b), int(p)
        key = (V, p, splits[b, :, p].tobytes(), starts[b, :, p].tobytes())
        if key not in memo and key not in keys:
            keys[key] = (b, p)
            todo[b, p] = True
        uses.append((b, p, key))
    rows = np.nonzero(todo.any(axis=1))[0]
    if rows.size:
        L = splits[rows]
        z = np.zeros_like(L)
        fr, fs, fc, _ = fit_recompute(problem, L, z, z, z, stages=todo[rows])
        at = {int(b): i for i, b in enumerate(rows)}
        for key, (b, p) in keys.items():
            i = at[b]
            memo[key] = (fr[i, :, p].copy(), fs[i, :, p].copy(), fc[i, :, p].copy())
    for b, p, key in uses:
        rec[b, :, p], sel[b, :, p], com[b, :, p] = memo[key]
    return rec, sel, com


#: When no single-layer move improves, :func:`local_search` scores the pair moves (two single
#: moves at once) among this many best single moves: a work cap of at most
#: PAIR_TOP·(PAIR_TOP + 1)/2 pairs per stall (< 2 turns the escape off).
PAIR_TOP = 60
#: ... and at most about this many ops simulated per stall (pairs × schedule ops): 1,830 pairs of
#: the 384-op TeleChat2 vpp3 schedule fit; a 256-micro-batch schedule gets ~20 single moves paired.
PAIR_OPS = 1_500_000
#: When no pair move improves either, a single-move descent runs from each of this many best pair
#: moves (kicks); the best end point is taken if it improves.
PAIR_KICKS = 2
#: Moves refitted and simulated per batch (bounds memory on large spaces).
MOVE_CHUNK = 20_000


def _pair_moves(problem: Problem, base: Candidate, singles: np.ndarray, order: np.ndarray,
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


def _score_moves(problem: Problem, base: Candidate, splits: np.ndarray, memo: dict,
                 ) -> tuple[Candidate, np.ndarray, np.ndarray]:
    """Refit (:func:`_refit_touched`) and simulate moves ``splits`` int [B, V, P] of ``base`` in
    batches of :data:`MOVE_CHUNK`. Returns (the best move as a scored Candidate, memory excess
    [B] MiB clipped at 0, step [B] ms); best = least excess, then least step, then first."""
    ex_all, st_all = [], []
    best_key, best = None, None
    for lo in range(0, len(splits), MOVE_CHUNK):
        sp = splits[lo:lo + MOVE_CHUNK]
        rec, sel, com = _refit_touched(problem, base, sp, memo)
        s = problem.evaluate(base.V, sp, rec, sel, com)
        excess = np.maximum(0.0, s.peak_mib.max(axis=1) - problem.hbm_mib)
        i = int(np.lexsort((s.step_ms, excess))[0])
        if best_key is None or (excess[i], s.step_ms[i]) < best_key:
            best_key = (excess[i], s.step_ms[i])
            pk = float(s.peak_mib[i].max())
            best = Candidate(base.V, sp[i], rec[i], sel[i], com[i], float(s.step_ms[i]), pk,
                             pk - problem.hbm_mib)
        ex_all.append(excess)
        st_all.append(s.step_ms)
    return best, np.concatenate(ex_all), np.concatenate(st_all)


def _better(c: Candidate, than: Candidate) -> bool:
    """Strictly better: less memory excess (clipped at 0), or as little and 1e-9 ms faster."""
    return (max(0.0, c.excess_mib), c.step_ms) < (max(0.0, than.excess_mib), than.step_ms - 1e-9)


def _descend(problem: Problem, best: Candidate, memo: dict, scans: int,
             deadline: float | None) -> tuple[Candidate, int, tuple | None]:
    """Steepest single-move descent from ``best`` (scored) for at most ``scans`` neighbourhood
    scans. Returns (end point, scans used, the last scan's (splits, excess, step) when it stopped
    at a local optimum, else None)."""
    import time

    used = 0
    while used < scans:
        if deadline is not None and time.monotonic() > deadline:
            return best, used, None
        splits = _moves(problem, best)
        if splits.size == 0:
            return best, used, None
        c, excess, step = _score_moves(problem, best, splits, memo)
        used += 1
        if not _better(c, best):
            return best, used, (splits, excess, step)
        best = c
    return best, used, None


#: Fitted-column memos of live problems: id(problem) -> (fingerprint, memo) (see :func:`_memo_for`).
_MEMOS: dict[int, tuple[tuple, dict]] = {}
#: A memo is cleared when it holds more fitted columns than this (bounds memory).
MEMO_MAX = 100_000


def _memo_for(problem: Problem) -> dict:
    """The :func:`_refit_touched` memo shared by every :func:`local_search` on ``problem``.

    Keyed by the problem object's identity (dropped when the problem is garbage-collected) and
    checked against everything a fit depends on (the profile object itself, P, m, schedule,
    budget, kinds, seq_split_num): a problem changed in place, or a copy with another budget,
    gets a fresh memo, so a fit is never reused for another problem (V is in the memo's keys).
    """
    import weakref

    fp = (problem.pa, problem.P, problem.m, problem.schedule, float(problem.hbm_mib),
          tuple(problem.kinds), problem.seq_split_num)
    key = id(problem)
    ent = _MEMOS.get(key)
    if ent is None:
        weakref.finalize(problem, _MEMOS.pop, key, None)
    if ent is None or ent[0][0] is not fp[0] or ent[0][1:] != fp[1:] or len(ent[1]) > MEMO_MAX:
        ent = (fp, {})
        _MEMOS[key] = ent
    return ent[1]


def local_search(problem: Problem, start: Candidate, *, max_iters: int = 200,
                 deadline: float | None = None, pair_top: int | None = None,
                 kicks: int | None = None) -> Candidate:
    """Steepest descent from ``start`` over single-layer moves with re-fitted recompute, with a
    deterministic pair-move escape from local optima.

    A move's touched stages get their recompute re-fitted from zero; other stages keep theirs
    (each distinct touched column is fitted once per problem and remembered). When no single move
    improves: the pair moves (two single moves at once) among the ``pair_top`` best single moves
    are scored and the best is taken if it improves; else a single-move descent runs from each of
    the ``kicks`` best pair moves and the best end point is taken if it improves (a way out of a
    local optimum whose better neighbours are three or more moves away). The descent then goes on
    from the new point.

    Args:
        problem: the tuning problem. start: the starting candidate (scored here if it is not).
        max_iters: most neighbourhood scans (single, pair and kick-descent scans together; a
            plain descent makes one scan per move plus the last one).
        deadline: time.monotonic() limit, checked before every scan.
        pair_top: single moves paired at a stall (default :data:`PAIR_TOP`; < 2 = no escape).
        kicks: descents from non-improving pair moves (default :data:`PAIR_KICKS`).

    Returns the best candidate found (``start`` itself when nothing improves; step_ms in ms).
    """
    import time

    top = PAIR_TOP if pair_top is None else pair_top
    if pair_top is None:  # work cap: pairs × ops simulated per stall (256 micro-batches: ~20 pairs)
        from autotune.cost.simulate import compile_schedule

        ops = compile_schedule(problem.schedule, problem.P, start.V, problem.m, problem.seq_split_num).num_ops
        top = min(top, int(np.sqrt(2.0 * PAIR_OPS / max(ops, 1))))
    n_kicks = PAIR_KICKS if kicks is None else kicks
    best = start
    if not np.isfinite(best.step_ms):
        problem.score([best])
    memo = _memo_for(problem)  # fitted touched columns, shared by every scan on this problem
    used = 0

    def late() -> bool:
        return used >= max_iters or (deadline is not None and time.monotonic() > deadline)

    while True:
        end, n, stall = _descend(problem, best, memo, max_iters - used, deadline)
        used += n
        if end is not best:
            end.origin = f"{start.origin}+local"
            best = end
        if stall is None or top < 2 or late():
            break
        splits, excess, step = stall
        pairs = _pair_moves(problem, best, splits, np.lexsort((step, excess)), top)
        if not len(pairs):
            break
        c, ex2, st2 = _score_moves(problem, best, pairs, memo)
        used += 1
        if not _better(c, best):
            ends = []
            for k in np.lexsort((st2, ex2))[:n_kicks]:
                if late():
                    break
                kick, _, _ = _score_moves(problem, best, pairs[k:k + 1], memo)
                e, n, _ = _descend(problem, kick, memo, max_iters - used, deadline)
                used += n
                ends.append(e)
            if not ends:
                break
            c = min(ends, key=lambda x: x.rank())
            if not _better(c, best):
                break
        c.origin = f"{start.origin}+local"
        best = c
    return best


def heuristic_seeds(problem: Problem, *, deadline: float | None = None) -> list[Candidate]:
    """Even split with fitted recompute for every V, each improved by :func:`local_search`."""
    out = []
    for V in problem.vpp_candidates:
        ev = fitted(problem, V, even_layers(problem.N, problem.P, V)[None], origin=f"even-fit-v{V}")[0]
        out.append(ev)
        out.append(local_search(problem, ev, deadline=deadline))
    return out
