"""benchmarks/stay_families.py: the longest path with at most k stays is the longest dependency
chain at k = 0, the longest one-stay path (the bounds' family, exact counts) at k = 1, the
simulated step time for large k, and never falls as k grows; the one-stay descent keeps to
fitting layouts and never returns a longer one-stay path than its start."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost.budget import fits
from autotune.cost.simulate import compile_schedule
from autotune.tuner.bounds._paths import critical_path, one_stay_counts
from autotune.tuner.problem import Candidate, even_layers


def _durations(seed: int, V: int, P: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(1.0, 10.0, (V, P)), rng.uniform(1.0, 20.0, (V, P))


@settings(max_examples=30, deadline=None)
@given(P=st.integers(2, 4), V=st.integers(1, 3), rounds=st.integers(1, 3), seed=st.integers(0, 10_000),
       p2p=st.sampled_from([0.0, 0.7]),
       sched=st.sampled_from([("1f1b", 1), ("1f1b_less_memory", 1), ("seqpipe", 2), ("seqpipe", 3)]))
def test_stay_lengths_match_the_chain_the_one_stay_family_and_the_step(P, V, rounds, seed, p2p, sched):
    from benchmarks.stay_families import stay_lengths
    schedule, k = sched
    if schedule == "seqpipe":
        V = 1
    m = P * rounds
    cs = compile_schedule(schedule, P, V, m, k)
    f, b = _durations(seed, V, P)
    k_max = cs.num_ops
    got = stay_lengths(cs, f, b, p2p, k_max)
    assert (np.diff(got) >= -1e-9).all()
    # k large: the longest path of the whole graph, the simulated step time
    assert got[-1] == pytest.approx(critical_path(cs, f, b, p2p).length, rel=1e-12)
    # k = 1: the longest of the one-stay paths the bounds price, from their exact op counts
    one = max((cf * f).sum() + (cb * b).sum() + h * p2p for rows in one_stay_counts(cs) for cf, cb, h in rows)
    assert got[1] == pytest.approx(one, rel=1e-12)
    # k = 0: one micro-batch's chain through every position and back; every change of position
    # crosses a stage (P > 1), the forward-to-backward turn on the last position does not; with a
    # sequence split each op runs 1/k of its mini-stage's time
    if k == 1:
        assert got[0] == pytest.approx(f.sum() + b.sum() + p2p * 2 * (V * P - 1), rel=1e-12)


def test_stay_lengths_hand_counted_pp2():
    """pp 2, V 1, m 2, 1F1B, f = (1, 2), b = (3, 4), no p2p. Stage 0 runs F0 F1 B0 B1 and stage 1
    F0 B0 F1 B1. One chain: 1 + 2 + 4 + 3 = 10. One stay on stage 1 (F0 B0 F1 B1 = 12) entered
    through F0 on stage 0 and left through B1 on stage 0: 1 + 12 + 3 = 16. The step: stage 0's
    F0 F1 (2), stage 1 waits F0 (1) and runs F0 B0 (to 7), stage 0's B0 (to 10), stage 1's F1
    needs F1 of stage 0 (done at 2) and runs after B0 (7): F1 B1 to 13, stage 0's B1 to 16: 16."""
    from benchmarks.stay_families import stay_lengths
    cs = compile_schedule("1f1b", 2, 1, 2, 1)
    f, b = np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]])
    got = stay_lengths(cs, f, b, 0.0, 4)
    assert got[0] == pytest.approx(10.0)
    assert got[1] == pytest.approx(16.0)
    assert got[-1] == pytest.approx(16.0)


def test_stay_lengths_refuse_bad_input():
    from benchmarks.stay_families import stay_lengths
    cs = compile_schedule("1f1b", 3, 2, 6, 1)
    f = np.ones((2, 3))
    with pytest.raises(ValueError, match="k_max -1"):
        stay_lengths(cs, f, f, 0.0, -1)
    with pytest.raises(ValueError, match=r"give \[V, P\] = \[2, 3\]"):
        stay_lengths(cs, f.T, f.T, 0.0, 1)
    with pytest.raises(ValueError, match="both the same"):
        stay_lengths(cs, f, np.ones((1, 2, 3)), 0.0, 1)


def test_measure_limits_come_from_fitting_layouts(monkeypatch):
    import benchmarks.stay_families as sf
    from benchmarks.scaling import build
    problem = build(4, 2, 8, 16, "dense", "tight")

    def over_budget(pr, ans):  # the answer's split without recompute: shorter paths, over the budget
        z = np.zeros_like(ans.layers)
        return 0.0, pr.score([Candidate(ans.V, ans.layers, z, z.copy(), z.copy())])[0]
    monkeypatch.setattr(sf, "stage_dp_witness", over_budget)
    row = sf.measure(problem, 2, 1)
    lays = row["layouts"]
    assert lays[0]["name"] == "answer" and lays[0]["fits"]
    assert [x["fits"] for x in lays if x["name"].startswith("stage DP")] == [False]
    # the answer's longest path with many stays is its step time; k = 2 here is a lower bound of it
    assert lays[0]["stays_ms"][2] <= lays[0]["step_ms"] + 1e-9
    ok = [x for x in lays if x["fits"]]
    assert row["limit_ms"] == [min(x["stays_ms"][k] for x in ok) for k in range(3)]
    assert row["limit_ms"][1] > min(x["stays_ms"][1] for x in lays)  # the layout over the budget is not counted
    assert row["best_ms"] == min(x["step_ms"] for x in ok)
    assert row["limit_ms"][1] <= row["limit_ms"][2] <= row["best_ms"] + 1e-9
    # no descent from a layout over the budget: only the answer's
    assert [x["name"] for x in lays if "descent" in x["name"]] == ["1-stay descent from the answer"]
    over = over_budget(problem, problem.score([Candidate(2, even_layers(problem.N, problem.P, 2),
                                                         *(np.zeros((2, 4), dtype=np.int64),) * 3)])[0])[1]
    assert not fits(over.peak_mib, problem.hbm_mib)
    with pytest.raises(ValueError, match="fits the HBM budget"):
        sf.stay_descent(problem, over, 1)


