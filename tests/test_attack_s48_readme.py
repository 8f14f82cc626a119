"""Attack (session 48): README.md read sentence by sentence by a new user.

Sections 'Many threads, one engine', 'Errors', 'Arrangements, sharing and compaction', 'Datalog' and
'Memory modes for recursive graph queries'. Each concrete claim gets the smallest check through the public
API. Claims already checked by tests/test_attack_s45_docs.py and tests/test_attack_s46_readme.py are not
repeated.

The Errors section opens with: "Every error kpgnb raises on purpose derives from ``kp.KpgnbError``" and
"an argument of the wrong type ... is its subclass ``ArgumentTypeError``, also a ``TypeError``"; several
deliberate raises (with hand-written messages) break that.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb import graphs

T = 20  # generous bound on any wait that should end


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


def _exported(eng):
    """Input ``a`` (k, v) at epoch 3 and dataflow ``A`` exporting it arranged by ``k`` as ``X``."""
    a = eng.input("a", ["k", "v"], rows=[(1, 2), (2, 3)])
    a.advance_to(3)
    with eng.dataflow("A") as df:
        df.input("a").arrange_by("k").export("X")
    eng.wait("A", timeout=T)
    return a


# -- Errors: "Every error kpgnb raises on purpose derives from kp.KpgnbError" ------------------------------

def test_accumulate_time_of_the_wrong_depth_is_a_kpgnb_error():
    """README: ``eng.trace(name).accumulate(at)`` gives the collection as of a time. A top-level
    arrangement's times are epochs; ``at=(0, 1)`` (a loop time) is refused with a hand-written message,
    but as a plain ``ValueError`` that ``except kp.KpgnbError`` does not catch."""
    with kp.Engine(workers=2) as eng:
        _exported(eng)
        h = eng.trace("X")
        assert h.accumulate(2)[2].sum() == 2
        with pytest.raises(kp.KpgnbError, match="depth"):
            h.accumulate((0, 1))


def test_seek_keys_of_the_wrong_shape_is_a_kpgnb_error():
    """README: ``cursor(shard).seek_keys(keys)`` takes the key columns as a ``kk x n`` int64 array, or a
    1-D array for a one-column key. A 2 x n array for a one-column key is refused with a clear message,
    but as a plain ``ValueError`` (while a bad shard or a str key are ``UsageError``s)."""
    with kp.Engine(workers=2) as eng:
        _exported(eng)
        h = eng.trace("X")
        found = [h.cursor(s).seek_keys(np.array([1, 2])) for s in range(eng.workers)]
        assert len(found) == 2
        with pytest.raises(kp.UsageError):
            h.cursor(5)
        with pytest.raises(kp.KpgnbError, match="seek_keys"):
            h.cursor(0).seek_keys(np.zeros((2, 2), np.int64))


def test_trace_handle_compaction_going_back_is_a_kpgnb_error():
    """README: readers hold trace handles whose frontiers let the spine compact history. Moving a handle's
    frontier back is refused ("may only advance"), as a plain ``ValueError``."""
    with kp.Engine(workers=2) as eng:
        _exported(eng)
        h = eng.trace("X")
        h.set_logical_compaction(kp.Antichain([(2,)]))
        with pytest.raises(kp.CompactedError):
            h.accumulate(1)
        with pytest.raises(kp.KpgnbError, match="only advance"):
            h.set_logical_compaction(kp.Antichain([(0,)]))


def test_arming_an_unknown_fault_point_is_a_kpgnb_error():
    """README (Errors): ``kpgnb.engine.faults`` has named fault points (``seal``, ``exchange``, ``merge``,
    ``operator_step``, ``scheduler``). A misspelt point is refused, naming the points, as a ``ValueError``."""
    from kpgnb.engine import faults
    with pytest.raises(kp.KpgnbError, match="points are"):
        with faults.armed("sael", times=1):
            pass


# -- Errors: arguments of the wrong type are ArgumentTypeError ---------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(name=5),
    dict(inputs=[("e", "edges")]),
    dict(inputs={"e": 5}),
], ids=["name_int", "inputs_list", "inputs_value_int"])
def test_datalog_arguments_of_the_wrong_type_are_argument_type_errors(kwargs):
    """README (Errors): "an argument of the wrong type ... is its subclass ``ArgumentTypeError``, also a
    ``TypeError``". ``eng.datalog(5)`` and ``prog.goal(5)`` are; a program named 5, an ``inputs=`` given as
    a list, or a binding to the int 5 are plain ``UsageError``s (a ``ValueError``, not a ``TypeError``)."""
    with kp.Engine(workers=1) as eng:
        e = eng.input("edges", ["src", "dst"], rows=[(1, 2)])
        e.advance_to(1)
        with pytest.raises(kp.ArgumentTypeError):
            eng.datalog(5, name="x")
        args = dict(name="p", inputs={"e": "edges"})
        args.update(kwargs)
        with pytest.raises(TypeError):
            eng.datalog("t(x) :- e(x, _).", **args)
        assert eng.dataflows() == {}


# -- Errors: after eng.close() every call raises EngineError("the engine is closed") ----------------------

def test_datalog_goal_after_close_says_the_engine_is_closed():
    """README: after ``eng.close()`` every call (... building ...) raises
    ``EngineError("the engine is closed")``. ``g.ask``, ``prog[...]`` reads and ``eng.datalog`` do; a new
    goal on a program says the program "has been dropped; install it again", which the user cannot do."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        prog = eng.datalog("p(x) :- a(x).", name="dl")
        eng.wait("dl", timeout=T)
        g = prog.goal("p(?)")
    finally:
        eng.close()
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        g.ask(1)
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        prog["p"].to_pandas()
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        prog.goal("p(?)")


