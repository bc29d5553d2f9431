"""Fast deterministic solvers whose answers seed the Optuna study (pure numpy, no Optuna).

- :func:`fit_recompute`: for a batch of layer splits, the cheapest recompute per stage that makes
  every stage fit the HBM budget (greedy: at each round, per over-budget stage, the single
  increment that fits at least extra time, else the best MiB saved per ms added). A stage's peak
  depends only on its own column, so all stages and all candidates are fitted at once.
- :func:`local_search`: steepest descent over "move one layer from mini-stage a to mini-stage b"
  (re-fitting the recompute of the two stages touched) until no move lowers the step time.
"""

from __future__ import annotations

import numpy as np

from autotune.tuner.problem import Candidate, Problem, even_layers

_KIND_ATTR = {"full": 0, "select": 1, "comm": 2}


def _stage_time(problem: Problem, layers, rec, sel, com) -> tuple[np.ndarray, np.ndarray]:
    """(peak [B, P] MiB, per-stage fwd+bwd [B, P] ms per micro-batch) for int [B, V, P] arrays."""
    from autotune.cost.inputs import stage_costs
    from autotune.cost.simulate import compile_schedule, peak_activation

    costs = stage_costs(problem.pa, layers, rec, sel, com)
    cs = compile_schedule(problem.schedule, problem.P, layers.shape[1], problem.m, problem.seq_split_num)
    peak = costs.static_mib + peak_activation(cs, costs.act_mib, costs.ws_mib)
    t = (costs.fwd_ms + costs.bwd_ms).sum(axis=1)
    return peak, t


def fit_recompute(problem: Problem, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                  com: np.ndarray, *, max_rounds: int = 10_000) -> tuple[np.ndarray, ...]:
    """Add recompute until every stage fits (see module docstring). Arrays int [B, V, P].

    Returns (rec, sel, com, fits [B] bool). Stages that cannot fit even with every allowed kind on
    every layer are left at their maximum.
    """
    rec, sel, com = rec.copy(), sel.copy(), com.copy()
    B, V, P = layers.shape
    kinds = [_KIND_ATTR[k] for k in problem.kinds]
    cap = problem.hbm_mib
    for _ in range(max_rounds):
        peak, t = _stage_time(problem, layers, rec, sel, com)
        over = peak > cap + 1e-9
        if not over.any():
            break
        # Variants: (kind, chunk) increments applied to every over-budget stage at once.
        variants = []
        for k in kinds:
            for v in range(V):
                r2, s2, c2 = rec.copy(), sel.copy(), com.copy()
                if k == 0:
                    r2[:, v] = np.where(over, np.minimum(rec[:, v] + 1, layers[:, v]), rec[:, v])
                elif k == 1:
                    s2[:, v] = np.where(over, np.minimum(np.maximum(sel[:, v], rec[:, v]) + 1, layers[:, v]), sel[:, v])
                else:
                    c2[:, v] = np.where(over, np.minimum(np.maximum(com[:, v], rec[:, v]) + 1, layers[:, v]), com[:, v])
                variants.append((r2, s2, c2))
        K = len(variants)
        Lb = np.concatenate([layers] * K)
        Rb = np.concatenate([x[0] for x in variants])
        Sb = np.concatenate([x[1] for x in variants])
        Cb = np.concatenate([x[2] for x in variants])
        vpeak, vt = _stage_time(problem, Lb, Rb, Sb, Cb)
        vpeak = vpeak.reshape(K, B, P)
        vt = vt.reshape(K, B, P)
        saved = peak[None] - vpeak           # K B P
        added = vt - t[None]
        useful = saved > 1e-9
        fits_now = useful & (vpeak <= cap + 1e-9)
        big = 1e30
        # Prefer an increment that fits with the least added time; else best MiB per ms.
        cost_fit = np.where(fits_now, added, big)
        ratio = np.where(useful, saved / np.maximum(added, 1e-9), -1.0)
        any_fit = fits_now.any(axis=0)
        choice = np.where(any_fit, cost_fit.argmin(axis=0), ratio.argmax(axis=0))  # B P
        stuck = over & ~useful.any(axis=0)
        apply = over & ~stuck
        if not apply.any():
            break
        for ki in range(K):
            mask = apply & (choice == ki)  # B P
            if mask.any():
                r2, s2, c2 = variants[ki]
                m3 = mask[:, None, :]
                rec = np.where(m3, r2, rec)
                sel = np.where(m3, s2, sel)
                com = np.where(m3, c2, com)
    peak, _ = _stage_time(problem, layers, rec, sel, com)
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


