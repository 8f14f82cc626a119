"""Session 45 attack on the Spark bridge: Spark DataFrames as inputs (invalid UTF-8 strings from Spark,
collated strings, column names), views back out, Structured Streaming through ``kp.spark.follow`` (replays
after a restart from a checkpoint, two streams into one input, a query that fails to start) and
``kp.spark.run`` against the engine (a view column named like the backend's helper columns, graph
algorithms not compared before).

Tests named ``test_bug_*`` assert the documented behaviour where this attack found a bug (fixed in session
45: each failed before); the others pin down behaviour that was probed and held. One SparkSession for the run (``spark`` in tests/conftest.py:
local[2] on 127.0.0.1, UI off, two shuffle partitions)."""
import json
import math
import os
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

import kpgnb as kp
import kpgnb.spark as ks
from kpgnb import graphs

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import the tests

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


# -- 1. kp.spark.run: a view column named like the backend's own helper column -----------------------------

def test_bug_run_keeps_a_view_column_named_rep(spark):
    sdf = spark.createDataFrame([(1, 2), (3, 4), (3, 4)], "k long, _rep long")
    out = kp.spark.run(lambda df: df.input("t").view("o"), inputs={"t": sdf}, spark=spark)["o"]
    assert out.columns == ["k", "_rep"]
    assert sorted(map(tuple, out.collect())) == [(1, 2), (3, 4), (3, 4)]


def test_run_keeps_view_columns_named_like_other_internal_columns(spark):
    """_d (the multiplicity), _c0/_c1 (positional names), _in0 (input renaming), _round, diff: kept, with and
    without diffs=True."""
    sdf = spark.createDataFrame([(1, 2, 3, 4, 5), (1, 2, 3, 4, 5), (6, 7, 8, 9, 10)],
                                "_d long, _c1 long, _c0 long, _in0 long, _round long")
    out = kp.spark.run(lambda df: df.input("t").view("o"), inputs={"t": sdf}, spark=spark)["o"]
    assert out.columns == ["_d", "_c1", "_c0", "_in0", "_round"]
    assert sorted(map(tuple, out.collect())) == [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5), (6, 7, 8, 9, 10)]
    out = kp.spark.run(lambda df: df.input("t").view("o"), inputs={"t": sdf}, spark=spark, diffs=True)["o"]
    assert sorted(map(tuple, out.collect())) == [(1, 2, 3, 4, 5, 2), (6, 7, 8, 9, 10, 1)]


# -- 2. Spark strings the engine cannot hold ----------------------------------------------------------------

def test_bug_invalid_utf8_from_spark_is_a_schema_error_naming_the_column(spark):
    sdf = spark.sql("select 1L as k, cast(unhex('ff61') as string) as s union all select 2L, 'ok'")
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k", "s"], ["int64", "str"])
        x.insert([(0, "kept")])
        for load in (lambda: ks.input_from(eng, "t", sdf), lambda: x.insert(sdf)):
            try:
                load()
            except kp.SchemaError as e:
                assert "'s'" in str(e)
            else:  # or taken as Spark's own collect() shows the values
                pass
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v, timeout=60)
        got = _rows(v)
        assert got in ([(0, "kept")], sorted([(0, "kept")] + [tuple(r) for r in sdf.collect()]))


def test_collated_and_char_strings_load_by_value_on_both(spark):
    """A UTF8_LCASE column (Spark compares 'A' and 'a' equal) and a char(3) column: the engine and
    kp.spark.run both take the values as binary strings, and agree."""
    sdf = spark.sql("select * from values ('A'), ('a'), ('b'), ('B ') as t(s)").selectExpr(
        "s collate UTF8_LCASE as s", "cast(s as char(3)) as c")

    def build(df):
        t = df.input("t")
        t.count(by="s").view("c")
        t.join(t.select("s"), on="s").view("j")

    with kp.Engine(workers=2) as eng:
        ks.input_from(eng, "t", sdf)
        assert eng.inputs()["t"].schema.dtypes == ("str", "str")
        with eng.dataflow("x") as df:
            build(df)
            views = dict(df.views)
        eng.wait("x", timeout=60)
        want = {n: sorted(map(tuple, v.to_pandas(diffs=True).itertuples(index=False, name=None)))
                for n, v in views.items()}
    got = {n: sorted(map(tuple, d.collect())) for n, d in kp.spark.run(build, {"t": sdf}, spark=spark,
                                                                        diffs=True).items()}
    assert got == want
    assert [r[0] for r in want["c"]] == ["A", "B ", "a", "b"]


