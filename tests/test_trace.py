"""Arranged batches, spines, trace handles and cursors against a plain-Python model of the trace."""
import gc
import weakref
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpgnb.engine import batch as bm
from kpgnb.engine.batch import Batch, form_arrays, merge_arrays
from kpgnb.engine.cursor import probe_keys
from kpgnb.engine.kernels import sort as sortk
from kpgnb.engine.lattice import Antichain, leq, rep
from kpgnb.engine.scheduler import IDLE_FUEL
from kpgnb.engine.scope import TimeLens
from kpgnb.engine.trace import CompactedError, Trace


def updates_strategy(kk, kv, depth, max_size=40, key_range=6):
    row = st.tuples(st.tuples(*[st.integers(-2, key_range)] * kk), st.tuples(*[st.integers(0, 3)] * kv),
                    st.tuples(*[st.integers(0, 4)] * depth), st.integers(-2, 2))
    return st.lists(row, max_size=max_size)


def to_arrays(rows, kk, kv, depth):
    n = len(rows)
    keys = np.array([r[0] for r in rows], np.int64).reshape(n, kk).T.copy()
    vals = np.array([r[1] for r in rows], np.int64).reshape(n, kv).T.copy()
    times = np.array([r[2] for r in rows], np.int64).reshape(n, depth)
    diffs = np.array([r[3] for r in rows], np.int64)
    return keys, vals, times, diffs


def consolidated(rows):
    acc = Counter()
    for k, v, t, d in rows:
        acc[(k, v, t)] += d
    return {x: d for x, d in acc.items() if d}


def batch_rows(arrs):
    kh, keys, koff, vals, times, diffs = arrs
    out = {}
    for i in range(len(kh)):
        for r in range(koff[i], koff[i + 1]):
            out[(tuple(keys[:, i].tolist()), tuple(vals[:, r].tolist()), tuple(times[r].tolist()))] = int(diffs[r])
    return out


def check_invariants(arrs):
    """Sorted by (hash, key, val, time), consolidated, no empty keys, hashes match keys."""
    kh, keys, koff, vals, times, diffs = arrs
    assert (diffs != 0).all()
    assert (np.diff(koff) > 0).all()
    assert (kh == sortk.hash_keys(np.ascontiguousarray(keys))).all()
    seen = []
    for i in range(len(kh)):
        k = (int(kh[i]),) + tuple(keys[:, i].tolist())
        rows = [tuple(vals[:, r].tolist()) + tuple(times[r].tolist()) for r in range(koff[i], koff[i + 1])]
        assert rows == sorted(rows) and len(set(rows)) == len(rows)
        seen.append(k)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


@pytest.fixture(params=["real", "colliding"])
def hashes(request, monkeypatch):
    """Run with the real 40-bit hash and with one that collides constantly (hash = first key mod 3),
    so the (key, val, time) ordering inside equal-hash runs is exercised."""
    if request.param == "colliding":
        def coarse(keys):
            return (np.abs(keys[0]) % 3).astype(np.int64) if keys.shape[0] else np.zeros(keys.shape[1], np.int64)
        monkeypatch.setattr(sortk, "hash_keys", coarse)
        def packed(keys):
            n = keys.shape[1]
            return (coarse(keys).astype(np.uint64) << np.uint64(sortk.POS_BITS)) | np.arange(n, dtype=np.uint64)
        monkeypatch.setattr(sortk, "packed_hashes", packed)

        def into(keys, out, lo=0, hi=None):
            hi = keys.shape[1] if hi is None else hi
            out[lo:hi] = coarse(keys)[lo:hi]
            return out
        monkeypatch.setattr(sortk, "key_hashes", into)
    return request.param


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2), st.integers(0, 2), st.integers(1, 3), st.data())
def test_formation_consolidates(kk, kv, depth, data):
    rows = data.draw(updates_strategy(kk, kv, depth))
    arrs = form_arrays(*to_arrays(rows, kk, kv, depth))
    assert batch_rows(arrs) == consolidated(rows)
    check_invariants(arrs)


@pytest.mark.parametrize("kk,kv,depth", [(1, 0, 1), (1, 1, 2), (2, 1, 1), (1, 2, 3)])
def test_formation_and_merge_with_collisions(hashes, kk, kv, depth):
    rng = np.random.default_rng(7)
    for trial in range(30):
        ra = [(tuple(rng.integers(-3, 9, kk).tolist()), tuple(rng.integers(0, 3, kv).tolist()),
               tuple(rng.integers(0, 4, depth).tolist()), int(rng.integers(-2, 3))) for _ in range(rng.integers(0, 60))]
        rb = [(tuple(rng.integers(-3, 9, kk).tolist()), tuple(rng.integers(0, 3, kv).tolist()),
               tuple(rng.integers(0, 4, depth).tolist()), int(rng.integers(-2, 3))) for _ in range(rng.integers(0, 60))]
        a = form_arrays(*to_arrays(ra, kk, kv, depth))
        b = form_arrays(*to_arrays(rb, kk, kv, depth))
        if hashes == "colliding":
            assert (a[0] < 3).all()
        check_invariants_coarse = check_invariants if hashes == "real" else (lambda x: None)
        check_invariants_coarse(a)
        m, _ = merge_arrays(a, b)
        assert batch_rows(m) == consolidated(ra + rb)
        check_invariants_coarse(m)
        # merging with compaction advances times by rep_F and consolidates
        F = Antichain([tuple(rng.integers(0, 4, depth).tolist()) for _ in range(rng.integers(1, 3))])
        mc, _ = merge_arrays(a, b, F.matrix())
        expect = consolidated([(k, v, rep(t, F), d) for k, v, t, d in ra + rb])
        assert batch_rows(mc) == expect
        check_invariants_coarse(mc)


