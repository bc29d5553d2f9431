"""Pictures of a cost report: pipeline timeline, live memory over time, per-stage bars, study plots.

Everything here reads a :class:`~autotune.cost.report.CostReport` (its simulation timeline) and,
where per-chunk numbers are needed, the per-mini-stage costs: ``report.costs`` when the cost model
provides it, else recomputed from a profile passed as ``profile=``.

Two layers:

- pure data (numpy, no matplotlib): :func:`timeline_segments` (one :class:`Segment` per coloured
  box of the timeline) and :func:`memory_series` (live MiB per stage over time). Tests compare
  these with the simulation;
- figures (matplotlib, imported lazily inside the functions, never on ``import autotune``):
  :func:`timeline_figure`, :func:`memory_figure`, :func:`stages_figure`, :func:`study_figures`, and
  :func:`save_figure` / :func:`write_study_plots` to write files. Figures are built with
  ``matplotlib.figure.Figure`` directly (no pyplot state), so they work under any backend and
  render in Jupyter.

Timeline picture (P = 2, m = 3, 1F1B; ``F``/``B`` = forward/backward, digits = micro-batch,
``r`` = recompute replay at the start of a backward, ``~`` = p2p hop)::

    stage 0 |F0|F1|  |   B0  |F2|   B1  |   B2  |
    stage 1 ~  |F0|rB0 |F1|rB1 |F2|rB2 |
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from autotune.cost.inputs import ProfileArrays, stage_costs
from autotune.cost.report import evaluate_layout
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import compile_schedule
from autotune.emit.render import SHARE_NAMES, device_time_shares, pct_of_budget
from autotune.errors import ConfigError
from autotune.extras import installed

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from autotune.cost.inputs import ProfileArrays, StageCosts
    from autotune.cost.report import CostReport
    from autotune.profile.schema import ModelProfile

#: Segment kinds, in drawing order.
KINDS = ("fwd", "bwd", "recompute", "p2p", "wgrad")

#: Base colours (colour-blind-safe picks from the Okabe-Ito palette); interleave chunks get
#: lighter shades of the same hue (chunk 0 darkest).
COLORS = {"fwd": "#0072B2", "bwd": "#E69F00", "recompute": "#CC3311", "p2p": "#555555",
          "wgrad": "#009E73"}  # wgrad: W ops (weight gradient) of a split backward (zero_bubble_v)
BUDGET_COLOR = "#CC3311"
PEAK_COLOR = "#000000"
STATIC_COLOR = "#9E9E9E"
WORKSPACE_COLOR = "#56B4E9"

#: Smallest on-screen width (pixels) of a forward box in the default timeline; chosen so that a
#: two-digit micro-batch id at 7 pt fits inside it.
MIN_OP_PX = 15.0
MAX_TIMELINE_WIDTH_IN = 240.0
DPI = 100


@dataclass(frozen=True)
class Segment:
    """One box of the timeline.

    Attributes:
        stage: pipeline stage (row); chunk: interleave chunk v; mb: micro-batch id; seq: sequence
            chunk within the micro-batch (seqpipe, else 0);
        kind: ``fwd``, ``bwd`` (backward without replay; B when the schedule splits the
            backward), ``recompute`` (replay before the backward), ``p2p`` (a hop arriving at
            ``stage``) or ``wgrad`` (a W op, weight gradient, of a split backward);
        start_ms, end_ms: times within the step (ms).
    """

    stage: int
    chunk: int
    mb: int
    kind: str
    start_ms: float
    end_ms: float
    seq: int = 0

    @property
    def dur_ms(self) -> float:
        return self.end_ms - self.start_ms


# ----------------------------------------------------------------------------------------- data --

def _seq_split(report: CostReport) -> int:
    """Sequence chunks per micro-batch (seqpipe); 1 for the other schedules."""
    return int(getattr(report, "seq_split_num", 1) or 1)


def _compiled(report: CostReport) -> Any:
    args = [report.schedule, report.layout.pp, report.layout.vpp, report.micro_batch_num]
    k = _seq_split(report)
    if k != 1:
        args.append(k)
    return compile_schedule(*args)


def _times(report: CostReport) -> tuple[np.ndarray, np.ndarray]:
    sim = report.sim
    if getattr(sim, "start_ms", None) is None or getattr(sim, "end_ms", None) is None:
        raise ConfigError("this cost report has no per-op timeline; evaluate it with timeline=True",
                          field="sim.start_ms", value=None, rule="no_timeline")
    return np.asarray(sim.start_ms)[:, 0], np.asarray(sim.end_ms)[:, 0]


def stage_costs_of(report: CostReport, profile: ModelProfile | ProfileArrays | None = None) -> StageCosts | None:
    """Per-mini-stage costs of a report's layout (arrays [1, V, P]), or None when unknown.

    Uses ``report.costs`` when the cost model attached it, else recomputes from ``profile``.
    """
    costs = getattr(report, "costs", None)
    if costs is not None:
        return costs
    if profile is None:
        return None

    pa = profile if isinstance(profile, ProfileArrays) else ProfileArrays.from_profile(profile)
    lay = report.layout
    b = lambda a: np.asarray(a)[None]  # noqa: E731
    kw: dict[str, Any] = {}
    if "pos" in inspect.signature(stage_costs).parameters:  # head/tail follow the schedule's shape
        kw["pos"] = get_schedule(report.schedule).virtual_position(lay.pp, lay.vpp)
    return stage_costs(pa, b(lay.layers_vp), b(lay.recompute_vp), b(lay.select_vp), b(lay.comm_vp), **kw)


def p2p_hop_ms(report: CostReport, profile: Any = None) -> float:
    """Time of one stage-to-stage hop (ms): the report's/profile's value, else read off the timeline.

    Every cross-stage op starts at least one hop after its dependency ends, and the first forward
    on stage 1 waits for nothing else, so the smallest such gap is the hop.
    """
    for src in (report, profile):
        v = getattr(src, "p2p_ms", None)
        if v is not None:
            return float(v)
    cs = _compiled(report)
    start, end = _times(report)
    cross = np.flatnonzero(cs.cross > 0)
    if cross.size == 0:
        return 0.0
    gap = start[cross] - end[cs.dep[cross]]
    return max(0.0, float(gap.min()))


def timeline_segments(report: CostReport, profile: Any = None) -> list[Segment]:
    """Boxes of the timeline, from the simulation's per-op start/end times (ms).

    A backward op of mini-stage (v, p) is split into ``recompute`` (its first
    ``recompute_ms[v, p]`` ms: MindSpore replays the forward before the gradient) and ``bwd``. The
    replay time per chunk comes from :func:`stage_costs_of`; without costs, each stage's total
    replay share ``recompute_ms / bwd_ms`` is applied to its backwards. With seqpipe
    (``seq_split_num`` k > 1) each op is one sequence chunk and replays 1/k of the chunk's time.
    Cross-stage dependencies
    add a ``p2p`` segment on the receiving stage from the sender's end for one hop.

    Returns:
        segments sorted by (stage, start_ms).
    """
    cs = _compiled(report)
    start, end = _times(report)
    costs = stage_costs_of(report, profile)
    if costs is not None:
        rec_vp = np.asarray(costs.recompute_ms)[0]
        rec_frac = None
    else:
        rec_vp = None
        rec_frac = np.array([s.recompute_ms / s.bwd_ms if s.bwd_ms > 0 else 0.0 for s in report.stages])
    hop = p2p_hop_ms(report, profile)
    segs: list[Segment] = []
    k = int(getattr(cs, "k", 1) or 1)
    for i in range(cs.num_ops):
        p, v, unit = int(cs.stage[i]), int(cs.chunk[i]), int(cs.mb[i])
        j, q = divmod(unit, k)
        s, e = float(start[i]), float(end[i])
        if cs.fwd[i]:
            segs.append(Segment(p, v, j, "fwd", s, e, q))
        elif int(getattr(cs, "kind", cs.fwd)[i]) == 2:
            segs.append(Segment(p, v, j, "wgrad", s, e, q))
        else:
            r = float(rec_vp[v, p]) / k if rec_vp is not None else float(rec_frac[p]) * (e - s)
            r = min(max(r, 0.0), e - s)
            if r > 0:
                segs.append(Segment(p, v, j, "recompute", s, s + r, q))
            segs.append(Segment(p, v, j, "bwd", s + r, e, q))
        if hop > 0 and cs.cross[i] > 0:
            d = float(end[cs.dep[i]])
            segs.append(Segment(p, v, j, "p2p", d, d + hop, q))
    segs.sort(key=lambda g: (g.stage, g.start_ms, KINDS.index(g.kind)))
    return segs


def memory_series(report: CostReport, profile: Any = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Live memory over time per stage: list over stages of (times_ms [K], live_mib [K]).

    Piecewise linear: static memory, plus each chunk-micro-batch's activation growing during its
    forward and released during its backward, plus the backward's transient workspace while it
    runs (the accounting of :mod:`autotune.cost.simulate`, so ``max(live_mib)`` equals the stage's
    ``peak_mib``). Starts at 0 ms and ends at the step time.

    Raises:
        ConfigError: neither ``report.costs`` nor a profile gives per-chunk activation sizes.
    """
    costs = stage_costs_of(report, profile)
    if costs is None:
        raise ConfigError("memory over time needs per-chunk activation sizes: pass profile=",
                          field="profile", value=None, rule="needs_profile")
    cs = _compiled(report)
    start, end = _times(report)
    act = np.asarray(costs.act_mib)[0] / int(getattr(cs, "k", 1) or 1)  # a seqpipe unit holds act/k
    ws = np.asarray(costs.ws_mib)[0]
    static = np.asarray(costs.static_mib)[0]
    step = float(report.step_time_ms)
    out = []
    for p in range(cs.P):
        level = float(static[p])
        t: list[float] = [0.0]
        y: list[float] = [level]
        for i in cs.order[p]:
            v = int(cs.chunk[i])
            s, e = float(start[i]), float(end[i])
            if cs.fwd[i]:
                t += [s, e]
                y += [level, level + act[v, p]]
                level += act[v, p]
            elif getattr(cs, "split_bw", False):
                # split backward: B takes its workspace at its start, W frees it and the unit's
                # activation at its end (autotune.cost.simulate)
                w = ws[v, p]
                if int(cs.kind[i]) == 1:
                    t += [s, s]
                    y += [level, level + w]
                    level += w
                else:
                    t += [e, e]
                    y += [level, level - act[v, p] - w]
                    level -= act[v, p] + w
            else:
                w = ws[v, p]
                t += [s, s, e, e]
                y += [level, level + w, level - act[v, p] + w, level - act[v, p]]
                level -= act[v, p]
        t.append(max(step, t[-1]))
        y.append(level)
        out.append((np.asarray(t), np.asarray(y)))
    return out


