"""Every multiset of n layers over C recompute classes, as count vectors (stars and bars), and the
device DP's per-type chunk options built from them: the same rows as enumerating each multiset
with itertools (the way they were built before, 22 s of the bound phase on DeepSeek-33B 16k)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune.tuner.bounds._kinds import ChunkOptions, LayerTypes, class_counts
from tests.search.test_weighted_least import _problem


@pytest.mark.parametrize("C", [1, 2, 3, 5])
@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_class_counts_are_every_multiset_once(n: int, C: int) -> None:
    got = sorted(map(tuple, class_counts(n, C).tolist()))
    want = sorted(tuple(np.bincount(c, minlength=C).tolist())
                  for c in itertools.combinations_with_replacement(range(C), n))
    assert got == want
    assert len(got) == len(set(got))


@pytest.mark.parametrize("n", [1, 3, 6])
def test_chunk_options_match_the_enumeration(n: int) -> None:
    lay = LayerTypes(_problem(0.1, 0.4, 0.5), 2).layers[0]
    per = np.stack([lay.act_mib, lay.sdelta_mib, lay.extra_ms], axis=1)
    rows = np.array([np.append(per[list(c)].sum(axis=0), lay.ws_mib[list(c)].max())
                     for c in itertools.combinations_with_replacement(range(per.shape[0]), n)])
    from autotune.cost.dominance import pareto_mask
    want = rows[pareto_mask(rows, tol=1e-9, keep_ties=True)]
    got = ChunkOptions(LayerTypes(_problem(0.1, 0.4, 0.5), 2))._single(0, n)
    key = lambda a: sorted(map(tuple, np.round(a, 9).tolist()))  # noqa: E731
    assert key(got) == key(want)
