"""Megatron's pipeline layout string (``--pipeline-model-parallel-layout``) and first/last-stage
flags: read them into a decoder-layer table [vpp][pp] and write a table back.

Grammar as Megatron-LM reads it (megatron/core/transformer/pipeline_parallel_layer_layout.py,
``PipelineParallelLayerLayout.parse_str_to_list``; recorded, not copied): commas are removed; then
every ``(X)*n`` whose X holds no ``)`` is replaced by n copies of X (parentheses do not nest), then
every single character followed by ``*n`` by n copies of it; the result is split at ``|`` into
virtual stages, each a string over ``E`` (embedding), ``t`` (decoder layer), ``m`` (MTP layer) and
``L`` (loss); any other character, spaces included, is an error. Stage k is virtual stage
``k // pp`` of pipeline rank ``k % pp``.

Writing (:func:`format_layout`): the first stage starts with ``E``, the last holds the MTP layers
and ends with ``mL``/``L``; ``t`` runs are written ``t*c`` and equal neighbouring middle stages as
``(t*c|)*r``, so the string stays short for 100+ stages and uses only the non-nested form.
"""

from __future__ import annotations

import re

from autotune.errors import ConfigError

_FLAG = "--pipeline-model-parallel-layout"


def _bad(layout: str, why: str, rule: str = "R_MEGATRON_LAYOUT") -> ConfigError:
    return ConfigError(f"{why} (layout {layout!r})", field=_FLAG, value=layout, rule=rule)


def expand_layout(layout: str) -> list[str]:
    """The virtual stages of a layout string as Megatron unrolls it (module docstring).

    Raises:
        ConfigError: R_MEGATRON_LAYOUT for a character other than E, t, m, L, '|', or a '(' / ')' /
            '*' left over after unrolling (nested or unbalanced parentheses, a dangling count).
    """
    if not isinstance(layout, str):
        raise ConfigError(f"must be a string, got {layout!r}", field=_FLAG, value=layout, rule="R_TYPE")
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    if len(text) > 1_000_000:
        raise _bad(layout, "unrolls to more than 10^6 characters")
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    for ch in text:
        if ch not in "EtmL|":
            what = "a space" if ch.isspace() else repr(ch)
            raise _bad(layout, f"{what} is not a layer symbol: Megatron accepts E, t, m, L, '|', '(X)*n', "
                               "'x*n' and cosmetic commas (parentheses do not nest)")
    return text.split("|")


def parse_layout_string(layout: str, *, pp: int, num_layers: int | None = None,
                        mtp_num_layers: int = 0) -> list[list[int]]:
    """Decoder layers per virtual stage, [vpp][pp], after Megatron's validity rules
    (``validate_layer_layout``): E first and once, L last and once, t count = num_layers, m count
    = mtp_num_layers, every m after every t and all m in one virtual stage, stages a multiple of pp.

    Raises:
        ConfigError: R_MEGATRON_LAYOUT (symbols, counts, order) or R_MEGATRON_VPP (the stage count
            is not a multiple of pp), naming --pipeline-model-parallel-layout and the value.
    """
    stages = expand_layout(layout)
    s = len(stages)
    if pp < 1 or s % pp:
        raise _bad(layout, f"{s} virtual stages are not a multiple of pipeline_model_parallel_size {pp}",
                   "R_MEGATRON_VPP")
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise _bad(layout, "the embedding E must be the first symbol, exactly once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise _bad(layout, "the loss L must be the last symbol, exactly once")
    t = flat.count("t")
    if num_layers is not None and t != num_layers:
        raise _bad(layout, f"places {t} decoder layers t but --num-layers is {num_layers}")
    m = flat.count("m")
    if m != (mtp_num_layers or 0):
        raise _bad(layout, f"places {m} MTP layers m but --mtp-num-layers is {mtp_num_layers or 0}")
    if m:
        if "t" in flat[flat.index("m"):]:
            raise _bad(layout, "decoder layers t must all come before the MTP layers m")
        holders = [k for k, st in enumerate(stages) if "m" in st]
        if len(holders) != 1:
            raise _bad(layout, "all MTP layers m must sit in one virtual stage")
        if holders[0] // pp != s // pp - 1:
            raise _bad(layout, "the MTP layers must sit in the last virtual stage of a pipeline rank")
    vpp = s // pp
    return [[stages[v * pp + p].count("t") for p in range(pp)] for v in range(vpp)]


def mtp_stage(layout: str, pp: int) -> int | None:
    """Flat index of the virtual stage that holds the MTP layers (None without MTP)."""
    stages = expand_layout(layout)
    hit = [k for k, st in enumerate(stages) if "m" in st]
    return hit[0] if hit else None


def _run(c: int) -> str:
    return "" if c == 0 else ("t" if c == 1 else f"t*{c}")


def format_layout(layers_vp: list[list[int]], *, mtp_num_layers: int = 0) -> str:
    """The layout string of a decoder-layer table [vpp][pp] (module docstring): E on virtual stage
    0, the MTP layers and L on the last. Only non-nested parentheses, no spaces.

    Raises:
        ValueError: a negative count or a ragged table.
    """
    vpp = len(layers_vp)
    pp = len(layers_vp[0]) if vpp else 0
    if not vpp or not pp or any(len(r) != pp for r in layers_vp):
        raise ValueError(f"layers_vp must be a non-empty [vpp][pp] table, got {layers_vp!r}")
    flat = [int(layers_vp[v][p]) for v in range(vpp) for p in range(pp)]
    if min(flat) < 0:
        raise ValueError(f"layer counts must be >= 0, got {layers_vp!r}")
    S = len(flat)
    if S == 1:
        return "E" + _run(flat[0]) + ("m" * mtp_num_layers) + "L"
    first = "E" + _run(flat[0])
    last = _run(flat[-1]) + _mtp(mtp_num_layers) + "L"
    middle = flat[1:-1]
    k = 0
    groups: list[str] = []
    while k < len(middle):
        j = k
        while j < len(middle) and middle[j] == middle[k]:
            j += 1
        r = j - k
        body = _run(middle[k])
        if r >= 3 and body:
            groups.append(f"({body}|)*{r}")
        else:
            groups.append("|".join([body] * r) + "|")
        k = j
    return first + "|" + "".join(groups) + last


def _mtp(n: int) -> str:
    return "" if n == 0 else ("m" if n == 1 else f"m*{n}")


def first_last_counts(layers_vp: list[list[int]]) -> tuple[int | None, int | None] | None:
    """``(decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers)`` that give this
    table (None = flag not needed), or None when the older flags cannot express it: every rank's
    virtual stages must hold the same count (Megatron splits a rank's layers evenly over its virtual
    stages) and the middle ranks must be equal."""
    vpp, pp = len(layers_vp), len(layers_vp[0])
    if any(layers_vp[v][p] != layers_vp[0][p] for v in range(vpp) for p in range(pp)):
        return None
    per = [layers_vp[0][p] * vpp for p in range(pp)]
    if pp == 1:
        return (None, None)
    mid = per[1:-1]
    if mid and len(set(mid)) > 1:
        return None
    if not mid:
        return (per[0] if per[0] != per[1] else None, per[1] if per[0] != per[1] else None)
    base = mid[0]
    return (per[0] if per[0] != base else None, per[-1] if per[-1] != base else None)
