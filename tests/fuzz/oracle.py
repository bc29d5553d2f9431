"""An independent oracle of what MindFormers r1.8.0 / master rejects, written from
``shared/spec/mindformers-layer-setting.md`` alone (§1.2–1.6, §2, §3.1–3.5, §4.1–4.2, §7). It does
not import autotune's config code: the fuzz suite compares the two, and an input autotune accepts but
this oracle rejects is a *silent accept*.

It only answers "rejected, and why" for the rules the spec states; where the spec is silent it
answers "accepted" (autotune may be stricter: its strict mode also refuses what MindFormers gets
wrong silently, and its input limits; those are not silent accepts). Conventions taken from
``shared/cases/README.md`` where the spec leaves a default open:

- ``parallel.pipeline_config.pipeline_interleave`` absent = true when ``pp_interleave_num`` > 1;
- ``parallel_config.micro_batch_num`` absent = not given: the micro_batch_num rules are not applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import regex

SCHEDULERS = {"1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp", "zero_bubble_v"}
# §7 / §1.6: the YAML template refuses unknown keys in these sections (KeyError)
TEMPLATE = {
    "parallel_config": {"data_parallel", "model_parallel", "context_parallel", "expert_parallel",
                        "pipeline_stage", "micro_batch_num", "seq_split_num", "use_seq_parallel",
                        "optimizer_shard", "gradient_aggregation_group", "vocab_emb_dp",
                        "context_parallel_algo", "ulysses_degree_in_cp", "mem_coeff"},
    "recompute_config": {"recompute", "select_recompute", "parallel_optimizer_comm_recompute",
                         "select_comm_recompute", "mp_comm_recompute", "recompute_slice_activation",
                         "select_recompute_exclude", "select_comm_recompute_exclude"},
    "swap_config": {"swap", "layer_swap", "op_swap", "default_prefetch"},
}
DEFAULTS = {  # §4.1 default patterns (legacy, mcore)
    "select_recompute": (["feed_forward\\.mul", "feed_forward\\.w1\\.activation\\.silu"],
                         ["mlp\\.shared_experts\\.mul", "mlp\\.shared_experts\\.activation_func\\.silu",
                          "mlp\\.mul", "mlp\\.activation_func\\.silu"]),
    "select_comm_recompute": ([".*\\.norm"], [".*\\.norm"]),
    "select_recompute_exclude": ([], []),
    "select_comm_recompute_exclude": ([], []),
}


class Reject(Exception):
    """MindFormers refuses the config (message = the spec's reason)."""


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pos(x: Any, what: str) -> int:
    if not _int(x) or x < 1:
        raise Reject(f"{what} must be a positive int (§1.6 _PipeLineConfig)")
    return x


def _dict(x: Any, what: str) -> dict:
    if x is None:
        return {}
    if not isinstance(x, dict):
        raise Reject(f"{what} is not a mapping")
    return x


def _layers(n: int, pp: int, vpp: int, offset: Any) -> np.ndarray:
    """§1.3–1.4 (r1.8): the layers-per-mini-stage table, or Reject."""
    total = pp * vpp
    base, rem = divmod(n, total)
    if total <= 1:
        return np.full((vpp, pp), base)                    # check 0: offset ignored
    def numeric(x: Any, depth: int) -> bool:
        if isinstance(x, (list, tuple)):
            return depth < 16 and all(numeric(y, depth + 1) for y in x)
        return isinstance(x, (int, float, bool))
    if offset is None or not numeric(offset, 0):
        raise Reject("offset is not numeric (int32 conversion fails)")
    try:
        arr = np.array(offset, dtype=np.float64)
    except ValueError:
        raise Reject("ragged offset (numpy ValueError)") from None
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) >= 2**31):
        raise Reject("offset does not fit int32")
    arr = np.trunc(arr).astype(np.int64)                     # floats truncated toward zero
    if arr.ndim >= 1 and arr.shape[-1] != pp:
        raise Reject("offset.shape[-1] != pp (check 1)")
    if arr.ndim >= 2 and arr.shape[-2] != vpp:
        raise Reject("offset.shape[-2] != pp_interleave_num (check 2)")
    if int(arr.sum()) != rem:
        raise Reject("offset sum != num_layers % (pp * vpp) (check 3)")
    if arr.ndim > 2:
        raise Reject("3-D offset: broadcast fails")
    layers = base + np.broadcast_to(arr, (vpp, pp))
    flat = layers.reshape(-1)
    if flat[0] < 0 or flat[-1] < 0:
        raise Reject("head/tail mini-stage negative (checks 4, 5)")
    if total > 2 and np.any(flat[1:-1] < 1):
        raise Reject("middle mini-stage < 1 layer (check 6)")
    return layers