@pytest.mark.parametrize("bucket_rows", [1, 3, 64])
def test_formation_in_many_buckets(hashes, monkeypatch, bucket_rows):
    """Formation distributes rows into buckets by their top hash bits and orders each bucket on its own:
    with tiny buckets (many of them, and with the colliding hash all rows in one) the result is the same."""
    monkeypatch.setattr(sortk, "BUCKET_ROWS", bucket_rows)
    monkeypatch.setattr(sortk, "ONE_BUCKET", 0)
    rng = np.random.default_rng(3)
    for kk, kv, depth in [(1, 0, 1), (1, 1, 2), (2, 1, 1)]:
        rows = [(tuple(int(k) for k in rng.integers(-20, 50, kk)), tuple(int(v) for v in rng.integers(0, 3, kv)),
                 tuple(int(t) for t in rng.integers(0, 3, depth)), int(rng.integers(-1, 3))) for _ in range(500)]
        arrs = form_arrays(*to_arrays(rows, kk, kv, depth))
        assert batch_rows(arrs) == consolidated(rows)
        if hashes == "real":
            check_invariants(arrs)


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize("bucket_rows", [1, 8, 8192])
def test_formation_in_shards(monkeypatch, workers, bucket_rows):
    """form_shards exchanges updates to the shards owning their keys ((hash * W) >> HASH_BITS) and forms
    each shard's batch: the same arrays as forming each shard's updates alone, each contiguous."""
    rng = np.random.default_rng(workers * 100 + bucket_rows)
    for kk, kv, depth in [(1, 0, 1), (1, 1, 2), (2, 2, 1), (0, 1, 1)]:
        n = int(rng.integers(0, 2000))
        keys = rng.integers(-5, 300, (kk, n))
        vals = rng.integers(0, 3, (kv, n))
        times = rng.integers(0, 3, (n, depth))
        diffs = rng.integers(-2, 3, n)
        monkeypatch.setattr(sortk, "BUCKET_ROWS", bucket_rows)
        monkeypatch.setattr(sortk, "ONE_BUCKET", 0)
        monkeypatch.setattr(bm, "PARALLEL_ROWS", 0)  # rows distributed by several ranges
        parts = bm.form_shards(keys, vals, times, diffs, workers)
        monkeypatch.undo()
        shard = sortk.hash_keys(np.ascontiguousarray(keys)) * workers >> sortk.HASH_BITS
        assert len(parts) == workers
        for s in range(workers):
            sel = shard == s
            ref = form_arrays(keys[:, sel], vals[:, sel], times[sel], diffs[sel])
            assert all(np.array_equal(x, y) for x, y in zip(parts[s], ref))
            assert all(a.flags.c_contiguous for a in parts[s])


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("bucket_rows", [1, 8, 8192])
@pytest.mark.parametrize("parallel_rows", [0, 10**9])
def test_formation_of_parts(monkeypatch, workers, bucket_rows, parallel_rows):
    """form_parts reads several parts where they are (no concatenation first): the same shards' arrays
    as form_shards of the parts concatenated, empty parts included."""
    rng = np.random.default_rng(workers * 1000 + bucket_rows)
    for kk, kv, depth in [(1, 0, 1), (1, 1, 2), (2, 2, 1), (0, 1, 1), (2, 0, 2)]:
        sizes = [int(x) for x in rng.integers(0, 700, int(rng.integers(1, 5)))] + [0]
        rng.shuffle(sizes)
        parts = [(rng.integers(-5, 300, (kk, m)), rng.integers(0, 3, (kv, m)), rng.integers(0, 3, (m, depth)),
                  rng.integers(-2, 3, m)) for m in sizes]
        whole = [np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0) for i in range(4)]
        monkeypatch.setattr(sortk, "BUCKET_ROWS", bucket_rows)
        monkeypatch.setattr(sortk, "ONE_BUCKET", 0)
        monkeypatch.setattr(bm, "PARALLEL_ROWS", parallel_rows)
        got = bm.form_parts(parts, workers)
        want = bm.form_shards(*whole, workers)
        monkeypatch.undo()
        assert len(got) == workers
        for g, w in zip(got, want):
            assert all(np.array_equal(x, y) for x, y in zip(g, w))
            assert all(a.flags.c_contiguous for a in g)
        # the parts are read only
        again = [np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0) for i in range(4)]
        assert all(np.array_equal(x, y) for x, y in zip(whole, again))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("bucket_rows", [8, 8192])