def recompute_savings_mib(report: CostReport, profile: Any = None) -> np.ndarray | None:
    """Activation MiB per stage [P] that recompute saves: peak without any recompute - with it.

    None when neither ``report.costs`` nor ``profile`` is known (the same layout is re-simulated
    with every recompute table set to zero).
    """
    saved = getattr(report, "recompute_savings_mib", None)
    if saved is not None:
        return np.asarray(saved, dtype=float)
    if profile is None:
        return None
    lay = report.layout
    z = np.zeros_like(lay.recompute_vp)
    bare = dataclasses.replace(lay, recompute_vp=z, select_vp=z.copy(), comm_vp=z.copy(),
                               select_patterns={}, comm_patterns={})
    other = evaluate_layout(profile, bare, micro_batch_num=report.micro_batch_num, schedule=report.schedule)
    return np.maximum(0.0, np.array([o.act_peak_mib - s.act_peak_mib
                                     for o, s in zip(other.stages, report.stages)]))


# -------------------------------------------------------------------------------------- figures --

def _mix(color: str, white: float) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb  # noqa: PLC0415 - matplotlib: optional (report extra), heavy

    r, g, b = to_rgb(color)
    return (r + (1 - r) * white, g + (1 - g) * white, b + (1 - b) * white)


def chunk_color(kind: str, chunk: int, num_chunks: int) -> tuple[float, float, float]:
    """RGB of a segment: the kind's hue, lighter for later interleave chunks (up to 55 % white)."""
    if kind in ("fwd", "bwd", "wgrad") and num_chunks > 1:
        return _mix(COLORS[kind], 0.55 * chunk / (num_chunks - 1))
    return _mix(COLORS[kind], 0.0)


