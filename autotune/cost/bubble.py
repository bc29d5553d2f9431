"""Bubble breakdown in SAPP's terms: real = ideal + imbalance + recompute + comm.

Definitions (SAPP ``pipeline_balance`` simulator, cost-model reference §3.4), all as fractions of
the *model compute* C = m·Σ_{v,p}(fwd + bwd without recompute replay) summed over devices:

- ``real = (P·T − C)/C`` with T the simulated step time (ms);
- ``ideal``: the schedule's balanced-stage bubble, (P − 1)/(V·m·k) for the 1F1B family
  (Narayanan et al. 2021 §2.2; k = seq_split_num);
- ``recompute = H/C − 1`` with H the hardware compute (recompute replay included);
- ``comm = P·(T − T₀)/C`` with T₀ the step time of the same order with p2p = 0 (ours: SAPP uses a
  fitted polynomial of its send/recv blocks instead, so this term differs from SAPP's);
- ``imbalance = real − ideal − recompute − comm`` (the residual, as in SAPP).

So the four parts add up to ``real`` exactly (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.inputs import StageCosts
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import CompiledSchedule, SimResult, simulate


@dataclass(frozen=True)
class BubbleBreakdown:
    """Batched breakdown, each field float [B] (fractions of model compute; see module docstring)."""

    real: np.ndarray
    ideal: np.ndarray
    imbalance: np.ndarray
    recompute: np.ndarray
    comm: np.ndarray
    model_compute_ms: np.ndarray
    step_no_comm_ms: np.ndarray

    def row(self, b: int = 0) -> dict[str, float]:
        """One candidate's terms as a dict (``real``, ``ideal``, ``imbalance``, ``recompute``, ``comm``)."""
        return {k: float(getattr(self, k)[b]) for k in ("real", "ideal", "imbalance", "recompute", "comm")}


def bubble_breakdown(cs: CompiledSchedule, costs: StageCosts, sim: SimResult,
                     p2p_ms: float = 0.0) -> BubbleBreakdown:
    """Break the simulated bubble into SAPP's terms (see module docstring).

    Args:
        cs, costs: the compiled schedule and stage costs [B, V, P] that produced ``sim``.
        sim: the simulation with ``p2p_ms``.
        p2p_ms: the p2p time used (0 skips the second simulation; comm = 0).
    """
    P, V, m, k = cs.P, cs.V, cs.m, cs.k
    model = ((costs.fwd_ms + costs.bwd_ms - costs.recompute_ms).sum(axis=(1, 2))) * m
    hw = sim.busy_ms.sum(axis=1)
    T = sim.step_ms
    if p2p_ms > 0:
        T0 = simulate(cs, costs, 0.0).step_ms
    else:
        T0 = T
    with np.errstate(divide="ignore", invalid="ignore"):
        real = (P * T - model) / model
        rec = hw / model - 1.0
        comm = P * (T - T0) / model
    ideal = np.full_like(real, get_schedule(cs.name).ideal_bubble(P, V, m, k))
    imba = real - ideal - rec - comm
    return BubbleBreakdown(real, ideal, imba, rec, comm, model, T0)
