"""Bad input (issue 9): every case raises its own KpgnbError subclass with a message that names what is
wrong, and changes nothing -- the views and the input's epoch are as before, and good data inserted
afterwards gives exactly the expected answer (so nothing of the refused call slipped into a buffer)."""
import numpy as np
import pytest

import kpgnb as kp

BASE = [(1, 1), (2, 2)]
GOOD = (3, 3)
I64 = r"outside int64's range \[-2\*\*63, 2\*\*63 - 1\]"


def rows(view):
    return sorted(map(tuple, view.to_pandas().itertuples(index=False)))


@pytest.fixture
def ctx():
    eng = kp.Engine(workers=2)
    other = kp.Engine(workers=1)
    x = eng.input("x", ["a", "b"])
    x.insert(BASE)
    x.advance_to(1)
    c = eng.input("c", ["a"])
    c.close()
    with eng.dataflow("d") as df:
        src = df.input("x")
        ident = src.view("ident")
        cnt = src.count(by="a").view("cnt")
        src.arrange_by("a").export("by_a")
    other.input("x", ["a"])
    with other.dataflow("d") as df:
        foreign = df.input("x").view("ident")
    eng.wait(ident)
    eng.wait(cnt)
    yield dict(eng=eng, x=x, c=c, ident=ident, cnt=cnt, foreign=foreign)
    eng.close()
    other.close()


def _run_map(fn, **kw):
    def act(t):
        with t["eng"].dataflow("bad") as df:
            v = df.input("x").map(fn, **kw).view("bad")
        t["eng"].wait(v)
    return act


def _closed(act):
    def run(t):
        t["eng"].close()
        act(t)
    return run


# id, the bad call, error type, message, what the call leaves: "same" (engine as before), "failed" (the
# new dataflow "bad" failed, nothing else changed), "closed" (the engine is closed; the epoch did not move)
def _pd():
    import pandas
    return pandas


