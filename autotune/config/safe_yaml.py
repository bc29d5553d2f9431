"""The one YAML reader of autotune: PyYAML's safe loader behind size, depth and alias limits.

Every YAML file autotune reads (training configs, ``--space`` files, sweep files, profiles, the
``BEST.yaml`` of ``apply`` and the text it splices) goes through :func:`load_yaml_text`, so any input
costs work linear in its size or is refused with a one-line :class:`~autotune.errors.ConfigError`:

1. the text is at most :data:`~autotune.config.limits.MAX_YAML_BYTES` (rule R_YAML_SIZE);
2. one pass over the parser's event stream (PyYAML's parser is an explicit state machine, not
   recursive, so deep input cannot exhaust the stack) checks the nesting depth (R_YAML_DEPTH) and
   the size the document would have with every alias expanded (R_YAML_ALIAS, or R_YAML_NODES
   without aliases); an alias inside the collection it names is refused too (R_YAML_ALIAS: a
   recursive structure);
3. only then does the safe loader build the Python objects (aliases stay shared references).

Syntax errors, non-text bytes and values the constructor rejects (e.g. an integer of more than
4300 digits) are rule ``yaml``; a missing file is rule ``file``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.config.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from autotune.errors import ConfigError, require_file

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The loader class every reader uses (libyaml's when built in). Code that composes or parses the
#: text itself (``autotune.emit.splice``) must use this one too: the pure-Python scanner refuses
#: text libyaml accepts (a tab before an inline comment), so a file ``check`` reads would not splice.
SAFE_LOADER = _Loader


def _scan(text: str, where: str) -> None:
    """Depth and expanded-size check over the event stream (see module docstring)."""
    sizes: dict[str, int] = {}          # anchor -> expanded node count
    stack: list[list[Any]] = []         # open collections: [anchor, expanded count so far]
    open_anchors: set[str] = set()
    total = 0
    aliases = False

    def add(n: int, *, frame: bool = True) -> None:
        nonlocal total
        total += n
        if frame and stack:
            stack[-1][1] += n
        if total > MAX_YAML_NODES:
            rule = "R_YAML_ALIAS" if aliases else "R_YAML_NODES"
            what = "with its aliases expanded " if aliases else ""
            raise ConfigError(f"the document {what}has more than {MAX_YAML_NODES:,} nodes (an alias "
                              f"bomb or a generated file); fix: write the values out, at most "
                              f"{MAX_YAML_NODES:,} nodes", field=where, value=None, rule=rule)

    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(stack) >= MAX_YAML_DEPTH:
                raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep (line "
                                  f"{ev.start_mark.line + 1}); fix: flatten the structure (MindFormers "
                                  f"configs nest 4–6 levels)", field=where, value=None, rule="R_YAML_DEPTH")
            add(1, frame=False)             # the collection node itself, counted in its own frame
            stack.append([ev.anchor, 1])
            if ev.anchor:
                open_anchors.add(ev.anchor)
        elif isinstance(ev, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor:
                open_anchors.discard(anchor)
                sizes[anchor] = size
            if stack:
                stack[-1][1] += size
        elif isinstance(ev, yaml.ScalarEvent):
            if ev.anchor:
                sizes[ev.anchor] = 1
            add(1)
        elif isinstance(ev, yaml.AliasEvent):
            aliases = True
            if ev.anchor in open_anchors:
                raise ConfigError(f"alias *{ev.anchor} refers to a collection that contains it (a "
                                  "recursive structure); fix: write the values out", field=where,
                                  value=None, rule="R_YAML_ALIAS")
            add(sizes.get(ev.anchor, 1))


def load_yaml_text(text: str | bytes, *, where: str = "<yaml>") -> Any:
    """Parse YAML ``text`` (str or UTF-8 bytes) with the limits of the module docstring.

    Args:
        text: the document.
        where: names the source in errors (a file path or an option such as ``--space``).

    Returns:
        The document's value (None for an empty document).

    Raises:
        ConfigError: rules R_YAML_SIZE, R_YAML_DEPTH, R_YAML_ALIAS, R_YAML_NODES, or ``yaml`` (not
            valid YAML, not UTF-8 text, a value the safe loader cannot build); field = ``where``.
    """
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{size:,} bytes is over the {MAX_YAML_BYTES:,}-byte limit for a YAML file "
                          "(MindFormers configs are 2–20 KB); fix: pass the training YAML itself",
                          field=where, value=size, rule="R_YAML_SIZE")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("not a UTF-8 text file", field=where, value=None, rule="yaml") from None
    try:
        _scan(text, where)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - the C/pure *safe* loader
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in str(problem):       # libyaml's own limit (1000) hit while scanning ahead
            raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep{at}; fix: flatten the "
                              "structure (MindFormers configs nest 4–6 levels)", field=where, value=None,
                              rule="R_YAML_DEPTH") from None
        # where the unclosed construct began (an unclosed '[' is only found on a later line)
        ctx, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        began = ""
        if ctx and cmark is not None and mark is not None and cmark.line != mark.line:
            what = str(ctx).removeprefix("while parsing ").removeprefix("while scanning ")
            began = f" ({what} that starts at line {cmark.line + 1}, column {cmark.column + 1})"
        raise ConfigError(f"not valid YAML{at}: {problem}{began}", field=where, value=None, rule="yaml") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise ConfigError(f"not a value autotune can read ({type(exc).__name__}: {str(exc)[:120]})",
                          field=where, value=None, rule="yaml") from None


def read_yaml_file(path: str | Path, *, mapping: bool = True) -> Any:
    """Read a YAML file through :func:`load_yaml_text`.

    Args:
        path: the file.
        mapping: require a top-level mapping (an empty file is refused with its own message).

    Raises:
        ConfigError: rule ``file`` (missing, a directory, unreadable), ``yaml`` (empty file or a top
            level that is not a mapping, when ``mapping``), or any rule of :func:`load_yaml_text`.
    """
    p = require_file(path)
    try:
        size = p.stat().st_size
        if size > MAX_YAML_BYTES:
            return load_yaml_text(b" " * (MAX_YAML_BYTES + 1), where=str(p))   # the size error
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror})", field=str(p), value=None,
                          rule="file") from None
    data = load_yaml_text(raw, where=str(p))
    if mapping:
        if data is None:
            raise ConfigError("the file is empty (or only comments); fix: give a YAML mapping such as "
                              "the MindFormers training YAML", field=str(p), value=None, rule="yaml")
        if not isinstance(data, dict):
            kind = {list: "a list", str: "a single string", int: "a single number",
                    float: "a single number", bool: "a single boolean"}.get(type(data), type(data).__name__)
            raise ConfigError(f"top level must be a mapping (key: value lines), got {kind}",
                              field=str(p), value=None, rule="yaml")
    return data
