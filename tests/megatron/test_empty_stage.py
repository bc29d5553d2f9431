"""A Megatron user layout with an empty middle stage (``Et*4||t*2|t*2L``, which Megatron-LM
accepts): the search evaluates it as the ``user`` baseline and its JSON has the same keys as the
answer's, ``config`` None (MindFormers cannot write it)."""

import json

from autotune.megatron.run import build_run
from autotune.megatron.search import MegatronSpace, search_megatron
from tests.megatron.small_model import SMALL_GQA

ARGS = {**SMALL_GQA, "pipeline-model-parallel-size": 4,
        "pipeline-model-parallel-layout": "Et*4||t*2|t*2L"}


def test_user_baseline_with_an_empty_middle_stage():
    run = build_run(dict(ARGS))
    assert run.layers_vp == [[4, 0, 2, 2]]
    res = search_megatron(run, space=MegatronSpace(virtual_pipeline=[1], recompute=["none"], refine=0))
    d = json.loads(json.dumps(res.to_dict()))
    user, best = d["baselines"]["user"], d["best"]
    assert user is not None and best is not None
    assert set(user) == set(best)
    assert user["config"] is None and best["config"] is not None
    assert [s["layers"] for s in user["stages"]] == [[4], [0], [2], [2]]
    assert user["step_time_ms"] == res.baselines["user"].step_time_ms > best["step_time_ms"]
