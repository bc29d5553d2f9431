"""Jupyter views of cost reports and search results: HTML tables (``_repr_html_``) and figures.

The result classes delegate to these functions (attached as methods by :mod:`autotune.api` /
:mod:`autotune.cost.report`); they also work as plain functions::

    from autotune.emit.notebook import plot_timeline, plot_memory
    fig = plot_timeline(report, profile=profile)     # matplotlib Figure; Jupyter shows it inline

matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import base64
from typing import Any

from markupsafe import escape

from autotune.cost.report import CostReport
from autotune.emit.html_report import comparison_rows, html_table, search_bound_line, stage_rows
from autotune.emit.render import summary_line
from autotune.errors import ConfigError


def _main_report(obj: Any) -> tuple[CostReport, Any]:
    """(the CostReport to draw, the profile that goes with it) of a CostReport or SearchResult."""
    if isinstance(obj, CostReport):
        return obj, None
    rep = getattr(obj, "best", None) or getattr(obj, "closest", None)
    if rep is None:
        raise ConfigError("this result has no best or closest config to draw", field="result",
                          value=type(obj).__name__, rule="report_input")
    return rep, getattr(obj, "profile", None)


def plot_timeline(obj: Any, *, profile: Any = None, **kwargs: Any) -> Any:
    """Pipeline timeline (matplotlib Figure) of a CostReport, or of a SearchResult's best config.

    ``profile`` (ModelProfile) splits each backward into recompute replay and gradient exactly per
    chunk; a SearchResult supplies its own. Other keywords go to :func:`plots.timeline_figure`.
    """
    from autotune.emit.plots import timeline_figure

    rep, prof = _main_report(obj)
    return timeline_figure(rep, profile=profile if profile is not None else prof, **kwargs)


def plot_memory(obj: Any, *, profile: Any = None, **kwargs: Any) -> Any:
    """Live memory over time per stage (matplotlib Figure) with the HBM budget and peaks.

    Needs per-chunk activation sizes: ``report.costs`` when present, else ``profile`` (a
    SearchResult supplies its own).

    Raises:
        ConfigError: no per-chunk costs and no profile.
    """
    from autotune.emit.plots import memory_figure

    rep, prof = _main_report(obj)
    return memory_figure(rep, profile=profile if profile is not None else prof, **kwargs)


def _img(fig: Any, max_width: str = "100%") -> str:
    from autotune.emit.plots import figure_png_bytes

    data = base64.b64encode(figure_png_bytes(fig)).decode("ascii")
    return f'<div style="overflow-x:auto"><img style="max-width:{max_width}" src="data:image/png;base64,{data}"></div>'


def cost_report_html(report: CostReport, *, figures: bool = True, profile: Any = None) -> str:
    """HTML for ``CostReport._repr_html_``: summary line, per-stage table and (``figures``) the
    timeline as an inline PNG."""
    parts = [f"<p><b>{escape(summary_line(report))}</b></p>", html_table(stage_rows(report))]
    if figures:
        parts.append(_img(plot_timeline(report, profile=profile, labels=True), max_width="none"))
    return "<div>" + "".join(parts) + "</div>"


def search_result_html(result: Any, *, figures: bool = True) -> str:
    """HTML for ``SearchResult._repr_html_``: summary, comparison with the baselines, the tuned
    keys to paste, the per-stage table and (``figures``) the tuned timeline."""
    rep, _ = _main_report(result)
    best = getattr(result, "best", None)
    name = "tuned" if best is not None else "closest (nothing fits)"
    names = {"user": "your config", "even_full_recompute": "even split + full recompute",
             "even_no_recompute": "even split, no recompute"}
    others = {names.get(k, k): v for k, v in getattr(result, "baselines", {}).items()}
    head = f"{name}: {summary_line(rep)}"
    trials = getattr(result, "trials", None)
    if trials is not None:
        head += f" | {trials} trials in {getattr(result, 'seconds', 0.0):.1f} s"
    parts = [f"<p><b>{escape(head)}</b></p>"]
    bound = search_bound_line(result)
    if bound:
        parts.append(f"<p>{escape(bound)}</p>")
    parts.append(html_table(comparison_rows(rep, others, name)))
    try:
        from autotune.emit.yaml_block import dump_yaml

        parts.append(f"<pre>{escape(dump_yaml(result.tuned_block()).rstrip())}</pre>")
    except Exception:  # noqa: BLE001 - the YAML is a convenience here
        pass
    parts.append(html_table(stage_rows(rep)))
    if figures:
        parts.append(_img(plot_timeline(result), max_width="none"))
    return "<div>" + "".join(parts) + "</div>"
