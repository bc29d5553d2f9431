"""``fit._extend``, one step of the exact recompute fit's DP, against the step written plainly:
every (partial combination, option) pair in table order, kept when its objective + tail is at
most the cut and every memory row fits, None once more than ``limit`` are kept. The step builds
only the pairs under the cut (the options are sorted by replay) and tests the memory rows one
at a time; the kept pairs, their order and their values must be those of the plain step."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.tuner import fit as F


def _plain(sc, obj, idx, f, wv, rest, tail, room, cut, limit):
    out_s, out_o, out_i = [], [], []
    for a in range(len(sc)):
        for j in range(len(f[0])):
            o = obj[a] + wv * f[2][j]
            s = sc[a] + f[1][j]
            if o + tail <= cut and (s + rest <= room).all():
                out_s.append(s)
                out_o.append(o)
                out_i.append(np.append(idx[a], j))
    if limit is not None and len(out_o) > limit:
        return None
    R, v = sc.shape[1], idx.shape[1]
    return (np.array(out_s).reshape(-1, R), np.array(out_o, dtype=float),
            np.array(out_i, dtype=np.int64).reshape(-1, v + 1))


@pytest.mark.parametrize("seed", range(40))
def test_extend_equals_every_pair_tested(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(F, "EXTEND_BLOCK", int(rng.choice([7, 64, 65_536])))  # blocks split rows too
    n, k, R, v = (int(rng.integers(0, 40)), int(rng.integers(1, 30)), int(rng.integers(1, 6)), int(rng.integers(1, 4)))
    digits = int(rng.integers(0, 2))          # rounded values: many exact ties with the cut and the room
    sc = rng.uniform(0, 100, (n, R)).round(digits)
    obj = rng.uniform(0, 50, n).round(digits)
    idx = rng.integers(0, 50, (n, v))
    rep = np.sort(rng.uniform(0, 30, k).round(digits))
    f = (np.zeros((k, 3), dtype=np.int64), rng.uniform(0, 60, (k, R)).round(digits), rep, np.zeros(k))
    wv = float(rng.choice([1.0, 0.5, 1 / 3]))
    rest = rng.uniform(0, 20, R).round(digits)
    tail, room = round(float(rng.uniform(0, 10)), digits), round(float(rng.uniform(60, 180)), digits)
    cut = np.inf if seed % 5 == 0 else float(rng.uniform(10, 90))
    if seed % 5 == 1 and n:
        cut = float(obj[n // 2] + wv * rep[k // 2] + tail)   # a pair's objective exactly on the cut
    limit = None if seed % 3 else int(rng.integers(0, 60))
    want = _plain(sc, obj, idx, f, wv, rest, tail, room, cut, limit)
    got = F._extend(sc, obj, idx, f, wv, rest, tail, room, cut, limit)
    assert (got is None) == (want is None)
    if want is not None:
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.array_equal(g, w)
