"""benchmarks/floors.py: the cheap lower bounds of scaling.py's problems, each read back with the
problem's own N, P, m and V (the stay-LP and whole-layer rounds' tables gave a 128-layer problem's
floors under a 256-layer grid name)."""

from __future__ import annotations

import numpy as np

from benchmarks.floors import floors
from benchmarks.scaling import build
from autotune.tuner.problem import even_layers


def test_floors_are_below_a_fitting_layout_and_name_their_problem() -> None:
    P, V, m, L = 4, 2, 8, 16
    problem = build(P, V, m, L, "dense", "tight")
    row = floors(problem)
    assert (row["N"], row["P"], row["m"], row["V"]) == (L, P, m, V)
    # the tight budget lets the even split with full recompute fit (scaling.build): every floor is
    # at most its step time, and the whole-layer floor at least the fractional one
    even = even_layers(L, P, V)[None]
    z = np.zeros_like(even)
    ev = problem.evaluate(V, even, even, z, z)
    assert ev.peak_mib.max() <= problem.hbm_mib
    step = float(ev.step_ms[0])
    assert 0 < row["work"] <= row["whole"] <= step
    assert row["work"] <= row["stay_lp"] <= step
    assert row["lagrangian"] is not None and row["lagrangian"] <= step


def test_the_moe_row_of_the_grid_has_256_layers() -> None:
    problem = build(8, 4, 128, 256, "moe", "tight")
    row = floors(problem)
    assert (row["N"], row["P"], row["m"], row["V"]) == (256, 8, 128, 4)
    # the busiest device's work is at least the mean of the 256 layers' forward + backward without
    # recompute (3 dense + 253 MoE layers, 128 micro-batches over 8 devices: 119,561.1 ms) and at
    # most that plus all of the MTP tail's 128 micro-batches (20,024.9 ms); the old tables'
    # 62,281.7 ms was the 128-layer problem's
    pa = problem.pa
    per_layer = pa.fwd_k + pa.bwd_kc[:, 0]  # ms per micro-batch, per kind
    counts = pa.kind_prefix[:, -1]
    mean = float(per_layer @ counts) * 128 / 8
    tail = (pa.tail.fwd_ms + pa.tail.bwd_ms) * 128
    assert mean <= row["work"] <= mean + tail
