"""Stay families (issue 17): how high can a bound that prices paths staying on few stages go?

    .venv/bin/python benchmarks/stay_families.py --list
    .venv/bin/python benchmarks/stay_families.py --only "P16 V2 m64 L128 dense loose"
    .venv/bin/python benchmarks/stay_families.py --only "P16 V2" --k 3 --json stays.json

A path of the schedule's dependency graph (cost-model reference §6.1) is a chain of ops joined by
data edges (one micro-batch's op on the next or previous pipeline position, + p2p across stages)
and program-order edges (the next op of the same stage). A *stay* is a maximal run of
program-order edges. The one-stay paths (a micro-batch's dependency chain into a stage, a walk
along that stage's program, a dependency chain out) are the family the stage DP, the device DP,
the wrap-pair DP's stays and the local search's step floors price; the integer program and the
path LP price any path, but on fractional or lazily grown families.

:func:`stay_lengths` gives, for one layout, the longest path with at most k stays for k = 0..K
(k = 0: one micro-batch's chain; k large: the simulated step time). A bound that prices only paths
of at most k stays can never exceed the least, over the layouts that fit, of their longest k-stay
path: one fitting layout whose k-stay paths are all short caps every such bound (its *family
limit*), however exactly the bound prices that family.

For each problem (a ``benchmarks/scaling.py`` grid row or a ``benchmarks/search_quality.py``
problem, ``--only`` a part of its name): the default search's answer and bound
(:func:`search_quality.search`), then the stage DP's relaxed split
(:func:`autotune.tuner.bounds.stage_dp.stage_dp_bound` on the answer's pp_interleave_num with the
answer as incumbent; V > 1 only, the stage DP does not apply to V = 1) fitted with the exact
recompute fit (:class:`autotune.tuner.fit.ExactFit`), then the descents of ``--descend`` from each
of them that fits. For every layout it prints the step time and the longest path with at most
1..K stays. The least k-stay value over the layouts that fit caps every bound over paths of at
most k stays of that V; the last line says what certified gap each such limit leaves at best (on
the fastest fitting layout met, the answer unless a descent found a faster one). Pure numpy and
Python: 9–150 CPU s a problem on
the rows of docs/search.md (pp <= 32, m <= 128, ``--descend 2``: a two-stay descent costs about a
second a move on pp 16 × vpp 2 × m 64 and grows with ops × neighbours, ~100 s a move and ~0.8 GB
a batch on pp 32 × vpp 4 × m 256).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autotune.cost.budget import fits  # noqa: E402
from autotune.cost.simulate import CompiledSchedule, compile_schedule  # noqa: E402
from autotune.cost.inputs import StageCosts  # noqa: E402
from autotune.tuner.bounds.stage_dp import stage_dp_bound  # noqa: E402
from autotune.tuner.fit import ExactFit, fitted  # noqa: E402
from autotune.tuner.moves import _one_stay_arrays, single_moves  # noqa: E402
from autotune.tuner.problem import Candidate, Problem  # noqa: E402

#: Layouts per :func:`stay_lengths` batch in :func:`layout_stays`.
BATCH = 256


def stay_lengths(cs: CompiledSchedule, fwd_ms: np.ndarray, bwd_ms: np.ndarray, p2p_ms: float,
                 k_max: int, stay_on: np.ndarray | None = None) -> np.ndarray:
    """float [k_max + 1] ms (or [B, k_max + 1] for a batch): entry k is the longest path of the
    dependency graph with at most k stays (maximal runs of program-order edges) for mini-stage
    durations ``fwd_ms``, ``bwd_ms`` float [V, P] or [B, V, P] (ms per micro-batch, backward with
    its replay) and ``p2p_ms`` per cross-stage data edge. Entry 0 is the longest dependency chain;
    with k_max >= the number of ops the last entry is the longest path, i.e. the simulated step
    time. A DP over the ops in topological order with state (stays so far, whether the last edge
    was program order); memory ~16 · ops · B · (k_max + 1) bytes.

    ``stay_on`` bool [B, P] (or [P]: the same for every layout): only paths whose stays all lie on
    the stages marked in row b count for batch entry b (program-order edges into ops of other
    stages are left out); with [V, P] durations and a [B, P] mask, the one layout is measured
    under every row of the mask (:func:`pair_stays`).

    Raises:
        ValueError: the schedule splits the backward (B/W ops), k_max < 0, durations not of shape
            [V, P] / [B, V, P] (both the same), or a mask not of shape [P] / [B, P].
    """
    if cs.split_bw:
        raise ValueError("stay_lengths needs a schedule that runs the whole backward as one op")
    if k_max < 0:
        raise ValueError(f"k_max {k_max}: give 0 or more stays")
    f, b = np.asarray(fwd_ms, dtype=np.float64), np.asarray(bwd_ms, dtype=np.float64)
    if f.shape != b.shape or f.ndim not in (2, 3) or f.shape[-2:] != (cs.V, cs.P):
        raise ValueError(f"durations of shape {f.shape} / {b.shape}: give [V, P] = [{cs.V}, {cs.P}] "
                         "or [B, V, P], both the same")
    single = f.ndim == 2
    f, b = f.reshape(-1, cs.V, cs.P), b.reshape(-1, cs.V, cs.P)
    mask = None
    if stay_on is not None:
        mask = np.asarray(stay_on, dtype=bool)
        if mask.ndim not in (1, 2) or mask.shape[-1] != cs.P:
            raise ValueError(f"stay_on of shape {mask.shape}: give [P] or [B, P] with P = {cs.P}")
        single = single and mask.ndim == 1
        mask = mask.reshape(-1, cs.P)
        if f.shape[0] == 1 and mask.shape[0] > 1:
            f, b = np.repeat(f, mask.shape[0], axis=0), np.repeat(b, mask.shape[0], axis=0)
        if mask.shape[0] == 1 and f.shape[0] > 1:
            mask = np.repeat(mask, f.shape[0], axis=0)  # one mask for every layout
        if mask.shape[0] != f.shape[0]:
            raise ValueError(f"stay_on has {mask.shape[0]} rows for {f.shape[0]} layouts")
    B, K1 = f.shape[0], k_max + 1
    topo, dep, prev, cross = cs._scalar
    n = cs.num_ops
    d = (np.where(cs.fwd[None, :], f[:, cs.chunk, cs.stage], b[:, cs.chunk, cs.stage]) / cs.k).T.copy()  # [n, B]
    # out[i]: longest paths ending at op i, per number of stays, whose last edge is a data edge (or
    # that start at i); run[i]: ... whose last edge is a program-order edge (inside their last stay)
    out = np.full((n + 1, B, K1), -np.inf)
    run = np.full((n + 1, B, K1), -np.inf)
    start = np.full((B, K1), -np.inf)
    start[:, 0] = 0.0
    for i, dp_, pr, c in zip(topo, dep, prev, cross):
        o = start if dp_ >= n else np.maximum(start, np.maximum(out[dp_], run[dp_]) + c * p2p_ms)
        di = d[i][:, None]
        out[i] = o + di
        if pr < n:
            r = run[i]
            r[:, 1:] = np.maximum(run[pr][:, 1:], out[pr][:, :-1]) + di
            if mask is not None:
                r[~mask[:, cs.stage[i]]] = -np.inf
    best = np.maximum.accumulate(np.maximum(out[:n].max(axis=0), run[:n].max(axis=0)), axis=1)
    return best[0] if single else best


def pair_stays(cs: CompiledSchedule, fwd_ms: np.ndarray, bwd_ms: np.ndarray, p2p_ms: float) -> np.ndarray:
    """float [P, P] ms, symmetric: entry (p, q) is the longest path with at most two stays, each on
    stage p or stage q (entry (p, p): both on p, which is at least p's longest one-stay path), for one
    layout's durations ``fwd_ms``, ``bwd_ms`` float [V, P] (ms per micro-batch). The largest entry
    is :func:`stay_lengths`' entry 2 (every path of at most two stays stays on at most two stages).
    Where the two-stay value sits says which stages a bound must couple to price it. Cost: P(P+1)/2
    batch rows of :func:`stay_lengths` at k = 2.

    Raises:
        ValueError: as :func:`stay_lengths`.
    """
    P = cs.P
    ps, qs = np.triu_indices(P)
    mask = np.zeros((ps.size, P), dtype=bool)
    mask[np.arange(ps.size), ps] = True
    mask[np.arange(ps.size), qs] = True
    val = stay_lengths(cs, fwd_ms, bwd_ms, p2p_ms, 2, stay_on=mask)[:, 2]
    out = np.empty((P, P))
    out[ps, qs] = val
    out[qs, ps] = val
    return out


def pair_summary(table: np.ndarray) -> dict:
    """What :func:`pair_stays`' table [P, P] says: the longest pair (``pair``: [p, q], p <= q, and
    its ``ms``), the longest two-stay path with a stay on the first or the last stage (``ends_ms``:
    row 0 and column P - 1) and the longest with both stays elsewhere (``inner_ms``; -inf for
    P <= 2)."""
    P = table.shape[0]
    ps, qs = np.triu_indices(P)
    j = int(np.argmax(table[ps, qs]))
    p, q = ps[j], qs[j]
    inner = table[1:P - 1, 1:P - 1]
    return {"pair": [int(p), int(q)], "ms": float(table[p, q]),
            "ends_ms": float(max(table[0].max(), table[:, P - 1].max())),
            "inner_ms": float(inner.max()) if inner.size else float("-inf")}


def _one_v(cands: list[Candidate]) -> int:
    """The V of a non-empty list of layouts that all have it (ValueError otherwise)."""
    Vs = {c.V for c in cands}
    if len(Vs) != 1:
        raise ValueError(f"give layouts of one pp_interleave_num, not {sorted(Vs) or 'none'}")
    return Vs.pop()


def _costs(problem: Problem, V: int, cands: list[Candidate]) -> StageCosts:
    """The cost model's mini-stage costs of layouts with pp_interleave_num V ([B, V, P] arrays)."""
    L, R, S, C = (np.stack([getattr(c, k) for c in cands]) for k in ("layers", "rec", "sel", "com"))
    return problem.costs(V, L, R, S, C)


