"""Every answer is 1-opt (issue 17) on real configs too: each distinct pipeline-parallel layout of
the corpus (``benchmarks/corpus_search.py``'s selection, pipeline_stage >= 2: 52 layouts),
searched as ``autotune search`` searches it by default (the solver pipeline, then the study with
200 trials and the 0.5 % gap stop), has no improving single move: one layer moved between two
mini-stages, or one recompute count ±1 (``tests/search/test_one_opt.py``'s own neighbourhood,
every move scored). Two cheap layouts run whenever the corpus is extracted; the others (up to
~25 CPU s each, ~7 min together) with AUTOTUNE_SLOW=1. All 52 passed when the test was written
(the quick-start round)."""

from __future__ import annotations

import time

import pytest

import corpus_lib as L

CORPUS = L.corpus_dir()
pytestmark = pytest.mark.skipif(CORPUS is None, reason=f"no MindFormers corpus: run python {L.SCRIPT}")

#: Layouts searched by default when the corpus is there (about a second each).
FAST = ("r1.3.0/configs/glm4/finetune_glm4_9b.yaml", "r1.3.0/configs/codellama/finetune_codellama_34b_32p.yaml")


def _layouts() -> list:
    if CORPUS is None:
        return []
    from benchmarks.corpus_search import files
    return [pytest.param(path, args, id=fid, marks=() if fid in FAST else pytest.mark.slow)
            for fid, path, args in files(None, 2)]


@pytest.mark.parametrize("path, args", _layouts())
def test_corpus_answers_are_one_opt(path, args):
    from autotune.config.training import load_config
    from autotune.tuner.heap import search_heap
    from autotune.tuner.outcome import SAFETY_TIMEOUT_S
    from autotune.tuner.search import subproblems
    from autotune.tuner.solve import bound_and_seeds
    from autotune.tuner.space import expand_space, load_search_space
    from autotune.tuner.threads import one_blas_thread
    from tests.search.test_one_opt import study_answer_is_one_opt

    hf = args[args.index("--hf-config") + 1] if "--hf-config" in args else None
    cfg = load_config(str(path), hf_config=hf)
    sp = load_search_space(None)
    for _var, pr in subproblems(cfg, sp, expand_space(cfg, sp, None, device="ascend-910b", overrides=None)):
        with one_blas_thread(), search_heap():
            bs = bound_and_seeds(pr, [], deadline=time.monotonic() + SAFETY_TIMEOUT_S / 2, target_gap=0.005)
            study_answer_is_one_opt(pr, bs)
