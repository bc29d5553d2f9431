"""report.html / report.md and the notebook views: produced, self-contained, with real numbers."""

from __future__ import annotations

import base64
import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from autotune.cost.report import evaluate_layout  # noqa: E402
from autotune.emit import notebook  # noqa: E402
from autotune.emit.html_report import write_report  # noqa: E402
from autotune.errors import ConfigError  # noqa: E402
from tests.emit.conftest import toy_layout  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _self_contained(html: str) -> None:
    assert "http://" not in html and "https://" not in html
    for src in re.findall(r'src="([^"]*)"', html):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG
    assert "<link" not in html and "<script" not in html


@pytest.fixture
def other(toy_profile):
    return evaluate_layout(toy_profile, toy_layout(recompute=(0, 0)), micro_batch_num=3, schedule="1f1b",
                           hbm_mib=100.0)


def test_report_of_cost_report(toy_report, toy_profile, other, tmp_path):
    files = write_report(toy_report, tmp_path / "r", compare=other, profile=toy_profile)
    names = [f.name for f in files]
    assert names == ["timeline.png", "timeline.svg", "timeline_compare.png", "memory.png", "stages.png",
                     "report.html", "report.md"]
    for f in files:
        assert f.is_file() and f.stat().st_size > 1000
    html = (tmp_path / "r" / "report.html").read_text()
    _self_contained(html)
    assert len(re.findall(r'<img [^>]*src="data:image/png', html)) == 4
    assert "step time 28.0 ms" in html and "idle (bubble) 30.4% of device time" in html
    assert "<td>70</td>" in html and "<td>51</td>" in html       # per-stage peaks
    assert "offset" in html and "recompute" in html              # the YAML to paste
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| this config | 28.0 |" in md and "| comparison | 26.0 | -7.1% |" in md   # hand: no replay -> 26 ms
    assert "![timeline](timeline.png)" in md and "```yaml" in md


def test_report_without_profile_leaves_memory_out(toy_report, tmp_path):
    if getattr(toy_report, "costs", None) is not None:
        pytest.skip("the cost model attaches per-chunk costs")
    files = write_report(toy_report, tmp_path)
    assert "memory.png" not in [f.name for f in files]
    assert "memory over time left out" in (tmp_path / "report.html").read_text()


def test_report_out_dir_is_a_file(toy_report, tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    with pytest.raises(ConfigError) as e:
        write_report(toy_report, f)
    assert e.value.rule == "out_dir"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from autotune.api import search
    from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG

    d = tmp_path_factory.mktemp("toy")
    (d / "train.yaml").write_text(TOY_CONFIG)
    (d / "profile.yaml").write_text(TOY8_PROFILE)
    return search(d / "train.yaml", d / "profile.yaml", trials=20, timeout=2, seed=0)


def test_report_of_search_result(result, tmp_path):
    files = write_report(result, tmp_path)
    names = {f.name for f in files}
    assert {"timeline.png", "timeline_compare.png", "memory.png", "stages.png", "study_history.png",
            "study_history.html", "report.html", "report.md"} <= names
    html = (tmp_path / "report.html").read_text()
    _self_contained(html)
    assert f"{result.best.step_time_ms:.1f}" in html and "your config" in html
    assert 'href="study_history.html"' in html
    if getattr(result, "lower_bound_ms", None) is not None:
        assert f"lower bound {result.lower_bound_ms:,.1f} ms" in html and "certified gap" in html
    md = (tmp_path / "report.md").read_text()
    user = result.baselines["user"]
    rel = f"{user.step_time_ms / result.best.step_time_ms - 1:+.1%}"
    assert f"| your config | {user.step_time_ms:,.1f} | {rel} |" in md


def test_report_and_notebook_show_the_bound_of_each_vpp(result, tmp_path):
    import dataclasses

    from autotune.emit.notebook import search_result_html

    lb = result.lower_bound_ms or result.best.step_time_ms
    by = dataclasses.replace(result, lower_bound_by_vpp={1: lb, 2: lb + 12.5})
    line = (f"lower bound by pp_interleave_num (each tightened only while it could raise the least): "
            f"1: {lb:.1f} ms (")
    write_report(by, tmp_path)
    assert line in (tmp_path / "report.md").read_text()
    assert line in (tmp_path / "report.html").read_text()
    assert f"2: {lb + 12.5:.1f} ms" in search_result_html(by, figures=False)


def test_notebook_views(result, toy_report, toy_profile):
    html = notebook.search_result_html(result)
    assert "your config" in html and "data:image/png;base64," in html and "<table>" in html
    assert "offset" in html
    assert f"{result.best.step_time_ms:.1f}" in html
    fig = notebook.plot_timeline(result)
    assert isinstance(fig, Figure) and "step time" in fig.axes[0].get_title(loc="left")
    mem = notebook.plot_memory(result)
    assert isinstance(mem, Figure) and len(mem.axes) == result.best.layout.pp
    html = notebook.cost_report_html(toy_report, figures=False)
    assert "<td>70</td>" in html and "img" not in html
    assert isinstance(notebook.plot_memory(toy_report, profile=toy_profile), Figure)


def test_report_when_nothing_fits(tmp_path):
    from autotune.api import search
    from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG

    (tmp_path / "t.yaml").write_text(TOY_CONFIG)
    (tmp_path / "p.yaml").write_text(TOY8_PROFILE)
    res = search(tmp_path / "t.yaml", tmp_path / "p.yaml", trials=10, timeout=2, hbm_mib=30)
    assert res.best is None and res.closest is not None
    write_report(res, tmp_path / "r")
    html = (tmp_path / "r" / "report.html").read_text()
    _self_contained(html)
    assert 'class="summary bad"' in html and "DOES NOT FIT" in html
    assert f"exceeds it by {res.closest.excess_mib:,.0f} MiB" in html
    assert "closest (nothing fits)" in notebook.search_result_html(res, figures=False)