def layout_stays(problem: Problem, cands: list[Candidate], k_max: int) -> np.ndarray:
    """float [B, k_max + 1] ms: :func:`stay_lengths` of layouts of ``problem`` with one V (their
    own durations: layers and recompute), in batches of :data:`BATCH`. Raises ValueError for no
    layouts, several V or a schedule that splits the backward."""
    V = _one_v(cands)
    cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
    out = []
    for at in range(0, len(cands), BATCH):
        costs = _costs(problem, V, cands[at:at + BATCH])
        out.append(stay_lengths(cs, costs.fwd_ms, costs.bwd_ms, problem.pa.p2p_ms, k_max))
    return np.concatenate(out)


def one_stay_max(problem: Problem, cands: list[Candidate]) -> np.ndarray:
    """float [B] ms: each layout's longest one-stay path (every path of
    :func:`autotune.tuner.bounds._paths.one_stay_counts`, exact counts, the layout's durations, as
    the search's step floors stack them: :func:`autotune.tuner.moves._one_stay_arrays`). Equal to
    :func:`stay_lengths`' entry 1 (tested).

    Raises:
        ValueError: no layouts, several V, or a schedule that splits the backward.
    """
    V = _one_v(cands)
    CF, CB, H, _ = _one_stay_arrays(problem, V)  # [Q, V, P] counts, hops [Q]
    costs = _costs(problem, V, cands)
    B, Q = len(cands), CF.shape[0]
    return (costs.fwd_ms.reshape(B, -1) @ CF.reshape(Q, -1).T + costs.bwd_ms.reshape(B, -1) @ CB.reshape(Q, -1).T
            + H[None, :] * problem.pa.p2p_ms).max(axis=1)


