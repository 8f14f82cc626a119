"""Review s25: checks of the change ba214f0..d0f1e6d (small formation, back-edge consolidation, antichain
builders, seeded loop restarts, read-only user columns, diff limits). Seeded and short."""
import sys
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
import kpgnb.engine.dataflow as D
from kpgnb.engine import batch as B
from kpgnb.engine.columns import UpdateBatch
from kpgnb.engine.inputs import diffs_array
from kpgnb.engine.kernels import sort as sortk
from kpgnb.engine.lattice import Antichain, antichain_of
from kpgnb.engine.operators.basic import _consolidated
from kpgnb.engine.scope import enter, next_round


def test_small_formation_matches_distribution(monkeypatch):
    rng = np.random.default_rng(25)
    orig = sortk.key_hashes
    for trial in range(80):
        W, kk, kv, d = (int(rng.integers(1, 9)), int(rng.integers(1, 4)), int(rng.integers(0, 3)),
                        int(rng.integers(1, 4)))
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.choice([0, 1, 2, 5, 50, 700]))
            parts.append((rng.integers(0, 6, (kk, n)), rng.integers(0, 3, (kv, n)), rng.integers(0, 3, (n, d)),
                          rng.integers(-2, 3, n)))
        if trial % 4 == 0:  # few distinct hashes: equal hashes must stay in one shard
            def few(keys, out, lo=0, hi=None):
                orig(keys, out, lo, hi)
                hi = keys.shape[1] if hi is None else hi
                out[lo:hi] &= ~((1 << 37) - 1)
                return out
            monkeypatch.setattr(sortk, "key_hashes", few)
        small = B.form_parts(parts, W)
        monkeypatch.setattr(B, "SMALL_ROWS", 0)
        dist = B.form_parts(parts, W)
        monkeypatch.undo()
        assert len(small) == len(dist) == W
        for s in range(W):
            for x, y in zip(small[s], dist[s]):
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), (trial, s)


def test_back_edge_consolidation_is_exact():
    rng = np.random.default_rng(26)
    for _ in range(100):
        k, d = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        parts, ref = [], Counter()
        for _ in range(int(rng.integers(2, 5))):
            n = int(rng.integers(0, 30))
            data, t, df = rng.integers(0, 3, (k, n)), rng.integers(0, 3, (n, d)), rng.integers(-2, 3, n)
            parts.append(UpdateBatch(data, t, df))
            for i in range(n):
                ref[(tuple(data[:, i]), tuple(t[i]))] += int(df[i])
        out = _consolidated(parts)
        got = Counter()
        for i in range(len(out)):
            got[(tuple(out.data[:, i]), tuple(out.times[i]))] += int(out.diffs[i])
        assert got == Counter({a: b for a, b in ref.items() if b}) and (out.diffs != 0).all()


def test_directly_built_antichains_are_canonical():
    rng = np.random.default_rng(27)
    for _ in range(1500):
        n, d = int(rng.integers(0, 12)), int(rng.integers(1, 5))
        m = rng.integers(0, 3, (n, d))
        if n and rng.random() < 0.3:
            m = np.concatenate([m, m])
        a = antichain_of(m)
        assert a.elements == Antichain(map(tuple, m.tolist())).elements
        for r in (1, 2):
            assert enter(a, r).elements == Antichain(e + (0,) * r for e in a.elements).elements
        for mr in (None, 1, 2, 3):
            assert next_round(a, mr).elements == Antichain(
                e[:-1] + (e[-1] + 1,) for e in a.elements if mr is None or e[-1] + 1 < mr).elements
        c = antichain_of(rng.integers(0, 3, (int(rng.integers(0, 5)), d)))
        ref = Antichain(list(a.elements) + list(c.elements)).elements
        assert a.meet(c).elements == ref and c.meet(a).elements == ref


def test_seeded_loop_restart_equals_restart_from_top(monkeypatch):
    """Every settle of a graph with a seeded loop gives the frontiers a restart from the empty frontier
    gives (the greatest fixed point)."""
    sys.path.insert(0, "tests")
    import test_attack_engine_nested as T
    orig = D.Graph._settle
    seen = {"checks": 0, "diffs": []}

    def checked(self):
        orig(self)
        if getattr(self, "_in_check", False) or not any(op._back is not None for op in self.ops):
            return
        got = [op.out_frontier.elements for op in self.ops]
        saved = [(op._back, op._stale) for op in self.ops]
        self._in_check = True
        try:
            for op in self.ops:
                op._back, op.out_frontier, op._stale = None, D._EMPTY, True
            self._plan = lambda: None
            orig(self)
            want = [op.out_frontier.elements for op in self.ops]
        finally:
            del self._plan
            for op, (b, s) in zip(self.ops, saved):
                op._back, op._stale = b, s
            self._in_check = False
        seen["checks"] += 1
        if got != want:
            seen["diffs"].append([(op.kind, g, w) for op, g, w in zip(self.ops, got, want) if g != w][:3])
    monkeypatch.setattr(D.Graph, "_settle", checked)
    for i, p in enumerate(T.programs(12, 4321)):
        T.run_uneven(p, 4321 + i, workers=1 + i % 3, steps=6)
    assert seen["checks"] > 0 and not seen["diffs"], seen["diffs"][:3]


def test_user_function_that_writes_never_changes_what_siblings_see():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["x", "y"], dtypes={"y": "float64"})
        a.insert({"x": np.arange(40), "y": np.arange(40) / 2})
        calls = []

        def bump(x, y):
            calls.append(len(x))
            x += 100
            y *= 3
            return {"x": x, "y": y}
        with eng.dataflow("d") as df:
            c = df.input("a")
            w = c.map(bump).view("w")
            f = c.filter(lambda x: x < 1000).view("f")
            plain = c.view("plain")
        a.advance_to(1)
        eng.wait(w), eng.wait(f), eng.wait(plain)
        assert sorted(plain.to_pandas().x) == list(range(40))
        assert sorted(f.to_pandas().x) == list(range(40))
        assert sorted(w.to_pandas().x) == list(range(100, 140))
        assert sorted(w.to_pandas().y) == [3 * i / 2 for i in range(40)]


def test_diffs_below_the_limit_are_accepted():
    """diffs_array promises 'magnitude below 2**62' but compares through float64, so the int64 values just
    below 2**62 (which round up to 2.0**62) are refused with a message saying they are not below it."""
    assert diffs_array(np.array([2 ** 62 - 1, -(2 ** 62 - 1)], np.int64), 2).tolist() == [2 ** 62 - 1, -(2 ** 62 - 1)]
    assert diffs_array([2 ** 62 - 1], 1).tolist() == [2 ** 62 - 1]
    with pytest.raises(kp.SchemaError):
        diffs_array([2 ** 62], 1)
