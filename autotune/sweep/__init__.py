"""Nightly tuning sweeps: many scenarios, many workers, one study store (journal file or database).

- :mod:`~autotune.sweep.spec`: SWEEP.yaml schema, matrix expansion, content hash -> study name.
- opening the store and masking a URL's password: :mod:`autotune.tuner.storage`.
- :mod:`~autotune.sweep.claims`: who runs which scenario (a table / a side log, not studies).
- :mod:`~autotune.sweep.worker`: the claim/heartbeat/takeover protocol through the store.
- :mod:`~autotune.sweep.summary`: summary.csv / summary.md and the diff against a previous night.
- :mod:`~autotune.sweep.run`: :func:`run_sweep`, what ``autotune sweep`` calls (supervises the
  local worker processes).
"""

from autotune.sweep.run import SweepOutcome, run_sweep
from autotune.sweep.spec import Scenario, Sweep, load_sweep
from autotune.tuner.storage import mask_url

__all__ = ["run_sweep", "SweepOutcome", "load_sweep", "Sweep", "Scenario", "mask_url"]
