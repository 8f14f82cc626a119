"""Traces and trace handles (K-Pg sections 4.1 and 4.3).

A :class:`Trace` is an arrangement's indexed state: one :class:`~.spine.Spine` per worker shard (keys are
assigned to shards by their hash) and the frontiers of its readers. A :class:`TraceHandle` is a reader: it
holds the trace alive, and its logical frontier (which times it may still ask about) and physical
frontier (where it needs batch boundaries) bound what maintenance may do. Dropping the last handle
releases the trace; the producer only keeps a weak reference.

Who owns what:
- the spines are written by the scheduler thread only (through ``append``/``maintain``);
- after every change the scheduler publishes one immutable :class:`TraceSnapshot` (every shard's
  batches and one upper, the meet over the shards) by a pointer swap; every read, on any thread, goes
  through a snapshot, so it sees whole epochs or nothing;
- readers' frontiers may be set from any thread; ``_lock`` guards them.
"""
from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from .batch import form_arrays
from .cursor import Cursor, accumulate_batches
from .columns import is_int
from .errors import ArgumentTypeError, CompactedError, EngineError, UsageError, not_copyable
from .lattice import Antichain, rep_matrix
from .scope import IDENTITY, TimeLens
from .spine import Spine, _later

_ids = itertools.count()
_UNCONSTRAINED = Antichain()  # no physical frontier (never mutated: frontiers are replaced, not changed)

__all__ = ["Trace", "TraceHandle", "TraceSnapshot", "CompactedError"]


class TraceSnapshot:
    """An immutable view of a trace at one moment: per shard its batches (oldest first), the upper
    frontier (the meet over the shards: every time not in advance of it is complete in every shard), and
    maintenance figures for statistics."""

    __slots__ = ("shards", "upper", "merges", "merge_bytes", "cleared_since", "merge_rows")

    def __init__(self, shards, upper: Antichain, merges=(), merge_bytes=(), cleared_since: Antichain | None = None,
                 merge_rows=()):
        self.shards = shards
        self.upper = upper
        self.merges = merges
        self.merge_bytes = merge_bytes
        self.cleared_since = cleared_since  # the since of a trace that stores no batch (``Spine.cleared_since``)
        self.merge_rows = merge_rows  # per shard: input rows its merges in progress still have to merge

    def batches(self, shard: int, through: Antichain | None = None) -> tuple:
        """A shard's batches, or the prefix of them whose upper is at or before ``through``."""
        batches = self.shards[shard]
        if through is None or through == self.upper:
            return batches
        # uppers advance along the spine, and readers are mostly a batch or two behind: look from the end
        n = len(batches)
        while n and not batches[n - 1].upper.less_equal(through):
            n -= 1
        return batches if n == len(batches) else batches[:n]

    def all_batches(self) -> list:
        return [b for bs in self.shards for b in bs]

    @property
    def since(self) -> Antichain:
        since = None
        for b in self.all_batches():
            since = b.since if since is None else _later(since, b.since)
        if since is not None:
            return since
        # no batch: as far as the history the spines folded away was compacted (not their upper, which
        # would claim every time before it indistinguishable)
        return self.cleared_since if self.cleared_since is not None else Antichain()

    def shard_stats(self) -> list:
        zeros = [0] * len(self.shards)
        return [{"records": sum(len(b) for b in bs), "keys": sum(b.nkeys for b in bs), "batches": len(bs),
                 "bytes": sum(b.nbytes for b in bs) + mb, "merges": m, "merge_shortfall": mr}
                for bs, m, mb, mr in zip(self.shards, self.merges or zeros, self.merge_bytes or zeros,
                                         self.merge_rows or zeros)]


