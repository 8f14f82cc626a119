"""Session 25 attack on Spark as input and output: every Spark type one can create (mapped or refused by
name, before anything changes), strings with non-ASCII and NUL, extreme ints and floats, empty frames,
engine -> Spark -> engine round trips, BatchFeeder micro-batches of every form and diff type, and a
parquet change sink that nets to the view."""
import math
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest

import kpgnb as kp

STRINGS = ["a", "", "naïve ☃", "a\x00", "\x00", "a\x00b", "😀", "A", "\u00e9", "e\u0301"]
SCHEMA = "k int, t tinyint, h smallint, i int, l bigint, f float, d double, b boolean, s string"


def _rows():
    return [(i % 3 - 1, [-128, 127, 0][i % 3], [-32768, 32767, 1][i % 3], [-2**31, 2**31 - 1, 2][i % 3],
             [-2**63, 2**63 - 1, 3][i % 3], [float("nan"), float("inf"), -0.0, 1.5, 3.4e38][i % 5],
             [float("nan"), -float("inf"), -0.0, 1e-310, 1e308][i % 5], bool(i % 2), STRINGS[i])
            for i in range(len(STRINGS))]


def _bag(df):
    return Counter(tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in r)
                   for r in df.itertuples(index=False, name=None))


def test_every_spark_type_round_trips_or_is_refused_by_name(spark):
    with kp.Engine(workers=2) as eng:
        sdf = spark.createDataFrame(_rows(), SCHEMA)
        assert kp.spark.dtypes_of(sdf) == {"k": "int64", "t": "int64", "h": "int64", "i": "int64", "l": "int64",
                                           "f": "float64", "d": "float64", "b": "bool", "s": "str"}
        kp.spark.input_from(eng, "all", sdf)
        with eng.dataflow("id") as df:
            v = df.input("all").view("v")
            c = df.input("all").count(by="s").view("c")
        eng.wait(v), eng.wait(c)
        got = v.to_pandas()
        assert sorted(got["s"]) == sorted(STRINGS) and len(c) == len(set(STRINGS))
        assert sorted(got["l"]) == sorted(r[4] for r in _rows())
        back = v.to_spark(spark)
        assert back.schema.simpleString() == ("struct<k:bigint,t:bigint,h:bigint,i:bigint,l:bigint,f:double,"
                                              "d:double,b:boolean,s:string>")
        assert sorted(r["s"] for r in back.collect()) == sorted(STRINGS)
        kp.spark.input_from(eng, "again", back)
        with eng.dataflow("id2") as df:
            v2 = df.input("again").view("v")
        eng.wait(v2)
        assert _bag(v2.to_pandas()) == _bag(got)
        # what kpgnb cannot store: refused naming the column and type, no input created
        for expr, typ in [("cast(k as decimal(10,2)) as x", "decimal"), ("date'2020-01-01' as x", "date"),
                          ("timestamp'2020-01-01 00:00:00' as x", "timestamp"),
                          ("timestamp_ntz'2020-01-01 00:00:00' as x", "timestamp_ntz"),
                          ("cast(s as binary) as x", "binary"), ("array(k) as x", "array"),
                          ("map(k, s) as x", "map"), ("struct(k, s) as x", "struct"), ("null as x", "void"),
                          ("interval 1 day as x", "interval")]:
            with pytest.raises(kp.SchemaError, match=rf"column 'x' has Spark type {typ}"):
                kp.spark.input_from(eng, "bad", sdf.selectExpr(expr))
        with pytest.raises(kp.SchemaError, match="column 'x' has 10 null value"):
            kp.spark.input_from(eng, "bad", sdf.selectExpr("cast(null as int) as x"))
        assert "bad" not in eng.inputs()
        # char/varchar are strings
        kp.spark.input_from(eng, "chars", sdf.selectExpr("cast(s as varchar(3)) as x", "cast(s as char(3)) as y"))
        assert eng.inputs()["chars"].schema.dtypes == ("str", "str")
        # empty frames: the input is created with its types, an empty insert changes nothing
        kp.spark.input_from(eng, "empty", spark.createDataFrame([], SCHEMA))
        eng.inputs()["all"].insert(spark.createDataFrame([], SCHEMA))
        with eng.dataflow("e") as df:
            ve = df.input("empty").view("v")
        eng.wait(ve)
        es = ve.to_spark(spark, diffs=True)
        assert es.count() == 0 and es.columns[-1] == "diff"


