"""Session 47 attack: column types and values at the edges, end to end (input -> operators -> views ->
to_pandas / trace reads), through the public API.

The xfail tests are bugs found in this round (each fails today and passes once fixed); the others pin down
edge behaviour that held and that the earlier rounds did not check."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp


def _frame_input_values(eng, name, frame):
    """Load ``frame`` (a pandas frame or a dict of arrays) as Datalog's inputs= does (the path of
    ``%%dataflow --inputs`` too: dtypes inferred from the frame), and read the relation back."""
    prog = eng.datalog("q(x) :- e(x).", inputs={"e": frame}, name=name)
    try:
        eng.wait(prog["q"])
        out = prog["q"].to_pandas()
        return str(out["x"].dtype), sorted(out["x"].tolist(), key=repr)
    finally:
        eng.drop(name)


# -- bugs ----------------------------------------------------------------------------------------------------

def test_dict_input_with_an_int_beyond_int64_is_refused_not_rounded_to_float():
    """README: an int64 column refuses 2**63 'never wrapped'; a dict of arrays is a documented frame for
    ``--inputs`` / ``inputs=``. ``{"x": [-1, 2**63 + 1]}``: NumPy makes float64 of that list, so the
    column is inferred float64 and 2**63 + 1 is silently stored as 9.223372036854775808e18 (the +1 is
    lost). The same values in a pandas frame or a declared int64 input are refused."""
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.SchemaError, match="'x'"):
            _frame_input_values(eng, "p", {"x": [-1, 2**63 + 1]})
        assert "e" not in eng.inputs()  # nothing loaded is left behind


def test_map_returning_a_list_of_strings_keeps_trailing_nuls():
    """Inputs keep "a\\x00" apart from "a" (lists are read as objects); a map whose function returns its
    str column as a Python list has it converted with np.asarray, whose fixed-width 'U' dtype drops
    trailing NULs: "a\\x00" comes out as "a", silently equal to another string."""
    with kp.Engine(workers=1) as eng:
        s = eng.input("s", ["s"], ["str"], rows=[("a",), ("b",)])
        s.advance_to(1)
        with eng.dataflow("m") as df:
            v = df.input("s").map(lambda s: {"t": [x + "\x00" for x in s]}).view("v")
        eng.wait(v)
        assert sorted(v.to_pandas()["t"].tolist()) == ["a\x00", "b\x00"]


def test_map_output_of_an_unstorable_dtype_names_the_column():
    """README: bad values raise a SchemaError naming the column. A map returning a datetime64 column is
    refused when the dataflow is built with 'cannot store values of dtype datetime64[s]', which names
    neither the column ('when') nor the map function; the scalar case of the same check names both."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        with pytest.raises(kp.SchemaError, match="'when'"):
            with eng.dataflow("m") as df:
                df.input("a").map(lambda k: {"k": k, "when": k.astype("datetime64[s]")}).view("v")
        assert "m" not in eng.dataflows()


def test_column_names_that_python_normalizes_are_refused_or_reachable_by_parameters():
    """README: 'Column names are Python identifiers, as the parameters of map/filter functions name them'.
    Python NFKC-normalizes identifiers in source: a parameter written 'e\\u0301' (or 'ﬁ') is named 'é'
    ('fi'). The schema accepts the column 'e\\u0301' (a pandas frame read from macOS file names has such
    names), and a map naming it fails with "the map function's parameter 'é' is not a column; columns are
    ['é', 'k']", the two names printed identically. Either the name is refused (or normalized) when the
    input is made, or the parameter reaches the column."""
    nfd = "e\u0301"
    with kp.Engine(workers=1) as eng:
        try:
            a = eng.input("a", [nfd, "k"], rows=[(1, 2)])
        except kp.SchemaError:
            return  # refused up front: fine
        a.advance_to(1)
        fn = eval(f"lambda {nfd}, k: {{'y': {nfd} + k}}")  # what a cell with that parameter defines
        with eng.dataflow("m") as df:
            v = df.input("a").map(fn).view("v")
        eng.wait(v)
        assert v.to_pandas()["y"].tolist() == [3]


