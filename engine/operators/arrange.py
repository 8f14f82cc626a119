"""Arrangement operators: arrange (exchange, batch, index, maintain), import of an existing trace, and
the sinks that read arrangements from outside the dataflow (views and exports)."""
from __future__ import annotations

import weakref

import numpy as np

from ..batcher import Batcher
from ..dataflow import Batches, Operator
from ..lattice import Antichain
from ..scope import IDENTITY, TimeLens, at_epoch, epoch_of, last_complete
from ..trace import Trace


def _picker(idx: np.ndarray):
    """data[idx] for a column matrix, as a slice where idx is a run of consecutive columns (a view, no
    copy); decided once per operator, not per message."""
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and (np.diff(idx) == 1).all():
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


class ArrangeOp(Operator):
    """Exchange updates to the shard owning their key, buffer them until the input frontier passes
    their times, then mint one batch per shard covering [previous frontier, new frontier), append it to
    the trace and send it downstream. The trace is held weakly: with no readers, batches still flow but
    are not kept (K-Pg section 4.2)."""

    kind = "arrange"
    arranged = True
    lazy_rounds = True

    def __init__(self, scope, input, key_idx, val_idx, workers, effort="default", site=None, name=None):
        super().__init__(scope, [input], site)
        self.key_idx = np.asarray(key_idx, np.int64)
        self.val_idx = np.asarray(val_idx, np.int64)
        self._keys, self._vals = _picker(self.key_idx), _picker(self.val_idx)
        self.workers = workers
        d = scope.depth
        self.upper = Antichain([(0,) * d])
        self.batcher = Batcher(len(key_idx), len(val_idx), d, workers)
        self._strong = Trace(len(key_idx), len(val_idx), d, workers, self.upper, effort, name)
        self._weak = weakref.ref(self._strong)

    def capabilities(self):
        return self.batcher.held

    def due(self) -> bool:
        held = self.batcher.held
        return bool(held.elements) and not self.frontier.less_equal(held)

    def _lazy(self, F) -> bool:
        """Whether a step taken for messages alone may leave the trace's upper behind the input frontier
        ``F`` when nothing buffered is due: in a loop (``lazy_rounds``), where a seal that would mint
        nothing waits for the next one, which covers its span. A closed input (``F`` empty) is sealed."""
        return self.lazy_rounds and len(F.elements) > 0 and len(F.elements[0]) > 1

    @property
    def trace(self):
        return self._weak()

    def owned_trace(self):
        return self._weak()

    def finish_install(self):
        self._strong = None

    def _parts(self, msg) -> list:
        """A message's updates as (keys, vals, times, diffs) per non-empty batch. Arranged batches (when
        an arrangement is arranged by other columns) are read in place, through the upstream lens:
        their rows are copied once, by formation, and never handed to user code."""
        if isinstance(msg, Batches):
            lens = self.inputs[0].lens
            out = []
            for b in (b for bs in msg.shards for b in bs if len(b)):
                data = b.key_rows() if b.kv == 0 else np.concatenate([b.key_rows(), b.vals], axis=0)
                times = b.times if lens.identity else lens.past((b,)).apply(b.times)
                out.append((data[self._keys], data[self._vals], times, b.diffs))
            return out
        return [(b.data[self._keys], b.data[self._vals], b.times, b.diffs)
                for b in msg.shards if b is not None and len(b)]

    def step(self, rt):
        msgs = self.take()
        # a lower bound for what we send now: what we held, and the messages just received
        bound = self.batcher.held
        for m in msgs:
            bound = bound.meet(m.lower)
        if msgs:
            self.batcher.push([p for m in msgs for p in self._parts(m)], rt.run)
        F = self.frontier
        if F != self.upper and (self.due() or not self._lazy(F)):
            batches = self.batcher.seal(self.upper, F, rt.run)
            self.upper = F
            trace = self._weak()
            if trace is not None:
                trace.insert(batches, rt.run)
            if any(len(b) for b in batches):
                self.send(Batches([(b,) for b in batches], bound, F, F))


