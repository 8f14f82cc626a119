"""Progress bars for long work: loading a large input (Spark ingestion) and a large first computation.

Two ways to drive one:

- by hand, from the code doing the work (any thread): ``p = Progress("loading edges"); p.update(done,
  total, note=...)``, then ``p.finish()`` or ``p.fail(error)`` (a ``with`` block does both);
  ``kpgnb.spark.input_from(..., progress=p)`` reports its stages this way;
- following a dataflow: ``Progress.follow(eng, name)`` is refreshed by the engine's updater thread and
  shows the epochs the dataflow has finished out of those its inputs were advanced to, with the time
  spent computing; it finishes once the dataflow has caught up and shows the error if it fails.
"""
from __future__ import annotations

import math
import threading
import time

import ipywidgets as w

from ..engine.columns import check_name
from ..engine.errors import EngineError, UnknownNameError
from . import fmt
from .updater import Part, Updater, check_engine, close_models, close_tree


class Progress(w.HBox, Part):
    """A bar (``bar``: a FloatProgress from 0 to 1, or pulsing at 0 while the total is unknown) and a
    line of text (``label``). Thread-safe: updates from any thread are applied under ``hold_sync``."""

    min_interval = 0.25

    def __init__(self, description: str = "", total: float | None = None, unit: str = "", **kwargs):
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                   layout=w.Layout(width="40%"))
        self.label = w.HTML(value="")
        super().__init__(children=[self.bar, self.label], **kwargs)
        self.description = description
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.state = "running"     # running | finished | failed
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._follow = None        # (engine, dataflow name, its first epoch when following began, install serial)
        self._show("")

    # -- driving it by hand -----------------------------------------------------------------------------
    def update(self, done: float | None = None, total: float | None = None, note: str = ""):
        """Report progress: ``done`` out of ``total`` (kept from earlier calls when None)."""
        with self._lock:
            if total is not None:
                self.total = total
            if done is not None:
                self.done = done
            self._show(note)

    def finish(self, note: str = "done"):
        with self._lock:
            self.state = "finished"
            if self.total:
                self.done = self.total
            self._show(note)
        self._stop()

    def fail(self, error):
        with self._lock:
            self.state = "failed"
            self._show(f"failed: {error}")
        self._stop()

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if exc is None:
            self.finish()
        else:
            self.fail(f"{etype.__name__}: {exc}")
        return False

    def _show(self, note: str, elapsed: bool = True):
        if self.total:
            frac = self.done / self.total if _finite(self.done) and _finite(self.total) else 0.0
            frac = min(1.0, max(0.0, frac))
        else:
            frac = 1.0 if self.state == "finished" else 0.0
        amount = ""
        if self.total:
            amount = (f"{fmt.html.escape(_amount(self.done))} / {fmt.html.escape(_amount(self.total))}"
                      f"{' ' + fmt.html.escape(self.unit) if self.unit else ''} · ")
        took = f" · {fmt.seconds(time.perf_counter() - self._start)}" if elapsed else ""
        text = f"<b>{fmt.html.escape(self.description)}</b> {amount}{fmt.html.escape(note)}{took}"
        style = {"running": "info", "finished": "success", "failed": "danger"}[self.state]
        with self.hold_sync():
            self.bar.value = frac
            self.bar.bar_style = style
            self.label.value = text

    # -- following a dataflow -----------------------------------------------------------------------------
    @classmethod
    def follow(cls, engine, name: str) -> "Progress":
        """A bar for dataflow ``name`` catching up with its inputs, refreshed by the engine's updater
        until it has caught up (or failed, or was dropped). Raises EngineError if the engine is closed."""
        check_engine(engine, "Progress.follow")
        check_name(name, "Progress.follow", "a dataflow")  # (a view: says its dataflow's name)
        if engine.closed:
            raise EngineError("the engine is closed")
        # (also one dropped or replaced, kept while its exports are read: listed, as NAME~k, by the dashboard)
        stats = {d["name"]: d for d in engine.dataflow_stats(retired=True)}.get(name)
        if stats is None:
            raise UnknownNameError(f"no dataflow named {name!r} is installed (dataflows: "
                                   f"{', '.join(sorted(engine.dataflows())) or 'none'})")
        p = cls(f"dataflow {name!r}", unit="epochs")
        p._follow = (engine, name, stats["epoch"] if stats["epoch"] is not None else 0, stats["serial"])
        u = p._updater = Updater.of(engine)
        u.add(p)
        u.refresh_now([p])
        return p

    def refresh(self, reading):
        if self._follow is None or self.state != "running":
            return
        engine, name, first, serial = self._follow
        if reading.closed:
            self.fail("the engine closed")
            return
        d = next((d for d in reading.dataflows if d["name"] == name), None)
        if d is None:
            self.fail("the dataflow was dropped")
            return
        if d["serial"] != serial:  # (the name is another install's now)
            self.fail("the dataflow was replaced")
            return
        if d["error"] is not None:
            self.fail(d["error"])
            return
        epoch, lag = d["epoch"], d["lag_epochs"]
        if epoch is None or lag == 0:
            self.finish(f"up to date ({fmt.seconds(d['busy_s'])} computing, {fmt.count(d['steps'])} operator steps)")
            return
        goal = epoch + lag
        self.update(epoch - first, goal - first,
                    f"final before epoch {epoch} of {goal} · {fmt.seconds(d['busy_s'])} computing, "
                    f"{fmt.count(d['steps'])} operator steps")

    def _stop(self):
        # once only, and through the updater kept when following began: close() from Widget.__del__ at the
        # interpreter's exit must not import (Updater.of checks the engine's type by importing it)
        if self._follow is not None and not getattr(self, "_stopped", False):
            self._stopped = True
            self._updater.remove(self, wait=0)

    def close(self):
        """Stop following (if it does) and close the bar and the label with it."""
        self._stop()
        close_tree(self.children)
        super().close()
        close_models(self)

    def show_error(self, error):
        self.label.value = fmt.html.escape(f"progress: {type(error).__name__}: {error}")


def _finite(x) -> bool:
    try:
        return math.isfinite(x)
    except TypeError:
        return False


def _amount(x) -> str:
    """An amount as a person reads it: whole numbers with thousands separators (``1,234``), others to
    three significant digits (``0.5``, ``12.3``, ``0.00125``), ``?`` for nan and infinities."""
    if x is None:
        return "-"
    if not _finite(x):
        return "?"
    if x == int(x):
        return f"{int(x):,}"
    digits = min(12, max(0, 2 - math.floor(math.log10(abs(x)))))
    text = f"{x:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
