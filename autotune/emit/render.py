"""Plain-text rendering of cost reports and search results (what the CLI prints).

Two conventions hold in every output (text, JSON extras, HTML, pictures):

- **One unit for the bubble**: shares of *device time* (P devices × step time). Device time is
  ``compute`` (the model's forward and backward) + ``recompute`` (replayed forwards) + ``idle``
  (the bubble), and idle is ``fill_drain`` + ``comm`` + ``imbalance`` — see
  :func:`device_time_shares`. None of the terms is negative.
- **Honest memory percentages**: a peak below the budget is never printed as 100 %
  (:func:`pct_of_budget`), and the headroom is given in MiB next to it. With a safety margin
  (``--hbm-margin``) a report's ``hbm_budget_mib`` is the *limit* the search packed against
  (budget − margin); the functions here take ``margin_mib`` and show the headroom to the full budget.
"""

from __future__ import annotations

import math
from typing import Any

from autotune.cost.report import CostReport

#: Display names of :func:`device_time_shares`' terms, in order.
SHARE_NAMES = {"compute": "compute", "recompute": "recompute replay", "idle": "idle (bubble)",
               "fill_drain": "fill/drain", "comm": "p2p wait", "imbalance": "imbalance"}

#: What each term means (printed in the report).
TERMS = {
    "device time": "P devices × step time; every share below is a share of it, and compute + "
                   "recompute replay + idle = 100 %.",
    "compute": "the model's own forward and backward work (no replay).",
    "recompute replay": "forwards replayed in the backward of recomputed layers: busy, but not model work.",
    "idle (bubble)": "time a device waits: 1 − busy / device time. It is split into fill/drain, p2p "
                     "wait and imbalance:",
    "fill/drain": "the schedule's own bubble with equal stages, (P − 1)/(V·m) of the compute for the "
                  "1F1B family (Narayanan et al. 2021, §2.2); at most the idle time.",
    "p2p wait": "idle added by the stage-to-stage hops (step time with and without p2p time).",
    "imbalance": "the rest of the idle time: devices waiting on a slower stage. Never negative: when "
                 "recompute replay or a light stage fills part of the fill/drain gap, the idle time is "
                 "smaller than fill/drain + p2p wait and those are capped instead (SAPP's residual "
                 "'imbalance' can then be negative; ours is 0).",
    "headroom": "HBM budget − worst-stage peak (MiB, and % of the budget). The budget is "
                "context.max_device_memory or --hbm; with --hbm-margin the search only accepts configs "
                "whose headroom is at least the margin.",
}


def device_time_shares(report: CostReport) -> dict[str, float]:
    """Where the devices' time goes, as fractions of device time P·T (P stages, T step ms).

    From the cost model's SAPP breakdown (fractions of model compute C, :mod:`autotune.cost.bubble`):
    ``C = P·T / (1 + real)``, busy ``H = C·(1 + recompute)``, idle ``I = P·T − H``. Then

    - ``compute = C / P·T``, ``recompute = (H − C) / P·T``, ``idle = I / P·T`` (= ``bubble_fraction``);
    - ``fill_drain = min(ideal·C, I) / P·T``, ``comm = min(comm·C, I − fill_drain) / P·T``,
      ``imbalance = idle − fill_drain − comm``.

    All terms are >= 0; compute + recompute + idle = 1 and fill_drain + comm + imbalance = idle.

    Returns:
        dict with the keys of :data:`SHARE_NAMES`; empty when the report has no breakdown or no
        compute (memory-only profiles).
    """
    b = getattr(report, "bubble", None) or {}
    if not b or not all(math.isfinite(float(b.get(k, math.nan))) for k in ("real", "ideal", "recompute", "comm")):
        return {}
    one = 1.0 + float(b["real"])  # P·T in units of C
    if one <= 0:
        return {}
    rec = max(0.0, float(b["recompute"])) / one
    compute = 1.0 / one
    idle = max(0.0, 1.0 - compute - rec)
    fill = min(max(0.0, float(b["ideal"]) / one), idle)
    comm = min(max(0.0, float(b["comm"]) / one), idle - fill)
    return {"compute": compute, "recompute": rec, "idle": idle, "fill_drain": fill, "comm": comm,
            "imbalance": max(0.0, idle - fill - comm)}


