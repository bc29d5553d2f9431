"""Progress in every phase (issue 19 item 3): status lines on a log, and the verdict for a config
no layout can fit, reached before the bound phase."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune
from autotune.tuner.progress import Progress
from tests.search.test_exact_bounds import syn2_problem

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "sweep" / "data"
TELECHAT = ROOT / "examples" / "telechat2_115b" / "train.yaml"


def _small(progress, **kw):
    return autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                           trials=30, seed=0, gap=None, progress=progress, **kw)


def test_every_phase_prints_status_lines_on_a_log() -> None:
    buf = io.StringIO()
    with Progress("lines", every_s=0.05, stream=buf) as prog:
        r = _small(prog)
    lines = buf.getvalue().splitlines()
    assert prog.phases == ["reading", "bounds", "search", "polish"]
    for phase in prog.phases[1:]:   # after the first period, each phase announced when it starts
        assert any(x.startswith(f"{phase}: ") for x in lines), phase
    # every line: "phase: detail..., N s"; once known, the best and the bound move with it
    assert all(re.fullmatch(r"(reading|bounds|search|polish): .*\d+ s", x) for x in lines)
    assert any(x.startswith("search: 0/30 trials, ") and f"bound {r.lower_bound_ms:.1f} ms" in x for x in lines)
    assert f"best {r.best.step_time_ms:.1f} ms" in lines[-1]
    assert any(x.startswith("bounds: sub-problem 1/1: ") and " bound " in x for x in lines)


def test_a_short_run_on_a_log_prints_nothing() -> None:
    buf = io.StringIO()
    with Progress("lines", every_s=60.0, stream=buf) as prog:
        prog.phase("reading", "x")
        prog.phase("bounds", "sub-problem 1/1")
        prog.update(best_ms=120.0, bound_ms=100.0)
    assert buf.getvalue() == "" and prog.phases == ["reading", "bounds"]


def test_heartbeat_repeats_the_status_while_a_phase_computes() -> None:
    import time

    buf = io.StringIO()
    with Progress("lines", every_s=0.05, stream=buf) as prog:
        prog.phase("bounds", "sub-problem 1/1")
        prog.update(best_ms=120.0, bound_ms=100.0)
        time.sleep(0.5)       # no update from the "search": the heartbeat thread prints
    beats = [x for x in buf.getvalue().splitlines() if x.startswith("bounds: sub-problem 1/1, best 120.0 ms, "
                                                                    "bound 100.0 ms, certified gap 20.00%")]
    assert len(beats) >= 3


def test_cli_on_a_log_prints_phases_from_the_start(tmp_path) -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    r = CliRunner().invoke(main, ["search", str(DATA / "small.yaml"), "--profile", str(DATA / "small_profile.yaml"),
                                  "--space", str(DATA / "small_space.yaml"), "--trials", "30",
                                  "--progress-every", "0.05", "--out", str(tmp_path / "best.yaml")])
    assert r.exit_code == 0, r.output
    err = r.stderr.splitlines()
    assert [p for p in ("bounds", "search", "writing") if any(x.startswith(p + ": ") for x in err)] == \
        ["bounds", "search", "writing"]
    assert "best.yaml" in r.stdout and not r.stdout.startswith(("reading", "bounds"))
    q = CliRunner().invoke(main, ["search", str(DATA / "small.yaml"), "--profile", str(DATA / "small_profile.yaml"),
                                  "--space", str(DATA / "small_space.yaml"), "--trials", "30", "--quiet"])
    assert q.exit_code == 0 and q.stderr == ""


def test_memory_floor_is_hand_computed_and_sound() -> None:
    """SYN-2 (12 layers, p 4, static 5 MiB a layer, head 20 and tail 30 MiB, activation 10 MiB a
    layer and micro-batch, 1 when recomputed). Static: stages 1, 2 hold >= 1 layer; water-filling
    the 12 layers gives loads 30, 25, 25, 30 -> 30 MiB. With one micro-batch's activations (6 MiB a
    layer): 32, 30, 30, 30 -> 32 MiB."""
    from autotune.tuner.exact import exact_optimum

    assert syn2_problem(150).memory_floor_mib() == pytest.approx((30.0, 32.0))
    assert exact_optimum(syn2_problem(31.9)).best is None    # sound: nothing fits below the floor


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), N=st.integers(4, 8), P=st.integers(2, 3), V=st.integers(1, 2),
       kinds=st.sampled_from([("full",), ("full", "select", "comm"), ("select",)]),
       ws=st.sampled_from([0.0, 1.0, 5.0, 40.0]), act=st.sampled_from([1.0, 10.0]), split=st.sampled_from([1, 2]),
       static_delta=st.booleans())
def test_memory_floor_is_below_every_layout(seed, N, P, V, kinds, ws, act, split, static_delta) -> None:
    """No layout of a random problem fits a budget just under the floor (every layout enumerated),
    with the full-recompute workspace up to 40 × the activation and activations up to 10 × the
    drawn ones (where one layer's memory alone decides: the floor's last term binds on about a
    third of such draws), and seqpipe's seq_split_num 2 (the activations' term left out); with
    ``static_delta`` the two kinds' static memory differs up to 8 × and recompute lowers it (the
    mean over the stages then binds on many draws)."""
    from dataclasses import replace

    from autotune.tuner.exact import exact_optimum
    from autotune.tuner.problem import Problem
    from tests.search.test_exact_bounds import _random_problem

    base = _random_problem(seed, N, P, V if split == 1 else 1, kinds, 1.0,
                           "seqpipe" if split > 1 else "1f1b", split, static_delta=static_delta)
    pa = replace(base.pa, ws_kc=base.pa.ws_kc * ws * act, act_kc=base.pa.act_kc * act, _prefix={})
    probe = Problem(pa, P=P, m=base.m, hbm_mib=1e12, vpp_candidates=base.vpp_candidates, kinds=kinds,
                    schedule=base.schedule, seq_split_num=split)
    floor = probe.memory_floor_mib()[1]
    tight = Problem(pa, P=P, m=base.m, hbm_mib=floor * (1 - 1e-9), vpp_candidates=base.vpp_candidates,
                    kinds=kinds, schedule=base.schedule, seq_split_num=split)
    assert exact_optimum(tight).best is None


def test_one_layers_memory_alone_is_decided_before_the_bound_phase() -> None:
    """Where one layer's activations or its replay's workspace alone exceed the budget whatever its
    recompute (here 2,000 MiB kept, or 1,500 MiB of workspace when fully recomputed, against a
    1,000 MiB budget; the water-filling of static memory and the recomputed activations leaves
    room: 2 × 10 + 4 × 3 + 50 MiB), no layout fits, decided without a bound phase: stage constant
    50 + least layer static 10 + min(max(2000, 0), max(100, 1500)) = 1,560 MiB."""
    from autotune.cost.inputs import ProfileArrays
    from autotune.profile.schema import ModelProfile
    from autotune.tuner.exact import exact_optimum
    from autotune.tuner.problem import Problem

    prof = ModelProfile(kinds={"d": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 2000.0, "static_mib": 10.0,
                                     "full": {"act_mib": 100.0, "extra_ms": 1.0, "workspace_mib": 1500.0}}},
                        layer_kinds=[("d", 8)], stage_const_mib=50.0)
    pa = ProfileArrays.from_profile(prof)
    problem = Problem(pa, P=2, m=4, hbm_mib=1000.0, vpp_candidates=[1, 2], kinds=("full",))
    assert problem.memory_floor_mib()[1] == pytest.approx(1560.0)
    assert exact_optimum(problem).best is None


def test_memory_floor_counts_each_layers_own_static_memory() -> None:
    """One dense layer (10 MiB static) and seven MoE layers (100 MiB) on 2 stages, 50 MiB a stage,
    activations 1 MiB a layer (0.1 when fully recomputed). Water-filling with the cheapest layer
    says 50 + 4 × 10 = 90 MiB; the stages together hold every layer, so the worst holds at least
    the mean: (2 × 50 + 10 + 700) / 2 = 405 MiB static, + 8 × 0.1 / 2 = 405.4 MiB with one
    micro-batch's activations. The best split (4 / 4) holds 360 and 450 MiB."""
    from autotune.cost.inputs import ProfileArrays
    from autotune.profile.schema import ModelProfile
    from autotune.tuner.exact import exact_optimum
    from autotune.tuner.problem import Problem

    def kind(static):
        return {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 1.0, "static_mib": static,
                "full": {"act_mib": 0.1, "extra_ms": 1.0, "workspace_mib": 1.0}}

    prof = ModelProfile(kinds={"dense": kind(10.0), "moe": kind(100.0)}, layer_kinds=[("dense", 1), ("moe", 7)],
                        stage_const_mib=50.0)
    pa = ProfileArrays.from_profile(prof)
    problem = Problem(pa, P=2, m=4, hbm_mib=1e6, vpp_candidates=[1], kinds=("full",))
    assert problem.memory_floor_mib() == pytest.approx((405.0, 405.4))
    assert exact_optimum(problem).best.peak_mib >= 450.0
    below = Problem(pa, P=2, m=4, hbm_mib=405.3, vpp_candidates=[1], kinds=("full",))
    assert exact_optimum(below).best is None


