"""Attack (session 51) on errors: bad input everywhere in the public API. Values of the wrong kind in
numpy/pandas/object columns (NumPy complex scalars, long-double complex arrays), rows given as NumPy arrays,
columns given as a set, flat_map "how" arrays of the wrong kind (a boolean mask given as an index), option
values of the wrong type that Python would take as true (``cascade="no"``, ``replace="no"``,
``repeat="no"``), out-of-range or unhashable Engine and ``kp.spark.session`` options, wrongly typed goal
bindings given to ``retract``, wrong arguments to ``view.head`` and ``reduce``, ``Collection.ife`` message
functions that fail or return the wrong shape, and what refused rows leave behind (the symbol table). Each
must raise a clear ``kp.KpgnbError`` subclass naming the column / argument and what was expected, and leave
the engine, every view and every arrangement as it was (checked by reading them again and by feeding later
epochs, at W = 1, 2 and 3, with retractions).

Tests marked ``xfail(strict=True, reason="BUG: ...")`` assert the correct behaviour of a defect found here;
the others pin down behaviour that was probed and found right (and was not covered in this form before)."""
from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from numba import njit

import kpgnb as kp
from kpgnb import graphs

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::RuntimeWarning")

T = 60  # seconds: a generous bound for every wait
BASE = [(1, 10), (1, 11), (2, 20)]
FBASE = [(1, 1.5), (2, 2.5)]


def rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


def state(eng):
    return (dict(eng.dataflows()), sorted(eng.catalog()), sorted(eng.inputs()))


@pytest.fixture(params=[1, 2, 3], ids=["W1", "W2", "W3"])
def ctx(request):
    """An engine of W workers with inputs x (a, b: int64) and f (k: int64, v: float64), a dataflow 'base'
    (an identity view of x exported as 'xa', a count, an identity view of f) and a dataflow 'reader' that
    imports 'xa', all computed."""
    eng = kp.Engine(workers=request.param)
    try:
        x = eng.input("x", ["a", "b"], rows=BASE)
        f = eng.input("f", ["k", "v"], dtypes=["int64", "float64"], rows=FBASE)
        x.advance_to(1)
        f.advance_to(1)
        with eng.dataflow("base") as df:
            ident = df.input("x").arrange_by("a").export("xa").view("ident")
            cnt = df.input("x").count(by="a").view("cnt")
            fv = df.input("f").view("fv")
        with eng.dataflow("reader") as df:
            sums = df.use("xa").sum(by="a", col="b").view("sums")
        for v in (ident, cnt, fv, sums):
            eng.wait(v, timeout=T)
        yield dict(eng=eng, x=x, f=f, ident=ident, cnt=cnt, fv=fv, sums=sums, before=state(eng))
    finally:
        eng.close()


def intact(t):
    """Nothing of the refused call is left: the engine's dataflows, catalog and inputs are as before, no
    rows are buffered, and every view follows a later epoch of both inputs exactly."""
    eng = t["eng"]
    for extra in set(eng.dataflows()) - set(t["before"][0]):
        eng.drop(extra)
    assert state(eng) == t["before"]
    assert not t["x"].buffered and not t["f"].buffered
    assert t["x"].epoch == 1 and t["f"].epoch == 1
    t["x"].insert([(3, 30)])
    t["x"].remove([(1, 11)])
    t["f"].insert([(3, 3.5)])
    t["x"].advance_to(2)
    t["f"].advance_to(2)
    for v in ("ident", "cnt", "fv", "sums"):
        eng.wait(t[v], timeout=T)
    assert rows(t["ident"]) == [(1, 10), (2, 20), (3, 30)]
    assert rows(t["cnt"]) == [(1, 1), (2, 1), (3, 1)]
    assert rows(t["sums"]) == [(1, 10), (2, 20), (3, 30)]
    assert rows(t["fv"]) == [(1, 1.5), (2, 2.5), (3, 3.5)]


