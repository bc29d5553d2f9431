"""Primal probe (issue 17): is a problem's certified gap on the answer's side or on the bound's?

    .venv/bin/python benchmarks/primal_probe.py --list
    .venv/bin/python benchmarks/primal_probe.py --only "P32 V4 m256 L256 moe tight"
    .venv/bin/python benchmarks/primal_probe.py --only "96L pp16 vpp2 m32 less-mem" --rounds 4000
    .venv/bin/python benchmarks/primal_probe.py --only "P8 V2" --json probe.json

Each problem (a ``benchmarks/scaling.py`` grid row or a ``benchmarks/search_quality.py`` problem,
``--only`` a part of its name) is searched as ``autotune search`` searches it by default
(:func:`autotune.tuner.solve.bound_and_seeds`, then the study: 200 trials, stop at the 0.5 %
certified gap). From the answer, :func:`probe` then runs a long simulated annealing on the cost
model itself, far past what the search spends, with the answer's pp_interleave_num fixed (another
V is not probed): each round draws a batch of random neighbours (one layer moved between two
mini-stages; one full / select / comm count of one mini-stage ±1; both at once), keeps those
within the mini-stages' layer bounds that are another layout than the state, and scores them with
:meth:`~autotune.tuner.problem.Problem.evaluate` (the simulated step time and peak, no surrogate).
The state moves to the fastest neighbour that fits the HBM budget when it is faster; else every
neighbour takes the Metropolis test exp(−Δ / T) on its own and the state moves to a random one
that passed (T falls linearly from 0.3 % of the answer's step time to 0; ``--t0``). Seeded and
counted in rounds, not seconds: the same seed gives the same walk.

It prints the answer, the probe's best, the bound, the certified gap before and after ("gap",
"after") and the CPU s (user + sys) of the search and of the probe. A probe that finds nothing
faster in millions of layouts says that the answer is locally robust far beyond the search's own
1-opt finish, so the certified gap is most likely the bound's; a probe that gains says that the
search leaves time on the table. It proves nothing either way: a better layout may lie farther
away.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autotune.cost.budget import fits  # noqa: E402
from autotune.tuner.problem import Candidate, Problem, improves  # noqa: E402

#: Neighbours drawn per round (those out of bounds or equal to the state are not scored).
BATCH = 512
#: Start temperature, as a fraction of the start layout's step time.
T0_FRACTION = 0.003
_KIND_ROW = {"full": 1, "select": 2, "comm": 3}


@dataclass
class ProbeResult:
    """What :func:`probe` found: the fastest fitting layout met (``best``, scored; the start
    itself when nothing was faster), the rounds run, the layouts scored (duplicates included) and
    the moves to a slower layout taken (``uphill``)."""

    best: Candidate
    rounds: int
    evaluations: int
    uphill: int = 0


def _neighbours(state: np.ndarray, kinds: list[int], lo: np.ndarray, hi: np.ndarray,
                rng: np.random.Generator, k: int) -> np.ndarray:
    """int [k', 4, V, P]: random neighbours of ``state`` [4, V, P] (layers, full, select, comm
    counts; select / comm at or below full written as 0) drawn ``k`` times, those whose layer
    counts lie within [lo, hi] and that differ from ``state``; counts stay in [0, layers]."""
    _, V, P = state.shape
    X = np.repeat(state[None], k, axis=0)
    rows = np.arange(k)
    r = rng.random(k)
    v1, p1 = rng.integers(V, size=k), rng.integers(P, size=k)
    v2, p2 = rng.integers(V, size=k), rng.integers(P, size=k)
    move = r < 0.6  # a layer moves (0.4-0.6: and a recompute count changes)
    X[rows[move], 0, v1[move], p1[move]] -= 1
    X[rows[move], 0, v2[move], p2[move]] += 1
    tweak = r >= 0.4
    if kinds:
        kind = np.asarray(kinds)[rng.integers(len(kinds), size=k)]
        side = rng.random(k) < 0.5
        va, pa = np.where(side, v1, v2), np.where(side, p1, p2)
        r_, k_, v_, p_ = rows[tweak], kind[tweak], va[tweak], pa[tweak]
        cnt = X[r_, k_, v_, p_]
        # a select / comm count is an end position: 0 (none) stands for the full count, so +1 after
        # full layers adds the first select / comm layer after them
        cnt = np.where(k_ >= 2, np.maximum(cnt, X[r_, 1, v_, p_]), cnt)
        X[r_, k_, v_, p_] = cnt + rng.choice([-1, 1], size=k)[tweak]
    X[:, 1:] = np.clip(X[:, 1:], 0, X[:, :1])
    # a select or comm count at or below the full count recomputes nothing more (autotune/tuner/
    # recompute.py): write it as 0, so that one layout has one form
    X[:, 2:] = np.where(X[:, 2:] <= X[:, 1:2], 0, X[:, 2:])
    ok = (X[:, 0] >= lo).all(axis=(1, 2)) & (X[:, 0] <= hi).all(axis=(1, 2))
    X = X[ok]
    return X[(X != state[None]).any(axis=(1, 2, 3))]


def probe(problem: Problem, start: Candidate, *, rounds: int = 2000, seed: int = 0,
          batch: int = BATCH, t0_fraction: float = T0_FRACTION) -> ProbeResult:
    """Simulated annealing from ``start`` (a fitting layout of ``problem``) on the cost model: the
    module docstring's moves, ``rounds`` rounds of ``batch`` neighbours, seeded by ``seed``. A
    round moves to its fastest neighbour when that one is faster than the state; else every
    neighbour takes the Metropolis test at temperature T = ``t0_fraction`` × the start's step time
    × (1 − round / rounds) on its own, and the state moves to a random one that passed (none: it
    stays).

    Returns :class:`ProbeResult`; its ``best`` fits the budget and is never slower than ``start``.

    Raises:
        ValueError: ``start`` does not fit the budget.
    """
    V = start.V
    lo, hi = problem.bounds(V)
    kinds = [_KIND_ROW[k] for k in problem.kinds]
    rng = np.random.default_rng(seed)

    def score(X: np.ndarray) -> np.ndarray:
        s = problem.evaluate(V, X[:, 0], X[:, 1], X[:, 2], X[:, 3])
        return np.where(fits(s.peak_mib.max(axis=1), problem.hbm_mib), s.step_ms, np.inf)

    cur = np.stack([start.layers, start.rec, start.sel, start.com]).astype(np.int64)
    cur[2:] = np.where(cur[2:] <= cur[1:2], 0, cur[2:])  # the neighbours' form (_neighbours)
    start_ms = cur_ms = float(score(cur[None])[0])
    if not np.isfinite(cur_ms):
        raise ValueError("the probe starts from a layout that fits the HBM budget")
    best, best_ms, evals, uphill = cur.copy(), cur_ms, 0, 0
    t0 = t0_fraction * cur_ms
    for i in range(rounds):
        X = _neighbours(cur, kinds, lo, hi, rng, batch)
        if not len(X):
            continue
        ms = score(X)
        evals += len(X)
        temp = t0 * (1.0 - i / rounds)
        if ms.min() < cur_ms:  # the fastest neighbour when one is faster
            j = int(np.argmin(ms))
        else:  # else each neighbour passes the Metropolis test on its own; a random one that passed
            with np.errstate(over="ignore", invalid="ignore"):
                accept = np.exp(-(ms - cur_ms) / max(temp, 1e-300))
            passed = np.flatnonzero(np.isfinite(ms) & (rng.random(len(ms)) < accept))
            if not passed.size:
                continue
            j = int(rng.choice(passed))
            uphill += bool(ms[j] > cur_ms)
        cur, cur_ms = X[j], float(ms[j])
        if cur_ms < best_ms:
            best, best_ms = cur.copy(), cur_ms
    if improves(best_ms, start_ms):
        out = problem.score([Candidate(V, best[0], best[1], best[2], best[3], origin="probe")])[0]
        if fits(out.peak_mib, problem.hbm_mib) and improves(out.step_ms, start_ms):
            return ProbeResult(out, rounds, evals, uphill)
    return ProbeResult(start, rounds, evals, uphill)


def problems() -> dict[str, Problem | tuple]:
    """name -> problem: every ``search_quality.py`` problem, and every ``scaling.py`` grid row as
    its spec tuple (built by ``scaling.build`` when chosen)."""
    import scaling
    import search_quality
    out: dict[str, Problem | tuple] = {scaling.name_of(*spec): spec for spec in scaling.grid(False)}
    out.update({name: pr for name, (pr, _enum) in search_quality.problems().items()})
    return out


def print_names(names) -> None:
    """Print one problem name a line (``--list``); a reader that stops early (``| head``) ends the
    output quietly instead of with a BrokenPipeError traceback (Python docs, "Note on SIGPIPE")."""
    try:
        print("\n".join(names), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush


def add_problem_args(ap: argparse.ArgumentParser) -> None:
    """The ``--only`` / ``--list`` options of the benchmarks that run :func:`problems` by name."""
    ap.add_argument("--only", action="append", default=[],
                    help="problems whose name contains this (repeat for several; --list shows the names)")
    ap.add_argument("--list", action="store_true", help="print the problem names and exit")


def chosen_problems(ap: argparse.ArgumentParser, a: argparse.Namespace):
    """(name, problem) of each :func:`problems` entry whose name contains an ``--only`` part, built
    one at a time as the caller iterates (a grid row by ``scaling.build``). With ``--list`` it
    prints the names (:func:`print_names`) and yields nothing; with no match it exits through
    ``ap.error`` (exit 2) before the first problem."""
    import scaling
    names = problems()
    if a.list:
        print_names(names)
        return
    chosen = [n for n in names if any(o in n for o in a.only)]
    if not chosen:
        ap.error(f"no problem name contains {' or '.join(map(repr, a.only))}; --list shows them" if a.only
                 else "give --only NAME (a part of a problem's name; --list shows them)")
    for name in chosen:
        spec = names[name]
        yield name, (scaling.build(*spec) if isinstance(spec, tuple) else spec)


def answer(problem: Problem) -> tuple[Candidate | None, float]:
    """The default search's answer (scored; None when no layout that fits was found) and its bound
    (ms), as ``search_quality.run`` runs it (:func:`search_quality.search`)."""
    import search_quality
    out, bs = search_quality.search(problem)
    return out.best, bs.bound_ms


def main() -> None:
    ap = argparse.ArgumentParser(description="A simulated annealing from the search's answer (module docstring).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_problem_args(ap)
    ap.add_argument("--rounds", type=int, default=2000, help="annealing rounds")
    ap.add_argument("--seed", type=int, default=0, help="the annealing's generator seed")
    ap.add_argument("--t0", type=float, default=T0_FRACTION, help="start temperature / the answer's step time")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args()
    rows = []
    header = (f"{'problem':36s} {'answer ms':>11s} {'probe ms':>11s} {'bound ms':>11s} {'gap':>7s} {'after':>7s} "
              f"{'search s':>8s} {'probe s':>8s} {'layouts':>9s}")
    for i, (name, problem) in enumerate(chosen_problems(ap, a)):
        if i == 0:
            print(header)
        c0 = time.process_time()
        best, bound = answer(problem)
        c1 = time.process_time()
        if best is None:
            print(f"{name:36s} no layout that fits found: nothing to probe", flush=True)
            continue
        res = probe(problem, best, rounds=a.rounds, seed=a.seed, t0_fraction=a.t0)
        c2 = time.process_time()
        row = {"problem": name, "answer_ms": best.step_ms, "probe_ms": res.best.step_ms, "bound_ms": bound,
               "gap": best.step_ms / bound - 1, "gap_after": res.best.step_ms / bound - 1,
               "search_cpu_s": c1 - c0, "probe_cpu_s": c2 - c1, "layouts": res.evaluations, "uphill": res.uphill,
               "V": best.V}
        rows.append(row)
        print(f"{name:36s} {row['answer_ms']:11.1f} {row['probe_ms']:11.1f} {bound:11.1f} {row['gap']:7.2%} "
              f"{row['gap_after']:7.2%} {row['search_cpu_s']:8.1f} {row['probe_cpu_s']:8.1f} {res.evaluations:9d}",
              flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
