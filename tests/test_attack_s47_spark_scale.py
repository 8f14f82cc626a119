"""Session 47 attack on "Scale out on Spark" (``kp.spark.run``, ``kp.spark.datalog``) against the embedded
engine (``eng.dataflow``, ``eng.datalog``) on the same random inputs.

Probed and held (a few kept below where they add coverage): tc, same generation, reach, mutual recursion,
stratified negation, recursive min/max over int weights near the int64 bounds (negative starts, huge
starts: the bit-length enter_at/delay the compiler adds), float recursive max, count/sum/avg/countd/min/max
(avg of ints whose sum leaves int64, inf/NaN sums), constants, expressions in atoms, facts (-0.0, ints in a
float column), .decl'd relations, lone surrogates in constants, odd input column names; every reduce family
(top_k, argmin/argmax over strings, threshold with negative counts, by=[]), semijoin/antijoin with
retractions, loops with min/count/threshold/top_k, nested loops, compact_every=1, zero-column inputs,
refusals and worker errors naming the operator.

Bugs (``xfail(strict=True)``): multiplicity overflow (README: a multiplicity reaching 2**62 fails the
dataflow with an OverflowError cause) is not checked by the Spark backend: it relies on Spark's ANSI mode,
so with ``spark.sql.ansi.enabled=false`` a count or a join silently wraps (a count of -4, a join row that
vanishes), and even in ANSI mode a join product in [2**62, 2**63) comes back as a diff instead of failing;
a threshold function returning floats, and flat_map repeat counts that are floats, are refused by the
engine but truncated to int64 (silently) in Spark's workers.

One SparkSession for the run (``spark`` in tests/conftest.py). Spark is slow here: few, small runs."""
import math
import sys
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
import kpgnb.spark as ks

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import the tests

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

_SPARK_TYPE = {"int64": "long", "float64": "double", "str": "string", "bool": "boolean"}


def _canon(row):
    out = []
    for v in row:
        if isinstance(v, np.integer):
            v = int(v)
        if isinstance(v, np.floating):
            v = float(v)
        out.append("NaN" if isinstance(v, float) and math.isnan(v) else v)
    return tuple(out)


def _engine_run(build, frames, dtypes):
    """Each view of ``build`` on the engine as Counter(row -> multiplicity); frames carry a ``diff`` column."""
    with kp.Engine(workers=2) as eng:
        for n, fr in frames.items():
            cols = [c for c in fr.columns if c != "diff"]
            inp = eng.input(n, cols, [dtypes[n][c] for c in cols])
            if len(fr):
                inp.update(fr[cols], fr["diff"].to_numpy())
            inp.advance_to(1)
        with eng.dataflow("d") as df:
            build(df)
        eng.wait("d", timeout=120)
        return {name: Counter({_canon(r[:-1]): r[-1]
                               for r in v.to_pandas(diffs=True).itertuples(index=False, name=None)})
                for name, v in df.views.items()}


def _spark_run(build, frames, dtypes, spark):
    sdfs = {}
    for n, fr in frames.items():
        schema = ", ".join(f"{c} {_SPARK_TYPE[dtypes[n].get(c, 'int64')]}" for c in fr.columns)
        sdfs[n] = spark.createDataFrame(list(fr.itertuples(index=False, name=None)), schema)
    out = ks.run(build, sdfs, spark=spark, diff_col="diff", diffs=True)
    res = {}
    for name, sdf in out.items():
        c = Counter()
        for r in sdf.collect():
            c[_canon(tuple(r[:-1]))] += r[-1]
        res[name] = Counter({k: v for k, v in c.items() if v})
    return res


def _engine_datalog(text, frames):
    with kp.Engine(workers=2) as eng:
        prog = eng.datalog(text, inputs=frames)
        out = {}
        for pred in prog.relations:
            eng.wait(prog[pred], timeout=60)
            df = prog[pred].to_pandas()
            out[pred] = (list(df.columns), Counter(_canon(r) for r in df.itertuples(index=False, name=None)))
        return out


def _spark_datalog(text, frames, spark):
    return {pred: (list(sdf.columns), Counter(_canon(tuple(r)) for r in sdf.collect()))
            for pred, sdf in ks.datalog(text, frames, spark=spark).items()}


@contextmanager
def _ansi(spark, on: bool):
    key = "spark.sql.ansi.enabled"
    old = spark.conf.get(key)
    spark.conf.set(key, "true" if on else "false")
    try:
        yield
    finally:
        spark.conf.set(key, old)


# -- held: equal on both ------------------------------------------------------------------------------------

