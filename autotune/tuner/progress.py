"""Progress of a search in every phase: a tqdm bar on a terminal, status lines on a log.

A search goes through the phases ``reading`` (config, profile, space), ``bounds`` (the lower bound
and the solver seeds, :mod:`autotune.tuner.solve`), ``search`` (the Optuna studies), ``polish``
(the final local search) and, from the CLI, ``writing``. :class:`Progress` shows them:

- ``mode="bar"`` (stderr is a terminal, or a notebook): one tqdm bar from the start, its
  description the phase, its postfix the best step time, the lower bound and the certified gap as
  they move; a heartbeat thread refreshes it every :data:`BAR_REFRESH_S` s, so the elapsed time
  ticks while a phase computes;
- ``mode="lines"`` (stderr is a log): from ``every_s`` seconds (default :data:`LINE_EVERY_S`)
  after the start, one line when a phase starts and one at least every ``every_s`` seconds from the
  heartbeat thread, e.g. ``search: 35/200 trials, best 6562.7 ms, bound 6428.3 ms, certified gap
  2.09%, 41 s``; a run shorter than ``every_s`` prints nothing (its stderr stays clean for scripts);
- ``mode=None``: silent (the phases are still recorded in :attr:`Progress.phases`).

The heartbeat thread only formats and prints the state the search sets (:meth:`Progress.phase`,
:meth:`Progress.update`); it never touches the search. A phase that holds the GIL in one C call
(HiGHS) delays the line until the call returns.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, TextIO

from autotune.tuner.progress_bar import tqdm_class

#: Seconds between two status lines on a log (non-TTY stderr), at most.
LINE_EVERY_S = 10.0
#: Seconds between two refreshes of the terminal bar.
BAR_REFRESH_S = 0.5
#: The bar of a phase without a count: "bounds: 00:12, sub-problem 1/1: local search, best ..."
IDLE_FORMAT = "{desc}{elapsed}{postfix}"


class Progress:
    """Phase progress on ``stream`` (default stderr; module docstring).

    Args:
        mode: ``"bar"``, ``"lines"`` or None (silent).
        every_s: seconds between status lines in ``"lines"`` mode (> 0; the heartbeat period).
        stream: where to write (default ``sys.stderr``).

    Attributes:
        phases: every phase entered, in order (a phase entered twice in a row counts once).
    """

    def __init__(self, mode: str | None = None, *, every_s: float = LINE_EVERY_S,
                 stream: TextIO | None = None) -> None:
        self.mode = mode
        self.every_s = float(every_s)
        self.stream = stream
        self.phases: list[str] = []
        self.t0 = time.monotonic()
        self._state: dict[str, Any] = {"phase": "", "detail": "", "best": None, "bound": None}
        self._lock = threading.Lock()
        self._last_line = self.t0  # the first line comes after one period
        self._printed: dict[str, Any] = {}  # the state the last status line showed
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def _start(self) -> None:
        if self.mode is None or self._thread is not None:
            return
        if self.mode == "bar":
            self._bar = tqdm_class()(total=None, desc="reading", unit="trial", leave=False, bar_format=IDLE_FORMAT,
                                     dynamic_ncols=True, file=self._out())
        self._thread = threading.Thread(target=self._beat, name="autotune-progress", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        period = BAR_REFRESH_S if self.mode == "bar" else max(0.05, min(self.every_s, 1.0))
        while not self._stop.wait(period):
            if self.mode == "bar":
                with self._lock:
                    if self._bar is not None:
                        self._bar.refresh()
            elif time.monotonic() - self._last_line >= self.every_s:
                self._line()

    def status(self) -> str:
        """The current state in one line (without the phase name)."""
        with self._lock:
            return _status(self._state)

    def _line(self) -> None:
        self._last_line = time.monotonic()
        self._printed = dict(self._state)
        st = self.status()
        print(f"{self._state['phase']}: {st + ', ' if st else ''}{time.monotonic() - self.t0:.0f} s",
              file=self._out(), flush=True)

    def phase(self, name: str, detail: str = "", *, total: int | None = None, done: int = 0) -> None:
        """Enter phase ``name`` (shown at once); ``total``: the bar's length (trials) or None. In
        ``"lines"`` mode the phase being left gets its last line first when it moved since the
        last line (16 trials between two lines used to leave "search: 0/200 trials" as the last
        word on the study)."""
        self._start()
        if (self.mode == "lines" and self.phases and self._state != self._printed
                and time.monotonic() - self.t0 >= self.every_s):
            self._line()
        with self._lock:
            if not self.phases or self.phases[-1] != name:
                self.phases.append(name)
            self._state.update(phase=name, detail=detail)
            if self._bar is not None:
                self._bar.set_description(name, refresh=False)
                self._bar.reset()
                self._bar.total = total
                # no count without a total: the phase, the time in it and the postfix
                self._bar.bar_format = None if total else IDLE_FORMAT
                self._bar.update(done)
                self._bar.set_postfix_str(self._postfix(), refresh=True)
        if self.mode == "lines" and time.monotonic() - self.t0 >= self.every_s:
            self._line()  # a phase start prints at once, after the first period (short runs stay silent)

    def _postfix(self) -> str:
        return _status(self._state)

    def update(self, *, detail: str | None = None, done: int | None = None, best_ms: float | None = None,
               bound_ms: float | None = None) -> None:
        """Set the phase's detail, the bar's count, the best step time (the least given so far in
        this run) and the lower bound (ms; None or a non-finite value leaves a value as it is).
        Prints a status line when one is due (``"lines"``)."""
        with self._lock:
            if detail is not None:
                self._state["detail"] = detail
            if best_ms is not None and math.isfinite(best_ms):  # the best of the run so far
                old = self._state["best"]
                self._state["best"] = float(best_ms) if old is None else min(old, float(best_ms))
            if bound_ms is not None and math.isfinite(bound_ms) and bound_ms > 0:
                self._state["bound"] = float(bound_ms)
            if self._bar is not None:
                if done is not None:
                    self._bar.update(done - self._bar.n)
                self._bar.set_postfix_str(self._postfix(), refresh=False)
        if self.mode == "lines" and self.phases and time.monotonic() - self._last_line >= self.every_s:
            self._line()

    def close(self) -> None:
        """Stop the heartbeat and clear the bar (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def _status(s: dict[str, Any]) -> str:
    """``detail, best X ms, bound Y ms, certified gap Z%`` (the parts known)."""
    parts = [s["detail"]] if s["detail"] else []
    best, bound = s["best"], s["bound"]
    if best is not None:
        parts.append(f"best {best:.1f} ms")
    if bound is not None:
        parts.append(f"bound {bound:.1f} ms")
    if best is not None and bound:
        parts.append(f"certified gap {max(0.0, best - bound) / bound:.2%}")
    return ", ".join(parts)


def as_progress(progress: "bool | str | Progress | None", every_s: float = LINE_EVERY_S) -> tuple[Progress, bool]:
    """(the :class:`Progress` for a ``progress`` argument, whether the caller owns it and must
    close it): a Progress is used as it is; True / ``"bar"`` -> a bar; ``"lines"`` -> status lines
    every ``every_s`` s; False / None -> silent."""
    if isinstance(progress, Progress):
        return progress, False
    mode = None if not progress else ("lines" if progress == "lines" else "bar")
    return Progress(mode, every_s=every_s), True
