"""Event simulation of a schedule table (pure numpy, batched over candidate layouts).

Each op starts when its data dependency has finished (plus ``p2p_ms`` when the dependency ran on
another stage) and its own stage has finished the previous op in its order; it then runs for its
mini-stage's forward or backward time (divided by k = ``seq_split_num`` for seqpipe units).
Dependencies: the forward of pipeline position q needs the forward of position q-1 for the same
unit; the backward of position q needs the backward of position q+1; the backward of the last
position needs its own forward. Step time = the last op's end.

Schedules that split the backward (``splits_backward``, zero_bubble_v) have a third op kind: B
(input gradient) runs ``bwd_ms − bwd_w_ms`` (the replay of recompute included: it rebuilds the
activations B needs) and W (weight gradient) ``bwd_w_ms``; W needs its own B on the same device
(no p2p), and the backward chain runs through the B ops only (Qi et al., ICLR 2024 §2).
``StageCosts.bwd_w_ms`` None means half of the backward without replay (the profile's default
``bwd_w_frac`` 0.5). This is exact for the given order
(the closed form Σt + (m-1)·max t is only an upper bound; cost-model reference §6.1).

The table is compiled once per (schedule, P, V, m, k) into *waves*: ops whose dependencies all lie
in earlier waves, so one wave is one vectorized numpy update for all candidates at once. A single
candidate (B = 1) takes a scalar path over the same topological order (fewer numpy calls; the two
paths agree exactly, tested).

Peak memory per stage = static + max over the stage's op order of live activations (the sum of the
activation of every chunk-unit whose forward ran and whose backward has not finished), where a
backward also holds its mini-stage's workspace. With a split backward a unit stays alive until
its W ends, and its workspace is held from the start of its B to the end of its W (W needs the
re-materialized inputs too): the live state is then a vector of 2·V counts (``mem_split``). The
live set depends only on the order, not on the times, so the candidate-dependent part is a max of
dot products over a few "live count" vectors.

Timeline of the ``1f1b`` order for P = 2, m = 3, f = 1, b = 2 (step 11)::

    stage 0: F0 F1 .  B0 B0 F2 B1 B1 .  B2 B2
    stage 1: .  F0 B0 B0 F1 B1 B1 F2 B2 B2 .
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple
from functools import lru_cache

import numpy as np

from autotune.cost.dominance import pareto_mask
from autotune.cost.inputs import StageCosts
from autotune.cost.schedules import W, Op, get_schedule


@dataclass(frozen=True)
class CompiledSchedule:
    """A schedule table compiled for simulation. Arrays are indexed by op id (n ops in all).

    Attributes:
        name, P, V, m: schedule and sizes; k: ``seq_split_num`` (units per micro-batch).
        stage, chunk, mb: int [n] (mb is the *unit* index, = micro_batch·k + seq_chunk);
        fwd: bool [n] (True for a forward).
        kind: int8 [n], 0 = forward, 1 = backward (B when split), 2 = W (weight gradient).
        split_bw: the schedule splits backward into B and W (then ``mem_split`` is set).
        dep, prev: int [n], the data dependency and the previous op on the same stage (n = none).
        cross: float [n], 1.0 when the dependency ran on another stage (p2p applies).
        waves: list of int arrays of op ids.
        order: list over stages of int arrays of op ids in execution order.
        mem_fwd: list over stages of int [K, V] live-count vectors right after a forward.
        mem_bwd: list over stages of (int [J, V] live counts during a backward, int [J] its chunk).
        mem_split: split schedules only, list over stages of int [J, 2·V]: (live units per chunk,
            units per chunk holding their workspace, i.e. between B start and W end) at each
            candidate peak (after a forward, at the start of a B); None otherwise.
        max_inflight: int [P], the largest total live count on each stage (chunk-units).
        fwd_before_bwd: int [P], forwards each stage runs before its first backward (Megatron's
            ``num_warmup_microbatches`` is this minus one: the steady phase opens with a forward).
        topo: op ids in a topological order (waves concatenated).
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
    k: int = 1
    fwd_before_bwd: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    topo: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    split_bw: bool = False
    mem_split: list[np.ndarray] | None = None
    _scalar: tuple = field(default=(), repr=False)
    _wave_plan: tuple = field(default=(), repr=False)

    @property
    def num_ops(self) -> int:
        return int(self.stage.size)

    @property
    def seq_split_num(self) -> int:
        return self.k


