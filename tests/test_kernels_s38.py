"""Session 38: a merge advances times inline and re-normalizes a key's rows only where advancing moved a
time. Checked against the definition: both batches' rows, each time advanced to rep_F(t) (the meet over
the frontier's elements of the join with t), formed from scratch."""
import numpy as np
import pytest

from kpgnb.engine import batch as B


def _formed(rng, n, kk, kv, d, pool):
    keys = pool[rng.integers(0, len(pool), (kk, n))]
    vals = pool[rng.integers(0, len(pool), (kv, n))]
    times = rng.integers(0, 4, (n, d)).astype(np.int64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 3], np.int64), n)
    return B.form_parts([(keys, vals, times, diffs)], 1)[0]


def _rows(arrays):
    kh, keys, koff, vals, times, diffs = arrays
    per = np.diff(koff)
    return np.repeat(keys, per, axis=1), vals, times, diffs


def _expected(a, b, frontier):
    parts = []
    for arrays in (a, b):
        keys, vals, times, diffs = _rows(arrays)
        if len(frontier):
            times = np.min(np.maximum(times[:, None, :], frontier[None, :, :]), axis=1)
        parts.append((keys, vals, np.ascontiguousarray(times), diffs))
    return B.form_parts(parts, 1)[0]


@pytest.mark.parametrize("seed", range(60))
def test_a_merge_equals_its_rows_advanced_and_formed(seed):
    rng = np.random.default_rng(seed)
    kk, kv, d = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 4))
    pool = np.arange(int(rng.integers(2, 40)), dtype=np.int64)  # few keys: rows of one key in both batches
    a = _formed(rng, int(rng.integers(0, 300)), kk, kv, d, pool)
    b = _formed(rng, int(rng.integers(0, 300)), kk, kv, d, pool)
    frontier = rng.integers(0, 4, (int(rng.integers(0, 4)), d)).astype(np.int64)
    m = B.Merger(a, b, frontier if len(frontier) else None)
    fuel = int(rng.integers(1, 50))
    while not m.work(fuel):  # resumed in small steps, as a spine's maintenance does
        pass
    got, want = m.result, _expected(a, b, frontier)
    for x, y in zip(got, want):
        assert np.array_equal(x, y)


def test_a_merge_under_a_loop_frontier_keeps_every_round_apart():
    """Inside a loop the frontier {(e, i), (e + 1, 0)} leaves times (e, j < i) as they are (they matter to
    the next epoch): nothing moves, nothing consolidates, and the merge is the plain union."""
    n = 1000
    keys = np.arange(n, dtype=np.int64).reshape(1, n) % 97
    none = np.zeros((0, n), np.int64)
    one = np.ones(n, np.int64)
    a = B.form_parts([(keys, none, np.tile(np.array([[0, 3]], np.int64), (n, 1)), one)], 1)[0]
    b = B.form_parts([(keys, none, np.tile(np.array([[0, 7]], np.int64), (n, 1)), one)], 1)[0]
    m = B.Merger(a, b, np.array([[0, 9], [1, 0]], np.int64))
    m.work(None)
    kh, k, koff, vals, times, diffs = m.result
    assert len(diffs) == 2 * 97 and set(map(tuple, times.tolist())) == {(0, 3), (0, 7)}
    assert diffs.sum() == 2 * n