# -- values of the wrong kind in a float64 column ----------------------------------------------------------

def _complex_frame(kind):
    if kind == "object_array":
        return {"k": [7], "v": np.array([np.complex128(2 + 3j)], dtype=object)}
    if kind == "pandas_object":
        return pd.DataFrame({"k": [7], "v": pd.Series([np.complex64(1.5 + 1j)], dtype=object)})
    return {"k": [7], "v": np.array([7 + 1j], dtype=np.clongdouble)}


@pytest.mark.parametrize("kind", ["object_array", "pandas_object", "clongdouble"])
def test_bug_complex_values_in_a_float_column_are_refused_not_truncated(ctx, kind):
    # a Python complex, or a complex128 array, is refused ("column 'v' is float64 but row 0 holds (2+3j)"):
    # the same value as a NumPy scalar in an object column, or in a long-double complex array, is stored as
    # its real part (2+3j -> 2.0) with only a NumPy ComplexWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(kp.SchemaError, match=r"column 'v' is float64 but row 0 holds"):
            ctx["f"].insert(_complex_frame(kind))
    intact(ctx)


@pytest.mark.parametrize("value", [2 + 3j, np.array([2 + 3j])], ids=["python_complex", "complex128_array"])
def test_python_complex_and_complex_arrays_are_refused_by_a_float_column(ctx, value):
    data = {"k": [7], "v": value if isinstance(value, np.ndarray) else [value]}
    with pytest.raises(kp.SchemaError, match=r"column 'v' is float64 but row 0 holds \(2\+3j\) \(complex\)"):
        ctx["f"].insert(data)
    intact(ctx)


# -- flat_map: a boolean mask given as the index --------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_bug_flat_map_boolean_index_is_refused_or_read_right(workers):
    # input row (2, 20) has multiplicity 3: every output row made from it must have 3 too. `a >= 0` is the
    # mask numpy users write; an index is one input row number per output row
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["a", "b"])
        x.update([(1, 10), (2, 20)], [1, 3])
        x.advance_to(1)
        try:
            with eng.dataflow("fm") as df:
                v = df.input("x").flat_map(lambda a: ({"c": a}, a >= 0), repeat=False).view("v")
            eng.wait(v, timeout=T)
            got = Counter({r[0]: r[1] for r in v.to_pandas(diffs=True).values.tolist()})
        except kp.KpgnbError as e:
            assert "bool" in str(e), str(e)  # refused as a mask, saying so
            return
        assert got == Counter({1: 1, 2: 3})


def test_flat_map_integer_index_keeps_each_rows_multiplicity():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a", "b"])
        x.update([(1, 10), (2, 20), (3, 30)], [1, 3, -2])
        x.advance_to(1)
        with eng.dataflow("fm") as df:
            v = df.input("x").flat_map(lambda a: ({"c": np.repeat(a, 2)}, np.repeat(np.arange(len(a)), 2)),
                                       repeat=False).view("v")
        eng.wait(v, timeout=T)
        got = Counter()
        for c, d in v.to_pandas(diffs=True).values.tolist():
            got[c] += d
        assert got == Counter({1: 2, 2: 6, 3: -4})


# -- option values that Python would take as true ----------------------------------------------------------

def test_bug_drop_cascade_must_be_a_bool(ctx):
    with pytest.raises(kp.ArgumentTypeError, match="cascade"):
        ctx["eng"].drop("base", cascade="no")
    intact(ctx)


def test_bug_dataflow_replace_must_be_a_bool(ctx):
    with pytest.raises(kp.ArgumentTypeError, match="replace"):
        with ctx["eng"].dataflow("base", replace="no") as df:
            df.input("x").view("other")
    intact(ctx)


def test_dataflow_replace_false_values_refuse_an_installed_name(ctx):
    for value in (False, None, 0, np.bool_(False)):
        with pytest.raises(kp.UsageError, match="a dataflow named 'base' is installed already"):
            ctx["eng"].dataflow("base", replace=value)
    intact(ctx)


