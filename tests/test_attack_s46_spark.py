"""Session 46 attack on the Spark bridge: Spark DataFrames as inputs (column types, second loads that do not
fit, loads that fail half way), ``kp.spark.follow`` of structured streams (a rate source, a file source
with a bad micro-batch, a stream with two columns of one name) and ``kp.spark.run`` against the engine
(nulls the dataflow does not read, streaming inputs, multiplicities beyond int32).

Tests marked xfail (strict) assert the documented behaviour where this attack found a bug; the others pin
down behaviour that was probed and held and was not covered before. One SparkSession for the run
(``spark`` in tests/conftest.py: local[2] on 127.0.0.1, UI off, two shuffle partitions)."""
import json
import os

import pandas as pd
import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False, name=None)))


def _drop_json(inbox, name, rows):
    """A JSON file moved into the source folder whole."""
    tmp = os.path.join(os.path.dirname(inbox), name + ".tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.rename(tmp, os.path.join(inbox, name))


# -- 1. Spark DataFrames into inputs ------------------------------------------------------------------------

def test_second_spark_load_that_does_not_fit_names_the_column_and_keeps_the_input(spark):
    """Extra, missing, case-changed and wrongly typed columns on a second load are refused naming the column;
    a load whose Spark job fails half way (raise_error on one row) changes nothing; extremes, a 300,000
    character non-ASCII string and bools survive the round trip through the engine and back to Spark."""
    long = "é" * 300_000 + "😀"
    sdf = spark.createDataFrame([(2**63 - 1, float("nan"), True, long), (-2**63, float("-inf"), False, "ü")],
                                "k long, f double, b boolean, s string")
    with kp.Engine(workers=1) as eng:
        inp = ks.input_from(eng, "t", sdf)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        small = spark.createDataFrame([(3, 1.0, True, "x")], "k long, f double, b boolean, s string")
        for bad, col in [(small.selectExpr("*", "1L as z"), "'z'"), (small.drop("s"), "'s'"),
                         (small.withColumnRenamed("k", "K"), "'K'"), (small.selectExpr("k", "f", "b", "k as s"), "'s'")]:
            with pytest.raises(kp.SchemaError, match=col):
                inp.insert(bad)
        half = spark.sql("select id as k, 0.5D as f, true as b, if(id = 7, raise_error('boom'), 'x') as s "
                         "from range(10)")
        with pytest.raises(Exception, match="boom"):
            inp.insert(half)
        with pytest.raises(Exception, match="boom"):
            ks.input_from(eng, "half", half)
        assert "half" not in eng.inputs()
        inp.advance_to(2)
        eng.wait(v, timeout=60)
        assert inp.epoch == 2
        back = sorted((r.k, r.f, r.b, r.s) for r in v.to_spark(spark).collect())
        assert [r[0] for r in back] == [-2**63, 2**63 - 1] and back[0][1:] == (float("-inf"), False, "ü")
        assert back[1][1] != back[1][1] and back[1][2] is True and back[1][3] == long


def test_input_from_a_pandas_frame_is_a_kpgnb_error():
    """``kp.spark.input_from(eng, name, pandas_df)`` (or a list of tuples) raises a bare AttributeError
    ('DataFrame' object has no attribute 'schema') from dtypes_of; an argument of the wrong type should be a
    kpgnb error (ArgumentTypeError/SchemaError) saying what it takes, if pandas is not simply taken."""
    with kp.Engine(workers=1) as eng:
        try:
            inp = ks.input_from(eng, "p", pd.DataFrame({"k": [1, 2]}))
        except kp.KpgnbError:
            assert "p" not in eng.inputs()
        else:
            assert inp.schema.names == ("k",)
            eng.drop_input("p")
        with pytest.raises(kp.KpgnbError):
            ks.input_from(eng, "q", [(1,), (2,)])
        assert "q" not in eng.inputs()


# -- 2. kp.spark.follow ---------------------------------------------------------------------------------------

def test_follow_a_rate_source_applies_every_row_once(spark):
    """Spark's rate-micro-batch source (run to what is available now): each micro-batch one epoch, the
    rows 0..n-1 each exactly once."""
    stream = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load().select("value")
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="r", engine=eng, trigger={"availableNow": True})
        try:
            assert q.awaitTermination(60)
        finally:
            q.stop()
        assert q.exception() is None
        applied = q.kpgnb_feeder.applied
        inp = eng.inputs()["r"]
        assert applied >= 1 and inp.epoch == applied and inp.schema.dtypes == ("int64",)
        with eng.dataflow("d") as df:
            v = df.input("r").view("v")
        eng.wait(v, timeout=60)
        assert _rows(v) == [(i,) for i in range(3 * applied)]


