"""``hbm_margin`` in the Megatron mode: the search packs against budget − margin, as the MindFormers
search does (README, "Safety margin"), and reports budget, margin and limit."""

import json

import pytest

import autotune
from autotune.errors import ConfigError
from autotune.megatron.run import build_run
from autotune.megatron.search import MegatronSpace, search_megatron
from tests.megatron.small_model import SMALL_GQA

ARGS = dict(SMALL_GQA)
SPACE = MegatronSpace(virtual_pipeline=[1], recompute=["none", "full"])
BUDGET = 3060.0   # MiB: tight enough that a 5 % margin changes the answer (no margin: full block 1)


def test_margin_is_the_search_at_the_lowered_budget():
    run = build_run(dict(ARGS))
    plain = search_megatron(run, space=SPACE, hbm_mib=BUDGET)
    kept = search_megatron(run, space=SPACE, hbm_mib=BUDGET, hbm_margin=0.05)
    lowered = search_megatron(run, space=SPACE, hbm_mib=0.95 * BUDGET)
    assert kept.hbm_mib == BUDGET and kept.hbm_margin_mib == pytest.approx(153.0)
    assert (kept.choice, kept.layers_vp) == (lowered.choice, lowered.layers_vp)
    assert kept.best.step_time_ms == lowered.best.step_time_ms
    assert kept.choice != plain.choice               # the margin made a difference
    assert plain.best.peak_mib > 0.95 * BUDGET >= kept.best.peak_mib
    assert kept.best.hbm_budget_mib == pytest.approx(0.95 * BUDGET)   # reports hold the limit


def test_margin_in_the_json():
    res = autotune.search(megatron_args=dict(ARGS), megatron_space=SPACE, hbm_mib=BUDGET, hbm_margin="5%")
    d = json.loads(json.dumps(res.to_dict()))
    assert d["hbm_margin_mib"] == pytest.approx(153.0)
    assert d["megatron"]["hbm_budget_mib"] == BUDGET
    best = d["best"]
    assert best["hbm_budget_mib"] == pytest.approx(BUDGET)
    assert best["hbm_limit_mib"] == pytest.approx(BUDGET - 153.0)
    assert best["headroom_mib"] == pytest.approx(BUDGET - best["peak_mib"])


@pytest.mark.parametrize("bad", [1.5, "-2GB", "lots"])
def test_bad_margin_names_the_flag(bad):
    with pytest.raises(ConfigError) as exc:
        search_megatron(build_run(dict(ARGS)), space=SPACE, hbm_mib=BUDGET, hbm_margin=bad)
    assert exc.value.rule == "R_HBM_MARGIN" and exc.value.field == "--hbm-margin"
