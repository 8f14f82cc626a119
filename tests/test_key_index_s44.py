"""``cursor.key_index`` (the probe index of the memory modes' reads) in one kernel after NumPy's sort
(kernels/seek.py ``index_packed``): the distinct key columns in arrangement order (40-bit hash, then the
columns), their hashes, and each given column's number among them, against a Python model; colliding
hashes, repeats, several key columns and the sizes around the hash-table path (DEDUPE_ROWS)."""
import numpy as np
import pytest

from collisions import colliding_last_columns
from kpgnb.engine import cursor
from kpgnb.engine.kernels.sort import hash_keys


def _model(keys):
    cols = [tuple(int(x) for x in keys[:, i]) for i in range(keys.shape[1])]
    kh = hash_keys(np.ascontiguousarray(keys)).tolist()
    distinct = sorted(set(zip(kh, cols)))
    rank = {c: i for i, (_, c) in enumerate(distinct)}
    return [h for h, _ in distinct], [c for _, c in distinct], [rank[c] for c in cols]


def _check(keys):
    okh, okeys, inv = cursor.key_index(keys)
    want_kh, want_cols, want_inv = _model(keys)
    assert okh.tolist() == want_kh
    assert [tuple(int(x) for x in okeys[:, i]) for i in range(okeys.shape[1])] == want_cols
    assert inv.tolist() == want_inv
    assert okeys.flags.c_contiguous and okh.dtype == okeys.dtype == inv.dtype == np.int64


@pytest.mark.parametrize("n", [1, 2, 3, 50, 480, cursor.DEDUPE_ROWS - 1, cursor.DEDUPE_ROWS, 5000])
@pytest.mark.parametrize("kk", [1, 2, 3])
@pytest.mark.parametrize("spread", [4, 1 << 40])
def test_random_keys_with_repeats(n, kk, spread):
    rng = np.random.default_rng(n * 7 + kk * 3 + (spread > 4))
    keys = rng.integers(-spread, spread, (kk, n)).astype(np.int64)
    _check(keys)


@pytest.mark.parametrize("kk", [1, 2])
def test_colliding_hashes_order_by_the_columns(kk):
    """Distinct keys sharing one 40-bit hash (made by inverting the hash), shuffled and repeated among
    other keys: each run of one hash comes out in column order, once per key."""
    rng = np.random.default_rng(kk)
    prefix = [17] * (kk - 1)
    last = colliding_last_columns(prefix, 0xABCDE12345, list(range(0, 600, 7)))
    coll = np.array([prefix + [v] for v in last], np.int64).T
    other = rng.integers(0, 1000, (kk, 300)).astype(np.int64)
    keys = np.concatenate([coll, coll[:, ::3], other, other[:, :50]], axis=1)
    keys = np.ascontiguousarray(keys[:, rng.permutation(keys.shape[1])])
    assert len(set(hash_keys(coll).tolist())) == 1
    _check(keys)


def test_extremes_and_a_non_contiguous_view():
    x = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1, 1, np.iinfo(np.int64).min], np.int64)
    _check(np.stack([x, x[::-1]])[:, ::1])
    _check(np.stack([x, x[::-1]]).T.copy().T)  # (a Fortran-ordered view: made contiguous first)
