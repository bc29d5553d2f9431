"""``autotune report``: pictures and a self-contained HTML/Markdown report of one config."""

from __future__ import annotations

import json

import click

from autotune.api import evaluate, load_config, resolve_profile
from autotune.commands._json_errors import json_errors
from autotune.commands._paths import check_out_dir
from autotune.commands.tune import DEVICE_NAMES, _overrides
from autotune.emit.html_report import REPORT_FILES, REPORT_PATTERNS, write_report
from autotune.emit.render import summary_line
from autotune.extras import REPORT_MODULES, require
from autotune.units import parse_memory_mib


@click.command("report")
@click.argument("config", type=click.Path())
@click.option("--profile", "profile", type=click.Path(), default=None,
              help="Layer profile YAML/JSON (default: derived analytically from the config).")
@click.option("--compare", "compare", type=click.Path(), default=None,
              help="A second config (e.g. your current one) to show side by side.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Folder for report.html, report.md, timeline.png/.svg, memory.png, stages.png.")
@click.option("--force", is_flag=True, help="Overwrite report files already in --out.")
@click.option("--device", default="ascend-910b", show_default=True,
              help=f"Device preset for the analytic profile ({DEVICE_NAMES}).")
@click.option("--hbm", default=None, help="HBM budget per device, e.g. 60GB (default: "
              "context.max_device_memory).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override an analytic-profile assumption (repeatable).")
@click.option("--hf-config", "hf_config", default=None, type=click.Path(),
              help="Hugging Face config.json with the model dims (default: pretrained_model_dir/config.json).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def report_cmd(config: str, profile: str | None, compare: str | None, out: str, force: bool, device: str,
               hbm: str | None, sets: tuple[str, ...], hf_config: str | None,
               fmt: str) -> None:
    """Draw CONFIG's pipeline timeline, memory over time and per-stage bars, and write a
    self-contained report.html (+ report.md) into --out. --compare puts another config beside it.
    Report files already in --out are kept unless --force.
    """
    json_errors(fmt)
    check_out_dir(out, force=force, option="--out", names=REPORT_FILES, patterns=REPORT_PATTERNS)
    require(REPORT_MODULES, "report", "autotune report")
    hbm_mib = None if hbm is None else parse_memory_mib(hbm, field="--hbm")
    ov = _overrides(sets)

    def one(path: str):  # -> (CostReport, ModelProfile)
        cfg = load_config(path, hbm_mib=hbm_mib, hf_config=hf_config)
        prof = resolve_profile(cfg, profile, device=device, overrides=ov)
        return evaluate(cfg, prof), prof

    main, prof = one(config)
    other, oprof = one(compare) if compare else (None, None)
    files = write_report(main, out, compare=other, profile=prof, compare_profile=oprof)
    if fmt == "json":
        click.echo(json.dumps({"files": [str(f) for f in files], "report": main.to_dict(),
                               "compare": None if other is None else other.to_dict()}, indent=2))
        return
    click.echo(summary_line(main))
    if other is not None:
        click.echo(f"compare: {summary_line(other)}")
    click.echo(f"wrote {len(files)} files to {out}: " + ", ".join(f.name for f in files))


COMMANDS = [report_cmd]
