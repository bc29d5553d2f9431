"""Small Megatron-LM → MindFormers adapter (pipeline layout and recompute arguments only).

Megatron describes uneven pipelines with first/last-stage layer counts
(``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``, older
``num_layers_in_first/last_pipeline_stage``), a layout string
(``pipeline_model_parallel_layout``, e.g. ``"Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"``) or
``num_layers_per_virtual_pipeline_stage``. This module turns them into a flat MindFormers case
(``num_layers``, ``pipeline_stage``, ``pp_interleave_num``, ``offset`` [vpp][pp], ``recompute``)
that :mod:`autotune.config.layer_setting` checks. Layout order: virtual stage k is chunk
k // pp, stage k % pp (Megatron's [pp][vpp] becomes MindFormers' [vpp][pp]).

Argument names may be written with dashes or a leading ``--`` (``--num-layers``). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from autotune.config.layer_types import Warning_
from autotune.errors import ConfigError

_FIRST = ("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage")
_LAST = ("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage")
_MAX_LAYOUT = 10_000


@dataclass
class Translation:
    """A translated config: the flat MindFormers ``case``, adapter ``warnings`` and, for uniform
    full recompute, ``recompute_groups`` per mini-stage (local [start, end) layer ranges)."""

    case: dict[str, Any]
    warnings: list[Warning_] = field(default_factory=list)
    recompute_groups: list[list[list[int]]] | None = None


def _norm_key(key: Any) -> str:
    return str(key).lstrip("-").replace("-", "_")


def _int_arg(args: dict[str, Any], key: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {value!r}; fix: give a whole number",
                          field=key, value=value, rule="R_TYPE")
    return value


def parse_layout(layout: str) -> list[dict[str, int]]:
    """Expand a Megatron layout string into one dict per virtual stage: counts of ``t``
    (transformer layers), ``m`` (MTP layers), ``E`` (embedding) and ``L`` (loss).

    Grammar: stages separated by ``|``; ``X*n`` repeats the previous symbol or ``(...)`` group n
    times; ``,`` and spaces are ignored.

    Raises:
        ConfigError: rule R_MEGATRON_LAYOUT for unknown symbols or unbalanced parentheses.
    """
    path = "pipeline_model_parallel_layout"
    if not isinstance(layout, str):
        raise ConfigError(f"must be a string, got {layout!r}", field=path, value=layout, rule="R_TYPE")
    text = re.sub(r"[\s,]", "", layout)
    pos = 0

    def bad(why: str) -> ConfigError:
        return ConfigError(f"cannot parse layout {layout!r}: {why}; fix: use symbols E, t, m, L, '|', "
                           "'(...)' and '*n'", field=path, value=layout, rule="R_MEGATRON_LAYOUT")

    def seq(depth: int) -> str:
        nonlocal pos
        if depth > 20:
            raise bad("too deeply nested")
        out = ""
        while pos < len(text) and text[pos] != ")":
            ch = text[pos]
            if ch == "(":
                pos += 1
                unit = seq(depth + 1)
                if pos >= len(text) or text[pos] != ")":
                    raise bad("unbalanced parentheses")
                pos += 1
            elif ch in "EtmL|":
                unit = ch
                pos += 1
            else:
                raise bad(f"unknown symbol {ch!r}")
            if pos < len(text) and text[pos] == "*":
                m = re.match(r"\*(\d+)", text[pos:])
                if not m:
                    raise bad("'*' must be followed by a count")
                pos += len(m.group(0))
                unit = unit * int(m.group(1))
            out += unit
            if len(out) > _MAX_LAYOUT:
                raise bad("layout too long")
        return out

    flat = seq(0)
    if pos != len(text):
        raise bad("unbalanced parentheses")
    return [{s: part.count(s) for s in "EtmL"} for part in flat.split("|")]


def _split_args(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Megatron arguments with normalised names, explicit MindFormers fields)."""
    if isinstance(data.get("framework_args"), dict):
        args = {_norm_key(k): v for k, v in data["framework_args"].items()}
        base = {k: v for k, v in data.items() if k not in ("framework", "framework_args")}
    else:
        args = {_norm_key(k): v for k, v in data.items()}
        base = {k: v for k, v in args.items() if k in ("offset", "micro_batch_num", "pipeline_stage",
                                                       "pp_interleave_num", "num_layers", "recompute",
                                                       "select_recompute", "mtp_num_layers",
                                                       "pipeline_scheduler")}
    return args, base


