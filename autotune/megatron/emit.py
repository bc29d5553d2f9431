"""The Megatron arguments of an answer: which flags to set and which to remove, and how to print
them for pasting into a launch script.

Layout flags: ``--pipeline-model-parallel-layout "<string>"`` (and the older first/last-stage or
virtual-stage flags removed, as Megatron refuses them next to a layout), or with ``first_last`` the
older ``--decoder-first/last-pipeline-num-layers`` + ``--num-virtual-stages-per-pipeline-rank``.
Recompute flags: ``--recompute-granularity full --recompute-method block --recompute-num-layers N``,
``--recompute-granularity selective --recompute-modules a b``, or none of them.
"""

from __future__ import annotations

import shlex
from typing import Any

from autotune.megatron.args import flag_name
from autotune.megatron.layout import first_last_counts, format_layout

LAYOUT_KEYS = ("pipeline_model_parallel_layout", "num_layers_per_virtual_pipeline_stage",
               "num_virtual_stages_per_pipeline_rank", "virtual_pipeline_model_parallel_size",
               "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
               "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
RECOMPUTE_KEYS = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
                  "recompute_activations")


def flags_for(run: Any, choice: Any, layers_vp: list[list[int]], layout_flags: str = "layout") -> dict[str, Any]:
    """Argument name -> value for the answer (None = remove the argument if present). Only keys
    that differ from what the user wrote matter to :mod:`autotune.megatron.rewrite`; all layout
    and recompute keys are listed so the printed block is complete.

    Raises:
        ValueError: ``first_last`` with a table the older flags cannot express.
    """
    out: dict[str, Any] = {k: None for k in LAYOUT_KEYS + RECOMPUTE_KEYS}
    V = len(layers_vp)
    if layout_flags == "first_last":
        fl = first_last_counts(layers_vp)
        if fl is None:
            raise ValueError(f"the older first/last flags cannot express {layers_vp}")
        out["decoder_first_pipeline_num_layers"], out["decoder_last_pipeline_num_layers"] = fl
        if V > 1:
            out["num_virtual_stages_per_pipeline_rank"] = V
    else:
        out["pipeline_model_parallel_layout"] = format_layout(layers_vp, mtp_num_layers=run.mtp)
    if choice.kind == "full":
        out.update(recompute_granularity="full", recompute_method="block", recompute_num_layers=choice.n)
    elif choice.kind == "selective":
        out.update(recompute_granularity="selective", recompute_modules=list(choice.modules))
    return out


def render_value(value: Any) -> str:
    """A value as a shell word: lists space-separated, strings quoted when needed (layout strings
    always in double quotes, as Megatron's docs write them)."""
    if isinstance(value, list):
        return " ".join(render_value(v) for v in value)
    text = str(value)
    if any(ch in text for ch in "|()*"):
        return f'"{text}"'
    return shlex.quote(text)


def flag_lines(flags: dict[str, Any]) -> list[str]:
    """``--flag value`` lines (``--flag`` alone for True) for the arguments to set."""
    lines = []
    for k, v in flags.items():
        if v is None or v is False:
            continue
        lines.append(flag_name(k) if v is True else f"{flag_name(k)} {render_value(v)}")
    return lines


def removed(flags: dict[str, Any], present: set[str]) -> list[str]:
    """The arguments the user wrote that the answer removes."""
    return [flag_name(k) for k, v in flags.items() if v is None and k in present]
