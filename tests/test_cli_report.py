"""``autotune report``: files written, JSON output, one-line errors (exit 2) on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from autotune.cli import main
from tests.conftest import ROOT
from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG


@pytest.fixture
def toy(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(TOY_CONFIG)
    other = tmp_path / "other.yaml"
    other.write_text(TOY_CONFIG.replace("offset: [1, -1]", "offset: [0, 0]"))
    prof = tmp_path / "profile.yaml"
    prof.write_text(TOY8_PROFILE)
    return cfg, other, prof


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_report_writes_files(toy, tmp_path):
    cfg, other, prof = toy
    out = tmp_path / "rep"
    res = run("report", cfg, "--profile", prof, "--compare", other, "--out", out)
    assert res.exit_code == 0, res.output
    for name in ("timeline.png", "timeline.svg", "timeline_compare.png", "memory.png", "stages.png",
                 "report.html", "report.md"):
        assert (out / name).stat().st_size > 1000, name
    assert res.output.startswith("step time ")
    assert "compare: step time" in res.output
    html = (out / "report.html").read_text()
    assert "http://" not in html and "https://" not in html


def test_report_json(toy, tmp_path):
    cfg, _, prof = toy
    res = run("report", cfg, "--profile", prof, "--out", tmp_path / "r", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["compare"] is None
    assert [p.rsplit("/", 1)[-1] for p in out["files"]][-2:] == ["report.html", "report.md"]
    assert out["report"]["step_time_ms"] > 0


def test_report_needs_out(toy):
    res = run("report", toy[0])
    assert res.exit_code == 2 and "--out" in res.output


@pytest.mark.parametrize("bad", ["missing_compare", "out_is_file", "bad_hbm"])
def test_report_bad_input_one_line_exit_2(toy, tmp_path, bad):
    cfg, _, prof = toy
    args = ["report", str(cfg), "--profile", str(prof), "--out", str(tmp_path / "r")]
    if bad == "missing_compare":
        args += ["--compare", str(tmp_path / "nope.yaml")]
    elif bad == "out_is_file":
        (tmp_path / "f").write_text("")
        args[-1] = str(tmp_path / "f")
    else:
        args += ["--hbm", "lots"]
    r = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.lower().startswith("error:")]
    assert len(errors) == 1, r.stderr                  # one error line (click may add its usage)


def test_report_help():
    res = run("report", "--help")
    assert res.exit_code == 0 and "--compare" in res.output


def test_readme_timeline_committed_and_documented():
    png = ROOT / "docs" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    img = imread(png)
    assert img.shape[1] > 1500 and img[:, :, :3].std() > 0.1      # wide and not blank
    doc = (ROOT / "README.md").read_text()
    assert "scripts/make_readme_images.sh" in doc and "(docs/timeline.png)" in doc
    assert (ROOT / "scripts" / "make_readme_images.sh").stat().st_mode & 0o111
