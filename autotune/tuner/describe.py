"""``autotune search --dry-run``: the search space as numbers (no Optuna, no simulation)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autotune.tuner.inputs import as_config, config_schedule
from autotune.tuner.problem import Problem, count_splits, runnable_vpp
from autotune.tuner.solve import EXACT_MAX_SPLITS
from autotune.tuner.space import KNOBS, SearchSpace, expand_space, load_search_space


def describe_space(config: Any, profile: Any = None, *, space: Any = None, device: str = "ascend-910b",
                   hbm_mib: float | None = None, overrides: dict[str, float] | None = None) -> dict[str, Any]:
    """Free knobs, pinned knobs, constraints and the size of the space of a config.

    Returns a flat mapping (printed line by line by the CLI): ``subproblems`` (scheduler × boolean
    knobs × micro_batch_num × pattern sets, each searched on its own), ``layer_splits`` (exact count
    over the runnable pp_interleave_num, summed over sub-problems), ``space_size_log10`` (log10 of
    an upper estimate of all layouts: splits × recompute counts per layer × sub-problems),
    ``enumerable`` (the exact oracle runs on every sub-problem), the free and pinned knobs and the
    constraints.

    Raises:
        ConfigError: as :func:`autotune.api.search`.
    """
    cfg = as_config(config, hbm_mib)
    sp = space if isinstance(space, SearchSpace) else load_search_space(space)
    if sp.pipeline_scheduler == "keep":
        config_schedule(cfg)  # a clear error for a scheduler the cost model does not know
    variants = expand_space(cfg, sp, profile, device=device, overrides=overrides)
    P, N = cfg.pipeline_stage, cfg.num_layers
    per_layer = (1 + ("full" in sp.recompute_kinds)) * (1 + ("select" in sp.recompute_kinds)) \
        * (1 + ("comm" in sp.recompute_kinds))
    splits_total, enumerable, runnable = 0, True, {}
    for v in variants:
        vs = runnable_vpp(N, P, v.cfg.micro_batch_num, v.schedule, sp.pp_interleave_num, v.cfg.seq_split_num)
        runnable[v.label] = vs
        if not vs:
            continue
        n = count_splits(Problem(v.pa, P=P, m=v.cfg.micro_batch_num, schedule=v.schedule, vpp_candidates=vs,
                                 kinds=tuple(sp.recompute_kinds), max_abs_offset=sp.max_abs_offset))
        splits_total += n
        enumerable = enumerable and n <= EXACT_MAX_SPLITS
    free = {"pp_interleave_num": sp.pp_interleave_num, "offset": "layers per mini-stage",
            "recompute kinds": list(sp.recompute_kinds),
            "recompute granularity": sp.recompute_granularity}
    pinned: dict[str, Any] = {}
    scheds = sp.schedulers()
    (free if len(scheds) > 1 else pinned)["pipeline_scheduler"] = \
        [cfg.pipeline_scheduler if s == "keep" else s for s in scheds] if len(scheds) > 1 else \
        (cfg.pipeline_scheduler if scheds[0] == "keep" else scheds[0])
    for k in KNOBS:
        if getattr(sp, k) == "free":
            free[k] = [True, False]
        else:
            pinned[k] = getattr(cfg, k)
    if sp.micro_batch_num is None:
        pinned["micro_batch_num"] = cfg.micro_batch_num
    else:
        free["micro_batch_num (global batch fixed)"] = sorted({v.cfg.micro_batch_num for v in variants})
    for side in ("select_patterns", "comm_patterns"):
        choice = getattr(sp, side)
        if choice == "default":
            pinned[side] = "MindFormers defaults"
        else:
            sets = {tuple(getattr(v, side) or ()) for v in variants}
            free[side] = [list(s) for s in sorted(sets)]
    return {
        "config": str(config) if isinstance(config, (str, Path)) else "<object>",
        "num_layers": N, "pipeline_stage": P, "micro_batch_num": cfg.micro_batch_num,
        "pipeline_scheduler": variants[0].schedule,
        "pp_interleave_num candidates": sp.pp_interleave_num,
        "pp_interleave_num runnable": runnable[variants[0].label],
        "recompute kinds (free)": list(sp.recompute_kinds),
        "max_abs_offset": sp.max_abs_offset,
        "free knobs": free,
        "pinned": pinned,
        "subproblems": len(variants),
        "constraints": ("layers sum to num_layers; first/last mini-stage >= 0 layers, others >= 1; "
                        "recompute counts <= mini-stage layers (first r layers); peak MiB <= "
                        f"{cfg.hbm_mib} per stage; P*V <= num_layers; interleave needs "
                        "micro_batch_num % pipeline_stage == 0"
                        + ("; data_parallel*micro_batch_num*batch_size fixed" if sp.micro_batch_num else "")
                        + ("; one recompute fraction per stage" if sp.recompute_granularity == "stage"
                           else "; one recompute count per mini-stage")),
        "layer_splits": splits_total,
        "space_size_log10": round(math.log10(max(splits_total, 1)) + N * math.log10(per_layer), 1)
        if splits_total else 0,
        "layouts_log10_upper": round(math.log10(max(splits_total, 1)) + N * math.log10(per_layer), 1)
        if splits_total else 0,
        "enumerable": bool(splits_total) and enumerable,
    }
