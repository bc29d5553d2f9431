"""The exact fit prices each mini-stage's recompute options on a three-column stand-in layout
(:func:`autotune.tuner.fit._option_costs`); it must give the costs the whole layout gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.cost.inputs import ProfileArrays, first_layers, stage_costs
from autotune.profile.schema import ModelProfile
from autotune.tuner.fit import _option_costs
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
