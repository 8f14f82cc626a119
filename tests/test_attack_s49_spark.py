"""Session 49 attack on the Spark side (README "Spark" and "Scale out on Spark"): Spark DataFrames as inputs
(also through ``eng.datalog(inputs=)``), views back to Spark, ``kp.spark.follow`` and ``kp.spark.run``.

Tests marked xfail (strict) assert the documented (or obviously expected) behaviour where this attack found a
bug; the others pin down behaviour that was probed, held, and was not covered before: Spark DataFrames bound
to Datalog predicates on the engine (refusals leave no input behind, the input goes with the program), a
streaming query whose input was dropped, closed or replaced under it, and ``kp.spark.run`` over inputs of
different Spark widths (int/bigint, float/double, tinyint) against the engine.
One SparkSession for the run (``spark`` in tests/conftest.py: local[2] on 127.0.0.1, PYSPARK_PYTHON set to
this interpreter, UI off, two shuffle partitions)."""
import json
import os

import pandas as pd
import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False, name=None)))


def _collect(sdf):
    return sorted(tuple(r) for r in sdf.collect())


def _drop_json(inbox, name, rows):
    """A JSON file moved into the source folder whole."""
    tmp = os.path.join(os.path.dirname(inbox), name + ".tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.rename(tmp, os.path.join(inbox, name))


# -- bugs -------------------------------------------------------------------------------------------------------

def test_bug_run_pandas_input_converted_whatever_its_place_in_inputs(spark):
    """``kp.spark.run`` takes a pandas input and converts it with ``spark`` (its docstring; README: the inputs
    are DataFrames), and with ``spark`` omitted it takes the session of the Spark DataFrames given. It does so
    only for pandas inputs that come after a Spark one: ``{"a": sdf, "b": pdf}`` runs, while the same inputs
    as ``{"b": pdf, "a": sdf}`` raise SchemaError "input 'b' is a DataFrame, not a Spark DataFrame; pass
    spark= to convert it". Cause: spark_backend.run sets ``spark = spark or df.sparkSession`` inside the loop
    over inputs, after converting the pandas ones met before it."""
    sdf = spark.createDataFrame([(1,), (2,)], "k long")
    pdf = pd.DataFrame({"k": [1], "x": ["q"]})

    def build(df):
        df.input("a").join(df.input("b"), on="k").view("v")

    assert _collect(ks.run(build, {"a": sdf, "b": pdf})["v"]) == [(1, "q")]
    assert _collect(ks.run(build, {"b": pdf, "a": sdf})["v"]) == [(1, "q")]


def _wrong_to_spark_none(eng, view, spark, tmp_path):
    view.to_spark(None)


def _wrong_to_spark_engine(eng, view, spark, tmp_path):
    view.to_spark(eng)


def _wrong_write_changes_none(eng, view, spark, tmp_path):
    w = ks.write_changes(view, None, str(tmp_path / "sink"))
    try:
        w.close()
    except Exception:  # noqa: BLE001 - the failure came from the writer's thread, not from the call
        pass


def _wrong_follow_input_int(eng, view, spark, tmp_path):
    q = ks.follow(spark.readStream.format("rate").load(), input=5, engine=eng)
    q.stop()


def _wrong_run_spark_str(eng, view, spark, tmp_path):
    ks.run(lambda df: df.input("p").view("o"), {"p": pd.DataFrame({"k": [1]})}, spark="local")


def _wrong_input_from_no_engine(eng, view, spark, tmp_path):
    ks.input_from(None, "x", spark.createDataFrame([(1,)], "k long"))


@pytest.mark.parametrize("call", [_wrong_to_spark_none, _wrong_to_spark_engine, _wrong_write_changes_none,
                                  _wrong_follow_input_int, _wrong_run_spark_str, _wrong_input_from_no_engine],
                         ids=lambda f: f.__name__[7:])
def test_bug_wrong_type_arguments_to_spark_helpers_are_argument_type_errors(spark, tmp_path, call):
    """README (Errors): an argument of the wrong type is an ``ArgumentTypeError`` (a KpgnbError and a
    TypeError), as ``input_from(eng, 5, sdf)`` is ("an input's name must be a non-empty str, got int 5").
    The other arguments of the Spark helpers are not checked: ``view.to_spark(None)`` or
    ``view.to_spark(eng)`` (the engine where the session belongs) raise AttributeError "'Engine' object has
    no attribute 'createDataFrame'"; ``kp.spark.follow(stream, input=5)`` "'int' object has no attribute
    'name'"; ``kp.spark.run(..., spark="local")`` "'str' object has no attribute 'createDataFrame'";
    ``kp.spark.input_from(None, ...)`` "'NoneType' object has no attribute 'input'" (after running the
    Spark job). ``kp.spark.write_changes(view, None, path)`` returns a writer whose thread then dies with the
    AttributeError, reported only by a later ``wait``/``close``. Cause: kpgnb/spark.py (``follow``,
    ``write_changes``/``ChangeWriter.__init__``, ``input_from``), engine/view.py ``View.to_spark`` and
    spark_backend.run never check these arguments' types."""
    with kp.Engine(workers=1) as eng:
        inp = eng.input("t", ["k"], {"k": "int64"})
        inp.insert([(1,)])
        inp.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        with pytest.raises(kp.ArgumentTypeError):
            call(eng, v, spark, tmp_path)
        assert list(eng.inputs()) == ["t"] and _rows(v) == [(1,)]


# -- probed and held ----------------------------------------------------------------------------------------------

def test_engine_datalog_with_spark_inputs_refusals_leave_nothing_and_the_input_goes_with_it(spark):
    """``eng.datalog(text, inputs={"q": sdf})``: a null, a timestamp column, a wrong arity, a str compared
    with an int and an unused binding are refused (naming the column, or with line and column) and leave no
    input or dataflow behind; a good program's input is named after the predicate and dropped with it."""
    good = spark.sql("select * from values (1L, 'a'), (2L, 'b') as t(k, s)")
    with kp.Engine(workers=1) as eng:
        for text, q, err, match in [
            ("p(X) :- q(X, Y).", spark.sql("select * from values (1L, 'a'), (2L, null) as t(k, s)"),
             kp.SchemaError, "column 's'"),
            ("p(X) :- q(X, Y).", spark.sql("select 1L as k, timestamp'2020-01-01 00:00:00' as t"),
             kp.SchemaError, "column 't'.*timestamp"),
            ("p(X) :- q(X, Y, Z).", good, kp.DatalogError, "2 columns"),
            ("p(X) :- q(X, Y), Y > 1.", good, kp.DatalogError, "compares str with int"),
            ("p(X) :- r(X).\nr(1).", good, kp.UsageError, "no rule reads"),
        ]:
            with pytest.raises(err, match=match):
                eng.datalog(text, inputs={"q": q}, name="dl")
            assert list(eng.inputs()) == [] and list(eng.dataflows()) == []
        prog = eng.datalog("p(X) :- q(X, Y), Y != \"b\".", inputs={"q": good}, name="dl")
        eng.wait("dl", timeout=60)
        assert _rows(prog["p"]) == [(1,)] and list(eng.inputs()) == ["q"]
        eng.drop("dl")
        assert list(eng.inputs()) == []


@pytest.mark.parametrize("how", ["drop_input", "close", "replace"])
def test_follow_into_an_input_dropped_closed_or_replaced_fails_the_query(spark, tmp_path, how):
    """A query feeding input ``t`` (created by ``follow``) whose input is dropped, closed, or dropped and made
    again under the same name: the next micro-batch fails the query (README: an engine-side error fails
    it) instead of feeding rows nowhere or into the new input; the new input is left as it was."""
    inbox = str(tmp_path / "in")
    os.mkdir(inbox)
    stream = spark.readStream.schema("k long, diff long").json(inbox)
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="t", diff_col="diff", engine=eng)
        try:
            _drop_json(inbox, "1.json", [{"k": 1, "diff": 2}, {"k": 1, "diff": -1}])
            q.processAllAvailable()
            inp = eng.inputs()["t"]
            assert inp.epoch == 1 and inp.schema.names == ("k",)
            if how == "drop_input":
                eng.drop_input("t")
            elif how == "close":
                inp.close()
            else:
                eng.drop_input("t")
                eng.input("t", ["k"], {"k": "int64"})
            _drop_json(inbox, "2.json", [{"k": 2, "diff": 1}])
            with pytest.raises(Exception):
                q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is not None and q.kpgnb_feeder.applied == 1
        if how == "replace":
            new = eng.inputs()["t"]
            assert new is not inp and new.epoch == 0
            new.advance_to(1)
            with eng.dataflow("d") as df:
                v = df.input("t").view("v")
            eng.wait(v, timeout=60)
            assert _rows(v) == []


