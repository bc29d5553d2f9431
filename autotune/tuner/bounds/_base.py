"""The lower-bound contract and the one rule that combines bounds (pure numpy, no Optuna).

A lower bound is a *proof*: every memory-feasible layout of the problem with pp_interleave_num V
simulates to a step time >= ``bound_ms``. A bound is an object with

- ``name`` (str),
- ``applies(problem, V)``: whether its proof covers this (problem, V) — schedule shape, V; a
  bound may still return None from ``bound`` when a work cap stops it,
- ``bound(problem, V, ctx)`` -> :class:`BoundOutcome` or None,

and joins the search by one entry in ``autotune.tuner.bounds.REGISTRY``. :func:`tighten` is the
only place where outcomes are combined: per V the largest proof counts (every one is valid), the
problem's bound is the least over V (a layout has one V), and a V that cannot change that least
value is skipped.
"""

from __future__ import annotations

import time

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Protocol, Sequence

import numpy as np

from autotune.tuner.problem import Candidate, Problem


#: Relative margin taken off a value HiGHS proves (its MIP feasibility tolerance is 1e-6; an LP's
#: primal and dual tolerances are 1e-7), by the integer program, the split LP and the path LP.
DUAL_SAFETY = 1e-6


def highs_proven(value: float) -> float:
    """A bound (ms) HiGHS reports, less :data:`DUAL_SAFETY` of it: what it proves within its
    feasibility tolerances."""
    return float(value) - DUAL_SAFETY * max(1.0, abs(float(value)))


@dataclass(frozen=True)
class BoundOutcome:
    """What one bound proved for one V.

    Attributes:
        bound_ms: every memory-feasible layout with this V has a step time >= it (ms; +inf: none
            fits).
        split: the relaxed problem's best layer split int [V, P] (a good seed, not a proof), or
            None.
        stats: work done, for reports and tests (iterations, evaluations, paths, ...).
        layouts: fitting layouts the proof met (:class:`~autotune.tuner.problem.Candidate`,
            scored; seeds, e.g. :mod:`.split_lp`'s best), or ().
        cut: the clock stopped the proof before its end: ``bound_ms`` is still a bound, a weaker
            one (:func:`tighten` counts the V as left short, so the time left may run it again).
    """

    bound_ms: float
    split: np.ndarray | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    layouts: tuple[Candidate, ...] = ()
    cut: bool = False


@dataclass(frozen=True)
class BoundContext:
    """What a bound may use besides the problem.

    Attributes:
        upper_ms: a feasible step time (the incumbent, ms) or None; a bound may stop once it
            reaches it (the V then cannot hold the optimum).
        lower_ms: the largest bound already proven for this V (ms) or None; a bound may start
            from it (the result is then never below it).
        layouts: known layouts (:class:`~autotune.tuner.problem.Candidate`); a bound uses those
            with its V (e.g. their critical paths).
        deadline: ``time.monotonic()`` safety limit, or None.
        target_gap: the search's certified-gap stop (a fraction, ``--gap``) or None; a bound that
            also finds layouts may stop once its bound is within it of its best one.
        others_ms: the least bound of the other V's when this V's proofs run (ms; set by
            :func:`tighten`) or None (no other V holds a proof); above it this V no longer holds
            the least bound over V, so a bound may spend work past its own base cap only below it.
    """

    upper_ms: float | None = None
    lower_ms: float | None = None
    layouts: tuple[Candidate, ...] = ()
    deadline: float | None = None
    target_gap: float | None = None
    others_ms: float | None = None


class LowerBound(Protocol):
    """A proof of a lower bound on the step time (see module docstring)."""

    name: str

    def applies(self, problem: Problem, V: int) -> bool:
        """Whether this bound's proof covers pp_interleave_num V of ``problem``."""

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        """The bound for V (ms), or None when a work cap stopped it (no proof this time)."""


#: How much of the skip rule a pass uses (see :func:`tighten`).
Skip = Literal["none", "upper", "dominated"]


@dataclass(frozen=True)
class Tightened:
    """Result of :func:`tighten`: the bound per V (ms) after the pass, the first seed split each V
    got in this pass (int [V, P]), the work done (summed ``stats`` by key), the layouts the
    proofs met (``BoundOutcome.layouts``) and, under a deadline, the V's the clock left short
    (``unfinished``: a proof skipped past the deadline or replaced by the floor, one that
    returned no proof: gave up on the clock or a work cap, or one the clock cut:
    ``BoundOutcome.cut``)."""

    per_v_ms: Mapping[int, float]
    splits: Mapping[int, np.ndarray]
    work: Mapping[str, float]
    layouts: tuple[Candidate, ...] = ()
    unfinished: frozenset[int] = frozenset()

    @property
    def bound_ms(self) -> float:
        """The problem's bound: the least over V (+inf when no V has one)."""
        return min(self.per_v_ms.values()) if self.per_v_ms else float("inf")


