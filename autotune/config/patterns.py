"""Select / comm recompute op patterns: validation and bounded matching.

A MindFormers pattern is split on the literal two characters ``\\.``; each segment is a regular
expression that must fully match one cell or op name (layer-setting spec §4.2). MindFormers r1.6.0
(legacy) and r1.7.0+ match with the ``regex`` package under a 1 s timeout per match, and a timeout
logs a warning and counts as *no match* (``parallel_core/training_graph/transformer/utils.py``
``regex_match``). Every match autotune makes of a user's pattern goes through :class:`MatchBudget`
and does the same: a pattern against a cell / op name (:func:`path_matches`: ``check``'s
W_SELECT_NO_MATCH, the per-op pricing of ``evaluate`` and ``search``) and an exclude pattern against
a select pattern (:func:`patterns_conflict`, §4.3). So a pathological pattern such as
``(.*.*)*=$`` or a pair such as ``'aaaa…a!'`` against ``'(a+)+b'`` costs at most the timeout
instead of exponential time with ``re`` (which hung ``check`` on ``(.*.*.*)*=$``).

A config's matches share a budget (:data:`~autotune.config.limits.PATTERN_BUDGET_S`); a config
that spends it is refused (R_PATTERN_BUDGET) rather than leaving the result to the clock. One
budget covers one command (the CLI) or one call of the API (:func:`pattern_scope`); a budget
remembers every (segment, name) answer, so the thousands of layouts a search prices match each
pair once and a timed-out pair costs its timeout once.

Validation compiles every segment with ``regex`` (r1.6+ semantics) and, for the r1.3–r1.6 target
("1.5", whose r1.5.0 / dev releases use ``re``), with ``re`` too: a pattern one of the engines
rejects fails in some release of that range (R_SELECT_PATTERN).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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
    """Time spent on one config's pattern matches (s), the answers so far and the timeouts seen.

    ``timeouts`` holds each (segment, name) pair that timed out once; ``timed_out`` maps each user
    pattern that had a timed-out segment to one name it timed out against; ``timeout_events``
    counts timed-out answers, remembered ones included (a caller compares it before and after a
    match to warn W_PATTERN_TIMEOUT).
    """

    limit_s: float = PATTERN_BUDGET_S
    spent_s: float = 0.0
    timeouts: list[tuple[str, str]] = field(default_factory=list)
    timed_out: dict[str, str] = field(default_factory=dict)
    timeout_events: int = 0
    _answers: dict[tuple[str, str], bool | None] = field(default_factory=dict, repr=False)
    _fields: dict[str, str] = field(default_factory=dict, repr=False)   # timed-out pattern -> its YAML field

    def fullmatch(self, pattern: str, text: str, path: str, *, value: str | None = None) -> bool:
        """``regex.fullmatch(pattern, text)`` with MindFormers' timeout: a timeout is no match.

        Args: pattern (one segment, a regular expression), text (a name, or a segment of another
        pattern), path (the YAML field for an error), value (the whole user pattern the segment
        belongs to, for the error and :attr:`timed_out`; default ``pattern``). A pair already
        answered costs nothing (its answer, a timeout included, is remembered).

        Raises:
            ConfigError: R_PATTERN_BUDGET when this config's matches have used the budget
                (:data:`~autotune.config.limits.PATTERN_BUDGET_S` s); R_SELECT_PATTERN when
                ``pattern`` is not a valid regular expression.
        """
        key = (pattern, text)
        if key in self._answers:
            answer = self._answers[key]
            if answer is None:
                self._note_timeout(value or pattern, text, path)
            return bool(answer)
        if self.limit_s - self.spent_s <= 0:
            raise self._spent(path, value or pattern)
        t0 = time.perf_counter()
        try:
            answer: bool | None = regex.fullmatch(pattern, text, timeout=min(REGEX_TIMEOUT_S,
                                                                            self.limit_s - self.spent_s)) is not None
        except TimeoutError:
            answer = None
            self.timeouts.append(key)
        except (regex.error, OverflowError, RecursionError) as exc:
            raise ConfigError(f"invalid regular expression {pattern!r} ({exc}); fix: fix the pattern",
                              field=path, value=value or pattern, rule="R_SELECT_PATTERN") from None
        finally:
            self.spent_s += time.perf_counter() - t0
        self._answers[key] = answer
        if answer is None:
            self._note_timeout(value or pattern, text, path)
        if self.spent_s >= self.limit_s:
            raise self._spent(path, value or pattern)
        return bool(answer)

    def _note_timeout(self, pattern: str, text: str, path: str) -> None:
        self.timeout_events += 1
        self.timed_out.setdefault(pattern, text)
        self._fields.setdefault(pattern, path)

    def _spent(self, path: str, value: str) -> ConfigError:
        """R_PATTERN_BUDGET naming the first pattern that timed out and its field (else ``value``,
        the pattern matched last, and ``path``)."""
        value = next(iter(self.timed_out), value)
        path = self._fields.get(value, path)
        example = (f", e.g. {self.timeouts[0][0][:60]!r} against {self.timeouts[0][1][:60]!r}"
                   if self.timeouts else "")
        return ConfigError(f"matching the select / comm patterns (against the layer's cell and op names and "
                           f"each other) took over the {self.limit_s:g} s budget of one config "
                           f"({len(self.timeouts)} match(es) timed out after {REGEX_TIMEOUT_S:g} s{example}); "
                           f"pattern {_short(value, 80)}; fix: simplify the pattern (nested quantifiers such as "
                           "'(a+)+' or '(.*.*)*')", field=path, value=value, rule="R_PATTERN_BUDGET")


_ACTIVE: ContextVar[MatchBudget | None] = ContextVar("autotune_pattern_budget", default=None)


@contextmanager
def pattern_scope() -> Iterator[MatchBudget]:
    """Make one :class:`MatchBudget` the budget of every pattern match in this context (one CLI
    command, one API call, one config read). Nested scopes share the outermost budget."""
    active = _ACTIVE.get()
    if active is not None:
        yield active
        return
    budget = MatchBudget()
    token = _ACTIVE.set(budget)
    try:
        yield budget
    finally:
        _ACTIVE.reset(token)


def current_budget() -> MatchBudget:
    """The budget of the enclosing :func:`pattern_scope`, else a fresh one (it then bounds only
    the caller's own matches)."""
    active = _ACTIVE.get()
    return MatchBudget() if active is None else active


def path_matches(pattern: str, names: Sequence[str], *, cells: bool, path: str,
                 budget: MatchBudget | None = None) -> bool:
    """Does a MindFormers pattern match the op / cell whose path is ``names`` (§4.2)? Segment i
    full-matches name i (``regex`` with the timeout, a timeout = no match); with ``cells``
    (``select_recompute``) a pattern shorter than the path matches a cell on it, without it
    (``select_comm_recompute``) only the op itself.

    Args: pattern (segments separated by the literal ``\\.``), names (the path's names), path (the
    YAML field for an error), budget (default: :func:`current_budget`).

    Raises:
        ConfigError: R_PATTERN_BUDGET (see :meth:`MatchBudget.fullmatch`); R_SELECT_PATTERN for a
            segment that is not a valid regular expression.
    """
    segs = pattern.split(SEP)
    if len(segs) > len(names) or (not cells and len(segs) != len(names)):
        return False
    b = current_budget() if budget is None else budget
    return all(b.fullmatch(s, n, path, value=pattern) for s, n in zip(segs, names))


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
