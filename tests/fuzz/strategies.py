"""Hypothesis strategies for hostile and odd input to the config reader.

- :func:`yaml_attacks`: YAML-level attacks as bytes: deep nesting (past the limit and within it),
  alias bombs, recursive aliases, huge scalars (long strings, 5000-digit integers, 1e400), binary
  and invalid UTF-8, control characters, unicode keys and values, several documents, Python tags,
  empty files, top-level scalars and lists, very wide mappings.
- :func:`configs`: training-YAML mappings built around small valid configs, with every offset form
  (scalar, 1-D, 2-D, 3-D, ragged, fractional, negative, huge, bool, strings), every recompute form
  (bool, per-stage list with True/negatives, [vpp][pp] tables with bool rows, string lists, dicts of
  patterns, null, bare numbers), select / comm / exclude patterns (valid, invalid regex,
  pathological), the cross-field knobs (pipeline_stage, micro_batch_num, pp_interleave_num,
  pipeline_interleave, scheduler, seq_split_num, use_legacy, MTP keys, slice activation, the
  comm-recompute booleans, micro_batch_interleave_num, swap), input-limit values, unknown keys, and
  wrong types anywhere in the tree.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

BASE = {
    "context": {"max_device_memory": "8GB"},
    "parallel": {"parallel_mode": 1, "pipeline_config": {"pipeline_interleave": False}},
    "parallel_config": {"data_parallel": 1, "model_parallel": 1, "pipeline_stage": 2, "micro_batch_num": 4},
    "recompute_config": {"recompute": False, "select_recompute": False, "select_comm_recompute": False},
    "model": {"model_config": {"num_layers": 8, "offset": 0, "hidden_size": 256, "num_heads": 8,
                               "seq_length": 128, "vocab_size": 1000, "intermediate_size": 512}},
}

# ---------------------------------------------------------------------------------------------
# scalars and odd values

HUGE_INTS = [2**31, 2**31 - 1, 2**40, -2**33, 10**6, 10**18]
ODD_STRINGS = ["", "x", "1f1b", "1F1B", "zero_bubble_v", "seqpipe", "seqvpp", "seqsmartvpp", "gpipe", "(",
               "feed_forward\\.mul", ".*\\.norm", "mlp\\.mul", "é漢字🙂", "\u202etxt", "null", "True", "60GB",
               "60", "60TB", "-1", "1e400"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 80), st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(ODD_STRINGS),
    st.text(max_size=12),
)


def anything(depth: int = 2) -> st.SearchStrategy:
    """Any YAML value: scalars, lists and mappings nested up to ``depth``."""
    if depth <= 0:
        return scalars
    inner = anything(depth - 1)
    return st.one_of(scalars, st.lists(inner, max_size=6),
                     st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-2, 5)), inner, max_size=4))


# ---------------------------------------------------------------------------------------------
# layout forms


@st.composite
def valid_offset(draw, n: int, pp: int, vpp: int) -> Any:
    """An offset that passes r1.8's checks for N layers on pp × vpp (when one exists)."""
    total = pp * vpp
    base, rem = divmod(n, total)
    flat = [0] * total
    for _ in range(rem):
        flat[draw(st.integers(0, total - 1))] += 1
    for _ in range(draw(st.integers(0, 3))):                 # move single layers around
        a, b = draw(st.integers(0, total - 1)), draw(st.integers(0, total - 1))
        lo = 0 if a in (0, total - 1) else 1
        if base + flat[a] - 1 >= lo:
            flat[a] -= 1
            flat[b] += 1
    if vpp == 1 and draw(st.booleans()):
        return flat
    return [flat[v * pp:(v + 1) * pp] for v in range(vpp)]


def offsets(n: int, pp: int, vpp: int) -> st.SearchStrategy:
    num = st.one_of(st.integers(-6, 6), st.floats(-3, 3), st.booleans())
    return st.one_of(
        valid_offset(n, pp, vpp), valid_offset(n, pp, vpp), st.integers(-3, 3),
        st.lists(num, min_size=max(pp - 1, 0), max_size=pp + 1),
        st.lists(st.lists(num, min_size=pp, max_size=pp), min_size=max(vpp - 1, 1), max_size=vpp + 1),
        st.lists(st.lists(st.lists(st.integers(-1, 1), max_size=2), max_size=2), max_size=2),   # 3-D / ragged
        st.just([[0] * pp, [0] * (pp + 1)]), st.sampled_from([0.5, -0.5, 1.5, [0.5] + [0] * (pp - 1)]),
        anything(1),
    )