def tighten(problem: Problem, proofs: Sequence[LowerBound], per_v_ms: Mapping[int, float] | None = None, *,
            ctx: BoundContext = BoundContext(), skip: Skip = "none", floor: LowerBound | None = None) -> Tightened:
    """Raise the bound of each V with ``proofs``: the rule "max over proofs per V, min over V, skip
    a V that cannot change the minimum", stated once.

    Per V (in the problem's order, or by ascending bound with ``skip="dominated"``) every proof
    that applies runs in turn with ``ctx.lower_ms`` = the V's bound so far, and the V keeps the
    largest value. A V is skipped when it cannot change the least bound over V:

    - ``"none"``: never (a first pass, which sets every V's bound);
    - ``"upper"``: its bound is at or above ``ctx.upper_ms`` (a feasible layout is at least as
      fast, so this V is never the least);
    - ``"dominated"``: as ``"upper"``, and the V's are taken by ascending bound; a V is skipped
      when a V that this pass will not raise any more (taken earlier, skipped, or with no
      applicable proof) already has a bound at or below it (the least over V cannot rise above
      that one).

    Args:
        problem: the tuning problem; proofs: the bounds, in order.
        per_v_ms: the bound per V so far (ms); V's missing start at -inf (no proof yet).
        ctx: shared context (``upper_ms``, ``layouts``, ``deadline``); ``lower_ms`` (the V's bound so
            far) and ``others_ms`` (the least bound of the other V's) are set per V.

    Past ``ctx.deadline`` a V that already holds a proof runs no further proof. A V without one
    gets ``floor`` instead (a bound that costs nothing, e.g.
    :class:`~autotune.tuner.bounds.work_floor.WorkFloor`), or, without a floor, its first proof
    runs anyway; either way every V keeps a valid bound. With a floor, every V the clock left
    short ends with at least the floor (a proof the clock cut may have proven less).

    Returns :class:`Tightened` (V's left without any proof are not in ``per_v_ms``).
    """
    per_v = {V: float(per_v_ms.get(V, -np.inf)) if per_v_ms else -np.inf for V in problem.vpp_candidates}
    splits: dict[int, np.ndarray] = {}
    work: dict[str, float] = {}
    met: list[Candidate] = []
    short: set[int] = set()
    upper = ctx.upper_ms

    def runnable(V: int) -> bool:
        if not any(p.applies(problem, V) for p in proofs):
            return False
        return skip == "none" or upper is None or per_v[V] < upper

    floored: set[int] = set()  # the V's the floor itself ran for
    todo = [V for V in problem.vpp_candidates if runnable(V)]
    if skip == "dominated":
        todo.sort(key=lambda V: per_v[V])
    for i, V in enumerate(todo):
        if skip == "dominated":
            settled = [W for W in problem.vpp_candidates if W not in todo[i:]]
            if any(per_v[W] <= per_v[V] for W in settled):
                continue  # the least bound over V is already at or below this V's
        for proof in proofs:
            if not proof.applies(problem, V):
                continue
            lower = per_v[V] if np.isfinite(per_v[V]) else None
            late = ctx.deadline is not None and time.monotonic() > ctx.deadline
            if late and lower is not None:
                short.add(V)
                continue  # past the deadline: a V that holds a proof keeps it (anytime)
            others = [per_v[W] for W in per_v if W != V and np.isfinite(per_v[W])]
            run = floor if late and floor is not None else proof
            out = run.bound(problem, V, replace(ctx, lower_ms=lower, others_ms=min(others) if others else None))
            if run is floor:
                floored.add(V)
            if run is floor or (out is None and ctx.deadline is not None) or (out is not None and out.cut):
                short.add(V)
            if out is None:
                continue
            per_v[V] = max(per_v[V], float(out.bound_ms))
            if out.split is not None and V not in splits:
                splits[V] = out.split
            met.extend(out.layouts)
            for k, v in out.stats.items():
                work[k] = work.get(k, 0) + v
    if floor is not None:  # a V the clock left short holds at least the floor (a cut proof may be below it)
        for V in short - floored:
            if floor.applies(problem, V):
                per_v[V] = max(per_v[V], float(floor.bound(problem, V, ctx).bound_ms))
    return Tightened({V: b for V, b in per_v.items() if b > -np.inf}, splits, work, tuple(met), frozenset(short))


@dataclass(frozen=True)
class Delegate:
    """A :class:`LowerBound` that is ``proof`` in every respect (name, ``applies``, ``bound``): the
    base of wrappers that change one of them (e.g. which V's a pass runs a proof for, or the
    incumbent it prunes by)."""

    proof: LowerBound

    @property
    def name(self) -> str:
        return self.proof.name

    def applies(self, problem: Problem, V: int) -> bool:
        return self.proof.applies(problem, V)

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        return self.proof.bound(problem, V, ctx)


@dataclass(frozen=True)
class Fallback:
    """``primary`` where it applies, else ``secondary`` (one proof per V): e.g. the integer
    program, and the long Lagrangian pass for the schedules it does not cover."""

    primary: LowerBound
    secondary: LowerBound

    @property
    def name(self) -> str:
        return f"{self.primary.name} | {self.secondary.name}"

    def applies(self, problem: Problem, V: int) -> bool:
        return self.primary.applies(problem, V) or self.secondary.applies(problem, V)

    def bound(self, problem: Problem, V: int, ctx: BoundContext) -> BoundOutcome | None:
        first = self.primary if self.primary.applies(problem, V) else self.secondary
        return first.bound(problem, V, ctx)
