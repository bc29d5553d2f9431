"""Python API for notebooks and scripts: load, evaluate, search.

>>> import autotune
>>> cfg = autotune.load_config("examples/telechat2_115b/train.yaml")
>>> report = autotune.evaluate(cfg)                 # analytic profile derived from the YAML
>>> result = autotune.search(cfg, trials=100, seed=0)
>>> print(result.best.step_time_ms, result.to_yaml())

A facade: the search policy is :mod:`autotune.tuner.search`, the inputs :mod:`autotune.tuner.inputs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.layout import layout_from_config
from autotune.config.patterns import pattern_scope
from autotune.config.training import TrainingConfig, load_config
from autotune.cost.report import CostReport, evaluate_layout
from autotune.emit import notebook, search_result
from autotune.emit.html_report import write_report
from autotune.errors import ConfigError
from autotune.extras import require
from autotune.megatron.run import MegatronRun, build_run
from autotune.profile.schema import ModelProfile, load_profile
from autotune.tuner.heap import search_heap
from autotune.tuner.inputs import DEFAULT_DEVICE, as_config, check_runnable, config_schedule, resolve_profile
from autotune.tuner.outcome import SAFETY_TIMEOUT_S, SearchOutcome
from autotune.tuner.space import SearchSpace

__all__ = ["load_config", "load_profile", "resolve_profile", "evaluate", "search", "SearchResult",
           "load_megatron", "DEFAULT_DEVICE", "SAFETY_TIMEOUT_S"]


def load_megatron(source: Any) -> MegatronRun:
    """A validated Megatron-LM run (:class:`autotune.megatron.run.MegatronRun`) from a YAML/JSON
    file of arguments, a launch script, a mapping or an argv list (docs/megatron.md)."""
    return build_run(source)


@pattern_scope()   # one select-pattern budget for the config read and the per-op pricing
def evaluate(config: str | Path | TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
             device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
             overrides: dict[str, float] | None = None) -> CostReport:
    """Cost report (step time ms, bubble, per-stage peak MiB) of a config as written.

    Raises:
        ConfigError: invalid config, profile, or a schedule that cannot run these sizes.
    """
    cfg = as_config(config, hbm_mib)
    layout = layout_from_config(cfg)          # MindFormers' rules first: the same verdict as `check`
    sched = config_schedule(cfg)              # then a schedule the cost model lacks
    prof = resolve_profile(cfg, profile, device=device, overrides=overrides)
    check_runnable(cfg, layout.vpp, sched)
    report = evaluate_layout(prof, layout, micro_batch_num=cfg.micro_batch_num, schedule=sched,
                             hbm_mib=cfg.hbm_mib, seq_split_num=cfg.seq_split_num)
    report.warnings[:0] = list(cfg.config_warnings) + list(layout.warnings)   # what `check` warns about
    return report


@dataclass
class SearchResult(SearchOutcome):
    """Outcome of :func:`search`: the fields of :class:`autotune.tuner.outcome.SearchOutcome` (best,
    closest, baselines, trials, seconds, config, profile, study, lower_bound_ms, certified_gap,
    exact, timed_out, settings, pareto, ...) with the tuned YAML, the JSON shape and the views."""

    def tuned_values(self) -> dict[str, Any]:
        """Canonical MindFormers values of the best config (offset, pp_interleave_num, recompute…)."""
        return search_result.tuned_values(self)

    def tuned_block(self) -> dict[str, Any]:
        """Nested mapping of only the tuned MindFormers keys (to paste)."""
        return search_result.tuned_keys(self)

    def to_yaml(self, *, full: bool = True) -> str:
        """The tuned config as YAML, the user's own file text with the tuned keys spliced in
        (``full=True``) or just the tuned keys (:func:`autotune.emit.search_result.result_yaml`)."""
        return search_result.result_yaml(self, full=full)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``autotune search --format json``."""
        return search_result.result_dict(self)

    def _repr_html_(self) -> str:
        return notebook.search_result_html(self)

    def plot_timeline(self, **kwargs: Any) -> Any:
        """Pipeline timeline of the best (or closest) config: a matplotlib Figure."""
        return notebook.plot_timeline(self, **kwargs)

    def plot_memory(self, **kwargs: Any) -> Any:
        """Live memory per stage over the step of the best config: a matplotlib Figure."""
        return notebook.plot_memory(self, **kwargs)

    def write_report(self, out_dir: str | Path, **kwargs: Any) -> list[Path]:
        """report.html, report.md and the pictures (timeline, memory, stages, study) in out_dir."""
        return write_report(self, out_dir, **kwargs)

    def trials_dataframe(self) -> Any:
        """The Optuna trial history as a pandas DataFrame.

        Raises:
            MissingExtraError: pandas is not installed (``pip install 'autotune[report]'``).
        """
        require(("pandas",), "report", "trials_dataframe()")
        return self.study.trials_dataframe()