def test_bug_flat_map_repeat_must_be_a_bool_or_none(ctx):
    with pytest.raises(kp.ArgumentTypeError, match="repeat"):
        with ctx["eng"].dataflow("bad") as df:
            df.input("x").flat_map(lambda a: ({"c": a}, np.arange(len(a))), repeat="no").view("q")
    intact(ctx)


def test_top_k_descending_string_is_refused(ctx):
    with pytest.raises(kp.ArgumentTypeError, match="descending"):
        with ctx["eng"].dataflow("bad") as df:
            df.input("x").top_k(by="a", order_by="b", k=1, descending="no").view("q")
    intact(ctx)


# -- Engine options ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, word", [({"workers": 2 ** 70}, "workers"), ({"workers": 1, "effort": ["lazy"]}, "effort")],
                         ids=["workers_2**70", "effort_list"])
def test_bug_engine_options_out_of_range_or_unhashable_are_kpgnb_errors(kw, word):
    with pytest.raises(kp.KpgnbError, match=word):
        kp.Engine(**kw).close()


@pytest.mark.parametrize("kw, error, match", [
    ({"workers": 0}, kp.UsageError, "workers must be an int, at least 1"),
    ({"workers": 1.0}, kp.ArgumentTypeError, "workers must be an int"),
    ({"workers": True}, kp.ArgumentTypeError, "workers must be an int"),
    ({"workers": 1, "effort": "fast"}, kp.UsageError, r"effort must be one of \['default', 'eager', 'lazy'\]"),
])
def test_engine_options_of_the_wrong_value_are_refused(kw, error, match):
    with pytest.raises(error, match=match):
        kp.Engine(**kw).close()


# -- goal bindings ---------------------------------------------------------------------------------------------

def test_bug_goal_retract_refuses_a_wrongly_typed_binding_as_ask_does():
    with kp.Engine(workers=2) as eng:
        e = eng.input("edge", ["src", "dst"], rows=[(1, 2), (2, 3)])
        e.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n", name="g")
        g = prog.goal("tc(?, _)")
        g.ask(1)
        eng.wait(g.view, timeout=T)
        assert rows(g.view) == [(1, 2), (1, 3)]
        with pytest.raises(kp.SchemaError, match=r"goal tc\(\?, _\) is '1' \(str\), but column 'x' of 'tc' is int64"):
            g.ask("1")
        with pytest.raises(kp.SchemaError, match=r"goal tc\(\?, _\) is '1' \(str\), but column 'x' of 'tc' is int64"):
            g.retract("1")  # (the user meant 1, read from a text box: it is not retracted)
        eng.wait(g.view, timeout=T)
        assert rows(g.view) == [(1, 2), (1, 3)]


# -- reading views ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [-1, "3"], ids=["negative", "str"])
def test_bug_view_head_refuses_a_bad_k(ctx, k):
    with pytest.raises(kp.KpgnbError, match=r"\bk\b"):
        ctx["ident"].head(k)
    intact(ctx)


@pytest.mark.parametrize("at, error", [("1", kp.ArgumentTypeError), (1.0, kp.ArgumentTypeError),
                                       (True, kp.ArgumentTypeError), (2 ** 70, kp.UsageError),
                                       (-1, kp.CompactedError)])
def test_view_at_of_the_wrong_kind_is_refused(ctx, at, error):
    with pytest.raises(error):
        ctx["ident"].to_pandas(at=at)
    intact(ctx)


# -- reduce ----------------------------------------------------------------------------------------------------

@njit
def _first(vals, cnts):
    return vals[:1].copy(), cnts[:1].copy()


