"""Row comparison helpers shared by the sorting, merging and seeking kernels."""

from . import helper, kernel


@kernel
def cmp_cols(a, i, b, j):
    """Lexicographic compare of column-matrix rows a[:, i] and b[:, j]: -1, 0 or 1."""
    for c in range(a.shape[0]):
        x = a[c, i]
        y = b[c, j]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


@kernel
def cmp_times(a, i, b, j):
    """Lexicographic compare of time rows a[i] and b[j] (a linear extension of the product order)."""
    for c in range(a.shape[1]):
        x = a[i, c]
        y = b[j, c]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


@kernel
def cmp_val_time(vals_a, times_a, i, vals_b, times_b, j):
    c = cmp_cols(vals_a, i, vals_b, j)
    if c != 0:
        return c
    return cmp_times(times_a, i, times_b, j)


@kernel
def cmp_update(keys, vals, times, i, j):
    """Compare updates i and j of one unarranged batch by (key, val, time)."""
    c = cmp_cols(keys, i, keys, j)
    if c != 0:
        return c
    c = cmp_cols(vals, i, vals, j)
    if c != 0:
        return c
    return cmp_times(times, i, times, j)


@helper
def leq_time(a, i, b, j):
    """Product order: time row a[i] <= b[j] coordinate-wise (inlined: called per row in hot loops)."""
    for c in range(a.shape[1]):
        if a[i, c] > b[j, c]:
            return False
    return True


@kernel
def in_advance(times, i, frontier):
    """Whether times[i] is >= some row of the frontier matrix."""
    d = times.shape[1]
    for f in range(frontier.shape[0]):
        ok = True
        for c in range(d):
            if times[i, c] < frontier[f, c]:
                ok = False
                break
        if ok:
            return True
    return False


@kernel
def is_identity(idx):
    """Whether an index array is 0, 1, ..., n-1 (a flat_map that kept every row in order: the rows'
    times and diffs then pass on without a gather). Stops at the first other entry."""
    for i in range(idx.shape[0]):
        if idx[i] != i:
            return False
    return True
