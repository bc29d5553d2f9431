"""The cheap lower bounds of ``benchmarks/scaling.py``'s problems, one row each (issue 17).

    .venv/bin/python benchmarks/floors.py                     # every problem of the full grid
    .venv/bin/python benchmarks/floors.py --only "P8 V4"      # those whose name contains P8 V4

Per problem: the layer count N, pipeline_stage P, micro-batches m and pp_interleave_num V read
back from the built :class:`~autotune.tuner.problem.Problem` (not from the name: the stay-LP and
whole-layer rounds' tables gave pp 8 × vpp 4 × m 128 MoE's floors of a 128-layer problem under
the grid row's 256-layer name; docs/search.md, the audit round), then in ms, each with its CPU s:

- the work floor (:func:`~autotune.tuner.bounds.work_floor.work_floor_ms`: the busiest device's
  least work, fractional layers);
- the work floor with whole layers (:func:`~autotune.tuner.bounds.work_floor.whole_layer_floor_ms`);
- the stay LP (:func:`~autotune.tuner.bounds.stay_lp.stay_lp_ms`; V > 1, "-" where it does not
  apply);
- the Lagrangian (:func:`~autotune.tuner.bounds.lagrangian.lagrangian_bound` without an
  incumbent; V > 1, "-" otherwise).

None of them needs a search, so the whole grid takes 30-40 s. Pure numpy (+ HiGHS for the
stay LP).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autotune.tuner.bounds.lagrangian import lagrangian_bound  # noqa: E402
from autotune.tuner.bounds.stay_lp import stay_lp_ms  # noqa: E402
from autotune.tuner.bounds.work_floor import whole_layer_floor_ms, work_floor_ms  # noqa: E402
from autotune.tuner.problem import Problem  # noqa: E402
import scaling  # noqa: E402  (benchmarks/scaling.py: the generated problems)


HELP = """Cheap lower bounds of benchmarks/scaling.py's problems, without a search (30-40 s for the grid).

    .venv/bin/python benchmarks/floors.py                     # every problem of the full grid
    .venv/bin/python benchmarks/floors.py --only "P8 V4"      # those whose name contains P8 V4

Columns: the problem's own N (layers), P (pipeline_stage), m (micro_batch_num) and V
(pp_interleave_num), read back from the built problem; then, in ms, each with its CPU seconds:
the work floor (the busiest device's least work), the work floor with whole layers, the stay LP
(V > 1) and the Lagrangian (V > 1); "-" where a bound does not apply."""


def _timed(f):
    """(f(), CPU s)."""
    t = time.process_time()
    out = f()
    return out, time.process_time() - t


def floors(problem: Problem) -> dict:
    """The module docstring's row for one single-V problem: ``N``, ``P``, ``m``, ``V`` and, in ms
    with their CPU s, ``work``, ``whole``, ``stay_lp`` and ``lagrangian`` (None where a bound does
    not apply)."""
    V = int(problem.vpp_candidates[0])
    row: dict = {"N": problem.N, "P": problem.P, "m": problem.m, "V": V}
    row["work"], row["work_s"] = _timed(lambda: work_floor_ms(problem))
    row["whole"], row["whole_s"] = _timed(lambda: whole_layer_floor_ms(problem, V))
    row["stay_lp"], row["stay_lp_s"] = _timed(lambda: stay_lp_ms(problem, V)) if V > 1 else (None, 0.0)
    lag, row["lagrangian_s"] = _timed(lambda: lagrangian_bound(problem, V, upper_ms=None)) if V > 1 else (None, 0.0)
    row["lagrangian"] = None if lag is None else float(lag[0])
    return row


def _ms(x: float | None, s: float) -> str:
    return f"{'-':>11s} {'':>6s}" if x is None else f"{x:11,.1f} {s:6.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=None,
                    help="problems whose name contains this (repeat for several)")
    a = ap.parse_args()
    print(f"{'problem':30s} {'N':>4s} {'P':>3s} {'m':>4s} {'V':>2s} {'work ms':>11s} {'s':>6s} {'whole ms':>11s} "
          f"{'s':>6s} {'stay LP ms':>11s} {'s':>6s} {'Lagrangian':>11s} {'s':>6s}", flush=True)
    for spec in scaling.grid(quick=False):
        name = scaling.name_of(*spec)
        if a.only and not any(o in name for o in a.only):
            continue
        r = floors(scaling.build(*spec))
        print(f"{name:30s} {r['N']:4d} {r['P']:3d} {r['m']:4d} {r['V']:2d} {_ms(r['work'], r['work_s'])} "
              f"{_ms(r['whole'], r['whole_s'])} {_ms(r['stay_lp'], r['stay_lp_s'])} "
              f"{_ms(r['lagrangian'], r['lagrangian_s'])}", flush=True)


if __name__ == "__main__":
    main()
