"""Review s34: batch formation (engine/kernels/form.py form_buckets, rewritten in 51f95d5 to gather each
bucket into a column-major scratch and order runs of equal hash there) against a plain NumPy model:
np.lexsort by (hash, keys, vals, times), equal rows' diffs summed, zero sums dropped, distinct keys with
their row offsets. Called directly (separate outputs, in place over many buckets, key offsets written
over the hashes' array) and through engine.batch.form_parts (1..3 workers, tiny buckets, colliding
hashes). Covers runs of equal hash longer than SHORT_RUN, ties on the first differing column (the
insertion path), int64 extremes, zero-sum groups and the multiplicity overflow check (2**62).
Seeded; the kernel is looked up at call time (formk.form_buckets, bm.form_buckets) so a broken one
can be substituted."""
import numpy as np
import pytest

from kpgnb.engine import batch as bm
from kpgnb.engine.kernels import MAX_MULT
from kpgnb.engine.kernels import form as formk
from kpgnb.engine.kernels import sort as sortk

I64 = np.iinfo(np.int64)
EXTREMES = np.array([I64.min, I64.min + 1, -(1 << 40), -1, 0, 1, 1 << 40, I64.max - 1, I64.max], np.int64)


# -- the model ------------------------------------------------------------------------------------------

def model(h, keys, vals, times, diffs):
    """(overflow, arrays): overflow is "yes" where some equal rows sum to |s| >= 2**62, "no" where no
    partial sum (in input order) reaches it, "either" otherwise (the kernel checks running sums); arrays
    (kh, keys, koff, vals, times, diffs) of the consolidated batch, None where overflow is "yes"."""
    kk, kv, d = keys.shape[0], vals.shape[0], times.shape[1]
    n = diffs.shape[0]
    M = np.concatenate([h[None, :], keys, vals, times.T]).astype(np.int64).reshape(1 + kk + kv + d, n)
    order = np.lexsort(M[::-1]) if n else np.zeros(0, np.int64)
    M, ds = M[:, order], diffs[order]
    start = np.ones(n, bool)
    start[1:] = (M[:, 1:] != M[:, :-1]).any(axis=0)
    firsts = np.flatnonzero(start)
    if n and int(np.abs(ds).max()) * n < MAX_MULT:
        sums, overflow = np.add.reduceat(ds, firsts) if n else ds[:0], "no"
    else:
        bounds = list(firsts) + [n]
        sums, overflow = [], "no"
        for a, b in zip(bounds[:-1], bounds[1:]):
            acc = 0
            for x in ds[a:b].tolist():
                acc += x
                if abs(acc) >= MAX_MULT:
                    overflow = "either"
            sums.append(acc)
        if any(abs(s) >= MAX_MULT for s in sums):
            return "yes", None
        sums = np.array(sums, np.int64)
    keep = sums != 0
    R = M[:, firsts[keep]]
    sd = sums[keep]
    newkey = np.ones(R.shape[1], bool)
    newkey[1:] = (R[:1 + kk, 1:] != R[:1 + kk, :-1]).any(axis=0)
    kpos = np.flatnonzero(newkey)
    return overflow, (R[0, kpos], R[1:1 + kk, kpos].reshape(kk, len(kpos)),
                      np.append(kpos, R.shape[1]).astype(np.int64), R[1 + kk:1 + kk + kv].reshape(kv, R.shape[1]),
                      np.ascontiguousarray(R[1 + kk + kv:].T).reshape(R.shape[1], d), sd)


def same(got, want):
    names = ("kh", "keys", "koff", "vals", "times", "diffs")
    for name, x, y in zip(names, got, want):
        assert x.shape == y.shape and np.array_equal(x, y), (name, x, y)


# -- direct calls -----------------------------------------------------------------------------------------

