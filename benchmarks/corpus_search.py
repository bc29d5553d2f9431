"""Default ``autotune search`` on every real MindFormers config of the corpus (issue 17): CPU
seconds, certified gap and why each search ended, as a new user would run it.

    .venv/bin/python scripts/collect_mindformers_configs.py     # once: extract the corpus
    .venv/bin/python benchmarks/corpus_search.py                 # every distinct layout
    .venv/bin/python benchmarks/corpus_search.py --only llama --json rows.json
    .venv/bin/python benchmarks/corpus_search.py --min-pp 2 --timeout 10   # as a user with --timeout 10

Which files: those of ``tests/corpus/expectations.yaml`` with outcome ``read`` (autotune reads them
and MindFormers would run them) and no ``xfail``, with the expectation's extra ``args``. Files
that differ only in keys the search does not read are run once: the key is (num_layers,
hidden_size, seq_length, pipeline_stage, pp_interleave_num, micro_batch_num, data_parallel,
model_parallel, the recompute keys, max_device_memory), first file in manifest order kept.

Each search runs in a child process, ``autotune search FILE --format json --quiet --out TMP``
with every other option at its default (200 trials, 0.5 % gap stop, 300 s wall-clock safety net)
but ``--timeout S`` when given;
CPU s = the child's user + sys (``os.wait4``), imports and output included; wall s likewise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "corpus"))

import corpus_lib as L  # noqa: E402  (the corpus helpers live with the corpus tests)

RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute", "parallel_optimizer_comm_recompute",
                  "mp_comm_recompute")


def layout_key(path: Path) -> str:
    """The keys a search depends on (module docstring), as one string."""
    cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    model = (cfg.get("model") or {}).get("model_config") or {}
    par = cfg.get("parallel_config") or {}
    rec = cfg.get("recompute_config") or {}
    ctx = cfg.get("context") or {}
    key = [model.get(k) for k in ("num_layers", "hidden_size", "seq_length")]
    key += [par.get(k) for k in ("pipeline_stage", "micro_batch_num", "data_parallel", "model_parallel")]
    key += [(cfg.get("model") or {}).get("model_config", {}).get("pp_interleave_num"),
            (cfg.get("parallel") or {}).get("pipeline_config"), ctx.get("max_device_memory")]
    key += [repr(rec.get(k)) for k in RECOMPUTE_KEYS]
    return json.dumps(key, default=str)


def files(only: str | None, min_pp: int = 1) -> list[tuple[str, Path, list[str]]]:
    """(id, path, extra args) of the distinct read files (module docstring) with pipeline_stage >=
    ``min_pp``."""
    corpus = L.corpus_dir()
    if corpus is None:
        sys.exit(f"no corpus: run {L.SCRIPT}")
    exps = L.expectations()
    seen, out = set(), []
    for e in L.manifest():
        x = exps.get(e["id"], {})
        if x.get("outcome") != "read" or x.get("xfail") or (only and only not in e["id"]):
            continue
        path = corpus / e["branch"] / e["path"]
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if int((cfg.get("parallel_config") or {}).get("pipeline_stage") or 1) < min_pp:
            continue
        key = layout_key(path)
        if key not in seen:
            seen.add(key)
            out.append((e["id"], path, L.resolve_args(x.get("args", []))))
    return out


def run_one(path: Path, args: list[str]) -> dict:
    """One default search in a child process: its JSON result's figures, CPU s and wall s."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-c", "from autotune.cli import main; main()", "search", str(path),
                "--format", "json", "--quiet", "--out", str(Path(tmp) / "best.yaml"), *args]
        t0 = time.monotonic()
        # the autotune of this checkout, not whichever one the interpreter has installed (an
        # editable install points at one checkout: a second worktree's run would time that one)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp, env=env)
        out = proc.stdout.read()
        err = proc.stderr.read()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"rc": proc.returncode, "cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": time.monotonic() - t0}
    try:
        res = json.loads(out)
    except json.JSONDecodeError:
        row["error"] = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return row
    best = res.get("best") or {}
    row.update(step_ms=best.get("step_time_ms"), bound_ms=res.get("lower_bound_ms"),
               gap=res.get("certified_gap"), timed_out=res.get("timed_out"), stopped_by=res.get("stopped_by"))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="files whose id contains this")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--min-pp", type=int, default=1, help="only files with pipeline_stage >= this")
    ap.add_argument("--timeout", type=float, default=None, help="each search's --timeout (s; default: none)")
    a = ap.parse_args()
    rows = []
    todo = files(a.only, a.min_pp)
    print(f"{'file':70s} {'CPU s':>7s} {'wall s':>7s} {'step ms':>10s} {'gap':>7s}  ended by")
    for fid, path, args in todo:
        r = run_one(path, args + ([] if a.timeout is None else ["--timeout", str(a.timeout)]))
        r["id"] = fid
        rows.append(r)
        gap = "-" if r.get("gap") is None else f"{100 * r['gap']:.2f}%"
        step = "-" if r.get("step_ms") is None else f"{r['step_ms']:.1f}"
        end = r.get("stopped_by") or r.get("error") or f"rc {r['rc']}"
        print(f"{fid[-70:]:70s} {r['cpu_s']:7.1f} {r['wall_s']:7.1f} {step:>10s} {gap:>7s}  {end}", flush=True)
    gaps = [r["gap"] for r in rows if r.get("gap") is not None]
    cpu = np.array([r["cpu_s"] for r in rows])
    # the JSON first: a selection may hold no layout, or none with a gap (Llama-2-13B finetune alone)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if not rows:
        print("\nno layout selected")
        return
    gap_line = (f"gap median {100 * np.median(gaps):.2f} %, max {100 * max(gaps):.2f} %, "
                f"{sum(g <= 0.02 for g in gaps)} within 2 %; ") if gaps else ""
    print(f"\n{len(rows)} distinct layouts; {len(gaps)} answered with a gap; CPU s median {np.median(cpu):.1f}, "
          f"max {cpu.max():.1f}, {int((cpu <= 30).sum())} within 30 s; {gap_line}"
          f"timed out: {sum(bool(r.get('timed_out')) for r in rows)}")


if __name__ == "__main__":
    main()
