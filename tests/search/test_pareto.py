"""--objective time,memory: the Pareto front of step time vs worst-stage peak, checked against a
brute-force enumeration of every layout of a toy space."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.tuner.pareto import non_dominated
from autotune.tuner.problem import Problem
from autotune.tuner.space import SearchSpace

DATA = Path(__file__).resolve().parents[1] / "sweep" / "data"
CFG, PROF = DATA / "tiny.yaml", DATA / "tiny_profile.yaml"


def brute_front(kinds: tuple[str, ...], hbm_mib: float) -> list[tuple[float, float]]:
    """Every (split, full, select) layout of tiny.yaml (12 layers, pp 2, vpp 1), simulated."""
    from autotune.cost.inputs import ProfileArrays

    pa = ProfileArrays.from_profile(autotune.load_profile(PROF))
    prob = Problem(pa, P=2, m=4, hbm_mib=hbm_mib, vpp_candidates=[1], kinds=kinds)
    L, R, S = [], [], []
    for n0 in range(13):
        n = (n0, 12 - n0)
        opts = [[(r, s) for r in (range(k + 1) if "full" in kinds else [0])
                 for s in ([0] + list(range(r + 1, k + 1)) if "select" in kinds else [0])] for k in n]
        for (r0, s0), (r1, s1) in itertools.product(*opts):
            L.append([n]); R.append([[r0, r1]]); S.append([[s0, s1]])
    L, R, S = (np.asarray(x, dtype=np.int64) for x in (L, R, S))
    sc = prob.evaluate(1, L, R, S, np.zeros_like(L))
    peak = sc.peak_mib.max(axis=1)
    pts = [(float(t), float(p)) for t, p in zip(sc.step_ms, peak) if p <= hbm_mib + 1e-9]
    return non_dominated(pts, step=lambda x: x[0], peak=lambda x: x[1])


@pytest.mark.parametrize("kinds,hbm", [(("full",), "1GB"), (("full", "select"), "1GB"),
                                       (("full", "select"), "0.6GB")])
def test_front_equals_enumeration(kinds, hbm) -> None:
    space = SearchSpace(pp_interleave_num=[1], recompute_kinds=list(kinds))
    res = autotune.search(CFG, PROF, space=space, trials=20, seed=0, objective="time,memory",
                          hbm_mib=float(hbm[:-2]) * 1024)
    truth = brute_front(kinds, float(hbm[:-2]) * 1024)
    got = [(f["step_time_ms"], f["peak_mib"]) for f in res.pareto]
    assert res.pareto_exact
    assert len(got) == len(truth) >= 2
    np.testing.assert_allclose(np.asarray(got), np.asarray(truth), rtol=1e-9, atol=1e-9)
    # the fastest point is the time-objective answer; margins are budget - peak
    assert got[0][0] == pytest.approx(res.best.step_time_ms)
    for f in res.pareto:
        assert f["margin_mib"] == pytest.approx(float(hbm[:-2]) * 1024 - f["peak_mib"])
        assert sum(sum(r) for r in [f["config"]["offset"]]) == 0


@pytest.mark.slow
def test_front_reproducible_and_default_objective_has_none() -> None:
    space = SearchSpace(pp_interleave_num=[1, 2], recompute_kinds=["full"])
    a = autotune.search(CFG, PROF, space=space, trials=15, seed=3, objective="time,memory")
    b = autotune.search(CFG, PROF, space=space, trials=15, seed=3, objective="time,memory")
    assert a.pareto == b.pareto and len(a.pareto) >= 2
    steps = [f["step_time_ms"] for f in a.pareto]
    peaks = [f["peak_mib"] for f in a.pareto]
    assert steps == sorted(steps) and peaks == sorted(peaks, reverse=True)
    c = autotune.search(CFG, PROF, space=space, trials=15, seed=3)
    assert c.pareto is None and "pareto" not in c.to_dict()
    assert a.to_dict()["pareto"] == a.pareto


def test_bad_objective_is_config_error() -> None:
    with pytest.raises(autotune.errors.ConfigError) as e:
        autotune.search(CFG, PROF, objective="memory")
    assert e.value.field == "objective"


@pytest.mark.slow
def test_cli_pareto_table_and_json() -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    space = DATA / "tiny_space.yaml"
    r = CliRunner().invoke(main, ["search", str(CFG), "--profile", str(PROF), "--space", str(space),
                                  "--trials", "10", "--quiet", "--objective", "time,memory"])
    assert r.exit_code == 0, r.output
    assert "Pareto front, step time vs worst-stage peak" in r.output and "headroom MiB" in r.output
    r = CliRunner().invoke(main, ["search", str(CFG), "--profile", str(PROF), "--space", str(space),
                                  "--trials", "10", "--quiet", "--objective", "time,memory", "--format", "json"])
    data = json.loads(r.output)
    assert data["pareto"] and {"step_time_ms", "peak_mib", "config"} <= set(data["pareto"][0])
    assert data["pareto"][0]["step_time_ms"] == pytest.approx(data["best"]["step_time_ms"])
