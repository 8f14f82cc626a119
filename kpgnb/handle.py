"""A handle on an installed dataflow, what ``%%dataflow NAME -o VAR`` binds: its views, exports and
status, and the calls that act on it by name (wait, cancel, drop)."""
from __future__ import annotations


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

    def _info(self):
        return self.engine.snapshot().dataflows.get(self.name)

    @property
    def status(self) -> str:
        """running, failed, cancelled, or dropped (no longer installed)."""
        info = self._info()
        return "dropped" if info is None else info.status

    @property
    def error(self):
        info = self._info()
        return None if info is None else info.error

    @property
    def frontier(self):
        info = self._info()
        return None if info is None else info.frontier

    def __getitem__(self, view: str):
        try:
            return self.views[view]
        except KeyError:
            raise KeyError(f"dataflow {self.name!r} has no view {view!r}; its views are {sorted(self.views)}") \
                from None

    def wait(self, timeout: float | None = None):
        """Block until every view is current (see ``Engine.wait``)."""
        for v in self.views.values():
            self.engine.wait(v, timeout=timeout)
        return self

    def cancel(self):
        self.engine.cancel(self.name)

    def drop(self, cascade: bool = False):
        self.engine.drop(self.name, cascade=cascade)

    def __repr__(self):
        return (f"DataflowHandle({self.name!r}, status={self.status}, views={sorted(self.views)}, "
                f"exports={self.exports})")
