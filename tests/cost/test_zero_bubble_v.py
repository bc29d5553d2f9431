"""zero_bubble_v with the backward split into B and W (autotune.cost.schedules.zero_bubble_v)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost import compile_schedule, peak_activation, simulate, simulate_schedule
from autotune.cost.inputs import ProfileArrays, StageCosts, stage_costs
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption


def _render(r, P: int) -> list[str]:
    T = int(r.step_ms)
    rows = []
    for p in range(P):
        row = [". "] * T
        for o in r.ops:
            if o["stage"] == p:
                k = o["kind"] if o["chunk"] == 0 else o["kind"].lower()
                row[int(o["start_ms"])] = f"{k}{o['micro_batch']}"
        rows.append(" ".join(x.ljust(2) for x in row).rstrip())
    return rows


def test_docstring_timeline_p2_m4():
    """The module docstring's picture, op for op (T_F = T_B = T_W = 1 per chunk)."""
    r = simulate_schedule(np.ones((2, 2)), 2 * np.ones((2, 2)), micro_batch_num=4, schedule="zero_bubble_v")
    assert r.step_ms == 25.0  # 6·4 + (2 − 1)
    assert _render(r, 2) == [
        "F0 F1 F2 f0 b0 w0 f1 B0 b1 W0 F3 B1 w1 f2 b2 W1 w2 B2 W2 f3 b3 w3 .  B3 W3",
        ".  F0 f0 F1 f1 b0 B0 w0 F2 b1 B1 W0 f2 w1 F3 b2 B2 W1 f3 w2 W2 b3 B3 w3 W3",
    ]


@pytest.mark.parametrize("P,m", [(2, 4), (3, 6), (3, 7), (4, 8), (4, 9), (5, 10), (6, 12), (8, 24)])
def test_uniform_step_is_the_one_step_minimum(P, m):
    """T_F = T_B = T_W = 1: step 6m + P − 1 (the last stage starts after P − 1 forwards and is
    never idle again), in-flight at most 2P chunk-units (P micro-batches, 1F1B's peak)."""
    r = simulate_schedule(np.ones((2, P)), 2 * np.ones((2, P)), micro_batch_num=m, schedule="zero_bubble_v")
    assert r.step_ms == 6 * m + P - 1
    assert max(r.max_inflight) == 2 * P
    # W fills bubbles: interleaved 1F1B (V = 2) on the same stages needs (m + (P − 1)/2)·6
    if m % P == 0:
        il = simulate_schedule(np.ones((2, P)), 2 * np.ones((2, P)), micro_batch_num=m)
        assert il.step_ms == (m + (P - 1) / 2) * 6
        assert r.step_ms < il.step_ms


def test_w_needs_only_its_b_on_the_same_device():
    cs = compile_schedule("zero_bubble_v", 3, 2, 6)
    w = np.flatnonzero(cs.kind == 2)
    assert w.size == 2 * 6 * 3
    d = cs.dep[w]
    assert (cs.kind[d] == 1).all() and (cs.stage[d] == cs.stage[w]).all()
    assert (cs.chunk[d] == cs.chunk[w]).all() and (cs.mb[d] == cs.mb[w]).all()
    assert (cs.cross[w] == 0).all()
    # nothing waits for a W except the stage's next op
    assert not np.isin(w, cs.dep).any()
    assert not cs.fwd[w].any()


def test_memory_live_until_w_and_workspace_from_b_to_w():
    """Hand count on the docstring timeline (P = 2, m = 4). Activation 1 per chunk-unit, no
    workspace: at most 4 units live on either stage (stage 0 after F0 F1 F2 f0). Workspace 1, no
    activation: stage 0 holds at most 2 (b1 starts while B0 waits for W0); stage 1 three (B1
    starts while B0 waits for W0 and b1 for w1)."""
    cs = compile_schedule("zero_bubble_v", 2, 2, 4)
    one, zero = np.ones((1, 2, 2)), np.zeros((1, 2, 2))
    assert peak_activation(cs, one, zero).tolist() == [[4.0, 4.0]]
    assert peak_activation(cs, zero, one).tolist() == [[2.0, 3.0]]
    # the memory timeline of the public API peaks at the same values
    r = simulate_schedule(np.ones((2, 2)), 2 * np.ones((2, 2)), micro_batch_num=4, schedule="zero_bubble_v",
                          act_mib=np.ones((2, 2)))
    assert [max(x for _, x in tl) for tl in r.memory_timeline] == [4.0, 4.0] == r.peak_mib


