"""Layer kinds by position in the device DP (pure numpy, no Optuna; issue 17).

A profile's layer kinds are fixed by position (its ``layer_kinds`` runs: DeepSeek-V3's first
layers are dense, the rest MoE, each MoE layer holding 4,407 MiB of static memory against the
dense layer's 939). Mini-stages fill the layers in pipeline-position order
(:func:`autotune.cost.inputs.first_layers`), and every mini-stage holds at least its lower bound
lo (:meth:`autotune.tuner.problem.Problem.bounds`). So layer j of mini-stage (v, p) holding n
layers sits at a global index in [e + j, h − n + j], where e is the sum of lo over the mini-stages
before it in pipeline order and h is N minus the sum over those after it. A layer whose window
holds one kind *is* that kind; any other layer is relaxed to the componentwise minimum over the
kinds present (:func:`autotune.tuner.bounds._relax.relaxed_layer`), as every layer was before.

A stage configuration then counts its layers per chunk and **type**: type 0 is the relaxed layer,
type 1 + i the i-th kind present, exactly. With one kind present there is one type (the relaxed
layer is then exact, nothing changes). Every real layout's layer is >= its type's layer in every
component (time, static, per-class activation, replay, static change, workspace), so a bound
computed on types stays a proof.
"""

from __future__ import annotations

import itertools

import numpy as np

from autotune.cost.dominance import pareto_mask
from autotune.cost.schedules import get_schedule
from autotune.tuner.bounds._relax import RelaxedLayer, RowFrontiers, min_extra_ms, pareto_front, relaxed_layer
from autotune.tuner.problem import Problem


class LayerTypes:
    """The layer types of pp_interleave_num V (module docstring): ``layers`` (type -> relaxed
    layer), per-type forward / backward ms and static MiB [T], and :meth:`typed` counts."""

    def __init__(self, problem: Problem, V: int) -> None:
        pa = problem.pa
        ks = np.flatnonzero(pa.kind_prefix[:, -1] > 0)
        self.layers: tuple[RelaxedLayer, ...] = (relaxed_layer(problem),)
        if ks.size > 1:
            self.layers += tuple(relaxed_layer(problem, ks[i:i + 1]) for i in range(ks.size))
        self.T = len(self.layers)
        self.fwd_ms = np.array([lay.fwd_ms for lay in self.layers])
        self.bwd_ms = np.array([lay.bwd_ms for lay in self.layers])
        self.static_mib = np.array([lay.static_mib for lay in self.layers])
        self._pref = pa.kind_prefix[ks].astype(np.int64)  # [K', N + 1]
        N = problem.N
        lo = problem.bounds(V)[0].reshape(-1)
        pos = np.asarray(get_schedule(problem.schedule).virtual_position(problem.P, V)).reshape(-1)
        order = np.argsort(pos, kind="stable")
        before = np.empty_like(lo)
        before[order] = np.cumsum(lo[order]) - lo[order]
        self._e = before.reshape(V, problem.P)  # least first index of each mini-stage
        self._h = (N - (lo.sum() - before - lo)).reshape(V, problem.P)  # least end beyond it
        self._N = N
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}

    def chunk(self, v: int, p: int, n: int) -> np.ndarray:
        """int [T]: how many of the n layers of mini-stage (v, p) have each type."""
        key = (v, p, n)
        out = self._cache.get(key)
        if out is None:
            out = np.zeros(self.T, dtype=np.int64)
            if self.T == 1:
                out[0] = n
            else:
                j = np.arange(n)
                a = np.clip(self._e[v, p] + j, 0, self._N)
                b = np.clip(self._h[v, p] - n + j + 1, 0, self._N)
                have = (self._pref[:, np.maximum(a, b)] - self._pref[:, a]) > 0  # [K', n]
                one = have.sum(axis=0) == 1
                t = np.where(one, 1 + np.argmax(have, axis=0), 0)
                out += np.bincount(t, minlength=self.T)
            self._cache[key] = out
        return out

    def typed(self, p: int, nv: np.ndarray) -> np.ndarray:
        """int [M, V, T]: the type counts of stage p's configurations ``nv`` (int-valued [M, V])."""
        n = np.rint(nv).astype(np.int64)
        if self.T == 1:
            return n[:, :, None]
        out = np.zeros(n.shape + (self.T,), dtype=np.int64)
        for v in range(n.shape[1]):
            uniq, inv = np.unique(n[:, v], return_inverse=True)
            out[:, v] = np.stack([self.chunk(v, p, int(u)) for u in uniq])[inv.reshape(-1)]
        return out

    @property
    def fwd_max_ms(self) -> float:
        """The largest forward ms of a type (a skipped layer's forward is at most it)."""
        return float(self.fwd_ms.max())