def test_batched_stay_lengths_equal_one_at_a_time():
    from benchmarks.stay_families import stay_lengths
    cs = compile_schedule("1f1b", 3, 2, 6, 1)
    rng = np.random.default_rng(3)
    f, b = rng.uniform(1, 9, (5, 2, 3)), rng.uniform(1, 19, (5, 2, 3))
    got = stay_lengths(cs, f, b, 0.4, 3)
    assert got.shape == (5, 4)
    for i in range(5):
        assert np.array_equal(got[i], stay_lengths(cs, f[i], b[i], 0.4, 3))


@pytest.mark.parametrize("k", [1, 2])
def test_stay_descent_keeps_to_fitting_layouts_and_never_lengthens(k):
    from benchmarks.scaling import build
    from benchmarks.stay_families import layout_stays, one_stay_max, stay_descent, stay_max
    problem = build(4, 2, 8, 16, "dense", "tight")
    lay = even_layers(problem.N, problem.P, 2)
    start = problem.score([Candidate(2, lay, lay.copy(), np.zeros_like(lay), np.zeros_like(lay))])[0]
    assert fits(start.peak_mib, problem.hbm_mib)
    assert one_stay_max(problem, [start])[0] == pytest.approx(layout_stays(problem, [start], 1)[0, 1], rel=1e-12)
    low = stay_descent(problem, start, k)
    assert fits(low.peak_mib, problem.hbm_mib)
    assert low.layers.sum() == problem.N
    # full recompute everywhere replays every forward: the re-fitted layouts drop most of it
    assert stay_max(problem, [low], k)[0] < stay_max(problem, [start], k)[0]


@settings(max_examples=25, deadline=None)
@given(P=st.integers(2, 4), V=st.integers(1, 3), rounds=st.integers(1, 2), seed=st.integers(0, 10_000),
       p2p=st.sampled_from([0.0, 0.7]), sched=st.sampled_from(["1f1b", "1f1b_less_memory"]))
def test_stays_on_chosen_stages(P, V, rounds, seed, p2p, sched):
    """A mask of every stage changes nothing; one stay on stage p alone is the longest of p's
    one-stay paths (exact counts); the pair table's largest entry is the two-stay value and its
    entries grow with the stages allowed."""
    from benchmarks.stay_families import pair_stays, stay_lengths
    cs = compile_schedule(sched, P, V, P * rounds, 1)
    f, b = _durations(seed, V, P)
    free = stay_lengths(cs, f, b, p2p, 3)
    assert np.array_equal(stay_lengths(cs, f, b, p2p, 3, stay_on=np.ones(P, dtype=bool)), free)
    one = np.eye(P, dtype=bool)
    got = stay_lengths(cs, f, b, p2p, 1, stay_on=one)[:, 1]
    for p, rows in enumerate(one_stay_counts(cs)):
        want = max((cf * f).sum() + (cb * b).sum() + h * p2p for cf, cb, h in rows)
        assert got[p] == pytest.approx(want, rel=1e-12)
    table = pair_stays(cs, f, b, p2p)
    assert np.array_equal(table, table.T)
    assert table.max() == pytest.approx(free[2], rel=1e-12)
    diag = np.diag(table)
    assert (table >= np.maximum(diag[:, None], diag[None, :]) - 1e-9).all()
    assert (diag >= got - 1e-9).all()


def test_stay_on_refuses_bad_masks_and_broadcasts_one():
    from benchmarks.stay_families import stay_lengths
    cs = compile_schedule("1f1b", 2, 1, 2, 1)
    f, b = np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]])
    with pytest.raises(ValueError, match="stay_on"):
        stay_lengths(cs, f, b, 0.0, 2, stay_on=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="rows"):
        stay_lengths(cs, np.stack([f, f]), np.stack([b, b]), 0.0, 2, stay_on=np.ones((3, 2), dtype=bool))
    # one [P] mask for a batch: every layout under it
    one = stay_lengths(cs, f, b, 0.0, 2, stay_on=np.array([True, False]))
    both = stay_lengths(cs, np.stack([f, f]), np.stack([b, b]), 0.0, 2, stay_on=np.array([True, False]))
    assert both.shape == (2, 3) and np.array_equal(both[0], one) and np.array_equal(both[1], one)


def test_pair_stays_hand_counted_pp2():
    """The pp 2 case above: stage 0 runs F0 F1 B0 B1 (f 1, b 3), stage 1 F0 B0 F1 B1 (f 2, b 4).
    Stays on stage 0 only: F0, F0 and B0 on stage 1, B0 on stage 0, then along stage 0 to B1:
    1 + 2 + 4 + 3 + 3 = 13 (one stay; two stays add nothing: any other start gives at most 11).
    A stay on stage 1 gives 16 (the one-stay value above), so the table is [[13, 16], [16, 16]]."""
    from benchmarks.stay_families import pair_stays, pair_summary
    cs = compile_schedule("1f1b", 2, 1, 2, 1)
    f, b = np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]])
    table = pair_stays(cs, f, b, 0.0)
    assert table == pytest.approx(np.array([[13.0, 16.0], [16.0, 16.0]]))
    s = pair_summary(table)
    assert s["pair"] == [0, 1] and s["ms"] == pytest.approx(16.0)
    assert s["ends_ms"] == pytest.approx(16.0) and s["inner_ms"] == float("-inf")
