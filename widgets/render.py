"""Matplotlib figures to PNG bytes for ``ipywidgets.Image``, without pyplot.

pyplot keeps global state and may start a GUI backend; the widgets draw on their own ``Figure`` with the
Agg canvas instead, which is safe off the main thread. One lock serializes drawing (matplotlib's text and
font caches are shared), so the first paint on the main thread and the updater's refreshes never draw at
once; no engine lock is ever held while drawing.
"""
from __future__ import annotations

import io
import threading

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 80
_lock = threading.Lock()


def figure(width_in: float = 4.6, height_in: float = 3.0) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png(draw, width_in: float = 4.6, height_in: float = 3.0) -> bytes:
    """Call ``draw(fig)`` on a fresh figure and return it as PNG bytes."""
    with _lock:
        fig = figure(width_in, height_in)
        draw(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
        return buf.getvalue()
