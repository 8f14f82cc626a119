"""Session 50 attack on the Spark side (README "Spark", "Scale out on Spark"): column types in and out, the
streaming bridge (``kp.spark.follow``) under concurrent readers, and ``kp.spark.run`` against the engine.

Tests marked xfail (strict) assert the documented (or obviously expected) behaviour where this attack found a
bug. The others pin down what was probed, held, and was not covered before: a file stream feeding an input
while other threads install dataflows, read them (pandas and Spark) and a parquet sink follows a view (every
read is a whole micro-batch); bool columns through every reduction and join on Spark and on the engine; and
a builder that exports, imports (``df.use``) and flattens arrangements giving the same views on both.
One SparkSession for the run (``spark`` in tests/conftest.py)."""
import json
import os
import sys
import threading
from collections import Counter

import pytest

import kpgnb as kp
import kpgnb.spark as ks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import the tests


def _diffs(view):
    return sorted(map(tuple, view.to_pandas(diffs=True).itertuples(index=False, name=None)))


def _drop_json(inbox, name, rows, mtime=None):
    """A JSON file moved into the source folder whole (with ``mtime``: Spark's file source orders the files
    of one listing by modification time, so batches made within one second need distinct ones)."""
    tmp = os.path.join(os.path.dirname(inbox), name + ".tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    path = os.path.join(inbox, name)
    os.rename(tmp, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


# -- bugs -------------------------------------------------------------------------------------------------------

def test_bug_follow_takes_a_diff_column_whose_name_has_a_dot(spark, tmp_path):
    """The diff column is not part of the row (README), so its name need not be an identifier: ``kp.spark.run``
    (``diff_col="d.x"``) and ``BatchFeeder`` take a column named ``d.x``. ``kp.spark.follow(stream, input="t",
    diff_col="d.x")`` instead fails before starting with Spark's raw ``AnalysisException``
    [UNRESOLVED_COLUMN] "`d`.`x` cannot be resolved. Did you mean [`d.x`, `k`]": follow does
    ``streaming_df.select(diff_col)`` and ``streaming_df.drop(diff_col)``, which parse the name as a path."""
    inbox = str(tmp_path / "in")
    os.mkdir(inbox)
    _drop_json(inbox, "0.json", [{"k": 1, "d.x": 2}, {"k": 2, "d.x": -1}])
    stream = spark.readStream.schema("k long, `d.x` long").json(inbox)
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="t", diff_col="d.x", engine=eng)
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert eng.inputs()["t"].schema.names == ("k",)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        assert _diffs(v) == [(1, 2), (2, -1)]


def test_bug_follow_diff_column_differing_by_case_from_a_row_column(spark, tmp_path):
    """To the engine ``k`` and ``K`` are two columns (``input_from`` of such a frame makes both; README: column
    names are Python identifiers), and ``kp.spark.run(..., diff_col="K")`` over the same frame takes ``K`` as
    the multiplicity of rows ``(k,)``, as ``BatchFeeder(inp, diff_col="K")`` does. ``kp.spark.follow`` of the
    same stream with ``diff_col="K"`` fails to start with Spark's raw ``AnalysisException``
    [AMBIGUOUS_REFERENCE] "Reference `K` is ambiguous": ``streaming_df.select(diff_col)`` resolves the name
    case-insensitively (and ``streaming_df.drop("K")`` would drop ``k`` too, leaving an input of no columns).
    Spark's file source itself refuses such a schema unless ``spark.sql.caseSensitive`` is on: with it off
    (the default) ``follow`` says so up front, naming the columns; with it on (set here for this test
    only) the stream feeds ``t`` as ``run`` reads the frame."""
    inbox = str(tmp_path / "off")
    os.mkdir(inbox)
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.SchemaError, match="'k', 'K'.*caseSensitive"):
            ks.follow(spark.readStream.schema("k long, K long").json(inbox), input="t", diff_col="K", engine=eng)
        assert "t" not in eng.inputs()
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        _follow_k_and_K(spark, tmp_path)
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


def _follow_k_and_K(spark, tmp_path):
    inbox = str(tmp_path / "in")
    os.mkdir(inbox)
    _drop_json(inbox, "0.json", [{"k": 1, "K": 2}, {"k": 2, "K": -1}])
    stream = spark.readStream.schema("k long, K long").json(inbox)
    sdf = spark.createDataFrame([(1, 2), (2, -1)], "k long, K long")
    assert sorted(map(tuple, ks.run(lambda df: df.input("t").view("o"), {"t": sdf}, spark=spark, diff_col="K",
                                    diffs=True)["o"].collect())) == [(1, 2), (2, -1)]
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="t", diff_col="K", engine=eng)
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert eng.inputs()["t"].schema.names == ("k",)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        assert _diffs(v) == [(1, 2), (2, -1)]


