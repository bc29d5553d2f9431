"""Python API for notebooks and scripts: load, evaluate, search.

>>> import autotune
>>> cfg = autotune.load_config("examples/telechat2_115b/train.yaml")
>>> report = autotune.evaluate(cfg)                 # analytic profile derived from the YAML
>>> result = autotune.search(cfg, trials=100, seed=0)
>>> print(result.best.step_time_ms, result.to_yaml())
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.config.layout import Layout, layout_from_config
from autotune.config.training import TrainingConfig, load_config
from autotune.cost.inputs import ProfileArrays
from autotune.cost.report import CostReport, evaluate_layout
from autotune.emit.yaml_block import canonical_values, deep_merge, dump_yaml, tuned_block
from autotune.errors import ConfigError, InfeasibleError
from autotune.profile.analytic import analytic_profile
from autotune.profile.schema import ModelProfile, load_profile
from autotune.tuner.space import SearchSpace, load_search_space

__all__ = ["load_config", "load_profile", "resolve_profile", "evaluate", "search", "SearchResult"]

DEFAULT_DEVICE = "ascend-910b"
#: Safety net of one ``search`` without ``timeout`` (s). The default search is bounded by work,
#: not by the clock (``trials``, a fixed number of local-search moves, the certified-gap stop), so the
#: same seed gives the same answer on any machine; this limit only stops pathological runs, and when
#: it fires ``SearchResult.timed_out`` is True (the answer may then depend on machine speed).
SAFETY_TIMEOUT_S = 300.0
DEFAULT_BUDGET_S = SAFETY_TIMEOUT_S  # kept for callers of the old name


def _config(config: str | Path | TrainingConfig, hbm_mib: float | None = None) -> TrainingConfig:
    if isinstance(config, TrainingConfig):
        if hbm_mib is not None:
            return config.model_copy(update={"hbm_mib": hbm_mib})
        return config
    return load_config(config, hbm_mib=hbm_mib)


def resolve_profile(cfg: TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
                    device: str = DEFAULT_DEVICE, overrides: dict[str, float] | None = None) -> ModelProfile:
    """The profile to use: the given one (path or object) or the analytic one for ``device``.

    Raises:
        ConfigError: the profile's layer count differs from the config's num_layers.
    """
    if profile is None:
        return analytic_profile(cfg, device, overrides=overrides)
    prof = profile if isinstance(profile, ModelProfile) else load_profile(profile)
    if prof.num_layers != cfg.num_layers:
        raise ConfigError(f"profile describes {prof.num_layers} layers but the config has "
                          f"num_layers = {cfg.num_layers}", field="layer_kinds",
                          value=prof.num_layers, rule="profile_layers")
    return prof


def _schedule(cfg: TrainingConfig) -> str:
    from autotune.cost.schedules import registered

    if cfg.pipeline_scheduler not in registered():
        raise ConfigError(f"pipeline_scheduler {cfg.pipeline_scheduler!r} is not modelled yet; "
                          f"modelled: {', '.join(registered())}",
                          field="parallel.pipeline_config.pipeline_scheduler",
                          value=cfg.pipeline_scheduler, rule="scheduler")
    return cfg.pipeline_scheduler


def _check_runnable(cfg: TrainingConfig, V: int, schedule: str) -> None:
    from autotune.cost.simulate import compile_schedule

    try:
        compile_schedule(schedule, cfg.pipeline_stage, V, cfg.micro_batch_num, cfg.seq_split_num)
    except ValueError as exc:
        raise ConfigError(str(exc), field="parallel_config.micro_batch_num", value=cfg.micro_batch_num,
                          rule="R_MICRO_BATCH_MIN") from None


def evaluate(config: str | Path | TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
             device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
             overrides: dict[str, float] | None = None) -> CostReport:
    """Cost report (step time ms, bubble, per-stage peak MiB) of a config as written.

    Raises:
        ConfigError: invalid config, profile, or a schedule that cannot run these sizes.
    """
    cfg = _config(config, hbm_mib)
    prof = resolve_profile(cfg, profile, device=device, overrides=overrides)
    layout = layout_from_config(cfg)
    sched = _schedule(cfg)
    _check_runnable(cfg, layout.vpp, sched)
    return evaluate_layout(prof, layout, micro_batch_num=cfg.micro_batch_num, schedule=sched,
                           hbm_mib=cfg.hbm_mib, seq_split_num=cfg.seq_split_num)


@dataclass
class SearchResult:
    """Outcome of :func:`search`.

    Attributes:
        best: cost report of the best memory-feasible config (None when nothing fits).
        closest: when nothing fits, the config with the least memory excess.
        baselines: ``user``, ``even_full_recompute``, ``even_no_recompute`` -> report or None.
        trials: trials in the study; seconds: wall time of the search (s).
        lower_bound_ms: a proof that no memory-feasible layout of the space runs faster (ms);
            equal to the optimum when the space was enumerated (``exact``).
        certified_gap: (best - lower_bound) / lower_bound, a fraction (None when nothing fits).
        exact: True when the exact oracle enumerated the whole space.
        timed_out: True when a wall-clock limit (``timeout`` or the safety net) cut the study.
        config, profile: the inputs; study: the Optuna study (trial history).
    """

    best: CostReport | None
    closest: CostReport | None
    baselines: dict[str, CostReport | None]
    trials: int
    seconds: float
    config: TrainingConfig
    profile: ModelProfile
    study: Any = field(repr=False, default=None)
    select_patterns: list[str] | None = None
    comm_patterns: list[str] | None = None
    lower_bound_ms: float | None = None
    certified_gap: float | None = None
    exact: bool = False
    timed_out: bool = False

    def tuned_values(self) -> dict[str, Any]:
        """Canonical MindFormers values of the best config (offset, pp_interleave_num, recompute…)."""
        report = self.best or self.closest
        if report is None:
            raise InfeasibleError("the search evaluated no configuration")
        return canonical_values(report.layout, use_legacy=self.config.use_legacy,
                                select_patterns=self.select_patterns, comm_patterns=self.comm_patterns)

    def tuned_block(self) -> dict[str, Any]:
        """Nested mapping of only the tuned MindFormers keys (to paste)."""
        report = self.best or self.closest
        return tuned_block(self.tuned_values(), scheduler=report.schedule if report else "1f1b")

    def to_yaml(self, *, full: bool = True) -> str:
        """The tuned config as YAML: the user's whole config with the tuned keys written over it
        (``full=True``) or just the tuned keys. A comment header lists the predicted numbers."""
        report = self.best or self.closest
        head = ["autotune: tuned pipeline layout"]
        if report is not None:
            head.append(f"predicted step time {report.step_time_ms:.1f} ms, bubble "
                        f"{report.bubble_fraction:.1%}, worst-stage peak {report.peak_mib:.0f} MiB")
        user = self.baselines.get("user")
        if user is not None and report is not None:
            head.append(f"user's config: {user.step_time_ms:.1f} ms, fits: {user.fits}")
        head.append("tuned keys: model.model_config.{offset, pp_interleave_num}, parallel.pipeline_config, "
                    "recompute_config.{recompute, select_recompute, select_comm_recompute}")
        block = self.tuned_block()
        data = deep_merge(self.config.raw, block) if full else block
        return dump_yaml(data, header="\n".join(head))

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``autotune search --format json``."""
        def d(r: CostReport | None) -> dict[str, Any] | None:
            if r is None:
                return None
            out = r.to_dict()
            out["config"] = canonical_values(r.layout, use_legacy=self.config.use_legacy,
                                             select_patterns=self.select_patterns,
                                             comm_patterns=self.comm_patterns)
            return out
        return {"best": d(self.best), "closest": d(self.closest) if self.best is None else None,
                "baselines": {k: d(v) for k, v in self.baselines.items()},
                "trials": self.trials, "seconds": self.seconds,
                "lower_bound_ms": self.lower_bound_ms, "certified_gap": self.certified_gap,
                "exact": self.exact}

    def _repr_html_(self) -> str:
        from autotune.emit.notebook import search_result_html

        return search_result_html(self)

    def plot_timeline(self, **kwargs: Any) -> Any:
        """Pipeline timeline of the best (or closest) config: a matplotlib Figure."""
        from autotune.emit.notebook import plot_timeline

        return plot_timeline(self, **kwargs)

    def plot_memory(self, **kwargs: Any) -> Any:
        """Live memory per stage over the step of the best config: a matplotlib Figure."""
        from autotune.emit.notebook import plot_memory

        return plot_memory(self, **kwargs)

    def write_report(self, out_dir: str | Path, **kwargs: Any) -> list[Path]:
        """report.html, report.md and the pictures (timeline, memory, stages, study) in out_dir."""
        from autotune.emit.html_report import write_report

        return write_report(self, out_dir, **kwargs)

    def trials_dataframe(self) -> Any:
        """The Optuna trial history as a pandas DataFrame (needs pandas)."""
        return self.study.trials_dataframe()