def counts(pp: int, vpp: int) -> st.SearchStrategy:
    item = st.one_of(st.integers(-2, 12), st.booleans())
    return st.one_of(
        st.booleans(), st.lists(item, max_size=pp + 2),
        st.lists(st.one_of(st.booleans(), st.lists(item, min_size=max(pp - 1, 0), max_size=pp + 1)),
                 min_size=max(vpp - 1, 0), max_size=vpp + 1),
        st.lists(st.sampled_from(["feed_forward\\.mul", ".*"]), max_size=2), st.none(), st.integers(-2, 9),
        st.floats(0, 3), anything(1),
    )


def valid_counts(pp: int, vpp: int) -> st.SearchStrategy:
    """Count specs MindFormers accepts: bools, per-stage lists, [vpp][pp] tables, string lists."""
    return st.one_of(st.booleans(), st.lists(st.integers(0, 12), max_size=pp),
                     st.lists(st.lists(st.one_of(st.integers(0, 6), st.booleans()), min_size=pp, max_size=pp),
                              min_size=vpp, max_size=vpp))


VALID_PATTERNS = ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu", ".*\\.norm", "mlp\\.mul",
                  "attention_norm\\.norm", ".*\\.mul", "mlp\\.shared_experts\\.mul"]


def valid_pattern_values(pp: int, vpp: int) -> st.SearchStrategy:
    names = st.sampled_from(VALID_PATTERNS)
    return st.one_of(st.booleans(), st.lists(names, max_size=3),
                     st.dictionaries(names, valid_counts(pp, vpp), max_size=3), valid_counts(pp, vpp))


PATTERNS = ["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu", ".*\\.norm", "mlp\\.mul",
            "attention_norm\\.norm", ".*\\.mul", "feed_forward\\.(mul", "[", "a" * 40 + "!", "(a+)+b",
            "(x+x+)+y", "mlp\\.shared_experts\\.mul", "\\.", "é\\.漢"]


def pattern_values(pp: int, vpp: int) -> st.SearchStrategy:
    names = st.sampled_from(PATTERNS)
    return st.one_of(
        st.booleans(), st.lists(names, max_size=3), st.dictionaries(names, counts(pp, vpp), max_size=3),
        counts(pp, vpp), st.dictionaries(st.integers(0, 3), st.booleans(), max_size=2),
    )


# ---------------------------------------------------------------------------------------------
# whole configs

ALL_KEYS = ["model", "parallel_config", "recompute_config", "parallel", "context", "swap_config",
            "use_legacy", "model.model_config", "parallel.pipeline_config"]


def _set(data: dict, dotted: str, value: Any) -> None:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def _paths(node: Any, prefix: str = "") -> list[str]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str) and "." not in k:
                p = f"{prefix}.{k}" if prefix else k
                out.append(p)
                out += _paths(v, p)
    return out


