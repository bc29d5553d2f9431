"""Where the one-stay bounds lose (issue 17): the stage DP's relaxed optimum, run as a layout.

    .venv/bin/python benchmarks/bound_gap.py            # the three problems of docs/search.md
    .venv/bin/python benchmarks/bound_gap.py --only P8  # those whose name contains P8

For each problem: the stage DP's bound (:func:`autotune.tuner.bounds.stage_dp.stage_dp_bound`,
the search's answer as its incumbent ``upper_ms``) and its relaxed best layer split; that split
with the exact recompute fit (:class:`autotune.tuner.fit.ExactFit`), simulated; its longest
one-stay path (the family the stage DP prices: a path that walks one stage's program, reaching
and leaving it along one micro-batch's dependency chains) under its own durations; and where its
critical path (:func:`autotune.tuner.bounds.critical_path`) stays: its forward + backward ops per
stage. On each problem the split is within 1 % of the bound on its own one-stay paths and runs
24-33 % slower, on a path that stays on two stages (docs/search.md, the round headed "single-stage
configs and large Pareto tables made cheap").
Pure numpy; about a minute in all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autotune.cost.simulate import compile_schedule  # noqa: E402
from autotune.tuner.bounds._paths import critical_path, one_stay_counts  # noqa: E402
from autotune.tuner.bounds.stage_dp import stage_dp_bound  # noqa: E402
from autotune.tuner.fit import ExactFit, fitted  # noqa: E402
from autotune.tuner.problem import Problem  # noqa: E402
import scaling  # noqa: E402  (benchmarks/scaling.py: the generated problems)
import search_quality  # noqa: E402  (benchmarks/search_quality.py: the balancer-shaped ones)


def problems() -> dict[str, tuple[Problem, float]]:
    """name -> (problem, the search's answer in ms: the stage DP's incumbent)."""
    less = search_quality.problems()["96L pp16 vpp2 m32 less-mem"][0]
    return {"96L pp16 vpp2 m32 less-memory (search_quality.py)": (less, 13885.448471591433),
            "P8 V2 m64 L128 dense tight (scaling.py)": (scaling.build(8, 2, 64, 128, "dense", "tight"), 62534.9),
            "P16 V2 m64 L64 dense tight (scaling.py)": (scaling.build(16, 2, 64, 64, "dense", "tight"), 18574.5)}


def report(name: str, problem: Problem, answer_ms: float) -> None:
    """Print the measurements of the module docstring for one problem."""
    V = int(problem.vpp_candidates[0])
    res = stage_dp_bound(problem, V, upper_ms=answer_ms)
    if res is None or res.split is None:
        print(f"{name}: the stage DP does not apply")
        return
    cand = fitted(problem, V, res.split[None], "stage-dp-split", fit=ExactFit())[0]
    cs = compile_schedule(problem.schedule, problem.P, V, problem.m, problem.seq_split_num)
    costs = problem.costs(V, cand.layers[None], cand.rec[None], cand.sel[None], cand.com[None])
    f, b = costs.fwd_ms[0], costs.bwd_ms[0]
    p2p = problem.pa.p2p_ms
    one_stay = [max(float((cf * f).sum() + (cb * b).sum() + h * p2p) for cf, cb, h in rows)
                for rows in one_stay_counts(cs)]
    cp = critical_path(cs, f, b, p2p)
    ops = (cp.cf + cp.cb).sum(axis=0).astype(int)
    print(f"{name}")
    print(f"  stage DP bound {res.bound_ms:,.1f} ms (answer {answer_ms:,.1f})")
    for v in range(V):
        print(f"  relaxed split, chunk {v}: {' '.join(str(int(x)) for x in res.split[v])}")
    print(f"  fitted: step {cand.step_ms:,.1f} ms, memory excess {cand.excess_mib:,.1f} MiB, longest one-stay "
          f"path {max(one_stay):,.1f} ms (stage {int(np.argmax(one_stay))})")
    print(f"  critical path: {cp.length:,.1f} ms, ops per stage {' '.join(map(str, ops))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="problems whose name contains this")
    args = ap.parse_args()
    for name, (problem, answer) in problems().items():
        if args.only is None or args.only in name:
            report(name, problem, answer)


if __name__ == "__main__":
    main()
