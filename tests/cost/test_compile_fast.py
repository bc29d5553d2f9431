"""``compile_schedule``'s op table, Kahn waves and live-count vectors, now built with numpy and
per-stage sweeps (reading a pp 64 × m 512 config compiled V 1-4 in ~3.6-4.0 CPU s, now ~1.8 s),
checked against the op-by-op loops they replaced (kept here as the oracle): every compiled field
the same, to the row order and dtype, on every registered schedule over small sizes."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from autotune.cost.schedules import W, get_schedule
from autotune.cost.simulate import compile_schedule

S = importlib.import_module("autotune.cost.simulate")  # the package's name `simulate` is the function

def _ref_op_table(name: str, table: list, per_stage: int, split: bool) -> tuple:
    """Number the ops of ``table`` (per stage, in program order). Raises ValueError: a stage with
    the wrong op count, an op twice, or a W op in a schedule that does not split the backward."""
    ids: dict[tuple[int, int, int, bool], int] = {}
    stage_l, chunk_l, mb_l, fwd_l, prev_l = [], [], [], [], []
    order: list[np.ndarray] = []
    warmup = []
    for p, ops in enumerate(table):
        if len(ops) != per_stage:
            raise ValueError(f"schedule {name} gives stage {p} {len(ops)} ops, expected {per_stage}")
        prev = -1
        row = []
        w = next((q for q, op in enumerate(ops) if op[2] is not True), len(ops))
        warmup.append(w)
        for v, j, f in ops:
            i = len(stage_l)
            f = f if f == W else bool(f)
            if (v, p, j, f) in ids:
                raise ValueError(f"schedule {name} runs op {(v, j, f)} twice on stage {p}")
            if f == W and not split:
                raise ValueError(f"schedule {name} has a W op but does not split the backward")
            ids[(v, p, j, f)] = i
            stage_l.append(p)
            chunk_l.append(v)
            mb_l.append(j)
            fwd_l.append(f)
            prev_l.append(prev)
            prev = i
            row.append(i)
        order.append(np.asarray(row, dtype=np.int64))
    return stage_l, chunk_l, mb_l, fwd_l, prev_l, order, warmup


def _ref_waves(dep: np.ndarray, prev_arr: np.ndarray) -> list[np.ndarray] | None:
    """Kahn levels over the edges dep -> i and prev -> i (ops whose inputs are all in earlier
    levels), each level's ops ascending; None when some op is never reached (the order deadlocks).

    Levels are taken wave by wave: an op becomes ready when its last input is taken, and that input
    is in the wave just before, so the wave an op joins is its level (the longest chain of inputs
    before it). Python lists, not numpy scalars, in the loop (pp 64 × vpp 4 × m 512: 262,144 ops)."""
    n = dep.size
    indeg = [0] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for i, (d, q) in enumerate(zip(dep.tolist(), prev_arr.tolist())):
        if d < n:
            children[d].append(i)
            indeg[i] += 1
        if q < n:
            children[q].append(i)
            indeg[i] += 1
    frontier = [i for i in range(n) if indeg[i] == 0]
    waves: list[np.ndarray] = []
    done = 0
    while frontier:
        waves.append(np.sort(np.asarray(frontier, dtype=np.int64)))
        done += len(frontier)
        nxt = []
        for i in frontier:
            for c in children[i]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    nxt.append(c)
        frontier = nxt
    if done != n:
        return None
    return waves


def _ref_live_vectors(order: list[np.ndarray], chunk_l: list, fwd_l: list, V: int) -> tuple:
    """The old op-by-op loop of a schedule with whole backwards (the split-backward branch,
    ``_split_memory``, did not change): the live-count sets of every stage, turned into arrays by
    the same :func:`~autotune.cost.simulate._vector_arrays`."""
    mem_fwd, mem_bwd, max_inflight = [], [], []
    for ops in order:
        live = [0] * V
        fset: set[tuple[int, ...]] = set()
        bset: set[tuple[tuple[int, ...], int]] = set()
        top = 0
        for i in ops:
            v = chunk_l[i]
            if fwd_l[i]:
                live[v] += 1
                fset.add(tuple(live))
            else:
                bset.add((tuple(live), v))
                live[v] -= 1
            top = max(top, sum(live))
        fv, bv = S._vector_arrays(fset, bset, V)
        mem_fwd.append(fv)
        mem_bwd.append(bv)
        max_inflight.append(top)
    return mem_fwd, mem_bwd, max_inflight


CASES = [(name, P, V, m, k) for name in ("1f1b", "1f1b_less_memory", "gpipe", "seqpipe", "seqvpp", "zero_bubble_v")
         for P in (1, 2, 3, 4) for V in (1, 2, 3) for m in (1, 2, 3, 5, 8) for k in (1, 2)]


def _reference(name: str, P: int, V: int, m: int, k: int):
    """The old loops' op table, waves and live vectors of one schedule (None: it cannot run)."""
    sched = get_schedule(name)
    try:
        sched.check(P, V, m, k)
    except ValueError:
        return None
    split = bool(getattr(sched, "splits_backward", False))
    stage_l, chunk_l, mb_l, fwd_l, prev_l, order, warmup = _ref_op_table(
        name, sched.units_order(P, V, m, k), (3 if split else 2) * m * k * V, split)
    kind = np.asarray([2 if f == W else (0 if f else 1) for f in fwd_l], dtype=np.int8)
    return stage_l, chunk_l, mb_l, [f is True for f in fwd_l], prev_l, order, warmup, kind, split


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_compiled_fields_equal_the_loops(case) -> None:
    ref = _reference(*case)
    if ref is None:
        return
    stage_l, chunk_l, mb_l, fwd_l, prev_l, order, warmup, kind, split = ref
    try:
        cs = compile_schedule(*case)
    except ValueError:  # a deadlock: the old waves say so too
        n = len(stage_l)
        prev = np.asarray(prev_l, dtype=np.int64)
        prev[prev < 0] = n
        dep, _ = S._data_deps(np.asarray(stage_l), np.asarray(chunk_l), np.asarray(mb_l), kind.astype(np.int64),
                              np.asarray(get_schedule(case[0]).virtual_position(case[1], case[2])))
        assert _ref_waves(dep, prev) is None
        return
    n = len(stage_l)
    for got, want in ((cs.stage, stage_l), (cs.chunk, chunk_l), (cs.mb, mb_l), (cs.fwd, fwd_l)):
        assert np.array_equal(got, np.asarray(want)) and got.dtype == np.asarray(want).dtype
    prev = np.asarray(prev_l, dtype=np.int64)
    prev[prev < 0] = n
    assert np.array_equal(cs.prev, prev) and np.array_equal(cs.kind, kind)
    assert np.array_equal(cs.fwd_before_bwd, np.asarray(warmup)) and all(
        np.array_equal(a, b) for a, b in zip(cs.order, order))
    waves = _ref_waves(cs.dep, cs.prev)
    assert len(waves) == len(cs.waves) and all(np.array_equal(a, b) and a.dtype == b.dtype
                                               for a, b in zip(cs.waves, waves))
    assert (cs.mem_split is not None) == split
    if split:
        return
    fwd_m, bwd_m, top = _ref_live_vectors(order, chunk_l, fwd_l, case[2])
    assert all(np.array_equal(a, b) for a, b in zip(cs.mem_fwd, fwd_m))
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(cs.mem_bwd, bwd_m))
    assert np.array_equal(cs.max_inflight, np.asarray(top))


