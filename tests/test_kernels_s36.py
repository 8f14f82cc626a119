"""Session 36's kernels against the NumPy code they replaced: ``extremes`` (the memory modes' min/max per
query, in place of a lexsort) and ``group_rows`` (a part split by time, in place of an argsort and
gathers), on random inputs with the values that order specially (NaN, infinities, int64 extremes)."""
import numpy as np
import pytest

from kpgnb.engine.batcher import Part
from kpgnb.engine.kernels import ife as ik
from kpgnb.engine.kernels.times import count_positive, group_rows, time_groups

ABSENT = np.iinfo(np.int64).min


def _sorted_extremes(q, v, c, is_float, want_max, n):
    """The replaced code: rows of positive count sorted by (query, value), the first or last per query."""
    out = np.full(n, ABSENT, np.int64)
    pos = c > 0
    q, v = q[pos], v[pos]
    if not len(q):
        return out
    x = v.view(np.float64) if is_float else v
    order = np.lexsort((x, q))
    q, x = q[order], x[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    agg = x[np.r_[starts[1:], len(x)] - 1] if want_max else x[starts]
    if is_float:
        agg = (np.asarray(agg, np.float64) + 0.0).view(np.int64)
    out[q[starts]] = agg
    return out


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("is_float", [False, True])
@pytest.mark.parametrize("want_max", [False, True])
def test_extremes_equal_the_sorted_order(seed, is_float, want_max):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    m = int(rng.integers(0, 300))
    q = rng.integers(0, n, m).astype(np.int64)
    c = rng.integers(-2, 3, m).astype(np.int64)
    if is_float:
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.25, 1e300, -1e-300], np.float64)
        x = np.where(rng.random(m) < 0.3, pool[rng.integers(0, len(pool), m)], rng.normal(size=m) * 10)
        v = np.ascontiguousarray(x, np.float64).view(np.int64)
    else:
        pool = np.array([np.iinfo(np.int64).max, ABSENT + 1, -1, 0, 1], np.int64)
        v = np.where(rng.random(m) < 0.3, pool[rng.integers(0, len(pool), m)],
                     rng.integers(-1000, 1000, m)).astype(np.int64)
    out = np.full(n, ABSENT, np.int64)
    hit = ik.extremes(q, v, c, is_float, want_max, out)
    want = _sorted_extremes(q, v, c, is_float, want_max, n)
    assert not hit
    assert np.array_equal(out, want)  # bit for bit: NaN payloads and +0.0 included


def test_extremes_report_the_no_state_value():
    q = np.array([0, 0, 1], np.int64)
    out = np.full(2, ABSENT, np.int64)
    assert ik.extremes(q, np.array([ABSENT, 5, 3], np.int64), np.ones(3, np.int64), False, False, out)
    out = np.full(2, ABSENT, np.int64)
    assert not ik.extremes(q, np.array([ABSENT, 5, 3], np.int64), np.ones(3, np.int64), False, True, out)
    assert out.tolist() == [5, 3]


@pytest.mark.parametrize("seed", range(10))
def test_group_rows_is_a_stable_split_by_time(seed):
    rng = np.random.default_rng(seed)
    n, kk, kv, d = int(rng.integers(1, 500)), int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 4))
    keys = rng.integers(-9, 9, (kk, n)).astype(np.int64)
    vals = rng.integers(-9, 9, (kv, n)).astype(np.int64)
    tpool = rng.integers(0, 4, (int(rng.integers(1, 9)), d)).astype(np.int64)
    times = np.ascontiguousarray(tpool[rng.integers(0, len(tpool), n)])
    diffs = rng.integers(-3, 4, n).astype(np.int64)
    group, seen, g = time_groups(times, 64)
    assert g == len({tuple(t) for t in times.tolist()})
    k2, v2, t2, d2, ends = group_rows(keys, vals, times, diffs, group, g)
    order = np.argsort(group[:n], kind="stable")
    assert np.array_equal(k2, keys[:, order]) and np.array_equal(v2, vals[:, order])
    assert np.array_equal(t2, times[order]) and np.array_equal(d2, diffs[order])
    assert ends.tolist() == np.cumsum(np.bincount(group, minlength=g)).tolist()
    parts = Part(keys, vals, times, diffs).by_time()
    assert len(parts) == (g if g > 1 else 1)
    assert sum(len(p) for p in parts) == n
    for p in parts:
        assert p.single or g == 1
        assert (p.times == p.times[:1]).all()
    assert count_positive(diffs) == int((diffs > 0).sum())


@pytest.mark.parametrize("seed", range(8))
def test_key_index_by_hashing_equals_by_sorting(seed, monkeypatch):
    """key_index's hash-table path (many repeated keys) and its abort to sorting (mostly distinct) give
    exactly what sorting every column gives: the distinct keys in arrangement order and each column's
    index among them."""
    from kpgnb.engine import cursor
    rng = np.random.default_rng(seed)
    kk = int(rng.integers(1, 4))
    n = int(rng.choice([4096, 5000, 30_000]))
    distinct = int(rng.choice([3, 700, n // 3, n]))
    pool = rng.integers(-5, 5, (kk, distinct)).astype(np.int64)
    pool[0] = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, distinct, dtype=np.int64)
    if kk > 1 and seed % 2:
        pool[0, : distinct // 2] = 7  # equal first columns: the table compares the other columns
    keys = np.ascontiguousarray(pool[:, rng.integers(0, distinct, n)])
    got = cursor.key_index(keys)
    monkeypatch.setattr(cursor, "DEDUPE_ROWS", 1 << 62)
    want = cursor.key_index(keys)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    assert np.array_equal(got[1][:, got[2]], keys)
