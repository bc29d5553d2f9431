"""search_heap: large temporaries reused from the heap during a search, glibc's behaviour after it."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from autotune.tuner import heap
from autotune.tuner.heap import search_heap

GLIBC = heap._libc() is not None


def _refill_faults(nbytes: int = 128 << 20) -> int:
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
def test_freed_temporary_is_reused_inside_and_mmapped_again_after():
    before = _refill_faults()
    with search_heap() as on:
        assert on is True
        inside = _refill_faults()
    after = _refill_faults()
    # 128 MiB is 32,768 pages of 4 KiB (64 huge pages of 2 MiB): outside, the freed block went back
    # to the kernel and comes back zero-filled page by page; inside, the heap's pages are reused
    assert before >= 20 and after >= 20
    assert inside * 10 < min(before, after)


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
    with search_heap():
        with search_heap():
            pass
        assert calls == [("mallopt", -3, heap.MMAP_THRESHOLD), ("mallopt", -1, heap.TRIM_THRESHOLD)]
    assert calls[2:] == [("mallopt", -1, heap.TRIM_AFTER), ("mallopt", -3, heap.MMAP_AFTER), ("trim", 0)]
    assert heap.MMAP_AFTER == 32 * 1024 * 1024 and heap.TRIM_AFTER == 64 * 1024 * 1024


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("", ""))
    assert heap._libc() is None
    with search_heap() as on:
        assert on is False