def test_follow_a_bad_micro_batch_leaves_nothing_of_it_and_a_restart_applies_it_fixed(spark, tmp_path):
    """A micro-batch with a null in its second row fails the query; the input keeps the earlier batch and
    nothing of the bad one (neither rows nor an epoch). With the file fixed, a query restarted from the
    checkpoint replays that batch and applies it once."""
    inbox, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    os.mkdir(inbox)
    stream = spark.readStream.schema("k long, s string").json(inbox)
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="t", engine=eng, checkpoint=ck, trigger={"processingTime": "100 milliseconds"})
        try:
            _drop_json(inbox, "1.json", [{"k": 1, "s": "a"}, {"k": 2, "s": "b"}])
            q.processAllAvailable()
            _drop_json(inbox, "2.json", [{"k": 3, "s": "c"}, {"k": 4}, {"k": 5, "s": "e"}])
            with pytest.raises(Exception, match="null"):
                q.processAllAvailable()
        finally:
            q.stop()
        assert "column 's'" in str(q.exception())
        inp = eng.inputs()["t"]
        assert inp.epoch == 1 and q.kpgnb_feeder.applied == 1
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        assert _rows(v, diffs=True) == [(1, "a", 1), (2, "b", 1)]
        os.remove(os.path.join(inbox, "2.json"))
        _drop_json(inbox, "2.json", [{"k": 3, "s": "c"}, {"k": 4, "s": "d"}])
        q = ks.follow(stream, input="t", engine=eng, checkpoint=ck, trigger={"processingTime": "100 milliseconds"})
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is None and q.kpgnb_feeder.applied == 1 and inp.epoch == 2
        eng.wait(v, timeout=60)
        assert _rows(v, diffs=True) == [(1, "a", 1), (2, "b", 1), (3, "c", 1), (4, "d", 1)]


def test_follow_refuses_a_stream_with_two_columns_of_one_name(spark, tmp_path):
    """``dtypes_of`` returns a dict, so a stream selecting ``k`` twice becomes an input of (k, s) and the
    query starts; its first micro-batch then fails ('several columns named k'). Tables with two columns of
    one name are refused (README), and a query that cannot run should not start nor leave an input."""
    stream = spark.readStream.schema("k long, s string").json(str(tmp_path)).select("k", "k", "s")
    with kp.Engine(workers=1) as eng:
        q = None
        try:
            with pytest.raises(kp.SchemaError, match="'k'"):
                q = ks.follow(stream, input="dup", engine=eng)
            assert "dup" not in eng.inputs()
        finally:
            if q is not None:
                q.stop()


# -- 3. kp.spark.run against the engine -------------------------------------------------------------------

def test_run_refuses_a_null_the_dataflow_does_not_read(spark):
    """README: 'a null fails the run with a SchemaError naming the input and column, as kp.spark.input_from
    does'. The null check is a raise_error inside the input's projection, which Spark prunes with an unused
    column and evaluates after a filter pushed below it: both runs below return rows."""
    t = spark.createDataFrame([(1, None), (2, "b")], "k long, s string")
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.SchemaError, match="'s'"):
            ks.input_from(eng, "t", t)
    with pytest.raises(kp.SchemaError, match="'s'"):
        ks.run(lambda df: df.input("t").count().view("c"), {"t": t}, spark=spark)["c"].collect()
    with pytest.raises(kp.SchemaError, match="'s'"):
        ks.run(lambda df: df.input("t").filter(lambda k: k > 1).view("v"), {"t": t}, spark=spark)["v"].collect()


def test_run_with_a_streaming_input_says_to_follow_it(spark, tmp_path):
    """Inputs of kp.spark.run are static; a streaming DataFrame given as rows is a SchemaError pointing to
    kp.spark.follow everywhere else (README, Spark). Here it passes the checks and fails inside the first
    job as a DataflowError about Spark's Observation."""
    stream = spark.readStream.schema("k long").json(str(tmp_path))
    with pytest.raises(kp.SchemaError, match="follow"):
        ks.run(lambda df: df.input("t").view("v"), {"t": stream}, spark=spark)["v"].collect()


def test_run_view_row_of_multiplicity_beyond_int32(spark):
    """Multiplicities up to 2**62 are legal; a view's DataFrame repeats each row by its multiplicity
    (``array_repeat(.., _d.cast("int"))``). A row of multiplicity 2**32 fails with Spark's raw
    CAST_OVERFLOW (and under spark.sql.ansi.enabled=false would silently give 0 rows). The first row of the
    DataFrame must be readable, or the error must say to use diffs=True as for negative multiplicities."""
    log = spark.createDataFrame([(1, 2**32)], "k long, diff long")
    out = ks.run(lambda df: df.input("t").view("v"), {"t": log}, spark=spark, diff_col="diff")["v"]
    try:
        first = [tuple(r) for r in out.limit(1).collect()]
    except Exception as err:  # noqa: BLE001 - a clear refusal is fine too
        assert "diffs=True" in str(err)
    else:
        assert first == [(1,)]
