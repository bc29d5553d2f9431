"""Every multiset of n layers over C recompute classes, as count vectors (stars and bars), and the
device DP's per-type chunk options built from them: the same rows as enumerating each multiset
with itertools (the way they were built before, 22 s of the bound phase on DeepSeek-33B 16k), and,
since they are built layer by layer per workspace level (``front_counts``), the same array — rows,
order and bits — as filtering every multiset (``_enumerated``, the brute force kept here)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.cost.dominance import pareto_mask
from autotune.tuner.bounds._kinds import ChunkOptions, LayerTypes, class_counts, front_counts
from autotune.tuner.bounds._relax import RelaxedLayer
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
    want = rows[pareto_mask(rows, tol=1e-9, keep_ties=True)]
    got = ChunkOptions(LayerTypes(_problem(0.1, 0.4, 0.5), 2))._single(0, n)
    key = lambda a: sorted(map(tuple, np.round(a, 9).tolist()))  # noqa: E731
    assert key(got) == key(want)


def _enumerated(lay: RelaxedLayer, n: int) -> np.ndarray:
    """The chunk options as they were built before the DP (brute force): every multiset of n classes
    (class_counts order), then the keep-ties Pareto filter."""
    per = np.stack([lay.act_mib, lay.sdelta_mib, lay.extra_ms], axis=1)
    if n == 0:
        return np.zeros((1, 4))
    cnt = class_counts(n, per.shape[0])
    ws = np.where(cnt > 0, lay.ws_mib[None, :], -np.inf).max(axis=1)
    arr = np.concatenate([cnt @ per, ws[:, None]], axis=1)
    return arr[pareto_mask(arr, tol=1e-9, keep_ties=True)]


def _random_layer(seed: int) -> RelaxedLayer:
    """C in 1..6 classes; activation from few integer MiB (ties), replay r·k/4 with one float r (sums
    of different multisets equal in reals, not always in float64), static deltas zero or from few
    values (negative too, sometimes non-integer), workspaces from few values (equal ones)."""
    rng = np.random.default_rng(seed)
    C = int(rng.integers(1, 7))
    act = rng.choice([0.0, 120.0, 834.0, 1050.0, 1474.0, 1690.0], size=C)
    extra = float(rng.uniform(0.3, 3.0)) * rng.integers(0, 101, size=C) / 4
    kind = seed % 3
    values = [-64.0, 0.0, 32.0, 939.0] if kind == 1 else [-0.1, 0.0, 0.7, 3.3]
    sd = np.zeros(C) if kind == 0 else rng.choice(values, size=C)
    ws = rng.choice([0.0, 0.0, 512.0, 1690.0], size=C)
    return RelaxedLayer(0.0, 0.0, 0.0, act, extra, sd, ws)


def _options(lay: RelaxedLayer) -> ChunkOptions:
    return ChunkOptions(SimpleNamespace(layers=(lay,)))


@pytest.mark.parametrize("seed", range(40))
def test_chunk_options_dp_is_the_enumeration(seed: int) -> None:
    """Same rows, same order, same bits as filtering every multiset (random tables with ties)."""
    lay = _random_layer(seed)
    for n in (0, 1, 2, 3, 5, 8, 12):
        assert np.array_equal(_options(lay)._single(0, n), _enumerated(lay, n)), (seed, n)


def test_chunk_options_dp_on_qwen_32b_layer() -> None:
    """The relaxed layer of MindFormers Qwen2.5-32B 32k (pipeline_stage 2): replay r, 6.25r, 7.25r, 25r
    (real ties the float sums break), workspace only on full recompute; 168 options of 16 layers."""
    r = 1.5246600269790491
    lay = RelaxedLayer(0.0, 0.0, 0.0, np.array([1690.0, 1474.0, 1050.0, 834.0, 120.0]),
                       np.array([0.0, r, 9.5291251686191032, 11.053785195598152, 38.116500674476399]),
                       np.zeros(5), np.array([0.0, 0.0, 0.0, 0.0, 1690.0]))
    opts = _options(lay)
    for n in (4, 9, 16, 24):
        assert np.array_equal(opts._single(0, n), _enumerated(lay, n)), n
    assert opts._single(0, 16).shape == (168, 4)


def test_front_counts_falls_back_when_sums_are_coarse() -> None:
    """Sums whose float error is not far below the tolerance (1e7 MiB, not on a grid): no DP, the
    enumeration, same rows."""
    per = np.array([[1e7 / 3, 0.0, 0.0], [2e7 / 7, 0.0, 1.0], [1e6 / 9, 0.0, 5.0]])
    ws = np.zeros(3)
    assert front_counts(per, ws, 6, 1e-9) is None
    lay = RelaxedLayer(0.0, 0.0, 0.0, per[:, 0], per[:, 2], per[:, 1], ws)
    assert np.array_equal(_options(lay)._single(0, 6), _enumerated(lay, 6))
    assert front_counts(per[:, 1:], ws, 6, 1e-9) is not None


def _get_as_before(opts: ChunkOptions, counts: tuple[int, ...]) -> np.ndarray:
    """``ChunkOptions.get`` as it was built before it took the first type's front as it is: the
    zero row plus each type's front in turn, keep-ties filtered after each."""
    acc = np.zeros((1, 4))
    for t, n in enumerate(counts):
        if n or t == 0:
            g = opts._single(t, int(n))
            acc = np.concatenate([(acc[:, None, :3] + g[None, :, :3]).reshape(-1, 3),
                                  np.maximum(acc[:, None, 3:], g[None, :, 3:]).reshape(-1, 1)], axis=1)
            acc = acc[pareto_mask(acc, tol=1e-9, keep_ties=True)]
    return acc


@pytest.mark.parametrize("seed", range(12))
def test_chunk_options_get_is_the_filtered_sum(seed: int) -> None:
    """Same rows, order and bits as the zero row plus every type's front, filtered after each
    (the first filter keeps every row of a front it has filtered, so it is skipped); one, two and
    three types, empty types among them."""
    layers = tuple(_random_layer(seed * 3 + i) for i in range(3))
    opts = ChunkOptions(SimpleNamespace(layers=layers))
    for counts in [(0,), (4,), (0, 3), (2, 0), (3, 2), (1, 0, 2), (0, 0, 0), (2, 2, 2)]:
        assert np.array_equal(opts.get(counts), _get_as_before(opts, counts)), (seed, counts)


def test_chunk_options_are_built_once_per_search() -> None:
    """The layer types' layers do not depend on V, so every V's device DP shares one ChunkOptions
    (kept in the problem's fit cache): MindFormers' GPT-2 xl config (48 layers, pipeline_stage 1,
    vpp 2-4 searched) built the same 48 chunk fronts once per V, 76 of its 86 CPU s."""
    from autotune.tuner.bounds._kinds import chunk_options

    problem = _problem(0.1, 0.4, 0.5)
    a = chunk_options(problem, LayerTypes(problem, 2))
    b = chunk_options(problem, LayerTypes(problem, 3))
    assert a is b
    assert all(np.array_equal(x.act_mib, y.act_mib) and x.fwd_ms == y.fwd_ms
               for x, y in zip(LayerTypes(problem, 2).layers, LayerTypes(problem, 3).layers))
