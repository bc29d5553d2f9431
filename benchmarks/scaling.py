"""Scaling benchmark (issue 17): CPU seconds, certified gap and peak RSS of the search on generated
problems over pipeline_stage P, pp_interleave_num V, micro_batch_num m and num_layers L.

    .venv/bin/python benchmarks/scaling.py --quick        # 8 problems, a few minutes
    .venv/bin/python benchmarks/scaling.py                # the full grid (31 problems)
    .venv/bin/python benchmarks/scaling.py --only P16     # problems whose name contains P16
    .venv/bin/python benchmarks/scaling.py --only "P8 V4" --only "P64 V1"   # either
    .venv/bin/python benchmarks/scaling.py --only P16 --steps   # and what each solver step earns

Problems: the frozen layer profiles of ``benchmarks/data`` (TeleChat2's dense layer, DeepSeek-V3's
dense + MoE layers with its MTP tail) stretched or cut to L layers (``ModelProfile.with_num_layers``),
one V per problem (``vpp_candidates=[V]``), recompute kinds full / select / comm. Budgets are set
from the problem itself so that every one is feasible: with ``peak_full`` / ``peak_none`` the worst
stage's peak of the even split with full / no recompute,

- ``tight``: peak_full + 0.35 · (peak_none − peak_full) (recompute must be chosen per stage);
- ``loose``: 1.05 · peak_none (no recompute needed).

Each problem runs in a fresh child process (so its peak RSS is its own) the way
``autotune search`` runs one sub-problem by default, with one BLAS thread
(:func:`autotune.tuner.threads.one_blas_thread`) and large temporaries kept in the heap
(:func:`autotune.tuner.heap.search_heap`), as :func:`autotune.api.search`: :func:`bound_and_seeds` (its deadline the
first half of the 300 s safety net) then the Optuna study (200 trials, stop at the 0.5 % certified
gap, the rest of the safety net); "(timed out)" marks a row the net cut. CPU s = user + sys of the
search (``time.process_time`` around it, imports and problem building excluded); wall s likewise;
RSS = the child's peak resident set (its own ``ru_maxrss``). The last lines fit
log(CPU s) = a + b_P·log P + b_V·log V + b_m·log m + b_L·log L by least squares.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILES = {"dense": ROOT / "benchmarks/data/telechat2_115b_profile.yaml",
            "moe": ROOT / "benchmarks/data/deepseek3_671b_profile.yaml"}


def name_of(P: int, V: int, m: int, L: int, model: str, budget: str) -> str:
    return f"P{P} V{V} m{m} L{L} {model} {budget}"


def grid(quick: bool) -> list[tuple[int, int, int, int, str, str]]:
    """(P, V, m, L, model, budget) of the problems: one factor at a time around a base point
    (P 16, V 2, m 64, L 128, dense, tight) plus the corners of the issue's targets."""
    base = dict(P=16, V=2, m=64, L=128, model="dense", budget="tight")
    if quick:
        rows = [dict(base, P=4, L=32, m=16), dict(base, P=8, L=64, m=32), dict(base),
                dict(base, V=1), dict(base, V=4), dict(base, model="moe"), dict(base, budget="loose"),
                dict(base, P=32, V=4, m=256, L=256)]
    else:
        rows = [dict(base, P=p) for p in (4, 8, 16, 32, 64)]
        rows += [dict(base, V=v) for v in (1, 3, 4)]
        rows += [dict(base, m=m) for m in (16, 32, 128, 256, 512)]
        rows += [dict(base, L=n) for n in (32, 64, 256)]
        rows += [dict(base, model=mo, budget=bu) for mo in ("dense", "moe") for bu in ("tight", "loose")
                 if (mo, bu) != ("dense", "tight")]
        rows += [dict(base, P=p, V=v, m=m, L=n, model=mo) for mo in ("dense", "moe")
                 for p, v, m, n in ((8, 4, 128, 256), (32, 4, 256, 256), (32, 2, 32, 64), (64, 2, 512, 256),
                                    (64, 1, 128, 128), (4, 3, 8, 32))]
    seen, out = set(), []
    for r in rows:
        t = (r["P"], r["V"], r["m"], r["L"], r["model"], r["budget"])
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def build(P: int, V: int, m: int, L: int, model: str, budget: str):
    """The :class:`Problem` of one grid point (module docstring)."""
    from autotune.cost.inputs import ProfileArrays
    from autotune.profile.schema import load_profile
    from autotune.tuner.problem import Problem, even_layers

    prof = load_profile(PROFILES[model]).with_num_layers(L)
    pa = ProfileArrays.from_profile(prof)
    probe = Problem(pa, P=P, m=m, vpp_candidates=[V])
    even = even_layers(L, P, V)[None]
    z = np.zeros_like(even)
    full = probe.evaluate(V, even, even, z, z, memory_only=True).peak_mib.max()
    none = probe.evaluate(V, even, z, z, z, memory_only=True).peak_mib.max()
    cap = full + 0.35 * (none - full) if budget == "tight" else 1.05 * none
    return Problem(pa, P=P, m=m, hbm_mib=float(cap), vpp_candidates=[V])


