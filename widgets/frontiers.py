"""Frontiers: where each dataflow is, against its inputs."""
from __future__ import annotations

import ipywidgets as w

from . import fmt
from .updater import Part

COLUMNS = [("dataflow", True), ("status", True), ("inputs at", True), ("input frontier", False),
           ("output frontier", False), ("lag (epochs)", False), ("lag", False), ("last update", False),
           ("updates", False), ("error", True)]


class Frontiers(w.HTML, Part):
    """One row per dataflow (``Engine.dataflow_stats``): the epochs its inputs were advanced to, their
    sealed frontier, its output frontier, how far it lags behind them (epochs, and seconds since the
    oldest ``advance_to`` it does not reflect yet), its last update's latency and the number of updates
    measured. Failed and cancelled dataflows show their error. ``rows`` holds the figures last shown."""

    min_interval = 0.5

    def __init__(self, **kwargs):
        super().__init__(value="<i>reading the engine&hellip;</i>", **kwargs)
        self.rows: list = []

    def refresh(self, reading):
        if reading.closed:
            self.rows, self.value = [], "<i>the engine is closed</i>"
            return
        out = []
        for d in sorted(reading.dataflows, key=lambda d: (d["retired"], d["name"])):
            ins = ", ".join(f"{n}@{v['epoch']}{' (closed)' if v['closed'] else ''}" for n, v in d["inputs"].items())
            lag = d["lag_epochs"]
            lag_s = d["lag_s"]
            failed = d["error"] is not None
            out.append(([d["name"], d["status"], ins or "-", fmt.frontier(d["input_frontier"]),
                         fmt.frontier(d["frontier"]), (fmt.count(lag), "warn" if lag else ""),
                         (fmt.seconds(lag_s) if lag_s else "-", "warn" if lag_s > 1 else ""),
                         fmt.seconds(d["latency_s"]), fmt.count(d["updates"]), d["error"] or ""],
                        "bad" if failed else ""))
        value = fmt.table(COLUMNS, out, "no dataflows installed")
        if reading.error:
            value = f"<div style='color:#b00'>the engine failed: {fmt.html.escape(reading.error)}</div>" + value
        self.rows = reading.dataflows
        if value != self.value:
            with self.hold_sync():
                self.value = value

    def show_error(self, error):
        self.value = f"<pre>{fmt.html.escape(f'frontiers: {type(error).__name__}: {error}')}</pre>"