def report_json(report: CostReport, margin_mib: float = 0.0) -> dict[str, Any]:
    """``report.to_dict()`` with the budget terms made explicit (the JSON of ``evaluate`` and of each
    config of ``search --format json``):

    - ``hbm_budget_mib``: the full budget (the report's own budget + ``margin_mib``);
      ``hbm_margin_mib``: the safety margin; ``hbm_limit_mib``: budget − margin, what ``fits``
      was checked against;
    - ``headroom_mib`` = budget − worst-stage peak and ``headroom_pct`` (% of the budget); each stage's
      ``headroom_mib`` is to the full budget too;
    - ``device_time``: :func:`device_time_shares` (one unit; ``bubble`` keeps SAPP's terms, fractions
      of model compute, whose residual ``imbalance`` may be negative).
    """
    out = report.to_dict()
    budget = budget_of(report, margin_mib)
    out["hbm_budget_mib"] = budget
    out["hbm_margin_mib"] = float(margin_mib)
    out["hbm_limit_mib"] = report.hbm_budget_mib
    out["headroom_mib"] = None if budget is None else budget - report.peak_mib
    out["headroom_pct"] = None if budget is None else 100.0 * (budget - report.peak_mib) / budget
    for st in out.get("stages", []):
        if st.get("headroom_mib") is not None:
            st["headroom_mib"] = st["headroom_mib"] + margin_mib
    out["device_time"] = device_time_shares(report)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def bubble_line(report: CostReport) -> str:
    """Device time in one unit: ``device time: compute a % + recompute replay b % + idle (bubble)
    c % (fill/drain d % + p2p wait e % + imbalance f %)``; empty when the report has no breakdown."""
    sh = device_time_shares(report)
    if not sh:
        return ""
    return (f"device time: compute {_pct(sh['compute'])} + recompute replay {_pct(sh['recompute'])} + "
            f"idle (bubble) {_pct(sh['idle'])} (fill/drain {_pct(sh['fill_drain'])} + p2p wait "
            f"{_pct(sh['comm'])} + imbalance {_pct(sh['imbalance'])})")


def pct_of_budget(peak_mib: float, budget_mib: float) -> str:
    """``peak / budget`` as a percentage with one decimal, e.g. ``"99.7%"``; a peak below the budget
    never shows as 100 % (at most ``"99.9%"``), a peak at or above it shows 100 % or more."""
    x = 100.0 * peak_mib / budget_mib
    r = round(x, 1)
    if peak_mib < budget_mib and r >= 100.0:
        r = 99.9
    return f"{r:.1f}%"


def headroom_text(peak_mib: float, budget_mib: float | None, *, thousands: bool = False) -> str:
    """``"163 MiB headroom (0.3%)"`` (MiB and % of the budget), ``"over budget by 12 MiB (0.1%)"``,
    or ``""`` without a budget. A positive headroom under 0.05 % shows as ``"<0.1%"``. MiB are
    written as the text report writes them (``2774``); ``thousands`` writes ``2,774`` (the HTML
    report's tables)."""
    if budget_mib is None:
        return ""
    room = budget_mib - peak_mib
    x = 100.0 * abs(room) / budget_mib
    pct = "<0.1%" if 0 < x < 0.05 else f"{x:.1f}%"
    mib = f"{abs(room):,.0f}" if thousands else f"{abs(room):.0f}"
    if room >= 0:
        return f"{mib} MiB headroom ({pct})"
    return f"over budget by {mib} MiB ({pct})"


def budget_of(report: CostReport, margin_mib: float = 0.0) -> float | None:
    """The full HBM budget (MiB) of a report whose ``hbm_budget_mib`` is the limit budget − margin."""
    return None if report.hbm_budget_mib is None else float(report.hbm_budget_mib) + margin_mib


def _fmt_list(xs: list[int]) -> str:
    return "/".join(str(x) for x in xs)


