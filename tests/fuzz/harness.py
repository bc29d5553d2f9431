"""Run one fuzz input through the CLI and classify the outcome.

Columns (each must be 0):

- ``crashes``: an exception escaped the command (in process), or a subprocess exited with a code
  other than 0 and 2;
- ``hangs``: the command ran longer than :data:`HANG_S` seconds (interrupted by SIGALRM in
  process, by ``timeout`` in a subprocess);
- ``tracebacks``: a Python traceback was printed;
- ``wrong_exit``: exit code not 0 or 2, exit 0 with an ``error:`` line, exit 2 without a one-line
  ``error:`` (``{"error": …}`` with ``--format json``), or exit 0 on input that is not a YAML mapping;
- ``silent_accepts``: exit 0 on a config the independent oracle (:mod:`tests.fuzz.oracle`) says
  MindFormers rejects.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from autotune.cli import main
from tests.fuzz.oracle import mindformers_rejects

HANG_S = 10.0
COLUMNS = ("crashes", "hangs", "tracebacks", "wrong_exit", "silent_accepts")
ROOT = Path(__file__).resolve().parents[2]


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


@dataclass
class Outcome:
    """One run: exit code, output, escaped exception, wall seconds."""

    exit_code: int | None
    output: str
    exception: BaseException | None
    seconds: float
    hang: bool = False


def run_in_process(argv: list[str]) -> Outcome:
    """The CLI in this process (click's CliRunner), interrupted after :data:`HANG_S` seconds."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        res = CliRunner().invoke(main, argv)
    except _Hang:
        return Outcome(None, "", None, time.perf_counter() - t0, hang=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.perf_counter() - t0
    exc = res.exception
    if isinstance(exc, _Hang):
        return Outcome(None, res.output, None, seconds, hang=True)
    if isinstance(exc, SystemExit):
        exc = None
    return Outcome(res.exit_code, res.output, exc, seconds)


def run_subprocess(argv: list[str]) -> Outcome:
    """The CLI as a user runs it (``python -m autotune.cli``), killed after :data:`HANG_S` s
    (plus interpreter start-up)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "autotune.cli", *argv], capture_output=True, text=True,
                           cwd=ROOT, timeout=HANG_S + 20)
    except subprocess.TimeoutExpired:
        return Outcome(None, "", None, time.perf_counter() - t0, hang=True)
    crash = None if p.returncode in (0, 2) else RuntimeError(f"exit {p.returncode}")
    return Outcome(p.returncode, p.stdout + p.stderr, crash, time.perf_counter() - t0)


@dataclass
class Tally:
    """Counts per column, the number of runs, and a few examples of each non-zero column."""

    runs: int = 0
    accepted: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, flags: set[str], accepted: bool, what: str) -> None:
        self.runs += 1
        self.accepted += accepted
        for f in flags:
            self.counts[f] += 1
            self.examples.setdefault(f, [])
            if len(self.examples[f]) < 5:
                self.examples[f].append(what[:500])


def classify(out: Outcome, *, data: Any, json_format: bool, mapping: bool) -> set[str]:
    """The columns this outcome counts in (see the module docstring).

    Args:
        data: the parsed config (for the oracle), or None for raw YAML attacks.
        json_format: the command ran with ``--format json``.
        mapping: the input parses to a YAML mapping (else exit 0 is wrong).
    """
    flags: set[str] = set()
    if out.hang:
        return {"hangs"}
    if out.exception is not None:
        flags.add("crashes")
    if "Traceback (most recent call last)" in out.output:
        flags.add("tracebacks")
    code = out.exit_code
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    if code == 0:
        if any(ln.startswith("error:") for ln in lines) or not mapping:
            flags.add("wrong_exit")
        elif data is not None and mindformers_rejects(data) is not None:
            flags.add("silent_accepts")
    elif code == 2:
        if json_format:
            try:
                ok = "error" in json.loads(lines[-1])
            except (IndexError, ValueError, TypeError):
                ok = False
        else:
            ok = bool(lines) and lines[-1].startswith("error: ") and len(lines[-1]) < 2000
        if not ok:
            flags.add("wrong_exit")
    elif out.exception is None:
        flags.add("wrong_exit")
    return flags