def test_config_no_layout_can_fit_is_decided_before_the_bound_phase(tmp_path) -> None:
    """TeleChat2 with pipeline_stage 1: 96 layers' static memory (55555 MiB) plus one micro-batch's
    activations exceed the 55808 MiB budget on every layout; the verdict comes without a bound
    phase (no ``bounds`` phase, no trials)."""
    cfg = tmp_path / "pp1.yaml"
    cfg.write_text(TELECHAT.read_text().replace("pipeline_stage: 8", "pipeline_stage: 1"))
    prog = Progress()
    r = autotune.search(cfg, progress=prog)
    assert prog.phases == ["reading"]
    assert r.stopped_by == "static_memory" and r.best is None and r.trials == 0 and r.study is None
    assert r.min_static_mib == pytest.approx(55555.0, abs=1.0)
    assert r.min_peak_mib > r.config.hbm_mib == 55808
    assert r.closest is not None and r.closest.peak_mib >= r.min_peak_mib      # the floor is below any layout
    assert "stopped before the bound phase" in r.stop_text()

    from click.testing import CliRunner

    from autotune.cli import main

    res = CliRunner().invoke(main, ["search", str(cfg), "--quiet"])
    assert res.exit_code == 2
    assert "[R_HBM_INFEASIBLE]" in res.stderr and "needs at least 55555 MiB" in res.stderr
    assert "decided before the bound phase" in res.stderr and "Traceback" not in res.output


