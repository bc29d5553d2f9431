"""Per-mini-stage costs from a profile and a layout (pure numpy, batched).

Shapes: B = batch of candidate layouts, V = interleave chunks, P = pipeline stages, K = layer kinds,
C = 5 recompute classes (none, select, comm, both, full; :data:`RECOMPUTE_CLASSES`).

Within mini-stage (v, p) holding n layers with counts r (full), s (select), c (comm), the layer at
position k is: full if k < r; otherwise select if k < s and comm if k < c ("the first r layers of
each mini-stage", MindFormers LayerSetting; full > select/comm precedence). So the classes occupy
contiguous position ranges: full [0, r), both [r, lo), select-only or comm-only [lo, hi), none
[hi, n) with lo = min(s', c'), hi = max(s', c') and s', c' clipped to [r, n].
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple

import numpy as np

from autotune.profile.schema import RECOMPUTE_CLASSES, ModelProfile

NONE, SELECT, COMM, BOTH, FULL = range(5)


class EndCosts(NamedTuple):
    """Per-micro-batch costs of the head (embedding, pipeline position 0) or the tail (final norm +
    LM head + loss, last position): forward / backward ms, activation kept and static MiB, and the
    backward's transient workspace MiB."""

    fwd_ms: float
    bwd_ms: float
    act_mib: float
    static_mib: float
    ws_mib: float


def _op_tuple(ops: dict | None) -> tuple | None:
    if ops is None:
        return None
    return tuple((name, float(o.act_mib), float(o.extra_ms)) for name, o in ops.items())