def _text_color(rgb: tuple[float, float, float]) -> str:
    lum = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "black" if lum > 0.55 else "white"


def _title(report: CostReport, label: str | None) -> str:
    lay = report.layout
    head = f"{label}: " if label else ""
    k = _seq_split(report)
    split = f" × {k} sequence chunks" if k > 1 else ""
    text = (f"{head}step time {report.step_time_ms:,.1f} ms, idle (bubble) {report.bubble_fraction:.1%} of device "
            f"time  ({report.schedule}, {lay.pp} stages × {lay.vpp} chunks, {report.micro_batch_num} "
            f"micro-batches{split})")
    parts = bubble_parts(report)
    if parts:
        text += "\ndevice time: " + " + ".join(f"{n} {v:.1%}" for n, v in parts)
    return text


def bubble_parts(report: CostReport) -> list[tuple[str, float]]:
    """Device time in one unit, ``[(term, share of P × step time)]``: compute, recompute replay, and
    the idle time split into fill/drain, p2p wait and imbalance (none negative; they sum to 1,
    :func:`autotune.emit.render.device_time_shares`); [] when the report has no breakdown."""
    sh = device_time_shares(report)
    return [(SHARE_NAMES[k], sh[k]) for k in ("compute", "recompute", "fill_drain", "comm", "imbalance") if sh]


