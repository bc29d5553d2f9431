"""Search-space definition (``search_spaces/*.yaml``), validated without Optuna.

Fields:

- ``pp_interleave_num``: candidate interleave counts (ints >= 1). Candidates that cannot run for the
  config (P·V > N, or V > 1 with micro_batch_num not a multiple of pipeline_stage) are dropped.
- ``recompute_kinds``: subset of ``full``, ``select``, ``comm`` that the search may set; the others
  stay at zero.
- ``max_abs_offset``: bound on |layers - base| per mini-stage (None = only validity bounds).
- ``pipeline_scheduler``: ``keep`` (the config's own) or a scheduler name to pin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.errors import ConfigError

DEFAULT_SPACE_PATH = Path(__file__).resolve().parents[2] / "search_spaces" / "default.yaml"


class SearchSpace(BaseModel):
    """Which knobs the search may change (see module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pp_interleave_num: list[int] = Field(default_factory=lambda: [1, 2, 3, 4], min_length=1)
    recompute_kinds: list[Literal["full", "select", "comm"]] = Field(
        default_factory=lambda: ["full", "select", "comm"])
    max_abs_offset: int | None = Field(None, ge=0)
    pipeline_scheduler: str = "keep"

    @field_validator("pp_interleave_num")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError(f"candidates must be >= 1, got {v}")
        return sorted(set(v))


def load_search_space(path: str | Path | None = None) -> SearchSpace:
    """Load a search-space YAML (default: ``search_spaces/default.yaml``; built-in defaults when the
    file is not shipped alongside the package).

    Raises:
        ConfigError: missing file, not YAML, or a field breaking the schema (named).
    """
    from autotune.config.training import read_yaml

    if path is None:
        if not DEFAULT_SPACE_PATH.is_file():
            return SearchSpace()
        path = DEFAULT_SPACE_PATH
    data = read_yaml(path)
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{err['msg']} (search space {path})", field=loc, value=err.get("input"),
                          rule="search_space") from None
