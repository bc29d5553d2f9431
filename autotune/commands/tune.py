"""``autotune search`` and ``autotune evaluate``."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import click

from autotune.api import evaluate, load_config, search
from autotune.commands import _megatron
from autotune.commands._dry_text import dry_run_lines
from autotune.commands._json_errors import json_errors, json_printed
from autotune.commands._paths import check_out_dir, check_out_file, write_text
from autotune.config.margin import apply_margin
from autotune.emit.html_report import REPORT_FILES, REPORT_PATTERNS
from autotune.emit.render import comparison_table, headroom_text, render_report, report_json
from autotune.emit.search_result import (bound_line, bounds_by_vpp_line, check_writable, pattern_warnings,
                                         run_warnings, vpp_not_searched_line)
from autotune.emit.yaml_block import dump_yaml
from autotune.errors import ConfigError
from autotune.extras import STUDY_VIEW_MODULES, require, require_storage
from autotune.profile.analytic import check_overrides
from autotune.profile.devices import DEVICES
from autotune.profile.schema import load_profile
from autotune.tuner.describe import describe_space
from autotune.tuner.progress import Progress
from autotune.units import parse_memory_mib

FORMATS = click.Choice(["text", "json"])


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (Python's ``float`` reads both, and
    ``nan`` passes every range test): a usage error (exit 2) naming the option, the value and the
    range, like a value out of the range; a value that is no number says so (click's own text:
    "is not a valid float range")."""

    def convert(self, value, param, ctx):  # type: ignore[override]
        try:
            float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number (the range is {self._describe_range()})", param, ctx)
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number (the range is {self._describe_range()})", param, ctx)
        return rv


def _hbm(value: str | None) -> float | None:
    return None if value is None else parse_memory_mib(value, field="--hbm")


def _overrides(pairs: tuple[str, ...]) -> dict[str, float]:
    """``--set KEY=VALUE`` pairs as numbers, checked as the API's ``overrides`` are
    (:func:`~autotune.profile.analytic.check_overrides`: known key, finite, in range)."""
    out = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key.strip()] = float(val)
        except ValueError:
            raise ConfigError(f"expected KEY=NUMBER, got {p!r}", field="--set", value=p,
                              rule="assumption") from None
    return check_overrides(out)


#: Seconds kept from ``--timeout`` for writing the outputs after the search and the interpreter's
#: exit (measured: 0.3 s on a pp 64 × m 512 config, most of it freeing the compiled schedules).
OUTPUT_RESERVE_S = 0.5


def _since_process_start() -> float:
    """Wall seconds since this process started (Linux: ``/proc``), 0.0 where unknown: the
    interpreter start and the imports (0.7-0.8 s on this project's 2-core machine) count against
    ``--timeout``."""

    try:
        with open("/proc/self/stat") as f:
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _search_timeout(timeout: float | None) -> float | None:
    """The search's share of ``--timeout`` (s): the limit counts from the command's start, so the
    time already spent and :data:`OUTPUT_RESERVE_S` are taken off (at least 10 % of it is left).
    When that floor applies the limit cannot be kept, and a W_TIMEOUT_SPENT warning says so."""
    if timeout is None:
        return None
    spent = _since_process_start()
    left = timeout - spent - OUTPUT_RESERVE_S
    if left < 0.1 * timeout:
        _warn("W_TIMEOUT_SPENT", "--timeout",
              f"{timeout:g} s cannot be kept: {spent:.1f} s passed before the search started (interpreter, "
              f"imports, the config's first read) and {OUTPUT_RESERVE_S:g} s is kept for writing the output; "
              f"the search gets 10 % of the limit ({0.1 * timeout:.2g} s) and ends with what it found by then")
    return max(0.1 * timeout, left)


def _config_warnings(cfg) -> None:
    """Print on stderr, before any work, the warnings ``autotune check`` gives for the config's keys
    (``W_KEY_UNKNOWN``: a near miss of a key autotune reads, e.g. a memory key typo, so its default
    is used and the predicted peak may move by gigabytes) and for the run whatever the layout
    (:func:`~autotune.emit.search_result.run_warnings`, e.g. micro_batch_num not set)."""
    for w in list(cfg.config_warnings) + run_warnings(cfg):
        _warn(w.code, w.field, w.message)


