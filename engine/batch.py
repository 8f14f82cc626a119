"""Arranged batches: immutable, consolidated updates in (key hash, key, val, time) order with a
per-key index, described by lower/upper/since frontiers (K-Pg section 4.1).

What the three frontiers mean (differential dataflow's ``trace/description.rs``):

- ``lower`` and ``upper``: the batch holds exactly the updates whose original times t are in advance of
  ``lower`` and not in advance of ``upper`` (t in [lower, upper)). Consecutive batches of a trace chain:
  each one's ``lower`` is the previous one's ``upper``, so together they cover [first lower, last upper)
  with nothing missing and nothing twice. An upper also says "no more updates before it will come".
- ``since``: the batch's times have been advanced by the compaction frontier ``since``: each stored time
  is rep_since(t) of an original time t (DESIGN.md section 2). The batch accumulates correctly only as of
  times in advance of ``since``; a fresh batch has the minimal ``since`` (its times are exact). Advancing
  may move a stored time past ``upper`` (rep is an upper bound of t), so "in [lower, upper)" holds for the
  original times, and for stored times only when the batch is fresh.

Layout: ``kh`` (int64[nk], 40-bit key hashes, sorted), ``keys`` (int64[kk, nk], distinct keys),
``koff`` (int64[nk+1], row offsets per key), ``vals`` (int64[kv, n]), ``times`` (int64[n, d]),
``diffs`` (int64[n]). A key-only batch has kv == 0.
"""
from __future__ import annotations

import numpy as np

from .kernels import multiplicity_overflow
from .kernels import sort as sortk
from .kernels.form import TINY_ROWS, form_buckets, form_tiny, trim
from .kernels.merge import merge_step, merge_whole
from .kernels.times import count_positive, fill_times, time_bounds
from .kernels.exchange import bucket_counts, exchange_rows
from .lattice import Antichain, rep


