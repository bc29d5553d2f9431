"""Probe configs: the fewest dry runs whose per-stage peaks make the memory fit well-conditioned.

The dry-run fit (:mod:`autotune.cost.dryrun_fit`) has one unknown per layer static size, one per
recompute class activation (none, and each probed class: full, select, comm, both = select and
comm on the same layer), the full-recompute workspace, the per-stage constant and the head and
tail extras. The first and last stage each pin only their own extra, so the middle stages of all
runs must separate the rest: they need different layer counts, different in-flight counts (the
schedule gives those: stage i holds ``min(P - i, m)`` under 1F1B) and different recompute counts.

:func:`design_probes` builds runs greedily with a seeded RNG: at each step it draws
``candidates`` random layouts (every stage keeps >= 1 layer, counts stay within
``base ± spread``; recompute counts uniform in ``[0, layers]``) and keeps the one that most raises
the rank, then most lowers the condition number (unit-norm columns) of the stacked design; it stops
as soon as the system is full rank with condition number <= ``target_cond`` (or at ``max_runs``).
The same seed gives the same probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from autotune.config.layout import Layout, layout_from_values
from autotune.errors import ConfigError
from autotune.cost.dryrun_fit import design_quality
from autotune.profile.dryrun import DryRun

PROBE_KINDS = ("full", "select", "comm")


@dataclass(frozen=True)
class Probe:
    """One probe dry run.

    Attributes:
        label: ``probe<k>``.
        values: the MindFormers keys (offset, recompute, select_recompute, select_comm_recompute,
            pp_interleave_num) as 1-D per-stage lists.
        layout: their canonical [V][P] layout.
        micro_batch_num: micro-batches of the dry run.
    """

    label: str
    values: dict[str, Any]
    layout: Layout
    micro_batch_num: int

    def yaml_block(self) -> dict[str, Any]:
        """The nested MindFormers YAML keys to set for this dry run."""
        v = self.values
        return {"model": {"model_config": {"offset": v["offset"],
                                           "pp_interleave_num": v["pp_interleave_num"]}},
                "parallel_config": {"micro_batch_num": self.micro_batch_num},
                "recompute_config": {"recompute": v["recompute"],
                                     "select_recompute": v["select_recompute"],
                                     "select_comm_recompute": v["select_comm_recompute"]}}


@dataclass(frozen=True)
class ProbePlan:
    """Result of :func:`design_probes`: probes, the unknowns they identify, rank and condition."""

    probes: list[Probe]
    num_layers: int
    pipeline_stage: int
    unknowns: list[str]
    rank: int
    cond: float
    seed: int

    def manifest(self) -> dict[str, Any]:
        """A runs file for ``autotune profile --from-dryrun`` (fill ``logs`` or peaks per run)."""
        return {"num_layers": self.num_layers, "pipeline_stage": self.pipeline_stage,
                "runs": [{"label": p.label, **p.values, "micro_batch_num": p.micro_batch_num,
                          "schedule": "1f1b", "logs": [], "peak_mib_per_stage": None}
                         for p in self.probes]}


def _random_layers(rng: np.random.Generator, N: int, P: int, spread: int) -> np.ndarray:
    base, rem = divmod(N, P)
    layers = np.full(P, base, dtype=np.int64)
    layers[:rem] += 1
    lo, hi = max(1, base - spread), base + spread + 1
    for _ in range(4 * P):
        a, b = rng.integers(0, P, size=2)
        step = int(rng.integers(1, max(2, spread + 1)))
        if a != b and layers[a] - step >= lo and layers[b] + step <= hi:
            layers[a] -= step
            layers[b] += step
    return layers


def _candidate(rng: np.random.Generator, N: int, P: int, m: int, kinds: Sequence[str],
               spread: int, label: str) -> Probe:
    layers = _random_layers(rng, N, P, spread)
    base = N // P
    counts = {k: [int(rng.integers(0, n + 1)) for n in layers] for k in kinds}
    values = {"offset": (layers - base).tolist(), "pp_interleave_num": 1,
              "recompute": counts.get("full", [0] * P),
              "select_recompute": counts.get("select", [0] * P),
              "select_comm_recompute": counts.get("comm", [0] * P)}
    layout = layout_from_values(N, P, 1, offset=values["offset"], recompute=values["recompute"],
                                select_recompute=values["select_recompute"],
                                select_comm_recompute=values["select_comm_recompute"])
    return Probe(label, values, layout, m)


def design_probes(pipeline_stage: int, num_layers: int, kinds: Sequence[str] = PROBE_KINDS, *,
                  micro_batch_num: int | None = None, seed: int = 0, max_runs: int = 12,
                  candidates: int = 48, target_cond: float = 50.0, spread: int | None = None) -> ProbePlan:
    """Seeded greedy probe design (see module docstring).

    Args:
        pipeline_stage: P (>= 3). num_layers: N (>= P).
        kinds: recompute classes to identify, a subset of ``full, select, comm`` (select and comm
            together also identify ``both``).
        micro_batch_num: m of the dry runs (default P; smaller m makes more stages share one
            in-flight count and needs more probes).
        seed: RNG seed. max_runs: give up after this many runs. candidates: random layouts tried per
            added run. target_cond: stop once the condition number is at most this.
        spread: max layers a stage may differ from N // P (default max(1, (N // P) // 2)).

    Raises:
        ConfigError: bad sizes or kinds (rule ``probe``); no full-rank design within ``max_runs``
            (rule ``fit_underdetermined``; with P = 2 the per-stage constant cannot be told apart
            from the head and tail extras: fix it from a prior, see ``fit_dryruns(fix=...)``).
    """
    P, N = int(pipeline_stage), int(num_layers)
    if P < 3:
        raise ConfigError(f"need pipeline_stage >= 3 (with 2 stages the per-stage constant is not "
                          f"separable from the head/tail extras), got {P}", field="--pipeline-stage",
                          value=P, rule="probe")
    if N < P:
        raise ConfigError(f"need num_layers >= pipeline_stage = {P}, got {N}", field="--num-layers",
                          value=N, rule="probe")
    bad = [k for k in kinds if k not in PROBE_KINDS]
    if bad:
        raise ConfigError(f"unknown recompute kind(s) {bad}; choose from {', '.join(PROBE_KINDS)}",
                          field="--kinds", value=list(kinds), rule="probe")
    m = int(micro_batch_num or P)
    if m < 1:
        raise ConfigError(f"micro_batch_num must be >= 1, got {m}", field="--micro-batch-num",
                          value=m, rule="probe")
    sp = spread if spread is not None else max(1, (N // P) // 2)
    rng = np.random.default_rng(seed)
    lk = [("dense", N)]
    want = {"kinds.dense.static_mib", "kinds.dense.act_mib", "stage_const_mib", "head.static_mib",
            "tail.static_mib"} | {f"kinds.dense.{k}.act_mib" for k in kinds}
    if "full" in kinds:
        want.add("kinds.dense.full.workspace_mib")
    if "select" in kinds and "comm" in kinds:
        want.add("kinds.dense.both.act_mib")
    chosen: list[Probe] = []
    names: list[str] = []
    rank, cond = 0, float("inf")
    for k in range(max_runs):
        best: tuple[tuple[float, float], Probe, list[str], int, float] | None = None
        for _ in range(candidates):
            cand = _candidate(rng, N, P, m, list(kinds), sp, f"probe{k + 1}")
            runs = [DryRun(p.layout, np.ones(P), m, label=p.label) for p in chosen + [cand]]
            nm, r, c = design_quality(runs, lk)
            missing = len(want - set(nm)) + (len(nm) - r)
            score = (missing, c if np.isfinite(c) else 1e300)  # identify all unknowns, then cond
            if best is None or score < best[0]:
                best = (score, cand, nm, r, c)
        assert best is not None
        _, cand, names, rank, cond = best
        chosen.append(cand)
        if best[0][0] == 0 and cond <= target_cond:
            break
    if best is None or best[0][0] > 0:
        raise ConfigError(f"no probe set identifying all of {sorted(want)} within {max_runs} runs "
                          f"(rank {rank}); raise --max-runs", field="--max-runs",
                          value=max_runs, rule="fit_underdetermined")
    return ProbePlan(chosen, N, P, names, rank, cond, seed)
