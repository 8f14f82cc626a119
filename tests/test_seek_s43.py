"""Session 43: seeks into a batch with many keys per probe estimate each probe's place by interpolating
its hash (engine/kernels/seek.py seek_keys). Checked against a dictionary lookup on batches whose hashes
are uniform, clustered at both ends, all equal, or collide in runs of several keys, with probes that are
present, absent, beyond either end, and colliding with present keys on the hash alone."""
import numpy as np
import pytest

from kpgnb.engine.kernels import seek as seekk
from kpgnb.engine.kernels.sort import hash_keys


def sorted_batch(h, keys):
    order = np.lexsort(tuple(keys[::-1]) + (h,))
    return np.ascontiguousarray(h[order]), np.ascontiguousarray(keys[:, order])


def hashes(rng, kind, keys):
    if kind == "uniform":
        return hash_keys(np.ascontiguousarray(keys))
    if kind == "clustered":  # most hashes at the two ends of the 40-bit range, a few in between
        n = keys.shape[1]
        side = rng.random(n)
        h = np.where(side < 0.45, rng.integers(0, 1000, n),
                     np.where(side < 0.9, (1 << 40) - 1 - rng.integers(0, 1000, n), rng.integers(0, 1 << 40, n)))
        return h.astype(np.int64)
    if kind == "equal":
        return np.full(keys.shape[1], 12345, np.int64)
    return (hash_keys(np.ascontiguousarray(keys)) >> 30) << 30  # runs of several keys per hash


@pytest.mark.parametrize("kind", ["uniform", "clustered", "equal", "colliding"])
def test_seek_keys_matches_a_dictionary(kind):
    rng = np.random.default_rng({"uniform": 1, "clustered": 2, "equal": 3, "colliding": 4}[kind])
    for trial in range(60):
        kk = int(rng.integers(1, 3))
        n = int(rng.choice([1, 300, 5000, 40000] if kind != "equal" else [1, 300, 2000]))
        keys = np.unique(rng.integers(0, 4 * n + 10, (kk, n)), axis=1).astype(np.int64)
        h = hashes(rng, kind, keys)
        bkh, bkeys = sorted_batch(h, keys)
        where = {(int(x), *map(int, bkeys[:, i])): i for i, x in enumerate(bkh)}
        m = int(rng.choice([1, 2, 5, 20, max(1, n // 300), max(1, n // 10)]))
        present = rng.choice(len(bkh), min(m, len(bkh)), replace=False)
        pk = np.concatenate([bkeys[:, present], rng.integers(-5, 4 * n + 20, (kk, m))], axis=1)
        ph = np.concatenate([bkh[present], hashes(rng, kind, pk[:, len(present):])])
        if rng.random() < 0.3:  # a probe sharing a present key's hash, not its key
            ph[-1] = bkh[int(rng.integers(0, len(bkh)))]
        if rng.random() < 0.3:  # probes before the first hash and past the last
            ph[:2] = [max(bkh[0] - 1, 0), min(bkh[-1] + 1, (1 << 40) - 1)] if len(ph) >= 2 else ph[:2]
        # distinct probes in arrangement order, as cursors give them
        _, first = np.unique(np.concatenate([ph[None, :], pk]), axis=1, return_index=True)
        ph, pk = ph[first], pk[:, first]
        ph, pk = sorted_batch(ph, pk)
        got = seekk.seek_keys(bkh, bkeys, ph, pk)
        want = [where.get((int(x), *map(int, pk[:, i])), -1) for i, x in enumerate(ph)]
        assert got.tolist() == want, (kind, trial, n, m)


def test_interpolation_is_taken_on_a_large_batch():
    """A batch of 200,000 uniform keys and 100 probes (2,000 keys a probe: past INTERPOLATE_GAP): every
    probe's index equals NumPy's search for its (hash, key)."""
    rng = np.random.default_rng(7)
    keys = rng.permutation(400_000)[:200_000].astype(np.int64).reshape(1, -1)
    bkh, bkeys = sorted_batch(hash_keys(keys), keys)
    pk = np.unique(rng.integers(0, 400_000, 100)).astype(np.int64).reshape(1, -1)
    ph, pk = sorted_batch(hash_keys(np.ascontiguousarray(pk)), pk)
    assert pk.shape[1] * seekk.INTERPOLATE_GAP < len(bkh)
    got = seekk.seek_keys(bkh, bkeys, ph, pk)
    at = np.searchsorted(bkh, ph)  # (hashes of distinct keys rarely collide here; checked below)
    want = np.where((at < len(bkh)) & (bkh[np.minimum(at, len(bkh) - 1)] == ph)
                    & (bkeys[0, np.minimum(at, len(bkh) - 1)] == pk[0]), at, -1)
    assert len(np.unique(bkh)) == len(bkh)
    assert got.tolist() == want.tolist() and (got >= 0).sum() > 20
