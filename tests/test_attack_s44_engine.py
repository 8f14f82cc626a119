"""Session 44 attacks on the engine's recently changed kernels (engine/kernels/form.py form_buckets with
its counting ranks, insertion, radix and merge orders of runs of equal hash and _order_bucket's radix
fallback; engine/kernels/seek.py seek_keys' interpolation; engine/kernels/times.py bit_lengths through
wcc) and on the public API at 1, 2, 3 and 5 workers. Every check is exact equality with a from-scratch
NumPy / pandas / Python computation. Keys with chosen 40-bit hashes are made by inverting the key hash
(tests/collisions.py): clustered, descending, colliding and extreme hashes through the real hash."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

import kpgnb as kp
from collisions import colliding_last_columns
from kpgnb import graphs
from kpgnb.engine import batch as bm
from kpgnb.engine.kernels import form as formk
from kpgnb.engine.kernels import seek as seekk
from kpgnb.engine.kernels import sort as sortk
from kpgnb.engine.kernels import times as timesk
from kpgnb.engine.kernels.sort import hash_keys

I64 = np.iinfo(np.int64)
H40 = (1 << 40) - 1
WAIT = 120


# == helpers =============================================================================================

def keys_with_hashes(hashes, prefix=(), low0=0):
    """Single-column (or prefix + last column) keys whose 40-bit hashes are ``hashes`` (one key each; a
    repeated hash gets distinct keys: the low 24 bits of the 64-bit mix differ)."""
    seen = Counter()
    out = []
    for h in hashes:
        h = int(h)
        out.append(colliding_last_columns(list(prefix), h, [low0 + seen[h]])[0])
        seen[h] += 1
    return np.array(out, np.int64)


def lexsort_model(h, keys, vals, times, diffs):
    """(kh, keys, koff, vals, times, diffs) of the consolidated batch: np.lexsort by (hash, keys, vals,
    times), equal rows' diffs summed (Python ints), zero sums dropped."""
    kk, kv, d = keys.shape[0], vals.shape[0], times.shape[1]
    n = len(diffs)
    M = np.concatenate([h[None, :], keys, vals, times.T]).astype(np.int64).reshape(1 + kk + kv + d, n)
    if n == 0:
        e = np.zeros(0, np.int64)
        return e, np.zeros((kk, 0), np.int64), np.zeros(1, np.int64), np.zeros((kv, 0), np.int64), \
            np.zeros((0, d), np.int64), e
    order = np.lexsort(M[::-1])
    M, ds = M[:, order], diffs[order]
    start = np.ones(n, bool)
    start[1:] = (M[:, 1:] != M[:, :-1]).any(axis=0)
    firsts = np.flatnonzero(start)
    sums = np.add.reduceat(ds, firsts)
    keep = sums != 0
    R = M[:, firsts[keep]]
    sd = sums[keep]
    newkey = np.ones(R.shape[1], bool)
    newkey[1:] = (R[:1 + kk, 1:] != R[:1 + kk, :-1]).any(axis=0)
    kpos = np.flatnonzero(newkey)
    return (R[0, kpos], R[1:1 + kk, kpos].reshape(kk, len(kpos)), np.append(kpos, R.shape[1]).astype(np.int64),
            R[1 + kk:1 + kk + kv].reshape(kv, R.shape[1]), np.ascontiguousarray(R[1 + kk + kv:].T).reshape(R.shape[1], d),
            sd)


def same(got, want, ctx=()):
    for name, x, y in zip(("kh", "keys", "koff", "vals", "times", "diffs"), got, want):
        x = np.asarray(x)
        assert x.shape == y.shape and np.array_equal(x, y), (name, ctx, x[:20], y[:20])


def value_column(rng, n, kind):
    """n int64 values of one span class."""
    if kind == "const":
        return np.full(n, int(rng.integers(-5, 5)), np.int64)
    if kind == "ties":
        return rng.choice(np.array([I64.min, -1, 0, 7, I64.max], np.int64), n)
    if kind == "small":
        return rng.integers(-3, 3, n).astype(np.int64)
    if kind in ("span44", "span44m1", "span44p1", "span11", "span12"):
        span = {"span44": 1 << 44, "span44m1": (1 << 44) - 1, "span44p1": (1 << 44) + 1, "span11": (1 << 11) - 1,
                "span12": 1 << 11}[kind]
        lo = int(rng.integers(-(1 << 60), 1 << 60))
        v = lo + rng.integers(0, span, n, endpoint=True).astype(np.int64)
        if n >= 2:
            v[rng.choice(n, 2, replace=False)] = [lo, lo + span]
        return v
    if kind == "neg_near_min":
        v = I64.min + rng.integers(0, 1 << 20, n).astype(np.int64)
        return v
    if kind == "near_max":
        return I64.max - rng.integers(0, 1 << 20, n).astype(np.int64)
    if kind == "wrap":  # a span over 2**63: hi - lo wraps int64
        v = rng.integers(-1000, 1000, n).astype(np.int64)
        v[:: 3] = I64.max - rng.integers(0, 3, len(v[::3]))
        v[1:: 3] = I64.min + rng.integers(0, 3, len(v[1::3]))
        return v
    if kind == "wrap_exact":  # exactly 2**63: hi - lo = I64.min
        v = rng.integers(-(1 << 62), 1 << 62, n).astype(np.int64)
        if n >= 2:
            v[0], v[1] = -(1 << 62) - (1 << 61), (1 << 62) + (1 << 61)
        return v
    return rng.integers(I64.min, I64.max, n, dtype=np.int64, endpoint=True)


KINDS = ["const", "ties", "small", "span44", "span44m1", "span44p1", "span11", "span12", "neg_near_min", "near_max",
         "wrap", "wrap_exact", "any"]


