"""Dry-run peak memories per stage -> fitted memory profile (least squares with fit quality).

A MindSpore dry run (``MS_SIMULATION_LEVEL=1``) prints, in every stage's log::

    Used peak memory usage (without fragments): 48874M
    Actual peak memory usage (with fragments): 52132M

The fit of a profile's memory fields to these peaks (the cost model's memory law) is
:mod:`autotune.cost.dryrun_fit`; this module only reads dry runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from autotune.config.layout import Layout, layout_from_config, layout_from_values
from autotune.config.training import read_yaml
from autotune.errors import ConfigError, require_file

PEAK_PATTERNS = {
    "actual": re.compile(r"Actual peak memory usage \(with fragments\):\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?",
                         re.IGNORECASE),
    "used": re.compile(r"Used peak memory usage \(without fragments\):\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?",
                       re.IGNORECASE),
}
_UNIT_MIB = {"": 1.0 / (1024 * 1024), "K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


# --------------------------------------------------------------------------------------------
# dry-run inputs
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DryRun:
    """One dry run: the layout it ran and its peak memory per stage.

    Attributes:
        layout: canonical [V][P] layout (:class:`~autotune.config.layout.Layout`).
        peak_mib_p: float [P], peak memory per stage (MiB, as MindSpore prints "M").
        micro_batch_num: micro-batches per step of the dry run (m).
        schedule: registered schedule name (MindFormers ``pipeline_scheduler``), default ``1f1b``.
        label: name used in reports (file or probe name).
    """

    layout: Layout
    peak_mib_p: np.ndarray
    micro_batch_num: int
    schedule: str = "1f1b"
    label: str = "dryrun"

    def __post_init__(self) -> None:
        peaks = np.asarray(self.peak_mib_p, dtype=np.float64).reshape(-1)
        object.__setattr__(self, "peak_mib_p", peaks)
        if peaks.size != self.layout.pp:
            raise ConfigError(f"dry run {self.label!r} has {peaks.size} stage peaks but the layout has "
                              f"pipeline_stage = {self.layout.pp}", field="peak_mib_per_stage",
                              value=peaks.size, rule="dryrun_stages")
        if not np.all(np.isfinite(peaks)) or (peaks <= 0).any():
            raise ConfigError(f"dry run {self.label!r}: peaks must be positive MiB, got {peaks.tolist()}",
                              field="peak_mib_per_stage", value=peaks.tolist(), rule="dryrun_peak")


def parse_peak_log(path: str | Path, *, which: str = "actual") -> float:
    """Peak memory (MiB) printed in one stage's MindSpore log; the largest when printed repeatedly.

    Args:
        path: a text log.
        which: ``"actual"`` ("Actual peak memory usage (with fragments)") or ``"used"``
            ("Used peak memory usage (without fragments)").

    Raises:
        ConfigError: the file is missing, or holds no such line (rule ``dryrun_log``).
    """
    if which not in PEAK_PATTERNS:
        raise ConfigError(f"expected 'actual' or 'used', got {which!r}", field="--peak", value=which,
                          rule="dryrun_peak_kind")
    p = require_file(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    vals = [float(m.group(1)) * _UNIT_MIB[m.group(2).upper()] for m in PEAK_PATTERNS[which].finditer(text)]
    if not vals:
        other = "used" if which == "actual" else "actual"
        hint = (f"; it has the {other!r} line, pass --peak {other}"
                if PEAK_PATTERNS[other].search(text) else "")
        raise ConfigError(f"no '{PEAK_PATTERNS[which].pattern.split(':')[0].replace(chr(92), '')}' line "
                          f"found{hint}", field=str(p), value=None, rule="dryrun_log")
    return max(vals)


def _last_number(path: Path) -> int | None:
    nums = re.findall(r"\d+", path.name)
    return int(nums[-1]) if nums else None


def order_stage_logs(paths: Sequence[str | Path]) -> list[Path]:
    """Stage order of per-stage logs: by the last number in each file name when every name has
    one (``worker_0.log``, ``worker_8.log``, … -> stages 0, 1, …; rank ids work because ranks
    grow with the stage), else in the order given."""
    ps = [Path(p) for p in paths]
    nums = [_last_number(p) for p in ps]
    if all(n is not None for n in nums) and len(set(nums)) == len(nums):
        return [p for _, p in sorted(zip(nums, ps))]
    return ps


def peaks_from_logs(paths: Sequence[str | Path], *, which: str = "actual") -> np.ndarray:
    """float [P] peaks from one log per stage (ordered by :func:`order_stage_logs`)."""
    return np.asarray([parse_peak_log(p, which=which) for p in order_stage_logs(paths)])


def dryrun_from_config(cfg: Any, logs: Sequence[str | Path], *, which: str = "actual",
                       label: str | None = None) -> DryRun:
    """A :class:`DryRun` from a training config (the layout it ran) and its per-stage logs.

    Raises:
        ConfigError: log count differs from ``pipeline_stage``, unparsable logs, or an invalid layout.
    """
    if len(logs) != cfg.pipeline_stage:
        raise ConfigError(f"got {len(logs)} logs, expected one per pipeline stage "
                          f"(pipeline_stage = {cfg.pipeline_stage})", field="--from-dryrun",
                          value=len(logs), rule="dryrun_stages")
    return DryRun(layout=layout_from_config(cfg), peak_mib_p=peaks_from_logs(logs, which=which),
                  micro_batch_num=cfg.micro_batch_num, schedule=cfg.pipeline_scheduler,
                  label=label or str(cfg.source))


def _run_from_mapping(d: dict[str, Any], num_layers: int, pp: int, base: Path, which: str,
                      label: str) -> DryRun:
    vpp = int(d.get("pp_interleave_num", 1) or 1)
    layout = layout_from_values(num_layers, pp, vpp, offset=d.get("offset", 0),
                                recompute=d.get("recompute", False),
                                select_recompute=d.get("select_recompute", False),
                                select_comm_recompute=d.get("select_comm_recompute", False))
    peaks = d.get("peak_mib_per_stage")
    if peaks is None:
        logs = d.get("logs") or []
        if not logs:
            raise ConfigError(f"run {label!r} has neither peak_mib_per_stage nor logs (fill in the "
                              f"dry-run results)", field=f"runs.{label}", value=None, rule="dryrun_missing")
        if len(logs) != pp:
            raise ConfigError(f"run {label!r} lists {len(logs)} logs, expected {pp}",
                              field=f"runs.{label}.logs", value=len(logs), rule="dryrun_stages")
        peaks = peaks_from_logs([base / p for p in logs], which=which)
    m = d.get("micro_batch_num")
    if not isinstance(m, int) or isinstance(m, bool) or m < 1:
        raise ConfigError(f"run {label!r} needs micro_batch_num (the dry run's, an integer >= 1)",
                          field=f"runs.{label}.micro_batch_num", value=m, rule="dryrun_missing")
    return DryRun(layout=layout, peak_mib_p=np.asarray(peaks, dtype=float), micro_batch_num=m,
                  schedule=str(d.get("schedule", "1f1b")), label=label)


def load_dryrun_file(path: str | Path, *, which: str = "actual") -> tuple[int, list[DryRun]]:
    """Read a dry-run results file (YAML/JSON): ``(num_layers, runs)``.

    Two shapes are accepted:

    - the manifest ``autotune probe`` writes (``num_layers``, ``pipeline_stage`` and ``runs:``, each
      with ``offset``/``recompute``/``select_recompute``/``select_comm_recompute``,
      ``pp_interleave_num``, ``micro_batch_num``, ``schedule`` and either ``peak_mib_per_stage``
      or ``logs`` (paths relative to the file));
    - a published case (``model.num_layers``, ``parallel.pipeline_stage``,
      ``parallel.micro_batch_num_profiled``, ``layout: {...}``, ``peak_mib_per_stage``), e.g.
      ``shared/cases/dryrun_pipeline_balance_readme.json``.

    Raises:
        ConfigError: unreadable file, missing keys, invalid layouts or peaks.
    """
    p = Path(path)
    data = read_yaml(p)
    if "runs" in data:
        try:
            n, pp = int(data["num_layers"]), int(data["pipeline_stage"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError("a runs file needs integer num_layers and pipeline_stage",
                              field=str(p), value=None, rule="dryrun_missing") from None
        runs = [_run_from_mapping(r, n, pp, p.parent, which, str(r.get("label", f"run{i}")))
                for i, r in enumerate(data["runs"])]
        return n, runs
    try:
        n = int(data["model"]["num_layers"])
        par = data["parallel"]
        pp = int(par["pipeline_stage"])
        m = int(par.get("micro_batch_num_profiled", par.get("micro_batch_num")))
        d = dict(data["layout"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError("expected a runs file or a case with model.num_layers, parallel."
                          "{pipeline_stage, micro_batch_num_profiled}, layout and peak_mib_per_stage",
                          field=str(p), value=None, rule="dryrun_missing") from None
    d.update(pp_interleave_num=par.get("pp_interleave_num", 1), micro_batch_num=m,
             peak_mib_per_stage=data.get("peak_mib_per_stage"))
    return n, [_run_from_mapping(d, n, pp, p.parent, which, str(data.get("id", p.stem)))]


def dryrun_warnings(runs: Sequence[DryRun]) -> list[str]:
    """Plausibility notes on dry-run inputs (printed by the CLI; the fit still runs).

    - ``micro_batch_num < pipeline_stage`` under 1F1B: MindSpore does not run that
      (cost-model reference §3.1), and the in-flight counts ``min(P - i, m)`` then flatten over the
      first stages; if the dry run really held ``P - i`` micro-batches, refit with m >= P.
    """
    out = []
    for r in runs:
        if r.schedule == "1f1b" and r.micro_batch_num < r.layout.pp:
            out.append(f"dry run {r.label!r}: micro_batch_num {r.micro_batch_num} < pipeline_stage "
                       f"{r.layout.pp}, which MindSpore does not run; in-flight counts are taken as "
                       f"min(P - i, {r.micro_batch_num}). If the dry run held P - i micro-batches, pass "
                       f"--micro-batch-num {r.layout.pp}")
    return out
