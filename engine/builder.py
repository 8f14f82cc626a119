"""The dataflow builder: ``with eng.dataflow(name) as df`` (DESIGN.md section 4).

It records operators as collections are defined; nothing runs until the block ends, when the whole
graph is handed to the engine's install callback (the scheduler installs it atomically between steps).
A block that raises installs nothing.
"""
from __future__ import annotations

import time
import weakref

from .collection import Arranged
from .columns import SchemaError, check_name
from .dataflow import Graph, Site
from .errors import UnknownNameError
from .operators.arrange import ImportOp
from .scope import Scope

STALE_EXPORT_S = 1.0  # how long ``use`` reads newer snapshots for an export whose trace is gone


class DataflowBuilder:
    """Builds one dataflow (``with eng.dataflow(name) as df``); installed atomically when the block ends
    without an exception, and not at all otherwise."""

    def __init__(self, engine, name: str, install, replace: bool = False):
        self.engine = engine
        self.name = name
        self.replace = replace      # may take over the exports of the installed dataflow of this name
        self._install_fn = install
        self.graph = Graph()
        self.graph.builder = self
        self.scope = self.graph.root
        self.views: dict = {}
        self.exports: dict = {}     # name -> Export
        self.uses: dict = {}        # export name -> (weakref to its Trace, producer): checked at install
        self.sources: set = set()
        self.variables: list = []
        self.reports: list = []     # the IFEs, each with a name and report(): their statistics (engine/ife.py)
        self._inputs: dict = {}
        self._used: dict = {}
        self.state = "building"
        self.dataflow = None
        self.serial = None  # which install of the name this is, once installed (DataflowInfo.serial)
        self.owned: list = []  # engine inputs made for this dataflow alone (``own_inputs``)
        self.error = None  # why it was discarded ("Type: message"): its block raised, its install failed
        self._memo: dict = {}  # ``memo``

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.state, self.error = "discarded", f"{exc_type.__name__}: {exc}"
            return False
        self.install()
        return False

    def check_building(self):
        if self.state == "discarded":
            raise SchemaError(f"dataflow {self.name!r} was discarded (its block or its install failed); build "
                              f"new collections in a new dataflow")
        if self.state != "building":  # (worded for a notebook cell and the engine API alike)
            raise SchemaError(f"dataflow {self.name!r} is {self.state}; another dataflow cannot build on its "
                              f"collections: export one there (.export('NAME')) and import it in the new one "
                              f"with .use('NAME') (df.use('NAME') in a %%dataflow cell)")

    def install(self):
        self.check_building()
        for v in self.variables:
            if v.result is None:
                raise SchemaError(f"the Variable defined at {v.site} was never set")
        self.state = "installing"
        try:
            self.dataflow = self._install_fn(self)
        except BaseException as e:
            self.state, self.error = "discarded", f"{type(e).__name__}: {e}"
            raise
        self.state = "installed"
        return self.dataflow

    def memo(self, key, make):
        """``make()``, once per ``key`` in this dataflow: what queries over one collection share (an
        arrangement of the edges) instead of building a copy each (``Collection.shared``)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def own_inputs(self, *names: str):
        """Engine inputs made for this dataflow alone (a Datalog program's facts, a goal's bindings): the
        engine drops them once the dataflow is gone (dropped, and no longer kept for its exports' readers).
        Recorded with the install, so no drop can come between."""
        for n in names:
            check_name(n, "df.own_inputs", "an input")
        inputs = self.engine.inputs()
        missing = [n for n in names if n not in inputs]
        if missing:
            raise UnknownNameError(f"no input named {missing[0]!r}; inputs are {sorted(inputs)}")
        self.owned += [inputs[n] for n in names]

    def loop(self) -> Scope:
        """A new iterative scope for mutually recursive Variables."""
        self.check_building()
        return self.scope.loop()

    def input(self, name: str) -> "Arranged":
        """An engine input (eng.input(name, ...)) as a collection: its current contents, then its changes.
        It arrives arranged as the input keeps its rows (the input's own trace: by all its columns, or by
        its ``key``), so a join on the key (or, keyed by every column, a distinct) reuses that index
        instead of building another."""
        self.check_building()
        if name not in self._inputs:
            inputs = self.engine.inputs()
            session = inputs.get(name)
            if session is None:
                raise SchemaError(f"no input named {name!r}; inputs are {sorted(inputs)}")
            names = session.schema.names
            self._inputs[name] = self._import(name, session.trace, session.schema, names[:session.nkey],
                                              names[session.nkey:])
            self.sources.add(session)
        return self._inputs[name]

    def use(self, name: str) -> Arranged:
        """An exported arrangement, imported without re-indexing (milliseconds, whatever its size)."""
        self.check_building()
        check_name(name, "df.use", "an exported arrangement")
        if name not in self._used:
            if name in self.exports:  # (exports are published when the block installs)
                raise SchemaError(f"{name!r} is exported by this dataflow ({self.name!r}) itself: its exports are "
                                  f"published when the block installs, so df.use({name!r}) cannot import it here; "
                                  f"read the arrangement that .export({name!r}) returned (or the collection it was "
                                  f"made from) in this block, and df.use({name!r}) in a later dataflow")
            entry, trace = self._exported_trace(name)
            if trace is None:
                catalog = self.engine.snapshot().catalog
                ended = next((d for d in self.engine.snapshot().dataflows.values()
                              if name in d.exports and d.error is not None), None)
                if ended is not None:  # its exports left the catalog when it ended
                    raise SchemaError(f"no arrangement named {name!r} is exported: dataflow {ended.name!r}, "
                                      f"which exported it, {ended.status}: {ended.error}") from ended.error
                raise SchemaError(f"no arrangement named {name!r} is exported; the catalog has {sorted(catalog)}")
            self._used[name] = self._import(name, trace, entry.schema, entry.key, entry.values)
            self.uses[name] = (weakref.ref(trace), entry.dataflow)
        return self._used[name]

    def _exported_trace(self, name: str) -> tuple:
        """(catalog entry, its live trace) of export ``name``, either None. An entry whose trace is gone is
        one of a dataflow that let go of it (replaced or dropped) in a snapshot published before the one
        without it (or with its replacement's): newer snapshots are read for up to ``STALE_EXPORT_S``
        before the name counts as not exported."""
        deadline = time.monotonic() + STALE_EXPORT_S
        while True:
            entry = self.engine.snapshot().catalog.get(name)
            trace = entry.live_trace() if entry is not None else None
            if trace is not None or entry is None or time.monotonic() > deadline:
                return entry, trace
            time.sleep(0.001)

    def export_holder(self, name: str) -> str | None:
        """Who holds ``name`` so that this dataflow cannot export it: this dataflow, or another installed one
        (not the one this replaces); None when it is free. A dropped dataflow kept for the readers of its
        export gives the name up (they keep the old arrangement, renamed ``name~k``): running its cell again
        makes a new one."""
        if name in self.exports:
            return f"this dataflow ({self.name!r})"
        entry = self.engine.snapshot().catalog.get(name)
        if entry is None or entry.dropped or entry.live_trace() is None or \
                (self.replace and entry.dataflow == self.name):
            return None  # (a trace gone: released since that snapshot; the install checks again)
        return f"dataflow {entry.dataflow!r}"

    def exported(self, name: str) -> bool:
        """Whether ``name`` is taken (``export_holder``)."""
        return self.export_holder(name) is not None

    def _import(self, name, trace, schema, keys, vals) -> Arranged:
        op = ImportOp(self.scope, trace, Site.capture(), name)
        return Arranged(self, op, schema, self.scope, list(keys), list(vals))
