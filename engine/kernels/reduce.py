"""Reduce kernels, correct for partially ordered times (K-Pg section 5.3.2).

Per key, the output may change at any lub of input times, including lubs that never appear in the input.
The work is split in three phases so that the user's function never sits inside the cached kernels:

1. ``reduce_times``: from the seed times (new input times and pending work), the closure of lubs with the
   key's input and output histories; the closure times not in advance of the input frontier are ready (the rest is
   future pending work); for each ready time, the key's input accumulated as of that time.
2. ``reduce_apply`` (built-in reductions) or ``reduce_apply_user`` (a user's ``@njit`` function): the
   desired output for each (key, ready time).
3. ``reduce_diff``: in time order per key, the desired output minus the output accumulated so far
   (history plus corrections already made at earlier times) gives the corrections to emit.

Cost. A key's history from before its seeds collapses onto the seeds' meet (DD's "advance by the meet" in
its history replay), and when the key's times are then totally ordered (always at depth 1; inside a loop,
whenever one epoch's rounds are all that is in play) phases 1 and 3 each sweep them once in time order,
updating running accumulations: a backlog of T epochs for one key costs O((T + updates) log) plus the
accumulations handed to phase 2, not T re-accumulations of the whole history. Times that are not totally
ordered take the general route: the lub closure through a hash set of times, and a scan of the key's
updates per ready time.
"""
import numpy as np
from numba import njit

from . import MAX_MULT, helper, kernel, multiplicity_overflow
from .rows import cmp_cols, cmp_times, cmp_val_time, in_advance, leq_time
from .seek import merge_order
from .sort import mix64, sort_index_segment

COUNT, SUM, MIN, MAX, DISTINCT, ARGMIN, ARGMAX, TOPK, THRESHOLD = range(9)
INT_MAX = np.int64(2**63 - 1)
INT_MIN = np.int64(-2**63)
SMALL = np.int64(2**31)  # an int64 sum term of two factors below this in magnitude cannot overflow
MODE_INT, MODE_FLOAT, MODE_RANK = 0, 1, 2


@helper
def _grow1(a, need):
    """``a`` with room for ``need`` entries (at least doubled), contents kept. The outer loops below run
    once per buffer growth, not per row."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), np.int64)
    b[:a.shape[0]] = a
    return b


@helper
def _grow_rows(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty((max(need, 2 * a.shape[0]), a.shape[1]), np.int64)
    b[:a.shape[0]] = a
    return b


@helper
def _grow_cols(a, need):
    if need <= a.shape[1]:
        return a
    b = np.empty((a.shape[0], max(need, 2 * a.shape[1])), np.int64)
    b[:, :a.shape[1]] = a
    return b


@kernel
def _sort_rows_by_vals_long(idx, n, vals, tmp, none2d):
    sort_index_segment(idx, 0, n, none2d, vals, none2d, tmp)


@kernel
def _sort_rows_by_time_long(idx, n, times, tmp, none2d):
    sort_index_segment(idx, 0, n, none2d, none2d, times, tmp)


@helper
def _sort_rows_by_vals(idx, n, vals, tmp, none2d):
    """Sort idx[:n] by the value columns of the rows it points at (stable). Phases 1 and 3 sort each
    key's few rows: inlined here, and with the comparison tested in the loop's body (read in the loop's
    condition, an inlined comparison compiled 3x slower in a microbenchmark), phase 1 takes a third less
    time on BFS's and WCC's rounds than through sort_index_segment's generic (key, val, time) sort."""
    if n > 24:
        _sort_rows_by_vals_long(idx, n, vals, tmp, none2d)
        return
    for a in range(1, n):
        x = idx[a]
        b = a - 1
        while b >= 0:
            if cmp_cols(vals, idx[b], vals, x) <= 0:
                break
            idx[b + 1] = idx[b]
            b -= 1
        idx[b + 1] = x


@helper
def _sort_rows_by_time(idx, n, times, tmp, none2d):
    """Sort idx[:n] by the time rows it points at, lexicographically (a linear extension of the product
    order); stable; inlined as _sort_rows_by_vals."""
    if n > 24:
        _sort_rows_by_time_long(idx, n, times, tmp, none2d)
        return
    for a in range(1, n):
        x = idx[a]
        b = a - 1
        while b >= 0:
            if cmp_times(times, idx[b], times, x) <= 0:
                break
            idx[b + 1] = idx[b]
            b -= 1
        idx[b + 1] = x


@kernel
def _sort_ints(a, n, tmp):
    """Sort a[:n] ascending: insertion sort when short, a bottom-up merge sort through ``tmp`` (at least
    n long) otherwise."""
    if n <= 16:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return
    width = 1
    in_a = True
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            k = lo
            while k < hi:
                if in_a:
                    take_j = i >= mid or (j < hi and a[j] < a[i])
                    if take_j:
                        tmp[k] = a[j]
                        j += 1
                    else:
                        tmp[k] = a[i]
                        i += 1
                else:
                    take_j = i >= mid or (j < hi and tmp[j] < tmp[i])
                    if take_j:
                        a[k] = tmp[j]
                        j += 1
                    else:
                        a[k] = tmp[i]
                        i += 1
                k += 1
            lo = hi
        in_a = not in_a
        width *= 2
    if not in_a:
        for i in range(n):
            a[i] = tmp[i]


@helper
def _time_hash(times, r, mask):
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(times.shape[1]):
        h = mix64(h ^ np.uint64(times[r, c]))
    return np.int64(h & np.uint64(mask))


@helper
def _hash_add(C, nc, times, r, HT, stamp):
    """Add time row times[r] to the distinct rows C[:nc], indexed by the open-addressing table HT (row 0:
    the stamp of the key that filled a slot, row 1: the index into C; slots of other stamps are empty).
    Returns the new count, or -1 when C is full."""
    d = C.shape[1]
    mask = HT.shape[1] - 1
    h = _time_hash(times, r, mask)
    while HT[0, h] == stamp:
        i = HT[1, h]
        same = True
        for c in range(d):
            if C[i, c] != times[r, c]:
                same = False
                break
        if same:
            return nc
        h = (h + 1) & mask
    if nc == C.shape[0]:
        return -1
    for c in range(d):
        C[nc, c] = times[r, c]
    HT[0, h] = stamp
    HT[1, h] = nc
    return nc + 1


@helper
def _same_vals(vals, i, j):
    for c in range(vals.shape[0]):
        if vals[c, i] != vals[c, j]:
            return False
    return True