def _plot_in_per_ms(report: CostReport, segments: Sequence[Segment], min_op_px: float, dpi: int) -> float:
    """Inches of plot per ms such that the shortest forward/backward box is ``min_op_px`` pixels
    (or wider, when the longest micro-batch id needs it), at least 9 in for the whole step."""
    durs = [g.dur_ms for g in segments if g.kind in ("fwd", "bwd") and g.dur_ms > 0]
    step = max(float(report.step_time_ms), 1e-9)
    digits = len(str(max(report.micro_batch_num - 1, 0))) + (2 if _seq_split(report) > 1 else 0)
    min_op_px = max(min_op_px, digits * 7 * 0.62 * dpi / 72 + 3)  # the widest id fits its box
    plot_in = 9.0
    if durs:
        plot_in = max(plot_in, step * min_op_px / min(durs) / dpi)
    return plot_in / step


def timeline_geometry(report: CostReport, segments: Sequence[Segment], *, min_op_px: float = MIN_OP_PX,
                      dpi: int = DPI, axis: tuple[float, float] | None = None) -> tuple[float, float]:
    """(width_in, height_in) of the timeline: wide enough that the shortest forward/backward box
    is ``min_op_px`` pixels, or wider when the longest micro-batch id needs it (capped at
    ``MAX_TIMELINE_WIDTH_IN``), 0.42 in per stage. ``axis`` = (end ms, plot inches per ms) of a
    shared time axis (:func:`shared_time_axis`) overrides the width."""
    if axis is not None:
        plot_in = axis[0] * axis[1]
    else:
        plot_in = float(report.step_time_ms) * _plot_in_per_ms(report, segments, min_op_px, dpi)
    width = min(plot_in + 1.6, MAX_TIMELINE_WIDTH_IN)
    height = 2.15 + 0.42 * report.layout.pp
    return width, height


def shared_time_axis(reports: Sequence[CostReport], profiles: Sequence[Any] | None = None, *,
                     min_op_px: float = MIN_OP_PX, dpi: int = DPI) -> tuple[float, float]:
    """One time axis for timelines drawn side by side (e.g. tuned vs your config): (end ms, plot
    inches per ms). The end is the longest step; the scale is the finest any of them needs (so every
    id stays readable), reduced when the widest picture would pass ``MAX_TIMELINE_WIDTH_IN``. Drawn
    with the same axis, a faster run is a shorter row of boxes, never a longer one."""
    profiles = list(profiles) if profiles is not None else [None] * len(reports)
    end = max(float(r.step_time_ms) for r in reports)
    scale = max(_plot_in_per_ms(r, timeline_segments(r, p), min_op_px, dpi) for r, p in zip(reports, profiles))
    scale = min(scale, (MAX_TIMELINE_WIDTH_IN - 1.6) / max(end, 1e-9))
    return end, scale