def test_formation_of_one_time_leaves_times_out(monkeypatch, workers, bucket_rows):
    """form_parts(time=t) of parts whose updates all have time t (times left out of the kernels, filled
    in after) gives the same shards' arrays as forming them with their times; the batcher finds such
    parts on arrival, and seals a mix of times, or of one-time parts of different times, with times."""
    from kpgnb.engine.batcher import Batcher
    rng = np.random.default_rng(workers * 7 + bucket_rows)
    monkeypatch.setattr(sortk, "BUCKET_ROWS", bucket_rows)
    monkeypatch.setattr(sortk, "ONE_BUCKET", 0)
    for kk, kv, depth in [(1, 0, 1), (1, 1, 2), (2, 2, 3), (0, 1, 1)]:
        t = tuple(int(x) for x in rng.integers(0, 5, depth))
        sizes = [int(x) for x in rng.integers(0, 500, 3)]
        parts = [(rng.integers(-5, 80, (kk, m)), rng.integers(0, 3, (kv, m)), np.tile(np.array(t, np.int64), (m, 1)),
                  rng.integers(-2, 3, m)) for m in sizes]
        got = bm.form_parts(parts, workers, time=t)
        want = bm.form_parts(parts, workers)
        assert len(got) == workers
        for g, w in zip(got, want):
            assert all(np.array_equal(x, y) for x, y in zip(g, w))
            assert all(a.flags.c_contiguous and a.flags.writeable for a in g)
        for mixed in (False, True):
            b = Batcher(kk, kv, depth, workers)
            b.push(parts)
            if mixed:  # one more part at another time: every part formed with its times
                other = tuple(x + 1 for x in t)
                extra = (rng.integers(-5, 80, (kk, 9)), rng.integers(0, 3, (kv, 9)),
                         np.tile(np.array(other, np.int64), (9, 1)), np.ones(9, np.int64))
                b.push([extra])
                want = bm.form_parts(parts + [extra], workers)
            assert all(p.single for p in b.buffer if len(p.diffs))
            sealed = b.seal(Antichain([(0,) * depth]), Antichain())
            for g, w in zip(sealed, want):
                assert all(np.array_equal(x, y) for x, y in zip(g.arrays, w))


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_small_formation_splits_one_batch_by_shard(monkeypatch, workers):
    """Below SMALL_ROWS the shards are formed as one batch and split at hash boundaries: the same arrays
    as distributing the rows to the shards first (the path for larger inputs), every array C-ordered."""
    rng = np.random.default_rng(workers)
    for kk, kv, depth in [(1, 0, 1), (1, 1, 2), (2, 2, 1), (0, 1, 1), (2, 0, 2), (3, 1, 1)]:
        for m in (0, 1, 2, 7, 300):
            parts = [(rng.integers(-5, 60, (kk, m)), rng.integers(0, 3, (kv, m)), rng.integers(0, 3, (m, depth)),
                      rng.integers(-2, 3, m)), (rng.integers(-5, 60, (kk, 3)), rng.integers(0, 3, (kv, 3)),
                                                 rng.integers(0, 3, (3, depth)), rng.integers(-2, 3, 3))]
            got = bm.form_parts(parts, workers)
            monkeypatch.setattr(bm, "SMALL_ROWS", 0)
            want = bm.form_parts(parts, workers)
            monkeypatch.undo()
            assert len(got) == workers
            for g, w in zip(got, want):
                assert all(np.array_equal(x, y) for x, y in zip(g, w)), (kk, kv, depth, m)
                assert all(a.flags.c_contiguous for a in g)


