"""The dashboard: every widget over one engine, refreshed together (``kp.dashboard()``,
``%dataflow dashboard``)."""
from __future__ import annotations

import threading
import weakref

import ipywidgets as w

from . import fmt
from .arrangements import ArrangementTable
from .frontiers import Frontiers
from .latency import LatencyCCDF
from .memorymodes import MemoryModes
from .progress import Progress
from .tracesizes import TraceSizes
from .updater import Part, Updater, check_engine, close_models, close_tree


class Dashboard(w.VBox):
    """A header line, a progress bar for the dataflow furthest behind its inputs, the dataflows'
    frontiers, the arrangement table, the memory-modes table (while IFE operators run), and the latency CCDF
    beside the trace sizes. Made on the calling
    thread with a first reading already shown; then the engine's updater thread refreshes it a few times
    a second until ``close()`` (which ends that thread when nothing else is live) or until the engine
    closes. Its parts: ``header``, ``progress``, ``frontiers``, ``arrangements``, ``latency``, ``sizes``,
    ``memory``. At most ``MAX_DASHBOARDS`` per engine refresh at once: one more stops the oldest (``stop``;
    its header says so), as a cell showing the dashboard is run again and again."""

    def __init__(self, engine, **kwargs):
        check_engine(engine, "the dashboard")
        self.engine = engine
        self.header = _Header()
        self.progress = _Behind()
        self.frontiers = Frontiers()
        self.arrangements = ArrangementTable()
        self.latency = LatencyCCDF()
        self.sizes = TraceSizes()
        self.memory = MemoryModes()
        self.parts = [self.header, self.progress, self.frontiers, self.arrangements, self.latency, self.sizes,
                      self.memory]
        title = lambda t: w.HTML(f"<b>{t}</b>")  # noqa: E731
        super().__init__(children=[
            self.header, self.progress,
            title("Dataflows"), self.frontiers,
            title("Arrangements"), self.arrangements, self.memory,
            w.HBox([self.latency, self.sizes]),
        ], **kwargs)
        self.updater = Updater.of(engine)
        self.updater.refresh_now(self.parts)
        self.stopped = False
        for p in self.parts:
            self.updater.add(p)
        _admit(self)

    def refresh(self):
        """Refresh every part now, on the calling thread (the updater does this by itself)."""
        self.updater.refresh_now(self.parts)

    def stop(self, why: str = "stopped"):
        """Stop refreshing (every part keeps what it shows; the header says why)."""
        if not hasattr(self, "updater") or self.stopped:
            return
        self.stopped = True
        self.updater.leave(*self.parts)  # (and waits for a refresh of them in progress: the header stays)
        for p in self.parts:
            p._stopped = True
        self.header.value = self.header.value + f" · <i>{fmt.html.escape(why)}; not updating</i>"

    def close(self):
        """Stop refreshing and close every widget; the updater thread ends if nothing else is live."""
        if hasattr(self, "updater"):  # (not when the engine argument was refused: nothing was made)
            self.stopped = True
            self.updater.remove(*self.parts)
        close_tree(self.children)  # the parts and the titles and boxes around them: ipywidgets keeps
        super().close()             # every widget not closed (and a box keeps its plots' figures)
        close_models(self)


MAX_DASHBOARDS = 4   # dashboards per engine refreshed at once (as MAX_LIVE live views): one more stops the oldest

_shown: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # engine -> [weakref to Dashboard], oldest first
_shown_lock = threading.Lock()


def _admit(dash: Dashboard):
    """Count a new dashboard against MAX_DASHBOARDS, stopping the oldest still refreshing beyond it (a
    ``%dataflow dashboard`` cell run again and again would otherwise add 7 refreshed parts each time)."""
    with _shown_lock:  # (weakly: a dashboard holds its engine, which must not be kept alive by the registry)
        shown = [r for r in _shown.get(dash.engine, []) if r() is not None and not r().stopped]
        shown.append(weakref.ref(dash))
        _shown[dash.engine] = shown
        over = [r() for r in shown[:-MAX_DASHBOARDS]] if len(shown) > MAX_DASHBOARDS else []
    for old in over:
        if old is not None:
            old.stop(f"more than {MAX_DASHBOARDS} dashboards of this engine; show it again to resume")


def dashboard(engine) -> Dashboard:
    """The live dashboard over ``engine`` (what ``%dataflow dashboard`` shows for the kernel's engine)."""
    return Dashboard(engine)


class _Header(w.HTML, Part):
    """One line: workers, dataflows, arrangements, records and bytes in all."""

    min_interval = 1.0

    def refresh(self, reading):
        if reading.closed:
            self.value = "<b>kpgnb engine</b> · closed (the dashboard stopped)"
            return
        arrs = reading.arrangements
        running = sum(d["status"] == "running" for d in reading.dataflows)
        failed = sum(d["status"] == "failed" for d in reading.dataflows)
        cancelled = sum(d["status"] == "cancelled" for d in reading.dataflows)
        value = (f"<b>kpgnb engine</b> · {reading.workers} workers · {running} dataflows running"
                 f"{f' · {failed} failed' if failed else ''}{f' · {cancelled} cancelled' if cancelled else ''}"
                 f" · {len(arrs)} arrangements · "
                 f"{fmt.count(sum(a['records'] for a in arrs))} records · "
                 f"{fmt.nbytes(sum(a['bytes'] for a in arrs))}")
        if reading.error:
            value += f" · <span style='color:#b00'>engine failed: {fmt.html.escape(reading.error)}</span>"
        if value != self.value:
            self.value = value


BEHIND_S = 1.0  # a dataflow shows as behind once it lags its inputs this long (not every epoch in flight)


class _Behind(Progress):
    """The dashboard's progress bar: the dataflow furthest behind its inputs (for ``BEHIND_S`` or more),
    how many epochs it has done of those it had to do when it fell behind, and for how long; full when
    all are up to date."""

    min_interval = 0.5

    def __init__(self):
        super().__init__("dataflows")
        self._behind: dict = {}  # dataflow -> its epoch when it was first seen behind
        self._shown = None       # what the bar shows (nothing is sent while it stays the same)

    def refresh(self, reading):
        if reading.closed:  # nothing is behind any more (nothing will run): say so, once
            shown = ("dataflows", None, 0, "finished", "the engine is closed")
        else:
            shown = self._lagging(reading)
        if shown == self._shown:
            return
        self._shown = shown
        with self._lock:
            self.description, self.total, self.done, self.state, note = shown
            self.unit = "epochs"
            self._show(note, elapsed=False)

    def show_error(self, error):
        self._shown = None  # (the label shows the error: the next reading redraws the bar)
        super().show_error(error)

    def _lagging(self, reading) -> tuple:
        """What the bar shows for a reading of an open engine: (description, total, done, state, note)."""
        lagging = [d for d in reading.dataflows if d["error"] is None and d["lag_epochs"] > 0
                   and d["lag_s"] >= BEHIND_S]
        self._behind = {d["name"]: self._behind.get(d["name"], d["epoch"]) for d in lagging}
        if not lagging:
            shown = ("dataflows", None, 0, "finished", "all up to date")
        else:
            d = max(lagging, key=lambda d: (d["lag_s"], d["lag_epochs"]))
            first = self._behind[d["name"]]
            goal = d["epoch"] + d["lag_epochs"]
            more = f" (and {len(lagging) - 1} more behind)" if len(lagging) > 1 else ""
            shown = (f"dataflow {d['name']!r}", max(1, goal - first), d["epoch"] - first, "running",
                     f"final before epoch {d['epoch']} of {goal}, {fmt.seconds(d['lag_s'])} behind{more}")
        return shown