def timeline_figure(report: CostReport, *, profile: Any = None, label: str | None = None,
                    min_op_px: float = MIN_OP_PX, labels: bool = True,
                    time_axis: tuple[float, float] | None = None, max_width_in: float | None = None) -> Figure:
    """Pipeline timeline: one row per stage (stage 0 on top), time (ms) across.

    Forward boxes in blue, backward in orange, recompute replay in red, p2p hops as a thin grey
    strip under the row; interleave chunks are lighter shades (legend). Each forward/backward box
    carries its micro-batch id when it is wide enough. Title: step time and the device-time shares.

    ``time_axis`` (from :func:`shared_time_axis`) draws on a shared axis: same end and same inches
    per ms as the other pictures drawn with it, and a dotted line where this step ends.
    ``max_width_in`` caps the width (a compact picture, e.g. for a notebook; ids that no longer fit
    their box are left out).

    Artists carry gids for tests: ``timeline-<kind>-c<chunk>`` per collection of boxes.
    """
    from matplotlib.patches import Patch  # noqa: PLC0415 - matplotlib: optional (report extra), heavy

    segs = timeline_segments(report, profile)
    P, V = report.layout.pp, report.layout.vpp
    w_in, h_in = timeline_geometry(report, segs, min_op_px=min_op_px, axis=time_axis)
    if max_width_in is not None:
        w_in = min(w_in, max_width_in)
    fig = new_figure(figsize=(w_in, h_in), dpi=DPI)
    left, right = 0.8 / w_in, 1 - 0.8 / w_in
    bottom, top = 1.05 / h_in, 1 - 0.8 / h_in
    ax = fig.add_axes((left, bottom, right - left, top - bottom))
    step = float(report.step_time_ms)
    end = step if time_axis is None else max(float(time_axis[0]), step)
    ax.set_facecolor("white")  # idle time must read as white whatever the global style
    ax.set_xlim(0, end * 1.002)
    if time_axis is not None:
        ax.axvline(step, color="#333333", linestyle=":", linewidth=1.0, gid="step-end")
    ax.set_ylim(P - 0.5, -0.5)
    bar_h, strip_h = 0.72, 0.12
    groups: dict[tuple[str, int], list[Segment]] = {}
    for g in segs:
        groups.setdefault((g.kind, g.chunk if g.kind in ("fwd", "bwd", "wgrad") else 0), []).append(g)
    for (kind, v), gs in sorted(groups.items(), key=lambda kv: KINDS.index(kv[0][0])):
        color = chunk_color(kind, v, V)
        rows: dict[int, list[tuple[float, float]]] = {}
        for g in gs:
            rows.setdefault(g.stage, []).append((g.start_ms, g.dur_ms))
        for p, xr in rows.items():
            if kind == "p2p":
                yr = (p + bar_h / 2, strip_h)
                coll = ax.broken_barh(xr, yr, facecolors=color, edgecolor="none")
            else:
                yr = (p - bar_h / 2, bar_h)
                coll = ax.broken_barh(xr, yr, facecolors=color, edgecolor="white", linewidth=0.4)
            coll.set_gid(f"timeline-{kind}-c{v}-s{p}")
    k = _seq_split(report)
    if labels:
        px_per_ms = (right - left) * w_in * DPI / (end * 1.002)
        fontsize = 7
        for g in segs:
            if g.kind not in ("fwd", "bwd", "wgrad"):
                continue
            s, e = g.start_ms, g.end_ms
            text = f"{g.mb}.{g.seq}" if k > 1 else str(g.mb)
            need = len(text) * fontsize * 0.62 * DPI / 72 + 2
            if (e - s) * px_per_ms < need:
                continue
            ax.text((s + e) / 2, g.stage, text, ha="center", va="center", fontsize=fontsize,
                    color=_text_color(chunk_color(g.kind, g.chunk, V)), clip_on=True)
    ax.set_yticks(range(P), [f"stage {p}" for p in range(P)])
    ax.set_xlabel("time in step (ms)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    ax.set_title(_title(report, label), loc="left", fontsize=11)
    handles = []
    for kind, name in (("fwd", "forward"), ("bwd", "backward")):
        for v in range(V):
            suffix = f" chunk {v}" if V > 1 else ""
            handles.append(Patch(facecolor=chunk_color(kind, v, V), label=f"{name}{suffix}"))
    if any(g.kind == "wgrad" for g in segs):
        for v in range(V):
            suffix = f" chunk {v}" if V > 1 else ""
            handles.append(Patch(facecolor=chunk_color("wgrad", v, V), label=f"weight gradient (W){suffix}"))
    handles.append(Patch(facecolor=COLORS["recompute"], label="recompute replay"))
    handles.append(Patch(facecolor=COLORS["p2p"], label="p2p hop (arriving)"))
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle (bubble)"))
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(left, 0.02), ncol=min(len(handles), 10),
               fontsize=8, frameon=False, handlelength=1.2, columnspacing=1.2)
    return fig


def peak_label(peak_mib: float, budget_mib: float | None) -> str:
    """Label of a stage's peak: ``peak 55,645 MiB (99.7% of budget, 163 MiB headroom)`` or
    ``(100.3% of budget, over by 192 MiB)`` — one decimal, never 100 % below the budget
    (:func:`autotune.emit.render.pct_of_budget`)."""
    if not budget_mib:
        return f"peak {peak_mib:,.0f} MiB"
    room = budget_mib - peak_mib
    tail = f"{room:,.0f} MiB headroom" if room >= 0 else f"over by {-room:,.0f} MiB"
    return f"peak {peak_mib:,.0f} MiB ({pct_of_budget(peak_mib, budget_mib)} of budget, {tail})"


