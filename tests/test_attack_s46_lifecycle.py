"""Attack (session 46): engine lifecycle and input formats.

Lifecycle: several engines in one process (their collections, views and inputs never mix), the kernel's
engine ``kp.engine()``, engines closed while other threads wait, follow, subscribe and insert (no kpgnb
thread is left running afterwards), ``with kp.Engine() as eng`` blocks that raise.

Input formats: pandas extension dtypes, object columns holding things that are not values, Arrow arrays
given as the columns of a dict, frames with two columns of one name, one-column inputs with rows of the
wrong length, NumPy float16. Every refused insert must be a ``SchemaError`` naming the column and leave
the input and its views as they were.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import kpgnb as kp
from notebook_shell import run, shell  # noqa: F401 - shell is a fixture
from threads import T, join_all, watchdog

_watchdog = watchdog(180)

BASE = [(1, 1), (2, 2)]


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


def _kpgnb_threads(before=frozenset()):
    return [t for t in threading.enumerate() if t.name.startswith("kpgnb") and t.ident not in before]


def _no_new_kpgnb_threads(before, bound=10.0):
    """The kpgnb threads started since ``before`` (idents) have all ended, within ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        left = _kpgnb_threads(before)
        if not left:
            return []
        time.sleep(0.05)
    return [t.name for t in _kpgnb_threads(before)]


