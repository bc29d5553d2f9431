"""A Megatron user layout with an empty middle stage (``Et*4||t*2|t*2L``, which Megatron-LM
accepts): the search evaluates it as the ``user`` baseline and its JSON has the same keys as the
answer's, ``config`` None (MindFormers cannot write it)."""

import json

from autotune.megatron.run import build_run
from autotune.megatron.search import MegatronSpace, search_megatron

ARGS = {
    "num-layers": 8, "hidden-size": 1024, "num-attention-heads": 16, "group-query-attention": True,
    "num-query-groups": 4, "kv-channels": 64, "ffn-hidden-size": 4096, "swiglu": True,
    "normalization": "RMSNorm", "untie-embeddings-and-output-weights": True, "vocab-size": 32000,
    "seq-length": 2048, "tensor-model-parallel-size": 2, "pipeline-model-parallel-size": 4,
    "world-size": 16, "micro-batch-size": 1, "global-batch-size": 32, "use-distributed-optimizer": True,
    "sequence-parallel": True, "bf16": True, "pipeline-model-parallel-layout": "Et*4||t*2|t*2L",
}


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