def stage_table(report: CostReport, margin_mib: float = 0.0) -> str:
    """Per-stage table: layers and recompute counts per chunk, time per step, peak MiB, headroom to
    the full budget (MiB). "act+ws MiB" is what the stage holds at its peak besides its static
    memory: live activations plus the workspace of the backward running then (static + act+ws =
    peak; :func:`memory_table` splits them)."""
    hdr = ["stage", "layers", "full", "select", "comm", "fwd ms", "bwd ms", "recomp ms",
           "static MiB", "act+ws MiB", "peak MiB", "headroom MiB"]
    rows = []
    for s in report.stages:
        rows.append([str(s.stage), _fmt_list(s.layers), _fmt_list(s.recompute), _fmt_list(s.select_recompute),
                     _fmt_list(s.select_comm_recompute), f"{s.fwd_ms:.0f}", f"{s.bwd_ms:.0f}",
                     f"{s.recompute_ms:.0f}", f"{s.static_mib:.0f}", f"{s.act_peak_mib:.0f}",
                     f"{s.peak_mib:.0f}", "-" if s.headroom_mib is None else f"{s.headroom_mib + margin_mib:.0f}"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(hdr), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def memory_text(report: CostReport, margin_mib: float = 0.0) -> str:
    """``worst-stage peak 55645 MiB = 99.7% of budget 55808 MiB, 163 MiB headroom (0.3%)`` (with a
    margin: ``... of budget 55808 MiB (safety margin 2790 MiB) ...``)."""
    budget = budget_of(report, margin_mib)
    if budget is None:
        return f"worst-stage peak {report.peak_mib:.0f} MiB (no budget)"
    margin = f" (safety margin {margin_mib:.0f} MiB)" if margin_mib > 0 else ""
    return (f"worst-stage peak {report.peak_mib:.0f} MiB = {pct_of_budget(report.peak_mib, budget)} of budget "
            f"{budget:.0f} MiB{margin}, {headroom_text(report.peak_mib, budget)}")


def summary_line(report: CostReport, margin_mib: float = 0.0) -> str:
    """One line: step time, idle share of device time, worst peak vs budget with the headroom, fits
    (against budget − ``margin_mib``)."""
    fits = {True: "fits", False: "DOES NOT FIT", None: "fit unknown"}[report.fits]
    if report.fits is False and margin_mib > 0 and report.peak_mib <= budget_of(report, margin_mib):
        fits = "DOES NOT FIT the safety margin"
    return (f"step time {report.step_time_ms:.1f} ms | idle (bubble) {report.bubble_fraction:.1%} of device time | "
            f"{memory_text(report, margin_mib)} | {fits} | "
            f"pp_interleave_num {report.layout.vpp}, {report.schedule}, micro_batch_num {report.micro_batch_num}")


def memory_table(report: CostReport) -> str:
    """Per-stage peak MiB by component (they sum to the peak); empty when the report has none."""
    if not report.stages or not getattr(report.stages[0], "memory_mib", None):
        return ""
    keys = list(report.stages[0].memory_mib)
    hdr = ["stage"] + [k.replace("_", " ") for k in keys] + ["peak MiB", "in flight"]
    rows = [[str(s.stage)] + [f"{s.memory_mib[k]:.0f}" for k in keys] + [f"{s.peak_mib:.0f}",
                                                                       str(getattr(s, "max_inflight", ""))]
            for s in report.stages]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(hdr), line(["-" * w for w in widths])] + [line(r) for r in rows])


def render_report(report: CostReport, title: str = "", margin_mib: float = 0.0) -> str:
    """Title, summary line, device-time breakdown, stage table and the per-stage memory components."""
    parts = [title] if title else []
    parts += [summary_line(report, margin_mib)]
    extra = bubble_line(report)
    if extra:
        parts.append(extra)
    parts.append(stage_table(report, margin_mib))
    mem = memory_table(report)
    if mem:
        parts += ["", "peak memory by component (MiB):", mem]
    for w in getattr(report, "warnings", None) or []:
        parts.append(f"warning {w.code} ({w.field}): {w.message}")
    return "\n".join(parts)


def fits_word(fits: bool | None) -> str:
    """A report's ``fits`` as the tables write it: "yes", "NO" (upper case: it must not be missed)
    or "unknown" (no budget given)."""
    return {True: "yes", False: "NO", None: "unknown"}[fits]


def comparison_table(best: CostReport | None, baselines: dict[str, Any], margin_mib: float = 0.0, *,
                     no_fit_proven: bool | None = None) -> str:
    """Tuned config vs the baselines: step time, change, worst peak, headroom to the full budget
    (MiB and %), fits (against budget − ``margin_mib``). Without a tuned config its row says "no
    layout fits the budget" when ``no_fit_proven``, else "none found that fits the budget"."""
    rows = [("tuned (best)", best)] + [(k, v) for k, v in baselines.items()]
    ref = best.step_time_ms if best is not None else None
    lines = [f"{'config':<22}{'step ms':>12}{'vs tuned':>10}{'peak MiB':>11}{'headroom MiB':>14}{'':>11}  fits"]
    for name, r in rows:
        if r is None:
            why = ("(not runnable/invalid)" if name != "tuned (best)" else
                   "(no layout fits the budget)" if no_fit_proven else "(none found that fits the budget)")
            lines.append(f"{name:<22}{'-':>12}{'-':>10}{'-':>11}{'-':>14}{'':>11}  {why}")
            continue
        rel = "-" if ref is None else f"{(r.step_time_ms / ref - 1):+.1%}"
        budget = budget_of(r, margin_mib)
        room, pct = ("-", "") if budget is None else (f"{budget - r.peak_mib:.0f}",
                                                      f"({100 * (budget - r.peak_mib) / budget:.1f}%)")
        lines.append(f"{name:<22}{r.step_time_ms:>12.1f}{rel:>10}{r.peak_mib:>11.0f}{room:>14} {pct:>10}  "
                     f"{fits_word(r.fits)}")
    return "\n".join(lines)