def test_reductions_over_strings_and_retractions_equal_the_engine(spark):
    """Every reduce family over one multiset with retractions (diffs -2..2, so some rows' net counts are
    negative or zero): count (by and global), distinct (all and by key), int sum, min over strings, float
    max, argmin/argmax (argmax over strings), top_k ascending/descending counting multiplicities,
    threshold with a function of negative counts and with by=[], join, semijoin, antijoin."""
    rng = np.random.default_rng(4703)
    n = 30
    t = pd.DataFrame({"k": rng.integers(0, 4, n), "v": rng.integers(-5, 5, n),
                      "f": np.round(rng.normal(size=n), 1), "s": rng.choice(["a", "b", "é", "", "😀"], n),
                      "diff": rng.choice([1, 1, 2, -1, -2], n)})
    u = pd.DataFrame({"k": [0, 1, 1, 5], "w": [1, 2, 3, 4], "diff": [1, -1, 2, 1]})
    dtypes = {"t": {"k": "int64", "v": "int64", "f": "float64", "s": "str"}, "u": {"k": "int64", "w": "int64"}}

    def build(df):
        t, u = df.input("t"), df.input("u")
        t.count(by="k").view("cnt")
        t.count().view("cnt0")
        t.distinct().view("dist")
        t.distinct(key="k").view("distk")
        t.sum(col="v", by="k").view("sumv")
        t.min(col="s", by="k").view("mins")
        t.max(col="f", by="k").view("maxf")
        t.argmin(col="v", by="k").view("argmin")
        t.argmax(col="s", by="k").view("argmax")
        t.top_k(by="k", order_by="v", k=3).view("top3")
        t.top_k(order_by="f", k=4, descending=False).view("top4")
        t.threshold(by=["k"], fn=lambda c: np.where(c > 0, c * 2, -c)).view("thr")
        t.threshold(by=[], fn=lambda c: c).view("thr0")
        t.join(u, on="k").view("j")
        t.semijoin(u, on="k").view("semi")
        t.antijoin(u, on="k").view("anti")

    frames = {"t": t, "u": u}
    want = _engine_run(build, frames, dtypes)
    got = _spark_run(build, frames, dtypes, spark)
    assert got == want
    assert want["thr"] and want["top3"] and want["anti"]


def test_datalog_recursive_min_max_near_int64_bounds_equal_the_engine(spark):
    """Recursive min (weighted, and a copied label) and max with start values at -2**61 and 2**62 and
    weights up to 2**40 (the compiler enters and delays rows by the values' bit length: negative values
    and 62-bit ones), plus a recursive predicate reading the min: equal on both."""
    rng = np.random.default_rng(4707)
    e = pd.DataFrame({"a": rng.integers(0, 10, 25), "b": rng.integers(0, 10, 25),
                      "w": rng.integers(-2**40, 2**40, 25)})
    r = pd.DataFrame({"a": [0, 3, 5], "d": [-2**61, 5, 2**62]})
    text = """
    dag(x, y, w) :- e(x, y, w), x < y.
    sp(y, min<d>) :- r(y, d).
    sp(y, min<d>) :- sp(x, d1), dag(x, y, w), d = d1 + w.
    lp(y, max<d>) :- r(y, d).
    lp(y, max<d>) :- lp(x, d1), dag(x, y, w), d = d1 - w.
    lab(y, min<l>) :- r(y, l).
    lab(y, min<l>) :- lab(x, l), e(x, y, _).
    near(y) :- sp(y, d), d < 0.
    near(y) :- near(x), e(x, y, _), sp(y, _).
    """
    frames = {"e": e, "r": r}
    want = _engine_datalog(text, frames)
    assert _spark_datalog(text, frames, spark) == want
    assert want["sp"][1] and want["lp"][1] and want["near"][1]


# -- bugs -----------------------------------------------------------------------------------------------------

_BIG = 2**62 - 1  # the largest diff an input takes