def _c(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def form_arrays(keys, vals, times, diffs):
    """Consolidate unarranged updates into batch arrays (kh, keys, koff, vals, times, diffs)."""
    return form_shards(keys, vals, times, diffs, 1)[0]


def _serial(fn, items, rows=None):
    return [fn(i) for i in items]


PARALLEL_ROWS = 100_000  # below this, one thread distributes the rows (a hand-off costs more)
SMALL_ROWS = 10_000  # below this, the shards are formed as one and split (the pool would run them inline)
_NO_TIME = np.zeros(0, np.int64)  # form_tiny's fill when the rows carry their own times


def form_shards(keys, vals, times, diffs, workers: int, run=_serial) -> list:
    """Exchange unarranged updates to the ``workers`` shards owning their keys and consolidate each
    shard's into batch arrays (kh, keys, koff, vals, times, diffs): ``form_parts`` of one part."""
    return form_parts([(keys, vals, times, diffs)], workers, run)


def _split(arrays, workers: int) -> list:
    """One formed batch's arrays as ``workers`` shards' (views; each shard's key offsets rebased). Shard
    of a key = (hash * workers) >> HASH_BITS (engine/kernels/exchange.py) grows with the hash, so each
    shard's keys are a run of the hash-ordered keys."""
    kh, keys, koff, vals, times, diffs = arrays
    one = (int(kh[0]) * workers) >> sortk.HASH_BITS if len(kh) else -1
    if one >= 0 and one == (int(kh[-1]) * workers) >> sortk.HASH_BITS:
        # every key in one shard (a few updates, mostly): that shard's batch is the whole, the others empty
        empty = _empty_arrays(keys.shape[0], vals.shape[0], times.shape[1])[:6]
        return [arrays if s == one else empty for s in range(workers)]
    firsts = [-((-s << sortk.HASH_BITS) // workers) for s in range(1, workers)]  # ceil: a shard's least hash
    cuts = [0, *np.searchsorted(kh, firsts).tolist(), len(kh)]
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        r0, r1 = int(koff[a]), int(koff[b])
        out.append((kh[a:b], _c(keys[:, a:b]), koff[a:b + 1] - r0, _c(vals[:, r0:r1]), times[r0:r1],
                    diffs[r0:r1]))  # (column ranges of matrices with several rows are copied: kernels
    return out                      # read C-ordered arrays)


def _checked(formed):
    nk, nr = formed
    if nk < 0:
        raise multiplicity_overflow()
    return nk, nr


def form_parts(parts, workers: int, run=_serial, time: tuple | None = None) -> list:
    """``form_shards`` of the updates of several parts ((keys kk x n, vals kv x n, times n x d, diffs
    n) tuples, read only) taken together, without concatenating them first: hash and one MSD radix pass
    from every part into shards and cache-sized buckets by hash (engine/kernels/exchange.py), then each
    shard's buckets ordered and consolidated in place (engine/kernels/form.py), the shards in parallel
    through ``run``. Each large array is allocated once here (fresh memory costs page faults) and becomes
    part of the batches, the hashes' array their key offsets; the shards' batches are views of the same
    arrays. ``time``: every update's one time, when the caller knows it (a round's output, a load): the
    kernels then neither move nor compare times, and each shard's item fills its batch's times in."""
    if time is not None:
        parts = [(p[0], p[1], np.empty((p[3].shape[0], 0), np.int64), p[3]) for p in parts]
    parts = [tuple(_c(a) for a in p) for p in parts]
    keys0, vals0, times0, _ = parts[0]
    kk, kv, d = keys0.shape[0], vals0.shape[0], times0.shape[1]
    sizes = [p[3].shape[0] for p in parts]
    n = sum(sizes)
    bits = sortk.bucket_bits(n // workers)
    one = (workers == 1 or n < SMALL_ROWS) and bits == 0  # one bucket: read the updates where they are
    if len(parts) > 1 and one:  # small: one copy costs less than many kernel calls
        parts = [tuple(np.concatenate([p[i] for p in parts], axis=0 if i >= 2 else 1) for i in range(4))]
        sizes = [n]
    if one and n <= TINY_ROWS:
        keys, vals, times, diffs = parts[0]
        *whole, status = form_tiny(sortk.key_hashes(keys, np.empty(n, np.int64)), keys, vals, times, diffs,
                                   _NO_TIME if time is None else np.array(time, np.int64))
        if status < 0:
            raise multiplicity_overflow()
        return [tuple(whole)] if workers == 1 else _split(tuple(whole), workers)
    kh = np.empty(n + workers, np.int64)
    rh, rk, rv = np.empty(n, np.int64), np.empty(kk * n, np.int64), np.empty(kv * n, np.int64)
    rt, rd = np.empty((n, d), np.int64), np.empty(n, np.int64)
    if one:
        keys, vals, times, diffs = parts[0]
        sortk.key_hashes(keys, kh)
        rk, rv = rk.reshape(kk, n), rv.reshape(kv, n)
        nk, nr = _checked(form_buckets(np.array([0, n], np.int64), kh, keys, vals, times, diffs, rh, rk, rv, rt,
                                       rd, kh))
        whole = _with_time(trim(rh, rk, kh, rv, rt, rd, nk, nr), time)
        return [whole] if workers == 1 else _split(whole, workers)
    # the distribution runs in parallel over row ranges of the parts: counts per range, then each range
    # scatters from its own starting places (after the earlier ranges' rows: stable)
    per = 1 << bits
    nb = workers << bits
    ranges = []  # (part, first row, end row)
    for i, m in enumerate(sizes):
        pieces = workers if m >= PARALLEL_ROWS else 1
        ranges += [(i, m * r // pieces, m * (r + 1) // pieces) for r in range(pieces) if m or not i]
    at = 0
    hashes = []  # each part's hashes: its stretch of kh
    for m in sizes:
        hashes.append(kh[at:at + m])
        at += m

    def count(r):  # hash a range of rows, then count them per bucket
        i, lo, hi = r
        sortk.key_hashes(parts[i][0], hashes[i], lo, hi)
        return bucket_counts(hashes[i], lo, hi, nb)
    counts = np.stack(run(count, ranges, rows=n))
    cnt = np.zeros(nb + 1, np.int64)
    np.cumsum(counts.sum(axis=0), out=cnt[1:])
    starts = cnt[:-1] + np.cumsum(counts, axis=0) - counts

    def scatter(j):
        i, lo, hi = ranges[j]
        exchange_rows(hashes[i], *parts[i], lo, hi, workers, bits, cnt, starts[j], rh, rk, rv, rt, rd)
    run(scatter, range(len(ranges)), rows=n)

    def shard(s):
        a, b = int(cnt[s * per]), int(cnt[(s + 1) * per])
        m = b - a
        arrays = (rh[a:b], rk[kk * a:kk * b].reshape(kk, m), rv[kv * a:kv * b].reshape(kv, m), rt[a:b], rd[a:b])
        koff = kh[a + s:b + s + 1]  # disjoint for each shard: kh has n + workers entries
        nk, nr = _checked(form_buckets(cnt[s * per:(s + 1) * per + 1] - a, *arrays, *arrays, koff))
        return _with_time(trim(arrays[0], arrays[1], koff, *arrays[2:], nk, nr), time)
    return run(shard, range(workers), rows=n)


def _with_time(arrays, time: tuple | None):
    """Formed arrays with their times written in: every row at ``time`` (None: they have their own)."""
    if time is None:
        return arrays
    kh, keys, koff, vals, _, diffs = arrays
    times = np.empty((diffs.shape[0], len(time)), np.int64)
    fill_times(times, np.array(time, np.int64))
    return kh, keys, koff, vals, times, diffs


class Batch:
    """An immutable arranged batch (see the module docstring for its arrays)."""

    __slots__ = ("kh", "keys", "koff", "vals", "times", "diffs", "lower", "upper", "since", "n", "_balance", "_range",
                 "_pairs")

    def __init__(self, kh, keys, koff, vals, times, diffs, lower: Antichain, upper: Antichain,
                 since: Antichain | None = None):
        self.kh = kh
        self.keys = keys
        self.koff = koff
        self.vals = vals
        self.times = times
        self.diffs = diffs
        self.n = diffs.shape[0]
        self.lower = lower
        self.upper = upper
        # times of a fresh batch are exact: it is compacted to nothing beyond the minimal time
        self.since = since if since is not None else Antichain([(0,) * times.shape[1]])
        self._balance = None
        self._range = None
        self._pairs = None

    @classmethod
    def form(cls, keys, vals, times, diffs, lower: Antichain, upper: Antichain) -> "Batch":
        """Arrange unarranged updates (keys ``kk x n``, vals ``kv x n``) whose times lie in [lower, upper)."""
        return cls(*form_arrays(keys, vals, times, diffs), lower, upper)

    @classmethod
    def empty(cls, kk: int, kv: int, d: int, lower: Antichain, upper: Antichain,
              since: Antichain | None = None) -> "Batch":
        """A batch with no updates: its (zero-length) arrays and default ``since`` are shared by every
        empty batch of the same shape, since loops mint one per shard and round. (They stay writeable:
        kernels are compiled for writeable arrays, and a batch's arrays are never written anyway.)"""
        z, keys, koff, vals, times, _, least = _empty_arrays(kk, kv, d)
        return cls(z, keys, koff, vals, times, z, lower, upper, since if since is not None else least)

    def relabel(self, lower: Antichain, upper: Antichain) -> "Batch":
        """The same updates described by other (wider) frontiers."""
        b = Batch(self.kh, self.keys, self.koff, self.vals, self.times, self.diffs, lower, upper, self.since)
        b._balance, b._range, b._pairs = self._balance, self._range, self._pairs
        return b

    @property
    def arrays(self):
        return self.kh, self.keys, self.koff, self.vals, self.times, self.diffs

    def __len__(self):
        return self.n

    @property
    def nkeys(self) -> int:
        return self.kh.shape[0]

    @property
    def kk(self) -> int:
        return self.keys.shape[0]

    @property
    def kv(self) -> int:
        return self.vals.shape[0]

    @property
    def depth(self) -> int:
        return self.times.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    @property
    def balance(self) -> int:
        """Records with a positive diff minus records with a negative one (for the spine's estimate of
        its live records: each retraction of a set's row cancels one insertion)."""
        if self._balance is None:
            self._balance = 2 * int(count_positive(_c(self.diffs))) - len(self)
        return self._balance

    @property
    def pairs(self) -> int:
        """Distinct (key, value) pairs: the records left of the batch's rows if all their times were one
        (a lower bound where every diff is positive, as none can cancel). Counted once, on first use."""
        if self._pairs is None:
            new = np.zeros(self.n, bool)
            new[self.koff[:-1][np.diff(self.koff) > 0]] = True  # (a key's first row; a value's first row below)
            if self.n > 1:
                new[1:] |= (self.vals[:, 1:] != self.vals[:, :-1]).any(axis=0)
            self._pairs = int(np.count_nonzero(new))
        return self._pairs

    @property
    def time_range(self) -> tuple:
        """(the least, the greatest) stored time, coordinate by coordinate."""
        if self._range is None:
            lo, hi = time_bounds(self.times) if len(self) else (np.zeros(self.depth, np.int64),) * 2
            self._range = (tuple(lo.tolist()), tuple(hi.tolist()))
        return self._range

    def note_time_range(self, lo: tuple, hi: tuple) -> "Batch":
        """Record the least and greatest time where its maker knows them (one time for every row; a merge
        that moved and dropped none), sparing ``time_range`` a pass over the times."""
        if len(self):
            self._range = (tuple(lo), tuple(hi))
        return self

    def collapses(self, frontier: Antichain) -> bool:
        """Whether advancing its times to ``frontier`` could make two of them equal: its ``since`` lags the
        frontier and its times differ in a coordinate where the least of them is behind it."""
        since = self.since
        if self.n < 2 or not frontier.elements or (since.elements and frontier.less_equal(since)):
            return False  # (the frontier has not passed its since: compacting cannot change its times)
        lo, hi = self.time_range
        return any(lo[c] < hi[c] and lo[c] < f[c] for f in frontier.elements for c in range(len(lo)))

    def key_rows(self) -> np.ndarray:
        """The key columns repeated once per row (``kk x n``; the batch's own, read-only, keys when every
        key has one row)."""
        if self.kh.shape[0] == self.n:
            return self.keys
        return np.repeat(self.keys, np.diff(self.koff), axis=1)

    def __repr__(self):
        return (f"Batch({self.nkeys} keys, {len(self)} updates, lower={self.lower}, upper={self.upper}, "
                f"since={self.since})")


_EMPTY: dict = {}  # (kk, kv, d) -> the arrays and least since shared by empty batches of that shape


def _empty_arrays(kk: int, kv: int, d: int) -> tuple:
    """The arrays of an empty batch of this shape (kh, keys, koff, vals, times, diffs) and its least
    since, made once per shape and shared."""
    shape = _EMPTY.get((kk, kv, d))
    if shape is None:
        z = np.zeros(0, np.int64)
        shape = _EMPTY[(kk, kv, d)] = (z, np.zeros((kk, 0), np.int64), np.zeros(1, np.int64),
                                       np.zeros((kv, 0), np.int64), np.zeros((0, d), np.int64), z,
                                       Antichain([(0,) * d]))
    return shape


def merge_arrays(a, b, frontier: np.ndarray | None = None):
    """Two sets of batch arrays (a older than b) merged completely by one kernel call, times advanced to
    ``frontier`` (an m x d matrix; None: kept): the merged arrays and the number of rows with a positive
    diff."""
    if frontier is None:
        frontier = np.zeros((0, a[4].shape[1]), np.int64)
    *arrays, positive = merge_whole(*a, *b, _c(frontier))
    if positive < 0:
        raise multiplicity_overflow()
    return tuple(arrays), int(positive)


def advancing(since: Antichain, older: Batch, newer: Batch) -> np.ndarray | None:
    """The matrix of ``since`` for a merge of the two batches to advance their times to, or None where it
    moves none of them. Advancing is coordinate-wise (t_c -> the least over f of max(t_c, f_c)), so a
    time moves only where one of its coordinates lies below that coordinate of every element: inside a
    loop the readers' frontier {(e, i), (e + 1, 0)} moves no time of epoch e, and the merge then skips
    advancing every row."""
    if not since.elements:
        return None
    least = [min(f[c] for f in since.elements) for c in range(older.depth)]
    for b in (older, newer):
        if len(b) and any(lo < m for lo, m in zip(b.time_range[0], least)):
            return since.matrix(older.depth)
    return None


def merged_range(out: Batch, older: Batch, newer: Batch, advanced: bool) -> Batch:
    """``out``, the merge of ``older`` and ``newer``, with its time range noted where the merge kept every
    row and moved no time: then it is the union of theirs (known: ``advancing`` read them)."""
    if not advanced and len(out) == len(older) + len(newer) and len(out):
        ranges = [b.time_range for b in (older, newer) if len(b)]
        out.note_time_range(tuple(map(min, zip(*(r[0] for r in ranges)))),
                            tuple(map(max, zip(*(r[1] for r in ranges)))))
    return out


def merged(older: Batch, newer: Batch, since: Antichain) -> Batch:
    """Two adjacent batches merged completely, their times advanced to ``since``: a small merge, never one
    in progress."""
    f = advancing(since, older, newer)
    arrays, positive = merge_arrays(older.arrays, newer.arrays, f)
    out = Batch(*arrays, older.lower, newer.upper, since)
    out._balance = 2 * positive - out.n
    return merged_range(out, older, newer, f is not None)


def may_meet(batches, frontier: Antichain | None) -> bool:
    """Whether two updates of one (key, value) in these batches of a trace may have one time once their
    times are advanced to ``frontier``: a batch whose own times collapse, or two batches whose advanced
    time ranges (coordinate by coordinate) overlap. (Each batch is consolidated, so that is the only way;
    compaction can advance a batch's times past its upper, onto the next one's.)"""
    if frontier is None:
        return False
    if len(batches) == 1:
        return batches[0].collapses(frontier)
    boxes = []
    for b in batches:
        if b.collapses(frontier):
            return True
        lo, hi = b.time_range
        lo, hi = rep(lo, frontier), rep(hi, frontier)  # (rep is monotone: these bound the advanced times)
        for blo, bhi in boxes:
            if all(x <= bh and bl <= y for x, y, bl, bh in zip(lo, hi, blo, bhi)):
                return True
        boxes.append((lo, hi))
    return False


class Merger:
    """A merge of two batches' arrays in progress: output buffers plus the kernel's resumable state."""

    __slots__ = ("a", "b", "frontier", "out", "state", "result")

    def __init__(self, a, b, frontier: np.ndarray | None = None):
        self.a = a
        self.b = b
        d = a[4].shape[1]
        self.frontier = np.zeros((0, d), np.int64) if frontier is None else _c(frontier)
        nk = a[0].shape[0] + b[0].shape[0]
        n = a[5].shape[0] + b[5].shape[0]
        kk = a[1].shape[0]
        kv = a[3].shape[0]
        self.out = (np.empty(nk, np.int64), np.empty((kk, nk), np.int64), np.empty(nk + 1, np.int64),
                    np.empty((kv, n), np.int64), np.empty((n, d), np.int64), np.empty(n, np.int64))
        self.state = np.zeros(5, np.int64)
        self.result = None

    def work(self, fuel: int | None) -> bool:
        """Spend up to ``fuel`` rows of merging (None: finish). Returns True once complete."""
        if self.result is not None:
            return True
        f = np.int64(1 << 62) if fuel is None else np.int64(max(fuel, 1))
        done = merge_step(*self.a, *self.b, *self.out, self.state, self.frontier, f)
        if self.state[4]:
            raise multiplicity_overflow()
        if done:
            nk, nr = int(self.state[2]), int(self.state[3])
            okh, okeys, koff, ovals, otimes, odiffs = self.out
            self.result = trim(okh, okeys, koff, ovals, otimes, odiffs, nk, nr)
            self.a = self.b = self.out = None
        return done

    @property
    def nbytes(self) -> int:
        if self.out is None:
            return 0
        return sum(x.nbytes for x in self.out)

    @property
    def remaining(self) -> int:
        """Input rows not merged yet (the merge's shortfall; 0 once complete)."""
        if self.result is not None:
            return 0
        ia, ib = int(self.state[0]), int(self.state[1])
        return (len(self.a[5]) - int(self.a[2][ia])) + (len(self.b[5]) - int(self.b[2][ib]))
