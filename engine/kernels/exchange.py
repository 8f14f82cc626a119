"""Exchange: partitioning updates among worker shards by key hash (a vectorized hash partition)."""
import numpy as np

from . import kernel
from .sort import HASH_BITS, key_hash_at


@kernel
def partition(keys, workers):
    """(perm, offsets, hashes): updates grouped by shard, shard s owning perm[offsets[s]:offsets[s+1]].
    Shard of a key = (hash * workers) >> HASH_BITS, so shards hold contiguous hash ranges."""
    n = keys.shape[1]
    kh = np.empty(n, np.int64)
    shard = np.empty(n, np.int64)
    counts = np.zeros(workers + 1, np.int64)
    for i in range(n):
        h = key_hash_at(keys, i)
        kh[i] = h
        s = (h * workers) >> HASH_BITS
        shard[i] = s
        counts[s + 1] += 1
    for s in range(workers):
        counts[s + 1] += counts[s]
    perm = np.empty(n, np.int64)
    pos = counts[:-1].copy()
    for i in range(n):
        s = shard[i]
        perm[pos[s]] = i
        pos[s] += 1
    return perm, counts, kh
