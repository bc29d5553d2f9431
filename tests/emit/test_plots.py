"""Pictures of a cost report: the data behind them equals the simulation, and the drawn artists
and pixels sit where the simulation says (toy numbers worked out in conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from autotune.config.layout import Layout  # noqa: E402
from autotune.cost.report import evaluate_layout  # noqa: E402
from autotune.emit import plots  # noqa: E402
from autotune.errors import ConfigError  # noqa: E402
from autotune.profile.schema import profile_from_dict  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

HAND = {  # (stage, kind, mb) -> (start, end) from the hand simulation in conftest.py
    (0, "fwd", 0): (0, 2), (0, "fwd", 1): (2, 4), (0, "bwd", 0): (10, 14), (0, "fwd", 2): (14, 16),
    (0, "bwd", 1): (17, 21), (0, "bwd", 2): (24, 28),
    (1, "fwd", 0): (2.5, 4.5), (1, "recompute", 0): (4.5, 5.5), (1, "bwd", 0): (5.5, 9.5),
    (1, "fwd", 1): (9.5, 11.5), (1, "recompute", 1): (11.5, 12.5), (1, "bwd", 1): (12.5, 16.5),
    (1, "fwd", 2): (16.5, 18.5), (1, "recompute", 2): (18.5, 19.5), (1, "bwd", 2): (19.5, 23.5),
}


def _key(g):
    return (g.stage, g.kind, g.mb)


def test_toy_report_matches_hand_simulation(toy_report):
    assert toy_report.step_time_ms == pytest.approx(28.0)
    assert toy_report.bubble_fraction == pytest.approx(1 - 39 / 56)
    assert [s.peak_mib for s in toy_report.stages] == pytest.approx([70.0, 51.0])


@pytest.mark.parametrize("with_profile", [True, False])
def test_segments_equal_hand_simulation(toy_report, toy_profile, with_profile):
    segs = plots.timeline_segments(toy_report, toy_profile if with_profile else None)
    compute = {_key(g): (g.start_ms, g.end_ms) for g in segs if g.kind != "p2p"}
    assert set(compute) == set(HAND)
    np.testing.assert_allclose([compute[k] for k in HAND], list(HAND.values()))
    p2p = sorted((g.stage, g.start_ms, g.end_ms) for g in segs if g.kind == "p2p")
    # every cross-stage dependency: 3 forwards into stage 1, 3 backwards into stage 0, 0.5 ms each
    np.testing.assert_allclose(p2p, [(0, 9.5, 10), (0, 16.5, 17), (0, 23.5, 24),
                                     (1, 2, 2.5), (1, 4, 4.5), (1, 16, 16.5)])


def test_p2p_hop_read_off_timeline_without_profile(toy_report):
    assert plots.p2p_hop_ms(toy_report) == pytest.approx(0.5)


def test_segments_cover_every_op_once_interleaved(toy_profile):
    prof = profile_from_dict({**_prof_dict(), "layer_kinds": [["dense", 8]]})
    lay = np.asarray([[2, 2], [2, 2]], dtype=np.int64)
    z = np.zeros_like(lay)
    rep = evaluate_layout(prof, Layout(lay, z, z.copy(), z.copy()), micro_batch_num=4, schedule="1f1b")
    segs = plots.timeline_segments(rep, prof)
    busy = np.zeros(2)
    for g in segs:
        if g.kind != "p2p":
            busy[g.stage] += g.dur_ms
    assert busy == pytest.approx(rep.sim.busy_ms[0])
    assert {(g.stage, g.chunk) for g in segs} == {(p, v) for p in range(2) for v in range(2)}
    assert sum(g.kind == "fwd" for g in segs) == 2 * 2 * 4


def _prof_dict():
    from tests.emit.conftest import TOY_PROFILE

    return dict(TOY_PROFILE)


def test_memory_series_peaks_and_values(toy_report, toy_profile):
    series = plots.memory_series(toy_report, toy_profile)
    assert [float(y.max()) for _, y in series] == pytest.approx([s.peak_mib for s in toy_report.stages])
    t0, y0 = series[0]
    assert y0[0] == pytest.approx(30.0) and y0[-1] == pytest.approx(30.0)
    assert np.interp(3.0, t0, y0) == pytest.approx(30 + 20 + 10)   # halfway through F1 on stage 0
    assert np.interp(12.0, t0, y0) == pytest.approx(70 - 10)       # halfway through B0
    t1, y1 = series[1]
    assert t1[-1] == pytest.approx(28.0) and y1.max() == pytest.approx(51.0)


def test_memory_needs_costs(toy_report):
    if getattr(toy_report, "costs", None) is not None:
        pytest.skip("the cost model attaches per-chunk costs")
    with pytest.raises(ConfigError) as e:
        plots.memory_series(toy_report)
    assert e.value.rule == "needs_profile"


def _boxes(fig, gid):
    """x-extents of the boxes in the collection with this gid."""
    ax = fig.axes[0]
    out = []
    for coll in ax.collections:
        if coll.get_gid() == gid:
            for path in coll.get_paths():
                xs = path.vertices[:, 0]
                out.append((float(xs.min()), float(xs.max())))
    return sorted(out)


def test_timeline_artists_sit_where_simulation_says(toy_report, toy_profile):
    fig = plots.timeline_figure(toy_report, profile=toy_profile)
    np.testing.assert_allclose(_boxes(fig, "timeline-recompute-c0-s1"), [(4.5, 5.5), (11.5, 12.5), (18.5, 19.5)])
    np.testing.assert_allclose(_boxes(fig, "timeline-fwd-c0-s0"), [(0, 2), (2, 4), (14, 16)])
    np.testing.assert_allclose(_boxes(fig, "timeline-bwd-c0-s0"), [(10, 14), (17, 21), (24, 28)])
    title = fig.axes[0].get_title(loc="left")
    assert "step time 28.0 ms" in title and "idle (bubble) 30.4% of device time" in title
    # one unit, device time P·T = 56 ms: compute 36, replay 3, idle 17 = fill/drain 12 + p2p 2 + imbalance 3
    assert ("device time: compute 64.3% + recompute replay 5.4% + fill/drain 21.4% + p2p wait 3.6% + "
            "imbalance 5.4%") in title
    texts = sorted((t.get_position(), t.get_text()) for t in fig.axes[0].texts)
    assert ((1.0, 0), "0") in texts and ((26.0, 0), "2") in texts   # micro-batch ids centred


def test_timeline_pixels(toy_report, toy_profile, tmp_path):
    """Sample the rendered PNG at points of the simulated timeline."""
    fig = plots.timeline_figure(toy_report, profile=toy_profile, labels=False)
    path = plots.save_figure(fig, tmp_path / "t.png")
    img = imread(path)[:, :, :3]
    w, h = fig.get_size_inches() * fig.dpi
    assert abs(img.shape[0] - h) <= 1 and abs(img.shape[1] - w) <= 1
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]

    def rgb(t_ms, stage):
        x, y = ax.transData.transform((t_ms, stage))
        return img[int(round(img.shape[0] - y)), int(round(x))]

    assert rgb(1.0, 0) == pytest.approx(to_rgb(plots.COLORS["fwd"]), abs=0.02)
    assert rgb(5.0, 1) == pytest.approx(to_rgb(plots.COLORS["recompute"]), abs=0.02)
    assert rgb(7.0, 1) == pytest.approx(to_rgb(plots.COLORS["bwd"]), abs=0.02)
    assert rgb(6.5, 0) == pytest.approx((1, 1, 1), abs=0.02)          # stage 0 idles 4..10 ms
    assert rgb(1.0, 1) == pytest.approx((1, 1, 1), abs=0.02)          # stage 1 waits for F0
    # the whole row of stage 1 between 4.5 and 23.5 ms is never white: it is busy throughout
    x0 = int(ax.transData.transform((4.6, 1))[0])
    x1 = int(ax.transData.transform((23.4, 1))[0])
    row = img[int(round(img.shape[0] - ax.transData.transform((0, 1.2))[1])), x0:x1]
    assert not np.any(np.all(row > 0.98, axis=1))


def test_chunks_have_distinct_colours():
    cs = {plots.chunk_color(k, v, 3) for k in ("fwd", "bwd") for v in range(3)}
    assert len(cs) == 6


@pytest.fixture(scope="module")
def big_report():
    prof = profile_from_dict({"kinds": {"d": {"fwd_ms": 1, "bwd_ms": 2, "act_mib": 10, "static_mib": 5}},
                              "layer_kinds": [["d", 32]], "p2p_ms": 0.1})
    lay = np.full((1, 16), 2, dtype=np.int64)
    z = np.zeros_like(lay)
    return evaluate_layout(prof, Layout(lay, z, z.copy(), z.copy()), micro_batch_num=64, schedule="1f1b")


def test_ids_readable_16_stages_64_microbatches(big_report):
    fig = plots.timeline_figure(big_report)
    ax = fig.axes[0]
    assert len(ax.texts) == 2 * 16 * 64     # every forward and backward box is labelled
    w_in, h_in = fig.get_size_inches()
    assert w_in <= plots.MAX_TIMELINE_WIDTH_IN and h_in < 10
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    x_px_per_ms = ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0]
    # the shortest box (a 2 ms forward) is wider than the widest two-digit label
    widest = max(t.get_window_extent(r).width for t in ax.texts)
    assert widest < 2 * x_px_per_ms
    assert min(t.get_fontsize() for t in ax.texts) >= 7
    img = np.asarray(canvas.buffer_rgba())
    assert abs(img.shape[1] - w_in * fig.dpi) <= 1


def test_memory_figure_marks_peaks_and_budget(toy_report, toy_profile, tmp_path):
    fig = plots.memory_figure(toy_report, profile=toy_profile)
    for p, peak in enumerate([70.0, 51.0]):
        ax = fig.axes[p]
        lines = {ln.get_gid(): ln for ln in ax.lines}
        assert lines[f"peak-s{p}"].get_ydata()[0] == pytest.approx(peak)
        assert lines[f"budget-s{p}"].get_ydata()[0] == pytest.approx(100.0)
    path = plots.save_figure(fig, tmp_path / "memory.png")
    img = imread(path)[:, :, :3]
    assert np.abs(np.array(img.shape[:2]) - fig.get_size_inches()[::-1] * fig.dpi).max() <= 1
    assert (img < 0.9).any(axis=2).mean() > 0.02      # not blank


def test_stages_figure_bars(toy_report, toy_profile, tmp_path):
    other = evaluate_layout(toy_profile, _layout_no_rec(), micro_batch_num=3, schedule="1f1b", hbm_mib=100.0)
    fig = plots.stages_figure([toy_report, other], ["tuned", "yours"], profiles=[toy_profile, toy_profile])
    ax_m, ax_t = fig.axes[:2]
    bars = {c.get_label(): [p.get_height() for p in c] for c in ax_m.containers + ax_t.containers}
    assert bars["mem-static-0"] == pytest.approx([30, 40])
    assert bars["mem-act-0"] == pytest.approx([40, 11])
    assert bars["mem-saved-0"] == pytest.approx([0, 9])     # stage 1 keeps 11 instead of 20 MiB
    assert bars["mem-act-1"] == pytest.approx([40, 20])
    assert bars["mem-saved-1"] == pytest.approx([0, 0])
    assert bars["time-recompute-0"] == pytest.approx([0, 3])
    assert bars["time-bwd-0"] == pytest.approx([12, 12])
    xs0 = [p.get_x() for p in ax_m.containers[0]]
    xs1 = [p.get_x() for c in ax_m.containers if c.get_label() == "mem-static-1" for p in c]
    assert all(a < b for a, b in zip(xs0, xs1))               # tuned left of yours, per stage
    img = imread(plots.save_figure(fig, tmp_path / "stages.png"))
    assert abs(img.shape[0] - fig.get_size_inches()[1] * fig.dpi) <= 1


def _layout_no_rec():
    from tests.emit.conftest import toy_layout

    return toy_layout(recompute=(0, 0))


def test_study_plots_png_and_offline_html(tmp_path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: (t.suggest_float("a", 0, 1) - 0.3) ** 2 + t.suggest_float("b", 0, 1), n_trials=12)
    before = dict(matplotlib.rcParams)
    files = plots.write_study_plots(study, tmp_path)
    assert dict(matplotlib.rcParams) == before     # Optuna's ggplot style does not leak out
    names = {f.name for f in files}
    assert {"study_history.png", "study_importance.png", "study_parallel.png",
            "study_history.html", "study_importance.html", "study_parallel.html"} <= names
    for f in files:
        if f.suffix == ".png":
            img = imread(f)
            assert img.shape[0] > 200 and img[:, :, :3].std() > 0.05
        else:
            html = f.read_text()
            assert "<script src=\"http" not in html and "cdn.plot.ly" not in html.split("<body>")[1][:2000]
            assert len(html) > 1_000_000     # plotly.js inlined


def test_study_plots_say_nothing_about_ranges_with_few_trials(tmp_path):
    """A study whose parameter range depends on the trial (as the search's offsets depend on
    pp_interleave_num): Optuna's importance evaluator warns once per parameter and picture that
    some ranges hold fewer than 2 trials (96 UserWarnings on the Llama example's --report); the
    study pictures are written without any warning reaching the user."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_int("a", 0, 1 + (t.number % 5 == 4)) + t.suggest_float("b", 0, 1), n_trials=7)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        optuna.importance.get_param_importances(study)
    assert any("less than" in str(w.message) for w in seen)  # the case is real
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        files = plots.write_study_plots(study, tmp_path)
    assert files
    assert [str(w.message) for w in seen if issubclass(w.category, UserWarning)] == []


def test_study_plots_skip_empty_study():
    import optuna

    assert plots.study_figures(optuna.create_study()) == {}


def test_no_matplotlib_on_import():
    code = ("import sys, autotune, autotune.cost.report, autotune.emit.plots, autotune.emit.html_report, "
            "autotune.emit.notebook, autotune.commands.report; "
            "assert 'matplotlib' not in sys.modules and 'optuna' not in sys.modules, 'loaded'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _registered():
    from autotune.cost.schedules import registered

    return registered()


@pytest.mark.parametrize("name", _registered())
def test_every_schedule_segments_and_memory_match_simulation(name):
    """Contract over every registered schedule: drawn busy time per stage = simulated busy time,
    drawn memory peak per stage = the cost model's peak."""
    prof = profile_from_dict({**_prof_dict(), "layer_kinds": [["dense", 8]],
                              "tail": {"static_mib": 30, "fwd_ms": 0.5, "bwd_ms": 1}})
    rep = None
    for V, m, k in ((1, 8, 1), (2, 8, 1), (1, 4, 2)):
        lay = np.full((V, 4), 8 // 4 // V, dtype=np.int64)
        z = np.zeros_like(lay)
        rec = z.copy()
        rec[0, 1] = 1
        try:
            rep = evaluate_layout(prof, Layout(lay, rec, z.copy(), z.copy()), micro_batch_num=m, schedule=name,
                                  seq_split_num=k, hbm_mib=200.0)
            break
        except (ValueError, TypeError):
            continue
    assert rep is not None, f"no toy size runs {name}"
    busy = np.zeros(4)
    for g in plots.timeline_segments(rep, prof):
        if g.kind != "p2p":
            busy[g.stage] += g.dur_ms
    np.testing.assert_allclose(busy, rep.sim.busy_ms[0])
    peaks = [float(y.max()) for _, y in plots.memory_series(rep, prof)]
    np.testing.assert_allclose(peaks, [s.peak_mib for s in rep.stages])