def _warn(code: str, field: str, message: str) -> None:
    """One warning line on stderr, as ``autotune check`` prints it."""
    click.echo(f"warning {code}: {field}: {message}", err=True)


def _write(path: str, text: str, force: bool, option: str = "--out") -> None:
    check_out_file(path, force=force, option=option)
    write_text(path, text, option)


def _profile_warnings(profile: str | None) -> None:
    """Repeat on stderr what the import of a measured profile left out (its ``warnings``)."""
    if not profile:
        return

    for w in load_profile(profile).warnings:
        click.echo(f"warning: profile {profile}: {w}", err=True)


#: The analytic device presets, as the --device help lists them.
DEVICE_NAMES = ", ".join(DEVICES)
_config_arg = click.argument("config", type=click.Path())
_profile_opt = click.option("--profile", "profile", type=click.Path(), default=None,
                            help="Layer profile YAML/JSON (default: derived analytically from the config).")
_device_opt = click.option("--device", default="ascend-910b", show_default=True,
                           help=f"Device preset for the analytic profile ({DEVICE_NAMES}).")
_hbm_opt = click.option("--hbm", default=None, help="HBM budget per device, e.g. 60GB (default: "
                        "context.max_device_memory).")
_set_opt = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                        help="Override an analytic-profile assumption (repeatable).")
_margin_opt = click.option("--hbm-margin", "hbm_margin", default=None, metavar="FRACTION|SIZE",
                           help="HBM to keep free below the budget: a fraction (0.05, 5%) or a size "
                                "(2GB, 2048MiB). Configs must peak at most budget - margin. Default: 0 "
                                "(see the README's 'Safety margin').")

#: Below this headroom (fraction of the budget) and without a margin, the search adds a note.
TIGHT_HEADROOM = 0.02


def _with_margin(config: str, hbm: str | None, margin: str | None,
                 hf_config: str | None = None) -> tuple[object, float]:
    """(the config with hbm_mib = budget − margin, margin MiB); errors name --hbm-margin."""

    return apply_margin(load_config(config, hbm_mib=_hbm(hbm), hf_config=hf_config), margin,
                        field="--hbm-margin")

_hf_opt = click.option("--hf-config", "hf_config", default=None, type=click.Path(),
                       help="Hugging Face config.json with the model dims (default: "
                            "pretrained_model_dir/config.json, when the YAML names one).")


def _cfg(config: str, hf_config: str | None):
    """The config path, or the loaded config when --hf-config supplies the model dims."""
    if hf_config is None:
        return config

    return load_config(config, hf_config=hf_config)


@click.command("evaluate")
@_config_arg
@_profile_opt
@_device_opt
@_hbm_opt
@_margin_opt
@_set_opt
@_hf_opt
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
def evaluate_cmd(config: str, profile: str | None, device: str, hbm: str | None, hbm_margin: str | None,
                 sets: tuple[str, ...], hf_config: str | None, fmt: str) -> None:
    """Predict step time, bubble and per-stage peak memory of CONFIG as written (fits = peak at most
    the budget minus --hbm-margin)."""

    json_errors(fmt)
    _profile_warnings(profile)
    cfg, margin = _with_margin(config, hbm, hbm_margin, hf_config)
    report = evaluate(cfg, profile, device=device, overrides=_overrides(sets))
    if fmt == "json":  # the json lists what `autotune check` warns about under "warnings"
        click.echo(json.dumps(report_json(report, margin), indent=2))
    else:
        for w in report.warnings:
            _warn(w.code, w.field, w.message)
        click.echo(render_report(report, title=f"autotune evaluate {config}", margin_mib=margin))


@click.command("search")
@click.argument("config", type=click.Path(), required=False)
@_profile_opt
@click.option("--device", default=None,
              help=f"Device preset for the analytic profile ({DEVICE_NAMES}; default "
                   "ascend-910b, h100 for Megatron input).")
@_hbm_opt
@_margin_opt
@_set_opt
@_hf_opt
@click.option("--out", "out", default=None, help="Write the tuned config (your YAML with the tuned keys) here.")
@click.option("--force", is_flag=True, help="Overwrite --out, and the report files in --report, if they exist.")
@click.option("--space", default=None, type=click.Path(),
              help="Search-space YAML (default: search_spaces/default.yaml).")