def test_stop_line_says_when_only_the_bound_phase_was_cut() -> None:
    """A 20 s --timeout whose bound phase was cut in its half (10 s) while the trials then ended on
    their own reads as cut short *there*, not as a run that hit 20 s (a new user saw a 12 s run
    called "CUT SHORT by its 20 s timeout")."""
    from autotune.tuner.outcome import SearchOutcome

    r = SearchOutcome(best=None, closest=None, baselines={}, trials=14, seconds=12.4, config=None, profile=None,
                      certified_gap=0.0209, timed_out=True, stopped_by="timeout", time_limit_s=20.0,
                      bound_phase_cut=True)
    assert r.stop_text() == ("CUT SHORT by its 20 s timeout in the bound phase only (the search ended after "
                             "12.4 s), a wall clock (the answer may depend on the "
                             "machine's speed and load); certified gap then 2.09%. The bound phase (half of the "
                             "time left after reading, at most 10 s) stopped its local search or later bound "
                             "passes at their deadlines. The trials then ended on their own.")
    # with the share it had (half of the 20 s less 1.3 s of reading): that figure, not the most
    timed = SearchOutcome(best=None, closest=None, baselines={}, trials=14, seconds=12.4, config=None, profile=None,
                          certified_gap=0.0209, timed_out=True, stopped_by="timeout", time_limit_s=20.0,
                          bound_phase_cut=True, bound_phase_s=(20.0 - 1.3) / 2)
    assert ("The bound phase (9.3 s, half of what the limit left after start-up and reading) stopped its "
            "local search or later bound passes at their deadlines. ") in timed.stop_text()
    # the trials met their half of the time left (a V held only a floor) and the time left then
    # found a faster config: not "met the clock too", which read as a contradiction to a new user
    halved = SearchOutcome(best=None, closest=None, baselines={}, trials=14, seconds=3.0, config=None, profile=None,
                           certified_gap=0.0209, timed_out=True, stopped_by="timeout", time_limit_s=3.0,
                           bound_phase_cut=True, bound_phase_s=0.8, trials_stopped_by="timeout",
                           trials_share_halved=True, time_left_faster=True)
    assert "bound phase only" not in halved.stop_text()  # the trials met the clock: the run reached it
    assert halved.stop_text().endswith(
        "The trials then met their half of the time left (a pp_interleave_num held only a floor: the other "
        "half went to its bound). With the time left, a local search and kicks from their answer found a "
        "faster config.")
    plain = SearchOutcome(best=None, closest=None, baselines={}, trials=14, seconds=20.1, config=None, profile=None,
                          certified_gap=0.0209, timed_out=True, stopped_by="timeout", time_limit_s=20.0)
    assert plain.stop_text() == ("CUT SHORT by its 20 s timeout, a wall clock (the answer may depend on the "
                                 "machine's speed and load); certified gap then 2.09%")
    assert "bound phase" not in plain.stop_text()