@pytest.mark.parametrize("workers", [2, 3, 7])
def test_split_cuts_at_the_exchange_shard_boundaries(workers):
    """Hashes next to every shard boundary land in the shard the exchange kernel would send them to."""
    bound = [-((-s << sortk.HASH_BITS) // workers) for s in range(1, workers)]
    kh = np.array(sorted({h for b in bound for h in (b - 1, b, b + 1)} | {0, (1 << sortk.HASH_BITS) - 1}),
                  np.int64)
    n = len(kh)
    arrays = (kh, np.arange(n, dtype=np.int64).reshape(1, n), np.arange(n + 1, dtype=np.int64),
              np.zeros((0, n), np.int64), np.zeros((n, 1), np.int64), np.ones(n, np.int64))
    shards = bm._split(arrays, workers)
    for s, (h, *_rest) in enumerate(shards):
        assert all((int(x) * workers) >> sortk.HASH_BITS == s for x in h)
    assert sum(len(sh[0]) for sh in shards) == n


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_batcher_seals_the_parts_before_the_frontier(workers):
    """A seal forms the buffered updates whose times are not in advance of ``upper`` (from every pushed
    part) and keeps the rest buffered, with their minimal times held, for a later seal."""
    from kpgnb.engine.batcher import Batcher
    rng = np.random.default_rng(workers)
    b = Batcher(1, 1, 2, workers)
    rows = []
    for _ in range(4):
        m = int(rng.integers(0, 300))
        keys, vals = rng.integers(0, 50, (1, m)), rng.integers(0, 3, (1, m))
        times, diffs = rng.integers(0, 4, (m, 2)), rng.integers(-1, 3, m)
        b.push([(keys, vals, times, diffs)])
        rows += [((int(k),), (int(v),), tuple(int(x) for x in t), int(d))
                 for k, v, t, d in zip(keys[0], vals[0], times, diffs)]
    upper = Antichain([(2, 1), (1, 3)])
    batches = b.seal(Antichain([(0, 0)]), upper)
    def formed(bs):
        out = {}
        for bt in bs:
            out.update(batch_rows(bt.arrays))
        return out
    assert formed(batches) == consolidated([r for r in rows if not upper.dominates(r[2])])
    later = [r for r in rows if upper.dominates(r[2])]
    assert later and len(later) < len(rows)
    assert b.buffered == len(later)
    assert b.held == Antichain([r[2] for r in later])
    assert formed(b.seal(upper, Antichain())) == consolidated(later)
    assert b.buffered == 0


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("span", [4, 40])
def test_batcher_holds_later_updates_by_time(workers, span):
    """Seals at a rising sequence of frontiers (as a loop's rounds) each take exactly the held updates
    the frontier has passed. Updates held for later are split into one part per time when they hold at
    most TIME_GROUPS times (span 4: 16 times), so later seals take or leave them whole; with more (span
    40: up to 1,600) they stay one part."""
    from kpgnb.engine import batcher as bt
    rng = np.random.default_rng(workers * 10 + span)
    b = bt.Batcher(1, 1, 2, workers)
    rows = []
    for _ in range(3):
        m = int(rng.integers(200, 600))
        keys, vals = rng.integers(0, 40, (1, m)), rng.integers(0, 3, (1, m))
        times, diffs = rng.integers(0, span, (m, 2)), rng.integers(-1, 3, m)
        b.push([(keys, vals, times, diffs)])
        rows += [((int(k),), (int(v),), tuple(int(x) for x in t), int(d))
                 for k, v, t, d in zip(keys[0], vals[0], times, diffs)]
    lower, done = Antichain([(0, 0)]), []
    for step, upper in enumerate([Antichain([(1, 1)]), Antichain([(1, 2), (2, 1)]), Antichain([(2, 3)]),
                                  Antichain([(span - 1, 3)]), Antichain()]):
        got = {}
        for bat in b.seal(lower, upper):
            got.update(batch_rows(bat.arrays))
            check_range(bat)
        due = [r for r in rows if not upper.dominates(r[2]) and r not in done] if upper.elements else \
            [r for r in rows if r not in done]
        assert got == consolidated(due), step
        done += due
        held = [r for r in rows if r not in done]
        assert b.buffered == len(held)
        assert b.held == Antichain([r[2] for r in held])
        if step == 0:
            assert all(p.single for p in b.buffer) == (span == 4)
        lower = upper
    assert b.buffered == 0


def test_formation_of_heavy_keys():
    """Runs of one key longer than insertion handles (merge sorted) and a bucket dominated by one key give
    the arrangement order."""
    rng = np.random.default_rng(4)
    n = 20000
    keys = np.where(rng.random(n) < 0.5, 7, rng.integers(0, 100000, n))[None, :].astype(np.int64)
    vals = rng.integers(0, 50, (1, n))
    times = rng.integers(0, 3, (n, 2))
    diffs = rng.integers(-1, 3, n)
    arrs = form_arrays(keys, vals, times, diffs)
    rows = [((int(k),), (int(v),), tuple(int(x) for x in t), int(d))
            for k, v, t, d in zip(keys[0], vals[0], times, diffs)]
    assert batch_rows(arrs) == consolidated(rows)
    check_invariants(arrs)


def test_formation_of_heavy_keys_with_constant_columns():
    """Long runs whose rows agree on some compared columns (a key's rows of one batch at one time) skip
    sorting those columns and still come out in (key, val, time) order, consolidated."""
    rng = np.random.default_rng(9)
    n = 12000
    keys = rng.integers(0, 40, (2, n))
    keys[1] = 3  # the second key column is the same everywhere
    vals = np.stack([rng.integers(0, 30, n), np.full(n, 5), rng.integers(0, 2, n)])
    times = np.stack([np.full(n, 4), rng.integers(0, 3, n)], axis=1)
    times[keys[0] % 2 == 0, 1] = 1  # half the keys have a single time
    diffs = rng.integers(-1, 3, n)
    arrs = form_arrays(keys, vals, times, diffs)
    rows = [(tuple(int(x) for x in k), tuple(int(x) for x in v), tuple(int(x) for x in t), int(d))
            for k, v, t, d in zip(keys.T, vals.T, times, diffs)]
    assert batch_rows(arrs) == consolidated(rows)
    check_invariants(arrs)


# -- spine and handles against a model ---------------------------------------------------------

class TraceModel:
    def __init__(self):
        self.rows = []

    def insert(self, rows):
        self.rows.extend(rows)

    def accumulate(self, t):
        acc = Counter()
        for k, v, tt, d in self.rows:
            if leq(tt, t):
                acc[(k, v)] += d
        return {x: d for x, d in acc.items() if d}


def trace_accumulate(handle, t):
    keys, vals, diffs = handle.accumulate(t)
    return {(tuple(keys[:, i].tolist()), tuple(vals[:, i].tolist())): int(diffs[i]) for i in range(len(diffs))}


def least_preimage(t, low, since):
    """The least t0 >= ``low`` with rep_since(t0) == t, or None if there is none.

    rep_S is monotone and preserves meets (rep_S(a ^ b) = rep_S(a) ^ rep_S(b) in the product order), so
    the times it maps to a fixed point t form a convex, meet-closed set containing t: its least element
    above ``low`` is found one coordinate at a time, lowering that coordinate of t alone."""
    if not leq(low, t):
        return None
    least = []
    for i in range(len(t)):
        lo, hi = low[i], t[i]  # the coordinates that keep rep == t form an interval ending at t[i]
        while lo < hi:
            mid = (lo + hi) // 2
            if rep(t[:i] + (mid,) + t[i + 1:], since) == t:
                hi = mid
            else:
                lo = mid + 1
        least.append(lo)
    return tuple(least)


def check_batch_description(b):
    """The batch description contract (K-Pg section 4.1, differential's Description): every update
    was at a time t0 in [lower, upper) (in advance of lower, not in advance of upper) and is stored
    at rep_since(t0). A fresh batch's since is the minimal time, so its times lie in [lower, upper)
    exactly; after logical compaction a time may be in advance of upper (advanced to a since beyond
    it) but must be a fixed point of rep_since with some preimage in [lower, upper)."""
    for row in b.times.tolist():
        t = tuple(row)
        assert rep(t, b.since) == t, f"time {t} of {b} is not advanced to its since"
        assert b.lower.dominates(t), f"time {t} of {b} is not in advance of its lower"
        least = [least_preimage(t, low, b.since) for low in b.lower]
        assert any(m is not None and not b.upper.dominates(m) for m in least), \
            f"time {t} of {b} is not rep_since of any time in [lower, upper)"


def check_range(b):
    """A batch's time range, where its maker noted it (a merge, a seal of one time), is its times' bounds."""
    if len(b):
        assert b.time_range == (tuple(b.times.min(axis=0).tolist()), tuple(b.times.max(axis=0).tolist()))


def check_spine(trace):
    """Each shard's batches tile [spine lower, spine upper) and each meets its description."""
    for spine in trace.spines:
        batches, upper = spine.snapshot()
        prev = spine.lower
        for b in batches:
            assert b.lower == prev, (b.lower, prev)
            prev = b.upper
            check_invariants(b.arrays)
            check_batch_description(b)
            check_range(b)
        assert prev.less_equal(upper), (prev, upper)


def _batch(times, lower, upper, since=None):
    """A key-only batch of one update per time, described by the given frontiers."""
    n = len(times)
    arrs = form_arrays(np.arange(n, dtype=np.int64)[None, :], np.zeros((0, n), np.int64),
                       np.array(times, np.int64).reshape(n, -1), np.ones(n, np.int64))
    return Batch(*arrs, Antichain(lower), Antichain(upper), None if since is None else Antichain(since))


@pytest.mark.parametrize("ok,times,lower,upper,since", [
    (True, [(1,), (2,)], [(1,)], [(3,)], None),
    (False, [(0,)], [(1,)], [(3,)], None),                       # before lower
    (False, [(3,)], [(1,)], [(3,)], None),                       # at upper, not compacted
    (True, [(3,)], [(1,)], [(3,)], [(3,)]),                      # advanced to a since at upper
    (True, [(5,)], [(1,)], [(3,)], [(5,)]),                      # ... or beyond it
    (False, [(1,)], [(0,)], [(3,)], [(2,)]),                     # not advanced to since
    (False, [(5,)], [(3,)], [(4,)], [(2,)]),                     # its only preimage is past upper
    (True, [(4, 1)], [(3, 0)], [(4, 0)], [(4, 2), (5, 0)]),      # (3, 1) advanced to (4, 1)
    (True, [(4, 3)], [(3, 0)], [(4, 0)], [(4, 2), (5, 0)]),      # (3, 3) advanced to (4, 3)
    (False, [(5, 0)], [(3, 0)], [(4, 0)], [(4, 2), (5, 0)]),     # (5, 0) is its own only preimage
    (True, [(2, 5), (3, 0)], [(2, 5), (3, 0)], [(4, 0)], None),  # partially ordered lower
    (False, [(2, 4)], [(2, 5), (3, 0)], [(4, 0)], None),
])
def test_batch_description_check(ok, times, lower, upper, since):
    """check_batch_description accepts exactly the times its contract allows."""
    b = _batch(times, lower, upper, since)
    if ok:
        check_batch_description(b)
    else:
        with pytest.raises(AssertionError):
            check_batch_description(b)


def test_folding_an_empty_batch_keeps_its_description():
    """Two small batches cancel out when merged under a reader's compaction frontier; folding the empty
    result into the big older batch must not claim a since its times were never advanced to."""
    trace = Trace(1, 0, effort="eager")
    h = trace.handle()
    h.set_logical_compaction(Antichain([(10,)]))
    for e, rows in enumerate([[(k, 1) for k in range(100)], [(1000, 1)], [(1000, -1)]]):
        keys = np.array([[k for k, _ in rows]], np.int64)
        trace.insert([Batch.form(keys, np.zeros((0, len(rows)), np.int64), np.full((len(rows), 1), e),
                                 np.array([d for _, d in rows], np.int64), Antichain([(e,)]), Antichain([(e + 1,)]))])
    assert trace_accumulate(h, (10,)) == {((k,), ()): 1 for k in range(100)}
    check_spine(trace)


@pytest.mark.parametrize("effort", ["eager", "default", "lazy"])
@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("workers", [1, 3])
def test_spine_matches_model(effort, depth, workers):
    """Random batch insertions and reader frontier advances; accumulating the trace at any time in
    advance of the handle's frontier must give the model's multiset."""
    rng = np.random.default_rng(depth * 10 + workers)
    for trial in range(6):
        trace = Trace(1, 1, depth=depth, workers=workers, effort=effort)
        handle = trace.handle()
        model = TraceModel()
        epoch = 0
        for step in range(40):
            n = int(rng.integers(0, 30)) if rng.random() > 0.2 else 0
            rows = [((int(rng.integers(0, 12)),), (int(rng.integers(0, 3)),),
                     (epoch,) + tuple(rng.integers(0, 4, depth - 1).tolist()), int(rng.choice([-1, 1, 2])))
                    for _ in range(n)]
            keys, vals, times, diffs = to_arrays(rows, 1, 1, depth)
            lower, upper = Antichain([(epoch,) + (0,) * (depth - 1)]), Antichain([(epoch + 1,) + (0,) * (depth - 1)])
            shards = sortk.hash_keys(keys) * workers >> sortk.HASH_BITS
            trace.insert([Batch.form(keys[:, shards == s], vals[:, shards == s], times[shards == s],
                                     diffs[shards == s], lower, upper) for s in range(workers)])
            model.insert(rows)
            epoch += 1
            if rng.random() < 0.5:
                # advance the reader to an antichain between its frontier and the trace upper
                lag = int(rng.integers(0, 3))
                e = max(handle.logical.elements[0][0], epoch - lag)
                F = Antichain([(e,) + tuple(rng.integers(0, 3, depth - 1).tolist())])
                if depth == 2 and rng.random() < 0.5:
                    F.insert((e + 1, 0))
                if handle.logical.less_equal(F):
                    handle.set_logical_compaction(F)
            # query at a few times in advance of the handle's frontier
            for _ in range(3):
                base = handle.logical.elements[int(rng.integers(0, len(handle.logical)))]
                t = tuple(int(x + rng.integers(0, 3)) for x in base)
                assert trace_accumulate(handle, t) == model.accumulate(t)
        check_spine(trace)
        stats = trace.stats()
        assert stats["batches"] <= workers * (2 * max(1, int(np.log2(stats["records"] + 2))) + 4)


def test_compacted_time_is_refused():
    trace = Trace(1, 0)
    h = trace.handle()
    trace.insert([Batch.form(np.array([[1, 2]]), np.zeros((0, 2), np.int64), np.array([[0], [0]]),
                             np.array([1, 1]), Antichain([(0,)]), Antichain([(1,)]))])
    h.set_logical_compaction(Antichain([(1,)]))
    with pytest.raises(CompactedError):
        h.accumulate((0,))
    assert trace_accumulate(h, (1,)) == {((1,), ()): 1, ((2,), ()): 1}
    with pytest.raises(ValueError):
        h.set_logical_compaction(Antichain([(0,)]))


def test_trace_does_not_grow_under_churn():
    """Insert and retract the same records over many epochs with a reader that follows the frontier:
    memory stays proportional to distinct (data, time) pairs after compaction."""
    trace = Trace(1, 1)
    h = trace.handle()
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 1000, (1, 500))
    vals = rng.integers(0, 5, (1, 500))
    sizes = []
    for epoch in range(400):
        sign = 1 if epoch % 2 == 0 else -1
        b = Batch.form(keys, vals, np.full((500, 1), epoch), np.full(500, sign),
                       Antichain([(epoch,)]), Antichain([(epoch + 1,)]))
        trace.insert([b])
        h.set_logical_compaction(Antichain([(epoch + 1,)]))
        sizes.append(trace.stats()["records"])
    assert max(sizes[200:]) <= 4 * 500, max(sizes[200:])
    assert max(sizes[200:]) <= max(sizes[:200])


def churn_trace(depth, workers, effort, live_n, churn, epochs, sign, lag, seed=0):
    """A trace fed ``live_n`` live rows, then ``churn`` retractions of live rows and as many insertions
    per epoch, with a reader ``lag`` epochs behind. After each epoch, as the scheduler does after each
    step, a trace whose reader moved gets one slice of tidying. Yields the trace after every epoch."""
    rng = np.random.default_rng(seed)
    trace = Trace(1, 1, depth=depth, workers=workers, effort=effort)
    h = trace.handle()
    zero = (0,) * (depth - 1)
    keys, vals = rng.integers(0, 10 * live_n, live_n), rng.integers(0, 4, live_n)
    rest = rng.integers(0, 3, (live_n, depth - 1))
    signs = {"pos": np.ones(live_n, np.int64), "neg": np.full(live_n, -1),
             "mixed": rng.choice([-1, 1], live_n), "multi": np.full(live_n, 2)}[sign]
    for epoch in range(epochs):
        if epoch == 0:
            k, v, r, d = keys, vals, rest, signs
        else:
            i = rng.choice(live_n, churn, replace=False)
            nk, nv, nr = rng.integers(0, 10 * live_n, churn), rng.integers(0, 4, churn), rng.integers(0, 3, (churn, depth - 1))
            k, v, r = np.concatenate([keys[i], nk]), np.concatenate([vals[i], nv]), np.concatenate([rest[i], nr])
            d = np.concatenate([-signs[i], signs[i]])
            keys[i], vals[i], rest[i] = nk, nv, nr
        times = np.concatenate([np.full((len(k), 1), epoch), r], axis=1).astype(np.int64)
        K, V = k[None, :].astype(np.int64), v[None, :].astype(np.int64)
        shards = sortk.hash_keys(K) * workers >> sortk.HASH_BITS
        lower, upper = Antichain([(epoch,) + zero]), Antichain([(epoch + 1,) + zero])
        trace.insert([Batch.form(K[:, shards == s], V[:, shards == s], times[shards == s], d[shards == s],
                                 lower, upper) for s in range(workers)])
        h.set_logical_compaction(Antichain([(max(0, epoch + 1 - lag),) + zero]))
        if trace.idle_work(merges=False):
            trace.exert(IDLE_FUEL)
        yield trace


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("effort", ["eager", "default", "lazy"])
@pytest.mark.parametrize("churn", [10, 300])
@pytest.mark.parametrize("sign,lag", [("pos", 1), ("neg", 1), ("mixed", 3), ("multi", 2)])
def test_trace_stays_within_twice_its_live_records_under_churn(depth, workers, effort, churn, sign, lag):
    """Steady churn (1% or 30% of 1,000 live rows per epoch, sets, negative and mixed-sign collections,
    multiplicities of 2; at depth 2 the second coordinate keeps rows at different rounds apart): after
    warm-up the trace holds at most twice the (data, time) pairs its reader can still tell apart."""
    worst = 0.0
    for epoch, trace in enumerate(churn_trace(depth, workers, effort, 1000, churn, 120, sign, lag)):
        if epoch >= 30:
            worst = max(worst, trace.stats()["records"] / trace.live())
    check_spine(trace)
    assert worst <= 2.0, worst


def test_idle_exert_recompacts_a_batch_merged_while_the_frontier_lagged():
    """Forty epochs of churn arrive as one batch while the reader is still at epoch 0; once it moves past
    them, idle maintenance alone (no more insertions) shrinks the trace to its live records."""
    rng = np.random.default_rng(3)
    trace = Trace(1, 0)
    h = trace.handle()
    keys = rng.integers(0, 10**6, 500)
    rows, times, diffs = [keys.copy()], [np.zeros(500, np.int64)], [np.ones(500, np.int64)]
    for e in range(1, 40):
        i = rng.choice(500, 50, replace=False)
        new = rng.integers(0, 10**6, 50)
        rows += [keys[i], new]
        times += [np.full(100, e)]
        diffs += [np.r_[-np.ones(50, np.int64), np.ones(50, np.int64)]]
        keys[i] = new
    K = np.concatenate(rows)[None, :]
    trace.insert([Batch.form(K, np.zeros((0, K.shape[1]), np.int64), np.concatenate(times)[:, None],
                             np.concatenate(diffs), Antichain([(0,)]), Antichain([(40,)]))])
    assert trace.stats()["records"] == K.shape[1] == 500 + 39 * 100
    h.set_logical_compaction(Antichain([(40,)]))
    assert trace.idle_work()
    while trace.idle_work():
        trace.exert(1000)
    assert trace.stats()["records"] == trace.live() == 500
    assert trace_accumulate(h, (40,)) == {((int(k),), ()): c for k, c in zip(*np.unique(keys, return_counts=True))}
    check_spine(trace)


def test_a_tidy_that_cannot_shrink_is_not_repeated():
    """A lone batch of rows with both signs at two times looks bloated (its balance is zero); one
    re-compaction shows nothing cancels, and no more merges happen until the frontier moves."""
    trace = Trace(1, 0)
    h = trace.handle()
    n = 400
    K = np.arange(n, dtype=np.int64)[None, :]
    times = (np.arange(n) % 2).astype(np.int64)[:, None]
    diffs = np.where(np.arange(n) % 4 < 2, 1, -1).astype(np.int64)
    trace.insert([Batch.form(K, np.zeros((0, n), np.int64), times, diffs, Antichain([(0,)]), Antichain([(2,)]))])
    h.set_logical_compaction(Antichain([(1,)]))
    spine = trace.spines[0]
    for _ in range(20):
        trace.exert(10_000)
    assert spine.merges_completed == 1
    assert not trace.idle_work()
    assert trace.stats()["records"] == trace.live() == n
    check_spine(trace)


def test_cursor_gathers_histories():
    rng = np.random.default_rng(5)
    trace = Trace(2, 1, depth=2)
    h = trace.handle()
    all_rows = []
    for epoch in range(12):
        rows = [((int(rng.integers(0, 20)), int(rng.integers(0, 2))), (int(rng.integers(0, 4)),),
                 (epoch, int(rng.integers(0, 3))), 1) for _ in range(int(rng.integers(1, 25)))]
        all_rows += rows
        trace.insert([Batch.form(*to_arrays(rows, 2, 1, 2), Antichain([(epoch, 0)]), Antichain([(epoch + 1, 0)]))])
    probes = np.array([[3, 5, 7, 100, 3], [0, 1, 0, 0, 1]], np.int64)
    hist = h.cursor().seek_keys(probes)
    assert len(hist.kh) == 5
    for p in range(len(hist.kh)):
        key = tuple(hist.keys[:, p].tolist())
        got = Counter()
        for r in range(hist.off[p], hist.off[p + 1]):
            got[(tuple(hist.vals[:, r].tolist()), tuple(hist.times[r].tolist()))] += int(hist.diffs[r])
        want = Counter()
        for k, v, t, d in all_rows:
            if k == key:
                want[(v, t)] += d
        assert {x: d for x, d in got.items() if d} == {x: d for x, d in want.items() if d}
    # a lens advances times to a frontier and appends rounds without copying the trace
    lensed = h.cursor(lens=TimeLens(Antichain([(5, 0)]), extend=1)).seek_keys(probes)
    assert lensed.times.shape[1] == 3 and (lensed.times[:, 0] >= 5).all() and (lensed.times[:, 2] == 0).all()


def test_probe_keys_sorted_distinct():
    keys = np.array([[5, 1, 5, 3, 1]], np.int64)
    kh, k = probe_keys(keys)
    assert sorted(k[0].tolist()) == [1, 3, 5] and (np.diff(kh) >= 0).all()


def test_dropping_last_handle_releases_trace():
    trace = Trace(1, 0)
    ref = weakref.ref(trace)
    h1, h2 = trace.handle(), trace.handle()
    assert trace.readers == 2
    del trace
    h1.close()
    assert ref() is not None and ref().readers == 1
    del h2
    gc.collect()
    assert ref() is None


def test_readers_hold_back_physical_merging():
    """A reader's physical frontier keeps a batch boundary there (batches_through stays exact)."""
    trace = Trace(1, 0, effort="eager")
    h = trace.handle(physical=Antichain([(1,)]))
    for e in range(6):
        trace.insert([Batch.form(np.array([[e]]), np.zeros((0, 1), np.int64), np.array([[e]]), np.array([1]),
                                 Antichain([(e,)]), Antichain([(e + 1,)]))])
    through = h.batches(0, through=Antichain([(1,)]))
    assert len(through) == 1 and through[0].upper == Antichain([(1,)])
    h.set_physical_compaction(Antichain())
    trace.spines[0].exert(trace.logical, trace.physical)


# -- hypothesis: random operation sequences against the model ----------------------------------------

def spine_ops(depth):
    row = st.tuples(st.integers(0, 8), st.integers(0, 2), st.tuples(*[st.integers(0, 3)] * (depth - 1)),
                    st.sampled_from([-1, 1, 2]))
    insert = st.tuples(st.just("insert"), st.lists(row, max_size=12))
    advance = st.tuples(st.just("advance"), st.integers(0, 2), st.tuples(*[st.integers(0, 2)] * (depth - 1)),
                        st.booleans())
    query = st.tuples(st.just("query"), st.integers(0, 3), st.tuples(*[st.integers(0, 3)] * (depth - 1)))
    exert = st.tuples(st.just("exert"), st.sampled_from([1, 8, 10_000]))
    return st.lists(st.one_of(insert, insert, advance, query, exert), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from([1, 2]), st.sampled_from(["eager", "default", "lazy"]), st.sampled_from([1, 2]))
def test_spine_model_hypothesis(data, depth, effort, workers):
    """Random sequences of batch insertions and reader frontier advances (partially ordered at depth 2):
    accumulating the trace at any time in advance of the reader's frontier equals the model."""
    ops = data.draw(spine_ops(depth))
    trace = Trace(1, 1, depth=depth, workers=workers, effort=effort)
    handle = trace.handle()
    model = TraceModel()
    epoch = 0
    zero = (0,) * (depth - 1)
    for op in ops:
        if op[0] == "insert":
            rows = [((k,), (v,), (epoch,) + rest, d) for k, v, rest, d in op[1]]
            keys, vals, times, diffs = to_arrays(rows, 1, 1, depth)
            shards = sortk.hash_keys(keys) * workers >> sortk.HASH_BITS
            trace.insert([Batch.form(keys[:, shards == s], vals[:, shards == s], times[shards == s],
                                     diffs[shards == s], Antichain([(epoch,) + zero]), Antichain([(epoch + 1,) + zero]))
                          for s in range(workers)])
            model.insert(rows)
            epoch += 1
        elif op[0] == "advance":
            _, lag, rest, second = op
            e = max(handle.logical.elements[0][0], epoch - lag)
            F = Antichain([(e,) + rest])
            if second and depth == 2:
                F.insert((e + 1, 0))
            if handle.logical.less_equal(F):
                handle.set_logical_compaction(F)
        elif op[0] == "exert":
            trace.exert(op[1])  # idle maintenance: finish merges, tidy
        else:
            _, bump, rest = op
            base = handle.logical.elements[0]
            t = (base[0] + bump,) + tuple(max(a, b) for a, b in zip(base[1:], rest))
            assert trace_accumulate(handle, t) == model.accumulate(t)
    for t in [handle.logical.elements[0], (epoch + 1,) + (5,) * (depth - 1)]:
        assert trace_accumulate(handle, t) == model.accumulate(t)
    check_spine(trace)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(0, 2), st.integers(0, 2), st.integers(1, 2), st.data())