@st.composite
def configs(draw) -> dict:
    """A training-YAML mapping (see the module docstring)."""
    data = copy.deepcopy(BASE)
    pp = draw(st.one_of(st.integers(1, 8), st.sampled_from([16, 64])))
    vpp = draw(st.integers(1, 4))
    n = draw(st.one_of(st.integers(max(pp * vpp - 1, 1), pp * vpp * 4), st.integers(1, 64)))
    mb = draw(st.one_of(st.just(pp * 2), st.integers(1, 32), st.sampled_from([1_000_000, 8192, 4096])))
    mc, pc, rc = data["model"]["model_config"], data["parallel_config"], data["recompute_config"]
    mc["num_layers"], pc["pipeline_stage"], pc["micro_batch_num"] = n, pp, mb
    if vpp > 1 or draw(st.booleans()):
        mc["pp_interleave_num"] = vpp
        data["parallel"]["pipeline_config"]["pipeline_interleave"] = draw(st.sampled_from([True, True, False]))
    hostile = draw(st.integers(0, 2)) == 0          # a third hostile, the rest mostly valid
    mc["offset"] = draw(offsets(n, pp, vpp) if hostile else valid_offset(n, pp, vpp))
    rc["recompute"] = draw(st.one_of(st.just(False), counts(pp, vpp) if hostile else valid_counts(pp, vpp)))
    for key in ("select_recompute", "select_comm_recompute"):
        rc[key] = draw(st.one_of(st.just(False), pattern_values(pp, vpp) if hostile
                                 else valid_pattern_values(pp, vpp)))
    for key in ("select_recompute_exclude", "select_comm_recompute_exclude"):
        if draw(st.integers(0, 4)) == 0:
            rc[key] = draw(pattern_values(pp, vpp) if hostile else valid_pattern_values(pp, vpp))
    knobs = {
        "parallel.pipeline_config.pipeline_scheduler": st.sampled_from(
            ["1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp", "zero_bubble_v", "1F1B", "2f2b", None]),
        "parallel_config.seq_split_num": st.one_of(st.integers(1, 4), st.just(65), scalars),
        "use_legacy": st.one_of(st.booleans(), scalars),
        "model.model_config.mtp_depth": st.integers(0, 3),
        "model.model_config.mtp_num_layers": st.integers(0, 2),
        "recompute_config.recompute_slice_activation": st.one_of(st.booleans(), scalars),
        "recompute_config.mp_comm_recompute": st.one_of(st.booleans(), scalars),
        "recompute_config.parallel_optimizer_comm_recompute": st.one_of(st.booleans(), scalars),
        "micro_batch_interleave_num": st.integers(1, 3),
        "swap_config.swap": st.one_of(st.booleans(), scalars),
        "parallel_config.micro_batch_num": st.one_of(scalars, st.just(None)),
        "parallel_config.pipeline_stage": scalars,
        "model.model_config.num_layers": st.one_of(scalars, st.sampled_from([5000, 100_000])),
        "model.model_config.pp_interleave_num": scalars,
        "parallel.pipeline_config.pipeline_interleave": scalars,
        "context.max_device_memory": st.sampled_from(["60GB", "60", "60TB", "1024GB", "0GB", 64, "lots"]),
        "model.model_config.hidden_size": st.sampled_from([250, 256, 1000]),
        "parallel_config.model_parallel": st.integers(1, 3),
        "parallel_config.context_parallel": st.integers(1, 2),
        "model.model_config.pipeline_stage": st.fixed_dictionaries(
            {"start_stage": st.integers(0, 2), "stage_num": st.integers(0, 3)}),
        # model dims and memory keys the analytic profile reads
        "model.model_config.n_kv_heads": st.one_of(st.sampled_from([1, 2, 8, 16]), scalars),
        "model.model_config.head_dim": st.one_of(st.sampled_from([16, 32, 300]), scalars),
        "model.model_config.intermediate_size": scalars,
        "model.model_config.ffn_dim_multiplier": scalars,
        "model.model_config.multiple_of": scalars,
        "model.model_config.seq_length": st.one_of(st.sampled_from([1, 4096, 10**6, 2**31 - 1]), scalars),
        "model.model_config.vocab_size": st.one_of(st.sampled_from([1, 7, 2**31 - 1]), scalars),
        "model.model_config.num_experts": st.integers(0, 16),
        "model.model_config.num_experts_per_tok": st.integers(0, 20),
        "model.model_config.first_k_dense_replace": st.integers(0, 100),
        "model.model_config.q_lora_rank": st.integers(0, 64),
        "model.model_config.kv_lora_rank": st.integers(0, 64),
        "model.model_config.qk_rope_head_dim": st.integers(0, 64),
        "model.model_config.compute_dtype": scalars,
        "model.model_config.param_init_type": scalars,
        "model.model_config.tie_word_embeddings": scalars,
        "model.model_config.use_flash_attention": scalars,
        "moe_config": st.one_of(st.fixed_dictionaries({"expert_num": st.integers(0, 16),
                                                       "num_experts_chosen": st.integers(0, 20)}), anything(1)),
        "parallel.enable_parallel_optimizer": scalars,
        "parallel.parallel_optimizer_config.optimizer_weight_shard_size": scalars,
        "parallel_config.expert_parallel": st.one_of(st.integers(1, 4), scalars),
        "parallel_config.use_seq_parallel": scalars,
    }
    for path in draw(st.lists(st.sampled_from(sorted(knobs)), max_size=3 if hostile else 1, unique=True)):
        _set(data, path, draw(knobs[path]))
    if hostile and draw(st.integers(0, 3)) == 0:              # an unknown / misspelled key
        sec = draw(st.sampled_from(["parallel_config", "recompute_config", "swap_config", "model.model_config", ""]))
        key = draw(st.sampled_from(["pipline_stage", "recompute_slice", "ofset", "unknown_key", "Ω"]))
        _set(data, f"{sec}.{key}" if sec else key, 1)
    if hostile and draw(st.integers(0, 2)) == 0:              # a wrong type anywhere in the tree
        path = draw(st.sampled_from(_paths(data) + ALL_KEYS))
        _set(data, path, draw(anything(2)))
    return data


