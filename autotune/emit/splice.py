"""Splice tuned values into a user's MindFormers YAML text, changing nothing else.

:func:`splice` locates each value with PyYAML's node marks (character offsets of the composed
document) and rewrites only that value's characters, in flow style (``[[1, 2], [3, 4]]``,
``{'feed_forward\\.mul': [[1, 1]]}``). Comments, key order, quoting and blank lines elsewhere stay
byte-identical, so ``diff`` shows only the tuned lines. A key that is missing is inserted as the
last entry of its mapping (creating missing parent mappings), indented like its siblings.
Values equal to the current ones are left untouched.

Line endings are kept: inserted lines end like the file's lines (CRLF in a CRLF file). The text is
composed with the same loader every reader uses (:data:`autotune.config.safe_yaml.SAFE_LOADER`), so
whatever ``check`` reads can be spliced (e.g. a tab before an inline comment).

Limits: a tuned value that was an alias (``offset: *zero``) is replaced by the literal value; an
anchor defined in a replaced value (``offset: &off 0``) goes with it, and every alias of it elsewhere
(``x: *off``) is written out as the value it had, so the other keys read as before; a parent
mapping that is null (``recompute_config:`` with only comments under it) gets the keys as a block
under its line; a tuned value that was a block collection is rewritten in flow style on the key's
line. A parent that is an alias of a mapping defined elsewhere is refused (writing into it would
change the other key too).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from autotune.config.safe_yaml import SAFE_LOADER, load_yaml_text
from autotune.errors import AutotuneError, ConfigError

#: keys whose mapping value is one value (pattern -> counts), not a section to walk into.
LEAF_MAPPING_KEYS = {"select_recompute", "select_comm_recompute", "select_recompute_exclude",
                     "select_comm_recompute_exclude", "recompute", "offset", "layer_swap", "op_swap"}

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n", "~"}


def read_text_exact(path: str | Path) -> str:
    """A text file's content as written: UTF-8, line endings kept (CRLF stays CRLF, unlike
    ``Path.read_text``'s universal newlines), so a splice can write them back unchanged."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def leaves(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Flatten a partial YAML mapping into (path, value) pairs; see :data:`LEAF_MAPPING_KEYS`."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in tree.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and str(key) not in LEAF_MAPPING_KEYS and value:
            out.extend(leaves(value, path))
        else:
            out.append((path, value))
    return out


def render(value: Any, *, capital_bools: bool = False) -> str:
    """One-line YAML flow text for ``value`` (strings single-quoted unless plainly safe)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
        return text.capitalize() if capital_bools else text
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _RESERVED:
            return value
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render(v, capital_bools=capital_bools) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render(str(k))}: {render(v, capital_bools=capital_bools)}"
                               for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write a {type(value).__name__} value into YAML", field="<best>",
                      value=repr(value), rule="R_TYPE")


def _same(a: Any, b: Any, *, ordered: bool = True) -> bool:
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return False
    if isinstance(a, dict):
        keys = list(a) == list(b) if ordered else set(a) == set(b)
        return keys and all(_same(a[k], b[k], ordered=ordered) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, ordered=ordered) for x, y in zip(a, b))
    return a == b


def same_value(a: Any, b: Any) -> bool:
    """Whether two YAML values are the same: equal, of the same type (an int equals a float of its
    value, a bool equals only a bool), mappings in the same key order."""
    return _same(a, b)


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def _content_end(node: yaml.Node) -> int:
    """Offset just after the last character of ``node``'s own text (block collections' end marks
    include trailing newlines and comments; this does not)."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node.end_mark.index


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _aliased(knode: yaml.Node, vnode: yaml.Node) -> bool:
    """Whether ``vnode`` is an alias: the composer hands back the anchored node, written before the key."""
    return vnode.start_mark.index < knode.end_mark.index


