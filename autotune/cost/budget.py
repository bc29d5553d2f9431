"""Whether a peak fits the HBM budget: the one memory test every part of autotune shares.

A layout whose peak equals the budget in exact arithmetic must fit, or not, the same way at every
unit of memory (issue 17's memory-scale invariance: every memory and the budget × one constant
give the same layout). Sums of floats are not exact: the same layout's peak came out 1.1e-16 below
the budget at one scale and 2.2e-16 above it at × 7, so a bare ``peak <= budget`` let the unit
decide. Every feasibility test (the report's ``fits``, a candidate's excess, the local-search
scans, the exact enumeration, the study's memory constraint, the recompute fits' stage rooms and
the bounds' memory rows) therefore compares against :func:`hbm_cap`, the budget plus
:data:`FIT_RTOL` of it.

The tolerance allows less than one byte over the budget for any budget under 0.9 TiB
(1e-12 × 65,536 MiB = 6.6e-8 MiB = 0.07 bytes), far below what the model resolves, and it covers
the rounding of sums of up to thousands of terms (each ~1.1e-16 relative).
"""

from __future__ import annotations

import numpy as np

#: Relative tolerance of :func:`fits` (fraction of the budget).
FIT_RTOL = 1e-12


def hbm_cap(hbm_mib: float) -> float:
    """The largest peak (MiB) that fits a budget of ``hbm_mib`` MiB: the budget plus
    :data:`FIT_RTOL` of it (``inf`` stays ``inf``: no budget)."""
    return float(hbm_mib) + FIT_RTOL * abs(float(hbm_mib))


def fits(peak_mib: np.ndarray | float, hbm_mib: float) -> np.ndarray | bool:
    """True where a peak (MiB, any shape) fits the budget (MiB): ``peak <= hbm_cap(budget)``.
    The same test as :func:`excess_mib` ``<= 0``."""
    return np.asarray(peak_mib) <= hbm_cap(hbm_mib)


def excess_mib(peak_mib: np.ndarray | float, hbm_mib: float) -> np.ndarray | float:
    """How far a peak (MiB, any shape; floats in, floats out) is over the budget (MiB): ``peak -
    budget``, except that a peak within the tolerance above the budget (one that :func:`fits`)
    gives 0.0, so that ``excess <= 0`` and :func:`fits` always agree."""
    peak = np.asarray(peak_mib, dtype=np.float64)
    out = np.where(fits(peak, hbm_mib), np.minimum(peak - hbm_mib, 0.0), peak - hbm_mib)
    return float(out) if out.ndim == 0 else out