@pytest.fixture
def ctx():
    """An engine with an input ``x`` of (a str, b int64) and a view and a count over it, at epoch 1."""
    eng = kp.Engine(workers=2)
    x = eng.input("x", ["a", "b"], dtypes=["str", "int64"])
    x.insert([("p", 1), ("q", 2)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
        c = df.input("x").count(by="a").view("c")
    eng.wait(v, timeout=T)
    eng.wait(c, timeout=T)
    yield eng, x, v, c
    eng.close()


def _intact(eng, x, v, c):
    """A refused call changed nothing: the epoch, the views, and a good insert afterwards is exact."""
    assert x.epoch == 1
    assert rows(v) == [("p", 1), ("q", 2)]
    x.insert([("r", 3)])
    x.advance_to(2)
    eng.wait(v, timeout=T)
    eng.wait(c, timeout=T)
    assert rows(v, diffs=True) == [("p", 1, 1), ("q", 2, 1), ("r", 3, 1)]
    assert rows(c) == [("p", 1), ("q", 1), ("r", 1)]


# -- 1. input formats: bugs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("col", [pa.array([1.5, None]), pa.array([1, None]), pa.chunked_array([[1.5], [None]])],
                         ids=["float_array", "int_array", "chunked"])
def test_arrow_null_in_a_dict_of_arrays_is_refused_for_a_float_column(col):
    """README, Errors: "Columns hold no nulls: None, pandas' NA ..., an Arrow null and a masked entry of a
    NumPy masked array are refused (a NaN in a float column is a value)". The same Arrow column inside an
    Arrow table is refused ("column 'f' has 1 null value(s)"), but given as a column of a dict of arrays
    (``{"f": pa.array([1.5, None]), ...}``) NumPy's conversion turns the null into NaN and the row goes in
    with f = NaN: a missing value silently becomes a value."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["f", "b"], dtypes=["float64", "int64"], rows=[(0.5, 0)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v, timeout=T)
        with pytest.raises(kp.SchemaError, match=r"column 'f'.*null"):
            x.insert({"f": col, "b": [1, 2]})
        x.advance_to(2)
        eng.wait(v, timeout=T)
        assert rows(v) == [(0.5, 0)]


UNHASHABLE = [
    ("list", lambda: pd.DataFrame({"a": pd.Series([["x"], ["y"]]), "b": [1, 2]})),
    ("dict", lambda: pd.DataFrame({"a": pd.Series([{"k": 1}, {"k": 2}]), "b": [1, 2]})),
    ("set", lambda: pd.DataFrame({"a": pd.Series([{1}, {2}]), "b": [1, 2]})),
    ("ndarray", lambda: pd.DataFrame({"a": pd.Series([np.array([1]), np.array([2])]), "b": [1, 2]})),
    ("str_then_list", lambda: pd.DataFrame({"a": pd.Series(["x", ["y"]]), "b": [1, 2]})),
    ("dict_of_series", lambda: {"a": pd.Series([["x"], ["y"]]), "b": [1, 2]}),
    ("arrow_list_dtype", lambda: pd.DataFrame({"a": pd.Series(pa.array([["x"], ["y"]]),
                                                              dtype=pd.ArrowDtype(pa.list_(pa.string()))),
                                               "b": [1, 2]})),
]


@pytest.mark.parametrize("make", [u[1] for u in UNHASHABLE], ids=[u[0] for u in UNHASHABLE])
def test_nested_values_for_a_str_column_are_a_schema_error_naming_it(ctx, make):
    """README, Errors: "Bad input raises a SchemaError naming the column, the row and what was expected ...
    an object column of values that are not str, int, float or bool (Decimal, date, Period) is refused by
    what it holds." A list in a pandas object column going into a str column escapes as ``TypeError:
    unhashable type: 'list'`` from pandas' factorize (kpgnb/engine/inputs.py ``_pandas_column``), with no
    column named; an ``ArrowDtype(list<string>)`` column escapes as pyarrow's ArrowNotImplementedError. The
    same values into an int64 column, or in a dict of NumPy object arrays, are a proper SchemaError
    ("column 'a' is str but row 0 holds [1] (list)")."""
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError, match=r"column 'a'"):
        x.insert(make())
    _intact(eng, x, v, c)


def test_pandas_frame_with_two_columns_of_one_name_says_so(ctx):
    """README, Errors: "tables with two columns of one name (what a Spark join gives) are refused too". An
    Arrow table with two columns 'a' says "the Arrow table has several columns named 'a' ...; rename or
    drop the extra ones first"; the same pandas frame (``pd.concat`` of frames, a merge with suffixes=(None,
    None)) says "column 'a' of the DataFrame must be a sequence of values (one per row), got an array of
    shape (2, 2)", which points the user at the values rather than at the duplicated name.
    (``rows_to_columns`` builds a dict keyed by name, so ``rows[c]`` is a frame.)"""
    eng, x, v, c = ctx
    frame = pd.concat([pd.DataFrame({"a": ["s", "t"], "b": [5, 6]}), pd.DataFrame({"a": ["u", "w"]})], axis=1)
    with pytest.raises(kp.SchemaError, match=r"several columns named 'a'"):
        x.insert(frame)
    _intact(eng, x, v, c)


@pytest.mark.parametrize("bad, row", [([(1,), (2, 3)], 1), ([(4,), [5, 6]], 1), ([(7, 8)], 0)],
                         ids=["tuple_of_two", "list_of_two", "only_row_too_long"])
def test_one_column_input_with_a_row_of_two_values_names_the_row(bad, row):
    """README, Errors: "Bad input raises a SchemaError naming the column, the row and what was expected".
    With two or more columns a row of the wrong length says "row 1 has 2 values; expected 2 values for
    columns [...]". With one column, ``[(1,), (2, 3)]`` says "column 'a' (int64): setting an array element
    with a sequence. The requested array has an inhomogeneous shape after 1 dimensions..." and ``[(7, 8)]``
    "could not broadcast input array from shape (2,) into shape (1,)": NumPy's words, no row, nothing
    about one value per row (``_from_tuples`` only unwraps 1-tuples and hands the rest to NumPy)."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"], rows=[(0,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v, timeout=T)
        with pytest.raises(kp.SchemaError, match=rf"row {row}\b.*(1 value|one value)"):
            x.insert(bad)
        x.insert([(9,)])
        x.advance_to(2)
        eng.wait(v, timeout=T)
        assert rows(v) == [(0,), (9,)]


@pytest.mark.parametrize("make", [lambda: {"a": np.array([1, 2], np.float16), "b": [1, 2]},
                                  lambda: pa.table({"a": pa.array(np.array([1, 2], np.float16)), "b": [1, 2]})],
                         ids=["numpy", "arrow"])
def test_float16_whole_numbers_into_an_int64_column_warn_nothing(make):
    """README: an int64 column takes "floats with no fractional part". A float16 array of 1.0 and 2.0 goes
    in correctly, but the range check in ``encode_column`` (``arr >= 2.0 ** 63`` on the float16 array)
    makes NumPy cast 2**63 to float16 and warn "overflow encountered in cast" to the user, who did
    nothing that overflows (and whose test suite may turn warnings into errors)."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a", "b"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x.insert(make())
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v, timeout=T)
        assert rows(v) == [(1, 1), (2, 2)]


# -- 2. lifecycle: bugs -------------------------------------------------------------------------------------

def test_kernel_engine_refuses_zero_workers():
    """README, Workers: "kp.Engine(workers=W) keeps W worker threads (W an int of at least 1; the default,
    None, is one per core)", and ``kp.Engine(workers=0)`` raises UsageError (fixed in an earlier round,
    tests/test_attack_s27_api.py). ``kp.engine(0)`` (kpgnb/kernel.py ``engine``: ``workers or _workers or
    default_workers()``) takes 0 as "not given" and starts the kernel's engine with the machine's cores."""
    from kpgnb import kernel
    if kernel.current() is not None:
        pytest.skip("the kernel's engine is running already in this process")
    made = None
    try:
        with pytest.raises(kp.UsageError):
            made = kp.engine(0)
    finally:
        if made is not None or kernel.current() is not None:
            kernel.close()


def test_config_restart_with_a_bad_worker_count_changes_nothing(shell, capsys):
    """README: "%dataflow config [--workers N] [--restart] | show or set the worker count (--restart closes
    the engine, losing its state)"; "a bad flag is a one-line UsageError". ``--restart --workers 0`` is
    refused with "workers must be at least 1", but kpgnb/magics.py ``_config`` calls ``kernel.close()``
    before ``kernel.configure(workers=0)`` checks the count: the refused command has already closed the
    engine and lost every dataflow and input. A refused command should change nothing (check the count,
    then restart)."""
    from kpgnb import kernel
    eng = kp.engine(1)
    try:
        eng.input("keep", ["a"], rows=[(1,)])
        r, out = run(shell, capsys, "%dataflow config --restart --workers 0")
        assert not r.success and "workers must be at least 1" in out
        assert not eng.closed, "the refused config closed the kernel's engine"
        assert kernel.current() is eng and "keep" in eng.inputs()
    finally:
        kernel.close()


@pytest.mark.parametrize("call", ["drop", "cancel", "drop_input", "drop_foreign", "drop_input_foreign"])
def test_engine_calls_given_a_view_or_session_object_refuse_it_by_type(call):
    """README, Errors: "an argument of the wrong type ... is its subclass ArgumentTypeError"; a view of
    another engine given to ``eng.wait`` says "the view belongs to another engine". ``eng.drop(view)``,
    ``eng.cancel(view)`` and ``eng.drop_input(session)`` (natural slips: the objects are what the user
    holds) answer with ``UnknownNameError: no dataflow named View('v' in 'd', ...); installed: ['d']`` and
    ``no input named InputSession('x', ...); inputs are ['x']``: the dataflow and the input named are right
    there, the message contradicts itself, and for objects of another engine nothing says so. Either
    refuse the type (ArgumentTypeError, a UsageError) or take the object for its name; never a KeyError
    listing the very name asked for. Nothing may be dropped from either engine."""
    e1, e2 = kp.Engine(workers=1), kp.Engine(workers=1)
    try:
        x1 = e1.input("x", ["a"], rows=[(1,)])
        x1.advance_to(1)
        with e1.dataflow("d") as df:
            v1 = df.input("x").view("v")
        e1.wait(v1, timeout=T)
        target, arg = {"drop": (e1.drop, v1), "cancel": (e1.cancel, v1), "drop_input": (e1.drop_input, x1),
                       "drop_foreign": (e2.drop, v1), "drop_input_foreign": (e2.drop_input, x1)}[call]
        with pytest.raises(kp.ArgumentTypeError):
            target(arg)
        assert e1.dataflows() == {"d": "running"}
        assert rows(v1) == [(1,)]
    finally:
        e1.close()
        e2.close()


def test_wait_snapshot_on_a_closed_engine_does_not_block_forever():
    """README: "A poller that reacts to every change of the engine's state without spinning waits in
    eng.wait_snapshot(seen, timeout)"; DESIGN: "nothing waits forever"; after close "every call ... raises
    EngineError". A poller blocked in ``wait_snapshot`` when the engine closes is woken once (close
    publishes a last snapshot), but its next call, or any call after close, waits on a condition nobody
    will notify again (engine/scheduler.py ``wait_published``: ``if self.snapshot is seen: wait(timeout)``
    with no check of the stopped scheduler). It should return at once or raise EngineError."""
    eng = kp.Engine(workers=1)
    x = eng.input("x", ["a"], rows=[(1,)])
    x.advance_to(1)
    eng.close()
    out = {}

    def poll():
        try:
            out["snap"] = eng.wait_snapshot(eng.snapshot(), None)
        except kp.EngineError as e:
            out["error"] = e

    t = threading.Thread(target=poll, name="poller-after-close", daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "wait_snapshot on a closed engine is still blocked after 5 s"
    assert out


def test_spark_follow_refuses_an_input_session_of_another_engine(spark, tmp_path):
    """``kp.spark.follow(stream, input=..., engine=...)`` takes "a name or an InputSession" (its docstring)
    and ``engine``. Given a session of engine e1 with ``engine=e2`` it starts the query and every
    micro-batch goes into e1's input, while the caller asked for e2 (and with ``engine`` left out, it even
    creates the kernel's engine, with all cores' workers, only to ignore it). ``%%dataflow --inputs`` and
    ``eng.datalog(inputs=)`` refuse such a session ("is an input of another engine"); kpgnb/spark.py
    ``follow`` only checks the schema (``_check_stream_schema``), never the session's engine."""
    e1, e2 = kp.Engine(workers=1), kp.Engine(workers=1)
    query = None
    try:
        x1 = e1.input("x", ["a"])
        stream = spark.readStream.schema("a long").json(str(tmp_path))
        try:
            with pytest.raises(kp.UsageError, match="another engine"):
                query = kp.spark.follow(stream, input=x1, engine=e2)
        finally:
            if query is not None:
                query.stop()
        assert x1.epoch == 0 and list(e2.inputs()) == []
    finally:
        e1.close()
        e2.close()


