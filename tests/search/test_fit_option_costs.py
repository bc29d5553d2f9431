"""The exact fit prices each mini-stage's recompute options on a three-column stand-in layout
(:func:`autotune.tuner.fit._option_costs`); it must give the costs the whole layout gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays, first_layers, stage_costs
from autotune.profile.schema import ModelProfile
from autotune.tuner.fit import _frontiers, _option_costs, _stage_rows, _undominated_options, canon_starts
from autotune.tuner.problem import Problem, even_layers
from autotune.tuner.recompute import recompute_choices


def _profile(n: int) -> ProfileArrays:
    kinds = {"dense": {"fwd_ms": 1.0, "bwd_ms": 2.0, "act_mib": 10.0, "static_mib": 5.0,
                       "full": {"act_mib": 1.0, "extra_ms": 1.0, "workspace_mib": 10.0, "static_delta_mib": -2.0},
                       "select": {"act_mib": 7.0, "extra_ms": 0.1}, "comm": {"act_mib": 8.0, "extra_ms": 0.2}},
             "moe": {"fwd_ms": 1.6, "bwd_ms": 3.2, "act_mib": 14.0, "static_mib": 12.0,
                     "full": {"act_mib": 1.5, "extra_ms": 1.6, "workspace_mib": 14.0},
                     "select": {"act_mib": 10.0, "extra_ms": 0.15}, "comm": {"act_mib": 11.0, "extra_ms": 0.3}}}
    prof = ModelProfile(kinds=kinds, layer_kinds=[("dense", 3), ("moe", n - 3)],
                        head={"static_mib": 20.0, "fwd_ms": 0.5, "bwd_ms": 1.0, "act_mib": 3.0},
                        tail={"static_mib": 30.0, "fwd_ms": 0.7, "bwd_ms": 1.3, "act_mib": 6.0, "workspace_mib": 40.0},
                        p2p_ms=0.1)
    return ProfileArrays.from_profile(prof)


@settings(max_examples=25, deadline=None)
@given(P=st.integers(1, 5), V=st.integers(1, 3), extra=st.integers(0, 6), vshape=st.booleans(),
       seed=st.integers(0, 2**16))
def test_option_costs_equal_whole_layout_costs(P: int, V: int, extra: int, vshape: bool, seed: int) -> None:
    n = P * V + extra + 3
    pr = Problem(_profile(n), P=P, m=8, vpp_candidates=[V])
    rng = np.random.default_rng(seed)
    lay = even_layers(n, P, V)[None].repeat(2, axis=0)
    for b in range(2):
        flat = lay[b].reshape(-1)
        for _ in range(4):
            a, c = rng.integers(0, V * P, 2)
            if flat[a] > 0:
                flat[a] -= 1
                flat[c] += 1
    pos = np.array([np.arange(P), 2 * P - 1 - np.arange(P)]) if vshape and V == 2 else None
    starts = first_layers(lay, pos)
    groups, opts = [], []
    for b in range(2):
        for v in range(V):
            for p in range(P):
                o = recompute_choices(int(lay[b, v, p]), pr.kinds)
                groups.append((None, b, v, p, len(o)))
                opts.append(o)
    got = _option_costs(pr, lay, starts, groups, opts, pos)
    want: list[list[np.ndarray]] = [[], [], [], []]
    for (_, b, v, p, k), o in zip(groups, opts):
        L = np.broadcast_to(lay[b], (k, V, P)).copy()
        R, S, C = (np.zeros((k, V, P), dtype=np.int64) for _ in range(3))
        R[:, v, p], S[:, v, p], C[:, v, p] = o.T
        cs = stage_costs(pr.pa, L, R, S, C, pos=pos)
        for lst, x in zip(want, (cs.act_mib[:, v, p], cs.ws_mib[:, v, p], cs.recompute_ms[:, v, p],
                                 cs.static_mib[:, p] - cs.static_mib[0, p])):
            lst.append(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.concatenate(w), rtol=1e-12, atol=1e-9)


def _runs_profile(runs: list[tuple[str, int]], seed: int) -> ProfileArrays:
    """Two kinds with random (tie-free) costs, laid out in ``runs`` of (kind, count)."""
    rng = np.random.default_rng(seed)
    kinds = {}
    for k in ("a", "b"):
        f, act = float(rng.uniform(0.5, 2.0)), float(rng.uniform(5, 20))
        kinds[k] = {"fwd_ms": f, "bwd_ms": 2 * f, "act_mib": act, "static_mib": float(rng.uniform(1, 10)),
                    "full": {"act_mib": act * rng.uniform(0.05, 0.2), "extra_ms": f * rng.uniform(0.8, 1.0),
                             "workspace_mib": act},
                    "select": {"act_mib": act * rng.uniform(0.6, 0.8), "extra_ms": f * rng.uniform(0.05, 0.15)},
                    "comm": {"act_mib": act * rng.uniform(0.7, 0.9), "extra_ms": f * rng.uniform(0.15, 0.3)}}
    prof = ModelProfile(kinds=kinds, layer_kinds=runs,
                        head={"static_mib": 20.0, "fwd_ms": 0.5, "bwd_ms": 1.0, "act_mib": 3.0},
                        tail={"static_mib": 30.0, "fwd_ms": 0.7, "bwd_ms": 1.3, "act_mib": 6.0,
                              "workspace_mib": 40.0}, p2p_ms=0.1)
    return ProfileArrays.from_profile(prof)


def test_canon_starts_by_hand() -> None:
    """Kinds a a b b b a a b b b (layers 0-9): a two-layer mini-stage starting at 0, 2, 4, 6, 8
    holds a a, b b, b a, a b, b b, whose first places are 0, 2, 4, 1, 2; a three-layer one at 5
    holds a a b, first at 0. One kind: every start is 0."""
    pr = Problem(_runs_profile([("a", 2), ("b", 3), ("a", 2), ("b", 3)], 0), P=5, m=5, vpp_candidates=[1])
    lay = np.array([[[2, 2, 2, 2, 2]]])
    got = canon_starts(pr, lay, first_layers(lay, None))
    np.testing.assert_array_equal(got, [[[0, 2, 4, 1, 2]]])
    lay = np.array([[[5, 3, 2]]])  # starts 0, 5, 8: a a b b b / a a b / b b
    pr3 = Problem(pr.pa, P=3, m=3, vpp_candidates=[1])
    np.testing.assert_array_equal(canon_starts(pr3, lay, first_layers(lay, None)), [[[0, 0, 2]]])
    one = Problem(_runs_profile([("a", 10)], 0), P=5, m=5, vpp_candidates=[1])
    lay = np.array([[[1, 3, 2, 3, 1]]])
    np.testing.assert_array_equal(canon_starts(one, lay, first_layers(lay, None)), np.zeros((1, 1, 5), int))


@settings(max_examples=20, deadline=None)
@given(P=st.integers(2, 4), V=st.integers(1, 3), seed=st.integers(0, 2**16), tight=st.floats(0.5, 1.0))
def test_frontiers_are_those_filtered_at_each_mini_stage_own_first_layer(P: int, V: int, seed: int,
                                                                         tight: float) -> None:
    """_frontiers decides which options are undominated once per canonical mini-stage and prices
    them at each mini-stage's own first layer: on tie-free random costs every entry is exactly
    what filtering all options at the mini-stage's own first layer gives (same options, same
    order, same values), for mini-stages that share a canonical start and for those that do not,
    whatever ran before (one memo for every layout, and a fresh memo per layout)."""
    rng = np.random.default_rng(seed)
    n = P * V * 3 + int(rng.integers(0, 5))
    cut = int(rng.integers(1, n))
    pa = _runs_profile([("a", cut), ("b", n - cut)] + [("a", 2), ("b", 1)] * int(rng.integers(0, 2)), seed)
    n = pa.num_layers
    probe = Problem(pa, P=P, m=2 * P, vpp_candidates=[V])
    lay = even_layers(n, P, V)[None].repeat(4, axis=0)
    for b in range(1, 4):
        flat = lay[b].reshape(-1)
        for _ in range(3):
            a, c = rng.integers(0, V * P, 2)
            if flat[a] > 1:
                flat[a] -= 1
                flat[c] += 1
    z = np.zeros_like(lay[:1])
    peak = probe.evaluate(V, lay[:1], z, z, z, memory_only=True).peak_mib.max()
    pr = Problem(pa, P=P, m=2 * P, hbm_mib=float(peak * tight), vpp_candidates=[V])
    starts = first_layers(lay, None)
    rows = _stage_rows(pr, V)
    shared: dict = {}
    need = [(b, v, p) for b in range(4) for v in range(V) for p in range(P)]
    _frontiers(pr, lay, need, shared, None)
    for b, v, p in need:
        o = recompute_choices(int(lay[b, v, p]), pr.kinds)
        act, ws, rep, sd = _option_costs(pr, lay, starts, [(None, b, v, p, len(o))], [o], None)
        idx = _undominated_options(act, ws, rep, sd, *rows[p], v)
        idx = idx[np.argsort(rep[idx], kind="stable")]
        nu, om = rows[p]
        c = act[:, None] * nu[None, :, v] + ws[:, None] * om[None, :, v] + sd[:, None]
        want = (o[idx], c[idx], rep[idx], sd[idx])
        key = ("xf", V, v, p, int(starts[b, v, p]), int(lay[b, v, p]))
        fresh: dict = {}
        _frontiers(pr, lay[b:b + 1], [(0, v, p)], fresh, None)
        for memo in (shared, fresh):
            for g, w in zip(memo[key], want):
                np.testing.assert_array_equal(g, w)
