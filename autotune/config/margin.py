"""HBM safety margin: memory the search keeps free below the budget (``--hbm-margin``).

The search accepts a config when its worst stage's estimated peak is at most the budget
(``context.max_device_memory`` or ``--hbm``). Peak memory is an estimate (analytic, or fitted on
dry runs), so an answer packed to 99.7 % of the budget may not fit in the real run. A margin M
lowers the *limit* the pruner and the feasibility check use to budget − M; the budget itself (what
the user wrote) is unchanged and every output shows each answer's headroom to it.

A margin is a fraction of the budget (``0.05``, ``"5%"``) or a size with a unit (``"2GB"`` = 2 GiB as
in MindSpore, ``"2048MiB"``, ``"2048MB"``); ``0`` or ``None`` is no margin (the default).
"""

from __future__ import annotations

import math

from autotune.config.training import TrainingConfig
from autotune.errors import ConfigError
from autotune.units import parse_memory_mib

_RULE = "R_HBM_MARGIN"


def _number(value: object) -> float | None:
    """A plain number given as int/float or as a string without a unit; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def parse_margin_mib(value: object, budget_mib: float | None, *, field: str = "--hbm-margin") -> float:
    """The margin in MiB for a budget of ``budget_mib`` MiB.

    ``None``/``0`` -> 0; a number in [0, 1) or a percentage ``"5%"`` -> that fraction of the budget;
    a size with a unit (``"2GB"``, ``"2048MiB"``) -> :func:`autotune.units.parse_memory_mib`.

    Raises:
        ConfigError (rule ``R_HBM_MARGIN``, naming ``field``): a bare number >= 1 (ambiguous: give a
            fraction or a unit), a negative or non-finite value, an unparsable string, a margin
            without a known budget, or a margin that leaves no budget (>= the budget).
    """
    if value is None:
        return 0.0
    num = _number(value)
    pct = isinstance(value, str) and value.strip().endswith("%")
    if pct:
        num = _number(value.strip()[:-1])
        if num is None:
            raise ConfigError(f"expected a percentage such as '5%', got {value!r}", field=field, value=value,
                              rule=_RULE)
        num /= 100.0
    if num is not None:
        if not math.isfinite(num) or num < 0:
            raise ConfigError(f"must be a fraction >= 0 (0.05 = 5 % of the budget) or a size such as "
                              f"'2GB', got {value!r}", field=field, value=value, rule=_RULE)
        if num == 0:
            return 0.0
        if num >= 1:
            raise ConfigError(f"a bare number is a fraction of the budget and must be < 1 (0.05 = 5 %); "
                              f"for a size give a unit, e.g. '2GB' or '2048MiB', got {value!r}", field=field,
                              value=value, rule=_RULE)
        if budget_mib is None:
            raise ConfigError("a fractional margin needs an HBM budget: set context.max_device_memory or "
                              "pass --hbm", field=field, value=value, rule=_RULE)
        mib = num * float(budget_mib)
    else:
        try:
            mib = parse_memory_mib(value, field=field)
        except ConfigError:
            raise ConfigError(f"expected a fraction of the budget (0.05, '5%') or a size with a unit "
                              f"('2GB', '2048MiB'), got {value!r}", field=field, value=value, rule=_RULE) from None
    if budget_mib is not None and mib >= float(budget_mib):
        raise ConfigError(f"a margin of {mib:.0f} MiB leaves nothing of the {float(budget_mib):.0f} MiB "
                          "budget", field=field, value=value, rule=_RULE)
    return float(mib)


def apply_margin(cfg: TrainingConfig, margin: object, *, field: str = "--hbm-margin"
                 ) -> tuple[TrainingConfig, float]:
    """(config whose ``hbm_mib`` is the limit budget − margin, margin MiB); ``cfg`` itself when the
    margin is 0.

    Raises:
        ConfigError: see :func:`parse_margin_mib`; also a margin > 0 when the config has no budget.
    """
    mib = parse_margin_mib(margin, cfg.hbm_mib, field=field)
    if mib == 0:
        return cfg, 0.0
    if cfg.hbm_mib is None:
        raise ConfigError("a margin needs an HBM budget: set context.max_device_memory or pass --hbm",
                          field=field, value=margin, rule=_RULE)
    return cfg.model_copy(update={"hbm_mib": float(cfg.hbm_mib) - mib}), mib
