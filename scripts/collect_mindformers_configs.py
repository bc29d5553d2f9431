#!/usr/bin/env python3
"""Extract the MindFormers training corpus from a local git mirror (nothing is downloaded).

The corpus is every training / finetune / pretrain YAML of the MindFormers releases r1.3.0,
r1.5.0, r1.6.0, r1.7.0, r1.8.0, master and dev that

- sets ``parallel_config.pipeline_stage`` > 1, or
- is single-stage and turns some recompute on (a truthy ``recompute_config.recompute``,
  ``select_recompute`` or ``select_comm_recompute``),

skipping inference-only files (file name with ``predict`` / ``infer`` / ``eval``, or ``run_mode``
predict / eval) and files without a ``model.model_config`` section. A file whose bytes (git blob)
occur on several branches is kept once, under the newest of them (the release whose rules a user
of that file meets); the manifest lists every branch it was seen on.

The YAMLs are Apache-2.0 files of mindspore-lab/mindformers and are NOT committed to this
repository (workplace rule): they go to a git-ignored folder, ``tests/corpus/mindformers/`` by
default, as ``<branch>/<path in the repository>``. What is committed is the manifest
``tests/corpus/manifest.json``: per file its branch, commit, path and git blob sha (facts, not
content), which the corpus test uses to verify each extracted file.

Usage::

    python scripts/collect_mindformers_configs.py                    # extract + check the manifest
    python scripts/collect_mindformers_configs.py --write-manifest   # (re)write the manifest
    python scripts/collect_mindformers_configs.py --mirror DIR --out DIR

The mirror is a bare or normal git clone of https://github.com/mindspore-lab/mindformers (default
``$MINDFORMERS_MIRROR``, else ``/work/.mirror/mindspore-lab+mindformers/repo``). Exit code 0 on
success, 2 when the mirror or a branch is missing or the extracted set differs from the manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

BRANCHES = ("r1.3.0", "r1.5.0", "r1.6.0", "r1.7.0", "r1.8.0", "master", "dev")   # oldest -> newest
DEFAULT_MIRROR = "/work/.mirror/mindspore-lab+mindformers/repo"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "corpus" / "mindformers"
DEFAULT_MANIFEST = ROOT / "tests" / "corpus" / "manifest.json"
INFERENCE_NAME = re.compile(r"predict|infer|eval", re.I)
LICENSE_NOTE = ("Files under this folder are copies of YAML files of https://github.com/mindspore-lab/"
                "mindformers (Apache License 2.0), extracted by scripts/collect_mindformers_configs.py "
                "from a local mirror; each file's branch, commit, path and blob sha are listed in "
                "tests/corpus/manifest.json. They are not part of autotune and are not committed.\n")


def git(mirror: str, *args: str, text: bool = True) -> str | bytes:
    """Run ``git -C mirror args`` and return stdout (raises CalledProcessError on failure)."""
    out = subprocess.run(["git", "-C", mirror, *args], capture_output=True, check=True)
    return out.stdout.decode("utf-8", "replace") if text else out.stdout


def _truthy_recompute(rc: object) -> bool:
    if not isinstance(rc, dict):
        return False
    return any(bool(rc.get(k)) for k in ("recompute", "select_recompute", "select_comm_recompute"))


def selected(path: str, blob: bytes) -> bool:
    """Is this YAML a corpus file (module docstring)?"""
    if not re.search(r"\.ya?ml$", path) or INFERENCE_NAME.search(path.rsplit("/", 1)[-1]):
        return False
    try:
        data = yaml.safe_load(blob.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return False
    if not isinstance(data, dict):
        return False
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("model_config"), dict):
        return False
    run_mode = str(data.get("run_mode") or "").lower()
    name = path.rsplit("/", 1)[-1].lower()
    if run_mode in ("predict", "eval"):
        return False
    if run_mode not in ("train", "finetune") and not re.search(r"train|finetune|pretrain", name):
        return False
    pc = data.get("parallel_config")
    if not isinstance(pc, dict):
        return False
    pp = pc.get("pipeline_stage", pc.get("pp", 1))
    if isinstance(pp, (int, float)) and not isinstance(pp, bool) and pp > 1:
        return True
    return _truthy_recompute(data.get("recompute_config"))


def collect(mirror: str, branches: tuple[str, ...] = BRANCHES) -> list[dict]:
    """Manifest entries, one per distinct blob, sorted by (branch order, path).

    Each entry: ``id`` (``<branch>/<path>``), ``branch``, ``commit``, ``path``, ``blob`` (git blob
    sha1), ``branches`` (every branch holding the same bytes at some path, oldest first).
    """
    by_blob: dict[str, dict] = {}
    rejected: set[tuple[str, str]] = set()
    for br in branches:
        commit = str(git(mirror, "rev-parse", br)).strip()
        for line in str(git(mirror, "ls-tree", "-r", commit)).splitlines():
            meta, path = line.split("\t", 1)
            _mode, kind, sha = meta.split()
            if kind != "blob" or not re.search(r"\.ya?ml$", path):
                continue
            if sha in by_blob:
                e = by_blob[sha]
                if br not in e["branches"]:
                    e["branches"].append(br)
                if BRANCHES.index(br) > BRANCHES.index(e["branch"]):
                    e.update(branch=br, commit=commit, path=path)
                continue
            if (sha, path.rsplit("/", 1)[-1]) in rejected or INFERENCE_NAME.search(path.rsplit("/", 1)[-1]):
                continue
            blob = git(mirror, "cat-file", "blob", sha, text=False)
            if not selected(path, blob):
                rejected.add((sha, path.rsplit("/", 1)[-1]))
            else:
                by_blob[sha] = {"branch": br, "commit": commit, "path": path, "blob": sha,
                                "branches": [br]}
    out = []
    for e in by_blob.values():
        out.append({"id": f"{e['branch']}/{e['path']}", **e})
    out.sort(key=lambda e: (BRANCHES.index(e["branch"]), e["path"]))
    return out


def blob_sha(data: bytes) -> str:
    """git's blob sha1 of ``data`` (``git hash-object``)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default=os.environ.get("MINDFORMERS_MIRROR", DEFAULT_MIRROR))
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the extracted YAMLs")
    ap.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    ap.add_argument("--write-manifest", action="store_true",
                    help="write the manifest from the mirror instead of checking against it")
    args = ap.parse_args(argv)
    if not Path(args.mirror).exists():
        print(f"error: MindFormers mirror not found: {args.mirror} (clone "
              "https://github.com/mindspore-lab/mindformers and pass --mirror)", file=sys.stderr)
        return 2
    man_path = Path(args.manifest)
    if args.write_manifest:
        try:
            entries = collect(args.mirror)
        except subprocess.CalledProcessError as exc:
            print(f"error: git failed: {exc.stderr.decode(errors='replace').strip()}", file=sys.stderr)
            return 2
        man_path.parent.mkdir(parents=True, exist_ok=True)
        man_path.write_text(json.dumps({
            "source": "https://github.com/mindspore-lab/mindformers (Apache-2.0)",
            "selection": "scripts/collect_mindformers_configs.py (module docstring)",
            "files": entries}, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {man_path}: {len(entries)} files")
    if not man_path.is_file():
        print(f"error: manifest not found: {man_path} (run with --write-manifest)", file=sys.stderr)
        return 2
    entries = json.loads(man_path.read_text(encoding="utf-8"))["files"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "NOTICE").write_text(LICENSE_NOTE, encoding="utf-8")
    bad = 0
    for e in entries:
        try:
            data = git(args.mirror, "cat-file", "blob", e["blob"], text=False)
        except subprocess.CalledProcessError:
            print(f"error: blob {e['blob']} ({e['id']}) is not in the mirror", file=sys.stderr)
            bad += 1
            continue
        assert isinstance(data, bytes)
        if blob_sha(data) != e["blob"]:
            print(f"error: {e['id']}: blob sha differs", file=sys.stderr)
            bad += 1
            continue
        dest = out / e["branch"] / e["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    print(f"extracted {len(entries) - bad} of {len(entries)} files to {out}")
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
