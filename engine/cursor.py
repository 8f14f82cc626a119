"""Cursors: reading the union of some batches (K-Pg section 4.3). A cursor seeks a sorted set of keys
across all batches with galloping searches, so the work is proportional to the keys sought, not to the
size of the trace; ``accumulate_batches`` folds batches into a collection as of a time."""
from __future__ import annotations

import numpy as np

from .batch import form_arrays, may_meet
from .errors import ArgumentTypeError, UsageError
from .kernels import multiplicity_overflow
from .kernels.merge import normalize_groups
from .kernels import sort as sortk
from .kernels.seek import distinct_keys, gather_rows, index_packed, merge_key_lists, seek_rows, unique_sorted_keys
from .kernels.sort import MAX_PACKED, arrangement_order
from .scope import IDENTITY, TimeLens


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


DEDUPE_ROWS = 4096  # from this many key columns on, key_index finds the distinct ones by hashing first


def key_index(keys: np.ndarray):
    """(hashes, keys, inverse): the distinct key columns in arrangement order, for seeking, and the index
    among them of each of the given keys (which may repeat, in any order)."""
    keys = np.require(keys, np.int64, ["C", "W"])
    n = keys.shape[1]
    if not n:
        return np.zeros(0, np.int64), keys, np.zeros(0, np.int64)
    if n >= DEDUPE_ROWS:  # first the distinct keys by hashing, then a sort of those alone
        firsts, inv, d = distinct_keys(keys, n // 4)
        if d >= 0:
            sub = np.ascontiguousarray(keys[:, firsts])
            perm, skh = arrangement_order(sub, np.zeros((0, d), np.int64), np.zeros((d, 0), np.int64))
            rank = np.empty(d, np.int64)
            rank[perm] = np.arange(d)
            return skh, np.ascontiguousarray(sub[:, perm]), rank[inv]
    if n < MAX_PACKED:
        packed = sortk.packed_hashes(keys)  # (looked up here: tests substitute colliding hashes)
        packed.sort()  # (NumPy's SIMD sort, as arrangement_order)
        return index_packed(packed, keys)
    perm, skh = arrangement_order(keys, np.zeros((0, n), np.int64), np.zeros((n, 0), np.int64))
    k = np.ascontiguousarray(keys[:, perm])
    keep = unique_sorted_keys(skh, k)
    inv = np.empty(n, np.int64)
    inv[perm] = np.cumsum(keep) - 1
    return skh[keep], np.ascontiguousarray(k[:, keep]), inv


def probe_keys(keys: np.ndarray):
    """(hashes, keys) sorted in arrangement order and distinct, for seeking."""
    keys = np.require(keys, np.int64, ["C", "W"])  # writeable and contiguous: one kernel signature
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

    def __init__(self, batches, kv: int, depth: int, lens: TimeLens = IDENTITY, exact: bool = False,
                 kk: int | None = None):
        self.batches = [b for b in batches if len(b)]
        self.kk = kk if kk is not None or not self.batches else self.batches[0].kk  # (None: not known)
        self.kv = kv
        self.depth = depth
        self.lens = lens
        # histories consolidated where advancing times through the lens may make updates meet (``may_meet``):
        # updates from before an import's start that cancel there, such as a row inserted and removed, are
        # left out rather than read as +1 and -1
        self.exact = exact

    def seek(self, pkh: np.ndarray, pkeys: np.ndarray) -> Histories:
        m = pkh.shape[0]
        batches = self.batches
        if len(batches) == 1 and pkh is batches[0].kh and pkeys is batches[0].keys:
            # the probe is every key of the one batch (``keys()`` of a reduce's delta, or of a first
            # history that is the delta): its histories are the batch's own arrays, nothing to gather
            b = batches[0]
            if self.lens.identity:
                return Histories(pkh, pkeys, b.koff, b.vals, b.times, b.diffs)
            return self._seen(Histories(pkh, pkeys, b.koff, b.vals, b.times, b.diffs), batches, owned=False)
        found = np.empty((len(batches), m), np.int64)  # per batch: the key index of each probe, or -1
        counts = np.zeros(m, np.int64)
        hit = [i for i, b in enumerate(batches) if seek_rows(b.kh, b.keys, b.koff, pkh, pkeys, found[i], counts)]
        off = np.zeros(m + 1, np.int64)
        np.add.accumulate(counts, out=off[1:])  # (not np.cumsum: its Python dispatch costs more on one key)
        total = int(off[-1])
        vals = np.empty((self.kv, total), np.int64)
        times = np.empty((total, self.depth), np.int64)
        diffs = np.empty(total, np.int64)
        if total:
            probe = np.empty(total, np.int64)
            cursor = off[:-1].copy()
            for i in hit:  # (a few small probes mostly find rows in few of the batches)
                b = batches[i]
                gather_rows(found[i], b.koff, b.vals, b.times, b.diffs, cursor, vals, times, diffs, probe)
        h = Histories(pkh, pkeys, off, vals, times, diffs)
        return h if self.lens.identity else self._seen(h, [batches[i] for i in hit])

    def _seen(self, h: Histories, read, owned: bool = True) -> Histories:
        """Histories in the reader's times: the lens applied and, if exact, the rows consolidated (in place
        where ``owned``: this seek's own arrays, not a batch's) where advancing the times of the batches
        ``read`` may have made two updates meet."""
        lens = self.lens.past(read)
        times = lens.apply(h.times)
        if not (self.exact and may_meet(read, lens.frontier)):
            return Histories(h.kh, h.keys, h.off, h.vals, times, h.diffs)
        off, vals, diffs = (h.off, h.vals, h.diffs) if owned else (h.off.copy(), h.vals.copy(), h.diffs.copy())
        times = np.ascontiguousarray(times)
        n = normalize_groups(off, vals, times, diffs)
        if n < 0:
            raise multiplicity_overflow()
        return Histories(h.kh, h.keys, off, vals[:, :n], times[:n], diffs[:n])

    def seek_keys(self, keys) -> Histories:
        """Histories of arbitrary keys (hashed, sorted and deduplicated first): ``kk x n`` key columns, or
        for a one-column key a 1-D array of n keys."""
        arr = np.asarray(keys)
        if arr.size and arr.dtype.kind not in "iub":
            raise ArgumentTypeError(f"seek_keys takes keys in the engine's int64 encoding, got {arr.dtype} "
                                    f"values; a str or float key column is stored encoded (str interned, "
                                    f"floats by their bits), and cursors read that encoding: read such an "
                                    f"arrangement with eng.trace(name).accumulate(at), which gives str and "
                                    f"float columns decoded")
        if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
            raise ArgumentTypeError(f"seek_keys: key {int(arr.max())} is beyond int64, which no int64 key "
                                    f"column holds (it would wrap around to another key)")
        keys = arr.astype(np.int64, copy=False)
        kk = self.kk
        if keys.ndim == 1 and kk in (None, 1):
            keys = keys.reshape(1, -1)
        if keys.ndim != 2 or (kk is not None and keys.shape[0] != kk):
            raise UsageError(f"seek_keys takes the key columns as a {kk or 'kk'} x n array (one row per key "
                             f"column{', or a 1-D array for a one-column key' if kk in (None, 1) else ''}); got "
                             f"shape {keys.shape}")
        return self.seek(*probe_keys(keys))

    def keys(self):
        """All distinct keys present in these batches (hashes, keys), in arrangement order."""
        kk = self.batches[0].kk if self.batches else 0
        kh, keys = np.zeros(0, np.int64), np.zeros((kk, 0), np.int64)
        for b in self.batches:
            kh, keys = merge_key_lists(kh, keys, b.kh, b.keys) if len(kh) else (b.kh, b.keys)
        return kh, keys
