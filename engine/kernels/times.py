"""Kernels over time matrices."""
import numpy as np

from . import kernel
from .rows import cmp_times, in_advance, leq_time


@kernel
def minimal_times(times):
    """The antichain of minimal rows of a time matrix (one pass, keeping the current minimal set)."""
    n, d = times.shape
    out = np.empty((n, d), np.int64)
    m = 0
    for i in range(n):
        dominated = False
        for j in range(m):
            if leq_time(out, j, times, i):
                dominated = True
                break
        if dominated:
            continue
        # drop elements the new time is <= to, then append it
        w = 0
        for j in range(m):
            if not leq_time(times, i, out, j):
                if w != j:
                    for c in range(d):  # element loops: a row assignment compiles numba's shape-error
                        out[w, c] = out[j, c]  # formatting, seconds of cold start
                w += 1
        m = w
        for c in range(d):
            out[m, c] = times[i, c]
        m += 1
    return out[:m].copy()


@kernel
def time_bounds(times):
    """(least, greatest) of a non-empty time matrix, coordinate by coordinate, in one pass (NumPy's
    ``min(axis=0)`` and ``max(axis=0)`` over an n x 2 matrix are two strided passes, each dearer)."""
    n, d = times.shape
    lo = times[0].copy()
    hi = times[0].copy()
    for i in range(1, n):
        for c in range(d):
            t = times[i, c]
            if t < lo[c]:
                lo[c] = t
            elif t > hi[c]:
                hi[c] = t
    return lo, hi


@kernel
def one_time(times):
    """Whether every row of a non-empty time matrix equals its first (a round's join output, a load):
    formation then leaves the times out of its exchange and comparisons. Reads the rows as one flat run
    against the first row repeated, 4,096 rows at a time without a branch (the loop vectorizes), and
    stops after the first stretch with another time."""
    n, d = times.shape
    if d == 0:
        return True
    flat = times.reshape(n * d)  # (C-contiguous, as every kernel's arrays)
    step = min(n, 4096) * d
    pattern = np.empty(step, np.int64)
    for j in range(step):
        pattern[j] = times[0, j % d]
    for a in range(0, n * d, step):
        m = min(step, n * d - a)
        differ = 0
        for j in range(m):
            differ |= flat[a + j] ^ pattern[j]
        if differ:
            return False
    return True


@kernel
def group_rows(keys, vals, times, diffs, group, g):
    """The rows gathered into their ``g`` groups (``group``: each row's, from ``time_groups``), stable
    within a group: (keys, vals, times, diffs, ends), group j's rows at [ends[j-1], ends[j]). A counting
    sort: one pass to count, one scatter per column, in place of an argsort and a gather per array."""
    n = diffs.shape[0]
    at = np.zeros(g + 1, np.int64)
    for i in range(n):
        at[group[i] + 1] += 1
    for j in range(g):
        at[j + 1] += at[j]
    ends = at[1:].copy()
    pos = np.empty(n, np.int64)
    for i in range(n):
        q = group[i]
        pos[i] = at[q]
        at[q] += 1
    okeys = np.empty(keys.shape, np.int64)
    ovals = np.empty(vals.shape, np.int64)
    otimes = np.empty(times.shape, np.int64)
    odiffs = np.empty(n, np.int64)
    for c in range(keys.shape[0]):
        for i in range(n):
            okeys[c, pos[i]] = keys[c, i]
    for c in range(vals.shape[0]):
        for i in range(n):
            ovals[c, pos[i]] = vals[c, i]
    for i in range(n):
        r = pos[i]
        odiffs[r] = diffs[i]
        for c in range(times.shape[1]):
            otimes[r, c] = times[i, c]
    return okeys, ovals, otimes, odiffs, ends


@kernel
def count_positive(diffs):
    """How many entries of ``diffs`` are above zero (a batch's balance, without a boolean temporary)."""
    m = 0
    for i in range(diffs.shape[0]):
        m += diffs[i] > 0
    return m


@kernel
def fill_times(times, t):
    """Every row of the ``n x d`` time matrix set to ``t`` (NumPy's broadcast assignment of a short row
    loops per row)."""
    n, d = times.shape
    for i in range(n):
        for c in range(d):
            times[i, c] = t[c]


@kernel
def in_advance_rows(times, frontier):
    """bool[n]: which rows of the ``n x d`` time matrix are >= some row of the ``m x d`` frontier matrix
    (in advance of the antichain). One pass, no ``n x d`` temporaries: batcher seals run it over every
    buffered update of a loop's round."""
    n = times.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(n):
        out[i] = in_advance(times, i, frontier)
    return out


@kernel
def time_groups(times, cap):
    """Group the rows of a time matrix by their time, when they hold at most ``cap`` distinct times:
    (the group of each row, the groups' times in order of first appearance, how many). With more,
    the count is -1 (and the rest meaningless). One pass; consecutive rows mostly share a time."""
    n, d = times.shape
    group = np.empty(n, np.int64)
    seen = np.empty((cap, d), np.int64)
    g = 0
    last = -1
    for i in range(n):
        if last < 0 or cmp_times(times, i, seen, last) != 0:
            last = -1
            for j in range(g):
                if cmp_times(times, i, seen, j) == 0:
                    last = j
                    break
            if last < 0:
                if g == cap:
                    return group, seen, -1
                for c in range(d):
                    seen[g, c] = times[i, c]
                last = g
                g += 1
        group[i] = last
    return group, seen, g


@kernel
def bit_lengths(x):
    """Each value's bit length (0 for values <= 0): the round at which ``enter_at`` or ``delay`` lets a
    label or distance in, so that values of each power of two settle before longer ones spread. One pass:
    the NumPy binary search it replaces took about 20 array passes (10 ms of a 140 ms sssp)."""
    out = np.empty(x.shape[0], np.int64)
    for i in range(x.shape[0]):
        v = x[i]
        b = 0
        while v > 0:
            v >>= 1
            b += 1
        out[i] = b
    return out
