"""Session 45: seeks with a moderate number of batch keys per probe (``SCAN_GAP`` to ``INTERPOLATE_GAP``)
scan the batch forward by blocks of eight hashes (engine/kernels/seek.py seek_keys). Checked against a
dictionary lookup with gaps across the whole scanning range, hash runs of several keys that straddle
blocks, probes sharing a present key's hash only, and probes in the last partial block and past the end."""
import numpy as np
import pytest

from kpgnb.engine.kernels import seek as seekk
from kpgnb.engine.kernels.sort import hash_keys


def arranged(h, keys):
    order = np.lexsort(tuple(keys[::-1]) + (h,))
    return np.ascontiguousarray(h[order]), np.ascontiguousarray(keys[:, order])


@pytest.mark.parametrize("colliding", [False, True])
def test_scanning_seeks_match_a_dictionary(colliding):
    rng = np.random.default_rng(45 + colliding)
    scanned = 0
    for trial in range(80):
        kk = int(rng.integers(1, 3))
        n = int(rng.choice([9, 17, 64, 1000, 20000]))
        keys = np.unique(rng.integers(0, 4 * n + 10, (kk, n)), axis=1).astype(np.int64)
        h = hash_keys(np.ascontiguousarray(keys))
        if colliding:  # runs of up to a dozen keys per hash, longer than a block
            h = (h >> 36) << 36
        bkh, bkeys = arranged(h, keys)
        nb = len(bkh)
        gap = int(rng.integers(seekk.SCAN_GAP, seekk.INTERPOLATE_GAP + 1))
        m = max(1, nb // gap // 2)  # present and absent probes, m each
        present = rng.choice(nb, min(m, nb), replace=False)
        absent = rng.integers(-5, 4 * n + 20, (kk, m))
        ah = hash_keys(np.ascontiguousarray(absent))
        if colliding:
            ah = (ah >> 36) << 36
        pk = np.concatenate([bkeys[:, present], absent], axis=1)
        ph = np.concatenate([bkh[present], ah])
        ph[-1] = bkh[int(rng.integers(max(0, nb - 8), nb))]  # a hash of the last block, maybe not its key
        if len(ph) > 1:
            ph[-2] = bkh[-1] + 1  # past the end
        _, first = np.unique(np.concatenate([ph[None, :], pk]), axis=1, return_index=True)
        ph, pk = arranged(ph[first], pk[:, first])
        where = {(int(x), *map(int, bkeys[:, i])): i for i, x in enumerate(bkh)}
        scanned += len(ph) * seekk.SCAN_GAP <= nb <= len(ph) * seekk.INTERPOLATE_GAP
        got = seekk.seek_keys(bkh, bkeys, ph, pk)
        want = [where.get((int(x), *map(int, pk[:, i])), -1) for i, x in enumerate(ph)]
        assert got.tolist() == want, (colliding, trial, nb, len(ph))
    assert scanned >= 40  # most trials seek in the scanning regime