def test_closed_engine_refuses_the_calls_not_checked_before():
    """The calls tests/test_attack_s45_docs.py does not list: cancel, drop_input, datalog, check, subscribe,
    an input's close/update/remove, own_inputs; stats(live=True) still answers."""
    eng = kp.Engine(workers=1)
    a = eng.input("a", ["k"], rows=[(1,)])
    a.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("a").view("v")
    eng.wait(v, timeout=T)
    eng.close()
    for call in (lambda: eng.cancel("d"), lambda: eng.drop_input("a"),
                 lambda: eng.datalog("q(x) :- a(x).", name="q"), lambda: v.check(),
                 lambda: v.subscribe(lambda changes: None), lambda: a.close(), lambda: a.update([(1,)], [1]),
                 lambda: a.remove([(1,)]), lambda: eng.own_inputs("d", "a")):
        with pytest.raises(kp.EngineError, match="the engine is closed"):
            call()
    assert isinstance(eng.stats(live=True), dict)


# -- Many threads, one engine: followers ---------------------------------------------------------------------

def test_follower_of_closed_inputs_dates_contents_at_last_change_and_ends():
    """README: a follower's first frame is the contents; "when all its inputs are closed already, the
    contents come dated at the last epoch anything changed"; it ends when all its inputs are closed. And a
    follower ends when its view is dropped; a closed follower stops."""
    with kp.Engine(workers=2) as eng:
        c = eng.input("c", ["user", "page"])
        with eng.dataflow("pu") as df:
            v = df.input("c").count(by="user").view("pu")
        c.insert([(1, 10)])
        c.advance_to(1)
        c.insert([(2, 10)])
        c.advance_to(2)
        c.advance_to(5)  # epochs 2 to 4 change nothing
        c.close()
        eng.wait(v, timeout=T)
        frames = list(v.follow(timeout=T))
        assert len(frames) == 1
        got = sorted(map(tuple, frames[0][["user", "count", "time", "diff"]].itertuples(index=False)))
        assert got == [(1, 1, 1, 1), (2, 1, 1, 1)]
        d = eng.input("d", ["x"], rows=[(1,)])
        d.advance_to(1)
        with eng.dataflow("dd") as df:
            w = df.input("d").view("w")
        eng.wait(w, timeout=T)
        f = w.follow(timeout=T)
        g = w.follow(timeout=T)
        assert rows(w) == [(1,)]
        next(f)
        g.close()
        with pytest.raises(StopIteration):
            next(g)
        eng.drop("dd")
        assert list(f) == []


# -- Arrangements, sharing and compaction -------------------------------------------------------------------

