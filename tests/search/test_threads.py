"""The search runs with one BLAS thread (autotune.tuner.threads): OpenBLAS's extra threads spin
between the search's small matrix-vector products, costing CPU time without saving wall time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import autotune
import autotune.tuner.search as tuner_search
from autotune.tuner.threads import one_blas_thread

DATA = Path(__file__).resolve().parents[1] / "sweep" / "data"


def _blas_threads() -> dict[str, int]:
    """Threads of every loaded BLAS library, by file."""
    np.ones((2, 2)) @ np.ones(2)  # numpy's BLAS is loaded
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_one_blas_thread_limits_and_restores() -> None:
    with threadpool_limits(limits=2, user_api="blas"):  # not the suite's own limit (tests/conftest.py)
        before = _blas_threads()
        assert len(before) >= 2 and set(before.values()) == {2}  # numpy's and scipy's
        with one_blas_thread():
            assert _blas_threads() == dict.fromkeys(before, 1)
        assert _blas_threads() == before


def test_search_runs_under_one_blas_thread(monkeypatch) -> None:
    seen: list[dict[str, int]] = []
    real = tuner_search.run_search

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(tuner_search, "run_search", spy)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        r = autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                            trials=5, seed=0)
        assert _blas_threads() == before  # the caller's thread count is back after the search
    assert r.best is not None
    assert seen == [dict.fromkeys(before, 1)]
