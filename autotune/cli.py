"""Command-line interface (thin: parse -> api -> render).

Every :class:`~autotune.errors.AutotuneError` becomes a one-line message on stderr and exit code 2
(and ``{"error": {...}}`` on stdout where the command prints JSON:
:mod:`autotune.commands._json_errors`);
so does a usage error of a sub-command's options (click's, e.g. ``--timeout 0``) and a pydantic
``ValidationError`` (a derived value one of autotune's models refuses: rule
R_UNSUPPORTED, naming the model's field); ``--debug`` shows the traceback instead. Sub-commands
live in :mod:`autotune.commands`; each module there exposes ``COMMANDS`` (a list of click
commands) and is registered automatically.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys

import click
from pydantic import ValidationError

import autotune.commands as pkg
from autotune.config.patterns import pattern_scope
from autotune.commands._json_errors import FLAG as JSON_ERRORS
from autotune.errors import AutotuneError, ConfigError, from_validation_error

EXIT_BAD_INPUT = 2


def _usage_text(exc: click.UsageError) -> str:
    """Click's usage message without its closing full stop: the pointer to ``--help`` follows it
    ("... in the range x>0 (see 'autotune search --help')")."""
    return exc.format_message().rstrip().removesuffix(".")


class _Group(click.Group):
    """click group that maps AutotuneError, and click's usage errors of the group's and a
    sub-command's options and arguments (a value out of range, an unknown option), to exit 2 with a
    one-line message (click prints its usage block and a hint on three more lines)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """The group's own options: an unknown one (``autotune --format json search x.yaml``) is a
        one-line usage error, exit 2, that names the sub-command to put it after when one of
        them has it (``--format`` is each command's own option); ``{"error": ...}`` on stdout
        too when the tokens ask for ``--format json``. ``autotune`` alone still prints the help."""
        raw = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            if "--debug" in raw:
                raise
            line = f"{_usage_text(exc)} (see '{ctx.command_path} --help')"
            name = getattr(exc, "option_name", None)
            typed = next((t for t in raw if t in self.commands), None)
            subs = [n for n in sorted(self.commands) if name and any(name in o.opts for o in self.commands[n].params)]
            prog = ctx.command_path
            if subs and typed in subs:
                line = (f"No such option '{name}' before the sub-command: it is an option of "
                        f"'{prog} {typed}'; put it after the sub-command, e.g. "
                        f"'{_moved_after(prog, raw, name, typed)}' (see '{prog} {typed} --help')")
            elif subs:  # no sub-command typed, or one without this option: say which have it
                line = (f"No such option '{name}' before the sub-command"
                        + (f", nor one of '{prog} {typed}'" if typed else "")
                        + f": it is an option of {', '.join(repr(f'{prog} {n}') for n in subs)}"
                        + f" (see '{prog} {subs[0]} --help')")
            body = _usage_body(exc) if _asks_json(raw) else None
            if body is not None and subs:
                body["message"] = line
            _exit_bad_input(ctx, line, body)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        sub_args = list(ctx.args)          # the sub-command's own tokens, before click parses them
        named = getattr(ctx, "_protected_args", None)  # click 8.2+; before it a public attribute
        named = list(ctx.protected_args if named is None else named)
        sub = named[0] if named and named[0] in self.commands else None
        try:
            with pattern_scope():   # one select-pattern budget (R_PATTERN_BUDGET) per command
                return super().invoke(ctx)
        except click.UsageError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            if sub is not None and (exc.ctx is None or exc.ctx is ctx):
                where = f"{ctx.command_path} {sub}"  # an option's missing value: click names the group
            _exit_bad_input(ctx, f"{_usage_text(exc)} (see '{where} --help')",
                            _usage_body(exc) if _asks_json(sub_args) else None)
        except AutotuneError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _bad_input(ctx, exc)
        except ValidationError as exc:
            # a value read from the input that one of autotune's models refuses after the readers
            # passed it: one line naming the model's field, never pydantic's multi-line text
            if ctx.obj and ctx.obj.get("debug"):
                raise
            err = from_validation_error(exc, None, what=f"{exc.title} derived from the input (an "
                                        "autotune bug: --debug shows the traceback)",
                                        rule="R_UNSUPPORTED")
            _bad_input(ctx, err)


def _moved_after(prog: str, raw: list[str], name: str, sub: str) -> str:
    """The command line ``raw`` with option ``name`` (and its value, when it has one: the next
    token not starting with ``-``) moved to the end of sub-command ``sub``'s tokens."""
    i = raw.index(name) if name in raw else next(k for k, t in enumerate(raw) if t.startswith(name + "="))
    take = 2 if raw[i] == name and i + 1 < len(raw) and not raw[i + 1].startswith("-") \
        and raw[i + 1] != sub else 1
    rest = raw[:i] + raw[i + take:]
    if sub not in rest:
        rest.append(sub)
    return " ".join([prog, *rest, *raw[i:i + take]])


def _asks_json(args: list[str]) -> bool:
    """Whether a sub-command's raw tokens ask for ``--format json`` (its usage error comes before
    the command could say so through :func:`~autotune.commands._json_errors.json_errors`)."""
    value = None                        # click keeps the last --format given
    for i, tok in enumerate(args):
        if tok == "--format":
            value = args[i + 1] if i + 1 < len(args) else None
        elif tok.startswith("--format="):
            value = tok.split("=", 1)[1]
    return value == "json"


def _usage_body(exc: click.UsageError) -> dict:
    """``{"rule": "usage", "field", "message"}`` of a click usage error: the field is the option's
    first name (``--timeout``) or the argument's (``CONFIG``), None when click names neither."""
    param = getattr(exc, "param", None)
    field = getattr(exc, "option_name", None)          # click.NoSuchOption: the unknown option
    if param is not None:
        field = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    return {"rule": "usage", "field": field, "message": exc.format_message()}


def _bad_input(ctx: click.Context, exc: AutotuneError) -> None:
    """Exit 2 with one line ``error: ...`` on stderr, and ``{"error": {...}}`` on stdout too when
    the command asked for JSON errors (:mod:`autotune.commands._json_errors`)."""
    body = None
    if ctx.obj and ctx.obj.get(JSON_ERRORS):
        body = exc.to_dict() if isinstance(exc, ConfigError) else {"rule": None, "field": None, "message": str(exc)}
    _exit_bad_input(ctx, str(exc), body)


def _exit_bad_input(ctx: click.Context, line: str, body: dict | None) -> None:
    """``{"error": body}`` on stdout when ``body`` is given, ``error: line`` on stderr, exit 2."""
    if body is not None:
        click.echo(json.dumps({"error": body}))
    click.echo(f"error: {line}", err=True)
    ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="autotune")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """autotune: find the best pipeline-parallel layout (offset, pp_interleave_num, recompute)
    for a MindFormers training run, from the YAML alone."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"autotune.commands.{info.name}")
        for cmd in getattr(mod, "COMMANDS", []):
            main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
