"""The memory-modes table: what each iterative-frontier-expansion operator (``Collection.ife``, the
recursive queries of ``kpgnb.graphs``) keeps in its mode, so the saving of ``jod`` and ``drop`` shows."""
from __future__ import annotations

import ipywidgets as w

from . import fmt
from .updater import Part

COLUMNS = [("operator", True), ("mode", True), ("state diffs", False), ("join diffs", False),
           ("dropped", False), ("recomputed", False), ("state bytes", False), ("join bytes", False),
           ("tracker bytes", False)]


class MemoryModes(w.HTML, Part):
    """One row per IFE operator (``Engine.ife_stats()``); empty (no table) while there is none."""

    min_interval = 1.0

    def __init__(self, **kwargs):
        super().__init__(value="", **kwargs)
        self.rows: list = []

    def refresh(self, reading):
        rows = [] if reading.closed else reading.ife
        out = [([f"{r['dataflow']}: {r['operator'].split(': ', 1)[-1]}", r["mode"],
                 fmt.count(r["state_differences"]), fmt.count(r["join_differences"]), fmt.count(r["dropped"]),
                 fmt.count(r["recomputed"]), fmt.nbytes(r["bytes"]["state"]), fmt.nbytes(r["bytes"]["join"]),
                 fmt.nbytes(r["bytes"]["dropped_tracker"])], "") for r in rows]
        value = "<b>Memory modes</b>" + fmt.table(COLUMNS, out, "") if out else ""
        self.rows = rows
        if value != self.value:
            with self.hold_sync():
                self.value = value

    def show_error(self, error):
        self.value = f"<pre>{fmt.html.escape(f'memory modes: {type(error).__name__}: {error}')}</pre>"
