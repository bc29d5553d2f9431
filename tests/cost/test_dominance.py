"""The Pareto filter (autotune/cost/dominance.py) against its definitions, row by row: the default
rule (a row is dropped when an earlier row of the lexicographic order is within ``tol`` of it or
below it in every column) and ``keep_ties`` (dropped when another row is <= it + tol everywhere and
< it - tol somewhere). Small integer values make ties and duplicate rows common."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost import dominance
from autotune.cost.dominance import pareto_mask, pareto_order


def _default_rule(vals: np.ndarray, tol: float) -> np.ndarray:
    order = np.lexsort(vals.T[::-1])
    s = vals[order]
    keep = np.array([not any((s[j] - tol <= s[i]).all() for j in range(i)) for i in range(len(s))], dtype=bool)
    out = np.zeros(len(s), dtype=bool)
    out[order[keep]] = True
    return out


def _keep_ties_rule(vals: np.ndarray, tol: float) -> np.ndarray:
    n = len(vals)
    return np.array([not any((vals[o] <= vals[i] + tol).all() and (vals[o] < vals[i] - tol).any()
                             for o in range(n) if o != i) for i in range(n)], dtype=bool)


_tables = st.tuples(st.integers(1, 300), st.integers(1, 5), st.integers(0, 10_000), st.sampled_from([3, 8, 1000]))


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(dominance, "BLOCK", 16)  # many blocks on small tables


@settings(max_examples=60, deadline=None)
@given(_tables, st.sampled_from([0.0, 0.5, 1.0, 1e-9]))
def test_default_rule(table, tol):
    n, d, seed, span = table
    vals = np.random.default_rng(seed).integers(0, span, size=(n, d)).astype(float)
    want = _default_rule(vals, tol)
    np.testing.assert_array_equal(pareto_mask(vals, tol=tol), want)
    got = pareto_order(vals, tol=tol)
    assert sorted(got.tolist()) == np.nonzero(want)[0].tolist()
    assert (np.diff(vals[got][:, 0]) >= 0).all()  # column 0 ascending


@settings(max_examples=60, deadline=None)
@given(_tables, st.sampled_from([0.0, 0.5, 1.0, 1e-9]))
def test_keep_ties_rule(table, tol):
    n, d, seed, span = table
    vals = np.random.default_rng(seed).integers(0, span, size=(n, d)).astype(float)
    np.testing.assert_array_equal(pareto_mask(vals, tol=tol, keep_ties=True), _keep_ties_rule(vals, tol))


def test_hand_example():
    """(1,5,5) and (5,1,5) and (5,5,1) are a front; (2,6,6) is dominated by the first; the
    duplicate (1,5,5) goes under the default rule and stays with keep_ties."""
    v = np.array([[2, 6, 6], [1, 5, 5], [5, 1, 5], [5, 5, 1], [1, 5, 5]], dtype=float)
    assert pareto_mask(v).tolist() == [False, True, True, True, False]
    assert pareto_mask(v, keep_ties=True).tolist() == [False, True, True, True, True]


@settings(max_examples=40, deadline=None)
@given(st.integers(65, 1500), st.integers(3, 32), st.integers(0, 10_000), st.sampled_from([2, 6, 1000, 10**6]))
def test_bitset_sweep_matches_block_sweep(n, d, seed, span):
    """tol = 0 takes the bitset sweep: on tables past one 64-row word, with many columns and ties
    (span 2 makes most rows equal somewhere) and correlated columns (a shared base, as the exact
    recompute fit's partial sums), it keeps the rows of the block sweep."""
    rng = np.random.default_rng(seed)
    vals = rng.integers(0, span, size=(n, 1)) + rng.integers(0, span, size=(n, d))
    s = vals[np.lexsort(vals.T[::-1])].astype(float)
    np.testing.assert_array_equal(dominance._sweep_bitsets(s), dominance._sweep_blocks(s, 0.0))


def test_bitset_sweep_by_hand():
    """Rows k = (k, 70 - k, 70 - k), k = 0..69 (past one 64-row word), are a front. Appended:
    (3, 70, 70) is dominated by (3, 67, 67); (69.5, 0, 0) is after every row in column 0 and below
    them in the others, so it stays; a copy of (5, 65, 65) goes (the first of equal rows is kept)."""
    front = np.array([[k, 70 - k, 70 - k] for k in range(70)], dtype=float)
    extra = np.array([[3, 70, 70], [69.5, 0, 0], [5, 65, 65]], dtype=float)
    keep = pareto_mask(np.concatenate([front, extra]))
    assert keep[:70].all()
    assert keep[70:].tolist() == [False, True, False]


@settings(max_examples=30, deadline=None)
@given(st.integers(1024, 3000), st.integers(3, 12), st.integers(0, 10_000), st.sampled_from([2, 50, 10**6]),
       st.sampled_from([0.0, 0.9, 0.99]))
def test_blocks_first_then_bitsets(n, d, seed, span, rho):
    """From BLOCKS_FIRST_ROWS rows a tol = 0 table takes the block sweep until its front passes
    BLOCKS_FIRST_FRONT rows, then the bitsets: either way the rows kept are the bitset sweep's
    (small fronts from correlated columns, large ones from independent columns)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, span, size=(n, 1)).astype(float)
    vals = np.floor(rho * base + (1 - rho) * rng.integers(0, span, size=(n, d)))
    s = vals[np.lexsort(vals.T[::-1])]
    want = dominance._sweep_bitsets(s)
    capped = dominance._sweep_blocks(s, 0.0, max_front=dominance.BLOCKS_FIRST_FRONT)
    assert capped is None if want.sum() > dominance.BLOCKS_FIRST_FRONT else (capped == want).all()
    got = np.zeros(n, dtype=bool)
    got[dominance.pareto_order(vals)] = True
    order = np.lexsort(vals.T[::-1])
    np.testing.assert_array_equal(got[order], want)


def test_blocks_first_stop_by_hand():
    """1,100 rows k = (k, 1100 - k, 0): all on the front, so the capped block sweep stops (None)
    after its second block of 256 (512 rows kept, more than 256); the same rows with column 1
    ascending too are a chain: one row kept, no stop."""
    k = np.arange(1100, dtype=float)
    anti = np.stack([k, 1100 - k, np.zeros_like(k)], axis=1)
    chain = np.stack([k, k, np.zeros_like(k)], axis=1)
    assert dominance._sweep_blocks(anti, 0.0, max_front=256) is None
    kept = dominance._sweep_blocks(chain, 0.0, max_front=256)
    assert kept is not None and kept.tolist() == [True] + [False] * 1099
    assert pareto_mask(anti).all() and pareto_mask(chain).sum() == 1