def test_run_over_inputs_of_different_spark_widths_agrees_with_the_engine(spark):
    """Inputs whose Spark types differ from the engine's (int vs bigint join keys, float vs double, tinyint)
    give the engine's rows on Spark, with its column types (bigint, double)."""
    a = spark.sql("select * from values (1, cast(0.1 as float), cast(7 as tinyint)), "
                  "(2147483647, cast(-0.0 as float), cast(-8 as tinyint)) as t(k, f, b)")
    b = spark.sql("select * from values (1L, double(cast(0.1 as float))), (2147483647L, 0.0D), "
                  "(3000000000L, 2.5D) as t(k, f)")

    def build(df):
        x, y = df.input("a"), df.input("b")
        x.join(y, on=["k", "f"]).view("j")
        x.select("k", "f").concat(y).distinct().view("u")
        x.map(lambda b, k: {"s": b * 100 + k}).view("m")

    out = ks.run(build, {"a": a, "b": b}, spark=spark)
    assert out["j"].schema.simpleString() == "struct<k:bigint,f:double,b:bigint>"
    assert out["u"].schema.simpleString() == "struct<k:bigint,f:double>"
    with kp.Engine(workers=1) as eng:
        ks.input_from(eng, "a", a)
        ks.input_from(eng, "b", b)
        with eng.dataflow("d") as df:
            build(df)
        eng.wait("d", timeout=60)
        for name, view in df.views.items():
            assert _collect(out[name]) == _rows(view), name
    assert _collect(out["m"]) == [(701,), (2147482847,)]
