"""The sweep file (``SWEEP.yaml``): base configs and a matrix of overrides -> scenarios.

Example::

    name: nightly
    defaults:               # apply to every scenario unless it sets its own
      trials: 60            # finished trials per scenario (baselines and seeds included)
      seed: 0
    lease_seconds: 60       # a worker silent this long loses its scenario to another worker
    scenarios:
      - name: telechat2_115b
        config: telechat2_115b/train.yaml     # relative to this file
        set:                                  # dotted MindFormers YAML paths -> value
          context.max_device_memory: 58GB
        matrix:                               # cartesian product; names get -mb16 etc.
          parallel_config.micro_batch_num: [8, 16]

Each concrete scenario is validated (the merged YAML through :func:`config_from_dict`, the search
space, the profile) before any work starts, and its Optuna study is named from a hash of that
validated content, so a changed scenario never attaches to an old study.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.api import resolve_profile
from autotune.config.margin import parse_margin_mib
from autotune.config.training import TrainingConfig, config_from_dict, read_yaml
from autotune.errors import ConfigError, from_validation_error, require_file
from autotune.tuner.space import SearchSpace, load_search_space

#: Bumped when the meaning of a scenario's content changes (old studies are then not reused).
HASH_VERSION = 2  # 2: trials count the polish trial and scenarios run without the safety net
STUDY_PREFIX = "autotune-sweep-"

#: YAML paths a scenario may set even when the base config lacks them.
ADDABLE_KEYS = frozenset({
    "model.model_config.offset", "model.model_config.pp_interleave_num",
    "parallel.pipeline_config.pipeline_interleave", "parallel.pipeline_config.pipeline_scheduler",
    "context.max_device_memory", "parallel_config.micro_batch_num", "parallel_config.pipeline_stage",
})
#: Short labels used in generated scenario names (``-mb16``).
SHORT = {"micro_batch_num": "mb", "pipeline_stage": "pp", "max_device_memory": "hbm",
         "pp_interleave_num": "vpp", "data_parallel": "dp", "model_parallel": "mp",
         "seq_length": "seq", "num_layers": "L"}
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$"


class _Knobs(BaseModel):
    """Per-scenario search settings; ``None`` inherits from ``defaults``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int | None = Field(None, ge=1, description="most finished trials per scenario (the budget; "
                               "fewer when the target gap or the timeout ends the search first)")
    timeout: float | None = Field(None, gt=0, description="wall-clock limit (s) of one scenario's search; "
                                  "None (default): no clock at all, the budget is work (trials, moves), so "
                                  "rows do not depend on the machine or its load; when the limit fires the "
                                  "row says timed_out with the gap at that moment", allow_inf_nan=False)
    target_gap: float | None = Field(None, ge=0, lt=1, description="stop a scenario early once its "
                                     "certified gap to the lower bound is at most this fraction; 0 = always "
                                     "run the whole trial budget; None = the search's default", allow_inf_nan=False)
    seed: int | None = None
    device: str | None = None
    profile: str | None = Field(None, description="profile YAML/JSON (None: analytic from the config)")
    space: str | None = Field(None, description="search-space YAML (None: search_spaces/default.yaml)")
    pp_interleave_num: list[int] | None = Field(None, min_length=1,
                                                description="pp_interleave_num candidates (overrides the space)")
    hbm_margin: float | str | None = Field(None, description="HBM kept free below the budget: a fraction "
                                           "(0.05, '5%') or a size ('2GB'); None/0 = none (as --hbm-margin)")


class Defaults(_Knobs):
    trials: int = Field(100, ge=1)
    seed: int = 0
    device: str = "ascend-910b"


class ScenarioSpec(_Knobs):
    name: str = Field(pattern=_NAME)
    config: str
    set: dict[str, Any] = Field(default_factory=dict)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)


