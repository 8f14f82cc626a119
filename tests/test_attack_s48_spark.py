"""Session 48 attack on the Spark side (README "Spark" and "Scale out on Spark"): Spark DataFrames as inputs,
views back to Spark, and ``kp.spark.run`` against the embedded engine on the same data.

Tests marked xfail (strict) assert the documented (or obviously expected) behaviour where this attack found a
bug; the others pin down behaviour that was probed, held, and was not covered before: a loop of float
distances over str node ids with NaN, inf, -0.0 and negative multiplicities; ordered reductions over strings
beyond the BMP with retractions; Spark integer, boolean and float columns into inputs of other dtypes.
One SparkSession for the run (``spark`` in tests/conftest.py)."""
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::RuntimeWarning")

_SPARK_TYPE = {"int64": "long", "float64": "double", "str": "string", "bool": "boolean"}
_INF, _NAN = float("inf"), float("nan")


def _canon(x):
    """A value comparable across the engine and Spark: NaN as a token, the sign of a zero kept."""
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if x == 0:
            return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return x


def _engine(build, frames, dtypes):
    """Each view of ``build`` on the engine as Counter(row -> multiplicity); frames carry a ``diff`` column."""
    with kp.Engine(workers=2) as eng:
        for n, fr in frames.items():
            cols = [c for c in fr.columns if c != "diff"]
            inp = eng.input(n, cols, [dtypes[n][c] for c in cols])
            inp.update(fr[cols], fr["diff"].to_numpy())
            inp.advance_to(1)
        with eng.dataflow("d") as df:
            build(df)
        eng.wait("d", timeout=120)
        return {name: Counter({tuple(map(_canon, r[:-1])): r[-1]
                               for r in v.to_pandas(diffs=True).itertuples(index=False, name=None)})
                for name, v in df.views.items()}


def _sdfs(frames, dtypes, spark):
    out = {}
    for n, fr in frames.items():
        schema = ", ".join(f"{c} {_SPARK_TYPE[dtypes[n].get(c, 'int64')]}" for c in fr.columns)
        rows = [tuple(x.item() if hasattr(x, "item") else x for x in t) for t in fr.itertuples(index=False, name=None)]
        out[n] = spark.createDataFrame(rows, schema)
    return out


def _spark(build, frames, dtypes, spark):
    out = ks.run(build, _sdfs(frames, dtypes, spark), spark=spark, diff_col="diff", diffs=True)
    res = {}
    for name, sdf in out.items():
        c = Counter()
        for r in sdf.collect():
            c[tuple(map(_canon, r[:-1]))] += r[-1]
        res[name] = Counter({k: v for k, v in c.items() if v})
    return res


# -- 1. kp.spark.run against the engine: what agrees ------------------------------------------------------------

_EDGES = pd.DataFrame({"src": ["a", "a", "b", "c", "b", "d", "e", "é", "a"],
                       "dst": ["b", "c", "c", "d", "d", "é", "a", "a", "e"],
                       "w": [1.0, 4.0, _NAN, 0.5, _INF, -0.0, 2.0, 0.25, 1e308],
                       "diff": [1, 1, 1, 2, 1, 1, -1, 1, 1]})
_ROOTS = pd.DataFrame({"n": ["a", "zz", "c"], "dist": [0.0, 0.0, -0.0], "diff": [1, 1, -1]})
_GDT = {"E": {"src": "str", "dst": "str", "w": "float64"}, "R": {"n": "str", "dist": "float64"}}


def _float_paths(df):
    """Shortest float distances over str node ids (a NaN weight loses every min, an inf one too, -0.0 is 0.0;
    an edge of multiplicity -1 and a root retracted), and the argmax/top_k/sum of the weights with their ties,
    NaN and infinities."""
    e = df.input("E")
    arranged = e.arrange_by("src")
    df.input("R").iterate(lambda d: d.join(arranged, left_on="n", right_on="src")
                          .map(lambda dst, w, dist: {"n": dst, "dist": dist + w})
                          .concat(d).min(by="n", col="dist")).view("shortest")
    e.argmax(by="src", col="w").view("argmax")
    e.top_k(by="src", order_by="w", k=2, descending=False).view("top2")
    e.sum(by="dst", col="w").view("sum")


