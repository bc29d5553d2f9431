"""Test hook, active only with AUTOTUNE_TEST_TRIAL_DELAY set and this folder on PYTHONPATH
(tests/sweep/sweep_helpers.slow_env): Python imports ``sitecustomize`` at start-up, so the hook
also reaches the worker processes a sweep spawns. It makes every Optuna trial stay RUNNING that many
seconds longer (tests/sweep/slowtrials.py), so a test can kill a worker while a trial runs."""

import os

if os.environ.get("AUTOTUNE_TEST_TRIAL_DELAY"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import slowtrials

    slowtrials.install(float(os.environ["AUTOTUNE_TEST_TRIAL_DELAY"]))
