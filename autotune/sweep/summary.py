"""Per-scenario records, the sweep summary (``summary.csv``, ``summary.md``) and the night-to-night diff.

The summary is built only from what the study store holds, so every host of a multi-host sweep
writes the same files. It carries no timestamps or wall times (those go to each scenario's
``result.json``), rows are sorted by scenario name, and numbers use fixed precision, so
``diff summary.md`` between two nights shows only what changed.

Statuses: ``done`` (the search ended by its work budget or the gap target), ``timed_out`` (the
scenario's own ``timeout`` cut it; ``certified_gap_pct`` is the gap at that moment), ``infeasible``
(nothing fits the HBM budget), ``failed`` (the search raised, or its workers died on it
:data:`autotune.sweep.worker.MAX_CLAIMS` times) and ``invalid`` (bad input found while running).
``stopped_by`` says why each search ended (``gap``, ``neighbourhood``, ``work``, ``trials``, ``timeout``, …:
:attr:`autotune.api.SearchResult.stopped_by`); ``trials`` counts
finished trials of the study.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from autotune.emit.render import comparison_table, render_report
from autotune.emit.search_result import bound_line, bounds_by_vpp_line
from autotune.errors import ConfigError, require_file

COLUMNS = ["scenario", "status", "fits", "step_ms", "bubble_pct", "peak_mib", "hbm_mib", "headroom_mib",
           "user_step_ms", "gain_vs_user_pct", "lower_bound_ms", "certified_gap_pct", "lower_bound_by_vpp",
           "stopped_by", "pipeline_stage", "micro_batch_num", "pp_interleave_num", "offset", "recompute",
           "select_recompute", "select_comm_recompute", "trials", "study"]
BASELINE_COLUMNS = ["prev_step_ms", "step_change_pct", "prev_fits", "settings_changed"]
SETTINGS = ("pp_interleave_num", "offset", "recompute", "select_recompute", "select_comm_recompute")


def _num(x: Any, nd: int = 1) -> str:
    if x is None:
        return ""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return ""
    if math.isnan(x) or math.isinf(x):
        return ""
    return f"{x:.{nd}f}"


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True, default=str)


def by_vpp_cell(by: dict[int, float | None] | None) -> str:
    """The ``lower_bound_by_vpp`` cell: the search's bound per pp_interleave_num
    (:attr:`autotune.api.SearchResult.lower_bound_by_vpp`, ms) as compact JSON with keys in V order
    and one decimal, ``null`` where nothing fits, e.g. ``{"1":9678.0,"2":7157.3}``; empty when the
    search has no such breakdown (one V, the space enumerated, nothing fits)."""
    if not by:
        return ""
    cells = []
    for V in sorted(by):
        b = by[V]
        cells.append(f'"{int(V)}":' + ("null" if b is None or not math.isfinite(b) else f"{float(b):.1f}"))
    return "{" + ",".join(cells) + "}"


def result_record(sc: Any, result: Any, *, status: str, error: str | None, seconds: float,
                  worker: str) -> dict[str, Any]:
    """What a finished scenario stores in its study: the summary row plus YAML/report texts."""
    row: dict[str, Any] = {c: "" for c in COLUMNS}
    cfg = sc.config
    row.update(scenario=sc.name, status=status, study=sc.study_name, pipeline_stage=cfg.pipeline_stage,
               micro_batch_num=cfg.micro_batch_num, hbm_mib=_num(cfg.hbm_mib, 0))
    record: dict[str, Any] = {"row": row, "error": error, "seconds": round(seconds, 3), "worker": worker,
                              "yaml": None, "report": None, "result": None}
    if result is None:
        return record
    best = result.best
    rep = best or result.closest
    row["fits"] = "yes" if best is not None else "no"
    row["trials"] = result.trials  # finished trials of the study (never enqueued-only ones)
    row["stopped_by"] = getattr(result, "stopped_by", "")
    if rep is not None:
        row.update(step_ms=_num(rep.step_time_ms), bubble_pct=_num(100 * rep.bubble_fraction),
                   peak_mib=_num(rep.peak_mib, 0),
                   headroom_mib=_num(None if cfg.hbm_mib is None else cfg.hbm_mib - rep.peak_mib, 0))
        values = result.tuned_values()
        for k in SETTINGS:
            row[k] = values[k] if k == "pp_interleave_num" else _compact(values[k])
    user = result.baselines.get("user")
    if user is not None:
        row["user_step_ms"] = _num(user.step_time_ms)
        if best is not None and user.step_time_ms > 0:
            row["gain_vs_user_pct"] = _num(100 * (user.step_time_ms - best.step_time_ms) / user.step_time_ms)
    row["lower_bound_ms"] = _num(getattr(result, "lower_bound_ms", None))
    gap = getattr(result, "certified_gap", None)
    row["certified_gap_pct"] = _num(100 * gap if gap is not None else None, 2)
    row["lower_bound_by_vpp"] = by_vpp_cell(getattr(result, "lower_bound_by_vpp", None))
    record["yaml"] = result.to_yaml(full=True)
    if rep is not None:
        title = (f"{sc.name}: best of {result.trials} trials" if best is not None
                 else f"{sc.name}: {result.no_fit_headline()} the HBM budget; closest found")
        m = float(getattr(result, "hbm_margin_mib", 0.0) or 0.0)
        bounds = "".join(f"{ln}\n" for ln in (bound_line(result), bounds_by_vpp_line(result)) if ln)
        record["report"] = (render_report(rep, title=title, margin_mib=m) + "\n\n" + bounds + result.stop_text()
                            + "\n\n"
                            + comparison_table(best, result.baselines, margin_mib=m,
                                             no_fit_proven=result.no_fit_proven) + "\n")
    record["result"] = json.loads(json.dumps(result.to_dict(), default=str))
    return record


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def read_baseline(path: str | Path) -> dict[str, dict[str, str]]:
    """Rows of a previous night's ``summary.csv`` keyed by scenario.

    Raises:
        ConfigError: missing file, or not a summary (no ``scenario``/``step_ms`` columns).
    """
    p = require_file(path, field="--baseline")
    try:
        rows = list(csv.DictReader(io.StringIO(p.read_text(encoding="utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"not a summary.csv: {exc}", field="--baseline", value=str(p), rule="baseline") from None
    if rows and not {"scenario", "step_ms"} <= set(rows[0]):
        raise ConfigError("not a summary.csv (needs the scenario and step_ms columns)", field="--baseline",
                          value=str(p), rule="baseline")
    return {r["scenario"]: r for r in rows}


def with_baseline(rows: list[dict[str, Any]], prev: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Rows with ``prev_step_ms``, ``step_change_pct`` (+ slower, - faster), ``prev_fits`` and
    ``settings_changed`` (yes/no/new) filled from the previous summary."""
    out = []
    for r in rows:
        r = dict(r)
        p = prev.get(r["scenario"])
        if p is None:
            r.update(prev_step_ms="", step_change_pct="", prev_fits="", settings_changed="new")
        else:
            r["prev_step_ms"] = p.get("step_ms", "")
            r["prev_fits"] = p.get("fits", "")
            try:
                a, b = float(p["step_ms"]), float(r["step_ms"])
                r["step_change_pct"] = f"{100 * (b - a) / a:+.1f}" if a else ""
            except (KeyError, TypeError, ValueError):
                r["step_change_pct"] = ""
            changed = any(str(p.get(k, "")) != str(r.get(k, "")) for k in SETTINGS)
            r["settings_changed"] = "yes" if changed else "no"
        out.append(r)
    return out


