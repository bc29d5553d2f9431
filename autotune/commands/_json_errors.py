"""``--format json`` errors of the commands that print JSON results (``evaluate``, ``search``,
``report``): a bad input ends with ``{"error": {"rule", "field", "message"}}`` on stdout, as
``check --format json`` prints it, besides the one-line ``error: ...`` on stderr that these
commands always printed (scripts that read it keep working), and exit 2. Before, a script reading
stdout as JSON got an empty stdout.

A command calls :func:`json_errors` first; the CLI's group (:mod:`autotune.cli`) reads the flag
when it turns an :class:`~autotune.errors.AutotuneError` into exit 2. A command that has already
printed its JSON result (``search`` where nothing fits: the result, then the R_HBM_INFEASIBLE
error) calls :func:`json_printed`, so that the error goes to stderr only and stdout holds one JSON
document.
"""

from __future__ import annotations

import click

#: Key in the root context's ``obj`` dict.
FLAG = "json_errors"


def _root_obj() -> dict | None:
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.find_root().ensure_object(dict)


def json_errors(fmt: str) -> None:
    """With ``fmt == "json"``, this command's bad-input errors are printed as JSON on stdout."""
    obj = _root_obj()
    if obj is not None:
        obj[FLAG] = fmt == "json"


def json_printed() -> None:
    """The command's JSON result is on stdout: a later error is printed on stderr only."""
    obj = _root_obj()
    if obj is not None:
        obj[FLAG] = False
