"""Event simulation of a schedule table (pure numpy, batched over candidate layouts).

Each op starts when its data dependency has finished (plus ``p2p_ms`` when the dependency ran on
another stage) and its own stage has finished the previous op in its order; it then runs for its
mini-stage's forward or backward time. Dependencies: the forward of pipeline position k needs the
forward of position k-1 for the same micro-batch; the backward of position k needs the backward of
position k+1; the backward of the last position needs its own forward. Step time = the last op's
end. This is exact for the given order (the closed form Σt + (m-1)·max t is only an upper bound;
cost-model reference §6.1).

The table is compiled once per (schedule, P, V, m) into *waves*: ops whose dependencies all lie in
earlier waves, so one wave is one vectorized numpy update for all candidates at once.

Peak memory per stage = static + max over the stage's op order of live activations (the sum of the
activation of every chunk-micro-batch whose forward ran and whose backward has not finished), where
a backward also holds its mini-stage's workspace. The live set depends only on the order, not on the
times, so the candidate-dependent part is a max of dot products over a few "live count" vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.cost.inputs import StageCosts
from autotune.cost.schedules import get_schedule


@dataclass(frozen=True)
class CompiledSchedule:
    """A schedule table compiled for simulation. Arrays are indexed by op id (n ops in all).

    Attributes:
        name, P, V, m: schedule and sizes.
        stage, chunk, mb: int [n]; fwd: bool [n] (True for a forward).
        dep, prev: int [n], the data dependency and the previous op on the same stage (n = none).
        cross: float [n], 1.0 when the dependency ran on another stage (p2p applies).
        waves: list of int arrays of op ids.
        order: list over stages of int arrays of op ids in execution order.
        mem_fwd: list over stages of int [K, V] live-count vectors right after a forward.
        mem_bwd: list over stages of (int [J, V] live counts during a backward, int [J] its chunk).
        max_inflight: int [P], the largest total live count on each stage.
    """

    name: str
    P: int
    V: int
    m: int
    stage: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    fwd: np.ndarray
    dep: np.ndarray
    prev: np.ndarray
    cross: np.ndarray
    waves: list[np.ndarray]
    order: list[np.ndarray]
    mem_fwd: list[np.ndarray]
    mem_bwd: list[tuple[np.ndarray, np.ndarray]]
    max_inflight: np.ndarray

    @property
    def num_ops(self) -> int:
        return int(self.stage.size)


def _pareto(vectors: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    vs = sorted(vectors, key=sum, reverse=True)
    keep: list[tuple[int, ...]] = []
    for v in vs:
        if not any(all(a >= b for a, b in zip(k, v)) for k in keep):
            keep.append(v)
    return keep


@lru_cache(maxsize=256)
def compile_schedule(name: str, P: int, V: int, m: int) -> CompiledSchedule:
    """Compile a registered schedule for (P, V, m); cached.

    Raises:
        KeyError: unknown schedule name.
        ValueError: the schedule cannot run these sizes, or its order deadlocks.
    """
    sched = get_schedule(name)
    sched.check(P, V, m)
    table = sched.order(P, V, m)
    pos = sched.virtual_position(P, V)
    at_pos = {int(pos[v, p]): (v, p) for v in range(V) for p in range(P)}
    last = V * P - 1
    ids: dict[tuple[int, int, int, bool], int] = {}
    stage_l, chunk_l, mb_l, fwd_l, prev_l = [], [], [], [], []
    order: list[np.ndarray] = []
    for p, ops in enumerate(table):
        if len(ops) != 2 * m * V:
            raise ValueError(f"schedule {name} gives stage {p} {len(ops)} ops, expected {2 * m * V}")
        prev = -1
        row = []
        for v, j, f in ops:
            i = len(stage_l)
            ids[(v, p, j, f)] = i
            stage_l.append(p)
            chunk_l.append(v)
            mb_l.append(j)
            fwd_l.append(f)
            prev_l.append(prev)
            prev = i
            row.append(i)
        order.append(np.asarray(row, dtype=np.int64))
    n = len(stage_l)
    dep = np.full(n, n, dtype=np.int64)
    cross = np.zeros(n)
    for (v, p, j, f), i in ids.items():
        k = int(pos[v, p])
        if f and k > 0:
            dv, dp = at_pos[k - 1]
            dep[i] = ids[(dv, dp, j, True)]
        elif not f and k < last:
            dv, dp = at_pos[k + 1]
            dep[i] = ids[(dv, dp, j, False)]
        elif not f:
            dv, dp = v, p
            dep[i] = ids[(v, p, j, True)]
        else:
            continue
        cross[i] = 1.0 if dp != p else 0.0
    prev_arr = np.asarray(prev_l, dtype=np.int64)
    prev_arr[prev_arr < 0] = n
    # Kahn levels over edges dep -> i and prev -> i.
    level = np.full(n, -1, dtype=np.int64)
    indeg = (dep < n).astype(np.int64) + (prev_arr < n).astype(np.int64)
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if dep[i] < n:
            children[dep[i]].append(i)
        if prev_arr[i] < n:
            children[prev_arr[i]].append(i)
    frontier = [i for i in range(n) if indeg[i] == 0]
    for i in frontier:
        level[i] = 0
    done = 0
    while frontier:
        nxt = []
        for i in frontier:
            done += 1
            for c in children[i]:
                indeg[c] -= 1
                level[c] = max(level[c], level[i] + 1)
                if indeg[c] == 0:
                    nxt.append(c)
        frontier = nxt
    if done != n:
        raise ValueError(f"schedule {name} deadlocks for pipeline_stage={P}, pp_interleave_num={V}, "
                         f"micro_batch_num={m}")
    waves = [np.flatnonzero(level == lv) for lv in range(int(level.max()) + 1)]
    mem_fwd, mem_bwd, max_inflight = [], [], []
    for p in range(P):
        live = [0] * V
        fset: set[tuple[int, ...]] = set()
        bset: set[tuple[tuple[int, ...], int]] = set()
        top = 0
        for i in order[p]:
            v = chunk_l[i]
            if fwd_l[i]:
                live[v] += 1
                fset.add(tuple(live))
            else:
                bset.add((tuple(live), v))
                live[v] -= 1
            top = max(top, sum(live))
        fv = _pareto(fset)
        bpairs: list[tuple[tuple[int, ...], int]] = []
        for v in range(V):
            for vec in _pareto({vec for vec, c in bset if c == v}):
                bpairs.append((vec, v))
        mem_fwd.append(np.asarray(fv, dtype=np.int64).reshape(-1, V))
        mem_bwd.append((np.asarray([b for b, _ in bpairs], dtype=np.int64).reshape(-1, V),
                        np.asarray([c for _, c in bpairs], dtype=np.int64)))
        max_inflight.append(top)
    return CompiledSchedule(name, P, V, m, np.asarray(stage_l), np.asarray(chunk_l), np.asarray(mb_l),
                            np.asarray(fwd_l, dtype=bool), dep, prev_arr, cross, waves, order,
                            mem_fwd, mem_bwd, np.asarray(max_inflight, dtype=np.int64))


@dataclass(frozen=True)
class SimResult:
    """Simulation output for a batch of B candidates.

    Attributes:
        step_ms: [B] makespan of one step (ms).
        busy_ms: [B, P] compute time per stage (ms).
        peak_act_mib: [B, P] peak live activations (+ workspace) per stage (MiB).
        peak_mib: [B, P] static + peak_act_mib.
        start_ms, end_ms: [n, B] per-op times (only when ``timeline=True``, else None).
    """

    step_ms: np.ndarray
    busy_ms: np.ndarray
    peak_act_mib: np.ndarray
    peak_mib: np.ndarray
    start_ms: np.ndarray | None = None
    end_ms: np.ndarray | None = None

    @property
    def bubble_fraction(self) -> np.ndarray:
        """[B] idle share of device time: 1 - Σ_p busy_p / (P · step)."""
        P = self.busy_ms.shape[1]
        return 1.0 - self.busy_ms.sum(axis=1) / (P * self.step_ms)


def peak_activation(cs: CompiledSchedule, act_mib: np.ndarray, ws_mib: np.ndarray) -> np.ndarray:
    """Peak live activation per stage, [B, P] MiB, from act/ws [B, V, P] (see module docstring)."""
    B = act_mib.shape[0]
    out = np.zeros((B, cs.P))
    for p in range(cs.P):
        a = act_mib[:, :, p]  # B V
        best = (a @ cs.mem_fwd[p].T).max(axis=1) if cs.mem_fwd[p].size else np.zeros(B)
        vecs, chunks = cs.mem_bwd[p]
        if vecs.size:
            during_b = a @ vecs.T + ws_mib[:, chunks, p]
            best = np.maximum(best, during_b.max(axis=1))
        out[:, p] = best
    return out


def simulate(cs: CompiledSchedule, costs: StageCosts, p2p_ms: float = 0.0, *,
             timeline: bool = False) -> SimResult:
    """Simulate a batch of candidates on a compiled schedule.

    Args:
        cs: from :func:`compile_schedule` (its P, V must match the cost arrays).
        costs: :class:`StageCosts` with arrays [B, V, P].
        p2p_ms: time of one stage-to-stage send (ms), added on every cross-stage dependency.
        timeline: also return per-op start/end times.
    """
    fwd = costs.fwd_ms
    B = fwd.shape[0]
    dur = np.where(cs.fwd[:, None], fwd[:, cs.chunk, cs.stage].T, costs.bwd_ms[:, cs.chunk, cs.stage].T)
    n = cs.num_ops
    end = np.zeros((n + 1, B))
    start = np.zeros((n, B)) if timeline else None
    hop = cs.cross * p2p_ms
    for w in cs.waves:
        st = np.maximum(end[cs.dep[w]] + hop[w, None], end[cs.prev[w]])
        end[w] = st + dur[w]
        if start is not None:
            start[w] = st
    step = end[:n].max(axis=0)
    busy = np.zeros((B, cs.P))
    busy_all = dur.T  # B n
    for p in range(cs.P):
        busy[:, p] = busy_all[:, cs.order[p]].sum(axis=1)
    peak_act = peak_activation(cs, costs.act_mib, costs.ws_mib)
    return SimResult(step, busy, peak_act, costs.static_mib + peak_act,
                     start, end[:n] if timeline else None)
