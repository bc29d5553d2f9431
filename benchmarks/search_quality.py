"""Search quality benchmark (issue 8): found / optimum (or / lower bound), wall s, trials, 3 seeds.

    .venv/bin/python benchmarks/search_quality.py [--seeds 0,1,2] [--only NAME]

Enumerable problems: the exact oracle gives the optimum, "ratio" = found / optimum.
Large problems: "gap" = certified gap (found - bound) / bound. "cpu s" = user + sys CPU seconds of
this process for the search (time.process_time), next to its wall seconds.

The "corpus" problems are real MindFormers configs (r1.3.0 Llama-2-70B and Qwen1.5-72B
pretraining): their layer profiles are frozen in benchmarks/data/corpus_*_profile.yaml (what
`autotune profile` derives from the corpus file); pipeline_stage, micro_batch_num and the budget
are the config's, written out here (the corpus YAML itself is not part of autotune).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.cost.inputs import ProfileArrays  # noqa: E402
from autotune.profile.schema import ModelProfile, load_profile  # noqa: E402
from autotune.tuner.inputs import as_config  # noqa: E402
from autotune.tuner.outcome import SAFETY_TIMEOUT_S  # noqa: E402
from autotune.tuner.problem import Problem, runnable_vpp  # noqa: E402
from autotune.tuner.runner import run_study  # noqa: E402
from autotune.tuner.solve import bound_and_seeds  # noqa: E402
from autotune.tuner.heap import search_heap  # noqa: E402
from autotune.tuner.threads import one_blas_thread  # noqa: E402


def toy(N: int, kinds_runs: list, tail_ms: float = 2.0, p2p: float = 0.1) -> ProfileArrays:
    kd = {"dense": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 10.0, "static_mib": 5.0,
                    "full": {"act_mib": 1.0, "extra_ms": 1.0, "workspace_mib": 10.0},
                    "select": {"act_mib": 7.0, "extra_ms": 0.1}, "comm": {"act_mib": 8.0, "extra_ms": 0.2}},
          "moe": {"fwd_ms": 1.6, "bwd_ms": 3.2, "act_mib": 14.0, "static_mib": 12.0,
                  "full": {"act_mib": 1.5, "extra_ms": 1.6, "workspace_mib": 14.0},
                  "select": {"act_mib": 10.0, "extra_ms": 0.15}, "comm": {"act_mib": 11.0, "extra_ms": 0.3}}}
    prof = ModelProfile(kinds=kd, layer_kinds=kinds_runs, head={"static_mib": 20.0, "fwd_ms": 0.5, "bwd_ms": 1.0},
                        tail={"static_mib": 30.0, "fwd_ms": tail_ms / 3, "bwd_ms": 2 * tail_ms / 3, "act_mib": 6.0},
                        p2p_ms=p2p)
    return ProfileArrays.from_profile(prof)


def syn2(cap: float) -> Problem:
    prof = ModelProfile(kinds={"L": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 10, "static_mib": 5,
                                     "full": {"act_mib": 1, "extra_ms": 1}}},
                        layer_kinds=[("L", 12)], head={"static_mib": 20},
                        tail={"fwd_ms": 2 / 3, "bwd_ms": 4 / 3, "static_mib": 30})
    return Problem(ProfileArrays.from_profile(prof), P=4, m=8, hbm_mib=cap, kinds=("full",))


#: The examples' layer profiles as the benchmark tunes them (frozen: benchmarks/data/README.md).
FROZEN = {"examples/telechat2_115b/train.yaml": ROOT / "benchmarks/data/telechat2_115b_profile.yaml",
          "examples/llama3_1_70b/train.yaml": ROOT / "benchmarks/data/llama3_1_70b_profile.yaml",
          "examples/real_configs/01_deepseek3_671b.yaml": ROOT / "benchmarks/data/deepseek3_671b_profile.yaml"}


BUDGET_LESS_MEM = 62_000.0

#: Real configs of the corpus (tests/corpus/mindformers/, not committed): frozen profile, then the
#: config's pipeline_stage, micro_batch_num and max_device_memory in MiB.
CORPUS = {"llama2_70b": (ROOT / "benchmarks/data/corpus_llama2_70b_profile.yaml", 8, 128, 57344.0),
          "qwen1_5_72b": (ROOT / "benchmarks/data/corpus_qwen1_5_72b_profile.yaml", 8, 64, 58368.0)}


def corpus(name: str, V: list[int] | None = None) -> Problem:
    """A corpus config's problem (:data:`CORPUS`) as the search builds it with the default space."""
    path, P, m, hbm = CORPUS[name]
    prof = load_profile(path)
    vs = runnable_vpp(prof.num_layers, P, m, "1f1b", V or [1, 2, 3, 4])
    return Problem(ProfileArrays.from_profile(prof), P=P, m=m, hbm_mib=hbm, vpp_candidates=vs)


def balancer_demo(*, P: int, V: int, m: int, hbm: float, kinds: tuple[str, ...],
                  schedule: str = "1f1b") -> Problem:
    """The 96-layer TeleChat2 (115B) frozen profile on the shapes of the old MindFormers balancer's
    demos (175B-class, issue 17): pp ``P`` vpp ``V``, ``m`` micro-batches, budget ``hbm`` MiB."""
    prof = load_profile(FROZEN["examples/telechat2_115b/train.yaml"])
    return Problem(ProfileArrays.from_profile(prof), P=P, m=m, hbm_mib=hbm, vpp_candidates=[V],
                   kinds=kinds, schedule=schedule)


