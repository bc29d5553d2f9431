"""Large numpy temporaries stay in the heap while a search runs (glibc only).

The search allocates and frees the same large temporaries many times a second: the exact
recompute fit's partial-combination tables (:func:`autotune.tuner.fit.fit_exact`), the moves'
neighbourhood batches, the bounds' Pareto sums. glibc serves an allocation above its mmap
threshold with fresh ``mmap`` pages and unmaps them on ``free``, and returns free space above
its trim threshold at the heap's top to the kernel. Both thresholds start at 128 KiB and adapt
upwards only as mmapped blocks are freed, so such temporaries were zero-filled page by page again
and again: minor page faults, charged as system time.

:func:`search_heap` sets ``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD` (32 MiB, the upper limit
man 3 mallopt documents for 64-bit: blocks below it come from the heap) and ``M_TRIM_THRESHOLD`` to
:data:`TRIM_THRESHOLD` (512 MiB of free space kept at the heap's top) with glibc's ``mallopt``
(man 3 mallopt). On exit it returns the free heap to the kernel (``malloc_trim(0)``) and sets the
trim threshold to :data:`TRIM_AFTER` (64 MiB: twice the mmap threshold, as glibc's own adjustment
pairs them). Setting them turns glibc's adjustment off for the rest of the process, so a
notebook's later numpy work keeps these fixed values (those glibc's adjustment ends at in a
program that frees large arrays). Where ``mallopt`` refuses a value, or off glibc (macOS, musl),
nothing is set. It changes where memory comes from, never a value the search computes.

Measured with ``/usr/bin/time`` (the corpus's slowest config, Qwen2.5-32B 32k, pp 2 × vpp 2,
default ``autotune search``, glibc 2.36; same answer and gap), without and with, in turn: 25.8 +
4.0 and 23.4 + 3.3 s (user + system), 1.7–2.0 M minor faults, as glibc ships; 23.1 + 0.6 s
twice, 66,000–68,000 faults, with these settings (a 256 MiB mmap threshold: the same); max RSS
386 MiB both. Either setting alone is worse than neither (15–16 s of system time: huge blocks
mmapped and unmapped at each free, or the heap's top returned and grown again).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["search_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "TRIM_AFTER"]

#: Blocks smaller than this (bytes) come from the heap: glibc's DEFAULT_MMAP_THRESHOLD_MAX on
#: 64-bit, the cap of its own adjustment and the upper limit man 3 mallopt documents.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free space (bytes) the heap keeps at its top during a search before returning it.
TRIM_THRESHOLD = 512 * 1024 * 1024
#: The trim threshold set on exit: twice the mmap threshold, as glibc's adjustment pairs them.
TRIM_AFTER = 2 * MMAP_THRESHOLD

# mallopt parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    """glibc with ``mallopt`` and ``malloc_trim``, or None on any other C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    return libc


_lock = threading.Lock()
_depth = 0
_applied = False


@contextmanager
def search_heap() -> Iterator[bool]:
    """A context manager under which large temporaries are served from the heap (module docstring).

    Yields True when the settings apply (glibc accepted both), False otherwise. The settings are
    process-wide: nested or concurrent uses (threads) share them, the first entry sets them and
    the last exit trims the heap and sets :data:`TRIM_AFTER`. Use as ``with search_heap(): ...``
    around a search (:func:`autotune.api.search` does)."""
    global _depth, _applied
    libc = _libc()
    if libc is None:
        yield False
        return
    with _lock:
        if _depth == 0:
            mmap_set = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
            _applied = mmap_set and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
            if mmap_set and not _applied:  # the mmap threshold alone is worse than neither
                libc.mallopt(_M_TRIM_THRESHOLD, TRIM_AFTER)
        _depth += 1
        applied = _applied
    try:
        yield applied
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _applied:
                libc.mallopt(_M_TRIM_THRESHOLD, TRIM_AFTER)
                libc.malloc_trim(0)
