"""The outcome of a search as data (no Optuna import: :mod:`autotune.api` builds its result class
on it without loading the search machinery)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.config.training import TrainingConfig
from autotune.cost.report import CostReport
from autotune.profile.schema import ModelProfile

#: Safety net of one search without ``timeout`` (s). The default search is bounded by work, not by
#: the clock (``trials``, a fixed number of local-search moves, the certified-gap stop), so the
#: same seed gives the same answer on any machine; this limit only stops pathological runs, and
#: when it fires ``timed_out`` is True (the answer may then depend on machine speed).
SAFETY_TIMEOUT_S = 300.0

#: How the stop line names why the trials ended after a cut bound phase (``trials_stopped_by``).
_TRIALS_ENDED = {"neighbourhood": " (at a local optimum: no neighbour of the best config is faster)",
                 "gap": " (at the certified-gap target)",
                 "work": " (at the study's work cap)",
                 "trials": " (the trial budget was used)"}


@dataclass
class SearchOutcome:
    """Outcome of a search (:class:`autotune.api.SearchResult` adds the YAML, JSON and views).

    Attributes:
        best: cost report of the best memory-feasible config (None when nothing fits).
        closest: when nothing fits, the config with the least memory excess.
        baselines: ``user``, ``even_full_recompute``, ``even_no_recompute`` -> report or None.
        trials: trials in the studies; seconds: wall time of the search (s), from reading the
            config to the answer (the interpreter's start and the imports, 0.7-0.8 s on this project's
            machine, come before it; writing the output after it).
        config, profile: the inputs (with the sub-problem knobs of the best answer applied: free
            boolean recompute knobs, micro_batch_num/batch_size, scheduler); study: the Optuna study of
            the best answer's sub-problem (trial history).
        select_patterns, comm_patterns: the pattern sets of the answer (None = MindFormers' defaults).
        lower_bound_ms: a proof that no memory-feasible layout of the space runs faster (ms);
            equal to the optimum when the space was enumerated (``exact``).
        certified_gap: (best - lower_bound) / lower_bound, a fraction (None when nothing fits).
        lower_bound_by_vpp: pp_interleave_num V -> a lower bound (ms) on every memory-feasible
            layout of the space with that V (None: none fits, proven); ``lower_bound_ms`` is the
            least of them, so this shows which V leaves the gap open. None when the space was
            enumerated, holds a single V or nothing fits.
        exact: True when the exact oracle enumerated the whole space.
        timed_out: True when a wall-clock limit (``timeout`` or the safety net) cut the search;
            ``certified_gap`` is then the gap at that moment.
        stopped_by: why the search ended: ``"gap"`` (the certified-gap target was reached),
            ``"neighbourhood"`` (no neighbour of the best config beats it: a local optimum, more
            trials could not help), ``"work"`` (the study's neighbourhood scans used their work cap,
            :data:`~autotune.tuner.sampler.SAMPLER_OPS` simulated ops: only large schedules reach
            it; the answer still got the final local search and the 1-opt finish),
            ``"trials"`` (the trial budget was used), ``"timeout"`` (the
            ``timeout`` wall clock), ``"safety_net"`` (the :data:`SAFETY_TIMEOUT_S` wall clock of a
            search without one) or ``"static_memory"`` (no layout can fit: static memory alone
            exceeds the budget, ``min_static_mib``; decided before the bound phase, no trials).
        time_limit_s: the wall-clock limit that applied (s; None when the search had none).
        settings: YAML path -> value of the free space knobs the answer changed (written to
            ``recompute_config`` / ``parallel_config`` / ``runner_config`` / ``parallel.pipeline_config``).
        pareto: with ``objective="time,memory"``, the front of step time vs worst-stage peak among
            feasible configs, fastest first: dicts {step_time_ms, peak_mib, margin_mib (room under
            budget − safety margin), headroom_mib (room under the budget), config, settings,
            schedule, origin}; None otherwise. pareto_exact: True when every sub-problem's front
            was computed exactly.
        subproblems: number of sub-problems searched (scheduler × knobs × micro_batch_num × pattern
            sets; 1 for the default space).
        hbm_margin_mib: the safety margin (MiB) kept free below the budget; the reports' and
            ``config``'s budget is then the limit budget − margin (:mod:`autotune.config.margin`).
        user_config_error: why the "user" baseline is missing (``{"rule", "field", "message"}``:
            the config's own layout breaks a rule, or lies outside the searched space); None when
            it was evaluated.
        min_static_mib, min_peak_mib: with ``stopped_by="static_memory"``, lower bounds on the
            worst stage's static MiB, and static + one micro-batch's activations or one layer's
            backward workspace, over every layout
            (:meth:`autotune.tuner.problem.Problem.memory_floor_mib`); the second is above the
            budget (less the margin). None otherwise.
        bound_phase_cut: the bound phase's half of the wall clock (``--timeout``, or the safety
            net without one) ran out (the stop line says so, and whether the trials then ended on
            their own, before the limit, or met it too: ``trials_stopped_by``).
        trials_stopped_by: why the trials (the study) ended, in ``stopped_by``'s words with the
            bound phase's cut not counted: ``stopped_by`` itself unless ``bound_phase_cut`` and
            the trials ended on their own (then e.g. ``"neighbourhood"`` where ``stopped_by`` says
            ``"timeout"``); None when no study ran (``"static_memory"``).
        bound_phase_s: the wall clock the bound phase had (s): half of what was left of the limit
            (``--timeout``, or the safety net without one) after reading the config and compiling
            its schedules; through the CLI the limit counts from the process's start, and the
            interpreter start, the imports and 0.5 s kept for writing the output are taken off it
            first (:func:`autotune.commands.tune._search_timeout`). None when the search had no
            limit or stopped before the bound phase.
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
    lower_bound_by_vpp: dict[int, float | None] | None = None
    exact: bool = False
    timed_out: bool = False
    stopped_by: str = "trials"
    time_limit_s: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    pareto: list[dict[str, Any]] | None = None
    pareto_exact: bool = False
    subproblems: int = 1
    hbm_margin_mib: float = 0.0
    user_config_error: dict[str, Any] | None = None
    min_static_mib: float | None = None
    min_peak_mib: float | None = None
    #: True when the bound phase's share of ``--timeout`` (half of it) ran out (the study may
    #: then have ended on its own, before the limit, or met it too: ``trials_stopped_by``)
    bound_phase_cut: bool = False
    #: Why the trials (the study) ended, in ``stopped_by``'s words, the bound phase's cut not
    #: counted: the same as ``stopped_by`` but when ``bound_phase_cut`` (then e.g.
    #: ``"neighbourhood"`` where ``stopped_by`` says ``"timeout"``); None when no study ran
    trials_stopped_by: str | None = None
    #: The bound phase's share of the wall clock (s; half of what the limit left after start-up and
    #: reading), None without a limit
    bound_phase_s: float | None = None
    #: True when, with the time a ``--timeout`` left after the trials ended on their own, a local
    #: search and kicks from their answer found a faster config (run as one more trial:
    #: :func:`autotune.tuner.search.answer_with_time_left`)
    time_left_faster: bool = False
    #: True when, under ``--timeout``, the trials got only half of what the bound phase left,
    #: because a V still held only a floor then (the other half raises that bound:
    #: ``search._trial_limit``); "the trials met the clock" then means their half of it
    trials_share_halved: bool = False
    #: pp_interleave_num candidates of the search space that cannot run with this config -> why
    #: (e.g. interleaved 1F1B needs micro_batch_num to be a multiple of pipeline_stage); not searched
    vpp_not_searched: dict[int, str] = field(default_factory=dict)

    def static_floor_text(self) -> str:
        """The memory floors of a ``"static_memory"`` verdict in words (the stop line's and the
        R_HBM_INFEASIBLE error's): "on the worst stage of every layout, static memory ... needs at
        least S MiB and with one micro-batch's activations (or one layer's backward workspace) at
        least P MiB"."""
        return (f"on the worst stage of every layout, static memory (weights, gradients, optimizer state, "
                f"embedding / LM head) needs at least {self.min_static_mib:.0f} MiB and with one micro-batch's "
                f"activations (or one layer's backward workspace) at least {self.min_peak_mib:.0f} MiB")

    @property
    def no_fit_proven(self) -> bool | None:
        """When nothing fitting was found: True when it is proven that no layout of the space fits
        the budget (static memory alone exceeds it, the bounds' memory relaxation has no feasible
        layout, ``lower_bound_ms`` None, or the space was enumerated), False when the search found
        none but the bounds leave room for one (``lower_bound_ms`` then says how fast it would be
        at best). None when a fitting config was found."""
        if self.best is not None:
            return None
        return bool(self.stopped_by == "static_memory" or self.exact or self.lower_bound_ms is None)

    def no_fit_headline(self) -> str:
        """"NO CONFIGURATION FITS" when that is proven (:attr:`no_fit_proven`), else "NO
        CONFIGURATION FOUND THAT FITS": the headline of a search where nothing fitting was found."""
        return "NO CONFIGURATION FITS" if self.no_fit_proven else "NO CONFIGURATION FOUND THAT FITS"

    def stop_text(self) -> str:
        """One line saying why the search ended and the certified gap then, e.g. ``CUT SHORT by the
        300 s safety net, a wall clock (…); certified gap then 14.16 %``; when only the bound
        phase's share of the clock ran out, further sentences say what it cut and how the trials
        ended. Every output form prints it (text, report, notebook view, sweep report)."""
        gap = (f"{self.certified_gap:.2%}" if self.certified_gap is not None else
               "n/a (nothing fits)" if self.no_fit_proven else "n/a (none found that fits)")
        if self.timed_out:
            which = (f"its {self.time_limit_s:g} s timeout" if self.stopped_by == "timeout"
                     else f"the {self.time_limit_s:g} s safety net")
            phase_only = self.bound_phase_cut and self.stopped_by in ("timeout", "safety_net")
            trials_own = self.trials_stopped_by not in ("timeout", "safety_net")  # they ended on their own
            # then the run stopped before the limit (a new user read a 7.5 s run's "CUT SHORT by its
            # 10 s timeout" as the limit reached)
            where = f" in the bound phase only (the search ended after {self.seconds:.1f} s)" \
                if phase_only and trials_own else ""
            head = (f"CUT SHORT by {which}{where}, a wall clock (the answer may depend on the machine's speed "
                    f"and load); certified gap then {gap}")
            if not phase_only:
                return head
            share = (f"{self.bound_phase_s:.1f} s, half of what the limit left after start-up and reading"
                     if self.bound_phase_s is not None else
                     f"half of the time left after reading, at most {self.time_limit_s / 2:g} s")
            if trials_own:
                trials = f"The trials then ended on their own{_TRIALS_ENDED.get(self.trials_stopped_by or '', '')}"
            elif self.trials_share_halved:
                trials = ("The trials then met their half of the time left (a pp_interleave_num held only a "
                          "floor: the other half went to its bound)")
            else:
                trials = "The trials then met the clock too"
            parts = [head, f"The bound phase ({share}) stopped its local search or later bound passes at "
                     "their deadlines", trials]
            if self.time_left_faster:
                parts.append("With the time left, a local search and kicks from their answer found a faster config")
            return ". ".join(parts) + "."
        if self.stopped_by == "static_memory":
            limit = self.config.hbm_mib
            return (f"stopped before the bound phase: {self.static_floor_text()}, above the limit of "
                    f"{limit:.0f} MiB; no trials run")
        if self.stopped_by == "neighbourhood" and self.best is None:
            tail = "" if self.no_fit_proven else "; a fitting layout elsewhere is not ruled out"
            return (f"stopped at a local optimum after {self.trials} trials: no neighbour of the closest "
                    f"config (one or two layers moved, a 1-opt move, one stage's recompute changed) is closer to "
                    f"fitting{tail}; certified gap {gap}")
        if self.stopped_by == "neighbourhood":
            return (f"stopped at a local optimum after {self.trials} trials: no neighbour of the best "
                    f"config (one or two layers moved, a 1-opt move, one stage's recompute changed) is faster, so more "
                    f"trials could not help; certified gap {gap}")
        if self.stopped_by == "work":
            return (f"stopped at the study's work cap after {self.trials} trials: its neighbourhood scans "
                    f"used their budget of simulated ops (a cap that only large schedules reach); the answer "
                    f"is 1-opt; certified gap {gap}")
        if self.stopped_by == "gap":
            return f"stopped at the certified-gap target after {self.trials} trials; certified gap {gap}"
        return f"stopped after the trial budget ({self.trials} trials); certified gap {gap}"
