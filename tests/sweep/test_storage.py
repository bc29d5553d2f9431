"""Storage objects for search(): one RDBStorage shared by many searches, heartbeats with Optuna's own
fail-and-retry of a dead worker's trial (real PostgreSQL, no mocks), and gap=None."""

from __future__ import annotations

import time
import warnings

import optuna
import pytest

import autotune
from autotune.tuner.runner import GRACE_PERIOD_S, make_rdb_storage, open_storage
from autotune.tuner.space import SearchSpace
from tests.sweep.sweep_helpers import DATA

SPACE = SearchSpace(pp_interleave_num=[1, 2], recompute_kinds=["full"])


def test_search_accepts_a_storage_object_and_resume_means_resume(pg_url) -> None:
    """The trial budget is the study's: a re-run with the same budget adds nothing ("366/200 trials"
    before), a larger one adds only the difference, a smaller one none. The study is SYN-2 seeded
    with its two even splits only, so the neighbourhood sampler has trials to propose."""
    from autotune.tuner.runner import run_study
    from tests.search.test_trials import _baselines
    from tests.search.test_exact_bounds import syn2_problem

    storage = make_rdb_storage(pg_url)
    assert open_storage(storage) is storage and storage.get_heartbeat_interval() == 1
    s = autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, trials=9, seed=0,
                        storage=storage, study_name="s0", gap=None)
    assert len(s.study.trials) == s.trials and "s0" in [x.study_name for x in storage.get_all_studies()]
    problem = syn2_problem(100)
    run = lambda n: run_study(problem, seeds=_baselines(problem), n_trials=n, seed=0,  # noqa: E731
                              storage=storage, study_name="s1", local_polish=False)
    a = run(3)
    assert a.trials == 3 and a.ran == 3 and a.stopped_by == "trials" and not a.timed_out  # 2 seeds + 1 proposal
    assert a.proposed == 1
    assert len(a.study.trials) == 3                      # nothing enqueued and left WAITING
    b = run(3)
    assert b.trials == 3 and b.ran == 0 and len(b.study.trials) == 3    # resumed: the budget was used
    c = run(2)
    assert c.trials == 3 and c.ran == 0 and len(c.study.trials) == 3    # a smaller budget runs nothing
    d = run(200)
    assert d.ran == d.trials - 3 > 0 and len(d.study.trials) == d.trials  # only the missing trials ran
    assert d.stopped_by == "neighbourhood" and d.best.step_ms <= a.best.step_ms + 1e-9
    layouts = [t.user_attrs["layout"] for t in d.study.trials]
    assert len(layouts) == len(set(layouts))             # no layout evaluated twice
    # a URL gives the same kind of storage (heartbeats on PostgreSQL)
    assert open_storage(pg_url).get_heartbeat_interval() == 1


@pytest.mark.slow
def test_trials_caps_the_study(tmp_path) -> None:
    """--trials N means at most N finished trials, seeds and the final polish trial included (the
    solver has more seeds than that here: the best ranked ones are kept); the study stops earlier at
    a local optimum."""
    for n in (1, 2, 3):
        r = autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                            trials=n, seed=0, gap=None)
        assert r.trials <= n and len(r.study.trials) == r.trials, n
        # fewer only at a local optimum: the seeds hold the enumerated optimum, nothing beats it
        assert r.trials == n or r.stopped_by == "neighbourhood", n
    one = autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                          trials=1, seed=0, gap=None)
    many = autotune.search(DATA / "small.yaml", DATA / "small_profile.yaml", space=DATA / "small_space.yaml",
                           trials=30, seed=0, gap=None)
    # the one trial is the solver's best seed, which the longer search does not beat by much here
    assert one.best is not None and one.best.step_time_ms >= many.best.step_time_ms - 1e-9


