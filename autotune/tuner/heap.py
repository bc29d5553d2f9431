"""Large numpy temporaries stay in the heap while a search runs (glibc only).

The search allocates and frees the same large temporaries many times a second: the exact
recompute fit's partial-combination tables (:func:`autotune.tuner.fit.fit_exact`), the moves'
neighbourhood batches, the bounds' Pareto sums. glibc serves an allocation above its mmap
threshold with fresh ``mmap`` pages and unmaps them on ``free``; the threshold adapts upwards
only to 32 MiB, and freed heap space above 128 KiB at the top is returned to the kernel
(``M_TRIM_THRESHOLD``). So every such temporary was zero-filled page by page again: minor page
faults, charged as system time. Measured (the corpus's slowest config, Qwen2.5-32B 32k, pp 2 ×
vpp 2, default ``autotune search``; same answer and gap): 25.5 s user + 4.4 s system, 2.25 M minor
faults, max RSS 386 MiB, as glibc ships; 24.3 s + 0.6 s, 65,000 faults, 388 MiB with the two
settings below. Either setting alone is worse than neither (15–16 s of system time: the heap then
grows and shrinks at every large free, or huge blocks are unmapped at each free).

:func:`search_heap` sets ``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD` (blocks below it come from
the heap) and ``M_TRIM_THRESHOLD`` to :data:`TRIM_THRESHOLD` (the heap keeps that much free space
at its top) with glibc's ``mallopt`` (man 3 mallopt), and on exit returns the free heap to the
kernel (``malloc_trim(0)``) and sets them to where glibc's own dynamic adjustment ends in a
program that frees large arrays (mmap threshold at its 32 MiB cap, trim threshold twice it):
setting either once turns that adjustment off for the rest of the process, so a notebook's later
numpy work gets those fixed values. On other C libraries (macOS, musl) it does nothing. It
changes where memory comes from, never a value the search computes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["search_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "MMAP_AFTER", "TRIM_AFTER"]

#: Blocks smaller than this (bytes) come from the heap during a search (glibc's cap on the
#: dynamic threshold is 32 MiB).
MMAP_THRESHOLD = 256 * 1024 * 1024
#: Free space (bytes) the heap keeps at its top during a search before returning it.
TRIM_THRESHOLD = 512 * 1024 * 1024
#: Set on exit: the cap of glibc's dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
#: and the trim threshold glibc pairs with it (twice the mmap threshold).
MMAP_AFTER = 32 * 1024 * 1024
TRIM_AFTER = 2 * MMAP_AFTER

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


_depth = 0


@contextmanager
def search_heap() -> Iterator[bool]:
    """A context manager under which large temporaries are served from the heap (module docstring).

    Yields True when the settings apply (glibc), False otherwise. Nested uses keep the outer one's
    settings; the outermost exit trims the heap and sets :data:`MMAP_AFTER` / :data:`TRIM_AFTER`. Use as
    ``with search_heap(): ...`` around a search (:func:`autotune.api.search` does)."""
    global _depth
    libc = _libc()
    if libc is None:
        yield False
        return
    if _depth == 0:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    _depth += 1
    try:
        yield True
    finally:
        _depth -= 1
        if _depth == 0:
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_AFTER)
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_AFTER)
            libc.malloc_trim(0)