class Trace:
    """An arrangement's state: ``workers`` key-sharded spines plus the frontiers of its readers."""

    def __init__(self, kk: int, kv: int, depth: int = 1, workers: int = 1, lower: Antichain | None = None,
                 effort: str = "default", name: str | None = None):
        lower = lower if lower is not None else Antichain([(0,) * depth])
        self.kk, self.kv, self.depth, self.workers = kk, kv, depth, workers
        self.name = name
        self.spines = [Spine(kk, kv, depth, lower, effort) for _ in range(workers)]
        self._readers: dict = {}
        self._owners: dict = {}      # reader key -> who reads (named in statistics: who holds compaction back)
        self.key_names: tuple = ()   # the key columns' names, where the builder knows them (statistics)
        self._lock = threading.Lock()
        self.logical = lower        # meet of the readers' logical frontiers
        self.start = 0              # the first epoch its producer tells apart (begins_at)
        self.physical = Antichain()  # meet of the readers' physical frontiers (empty: unconstrained)
        self._listeners: dict = {}  # id -> weak reference of each object whose deliver(...) sees every append
        self._unsettled = True  # appended to, or readers' frontiers moved, since tidying last had nothing to do
        self._stalled = False   # idle maintenance failed: not offered again before the next such change
        self.snapshot = TraceSnapshot(tuple(() for _ in range(workers)), lower, cleared_since=lower)
        self._versions = tuple(s.version for s in self.spines)
        self._progress = tuple(s.progress for s in self.spines)
        self._shapes = tuple(s.shape for s in self.spines)  # the spines' entries as of the last snapshot

    # -- readers ------------------------------------------------------------------------------
    def handle(self, logical: Antichain | None = None, physical: Antichain | None = None,
               on_close=None, owner: str | None = None, final_only: bool = False, on_move=None,
               decode=None, engine=None) -> "TraceHandle":
        """A new reader; ``owner`` names it in statistics (e.g. as the reader holding compaction back).
        ``final_only``: its ``accumulate`` refuses times not final yet (a user's handle: what it would
        answer there changes as the trace grows; operators and the trace's own tests read any time).
        ``on_move``, ``decode`` and ``engine``: see :class:`TraceHandle`."""
        return TraceHandle(self, logical, physical, on_close, owner, final_only, on_move, decode, engine)

    def begins_at(self, epoch: int):
        """This trace's producer, a dataflow installed late, computes from its inputs as of ``epoch``: the
        trace holds no answer for the epochs before it, however far back its readers' frontiers still are
        (a reader of the producer's own that has not stepped yet), so an importer starts there at the
        earliest."""
        self.start = max(self.start, epoch)

    @property
    def readers(self) -> int:
        return len(self._readers)

    def time_bound(self) -> tuple | None:
        """The least time at or after every stored update's (their lub), None for an empty trace: a
        compaction frontier that folds the whole history into one time (any thread: reads the snapshot)."""
        his = [b.time_range[1] for b in self.snapshot.all_batches() if len(b)]
        return tuple(max(c) for c in zip(*his)) if his else None

    def _frontiers(self) -> tuple:
        """(logical, physical) for maintenance: the readers' meets, where a logical meet that is empty
        (every reader is done with every time: their inputs closed) folds the history into one time, the
        lub of the stored ones (the final contents, all that can be read)."""
        with self._lock:
            logical, physical = self.logical, self.physical
            done = not logical.elements and bool(self._readers)
        if done:
            bound = self.time_bound()
            if bound is not None:
                logical = Antichain([bound])
        return logical, physical

    def reader_frontiers(self) -> list:
        """(owner, logical frontier) of every reader, for statistics (any thread)."""
        with self._lock:
            return [(self._owners.get(k, f"handle #{k}"), lo) for k, (lo, _) in self._readers.items()]

    def _set_reader(self, key, logical: Antichain, physical: Antichain, owner: str | None = None):
        with self._lock:
            self._readers[key] = (logical, physical)
            if owner is not None:
                self._owners[key] = owner
            self._recompute()
            self._unsettled = True

    def _drop_reader(self, key):
        with self._lock:
            self._readers.pop(key, None)
            self._owners.pop(key, None)
            self._recompute()
            self._unsettled = True

    def _recompute(self):
        logical = None
        physical = _UNCONSTRAINED
        for lo, ph in self._readers.values():
            logical = lo if logical is None else logical.meet(lo)
            physical = physical.meet(ph) if physical.elements else ph
        if logical is not None:
            self.logical = logical
        self.physical = physical

    def listen(self, listener):
        """Call ``listener.deliver(batches, lower, upper)`` after every append (on the scheduler thread).
        Held weakly: a listener nobody references stops listening. (A dict of weak references, dead ones
        dropped as appends find them, with no callback that could change it while it is read: a WeakSet
        costs a microsecond to iterate, on every insertion.)"""
        self._listeners[id(listener)] = weakref.ref(listener)

    def unlisten(self, listener):
        ref = self._listeners.get(id(listener))
        if ref is not None and ref() is listener:
            self._listeners.pop(id(listener), None)

    def _deliver(self, batches, lower: Antichain):
        """Hand an append to the listeners (after the snapshot holding it is published)."""
        upper = self.snapshot.upper
        for key, ref in list(self._listeners.items()):
            listener = ref()
            if listener is None:
                if self._listeners.get(key) is ref:  # (not a new listener that got the dead one's id)
                    self._listeners.pop(key, None)
            else:
                listener.deliver(batches, lower, upper)

    # -- writing (scheduler thread) -------------------------------------------------------------
    def append(self, batches):
        """Append one batch per shard (all with the same lower and upper) and publish. Cannot fail
        half-way: a later maintenance failure loses nothing."""
        lower = self.snapshot.upper
        for spine, b in zip(self.spines, batches):
            spine.append(b)
        self._unsettled = True
        self.publish()
        if self._listeners:
            self._deliver(batches, lower)

    def maintain(self, run=None):
        """Spend the fuel the appended batches owe on merges (per shard, in parallel when ``run`` is the
        pool's), then publish. When every shard is settled (say an empty batch only moved the uppers
        inside a loop), that is the publish alone."""
        logical, physical = self._frontiers()
        for s in self.spines:
            if s.owed or not s.settled(logical, physical):
                break
        else:
            self.publish()
            return
        self._each_shard(lambda spine, logical, physical: spine.maintain(logical, physical), run,
                         sum(s.owed for s in self.spines))

    def _each_shard(self, work, run, rows: int, progress: bool = False):
        """``work(spine, logical, physical)`` on every shard (in parallel when ``run`` is the pool's and
        there are several), with the readers' frontiers as of now; then publish, whatever happens (with
        ``progress``, also when merges only advanced)."""
        logical, physical = self._frontiers()
        try:
            if run is None or self.workers == 1:
                for spine in self.spines:
                    work(spine, logical, physical)
            else:
                run(lambda s: work(self.spines[s], logical, physical), range(self.workers), rows=rows)
        finally:
            self.publish(progress)

    def idle_work(self, merges: bool = True) -> bool:
        """Whether idle maintenance would do anything: tidy a bloated shard, or (``merges``) finish a
        merge in progress."""
        with self._lock:
            if (self._stalled or not merges) and not self._unsettled:
                return False
            self._unsettled = self._stalled = False
        logical, physical = self._frontiers()
        if any(s.tidy_work(logical, physical) for s in self.spines):
            self._unsettled = True
            return True
        return merges and any(s.idle_work(logical, physical) for s in self.spines)

    def exert(self, fuel: int, run=None):
        """Idle maintenance: about ``fuel`` rows of merging in every shard (in parallel when ``run`` is the
        pool's), then publish. Like ``maintain``, a failure loses nothing; idle maintenance then leaves
        the trace alone until it is appended to or its readers move, rather than retry in a loop."""
        try:
            self._each_shard(lambda spine, logical, physical: spine.exert(logical, physical, fuel), run,
                             fuel * self.workers, progress=True)
        except BaseException:
            with self._lock:
                self._stalled, self._unsettled = True, False
            raise

    def live(self) -> int:
        """The exact number of distinct (data, time) pairs the readers can still tell apart: the records
        left if every shard were merged into one batch compacted to the readers' logical frontier. Costs
        a consolidation of the whole trace (for measurements, not for hot paths)."""
        return live_records(self.snapshot, self.kk, self.kv, self.depth, self.logical)

    def insert(self, batches, run=None):
        """Append and maintain, publishing once: the snapshot readers get holds the new batches (merged
        or not), and listeners hear of them after it is published, as with ``append``."""
        lower = self.snapshot.upper
        for spine, b in zip(self.spines, batches):
            spine.append(b)
        self._unsettled = True
        try:
            self.maintain(run)  # publishes, whatever happens
        finally:
            if self._listeners:
                self._deliver(batches, lower)

    def publish(self, progress: bool = False):
        """Swap in a new snapshot if any shard changed since the last one, or (``progress``: after idle
        merging) if only its merges advanced, so the published merge shortfall catches up while idle.
        Merging right after an append is not republished for that alone: the hot path pays nothing.
        When only the uppers moved (an empty batch) and no merge is in progress, the new snapshot
        shares the last one's batches and figures."""
        spines = self.spines
        versions = tuple([s.version for s in spines])
        progressed = tuple([s.progress for s in spines])
        if versions == self._versions and not (progress and progressed != self._progress):
            return
        self._versions = versions
        self._progress = progressed
        upper = spines[0].upper
        for s in spines[1:]:
            upper = upper.meet(s.upper)
        shapes = tuple([s.shape for s in spines])
        last = self.snapshot
        if shapes == self._shapes and not any(last.merges):
            self.snapshot = TraceSnapshot(last.shards, upper, last.merges, last.merge_bytes, self._cleared_since(),
                                          last.merge_rows)
            return
        self._shapes = shapes
        shards, merges, mbytes, mrows = [], [], [], []
        for s in spines:
            shards.append(s.batches())
            m, mb, mr = s.merging()
            merges.append(m)
            mbytes.append(mb)
            mrows.append(mr)
        self.snapshot = TraceSnapshot(tuple(shards), upper, tuple(merges), tuple(mbytes), self._cleared_since(),
                                      tuple(mrows))

    def _cleared_since(self) -> Antichain:
        """The since of the history every shard folded away when it emptied (their join: the same history
        reads the same whichever shard its rows hashed to)."""
        since = self.spines[0].cleared_since
        for s in self.spines[1:]:
            since = _later(since, s.cleared_since)
        return since

    # -- reading ------------------------------------------------------------------------------
    @property
    def upper(self) -> Antichain:
        return self.snapshot.upper

    def stats(self) -> dict:
        return trace_stats(self.snapshot, self.readers, self.logical, self.name, self.reader_frontiers())


