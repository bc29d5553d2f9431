"""One BLAS thread while a search runs.

numpy's OpenBLAS starts one thread per core for a matrix-vector product past a size threshold (the
search's products are small: :func:`autotune.cost.simulate.stage_peak_activation`'s
``vecs @ act`` and ``mem_fwd @ a``, the Lagrangian's ``vecs @ a``). The extra thread then spins
between products: on the project's 2-core machine it costs CPU time without saving wall time, and
a sweep's workers, one per core, would oversubscribe the cores. Measured (``benchmarks/scaling.py``
P16 V4 m64 L128 dense, same answer and bound, idle machine): 36.2 CPU s / 30.4 s wall with
OpenBLAS's default two threads, 25.1 / 25.2 s with one.

The limit is :mod:`threadpoolctl`'s (scikit-learn's library for this); it applies to the BLAS
libraries loaded when it is entered and restores their thread counts on exit, so a notebook's own
numpy work after :func:`autotune.search` is unaffected. scipy's own OpenBLAS (which the bounds'
``scipy.optimize.milp`` loads) is loaded here first, so that it is limited too.
"""

from __future__ import annotations

import scipy.linalg  # noqa: F401  (loads scipy's BLAS before the limit: see the module docstring)
from threadpoolctl import threadpool_limits

__all__ = ["one_blas_thread"]


def one_blas_thread() -> threadpool_limits:
    """A context manager under which the loaded BLAS libraries use one thread each (restored on exit).

    Use as ``with one_blas_thread(): ...`` around a search (:func:`autotune.api.search` does)."""
    return threadpool_limits(limits=1, user_api="blas")