class TypedFronts:
    """Least replay of a stage's typed layers against memory rows (one
    :class:`~autotune.tuner.bounds._relax.RowFrontiers` per type); with one type exactly
    :func:`~autotune.tuner.bounds._relax.min_extra_ms`."""

    def __init__(self, types: LayerTypes) -> None:
        self.fr = [RowFrontiers(lay) for lay in types.layers]
        self.T = types.T
        self.pre: dict[tuple, np.ndarray] = {}

    def get(self, t: int, n: int, w: float) -> np.ndarray:
        """Front (memory MiB, replay ms) of n layers of type t against the coordinate w·act + δ."""
        return self.fr[t].get(n, w)

    def _prefix(self, cols: tuple[tuple[int, int, float], ...]) -> np.ndarray:
        if cols not in self.pre:
            if not cols:
                f = np.zeros((1, 2))
            else:
                acc = self._prefix(cols[:-1])
                f = pareto_front((acc[:, None, :] + self.get(*cols[-1])[None, :, :]).reshape(-1, 2))
            self.pre[cols] = f
        return self.pre[cols]

    def min_extra(self, tn: tuple[tuple[int, ...], ...], w: np.ndarray, budget: float) -> float:
        """min Σ replay (ms) over per-layer classes with Σ_v Σ_t (w_v·act + δ) <= budget (MiB);
        ``tn`` the type counts per chunk (+inf when nothing fits)."""
        if self.T == 1:
            return min_extra_ms(self.fr[0], tuple(c[0] for c in tn), w, budget)
        cols = tuple((t, int(n), float(wv)) for c, wv in zip(tn, w) for t, n in enumerate(c) if n)
        if not cols:
            return 0.0 if budget >= -1e-9 else float("inf")
        acc = self._prefix(cols[:-1])
        last = self.get(*cols[-1])
        i = np.searchsorted(last[:, 0], budget - acc[:, 0] + 1e-9, side="right") - 1
        ok = i >= 0
        return float((acc[ok, 1] + last[i[ok], 1]).min()) if ok.any() else float("inf")


def class_counts(n: int, C: int) -> np.ndarray:
    """int [K, C]: how many of n layers take each of C classes, every multiset once (K = C(n + C − 1,
    C − 1); stars and bars: the C − 1 bars' places among n + C − 1)."""
    if C == 1:
        return np.array([[n]], dtype=np.int64)
    bars = np.array(list(itertools.combinations(range(n + C - 1), C - 1)), dtype=np.int64)
    edges = np.concatenate([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), n + C - 1)], axis=1)
    return np.diff(edges, axis=1) - 1


class ChunkOptions:
    """Per chunk type counts: the class multisets of its layers not dominated in (activation MiB
    kept per micro-batch, static delta MiB, replay ms, backward workspace MiB — the largest of its
    classes'): float [K, 4] (memoised)."""

    def __init__(self, types: LayerTypes) -> None:
        self.layers = types.layers
        self.one: dict[tuple[int, int], np.ndarray] = {}
        self.cache: dict[tuple[int, ...], np.ndarray] = {}

    def _single(self, t: int, n: int) -> np.ndarray:
        if (t, n) not in self.one:
            lay = self.layers[t]
            per = np.stack([lay.act_mib, lay.sdelta_mib, lay.extra_ms], axis=1)  # [C, 3]
            if n:
                cnt = class_counts(n, per.shape[0])  # [K, C]: every multiset of n classes
                ws = np.where(cnt > 0, lay.ws_mib[None, :], -np.inf).max(axis=1)
                arr = np.concatenate([cnt @ per, ws[:, None]], axis=1)
            else:
                arr = np.zeros((1, 4))
            self.one[(t, n)] = arr[pareto_mask(arr, tol=1e-9, keep_ties=True)]
        return self.one[(t, n)]

    def get(self, counts: tuple[int, ...]) -> np.ndarray:
        """The undominated options of a chunk with ``counts`` layers of each type."""
        if counts not in self.cache:
            acc = np.zeros((1, 4))
            for t, n in enumerate(counts):
                if n or t == 0:
                    g = self._single(t, int(n))
                    acc = np.concatenate([(acc[:, None, :3] + g[None, :, :3]).reshape(-1, 3),
                                          np.maximum(acc[:, None, 3:], g[None, :, 3:]).reshape(-1, 1)], axis=1)
                    acc = acc[pareto_mask(acc, tol=1e-9, keep_ties=True)]
            self.cache[counts] = acc
        return self.cache[counts]

    def size(self, tn: tuple[tuple[int, ...], ...]) -> int:
        """Combinations of a stage configuration's chunks (product of their option counts)."""
        return int(np.prod([self.get(c).shape[0] for c in tn]))