def test_leaving_a_phase_prints_its_last_state() -> None:
    """Trials that finish between two status lines still show: entering the next phase first
    prints the one being left as it ended ("search: 16/200 trials"), not its start (0/200)."""
    import io
    import time as _time

    out = io.StringIO()
    with Progress("lines", every_s=30.0, stream=out) as prog:
        prog.t0 -= 60.0  # past the first period: a phase start prints at once
        prog.phase("search", "0/200 trials", total=200)
        prog.update(detail="16/200 trials", done=16, best_ms=6562.7)  # not due: the last line was just now
        _time.sleep(0.01)
        prog.phase("polish", "local search from the best trial")
    lines = [ln.split(", ")[0] for ln in out.getvalue().splitlines()]
    assert lines == ["search: 0/200 trials", "search: 16/200 trials", "polish: local search from the best trial"]


def test_a_cut_bound_phase_keeps_why_the_trials_ended(monkeypatch) -> None:
    """When only the bound phase's half of ``--timeout`` ran out, ``stopped_by`` says "timeout" but
    the trials ended on their own before the limit: ``trials_stopped_by`` (and the json, and the stop
    line) says why; without a cut the two agree."""
    import json
    import time

    import autotune.tuner.search as search_mod
    from autotune.emit.search_result import result_dict

    plain = _small(False, timeout=6.0)
    assert not plain.timed_out and not plain.bound_phase_cut
    assert plain.trials_stopped_by == plain.stopped_by != "timeout"

    real = search_mod.prepare

    def slow_prepare(cfg, subs, user, limit, t0, *args, **kw):
        out = real(cfg, subs, user, limit, t0, *args, **kw)
        time.sleep(max(0.0, t0 + 0.5 * limit + 0.05 - time.monotonic()))  # past the bound phase's half
        return out

    monkeypatch.setattr(search_mod, "prepare", slow_prepare)
    r = _small(False, timeout=6.0)
    assert r.seconds < 5.5  # the trials ended on their own, before the limit
    assert r.timed_out and r.bound_phase_cut and r.stopped_by == "timeout"
    assert r.trials_stopped_by == plain.trials_stopped_by  # the same trials as without the cut
    d = json.loads(json.dumps(result_dict(r)))
    assert d["stopped_by"] == "timeout" and d["bound_phase_cut"] is True
    assert d["trials_stopped_by"] == r.trials_stopped_by
    assert "The trials then ended on their own (" in r.stop_text()
