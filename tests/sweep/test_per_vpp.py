"""The sweep summary's ``lower_bound_by_vpp`` column and the per-pp_interleave_num bound line of
its ``report.txt`` (the same breakdown as ``autotune search`` prints)."""

from __future__ import annotations

import csv
import io
import json

from autotune.sweep import run_sweep
from autotune.sweep.summary import by_vpp_cell
from tests.sweep.sweep_helpers import ROOT


def test_by_vpp_cell_by_hand():
    assert by_vpp_cell({2: 7157.31, 1: 9678.04, 3: None}) == '{"1":9678.0,"2":7157.3,"3":null}'
    assert by_vpp_cell({4: float("inf")}) == '{"4":null}'
    assert by_vpp_cell(None) == "" and by_vpp_cell({}) == ""


def test_sweep_row_and_report_carry_each_vpps_bound(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"""name: pervpp
scenarios:
  - name: llama
    config: {ROOT / 'examples/llama3_1_70b/train.yaml'}
""")
    out = tmp_path / "out"
    res = run_sweep(sweep, storage=str(tmp_path / "s.journal"), out_dir=out, report=True)
    assert res.exit_code == 0
    row = next(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    by = json.loads(row["lower_bound_by_vpp"])
    # the example's search bounds pp_interleave_num 1-4 apart (README: 116049.3 | 114656.4 |
    # 114669.8 | 114678.3 ms); the least is the row's lower bound
    assert sorted(by) == ["1", "2", "3", "4"]
    assert abs(min(by.values()) - float(row["lower_bound_ms"])) <= 0.05 + 1e-9
    assert by[row["pp_interleave_num"]] == min(by.values())
    lines = (out / "llama" / "report.txt").read_text().splitlines()
    # as autotune search prints them (without its clock): the bound, then each V's, then why it stopped
    i = next(k for k, ln in enumerate(lines) if ln.startswith("lower bound "))
    assert lines[i] == (f"lower bound {float(row['lower_bound_ms']):.1f} ms (provable lower bound) | "
                        f"certified gap {row['certified_gap_pct']}%")
    assert lines[i + 1].startswith("lower bound by pp_interleave_num")
    assert f"{row['pp_interleave_num']}: {by[row['pp_interleave_num']]:.1f} ms (the answer's, the least)" in lines[i + 1]
    assert lines[i + 2].startswith("stopped at the certified-gap target")