def test_gap_stop_runs_the_queue_first(tmp_path) -> None:
    """A WAITING trial (a dead worker's retry) runs even when the gap target is already met, and no
    seed the study holds is enqueued again; the journal ends with nothing WAITING."""
    import optuna

    from autotune.tuner.runner import run_study
    from autotune.tuner.solve import bound_and_seeds
    from tests.search.test_exact_bounds import syn2_problem

    problem = syn2_problem(150)
    bs = bound_and_seeds(problem, [])
    journal = str(tmp_path / "s.journal")
    first = run_study(problem, seeds=bs.seeds, n_trials=4, seed=0, storage=journal, study_name="g")
    st = first.study
    held = [t for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE]
    # a "dead worker's" trial: re-queue the first trial's parameters as Optuna's retry does
    st.add_trial(optuna.create_trial(state=optuna.trial.TrialState.WAITING, params=held[0].params,
                                     distributions=held[0].distributions, user_attrs=held[0].user_attrs,
                                     system_attrs={"failed_trial": held[0].number}))
    again = run_study(problem, seeds=bs.seeds, n_trials=10, seed=0, storage=journal, study_name="g",
                      stop_at_ms=1e9)           # the gap target is met by every feasible trial
    states = [t.state.name for t in again.study.trials]
    assert "WAITING" not in states
    retry = [t for t in again.study.trials if t.system_attrs.get("failed_trial") == held[0].number]
    assert retry and retry[0].state == optuna.trial.TrialState.COMPLETE
    assert again.ran == 1 and again.stopped_by == "gap"   # the retry ran, nothing else was queued
    keys = [t.user_attrs["layout"] for t in again.study.trials if "failed_trial" not in t.system_attrs]
    assert len(keys) == len(set(keys))


def test_gap_negative_is_an_error() -> None:
    with pytest.raises(autotune.errors.ConfigError) as e:
        autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, gap=-1.0)
    assert e.value.field == "gap"


@pytest.mark.slow
def test_dead_trial_is_failed_and_retried_by_optuna(pg_url) -> None:
    storage = make_rdb_storage(pg_url)
    study = optuna.create_study(storage=storage, study_name="hb")
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("origin", "neighbour")
    storage.record_heartbeat(trial._trial_id)  # then the "worker" dies: no more beats
    polish = study.ask()
    polish.suggest_float("x", 0.0, 1.0)
    polish.set_user_attr("origin", "local-polish")
    storage.record_heartbeat(polish._trial_id)
    time.sleep(GRACE_PERIOD_S + 1.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False)
    assert trials[0].state == optuna.trial.TrialState.FAIL and trials[1].state == optuna.trial.TrialState.FAIL
    waiting = [t for t in trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(waiting) == 1  # the polish trial is not retried
    assert waiting[0].system_attrs["failed_trial"] == 0 and waiting[0].params == {"x": x}
    assert waiting[0].user_attrs["origin"] == "neighbour"


def test_bad_storage_fails_before_the_bound_phase(monkeypatch, tmp_path) -> None:
    """The storage is opened first: a bad URL is reported before any bound or seed is computed."""
    import autotune.tuner.solve as solve

    def never(*a, **k):
        raise AssertionError("the bound phase ran before the storage was checked")

    monkeypatch.setattr(solve, "bound_and_seeds", never)
    with pytest.raises(autotune.errors.ConfigError) as e:
        autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, trials=3,
                        storage="postgresql+psycopg://u:pw@127.0.0.1:1/nodb")
    assert e.value.rule == "storage" and "u:***@127.0.0.1:1/nodb" in str(e.value) and "pw@" not in str(e.value)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(autotune.errors.ConfigError) as e:
        autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, trials=3,
                        storage=str(blocker / "sub" / "s.journal"))
    assert e.value.rule == "storage"


class _GoneAtTell(optuna.storages.InMemoryStorage):
    """An in-memory store that loses its database when Optuna tells a trial's result: the write and
    the read-back both raise SQLAlchemy's OperationalError (the driver's error for a dropped link)."""

    def set_trial_state_values(self, trial_id, state, values=None):
        from sqlalchemy.exc import OperationalError

        if state.is_finished():
            self.gone = True
            raise OperationalError("UPDATE trials", None, Exception("server closed the connection"))
        return super().set_trial_state_values(trial_id, state, values)

    def get_trial(self, trial_id):
        from sqlalchemy.exc import OperationalError

        if getattr(self, "gone", False):
            raise OperationalError("SELECT trials", None, Exception("server closed the connection"))
        return super().get_trial(trial_id)


def test_a_storage_error_at_tell_is_a_storage_error() -> None:
    """What Optuna's study.optimize raises when the database goes away as a trial is told is
    retried by a worker (CI saw Optuna 4's UnboundLocalError('updated_state') raised over the
    OperationalError end a scenario as 'failed'); other errors, NameErrors included, are not."""
    from autotune.tuner.storage import is_storage_error

    study = optuna.create_study(storage=_GoneAtTell())
    with pytest.raises(Exception) as info:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert is_storage_error(info.value), repr(info.value)
    assert not is_storage_error(ValueError("bad value"))
    try:
        try:
            raise ValueError("not the store")
        except ValueError:
            undefined_name  # noqa: B018, F821 - a NameError raised over a non-storage error
    except NameError as exc:
        assert not is_storage_error(exc)
