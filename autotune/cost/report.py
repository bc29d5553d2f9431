"""CostReport: the cost model's verdict on one layout (step time, bubble, per-stage memory).

Accounting identity checked in tests: for each stage, ``static_mib + act_peak_mib == peak_mib``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.config.layout import Layout
from autotune.cost.inputs import ProfileArrays, stage_costs
from autotune.cost.simulate import SimResult, compile_schedule, simulate
from autotune.profile.schema import ModelProfile


@dataclass(frozen=True)
class StageReport:
    """One pipeline stage (device). Times in ms per step, memory in MiB.

    ``layers`` and the recompute counts are per interleave chunk (length V).
    """

    stage: int
    layers: list[int]
    recompute: list[int]
    select_recompute: list[int]
    select_comm_recompute: list[int]
    fwd_ms: float
    bwd_ms: float
    recompute_ms: float
    static_mib: float
    act_peak_mib: float
    peak_mib: float
    headroom_mib: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CostReport:
    """Result of :func:`evaluate_layout`. ``fits`` is None when no HBM budget is known."""

    layout: Layout
    schedule: str
    micro_batch_num: int
    step_time_ms: float
    bubble_fraction: float
    hbm_budget_mib: float | None
    stages: list[StageReport]
    sim: SimResult = field(repr=False)

    @property
    def peak_mib(self) -> float:
        """Largest per-stage peak (MiB)."""
        return max(s.peak_mib for s in self.stages)

    @property
    def fits(self) -> bool | None:
        if self.hbm_budget_mib is None:
            return None
        return bool(self.peak_mib <= self.hbm_budget_mib + 1e-9)

    @property
    def excess_mib(self) -> float:
        """How far the worst stage exceeds the budget (MiB, <= 0 when it fits)."""
        if self.hbm_budget_mib is None:
            return float("-inf")
        return self.peak_mib - self.hbm_budget_mib

    def config_dict(self) -> dict[str, Any]:
        """The MindFormers values of this layout in canonical form (see emit)."""
        from autotune.emit.yaml_block import canonical_values

        return canonical_values(self.layout)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``autotune evaluate --format json``."""
        return {
            "step_time_ms": self.step_time_ms,
            "bubble_fraction": self.bubble_fraction,
            "fits": self.fits,
            "hbm_budget_mib": self.hbm_budget_mib,
            "peak_mib": self.peak_mib,
            "schedule": self.schedule,
            "micro_batch_num": self.micro_batch_num,
            "stages": [s.to_dict() for s in self.stages],
            "config": self.config_dict(),
        }


def evaluate_layout(profile: ModelProfile | ProfileArrays, layout: Layout, *, micro_batch_num: int,
                    schedule: str = "1f1b", hbm_mib: float | None = None,
                    p2p_ms: float | None = None) -> CostReport:
    """Simulate one layout and report step time, bubble and per-stage memory.

    Args:
        profile: the layer profile (or its arrays); its layer count must equal the layout's.
        layout: canonical [V][P] layout.
        micro_batch_num: micro-batches per step (m).
        schedule: registered schedule name (MindFormers ``pipeline_scheduler``).
        hbm_mib: HBM budget per device (MiB) for ``fits``/headroom.
        p2p_ms: override the profile's p2p time per hop (ms).

    Raises:
        ValueError: layer counts disagree, or the schedule cannot run these sizes.
    """
    pa = profile if isinstance(profile, ProfileArrays) else ProfileArrays.from_profile(profile)
    if pa.num_layers != layout.num_layers:
        raise ValueError(f"profile has {pa.num_layers} layers, layout places {layout.num_layers}")
    cs = compile_schedule(schedule, layout.pp, layout.vpp, micro_batch_num)
    b = lambda a: a[None]  # noqa: E731
    costs = stage_costs(pa, b(layout.layers_vp), b(layout.recompute_vp), b(layout.select_vp),
                        b(layout.comm_vp))
    sim = simulate(cs, costs, pa.p2p_ms if p2p_ms is None else p2p_ms, timeline=True)
    m = micro_batch_num
    stages = []
    for p in range(layout.pp):
        peak = float(sim.peak_mib[0, p])
        stages.append(StageReport(
            stage=p,
            layers=layout.layers_vp[:, p].tolist(),
            recompute=layout.recompute_vp[:, p].tolist(),
            select_recompute=layout.select_vp[:, p].tolist(),
            select_comm_recompute=layout.comm_vp[:, p].tolist(),
            fwd_ms=float(costs.fwd_ms[0, :, p].sum() * m),
            bwd_ms=float(costs.bwd_ms[0, :, p].sum() * m),
            recompute_ms=float(costs.recompute_ms[0, :, p].sum() * m),
            static_mib=float(costs.static_mib[0, p]),
            act_peak_mib=float(sim.peak_act_mib[0, p]),
            peak_mib=peak,
            headroom_mib=None if hbm_mib is None else float(hbm_mib - peak),
        ))
    return CostReport(layout=layout, schedule=schedule, micro_batch_num=m,
                      step_time_ms=float(sim.step_ms[0]), bubble_fraction=float(sim.bubble_fraction[0]),
                      hbm_budget_mib=hbm_mib, stages=stages, sim=sim)