@dataclass(frozen=True)
class ProfileArrays:
    """A :class:`ModelProfile` as arrays (built once per search; see module docstring for shapes).

    Attributes:
        fwd_k [K], bwd_kc [K, C] (backward + recompute replay, ms), act_kc [K, C] (MiB kept per
        micro-batch), ws_kc [K, C] (transient MiB during backward), static_k [K] (MiB),
        kind_prefix [K, N+1] (number of layers of kind k among layers 0..i-1),
        head_* / tail_* scalars, stage_const_mib, p2p_ms; static_dc [K, C] (static MiB change per
        layer under each class, once per step: ``RecomputeOption.static_delta_mib``, None = 0);
        select_ops / comm_ops: per kind, None or a tuple of (op path, act MiB saved, replay ms)
        for per-op select recompute (:mod:`autotune.cost.select_ops`); bwd_w_k [K] (ms, the
        weight-gradient part W of the backward without recompute, ``bwd_w_frac · bwd_ms``; None =
        half of it), head_w_ms / tail_w_ms (the same for head and tail); cell_family: the
        :mod:`autotune.config.cells` family the op tables were named after (None = unknown).
    """

    fwd_k: np.ndarray
    bwd_kc: np.ndarray
    act_kc: np.ndarray
    ws_kc: np.ndarray
    static_k: np.ndarray
    kind_prefix: np.ndarray
    head: EndCosts
    tail: EndCosts
    stage_const_mib: float
    p2p_ms: float
    static_dc: np.ndarray | None = None
    select_ops: tuple = ()
    comm_ops: tuple = ()
    bwd_w_k: np.ndarray | None = None
    head_w_ms: float | None = None
    tail_w_ms: float | None = None
    cell_family: str | None = None
    _prefix: dict = field(default_factory=dict, repr=False, compare=False)

    def prefix(self) -> dict[str, np.ndarray]:
        """Per-layer prefix sums used by :func:`stage_costs` (built once, cached).

        Keys: ``fwd``, ``static``, ``bwd0`` (backward without recompute) float [N+1]; ``bwd`` and
        ``act`` float [C, N+1] (per recompute class: Σ over layers 0..i-1 of that class's value for
        the layer's kind); ``ws`` list of (kind, class, MiB) with MiB > 0, largest first.
        """
        if not self._prefix:
            kind = np.argmax(np.diff(self.kind_prefix, axis=1), axis=0) if self.num_layers else \
                np.zeros(0, dtype=np.int64)
            def cum(x: np.ndarray) -> np.ndarray:
                out = np.zeros(x.shape[:-1] + (x.shape[-1] + 1,))
                np.cumsum(x, axis=-1, out=out[..., 1:])
                return out
            self._prefix.update(
                fwd=cum(self.fwd_k[kind]), static=cum(self.static_k[kind]),
                bwd0=cum(self.bwd_kc[kind, NONE]), bwd=cum(self.bwd_kc[kind].T),
                bwd_w=cum(self.w_k()[kind]),
                act=cum(self.act_kc[kind].T),
                static_d=(cum(self.static_dc[kind].T) if self.static_dc is not None
                          and np.any(self.static_dc) else None),
                ws=sorted(((k, c, float(self.ws_kc[k, c])) for k in range(self.ws_kc.shape[0])
                           for c in range(5) if self.ws_kc[k, c] > 0), key=lambda x: -x[2]))
        return self._prefix

    def w_k(self) -> np.ndarray:
        """[K] weight-gradient ms per layer of each kind (``bwd_w_k``, default half the backward)."""
        return self.bwd_w_k if self.bwd_w_k is not None else 0.5 * self.bwd_kc[:, NONE]

    @property
    def num_layers(self) -> int:
        return int(self.kind_prefix.shape[1] - 1)

    @classmethod
    def from_profile(cls, profile: ModelProfile) -> "ProfileArrays":
        names = profile.kind_names()
        K = len(names)
        fwd = np.zeros(K)
        bwd = np.zeros((K, 5))
        act = np.zeros((K, 5))
        ws = np.zeros((K, 5))
        sdelta = np.zeros((K, 5))
        static = np.zeros(K)
        bwd_w = np.zeros(K)
        for i, name in enumerate(names):
            kind = profile.kinds[name]
            bwd_w[i] = kind.w_frac * kind.bwd_ms
            fwd[i] = kind.fwd_ms
            static[i] = kind.static_mib
            for ci, cname in enumerate(RECOMPUTE_CLASSES):
                opt = kind.option(cname)
                bwd[i, ci] = kind.bwd_ms + opt.extra_ms
                act[i, ci] = opt.act_mib
                ws[i, ci] = opt.workspace_mib
                sdelta[i, ci] = opt.static_delta_mib
        idx = profile.kind_index_per_layer()
        onehot = np.zeros((K, idx.size), dtype=np.int64)
        onehot[idx, np.arange(idx.size)] = 1
        prefix = np.concatenate([np.zeros((K, 1), dtype=np.int64), np.cumsum(onehot, axis=1)], axis=1)
        h, t = profile.head, profile.tail
        return cls(fwd, bwd, act, ws, static, prefix,
                   EndCosts(h.fwd_ms, h.bwd_ms, h.act_mib, h.static_mib, h.workspace_mib),
                   EndCosts(t.fwd_ms, t.bwd_ms, t.act_mib, t.static_mib, t.workspace_mib),
                   profile.stage_const_mib, profile.p2p_ms, sdelta,
                   tuple(_op_tuple(profile.kinds[nm].select_ops) for nm in names),
                   tuple(_op_tuple(profile.kinds[nm].comm_ops) for nm in names),
                   bwd_w, h.w_frac * h.bwd_ms, t.w_frac * t.bwd_ms,
                   profile.assumptions.get("cell_family"))

    @property
    def has_op_tables(self) -> bool:
        """True when some kind lists its operators (per-op select recompute applies)."""
        return any(t is not None for t in self.select_ops + self.comm_ops)


