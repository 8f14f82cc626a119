"""Spark DataFrames as inputs, attacked: duplicate column names (what a join gives), nulls, timestamps,
decimals, reordered columns, and a streaming batch function given float diffs. One local session from the
shared ``spark`` fixture (skipped without Java, as tests/test_spark.py is).

Tests named ``test_bug_*`` assert the documented behaviour for bugs an attack found (each failed before its fix)."""
import numpy as np
import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


@pytest.fixture
def eng():
    e = kp.Engine(workers=2)
    yield e
    e.close()


def test_bug_spark_join_with_duplicate_column_names_is_a_schema_error(spark, eng):
    a = spark.createDataFrame([(1, "x"), (2, "y")], "k long, s string")
    b = spark.createDataFrame([(1, 10), (2, 20)], "k long, w long")
    joined = a.join(b, a.k == b.k)                   # columns k, s, k, w
    with pytest.raises(kp.SchemaError, match="'k'"):
        ks.input_from(eng, "j", joined)
    assert "j" not in eng.inputs()
    inp = ks.input_from(eng, "a", a)
    with pytest.raises(kp.SchemaError, match="'k'"):
        inp.insert(joined.select(a.k, a.s, b.k))


def test_spark_inputs_refused_change_nothing(spark, eng):
    a = spark.createDataFrame([(1, "x"), (2, "y")], "k long, s string")
    inp = ks.input_from(eng, "a", a)
    with eng.dataflow("d") as df:
        v = df.input("a").view("v")
    eng.wait(v, timeout=60)
    inp.insert(spark.createDataFrame([("z", 3)], "s string, k long"))        # reordered: by name
    for bad, match in [(spark.createDataFrame([(3.5, "q")], "k double, s string"), "not an integer"),
                       (spark.createDataFrame([(5, None)], "k long, s string"), "null"),
                       (spark.sql("select 6L as k, current_timestamp() as s"), "timestamp"),
                       (spark.sql("select cast(7 as decimal(10,0)) as k, 'q' as s"), "decimal")]:
        with pytest.raises(kp.SchemaError, match=match):
            inp.insert(bad)
    inp.remove(spark.createDataFrame([(1, "x")], "k long, s string"))
    inp.advance_to(2)
    eng.wait(v, timeout=60)
    assert rows(v) == [(2, "y"), (3, "z")]
    assert sorted(map(tuple, v.to_spark(spark).collect())) == [(2, "y"), (3, "z")]


def test_bug_batch_feeder_refuses_infinite_float_diffs(spark, eng):
    """A micro-batch whose diff column is a double holding inf turns an existing row's multiplicity into
    about -2**63 instead of being refused."""
    a = spark.createDataFrame([(1, "x"), (2, "y")], "k long, s string")
    inp = ks.input_from(eng, "a", a)
    with eng.dataflow("d") as df:
        v = df.input("a").view("v")
    feeder = ks.BatchFeeder(inp, diff_col="diff")
    batch = spark.createDataFrame([(2, "y", float("inf"))], "k long, s string, diff double")
    with pytest.raises(kp.SchemaError, match="diff"):
        feeder(batch, 0)
    eng.wait(v, timeout=60)
    assert rows(v, diffs=True) == [(1, "x", 1), (2, "y", 1)]
