"""Jupyter views of cost reports and search results: HTML tables (``_repr_html_``) and figures.

Importing this module registers the views of :class:`~autotune.cost.report.CostReport`
(``_repr_html_``, ``plot_timeline``, ``plot_memory``: :func:`autotune.cost.report.register_view`;
the cost model never imports emit); :class:`autotune.api.SearchResult` calls them directly. They
also work as plain functions::

    from autotune.emit.notebook import plot_timeline, plot_memory
    fig = plot_timeline(report, profile=profile)     # matplotlib Figure; Jupyter shows it inline

The figures are :class:`autotune.emit.figure.ReportFigure` objects (matplotlib Figures with a
``_repr_png_``), so Jupyter shows them as pictures without ``%matplotlib inline``. The HTML views
inline one compact timeline (at most :data:`REPR_WIDTH_IN` in wide at :data:`REPR_DPI` dpi, a
64-colour PNG: tens of kB, not the full-size picture of megabytes); ``plot_timeline`` draws the full
one. matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from autotune.cost.report import CostReport, register_view
from autotune.emit.html_report import comparison_rows, html_table, stage_rows
from autotune.emit.plots import memory_figure, timeline_figure
from autotune.emit.render import bubble_line, summary_line
from autotune.emit.search_result import bound_line, bounds_by_vpp_line
from autotune.emit.yaml_block import dump_yaml
from autotune.errors import ConfigError
from autotune.extras import installed, require

#: Width (in) and resolution (dpi) of the timeline inlined in the HTML views.
REPR_WIDTH_IN = 14.0
REPR_DPI = 80


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
    require(("matplotlib",), "report", "plot_timeline()")
    rep, prof = _main_report(obj)
    return timeline_figure(rep, profile=profile if profile is not None else prof, **kwargs)


def plot_memory(obj: Any, *, profile: Any = None, **kwargs: Any) -> Any:
    """Live memory over time per stage (matplotlib Figure) with the HBM budget and peaks.

    Needs per-chunk activation sizes: ``report.costs`` when present, else ``profile`` (a
    SearchResult supplies its own).

    Raises:
        ConfigError: no per-chunk costs and no profile.
    """
    require(("matplotlib",), "report", "plot_memory()")
    rep, prof = _main_report(obj)
    kwargs.setdefault("margin_mib", _margin(obj))
    return memory_figure(rep, profile=profile if profile is not None else prof, **kwargs)


def _timeline_img(obj: Any, profile: Any = None) -> str:
    """The compact timeline of ``obj`` as an inline ``<img>`` (see the module docstring); without
    matplotlib a line that names the extra instead."""
    if not installed("matplotlib"):
        return ("<p style=\"color:#666\">the timeline needs matplotlib: pip install "
                "'autotune[report]'</p>")
    # emit.figure imports matplotlib (heavy, the optional report extra): only when a picture is drawn
    from autotune.emit.figure import compact_png  # noqa: PLC0415

    fig = plot_timeline(obj, profile=profile, labels=True, max_width_in=REPR_WIDTH_IN)
    data = base64.b64encode(compact_png(fig, dpi=REPR_DPI, colors=64)).decode("ascii")
    return ('<div style="overflow-x:auto"><img style="max-width:100%" src="data:image/png;base64,'
            f'{data}"></div><p style="color:#666;font-size:85%">compact view; <code>plot_timeline(…)</code> '
            'draws the full-size picture</p>')


def _margin(obj: Any) -> float:
    return float(getattr(obj, "hbm_margin_mib", 0.0) or 0.0)


def cost_report_html(report: CostReport, *, figures: bool = True, profile: Any = None) -> str:
    """HTML for ``CostReport._repr_html_``: summary line, device-time breakdown, per-stage table and
    (``figures``) the compact timeline as an inline PNG."""
    parts = [f"<p><b>{escape(summary_line(report))}</b></p>"]
    line = bubble_line(report)
    if line:
        parts.append(f"<p>{escape(line)}</p>")
    parts.append(html_table(stage_rows(report)))
    if figures:
        parts.append(_timeline_img(report, profile=profile))
    return "<div>" + "".join(parts) + "</div>"


def search_result_html(result: Any, *, figures: bool = True) -> str:
    """HTML for ``SearchResult._repr_html_``: summary, comparison with the baselines, the tuned
    keys to paste, the per-stage table and (``figures``) the tuned timeline."""
    rep, _ = _main_report(result)
    best = getattr(result, "best", None)
    name = ("tuned" if best is not None else "closest (nothing fits)" if getattr(result, "no_fit_proven", False)
            else "closest (none found that fits)")
    names = {"user": "your config", "even_full_recompute": "even split + full recompute",
             "even_no_recompute": "even split, no recompute"}
    others = {names.get(k, k): v for k, v in getattr(result, "baselines", {}).items()}
    margin = _margin(result)
    head = f"{name}: {summary_line(rep, margin)}"
    trials = getattr(result, "trials", None)
    if trials is not None:
        head += f" | {trials} trials in {getattr(result, 'seconds', 0.0):.1f} s"
    parts = [f"<p><b>{escape(head)}</b></p>"]
    bound = bound_line(result, report=True)
    if bound:
        parts.append(f"<p>{escape(bound)}</p>")
    by_vpp = bounds_by_vpp_line(result)
    if by_vpp:
        parts.append(f"<p>{escape(by_vpp)}</p>")
    if callable(getattr(result, "stop_text", None)):  # why the search ended (CUT SHORT by a time limit)
        parts.append(f"<p>{escape(result.stop_text())}</p>")
    parts.append(html_table(comparison_rows(rep, others, name, margin)))
    try:
        parts.append(f"<pre>{escape(dump_yaml(result.tuned_block()).rstrip())}</pre>")
    except Exception:  # noqa: BLE001 - the YAML is a convenience here
        pass
    parts.append(html_table(stage_rows(rep, margin)))
    if figures:
        parts.append(_timeline_img(result))
    return "<div>" + "".join(parts) + "</div>"


register_view("html", cost_report_html)
register_view("timeline", plot_timeline)
register_view("memory", plot_memory)