@pattern_scope()   # one select-pattern budget for the whole search (its answers are remembered)
def search(config: Any = None, profile: str | Path | ModelProfile | None = None, *,
           space: SearchSpace | str | Path | None = None, trials: int = 200,
           timeout: float | None = None, seed: int | None = 0, storage: Any = None,
           study_name: str | None = None, device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
           overrides: dict[str, float] | None = None, progress: bool | str = False,
           gap: float | None = 0.005, objective: str = "time", megatron_args: Any = None,
           megatron_space: Any = None, hbm_margin: float | str | None = None,
           safety_net: bool = True, progress_every_s: float = 10.0) -> Any:
    """Tune offset, pp_interleave_num and recompute (and the space's other free knobs) for a config.

    Args:
        config: YAML path or :class:`TrainingConfig`.
        profile: profile path/object; None derives the analytic one for ``device``.
        space: search space (object, YAML path, or None for ``search_spaces/default.yaml``).
        trials: most Optuna trials per sub-problem (baselines and solver seeds included); a study
            stops earlier at the certified-gap target, or when no neighbour of its best trial is
            faster (``stopped_by="neighbourhood"``), or when its neighbourhood scans used their work
            cap on a large schedule (``stopped_by="work"``).
        timeout: wall-clock limit (s) for the whole search; None (default) = bounded by work only
            (reproducible), with :data:`SAFETY_TIMEOUT_S` as a safety net on the whole search (its
            first half for the bound phase, the rest for the trials).
        seed: kept for reproducible APIs (the neighbourhood sampler is deterministic).
        safety_net: False drops that safety net too (no wall clock at all: a nightly sweep's
            scenarios, whose rows must not depend on the machine's load).
        progress: False, True / "bar" (a tqdm bar from the start: the phase, the best step time
            and the lower bound as they move), "lines" (one line on stderr when a phase starts and
            every ``progress_every_s`` seconds, for logs) or a
            :class:`autotune.tuner.progress.Progress` (phases ``reading``, ``bounds``, ``search``,
            ``polish``).
        storage: None (in memory), a journal file path, a database URL (PostgreSQL: heartbeats,
            a trial whose worker died is failed and retried by Optuna) or an Optuna storage object
            (e.g. one ``RDBStorage`` reused for many searches); an existing study is resumed up
            to its ``trials`` budget (finished trials count, so a re-run adds nothing when the
            study is complete). It is opened before any work, so a bad URL fails at once.
        hbm_mib: HBM budget override (MiB); default ``context.max_device_memory``.
        gap: stop once the certified gap (best - bound) / bound is at most this fraction (>= 0);
            None runs the whole trial budget (no early stop).
        objective: ``"time"`` (default: the fastest feasible config) or ``"time,memory"``: also
            the Pareto front of step time vs worst-stage peak MiB (``SearchResult.pareto``; exact
            on enumerable spaces, see :mod:`autotune.tuner.pareto`; every sub-problem is searched).
        hbm_margin: HBM kept free below the budget: a fraction (0.05, "5%") or a size ("2GB");
            None/0 = none. The pruner and the feasibility check use budget − margin
            (:func:`autotune.config.margin.apply_margin`).
        megatron_args: a Megatron-LM run instead of ``config`` (path to an argument YAML/JSON or a
            launch script, a mapping, an argv list or a :func:`load_megatron` result; ``config`` may
            also be a MegatronRun): searches what Megatron's flags express
            (:func:`autotune.megatron.search.search_megatron`, space ``megatron_space`` or
            ``search_spaces/megatron.yaml``; ``device`` defaults to h100) and returns a
            :class:`~autotune.megatron.search.MegatronResult`.
lass:`~autotune.megatron.search.MegatronResult`.

    Without ``timeout`` the run is deterministic: same inputs and seed, same trials and answer.
    With ``timeout``, half of it goes to the bound and the solver seeds, the rest to Optuna. Small
    spaces are enumerated exactly (:mod:`autotune.tuner.exact`), so their answer is the optimum
    and the gap is 0. The policy (sub-problems, baselines, budget split, Pareto pool) is
    :mod:`autotune.tuner.search`.

    Raises:
        ConfigError: bad config/profile/space/gap/objective, no budget known, or no runnable
            pp_interleave_num.
    """
    # optuna (heavy) loads with the search policies, only when a search runs: import autotune stays light
    from autotune.megatron.search import search_megatron  # noqa: PLC0415
    from autotune.tuner.search import run_search  # noqa: PLC0415
    from autotune.tuner.threads import one_blas_thread  # noqa: PLC0415

    # OpenBLAS's spinning threads cost CPU and save no time; mmapped temporaries cost page faults
    # (their modules' docstrings)
    with one_blas_thread(), search_heap():
        if megatron_args is not None or isinstance(config, MegatronRun):
            run = load_megatron(megatron_args if megatron_args is not None else config)
            return search_megatron(run, space=megatron_space, device="h100" if device == DEFAULT_DEVICE else device,
                                   hbm_mib=hbm_mib, overrides=overrides, seed=seed or 0, gap=gap,
                                   hbm_margin=hbm_margin)
        if config is None:
            raise ConfigError("give a config (or megatron_args)", field="config", value=None, rule="missing_key")
        out = run_search(config, profile, space=space, trials=trials, timeout=timeout, seed=seed, storage=storage,
                         study_name=study_name, device=device, hbm_mib=hbm_mib, overrides=overrides,
                         progress=progress, gap=gap, objective=objective, hbm_margin=hbm_margin,
                         safety_net=safety_net, progress_every_s=progress_every_s)
        return SearchResult(**vars(out))
