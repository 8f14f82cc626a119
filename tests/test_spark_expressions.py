"""kpgnb.spark_expressions: a map or filter function traced into a Spark expression computes what the
function computes in NumPy, on values that tell the two apart (NaN, infinities, signed zeros, negative
ints, non-ASCII strings); and a function whose meaning could differ is not traced at all."""
import sys

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb.engine.columns import Schema
from kpgnb.spark_expressions import trace

pytest.importorskip("pyspark")

NAN, INF = float("nan"), float("inf")
SCHEMA = Schema.of(["i", "j", "x", "y", "b", "s"], ["int64", "int64", "float64", "float64", "bool", "str"])


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    specials = np.array([NAN, INF, -INF, 0.0, -0.0, 1.5, -2.5, 3.0])
    n = 64
    return pd.DataFrame({"i": rng.integers(-5, 6, n), "j": rng.integers(-3, 4, n),
                         "x": rng.choice(specials, n), "y": rng.choice(specials, n),
                         "b": rng.integers(0, 2, n).astype(bool),
                         "s": rng.choice(np.array(["a", "é", "", "a"], object), n)})


class _Op:
    """What trace reads of a map or filter operator."""

    def __init__(self, kind, fn, out=None):
        self.kind, self.fn, self.in_schema = kind, fn, SCHEMA
        self.params = [p for p in fn.__code__.co_varnames[:fn.__code__.co_argcount]]
        self.out_schema = None if out is None else Schema.of(list(out), list(out.values()))


