"""kpgnb.spark.run attacked as a demanding user would (issue 15): "kp.spark.run(...) and the engine give
identical results on the same inputs", and "a feature the backend cannot translate raises a clear error
naming the operator, before any job runs".

tests/test_spark_backend.py covers the oracle suite's random int64 programs; this file covers the rest,
always against the engine on the same rows and multiplicities: kpgnb.graphs over random graphs, every
dtype (str with non-ASCII, float64 with NaN, -0.0 and infinities, bool) through every operator family,
the ways a builder can define its views, inputs given as pandas or as narrow Spark types, and the errors
(untranslatable operators, missing inputs, failing user functions, unsupported column types, nulls), with
Spark's status tracker telling whether a job ran. Each Spark run is one builder with many views, because
every view costs a few Spark jobs."""
import inspect
import sys
from collections import Counter
from contextlib import contextmanager
from datetime import datetime
from uuid import uuid4

import numpy as np
import pandas as pd
import pytest
from numba import njit

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.collection import Collection

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import this module

NAN, INF = float("nan"), float("inf")
_SPARK_TYPES = {"int64": "long", "float64": "double", "bool": "boolean", "str": "string"}
STRINGS = ["a", "b", "", "é", "Z", "\U0001f600", "\uffff", "ab"]  # code point order: "", Z, a, ab, b, é, \uffff, 😀
FLOATS = [1.5, -0.0, 0.0, NAN, INF, -INF, 2.5, -1.25]


# -- running a builder both ways --------------------------------------------------------------------------

def _dtype(series) -> str:
    return "str" if series.dtype == object else str(series.dtype)


def _spark_df(frame: pd.DataFrame, spark):
    """A Spark DataFrame of the frame's rows, built from Python values so that NaN stays NaN (pandas
    conversion turns it into null) and -0.0 stays -0.0."""
    schema = ", ".join(f"{c} {_SPARK_TYPES[_dtype(frame[c])]}" for c in frame.columns)
    rows = [tuple(v.item() if hasattr(v, "item") else v for v in r) for r in frame.itertuples(index=False)]
    return spark.createDataFrame(rows, schema)