def render_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def render_md(name: str, rows: list[dict[str, Any]], records: dict[str, dict[str, Any]],
              prev: dict[str, dict[str, str]] | None) -> str:
    cols = ["scenario", "status", "fits", "step_ms", "bubble_pct", "peak_mib", "hbm_mib", "headroom_mib",
            "gain_vs_user_pct", "certified_gap_pct", "stopped_by", "pp_interleave_num", "offset", "recompute",
            "trials"]
    if prev is not None:
        cols += ["prev_step_ms", "step_change_pct", "settings_changed"]
    esc = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    lines = [f"# autotune sweep: {name}", "",
             f"{len(rows)} scenarios; {sum(r['fits'] == 'yes' for r in rows)} fit the HBM budget.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(esc(r.get(c, "")) for c in cols) + " |" for r in rows]
    bad = [r for r in rows if r["status"] == "infeasible"]
    if bad:
        lines += ["", "## No feasible configuration", ""]
        lines += [f"- {r['scenario']}: closest config peaks at {r['peak_mib']} MiB, budget {r['hbm_mib']} MiB"
                  for r in bad]
    cut = [r for r in rows if r["status"] == "timed_out"]
    if cut:
        lines += ["", "## Cut short by a time limit", "",
                  "The scenario's `timeout` ended these searches; their answers depend on the machine's "
                  "speed and load.", ""]
        lines += [f"- {r['scenario']}: certified gap then {r['certified_gap_pct'] or 'n/a'} % after "
                  f"{r['trials']} trials" for r in cut]
    err = [r for r in rows if r["status"] not in ("done", "infeasible", "timed_out")]
    if err:
        lines += ["", "## Errors", ""]
        lines += [f"- {r['scenario']}: {records[r['scenario']].get('error') or r['status']}" for r in err]
    if prev is not None:
        gone = sorted(set(prev) - {r["scenario"] for r in rows})
        if gone:
            lines += ["", "## Scenarios in the baseline but not in this sweep", ""]
            lines += [f"- {g}" for g in gone]
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: str | Path, sweep_name: str, records: dict[str, dict[str, Any]], *,
                  baseline: dict[str, dict[str, str]] | None = None, report: bool = False) -> list[dict[str, Any]]:
    """Write ``<scenario>/best.yaml`` (+ ``report.txt`` with ``report``), ``<scenario>/result.json``,
    ``summary.csv`` and ``summary.md``; returns the summary rows."""
    out = Path(out_dir)
    rows = []
    for name in sorted(records):
        rec = records[name]
        d = out / name
        if rec.get("yaml"):
            _atomic_write(d / "best.yaml", rec["yaml"])
        if report and rec.get("report"):
            _atomic_write(d / "report.txt", rec["report"])
        _atomic_write(d / "result.json", json.dumps(
            {k: rec.get(k) for k in ("row", "error", "seconds", "worker", "result")}, indent=2) + "\n")
        rows.append(dict(rec["row"]))
    cols = list(COLUMNS)
    if baseline is not None:
        rows = with_baseline(rows, baseline)
        cols += BASELINE_COLUMNS
    _atomic_write(out / "summary.csv", render_csv(rows, cols))
    _atomic_write(out / "summary.md", render_md(sweep_name, rows, records, baseline))
    return rows
