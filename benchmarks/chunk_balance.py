"""What the one-stay bounds cannot see (issue 17): interleaved layouts with the same work on every
pipeline stage but their layers spread differently over the stage's chunks.

    .venv/bin/python benchmarks/chunk_balance.py

On ``benchmarks/scaling.py``'s P32 V4 m256 L256 dense loose problem (no recompute: the budget is
1.05 × the even split's no-recompute peak) every layout below holds 8 layers on every stage, so
every stage is busy for the same time. Per layout it prints the simulated step time (ms), the
busiest stage's time, the longest one-stay path (a path that walks one stage's program and reaches
and leaves it through one micro-batch's dependency chains: the family of the stage DP, the device
DP and the local search's step floors: :func:`autotune.tuner.moves.floor_paths`, which also
gives the critical path) and the stages the critical path stays on (more than two ops of one
mini-stage). The one-stay maximum barely
moves while the step time rises by up to ~20 %: an interleaved step depends on each chunk's time
across the stages, which those bound families do not price. docs/search.md ("What the one-stay
bounds cannot see") quotes the output. Pure numpy; a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

P, V, M, L = 32, 4, 256, 256


def layouts() -> dict[str, np.ndarray]:
    """Layer counts int [V, P] of the compared layouts (8 layers on every stage)."""
    even = np.full((V, P), 2)
    same = even.copy()
    same[0], same[1] = 3, 1
    halves = even.copy()
    halves[0, :P // 2], halves[1, :P // 2] = 3, 1
    halves[0, P // 2:], halves[1, P // 2:] = 1, 3
    alternating = even.copy()
    alternating[0, ::2], alternating[1, ::2] = 3, 1
    alternating[0, 1::2], alternating[1, 1::2] = 1, 3
    one = even.copy()
    one[0, 10], one[1, 10] = 3, 1
    return {"2 / 2 / 2 / 2 on every stage": even,
            "3 / 1 / 2 / 2 on stage 10 only": one,
            "3 / 1 / 2 / 2 on every stage": same,
            "3 / 1 / 2 / 2 on stages 0-15, 1 / 3 / 2 / 2 on 16-31": halves,
            "the two alternating stage by stage": alternating}


def main() -> None:
    from benchmarks.scaling import build
    from autotune.tuner.moves import floor_paths
    from autotune.tuner.problem import Candidate

    problem = build(P, V, M, L, "dense", "loose")
    print(f"{'layout (layers in chunks 0-3)':55s} {'step ms':>11s} {'busiest ms':>11s} {'one-stay ms':>11s}  stays on")
    for name, lay in layouts().items():
        assert (lay.sum(axis=0) == L // P).all()
        z = np.zeros_like(lay)
        score = problem.evaluate(V, lay[None], z[None], z[None], z[None])
        # the critical path first, then each stage's longest one-stay path (the step floors' family)
        fp = floor_paths(problem, Candidate(V, lay, z, z.copy(), z.copy()))
        stages = np.unique(np.nonzero((fp.cf[0] + fp.cb[0]) > 2)[1]).tolist()
        where = ", ".join(map(str, stages)) if len(stages) <= 8 else f"{len(stages)} stages, {stages[0]}-{stages[-1]}"
        print(f"{name:55s} {score.step_ms[0]:11,.1f} {score.busy_ms[0].max():11,.1f} {fp.length[1:].max():11,.1f}  "
              f"{where}")

if __name__ == "__main__":
    main()
