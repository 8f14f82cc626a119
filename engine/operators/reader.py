"""How a stateful operator reads an upstream arrangement: the bookkeeping join and reduce share.

The operator holds a handle on the upstream trace. Batches arrive as messages; the operator has
"acknowledged" the trace up to the upper of the last message, and reads history only through that
frontier (its physical compaction frontier keeps a batch boundary there), so new batches and history are
never counted twice. As its input frontier advances, it lets the trace compact up to there.
"""
from __future__ import annotations

from ..cursor import Cursor
from ..lattice import Antichain


class ArrangedInput:
    """An operator's reading of one upstream arranged stream (opened at install)."""

    def __init__(self, upstream, owner: str | None = None):
        trace = upstream.trace
        zero = Antichain([(0,) * trace.depth])
        self.handle = trace.handle(logical=trace.logical, physical=zero, owner=owner)
        self.ack = zero
        self.lens = upstream.lens
        self.kk, self.kv, self.depth = trace.kk, trace.kv, trace.depth

    @property
    def open(self) -> bool:
        return self.handle is not None

    def acknowledge(self, msgs):
        """Received these messages: history now extends through their upper."""
        if msgs:
            self.ack = msgs[-1].native_upper

    def history(self, shard: int) -> tuple:
        """The shard's batches acknowledged so far."""
        return self.handle.batches(shard, self.ack)

    def cursor(self, batches, exact: bool = False) -> Cursor:
        """A cursor over these batches in the reader's times (``exact``: see ``Cursor``)."""
        return Cursor(batches, self.kv, self.depth, self.lens, exact)

    def compact(self, frontier: Antichain):
        """Nothing before ``frontier`` (in the reader's scope) will be asked about again."""
        h = self.handle
        target = self.lens.native(frontier)
        if not target.elements:
            # nothing will be asked about again (every input closed): what this reader held folds into one
            # time, the lub of the trace's times, which leaves the final contents readable
            bound = h.trace.time_bound()
            target = Antichain([bound]) if bound is not None else target
        if target.elements and target != h.logical and h.logical.less_equal(target):
            h.set_compaction(target, self.ack)
        else:
            h.set_physical_compaction(self.ack)

    def release(self):
        if self.handle is not None:
            self.handle.close()
            self.handle = None