@dataclass(frozen=True)
class StageCosts:
    """Costs per mini-stage for a batch of layouts.

    Attributes:
        fwd_ms, bwd_ms, act_mib, ws_mib: [B, V, P] forward time, backward time incl. recompute
            replay, activation kept per micro-batch, transient MiB during a backward;
        static_mib: [B, P] weights + grads + optimizer + head/tail + stage constant per device;
        recompute_ms: [B, V, P] the replay part of bwd_ms (for reports);
        bwd_w_ms: [B, V, P] the weight-gradient part W of bwd_ms (never replay), used by schedules
            that split the backward; None = half of ``bwd_ms − recompute_ms``.
    """

    fwd_ms: np.ndarray
    bwd_ms: np.ndarray
    act_mib: np.ndarray
    ws_mib: np.ndarray
    static_mib: np.ndarray
    recompute_ms: np.ndarray
    bwd_w_ms: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> "StageCosts":
        """The layouts ``rows`` (an index or bool array over B) of the batch, every array alike."""
        return StageCosts(*(None if x is None else x[rows] for x in _arrays(self)))

    @staticmethod
    def concat(parts: "list[StageCosts]") -> "StageCosts":
        """The batches of ``parts`` one after another (their optional arrays all given or all None)."""
        cols = zip(*(_arrays(c) for c in parts))
        return StageCosts(*(None if col[0] is None else np.concatenate(col) for col in cols))


def _arrays(c: StageCosts) -> tuple:
    """A :class:`StageCosts`'s arrays in field order (no copies, unlike ``dataclasses.astuple``)."""
    return tuple(getattr(c, f.name) for f in fields(c))


def first_layers(layers: np.ndarray, pos: np.ndarray | None) -> np.ndarray:
    """Index of the first layer of every mini-stage, int [B, V, P], filling pipeline positions in
    order (chunk-major by default; ``pos`` [V, P] for V-shaped placements)."""
    B, V, P = layers.shape
    flat = layers.reshape(B, V * P)
    if pos is None:
        return (np.cumsum(flat, axis=1) - flat).reshape(B, V, P)
    perm = np.argsort(np.asarray(pos).reshape(-1), kind="stable")  # position -> flat index
    in_pos = flat[:, perm]
    st = np.cumsum(in_pos, axis=1) - in_pos
    out = np.empty_like(st)
    out[:, perm] = st
    return out.reshape(B, V, P)