MAPS = [  # (function, declared output dtypes)
    (lambda i, j: {"a": i + j, "m": i * j - 3, "n": -i, "z": i * 0}, {"a": "int64", "m": "int64", "n": "int64", "z": "int64"}),
    (lambda i, x: {"f": i + x, "g": x * 2 - i, "h": abs(x), "k": 1.5 * i}, {"f": "float64", "g": "float64", "h": "float64", "k": "float64"}),
    (lambda x, y: {"p": x - y, "q": x * y, "neg": -x}, {"p": "float64", "q": "float64", "neg": "float64"}),
    (lambda i, b: {"asf": i, "bi": b}, {"asf": "float64", "bi": "int64"}),  # the engine's output conversions
    (lambda s, i: {"s": s, "i": i + np.int64(2), "e": s == "é"}, {"s": "str", "i": "int64", "e": "bool"}),
]
FILTERS = [
    lambda x, y: x < y, lambda x, y: x <= y, lambda x, y: x > y, lambda x, y: x >= y,
    lambda x, y: x == y, lambda x, y: x != y, lambda x: x == x, lambda x, i: x > i,
    lambda i, j: (i < j) | (i == 0), lambda b, i: b & (i >= 0) ^ (i < 3), lambda b: ~b,
    lambda s: s != "a", lambda x: 0.0 < x, lambda b: b == True,  # noqa: E712
]
UNTRACEABLE = [  # each must run in Python: the same meaning is not guaranteed in Spark
    ("filter", lambda x: np.isnan(x), None),
    ("filter", lambda i: (i % 2) == 0, None),
    ("map", lambda x, y: {"r": x / y}, {"r": "float64"}),
    ("map", lambda i: {"r": i // 2}, {"r": "int64"}),
    ("map", lambda i: {"r": np.full(len(i), 1)}, {"r": "int64"}),
    ("map", lambda i: {"r": i if i.max(initial=0) > 0 else -i}, {"r": "int64"}),
    ("map", lambda b: {"r": b + b}, {"r": "bool"}),
    ("map", lambda s: {"r": s + "!"}, {"r": "str"}),
    ("map", lambda i: {"r": np.where(i > 0, i, 0)}, {"r": "int64"}),
    ("map", lambda i: {"r": i.astype(np.float64)}, {"r": "float64"}),
    ("filter", lambda s: s < "b", None),
    ("filter", lambda i, s: i == s, None),
    ("map", lambda x: {"r": x * 2}, {"r": "int64"}),  # float into int64: the engine refuses it at run time
    ("map", lambda i: {"r": i + 2 ** 70}, {"r": "int64"}),
]


def _spark(spark, frame):
    """The frame in Spark with NaN kept a value (Spark's conversion of pandas makes it null)."""
    import pyarrow as pa
    return spark.createDataFrame(pa.table({c: pa.array(frame[c].to_numpy(), from_pandas=frame[c].dtype == object)
                                           for c in frame.columns}))


def _canon(v):
    return repr(float(v)) if isinstance(v, (float, np.floating)) else v


@pytest.mark.parametrize("k", range(len(MAPS)))
def test_a_traced_map_computes_what_numpy_computes(spark, k):
    fn, out = MAPS[k]
    op = _Op("map", fn, out)
    frame = _frame()
    from pyspark.sql import functions as F
    exprs = trace(op, lambda i: F.col(SCHEMA.names[i]))
    assert exprs is not None, "not traced"
    got = _spark(spark, frame).select(*[e.alias(n) for e, n in zip(exprs, out)]).toPandas()
    with np.errstate(all="ignore"):
        want = fn(**{p: frame[p].to_numpy() for p in op.params})
    for n, dtype in out.items():
        w = np.asarray(want[n]).astype({"float64": np.float64, "int64": np.int64, "bool": bool, "str": object}[dtype])
        if dtype == "float64":
            w = w + 0.0  # the engine stores -0.0 as 0.0
        assert [_canon(v) for v in got[n]] == [_canon(v) for v in w], n


def test_traced_filters_follow_numpy_on_nan(spark):
    from pyspark.sql import functions as F
    frame = _frame()
    sdf = _spark(spark, frame.assign(_row=np.arange(len(frame))))
    rows = frame.assign(_row=np.arange(len(frame)))
    for fn in FILTERS:
        op = _Op("filter", fn)
        expr = trace(op, lambda i: F.col(SCHEMA.names[i]))
        assert expr is not None, fn
        got = sorted(r["_row"] for r in sdf.filter(expr).select("_row").collect())
        with np.errstate(all="ignore"):
            keep = np.asarray(fn(**{p: rows[p].to_numpy() for p in op.params}), bool)
        assert got == sorted(rows["_row"][keep].tolist()), op.fn.__code__.co_consts


@pytest.mark.parametrize("k", range(len(UNTRACEABLE)))
def test_what_could_mean_otherwise_is_not_traced(k):
    kind, fn, out = UNTRACEABLE[k]
    from pyspark.sql import functions as F
    assert trace(_Op(kind, fn, out), lambda i: F.col(SCHEMA.names[i])) is None


def test_a_traced_function_runs_in_the_backend_as_in_the_engine(spark):
    """Through kp.spark.run: a traced map and filter over floats with NaN and -0.0, against the engine."""
    frame = pd.DataFrame({"x": [NAN, -0.0, 1.5, -2.0, INF], "i": [1, 2, 3, 4, 5]})

    def build(df):
        t = df.input("T")
        return {"m": t.map(lambda x, i: {"y": x * -1.0, "z": i * 2 + x}), "f": t.filter(lambda x: x <= 1.5)}
    with kp.Engine(workers=1) as eng:
        inp = eng.input("T", ["x", "i"], ["float64", "int64"])
        inp.insert(frame)
        inp.advance_to(1)
        with eng.dataflow("d") as df:
            views = {n: c.view(n) for n, c in build(df).items()}
        eng.wait("d")
        want = {n: sorted(map(repr, v.to_pandas().itertuples(index=False, name=None))) for n, v in views.items()}
    out = kp.spark.run(build, {"T": frame}, spark=spark)
    got = {n: sorted(map(repr, sdf.toPandas().itertuples(index=False, name=None))) for n, sdf in out.items()}
    assert got == want