def stay_max(problem: Problem, cands: list[Candidate], k: int) -> np.ndarray:
    """float [B] ms: each layout's longest path with at most k stays (k = 1: :func:`one_stay_max`,
    a matrix product; else :func:`layout_stays`)."""
    return one_stay_max(problem, cands) if k == 1 else layout_stays(problem, cands, k)[:, k]


def stay_descent(problem: Problem, start: Candidate, k: int, max_steps: int = 200) -> Candidate:
    """A fitting layout whose longest path with at most k stays is short: from ``start`` (fitting),
    moves of one layer between two mini-stages, each split re-fitted with :class:`ExactFit`; moves
    to the fitting neighbour with the least :func:`stay_max` while that falls (at most
    ``max_steps`` moves; the moves are the search's :func:`autotune.tuner.moves.single_moves`).
    Returns the last layout (``start`` when no move helps).

    Raises:
        ValueError: ``start`` does not fit the HBM budget.
    """
    if not fits(start.peak_mib, problem.hbm_mib):
        raise ValueError("the descent starts from a layout that fits the HBM budget")
    V = start.V
    cur, cur_ms = start, float(stay_max(problem, [start], k)[0])
    for _ in range(max_steps):
        X = single_moves(problem, cur)
        if X.shape[0] == 0:
            break
        cands = [c for c in fitted(problem, V, X, f"{k}-stay-descent", fit=ExactFit())
                 if fits(c.peak_mib, problem.hbm_mib)]
        if not cands:
            break
        val = stay_max(problem, cands, k)
        i = int(np.argmin(val))
        if not val[i] < cur_ms - 1e-9 * cur_ms:
            break
        cur, cur_ms = cands[i], float(val[i])
    return cur


