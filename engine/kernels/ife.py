"""Per-vertex work of the iterative frontier expansion operator (engine/operators/ife.py): reading a
vertex's one-dimensional timeline of (round, value) entries, and the Bloom filter of dropped entries.

A timeline's rows come from several batches of an arrangement, each (round, value, diff); an entry is
live when its diffs sum to more than zero (a rewritten entry is a retraction in one epoch and an
insertion in a later one until the trace merges them away)."""
import numpy as np

from . import MAX_MULT, carried_add, carried_total, helper, kernel
from .sort import mix64


@kernel
def timeline_at(off, rounds, values, diffs, qprobe, qround, out_round, out_value):
    """For each query i: the latest live entry of probe qprobe[i] at a round <= qround[i]: its round in
    out_round[i] (-1 if none) and its value in out_value[i]."""
    for i in range(qprobe.shape[0]):
        p = qprobe[i]
        q = qround[i]
        best = -1
        value = 0
        for a in range(off[p], off[p + 1]):
            r = rounds[a]
            if r > q or r <= best:
                continue
            net = 0
            for b in range(off[p], off[p + 1]):
                if rounds[b] == r and values[b] == values[a]:
                    net += diffs[b]
            if net > 0:
                best = r
                value = values[a]
        out_round[i] = best
        out_value[i] = value


@helper
def _bloom_hash(kh, r, salt):
    return mix64(np.uint64(kh) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(r) * np.uint64(0xBF58476D1CE4E5B9)
                 + np.uint64(salt) * np.uint64(0x94D049BB133111EB))


@kernel
def bloom_add(bits, nhash, kh, rounds):
    """Insert the (key hash, round) pairs; ``bits`` is uint64 words, a power of two many."""
    mask = np.uint64(bits.shape[0] * 64 - 1)
    for i in range(kh.shape[0]):
        for s in range(nhash):
            h = _bloom_hash(kh[i], rounds[i], s) & mask
            bits[h >> np.uint64(6)] |= np.uint64(1) << (h & np.uint64(63))


@kernel
def bloom_latest(bits, nhash, kh, lo, hi, out):
    """For each query i: the latest round d in (lo[i], hi[i]] whose (kh[i], d) the filter may hold, or -1.
    Never misses an inserted pair (no false negatives); may report one never inserted."""
    mask = np.uint64(bits.shape[0] * 64 - 1)
    for i in range(kh.shape[0]):
        found = -1
        d = hi[i]
        while d > lo[i]:
            hit = True
            for s in range(nhash):
                h = _bloom_hash(kh[i], d, s) & mask
                if (bits[h >> np.uint64(6)] >> (h & np.uint64(63))) & np.uint64(1) == np.uint64(0):
                    hit = False
                    break
            if hit:
                found = d
                break
            d -= 1
        out[i] = found


@kernel
def mask_latest(off, blocks, masks, diffs, qprobe, lo, hi, out):
    """For each query i: the latest round d in (lo[i], hi[i]] set in a live (block, mask) row of probe
    qprobe[i] (bit b of block k's mask stands for round 64 k + b), or -1."""
    for i in range(qprobe.shape[0]):
        p = qprobe[i]
        best = -1
        for a in range(off[p], off[p + 1]):
            net = 0
            for b in range(off[p], off[p + 1]):
                if blocks[b] == blocks[a] and masks[b] == masks[a]:
                    net += diffs[b]
            if net <= 0:
                continue
            base = blocks[a] * 64
            r = min(hi[i], base + 63)
            while r > lo[i] and r >= base and r > best:
                if (masks[a] >> (r - base)) & 1:
                    best = r
                    break
                r -= 1
        out[i] = best


@kernel
def float_sums(x, c, starts, out):
    """out[g] = the sum of x[a] * c[a] over segment g (rows starts[g] to the next start), added one row at
    a time from 0.0, as the reduce kernel's SUM adds a group's (value, count) pairs: the memory modes
    then give a float sum the same bits as the full mode (NumPy's reduceat adds pairwise)."""
    n = x.shape[0]
    G = starts.shape[0]
    for g in range(G):
        end = starts[g + 1] if g + 1 < G else n
        fs = 0.0
        for a in range(starts[g], end):
            fs += x[a] * c[a]
        out[g] = fs


@kernel
def degree_sums(q, c, out):
    """out[j] = the sum of c[a] over the rows a with q[a] == j (out starts at zeros), exact in int64 (an
    out-degree: edge multiplicities summed, as the full mode's count sums them; float64 weights would round
    past 2**53). Returns whether a sum reaches MAX_MULT in magnitude (the multiplicity overflow)."""
    nq = out.shape[0]
    hi = np.zeros(nq, np.int64)
    for a in range(q.shape[0]):
        j = q[a]
        out[j], hi[j] = carried_add(out[j], hi[j], c[a])
    over = False
    for j in range(nq):
        if hi[j] != 0:
            t = carried_total(out[j], hi[j])
            out[j] = t
            over |= t == MAX_MULT
    return over


@kernel
def extremes(q, v, c, is_float, want_max, out):
    """out[q[a]] = the min (``want_max``: the max) of v[a] over the rows a with c[a] > 0, in one pass
    where a sort of every row gave the same: floats compared as float64 (a NaN is the max, and the min
    only when all are NaN, as in sorted order), written back canonical (+0.0 added); queries without
    such rows keep their ``out``; of several NaNs the min keeps the first row's and the max the last
    row's, as sorted order does. Returns whether an int aggregate equals out's "no state" int64 minimum."""
    nq = out.shape[0]
    has = np.zeros(nq, np.bool_)
    if is_float:
        best = np.empty(nq, np.float64)
        _best_per_query(v.view(np.float64), q, c, want_max, has, best)
        ob = out.view(np.float64)
        for j in range(nq):
            if has[j]:
                ob[j] = best[j] + 0.0
        return False
    ibest = np.empty(nq, np.int64)
    _best_per_query(v, q, c, want_max, has, ibest)
    absent = np.iinfo(np.int64).min
    hit = False
    for j in range(nq):
        if has[j]:
            out[j] = ibest[j]
            hit |= ibest[j] == absent
    return hit


@helper
def _best_per_query(x, q, c, want_max, has, best):
    """``extremes``' pass, for int64 or float64 ``x`` (the NaN tests are false for ints)."""
    for a in range(q.shape[0]):
        if c[a] <= 0:
            continue
        j = q[a]
        y = x[a]
        if not has[j]:
            best[j] = y
            has[j] = True
        elif want_max:
            if y > best[j] or y != y:
                best[j] = y
        elif y < best[j] or (best[j] != best[j] and y == y):  # (of only NaNs, the first)
            best[j] = y
