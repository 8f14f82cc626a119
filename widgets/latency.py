"""Latency CCDF: per dataflow, the fraction of updates slower than x, on log-log axes (as in the K-Pg
paper's figures), from the bounded histogram each dataflow keeps (``kpgnb.engine.latency``)."""
from __future__ import annotations

import math

import ipywidgets as w
import numpy as np
from matplotlib.lines import Line2D

from . import render
from ..engine import latency as lat
from .updater import Part


STALE_S = 30.0   # at least this often the plot is redrawn while updates come in (its title counts them)
ALIKE = 0.02     # curves whose every point moved less than this many decades look the same: not redrawn
WIDTH = 10.0 ** (1 / lat.PER_DECADE)  # a bucket's upper edge over its lower edge


class LatencyCCDF(w.Image, Part):
    """A PNG (``value``) redrawn when a dataflow's histogram changed, at most every ``min_interval``
    seconds. Axes span whole decades around the data (the static part is redrawn only when they change).
    ``curves`` holds what was drawn last: dataflow -> (x seconds, fraction of updates at or above x)."""

    min_interval = 3.0

    def __init__(self, **kwargs):
        super().__init__(format="png", **kwargs)
        self.curves: dict = {}
        self.plot = render.Plot()
        self._drawn = None  # the histograms drawn last, by contents (an id() may be a freed array's, reused)
        self._redraw_by = 0.0  # redrawn by then even if nothing visible changed (the update count in the title)

    def refresh(self, reading):
        if reading.closed:
            return  # nothing more will be measured: keep showing what was
        hists = {n: c for n, c in reading.latency.items() if int(c.sum())}
        key = {n: c.tobytes() for n, c in hists.items()}
        if key == self._drawn and self.value:
            return
        curves = {n: lat.ccdf(c) for n, c in sorted(hists.items())}
        if self.value and reading.at < self._redraw_by and _alike(curves, self.curves):
            return  # no visible change: drawn by _redraw_by (a long steady run converges; the title's count)
        self._drawn = key
        self._redraw_by = reading.at + STALE_S
        if curves:
            lo = math.floor(math.log10(min(x[0] for x, _ in curves.values())))
            hi = math.ceil(math.log10(max(x[-1] for x, _ in curves.values()) * WIDTH) - 1e-9)
            ylo = math.floor(math.log10(min(y[-1] for _, y in curves.values())))
            limits = (10.0 ** lo, 10.0 ** max(hi, lo + 1), 10.0 ** min(ylo, -1))
        else:
            limits = (1e-4, 1.0, 1e-2)
        names = tuple(curves)
        total = sum(int(c.sum()) for c in hists.values())
        value = self.plot.render((limits, names), lambda fig: _axes(fig, limits, names),
                                 lambda axes: _curves(axes[0], curves, total))
        self.curves = curves
        with self.hold_sync():
            self.value = value

    def show_error(self, error):
        self._drawn, self._redraw_by = None, 0.0  # (the next reading redraws the plot)
        self.value = render.message(f"latency CCDF: {type(error).__name__}: {error}")


def _alike(a: dict, b: dict) -> bool:
    """Whether two sets of curves would look the same: same dataflows, same buckets, every fraction
    within ``ALIKE`` decades."""
    if a.keys() != b.keys():
        return False
    for n, (x, y) in a.items():
        bx, by = b[n]
        if len(x) != len(bx) or not np.array_equal(x, bx) or np.abs(np.log10(y) - np.log10(by)).max() > ALIKE:
            return False
    return True


def _axes(fig, limits, names):
    """The static part: axes, labels, grid and the legend (names only, so it stays put)."""
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.16, top=0.9)
    ax = fig.add_subplot()
    render.log_axes(ax)
    ax.set_xlim(limits[0], limits[1])
    ax.set_ylim(limits[2], 1.5)
    ax.set_xlabel("update latency (s)")
    ax.set_ylabel("fraction of updates ≥ x")
    ax.grid(True, alpha=0.3)
    if names:
        ax.legend(handles=[Line2D([], [], **render.style(i)) for i in range(len(names))],
                  labels=render.labels(names), fontsize=7, loc="lower left")
    else:
        ax.text(0.5, 0.5, "no updates measured yet", transform=ax.transAxes, ha="center", va="center")
    return [ax]


def _curves(ax, curves, total: int) -> list:
    # each step spans its bucket: the last one too, out to its bucket's upper edge (else updates all in one
    # bucket draw nothing)
    lines = [ax.step(np.append(x, x[-1] * WIDTH), np.append(y, y[-1]), where="post", scalex=False, scaley=False,
                     **render.style(i))[0]
             for i, (x, y) in enumerate(curves.values())]
    title = ax.text(0.5, 1.02, f"latency CCDF · {total:,} updates", transform=ax.transAxes, ha="center",
                    va="bottom", fontsize=10)
    return lines + [title]