# ---------------------------------------------------------------------------------------------
# YAML-level attacks (bytes)


def _bomb(levels: int, width: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\nrecompute_config: {select_recompute: *a%d}\n" % (levels - 1)


@st.composite
def yaml_attacks(draw) -> bytes:
    """A hostile YAML file, as bytes (see the module docstring)."""
    good = "model: {model_config: {num_layers: 8}}\nparallel_config: {pipeline_stage: 2, micro_batch_num: 4}\n"
    kind = draw(st.sampled_from(["deep_flow", "deep_block", "bomb", "recursive", "huge_str", "huge_int",
                                 "huge_float", "binary", "bad_utf8", "control", "unicode", "multi_doc",
                                 "python_tag", "empty", "scalar", "list", "wide", "merge", "dup_anchor"]))
    if kind == "deep_flow":
        d = draw(st.one_of(st.integers(20, 40), st.integers(900, 3000)))
        text = good + "x: " + "[" * d + "]" * d + "\n"
    elif kind == "deep_block":
        d = draw(st.integers(20, 60))
        text = good + "".join("  " * i + f"k{i}:\n" for i in range(d)) + "  " * d + "v: 1\n"
    elif kind == "bomb":
        text = good + _bomb(draw(st.integers(3, 9)), draw(st.integers(2, 12)))
    elif kind == "recursive":
        text = good + "r: &r [1, *r]\n"
    elif kind == "huge_str":
        text = good + "model_name: " + "x" * draw(st.integers(1000, 1_100_000)) + "\n"
    elif kind == "huge_int":
        text = good.replace("num_layers: 8", "num_layers: 1" + "0" * draw(st.integers(10, 6000)))
    elif kind == "huge_float":
        text = good.replace("num_layers: 8", "num_layers: 1e400")
    elif kind == "binary":
        return draw(st.binary(min_size=1, max_size=400))
    elif kind == "bad_utf8":
        return good.encode() + b"\xff\xfe\xc3\x28" + draw(st.binary(max_size=40))
    elif kind == "control":
        text = good + "x: \"\x00\x01\x1b\"\ny: \x07\n"
    elif kind == "unicode":
        key = draw(st.text(min_size=1, max_size=10))
        text = good + f"{key!r}: {draw(st.text(max_size=20))!r}\n"
    elif kind == "multi_doc":
        text = good + "---\n" + good
    elif kind == "python_tag":
        text = good + "x: !!python/object/apply:os.system ['true']\n"
    elif kind == "empty":
        text = draw(st.sampled_from(["", "\n", "# only a comment\n", "---\n", "...\n"]))
    elif kind == "scalar":
        text = draw(st.sampled_from(["42\n", "'text'\n", "null\n", "true\n", "1e400\n"]))
    elif kind == "list":
        text = "- 1\n- 2\n"
    elif kind == "wide":
        text = good + "".join(f"key{i}: {i}\n" for i in range(draw(st.integers(100, 120_000))))
    elif kind == "merge":
        text = good + "b: &b {pipeline_stage: 2}\nparallel_config2: {<<: *b, micro_batch_num: 4}\n"
    else:
        text = good + "a: &x 1\nb: &x 2\nc: *x\n"
    return text.encode("utf-8", "surrogatepass")