HISTORY = 1  # epochs behind the upper a reader normally stays (views and imports read the last complete one)


def trace_stats(snap: TraceSnapshot, readers: int, logical: Antichain, name=None, holders=None) -> dict:
    """Totals over the shards (records, keys, batches, bytes, merges in progress and the rows they still
    have to merge), readers, frontiers, the per-shard figures and ``skew`` (max over mean shard records:
    1.0 is even). With ``holders`` (``Trace.reader_frontiers()``), ``blocker`` names the reader(s)
    holding compaction furthest back when that is more than ``HISTORY`` epochs behind the upper, and
    ``blocked_epochs`` says by how much (else None and 0)."""
    shards = snap.shard_stats()
    out = {k: sum(s[k] for s in shards) for k in ("records", "keys", "batches", "bytes", "merges",
                                                   "merge_shortfall")}
    mean = out["records"] / len(shards) if shards else 0
    out.update(readers=readers, since=snap.since, upper=snap.upper, logical=logical, shards=shards,
               skew=max(s["records"] for s in shards) / mean if mean else 1.0)
    if holders is not None:
        out["blocker"], out["blocked_epochs"] = compaction_blocker(holders, snap.upper)
    if name is not None:
        out["name"] = name
    return out


def compaction_blocker(holders, upper: Antichain) -> tuple:
    """(the owners, joined, of the readers whose logical frontier is furthest behind ``upper``, by how
    many epochs), or (None, 0) when no reader is more than ``HISTORY`` epochs behind. Epochs are the
    first coordinate (the least one over a frontier's elements), so this reads nested traces too."""
    if not upper.elements:
        return None, 0
    top = min(t[0] for t in upper.elements)
    lags = [(top - min(t[0] for t in lo.elements), who) for who, lo in holders if lo.elements]
    worst = max((lag for lag, _ in lags), default=0)
    if worst <= HISTORY:
        return None, 0
    return ", ".join(sorted(who for lag, who in lags if lag == worst)), int(worst)