def test_bug_reduce_with_no_columns_names_columns(ctx):
    with pytest.raises(kp.SchemaError, match="columns"):
        with ctx["eng"].dataflow("bad") as df:
            df.input("x").reduce(by="a", fn=_first, columns=[]).view("q")
    intact(ctx)


@njit
def _raise_on_big(vals, cnts):
    if vals[0, 0] >= 30:
        raise ValueError("value too big for this reduce")
    return vals[:1].copy(), cnts[:1].copy()


def test_reduce_raising_later_fails_only_its_dataflow_with_the_users_message(ctx):
    eng = ctx["eng"]
    with eng.dataflow("bad") as df:
        q = df.use("xa").reduce(by="a", fn=_raise_on_big, columns=["b"]).view("q")
    eng.wait(q, timeout=T)
    assert rows(q) == [(1, 10), (2, 20)]
    ctx["x"].insert([(3, 30)])
    ctx["x"].advance_to(2)
    with pytest.raises(kp.DataflowError, match=r"reduce \(defined at .*\) failed: ValueError: value too big"):
        eng.wait(q, timeout=T)
    assert eng.dataflows()["bad"] == "failed"
    eng.drop("bad")
    ctx["x"].remove([(3, 30)])  # (so that intact() sees the base rows plus its own)
    ctx["x"].advance_to(3)
    eng.wait(ctx["ident"], timeout=T)
    assert rows(ctx["ident"]) == BASE


# -- graphs and Drop options (held) ------------------------------------------------------------------------------

@pytest.mark.parametrize("case, match", [
    ("bfs_memory", r"ife\('bfs'\): memory='FULL'; choose one of \['full', 'jod', 'drop'\]"),
    ("bfs_drop_dict", r"drop= takes a kp.Drop\(...\), got \{'p': 0.5\}"),
    ("khop_k", r"khop needs k >= 0 hops \(an int\), got 1.0"),
    ("pagerank_alpha", r"alpha is the damping factor, a number from 0 to 1, got nan"),
])
def test_graph_query_option_errors_name_the_option(ctx, case, match):
    def fn(df):
        e = df.input("x").rename(a="src", b="dst")
        r = df.input("x").select("a").rename(a="node")
        if case == "bfs_memory":
            return graphs.bfs(e, r, memory="FULL")
        if case == "bfs_drop_dict":
            return graphs.bfs(e, r, memory="drop", drop={"p": 0.5})
        if case == "khop_k":
            return graphs.khop(e, r.rename(node="source"), 1.0)
        return graphs.pagerank(e, alpha=float("nan"))
    with pytest.raises(kp.SchemaError, match=match):
        with ctx["eng"].dataflow("bad") as df:
            fn(df).view("q")
    intact(ctx)


# -- refused rows leave nothing behind: the engine's symbol table ------------------------------------------------

@pytest.mark.parametrize("shape", ["tuples", "pandas"])
def test_bug_refused_rows_intern_no_strings(shape):
    with kp.Engine(workers=1) as eng:
        s = eng.input("s", ["name", "n"], dtypes=["str", "int64"], rows=[("kept", 1)])
        s.advance_to(1)
        before = len(eng.symbols)
        for i in range(50):
            bad = [(f"refused{i}", "x")] if shape == "tuples" else pd.DataFrame({"name": [f"refused{i}"], "n": [1.5]})
            with pytest.raises(kp.SchemaError, match="column 'n' is int64 but row 0 holds"):
                s.insert(bad)
        assert not s.buffered
        assert len(eng.symbols) == before  # "bad input changes nothing" (README, Errors)


# -- kp.spark.session options (checked before any JVM starts) ----------------------------------------------------

@pytest.mark.parametrize("kw, word", [({"cores": "abc"}, "cores"), ({"cores": None}, "cores"),
                                      ({"partitions": "x"}, "partitions")], ids=["cores_str", "cores_none", "partitions_str"])