def memory_figure(report: CostReport, *, profile: Any = None, label: str | None = None,
                  margin_mib: float = 0.0) -> Figure:
    """Live memory over time, one panel per stage (shared axes): static memory in grey, activations
    on top in blue, the HBM budget as a red dashed line and each stage's peak marked (▼ + MiB, % of
    the budget and headroom). With ``margin_mib`` (the report's budget is then the limit budget −
    margin) the full budget is the red line and the limit a dotted one."""
    series = memory_series(report, profile)
    P = len(series)
    limit = report.hbm_budget_mib
    budget = None if limit is None else float(limit) + margin_mib
    h_in = 1.4 + 0.75 * P
    fig = new_figure(figsize=(12, h_in), dpi=DPI)
    axs = fig.subplots(P, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    fig.subplots_adjust(left=0.1, right=0.97, top=1 - 0.6 / h_in, bottom=0.65 / h_in, hspace=0.12)
    ymax = max(float(y.max()) for _, y in series)
    if budget is not None:
        ymax = max(ymax, float(budget))
    statics = [float(y[0]) for _, y in series]
    for p, (t, y) in enumerate(series):
        ax = axs[p]
        ax.fill_between([0, t[-1]], 0, statics[p], color=STATIC_COLOR, alpha=0.45, linewidth=0, gid=f"static-s{p}")
        ax.fill_between(t, statics[p], y, color=COLORS["fwd"], alpha=0.35, linewidth=0)
        ax.plot(t, y, color=COLORS["fwd"], linewidth=1.0, gid=f"memory-s{p}")
        k = int(np.argmax(y))
        ax.plot([t[k]], [y[k]], marker="v", color=PEAK_COLOR, markersize=6, linestyle="none", gid=f"peak-s{p}")
        ax.annotate(peak_label(float(y[k]), budget), (t[k], y[k]), xytext=(4, 3), textcoords="offset points",
                    fontsize=7, va="bottom", gid=f"peak-label-s{p}")
        if budget is not None:
            ax.axhline(budget, color=BUDGET_COLOR, linestyle="--", linewidth=1.0, gid=f"budget-s{p}")
            if margin_mib > 0:
                ax.axhline(limit, color=BUDGET_COLOR, linestyle=":", linewidth=0.8, gid=f"limit-s{p}")
        ax.set_ylabel(f"stage {p}", rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", color="#e5e5e5", linewidth=0.5)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    axs[0].set_ylim(0, ymax * 1.18)
    axs[0].set_xlim(0, float(report.step_time_ms))
    axs[-1].set_xlabel("time in step (ms)")
    btxt = "no HBM budget" if budget is None else f"HBM budget {budget:,.0f} MiB (red dashed)"
    if budget is not None and margin_mib > 0:
        btxt += f", minus safety margin {margin_mib:,.0f} MiB (red dotted)"
    head = f"{label}: " if label else ""
    fig.suptitle(f"{head}live memory per stage (MiB): static (grey) + activations (blue); {btxt}",
                 x=0.1, ha="left", fontsize=10)
    return fig


def memory_parts(report: CostReport) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(static, activation, workspace) MiB per stage at each stage's peak; they sum to ``peak_mib``.

    From the cost model's ``StageReport.memory_mib`` components when present (static = layer +
    head + tail + stage constant), else ``static_mib`` and ``act_peak_mib`` (workspace 0).
    """
    static, act, work = [], [], []
    for st in report.stages:
        comp = getattr(st, "memory_mib", None) or {}
        if "activation" in comp:
            a, w = float(comp["activation"]), float(comp.get("workspace", 0.0))
            static.append(float(st.peak_mib) - a - w)
            act.append(a)
            work.append(w)
        else:
            static.append(float(st.static_mib))
            act.append(float(st.act_peak_mib))
            work.append(0.0)
    return np.asarray(static), np.asarray(act), np.asarray(work)


def _tag(container: Any, gid: str) -> None:
    container.set_label(gid)
    for patch in container:
        patch.set_gid(gid)


def stages_figure(reports: Sequence[CostReport], names: Sequence[str], *,
                  profiles: Sequence[Any] | None = None, margin_mib: float = 0.0) -> Figure:
    """Per-stage bars, one bar per report side by side (e.g. tuned vs your config).

    Left: peak memory by component (static, activations and backward workspace at the peak, see
    :func:`memory_parts`, and hatched on top the activation memory recompute saves); HBM budget as a
    dashed line. Right: compute time per step (forward, backward, recompute replay). Bar containers
    are labelled (and their patches gid-tagged) ``mem-<static|act|workspace|saved>-<report index>``
    and ``time-<fwd|bwd|recompute>-<report index>``.
    """
    from matplotlib.patches import Patch  # noqa: PLC0415 - matplotlib: optional (report extra), heavy

    if len(reports) != len(names):
        raise ValueError("one name per report")
    profiles = list(profiles) if profiles is not None else [None] * len(reports)
    P = max(r.layout.pp for r in reports)
    n = len(reports)
    width = 0.8 / n
    fig = new_figure(figsize=(max(12.0, 1.2 + 0.9 * P * n), 5.6), dpi=DPI)
    ax_m, ax_t = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.87, bottom=0.28, wspace=0.22)
    hatches = ["", "//", "..", "xx"]
    for k, (r, prof) in enumerate(zip(reports, profiles)):
        x = np.arange(r.layout.pp) + (k - (n - 1) / 2) * width
        static, act, work = memory_parts(r)
        saved = recompute_savings_mib(r, prof)
        edge = "black" if k == 0 else "#444444"
        b = ax_m.bar(x, static, width * 0.95, color=STATIC_COLOR, edgecolor=edge, linewidth=0.5, hatch=hatches[k % 4])
        _tag(b, f"mem-static-{k}")
        b = ax_m.bar(x, act, width * 0.95, bottom=static, color=COLORS["fwd"], edgecolor=edge,
                     linewidth=0.5, hatch=hatches[k % 4])
        _tag(b, f"mem-act-{k}")
        if work.any():
            b = ax_m.bar(x, work, width * 0.95, bottom=static + act, color=WORKSPACE_COLOR, edgecolor=edge,
                         linewidth=0.5, hatch=hatches[k % 4])
            _tag(b, f"mem-workspace-{k}")
        if saved is not None:
            b = ax_m.bar(x, saved, width * 0.95, bottom=static + act + work, facecolor="none",
                         edgecolor=COLORS["recompute"], linewidth=0.8, hatch="////")
            _tag(b, f"mem-saved-{k}")
        fwd = np.array([s.fwd_ms for s in r.stages])
        rec = np.array([s.recompute_ms for s in r.stages])
        bwd = np.array([s.bwd_ms for s in r.stages]) - rec
        bottoms = np.zeros_like(fwd)
        for comp, vals in (("fwd", fwd), ("bwd", bwd), ("recompute", rec)):
            b = ax_t.bar(x, vals, width * 0.95, bottom=bottoms, color=COLORS[comp], edgecolor=edge,
                         linewidth=0.5, hatch=hatches[k % 4])
            _tag(b, f"time-{comp}-{k}")
            bottoms = bottoms + vals
    budget = next((r.hbm_budget_mib + margin_mib for r in reports if r.hbm_budget_mib is not None), None)
    if budget is not None:
        ax_m.axhline(budget, color=BUDGET_COLOR, linestyle="--", linewidth=1.0, gid="budget")
    for ax, title, unit in ((ax_m, "peak memory per stage", "MiB"), (ax_t, "compute time per step", "ms")):
        ax.set_xticks(range(P), [str(p) for p in range(P)])
        ax.set_xlabel("stage")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="y", color="#e5e5e5", linewidth=0.5)
        ax.set_axisbelow(True)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    handles = [Patch(facecolor=STATIC_COLOR, label="static (weights, grads, optimizer)"),
               Patch(facecolor=COLORS["fwd"], label="activations at peak"),
               Patch(facecolor=WORKSPACE_COLOR, label="backward workspace at peak"),
               Patch(facecolor="none", edgecolor=COLORS["recompute"], hatch="////", label="saved by recompute"),
               Patch(facecolor=COLORS["fwd"], label="forward"), Patch(facecolor=COLORS["bwd"], label="backward"),
               Patch(facecolor=COLORS["recompute"], label="recompute replay")]
    if budget is not None:
        from matplotlib.lines import Line2D  # noqa: PLC0415 - matplotlib: optional (report extra), heavy

        handles.insert(3, Line2D([], [], color=BUDGET_COLOR, linestyle="--", label=f"HBM budget {budget:,.0f} MiB"))
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatches[k % 4], label=f"bar {k + 1}: {nm}")
                for k, nm in enumerate(names)]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    summary = "   vs   ".join(f"{nm}: {r.step_time_ms:,.1f} ms, idle {r.bubble_fraction:.1%}, "
                              f"peak {r.peak_mib:,.0f} MiB" for nm, r in zip(names, reports))
    fig.suptitle(summary, fontsize=10, x=0.07, ha="left")
    return fig


# ------------------------------------------------------------------------------------ study ----

def _study_ok(study: Any) -> bool:
    try:
        from optuna.trial import TrialState  # noqa: PLC0415 - optuna: heavy, loaded only for the study views

        return sum(t.state == TrialState.COMPLETE for t in study.trials) >= 2
    except Exception:  # noqa: BLE001
        return False


def _top_params(study: Any, k: int = 8) -> list[str] | None:
    import optuna  # noqa: PLC0415 - optuna: heavy, loaded only for the study views

    try:
        with warnings.catch_warnings():
            # the search's ranges depend on other choices (offset bounds per pp_interleave_num), so
            # Optuna's PED-ANOVA warns per parameter that some ranges have < 2 trials: noise here
            warnings.simplefilter("ignore", UserWarning)
            imp = optuna.importance.get_param_importances(study)
        return list(imp)[:k] or None
    except Exception:  # noqa: BLE001
        return None


def study_figures(study: Any) -> dict[str, Any]:
    """Optuna's matplotlib views of a study: ``history``, ``importance``, ``parallel`` -> Figure.

    Views that Optuna cannot draw for this study (too few complete trials, a single parameter)
    are left out. Parallel coordinates show the 8 most important parameters.
    """
    if not _study_ok(study):
        return {}
    import matplotlib  # noqa: PLC0415 - matplotlib: optional (report extra), heavy
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib: optional (report extra), heavy
    from optuna.exceptions import ExperimentalWarning  # noqa: PLC0415 - optuna: heavy, loaded only for the study views
    from optuna.visualization import matplotlib as ovm  # noqa: PLC0415 - optuna: heavy, loaded only for the study views

    top = _top_params(study)
    makers = {"history": lambda: ovm.plot_optimization_history(study),
              "importance": lambda: ovm.plot_param_importances(study),
              "parallel": lambda: ovm.plot_parallel_coordinate(study, params=top)}
    out: dict[str, Any] = {}
    for name, make in makers.items():
        # Optuna's views call plt.style.use("ggplot"); rc_context undoes that global change.
        with warnings.catch_warnings(), matplotlib.rc_context():
            warnings.simplefilter("ignore", ExperimentalWarning)
            warnings.simplefilter("ignore", UserWarning)
            try:
                ax = make()
            except Exception:  # noqa: BLE001 - a view Optuna cannot draw for this study
                continue
            fig = ax.figure if hasattr(ax, "figure") else np.ravel(ax)[0].figure
            fig.set_size_inches(10, 5.5)
            fig.tight_layout()
        plt.close(fig)  # keep pyplot's registry empty; the Figure object stays usable
        out[name] = fig
    return out


def write_study_plots(study: Any, out_dir: str | Path) -> list[Path]:
    """Write ``study_<view>.png`` (matplotlib) and ``study_<view>.html`` (plotly, its JS inlined so
    it works offline) for each view of :func:`study_figures`. Returns the written paths."""
    out = Path(out_dir)
    written: list[Path] = []
    for name, fig in study_figures(study).items():
        written.append(save_figure(fig, out / f"study_{name}.png"))
    if not _study_ok(study) or not installed("plotly"):  # the PNG views need only matplotlib
        return written
    from optuna.exceptions import ExperimentalWarning  # noqa: PLC0415 - optuna: heavy, loaded only for the study views
    from optuna import visualization as ov  # noqa: PLC0415 - optuna: heavy, loaded only for the study views

    top = _top_params(study)
    makers = {"history": lambda: ov.plot_optimization_history(study),
              "importance": lambda: ov.plot_param_importances(study),
              "parallel": lambda: ov.plot_parallel_coordinate(study, params=top)}
    for name, make in makers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            warnings.simplefilter("ignore", UserWarning)  # the importances' per-range warnings (_top_params)
            try:
                pfig = make()
            except Exception:  # noqa: BLE001
                continue
        path = out / f"study_{name}.html"
        pfig.write_html(str(path), include_plotlyjs=True, full_html=True)
        written.append(path)
    return written


# -------------------------------------------------------------------------------------- files ---

def new_figure(**kwargs: Any) -> Figure:
    """A :class:`autotune.emit.figure.ReportFigure` (a matplotlib Figure that Jupyter displays as a
    picture without ``%matplotlib inline``); keywords go to ``Figure``."""
    from autotune.emit.figure import ReportFigure  # noqa: PLC0415 - emit.figure imports matplotlib (optional, heavy)

    return ReportFigure(**kwargs)


def save_figure(fig: Any, path: str | Path, *, dpi: int | None = None) -> Path:
    """Save a figure (PNG/SVG by suffix) without metadata that names a URL; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".").lower()
    meta: dict[str, Any] = {"Software": None} if fmt == "png" else {"Creator": None, "Date": None}
    fig.savefig(path, format=fmt, dpi=dpi or fig.dpi, metadata=meta, facecolor="white")
    return path


def figure_png_bytes(fig: Any, *, dpi: int | None = None) -> bytes:
    """PNG bytes of a figure (no metadata URL), e.g. for a data URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()