# Phases 1 and 3 never reallocate inside their loops (numba then cannot keep arrays in registers, which
# measured 10x slower): an inner "run" kernel works through keys until a buffer would overflow, rolls back
# the key in progress and returns which buffer and how large it must be (counts[P1_NEED_AT] or
# counts[P3_NEED_AT]); the outer kernel grows that buffer and resumes. The outer loops are kernels too
# (``_reduce_times``, ``_reduce_diff``): as Python they cost a step over a few keys more than its work
# (16 allocations and a 25-argument call). numba re-optimizes the run kernel inside each, which costs
# about 6 s more compilation once after an install (bench/README.md, bench.coldstart).
NEED_NONE, NEED_SCRATCH, NEED_GROUPS, NEED_ACC, NEED_FUTURE, NEED_ROWS, NEED_X = range(7)
# counts[]: phase 1: groups, acc entries, future times, work, the size a NEED asks for, key attempts, keys
#           that took the general (not totally ordered) route, whether a multiplicity reached 2**62
#           phase 3: corrections, work, the size a NEED asks for, keys that took the general route
P1_WORK, P1_NEED_AT, P1_ATTEMPTS, P1_GENERAL, P1_OVERFLOW = 3, 4, 5, 6, 7
P3_WORK, P3_NEED_AT, P3_GENERAL = 1, 2, 3
# What phase 1 lists of a group's accumulated input (``listing``): every value of non-zero multiplicity
# (in value order); only the first, or only the last, value of positive multiplicity (all that MIN and MAX
# over one column read); or one entry holding the total multiplicity (COUNT).
LIST_ALL, LIST_FIRST, LIST_LAST, LIST_TOTAL = range(4)


