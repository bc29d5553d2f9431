"""The Optuna study as a readable record (issue 19 item 7): the neighbourhood sampler's proposals,
parameters in the config's terms, the memory constraint where optuna-dashboard reads it, the
local-optimum stop and determinism."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import optuna
import pytest

import autotune
from autotune.tuner.params import decode, encode, layout_error, param_names, representable
from autotune.tuner.problem import Candidate, even_layers
from autotune.tuner.runner import run_study
from autotune.tuner.sampler import NeighbourhoodSampler, trial_layout
from tests.search.test_exact_bounds import syn2_problem

DATA = Path(__file__).resolve().parents[1] / "sweep" / "data"
TS = optuna.trial.TrialState


def _baselines(problem):
    """The even split with full and with no recompute (the only seeds: the sampler does the rest)."""
    even = even_layers(problem.N, problem.P, 1)
    z = np.zeros_like(even)
    return [Candidate(1, even, even.copy(), z, z, origin="even_full_recompute"),
            Candidate(1, even, z, z, z, origin="even_no_recompute")]


def _run(cap: float = 150, n: int = 40):
    problem = syn2_problem(cap)
    return problem, run_study(problem, seeds=_baselines(problem), n_trials=n, seed=0)


def test_params_are_the_layout_in_config_terms() -> None:
    problem = syn2_problem(150)
    c = Candidate(1, np.array([[2, 4, 4, 2]]), np.array([[0, 1, 4, 0]]), *(np.zeros((2, 1, 4), dtype=np.int64)))
    p = encode(problem, c)
    assert p == {"pp_interleave_num": 1, "layers_s0_v0": 2, "layers_s1_v0": 4, "layers_s2_v0": 4, "layers_s3_v0": 2,
                 "recompute_s0_v0": 0, "recompute_s1_v0": 1, "recompute_s2_v0": 4, "recompute_s3_v0": 0}
    assert list(p)[1:] == param_names(problem, 1)
    assert decode(problem, p).key() == c.key()
    with pytest.raises(ValueError, match="sum to 13"):
        decode(problem, {**p, "layers_s0_v0": 3})
    with pytest.raises(ValueError, match=r"recompute counts .* outside \[0, layers\]"):
        decode(problem, {**p, "recompute_s0_v0": 3})   # 3 recomputed of 2 layers
    v2 = Candidate(2, np.ones((2, 4), dtype=np.int64), *(np.zeros((3, 2, 4), dtype=np.int64)))
    assert layout_error(problem, v2) == "pp_interleave_num 2 is not one of [1]"


def test_sampler_proposes_improving_neighbours_of_the_incumbent() -> None:
    problem, out = _run()
    trials = out.study.get_trials(deepcopy=False)
    sampler = NeighbourhoodSampler(problem)
    proposed = [t for t in trials if t.user_attrs["origin"] == "neighbour"]
    assert len(proposed) >= 2 and out.proposed == len(proposed)
    for t in proposed:
        c = decode(problem, t.params)                    # a valid layout of the space
        assert representable(problem, c) and c.key() == trial_layout(t).key()
        inc = sampler.incumbent(trials[:t.number])       # the best trial before it
        moved = int(np.abs(c.layers - inc.layers).sum())
        assert moved % 2 == 0                              # layers moved, none lost
        assert t.values[0] < inc.step_ms or max(0.0, t.user_attrs["hbm_excess_mib"]) < max(0.0, inc.excess_mib)
        assert c.key() in [x.key() for x in sampler._ranked(inc)]  # what a fresh sampler proposes from
    assert len({t.user_attrs["layout"] for t in trials}) == len(trials)   # never a layout twice


def test_sampler_proposes_improving_moves_on_distinct_devices_together() -> None:
    """SYN-2 at 150 MiB from the even split with full recompute (148 ms; no recompute is 5 MiB
    over): the best neighbour is 125 ms (a layer from stage 3 to stage 1, both dropping their full
    recompute); the best one on the other two devices is 142 ms (a layer from stage 0 to stage 2,
    both dropping it). Together (2 / 4 / 4 / 2 layers, no recompute) they give 118 ms in one trial,
    where one move a trial took 148 -> 125 -> 118."""
    problem, out = _run()
    t = out.study.get_trials(deepcopy=False)[2]
    c = trial_layout(t)
    assert t.user_attrs["origin"] == "neighbour" and t.values[0] == pytest.approx(118.0)
    assert c.layers.tolist() == [[2, 4, 4, 2]] and c.rec.sum() == 0
    inc = NeighbourhoodSampler(problem).incumbent(out.study.get_trials(deepcopy=False)[:2])
    assert inc.step_ms == pytest.approx(148.0) and (c.layers != inc.layers).any(axis=0).sum() == 4
    moves = {(tuple(x.layers[0]), tuple(x.rec[0])): x.step_ms for x in NeighbourhoodSampler(problem)._ranked(inc)}
    assert moves[((3, 4, 3, 2), (3, 0, 3, 0))] == pytest.approx(125.0) == min(v for v in moves.values() if v > 118)
    assert moves[((2, 3, 4, 3), (0, 3, 0, 3))] == pytest.approx(142.0)


def test_study_stops_at_a_local_optimum_and_says_so() -> None:
    problem, out = _run(n=200)
    assert out.stopped_by == "neighbourhood" and out.trials < 200
    assert NeighbourhoodSampler(problem).propose(out.study) is None    # nothing left that could help
    # the answer is SYN-2's exact optimum at cap 150 (tests/search/test_exact_bounds.py)
    from autotune.tuner.exact import exact_optimum

    assert out.best.step_ms == pytest.approx(exact_optimum(problem).best.step_ms)


def test_constraint_is_stored_where_optuna_and_the_dashboard_read_it() -> None:
    _, out = _run()
    trials = out.study.get_trials(deepcopy=False)
    fits = [t for t in trials if t.user_attrs["fits"]]
    over = [t for t in trials if not t.user_attrs["fits"]]
    assert fits and over                                  # even split without recompute: 12 layers' activations
    for t in trials:
        excess = t.user_attrs["hbm_excess_mib"]
        assert t.system_attrs["constraints"] == pytest.approx([excess])   # Optuna's list format
        assert t.constraints == {"0": pytest.approx(excess)}
        assert (excess <= 0) == t.user_attrs["fits"]
        assert t.user_attrs["peak_mib"] == pytest.approx(150 + excess)
    none = next(t for t in trials if t.user_attrs["origin"] == "even_no_recompute")
    # 1F1B p=4: stage 0 keeps 4 micro-batches x 3 layers x 10 MiB + 20 MiB head + 15 MiB static = 155
    assert none.user_attrs["peak_mib"] == pytest.approx(155.0) and none.constraints == {"0": pytest.approx(5.0)}


def test_trials_dataframe_has_readable_columns() -> None:
    pytest.importorskip("pandas")
    r = autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                        trials=30, seed=0, gap=None)
    df = r.trials_dataframe()
    cols = set(df.columns)
    assert {"params_pp_interleave_num", "params_layers_s0_v0", "params_layers_s3_v1", "params_recompute_s0_v0",
            "params_select_recompute_s2_v1", "user_attrs_peak_mib", "user_attrs_fits", "user_attrs_step_ms",
            "user_attrs_origin", "system_attrs_constraints"} <= cols
    assert not [c for c in cols if re.fullmatch(r"params_(w|sel|full|comm)\d+", c)]   # no opaque fractions
    done = df[df.state == "COMPLETE"]
    assert (done.value == done.user_attrs_step_ms).all()
    lay = done[[c for c in cols if c.startswith("params_layers_")]].fillna(0).sum(axis=1)
    assert (lay == r.config.num_layers).all()            # every row is a whole split of the layers
    feasible = done[done.user_attrs_fits.astype(bool)]
    assert feasible.value.min() == pytest.approx(r.best.step_time_ms)
    assert (feasible.user_attrs_peak_mib <= r.best.hbm_budget_mib + 1e-9).all()


def test_same_inputs_give_the_same_trials() -> None:
    problem = syn2_problem(150)
    a = run_study(problem, seeds=_baselines(problem), n_trials=40, seed=0)
    b = run_study(syn2_problem(150), seeds=_baselines(problem), n_trials=40, seed=0)
    ta, tb = a.study.get_trials(deepcopy=False), b.study.get_trials(deepcopy=False)
    assert [t.params for t in ta] == [t.params for t in tb]
    assert [t.values for t in ta] == [t.values for t in tb]


def test_resumed_study_goes_on_where_it_was(tmp_path) -> None:
    """The proposal is a function of the study: a study cut at 3 trials and resumed (a new process
    in a sweep takeover) holds the same trials as one run straight through."""
    problem = syn2_problem(150)
    journal = str(tmp_path / "s.journal")
    run_study(problem, seeds=_baselines(problem), n_trials=3, seed=0, storage=journal, study_name="r",
              local_polish=False)
    resumed = run_study(syn2_problem(150), seeds=_baselines(problem), n_trials=40, seed=0, storage=journal,
                        study_name="r")
    straight = run_study(syn2_problem(150), seeds=_baselines(problem), n_trials=40, seed=0)
    lay = lambda o: [json.loads(t.user_attrs["layout"]) for t in o.study.get_trials(deepcopy=False)]  # noqa: E731
    assert lay(resumed) == lay(straight)


def test_study_stops_at_its_work_cap_and_the_answer_is_still_1_opt(monkeypatch) -> None:
    """With the sampler's work cap (SAMPLER_OPS) below one neighbourhood scan, the study makes the
    proposals of its first incumbent only, stops with ``stopped_by="work"`` (before the uncapped
    study's local optimum), and its answer is still 1-opt: the final local search and the 1-opt
    finish ran (no improving move left, tests/search/test_one_opt.py's check)."""
    import autotune.tuner.sampler as sampler_mod
    from autotune.tuner.heuristic import improving_moves
    from autotune.tuner.outcome import SearchOutcome

    problem, free = _run(n=200)
    monkeypatch.setattr(sampler_mod, "SAMPLER_OPS", 1.0)
    problem, capped = _run(n=200)
    assert capped.stopped_by == "work" and free.stopped_by == "neighbourhood"
    assert 1 <= capped.proposed < free.proposed
    best = problem.score([capped.best])[0]
    layouts, _ = improving_moves(problem, best)
    assert len(layouts.layers) == 0
    text = SearchOutcome(best=None, closest=None, baselines={}, trials=capped.trials, seconds=0.0, config=None,
                         profile=None, study=None, stopped_by="work", certified_gap=0.01).stop_text()
    assert text == (f"stopped at the study's work cap after {capped.trials} trials: its neighbourhood scans used "
                    "their budget of simulated ops (a cap that only large schedules reach); the answer is 1-opt; "
                    "certified gap 1.00%")


def test_under_a_wall_clock_the_best_seed_is_the_first_trial() -> None:
    """With a ``timeout`` the study may run only its first trial (``search`` gives the trials as
    little as ``MIN_TRIALS_S``; Optuna checks the clock before each trial, the first check right
    at its start), so the best ranked seed is enqueued first: the answer is never worse than the
    best seed. Without a timeout the seeds keep their given order."""
    from autotune.tuner.search import MIN_TRIALS_S

    problem = syn2_problem(150)
    seeds = problem.score(_baselines(problem))
    fits = [c for c in seeds if c.excess_mib <= 0]
    assert [c.origin for c in seeds] == ["even_full_recompute", "even_no_recompute"]
    best = min(fits, key=lambda c: c.step_ms)
    slow = list(reversed(seeds)) if seeds[0] is best else seeds  # the best seed last
    assert slow[-1] is best
    out = run_study(problem, seeds=slow, n_trials=40, seed=0, timeout=MIN_TRIALS_S)
    first = out.study.get_trials(deepcopy=False)[0]
    assert first.user_attrs["origin"] == best.origin and first.value == pytest.approx(best.step_ms, rel=1e-12)
    assert out.best is not None and out.best.step_ms <= best.step_ms + 1e-9
    # no time at all: Optuna runs no trial (why the minimum is not 0)
    assert run_study(problem, seeds=slow, n_trials=40, seed=0, timeout=1e-9).trials == 0
    untimed = run_study(problem, seeds=slow, n_trials=40, seed=0)
    assert untimed.study.get_trials(deepcopy=False)[0].user_attrs["origin"] == slow[0].origin
