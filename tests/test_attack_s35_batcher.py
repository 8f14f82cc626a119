"""Attack s35: the batcher's one-time parts (engine/batcher.py Part.single, Batcher.seal forming parts of
one time without their times, batch.form_parts ``time``) and formation (kernels/form.py form_buckets)
through a real WorkerPool, against a Counter model. Random mixes of parts: one-time parts of the same
time and of different times, multi-time parts, parts of one row, parts straddling the seal's frontier,
times of depth 1, 2 and 3 under partially ordered frontiers, many equal keys (long runs of equal hash),
int64 extremes; sizes below and above SMALL_ROWS / PARALLEL_ROWS. Each seal's batches must hold exactly
the consolidated updates not in advance of the frontier, each key in the shard owning it, in arrangement
order."""
from collections import Counter

import numpy as np
import pytest

from kpgnb.engine.batcher import Batcher
from kpgnb.engine.kernels import sort as sortk
from kpgnb.engine.lattice import Antichain
from kpgnb.engine.pool import WorkerPool

I64 = np.iinfo(np.int64)


def _col(rng, mode, n):
    if mode == 0:
        return rng.integers(0, 3, n)
    if mode == 1:
        return rng.integers(-5, 5, n)
    if mode == 2:
        return rng.choice(np.array([I64.min, -1, 0, 1, I64.max], np.int64), n)
    return rng.integers(I64.min, I64.max, n, dtype=np.int64)


def _part(rng, kk, kv, d, n, times_mode, tpool):
    keys = np.array([_col(rng, int(rng.integers(0, 4)), n) for _ in range(kk)], np.int64).reshape(kk, n)
    if rng.random() < 0.3:
        keys[:] = keys[:, :1]  # one key: a run of equal hash as long as the part
    vals = np.array([_col(rng, int(rng.integers(0, 4)), n) for _ in range(kv)], np.int64).reshape(kv, n)
    if times_mode == "one":
        t = tpool[int(rng.integers(0, len(tpool)))]
        times = np.tile(np.array(t, np.int64), (n, 1))
    else:
        times = np.array([tpool[i] for i in rng.integers(0, len(tpool), n)], np.int64).reshape(n, d)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 2, 3], np.int64), n)
    return keys, vals, times, diffs


def _leq(a, b):
    return all(x <= y for x, y in zip(a, b))


def _check_batches(batches, workers, kk, kv, d, got: Counter):
    for s, b in enumerate(batches):
        assert b.times.shape == (b.n, d)
        assert b.keys.shape[0] == kk and b.vals.shape[0] == kv
        nk = b.keys.shape[1]
        assert b.koff.shape[0] == nk + 1 and b.koff[0] == 0 and b.koff[-1] == b.n
        assert (np.diff(b.koff) > 0).all()
        assert (b.diffs != 0).all()
        if nk:
            h = sortk.key_hashes(np.ascontiguousarray(b.keys), np.empty(nk, np.int64))
            assert np.array_equal(h, b.kh)
            assert ((h * workers) >> sortk.HASH_BITS == s).all()
            assert (np.diff(h) >= 0).all()
        rows = []
        for k in range(nk):
            key = tuple(b.keys[:, k].tolist())
            prev = None
            for r in range(b.koff[k], b.koff[k + 1]):
                row = (tuple(b.vals[:, r].tolist()), tuple(b.times[r].tolist()))
                assert prev is None or prev < row, (prev, row)  # ordered, no duplicates
                prev = row
                rows.append(((key, row[0], row[1]), int(b.diffs[r])))
        for r, dd in rows:
            got[r] += dd
        # distinct keys in one shard
        assert len({tuple(b.keys[:, k].tolist()) for k in range(nk)}) == nk


def _run(seed, workers, d, big=False, many_times=False):
    rng = np.random.default_rng(seed)
    kk, kv = int(rng.integers(1, 3)), int(rng.integers(0, 3))
    pool = WorkerPool(workers)
    try:
        bt = Batcher(kk, kv, d, workers)
        pending = Counter()
        epoch = 0
        lower = Antichain([(0,) * d])
        for step in range(8):
            # times from the current epoch on, rounds small
            # (many_times: more distinct times than a part is split by, Batcher's TIME_GROUPS)
            span = 40 if many_times else 3
            tpool = [tuple([epoch + int(rng.integers(0, 3))] + [int(rng.integers(0, span)) for _ in range(d - 1)])
                     for _ in range(int(rng.integers(100, 200)) if many_times else int(rng.integers(1, 5)))]
            parts = []
            for _ in range(int(rng.integers(0, 5))):
                n = int(rng.choice([1, 2, 5, 30, 200] + ([12_000, 40_000, 110_000] if big else [])))
                mode = "one" if rng.random() < 0.6 else "many"
                parts.append(_part(rng, kk, kv, d, n, mode, tpool))
            if rng.random() < 0.2:
                parts.append((np.zeros((kk, 0), np.int64), np.zeros((kv, 0), np.int64),
                              np.zeros((0, d), np.int64), np.zeros(0, np.int64)))
            for keys, vals, times, diffs in parts:
                for i in range(len(diffs)):
                    pending[(tuple(keys[:, i].tolist()), tuple(vals[:, i].tolist()),
                             tuple(times[i].tolist()))] += int(diffs[i])
            bt.push(parts, pool.run)
            # the frontier: an antichain of 1 or 2 times past lower
            epoch += int(rng.integers(0, 2))
            ups = [tuple([epoch + 1] + [0] * (d - 1))]
            if d > 1 and rng.random() < 0.5:
                ups = [tuple([epoch] + [int(rng.integers(1, 3))] + [0] * (d - 2)), tuple([epoch + 1] + [0] * (d - 1))]
            upper = Antichain(ups)
            if step == 7:
                upper = Antichain()  # closed: everything
            batches = bt.seal(lower, upper, pool.run)
            assert len(batches) == workers
            got = Counter()
            _check_batches(batches, workers, kk, kv, d, got)
            want = Counter()
            for (k, v, t), dd in pending.items():
                if not any(_leq(u, t) for u in upper.elements):
                    want[(k, v, t)] += dd
            for r in want:
                pending[r] -= want[r]
            want = Counter({r: x for r, x in want.items() if x})
            pending = Counter({r: x for r, x in pending.items() if x})
            assert got == want, (seed, workers, d, step)
            lower = upper
    finally:
        pool.shutdown()


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_batcher_seals_match_the_model(seed, workers, d):
    _run(seed, workers, d)


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("seed", range(2))
def test_batcher_large_parts_take_the_bucket_and_parallel_paths(seed, workers):
    _run(100 + seed, workers, 2, big=True)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_batcher_parts_of_many_times(seed, workers, d):
    """Parts holding more times than the seal splits by time (the in-advance mask path) and parts of a
    few times each (split by a counting sort), mixed in one buffer."""
    _run(200 + seed, workers, d, many_times=True)
