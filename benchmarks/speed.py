"""Cost-model speed (pure numpy, one process). Prints the two figures of issue 7 and the core count.

1. one config, pp 16, vpp 3, 64 micro-batches: ``evaluate``-style stage costs + event simulation
   of one layout (schedule compiled once and cached, as in a search), ms per config;
2. batch, pp 16, vpp 1, 32 micro-batches: many candidate layouts at once through
   ``stage_costs`` + ``simulate`` (what ``Problem.evaluate`` runs), configs per second.

For information (not issue-7 targets), the same two measurements under ``zero_bubble_v``
(pp 16, 2 chunks, backward split into B and W: 1.5× the ops of 1F1B).

Run: ``.venv/bin/python benchmarks/speed.py``
"""

from __future__ import annotations

import os
import time

import numpy as np

from autotune.cost import ProfileArrays, compile_schedule, evaluate_layout, simulate, stage_costs
from autotune.config.layout import make_layout
from autotune.profile.schema import EndPart, LayerKind, ModelProfile, RecomputeOption


def profile(n: int) -> ProfileArrays:
    dense = LayerKind(fwd_ms=1.0, bwd_ms=2.0, act_mib=300, static_mib=900,
                      full=RecomputeOption(act_mib=20, extra_ms=1.0, workspace_mib=300),
                      select=RecomputeOption(act_mib=200, extra_ms=0.08),
                      comm=RecomputeOption(act_mib=250, extra_ms=0.25))
    moe = LayerKind(fwd_ms=1.6, bwd_ms=3.2, act_mib=500, static_mib=4000,
                    full=RecomputeOption(act_mib=20, extra_ms=1.6, workspace_mib=500))
    prof = ModelProfile(kinds={"dense": dense, "moe": moe}, layer_kinds=[("dense", 3), ("moe", n - 3)],
                        head=EndPart(static_mib=2000, act_mib=20),
                        tail=EndPart(fwd_ms=1.5, bwd_ms=3.0, static_mib=2000, act_mib=2000),
                        stage_const_mib=2048, p2p_ms=0.05)
    return ProfileArrays.from_profile(prof)


def timeit(fn, min_s: float = 1.0, repeats: int = 5, clock=time.perf_counter) -> float:
    """Best of ``repeats`` runs of a loop lasting >= min_s/repeats (seconds per call); the best is
    the least disturbed by other processes on the machine (as :mod:`timeit` recommends).
    ``clock=time.process_time`` counts only this process's CPU time (a shared, loaded machine)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        n, t0 = 0, clock()
        while clock() - t0 < min_s / repeats or n == 0:
            fn()
            n += 1
        best = min(best, (clock() - t0) / n)
    return best


def main() -> None:
    cores = os.cpu_count()
    # 1. one config
    P, V, m = 16, 3, 64
    pa = profile(96)
    rng = np.random.default_rng(0)
    layers = np.full((1, V, P), 2)
    rec = rng.integers(0, 3, (1, V, P))
    z = np.zeros_like(layers)
    cs = compile_schedule("1f1b", P, V, m)

    def one() -> None:
        c = stage_costs(pa, layers, rec, z, z)
        simulate(cs, c, pa.p2p_ms)

    t_one = timeit(one)
    c_one = timeit(one, clock=time.process_time)
    lay = make_layout(layers[0], rec[0])
    t_report = timeit(lambda: evaluate_layout(pa, lay, micro_batch_num=m))
    # 2. batch
    P, V, m, B = 16, 1, 32, 4096
    pa = profile(64)
    base = np.full((B, V, P), 4)
    moves = rng.integers(0, P, (B, 2))
    base[np.arange(B), 0, moves[:, 0]] += 1
    base[np.arange(B), 0, moves[:, 1]] -= 1
    rec_b = np.minimum(rng.integers(0, 4, (B, V, P)), base)
    sel_b = np.minimum(rng.integers(0, 5, (B, V, P)), base)
    zb = np.zeros_like(base)
    cs = compile_schedule("1f1b", P, V, m)

    def batch() -> None:
        c = stage_costs(pa, base, rec_b, sel_b, zb)
        simulate(cs, c, pa.p2p_ms)

    t_batch = timeit(batch, 2.0)
    c_batch = timeit(batch, 2.0, clock=time.process_time)
    # zero_bubble_v (information): one config pp16 vpp2 m64, batch pp16 vpp2 m32
    pa96 = profile(96)
    pos = np.array([np.arange(16), 31 - np.arange(16)])
    cs_z1 = compile_schedule("zero_bubble_v", 16, 2, 64)
    lay_z = np.full((1, 2, 16), 3)
    rec_z = rng.integers(0, 3, (1, 2, 16))
    zz = np.zeros_like(lay_z)

    def zbv_one() -> None:
        simulate(cs_z1, stage_costs(pa96, lay_z, rec_z, zz, zz, pos=pos), pa96.p2p_ms)

    cs_z = compile_schedule("zero_bubble_v", 16, 2, 32)
    base_z = np.full((B, 2, 16), 2)
    rec_z_b = np.minimum(rng.integers(0, 3, (B, 2, 16)), base_z)
    zbz = np.zeros_like(base_z)

    def zbv_batch() -> None:
        simulate(cs_z, stage_costs(pa, base_z, rec_z_b, zbz, zbz, pos=pos), pa.p2p_ms)

    c_zone = timeit(zbv_one, clock=time.process_time)
    c_zbatch = timeit(zbv_batch, 2.0, clock=time.process_time)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {cores}, load average (1 min): {load:.2f}")
    print(f"one config  pp16 vpp3 m64: {t_one * 1e3:.3f} ms wall, {c_one * 1e3:.3f} ms CPU "
          f"(stage_costs + simulate); full evaluate_layout report {t_report * 1e3:.2f} ms wall")
    print(f"batch       pp16 vpp1 m32: {B / t_batch:,.0f} configs/s wall, {B / c_batch:,.0f} configs/s CPU "
          f"(batch of {B})")
    print(f"zero_bubble_v (information): one config pp16 vpp2 m64 {c_zone * 1e3:.3f} ms CPU; "
          f"batch pp16 vpp2 m32 {B / c_zbatch:,.0f} configs/s CPU")


if __name__ == "__main__":
    main()