def live_records(snap: TraceSnapshot, kk: int, kv: int, depth: int, logical: Antichain) -> int:
    """Records of ``snap`` once each shard is consolidated with its times advanced to ``logical``."""
    total = 0
    for batches in snap.shards:
        batches = [b for b in batches if len(b)]
        if not batches:
            continue
        times = np.concatenate([b.times for b in batches], axis=0)
        if logical.elements:
            times = rep_matrix(times, logical)
        arrays = form_arrays(np.concatenate([b.key_rows() for b in batches], axis=1),
                             np.concatenate([b.vals for b in batches], axis=1), times,
                             np.concatenate([b.diffs for b in batches]))
        total += len(arrays[5])
    return total


def _inside_batch(trace: Trace, frontier: Antichain):
    """(lower, upper) of a non-empty batch of some shard (or of a merge in progress: what it will make) that
    ``frontier`` falls inside, so that no batch boundary is there; None when every shard has one there (a
    frontier at or past a shard's upper is a boundary to come). Reads the spines from any thread: a copy of
    their entries' list is taken at once, and batches never change."""
    for spine in trace.spines:
        for e in list(spine.entries):
            older = getattr(e, "older", None)  # (a merge in progress: both inputs become one batch)
            lower, upper = (e.lower, e.upper) if older is None else (older.lower, e.newer.upper)
            if older is None and not len(e):
                continue  # (an empty batch holds nothing to read through, wherever its bounds are)
            if not upper.less_equal(frontier) and not frontier.less_equal(lower):
                return lower, upper
    return None


