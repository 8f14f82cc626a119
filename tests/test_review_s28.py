"""Session 28 review: properties of the change set's kernels and predicates (merge_whole, normalize_groups,
may_meet / Batch.collapses, Antichain.join), and lazy loop rounds against eager stepping."""
from __future__ import annotations

import random

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.batch import Batch, Merger, may_meet, merge_arrays, merged
from kpgnb.engine.kernels.merge import normalize_groups
from kpgnb.engine.lattice import Antichain, lub, rep


def _batch(rng, kk, kv, d, n, tmax=5):
    keys = rng.integers(0, 4, (kk, n)).astype(np.int64)
    vals = rng.integers(0, 3, (kv, n)).astype(np.int64)
    times = rng.integers(0, tmax, (n, d)).astype(np.int64)
    diffs = rng.choice([-2, -1, 1, 2], n).astype(np.int64)
    return Batch.form(keys, vals, times, diffs, Antichain([(0,) * d]), Antichain([(tmax,) * d]))


def _frontier(r, d, tmax=5):
    return Antichain([tuple(r.randint(0, tmax) for _ in range(d)) for _ in range(r.randint(1, 3))])


def _updates(arrays, frontier=None):
    kh, keys, koff, vals, times, diffs = arrays
    out = {}
    for i in range(len(kh)):
        for r in range(koff[i], koff[i + 1]):
            t = tuple(times[r].tolist())
            k = (tuple(keys[:, i].tolist()), tuple(vals[:, r].tolist()), rep(t, frontier) if frontier else t)
            out[k] = out.get(k, 0) + int(diffs[r])
    return {k: v for k, v in out.items() if v}


def test_merge_whole_matches_the_resumable_merger():
    rng = np.random.default_rng(0)
    for it in range(1500):
        r = random.Random(it)
        kk, kv, d = r.choice([0, 1, 2]), r.choice([0, 1, 2]), r.choice([1, 2, 3])
        a, b = _batch(rng, kk, kv, d, r.randint(0, 12)), _batch(rng, kk, kv, d, r.randint(0, 12))
        F = _frontier(r, d) if r.random() < 0.8 else Antichain()
        m = Merger(a.arrays, b.arrays, F.matrix(d) if F.elements else None)  # the resumable merge
        m.work(None)
        want = m.result
        got = merged(a, b, F)
        assert all(np.array_equal(x, y) for x, y in zip(merge_arrays(a.arrays, b.arrays, F.matrix(d) if F.elements else None)[0], got.arrays))
        for x, y in zip(want, got.arrays):
            assert x.shape == y.shape and np.array_equal(x, y), (it, kk, kv, d, F)
        assert got.balance == 2 * int((got.diffs > 0).sum()) - got.n
        expect = _updates(a.arrays, F if F.elements else None)
        for k, v in _updates(b.arrays, F if F.elements else None).items():
            expect[k] = expect.get(k, 0) + v
        assert _updates(got.arrays) == {k: v for k, v in expect.items() if v} and got.n == len(_updates(got.arrays))


def test_normalize_groups_matches_reference():
    rng = np.random.default_rng(1)
    for it in range(1500):
        kv, d = it % 3, 1 + it % 3
        n = int(rng.integers(0, 16))
        off = np.concatenate([[0], np.sort(rng.integers(0, n + 1, int(rng.integers(0, 5)))), [n]]).astype(np.int64)
        vals = rng.integers(0, 2, (kv, n)).astype(np.int64)
        times = rng.integers(0, 2, (n, d)).astype(np.int64)
        diffs = rng.choice([-1, 1], n).astype(np.int64)
        ref = []
        for p in range(len(off) - 1):
            acc = {}
            for r in range(off[p], off[p + 1]):
                k = (tuple(vals[:, r].tolist()), tuple(times[r].tolist()))
                acc[k] = acc.get(k, 0) + int(diffs[r])
            ref.append(sorted((k, v) for k, v in acc.items() if v))
        o, v, t, df = off.copy(), vals.copy(), times.copy(), diffs.copy()
        w = normalize_groups(o, v, t, df)
        got = [[((tuple(v[:, r].tolist()), tuple(t[r].tolist())), int(df[r])) for r in range(o[p], o[p + 1])]
               for p in range(len(off) - 1)]
        assert got == ref and o[-1] == w, it


