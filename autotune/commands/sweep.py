"""``autotune sweep``: tune a matrix of scenarios on many workers against one study store."""

from __future__ import annotations

import sys

import click

from autotune.extras import require_storage
from autotune.sweep.run import run_sweep


@click.command("sweep")
@click.argument("sweep_file", metavar="SWEEP.yaml", type=click.Path())
@click.option("--storage", envvar="AUTOTUNE_STORAGE", default=None, show_envvar=True,
              help="Database URL (e.g. postgresql+psycopg://user@host/db) or journal file shared by all "
                   "workers and hosts. Default: a journal file DIR/sweep.journal. The password is never shown.")
@click.option("--workers", default=1, show_default=True, type=int,
              help="Local worker processes. Run the same command on more hosts to add workers.")
@click.option("--out", "out_dir", default="sweep-out", show_default=True, type=click.Path(file_okay=False),
              help="Output folder: summary.csv, summary.md, <scenario>/best.yaml.")
@click.option("--fresh", is_flag=True, help="Delete this sweep's studies and start over.")
@click.option("--baseline", default=None, type=click.Path(),
              help="A previous night's summary.csv: adds the change per scenario.")
@click.option("--report", is_flag=True, help="Also write <scenario>/report.txt (stage table, lower bound and each "
              "pp_interleave_num's, why it stopped, baselines).")
def sweep_cmd(sweep_file: str, storage: str | None, workers: int, out_dir: str, fresh: bool,
              baseline: str | None, report: bool) -> None:
    """Run (or resume) every scenario of SWEEP.yaml: one Optuna study per scenario, named from a hash
    of its content, resumable and shared through --storage.

    Exit 0 when every scenario has a feasible config, 1 when some has none or could not finish
    (listed), 2 on bad input or a study store that stayed unreachable.
    """
    require_storage(storage)  # before any work: name the extra, not a driver traceback
    outcome = run_sweep(sweep_file, storage=storage, workers=workers, out_dir=out_dir, fresh=fresh,
                        baseline=baseline, report=report)
    n = len(outcome.rows)
    click.echo(f"sweep: {n} scenarios in {outcome.storage}; this run worked on {len(outcome.ran)} "
               f"in {outcome.seconds:.1f} s; wrote {outcome.out_dir}/summary.md")
    if outcome.lost_workers:
        click.echo(f"sweep: {outcome.lost_workers} local worker process(es) died and were replaced; "
                   f"their scenarios were taken over", err=True)
    for r in outcome.rows:
        gap = f"gap {r['certified_gap_pct']} %" if r.get("certified_gap_pct") != "" else ""
        click.echo(f"  {r['scenario']:<40} {r['status']:<10} step {r['step_ms'] or '-':>10} ms  "
                   f"fits {r['fits'] or '-':<3}  {r['trials'] or 0:>4} trials  {gap}".rstrip())
    if outcome.invalid:
        for name in outcome.invalid:
            click.echo(f"error: scenario {name}: {outcome.errors.get(name, 'invalid')}", err=True)
    for name in outcome.timed_out:
        row = next(r for r in outcome.rows if r["scenario"] == name)
        click.echo(f"cut short by its timeout: {name} (certified gap then {row['certified_gap_pct'] or 'n/a'} %)",
                   err=True)
    if outcome.failed:
        for name in outcome.failed:
            click.echo(f"could not finish: {name}: {outcome.errors.get(name, 'failed')}", err=True)
    if outcome.infeasible:
        click.echo("no feasible configuration: " + ", ".join(outcome.infeasible), err=True)
    sys.exit(outcome.exit_code)


COMMANDS = [sweep_cmd]
