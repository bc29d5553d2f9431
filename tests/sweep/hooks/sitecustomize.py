"""Test hook, active only with AUTOTUNE_TEST_TRIAL_DELAY or AUTOTUNE_TEST_KILL_MB set and this folder
on PYTHONPATH (tests/sweep/sweep_helpers.slow_env): Python imports ``sitecustomize`` at start-up, so
the hook also reaches the worker processes a sweep spawns. See tests/sweep/slowtrials.py."""

import os

if os.environ.get("AUTOTUNE_TEST_TRIAL_DELAY") or os.environ.get("AUTOTUNE_TEST_KILL_MB"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import slowtrials

    if float(os.environ.get("AUTOTUNE_TEST_TRIAL_DELAY") or 0) > 0:
        slowtrials.install(float(os.environ["AUTOTUNE_TEST_TRIAL_DELAY"]))
    if os.environ.get("AUTOTUNE_TEST_KILL_MB"):
        slowtrials.install_killer(int(os.environ["AUTOTUNE_TEST_KILL_MB"]))