@pytest.mark.parametrize("case", ["count", "join"])
def test_bug_multiplicity_overflow_is_an_error_whatever_spark_ansi_mode(spark, case):
    """README: a multiplicity that reaches 2**62 (equal updates summed, a count, a join's product) fails the
    dataflow with an OverflowError cause, and kp.spark.run holds what the engine's views hold. The backend
    sums and multiplies the _d column with plain Spark long arithmetic and only fails because Spark's ANSI
    mode (a session setting users may turn off) raises on long overflow; with it off the results wrap
    silently: count() of four (1,) rows of diff 2**62 - 1 gives count -4 (the engine: OverflowError), and
    a row of diff 2**40 joined with itself has multiplicity 2**80, which wraps to 0: the row is gone."""
    if case == "count":
        sdf = spark.createDataFrame([(1, _BIG)] * 4, "a long, diff long")

        def build(df):
            df.input("x").count().view("v")
    else:
        sdf = spark.createDataFrame([(1, 2**40)], "a long, diff long")

        def build(df):
            x = df.input("x")
            x.join(x, on="a").view("v")
    with _ansi(spark, False):
        with pytest.raises((kp.KpgnbError, OverflowError)):
            rows = ks.run(build, {"x": sdf}, spark=spark, diff_col="diff", diffs=True)["v"].collect()
            pytest.fail(f"no error; the view holds {rows}")  # (a Failed is no KpgnbError: it propagates)


def test_bug_join_multiplicity_reaching_2_62_fails_as_on_the_engine(spark):
    """A row of diff 2**31 joined with itself: the product 2**62 fails the engine's dataflow ('a join
    output's multiplicity reaches 2**62 or more'); kp.spark.run (ANSI mode on, the default) returns a row
    with diff 4611686018427387904 instead. A count over three rows of diff 2**61 + 1 (sum above 2**62,
    within int64) has the same gap."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"])
        x.update([(1,)], [2**31])
        x.advance_to(1)
        with eng.dataflow("j") as df:
            df.input("x").join(df.input("x"), on="a").view("v")
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait("j", timeout=60)
    sdf = spark.createDataFrame([(1, 2**31)], "a long, diff long")
    with _ansi(spark, True):
        with pytest.raises((kp.KpgnbError, OverflowError)):
            rows = ks.run(lambda df: df.input("x").join(df.input("x"), on="a").view("v"), {"x": sdf},
                          spark=spark, diff_col="diff", diffs=True)["v"].collect()
            pytest.fail(f"no error; the view holds {rows}")


def test_bug_threshold_function_returning_floats_is_refused_as_on_the_engine(spark):
    """threshold(fn) maps an int64 array of counts to integer multiplicities; the engine fails the dataflow
    ('must map an int64 array of counts to integers of the same shape; got dtype float64'). The README
    promises a user function's bad output fails on Spark as on the engine, but spark_workers.Threshold
    casts the result with astype(np.int64): keys with counts 3, 2, 1 come back with multiplicities 1, 1
    and nothing (1.5, 1.0, 0.5 truncated), a silently different answer."""
    def build(df):
        df.input("t").threshold(fn=lambda c: c * 0.5).view("v")

    with kp.Engine(workers=1) as eng:
        t = eng.input("t", ["k"], ["int64"])
        t.insert([(1,), (1,), (1,), (2,), (2,), (3,)])
        t.advance_to(1)
        with eng.dataflow("thr") as df:
            build(df)
        with pytest.raises(kp.DataflowError, match="integers"):
            eng.wait("thr", timeout=60)
    sdf = spark.createDataFrame([(1,), (1,), (1,), (2,), (2,), (3,)], "k long")
    with pytest.raises(kp.DataflowError, match="threshold"):
        rows = ks.run(build, {"t": sdf}, spark=spark, diffs=True)["v"].collect()
        pytest.fail(f"no error; the view holds {sorted(tuple(r) for r in rows)}")


def test_bug_flat_map_float_repeat_counts_are_refused_as_on_the_engine(spark):
    """flat_map(fn, repeat=True) returning one output row per input row and repeat counts 1.5 (floats): the
    engine fails the dataflow ('the flat_map function's index or repeat counts must be integers, got
    float64 values such as [1.5]'). On Spark the worker casts them with np.asarray(how, dtype=np.int64)
    (1.5 -> 1) before any check, so the run succeeds with every row once. Cause: spark_workers.
    UserBatches.__call__ (flat_map branch) casting before checking the dtype."""
    def build(df):
        df.input("t").flat_map(lambda k: ({"k": k}, np.full(len(k), 1.5)), repeat=True).view("v")

    with kp.Engine(workers=1) as eng:
        t = eng.input("t", ["k"], ["int64"])
        t.insert([(1,), (2,), (3,)])
        t.advance_to(1)
        with eng.dataflow("fm") as df:
            build(df)
        with pytest.raises(kp.DataflowError, match="must be integers"):
            eng.wait("fm", timeout=60)
    sdf = spark.createDataFrame([(1,), (2,), (3,)], "k long")
    with pytest.raises(kp.DataflowError, match="integers"):
        rows = ks.run(build, {"t": sdf}, spark=spark)["v"].collect()
        pytest.fail(f"no error; the view holds {sorted(tuple(r) for r in rows)}")
