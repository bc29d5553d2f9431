"""One unit for the bubble, honest memory percentages and one time axis for compared timelines
(issue 19 item 9). Numbers are worked out by hand from the toy profiles of conftest.py."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from autotune.config.layout import Layout  # noqa: E402
from autotune.cost.report import evaluate_layout  # noqa: E402
from autotune.emit import plots  # noqa: E402
from autotune.emit.html_report import comparison_rows, write_report  # noqa: E402
from autotune.emit.render import (bubble_line, device_time_shares, headroom_text,  # noqa: E402
                                  pct_of_budget, summary_line)
from autotune.profile.schema import profile_from_dict  # noqa: E402
from tests.emit.conftest import TOY_PROFILE, toy_layout  # noqa: E402


@pytest.fixture
def interleaved():
    """8 toy layers, 2 stages × 2 chunks of 2 layers, chunk 1 of stage 0 recomputes 1 layer, 4
    micro-batches (interleaved 1F1B). Model compute C = 8 layers · 3 ms · 4 = 96 ms, replay
    1 ms · 4 = 4 ms; the simulated step is 58 ms, so device time P·T = 116 ms and idle 16 ms.
    SAPP terms (of C): ideal (P−1)/(V·m) = 1/8 -> 12 ms, comm 6 ms; 12 + 6 > 16, so SAPP's residual
    imbalance is −2 ms (−0.0208 of C)."""
    prof = profile_from_dict({**TOY_PROFILE, "layer_kinds": [["dense", 8]]})
    lay = np.array([[2, 2], [2, 2]])
    z = np.zeros_like(lay)
    return evaluate_layout(prof, Layout(lay, np.array([[0, 0], [1, 0]]), z, z.copy()), micro_batch_num=4,
                           schedule="1f1b", hbm_mib=1000.0)


def test_negative_sapp_imbalance_becomes_capped_terms(interleaved):
    r = interleaved
    assert r.step_time_ms == pytest.approx(58.0)
    assert r.bubble["imbalance"] == pytest.approx(-2 / 96)        # SAPP's residual, as the cost model keeps it
    sh = device_time_shares(r)
    assert sh["compute"] == pytest.approx(96 / 116)
    assert sh["recompute"] == pytest.approx(4 / 116)
    assert sh["idle"] == pytest.approx(16 / 116) == pytest.approx(r.bubble_fraction)
    assert sh["fill_drain"] == pytest.approx(12 / 116)
    assert sh["comm"] == pytest.approx(4 / 116)                   # capped at what idle is left
    assert sh["imbalance"] == pytest.approx(0.0)
    assert min(sh.values()) >= 0
    line = bubble_line(r)
    assert line == ("device time: compute 82.8% + recompute replay 3.4% + idle (bubble) 13.8% "
                    "(fill/drain 10.3% + p2p wait 3.4% + imbalance 0.0%)")
    assert "-" not in line                                        # nothing negative, one unit


def test_shares_of_the_hand_simulated_toy(toy_report):
    """conftest's 1F1B toy: P·T = 56 ms, compute 36, replay 3, idle 17 = fill/drain 12 + p2p 2 + rest 3."""
    sh = device_time_shares(toy_report)
    expect = {"compute": 36, "recompute": 3, "idle": 17, "fill_drain": 12, "comm": 2, "imbalance": 3}
    assert sh == pytest.approx({k: v / 56 for k, v in expect.items()})
    assert sh["compute"] + sh["recompute"] + sh["idle"] == pytest.approx(1.0)
    assert "idle (bubble) 30.4% of device time" in summary_line(toy_report)


@pytest.mark.parametrize("peak, budget, pct, room", [
    (55645, 55808, "99.7%", "163 MiB headroom (0.3%)"),           # the README's TeleChat answer
    (55800, 55808, "99.9%", "8 MiB headroom (<0.1%)"),            # 99.986 % is not 100 %
    (55808, 55808, "100.0%", "0 MiB headroom (0.0%)"),
    (56000, 55808, "100.3%", "over budget by 192 MiB (0.3%)"),
    (45802, 55808, "82.1%", "10006 MiB headroom (17.9%)"),         # as the text report's tables write MiB
])
def test_honest_percentages(peak, budget, pct, room):
    assert pct_of_budget(peak, budget) == pct
    assert headroom_text(peak, budget) == room


def test_headroom_thousands_only_where_asked():
    """The text report writes MiB without separators everywhere (its tables, the summary line and
    the headroom note alike); the HTML report's tables write 10,006."""
    assert headroom_text(45802, 55808, thousands=True) == "10,006 MiB headroom (17.9%)"
    assert headroom_text(57000, 55808, thousands=True) == "over budget by 1,192 MiB (2.1%)"
    assert headroom_text(57000, 55808) == "over budget by 1192 MiB (2.1%)"


