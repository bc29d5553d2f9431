"""Per-op select / comm recompute: pattern matching, hand-computed savings, W_SELECT_NO_MATCH."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from autotune.config.layout import layout_from_values, make_layout
from autotune.cost import ProfileArrays, evaluate_layout
from autotune.cost.select_ops import pattern_matches, pattern_stage_costs
from autotune.errors import ConfigError
from autotune.profile.schema import LayerKind, ModelProfile, OpSaving, RecomputeOption

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3_1_70b" / "train.yaml"


def _profile() -> ModelProfile:
    o = lambda a, ms: OpSaving(act_mib=a, extra_ms=ms)  # noqa: E731
    dense = LayerKind(
        fwd_ms=1.0, bwd_ms=2.0, act_mib=100.0, static_mib=5.0,
        full=RecomputeOption(act_mib=4.0, extra_ms=1.0, workspace_mib=100.0),
        select=RecomputeOption(act_mib=80.0, extra_ms=0.2),      # default op set: silu + mul
        comm=RecomputeOption(act_mib=90.0, extra_ms=0.4),        # default: the two norms
        select_ops={"attention_norm.norm": o(5, 0.05), "attention.flash_attention": o(30, 1.0),
                    "ffn_norm.norm": o(5, 0.05), "feed_forward.w1.matmul": o(10, 0.5),
                    "feed_forward.w1.activation.silu": o(10, 0.1), "feed_forward.w3.matmul": o(10, 0.5),
                    "feed_forward.mul": o(10, 0.1)},
        comm_ops={"attention_norm.norm": o(5, 0.2), "ffn_norm.norm": o(5, 0.2)})
    return ModelProfile(kinds={"dense": dense}, layer_kinds=[("dense", 4)])


def _layout(select=None, comm=None, rec=0):
    lay = make_layout([[4]], [[rec]])
    sel = {k: np.asarray(v, dtype=np.int64) for k, v in (select or {}).items()}
    com = {k: np.asarray(v, dtype=np.int64) for k, v in (comm or {}).items()}
    mx = lambda t: np.max(np.stack(list(t.values())), axis=0) if t else np.zeros((1, 1), np.int64)  # noqa: E731
    return dataclasses.replace(lay, select_patterns=sel, comm_patterns=com, select_vp=mx(sel), comm_vp=mx(com))


def _run(lay):
    costs, warns = pattern_stage_costs(ProfileArrays.from_profile(_profile()), lay)
    return costs.act_mib[0, 0, 0], costs.bwd_ms[0, 0, 0], costs.recompute_ms[0, 0, 0], [w.code for w in warns]


def test_pattern_matching_rules():
    # segments split on the literal "\." and each fully matches one name
    assert pattern_matches("feed_forward\\.mul", "feed_forward.mul")
    assert pattern_matches(".*\\.mul", "feed_forward.mul")
    assert not pattern_matches("feed_forward.mul", "feed_forward.mul")      # one segment vs "feed_forward"
    assert not pattern_matches("feed\\.mul", "feed_forward.mul")            # full match, not search
    # a shorter pattern names a cell: select recomputes the whole cell, comm skips cells
    assert pattern_matches("feed_forward\\.w1", "feed_forward.w1.activation.silu")
    assert not pattern_matches("feed_forward\\.w1", "feed_forward.w1.activation.silu", cells=False)
    assert pattern_matches(".*\\.norm", "ffn_norm.norm", cells=False)
    assert not pattern_matches("a\\.b\\.c", "a.b")
    with pytest.raises(ConfigError) as e:
        pattern_matches("feed_forward\\.(", "feed_forward.mul")
    assert e.value.rule == "R_SELECT_PATTERN"


def test_cell_and_op_patterns_hand_values():
    # layer 0: cell w1 (matmul 10 + silu 10 MiB, 0.5 + 0.1 ms) and flash attention (30, 1.0);
    # layer 1: cell w1 only; layers 2, 3: nothing. act = 4·100 − 50 − 20 = 330 MiB,
    # bwd = 4·2 + 1.6 + 0.6 = 10.2 ms, replay 2.2 ms.
    act, bwd, rec, warns = _run(_layout({"feed_forward\\.w1": [[2]], "attention\\.flash_attention": [[1]]}))
    assert (act, bwd, rec, warns) == (pytest.approx(330.0), pytest.approx(10.2), pytest.approx(2.2), [])


def test_an_op_matched_twice_counts_once():
    # layer 0: feed_forward.mul via both patterns (10 MiB once); layer 1 via ".*\.mul" -> 400 − 20
    act, bwd, _, _ = _run(_layout({"feed_forward\\.mul": [[1]], ".*\\.mul": [[2]]}))
    assert act == pytest.approx(380.0) and bwd == pytest.approx(8.2)


def test_full_recompute_takes_precedence():
    # layer 0 fully recomputed (keeps 4 MiB, +1 ms); layer 1 drops flash attention (70 MiB, +1 ms);
    # layers 2, 3 keep 100 each: act = 4 + 70 + 200 = 274 MiB, bwd = 8 + 1 + 1 = 10 ms
    act, bwd, rec, _ = _run(_layout({"attention\\.flash_attention": [[2]]}, rec=1))
    assert act == pytest.approx(274.0) and bwd == pytest.approx(10.0) and rec == pytest.approx(2.0)


def test_comm_patterns_match_ops_not_cells():
    act, bwd, _, warns = _run(_layout(comm={".*\\.norm": [[1]]}))
    assert act == pytest.approx(390.0) and bwd == pytest.approx(8.4) and warns == []
    # "attention_norm" names a cell: select_comm_recompute skips cells -> no saving, a warning
    act, bwd, _, warns = _run(_layout(comm={"attention_norm": [[4]]}))
    assert act == pytest.approx(400.0) and bwd == pytest.approx(8.0) and warns == ["W_SELECT_NO_MATCH"]


def test_unmatched_pattern_saves_nothing_and_warns():
    lay = _layout({"feed_forward\\.w4": [[4]], "feed_forward\\.mul": [[4]]})
    act, bwd, _, warns = _run(lay)
    assert act == pytest.approx(360.0) and bwd == pytest.approx(8.4)  # only mul: 4 × 10 MiB, 4 × 0.1 ms
    assert warns == ["W_SELECT_NO_MATCH"]
    rep = evaluate_layout(_profile(), lay, micro_batch_num=2)
    assert [w.code for w in rep.warnings] == ["W_SELECT_NO_MATCH"]
    assert "feed_forward\\\\.w4" in rep.warnings[0].message or "feed_forward\\.w4" in rep.warnings[0].message
    assert rep.to_dict()["warnings"][0]["code"] == "W_SELECT_NO_MATCH"
    from autotune.emit.render import render_report
    assert "W_SELECT_NO_MATCH" in render_report(rep)


def test_default_op_set_equals_aggregate_options():
    # search layouts carry only select_vp / comm_vp: the aggregate options (default op set)
    pa = ProfileArrays.from_profile(_profile())
    bare = make_layout([[4]], [[0]], [[2]], [[3]])
    costs, warns = pattern_stage_costs(pa, bare)
    # 2 layers select+comm ("both": 80 + 90 − 100 = 70), 1 comm-only (90), 1 none (100)
    assert costs.act_mib[0, 0, 0] == pytest.approx(70 * 2 + 90 + 100) and warns == []
    # one stage: 1F1B keeps min(p − i, m) = 1 micro-batch in flight
    assert evaluate_layout(pa, bare, micro_batch_num=2).stages[0].act_peak_mib == pytest.approx(330.0)
    # the default legacy patterns matched against the op list give the same numbers
    lay = layout_from_values(4, 1, 1, select_recompute=[[2]], select_comm_recompute=[[3]])
    assert sorted(lay.select_patterns) == sorted(["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"])
    costs2, warns2 = pattern_stage_costs(pa, lay)
    assert costs2.act_mib[0, 0, 0] == pytest.approx(costs.act_mib[0, 0, 0])
    assert costs2.bwd_ms[0, 0, 0] == pytest.approx(costs.bwd_ms[0, 0, 0]) and warns2 == []


def test_mcore_defaults_on_a_legacy_op_list_warn():
    lay = layout_from_values(4, 1, 1, select_recompute=True, use_legacy=False)
    act, _, _, warns = _run(lay)
    assert act == pytest.approx(400.0)
    assert set(warns) == {"W_SELECT_NO_MATCH"} and len(warns) == 4


def test_analytic_op_list_hand_values():
    from autotune.config.training import load_config
    from autotune.profile.analytic import analytic_profile
    from autotune.units import BYTES_PER_MIB

    cfg = load_config(EXAMPLE)
    k = analytic_profile(cfg).kinds["dense"]
    # Llama-3.1-70B, s = 8192, b = 1, f = 28672, t = 8, bf16: the w1 cell (gate output + SiLU
    # output) frees 2 · 2·8192·28672/8 B = 117,440,512 B = 112 MiB
    pa = ProfileArrays.from_profile(analytic_profile(cfg))
    w1 = sum(o.act_mib for n, o in k.select_ops.items() if pattern_matches("feed_forward\\.w1", n))
    assert w1 * BYTES_PER_MIB == 2 * 2 * 8192 * 28672 / 8 == 117_440_512
    # the default patterns reproduce the aggregate select / comm options
    sel = sum(o.act_mib for n, o in k.select_ops.items()
              if pattern_matches("feed_forward\\.mul", n)
              or pattern_matches("feed_forward\\.w1\\.activation\\.silu", n))
    assert sel == pytest.approx(k.act_mib - k.select.act_mib)
    assert sum(o.act_mib for o in k.comm_ops.values()) == pytest.approx(k.act_mib - k.comm.act_mib)
    assert pa.has_op_tables


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PATS = ["feed_forward\\.w1", "feed_forward\\.mul", ".*\\.mul", "attention\\.flash_attention",
         ".*_norm\\.norm", "feed_forward\\.w9"]


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 4), min_size=len(_PATS), max_size=len(_PATS)),
       extra=st.integers(0, len(_PATS) - 1), rec=st.integers(0, 4))
def test_more_recompute_never_keeps_more(counts, extra, rec):
    """Raising one pattern's count never raises kept activation nor lowers backward time."""
    base = {p: [[c]] for p, c in zip(_PATS, counts)}
    more = dict(base)
    more[_PATS[extra]] = [[min(4, counts[extra] + 1)]]
    a0, b0, _, _ = _run(_layout(base, rec=rec))
    a1, b1, _, _ = _run(_layout(more, rec=rec))
    assert a1 <= a0 + 1e-9 and b1 >= b0 - 1e-9
    assert 0 <= a1 <= 400.0


