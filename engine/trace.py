"""Traces, trace handles and cursors (K-Pg sections 4.1 and 4.3).

A :class:`Trace` is an arrangement's indexed state: one :class:`~.spine.Spine` per worker shard (keys
are assigned to shards by their hash) and the frontiers of its readers. A :class:`TraceHandle` is a
reader: it holds the trace alive, and its logical frontier (which times it may still ask about) and
physical frontier (where it needs batch boundaries) bound what maintenance may do. Dropping the last
handle releases the trace; the producer only keeps a weak reference.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque

import numpy as np

from .batch import form_arrays
from .kernels.seek import gather_rows, row_counts, seek_keys, unique_sorted_keys
from .kernels.sort import arrangement_order
from .lattice import Antichain, rep_matrix
from .spine import Spine

_ids = itertools.count()


class CompactedError(ValueError):
    """A read asked for a time the trace can no longer distinguish."""


class TimeLens:
    """How a reader sees a trace's times without copying it: advanced to a frontier (an import
    compacted to the importer's frontier) and extended with zero rounds (entering a loop scope)."""

    __slots__ = ("frontier", "extend")

    def __init__(self, frontier: Antichain | None = None, extend: int = 0):
        self.frontier = frontier if frontier is not None and frontier.elements else None
        self.extend = extend

    @property
    def identity(self) -> bool:
        return self.frontier is None and self.extend == 0

    def entered(self) -> "TimeLens":
        return TimeLens(self.frontier, self.extend + 1)

    def apply(self, times: np.ndarray) -> np.ndarray:
        if self.frontier is not None:
            times = rep_matrix(times, self.frontier)
        if self.extend:
            times = np.concatenate([times, np.zeros((times.shape[0], self.extend), np.int64)], axis=1)
        return times

    def apply_frontier(self, frontier: Antichain) -> Antichain:
        out = frontier
        if self.frontier is not None and out.elements:
            out = out.join(self.frontier)
        if self.extend:
            out = out.map(lambda t: t + (0,) * self.extend)
        return out

    def __repr__(self):
        return f"TimeLens(frontier={self.frontier}, extend={self.extend})"


IDENTITY = TimeLens()


class Trace:
    """An arrangement's state: ``workers`` key-sharded spines plus the frontiers of its readers."""

    def __init__(self, kk: int, kv: int, depth: int = 1, workers: int = 1, lower: Antichain | None = None,
                 effort: str = "default", name: str | None = None):
        lower = lower if lower is not None else Antichain([(0,) * depth])
        self.kk, self.kv, self.depth, self.workers = kk, kv, depth, workers
        self.name = name
        self.spines = [Spine(kk, kv, depth, lower, effort) for _ in range(workers)]
        self._readers: dict = {}
        self._lock = threading.Lock()
        self.logical = lower        # meet of the readers' logical frontiers
        self.physical = Antichain()  # meet of the readers' physical frontiers (empty: unconstrained)
        self._subscribers = weakref.WeakSet()  # handles that receive every inserted batch

    # -- readers ------------------------------------------------------------------------------
    def handle(self, logical: Antichain | None = None, physical: Antichain | None = None) -> "TraceHandle":
        return TraceHandle(self, logical, physical)

    @property
    def readers(self) -> int:
        return len(self._readers)

    def _set_reader(self, key, logical: Antichain, physical: Antichain):
        with self._lock:
            self._readers[key] = (logical, physical)
            self._recompute()

    def _drop_reader(self, key):
        with self._lock:
            self._readers.pop(key, None)
            self._recompute()

    def _recompute(self):
        logical = None
        physical = Antichain()
        for lo, ph in self._readers.values():
            logical = lo if logical is None else logical.meet(lo)
            physical = physical.meet(ph) if physical.elements else ph
        if logical is not None:
            self.logical = logical
        self.physical = physical

    # -- writing ------------------------------------------------------------------------------
    def insert(self, batches, run=None):
        """Append one batch per shard (all with the same lower and upper). ``run(fn, items)`` may run
        the per-shard maintenance in parallel."""
        logical, physical = self.logical, self.physical
        lower = self.upper
        if run is None or self.workers == 1:
            for spine, b in zip(self.spines, batches):
                spine.insert(b, logical, physical)
        else:
            run(lambda s: self.spines[s].insert(batches[s], logical, physical), range(self.workers),
                rows=sum(len(b) for b in batches))
        upper = self.upper
        for h in list(self._subscribers):
            h.inbox.append((batches, lower, upper))

    # -- reading ------------------------------------------------------------------------------
    @property
    def upper(self) -> Antichain:
        return self.spines[0].upper

    def stats(self) -> dict:
        """Totals over the shards (records, keys, batches, bytes, merges in progress), readers, frontiers,
        and the per-shard figures (to show skew)."""
        shards = [dict(s.stats(), readers=self.readers) for s in self.spines]
        out = {k: sum(s[k] for s in shards) for k in ("records", "keys", "batches", "bytes", "merges")}
        out.update(readers=self.readers, since=shards[0]["since"], upper=self.upper,
                   logical=self.logical, shards=shards)
        return out


