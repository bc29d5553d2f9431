"""The text of ``autotune search --dry-run``: the mapping of
:func:`autotune.tuner.describe.describe_space` as plain ``key: value`` lines.

One line per entry, in the mapping's order. A mapping value (the free and pinned knobs) is a
``key:`` heading followed by one ``key: value`` line per entry, indented two spaces. Values are
written as a MindFormers YAML spells them, since users copy them there, not as Python reprs:
booleans ``true`` / ``false``, lists ``1, 2, 3, 4`` (a list inside a list in brackets:
``[a, b], [c]``), strings without quotes or doubled backslashes, ``None`` and an empty list or
mapping ``none``; ``max_abs_offset: None`` reads ``not set`` (``none`` would read as "no offset").
``--format json`` does not come here: it prints the mapping itself.
"""

from __future__ import annotations

from typing import Any, Mapping

#: Keys whose ``None`` reads better as something other than ``none``.
NONE_TEXT = {"max_abs_offset": "not set"}


def plain(value: Any, *, none: str = "none") -> str:
    """One value as plain text (see the module docstring); ``none`` is the text of ``None``."""
    if value is None:
        return none
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        if not value:
            return none
        return ", ".join(f"[{', '.join(plain(x) for x in v)}]" if isinstance(v, (list, tuple)) else plain(v)
                         for v in value)
    return str(value)


def dry_run_lines(info: Mapping[str, Any], indent: str = "") -> list[str]:
    """The lines of ``info``: ``key: value``, or for a non-empty mapping value a ``key:`` heading
    and its entries indented two spaces more."""
    lines = []
    for key, value in info.items():
        if isinstance(value, Mapping) and value:
            lines.append(f"{indent}{key}:")
            lines.extend(dry_run_lines(value, indent + "  "))
        else:
            text = "none" if isinstance(value, Mapping) else plain(value, none=NONE_TEXT.get(key, "none"))
            lines.append(f"{indent}{key}: {text}")
    return lines
