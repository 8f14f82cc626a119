"""Join products: for each probe key, every pair of its rows on the two sides, at the lub of their times
with the product of their diffs. Produced in bounded chunks (resumable at any pair) so that a huge
product never lands at once."""
import numpy as np

from . import kernel

MAX_DIFF = (1 << 62) - 1   # the largest multiplicity a join may produce (inputs: the same bound)
MAX_FACTOR = 1 << 31       # factors below this in magnitude cannot overflow it


@kernel
def product_total(aoff, boff):
    total = 0
    for p in range(aoff.shape[0] - 1):
        total += (aoff[p + 1] - aoff[p]) * (boff[p + 1] - boff[p])
    return total


@kernel
def join_product(aoff, atimes, adiffs, boff, btimes, bdiffs, state, n):
    """The next ``n`` output rows, resuming at state = [probe, a row, b row, overflow] (updated in place):
    (probe index, a row, b row, lub time, diff product). A product of magnitude 2**62 or more stops the
    chunk and sets state[3]: int64 would wrap silently (2**40 x 2**40 is 0), and inputs keep diffs below
    2**62 for the same reason."""
    d = atimes.shape[1]
    m = aoff.shape[0] - 1
    probe = np.empty(n, np.int64)
    arow = np.empty(n, np.int64)
    brow = np.empty(n, np.int64)
    times = np.empty((n, d), np.int64)
    diffs = np.empty(n, np.int64)
    p = state[0]
    i = state[1]
    j = state[2]
    w = 0
    while w < n and p < m:
        if i < aoff[p]:
            i = aoff[p]
        if j < boff[p]:
            j = boff[p]
        if i >= aoff[p + 1] or boff[p] == boff[p + 1]:
            p += 1
            i = 0
            j = 0
            continue
        probe[w] = p
        arow[w] = i
        brow[w] = j
        for c in range(d):
            x = atimes[i, c]
            y = btimes[j, c]
            times[w, c] = x if x > y else y
        a = adiffs[i]
        b = bdiffs[j]
        if not (-MAX_FACTOR < a < MAX_FACTOR and -MAX_FACTOR < b < MAX_FACTOR):
            if a != 0 and abs(b) > MAX_DIFF // abs(a):
                state[3] = 1
                break
        diffs[w] = a * b
        w += 1
        j += 1
        if j >= boff[p + 1]:
            j = boff[p]
            i += 1
    state[0] = p
    state[1] = i
    state[2] = j
    return probe[:w], arow[:w], brow[:w], times[:w], diffs[:w]
