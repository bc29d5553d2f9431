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


def test_search_accepts_a_storage_object_and_gap_none_runs_the_budget(pg_url) -> None:
    storage = make_rdb_storage(pg_url)
    assert open_storage(storage) is storage and storage.get_heartbeat_interval() == 1
    a = autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, trials=9, seed=0,
                        storage=storage, study_name="s1", gap=None)
    assert a.trials >= 9
    b = autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, trials=5, seed=0,
                        storage=storage, study_name="s1", gap=None)
    assert b.trials >= a.trials + 5  # resumed the same study through the same object
    assert b.best.step_time_ms <= a.best.step_time_ms + 1e-9
    # a URL gives the same kind of storage (heartbeats on PostgreSQL)
    assert open_storage(pg_url).get_heartbeat_interval() == 1


def test_gap_negative_is_an_error() -> None:
    with pytest.raises(autotune.errors.ConfigError) as e:
        autotune.search(DATA / "tiny.yaml", DATA / "tiny_profile.yaml", space=SPACE, gap=-1.0)
    assert e.value.field == "gap"


def test_dead_trial_is_failed_and_retried_by_optuna(pg_url) -> None:
    storage = make_rdb_storage(pg_url)
    study = optuna.create_study(storage=storage, study_name="hb")
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("origin", "tpe")
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
    assert waiting[0].user_attrs["origin"] == "tpe"
