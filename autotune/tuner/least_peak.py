"""Least-peak layouts: where even the even split does not fit, the split whose stages peak least
(pure numpy, no Optuna).

Near a model's memory floor the search's starts (the even split of every V with the cheapest
fitting recompute) all exceed the budget, and a local search from them moves one layer at a time
by step time once nothing fits. The TeleChat2 example at ``--hbm 16896MiB`` found nothing: its
closest layout, the even split with full recompute, peaks at 17,485 MiB on the stages that hold
the embedding and the LM head, yet 11 / 12 / 12 / 12 / 12 / 13 / 13 / 11 layers with full
recompute peak at 16,776 MiB and fit.

:func:`least_peak` holds every layer at the recompute that saves the most activation memory
(full recompute where the space allows it, else select and / or comm on every layer) and descends
on the split alone: each round prices every single-layer move between two mini-stages
(:func:`~autotune.tuner.moves.single_moves`; only memory, no simulation), or, with more than
:data:`FULL_SCAN_MINI_STAGES` mini-stages, those out of a mini-stage of a worst stage (the
stages at the largest peak), and takes the one whose
per-stage peaks, sorted worst first, are least in lexicographic order (the worst stage first,
then the next: a move that lowers one of two equal worst stages still counts). It stops when no
such move lowers that order, after :data:`MAX_ROUNDS` rounds, or once :data:`MAX_PRICED` layouts
were priced (deterministic work caps: on pp 32 × vpp 4 a round over every move prices ~16,000
layouts, 1.4 CPU s; over the moves out of one stage, 4 × 127). A heuristic, not a proof (the
bounds decide what is proven).
"""

from __future__ import annotations

import numpy as np

from autotune.tuner.moves import single_moves
from autotune.tuner.problem import Candidate, Problem, even_layers

#: Most rounds of one descent (each moves one layer).
MAX_ROUNDS = 512

#: Most layouts one descent prices (memory only).
MAX_PRICED = 100_000

#: Up to this many mini-stages (V·P) a round prices every single-layer move (~(V·P)² of them);
#: above it only the moves out of the worst stages. On random two-kind pp 2–4 × vpp 2 problems
#: the moves out of the worst stages alone reached the least peak on 39 of 70 draws, every move on
#: 54.
FULL_SCAN_MINI_STAGES = 64

#: Peaks are compared in units of this fraction of the start's worst peak (so that the memory unit
#: changes no decision, and rounding noise does not make the descent cycle).
PEAK_QUANTUM = 1e-9


def most_saving_recompute(problem: Problem, layers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(full, select, comm) counts int like ``layers`` ([..., V, P]): every layer fully recomputed
    when ``"full"`` is in ``problem.kinds``; otherwise every layer with select and / or comm
    recompute, as allowed (nothing when no kind is)."""
    full = "full" in problem.kinds

    def every_layer(on: bool) -> np.ndarray:
        return layers.copy() if on else np.zeros_like(layers)

    return (every_layer(full), every_layer(not full and "select" in problem.kinds),
            every_layer(not full and "comm" in problem.kinds))


def _peaks(problem: Problem, V: int, splits: np.ndarray) -> np.ndarray:
    """Per-stage peak MiB, float [B, P], of ``splits`` (int [B, V, P]) at the most-saving recompute."""
    return problem.memory_peaks(V, problem.costs(V, splits, *most_saving_recompute(problem, splits)))


def least_peak(problem: Problem, V: int, start: np.ndarray | None = None, *,
               max_rounds: int = MAX_ROUNDS, max_priced: int = MAX_PRICED) -> Candidate:
    """The split of pp_interleave_num V (from ``start``, int [V, P]; default the even split) whose
    per-stage peaks at the most-saving recompute are least in lexicographic order, worst first,
    as single-layer moves can reach (module docstring); returned with that recompute and scored
    (``origin`` ``"least-peak-v{V}"``)."""
    lay = np.array(even_layers(problem.N, problem.P, V) if start is None else start, dtype=np.int64)
    peak = _peaks(problem, V, lay[None])[0]  # of the current split, [P] MiB
    unit = float(np.max(np.abs(peak))) * PEAK_QUANTUM or 1.0
    key = -np.sort(-np.round(peak / unit))  # worst first
    stage_of = np.tile(np.arange(problem.P), V)  # mini-stage (layer order: v-major) -> its stage
    priced = 1
    for _ in range(max_rounds):
        worst = key[0] == np.round(peak / unit)
        sources = None if V * problem.P <= FULL_SCAN_MINI_STAGES else worst[stage_of]
        splits = single_moves(problem, Candidate(V, lay, *most_saving_recompute(problem, lay)), sources=sources)
        if not len(splits) or priced + len(splits) > max_priced:
            break
        priced += len(splits)
        peaks = _peaks(problem, V, splits)
        keys = -np.sort(-np.round(peaks / unit), axis=1)  # [B, P] worst first
        i = int(np.lexsort(keys.T[::-1])[0])  # least in lexicographic order; ties: the first move
        diff = np.flatnonzero(keys[i] != key)
        if not len(diff) or keys[i][diff[0]] > key[diff[0]]:
            break
        lay, peak, key = splits[i], peaks[i], keys[i]
    return problem.score([Candidate(V, lay, *most_saving_recompute(problem, lay), origin=f"least-peak-v{V}")])[0]
