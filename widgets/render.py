"""Matplotlib plots as PNG bytes for ``ipywidgets.Image``, without pyplot, cheaply enough to redraw live.

pyplot keeps global state and may start a GUI backend; the widgets draw on their own ``Figure`` with the
Agg canvas instead, which is safe off the main thread. A full draw of a small log-log plot costs tens of
milliseconds (tick labels, text layout), too much to repeat every second beside a running engine, so a
:class:`Plot` draws its static part (axes, ticks, labels, grid) once per *layout* (limits, scales: what
the caller's ``key`` says) and keeps the pixels; each refresh restores them and draws only the data
(lines, legend) on top (blitting), then encodes the PNG with fast compression. One lock serializes
drawing (matplotlib's font caches are shared); no engine lock is ever held while drawing.
"""
from __future__ import annotations

import io
import threading
import time

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import hsv_to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
from PIL import Image

DPI = 80
_lock = threading.Lock()


class Plot:
    """A figure whose static part is drawn once per layout key (module docstring)."""

    def __init__(self, width_in: float = 4.6, height_in: float = 3.0):
        self.fig = Figure(figsize=(width_in, height_in), dpi=DPI)
        self.canvas = FigureCanvasAgg(self.fig)
        self._key = None
        self._background = None
        self.axes: list = []
        self.full_draws = 0  # how often the static part was drawn (it should be rare)

    def render(self, key, layout, data) -> bytes:
        """PNG bytes: ``layout(fig)`` builds the static part and returns the axes (called when ``key``
        differs from the last one); ``data(axes)`` adds the artists drawn on top and returns them."""
        with _lock:
            if key != self._key or self._background is None:
                self.fig.clear()
                self.axes = list(layout(self.fig))
                self.canvas.draw()
                self._background = self.canvas.copy_from_bbox(self.fig.bbox)
                self._key = key
                self.full_draws += 1
            else:
                self.canvas.restore_region(self._background)
            renderer = self.canvas.get_renderer()
            for artist in data(self.axes):
                artist.draw(renderer)
                artist.remove()
            time.sleep(0)  # drawing holds the GIL: let the engine's threads have it before encoding
            w, h = self.canvas.get_width_height()
            buf = io.BytesIO()
            Image.frombuffer("RGBA", (w, h), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1).convert("RGB").save(
                buf, format="png", compress_level=1)
            return buf.getvalue()


def style(i: int) -> dict:
    """The ``i``-th curve's colour and line style, distinct for every ``i`` (matplotlib's C0..C9 repeat after
    ten): those ten, then tab20's light tints of them dashed, then dotted in colours spread by low-discrepancy
    sequences (hue, saturation, value each its own, so no two of thousands round to the same colour)."""
    if i < 20:
        return {"color": _TAB20[(i % 10) * 2 + i // 10], "linestyle": "-" if i < 10 else "--"}
    hsv = ((i * 0.6180339887) % 1.0, 0.4 + 0.5 * ((i * 0.7548776662) % 1.0), 0.5 + 0.4 * ((i * 0.5698402910) % 1.0))
    return {"color": hsv_to_rgb(hsv), "linestyle": ":"}


_TAB20 = colormaps["tab20"].colors  # (its even entries are C0..C9, each followed by a lighter tint)


def labels(names) -> list:
    """Names as legend labels drawn as written: ``$`` escaped (matplotlib reads text between two as
    mathtext, which may not parse), and control characters (a tab, a newline) and characters the plot's
    font lacks as ``?`` (matplotlib would warn about each missing glyph from the widgets' thread, into
    whatever cell runs then)."""
    return [_label(n) for n in names]


_shown: dict = {}  # name -> its label


def _label(name: str) -> str:
    got = _shown.get(name)
    if got is None:
        got = _shown[name] = plain(name)
        if len(_shown) > 4096:  # (names come and go with dataflows: keep the cache bounded)
            _shown.clear()
    return got


def plain(text) -> str:
    """``text`` as matplotlib draws it as written, without warnings: ``$`` escaped, and control characters
    (``str.isprintable`` is false for them) and characters the default font lacks as ``?``."""
    from matplotlib.font_manager import FontProperties, findfont, get_font
    font = get_font(findfont(FontProperties()))  # (the legend's: the default family)
    got = "".join(c if c.isprintable() and (c.isascii() or font.get_char_index(ord(c))) else "?"
                  for c in str(text))
    return got.replace("$", r"\$")


def log_axes(ax, x: bool = True, y: bool = True):
    """Log scales with plain tick labels (``0.001``, not mathtext: much cheaper) and no minor ticks."""
    for on, axis, scale in ((x, ax.xaxis, ax.set_xscale), (y, ax.yaxis, ax.set_yscale)):
        if on:
            scale("log")
            axis.set_major_locator(LogLocator(base=10, numticks=8))
            axis.set_minor_locator(NullLocator())
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def message(text: str, width_in: float = 4.6, height_in: float = 1.0) -> bytes:
    """A PNG of one line of text (a widget that cannot draw says why), drawn as written (``plain``)."""
    p = Plot(width_in, height_in)
    text = plain(text)
    return p.render(None, lambda fig: [fig.text(0.02, 0.5, text, fontsize=8, va="center")], lambda axes: [])
