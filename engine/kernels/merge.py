"""Merging two arranged batches, resumably (amortised spine maintenance), with logical compaction:
times are advanced to rep_F(t) and updates that become equal consolidate."""
import numpy as np

from . import MAX_MULT, carried_add, carried_total, kernel
from .rows import cmp_cols, cmp_val_time
from .sort import sort_index_segment



@kernel
def _copy_row(vals, times, diffs, r, ovals, otimes, odiffs, w, diff):
    for c in range(vals.shape[0]):
        ovals[c, w] = vals[c, r]
    for c in range(times.shape[1]):
        otimes[w, c] = times[r, c]
    odiffs[w] = diff


@kernel
def normalize_segment(vals, times, diffs, s, e):
    """Sort rows [s, e) by (val, time) if they are not, then consolidate in place. Returns the new end, or
    -1 where equal rows sum to a multiplicity of 2**62 or more (int64 sums of such would wrap)."""
    sorted_ok = True
    dup = False
    for r in range(s + 1, e):
        c = cmp_val_time(vals, times, r - 1, vals, times, r)
        if c > 0:
            sorted_ok = False
            break
        if c == 0:
            dup = True
    if not sorted_ok:
        m = e - s
        tmp = np.empty(m, np.int64)
        nokeys = np.empty((0, m), np.int64)  # no key columns (C layout, like every other call)
        # sort a local copy through an index, then write the rows back in order
        loc = np.arange(m).astype(np.int64)
        lv = vals[:, s:e].copy()
        lt = times[s:e].copy()
        ld = diffs[s:e].copy()
        sort_index_segment(loc, 0, m, nokeys, lv, lt, tmp)
        for a in range(m):
            q = loc[a]
            for c in range(vals.shape[0]):
                vals[c, s + a] = lv[c, q]
            for c in range(times.shape[1]):
                times[s + a, c] = lt[q, c]
            diffs[s + a] = ld[q]
        dup = True
    if not dup:
        return e
    w = s
    r = s
    while r < e:
        acc = diffs[r]
        hi = 0
        q = r + 1
        while q < e and cmp_val_time(vals, times, r, vals, times, q) == 0:
            acc, hi = carried_add(acc, hi, diffs[q])
            q += 1
        if hi != 0:
            acc = carried_total(acc, hi)
            if acc == MAX_MULT:
                return -1
        if acc != 0:
            if w != r:
                _copy_row(vals, times, diffs, r, vals, times, diffs, w, acc)
            else:
                diffs[w] = acc
            w += 1
        r = q
    return w


@kernel
def merge_step(akh, akeys, akoff, avals, atimes, adiffs,
               bkh, bkeys, bkoff, bvals, btimes, bdiffs,
               okh, okeys, okoff, ovals, otimes, odiffs,
               state, frontier, fuel):
    """Merge keys of A (older) and B (newer) into the outputs until ``fuel`` input rows are spent.
    ``state`` = [next A key, next B key, output keys, output rows, overflow] and is updated in place; overflow
    is set (and the merge stops) where equal rows sum to a multiplicity of 2**62 or more. Returns True when
    both inputs are exhausted (or on overflow)."""
    ia = state[0]
    ib = state[1]
    nk = state[2]
    nr = state[3]
    na = akh.shape[0]
    nb = bkh.shape[0]
    kk = akeys.shape[0]
    kv = avals.shape[0]
    d = atimes.shape[1]
    compact = frontier.shape[0] > 0
    single = frontier.shape[0] == 1
    spent = 0
    while spent < fuel and (ia < na or ib < nb):
        if ia >= na:
            c = 1
        elif ib >= nb:
            c = -1
        else:
            x = akh[ia]
            y = bkh[ib]
            if x < y:
                c = -1
            elif x > y:
                c = 1
            else:
                c = cmp_cols(akeys, ia, bkeys, ib)
        s = nr
        if c < 0:
            okh[nk] = akh[ia]
            for q in range(kk):
                okeys[q, nk] = akeys[q, ia]
            for r in range(akoff[ia], akoff[ia + 1]):  # (copy loops written out: calls cost 2x here)
                for q in range(kv):
                    ovals[q, nr] = avals[q, r]
                for q in range(d):
                    otimes[nr, q] = atimes[r, q]
                odiffs[nr] = adiffs[r]
                nr += 1
            ia += 1
        elif c > 0:
            okh[nk] = bkh[ib]
            for q in range(kk):
                okeys[q, nk] = bkeys[q, ib]
            for r in range(bkoff[ib], bkoff[ib + 1]):
                for q in range(kv):
                    ovals[q, nr] = bvals[q, r]
                for q in range(d):
                    otimes[nr, q] = btimes[r, q]
                odiffs[nr] = bdiffs[r]
                nr += 1
            ib += 1
        else:
            okh[nk] = akh[ia]
            for q in range(kk):
                okeys[q, nk] = akeys[q, ia]
            ra = akoff[ia]
            ea = akoff[ia + 1]
            rb = bkoff[ib]
            eb = bkoff[ib + 1]
            while ra < ea or rb < eb:
                if ra >= ea:
                    o = 1
                elif rb >= eb:
                    o = -1
                else:
                    o = cmp_val_time(avals, atimes, ra, bvals, btimes, rb)
                if o < 0:
                    _copy_row(avals, atimes, adiffs, ra, ovals, otimes, odiffs, nr, adiffs[ra])
                    ra += 1
                    nr += 1
                elif o > 0:
                    _copy_row(bvals, btimes, bdiffs, rb, ovals, otimes, odiffs, nr, bdiffs[rb])
                    rb += 1
                    nr += 1
                else:
                    acc = adiffs[ra] + bdiffs[rb]
                    if acc >= MAX_MULT or acc <= -MAX_MULT:
                        state[4] = 1
                        return True
                    if acc != 0:
                        _copy_row(avals, atimes, adiffs, ra, ovals, otimes, odiffs, nr, acc)
                        nr += 1
                    ra += 1
                    rb += 1
            ia += 1
            ib += 1
        spent += nr - s + 1
        if compact:
            # the key's rows are sorted and consolidated (the merge of two such lists): they need
            # normalizing only where advancing changed a time
            moved = False
            if single:
                for r in range(s, nr):
                    for q in range(d):
                        if otimes[r, q] < frontier[0, q]:
                            otimes[r, q] = frontier[0, q]
                            moved = True
            else:
                m = frontier.shape[0]
                for r in range(s, nr):  # times[r] <- min over f of max(t, f), coordinate-wise (inlined)
                    for q in range(d):
                        t = otimes[r, q]
                        best = max(t, frontier[0, q])
                        for f in range(1, m):
                            best = min(best, max(t, frontier[f, q]))
                        if best != t:
                            otimes[r, q] = best
                            moved = True
            if moved and nr - s > 1:
                nr = normalize_segment(ovals, otimes, odiffs, s, nr)
                if nr < 0:
                    state[4] = 1
                    return True
        if nr > s:
            okoff[nk] = s
            nk += 1
    okoff[nk] = nr
    state[0] = ia
    state[1] = ib
    state[2] = nk
    state[3] = nr
    return ia >= na and ib >= nb


