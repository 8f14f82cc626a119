"""The Spark bridge: Spark DataFrames (and Arrow tables, pandas frames) as inputs, views back out to Arrow and
Spark, Structured Streaming feeding a live input, and view changes written to a Spark sink. One local[2]
session for the whole file (the ``spark`` fixture in conftest.py)."""
import os
import sys
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

COLS = ["k", "x", "flag", "s"]
DTYPES = ["int64", "float64", "bool", "str"]
ROWS = [(1, 0.5, True, "a"), (2, -1.25, False, "b"), (3, 0.0, True, ""), (-4, 1e300, False, "naïve ☃"),
        (1, 0.5, True, "a"), (2 ** 40, 2.0, True, "b")]
SPARK_SCHEMA = "k long, x double, flag boolean, s string"


@pytest.fixture(params=[1, 2], ids=["W1", "W2"])
def eng(request):
    e = kp.Engine(workers=request.param)
    yield e
    e.close()


def contents(view, diffs=False):
    df = view.to_pandas(diffs=diffs)
    return Counter(map(tuple, df.itertuples(index=False)))


def identity_view(eng, name):
    with eng.dataflow("df_" + name) as df:
        v = df.input(name).view(name)
    return v


def test_session_is_loopback(spark):
    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert conf.get("spark.driver.host") == "127.0.0.1" and conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable == os.environ["PYSPARK_DRIVER_PYTHON"]
    assert ks.session() is spark  # getOrCreate, its shuffle partitions kept
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert ks.session(partitions=3) is spark and spark.conf.get("spark.sql.shuffle.partitions") == "3"
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert kp.spark is ks


def test_spark_insert_and_remove_equal_tuples(spark, eng):
    sdf = spark.createDataFrame(ROWS, SPARK_SCHEMA)  # one Arrow chunk per partition (local[2]: two)
    a = eng.input("a", COLS, DTYPES)
    b = eng.input("b", COLS, DTYPES)
    a.insert(sdf)
    b.insert(ROWS)
    for i in (a, b):
        i.advance_to(1)
    va, vb = identity_view(eng, "a"), identity_view(eng, "b")
    eng.wait(va), eng.wait(vb)
    assert contents(va) == contents(vb) == Counter(ROWS)
    gone = [r for r in ROWS if r[0] in (1, 3)]
    a.remove(sdf.where("k in (1, 3)"))
    b.remove(gone)
    a.update(sdf.where("k = 2"), 3)
    b.update([r for r in ROWS if r[0] == 2], [3])
    for i in (a, b):
        i.advance_to(2)
    eng.wait(va), eng.wait(vb)
    assert contents(va) == contents(vb) == Counter(ROWS) - Counter(gone) + Counter({(2, -1.25, False, "b"): 3})


def test_narrow_spark_types_and_input_from(spark, eng):
    sdf = spark.createDataFrame([(1, 2, 3, 1.5, "x", True), (-1, -2, -3, -0.0, "y", False)],
                                "t tinyint, h smallint, i int, f float, s string, b boolean")
    assert ks.dtypes_of(sdf) == {"t": "int64", "h": "int64", "i": "int64", "f": "float64", "s": "str", "b": "bool"}
    inp = ks.input_from(eng, "narrow", sdf)
    assert inp.schema.dtypes == ("int64", "int64", "int64", "float64", "str", "bool") and inp.epoch == 1
    v = identity_view(eng, "narrow")
    eng.wait(v)
    assert contents(v) == Counter([(1, 2, 3, 1.5, "x", True), (-1, -2, -3, 0.0, "y", False)])