def call(cnt, h, keys, vals, times, diffs, mode):
    """form_buckets over copies: "separate" outputs, "in_place" (outputs are the inputs, key offsets
    separate: a shard in form_parts) or "koff_hashes" (one bucket, key offsets written over the hashes'
    array: form_parts for small inputs). Returns ((nk, nr), trimmed arrays or None)."""
    h, keys, vals, times, diffs = (np.ascontiguousarray(a.copy()) for a in (h, keys, vals, times, diffs))
    n = diffs.shape[0]
    kk, kv, d = keys.shape[0], vals.shape[0], times.shape[1]
    if mode == "in_place":
        koff = np.full(n + 1, -7, np.int64)
        outs = (h, keys, vals, times, diffs)
        nk, nr = formk.form_buckets(cnt, h, keys, vals, times, diffs, *outs, koff)
    else:
        outs = (np.full(n, -7, np.int64), np.full((kk, n), -7, np.int64), np.full((kv, n), -7, np.int64),
                np.full((n, d), -7, np.int64), np.full(n, -7, np.int64))
        if mode == "koff_hashes":
            koff = np.empty(n + 1, np.int64)
            koff[:n] = h
            h = koff
        else:
            koff = np.full(n + 1, -7, np.int64)
        nk, nr = formk.form_buckets(cnt, h, keys, vals, times, diffs, *outs, koff)
    if nk < 0:
        return (nk, nr), None
    rh, rk, rv, rt, rd = outs
    return (nk, nr), (rh[:nk], rk[:, :nk], koff[:nk + 1], rv[:, :nr], rt[:nr], rd[:nr])


def in_buckets(rng, h, nb):
    """A permutation putting rows into buckets that are contiguous hash ranges (rows of one hash in one
    bucket; the rows' order within a bucket kept), and the bucket offsets (some buckets empty)."""
    u = np.unique(h)
    ncut = min(nb - 1, max(len(u) - 1, 0))
    cuts = np.sort(rng.choice(np.arange(1, len(u)), ncut, replace=False)) if ncut else np.zeros(0, np.int64)
    b = np.searchsorted(u[cuts], h, side="right")
    perm = np.argsort(b, kind="stable")
    cnt = np.zeros(ncut + 2, np.int64)
    np.cumsum(np.bincount(b, minlength=ncut + 1), out=cnt[1:])
    if len(cnt) > 2 and rng.random() < 0.5:  # empty buckets in between
        cnt = np.sort(np.concatenate([cnt, rng.choice(cnt, 3)]))
    return perm, cnt


def column(rng, mode, shape):
    if mode == 0:
        return rng.integers(0, 3, shape)  # many ties
    if mode == 1:
        return rng.integers(-2, 2, shape)
    if mode == 2:
        return rng.choice(EXTREMES, shape)
    return rng.integers(I64.min, I64.max, shape, dtype=np.int64, endpoint=True)