def _find(root: yaml.Node, path: tuple[str, ...]):
    """(deepest mapping reached, index of the first missing key, key node, value node, null parent).

    ``null parent``: the key at ``path[depth - 1]`` exists but its value is null, so the keys from
    ``depth`` on are missing under it (key node and value node are that key's and that null's).
    """
    node = root
    for depth, key in enumerate(path):
        if not isinstance(node, yaml.MappingNode):
            return None, depth, None, None, False
        hit = None
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.value == key:
                hit = (knode, vnode)
        if hit is None:
            return node, depth, None, None, False
        if depth == len(path) - 1:
            return node, depth + 1, hit[0], hit[1], False
        if _is_null(hit[1]) and not _aliased(*hit):
            return node, depth + 1, hit[0], hit[1], True
        where = ".".join(path[:depth + 1])
        if not isinstance(hit[1], yaml.MappingNode):
            raise ConfigError(f"expected a mapping at {where} to hold "
                              f"{'.'.join(path)}", field=where, value=None, rule="R_TYPE")
        if _aliased(*hit):
            raise ConfigError(f"{where} is an alias of a mapping written elsewhere; writing "
                              f"{'.'.join(path)} into it would change that mapping too; fix: write "
                              f"{where} out in full", field=where, value=None, rule="R_UNSUPPORTED")
        node = hit[1]
    return node, len(path), None, None, False