def example(path: str, *, P: int | None = None, V: list[int] | None = None, N: int | None = None,
            budget_scale: float = 1.0, m: int | None = None) -> Problem:
    cfg = as_config(ROOT / path)
    prof = load_profile(FROZEN[path])   # a fixed problem: benchmarks/data/README.md
    if N is not None:
        prof = prof.with_num_layers(N)
    P = P or cfg.pipeline_stage
    m = m or cfg.micro_batch_num
    vs = runnable_vpp(prof.num_layers, P, m, "1f1b", V or [1, 2, 3, 4])
    return Problem(ProfileArrays.from_profile(prof), P=P, m=m, hbm_mib=cfg.hbm_mib * budget_scale,
                   vpp_candidates=vs)


def problems() -> dict[str, tuple[Problem, bool]]:
    """name -> (problem, enumerable)."""
    tight = lambda pa, P, m, V, cap, kinds=("full", "select", "comm"): Problem(  # noqa: E731
        pa, P=P, m=m, hbm_mib=cap, vpp_candidates=V, kinds=kinds)
    d = {
        "SYN-2 cap150": (syn2(150), True),
        "SYN-2 cap100": (syn2(100), True),
        "toy12 pp3 full/sel/comm": (tight(toy(12, [("dense", 12)]), 3, 6, [1], 170), True),
        "toy14 pp4 mixed tight": (tight(toy(14, [("dense", 4), ("moe", 10)]), 4, 8, [1], 180), True),
        "toy16 pp4 vpp2 loose": (tight(toy(16, [("dense", 16)]), 4, 8, [1, 2], 400), True),
        "toy12 pp3 vpp2 tight": (tight(toy(12, [("dense", 12)]), 3, 6, [1, 2], 150), True),
        "telechat2 96L pp8 vpp3": (example("examples/telechat2_115b/train.yaml", V=[3]), False),
        "telechat2 96L pp8 vpp1-4": (example("examples/telechat2_115b/train.yaml"), False),
        "llama3.1 80L pp8 tight": (example("examples/llama3_1_70b/train.yaml", V=[1]), False),
        "llama3.1 80L pp8 loose": (example("examples/llama3_1_70b/train.yaml", V=[1], budget_scale=1.5), False),
        "48L pp5 vpp2": (example("examples/telechat2_115b/train.yaml", P=5, V=[2], N=48, m=10), False),
        "62L pp16 dense+MoE+MTP": (example("examples/real_configs/01_deepseek3_671b.yaml", V=[1]), False),
        "96L pp16 vpp3 m16 sel+comm": (balancer_demo(P=16, V=3, m=16, hbm=62_000.0,
                                                     kinds=("select", "comm")), False),
        "96L pp16 vpp2 m32 less-mem": (balancer_demo(P=16, V=2, m=32, hbm=BUDGET_LESS_MEM,
                                                     kinds=("full", "select", "comm"),
                                                     schedule="1f1b_less_memory"), False),
        "corpus llama2-70b pp8 m128": (corpus("llama2_70b"), False),
        "corpus qwen1.5-72b pp8 m64": (corpus("qwen1_5_72b"), False),
    }
    return d


def search(problem: Problem, seed: int = 0, gap: float = 0.005):
    """(study outcome, :class:`~autotune.tuner.solve.BoundAndSeeds`) of one search as api.search
    runs it by default (no clock budget: 200 trials, fixed local-search work, stop at the certified
    gap); the outcome's ``best`` is the answer (None when nothing that fits was found)."""
    with one_blas_thread(), search_heap():  # as api.search
        bs = bound_and_seeds(problem, [])
        stop = bs.bound_ms * (1 + gap) if np.isfinite(bs.bound_ms) else None
        out = run_study(problem, seeds=bs.seeds, n_trials=200, timeout=SAFETY_TIMEOUT_S, seed=seed,
                        stop_at_ms=stop, bound_ms=bs.bound_ms)
    return out, bs


def run(problem: Problem, seed: int, gap: float = 0.005) -> tuple[float, float, int, float, bool, float]:
    """(found ms, bound ms, trials, wall s, exact, CPU s) for one :func:`search`."""
    t0, c0 = time.monotonic(), time.process_time()
    out, bs = search(problem, seed, gap)
    found = out.best.step_ms if out.best else float("inf")
    return found, bs.bound_ms, out.trials, time.monotonic() - t0, bs.exact, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"{'problem':28s} {'seed':>4s} {'found ms':>11s} {'opt/bound ms':>13s} {'ratio':>7s} {'gap':>7s} "
          f"{'wall s':>6s} {'cpu s':>6s} {'trials':>6s}")
    for name, (pr, _enum) in problems().items():
        if a.only and a.only not in name:
            continue
        for s in seeds:
            try:
                found, bound, trials, wall, exact, cpu = run(pr, s)
            except Exception as exc:  # report and continue
                print(f"{name:28s} {s:4d} error: {exc}")
                continue
            ratio = found / bound if bound > 0 else float("nan")
            kind = "opt" if exact else "bnd"
            print(f"{name:28s} {s:4d} {found:11.1f} {bound:11.1f}{kind[0]:>2s} {ratio:7.3f} {ratio - 1:7.2%} "
                  f"{wall:6.1f} {cpu:6.1f} {trials:6d}", flush=True)


if __name__ == "__main__":
    main()