class TraceHandle:
    """A reader of a trace. Keeps it alive; its frontiers tell maintenance what it still needs."""

    def __init__(self, trace: Trace, logical: Antichain | None = None, physical: Antichain | None = None):
        self._trace = trace
        self._key = next(_ids)
        self._logical = logical if logical is not None else trace.logical
        self._physical = physical if physical is not None else Antichain()
        trace._set_reader(self._key, self._logical, self._physical)
        self._finalizer = weakref.finalize(self, trace._drop_reader, self._key)

    # -- frontiers ----------------------------------------------------------------------------
    @property
    def logical(self) -> Antichain:
        return self._logical

    @property
    def physical(self) -> Antichain:
        return self._physical

    def set_logical_compaction(self, frontier: Antichain):
        """Promise to read only as of times in advance of ``frontier`` from now on."""
        if frontier == self._logical:
            return
        if not self._logical.less_equal(frontier):
            raise ValueError(f"logical compaction frontier may only advance: {self._logical} -> {frontier}")
        self._logical = frontier
        self.trace._set_reader(self._key, frontier, self._physical)

    def set_physical_compaction(self, frontier: Antichain):
        """Ask for batch boundaries to be kept at ``frontier`` (empty: no constraint)."""
        if frontier == self._physical:
            return
        self._physical = frontier
        self.trace._set_reader(self._key, self._logical, frontier)

    def subscribe(self):
        """Receive (batches, lower, upper) of every later insertion in ``inbox``."""
        self.inbox = deque()
        self.trace._subscribers.add(self)

    @property
    def trace(self) -> Trace:
        if self._trace is None:
            raise ValueError("this trace handle is closed")
        return self._trace

    def close(self):
        """Stop reading; the trace is released when its last handle closes."""
        self._finalizer()
        self._trace = None

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    @property
    def upper(self) -> Antichain:
        return self.trace.upper

    # -- access -------------------------------------------------------------------------------
    def batches(self, shard: int = 0, through: Antichain | None = None) -> tuple:
        return self.trace.spines[shard].batches(through)

    def cursor(self, shard: int = 0, through: Antichain | None = None, lens: TimeLens = IDENTITY) -> "Cursor":
        return Cursor(self.batches(shard, through), self.trace.kv, self.trace.depth, lens)

    def accumulate(self, at=None):
        """The collection as of time ``at`` (default: everything recorded so far), consolidated:
        (keys ``kk x m``, vals ``kv x m``, multiplicities ``m``), across all shards."""
        if at is not None:
            at = tuple(int(x) for x in (at if isinstance(at, (tuple, list)) else (at,)))
            if len(at) != self.trace.depth:
                raise ValueError(f"time {at} has depth {len(at)}; this trace's times have depth {self.trace.depth}")
            if not self._logical.dominates(at):
                raise CompactedError(f"time {at} is not in advance of this reader's frontier {self._logical}: "
                                     "its history has been compacted")
        parts = [b for s in range(self.trace.workers) for b in self.batches(s)]
        return accumulate_batches(parts, self.trace.kk, self.trace.kv, self.trace.depth, at)


