"""Batch formation: put updates in arrangement order, sum diffs of equal (key, val, time), drop zeros,
and build the per-key index (distinct keys, their hashes and row offsets).

Rows arrive distributed into buckets by their key hash (engine/kernels/exchange.py exchange_rows), each
a contiguous hash range small enough to stay in cache while it is ordered by the rest of the
hash, its runs of equal hash put in (key, val, time) order, and consolidated. A single global sort of
packed words followed by a gather of every column through the permutation costs a cache and TLB miss
per row and column, which on large batches was several times the sort itself.
"""
import numpy as np

from . import MAX_MULT, carried_add, carried_total, kernel
from .rows import cmp_cols, cmp_update


def trim(okh, okeys, koff, ovals, otimes, odiffs, nk, nr):
    """Cut the kernel's full-size outputs to (nk keys, nr rows): views where little is cut (a matrix's
    rows are first moved together in place, so that the view is contiguous), copies where a view would
    waste more than an eighth of the space."""
    n = odiffs.shape[0]
    waste_k = nk < n - n // 8
    waste_r = nr < n - n // 8

    def cut2(m, k, waste):
        if waste or not m.flags.c_contiguous:
            return m[:, :k].copy()
        if k == m.shape[1] or m.shape[0] <= 1:
            return m[:, :k]
        flat = m.reshape(-1)
        close_rows(flat, m.shape[0], m.shape[1], k)
        return flat[:m.shape[0] * k].reshape(m.shape[0], k)

    def cut1(a, k, waste):
        return a[:k].copy() if waste else a[:k]

    return (cut1(okh, nk, waste_k), cut2(okeys, nk, waste_k), cut1(koff, nk + 1, waste_k),
            cut2(ovals, nr, waste_r), cut1(otimes, nr, waste_r), cut1(odiffs, nr, waste_r))


@kernel
def close_rows(flat, rows, n, k):
    """In a C-ordered rows x n matrix stored in ``flat``, move each row's first k entries together so that
    flat[:rows * k] is the rows x k matrix (forwards: a destination never passes its source)."""
    for c in range(1, rows):
        for j in range(k):
            flat[c * k + j] = flat[c * n + j]


SHORT_RUN = 24  # runs of equal hash up to this long whose ranks tie are ordered by insertion
RANK_RUN = 64  # runs up to this long are ranked by counting (vectorized: 4 ns a row at 64 against a
# merge sort's 20), longer ones and longer ones with ties sorted column by column
RADIX_BITS = 44  # the most bits _radix_bucket orders (four 11-bit passes: its ``hist`` has four rows)