def stage_dp_witness(problem: Problem, answer: Candidate) -> tuple[float, Candidate] | None:
    """(the stage DP's bound ms, its relaxed split fitted with :class:`ExactFit`, scored) on the
    answer's pp_interleave_num with the answer's step time as incumbent; None where the stage DP
    does not apply or returns no split."""
    res = stage_dp_bound(problem, answer.V, upper_ms=answer.step_ms)
    if res is None or res.split is None:
        return None
    return res.bound_ms, fitted(problem, answer.V, res.split[None], "stage-dp-split", fit=ExactFit())[0]


def measure(problem: Problem, k_max: int, descend: int = 1, pairs: bool = False) -> dict | None:
    """The module docstring's measurements for one problem as a dict (None when the search finds
    no layout that fits):
    the answer, the stage DP's fitted split and, for k = 1..``descend``, :func:`stay_descent` on
    the k-stay paths from each of the two; ``limit_ms[k]`` is the least k-stay longest path over
    the fitting layouts met (a cap on every bound that prices paths of at most k stays) and
    ``best_ms`` the fastest fitting layout met (the answer, unless a descent found a faster one).
    With ``pairs`` each layout also gets :func:`pair_summary` of its :func:`pair_stays` table
    (``pairs``), and ``ends_limit_ms`` is the least, over the fitting layouts met, of the longest
    path that stays on one stage or on two of which one is the first or the last stage: a cap on
    every bound over that family."""
    import primal_probe
    c0 = time.process_time()
    best, bound = primal_probe.answer(problem)
    if best is None or not fits(best.peak_mib, problem.hbm_mib):
        return None
    layouts: list[tuple[str, Candidate]] = [("answer", best)]
    row: dict = {"V": best.V, "answer_ms": best.step_ms, "bound_ms": bound}
    wit = stage_dp_witness(problem, best)
    if wit is not None:
        row["stage_dp_ms"] = wit[0]
        layouts.append((f"stage DP split (DP {wit[0]:,.1f} ms)", wit[1]))
    starts = [(name, c) for name, c in layouts if fits(c.peak_mib, problem.hbm_mib)]
    for k in range(1, descend + 1):
        for name, c in starts:
            layouts.append((f"{k}-stay descent from the {name.split(' (')[0]}", stay_descent(problem, c, k)))
    stays = np.concatenate([layout_stays(problem, [c], k_max) for _, c in layouts])
    ok = np.array([bool(fits(c.peak_mib, problem.hbm_mib)) for _, c in layouts])
    row["layouts"] = [{"name": name, "fits": bool(f), "step_ms": c.step_ms, "layers": c.layers.tolist(),
                       "stays_ms": st.tolist()} for (name, c), f, st in zip(layouts, ok, stays)]
    row["limit_ms"] = stays[ok].min(axis=0).tolist()
    if pairs:
        cs = compile_schedule(problem.schedule, problem.P, best.V, problem.m, problem.seq_split_num)
        for lay, (_, c) in zip(row["layouts"], layouts):
            costs = _costs(problem, c.V, [c])
            lay["pairs"] = pair_summary(pair_stays(cs, costs.fwd_ms[0], costs.bwd_ms[0], problem.pa.p2p_ms))
        row["ends_limit_ms"] = min(max(lay["pairs"]["ends_ms"], lay["stays_ms"][1])
                                   for lay in row["layouts"] if lay["fits"])
    row["best_ms"] = min(c.step_ms for (_, c), f in zip(layouts, ok) if f)
    row["cpu_s"] = time.process_time() - c0
    return row


