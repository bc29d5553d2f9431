"""HiGHS' native prints kept off stdout (used around every scipy HiGHS solve of the bounds).

HiGHS (as scipy ships it) prints a few debug lines with C ``printf`` even with its output off,
e.g. "HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();" from the split
LP's integer solve, and that line landed in front of ``autotune search --format json``'s output
(the toy config at 10,500 MiB). Within the block fd 1 points to /dev/null; C's stdio buffers
are flushed before fd 1 is restored, so that a line buffered in the block (stdout a pipe or a
file) cannot come out after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Iterator


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: write out every C stdio buffer now (no-op where libc cannot be loaded)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass


@contextlib.contextmanager
def quiet_native_stdout() -> Iterator[None]:
    """Within the block, what native code writes to fd 1 (stdout) goes to /dev/null; Python's own
    ``sys.stdout`` is untouched (it is not written to in the block; the search reports on stderr)."""
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (embedded interpreters)
        yield
        return
    _flush_c_stdio()  # what was printed before the block keeps its place
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            try:
                yield
            finally:
                _flush_c_stdio()  # the solve's buffered lines go to /dev/null, not to the restored fd 1
    finally:
        os.dup2(saved, 1)
        os.close(saved)
