"""Code shape (issue 16): no function in ``autotune/`` is over 100 lines (``def`` line to its
last line, decorators excluded), so each reads on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"
MAX_LINES = 100

#: Functions allowed over the limit, each with a reason (none today: keep it that way).
ALLOWED: set[str] = set()


def function_lengths(root: Path = PACKAGE) -> dict[str, int]:
    """``"<path relative to root>:<name>"`` -> lines, for every function and method (nested too)."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(root).as_posix()}:{node.name}"
                out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_no_function_over_100_lines():
    long = {k: n for k, n in function_lengths().items() if n > MAX_LINES and k not in ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines (split them): {long}"


def test_the_measure_counts_def_to_last_line(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    (tmp_path / "m.py").write_text(f"@staticmethod\ndef short():\n{body}\n\n\ndef long():\n{body}\n    y = 0\n")
    got = function_lengths(tmp_path)
    assert got == {"m.py:short": MAX_LINES, "m.py:long": MAX_LINES + 1}


def test_allow_list_names_only_functions_still_too_long():
    lengths = function_lengths()
    stale = {k for k in ALLOWED if lengths.get(k, 0) <= MAX_LINES}
    assert not stale, f"remove from ALLOWED (now <= {MAX_LINES} lines or gone): {stale}"
