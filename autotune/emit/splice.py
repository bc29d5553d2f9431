"""Splice tuned values into a user's MindFormers YAML text, changing nothing else.

:func:`splice` locates each value with PyYAML's node marks (character offsets of the composed
document) and rewrites only that value's characters, in flow style (``[[1, 2], [3, 4]]``,
``{'feed_forward\\.mul': [[1, 1]]}``). Comments, key order, quoting and blank lines elsewhere stay
byte-identical, so ``diff`` shows only the tuned lines. A key that is missing is inserted as the
last entry of its mapping (creating missing parent mappings), indented like its siblings.
Values equal to the current ones are left untouched.

Limits: anchors/aliases at a tuned key are replaced by the literal value; a tuned value that was a
block collection is rewritten in flow style on the key's line.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from autotune.config.safe_yaml import load_yaml_text
from autotune.errors import AutotuneError, ConfigError

#: keys whose mapping value is one value (pattern -> counts), not a section to walk into.
LEAF_MAPPING_KEYS = {"select_recompute", "select_comm_recompute", "select_recompute_exclude",
                     "select_comm_recompute_exclude", "recompute", "offset", "layer_swap", "op_swap"}

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n", "~"}


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


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _content_end(node: yaml.Node) -> int:
    """Offset just after the last character of ``node``'s own text (block collections' end marks
    include trailing newlines and comments; this does not)."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node.end_mark.index


def _find(root: yaml.Node, path: tuple[str, ...]):
    """(deepest mapping reached, index of the first missing key, key node, value node)."""
    node = root
    for depth, key in enumerate(path):
        if not isinstance(node, yaml.MappingNode):
            return None, depth, None, None
        hit = None
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.value == key:
                hit = (knode, vnode)
        if hit is None:
            return node, depth, None, None
        if depth == len(path) - 1:
            return node, depth + 1, hit[0], hit[1]
        if not isinstance(hit[1], yaml.MappingNode):
            raise ConfigError(f"expected a mapping at {'.'.join(path[:depth + 1])} to hold "
                              f"{'.'.join(path)}", field=".".join(path[:depth + 1]), value=None,
                              rule="R_TYPE")
        node = hit[1]
    return node, len(path), None, None


def _get(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False, None
        data = data[key]
    return True, data


def _nested(path: tuple[str, ...], value: Any, indent: int, capital: bool) -> str:
    lines = []
    for i, key in enumerate(path[:-1]):
        lines.append(" " * (indent + 2 * i) + f"{render(key)}:")
    lines.append(" " * (indent + 2 * (len(path) - 1)) + f"{render(path[-1])}: "
                 f"{render(value, capital_bools=capital)}")
    return "\n".join(lines) + "\n"


def _splice_one(text: str, path: tuple[str, ...], value: Any, capital: bool) -> str:
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return (text if not text or text.endswith("\n") else text + "\n") + _nested(path, value, 0, capital)
    mapping, depth, knode, vnode = _find(root, path)
    if mapping is None:
        raise ConfigError(f"cannot insert {'.'.join(path)}: its parent is not a mapping",
                          field=".".join(path[:depth]), value=None, rule="R_TYPE")
    new = render(value, capital_bools=capital)
    if vnode is not None:
        if isinstance(vnode, (yaml.MappingNode, yaml.SequenceNode)) and not vnode.flow_style:
            start, end = knode.end_mark.index, _content_end(vnode)
            # keep "key" then ": value"; skip the original ':' and anything up to the block
            return text[:start] + ": " + new + text[end:]
        start, end = vnode.start_mark.index, vnode.end_mark.index
        if isinstance(vnode, yaml.ScalarNode) and vnode.style in ("|", ">"):
            end = _line_end(text, end - 1)
        if start == end or (start > 0 and text[start - 1] == ":"):
            new = " " + new if start > 0 and text[start - 1] == ":" else new
        return text[:start] + new + text[end:]
    missing = path[depth:]
    if mapping.flow_style:
        close = mapping.end_mark.index - 1
        sep = ", " if mapping.value else ""
        inner = value
        for key in reversed(missing[1:]):
            inner = {key: inner}
        return text[:close] + f"{sep}{render(missing[0])}: {render(inner, capital_bools=capital)}" + text[close:]
    if mapping.value:
        indent = mapping.value[0][0].start_mark.column
        pos = _line_end(text, _content_end(mapping.value[-1][1]) - 1)
    else:
        indent, pos = 0, len(text)
    head = text[:pos]
    if head and not head.endswith("\n"):
        head += "\n"
    return head + _nested(missing, value, indent, capital) + text[pos:]


def _line_end(text: str, index: int) -> int:
    nl = text.find("\n", max(index, 0))
    return len(text) if nl < 0 else nl + 1


def splice(text: str, updates: list[tuple[tuple[str, ...], Any]]) -> tuple[str, list[str]]:
    """Write ``updates`` ((path, value) pairs) into YAML ``text``.

    Returns:
        (new text, dotted paths that changed). Unchanged values are skipped.

    Raises:
        ConfigError: the text is not YAML, or a parent of a path is not a mapping.
        AutotuneError: the spliced text does not read back as the intended values (bug guard).
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
        check = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:  # pragma: no cover - guard
        raise AutotuneError(f"internal error: spliced YAML does not parse ({exc})") from None
    for path, value in updates:
        found, current = _get(check, path)
        if not found or not _same(current, value):
            raise AutotuneError(f"internal error: {'.'.join(path)} did not read back as {value!r}")
    return text, changed