def _patterns(layout: Layout | None) -> tuple[list[str] | None, list[str] | None]:
    if layout is None:
        return None, None
    return (list(layout.select_patterns) or None, list(layout.comm_patterns) or None)


def search(config: str | Path | TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
           space: SearchSpace | str | Path | None = None, trials: int = 200,
           timeout: float | None = None, seed: int | None = 0, storage: Any = None,
           study_name: str | None = None, device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
           overrides: dict[str, float] | None = None, progress: bool | str = False,
           gap: float | None = 0.005) -> SearchResult:
    """Tune offset, pp_interleave_num and recompute for a config.

    Args:
        config: YAML path or :class:`TrainingConfig`.
        profile: profile path/object; None derives the analytic one for ``device``.
        space: search space (object, YAML path, or None for ``search_spaces/default.yaml``).
        trials: Optuna trials (baselines and heuristic seeds included).
        timeout: wall-clock limit (s) for the whole search; None (default) = bounded by work only
            (reproducible), with :data:`SAFETY_TIMEOUT_S` as a safety net. seed: sampler seed.
        progress: False, True / "bar" (tqdm bar with best value and certified gap), or "lines"
            (one line on stderr every few seconds, for logs).
        storage: None (in memory), a journal file path, a database URL (PostgreSQL: heartbeats,
            a trial whose worker died is failed and retried by Optuna) or an Optuna storage object
            (e.g. one ``RDBStorage`` reused for many searches); an existing study is resumed.
        hbm_mib: HBM budget override (MiB); default ``context.max_device_memory``.
        gap: stop once the certified gap (best - bound) / bound is at most this fraction (>= 0);
            None runs the whole trial budget (no early stop).

    Without ``timeout`` the run is deterministic: same inputs and seed, same trials and answer.
    With ``timeout``, half of it goes to the bound and the solver seeds, the rest to Optuna (the
    answer may then depend on machine speed). Small spaces are enumerated exactly
    (:mod:`autotune.tuner.exact`), so their answer is the optimum and the gap is 0.

    Raises:
        ConfigError: bad config/profile/space, no budget known, or no runnable pp_interleave_num.
    """
    from autotune.tuner.problem import Candidate, even_layers, problem_from_config
    from autotune.tuner.runner import run_study

    t0 = time.monotonic()
    if gap is not None and not gap >= 0:
        raise ConfigError(f"gap must be a fraction >= 0 or None (no early stop), got {gap}", field="gap",
                          value=gap, rule="range")
    cfg = _config(config, hbm_mib)
    if cfg.hbm_mib is None:
        raise ConfigError("no HBM budget: set context.max_device_memory or pass --hbm",
                          field="context.max_device_memory", value=None, rule="missing_key")
    prof = resolve_profile(cfg, profile, device=device, overrides=overrides)
    sp = space if isinstance(space, SearchSpace) else load_search_space(space)
    sched = _schedule(cfg) if sp.pipeline_scheduler == "keep" else sp.pipeline_scheduler
    P, m, N = cfg.pipeline_stage, cfg.micro_batch_num, cfg.num_layers
    problem = problem_from_config(cfg, prof, sp)
    pa = problem.pa
    cands_v = problem.vpp_candidates
    if not cands_v:
        raise ConfigError(f"no pp_interleave_num in {sp.pp_interleave_num} can run with num_layers={N}, "
                          f"pipeline_stage={P}, micro_batch_num={m} ({sched})",
                          field="pp_interleave_num", value=sp.pp_interleave_num, rule="search_space")

    def report(c: Candidate | None) -> CostReport | None:
        if c is None:
            return None
        return evaluate_layout(pa, c.layout(), micro_batch_num=m, schedule=sched, hbm_mib=cfg.hbm_mib,
                             seq_split_num=cfg.seq_split_num)

    try:
        user_layout: Layout | None = layout_from_config(cfg)
    except ConfigError:
        user_layout = None
    seeds: list[Candidate] = []
    baselines: dict[str, CostReport | None] = {"user": None}
    if user_layout is not None:
        try:
            _check_runnable(cfg, user_layout.vpp, sched)
            baselines["user"] = evaluate_layout(pa, user_layout, micro_batch_num=m, schedule=sched,
                                                hbm_mib=cfg.hbm_mib, seq_split_num=cfg.seq_split_num)
            seeds.append(Candidate.from_layout(user_layout, origin="user"))
        except ConfigError:
            pass
    V0 = cfg.pp_interleave_num if cfg.pp_interleave_num in cands_v else cands_v[0]
    even = even_layers(N, P, V0)
    z = np.zeros_like(even)
    full = Candidate(V0, even, even.copy(), z, z, origin="even_full_recompute")
    none = Candidate(V0, even, z, z, z, origin="even_no_recompute")
    baselines["even_full_recompute"] = report(full)
    baselines["even_no_recompute"] = report(none)
    seeds += [full, none]
    from autotune.tuner.solve import bound_and_seeds

    bs = bound_and_seeds(problem, seeds, deadline=None if timeout is None else t0 + timeout * 0.5)
    seeds = bs.seeds
    lb = bs.bound_ms
    stop_at = lb * (1 + gap) if gap is not None and np.isfinite(lb) and lb > 0 else None
    limit = SAFETY_TIMEOUT_S if timeout is None else timeout
    remaining = max(1.0, limit - (time.monotonic() - t0))
    outcome = run_study(problem, seeds=seeds, n_trials=trials, timeout=remaining, seed=seed,
                        storage=storage, study_name=study_name, progress=progress, stop_at_ms=stop_at,
                        polish_deadline=None if timeout is None else time.monotonic() + remaining,
                        bound_ms=lb if np.isfinite(lb) and lb > 0 else None)
    cert = None
    if outcome.best is not None and np.isfinite(lb) and lb > 0:
        cert = max(0.0, (outcome.best.step_ms - lb) / lb)
    sel_p, comm_p = _patterns(user_layout)
    closest = outcome.closest
    if outcome.best is None and closest is None:
        # Every trial was pruned (static memory alone over budget): the seeds are the closest.
        closest = min(problem.score(seeds), key=lambda c: c.excess_mib)
    return SearchResult(best=report(outcome.best), closest=report(closest) if outcome.best is None else None,
                        baselines=baselines, trials=outcome.trials, seconds=time.monotonic() - t0,
                        config=cfg, profile=prof, study=outcome.study,
                        select_patterns=sel_p, comm_patterns=comm_p,
                        lower_bound_ms=float(lb) if np.isfinite(lb) else None, certified_gap=cert,
                        exact=bs.exact, timed_out=outcome.timed_out)