def test_memory_labels_never_say_100_percent_below_the_budget(toy_profile):
    """Stage 0 peaks at 70 MiB; a 70.02 MiB budget is 99.97 % used: labelled 99.9 %, not 100 %."""
    rep = evaluate_layout(toy_profile, toy_layout(), micro_batch_num=3, schedule="1f1b", hbm_mib=70.02)
    fig = plots.memory_figure(rep, profile=toy_profile)
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert labels[0] == "peak 70 MiB (99.9% of budget, 0 MiB headroom)"
    assert labels[1] == "peak 51 MiB (72.8% of budget, 19 MiB headroom)"
    over = evaluate_layout(toy_profile, toy_layout(), micro_batch_num=3, schedule="1f1b", hbm_mib=60.0)
    labels = [t.get_text() for ax in plots.memory_figure(over, profile=toy_profile).axes for t in ax.texts]
    assert labels[0] == "peak 70 MiB (116.7% of budget, over by 10 MiB)"
    assert "100%" not in "".join(labels)


def test_comparison_rows_show_headroom_in_mib_and_percent(toy_report, toy_profile):
    slower = evaluate_layout(toy_profile, toy_layout(recompute=(2, 2)), micro_batch_num=3, schedule="1f1b",
                             hbm_mib=100.0)
    rows = comparison_rows(toy_report, {"full recompute": slower})
    assert rows[0] == ["config", "step time (ms)", "vs tuned", "idle (bubble)", "worst-stage peak (MiB)",
                       "headroom", "fits"]
    assert rows[1] == ["tuned", "28.0", "-", "30.4%", "70", "30 MiB (30.0%)", "yes"]
    assert rows[2][:3] == ["full recompute", "34.0", "+21.4%"]


def _xlim_and_px(fig):
    ax = fig.axes[0]
    return ax.get_xlim(), tuple(fig.get_size_inches())


def test_shared_time_axis_makes_the_faster_run_shorter(toy_report, toy_profile):
    """Tuned 28 ms vs a slower 34 ms (full recompute): drawn alone each fills its own axis; on the
    shared axis both end at 34 ms with the same inches per ms, and the 28 ms run stops earlier."""
    slower = evaluate_layout(toy_profile, toy_layout(recompute=(2, 2)), micro_batch_num=3, schedule="1f1b",
                             hbm_mib=100.0)
    assert slower.step_time_ms == pytest.approx(34.0)
    end, scale = plots.shared_time_axis([toy_report, slower], [toy_profile, toy_profile])
    assert end == pytest.approx(34.0)
    a = plots.timeline_figure(toy_report, profile=toy_profile, time_axis=(end, scale))
    b = plots.timeline_figure(slower, profile=toy_profile, time_axis=(end, scale))
    (xa, sa), (xb, sb) = _xlim_and_px(a), _xlim_and_px(b)
    assert xa == pytest.approx(xb) and xa[1] == pytest.approx(34.0 * 1.002)
    assert sa == pytest.approx(sb)
    ends = {ln.get_gid(): ln.get_xdata()[0] for ln in a.axes[0].lines}
    assert ends["step-end"] == pytest.approx(28.0)
    # 2 ms (one forward box) is the same number of pixels in both pictures (one scale)
    px = [f.axes[0].transData.transform([(0, 0), (2, 0)]) for f in (a, b)]
    assert px[0][1][0] - px[0][0][0] == pytest.approx(px[1][1][0] - px[1][0][0])
    alone = plots.timeline_figure(toy_report, profile=toy_profile)
    assert alone.axes[0].get_xlim()[1] == pytest.approx(28.0 * 1.002)


def test_report_timelines_have_equal_size_and_axis(toy_report, toy_profile, tmp_path):
    slower = evaluate_layout(toy_profile, toy_layout(recompute=(2, 2)), micro_batch_num=3, schedule="1f1b",
                             hbm_mib=100.0)
    write_report(toy_report, tmp_path, compare=slower, profile=toy_profile)
    a = imread(tmp_path / "timeline.png")
    b = imread(tmp_path / "timeline_compare.png")
    assert a.shape == b.shape
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Terms</h2>" in html and "imbalance" in html and "Never negative" in html
    assert "## Terms" in (tmp_path / "report.md").read_text()


def test_comparison_table_writes_fits_as_words(interleaved):
    """The text table's fits column says yes / NO, not Python's True / False (a new user read
    ``True`` next to YAML that spells booleans ``true``): the toy layout at 1,000 MiB fits, and the
    same layout against a budget 1 MiB below its peak does not."""
    from autotune.emit.render import comparison_table, fits_word

    prof = profile_from_dict({**TOY_PROFILE, "layer_kinds": [["dense", 8]]})
    lay = np.array([[2, 2], [2, 2]])
    z = np.zeros_like(lay)
    tight = evaluate_layout(prof, Layout(lay, np.array([[0, 0], [1, 0]]), z, z.copy()), micro_batch_num=4,
                            schedule="1f1b", hbm_mib=interleaved.peak_mib - 1.0)
    assert interleaved.fits is True and tight.fits is False
    lines = comparison_table(interleaved, {"user": tight}).splitlines()
    assert lines[0].endswith("fits")
    assert lines[1].startswith("tuned (best)") and lines[1].endswith("  yes")
    assert lines[2].startswith("user") and lines[2].endswith("  NO")
    assert "True" not in "\n".join(lines) and "False" not in "\n".join(lines)
    assert [fits_word(x) for x in (True, False, None)] == ["yes", "NO", "unknown"]
