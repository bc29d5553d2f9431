"""The lower bound per pp_interleave_num: the least over sub-problems per V (search), and the line
the text output prints for it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from autotune.emit.search_result import bounds_by_vpp_line
from autotune.tuner.search import Prepared, bounds_by_vpp
from autotune.tuner.solve import BoundAndSeeds


def _prep(per_v: dict[int, float], exact: bool = False, optimum: float = float("inf"),
          vpps: tuple[int, ...] = ()) -> Prepared:
    bound = optimum if exact else (min(per_v.values()) if per_v else float("inf"))
    return Prepared(None, SimpleNamespace(vpp_candidates=vpps), BoundAndSeeds([], bound, exact=exact, per_v_ms=per_v))


def test_least_over_sub_problems_per_v_in_v_order() -> None:
    # two sub-problems (e.g. two schedulers): per V the smaller proof holds for the whole space
    got = bounds_by_vpp([_prep({2: 105.0, 1: 110.0}), _prep({1: 108.0, 2: 120.0, 3: float("inf")})])
    assert got == {1: 108.0, 2: 105.0, 3: None}  # inf: no layout with that V fits, proven
    assert list(got) == [1, 2, 3]


def test_an_enumerated_sub_problem_gives_its_optimum_to_each_of_its_v() -> None:
    # e.g. one scheduler's sub-problem enumerated (optimum 95 ms over its V 1 and 2), another not
    got = bounds_by_vpp([_prep({1: 100.0, 2: 90.0, 3: 97.0}), _prep({}, exact=True, optimum=95.0, vpps=(1, 2))])
    assert got == {1: 95.0, 2: 90.0, 3: 97.0}


def test_no_breakdown_for_one_v_an_enumerated_space_or_nothing_fitting() -> None:
    assert bounds_by_vpp([_prep({2: 100.0})]) is None
    assert bounds_by_vpp([_prep({}, exact=True, optimum=95.0, vpps=(1, 2))]) is None
    inf = float("inf")
    assert bounds_by_vpp([_prep({1: inf, 2: inf})]) is None  # no bound at all (nothing fits)


def test_line_marks_the_answers_v_and_the_least() -> None:
    best = SimpleNamespace(layout=SimpleNamespace(vpp=2))
    r = SimpleNamespace(lower_bound_by_vpp={1: 165112.06, 2: 160692.84, 3: 159931.92, 4: None}, best=best)
    assert bounds_by_vpp_line(r) == (
        "lower bound by pp_interleave_num (each tightened only while it could raise the least): "
        "1: 165112.1 ms | 2: 160692.8 ms (the answer's) | 3: 159931.9 ms (the least) | 4: none fits")
    r2 = SimpleNamespace(lower_bound_by_vpp={1: 10.0, 3: 10.0}, best=SimpleNamespace(layout=SimpleNamespace(vpp=1)))
    assert bounds_by_vpp_line(r2).endswith("1: 10.0 ms (the answer's, the least) | 3: 10.0 ms (the least)")
    assert bounds_by_vpp_line(SimpleNamespace(lower_bound_by_vpp=None, best=None)) is None
    # the answer's V whose bound is its step time (the split scan's vpp 1): said so
    solved = SimpleNamespace(lower_bound_by_vpp={1: 573008.6388077409 * (1 - 1e-10), 2: 571868.13},
                             best=SimpleNamespace(layout=SimpleNamespace(vpp=1), step_time_ms=573008.6388077409))
    assert bounds_by_vpp_line(solved).endswith(
        "1: 573008.6 ms (the answer's, proven the best of this pp_interleave_num) | 2: 571868.1 ms (the least)")
    near = SimpleNamespace(lower_bound_by_vpp={1: 573000.0, 2: 571868.13}, best=solved.best)
    assert "(the answer's) |" in bounds_by_vpp_line(near)


@pytest.mark.parametrize("seed", range(6))
def test_each_v_bound_is_at_most_that_v_optimum(seed, monkeypatch) -> None:
    """On random small problems (V 1-3, pp 2-3, 1f1b and 1f1b_less_memory) with enumeration off,
    every V's bound from the search's solver pipeline is at most that V's enumerated optimum, and
    the overall bound is their least."""
    import autotune.tuner.solve as solve
    from autotune.tuner.exact import exact_optimum
    from autotune.tuner.problem import Candidate, Problem, even_layers
    from tests.search.test_exact_bounds import _random_problem

    monkeypatch.setattr(solve, "EXACT_MAX_SPLITS", -1)  # force the bound pipeline
    rng = np.random.default_rng(seed + 999)
    P = int(rng.integers(2, 4))
    N = int(rng.integers(3 * P, 3 * P + 4))
    kinds = [("full",), ("full", "select", "comm"), ("select",)][seed % 3]
    sched = ["1f1b", "1f1b_less_memory"][seed % 2]
    base = _random_problem(seed, N, P, 1, kinds, float(rng.uniform(0.7, 1.3)))

    def problem(vs: list[int]) -> Problem:
        return Problem(base.pa, P=P, m=base.m, hbm_mib=base.hbm_mib, vpp_candidates=vs, kinds=kinds,
                       schedule=sched, seq_split_num=1)

    even = even_layers(N, P, 1)
    z = np.zeros_like(even)
    bs = solve.bound_and_seeds(problem([1, 2, 3]), [Candidate(1, even, z, z, z, origin="none")], target_gap=0.005)
    assert sorted(bs.per_v_ms) == [1, 2, 3] and min(bs.per_v_ms.values()) == bs.bound_ms
    for V in (1, 2, 3):
        best = exact_optimum(problem([V])).best
        opt = best.step_ms if best is not None else float("inf")
        assert bs.per_v_ms[V] > 0  # a proof, not a placeholder
        assert bs.per_v_ms[V] <= opt * (1 + 1e-9) or (np.isinf(bs.per_v_ms[V]) and np.isinf(opt)), (V, bs.per_v_ms, opt)
