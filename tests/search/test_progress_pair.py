"""The 1F1B pair path (hand-counted), the deterministic default budget and the progress output."""

from __future__ import annotations

import pytest
import numpy as np

from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._paths import pair_cycle
from tests.search.test_exact_bounds import syn2_problem


def test_pair_cycle_1f1b_p2_m4() -> None:
    # stage 0: F0 F1 B0 F2 B1 F3 B2 B3; stage 1: F0 B0 F1 B1 F2 B2 F3 B3.
    # path: F0(s) -> F0 B0 (L) -> B0(s) -> F2(s) -> F2 B2 (L) -> B2(s) -> B3(s)
    assert pair_cycle(compile_schedule("1f1b", 2, 1, 4)) == (2, 3, 2, 2, 4)


def test_pair_cycle_bounds_a_balanced_simulation() -> None:
    """Balanced 1F1B with p2p: the pair path length never exceeds the simulated step."""
    from autotune.cost.inputs import StageCosts
    from autotune.cost.simulate import simulate

    P, m, f, b, p2p = 4, 8, 1.0, 2.0, 0.4
    cs = compile_schedule("1f1b", P, 1, m)
    cF_s, cB_s, cF_L, cB_L, hops = pair_cycle(cs)
    z = np.zeros((1, 1, P))
    costs = StageCosts(z + f, z + b, z, z, np.zeros((1, P)), z)
    T = float(simulate(cs, costs, p2p).step_ms[0])
    path = (P - 2) * (f + b) + 2 * (P - 2) * p2p + cF_s * f + cB_s * b + cF_L * f + cB_L * b + hops * p2p
    assert path <= T + 1e-9
    # it sees the p2p paid per micro-batch in the steady state: longer than the single-stage path
    single = (P - 1) * (f + b) + m * (f + b) + 2 * (P - 1) * p2p
    assert path > single


def test_progress_lines_show_certified_gap(capsys) -> None:
    from autotune.tuner.runner import run_study
    from autotune.tuner.solve import bound_and_seeds

    problem = syn2_problem(150)
    bs = bound_and_seeds(problem, [])
    out = run_study(problem, seeds=bs.seeds, n_trials=3, seed=0, progress="lines", progress_every_s=0.0,
                    bound_ms=100.0)
    err = capsys.readouterr().err.strip().splitlines()
    # the exact optimum is the one seed; no neighbour beats it, so one trial of the 3 runs
    assert out.trials == 1 and out.stopped_by == "neighbourhood"
    assert err[0].startswith("search: 0/3 trials, bound 100.0 ms, ")
    assert [x for x in err if x.startswith("search: ")][-1] == \
        "search: 1/3 trials, best 116.0 ms, bound 100.0 ms, certified gap 16.00%, 0 s"  # every_s 0: every update


@pytest.mark.slow
def test_default_budget_is_deterministic() -> None:
    """No clock in the default run: same seed -> same trials, same answer."""
    from autotune.api import search

    a = search("examples/llama3_1_70b/train.yaml", trials=12, seed=1)
    b = search("examples/llama3_1_70b/train.yaml", trials=12, seed=1)
    assert a.trials == b.trials and not a.timed_out
    assert a.best.step_time_ms == b.best.step_time_ms
    assert [t.params for t in a.study.trials] == [t.params for t in b.study.trials]