# == 1. formation through form_parts: keys of chosen hashes, 1, 2, 3 and 5 workers ========================

def _crafted_updates(rng, n, kk, kv, d, layout):
    """Updates whose keys' hashes follow ``layout``: "runs" (a few keys, runs of lengths around the
    thresholds, several colliding keys in a hash), "descending" (distinct hashes in one narrow cluster,
    arriving in descending order between keys at 0 and 2**40 - 1: _order_bucket's insertion gives up and
    radix-sorts), "random" (real keys)."""
    prefix = [int(x) for x in rng.integers(-3, 3, kk - 1)]
    if layout == "runs":
        lens = []
        while sum(lens) < n:
            lens.append(int(rng.choice([1, 2, 23, 24, 25, 63, 64, 65, 129, 700, 2100])))
        hs, lows = [], []
        for L in lens:
            h = int(rng.integers(0, H40 + 1))
            nkeys = int(rng.choice([1, 1, 2, 3]))  # colliding keys in one hash run
            hs += [h] * L
            lows += list(rng.integers(0, nkeys, L))
        hs, lows = hs[:n], lows[:n]
        cache = {}
        last = np.array([cache.setdefault((h, lo), colliding_last_columns(prefix, h, [int(lo)])[0])
                         for h, lo in zip(hs, lows)], np.int64)
    elif layout == "descending":
        m = max(n - 2, 0)
        base = int(rng.integers(1 << 20, H40 - (1 << 20)))
        width = int(rng.choice([m + 1, 4 * m + 1, 1 << 12]))
        hh = base - np.sort(rng.choice(width, m, replace=width < m))[::-1]  # descending
        hh = np.sort(hh)[::-1]
        hh = np.concatenate([[0, H40], hh])[:n]
        uniq = {int(h): colliding_last_columns(prefix, int(h), [0])[0] for h in set(hh.tolist())}
        last = np.array([uniq[int(h)] for h in hh], np.int64)
    else:
        last = rng.integers(-50, 50, n).astype(np.int64) if rng.random() < 0.5 else \
            rng.integers(I64.min, I64.max, n, dtype=np.int64)
    keys = np.empty((kk, n), np.int64)
    for c, p in enumerate(prefix):
        keys[c] = p
    keys[kk - 1] = last
    vals = np.stack([value_column(rng, n, str(rng.choice(KINDS))) for _ in range(kv)]) if kv else \
        np.zeros((0, n), np.int64)
    times = np.stack([value_column(rng, n, str(rng.choice(["const", "small", "span11", "ties"]))) for _ in range(d)],
                     axis=1) if d else np.zeros((n, 0), np.int64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 3], np.int64), n)
    if n and rng.random() < 0.5:  # exact copies that cancel: whole groups consolidate away
        c = rng.choice(n, n // 3, replace=False)
        keys = np.concatenate([keys, keys[:, c]], axis=1)
        vals = np.concatenate([vals, vals[:, c]], axis=1)
        times = np.concatenate([times, times[c]])
        diffs = np.concatenate([diffs, -diffs[c]])
    return [np.ascontiguousarray(a) for a in (keys, vals, times, diffs)]


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
@pytest.mark.parametrize("layout", ["runs", "descending", "random"])
def test_form_parts_crafted_hashes_match_lexsort(workers, layout):
    """form_parts over one to three parts (sizes around TINY_ROWS, SHORT_RUN/RANK_RUN-length runs,
    SMALL_ROWS and ONE_BUCKET) of 1-2 key columns, 0-2 value columns of every span class (2**44 +- 1,
    wrapping int64, near the extremes) and 1-3 time columns, or one time given as ``time=``: each shard's
    batch equals the lexsort model of that shard's rows."""
    rng = np.random.default_rng(4400 + 10 * workers + ["runs", "descending", "random"].index(layout))
    sizes = [0, 1, 31, 32, 33, 300, 2500, 9999, 10_001]
    if layout != "random":
        sizes += [20_000]
    for trial in range(14):
        kk, kv = int(rng.integers(1, 3)), int(rng.integers(0, 3))
        use_time = rng.random() < 0.25
        d = 0 if use_time else int(rng.integers(1, 4))
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.choice(sizes))
            parts.append(_crafted_updates(rng, n, kk, kv, d, layout))
        if sum(p[3].shape[0] for p in parts) == 0:
            continue
        whole = [np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0) for i in range(4)]
        time = None
        if use_time:
            time = tuple(int(x) for x in rng.integers(0, 5, int(rng.integers(1, 4))))
            whole[2] = np.tile(np.array(time, np.int64), (whole[3].shape[0], 1))
            parts = [(p[0], p[1], np.zeros((p[3].shape[0], len(time)), np.int64), p[3]) for p in parts]
        snapshot = [[a.copy() for a in p] for p in parts]
        got = bm.form_parts(parts, workers, time=time)
        assert len(got) == workers
        h = hash_keys(np.ascontiguousarray(whole[0]))
        shard = (h * workers) >> sortk.HASH_BITS
        for s in range(workers):
            sel = shard == s
            want = lexsort_model(h[sel], whole[0][:, sel], whole[1][:, sel], whole[2][sel], whole[3][sel])
            same(got[s], want, (trial, s, layout, workers, kk, kv, d, time))
        for p, q in zip(parts, snapshot):  # the parts are read only
            assert all(np.array_equal(x, y) for x, y in zip(p, q))


