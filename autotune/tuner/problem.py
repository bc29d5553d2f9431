"""A tuning problem as pure numpy: batched evaluation of candidate layouts (no Optuna here).

A :class:`Candidate` is one point of the search space: V (pp_interleave_num) and four int [V, P]
tables (layers, full / select / comm recompute counts). :meth:`Problem.evaluate` scores a batch of
candidates that share V with the event simulation of :mod:`autotune.cost.simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.config.layout import Layout, make_layout
from autotune.config.limits import MAX_SCHEDULE_UNITS, MAX_STAGE_UNITS
from autotune.cost.budget import excess_mib, fits
from autotune.cost.dominance import pareto_order
from autotune.cost.inputs import ProfileArrays, StageCosts, first_layers, stage_costs, stage_costs_distinct
from autotune.cost.schedules import get_schedule
from autotune.cost.simulate import (compile_schedule, duration_table, peak_activation, simulate,
                                    stage_peak_activation)
from autotune.tuner.recompute import allowed_classes


@dataclass
class Candidate:
    """One layout with its score (filled by :meth:`Problem.score`).

    ``step_ms`` is the simulated step time (ms); ``peak_mib`` the worst stage's peak (MiB);
    ``excess_mib`` = peak - budget (<= 0 fits).
    """

    V: int
    layers: np.ndarray
    rec: np.ndarray
    sel: np.ndarray
    com: np.ndarray
    step_ms: float = float("inf")
    peak_mib: float = float("inf")
    excess_mib: float = float("inf")
    origin: str = ""

    def key(self) -> tuple:
        return (self.V, self.layers.tobytes(), self.rec.tobytes(), self.sel.tobytes(), self.com.tobytes())

    def rank(self) -> tuple[float, float]:
        """Sort key: feasible first (by step time), then by memory excess."""
        return (max(0.0, self.excess_mib), self.step_ms)

    def layout(self) -> Layout:
        return make_layout(self.layers, self.rec, self.sel, self.com)

    @classmethod
    def from_layout(cls, layout: Layout, origin: str = "") -> "Candidate":
        return cls(layout.vpp, layout.layers_vp.copy(), layout.recompute_vp.copy(),
                   layout.select_vp.copy(), layout.comm_vp.copy(), origin=origin)


@dataclass
class BatchScore:
    """Scores of B candidates: step_ms [B], peak_mib [B, P], static_mib [B, P], busy_ms [B, P]."""

    step_ms: np.ndarray
    peak_mib: np.ndarray
    static_mib: np.ndarray
    busy_ms: np.ndarray


#: :meth:`Problem.costs` prices each distinct stage column once from this many layouts on (the
#: hashing costs more than it saves on small batches).
DISTINCT_MIN_BATCH = 256


@dataclass(frozen=True)
class Problem:
    """Everything fixed during a search (frozen: a variant is ``dataclasses.replace(problem, ...)``).

    Attributes:
        pa: profile arrays; P: pipeline_stage; m: micro_batch_num; schedule: scheduler name;
        hbm_mib: budget per device (MiB, inf when unknown); vpp_candidates: runnable V values
            (stored as a tuple);
        kinds: recompute kinds the search may set ("full", "select", "comm");
        max_abs_offset: optional bound on |layers - base|;
        seq_split_num: sequence chunks per micro-batch (seqpipe), 1 otherwise;
        recompute_granularity: "mini_stage" (one recompute fraction per mini-stage in a trial) or
            "stage" (one per stage, dealt over its chunks).
        fit_cache: fitted recompute columns and mini-stage option fronts of this problem
            (:mod:`autotune.tuner.fit`), shared by every local search on it. It lives on the
            object, so a copy made with ``dataclasses.replace`` (another budget, other V) starts
            empty; never compared, hashed or printed.
    """

    pa: ProfileArrays
    P: int
    m: int
    schedule: str = "1f1b"
    hbm_mib: float = float("inf")
    vpp_candidates: tuple[int, ...] = (1,)
    kinds: tuple[str, ...] = ("full", "select", "comm")
    max_abs_offset: int | None = None
    seq_split_num: int = 1
    recompute_granularity: str = "mini_stage"
    fit_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "vpp_candidates", tuple(int(v) for v in self.vpp_candidates))
        object.__setattr__(self, "kinds", tuple(self.kinds))

    @property
    def N(self) -> int:
        return self.pa.num_layers

    def base(self, V: int) -> int:
        return self.N // (self.P * V)

    def bounds(self, V: int) -> tuple[np.ndarray, np.ndarray]:
        """Per mini-stage [V, P] lower and upper layer bounds (first/last >= 0, others >= 1)."""
        lo = np.ones((V, self.P), dtype=np.int64)
        lo[0, 0] = 0
        lo[-1, -1] = 0
        hi = np.full((V, self.P), self.N, dtype=np.int64)
        if self.max_abs_offset is not None:
            b = self.base(V)
            lo = np.maximum(lo, b - self.max_abs_offset)
            hi = np.minimum(hi, b + self.max_abs_offset)
        return lo, hi

    def memory_floor_mib(self) -> tuple[float, float]:
        """Lower bounds (MiB) on the worst stage's memory over every layout of the space (every V
        candidate, any recompute): (static memory alone, static + the activations one micro-batch
        keeps or one layer's backward workspace). No layout fits when the second exceeds
        ``hbm_mib``.

        Stage s of a layout with V chunks holds n_s >= Σ_v lo[v, s] layers (:meth:`bounds`), Σ n_s
        = N. Its static memory is at least c_s + n_s · a: a is the least static MiB a layer of
        this model adds (the cheapest layer kind present, with the most negative static change of
        any recompute class), c_s the per-stage constant plus the embedding / LM head on the
        stages that hold them (:func:`autotune.cost.inputs.stage_costs`). When its first backward
        starts, the stage still keeps the forward activations of micro-batch 0 in every one of its
        layers (that backward needs the whole forward of the micro-batch), at least n_s · b MiB
        (b: the least activation a layer keeps, any recompute class) plus the head's / tail's;
        with ``seq_split_num > 1`` this term is left out. The least max_s over splits is the
        water-filling of the N layers over the stages (each layer to the least loaded stage);
        exact for the static part when every layer has the same static memory (pipeline_stage 1:
        the whole model's weights, gradients and optimizer state).

        One layer's memory: each layer kind present sits on some stage, whose static memory is at
        least the per-stage constant plus one layer's least static (a). With recompute class c the
        layer keeps act[k, c] MiB of micro-batch 0 when the stage's first backward starts (above),
        and its mini-stage's workspace, the largest of its layers' (:func:`autotune.cost.inputs.
        stage_costs`), is live during each of its backwards on top of the activations then kept (>=
        0; cost-model reference §3.2's "working set of the first backward"): the stage peaks at
        least max(act[k, c], ws[k, c]) above its static memory. So the worst stage peaks at no less
        than that constant + a + the largest, over the kinds present, of the least over the classes
        the space allows (:func:`~autotune.tuner.recompute.allowed_classes`; the cost model's
        per-class numbers of this problem, select patterns folded in) of that max (the workspace
        alone with ``seq_split_num > 1``). It decides where one layer's attention scores exceed
        the budget whatever the recompute (a 32k sequence without flash attention: MindFormers'
        r1.1 GLM-32k configs, ~201,000 MiB a layer kept or replayed against 59 GB), where the
        water-filling leaves room.

        The mean: the water-filling gives every layer the cheapest kind's memory, so where the
        kinds differ much (DeepSeek's 3 dense and 58 MoE layers) it says little. The stages of a
        layout together hold every layer once, so the worst stage holds at least the mean, over
        the P stages, of Σ_s c_s + Σ_layers (each layer's own least static, and for the second
        floor + its least activation kept): the floors take the larger of the two. A DeepSeek-R1
        671B inference branch's pp 2 config (58 MoE layers, a 40,960 MiB budget) used to search
        until its clock and end "not proven", its closest layout at 485,589 MiB.
        """
        pa = self.pa
        present = pa.kind_prefix[:, -1] > 0
        st = pa.static_k[present].astype(np.float64)
        if pa.static_dc is not None and pa.static_dc.size:
            st = st + np.minimum(0.0, pa.static_dc[present].min(axis=1))
        act = pa.act_kc[present].min(axis=1) if self.seq_split_num == 1 else np.zeros(int(present.sum()))
        a = max(0.0, float(st.min())) if st.size else 0.0
        b = max(0.0, float((st + act).min())) if st.size else 0.0
        keep = 1.0 if self.seq_split_num == 1 else 0.0
        count = pa.kind_prefix[present, -1].astype(np.float64)   # layers of each kind present
        layer_sums = (float(count @ st), float(count @ (st + act)))
        floors = [float("inf"), float("inf")]
        for V in self.vpp_candidates:
            pos = np.asarray(get_schedule(self.schedule).virtual_position(self.P, V))
            hp, tp = int(np.argwhere(pos == 0)[0][1]), int(np.argwhere(pos == V * self.P - 1)[0][1])
            n = self.bounds(V)[0].sum(axis=0).astype(np.int64)
            for i, (per, h, t) in enumerate(((a, 0.0, 0.0), (b, keep * pa.head.act_mib, keep * pa.tail.act_mib))):
                c = np.full(self.P, pa.stage_const_mib, dtype=np.float64)
                c[hp] += pa.head.static_mib + h
                c[tp] += pa.tail.static_mib + t
                mean = (float(c.sum()) + layer_sums[i]) / self.P
                floors[i] = min(floors[i], max(_water_fill(c + per * n, per, int(self.N - n.sum())), mean))
        cls = allowed_classes(self.kinds)
        one = np.maximum(pa.ws_kc[present][:, cls], pa.act_kc[present][:, cls] if self.seq_split_num == 1 else 0.0)
        layer = max(0.0, float(one.min(axis=1).max())) if st.size else 0.0
        return floors[0], max(floors[1], pa.stage_const_mib + a + layer)

    def costs(self, V: int, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
              com: np.ndarray) -> StageCosts:
        """Per-mini-stage costs of a batch (arrays int [B, V, P]); ``static_mib`` [B, P] needs no
        simulation, so a caller can reject a layout on static memory before :meth:`score_costs`.
        From :data:`DISTINCT_MIN_BATCH` layouts on, each distinct stage column is priced once
        (:func:`~autotune.cost.inputs.stage_costs_distinct`, the same numbers): the search's
        neighbourhoods repeat most of them."""
        if layers.ndim == 3 and layers.shape[0] >= DISTINCT_MIN_BATCH:
            return stage_costs_distinct(self.pa, layers, rec, sel, com, pos=self.positions(V))
        return stage_costs(self.pa, layers, rec, sel, com, pos=self.positions(V))

    def positions(self, V: int) -> np.ndarray:
        """Pipeline position int [V, P] of each mini-stage (V-shaped for zero_bubble_v)."""
        return get_schedule(self.schedule).virtual_position(self.P, V)

    def first_layers(self, V: int, split: np.ndarray) -> np.ndarray:
        """Index of the first layer of each mini-stage of ``split`` int [V, P] as :meth:`costs`
        places them: int [V, P]."""
        return first_layers(np.asarray(split)[None], self.positions(V))[0]

    def evaluate(self, V: int, layers: np.ndarray, rec: np.ndarray, sel: np.ndarray,
                 com: np.ndarray, *, memory_only: bool = False) -> BatchScore:
        """Score a batch (arrays int [B, V, P]). ``memory_only`` skips the time simulation."""
        return self.score_costs(V, self.costs(V, layers, rec, sel, com), memory_only=memory_only)

    def score_costs(self, V: int, costs: StageCosts, *, memory_only: bool = False) -> BatchScore:
        """:meth:`evaluate` from already computed :meth:`costs`."""
        cs = compile_schedule(self.schedule, self.P, V, self.m, self.seq_split_num)
        if memory_only:
            peak = costs.static_mib + peak_activation(cs, costs.act_mib, costs.ws_mib)
            B = costs.static_mib.shape[0]
            return BatchScore(np.full(B, np.nan), peak, costs.static_mib, np.zeros((B, self.P)))
        sim = simulate(cs, costs, self.pa.p2p_ms)
        return BatchScore(sim.step_ms, sim.peak_mib, costs.static_mib, sim.busy_ms)

    def memory_peaks(self, V: int, costs: StageCosts, near: Candidate | None = None) -> np.ndarray:
        """Peak HBM per stage, float [B, P] MiB: ``score_costs(V, costs, memory_only=True).peak_mib``.
        With ``near`` (a layout of V the batch is a neighbourhood of), a stage
        whose mini-stages hold the same activation and workspace MiB as ``near``'s takes its
        activation peak from ``near`` (the same arithmetic on the same numbers, up to the last bits
        of a matrix product priced in another batch size); only the stages a
        move changed are priced (:func:`~autotune.cost.simulate.stage_peak_activation`): a 1-opt
        move changes one or two of them, and on pp 32 × vpp 4 the full pricing of ~17,000 moves
        a round was ~40 % of the finishing descent."""
        if near is None:
            return self.score_costs(V, costs, memory_only=True).peak_mib
        cs = compile_schedule(self.schedule, self.P, V, self.m, self.seq_split_num)
        ref = self.costs(V, near.layers[None], near.rec[None], near.sel[None], near.com[None])
        ref_peak = peak_activation(cs, ref.act_mib, ref.ws_mib)[0]  # [P]
        same = ((costs.act_mib == ref.act_mib) & (costs.ws_mib == ref.ws_mib)).all(axis=1)  # [B, P]
        act = np.broadcast_to(ref_peak, same.shape).copy()
        for p in range(self.P):
            rows = np.flatnonzero(~same[:, p])
            if rows.size:
                act[rows, p] = stage_peak_activation(cs, p, costs.act_mib[rows, :, p], costs.ws_mib[rows, :, p])
        return costs.static_mib + act

    def op_durations(self, V: int, costs: StageCosts) -> np.ndarray:
        """float [R, B]: the op durations (ms) the simulation of :meth:`score_costs` uses, per
        (kind, chunk, stage) (:func:`~autotune.cost.simulate.duration_table`). The step time is a
        max-plus recurrence over them (an op starts at the max of its dependencies' ends, ends
        ``duration`` later; IEEE rounding is monotone too), so it never decreases when no duration
        does: a layout whose every entry is >= another's is never faster than it."""
        cs = compile_schedule(self.schedule, self.P, V, self.m, self.seq_split_num)
        return duration_table(cs, costs)

    def score(self, cands: list[Candidate]) -> list[Candidate]:
        """Fill step/peak/excess of candidates in place (grouped by V); returns them."""
        byv: dict[int, list[Candidate]] = {}
        for c in cands:
            byv.setdefault(c.V, []).append(c)
        for V, group in byv.items():
            s = self.evaluate(V, *(np.stack([getattr(c, a) for c in group]) for a in ("layers", "rec", "sel", "com")))
            for i, c in enumerate(group):
                c.step_ms = float(s.step_ms[i])
                c.peak_mib = float(s.peak_mib[i].max())
                c.excess_mib = excess_mib(c.peak_mib, self.hbm_mib)
        return cands


#: Relative tolerance of :func:`improves` (a relative one, so that scaling every time by one
#: constant changes no decision; an absolute 1e-9 ms does not scale).
REL_TOL = 1e-9


def improves(step_ms: np.ndarray | float, than_ms: float) -> np.ndarray | bool:
    """True where a step time (ms) is faster than ``than_ms`` by more than :data:`REL_TOL` of it."""
    return np.asarray(step_ms) < than_ms * (1.0 - REL_TOL)


def first_min(x: np.ndarray, axis: int = 0) -> np.ndarray | int:
    """Index of the first entry within :data:`REL_TOL` of the minimum along ``axis`` (int for a
    1-D ``x``, else an int array with ``axis`` removed). ``np.argmin`` picks whichever of two equal
    values rounds lower, so scaling every time by a constant could change the pick; within a
    relative tolerance the position decides, and a scale does not move it. +inf entries never tie
    with a finite minimum; an all-inf slice gives 0."""
    x = np.asarray(x, dtype=float)
    lo = np.min(x, axis=axis, keepdims=True)
    tied = x <= np.where(np.isfinite(lo), lo + REL_TOL * np.abs(lo), lo)
    i = np.argmax(tied, axis=axis)
    return int(i) if x.ndim == 1 else i


def tie_key(x: np.ndarray) -> np.ndarray:
    """A sort key of ``x`` [B] that counts values within :data:`REL_TOL` (of the least finite
    |value|, or of the largest when that is 0) above the least one as equal: floor((x − min) / unit),
    +inf kept. Sorting by it with a stable sort orders near-ties by position, the same at every
    scale of ``x``."""
    x = np.asarray(x, dtype=float)
    fin = np.isfinite(x)
    if not fin.any():
        return x.copy()
    lo = float(x[fin].min())
    unit = REL_TOL * (abs(lo) or float(np.abs(x[fin]).max()))
    if unit == 0.0:
        return np.where(fin, 0.0, x)
    return np.where(fin, np.floor((x - lo) / unit), x)


def rank_order(step_ms: np.ndarray, excess_mib: np.ndarray) -> np.ndarray:
    """Indices [B] best first: least memory excess (MiB, clipped at 0 by the caller), then least step
    time (ms), near-ties (:func:`tie_key`) by position."""
    return np.lexsort((np.arange(len(step_ms)), tie_key(step_ms), tie_key(excess_mib)))


def better(c: Candidate, than: Candidate) -> bool:
    """Strictly better: less memory excess (MiB, clipped at 0), or as little and faster by more
    than :data:`REL_TOL` (:func:`improves`; relative, so a time scale changes nothing)."""
    ce, te = max(0.0, c.excess_mib), max(0.0, than.excess_mib)
    return ce < te if ce != te else bool(improves(c.step_ms, than.step_ms))


def best_of(cands: list[Candidate]) -> Candidate:
    """The best of scored ``cands`` by :func:`better`, the first one among near-ties (ValueError
    when empty)."""
    if not cands:
        raise ValueError("best_of: no candidates")
    best = cands[0]
    for c in cands[1:]:
        if better(c, best):
            best = c
    return best


def ranked(cands: list[Candidate]) -> list[Candidate]:
    """Scored ``cands`` best first (:func:`rank_order`: excess, then step; near-ties by position)."""
    if not cands:
        return []
    order = rank_order(np.array([c.step_ms for c in cands]), np.array([max(0.0, c.excess_mib) for c in cands]))
    return [cands[i] for i in order]


def _water_fill(load: np.ndarray, per: float, k: int) -> float:
    """The least max of ``load`` after adding ``per`` to its entries k times in all (float [P])."""
    load = load.copy()
    if per <= 0 or k <= 0:
        return float(load.max())
    for _ in range(k):  # each to the least loaded entry
        load[int(np.argmin(load))] += per
    return float(load.max())


def even_layers(N: int, P: int, V: int) -> np.ndarray:
    """The even split [V, P]: base = N // (P·V) everywhere, the remainder one each to the mini-stages
    after the first, in layer order (the first mini-stage also holds the embedding)."""
    flat = np.full(P * V, N // (P * V), dtype=np.int64)
    rem = N - int(flat.sum())
    order = list(range(1, P * V)) + [0]
    for i in range(rem):
        flat[order[i % len(order)]] += 1
    return flat.reshape(V, P)


def runnable_vpp(N: int, P: int, m: int, schedule: str, candidates: list[int],
                 seq_split_num: int = 1) -> list[int]:
    """The candidates V that can run: P·V <= N, within the simulation limits of
    :mod:`autotune.config.limits` (R_LIMIT_SCHEDULE), and the schedule accepts (P, V, m, seq_split_num)
    (:func:`vpp_not_runnable` says why the others cannot).

    With one pipeline stage (P = 1) only V = 1 is kept when it is a candidate: there is no pipeline
    bubble for interleaving to shorten (``check`` warns W_VPP_LOW_GAIN about such a config), so a
    V > 1 can only tie V = 1 (the same ops on one device; the simulated times differed in the last
    float digit on the corpus's InternLM-7B LoRA, and the search answered pp_interleave_num 4) or
    hold more activations. An explicit list without 1 is kept."""
    why = vpp_not_runnable(N, P, m, schedule, candidates, seq_split_num)
    return [V for V in candidates if V not in why]


def vpp_not_runnable(N: int, P: int, m: int, schedule: str, candidates: list[int],
                     seq_split_num: int = 1) -> dict[int, str]:
    """V -> why it cannot run (one phrase), for the candidates :func:`runnable_vpp` drops: more
    mini-stages than layers, past the simulation limits, the schedule's own rule (e.g. interleaved
    1F1B needs micro_batch_num to be a multiple of pipeline_stage), or, with one pipeline stage, V
    > 1 beside V = 1 (nothing to interleave)."""
    out: dict[int, str] = {}
    for V in candidates:
        if P == 1 and V > 1 and 1 in candidates:
            out[V] = "with one pipeline stage there is no bubble to interleave (pp_interleave_num 1 is searched)"
        elif P * V > N:
            out[V] = f"pipeline_stage × pp_interleave_num = {P * V} mini-stages exceed num_layers = {N}"
        elif V * m * seq_split_num > MAX_STAGE_UNITS or P * V * m * seq_split_num > MAX_SCHEDULE_UNITS:
            out[V] = "the schedule would pass the simulation limits (R_LIMIT_SCHEDULE)"
        else:
            try:
                compile_schedule(schedule, P, V, m, seq_split_num)
            except (ValueError, KeyError) as exc:
                out[V] = str(exc).strip("'\"")
    return out


def count_splits_v(problem: Problem, V: int) -> int:
    """Number of layer splits of pp_interleave_num V within ``problem.bounds(V)`` summing to N (a
    counting DP over the mini-stages' bounds with Python integers; never enumerates). Each
    mini-stage's step is a window sum over the prefix sums of the counts so far (O(N) per
    mini-stage: pp 64 × vpp 4 × 256 layers in milliseconds); memoised on the problem."""
    key = ("count_splits", V)
    if key in problem.fit_cache:
        return problem.fit_cache[key]
    N = problem.N
    lo, hi = problem.bounds(V)
    ways = np.zeros(N + 1, dtype=object)
    ways[0] = 1
    t = np.arange(N + 1)
    for a, b in zip(lo.reshape(-1).tolist(), hi.reshape(-1).tolist()):
        b = min(int(b), N)
        if a > b:
            ways = np.zeros(N + 1, dtype=object)
            break
        cum = np.concatenate([np.zeros(1, dtype=object), np.cumsum(ways)])  # cum[u] = Σ ways[:u]
        # ways'[t] = Σ_{x=a..b} ways[t − x] = cum[t − a + 1] − cum[max(t − b, 0)] (0 when t < a)
        ways = np.where(t >= a, cum[np.clip(t - a + 1, 0, N + 1)] - cum[np.clip(t - b, 0, N + 1)], 0)
    problem.fit_cache[key] = int(ways[N])
    return problem.fit_cache[key]


def count_splits(problem: Problem) -> int:
    """Number of layer splits over all V candidates (:func:`count_splits_v`)."""
    return sum(count_splits_v(problem, V) for V in problem.vpp_candidates)


def compositions(N: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """All int vectors x with lo <= x <= hi (elementwise) summing to N: int [count, len(lo)]."""
    n = len(lo)
    out: list[tuple[int, ...]] = []
    lo_suf = np.concatenate([np.cumsum(np.asarray(lo)[::-1])[::-1], [0]])
    hi_suf = np.concatenate([np.cumsum(np.asarray(hi)[::-1])[::-1], [0]])

    def rec(i: int, left: int, acc: list[int]) -> None:
        if i == n:
            if left == 0:
                out.append(tuple(acc))
            return
        a = max(int(lo[i]), left - int(hi_suf[i + 1]))
        b = min(int(hi[i]), left - int(lo_suf[i + 1]))
        for x in range(a, b + 1):
            acc.append(x)
            rec(i + 1, left - x, acc)
            acc.pop()

    rec(0, N, [])
    return np.asarray(out, dtype=np.int64).reshape(-1, n)


def stage_configurations(problem: Problem, split: np.ndarray, q: int,
                         combos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of the recompute configurations ``combos`` int [k, V, 3] ((full, select, comm) per chunk) of
    stage q of ``split`` int [V, P], those whose peak fits the budget (:func:`fits`) and whose
    per-chunk backward ms are Pareto-minimal, in lexicographic order of those ms: (their indices
    int [k'], their replay ms per micro-batch float [k', V]).

    A stage's peak depends only on its own column; priced with :meth:`Problem.costs` (the
    schedule's own placement of the head and the tail). Recompute adds replay to backwards only and
    the simulated step time is monotone in every op duration, so a dominated configuration is never
    needed (:mod:`autotune.tuner.exact`, :mod:`autotune.tuner.bounds.split_lp`)."""
    V, P = np.asarray(split).shape
    k = len(combos)
    lay = np.broadcast_to(split, (k, V, P)).copy()
    rec, sel, com = (np.zeros((k, V, P), dtype=np.int64) for _ in range(3))
    rec[:, :, q], sel[:, :, q], com[:, :, q] = combos[:, :, 0], combos[:, :, 1], combos[:, :, 2]
    co = problem.costs(V, lay, rec, sel, com)
    cs = compile_schedule(problem.schedule, P, V, problem.m, problem.seq_split_num)
    peak = co.static_mib[:, q] + peak_activation(cs, co.act_mib, co.ws_mib)[:, q]
    ok = np.flatnonzero(fits(peak, problem.hbm_mib))
    keep = ok[pareto_order(co.bwd_ms[ok, :, q], tol=1e-12)] if len(ok) else ok
    return keep, co.recompute_ms[keep, :, q]
