"""Least-peak layouts (autotune/tuner/least_peak.py): near the memory floor, where no even split
fits, the search starts from the split whose stages peak least, so a fitting layout is found
where one exists near; the closest layout is the least-peak one otherwise."""

from __future__ import annotations

import pytest

from autotune.tuner import solve
from autotune.tuner.inputs import as_config
from autotune.tuner.least_peak import least_peak, most_saving_recompute
from autotune.tuner.problem import compositions, even_layers
from autotune.tuner.search import subproblems
from autotune.tuner.space import expand_space, load_search_space
from tests.search.test_invariance import _problem

EX = "examples/telechat2_115b/train.yaml"


def _example(hbm_mib: float):
    cfg = as_config(EX, hbm_mib)
    sp = load_search_space(None)
    return subproblems(cfg, sp, expand_space(cfg, sp, None, device="ascend-910b", overrides=None))[0][1]


def test_the_example_near_its_floor_gets_a_fitting_start() -> None:
    """TeleChat2 example (96 layers, pp 8) at 16,896 MiB: the even split of every V peaks over it
    (V 1 with full recompute 17,485 MiB, on the embedding's and the LM head's stages) and the search
    found nothing; 11 / 12 / 12 / 12 / 12 / 13 / 13 / 11 layers with full recompute peak at 16,776.1
    MiB (checked by an exact min-max over the V = 1 splits by hand: the least any split reaches)."""
    problem = _example(16896.0)
    lp = least_peak(problem, 1)
    assert lp.layers.tolist() == [[11, 12, 12, 12, 12, 13, 13, 11]]
    assert lp.rec.tolist() == lp.layers.tolist() and lp.peak_mib == pytest.approx(16776.117, abs=1e-3)
    starts = solve.propose(problem)
    assert all(c.excess_mib > 0 for c in starts if c.origin.startswith("even-fit"))
    fitting = [c for c in starts if c.excess_mib <= 0]
    assert [c.origin for c in fitting] == ["least-peak-v1"]
    assert fitting[0].layers.tolist() == [[11, 12, 12, 12, 12, 13, 13, 11]]


def test_no_least_peak_starts_where_an_even_split_fits() -> None:
    """At the example's own budget (55,808 MiB) the even splits fit: the starts are unchanged."""
    assert [c.origin for c in solve.propose(_example(55808.0))] == [f"even-fit-v{v}" for v in (1, 2, 3, 4)]


@pytest.mark.parametrize("seed, N, P", [(2, 7, 2), (27, 6, 4), (28, 10, 4), (31, 9, 4), (33, 12, 3),
                                        (34, 6, 2), (36, 8, 2), (38, 7, 3), (39, 12, 3)])
def test_one_chunk_descent_reaches_the_least_peak_of_every_split(seed, N, P) -> None:
    """V = 1, two layer kinds: the descent ends at the least worst-stage peak over every split
    (enumerated here), at the most-saving recompute."""
    problem = _problem(seed, N, P, 1, 2 * P, 1.0)
    lo, hi = problem.bounds(1)
    splits = compositions(N, lo.reshape(-1), hi.reshape(-1)).reshape(-1, 1, P)
    peaks = problem.memory_peaks(1, problem.costs(1, splits, *most_saving_recompute(problem, splits)))
    assert least_peak(problem, 1).peak_mib == pytest.approx(float(peaks.max(axis=1).min()), rel=1e-12)


@pytest.mark.parametrize("seed, N, P, V", [(1, 9, 3, 2), (13, 12, 4, 2), (26, 12, 3, 2), (30, 6, 2, 2)])
def test_descent_never_ends_above_its_start(seed, N, P, V) -> None:
    """With two chunks the single-layer descent can stop above the least peak (seed 13: 73.09 MiB
    against 69.08: reaching it moves layers between chunks, which shifts the layer kinds of the
    stages in between); it never ends above the even split it starts from."""
    problem = _problem(seed, N, P, V, 2 * P, 1.0)
    even = even_layers(N, P, V)
    start = problem.memory_peaks(V, problem.costs(V, even[None], *most_saving_recompute(problem, even[None])))
    assert least_peak(problem, V).peak_mib <= float(start.max())
    if seed == 13:
        assert least_peak(problem, V).peak_mib == pytest.approx(73.0892, abs=1e-3)
