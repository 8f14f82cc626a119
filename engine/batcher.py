"""The batcher: buffer updates, and seal them at a frontier into one arranged batch per worker shard
(each key's updates in the shard owning it). Engine inputs and the arrange operator both use it, so an
input is an ordinary arrangement.

Updates are buffered as they come and exchanged to their shards when sealed: the exchange and the
formation's own distribution of rows by hash are one pass (batch.form_parts, reading the buffered
parts where they are), so rows are copied once.

``push`` and ``seal`` are atomic: they compute everything first and change the buffers last, so a
failure (a fault in a kernel, a worker error) leaves the batcher exactly as it was and the same work can
be retried.
"""
from __future__ import annotations

import numpy as np

from . import faults
from .batch import Batch, form_parts
from .kernels.times import group_rows, one_time, time_groups
from .lattice import Antichain, antichain_of, in_advance_mask


TIME_GROUPS = 64  # updates held for later are split by time when they hold at most this many times


def _c(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _serial(fn, items, rows=None):
    return [fn(i) for i in items]


class Part:
    """Buffered updates (keys kk x n, vals kv x n, times n x d, diffs n) and their minimal times ``lo``;
    ``single``: every update has that one time (found on arrival unless given). A seal decides a part
    with one time, or one wholly in advance of its frontier, without reading its rows, and forms parts
    of one time without their times (batch.form_parts ``time``)."""

    __slots__ = ("keys", "vals", "times", "diffs", "_lo", "single")

    def __init__(self, keys, vals, times, diffs, lo: Antichain | None = None, single: bool | None = None):
        self.keys, self.vals, self.times, self.diffs = keys, vals, times, diffs
        if single is None:  # found out: most parts (a round's output, a load) hold one time
            single = len(diffs) == 1 or (len(diffs) > 1 and one_time(times))
        self.single = single
        self._lo = antichain_of(times[:1]) if lo is None and single else lo

    @property
    def lo(self) -> Antichain:
        if self._lo is None:  # on first use: a part selected from another may be formed at once
            self._lo = antichain_of(self.times)
        return self._lo

    def __len__(self):
        return self.diffs.shape[0]

    @property
    def arrays(self) -> tuple:
        return self.keys, self.vals, self.times, self.diffs

    def select(self, mask) -> "Part":
        return Part(self.keys[:, mask], self.vals[:, mask], self.times[mask], self.diffs[mask])

    def by_time(self) -> list:
        """This part as one part per time, when it holds few; else [self]."""
        if self.single:
            return [self]
        group, seen, g = time_groups(self.times, TIME_GROUPS)
        return [self] if g < 0 else self._grouped(group, seen, g)

    def _grouped(self, group, seen, g) -> list:
        """One part per time group (``time_groups``' output): rows gathered once by a counting-sort
        kernel, in place of an argsort and a gather per array."""
        keys, vals, times, diffs, ends = group_rows(self.keys, self.vals, self.times, self.diffs, group, g)
        out, a = [], 0
        for j, b in enumerate(ends.tolist()):
            out.append(Part(keys[:, a:b], vals[:, a:b], times[a:b], diffs[a:b],
                            Antichain([tuple(seen[j].tolist())]), True))
            a = b
        return out

    def split(self, upper: Antichain) -> tuple:
        """(parts now, parts later): this part's updates not in advance of ``upper`` and those that are,
        the later ones one part per time when they hold few (so later seals take or leave them whole).
        A part of few times is classified by its times alone and gathered at most once; one whose
        least times are all later is left unread."""
        if all(upper.dominates(t) for t in self.lo):
            return [], [self]
        if self.single:
            return [self], []
        group, seen, g = time_groups(self.times, TIME_GROUPS)
        if g > 0:
            late = [upper.dominates(tuple(seen[j].tolist())) for j in range(g)]
            if not any(late):
                return [self], []
            parts = self._grouped(group, seen, g)
            return [q for q, x in zip(parts, late) if not x], [q for q, x in zip(parts, late) if x]
        later = in_advance_mask(self.times, upper)
        if not later.any():
            return [self], []
        keep = ~later
        return [self.select(keep)] if keep.any() else [], self.select(later).by_time()


class Batcher:
    """Buffers (keys, vals, times, diffs) updates until a frontier passes their times."""

    def __init__(self, kk: int, kv: int, depth: int, workers: int):
        self.kk, self.kv, self.depth, self.workers = kk, kv, depth, workers
        self.buffer: list = []  # Parts
        self.buffered = 0
        self.held = Antichain()  # minimal times of the buffered updates

    def push(self, parts, run=_serial):
        """Buffer updates for the shards owning their keys. ``parts``: (keys kk x n, vals kv x n,
        times n x d, diffs n) tuples (read only, never written)."""
        parts = [p for p in parts if len(p[3])]
        if not parts:
            return
        faults.point("exchange")
        pieces = [Part(_c(p[0]), _c(p[1]), _c(p[2]), _c(p[3])) for p in parts]
        held = self.held
        for p in pieces:
            held = held.meet(p.lo)
        self.buffer.extend(pieces)
        self.buffered += sum(len(p) for p in pieces)
        self.held = held

    def seal(self, lower: Antichain, upper: Antichain, run=_serial) -> list:
        """One batch per shard of the buffered updates whose times are not in advance of ``upper``, each
        described by [lower, upper); later updates stay buffered (split by time when they hold few
        times, so later seals take or leave them whole)."""
        faults.point("seal")
        buf = self.buffer
        if not buf:
            return [Batch.empty(self.kk, self.kv, self.depth, lower, upper) for _ in range(self.workers)]
        now, rest = buf, []
        if upper.elements:
            now = []
            for p in buf:
                a, b = p.split(upper)
                now += a
                rest += b
        if now:
            one = now[0].lo.elements[0] if all(p.single and p.lo == now[0].lo for p in now) else None
            batches = [Batch(*arrays, lower, upper) for arrays in form_parts([p.arrays for p in now],
                                                                             self.workers, run, time=one)]
            if one is not None:
                batches = [b.note_time_range(one, one) for b in batches]
        else:
            batches = [Batch.empty(self.kk, self.kv, self.depth, lower, upper) for _ in range(self.workers)]
        held = Antichain()
        for p in rest:
            held = held.meet(p.lo)
        self.buffer = rest
        self.buffered = sum(len(p) for p in rest)
        self.held = held
        return batches
