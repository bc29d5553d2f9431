"""Layer profile schema (pydantic): what the cost model needs to know about one model on one device.

A profile describes, per **layer kind** (e.g. ``dense``, ``moe``), per micro-batch:

- ``fwd_ms`` / ``bwd_ms``: forward / backward time without recompute (ms);
- ``act_mib``: activation memory kept between a layer's forward and its backward (MiB);
- ``static_mib``: weights + gradients + optimizer state per device after sharding (MiB);
- per recompute choice (``full``, ``select``, ``comm``, ``both`` = select + comm) the activation
  kept instead (``act_mib``), the extra time replayed in backward (``extra_ms``) and the transient
  working set while that layer's backward runs (``workspace_mib``);
- ``bwd_w_frac`` (optional): the share of ``bwd_ms`` that is the weight gradient (W) rather than
  the input gradient (B), used by schedules that split the backward (zero_bubble_v). None = 0.5
  (:data:`DEFAULT_BWD_W_FRAC`).

plus the **head** (embedding part, stage 0, chunk 0), the **tail** (final norm + LM head + loss,
last stage, last chunk), a per-stage constant (``stage_const_mib``) and the p2p time of one stage
hop (``p2p_ms``). ``layer_kinds`` gives the kind of every decoder layer in order, as runs
``[[kind, count], ...]``. ``sources`` records where each field came from (``field.<path>`` keys) and
``warnings`` what a measured import left out (:func:`autotune.profile.merge.import_warnings`).

Example (YAML)::

    name: toy
    kinds:
      dense: {fwd_ms: 1, bwd_ms: 2, act_mib: 10, static_mib: 5,
              full: {act_mib: 1, extra_ms: 1}}
    layer_kinds: [[dense, 12]]
    head: {static_mib: 20}
    tail: {fwd_ms: 0.667, bwd_ms: 1.333, static_mib: 30}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.config.training import read_yaml
from autotune.errors import ConfigError

#: Share of a backward that is the weight gradient W when a profile does not say. Source: a
#: transformer layer's backward is two GEMMs per forward GEMM, dX = dY·Wᵀ (B) and dW = Xᵀ·dY (W),
#: of equal FLOPs (Narayanan et al. 2021 §3.2, backward = 2× forward), and Qi et al. (ICLR 2024)
#: take T_B = T_W; attention's core (no weights) is all B, so analytic profiles compute it from
#: FLOPs instead (``autotune.profile.analytic``).
DEFAULT_BWD_W_FRAC = 0.5

#: Recompute classes of one layer, in the index order the cost model uses.
RECOMPUTE_CLASSES = ("none", "select", "comm", "both", "full")


class RecomputeOption(BaseModel):
    """Effect of one recompute choice on one layer, per micro-batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    act_mib: float = Field(ge=0, description="activation kept per micro-batch under this choice (MiB)")
    extra_ms: float = Field(0.0, ge=0, description="extra time replayed in backward (ms)")
    workspace_mib: float = Field(0.0, ge=0, description="transient MiB while this layer's backward runs")
    static_delta_mib: float = Field(0.0, description=(
        "change of the layer's static MiB under this choice, held once per step (not per "
        "micro-batch); may be negative, e.g. parallel_optimizer_comm_recompute: a fully recomputed "
        "layer does not keep its optimizer-parallel gathered weights"))


class OpSaving(BaseModel):
    """What recomputing one operator of a layer saves and costs, per micro-batch.

    ``act_mib``: activation the layer no longer keeps (the op's output, MiB); ``extra_ms``: the
    op's replay time in backward (ms). See :mod:`autotune.cost.select_ops` for how patterns pick ops.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    act_mib: float = Field(0.0, ge=0)
    extra_ms: float = Field(0.0, ge=0)


class LayerKind(BaseModel):
    """One decoder-layer kind (per micro-batch, per device). Missing select/comm = no effect.

    Optional per-op tables (additive; None = unknown op list): ``select_ops`` maps each operator's
    path inside the layer (names joined by ".", e.g. ``feed_forward.w1.activation.silu``) to its
    :class:`OpSaving` under ``select_recompute``; ``comm_ops`` the same for ``select_comm_recompute``
    (communication-carrying ops such as the norms whose output is all-gathered). The aggregate
    ``select`` / ``comm`` options stay "the default op set"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fwd_ms: float = Field(ge=0)
    bwd_ms: float = Field(ge=0)
    act_mib: float = Field(ge=0)
    static_mib: float = Field(ge=0)
    workspace_mib: float = Field(0.0, ge=0, description="transient MiB during backward, no recompute")
    full: RecomputeOption | None = None
    select: RecomputeOption | None = None
    comm: RecomputeOption | None = None
    both: RecomputeOption | None = None
    select_ops: dict[str, OpSaving] | None = None
    comm_ops: dict[str, OpSaving] | None = None
    bwd_w_frac: float | None = Field(None, ge=0, le=1, description=(
        "share of bwd_ms that is the weight gradient W (zero_bubble_v splits B and W); "
        "None = DEFAULT_BWD_W_FRAC 0.5. Recompute replay is never part of W"))

    @property
    def w_frac(self) -> float:
        """``bwd_w_frac``, or :data:`DEFAULT_BWD_W_FRAC` when unset."""
        return DEFAULT_BWD_W_FRAC if self.bwd_w_frac is None else float(self.bwd_w_frac)

    def option(self, cls: str) -> RecomputeOption:
        """The effective option for class ``cls`` (one of RECOMPUTE_CLASSES).

        ``none`` is the layer itself; a missing ``select``/``comm`` means "saves nothing, costs
        nothing"; a missing ``both`` combines select and comm (savings and extra time add up);
        a missing ``full`` keeps everything (no saving).
        """
        none = RecomputeOption(act_mib=self.act_mib, extra_ms=0.0, workspace_mib=self.workspace_mib)
        if cls == "none":
            return none
        got = getattr(self, cls)
        if got is not None:
            return got
        if cls == "both":
            s, c = self.option("select"), self.option("comm")
            act = max(0.0, s.act_mib + c.act_mib - self.act_mib)
            return RecomputeOption(act_mib=act, extra_ms=s.extra_ms + c.extra_ms,
                                   workspace_mib=max(s.workspace_mib, c.workspace_mib),
                                   static_delta_mib=s.static_delta_mib + c.static_delta_mib)
        return none