def test_cascade_from_a_renamed_kept_dataflow_and_from_a_kept_ones_own_name():
    """README: a kept export gives its name up to a re-run cell and is listed as ``name~k`` with its
    dataflow, read on by its readers; ``eng.drop(name, cascade=True)`` from the kept dataflow (by its
    ``~k`` name, or by its own name when nothing took it) drops its readers and it."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 2)])
        a.advance_to(1)
        with eng.dataflow("A") as df:
            df.input("a").arrange_by("k").export("X")
        with eng.dataflow("B") as df:
            vb = df.use("X").count(by="k").view("vb")
        eng.wait(vb, timeout=T)
        eng.drop("A")
        assert eng.dataflows() == {"B": "running"}
        with eng.dataflow("A") as df:  # the cell run again
            df.input("a").arrange_by("k").export("X")
        cat = {k: v["dataflow"] for k, v in eng.catalog().items()}
        assert cat == {"X~1": "A~1 (dropped)", "X": "A"}
        a.insert([(3, 4)])
        a.advance_to(2)
        eng.wait(vb, timeout=T)
        assert rows(vb) == [(1, 1), (3, 1)]
        eng.drop("A~1", cascade=True)
        assert eng.dataflows() == {"A": "running"}
        assert list(eng.catalog()) == ["X"]
        with pytest.raises(kp.UsageError, match="dropped"):
            vb.to_pandas()
        with eng.dataflow("C") as df:
            vc = df.use("X").count(by="k").view("vc")
        eng.wait(vc, timeout=T)
        eng.drop("A")
        eng.drop("A", cascade=True)
        assert eng.dataflows() == {} and eng.catalog() == {}


# -- Datalog ---------------------------------------------------------------------------------------------------

def test_datalog_arithmetic_operators_and_escapes():
    """README (Language): ``<-`` rules, ``==``, ``/`` of two ints is floor division and ``%`` Python's
    modulo (negative operands included), division by zero derives nothing, ``\\xHH \\uHHHH \\0`` escapes and
    a backslash before any other character standing for it."""
    with kp.Engine(workers=2) as eng:
        n = eng.input("n", ["a", "b"], rows=[(-7, 2), (7, -2), (5, 0), (-7, 3)])
        n.advance_to(1)
        p = eng.datalog("""
        q(a, b, c) <- n(a, b), c = a / b.
        m(a, b, c) :- n(a, b), c = a % b.
        e(a) :- n(a, b), a == -7.
        s(x) :- n(a, _), x = "\\x41\\u00e9\\q\\0".
        """, name="p1")
        eng.wait("p1", timeout=T)
        assert rows(p["q"]) == [(-7, 2, -4), (-7, 3, -3), (7, -2, -4)]
        assert rows(p["m"]) == [(-7, 2, 1), (-7, 3, 2), (7, -2, -1)]
        assert rows(p["e"]) == [(-7,)]
        assert rows(p["s"]) == [("A\u00e9q\x00",)]


def test_datalog_input_bound_to_an_export_reads_key_columns_first():
    """README: ``inputs=`` binds a predicate to an exported arrangement, "its columns are the
    arrangement's: key columns first, then values"; a predicate that rules define is theirs, even where an
    engine input has its name."""
    with kp.Engine(workers=2) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3)])
        edges.advance_to(1)
        with eng.dataflow("ex") as df:
            df.input("edges").arrange_by("dst").export("by_dst")
        eng.input("r2", ["x"], rows=[(99,)]).advance_to(1)
        p = eng.datalog("r(a, b) :- e(a, b).\nr2(x) :- edges(x, _).\nout(x) :- r2(x).",
                        inputs={"e": "by_dst"}, name="p")
        eng.wait("p", timeout=T)
        assert rows(p["r"]) == [(2, 1), (3, 2)]
        assert rows(p["out"]) == [(1,), (2,)]


# -- Memory modes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("memory", ["full", "jod"])
def test_int64_min_node_id_and_path_length_overflow_per_mode(memory):
    """README: ``jod``/``drop`` keep the int64 minimum as "no state": a ``wcc`` label of node -2**63 fails
    the dataflow saying so, ``full`` has no such value; an int64 path length that would wrap fails
    ``sssp``; ``wcc`` over str node ids takes ``memory="full"``."""
    with kp.Engine(workers=2) as eng:
        ne = eng.input("ne", ["src", "dst"], rows=[(-2**63, 5), (5, 6)])
        bw = eng.input("bw", ["src", "dst", "w"], rows=[(0, 1, 2**62), (1, 2, 2**62)])
        se = eng.input("se", ["src", "dst"], dtypes=["str", "str"], rows=[("a", "b")])
        s = eng.input("s", ["source"], rows=[(0,)])
        for i in (ne, bw, se, s):
            i.advance_to(1)
        with eng.dataflow("w") as df:
            w = graphs.wcc(df.input("ne"), memory=memory).view("w")
        if memory == "full":
            eng.wait(w, timeout=T)
            assert {lab for _, lab in rows(w)} == {-2**63}
        else:
            with pytest.raises(kp.DataflowError, match="int64 minimum"):
                eng.wait(w, timeout=T)
        with eng.dataflow("p") as df:
            p = graphs.sssp(df.input("bw"), df.input("s"), memory=memory).view("p")
        with pytest.raises(kp.DataflowError, match="overflows int64"):
            eng.wait(p, timeout=T)
        if memory == "full":
            with eng.dataflow("sw") as df:
                sw = graphs.wcc(df.input("se"), memory=memory).view("sw")
            eng.wait(sw, timeout=T)
            assert rows(sw) == [("a", "a"), ("b", "a")]
        else:
            with pytest.raises(kp.SchemaError, match="str take memory='full'"):
                with eng.dataflow("sw") as df:
                    graphs.wcc(df.input("se"), memory=memory).view("sw")