def _from_layout(args: dict[str, Any], layout: Any, n: Any, pp: Any, vpp: Any,
                 case: dict[str, Any]) -> tuple[int, int, int, list[list[int]]]:
    """(n, pp, vpp, [vpp][pp] layer table) of a ``pipeline_model_parallel_layout`` string."""
    stages = parse_layout(layout)
    s = len(stages)
    if pp is None and vpp is None:
        pp, vpp = s, 1
    elif pp is None:
        vpp = _int_arg(args, "virtual_pipeline_model_parallel_size", vpp, 1)
        pp = s // vpp
    else:
        pp = _int_arg(args, "pipeline_model_parallel_size", pp, 1)
        vpp = s // pp
    if pp * vpp != s or pp < 1 or vpp < 1:
        raise ConfigError(f"layout has {s} virtual stages, not pipeline_model_parallel_size × "
                          f"virtual size = {pp} × {vpp}; fix: make them agree",
                          field="pipeline_model_parallel_layout", value=layout, rule="R_MEGATRON_LAYOUT")
    table = [[stages[v * pp + p]["t"] for p in range(pp)] for v in range(vpp)]
    total_t = sum(map(sum, table))
    if n is not None and n != total_t:
        raise ConfigError(f"layout places {total_t} transformer layers but num_layers = {n}; fix: make "
                          "them agree", field="pipeline_model_parallel_layout", value=layout,
                          rule="R_MEGATRON_LAYOUT")
    mtp = sum(st["m"] for st in stages)
    if mtp:
        case["mtp_num_layers"] = mtp
        case["mtp_counted_in_layer_split"] = False
    return total_t, pp, vpp, table