@pytest.mark.parametrize("body", ["other_engine", "wrong_column", "not_a_collection"])
def test_a_refused_iterate_body_leaves_the_dataflow_block_usable(body):
    """A refused call leaves the builder as it was (README: "A wrong column name in a dataflow fails at the
    line that used it"; a block that goes on, e.g. a notebook helper that tries one form and falls back to
    another, must still install). A refused ``join``/``concat`` does; but ``r.iterate(body)`` registers its
    loop Variable before calling ``body``, and when ``body`` raises (a collection of another engine's
    block, a wrong column, a body returning an int) the Variable stays in ``builder.variables`` unset, so
    the block's end raises ``SchemaError: the Variable defined at ... was never set`` and nothing is
    installed. (engine/collection.py ``iterate``; graph queries built on it, e.g. ``kpgnb.graphs.bfs`` on
    edges without ``src``, do the same.)"""
    e1, e2 = kp.Engine(workers=1), kp.Engine(workers=1)
    try:
        for e in (e1, e2):
            e.input("x", ["a"], rows=[(1,), (2,)]).advance_to(1)
        with e1.dataflow("other") as d1:
            c1 = d1.input("x")
            bodies = {"other_engine": lambda r: r.concat(c1).distinct(),
                      "wrong_column": lambda r: r.join(r, left_on="nope", right_on="a"),
                      "not_a_collection": lambda r: 5}
            with e2.dataflow("d") as df:
                src = df.input("x")
                with pytest.raises(kp.KpgnbError):
                    src.iterate(bodies[body])
                v = src.count(by=[]).view("v")
            d1.input("x").view("o")
        e2.wait(v, timeout=T)
        assert rows(v) == [(2,)]
    finally:
        e1.close()
        e2.close()


