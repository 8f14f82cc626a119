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
"""
import numpy as np
from numba import njit

from . import helper, kernel
from .rows import cmp_cols, in_advance, leq_time
from .sort import sort_index_segment

COUNT, SUM, MIN, MAX, DISTINCT, ARGMIN, ARGMAX, TOPK, THRESHOLD = range(9)
MODE_INT, MODE_FLOAT, MODE_RANK = 0, 1, 2


def _grow1(a, need):
    """``a`` with room for ``need`` entries (at least doubled), contents kept. Plain NumPy: the outer
    loops below run once per buffer growth, not per row."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    b[:a.shape[0]] = a
    return b


def _grow_rows(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty((max(need, 2 * a.shape[0]), a.shape[1]), a.dtype)
    b[:a.shape[0]] = a
    return b


def _grow_cols(a, need):
    if need <= a.shape[1]:
        return a
    b = np.empty((a.shape[0], max(need, 2 * a.shape[1])), a.dtype)
    b[:, :a.shape[1]] = a
    return b


@kernel
def _insertion_sort(idx, n, m):
    """Insertion sort of idx[:n] by the columns of m they point at (short lists only)."""
    k = m.shape[0]
    for a in range(1, n):
        x = idx[a]
        b = a - 1
        while b >= 0:
            y = idx[b]
            c = 0
            for q in range(k):
                if m[q, y] != m[q, x]:
                    c = 1 if m[q, y] > m[q, x] else -1
                    break
            if c <= 0:
                break
            idx[b + 1] = y
            b -= 1
        idx[b + 1] = x


@kernel
def _sort_rows_by_vals(idx, n, vals, tmp, none2d):
    """Sort idx[:n] by the value columns of the rows it points at (insertion sort when short)."""
    if n <= 16:
        _insertion_sort(idx, n, vals)
    else:
        sort_index_segment(idx, 0, n, none2d, vals, none2d, tmp)


@helper
def _add_time(buf, n, times, r):
    """Add time row times[r] to the distinct rows buf[:n]: the new count, or -1 when buf is full."""
    d = buf.shape[1]
    for i in range(n):
        same = True
        for c in range(d):
            if buf[i, c] != times[r, c]:
                same = False
                break
        if same:
            return n
    if n == buf.shape[0]:
        return -1
    for c in range(d):
        buf[n, c] = times[r, c]
    return n + 1


# Phases 1 and 3 never reallocate inside their loops (numba then cannot keep arrays in registers, which
# measured 10x slower): an inner "run" kernel works through keys until a buffer would overflow, rolls back
# the key in progress and returns; the outer function grows that buffer and resumes. The outer functions
# are plain Python (they loop once per growth, a handful of times per call): as kernels they cost 5 s of
# compilation after an install, re-optimizing the inlined run kernel, for no speed at run time.
NEED_NONE, NEED_SCRATCH, NEED_GROUPS, NEED_ACC, NEED_FUTURE, NEED_ROWS = range(6)


@kernel
def _times_run(p0, ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, counts_only,
               g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, C, H, ready, idx, tmp, counts):
    m = ioff.shape[0] - 1
    d = itimes.shape[1]
    kv = ivals.shape[0]
    none2d = np.empty((0, 0), np.int64)
    lub = np.empty((1, d), np.int64)
    ng = counts[0]
    na = counts[1]
    nf = counts[2]
    for p in range(p0, m):
        s0 = soff[p]
        s1 = soff[p + 1]
        if s1 == s0:
            continue
        counts[0] = ng
        counts[1] = na
        counts[2] = nf
        r0 = ioff[p]
        r1 = ioff[p + 1]
        o0 = ooff[p]
        o1 = ooff[p + 1]
        # C: the distinct seed times
        nc = 0
        for s in range(s0, s1):
            nc = _add_time(C, nc, stimes, s)
            if nc < 0:
                return p, NEED_SCRATCH
        # closure under lub with the distinct times of the key's input and output histories (output times
        # take part so that, whatever compaction did to either trace, accumulations at every time equal
        # those at a closure time)
        nh = 0
        for r in range(r0, r1):
            nh = _add_time(H, nh, itimes, r)
            if nh < 0:
                return p, NEED_SCRATCH
        for r in range(o0, o1):
            nh = _add_time(H, nh, otimes, r)
            if nh < 0:
                return p, NEED_SCRATCH
        i = 0
        while i < nc:
            for h in range(nh):
                for c in range(d):
                    lub[0, c] = max(C[i, c], H[h, c])
                nc = _add_time(C, nc, lub, 0)
                if nc < 0:
                    return p, NEED_SCRATCH
            i += 1
        # ready times (not in advance of the frontier), in lexicographic order; the rest is future work
        if ready.shape[0] < nc:
            return p, NEED_SCRATCH
        if nf + nc > f_key.shape[0]:
            return p, NEED_FUTURE
        nready = 0
        for i in range(nc):
            if in_advance(C, i, upper):
                f_key[nf] = p
                for c in range(d):
                    f_time[nf, c] = C[i, c]
                nf += 1
            else:
                ready[nready] = i
                nready += 1
        if nready == 0:
            continue
        if nready > 1:
            _insertion_sort(ready, nready, C.T)  # a key's few ready times, lexicographically
        nrows = r1 - r0
        if ng + nready + 1 > g_key.shape[0]:
            return p, NEED_GROUPS
        if na + nready * max(nrows, 1) > acc_row.shape[0]:
            return p, NEED_ACC
        if not counts_only:
            if idx.shape[0] < nrows:
                return p, NEED_ROWS
            for r in range(nrows):
                idx[r] = r0 + r
            if nrows > 1:
                _sort_rows_by_vals(idx, nrows, ivals, tmp, none2d)
        for q in range(nready):
            ci = ready[q]
            g_key[ng] = p
            for c in range(d):
                g_time[ng, c] = C[ci, c]
            g_off[ng] = na
            if counts_only:
                total = 0
                for r in range(r0, r1):
                    if leq_time(itimes, r, C, ci):
                        total += idiffs[r]
                if total != 0:
                    acc_row[na] = r0
                    acc_cnt[na] = total
                    na += 1
            else:
                a = 0
                while a < nrows:
                    ra = idx[a]
                    total = 0
                    b = a
                    while b < nrows:
                        rb = idx[b]
                        if b > a:
                            same = True
                            for c in range(kv):
                                if ivals[c, rb] != ivals[c, ra]:
                                    same = False
                                    break
                            if not same:
                                break
                        if leq_time(itimes, rb, C, ci):
                            total += idiffs[rb]
                        b += 1
                    if total != 0:
                        acc_row[na] = ra
                        acc_cnt[na] = total
                        na += 1
                    a = b
            ng += 1
    counts[0] = ng
    counts[1] = na
    counts[2] = nf
    return m, NEED_NONE


def reduce_times(ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, counts_only):
    """Phase 1. Returns (g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time): group g is key g_key[g]
    at ready time g_time[g], whose accumulated input is (row acc_row[a] standing for its value,
    multiplicity acc_cnt[a]) for a in g_off[g]:g_off[g+1], listed in the signed lexicographic order of
    ``ivals`` (pass order keys, see order_keys, for value order); (f_key, f_time) is future work."""
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
    C = np.empty((64, d), np.int64)
    H = np.empty((64, d), np.int64)
    ready = np.empty(64, np.int64)
    idx = np.empty(64, np.int64)
    tmp = np.empty(64, np.int64)
    counts = np.zeros(3, np.int64)
    p = 0
    while True:
        p, need = _times_run(p, ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, counts_only,
                             g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, C, H, ready, idx, tmp, counts)
        if need == NEED_NONE:
            break
        if need == NEED_SCRATCH:
            C = _grow_rows(C, 2 * C.shape[0])
            H = _grow_rows(H, 2 * H.shape[0])
            ready = _grow1(ready, 2 * C.shape[0])
        elif need == NEED_GROUPS:
            g_key = _grow1(g_key, 2 * g_key.shape[0])
            g_time = _grow_rows(g_time, g_key.shape[0])
            g_off = _grow1(g_off, g_key.shape[0] + 1)
        elif need == NEED_ACC:
            acc_row = _grow1(acc_row, 2 * acc_row.shape[0] + ioff[p + 1] - ioff[p])
            acc_cnt = _grow1(acc_cnt, acc_row.shape[0])
        elif need == NEED_FUTURE:
            f_key = _grow1(f_key, 2 * f_key.shape[0] + C.shape[0])
            f_time = _grow_rows(f_time, f_key.shape[0])
        else:
            idx = _grow1(idx, 2 * (ioff[p + 1] - ioff[p]))
            tmp = _grow1(tmp, idx.shape[0])
    ng, na, nf = counts[0], counts[1], counts[2]
    g_off[ng] = na
    return (g_key[:ng].copy(), g_time[:ng].copy(), g_off[:ng + 1].copy(), acc_row[:na].copy(),
            acc_cnt[:na].copy(), f_key[:nf].copy(), f_time[:nf].copy())


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
    its float64 view); returns (des_off, des_cnt, rows used). ``okeys`` are the order keys of ``ivals``
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
                    s += ivals[col, acc_row[a]] * acc_cnt[a]
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
    the function is an argument)."""
    G = g_off.shape[0] - 1
    kv = uvals.shape[0]
    ko = proto.shape[1]
    des_off = np.empty(G + 1, np.int64)
    out = np.empty((max(16, G), ko), proto.dtype)
    des_cnt = np.empty(max(16, G), np.int64)
    n = 0
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
        if o.shape[1] != ko or oc.shape[0] != p:
            raise ValueError("the reduce function returned arrays of the wrong shape")
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
            des_cnt[n + q] = oc[q]
        n += p
    des_off[G] = n
    return des_off, des_cnt[:n].copy(), out[:n].copy()


@kernel
def _diff_run(g0, g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs,
              c_key, c_vals, c_time, c_diff, w_vals, w_time, w_diff, cur, des, tmp, counts):
    G = g_key.shape[0]
    ko = des_vals.shape[0]
    d = g_time.shape[1]
    none2d = np.empty((0, 0), np.int64)
    nc = counts[0]
    g = g0
    while g < G:
        counts[0] = nc
        p = g_key[g]
        ge = g
        while ge < G and g_key[ge] == p:
            ge += 1
        # the key's output history, then the corrections as they are made
        h0 = ooff[p]
        h1 = ooff[p + 1]
        if h1 - h0 > w_diff.shape[0]:
            return g, NEED_ROWS
        nw = 0
        for r in range(h0, h1):
            for c in range(ko):
                w_vals[c, nw] = ovals[c, r]
            for c in range(d):
                w_time[nw, c] = otimes[r, c]
            w_diff[nw] = odiffs[r]
            nw += 1
        for q in range(g, ge):
            nd_all = des_off[q + 1] - des_off[q]
            if max(nw, nd_all) > cur.shape[0]:
                return g, NEED_SCRATCH
            # at most one correction per distinct value of the current and desired outputs
            if nc + nw + nd_all > c_key.shape[0]:
                return g, NEED_GROUPS
            if nw + nw + nd_all > w_diff.shape[0]:
                return g, NEED_ROWS
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
                have = 0
                want = 0
                if o <= 0:
                    vi = cur[i]
                    while i < ncur and cmp_cols(w_vals, cur[i], w_vals, vi) == 0:
                        have += w_diff[cur[i]]
                        i += 1
                    if o == 0:
                        vj = des[j]
                        while j < nd and cmp_cols(des_vals, des[j], des_vals, vj) == 0:
                            want += des_cnt[des[j]]
                            j += 1
                    from_w = True
                    src = vi
                else:
                    vj = des[j]
                    while j < nd and cmp_cols(des_vals, des[j], des_vals, vj) == 0:
                        want += des_cnt[des[j]]
                        j += 1
                    from_w = False
                    src = vj
                delta = want - have
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
        g = ge
    counts[0] = nc
    return G, NEED_NONE


def reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs):
    """Phase 3: corrections (c_key, c_vals, c_time, c_diff) making the output accumulate, at every ready
    time, to the desired output."""
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
    counts = np.zeros(1, np.int64)
    g = 0
    while True:
        g, need = _diff_run(g, g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs,
                            c_key, c_vals, c_time, c_diff, w_vals, w_time, w_diff, cur, des, tmp, counts)
        if need == NEED_NONE:
            break
        if need == NEED_SCRATCH:
            cur = _grow1(cur, 2 * cur.shape[0] + w_diff.shape[0])
            des = _grow1(des, cur.shape[0])
            tmp = _grow1(tmp, cur.shape[0])
        elif need == NEED_GROUPS:
            c_key = _grow1(c_key, 2 * c_key.shape[0] + w_diff.shape[0])
            c_vals = _grow_cols(c_vals, c_key.shape[0])
            c_time = _grow_rows(c_time, c_key.shape[0])
            c_diff = _grow1(c_diff, c_key.shape[0])
        else:
            w_diff = _grow1(w_diff, 2 * w_diff.shape[0] + ooff[g_key[g] + 1] - ooff[g_key[g]])
            w_vals = _grow_cols(w_vals, w_diff.shape[0])
            w_time = _grow_rows(w_time, w_diff.shape[0])
    nc = counts[0]
    return c_key[:nc].copy(), c_vals[:, :nc].copy(), c_time[:nc].copy(), c_diff[:nc].copy()
