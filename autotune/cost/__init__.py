"""Cost model (pure numpy; never imports Optuna): stage costs, schedules, event simulation.

Data flow: :class:`~autotune.cost.inputs.ProfileArrays` + layouts [B, V, P] ->
:func:`~autotune.cost.inputs.stage_costs` -> :func:`~autotune.cost.simulate.simulate` on a
:func:`~autotune.cost.simulate.compile_schedule` table -> step time and per-stage peak memory;
:func:`~autotune.cost.bubble.bubble_breakdown` splits the bubble SAPP's way;
:func:`~autotune.cost.public.simulate_schedule` runs the simulator on plain [chunk][stage] arrays.
"""

from autotune.cost.bubble import BubbleBreakdown, bubble_breakdown
from autotune.cost.inputs import ProfileArrays, StageCosts, stage_costs
from autotune.cost.public import ScheduleResult, simulate_schedule
from autotune.cost.report import CostReport, StageReport, evaluate_layout
from autotune.cost.simulate import (CompiledSchedule, SimResult, compile_schedule, peak_activation,
                                    simulate)

__all__ = ["ProfileArrays", "StageCosts", "stage_costs", "CostReport", "StageReport",
           "evaluate_layout", "CompiledSchedule", "SimResult", "compile_schedule", "simulate",
           "peak_activation", "BubbleBreakdown", "bubble_breakdown", "ScheduleResult",
           "simulate_schedule"]
