"""Session 28 attack: tests written from the public documentation only (README, DESIGN.md), at worker
counts 1..7, on data shapes and lifecycles the other suites do not try.

The bug it found (a dataflow installed late was fed an input's or export's uncompacted history: a row
inserted and removed before the install reached its functions as +1 and -1) is fixed; its tests stay.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs


def _slow(**cols):
    """A map that takes a while: the dataflow running it lags behind the input (holding its compaction)."""
    import time
    time.sleep(0.3)
    return cols


# -- late install: "A dataflow installed late starts from its inputs' current contents" ---------------------

def _late_map(workers, reader):
    """An input gets a row that is removed again one epoch later; a dataflow installed after that runs a
    validating map. ``reader``: another dataflow reads the input (and has not caught up yet)."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["v"], rows=[(1,)])
        a.advance_to(1)
        if reader:
            with eng.dataflow("other") as df:
                df.input("a").map(lambda v: _slow(v=v)).count(by=[]).view("o")
        a.insert([(-1,)])
        a.advance_to(2)
        a.remove([(-1,)])
        a.advance_to(3)          # the input now holds (1,) only, and has since epoch 2

        def check(v):
            if (v < 0).any():
                raise ValueError(f"negative value in {v.tolist()}")
            return {"v": v}
        with eng.dataflow("late") as df:
            x = df.input("a").map(check).view("x")
        eng.wait(x, timeout=60)
        return sorted(map(tuple, x.to_pandas().values.tolist()))


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_late_install_without_other_readers_sees_current_contents(workers):
    assert _late_map(workers, reader=False) == [(1,)]


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_late_install_with_a_lagging_reader_sees_current_contents(workers):
    assert _late_map(workers, reader=True) == [(1,)]


@pytest.mark.parametrize("workers", [1, 3])
def test_late_sssp_does_not_see_a_removed_negative_weight(workers):
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 4), (1, 2, 1)])
        sources = eng.input("sources", ["source"], rows=[(0,)])
        edges.advance_to(1)
        sources.advance_to(1)
        with eng.dataflow("degree") as df:  # another dataflow reading the edges
            df.input("edges").map(lambda src, dst, w: _slow(src=src, dst=dst, w=w)).count(by="src").view("deg")
        edges.insert([(1, 2, -5)])           # a bad weight, corrected in the next epoch
        edges.advance_to(2)
        sources.advance_to(2)
        edges.remove([(1, 2, -5)])
        edges.advance_to(3)
        sources.advance_to(3)
        with eng.dataflow("paths") as df:
            d = graphs.sssp(df.input("edges"), df.input("sources")).view("dist")
        eng.wait(d, timeout=60)
        assert sorted(map(tuple, d.to_pandas().values.tolist())) == [(0, 0, 0), (0, 1, 4), (0, 2, 5)]


def test_late_inspect_sees_only_current_contents():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["v"], rows=[(1,)])
        a.advance_to(1)
        with eng.dataflow("other") as df:
            df.input("a").map(lambda v: _slow(v=v)).count(by=[]).view("o")
        a.insert([(7,)])
        a.advance_to(2)
        a.remove([(7,)])
        a.advance_to(3)
        seen = Counter()

        def record(cols, times, diffs):
            for v, d in zip(cols["v"].tolist(), diffs.tolist()):
                seen[v] += d
                seen[("updates", v)] += 1
        with eng.dataflow("late") as df:
            x = df.input("a").inspect(record).view("x")
        eng.wait(x, timeout=60)
        assert seen[("updates", 7)] == 0, seen


