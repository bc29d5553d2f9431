"""The shipped examples are faithful to their MindFormers sources (issue 20 item 4).

Each MindFormers config under examples/ (not the sweep spec, the derived profiles or the Megatron-LM
argument files of examples/megatron/) names its source in a
header line ``# source: branch B, commit C, path P, blob S``; its layout- and memory-relevant keys
(``scripts/make_examples.py`` RELEVANT) must equal the source's, except the keys listed in
``CHANGES`` with their reason (also in the README). The source is read from the extracted corpus
(same blob) or the MindFormers mirror (``$MINDFORMERS_MIRROR``); without either the comparison
skips. Which examples exist and what they name is checked always.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_examples.py")
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)
SOURCE = re.compile(r"^# source: branch (\S+), commit ([0-9a-f]{40}), path (\S+), blob ([0-9a-f]{40})$", re.M)
MIRROR = os.environ.get("MINDFORMERS_MIRROR", M.DEFAULT_MIRROR)


def _source_bytes(blob: str) -> bytes | None:
    man = ROOT / "tests" / "corpus" / "manifest.json"
    corpus = ROOT / "tests" / "corpus" / "mindformers"
    for e in json.loads(man.read_text())["files"]:
        p = corpus / e["branch"] / e["path"]
        if e["blob"] == blob and p.is_file():
            return p.read_bytes()
    if Path(MIRROR).exists():
        out = subprocess.run(["git", "-C", MIRROR, "cat-file", "blob", blob], capture_output=True)
        if out.returncode == 0:
            return out.stdout
    return None


def test_every_example_names_its_source():
    shipped = sorted(str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.yaml")
                     if p.name not in ("profile.yaml", "nightly_sweep.yaml")
                     and p.parent.name != "megatron")   # Megatron-LM arguments, not MindFormers YAMLs
    assert shipped == sorted(M.EXAMPLES)
    for name, (_title, branch, path) in M.EXAMPLES.items():
        m = SOURCE.search((ROOT / "examples" / name).read_text(encoding="utf-8"))
        assert m, f"{name}: no '# source: ...' header"
        assert (m.group(1), m.group(3)) == (branch, path)


@pytest.mark.parametrize("name", sorted(M.EXAMPLES))
def test_example_keys_equal_the_source(name):
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    blob = SOURCE.search(text).group(4)
    src = _source_bytes(blob)
    if src is None:
        pytest.skip("neither the corpus nor the MindFormers mirror holds the source "
                    "(python scripts/collect_mindformers_configs.py)")
    want = M.relevant(yaml.safe_load(src.decode("utf-8")))
    got = M.relevant(yaml.safe_load(text))
    for key, (value, why) in M.CHANGES.get(name, {}).items():
        assert got.pop(key) == value and why
        want.pop(key, None)
        assert f"{key} = {value!r}" in text   # the header says what differs and why
    assert got == want