@kernel
def _times_run(p0, ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing,
               g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, X, XI, C, CI, HT, RW, counts):
    """Phase 1 from key p0 on. Per key, with m the meet of its seed times, every history time h (input and
    output) is replaced by lub(h, m): every closure time is >= m, and for t >= m, h <= t iff lub(h, m) <= t,
    so closure and accumulations are unchanged, while history from before the seeds collapses onto m.

    Chain case (the seeds and the advanced history times totally ordered, as always at depth 1): the
    closure is exactly those times (each is >= m, the least seed, so lub(m, h') = h'); one sweep in time
    order accumulates the input, adding each update once, and lists each ready time's accumulation:
    O((S + R + O) log) for a key of S seeds, R input and O output updates, plus the accumulations listed
    (one entry per ready time for a count).

    Otherwise: the closure of the seeds under lub with the distinct advanced history times (a hash set of
    times, O(|closure| x |history times|)), and each ready time's accumulation by a scan of the rows."""
    m = ioff.shape[0] - 1
    d = itimes.shape[1]
    none2d = np.empty((0, 0), np.int64)
    meet = np.empty((1, d), np.int64)
    lub = np.empty((1, d), np.int64)
    ng = counts[0]
    na = counts[1]
    nf = counts[2]
    work = counts[P1_WORK]
    general = counts[P1_GENERAL]
    xi = XI[0]
    xt = XI[1]
    hl = XI[2]
    ready = CI[0]
    rtmp = CI[1]
    idx = RW[0]
    tmp = RW[1]
    vid = RW[2]
    rep = RW[3]
    cnt = RW[4]
    inact = RW[5]
    act = RW[6]
    act2 = RW[7]
    new = RW[8]
    ntmp = RW[9]
    pos = RW[8]  # LIST_FIRST, LIST_LAST: the Fenwick tree (new and ntmp serve LIST_ALL only)
    for p in range(p0, m):
        s0 = soff[p]
        s1 = soff[p + 1]
        if s1 == s0:
            continue
        counts[0] = ng
        counts[1] = na
        counts[2] = nf
        counts[P1_WORK] = work
        counts[P1_GENERAL] = general
        counts[P1_ATTEMPTS] += 1
        stamp = counts[P1_ATTEMPTS]
        r0 = ioff[p]
        r1 = ioff[p + 1]
        o0 = ooff[p]
        o1 = ooff[p + 1]
        S = s1 - s0
        R = r1 - r0
        O = o1 - o0
        n = S + R + O
        if n > X.shape[0]:
            counts[P1_NEED_AT] = n
            return p, NEED_X
        if listing != LIST_TOTAL and R + 1 > RW.shape[1]:
            counts[P1_NEED_AT] = R + 1
            return p, NEED_ROWS
        # the meet of the seeds; entries: seeds, then input and output history advanced by the meet
        for c in range(d):
            meet[0, c] = stimes[s0, c]
        for s in range(s0 + 1, s1):
            for c in range(d):
                meet[0, c] = min(meet[0, c], stimes[s, c])
        for e in range(S):
            for c in range(d):
                X[e, c] = stimes[s0 + e, c]
        for e in range(R):
            for c in range(d):
                X[S + e, c] = max(itimes[r0 + e, c], meet[0, c])
        for e in range(O):
            for c in range(d):
                X[S + R + e, c] = max(otimes[o0 + e, c], meet[0, c])
        for e in range(n):
            xi[e] = e
        _sort_rows_by_time(xi, n, X, xt, none2d)
        chain = True
        for a in range(1, n):
            if not leq_time(X, xi[a - 1], X, xi[a]):
                chain = False
                break
        kwork = n
        if listing != LIST_TOTAL:
            # the key's input rows in value order (the order phase 2 reads a group's values in)
            for r in range(R):
                idx[r] = r0 + r
            if R > 1:
                _sort_rows_by_vals(idx, R, ivals, tmp, none2d)
        if chain:
            # value ids in value order; in LIST_FIRST/LIST_LAST, pos[1..nv] is a Fenwick tree counting the
            # values of positive multiplicity
            nv = 0
            if listing != LIST_TOTAL:
                for a in range(R):
                    r = idx[a]
                    if a == 0 or not _same_vals(ivals, r, idx[a - 1]):
                        rep[nv] = r
                        cnt[nv] = 0
                        inact[nv] = 0
                        nv += 1
                    vid[r - r0] = nv - 1
                if listing != LIST_ALL:
                    for v in range(nv + 1):
                        pos[v] = 0
            top = 1
            while 2 * top <= nv:
                top *= 2
            npos = 0
            nact = 0
            total = 0
            a = 0
            while a < n:
                # one distinct time: apply its input updates
                t = xi[a]
                nn = 0
                b = a
                while b < n and (b == a or cmp_times(X, xi[b], X, t) == 0):
                    e = xi[b]
                    if e >= S and e < S + R:
                        w = idiffs[r0 + e - S]
                        if listing == LIST_TOTAL:
                            total += w
                            if total >= MAX_MULT or total <= -MAX_MULT:
                                counts[P1_OVERFLOW] = 1
                        elif listing == LIST_ALL:
                            v = vid[e - S]
                            cnt[v] += w
                            if cnt[v] >= MAX_MULT or cnt[v] <= -MAX_MULT:
                                counts[P1_OVERFLOW] = 1
                            if inact[v] == 0:
                                inact[v] = 1
                                new[nn] = v
                                nn += 1
                        else:
                            v = vid[e - S]
                            was = cnt[v] > 0
                            cnt[v] += w
                            if cnt[v] >= MAX_MULT or cnt[v] <= -MAX_MULT:
                                counts[P1_OVERFLOW] = 1
                            now = cnt[v] > 0
                            if was != now:
                                delta = 1 if now else -1
                                npos += delta
                                i = v + 1
                                while i <= nv:
                                    pos[i] += delta
                                    i += i & (-i)
                                kwork += 1
                    b += 1
                if nn > 0:
                    # merge the values that became active into the active list, in value order
                    _sort_ints(new, nn, ntmp)
                    i = 0
                    j = 0
                    k = 0
                    while i < nact or j < nn:
                        if j >= nn or (i < nact and act[i] < new[j]):
                            v = act[i]
                            i += 1
                        else:
                            v = new[j]
                            j += 1
                        if cnt[v] != 0:
                            act2[k] = v
                            k += 1
                        else:
                            inact[v] = 0
                    kwork += nact + nn
                    act, act2 = act2, act
                    nact = k
                if in_advance(X, t, upper):
                    if nf >= f_key.shape[0]:
                        counts[P1_NEED_AT] = nf + 1
                        return p, NEED_FUTURE
                    f_key[nf] = p
                    for c in range(d):
                        f_time[nf, c] = X[t, c]
                    nf += 1
                else:
                    if ng + 2 > g_key.shape[0]:
                        counts[P1_NEED_AT] = ng + 2
                        return p, NEED_GROUPS
                    if na + nact + 1 > acc_row.shape[0]:
                        counts[P1_NEED_AT] = na + nact + 1
                        return p, NEED_ACC
                    g_key[ng] = p
                    for c in range(d):
                        g_time[ng, c] = X[t, c]
                    g_off[ng] = na
                    if listing == LIST_TOTAL:
                        if total != 0:
                            acc_row[na] = r0
                            acc_cnt[na] = total
                            na += 1
                    elif listing == LIST_ALL:
                        k = 0
                        for j in range(nact):
                            v = act[j]
                            if cnt[v] != 0:
                                acc_row[na] = rep[v]
                                acc_cnt[na] = cnt[v]
                                na += 1
                                act[k] = v
                                k += 1
                            else:
                                inact[v] = 0
                        kwork += nact
                        nact = k
                    elif npos > 0:
                        # the first (or last) value of positive multiplicity: the least index whose prefix
                        # count reaches 1 (or npos), by descending the Fenwick tree
                        want = 1 if listing == LIST_FIRST else npos
                        i = 0
                        step = top
                        while step > 0:
                            if i + step <= nv and pos[i + step] < want:
                                i += step
                                want -= pos[i]
                            step //= 2
                            kwork += 1
                        acc_row[na] = rep[i]
                        acc_cnt[na] = cnt[i]
                        na += 1
                    ng += 1
                a = b
            work += kwork
            continue
        # -- general partial order: the closure under lub, then accumulations by scanning --------------
        if HT.shape[1] < 2 * C.shape[0]:
            counts[P1_NEED_AT] = C.shape[0]
            return p, NEED_SCRATCH
        nh = 0
        for a in range(n):
            e = xi[a]
            if e >= S and (nh == 0 or cmp_times(X, hl[nh - 1], X, e) != 0):
                hl[nh] = e
                nh += 1
        nc = 0
        for s in range(s0, s1):
            nc = _hash_add(C, nc, stimes, s, HT, stamp)
            if nc < 0:
                counts[P1_NEED_AT] = 2 * C.shape[0]
                return p, NEED_SCRATCH
        i = 0
        while i < nc:
            for h in range(nh):
                for c in range(d):
                    lub[0, c] = max(C[i, c], X[hl[h], c])
                nc = _hash_add(C, nc, lub, 0, HT, stamp)
                if nc < 0:
                    counts[P1_NEED_AT] = 2 * C.shape[0]
                    return p, NEED_SCRATCH
            i += 1
        kwork += nc * nh
        general += 1
        nready = 0
        for i in range(nc):
            if in_advance(C, i, upper):
                if nf >= f_key.shape[0]:
                    counts[P1_NEED_AT] = nf + nc
                    return p, NEED_FUTURE
                f_key[nf] = p
                for c in range(d):
                    f_time[nf, c] = C[i, c]
                nf += 1
            else:
                ready[nready] = i
                nready += 1
        if nready == 0:
            work += kwork
            continue
        _sort_rows_by_time(ready, nready, C, rtmp, none2d)
        if ng + nready + 1 > g_key.shape[0]:
            counts[P1_NEED_AT] = ng + nready + 1
            return p, NEED_GROUPS
        for q in range(nready):
            ci = ready[q]
            if na + max(R, 1) > acc_row.shape[0]:
                counts[P1_NEED_AT] = na + max(R, 1)
                return p, NEED_ACC
            g_key[ng] = p
            for c in range(d):
                g_time[ng, c] = C[ci, c]
            g_off[ng] = na
            if listing == LIST_TOTAL:
                total = 0
                for r in range(r0, r1):
                    if leq_time(X, S + r - r0, C, ci):
                        total += idiffs[r]
                        if total >= MAX_MULT or total <= -MAX_MULT:
                            counts[P1_OVERFLOW] = 1
                if total != 0:
                    acc_row[na] = r0
                    acc_cnt[na] = total
                    na += 1
            else:
                a = 0
                while a < R:
                    ra = idx[a]
                    total = 0
                    b = a
                    while b < R:
                        rb = idx[b]
                        if b > a and not _same_vals(ivals, rb, ra):
                            break
                        if leq_time(X, S + rb - r0, C, ci):
                            total += idiffs[rb]
                            if total >= MAX_MULT or total <= -MAX_MULT:
                                counts[P1_OVERFLOW] = 1
                        b += 1
                    if total > 0 or (total != 0 and listing == LIST_ALL):
                        if listing == LIST_LAST:
                            na = g_off[ng]  # only the last value of positive multiplicity
                        acc_row[na] = ra
                        acc_cnt[na] = total
                        na += 1
                        if listing == LIST_FIRST:
                            break
                    a = b
            ng += 1
        kwork += nready * R
        work += kwork
    counts[0] = ng
    counts[1] = na
    counts[2] = nf
    counts[P1_WORK] = work
    counts[P1_GENERAL] = general
    return m, NEED_NONE