# -- what held ----------------------------------------------------------------------------------------------------

def test_stream_feeding_an_input_while_threads_install_and_read_dataflows(spark, tmp_path):
    """A file stream (one file per micro-batch) feeds input ``feed`` with ``diff_col``: batch i inserts the K
    rows of block i and retracts block i - 1, so every complete epoch holds exactly one block. Meanwhile two
    threads install dataflows over the input (identity, count by block, a self-join), read them (pandas, at
    the epoch the read reports, and Spark) and drop every other one, and a parquet sink follows a view.
    Every read is a whole epoch (K rows of one block, the block of that epoch), and the sink nets to the
    view's final contents."""
    N, K = 8, 4
    inbox = str(tmp_path / "in")
    os.mkdir(inbox)
    for i in range(N):
        rows = [{"b": i, "j": j, "d": 1} for j in range(K)] + [{"b": i - 1, "j": j, "d": -1} for j in range(K) if i]
        _drop_json(inbox, f"{i:03d}.json", rows, mtime=1_000_000_000 + 10 * i)
    stream = spark.readStream.schema("b long, j long, d long").option("maxFilesPerTrigger", 1).json(inbox)
    errors, reads = [], Counter()
    with kp.Engine(workers=2) as eng:
        q = ks.follow(stream, input="feed", diff_col="d", engine=eng)
        with eng.dataflow("base") as df:
            base = df.input("feed").count(by="b").view("base")
        sink = ks.write_changes(base, spark, str(tmp_path / "sink"))
        stop = threading.Event()

        def reader(tid):
            k = 0
            try:
                while not stop.is_set() or k < 2:
                    name = f"r{tid}_{k}"
                    with eng.dataflow(name) as df:
                        src = df.input("feed")
                        ident = src.view("ident")
                        cnt = src.count(by="b").view("cnt")
                        jn = src.join(src.rename(j="j2"), on="b").count().view("jn")
                    for _ in range(2):
                        p = ident.to_pandas()
                        e = p.attrs["epoch"]
                        if len(p) and (len(p) != K or set(p["b"]) != {e - 1} or sorted(p["j"]) != list(range(K))):
                            errors.append((name, "ident", e, p.values.tolist()))
                        c = cnt.to_pandas()
                        if len(c) and c.values.tolist() != [[c.attrs["epoch"] - 1, K]]:
                            errors.append((name, "cnt", c.attrs["epoch"], c.values.tolist()))
                        jj = jn.to_pandas()
                        if len(jj) and jj.values.tolist() != [[K * K]]:
                            errors.append((name, "jn", jj.attrs["epoch"], jj.values.tolist()))
                        reads[tid] += 1
                    if k % 3 == 0:
                        rows = [tuple(r) for r in cnt.to_spark(spark).collect()]
                        if rows and (len(rows) != 1 or rows[0][1] != K):
                            errors.append((name, "spark", rows))
                    if k % 2 == 0:
                        eng.drop(name)
                    k += 1
            except Exception as ex:  # noqa: BLE001 - reported below
                errors.append((tid, repr(ex)))

        threads = [threading.Thread(target=reader, args=(t,)) for t in range(2)]
        try:
            for t in threads:
                t.start()
            q.processAllAvailable()
        finally:
            stop.set()
            for t in threads:
                t.join(120)
            q.stop()
        assert q.exception() is None and q.kpgnb_feeder.applied == N
        assert eng.inputs()["feed"].epoch == N
        assert errors == [] and min(reads.values()) >= 2
        eng.wait(base, timeout=60)
        assert _diffs(base) == [(N - 1, K, 1)]
        sink.wait(N)
        sink.close()
        net = Counter()
        for r in spark.read.parquet(sink.path).collect():
            net[(r["b"], r["count"])] += r["diff"]
        assert {k: m for k, m in net.items() if m} == {(N - 1, K): 1}


BOOL_ROWS = [(True, 1, "a", 0.5), (False, 2, "b", -1.0), (True, 3, "a", float("nan")), (False, 1, "", 2.0),
             (True, 1, "a", 0.5), (False, 3, "b", 7.0)]
