"""What an evaluation or a search starts from: the training config, the layer profile and the
schedule, checked (no Optuna).

Shared by :mod:`autotune.api`, :mod:`autotune.tuner.search`, :mod:`autotune.tuner.space` and
:mod:`autotune.tuner.describe`, so none of them reaches into another's private helpers.
"""

from __future__ import annotations

from pathlib import Path

from autotune.config.training import TrainingConfig, load_config
from autotune.config.layer_types import FIELDS
from autotune.cost.schedules import SizeError, registered
from autotune.cost.simulate import compile_schedule
from autotune.errors import ConfigError
from autotune.profile.analytic import analytic_profile, check_overrides
from autotune.profile.schema import ModelProfile, load_profile

#: Device of the analytic profile when none is given.
DEFAULT_DEVICE = "ascend-910b"


def as_config(config: str | Path | TrainingConfig, hbm_mib: float | None = None) -> TrainingConfig:
    """The config itself, or loaded from a YAML path; ``hbm_mib`` (MiB) overrides its HBM budget.

    Raises:
        ConfigError: the file is missing, not YAML, or breaks a rule (named).
    """
    if isinstance(config, TrainingConfig):
        if hbm_mib is not None:
            return config.model_copy(update={"hbm_mib": hbm_mib})
        return config
    return load_config(config, hbm_mib=hbm_mib)


def resolve_profile(cfg: TrainingConfig, profile: str | Path | ModelProfile | None = None, *,
                    device: str = DEFAULT_DEVICE, overrides: dict[str, float] | None = None) -> ModelProfile:
    """The profile to use: the given one (path or object) or the analytic one for ``device``.

    ``overrides`` (the analytic profile's assumptions, ``--set``) are checked whichever profile is
    used (:func:`~autotune.profile.analytic.check_overrides`); a given profile has its own numbers,
    so overrides with it are refused rather than ignored.

    Raises:
        ConfigError: the profile's layer count differs from the config's num_layers; an override is
            unknown, not a finite number or out of its range, or comes with a given profile (rule
            ``assumption``).
    """
    checked = check_overrides(overrides)
    if profile is None:
        return analytic_profile(cfg, device, overrides=checked)
    if checked:
        key = next(iter(checked))
        raise ConfigError("an assumption of the analytic profile, which a given profile does not use (it has "
                          "its own numbers); fix: drop --set (overrides) or --profile", field=f"--set {key}",
                          value=checked[key], rule="assumption")
    prof = profile if isinstance(profile, ModelProfile) else load_profile(profile)
    if prof.num_layers != cfg.num_layers:
        raise ConfigError(f"profile describes {prof.num_layers} layers but the config has "
                          f"num_layers = {cfg.num_layers}", field="layer_kinds",
                          value=prof.num_layers, rule="profile_layers")
    return prof


def config_schedule(cfg: TrainingConfig) -> str:
    """The config's ``pipeline_scheduler``.

    Raises:
        ConfigError: the cost model has no such schedule (rule ``scheduler``).
    """
    if cfg.pipeline_scheduler not in registered():
        raise ConfigError(f"pipeline_scheduler {cfg.pipeline_scheduler!r} is not modelled yet; "
                          f"modelled: {', '.join(registered())}",
                          field="parallel.pipeline_config.pipeline_scheduler",
                          value=cfg.pipeline_scheduler, rule="scheduler")
    return cfg.pipeline_scheduler


#: The YAML key of each size a schedule checks (:data:`autotune.cost.schedules.KNOBS`).
_KNOB_FIELDS = {"pipeline_stage": FIELDS["pp"], "pp_interleave_num": FIELDS["vpp"],
                "micro_batch_num": FIELDS["micro_batch_num"], "seq_split_num": FIELDS["seq_split_num"]}


def check_runnable(cfg: TrainingConfig, V: int, schedule: str) -> None:
    """Raises ConfigError when ``schedule`` cannot run the config's pipeline_stage,
    micro_batch_num and seq_split_num with pp_interleave_num ``V``: rule ``R_MICRO_BATCH_MIN``
    on ``parallel_config.micro_batch_num`` when the micro-batch count breaks the schedule's rule,
    else ``R_SCHEDULE`` on the key that does (e.g. ``model.model_config.pp_interleave_num`` for
    seqpipe with pp_interleave_num 2, which the cost model has no schedule for)."""
    try:
        compile_schedule(schedule, cfg.pipeline_stage, V, cfg.micro_batch_num, cfg.seq_split_num)
    except SizeError as exc:
        raise ConfigError(str(exc), field=_KNOB_FIELDS[exc.knob], value=exc.value, rule=exc.rule) from None
    except ValueError as exc:
        raise ConfigError(str(exc), field="parallel_config.micro_batch_num", value=cfg.micro_batch_num,
                          rule="R_MICRO_BATCH_MIN") from None