@helper
def _pow2(n):
    """The least power of two >= n, at least 16."""
    b = 4
    while (1 << b) < n:
        b += 1
    return 1 << b


def reduce_times(ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing):
    """Phase 1. Returns (g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, work): group g is key
    g_key[g] at ready time g_time[g], whose accumulated input is (row acc_row[a] standing for its value,
    multiplicity acc_cnt[a]) for a in g_off[g]:g_off[g+1], listed in the signed lexicographic order of
    ``ivals`` (pass order keys, see order_keys, for value order); a key's groups come in lexicographic
    time order; (f_key, f_time) is future work; ``work`` is (the times and updates visited, sorting aside;
    the keys whose times were not totally ordered), for tests to check how the cost grows."""
    (g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time,
     counts) = _reduce_times(ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
    if counts[P1_OVERFLOW]:
        raise multiplicity_overflow()
    return g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, (int(counts[P1_WORK]), int(counts[P1_GENERAL]))


@kernel
def _reduce_times(ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing):
    """``reduce_times`` in one kernel call: its buffers are allocated, and grown whenever ``_times_run``
    asks, without returning to Python (a small step's phase 1 was mostly the cost of a Python loop
    around the kernel and its many arguments). Returns the results and the counters."""
    m = ioff.shape[0] - 1
    d = itimes.shape[1]
    cap = max(16, soff[m] + soff[m] // 4)
    g_key = np.empty(cap, np.int64)
    g_time = np.empty((cap, d), np.int64)
    g_off = np.empty(cap + 1, np.int64)
    acc_row = np.empty(max(16, ioff[m] + cap), np.int64)
    acc_cnt = np.empty(acc_row.shape[0], np.int64)
    f_key = np.empty(64, np.int64)
    f_time = np.empty((64, d), np.int64)
    X = np.empty((64, d), np.int64)
    XI = np.empty((3, 64), np.int64)
    C = np.empty((64, d), np.int64)
    CI = np.empty((2, 64), np.int64)
    HT = np.zeros((2, 128), np.int64)
    RW = np.empty((10, 0 if listing == LIST_TOTAL else 64), np.int64)
    counts = np.zeros(8, np.int64)
    p = 0
    while True:
        p, need = _times_run(p, ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing,
                             g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, X, XI, C, CI, HT, RW, counts)
        if need == NEED_NONE:
            break
        at = int(counts[P1_NEED_AT])
        if need == NEED_X:
            size = max(at, 2 * X.shape[0])
            X = np.empty((size, d), np.int64)
            XI = np.empty((3, size), np.int64)
        elif need == NEED_SCRATCH:
            size = max(at, 2 * C.shape[0])
            C = np.empty((size, d), np.int64)
            CI = np.empty((2, size), np.int64)
            HT = np.zeros((2, _pow2(2 * size)), np.int64)
        elif need == NEED_ROWS:
            RW = np.empty((10, max(at, 2 * RW.shape[1])), np.int64)
        elif need == NEED_GROUPS:
            g_key = _grow1(g_key, at)
            g_time = _grow_rows(g_time, g_key.shape[0])
            g_off = _grow1(g_off, g_key.shape[0] + 1)
        elif need == NEED_ACC:
            acc_row = _grow1(acc_row, at)
            acc_cnt = _grow1(acc_cnt, acc_row.shape[0])
        else:
            f_key = _grow1(f_key, at)
            f_time = _grow_rows(f_time, f_key.shape[0])
    ng, na, nf = counts[0], counts[1], counts[2]
    g_off[ng] = na
    # views, not copies: the phases' results live for one operator step (the output batch is formed
    # into fresh arrays), and copying them cost about a tenth of a distinct's step
    return g_key[:ng], g_time[:ng], g_off[:ng + 1], acc_row[:na], acc_cnt[:na], f_key[:nf], f_time[:nf], counts


# -- value order ---------------------------------------------------------------------------------
# Columns are stored as int64 (floats by their bit pattern, strings as interned ids), which does not order
# floats below zero or strings. Kernels that need value order work on *order keys*: int64 columns whose
# signed order is the value order. int64 and bool map to themselves; a string id maps to the string's
# lexicographic rank (SymbolTable.ranks()); a float's bits map by the classic transform below.

_LOW63 = 0x7FFFFFFFFFFFFFFF
_INF_BITS = 0x7FF0000000000000


@helper
def float_key(b):
    """Order-preserving int64 key of a float64 given by its int64 bit pattern b: for b >= 0 (positive
    floats, +0.0, +inf) the bits themselves, which order positive floats already; for negative floats the
    63 low bits flipped, so a larger magnitude gives a smaller key and every negative key is below every
    non-negative one. -0.0 maps to +0.0's key (0); every NaN, whatever its sign or payload, maps to the
    largest int64, after +inf (as numpy's sort places NaN last)."""
    mag = b & _LOW63
    if mag > _INF_BITS:
        return _LOW63
    if mag == 0:
        return 0
    if b < 0:
        return b ^ _LOW63
    return b


@kernel
def order_keys(vals, modes, rank):
    """Order keys (kv x n) of value columns ``vals`` (kv x n); ``modes[c]`` is column c's MODE_INT,
    MODE_FLOAT or MODE_RANK, ``rank[id]`` a string id's lexicographic rank."""
    kv = vals.shape[0]
    n = vals.shape[1]
    out = np.empty((kv, n), np.int64)
    for c in range(kv):
        m = modes[c]
        if m == MODE_FLOAT:
            for i in range(n):
                out[c, i] = float_key(vals[c, i])
        elif m == MODE_RANK:
            for i in range(n):
                out[c, i] = rank[vals[c, i]]
        else:
            for i in range(n):
                out[c, i] = vals[c, i]
    return out


@helper
def _before(okeys, col, r1, r2):
    """Whether row r1's `col` value orders strictly before row r2's (by their order keys)."""
    return okeys[col, r1] < okeys[col, r2]


@kernel
def reduce_apply(op, g_off, acc_row, acc_cnt, ivals, fvals, okeys, mode, col, k, desc, out, outf):
    """Phase 2 for built-in reductions. ``out`` (ko x len(acc_row)) receives output values (``outf`` is
    its float64 view); returns (des_off, des_cnt, rows used), rows used -1 when an int64 SUM may wrap (a
    product or a partial sum past int64: the caller sums exactly), -2 when a COUNT reaches 2**62 (the
    multiplicities' bound: an error). ``okeys`` are the order keys of ``ivals``
    (see order_keys; only read by MIN, MAX, ARGMIN, ARGMAX and TOPK). Phase 1 listed each group's rows in
    order-key order (lexicographic over the value columns), so taking the first row that is strictly
    better on ``col`` breaks ties by the smallest row, for argmin and argmax alike, and TOPK's stable sort
    keeps tied rows smallest first."""
    G = g_off.shape[0] - 1
    A = acc_row.shape[0]
    kv = ivals.shape[0]
    des_off = np.empty(G + 1, np.int64)
    des_cnt = np.empty(max(A, 1), np.int64)
    n = 0
    cand = np.empty(max(A, 1), np.int64)
    for g in range(G):
        des_off[g] = n
        a0 = g_off[g]
        a1 = g_off[g + 1]
        if a1 == a0:
            continue
        if op == COUNT:
            total = 0
            for a in range(a0, a1):
                total += acc_cnt[a]
                if total >= MAX_MULT or total <= -MAX_MULT:
                    return des_off, des_cnt[:0].copy(), -2  # a count past the multiplicities' bound
            if total != 0:
                out[0, n] = total
                des_cnt[n] = 1
                n += 1
        elif op == SUM:
            if mode == MODE_FLOAT:
                fs = 0.0
                for a in range(a0, a1):
                    fs += fvals[col, acc_row[a]] * acc_cnt[a]
                outf[0, n] = fs
            else:
                s = 0
                for a in range(a0, a1):
                    v = ivals[col, acc_row[a]]
                    c = acc_cnt[a]
                    if not (-SMALL < v < SMALL and -SMALL < c < SMALL):
                        if c != 0 and (v == INT_MIN or abs(v) > INT_MAX // abs(c)):
                            return des_off, des_cnt[:0].copy(), -1  # may wrap: the caller sums exactly
                    p = v * c
                    t = s + p
                    if (s ^ t) & (p ^ t) < 0:
                        return des_off, des_cnt[:0].copy(), -1
                    s = t
                out[0, n] = s
            des_cnt[n] = 1
            n += 1
        elif op == MIN or op == MAX or op == ARGMIN or op == ARGMAX:
            best = -1
            for a in range(a0, a1):
                if acc_cnt[a] <= 0:
                    continue
                r = acc_row[a]
                if best < 0:
                    best = r
                elif op == MIN or op == ARGMIN:
                    if _before(okeys, col, r, best):
                        best = r
                elif _before(okeys, col, best, r):
                    best = r
            if best >= 0:
                if op == MIN or op == MAX:
                    out[0, n] = ivals[col, best]
                else:
                    for c in range(kv):
                        out[c, n] = ivals[c, best]
                des_cnt[n] = 1
                n += 1
        elif op == DISTINCT or op == THRESHOLD:
            for a in range(a0, a1):
                if op == DISTINCT and acc_cnt[a] <= 0:
                    continue
                for c in range(kv):
                    out[c, n] = ivals[c, acc_row[a]]
                des_cnt[n] = 1 if op == DISTINCT else acc_cnt[a]
                n += 1
        elif op == TOPK:
            nc = 0
            for a in range(a0, a1):
                if acc_cnt[a] > 0:
                    cand[nc] = a
                    nc += 1
            # stable insertion-merge by the order column (ties keep value order)
            for x in range(1, nc):
                v = cand[x]
                y = x - 1
                while y >= 0:
                    if desc:
                        later = _before(okeys, col, acc_row[cand[y]], acc_row[v])
                    else:
                        later = _before(okeys, col, acc_row[v], acc_row[cand[y]])
                    if not later:
                        break
                    cand[y + 1] = cand[y]
                    y -= 1
                cand[y + 1] = v
            left = k
            for x in range(nc):
                if left <= 0:
                    break
                a = cand[x]
                take = min(acc_cnt[a], left)
                for c in range(kv):
                    out[c, n] = ivals[c, acc_row[a]]
                des_cnt[n] = take
                left -= take
                n += 1
    des_off[G] = n
    return des_off, des_cnt[:n].copy(), n


@njit(nogil=True)
def reduce_apply_user(fn, g_off, acc_row, acc_cnt, uvals, proto):
    """Phase 2 with a user function fn(values (m x kv), counts (m,)) -> (out (p x ko), counts (p,)).
    ``proto`` is an empty (0 x ko) array of the output dtype. Compiled per user function (not cached:
    the function is an argument). Also returns the first value the output dtype changed (its place,
    -1 if none, and the value: a float for an int64 column), whether a count reached ``MAX_MULT``, the
    first count that is no integer (whether there is one and its value: a multiplicity is whole), and
    ``shape``: (value rows, value columns, counts) of the first call that returned arrays of the wrong
    shape, where the groups stopped, or -1s."""
    G = g_off.shape[0] - 1
    kv = uvals.shape[0]
    ko = proto.shape[1]
    des_off = np.empty(G + 1, np.int64)
    out = np.empty((max(16, G), ko), proto.dtype)
    des_cnt = np.empty(max(16, G), np.int64)
    n = 0
    bad = -1  # the first output value the output dtype cannot hold (row * ko + column), and that value
    badv = 0.0
    over = False  # a count at or past the multiplicity bound
    frac = False  # a count the int64 cast changed (a fraction, NaN), and the first such count
    fracv = 0.0
    shape = np.full(3, -1, np.int64)
    for g in range(G):
        des_off[g] = n
        a0 = g_off[g]
        a1 = g_off[g + 1]
        m = a1 - a0
        if m == 0:
            continue  # a group whose input accumulates to nothing has no output
        vals = np.empty((m, kv), uvals.dtype)
        cnts = np.empty(m, np.int64)
        for a in range(m):
            for c in range(kv):
                vals[a, c] = uvals[c, acc_row[a0 + a]]
            cnts[a] = acc_cnt[a0 + a]
        o, oc = fn(vals, cnts)
        p = o.shape[0]
        if o.shape[1] != ko or oc.shape[0] != p:  # (reported by the caller, which knows the column names)
            shape[0] = p
            shape[1] = o.shape[1]
            shape[2] = oc.shape[0]
            break
        if n + p > out.shape[0]:
            cap = max(n + p, 2 * out.shape[0])
            bigger = np.empty((cap, ko), proto.dtype)
            bc = np.empty(cap, np.int64)
            for q in range(n):  # element loops: a slice assignment compiles numba's shape-error formatting
                for c in range(ko):
                    bigger[q, c] = out[q, c]
                bc[q] = des_cnt[q]
            out = bigger
            des_cnt = bc
        for q in range(p):
            for c in range(ko):
                out[n + q, c] = o[q, c]
                x, y = out[n + q, c], o[q, c]
                # a value the cast changed (a float into int64, an unsigned past int64), NaN included; a
                # NaN kept as NaN in a float column is no change
                if bad < 0 and ((x != y and y == y) or (y != y and x == x)):
                    bad = (n + q) * ko + c
                    badv = o[q, c] * 1.0  # (not float(): a bool column's values have none)
            des_cnt[n + q] = oc[q]
            if oc[q] >= MAX_MULT or oc[q] <= -MAX_MULT:
                over = True
            elif not frac and des_cnt[n + q] != oc[q]:
                frac = True
                fracv = oc[q] * 1.0
        n += p
    des_off[G] = n
    return des_off, des_cnt[:n].copy(), out[:n].copy(), bad, badv, over, frac, fracv, shape


@kernel
def _diff_run(g0, g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs,
              c_key, c_vals, c_time, c_diff, w_vals, w_time, w_diff, cur, des, tmp, X, U, UW, counts):
    """Phase 3 from group g0 on. A key's groups come in lexicographic time order, so a correction made at
    an earlier group that is <= a later group's time is already in the output accumulated there.

    Chain case (the key's group times and its output history times advanced by their meet totally
    ordered, as always at depth 1): one sweep in time order keeps the output accumulated so far per
    distinct value and, per group, visits only the values currently in the output or desired there.
    Otherwise: per group, the output history and the corrections made so far that are <= its time,
    accumulated by a scan."""
    G = g_key.shape[0]
    ko = des_vals.shape[0]
    d = g_time.shape[1]
    none2d = np.empty((0, 0), np.int64)
    pt = np.empty((1, d), np.int64)
    nc = counts[0]
    work = counts[P3_WORK]
    general = counts[P3_GENERAL]
    xi = UW[0]
    xt = UW[1]
    ui = UW[2]
    uvid = UW[3]
    rep = UW[4]
    have = UW[5]
    want = UW[6]
    mark = UW[7]
    inact = UW[8]
    act = UW[9]
    touched = UW[10]
    g = g0
    while g < G:
        counts[0] = nc
        counts[P3_WORK] = work
        counts[P3_GENERAL] = general
        p = g_key[g]
        ge = g
        while ge < G and g_key[ge] == p:
            ge += 1
        h0 = ooff[p]
        h1 = ooff[p + 1]
        nout = h1 - h0
        chain = ge - g > 1
        for q in range(g + 1, ge):
            if not leq_time(g_time, q - 1, g_time, q):
                chain = False
                break
        if chain:
            nd_all = des_off[ge] - des_off[g]
            nu = nout + nd_all
            if nout > X.shape[0] or nu > U.shape[1] or nu > UW.shape[1]:
                counts[P3_NEED_AT] = nu
                return g, NEED_X
            # output history advanced by the meet of the group times (the first, in a chain), in time order
            for r in range(nout):
                xi[r] = r
                for c in range(d):
                    X[r, c] = max(otimes[h0 + r, c], g_time[g, c])
            _sort_rows_by_time(xi, nout, X, xt, none2d)
            # is the merged sequence of group and output times a chain too?
            i = 0
            j = g
            first = True
            while chain and (i < nout or j < ge):
                if j >= ge or (i < nout and cmp_times(X, xi[i], g_time, j) <= 0):
                    if not first and not leq_time(pt, 0, X, xi[i]):
                        chain = False
                    for c in range(d):
                        pt[0, c] = X[xi[i], c]
                    i += 1
                else:
                    if not first and not leq_time(pt, 0, g_time, j):
                        chain = False
                    for c in range(d):
                        pt[0, c] = g_time[j, c]
                    j += 1
                first = False
        if chain:
            # value ids over the output history's and the desired outputs' values
            for r in range(nout):
                for c in range(ko):
                    U[c, r] = ovals[c, h0 + r]
            for j in range(nd_all):
                for c in range(ko):
                    U[c, nout + j] = des_vals[c, des_off[g] + j]
            for k in range(nu):
                ui[k] = k
            if nu > 1:
                _sort_rows_by_vals(ui, nu, U, xt, none2d)
            nv = 0
            for k in range(nu):
                e = ui[k]
                if k == 0 or not _same_vals(U, e, ui[k - 1]):
                    rep[nv] = e
                    have[nv] = 0
                    want[nv] = 0
                    mark[nv] = -1
                    inact[nv] = 0
                    nv += 1
                uvid[e] = nv - 1
            kwork = nout + nu
            nact = 0
            ptr = 0
            for q in range(g, ge):
                while ptr < nout and leq_time(X, xi[ptr], g_time, q):
                    r = xi[ptr]
                    v = uvid[r]
                    have[v] += odiffs[h0 + r]
                    if inact[v] == 0:
                        inact[v] = 1
                        act[nact] = v
                        nact += 1
                    ptr += 1
                nt = 0
                for r in range(des_off[q], des_off[q + 1]):
                    if des_cnt[r] != 0:
                        v = uvid[nout + r - des_off[g]]
                        if mark[v] != q:
                            mark[v] = q
                            touched[nt] = v
                            nt += 1
                        want[v] += des_cnt[r]
                if nc + nact + nt > c_key.shape[0]:
                    counts[P3_NEED_AT] = nc + nact + nt
                    return g, NEED_GROUPS
                kwork += nact + nt
                nact0 = nact
                for jj in range(nact0 + nt):
                    if jj < nact0:
                        v = act[jj]
                    else:
                        v = touched[jj - nact0]
                        if mark[v] != q:
                            continue  # also current: done above
                    mark[v] = -1
                    delta = want[v] - have[v]
                    if delta != 0:
                        for c in range(ko):
                            c_vals[c, nc] = U[c, rep[v]]
                        for c in range(d):
                            c_time[nc, c] = g_time[q, c]
                        c_key[nc] = p
                        c_diff[nc] = delta
                        nc += 1
                        have[v] += delta
                        if inact[v] == 0:
                            inact[v] = 1
                            act[nact] = v
                            nact += 1
                for jj in range(nt):
                    want[touched[jj]] = 0
                k = 0
                for jj in range(nact):
                    v = act[jj]
                    if have[v] != 0:
                        act[k] = v
                        k += 1
                    else:
                        inact[v] = 0
                nact = k
            work += kwork
            g = ge
            continue
        # -- general partial order: the key's output history, then the corrections as they are made ----
        if h1 - h0 > w_diff.shape[0]:
            counts[P3_NEED_AT] = h1 - h0
            return g, NEED_ROWS
        nw = 0
        for r in range(h0, h1):
            for c in range(ko):
                w_vals[c, nw] = ovals[c, r]
            for c in range(d):
                w_time[nw, c] = otimes[r, c]
            w_diff[nw] = odiffs[r]
            nw += 1
        kwork = nw
        if ge - g > 1:
            general += 1
        for q in range(g, ge):
            nd_all = des_off[q + 1] - des_off[q]
            if max(nw, nd_all) > cur.shape[0]:
                counts[P3_NEED_AT] = max(nw, nd_all)
                return g, NEED_SCRATCH
            # at most one correction per distinct value of the current and desired outputs
            if nc + nw + nd_all > c_key.shape[0]:
                counts[P3_NEED_AT] = nc + nw + nd_all
                return g, NEED_GROUPS
            if nw + nw + nd_all > w_diff.shape[0]:
                counts[P3_NEED_AT] = nw + nw + nd_all
                return g, NEED_ROWS
            kwork += nw + nd_all
            # output accumulated at this time and the desired output, each sorted by value
            ncur = 0
            for r in range(nw):
                if leq_time(w_time, r, g_time, q):
                    cur[ncur] = r
                    ncur += 1
            if ncur > 1:
                _sort_rows_by_vals(cur, ncur, w_vals, tmp, none2d)
            nd = 0
            for r in range(des_off[q], des_off[q + 1]):
                if des_cnt[r] != 0:
                    des[nd] = r
                    nd += 1
            if nd > 1:
                _sort_rows_by_vals(des, nd, des_vals, tmp, none2d)
            i = 0
            j = 0
            while i < ncur or j < nd:
                if i >= ncur:
                    o = 1
                elif j >= nd:
                    o = -1
                else:
                    o = cmp_cols(w_vals, cur[i], des_vals, des[j])
                have_ = 0
                want_ = 0
                if o <= 0:
                    vi = cur[i]
                    while i < ncur and cmp_cols(w_vals, cur[i], w_vals, vi) == 0:
                        have_ += w_diff[cur[i]]
                        i += 1
                    if o == 0:
                        vj = des[j]
                        while j < nd and cmp_cols(des_vals, des[j], des_vals, vj) == 0:
                            want_ += des_cnt[des[j]]
                            j += 1
                    from_w = True
                    src = vi
                else:
                    vj = des[j]
                    while j < nd and cmp_cols(des_vals, des[j], des_vals, vj) == 0:
                        want_ += des_cnt[des[j]]
                        j += 1
                    from_w = False
                    src = vj
                delta = want_ - have_
                if delta != 0:
                    for c in range(ko):
                        v = w_vals[c, src] if from_w else des_vals[c, src]
                        c_vals[c, nc] = v
                        w_vals[c, nw] = v
                    for c in range(d):
                        c_time[nc, c] = g_time[q, c]
                        w_time[nw, c] = g_time[q, c]
                    c_key[nc] = p
                    c_diff[nc] = delta
                    w_diff[nw] = delta
                    nc += 1
                    nw += 1
        work += kwork
        g = ge
    counts[0] = nc
    counts[P3_WORK] = work
    counts[P3_GENERAL] = general
    return G, NEED_NONE


def reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs):
    """Phase 3: corrections (c_key, c_vals, c_time, c_diff) making the output accumulate, at every ready
    time, to the desired output; and ``work``: (the output updates and values visited, sorting aside; the
    keys of several groups whose times were not totally ordered)."""
    c_key, c_vals, c_time, c_diff, counts = _reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals,
                                                         otimes, odiffs)
    return c_key, c_vals, c_time, c_diff, (int(counts[P3_WORK]), int(counts[P3_GENERAL]))


@kernel
def _reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs):
    """``reduce_diff`` in one kernel call, as ``_reduce_times``."""
    G = g_key.shape[0]
    ko = des_vals.shape[0]
    d = g_time.shape[1]
    cap = max(64, 2 * G + des_cnt.shape[0])
    c_key = np.empty(cap, np.int64)
    c_vals = np.empty((ko, cap), np.int64)
    c_time = np.empty((cap, d), np.int64)
    c_diff = np.empty(cap, np.int64)
    w_vals = np.empty((ko, 64), np.int64)
    w_time = np.empty((64, d), np.int64)
    w_diff = np.empty(64, np.int64)
    cur = np.empty(64, np.int64)
    des = np.empty(64, np.int64)
    tmp = np.empty(64, np.int64)
    X = np.empty((64, d), np.int64)
    U = np.empty((ko, 64), np.int64)
    UW = np.empty((11, 64), np.int64)
    counts = np.zeros(4, np.int64)
    g = 0
    while True:
        g, need = _diff_run(g, g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs,
                            c_key, c_vals, c_time, c_diff, w_vals, w_time, w_diff, cur, des, tmp, X, U, UW, counts)
        if need == NEED_NONE:
            break
        at = int(counts[P3_NEED_AT])
        if need == NEED_X:
            size = max(at, 2 * UW.shape[1])
            X = np.empty((size, d), np.int64)
            U = np.empty((ko, size), np.int64)
            UW = np.empty((11, size), np.int64)
        elif need == NEED_SCRATCH:
            cur = _grow1(cur, at)
            des = _grow1(des, cur.shape[0])
            tmp = _grow1(tmp, cur.shape[0])
        elif need == NEED_GROUPS:
            c_key = _grow1(c_key, at)
            c_vals = _grow_cols(c_vals, c_key.shape[0])
            c_time = _grow_rows(c_time, c_key.shape[0])
            c_diff = _grow1(c_diff, c_key.shape[0])
        else:
            w_diff = _grow1(w_diff, at)
            w_vals = _grow_cols(w_vals, w_diff.shape[0])
            w_time = _grow_rows(w_time, w_diff.shape[0])
    nc = counts[0]
    return c_key[:nc], c_vals[:, :nc], c_time[:nc], c_diff[:nc], counts  # views, as in reduce_times