CASES = [
    # 1. values that do not fit int64
    ("int_2**63", lambda t: t["x"].insert([(2 ** 63, 1)]), kp.SchemaError,
     rf"column 'a' is int64 but row 0 holds 9223372036854775808 \(int\), {I64}", "same"),
    ("int_2**64", lambda t: t["x"].insert([(1, 1), (1, 2 ** 64)]), kp.SchemaError,
     rf"column 'b' is int64 but row 1 holds 18446744073709551616 \(int\), {I64}", "same"),
    ("int_below_min", lambda t: t["x"].insert([(-(2 ** 63) - 1, 1)]), kp.SchemaError,
     rf"column 'a' is int64 but row 0 holds -9223372036854775809 \(int\), {I64}", "same"),
    ("int_mixed_list", lambda t: t["x"].insert([(2 ** 63, 1), (-1, 1)]), kp.SchemaError,
     rf"column 'a' is int64 but row 0 holds 9223372036854775808 \(int\), {I64}", "same"),
    ("pandas_nullable_na", lambda t: t["x"].insert(_pd().DataFrame({"a": _pd().array([1, None], dtype="Int64"),
                                                                    "b": [1, 2]})),
     kp.SchemaError, r"column 'a' holds a null \(NA\) at row 1; kpgnb columns cannot hold nulls", "same"),
    ("uint64_dict", lambda t: t["x"].insert({"a": np.array([1, 2 ** 63], np.uint64), "b": [1, 2]}), kp.SchemaError,
     rf"column 'a' is int64 but row 1 holds 9223372036854775808 \(uint64\), {I64}", "same"),
    ("uint64_2d", lambda t: t["x"].insert(np.array([[1, 2], [3, 2 ** 64 - 1]], np.uint64)), kp.SchemaError,
     rf"column 'b' is int64 but row 1 holds 18446744073709551615 \(uint64\), {I64}", "same"),
    ("uint64_diffs", lambda t: t["x"].update([(5, 5)], np.array([2 ** 63], np.uint64)), kp.SchemaError,
     r"diffs must be integers of magnitude below 2\*\*62, but row 0 has diff 9223372036854775808", "same"),
    ("float_fraction", lambda t: t["x"].insert([(1, 1), (1.5, 2)]), kp.SchemaError,
     r"column 'a' is int64 but row 1 holds 1.5 \(float\), which is not an integer", "same"),
    ("float_array_fraction", lambda t: t["x"].insert({"a": np.array([1.0, 2.25]), "b": [1, 2]}), kp.SchemaError,
     r"column 'a' is int64 but row 1 holds 2.25 \(float64\), which is not an integer", "same"),
    ("float_too_big", lambda t: t["x"].insert({"a": np.array([2.0 ** 63]), "b": [1]}), kp.SchemaError,
     rf"column 'a' is int64 but row 0 holds 9.223372036854776e\+18 \(float64\), {I64}", "same"),
    ("nan_into_int", lambda t: t["x"].insert({"a": [1, 2], "b": np.array([np.nan, 1.0])}), kp.SchemaError,
     r"column 'b' is int64 but row 0 holds nan \(float64\), which is not an integer", "same"),
    ("nan_in_tuples", lambda t: t["x"].insert([(1, float("nan"))]), kp.SchemaError,
     r"column 'b' is int64 but row 0 holds nan \(float\), which is not an integer", "same"),
    # 2. a map returning a scalar: at definition time (the trial call) and at run time
    ("map_scalar_trial", _run_map(lambda a, b: {"a": a, "k": 7}), kp.SchemaError,
     r"the map function at .*test_bad_input.py.* returned a scalar \(7\) for column 'k'; expected a column "
     r"array with one value per row", "same"),
    ("map_scalar_run", _run_map(lambda a, b: {"k": a if len(a) == 0 else 7}), kp.DataflowError,
     r"the map function returned a scalar \(7\) for column 'k'; expected a column array of length [12]", "failed"),
    ("flat_map_scalar", lambda t: t["eng"].dataflow("bad").__enter__().input("x").flat_map(
        lambda a, b: ({"k": 1}, np.ones(len(a)))), kp.SchemaError,
     r"the flat_map function at .* returned a scalar \(1\) for column 'k'", "same"),
    # 3. a dtype inferred from the trial call is reported as inferred; one given with out= as declared
    ("udf_str_inferred", _run_map(lambda a, b: {"s": a if len(a) == 0 else a.astype(str)}), kp.DataflowError,
     r"returned str values for column 's', but no dtype was declared for it: int64 was inferred from a trial "
     r"call on an empty batch; pass out=\{'s': 'str'\}", "failed"),
    ("udf_str_declared", _run_map(lambda a, b: {"s": a.astype(str)}, out={"s": "int64"}), kp.DataflowError,
     r"returned str values for column 's', which the dataflow declared int64; pass out=\{'s': 'str'\}", "failed"),
    # 4. a closed engine refuses everything, and a refused advance_to leaves the epoch
    ("closed_insert", _closed(lambda t: t["x"].insert([GOOD])), kp.EngineError, "the engine is closed", "closed"),
    ("closed_advance", lambda t: (t["x"].insert([GOOD]), t["eng"].close(), t["x"].advance_to(5)),
     kp.EngineError, "the engine is closed", "closed"),
    ("closed_input", _closed(lambda t: t["eng"].input("y", ["a"])), kp.EngineError, "the engine is closed", "closed"),
    ("closed_dataflow", _closed(lambda t: t["eng"].dataflow("new")), kp.EngineError, "the engine is closed",
     "closed"),
    ("closed_drop", _closed(lambda t: t["eng"].drop("d")), kp.EngineError, "the engine is closed", "closed"),
    ("closed_wait_view", _closed(lambda t: t["eng"].wait(t["ident"])), kp.EngineError, "the engine is closed",
     "closed"),
    ("closed_wait", _closed(lambda t: t["eng"].wait()), kp.EngineError, "the engine is closed", "closed"),
    ("closed_trace", _closed(lambda t: t["eng"].trace("by_a")), kp.EngineError, "the engine is closed", "closed"),
    ("closed_read", _closed(lambda t: t["ident"].to_pandas()), kp.EngineError, "the engine is closed", "closed"),
    ("closed_len", _closed(lambda t: len(t["cnt"])), kp.EngineError, "the engine is closed", "closed"),
    ("closed_follow", _closed(lambda t: t["cnt"].follow()), kp.EngineError, "the engine is closed", "closed"),
    # 5. a view of another engine
    ("wait_foreign_view", lambda t: t["eng"].wait(t["foreign"]), kp.UsageError,
     r"the view belongs to another engine", "same"),
    # usage errors: KpgnbError, and still the ValueError / KeyError they were
    ("drop_unknown", lambda t: t["eng"].drop("nope"), kp.UnknownNameError, r"no dataflow named 'nope'", "same"),
    ("trace_unknown", lambda t: t["eng"].trace("nope"), kp.UnknownNameError, r"no arrangement named 'nope'",
     "same"),
    ("input_twice", lambda t: t["eng"].input("x", ["a"]), kp.UsageError, r"an input named 'x' exists already",
     "same"),
    ("dataflow_twice", lambda t: t["eng"].dataflow("d"), kp.UsageError, r"a dataflow named 'd' is installed",
     "same"),
    ("epoch_back", lambda t: t["x"].advance_to(0), kp.UsageError, r"input 'x' is at epoch 1; epochs only advance",
     "same"),
    ("closed_input_insert", lambda t: t["c"].insert([1]), kp.UsageError, r"input 'c' is closed", "same"),
]


