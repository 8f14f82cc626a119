"""Seeking a sorted set of keys in an arranged batch, and gathering their rows.

Probes come in arrangement order (hash, key); each seek gallops forward from the previous probe's
position, so the work is proportional to the number of probes times the log of the gap between them,
never to the size of the batch."""
import numpy as np

from . import helper, kernel
from .rows import cmp_cols
from .sort import fix_hash_runs, key_hash_at, unpack_positions


INTERPOLATE_GAP = 256  # interpolate where the batch has more than this many keys per probe (below it, a scan
# from the last probe reads about as many cache lines)
SCAN_GAP = 4  # scan by blocks from this many keys per probe (below it, the next probe is mostly a step or two on)


@kernel
def seek_keys(bkh, bkeys, pkh, pkeys):
    """int64[len(probes)]: the batch key index of each probe, or -1 where the batch lacks it.

    Key hashes are uniform, so where probes are sparse in the batch (a few thousand against millions
    of keys) the next one's place is estimated from its hash by interpolation and found by galloping
    out from there: about two cache lines read per probe instead of the ten or so of a gallop across
    the whole gap (10,000,000 keys, 10,000 probes: 369 -> 59 ns a probe). Hashes that are not uniform
    cost at most a gallop in the wrong direction. Where the gap is moderate (``SCAN_GAP`` to
    ``INTERPOLATE_GAP`` keys per probe), the batch is scanned forward eight hashes at a time and the last
    block counted: sequential reads with predictable branches, where a gallop's and a binary search's
    dependent loads mispredict at each step (2,000,000 keys, 45,000 probes: 33 -> 19 ns a probe; a
    distinct's settling seeks into its output trace each round are of this kind)."""
    nb = bkh.shape[0]
    m = pkh.shape[0]
    out = np.full(m, -1, np.int64)
    if nb == 0:
        return out
    per_hash = nb / (bkh[nb - 1] - bkh[0] + 1.0)  # keys per unit of hash
    sparse = m * INTERPOLATE_GAP < nb
    scan = not sparse and m * SCAN_GAP <= nb
    pos = 0
    for p in range(m):
        h = pkh[p]
        if scan and pos < nb and bkh[pos] < h:
            q = pos + 1  # the first index past pos whose hash is >= h: whole blocks below h skipped
            while q + 8 <= nb and bkh[q + 7] < h:
                q += 8
            if q + 8 <= nb:
                c = 0
                for t in range(8):  # (branch-free)
                    c += bkh[q + t] < h
                pos = q + c
            else:
                while q < nb and bkh[q] < h:
                    q += 1
                pos = q
        elif pos < nb and bkh[pos] < h:
            lo = pos  # bkh[lo] < h
            hi = nb   # bkh[hi] >= h (or the end)
            if sparse:
                e = pos + int((h - bkh[pos]) * per_hash)
                e = min(max(e, pos + 1), nb - 1)
                step = 1
                if bkh[e] < h:  # gallop forward from the estimate
                    lo = e
                    while lo + step < nb and bkh[lo + step] < h:
                        lo += step
                        step *= 2
                    hi = min(lo + step, nb)
                else:  # gallop back from it
                    hi = e
                    while hi - step > pos and bkh[hi - step] >= h:
                        hi -= step
                        step *= 2
                    lo = max(hi - step, pos)
            else:
                step = 1
                while lo + step < nb and bkh[lo + step] < h:
                    lo += step
                    step *= 2
                hi = min(lo + step, nb)
            lo += 1
            while lo < hi:
                mid = (lo + hi) >> 1
                if bkh[mid] < h:
                    lo = mid + 1
                else:
                    hi = mid
            pos = lo
        j = pos
        while j < nb and bkh[j] == h:
            c = cmp_cols(bkeys, j, pkeys, p)
            if c == 0:
                out[p] = j
                break
            if c > 0:
                break
            j += 1
    return out


@kernel
def seek_rows(bkh, bkeys, koff, pkh, pkeys, kidx, counts):
    """``seek_keys`` into ``kidx`` (the batch key index of each probe, or -1), adding each found probe's
    row count to ``counts``; returns the rows found (none: the cursor skips gathering from this batch)."""
    found = seek_keys(bkh, bkeys, pkh, pkeys)
    rows = 0
    for p in range(found.shape[0]):
        k = found[p]
        kidx[p] = k
        if k >= 0:
            c = koff[k + 1] - koff[k]
            counts[p] += c
            rows += c
    return rows


@kernel
def gather_rows(kidx, koff, vals, times, diffs, cursor, ovals, otimes, odiffs, oprobe):
    """Copy each found probe's rows to ovals/otimes/odiffs at cursor[p] (advanced in place) and
    record which probe each row belongs to."""
    for p in range(kidx.shape[0]):
        k = kidx[p]
        if k < 0:
            continue
        w = cursor[p]
        for r in range(koff[k], koff[k + 1]):
            for c in range(vals.shape[0]):
                ovals[c, w] = vals[c, r]
            for c in range(times.shape[1]):
                otimes[w, c] = times[r, c]
            odiffs[w] = diffs[r]
            oprobe[w] = p
            w += 1
        cursor[p] = w


