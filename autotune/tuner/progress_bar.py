"""Progress bars without ``TqdmWarning: IProgress not found`` in Jupyter.

``tqdm.auto`` picks the Jupyter widget inside a notebook kernel, and when ipywidgets is not
installed it warns ``TqdmWarning: IProgress not found. Please update jupyter and ipywidgets`` (once,
when ``tqdm.autonotebook`` is first imported) and falls back to the text bar. Optuna imports
``tqdm.auto`` when it is imported itself, so the warning appeared in every notebook that ran a
search, whether a bar was asked for or not. autotune does not require ipywidgets:

- :func:`quiet_tqdm_auto` (called when :mod:`autotune.tuner` is imported, before any Optuna import)
  imports ``tqdm.auto`` with that one warning filtered, inside a notebook kernel without ipywidgets
  only; the result is the text bar tqdm would have fallen back to anyway;
- :func:`tqdm_class` gives the search's own bar: the widget when ipywidgets is importable, the plain
  text bar otherwise.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from typing import Any

from tqdm.std import TqdmWarning
from tqdm.std import tqdm as text_tqdm


def _has_ipywidgets() -> bool:
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):  # a broken or stubbed module entry
        return False


def quiet_tqdm_auto() -> None:
    """In a Jupyter kernel without ipywidgets, import ``tqdm.auto`` once with its "IProgress not
    found" warning filtered (later imports, e.g. Optuna's, reuse the module and do not warn).
    Elsewhere nothing is imported."""
    if "ipykernel.zmqshell" not in sys.modules or "tqdm.autonotebook" in sys.modules or _has_ipywidgets():
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
        # importing tqdm.auto is the point (once, its warning filtered), and only in a kernel
        import tqdm.auto  # noqa: F401, PLC0415


def tqdm_class() -> Any:
    """``tqdm.auto.tqdm`` when ipywidgets is importable (a widget in Jupyter, text elsewhere),
    else ``tqdm.std.tqdm`` (text on stderr)."""
    if _has_ipywidgets():
        # tqdm.auto only where it finds ipywidgets: imported eagerly, it warns in every notebook
        from tqdm.auto import tqdm  # noqa: PLC0415

        return tqdm
    return text_tqdm
