"""Plain-text rendering of cost reports and search results (what the CLI prints)."""

from __future__ import annotations

from typing import Any

from autotune.cost.report import CostReport


def _fmt_list(xs: list[int]) -> str:
    return "/".join(str(x) for x in xs)


def stage_table(report: CostReport) -> str:
    """Per-stage table: layers and recompute counts per chunk, time per step, peak MiB, headroom."""
    hdr = ["stage", "layers", "full", "select", "comm", "fwd ms", "bwd ms", "recomp ms",
           "static MiB", "act MiB", "peak MiB", "headroom MiB"]
    rows = []
    for s in report.stages:
        rows.append([str(s.stage), _fmt_list(s.layers), _fmt_list(s.recompute), _fmt_list(s.select_recompute),
                     _fmt_list(s.select_comm_recompute), f"{s.fwd_ms:.0f}", f"{s.bwd_ms:.0f}",
                     f"{s.recompute_ms:.0f}", f"{s.static_mib:.0f}", f"{s.act_peak_mib:.0f}",
                     f"{s.peak_mib:.0f}", "-" if s.headroom_mib is None else f"{s.headroom_mib:.0f}"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(hdr), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def summary_line(report: CostReport) -> str:
    """One line: step time, bubble, worst peak vs budget, fits."""
    budget = "no budget" if report.hbm_budget_mib is None else f"budget {report.hbm_budget_mib:.0f} MiB"
    fits = {True: "fits", False: "DOES NOT FIT", None: "fit unknown"}[report.fits]
    return (f"step time {report.step_time_ms:.1f} ms | idle (bubble) {report.bubble_fraction:.1%} of device time | "
            f"worst-stage peak {report.peak_mib:.0f} MiB ({budget}) | {fits} | "
            f"pp_interleave_num {report.layout.vpp}, {report.schedule}, micro_batch_num {report.micro_batch_num}")


def bubble_line(report: CostReport) -> str:
    """SAPP-style bubble breakdown: real = ideal + imbalance + recompute + comm (fractions of model
    compute, :mod:`autotune.cost.bubble`); empty when the report has none."""
    b = getattr(report, "bubble", None) or {}
    if not b:
        return ""
    return (f"bubble (of model compute): real {b['real']:.4f} = ideal {b['ideal']:.4f} + imbalance "
            f"{b['imbalance']:.4f} + recompute {b['recompute']:.4f} + comm {b['comm']:.4f}")


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


def render_report(report: CostReport, title: str = "") -> str:
    """Title, summary line, bubble breakdown, stage table and the per-stage memory components."""
    parts = [title] if title else []
    parts += [summary_line(report)]
    extra = bubble_line(report)
    if extra:
        parts.append(extra)
    parts.append(stage_table(report))
    mem = memory_table(report)
    if mem:
        parts += ["", "peak memory by component (MiB):", mem]
    for w in getattr(report, "warnings", None) or []:
        parts.append(f"warning {w.code} ({w.field}): {w.message}")
    return "\n".join(parts)


def comparison_table(best: CostReport | None, baselines: dict[str, Any]) -> str:
    """Tuned config vs the baselines: step time, change, worst peak, fits."""
    rows = [("tuned (best)", best)] + [(k, v) for k, v in baselines.items()]
    ref = best.step_time_ms if best is not None else None
    lines = [f"{'config':<22}{'step ms':>12}{'vs tuned':>10}{'peak MiB':>11}  fits"]
    for name, r in rows:
        if r is None:
            lines.append(f"{name:<22}{'-':>12}{'-':>10}{'-':>11}  (not runnable/invalid)")
            continue
        rel = "-" if ref is None else f"{(r.step_time_ms / ref - 1):+.1%}"
        lines.append(f"{name:<22}{r.step_time_ms:>12.1f}{rel:>10}{r.peak_mib:>11.0f}  {r.fits}")
    return "\n".join(lines)