def test_float_loops_over_str_nodes_with_nan_inf_and_retractions_agree(spark):
    want = _engine(_float_paths, {"E": _EDGES, "R": _ROOTS}, _GDT)
    assert want["shortest"][("é", 4.5)] == 1 and want["argmax"][("b", "c", "NaN")] == 1  # (not vacuous)
    assert _spark(_float_paths, {"E": _EDGES, "R": _ROOTS}, _GDT, spark) == want


_S = pd.DataFrame({"g": [1, 1, 1, 2, 2, 2, 2], "s": ["\uffff", "\U00010000", "a", "\U0001F600", "\ufb01", "b\x00", "B"],
                   "diff": [1, 1, 1, 1, 1, 2, -1]})


def _string_orders(df):
    """Strings are ordered by code point (README): U+FFFF before U+10000, which UTF-16 (Java's String order)
    would put the other way round; a retracted row takes no part."""
    s = df.input("S")
    s.max(by="g", col="s").view("max")
    s.min(by="g", col="s").view("min")
    s.argmin(by=[], col="s").view("argmin")
    s.top_k(by="g", order_by="s", k=2).view("top2")
    s.semijoin(s.filter(lambda s: s != "a").select("g"), on="g").count(by="g").view("semi")


def test_string_reductions_beyond_the_bmp_with_retractions_agree(spark):
    dt = {"S": {"g": "int64", "s": "str"}}
    want = _engine(_string_orders, {"S": _S}, dt)
    assert want["max"] == Counter({(1, "\U00010000"): 1, (2, "\U0001F600"): 1})
    assert _spark(_string_orders, {"S": _S}, dt, spark) == want


def test_spark_columns_into_inputs_of_other_dtypes(spark):
    """A Spark long or boolean column feeds a float64 input, a long 0/1 a bool input; a long 2 into a bool,
    a string into a bool are refused naming the column, and change nothing."""
    with kp.Engine(workers=1) as eng:
        f = eng.input("f", ["x"], ["float64"])
        b = eng.input("b", ["b"], ["bool"])
        f.insert(spark.createDataFrame([(3,), (-7,)], "x long"))
        f.insert(spark.createDataFrame([(True,)], "x boolean"))
        b.insert(spark.createDataFrame([(1,), (0,)], "b long"))
        with pytest.raises(kp.SchemaError, match="'b'"):
            b.insert(spark.createDataFrame([(1,), (2,)], "b long"))
        with pytest.raises(kp.SchemaError, match="'b'"):
            b.insert(spark.createDataFrame([("true",)], "b string"))
        f.advance_to(1), b.advance_to(1)
        with eng.dataflow("d") as df:
            vf, vb = df.input("f").view("f"), df.input("b").view("b")
        eng.wait("d", timeout=60)
        assert sorted(vf.to_pandas()["x"].tolist()) == [-7.0, 1.0, 3.0]
        assert sorted(vb.to_pandas()["b"].tolist()) == [False, True]
        assert vf.to_spark(spark).schema.simpleString() == "struct<x:double>"


# -- 2. bugs ---------------------------------------------------------------------------------------------------

_T = pd.DataFrame({"a": [1, 2, 3, 4], "diff": [1, 1, 1, 1]})
_TDT = {"T": {"a": "int64"}}


def _late(kind, rnd):
    """Rows a > 2 enter a loop (enter_at) or are held back in it (delay) to round ``rnd``."""
    def build(df):
        t = df.input("T")
        if kind == "delay":
            t.iterate(lambda v: v.map(lambda a: {"a": a}).delay(lambda a: np.where(a > 2, rnd, 0))
                      .concat(t).distinct()).view("v")
        else:
            loop = df.loop()
            v = kp.Variable(loop, columns=["a"], dtypes=["int64"])
            v.set(v.concat(t.enter_at(loop, lambda a: np.where(a > 2, rnd, 0))).distinct()).leave().view("v")
    return build


@pytest.mark.parametrize("kind, rnd", [("delay", 2 ** 62), ("enter_at", 2 ** 62),
                                       ("enter_at", np.uint64(2 ** 64 - 1))])