def test_bwd_w_frac_splits_backward_times():
    """B = bwd − W (replay stays in B), W = bwd_w_frac·bwd; with frac 0 the W ops take no time."""
    P, m = 2, 4
    f = np.ones((2, P))
    r = simulate_schedule(f, 2 * f, micro_batch_num=m, schedule="zero_bubble_v", bwd_w_frac=0.25,
                          recompute_ms=0.5 * f)
    d = {(o["kind"]): o["end_ms"] - o["start_ms"] for o in r.ops}
    assert d == {"F": 1.0, "B": 2.5 - 0.5, "W": 0.5}
    r0 = simulate_schedule(f, 2 * f, micro_batch_num=m, schedule="zero_bubble_v", bwd_w_frac=0.0)
    assert {o["end_ms"] - o["start_ms"] for o in r0.ops if o["kind"] == "W"} == {0.0}
    assert sum(o["end_ms"] - o["start_ms"] for o in r0.ops) == pytest.approx(2 * P * m * 3.0)


def test_profile_bwd_w_frac_per_kind_in_stage_costs():
    """Kind a: bwd 2, frac 0.25 → W 0.5 per layer; kind b: bwd 4, default 0.5 → W 2; a full
    recompute replay (+1) goes to B only; tail bwd 3 with frac 1/3 → W 1 on the last position."""
    a = LayerKind(fwd_ms=1, bwd_ms=2, act_mib=1, static_mib=0, bwd_w_frac=0.25,
                  full=RecomputeOption(act_mib=0, extra_ms=1))
    b = LayerKind(fwd_ms=2, bwd_ms=4, act_mib=1, static_mib=0)
    prof = ModelProfile(kinds={"a": a, "b": b}, layer_kinds=[("a", 2), ("b", 2)],
                        tail=EndPart(fwd_ms=1, bwd_ms=3, bwd_w_frac=1 / 3))
    pa = ProfileArrays.from_profile(prof)
    layers = np.array([[[1, 1], [1, 1]]])  # positions: (0,0)=a (0,1)=a (1,1)=b (1,0)=b under zbv
    rec = np.array([[[1, 0], [0, 0]]])
    z = np.zeros_like(layers)
    pos = np.array([[0, 1], [3, 2]])
    c = stage_costs(pa, layers, rec, z, z, pos=pos)
    assert c.bwd_w_ms[0].tolist() == [[0.5, 0.5], [2.0 + 1.0, 2.0]]
    assert c.bwd_ms[0].tolist() == [[3.0, 2.0], [7.0, 4.0]]
    assert c.recompute_ms[0].tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_other_schedules_do_not_split():
    for name, V in (("1f1b", 1), ("1f1b", 2), ("gpipe", 1), ("seqpipe", 1), ("1f1b_less_memory", 2)):
        cs = compile_schedule(name, 4, V, 8)
        assert not cs.split_bw and cs.mem_split is None
        assert set(np.unique(cs.kind).tolist()) == {0, 1}
        assert (cs.fwd == (cs.kind == 0)).all()


@settings(max_examples=25, deadline=None)
@given(P=st.integers(2, 5), extra=st.integers(0, 5), seed=st.integers(0, 10_000))
def test_batched_equals_scalar_and_dependencies(P, extra, seed):
    """Random F/B/W times and p2p: the wave and scalar paths agree; each op starts after its
    dependency (+ p2p across devices) and after the stage's previous op."""
    m = 2 * P + extra
    rng = np.random.default_rng(seed)
    B = 3
    f = rng.uniform(0.2, 2.0, (B, 2, P))
    bw = rng.uniform(0.2, 4.0, (B, 2, P))
    w = bw * rng.uniform(0.0, 1.0, (B, 2, P))
    costs = StageCosts(f, bw, f, np.zeros_like(f), np.zeros((B, P)), np.zeros_like(f), w)
    cs = compile_schedule("zero_bubble_v", P, 2, m)
    full = simulate(cs, costs, 0.1, timeline=True)
    for i in range(B):
        one = StageCosts(*(x[i:i + 1] for x in (costs.fwd_ms, costs.bwd_ms, costs.act_mib, costs.ws_mib,
                                                  costs.static_mib, costs.recompute_ms, costs.bwd_w_ms)))
        s = simulate(cs, one, 0.1, timeline=True)
        assert s.step_ms[0] == full.step_ms[i]
        start, end = s.start_ms[:, 0], s.end_ms[:, 0]
        n = cs.num_ops
        has = cs.dep < n
        assert (start[has] >= end[cs.dep[has]] + 0.1 * cs.cross[has] - 1e-9).all()
        hp = cs.prev < n
        assert (start[hp] >= end[cs.prev[hp]] - 1e-9).all()
        dur = np.where(cs.kind == 0, f[i, cs.chunk, cs.stage],
                       np.where(cs.kind == 1, (bw - w)[i, cs.chunk, cs.stage], w[i, cs.chunk, cs.stage]))
        np.testing.assert_allclose(end - start, dur, atol=1e-12)
