"""Exact device-by-device DP lower bound for pp_interleave_num > 1 (pure numpy, no Optuna).

Paths. Every one-stay path (:func:`autotune.tuner.bounds._paths.one_stay_counts`) of stage p whose op
count is >= 1 on every mini-stage of the *other* stages ("no-skip": it enters p through a
micro-batch's whole forward chain and leaves through a whole backward chain) is, on relaxed
durations d = F + B per mini-stage,

    length = W + E_π(p),   W = Σ_all mini-stages (F + B),
    E_π(p) = Σ_v (cf_v − 1)·F(v, p) + (cb_v − 1)·B(v, p) + hops·p2p  (+ Σ_off (c − 1)·d >= 0, dropped)

so the step time T of any layout is >= W + max_p max_π E_π(p). W is a sum of per-stage terms and
E only depends on one stage's configuration: for a threshold ε on the max, the least W is a
knapsack DP over stages (state: layers placed) of per-stage tables "least W_p of a stage holding
L layers whose E <= ε"; the bound is min over ε of (W(ε) + ε). ε only needs the finitely many E
values of the stage configurations (a layout whose max E is e* is feasible at ε = e*), so the
minimum is exact for the relaxed problem — integer layer counts, no convex mix of paths, and
every stage's memory-forced replay counted in W at its own configuration (the stage DP of
:mod:`autotune.tuner.bounds.stage_dp` charges the other stages only the least replay of any
placement of their layers; the Lagrangian of :mod:`autotune.tuner.bounds` mixes paths).

Relaxations (each can only lower the bound): layer kinds by position (a layer whose place in the
model is fixed to one kind by the mini-stages' lower bounds is that kind, any other the cheapest
kind per recompute class: :mod:`autotune.tuner.bounds._kinds`) and a free recompute class per
layer. First pass (every configuration): the least replay that fits is
the max over the undominated live-count vectors of each vector's own least replay
(:func:`autotune.tuner.bounds._relax.min_extra_ms`; of the workspace only the head's / tail's on
backward rows, :func:`autotune.tuner.bounds._relax.live_rows`), and each path's replay term
Σ_v (cb_v − 1)·x_v takes its own least value over the replay choices that fit. Joint pass (the
configurations that can still matter): the class multisets of each chunk not dominated in
(activation, static delta, replay, workspace) are combined over the stage's chunks, every
live-count vector is checked at once — a backward's vector with its chunk's workspace (the
largest of its layers' classes and the head / tail workspace, as the cost model's peak) — and the
(replay, E) pairs not dominated become the configuration's variants (a stage on the critical path
cannot dodge two paths' replay terms with one placement). A configuration whose best layout — per
the first pass, from forward and backward knapsack tables — is above a target τ is dropped before
the joint pass (every layout using it is above τ), so min(τ, DP) stays a bound; τ rises while the
DP reaches it, until the incumbent or the work cap. Where that stops short, a lazy pass goes on
from the configurations priced so far (issue 17): the DP over *every* configuration (the
unpriced ones with their first-pass pair, a lower bound of their joint ones) names a best layout;
its unpriced configurations are priced and the DP is solved again, until the best layout uses
priced configurations only (the DP's optimum, without the last stage's skipping paths, is then
the one with every configuration priced), a work cap or :data:`LAZY_PATIENCE` rounds without a
rise. On TeleChat2 vpp4 the target pass's first step already needs ~47 M combinations by its
count (over its 8 M cap, so it priced nothing; 4.8 M of them are configurations over
:data:`MAX_JOINT`, which it counts but never prices); the lazy pass prices
112 configurations in 7.8 M combinations (6,425.43 → 6,433.08 ms) and, uncapped, reaches the
all-priced optimum 6,436.57 ms with 165 of the 4,199 configurations and 11.5 M combinations,
against 1,336 configurations and 55.7 M for the target pass.

The last stage's paths that skip exactly the last chunk's forwards of the other stages have length
W + Es − f·c (c: those layers; forwards carry no replay): the stages before the last also track c
and the last stage adds max(ε, Es − f·c), exact at each layout's max no-skip E. Other skipping
paths and paths that stay on several stages are not in the family (the integer program of
:mod:`autotune.tuner.bounds.milp` prices them): on TeleChat2 vpp3 the relaxed optimum's layout has
a two-stay path (stage 4's chunk 1, then stage 5's chunk 2) 58 ms longer than its no-skip paths
even without replay.

Cost: the stage configurations (layer-count vectors, capped by a stage's own path m·Σ n (f + b0)
<= T and pruned by W_min + E0 > upper) each need one replay front per memory vector and path
group; the DP is vectorised over all ε at once. TeleChat2 96 layers pp8: 1.3–1.5 s for V = 3
(first pass 6,646.05 ms, joint pass on 651 configurations +23.15, workspaces +4.45: 6,673.65),
1.2–1.4 s for V = 4 (6,424.0 when measured; the frozen profile with incumbent 6,529.2 ms now gives
6,425.43 in 0.6 s before the lazy pass and 6,433.08 in ~2.8 s with it). The joint pass
combines a configuration's chunks one at a time and drops partial combinations that cannot fit
(:func:`_joint`; the same fronts as the full product, ~25 % less time on TeleChat2 vpp4's). Work
caps (no clock) keep long schedules (256 micro-batches) to a few seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.cost.budget import hbm_cap
from autotune.tuner.bounds._base import BoundContext, BoundOutcome
from autotune.tuner.bounds._clock import cannot_finish
from autotune.tuner.bounds._paths import one_stay_counts
from autotune.tuner.bounds._kinds import TOO_LARGE, ChunkOptions, LayerTypes, TypedFronts, chunk_options
from autotune.tuner.bounds._relax import (IntegerSetup, count_vectors, integer_setup, live_rows, pareto_front,
                                          undominated)
from autotune.tuner.problem import Problem


#: Work cap: stage configurations (layer-count vectors) enumerated over all stages.
MAX_CONFIGS = 300_000
#: Most replay combinations (product over a stage's chunks of their class options) priced jointly
#: for one stage configuration; above it the configuration keeps its per-path bound (weaker).
MAX_JOINT = 200_000
#: Work cap of the joint pass: replay combinations priced over all configurations (~250 ns each),
#: for its target pass and again for its lazy pass (so up to twice this in all).
JOINT_WORK = 8_000_000
#: Work cap of the lazy joint pass's best-layout DPs: Σ over its rounds of thresholds × (N + 1) ×
#: the stages' distinct layer counts (knapsack cells, ~2-5 ns each). TeleChat2 96 layers pp8 vpp4
#: needs 1.4e7 for its 42 rounds to convergence.
SELECT_WORK = 300_000_000
#: The lazy joint pass stops after this many rounds in a row that did not raise its DP's value:
#: where many layouts tie at the optimum, each round's best layout is another one (Llama-2-70B pp8
#: vpp4 m128: 279 rounds, ~4 CPU s, for no rise), and on one pipeline stage most configurations
#: are over :data:`MAX_JOINT` (GPT-2 XL vpp4: 17 rounds, 3.6 s, nothing priced); TeleChat2 96
#: layers pp8 vpp4 first rises after 6.
LAZY_PATIENCE = 8
#: Work cap of the first pass's per-path replay terms: (configuration, memory vector, path group)
#: fronts priced (~0.15 ms each; TeleChat2 vpp4 needs 22,300, Llama's m = 256 vpp3 168,000). Past
#: it a configuration's paths weight its least replay by their least (cb − 1) (weaker, still a
#: bound).
LEAST_WORK = 25_000
#: Work cap of the last stage's skipping paths: thresholds × (N + 1)² × (layers, last-chunk
#: layers) groups of the two-dimensional DP (~4 ns each; TeleChat2 <= 1e8). Past it those paths
#: are left out (the one-dimensional DP: a weaker bound).
FINAL_WORK = 300_000_000


#: Most thresholds ε of the joint pass's through-values (:func:`_through`, O(ε · N²) per stage);
#: past it the configurations' E are rounded down to a grid (weaker pruning, never a wrong one).
THROUGH_THRESHOLDS = 256


@dataclass
class DeviceDPBound:
    """Result of :func:`device_dp_bound`: the bound (ms), the stage configurations enumerated,
    the thresholds ε of the last DP, the configurations priced jointly (the rest keep the
    per-path replay bound) and the replay combinations that took."""

    bound_ms: float
    configs: int
    thresholds: int
    priced: int = 0
    combinations: int = 0


@dataclass
class _Rows:
    """Rows of one stage for the DP over thresholds: layer counts n [M, V], F, B (ms without
    replay) [M, V], replay e [M] and E [M] (ms, lower bounds), Es [M] (the last stage's skipping
    paths' part, -inf elsewhere; see :class:`_Stage`)."""

    n: np.ndarray
    F: np.ndarray
    B: np.ndarray
    e: np.ndarray
    E: np.ndarray
    Es: np.ndarray

    @property
    def cost(self) -> np.ndarray:
        """F + B + replay of each configuration (ms per micro-batch): its share of W."""
        return self.F.sum(axis=1) + self.B.sum(axis=1) + self.e

    @property
    def layers(self) -> np.ndarray:
        return np.rint(self.n.sum(axis=1)).astype(np.int64)

    def first(self, eps: np.ndarray) -> np.ndarray:
        """int [M]: the first threshold index k with E <= eps[k] (len(eps) when none; -inf -> 0)."""
        return np.searchsorted(eps, self.E - 1e-9 * np.maximum(1.0, np.abs(self.E)), side="left")


@dataclass
class _Stage:
    """One stage's configurations: layer counts n [M, V]; F, B (ms without replay) [M, V];
    replay e [M] and E [M] (ms, lower bounds); for the joint pass E0 [M, Q] (no replay), the
    paths' replay weights A [Q, V] (cb − 1), the live-count vectors rows [R, V] and the memory
    room [M, R] (MiB); Es [M]: on the last stage, the stage's part of its paths that skip the
    last chunk's forwards of the other stages (their length is W + Es − f·(those layers); -inf
    elsewhere); for the joint pass the live-count vectors with their phase, jrows [Rj, V] and
    jchunk [Rj] (-1 after a forward, else the chunk whose backward runs: its workspace is live),
    jroom [M, Rj] (MiB) and the head / tail workspace end_ws_mib [V] (MiB); tn [M, V, T] the layer
    type counts per chunk (:class:`autotune.tuner.bounds._kinds.LayerTypes`). The DP reads it
    through the same fields and properties as :class:`_Rows`."""

    n: np.ndarray
    F: np.ndarray
    B: np.ndarray
    e: np.ndarray
    E: np.ndarray
    E0: np.ndarray
    A: np.ndarray
    rows: np.ndarray
    room: np.ndarray
    Es: np.ndarray
    jrows: np.ndarray
    jchunk: np.ndarray
    jroom: np.ndarray
    end_ws_mib: np.ndarray
    tn: np.ndarray

    def take(self, idx: np.ndarray, e: np.ndarray | None = None, E: np.ndarray | None = None) -> _Rows:
        """The DP's rows ``idx`` (configuration indices, repeats allowed), with replay ``e`` and
        ``E`` [len(idx)] in place of theirs when given."""
        return _Rows(self.n[idx], self.F[idx], self.B[idx], self.e[idx] if e is None else e,
                     self.E[idx] if E is None else E, self.Es[idx])

    cost = _Rows.cost
    layers = _Rows.layers
    first = _Rows.first


#: What the DP over thresholds reads: a stage's configurations or rows taken from them.
_DPRows = _Rows | _Stage


def _cheapest_allowed(first: np.ndarray, cost: np.ndarray, Kn: int) -> np.ndarray:
    """float [Kn]: the least ``cost`` among configurations allowed at each threshold k
    (``first`` <= k), +inf where none."""
    col = np.full(Kn + 1, np.inf)
    np.minimum.at(col, first, cost)
    return np.minimum.accumulate(col[:Kn])


class _WeightedFronts:
    """Pareto fronts of (memory MiB, weighted replay ms) of a stage's chunks together: chunk v's
    front for one live-count weight w_v (per layer type, :class:`autotune.tuner.bounds._kinds.
    TypedFronts`) with its replay scaled by a_v, Minkowski-summed over the chunks (memoised by
    type counts, w, a)."""

    def __init__(self, tf: TypedFronts) -> None:
        self.tf = tf
        self.cache: dict[tuple, np.ndarray] = {}

    def least(self, tn: tuple[tuple[int, ...], ...], w: tuple[float, ...], a: tuple[float, ...],
              budget: float) -> float:
        """min Σ_v a_v·replay_v over per-layer classes with Σ_v (w_v·act + static_delta) <= budget
        (+inf when nothing fits); ``tn`` the type counts per chunk. A part with a_v < 0 wants the
        most replay, which a class off the (memory, replay) front may give (more memory and more
        replay than a front point), so such a part is relaxed to one point: its least memory and
        n × the largest per-layer replay of any class (each only lowers the minimum; equal to the
        front's least-memory point when the least-memory class is also the slowest, e.g. full
        recompute)."""
        # parts (type, weight, a >= 0) of several chunks hold interchangeable layers: one part of
        # their summed count has the same front; the part with the most layers is matched to each
        # point of the others' memoised Minkowski sum by binary search (the same minimum as on the
        # whole sum's front, without building it)
        merged: dict[tuple[int, float, float], int] = {}
        parts: list[tuple[int, int, float, float]] = []
        for c, wv, av in zip(tn, w, a):
            for t, n in enumerate(c):
                if n and av >= 0:
                    merged[(t, wv, av)] = merged.get((t, wv, av), 0) + int(n)
                elif n:
                    parts.append((t, int(n), wv, av))
        parts = [(t, n, wv, av) for (t, wv, av), n in sorted(merged.items())] + parts
        tol = 1e-9 * (1.0 + abs(budget))
        if not parts:
            return 0.0 if budget + tol >= 0.0 else float("inf")
        j = max(range(len(parts)), key=lambda i: parts[i][1])
        rest = tuple(parts[:j] + parts[j + 1:])
        acc = self.cache.get(rest)
        if acc is None:
            acc = np.zeros((1, 2))
            for t, n, wv, av in rest:
                g = self._part(t, n, float(wv), av)
                acc = g if len(rest) == 1 else pareto_front((acc[:, None, :] + g[None, :, :]).reshape(-1, 2))
            self.cache[rest] = acc
        t, n, wv, av = parts[j]
        last = self.tf.get(t, n, float(wv))  # memory ascending, replay descending
        room = budget + tol - acc[:, 0]
        if av < 0:  # one point (see above): least memory, most replay
            g = self._part(t, n, float(wv), av)
            ok = g[0, 0] <= room
            return float((acc[ok, 1] + g[0, 1]).min()) if ok.any() else float("inf")
        i = np.searchsorted(last[:, 0], room, side="right") - 1
        ok = i >= 0
        return float((acc[ok, 1] + av * last[i[ok], 1]).min()) if ok.any() else float("inf")


    def _part(self, t: int, n: int, wv: float, av: float) -> np.ndarray:
        """(memory MiB, a·replay ms) points of n layers of type t at weight wv: the front scaled by
        av when av >= 0, else the single relaxed point of :meth:`least`."""
        g = self.tf.get(t, n, wv).copy()
        if av >= 0:
            g[:, 1] *= av
            return g
        return np.array([[g[0, 0], av * n * float(self.tf.fr[t].layer.extra_ms.max())]])


def _joint(jo: ChunkOptions, counts: tuple[tuple[int, ...], ...], st: "_Stage", j: int) -> np.ndarray:
    """The (replay ms, E ms) pairs not dominated over the replay choices of configuration j of a
    stage (layer type counts per chunk ``counts``) that fit every live-count vector at once, each backward with
    its chunk's workspace (the largest of its layers' classes and its head / tail): E = max over
    the stage's no-skip paths of E0 + Σ_v (cb_v − 1)·replay_v; float [K, 2], empty when nothing
    fits.

    A vector's load is a sum of one term per chunk (its options' activation × the vector's count,
    static delta, and on a backward of that chunk its workspace), so the chunks' options are
    combined one chunk at a time, and a partial combination whose load plus the least load of the
    chunks still to come is over the room on some vector is dropped before the next chunk
    multiplies it (the same combinations fit as in the full product)."""
    opts = [jo.get(c) for c in counts]
    V = len(opts)
    ch = st.jchunk
    room = st.jroom[j] + 1e-9 * (1.0 + np.abs(st.jroom[j]))
    # per chunk v, per option, per vector r: its part of the vector's load (MiB)
    terms = []
    for v, o in enumerate(opts):
        ws = np.maximum(o[:, 3], st.end_ws_mib[v])
        terms.append(o[:, 0:1] * st.jrows[None, :, v] + o[:, 1:2] + np.where(ch == v, ws[:, None], 0.0))
    least = [t.min(axis=0) for t in terms]
    rest = np.zeros((V + 1, ch.size))
    for v in range(V - 1, -1, -1):
        rest[v] = rest[v + 1] + least[v]
    load = np.zeros((1, ch.size))
    idx = np.zeros((1, 0), dtype=np.int64)
    for v in range(V):
        load = (load[:, None, :] + terms[v][None, :, :]).reshape(-1, ch.size)
        idx = np.concatenate([np.repeat(idx, terms[v].shape[0], axis=0),
                              np.tile(np.arange(terms[v].shape[0]), idx.shape[0])[:, None]], axis=1)
        ok = np.all(load + rest[v + 1][None, :] <= room[None, :], axis=1)
        load, idx = load[ok], idx[ok]
        if not ok.any():
            return np.zeros((0, 2))
    x = np.stack([opts[v][idx[:, v], 2] for v in range(V)], axis=1)  # [K, V]
    return pareto_front(np.stack([x.sum(axis=1), (st.E0[j][None, :] + x @ st.A.T).max(axis=1)], axis=1))


def _families(rows: list, p: int, P: int, V: int, p2p: float, end_f: np.ndarray) -> tuple[list, list]:
    """Stage p's no-skip paths and (last stage only) its paths that skip exactly the last chunk's
    forwards of the other stages, each as (cf − 1, cb − 1 on stage p [V], hops·p2p ms)."""
    off = np.ones((V, P), dtype=bool)
    off[:, p] = False
    keep = [(cf[:, p] - 1.0, cb[:, p] - 1.0, hops * p2p) for cf, cb, hops in rows
            if (cf[off] >= 1.0 - 1e-9).all() and (cb[off] >= 1.0 - 1e-9).all()]
    skip = []
    if p == P - 1 and P > 1:
        # paths that skip exactly the last chunk's forwards of the other stages (no replay
        # there: the skipped time is f per layer): E = stage part − f·(those layers)
        zero = np.zeros((V, P), dtype=bool)
        zero[V - 1, :P - 1] = True
        skip = [(cf[:, p] - 1.0, cb[:, p] - 1.0, hops * p2p) for cf, cb, hops in rows
                if (np.abs(cf[zero]) < 1e-9).all() and (cf[off & ~zero] >= 1.0 - 1e-9).all()
                and (cb[off] >= 1.0 - 1e-9).all() and not (end_f[V - 1, :P - 1] > 0).any()]
    return keep, skip


def _count_vectors_capped(lo: np.ndarray, hi: np.ndarray, n_cap: int, max_configs: int
                          ) -> list[list[tuple[int, ...]]] | None:
    """Every stage's layer-count vectors (``count_vectors`` within lo / hi int [V, P], capped at
    n_cap layers), or None when their total passes ``max_configs``: checked before any stage table
    is built (pp8 vpp4 m128, 256 layers: ~58,900 a stage; 15.5 CPU s of five stages' tables were
    built and dropped before)."""
    out, total = [], 0
    for p in range(lo.shape[1]):
        out.append(count_vectors(lo[:, p], np.minimum(hi[:, p], n_cap), n_cap))
        total += len(out[-1])
        if total > max_configs:
            return None
    return out


#: Within a stage the tables give up this long (s) past their deadline: the stage loop's rate rule
#: (:func:`~autotune.tuner.bounds._clock.cannot_finish`) is checked between stages, but one stage
#: can take seconds (stage 0 of a pp 32 × vpp 4 × m 256 config: 330 configurations, 1.4 s, past
#: a 1 s deadline); a strict check inside the stage cut the TeleChat2 example's time-left proof
#: (6,431 ms, it ended 0.1 s past its deadline) in two runs of three.
IN_STAGE_GRACE_S = 0.3

def _stage_tables(problem: Problem, V: int, upper_ms: float, max_configs: int, deadline: float | None = None
                  ) -> tuple[list[_Stage], int, IntegerSetup, LayerTypes] | None | bool:
    """Per stage the configurations that can still beat ``upper_ms`` with their per-path bounds
    (least replay that fits; per path its least weighted replay), and the number of
    configurations enumerated, the shared setup (:func:`autotune.tuner.bounds._relax.integer_setup`) and the
    layer types (:class:`autotune.tuner.bounds._kinds.LayerTypes`); None
    when a work cap or the applicability check fails, or when no stage has a no-skip path (a stage
    may be left with no configuration: nothing beats upper); False when ``deadline``
    (time.monotonic()) cut it: past it, or past it at its rate so far (``cannot_finish``)."""
    su = integer_setup(problem, V)
    if su is None:
        return None
    cs, lay, p2p = su.cs, su.layer, su.p2p_ms
    end_f, end_b, end_a, const_static = su.end_fwd_ms, su.end_bwd_ms, su.end_act_mib, su.const_static_mib
    P, N, m, k = problem.P, problem.N, problem.m, cs.k
    lo, hi = problem.bounds(V)
    fb0 = lay.fwd_ms + lay.bwd_ms
    w_const = N * fb0 + float(end_f.sum() + end_b.sum())  # W without replay (ms)
    n_cap = N if fb0 <= 0 else min(N, int(upper_ms / (m * fb0)) + 1)  # a stage's own ops path
    all_vecs = _count_vectors_capped(lo, hi, n_cap, max_configs)
    if all_vecs is None:
        return None
    total = sum(len(v) for v in all_vecs)
    fam = one_stay_counts(cs, deadline)
    if fam is None:
        return False
    types = LayerTypes(problem, V)
    tf = TypedFronts(types, problem)
    wf = _WeightedFronts(tf)
    stages = []
    least_work = 0
    any_path = False
    t0 = time.monotonic()
    for p in range(P):
        if cannot_finish(t0, p, P, deadline):  # past the deadline, or will be at this rate
            return False
        keep, skip = _families(fam[p], p, P, V, p2p, end_f)
        nv = np.asarray(all_vecs[p], dtype=np.float64).reshape(-1, V)  # [M, V]
        tn = types.typed(p, nv)  # [M, V, T]
        F = tn @ types.fwd_ms + end_f[:, p]
        B = tn @ types.bwd_ms + end_b[:, p]
        if keep:
            any_path = True
            A_f = np.array([a for a, _, _ in keep])  # [Q, V]
            A = np.array([b for _, b, _ in keep])
            K = np.array([c for _, _, c in keep])
            E0 = F @ A_f.T + B @ A.T + K[None, :]  # [M, Q]
            ok = w_const + E0.max(axis=1) <= upper_ms * (1 + 1e-9)
        else:
            A = np.zeros((1, V))
            E0 = np.full((nv.shape[0], 1), -np.inf)
            ok = np.ones(nv.shape[0], dtype=bool)
        jr = [(w, -1) for w in undominated(np.asarray(cs.mem_fwd[p]).reshape(-1, V).astype(np.float64)) / k]
        bv, bc = cs.mem_bwd[p]
        for c_ in (np.unique(bc) if bv.size else []):
            jr += [(w, int(c_)) for w in undominated(bv[bc == c_].reshape(-1, V).astype(np.float64)) / k]
        jrows = np.array([w for w, _ in jr]).reshape(-1, V)
        jchunk = np.array([c_ for _, c_ in jr], dtype=np.int64)
        # the first pass: per row only the head's / tail's workspace (the layers' in the joint check)
        rows, ws = live_rows(cs, p, su.end_ws_mib[:, p])
        free = hbm_cap(problem.hbm_mib) - const_static[p] - (tn @ types.static_mib).sum(axis=1)  # [M] MiB
        jroom = free[:, None] - (jrows @ end_a[:, p])[None, :]  # [M, Rj]
        room = free[:, None] - (rows @ end_a[:, p] + ws)[None, :]  # [M, R]
        e = np.zeros(nv.shape[0])
        E = E0.max(axis=1)
        Es = np.full(nv.shape[0], -np.inf)
        if skip:
            S_f = np.array([a for a, _, _ in skip])
            S_b = np.array([b for _, b, _ in skip])
            E0s = F @ S_f.T + B @ S_b.T + np.array([c for _, _, c in skip])[None, :]
        groups, inv = np.unique(np.round(np.concatenate([A] + ([S_b] if skip else [])), 9), axis=0,
                                return_inverse=True)
        inv = inv.reshape(-1)
        if ok.any():  # every configuration's least replay over its rows in one batch
            idx = np.flatnonzero(ok)
            e[idx] = tf.worst_rows(tn[idx], rows, room[idx])
        for i in np.flatnonzero(ok):
            if deadline is not None and time.monotonic() > deadline + IN_STAGE_GRACE_S:
                return False  # stage 0's 330 configurations took 1.4 s on pp 32 × vpp 4 × m 256
            cnt = tuple(tuple(int(x) for x in c) for c in tn[i])
            if not np.isfinite(e[i]) or not keep:
                continue
            if least_work + len(rows) * len(groups) > LEAST_WORK:
                # work cap: the replay weighted by each path's least (cb − 1) on the stage
                add = np.concatenate([A] + ([S_b] if skip else [])).min(axis=1) * e[i]
            else:
                least_work += len(rows) * len(groups)
                # per path: its least weighted replay Σ_v (cb_v − 1)·x_v over the choices that fit
                add = np.array([max(wf.least(cnt, tuple(float(x) for x in w), tuple(float(x) for x in a), r)
                                    for w, r in zip(rows, room[i])) for a in groups])[inv]
            E[i] = float((E0[i] + add[:A.shape[0]]).max())
            if skip:
                Es[i] = float((E0s[i] + add[A.shape[0]:]).max())
        ok &= np.isfinite(e)
        idx = np.flatnonzero(ok)
        stages.append(_Stage(nv[idx], F[idx], B[idx], e[idx], E[idx], E0[idx], A, rows, room[idx], Es[idx],
                             jrows, jchunk, jroom[idx], su.end_ws_mib[:, p], tn[idx]))
    if not any_path:
        return None
    return stages, total, su, types


def stage_tables(problem: Problem, V: int, upper_ms: float, max_configs: int = MAX_CONFIGS,
                 deadline: float | None = None) -> tuple[list[_Stage], int, IntegerSetup, LayerTypes] | None:
    """:func:`_stage_tables`, memoised on the problem's ``fit_cache`` by (V, upper_ms, max_configs):
    the device DP and the wrap-pair DP (:mod:`autotune.tuner.bounds.wrap_dp`) of one bound pass
    build the same tables once (~2 CPU s on P16 V2 m64 L128). The tables are never modified by
    their users. Tables a ``deadline`` cut are not memoised."""
    key = ("device_dp.stage_tables", int(V), float(upper_ms), int(max_configs))
    cache = problem.fit_cache
    if key not in cache:
        out = _stage_tables(problem, V, float(upper_ms), max_configs, deadline)
        if out is False:
            return None
        cache[key] = out
    return cache[key]


def _counts(st: _Stage, j: int) -> tuple[tuple[int, ...], ...]:
    """Configuration j's layer type counts per chunk (hashable)."""
    return tuple(tuple(int(x) for x in c) for c in st.tn[j])


def _thresholds(stages: list[_DPRows]) -> np.ndarray:
    """The distinct finite E values of all configurations (ms): the thresholds ε to try."""
    finite = [s.E[np.isfinite(s.E)] for s in stages]
    return np.unique(np.concatenate(finite)) if finite else np.zeros(0)


def _tables(st: _Stage, eps: np.ndarray, N: int) -> dict[int, np.ndarray]:
    """Per layer count l: the least cost of an l-layer configuration allowed at each threshold
    (E <= eps[k]): float [len(eps)]."""
    L, c, first = st.layers, st.cost, st.first(eps)
    return {int(l): _cheapest_allowed(first[L == l], c[L == l], eps.size) for l in np.unique(L)}


def _knapsack(stages: list[_DPRows], eps: np.ndarray, N: int) -> list[np.ndarray]:
    """D[p] float [len(eps), N + 1]: least Σ cost over stages < p placing s layers with every E
    <= eps[k] (p = 0..P)."""
    D = np.full((eps.size, N + 1), np.inf)
    D[:, 0] = 0.0
    out = [D]
    for st in stages:
        new = np.full_like(D, np.inf)
        for l, g in _tables(st, eps, N).items():
            np.minimum(new[:, l:], D[:, :N + 1 - l] + g[:, None], out=new[:, l:])
        D = new
        out.append(D)
    return out


def _final(stages: list[_DPRows], eps: np.ndarray, N: int, f: float, work_kn: int | None = None) -> np.ndarray:
    """min over layouts of W + max(ε, E of the last stage's skip paths) with every no-skip E <=
    eps[k], per k: float [len(eps)]. Without skip paths it is the knapsack's D[k, N] + eps[k]
    (exact: a layout's max no-skip E is one of the eps); with them the stages before the last
    also track c, the last chunk's layers placed, and the last stage adds max(eps[k], Es − f·c),
    so the minimum over k is exact for the family (at the k of a layout's max no-skip E).

    Each k's value depends on eps[k] alone, so a subset of the thresholds gets its own values;
    ``work_kn`` (default len(eps)): the threshold count the work cap :data:`FINAL_WORK` is judged
    on (the whole set's, when ``eps`` is a subset of it: the same method for every subset)."""
    last = stages[-1]
    groups = sum(len(set(zip(st.layers.tolist(), np.rint(st.n[:, -1]).astype(np.int64).tolist())))
                 for st in stages[:-1])
    kn_work = eps.size if work_kn is None else work_kn
    if not np.isfinite(last.Es).any() or f <= 0 or kn_work * (N + 1) ** 2 * groups > FINAL_WORK:
        return _knapsack(stages, eps, N)[-1][:, N] + eps
    Kn = eps.size
    V = last.n.shape[1]
    D = np.full((Kn, N + 1, N + 1), np.inf)  # [k, layers placed, last-chunk layers placed]
    D[:, 0, 0] = 0.0
    for st in stages[:-1]:
        L, c, first = st.layers, st.cost, st.first(eps)
        nl = np.rint(st.n[:, V - 1]).astype(np.int64)
        new = np.full_like(D, np.inf)
        for l, q in set(zip(L.tolist(), nl.tolist())):
            sel = (L == l) & (nl == q)
            g = _cheapest_allowed(first[sel], c[sel], Kn)
            np.minimum(new[:, l:, q:], D[:, :N + 1 - l, :N + 1 - q] + g[:, None, None], out=new[:, l:, q:])
        D = new
    cidx = np.arange(N + 1)
    suffix = np.minimum.accumulate(D[:, :, ::-1], axis=2)[:, :, ::-1]  # min over c' >= c
    prefix = np.minimum.accumulate(D - f * cidx[None, None, :], axis=2)  # min over c' <= c of D − f·c'
    out = np.full(Kn, np.inf)
    first = last.first(eps)
    for i in range(last.n.shape[0]):
        s = N - int(last.layers[i])
        if s < 0 or first[i] >= Kn:
            continue
        ks = np.arange(first[i], Kn)
        if np.isfinite(last.Es[i]):
            # c >= cstar: the skip paths are within eps[k]; c < cstar: they set the max
            cstar = np.ceil((last.Es[i] - eps[ks]) / f - 1e-9).astype(np.int64)
            lo_ = np.clip(cstar, 0, N + 1)
            a = np.where(lo_ <= N, suffix[ks, s, np.minimum(lo_, N)] + eps[ks], np.inf)
            hi_ = np.clip(cstar - 1, -1, N)
            b = np.where(hi_ >= 0, prefix[ks, s, np.maximum(hi_, 0)] + last.Es[i], np.inf)
            v = np.minimum(a, b)
        else:
            v = suffix[ks, s, 0] + eps[ks]
        out[ks] = np.minimum(out[ks], v + last.cost[i])
    return out


#: :func:`_final_min` prices every threshold at once below this many ...
PRUNE_MIN_THRESHOLDS = 512
#: ... else first this many, evenly spaced, to find the thresholds that can hold the minimum.
PRUNE_SAMPLES = 64


def _candidates(stages: list[_DPRows], eps: np.ndarray, N: int, value) -> np.ndarray:
    """int [k]: the thresholds (indices into the sorted ``eps``) that can hold the least of
    ``value`` (a function of threshold indices, float [len(idx)] ms, each >= W(eps[k]) + eps[k]).

    W(ε), the least Σ cost of a layout whose every no-skip E is <= ε, is non-increasing in ε and
    >= W∞, the least Σ cost of any layout (the largest threshold admits every configuration). So
    after :data:`PRUNE_SAMPLES` evenly spaced thresholds give a value U, a threshold with W∞ +
    eps[k] > U cannot hold the minimum, nor can one at or below a sampled threshold that admits no
    layout (fewer configurations are allowed there). Below :data:`PRUNE_MIN_THRESHOLDS` thresholds
    every one is kept; empty when no sampled threshold admits a layout (then none does)."""
    Kn = eps.size
    if Kn < PRUNE_MIN_THRESHOLDS:
        return np.arange(Kn)
    s = np.unique(np.linspace(0, Kn - 1, PRUNE_SAMPLES).round().astype(np.int64))
    vs = value(s)
    fin = np.isfinite(vs)
    if not fin.any():  # the largest threshold admits every configuration: no layout at all
        return np.zeros(0, dtype=np.int64)
    U = float(vs.min())
    j = int(np.argmax(fin))
    lo = int(s[j - 1]) + 1 if j > 0 else 0  # thresholds up to an infeasible sample admit no layout
    w_inf = float(_knapsack(stages, eps[-1:], N)[-1][0, N])
    return lo + np.flatnonzero(w_inf + eps[lo:] <= U + 1e-12 * (1.0 + abs(U)))


def _final_min(stages: list[_DPRows], eps: np.ndarray, N: int, f: float) -> float:
    """min over k of :func:`_final` (ms; +inf when no threshold admits a layout), pricing only the
    thresholds that can hold it (:func:`_candidates`; :func:`_final` at eps[k] is >= W(eps[k]) +
    eps[k]). Each value depends on its threshold alone, so the minimum is the one pricing all of
    them gives. On ``benchmarks/scaling.py``'s pp 32 × vpp 4 × m 256 MoE problem the knapsack over
    every threshold took ~5 CPU s."""
    Kn = eps.size
    keep = _candidates(stages, eps, N, lambda idx: _final(stages, eps[idx], N, f, work_kn=Kn))
    val = _final(stages, eps[keep], N, f, work_kn=Kn) if keep.size else np.zeros(0)
    return float(val.min()) if np.isfinite(val).any() else float("inf")


def _through(stages: list[_Stage], eps: np.ndarray, N: int) -> list[np.ndarray]:
    """Per stage and configuration: a lower bound on the least W + ε of any layout that uses it
    (ms). Past :data:`THROUGH_THRESHOLDS` thresholds each configuration's E is rounded down to a
    grid of that many of them (E only falls, so every value stays <= the exact one: pruning with
    it drops no configuration the exact values would keep); the cost is O(thresholds · N²) per
    stage."""
    if eps.size > THROUGH_THRESHOLDS:
        eps = eps[np.unique(np.linspace(0, eps.size - 1, THROUGH_THRESHOLDS).astype(np.int64))]
        stages = [st.take(np.arange(st.n.shape[0]), E=np.where(
            np.isfinite(st.E), eps[np.clip(np.searchsorted(eps, st.E, side="right") - 1, 0, eps.size - 1)], st.E))
            for st in stages]
    fwd = _knapsack(stages, eps, N)
    bwd = _knapsack(stages[::-1], eps, N)[::-1]  # bwd[p]: stages >= p
    out = []
    for p, st in enumerate(stages):
        A, Bk = fwd[p], bwd[p + 1]
        comb = np.full((eps.size, N + 1), np.inf)  # [k, l]: best rest when stage p holds l
        for s in range(N + 1):
            np.minimum(comb[:, :N - s + 1], A[:, s:s + 1] + Bk[:, N - s::-1], out=comb[:, :N - s + 1])
        tail = np.minimum.accumulate((comb + eps[:, None])[::-1], axis=0)[::-1]  # min over k' >= k
        first = np.minimum(st.first(eps), eps.size - 1)
        out.append(tail[first, st.layers] + st.cost)
    return out


def _priced(stages: list[_Stage], cache: dict[tuple[int, int], np.ndarray],
            keep: list[np.ndarray] | None = None) -> tuple[list[_Rows], list[np.ndarray]]:
    """The stages' DP rows, in configuration order, of configurations ``keep`` (per stage their
    indices; None: all), each priced one (``cache``: (stage, configuration) -> its (replay, E)
    variants [K, 2]) with its variants in place of its per-path row (so that pricing which leaves
    every row as it was leaves the DP's best layout as it was). Returns (rows per stage, per stage
    the configuration index of each row)."""
    out, owners = [], []
    for p, st in enumerate(stages):
        M = st.n.shape[0]
        if keep is None:
            count = np.ones(M, dtype=np.int64)
        else:
            count = np.zeros(M, dtype=np.int64)
            count[keep[p]] = 1
        done = sorted(j for q, j in cache if q == p and count[j])
        count[done] = [cache[(p, j)].shape[0] for j in done]
        idx = np.repeat(np.arange(M), count)
        ee, EE = st.e[idx], st.E[idx]
        start = np.cumsum(count) - count
        for j in done:
            ee[start[j]:start[j] + count[j]] = cache[(p, j)][:, 0]
            EE[start[j]:start[j] + count[j]] = cache[(p, j)][:, 1]
        out.append(st.take(idx, ee, EE))
        owners.append(idx)
    return out, owners


def _best_layout(stages: list[_DPRows], owners: list[np.ndarray], N: int
                 ) -> tuple[list[tuple[int, int]], float, int]:
    """A layout of least W + ε over every threshold ε (the one-dimensional DP, no skipping paths):
    its (stage, configuration) pairs (empty when none exists), that least value (ms; +inf: none)
    and the knapsack cells computed (a work measure). The least value is found over the
    thresholds that can hold it (:func:`_candidates`, as :func:`_final_min`), then the knapsack at
    that threshold alone is walked back to the configurations (``owners``: each row's
    configuration)."""
    eps = _thresholds(stages)
    if eps.size == 0:
        return [], float("inf"), 0
    groups = sum(int(np.unique(st.layers).size) for st in stages)
    calls = []

    def value(idx: np.ndarray) -> np.ndarray:
        calls.append(idx.size)
        return _knapsack(stages, eps[idx], N)[-1][:, N] + eps[idx]

    keep = _candidates(stages, eps, N, value)
    vals = value(keep) if keep.size else np.zeros(0)
    cells = (sum(calls) + 1) * (N + 1) * groups
    if not np.isfinite(vals).any():
        return [], float("inf"), cells
    k = int(keep[int(np.argmin(vals))])
    D = _knapsack(stages, eps[k:k + 1], N)
    used, left = [], N
    for p in range(len(stages) - 1, -1, -1):
        st = stages[p]
        L, c = st.layers, st.cost
        target = float(D[p + 1][0, left])
        ok = np.flatnonzero((st.first(eps[k:k + 1]) == 0) & (L <= left))
        hit = ok[np.abs(D[p][0, left - L[ok]] + c[ok] - target) <= 1e-9 * max(1.0, abs(target))]
        i = int(hit[0])
        used.append((p, int(owners[p][i])))
        left -= int(L[i])
    return used[::-1], float(vals.min()), cells


def _price(jo: ChunkOptions, stages: list[_Stage], cache: dict[tuple[int, int], np.ndarray],
           todo: list[tuple[int, int]], size: dict[tuple[int, int], int]) -> None:
    """Price configurations ``todo`` ((stage, configuration) pairs) jointly into ``cache``: their
    (replay, E) variants, each at least the per-path pair (kept as a floor; no variant: nothing
    fits every vector at once). One over :data:`MAX_JOINT` combinations (``size``), or whose front
    was not built, keeps its per-path pair."""
    for p, j in todo:
        st = stages[p]
        floor = np.array([[st.e[j], st.E[j]]])
        if size[(p, j)] > MAX_JOINT or not np.isfinite(st.E[j]):
            cache[(p, j)] = floor
        else:
            cache[(p, j)] = np.maximum(_joint(jo, _counts(st, j), st, j), floor)


def _joint_by_target(stages: list[_Stage], jo: ChunkOptions, cache: dict[tuple[int, int], np.ndarray],
                     best: float, upper: float, N: int, joint_work: int, deadline: float | None,
                     solve) -> tuple[float, int, int, bool]:
    """The joint pass against a rising target τ: a configuration whose least through-value (the
    best layout that uses it, per-path bounds) is above τ is dropped — every layout using it is
    above τ — and the survivors are priced (:func:`_price`). The result min(τ, DP over survivors)
    is a bound; while the DP reaches τ, τ rises (more survivors) until the work cap, the deadline
    or the incumbent ``upper``. Returns (bound ms, thresholds of the last DP, combinations
    priced, whether it converged: its DP's optimum fell below τ, so it is the optimum with every
    configuration priced, and no other pricing can raise it)."""
    eps = _thresholds(stages)
    thr = _through(stages, eps, N)
    work, kn = 0, eps.size
    step = max(upper - best, 1e-9) / 16
    tau = result = best
    while tau < upper:
        if deadline is not None and time.monotonic() > deadline:
            break  # anytime: ``result`` is proven
        tau = min(upper, tau + step)
        step *= 2
        surv = [np.flatnonzero(t <= tau * (1 + 1e-12)) for t in thr]
        need = [(p, int(j)) for p, i in enumerate(surv) for j in i if (p, int(j)) not in cache]
        size = {(p, j): jo.size(_counts(stages[p], j)) for p, j in need}
        # a configuration whose front was not built (one stage, over its row cap) costs nothing
        # here: it keeps its per-path bound
        cost = sum(z for z in size.values() if z != TOO_LARGE)
        if work + cost > joint_work:
            break
        work += cost
        _price(jo, stages, cache, need, size)
        val, kn = solve(_priced(stages, cache, surv)[0])
        result = max(result, min(val, tau))
        if val < tau:
            return result, kn, work, True  # the joint relaxation's optimum: no larger τ can help
    return result, kn, work, False


def _joint_lazily(stages: list[_Stage], jo: ChunkOptions, cache: dict[tuple[int, int], np.ndarray], N: int,
                  joint_work: int, select_work: int, deadline: float | None, solve) -> tuple[float, int, int]:
    """The joint pass after :func:`_joint_by_target` stopped short of its optimum (a work cap, the
    deadline), from its cache, lazily: the one-dimensional DP's best layout (:func:`_best_layout`:
    every configuration, the priced ones with their variants) names one configuration per stage;
    those not priced yet are priced and the DP is solved again, until the best layout uses priced
    configurations only, a cap (``joint_work`` combinations, ``select_work`` knapsack cells),
    :data:`LAZY_PATIENCE` rounds without a rise or the deadline. Every unpriced configuration's
    per-path row is a lower bound of its variants, so at convergence the one-dimensional DP's
    optimum is the one with every configuration priced (TeleChat2 96 layers pp8 vpp4: 165 of its
    4,199 configurations, where the target pass prices 1,336 with 55.7 M combinations). The value
    returned is the DP over the rows so far with the last stage's skipping paths (``solve``): a
    bound at any stop, at least the one-dimensional value, and (rarely: 1 of 1,800 random draws)
    below the value with every configuration priced, whose best layout may differ there. Past the
    deadline, the largest one-dimensional value so far. Returns (bound ms, thresholds of its DP,
    combinations priced: those of configurations within :data:`MAX_JOINT`, counted apart from the
    target pass's, which counts the larger ones too)."""
    work = cells = idle = 0
    top = -np.inf
    while True:
        if deadline is not None and time.monotonic() > deadline:
            return top, 0, work  # anytime: each round's one-dimensional DP is a bound
        cur, owners = _priced(stages, cache)
        used, value, c = _best_layout(cur, owners, N)
        cells += c
        idle = 0 if value > top * (1 + 1e-12) else idle + 1
        top = max(top, value)
        todo = [(p, j) for p, j in used if (p, j) not in cache]
        if not todo or cells > select_work or idle > LAZY_PATIENCE:
            break
        size = {(p, j): jo.size(_counts(stages[p], j)) for p, j in todo}
        # one over MAX_JOINT (or whose front was not built: one stage, over its row cap) costs
        # nothing: it keeps its per-path bound
        cost = sum(z for z in size.values() if z <= MAX_JOINT)
        if work + cost > joint_work:
            break
        work += cost
        _price(jo, stages, cache, todo, size)
    val, kn = solve(_priced(stages, cache)[0])
    return val, kn, work


def device_dp_bound(problem: Problem, V: int, *, upper_ms: float, max_configs: int = MAX_CONFIGS,
                    joint_work: int = JOINT_WORK, select_work: int = SELECT_WORK,
                    deadline: float | None = None) -> DeviceDPBound | None:
    """Lower bound (ms) on the step time of every memory-feasible layout with pp_interleave_num V
    whose step time is <= ``upper_ms`` (a feasible step time: the result is min(bound, upper_ms),
    so it is a bound on the optimum whenever some layout reaches ``upper_ms``).

    See the module docstring for the model. Returns None where it does not apply (V = 1, a
    schedule that splits B/W, non-default pipeline positions, no finite ``upper_ms``, no no-skip
    path) or when the stage configurations would exceed ``max_configs`` (a work cap). Past
    ``deadline`` (time.monotonic()) the stage tables stop (None) and the joint pass keeps the
    bound it has proven.
    """
    if upper_ms is None or not np.isfinite(upper_ms):
        return None
    upper = float(upper_ms)
    out = stage_tables(problem, V, upper, max_configs, deadline)
    if out is None:
        return None
    stages, total, su, types = out
    N = problem.N

    def solve(sts: list[_DPRows]) -> tuple[float, int]:
        if any(st.n.shape[0] == 0 for st in sts):
            return upper, 0
        eps = _thresholds(sts)
        if eps.size == 0:
            return upper, 0
        return _final_min(sts, eps, N, types.fwd_max_ms), eps.size  # Σ cost is W

    best, kn = solve(stages)
    if best >= upper or joint_work <= 0:
        return DeviceDPBound(min(best, upper), total, kn)
    jo = chunk_options(problem, types)
    cache: dict[tuple[int, int], np.ndarray] = {}
    result, kn, work, exact = _joint_by_target(stages, jo, cache, best, upper, N, joint_work, deadline, solve)
    work_l = 0
    if not exact and result < upper:
        lazy, kl, work_l = _joint_lazily(stages, jo, cache, N, joint_work, select_work, deadline, solve)
        if lazy > result:
            result, kn = lazy, kl
    return DeviceDPBound(min(result, upper), total, kn, len(cache), work + work_l)


@dataclass(frozen=True)
class DeviceDP:
    """:func:`device_dp_bound` as a :class:`~autotune.tuner.bounds.LowerBound` (V > 1, schedules
    with whole backward ops and chunk-major positions; needs an incumbent ``ctx.upper_ms``)."""

    name: str = "device DP"

    def applies(self, problem: Problem, V: int) -> bool:
        return integer_setup(problem, V) is not None

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        dd = device_dp_bound(problem, V, upper_ms=ctx.upper_ms, deadline=ctx.deadline)
        if dd is None:
            return None
        return BoundOutcome(dd.bound_ms, None, {"configs": dd.configs})
