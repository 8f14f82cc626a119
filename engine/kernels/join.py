"""Join products: for each probe key, every pair of its rows on the two sides, at the lub of their times
with the product of their diffs. Produced in bounded chunks so a huge product never lands at once."""
import numpy as np

from . import kernel


@kernel
def product_size(aoff, boff, start, limit):
    """(end probe, rows): probes start..end produce `rows` outputs, stopping once `limit` is reached
    (at least one probe is taken, so progress is always made)."""
    m = aoff.shape[0] - 1
    total = 0
    p = start
    while p < m:
        c = (aoff[p + 1] - aoff[p]) * (boff[p + 1] - boff[p])
        if total > 0 and total + c > limit:
            break
        total += c
        p += 1
    return p, total


@kernel
def join_product(aoff, atimes, adiffs, boff, btimes, bdiffs, start, end, total):
    """Rows for probes start..end: (probe index, a row, b row, lub time, diff product)."""
    d = atimes.shape[1]
    probe = np.empty(total, np.int64)
    arow = np.empty(total, np.int64)
    brow = np.empty(total, np.int64)
    times = np.empty((total, d), np.int64)
    diffs = np.empty(total, np.int64)
    w = 0
    for p in range(start, end):
        for i in range(aoff[p], aoff[p + 1]):
            for j in range(boff[p], boff[p + 1]):
                probe[w] = p
                arow[w] = i
                brow[w] = j
                for c in range(d):
                    x = atimes[i, c]
                    y = btimes[j, c]
                    times[w, c] = x if x > y else y
                diffs[w] = adiffs[i] * bdiffs[j]
                w += 1
    return probe, arow, brow, times, diffs