def _bad_frames(spark):
    base = spark.createDataFrame(ROWS, SPARK_SCHEMA)
    return [
        ("null string", base.union(spark.createDataFrame([(9, 1.0, True, None)], SPARK_SCHEMA)),
         r"column 's' has 1 null value\(s\), the first at row 6"),
        ("null int", spark.createDataFrame([(1, 1.0, True, "a"), (None, 2.0, False, "b")], SPARK_SCHEMA),
         r"column 'k' has 1 null value\(s\), the first at row 1"),
        ("timestamp", base.selectExpr("cast(k as timestamp) as k", "x", "flag", "s"),
         r"column 'k' has Arrow type timestamp\[us, tz=UTC\], which kpgnb cannot store"),
        ("decimal", base.selectExpr("cast(k as decimal(20, 0)) as k", "x", "flag", "s"),
         r"column 'k' has Arrow type decimal128\(20, 0\), which kpgnb cannot store"),
        ("string into int", base.selectExpr("cast(k as string) as k", "x", "flag", "s"),
         r"column 'k' is int64 but the Spark DataFrame has it as Arrow type string"),
        ("missing column", base.drop("flag"), r"missing columns \['flag'\]"),
    ]


def test_bad_spark_frames_are_refused_and_change_nothing(spark):
    with kp.Engine(workers=2) as eng:
        inp = eng.input("t", COLS, DTYPES)
        inp.insert(ROWS[:2])
        inp.advance_to(1)
        v = identity_view(eng, "t")
        eng.wait(v)
        before = contents(v)
        for what, sdf, match in _bad_frames(spark):
            for call in (inp.insert, inp.remove, lambda df: inp.update(df, 2)):
                with pytest.raises(kp.SchemaError, match=match):
                    call(sdf)
        inp.advance_to(2)
        eng.wait(v)
        assert contents(v) == before and inp.epoch == 2
        # input_from refuses before creating the input
        with pytest.raises(kp.SchemaError, match=r"column 'k' has Spark type timestamp"):
            ks.input_from(eng, "ts", _bad_frames(spark)[2][1])
        with pytest.raises(kp.SchemaError, match=r"column 's' has 1 null value"):
            ks.input_from(eng, "nulls", _bad_frames(spark)[0][1])
        assert set(eng.inputs()) == {"t"}


def test_arrow_chunks_dictionaries_and_pandas_strings():
    """Without Spark: chunked columns, per-chunk and shared dictionaries, large strings, narrow ints; pandas
    string columns with nulls refused by column and row."""
    with kp.Engine(workers=1) as eng:
        inp = eng.input("t", ["k", "s", "c"], ["int64", "str", "str"])
        t = pa.table({
            "k": pa.chunked_array([pa.array([1, 2], pa.int16()), pa.array([3], pa.int16()), pa.array([], pa.int16())]),
            "s": pa.chunked_array([pa.array(["x", "y"], pa.large_string()), pa.array(["x"], pa.large_string()),
                                   pa.array([], pa.large_string())]),
            "c": pa.chunked_array([pa.array(["p", "q"]).dictionary_encode(), pa.array(["r"]).dictionary_encode(),
                                   pa.array([], pa.string()).dictionary_encode()]),
        })
        inp.insert(t)
        inp.insert(t.to_batches()[0])
        inp.insert(pd.DataFrame({"k": [7], "s": pd.array(["z"], dtype="string"), "c": pd.Categorical(["p"])}))
        for bad, match in [(["w", None], r"column 's' holds a null \(None, NaN or NA\) at row 1"),
                           (["w", np.nan], r"column 's' holds a null .* at row 1"),
                           (["w", 5], r"column 's' is str but row 1 holds 5 \(int\)")]:
            with pytest.raises(kp.SchemaError, match=match):
                inp.insert(pd.DataFrame({"k": [1, 2], "s": bad, "c": ["p", "p"]}))
        inp.advance_to(1)
        v = identity_view(eng, "t")
        eng.wait(v)
        assert contents(v) == Counter([(1, "x", "p"), (2, "y", "q"), (3, "x", "r"), (1, "x", "p"), (2, "y", "q"),
                                       (7, "z", "p")])