def _class_bounds(layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                  com: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(r, lo, hi, select_only) [B, V, P]: positions full [0, r), both [r, lo), select-only (where
    ``select_only``) or comm-only [lo, hi), none [hi, n) within each mini-stage (module docstring)."""
    r = np.minimum(rec, layers)
    s = np.clip(sel, r, layers)
    c = np.clip(com, r, layers)
    return r, np.minimum(s, c), np.maximum(s, c), s > c


def class_counts(pa: ProfileArrays, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                 com: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """Layers of each kind and recompute class per mini-stage: int [K, C, B, V, P].

    Args: layers, rec, sel, com: int [B, V, P] (see module docstring); pos: optional int [V, P]
    pipeline position of each mini-stage (default chunk-major v·P + p).
    """
    B, V, P = layers.shape
    start = first_layers(layers, pos)
    r, lo, hi, select_only = _class_bounds(layers, rec, sel, com)
    bounds = {FULL: (0, r), BOTH: (r, lo), NONE: (hi, layers)}
    sel_only = (lo, np.where(select_only, hi, lo))
    comm_only = (lo, np.where(select_only, lo, hi))
    K = pa.kind_prefix.shape[0]
    out = np.zeros((K, 5, B, V, P), dtype=np.int64)
    pref = pa.kind_prefix
    for cls_i, (a, b) in {**bounds, SELECT: sel_only, COMM: comm_only}.items():
        a_abs = start + a
        b_abs = start + b
        out[:, cls_i] = pref[:, b_abs] - pref[:, a_abs]
    return out


def stage_costs(pa: ProfileArrays, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                com: np.ndarray, *, pos: np.ndarray | None = None,
                at: tuple[np.ndarray, np.ndarray] | None = None) -> StageCosts:
    """Sum a profile over a batch of layouts (all int [B, V, P]); see :class:`StageCosts`.

    Head costs go to the mini-stage at pipeline position 0, tail costs to the last position:
    (0, 0) and (V-1, P-1) chunk-major (MindFormers places the embedding on stage 0 and the LM head
    on the last stage, spec §2.5); with a V-shaped ``pos`` (zero_bubble_v) the tail is on stage 0.

    ``at``: optional (rows, stages), int [K] each: the costs of just these (layout, pipeline stage)
    pairs, as K one-stage columns: arrays [K, V, 1] and ``static_mib`` [K, 1] holding the full
    arrays' ``[rows, :, stages]`` (the same numbers: a mini-stage's costs depend on the others only
    through the index of its first layer). The greedy recompute fit prices only its over-budget
    stages, ~1 of 8 per layout on pp 8 × vpp 4 MoE.

    Raises:
        ValueError: the arrays' shapes differ.
    """
    if not (layers.shape == rec.shape == sel.shape == com.shape) or layers.ndim != 3:
        raise ValueError(f"layers/recompute arrays must share one [B, V, P] shape, got "
                         f"{layers.shape}, {rec.shape}, {sel.shape}, {com.shape}")
    V, P = layers.shape[1:]
    if pos is None:
        hv, hp, tv, tp = 0, 0, V - 1, P - 1
    else:
        pos = np.asarray(pos)
        hv, hp = (int(x) for x in np.argwhere(pos == 0)[0])
        tv, tp = (int(x) for x in np.argwhere(pos == V * P - 1)[0])
    pre = pa.prefix()
    st = first_layers(layers, pos)
    # where the head's and the tail's costs go: (rows, stage column) of the arrays built below
    head, tail = (slice(None), hp), (slice(None), tp)
    if at is not None:
        rows, stg = (np.asarray(x, dtype=np.intp) for x in at)
        layers, rec, sel, com, st = (x[rows, :, stg][:, :, None] for x in (layers, rec, sel, com, st))
        head, tail = (stg == hp, 0), (stg == tp, 0)
    n = layers
    r, lo, hi, sel_only = _class_bounds(layers, rec, sel, com)
    # Absolute layer index of each class boundary: full [0,r), both [r,lo), select- or comm-only
    # [lo,hi), none [hi,n) (module docstring).
    i0, ir, ilo, ihi, i_n = st, st + r, st + lo, st + hi, st + n
    fwd = pre["fwd"][i_n] - pre["fwd"][i0]
    base_bwd = pre["bwd0"][i_n] - pre["bwd0"][i0]
    bwd_w = pre["bwd_w"][i_n] - pre["bwd_w"][i0]

    def by_class(tab: np.ndarray) -> np.ndarray:
        mid = np.where(sel_only, tab[SELECT][ihi] - tab[SELECT][ilo], tab[COMM][ihi] - tab[COMM][ilo])
        return ((tab[FULL][ir] - tab[FULL][i0]) + (tab[BOTH][ilo] - tab[BOTH][ir]) + mid
                + (tab[NONE][i_n] - tab[NONE][ihi]))

    bwd = by_class(pre["bwd"])
    act = by_class(pre["act"])
    ws = np.zeros(layers.shape)
    if pre["ws"]:
        ranges = {FULL: (i0, ir), BOTH: (ir, ilo), NONE: (ihi, i_n)}
        single = pa.kind_prefix.shape[0] == 1
        for k, cls_i, w in pre["ws"]:
            if cls_i in ranges:
                a, b = ranges[cls_i]
            else:
                a, b = ilo, np.where(sel_only == (cls_i == SELECT), ihi, ilo)
            present = (b > a) if single else (pa.kind_prefix[k][b] > pa.kind_prefix[k][a])
            np.maximum(ws, np.where(present, w, 0.0), out=ws)
    static_vp = pre["static"][i_n] - pre["static"][i0]
    if pre["static_d"] is not None:
        static_vp = static_vp + by_class(pre["static_d"])
    static = static_vp.sum(axis=1) + pa.stage_const_mib
    hf, hb, ha, hs, hw = pa.head
    tf, tb, ta, ts, tw = pa.tail
    (hr, hc), (tr, tc) = head, tail
    fwd[hr, hv, hc] += hf
    bwd[hr, hv, hc] += hb
    base_bwd[hr, hv, hc] += hb
    act[hr, hv, hc] += ha
    ws[hr, hv, hc] = np.maximum(ws[hr, hv, hc], hw)
    fwd[tr, tv, tc] += tf
    bwd[tr, tv, tc] += tb
    base_bwd[tr, tv, tc] += tb
    act[tr, tv, tc] += ta
    ws[tr, tv, tc] = np.maximum(ws[tr, tv, tc], tw)
    static[hr, hc] += hs
    static[tr, tc] += ts
    bwd_w[hr, hv, hc] += 0.5 * hb if pa.head_w_ms is None else pa.head_w_ms
    bwd_w[tr, tv, tc] += 0.5 * tb if pa.tail_w_ms is None else pa.tail_w_ms
    return StageCosts(fwd, bwd, act, ws, static, bwd - base_bwd, bwd_w)


#: :func:`stage_costs_distinct`'s hash weights (fixed: the same batch always groups the same way;
#: the grouping is checked, so the weights only affect speed).
_HASH_W = np.random.default_rng(20261204).integers(1, 2 ** 62, size=(5, 64), dtype=np.int64) | 1


def stage_costs_distinct(pa: ProfileArrays, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                         com: np.ndarray, *, pos: np.ndarray | None = None) -> StageCosts:
    """:func:`stage_costs` of a batch (all int [B, V, P]) with each distinct pipeline-stage column
    priced once: the same arrays, bit for bit.

    A stage's costs depend only on its mini-stages' layer, recompute, select and comm counts and
    the index of their first layers (:func:`stage_costs`' ``at``). A neighbourhood of one layout
    repeats most columns: the ~16,500 one-move neighbours of a pp 32 × vpp 4 layout hold ~2,700
    distinct (stage, column) pairs among their 530,000. The pairs are grouped by a 64-bit hash and
    every group is checked against its representative column; when a hash collides the whole
    batch is priced directly. For batches with few repeats it costs ~30 % more than
    :func:`stage_costs`; :meth:`autotune.tuner.problem.Problem.costs` uses it for large batches.

    Raises:
        ValueError: the arrays' shapes differ (as :func:`stage_costs`).
    """
    if not (layers.shape == rec.shape == sel.shape == com.shape) or layers.ndim != 3:
        return stage_costs(pa, layers, rec, sel, com, pos=pos)  # its error
    B, V, P = layers.shape
    if V > _HASH_W.shape[1]:
        return stage_costs(pa, layers, rec, sel, com, pos=pos)
    cols = (layers, rec, sel, com, first_layers(layers, pos))
    with np.errstate(over="ignore"):  # int64 wrap-around is the hash
        h = np.zeros((B, P), dtype=np.int64)
        for a, w in zip(cols, _HASH_W):
            h += np.einsum("bvp,v->bp", a.astype(np.int64, copy=False), w[:V])
        h += np.arange(P, dtype=np.int64)[None] * np.int64(-7046029254386353131)
    _, first, inv = np.unique(h.reshape(-1), return_index=True, return_inverse=True)
    rows, stg = np.divmod(first, P)
    inv = inv.reshape(B, P)
    for a in cols:  # every column equals its group's representative: no collision
        rep = a[rows, :, stg]  # [U, V]
        if not all(np.array_equal(rep[:, v][inv], a[:, v, :]) for v in range(V)):
            return stage_costs(pa, layers, rec, sel, com, pos=pos)
    sub, at_rows = np.unique(rows, return_inverse=True)
    c = stage_costs(pa, layers[sub], rec[sub], sel[sub], com[sub], pos=pos, at=(at_rows, stg))

    def spread(x: np.ndarray | None) -> np.ndarray | None:
        if x is None:
            return None
        if x.ndim == 2:  # [U, 1]
            return x[:, 0][inv]
        out = np.empty((B, V, P), dtype=x.dtype)
        for v in range(V):
            out[:, v, :] = x[:, v, 0][inv]
        return out

    return StageCosts(*(spread(x) for x in _arrays(c)))
