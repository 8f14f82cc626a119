"""Spine: one shard's collection trace, an append-only list of batches kept at logarithmically many by
merging neighbours of similar size. Merges are amortised (K-Pg section 4.2): each inserted batch spends
fuel proportional to its size on every merge in progress, so no single insertion stalls on a big merge.

Merges respect two frontiers supplied by the trace's readers: the logical compaction frontier (times are
advanced to rep_F while merging) and the physical one (a batch is only merged once its upper is at or
before it, so readers that read "through" a frontier still find a batch boundary there).

Owner: a spine is written by the scheduler thread only (or by the one pool worker it hands this shard to
for the length of a step); ``append`` cannot fail and ``maintain`` may fail (a merge error) without
losing or duplicating anything: a merge in progress is resumable. Readers outside the scheduler never
look at a spine: they read the trace's published snapshot.
"""
from __future__ import annotations

from . import faults
from .batch import Batch, Merger
from .lattice import Antichain

EFFORT = {"eager": None, "default": 2.0, "lazy": 1.0}
MIN_FUEL = 1024  # every insertion, even of an empty batch, moves merges along a little


class _Merging:
    """Two adjacent batches being merged; readers keep seeing both until the merge completes."""

    __slots__ = ("older", "newer", "merger", "since")

    def __init__(self, older: Batch, newer: Batch, since: Antichain):
        self.older = older
        self.newer = newer
        self.since = since
        f = since.matrix(older.depth) if since.elements else None
        self.merger = Merger(older.arrays, newer.arrays, f)

    def __len__(self):
        return len(self.older) + len(self.newer)

    def result(self) -> Batch:
        return Batch(*self.merger.result, self.older.lower, self.newer.upper, self.since)


class Spine:
    """One shard of a trace: its batches (oldest first), merges in progress, and its upper frontier."""

    def __init__(self, kk: int, kv: int, depth: int, lower: Antichain, effort: str = "default"):
        if effort not in EFFORT:
            raise ValueError(f"effort must be one of {sorted(EFFORT)}, not {effort!r}")
        self.kk, self.kv, self.depth = kk, kv, depth
        self.effort = effort
        self.lower = lower
        self.entries: list = []  # batches and merges in progress, oldest first
        self.version = 0         # bumped whenever entries change (readers' snapshots are rebuilt then)
        self._readable = None
        self._merging = None
        self.upper = lower
        self._owed = 0  # rows appended since the last maintenance
        self.merges_completed = 0

    # -- reading (owner only) ------------------------------------------------------------------
    def batches(self) -> tuple:
        """The readable batches, oldest first: merges in progress show as their two inputs."""
        if self._readable is None:
            out = []
            for e in self.entries:
                if isinstance(e, _Merging):
                    out.append(e.older)
                    out.append(e.newer)
                elif len(e):
                    out.append(e)
            self._readable = tuple(out)
        return self._readable

    def _changed(self):
        """The entries changed: readers' view and statistics must be recomputed."""
        self.version += 1
        self._readable = None
        self._merging = None

    def snapshot(self):
        """(batches, upper) as one consistent pair."""
        return self.batches(), self.upper

    def merging(self) -> tuple:
        """(merges in progress, bytes of their output buffers)."""
        if self._merging is None:
            ms = [e for e in self.entries if isinstance(e, _Merging)]
            self._merging = (len(ms), sum(m.merger.nbytes for m in ms))
        return self._merging

    # -- writing ------------------------------------------------------------------------------
    def append(self, batch: Batch):
        """Append a batch whose lower is the current upper. Cannot fail half-way."""
        if batch.lower != self.upper:
            raise ValueError(f"batch lower {batch.lower} does not continue the trace upper {self.upper}")
        if len(batch):
            stored = self._last_upper()
            if stored != batch.lower:
                batch = batch.relabel(stored, batch.upper)
            self.entries.append(batch)
        self.upper = batch.upper
        self._changed()
        self._owed += len(batch)

    def insert(self, batch: Batch, logical: Antichain, physical: Antichain):
        """Append, then spend fuel on maintenance."""
        self.append(batch)
        self.maintain(logical, physical)

    @property
    def owed(self) -> int:
        """Rows appended since the last maintenance (the fuel they are owed)."""
        return self._owed

    def maintain(self, logical: Antichain, physical: Antichain):
        """Spend the fuel owed by appended batches (at least MIN_FUEL) on merges."""
        size, self._owed = self._owed, 0
        self._maintain(size, logical, physical)

    def exert(self, logical: Antichain, physical: Antichain, fuel: int = MIN_FUEL):
        """Spend fuel without inserting (idle maintenance)."""
        self._maintain(fuel, logical, physical)

    def _last_upper(self) -> Antichain:
        if not self.entries:
            return self.lower
        e = self.entries[-1]
        return e.newer.upper if isinstance(e, _Merging) else e.upper

    def _maintain(self, size: int, logical: Antichain, physical: Antichain):
        coef = EFFORT[self.effort]
        self._start_merges(logical, physical)
        if coef is None:
            while self._work(None):
                self._start_merges(logical, physical)
        else:
            fuel = int(coef * max(size, MIN_FUEL))
            while self._work(fuel):
                self._start_merges(logical, physical)
                fuel = 0  # later merges get fuel from later insertions
            if self._merging_count() > 2 * max(1, len(self.entries).bit_length()):
                # lazy settings must not let merges pile up: finish the oldest
                self._finish_oldest()
                self._start_merges(logical, physical)

    def _merging_count(self) -> int:
        return sum(isinstance(e, _Merging) for e in self.entries)

    def _start_merges(self, logical: Antichain, physical: Antichain):
        """Merge adjacent complete batches of similar size (the older at most twice the newer), and fold
        empty batches into a neighbour, wherever the newer batch lies at or before ``physical``."""
        es = self.entries
        i = len(es) - 1
        while i >= 1:
            newer, older = es[i], es[i - 1]
            if isinstance(newer, Batch) and isinstance(older, Batch) and newer.upper.less_equal(physical):
                if len(newer) == 0 or len(older) == 0:
                    keep = older if len(newer) == 0 else newer
                    # the kept batch's times are advanced to its own since, not to the empty one's
                    es[i - 1:i + 1] = [Batch(*keep.arrays, older.lower, newer.upper, keep.since)]
                    self._changed()
                    i -= 1
                    continue
                if len(older) <= 2 * len(newer):
                    since = _later(logical, _later(older.since, newer.since))
                    es[i - 1:i + 1] = [_Merging(older, newer, since)]
                    self._changed()
                    i -= 2
                    continue
            i -= 1
        if len(es) == 1 and isinstance(es[0], Batch) and len(es[0]) == 0:
            self.lower = es[0].upper
            es.clear()
            self._changed()

    def _work(self, fuel) -> bool:
        """Give ``fuel`` to every merge in progress; returns whether any completed."""
        completed = False
        for i, e in enumerate(self.entries):
            if isinstance(e, _Merging):
                faults.point("merge")
            if isinstance(e, _Merging) and e.merger.work(fuel):
                self.entries[i] = e.result()
                self.merges_completed += 1
                self._changed()
                completed = True
        return completed

    def _finish_oldest(self):
        for i, e in enumerate(self.entries):
            if isinstance(e, _Merging):
                e.merger.work(None)
                self.entries[i] = e.result()
                self.merges_completed += 1
                self._changed()
                return


def _later(a: Antichain, b: Antichain) -> Antichain:
    """The join of two since-frontiers (times in advance of both)."""
    if not a.elements:
        return b
    if not b.elements:
        return a
    return a.join(b)