@kernel
def normalize_groups(off, vals, times, diffs):
    """Every group of rows [off[p], off[p + 1]) sorted by (val, time) and consolidated in place, the groups
    then packed to the front and ``off`` rewritten to match. Returns the number of rows kept (-1 on
    overflow, see normalize_segment)."""
    m = off.shape[0] - 1
    w = 0
    for p in range(m):
        s = off[p]
        e = off[p + 1]
        off[p] = w
        if e > s:
            end = normalize_segment(vals, times, diffs, s, e)
            if end < 0:
                return -1
            for r in range(s, end):
                if w != r:
                    _copy_row(vals, times, diffs, r, vals, times, diffs, w, diffs[r])
                w += 1
    off[m] = w
    return w


@kernel
def merge_whole(akh, akeys, akoff, avals, atimes, adiffs, bkh, bkeys, bkoff, bvals, btimes, bdiffs, frontier):
    """Two batches' arrays merged completely in one call (a spine's small merges, where the bookkeeping of
    a resumable merge would cost more than the merge): the outputs exactly sized, and the number of rows
    with a positive diff (the result's balance), -1 on overflow (see merge_step)."""
    nk = akh.shape[0] + bkh.shape[0]
    n = adiffs.shape[0] + bdiffs.shape[0]
    kk = akeys.shape[0]
    kv = avals.shape[0]
    d = atimes.shape[1]
    okh = np.empty(nk, np.int64)
    okeys = np.empty((kk, nk), np.int64)
    okoff = np.empty(nk + 1, np.int64)
    ovals = np.empty((kv, n), np.int64)
    otimes = np.empty((n, d), np.int64)
    odiffs = np.empty(n, np.int64)
    state = np.zeros(5, np.int64)
    merge_step(akh, akeys, akoff, avals, atimes, adiffs, bkh, bkeys, bkoff, bvals, btimes, bdiffs,
               okh, okeys, okoff, ovals, otimes, odiffs, state, frontier, np.int64(1) << 62)
    k = state[2]
    r = state[3]
    pos = 0
    if state[4]:  # (an overflow: nothing of the result is used)
        k = 0
        r = 0
        pos = -1
    for i in range(r):
        if odiffs[i] > 0:
            pos += 1
    rkeys = np.empty((kk, k), np.int64)
    for c in range(kk):
        for i in range(k):
            rkeys[c, i] = okeys[c, i]
    rvals = np.empty((kv, r), np.int64)
    for c in range(kv):
        for i in range(r):
            rvals[c, i] = ovals[c, i]
    return okh[:k].copy(), rkeys, okoff[:k + 1].copy(), rvals, otimes[:r].copy(), odiffs[:r].copy(), pos