def _get(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False, None
        data = data[key]
    return True, data


def line_ending(text: str) -> str:
    """The file's line ending: CRLF when most of its lines end so, else LF."""
    crlf = text.count("\r\n")
    return "\r\n" if crlf and 2 * crlf >= text.count("\n") else "\n"


def _nested(path: tuple[str, ...], value: Any, indent: int, capital: bool, nl: str = "\n") -> str:
    lines = []
    for i, key in enumerate(path[:-1]):
        lines.append(" " * (indent + 2 * i) + f"{render(key)}:")
    lines.append(" " * (indent + 2 * (len(path) - 1)) + f"{render(path[-1])}: "
                 f"{render(value, capital_bools=capital)}")
    return nl.join(lines) + nl


def _wrap(keys: tuple[str, ...], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _walk(node: yaml.Node, seen: set[int]):
    if id(node) in seen:
        return
    seen.add(id(node))
    yield node
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _walk(k, seen)
            yield from _walk(v, seen)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            yield from _walk(v, seen)


def _alias_edits(text: str, root: yaml.Node, start: int, end: int,
                 capital: bool) -> list[tuple[int, int, str]]:
    """Edits that write out, as the value it has now, every alias outside ``text[start:end]`` of an
    anchor defined inside it (that text is about to be replaced, the anchor with it)."""
    events = list(yaml.parse(text, Loader=SAFE_LOADER))
    live: dict[str, int] = {}           # anchor defined in the span -> its event's start offset
    uses: list[tuple[int, int, int]] = []
    for ev in events:
        inside = start <= ev.start_mark.index < end
        if isinstance(ev, yaml.AliasEvent):
            if not inside and ev.anchor in live:
                uses.append((ev.start_mark.index, ev.end_mark.index, live[ev.anchor]))
        elif getattr(ev, "anchor", None):
            if inside:
                live[ev.anchor] = ev.start_mark.index
            else:
                live.pop(ev.anchor, None)     # redefined: later aliases name the new one
    if not uses:
        return []
    nodes = {n.start_mark.index: n for n in _walk(root, set())}
    edits = []
    for a, b, at in uses:
        value = yaml.SafeLoader("").construct_document(nodes[at])
        edits.append((a, b, render(value, capital_bools=capital)))
    return edits


def _value_span(text: str, knode: yaml.Node, vnode: yaml.Node) -> tuple[int, int, bool]:
    """(start, end, block) of the value's own text after ``knode``: its alias token when it is an
    alias; for a block collection (``block``) from just after the key (the ':' is rewritten too)."""
    if _aliased(knode, vnode):
        for ev in yaml.parse(text, Loader=SAFE_LOADER):
            if isinstance(ev, yaml.AliasEvent) and ev.start_mark.index >= knode.end_mark.index:
                return ev.start_mark.index, ev.end_mark.index, False
    if isinstance(vnode, (yaml.MappingNode, yaml.SequenceNode)) and not vnode.flow_style:
        return knode.end_mark.index, _content_end(vnode), True
    start, end = vnode.start_mark.index, vnode.end_mark.index
    if isinstance(vnode, yaml.ScalarNode) and vnode.style in ("|", ">"):
        end = start + len(text[start:end].rstrip())      # keep the line break after its last line
    return start, end, False


def _replace(text: str, edits: list[tuple[int, int, str]]) -> str:
    for a, b, new in sorted(edits, reverse=True):
        text = text[:a] + new + text[b:]
    return text


def _splice_one(text: str, path: tuple[str, ...], value: Any, capital: bool) -> str:
    nl = line_ending(text)
    root = yaml.compose(text, Loader=SAFE_LOADER)
    if root is None:
        return (text if not text or text.endswith(("\n", "\r")) else text + nl) + _nested(path, value, 0, capital, nl)
    mapping, depth, knode, vnode, null_parent = _find(root, path)
    if mapping is None:
        raise ConfigError(f"cannot insert {'.'.join(path)}: its parent is not a mapping",
                          field=".".join(path[:depth]), value=None, rule="R_TYPE")
    if null_parent and not mapping.flow_style:
        # ``key:`` with nothing (or null / ~) under it: the missing keys as a block below its line
        start, end = vnode.start_mark.index, vnode.end_mark.index
        pos = _line_end(text, max(end, knode.end_mark.index))
        block = _nested(path[depth:], value, knode.start_mark.column + 2, capital, nl)
        head = "" if text[:pos].endswith("\n") else nl
        if start < end and not text[end:pos].strip():      # "key: ~" -> "key:", no trailing blank
            start = len(text[:start].rstrip(" \t"))
        return _replace(text, [(pos, pos, head + block), (start, end, "")])
    if vnode is not None:
        new_value = _wrap(path[depth:], value) if null_parent else value
        new = render(new_value, capital_bools=capital)
        start, end, block = _value_span(text, knode, vnode)
        edits = _alias_edits(text, root, start, end, capital)
        if block:
            # keep "key" then ": value"; skip the original ':' and anything up to the block
            return _replace(text, edits + [(start, end, ": " + new)])
        if start > 0 and text[start - 1] == ":":
            new = " " + new
        return _replace(text, edits + [(start, end, new)])
    missing = path[depth:]
    if mapping.flow_style:
        close = mapping.end_mark.index - 1
        sep = ", " if mapping.value else ""
        inner = _wrap(missing[1:], value)
        return text[:close] + f"{sep}{render(missing[0])}: {render(inner, capital_bools=capital)}" + text[close:]
    if mapping.value:
        indent = mapping.value[0][0].start_mark.column
        pos = _line_end(text, _content_end(mapping.value[-1][1]) - 1)
    else:
        indent, pos = 0, len(text)
    head = text[:pos]
    if head and not head.endswith("\n"):
        head += nl
    return head + _nested(missing, value, indent, capital, nl) + text[pos:]


def _line_end(text: str, index: int) -> int:
    nl = text.find("\n", max(index, 0))
    return len(text) if nl < 0 else nl + 1


def splice(text: str, updates: list[tuple[tuple[str, ...], Any]]) -> tuple[str, list[str]]:
    """Write ``updates`` ((path, value) pairs) into YAML ``text``.

    Returns:
        (new text, dotted paths that changed). Unchanged values are skipped.

    Raises:
        ConfigError: the text is not YAML, or a parent of a path is not a mapping.
        AutotuneError: the spliced text does not read back as the original values with ``updates``
            written over them (bug guard: nothing else may change).
    """
    data = load_yaml_text(text, where="<config>") if text.strip() else {}   # bounded safe loader
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", field="<config>", value=None, rule="yaml")
    capital = len(re.findall(r":\s*(True|False)\b", text)) > len(re.findall(r":\s*(true|false)\b", text))
    changed = []
    for path, value in updates:
        found, current = _get(data, path)
        if found and _same(current, value):
            continue
        text = _splice_one(text, path, value, capital)
        changed.append(".".join(path))
    try:
        check = yaml.load(text, Loader=SAFE_LOADER) or {}  # noqa: S506 - the C/pure *safe* loader
    except yaml.YAMLError as exc:  # pragma: no cover - guard
        raise AutotuneError(f"internal error: spliced YAML does not parse ({exc})") from None
    for path, value in updates:
        found, current = _get(check, path)
        if not found or not _same(current, value):
            raise AutotuneError(f"internal error: {'.'.join(path)} did not read back as {value!r}")
    expected = copy.deepcopy(data)
    for path, value in updates:
        _set(expected, path, value)
    if not _same(check, expected, ordered=False):
        raise AutotuneError("internal error: splicing changed a value that was not to be written")
    return text, changed