@pytest.mark.parametrize("act, error, match, leaves", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(ctx, act, error, match, leaves):
    eng, x, ident, cnt = ctx["eng"], ctx["x"], ctx["ident"], ctx["cnt"]
    before = (rows(ident), rows(cnt))
    with pytest.raises(error, match=match) as info:
        act(ctx)
    assert isinstance(info.value, kp.KpgnbError)
    if error is kp.UsageError:
        assert isinstance(info.value, ValueError)
    if error is kp.UnknownNameError:
        assert isinstance(info.value, KeyError)
    assert x.epoch == 1
    if leaves == "closed":
        with pytest.raises(kp.EngineError, match="the engine is closed"):
            x.insert([GOOD])
        with pytest.raises(kp.EngineError, match="the engine is closed"):
            rows(ident)
        assert x.epoch == 1
        return
    if leaves == "failed":
        assert eng.dataflows() == {"d": "running", "bad": "failed"}
        eng.drop("bad")
    assert eng.dataflows() == {"d": "running"}
    assert (rows(ident), rows(cnt)) == before
    x.insert([GOOD])
    x.advance_to(2)
    eng.wait(ident)
    eng.wait(cnt)
    assert rows(ident) == sorted(BASE + [GOOD])
    assert rows(cnt) == [(1, 1), (2, 1), (3, 1)]


def test_what_int64_columns_accept(ctx):
    """Floats with no fractional part, bools, int64's extremes and uint64 values below 2**63 are kept."""
    eng, x, ident = ctx["eng"], ctx["x"], ctx["ident"]
    x.insert([(3.0, True), (-(2 ** 63), 2 ** 63 - 1)])
    x.insert({"a": np.array([4, 5], np.uint64), "b": np.array([6.0, -7.0])})
    x.advance_to(2)
    eng.wait(ident)
    assert rows(ident) == sorted(BASE + [(3, 1), (-(2 ** 63), 2 ** 63 - 1), (4, 6), (5, -7)])


def test_udf_returning_strings_is_inferred_as_str(ctx):
    """The empty trial batch says nothing of a list comprehension's type: a one-row trial tells."""
    eng = ctx["eng"]
    with eng.dataflow("s") as df:
        src = df.input("x")
        v1 = src.map(lambda a, b: {"s": [f"n{q}" for q in a]}).view("v1")
        v2 = src.map(lambda a, b: {"s": np.array([str(q) for q in b], dtype=object)}).view("v2")
    assert v1.schema.dtypes == ("str",) and v2.schema.dtypes == ("str",)
    eng.wait(v1)
    eng.wait(v2)
    assert rows(v1) == [("n1",), ("n2",)] and rows(v2) == [("1",), ("2",)]