def test_pandas_strings_that_differ_by_trailing_nuls_stay_apart():
    """pandas hashes object strings as C strings, so its factorize makes "a" and "a\x00" one value."""
    values = ["a", "a\x00", "", "\x00", "b", "a"]
    with kp.Engine(workers=1) as eng:
        inp = eng.input("t", ["s", "i"], ["str", "int64"])
        inp.insert(pd.DataFrame({"s": np.array(values, object), "i": np.arange(6)}))
        inp.advance_to(1)
        v = identity_view(eng, "t")
        eng.wait(v)
        assert contents(v) == Counter(zip(values, range(6)))


def test_to_arrow_and_to_spark_roundtrip(spark, eng):
    inp = ks.input_from(eng, "r", spark.createDataFrame(ROWS, SPARK_SCHEMA))
    empty = eng.input("e", COLS, DTYPES)
    empty.advance_to(1)
    with eng.dataflow("out") as df:
        v = df.input("r").view("rows", history=5)
        ve = df.input("e").view("empty")
        vc = df.input("r").count(by="s").view("per_s")
    eng.wait(v), eng.wait(ve), eng.wait(vc)
    t = v.to_arrow()
    assert [str(f.type) for f in t.schema] == ["int64", "double", "bool", "string"]
    assert Counter(zip(*(t.column(c).to_pylist() for c in COLS))) == Counter(ROWS)
    back = v.to_spark(spark)
    assert [f.dataType.simpleString() for f in back.schema.fields] == ["bigint", "double", "boolean", "string"]
    assert Counter(tuple(r) for r in back.collect()) == Counter(ROWS)
    # roundtrip: the Spark frame back into an input equals the view
    again = ks.input_from(eng, "again", back)
    va = identity_view(eng, "again")
    eng.wait(va)
    assert contents(va) == contents(v)
    assert dict(zip(*(vc.to_arrow().column(c).to_pylist() for c in ("s", "count")))) == \
        {"a": 2, "b": 2, "": 1, "naïve ☃": 1}
    td = v.to_arrow(diffs=True)
    assert td.column_names == COLS + ["diff"] and sorted(td.column("diff").to_pylist()) == [1, 1, 1, 1, 2]
    # empty views keep their types
    et = ve.to_arrow()
    assert et.num_rows == 0 and [str(f.type) for f in et.schema] == ["int64", "double", "bool", "string"]
    es = ve.to_spark(spark)
    assert es.count() == 0
    assert [f.dataType.simpleString() for f in es.schema.fields] == ["bigint", "double", "boolean", "string"]
    inp.remove(spark.createDataFrame(ROWS, SPARK_SCHEMA))
    inp.advance_to(2)
    empty.advance_to(2)  # the dataflow reads both inputs
    eng.wait(v)
    assert v.to_spark(spark).count() == 0 and v.to_arrow(at=0).num_rows == len(ROWS)


def _drop_file(src, name, rows, schema):
    """Write a parquet file next to the source folder and move it in whole (the source never sees half a
    file)."""
    cols = {n: [r[i] for r in rows] for i, n in enumerate(schema.names)}
    tmp = os.path.join(os.path.dirname(src), name)
    pq.write_table(pa.table(cols, schema=schema), tmp)
    os.rename(tmp, os.path.join(src, name))


STREAM = pa.schema([("k", pa.int64()), ("s", pa.string()), ("d", pa.int64())])


