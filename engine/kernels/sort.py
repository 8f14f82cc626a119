"""Hashing and sorting of updates into arrangement order.

Arrangement order is (key hash, key, val, time). The key hash is 40 bits of a 64-bit mix of the key
columns, so that (hash << 24 | position) packs into one uint64 that NumPy's SIMD sort orders directly
(numba's sorts are ~10x slower). Rows whose 40-bit hashes collide, which are mostly rows of one key, are
then put in (key, val, time) order by a comparison sort over just that run.
"""
import numpy as np

from . import helper, kernel
from .rows import cmp_update

HASH_BITS = 40
POS_BITS = 24
POS_MASK = (1 << POS_BITS) - 1
MAX_PACKED = 1 << POS_BITS


@helper
def mix64(x):
    """murmur3's 64-bit finaliser: a bijection, so distinct single-column keys never collide in 64 bits."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@helper
def key_hash_at(keys, i):
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(keys.shape[0]):
        h = mix64(h ^ np.uint64(keys[c, i]))
    return np.int64(h >> np.uint64(64 - HASH_BITS))


@kernel
def hash_keys(keys):
    """int64[n] 40-bit hashes of the key columns (``keys`` is ``kk x n``)."""
    n = keys.shape[1]
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = key_hash_at(keys, i)
    return out


@kernel
def hash_pack(keys):
    """uint64[n] of (40-bit key hash << 24 | position), for n < 2**24: one pass, ready for np.sort."""
    n = keys.shape[1]
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = (np.uint64(key_hash_at(keys, i)) << np.uint64(POS_BITS)) | np.uint64(i)
    return out


@kernel
def unpack_positions(packed):
    """(positions, hashes) from sorted packed words."""
    n = packed.shape[0]
    perm = np.empty(n, np.int64)
    skh = np.empty(n, np.int64)
    for i in range(n):
        perm[i] = np.int64(packed[i] & np.uint64(POS_MASK))
        skh[i] = np.int64(packed[i] >> np.uint64(POS_BITS))
    return perm, skh


MIN_RUN = 16  # natural runs shorter than this are extended by insertion sort before merging


@kernel
def _insert(idx, lo, start, stop, keys, vals, times):
    """Insertion sort: each of idx[start:stop] moved into the sorted idx[lo:its position] (stably)."""
    for a in range(start, stop):
        x = idx[a]
        b = a - 1
        while b >= lo and cmp_update(keys, vals, times, idx[b], x) > 0:
            idx[b + 1] = idx[b]
            b -= 1
        idx[b + 1] = x


@kernel
def _merge_runs(src, dst, bounds, nb, keys, vals, times):
    """One merge pass: runs src[bounds[r]:bounds[r+1]] merged in pairs into dst (ties from the left run
    first: stable); an odd last run is copied. Returns the number of runs left, their bounds in place."""
    out = 0
    r = 0
    while r < nb:
        lo = bounds[r]
        if r + 1 == nb:
            for k in range(lo, bounds[r + 1]):
                dst[k] = src[k]
            bounds[out] = lo
            out += 1
            break
        mid = bounds[r + 1]
        hi = bounds[r + 2]
        i = lo
        j = mid
        k = lo
        while i < mid and j < hi:
            if cmp_update(keys, vals, times, src[j], src[i]) < 0:
                dst[k] = src[j]
                j += 1
            else:
                dst[k] = src[i]
                i += 1
            k += 1
        while i < mid:
            dst[k] = src[i]
            i += 1
            k += 1
        while j < hi:
            dst[k] = src[j]
            j += 1
            k += 1
        bounds[out] = lo
        out += 1
        r += 2
    bounds[out] = bounds[nb]
    return out


@kernel
def sort_index_segment(idx, s, e, keys, vals, times, tmp):
    """Sort idx[s:e] by (key, val, time) of the rows it points at, stably: insertion sort when short,
    otherwise a natural merge sort (``tmp`` is scratch at least as long as idx). Its input is mostly
    sorted runs (a key's rows from each batch of a trace, times that advancing by a meet made equal),
    which it merges as they are: O(n log runs), O(n) when already sorted, where a plain merge sort
    spent O(n log n) on every key's whole history at every step."""
    m = e - s
    if m < 2:
        return
    if m <= 24:
        _insert(idx, s, s + 1, e, keys, vals, times)
        return
    bounds = np.empty(m // MIN_RUN + 3, np.int64)
    nb = 0
    lo = s
    while lo < e:  # runs: each natural non-decreasing run, extended to MIN_RUN rows by insertion
        hi = lo + 1
        while hi < e and cmp_update(keys, vals, times, idx[hi - 1], idx[hi]) <= 0:
            hi += 1
        if hi - lo < MIN_RUN and hi < e:
            top = min(lo + MIN_RUN, e)
            _insert(idx, lo, hi, top, keys, vals, times)
            hi = top
        bounds[nb] = lo
        nb += 1
        lo = hi
    bounds[nb] = e
    in_idx = True
    while nb > 1:
        if in_idx:
            nb = _merge_runs(idx, tmp, bounds, nb, keys, vals, times)
        else:
            nb = _merge_runs(tmp, idx, bounds, nb, keys, vals, times)
        in_idx = not in_idx
    if not in_idx:
        for a in range(s, e):
            idx[a] = tmp[a]


@kernel
def fix_hash_runs(perm, skh, keys, vals, times):
    """Within each run of equal hashes, order perm by (key, val, time)."""
    n = perm.shape[0]
    longest = 1
    i = 0
    while i < n:
        j = i + 1
        while j < n and skh[j] == skh[i]:
            j += 1
        longest = max(longest, j - i)
        i = j
    if longest == 1:
        return
    tmp = np.empty(n if longest > 24 else 0, np.int64)
    i = 0
    while i < n:
        j = i + 1
        while j < n and skh[j] == skh[i]:
            j += 1
        if j - i > 1:
            sort_index_segment(perm, i, j, keys, vals, times, tmp)
        i = j


def packed_hashes(keys):
    """(hash << 24 | position) per row; a module-level name so tests can substitute colliding hashes."""
    return hash_pack(keys)


def arrangement_order(keys: np.ndarray, vals: np.ndarray, times: np.ndarray):
    """(perm, sorted hashes): the permutation putting updates in arrangement order."""
    n = keys.shape[1]
    if n < MAX_PACKED:
        packed = packed_hashes(keys)
        packed.sort()  # NumPy's SIMD sort on one packed 64-bit word per row
        perm, skh = unpack_positions(packed)
    else:
        kh = hash_keys(keys)
        perm = np.argsort(kh, kind="quicksort")
        skh = kh[perm]
    fix_hash_runs(perm, skh, keys, vals, times)
    return perm, skh


# -- bucketed formation order ---------------------------------------------------------------------------
# Sorting one packed word per row with NumPy is fast, but putting the rows in that order afterwards
# gathers each column through a random permutation: a cache and TLB miss per row and column, which cost
# several times the sort itself on large batches. Formation therefore first distributes the rows into
# shards and, within each, buckets by their key hash (one stable MSD radix pass, column by column:
# engine/kernels/exchange.py), small enough for each bucket's rows to stay in cache while it is ordered
# by the rest of the hash and consolidated (engine/kernels/form.py form_buckets). The arrangement
# order (hash, key, val, time) and the hashes themselves are unchanged.

BUCKET_ROWS = 4096  # target rows per bucket: a bucket's rows and sort scratch fit in L2
ONE_BUCKET = 1 << 16  # fewer rows than this are ordered as one bucket, where they are (no distribution)
MAX_BUCKET_BITS = 12


def bucket_bits(n: int) -> int:
    """Into how many buckets (2**bits) to split a shard of ``n`` rows: about BUCKET_ROWS each (0: one
    bucket)."""
    if n < ONE_BUCKET:
        return 0
    bits = 0
    while bits < MAX_BUCKET_BITS and (n >> bits) >= 2 * BUCKET_ROWS:
        bits += 1
    return bits


def key_hashes(keys, out, lo: int = 0, hi: int | None = None):
    """``out[lo:hi]`` = the 40-bit hashes of key columns lo..hi-1 (all by default); returns ``out`` (a
    module-level name so tests can substitute colliding hashes). Ranges let formation hash in parallel."""
    hash_keys_into(keys, lo, keys.shape[1] if hi is None else hi, out)
    return out


@kernel
def hash_keys_into(keys, lo, hi, out):
    """out[lo:hi] = the 40-bit hashes of key columns lo..hi-1."""
    for i in range(lo, hi):
        out[i] = key_hash_at(keys, i)
