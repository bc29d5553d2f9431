"""Exception hierarchy of autotune.

Every error a user can cause derives from :class:`AutotuneError`; the CLI maps these to one-line
messages and exit code 2 (tracebacks only with ``--debug``).
"""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any


def _one_line(text: str) -> str:
    """``text`` with every line break (and the indentation around it) turned into one space: an
    error is one line even when it quotes a multi-line text (a pydantic or parser message)."""
    return re.sub(r"[ \t]*[\r\n]+[ \t]*", " ", text).strip()


class AutotuneError(Exception):
    """Root of all errors raised on purpose by autotune."""


class ConfigError(AutotuneError, ValueError):
    """Bad input: names the YAML path (``field``), the offending ``value`` and the ``rule`` broken.

    The message is kept on one line (line breaks become spaces), as the CLI prints it.

    Args:
        message: human-readable explanation, ideally with the fix.
        field: YAML path such as ``model.model_config.offset``.
        value: the value found (``None`` when the key is missing).
        rule: stable rule code, e.g. ``R_OFFSET_SUM`` or ``R_MISSING``.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None,
                 rule: str | None = None) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.message = _one_line(str(message))
        super().__init__(self.__str__())

    def __str__(self) -> str:  # one line, always names the field and rule
        parts = []
        if self.rule:
            parts.append(f"[{self.rule}]")
        if self.field:
            parts.append(f"{self.field}:")
        parts.append(self.message)
        return _one_line(" ".join(parts))

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


def _model_at(model: Any, loc: tuple) -> Any:
    """The pydantic model class that holds the last key of ``loc`` (walks nested models and lists)."""
    node = model
    for key in loc[:-1]:
        if isinstance(key, int) or not hasattr(node, "model_fields") or key not in node.model_fields:
            continue
        todo = [node.model_fields[key].annotation]
        node = None
        while todo:
            t = todo.pop()
            if hasattr(t, "model_fields"):
                node = t
                break
            todo.extend(typing.get_args(t))
        if node is None:
            return None
    return node


def from_validation_error(exc: Any, model: Any, *, what: str, rule: str) -> ConfigError:
    """A one-line :class:`ConfigError` from a pydantic ``ValidationError`` of ``model``: an unknown
    key names the key, the allowed keys and the closest one ("did you mean"); other errors keep
    pydantic's message and name the path.

    Args:
        exc: the ``pydantic.ValidationError``.
        model: the model class that was validated (to list the allowed keys).
        what: the input's name in messages, e.g. ``"search space search_spaces/rich.yaml"``.
        rule: the rule code of the error.
    """
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(x) for x in loc)
    if err.get("type") == "extra_forbidden" and loc:
        holder = _model_at(model, loc)
        allowed = sorted(holder.model_fields) if holder is not None else []
        key = str(loc[-1])
        guess = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        return ConfigError(f"unknown key {key!r} in the {what}; {hint}allowed keys: {', '.join(allowed)}",
                           field=field, value=err.get("input"), rule=rule)
    shown = repr(err.get("input"))
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ConfigError(f"{err.get('msg', 'invalid value')} (got {shown}) in the {what}", field=field,
                       value=err.get("input"), rule=rule)


def require_file(path: Any, *, field: str | None = None) -> Path:
    """``path`` as a Path when it names a regular file (an empty name is not found).

    Raises:
        ConfigError: rule ``file``, field = ``field`` (default: the path): "file not found", or
            "is a directory, not a file" (every command's file arguments accept a directory name
            from the shell and refuse it here, with the same one-line error as a missing file);
            with ``field`` given the message ends with the path.
    """
    if not str(path).strip():  # Path("") is "." (a directory): say what was given instead
        raise ConfigError("file not found (empty path)", field=field or "''", value=str(path), rule="file")
    p = Path(path)
    named = "" if field is None else f": {str(p)!r}"  # the field names the path when it is not given
    if p.is_dir():
        raise ConfigError(f"is a directory, not a file{named}", field=field or str(p), value=str(p), rule="file")
    if not p.is_file():
        raise ConfigError(f"file not found{named}", field=field or str(p), value=str(p), rule="file")
    return p
