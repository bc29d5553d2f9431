"""Megatron-LM argument sets: read them from a YAML/JSON file, a launch script or a Python mapping.

An argument set is an ordered mapping of Megatron's argument names, normalized the way argparse
stores them (``--num-layers`` -> ``num_layers``), to values: ``True`` for a flag given without a
value (``--swiglu``), a string, int, float, or a list of strings for an ``nargs='+'`` argument
(``--recompute-modules mlp layernorm``). Where the text came from is kept (:class:`ArgSpan`) so that
:mod:`autotune.megatron.rewrite` can change a value in the user's own file and leave every other
byte as written.

Accepted inputs:

- a mapping (YAML or JSON file, or a Python dict) of argument names to values, the names with
  dashes or underscores, with or without ``--``; a top-level ``MODEL_ARGS`` mapping (the format of
  Megatron-LM's ``tests/functional_tests/test_cases/*/model_config.yaml``) is read instead of the
  top level when present. A boolean ``false`` means the flag is absent;
- a launch script (:func:`autotune.megatron.script.parse_script`);
  :func:`autotune.megatron.read.read_args` takes any of them;
- a list of argv strings (``["--num-layers", "80", "--swiglu", ...]``).

Pure: no Megatron import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError

#: Arguments that take several values (argparse ``nargs='+'`` / ``'*'`` in Megatron-LM
#: megatron/training/arguments.py and the TransformerConfig-generated groups).
MULTI_VALUE = {"recompute_modules", "data_path", "train_data_path", "valid_data_path", "test_data_path",
               "split", "offload_modules"}
#: torchrun / launcher arguments that give the world size (read, never rewritten).
LAUNCHER_KEYS = {"nproc_per_node", "nnodes"}


def norm_key(key: Any) -> str:
    """``--num-layers`` / ``num-layers`` / ``num_layers`` -> ``num_layers``."""
    return str(key).strip().lstrip("-").replace("-", "_")


def flag_name(key: str) -> str:
    """``num_layers`` -> ``--num-layers`` (how Megatron's command line spells it)."""
    return "--" + key.replace("_", "-")


@dataclass
class ArgSpan:
    """Where one argument was written: ``start``/``end`` character offsets of its value in the
    source text (``None`` for a flag without a value or a mapping input) and of the whole
    ``--flag value`` run (``flag_start``/``flag_end``)."""

    flag_start: int
    flag_end: int
    value_start: int | None = None
    value_end: int | None = None
    container: str = ""     # the array / command the flag sits in (scripts)
    via_variable: str | None = None   # the value was a plain $VAR reference to this variable


@dataclass
class MegatronArgs:
    """A normalized Megatron argument set.

    Attributes:
        values: argument name (underscores) -> value, in the order written.
        source: file path or ``"<memory>"``; kind: ``"mapping"``, ``"script"`` or ``"argv"``.
        text: the file's text (scripts and mappings read from a file), for in-place rewriting.
        spans: argument name -> :class:`ArgSpan` (scripts only).
        entry: the training entry point found in a script (``pretrain_gpt.py``) or None.
        unresolved: variable names a script used in the values of arguments autotune reads but
            that it could not resolve (reported by :func:`autotune.megatron.run.build_run`).
        launcher: torchrun arguments (``nproc_per_node``, ``nnodes``) found in a script.
        section: the mapping key the arguments were read from (``"MODEL_ARGS"`` or ``""``).
    """

    values: dict[str, Any]
    source: str = "<memory>"
    kind: str = "mapping"
    text: str | None = None
    spans: dict[str, ArgSpan] = field(default_factory=dict)
    entry: str | None = None
    unresolved: dict[str, list[str]] = field(default_factory=dict)
    launcher: dict[str, Any] = field(default_factory=dict)
    section: str = ""
    key_style: dict[str, str] = field(default_factory=dict)
    assignments: dict[str, Any] = field(default_factory=dict)   # scripts: NAME -> value token

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def has(self, key: str) -> bool:
        return key in self.values and self.values[key] is not False and self.values[key] is not None


def parse_scalar(text: str) -> Any:
    """A command-line value as argparse would convert it later: int, float, or the string."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def from_argv(argv: list[str], *, source: str = "<memory>") -> MegatronArgs:
    """Read a Megatron argv list: ``--flag`` alone is ``True``; ``--flag v1 v2`` keeps every value
    up to the next ``--`` token (one value -> scalar; several, or a MULTI_VALUE name -> list).

    Raises:
        ConfigError: a value before any ``--flag`` (rule ``R_MEGATRON_ARGV``).
    """
    values: dict[str, Any] = {}
    key: str | None = None
    for tok in argv:
        tok = str(tok)
        if tok.startswith("--") and len(tok) > 2 and not _is_number(tok):
            name, eq, val = tok.partition("=")
            key = norm_key(name)
            values[key] = parse_scalar(val) if eq else True
            if eq:
                key = None
            continue
        if key is None:
            raise ConfigError(f"value {tok!r} is not preceded by a --flag", field="<argv>", value=tok,
                              rule="R_MEGATRON_ARGV")
        cur = values[key]
        if cur is True:
            values[key] = [tok] if key in MULTI_VALUE else parse_scalar(tok)
        elif isinstance(cur, list):
            cur.append(tok)
        else:
            values[key] = [str(cur), tok]
    return MegatronArgs(values=values, source=source, kind="argv")


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def from_mapping(data: Any, *, source: str = "<memory>", text: str | None = None) -> MegatronArgs:
    """Read a mapping of argument names to values (YAML/JSON/dict; see module docstring).

    Raises:
        ConfigError: not a mapping (rule ``R_TYPE``).
    """
    section = ""
    if isinstance(data, dict) and isinstance(data.get("MODEL_ARGS"), dict):
        data, section = data["MODEL_ARGS"], "MODEL_ARGS"
    if not isinstance(data, dict):
        raise ConfigError("Megatron arguments must be a mapping of argument names to values",
                          field=source, value=None, rule="R_TYPE")
    values: dict[str, Any] = {}
    style: dict[str, str] = {}
    for k, v in data.items():
        key = norm_key(k)
        style[key] = str(k)
        if v is False or v is None:
            continue
        if key in MULTI_VALUE and isinstance(v, str):
            v = v.split()
        values[key] = v
    return MegatronArgs(values=values, source=source, kind="mapping", text=text, section=section,
                        key_style=style)


def looks_like_megatron(data: Any) -> bool:
    """True for a mapping that is a Megatron argument set rather than a MindFormers YAML: a
    ``MODEL_ARGS`` section, or top-level keys such as ``num-layers`` / ``--num-layers`` /
    ``tensor_model_parallel_size`` and no MindFormers sections (``model``, ``parallel_config``)."""
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("MODEL_ARGS"), dict):
        return True
    if "model" in data or "parallel_config" in data:
        return False
    keys = {norm_key(k) for k in data}
    markers = {"num_layers", "hidden_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
               "num_attention_heads", "pipeline_model_parallel_layout"}
    return len(keys & markers) >= 2


def parse_int_list_expr(text: Any, *, field: str) -> list[int] | int:
    """A Megatron list expression such as ``[0]*3+[1]*58`` or ``([1]*2+[0])*4`` (the form of
    ``--moe-layer-freq``), or a plain int. Evaluated with a tiny whitelist over Python's ``ast``
    (list literals of ints, ``*`` by an int, ``+``), never ``eval``.

    Raises:
        ConfigError: anything else (rule ``R_TYPE``), naming ``field``.
    """
    if isinstance(text, bool):
        raise ConfigError(f"expected an int or a list expression, got {text!r}", field=field, value=text,
                          rule="R_TYPE")
    if isinstance(text, int):
        return text
    if isinstance(text, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in text):
        return list(text)

    def bad() -> ConfigError:
        return ConfigError(f"expected an int or a list expression such as [0]*3+[1]*58, got {text!r}",
                           field=field, value=text, rule="R_TYPE")

    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError:
        raise bad() from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.List):
            out = [ev(e) for e in node.elts]
            if not all(isinstance(x, int) for x in out):
                raise bad()
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(node.op, ast.Mult) and isinstance(a, list) and isinstance(b, int) and b <= 100_000:
                return a * b
            if isinstance(node.op, ast.Mult) and isinstance(a, int) and isinstance(b, list) and a <= 100_000:
                return b * a
        raise bad()

    return ev(tree)
