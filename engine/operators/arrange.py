"""Arrangement operators: arrange (exchange, batch, index, maintain), import of an existing trace, and
the sinks that read arrangements from outside the dataflow (views and exports)."""
from __future__ import annotations

import weakref

import numpy as np

from ..batch import Batch
from ..dataflow import Batches, Operator
from ..kernels.exchange import partition
from ..lattice import Antichain, antichain_of, in_advance_mask
from ..trace import IDENTITY, TimeLens, Trace


def _c(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


class ArrangeOp(Operator):
    """Exchange updates to the shard owning their key, buffer them until the input frontier passes
    their times, then mint one batch per shard covering [previous frontier, new frontier), append it to
    the trace and send it downstream. The trace is held weakly: with no readers, batches still flow but
    are not kept (K-Pg section 4.2)."""

    kind = "arrange"
    arranged = True
    lens = IDENTITY

    def __init__(self, scope, input, key_idx, val_idx, workers, effort="default", site=None, name=None):
        super().__init__(scope, [input], site)
        self.key_idx = np.asarray(key_idx, np.int64)
        self.val_idx = np.asarray(val_idx, np.int64)
        self.workers = workers
        d = scope.depth
        self.upper = Antichain([(0,) * d])
        self._strong = Trace(len(key_idx), len(val_idx), d, workers, self.upper, effort, name)
        self._weak = weakref.ref(self._strong)
        self.buffers = [[] for _ in range(workers)]
        self.buffered = 0
        self.held = Antichain()  # minimal times of buffered updates: what this operator may still emit

    def capabilities(self):
        return self.held

    @property
    def trace(self):
        return self._weak()

    def finish_install(self):
        self._strong = None

    def step(self, rt):
        msgs = self.take()
        # a lower bound for what we send now: what we held, and the messages just received
        bound = self.held
        for m in msgs:
            bound = bound.meet(m.lower)
        if msgs:
            self._exchange(rt, msgs)
        F = self.frontier
        if F != self.upper:
            lower, self.upper = self.upper, F
            batches = rt.run(lambda s: self._seal(s, lower, F), range(self.workers),
                             rows=self.buffered)
            trace = self._weak()
            if trace is not None:
                trace.insert(batches, rt.run)
            if any(len(b) for b in batches):
                self.send(Batches([(b,) for b in batches], bound, F, F))
        times = [p[2] for b in self.buffers for p in b if len(p[2])]
        self.buffered = sum(len(t) for t in times)
        self.held = antichain_of(np.concatenate(times, axis=0) if len(times) > 1 else times[0]) if times \
            else Antichain()

    def _exchange(self, rt, msgs):
        W = self.workers
        parts = [b for m in msgs for b in m.shards if b is not None and len(b)]
        if not parts:
            return

        def split(b):
            keys = _c(b.data[self.key_idx])
            vals = b.data[self.val_idx]
            if W == 1:
                return [(keys, vals, b.times, b.diffs)]
            perm, offs, _ = partition(keys, W)
            out = []
            for s in range(W):
                idx = perm[offs[s]:offs[s + 1]]
                out.append((keys[:, idx], vals[:, idx], b.times[idx], b.diffs[idx]) if len(idx) else None)
            return out

        total = sum(len(b) for b in parts)
        for pieces in rt.run(split, parts, rows=total):
            for s, piece in enumerate(pieces):
                if piece is not None:
                    self.buffers[s].append(piece)
        self.buffered += total

    def _seal(self, s, lower, upper) -> Batch:
        buf = self.buffers[s]
        kk, kv, d = len(self.key_idx), len(self.val_idx), self.scope.depth
        if not buf:
            return Batch.empty(kk, kv, d, lower, upper)
        if len(buf) == 1:
            keys, vals, times, diffs = buf[0]
        else:
            keys = np.concatenate([p[0] for p in buf], axis=1)
            vals = np.concatenate([p[1] for p in buf], axis=1)
            times = np.concatenate([p[2] for p in buf], axis=0)
            diffs = np.concatenate([p[3] for p in buf])
        if upper.elements:
            later = in_advance_mask(times, upper)
            if later.any():
                keep = ~later
                self.buffers[s] = [(keys[:, later], vals[:, later], times[later], diffs[later])]
                keys, vals, times, diffs = keys[:, keep], vals[:, keep], times[keep], diffs[keep]
            else:
                self.buffers[s] = []
        else:
            self.buffers[s] = []
        return Batch.form(keys, vals, times, diffs, lower, upper)


class ImportOp(Operator):
    """A trace from outside this dataflow (an engine input or a named export), imported without
    re-indexing: its history arrives first as the trace's existing batches, read through a lens that
    compacts their times to the import frontier, then every newly minted batch follows."""

    kind = "import"
    arranged = True

    def __init__(self, scope, trace: Trace, site=None, name=None):
        super().__init__(scope, [], site)
        self._strong = trace
        self.name = name
        self.lens = IDENTITY
        self.cap = Antichain()
        self.handle = None
        self.snapshot = None

    @property
    def trace(self):
        return self.handle.trace if self.handle is not None else self._strong

    def install(self, rt):
        trace = self._strong
        upper = trace.upper
        frontier = import_frontier(trace.logical, upper)
        self.handle = trace.handle(logical=frontier, physical=upper)
        self.handle.subscribe()
        self.lens = TimeLens(frontier) if frontier.elements else IDENTITY
        shards = tuple(self.handle.batches(s) for s in range(trace.workers))
        self.snapshot = Batches(shards, frontier, upper, upper)
        self.cap = frontier

    def finish_install(self):
        self._strong = None

    def capabilities(self):
        return self.cap

    def has_work(self):
        return self.snapshot is not None or bool(self.handle is not None and self.handle.inbox)

    def step(self, rt):
        if self.snapshot is not None:
            msg, self.snapshot = self.snapshot, None
            if any(len(b) for bs in msg.shards for b in bs):
                self.send(msg)
            self.cap = msg.upper
        if self.handle.inbox:
            # every insertion since the last step travels as one message
            entries = list(self.handle.inbox)
            self.handle.inbox.clear()
            upper = entries[-1][2]
            shards = tuple(tuple(e[0][s] for e in entries if len(e[0][s])) for s in range(len(entries[0][0])))
            if any(shards):
                self.send(Batches(shards, self.cap, upper, upper))
            self.cap = upper
            self.handle.set_physical_compaction(upper)
            if upper.elements:
                self.handle.set_logical_compaction(_previous(upper, self.handle.logical))
        if not self.cap.elements:
            self.handle.set_logical_compaction(Antichain())

    def release(self):
        if self.handle is not None:
            self.handle.close()


def import_frontier(logical: Antichain, upper: Antichain) -> Antichain:
    """Where an import starts: the last complete time (upper - 1), or the trace's own compaction
    frontier if that is later. Top-level traces only (depth 1)."""
    if not upper.elements:
        return logical.copy() if logical.elements else Antichain([(0,)])
    u = upper.elements[0][0]
    last = max(u - 1, 0)
    if logical.elements:
        last = max(last, logical.elements[0][0])
    return Antichain([(last,)])


def _previous(upper: Antichain, current: Antichain) -> Antichain:
    """Keep the last complete top-level time readable: {upper - 1}, never moving backwards."""
    u = upper.elements[0][0]
    c = current.elements[0][0] if current.elements else 0
    return Antichain([(max(u - 1, c),)])


class SinkOp(Operator):
    """Reads an arrangement from outside the dataflow. Holds a handle whose logical frontier trails the
    arrangement's frontier by ``history`` epochs (so `at=` reads of recent epochs stay possible)."""

    kind = "sink"

    def __init__(self, scope, input, history=1, site=None):
        super().__init__(scope, [input], site)
        self.history = max(1, int(history))
        self.handle = None

    def install(self, rt):
        up = self.inputs[0]
        trace = up.trace
        logical = trace.logical
        self.handle = trace.handle(logical=logical)

    def step(self, rt):
        self.take()
        F = self.frontier
        if F.elements:
            u = F.elements[0][0]
            c = self.handle.logical.elements[0][0] if self.handle.logical.elements else 0
            target = Antichain([(max(u - self.history, c),)])
            if target != self.handle.logical:
                self.handle.set_logical_compaction(target)

    def release(self):
        if self.handle is not None:
            self.handle.close()


class ViewOp(SinkOp):
    kind = "view"


class ExportOp(SinkOp):
    kind = "export"
