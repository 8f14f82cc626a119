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
        now, rest = buf, []
        if upper.elements:
            now = []
            for p in buf:
                later = in_advance_mask(p[2], upper)
                if not later.any():
                    now.append(p)
                    continue
                keep = ~later
                rest.append((p[0][:, later], p[1][:, later], p[2][later], p[3][later]))
                if keep.any():
                    now.append((p[0][:, keep], p[1][:, keep], p[2][keep], p[3][keep]))
        if now:
            batches = [Batch(*arrays, lower, upper) for arrays in form_parts(now, self.workers, run)]
        else:
            batches = [Batch.empty(self.kk, self.kv, self.depth, lower, upper) for _ in range(self.workers)]
        self.buffer = rest
        self.buffered = sum(len(p[3]) for p in rest)
        self.held = antichain_of(np.concatenate([p[2] for p in rest], axis=0)) if rest else Antichain()
        return batches
