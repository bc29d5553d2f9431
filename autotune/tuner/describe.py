"""``autotune search --dry-run``: the search space as numbers (no Optuna, no simulation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def describe_space(config: Any, profile: Any = None, *, space: Any = None, device: str = "ascend-910b",
                   hbm_mib: float | None = None, overrides: dict[str, float] | None = None) -> dict[str, Any]:
    """Free knobs, pinned knobs, constraints and the size of the space of a config.

    Returns a flat mapping (printed line by line by the CLI): ``layer_splits`` (exact count over
    the runnable pp_interleave_num), ``layouts`` (splits × recompute counts, exact when the space
    is small enough to enumerate, else a log10 estimate), ``enumerable`` (the exact oracle runs).

    Raises:
        ConfigError: as :func:`autotune.api.search`.
    """
    import math

    from autotune.api import _config, _schedule, resolve_profile
    from autotune.tuner.problem import problem_from_config
    from autotune.tuner.solve import EXACT_MAX_SPLITS, count_splits
    from autotune.tuner.space import SearchSpace, load_search_space

    cfg = _config(config, hbm_mib)
    prof = resolve_profile(cfg, profile, device=device, overrides=overrides)
    sp = space if isinstance(space, SearchSpace) else load_search_space(space)
    if sp.pipeline_scheduler == "keep":
        _schedule(cfg)  # a clear error for a scheduler the cost model does not know
    P, m, N = cfg.pipeline_stage, cfg.micro_batch_num, cfg.num_layers
    problem = problem_from_config(cfg, prof, sp)
    sched, vs = problem.schedule, problem.vpp_candidates
    problem.vpp_candidates = vs or [1]
    splits = count_splits(problem) if vs else 0
    per_layer = (1 + ("full" in sp.recompute_kinds)) * (1 + ("select" in sp.recompute_kinds)) \
        * (1 + ("comm" in sp.recompute_kinds))
    return {
        "config": str(config) if isinstance(config, (str, Path)) else "<object>",
        "num_layers": N, "pipeline_stage": P, "micro_batch_num": m, "pipeline_scheduler": sched,
        "pp_interleave_num candidates": sp.pp_interleave_num,
        "pp_interleave_num runnable": vs,
        "recompute kinds (free)": list(sp.recompute_kinds),
        "max_abs_offset": sp.max_abs_offset,
        "constraints": ("layers sum to num_layers; first/last mini-stage >= 0 layers, others >= 1; "
                        "recompute counts <= mini-stage layers (first r layers); peak MiB <= "
                        f"{cfg.hbm_mib} per stage; P*V <= num_layers; interleave needs "
                        "micro_batch_num % pipeline_stage == 0"),
        "layer_splits": splits,
        "layouts_log10_upper": round(math.log10(max(splits, 1)) + N * math.log10(per_layer) / 1.0, 1)
        if splits else 0,
        "enumerable": bool(vs) and splits <= EXACT_MAX_SPLITS,
    }
