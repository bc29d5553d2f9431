"""Run a sweep end to end: validate, prepare the store, start workers, write the summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.sweep.spec import Sweep, load_sweep
from autotune.tuner.storage import mask_url, open_storage, redact, resolve_target
from autotune.sweep.summary import read_baseline, write_outputs
from autotune.sweep.worker import RESULT_ATTR, Worker, _setup_logging, prepare, read_states, run_worker


@dataclass
class SweepOutcome:
    """Rows of the summary, the scenarios by status, and where things went."""

    rows: list[dict[str, Any]]
    infeasible: list[str]
    invalid: list[str]
    ran: list[str]
    seconds: float
    storage: str  # masked
    out_dir: str
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0: every scenario finished with a feasible config; 1: some has none; 2: some scenario
        turned out invalid while running (bad input)."""
        if self.invalid:
            return 2
        return 1 if self.infeasible else 0


def _is_storage_error(exc: BaseException) -> bool:
    import optuna

    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # pragma: no cover
        SQLAlchemyError = ()  # type: ignore[assignment,misc]  # noqa: N806
    return isinstance(exc, (SQLAlchemyError, OSError, optuna.exceptions.StorageInternalError))


def collect(sweep: Sweep, target: str) -> dict[str, dict[str, Any]]:
    """Scenario name -> stored record, for every finished scenario."""
    storage = open_storage(target)
    states = read_states(storage, sweep)
    return {sc.name: states[sc.study_name].done for sc in sweep.scenarios
            if states[sc.study_name].done is not None}


def run_sweep(sweep_path: str | Path, *, storage: str | None = None, workers: int = 1,
              out_dir: str | Path = "sweep-out", fresh: bool = False, baseline: str | Path | None = None,
              report: bool = False) -> SweepOutcome:
    """Run (or resume) a sweep and write ``out_dir``.

    Args:
        sweep_path: the SWEEP.yaml.
        storage: database URL or journal path shared by all workers/hosts; None -> a journal file
            ``out_dir/sweep.journal``.
        workers: local worker processes (joblib/loky); other hosts may run the same command.
        fresh: delete this sweep's studies first (start over).
        baseline: a previous night's ``summary.csv`` to diff against.
        report: also write ``<scenario>/report.txt``.

    Raises:
        ConfigError: bad sweep file, baseline, storage or worker count (password masked).
    """
    t0 = time.monotonic()
    if workers < 1:
        raise ConfigError(f"must be >= 1, got {workers}", field="--workers", value=workers, rule="range")
    sweep = load_sweep(sweep_path)
    prev = read_baseline(baseline) if baseline is not None else None
    target = resolve_target(storage, out_dir)
    _setup_logging()
    try:
        prepare(sweep, target, fresh=fresh)
        if workers == 1:
            ran = Worker(sweep, target, label="worker 1").run()
        else:
            from joblib import Parallel, delayed

            parts = Parallel(n_jobs=workers, backend="loky")(
                delayed(run_worker)(str(Path(sweep_path).resolve()), target, f"worker {i + 1}")
                for i in range(workers))
            ran = [n for p in parts for n in p]
        records = collect(sweep, target)
    except ConfigError as exc:
        raise ConfigError(redact(exc.message, target), field=exc.field, value=exc.value, rule=exc.rule) from None
    except Exception as exc:  # noqa: BLE001 - mask the password whatever went wrong
        msg = redact(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", target)
        if _is_storage_error(exc):
            raise ConfigError(msg, field="--storage", value=mask_url(target), rule="storage") from None
        raise RuntimeError(msg) from None  # a bug: traceback, without the password
    rows = write_outputs(out_dir, sweep.name, records, baseline=prev, report=report)
    return SweepOutcome(rows=rows, infeasible=[r["scenario"] for r in rows if r["status"] == "infeasible"],
                        invalid=[r["scenario"] for r in rows if r["status"] == "invalid"],
                        ran=ran, seconds=time.monotonic() - t0, storage=mask_url(target),
                        out_dir=str(out_dir),
                        errors={n: r["error"] for n, r in records.items() if r.get("error")})


__all__ = ["run_sweep", "SweepOutcome", "collect", "RESULT_ATTR"]