@pytest.mark.parametrize("workers", [1, 3])
def test_late_use_of_export_sees_only_current_contents(workers):
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["v"], rows=[(1,)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").distinct().export("D")
        with eng.dataflow("other") as df:
            df.use("D").as_collection().map(lambda v: _slow(v=v)).view("o")
        a.insert([(-1,)])
        a.advance_to(2)
        a.remove([(-1,)])
        a.advance_to(3)
        # D is current (its producer caught up) while "other" still holds its compaction back: the late
        # dataflow starts at epoch 2, when -1 had come and gone (had D lagged, -1 would be D's history
        # after the start, which the map must see)
        eng.wait("p", timeout=60)
        seen = []

        def record(v):
            seen.extend(v.tolist())
            return {"v": v}
        with eng.dataflow("late") as df:
            x = df.use("D").as_collection().map(record).view("x")
        eng.wait(x, timeout=60)
        assert sorted(map(tuple, x.to_pandas().values.tolist())) == [(1,)]
        assert -1 not in seen, seen


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5, 7])
def test_odd_values_through_reductions_at_every_worker_count(workers):
    """int64 extremes, NaN/-0.0/inf, empty, unicode and long strings, bools: reductions by value, the same
    answer at every worker count (README: 'Results are identical for every W')."""
    rows = [(2**63 - 1, "", float("nan"), True), (-2**63, "é", -0.0, False), (0, "x" * 10000, float("inf"), True),
            (0, "", float("-inf"), False), (1, "\u0000a", 0.0, True)]
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k", "s", "f", "b"], dtypes={"k": "int64", "s": "str", "f": "float64", "b": "bool"})
        x.insert(rows)
        x.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("x")
            mn = c.min(by="k", col="f").view("mn")
            mx = c.max(by="s", col="f").view("mx")
            am = c.argmin(by="b", col="f").view("am")
            cnt = c.count(by="s").view("cnt")
        for v in (mn, mx, am, cnt):
            eng.wait(v, timeout=60)

        def rows_of(v):
            out = []
            for r in v.to_pandas().itertuples(index=False):
                r = tuple(z.item() if hasattr(z, "item") else z for z in r)
                out.append(tuple("nan" if isinstance(z, float) and z != z else z for z in r))
            return sorted(out, key=repr)
        def srt(rs):
            return sorted(rs, key=repr)
        assert rows_of(mn) == srt([(-2**63, 0.0), (0, float("-inf")), (1, 0.0), (2**63 - 1, "nan")])
        assert rows_of(mx) == srt([("\u0000a", 0.0), ("", "nan"), ("x" * 10000, float("inf")), ("é", 0.0)])
        assert rows_of(am) == srt([(False, 0, "", float("-inf")), (True, 1, "\u0000a", 0.0)])
        assert rows_of(cnt) == srt([("\u0000a", 1), ("", 2), ("x" * 10000, 1), ("é", 1)])


def _late_join(workers, reader: bool, big: bool):
    """As ``_late_map``, through a join that reads the input's own arrangement (keyed by its one column):
    the removed row must not meet the other side in a late dataflow. ``big``: the row is inserted with
    20,000 others and removed alone, so the two batches do not merge (no lagging reader needed)."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        b = eng.input("b", ["k", "w"], rows=[(-1, 10), (1, 11)])
        a.advance_to(1), b.advance_to(1)
        if reader:
            with eng.dataflow("other") as df:
                df.input("a").map(lambda k: _slow(k=k)).count(by=[]).view("o")
        a.insert({"k": np.arange(-1, -20002 if big else -2, -1)})
        a.advance_to(2), b.advance_to(2)
        a.remove([(-1,)])
        a.advance_to(3), b.advance_to(3)

        def check(k, w):
            if (k == -1).any():
                raise ValueError("the join paired the removed row -1")
            return {"k": k, "w": w}
        with eng.dataflow("late") as df:
            j = df.input("a").join(df.input("b"), on="k").map(check).view("j")
        eng.wait(j, timeout=60)
        return sorted(map(tuple, j.to_pandas().values.tolist()))


@pytest.mark.parametrize("workers,reader,big", [(1, True, False), (3, True, False), (1, False, True),
                                                (2, False, True)])
def test_late_join_pairs_only_current_rows(workers, reader, big):
    assert _late_join(workers, reader, big) == [(1, 11)]


@pytest.mark.parametrize("workers", [1, 2])
def test_late_map_of_big_batches_sees_current_contents(workers):
    """A row inserted with 20,000 others and removed alone (two batches that do not merge yet) reaches a
    late map as nothing: no lagging reader needed."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["v"], rows=[(1,)])
        a.advance_to(1)
        a.insert({"v": np.arange(-1, -20002, -1)})
        a.advance_to(2)
        a.remove([(-1,)])
        a.advance_to(3)
        seen = []
        with eng.dataflow("late") as df:
            x = df.input("a").inspect(lambda cols, times, diffs: seen.extend(cols["v"][cols["v"] == -1].tolist())).view("x")
        eng.wait(x, timeout=60)
        assert seen == [] and len(x.to_pandas()) == 20001
