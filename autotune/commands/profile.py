"""``autotune profile`` (analytic and measured layer profiles) and ``autotune probe`` (dry-run
probe configs for the memory fit).

Measured sources overlay the analytic profile (when CONFIG is given) field by field, in the order
SAPP file < dry-run fit < trace; the provenance of every field is printed and stored in the
profile's ``sources`` (``field.<path>`` keys). Every field the measured sources leave out is named in
a warning with the value it took and where it came from (stderr and the profile's ``warnings``);
``--strict`` makes them an error (exit 2).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import click

from autotune.api import load_config
from autotune.commands._paths import check_out_dir, check_out_file
from autotune.commands.tune import _device_opt, _overrides, _set_opt, _write
from autotune.cost.dryrun_fit import fit_dryruns
from autotune.cost.probe import design_probes
from autotune.emit.yaml_block import dump_yaml
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile
from autotune.profile.dryrun import dryrun_from_config, dryrun_warnings, load_dryrun_file
from autotune.profile.merge import import_warnings, left_out_fields, merge_profile, provenance_table
from autotune.profile.sapp import load_sapp
from autotune.profile.schema import ModelProfile
from autotune.profile.trace import LayerMap, load_layer_map, measure_traces

_RUNS_SUFFIXES = (".json", ".yaml", ".yml")


def _say(text: str) -> None:
    click.echo(text, err=True)


@click.command("profile")
@click.argument("config", required=False, type=click.Path())
@click.option("--config", "config_opt", default=None, type=click.Path(),
              help="Training YAML (same as the CONFIG argument).")
@_device_opt
@_set_opt
@click.option("--hf-config", "hf_config", default=None, type=click.Path(),
              help="Hugging Face config.json with the model dims (default: pretrained_model_dir/config.json).")
@click.option("--from-trace", "traces", multiple=True, type=click.Path(),
              help="Chrome-trace JSON (MindSpore trace_view.json, PyTorch export); repeatable.")
@click.option("--layer-map", default=None, type=click.Path(dir_okay=False),
              help="YAML with name patterns and layer_kinds for --from-trace.")
@click.option("--warmup-steps", default=1, show_default=True, type=click.IntRange(0),
              help="Steps dropped at the start of each trace.")
@click.option("--from-dryrun", "dryruns", multiple=True, type=click.Path(dir_okay=False),
              help="Per-stage dry-run logs of CONFIG's layout (stage order = file-name number), or "
                   "one runs file (.yaml/.json from `autotune probe`, or a published case).")
@click.option("--peak", type=click.Choice(["actual", "used"]), default="actual", show_default=True,
              help="Which dry-run peak line to fit: with fragments (actual) or without (used).")
@click.option("--micro-batch-num", "mbn", default=None, type=click.IntRange(1),
              help="Override the dry runs' micro_batch_num (in-flight counts).")
@click.option("--fix", "fix", multiple=True, metavar="FIELD",
              help="Hold a profile field at the analytic value instead of fitting it (repeatable).")
@click.option("--from-sapp", "sapp", default=None, type=click.Path(),
              help="The old MindFormers pipeline balancer's (SAPP) layer file (.json) or init file "
                   "(.yaml), read as its last release (959a24518) reads them.")
@click.option("--sapp-time", "sapp_time", type=click.Choice(["forward", "total"]), default="forward",
              show_default=True, help="How --from-sapp reads a layer's time: forward (the balancer's "
              "last release: backward = 2·time) or total (its releases before 2025-02: forward = "
              "time/3, backward = 2·time/3).")
@click.option("--strict", is_flag=True, help="Fail (exit 2) instead of warning when a measured source "
              "leaves a field out (it would come from the analytic profile or a default) or a value "
              "had to be clamped.")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="Also write the fit/trace report and provenance as JSON here.")
@click.option("--out", "out", default=None, help="Write the profile YAML here (default: stdout).")
@click.option("--force", is_flag=True, help="Overwrite --out / --report if they exist.")
def profile_cmd(config: str | None, config_opt: str | None, device: str, sets: tuple[str, ...],
                hf_config: str | None, traces: tuple[str, ...], layer_map: str | None, warmup_steps: int,
                dryruns: tuple[str, ...], peak: str, mbn: int | None, fix: tuple[str, ...],
                sapp: str | None, sapp_time: str, strict: bool, report_path: str | None,
                out: str | None, force: bool) -> None:
    """Derive a layer profile: analytic from CONFIG's model dims and parallel sizes, overlaid with
    measurements (--from-trace, --from-dryrun, --from-sapp) where given."""
    check_out_file(out, force=force, option="--out")  # before any work: a clash must not waste a fit
    check_out_file(report_path, force=force, option="--report")
    if config and config_opt and config != config_opt:
        raise ConfigError("give the config once (CONFIG or --config)", field="--config",
                          value=config_opt, rule="cli")
    config = config or config_opt
    measured_any = bool(traces or dryruns or sapp)
    if not config and not measured_any:
        raise ConfigError("give CONFIG (analytic profile) and/or a measured source (--from-trace, "
                          "--from-dryrun, --from-sapp)", field="CONFIG", value=None, rule="cli")
    cfg = load_config(config, hf_config=hf_config) if config else None
    base = analytic_profile(cfg, device, overrides=_overrides(sets)) if cfg is not None else None
    if base is not None:
        _say("assumptions (override with --set KEY=VALUE):")
        for k, v in base.assumptions.items():
            _say(f"  {k} = {v}")
    if not measured_any:
        assert base is not None
        _emit(base.to_yaml(), out, force)
        return
    acc = _Measured(layer_kinds=list(base.layer_kinds) if base is not None else None)
    if sapp:
        _add_sapp(acc, base, sapp, sapp_time)
    if dryruns:
        _add_dryruns(acc, base, cfg, dryruns, peak=peak, mbn=mbn, fix=fix)
    if traces:
        _add_traces(acc, traces, layer_map, warmup_steps)
    prof = _merge(acc, base, device, strict)
    if report_path:
        _write(report_path, json.dumps(acc.report, indent=2, default=float), force, "--report")
    _emit(prof.to_yaml(), out, force)


@dataclass
class _Measured:
    """What the measured sources give, in overlay order: (fields, label) pairs, notes, the JSON
    report and the decoder layer kinds (None until a source or CONFIG tells them)."""

    layer_kinds: list[tuple[str, int]] | None
    measured: list[tuple[dict[str, float], str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report: dict = field(default_factory=dict)


def _add_sapp(acc: _Measured, base: ModelProfile | None, sapp: str, sapp_time: str) -> None:
    """--from-sapp: the balancer's file, its BODY kinds renamed to the config's.

    Raises:
        ConfigError: the file's BODY kinds do not match the config's profile in number.
    """
    imp = load_sapp(sapp, time_semantics=sapp_time)
    if base is not None:
        base_kinds = base.kind_names()
        if len(base_kinds) != len(imp.layer_kinds):
            raise ConfigError(f"the SAPP file has {len(imp.layer_kinds)} BODY kinds "
                              f"({[k for k, _ in imp.layer_kinds]}), the config's profile "
                              f"{len(base_kinds)} ({base_kinds}); import it without CONFIG",
                              field="--from-sapp", value=sapp, rule="sapp")
        imp = imp.renamed({s: b for (s, _), b in zip(imp.layer_kinds, base_kinds)})
        n_sapp = sum(c for _, c in imp.layer_kinds)
        if n_sapp != base.num_layers:
            acc.notes.append(f"sapp: the file describes {n_sapp} layers, the config "
                             f"{base.num_layers}; the config's layer count is kept")
    else:
        acc.layer_kinds = imp.layer_kinds
    acc.measured.append((imp.fields, f"sapp:{Path(sapp).name}"))
    acc.report["sapp"] = {"fields": imp.fields, "how": imp.how, "notes": imp.notes,
                          "time_semantics": imp.semantics}
    acc.notes += [f"sapp: {n}" for n in imp.notes]


def _add_dryruns(acc: _Measured, base: ModelProfile | None, cfg: object, dryruns: tuple[str, ...], *,
                 peak: str, mbn: int | None, fix: tuple[str, ...]) -> None:
    """--from-dryrun: per-stage logs of CONFIG's layout or one runs file, fitted.

    Raises:
        ConfigError: per-stage logs without CONFIG, or dry runs placing another layer count.
    """
    if len(dryruns) == 1 and Path(dryruns[0]).suffix.lower() in _RUNS_SUFFIXES:
        n_layers, runs = load_dryrun_file(dryruns[0], which=peak)
    else:
        if cfg is None:
            raise ConfigError("per-stage dry-run logs need the config that produced them "
                              "(--config CONFIG), or pass one runs file", field="--config",
                              value=None, rule="cli")
        run = dryrun_from_config(cfg, list(dryruns), which=peak)
        n_layers, runs = run.layout.num_layers, [run]
    if mbn is not None:
        runs = [dataclasses.replace(r, micro_batch_num=mbn) for r in runs]
    for w in dryrun_warnings(runs):
        _say(f"warning: {w}")
        acc.notes.append(f"dryrun: {w}")
    if base is not None and base.num_layers != n_layers:
        raise ConfigError(f"the dry runs place {n_layers} layers, the config has {base.num_layers}",
                          field="--from-dryrun", value=n_layers, rule="profile_layers")
    layer_kinds = acc.layer_kinds
    lk = layer_kinds if layer_kinds is not None and sum(c for _, c in layer_kinds) == n_layers \
        else [("dense", n_layers)]
    fit = fit_dryruns(runs, lk, prior=base, fix=list(fix))
    _say(fit.table())
    if layer_kinds is None:
        acc.layer_kinds = lk
    acc.measured.append((fit.fields(), "dryrun:" + ",".join(Path(d).name for d in dryruns[:3])
                         + ("…" if len(dryruns) > 3 else "")))
    acc.report["dryrun_fit"] = fit.to_dict()


def _add_traces(acc: _Measured, traces: tuple[str, ...], layer_map: str | None, warmup_steps: int) -> None:
    """--from-trace: per-layer times of the traces (fields of unknown kinds dropped)."""
    lm = load_layer_map(layer_map)
    if lm.layer_kinds is None and acc.layer_kinds is not None:
        lm = LayerMap(lm.patterns, list(acc.layer_kinds))
    meas = measure_traces(list(traces), layer_map=lm, warmup_steps=warmup_steps)
    _say(meas.table())
    if acc.layer_kinds is None:
        n = max(i for i, _ in meas.per_layer_ms) + 1 if meas.per_layer_ms else 0
        acc.layer_kinds = lm.layer_kinds or ([("dense", n)] if n else None)
    known = {k for k, _ in (acc.layer_kinds or [])}
    fields = {k: v for k, v in meas.fields().items()
              if not k.startswith("kinds.") or k.split(".")[1] in known}
    acc.measured.append((fields, "trace:" + ",".join(Path(t).name for t in traces[:3])
                         + ("…" if len(traces) > 3 else "")))
    acc.report["trace"] = {f"{p}.{d}": dataclasses.asdict(t) for (p, d), t in meas.timings.items()}
    acc.report["trace_warnings"] = meas.warnings
    acc.notes += [f"trace: {w}" for w in meas.warnings]


def _merge(acc: _Measured, base: ModelProfile | None, device: str, strict: bool) -> ModelProfile:
    """The measured fields over the analytic profile, with the provenance table, the left-out
    warnings (an error with ``--strict``) and the notes; fills ``acc.report``.

    Raises:
        ConfigError: no layer count known, or ``--strict`` with fields left out or clamped.
    """
    if acc.layer_kinds is None:
        raise ConfigError("cannot tell the decoder layer count: give CONFIG or a --layer-map with "
                          "layer_kinds", field="CONFIG", value=None, rule="profile_layers")
    prof, prov = merge_profile(base, acc.measured, layer_kinds=acc.layer_kinds)
    _say("field provenance:")
    _say(provenance_table(prov, prof))
    left_out = import_warnings(prov, prof, measured=[label for _, label in acc.measured],
                               base_desc=f"the analytic profile for {device}")
    for n in acc.notes:
        if n.startswith("sapp: "):
            _say(f"note: {n[6:]}")
    for w in left_out:
        _say(f"warning: {w}")
    if strict and left_out:
        fields = left_out_fields(prov)
        raise ConfigError(f"--strict: the measured sources leave out or clamp {len(fields)} field(s): "
                          f"{', '.join(fields)}; measure them or drop --strict",
                          field=fields[0], value=None, rule="import_incomplete")
    prof = prof.model_copy(update={"warnings": left_out + acc.notes})
    acc.report["provenance"] = prov
    acc.report["warnings"] = left_out
    acc.report["notes"] = acc.notes
    return prof


def _emit(text: str, out: str | None, force: bool) -> None:
    if out:
        _write(out, text, force)
        _say(f"wrote {out}")
    else:
        click.echo(text)


@click.command("probe")
@click.option("--pipeline-stage", "pp", required=True, type=click.IntRange(1), help="P of the dry runs.")
@click.option("--num-layers", "num_layers", required=True, type=click.IntRange(1), help="Decoder layers N.")
@click.option("--kinds", default="full,select,comm", show_default=True,
              help="Recompute classes to identify (comma list of full, select, comm).")
@click.option("--micro-batch-num", "mbn", default=None, type=click.IntRange(1),
              help="micro_batch_num of the dry runs (default: pipeline_stage).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--max-runs", default=12, show_default=True, type=click.IntRange(1))
@click.option("--out", "out", default=None, type=click.Path(file_okay=False),
              help="Write probe<k>.yaml blocks and runs.yaml (the manifest for --from-dryrun) here.")
@click.option("--force", is_flag=True, help="Overwrite files in --out.")
def probe_cmd(pp: int, num_layers: int, kinds: str, mbn: int | None, seed: int, max_runs: int,
              out: str | None, force: bool) -> None:
    """Emit the fewest dry-run configs (seeded) that make the memory fit well-conditioned."""
    kind_list = [k.strip() for k in kinds.split(",") if k.strip()]
    plan = design_probes(pp, num_layers, kind_list, micro_batch_num=mbn, seed=seed, max_runs=max_runs)
    _say(f"{len(plan.probes)} probe dry run(s) identify {len(plan.unknowns)} unknowns "
         f"(rank {plan.rank}, condition number {plan.cond:.3g}): {', '.join(plan.unknowns)}")
    _say("dry-run each with MS_SIMULATION_LEVEL=1, then: autotune profile CONFIG --from-dryrun runs.yaml "
         "(fill each run's logs: or peak_mib_per_stage:)")
    blocks = []
    for i, p in enumerate(plan.probes):
        blocks.append(f"# {p.label} ({i + 1} of {len(plan.probes)}), seed {seed}\n"
                      + dump_yaml(p.yaml_block()))
    if out:
        d = Path(out)
        check_out_dir(d, force=force, names=[f"{p.label}.yaml" for p in plan.probes] + ["runs.yaml"])
        for p, b in zip(plan.probes, blocks):
            _write(str(d / f"{p.label}.yaml"), b, force)
        _write(str(d / "runs.yaml"), dump_yaml(plan.manifest()), force)
        _say(f"wrote {len(blocks)} probe blocks and runs.yaml to {out}")
    else:
        click.echo("---\n".join(blocks), nl=False)


COMMANDS = [profile_cmd, probe_cmd]
