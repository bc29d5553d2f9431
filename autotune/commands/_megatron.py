"""``autotune search`` for Megatron-LM arguments (called by :mod:`autotune.commands.tune`).

Input detection (``--from auto``, the default): a ``.sh``/``.bash`` file, a file that is not a
YAML mapping but runs ``pretrain_gpt.py``, or a YAML/JSON mapping with Megatron argument names and
no MindFormers sections (:func:`autotune.megatron.args.looks_like_megatron`) is Megatron input;
anything else is a MindFormers YAML. ``--from megatron`` forces it; ``--megatron-args SCRIPT`` names
a launch script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from autotune.config.safe_yaml import load_yaml_text
from autotune.emit.render import comparison_table, render_report
from autotune.errors import ConfigError
from autotune.megatron.args import looks_like_megatron
from autotune.megatron.emit import removed
from autotune.megatron.rewrite import changes, rewrite
from autotune.megatron.run import build_run
from autotune.megatron.search import load_megatron_space, search_megatron


def is_megatron_input(path: str) -> bool:
    """Content detection of Megatron input (module docstring). Never raises for a readable file."""
    p = Path(path)
    if p.suffix in (".sh", ".bash"):
        return True
    if not p.is_file():
        return False
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        data = load_yaml_text(text, where=str(p))        # the bounded safe loader
    except ConfigError:
        return "pretrain_" in text        # not YAML (or over a limit): the config reader says why
    if not isinstance(data, dict):
        return "pretrain_" in text
    return looks_like_megatron(data)


def run(path: str, *, device: str | None, hbm_mib: float | None, overrides: dict[str, float],
        space: str | None, seed: int, gap: float, fmt: str, out: str | None, force: bool, in_place: bool,
        layout_flags: str | None, quiet: bool, hbm_margin: str | None = None) -> None:
    """Search a Megatron run and print / write the result (see README, Megatron mode); with
    ``hbm_margin`` every config must peak at most the budget minus it."""
    if out and in_place:
        raise ConfigError("give --out or --in-place, not both", field="--in-place", value=True, rule="usage")
    run_ = build_run(path)
    sp = load_megatron_space(space)
    if layout_flags:
        sp = sp.model_copy(update={"layout_flags": layout_flags})
    res = search_megatron(run_, space=sp, device=device or "h100", hbm_mib=hbm_mib, hbm_margin=hbm_margin,
                          overrides=overrides, seed=seed, gap=gap, progress=not quiet)
    wrote = None
    if out or in_place:
        text = rewrite(run_.args, res.flags)
        target = Path(path) if in_place else Path(out)
        if not in_place and target.exists() and not force:
            raise ConfigError(f"{out} exists; pass --force to overwrite it", field="--out", value=out,
                              rule="overwrite")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        wrote = str(target)
    if fmt == "json":
        data = res.to_dict()
        data["megatron"]["changed"] = changes(run_.args, res.flags)
        data["megatron"]["wrote"] = wrote
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        rep = res.best or res.closest
        m = res.hbm_margin_mib
        kept = f", margin {m:.0f} MiB" if m > 0 else ""
        title = (f"autotune search {path} (Megatron-LM, {res.device}, budget {res.hbm_mib:.0f} MiB{kept}): "
                 f"{res.choice.label()}, vpp {res.vpp}; {res.evaluated} configs in {res.seconds:.1f} s "
                 f"({res.cpu_seconds:.1f} CPU s)")
        if res.best is None:
            what = "the HBM budget" if m == 0 else "the HBM budget with the safety margin"
            title = f"NO CONFIGURATION FOUND THAT FITS {what}; closest found:"
        click.echo(render_report(rep, title=title, margin_mib=m))
        click.echo("")
        if res.lower_bound_ms is not None:
            gap_txt = "n/a" if res.certified_gap is None else f"{res.certified_gap:.2%}"
            click.echo(f"lower bound {res.lower_bound_ms:.1f} ms (provable, per-stage-freedom relaxation) | "
                       f"certified gap {gap_txt} | {res.seconds:.1f} s, {res.cpu_seconds:.1f} CPU s")
        click.echo(comparison_table(res.best, res.baselines, margin_mib=m))
        th = res.theoretical
        click.echo("\nMegatron's own estimate (report_theoretical_memory, first stage): "
                   f"weight+optimizer {th['best']['weight_and_optimizer_mb']:.0f} MB, activation "
                   f"{th['best']['activation_mb']:.0f} MB, total {th['best']['total_mb']:.0f} MB "
                   f"(your config: {th['user']['total_mb']:.0f} MB); autotune's worst stage: {rep.peak_mib:.0f} MiB")
        for note in res.notes:
            click.echo(f"note: {note}")
        click.echo("\nMegatron arguments to paste:")
        for line in res.flag_lines():
            click.echo(f"  {line}")
        gone = removed(res.flags, set(run_.args.values))
        if gone:
            click.echo("remove: " + " ".join(gone))
        if wrote:
            click.echo(f"\nwrote {wrote}")
    if res.best is None:
        r = res.closest
        if res.hbm_margin_mib > 0:
            m = res.hbm_margin_mib
            raise ConfigError(f"the search found no configuration that leaves the safety margin free: budget "
                              f"{res.hbm_mib:.0f} MiB - margin {m:.0f} MiB = limit {res.hbm_mib - m:.0f} MiB; the "
                              f"closest found peaks at {r.peak_mib:.0f} MiB: lower --hbm-margin, raise --hbm, add "
                              f"pipeline stages or recompute", field="--hbm-margin", value=hbm_margin,
                              rule="R_HBM_INFEASIBLE")
        raise ConfigError(f"the search found no configuration that fits the HBM budget of {res.hbm_mib:.0f} MiB; "
                          f"the closest found peaks at {r.peak_mib:.0f} MiB: raise --hbm, add pipeline stages or "
                          f"recompute", field="--hbm", value=res.hbm_mib, rule="R_HBM_INFEASIBLE")


def options(f: Any) -> Any:
    """The Megatron options of ``autotune search``."""
    f = click.option("--layout-flags", type=click.Choice(["layout", "first_last"]), default=None,
                     help="Megatron: emit --pipeline-model-parallel-layout (default) or the older "
                          "--decoder-first/last-pipeline-num-layers.")(f)
    f = click.option("--in-place", "in_place", is_flag=True,
                     help="Megatron: rewrite the argument file / launch script itself.")(f)
    f = click.option("--megatron-args", "megatron_args", default=None, type=click.Path(),
                     help="Megatron launch script (or argument YAML/JSON) to tune.")(f)
    f = click.option("--from", "source_kind", type=click.Choice(["auto", "mindformers", "megatron"]),
                     default="auto", show_default=True,
                     help="Input kind; auto detects Megatron arguments by content.")(f)
    return f
