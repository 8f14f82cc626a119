"""Attacks on dataflows through the public API: user functions that mutate their inputs, raise, or return
values of the wrong type; reads outside the kept history; followers of finished views; interrupts.

Tests named ``test_bug_*`` assert the documented behaviour for bugs the attack found (each failed before its
fix)."""
import _thread
import signal
import threading
import time

import numpy as np
import pytest
from numba import njit

import kpgnb as kp


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


@pytest.fixture(params=[1, 2], ids=["W1", "W2"])
def eng(request):
    e = kp.Engine(workers=request.param)
    yield e
    e.close()


# -- a user function mutating its input arrays must not change what other operators see ----------------------
def test_bug_map_mutating_its_input_does_not_corrupt_sibling_operators(eng):
    x = eng.input("x", ["a"], rows=[(1,), (2,), (3,)])
    x.advance_to(1)

    def bumps_in_place(a):
        a += 100
        return {"a": a}

    with eng.dataflow("d") as df:
        src = df.input("x").map(lambda a: {"a": a * 1})  # an unarranged stream with several readers
        bumped = src.map(bumps_in_place).view("bumped")
        plain = src.view("plain")
        doubled = src.concat(src).view("doubled")
    for view in (bumped, plain, doubled):
        eng.wait(view, timeout=30)
    assert rows(bumped) == [(101,), (102,), (103,)]
    assert rows(plain) == [(1,), (2,), (3,)]
    assert rows(doubled) == [(1,), (1,), (2,), (2,), (3,), (3,)]
    x.insert([(4,)])
    x.advance_to(2)
    eng.wait(plain, timeout=30)
    assert rows(plain) == [(1,), (2,), (3,), (4,)]


def test_bug_filter_mutating_its_input_does_not_change_the_rows_it_passes(eng):
    x = eng.input("x", ["a"], dtypes=["float64"], rows=[(1.0,), (2.0,)])
    x.advance_to(1)

    def keep_all_but_scribble(a):
        a[:] = -1.0
        return np.ones(len(a), bool)

    with eng.dataflow("d") as df:
        kept = df.input("x").map(lambda a: {"a": a + 0.0}).filter(keep_all_but_scribble).view("kept")
    eng.wait(kept, timeout=30)
    assert rows(kept) == [(1.0,), (2.0,)]


def test_map_mutating_input_read_from_an_input_or_arrangement_is_harmless(eng):
    """Held up: reading straight from an input or an imported arrangement, in-place writes stay local."""
    x = eng.input("x", ["a", "f"], ["int64", "float64"], rows=[(1, 1.0), (2, 2.0)])
    x.advance_to(1)
    with eng.dataflow("c") as df:
        df.input("x").count(by="a").export("counts")

    def scribble(a, f=None, count=None):
        a *= 7
        return {"a": a}

    with eng.dataflow("d") as df:
        m = df.input("x").map(scribble).view("m")
        side = df.input("x").view("side")
        m2 = df.use("counts").map(scribble).view("m2")
    for view in (side, m, m2):
        eng.wait(view, timeout=30)
    assert rows(side) == [(1, 1.0), (2, 2.0)]
    assert rows(m) == [(7,), (14,)] and rows(m2) == [(7,), (14,)]
    with eng.dataflow("late") as df:
        late = df.use("counts").view("late")
    eng.wait(late, timeout=30)
    assert rows(late) == [(1, 1), (2, 1)]


# -- reduce outputs must be values of the declared dtype ------------------------------------------------------
@njit
def _reduce_two(vals, counts):
    out = np.empty((1, 1), np.int64)
    out[0, 0] = 2
    return out, np.ones(1, np.int64)


@njit
def _reduce_unknown_string_id(vals, counts):
    out = np.empty((1, 1), np.int64)
    out[0, 0] = 10 ** 6
    return out, np.ones(1, np.int64)


def test_bug_reduce_bool_output_of_2_is_refused_or_normalised(eng):
    """A reduce declared out={'flag': 'bool'} returning 2 shows True in the view, but a join on flag with
    True finds nothing: the bool column holds a value that is neither False nor True."""
    t = eng.input("t", ["g", "x"], rows=[(1, 1), (2, 2)])
    f = eng.input("f", ["flag"], ["bool"], rows=[(True,)])
    t.advance_to(1)
    f.advance_to(1)
    with eng.dataflow("d") as df:
        r = df.input("t").reduce(by="g", fn=_reduce_two, columns=["x"], out={"flag": "bool"})
        v = r.view("v")
        j = r.join(df.input("f"), on="flag").view("j")
    try:
        eng.wait(v, timeout=30)
        eng.wait(j, timeout=30)
    except kp.DataflowError:
        return  # refusing the value is fine too
    assert rows(v) == [(1, True), (2, True)]
    assert rows(j) == [(True, 1), (True, 2)]  # (a join's columns: the key, then the left's others)


