"""The batcher: shard updates by key, buffer them, and seal them at a frontier into one arranged batch
per shard. Engine inputs and the arrange operator both use it, so an input is an ordinary arrangement.

``push`` and ``seal`` are atomic: they compute everything first and change the buffers last, so a
failure (a fault in a kernel, a worker error) leaves the batcher exactly as it was and the same work can
be retried.
"""
from __future__ import annotations

import numpy as np

from . import faults
from .batch import Batch
from .kernels.exchange import partition
from .lattice import Antichain, antichain_of, in_advance_mask


def _c(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _serial(fn, items, rows=None):
    return [fn(i) for i in items]


class Batcher:
    """Buffers (keys, vals, times, diffs) updates per shard until a frontier passes their times."""

    def __init__(self, kk: int, kv: int, depth: int, workers: int):
        self.kk, self.kv, self.depth, self.workers = kk, kv, depth, workers
        self.buffers = [[] for _ in range(workers)]
        self.buffered = 0
        self.held = Antichain()  # minimal times of the buffered updates

    def push(self, parts, run=_serial):
        """Exchange updates to the shards owning their keys. ``parts``: (keys kk x n, vals kv x n,
        times n x d, diffs n) tuples."""
        parts = [p for p in parts if len(p[3])]
        if not parts:
            return
        faults.point("exchange")
        W = self.workers

        def split(p):
            if W == 1:
                return [(_c(p[0]), p[1], p[2], p[3])]
            return partition(_c(p[0]), _c(p[1]), _c(p[2]), _c(p[3]), W)
        total = sum(len(p[3]) for p in parts)
        pieces = run(split, parts, rows=total)
        for per in pieces:
            for s, piece in enumerate(per):
                if piece is not None:
                    self.buffers[s].append(piece)
        self.buffered += total
        if self.depth == 1:
            first = min(int(p[2][:, 0].min()) for p in parts)
            self.held = self.held.meet(Antichain([(first,)]))
        else:
            self.held = self.held.meet(antichain_of(np.concatenate([p[2] for p in parts], axis=0)))

    def seal(self, lower: Antichain, upper: Antichain, run=_serial) -> list:
        """One batch per shard of the buffered updates whose times are not in advance of ``upper``, each
        described by [lower, upper); later updates stay buffered."""
        faults.point("seal")
        results = run(lambda s: self._form(s, lower, upper), range(self.workers), rows=self.buffered)
        for s, (_, rest) in enumerate(results):
            self.buffers[s] = rest
        times = [p[2] for buf in self.buffers for p in buf]
        self.buffered = sum(len(t) for t in times)
        self.held = antichain_of(np.concatenate(times, axis=0)) if times else Antichain()
        return [b for b, _ in results]

    def _form(self, s: int, lower: Antichain, upper: Antichain):
        buf = self.buffers[s]
        if not buf:
            return Batch.empty(self.kk, self.kv, self.depth, lower, upper), []
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
        return Batch.form(keys, vals, times, diffs, lower, upper), rest