def test_reduce_output_built_in_place_equals_formed(kk, kv, depth, data):
    """A reduce's corrections to probe keys (in arrangement order) become a batch without forming when
    they are in batch order already; either way the batch equals ``Batch.form`` of the same rows."""
    from kpgnb.engine.operators.reduce import _output
    from kpgnb.engine.kernels.reduce import probe_runs
    nk = data.draw(st.integers(1, 8))
    keys = np.array(data.draw(st.lists(st.tuples(*[st.integers(-3, 3)] * kk), min_size=nk, max_size=nk)),
                    np.int64).reshape(nk, kk).T.copy()
    pkh, pkeys, koff, *_ = form_arrays(keys, np.zeros((0, nk), np.int64), np.zeros((nk, depth), np.int64),
                                       np.ones(nk, np.int64))
    m = len(pkh)
    rows = data.draw(st.lists(st.tuples(st.integers(0, m - 1), st.tuples(*[st.integers(0, 2)] * kv),
                                        st.tuples(*[st.integers(0, 2)] * depth), st.integers(-2, 2)),
                              max_size=12))
    if data.draw(st.booleans()):  # the order phase 3 emits in (and no zero diffs): built in place
        rows = sorted({(k, v, t): d or 1 for k, v, t, d in rows}.items())
        rows = [(k, v, t, d) for (k, v, t), d in rows]
    n = len(rows)
    c_key = np.array([r[0] for r in rows], np.int64)
    c_vals = np.array([r[1] for r in rows], np.int64).reshape(n, kv).T.copy()
    c_time = np.array([r[2] for r in rows], np.int64).reshape(n, depth)
    c_diff = np.array([r[3] for r in rows], np.int64)
    lower, upper = Antichain([(0,) * depth]), Antichain()
    got = _output(pkh, pkeys, c_key, c_vals, c_time, c_diff, lower, upper)
    want = Batch.form(pkeys[:, c_key], c_vals, c_time, c_diff, lower, upper)
    for a in ("kh", "keys", "koff", "vals", "times", "diffs"):
        assert np.array_equal(getattr(got, a), getattr(want, a)), a
    in_order = all(d != 0 for *_, d in rows) and all(
        (rows[i][0], rows[i][1], rows[i][2]) < (rows[i + 1][0], rows[i + 1][1], rows[i + 1][2]) for i in range(n - 1))
    assert (len(probe_runs(c_key, c_vals, np.ascontiguousarray(c_time), c_diff)[1]) > 0) == in_order


