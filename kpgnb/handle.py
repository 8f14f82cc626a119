"""A handle on an installed dataflow, what ``%%dataflow NAME -o VAR`` binds: its views, exports and
status, and the calls that act on it by name (wait, cancel, drop)."""
from __future__ import annotations

from .engine.errors import EngineError, UsageError


class DataflowHandle:
    """An installed dataflow of an engine, by name. ``handle["view"]`` is one of its views."""

    def __init__(self, engine, name: str, views: dict, exports: list, install_s: float | None = None,
                 replaced: bool = False):
        self.engine = engine
        self.name = name
        self.views = dict(views)
        self.exports = list(exports)
        self.install_s = install_s   # seconds from the end of the cell's code to the dataflow being installed
        self.replaced = replaced     # it took the place of an installed dataflow of its name
        info = engine.snapshot().dataflows.get(name)
        self.serial = None if info is None else info.serial  # this install, not a later one of the name

    def _info(self):
        """This install's entry in the engine's snapshot (renamed NAME~k once replaced), or None."""
        dataflows = self.engine.snapshot().dataflows
        info = dataflows.get(self.name)
        if info is not None and info.serial == self.serial:
            return info
        return next((i for i in dataflows.values() if i.serial == self.serial), None)

    @property
    def status(self) -> str:
        """running, failed, cancelled, replaced (a later cell installed a new version of its name),
        dropped (no longer installed), or closed (its engine was closed: ``%dataflow config --restart``,
        ``%unload_ext kpgnb``)."""
        if getattr(self.engine, "closed", False):
            return "closed"
        info = self._info()
        if info is not None and info.name == self.name:
            return info.status
        return "replaced" if self.serial in self.engine.snapshot().replaced else "dropped"

    @property
    def error(self):
        info = self._info()
        return None if info is None else info.error

    @property
    def frontier(self):
        info = self._info()
        return None if info is None else info.frontier

    def _current(self, what: str):
        if getattr(self.engine, "closed", False):  # (as the engine's own calls on a closed engine raise)
            raise EngineError("the engine is closed")
        status = self.status
        if status in ("replaced", "dropped"):
            kept = self._kept()
            raise UsageError(f"cannot {what} dataflow {self.name!r} through this handle: it was {status}"
                             + (" by a newer version (use that cell's handle)" if status == "replaced" else "")
                             + (f"; kept as {kept!r} while its exports are read, drop(cascade=True) drops it "
                                f"with its readers" if kept is not None else ""))

    def __getitem__(self, view: str):
        try:
            return self.views[view]
        except KeyError:
            raise KeyError(f"dataflow {self.name!r} has no view {view!r}; its views are {sorted(self.views)}") \
                from None

    def wait(self, timeout: float | None = None):
        """Block until the dataflow is current: every view and export reflects every epoch its inputs were
        advanced to (``Engine.wait`` of its name). Raises what the dataflow failed with."""
        self._current("wait for")
        self.engine.wait(self.name, timeout=timeout)
        return self

    def cancel(self):
        self._current("cancel")
        self.engine.cancel(self.name)

    def drop(self, cascade: bool = False):
        """Uninstall the dataflow (``cascade``: also those reading its exports). Once dropped or replaced but
        kept while its exports are read (listed as NAME or NAME~k), ``cascade=True`` drops it by that name
        with its readers, as ``%dataflow drop NAME --cascade`` does."""
        kept = self._kept() if cascade and not getattr(self.engine, "closed", False) else None
        if kept is not None:
            self.engine.drop(kept, cascade=True)
            return
        self._current("drop")
        self.engine.drop(self.name, cascade=cascade)

    def _kept(self) -> str | None:
        """The name this install is listed under while kept for its exports' readers, or None."""
        if self.status not in ("replaced", "dropped"):
            return None
        return next((n for n, i in self.engine.snapshot().retired.items() if i.serial == self.serial), None)

    def __repr__(self):
        return (f"DataflowHandle({self.name!r}, status={self.status}, views={sorted(self.views)}, "
                f"exports={self.exports})")