def test_may_meet_is_sound_for_compacted_batches_and_multi_element_frontiers():
    """may_meet False => no two updates of one (key, value) share a time once advanced to the frontier."""
    rng = np.random.default_rng(2)
    for it in range(6000):
        r = random.Random(it)
        d, kk, kv = r.choice([1, 2, 3]), r.choice([0, 1]), r.choice([0, 1])
        bs = []
        for _ in range(r.randint(1, 3)):
            b = _batch(rng, kk, kv, d, r.randint(1, 10))
            if r.random() < 0.6:  # a batch compacted to some since
                b = merged(b, Batch.empty(kk, kv, d, b.upper, b.upper), _frontier(r, d))
            if len(b):
                bs.append(b)
        F = _frontier(r, d)
        if not bs or may_meet(bs, F):
            continue
        seen = set()
        for x in bs:
            for i in range(x.nkeys):
                for row in range(x.koff[i], x.koff[i + 1]):
                    k = (tuple(x.keys[:, i].tolist()), tuple(x.vals[:, row].tolist()),
                         rep(tuple(x.times[row].tolist()), F))
                    assert k not in seen, (it, F, [(y.since, y.time_range) for y in bs])
                    seen.add(k)


def test_antichain_join_is_the_minimal_pairwise_lubs():
    for it in range(3000):
        r = random.Random(it)
        d = r.choice([1, 2, 3])
        a = _frontier(r, d) if r.random() < 0.9 else Antichain()
        b = (a if r.random() < 0.1 else _frontier(r, d)) if r.random() < 0.9 else Antichain()
        ref = Antichain()
        for x in a.elements:
            for y in b.elements:
                ref.insert(lub(x, y))
        assert a.join(b).elements == ref.elements, (a, b)


def _loop_run(monkeypatch, lazy, seed, nested):
    from kpgnb.engine.operators.arrange import ArrangeOp
    from kpgnb.engine.operators.join import JoinOp
    from kpgnb.engine.operators.reduce import ReduceOp
    for c in (ArrangeOp, JoinOp, ReduceOp):
        monkeypatch.setattr(c, "lazy_rounds", lazy)
    rng = np.random.default_rng(seed)
    n, out = 24, []
    with kp.Engine(workers=2) as eng:
        ei = eng.input("e", ["src", "dst"], rows=[(int(rng.integers(n)), int(rng.integers(n))) for _ in range(30)])
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            e = df.input("e")
            if nested:
                v = graphs.scc(e).view("v")
            else:
                v = df.input("r").iterate(lambda r: r.join(e.enter(r.scope), left_on="node", right_on="src")
                                          .map(lambda dst: {"node": dst}).concat(r).distinct()).view("v")
        for t in range(1, 8):
            ups = [(int(rng.integers(n)), int(rng.integers(n))) for _ in range(3)]
            ei.update(ups, [1, 1, -1] if t % 2 else [1, 1, 1])
            ei.advance_to(t)
            ri.advance_to(t)
            if t % 2:
                eng.wait(v, timeout=120)
                live = sorted((a["name"], a["live"]) for a in eng.arrangements(live=True) if a["dataflow"] == "p")
                out.append((t, sorted(map(tuple, v.to_pandas().values.tolist())), live))
    return out


@pytest.mark.parametrize("nested", [False, True])
def test_lazy_rounds_match_eager_steps_at_every_epoch(monkeypatch, nested):
    """Same answers, and the same live (logically compacted) records in every loop trace at each epoch."""
    for seed in range(2):
        assert _loop_run(monkeypatch, True, seed, nested) == _loop_run(monkeypatch, False, seed, nested)
