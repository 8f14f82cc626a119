"""The join operator (K-Pg section 5.3.1): bilinear over two arrangements.

New batches of one input are joined with the other input's trace as of the batches already
acknowledged from it (each handle's physical frontier keeps a batch boundary there), so that
dA x B_old + A_new x dB counts every pair exactly once. The side with fewer keys drives the seeks,
so the work follows the smaller side even when the other is a freshly imported 10M-record trace.
Output is produced in bounded chunks ("futures"): the operator holds a capability for the rest and
resumes on the next scheduling pass, after downstream operators consumed the previous chunk.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..columns import UpdateBatch
from ..kernels import MAX_MULT
from ..dataflow import Operator, Updates
from ..kernels.join import join_product, product_total
from ..kernels.rows import is_identity
from ..lattice import Antichain
from .basic import fuse_projections
from .reader import ArrangedInput

CHUNK = 1 << 20  # output rows per shard per step
EXACT_PAIRS = 1 << 20  # pairs of one key summed exactly where a product passes the bound (else it fails)
_NONE = Antichain()  # no capability (shared: antichains are never changed once built)


class _Product:
    """The remaining output of one shard's dA x B (or A x dB) join."""

    __slots__ = ("pkeys", "ha", "hb", "state", "remaining")

    def __init__(self, pkeys, ha, hb):
        self.pkeys, self.ha, self.hb = pkeys, ha, hb
        self.state = np.zeros(4, np.int64)
        self.remaining = int(product_total(ha.off, hb.off))

    @property
    def done(self) -> bool:
        return self.remaining <= 0

    def next_chunk(self, limit: int, cols=None):
        """Up to ``limit`` more output rows: the key columns, then A's values, then B's (``cols``: only
        those of these columns, in that order)."""
        ha, hb = self.ha, self.hb
        n = min(limit, self.remaining)
        probe, arow, brow, times, diffs = join_product(ha.off, ha.times, ha.diffs, hb.off, hb.times, hb.diffs,
                                                       self.state, n)
        if self.state[3]:  # a product past the bound: the rest of that probe key's pairs summed exactly
            made = len(diffs)
            rest, used = self._exact_rest()
            probe, arow, brow, times, diffs = (np.concatenate([x, y]) for x, y in
                                               zip((probe, arow, brow, times, diffs), rest))
            self.remaining -= made + used
            n = len(diffs)
        else:
            self.remaining -= n
        if n == 0:
            return None
        sources = ((self.pkeys, probe), (ha.vals, arow), (hb.vals, brow))
        if cols is None:
            return UpdateBatch(np.concatenate([m[:, rows] for m, rows in sources], axis=0), times, diffs)
        data = np.empty((len(cols), n), np.int64)
        for i, (side, c) in enumerate(cols):
            m, rows = sources[side]
            np.take(m[c], rows, out=data[i], mode="clip")  # (rows are in range: "raise" buffers out)
        return UpdateBatch(data, times, diffs)


    def _exact_rest(self):
        """The rest of the pairs of the probe key where a product of two diffs passed 2**62, from the pair
        the kernel stopped at: their products summed exactly (Python ints) per (A's row values, B's, lub
        time), so that updates that cancel over time (a row inserted and retracted, both with large
        multiplicities) cancel here as they would have in a trace compacted before the join read it.
        Returns the rows (probe, a row, b row, times, diffs) and the number of pairs read; an overflow
        only if a sum itself reaches the bound. (Per-pair Python: reached only by multiplicities of 2**31
        and more.)"""
        ha, hb = self.ha, self.hb
        p, i, j = (int(x) for x in self.state[:3])
        a1, b0, b1 = int(ha.off[p + 1]), int(hb.off[p]), int(hb.off[p + 1])
        if (a1 - i) * (b1 - b0) > EXACT_PAIRS:
            raise _product_overflow()
        groups = {}
        used = 0
        for ii in range(i, a1):
            for jj in range(j if ii == i else b0, b1):
                used += 1
                t = np.maximum(ha.times[ii], hb.times[jj])
                key = (ha.vals[:, ii].tobytes(), hb.vals[:, jj].tobytes(), t.tobytes())
                g = groups.setdefault(key, [ii, jj, t, 0])
                g[3] += int(ha.diffs[ii]) * int(hb.diffs[jj])
        rows = [g for g in groups.values() if g[3]]
        if any(abs(g[3]) >= MAX_MULT for g in rows):
            raise _product_overflow()
        self.state[:] = (p + 1, 0, 0, 0)
        d = ha.times.shape[1]
        return (np.full(len(rows), p, np.int64), np.array([g[0] for g in rows], np.int64),
                np.array([g[1] for g in rows], np.int64),
                np.array([g[2] for g in rows], np.int64).reshape(len(rows), d),
                np.array([g[3] for g in rows], np.int64)), used