@kernel
def probe_runs(c_key, c_vals, c_time, c_diff):
    """(the distinct probe indices, row offsets per probe) when the corrections are already a batch's
    rows: probe indices non-decreasing, each probe's (vals, time) strictly increasing, no zero diff (phase
    3 emits a key's groups in time order, so this holds whenever each key has one group, or kv == 0);
    else empty offsets. Probes are in arrangement order, so the batch can then be built without forming."""
    n = c_key.shape[0]
    keys = np.empty(n, np.int64)
    off = np.empty(n + 1, np.int64)
    m = 0
    for i in range(n):
        if c_diff[i] == 0:
            return keys[:0].copy(), off[:0].copy()
        if i == 0 or c_key[i] != c_key[i - 1]:
            if i > 0 and c_key[i] < c_key[i - 1]:
                return keys[:0].copy(), off[:0].copy()
            keys[m] = c_key[i]
            off[m] = i
            m += 1
        elif cmp_val_time(c_vals, c_time, i - 1, c_vals, c_time, i) >= 0:
            return keys[:0].copy(), off[:0].copy()
    off[m] = n
    return keys[:m].copy(), off[:m + 1].copy()


@kernel
def settled_keys(hoff, htimes, hdiffs, hord, soff, stimes, sdiffs, sord, sense):
    """bool[m]: whether a reduce's probe p is settled by its new rows (``soff``, ``stimes``, ``sdiffs``,
    value order keys ``sord``) alone: they are all insertions; its output rows (``hoff``, ``htimes``,
    ``hdiffs``, ``hord``) sum to 1 and all lie at or before the meet of the new rows' times; and for a
    min (``sense`` 1) or max (-1) the output rows are of one value, which every new value is at or
    after (min) or at or before (max) in value order. A distinct has ``sense`` 0 and no values. (See
    ReduceOp._settle.)"""
    m = soff.shape[0] - 1
    d = stimes.shape[1]
    out = np.zeros(m, np.bool_)
    meet = np.empty(d, np.int64)
    for p in range(m):
        h0, h1 = hoff[p], hoff[p + 1]
        if h0 == h1:
            continue
        total = 0
        for r in range(h0, h1):
            total += hdiffs[r]
        if total != 1:
            continue
        ok = True
        if sense != 0:
            cur = hord[0, h0]
            for r in range(h0 + 1, h1):
                if hord[0, r] != cur:
                    ok = False
                    break
            for s in range(soff[p], soff[p + 1]):
                if (sense > 0 and sord[0, s] < cur) or (sense < 0 and sord[0, s] > cur):
                    ok = False
                    break
            if not ok:
                continue
        for c in range(d):
            meet[c] = stimes[soff[p], c]
        for s in range(soff[p], soff[p + 1]):
            if sdiffs[s] <= 0:
                ok = False
                break
            for c in range(d):
                if stimes[s, c] < meet[c]:
                    meet[c] = stimes[s, c]
        if not ok:
            continue
        for r in range(h0, h1):
            for c in range(d):
                if htimes[r, c] > meet[c]:
                    ok = False
                    break
            if not ok:
                break
        out[p] = ok
    return out