def random_updates(rng, kk, kv, d, n, big_diffs=False):
    """Updates with few distinct keys, values from one of several ranges (int64 extremes among them), and
    key hashes that are a function of the key: real ones, all equal, few (colliding keys), or non-uniform
    (skewed: formation's radix fallback)."""
    vmode = int(rng.integers(0, 4))
    nkeys = int(rng.choice([1, 2, 3, 12, 400]))
    pool = column(rng, vmode, (kk, nkeys))
    ki = rng.integers(0, nkeys, n)
    keys = pool[:, ki].reshape(kk, n)
    vals = column(rng, int(rng.integers(0, 4)), (kv, n))
    times = column(rng, int(rng.integers(0, 4)), (n, d))
    if big_diffs:
        diffs = rng.choice(np.array([MAX_MULT - 1, 1 - MAX_MULT, MAX_MULT // 2, -(MAX_MULT // 2), 1, -1]), n)
    else:
        diffs = rng.integers(-2, 3, n)
    # the pool's keys may repeat: hash by the distinct key, not by the pool index
    _, kid = np.unique(pool.T, axis=0, return_inverse=True)
    kid = kid.reshape(-1)
    hmode = int(rng.integers(0, 5))
    if hmode == 0:
        ph = sortk.hash_keys(np.ascontiguousarray(pool))
    elif hmode == 1:
        ph = np.zeros(nkeys, np.int64)
    elif hmode == 2:
        ph = (rng.integers(0, 3, kid.max() + 1) << int(rng.integers(0, 38)))[kid]
    elif hmode == 3:
        ph = (kid.astype(np.int64) ** 3 * int(rng.integers(1, 50))) % (1 << 40)
    else:
        ph = np.where(kid % 97 == 96, (1 << 40) - 1 - kid, kid // 2)
    h = np.asarray(ph, np.int64)[ki] if n else np.zeros(0, np.int64)
    return h, keys.astype(np.int64), vals.astype(np.int64), times.astype(np.int64), diffs.astype(np.int64)


@pytest.mark.parametrize("mode", ["separate", "in_place", "koff_hashes"])
def test_form_buckets_matches_the_model(mode):
    rng = np.random.default_rng({"separate": 341, "in_place": 342, "koff_hashes": 343}[mode])
    for trial in range(2000):
        kk, kv, d = int(rng.integers(1, 4)), int(rng.integers(0, 4)), int(rng.integers(1, 4))
        n = int(rng.choice([0, 1, 2, 3, 5, 24, 25, 26, 60, 300, 1500]))
        h, keys, vals, times, diffs = random_updates(rng, kk, kv, d, n, big_diffs=trial % 7 == 0)
        nb = 1 if mode == "koff_hashes" else int(rng.choice([1, 2, 7, 60]))
        perm, cnt = in_buckets(rng, h, nb)
        h, keys, vals, times, diffs = h[perm], keys[:, perm], vals[:, perm], times[perm], diffs[perm]
        overflow, want = model(h, keys, vals, times, diffs)
        (nk, nr), got = call(cnt, h, keys, vals, times, diffs, mode)
        ctx = (trial, kk, kv, d, n, cnt.tolist()[:6])
        if overflow == "yes":
            assert nk == -1, ctx
        elif overflow == "no" or got is not None:
            assert got is not None, ctx
            same(got, want)


def test_runs_of_one_hash_with_ties_on_their_first_differing_column():
    """A run of equal hash (colliding keys, or one key) of every length around SHORT_RUN, whose rows agree
    on the columns before q0 and tie on q0 (ranks by counting collide: the insertion path, or the long
    run's sort), differing in later columns only; in place, after a first bucket."""
    rng = np.random.default_rng(344)
    lengths = [2, 3, 5, formk.SHORT_RUN - 1, formk.SHORT_RUN, formk.SHORT_RUN + 1, formk.SHORT_RUN + 2, 49, 200]
    for kk in (1, 2, 3):
        for kv in (0, 1, 2, 3):
            for d in (1, 2, 3):
                w = kk + kv + d
                for L in lengths:
                    for q0 in range(w):
                        # columns before q0 equal; q0 with 1 or 2 values; later ones small ranges
                        M = rng.integers(-1, 2, (w, L))
                        M[:q0] = rng.choice(EXTREMES)
                        M[q0] = rng.choice(EXTREMES[[0, 8]], 1) if rng.random() < 0.3 else rng.integers(0, 2, L)
                        if rng.random() < 0.3:
                            M[q0 + 1:] = rng.choice(EXTREMES, (w - q0 - 1, L))
                        keys, vals, times = M[:kk], M[kk:kk + kv], np.ascontiguousarray(M[kk + kv:].T)
                        diffs = rng.choice(np.array([-1, 1, 1, 2]), L)
                        h = np.full(L, 5, np.int64)
                        # a first bucket (lesser hashes, random rows) in front of the run
                        m0 = int(rng.integers(0, 30))
                        f = rng.integers(-3, 3, (w, m0))
                        h = np.concatenate([rng.integers(0, 5, m0), h])
                        keys = np.concatenate([f[:kk], keys], axis=1)
                        vals = np.concatenate([f[kk:kk + kv], vals], axis=1)
                        times = np.concatenate([f[kk + kv:].T, times])
                        diffs = np.concatenate([rng.integers(-1, 2, m0), diffs])
                        cnt = np.array([0, m0, m0 + L], np.int64)
                        _, want = model(h, keys, vals, times, diffs)
                        for mode in ("in_place", "separate"):
                            _, got = call(cnt, h, keys, vals, times, diffs, mode)
                            same(got, want)


def test_in_place_buckets_do_not_corrupt_later_ones():
    """Many buckets written in place, the early ones consolidating little (distinct rows) and the later
    ones much (rows cancelling or summing), so the output trails the input by little, then much."""
    rng = np.random.default_rng(345)
    for trial in range(60):
        kk, kv, d = int(rng.integers(1, 4)), int(rng.integers(0, 4)), int(rng.integers(1, 4))
        nb = int(rng.integers(2, 40))
        hs, ks, vs, ts, dfs, cnt = [], [], [], [], [], [0]
        for b in range(nb):
            m = int(rng.integers(0, 60))
            hb = np.sort(rng.choice(np.arange(b * 100, b * 100 + 100), m)) if rng.random() < 0.5 else \
                np.full(m, b * 100 + 1, np.int64)
            rows = rng.integers(-2, 2, (kk + kv + d, max(1, m // 3)))[:, rng.integers(0, max(1, m // 3), m)]
            if b % 2 == 0:
                rows = rng.choice(EXTREMES, (kk + kv + d, m))
            rng.shuffle(hb)
            hs.append(hb), ks.append(rows[:kk]), vs.append(rows[kk:kk + kv]), ts.append(rows[kk + kv:].T)
            dfs.append(rng.choice(np.array([-1, 1]), m))
            cnt.append(cnt[-1] + m)
        h, keys, vals = np.concatenate(hs).astype(np.int64), np.concatenate(ks, axis=1), np.concatenate(vs, axis=1)
        times, diffs, cnt = np.concatenate(ts), np.concatenate(dfs), np.array(cnt, np.int64)
        # a hash value's rows may differ in key: the model's (hash, key) order is what counts
        _, want = model(h, keys, vals, times, diffs)
        _, got = call(cnt, h, keys, vals, times, diffs, "in_place")
        same(got, want)


# -- through form_parts -------------------------------------------------------------------------------------

def _coarse(keys, out, lo=0, hi=None):
    hi = keys.shape[1] if hi is None else hi
    out[lo:hi] = np.abs(keys[0, lo:hi] % 3) << 20 if keys.shape[0] else 0
    return out


def _few_bits(keys, out, lo=0, hi=None):
    hi = keys.shape[1] if hi is None else hi
    sortk.hash_keys_into(keys, lo, hi, out)
    out[lo:hi] &= ~((1 << 37) - 1)
    return out


@pytest.mark.parametrize("hashes", ["real", "coarse", "few_bits"])
def test_form_parts_matches_the_model(monkeypatch, hashes):
    """Each shard's batch (shard = (hash * W) >> 40) equals the model of its rows, with 1..3 workers, one
    bucket or many tiny ones, the small path and the distributed one; the parts are left as they were."""
    rng = np.random.default_rng({"real": 346, "coarse": 347, "few_bits": 348}[hashes])
    hash_fn = {"real": sortk.key_hashes, "coarse": _coarse, "few_bits": _few_bits}[hashes]
    for trial in range(72):
        workers = 1 + trial % 3
        kk, kv, d = int(rng.integers(1, 4)), int(rng.integers(0, 4)), int(rng.integers(1, 4))
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.choice([0, 1, 30, 400, 1200]))
            _, k, v, t, df = random_updates(rng, kk, kv, d, n)
            parts.append((k, v, t, df))
        whole = [np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0) for i in range(4)]
        h = hash_fn(np.ascontiguousarray(whole[0]), np.empty(whole[3].shape[0], np.int64))
        overflow, _ = model(h, *whole)
        assert overflow == "no"
        monkeypatch.setattr(sortk, "key_hashes", hash_fn)
        monkeypatch.setattr(sortk, "BUCKET_ROWS", int(rng.choice([1, 3, 8, 64, 4096])))
        monkeypatch.setattr(sortk, "ONE_BUCKET", int(rng.choice([0, 1 << 16])))
        monkeypatch.setattr(bm, "SMALL_ROWS", int(rng.choice([0, 10_000])))
        monkeypatch.setattr(bm, "PARALLEL_ROWS", int(rng.choice([0, 100_000])))
        got = bm.form_parts(parts, workers)
        monkeypatch.undo()
        assert len(got) == workers
        shard = (h * workers) >> sortk.HASH_BITS
        for s in range(workers):
            sel = shard == s
            _, want = model(h[sel], whole[0][:, sel], whole[1][:, sel], whole[2][sel], whole[3][sel])
            same(got[s], want)
        again = [np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0) for i in range(4)]
        assert all(np.array_equal(x, y) for x, y in zip(whole, again))


# -- the multiplicity bound ----------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sums_reaching_2_62_raise_and_those_below_do_not(monkeypatch, workers):
    """Equal rows summing to +-2**62 make form_parts raise OverflowError, wherever the group is (a short or
    a long run, colliding keys, the first or a later bucket, one bucket or many); 2**62 - 1, or large diffs
    that cancel on the way, form the batch the model gives."""
    rng = np.random.default_rng(349 + workers)
    for trial in range(48):
        kk, kv, d = int(rng.integers(1, 4)), int(rng.integers(0, 4)), int(rng.integers(1, 4))
        n = int(rng.choice([80, 500, 3000]))
        h, keys, vals, times, diffs = random_updates(rng, kk, kv, d, n)
        L = int(rng.choice([2, 3, formk.SHORT_RUN + 3, 60]))
        at = np.sort(rng.choice(n, L, replace=False))  # these rows made equal: one (key, val, time)
        src = int(at[0])
        keys[:, at] = 987_654_321  # a key no other row has
        vals[:, at] = vals[:, [src]]
        times[at] = times[src]
        sign = 1 if trial % 2 else -1
        case = trial % 3
        part = np.full(L, (MAX_MULT - 1) // L, np.int64)
        part[0] += (MAX_MULT - 1) - part.sum()
        if case == 0:
            part[-1] += 1  # reaches 2**62 exactly at the last row
        elif case == 2:
            part[1::2] = -part[1::2]  # large diffs cancelling: no partial sum near the bound
            part[0] = MAX_MULT - 1
            part[1] = -(MAX_MULT - 1)
        diffs[at] = sign * part
        hashes = [sortk.key_hashes, _coarse][trial // 3 % 2]
        monkeypatch.setattr(sortk, "key_hashes", hashes)
        monkeypatch.setattr(sortk, "BUCKET_ROWS", int(rng.choice([1, 8, 4096])))
        monkeypatch.setattr(sortk, "ONE_BUCKET", int(rng.choice([0, 1 << 16])))
        monkeypatch.setattr(bm, "SMALL_ROWS", int(rng.choice([0, 10_000])))
        h = hashes(np.ascontiguousarray(keys), np.empty(n, np.int64))
        overflow, want = model(h, keys, vals, times, diffs)
        parts = [(keys, vals, times, diffs)]
        if case == 0:
            assert overflow == "yes"
            with pytest.raises(OverflowError):
                bm.form_parts(parts, workers)
        else:
            assert overflow == "no"
            got = bm.form_parts(parts, workers)
            shard = (h * workers) >> sortk.HASH_BITS
            for s in range(workers):
                sel = shard == s
                same(got[s], model(h[sel], keys[:, sel], vals[:, sel], times[sel], diffs[sel])[1])
        monkeypatch.undo()


def test_form_buckets_reports_overflow_in_a_later_bucket():
    """Direct: a group summing to 2**62 in the last of several buckets, after buckets already written in
    place, returns nk == -1; one row less (2**62 - 1) returns the model's batch."""
    rng = np.random.default_rng(352)
    for L in (2, 5, formk.SHORT_RUN + 1, 80):
        for reach in (True, False):
            m0 = 50
            h = np.concatenate([np.sort(rng.integers(0, 10, m0)), np.full(L, 20)]).astype(np.int64)
            keys = np.concatenate([rng.integers(0, 3, (2, m0)), np.full((2, L), 7)], axis=1)
            vals = np.concatenate([rng.integers(0, 3, (1, m0)), np.full((1, L), I64.max)], axis=1)
            times = np.concatenate([rng.integers(0, 3, (m0, 2)), np.full((L, 2), I64.min)])
            part = np.full(L, (MAX_MULT - 1) // L, np.int64)
            part[0] += (MAX_MULT - 1) - part.sum() + (1 if reach else 0)
            diffs = np.concatenate([rng.integers(-1, 2, m0), -part])
            cnt = np.array([0, 20, m0, m0 + L], np.int64)
            cnt[1] = np.searchsorted(h, h[20])
            overflow, want = model(h, keys, vals, times, diffs)
            for mode in ("in_place", "separate"):
                (nk, _), got = call(cnt, h, keys, vals, times, diffs, mode)
                if reach:
                    assert overflow == "yes" and nk == -1
                else:
                    same(got, want)