class EndPart(BaseModel):
    """Head (embedding part) or tail (final norm + LM head + loss) of the model, per micro-batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fwd_ms: float = Field(0.0, ge=0)
    bwd_ms: float = Field(0.0, ge=0)
    act_mib: float = Field(0.0, ge=0)
    static_mib: float = Field(0.0, ge=0)
    workspace_mib: float = Field(0.0, ge=0)
    bwd_w_frac: float | None = Field(None, ge=0, le=1, description=(
        "share of bwd_ms that is the weight gradient W; None = DEFAULT_BWD_W_FRAC 0.5"))

    @property
    def w_frac(self) -> float:
        """``bwd_w_frac``, or :data:`DEFAULT_BWD_W_FRAC` when unset."""
        return DEFAULT_BWD_W_FRAC if self.bwd_w_frac is None else float(self.bwd_w_frac)


class ModelProfile(BaseModel):
    """A complete layer profile (see module docstring). Times in ms, memory in MiB."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    name: str = "profile"
    device: str | None = None
    kinds: dict[str, LayerKind]
    layer_kinds: list[tuple[str, int]]
    head: EndPart = EndPart()
    tail: EndPart = EndPart()
    stage_const_mib: float = Field(0.0, ge=0)
    p2p_ms: float = Field(0.0, ge=0)
    assumptions: dict[str, Any] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list, description=(
        "what a measured import left out or changed (field, value taken, where it came from), "
        "written by `autotune profile` and repeated by `search` / `evaluate --profile`"))
    model_warnings: list[dict[str, str]] = Field(default_factory=list, description=(
        "what the analytic profile could not model, as {code, field, message} (W_MEMORY_KEY_IGNORED, "
        "W_FAMILY_UNKNOWN); carried into every cost report made with this profile"))

    @model_validator(mode="after")
    def _kinds_known(self) -> "ModelProfile":
        for kind, count in self.layer_kinds:
            if kind not in self.kinds:
                raise ValueError(f"layer_kinds names unknown kind {kind!r} (known: {sorted(self.kinds)})")
            if count < 0:
                raise ValueError(f"layer_kinds count for {kind!r} must be >= 0, got {count}")
        return self

    @property
    def num_layers(self) -> int:
        return sum(c for _, c in self.layer_kinds)

    def kind_names(self) -> list[str]:
        """Kinds in first-use order."""
        return list(self.kinds)

    def kind_index_per_layer(self) -> np.ndarray:
        """int array [num_layers]: index into :meth:`kind_names` of every decoder layer."""
        names = self.kind_names()
        out = [names.index(k) for k, c in self.layer_kinds for _ in range(c)]
        return np.asarray(out, dtype=np.int64)

    def with_num_layers(self, num_layers: int) -> "ModelProfile":
        """Same profile for a stack of ``num_layers`` (the last run is stretched or cut)."""
        runs: list[tuple[str, int]] = []
        left = num_layers
        for kind, count in self.layer_kinds:
            take = min(count, left)
            if take:
                runs.append((kind, take))
            left -= take
        if left > 0:
            kind = self.layer_kinds[-1][0]
            if runs and runs[-1][0] == kind:
                runs[-1] = (kind, runs[-1][1] + left)
            else:
                runs.append((kind, left))
        return self.model_copy(update={"layer_kinds": runs})

    def to_yaml(self) -> str:
        """YAML text of this profile (loadable by :func:`load_profile`)."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["layer_kinds"] = [[k, c] for k, c in self.layer_kinds]
        return yaml.safe_dump(data, sort_keys=False)


def profile_from_dict(data: Any, *, source: str = "<memory>") -> ModelProfile:
    """Validate a mapping into a :class:`ModelProfile`.

    Raises:
        ConfigError: names the first invalid field as a dotted path.
    """
    try:
        return ModelProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{err['msg']} (in profile {source})", field=loc or source,
                          value=err.get("input"), rule="profile_schema") from None


def load_profile(path: str | Path) -> ModelProfile:
    """Read a profile YAML/JSON file (JSON is YAML).

    Raises:
        ConfigError: missing file, not YAML, or schema violation.
    """
    return profile_from_dict(read_yaml(path), source=str(path))