MERGE_GROUP_PAIRS = 4096  # a key's pending times in both lists, multiplied: above this, the caller sorts


@helper
def _put_work(okh, okeys, otimes, n, kh, keys, times, r):
    """Row r of (kh, keys, times) written as row n of the output."""
    okh[n] = kh[r]
    for q in range(keys.shape[0]):
        okeys[q, n] = keys[q, r]
    for q in range(times.shape[1]):
        otimes[n, q] = times[r, q]


@kernel
def merge_pending(akh, akeys, atimes, bkh, bkeys, btimes):
    """Union of two lists of pending (key, time) work, each in arrangement order (hash, then key columns)
    with a key's rows adjacent and its times distinct: (hashes, keys, times) in that order, a key's times
    those of the first list then the second's new ones. A linear merge, where concatenating and sorting
    would cost a sort of all the work still pending at every step that adds some. The last result, ``ok``,
    is False (and the arrays empty) where a key has more than MERGE_GROUP_PAIRS pairs of times to compare:
    the caller then sorts."""
    na = akh.shape[0]
    nb = bkh.shape[0]
    okh = np.empty(na + nb, np.int64)
    okeys = np.empty((akeys.shape[0], na + nb), np.int64)
    otimes = np.empty((na + nb, atimes.shape[1]), np.int64)
    i = 0
    j = 0
    n = 0
    while i < na or j < nb:
        c = merge_order(akh, akeys, i, na, bkh, bkeys, j, nb)
        if c < 0:
            _put_work(okh, okeys, otimes, n, akh, akeys, atimes, i)
            i += 1
            n += 1
            continue
        if c > 0:
            _put_work(okh, okeys, otimes, n, bkh, bkeys, btimes, j)
            j += 1
            n += 1
            continue
        i0 = i  # the same key in both: its group in each
        while i < na and akh[i] == akh[i0] and cmp_cols(akeys, i, akeys, i0) == 0:
            i += 1
        j0 = j
        while j < nb and bkh[j] == bkh[j0] and cmp_cols(bkeys, j, bkeys, j0) == 0:
            j += 1
        if (i - i0) * (j - j0) > MERGE_GROUP_PAIRS:
            return okh[:0].copy(), okeys[:, :0].copy(), otimes[:0].copy(), False
        for r in range(i0, i):
            _put_work(okh, okeys, otimes, n, akh, akeys, atimes, r)
            n += 1
        for r in range(j0, j):
            new = True
            for s in range(i0, i):
                if cmp_times(atimes, s, btimes, r) == 0:
                    new = False
                    break
            if new:
                _put_work(okh, okeys, otimes, n, bkh, bkeys, btimes, r)
                n += 1
    return okh[:n].copy(), okeys[:, :n].copy(), otimes[:n].copy(), True