# ---- every match runs under the regex timeout and still answers as re did (fuzzing: ReDoS) --------

def _re_matches(pattern: str, path: str, cells: bool) -> bool:
    """The matcher before the ReDoS fix: plain ``re.fullmatch`` per segment (no timeout)."""
    import re
    segs, names = pattern.split("\\."), path.split(".")
    if len(segs) > len(names) or (not cells and len(segs) != len(names)):
        return False
    return all(re.fullmatch(s, n) is not None for s, n in zip(segs, names))


_PIECES = ["feed_forward", "attention", "mlp", "w1", "w[0-9]", "mul", ".*", ".+", "norm", ".*norm",
           "(w1|w3)", "[a-z_]+", "activation", "silu", "self_attention", "input_layernorm", "q?k?v?",
           "attention_norm", "linear_fc1", "experts", "ffn_norm", "\\w+_norm"]


def _all_paths() -> list[str]:
    from autotune.config.cells import FAMILIES
    return sorted({p for f in FAMILIES for p in f.paths})


@settings(max_examples=150, deadline=None)
@given(segs=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3), cells=st.booleans())
def test_budgeted_matching_answers_as_re_did(segs, cells):
    """Normal patterns match the same cells and ops as before (``re``), across every family's paths;
    ``pattern_matches`` (per-op pricing) and ``cells.matches`` (W_SELECT_NO_MATCH) agree."""
    from autotune.config.cells import matches
    pattern = "\\.".join(segs)
    for path in _all_paths():
        want = _re_matches(pattern, path, cells)
        assert pattern_matches(pattern, path, cells=cells) is want, (pattern, path)
        assert matches(pattern, path, cells=cells) is want, (pattern, path)


def test_known_patterns_hit_the_same_llama_cells():
    from autotune.config.cells import FAMILIES, pattern_hits
    llama = next(f for f in FAMILIES if f.name == "llama")
    for pat, cells in (("feed_forward\\.mul", True), ("feed_forward\\.w1\\.activation\\.silu", True),
                       (".*\\.norm", False), ("feed_forward", True), ("attention\\.w[qkv]", True)):
        assert pattern_hits(llama, pat, cells=cells) == [p for p in llama.paths if _re_matches(pat, p, cells)]
    assert pattern_hits(llama, ".*\\.norm", cells=False) == ["attention_norm.norm", "ffn_norm.norm"]