def test_column_names_identifiers_or_refused_by_both(spark):
    with kp.Engine(workers=1) as eng:
        for bad in ("a b", "a.b", "1x"):
            sdf = spark.createDataFrame([(1,)], f"`{bad}` long")
            with pytest.raises(kp.SchemaError, match=repr(bad)):
                ks.input_from(eng, "bad", sdf)
            with pytest.raises(kp.SchemaError, match=repr(bad)):
                kp.spark.run(lambda df: df.input("t").view("o"), inputs={"t": sdf}, spark=spark)
        assert "bad" not in eng.inputs()
        ok = spark.createDataFrame([(1, 2)], "`class` long, `é` long")
        inp = ks.input_from(eng, "ok", ok)
        assert inp.schema.names == ("class", "é")


# -- 3. Structured Streaming ---------------------------------------------------------------------------------

def _replay_after_restart(spark, tmp_path, spelling):
    """Two micro-batches, then the query stops as if the process died between batch 1 and its commit (the
    commit file removed): restarted from the checkpoint, Spark runs batch 1 again."""
    inbox, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    os.mkdir(inbox)
    stream = spark.readStream.schema("k long, d long").json(inbox)
    with kp.Engine(workers=1) as eng:
        q = ks.follow(stream, input="ev", diff_col="d", engine=eng, checkpoint=ck)
        try:
            with eng.dataflow("v") as df:
                v = df.input("ev").view("v")
            _drop_json(inbox, "a.json", [{"k": 1, "d": 1}])
            q.processAllAvailable()
            _drop_json(inbox, "b.json", [{"k": 2, "d": 1}])
            q.processAllAvailable()
        finally:
            q.stop()
        for f in os.listdir(os.path.join(ck, "commits")):
            if f in ("1", ".1.crc"):
                os.remove(os.path.join(ck, "commits", f))
        again = {"same": ck, "slash": ck + "/", "file-uri": "file://" + ck}[spelling]
        q2 = ks.follow(stream, input="ev", diff_col="d", engine=eng, checkpoint=again)
        try:
            q2.processAllAvailable()
        finally:
            q2.stop()
        eng.wait(v, timeout=60)
        return (q2.kpgnb_feeder.applied, q2.kpgnb_feeder.replayed), _rows(v, diffs=True)


def test_follow_ignores_a_batch_replayed_after_a_restart(spark, tmp_path):
    assert _replay_after_restart(spark, tmp_path, "same") == ((0, 1), [(1, 1), (2, 1)])


@pytest.mark.parametrize("spelling", ["slash", "file-uri"])
def test_bug_follow_ignores_a_replay_whatever_the_checkpoint_spelling(spark, tmp_path, spelling):
    assert _replay_after_restart(spark, tmp_path, spelling) == ((0, 1), [(1, 1), (2, 1)])