def _counts(spec: Any, layers: np.ndarray) -> np.ndarray:
    """§3.1 normaliser F: the count table, or Reject."""
    vpp, pp = layers.shape
    if isinstance(spec, bool):
        return layers if spec else np.zeros_like(layers)
    if isinstance(spec, (list, tuple)):
        if all(isinstance(x, int) for x in spec):          # 1-D (bools count as ints)
            if len(spec) > pp:
                raise Reject("1-D count list longer than pp (IndexError)")
            if any(not isinstance(x, bool) and x < 0 for x in spec):
                raise Reject("negative 1-D count: the round-robin split never ends (hang)")
            out = np.zeros_like(layers)
            for j, c in enumerate(spec):
                out[:, j] = np.minimum(layers[:, j], 2**31 - 1 if c is True else int(c))   # upper bound only
            return out
        if all(isinstance(x, str) for x in spec):
            return layers
        if all(isinstance(r, (list, tuple, bool)) for r in spec):
            if any(len(r) for r in spec[vpp:] if isinstance(r, (list, tuple))) or any(
                    isinstance(r, bool) for r in spec[vpp:]):
                raise Reject("more rows than pp_interleave_num (IndexError)")
            out = np.zeros_like(layers)
            for v in range(vpp):
                if v >= len(spec):
                    if np.any(layers[v] > 0):
                        raise Reject("missing row for a mini-stage with layers (IndexError when configured)")
                    continue
                row = spec[v]
                if isinstance(row, bool):
                    out[v] = layers[v] if row else 0
                    continue
                if len(row) > pp:
                    raise Reject("row longer than pp (IndexError)")
                for j in range(pp):
                    if j >= len(row):
                        if layers[v, j] > 0:
                            raise Reject("missing column for a mini-stage with layers (IndexError)")
                        continue
                    c = row[j]
                    if isinstance(c, bool):
                        out[v, j] = layers[v, j] if c else 0
                    elif _int(c):
                        out[v, j] = min(c, layers[v, j])
                    else:
                        raise Reject("illegal table entry ('Illegal input list')")
            return out
    raise Reject("not a count form ('Illegal input list for select_recompute')")


def _patterns(key: str, spec: Any, mcore: bool) -> list[tuple[str, Any]]:
    """§4.1: (pattern, count spec) pairs, or Reject."""
    if isinstance(spec, (list, tuple)) and all(isinstance(x, str) for x in spec):
        return [(p, spec) for p in spec]
    if isinstance(spec, dict):
        for k in spec:
            if not isinstance(k, str):
                raise Reject("a pattern key is not a string")
        return list(spec.items())
    if spec is None:
        raise Reject(f"{key} is None (ValueError)")
    return [(p, spec) for p in DEFAULTS[key][1 if mcore else 0]]


def _valid_regex(pattern: str) -> bool:
    try:
        for seg in pattern.split("\\."):
            regex.compile(seg)
        return True
    except regex.error:
        return False


def _swap_value(spec: Any) -> None:
    """§3.5 and §1.6 (check_rules, swap on): layer-id lists; dict values must be lists."""
    if isinstance(spec, bool):
        return
    if isinstance(spec, (list, tuple)):
        if not all(isinstance(x, int) for x in spec):
            raise Reject("swap mode: a list item is not an int")
        return
    if isinstance(spec, dict):
        for k, v in spec.items():
            if not isinstance(k, str) or not isinstance(v, list):
                raise Reject("swap mode: dict keys must be str and values lists")
            _swap_value(v)
        return
    raise Reject("swap mode: not a bool, list or dict")


def _sizes(d: dict) -> dict[str, Any]:
    """§1.1, §1.2, §1.6, §7: the sizes and flags, or Reject."""
    for sec, allowed in TEMPLATE.items():
        if set(_dict(d.get(sec), sec)) - allowed:
            raise Reject(f"unknown key in {sec} (template KeyError)")
    mc = _dict(_dict(d.get("model"), "model").get("model_config"), "model.model_config")
    n = next((mc[k] for k in ("num_layers", "num_hidden_layers", "n_layer") if mc.get(k) is not None), None)
    n = _pos(n, "num_layers")
    legacy = d.get("use_legacy", True)
    mcore = legacy is False
    pc = _dict(d.get("parallel_config"), "parallel_config")
    rc = _dict(d.get("recompute_config"), "recompute_config")
    pipe = _dict(_dict(d.get("parallel"), "parallel").get("pipeline_config"), "parallel.pipeline_config")
    pp = _pos(pc.get("pipeline_stage", 1), "pipeline_stage")
    mb = _pos(pc["micro_batch_num"], "micro_batch_num") if "micro_batch_num" in pc else None
    split = _pos(pc.get("seq_split_num", 1), "seq_split_num")
    for key in ("parallel_optimizer_comm_recompute", "mp_comm_recompute", "recompute_slice_activation"):
        if key in rc and not isinstance(rc[key], bool):
            raise Reject(f"{key} must be a bool (§1.6 TransformerRecomputeConfig)")
    sched = pipe.get("pipeline_scheduler", "1f1b")
    if sched is not None and sched not in SCHEDULERS:
        raise Reject("unknown pipeline_scheduler (MindSpore)")
    vpp = mc.get("pp_interleave_num")
    if vpp is not None:
        vpp = _pos(vpp, "pp_interleave_num")
    inter = pipe.get("pipeline_interleave")
    if inter is None:
        inter = bool(vpp and vpp > 1)
    if not isinstance(inter, bool):
        raise Reject("pipeline_interleave must be a bool")
    if inter and vpp is None and mcore:
        raise Reject("mcore, pipeline_interleave on, no pp_interleave_num (TypeError, §1.2)")
    swap = _dict(d.get("swap_config"), "swap_config").get("swap", False)
    if not isinstance(swap, bool):
        raise Reject("swap must be a bool (check_rules)")
    return {"n": n, "mcore": mcore, "pp": pp, "mb": mb, "split": split, "sched": sched or "1f1b",
            "vpp": (vpp or 1) if inter else 1, "inter": inter, "mc": mc, "rc": rc, "swap": swap,
            "mbi": d.get("micro_batch_interleave_num", 1)}


