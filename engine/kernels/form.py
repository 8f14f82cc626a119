"""Batch formation: put updates in arrangement order, sum diffs of equal (key, val, time), drop zeros,
and build the per-key index (distinct keys, their hashes and row offsets).

Rows arrive distributed into buckets by their key hash (engine/kernels/exchange.py exchange_rows), each
a contiguous hash range small enough to stay in cache while it is ordered by the rest of the
hash, its runs of equal hash put in (key, val, time) order, and consolidated. A single global sort of
packed words followed by a gather of every column through the permutation costs a cache and TLB miss
per row and column, which on large batches was several times the sort itself.
"""
import numpy as np

from . import MAX_MULT, kernel


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


SHORT_RUN = 24  # runs of equal hash up to this long are ranked by counting, longer ones merge sorted


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
def _sort_long_run(oi, i, j, q0, rk, rv, rt):
    """Order oi[i:j] (rows of one long run of equal hash, all equal before compared column q0) by
    columns q0.. (keys, then vals, then times; 1-based): stable sorts from the last column to q0,
    skipping the columns on which every row of the run agrees (a key's rows of one batch mostly share
    their time: only its values need a sort)."""
    kk = rk.shape[0]
    kv = rv.shape[0]
    w = 1 + kk + kv + rt.shape[1]
    seg = oi[i:j].copy()
    col = np.empty(j - i, np.int64)
    for q in range(w - 1, q0 - 1, -1):
        same = True
        for a in range(j - i):
            if q <= kk:
                col[a] = rk[q - 1, seg[a]]
            elif q <= kk + kv:
                col[a] = rv[q - 1 - kk, seg[a]]
            else:
                col[a] = rt[seg[a], q - 1 - kk - kv]
            same &= col[a] == col[0]
        if not same:
            seg = seg[np.argsort(col, kind="mergesort")]
    oi[i:j] = seg