class SweepSpec(BaseModel):
    """Top level of SWEEP.yaml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    name: str = "sweep"
    defaults: Defaults = Field(default_factory=Defaults)
    lease_seconds: float = Field(60.0, ge=1, description="heartbeat silence after which a scenario "
                                 "is taken over by another worker", allow_inf_nan=False)
    storage_retry_seconds: float = Field(120.0, ge=0, description="how long a worker retries a lost "
                                         "database connection (exponential backoff) before it stops "
                                         "with a one-line error", allow_inf_nan=False)
    scenarios: list[ScenarioSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Scenario:
    """One concrete scenario: validated inputs, search settings and its study name."""

    name: str
    study_name: str
    digest: str
    config: TrainingConfig
    profile: str | None
    space: Any  # SearchSpace
    trials: int
    timeout: float | None
    target_gap: float | None
    seed: int
    device: str
    overrides: dict[str, Any] = field(default_factory=dict)
    hbm_margin: float | str | None = None


@dataclass(frozen=True)
class Sweep:
    name: str
    path: str
    lease_seconds: float
    scenarios: list[Scenario]
    storage_retry_seconds: float = 120.0

    def by_study(self) -> dict[str, Scenario]:
        return {s.study_name: s for s in self.scenarios}


def _err(exc: ValidationError, path: str) -> ConfigError:
    return from_validation_error(exc, SweepSpec, what=f"sweep file {path}", rule="sweep")


def _set_path(data: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"not a dotted YAML path: {dotted!r}", field=where, value=dotted, rule="sweep")
    node = data
    for i, k in enumerate(keys[:-1]):
        nxt = node.get(k)
        if nxt is None:
            if dotted not in ADDABLE_KEYS:
                raise ConfigError(f"the base config has no {'.'.join(keys[:i + 1])}; check the spelling",
                                  field=where, value=dotted, rule="sweep_override")
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"{'.'.join(keys[:i + 1])} is not a mapping in the base config",
                              field=where, value=dotted, rule="sweep_override")
        node = nxt
    if keys[-1] not in node and dotted not in ADDABLE_KEYS:
        raise ConfigError(f"the base config has no key {dotted}; check the spelling",
                          field=where, value=dotted, rule="sweep_override")
    node[keys[-1]] = value


def _label(key: str, value: Any) -> str:
    short = SHORT.get(key.rsplit(".", 1)[-1], key.rsplit(".", 1)[-1])
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return short + re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def _digest(content: dict[str, Any]) -> str:
    blob = json.dumps(content, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _profile_content(path: str) -> Any:
    p = require_file(path, field="profile")
    return hashlib.sha256(p.read_bytes()).hexdigest()


def load_sweep(path: str | Path) -> Sweep:
    """Read, expand and validate a sweep file (no Optuna, no storage).

    Raises:
        ConfigError: schema errors (named by path), missing files, bad overrides, duplicate
            scenario names, or a scenario whose merged config/space/profile is invalid.
    """
    path = Path(path)
    data = read_yaml(path)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise _err(exc, str(path)) from None
    base_dir = path.resolve().parent
    d = spec.defaults
    out: list[Scenario] = []
    seen: dict[str, str] = {}
    for i, sc in enumerate(spec.scenarios):
        where = f"scenarios.{i}"
        cfg_path = (base_dir / sc.config).resolve()
        try:
            base_raw = read_yaml(cfg_path)
        except ConfigError as exc:
            raise ConfigError(exc.message, field=f"{where}.config", value=sc.config, rule=exc.rule) from None
        knob = {k: getattr(sc, k) if getattr(sc, k) is not None else getattr(d, k)
                for k in _Knobs.model_fields}
        rel = lambda p: str((base_dir / p).resolve()) if p else None  # noqa: E731
        profile, space_path = rel(knob["profile"]), rel(knob["space"])
        space = load_search_space(space_path)
        if knob["pp_interleave_num"] is not None:
            try:
                space = SearchSpace.model_validate({**space.model_dump(),
                                                    "pp_interleave_num": knob["pp_interleave_num"]})
            except ValidationError as exc:
                raise ConfigError(exc.errors()[0]["msg"], field=f"{where}.pp_interleave_num",
                                  value=knob["pp_interleave_num"], rule="sweep") from None
        keys = list(sc.matrix)
        for k, vals in sc.matrix.items():
            if not vals:
                raise ConfigError("matrix values must be a non-empty list", field=f"{where}.matrix.{k}",
                                  value=vals, rule="sweep")
        for combo in itertools.product(*(sc.matrix[k] for k in keys)):
            over = {**sc.set, **dict(zip(keys, combo))}
            name = "-".join([sc.name, *(_label(k, v) for k, v in zip(keys, combo))])
            raw = copy.deepcopy(base_raw)
            for k, v in over.items():
                _set_path(raw, k, v, f"{where}.{'matrix' if k in sc.matrix else 'set'}.{k}")
            try:
                cfg = config_from_dict(raw, source=f"{path}:{name}")
                if cfg.hbm_mib is None:
                    raise ConfigError("no HBM budget: set context.max_device_memory (in the config or "
                                      "with set:)", field="context.max_device_memory", value=None,
                                      rule="missing_key")
                resolve_profile(cfg, profile, device=knob["device"])
                margin_mib = parse_margin_mib(knob["hbm_margin"], cfg.hbm_mib, field=f"{where}.hbm_margin")
            except ConfigError as exc:
                raise ConfigError(f"scenario {name}: {exc.message}", field=exc.field, value=exc.value,
                                  rule=exc.rule) from None
            if name in seen:
                raise ConfigError(f"two scenarios are named {name!r}; give them different names",
                                  field=f"{where}.name", value=name, rule="sweep_duplicate")
            content = {"v": HASH_VERSION, "config": raw,
                       "profile": _profile_content(profile) if profile else None,
                       "space": space.model_dump(),
                       **{k: knob[k] for k in ("trials", "timeout", "target_gap", "seed", "device")},
                       # only when set, so the studies of sweeps without a margin keep their names
                       **({"hbm_margin": knob["hbm_margin"]} if margin_mib > 0 else {})}
            digest = _digest(content)
            if digest in seen.values():
                other = next(n for n, dg in seen.items() if dg == digest)
                raise ConfigError(f"scenarios {other!r} and {name!r} are identical",
                                  field=f"{where}.name", value=name, rule="sweep_duplicate")
            seen[name] = digest
            out.append(Scenario(name=name, study_name=STUDY_PREFIX + digest[:16], digest=digest,
                                config=cfg, profile=profile, space=space, trials=knob["trials"],
                                timeout=knob["timeout"], target_gap=knob["target_gap"], seed=knob["seed"],
                                device=knob["device"], overrides=over,
                                hbm_margin=knob["hbm_margin"] if margin_mib > 0 else None))
    return Sweep(name=spec.name, path=str(path), lease_seconds=spec.lease_seconds, scenarios=out,
                 storage_retry_seconds=spec.storage_retry_seconds)