def test_bad_tables_are_refused_as_before() -> None:
    """A stage with the wrong op count, an op twice, a W op in a schedule that does not split:
    the same errors as the loop, for the first such op in program order."""
    ok = [[(0, 0, True), (0, 0, False)], [(0, 0, True), (0, 0, False)]]
    S._op_table("x", ok, 2, False)
    with pytest.raises(ValueError, match="gives stage 1 1 ops, expected 2"):
        S._op_table("x", [ok[0], ok[1][:1]], 2, False)
    with pytest.raises(ValueError, match=r"runs op \(0, 0, True\) twice on stage 1"):
        S._op_table("x", [ok[0], [(0, 0, True), (0, 0, True)]], 2, False)
    with pytest.raises(ValueError, match="has a W op but does not split"):
        S._op_table("x", [[(0, 0, True), (0, 0, W)], ok[1]], 2, False)
    with pytest.raises(ValueError, match=r"runs op \(0, 0, 'W'\) twice"):
        S._op_table("x", [[(0, 0, W), (0, 0, W)], ok[1]], 2, True)
    for bad in ([[(0, 0, True), (0, 0, True)], ok[1]], [[(0, 0, True), (0, 0, W)], ok[1]]):
        for split in (False, True):
            try:
                _ref_op_table("x", bad, 2, split)
                want = None
            except ValueError as e:
                want = str(e)
            try:
                S._op_table("x", bad, 2, split)
                got = None
            except ValueError as e:
                got = str(e)
            assert got == want