# -- 3. what works (coverage not found elsewhere) ----------------------------------------------------------

def test_close_with_waiter_follower_subscription_and_inserter_leaves_no_thread():
    """README: "eng.close() answers every call still queued ... with EngineError" and "After eng.close() every
    call ... raises EngineError". With one thread blocked in eng.wait on a step that is running a slow user
    function, one following the view, one subscription and one thread inserting and advancing in a loop,
    close() ends them all: the waiter and the inserter get EngineError, the follower ends, and every kpgnb
    thread this engine started is gone within a bounded time."""
    before = frozenset(t.ident for t in threading.enumerate())
    eng = kp.Engine(workers=2)
    x = eng.input("x", ["a"])
    slow = threading.Event()

    def m(a):
        if len(a) and (a == 7).any():
            slow.set()
            time.sleep(0.6)
        return {"a": a}

    with eng.dataflow("d") as df:
        v = df.input("x").map(m).count(by=[]).view("v")
    got = {}
    sub = v.subscribe(lambda changes: None)
    follower = v.follow(timeout=T)

    def waiter():
        try:
            eng.wait(v, timeout=T)
            got["wait"] = "returned"
        except kp.KpgnbError as e:
            got["wait"] = type(e).__name__

    def follow():
        try:
            for _ in follower:
                pass
            got["follow"] = "ended"
        except kp.KpgnbError as e:
            got["follow"] = type(e).__name__

    def inserter():
        i = 8
        try:
            while i < 100_000:
                x.insert([(i,)])
                i += 1
                x.advance_to(i)
            got["insert"] = "ran out"
        except kp.KpgnbError as e:
            got["insert"] = type(e).__name__

    x.insert([(7,)])
    x.advance_to(1)
    assert slow.wait(T)
    threads = [threading.Thread(target=f) for f in (waiter, follow, inserter)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    eng.close()
    join_all(threads)
    assert got["wait"] in ("EngineError", "returned"), got
    assert got["insert"] == "EngineError", got
    assert got["follow"] in ("ended", "EngineError"), got
    assert sub.error is None
    assert _no_new_kpgnb_threads(before) == []
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        x.insert([(1,)])
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        eng.wait(v)
    assert eng.dataflows() == {}


def test_with_block_that_raises_closes_the_engine_and_keeps_the_error():
    """``with kp.Engine() as eng`` whose body raises (inside a dataflow block too) re-raises the body's error
    unchanged, closes the engine (calls then say so) and leaves none of its threads behind."""
    before = frozenset(t.ident for t in threading.enumerate())

    class Boom(Exception):
        pass

    with pytest.raises(Boom, match="inside the dataflow block"):
        with kp.Engine(workers=2) as eng:
            x = eng.input("x", ["a"], rows=[(1,)])
            x.advance_to(1)
            with eng.dataflow("ok") as df:
                ok = df.input("x").count(by=[]).view("ok")
            eng.wait(ok, timeout=T)
            with eng.dataflow("bad") as df:
                df.input("x").view("bad")
                raise Boom("inside the dataflow block")
    assert eng.closed
    with pytest.raises(kp.EngineError, match="the engine is closed"):
        ok.to_pandas()
    assert _no_new_kpgnb_threads(before) == []


def test_two_engines_never_mix_collections_and_close_apart():
    """Two engines in one process with inputs of the same name and str columns interned in different
    orders: a collection of one engine's dataflow block used in the other's (concat, join, semijoin, a
    Variable) is refused with a SchemaError, ``wait`` on the other engine's view says so,
    an input session of one given to the other's Datalog ``inputs=`` is refused; each engine's answers stay
    its own, and closing one leaves the other working."""
    e1, e2 = kp.Engine(workers=2), kp.Engine(workers=1)
    try:
        x1 = e1.input("x", ["k", "n"], dtypes=["str", "int64"], rows=[("b", 1), ("a", 2)])
        x2 = e2.input("x", ["k", "n"], dtypes=["str", "int64"], rows=[("c", 3), ("a", 4), ("b", 5)])
        x1.advance_to(1)
        x2.advance_to(1)
        b1 = e1.dataflow("one")
        d1 = b1.__enter__()
        c1 = d1.input("x")
        with e2.dataflow("two") as d2:
            c2 = d2.input("x")
            for combine in (lambda: c2.concat(c1), lambda: c2.join(c1, on="k"), lambda: c2.semijoin(c1, on="k"),
                            lambda: kp.Variable(d2.loop(), c1)):
                with pytest.raises(kp.SchemaError):
                    combine()
            v2 = c2.min(by=[], col="k").view("m")
        v1 = c1.min(by=[], col="k").view("m")
        b1.__exit__(None, None, None)
        e1.wait(v1, timeout=T)
        e2.wait(v2, timeout=T)
        assert rows(v1) == [("a",)] and rows(v2) == [("a",)]
        with pytest.raises(kp.UsageError, match="another engine"):
            e2.wait(v1)
        with pytest.raises(kp.UsageError, match="another engine"):
            e2.datalog("r(k, n) :- x(k, n).", inputs={"x": x1}, name="p")
        assert sorted(e2.dataflows()) == ["two"]
        e1.close()
        x2.insert([("0", 0)])
        x2.advance_to(2)
        e2.wait(v2, timeout=T)
        assert rows(v2) == [("0",)]
    finally:
        e1.close()
        e2.close()


NULLABLE_OK = [
    ("Int64", pd.DataFrame({"b": pd.array([7, 8], dtype="Int64"), "a": ["s", "t"]}), [("s", 7), ("t", 8)]),
    ("boolean", pd.DataFrame({"a": pd.array(["s", "t"], dtype="string"),
                              "b": pd.array([True, False], dtype="boolean")}), [("s", 1), ("t", 0)]),
    ("categorical", pd.DataFrame({"a": pd.Categorical(["t", "s", "t"]), "b": pd.Categorical([5, 6, 5])}),
     [("s", 6), ("t", 5), ("t", 5)]),
    ("arrow_dict_chunked_large", pa.table({"b": pa.chunked_array([[9], [], [10]]),
                                           "a": pa.chunked_array([pa.array(["u"], pa.large_string()),
                                                                  pa.array([], pa.large_string()),
                                                                  pa.array(["w"], pa.large_string())])}),
     [("u", 9), ("w", 10)]),
    ("generator", (r for r in [("g", 1), ("h", 2)]), [("g", 1), ("h", 2)]),
]


@pytest.mark.parametrize("data, want", [n[1:] for n in NULLABLE_OK], ids=[n[0] for n in NULLABLE_OK])
def test_nullable_extension_dtypes_without_na_load_by_name(ctx, data, want):
    """pandas' nullable Int64/boolean/string and categorical columns without NA, in another column order than
    the input's, Arrow chunked columns with an empty chunk, and a generator of tuples, all load exactly."""
    eng, x, v, c = ctx
    x.insert(data)
    x.advance_to(2)
    eng.wait(v, timeout=T)
    assert rows(v) == sorted([("p", 1), ("q", 2)] + want)


@pytest.mark.parametrize("bad", [
    pd.DataFrame({"a": pd.array(["s", None], dtype="string"), "b": [1, 2]}),
    pd.DataFrame({"a": ["s", "t"], "b": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({"a": ["s", "t"], "b": pd.array([True, None], dtype="boolean")}),
    pd.DataFrame({"a": pd.Categorical(["s", None]), "b": [1, 2]}),
    pd.DataFrame({"a": ["s", "t"], "b": pd.to_datetime(["2020-01-01", "2020-01-02"]).tz_localize("UTC")}),
    pd.DataFrame({"a": ["s", "t"], "b": pd.to_timedelta([1, 2], unit="s")}),
    pd.DataFrame({"a": pd.to_timedelta([1, 2], unit="s"), "b": [1, 2]}),
    pa.table({"a": pa.chunked_array([pa.array(["s"], pa.large_string()), pa.array([None], pa.large_string())]),
              "b": [1, 2]}),
], ids=["string_NA", "Int64_NA", "boolean_NA", "categorical_NA", "datetime_tz", "timedelta", "timedelta_to_str",
        "arrow_large_string_null_chunk"])
def test_nulls_and_times_are_refused_naming_the_column(ctx, bad):
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError, match=r"column '[ab]'"):
        x.insert(bad)
    _intact(eng, x, v, c)