def _pareto(vectors: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The largest live-count vectors (none above them in every chunk), by total descending."""
    vs = sorted(vectors, key=sum, reverse=True)
    if not vs:
        return vs
    keep = pareto_mask(-np.asarray(vs, dtype=np.float64))
    return [v for v, k in zip(vs, keep) if k]


def _split_memory(order: np.ndarray, chunk_l: list[int], kind: np.ndarray, V: int):
    """Live-state vectors of one stage of a split-backward schedule (module docstring).

    Returns (Pareto live vectors [V] after each forward; (live vector at a B start, its chunk)
    pairs, Pareto per chunk; the largest live count; Pareto 2·V vectors (live, workspace holders)
    at every candidate peak).
    """
    live = [0] * V
    hold = [0] * V
    fset: set[tuple[int, ...]] = set()
    bset: set[tuple[tuple[int, ...], int]] = set()
    sset: set[tuple[int, ...]] = set()
    top = 0
    for i in order:
        v = chunk_l[i]
        kd = int(kind[i])
        if kd == 0:
            live[v] += 1
            fset.add(tuple(live))
            sset.add(tuple(live) + tuple(hold))
        elif kd == 1:
            hold[v] += 1
            bset.add((tuple(live), v))
            sset.add(tuple(live) + tuple(hold))
        else:
            live[v] -= 1
            hold[v] -= 1
        top = max(top, sum(live))
    bpairs: list[tuple[tuple[int, ...], int]] = []
    for v in range(V):
        for vec in _pareto({vec for vec, c in bset if c == v}):
            bpairs.append((vec, v))
    return _pareto(fset), bpairs, top, _pareto(sset)


class _OpTable(NamedTuple):
    """The ops of a schedule's table, numbered stage by stage: per op its stage, chunk, unit, kind
    (0 F, 1 B or whole backward, 2 W; int8) and previous op on the stage (-1), all int [n]; per
    stage its op ids in program order and its warm-up length (ops before the first non-F)."""

    stage: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    kind: np.ndarray
    prev: np.ndarray
    order: list
    warmup: list


def _op_table(name: str, table: list[list[Op]], per_stage: int, split: bool) -> _OpTable:
    """Number the ops of ``table`` (per stage, in program order). Raises ValueError: a stage with
    the wrong op count, an op twice, or a W op in a schedule that does not split the backward
    (the first such op in program order, stage by stage). Arrays per stage, not a Python dict of
    every op (pp 64 × vpp 4 × m 512: 262,144 ops, ~0.4 s a V before)."""
    stage_l, chunk_l, mb_l, kind_l, prev_l, order, warmup = [], [], [], [], [], [], []
    start = 0
    for p, ops in enumerate(table):
        if len(ops) != per_stage:
            raise ValueError(f"schedule {name} gives stage {p} {len(ops)} ops, expected {per_stage}")
        L = len(ops)
        warmup.append(next((q for q, op in enumerate(ops) if op[2] is not True), L))
        v = np.fromiter((op[0] for op in ops), dtype=np.int64, count=L)
        j = np.fromiter((op[1] for op in ops), dtype=np.int64, count=L)
        kind = np.fromiter((2 if op[2] == W else (0 if op[2] else 1) for op in ops), dtype=np.int8, count=L)
        if L:
            key = (v * (int(j.max()) + 1) + j) * 3 + kind
            srt = np.argsort(key, kind="stable")
            dup = srt[1:][key[srt][1:] == key[srt][:-1]]
            bad_w = np.flatnonzero(kind == 2) if not split else np.zeros(0, dtype=np.int64)
            first_dup = int(dup.min()) if dup.size else L
            first_w = int(bad_w[0]) if bad_w.size else L
            if first_dup < L and first_dup <= first_w:
                a, b, f = ops[first_dup]
                raise ValueError(f"schedule {name} runs op {(a, b, f if f == W else bool(f))} twice on stage {p}")
            if first_w < L:
                raise ValueError(f"schedule {name} has a W op but does not split the backward")
        ids = np.arange(start, start + L, dtype=np.int64)
        stage_l.append(np.full(L, p, dtype=np.int64))
        chunk_l.append(v)
        mb_l.append(j)
        kind_l.append(kind)
        prev_l.append(np.concatenate([[-1], ids[:-1]]) if L else ids)
        order.append(ids)
        start += L

    def cat(parts: list, dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    return _OpTable(cat(stage_l, np.int64), cat(chunk_l, np.int64), cat(mb_l, np.int64), cat(kind_l, np.int8),
                    cat(prev_l, np.int64), order, warmup)


def _data_deps(stage: np.ndarray, chunk: np.ndarray, mb: np.ndarray, kind: np.ndarray, pos: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each op's data dependency (n: none) and whether it crosses stages (1.0): a forward needs the
    forward of the previous pipeline position, a backward the backward of the next one (the last
    position's backward its own forward), a W its own B. Ops are given by int [n] arrays (stage,
    chunk, micro-batch unit, kind 0 forward / 1 backward / 2 W) and ``pos`` int [V, P] is each
    mini-stage's pipeline position; every op is found through one table indexed by (position,
    unit, kind).

    Raises:
        KeyError: an op whose dependency is not in the schedule.
    """
    V, P = pos.shape
    n = stage.size
    U = int(mb.max()) + 1 if n else 1
    q = pos[chunk, stage]  # each op's pipeline position
    table = np.full(V * P * U * 3, -1, dtype=np.int64)
    table[(q * U + mb) * 3 + kind] = np.arange(n)
    last = V * P - 1
    tq = np.where(kind == 2, q, np.where(kind == 0, q - 1, np.where(q < last, q + 1, q)))
    tkind = np.where(kind == 2, 1, np.where((kind == 1) & (q == last), 0, kind))
    needs = (kind != 0) | (q > 0)
    dep = np.full(n, n, dtype=np.int64)
    found = table[(np.clip(tq, 0, last) * U + mb) * 3 + tkind]
    if np.any(needs & (found < 0)):
        i = int(np.flatnonzero(needs & (found < 0))[0])
        raise KeyError(f"op {i} (chunk {int(chunk[i])}, stage {int(stage[i])}, unit {int(mb[i])}) has no "
                       f"dependency in the schedule")
    dep[needs] = found[needs]
    stage_of_pos = np.empty(V * P, dtype=np.int64)
    stage_of_pos[pos.reshape(-1)] = np.tile(np.arange(P), V)
    cross = np.where(needs & (kind != 2), (stage_of_pos[np.clip(tq, 0, last)] != stage).astype(np.float64), 0.0)
    return dep, cross


def _waves(dep: np.ndarray, prev_arr: np.ndarray) -> list[np.ndarray] | None:
    """Kahn levels over the edges dep -> i and prev -> i (ops whose inputs are all in earlier
    levels), each level's ops ascending; None when some op is never reached (the order deadlocks).

    An op's level is the longest chain of inputs before it: 1 + the larger of its dependency's and
    its previous op's levels. The prev edges chain each stage's ops in program order, so the levels
    are found stage by stage: sweeps over the stages (alternately up and down) advance each one
    while its next op's dependency already has a level; a sweep that advances none leaves the
    rest deadlocked. Python lists in the loop (pp 64 × vpp 4 × m 512: 262,144 ops; ~2 × faster
    than a Kahn queue over a children table)."""
    n = dep.size
    dep_l, prev_l = dep.tolist(), prev_arr.tolist()
    has_prev = prev_arr < n
    nxt = np.full(n, n, dtype=np.int64)
    nxt[prev_arr[has_prev]] = np.flatnonzero(has_prev)
    nxt_l = nxt.tolist()
    ptr = np.flatnonzero(~has_prev).tolist()  # each chain's next op to level
    level = [-1] * (n + 1)  # level[n] = -1: no input
    todo = n
    up = True
    while todo:
        moved = 0
        for s in (range(len(ptr)) if up else range(len(ptr) - 1, -1, -1)):
            i = ptr[s]
            while i < n:
                d = dep_l[i]
                if d < n and level[d] < 0:
                    break  # its dependency has no level yet
                ld, lp = level[d], level[prev_l[i]]
                level[i] = (ld if ld > lp else lp) + 1
                moved += 1
                i = nxt_l[i]
            ptr[s] = i
        if not moved:
            return None
        todo -= moved
        up = not up
    lv = np.asarray(level[:n], dtype=np.int64)
    srt = np.argsort(lv, kind="stable")
    cuts = np.flatnonzero(np.diff(lv[srt])) + 1
    return np.split(srt, cuts)


def _first_seen(rows: np.ndarray) -> list[tuple[int, ...]]:
    """The distinct rows of int [k, w] as tuples, in the order each first occurs."""
    if not rows.shape[0]:
        return []
    _, first = np.unique(rows, axis=0, return_index=True)
    return [tuple(r) for r in rows[np.sort(first)].tolist()]


def _live_vectors(order: list[np.ndarray], chunk: np.ndarray, kind: np.ndarray, V: int,
                  split: bool) -> tuple[list, list, list, list | None]:
    """Per stage the undominated live-count vectors after a forward (int [R, V]) and during a
    backward (vectors int [R, V], chunks int [R]), the most micro-batches in flight, and with a
    B/W split the 2·V-count vectors (``mem_split``); see :class:`CompiledSchedule`. The live
    counts are cumulative sums over each stage's ops (+1 at a forward, −1 at a backward of its
    chunk); each set of vectors is built in the order its vectors first occur, as the op-by-op
    loop built it, so that :func:`_pareto` orders ties the same way."""
    mem_fwd, mem_bwd, max_inflight = [], [], []
    mem_split: list[np.ndarray] | None = [] if split else None
    chunk_l = chunk.tolist() if split else None
    for ops in order:
        if split:
            fv, bpairs, top, sv = _split_memory(ops, chunk_l, kind, V)
            mem_fwd.append(np.asarray(fv, dtype=np.int64).reshape(-1, V))
            mem_bwd.append((np.asarray([b for b, _ in bpairs], dtype=np.int64).reshape(-1, V),
                            np.asarray([c for _, c in bpairs], dtype=np.int64)))
            mem_split.append(np.asarray(sv, dtype=np.int64).reshape(-1, 2 * V))
            max_inflight.append(top)
            continue
        ch = chunk[ops]
        fw = kind[ops] == 0
        delta = np.zeros((ops.size, V), dtype=np.int64)
        delta[np.arange(ops.size), ch] = np.where(fw, 1, -1)
        after = np.cumsum(delta, axis=0)  # the live counts after each op
        before = after - delta  # ... and before it (a backward's vector is taken before it frees)
        top = max(0, int(after.sum(axis=1).max())) if ops.size else 0
        fset = set(_first_seen(after[fw]))
        bset = {(vec[:-1], vec[-1]) for vec in _first_seen(np.concatenate([before[~fw], ch[~fw, None]], axis=1))}
        fv, bv = _vector_arrays(fset, bset, V)
        mem_fwd.append(fv)
        mem_bwd.append(bv)
        max_inflight.append(top)
    return mem_fwd, mem_bwd, max_inflight, mem_split


def _vector_arrays(fset: set, bset: set, V: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """A stage's undominated live-count vectors after a forward (int [R, V]) and, per chunk, during
    a backward (vectors int [R, V], chunks int [R]), from the sets of every such vector (``bset``:
    (vector, chunk) pairs)."""
    fv = _pareto(fset)
    bpairs: list[tuple[tuple[int, ...], int]] = []
    for v in range(V):
        for vec in _pareto({vec for vec, c in bset if c == v}):
            bpairs.append((vec, v))
    return (np.asarray(fv, dtype=np.int64).reshape(-1, V),
            (np.asarray([b for b, _ in bpairs], dtype=np.int64).reshape(-1, V),
             np.asarray([c for _, c in bpairs], dtype=np.int64)))


@lru_cache(maxsize=256)
def compile_schedule(name: str, P: int, V: int, m: int, seq_split_num: int = 1) -> CompiledSchedule:
    """Compile a registered schedule for (P, V, m, k = seq_split_num); cached.

    Raises:
        KeyError: unknown schedule name.
        ValueError: the schedule cannot run these sizes, or its order deadlocks.
    """
    k_split = int(seq_split_num)
    sched = get_schedule(name)
    if P < 1 or V < 1 or m < 1:
        raise ValueError(f"pipeline_stage, pp_interleave_num and micro_batch_num must be >= 1 "
                         f"(got {P}, {V}, {m})")
    sched.check(P, V, m, k_split)
    table = sched.units_order(P, V, m, k_split)
    U = m * k_split
    split = bool(getattr(sched, "splits_backward", False))
    ops = _op_table(name, table, (3 if split else 2) * U * V, split)
    order, chunk_a, stage_a, kind_a = ops.order, ops.chunk, ops.stage, ops.kind
    n = stage_a.size
    dep, cross = _data_deps(stage_a, chunk_a, ops.mb, kind_a.astype(np.int64),
                            np.asarray(sched.virtual_position(P, V), dtype=np.int64))
    prev_arr = ops.prev.copy()
    prev_arr[prev_arr < 0] = n
    waves = _waves(dep, prev_arr)
    if waves is None:
        raise ValueError(f"schedule {name} deadlocks for pipeline_stage={P}, pp_interleave_num={V}, "
                         f"micro_batch_num={m}, seq_split_num={k_split}")
    topo = np.concatenate(waves)
    mem_fwd, mem_bwd, max_inflight, mem_split = _live_vectors(order, chunk_a, kind_a, V, split)
    scalar = (topo.tolist(), dep[topo].tolist(), prev_arr[topo].tolist(), cross[topo].tolist())
    inv = np.empty(n + 1, dtype=np.int64)
    inv[topo] = np.arange(n)
    inv[n] = n
    bounds = np.concatenate([[0], np.cumsum([w.size for w in waves])]).tolist()
    wave_plan = _make_wave_plan(inv[dep[topo]], inv[prev_arr[topo]], cross[topo], bounds,
                                (kind_a.astype(np.int64) * (V * P))[topo]
                                + (chunk_a[topo] * P + stage_a[topo]),
                                [int(inv[o[-1]]) for o in order])
    return CompiledSchedule(name, P, V, m, stage_a, chunk_a, ops.mb,
                            kind_a == 0, dep, prev_arr, cross, waves, order,
                            mem_fwd, mem_bwd, np.asarray(max_inflight, dtype=np.int64), k_split,
                            np.asarray(ops.warmup, dtype=np.int64), topo, kind_a, split, mem_split,
                            scalar, wave_plan)


@dataclass(frozen=True)
class _WavePlan:
    """Index arrays of the batched simulation, in topological coordinates (row i = i-th op of
    ``topo``; row n = the "no op" sentinel whose end is 0).

    Per wave w: ``gather[w]`` int [2·k] = the rows of the k ops' data dependencies then of their
    stage predecessors; ``key[w]`` int [k] = the row of each op's duration in the [2·V·P, B]
    duration table (forward of mini-stage (v, p) at v·P + p, backward at V·P + v·P + p);
    ``hop[w]`` float [k, 1] (1.0 on a cross-stage dependency) or None when the wave has none;
    ``rows[w]`` = (a, b), its row range. ``last`` int [P]: row of each stage's last op.
    """

    gather: list[np.ndarray]
    key: list[np.ndarray]
    hop: list[np.ndarray | None]
    rows: list[tuple[int, int]]
    last: np.ndarray
    max_width: int


def _make_wave_plan(dep_t: np.ndarray, prev_t: np.ndarray, cross_t: np.ndarray, bounds: list[int],
                    key_t: np.ndarray, last: list[int]) -> _WavePlan:
    gather, key, hop, rows = [], [], [], []
    for w in range(len(bounds) - 1):
        a, b = bounds[w], bounds[w + 1]
        gather.append(np.concatenate([dep_t[a:b], prev_t[a:b]]).astype(np.intp))
        key.append(np.ascontiguousarray(key_t[a:b], dtype=np.intp))
        c = cross_t[a:b]
        hop.append(c[:, None].astype(np.float64) if c.any() else None)
        rows.append((a, b))
    width = max((b - a for a, b in rows), default=1)
    return _WavePlan(gather, key, hop, rows, np.asarray(last, dtype=np.intp), width)


#: Candidates simulated together in the batched path: the [ops, chunk] end-time table then stays in
#: the CPU caches (1024 ops x 1024 x 8 B = 8 MiB). Results do not depend on it.
BATCH_CHUNK = 1024
#: ... at most this many cells of the end-time table per chunk (ops × candidates; 2^22 cells =
#: 32 MiB), so long schedules take narrower chunks: pp 16 × vpp 4 × 128 micro-batches (16,384
#: ops) ran at 41 M op-evals/s with 1,024 candidates a chunk and at 144 M with 256 ...
SIM_TABLE_CELLS = 1 << 22
#: ... but never fewer than this many candidates a chunk (per-wave overhead).
BATCH_MIN_CHUNK = 64


#: Relative rounding of :attr:`SimResult.bubble_fraction` taken as 0 when below 0 (sums of up to
#: ~10^5 op durations in two orders: ~10^-11 at most).
IDLE_ROUNDING = 1e-9


@dataclass(frozen=True)
class SimResult:
    """Simulation output for a batch of B candidates.

    Attributes:
        step_ms: [B] makespan of one step (ms).
        busy_ms: [B, P] compute time per stage (ms), recompute replay included.
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
        """[B] idle share of device time: 1 - Σ_p busy_p / (P · step); 0 where step_ms is 0 (a
        memory-only profile, all times 0, has no bubble); NaN stays NaN. A share below 0 by no
        more than :data:`IDLE_ROUNDING` is 0: on one pipeline stage the step is the stage's busy
        time, summed in another order (-2.2e-16 printed "-0.0%"); a larger negative share (a
        step shorter than a stage's work) is kept, as it is wrong."""
        P = self.busy_ms.shape[1]
        step = np.asarray(self.step_ms, dtype=np.float64)
        denom = P * step
        ok = denom > 0
        out = np.zeros(step.shape)
        np.divide(self.busy_ms.sum(axis=1), denom, out=out, where=ok)
        share = np.where(ok, 1.0 - out, np.where(np.isnan(step), np.nan, 0.0))
        return np.where((share < 0.0) & (share >= -IDLE_ROUNDING), 0.0, share)


def peak_activation(cs: CompiledSchedule, act_mib: np.ndarray, ws_mib: np.ndarray) -> np.ndarray:
    """Peak live activation per stage, [B, P] MiB, from act/ws [B, V, P] (see module docstring).

    ``act_mib`` is per micro-batch; a seqpipe unit holds act/k. ``ws_mib`` (a backward's transient
    working set) is not divided.
    """
    B = act_mib.shape[0]
    out = np.zeros((B, cs.P))
    for p in range(cs.P):
        out[:, p] = stage_peak_activation(cs, p, act_mib[:, :, p], ws_mib[:, :, p])
    return out


def stage_peak_activation(cs: CompiledSchedule, p: int, act: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """:func:`peak_activation` of one stage ``p``: [B] MiB from its mini-stages' act / ws [B, V]
    (MiB per micro-batch / per backward); the same arithmetic, so callers that need only some
    (row, stage) pairs can price just those."""
    if cs.mem_split is not None:
        a = np.concatenate([act * (1.0 / cs.k), ws], axis=1)  # B 2V
        return (a @ cs.mem_split[p].T).max(axis=1)
    a = act * (1.0 / cs.k) if cs.k != 1 else act  # B V
    best = (a @ cs.mem_fwd[p].T).max(axis=1) if cs.mem_fwd[p].size else np.zeros(len(a))
    vecs, chunks = cs.mem_bwd[p]
    if vecs.size:
        during_b = a @ vecs.T + ws[:, chunks]
        best = np.maximum(best, during_b.max(axis=1))
    return best


def peak_activation_parts(cs: CompiledSchedule, act_vp: np.ndarray, ws_vp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For one candidate (act/ws [V, P] MiB): the live activation and the workspace at each stage's
    peak, two float [P] arrays whose sum is :func:`peak_activation`'s value."""
    act_out = np.zeros(cs.P)
    ws_out = np.zeros(cs.P)
    if cs.mem_split is not None:
        V = cs.V
        for p in range(cs.P):
            vecs = cs.mem_split[p]
            live = vecs[:, :V] @ (act_vp[:, p] / cs.k)
            w = vecs[:, V:] @ ws_vp[:, p]
            q = int((live + w).argmax())
            act_out[p], ws_out[p] = float(live[q]), float(w[q])
        return act_out, ws_out
    for p in range(cs.P):
        a = act_vp[:, p] / cs.k
        best, best_a, best_w = -1.0, 0.0, 0.0
        if cs.mem_fwd[p].size:
            vals = cs.mem_fwd[p] @ a
            q = int(vals.argmax())
            best, best_a, best_w = float(vals[q]), float(vals[q]), 0.0
        vecs, chunks = cs.mem_bwd[p]
        if vecs.size:
            live = vecs @ a
            w = ws_vp[chunks, p]
            q = int((live + w).argmax())
            if live[q] + w[q] > best:
                best_a, best_w = float(live[q]), float(w[q])
        act_out[p], ws_out[p] = best_a, best_w
    return act_out, ws_out


def bwd_w_ms(costs: StageCosts) -> np.ndarray:
    """[B, V, P] weight-gradient part of the backward (ms): ``costs.bwd_w_ms``, else half of the
    backward without recompute replay (``bwd_w_frac`` 0.5, :mod:`autotune.profile.schema`)."""
    if costs.bwd_w_ms is not None:
        return costs.bwd_w_ms
    return 0.5 * (costs.bwd_ms - costs.recompute_ms)


def duration_table(cs: CompiledSchedule, costs: StageCosts) -> np.ndarray:
    """[R, B] per-(kind, chunk, stage) op durations (ms), row kind·V·P + v·P + p: forwards, then
    backwards (B = backward − W when split), then W (split schedules only); /k for seqpipe units."""
    fwd = costs.fwd_ms
    B = fwd.shape[0]
    VP = cs.V * cs.P
    table = np.empty(((3 if cs.split_bw else 2) * VP, B))
    table[:VP] = fwd.reshape(B, VP).T
    if cs.split_bw:
        w = bwd_w_ms(costs).reshape(B, VP).T
        table[VP:2 * VP] = costs.bwd_ms.reshape(B, VP).T - w
        table[2 * VP:] = w
    else:
        table[VP:] = costs.bwd_ms.reshape(B, VP).T
    if cs.k != 1:
        table /= cs.k
    return table


def _durations(cs: CompiledSchedule, costs: StageCosts) -> np.ndarray:
    """[n, B] duration of every op (ms)."""
    if cs.split_bw:
        return duration_table(cs, costs)[cs.kind.astype(np.int64) * (cs.V * cs.P)
                                         + cs.chunk * cs.P + cs.stage]
    d = np.where(cs.fwd[:, None], costs.fwd_ms[:, cs.chunk, cs.stage].T,
                 costs.bwd_ms[:, cs.chunk, cs.stage].T)
    return d / cs.k if cs.k != 1 else d


def _scalar_times(cs: CompiledSchedule, dur: list[float], p2p_ms: float,
                  want_start: bool) -> tuple[list[float], list[float] | None]:
    """End (and start) times of one candidate over the topological order (pure Python)."""
    topo, dep, prev, cross = cs._scalar
    n = cs.num_ops
    end = [0.0] * (n + 1)
    if want_start:
        start = [0.0] * n
        for i, d, pr, c, du in zip(topo, dep, prev, cross, dur):
            a = end[d] + c * p2p_ms
            b = end[pr]
            s = a if a > b else b
            start[i] = s
            end[i] = s + du
        return end, start
    for i, d, pr, c, du in zip(topo, dep, prev, cross, dur):
        a = end[d] + c * p2p_ms
        b = end[pr]
        end[i] = (a if a > b else b) + du
    return end, None


def simulate(cs: CompiledSchedule, costs: StageCosts, p2p_ms: float = 0.0, *,
             timeline: bool = False, method: str = "auto") -> SimResult:
    """Simulate a batch of candidates on a compiled schedule.

    Args:
        cs: from :func:`compile_schedule` (its P, V must match the cost arrays).
        costs: :class:`StageCosts` with arrays [B, V, P].
        p2p_ms: time of one stage-to-stage send (ms), added on every cross-stage dependency
            (not on the same-device turn of a V-shaped schedule).
        timeline: also return per-op start/end times.
        method: "auto" (scalar path for B = 1, waves otherwise), "waves" or "scalar".
    """
    fwd = costs.fwd_ms
    B = fwd.shape[0]
    n = cs.num_ops
    busy = (costs.fwd_ms + costs.bwd_ms).sum(axis=1) * cs.m  # B P
    peak_act = peak_activation(cs, costs.act_mib, costs.ws_mib)
    scalar = method == "scalar" or (method == "auto" and B == 1)
    if scalar:
        if B != 1:
            raise ValueError("the scalar simulation path takes one candidate")
        k = cs.k
        if cs.split_bw:
            d = _durations(cs, costs)[:, 0]
        else:
            d = np.where(cs.fwd, fwd[0, cs.chunk, cs.stage], costs.bwd_ms[0, cs.chunk, cs.stage])
            if k != 1:
                d = d / k
        end_l, start_l = _scalar_times(cs, d[cs.topo].tolist(), float(p2p_ms), timeline)
        step = np.asarray([max(end_l[:n])])
        start = np.asarray(start_l)[:, None] if timeline else None
        end_out = np.asarray(end_l[:n])[:, None] if timeline else None
        return SimResult(step, busy, peak_act, costs.static_mib + peak_act, start, end_out)
    # Work in topological coordinates: wave w is the contiguous row slice rows[w] of `end`.
    plan: _WavePlan = cs._wave_plan
    table = duration_table(cs, costs)
    step = np.empty(B)
    start = np.empty((n, B)) if timeline else None
    e_all = np.empty((n, B)) if timeline else None
    chunk = max(1, min(B, max(BATCH_MIN_CHUNK, min(BATCH_CHUNK, SIM_TABLE_CELLS // (n + 1)))))  # B = 0: no layout
    end = np.empty((n + 1, chunk))
    buf = np.empty((2 * plan.max_width, chunk))
    p2p = float(p2p_ms)
    for c0 in range(0, B, chunk):
        c1 = min(B, c0 + chunk)
        w_ = c1 - c0
        if w_ != chunk:  # the last, narrower chunk gets its own contiguous tables (a strided
            # view of the wide ones made np.take ~20x slower: 6 M op-evals/s at 2,268 layouts)
            end, buf = np.empty((n + 1, w_)), np.empty((2 * plan.max_width, w_))
        e, bf = end, buf
        dur = np.ascontiguousarray(table[:, c0:c1])
        e[n] = 0.0
        for g, key, hop, (a, b) in zip(plan.gather, plan.key, plan.hop, plan.rows):
            k = b - a
            both = bf[:2 * k]
            e.take(g, axis=0, out=both)
            ready = both[:k]
            if hop is not None and p2p != 0.0:
                ready += hop * p2p
            out = e[a:b]
            np.maximum(ready, both[k:], out=out)
            if start is not None:
                start[a:b, c0:c1] = out
            dur.take(key, axis=0, out=ready)
            out += ready
        step[c0:c1] = e[plan.last].max(axis=0)
        if e_all is not None:
            e_all[:, c0:c1] = e[:n]
    if timeline:
        s_out = np.empty_like(start)
        e_out = np.empty((n, B))
        s_out[cs.topo] = start
        e_out[cs.topo] = e_all
        return SimResult(step, busy, peak_act, costs.static_mib + peak_act, s_out, e_out)
    return SimResult(step, busy, peak_act, costs.static_mib + peak_act)


def live_memory_timeline(cs: CompiledSchedule, act_vp: np.ndarray, ws_vp: np.ndarray,
                         start_ms: np.ndarray, end_ms: np.ndarray) -> list[np.ndarray]:
    """Live activation over time per stage for one candidate.

    Args: act_vp, ws_vp [V, P] MiB; start_ms, end_ms [n] op times of that candidate.

    Returns: per stage a float [K, 2] array of (time_ms, live MiB) steps: a forward adds its
    chunk-unit's activation at its start; a backward holds its workspace while it runs and frees
    its unit's activation at its end (the same accounting as :func:`peak_activation`). With a
    split backward, B adds its workspace at its start and W frees the activation and the
    workspace at its end.
    """
    out = []
    for p in range(cs.P):
        pts = [(0.0, 0.0)]
        live = 0.0
        for i in cs.order[p]:
            a = act_vp[cs.chunk[i], p] / cs.k
            if cs.split_bw and not cs.fwd[i]:
                w = ws_vp[cs.chunk[i], p]
                if cs.kind[i] == 1:
                    live += w
                    pts.append((float(start_ms[i]), live))
                else:
                    live -= a + w
                    pts.append((float(end_ms[i]), live))
                continue
            if cs.fwd[i]:
                live += a
                pts.append((float(start_ms[i]), live))
            else:
                pts.append((float(start_ms[i]), live + ws_vp[cs.chunk[i], p]))
                live -= a
                pts.append((float(end_ms[i]), live))
        out.append(np.asarray(pts))
    return out