def _refit_touched(problem: Problem, base: Candidate, splits: np.ndarray) -> tuple[np.ndarray, ...]:
    """Recompute [B, V, P] for moves ``splits`` of ``base``: untouched stages keep ``base``'s, each
    touched stage is re-fitted from zero by :func:`fit_recompute`.

    A stage's peak and the greedy's choices depend only on that stage's column (its layer counts
    and first-layer indices), so each distinct touched column is fitted once and shared by every
    move that produces it — the same result as fitting every move, with far fewer simulations
    (V·P distinct decremented / incremented columns instead of (V·P)² moves).
    """
    from autotune.cost.inputs import _starts

    B, V, P = splits.shape
    changed = (splits != base.layers[None]).any(axis=1)  # B P: stages touched
    keep = ~changed[:, None, :]
    rec = np.where(keep, base.rec[None], 0)
    sel = np.where(keep, base.sel[None], 0)
    com = np.where(keep, base.com[None], 0)
    from autotune.cost.schedules import get_schedule

    # first-layer indices as the cost model fills pipeline positions (V-shaped for zero_bubble_v)
    starts = _starts(splits, get_schedule(problem.schedule).virtual_position(P, V))
    reps: dict[tuple, int] = {}
    uses: list[tuple[int, int, int]] = []  # (move, stage, representative index)
    for b, p in zip(*np.nonzero(changed)):
        key = (int(p), splits[b, :, p].tobytes(), starts[b, :, p].tobytes())
        if key not in reps:
            reps[key] = len(reps)
            uses.append((int(b), int(p), -1))
        uses.append((int(b), int(p), reps[key]))
    if not reps:
        return rec, sel, com
    rep_rows = np.asarray([b for b, p, r in uses if r < 0])
    L = splits[rep_rows]
    z = np.zeros_like(L)
    fr, fs, fc, _ = fit_recompute(problem, L, z, z, z)
    for b, p, r in uses:
        if r >= 0:
            rec[b, :, p], sel[b, :, p], com[b, :, p] = fr[r, :, p], fs[r, :, p], fc[r, :, p]
    return rec, sel, com


def local_search(problem: Problem, start: Candidate, *, max_iters: int = 200,
                 deadline: float | None = None) -> Candidate:
    """Steepest descent from ``start`` over single-layer moves with re-fitted recompute.

    The recompute of the two stages a move touches is re-fitted from zero; other stages keep theirs.
    Stops at a local optimum, after ``max_iters`` moves, or at ``deadline`` (time.monotonic()).
    """
    import time

    best = start
    if not np.isfinite(best.step_ms):
        problem.score([best])
    for _ in range(max_iters):
        if deadline is not None and time.monotonic() > deadline:
            break
        splits = _moves(problem, best)
        if splits.size == 0:
            break
        rec, sel, com = _refit_touched(problem, best, splits)
        s = problem.evaluate(best.V, splits, rec, sel, com)
        excess = np.maximum(0.0, s.peak_mib.max(axis=1) - problem.hbm_mib)
        order = np.lexsort((s.step_ms, excess))
        i = int(order[0])
        if (excess[i], s.step_ms[i]) < (max(0.0, best.excess_mib), best.step_ms - 1e-9):
            best = Candidate(best.V, splits[i], rec[i], sel[i], com[i], float(s.step_ms[i]),
                             float(s.peak_mib[i].max()), float(s.peak_mib[i].max() - problem.hbm_mib),
                             origin=f"{start.origin}+local")
        else:
            break
    return best


def heuristic_seeds(problem: Problem, *, deadline: float | None = None) -> list[Candidate]:
    """Even split with fitted recompute for every V, each improved by :func:`local_search`."""
    out = []
    for V in problem.vpp_candidates:
        ev = fitted(problem, V, even_layers(problem.N, problem.P, V)[None], origin=f"even-fit-v{V}")[0]
        out.append(ev)
        out.append(local_search(problem, ev, deadline=deadline))
    return out
