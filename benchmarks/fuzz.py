"""Long fuzz run of the config reader: ``python benchmarks/fuzz.py --n 10000``.

Generates ``--n`` inputs with the hypothesis strategies of ``tests/fuzz/strategies.py`` (a share
``--attacks`` of YAML-level attacks, the rest odd training configs; derandomized by ``--seed``),
runs ``autotune check`` (``--format json`` for every other input) and ``autotune evaluate`` on each
in process (click's CliRunner), and every ``--subprocess-every``-th input also as a real
``python -m autotune.cli`` subprocess. Prints one row per command and the totals, with the columns
of ``tests/fuzz/harness.py``: crashes, hangs (> 10 s), tracebacks, wrong exit codes and silent
accepts (exit 0 on a config the independent oracle says MindFormers rejects), plus the CPU time of
the run. Exit code 1 when any column is not 0.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from autotune.config.safe_yaml import load_yaml_text  # noqa: E402
from autotune.errors import ConfigError  # noqa: E402
from tests.fuzz.harness import COLUMNS, Tally, classify, run_in_process, run_subprocess  # noqa: E402
from tests.fuzz.strategies import configs, yaml_attacks  # noqa: E402


def _cpu_s() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _parse(raw: bytes) -> tuple[object, bool]:
    try:
        data = load_yaml_text(raw)
    except ConfigError:
        return None, False
    return data, isinstance(data, dict)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="inputs to generate")
    ap.add_argument("--seed", type=int, default=0, help="hypothesis seed (the run is derandomized)")
    ap.add_argument("--attacks", type=float, default=0.2, help="share of YAML-level attacks")
    ap.add_argument("--subprocess-every", type=int, default=100, help="also run every k-th input as a subprocess")
    args = ap.parse_args()

    tallies = {"check": Tally(), "evaluate": Tally(), "subprocess": Tally()}
    tmp = Path(tempfile.mkdtemp(prefix="autotune-fuzz-"))
    seen = {"n": 0, "slowest": 0.0, "slowest_cpu": 0.0}
    t0, c0 = time.perf_counter(), _cpu_s()
    weight = max(1, round(args.attacks * 100))
    inputs = st.one_of(*([yaml_attacks().map(lambda b: ("attack", b))] * weight
                         + [configs().map(lambda d: ("config", d))] * (100 - weight)))

    @settings(max_examples=args.n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(inputs)
    def one(item):
        i = seen["n"]
        seen["n"] += 1
        kind, payload = item
        path = tmp / f"in{i % 64}.yaml"
        if kind == "attack":
            raw = payload
        else:
            raw = yaml.safe_dump(payload, allow_unicode=True).encode("utf-8", "surrogatepass")
        path.write_bytes(raw)
        data, mapping = _parse(raw)
        data = data if kind == "config" else None
        js = i % 2 == 0
        runs = [("check", ["check", str(path)] + (["--format", "json"] if js else []), js),
                ("evaluate", ["evaluate", str(path)], False)]
        for name, argv, jflag in runs:
            c = time.process_time()
            out = run_in_process(argv)
            cpu_run = time.process_time() - c
            if out.seconds > seen["slowest"]:
                seen["slowest"] = out.seconds
                (tmp / "slowest.yaml").write_bytes(raw)
            seen["slowest_cpu"] = max(seen["slowest_cpu"], cpu_run)
            flags = classify(out, data=data, json_format=jflag, mapping=mapping)
            tallies[name].add(flags, out.exit_code == 0, f"{kind} {argv[0]}: {raw[:300]!r} -> {out.output[-300:]}")
            for f in flags:                                   # keep the input for a rerun
                (tmp / f"{f}-{name}-{i}.yaml").write_bytes(raw)
        if args.subprocess_every and i % args.subprocess_every == 0:
            name, argv, jflag = runs[(i // args.subprocess_every) % 2]
            out = run_subprocess(argv)
            flags = classify(out, data=data, json_format=jflag, mapping=mapping)
            tallies["subprocess"].add(flags, out.exit_code == 0, f"{kind} {argv[0]}: {raw[:300]!r}")

    one()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    for scratch in tmp.glob("in*.yaml"):  # the rotating inputs; what is worth a rerun is kept below
        scratch.unlink()
    head = f"{'runs':>8} {'accepted':>9} " + " ".join(f"{c:>14}" for c in COLUMNS)
    print(f"fuzz: {seen['n']} inputs (seed {args.seed}, {args.attacks:.0%} YAML attacks), "
          f"wall {wall:.0f} s, CPU {cpu:.0f} s (user+sys, subprocesses included), slowest run {seen['slowest']:.2f} s "
          f"wall (kept as slowest.yaml), most CPU in one run {seen['slowest_cpu']:.2f} s")
    print(f"{'command':<11}{head}")
    total = Tally()
    for name, t in tallies.items():
        print(f"{name:<11}{t.runs:>8} {t.accepted:>9} " + " ".join(f"{t.counts[c]:>14}" for c in COLUMNS))
        total.runs += t.runs
        total.accepted += t.accepted
        for c in COLUMNS:
            total.counts[c] += t.counts[c]
    broke = sorted(p.name for p in tmp.glob("*.yaml") if p.name != "slowest.yaml")
    print(f"kept in {tmp}: slowest.yaml" + (f" and the {len(broke)} inputs that broke a column" if broke
                                             else " (no input broke a column)"))
    print(f"{'total':<11}{total.runs:>8} {total.accepted:>9} " + " ".join(f"{total.counts[c]:>14}" for c in COLUMNS))
    bad = False
    for name, t in tallies.items():
        for col, ex in t.examples.items():
            bad = True
            print(f"\n{name} {col}:")
            for e in ex:
                print("   ", e)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