def _canon(v):
    """A value as a Counter key: floats by repr, so that NaN equals NaN and -0.0 differs from 0.0."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (int, np.integer)):
        return int(v)
    return str(v)


def _as_views(ret):
    """What kp.spark.run does with a builder's return value: a Collection is the view ``result``, a dict
    of Collections views named by key."""
    if isinstance(ret, Collection):
        ret = {"result": ret}
    if isinstance(ret, dict):
        for k, v in ret.items():
            v.view(str(k))


def _engine(build, frames: dict, exports=None) -> dict:
    """{view: Counter(row -> multiplicity)} from the engine, the frames loaded as inputs (a ``diff`` column
    is the rows' multiplicity). ``exports(df)`` builds a dataflow installed first (for ``df.use``)."""
    with kp.Engine(workers=2) as eng:
        for name, f in frames.items():
            cols = [c for c in f.columns if c != "diff"]
            s = eng.input(name, cols, [_dtype(f[c]) for c in cols])
            if len(f):
                if "diff" in f:
                    s.update(f[cols], f["diff"].to_numpy())
                else:
                    s.insert(f[cols])
            s.advance_to(1)
        if exports is not None:
            with eng.dataflow("exports") as df:
                exports(df)
        with eng.dataflow("d") as df:
            _as_views(build(df))
            views = dict(df.views)
        eng.wait("d")
        out = {}
        for name, v in views.items():
            cols = v.columns(diffs=True)
            c = Counter()
            for i, d in enumerate(cols["diff"]):
                c[tuple(_canon(cols[n][i]) for n in v.schema.names)] += int(d)
            out[name] = c
        return out


def _collect(sdf, diffs=True) -> Counter:
    names = [c for c in sdf.columns if not (diffs and c == "diff")]
    c = Counter()
    for r in sdf.collect():
        c[tuple(_canon(r[n]) for n in names)] += int(r["diff"]) if diffs else 1
    return c


def _on_spark(build, frames: dict, spark) -> dict:
    inputs = {n: _spark_df(f, spark) for n, f in frames.items()}
    out = kp.spark.run(build, inputs, spark=spark, diff_col="diff", diffs=True)
    return {n: _collect(sdf) for n, sdf in out.items()}


def _assert_same(want: dict, got: dict):
    assert sorted(got) == sorted(want), "the views differ"
    bad = {n: (dict(want[n]), dict(got[n])) for n in want if want[n] != got[n]}
    assert not bad, "views that differ (engine, spark): " + "; ".join(f"{n}: {w} != {g}" for n, (w, g) in bad.items())


def both_ways(build, frames, spark) -> dict:
    want = _engine(build, frames)
    _assert_same(want, _on_spark(build, frames, spark))
    return want


@contextmanager
def _jobs(spark):
    """Yields a function giving the ids of the Spark jobs started inside the block (by this thread)."""
    sc = spark.sparkContext
    group = f"attack-{uuid4().hex}"
    sc.setJobGroup(group, "jobs of one check")
    try:
        yield lambda: list(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


# -- kpgnb.graphs ---------------------------------------------------------------------------------------------

def _graph(seed: int, clusters: int, n: int, degree: float) -> dict:
    """A random directed graph of ``clusters`` clusters of ``n`` nodes, self-loops included, a few edges
    one way from each cluster to the next but the last (which stays a weak component of its own); and 3
    roots."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for c in range(clusters):
        m = int(n * degree)
        src.append(rng.integers(0, n, m) + c * n)
        dst.append(rng.integers(0, n, m) + c * n)
    for c in range(clusters - 2):  # one-way bridges: weakly, not strongly, connected
        src.append(rng.integers(0, n, 2) + c * n)
        dst.append(rng.integers(0, n, 2) + (c + 1) * n)
    e = pd.DataFrame({"src": np.concatenate(src), "dst": np.concatenate(dst)}).astype("int64")
    e = e.drop_duplicates().reset_index(drop=True)
    roots = pd.DataFrame({"node": rng.choice(clusters * n, 3, replace=False).astype(np.int64)})
    return {"edges": e, "roots": roots}


def _weighted(src, dst):
    return {"src": src, "dst": dst, "w": ((src * 7 + dst) % 4 + 1) * 0.5}


ALGORITHMS = {
    "bfs": lambda edges, roots: graphs.bfs(edges, roots),
    "reachable": lambda edges, roots: graphs.reachable(edges, roots),
    "wcc": lambda edges, roots: graphs.wcc(edges),
    "scc": lambda edges, roots: graphs.scc(edges),
    "khop": lambda edges, roots: graphs.khop(edges, roots.rename(node="source"), 2, memory="full"),
    "sssp": lambda edges, roots: graphs.sssp(edges.map(_weighted), roots.rename(node="source"), memory="full"),
}


@pytest.mark.parametrize("seed,clusters,n,degree,names", [
    (1, 1, 60, 4.0, ["bfs", "wcc", "scc", "sssp"]),
    (2, 3, 30, 2.0, ["reachable", "wcc", "khop"]),  # scc here: see test_loop_state_estimates_do_not_compound
])
def test_graph_algorithms_match_the_engine(seed, clusters, n, degree, names, spark):
    """bfs, reachable, wcc (delayed entry), scc (doubly nested loops), khop and sssp (ife memory="full")
    on a dense random graph and on a sparse one of several components, each graph in one Spark run."""
    def build(df):
        return {name: ALGORITHMS[name](df.input("edges"), df.input("roots")) for name in names}
    got = both_ways(build, _graph(seed, clusters, n, degree), spark)
    assert all(got.values()) and len(set(r[1] for r in got["wcc"])) >= max(1, clusters - 1)


def _closure(df):
    """Transitive closure by squaring: both sides of the join change in every round."""
    return df.input("edges").iterate(lambda r: r.concat(r.join(r, left_on="dst", right_on="src").map(
        lambda src, dst_right: {"src": src, "dst": dst_right})).distinct())


def test_loop_state_estimates_do_not_compound(spark):
    """State checkpointed in a loop must not keep the size estimate of the plan it replaced
    (localCheckpoint does): Spark estimates a join as the product of its inputs' sizes, so kept estimates
    compound, doubling in bits every round where both sides of a join change, until planning spends
    minutes in BigInteger products and the driver runs out of memory (scc on the sparse graph above: no
    answer after 15 minutes, then OutOfMemoryError; the engine: 0.2 s). Spark's own estimate for a
    DataFrame over an RDD is 2**63 - 1, 63 bits."""
    frames = {"edges": pd.DataFrame({"src": np.arange(16), "dst": np.arange(1, 17)})}
    want = _engine(_closure, frames)["result"]
    assert sum(want.values()) == 16 * 17 // 2
    out = kp.spark.run(_closure, {"edges": _spark_df(frames["edges"], spark)}, spark=spark, diffs=True)
    assert _collect(out["result"]) == want
    try:
        bits = int(out["result"]._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()).bit_length()
    except ValueError:  # py4j's int() of more than 4300 digits
        bits = INF
    assert bits <= 256, f"the result's estimated size has {bits} bits"


# -- every dtype through every operator family ---------------------------------------------------------------

def _typed_frame(seed: int, n: int) -> pd.DataFrame:
    """Rows over small domains (so groups tie on every column), with multiplicities from -1 to 3 and some
    rows that cancel: str (non-ASCII, empty, beyond the BMP), float (NaN, +-0.0, +-inf), bool, int."""
    rng = np.random.default_rng(seed)
    f = pd.DataFrame({"k": rng.choice(np.array(STRINGS, object), n), "x": rng.choice(FLOATS, n),
                      "b": rng.integers(0, 2, n).astype(bool), "i": rng.integers(1, 4, n),
                      "diff": rng.choice([-1, 1, 1, 2, 3], n)})
    cancel = f.iloc[:3].assign(diff=-f["diff"].iloc[:3])  # three rows whose multiplicities cancel
    return pd.concat([f, cancel], ignore_index=True)


def _others():
    return pd.DataFrame({"k": ["a", "b", "é", "q", "a", "\U0001f600"], "w": [10, 20, 30, 40, 11, 12],
                         "diff": [1, 1, 2, 1, -1, 3]})


@njit
def _ends(vals, counts):
    """The group's first and last value rows (by the engine's value order) with their counts, the last
    doubled: str columns pass through as ids."""
    m = vals.shape[0]
    out = np.empty((2, vals.shape[1]), vals.dtype)
    out[0] = vals[0]
    out[1] = vals[m - 1]
    c = np.empty(2, np.int64)
    c[0] = counts[0]
    c[1] = 2 * counts[m - 1]
    return out, c


@njit
def _weighted_total(vals, counts):
    out = np.zeros((1, 1), vals.dtype)
    for j in range(vals.shape[0]):
        out[0, 0] += vals[j, 0] * counts[j]
    return out, np.ones(1, np.int64)


def _decorate(k, x, b):
    return {"k": np.array([s[::-1] + ("!" if f else "?") for s, f in zip(k, b)], dtype=object),
            "x": x * 2.0 - 1.0, "nb": ~b, "len": np.array([len(s) for s in k], dtype=np.int64)}


def _chars(k, x):
    """Each string's characters, one row each (a string of n characters: n rows, the empty one none)."""
    counts = np.array([len(s) for s in k], dtype=np.int64)
    chars = np.array([ch for s in k for ch in s], dtype=object)
    return {"c": chars, "x": np.repeat(x, counts)}, counts


def _typed_views(df):
    t, e = df.input("T"), df.input("E")
    v = {}
    for c in ("k", "x", "b"):
        other = "b" if c != "b" else "i"
        v[f"minmax_{c}"] = t.min(by="i", col=c).join(t.max(by="i", col=c), on="i")
        v[f"minmax_all_{c}"] = t.min(c).join(t.max(c), on=[])
        v[f"arg_{c}"] = t.argmin(by="i", col=c).join(t.argmax(by="i", col=c), on="i")
        v[f"top_desc_{c}"] = t.top_k(by=other, order_by=c, k=2)
        v[f"top_asc_{c}"] = t.top_k(order_by=c, k=2, descending=False)
    v["map"] = t.filter(lambda x, b: b | np.isnan(x)).map(_decorate)
    v["flat_map"] = t.flat_map(_chars, repeat=True)
    v["join_str"] = t.join(e, on="k")
    v["join_bool_str"] = t.select("i", "b", "k").join(e.map(lambda k, w: {"k": k, "b": w > 15, "w": w}), on=["k", "b"])
    v["join_float"] = t.select("x", "k").join(t.select("x", "i"), on="x")
    v["sums"] = t.sum(by="k", col="x").join(t.sum(by="k", col="i"), on="k")
    v["sums_all"] = t.sum("x").join(t.sum("i"), on=[])
    v["counts"] = t.count(by=["k", "b"])
    v["count_all"] = t.count()
    v["distinct"] = t.select("x", "b").distinct()
    v["threshold"] = t.threshold(by=["k"], fn=lambda c: np.where(c < 0, 1, c // 2))
    v["threshold_none"] = t.threshold(by=[], fn=lambda c: np.abs(c) + 1)
    v["reduce_int"] = t.reduce(by="k", fn=_ends, columns=["i"])
    v["reduce_total"] = t.reduce(by="b", fn=_weighted_total, columns=["i"], out={"total": "int64"})
    v["reduce_str"] = t.reduce(by="i", fn=_ends, columns=["k"])
    v["reduce_str_bool"] = t.reduce(by=[], fn=_ends, columns=["k", "b"])
    v["reduce_float"] = t.reduce(by="k", fn=_ends, columns=["x"])
    v["select_rename"] = t.select("b", "k").rename(k="key", b="flag")
    v["concat_reordered"] = t.concat(t.select("i", "b", "x", "k"), e.map(
        lambda k, w: {"b": w > 15, "i": w, "k": k, "x": w * 0.25}))
    v["negate"] = t.negate().concat(t.filter(lambda b: b))
    v["antijoin"] = t.antijoin(e, on="k")
    v["semijoin"] = t.semijoin(e, on="k")
    return v


def test_every_dtype_through_every_operator(spark):
    """str/float/bool columns through map, filter, flat_map, joins on str and float keys (NaN and -0.0
    keys included), the reductions with ties and multiplicities, user reduces over int, float and str
    (ids passed through), select/rename, concat with reordered columns, negate/antijoin/semijoin."""
    got = both_ways(_typed_views, {"T": _typed_frame(5, 40), "E": _others()}, spark)
    assert got["threshold_none"] and not any(got["threshold_none"])  # one row with no columns
    assert any(m < 0 for m in got["negate"].values()) and any(m < 0 for m in got["antijoin"].values())
    assert any("nan" in r for r in got["join_float"])


# -- ways to define views, inputs, diffs=False -----------------------------------------------------------------

def _exports(df):
    df.input("edges").arrange_by("src").export("edges_by_src")


def _returning_a_dict(df):
    e, r = df.use("edges_by_src"), df.input("roots")
    r.join(e, left_on="node", right_on="src").view("out_edges")
    return {"degree": e.count(by="src"), "lonely": r.antijoin(e, left_on="node", right_on="src"),
            "edges_twice": e.concat(e.select("dst", "src"))}


def test_views_returned_used_and_read_without_diffs(spark):
    """A builder that calls .view() and also returns a dict of collections; ``df.use(name)`` resolving to
    the input of that name; pandas inputs converted with spark=; diffs=False repeating each row by its
    multiplicity; a builder returning one Collection (``result``), here of no columns."""
    edges = pd.DataFrame({"src": [1, 1, 2, 2, 3, 3], "dst": [2, 2, 3, 1, 4, 3]}).astype("int64")  # (1, 2) twice
    roots = pd.DataFrame({"node": [1, 3, 9]}).astype("int64")
    want = _engine(_returning_a_dict, {"edges": edges, "roots": roots}, exports=_exports)
    assert sorted(want) == ["degree", "edges_twice", "lonely", "out_edges"]
    out = kp.spark.run(_returning_a_dict, {"edges_by_src": edges, "roots": roots}, spark=spark)
    assert sorted(out) == sorted(want)
    for name, sdf in out.items():
        assert "diff" not in sdf.columns
        assert _collect(sdf, diffs=False) == want[name], name

    typed = _typed_frame(6, 12)
    typed = typed[typed["diff"] > 0].drop(columns="diff")
    typed = typed.loc[typed.index.repeat(2)].reset_index(drop=True)  # each row twice: multiplicity 2
    typed = typed.assign(x=typed["x"].fillna(0.5))  # pandas conversion would make NaN a null
    one = lambda df: df.input("T").threshold(by=[], fn=lambda c: c + 1)  # noqa: E731
    many = lambda df: df.input("T").select("k", "b", "x").map(lambda k, b, x: {"k": k, "b": b, "x": x})  # noqa: E731
    for build in (one, many):
        want = _engine(build, {"T": typed})["result"]
        out = kp.spark.run(build, {"T": typed}, spark=spark)
        assert list(out) == ["result"]
        assert _collect(out["result"], diffs=False) == want
    assert all(m >= 2 for m in want.values())


def test_diffs_false_over_a_negative_multiplicity_is_a_clear_error(spark):
    """The engine's to_pandas() refuses a view with a negative multiplicity (read it with diffs=True);
    the Spark result must fail as clearly: naming the view and the way out, in its first line."""
    sdf = _spark_df(pd.DataFrame({"a": [1, 2]}).astype("int64"), spark)
    out = kp.spark.run(lambda df: {"neg": df.input("T").negate()}, {"T": sdf}, spark=spark)
    with pytest.raises(Exception) as info:
        out["neg"].collect()
    first = str(info.value).strip().splitlines()[0]
    assert "'neg'" in first and "negative multiplicit" in first and "diffs=True" in first, first


# -- refused before any job -------------------------------------------------------------------------------------

def test_the_job_tracking_sees_jobs(spark):
    """The check the refusals below rely on: a job run in the block is seen."""
    with _jobs(spark) as jobs:
        spark.range(3).count()
    assert jobs()


def _line_of_next_statement() -> int:
    return inspect.currentframe().f_back.f_lineno + 1


def test_untranslatable_operators_are_refused_before_any_job(spark):
    """inspect and ife(memory="jod") raise a DataflowError naming the operator and where it was defined,
    and no Spark job has run."""
    edges = _spark_df(pd.DataFrame({"src": [1, 2], "dst": [2, 3]}).astype("int64"), spark)
    site = {}

    def with_inspect(df):
        site["inspect"] = _line_of_next_statement()
        return df.input("edges").inspect(lambda *a: None).distinct()

    def with_jod(df):
        site["ife"] = _line_of_next_statement()
        return graphs.wcc(df.input("edges"), memory="jod")

    for kind, build in (("inspect", with_inspect), ("ife", with_jod)):
        with _jobs(spark) as jobs:
            with pytest.raises(kp.DataflowError) as info:
                kp.spark.run(build, {"edges": edges}, spark=spark)
            assert jobs() == [], kind
        msg = str(info.value)
        assert kind in msg and f"test_spark_backend_attack.py:{site[kind]}" in msg, msg


def test_a_missing_input_is_a_schema_error_listing_the_inputs(spark):
    frames = {n: _spark_df(pd.DataFrame({"a": [1]}).astype("int64"), spark) for n in ("left", "right")}
    with _jobs(spark) as jobs:
        with pytest.raises(kp.SchemaError) as info:
            kp.spark.run(lambda df: df.input("lfet").distinct(), frames, spark=spark)
        assert jobs() == []
    msg = str(info.value)
    assert "'lfet'" in msg and "left" in msg and "right" in msg, msg


def test_a_builder_that_raises_runs_nothing(spark):
    sdf = _spark_df(pd.DataFrame({"a": [1, 2]}).astype("int64"), spark)

    def build(df):
        df.input("T").distinct().view("v")
        raise ValueError("the user's own mistake")

    with _jobs(spark) as jobs:
        with pytest.raises(ValueError, match="the user's own mistake"):
            kp.spark.run(build, {"T": sdf}, spark=spark)
        assert jobs() == []


def test_an_unsupported_column_type_is_a_schema_error_naming_it(spark):
    sdf = spark.createDataFrame([(1, datetime(2024, 1, 1))], "a long, seen timestamp")
    with _jobs(spark) as jobs:
        with pytest.raises(kp.SchemaError) as info:
            kp.spark.run(lambda df: df.input("T").select("a").distinct(), {"T": sdf}, spark=spark)
        assert jobs() == []
    assert "'seen'" in str(info.value) and "timestamp" in str(info.value)


def test_a_map_failing_at_run_time_is_named_with_its_line(spark):
    """A map whose output is right on the trial batch (so recording accepts it) but wrong on the data: a
    kpgnb DataflowError naming the map and its line, as the engine's, not a Py4J trace."""
    frame = pd.DataFrame({"n": np.arange(20)}).astype("int64")
    sdf = _spark_df(frame, spark)
    site = {}

    def wrong_dtype(df):
        site["wrong_dtype"] = _line_of_next_statement()
        return df.input("T").map(lambda n: {"y": n if n.max(initial=0) < 5 else n * 0.5})

    def wrong_length(df):
        site["wrong_length"] = _line_of_next_statement()
        return df.input("T").map(lambda n: {"y": n[: min(len(n), 1)]})

    for kind, build in (("wrong_dtype", wrong_dtype), ("wrong_length", wrong_length)):
        with pytest.raises(kp.DataflowError) as engine_error:
            _engine(build, {"T": frame})
        assert f"test_spark_backend_attack.py:{site[kind]}" in str(engine_error.value)
        with pytest.raises(kp.DataflowError) as info:
            out = kp.spark.run(build, {"T": sdf}, spark=spark)
            out["result"].collect()
        msg = str(info.value)
        assert "map" in msg and f"test_spark_backend_attack.py:{site[kind]}" in msg, msg
        assert "Py4J" not in msg and "org.apache" not in msg and len(msg) < 2000, msg


# -- edge cases of data: empty aggregates, bools, signed zeros, NaN, narrow types, nulls --------------------

def _nothing(df):
    t = df.input("T")
    none = t.filter(lambda a: a > 99)
    return {"sum_of_nothing": none.sum("x"), "min_of_nothing": none.min("x"), "max_of_nothing": none.max("s"),
            "sum_of_cancelled": df.input("C").filter(lambda x: x < 1.0).sum("x"),
            "min_of_negatives": df.input("C").filter(lambda x: x > 1.0).min("x"), "count_of_nothing": none.count()}


def test_global_reductions_of_nothing_have_no_row(spark):
    """sum/min/max with by=[] over an empty collection (or one whose rows cancel, or whose only rows have
    negative multiplicity) have no row in the engine; Spark's global aggregate gives one null row."""
    frames = {"T": pd.DataFrame({"a": [1, 2], "x": [0.5, 1.5], "s": ["p", "q"]}),
              "C": pd.DataFrame({"x": [0.5, 0.5, 2.0], "diff": [1, -1, -1]})}
    want = both_ways(_nothing, frames, spark)
    assert not any(want.values())


def test_sum_over_a_bool_column(spark):
    """The engine sums a bool column as 0/1 (an int64 sum); Spark refuses boolean * bigint."""
    frame = pd.DataFrame({"k": ["a", "a", "b"], "b": [True, True, False], "diff": [1, 2, 1]})
    got = both_ways(lambda df: {"by_key": df.input("T").sum(by="k", col="b"), "all": df.input("T").sum("b")},
                    {"T": frame}, spark)
    assert got["all"] == Counter({(3,): 1})


def test_negative_zero_reaches_user_functions_as_zero(spark):
    """The engine stores -0.0 as 0.0 (README), so user functions never see the sign of an input zero."""
    frame = pd.DataFrame({"x": [-0.0, 0.0, 2.0]})
    got = both_ways(lambda df: {"inverse": df.input("T").map(lambda x: {"y": 1.0 / x}),
                                "signed": df.input("T").filter(lambda x: np.signbit(x))}, {"T": frame}, spark)
    assert got["inverse"] == Counter({("inf",): 2, ("0.5",): 1})


def test_pandas_input_keeps_nan(spark):
    """A pandas frame given with spark= holds what the engine would take from it: NaN is a value, not a
    missing one (spark.createDataFrame(pandas) turns it into null)."""
    frame = pd.DataFrame({"x": [NAN, 1.0, NAN], "i": [1, 2, 3]})
    build = lambda df: {"xs": df.input("T").select("x"), "top": df.input("T").max("x")}  # noqa: E731
    want = _engine(build, {"T": frame})
    out = kp.spark.run(build, {"T": frame}, spark=spark)
    assert {n: _collect(sdf, diffs=False) for n, sdf in out.items()} == want


def test_narrow_spark_types_are_the_engine_dtypes(spark):
    """tinyint, smallint, int and float columns are int64 and float64 in the engine (kpgnb.spark.dtypes_of,
    input_from): user functions must see them so, not wrap around in int8 or round in float32."""
    sdf = spark.createDataFrame([(100, 30000, 2_000_000_000, 0.1)], "a tinyint, s smallint, n int, f float")

    def build(df):
        return df.input("T").map(lambda a, s, n, f: {"a": a + 100, "s": s * 3, "n": n * 2, "f": f / 3})
    with kp.Engine(workers=1) as eng:
        kp.spark.input_from(eng, "T", sdf)
        with eng.dataflow("d") as df:
            view = build(df).view("result")
        eng.wait(view)
        want = Counter(tuple(_canon(v) for v in r) for r in view.to_pandas().itertuples(index=False))
    assert want == Counter({(200, 90000, 4_000_000_000, repr(float(np.float32(0.1)) / 3)): 1})
    out = kp.spark.run(build, {"T": sdf}, spark=spark)
    assert _collect(out["result"], diffs=False) == want


def test_nulls_are_refused_naming_the_column(spark):
    """The engine cannot hold a null (kpgnb.spark.input_from refuses it naming the column); neither may the
    Spark run pass it through silently as a value."""
    sdf = spark.createDataFrame([(1, "p"), (None, "q")], "a long, s string")
    with pytest.raises(kp.SchemaError, match="'a'"):
        with kp.Engine(workers=1) as eng:
            kp.spark.input_from(eng, "T", sdf)
    with pytest.raises(Exception) as info:
        out = kp.spark.run(lambda df: df.input("T").distinct(), {"T": sdf}, spark=spark)
        out["result"].collect()
    assert "'a'" in str(info.value) and "null" in str(info.value), str(info.value)[:1000]
