"""Test helper run inside worker subprocesses: every Optuna trial stays RUNNING ``delay`` seconds
longer, after its objective returned and before it is told to the store (so its parameters are
recorded), so a test can SIGKILL a worker while a trial runs. The cost model and the store are
untouched; only wall time is added."""

from __future__ import annotations

import time


def install(delay: float) -> None:
    import optuna.study._optimize as opt

    orig = opt._tell_with_warning

    def slow_tell(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(delay)
        return orig(*args, **kwargs)

    opt._tell_with_warning = slow_tell
