"""CostReport: the cost model's verdict on one layout (step time, bubble, per-stage memory).

Accounting identities checked in tests: for each stage, the memory components
``layer_static + head_static + tail_static + stage_const + activation + workspace`` sum to
``peak_mib`` (and ``static_mib + act_peak_mib == peak_mib``); the bubble terms
``ideal + imbalance + recompute + comm`` sum to ``real`` (:mod:`autotune.cost.bubble`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from autotune.config.layer_setting import Warning_
from autotune.config.layout import Layout, canonical_values
from autotune.cost.bubble import bubble_breakdown
from autotune.cost.budget import excess_mib, fits
from autotune.cost.inputs import ProfileArrays, StageCosts, stage_costs
from autotune.cost.schedules import get_schedule
from autotune.cost.select_ops import pattern_stage_costs
from autotune.cost.simulate import SimResult, compile_schedule, peak_activation_parts, simulate
from autotune.errors import ConfigError
from autotune.profile.schema import ModelProfile

#: Memory components of a stage's peak, in report order (MiB).
MEMORY_COMPONENTS = ("layer_static", "head_static", "tail_static", "stage_const", "activation",
                     "workspace")


#: Views of a :class:`CostReport` by name ("html", "timeline", "memory"), registered by the
#: presentation layer (:mod:`autotune.emit.notebook`) so that cost never imports it.
_VIEWS: dict[str, Callable[..., Any]] = {}


def register_view(name: str, view: Callable[..., Any]) -> None:
    """Make ``view(report, **kwargs)`` the report's ``name`` view ("html": ``_repr_html_``,
    "timeline": ``plot_timeline``, "memory": ``plot_memory``)."""
    _VIEWS[name] = view


def _view(name: str) -> Callable[..., Any]:
    view = _VIEWS.get(name)
    if view is None:
        raise ConfigError(f"the {name} view is drawn by autotune.emit.notebook: import it (autotune.evaluate "
                          "and autotune.search do)", field="view", value=name, rule="view_missing")
    return view


@dataclass(frozen=True)
class StageReport:
    """One pipeline stage (device). Times in ms per step, memory in MiB.

    ``layers`` and the recompute counts are per interleave chunk (length V). ``memory_mib`` maps
    each of :data:`MEMORY_COMPONENTS` to its MiB at this stage's peak; they sum to ``peak_mib``:
    layer_static (weights + gradients + optimizer state of the stage's layers), head_static /
    tail_static (embedding / final norm + LM head + MTP, on the stages holding them), stage_const
    (runtime, buffers), activation (live activations at the peak), workspace (the transient working
    set of the backward running at the peak, e.g. a fully recomputed layer's re-materialized
    activations).
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
    memory_mib: dict[str, float] = field(default_factory=dict)
    max_inflight: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CostReport:
    """Result of :func:`evaluate_layout`. ``fits`` is None when no HBM budget is known.

    ``bubble`` holds SAPP's breakdown ``real = ideal + imbalance + recompute + comm`` (fractions of
    model compute, :mod:`autotune.cost.bubble`); ``bubble_fraction`` is the idle share of device
    time, 1 − Σ busy / (P·step). ``warnings``: accepted pitfalls (objects with ``code``, ``field``,
    ``message``), e.g. ``W_SELECT_NO_MATCH`` for a select pattern matching no op of the profile.
    """

    layout: Layout
    schedule: str
    micro_batch_num: int
    step_time_ms: float
    bubble_fraction: float
    hbm_budget_mib: float | None
    stages: list[StageReport]
    sim: SimResult = field(repr=False)
    bubble: dict[str, float] = field(default_factory=dict)
    seq_split_num: int = 1
    p2p_ms: float = 0.0
    costs: StageCosts | None = field(default=None, repr=False, compare=False)
    warnings: list = field(default_factory=list)

    @property
    def peak_mib(self) -> float:
        """Largest per-stage peak (MiB)."""
        return max(s.peak_mib for s in self.stages)

    @property
    def fits(self) -> bool | None:
        if self.hbm_budget_mib is None:
            return None
        return bool(fits(self.peak_mib, self.hbm_budget_mib))

    @property
    def excess_mib(self) -> float:
        """How far the worst stage exceeds the budget (MiB, <= 0 when it fits)."""
        if self.hbm_budget_mib is None:
            return float("-inf")
        return excess_mib(self.peak_mib, self.hbm_budget_mib)

    # Notebook views: presentation lives in autotune.emit, which registers them (register_view);
    # the cost model never imports it.
    def _repr_html_(self) -> str | None:
        """HTML for Jupyter (None until :mod:`autotune.emit.notebook` registered it)."""
        view = _VIEWS.get("html")
        return None if view is None else view(self)

    def plot_timeline(self, **kwargs: Any) -> Any:
        """Pipeline timeline of this config: a matplotlib Figure (one row per stage)."""
        return _view("timeline")(self, **kwargs)

    def plot_memory(self, **kwargs: Any) -> Any:
        """Live memory per stage over the step, with the HBM budget line: a matplotlib Figure."""
        return _view("memory")(self, **kwargs)

    def config_dict(self) -> dict[str, Any]:
        """The MindFormers values of this layout in canonical form (:mod:`autotune.config.canonical`)."""
        return canonical_values(self.layout)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``autotune evaluate --format json``. ``config`` is None when
        MindFormers cannot write the layout (e.g. an empty middle stage: Megatron-LM's
        ``--pipeline-model-parallel-layout`` allows one, MindFormers' offset rules do not); the
        cost model still evaluates it, so every other key is filled."""
        try:
            config = self.config_dict()
        except ConfigError:
            config = None
        return {
            "step_time_ms": self.step_time_ms,
            "bubble_fraction": self.bubble_fraction,
            "bubble": dict(self.bubble),
            "fits": self.fits,
            "hbm_budget_mib": self.hbm_budget_mib,
            "peak_mib": self.peak_mib,
            "schedule": self.schedule,
            "micro_batch_num": self.micro_batch_num,
            "seq_split_num": self.seq_split_num,
            "p2p_ms": self.p2p_ms,
            "stages": [s.to_dict() for s in self.stages],
            "config": config,
            "warnings": [{"code": w.code, "field": w.field, "message": w.message} for w in self.warnings],
        }


def evaluate_layout(profile: ModelProfile | ProfileArrays, layout: Layout, *, micro_batch_num: int,
                    schedule: str = "1f1b", hbm_mib: float | None = None,
                    p2p_ms: float | None = None, seq_split_num: int = 1) -> CostReport:
    """Simulate one layout and report step time, bubble breakdown and per-stage memory.

    Args:
        profile: the layer profile (or its arrays); its layer count must equal the layout's.
        layout: canonical [V][P] layout.
        micro_batch_num: micro-batches per step (m).
        schedule: registered schedule name (MindFormers ``pipeline_scheduler``).
        hbm_mib: HBM budget per device (MiB) for ``fits``/headroom.
        p2p_ms: override the profile's p2p time per hop (ms).
        seq_split_num: sequence chunks per micro-batch (seqpipe; 1 otherwise).

    Raises:
        ValueError: layer counts disagree, or the schedule cannot run these sizes.
        KeyError: unknown schedule.
    """
    pa = profile if isinstance(profile, ProfileArrays) else ProfileArrays.from_profile(profile)
    if pa.num_layers != layout.num_layers:
        raise ValueError(f"profile has {pa.num_layers} layers, layout places {layout.num_layers}")
    cs = compile_schedule(schedule, layout.pp, layout.vpp, micro_batch_num, seq_split_num)
    pos = get_schedule(schedule).virtual_position(layout.pp, layout.vpp)
    b = lambda a: a[None]  # noqa: E731
    warnings: list = [Warning_(**w) for w in getattr(profile, "model_warnings", None) or []]
    if (layout.select_patterns or layout.comm_patterns) and pa.has_op_tables:
        # per-op select / comm recompute from the layout's pattern tables (autotune.cost.select_ops)
        costs, op_warnings = pattern_stage_costs(pa, layout, pos=pos)
        warnings += op_warnings
    else:
        costs = stage_costs(pa, b(layout.layers_vp), b(layout.recompute_vp), b(layout.select_vp),
                            b(layout.comm_vp), pos=pos)
    hop = pa.p2p_ms if p2p_ms is None else p2p_ms
    sim = simulate(cs, costs, hop, timeline=True)
    bub = bubble_breakdown(cs, costs, sim, hop)
    act_p, ws_p = peak_activation_parts(cs, costs.act_mib[0], costs.ws_mib[0])
    head_stage = int(np.argwhere(pos == 0)[0][1])
    tail_stage = int(np.argwhere(pos == pos.max())[0][1])
    m = micro_batch_num
    stages = []
    for p in range(layout.pp):
        peak = float(sim.peak_mib[0, p])
        head_s = pa.head.static_mib if p == head_stage else 0.0
        tail_s = pa.tail.static_mib if p == tail_stage else 0.0
        static = float(costs.static_mib[0, p])
        mem = {
            "layer_static": static - head_s - tail_s - pa.stage_const_mib,
            "head_static": head_s,
            "tail_static": tail_s,
            "stage_const": pa.stage_const_mib,
            "activation": float(act_p[p]),
            "workspace": float(ws_p[p]),
        }
        stages.append(StageReport(
            stage=p,
            layers=layout.layers_vp[:, p].tolist(),
            recompute=layout.recompute_vp[:, p].tolist(),
            select_recompute=layout.select_vp[:, p].tolist(),
            select_comm_recompute=layout.comm_vp[:, p].tolist(),
            fwd_ms=float(costs.fwd_ms[0, :, p].sum() * m),
            bwd_ms=float(costs.bwd_ms[0, :, p].sum() * m),
            recompute_ms=float(costs.recompute_ms[0, :, p].sum() * m),
            static_mib=static,
            act_peak_mib=float(sim.peak_act_mib[0, p]),
            peak_mib=peak,
            headroom_mib=None if hbm_mib is None else float(hbm_mib - peak),
            memory_mib=mem,
            max_inflight=int(cs.max_inflight[p]),
        ))
    return CostReport(layout=layout, schedule=schedule, micro_batch_num=m,
                      step_time_ms=float(sim.step_ms[0]), bubble_fraction=float(sim.bubble_fraction[0]),
                      hbm_budget_mib=hbm_mib, stages=stages, sim=sim, bubble=bub.row(0),
                      seq_split_num=seq_split_num, p2p_ms=float(hop), costs=costs,
                      warnings=list(warnings))
