"""The batcher: buffer updates, and seal them at a frontier into one arranged batch per worker shard
(each key's updates in the shard owning it). Engine inputs and the arrange operator both use it, so an
input is an ordinary arrangement.

Updates are buffered as they come and exchanged to their shards when sealed: the exchange and the
formation's own distribution of rows by hash are one pass (batch.form_shards), so rows are copied once.

``push`` and ``seal`` are atomic: they compute everything first and change the buffers last, so a
failure (a fault in a kernel, a worker error) leaves the batcher exactly as it was and the same work can
be retried.
"""
from __future__ import annotations

import numpy as np

from . import faults
from .batch import Batch, form_shards
from .lattice import Antichain, antichain_of, in_advance_mask


def _c(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _serial(fn, items, rows=None):
    return [fn(i) for i in items]


class Batcher:
    """Buffers (keys, vals, times, diffs) updates until a frontier passes their times."""

    def __init__(self, kk: int, kv: int, depth: int, workers: int):
        self.kk, self.kv, self.depth, self.workers = kk, kv, depth, workers
        self.buffer: list = []
        self.buffered = 0
        self.held = Antichain()  # minimal times of the buffered updates

    def push(self, parts, run=_serial):
        """Buffer updates for the shards owning their keys. ``parts``: (keys kk x n, vals kv x n,
        times n x d, diffs n) tuples (read only, never written)."""
        parts = [p for p in parts if len(p[3])]
        if not parts:
            return
        faults.point("exchange")
        pieces = [(_c(p[0]), _c(p[1]), _c(p[2]), _c(p[3])) for p in parts]
        if self.depth == 1:
            first = min(int(p[2][:, 0].min()) for p in parts)
            held = self.held.meet(Antichain([(first,)]))
        else:
            held = self.held.meet(antichain_of(np.concatenate([p[2] for p in parts], axis=0)))
        self.buffer.extend(pieces)
        self.buffered += sum(len(p[3]) for p in pieces)
        self.held = held

    def seal(self, lower: Antichain, upper: Antichain, run=_serial) -> list:
        """One batch per shard of the buffered updates whose times are not in advance of ``upper``, each
        described by [lower, upper); later updates stay buffered."""
        faults.point("seal")
        buf = self.buffer
        if not buf:
            return [Batch.empty(self.kk, self.kv, self.depth, lower, upper) for _ in range(self.workers)]
        if len(buf) == 1:
            keys, vals, times, diffs = buf[0]
        else:
            keys = np.concatenate([p[0] for p in buf], axis=1)
            vals = np.concatenate([p[1] for p in buf], axis=1)
            times = np.concatenate([p[2] for p in buf], axis=0)
            diffs = np.concatenate([p[3] for p in buf])
        rest = []
        if upper.elements:
            later = in_advance_mask(times, upper)
            if later.any():
                keep = ~later
                rest = [(keys[:, later], vals[:, later], times[later], diffs[later])]
                keys, vals, times, diffs = keys[:, keep], vals[:, keep], times[keep], diffs[keep]
        if len(diffs):
            batches = [Batch(*arrays, lower, upper)
                       for arrays in form_shards(keys, vals, times, diffs, self.workers, run)]
        else:
            batches = [Batch.empty(self.kk, self.kv, self.depth, lower, upper) for _ in range(self.workers)]
        self.buffer = rest
        self.buffered = sum(len(p[3]) for p in rest)
        self.held = antichain_of(rest[0][2]) if rest else Antichain()
        return batches
