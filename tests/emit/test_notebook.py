"""Jupyter: figures display without ``%matplotlib inline``, the HTML views are small, and the
progress bar raises no ``TqdmWarning`` without ipywidgets (issue 19 item 8).

IPython's own display formatter decides what a notebook shows (``image/png`` = a picture,
``text/plain`` only = ``<Figure size ...>``), so the tests ask it.
"""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import autotune  # noqa: E402
from autotune.emit import notebook  # noqa: E402
from tests.conftest import EXAMPLES, ROOT  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


def _mime(shell, obj) -> set[str]:
    data, _ = shell.display_formatter.format(obj)
    return set(data)


def test_figures_display_without_matplotlib_inline(shell, toy_report, toy_profile):
    plain = Figure()
    plain.add_subplot().plot([0, 1])
    assert _mime(shell, plain) == {"text/plain"}          # what users saw: "<Figure size ...>"
    for fig in (notebook.plot_timeline(toy_report, profile=toy_profile),
                notebook.plot_memory(toy_report, profile=toy_profile),
                toy_report.plot_timeline(profile=toy_profile)):
        assert isinstance(fig, Figure)                    # still a matplotlib Figure for users
        assert _mime(shell, fig) == {"image/png", "text/plain"}
        png = shell.display_formatter.format(fig)[0]["image/png"]
        png = png if isinstance(png, bytes) else base64.b64decode(png)
        assert png[:8] == PNG
        from PIL import Image

        w, h = Image.open(io.BytesIO(png)).size
        assert (w, h) == tuple(round(x * fig.dpi) for x in fig.get_size_inches())


def test_figures_display_once_with_matplotlib_inline(shell, toy_report, toy_profile):
    """After ``%matplotlib inline`` IPython's Figure formatter is used: still one picture."""
    from IPython.core.pylabtools import select_figure_formats

    select_figure_formats(shell, {"png"})
    try:
        fig = notebook.plot_timeline(toy_report, profile=toy_profile)
        assert _mime(shell, fig) == {"image/png", "text/plain"}
    finally:
        select_figure_formats(shell, set())


def _img_sizes(html: str) -> list[tuple[int, int]]:
    from PIL import Image

    out = []
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', html):
        out.append(Image.open(io.BytesIO(base64.b64decode(data))).size)
    return out


def test_html_views_are_small():
    """Llama-3.1-70B (8 stages, 256 micro-batches): the full-size timeline is 187 in wide; the old
    view inlined it, 1,305,998 characters. The compact view is at most 14 in × 80 dpi, 64 colours."""
    rep = autotune.evaluate(EXAMPLES / "llama3_1_70b" / "train.yaml")
    html = rep._repr_html_()
    assert len(html) < 40_000, len(html)
    assert [w for w, _ in _img_sizes(html)] == [notebook.REPR_WIDTH_IN * notebook.REPR_DPI]
    assert "<table>" in html and "device time: compute" in html
    rep = autotune.evaluate(EXAMPLES / "telechat2_115b" / "train.yaml")   # was 165,712 characters
    assert len(rep._repr_html_()) < 50_000


def test_search_result_view_is_small_and_complete(toy_files):
    cfg, prof = toy_files
    res = autotune.search(cfg, prof, trials=5)
    html = res._repr_html_()
    assert len(html) < 40_000, len(html)
    assert "your config" in html and "headroom" in html and "offset" in html
    assert len(_img_sizes(html)) == 1


_NOTEBOOK_SIM = r"""
import sys, types, warnings
# a Jupyter kernel as tqdm.auto detects one, without ipywidgets
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
ipy = types.ModuleType("IPython")
class ZMQInteractiveShell: pass
ipy.get_ipython = lambda: ZMQInteractiveShell()
sys.modules["IPython"] = ipy
sys.modules["ipywidgets"] = None          # `import ipywidgets` fails
warnings.simplefilter("always")           # every warning is printed to stderr
MODE
"""


def _sim(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NOTEBOOK_SIM.replace("MODE", code)], cwd=ROOT,
                          capture_output=True, text=True)


def test_no_tqdm_warning_in_jupyter_without_ipywidgets():
    old = _sim("from tqdm.auto import tqdm")          # the simulation reproduces the reported warning
    assert old.returncode == 0 and "TqdmWarning: IProgress not found" in old.stderr
    new = _sim("from autotune.tuner.progress_bar import tqdm_class\n"
               "import tqdm.std\n"
               "cls = tqdm_class(); assert cls is tqdm.std.tqdm, cls\n"
               "bar = cls(total=3, disable=False); bar.update(3); bar.close()")
    assert new.returncode == 0, new.stderr
    assert "Warning" not in new.stderr


def test_search_progress_bar_in_jupyter_without_ipywidgets(toy_files):
    cfg, prof = toy_files
    r = _sim(f"import autotune\nres = autotune.search({str(cfg)!r}, {str(prof)!r}, trials=5, progress=True)\n"
             "assert res.best is not None")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr[-2000:]


def test_widget_bar_when_ipywidgets_is_there():
    code = ("import importlib.machinery\n"
            "m = types.ModuleType('ipywidgets'); m.__spec__ = importlib.machinery.ModuleSpec('ipywidgets', None)\n"
            "sys.modules['ipywidgets'] = m\n"
            "from autotune.tuner.progress_bar import tqdm_class\n"
            "import tqdm.auto\n"
            "assert tqdm_class() is tqdm.auto.tqdm")
    r = subprocess.run([sys.executable, "-c", "import sys, types\n" + code], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
