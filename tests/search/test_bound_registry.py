"""Every registered lower bound is a proof: one parametrised test runs each bound of
``autotune.tuner.bounds.REGISTRY`` (every proof of every pass, both sides of a Fallback) and the
toy example of docs/search.md on small problems of every schedule family, against the optimum of
the enumerated space. A "provable" bound above it is a defect."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from autotune.tuner.bounds import REGISTRY, BoundContext, BoundOutcome, Fallback, LowerBound, Pass, tighten
from autotune.tuner.exact import exact_optimum
from autotune.tuner.problem import Problem
from tests.search.test_exact_bounds import _random_problem

DOCS = Path(__file__).resolve().parents[2] / "docs" / "search.md"


def docs_toy_bound() -> LowerBound:
    """The toy bound of docs/search.md ("Adding a bound"), executed from the page itself."""
    code = re.search(r"```python\n(# autotune/tuner/bounds/busiest_stage\.py\n.*?)```", DOCS.read_text(),
                     re.S).group(1)
    ns: dict = {}
    exec(compile(code, str(DOCS), "exec"), ns)  # noqa: S102 - our own documentation's example
    return ns["BusiestStage"]()


def registered() -> list[LowerBound]:
    out: list[LowerBound] = []
    for p in REGISTRY:
        for proof in p.proofs:
            out += [proof.primary, proof.secondary] if isinstance(proof, Fallback) else [proof]
    return out


BOUNDS = registered() + [docs_toy_bound()]

#: (name, _random_problem arguments): every schedule family, V = 1..3, tight and loose budgets,
#: the three recompute kinds, negative static deltas.
CASES = {
    "1f1b V1 sel/comm": dict(seed=1, N=6, P=2, V=1, kinds=("full", "select", "comm"), tight=0.9),
    "1f1b V2 full": dict(seed=2, N=8, P=2, V=2, kinds=("full",), tight=1.0),
    "1f1b V3 tight": dict(seed=8, N=8, P=2, V=3, kinds=("full", "select"), tight=0.8),
    "less memory V2": dict(seed=3, N=8, P=2, V=2, kinds=("full", "select", "comm"), tight=0.8,
                           schedule="1f1b_less_memory"),
    "zero_bubble_v": dict(seed=4, N=6, P=2, V=2, kinds=("full",), tight=1.0, schedule="zero_bubble_v", m=4),
    "seqpipe k2": dict(seed=5, N=6, P=2, V=1, kinds=("select",), tight=1.0, schedule="seqpipe", split=2),
    "gpipe P3": dict(seed=6, N=6, P=3, V=1, kinds=("full",), tight=0.9, schedule="gpipe"),
    "static deltas V2": dict(seed=7, N=8, P=2, V=2, kinds=("full", "select"), tight=1.0, static_delta=True),
    "1f1b P4 V2": dict(seed=9, N=10, P=4, V=2, kinds=("full", "select", "comm"), tight=0.9),
}


@functools.cache
def case(name: str) -> tuple[Problem, int, object]:
    """(problem, V, the enumerated optimum candidate or None when nothing fits)."""
    a = dict(CASES[name])
    seed, N, P, V, kinds, tight = (a.pop(k) for k in ("seed", "N", "P", "V", "kinds", "tight"))
    problem = _random_problem(seed, N, P, V, kinds, tight, **a)
    return problem, V, exact_optimum(problem).best


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: f"{b.name}-{getattr(b, 'iters', '')}")
def test_registered_bound_is_below_the_enumerated_optimum(bound: LowerBound, name: str) -> None:
    problem, V, best = case(name)
    if best is None:
        pytest.skip("nothing fits this budget: every bound is vacuously valid")
    if not bound.applies(problem, V):
        pytest.skip(f"{bound.name} does not apply to {problem.schedule} with V = {V}")
    opt = best.step_ms
    for upper in (opt, 1.5 * opt, None):
        for layouts in ((), (best,)):
            out = bound.bound(problem, V, BoundContext(upper_ms=upper, layouts=layouts))
            if out is None:
                continue  # a work cap (or no incumbent for the device DP): no proof, nothing to check
            assert out.bound_ms <= opt * (1 + 1e-9), (bound.name, upper, len(layouts), out.bound_ms, opt)
            if out.split is not None:
                assert out.split.shape == (V, problem.P) and out.split.sum() == problem.N


def test_tighten_keeps_the_largest_proof_and_the_least_v() -> None:
    """tighten over the first pass plus the docs' toy bound: per V the max of the proofs (the toy
    one alone is weaker here), the bound the min over V, and still below the optimum."""
    problem, V, best = case("1f1b V2 full")
    first = REGISTRY[0]
    alone = tighten(problem, first.proofs, ctx=BoundContext(upper_ms=best.step_ms))
    toy = tighten(problem, (docs_toy_bound(),))
    both = tighten(problem, first.proofs + (docs_toy_bound(),), ctx=BoundContext(upper_ms=best.step_ms))
    assert both.per_v_ms[V] == max(alone.per_v_ms[V], toy.per_v_ms[V])
    assert both.bound_ms == min(both.per_v_ms.values()) <= best.step_ms * (1 + 1e-9)
    assert toy.bound_ms < alone.bound_ms  # the toy bound is weak: the others are tighter here


def _three_v_problem() -> Problem:
    """A pp 2 problem with pp_interleave_num candidates 1, 2, 3 (for :func:`tighten`'s rules)."""
    problem = _random_problem(2, 12, 2, 1, ("full",), 1.0)
    return Problem(problem.pa, P=2, m=problem.m, hbm_mib=problem.hbm_mib, vpp_candidates=(1, 2, 3),
                   kinds=("full",))


class _Recording:
    """A toy proof for V > 1 that raises the V's bound by ``step`` ms and records (V, ctx.others_ms)."""

    name = "recording"

    def __init__(self, step: float = 1.0) -> None:
        self.step = step
        self.seen: list[tuple[int, float | None]] = []

    @property
    def calls(self) -> list[int]:
        return [V for V, _ in self.seen]

    def applies(self, problem: Problem, V: int) -> bool:
        return V > 1

    def bound(self, problem, V, ctx):
        self.seen.append((V, ctx.others_ms))
        return BoundOutcome((ctx.lower_ms or 0.0) + self.step)


def test_tighten_skips_a_v_that_cannot_change_the_minimum() -> None:
    """With skip="dominated" the V's are taken by ascending bound and a V is not raised when a V
    that will not be raised already holds a bound at or below it; "upper" skips a V whose bound
    is at or above the incumbent; "none" raises every V."""
    problem = _three_v_problem()
    per_v = {1: 10.0, 2: 12.0, 3: 11.0}
    c = _Recording()
    t = tighten(problem, (c,), per_v, skip="dominated")
    # V = 1 is never raised (no proof applies) and holds 10 <= both: nothing can change the minimum
    assert c.calls == [] and t.per_v_ms == per_v
    c = _Recording()
    t = tighten(problem, (c,), {1: 20.0, 2: 12.0, 3: 11.0}, skip="dominated")
    assert c.calls == [3]  # then V = 2: V = 3 (now 12) is at or below it
    assert t.per_v_ms == {1: 20.0, 2: 12.0, 3: 12.0} and t.bound_ms == 12.0
    c = _Recording()
    tighten(problem, (c,), {1: 20.0, 2: 12.0, 3: 11.0}, ctx=BoundContext(upper_ms=11.5), skip="upper")
    assert c.calls == [3]
    c = _Recording()
    tighten(problem, (c,), {1: 20.0, 2: 12.0, 3: 11.0}, skip="none")
    assert c.calls == [2, 3]


def test_tighten_tells_each_v_the_least_bound_of_the_others() -> None:
    """ctx.others_ms is the least bound the other V's hold when a V's proofs run (a bound may
    spend work past its base cap only below it, milp's extend_below), None when no other V
    holds one; it follows the bounds raised earlier in the same pass."""
    problem = _three_v_problem()
    c = _Recording(5.0)
    tighten(problem, (c,), {1: 20.0, 2: 12.0, 3: 11.0}, skip="none")
    assert c.seen == [(2, 11.0), (3, 17.0)]  # V = 2 sees min(20, 11); V = 3 sees min(20, 12 + 5)
    c = _Recording(5.0)
    tighten(problem, (c,), {2: 12.0}, skip="none")
    assert c.seen == [(2, None), (3, 17.0)]  # no other V held a proof yet


def test_registry_passes_are_named_and_ordered() -> None:
    """The first pass bounds every V (path DP for V = 1 then the split scan where V = 1 has few
    splits, the split LP where a V > 1 has few splits, the
    Lagrangian for V > 1: no skip; the split LP first so that its split is the pass's seed); the
    later ones run against the incumbent, the stage DP again after the integer program (so that
    its split does not join the program's starting layouts), then the pair DP (V = 2), the path
    LP last (only where a V's gap is still over 2 %)."""
    assert isinstance(REGISTRY[0], Pass) and REGISTRY[0].skip == "none"
    names = [b.name for b in REGISTRY[0].proofs]
    assert names == ["path DP", "split scan", "split LP", "Lagrangian", "stage DP"]
    assert [p.skip for p in REGISTRY[1:]] == ["upper", "dominated", "upper", "dominated", "dominated"]
    assert [p.name for p in REGISTRY[1:]] == ["device DP", "integer program", "stage DP", "pair DP", "path LP"]
