"""A reduce's pending work: the (key, time) pairs beyond the input frontier where its output may still
change. New pending work is merged into what is held (``kernels.reduce.merge_pending``: a linear merge
of two lists in arrangement order) instead of concatenating and sorting both; checked against that
sort on random lists, through the fallback for keys with many times, and through reduces whose pending
work spans many loop rounds, against a from-scratch reference at W = 1, 2, 3."""
from __future__ import annotations

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.batch import form_arrays
from kpgnb.engine.kernels import reduce as rk
from kpgnb.engine.operators.reduce import ReduceOp


def _sorted_work(keys: np.ndarray, times: np.ndarray) -> tuple:
    """Distinct (key, time) pairs in arrangement order, a key's rows adjacent (the sort the merge saves)."""
    n = keys.shape[1]
    kh, k, koff, _, t, _ = form_arrays(np.ascontiguousarray(keys), np.zeros((0, n), np.int64),
                                       np.ascontiguousarray(times), np.ones(n, np.int64))
    rep = np.diff(koff)
    return np.repeat(kh, rep), np.ascontiguousarray(np.repeat(k, rep, axis=1)), np.ascontiguousarray(t)


def _random_work(rng, n, kk, d, nkeys, ntimes):
    return _sorted_work(rng.integers(0, nkeys, (kk, n)).astype(np.int64),
                        rng.integers(0, ntimes, (n, d)).astype(np.int64))


def _pairs(keys, times) -> list:
    return sorted(zip(map(tuple, keys.T.tolist()), map(tuple, times.tolist())))


def test_merge_pending_is_the_sorted_union():
    rng = np.random.default_rng(3)
    for trial in range(400):
        kk, d = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        nkeys, ntimes = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        a = _random_work(rng, int(rng.integers(0, 60)), kk, d, nkeys, ntimes)
        b = _random_work(rng, int(rng.integers(0, 60)), kk, d, nkeys, ntimes)
        kh, keys, times, ok = rk.merge_pending(*a, *b)
        assert ok
        ref = _sorted_work(np.concatenate([a[1], b[1]], axis=1), np.concatenate([a[2], b[2]], axis=0))
        # the same keys in the same (arrangement) order, row for row, and the same (key, time) pairs
        assert np.array_equal(kh, ref[0]) and np.array_equal(keys, ref[1]), trial
        assert _pairs(keys, times) == _pairs(ref[1], ref[2]), trial


def test_merge_pending_leaves_keys_with_many_times_to_the_sort():
    """One key with more pairs of times to compare than MERGE_GROUP_PAIRS: the kernel declines (the
    operator then sorts), rather than comparing every pair."""
    many = int(np.sqrt(rk.MERGE_GROUP_PAIRS)) + 2
    keys = np.zeros((1, many), np.int64)
    a = _sorted_work(keys, np.arange(many, dtype=np.int64).reshape(-1, 1))
    b = _sorted_work(keys, np.arange(many, 2 * many, dtype=np.int64).reshape(-1, 1))
    *_, ok = rk.merge_pending(*a, *b)
    assert not ok


def _program(df):
    """Pending work across rounds and epochs: a min over a loop whose candidates arrive at several
    rounds per key (shortest hop counts), and a count of the result."""
    e = df.input("e")
    r = df.input("r")
    start = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})
    dist = start.iterate(lambda d: d.join(e, left_on="node", right_on="src")
                         .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                         .concat(start).min(by="node", col="dist"))
    return dist, dist.count(by="dist")


def _reference(edges: set, roots: set, n: int):
    dist = {x: 0 for x in roots}
    frontier = set(roots)
    d = 0
    while frontier:
        d += 1
        frontier = {y for (x, y) in edges if x in frontier and y not in dist}
        for y in frontier:
            dist[y] = d
    counts: dict = {}
    for v in dist.values():
        counts[v] = counts.get(v, 0) + 1
    return sorted(dist.items()), sorted(counts.items())


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("sort_only", [False, True])
def test_reduces_with_pending_work_match_the_reference(monkeypatch, workers, sort_only):
    """Random edge streams with insertions and retractions, several edges an epoch; with the merge, and
    with every merge declined (``sort_only``: the sort path alone), the same right answers."""
    if sort_only:
        real = rk.merge_pending
        monkeypatch.setattr(rk, "merge_pending", lambda *a: (*real(*a)[:3], False))
    calls = []
    add = ReduceOp._add_pending
    monkeypatch.setattr(ReduceOp, "_add_pending", lambda self, *a: (calls.append(1), add(self, *a))[1])
    rng = np.random.default_rng(11 + workers)
    n = 24
    edges = {(int(a), int(b)) for a, b in rng.integers(0, n, (40, 2))}
    roots = {0, 1}
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"], rows=sorted(edges))
        ri = eng.input("r", ["node"], rows=[(x,) for x in sorted(roots)])
        with eng.dataflow("p") as df:
            dist, counts = _program(df)
            vd, vc = dist.view("d"), counts.view("c")
        for t in range(1, 16):
            ups, diffs = [], []
            for _ in range(int(rng.integers(1, 6))):
                k = (int(rng.integers(n)), int(rng.integers(n)))
                if k in edges:
                    edges.discard(k)
                    ups.append(k)
                    diffs.append(-1)
                else:
                    edges.add(k)
                    ups.append(k)
                    diffs.append(1)
            ei.update(ups, diffs)
            ei.advance_to(t)
            ri.advance_to(t)
            eng.wait(vd)
            eng.wait(vc)
            want_d, want_c = _reference(edges, roots, n)
            assert sorted(map(tuple, vd.to_pandas().values.tolist())) == want_d, t
            assert sorted(map(tuple, vc.to_pandas().values.tolist())) == want_c, t
    assert calls  # pending work was held and added to
