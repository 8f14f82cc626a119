"""Exchange: partitioning updates among worker shards by key hash (a vectorized hash partition).

Shard of a key = (hash * workers) >> HASH_BITS, so shards hold contiguous hash ranges. The rows are
scattered straight into one buffer per column group, shard after shard, column by column (sequential
reads, one write stream per shard), so each shard's piece is a contiguous view and no permutation array
or gather through it is needed."""
import numpy as np

from . import kernel
from .sort import HASH_BITS, key_hash_at


@kernel
def partition_rows(keys, vals, times, diffs, workers, okeys, ovals, otimes, odiffs):
    """Scatter rows to shards. Outputs are flat: shard s owns rows offs[s]:offs[s+1], its keys the block
    okeys[kk*offs[s]:kk*offs[s+1]] as a kk x m C-ordered matrix (vals likewise), its times
    otimes[d*offs[s]:d*offs[s+1]] as m x d. Returns offs (int64[workers + 1])."""
    n = diffs.shape[0]
    kk = keys.shape[0]
    kv = vals.shape[0]
    d = times.shape[1]
    shard = np.empty(n, np.int16)
    offs = np.zeros(workers + 1, np.int64)
    for i in range(n):
        s = (key_hash_at(keys, i) * workers) >> HASH_BITS
        shard[i] = s
        offs[s + 1] += 1
    for s in range(workers):
        offs[s + 1] += offs[s]
    nxt = np.empty(workers, np.int64)
    for c in range(kk):
        nxt[:] = 0
        for i in range(n):
            s = shard[i]
            m = offs[s + 1] - offs[s]
            okeys[kk * offs[s] + c * m + nxt[s]] = keys[c, i]
            nxt[s] += 1
    for c in range(kv):
        nxt[:] = 0
        for i in range(n):
            s = shard[i]
            m = offs[s + 1] - offs[s]
            ovals[kv * offs[s] + c * m + nxt[s]] = vals[c, i]
            nxt[s] += 1
    nxt[:] = offs[:workers]
    for i in range(n):
        s = shard[i]
        p = nxt[s]
        for c in range(d):
            otimes[d * p + c] = times[i, c]
        odiffs[p] = diffs[i]
        nxt[s] = p + 1
    return offs


def partition(keys, vals, times, diffs, workers: int) -> list:
    """The updates (keys kk x n, vals kv x n, times n x d, diffs n) split by shard: a list with, per
    shard, (keys, vals, times, diffs) of its rows in their original order, or None for a shard with none."""
    n = diffs.shape[0]
    kk, kv, d = keys.shape[0], vals.shape[0], times.shape[1]
    okeys, ovals = np.empty(kk * n, np.int64), np.empty(kv * n, np.int64)
    otimes, odiffs = np.empty(d * n, np.int64), np.empty(n, np.int64)
    offs = partition_rows(keys, vals, times, diffs, workers, okeys, ovals, otimes, odiffs).tolist()
    out = []
    for s in range(workers):
        a, b = offs[s], offs[s + 1]
        out.append((okeys[kk * a:kk * b].reshape(kk, b - a), ovals[kv * a:kv * b].reshape(kv, b - a),
                    otimes[d * a:d * b].reshape(b - a, d), odiffs[a:b]) if b > a else None)
    return out