@kernel
def unique_sorted_keys(kh, keys):
    """Mask of first occurrences in (hash, key)-sorted key columns."""
    n = kh.shape[0]
    keep = np.ones(n, np.bool_)
    for i in range(1, n):
        if kh[i] == kh[i - 1] and cmp_cols(keys, i, keys, i - 1) == 0:
            keep[i] = False
    return keep


@kernel
def index_packed(packed, keys):
    """``key_index`` in one call once NumPy has sorted the packed (hash << 24 | position) words of the key
    columns: (the distinct keys' hashes and columns in arrangement order, each column's number among
    them). A probe set of a few hundred keys cost about ten NumPy and kernel calls around the sort."""
    n = packed.shape[0]
    kk = keys.shape[0]
    perm, skh = unpack_positions(packed)
    fix_hash_runs(perm, skh, keys, np.zeros((0, n), np.int64), np.zeros((n, 0), np.int64))
    inv = np.empty(n, np.int64)
    firsts = np.empty(n, np.int64)
    d = 0
    for i in range(n):
        if i == 0 or skh[i] != skh[i - 1] or cmp_cols(keys, perm[i], keys, perm[i - 1]) != 0:
            firsts[d] = perm[i]
            skh[d] = skh[i]  # (d <= i: the hashes not yet read are never overwritten)
            d += 1
        inv[perm[i]] = d - 1
    okeys = np.empty((kk, d), np.int64)
    for c in range(kk):
        for t in range(d):
            okeys[c, t] = keys[c, firsts[t]]
    return skh[:d].copy(), okeys, inv


@helper
def merge_order(akh, akeys, i, na, bkh, bkeys, j, nb):
    """Which comes first in arrangement order (hash, then key columns) when merging two sorted lists at
    positions i and j: -1 the first list's, 1 the second's (or the one not yet exhausted), 0 both."""
    if i >= na:
        return 1
    if j >= nb:
        return -1
    if akh[i] != bkh[j]:
        return -1 if akh[i] < bkh[j] else 1
    return cmp_cols(akeys, i, bkeys, j)


@kernel
def merge_key_lists(akh, akeys, bkh, bkeys):
    """Union of two (hash, key)-sorted distinct key lists, sorted and distinct."""
    na = akh.shape[0]
    nb = bkh.shape[0]
    kk = akeys.shape[0]
    okh = np.empty(na + nb, np.int64)
    okeys = np.empty((kk, na + nb), np.int64)
    i = 0
    j = 0
    n = 0
    while i < na or j < nb:
        c = merge_order(akh, akeys, i, na, bkh, bkeys, j, nb)
        if c <= 0:
            okh[n] = akh[i]
            for q in range(kk):
                okeys[q, n] = akeys[q, i]
            i += 1
            if c == 0:
                j += 1
        else:
            okh[n] = bkh[j]
            for q in range(kk):
                okeys[q, n] = bkeys[q, j]
            j += 1
        n += 1
    return okh[:n].copy(), okeys[:, :n].copy()


MAX_PROBES = 64  # slots one lookup of distinct_keys may visit (a half-full table averages under 3)


@kernel
def distinct_keys(keys, limit):
    """The distinct key columns, found through a hash table instead of a sort: (their first positions,
    each column's number among them in order of first appearance, how many). Stops with -1 once more
    than ``limit`` are distinct, where sorting every column costs no more (the table would outgrow the
    cache), or once one lookup visits more than MAX_PROBES slots (keys made to collide). A slot holds
    (number, hash, first key column) side by side, so a probe costs one cache miss; the table doubles
    as it fills, so it stays about the size of the distinct keys."""
    kk, n = keys.shape
    inv = np.empty(n, np.int64)
    firsts = np.empty(min(n, limit + 1), np.int64)
    cap = 1024
    table = np.full(3 * cap, -1, np.int64)
    d = 0
    for i in range(n):
        hi = key_hash_at(keys, i)
        k0 = keys[0, i] if kk else 0
        s = hi & (cap - 1)
        steps = 0
        while True:
            t = table[3 * s]
            if t < 0:
                if d == limit:
                    return firsts[:0], inv, -1
                table[3 * s] = d
                table[3 * s + 1] = hi
                table[3 * s + 2] = k0
                firsts[d] = i
                inv[i] = d
                d += 1
                if 2 * d > cap:  # half full: double and reinsert
                    old = table
                    cap *= 2
                    table = np.full(3 * cap, -1, np.int64)
                    for j in range(cap // 2):
                        if old[3 * j] >= 0:
                            u = old[3 * j + 1] & (cap - 1)
                            while table[3 * u] >= 0:
                                u = (u + 1) & (cap - 1)
                            table[3 * u] = old[3 * j]
                            table[3 * u + 1] = old[3 * j + 1]
                            table[3 * u + 2] = old[3 * j + 2]
                break
            if table[3 * s + 1] == hi and table[3 * s + 2] == k0 and (kk < 2 or cmp_cols(keys, firsts[t], keys, i) == 0):
                inv[i] = t
                break
            s = (s + 1) & (cap - 1)
            steps += 1
            if steps > MAX_PROBES:  # keys built to collide: sorting bounds the work instead
                return firsts[:0], inv, -1
    return firsts[:d], inv, d