def test_bug_spark_session_bad_options_are_kpgnb_errors(monkeypatch, kw, word):
    import os
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):  # (session() sets them)
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.delenv(var, raising=False)
    import kpgnb.spark as kspark

    def no_jvm(*args, **kwargs):  # (a running SparkSession would take the settings: stop before the JVM)
        raise AssertionError("session() reached the JVM with a bad option")
    monkeypatch.setattr(kspark, "_start_jvm", no_jvm)
    with pytest.raises(kp.KpgnbError, match=word):
        kp.spark.session(**kw)


# -- eng.input's columns, and rows given as NumPy arrays ---------------------------------------------------------

@pytest.mark.parametrize("cols", [{"src", "dst"}, frozenset({"src", "dst"})], ids=["set", "frozenset"])
def test_bug_input_columns_as_an_unordered_set_are_refused(cols):
    with kp.Engine(workers=1) as eng:
        with pytest.raises((kp.ArgumentTypeError, kp.SchemaError), match="columns"):
            eng.input("e", cols)
        assert eng.inputs() == {}


def test_input_columns_as_a_list_tuple_or_str_keep_their_order():
    with kp.Engine(workers=1) as eng:
        assert eng.input("l", ["src", "dst"]).schema.names == ("src", "dst")
        assert eng.input("t", ("dst", "src")).schema.names == ("dst", "src")
        assert eng.input("s", "node").schema.names == ("node",)


def test_bug_rows_as_numpy_arrays_are_taken_or_refused_with_the_right_reason():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a", "b"])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        try:
            x.insert(list(np.array([[5, 50], [6, 60]], np.int64)))
        except kp.SchemaError as e:
            assert "expected 2 values" not in str(e), str(e)  # it has 2 values: say what is wrong instead
            assert not x.buffered
            return
        x.advance_to(1)
        eng.wait(v, timeout=T)
        assert rows(v) == [(5, 50), (6, 60)]


# -- Collection.ife: a message function that fails or returns the wrong shape -----------------------------------

def _ife_view(eng, message, memory):
    e = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3), (3, 1)])
    r = eng.input("roots", ["node"], rows=[(1,)])
    e.advance_to(1)
    r.advance_to(1)
    with eng.dataflow("q") as df:
        start = df.input("roots").map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})
        return start.ife(df.input("edges"), key="node", node="node", value="dist", message=message,
                         agg="min", memory=memory).view("q")


def _boom(dist):
    if len(dist):
        raise ValueError("message boom")
    return dist + 1


def test_bug_ife_full_message_failure_names_ife_not_an_internal_flat_map():
    with kp.Engine(workers=2) as eng:
        v = _ife_view(eng, _boom, "full")
        with pytest.raises(kp.DataflowError, match="message boom") as info:
            eng.wait(v, timeout=T)
        msg = str(info.value)
        assert "flat_map" not in msg, msg


def test_ife_jod_message_failure_names_ife():
    with kp.Engine(workers=2) as eng:
        v = _ife_view(eng, _boom, "jod")
        with pytest.raises(kp.DataflowError, match=r"ife \(defined at .*\) failed: ValueError: message boom"):
            eng.wait(v, timeout=T)


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_bug_ife_message_returning_a_triple_says_what_was_expected(memory):
    with kp.Engine(workers=2) as eng:
        v = _ife_view(eng, lambda dist: (dist + 1, True, 1), memory)
        with pytest.raises(kp.DataflowError) as info:
            eng.wait(v, timeout=T)
        msg = str(info.value)
        assert "unpack" not in msg and "message function" in msg, msg


def test_ife_message_of_the_wrong_length_says_what_was_expected():
    with kp.Engine(workers=2) as eng:
        v = _ife_view(eng, lambda dist: np.append(dist, 1) + 1, "full")
        with pytest.raises(kp.DataflowError, match=r"the message function must return 1 values \(one per message\) "
                                                   r"or one value, got shape \(2,\)"):
            eng.wait(v, timeout=T)
