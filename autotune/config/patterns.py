"""Select / comm recompute op patterns: validation and bounded pattern-vs-pattern matching.

A MindFormers pattern is split on the literal two characters ``\\.``; each segment is a regular
expression that must fully match one cell or op name (layer-setting spec §4.2). Where two patterns
are compared (an exclude pattern against the select patterns, §4.3), MindFormers r1.6.0 (legacy)
and r1.7.0+ match with the ``regex`` package under a 1 s timeout per match, and a timeout logs a
warning and counts as *no match* (``parallel_core/training_graph/transformer/utils.py``
``regex_match``). This module does the same, so a pathological pair such as
``'aaaa…a!'`` against ``'(a+)+b'`` costs at most the timeout instead of exponential time with
``re``. A config's matches share a budget (:data:`~autotune.config.limits.PATTERN_BUDGET_S`); a
config that spends it is refused (R_PATTERN_BUDGET) rather than leaving the result to the clock.

Validation compiles every segment with ``regex`` (r1.6+ semantics) and, for the r1.3–r1.6 target
("1.5", whose r1.5.0 / dev releases use ``re``), with ``re`` too: a pattern one of the engines
rejects fails in some release of that range (R_SELECT_PATTERN).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import regex

from autotune.config.limits import MAX_PATTERN_CHARS, PATTERN_BUDGET_S, REGEX_TIMEOUT_S
from autotune.errors import ConfigError

SEP = "\\."


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compile_segments(pattern: str, path: str, *, version: str = "1.8") -> list[Any]:
    """The compiled segments of ``pattern`` (``regex`` patterns; ``.fullmatch(name)`` per name).

    Raises:
        ConfigError: R_SELECT_PATTERN (not a string, too long, or a segment that is not a valid
            regular expression for the release range ``version``), field = ``path``.
    """
    if not isinstance(pattern, str):
        raise ConfigError(f"a pattern must be a string, got {_short(pattern)}; fix: quote the op-name "
                          "regex, e.g. 'feed_forward\\.mul'", field=path, value=pattern, rule="R_SELECT_PATTERN")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ConfigError(f"pattern of {len(pattern)} characters is over the {MAX_PATTERN_CHARS}-character "
                          "limit; fix: name the op, e.g. 'feed_forward\\.mul'", field=path,
                          value=_short(pattern), rule="R_LIMIT_PATTERNS")
    out = []
    for seg in pattern.split(SEP):
        try:
            out.append(regex.compile(seg))
            if version == "1.5":
                re.compile(seg)
        except (regex.error, re.error, OverflowError, RecursionError) as exc:
            raise ConfigError(f"invalid regular expression {seg!r} ({exc}) in pattern {_short(pattern)}; "
                              "fix: fix the pattern; segments are separated by a literal '\\.'",
                              field=path, value=pattern, rule="R_SELECT_PATTERN") from None
    return out


@dataclass
class MatchBudget:
    """Time spent on pattern-vs-pattern matches of one config (s), and the timeouts seen."""

    limit_s: float = PATTERN_BUDGET_S
    spent_s: float = 0.0
    timeouts: list[tuple[str, str]] = field(default_factory=list)

    def fullmatch(self, pattern: str, text: str, path: str) -> bool:
        """``regex.fullmatch(pattern, text)`` with MindFormers' timeout: a timeout is no match.

        Raises:
            ConfigError: R_PATTERN_BUDGET when this config's matches have used the budget.
        """
        left = self.limit_s - self.spent_s
        if left <= 0:
            raise ConfigError(f"matching the select patterns against each other took over "
                              f"{self.limit_s:g} s ({len(self.timeouts)} match(es) timed out, e.g. "
                              f"{_short(self.timeouts[0] if self.timeouts else '')}); fix: simplify the "
                              "patterns (nested quantifiers such as '(a+)+')", field=path,
                              value=None, rule="R_PATTERN_BUDGET")
        t0 = time.perf_counter()
        try:
            return regex.fullmatch(pattern, text, timeout=min(REGEX_TIMEOUT_S, left)) is not None
        except TimeoutError:
            self.timeouts.append((pattern, text))
            return False
        finally:
            self.spent_s += time.perf_counter() - t0


def patterns_conflict(a: str, b: str, path: str, budget: MatchBudget) -> bool:
    """MindFormers' exclude-vs-select conflict (§4.3): same number of ``\\.`` segments and every
    segment pair full-matches in at least one direction (bounded, see :class:`MatchBudget`)."""
    sa, sb = a.split(SEP), b.split(SEP)
    if len(sa) != len(sb):
        return False
    for x, y in zip(sa, sb, strict=True):
        if not (budget.fullmatch(x, y, path) or budget.fullmatch(y, x, path)):
            return False
    return True