def test_two_streams_into_one_input(spark, tmp_path):
    """One stream with a diff column retracting what the other inserted, columns in another order."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(a), os.mkdir(b)
    with kp.Engine(workers=2) as eng:
        qa = ks.follow(spark.readStream.schema("k long, s string, d long").json(a), input="ev", diff_col="d",
                       engine=eng)
        qb = ks.follow(spark.readStream.schema("s string, k long").json(b), input="ev", engine=eng)
        try:
            with eng.dataflow("v") as df:
                v = df.input("ev").view("v")
            _drop_json(a, "1.json", [{"k": 1, "s": "x", "d": 2}])
            _drop_json(b, "1.json", [{"k": 1, "s": "x"}, {"k": 2, "s": "ü\u0000"}])
            qa.processAllAvailable(), qb.processAllAvailable()
            _drop_json(a, "2.json", [{"k": 1, "s": "x", "d": -3}])
            qa.processAllAvailable(), qb.processAllAvailable()
            assert eng.inputs()["ev"].epoch == 3
            eng.wait(v, timeout=60)
            assert _rows(v, diffs=True) == [(2, "ü\u0000", 1)]
        finally:
            qa.stop(), qb.stop()


class _Interleaved:
    """An input as feeder A sees it, where feeder B (another stream's foreachBatch, on another Spark thread)
    runs two micro-batches between A's insert and A's advance: one legal schedule of two streams feeding
    one input (A read the input's epoch there before session 45, and then asked for one behind it)."""

    def __init__(self, inp, other):
        self._inp, self._other, self.armed = inp, other, False

    def __getattr__(self, name):
        return getattr(self._inp, name)

    def _interleave(self):
        if self.armed:
            self.armed = False
            self._other(pa.table({"k": pa.array([10], pa.int64())}), 0)
            self._other(pa.table({"k": pa.array([11], pa.int64())}), 1)

    @property
    def epoch(self):
        e = self._inp.epoch
        self._interleave()
        return e

    def advance_to(self, epoch):
        self._interleave()
        return self._inp.advance_to(epoch)

    def flush(self):
        self._interleave()
        return self._inp.flush()


def test_bug_two_feeders_interleaved_both_apply_their_batches():
    with kp.Engine(workers=1) as eng:
        inp = eng.input("t", ["k"])
        fb = ks.BatchFeeder(inp)
        proxy = _Interleaved(inp, fb)
        fa = ks.BatchFeeder(proxy)
        proxy.armed = True
        fa(pa.table({"k": pa.array([1], pa.int64())}), 0)
        assert (fa.applied, fb.applied, fa.error) == (1, 2, None)
        with eng.dataflow("v") as df:
            v = df.input("t").view("v")
        eng.wait(v, timeout=60)
        assert _rows(v) == [(1,), (10,), (11,)]


def test_bug_follow_that_fails_to_start_creates_no_input(spark, tmp_path):
    src = str(tmp_path / "src")
    os.mkdir(src)
    with kp.Engine(workers=1) as eng:
        wrong = spark.readStream.schema("k long, t string").json(src)
        with pytest.raises(TypeError):
            ks.follow(wrong, input="ev", engine=eng, trigger={"bogus": 1})
        assert "ev" not in eng.inputs()
        assert not spark.streams.active


def test_follow_refuses_a_timestamp_stream_naming_the_column(spark, tmp_path):
    with kp.Engine(workers=1) as eng:
        stream = spark.readStream.schema("k long, t timestamp").json(str(tmp_path))
        with pytest.raises(kp.SchemaError, match="column 't' has Spark type timestamp"):
            ks.follow(stream, input="ts", engine=eng)
        assert "ts" not in eng.inputs() and not spark.streams.active


# -- 4. views out ---------------------------------------------------------------------------------------------

def test_views_to_spark_at_epochs_keep_values_and_types(spark):
    with kp.Engine(workers=2) as eng:
        inp = eng.input("r", ["k", "x", "b", "s"], ["int64", "float64", "bool", "str"])
        first = [(2**63 - 1, float("nan"), True, ""), (-2**63, 0.0, False, "a\x00"), (0, -math.inf, True, "😀")]
        inp.insert(first)
        inp.advance_to(1)
        with eng.dataflow("rr") as df:
            v = df.input("r").map(lambda k, x, b, s: {"k": k, "x": -x, "b": ~b, "s": s}).view("neg", history=4)
            z = df.input("r").select().view("z", history=4)
        eng.wait(v, timeout=60)
        inp.remove([first[2]])
        inp.advance_to(2)
        eng.wait(v, timeout=60)
        sp = v.to_spark(spark, at=0)
        assert sp.schema.simpleString() == "struct<k:bigint,x:double,b:boolean,s:string>"

        def canon(rows):
            return sorted(tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in r) for r in rows)

        assert canon(sp.collect()) == canon(v.to_pandas(at=0).itertuples(index=False, name=None)) == \
            canon([(2**63 - 1, float("nan"), False, ""), (-2**63, 0.0, True, "a\x00"), (0, math.inf, False, "😀")])
        assert canon(v.to_spark(spark).collect()) == canon(v.to_pandas().itertuples(index=False, name=None))
        assert v.to_spark(spark).count() == 2 and z.to_spark(spark).count() == 2
        assert [tuple(r) for r in z.to_spark(spark, at=0, diffs=True).collect()] == [(3,)]
        with pytest.raises(kp.UsageError, match="not final"):
            v.to_spark(spark, at=2)


# -- 5. kp.spark.run against the engine: graph algorithms not compared elsewhere ------------------------------

def _canon(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        return "nan" if math.isnan(v) else round(float(v), 9)  # pagerank sums: Spark's order (README)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return v


def _graphs(df):
    e, r = df.input("edges"), df.input("roots").rename(node="source")
    graphs.pagerank(e, iterations=4).view("pagerank")
    graphs.khop(e, r, 2).view("khop")
    graphs.rpq(df.input("labelled"), r, [(0, "a", 1), (1, "b", 0), (1, "é", 2)], [2]).view("rpq")


def test_pagerank_khop_rpq_on_spark_equal_the_engine(spark):
    rng = np.random.default_rng(5)
    frames = {
        "edges": spark.createDataFrame([(int(a), int(b)) for a, b in rng.integers(0, 8, (16, 2))],
                                       "src long, dst long"),
        "roots": spark.createDataFrame([(0,), (3,)], "node long"),
        "labelled": spark.createDataFrame([(int(a), ["a", "b", "é"][int(lab) % 3], int(b))
                                           for a, lab, b in rng.integers(0, 8, (20, 3))],
                                          "src long, label string, dst long"),
    }
    with kp.Engine(workers=2) as eng:
        for n, f in frames.items():
            ks.input_from(eng, n, f)
        with eng.dataflow("g") as df:
            _graphs(df)
            views = dict(df.views)
        eng.wait("g", timeout=120)
        want = {n: Counter({tuple(map(_canon, r[:-1])): int(r[-1])
                            for r in v.to_pandas(diffs=True).itertuples(index=False, name=None)})
                for n, v in views.items()}
    out = kp.spark.run(_graphs, frames, spark=spark, diffs=True)
    got = {n: Counter({tuple(map(_canon, list(r)[:-1])): int(r[-1]) for r in d.collect()}) for n, d in out.items()}
    assert got == want
    assert want["pagerank"] and want["khop"] and want["rpq"]


def test_sinks_and_feeders_of_no_columns_keep_their_rows(spark, tmp_path):
    """A view of no columns written to a parquet sink (time and diff only), and a micro-batch of only its
    diff column fed into an input of no columns."""
    with kp.Engine(workers=2) as eng:
        z = eng.input("z", [])
        with eng.dataflow("v") as df:
            zv = df.input("z").view("zv")
        sink = ks.write_changes(zv, spark, str(tmp_path / "z"))
        z.insert([(), ()])
        z.advance_to(1)
        z.remove([()])
        z.advance_to(2)
        eng.wait(zv, timeout=60)
        sink.wait(2)
        sink.close()
        assert sorted(map(tuple, spark.read.parquet(sink.path).collect())) == [(0, 2), (1, -1)]
        q = eng.input("q", [])
        ks.BatchFeeder(q, diff_col="d")(spark.createDataFrame([(3,), (-1,)], "d long"), 0)
        with eng.dataflow("qq") as df:
            n = df.input("q").count().view("n")
        eng.wait(n, timeout=60)
        assert n.to_pandas()["count"].tolist() == [2] and q.epoch == 1
