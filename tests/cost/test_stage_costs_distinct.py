"""``stage_costs_distinct`` prices each distinct (pipeline stage, column) of a batch once and must
give :func:`stage_costs`' arrays bit for bit (issue 17: the search's neighbourhoods repeat most
stage columns; ``Problem.costs`` uses it for large batches)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import autotune.cost.inputs as inputs
import autotune.tuner.problem as problem_mod
from autotune.cost.inputs import StageCosts, stage_costs, stage_costs_distinct
from autotune.tuner.fit import fitted
from autotune.tuner.moves import one_opt_moves
from autotune.tuner.problem import DISTINCT_MIN_BATCH, even_layers
from tests.search.test_exact_bounds import _random_problem


def _same(a: StageCosts, b: StageCosts) -> bool:
    for f in fields(StageCosts):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if (x is None) != (y is None):
            return False
        if x is not None and not (x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)
                                  and y.flags.c_contiguous):
            return False
    return True


def _batch(seed: int, N: int, P: int, V: int, sched: str):
    pr = _random_problem(seed, N, P, V, ("full", "select", "comm"), 1.0, schedule=sched, m=2 * P,
                         static_delta=bool(seed % 2), end_ws=1.0 if seed % 3 == 0 else 0.0)
    base = fitted(pr, V, even_layers(N, P, V)[None], "even")[0]
    mv = one_opt_moves(pr, base)
    rng = np.random.default_rng(seed)
    return pr, mv, rng


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), N=st.integers(4, 12), P=st.integers(2, 4), V=st.integers(1, 3),
       sched=st.sampled_from(["1f1b", "zero_bubble_v", "gpipe"]))
def test_distinct_columns_give_the_same_costs(seed, N, P, V, sched) -> None:
    """Random problems (static deltas, head / tail workspaces, V-shaped positions): a layout's 1-opt
    neighbourhood (many repeated columns), the same shuffled and with random layouts mixed in (few
    repeats) give stage_costs' arrays bit for bit."""
    assume(P * V <= N and (sched != "zero_bubble_v" or V == 2))
    pr, mv, rng = _batch(seed, N, P, V, sched)
    assume(len(mv.layers))
    pos = pr.positions(V)
    assert _same(stage_costs(pr.pa, *mv, pos=pos), stage_costs_distinct(pr.pa, *mv, pos=pos))
    order = rng.permutation(len(mv.layers))
    lay, rec, sel, com = (np.ascontiguousarray(a[order]) for a in mv)
    noise = rng.integers(0, 3, size=lay.shape)
    rec = np.where(rng.random(lay.shape) < 0.5, noise, rec)
    assert _same(stage_costs(pr.pa, lay, rec, sel, com, pos=pos),
                 stage_costs_distinct(pr.pa, lay, rec, sel, com, pos=pos))


def test_a_hash_collision_falls_back_to_the_direct_pricing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every hash weight 0 all columns of a stage share one hash: the check sees it and the
    batch is priced directly, with the same result."""
    pr, mv, _ = _batch(3, 12, 3, 2, "1f1b")
    pos = pr.positions(2)
    want = stage_costs(pr.pa, *mv, pos=pos)
    monkeypatch.setattr(inputs, "_HASH_W", np.zeros_like(inputs._HASH_W))
    assert _same(want, stage_costs_distinct(pr.pa, *mv, pos=pos))


def test_a_neighbourhood_is_priced_once_per_distinct_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """pp 3 × vpp 2, 12 layers: the 1-opt neighbourhood's stage columns are priced through
    stage_costs' ``at`` once each (far fewer than the batch's layouts × stages), and
    Problem.costs takes this path from DISTINCT_MIN_BATCH layouts on."""
    pr, mv, _ = _batch(3, 12, 3, 2, "1f1b")
    seen = []
    real = inputs.stage_costs

    def spy(*a, **kw):
        seen.append(kw.get("at"))
        return real(*a, **kw)

    monkeypatch.setattr(inputs, "stage_costs", spy)
    stage_costs_distinct(pr.pa, *mv, pos=pr.positions(2))
    assert len(seen) == 1 and seen[0] is not None
    B = len(mv.layers)
    assert len(seen[0][0]) < B * 3 // 2  # of B × 3 (layout, stage) pairs
    reps = max(1, -(-DISTINCT_MIN_BATCH // B))
    big = [np.concatenate([a] * reps) for a in mv]
    used = []
    monkeypatch.setattr(problem_mod, "stage_costs", lambda *a, **kw: used.append("direct") or real(*a, **kw))
    monkeypatch.setattr(problem_mod, "stage_costs_distinct",
                        lambda *a, **kw: used.append("distinct") or stage_costs_distinct(*a, **kw))
    pr.costs(2, *big)
    pr.costs(2, *(a[:1] for a in mv))
    assert used == ["distinct", "direct"]