def test_follow_micro_batches_with_retractions_and_replays(spark, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    stream = spark.readStream.schema("k long, s string, d long").option("maxFilesPerTrigger", 1).parquet(str(src))
    with kp.Engine(workers=2) as eng:
        query = ks.follow(stream, input="ev", diff_col="d", engine=eng)
        try:
            inp = eng.inputs()["ev"]
            assert inp.schema.names == ("k", "s") and inp.schema.dtypes == ("int64", "str")
            with eng.dataflow("per_s") as df:
                v = df.input("ev").view("ev")
                c = df.input("ev").count(by="s").view("count")
            batches = [[(1, "a", 1), (2, "b", 1), (3, "a", 2)],
                       [(1, "a", -1), (4, "c", 1)],
                       [(3, "a", -1), (2, "b", -1), (5, "b", 1)]]
            expected = Counter()
            for i, rows in enumerate(batches):
                _drop_file(str(src), f"part-{i}.parquet", rows, STREAM)
                query.processAllAvailable()
                for k, s, d in rows:
                    expected[(k, s)] += d
                expected = +expected
                assert inp.epoch == i + 1  # one epoch per micro-batch
                eng.wait(v), eng.wait(c)
                assert contents(v) == expected
            assert contents(c) == Counter({("a", 1): 1, ("c", 1): 1, ("b", 1): 1})
            feeder = query.kpgnb_feeder
            assert (feeder.applied, feeder.replayed, feeder.last_batch_id) == (3, 0, 2)
            # a replayed batch id (at-least-once delivery) is ignored, whatever it holds
            replay = spark.createDataFrame([(9, "z", 5)], "k long, s string, d long")
            feeder(replay, 2)
            feeder(replay, 1)
            assert (feeder.applied, feeder.replayed, inp.epoch) == (3, 2, 3)
            # an engine-side error (a null key) fails the query visibly, and changes nothing
            _drop_file(str(src), "part-9.parquet", [(None, "x", 1)], STREAM)
            with pytest.raises(Exception, match=r"column 'k' has 1 null value"):
                query.processAllAvailable()
            assert not query.isActive and "column 'k' has 1 null value" in str(query.exception())
            assert isinstance(feeder.error, kp.SchemaError)
            eng.wait(v)
            assert inp.epoch == 3 and contents(v) == expected
        finally:
            query.stop()


def test_follow_into_closed_engine_fails_the_query(spark, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    stream = spark.readStream.schema("k long, s string").parquet(str(src))
    eng = kp.Engine(workers=1)
    inp = eng.input("ev", ["k", "s"], ["int64", "str"])
    query = ks.follow(stream, input=inp, engine=eng, trigger={"processingTime": "100 milliseconds"})
    try:
        _drop_file(str(src), "a.parquet", [(1, "a"), (2, "b"), (1, "a")], schema)
        query.processAllAvailable()
        with eng.dataflow("v") as df:
            v = df.input("ev").view("ev")
        eng.wait(v)
        assert contents(v) == Counter([(1, "a"), (1, "a"), (2, "b")]) and inp.epoch == 1
        eng.close()
        _drop_file(str(src), "b.parquet", [(3, "c")], schema)
        with pytest.raises(Exception, match="the engine is closed"):
            query.awaitTermination(60)
        assert "the engine is closed" in str(query.exception())
        assert isinstance(query.kpgnb_feeder.error, kp.EngineError)
    finally:
        query.stop()
        eng.close()


def test_follow_refuses_what_does_not_fit(spark, tmp_path):
    with kp.Engine(workers=1) as eng:
        eng.input("ev", ["k", "s"], ["int64", "str"])
        with pytest.raises(kp.UsageError, match="needs a streaming DataFrame"):
            ks.follow(spark.createDataFrame([(1, "a")], "k long, s string"), input="ev", engine=eng)
        stream = spark.readStream.schema("k long, t string").parquet(str(tmp_path))
        with pytest.raises(kp.SchemaError, match=r"do not match input 'ev'"):
            ks.follow(stream, input="ev", engine=eng)
        with pytest.raises(kp.SchemaError, match=r"diff column 'd' is not in the stream's columns"):
            ks.follow(stream, input="ev", diff_col="d", engine=eng)
        assert not spark.streams.active


def test_write_changes_to_a_parquet_sink(spark, tmp_path):
    path = str(tmp_path / "sink")
    with kp.Engine(workers=2) as eng:
        inp = eng.input("clicks", ["user", "page"], ["str", "int64"])
        inp.insert([("ann", 1), ("bob", 2), ("ann", 3)])
        inp.advance_to(1)
        with eng.dataflow("per_user") as df:
            v = df.input("clicks").count(by="user").view("per_user", history=10)
        eng.wait(v)
        writer = ks.write_changes(v, spark, path)
        try:
            for e, (ins, rem) in enumerate([([("cy", 4)], []), ([("bob", 5)], [("ann", 1)]),
                                            ([], [("cy", 4)])], start=1):
                inp.insert(ins)
                inp.remove(rem)
                inp.advance_to(e + 1)
            eng.wait(v)
            writer.wait(inp.epoch)
        finally:
            writer.close()
        sink = spark.read.parquet(path)
        assert [f.dataType.simpleString() for f in sink.schema.fields] == ["string", "bigint", "bigint", "bigint"]
        changes = sink.toPandas()
        assert set(changes["time"]) <= {0, 1, 2, 3} and writer.rows == len(changes)
        net = changes.groupby(["user", "count"])["diff"].sum()
        net = Counter({k: int(d) for k, d in net.items() if d})
        assert net == contents(v) == Counter({("ann", 1): 1, ("bob", 2): 1})
        # the changes alone rebuild every epoch
        for t in range(4):
            at = changes[changes["time"] <= t].groupby(["user", "count"])["diff"].sum()
            assert Counter({k: int(d) for k, d in at.items() if d}) == contents_at(v, t)


def contents_at(view, t):
    return Counter(map(tuple, view.to_pandas(at=t).itertuples(index=False)))


def test_a_spark_frame_of_no_columns_keeps_its_rows(spark):
    """``toArrow()`` of a Spark DataFrame with no columns has no rows; the input counts Spark's rows, as
    ``kp.spark.run`` over the same frame does."""
    sdf = spark.range(3).select()
    with kp.Engine(workers=2) as eng:
        kp.spark.input_from(eng, "s", sdf)
        t = eng.input("t", [], rows=sdf)
        t.advance_to(1)
        with eng.dataflow("zs") as df:
            cs = df.input("s").count().view("cs")
            ct = df.input("t").count().view("ct")
        eng.wait(cs, timeout=60)
        eng.wait(ct, timeout=60)
        assert cs.to_pandas()["count"].tolist() == ct.to_pandas()["count"].tolist() == [3]
    ran = kp.spark.run(lambda df: df.input("s").count().view("cs"), inputs={"s": sdf}, spark=spark)
    assert [r["count"] for r in ran["cs"].collect()] == [3]


def test_a_streaming_frame_as_rows_says_to_follow_it(spark, tmp_path):
    """A streaming DataFrame given where rows are read at once (``eng.input(rows=)``, ``insert``,
    ``kp.spark.input_from``) raised Spark's AnalysisException; it is a SchemaError naming kp.spark.follow,
    and no input is left behind."""
    stream = spark.readStream.schema("a long, b long").json(str(tmp_path))
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.SchemaError, match="kp.spark.follow"):
            eng.input("s", ["a", "b"], rows=stream)
        with pytest.raises(kp.SchemaError, match="kp.spark.follow"):
            kp.spark.input_from(eng, "t", stream)
        x = eng.input("x", ["a", "b"])
        with pytest.raises(kp.SchemaError, match="kp.spark.follow"):
            x.insert(stream)
        assert list(eng.inputs()) == ["x"]


def test_a_micro_batch_of_no_columns_keeps_its_rows(spark):
    """A Structured Streaming micro-batch of no columns (a stream ``select()``ed down) was read through
    ``toArrow()``, which has no rows for it: its rows were lost."""
    with kp.Engine(workers=1) as eng:
        inp = eng.input("z", [])
        feed = kp.spark.BatchFeeder(inp)
        feed(spark.range(4).select(), 0)
        feed(spark.range(2).select(), 1)
        with eng.dataflow("c") as df:
            v = df.input("z").count().view("n")
        eng.wait(v, timeout=60)
        assert v.to_pandas()["count"].tolist() == [6]