def _release(trace: Trace, key, on_close):
    trace._drop_reader(key)
    if on_close is not None:
        on_close()


class TraceHandle:
    """A reader of a trace. Keeps it alive; its frontiers tell maintenance what it still needs. Reads
    go through the trace's published snapshot, so they are safe from any thread.

    ``on_move()`` (optional) is called, on the caller's thread, after each change of its frontiers: a
    user's handle (``eng.trace``) wakes the scheduler with it, so that frontiers moved while the engine
    is idle let the trace compact then; operators' handles, moved on the scheduler thread every step,
    have none. ``decode(keys, vals)`` (optional) turns the stored int64 encoding into the user's values
    for ``accumulate`` (``eng.trace``'s handles decode str and float columns with the export's schema).
    ``engine`` (optional): the engine that gave the handle out (``eng.trace``); once it is closed every call
    but ``close`` raises ``EngineError`` as a view's reads do, and the handle lets its trace go.

    A user's handle (``final_only``) may only advance its physical frontier, and only to a frontier at which
    every shard still has a batch boundary (or past its upper): one inside a batch already merged could not
    be read through. It starts unconstrained (the empty frontier: merges go on) unless given one."""

    def __reduce__(self):  # (pickle, copy.copy, copy.deepcopy)
        raise not_copyable(self)

    def __init__(self, trace: Trace, logical: Antichain | None = None, physical: Antichain | None = None,
                 on_close=None, owner: str | None = None, final_only: bool = False, on_move=None,
                 decode=None, engine=None):
        self._trace = trace
        self._engine = engine
        self._engine_closed = False  # its engine closed (seen by a call): the trace is let go
        self._on_move = on_move
        self._decode = decode
        self._depth = trace.depth
        self._final_only = final_only  # (eng.trace's: a time not final yet is refused, as views refuse it)
        self._key = next(_ids)
        self._logical = logical if logical is not None else trace.logical
        self._physical = physical if physical is not None else Antichain()
        self.inbox = None
        self._woken = None
        trace._set_reader(self._key, self._logical, self._physical, owner)
        self._finalizer = weakref.finalize(self, _release, trace, self._key, on_close)

    # -- frontiers ----------------------------------------------------------------------------
    @property
    def logical(self) -> Antichain:
        return self._logical

    @property
    def physical(self) -> Antichain:
        return self._physical

    def _frontier(self, frontier, what: str) -> Antichain:
        """``frontier`` as an Antichain of this trace's times: an Antichain, or one time (an int epoch, a tuple
        of ints). Checked at the call: a frontier the trace cannot use would fail its producer later."""
        if frontier.__class__ is not Antichain and not isinstance(frontier, Antichain):
            parts = tuple(frontier) if isinstance(frontier, (tuple, list)) else (frontier,)
            if not parts or not all(is_int(x) for x in parts):
                raise ArgumentTypeError(f"{what}: a frontier is an Antichain of times, or one time (an int epoch "
                                        f"or a tuple of ints), got {frontier!r}")
            frontier = Antichain([tuple(int(x) for x in parts)])
        els = frontier.elements  # (an antichain's times are of one depth: its first tells; operators call
        if els and len(els[0]) != self._depth:  # this every step)
            raise UsageError(f"{what}: time {els[0]} has depth {len(els[0])}; this trace's times have depth "
                             f"{self._depth}")
        return frontier

    def set_logical_compaction(self, frontier: Antichain):
        """Promise to read only as of times in advance of ``frontier`` (an Antichain, or one time: an int
        epoch) from now on."""
        trace = self.trace  # (a closed handle says so, whatever the frontier)
        self._move(trace, self._frontier(frontier, "set_logical_compaction"), self._physical)

    def set_physical_compaction(self, frontier: Antichain):
        """Ask for batch boundaries to be kept at ``frontier`` (empty: no constraint)."""
        trace = self.trace
        self._move(trace, self._logical, self._frontier(frontier, "set_physical_compaction"))

    def set_compaction(self, logical: Antichain, physical: Antichain):
        """Both frontiers at once, in one update of the trace's readers (operators move both every step)."""
        trace = self.trace
        self._move(trace, self._frontier(logical, "set_compaction"), self._frontier(physical, "set_compaction"))

    def _move(self, trace: Trace, logical: Antichain, physical: Antichain):
        """Check, then take, both frontiers (nothing changes when a check fails)."""
        same = logical == self._logical
        same_physical = physical == self._physical
        if same and same_physical:
            return
        if not same and not self._logical.less_equal(logical):
            raise UsageError(f"logical compaction frontier may only advance: {self._logical} -> {logical}")
        checked = self._final_only and not same_physical and physical.elements
        if checked and self._physical.elements and not self._physical.less_equal(physical):
            raise UsageError(f"physical compaction frontier may only advance: {self._physical} -> {physical}")
        before = self._logical, self._physical
        self._logical, self._physical = logical, physical
        trace._set_reader(self._key, logical, physical)
        if checked:
            # checked once the trace holds it: a merge started before could still join batches across it
            inside = _inside_batch(trace, physical)
            if inside is not None:
                self._logical, self._physical = before
                trace._set_reader(self._key, *before)
                raise UsageError(f"physical compaction frontier {physical} is inside a batch ({inside[0]} to "
                                 f"{inside[1]}) that its epochs were already merged into, so nothing can be "
                                 f"read through it: a handle keeps the boundaries it asks for from then on, "
                                 f"so set it before the epochs arrive (at or after the upper, "
                                 f"{trace.snapshot.upper}), or at a batch boundary")
        if self._on_move is not None:
            self._on_move()

    def subscribe(self, woken=None):
        """Receive (batches, lower, upper) of every later append in ``inbox`` (scheduler thread), calling
        ``woken()`` (if given) after each."""
        self.inbox = []
        self._woken = woken
        self.trace.listen(self)

    def deliver(self, batches, lower, upper):
        self.inbox.append((batches, lower, upper))
        if self._woken is not None:
            self._woken()

    @property
    def trace(self) -> Trace:
        t = self._trace
        if t is None:
            if self._engine_closed:
                raise EngineError("the engine is closed")
            raise UsageError("this trace handle is closed")
        e = self._engine
        if e is not None and e.closed:
            self._engine_closed = True
            self.close()  # (the closed engine's trace is not kept for a handle that can no longer read it)
            raise EngineError("the engine is closed")
        return t

    def close(self):
        """Stop reading; the trace is released when its last handle closes."""
        if self._trace is not None and self.inbox is not None:
            self._trace.unlisten(self)
        self._finalizer()
        self._trace = None

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def live_trace(self) -> Trace | None:
        """The trace, or None once the handle is closed (never raises: any thread may ask while the
        scheduler closes it)."""
        t = self._trace
        return t if t is not None and self._finalizer.alive else None

    @property
    def upper(self) -> Antichain:
        return self.trace.snapshot.upper

    # -- access -------------------------------------------------------------------------------
    def snapshot(self) -> TraceSnapshot:
        return self.trace.snapshot

    def batches(self, shard: int = 0, through: Antichain | None = None) -> tuple:
        if not is_int(shard):
            raise ArgumentTypeError(f"a shard is an int, 0 to {self.trace.workers - 1}, not {shard!r}")
        if not 0 <= shard < self.trace.workers:
            raise UsageError(f"shard {shard} does not exist: this trace has {self.trace.workers} shards, 0 to "
                             f"{self.trace.workers - 1} (one per worker)")
        return self.trace.snapshot.batches(shard, through)

    def cursor(self, shard: int = 0, through: Antichain | None = None, lens: TimeLens = IDENTITY) -> Cursor:
        return Cursor(self.batches(shard, through), self.trace.kv, self.trace.depth, lens, kk=self.trace.kk)

    def accumulate(self, at=None, snapshot: TraceSnapshot | None = None, raw: bool = False):
        """The collection as of time ``at`` (default: everything recorded so far), consolidated:
        (keys ``kk x m``, vals ``kv x m``, multiplicities ``m``), across all shards of one snapshot.
        A handle that knows its columns' types (``eng.trace``'s) gives them decoded: str columns as str,
        float columns as floats, bool as bool (a part whose columns differ in type is an object array);
        ``raw=True``
        gives the stored int64 encoding (what cursors and ``seek_keys`` work in)."""
        trace = self.trace
        snap = snapshot if snapshot is not None else trace.snapshot
        if at is not None:
            parts = tuple(at) if isinstance(at, (tuple, list)) else (at,)
            if not all(is_int(x) for x in parts):
                raise ArgumentTypeError(f"accumulate(at=): a time is an int epoch (or a tuple of ints, one per "
                                        f"coordinate), got {at!r}")
            at = tuple(int(x) for x in parts)
            if len(at) != trace.depth:
                raise UsageError(f"time {at} has depth {len(at)}; this trace's times have depth {trace.depth}")
            if not self._logical.dominates(at):
                raise CompactedError(f"time {at} is not in advance of this reader's frontier {self._logical}: "
                                     "its history has been compacted")
            if at[0] < trace.start:  # a producer installed late has no answer for the epochs before its start
                raise CompactedError(f"time {at} is before epoch {trace.start}, the first this trace's dataflow "
                                     f"computed (it was installed when its inputs were there)")
            if self._final_only and snap.upper.dominates(at):
                raise UsageError(f"time {at} is not final yet in this arrangement (its upper is {snap.upper}); "
                                 f"wait for its dataflow, or read a time before the upper")
        out = accumulate_batches(snap.all_batches(), trace.kk, trace.kv, trace.depth, at)
        if self._decode is None or raw:
            return out
        keys, vals = self._decode(out[0], out[1])
        return keys, vals, out[2]
