#!/usr/bin/env python3
"""Write the shipped example configs from their MindFormers sources (a local git mirror).

The examples may not be copies of MindFormers' files (workplace rule: nothing taken from a public
repository is committed). Each example therefore carries, in autotune's own layout and comments,
every layout- and memory-relevant key of its source with the source's value (:data:`RELEVANT`), a
header naming the source (repository, branch, commit, path, git blob sha) and nothing else; the
keys that deliberately differ are listed in :data:`CHANGES` with the reason (also in the README).
``tests/e2e/test_examples_faithful.py`` compares each example with its source when the mirror or
the corpus is present.

Usage: ``python scripts/make_examples.py [--mirror DIR] [--check]`` (``--check``: report
differences, write nothing).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from autotune.emit.apply_keys import RELEVANT

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MIRROR = "/work/.mirror/mindspore-lab+mindformers/repo"

#: The layout- and memory-relevant keys: sections whose every key is, dotted keys (the value and all
#: under it), model.model_config keys; the list ``autotune apply`` compares (autotune.emit.apply_keys).
WHOLE, KEYS, MODEL_KEYS = RELEVANT

#: example -> (title, branch, path in the MindFormers repository)
EXAMPLES: dict[str, tuple[str, str, str]] = {
    "telechat2_115b/train.yaml": ("TeleChat2-115B finetune", "master",
                                  "research/telechat2/telechat2-115b/finetune_telechat_115b.yaml"),
    "llama3_1_70b/train.yaml": ("Llama-3.1-70B finetune", "master",
                                "research/llama3_1/llama3_1_70b/finetune_llama3_1_70b.yaml"),
    "real_configs/01_deepseek3_671b.yaml": ("DeepSeek-V3-671B pretrain", "r1.5.0",
                                            "research/deepseek3/deepseek3_671b/pretrain_deepseek3_671b.yaml"),
    "real_configs/02_telechat2_115b.yaml": ("TeleChat2-115B finetune", "master",
                                            "research/telechat2/telechat2-115b/finetune_telechat_115b.yaml"),
    "real_configs/03_qwen2_5_72b_32k.yaml": ("Qwen2.5-72B 32k finetune", "master",
                                             "research/qwen2_5/finetune_qwen2.5_72B_32K.yaml"),
    "real_configs/04_qwen2_5_14b_8k.yaml": ("Qwen2.5-14B 8k finetune", "master",
                                            "research/qwen2_5/finetune_qwen2_5_14b_8k.yaml"),
    "real_configs/05_glm4_9b.yaml": ("GLM4-9B finetune", "master", "configs/glm4/finetune_glm4_9b.yaml"),
    "real_configs/06_qwen3_32b_4k.yaml": ("Qwen3-32B 4k pretrain (mcore)", "master",
                                          "configs/qwen3/pretrain_qwen3_32b_4k.yaml"),
    "real_configs/07_qwen3_30b_a3b_4k.yaml": ("Qwen3-30B-A3B 4k pretrain (mcore MoE)", "master",
                                              "configs/qwen3_moe/pretrain_qwen3_30b_a3b_4k.yaml"),
    "real_configs/08_llama3_1_70b.yaml": ("Llama-3.1-70B finetune", "master",
                                          "research/llama3_1/llama3_1_70b/finetune_llama3_1_70b.yaml"),
    "real_configs/09_qwen2_72b_32k.yaml": ("Qwen2-72B 32k finetune", "r1.5.0",
                                           "research/qwen2/qwen2_72b/finetune_qwen2_72b_32k.yaml"),
    "real_configs/10_telechat2_39b_a12b.yaml": ("TeleChat2-39B-A12B finetune (MoE)", "master",
                                                "research/telechat2/telechat2-39b-a12b/finetune_telechat_39b_a12b.yaml"),
    "real_configs/11_mixtral_8x7b.yaml": ("Mixtral-8x7B pretrain (MoE)", "dev",
                                          "research/mixtral/mixtral_8x7b/pretrain_mixtral-8x7b.yaml"),
    "real_configs/12_telechat3_105b_a4b_4k.yaml": ("TeleChat3-105B-A4B 4k pretrain (mcore MLA + MoE)",
                                                   "master", "configs/telechat3/pretrain_telechat3_105b_a4b_4k.yaml"),
}
#: example -> {dotted key: (value used, why it differs from the source)}
CHANGES: dict[str, dict[str, tuple[Any, str]]] = {
    "real_configs/12_telechat3_105b_a4b_4k.yaml": {
        "model.model_config.offset": (
            [0, 1, 1, 1, 1, 1, 0, 0],
            "the source's offset 0 fails MindFormers' own sum rule (45 layers on 8 stages leave 5), so "
            "the source cannot run; this offset sums to 5")},
}


def _node(data: dict[str, Any], path: str) -> Any:
    cur: Any = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _put(out: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    cur = out
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def relevant(data: dict[str, Any]) -> dict[str, Any]:
    """The layout- and memory-relevant keys of a MindFormers YAML: dotted path -> value."""
    out: dict[str, Any] = {}
    for sec in WHOLE:
        val = data.get(sec)
        if isinstance(val, dict):
            for k, v in val.items():
                out[f"{sec}.{k}"] = v
    for key in KEYS:
        val = _node(data, key)
        if val is not None:
            out[key] = val
    def walk(node: Any, where: str) -> None:   # the dataset's seq_length (mcore templates read it)
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "seq_length" and isinstance(v, int):
                    out[f"{where}.{k}"] = v
                else:
                    walk(v, f"{where}.{k}")

    walk(data.get("train_dataset"), "train_dataset")
    mc = _node(data, "model.model_config") or {}
    for key in MODEL_KEYS:
        if key in mc and mc[key] is not None:
            out[f"model.model_config.{key}"] = mc[key]
    return out


def source_bytes(mirror: str, branch: str, path: str) -> tuple[str, str, bytes]:
    """(commit, blob sha, bytes) of ``path`` on ``branch`` of the mirror."""
    def git(*a: str) -> bytes:
        return subprocess.run(["git", "-C", mirror, *a], capture_output=True, check=True).stdout

    commit = git("rev-parse", branch).decode().strip()
    blob = git("rev-parse", f"{commit}:{path}").decode().strip()
    return commit, blob, git("cat-file", "blob", blob)


ORDER = ("run_mode", "use_legacy", "pretrained_model_dir", "context", "runner_config", "parallel",
         "parallel_config", "micro_batch_interleave_num", "recompute_config", "swap_config", "moe_config",
         "train_dataset", "model")


class _Dumper(yaml.SafeDumper):
    """Block mappings; lists of scalars (or of scalar lists) on one line, as MindFormers writes them."""


def _list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(not isinstance(x, (dict, list)) or (isinstance(x, list) and all(
        not isinstance(y, (dict, list)) for y in x)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _list)


def render(name: str, title: str, branch: str, path: str, commit: str, blob: str,
           keys: dict[str, Any]) -> str:
    """The example's text: header + the relevant keys as nested YAML (source order)."""
    nested: dict[str, Any] = {}
    rank = {k: i for i, k in enumerate(ORDER)}
    for k, v in sorted(keys.items(), key=lambda kv: rank.get(kv[0].split(".")[0], len(ORDER))):
        _put(nested, k, v)
    changes = CHANGES.get(name, {})
    for k, (v, _why) in changes.items():
        _put(nested, k, v)
    head = [f"# {title}: the layout- and memory-relevant keys of MindFormers' {path}",
            "# (https://github.com/mindspore-lab/mindformers, Apache-2.0) with the source's values, in",
            "# autotune's own layout; datasets, callbacks, optimizer and the other sections are left out.",
            f"# source: branch {branch}, commit {commit}, path {path}, blob {blob}",
            "# regenerate: python scripts/make_examples.py (keys: scripts/make_examples.py RELEVANT)"]
    for k, (v, why) in changes.items():
        head.append(f"# differs from the source: {k} = {v!r}: {why}")
    body = yaml.dump(nested, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)
    return "\n".join(head) + "\n" + body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default=os.environ.get("MINDFORMERS_MIRROR", DEFAULT_MIRROR))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if not Path(args.mirror).exists():
        print(f"error: MindFormers mirror not found: {args.mirror}", file=sys.stderr)
        return 2
    bad = 0
    for name, (title, branch, path) in EXAMPLES.items():
        commit, blob, data = source_bytes(args.mirror, branch, path)
        keys = relevant(yaml.safe_load(data.decode("utf-8")))
        text = render(name, title, branch, path, commit, blob, keys)
        dest = ROOT / "examples" / name
        if args.check:
            if not dest.is_file() or dest.read_text(encoding="utf-8") != text:
                print(f"{name}: differs from its source's relevant keys")
                bad += 1
            continue
        dest.write_text(text, encoding="utf-8")
        print(f"wrote examples/{name} ({len(keys)} keys)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