def search(problem, timeout: float | None, note=None):
    """Search ``problem`` as ``autotune search`` searches one sub-problem by default (module
    docstring): returns (:class:`~autotune.tuner.solve.BoundAndSeeds`, the study's outcome, whether
    the bound phase was cut). ``note(step, best, bound)`` is called as each solver step starts."""
    from autotune.tuner.outcome import SAFETY_TIMEOUT_S
    from autotune.tuner.runner import run_study
    from autotune.tuner.solve import bound_and_seeds, raise_with_time_left
    from autotune.tuner.heap import search_heap
    from autotune.tuner.threads import one_blas_thread

    t0 = time.monotonic()
    limit = SAFETY_TIMEOUT_S if timeout is None else timeout  # as autotune search: the safety net
    deadline = t0 + limit * 0.5  # the bound phase's half
    with one_blas_thread(), search_heap():  # as api.search
        bs = bound_and_seeds(problem, [], deadline=deadline, report=note, timed=timeout is not None)
        if note is not None:
            feas = [c.step_ms for c in bs.seeds if c.excess_mib <= 0]
            note("study", min(feas) if feas else None, bs.bound_ms)
        cut = time.monotonic() > deadline or bs.cut
        stop = bs.bound_ms * 1.005 if np.isfinite(bs.bound_ms) else None
        left = max(1.0, limit - (time.monotonic() - t0))
        out = run_study(problem, seeds=bs.seeds, n_trials=200, timeout=left, seed=0, stop_at_ms=stop,
                        bound_ms=bs.bound_ms,  # the final polish as run_studies bounds it
                        polish_deadline=None if timeout is None else time.monotonic() + left)
        if timeout is not None and cut and out.best is not None and not out.timed_out:
            # as autotune search: the time the trials left raises the bound the clock cut
            if note is not None:
                note("time left", out.best.step_ms, bs.bound_ms)
            bs = raise_with_time_left(problem, bs, out.best.step_ms, deadline=t0 + limit, target_gap=0.005)
    return bs, out, cut


def run_one(spec: tuple, timeout: float | None) -> dict:
    """Search one problem in this process (:func:`search`): the measurements of the module docstring."""
    problem = build(*spec)
    c0, t0 = time.process_time(), time.monotonic()
    steps: list[list] = []  # [step name, CPU s at its start, best fitting step ms then or None, bound ms or None]

    def note(step: str, best: float | None, bound: float | None) -> None:
        steps.append([step, time.process_time() - c0, best, bound])

    bs, out, cut = search(problem, timeout, note)
    c_bound = next(s[1] for s in steps if s[0] == "study")
    found = out.best.step_ms if out.best else float("inf")
    cpu = time.process_time() - c0
    gap = (found - bs.bound_ms) / bs.bound_ms if np.isfinite(found) and bs.bound_ms > 0 else float("nan")
    return {"found_ms": found, "bound_ms": bs.bound_ms, "gap": gap,
            "origin": out.best.origin if out.best else None,
            "steps": steps + [["end", cpu, found, bs.bound_ms]], "cpu_s": cpu,
            "bound_cpu_s": c_bound, "wall_s": time.monotonic() - t0, "trials": out.trials,
            "exact": bs.exact, "timed_out": bool(out.timed_out or cut), "hbm_mib": problem.hbm_mib}


