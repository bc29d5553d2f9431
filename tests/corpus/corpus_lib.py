"""Run autotune's commands on the MindFormers corpus (issue 15): where the corpus is, what each file
gives, and the hand-reviewed expectations it is compared with.

The corpus itself (YAMLs of mindspore-lab/mindformers, Apache-2.0) is not part of this repository:
``scripts/collect_mindformers_configs.py`` extracts it from a local mirror. It is looked for at
``$AUTOTUNE_CORPUS``, ``tests/corpus/mindformers/`` and ``../shared/corpus/mindformers/``.

``python tests/corpus/corpus_lib.py`` prints, per file, what autotune does now next to the
expectation (a review aid: the expectations table is edited by hand, not generated).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MANIFEST = HERE / "manifest.json"
EXPECTATIONS = HERE / "expectations.yaml"
SCRIPT = "scripts/collect_mindformers_configs.py"
#: MindFormers branch -> the LayerSetting rules autotune emulates (check --mindformers-version;
#: dev carries the r1.6.0 logic, shared/spec/mindformers-layer-setting.md §0)
VERSION = {"r1.3.0": "1.5", "r1.5.0": "1.5", "r1.6.0": "1.5", "r1.7.0": "1.7", "r1.8.0": "1.8",
           "master": "1.8", "dev": "1.5"}
_RULE = re.compile(r"\[([A-Za-z_0-9]+)\]")


def corpus_dir() -> Path | None:
    """The extracted corpus folder, or None when none exists (module docstring)."""
    cands = [os.environ.get("AUTOTUNE_CORPUS"), ROOT / "tests" / "corpus" / "mindformers",
             ROOT.parent / "shared" / "corpus" / "mindformers"]
    for c in cands:
        if c and Path(c).is_dir() and any(Path(c).iterdir()):
            return Path(c)
    return None


def manifest() -> list[dict[str, Any]]:
    """The manifest's file entries (id, branch, commit, path, blob, branches)."""
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["files"]


def expectations() -> dict[str, dict[str, Any]]:
    """id -> expectation (see expectations.yaml's header)."""
    data = yaml.safe_load(EXPECTATIONS.read_text(encoding="utf-8"))
    return {e["id"]: e for e in data["files"]}


def blob_sha(data: bytes) -> str:
    """git's blob sha1 of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def resolve_args(args: list[str]) -> list[str]:
    """Expectation ``args`` with repository-relative paths made absolute."""
    out = []
    for a in args:
        out.append(str(ROOT / a) if a.startswith("tests/") else a)
    return out


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from autotune.cli import main

    res = CliRunner().invoke(main, argv, catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def run_check(path: Path, version: str, args: list[str]) -> dict[str, Any]:
    """``autotune check --format json``: {rc, rule, layers ([vpp][pp] effective), warnings}."""
    rc, out, _err = _invoke(["check", str(path), "--mindformers-version", version, "--format", "json", *args])
    data = json.loads(out) if out.strip() else {}
    if rc != 0:
        return {"rc": rc, "rule": (data.get("error") or {}).get("rule")}
    return {"rc": 0, "rule": None, "layers": data["effective_layers_per_stage"],
            "ids": list(zip(data["interleave_ids"], data["pipeline_ids"])),
            "warnings": data.get("warnings", [])}


def decoder_layers(check: dict[str, Any], n_decoder: int) -> list[list[int]]:
    """check's real placement without the layers after the first ``n_decoder`` (the MTP layers a
    release counts in the split sit last): what the cost model holds as decoder layers."""
    layers = [list(row) for row in check["layers"]]
    for v, p in check["ids"][n_decoder:]:
        layers[v][p] -= 1
    return layers


def run_evaluate(path: Path, args: list[str]) -> dict[str, Any]:
    """``autotune evaluate --format json``: {rc, rule, fits, peak_mib, layers, warnings}."""
    rc, out, err = _invoke(["evaluate", str(path), "--format", "json", *args])
    if rc != 0:
        m = _RULE.search(err)
        return {"rc": rc, "rule": m.group(1) if m else None, "message": err.strip()}
    rep = json.loads(out)
    stages = rep["stages"]
    vpp = len(stages[0]["layers"])
    layers = [[st["layers"][v] for st in stages] for v in range(vpp)]
    return {"rc": 0, "rule": None, "fits": rep["fits"], "peak_mib": rep["peak_mib"],
            "hbm_budget_mib": rep["hbm_budget_mib"], "layers": layers,
            "warnings": sorted({w["code"] for w in rep.get("warnings", [])})}


def run_one(entry: dict[str, Any], exp: dict[str, Any] | None, corpus: Path) -> dict[str, Any]:
    """check + evaluate of one corpus file with the expectation's extra ``args``."""
    path = corpus / entry["branch"] / entry["path"]
    args = resolve_args((exp or {}).get("args", []))
    return {"check": run_check(path, VERSION[entry["branch"]], args), "evaluate": run_evaluate(path, args)}


def outcome(res: dict[str, Any]) -> tuple[str, str | None]:
    """(read | rejected | unsupported | disagree, rule) of a :func:`run_one` result."""
    c, e = res["check"], res["evaluate"]
    if c["rc"] == 0 and e["rc"] == 0:
        return "read", None
    rule = c["rule"] or e["rule"]
    if c["rc"] != e["rc"]:
        return "disagree", rule
    return ("unsupported" if rule in ("R_UNSUPPORTED", "R_HF_CONFIG") else "rejected"), rule


def main() -> int:
    corpus = corpus_dir()
    if corpus is None:
        print(f"no corpus: run {SCRIPT}", file=sys.stderr)
        return 2
    exps = expectations() if EXPECTATIONS.is_file() else {}
    for e in manifest():
        exp = exps.get(e["id"])
        res = run_one(e, exp, corpus)
        kind, rule = outcome(res)
        ev = res["evaluate"]
        got = f"{kind:<11} {rule or '-':<20} fits={ev.get('fits')!s:<5} peak={ev.get('peak_mib', 0):>9.0f}"
        want = "" if exp is None else (f"{exp['outcome']:<11} {exp.get('rule') or '-':<20} "
                                       f"fits={exp.get('fits')!s:<5} peak={exp.get('peak_mib') or 0:>9.0f}")
        flag = "" if exp is None or (kind, rule) == (exp["outcome"], exp.get("rule")) else "  <-- differs"
        print(f"{e['id']}\n    now:  {got}\n    want: {want}{flag}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