def test_bug_reduce_str_output_of_an_unknown_id_is_a_clear_error(eng):
    t = eng.input("t", ["g", "x"], rows=[(1, 1)])
    t.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("t").reduce(by="g", fn=_reduce_unknown_string_id, columns=["x"], out={"s": "str"}).view("v")
    with pytest.raises(kp.KpgnbError):
        eng.wait(v, timeout=30)
        v.to_pandas()


# -- followers -----------------------------------------------------------------------------------------------
def test_bug_follow_of_a_view_whose_inputs_are_closed_ends(eng):
    """README: follow() 'ends when the view is dropped or all its inputs are closed'. Started after the
    inputs closed, it yields the contents and then hangs (TimeoutError here, forever without timeout)."""
    z = eng.input("z", ["a"], rows=[(1,)])
    z.close()
    with eng.dataflow("d") as df:
        v = df.input("z").view("v")
    eng.wait(v, timeout=30)
    items = list(v.follow(timeout=5))
    assert len(items) == 1
    assert items[0][["a", "diff"]].values.tolist() == [[1, 1]]


def test_follow_started_before_close_ends(eng):
    z = eng.input("z", ["a"], rows=[(1,)])
    z.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("z").view("v")
    eng.wait(v, timeout=30)
    f = v.follow(timeout=10)
    first = next(f)
    assert first["a"].tolist() == [1]
    z.insert([(2,)])
    z.close()
    rest = list(f)
    assert sum(len(r) for r in rest) == 1 and rest[-1]["a"].tolist() == [2]


# -- reading at= -------------------------------------------------------------------------------------------
def test_view_at_outside_history_is_compacted_or_not_final(eng):
    x = eng.input("x", ["k"])
    with eng.dataflow("h") as df:
        v = df.input("x").view("v", history=2)
    for e in range(1, 6):
        x.insert([e])
        x.advance_to(e + 1)
    eng.wait(v, timeout=30)
    assert rows(v, at=5) == [(1,), (2,), (3,), (4,), (5,)]
    assert rows(v, at=4) == [(1,), (2,), (3,), (4,)]
    for at in (3, 0, -1):
        with pytest.raises(kp.CompactedError, match="history"):
            v.to_pandas(at=at)
    for at in (6, 10 ** 20):
        with pytest.raises(kp.UsageError, match="not final"):
            v.to_pandas(at=at)


def test_bug_view_at_must_be_an_integer_epoch(eng):
    at = "3"
    x = eng.input("x", ["k"])
    with eng.dataflow("h") as df:
        v = df.input("x").view("v", history=3)
    for e in range(1, 6):
        x.insert([e])
        x.advance_to(e + 1)
    eng.wait(v, timeout=30)
    with pytest.raises((kp.UsageError, TypeError)) as info:
        v.to_pandas(at=at)
    assert "at= takes an epoch" in str(info.value)


# -- failures are contained and name the operator's line -------------------------------------------------------
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, StopIteration, MemoryError, ZeroDivisionError])
def test_user_function_raising_anything_fails_only_its_dataflow(eng, exc):
    x = eng.input("x", ["k"], rows=[(1,), (2,)])
    x.advance_to(1)
    with eng.dataflow("good") as df:
        g = df.input("x").count().view("g")

    def bad(k):
        if len(k):
            raise exc("from the user function")
        return {"k": k}

    with eng.dataflow("bad") as df:
        b = df.input("x").map(bad).view("b")  # the line the error must name
    with pytest.raises(kp.DataflowError, match=r"map \(defined at test_attack_api_dataflows.py:\d+: "
                                               r"b = df.input\(\"x\"\).map\(bad\)"):
        eng.wait(b, timeout=30)
    assert eng.dataflows()["bad"] == "failed"
    x.insert([(3,)])
    x.advance_to(2)
    eng.wait(g, timeout=30)
    assert rows(g) == [(3,)]
    eng.drop("bad")
    assert "bad" not in eng.dataflows()