def accumulate_batches(batches, kk: int, kv: int, depth: int, at: tuple | None = None):
    keys, vals, diffs = [], [], []
    for b in batches:
        if at is None:
            sel = None
        else:
            sel = np.all(b.times <= np.asarray(at, np.int64), axis=1)
            if not sel.any():
                continue
        k = b.key_rows()
        if sel is None:
            keys.append(k), vals.append(b.vals), diffs.append(b.diffs)
        else:
            keys.append(k[:, sel]), vals.append(b.vals[:, sel]), diffs.append(b.diffs[sel])
    if not diffs:
        return np.zeros((kk, 0), np.int64), np.zeros((kv, 0), np.int64), np.zeros(0, np.int64)
    K = np.concatenate(keys, axis=1)
    V = np.concatenate(vals, axis=1)
    D = np.concatenate(diffs)
    _, ok, koff, ov, _, od = form_arrays(K, V, np.zeros((len(D), 0), np.int64), D)
    return np.repeat(ok, np.diff(koff), axis=1), ov, od


class Histories:
    """Rows of a set of probe keys gathered from several batches: probe keys in arrangement order,
    ``off`` (rows of probe p are off[p]:off[p+1]) and the rows' vals, times, diffs."""

    __slots__ = ("kh", "keys", "off", "vals", "times", "diffs")

    def __init__(self, kh, keys, off, vals, times, diffs):
        self.kh, self.keys, self.off, self.vals, self.times, self.diffs = kh, keys, off, vals, times, diffs

    def __len__(self):
        return self.diffs.shape[0]


def probe_keys(keys: np.ndarray):
    """(hashes, keys) sorted in arrangement order and distinct, for seeking."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = keys.shape[1]
    perm, skh = arrangement_order(keys, np.zeros((0, n), np.int64), np.zeros((n, 0), np.int64))
    k = keys[:, perm]
    keep = unique_sorted_keys(skh, k)
    if keep.all():
        return skh, k
    return skh[keep], np.ascontiguousarray(k[:, keep])


class Cursor:
    """Navigates the union of some batches: for a sorted set of keys, gathers their histories with
    work proportional to the keys sought (galloping seeks), not to the size of the batches."""

    def __init__(self, batches, kv: int, depth: int, lens: TimeLens = IDENTITY):
        self.batches = [b for b in batches if len(b)]
        self.kv = kv
        self.depth = depth
        self.lens = lens

    def seek(self, pkh: np.ndarray, pkeys: np.ndarray) -> Histories:
        m = pkh.shape[0]
        found = [seek_keys(b.kh, b.keys, pkh, pkeys) for b in self.batches]
        counts = np.zeros(m, np.int64)
        per = []
        for b, kidx in zip(self.batches, found):
            c = row_counts(kidx, b.koff)
            per.append(c)
            counts += c
        off = np.zeros(m + 1, np.int64)
        np.cumsum(counts, out=off[1:])
        total = int(off[-1])
        vals = np.empty((self.kv, total), np.int64)
        times = np.empty((total, self.depth), np.int64)
        diffs = np.empty(total, np.int64)
        probe = np.empty(total, np.int64)
        cursor = off[:-1].copy()
        for b, kidx in zip(self.batches, found):
            gather_rows(kidx, b.koff, b.vals, b.times, b.diffs, cursor, vals, times, diffs, probe)
        if not self.lens.identity:
            times = self.lens.apply(times)
        return Histories(pkh, pkeys, off, vals, times, diffs)

    def seek_keys(self, keys: np.ndarray) -> Histories:
        """Histories of arbitrary key columns (hashed, sorted and deduplicated first)."""
        return self.seek(*probe_keys(keys))

    def keys(self):
        """All distinct keys present in these batches (hashes, keys), in arrangement order."""
        from .kernels.seek import merge_key_lists
        kk = self.batches[0].kk if self.batches else 0
        kh, keys = np.zeros(0, np.int64), np.zeros((kk, 0), np.int64)
        for b in self.batches:
            kh, keys = merge_key_lists(kh, keys, b.kh, b.keys) if len(kh) else (b.kh, b.keys)
        return kh, keys