def _product_overflow() -> OverflowError:
    return OverflowError("a join output's multiplicity reaches 2**62 or more (the product of two rows' diffs, "
                         "summed over the pairs that meet at one time); int64 multiplicities would wrap")


class JoinOp(Operator):
    kind = "join"
    family = "join"
    lazy_rounds = True  # a move of the frontier alone only lets its inputs compact

    def __init__(self, scope, left, right, workers, site=None):
        super().__init__(scope, [left, right], site)
        self.workers = workers
        self.sides = [None, None]  # ArrangedInput per side, from install until released
        self.futures = deque()     # (lower, [product per shard])
        self.out_cols = None       # the output columns it makes, as (source, row) pairs (None: all)

    def install(self, rt):
        self.sides = [ArrangedInput(up, self.label()) for up in self.inputs]

    def finish_install(self):
        """Columns that no projection downstream keeps are never gathered."""
        cols = fuse_projections(self)
        kk, ka, kb = self.sides[0].kk, self.sides[0].kv, self.sides[1].kv
        if cols is not None and not (len(cols) == kk + ka + kb and is_identity(cols)):  # (all: concatenated)
            self.out_cols = [(0, c) if c < kk else (1, c - kk) if c < kk + ka else (2, c - kk - ka)
                             for c in cols.tolist()]

    def release(self):
        for side in self.sides:
            if side is not None:
                side.release()

    def capabilities(self):
        out = _NONE
        for lower, _ in self.futures:
            out = out.meet(lower)
        return out

    def has_work(self):
        return bool(self.futures) or super().has_work()

    def due(self) -> bool:
        return False

    def follow_epoch(self):
        self._compact()

    def step(self, rt):
        for side in (0, 1):
            msgs = self.take(side)
            if not msgs:
                continue
            W = self.workers
            delta = [tuple(b for m in msgs for b in m.shards[s] if len(b)) for s in range(W)]
            lower = msgs[0].lower
            for m in msgs[1:]:
                lower = lower.meet(m.lower)
            other = self.sides[1 - side]
            if other.open:
                olds = [other.history(s) for s in range(W)]

                def prep(s):
                    sides = (delta[s], olds[s]) if side == 0 else (olds[s], delta[s])
                    return self._prepare(*sides)
                products = rt.run(prep, range(W), rows=sum(len(b) for bs in delta for b in bs))
                if any(p is not None for p in products):
                    self.futures.append((lower, products))
            self.sides[side].acknowledge(msgs)
        self._produce(rt)
        self._compact()

    def _prepare(self, a_batches, b_batches):
        a = [b for b in a_batches if len(b)]
        b = [x for x in b_batches if len(x)]
        if not a or not b:
            return None
        # exact: each output pair is of rows present at some time this dataflow reads (none of an
        # imported history's updates that cancel at its start)
        ca = self.sides[0].cursor(a, exact=True)
        cb = self.sides[1].cursor(b, exact=True)
        na = sum(x.nkeys for x in a)
        nb = sum(x.nkeys for x in b)
        pkh, pkeys = (ca if na <= nb else cb).keys()
        ha = ca.seek(pkh, pkeys)
        hb = cb.seek(pkh, pkeys)
        if not len(ha) or not len(hb):
            return None
        return _Product(pkeys, ha, hb)

    def _produce(self, rt):
        if not self.futures:
            return
        lower, products = self.futures[0]
        live = [i for i, p in enumerate(products) if p is not None and not p.done]
        chunks = rt.run(lambda i: products[i].next_chunk(CHUNK, self.out_cols), live,
                        rows=sum(min(products[i].remaining, CHUNK) for i in live))
        shards = [None] * self.workers
        for i, c in zip(live, chunks):
            shards[i] = c
        if any(c is not None for c in shards):
            self.send(Updates(shards, lower))
        if all(p is None or p.done for p in products):
            self.futures.popleft()

    def _compact(self):
        for side in (0, 1):
            mine = self.sides[side]
            if not mine.open:
                continue
            other_frontier = self.port_frontiers[1 - side]
            if not other_frontier.elements:
                # the other input is closed: this trace will never be read again
                mine.release()
                continue
            mine.compact(other_frontier)
