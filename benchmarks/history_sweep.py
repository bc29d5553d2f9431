"""Every training YAML in MindFormers' git history through ``check`` and ``evaluate``:
``python benchmarks/history_sweep.py [--mirror DIR] [--json F] [--search N --timeout S]``.

The corpus (``scripts/collect_mindformers_configs.py``) holds the training files of seven
releases. This sweep takes every distinct YAML blob of every ref of a MindFormers mirror (all
branches, tags and pull-request heads it has) whose text names ``pipeline_stage``, old releases and
feature branches included (2026-12: 74 refs, 1,590 files), and runs ``autotune check --format
json`` and ``autotune evaluate`` on each in process, as ``benchmarks/fuzz.py`` does with generated
input. Every run is classified with the fuzz harness's columns (``tests/fuzz/harness.py``:
crashes, hangs over 10 s, tracebacks, wrong exit codes, silent accepts against the independent
oracle of ``tests/fuzz/oracle.py``); each must be 0. The rejections are tallied by the rule the
error names, with one example file each, so that a rule that turns away real configs shows up.

``--search N`` also runs ``autotune search --timeout S --format json`` as a subprocess on N files
drawn (``--seed``) from those ``evaluate`` accepts with pipeline_stage > 1 that are not in the
corpus manifest, and reports each one's exit code, wall and CPU seconds and certified gap; a run
that fails, prints a traceback or ends more than 5 % + 1.5 s past its limit is a failure.

Exit code 1 when any column or search run failed, 2 when the mirror is missing.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.config.safe_yaml import load_yaml_text  # noqa: E402
from autotune.errors import ConfigError  # noqa: E402
from tests.fuzz.harness import COLUMNS, Tally, classify, run_in_process  # noqa: E402

DEFAULT_MIRROR = "/work/.mirror/mindspore-lab+mindformers/repo"
MANIFEST = ROOT / "tests" / "corpus" / "manifest.json"
#: A search may end this much past its ``--timeout`` (relative, plus seconds of start-up slack).
LATE_REL, LATE_S = 0.05, 1.5


def _git(mirror: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", mirror, *args], capture_output=True, check=True).stdout


def history_files(mirror: str) -> dict[str, tuple[list[tuple[str, str]], bytes]]:
    """Distinct YAML blobs of every ref of ``mirror`` whose text names ``pipeline_stage``:
    blob sha -> ([(ref, path), ...] every ref and path that holds those bytes, the bytes). The
    blobs are read by one ``git cat-file --batch``."""
    refs = _git(mirror, "for-each-ref", "--format=%(refname:short)").decode().split()
    where: dict[str, list[tuple[str, str]]] = {}
    for ref in refs:
        for line in _git(mirror, "ls-tree", "-r", ref).decode("utf-8", "replace").splitlines():
            meta, path = line.split("\t", 1)
            _mode, kind, sha = meta.split()
            if kind == "blob" and re.search(r"\.ya?ml$", path):
                where.setdefault(sha, []).append((ref, path))
    shas = list(where)
    batch = subprocess.run(["git", "-C", mirror, "cat-file", "--batch"], input="".join(f"{s}\n" for s in shas).encode(),
                           capture_output=True, check=True).stdout
    out, at = {}, 0
    for sha in shas:  # each answer: "<sha> blob <size>\n<bytes>\n", in the order asked
        head_end = batch.index(b"\n", at)
        size = int(batch[at:head_end].split()[2])
        raw = batch[head_end + 1:head_end + 1 + size]
        at = head_end + 1 + size + 1
        if b"pipeline_stage" in raw:
            out[sha] = (where[sha], raw)
    return out


def _rule(output: str) -> str:
    """The rule an error names: ``error: [R_X] ...`` or ``{"error": {"rule": "R_X", ...}}``."""
    m = re.search(r'"rule": "([^"]+)"', output) or re.search(r"^error: \[([^\]]+)\]", output, re.M)
    return m.group(1) if m else "(no rule)"


@dataclass
class Sweep:
    """What the sweep found: per command a fuzz :class:`Tally`, the rejections by rule (count,
    example ref:path), the files, and the slowest run (s)."""

    files: int = 0
    tallies: dict[str, Tally] = field(default_factory=lambda: {"check": Tally(), "evaluate": Tally()})
    rules: dict[str, Counter] = field(default_factory=lambda: {"check": Counter(), "evaluate": Counter()})
    examples: dict[str, str] = field(default_factory=dict)
    accepted_pp: list[tuple[str, Path, str]] = field(default_factory=list)  # (sha, file, ref:path)
    slowest_s: float = 0.0


def sweep(mirror: str, scratch: Path) -> Sweep:
    """Run ``check --format json`` and ``evaluate`` on every file of :func:`history_files`
    (written under ``scratch``), classified as ``benchmarks/fuzz.py`` does."""
    res = Sweep()
    for sha, (places, raw) in sorted(history_files(mirror).items()):
        path = scratch / f"{sha}.yaml"
        path.write_bytes(raw)
        try:
            data = load_yaml_text(raw)
            mapping = isinstance(data, dict)
        except ConfigError:
            data, mapping = None, False
        res.files += 1
        where = f"{places[0][0]}:{places[0][1]}"
        for name, argv, js in (("check", ["check", "--format", "json", str(path)], True),
                               ("evaluate", ["evaluate", str(path)], False)):
            out = run_in_process(argv)
            res.slowest_s = max(res.slowest_s, out.seconds)
            flags = classify(out, data=data if mapping else None, json_format=js, mapping=mapping)
            res.tallies[name].add(flags, out.exit_code == 0, f"{where} -> {out.output[-300:]}")
            if out.exit_code == 2:
                rule = _rule(out.output)
                res.rules[name][rule] += 1
                res.examples.setdefault(f"{name} {rule}", where)
            elif out.exit_code == 0 and name == "evaluate" and mapping:
                pc = data.get("parallel_config") if isinstance(data, dict) else None
                pp = pc.get("pipeline_stage") if isinstance(pc, dict) else None
                if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1:
                    res.accepted_pp.append((sha, path, where))
    return res


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def search_runs(paths: list[tuple[Path, str]], timeout_s: float) -> list[dict]:
    """``autotune search PATH --timeout S --quiet --format json`` as a subprocess for each (path,
    ref:path it came from): exit code, wall s, CPU s (user + sys), certified gap, and ``ok``."""
    rows = []
    for path, where in paths:
        t0, c0 = time.perf_counter(), _children_cpu()
        p = subprocess.run([sys.executable, "-m", "autotune.cli", "search", str(path), "--timeout", str(timeout_s),
                            "--quiet", "--format", "json"], capture_output=True, text=True, cwd=ROOT)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
        try:
            gap = json.loads(p.stdout).get("certified_gap")
        except ValueError:
            gap = None
        late = wall > timeout_s * (1 + LATE_REL) + LATE_S
        ok = p.returncode in (0, 2) and "Traceback" not in p.stderr and not late
        rows.append({"file": path.stem, "where": where, "exit": p.returncode, "wall_s": round(wall, 2),
                     "cpu_s": round(cpu, 2), "gap": gap, "ok": ok,
                     "stderr_tail": p.stderr.strip().splitlines()[-1:] if not ok else []})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default=DEFAULT_MIRROR, help="a git clone of mindspore-lab/mindformers")
    ap.add_argument("--search", type=int, default=0, help="also search this many accepted files outside the corpus")
    ap.add_argument("--timeout", type=float, default=10.0, help="--timeout of those searches (s)")
    ap.add_argument("--seed", type=int, default=0, help="which files --search draws")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if not Path(args.mirror).exists():
        print(f"error: MindFormers mirror not found: {args.mirror}", file=sys.stderr)
        return 2
    t0, c0 = time.perf_counter(), time.process_time()
    res = sweep(args.mirror, Path(tempfile.mkdtemp(prefix="autotune-history-")))
    print(f"history sweep: {res.files} files, wall {time.perf_counter() - t0:.0f} s, CPU "
          f"{time.process_time() - c0:.0f} s, slowest run {res.slowest_s:.2f} s")
    print(f"{'command':<10}{'runs':>6}{'accepted':>10} " + " ".join(f"{c:>14}" for c in COLUMNS))
    bad = False
    for name, t in res.tallies.items():
        print(f"{name:<10}{t.runs:>6}{t.accepted:>10} " + " ".join(f"{t.counts[c]:>14}" for c in COLUMNS))
        bad = bad or any(t.counts[c] for c in COLUMNS)
    for name, rules in res.rules.items():
        print(f"\n{name}: rejected by rule")
        for rule, n in rules.most_common():
            print(f"  {n:>5}  {rule:<26} e.g. {res.examples[f'{name} {rule}']}")
    for name, t in res.tallies.items():
        for col, ex in t.examples.items():
            print(f"\n{name} {col}:")
            for e in ex:
                print("   ", e)
    searched: list[dict] = []
    if args.search:
        known = set()
        if MANIFEST.is_file():
            known = {e["blob"] for e in json.loads(MANIFEST.read_text(encoding="utf-8"))["files"]}
        pool = sorted((p, where) for sha, p, where in res.accepted_pp if sha not in known)
        picked = random.Random(args.seed).sample(pool, min(args.search, len(pool)))
        searched = search_runs(picked, args.timeout)
        print(f"\nsearch --timeout {args.timeout:g} on {len(picked)} of {len(pool)} accepted files with "
              "pipeline_stage > 1 outside the corpus:")
        for r in searched:
            gap = "-" if r["gap"] is None else f"{100 * r['gap']:.2f} %"
            print(f"  exit {r['exit']}  wall {r['wall_s']:5.1f} s  CPU {r['cpu_s']:5.1f} s  gap {gap:>7}  "
                  f"{r['where']}{'' if r['ok'] else '  FAILED ' + ' '.join(r['stderr_tail'])}")
        bad = bad or not all(r["ok"] for r in searched)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "files": res.files,
            "tallies": {n: {"runs": t.runs, "accepted": t.accepted, **t.counts} for n, t in res.tallies.items()},
            "rules": {n: dict(r) for n, r in res.rules.items()}, "search": searched}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
