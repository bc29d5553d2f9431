"""The deadline rule of the bounds' set-up loops (no numpy, no Optuna): below every other bounds
module, so that each of them (``_paths`` too) can use the one rule."""

from __future__ import annotations

import time


def cannot_finish(t0: float, done: int, total: int, deadline: float | None) -> bool:
    """Whether a loop of ``total`` stages started at ``t0`` (time.monotonic()), ``done`` of them
    finished, is past ``deadline`` or will be at its rate so far (None: no deadline). Its tables
    prove nothing until the last stage, so a table loop that gives up early leaves the time to
    the proofs after it (the timed first pass's Lagrangian: :func:`~autotune.tuner.bounds.stage_dp_first`).
    Used by every loop of a proof's set-up that proves nothing until it ends (the stage DP's
    tables and screen, the one-stay path counts, the split LP's pricing, the device DP's tables,
    the integer program's rows)."""
    if deadline is None:
        return False
    now = time.monotonic()
    return now > deadline or (done > 0 and now + (now - t0) / done * (total - done) > deadline)
