"""search_heap: large temporaries reused from the heap during a search, glibc's behaviour after it."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from autotune.tuner import heap
from autotune.tuner.heap import search_heap

GLIBC = heap._libc() is not None


def _refill_faults(nbytes: int = 24 << 20) -> int:
    """Minor page faults of allocating and touching an array of ``nbytes`` right after one of the
    same size was freed."""
    a = np.ones(nbytes // 8)
    del a
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(nbytes // 8)
    assert a[-1] == 1.0
    del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_temporary_is_reused_inside():
    """A freed 24 MiB block (below the 32 MiB mmap threshold) comes back from the heap without page
    faults inside; before the first search glibc's threshold (128 KiB, adapting only as mmapped
    blocks are freed) mmaps it afresh in a new process, which a subprocess shows."""
    import subprocess
    import sys
    from pathlib import Path

    code = "from tests.search.test_heap import _refill_faults; print(_refill_faults())"
    root = Path(__file__).resolve().parents[2]
    fresh = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               cwd=root).stdout)
    with search_heap() as on:
        assert on is True
        inside = _refill_faults()
    # 24 MiB is 6,144 pages of 4 KiB (12 huge pages of 2 MiB)
    assert fresh >= 10
    assert inside * 10 < fresh


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_nested_use_keeps_the_outer_settings(monkeypatch):
    calls = []
    real = heap._libc()

    class Spy:
        def mallopt(self, param, value):
            calls.append(("mallopt", param, value))
            return real.mallopt(param, value)

        def malloc_trim(self, pad):
            calls.append(("trim", pad))
            return real.malloc_trim(pad)

    monkeypatch.setattr(heap, "_libc", lambda: Spy())
    with search_heap() as outer:
        with search_heap() as inner:
            assert outer is True and inner is True
        assert calls == [("mallopt", -3, 32 * 1024 * 1024), ("mallopt", -1, 512 * 1024 * 1024)]
    assert calls[2:] == [("mallopt", -1, 64 * 1024 * 1024), ("trim", 0)]


def test_a_refused_value_sets_nothing(monkeypatch):
    """An older glibc that refuses the mmap threshold: nothing else is set, no trim on exit."""
    calls = []

    class Refuses:
        def mallopt(self, param, value):
            calls.append(("mallopt", param, value))
            return 0

        def malloc_trim(self, pad):
            calls.append(("trim", pad))
            return 0

    monkeypatch.setattr(heap, "_libc", lambda: Refuses())
    with search_heap() as on:
        assert on is False
    assert calls == [("mallopt", -3, 32 * 1024 * 1024)]


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("", ""))
    assert heap._libc() is None
    with search_heap() as on:
        assert on is False
