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

from autotune.config.layout import Layout, layout_from_config, mtp_layers_in_split
from autotune.config.margin import apply_margin
from autotune.config.training import TrainingConfig, load_config
from autotune.cost.report import CostReport, evaluate_layout
from autotune.emit.render import memory_text, report_json
from autotune.emit.yaml_block import canonical_values, deep_merge, dump_yaml, tuned_block
from autotune.errors import ConfigError, InfeasibleError
from autotune.extras import require
from autotune.profile.analytic import analytic_profile
from autotune.profile.schema import ModelProfile, load_profile
from autotune.tuner.space import SearchSpace, load_search_space

__all__ = ["load_config", "load_profile", "resolve_profile", "evaluate", "search", "SearchResult",
           "load_megatron"]


def load_megatron(source: Any) -> Any:
    """A validated Megatron-LM run (:class:`autotune.megatron.run.MegatronRun`) from a YAML/JSON
    file of arguments, a launch script, a mapping or an argv list (docs/megatron.md)."""
    from autotune.megatron.run import build_run

    return build_run(source)

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
    layout = layout_from_config(cfg)          # MindFormers' rules first: the same verdict as `check`
    sched = _schedule(cfg)                    # then a schedule the cost model lacks
    prof = resolve_profile(cfg, profile, device=device, overrides=overrides)
    _check_runnable(cfg, layout.vpp, sched)
    report = evaluate_layout(prof, layout, micro_batch_num=cfg.micro_batch_num, schedule=sched,
                             hbm_mib=cfg.hbm_mib, seq_split_num=cfg.seq_split_num)
    report.warnings[:0] = list(cfg.config_warnings) + list(layout.warnings)   # what `check` warns about
    return report


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
        config, profile: the inputs (with the sub-problem knobs of the best answer applied: free
            boolean recompute knobs, micro_batch_num/batch_size, scheduler); study: the Optuna study of
            the best answer's sub-problem (trial history).
        settings: YAML path -> value of the free space knobs the answer changed (written to
            ``recompute_config`` / ``parallel_config`` / ``runner_config`` / ``parallel.pipeline_config``).
        pareto: with ``objective="time,memory"``, the front of step time vs worst-stage peak among
            feasible configs, fastest first: dicts {step_time_ms, peak_mib, margin_mib (room under
            budget − safety margin), headroom_mib (room under the budget), config, settings,
            select_patterns, comm_patterns}; None otherwise. pareto_exact: True when
            every sub-problem's front was computed exactly.
        subproblems: number of sub-problems searched (scheduler × knobs × micro_batch_num × pattern
            sets; 1 for the default space).
        hbm_margin_mib: the safety margin (MiB) kept free below the budget; the reports' and
            ``config``'s budget is then the limit budget − margin (:mod:`autotune.config.margin`).
        user_config_error: why the "user" baseline is missing (``{"rule", "field", "message"}``:
            the config's own layout breaks a rule, or lies outside the searched space); None when
            it was evaluated.
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
    settings: dict[str, Any] = field(default_factory=dict)
    pareto: list[dict[str, Any]] | None = None
    pareto_exact: bool = False
    subproblems: int = 1
    hbm_margin_mib: float = 0.0
    user_config_error: dict[str, Any] | None = None

    def tuned_values(self) -> dict[str, Any]:
        """Canonical MindFormers values of the best config (offset, pp_interleave_num, recompute…)."""
        report = self.best or self.closest
        if report is None:
            raise InfeasibleError("the search evaluated no configuration")
        return canonical_values(report.layout, use_legacy=self.config.use_legacy,
                                select_patterns=self.select_patterns, comm_patterns=self.comm_patterns,
                                mtp_in_split=mtp_layers_in_split(self.config))

    def tuned_block(self) -> dict[str, Any]:
        """Nested mapping of only the tuned MindFormers keys (to paste)."""
        report = self.best or self.closest
        block = tuned_block(self.tuned_values(), scheduler=report.schedule if report else "1f1b")
        return deep_merge(block, _nested(self.settings)) if self.settings else block

    def to_yaml(self, *, full: bool = True) -> str:
        """The tuned config as YAML: the user's whole config with the tuned keys written over it
        (``full=True``) or just the tuned keys. A comment header lists the predicted numbers.

        With ``full=True`` and a config read from a file, the tuned values are spliced into the
        file's own text (:func:`autotune.emit.splice.splice`): comments, key order and formatting
        elsewhere stay as the user wrote them, so a diff shows only the tuned lines (and the header).
        """
        report = self.best or self.closest
        head = ["autotune: tuned pipeline layout"]
        if report is not None:
            head.append(f"predicted step time {report.step_time_ms:.1f} ms, idle (bubble) "
                        f"{report.bubble_fraction:.1%} of device time, {memory_text(report, self.hbm_margin_mib)}")
        user = self.baselines.get("user")
        if user is not None and report is not None:
            head.append(f"user's config: {user.step_time_ms:.1f} ms, fits: {user.fits}")
        head.append("tuned keys: model.model_config.{offset, pp_interleave_num}, parallel.pipeline_config, "
                    "recompute_config.{recompute, select_recompute, select_comm_recompute}"
                    + "".join(f", {k}" for k in self.settings))
        block = self.tuned_block()
        header = "\n".join(head)
        source = Path(self.config.source)
        if full and source.is_file():
            from autotune.emit.splice import leaves, splice

            text, _ = splice(source.read_text(encoding="utf-8"), leaves(block))
            return "".join(f"# {line}\n" for line in head) + text
        data = deep_merge(self.config.raw, block) if full else block
        return dump_yaml(data, header=header)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``autotune search --format json``."""
        def d(r: CostReport | None) -> dict[str, Any] | None:
            if r is None:
                return None
            out = report_json(r, self.hbm_margin_mib)
            out["config"] = canonical_values(r.layout, use_legacy=self.config.use_legacy,
                                             select_patterns=self.select_patterns,
                                             comm_patterns=self.comm_patterns,
                                             mtp_in_split=mtp_layers_in_split(self.config))
            return out
        return {"best": d(self.best), "closest": d(self.closest) if self.best is None else None,
                "baselines": {k: d(v) for k, v in self.baselines.items()},
                "trials": self.trials, "seconds": self.seconds,
                "lower_bound_ms": self.lower_bound_ms, "certified_gap": self.certified_gap,
                "exact": self.exact, "settings": dict(self.settings), "subproblems": self.subproblems,
                "hbm_margin_mib": self.hbm_margin_mib,
                "user_config_error": self.user_config_error,
                **({"pareto": self.pareto, "pareto_exact": self.pareto_exact}
                   if self.pareto is not None else {})}

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
        """The Optuna trial history as a pandas DataFrame.

        Raises:
            MissingExtraError: pandas is not installed (``pip install 'autotune[report]'``).
        """
        require(("pandas",), "report", "trials_dataframe()")
        return self.study.trials_dataframe()


def _nested(settings: dict[str, Any]) -> dict[str, Any]:
    """{"a.b.c": v} -> {"a": {"b": {"c": v}}}."""
    out: dict[str, Any] = {}
    for path, v in settings.items():
        node = out
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = v
    return out


def _patterns(layout: Layout | None) -> tuple[list[str] | None, list[str] | None]:
    if layout is None:
        return None, None
    return (list(layout.select_patterns) or None, list(layout.comm_patterns) or None)


OBJECTIVES = ("time", "time,memory")


def search(config: Any = None, profile: str | Path | ModelProfile | None = None, *,
           space: SearchSpace | str | Path | None = None, trials: int = 200,
           timeout: float | None = None, seed: int | None = 0, storage: Any = None,
           study_name: str | None = None, device: str = DEFAULT_DEVICE, hbm_mib: float | None = None,
           overrides: dict[str, float] | None = None, progress: bool | str = False,
           gap: float | None = 0.005, objective: str = "time", megatron_args: Any = None,
           megatron_space: Any = None, hbm_margin: float | str | None = None) -> Any:
    """Tune offset, pp_interleave_num and recompute (and the space's other free knobs) for a config.

    Args:
        config: YAML path or :class:`TrainingConfig`.
        profile: profile path/object; None derives the analytic one for ``device``.
        space: search space (object, YAML path, or None for ``search_spaces/default.yaml``).
        trials: Optuna trials per sub-problem (baselines and heuristic seeds included).
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

    Without ``timeout`` the run is deterministic: same inputs and seed, same trials and answer.
    With ``timeout``, half of it goes to the bound and the solver seeds, the rest to Optuna (the
    answer may then depend on machine speed). Small spaces are enumerated exactly
    (:mod:`autotune.tuner.exact`), so their answer is the optimum and the gap is 0. A space with
    sub-problem knobs (:func:`autotune.tuner.space.expand_space`) searches each sub-problem (in
    order of its lower bound; one whose bound cannot beat the best found is skipped) in its own
    study ``<study_name>-<i>``; the bound is the least over all sub-problems.

    Raises:
        ConfigError: bad config/profile/space/gap/objective, no budget known, or no runnable
            pp_interleave_num.
    """
    from autotune.tuner.problem import Candidate, Problem, even_layers, runnable_vpp
    from autotune.tuner.runner import run_study
    from autotune.tuner.solve import bound_and_seeds
    from autotune.tuner.space import expand_space

    from autotune.megatron.run import MegatronRun

    if megatron_args is not None or isinstance(config, MegatronRun):
        from autotune.megatron.search import search_megatron

        if hbm_margin not in (None, 0):
            raise ConfigError("hbm_margin is not supported for Megatron-LM input yet; lower hbm_mib instead",
                              field="hbm_margin", value=hbm_margin, rule="usage")
        run = load_megatron(megatron_args if megatron_args is not None else config)
        return search_megatron(run, space=megatron_space, device="h100" if device == DEFAULT_DEVICE else device,
                               hbm_mib=hbm_mib, overrides=overrides, seed=seed or 0, gap=gap)
    if config is None:
        raise ConfigError("give a config (or megatron_args)", field="config", value=None, rule="missing_key")
    t0 = time.monotonic()
    if gap is not None and not gap >= 0:
        raise ConfigError(f"gap must be a fraction >= 0 or None (no early stop), got {gap}", field="gap",
                          value=gap, rule="range")
    objective = objective.replace(" ", "")
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}",
                          field="objective", value=objective, rule="choice")
    cfg = _config(config, hbm_mib)
    if cfg.hbm_mib is None:
        raise ConfigError("no HBM budget: set context.max_device_memory or pass --hbm",
                          field="context.max_device_memory", value=None, rule="missing_key")
    cfg, margin_mib = apply_margin(cfg, hbm_margin, field="hbm_margin")
    sp = space if isinstance(space, SearchSpace) else load_search_space(space)
    if sp.pipeline_scheduler == "keep":
        _schedule(cfg)
    variants = expand_space(cfg, sp, profile, device=device, overrides=overrides)
    P, N = cfg.pipeline_stage, cfg.num_layers
    subs: list[tuple[Any, Problem]] = []
    for var in variants:
        c = var.cfg
        vs = runnable_vpp(N, P, c.micro_batch_num, var.schedule, sp.pp_interleave_num, c.seq_split_num)
        if not vs:
            continue
        # MindFormers rejects full recompute with seq_split_num > 1 (R_SEQPIPE_RECOMPUTE): never write it
        kinds = tuple(k for k in sp.recompute_kinds if not (k == "full" and c.seq_split_num > 1))
        problem = Problem(var.pa, P=P, m=c.micro_batch_num, schedule=var.schedule, hbm_mib=float(cfg.hbm_mib),
                          vpp_candidates=vs, kinds=kinds, max_abs_offset=sp.max_abs_offset,
                          seq_split_num=c.seq_split_num, recompute_granularity=sp.recompute_granularity)
        subs.append((var, problem))
    if not subs:
        v0 = variants[0]
        raise ConfigError(f"no pp_interleave_num in {sp.pp_interleave_num} can run with num_layers={N}, "
                          f"pipeline_stage={P}, micro_batch_num={v0.cfg.micro_batch_num} ({v0.schedule})",
                          field="pp_interleave_num", value=sp.pp_interleave_num, rule="search_space")

    def report(var: Any, c: Candidate | None) -> CostReport | None:
        if c is None:
            return None
        return evaluate_layout(var.pa, c.layout(), micro_batch_num=var.cfg.micro_batch_num, schedule=var.schedule,
                               hbm_mib=cfg.hbm_mib, seq_split_num=var.cfg.seq_split_num)

    user_error: dict[str, Any] | None = None
    try:
        user_layout: Layout | None = layout_from_config(cfg)
    except ConfigError as exc:   # the search still runs; the result says why there is no baseline
        user_layout, user_error = None, exc.to_dict()
    # Baselines on the first sub-problem (the config's own knobs; the first scheduler candidate).
    var0, prob0 = subs[0]
    baselines: dict[str, CostReport | None] = {"user": None}
    prepared = []
    for k, (var, problem) in enumerate(subs):
        seeds: list[Candidate] = []
        if user_layout is not None and user_layout.vpp in problem.vpp_candidates:
            seeds.append(Candidate.from_layout(user_layout, origin="user"))
            if k == 0:
                baselines["user"] = report(var, seeds[0])
        V0 = cfg.pp_interleave_num if cfg.pp_interleave_num in problem.vpp_candidates else problem.vpp_candidates[0]
        even = even_layers(N, P, V0)
        z = np.zeros_like(even)
        full = Candidate(V0, even, even.copy(), z, z, origin="even_full_recompute")
        none = Candidate(V0, even, z, z, z, origin="even_no_recompute")
        if k == 0:
            baselines["even_full_recompute"] = report(var, full)
            baselines["even_no_recompute"] = report(var, none)
        seeds += ([full] if "full" in problem.kinds else []) + [none]  # only what the space may write
        share = None if timeout is None else t0 + timeout * 0.5 * (k + 1) / len(subs)
        prepared.append((var, problem, bound_and_seeds(problem, seeds, deadline=share)))
    if baselines["user"] is None and user_error is None and user_layout is not None:
        user_error = {"rule": "R_USER_OUTSIDE_SPACE", "field": "model.model_config.pp_interleave_num",
                      "message": f"your config (pp_interleave_num {user_layout.vpp}, {var0.schedule}) is not "
                                 f"in the searched space (pp_interleave_num candidates "
                                 f"{list(prob0.vpp_candidates)} runnable with these sizes)"}
    bounds = [bs.bound_ms for _, _, bs in prepared]
    lb = min(bounds)
    stop_at = lb * (1 + gap) if gap is not None and np.isfinite(lb) and lb > 0 else None
    limit = SAFETY_TIMEOUT_S if timeout is None else timeout
    order = sorted(range(len(prepared)), key=lambda i: (bounds[i], i))
    best: tuple[Any, Candidate] | None = None
    closest: tuple[Any, Candidate] | None = None
    study = None
    n_trials = 0
    timed_out = False
    all_exact = all(bs.exact for _, _, bs in prepared)
    pareto_pool: list[tuple[Any, Candidate]] = []
    pareto_exact = True
    for rank, i in enumerate(order):
        var, problem, bs = prepared[i]
        pareto = objective == "time,memory"
        if not pareto and best is not None and (bounds[i] >= best[1].step_ms - 1e-9
                                                or (stop_at is not None and best[1].step_ms <= stop_at)):
            continue  # cannot beat the best found, or the gap target is met
        remaining = max(1.0, limit - (time.monotonic() - t0))
        name = study_name if len(prepared) == 1 else f"{study_name or 'autotune'}-{i}"
        outcome = run_study(problem, seeds=bs.seeds, n_trials=trials, timeout=remaining, seed=seed,
                            storage=storage, study_name=name, progress=progress, stop_at_ms=stop_at,
                            polish_deadline=None if timeout is None else time.monotonic() + remaining,
                            bound_ms=lb if np.isfinite(lb) and lb > 0 else None)
        n_trials += outcome.trials
        timed_out = timed_out or outcome.timed_out
        if study is None:
            study = outcome.study
        if outcome.best is not None and (best is None or outcome.best.step_ms < best[1].step_ms - 1e-9):
            best, study = (var, outcome.best), outcome.study
        cl = outcome.closest
        if outcome.best is None and cl is None:
            cl = min(problem.score(list(bs.seeds)), key=lambda c: c.excess_mib)
        if cl is not None and (closest is None or cl.excess_mib < closest[1].excess_mib):
            closest = (var, cl)
        if pareto:
            pareto_pool += _front_of(problem, var, outcome, bs, sp)
            pareto_exact = pareto_exact and bs.exact and (sp.recompute_granularity == "mini_stage"
                                                          or problem.vpp_candidates == [1])
    cert = None
    if best is not None and np.isfinite(lb) and lb > 0:
        cert = max(0.0, (best[1].step_ms - lb) / lb)
    chosen = best or closest
    var = chosen[0] if chosen else var0
    sel_p, comm_p = _patterns(user_layout)
    if var.select_patterns is not None:
        sel_p = var.select_patterns
    if var.comm_patterns is not None:
        comm_p = var.comm_patterns
    front = None
    if objective == "time,memory":
        from autotune.tuner.pareto import non_dominated

        front = []
        for v, c in non_dominated(pareto_pool, step=lambda x: x[1].step_ms, peak=lambda x: x[1].peak_mib):
            sp_v = v.select_patterns if v.select_patterns is not None else _patterns(user_layout)[0]
            cp_v = v.comm_patterns if v.comm_patterns is not None else _patterns(user_layout)[1]
            front.append({"step_time_ms": c.step_ms, "peak_mib": c.peak_mib,
                          "margin_mib": float(cfg.hbm_mib) - c.peak_mib,
                          "headroom_mib": float(cfg.hbm_mib) + margin_mib - c.peak_mib,
                          "config": canonical_values(c.layout(), use_legacy=cfg.use_legacy,
                                                     select_patterns=sp_v, comm_patterns=cp_v,
                                                     mtp_in_split=mtp_layers_in_split(cfg)),
                          "settings": dict(v.settings), "schedule": v.schedule, "origin": c.origin})
    return SearchResult(best=report(var, best[1]) if best else None,
                        closest=report(var, closest[1]) if best is None and closest else None,
                        baselines=baselines, trials=n_trials, seconds=time.monotonic() - t0,
                        config=var.cfg, profile=var.profile, study=study,
                        select_patterns=sel_p, comm_patterns=comm_p,
                        lower_bound_ms=float(lb) if np.isfinite(lb) else None, certified_gap=cert,
                        exact=all_exact, timed_out=timed_out, settings=dict(var.settings),
                        pareto=front, pareto_exact=bool(front is not None and pareto_exact),
                        subproblems=len(prepared), hbm_margin_mib=margin_mib, user_config_error=user_error)


def _front_of(problem: Any, var: Any, outcome: Any, bs: Any, sp: SearchSpace) -> list[tuple[Any, Any]]:
    """Front candidates of one sub-problem: exact when it was enumerated (mini-stage granularity),
    else the heuristic budget ladder merged with every feasible trial and seed."""
    from autotune.tuner.pareto import exact_front, heuristic_front
    from autotune.tuner.runner import candidate_from_trial

    evaluated = []
    for t in outcome.study.get_trials(deepcopy=False):
        c = candidate_from_trial(t)
        if c is not None and t.values:
            evaluated.append(c)
    evaluated = problem.score(evaluated + [c for c in bs.seeds]) if evaluated or bs.seeds else []
    if bs.exact and (sp.recompute_granularity == "mini_stage" or problem.vpp_candidates == [1]):
        pts = exact_front(problem)
    else:
        pts = heuristic_front(problem, evaluated)
    return [(var, c) for c in pts + [c for c in evaluated if c.excess_mib <= 0]]