@click.option("--trials", default=200, show_default=True, type=click.IntRange(1),
              help="Most finished trials in the study (seeds and the final local-search trial included); "
                   "resuming a --storage study runs only the trials it still lacks.")
@click.option("--timeout", default=None, type=FiniteFloatRange(0, min_open=True),
              help="Wall-clock limit (s), counted from the command's start: the bound phase gets half of "
                   "what reading the config leaves, the trials the rest, and time the trials leave raises "
                   "the bound. Default: none - the search is bounded by --trials and the "
                   "--gap stop, so --seed reproduces it exactly (a 300 s safety net still applies: the bound "
                   "phase gets its first half, the trials the rest; when a limit fires every output says "
                   "CUT SHORT / timed_out with the gap then).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--storage", default=None, help="Journal file path or database URL (resumes a study).")
@click.option("--study-name", default=None, help="Study name in --storage (default: autotune).")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option("--quiet", is_flag=True, help="No progress output (bar on a terminal, status lines on a log).")
@click.option("--progress-every", "progress_every", default=10.0, show_default=True,
              type=FiniteFloatRange(0, min_open=True), metavar="S",
              help="On a log (stderr not a terminal): seconds between status lines (one also starts each phase).")
@click.option("--gap", default=0.005, show_default=True, type=FiniteFloatRange(0),
              help="Stop once the certified gap (best - lower bound) / lower bound is at most this.")
@click.option("--objective", default="time", show_default=True,
              type=click.Choice(["time", "time,memory"]),
              help="time: the fastest config that fits. time,memory: also the Pareto front of step time "
                   "vs worst-stage peak MiB (pick a safety margin from it).")
@click.option("--dry-run", is_flag=True, help="Print the search space (size, free knobs, constraints) and exit.")
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False),
              help="Also write report.html, report.md and the pictures (timeline, memory, stages, study) here.")
@_megatron.options
def search_cmd(config: str | None, profile: str | None, device: str | None, hbm: str | None,
               hbm_margin: str | None, sets: tuple[str, ...], hf_config: str | None,
               out: str | None, force: bool, space: str | None,
               trials: int, timeout: float | None, seed: int, storage: str | None, study_name: str | None,
               fmt: str, quiet: bool, progress_every: float, gap: float, objective: str, dry_run: bool,
               report_dir: str | None,
               source_kind: str = "auto", megatron_args: str | None = None, in_place: bool = False,
               layout_flags: str | None = None) -> None:
    """Tune offset, pp_interleave_num and recompute of CONFIG; print the per-stage table, the lower
    bound and certified gap, and write the tuned YAML to --out. Megatron-LM arguments (a YAML/JSON
    of flags, or --megatron-args train.sh) are detected by content: see docs/megatron.md."""

    json_errors(fmt)
    # every output path and optional module is checked before the search: a clash must not throw a
    # finished search away
    check_out_file(out, force=force, option="--out")
    check_out_dir(report_dir, force=force, option="--report", names=REPORT_FILES, patterns=REPORT_PATTERNS)
    if report_dir:
        require(STUDY_VIEW_MODULES, "report", "search --report")
    require_storage(storage)
    if config is None and megatron_args is None:
        raise ConfigError("give CONFIG or --megatron-args SCRIPT", field="CONFIG", value=None, rule="usage")
    if megatron_args is not None or source_kind == "megatron" or (
            source_kind == "auto" and _megatron.is_megatron_input(config)):
        _megatron.run(megatron_args or config, device=device, hbm_mib=_hbm(hbm), overrides=_overrides(sets),
                      space=space, seed=seed, gap=gap, fmt=fmt, out=out, force=force, in_place=in_place,
                      layout_flags=layout_flags, quiet=quiet, hbm_margin=hbm_margin)
        return
    if in_place or layout_flags:
        raise ConfigError("--in-place and --layout-flags are for Megatron input (MindFormers: use autotune apply)",
                          field="--in-place" if in_place else "--layout-flags", value=True, rule="usage")
    device = device or "ascend-910b"
    # a bar on a terminal; on a log (stderr not a TTY) a line per phase and every --progress-every s

    prog = Progress(None if quiet or dry_run else ("bar" if sys.stderr.isatty() else "lines"),
                    every_s=progress_every)
    try:
        prog.phase("reading", config)
        cfg, margin = _with_margin(config, hbm, hbm_margin, hf_config)  # a bad margin stops here, before the work
        if out and Path(config).is_file():
            check_writable(config)   # a file --out cannot be written into stops here, not after the search
        _config_warnings(cfg)
        if dry_run:
            _dry_run(config, hf_config, profile, space, device, cfg.hbm_mib, sets, margin, fmt)
            return
        _profile_warnings(profile)
        result = search(_cfg(config, hf_config), profile, space=space, trials=trials,
                        timeout=_search_timeout(timeout), seed=seed, storage=storage, study_name=study_name,
                        device=device, hbm_mib=_hbm(hbm), overrides=_overrides(sets), progress=prog, gap=gap,
                        objective=objective, hbm_margin=hbm_margin)
        if timeout is not None and result.time_limit_s is not None:
            result.time_limit_s = timeout  # the user's limit, counted from the command's start
        prog.phase("writing", out or report_dir or "results")
        if out:
            write_text(out, result.to_yaml(full=True))
        files = result.write_report(report_dir) if report_dir else None
    finally:
        prog.close()
    for w in pattern_warnings(result):  # known once the user's layout is priced; the key warnings came first
        _warn(w["code"], w["field"], w["message"])
    if files is not None and fmt != "json":
        click.echo(f"wrote {len(files)} report files to {report_dir} (open report.html)", err=True)
    if result.timed_out and not quiet:  # also on stderr, where a log reader looks for trouble
        click.echo(f"warning: {result.stop_text()}", err=True)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
        json_printed()
    else:
        _print_search(result, config, out)
    if result.best is None:
        _raise_infeasible(result, hbm, hbm_margin)