def step_line(steps: list[list]) -> str:
    """One row's solver steps (:func:`run_one`'s ``steps``): each step's CPU s, where the best
    fitting step time fell during it by how much (-%), and where the lower bound rose during it by
    how much (bound +%; the first bound pass: "bound set"). The bound is known at the start of most
    steps only, so a rise is charged to the steps since the last known value, named by the last of
    them (the bound passes run one after the other, so that is the pass that raised it). The first
    step ("exact enumeration or even splits") is shown when it took 0.05 s or more; "study" is the
    Optuna study with its final local search."""
    out = []
    known = None  # the last bound ms seen at a step's start
    for i, ((name, t, best, _), (_, t2, best2, bound2)) in enumerate(zip(steps, steps[1:])):
        if i == 0 and t2 - t < 0.05:
            known = bound2 if bound2 is not None else known
            continue
        gain = "" if best is None or best2 is None or best2 >= best else f" (-{(best - best2) / best:.2%})"
        if bound2 is not None and (known is None or known <= 0):
            gain += " (bound set)"  # (a first proof of 0 ms, e.g. a Lagrangian the clock cut: no ratio)
        elif bound2 is not None and bound2 > known * (1 + 1e-9):
            gain += f" (bound +{(bound2 - known) / known:.2%})"
        known = bound2 if bound2 is not None else known
        out.append(f"{name} {t2 - t:.1f}s{gain}")
    return "; ".join(out)


def child(spec: tuple, timeout: float | None) -> dict:
    """Run one problem in a fresh interpreter; its measurements plus the peak RSS (MiB)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(list(spec))]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode != 0:
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.strip().splitlines()[-1])


def fit(rows: list[tuple[tuple, dict]]) -> str:
    """log-log least squares of CPU s on P, V, m, L (rows without error)."""
    X, y = [], []
    for spec, r in rows:
        if "cpu_s" in r and r["cpu_s"] > 0:
            P, V, m, L = spec[:4]
            X.append([1.0, np.log(P), np.log(V), np.log(m), np.log(L)])
            y.append(np.log(r["cpu_s"]))
    if len(y) < 6:
        return "fit: too few rows"
    coef, *_ = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)
    return (f"fit: CPU s ~ {np.exp(coef[0]):.3g} · P^{coef[1]:.2f} · V^{coef[2]:.2f} · m^{coef[3]:.2f} · "
            f"L^{coef[4]:.2f}  ({len(y)} problems)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 problems (a few minutes)")
    ap.add_argument("--only", action="append", default=None,
                    help="problems whose name contains this (repeat for several)")
    ap.add_argument("--timeout", type=float, default=None, help="--timeout of each search (s)")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--steps", action="store_true",
                    help="also print each row's solver steps: CPU s and the gain of each")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        r = run_one(tuple(json.loads(a.child)), a.timeout)
        import resource
        r["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(r))
        return
    print(f"{'problem':34s} {'CPU s':>7s} {'bound':>6s} {'wall s':>7s} {'gap':>7s} {'RSS MiB':>8s} "
          f"{'found ms':>11s} {'bound ms':>11s} {'trials':>6s}", flush=True)
    rows = []
    for spec in grid(a.quick):
        nm = name_of(*spec)
        if a.only and not any(o in nm for o in a.only):
            continue
        r = child(spec, a.timeout)
        rows.append((spec, r))
        if "error" in r:
            print(f"{nm:34s} error: {r['error']}", flush=True)
            continue
        flag = " (timed out)" if r["timed_out"] else (" exact" if r["exact"] else "")
        print(f"{nm:34s} {r['cpu_s']:7.1f} {r['bound_cpu_s']:6.1f} {r['wall_s']:7.1f} {r['gap']:7.2%} "
              f"{r['rss_mib']:8.0f} {r['found_ms']:11.1f} {r['bound_ms']:11.1f} {r['trials']:6d}{flag}",
              flush=True)
        if a.steps:
            print(f"    {step_line(r['steps'])}", flush=True)
    gaps = [r["gap"] for _, r in rows if "gap" in r and np.isfinite(r["gap"])]
    cpus = [r["cpu_s"] for _, r in rows if "cpu_s" in r]
    if gaps:
        print(f"median gap {np.median(gaps):.2%}, worst {max(gaps):.2%}; CPU s median {np.median(cpus):.1f}, "
              f"worst {max(cpus):.1f}")
    print(fit(rows))
    if a.json:
        Path(a.json).write_text(json.dumps([{"problem": name_of(*s), **r} for s, r in rows], indent=1))


if __name__ == "__main__":
    main()
