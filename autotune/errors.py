"""Exception hierarchy of autotune.

Every error a user can cause derives from :class:`AutotuneError`; the CLI maps these to one-line
messages and exit code 2 (tracebacks only with ``--debug``).
"""

from __future__ import annotations

from typing import Any


class AutotuneError(Exception):
    """Root of all errors raised on purpose by autotune."""


class ConfigError(AutotuneError, ValueError):
    """Bad input: names the YAML path (``field``), the offending ``value`` and the ``rule`` broken.

    Args:
        message: human-readable explanation, ideally with the fix.
        field: YAML path such as ``model.model_config.offset``.
        value: the value found (``None`` when the key is missing).
        rule: stable rule code, e.g. ``R_OFFSET_SUM`` or ``missing_key``.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None,
                 rule: str | None = None) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.message = message
        super().__init__(self.__str__())

    def __str__(self) -> str:  # one line, always names the field and rule
        parts = []
        if self.rule:
            parts.append(f"[{self.rule}]")
        if self.field:
            parts.append(f"{self.field}:")
        parts.append(self.message)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``--format json``: ``{"rule", "field", "message"}``."""
        return {"rule": self.rule, "field": self.field, "message": self.message}


class InfeasibleError(AutotuneError):
    """No configuration in the search space fits the HBM budget.

    ``closest`` (optional) is the evaluated config with the smallest memory excess and
    ``excess_mib`` by how much (MiB) its worst stage exceeds the budget.
    """

    def __init__(self, message: str, *, closest: Any = None, excess_mib: float | None = None) -> None:
        self.closest = closest
        self.excess_mib = excess_mib
        super().__init__(message)
