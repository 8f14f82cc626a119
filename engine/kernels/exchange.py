"""Exchange: distributing updates among worker shards by key hash, and within each shard into buckets
for formation (engine/kernels/form.py form_buckets), in one stable MSD radix pass.

Shard of a key = (hash * workers) >> HASH_BITS, so shards hold contiguous hash ranges; bucket =
(hash * workers * 2**bits) >> HASH_BITS, so each shard's buckets are its 2**bits consecutive ones and
a bucket holds a contiguous hash range too. The rows are scattered column by column (sequential reads,
one write stream per bucket) straight into the places the shards' batches are formed in, so no
permutation array, gather or second copy is needed."""
import numpy as np

from . import kernel
from .sort import HASH_BITS


@kernel
def bucket_counts(kh, lo, hi, nb):
    """int64[nb]: how many of rows lo..hi-1 (hashes ``kh``) fall in each of nb buckets."""
    cnt = np.zeros(nb, np.int64)
    for i in range(lo, hi):
        cnt[(kh[i] * nb) >> HASH_BITS] += 1
    return cnt


@kernel
def exchange_rows(kh, keys, vals, times, diffs, lo, hi, workers, bits, cnt, start, rh, rk, rv, rt, rd):
    """Scatter rows lo..hi-1 (hashes ``kh``) of one source part to shards and buckets, stably, bucket
    b's next place being start[b] (updated). Outputs are flat and shard after shard, ``cnt`` the bucket
    offsets of all rows (int64[(workers << bits) + 1]): shard s owns rows a:b (a = cnt[s << bits],
    b = cnt[(s + 1) << bits]), its hashes rh[a:b], diffs rd[a:b], times rt[a:b] (``rt`` is n x d), and
    its keys the block rk[kk*a:kk*b] as a kk x (b - a) C-ordered matrix (vals likewise in rv). Row ranges
    scattered concurrently write disjoint places. ``kh[lo:hi]`` is overwritten with each row's place."""
    n = rh.shape[0]  # all rows being exchanged (the source may be one of several parts)
    kk = keys.shape[0]
    kv = vals.shape[0]
    d = times.shape[1]
    nb = workers << bits
    blocks = workers > 1 and (kk > 1 or kv > 1)  # a row's place in a shard's key block depends on its shard
    shard = np.empty(hi - lo if blocks else 0, np.int16)
    for i in range(lo, hi):
        h = kh[i]
        b = (h * nb) >> HASH_BITS
        p = start[b]
        start[b] = p + 1
        rh[p] = h
        kh[i] = p
        if blocks:
            shard[i - lo] = b >> bits
    # then one column at a time: one write stream per bucket, not one per bucket and column
    for c in range(kk):
        for i in range(lo, hi):
            p = kh[i]
            if blocks:
                s = shard[i - lo]
                a = cnt[s << bits]
                p = kk * a + c * (cnt[(s + 1) << bits] - a) + p - a
            else:  # one shard (or one column): its block is the whole array
                p += c * n
            rk[p] = keys[c, i]
    for c in range(kv):
        for i in range(lo, hi):
            p = kh[i]
            if blocks:
                s = shard[i - lo]
                a = cnt[s << bits]
                p = kv * a + c * (cnt[(s + 1) << bits] - a) + p - a
            else:
                p += c * n
            rv[p] = vals[c, i]
    for i in range(lo, hi):
        p = kh[i]
        for c in range(d):
            rt[p, c] = times[i, c]
    for i in range(lo, hi):
        rd[kh[i]] = diffs[i]