def _dry_run(config: str, hf_config: str | None, profile: str | None, space: str | None, device: str,
             hbm_mib: float, sets: tuple[str, ...], margin: float, fmt: str) -> None:
    """``search --dry-run``: print the search space (size, free knobs, constraints): the mapping
    of :func:`describe_space` as JSON, or as plain lines (:func:`dry_run_lines`)."""

    info = describe_space(_cfg(config, hf_config), profile, space=space, device=device, hbm_mib=hbm_mib,
                          overrides=_overrides(sets))
    if margin > 0:
        info["hbm_margin_mib"] = margin
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo("\n".join(dry_run_lines(info)))


def _print_search(result: object, config: str, out: str | None) -> None:
    """The text output of ``search``: per-stage table, bound and gap, why it stopped, comparison,
    notes, Pareto front, the MindFormers keys."""

    m = result.hbm_margin_mib
    if result.best is None:
        r = result.closest
        what = "the HBM budget" if m == 0 else "the HBM budget with the safety margin"
        click.echo(render_report(r, title=f"{result.no_fit_headline()} {what}; closest found:", margin_mib=m))
        click.echo(f"\nclosest config exceeds memory by {r.excess_mib:.0f} MiB on its worst stage")
    else:
        click.echo(render_report(result.best, title=f"autotune search {config}: best of {result.trials} "
                                 f"trials in {result.seconds:.1f} s", margin_mib=m))
    click.echo("")
    line = bound_line(result)
    if line is not None:
        click.echo(f"{line} | {result.trials} trials | {result.seconds:.1f} s")
        by_vpp = bounds_by_vpp_line(result)
        if by_vpp:
            click.echo(by_vpp)
    dropped = vpp_not_searched_line(result)
    if dropped:
        click.echo(dropped)
    click.echo(result.stop_text())
    click.echo(comparison_table(result.best, result.baselines, margin_mib=m, no_fit_proven=result.no_fit_proven))
    best = result.best
    if best is not None and m == 0 and best.hbm_budget_mib and \
            best.hbm_budget_mib - best.peak_mib < TIGHT_HEADROOM * best.hbm_budget_mib:
        click.echo(f"\nnote: the worst stage leaves {headroom_text(best.peak_mib, best.hbm_budget_mib)}; "
                   f"peak memory is an estimate, so --hbm-margin 0.05 (or e.g. 2GB) keeps that much free")
    if result.user_config_error:
        e = result.user_config_error
        click.echo(f"your config was not evaluated: [{e['rule']}] {e['field']}: {e['message']}")
    if result.settings:
        click.echo("\nother settings chosen: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()))
    if result.pareto is not None:
        click.echo("\n" + pareto_table(result.pareto, exact=result.pareto_exact, margin_mib=m))
    click.echo("\nMindFormers keys to paste:" if best is not None else
               "\nMindFormers keys of the closest layout (it does NOT fit the budget; do not train with it):")
    click.echo(dump_yaml(result.tuned_block()).rstrip())
    if out:
        click.echo(f"\nwrote {out}")


def _raise_infeasible(result: object, hbm: str | None, hbm_margin: str | None) -> None:
    """The R_HBM_INFEASIBLE error (exit 2) of a search where nothing fits: the static-memory floor
    when it alone exceeds the limit (decided before the bound phase), else the closest config. The
    message says "no configuration fits" only when that is proven (``result.no_fit_proven``);
    otherwise "none found", with the lower bound that leaves room for one."""
    r, m = result.closest, result.hbm_margin_mib
    field = "--hbm-margin" if m > 0 else ("--hbm" if hbm is not None else "context.max_device_memory")
    value = hbm_margin if m > 0 else (hbm if hbm is not None else r.hbm_budget_mib)
    proven = result.no_fit_proven
    head = (f"{'no configuration leaves' if proven else 'the search found no configuration that leaves'} the "
            f"safety margin free: budget {r.hbm_budget_mib + m:.0f} MiB - margin {m:.0f} MiB = limit "
            f"{r.hbm_budget_mib:.0f} MiB" if m > 0
            else f"{'no configuration fits' if proven else 'the search found no configuration that fits'} "
                 f"the HBM budget of {r.hbm_budget_mib:.0f} MiB")
    if not proven:
        head += (f" (not proven that none exists: the bounds leave room for a fitting layout of at least "
                 f"{result.lower_bound_ms:.1f} ms)")
    elif result.stopped_by != "static_memory":
        head += (" (proven: every layout of the space was enumerated)" if result.exact else
                 " (proven: the lower bounds admit no fitting layout)")
    fix = ("lower --hbm-margin, raise the budget or add pipeline stages" if m > 0
           else "raise the budget or add pipeline stages")
    if result.stopped_by == "static_memory":
        why = (f"{result.static_floor_text()}, so every layout exceeds it by at least "
               f"{result.min_peak_mib - r.hbm_budget_mib:.0f} MiB (decided before the bound phase; the closest "
               f"found exceeds it by {r.excess_mib:.0f} MiB)")
    else:
        why = (f"the closest found peaks at {r.peak_mib:.0f} MiB (exceeds {'the limit ' if m > 0 else ''}by "
               f"{r.excess_mib:.0f} MiB on its worst stage)")
    raise ConfigError(f"{head}; {why}: {fix}", field=field, value=value, rule="R_HBM_INFEASIBLE")


def pareto_table(front: list[dict], *, exact: bool = False, margin_mib: float = 0.0) -> str:
    """The Pareto front (fastest first) as a text table: step ms, worst-stage peak MiB, headroom to the
    budget MiB, pp_interleave_num, offset, full / select / comm recompute counts, other settings.
    (``--format json`` carries each row's full config under ``pareto``.) ``margin_mib``: the safety
    margin the rows' ``margin_mib`` (room under budget − margin) leaves out."""
    head = (f"Pareto front, step time vs worst-stage peak ({len(front)} configs, "
            f"{'exact' if exact else 'best found'}): pick the fastest whose headroom you accept")
    rows = [("step ms", "peak MiB", "headroom MiB", "vpp", "offset", "recompute", "select", "comm", "other")]

    def table(v: object) -> str:  # a pattern dict shares one table; False = none
        if isinstance(v, dict):
            v = next(iter(v.values()), False)
        return json.dumps(v)

    for f in front:
        c = f["config"]
        other = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in f.get("settings", {}).items())
        room = f.get("headroom_mib", f["margin_mib"] + margin_mib)
        rows.append((f"{f['step_time_ms']:.1f}", f"{f['peak_mib']:.0f}", f"{room:.0f}",
                     str(c["pp_interleave_num"]), json.dumps(c["offset"]), json.dumps(c["recompute"]),
                     table(c.get("select_recompute")), table(c.get("select_comm_recompute")), other or "-"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head] + ["  ".join(x.ljust(w[i]) for i, x in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines)


COMMANDS = [search_cmd, evaluate_cmd]
