"""Extract the Megatron arguments of a launch script (the subset of shell that Megatron-LM's own
``examples/*.sh`` use), keeping where every flag and value sits in the text.

Understood: comments, ``\\`` line continuations, single and double quotes, ``NAME=value`` (also
after ``export``/``local``/``declare``/``readonly``), arrays ``NAME=( ... )`` and ``NAME+=( ... )``,
``$NAME``, ``${NAME}``, ``${NAME:-default}`` / ``${NAME-default}`` / ``${NAME:=default}`` (positional
parameters such as ``${1:-MOCK}`` take their default), ``"${ARR[@]}"`` / ``${ARR[*]}`` and
``$((arithmetic))`` over integers. The training command is the one with a word ending in
``pretrain_gpt.py`` or ``pretrain_mamba.py``; the words after it are Megatron's arguments and the
torchrun arguments before it (``--nproc_per_node``, ``--nnodes``) give the world size.

Not evaluated: conditions and loops (``if``/``for`` bodies are read in order, every branch's
assignments apply), command substitution ``$(...)`` and variables taken from the environment;
a value that needs one of them is *unresolved*: its variable names are recorded per argument and
reported by :func:`autotune.megatron.run.build_run` when autotune reads that argument.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError
from autotune.megatron.args import LAUNCHER_KEYS, MULTI_VALUE, ArgSpan, MegatronArgs, norm_key, parse_scalar

ENTRY_RE = re.compile(r"(^|/)(pretrain_gpt|pretrain_mamba|pretrain_hybrid)\.py$")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN_RE = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)
_SEPARATORS = {";", "&&", "||", "|", "&", "\n"}


@dataclass
class Tok:
    """A shell word as written: its raw text and offsets in the script."""

    raw: str
    start: int
    end: int


@dataclass
class Word:
    """An expanded word with the token it came from (for rewriting) and the variables it used."""

    text: str
    origin: Tok | None
    via: str | None = None           # a plain "$VAR" token whose value this is
    unresolved: list[str] = field(default_factory=list)


def lex(text: str) -> list[Tok]:
    """Split shell text into words and separators (``\\n``, ``;``, ``&&``, ``||``, ``|``, ``&``,
    ``(``, ``)``), skipping comments and line continuations. Quotes, ``$(...)`` and ``${...}`` stay
    inside their word."""
    toks: list[Tok] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r":
            i += 1
            continue
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "\n":
            toks.append(Tok("\n", i, i + 1))
            i += 1
            continue
        if text.startswith(("&&", "||"), i):
            toks.append(Tok(text[i:i + 2], i, i + 2))
            i += 2
            continue
        if ch in ";|&()<>":
            toks.append(Tok(ch, i, i + 1))
            i += 1
            continue
        start = i
        while i < n:
            ch = text[i]
            if ch in " \t\r\n;|&()<>":
                break
            if ch == "\\" and i + 1 < n:
                if text[i + 1] == "\n":
                    break
                i += 2
                continue
            if ch == "'":
                j = text.find("'", i + 1)
                i = n if j < 0 else j + 1
                continue
            if ch == '"':
                i += 1
                while i < n and text[i] != '"':
                    if text[i] == "\\":
                        i += 1
                    elif text[i] == "$" and i + 1 < n and text[i + 1] in "({":
                        i = _skip_dollar(text, i)
                        continue
                    i += 1
                i += 1
                continue
            if ch == "$" and i + 1 < n and text[i + 1] in "({":
                i = _skip_dollar(text, i)
                continue
            i += 1
        toks.append(Tok(text[start:i], start, i))
    return toks


def _skip_dollar(text: str, i: int) -> int:
    """Index after the ``$(...)`` / ``$((...))`` / ``${...}`` starting at ``i``."""
    open_ch = text[i + 1]
    close_ch = ")" if open_ch == "(" else "}"
    depth = 0
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
        elif c == "'" and open_ch == "(":
            k = text.find("'", j + 1)
            j = len(text) if k < 0 else k
        j += 1
    return len(text)


class _Env:
    """Variables as the script defines them: name -> str, or list[Word] for arrays."""

    def __init__(self, env: dict[str, str] | None) -> None:
        self.vars: dict[str, Any] = dict(env or {})
        self.assign_tok: dict[str, Tok] = {}     # where a scalar got its (literal) value
        self.unres: dict[str, list[str]] = {}    # a scalar's value used these unresolved names

    # -- expansion -----------------------------------------------------------------------------
    def expand(self, tok: Tok, *, split: bool = True) -> list[Word]:
        """Expand one word into words (arrays give several; unquoted expansions are split)."""
        raw = tok.raw
        m = re.fullmatch(rf'"?\$\{{({_NAME})\[[@*]\]\}}"?', raw)
        if m:
            val = self.vars.get(m.group(1))
            if isinstance(val, list):
                return [Word(w.text, w.origin, w.via, list(w.unresolved)) for w in val]
            if val is None:
                return [Word("", tok, None, [m.group(1)])]
            return [Word(str(val), tok)]
        m = re.fullmatch(rf'"?\$(?:\{{({_NAME})\}}|({_NAME}))"?', raw)
        via = (m.group(1) or m.group(2)) if m else None
        parts: list[tuple[str, bool]] = []   # (text, may be split)
        unresolved: list[str] = []
        i, n = 0, len(raw)
        buf = ""
        quoted = False
        while i < n:
            ch = raw[i]
            if ch == "'" and not quoted:
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                buf += raw[i + 1:j]
                i = j + 1
                continue
            if ch == '"':
                quoted = not quoted
                i += 1
                continue
            if ch == "\\" and i + 1 < n:
                buf += raw[i + 1]
                i += 2
                continue
            if ch == "$" and i + 1 < n:
                val, i = self._dollar(raw, i, unresolved)
                if quoted or not split:
                    buf += val
                else:
                    parts.append((buf, False))
                    parts.append((val, True))
                    buf = ""
                continue
            buf += ch
            i += 1
        parts.append((buf, False))
        # join: split only the unquoted expansion results on whitespace
        words: list[str] = [""]
        for text, splittable in parts:
            if splittable and re.search(r"\s", text):
                pieces = text.split()
                if not pieces:
                    continue
                words[-1] += pieces[0]
                words.extend(pieces[1:])
            else:
                words[-1] += text
        return [Word(w, tok, via, list(unresolved)) for w in words]

    def _dollar(self, raw: str, i: int, unresolved: list[str]) -> tuple[str, int]:
        if raw.startswith("$((", i):
            end = _skip_dollar(raw, i)
            expr = raw[i + 3:end - 2]
            return self._arith(expr, unresolved), end
        if raw.startswith("$(", i):
            end = _skip_dollar(raw, i)
            unresolved.append(raw[i:end])
            return "", end
        if raw.startswith("${", i):
            end = _skip_dollar(raw, i)
            inner = raw[i + 2:end - 1]
            m = re.fullmatch(rf"({_NAME}|\d+)(?:(:?[-=])(.*))?", inner, re.S)
            if not m:
                unresolved.append(raw[i:end])
                return "", end
            name, op, default = m.group(1), m.group(2), m.group(3)
            val = self.vars.get(name)
            if isinstance(val, list):
                val = " ".join(w.text for w in val)
            empty = val is None or (op is not None and op.startswith(":") and val == "")
            if op and empty:
                dv = "".join(w.text for w in self.expand(Tok(default, 0, 0), split=False)) if default else ""
                if op.endswith("="):
                    self.vars[name] = dv
                return dv, end
            if val is None:
                unresolved.append(name)
                return "", end
            unresolved.extend(self.unres.get(name, ()))
            return str(val), end
        m = re.match(rf"\$({_NAME}|\d)", raw[i:])
        if not m:
            return "$", i + 1
        name = m.group(1)
        val = self.vars.get(name)
        if isinstance(val, list):
            val = val[0].text if val else ""
        if val is None:
            unresolved.append(name)
            val = ""
        unresolved.extend(self.unres.get(name, ()))
        return str(val), i + len(m.group(0))

    def _arith(self, expr: str, unresolved: list[str]) -> str:
        def sub(m: re.Match) -> str:
            name = m.group(1) or m.group(2) or m.group(3)
            val = self.vars.get(name)
            if val is None or isinstance(val, list) or not re.fullmatch(r"-?\d+", str(val).strip()):
                unresolved.append(name)
                return "0"
            return str(val).strip()
        text = re.sub(rf"\$\{{({_NAME})\}}|\$({_NAME})|\b({_NAME})\b", sub, expr)
        try:
            return str(_int_eval(ast.parse(text.strip(), mode="eval").body))
        except (SyntaxError, ValueError, ZeroDivisionError):
            unresolved.append(f"$(({expr}))")
            return ""


def _int_eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int_eval(node.operand)
    if isinstance(node, ast.BinOp):
        a, b = _int_eval(node.left), _int_eval(node.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Div: lambda: int(a / b), ast.Mod: lambda: a % b}
        for k, f in ops.items():
            if isinstance(node.op, k):
                return f()
    raise ValueError("not integer arithmetic")


def _statements(toks: list[Tok]) -> list[list[Tok]]:
    """Group tokens into simple commands; an ``NAME=(`` array keeps its elements, newlines too."""
    out: list[list[Tok]] = []
    cur: list[Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.raw == "(" and cur and cur[-1].raw.endswith("=") and cur[-1].end == t.start:
            # array assignment: NAME=( elements ) as one statement [NAME=, (, elems..., )]
            cur.append(t)
            i += 1
            while i < len(toks) and toks[i].raw != ")":
                if toks[i].raw != "\n":
                    cur.append(toks[i])
                i += 1
            if i < len(toks):
                cur.append(toks[i])
            i += 1
            continue
        if t.raw in _SEPARATORS:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(t)
        i += 1
    if cur:
        out.append(cur)
    return out


#: Commands that mention the entry script without running it (tests, messages, file commands).
_NOT_LAUNCH = {"[", "test", "echo", "printf", "cat", "ls", "cp", "mv", "rm", "mkdir", "cd", "export"}
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "for", "while", "until", "case", "esac",
             "{", "}", "[[", "]]", "!", "time"}


def parse_script(text: str, *, source: str = "<memory>", env: dict[str, str] | None = None) -> MegatronArgs:
    """Parse a launch script's text into a :class:`MegatronArgs` (kind ``"script"``) with spans.

    Args:
        text: the script; source: its path (for messages); env: variables to assume set (none by
            default: the environment is not read, so the answer does not depend on the shell).

    Raises:
        ConfigError: no ``pretrain_gpt.py`` / ``pretrain_mamba.py`` command (rule
            ``R_MEGATRON_SCRIPT``), or a value before any flag.
    """
    E = _Env(env)
    command: list[Word] | None = None
    entry = None
    for st in _statements(lex(text)):
        while st and st[0].raw in _KEYWORDS:
            st = st[1:]
        if st and st[0].raw in ("export", "local", "declare", "readonly", "typeset"):
            st = [t for t in st[1:] if not t.raw.startswith("-")]
        if not st:
            continue
        m = _ASSIGN_RE.match(st[0].raw)
        if m and len(st) >= 2 and st[1].raw == "(" and st[0].raw.endswith("="):
            name, plus = m.group(1), m.group(2)
            elems: list[Word] = []
            for t in st[2:]:
                if t.raw == ")":
                    break
                elems.extend(w for w in E.expand(t) if w.text != "" or w.unresolved)
            old = E.vars.get(name) if plus else None
            E.vars[name] = (list(old) if isinstance(old, list) else []) + elems
            continue
        if m and all(_ASSIGN_RE.match(t.raw) for t in st):
            for t in st:
                mm = _ASSIGN_RE.match(t.raw)
                name, plus, val_raw = mm.group(1), mm.group(2), mm.group(3)
                vt = Tok(val_raw, t.start + len(name) + len(plus) + 1, t.end)
                got = E.expand(vt, split=False)
                val = "".join(w.text for w in got)
                E.vars[name] = (str(E.vars.get(name, "")) + val) if plus else val
                E.assign_tok[name] = vt
                E.unres[name] = sorted({u for w in got for u in w.unresolved})
            continue
        if st[0].raw in _NOT_LAUNCH:
            continue
        words: list[Word] = []
        for t in st:
            if _ASSIGN_RE.match(t.raw) and not words:
                continue   # VAR=x command: a prefix assignment
            words.extend(E.expand(t))
        for k, w in enumerate(words):
            if ENTRY_RE.search(w.text):
                command, entry = words, w.text
                launch = words[:k]
                rest = words[k + 1:]
                break
        if command is not None:
            break
    if command is None:
        raise ConfigError("no training command found: expected a line that runs pretrain_gpt.py or "
                          "pretrain_mamba.py (read as a Megatron-LM launch script; a MindFormers config "
                          "must be a YAML mapping)", field=source, value=None, rule="R_MEGATRON_SCRIPT")
    return _collect(rest, launch, E, text=text, source=source, entry=entry)


def _collect(rest: list[Word], launch: list[Word], E: _Env, *, text: str, source: str,
             entry: str | None) -> MegatronArgs:
    values: dict[str, Any] = {}
    spans: dict[str, ArgSpan] = {}
    unresolved: dict[str, list[str]] = {}
    key: str | None = None
    # split elements written as one quoted word "--fp8-format hybrid"
    flat: list[Word] = []
    for w in rest:
        if w.text.startswith("--") and " " in w.text.strip():
            head, _, tail = w.text.strip().partition(" ")
            flat += [Word(head, w.origin, None, w.unresolved), Word(tail.strip(), None, None, w.unresolved)]
        else:
            flat.append(w)
    for w in flat:
        if w.text in (">", "2>&1") or w.text.startswith(">"):
            break
        if w.text.startswith("--") and len(w.text) > 2 and not _num(w.text):
            name, eq, val = w.text.partition("=")
            key = norm_key(name)
            values[key] = parse_scalar(val) if eq else True
            o = w.origin
            spans[key] = ArgSpan(o.start, o.end, None, None) if o else ArgSpan(-1, -1)
            if w.unresolved:
                unresolved[key] = list(w.unresolved)
            if eq:
                key = None
            continue
        if key is None:
            if w.text == "":
                continue
            raise ConfigError(f"value {w.text!r} is not preceded by a --flag", field=source, value=w.text,
                              rule="R_MEGATRON_ARGV")
        if w.unresolved:
            unresolved.setdefault(key, []).extend(w.unresolved)
        cur = values[key]
        values[key] = ([w.text] if key in MULTI_VALUE else parse_scalar(w.text)) if cur is True else (
            cur + [w.text] if isinstance(cur, list) else [str(cur), w.text])
        sp = spans[key]
        if w.origin is not None and w.origin.start >= 0 and (sp.value_start is None):
            sp.value_start, sp.value_end = w.origin.start, w.origin.end
            sp.via_variable = w.via
        elif w.origin is not None and sp.value_end is not None:
            sp.value_end = max(sp.value_end, w.origin.end)
            sp.via_variable = None
        if sp.value_end is not None:
            sp.flag_end = max(sp.flag_end, sp.value_end)
    launcher: dict[str, Any] = {}
    for i, w in enumerate(launch):
        k = norm_key(w.text.partition("=")[0]) if w.text.startswith("--") else None
        if k in LAUNCHER_KEYS:
            val = w.text.partition("=")[2] or (launch[i + 1].text if i + 1 < len(launch) else "")
            unres = w.unresolved or (launch[i + 1].unresolved if i + 1 < len(launch) else [])
            if unres:
                unresolved[k] = list(unres)
            launcher[k] = parse_scalar(val)
    args = MegatronArgs(values=values, source=source, kind="script", text=text, spans=spans, entry=entry,
                        unresolved={k: sorted(set(v)) for k, v in unresolved.items()}, launcher=launcher,
                        assignments=dict(E.assign_tok))
    return args


def _num(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False