def test_seek_keys_refuses_keys_that_are_not_int64():
    """README: seek_keys takes 'key columns as a kk x n int64 array'. Given np.array([1.5]) (or ["1"]) it
    casts with np.asarray(keys, np.int64) and answers for key 1, a wrong answer for a float-keyed
    arrangement whose user passes the float value; it should refuse a key that is not an integer."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"], key="k", rows=[(1, 10), (2, 20)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("a").arrange_by("k").export("byk")
            v = df.input("a").view("v")
        eng.wait(v)
        h = eng.trace("byk")
        try:
            for bad in (np.array([1.5]), ["1"]):
                with pytest.raises((TypeError, ValueError)):
                    h.cursor(0).seek_keys(bad)
        finally:
            h.close()


# -- what held ----------------------------------------------------------------------------------------------

def test_frame_inputs_infer_dtypes_from_pandas_extension_and_categorical_columns():
    """Inferred input dtypes: nullable Int64/boolean/Float64, Arrow-backed and categorical columns come in
    as int64/bool/float64/str with their values (NUL and unicode strings kept apart), float32 widened."""
    with kp.Engine(workers=1) as eng:
        cases = [
            (pd.DataFrame({"x": pd.array([2**63 - 1, -2**63], dtype="Int64")}), "int64", [-2**63, 2**63 - 1]),
            (pd.DataFrame({"x": pd.array([True, False], dtype="boolean")}), "bool", [False, True]),
            (pd.DataFrame({"x": pd.array(["a", "a\x00", "\u00e9", "e\u0301"], dtype="string[pyarrow]")}), "object",
             sorted(["a", "a\x00", "\u00e9", "e\u0301"], key=repr)),
            (pd.DataFrame({"x": pd.Categorical([3, 1, 3])}), "int64", [1, 3]),
            (pd.DataFrame({"x": pd.Categorical(["b", "", "b"])}), "object", ["", "b"]),
            (pd.DataFrame({"x": np.array([0.1], np.float32)}), "float64", [float(np.float32(0.1))]),
            (pd.DataFrame({"x": pd.array([1.5], dtype="double[pyarrow]")}), "float64", [1.5]),
        ]
        for i, (frame, dtype, values) in enumerate(cases):
            assert _frame_input_values(eng, f"p{i}", frame) == (dtype, values), frame.dtypes
        for i, frame in enumerate([pd.DataFrame({"x": pd.array([1, None], dtype="Int64")}),
                                   pd.DataFrame({"x": pd.date_range("2020", periods=2, tz="UTC")}),
                                   pd.DataFrame({"x": pd.Series([1, "a"], dtype=object)})]):
            with pytest.raises(kp.SchemaError, match="'x'"):
                _frame_input_values(eng, f"bad{i}", frame)
            assert "e" not in eng.inputs()


def test_float_sum_forgets_nan_inf_and_large_terms_once_their_rows_go():
    """A float sum is the group's sum as it is now, not a running total: a NaN or an infinity removed
    again leaves no trace, inf - inf is NaN while both are there, and 1e20 + 1 - 1e20 is exact once 1e20
    is gone. Other groups (subnormals, overflow to inf) keep their values."""
    nan, inf = float("nan"), float("inf")
    with kp.Engine(workers=2) as eng:
        f = eng.input("f", ["g", "v"], ["int64", "float64"])
        f.insert([(0, nan), (0, 1.0), (1, inf), (1, -inf), (2, 5e-324), (2, 5e-324), (3, 1e20), (3, 1.0),
                  (4, 1e308), (4, 1e308)])
        f.advance_to(1)
        with eng.dataflow("s") as df:
            s = df.input("f").sum(by="g", col="v").view("s")
        eng.wait(s)

        def read():
            p = s.to_pandas().sort_values("g")
            return [(g, "nan" if v != v else v) for g, v in zip(p["g"], p["v"])]
        assert read() == [(0, "nan"), (1, "nan"), (2, 1e-323), (3, 1e20), (4, inf)]
        f.remove([(0, nan), (1, -inf), (3, 1e20)])
        f.advance_to(2)
        eng.wait(s)
        assert read() == [(0, 1.0), (1, inf), (2, 1e-323), (3, 1.0), (4, inf)]


def test_datalog_avg_near_int64_limits_and_string_comparisons_by_code_point():
    """avg<v> over ints near 2**63 does not overflow (only sum<v> may); string comparisons with constants
    and min/max go by code point (U+FFFF before an astral emoji, "" first, "a" before "a\\x00")."""
    m = 2**63 - 1
    with kp.Engine(workers=2) as eng:
        eng.input("a", ["g", "v"], rows=[(0, m), (0, m - 1), (1, 2**53 + 1), (1, 2**53 + 3)]).advance_to(1)
        eng.input("s", ["v"], ["str"], rows=[("b",), ("a",), ("a\x00",), ("\uffff",), ("\U0001F600",), ("",)]
                  ).advance_to(1)
        prog = eng.datalog("""
        av(g, avg<v>) :- a(g, v).
        lo(v) :- s(v), v < "b".
        hi(v) :- s(v), v >= "\\uffff".
        mx(max<v>) :- s(v).
        """, name="q")
        for r in ("av", "lo", "hi", "mx"):
            eng.wait(prog[r])
        av = prog["av"].to_pandas().sort_values("g")
        assert av["v"].tolist() == [float(m - 0.5), float(2**53 + 2)]
        assert sorted(prog["lo"].to_pandas()["v"]) == ["", "a", "a\x00"]
        assert sorted(prog["hi"].to_pandas()["v"]) == ["\uffff", "\U0001F600"]
        assert prog["mx"].to_pandas()["v"].tolist() == ["\U0001F600"]
