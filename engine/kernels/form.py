"""Batch formation: gather updates in arrangement order, sum diffs of equal (key, val, time), drop
zeros, and build the per-key index (distinct keys, their hashes and row offsets)."""
import numpy as np

from . import kernel
from .rows import cmp_cols, cmp_times


@kernel
def _same_update(keys, vals, times, p, q):
    return cmp_cols(keys, p, keys, q) == 0 and cmp_cols(vals, p, vals, q) == 0 \
        and cmp_times(times, p, times, q) == 0


@kernel
def build_arranged(perm, skh, keys, vals, times, diffs):
    """Consolidate updates already ordered by ``perm`` into (kh, keys, koff, vals, times, diffs)."""
    n = perm.shape[0]
    kk = keys.shape[0]
    kv = vals.shape[0]
    d = times.shape[1]
    okh = np.empty(n, np.int64)
    okeys = np.empty((kk, n), np.int64)
    koff = np.empty(n + 1, np.int64)
    ovals = np.empty((kv, n), np.int64)
    otimes = np.empty((n, d), np.int64)
    odiffs = np.empty(n, np.int64)
    nk = 0
    nr = 0
    i = 0
    while i < n:
        p = perm[i]
        acc = diffs[p]
        j = i + 1
        while j < n and skh[j] == skh[i] and _same_update(keys, vals, times, p, perm[j]):
            acc += diffs[perm[j]]
            j += 1
        if acc != 0:
            if nk == 0 or okh[nk - 1] != skh[i] or cmp_cols(okeys, nk - 1, keys, p) != 0:
                okh[nk] = skh[i]
                for c in range(kk):
                    okeys[c, nk] = keys[c, p]
                koff[nk] = nr
                nk += 1
            for c in range(kv):
                ovals[c, nr] = vals[c, p]
            for c in range(d):
                otimes[nr, c] = times[p, c]
            odiffs[nr] = acc
            nr += 1
        i = j
    koff[nk] = nr
    return okh, okeys, koff, ovals, otimes, odiffs, nk, nr


def trim(okh, okeys, koff, ovals, otimes, odiffs, nk, nr):
    """Cut the kernel's full-size outputs to (nk keys, nr rows), copying where a view would be
    non-contiguous (column slices of 2-D matrices) or would waste more than an eighth of the space."""
    n = odiffs.shape[0]
    waste_k = nk < n - n // 8
    waste_r = nr < n - n // 8

    def cut2(m, k, waste):
        v = m[:, :k]
        return v.copy() if (waste or (k < m.shape[1] and m.shape[0] > 1)) else v

    def cut1(a, k, waste):
        return a[:k].copy() if waste else a[:k]

    return (cut1(okh, nk, waste_k), cut2(okeys, nk, waste_k), cut1(koff, nk + 1, waste_k),
            cut2(ovals, nr, waste_r), cut1(otimes, nr, waste_r), cut1(odiffs, nr, waste_r))