BOOL_DIFFS = [1, 2, 1, -1, 3, 1]
BOOL_DTYPES = {"b": "bool", "i": "int64", "s": "str", "f": "float64"}

BOOL_BUILDERS = {
    "join_on_bool": lambda df: df.input("t").join(df.input("t").select("b", "i").rename(i="i2"), on="b"),
    "min_max_bool": lambda df: df.input("t").min(by="s", col="b").join(df.input("t").max(by="s", col="b")
                                                                       .rename(b="bmax"), on="s"),
    "top_k_by_bool": lambda df: df.input("t").top_k(by="s", order_by="b", k=1),
    "argmax_argmin_bool": lambda df: df.input("t").argmax(by="s", col="b").concat(
        df.input("t").argmin(by="s", col="b")),
    "sum_by_bool": lambda df: df.input("t").sum(by="b", col="f"),
    "filter_map_bool": lambda df: df.input("t").filter(lambda b: b).map(lambda b, i: {"c": ~b, "n": b + i}),
    "semijoin_bool": lambda df: df.input("t").antijoin(df.input("t").filter(lambda i: i > 2).select("b"), on="b"),
}


def _canon(row):
    return tuple(repr(float(x)) if isinstance(x, float) else x for x in row)


def test_bool_columns_through_reductions_and_joins_agree_with_the_engine(spark):
    """Bool columns (keys, reduced values, orderings, a traced map and filter over them) over rows with
    retractions and NaN: ``kp.spark.run`` gives the engine's views, with boolean Spark columns."""
    sdf = spark.createDataFrame([r + (d,) for r, d in zip(BOOL_ROWS, BOOL_DIFFS)],
                                "b boolean, i long, s string, f double, diff long")

    def build(df):
        for name, fn in BOOL_BUILDERS.items():
            fn(df).view(name)

    with kp.Engine(workers=2) as eng:
        inp = eng.input("t", list(BOOL_DTYPES), BOOL_DTYPES)
        inp.update(BOOL_ROWS, BOOL_DIFFS)
        inp.advance_to(1)
        with eng.dataflow("p") as df:
            build(df)
            views = dict(df.views)
        eng.wait("p")
        want = {n: Counter({_canon(r[:-1]): r[-1] for r in v.to_pandas(diffs=True).itertuples(index=False, name=None)})
                for n, v in views.items()}
        dtypes = {n: v.schema.dtypes for n, v in views.items()}
    out = ks.run(build, {"t": sdf}, spark=spark, diff_col="diff", diffs=True)
    assert sorted(out) == sorted(want)
    spark_types = {"bool": "boolean", "int64": "bigint", "float64": "double", "str": "string"}
    for name, sdf_out in out.items():
        got = Counter({_canon(tuple(r)[:-1]): tuple(r)[-1] for r in sdf_out.collect()})
        assert got == want[name], name
        assert [f.dataType.simpleString() for f in sdf_out.schema.fields][:-1] == \
            [spark_types[d] for d in dtypes[name]], name


def test_arrangement_api_in_a_builder_runs_on_spark_as_on_the_engine(spark):
    """A builder written for the engine that arranges, exports, flattens (``as_collection``) and imports an
    export keyed by its second column (``df.use``: key columns first) gives the same views, columns in the
    same order, on Spark given the export's rows as an input of that name."""
    edges = spark.createDataFrame([(1, 2), (2, 3), (3, 1), (2, 4)], "src long, dst long")

    def build(df):
        by_src = df.input("edges").arrange_by("src").export("by_src_s50")
        by_src.join(df.input("edges").rename(src="x", dst="src"), on="src").view("two_hop")
        df.input("edges").arrange_by("dst").as_collection().view("flat")
        df.use("by_dst_s50").as_collection().count(by="dst").view("indeg")

    with kp.Engine(workers=2) as eng:
        ks.input_from(eng, "edges", edges)
        with eng.dataflow("exports") as df:
            df.input("edges").arrange_by("dst").export("by_dst_s50")
        with eng.dataflow("p") as df:
            build(df)
            views = dict(df.views)
        eng.wait("p")
        want = {n: (list(v.schema.names), _diffs(v)) for n, v in views.items()}
    out = ks.run(build, {"edges": edges, "by_dst_s50": edges.select("dst", "src")}, spark=spark, diffs=True)
    got = {n: (sdf.columns[:-1], sorted(map(tuple, sdf.collect()))) for n, sdf in out.items()}
    assert got == want