def _outside_rules(s: dict) -> None:
    """§1.6 checks outside LayerSetting (r1.8)."""
    pp, mb, vpp, split, sched, rc = s["pp"], s["mb"], s["vpp"], s["split"], s["sched"], s["rc"]
    if mb is not None and mb < pp:
        raise Reject("micro_batch_num < pipeline_stage (MindSpore)")
    if sched == "seqvpp" and split <= 1:
        raise Reject("seqvpp needs seq_split_num > 1 (check_rules C01)")
    if sched == "seqsmartvpp" and pp % 2:
        raise Reject("seqsmartvpp needs an even pp (§7)")
    rec = rc.get("recompute", False)
    if pp > 1 and split > 1 and rec:
        raise Reject("seq pipe with truthy recompute (base_trainer C03)")
    if s["mcore"] and pp > 1 and (split > 1 or (_int(s["mbi"]) and s["mbi"] > 1)):
        raise Reject("mcore r1.7+: seq_split_num > 1 / micro_batch_interleave_num > 1 (base_trainer)")
    if s["mcore"] and rc.get("recompute_slice_activation") is True:
        raise Reject("mcore: recompute_slice_activation (C02)")
    if s["mcore"] and sched == "zero_bubble_v":
        if vpp != 2 or pp < 2 or (mb is not None and mb < 2 * pp):
            raise Reject("zero_bubble_v needs vpp 2, pp >= 2, mb >= 2 pp (Z04-Z06)")
        if isinstance(rec, (list, tuple)) and (len(rec) < 2 or all(isinstance(x, int) for x in rec)):
            raise Reject("zero_bubble_v: 1-D recompute list (Z06)")
    if not s["swap"]:
        for key in ("recompute", "select_recompute", "select_comm_recompute"):
            val = rc.get(key, False)
            if isinstance(val, list) and len(val) > pp and all(isinstance(x, int) for x in val):
                raise Reject(f"length of {key} > pp (check_rules R04)")


def _layer_setting(s: dict) -> None:
    """§2–§4 inside LayerSetting (r1.8, swap off unless said)."""
    mc, rc, pp, vpp = s["mc"], s["rc"], s["pp"], s["vpp"]
    n, offset = s["n"], mc.get("offset", 0)
    block = mc.get("pipeline_stage")
    if isinstance(block, dict) and not s["mcore"]:
        ss, sn = block.get("start_stage", 0) or 0, block.get("stage_num", 0) or 0
        if _int(ss) and _int(sn) and sn and ss + sn <= pp:
            pp, offset = sn, block.get("offset", offset)
    if not s["mcore"] and _int(mc.get("mtp_depth")) and mc["mtp_depth"] > 0:
        n += mc["mtp_depth"]                                 # research DeepSeek-V3 counts MTP (§1.1)
    if s["pp"] > 1 and n < pp:
        raise Reject("num_layers < pipeline_stage (M02)")
    if s["pp"] > 1 and s["inter"] and pp * vpp > n:
        raise Reject("pp * pp_interleave_num > num_layers (M01)")
    layers = _layers(n, pp, vpp, offset)
    if s["swap"]:
        for key in ("recompute", "select_recompute", "select_comm_recompute"):
            _swap_value(rc.get(key, False))
        return
    rec = rc.get("recompute", False)
    if s["sched"] == "zero_bubble_v" and isinstance(rec, (list, tuple)) and len(rec) >= 2 and not isinstance(
            rec[1], (list, tuple, str)):
        raise Reject("zero_bubble_v reverses element [1] of a 1-D list (TypeError, Z02)")
    _counts(rec, layers)
    for key in DEFAULTS:
        for pattern, spec in _patterns(key, rc.get(key, False), s["mcore"]):
            table = _counts(spec, layers)
            if np.any((table > 0) & (layers > 0)) and not _valid_regex(pattern):
                raise Reject("invalid regular expression in a pattern that is matched")


def mindformers_rejects(data: Any) -> str | None:
    """Why MindFormers r1.8 refuses ``data`` (a parsed training YAML), or None when the spec names
    no reason."""
    try:
        if not isinstance(data, dict):
            raise Reject("top level is not a mapping")
        s = _sizes(data)
        _outside_rules(s)
        _layer_setting(s)
    except Reject as why:
        return str(why)
    return None