@kernel
def _radix_bucket(m, lbits, ia, la, ib, lb, hist):
    """Order (ia, la)[:m] by la (values below 2**lbits) through least-significant-digit radix passes,
    skipping digits on which all rows agree: the result is in one of the two buffer pairs."""
    npass = max(1, (lbits + 10) // 11)
    dbits = (lbits + npass - 1) // npass
    nd = 1 << dbits
    dmask = nd - 1
    hist[:npass, :nd] = 0
    for j in range(m):
        v = la[j]
        for p in range(npass):
            hist[p, (v >> (p * dbits)) & dmask] += 1
    src_i, src_l, dst_i, dst_l = ia, la, ib, lb
    for p in range(npass):
        sh = p * dbits
        if hist[p, (src_l[0] >> sh) & dmask] == m:
            continue  # every row has the same digit here
        acc = 0
        for q in range(nd):
            t = hist[p, q]
            hist[p, q] = acc
            acc += t
        for j in range(m):
            v = src_l[j]
            q = (v >> sh) & dmask
            w = hist[p, q]
            hist[p, q] = w + 1
            dst_i[w] = src_i[j]
            dst_l[w] = v
        src_i, src_l, dst_i, dst_l = dst_i, dst_l, src_i, src_l
    return src_i, src_l


@kernel
def _order_bucket(rh, s, m, ia, la, ib, lb, hist, slots):
    """Rows s..s+m-1 ordered by their hash: row indices in ia[:m], hashes in la[:m] (ib, lb: scratch).
    The hashes are ordered as offsets from the bucket's least one, spanning ``lbits`` bits. Hashes are
    uniform, so one counting pass on the top log2(2m) of those bits leaves about one distinct hash per
    slot and an insertion pass finishes the order in linear time (rows of one key share a hash and never
    move). Should the insertion move more than a few rows per row (hashes that are not uniform), the
    bucket is ordered by full radix passes instead."""
    lo = rh[s]
    hi = lo
    for j in range(m):
        v = rh[s + j]
        lo = min(lo, v)
        hi = max(hi, v)
    lbits = 0
    while (hi - lo) >> lbits:
        lbits += 1
    sb = 0
    while (1 << sb) < 2 * m and sb < lbits:
        sb += 1
    sh = lbits - sb
    ns = 1 << sb
    mask = ns - 1
    slots[:ns + 1] = 0
    for j in range(m):
        slots[(((rh[s + j] - lo) >> sh) & mask) + 1] += 1
    for q in range(ns):
        slots[q + 1] += slots[q]
    for j in range(m):
        v = rh[s + j] - lo
        q = (v >> sh) & mask
        w = slots[q]
        slots[q] = w + 1
        ia[w] = s + j
        la[w] = v
    budget = 4 * m + 64
    for a in range(1, m):
        x = la[a]
        if la[a - 1] <= x:
            continue
        y = ia[a]
        b = a - 1
        while b >= 0 and la[b] > x:
            la[b + 1] = la[b]
            ia[b + 1] = ia[b]
            b -= 1
        la[b + 1] = x
        ia[b + 1] = y
        budget -= a - b
        if budget < 0:
            for j in range(m):
                ia[j] = s + j
                la[j] = rh[s + j] - lo
            ri, rl = _radix_bucket(m, lbits, ia, la, ib, lb, hist)
            for j in range(m):
                ia[j] = ri[j]
                la[j] = rl[j]
            break
    for j in range(m):
        la[j] += lo


@kernel
def _sort_long_run(S, i, j, q0, w, o, ia, la, ib, lb, hist):
    """Order S's rows i..j-1 (one long run of equal hash, all equal before column q0) by columns q0..w-1
    into ``o`` (bucket positions): stable sorts from the last column to q0, skipping the columns on
    which every row of the run agrees (a key's rows of one batch mostly share their time: only its
    values need a sort). A column whose values span few bits relative to the run's length (a key's
    thousands of neighbours among node ids) is sorted by radix passes on its offsets from the least
    (a merge sort there cost 28 ns a row at 2,048 rows, 70 at 100,000); others by a merge sort.
    ``ia``, ``la``, ``ib``, ``lb`` (at least j - i long) and ``hist`` are scratch."""
    n = j - i
    for a in range(n):
        ia[a] = i + a
    logn = 0
    while (1 << logn) < n:
        logn += 1
    for q in range(w - 1, q0 - 1, -1):
        lo = S[q, ia[0]]
        hi = lo
        for a in range(n):
            v = S[q, ia[a]]
            lo = min(lo, v)
            hi = max(hi, v)
        if lo == hi:
            continue
        span = hi - lo  # negative where it wraps: then no radix
        lbits = 0
        while span > 0 and (span >> lbits):
            lbits += 1
        npass = max(1, (lbits + 10) // 11)
        dbits = (lbits + npass - 1) // npass
        if 0 < span and lbits <= RADIX_BITS and npass * (2 * n + (1 << dbits)) < 2 * n * logn:
            for a in range(n):
                la[a] = S[q, ia[a]] - lo
            ri, _ = _radix_bucket(n, lbits, ia, la, ib, lb, hist)
            if ri is not ia:
                for a in range(n):
                    ia[a] = ri[a]
        else:
            col = np.empty(n, np.int64)
            for a in range(n):
                col[a] = S[q, ia[a]]
            order = np.argsort(col, kind="mergesort")
            for a in range(n):
                ib[a] = ia[order[a]]
            for a in range(n):
                ia[a] = ib[a]
    for a in range(n):
        o[i + a] = ia[a]


@kernel
def form_buckets(cnt, hs, ks, vs, ts, ds, rh, rk, rv, rt, rd, koff):
    """Order each bucket's rows (hs, ks, vs, ts, ds: hashes, keys, vals, times, diffs; buckets
    cnt[b]:cnt[b+1]) by (hash, key, val, time), consolidate them and write the batch arrays: distinct
    keys' hashes and keys to rh[:nk] and rk[:, :nk], their row offsets to koff[:nk+1], rows to
    rv[:, :nr], rt[:nr], rd[:nr]. The outputs may be the inputs themselves (written in place) and koff
    may be ``hs`` when there is one bucket. Returns (nk, nr).

    Per bucket (its rows are in cache): order by hash through an index, and gather the rows in that
    order into a column-major scratch S (rows: hash, keys, vals, times, diff), one column at a time (a
    tight gather loop each: a row-major copy cost four times as much); then order each run of equal
    hash (mostly one key's rows) by (key, val, time) on S's contiguous stretches, and consolidate by
    comparing neighbours column by column. In place, the output never overtakes the bucket being read,
    as consolidation only shrinks, and a bucket is read whole before it is written. (Loops are written
    out: a helper taking arrays costs reference counting per call.) Where equal updates sum to a
    multiplicity of 2**62 or more, returns (-1, row): int64 sums of such would wrap."""
    nb = cnt.shape[0] - 1
    kk = ks.shape[0]
    kv = vs.shape[0]
    d = ts.shape[1]
    w = 1 + kk + kv + d  # compared columns; the diff is column w
    mmax = 0
    for b in range(nb):
        mmax = max(mmax, cnt[b + 1] - cnt[b])
    oi = np.empty(mmax, np.int64)  # a bucket's rows in hash order
    ol = np.empty(mmax, np.int64)  # and their hashes
    ib = np.empty(mmax, np.int64)
    lb = np.empty(mmax, np.int64)
    hist = np.empty((4, 1 << 11), np.int64)  # radix passes over at most 44 bits
    slots = np.empty(4 * mmax + 2, np.int64)
    S = np.empty((w + 1, mmax), np.int64)
    o = np.empty(mmax, np.int64)  # a run's order (positions in S)
    tmp = np.empty(mmax, np.int64)
    eq = np.empty(mmax, np.bool_)  # row j equals row j - 1 on every compared column
    sel = np.empty(mmax, np.int64)  # the rows consolidation keeps (first of each equal group)
    sd = np.empty(mmax, np.int64)  # and their summed diffs
    run = np.empty(RANK_RUN, np.int64)  # a run's column being ranked
    nk = 0
    nr = 0
    for b in range(nb):
        s = cnt[b]
        m = cnt[b + 1] - s
        if m == 0:
            continue
        _order_bucket(hs, s, m, oi, ol, ib, lb, hist, slots)
        for j in range(m):
            S[0, j] = ol[j]
        for c in range(kk):
            for j in range(m):
                S[1 + c, j] = ks[c, oi[j]]
        for c in range(kv):
            for j in range(m):
                S[1 + kk + c, j] = vs[c, oi[j]]
        for c in range(d):
            for j in range(m):
                S[1 + kk + kv + c, j] = ts[oi[j], c]
        for j in range(m):
            S[w, j] = ds[oi[j]]
        # runs of equal hash (mostly one key's rows) in (key, val, time) order: on the first compared
        # column where the run's rows differ, ranked by counting (branch-free: an insertion sort
        # mispredicts about once per row on random data), by insertion where that column ties; then the
        # run's stretch of each later column permuted into that order
        i = 0
        while i < m:
            h = S[0, i]
            j = i + 1
            while j < m and S[0, j] == h:
                j += 1
            if j - i > 1:
                q0 = 1  # the first compared column on which the run's rows differ
                while q0 < w:
                    a = i + 1
                    while a < j and S[q0, a] == S[q0, i]:
                        a += 1
                    if a < j:
                        break
                    q0 += 1
                if q0 < w:  # (all equal: consolidation sums them)
                    if j - i > RANK_RUN:
                        _sort_long_run(S, i, j, q0, w, o, oi, ol, ib, lb, hist)
                    else:
                        for a in range(i, j):
                            o[a] = -1
                        # on a copy of the column in a small local array: read from S itself, the
                        # counting loop is not vectorized (the stores to o might alias it), 5x slower
                        for a in range(j - i):
                            run[a] = S[q0, i + a]
                        for a in range(j - i):
                            v = run[a]
                            lt = 0
                            for b2 in range(j - i):
                                lt += run[b2] < v
                            o[i + lt] = i + a
                        tie = False
                        for a in range(i, j):
                            tie |= o[a] < 0  # equal values share a rank
                        if tie and j - i > SHORT_RUN:
                            _sort_long_run(S, i, j, q0, w, o, oi, ol, ib, lb, hist)
                        elif tie:  # insertion by every column from q0
                            for a in range(i, j):
                                o[a] = a
                            for a in range(i + 1, j):
                                y = o[a]
                                t = a - 1
                                while t >= i:
                                    x = o[t]
                                    c = 0
                                    q = q0
                                    while c == 0 and q < w:
                                        if S[q, x] != S[q, y]:
                                            c = -1 if S[q, x] < S[q, y] else 1
                                        q += 1
                                    if c <= 0:
                                        break
                                    o[t + 1] = x
                                    t -= 1
                                o[t + 1] = y
                    for c in range(q0, w + 1):
                        for a in range(i, j):
                            tmp[a - i] = S[c, o[a]]
                        for a in range(i, j):
                            S[c, a] = tmp[a - i]
            i = j
        # consolidate (equal (key, val, time) are adjacent now): equal neighbours found column by
        # column, their diffs summed, zero sums dropped; then the kept rows written out column by column
        for j in range(1, m):
            eq[j] = S[0, j] == S[0, j - 1]
        for c in range(1, w):
            for j in range(1, m):
                eq[j] &= S[c, j] == S[c, j - 1]
        ns = 0
        j = 0
        while j < m:
            acc = S[w, j]
            hi = 0
            q = j + 1
            while q < m and eq[q]:
                acc, hi = carried_add(acc, hi, S[w, q])
                q += 1
            if hi != 0:
                acc = carried_total(acc, hi)
                if acc == MAX_MULT:
                    return -1, j
            if acc != 0:
                sel[ns] = j
                sd[ns] = acc
                ns += 1
            j = q
        for t in range(ns):
            p = sel[t]
            if t == 0:
                new = nk == 0 or rh[nk - 1] != S[0, p]
                c = 0
                while not new and c < kk:
                    new = rk[c, nk - 1] != S[1 + c, p]
                    c += 1
            else:
                x = sel[t - 1]
                new = S[0, p] != S[0, x]
                c = 0
                while not new and c < kk:
                    new = S[1 + c, p] != S[1 + c, x]
                    c += 1
            if new:
                rh[nk] = S[0, p]
                for c in range(kk):
                    rk[c, nk] = S[1 + c, p]
                koff[nk] = nr + t
                nk += 1
        for c in range(kv):
            for t in range(ns):
                rv[c, nr + t] = S[1 + kk + c, sel[t]]
        for c in range(d):
            for t in range(ns):
                rt[nr + t, c] = S[1 + kk + kv + c, sel[t]]
        for t in range(ns):
            rd[nr + t] = sd[t]
        nr += ns
    koff[nk] = nr
    return nk, nr


TINY_ROWS = 32  # formations of at most this many rows take form_tiny: one call, no buckets or scratch


@kernel
def form_tiny(hs, ks, vs, ts, ds, fill):
    """``form_buckets`` of a few rows in one call, for the single updates that inputs and loop rounds
    seal most often (there, the calls and scratch around the kernel cost more than ordering the rows):
    rows put in (hash, key, val, time) order by insertion, equal ones summed, zeros dropped. Returns the
    batch arrays at their size (kh, keys, koff, vals, times, diffs) and -1 where a sum reaches
    ``MAX_MULT`` (else 0). Where ``ts`` has no columns and ``fill`` has some, every row is at time
    ``fill`` (the caller knew the one time and left the times out)."""
    n = ds.shape[0]
    kk = ks.shape[0]
    kv = vs.shape[0]
    o = np.empty(n, np.int64)
    for a in range(n):
        b = a - 1
        while b >= 0:
            x = o[b]
            c = -1 if hs[x] < hs[a] else (1 if hs[x] > hs[a] else cmp_update(ks, vs, ts, x, a))
            if c <= 0:
                break
            o[b + 1] = x
            b -= 1
        o[b + 1] = a
    sel = np.empty(n, np.int64)
    sd = np.empty(n, np.int64)
    ns = 0
    j = 0
    while j < n:
        acc = ds[o[j]]
        hi = 0
        q = j + 1
        while q < n and hs[o[q]] == hs[o[j]] and cmp_update(ks, vs, ts, o[q], o[j]) == 0:
            acc, hi = carried_add(acc, hi, ds[o[q]])
            q += 1
        if hi != 0:
            acc = carried_total(acc, hi)
            if acc == MAX_MULT:
                ns = -1
                break
        if acc != 0:
            sel[ns] = o[j]
            sd[ns] = acc
            ns += 1
        j = q
    status = 0
    if ns < 0:
        ns = 0
        status = -1
    nk = 0
    for t in range(ns):
        if t == 0 or hs[sel[t]] != hs[sel[t - 1]] or cmp_cols(ks, sel[t], ks, sel[t - 1]) != 0:
            nk += 1
    okh = np.empty(nk, np.int64)
    okeys = np.empty((kk, nk), np.int64)
    koff = np.empty(nk + 1, np.int64)
    ovals = np.empty((kv, ns), np.int64)
    d = ts.shape[1] if ts.shape[1] or fill.shape[0] == 0 else fill.shape[0]
    otimes = np.empty((ns, d), np.int64)
    odiffs = np.empty(ns, np.int64)
    k = 0
    for t in range(ns):
        p = sel[t]
        if t == 0 or hs[p] != hs[sel[t - 1]] or cmp_cols(ks, p, ks, sel[t - 1]) != 0:
            okh[k] = hs[p]
            for c in range(kk):
                okeys[c, k] = ks[c, p]
            koff[k] = t
            k += 1
        for c in range(kv):
            ovals[c, t] = vs[c, p]
        for c in range(d):
            otimes[t, c] = ts[p, c] if ts.shape[1] else fill[c]
        odiffs[t] = sd[t]
    koff[nk] = ns
    return okh, okeys, koff, ovals, otimes, odiffs, status