def test_listeners_are_held_weakly_and_hear_every_append():
    """A trace hands each append to its listeners; one nobody references any more stops hearing, one that
    unlistens too, and one listening later (perhaps under a dead one's id) hears from then on."""
    class Ear:
        def __init__(self):
            self.heard = []

        def deliver(self, batches, lower, upper):
            self.heard.append((len(batches), lower.elements, upper.elements))

    t = Trace(1, 0, 1, 2, Antichain([(0,)]))

    def append(e):
        t.append([Batch.empty(1, 0, 1, Antichain([(e,)]), Antichain([(e + 1,)])) for _ in range(2)])
    a, b = Ear(), Ear()
    t.listen(a)
    t.listen(b)
    append(0)
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None
    append(1)
    t.unlisten(a)
    append(2)
    assert a.heard == [(2, ((0,),), ((1,),)), (2, ((1,),), ((2,),))]
    c = Ear()
    t.listen(c)
    append(3)
    assert c.heard == [(2, ((3,),), ((4,),))]


@pytest.mark.parametrize("d", [1, 2, 3])
def test_a_batch_time_range_is_its_times_bounds(d):
    """``Batch.time_range`` (one kernel pass, ``kernels.times.time_bounds``) is the coordinate-wise least
    and greatest stored time, for one row, for negative and equal coordinates, and for no rows."""
    from kpgnb.engine.lattice import Antichain
    rng = np.random.default_rng(d)
    lo, hi = Antichain([(-9,) * d]), Antichain()
    for n in (1, 2, 7, 5000):
        times = rng.integers(-3, 9, (n, d)).astype(np.int64)
        keys = rng.integers(0, 50, (1, n)).astype(np.int64)
        b = Batch.form(keys, np.zeros((0, n), np.int64), times, np.ones(n, np.int64), lo, hi)
        assert b.time_range == (tuple(b.times.min(axis=0).tolist()), tuple(b.times.max(axis=0).tolist()))
    assert Batch.empty(1, 0, d, lo, hi).time_range == ((0,) * d, (0,) * d)