def main() -> None:
    import primal_probe

    ap = argparse.ArgumentParser(description="Longest paths with at most k stays (module docstring).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    primal_probe.add_problem_args(ap)
    ap.add_argument("--k", type=int, default=3, help="the most stays K")
    ap.add_argument("--descend", type=int, default=1,
                    help="descend on the longest path of at most k stays for k = 1..this, at most --k "
                         "(0: none; k >= 2 costs about a second a move on pp 16 x vpp 2 x m 64, "
                         "~100 s on pp 32 x vpp 4 x m 256)")
    ap.add_argument("--pairs", action="store_true",
                    help="also say, per layout, which two stages hold its longest two-stay path ('2-stay on'), "
                         "the longest with a stay on the first or the last stage ('ends') and the longest "
                         "with both stays on other stages ('inner') (P(P+1)/2 two-stay walks a layout)")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args()
    if not 1 <= a.k <= 8:
        ap.error(f"--k {a.k}: give 1 to 8 stays (memory grows with it)")
    if a.descend < 0:
        ap.error(f"--descend {a.descend}: give 0 or more")
    stays = " ".join(f"{f'{k}-stay ms':>11s}" for k in range(1, a.k + 1))
    rows = []
    for name, problem in primal_probe.chosen_problems(ap, a):
        row = measure(problem, a.k, min(a.descend, a.k), pairs=a.pairs)
        if row is None:
            print(f"{name}: no layout that fits found", flush=True)
            continue
        row["problem"] = name
        rows.append(row)
        ans = row["answer_ms"]
        print(f"{name} (V {row['V']}): answer {ans:,.1f} ms, bound {row['bound_ms']:,.1f} ms "
              f"(gap {ans / row['bound_ms'] - 1:.2%}), {row['cpu_s']:.1f} CPU s")
        extra = f" {'2-stay on':>10s} {'ends ms':>11s} {'inner ms':>11s}" if a.pairs else ""
        print(f"  {'layout':40s} {'fits':>5s} {'step ms':>11s} {stays}{extra}")
        for lay in row["layouts"]:
            pr = lay.get("pairs")
            extra = (f" {'%d, %d' % tuple(pr['pair']):>10s} {pr['ends_ms']:11.1f} {pr['inner_ms']:11.1f}"
                     if pr else "")
            print(f"  {lay['name']:40s} {'yes' if lay['fits'] else 'no':>5s} {lay['step_ms']:11.1f} "
                  + " ".join(f"{x:11.1f}" for x in lay["stays_ms"][1:]) + extra)
        top = row["best_ms"]
        if top < ans:
            print(f"  a descent found a faster layout than the answer: {top:,.1f} ms")
        print("  no bound over paths of at most k stays can exceed: "
              + ", ".join(f"k {k}: {x:,.1f} ms (gap >= {top / x - 1:.2%})" for k, x in enumerate(row["limit_ms"])
                          if k >= 1), flush=True)
        if a.pairs:
            print(f"  ... nor one over paths on one stage or on two with the first or the last: "
                  f"{row['ends_limit_ms']:,.1f} ms (gap >= {top / row['ends_limit_ms'] - 1:.2%})", flush=True)
        print()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
