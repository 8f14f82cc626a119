"""The arrangement table: every arrangement the engine maintains, exported or internal, with its size,
readers, frontiers, merging and the reader that holds its compaction back."""
from __future__ import annotations

import ipywidgets as w

from . import fmt
from .updater import Part

COLUMNS = [("arrangement", True), ("dataflow", True), ("kind", True), ("key", True), ("records", False),
           ("batches", False), ("bytes", False), ("readers", False), ("since", False), ("upper", False),
           ("merges", False), ("shortfall", False), ("skew", False), ("compaction held by", True)]


class ArrangementTable(w.HTML, Part):
    """One row per arrangement (``Engine.arrangements()``): rows appear and disappear as dataflows are
    installed and dropped. ``skew`` is max over mean shard records (1.0: even); ``shortfall`` the rows
    merges in progress still have to merge; "compaction held by" names the reader whose frontier keeps
    ``since`` back, and by how many epochs. ``rows`` holds the figures last shown."""

    min_interval = 1.0

    def __init__(self, **kwargs):
        super().__init__(value="<i>reading the engine&hellip;</i>", **kwargs)
        self.rows: list = []

    def refresh(self, reading):
        if reading.closed:
            self.rows, self.value = [], "<i>the engine is closed</i>"
            return
        rows = sorted(reading.arrangements, key=lambda r: (r["dataflow"] or "", r["kind"] != "export", r["name"]))
        out = []
        for r in rows:
            blocker = r.get("blocker")
            held = (f"{blocker} ({r['blocked_epochs']} epochs behind)", "warn") if blocker else ""
            also = [e for e in r.get("exports", ()) if e != r["name"]]
            name = r["name"] + (f" (exported as {', '.join(also)})" if also else "")
            out.append(([name, r["dataflow"] or "-", r["kind"], ", ".join(r["key"]) or "-",
                         fmt.count(r["records"]), fmt.count(r["batches"]), fmt.nbytes(r["bytes"]),
                         fmt.count(r["readers"]), fmt.frontier(r["since"]), fmt.frontier(r["upper"]),
                         fmt.count(r["merges"]), fmt.count(r["merge_shortfall"]), f"{r['skew']:.2f}", held], ""))
        value = fmt.table(COLUMNS, out, "no arrangements yet")
        self.rows = rows
        if value != self.value:
            with self.hold_sync():
                self.value = value

    def show_error(self, error):
        self.value = f"<pre>{fmt.html.escape(f'arrangement table: {type(error).__name__}: {error}')}</pre>"
