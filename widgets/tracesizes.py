"""Trace sizes over time: records and bytes per arrangement over the last minutes."""
from __future__ import annotations

from collections import deque

import ipywidgets as w

from . import render
from .updater import Part

WINDOW_S = 300.0   # how far back the plot reaches
SAMPLE_S = 1.0     # one sample per this many seconds: the ring holds WINDOW_S / SAMPLE_S of them
SHOWN = 8          # the largest arrangements (by bytes) drawn; the legend stays readable


class TraceSizes(w.Image, Part):
    """A PNG of two panels, records and bytes per arrangement against time, over the last ``window_s``
    seconds. Samples live in a ring buffer (``samples``: deque of (time, {name: (records, bytes)}),
    bounded), so memory stays fixed however long it runs."""

    min_interval = SAMPLE_S

    def __init__(self, window_s: float = WINDOW_S, **kwargs):
        super().__init__(format="png", **kwargs)
        self.window_s = window_s
        self.samples: deque = deque(maxlen=max(2, int(window_s / SAMPLE_S)))
        self._next_draw = 0.0

    def refresh(self, reading):
        if reading.closed:
            return
        self.samples.append((reading.at, {f"{r['name']} ({r['dataflow']})" if r["dataflow"] else r["name"]:
                                          (r["records"], r["bytes"]) for r in reading.arrangements}))
        if reading.at < self._next_draw and self.value:
            return
        self._next_draw = reading.at + 2 * SAMPLE_S  # draw every other sample: half the rendering
        samples = list(self.samples)
        value = render.png(lambda fig: _draw(fig, samples, reading.at), 4.6, 3.4)
        with self.hold_sync():
            self.value = value

    def show_error(self, error):
        self.value = render.png(lambda fig: fig.text(0.05, 0.5, f"{type(error).__name__}: {error}", fontsize=8))


def _draw(fig, samples, now):
    rec, byt = fig.subplots(2, 1, sharex=True)
    rec.set_title("trace sizes", fontsize=10)
    rec.set_ylabel("records")
    byt.set_ylabel("bytes")
    byt.set_xlabel("seconds ago")
    last = samples[-1][1] if samples else {}
    names = sorted(last, key=lambda n: -last[n][1])[:SHOWN]
    for name in names:
        pts = [(t - now, s[name]) for t, s in samples if name in s]
        xs = [p[0] for p in pts]
        rec.plot(xs, [p[1][0] for p in pts], label=name)
        byt.plot(xs, [p[1][1] for p in pts])
    for ax in (rec, byt):
        ax.grid(True, alpha=0.3)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    if names:
        rec.legend(fontsize=6, loc="upper left")
    else:
        rec.text(0.5, 0.5, "no arrangements yet", transform=rec.transAxes, ha="center", va="center")
