"""``autotune check`` (what MindFormers will do with a config) and ``autotune apply`` (write tuned
values into the user's YAML).

Both are thin: parse → :mod:`autotune.config.layer_setting` / :mod:`autotune.emit.splice` →
render. Bad input exits with code 2 and a one-line message (JSON: ``{"error": {"rule", "field",
"message"}}``), never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from autotune.config.layer_setting import VERSIONS, LayerSettingResult
from autotune.config.model_dims import missing_dims_error
from autotune.config.read import check_config
from autotune.config.safe_yaml import load_yaml_text, read_yaml_file
from autotune.config.training import read_training_yaml, read_yaml
from autotune.emit.apply_keys import apply_updates
from autotune.emit.splice import read_text_exact, splice
from autotune.errors import AutotuneError, ConfigError, from_validation_error, require_file

EXIT_BAD_INPUT = 2
_RELEASES = {"1.5": "r1.3–r1.6", "1.7": "r1.7.0", "1.8": "r1.8.0/master"}


def _as_config_error(exc: BaseException) -> ConfigError:
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, AutotuneError):
        return ConfigError(str(exc), field=None, value=None, rule="R_ERROR")
    if isinstance(exc, ValidationError):       # pydantic's text is several lines: its first error
        return from_validation_error(exc, None, what="config", rule="R_UNSUPPORTED")
    return ConfigError(f"input not supported ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); fix: simplify "
                       "the value", field="<file>", value=None, rule="R_UNSUPPORTED")


def _fmt_dict(d: dict[str, Any] | None) -> str:
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in (d or {}).items()) + "}"


def render_text(res: LayerSettingResult) -> str:
    """The lines MindFormers logs for this config, then a per-layer table, the warnings and a last
    line with the verdict ("ok: MindFormers 1.8 (...) accepts these layout keys (strict; 0
    warnings)"): a config this is called for is accepted (a rejected one raises before), and the
    table alone did not say so (a new user's check)."""
    mode = "emulate" if res.emulate else "strict"
    lines = [f"# MindFormers {res.version} ({_RELEASES[res.version]}), {res.model_mode} model, "
             f"{mode}: {res.num_layers} layers on pipeline_stage "
             f"{res.pp} × pp_interleave_num {res.vpp}",
             f"num_layers per stage: {res.layers_vp.tolist()}",
             f"Accumulated num_layers per stage: {res.accumulated_vp.tolist()}",
             f"Pipeline id list with start_stage: {[i + res.start_stage for i in res.pipeline_ids]}",
             f"Interleave id list: {res.interleave_ids}",
             f"Formative layer_recompute: {res.recompute}"]
    if res.select_recompute_exclude is not None:
        lines.append("The configuration of select_recompute_exclude and select_comm_recompute_exclude "
                     "have the highest priority.")
    lines.append(f"Formative select_recompute: {_fmt_dict(res.select_recompute)}")
    lines.append(f"Formative select_comm_recompute: {_fmt_dict(res.select_comm_recompute)}")
    if res.select_recompute_exclude is not None:
        lines.append(f"Formative select_recompute_exclude: {_fmt_dict(res.select_recompute_exclude)}")
        lines.append(f"Formative select_comm_recompute_exclude: "
                     f"{_fmt_dict(res.select_comm_recompute_exclude)}")
    if res.effective_vp.tolist() != res.layers_vp.tolist():
        lines.append(f"# real placement differs from the logged table: {res.effective_vp.tolist()}")
    lines.append("")
    full = set(res.full_recompute_layers)

    def hits(d: dict[str, list[int]] | None) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for pat, ids in (d or {}).items():
            for i in ids:
                out.setdefault(i, []).append(pat)
        return out

    sel, com = hits(res.select_recompute_layers), hits(res.select_comm_recompute_layers)
    exc = hits(res.select_recompute_exclude_layers)
    for i, pats in hits(res.select_comm_recompute_exclude_layers).items():
        exc.setdefault(i, []).extend(pats)
    lines.append(f"{'layer':>5} {'chunk':>5} {'stage':>5}  {'full':<4}  select / comm / exclude")
    for i in range(res.num_layers):
        parts = [", ".join(sel.get(i, [])) or "-", ", ".join(com.get(i, [])) or "-",
                 ", ".join(exc.get(i, [])) or "-"]
        lines.append(f"{i:>5} {res.interleave_ids[i]:>5} {res.physical_stage_per_layer[i]:>5}  "
                     f"{'yes' if i in full else 'no':<4}  {' / '.join(parts)}")
    if res.warnings:
        lines.append("")
        for w in res.warnings:
            lines.append(f"warning {w.code}: {w.field}: {w.message}")
    n = len(res.warnings)
    lines += ["", f"ok: MindFormers {res.version} ({_RELEASES[res.version]}) accepts these layout keys "
              f"({mode}; {n} warning{'' if n == 1 else 's'})"]
    return "\n".join(lines)


@click.command("check")
@click.argument("config", type=click.Path())
@click.option("--mindformers-version", "version", type=click.Choice(VERSIONS), default="1.8",
              show_default=True, help="Rules of this release: 1.5 = r1.3–r1.6, 1.7 = r1.7.0, "
              "1.8 = r1.8.0/master.")
@click.option("--emulate", is_flag=True, help="Report what that release really does (pitfalls become "
              "warnings) instead of rejecting them.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--from", "source", type=click.Choice(["mindformers", "megatron"]), default="mindformers",
              show_default=True, help="megatron: CONFIG holds Megatron-LM arguments (num_layers, "
              "pipeline_model_parallel_size, decoder_first/last_pipeline_num_layers, "
              "pipeline_model_parallel_layout, ...).")
@click.option("--hf-config", "hf_config", default=None, type=click.Path(),
              help="Hugging Face config.json with the model dims (default: pretrained_model_dir/config.json).")
@click.pass_context
def check(ctx: click.Context, config: str, version: str, emulate: bool, fmt: str, source: str,
          hf_config: str | None) -> None:
    """Show how MindFormers places layers and recompute for CONFIG, or why it rejects it.

    Strict by default: also rejects configs MindFormers silently gets wrong or hangs on.
    Exit 0 = accepted (warnings may be printed), 2 = rejected.
    """
    try:
        data = read_yaml(config) if source == "megatron" else read_training_yaml(config, hf_config=hf_config)
        missing = None if source == "megatron" else missing_dims_error(data, config, hf_config)
        if missing is not None:
            raise missing
        res = check_config(data, version, emulate=emulate, source=source)
    except Exception as exc:  # noqa: BLE001 - every failure becomes exit 2, never a traceback
        err = _as_config_error(exc)
        if fmt == "json":
            click.echo(json.dumps({"error": err.to_dict()}))
            ctx.exit(EXIT_BAD_INPUT)
        raise err from None
    if fmt == "json":
        click.echo(json.dumps(res.to_json()))
    else:
        click.echo(render_text(res))


@click.command("apply")
@click.argument("best", type=click.Path())
@click.argument("config", type=click.Path())
@click.option("-o", "--out", "output", type=click.Path(dir_okay=False), default=None,
              help="Write here (default: stdout).")
@click.option("--output", "output_alias", type=click.Path(dir_okay=False), default=None, hidden=True,
              help="Old name of --out (kept so existing scripts work).")
@click.option("--in-place", is_flag=True, help="Overwrite CONFIG.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--mindformers-version", "version", type=click.Choice(VERSIONS), default="1.8",
              show_default=True, help="The result must pass `check` for this release.")
def apply(best: str, config: str, output: str | None, output_alias: str | None, in_place: bool, force: bool,
          version: str) -> None:
    """Write the tuned values of BEST (the block `autotune search` prints, or the file `search --out`
    writes) into CONFIG, changing only those values' text; comments, formatting and line endings
    stay as they were, and keys the search does not tune (epochs, callbacks, ...) are not touched.

    A layout key (num_layers, pipeline_stage, micro_batch_num, model dims, max_device_memory, ...)
    that differs between BEST and CONFIG stops it (R_APPLY_MISMATCH): BEST was tuned for another
    config. The result must pass `autotune check` (strict); otherwise nothing is written.
    """
    if output and output_alias and output != output_alias:
        raise ConfigError("give the output once (--out / -o; --output is its old name)", field="--out",
                          value=output_alias, rule="cli")
    output = output or output_alias
    try:
        tuned = read_yaml(best)
        path = require_file(config)
        target = read_yaml_file(path, mapping=True)       # the limits, and a mapping to splice into
        text = read_text_exact(path)                       # CRLF stays CRLF
        updates = apply_updates(read_text_exact(best), tuned, target, best_name=best, config_name=config)
        new_text, changed = splice(text, updates)
        try:
            check_config(load_yaml_text(new_text, where=config), version)
        except ConfigError as exc:
            raise ConfigError(f"the tuned config would not pass `autotune check` ({exc.rule} at "
                              f"{exc.field}: {exc.message}); nothing written", field=exc.field,
                              value=exc.value, rule=exc.rule) from None
        if output and Path(output).resolve() == path.resolve() and not in_place:
            raise ConfigError("refusing to overwrite the input; pass --in-place", field="--out",
                              value=output, rule="R_OVERWRITE")
        if output and Path(output).exists() and Path(output).resolve() != path.resolve() and not force:
            raise ConfigError(f"{output} exists; pass --force to overwrite it", field="--out",
                              value=output, rule="R_OVERWRITE")
    except AutotuneError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _as_config_error(exc) from None
    if output:
        Path(output).write_text(new_text, encoding="utf-8", newline="")
    elif in_place:
        path.write_text(new_text, encoding="utf-8", newline="")
    else:
        sys.stdout.write(new_text)
    if output or in_place:
        click.echo(f"updated {', '.join(changed) or 'nothing (already tuned)'} -> {output or config}",
                   err=True)


COMMANDS = [check, apply]