@kernel
def form_buckets(cnt, hs, ks, vs, ts, ds, rh, rk, rv, rt, rd, koff):
    """Order each bucket's rows (hs, ks, vs, ts, ds: hashes, keys, vals, times, diffs; buckets
    cnt[b]:cnt[b+1]) by (hash, key, val, time), consolidate them and write the batch arrays: distinct
    keys' hashes and keys to rh[:nk] and rk[:, :nk], their row offsets to koff[:nk+1], rows to
    rv[:, :nr], rt[:nr], rd[:nr]. The outputs may be the inputs themselves (written in place) and koff
    may be ``hs`` when there is one bucket. Returns (nk, nr).

    Per bucket (its rows are in cache): order by hash, then each run of equal hash (mostly one key's
    rows) by (key, val, time), all through an index; then copy the rows in that order into one row-major
    scratch matrix S (columns: hash, keys, vals, times, diff), where consolidation compares neighbours.
    In place, the output never overtakes the bucket being read, as consolidation only shrinks, and a
    bucket is read whole before it is written. (Loops are written out: a helper taking arrays costs
    reference counting per call.) Where equal updates sum to a multiplicity of 2**62 or more, returns
    (-1, row): int64 sums of such would wrap."""
    nb = cnt.shape[0] - 1
    kk = ks.shape[0]
    kv = vs.shape[0]
    d = ts.shape[1]
    w = 1 + kk + kv + d  # compared columns; the diff is column w
    mmax = 0
    for b in range(nb):
        mmax = max(mmax, cnt[b + 1] - cnt[b])
    oi = np.empty(mmax, np.int64)  # a bucket's rows in order
    ol = np.empty(mmax, np.int64)  # and their hashes
    ib = np.empty(mmax, np.int64)
    lb = np.empty(mmax, np.int64)
    hist = np.empty((4, 1 << 11), np.int64)  # radix passes over at most 44 bits
    slots = np.empty(4 * mmax + 2, np.int64)
    S = np.empty((mmax, w + 1), np.int64)
    o = np.empty(mmax, np.int64)
    pv = np.empty(mmax, np.int64)
    nk = 0
    nr = 0
    for b in range(nb):
        s = cnt[b]
        m = cnt[b + 1] - s
        if m == 0:
            continue
        _order_bucket(hs, s, m, oi, ol, ib, lb, hist, slots)
        # runs of equal hash (mostly one key's rows) in (key, val, time) order, by reordering ``oi``: on
        # the first column where the run's rows differ, ranked by counting (branch-free: an insertion
        # sort mispredicts about once per row on random data), by insertion where that column ties
        i = 0
        while i < m:
            h = ol[i]
            j = i + 1
            while j < m and ol[j] == h:
                j += 1
            if j - i > 1:
                # q0: the first compared column on which the run's rows differ; pv: their values there
                q0 = 1
                while q0 < w:
                    if q0 <= kk:
                        for a in range(i, j):
                            pv[a] = ks[q0 - 1, oi[a]]
                    elif q0 <= kk + kv:
                        for a in range(i, j):
                            pv[a] = vs[q0 - 1 - kk, oi[a]]
                    else:
                        for a in range(i, j):
                            pv[a] = ts[oi[a], q0 - 1 - kk - kv]
                    a = i + 1
                    while a < j and pv[a] == pv[i]:
                        a += 1
                    if a < j:
                        break
                    q0 += 1
                if q0 == w:
                    pass  # all equal: consolidation sums them
                elif j - i > SHORT_RUN:
                    _sort_long_run(oi, i, j, q0, ks, vs, ts)
                else:
                    for a in range(i, j):
                        o[a] = -1
                    for a in range(i, j):
                        v = pv[a]
                        lt = 0
                        for b2 in range(i, j):
                            lt += pv[b2] < v
                        o[i + lt] = oi[a]
                    tie = False
                    for a in range(i, j):
                        tie |= o[a] < 0  # equal values share a rank
                    if not tie:
                        for a in range(i, j):
                            oi[a] = o[a]
                    else:
                        for a in range(i + 1, j):
                            v = pv[a]
                            y = oi[a]
                            t = a - 1
                            while t >= i:
                                u = pv[t]
                                if u < v:
                                    break
                                if u == v:
                                    c = 0
                                    q = q0 + 1
                                    while c == 0 and q < w:
                                        if q <= kk:
                                            x1 = ks[q - 1, oi[t]]
                                            x2 = ks[q - 1, y]
                                        elif q <= kk + kv:
                                            x1 = vs[q - 1 - kk, oi[t]]
                                            x2 = vs[q - 1 - kk, y]
                                        else:
                                            x1 = ts[oi[t], q - 1 - kk - kv]
                                            x2 = ts[y, q - 1 - kk - kv]
                                        if x1 != x2:
                                            c = -1 if x1 < x2 else 1
                                        q += 1
                                    if c <= 0:
                                        break
                                pv[t + 1] = u
                                oi[t + 1] = oi[t]
                                t -= 1
                            pv[t + 1] = v
                            oi[t + 1] = y
            i = j
        for j in range(m):
            p = oi[j]
            S[j, 0] = ol[j]
            for c in range(kk):
                S[j, 1 + c] = ks[c, p]
            for c in range(kv):
                S[j, 1 + kk + c] = vs[c, p]
            for c in range(d):
                S[j, 1 + kk + kv + c] = ts[p, c]
            S[j, w] = ds[p]
        # consolidate (equal (key, val, time) are adjacent now) and write out
        j = 0
        while j < m:
            acc = S[j, w]
            q = j + 1
            while q < m:
                c = 0
                while c < w and S[q, c] == S[j, c]:
                    c += 1
                if c < w:
                    break
                acc += S[q, w]
                if acc >= MAX_MULT or acc <= -MAX_MULT:
                    return -1, j  # (each diff is below it: a sum checked at every step cannot wrap)
                q += 1
            if acc != 0:
                new = nk == 0 or rh[nk - 1] != S[j, 0]
                c = 0
                while not new and c < kk:
                    new = rk[c, nk - 1] != S[j, 1 + c]
                    c += 1
                if new:
                    rh[nk] = S[j, 0]
                    for c in range(kk):
                        rk[c, nk] = S[j, 1 + c]
                    koff[nk] = nr
                    nk += 1
                for c in range(kv):
                    rv[c, nr] = S[j, 1 + kk + c]
                for c in range(d):
                    rt[nr, c] = S[j, 1 + kk + kv + c]
                rd[nr] = acc
                nr += 1
            j = q
    koff[nk] = nr
    return nk, nr