def _batch(rows, dtype=pa.int64()):
    return pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "s": [r[1] for r in rows],
                     "d": pa.array([r[2] for r in rows], dtype)})


def test_batch_feeder_diff_types_and_batch_forms(spark):
    with kp.Engine(workers=2) as eng:
        inp = eng.input("t", ["k", "s"], {"k": "int64", "s": "str"})
        with eng.dataflow("v") as df:
            v = df.input("t").view("v")
        feed = kp.spark.BatchFeeder(inp, diff_col="d")
        feed(_batch([(1, "a", 2), (2, "b\x00", 1)]), 0)
        with pytest.raises(kp.SchemaError, match="diff 1.5"):
            feed(_batch([(1, "a", 1.5)], pa.float64()), 1)
        assert inp.epoch == 1
        feed(_batch([(1, "a", 2.0)], pa.float64()), 1)        # an integral float diff is taken
        with pytest.raises(kp.SchemaError, match="below 2\\*\\*62"):
            feed(_batch([(1, "a", 2**63)], pa.uint64()), 2)
        feed(_batch([(1, "a", -1)], pa.int32()), 2)
        feed(_batch([(3, "c", 0)]), 3)                         # a zero diff: nothing
        feed(_batch([(1, "a", 5)]), 3)                         # a replay: ignored
        feed(spark.createDataFrame([(6, "f", 1)], "k long, s string, d long"), 4)
        feed(spark.createDataFrame([], "k long, s string, d long"), 5)
        assert (feed.applied, feed.replayed, inp.epoch) == (6, 1, 6)
        eng.wait(v)
        assert sorted(map(tuple, v.to_arrow(diffs=True).to_pandas().values.tolist())) == \
            [(1, "a", 3), (2, "b\x00", 1), (6, "f", 1)]


def test_bug_batch_feeder_takes_an_empty_pandas_micro_batch():
    """BatchFeeder documents pandas micro-batches; an empty one (a str column of no rows is dtype object)
    goes through pa.Table.from_pandas without the input's schema, becomes Arrow type null and is refused
    ("column 's' has Arrow type null"), while input.insert of the same frame is fine. An empty batch must
    advance the input by one epoch."""
    with kp.Engine(workers=1) as eng:
        inp = eng.input("t", ["k", "s"], {"k": "int64", "s": "str"})
        empty = pd.DataFrame({"k": pd.Series([], dtype="int64"), "s": pd.Series([], dtype=object)})
        inp.insert(empty)                                   # fine
        kp.spark.BatchFeeder(inp)(empty, 0)
        assert inp.epoch == 1


def test_write_changes_with_nan_nul_strings_nets_to_the_view(spark, tmp_path):
    with kp.Engine(workers=2) as eng:
        inp = eng.input("f", ["x", "s"], {"x": "float64", "s": "str"})
        with eng.dataflow("fv") as df:
            fv = df.input("f").view("fv")
        sink = kp.spark.write_changes(fv, spark, str(tmp_path / "sink"))
        inp.insert([(float("nan"), "a\x00"), (-0.0, "a"), (1.5, "\x00"), (float("inf"), "ü"), (1.5, "\x00")])
        inp.advance_to(1)
        inp.remove([(1.5, "\x00")]), inp.insert([(2.0, "a\x00")])
        inp.advance_to(2)
        eng.wait(fv)
        sink.wait(2)
        sink.close()
        ch = spark.read.parquet(sink.path).toPandas()
        net = Counter()
        for x, s, t, d in ch[["x", "s", "time", "diff"]].itertuples(index=False, name=None):
            net[("nan" if math.isnan(x) else x, s)] += d
        assert +net == _bag(fv.to_pandas()[["x", "s"]])
        assert set(ch["time"]) == {0, 1}
