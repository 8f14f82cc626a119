"""Attacks on eng.input(...) and InputSession.insert/remove/update/advance_to through the public API. The
rule: bad input raises a SchemaError (or UsageError) naming the column/row and what was expected, and
changes nothing; the input's earlier rows and every view stay intact and correct.

Tests named ``test_bug_*`` assert the documented behaviour for bugs an attack found (each failed before its fix)."""
import datetime
import decimal
import fractions

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import kpgnb as kp

BASE = [(1, 1), (2, 2)]


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


@pytest.fixture
def ctx():
    eng = kp.Engine(workers=2)
    x = eng.input("x", ["a", "b"])
    x.insert(BASE)
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
        c = df.input("x").count(by="a").view("c")
    eng.wait(v)
    yield eng, x, v, c
    eng.close()


def _intact(eng, x, v, c, epoch=1):
    """The refused call changed nothing: the epoch, the view, and a good insert afterwards is exact."""
    assert x.epoch == epoch
    assert rows(v) == BASE
    x.insert([(3, 3)])
    x.advance_to(epoch + 1)
    eng.wait(v, timeout=30)
    eng.wait(c, timeout=30)
    assert rows(v, diffs=True) == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
    assert rows(c) == [(1, 1), (2, 1), (3, 1)]


# -- values an int64 column must refuse (README: ints within int64, bools, floats with no fraction) ----------
INT64_REFUSED = [
    ("decimal_fraction", [(decimal.Decimal("1.5"), 1)], "column 'a'"),
    ("fraction", [(fractions.Fraction(3, 2), 1)], "column 'a'"),
    ("bytes", [(b"7", 1)], "column 'a'"),
    ("datetime64_ns", {"a": np.array(["2020-01-01"], "datetime64[ns]"), "b": [1]}, "column 'a'"),
    ("timedelta64_ns", {"a": np.array([5], "timedelta64[ns]"), "b": [1]}, "column 'a'"),
    ("pandas_datetime", pd.DataFrame({"a": pd.to_datetime(["2020-01-01"]), "b": [1]}), "column 'a'"),
    ("pandas_timedelta", pd.DataFrame({"a": pd.to_timedelta([1], "s"), "b": [1]}), "column 'a'"),
    ("python_datetime", [(datetime.datetime(2020, 1, 1), 1)], "column 'a'"),
]


@pytest.mark.parametrize("bad, match", [c[1:] for c in INT64_REFUSED], ids=[c[0] for c in INT64_REFUSED])
def test_bug_int64_column_refuses_non_integers_and_times(ctx, bad, match):
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError, match=match):
        x.insert(bad)
    _intact(eng, x, v, c)


# -- diffs: README "diffs must be integers"; a float with a fraction, inf, or beyond int64 must be refused -----
DIFFS_REFUSED = [
    ("scalar_fraction", 1.5),
    ("inf", [np.inf]),
    ("minus_inf", [-np.inf]),
    ("float_beyond_int64", [1e30]),
    ("str", "3"),
    ("python_int_beyond_int64", 2 ** 70),
    ("none", None),
]


@pytest.mark.parametrize("diffs", [c[1] for c in DIFFS_REFUSED], ids=[c[0] for c in DIFFS_REFUSED])
def test_bug_update_refuses_bad_diffs_with_schema_error(ctx, diffs):
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError, match="diff"):
        x.update([(9, 9)], diffs)
    _intact(eng, x, v, c)


def test_bug_infinite_diff_does_not_corrupt_an_existing_row(ctx):
    """The worst case of the above: update(row, [inf]) on a loaded row turns its multiplicity into -2**63."""
    eng, x, v, c = ctx
    try:
        x.update([(1, 1)], np.array([np.inf]))
    except kp.SchemaError:
        pass
    x.advance_to(2)
    eng.wait(v, timeout=30)
    assert rows(v, diffs=True) == [(1, 1, 1), (2, 2, 1)]


# -- advance_to beyond int64 -----------------------------------------------------------------------------
@pytest.mark.parametrize("epoch", [2 ** 63, np.uint64(2 ** 63), 2 ** 80])
def test_bug_advance_to_beyond_int64_is_refused_and_input_keeps_working(ctx, epoch):
    eng, x, v, c = ctx
    x.insert([(3, 3)])
    with pytest.raises((kp.UsageError, kp.SchemaError, TypeError, OverflowError)):
        x.advance_to(epoch)
    assert x.epoch == 1
    x.advance_to(2)
    eng.wait(v, timeout=10)
    assert rows(v) == BASE + [(3, 3)]


def test_advance_to_int64_max_works(ctx):
    eng, x, v, c = ctx
    x.insert([(3, 3)])
    x.advance_to(2 ** 63 - 1)
    eng.wait(v, timeout=10)
    assert rows(v) == BASE + [(3, 3)]


# -- shapes of rows that must be SchemaErrors, not raw TypeErrors ---------------------------------------------
@pytest.mark.parametrize("bad", [{"a": 1, "b": 2}, {"a": "12", "b": "34"}, None, 5],
                         ids=["dict_of_scalars", "dict_of_strings", "none", "int"])
