"""Latency CCDF: per dataflow, the fraction of updates slower than x, on log-log axes (as in the K-Pg
paper's figures), from the bounded histogram each dataflow keeps (``kpgnb.engine.latency``)."""
from __future__ import annotations

import ipywidgets as w
import numpy as np

from . import render
from ..engine import latency as lat
from .updater import Part


class LatencyCCDF(w.Image, Part):
    """A PNG (``value``) redrawn when a dataflow's histogram changed, at most every ``min_interval``
    seconds. ``curves`` holds what was drawn last: dataflow -> (x seconds, fraction at or above x)."""

    min_interval = 2.0

    def __init__(self, **kwargs):
        super().__init__(format="png", **kwargs)
        self.curves: dict = {}
        self._drawn = None  # the histograms drawn last (the engine publishes a new array when counts change)

    def refresh(self, reading):
        hists = {n: c for n, c in reading.latency.items() if int(c.sum())}
        key = tuple(sorted((n, id(c)) for n, c in hists.items()))
        if key == self._drawn and self.value:
            return
        curves = {n: lat.ccdf(c) for n, c in sorted(hists.items())}
        value = render.png(lambda fig: _draw(fig, curves, hists))
        self._drawn = key
        self.curves = curves
        with self.hold_sync():
            self.value = value

    def show_error(self, error):
        self.value = render.png(lambda fig: fig.text(0.05, 0.5, f"{type(error).__name__}: {error}", fontsize=8))


def _draw(fig, curves, hists):
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("update latency (s)")
    ax.set_ylabel("fraction of updates ≥ x")
    ax.set_title("latency CCDF", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if not curves:
        ax.text(0.5, 0.5, "no updates measured yet", transform=ax.transAxes, ha="center", va="center")
        ax.set_xlim(lat.LOW * 10, 10)
        ax.set_ylim(1e-3, 1.5)
        return
    lo = min(x[0] for x, _ in curves.values())
    hi = max(x[-1] for x, _ in curves.values())
    ymin = min(y[-1] for _, y in curves.values())
    ax.set_xlim(lo / 2, hi * 4)
    ax.set_ylim(min(ymin / 2, 0.5), 1.5)
    for name, (x, y) in curves.items():
        n = int(hists[name].sum())
        # limits are set above: autoscaling a single point would warn about singular limits
        ax.step(x, y, where="post", label=f"{name} ({n:,})", scalex=False, scaley=False)
    ax.legend(fontsize=7, loc="lower left")
