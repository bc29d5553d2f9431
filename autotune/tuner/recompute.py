"""Recompute choices of a mini-stage, stated once for the bounds, the exact oracle and the fits.

MindFormers recomputes "the first r layers" of a mini-stage: with ``recompute`` = f,
``select_recompute`` = s and ``select_comm_recompute`` = c the layers fall into contiguous class
ranges (:mod:`autotune.cost.inputs`): full [0, f), select + comm [f, f + b), select-only or
comm-only [f + b, f + b + x), none after, full taking precedence (an s or c <= f acts as 0).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.cost.inputs import BOTH, COMM, FULL, NONE, SELECT


def allowed_classes(kinds: tuple[str, ...] | list[str]) -> list[int]:
    """Recompute classes (indices of ``RECOMPUTE_CLASSES``) a layer may take under ``kinds``
    ("full", "select", "comm"): none always, both only with select and comm, in class order."""
    out = [NONE]
    if "select" in kinds:
        out.append(SELECT)
    if "comm" in kinds:
        out.append(COMM)
    if "select" in kinds and "comm" in kinds:
        out.append(BOTH)
    if "full" in kinds:
        out.append(FULL)
    return out


def recompute_choices(n: int, kinds: tuple[str, ...] | list[str]) -> np.ndarray:
    """Every distinct (full, select, comm) count triple of a mini-stage of ``n`` layers: int [O, 3],
    read-only (one array per (n, kinds), built once: the fits ask for it thousands of times).

    Ordered by class ranges (module docstring): (0, 0, 0) first, then by f, b, x, select-only before
    comm-only. A count is used only when its kind is allowed (b needs select and comm) and an
    unused key stays 0, so no two triples recompute the same layers the same way. O grows as n³.
    """
    return _choices(int(n), tuple(kinds))


@lru_cache(maxsize=4096)
def _choices(n: int, kinds: tuple[str, ...]) -> np.ndarray:
    full, s_ok, c_ok = "full" in kinds, "select" in kinds, "comm" in kinds
    out = [(0, 0, 0)]
    seen = {(0, 0, 0)}
    for f in range(n + 1 if full else 1):
        for b in range(n - f + 1 if (s_ok and c_ok) else 1):
            lo = f + b
            for x in range(n - lo + 1):
                for sel_type in ((True, False) if x else (True,)):
                    if x and not (s_ok if sel_type else c_ok):
                        continue
                    hi = lo + x
                    base = lo if b else 0
                    t = (f, hi if (x and sel_type) else base, hi if (x and not sel_type) else base)
                    if t not in seen:
                        seen.add(t)
                        out.append(t)
    arr = np.asarray(out, dtype=np.int64)
    arr.setflags(write=False)
    return arr
