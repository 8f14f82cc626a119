"""The catalog of named arrangements (``export(name)`` / ``df.use(name)`` / ``eng.trace(name)``).

Owned by the scheduler thread: entries are added when the exporting dataflow is installed and removed
when nobody reads them any more (or their producer failed). Other threads see it through the published
snapshot's :class:`~.snapshot.CatalogInfo` records.
"""
from __future__ import annotations

import weakref

from .snapshot import CatalogInfo


class CatalogEntry:
    """A named arrangement: its trace, schema, and the dataflow that maintains it."""

    def __init__(self, name, trace, schema, key_names, val_names, producer, op, sources=frozenset()):
        self.name = name
        self.trace = trace
        self.schema = schema
        self.key_names = tuple(key_names)
        self.val_names = tuple(val_names)
        self.producer = producer      # the Dataflow maintaining it (possibly dropped, kept for readers)
        self.op = op                  # the ExportOp (pruning keeps what feeds it)
        self.sources = frozenset(sources)  # the input sessions whose changes reach it (its importers read them)
        self.handles = weakref.WeakSet()  # handles given out by Engine.trace(name)
        self._info = None

    def info(self) -> CatalogInfo:
        """Its record for snapshots (the last one again while it still holds: one publish per step)."""
        i = self._info
        if i is None or i.name != self.name or i.dataflow != self.producer.name or i.dropped != self.producer.dropped:
            i = self._info = CatalogInfo(self.name, self.producer.name, self.producer.dropped, self.schema,
                                         self.key_names, self.val_names, weakref.ref(self.trace))
        return i

    def has_handles(self) -> bool:
        return any(h.alive for h in list(self.handles))


class Catalog:
    """name -> CatalogEntry."""

    def __init__(self):
        self._entries: dict = {}

    def __contains__(self, name):
        return name in self._entries

    def get(self, name) -> CatalogEntry | None:
        return self._entries.get(name)

    def names(self) -> list:
        return sorted(self._entries)

    def add(self, entry: CatalogEntry):
        self._entries[entry.name] = entry

    def remove(self, name):
        self._entries.pop(name, None)

    def clear(self):
        self._entries.clear()

    def info(self) -> dict:
        return {n: e.info() for n, e in self._entries.items()}
