"""Write tuned Megatron arguments back into the user's own file, changing only those arguments.

- **YAML / JSON mapping**: a changed value is replaced where it is written (its scalar's span); a
  removed argument's line is deleted (JSON: the comma before it moves when it was the last key); a
  new argument is inserted after ``--pipeline-model-parallel-size`` (else the last key) in the
  file's own key style (``--dashes``, ``dashes`` or ``underscores``) and indentation.
- **launch script**: a changed value is replaced where it is written — in the ``NAME=value``
  assignment when the flag's value was a plain ``$NAME`` with a literal assignment, else at the
  flag; a removed flag and its value are cut (and the line, when nothing else is left on it); a
  new flag goes on a new line after ``--pipeline-model-parallel-size`` (else the last flag), with
  that line's indentation and ``\\`` continuation.

Every other byte stays as written. Pure text functions; the CLI decides where to write.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from autotune.errors import ConfigError
from autotune.megatron.args import MegatronArgs, flag_name, norm_key
from autotune.megatron.emit import render_value

ANCHORS = ("pipeline_model_parallel_size", "tensor_model_parallel_size", "num_layers")


def changes(args: MegatronArgs, flags: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``flags`` that differs from what ``args`` holds (None = remove a present key)."""
    out = {}
    for k, v in flags.items():
        cur = args.values.get(k)
        if v is None:
            if k in args.values:
                out[k] = None
        elif _norm(cur) != _norm(v):
            out[k] = v
    return out


def _norm(v: Any) -> Any:
    if isinstance(v, list):
        return [str(x) for x in v]
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return v


def rewrite(args: MegatronArgs, flags: dict[str, Any]) -> str:
    """The file text with ``flags`` applied (see module docstring).

    Raises:
        ConfigError: the arguments were not read from a file (rule ``R_MEGATRON_REWRITE``).
    """
    if args.text is None:
        raise ConfigError("the arguments did not come from a file: nothing to rewrite", field=args.source,
                          value=None, rule="R_MEGATRON_REWRITE")
    todo = changes(args, flags)
    if not todo:
        return args.text
    if args.kind == "script":
        return _rewrite_script(args, todo)
    return _rewrite_mapping(args, todo)


# ------------------------------------------------------------------------------------------------
# mappings

def _mapping_node(text: str, section: str) -> yaml.MappingNode:
    root = yaml.compose(text)
    if section:
        for k, v in root.value:
            if k.value == section:
                return v
    return root


def _yaml_scalar(v: Any, json_mode: bool) -> str:
    if json_mode:
        return json.dumps(v)
    if v is True:
        return "true"
    if isinstance(v, list):
        v = " ".join(str(x) for x in v)
    if isinstance(v, (int, float)):
        return str(v)
    text = str(v)
    if re.fullmatch(r"[A-Za-z0-9_.+-]+( [A-Za-z0-9_.+-]+)*", text) and text not in ("true", "false", "null"):
        return text
    return json.dumps(text)


def _rewrite_mapping(args: MegatronArgs, todo: dict[str, Any]) -> str:
    text = args.text or ""
    json_mode = args.source.endswith(".json")
    node = _mapping_node(text, args.section)
    pairs = {norm_key(k.value): (k, v) for k, v in node.value}
    edits: list[tuple[int, int, str]] = []
    lines_start = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_start(i: int) -> int:
        return text.rfind("\n", 0, i) + 1

    def line_end(i: int) -> int:
        j = text.find("\n", i)
        return len(text) if j < 0 else j + 1

    del lines_start
    new_keys = []
    for k, v in todo.items():
        if k in pairs:
            kn, vn = pairs[k]
            if v is None:
                a, b = line_start(kn.start_mark.index), line_end(vn.end_mark.index - 1 if vn.end_mark.index else 0)
                if json_mode:
                    seg = text[a:b].rstrip()
                    if not seg.endswith(","):  # last key: drop the comma that precedes it
                        prev = text.rfind(",", 0, a)
                        if prev >= 0 and text[prev + 1:a].strip() == "":
                            edits.append((prev, prev + 1, ""))
                edits.append((a, b, ""))
            else:
                edits.append((vn.start_mark.index, vn.end_mark.index, _yaml_scalar(v, json_mode)))
        elif v is not None:
            new_keys.append((k, v))
    if new_keys:
        anchor = next((pairs[a] for a in ANCHORS if a in pairs), None) or (node.value[-1] if node.value else None)
        if anchor is None:
            raise ConfigError("an empty mapping: nowhere to add arguments", field=args.source, value=None,
                              rule="R_MEGATRON_REWRITE")
        kn, vn = anchor
        indent = " " * kn.start_mark.column
        style = _key_style(args)
        if json_mode:
            at = line_start(kn.start_mark.index)
            block = "".join(f"{indent}{json.dumps(style(k))}: {_yaml_scalar(v, True)},\n" for k, v in new_keys)
        else:
            at = line_end(vn.end_mark.index - 1 if vn.end_mark.index else 0)
            block = "".join(f"{indent}{style(k)}: {_yaml_scalar(v, False)}\n" for k, v in new_keys)
            if at == len(text) and not text.endswith("\n"):
                block = "\n" + block
        edits.append((at, at, block))
    return _apply(text, edits)


