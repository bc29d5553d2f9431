"""Test helpers run inside worker subprocesses (installed by tests/sweep/hooks/sitecustomize.py):

- :func:`install`: every Optuna trial stays RUNNING ``delay`` seconds longer, after its objective
  returned and before it is told to the store (so its parameters are recorded), so a test can
  SIGKILL a worker while a trial runs. The cost model and the store are untouched; only wall time
  is added.
- :func:`install_killer`: a worker process that starts the search of a scenario with this
  micro_batch_num kills itself with SIGKILL (a scenario that always takes its worker down, like an
  out-of-memory kill).
"""

from __future__ import annotations

import os
import signal
import time


def install(delay: float) -> None:
    import optuna.study._optimize as opt

    orig = opt._tell_with_warning

    def slow_tell(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(delay)
        return orig(*args, **kwargs)

    opt._tell_with_warning = slow_tell


def install_killer(micro_batch_num: int) -> None:
    import autotune.api as api

    orig = api.search

    def search(config, *args, **kwargs):  # type: ignore[no-untyped-def]
        if getattr(config, "micro_batch_num", None) == micro_batch_num:
            os.kill(os.getpid(), signal.SIGKILL)
        return orig(config, *args, **kwargs)

    api.search = search
