"""Session 37: ``form_tiny`` (formations of a few rows in one kernel call) against the bucketed formation
it stands in for, and the scheduler passing over dataflows that ran out of work (``Graph.quiet``)
without missing what reaches them."""
import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine import batch as B
from kpgnb.engine import dataflow as D
from kpgnb.engine.kernels import MAX_MULT
from kpgnb.engine.kernels import sort as sortk


def _both(parts, workers, time):
    """form_parts through form_tiny, and through the bucketed kernels (TINY_ROWS lowered below any n)."""
    tiny = B.form_parts(parts, workers, time=time)
    keep = B.TINY_ROWS
    B.TINY_ROWS = -1
    try:
        wide = B.form_parts(parts, workers, time=time)
    finally:
        B.TINY_ROWS = keep
    return tiny, wide


def _same(tiny, wide):
    assert len(tiny) == len(wide)
    for x, y in zip(tiny, wide):
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and u.shape == v.shape
            assert np.array_equal(u, v)


@pytest.mark.parametrize("seed", range(40))
def test_form_tiny_equals_the_bucketed_formation(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, B.TINY_ROWS + 1))
    kk, kv, d = int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
    # few distinct values, so that rows meet and cancel; int64 extremes order by sign
    pool = np.array([-(1 << 63), -3, -1, 0, 1, 2, (1 << 63) - 1], np.int64)
    keys = rng.choice(pool, (kk, n))
    vals = rng.choice(pool, (kv, n))
    times = rng.integers(0, 3, (n, d)).astype(np.int64)
    diffs = rng.integers(-2, 3, n).astype(np.int64)
    parts = [(keys, vals, times, diffs)]
    if n > 2 and seed % 3 == 0:  # several buffered parts formed together
        c = n // 2
        parts = [(keys[:, :c], vals[:, :c], times[:c], diffs[:c]), (keys[:, c:], vals[:, c:], times[c:], diffs[c:])]
    time = tuple(int(x) for x in rng.integers(0, 5, d)) if seed % 4 == 1 else None
    for workers in (1, 2, 3):
        _same(*_both(parts, workers, time))


def test_form_tiny_orders_colliding_hashes_by_key(monkeypatch):
    """With every key hashed alike (the hookable key_hashes, as the collision tests use), rows are in key
    order within the one hash, as the bucketed formation puts them."""
    monkeypatch.setattr(sortk, "key_hashes", lambda keys, out, lo=0, hi=None: out.__setitem__(
        slice(lo, keys.shape[1] if hi is None else hi), 7) or out)
    keys = np.array([[5, 3, 9, 3, 1]], np.int64)
    parts = [(keys, np.zeros((0, 5), np.int64), np.zeros((5, 1), np.int64), np.array([1, 1, 1, 1, -1]))]
    tiny, wide = _both(parts, 1, None)
    _same(tiny, wide)
    kh, k, koff, _, _, diffs = tiny[0]
    assert (kh == 7).all() and k[0].tolist() == [1, 3, 5, 9] and diffs.tolist() == [-1, 2, 1, 1]


def test_form_tiny_refuses_a_sum_reaching_the_multiplicity_bound():
    keys = np.array([[4, 4]], np.int64)
    vals, times = np.zeros((0, 2), np.int64), np.zeros((2, 1), np.int64)
    with pytest.raises(OverflowError):
        B.form_parts([(keys, vals, times, np.array([MAX_MULT - 1, 1]))], 1)
    (formed,) = B.form_parts([(keys, vals, times, np.array([MAX_MULT - 1, -1]))], 1)
    assert formed[5].tolist() == [MAX_MULT - 2]


def test_a_quiet_dataflow_is_passed_over_and_still_hears_its_inputs(monkeypatch):
    """Two dataflows on two inputs: changing one input runs its dataflow alone (the other ran out of work
    and nothing reached it), and each still sees every change to its own input, through an export too."""
    runs = []
    run = D.Graph.run

    def counted(self, rt):
        runs.append(self.ops[0].label().split(":")[0])  # (labels read "NAME: operator")
        return run(self, rt)
    monkeypatch.setattr(D.Graph, "run", counted)
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["x"], rows=[(1,)])
        b = eng.input("b", ["x"], rows=[(2,)])
        with eng.dataflow("A") as df:
            df.input("a").arrange_by("x").export("a_by_x")
        with eng.dataflow("B") as df:
            vb = df.input("b").count().view("vb")
        with eng.dataflow("C") as df:
            vc = df.use("a_by_x").as_collection().count().view("vc")
        a.advance_to(1)
        b.advance_to(1)
        eng.wait(vb)
        eng.wait(vc)
        for epoch in range(2, 12):
            runs.clear()
            a.insert([(epoch,)])
            a.advance_to(epoch)
            eng.wait(vc)
            assert "B" not in runs  # quiet: input b did not move
            assert "A" in runs and "C" in runs
            assert vc.to_pandas()["count"].tolist() == [epoch]
        b.remove([(2,)])
        b.insert([(7,), (8,)])
        b.advance_to(12)
        eng.wait(vb)
        assert vb.to_pandas()["count"].tolist() == [2]