def test_wrong_outputs_at_run_time_fail_the_dataflow_with_a_specific_message(eng):
    x = eng.input("x", ["a", "b"], rows=[(1, 1), (2, 2), (3, 3)])
    x.advance_to(1)
    cases = {
        "returns None": (lambda a, b: {"c": a} if len(a) == 0 else None, "must return a dict"),
        "extra column": (lambda a, b: {"c": a} if len(a) == 0 else {"c": a, "d": b}, r"returned columns \['c', 'd'\]"),
        "2-D column": (lambda a, b: {"c": a} if len(a) == 0 else {"c": np.stack([a, b], 1)}, "of shape"),
        "None values": (lambda a, b: {"c": a} if len(a) == 0 else {"c": [None] * len(a)},
                        r"column 'c' is int64 but row 0 holds None .*cannot hold nulls"),  # (a null, not "str values")
        "NaN into int": (lambda a, b: {"c": a} if len(a) == 0 else {"c": np.full(len(a), np.nan)},
                         "float64 values for column 'c'"),
    }
    for i, (name, (fn, match)) in enumerate(cases.items()):
        with eng.dataflow(f"m{i}") as df:
            v = df.input("x").map(fn).view("v")
        with pytest.raises(kp.DataflowError, match=match):
            eng.wait(v, timeout=30)
        eng.drop(f"m{i}")
    with eng.dataflow("f") as df:
        v = df.input("x").filter(lambda a, b: a % 2).view("v")
    with pytest.raises(kp.DataflowError, match="boolean array"):
        eng.wait(v, timeout=30)


def test_names_builders_and_exports(eng):
    x = eng.input("x", ["k", "v"], rows=[(1, 1)])
    x.advance_to(1)
    b1, b2 = eng.dataflow("same"), eng.dataflow("same")
    with b1 as df:
        v1 = df.input("x").view("v1")
    with pytest.raises(kp.UsageError, match="installed already"):
        with b2 as df:
            df.input("x").map(lambda k, v: {"k": k * 10}).view("v2")
    eng.wait(v1, timeout=30)
    assert rows(v1) == [(1, 1)]
    with eng.dataflow("e1") as df:
        df.input("x").arrange_by("k").export("ex")
    with pytest.raises(kp.UsageError, match="exported already"):
        with eng.dataflow("e2") as df:
            df.input("x").arrange_by("v").export("ex")
    assert "e2" not in eng.dataflows()
    eng.drop("e1")
    with pytest.raises(kp.SchemaError, match="no arrangement named 'ex'"):
        with eng.dataflow("u") as df:
            df.use("ex")
    with pytest.raises(kp.UnknownNameError):
        eng.trace("ex")
    eng.drop("same")
    for call in (lambda: v1.to_pandas(), lambda: len(v1), lambda: v1.follow(), lambda: eng.wait(v1, timeout=1)):
        with pytest.raises(kp.UsageError):
            call()


def test_interrupted_wait_cancels_and_interrupted_install_leaves_nothing():
    # Python's own Ctrl-C handler, which interrupt_main calls: a process started in the background of a
    # non-interactive shell inherits SIGINT ignored, and then interrupt_main does nothing
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("good") as df:
            g = df.input("x").count().view("g")
        eng.wait(g, timeout=30)

        # each slow step holds the scheduler until the test lets it go, after the interrupt: however late a
        # loaded machine runs the timer, the interrupt lands while the wait (or the install) is pending
        release = threading.Event()

        def slow(k):
            if len(k):
                release.wait(30)
            return {"k": k}

        with eng.dataflow("slow") as df:
            s = df.input("x").map(slow).view("s")
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                eng.wait(s, timeout=20)
        finally:
            timer.join()
            release.set()
        with pytest.raises(kp.Cancelled):
            eng.wait(s, timeout=20)
        eng.wait(g, timeout=20)
        assert rows(g) == [(2,)]
        eng.drop("slow")

        busy, release2 = threading.Event(), threading.Event()

        def slow2(k):
            if len(k):
                busy.set()
                release2.wait(30)
            return {"k": k}

        with eng.dataflow("slow2") as df:       # keeps the scheduler busy in a step
            df.input("x").map(slow2).view("s2")
        assert busy.wait(30)                    # (the install below then queues behind that step)
        timer = threading.Timer(0.2, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                with eng.dataflow("inst") as df:
                    df.input("x").view("iv")
        finally:
            timer.join()
            release2.set()
        with eng.dataflow("barrier") as df:     # commands run in order: the interrupted install came first
            df.input("x").view("b")
        assert "inst" not in eng.dataflows()
        with eng.dataflow("inst") as df:
            iv = df.input("x").view("iv")
        eng.wait(iv, timeout=20)
        assert rows(iv) == [(1,), (2,)]
    finally:
        eng.close()
        signal.signal(signal.SIGINT, old_handler)