def _key_style(args: MegatronArgs):
    written = list(args.key_style.values())
    if any(w.startswith("--") for w in written):
        return lambda k: flag_name(k)
    if any("-" in w for w in written):
        return lambda k: k.replace("_", "-")
    return lambda k: k


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:a] + new + text[b:]
    return text


# ------------------------------------------------------------------------------------------------
# scripts

def _rewrite_script(args: MegatronArgs, todo: dict[str, Any]) -> str:
    text = args.text or ""
    edits: list[tuple[int, int, str]] = []
    new = []

    def line_bounds(i: int) -> tuple[int, int]:
        a = text.rfind("\n", 0, i) + 1
        b = text.find("\n", i)
        return a, (len(text) if b < 0 else b)

    for k, v in todo.items():
        sp = args.spans.get(k)
        if sp is None or sp.flag_start < 0:
            if v is not None:
                new.append((k, v))
            elif k in args.values:
                raise ConfigError(f"cannot find where {flag_name(k)} is written to remove it", field=flag_name(k),
                                  value=args.values.get(k), rule="R_MEGATRON_REWRITE")
            continue
        if v is None:
            a, b = sp.flag_start, sp.flag_end
            la, lb = line_bounds(a)
            rest = (text[la:a] + text[b:lb]).strip()
            if rest in ("", "\\"):
                edits.append((la, min(lb + 1, len(text)), ""))
            else:
                while b < lb and text[b] in " \t":
                    b += 1
                edits.append((a, b, ""))
            continue
        word = render_value(v) if v is not True else ""
        if v is True:
            continue
        if sp.value_start is None:
            edits.append((sp.flag_end, sp.flag_end, " " + word))
            continue
        var = sp.via_variable
        tok = args.assignments.get(var) if var else None
        if tok is not None and re.fullmatch(r"[\w.\-/]*", tok.raw or "") and _used_once(text, var):
            edits.append((tok.start, tok.end, word))
        else:
            edits.append((sp.value_start, sp.value_end, word))
    if new:
        anchor = next((args.spans[a] for a in ANCHORS if a in args.spans and args.spans[a].flag_start >= 0), None)
        if anchor is None:
            known = [s for s in args.spans.values() if s.flag_start >= 0]
            if not known:
                raise ConfigError("no flag position known in the script: nowhere to add arguments",
                                  field=args.source, value=None, rule="R_MEGATRON_REWRITE")
            anchor = max(known, key=lambda s: s.flag_end)
        la, lb = line_bounds(anchor.flag_end)
        line = text[la:lb]
        indent = re.match(r"[ \t]*", line).group(0)
        cont = line.rstrip().endswith("\\")
        prev_cont = la >= 2 and text[:la - 1].rstrip(" \t").endswith("\\")
        body = [f"{indent}{flag_name(k)} {render_value(v)}" if v is not True else f"{indent}{flag_name(k)}"
                for k, v in new]
        if cont:
            block = "".join(b + " \\\n" for b in body)
        elif prev_cont:
            edits.append((lb, lb, " \\"))
            block = "".join(b + (" \\\n" if i < len(body) - 1 else "\n") for i, b in enumerate(body))
        else:
            block = "".join(b + "\n" for b in body)
        at = min(lb + 1, len(text))
        if lb == len(text):
            block = "\n" + block.rstrip("\n")
        edits.append((at, at, block))
    return _apply(text, edits)


def _used_once(text: str, var: str) -> bool:
    return len(re.findall(rf"\$\{{?{re.escape(var)}\b", text)) == 1
