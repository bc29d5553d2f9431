"""Every public case of shared/cases/validation_cases.json, asserted within its tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.cost import compile_schedule, simulate_schedule
from autotune.cost.inputs import ProfileArrays, stage_costs
from autotune.cost.schedules.interleaved import vpp_group_rule
from autotune.profile.analytic import (flops_utilization, korthikanti_layer_activation_bytes,
                                       korthikanti_step_flops, megatron_bytes_per_param, narayanan_params)
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption
from autotune.units import BYTES_PER_MIB
from tests.oracles import (brute_force_1f1b, critical_path_lower_bound_ms, min_max_partition, sum_plus_max_ms,
                           zero_bubble_peak_inflight, zero_bubble_rates)

CASES_PATH = Path(__file__).resolve().parents[1] / "data" / "cases" / "validation_cases.json"
CASES = {c["id"]: c for c in json.loads(CASES_PATH.read_text())["cases"]}


def case(cid: str) -> dict:
    return CASES[cid]


def test_every_public_case_has_a_test():
    here = Path(__file__).read_text()
    missing = [cid for cid in CASES if f'"{cid}"' not in here]
    assert not missing, missing


def test_k_t2_22b():
    c = case("K-T2-22B-b1")
    i = c["inputs"]
    kw = dict(s=i["s"], b=i["b"], h=i["h"], a=i["a"])
    got = {
        "no_parallelism": korthikanti_layer_activation_bytes(**kw, t=1),
        "tensor_parallel": korthikanti_layer_activation_bytes(**kw, t=i["t"]),
        "tensor_sequence_parallel": korthikanti_layer_activation_bytes(**kw, t=i["t"], sequence_parallel=True),
        "tensor_parallel_selective": korthikanti_layer_activation_bytes(**kw, t=i["t"], recompute="selective"),
        "tensor_sequence_parallel_selective": korthikanti_layer_activation_bytes(
            **kw, t=i["t"], sequence_parallel=True, recompute="selective"),
        "full_recompute": korthikanti_layer_activation_bytes(**kw, t=i["t"], recompute="full"),
    }
    for key, want in c["expected"].items():
        assert got[key] / BYTES_PER_MIB == pytest.approx(want, rel=c["tolerance"]["relative"]), key


def test_k_sel_gpt3():
    c = case("K-SEL-GPT3")
    a, h, s = c["inputs"]["a"], c["inputs"]["h"], c["inputs"]["s"]
    tol = c["tolerance"]["absolute"]
    e = c["expected"]
    assert 5 * a * s / h == pytest.approx(e["attention_term_5as_over_h"], abs=tol["attention_term_5as_over_h"])
    full = korthikanti_layer_activation_bytes(s, 1, h, a, 1)
    sel = korthikanti_layer_activation_bytes(s, 1, h, a, 1, recompute="selective")
    assert 1 - sel / full == pytest.approx(e["selective_saving_fraction"], abs=tol["selective_saving_fraction"])
    # GPT-3 175B: L = 96, V = 51200 (Table 3); extra hardware FLOPs of selective recompute
    hw = korthikanti_step_flops(1, 96, s, h, 51200, selective_recompute=True)
    model = korthikanti_step_flops(1, 96, s, h, 51200)
    assert hw / model - 1 == pytest.approx(e["extra_flops_fraction"], abs=tol["extra_flops_fraction"])
    assert 1 + s / (6 * h) == pytest.approx(e["hfu_over_mfu_approx"], abs=tol["hfu_over_mfu_approx"])


def _one_layer(fwd, bwd, extra):
    kind = LayerKind(fwd_ms=fwd, bwd_ms=bwd, act_mib=1, static_mib=0,
                     full=RecomputeOption(act_mib=0.1, extra_ms=extra))
    return ProfileArrays.from_profile(ModelProfile(kinds={"l": kind}, layer_kinds=[("l", 1)]))


def test_k_t4_layer_time_22b():
    """A measured per-layer profile carries Table 4 through the stage costs unchanged; the
    "full recompute replays one forward" rule gives the +39 % overhead."""
    c = case("K-T4-LAYER-TIME-22B")
    e = c["expected"]
    tol_ms, tol_o = c["tolerance"]["absolute_ms"], c["tolerance"]["absolute_overhead"]
    base = e["baseline"]["total"]
    one = np.ones((1, 1, 1), dtype=np.int64)
    zero = np.zeros_like(one)
    for key in ("baseline", "sequence_parallel", "selective", "selective_plus_sp"):
        row = e[key]
        pa = _one_layer(row["fwd"], row["bwd"], 0.0)
        sc = stage_costs(pa, one, zero, zero, zero)
        assert float((sc.fwd_ms + sc.bwd_ms).item()) == pytest.approx(row["total"], abs=tol_ms)
        if "overhead" in row:
            assert float((sc.fwd_ms + sc.bwd_ms).item()) / base - 1 == pytest.approx(row["overhead"], abs=tol_o)
    row = e["full_recompute"]
    pa = _one_layer(e["baseline"]["fwd"], e["baseline"]["bwd"], row["bwd"] - e["baseline"]["bwd"])
    sc = stage_costs(pa, one, one, zero, zero)
    assert float(sc.bwd_ms.item()) == pytest.approx(row["bwd"], abs=tol_ms)
    assert float((sc.fwd_ms + sc.bwd_ms).item()) == pytest.approx(row["total"], abs=tol_ms)
    rule = (base + e["baseline"]["fwd"]) / base - 1  # replay = one forward (analytic profile)
    assert rule == pytest.approx(row["overhead"], abs=tol_o)


def test_k_t5_175b_mfu():
    c = case("K-T5-175B")
    i, e = c["inputs"], c["expected"]
    tol = c["tolerance"]["absolute_percent_points"]
    model = korthikanti_step_flops(i["global_batch"], i["L"], i["s"], i["h"], i["V"])
    hw = korthikanti_step_flops(i["global_batch"], i["L"], i["s"], i["h"], i["V"], selective_recompute=True)
    t = i["iteration_time_selective_sp_s"]
    mfu = 100 * flops_utilization(model, t, i["gpus"], i["peak_tflops_per_gpu"])
    hfu = 100 * flops_utilization(hw, t, i["gpus"], i["peak_tflops_per_gpu"])
    assert mfu == pytest.approx(e["mfu_percent"], abs=tol)
    assert hfu == pytest.approx(e["hfu_percent"], abs=tol)
    gain = 100 * (i["iteration_time_full_recompute_s"] / t - 1)
    assert gain == pytest.approx(e["throughput_gain_percent"], abs=tol)


def test_n_params():
    c = case("N-PARAMS")
    i = c["inputs"]
    for name, (L, h) in i["configs"].items():
        got = narayanan_params(L, h, i["V"], i["s"]) / 1e9
        assert got == pytest.approx(c["expected"]["params_billion"][name], abs=c["tolerance"]["absolute_billion"]), name


def test_mg_bytes_per_param():
    c = case("MG-BYTES-PER-PARAM")
    d = c["inputs"]["d"]
    for key, dt in {"fp16_params_fp16_grads": ("fp16", "fp16"), "bf16_params_fp32_grads": ("bf16", "fp32"),
                    "fp32_params_fp32_grads": ("fp32", "fp32")}.items():
        assert megatron_bytes_per_param(*dt) == c["expected"][key]["plain"]
        assert megatron_bytes_per_param(*dt, distributed_optimizer=True, dp=d) == c["expected"][key]["distributed"]


def test_mg_warmup_1f1b():
    c = case("MG-WARMUP-1F1B")
    i, e = c["inputs"], c["expected"]
    cs = compile_schedule("1f1b", i["p"], i["v"], i["m"])
    assert (cs.fwd_before_bwd - 1).tolist() == e["warmup_per_rank"]
    assert cs.max_inflight.tolist() == e["peak_inflight_microbatches_per_rank"]


def test_mg_warmup_vpp():
    c = case("MG-WARMUP-VPP")
    i, e = c["inputs"], c["expected"]
    assert i["microbatch_group_size_per_vp_stage"] == i["p"]  # our table uses N = p
    cs = compile_schedule("1f1b", i["p"], i["v"], i["m"])
    assert (cs.fwd_before_bwd - 1).tolist() == e["warmup_per_rank"]
    assert cs.max_inflight.tolist() == e["peak_inflight_chunk_microbatches_per_rank"]
    # stage 0 holds 11 chunks of L/(p·v) layers = 1.375·L layer-equivalents
    assert cs.max_inflight[0] / (i["p"] * i["v"]) == e["stage0_layer_equivalents_factor"]


def test_mg_vpp_constraints():
    c = case("MG-VPP-CONSTRAINTS")
    got = [vpp_group_rule(x["p"], x["m"], x["N"])[0] for x in c["inputs"]["cases"]]
    assert got == c["expected"]["valid"]
    # the compiled schedule (N = p) refuses the same m
    for x, ok in zip(c["inputs"]["cases"], c["expected"]["valid"]):
        if x["N"] == x["p"]:
            if ok:
                compile_schedule("1f1b", x["p"], 2, x["m"])
            else:
                with pytest.raises(ValueError):
                    compile_schedule("1f1b", x["p"], 2, x["m"])


def test_mf_offset_48l_pp5_vpp2():
    """Layout normalization is the config layer's (tested there); here: the cost model places the
    layers of that layout chunk-major, 4 + 5·4 on chunk 0 before chunk 1."""
    from autotune.config.layout import layout_from_values

    c = case("MF-OFFSET-48L-PP5-VPP2")
    i = c["inputs"]
    lay = layout_from_values(i["num_layers"], i["pipeline_stage"], i["pp_interleave_num"], offset=i["offset"],
                             recompute=i["recompute_1d"])
    assert lay.layers_vp.tolist() == c["expected"]["layers_per_chunk_stage"]
    assert lay.recompute_vp.tolist() == c["expected"]["recompute_2d"]
    assert int(np.sum(i["offset"])) == c["expected"]["sum_offset_must_equal"]


def test_sapp_sim_1f1b_comm_ideal_and_memory():
    """SAPP's ideal term and per-stage peak memory; its comm term is SAPP's fitted polynomial and
    its imbalance the residual after it, so only the model-independent parts are asserted."""
    c = case("SAPP-SIM-1F1B-COMM")
    i, e = c["inputs"], c["expected"]
    f = np.asarray(i["block_forward_time"])
    r = simulate_schedule(f, f * i["backward_ratio"], micro_batch_num=i["micro"], act_mib=f,
                          p2p_ms=i["comm_time"])
    tol = c["tolerance"]["absolute"]
    assert r.bubble["ideal"] == pytest.approx(e["bubble_ideal"], abs=tol)
    assert r.peak_mib == pytest.approx(e["peak_memory_per_stage"], abs=tol)
    parts = r.bubble["ideal"] + r.bubble["imbalance"] + r.bubble["recompute"] + r.bubble["comm"]
    assert parts == pytest.approx(r.bubble["real"], abs=1e-12)
    # without comm the event simulation is exact: T = 3·8 + 16·26.4 + 3·16 = 494.4 ms
    r0 = simulate_schedule(f, 2 * f, micro_batch_num=i["micro"])
    assert r0.step_ms == pytest.approx(494.4)
    assert r0.bubble["real"] == pytest.approx(4 * 494.4 / (32.8 * 3 * 16) - 1)
    assert r.bubble["real"] > r0.bubble["real"]


def test_sapp_sim_balanced():
    c = case("SAPP-SIM-BALANCED")
    e = c["expected"]
    tol = c["tolerance"]["absolute"]
    for x, real, peak in zip(c["inputs"]["cases"], e["bubble_real"], e["peak_memory_per_stage"]):
        f = np.asarray(x["block"], dtype=float)
        r = simulate_schedule(f, f * c["inputs"]["backward_ratio"], micro_batch_num=x["micro"], act_mib=f)
        assert r.bubble["real"] == pytest.approx(real, abs=tol)
        assert r.bubble["imbalance"] == pytest.approx(0.0, abs=1e-9)
        assert r.peak_mib == pytest.approx(peak, abs=tol)


def test_zb_ideal_table():
    c = case("ZB-IDEAL-TABLE")
    i, e = c["inputs"], c["expected"]
    tol = c["tolerance"]["absolute"]
    rates = zero_bubble_rates(i["p"], i["m"])
    for k, v in e["bubble_rate"].items():
        assert rates[k] == pytest.approx(v, abs=tol)
    assert zero_bubble_peak_inflight(i["p"])["ZB-H2"] == e["ZB-H2_peak_inflight"]
    # 1F1B entry by simulation: T_F = T_B = T_W = 1, backward = B + W = 2
    p, m = i["p"], i["m"]
    r = simulate_schedule([1.0] * p, [2.0] * p, micro_batch_num=m, act_mib=[1.0] * p)
    assert r.bubble["real"] == pytest.approx(e["bubble_rate"]["1F1B"], abs=tol)
    # ZBV entry by simulation: the same model in two half chunks per stage (T_F = T_B = T_W = 1/2
    # per chunk). The README's 0 overlaps the pipeline fill with the neighbouring steps; one step
    # keeps exactly that fill, (p − 1) chunk forwards: step 6m·½ + (p − 1)·½ = 75.5, bubble
    # (p − 1)/(6m) = 7/144 (vs 7/24 for 1F1B), and no other idle time.
    h = np.full((2, p), 0.5)
    z = simulate_schedule(h, 2 * h, micro_batch_num=m, schedule="zero_bubble_v", act_mib=h)
    assert z.step_ms == pytest.approx(75.5)
    assert z.bubble["real"] == pytest.approx(7 / 144, abs=tol)
    assert z.bubble["real"] - z.bubble["ideal"] == pytest.approx(e["bubble_rate"]["ZBV"], abs=tol)
    # activation 1× of 1F1B: a stage holds at most 2p half-chunks = p micro-batches (1F1B stage 0)
    assert max(z.peak_mib) / max(r.peak_mib) == pytest.approx(e["activation_memory_vs_1F1B"]["ZBV"])
    assert max(z.max_inflight) == 2 * p
    # p2p volume 2× of 1F1B: 2(p − 1) cross-device hops per micro-batch and direction (the turn on
    # stage p − 1 is free) vs p − 1
    hops = lambda name, V: int(compile_schedule(name, p, V, m).cross.sum())  # noqa: E731
    assert hops("zero_bubble_v", 2) / hops("1f1b", 1) == e["p2p_volume_vs_1F1B"]["ZBV"]


def test_syn1_minmax():
    c = case("SYN-1-MINMAX")
    i, e = c["inputs"], c["expected"]
    best, split = min_max_partition(i["layer_cost"], i["p"], head=i["head_cost_stage0"], tail=i["tail_cost_last"])
    assert best == e["optimal_bottleneck"]
    assert split == e["one_optimal_split"]
    bounds = np.cumsum([0] + split)
    costs = [sum(i["layer_cost"][a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    costs[0] += i["head_cost_stage0"]
    costs[-1] += i["tail_cost_last"]
    assert costs == e["stage_costs"]


def _syn2_profile(i):
    kind = LayerKind(fwd_ms=i["layer_fwd"], bwd_ms=i["layer_bwd"], act_mib=i["act_per_layer_per_mb"],
                     static_mib=i["static_per_layer"],
                     full=RecomputeOption(act_mib=i["act_if_recomputed"], extra_ms=i["full_recompute_replay"]))
    prof = ModelProfile(kinds={"l": kind}, layer_kinds=[("l", i["L"])],
                        head=EndPart(static_mib=i["head_static"]),
                        tail=EndPart(fwd_ms=i["tail_time_fwd"], bwd_ms=i["tail_time_bwd"], static_mib=i["tail_static"]))
    return ProfileArrays.from_profile(prof)


def test_syn2_memory_recompute():
    c = case("SYN-2-MEM-RECOMPUTE")
    i = c["inputs"]
    pa = _syn2_profile(i)
    tol = c["tolerance"]["absolute"]
    for cap in i["caps"]:
        want = c["expected"][f"cap{cap}"]
        best, _, _ = brute_force_1f1b(pa, i["p"], i["m"], cap)
        assert best == pytest.approx(want["step_time"], abs=tol)
        # the published optimum reaches that time and fits
        lay = np.asarray(want["split"])[None, None, :]
        rec = np.asarray(want["recompute"])[None, None, :]
        from autotune.cost import simulate

        z = np.zeros_like(lay)
        sim = simulate(compile_schedule("1f1b", i["p"], 1, i["m"]), stage_costs(pa, lay, rec, z, z))
        assert float(sim.step_ms[0]) == pytest.approx(want["step_time"], abs=tol)
        assert (sim.peak_mib <= cap).all()
        n, r = lay[0, 0], rec[0, 0]
        law = n * 5 + (i["p"] - np.arange(i["p"])) * ((n - r) * 10 + r * 1) + np.array([20, 0, 0, 30])
        assert sim.peak_mib[0].tolist() == pytest.approx(law.tolist())


def test_closed_form_counterexample():
    c = case("CLOSED-FORM-COUNTEREXAMPLE")
    i, e = c["inputs"], c["expected"]
    tol = c["tolerance"]["absolute"]
    r = simulate_schedule(i["fwd"], i["bwd"], micro_batch_num=i["m"])
    assert r.step_ms == pytest.approx(e["event_simulation_makespan"], abs=tol)
    assert sum_plus_max_ms(i["fwd"], i["bwd"], i["m"]) == pytest.approx(e["closed_form_sum_plus_max"], abs=tol)
    assert critical_path_lower_bound_ms(i["fwd"], i["bwd"], i["m"]) == pytest.approx(e["critical_path_lower_bound"],
                                                                                   abs=tol)
