"""The matplotlib Figure autotune's pictures are drawn on: it displays itself in Jupyter.

Figures are built without pyplot (no global state, any backend), so Jupyter would show them as
``<Figure size ...>`` text unless ``%matplotlib inline`` had registered a formatter. A
:class:`ReportFigure` carries ``_repr_png_``, which IPython calls itself; with ``%matplotlib
inline`` IPython's own Figure formatter takes precedence and the picture is the same. Everything
else is a plain ``matplotlib.figure.Figure`` (savefig, axes, artists).

This module imports matplotlib; it is imported only when a picture is drawn.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

#: Palette size of the PNGs shown in a notebook: the pictures are flat colour boxes, lines and
#: text, so 128 colours show no visible loss and make the PNG about 3× smaller (measured:
#: TeleChat2 timeline 123 kB -> 41 kB, memory 120 kB -> 34 kB).
NOTEBOOK_COLORS = 128


def compact_png(fig: Figure, *, dpi: float | None = None, colors: int = NOTEBOOK_COLORS) -> bytes:
    """PNG bytes of ``fig`` at ``dpi`` (default: the figure's), white background, no metadata,
    reduced to a ``colors``-colour palette with Pillow (a matplotlib requirement)."""
    from PIL import Image  # noqa: PLC0415 - Pillow: comes with matplotlib (optional report extra)

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi or fig.dpi, metadata={"Software": None}, facecolor="white")
    img = Image.open(io.BytesIO(raw.getvalue())).convert("RGB").quantize(colors=colors)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


class ReportFigure(Figure):
    """A ``matplotlib.figure.Figure`` that Jupyter displays as a PNG (figure dpi, 128 colours)."""

    def _repr_png_(self) -> bytes:
        """PNG bytes of the figure for IPython's display (:func:`compact_png`)."""
        return compact_png(self)
