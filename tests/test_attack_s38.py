"""Session 38 attack on 1b2c655 (merges advance times inline and re-normalize a key's rows only where
advancing moved a time) and cffebee (reduce phases 1 and 3 as one kernel call each, their buffers grown
inside numba).

Merges: random and crafted batches (rows of one key in both batches, retractions that only meet once
advanced, frontiers of 1..3 elements in 1..3 dimensions, extreme values, sums at the multiplicity bound)
merged by ``Merger`` in small fuel steps and by ``merge_whole``, against the definition (every row's time
advanced to rep_F(t), then formed from scratch), and spines fed batch by batch under moving logical
frontiers, their accumulations checked at times in advance of the frontier.

Reduce: phases 1 and 3 against the drivers they replaced (the Python loops of bfeb0a2 around the
unchanged ``_times_run`` and ``_diff_run``, written out below, also started from one-entry buffers so that
every growth path of the run kernels is taken) on inputs large enough to make the new kernels grow every
buffer, against a from-scratch definition, and at the multiplicity bound.

Engine: reductions of every kind (top level, and in loops nested 1 and 2 deep) over hot keys of hundreds
of values, fed in bursts of up to 90 epochs between waits (a step then makes the new kernels grow every
buffer, and the general partial-order route run), W = 1, 2, 3, also with colliding key hashes and a
dataflow importing the input's arrangement half way; a min-label loop over a backlog of edge changes;
Datalog aggregates; multiplicities reaching 2**62 across epochs. Each epoch (and every retained past
epoch, through the views' history) is compared with a from-scratch computation. Seeded, no timing
asserts.

No wrong result was found (session 38): these tests pass on cffebee and guard the two changes."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine import batch as B
from kpgnb.engine.kernels import MAX_MULT
from kpgnb.engine.kernels import reduce as rk
from kpgnb.engine.lattice import Antichain
from kpgnb.engine.spine import Spine

import attack_s27_reduce_gen as G  # reductions of every kind, their from-scratch oracle, colliding hashes
from test_many_times import LISTINGS as LISTED_OP  # (listing -> the op that lists so)
from test_many_times import _arrays, _closure, _desired, _leq  # the reduce's definition and its inputs

T = 60  # seconds: every wait's timeout
OVERFLOW = "multiplicity reaches 2\\*\\*62"


# == merges ============================================================================================

def _advance(times, frontier):
    """rep_F(t) for every row: the meet over f in F of the join of t and f (the times as they are when F
    is empty)."""
    if not len(frontier):
        return np.ascontiguousarray(times)
    return np.ascontiguousarray(np.min(np.maximum(times[:, None, :], frontier[None, :, :]), axis=1))


def _rows(arrays):
    kh, keys, koff, vals, times, diffs = arrays
    return np.repeat(keys, np.diff(koff), axis=1), vals, times, diffs


def _counter(keys, vals, times, diffs) -> Counter:
    out = Counter()
    for i in range(len(diffs)):
        out[(tuple(keys[:, i].tolist()), tuple(vals[:, i].tolist()), tuple(times[i].tolist()))] += int(diffs[i])
    return Counter({k: m for k, m in out.items() if m})


def _check_structure(arrays):
    """A batch's invariants: keys in (hash, key) order and distinct, each key's rows strictly increasing
    by (val, time) in signed lexicographic order, no zero diff, no empty key, offsets consistent."""
    kh, keys, koff, vals, times, diffs = arrays
    nk, n = len(kh), len(diffs)
    assert koff.shape == (nk + 1,) and koff[0] == 0 and koff[-1] == n
    assert (np.diff(koff) > 0).all(), "a key without rows"
    assert not (diffs == 0).any(), "a zero diff"
    for i in range(1, nk):
        assert (int(kh[i - 1]), tuple(keys[:, i - 1].tolist())) < (int(kh[i]), tuple(keys[:, i].tolist()))
    for i in range(nk):
        rows = [(tuple(vals[:, r].tolist()), tuple(times[r].tolist())) for r in range(koff[i], koff[i + 1])]
        assert all(a < b for a, b in zip(rows, rows[1:])), ("rows of a key out of order or repeated", rows)


def _expected(a, b, frontier):
    parts = []
    for arrays in (a, b):
        keys, vals, times, diffs = _rows(arrays)
        parts.append((keys, vals, _advance(times, frontier), diffs))
    return B.form_parts(parts, 1)[0]


def _merge_all_ways(a, b, frontier, rng):
    """The merge by Merger (in random small fuel steps) and by merge_whole; both must agree; returns one,
    or "overflow" when both refuse."""
    f = frontier if len(frontier) else None
    out = []
    try:
        m = B.Merger(a, b, f)
        fuel = int(rng.integers(1, 40))
        while not m.work(fuel):
            pass
        out.append(m.result)
    except OverflowError:
        out.append("overflow")
    try:
        out.append(B.merge_arrays(a, b, f)[0])
    except OverflowError:
        out.append("overflow")
    x, y = out
    if isinstance(x, str) or isinstance(y, str):
        assert x == y
        return x
    for u, v in zip(x, y):
        assert u.shape == v.shape and np.array_equal(u, v)
    return x


def _same_arrays(got, want):
    for u, v in zip(got, want):
        assert u.shape == v.shape and np.array_equal(u, v), (u, v)


def _random_frontier(rng, d, span):
    m = int(rng.integers(1, 4))
    return np.ascontiguousarray(rng.integers(0, span + 2, (m, d)).astype(np.int64))


def _cancelling_pair(rng, kk, kv, d, span, pool):
    """Batch A of random rows; batch B holding some of A's rows again at other times with the opposite
    diff (they cancel only where advancing makes the times equal), some at the same time (they cancel in
    the merge itself), and fresh rows; every key likely in both batches."""
    n = int(rng.integers(1, 120))
    keys = pool[rng.integers(0, len(pool), (kk, n))]
    vals = pool[rng.integers(0, len(pool), (kv, n))]
    times = rng.integers(0, span, (n, d)).astype(np.int64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 2, 3], np.int64), n)
    a = B.form_parts([(keys, vals, times, diffs)], 1)[0]
    ak, av, at, ad = _rows(a)
    pick = rng.random(len(ad)) < 0.7
    bt = at[pick].copy()
    moved = rng.random(len(bt)) < 0.7
    bt[moved] = rng.integers(0, span, (int(moved.sum()), d))
    bd = -ad[pick]
    half = rng.random(len(bd)) < 0.2  # some only partly cancelled
    bd[half] = bd[half] * 2
    m = int(rng.integers(0, 40))
    fresh_keys = pool[rng.integers(0, len(pool), (kk, m))]
    fresh_vals = pool[rng.integers(0, len(pool), (kv, m))]
    fresh_times = rng.integers(0, span, (m, d)).astype(np.int64)
    fresh_diffs = rng.choice(np.array([-1, 1, 2], np.int64), m)
    b = B.form_parts([(np.ascontiguousarray(ak[:, pick]), np.ascontiguousarray(av[:, pick]), np.ascontiguousarray(bt),
                       np.ascontiguousarray(bd)), (fresh_keys, fresh_vals, fresh_times, fresh_diffs)], 1)[0]
    if rng.random() < 0.5:
        a, b = b, a
    return a, b


EXTREME = np.array([-(1 << 63), -(1 << 62), -5, -1, 0, 1, 2, 7, 1 << 40, (1 << 63) - 1], np.int64)


@pytest.mark.parametrize("block", range(7))
def test_merge_of_cancelling_batches_under_random_frontiers(block):
    """Rows of one key in both batches that cancel once their times are advanced (or partly cancel, or
    meet rows of their own batch), frontiers of 1..3 elements in 1..3 dimensions (and the empty one), key
    and value columns of extreme int64 values: each merge equals its rows advanced and formed from
    scratch, holds the batch invariants, and accumulates like the definition (a Counter). Block 6 runs
    with colliding key hashes (runs of equal hashes ordered by the keys)."""
    if block == 6:
        with G.colliding_hashes():
            _merge_block(block)
    else:
        _merge_block(block)


def _merge_block(block):
    stats = Counter()
    for seed in range(block * 60, (block + 1) * 60):
        rng = np.random.default_rng(38_000 + seed)
        kk, kv, d = int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 4))
        if kk == 0 and rng.random() < 0.5:
            kk = 1
        span = int(rng.integers(2, 6))
        pool = EXTREME[rng.choice(len(EXTREME), int(rng.integers(1, 5)), replace=False)]
        a, b = _cancelling_pair(rng, kk, kv, d, span, pool)
        frontier = _random_frontier(rng, d, span) if rng.random() < 0.9 else np.zeros((0, d), np.int64)
        got = _merge_all_ways(a, b, frontier, rng)
        want = _expected(a, b, frontier)
        _same_arrays(got, want)
        _check_structure(got)
        ref = Counter()
        for arrays in (a, b):
            k, v, t, dd = _rows(arrays)
            ref.update(_counter(k, v, _advance(t, frontier), dd))
        ref = Counter({x: m for x, m in ref.items() if m})
        assert _counter(*_rows(got)) == ref
        stats["cancelled"] += len(a[5]) + len(b[5]) - len(got[5])
    assert stats["cancelled"] > 0


def test_merge_where_advancing_reorders_and_merges_rows_of_one_key():
    """Crafted: one key whose rows' order by (val, time) changes when advanced ((0, 5) < (3, 0), advanced
    by {(4, 0)} to (4, 5) > (4, 0)), rows of A and B that become equal and cancel, rows of A alone that
    become equal and add up, and a key where nothing moves (left exactly as merged)."""
    def batch(rows):
        keys = np.array([[r[0] for r in rows]], np.int64)
        vals = np.array([[r[1] for r in rows]], np.int64)
        times = np.array([r[2] for r in rows], np.int64).reshape(-1, 2)
        diffs = np.array([r[3] for r in rows], np.int64)
        return B.form_parts([(keys, vals, times, diffs)], 1)[0]
    a = batch([(1, 0, (0, 5), 1), (1, 0, (3, 0), 2), (1, 1, (0, 0), 1), (1, 1, (1, 1), 1), (2, 0, (5, 5), 1),
               (3, 9, (0, 0), 4), (3, 9, (2, 2), -4)])
    b = batch([(1, 0, (4, 0), -2), (1, 1, (2, 0), 5), (2, 0, (6, 6), 1), (3, 9, (1, 1), 7)])
    rng = np.random.default_rng(0)
    got = _merge_all_ways(a, b, np.array([[4, 0]], np.int64), rng)
    _check_structure(got)
    assert _counter(*_rows(got)) == Counter({((1,), (0,), (4, 5)): 1, ((1,), (1,), (4, 0)): 6,
                                             ((1,), (1,), (4, 1)): 1, ((2,), (0,), (5, 5)): 1,
                                             ((2,), (0,), (6, 6)): 1, ((3,), (9,), (4, 0)): 4,
                                             ((3,), (9,), (4, 1)): 7, ((3,), (9,), (4, 2)): -4})
    # two elements: {(4, 0), (0, 4)} keeps (0, 5) and (3, 0) apart from (4, 0) ... but merges (1,1) and (0,0)
    got = _merge_all_ways(a, b, np.array([[0, 4], [4, 0]], np.int64), rng)
    _check_structure(got)
    _same_arrays(got, _expected(a, b, np.array([[0, 4], [4, 0]], np.int64)))
    # everything collapses onto one time: each key's rows add up per value, cancelling ones vanish
    got = _merge_all_ways(a, b, np.array([[9, 9]], np.int64), rng)
    assert _counter(*_rows(got)) == Counter({((1,), (0,), (9, 9)): 1, ((1,), (1,), (9, 9)): 7,
                                             ((2,), (0,), (9, 9)): 2, ((3,), (9,), (9, 9)): 7})
    # a key only in A and every row of A cancelled by B's: the key disappears
    a2 = batch([(5, 1, (0, 1), 1), (5, 2, (1, 0), 1), (6, 0, (0, 0), 1)])
    b2 = batch([(5, 1, (1, 0), -1), (5, 2, (0, 1), -1)])
    got = _merge_all_ways(a2, b2, np.array([[1, 1]], np.int64), rng)
    assert _counter(*_rows(got)) == Counter({((6,), (0,), (1, 1)): 1})
    _check_structure(got)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_merge_sums_at_the_multiplicity_bound(d):
    """Rows summing to 2**62 only once advanced (in one batch, or across both) are refused by both merge
    paths; 2**62 - 1 is kept; MAX_MULT - 1 and its negation at different times cancel once advanced."""
    rng = np.random.default_rng(d)
    t0, t1 = (0,) * d, (0,) * (d - 1) + (1,)
    far = np.array([(2,) * d], np.int64)

    def batch(rows):
        keys = np.array([[r[0] for r in rows]], np.int64)
        vals = np.zeros((1, len(rows)), np.int64)
        times = np.array([r[1] for r in rows], np.int64).reshape(-1, d)
        diffs = np.array([r[2] for r in rows], np.int64)
        return B.form_parts([(keys, vals, times, diffs)], 1)[0]
    # across the batches
    assert _merge_all_ways(batch([(1, t0, MAX_MULT - 1)]), batch([(1, t1, 1)]), far, rng) == "overflow"
    assert _merge_all_ways(batch([(1, t0, -(MAX_MULT - 1))]), batch([(1, t1, -1)]), far, rng) == "overflow"
    ok = _merge_all_ways(batch([(1, t0, MAX_MULT - 2)]), batch([(1, t1, 1)]), far, rng)
    assert ok[5].tolist() == [MAX_MULT - 1]
    # within one batch (only advancing brings them together), the other batch holding another key
    assert _merge_all_ways(batch([(1, t0, MAX_MULT - 1), (1, t1, 1)]), batch([(2, t0, 1)]), far, rng) == "overflow"
    assert _merge_all_ways(batch([(2, t0, 1)]), batch([(1, t0, 1), (1, t1, MAX_MULT - 1)]), far, rng) == "overflow"
    # cancelling
    gone = _merge_all_ways(batch([(1, t0, MAX_MULT - 1), (3, t1, 5)]), batch([(1, t1, -(MAX_MULT - 1))]), far, rng)
    assert _counter(*_rows(gone)) == Counter({((3,), (0,), (2,) * d): 5})
    # no frontier: nothing moves, nothing is summed
    kept = _merge_all_ways(batch([(1, t0, MAX_MULT - 1)]), batch([(1, t1, 1)]), np.zeros((0, d), np.int64), rng)
    assert kept[5].tolist() == [MAX_MULT - 1, 1]


def test_chained_merges_with_lagging_sinces():
    """Batches merged pairwise, then their results merged again under later frontiers (as a spine does:
    inputs already compacted to an earlier since), 2 and 3 dimensions: every merge equals its inputs'
    rows advanced and formed, and the final batch accumulates like the original rows at times in advance
    of the last frontier."""
    for seed in range(40):
        rng = np.random.default_rng(3800 + seed)
        d = int(rng.integers(2, 4))
        kv = int(rng.integers(0, 2))
        span = 6
        pool = np.arange(int(rng.integers(2, 12)), dtype=np.int64)
        originals = []
        level = []
        for i in range(8):
            n = int(rng.integers(0, 60))
            keys = pool[rng.integers(0, len(pool), (1, n))]
            vals = pool[rng.integers(0, len(pool), (kv, n))]
            times = rng.integers(0, span, (n, d)).astype(np.int64)
            diffs = rng.choice(np.array([-1, 1, 2], np.int64), n)
            originals.append((keys, vals, times, diffs))
            level.append(B.form_parts([(keys, vals, times, diffs)], 1)[0])
        front = [tuple(int(x) for x in rng.integers(0, 2, d))]
        while len(level) > 1:
            # a later frontier: each element joined with a random point (in advance of the last one)
            front = list(Antichain(tuple(max(x, y) for x, y in zip(front[int(rng.integers(0, len(front)))],
                                                                  rng.integers(0, span, d)))
                                   for _ in range(int(rng.integers(1, 4)))).elements)
            F = np.array(front, np.int64)
            nxt = []
            for i in range(0, len(level), 2):
                got = _merge_all_ways(level[i], level[i + 1], F, rng)
                _same_arrays(got, _expected(level[i], level[i + 1], F))
                _check_structure(got)
                nxt.append(got)
            level = nxt
        final = level[0]
        fk, fv, ft, fd = _rows(final)
        ok, ov, ot, od = (np.concatenate([o[i] for o in originals], axis=0 if i >= 2 else 1) for i in range(4))
        for _ in range(20):
            f = front[int(rng.integers(0, len(front)))]
            t = np.maximum(np.array(f), rng.integers(0, span + 2, d))
            got = _counter(fk, fv, np.zeros((len(fd), 0), np.int64), fd * (ft <= t).all(axis=1))
            want = _counter(ok, ov, np.zeros((len(od), 0), np.int64), od * (ot <= t).all(axis=1))
            assert got == want, (seed, t.tolist())


def _accumulate(rows, t):
    """(key, val) -> multiplicity of the rows (keys, vals, times, diffs) at times <= t."""
    keys, vals, times, diffs = rows
    return _counter(keys, vals, np.zeros((len(diffs), 0), np.int64), diffs * (times <= t).all(axis=1))


@pytest.mark.parametrize("effort", ["eager", "default", "lazy"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_spine_under_moving_logical_frontiers(effort, d):
    """A spine fed 60 batches (epoch i's times: (i, free coordinates)), inserts and retractions of a few
    keys' values, the logical frontier an antichain of 1..3 elements that moves forward at random and
    lags the upper, the physical one lagging it: after every insertion every readable batch holds the
    invariants and the spine accumulates like the inserted rows at times in advance of the logical
    frontier; merges in progress are finished and checked again at the end."""
    rng = np.random.default_rng(d * 10 + len(effort))
    kv = 1
    sp = Spine(1, kv, d, Antichain([(0,) * d]), effort=effort)
    all_rows = []
    logical = [(0,) * d]
    for i in range(60):
        n = int(rng.integers(0, 50))
        keys = rng.integers(0, 6, (1, n)).astype(np.int64)
        vals = rng.integers(0, 4, (kv, n)).astype(np.int64)
        times = np.concatenate([np.full((n, 1), i, np.int64), rng.integers(0, 4, (n, d - 1))], axis=1)
        diffs = rng.choice(np.array([-1, 1, 1, 2], np.int64), n)
        if i and n and rng.random() < 0.5:  # retract earlier rows, at this epoch
            prev = all_rows[int(rng.integers(0, len(all_rows)))]
            m = len(prev[3])
            if m:
                sel = rng.random(m) < 0.6
                pt = prev[2][sel].copy()
                pt[:, 0] = i
                keys = np.concatenate([keys, prev[0][:, sel]], axis=1)
                vals = np.concatenate([vals, prev[1][:, sel]], axis=1)
                times = np.concatenate([times, pt], axis=0)
                diffs = np.concatenate([diffs, -prev[3][sel]])
        rows = (np.ascontiguousarray(keys), np.ascontiguousarray(vals), np.ascontiguousarray(times), diffs)
        all_rows.append(rows)
        batch = B.Batch.form(*rows, Antichain([(i,) + (0,) * (d - 1)]), Antichain([(i + 1,) + (0,) * (d - 1)]))
        if rng.random() < 0.6:  # the frontier moves: elements joined with random points, epochs <= i
            logical = list(Antichain(tuple(max(x, y) for x, y in zip(logical[int(rng.integers(0, len(logical)))],
                                                                    (int(rng.integers(0, i + 1)),)
                                                                    + tuple(rng.integers(0, 5, d - 1).tolist())))
                                     for _ in range(int(rng.integers(1, 4)))).elements)
        L = Antichain(logical)
        P = Antichain([(max(0, i - int(rng.integers(0, 3))),) + (0,) * (d - 1)])
        sp.insert(batch, L, P)
        if i % 6 == 5 or i == 59:
            _check_spine(sp, all_rows, logical, rng, d)
    for _ in range(100):
        sp.exert(Antichain(logical), Antichain([(61,) + (0,) * (d - 1)]), fuel=1 << 30)
        if not sp.merging()[0]:
            break
    assert not sp.merging()[0]
    _check_spine(sp, all_rows, logical, rng, d)
    assert sp.merges_completed > 0


def _check_spine(sp, all_rows, logical, rng, d):
    orig = tuple(np.concatenate([r[i] for r in all_rows], axis=0 if i >= 2 else 1) for i in range(4))
    bs = [b for b in sp.batches() if len(b)]
    for b in bs:
        _check_structure(b.arrays)
    if bs:
        stored = tuple(np.concatenate([_rows(b.arrays)[i] for b in bs], axis=0 if i >= 2 else 1) for i in range(4))
    else:
        stored = (np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64), np.zeros((0, d), np.int64),
                  np.zeros(0, np.int64))
    for _ in range(12):
        f = logical[int(rng.integers(0, len(logical)))]
        t = np.maximum(np.array(f), rng.integers(0, 70, d) if rng.random() < 0.5 else np.array(f))
        assert _accumulate(stored, t) == _accumulate(orig, t), (t.tolist(), logical)


# == reduce phases 1 and 3 ==============================================================================
# The drivers cffebee replaced (bfeb0a2's reduce_times and reduce_diff: Python loops around the unchanged
# run kernels), with ``small``: every buffer starts one entry long, so each growth path is taken.

def _g1(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    b[:a.shape[0]] = a
    return b


def _grows(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty((max(need, 2 * a.shape[0]), a.shape[1]), a.dtype)
    b[:a.shape[0]] = a
    return b


def _growc(a, need):
    if need <= a.shape[1]:
        return a
    b = np.empty((a.shape[0], max(need, 2 * a.shape[1])), a.dtype)
    b[:, :a.shape[1]] = a
    return b


def old_reduce_times(ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing, small=False,
                     grown=None):
    m = ioff.shape[0] - 1
    d = itimes.shape[1]
    cap = 1 if small else max(16, soff[m] + soff[m] // 4)
    acap = 1 if small else max(16, ioff[m] + cap)
    s = 1 if small else 64
    g_key, g_time, g_off = np.empty(cap, np.int64), np.empty((cap, d), np.int64), np.empty(cap + 1, np.int64)
    acc_row, acc_cnt = np.empty(acap, np.int64), np.empty(acap, np.int64)
    f_key, f_time = np.empty(s, np.int64), np.empty((s, d), np.int64)
    X, XI = np.empty((s, d), np.int64), np.empty((3, s), np.int64)
    C, CI = np.empty((s, d), np.int64), np.empty((2, s), np.int64)
    HT = np.zeros((2, 2 if small else 128), np.int64)
    RW = np.empty((10, 0 if listing == rk.LIST_TOTAL else s), np.int64)
    counts = np.zeros(8, np.int64)
    p = 0
    while True:
        p, need = rk._times_run(p, ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing,
                                g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, X, XI, C, CI, HT, RW, counts)
        if need == rk.NEED_NONE:
            break
        if grown is not None:
            grown[int(need)] += 1
        at = int(counts[rk.P1_NEED_AT])
        if need == rk.NEED_X:
            size = max(at, 2 * X.shape[0])
            X, XI = np.empty((size, d), np.int64), np.empty((3, size), np.int64)
        elif need == rk.NEED_SCRATCH:
            size = max(at, 2 * C.shape[0])
            C, CI = np.empty((size, d), np.int64), np.empty((2, size), np.int64)
            HT = np.zeros((2, 1 << max(4, int(2 * size - 1).bit_length())), np.int64)
        elif need == rk.NEED_ROWS:
            RW = np.empty((10, max(at, 2 * RW.shape[1])), np.int64)
        elif need == rk.NEED_GROUPS:
            g_key = _g1(g_key, at)
            g_time = _grows(g_time, g_key.shape[0])
            g_off = _g1(g_off, g_key.shape[0] + 1)
        elif need == rk.NEED_ACC:
            acc_row = _g1(acc_row, at)
            acc_cnt = _g1(acc_cnt, acc_row.shape[0])
        else:
            f_key = _g1(f_key, at)
            f_time = _grows(f_time, f_key.shape[0])
    if counts[rk.P1_OVERFLOW]:
        raise OverflowError("a row's multiplicity reaches 2**62 or more (old driver)")
    ng, na, nf = counts[0], counts[1], counts[2]
    g_off[ng] = na
    return (g_key[:ng], g_time[:ng], g_off[:ng + 1], acc_row[:na], acc_cnt[:na], f_key[:nf], f_time[:nf],
            (int(counts[rk.P1_WORK]), int(counts[rk.P1_GENERAL])))


def old_reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs, small=False,
                    grown=None):
    G = g_key.shape[0]
    ko = des_vals.shape[0]
    d = g_time.shape[1]
    cap = 1 if small else max(64, 2 * G + des_cnt.shape[0])
    s = 1 if small else 64
    c_key, c_vals = np.empty(cap, np.int64), np.empty((ko, cap), np.int64)
    c_time, c_diff = np.empty((cap, d), np.int64), np.empty(cap, np.int64)
    w_vals, w_time, w_diff = np.empty((ko, s), np.int64), np.empty((s, d), np.int64), np.empty(s, np.int64)
    cur, des, tmp = np.empty(s, np.int64), np.empty(s, np.int64), np.empty(s, np.int64)
    X, U, UW = np.empty((s, d), np.int64), np.empty((ko, s), np.int64), np.empty((11, s), np.int64)
    counts = np.zeros(4, np.int64)
    g = 0
    while True:
        g, need = rk._diff_run(g, g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs,
                               c_key, c_vals, c_time, c_diff, w_vals, w_time, w_diff, cur, des, tmp, X, U, UW, counts)
        if need == rk.NEED_NONE:
            break
        if grown is not None:
            grown[int(need)] += 1
        at = int(counts[rk.P3_NEED_AT])
        if need == rk.NEED_X:
            size = max(at, 2 * UW.shape[1])
            X, U, UW = np.empty((size, d), np.int64), np.empty((ko, size), np.int64), np.empty((11, size), np.int64)
        elif need == rk.NEED_SCRATCH:
            cur = _g1(cur, at)
            des = _g1(des, cur.shape[0])
            tmp = _g1(tmp, cur.shape[0])
        elif need == rk.NEED_GROUPS:
            c_key = _g1(c_key, at)
            c_vals = _growc(c_vals, c_key.shape[0])
            c_time = _grows(c_time, c_key.shape[0])
            c_diff = _g1(c_diff, c_key.shape[0])
        else:
            w_diff = _g1(w_diff, at)
            w_vals = _growc(w_vals, w_diff.shape[0])
            w_time = _grows(w_time, w_diff.shape[0])
    nc = counts[0]
    return (c_key[:nc], c_vals[:, :nc], c_time[:nc], c_diff[:nc], (int(counts[rk.P3_WORK]), int(counts[rk.P3_GENERAL])))


def _key_inputs(rng, d, heavy):
    """One key: input rows (val, time, diff), output history rows, seed times. Heavy keys have hundreds
    of rows and tens of values and seeds (or one seed under a long history: many groups from one seed);
    at depth >= 2 half the keys are chains (a shared leading time)."""
    span = 10 if d <= 2 else 5
    R = int(rng.integers(0, 400 if heavy else 8))
    O = int(rng.integers(0, 150 if heavy else 4))
    S = int(rng.integers(0, 120 if heavy and rng.random() < 0.5 else 3))
    nv = int(rng.integers(1, 80 if heavy else 5))

    def t():
        return tuple(int(x) for x in rng.integers(0, span, d))
    ins = [(int(rng.integers(0, nv)), t(), int(rng.choice([-2, -1, 1, 1, 2]))) for _ in range(R)]
    outs = [(int(rng.integers(0, nv)), t(), int(rng.choice([-1, 1]))) for _ in range(O)]
    seeds = [t() for _ in range(S)]
    if d >= 2 and rng.random() < 0.5:
        lead = tuple(int(x) for x in rng.integers(0, 3, d - 1))
        ins = [(v, lead + ti[-1:], m) for v, ti, m in ins]
        outs = [(v, lead + ti[-1:], m) for v, ti, m in outs]
        seeds = [lead + s[-1:] for s in seeds]
    return ins, outs, seeds


def _identical(got, want):
    assert len(got) == len(want)
    for x, y in zip(got, want):
        if isinstance(x, np.ndarray):
            assert x.shape == y.shape and np.array_equal(x, y), (x, y)
        else:
            assert x == y


def _check_from_scratch(keys, listing, upper, p1, p3):
    """Phase 1's groups and future times and phase 3's corrections against the definition."""
    g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, _ = p1
    c_key, c_vals, c_time, c_diff, _ = p3
    ready_groups, future = {}, set()
    for p, (ins, outs, seeds) in enumerate(keys):
        if not seeds:
            continue
        for t in _closure(seeds, [r[1] for r in ins] + [r[1] for r in outs]):
            if any(_leq(tuple(f), t) for f in upper.tolist()):
                future.add((p, t))
            else:
                acc = Counter()
                for v, ti, m in ins:
                    if _leq(ti, t):
                        acc[v] += m
                ready_groups[(p, t)] = Counter({v: m for v, m in acc.items() if m})
    assert {(int(k), tuple(t)) for k, t in zip(f_key, f_time.tolist())} == future
    assert len(f_key) == len(future)  # no future time twice
    got = [(int(k), tuple(t)) for k, t in zip(g_key, g_time.tolist())]
    assert got == sorted(ready_groups)  # every ready time once, keys and times in order
    corr = {}
    for i in range(len(c_key)):
        corr.setdefault(int(c_key[i]), []).append((tuple(c_time[i].tolist()), int(c_vals[0, i]), int(c_diff[i])))
    for (p, t), acc in ready_groups.items():
        have = Counter()
        for v, ti, m in keys[p][1]:
            if _leq(ti, t):
                have[v] += m
        for ti, v, m in corr.get(p, ()):
            if _leq(ti, t):
                have[v] += m
        assert Counter({v: m for v, m in have.items() if m}) == _desired(listing, acc), (p, t)


@pytest.mark.parametrize("block", range(5))
def test_reduce_phases_equal_the_replaced_drivers_and_the_definition(block):
    """Many keys, some with hundreds of rows, tens of values and up to 120 seeds (or one seed under a
    long history), at depth 1..3 (chains and general partial orders), every listing, upper frontiers of
    0..2 elements: both phases return exactly what bfeb0a2's drivers returned (started from default and
    from one-entry buffers); every growth path of both run kernels is taken across the block; a third of
    the cases is checked against the definition as well."""
    grown1, grown3 = Counter(), Counter()
    for seed in range(block * 40, (block + 1) * 40):
        rng = np.random.default_rng(3838 + seed)
        d = int(rng.integers(1, 4))
        keys = [_key_inputs(rng, d, rng.random() < 0.3) for _ in range(int(rng.integers(1, 50)))]
        span = 10 if d <= 2 else 5
        ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes = _arrays(keys, d)
        upper = np.ascontiguousarray(np.array([rng.integers(0, span + 1, d) for _ in range(int(rng.integers(0, 3)))],
                                              np.int64).reshape(-1, d))
        listing = int(rng.integers(0, 4))
        kin = np.zeros((0, len(idiffs)), np.int64) if listing == rk.LIST_TOTAL else ivals
        args = (ioff, kin, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
        p1 = rk.reduce_times(*args)
        _identical(p1, old_reduce_times(*args, grown=grown1))
        _identical(p1, old_reduce_times(*args, small=True))
        g_key, g_time, g_off, acc_row, acc_cnt = (np.array(x) for x in p1[:5])
        op = LISTED_OP[listing]
        iv = np.zeros((1, max(len(idiffs), 1)), np.int64) if listing == rk.LIST_TOTAL else ivals
        out = np.zeros((1, max(len(acc_row), 1)), np.int64)
        des_off, des_cnt, n = rk.reduce_apply(op, g_off, acc_row, acc_cnt, iv, iv.view(np.float64), iv, rk.MODE_INT,
                                              0, 0, False, out, out.view(np.float64))
        des_vals = np.ascontiguousarray(out[:, :n])
        args3 = (g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs)
        p3 = rk.reduce_diff(*args3)
        _identical(p3, old_reduce_diff(*args3, grown=grown3))
        _identical(p3, old_reduce_diff(*args3, small=True))
        if seed % 3 == 0:
            _check_from_scratch(keys, listing, upper, p1, p3)
    if block == 0:
        # the default-sized buffers had to grow along every path (so the new kernels grew them too)
        assert set(grown1) == {rk.NEED_X, rk.NEED_SCRATCH, rk.NEED_ROWS, rk.NEED_GROUPS, rk.NEED_ACC,
                               rk.NEED_FUTURE}, grown1
        assert set(grown3) == {rk.NEED_X, rk.NEED_SCRATCH, rk.NEED_ROWS, rk.NEED_GROUPS}, grown3


def test_reduce_phases_with_several_value_columns_and_extreme_values():
    """Two value columns of extreme int64 values (the value order is signed, lexicographic) and output
    values of two columns: both phases equal the replaced drivers'."""
    for seed in range(30):
        rng = np.random.default_rng(99 + seed)
        d = int(rng.integers(1, 3))
        keys = [_key_inputs(rng, d, rng.random() < 0.4) for _ in range(int(rng.integers(1, 20)))]
        ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes = _arrays(keys, d)
        ivals = np.ascontiguousarray(np.stack([EXTREME[ivals[0] % len(EXTREME)],
                                               EXTREME[(ivals[0] * 7) % len(EXTREME)]]))
        upper = np.zeros((0, d), np.int64) if rng.random() < 0.5 else np.array([[6] * d], np.int64)
        for listing in (rk.LIST_ALL, rk.LIST_FIRST, rk.LIST_LAST):
            args = (ioff, ivals, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
            p1 = rk.reduce_times(*args)
            _identical(p1, old_reduce_times(*args))
            _identical(p1, old_reduce_times(*args, small=True))
        g_key, g_time, g_off, acc_row, acc_cnt = (np.array(x) for x in p1[:5])
        # desired: the group's listed rows' values, two columns, their counts
        des_off = g_off.copy()
        des_vals = np.ascontiguousarray(ivals[:, acc_row]) if len(acc_row) else np.zeros((2, 0), np.int64)
        des_cnt = acc_cnt.copy()
        ov2 = np.ascontiguousarray(np.stack([EXTREME[ovals[0] % len(EXTREME)], EXTREME[(ovals[0] * 7) % len(EXTREME)]]))
        args3 = (g_key, g_time, des_off, des_vals, des_cnt, ooff, ov2, otimes, odiffs)
        p3 = rk.reduce_diff(*args3)
        _identical(p3, old_reduce_diff(*args3))
        _identical(p3, old_reduce_diff(*args3, small=True))


def _one_key(ins, seeds, d, outs=()):
    return [(list(ins), list(outs), list(seeds))]


@pytest.mark.parametrize("listing", [rk.LIST_TOTAL, rk.LIST_ALL, rk.LIST_FIRST, rk.LIST_LAST])
@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("behind", [False, True])
def test_reduce_times_overflow_is_refused(listing, d, behind):
    """A value (or a key's total) whose multiplicity reaches 2**62 at a ready time raises the engine's
    OverflowError (chain and, at depth 2, general partial order), also when the key comes after heavy keys
    that made the kernel grow its buffers (``behind``); 2**62 - 1 passes."""
    z = (0,) * d
    one = (0,) * (d - 1) + (1,)
    other = (1,) + (0,) * (d - 1)
    filler = []
    if behind:
        rng = np.random.default_rng(5)
        filler = [_key_inputs(rng, d, True) for _ in range(6)]
        filler = [(ins, outs, seeds or [z]) for ins, outs, seeds in filler]
    upper = np.zeros((0, d), np.int64)
    cases = [
        ([(3, z, MAX_MULT - 1), (3, one, 1)], [one], True),          # a chain
        ([(3, z, -(MAX_MULT - 1)), (3, one, -1)], [z, one], True),
        ([(3, z, MAX_MULT - 2), (3, one, 1)], [one], False),
        ([(3, z, MAX_MULT - 2), (3, one, 1), (4, z, -5)], [z], False),
    ]
    if d == 2:
        cases += [
            ([(3, one, MAX_MULT - 1), (3, other, 1)], [one, other], True),  # the lub (1, 1) sums them
            ([(3, one, MAX_MULT - 2), (3, other, 1)], [one, other], False),
        ]
    for ins, seeds, overflows in cases:
        if listing == rk.LIST_TOTAL:  # a total over values: the first update split across two values
            v, t, m = ins[0]
            ins = [(v, t, m - np.sign(m)), (9, t, int(np.sign(m)))] + ins[1:]
        keys = filler + _one_key(ins, seeds, d)
        ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes = _arrays(keys, d)
        kin = np.zeros((0, len(idiffs)), np.int64) if listing == rk.LIST_TOTAL else ivals
        args = (ioff, kin, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
        if overflows:
            with pytest.raises(OverflowError, match=OVERFLOW):
                rk.reduce_times(*args)
            with pytest.raises(OverflowError):
                old_reduce_times(*args, small=True)
        else:
            _identical(rk.reduce_times(*args), old_reduce_times(*args, small=True))


# == the engine ========================================================================================

HEAVY_REDS = [("count", ("k",)), ("sum", ("k",), "v"), ("sum", ("k", "b"), "f"), ("min", ("k",), "v"),
              ("max", ("k",), "s"), ("distinct", ("k",)), ("threshold", ("k",), "neg"), ("argmin", ("k",), "f"),
              ("argmax", ("k",), "v"), ("top_k", ("k",), "v", 3, True), ("top_k", ("k", "b"), "s", 2, False),
              ("reduce", ("k",), "u_int"), ("reduce", ("b",), "u_float"), ("count", ()), ("min", (), "v"),
              ("distinct", ())]


def _heavy_row(rng):
    """Mostly two hot keys holding hundreds of distinct values (each key's rows in a step exceed the
    reduce kernels' first buffers); some cold keys."""
    k = int(rng.integers(0, 2)) if rng.random() < 0.8 else int(rng.integers(-3, 20))
    return (k, G.S[rng.integers(len(G.S))], G.F[rng.integers(len(G.F))], bool(rng.random() < 0.5),
            int(rng.integers(-150, 150)))


def _epochs(rng, A, a: Counter, hist: dict, t: int, n: int, rows_per: int) -> int:
    """``n`` epochs of updates into A from epoch t on: inserts (multiplicity 1, 2, sometimes -1), a row
    inserted and retracted in one epoch, retractions of live rows; each epoch advanced. Returns the next
    epoch."""
    for _ in range(n):
        rows, diffs = [], []
        for _ in range(int(rng.integers(0, rows_per + 1))):
            r = _heavy_row(rng)
            m = int(rng.choice([1, 1, 1, 2, -1]))
            rows.append(r), diffs.append(m)
            if rng.random() < 0.15:
                rows.append(r), diffs.append(-m)
        live = [r for r, m in a.items() if m > 0]
        for _ in range(int(rng.integers(0, 3))):
            if live:
                rows.append(live[int(rng.integers(len(live)))]), diffs.append(-1)
        if rows:
            A.update(rows, diffs)
        for r, m in zip(rows, diffs):
            a[r] += m
        for r in [r for r, m in a.items() if not m]:
            del a[r]
        hist[t] = Counter(a)
        t += 1
        A.advance_to(t)
    return t


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_reduction_over_long_backlogs_of_hot_keys(workers):
    """Sixteen reductions in one dataflow over two hot keys holding hundreds of values, fed in bursts of
    up to 90 epochs between waits (a reduce step then sees tens of times and hundreds of rows per key);
    after each wait every output equals the oracle at the latest epoch and, through the views' history,
    at every seventh epoch of the burst (and its first, middle and last)."""
    heavy_case(380 + workers, workers, ["eager", "default", "lazy"][workers - 1])


def test_every_reduction_over_long_backlogs_with_colliding_key_hashes():
    """As above, W = 2, every key hash one of three values (equal-hash runs in every batch and merge)."""
    with G.colliding_hashes():
        heavy_case(3838, 2, "default", bursts=(50, 2, 30))


def heavy_case(seed, workers, effort, bursts=(90, 3, 60, 1, 75)):
    rng = np.random.default_rng(seed)
    a, hist = Counter(), {}
    with kp.Engine(workers=workers, effort=effort) as eng:
        A = eng.input("A", G.COLS, dtypes=G.DTYPES)
        views = {}
        with eng.dataflow("p") as df:
            src = df.input("A")
            src.arrange_by("k").export("A_by_k")
            for i, red in enumerate(HEAVY_REDS):
                views[i] = G.build_red(red, src).view(f"r{i}", history=100)
        late, born = {}, None
        t = 0
        for n, burst in enumerate(bursts):
            first = t
            t = _epochs(rng, A, a, hist, t, burst, 8)
            if n == 1:
                # a dataflow installed now imports the input's arrangement: its history of many batches,
                # merged with their times advanced to the import's start (retractions cancelling there)
                with eng.dataflow("late") as df:
                    imp = df.use("A_by_k").as_collection()
                    for i in (0, 3, 9, 11):
                        late[i] = G.build_red(HEAVY_REDS[i], imp).view(f"late{i}", history=100)
                    late["rows"] = imp.view("rows", history=100)
                born = t - 1
            for v in list(views.values()) + list(late.values()):
                eng.wait(v, timeout=T)
            for i, red in enumerate(HEAVY_REDS):
                names = G.out_cols(red)
                for e in sorted({first, (first + t - 1) // 2, t - 1} | set(range(first, t, 7))):
                    at = e if e < t - 1 else None
                    want = G.norm(G.ref_red(red, hist[e]))
                    assert G.view_counter(views[i], at=at, names=names) == want, (red, e)
                    if i in late and e >= born:
                        assert G.view_counter(late[i], at=at, names=names) == want, ("late", red, e)
                    if i == 0 and late and e >= born:
                        assert G.view_counter(late["rows"], at=at, names=G.COLS) == G.norm(hist[e]), e


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_reductions_in_nested_loops_over_backlogs(workers):
    """Random loop programs (reductions inside loops nested 1 and 2 deep: times of depth 2 and 3, not
    totally ordered within a step) over hot keys, bursts of up to 25 epochs between waits; every retained
    epoch checked against the from-scratch oracle."""
    fails = []
    for j in range(3):
        fails += loop_case(3800 + 10 * workers + j, workers, 1 + j % 2)
    assert not fails, fails


def _zero_column_threshold(prog) -> bool:
    return prog is not None and ((prog[1][0] == "threshold" and not prog[1][1])
                                 or (prog[0] == "loop" and _zero_column_threshold(prog[3])))


def loop_case(seed, workers, depth, bursts=(25, 2, 12)):
    fails = []
    if True:
        rng = np.random.default_rng(seed)
        prog = G.random_prog(rng, depth)
        while _zero_column_threshold(prog):  # (no zero-column threshold inside loops)
            prog = G.random_prog(rng, depth)
        a, hist = Counter(), {}
        with kp.Engine(workers=workers) as eng:
            A = eng.input("A", G.COLS, dtypes=G.DTYPES)
            with eng.dataflow("p") as df:
                v = G.build_prog(prog, df, df.input("A")).view("out", history=40)
            t = 0
            for burst in bursts:
                first = t
                t = _epochs(rng, A, a, hist, t, burst, 4)
                eng.wait(v, timeout=T)
                for e in sorted(set(range(first, t, 3)) | {t - 1}):
                    got = G.view_counter(v, at=e if e < t - 1 else None)
                    if got != G.norm(G.ref_prog(prog, hist[e])):
                        fails.append((seed, prog, e))
                        break
    return fails


def _components(n, E) -> dict:
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for s, d in E:
        a, b = find(s), find(d)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {v: min(u for u in range(n) if find(u) == find(v)) for v in range(n)}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_min_label_loop_over_a_backlog_of_edge_changes(workers):
    """Connected components by min-label propagation in an ``iterate`` (join, then ``min`` by node: a
    reduce inside a loop), on a path-like graph whose edges are cut and rejoined for 40 epochs between
    waits: a node's times (epoch, round) are not totally ordered across the backlog, so phase 1 takes
    the general route over a closure of hundreds of times, and many times lie past the frontier. Every
    epoch is checked through the view's history; the label and the edge arrangements' spines compact
    under loop frontiers meanwhile."""
    cc_case(38 + workers, workers)


def cc_case(seed, workers, n=24, bursts=(40, 1, 30)):
    rng = np.random.default_rng(seed)
    E = {(i, i + 1) for i in range(n - 1)}
    with kp.Engine(workers=workers) as eng:
        nodes = eng.input("nodes", ["node", "label"], rows=[(i, i) for i in range(n)])
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E | {(d, s) for s, d in E}))
        with eng.dataflow("cc") as df:
            e = df.input("edges")

            def body(lab):
                sent = lab.join(e, left_on="node", right_on="src").map(
                    lambda node, label, dst: {"node": dst, "label": label})
                return sent.concat(lab).min(by="node", col="label").as_collection()
            v = df.input("nodes").iterate(body).view("cc", history=50)
        hist = {}
        t = 0
        for burst in bursts:
            first = t
            for _ in range(burst):
                for _ in range(int(rng.integers(0, 3))):
                    s = int(rng.integers(0, n - 1))
                    pair = (s, s + 1) if rng.random() < 0.8 else (s, int(rng.integers(0, n)))
                    if pair[0] == pair[1]:
                        continue
                    if pair in E:
                        edges.remove([pair, pair[::-1]])
                        E.discard(pair)
                    else:
                        edges.insert([pair, pair[::-1]])
                        E.add(pair)
                hist[t] = set(E)
                t += 1
                edges.advance_to(t)
                nodes.advance_to(t)
            eng.wait(v, timeout=T)
            for ep in range(first, t):
                got = G.view_counter(v, at=ep if ep < t - 1 else None, names=["node", "label"])
                want = Counter({(x, lab): 1 for x, lab in _components(n, hist[ep]).items()})
                assert got == want, (ep, sorted((got - want).items())[:5], sorted((want - got).items())[:5])


DL = """
reach(x, y) :- edge(x, y).
reach(x, y) :- reach(x, z), edge(z, y).
deg(x, count<y>) :- edge(x, y).
dist(y, min<d>) :- root(y), d = 0.
dist(y, min<d>) :- dist(x, d1), edge(x, y), d = d1 + 1.
far(max<d>) :- dist(_, d).
"""


def _dl_reference(E, R):
    succ: dict = {}
    for s, d in E:
        succ.setdefault(s, set()).add(d)
    reach = set()
    for x in {s for s, _ in E}:
        seen, todo = set(), list(succ.get(x, ()))
        while todo:
            y = todo.pop()
            if y not in seen:
                seen.add(y)
                todo += succ.get(y, ())
        reach |= {(x, y) for y in seen}
    dist = {r: 0 for r in R}
    frontier = sorted(R)
    while frontier:
        nxt = []
        for x in frontier:
            for y in succ.get(x, ()):
                if y not in dist:
                    dist[y] = dist[x] + 1
                    nxt.append(y)
        frontier = nxt
    deg = Counter(s for s, _ in E)
    return reach, dist, deg


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_datalog_aggregates_over_bursts_of_edge_changes(workers):
    """A recursive program (closure, a recursive min<>, count<> and max<>) while edges and roots change
    for up to 15 epochs between waits; each wait's relations equal the from-scratch answer."""
    rng = np.random.default_rng(3838 + workers)
    N = 12
    E = {(i, i + 1) for i in range(0, N - 1, 2)} | {(3, 0), (5, 2)}
    R = {0}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
        root = eng.input("root", ["node"], rows=[(0,)])
        prog = eng.datalog(DL, inputs={"edge": "edges"}, name="dl")
        t = 0
        for burst in (1, 15, 4, 12, 1, 9):
            for _ in range(burst):
                for _ in range(int(rng.integers(0, 4))):
                    s, d = (int(x) for x in rng.integers(0, N, 2))
                    if (s, d) in E:
                        edges.remove([(s, d)])
                        E.discard((s, d))
                    elif s != d:
                        edges.insert([(s, d)])
                        E.add((s, d))
                if rng.random() < 0.2:
                    x = int(rng.integers(0, N))
                    if x in R and len(R) > 1:
                        root.remove([(x,)])
                        R.discard(x)
                    elif x not in R:
                        root.insert([(x,)])
                        R.add(x)
                t += 1
                edges.advance_to(t)
                root.advance_to(t)
            for r in ("reach", "deg", "dist", "far"):
                eng.wait(prog[r], timeout=T)
            reach, dist, deg = _dl_reference(E, R)
            assert set(map(tuple, prog["reach"].to_pandas().to_numpy().tolist())) == reach, t
            got = prog["dist"].to_pandas()
            assert dict(zip(got.iloc[:, 0].tolist(), got.iloc[:, 1].tolist())) == dist and len(got) == len(dist), t
            got = prog["deg"].to_pandas()
            assert dict(zip(got.iloc[:, 0].tolist(), got.iloc[:, 1].tolist())) == dict(deg) and len(got) == len(deg), t
            assert prog["far"].to_pandas().iloc[:, 0].tolist() == [max(dist.values())], t


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("what", ["view", "count", "distinct", "min"])
def test_multiplicities_reaching_the_bound_across_epochs_are_refused(workers, what):
    """A row inserted 2**62 - 1 times, then once more several epochs later (merges of the arrangement's
    batches, advanced under the frontier, bring them together; a reduce accumulates them): the dataflow
    fails with the multiplicity error instead of wrapping. One less passes, and reads back exactly."""
    for extra, fails in ((1, True), (0, False)):
        eng = kp.Engine(workers=workers)
        try:
            A = eng.input("A", ["k", "v"])
            with eng.dataflow("d") as df:
                a = df.input("A")
                coll = {"view": a, "count": a.count(by="k"), "distinct": a.select("k").distinct(),
                        "min": a.min(by="k", col="v")}[what]
                v = coll.view("out")
            A.update([(1, 5)], [MAX_MULT - 2])
            for t in range(1, 4):
                A.update([(2, t)], [1])
                A.advance_to(t)
            eng.wait(v, timeout=T)
            A.update([(1, 5)], [1])
            A.advance_to(4)
            eng.wait(v, timeout=T)
            A.update([(1, 5)], [extra])
            A.update([(1, 5), (2, 1)], [1, -1])
            A.update([(1, 5)], [-1])
            A.advance_to(5)
            A.advance_to(6)
            if fails:
                with pytest.raises(Exception, match=OVERFLOW):
                    eng.wait(v, timeout=T)
                continue
            eng.wait(v, timeout=T)
            got = {k: [int(x) for x in c] for k, c in v.columns(diffs=True).items()}
            want = {"view": {"k": [1, 2, 2], "v": [5, 2, 3], "diff": [MAX_MULT - 1, 1, 1]},
                    "count": {"k": [1, 2], "count": [MAX_MULT - 1, 2], "diff": [1, 1]},
                    "distinct": {"k": [1, 2], "diff": [1, 1]},
                    "min": {"k": [1, 2], "v": [5, 2], "diff": [1, 1]}}[what]
            order = np.lexsort(tuple(np.array(got[c]) for c in reversed(list(got))))
            assert {c: [x[i] for i in order] for c, x in got.items()} == want
        finally:
            eng.close()
