"""Trace sizes over time: records and bytes per arrangement over the last minutes."""
from __future__ import annotations

import math
from collections import deque

import ipywidgets as w
import numpy as np
from matplotlib.lines import Line2D

from . import render
from .updater import Part

WINDOW_S = 300.0   # how far back the plot reaches
SAMPLE_S = 1.0     # one sample per this many seconds: the ring holds WINDOW_S / SAMPLE_S of them
SHOWN = 8          # the largest arrangements (by bytes) drawn; the legend stays readable
DRAW_S = 3.0       # redrawn this often (sampling goes on every SAMPLE_S)
SPANS = (30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)  # the x axis shows the shortest of these holding the samples


class TraceSizes(w.Image, Part):
    """A PNG of two panels, records and bytes per arrangement against time, over the last ``window_s``
    seconds (the largest ``SHOWN`` arrangements). Samples live in a ring buffer (``samples``: deque of
    (time, {name: (records, bytes)}), bounded, at most one per ``SAMPLE_S`` however often it is refreshed),
    so memory stays fixed however long it runs. The y axes
    step through 1-2-5 limits, so the static part is redrawn only when a trace outgrows one."""

    min_interval = SAMPLE_S

    def __init__(self, window_s: float = WINDOW_S, **kwargs):
        _check_window(window_s)  # (before the widget is made: a refused one leaves nothing behind)
        super().__init__(format="png", **kwargs)
        self.window_s = window_s
        self.samples: deque = deque(maxlen=max(2, int(window_s / SAMPLE_S)))
        self.plot = render.Plot(4.6, 3.4)
        self._next_draw = 0.0

    def refresh(self, reading):
        if reading.closed:
            return
        # at most one sample per SAMPLE_S, however often it is refreshed (dash.refresh() by hand in a loop):
        # the ring then spans WINDOW_S
        if not self.samples or reading.at - self.samples[-1][0] >= SAMPLE_S:
            self.samples.append((reading.at, {f"{r['name']} ({r['dataflow']})" if r["dataflow"] else r["name"]:
                                              (r["records"], r["bytes"]) for r in reading.arrangements}))
        if reading.at < self._next_draw and self.value:
            return
        self._next_draw = reading.at + DRAW_S
        last = self.samples[-1][1]
        names = sorted(sorted(last, key=lambda n: -last[n][1])[:SHOWN])
        series = {}
        for name in names:
            pts = np.array([(t - reading.at, *s[name]) for t, s in self.samples if name in s], np.float64)
            series[name] = pts
        top_r = _nice(max((p[:, 1].max() for p in series.values()), default=1))
        most = max((p[:, 2].max() for p in series.values()), default=1)
        unit, scale = next((u, s) for u, s in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10), ("B", 1))
                           if most >= s or s == 1)
        top_b = _nice(most / scale)
        age = reading.at - self.samples[0][0]
        span = next((s for s in SPANS if s >= age), self.window_s)  # the x axis grows in steps
        span = min(span, self.window_s)
        for pts in series.values():
            pts[:, 2] /= scale
        key = (top_r, top_b, unit, span, tuple(names))
        value = self.plot.render(key, lambda fig: _axes(fig, top_r, top_b, unit, span, names),
                                 lambda axes: _lines(axes, series))
        with self.hold_sync():
            self.value = value

    def show_error(self, error):
        self._next_draw = 0.0  # (the next reading redraws the plot)
        self.value = render.message(f"trace sizes: {type(error).__name__}: {error}")


def _check_window(window_s):
    """``window_s``: a finite number of seconds, more than 0 (0 or less would draw an empty or inverted time
    axis; NaN or infinity no axis at all)."""
    from ..engine.errors import ArgumentTypeError
    if isinstance(window_s, (bool, np.bool_)) or not isinstance(window_s, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"TraceSizes(window_s=...) is a number of seconds, not {type(window_s).__name__} "
                                f"({window_s!r})")
    if not math.isfinite(window_s) or window_s <= 0:
        raise ArgumentTypeError(f"TraceSizes(window_s={window_s!r}): the window is a finite number of seconds, "
                                f"more than 0")


def _nice(v: float) -> float:
    """The least of 1, 2, 5 times a power of ten that is at least ``v`` (and at least 1)."""
    v = max(float(v), 1.0)
    e = 10.0 ** math.floor(math.log10(v))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= v)


def _axes(fig, top_r, top_b, unit, span, names):
    """The static part: axes, labels, grid and the legend (redrawn when the limits or names change)."""
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.13, top=0.92, hspace=0.12)
    rec, byt = fig.subplots(2, 1, sharex=True)
    rec.set_title("trace sizes", fontsize=10)
    rec.set_ylabel("records")
    byt.set_ylabel(unit)
    byt.set_xlabel("seconds ago")
    rec.set_ylim(0, top_r * 1.05)
    byt.set_ylim(0, top_b * 1.05)
    byt.set_xlim(-span, 0)
    rec.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}" if v < 1e6 else f"{v / 1e6:g}M")
    byt.yaxis.set_major_formatter(lambda v, _: f"{v:g}")
    for ax in (rec, byt):
        ax.grid(True, alpha=0.3)
    if names:
        rec.legend(handles=[Line2D([], [], color=f"C{i}") for i in range(len(names))], labels=render.labels(names),
                   fontsize=6, loc="upper left")
    else:
        rec.text(0.5, 0.5, "no arrangements yet", transform=rec.transAxes, ha="center", va="center")
    return [rec, byt]


def _lines(axes, series) -> list:
    rec, byt = axes
    out = []
    for i, pts in enumerate(series.values()):
        out.append(rec.plot(pts[:, 0], pts[:, 1], color=f"C{i}", scalex=False, scaley=False)[0])
        out.append(byt.plot(pts[:, 0], pts[:, 2], color=f"C{i}", scalex=False, scaley=False)[0])
    return out