def test_form_parts_one_bucket_boundary_at_W1_and_W5():
    """Rows just below and above ONE_BUCKET per shard (one bucket against 2**bits buckets), a part of over
    PARALLEL_ROWS rows (distributed in W ranges) after a small one, with long runs
    of one key (thousands of rows whose values span 2**44 +- 1 or wrap): every shard matches the model."""
    rng = np.random.default_rng(4419)
    for workers, n in [(1, sortk.ONE_BUCKET - 1), (1, sortk.ONE_BUCKET + 1), (5, 5 * sortk.ONE_BUCKET + 7),
                       (3, bm.PARALLEL_ROWS + 1)]:
        k = rng.integers(0, 40, n).astype(np.int64)
        k[: n // 4] = 7  # one key of n/4 rows: a long run
        v = value_column(rng, n, str(rng.choice(["span44", "span44m1", "span44p1", "wrap"])))
        t = rng.integers(0, 3, (n, 2)).astype(np.int64)
        dd = rng.choice(np.array([-1, 1, 2], np.int64), n)
        keys, vals = k[None, :].copy(), v[None, :].copy()
        cut = int(rng.integers(1, 500))  # two parts: a small one, then one of PARALLEL_ROWS or more rows
        got = bm.form_parts([(keys[:, :cut].copy(), vals[:, :cut].copy(), t[:cut].copy(), dd[:cut].copy()),
                             (keys[:, cut:].copy(), vals[:, cut:].copy(), t[cut:].copy(), dd[cut:].copy())], workers)
        h = hash_keys(keys)
        shard = (h * workers) >> sortk.HASH_BITS
        for s in range(workers):
            sel = shard == s
            same(got[s], lexsort_model(h[sel], keys[:, sel], vals[:, sel], t[sel], dd[sel]), (workers, n, s))


# == 2. form_buckets called directly: adversarial hashes in one or many buckets ==========================

def _call_form_buckets(cnt, h, keys, vals, times, diffs, in_place):
    h, keys, vals, times, diffs = (np.ascontiguousarray(a.copy()) for a in (h, keys, vals, times, diffs))
    n = len(diffs)
    kk, kv, d = keys.shape[0], vals.shape[0], times.shape[1]
    koff = np.full(n + 1, -7, np.int64)
    if in_place:
        outs = (h, keys, vals, times, diffs)
    else:
        outs = (np.full(n, -7, np.int64), np.full((kk, n), -7, np.int64), np.full((kv, n), -7, np.int64),
                np.full((n, d), -7, np.int64), np.full(n, -7, np.int64))
    nk, nr = formk.form_buckets(cnt, h, keys, vals, times, diffs, *outs, koff)
    rh, rk, rv, rt, rd = outs
    return rh[:nk], rk[:, :nk], koff[:nk + 1], rv[:, :nr], rt[:nr], rd[:nr]


@pytest.mark.parametrize("seed", [4420, 4421, 4422])
def test_form_buckets_adversarial_hash_orders(seed):
    """Hashes (any 40-bit values, given directly) in orders that defeat _order_bucket's one counting pass:
    a narrow cluster between the extremes in descending order, sawtooth, all but one equal, powers of two;
    each with runs of equal hash of 23..65 and hundreds of rows whose columns tie; 1..4 buckets."""
    rng = np.random.default_rng(seed)
    for trial in range(120):
        kk, kv, d = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 4))
        n = int(rng.choice([40, 200, 1000, 5000]))
        pat = int(rng.integers(0, 5))
        if pat == 0:
            h = np.sort(rng.integers(1 << 30, (1 << 30) + 3 * n, n))[::-1].copy()
            h[:2] = [0, H40]
        elif pat == 1:
            h = (np.arange(n) % 97)[::-1] * 1000 + (1 << 35)
        elif pat == 2:
            h = np.full(n, 12345)
            h[int(rng.integers(0, n))] = H40
        elif pat == 3:
            h = (1 << rng.integers(0, 40, n)).astype(np.int64)
        else:
            L = int(rng.choice([23, 24, 25, 63, 64, 65]))
            h = np.repeat(rng.integers(0, H40, n // L + 1), L)[:n][::-1].copy()
        h = h.astype(np.int64)
        keys = np.stack([rng.integers(-2, 2, n) if c < kk - 1 else (h % 3 if rng.random() < 0.5 else rng.integers(0, 2, n))
                         for c in range(kk)]).astype(np.int64)
        vals = np.stack([value_column(rng, n, str(rng.choice(KINDS))) for _ in range(kv)]) if kv else np.zeros((0, n), np.int64)
        times = np.stack([value_column(rng, n, str(rng.choice(["const", "small", "ties", "span44"]))) for _ in range(d)], axis=1)
        diffs = rng.choice(np.array([-1, 1, 1, 2], np.int64), n)
        # buckets: contiguous hash ranges, each bucket's rows in the given order
        nb = int(rng.integers(1, 5))
        u = np.unique(h)
        cuts = np.sort(rng.choice(np.arange(1, len(u)), min(nb - 1, len(u) - 1), replace=False)) if len(u) > 1 else []
        b = np.searchsorted(u[cuts], h, side="right") if len(cuts) else np.zeros(n, np.int64)
        perm = np.argsort(b, kind="stable")
        cnt = np.zeros(len(cuts) + 2, np.int64)
        np.cumsum(np.bincount(b, minlength=len(cuts) + 1), out=cnt[1:])
        args = (h[perm], keys[:, perm], vals[:, perm], times[perm], diffs[perm])
        want = lexsort_model(*args)
        same(_call_form_buckets(cnt, *args, in_place=bool(trial % 2)), want, (trial, pat, n, kk, kv, d))


def test_order_bucket_radix_fallback_orders_every_hash():
    """_order_bucket alone, on buckets whose insertion pass overruns its budget (descending clusters at
    every width, with extremes 0 and 2**40 - 1): the hashes come out sorted and the indices are a
    permutation carrying each row's hash."""
    rng = np.random.default_rng(4423)
    for trial in range(60):
        m = int(rng.choice([3, 50, 300, 4000]))
        s = int(rng.integers(0, 5))
        width = int(rng.choice([1, m, 1 << 11, 1 << 22, 1 << 33]))
        h = np.concatenate([rng.integers(0, H40, s), np.sort(rng.integers(1 << 35, (1 << 35) + width, m))[::-1]])
        if trial % 2:
            h[s:s + 2] = [0, H40]
        h = h.astype(np.int64)
        mm = m
        ia, la, ib, lb = (np.empty(mm, np.int64) for _ in range(4))
        hist = np.empty((4, 1 << 11), np.int64)
        slots = np.empty(4 * mm + 2, np.int64)
        formk._order_bucket(h, s, m, ia, la, ib, lb, hist, slots)
        assert sorted(ia.tolist()) == list(range(s, s + m))
        assert np.array_equal(la, h[ia])
        assert np.all(np.diff(la) >= 0)


# == 3. seek_keys: skewed hashes, duplicate probes, probes at the ends ===================================

def _seek_reference(bkh, bkeys, pkh, pkeys):
    where = {(int(x), *map(int, bkeys[:, i])): i for i, x in enumerate(bkh)}
    return [where.get((int(x), *map(int, pkeys[:, i])), -1) for i, x in enumerate(pkh)]


def _sorted(h, keys):
    o = np.lexsort(tuple(keys[::-1]) + (h,))
    return np.ascontiguousarray(h[o]), np.ascontiguousarray(keys[:, o])


@pytest.mark.parametrize("seed", [4430, 4431])
def test_seek_keys_skewed_batches_duplicate_probes(seed):
    """Batches of 1..40,000 keys whose hashes are geometric (2**k), one huge gap then a dense block, a
    dense block then one far key, all colliding, or real; probe lists sparse (interpolating) and dense, with
    duplicates of one probe (present or absent), the first and last keys, hashes below and above the
    batch, and keys sharing a present key's hash: seek_keys equals a dictionary lookup."""
    rng = np.random.default_rng(seed)
    sparse = 0
    for trial in range(120):
        nb = int(rng.choice([1, 2, 5, 257, 1000, 8000, 40_000]))
        kk = int(rng.integers(1, 3))
        keys = np.unique(rng.integers(-10**9, 10**9, (kk, nb)).astype(np.int64), axis=1)
        nb = keys.shape[1]
        mode = int(rng.integers(0, 6))
        if mode == 0:
            h = (1 << rng.integers(0, 40, nb)) - 1
        elif mode == 1:
            h = np.where(np.arange(nb) < nb // 2, rng.integers(0, 3, nb), H40 - rng.integers(0, nb + 1, nb))
        elif mode == 2:
            h = rng.integers(0, nb + 1, nb)
            h[0] = H40
        elif mode == 3:
            h = np.full(nb, int(rng.integers(0, H40)))
        elif mode == 4:
            h = hash_keys(keys)
        else:
            h = (rng.random(nb) ** 8 * H40).astype(np.int64)
        bkh, bkeys = _sorted(h.astype(np.int64), keys)
        m = int(rng.choice([1, 2, 3, max(1, nb // 300), max(1, nb // 10), nb + 3]))
        pres = rng.integers(0, nb, m)
        pk = bkeys[:, pres].copy()
        ph = bkh[pres].copy()
        absent = rng.random(m) < 0.4
        pk[-1, absent] += rng.integers(1, 5, int(absent.sum()))  # same hash, another key
        far = rng.random(m) < 0.2
        ph[far] = rng.integers(0, H40 + 1, int(far.sum()))
        extra_h = np.array([0, H40, bkh[0], bkh[-1], max(bkh[0] - 1, 0), min(bkh[-1] + 1, H40)], np.int64)
        extra_k = np.concatenate([bkeys[:, [0, 0, 0, -1, 0, -1]]], axis=1)
        ph = np.concatenate([ph, extra_h[: int(rng.integers(0, 7))]])
        pk = np.concatenate([pk, extra_k[:, : len(ph) - pk.shape[1]]], axis=1)
        if rng.random() < 0.5:  # duplicates of a probe
            i = int(rng.integers(0, len(ph)))
            r = int(rng.integers(2, 6))
            ph = np.concatenate([ph, np.repeat(ph[i], r)])
            pk = np.concatenate([pk, np.repeat(pk[:, i:i + 1], r, axis=1)], axis=1)
        ph, pk = _sorted(ph.astype(np.int64), pk.astype(np.int64))
        sparse += len(ph) * seekk.INTERPOLATE_GAP < nb
        got = seekk.seek_keys(bkh, bkeys, ph, pk)
        assert got.tolist() == _seek_reference(bkh, bkeys, ph, pk), (trial, mode, nb, len(ph))
    assert sparse > 10


# == 4. bit_lengths and bit_length_rounds =================================================================

def test_bit_lengths_match_python_int_bit_length():
    rng = np.random.default_rng(4440)
    x = np.concatenate([np.array([0, -1, 1, I64.min, I64.max, I64.min + 1, I64.max - 1], np.int64),
                        (np.int64(1) << np.arange(63)), (np.int64(1) << np.arange(63)) - 1,
                        -(np.int64(1) << np.arange(63)), rng.integers(I64.min, I64.max, 2000, dtype=np.int64)])
    want = [max(int(v), 0).bit_length() for v in x]
    assert timesk.bit_lengths(x).tolist() == want
    assert graphs.bit_length_rounds(x).tolist() == want
    assert graphs.bit_length_rounds(x.astype(np.int32).astype(np.int64)).tolist() == \
        [max(int(v), 0).bit_length() for v in x.astype(np.int32)]


# == 5. the public API: random insert/retract streams at 1, 2, 3 and 5 workers ===========================

def _rows(view, cols, at=None):
    c = view.columns(at=at, diffs=True)
    return Counter(dict(zip(zip(*[c[n].tolist() for n in cols]), c["diff"].tolist())))


def _key_pool(rng):
    """Keys: small ints, int64 extremes, and groups of keys sharing one 40-bit hash (runs of colliding
    keys), one group at hash 0 and one at 2**40 - 1 (the ends of the seek range)."""
    pool = list(range(-20, 40)) + [I64.min, I64.min + 1, I64.max, I64.max - 1]
    for h in [0, H40, *rng.integers(0, H40, 6).tolist()]:
        pool += colliding_last_columns([], int(h), list(range(int(rng.integers(2, 6)))))
    return np.array(sorted(set(pool)), np.int64)


def _expected(state, u_state):
    """From-scratch answers from the multisets of t (k, v, w) and u (k, x): Counters of rows -> diff."""
    pos = {r: c for r, c in state.items() if c}
    cnt, sw, mn, mx = Counter(), defaultdict(int), {}, {}
    for (k, v, w), c in pos.items():
        cnt[k] += c
        sw[k] += w * c
        mn[k] = min(mn.get(k, v), v)
        mx[(k, w)] = max(mx.get((k, w), v), v)
    dist = Counter({(k, v): 1 for (k, v, w) in pos})
    by_k = defaultdict(list)
    for (k, v, w), c in pos.items():
        by_k[k].append((v, w, c))
    join = Counter()
    for (k, x), cu in u_state.items():
        for v, w, c in by_k.get(k, ()):
            join[(k, x, v, w)] += cu * c
    return {"raw": Counter(pos), "cnt": Counter({(k, c): 1 for k, c in cnt.items() if c}),
            "sumw": Counter({(k, s): 1 for k, s in sw.items()}), "mn": Counter({r: 1 for r in mn.items()}),
            "mx": Counter({(k, w, v): 1 for (k, w), v in mx.items()}), "dist": dist,
            "join": Counter({r: c for r, c in join.items() if c})}


COLS = {"raw": ["k", "v", "w"], "byv": ["k", "v", "w"], "bywv": ["k", "v", "w"], "cnt": ["k", "count"],
        "sumw": ["k", "w"], "mn": ["k", "v"], "mx": ["k", "w", "v"], "dist": ["k", "v"], "join": ["k", "x", "v", "w"]}


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_random_streams_of_colliding_keys_every_view_every_epoch(workers, keyed):
    """Inputs t (k, v, w) (keyed by k or not) and u (k, x); epochs of 0..~70,000 updates (sizes around
    TINY_ROWS, SMALL_ROWS and ONE_BUCKET) inserting new rows, duplicates, and retracting present ones,
    keys drawn from groups that share a 40-bit hash (also at hash 0 and 2**40 - 1) and int64's extremes,
    values of every span class: the raw view, arrangements by v and (w, v), count, sum, min, max by
    (k, w), distinct (k, v) and a join with u equal the from-scratch answer every epoch and, through
    at=, at every earlier epoch."""
    rng = np.random.default_rng(4450 + 10 * workers + keyed)
    pool = _key_pool(rng)
    state, u_state, hist = Counter(), Counter(), {}
    sizes = [0, 1, 5, 31, 33, 400, 3000, 10_050] + ([70_000] if workers == 1 else [14_000])
    with kp.Engine(workers=workers) as eng:
        t = eng.input("t", ["k", "v", "w"], key=["k"] if keyed else None)
        u = eng.input("u", ["k", "x"])
        with eng.dataflow("d") as df:
            T, U = df.input("t"), df.input("u")
            views = {"raw": T.view("raw", history=20), "byv": T.arrange_by("v").view("byv"),
                     "bywv": T.arrange_by("w", "v").view("bywv"), "cnt": T.count(by="k").view("cnt"),
                     "sumw": T.sum(by="k", col="w").view("sumw"), "mn": T.min(by="k", col="v").view("mn"),
                     "mx": T.max(by=["k", "w"], col="v").view("mx"),
                     "dist": T.select("k", "v").distinct().view("dist", history=20),
                     "join": U.join(T.arrange_by("k"), left_on="k", right_on="k").view("join", history=20)}
        order = rng.permutation(len(sizes))
        for ep in range(len(sizes)):
            n = sizes[order[ep]]
            kind = str(rng.choice(KINDS))
            ks = rng.choice(pool[: int(rng.integers(3, len(pool) + 1))], n)
            vs = value_column(rng, n, kind) if kind not in ("any", "wrap_exact") else rng.integers(-(1 << 40), 1 << 40, n)
            ws = rng.integers(-3, 4, n).astype(np.int64)
            ins = list(zip(ks.tolist(), vs.tolist(), ws.tolist()))
            if ins and rng.random() < 0.4:
                ins += ins[: len(ins) // 3]
            present = [r for r, c in state.items() if c > 0]
            nrem = min(len(present), int(rng.choice([0, 1, 30, 5000])))
            rem = [present[i] for i in rng.choice(len(present), nrem, replace=False)] if nrem else []
            if present and rng.random() < 0.3:  # every row of one key goes
                kdel = present[int(rng.integers(0, len(present)))][0]
                had = set(rem)
                rem += [r for r in present if r[0] == kdel and r not in had]
            state.update(ins)
            state.subtract(rem)
            state = Counter({r: c for r, c in state.items() if c})
            if ins:
                t.insert({"k": np.array([r[0] for r in ins], np.int64), "v": np.array([r[1] for r in ins], np.int64),
                          "w": np.array([r[2] for r in ins], np.int64)})
            if rem:
                t.remove(rem)
            uins = [(int(k), int(x)) for k, x in zip(rng.choice(pool, 4), rng.integers(0, 3, 4))]
            upres = [r for r, c in u_state.items() if c > 0]
            urem = [upres[int(i)] for i in rng.choice(len(upres), min(2, len(upres)), replace=False)] if upres else []
            u_state.update(uins)
            u_state.subtract(urem)
            u_state = Counter({r: c for r, c in u_state.items() if c})
            u.insert(uins)
            if urem:
                u.remove(urem)
            t.advance_to(ep + 1)
            u.advance_to(ep + 1)
            want = _expected(state, u_state)
            want["byv"] = want["bywv"] = want["raw"]
            hist[ep] = {k: want[k] for k in ("raw", "dist", "join")}
            for name, v in views.items():
                eng.wait(v, timeout=WAIT)
                assert _rows(v, COLS[name]) == want[name], (name, ep, n, kind)
        for ep, want in hist.items():
            for name, w in want.items():
                assert _rows(views[name], COLS[name], at=ep) == w, (name, "at", ep)


# == 6. loops at 1, 2, 3 and 5 workers: wcc (enter_at by bit length), bfs, scc (nested: 3-d times) =======

def _components(nodes, edges):
    parent = {v: v for v in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {v: find(v) for v in nodes}


def _bfs_ref(edges, roots):
    adj = defaultdict(list)
    for a, b in edges:
        adj[a].append(b)
    dist = {r: 0 for r in roots}
    frontier = list(roots)
    while frontier:
        nxt = []
        for a in frontier:
            for b in adj[a]:
                if b not in dist:
                    dist[b] = dist[a] + 1
                    nxt.append(b)
        frontier = nxt
    return dist


def _scc_edges(edges):
    import networkx as nx
    g = nx.DiGraph()
    g.add_edges_from(edges)
    comp = {}
    for i, c in enumerate(nx.strongly_connected_components(g)):
        for v in c:
            comp[v] = i
    return {(a, b) for a, b in edges if comp[a] == comp[b]}


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_graph_loops_over_colliding_and_extreme_ids(workers):
    """Node ids that share 40-bit hashes (groups at hash 0, 2**40 - 1 and random), zero, negatives, int64's
    extremes and every bit length; 6 epochs of edge churn (a first load of ~1,300 edges over ~1,100 nodes, then small
    changes and one removal of a whole node's edges; many components): wcc (start rounds by bit length), bfs from a few
    roots and scc (a doubly nested loop) equal union-find, a Python BFS and networkx."""
    rng = np.random.default_rng(4460 + workers)
    ids = set(_key_pool(rng).tolist())
    ids |= {int(x) for x in (np.int64(1) << rng.integers(0, 63, 30)) + rng.integers(-1, 2, 30)}
    ids |= {int(x) for x in rng.integers(I64.min, I64.max, 30, dtype=np.int64)}
    ids |= {int(x) for x in rng.integers(-5000, 5000, 900)}
    ids = sorted(ids)
    roots = [ids[0], 0, ids[-1]]
    edges = set()
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"])
        ri = eng.input("r", ["node"])
        ri.insert([(r,) for r in roots])
        with eng.dataflow("g") as df:
            e, r = df.input("e"), df.input("r")
            w = graphs.wcc(e).view("w", history=10)
            b = graphs.bfs(e, r).view("b")
            s = graphs.scc(e).view("s")
        for ep in range(6):
            ins, rem = set(), set()
            n_ins = 1300 if ep == 0 else int(rng.integers(0, 40))
            for _ in range(n_ins):
                a = ids[int(rng.integers(len(ids)))]
                c = ids[int(rng.integers(len(ids)))] if rng.random() < 0.7 else ids[(ids.index(a) + 1) % len(ids)]
                if (a, c) not in edges:
                    ins.add((a, c))
            if edges:
                cur = sorted(edges)
                for i in rng.choice(len(cur), min(len(cur), int(rng.integers(0, 30))), replace=False):
                    rem.add(cur[int(i)])
                if ep == 4:
                    v = cur[0][0]
                    rem |= {x for x in edges if v in x}
            ins -= rem
            edges = (edges - rem) | ins
            if ins:
                ei.insert(sorted(ins))
            if rem:
                ei.remove(sorted(rem))
            ei.advance_to(ep + 1)
            ri.advance_to(ep + 1)
            for v in (w, b, s):
                eng.wait(v, timeout=WAIT)
            nodes = {x for xy in edges for x in xy}
            assert _rows(w, ["node", "label"]) == Counter({r: 1 for r in _components(nodes, edges).items()}), ep
            assert _rows(b, ["node", "dist"]) == Counter({r: 1 for r in _bfs_ref(edges, roots).items()}), ep
            assert _rows(s, ["src", "dst"]) == Counter({r: 1 for r in _scc_edges(edges)}), ep


# == 7. few probes into a large arrangement whose hashes are skewed (the interpolating seek) ==============

@pytest.mark.parametrize("workers", [2, 5])
def test_probes_into_skewed_two_column_keys_join_semijoin_antijoin(workers):
    """A large input of two-column keys (a, b) whose 40-bit hashes are made skewed: 20,000 in a dense
    cluster of consecutive hashes, 5,000 sharing 50 hashes (runs of colliding keys), a few at hash 0 and
    2**40 - 1 and 40,000 real ones; a small probe input (a, b, p) of present keys, keys sharing a present
    hash, keys at the ends and random ones, churned over 7 epochs while the large side changes at probed
    keys: join, semijoin and antijoin equal dict answers every epoch (at most one probe per thousands of
    keys: seek_keys interpolates, and the cluster puts its estimates far off)."""
    rng = np.random.default_rng(4470 + workers)
    A0 = 5
    base = int(rng.integers(1 << 30, 1 << 38))
    dense = [colliding_last_columns([A0], base + i, [0])[0] for i in range(20_000)]
    coll = [x for h in rng.integers(0, H40, 50).tolist() for x in colliding_last_columns([A0], int(h), list(range(100)))]
    ends = colliding_last_columns([A0], 0, [0, 1, 2]) + colliding_last_columns([A0], H40, [0, 1, 2])
    big_a = np.concatenate([np.full(len(dense) + len(coll) + len(ends), A0), rng.integers(-1000, 1000, 40_000)])
    big_b = np.concatenate([dense, coll, ends, rng.integers(I64.min, I64.max, 40_000, dtype=np.int64)]).astype(np.int64)
    kb = np.unique(np.stack([big_a, big_b]), axis=1)
    big = Counter({(int(a), int(b), int(i % 7)): 1 for i, (a, b) in enumerate(kb.T.tolist())})
    small = Counter()
    allkeys = kb.T.tolist()
    special = [(A0, x) for x in ends + dense[:3] + dense[-3:] + coll[:5]]
    with kp.Engine(workers=workers) as eng:
        bi = eng.input("big", ["a", "b", "y"], key=["a", "b"])
        si = eng.input("small", ["a", "b", "p"])
        rows = np.array(list(big), np.int64)
        bi.insert({"a": rows[:, 0], "b": rows[:, 1], "y": rows[:, 2]})
        with eng.dataflow("j") as df:
            B, S = df.input("big"), df.input("small")
            Bk = B.arrange_by("a", "b")
            j = S.join(Bk, left_on=["a", "b"], right_on=["a", "b"]).view("j")
            sj = S.semijoin(Bk.select("a", "b").distinct(), on=["a", "b"]).view("sj")
            aj = S.antijoin(Bk.select("a", "b").distinct(), on=["a", "b"]).view("aj")
        for ep in range(7):
            sins = []
            for _ in range(int(rng.integers(1, 12))):
                r = rng.random()
                if r < 0.4:
                    a, b = allkeys[int(rng.integers(len(allkeys)))]
                elif r < 0.6:
                    a, b = special[int(rng.integers(len(special)))]
                elif r < 0.8:  # a present key's hash, another key
                    h = int(rng.choice([base, base + 19_999, 0, H40]))
                    a, b = A0, colliding_last_columns([A0], h, [int(rng.integers(100, 200))])[0]
                else:
                    a, b = int(rng.integers(-1000, 1000)), int(rng.integers(-50, 50))
                sins.append((int(a), int(b), int(rng.integers(0, 3))))
            present = [r for r, c in small.items() if c > 0]
            srem = [present[int(i)] for i in rng.choice(len(present), min(len(present), int(rng.integers(0, 4))),
                                                        replace=False)] if present else []
            small.update(sins)
            small.subtract(srem)
            small = Counter({r: c for r, c in small.items() if c})
            si.insert(sins)
            if srem:
                si.remove(srem)
            # the big side changes at probed keys: rows removed, rows with another y added
            brem, bins = [], []
            for (a, b, _) in list(small)[:6]:
                for y in range(7):
                    if big.get((a, b, y), 0) > 0 and rng.random() < 0.5:
                        brem.append((a, b, y))
                if rng.random() < 0.5:
                    bins.append((a, b, int(rng.integers(7, 9))))
            big.update(bins)
            big.subtract(brem)
            big = Counter({r: c for r, c in big.items() if c})
            if bins:
                bi.insert(bins)
            if brem:
                bi.remove(brem)
            bi.advance_to(ep + 1)
            si.advance_to(ep + 1)
            byk = defaultdict(list)
            for (a, b, y), c in big.items():
                byk[(a, b)].append((y, c))
            wj, ws, wa = Counter(), Counter(), Counter()
            for (a, b, p), c in small.items():
                ys = byk.get((a, b), [])
                for y, cy in ys:
                    wj[(a, b, p, y)] += c * cy
                (ws if ys else wa)[(a, b, p)] += c
            for v in (j, sj, aj):
                eng.wait(v, timeout=WAIT)
            assert _rows(j, ["a", "b", "p", "y"]) == wj, ep
            assert _rows(sj, ["a", "b", "p"]) == ws, ep
            assert _rows(aj, ["a", "b", "p"]) == wa, ep


# == 8. random oracle programs at 5 workers (loops: 2-d and 3-d times) =====================================

@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_random_programs_with_loops_at_five_workers(seed):
    """tests/reference.py's random programs (every operator, loops, nested loops, delayed entry) over six
    epochs of random updates at W=5, against its from-scratch evaluator every epoch and through at=."""
    from reference import random_program
    from test_oracle import run_program
    rng = np.random.default_rng(4480 + seed)
    prog = random_program(rng, depth=3, loops=0)
    run_program(prog, 4480 + seed, 5, per_epoch=14)


# == 9. ife's start_rounds (enter_at by bit length) with a bounded number of rounds ======================

def _ife_rows(start_rounds, rounds, workers=1):
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 5), (5, 9), (9, 20)])
        e.advance_to(1)
        with eng.dataflow("d") as df:
            E = df.input("e")
            nodes = E.map(lambda src: {"node": src, "label": src}).distinct()
            kw = {} if start_rounds is None else {"start_rounds": start_rounds}
            v = nodes.ife(E, key="node", node="node", value="label", message=lambda label: label, agg="min",
                          rounds=rounds, **kw).view("v")
        eng.wait(v, timeout=WAIT)
        return sorted(_rows(v, ["node", "label"]))


def test_ife_start_rounds_fixed_point_equals_plain_ife():
    for sr in (graphs.bit_length_rounds, lambda label: np.full(len(label), 3, np.int64)):
        assert _ife_rows(sr, None) == _ife_rows(None, None) == [(1, 1), (5, 1), (9, 1), (20, 1)]


@pytest.mark.parametrize("rounds", [1, 2])
def test_ife_bounded_rounds_with_delayed_starts_fails_the_dataflow(rounds):
    """Path 1 -> 5 -> 9 -> 20, labels = node ids, min-propagation for rounds=1: D_1 is
    [(1, 1), (5, 1), (9, 5), (20, 9)]; with start_rounds=bit_length_rounds (labels 5 and 9 enter at rounds
    3 and 4) the bounded loop answered [(1, 1), (5, 5), (9, 9)]. A delayed entry keeps only the fixed point,
    so a start state given a round above 0 with ``rounds`` bounded fails the dataflow, saying why (round 0
    for all is plain entry: tests/test_attack_s35_graphs.py), and the engine goes on; rounds=0 (D_0, no
    loop) reads no start round."""
    assert _ife_rows(None, 1) == [(1, 1), (5, 1), (9, 5), (20, 9)]
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 5), (5, 9), (9, 20)])
        e.advance_to(1)
        with eng.dataflow("d") as df:
            E = df.input("e")
            nodes = E.map(lambda src: {"node": src, "label": src}).distinct()
            v = nodes.ife(E, key="node", node="node", value="label", message=lambda label: label, agg="min",
                          rounds=rounds, start_rounds=graphs.bit_length_rounds).view("v")
        with pytest.raises(kp.DataflowError, match=rf"start_rounds= delays start states \(round 4\).*"
                                                     rf"rounds={rounds} the result would not be D_{rounds}"):
            eng.wait(v, timeout=WAIT)
        assert eng.dataflows() == {"d": "failed"}
        e.insert([(2, 3)])
        e.advance_to(2)
        with eng.dataflow("after") as df:
            w = df.input("e").view("w")
        eng.wait(w, timeout=WAIT)
        assert sorted(_rows(w, ["src", "dst"])) == [(1, 5), (2, 3), (5, 9), (9, 20)]
    assert _ife_rows(graphs.bit_length_rounds, 0) == _ife_rows(None, 0) == [(1, 1), (5, 5), (9, 9)]


# == 10. a reduce in a loop with pending work at many keys (epochs sent without waiting) ==================

@pytest.mark.parametrize("workers", [1, 3, 5])
def test_bfs_over_many_keys_with_epochs_sent_at_once(workers):
    """bfs (iterate + min) over 12,000 nodes whose ids include colliding-hash groups and extremes; eight
    epochs of a few edge and root changes sent without waiting (the loop's min holds pending (key, time)
    work at lubs of epochs and rounds, sought among thousands of keys): every epoch, read through at=,
    equals a Python BFS."""
    rng = np.random.default_rng(4490 + workers)
    ids = np.unique(np.concatenate([_key_pool(rng), rng.integers(-(1 << 50), 1 << 50, 12_000)])).tolist()
    n = len(ids)
    src = rng.integers(0, n, 40_000)
    dst = rng.integers(0, n, 40_000)
    edges = {(ids[a], ids[b]) for a, b in zip(src.tolist(), dst.tolist())}
    roots = {ids[0], ids[-1], ids[n // 2]}
    want = {}
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"], rows=sorted(edges))
        ri = eng.input("r", ["node"], rows=[(r,) for r in roots])
        with eng.dataflow("b") as df:
            v = graphs.bfs(df.input("e"), df.input("r")).view("v", history=12)
        for ep in range(8):
            if ep:
                cur = sorted(edges)
                rem = {cur[int(i)] for i in rng.choice(len(cur), int(rng.integers(1, 40)), replace=False)}
                ins = {(ids[int(a)], ids[int(b)]) for a, b in rng.integers(0, n, (int(rng.integers(1, 40)), 2))} - edges
                edges = (edges - rem) | ins
                ei.remove(sorted(rem))
                if ins:
                    ei.insert(sorted(ins))
                if ep % 3 == 0:
                    gone = sorted(roots)[0]
                    ri.remove([(gone,)])
                    roots.discard(gone)
                new = ids[int(rng.integers(n))]
                if new not in roots:
                    ri.insert([(new,)])
                    roots.add(new)
            ei.advance_to(ep + 1)
            ri.advance_to(ep + 1)
            want[ep] = Counter({r: 1 for r in _bfs_ref(edges, roots).items()})
        eng.wait(v, timeout=WAIT)
        for ep, w in want.items():
            assert _rows(v, ["node", "dist"], at=ep) == w, ep


def test_form_arrays_without_time_columns_or_values():
    """form_arrays as the cursor and reduce call it (no time columns, no value columns or one), through
    form_tiny and form_buckets, with runs of colliding keys around SHORT_RUN and RANK_RUN: the model's batch."""
    rng = np.random.default_rng(4495)
    for trial in range(60):
        n = int(rng.choice([1, 20, 32, 33, 100, 3000]))
        kv = int(rng.integers(0, 2))
        keys, vals, _, diffs = _crafted_updates(rng, n, int(rng.integers(1, 3)), kv, 1, "runs")
        m = diffs.shape[0]
        times = np.zeros((m, 0), np.int64)
        got = bm.form_arrays(keys, vals, times, diffs)
        same(got, lexsort_model(hash_keys(keys), keys, vals, times, diffs), (trial, n, kv))
