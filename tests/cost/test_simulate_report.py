"""Simulation paths agree; report accounting identities; public API errors; no Optuna import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.config.layout import make_layout
from autotune.cost import (ProfileArrays, compile_schedule, evaluate_layout, simulate, simulate_schedule,
                           stage_costs)
from autotune.cost.report import MEMORY_COMPONENTS
from autotune.errors import ConfigError
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption


def toy_profile(n: int = 12) -> ModelProfile:
    dense = LayerKind(fwd_ms=1, bwd_ms=2, act_mib=10, static_mib=5, workspace_mib=0.5,
                      full=RecomputeOption(act_mib=1, extra_ms=1, workspace_mib=10),
                      select=RecomputeOption(act_mib=7, extra_ms=0.1))
    moe = LayerKind(fwd_ms=3, bwd_ms=6, act_mib=20, static_mib=40,
                    full=RecomputeOption(act_mib=2, extra_ms=3, workspace_mib=20))
    return ModelProfile(kinds={"dense": dense, "moe": moe}, layer_kinds=[("dense", 2), ("moe", n - 2)],
                        head=EndPart(fwd_ms=0.5, bwd_ms=1, act_mib=1, static_mib=20),
                        tail=EndPart(fwd_ms=2, bwd_ms=4, act_mib=8, static_mib=30, workspace_mib=16),
                        stage_const_mib=100, p2p_ms=0.05)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), sched=st.sampled_from(["1f1b", "1f1b_less_memory", "gpipe", "zero_bubble_v"]),
       p2p=st.sampled_from([0.0, 0.3]))
def test_scalar_and_wave_paths_agree(seed, sched, p2p):
    rng = np.random.default_rng(seed)
    P, V, m = 4, 2, 8
    costs_f = rng.uniform(0.2, 3.0, (3, V, P))
    from autotune.cost.inputs import StageCosts

    costs = StageCosts(costs_f, 2 * costs_f, costs_f, np.zeros_like(costs_f), np.zeros((3, P)),
                       np.zeros_like(costs_f))
    cs = compile_schedule(sched, P, V, m)
    waves = simulate(cs, costs, p2p, method="waves", timeline=True)
    for b in range(3):
        one = StageCosts(*(x[b:b + 1] for x in (costs.fwd_ms, costs.bwd_ms, costs.act_mib, costs.ws_mib,
                                                  costs.static_mib, costs.recompute_ms)))
        sc = simulate(cs, one, p2p, method="scalar", timeline=True)
        assert sc.step_ms[0] == pytest.approx(waves.step_ms[b], abs=1e-9)
        assert np.allclose(sc.start_ms[:, 0], waves.start_ms[:, b])


@pytest.mark.parametrize("sched,V", [("1f1b", 1), ("1f1b", 3), ("1f1b_less_memory", 2), ("zero_bubble_v", 2),
                                     ("gpipe", 1)])
def test_report_identities(sched, V):
    P, m = 2, 6
    n = 12
    layers = np.full((V, P), n // (V * P))
    rec = np.zeros_like(layers)
    rec[0, 0] = 1
    sel = np.ones_like(layers)
    lay = make_layout(layers, rec, sel)
    rep = evaluate_layout(toy_profile(n), lay, micro_batch_num=m, schedule=sched, hbm_mib=10_000)
    for s in rep.stages:
        assert set(s.memory_mib) == set(MEMORY_COMPONENTS)
        assert sum(s.memory_mib.values()) == pytest.approx(s.peak_mib)
        assert s.static_mib + s.act_peak_mib == pytest.approx(s.peak_mib)
    b = rep.bubble
    assert b["ideal"] + b["imbalance"] + b["recompute"] + b["comm"] == pytest.approx(b["real"])
    assert b["recompute"] > 0 and b["comm"] > 0
    d = rep.to_dict()
    assert d["bubble"] == b and d["stages"][0]["memory_mib"] == rep.stages[0].memory_mib
    # head on stage 0; tail on the stage holding the last position
    tail_stage = 0 if sched == "zero_bubble_v" else P - 1
    assert rep.stages[tail_stage].memory_mib["tail_static"] == 30
    assert rep.stages[0].memory_mib["head_static"] == 20


def test_zero_bubble_v_layer_order_follows_the_v():
    """Stage P−1 holds positions P−1 and P: with layers [[1,1],[1,1]] over dense,dense,moe,moe the
    chunk-1 mini-stage of stage 1 (position 2) gets the first MoE layer, stage 0 chunk 1 the last."""
    pa = ProfileArrays.from_profile(toy_profile(4))
    one = np.ones((1, 2, 2), dtype=np.int64)
    z = np.zeros_like(one)
    from autotune.cost.schedules import get_schedule

    pos = get_schedule("zero_bubble_v").virtual_position(2, 2)
    c = stage_costs(pa, one, z, z, z, pos=pos)
    # fwd: dense 1 on (0,0) + head 0.5, dense 1 on (0,1), moe 3 on (1,1), moe 3 + tail 2 on (1,0)
    assert c.fwd_ms[0].tolist() == [[1.5, 1.0], [5.0, 3.0]]


def test_public_api_errors_are_config_errors():
    with pytest.raises(ConfigError) as e:
        simulate_schedule([[1, 2]], [[1]], micro_batch_num=2)
    assert e.value.field == "bwd_ms" and e.value.rule == "schedule_input"
    with pytest.raises(ConfigError) as e:
        simulate_schedule([1, 2], [1, 2], micro_batch_num=2, schedule="nope")
    assert e.value.rule == "scheduler"
    with pytest.raises(ConfigError) as e:
        simulate_schedule([[1, 2]] * 2, [[1, 2]] * 2, micro_batch_num=3)
    assert e.value.rule == "R_MICRO_BATCH_MIN"
    with pytest.raises(ConfigError) as e:   # the size at fault is the chunk count (the arrays' rows)
        simulate_schedule([[1, 2]] * 2, [[1, 2]] * 2, micro_batch_num=4, schedule="seqpipe")
    assert (e.value.rule, e.value.field, e.value.value) == ("R_SCHEDULE", "pp_interleave_num", 2)
    with pytest.raises(ConfigError):
        simulate_schedule([1, -2], [1, 2], micro_batch_num=2)
    with pytest.raises(ConfigError):
        simulate_schedule([1, 2], [1, 2], micro_batch_num=2, static_mib=[1, 2, 3])


def test_public_api_timeline_by_hand():
    """P = 2, m = 2, f = [3, 2], b = [6, 4] (reference §6.1): the 1F1B timeline by hand."""
    r = simulate_schedule([3, 2], [6, 4], micro_batch_num=2, act_mib=[1, 1], static_mib=[5, 5])
    got = [(o["stage"], o["kind"], o["micro_batch"], o["start_ms"], o["end_ms"]) for o in r.ops]
    assert got == [(0, "F", 0, 0, 3), (0, "F", 1, 3, 6), (0, "B", 0, 9, 15), (0, "B", 1, 15, 21),
                   (1, "F", 0, 3, 5), (1, "B", 0, 5, 9), (1, "F", 1, 9, 11), (1, "B", 1, 11, 15)]
    assert r.peak_mib == [7.0, 6.0]
    assert max(x for _, x in r.memory_timeline[0]) == 7.0
    assert r.memory_timeline[0][-1][1] == 5.0  # everything freed at the end


def test_import_cost_does_not_import_optuna():
    code = "import sys, autotune.cost, autotune.cost.public; sys.exit('optuna' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_stage_table_act_ws_column_is_activation_plus_workspace():
    """The text report's per-stage "act+ws MiB" is the stage's activation and the workspace of the
    backward running at its peak (the memory table's two columns): on the last stage the tail's
    16 MiB workspace counts; static + act+ws = peak on every row."""
    from autotune.emit.render import stage_table

    lay = make_layout(np.full((1, 2), 6), np.zeros((1, 2), dtype=int), np.ones((1, 2), dtype=int))
    rep = evaluate_layout(toy_profile(12), lay, micro_batch_num=6, hbm_mib=10_000)
    head, _, *rows = stage_table(rep).splitlines()
    cols = head.split()
    assert "act+ws" in cols and "act" not in cols
    for s, row in zip(rep.stages, rows):
        cells = row.split()
        act_ws = float(cells[-3])  # act+ws MiB, peak MiB, headroom MiB are the last three cells
        assert act_ws == round(s.act_peak_mib)
        assert act_ws == pytest.approx(s.memory_mib["activation"] + s.memory_mib["workspace"], abs=0.5)
        assert float(cells[-4]) + act_ws == pytest.approx(float(cells[-2]), abs=1.0)
    assert rep.stages[-1].memory_mib["workspace"] >= 16
