"""Session 49 fixes, each with the test that failed before it (the attack rounds' own tests are in
tests/test_attack_s49_*.py)."""
import threading

import numpy as np
import pytest

import kpgnb as kp

WAIT = 60
M = (1 << 61) + (1 << 60)  # 0.75 * 2**62: one row may hold it, two summed pass the bound


def _rows(view):
    return sorted(map(tuple, view.to_pandas().itertuples(index=False)))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_of_equal_updates_fails_on_its_total_only(workers):
    """Four updates of one row, +M +M -M -M, net 0: accepted in any order (the partial sum 2M is carried,
    not refused); +M +M +M -M -M nets M, also accepted; +M +M (2M) fails the input, naming the bound."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("a").view("v")
        a.update([(1,)] * 4, [M, M, -M, -M])
        a.update([(2,)] * 5, [M, M, M, -M, -M])
        a.advance_to(1)
        eng.wait(v, timeout=WAIT)
        got = v.to_pandas(diffs=True)
        assert got["k"].tolist() == [2] and got["diff"].tolist() == [M]
        with pytest.raises(kp.UsageError, match="diffs=True"):  # (M rows, listed one by one: refused)
            v.to_pandas()
        a.update([(3,)] * 2, [M, M])
        with pytest.raises(kp.KpgnbError, match="2\\*\\*62"):
            a.advance_to(2)
            eng.wait(v, timeout=WAIT)


def test_sum_of_a_column_by_groups_positionally():
    """``c.sum("x", by="k")``: the first argument is the column when by= names the groups (it was refused
    as "by twice")."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "x"], rows=[(1, 2), (1, 3), (2, 5)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("a").sum("x", by="k").view("v")
            w = df.input("a").max("x", by=["k"]).view("w")
        eng.wait("d", timeout=WAIT)  # (both views)
        assert _rows(v) == [(1, 5), (2, 5)] and _rows(w) == [(1, 3), (2, 5)]


def test_a_follower_whose_stream_is_complete_ends_cleanly_when_the_engine_closes():
    """Every input closed, so the follower holds its last frame; the engine closing afterwards does not
    turn that end into an error (only a follower cut short raises EngineError)."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,)])
        with eng.dataflow("d") as df:
            v = df.input("a").view("v")
        f = v.follow(timeout=WAIT)
        a.close()
        eng.wait(v, timeout=WAIT)
    finally:
        eng.close()
    frames = list(f)
    assert sum(len(x) for x in frames) == 1


def test_a_follower_cut_short_by_close_yields_what_it_holds_then_raises():
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,)])
        with eng.dataflow("d") as df:
            v = df.input("a").view("v")
        a.advance_to(1)
        eng.wait(v, timeout=WAIT)
        f = v.follow(timeout=WAIT)
        sub = v.subscribe(lambda frame: None)
    finally:
        eng.close()
    assert next(f)["k"].tolist() == [1]
    with pytest.raises(kp.EngineError, match="closed"):
        next(f)
    sub.close()
    assert sub.error is None  # (a subscription just stops: nothing of the subscriber's failed)


def test_an_input_name_is_taken_while_its_rows_load_and_free_if_they_fail():
    """While ``eng.input(name, rows=...)`` reads its rows, the input is not there (no dataflow can read it)
    but its name is taken; if the rows fail, the name is free again."""
    started, go = threading.Event(), threading.Event()

    class Slow:
        def __array__(self, dtype=None, copy=None):
            started.set()
            go.wait(WAIT)
            raise ValueError("bad rows")

        def __len__(self):
            return 1

    with kp.Engine(workers=1) as eng:
        out = {}

        def load():
            try:
                eng.input("y", ["k"], rows={"k": Slow()})
            except Exception as e:  # noqa: BLE001 - inspected below
                out["error"] = e

        t = threading.Thread(target=load)
        t.start()
        assert started.wait(WAIT)
        try:
            assert "y" not in eng.inputs()
            with pytest.raises(kp.UsageError, match="being created"):
                eng.input("y", ["k"])
            with pytest.raises(kp.KpgnbError):
                with eng.dataflow("r") as df:
                    df.input("y").view("v")
        finally:
            go.set()
            t.join(WAIT)
        assert "error" in out
        y = eng.input("y", ["k"], rows=[(1,), (2,)])
        with eng.dataflow("r") as df:
            v = df.input("y").view("v")
        y.advance_to(1)
        eng.wait(v, timeout=WAIT)
        assert _rows(v) == [(1,), (2,)]


def test_int64_min_literal_still_a_value():
    """(Datalog) -9223372036854775808 is int64's least value, not an overflow, after the sign checks moved."""
    with kp.Engine(workers=1) as eng:
        prog = eng.datalog("q(-9223372036854775808).\nr(x) :- q(x).", name="p")
        eng.wait(prog["r"], timeout=WAIT)
        assert prog["r"].to_pandas().iloc[:, 0].tolist() == [np.iinfo(np.int64).min]


def _gated(eng):
    """A dataflow whose map holds the scheduler until released: epochs submitted meanwhile are processed
    as one batch."""
    entered, release = threading.Event(), threading.Event()
    g = eng.input("g", ["x"])

    def hold(x):
        if len(x):
            entered.set()
            release.wait(WAIT)
        return {"x": x}
    with eng.dataflow("gate") as df:
        df.input("g").map(hold).view("gv")
    g.insert([(1,)])
    g.advance_to(1)
    assert entered.wait(WAIT)
    return release


@pytest.mark.parametrize("workers", [1, 2])
def test_a_join_sums_large_products_of_one_key_exactly_where_they_meet(workers):
    """Epochs processed as one batch: l's (1, 1) holds 2**32 at epoch 0 and is retracted at 1, (1, 5)
    holds 3; r's (1, 2) arrives at 2 with 2**30. The products 2**62 and -2**62 meet at epoch 2 and cancel
    (summed exactly), leaving (1, 5, 2) with 3 * 2**30; a product that stays past the bound still fails."""
    with kp.Engine(workers=workers) as eng:
        l = eng.input("l", ["k", "a"])
        r = eng.input("r", ["k", "b"])
        with eng.dataflow("p") as df:
            v = df.input("l").join(df.input("r"), on="k").view("v")
        release = _gated(eng)
        try:
            l.update([(1, 1), (1, 5)], [2**32, 3])
            l.advance_to(1)
            r.advance_to(1)
            l.update([(1, 1)], [-2**32])
            l.advance_to(2)
            r.advance_to(2)
            r.update([(1, 2)], [2**30])
            l.advance_to(3)
            r.advance_to(3)
        finally:
            release.set()
        eng.wait(v, timeout=WAIT)
        got = v.to_pandas(diffs=True)
        assert list(map(tuple, got[["k", "a", "b", "diff"]].values.tolist())) == [(1, 5, 2, 3 * 2**30)]
        l.update([(1, 7)], [2**32])
        l.advance_to(4)
        r.advance_to(4)
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait(v, timeout=WAIT)