def test_bug_rounds_of_2_62_or_more_are_refused_on_spark_as_on_the_engine(spark, kind, rnd):
    """README: ``delay``'s function gives rounds below 2**62 (the engine's enter_at has the same bound:
    rounds count up from there without wrapping), and ``kp.spark.run`` refuses what the engine refuses
    (user function output is checked by the engine's own checks). On the engine the dataflow fails with
    "rounds must be below 2**62"; on Spark the same builder runs and returns rows: for the 2**62 rounds all
    four, for the uint64 round (cast to int64: -1, a round that never comes) rows 3 and 4 are silently gone."""
    build = _late(kind, rnd)
    with pytest.raises(kp.DataflowError, match=r"below 2\*\*62"):
        _engine(build, {"T": _T}, _TDT)
    with pytest.raises(kp.KpgnbError, match=r"below 2\*\*62"):
        _spark(build, {"T": _T}, _TDT, spark)


_BIG = 2 ** 62 - 1  # the largest multiplicity an input takes


def test_bug_top_k_over_rows_of_large_multiplicity_agrees(spark):
    """Three rows of multiplicity 2**62 - 1 (each within the inputs' bound) and top_k k=1: the engine keeps
    the smallest row once. On Spark the window's running sum of multiplicities (a long) reaches
    3 * (2**62 - 1) > 2**63 and the job fails with Spark's ARITHMETIC_OVERFLOW, although no multiplicity of
    the result, nor of any row, is near the bound."""
    frames = {"T": pd.DataFrame({"g": [0, 0, 0], "a": [1, 2, 3], "diff": [_BIG] * 3})}
    dt = {"T": {"g": "int64", "a": "int64"}}

    def build(df):
        df.input("T").top_k(by="g", order_by="a", k=1, descending=False).view("first")
    want = _engine(build, frames, dt)
    assert want == {"first": Counter({(0, 1): 1})}
    assert _spark(build, frames, dt, spark) == want


@pytest.fixture
def ansi(spark, request):
    """spark.sql.ansi.enabled set for the test (README: multiplicities and int sums behave alike whatever it
    says), put back afterwards."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", request.param)
    try:
        yield request.param
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


_TOP = 2 ** 63 - 1


@pytest.mark.parametrize("ansi", ["true", "false"], indirect=True)
def test_bug_int_sum_in_range_is_exact_whatever_its_partial_sums(spark, ansi):
    """README: "an int64 sum whose total leaves int64 fails on both ...; a total in range is exact even when
    partial sums are not". Values near +-(2**63 - 1), each of multiplicity 2**62 - 1, whose total is 0: the
    engine's sum is 0. Spark sums value * multiplicity as decimal(38,0), whose partial sums (about 1.7e38 after
    the four positive terms) overflow it: with ANSI on the job fails with "Overflow in sum of decimals", with
    ANSI off the sum is null and the group has no row at all."""
    vals = [_TOP, _TOP - 1, _TOP - 2, _TOP - 3, -_TOP, -(_TOP - 1), -(_TOP - 2), -(_TOP - 3)]
    frames = {"T": pd.DataFrame({"g": [0] * 8, "v": vals, "diff": [_BIG] * 8})}
    dt = {"T": {"g": "int64", "v": "int64"}}

    def build(df):
        df.input("T").sum(by="g", col="v").view("total")
    want = _engine(build, frames, dt)
    assert want == {"total": Counter({(0, 0): 1})}
    assert _spark(build, frames, dt, spark) == want


@pytest.mark.parametrize("ansi", ["false"], indirect=True)
def test_bug_int_sum_out_of_range_fails_with_ansi_off(spark, ansi):
    """README: "an int64 sum whose total leaves int64 fails on both" (and multiplicities behave "whatever
    spark.sql.ansi.enabled says"). Three values near 2**63 - 1 and one near -(2**63 - 1), each of multiplicity
    2**62 - 1: the total, about 8.5e37, is far outside int64 and the engine's dataflow fails with an
    OverflowError cause. With ANSI off Spark's decimal(38,0) sum overflows to null, and the null total is
    taken for "no rows": kp.spark.run returns an empty view, no error."""
    frames = {"T": pd.DataFrame({"g": [0] * 4, "v": [_TOP, _TOP - 1, _TOP - 2, -_TOP], "diff": [_BIG] * 4})}
    dt = {"T": {"g": "int64", "v": "int64"}}

    def build(df):
        df.input("T").sum(by="g", col="v").view("total")
    with pytest.raises(kp.DataflowError, match="overflow"):
        _engine(build, frames, dt)
    with pytest.raises(kp.DataflowError):
        _spark(build, frames, dt, spark)