def test_bug_malformed_rows_raise_schema_error(ctx, bad):
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError):
        x.insert(bad)
    _intact(eng, x, v, c)


def test_bug_input_name_must_be_a_string():
    """eng.input(5, ...) is accepted, and afterwards every 'no input named ...' error is a raw TypeError
    (the message sorts the input names, mixing int and str)."""
    eng = kp.Engine(workers=1)
    try:
        try:
            eng.input(5, ["a"])
        except (kp.UsageError, kp.SchemaError, TypeError):
            pass
        eng.input("x", ["a"])
        with pytest.raises(kp.SchemaError, match="no input named 'nope'"):
            with eng.dataflow("d") as df:
                df.input("nope")
    finally:
        eng.close()


def test_bug_flat_map_fractional_repeat_counts_are_refused():
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["a"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").flat_map(lambda a: ({"a": a}, np.full(len(a), 1.7)), repeat=True).view("v")
        with pytest.raises(kp.DataflowError, match="repeat counts|integer"):
            eng.wait(v, timeout=30)
    finally:
        eng.close()


def test_bug_arrow_table_with_duplicate_column_names_is_a_schema_error(ctx):
    eng, x, v, c = ctx
    tbl = pa.Table.from_arrays([pa.array([1]), pa.array([2]), pa.array([3])], names=["a", "b", "b"])
    with pytest.raises(kp.SchemaError, match="'b'"):
        x.insert(tbl)
    _intact(eng, x, v, c)


# -- what held up (regression guards) -----------------------------------------------------------------------
HELD = [
    ("nullable_Int64_NA", pd.DataFrame({"a": pd.array([1, None], "Int64"), "b": [3, 4]})),
    ("boolean_NA", pd.DataFrame({"a": pd.array([True, None], "boolean"), "b": [3, 4]})),
    ("categorical_NaN", pd.DataFrame({"a": pd.Categorical([1, None]), "b": [3, 4]})),
    ("object_mixed", pd.DataFrame({"a": pd.Series([1, "2"], dtype=object), "b": [3, 4]})),
    ("uint64_series", pd.DataFrame({"a": np.array([2 ** 63], np.uint64), "b": [3]})),
    ("duplicate_pandas_columns", pd.DataFrame([[1, 2, 3]], columns=["a", "b", "b"])),
    ("extra_column", pd.DataFrame({"a": [1], "b": [2], "c": [3]})),
    ("missing_column", pd.DataFrame({"a": [1]})),
    ("arrow_uint64", pa.table({"a": pa.array([2 ** 63], pa.uint64()), "b": [1]})),
    ("arrow_nan", pa.table({"a": pa.array([float("nan")]), "b": [1]})),
    ("arrow_timestamp", pa.table({"a": pa.array([1], pa.timestamp("s")), "b": [1]})),
    ("arrow_dict_null", pa.table({"a": pa.array([5, None]).dictionary_encode(), "b": [1, 2]})),
    ("records_mismatch", [{"a": 1, "b": 2}, {"a": 1}]),
    ("complex", {"a": np.array([1 + 0j]), "b": [1]}),
    ("ragged_dict", {"a": [1, 2], "b": [1]}),
]


@pytest.mark.parametrize("bad", [c[1] for c in HELD], ids=[c[0] for c in HELD])
def test_refused_inputs_change_nothing(ctx, bad):
    eng, x, v, c = ctx
    with pytest.raises(kp.SchemaError):
        x.insert(bad)
    _intact(eng, x, v, c)


def test_wrong_column_order_and_categoricals_are_taken_by_name(ctx):
    eng, x, v, c = ctx
    x.insert(pd.DataFrame({"b": [4, 5], "a": pd.Categorical([4, 5])}))
    x.insert(pa.table({"b": [6], "a": pa.array([6]).dictionary_encode()}))
    x.insert([{"b": 7, "a": 7}])
    x.advance_to(2)
    eng.wait(v, timeout=30)
    assert rows(v) == BASE + [(4, 4), (5, 5), (6, 6), (7, 7)]


def test_closed_and_dropped_inputs_refuse_everything():
    eng = kp.Engine(workers=1)
    try:
        z = eng.input("z", ["a"], rows=[(1,)])
        z.advance_to(1)
        eng.drop_input("z")
        for call in (lambda: z.insert([2]), lambda: z.advance_to(5), lambda: z.close(),
                     lambda: z.update([1], [1])):
            with pytest.raises(kp.UsageError, match="dropped"):
                call()
        w = eng.input("z", ["a", "b"])  # the name is free again, the old session stays dead
        with pytest.raises(kp.UsageError):
            z.insert([3])
        w.insert([(1, 1)])
        w.close()
        for call in (lambda: w.advance_to(10), lambda: w.insert([(2, 2)]), lambda: w.flush()):
            with pytest.raises(kp.UsageError, match="closed"):
                call()
        with eng.dataflow("zz") as df:
            zv = df.input("z").view("zv")
        eng.wait(zv, timeout=10)
        assert rows(zv) == [(1, 1)]
    finally:
        eng.close()