class ImportOp(Operator):
    """A trace from outside this dataflow (an engine input or a named export), imported without
    re-indexing: its history arrives first as the trace's existing batches, read through a lens that
    compacts their times to the import frontier, then every newly minted batch follows."""

    kind = "import"
    arranged = True
    wakes_graph = True

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
        frontier = last_complete(upper, trace.logical)
        # never behind what the batches are compacted to: a closed input's logical frontier is empty (no
        # later epoch will come), not its last epoch, while its batches hold every time at that epoch
        done = epoch_of(trace.snapshot.since)
        if done is not None and done > epoch_of(frontier):
            frontier = at_epoch(done)
        if trace.start > epoch_of(frontier):
            frontier = at_epoch(trace.start)
        self.handle = trace.handle(logical=frontier, physical=upper, owner=self.label())
        self.handle.subscribe(self.graph.wake)
        self.lens = TimeLens(frontier) if frontier.elements else IDENTITY
        shards = tuple(self.handle.batches(s) for s in range(trace.workers))
        self.snapshot = Batches(shards, frontier, self._seen(upper), upper)
        self.cap = frontier

    def _seen(self, upper: Antichain) -> Antichain:
        """A trace frontier as this import's readers see it: advanced to the import frontier, where the lens
        puts every time. An export whose dataflow has not run yet can have an upper behind the frontier its
        readers compacted it to (its dataflow starts at a later epoch); the import never emits before that
        frontier, so its capability and its messages' bounds must not fall back there either."""
        f = self.lens.frontier
        return upper if f is None else upper.join(f)

    def finish_install(self):
        self._strong = None

    @property
    def since(self) -> Antichain:
        """The frontier the imported history was compacted to: the importing dataflow cannot tell apart
        the times before it."""
        return self.lens.frontier if self.lens is not IDENTITY else Antichain([(0,)])

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
            seen = self._seen(upper)
            if any(shards):
                self.send(Batches(shards, self.cap, seen, upper))
            self.cap = seen
            logical = self.handle.logical
            self.handle.set_compaction(last_complete(upper, logical) if upper.elements else logical, upper)
        if not self.cap.elements:
            self.handle.set_logical_compaction(Antichain())

    def release(self):
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class SinkOp(Operator):
    """Reads an arrangement from outside the dataflow. Holds a handle whose logical frontier trails the
    arrangement's frontier by ``history`` epochs (so `at=` reads of recent epochs stay possible)."""

    kind = "sink"

    def __init__(self, scope, input, history=1, site=None):
        super().__init__(scope, [input], site)
        self.history = max(1, int(history))
        self.handle = None
        self.born = 0  # the first epoch the dataflow can tell apart (see readable_from)

    def install(self, rt):
        up = self.inputs[0]
        trace = up.trace
        logical = trace.logical
        self.handle = trace.handle(logical=logical, owner=self.label())

    def readable_from(self, e: int):
        """The dataflow's imports start at epoch ``e`` (their history compacted there): earlier epochs are
        not in what it computes, so reads before it must fail rather than answer an empty collection."""
        if e > self.born:
            self.born = e
            current = epoch_of(self.handle.logical)
            if current is not None and current < e:
                self.handle.set_logical_compaction(Antichain([(e,)]))

    def step(self, rt):
        self.note(self.take())
        u = epoch_of(self.frontier)
        if u is None and self.handle.logical.elements:
            # every input closed: as if the frontier stood right after the last update (what a reader that
            # caught up before the close keeps), not where it last stood when this step ran
            bound = self.handle.trace.time_bound()
            u = bound[0] + 1 if bound is not None else None
        if u is not None:
            c = epoch_of(self.handle.logical) or 0
            target = Antichain([(max(u - self.history, c),)])
            if target != self.handle.logical:
                self.handle.set_logical_compaction(target)

    def note(self, msgs):
        """What a step took (nothing to keep here)."""

    def release(self):
        if self.handle is not None:
            self.handle.close()


class ViewOp(SinkOp):
    kind = "view"

    def __init__(self, scope, input, history=1, site=None):
        super().__init__(scope, input, history, site)
        self.changed = 0  # the last epoch an update reached the view at (compaction may cancel it later)

    def note(self, msgs):
        self.changed = _last_time(msgs, self.changed)

    def last_change(self) -> int:
        """The last epoch an update reached the view at, counting the batches queued for its next step
        (its arrangement has them already: a reader between two steps sees them in its snapshot)."""
        return _last_time(self.queues[0], self.changed)


def _last_time(msgs, since: int) -> int:
    """The greatest epoch of an update in these messages' batches, or ``since`` if greater."""
    for m in msgs:
        for shard in m.shards:
            for b in shard:
                if len(b):
                    since = max(since, b.time_range[1][0])
    return since


class ExportOp(SinkOp):
    kind = "export"

    def readable_from(self, e: int):
        super().readable_from(e)
        if self.inputs[0].owned_trace() is not None:
            # a trace this dataflow builds: what imports it starts there too (an exported input or a
            # re-exported import is another's trace, whose readers can start earlier)
            self.handle.trace.begins_at(e)