def _from_counts(args: dict[str, Any], n: Any, pp: Any, vpp: Any
                 ) -> tuple[int, int, int, list[list[int]] | None]:
    """(n, pp, vpp, [vpp][pp] table or None for an even split) of num_layers, the sizes and the
    first/last-stage layer counts."""
    first_key = next((k for k in _FIRST if args.get(k) is not None), None)
    last_key = next((k for k in _LAST if args.get(k) is not None), None)
    if n is None:
        raise ConfigError("num_layers is missing; fix: add num_layers", field="num_layers", value=None,
                          rule="R_MISSING")
    n = _int_arg(args, "num_layers", n, 1)
    pp = _int_arg(args, "pipeline_model_parallel_size", 1 if pp is None else pp, 1)
    lpvs = args.get("num_layers_per_virtual_pipeline_stage")
    if lpvs is not None:
        lpvs = _int_arg(args, "num_layers_per_virtual_pipeline_stage", lpvs, 1)
        vpp = max(1, (n // pp) // lpvs)   # Megatron floors: layers beyond vpp*lpvs*pp are dropped
    vpp = _int_arg(args, "virtual_pipeline_model_parallel_size", 1 if vpp is None else vpp, 1)
    if not (first_key or last_key):
        return n, pp, vpp, None
    if pp == 1:
        key = last_key or first_key
        raise ConfigError(f"{key} = {args[key]} with pipeline_model_parallel_size = 1: the single "
                          f"stage would be built with {args[key]} layers instead of {n} while "
                          "FLOPs are reported for all; fix: remove the override or use pp > 1",
                          field=key, value=args[key], rule="R_PP1_STAGE_OVERRIDE")
    first = _int_arg(args, first_key, args[first_key]) if first_key else None
    last = _int_arg(args, last_key, args[last_key]) if last_key else None
    middle = pp - (first is not None) - (last is not None)
    rest = n - (first or 0) - (last or 0)
    if rest < 0 or (middle == 0 and rest != 0) or (middle and rest % middle):
        raise ConfigError(f"{rest} remaining layers cannot be split evenly over {middle} middle "
                          f"stage(s); fix: adjust the first/last-stage counts", field=last_key or first_key,
                          value=args[last_key or first_key], rule="R_MEGATRON_UNEVEN")
    per = [rest // middle if middle else 0] * pp
    if first is not None:
        per[0] = first
    if last is not None:
        per[-1] = last
    return n, pp, vpp, [[per[p] // vpp + (1 if v < per[p] % vpp else 0) for p in range(pp)] for v in range(vpp)]


def _recompute(args: dict[str, Any], base: dict[str, Any], case: dict[str, Any], table: Any, n: int,
               pp: int, vpp: int) -> tuple[list[Warning_], list[list[list[int]]] | None]:
    """Megatron's recompute arguments as MindFormers keys; (warnings, uniform recompute groups)."""
    warns: list[Warning_] = []
    groups = None
    gran = args.get("recompute_granularity")
    if gran == "full" and "recompute" not in base:
        method = args.get("recompute_method", "uniform")
        g = _int_arg(args, "recompute_num_layers", args.get("recompute_num_layers", 1), 1)
        if method == "block":
            case["recompute"] = [[g] * pp for _ in range(vpp)]
        else:
            case["recompute"] = True
            per_stage = table or [[n // (pp * vpp)] * pp for _ in range(vpp)]
            groups = []
            for row in per_stage:
                for cnt in row:
                    groups.append([[s, min(s + g, cnt)] for s in range(0, cnt, g)])
                    if cnt % g:
                        warns.append(Warning_(
                            "W_RECOMPUTE_GROUP_REMAINDER", "recompute_num_layers",
                            f"recompute_num_layers = {g} does not divide the {cnt} layers of a pipeline "
                            f"rank; the last group holds {cnt % g} (older Megatron indexed past the end); "
                            "pick a divisor of the per-rank layer count"))
            warns = list({w.message: w for w in warns}.values())
    elif gran == "selective" and "select_recompute" not in base:
        case["select_recompute"] = True
    return warns, groups


def translate(data: dict[str, Any]) -> Translation:
    """Translate Megatron arguments (or a bug-case ``input`` with ``framework_args``) to a flat
    MindFormers case. Explicit MindFormers fields in ``data`` (``offset``, ``micro_batch_num``, …)
    win over derived ones.

    Raises:
        ConfigError: R_PP1_STAGE_OVERRIDE (first/last-stage layer counts with pp = 1: Megatron then
            silently builds a smaller model), R_MEGATRON_UNEVEN (the remaining layers do not split
            evenly), R_MEGATRON_LAYOUT (bad layout string or mismatched sizes), R_TYPE.
    """
    if not isinstance(data, dict):
        raise ConfigError("Megatron arguments must be a mapping", field="<file>", value=None, rule="R_TYPE")
    args, base = _split_args(data)
    n = args.get("num_layers", base.get("num_layers"))
    pp = args.get("pipeline_model_parallel_size", base.get("pipeline_stage", base.get("pp")))
    vpp = args.get("virtual_pipeline_model_parallel_size", base.get("pp_interleave_num"))
    layout = args.get("pipeline_model_parallel_layout")
    case: dict[str, Any] = dict(base)
    if layout is not None:
        n, pp, vpp, table = _from_layout(args, layout, n, pp, vpp, case)
    else:
        n, pp, vpp, table = _from_counts(args, n, pp, vpp)
    case["num_layers"] = n
    case["pipeline_stage"] = pp
    case["pp_interleave_num"] = vpp
    if vpp > 1:
        case.setdefault("pipeline_interleave", True)
    if "offset" not in base:
        if table is None:
            case["offset"] = 0
        else:
            base_n = n // (pp * vpp)
            off = [[c - base_n for c in row] for row in table]
            case["offset"] = off[0] if vpp == 1 else off
    warns, groups = _recompute(args, base, case, table, n, pp, vpp)
    return Translation(case=case, warnings=warns, recompute_groups=groups)


def megatron_to_case(data: dict[str, Any]) -> dict[str, Any]:
    """The flat MindFormers case of :func:`translate` (warnings dropped)."""
    return translate(data).case
