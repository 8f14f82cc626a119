"""kpgnb.spark_expressions attacked as a demanding user would: a map or filter function traced into a Spark
expression must give what the engine gives on the same rows (or not be traced at all, and run in Python
workers as before).

Two kinds of checks:
- ``trace`` called directly, its expression evaluated by Spark over a frame of values that tell NumPy and
  Spark apart, against the function called on the NumPy columns (cheap: one select per case);
- whole dataflows through ``kp.spark.run`` against the engine (``kp.Engine``), all views of one builder in
  one Spark run (a module fixture), one test per view, loops and nested loops included."""
import sys
from enum import IntEnum

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp  # noqa: F401
from kpgnb.engine.columns import Schema
from kpgnb.spark_expressions import trace

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import this module

from test_spark_backend_attack import _engine, _on_spark  # noqa: E402

NAN, INF = float("nan"), float("inf")
SCHEMA = Schema.of(["i", "j", "x", "y", "b", "s"], ["int64", "int64", "float64", "float64", "bool", "str"])


def _frame() -> pd.DataFrame:
    """Rows that tell NumPy and Spark apart: ints beyond 2**53 and near the int64 limits, NaN, infinities,
    signed zeros, values just off a binary fraction (0.1), bools, strings with a NUL and combining marks."""
    return pd.DataFrame({
        "i": np.array([0, 1, -1, 2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 62 + 1, 5, 2 ** 63 - 2, -(2 ** 63) + 1, 7],
                      np.int64),
        "j": np.array([3, -3, 0, 1, 2, 1, 5, 1, -1, -7], np.int64),
        "x": [NAN, INF, -INF, 0.0, -0.0, 0.1, -2.5, 1e308, 5e-324, 1.0],
        "y": [0.1, 0.0, -0.0, NAN, 1.0, 0.1, -2.5, 1e308, -5e-324, 0.1],
        "b": [True, False, True, False, True, True, False, False, True, False],
        "s": np.array(["a", "é", "", "a", "b", "e\u0301", "A", "\x00", "a\x00", "\U0001f600"], object)})


# -- trace against NumPy -------------------------------------------------------------------------------------

class _Op:
    """What trace reads of a map or filter operator (params as the engine's Collection._params reads them)."""

    def __init__(self, kind, fn, out=None):
        import inspect
        ps = inspect.signature(fn).parameters.values()
        self.kind, self.fn, self.in_schema = kind, fn, SCHEMA
        self.params = None if any(p.kind == p.VAR_KEYWORD for p in ps) else [p.name for p in ps
                                                                              if p.name in SCHEMA.names]
        self.out_schema = None if out is None else Schema.of(list(out), list(out.values()))


@pytest.fixture(scope="module")
def sdf(spark):
    import pyarrow as pa
    from pyspark.sql import functions as F
    f = _frame().assign(_row=np.arange(len(_frame())))
    return spark.createDataFrame(pa.table({c: pa.array(f[c].to_numpy(), from_pandas=f[c].dtype == object)
                                           for c in f.columns})).orderBy("_row").coalesce(1), F


def _canon(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    return repr(float(v)) if isinstance(v, (float, np.floating)) else v


def _numpy_args(op):
    f = _frame()
    names = op.params if op.params is not None else list(SCHEMA.names)
    return {n: f[n].to_numpy().copy() for n in names}  # fresh arrays, as the engine decodes its columns


def _check(sdf, kind, fn, out=None):
    """Traced? and (want, got) per output (the filter's mask is output ``keep``)."""
    df, F = sdf
    op = _Op(kind, fn, out)
    e = trace(op, lambda k: F.col(SCHEMA.names[k]))
    if e is None:
        return False, {}
    with np.errstate(all="ignore"):
        res = fn(**_numpy_args(op))
    if kind == "filter":
        got = df.orderBy("_row").select(e.alias("keep")).toPandas()
        return True, {"keep": ([bool(v) for v in np.asarray(res, bool)], [bool(v) for v in got["keep"]])}
    got = df.orderBy("_row").select(*[x.alias(n) for x, n in zip(e, out)]).toPandas()
    pairs = {}
    for n, d in out.items():
        w = np.asarray(res[n]).astype({"float64": np.float64, "int64": np.int64, "bool": bool, "str": object}[d])
        if d == "float64":
            w = w + 0.0  # the engine stores -0.0 as 0.0
        pairs[n] = ([_canon(v) for v in w], [_canon(v) for v in got[n]])
    return True, pairs


def _dtype_dispatch(x):
    """A generic helper that doubles float columns: NumPy's ``x.dtype == np.float64`` is True."""
    return {"r": x * 2.0 if x.dtype == np.float64 else x}


def _dtype_dispatch_builtin(b, i):
    return {"r": i + 1 if b.dtype == bool else i}


def _iadd_alias(x):
    """``y = x; y += 1``: NumPy adds in place, so ``x`` (the same array) changes too."""
    y = x
    y += 1.0
    return {"old": x, "new": y}


def _isub_alias_filter(x):
    k = x
    k -= 1.0
    return x > 0.5  # NumPy: x was lowered by 1 in place


def _isinstance_branch(x):
    """A helper for scalars and arrays: arrays go through np.abs."""
    return {"r": np.abs(x) if isinstance(x, np.ndarray) else x}


def _try_fallback(x):
    try:
        return {"r": np.sqrt(x)}
    except TypeError:  # "not an array": leave it
        return {"r": x}


# Each case: (kind, fn, out). A case is fine when it is not traced, or traced and equal to NumPy. FOUND
# were traced wrongly by the first version of the tracer (constants, dtype dispatch, in-place operators,
# branches on the argument's type, caught errors), found by this file.
FOUND = {
    # NumPy: int64 with a uint64 scalar promotes to float64 (int64 rounded to double first); the trace
    # keeps int64 arithmetic and casts the exact sum, 2**53 + 2 where NumPy gives 2**53
    "uint64_scalar_add": ("map", lambda i: {"r": i + np.uint64(1)}, {"r": "float64"}),
    "uint64_scalar_in_filter": ("filter", lambda i: i + np.uint64(1) == i + 1, None),
    # np.longdouble constants: NumPy computes and compares in 80-bit extended precision, the trace in double
    "longdouble_compare": ("filter", lambda y: y <= np.longdouble("0.1"), None),
    "longdouble_mul": ("map", lambda x: {"r": x * np.longdouble("0.1")}, {"r": "float64"}),
    # Sym has a ``dtype`` attribute, a str: ``x.dtype == np.float64`` (or ``== bool``) is False for it
    "dtype_attr_dispatch": ("map", _dtype_dispatch, {"r": "float64"}),
    "dtype_attr_builtin_bool": ("map", _dtype_dispatch_builtin, {"r": "int64"}),
    # in-place operators rebind the name for a Sym (no __iadd__), where NumPy mutates the shared array
    "inplace_add_alias": ("map", _iadd_alias, {"old": "float64", "new": "float64"}),
    "inplace_sub_alias_filter": ("filter", _isub_alias_filter, None),
    # code that asks what its argument is, or catches the error a NumPy function raises on a Sym
    "isinstance_branch": ("map", _isinstance_branch, {"r": "float64"}),
    "try_except_fallback": ("map", _try_fallback, {"r": "float64"}),
    # NumPy turns a str constant into a NumPy string, which drops trailing NULs: "\x00" == "" and
    # "a\x00" == "a" for an object column compared with a constant; Spark compares the exact strings
    "str_const_trailing_nul": ("filter", lambda s: s == "\x00", None),
    "str_const_trailing_nul2": ("filter", lambda s: s != "a\x00", None),
}


def _kw_map(**kw):
    return {"r": kw["i"] - kw["j"], "q": kw["x"] * kw["y"]}


def _same_sym_twice(x):
    return {"a": x, "b": x, "c": -x}


COVERED = {  # traced or not, these agree with NumPy
    "neg_zero_compare": ("filter", lambda x: (-x < x) | (x * -1.0 >= 0.0) & (x * 0.0 == -(x * 0.0)), None),
    "neg_zero_literal": ("filter", lambda x: -0.0 < x * 0.0, None),
    "nan_constants": ("filter", lambda x, y: (x != np.nan) & ~(np.float64("nan") >= y) | (x == x), None),
    "int_vs_float_columns": ("map", lambda i, x: {"c": i < x, "e": i == x, "n": i != x, "g": x >= i},
                             {"c": "bool", "e": "bool", "n": "bool", "g": "bool"}),
    "int_beyond_2_53": ("filter", lambda i: (i == 9007199254740992.0) | (i == 2 ** 53 + 1) | (i > 2.0 ** 62), None),
    "float32_and_int32_scalars": ("map", lambda i, j, x: {"a": x * np.float32(0.1), "b": j + np.int32(7),
                                                       "c": i * np.float16(1.5), "d": np.int8(3) - j},
                                  {"a": "float64", "b": "int64", "c": "float64", "d": "int64"}),
    "uint64_scalar_compare": ("filter", lambda i: (i < np.uint64(1)) | (i == np.uint64(2 ** 53 + 1)), None),
    "mixed_outputs_converted": ("map", lambda b, i, x: {"f": b, "g": i > 0, "h": ~b ^ (i > 0), "k": i},
                                {"f": "float64", "g": "int64", "h": "float64", "k": "float64"}),
    "inf_arith": ("map", lambda x, y: {"a": x - y, "m": x * y, "z": x * 0, "ab": abs(x - y), "n": -(x + y)},
                  {"a": "float64", "m": "float64", "z": "float64", "ab": "float64", "n": "float64"}),
    "near_int64_limits": ("map", lambda i, j: {"a": i - j * 0, "b": abs(i * 0 + j), "c": i - (i - j)},
                          {"a": "int64", "b": "int64", "c": "int64"}),
    "precedence": ("filter", lambda b, i, x: b | (i > 0) & ~b ^ (x < 1.0), None),
    "bool_order": ("filter", lambda b, i: (b < True) | (b >= (i > 3)) & ((i > 0) == b), None),
    "np_bool_left": ("filter", lambda b: np.True_ & b | np.False_, None),
    "intenum_constant": ("filter", lambda i: i == IntEnum("C", "A B").B, None),
    "str_columns": ("map", lambda s: {"e": s == "e\u0301", "n": s != s, "z": "" == s, "s": s},
                    {"e": "bool", "n": "bool", "z": "bool", "s": "str"}),
    "kwargs": ("map", _kw_map, {"r": "int64", "q": "float64"}),
    "ignored_params": ("map", lambda i, j, x, s, b: {"r": j}, {"r": "int64"}),
    "same_sym_twice": ("map", _same_sym_twice, {"a": "float64", "b": "float64", "c": "float64"}),
    "sum_builtin": ("map", lambda x, y, i: {"r": sum([x, y, i])}, {"r": "float64"}),
    "default_param_constant": ("map", lambda x, k=np.float32(2.5): {"r": x * k}, {"r": "float64"}),
    "bool_vs_int": ("filter", lambda b: b == 1, None),
    "bool_plus_int_constant": ("map", lambda x: {"r": x + True}, {"r": "float64"}),
    "chained_compare": ("filter", lambda i: 0 < i < 10, None),
}


@pytest.mark.parametrize("name", sorted(FOUND) + sorted(COVERED))
def test_a_traced_function_computes_what_numpy_computes(sdf, name):
    kind, fn, out = FOUND.get(name) or COVERED[name]
    try:
        traced, pairs = _check(sdf, kind, fn, out)
    except Exception as err:  # noqa: BLE001 - NumPy refuses the function: the trace must have refused too
        from pyspark.sql import functions as F
        assert trace(_Op(kind, fn, out), lambda k: F.col(SCHEMA.names[k])) is None, err
        return
    bad = {n: p for n, p in pairs.items() if p[0] != p[1]}
    assert not bad, f"traced and different from NumPy (numpy, spark): {bad}"


def test_untraceable_stays_untraced(sdf):
    """What NumPy refuses (a chained comparison, bool with int) or would compute otherwise is not traced."""
    _, F = sdf
    for kind, fn, out in [COVERED["chained_compare"], COVERED["bool_vs_int"], COVERED["bool_plus_int_constant"]]:
        assert trace(_Op(kind, fn, out), lambda k: F.col(SCHEMA.names[k])) is None


# -- through kp.spark.run against the engine -----------------------------------------------------------------

def _nested(t):
    """A loop whose body runs a loop: both bodies with traced maps and filters."""
    start = t.map(lambda j: {"n": j * 0 + 1, "d": j * 0.0})

    def inner(q):
        return q.concat(q.map(lambda n, d: {"n": n, "d": d + 0.5}).filter(lambda d: d < 2.0)).distinct()

    def outer(r):
        deep = r.iterate(inner)
        nxt = deep.map(lambda n, d: {"n": n + 1, "d": d * 0.0}).filter(lambda n: (n <= 4) & (n > -1))
        return r.concat(deep, nxt).distinct()
    return start.iterate(outer)


def _loop_filter(t):
    """A float loop: a traced filter with NaN rows and a traced map, to a fixed point."""
    start = t.map(lambda i, x: {"k": i * 0 + 1, "v": x})

    def body(r):
        step = r.map(lambda k, v: {"k": k + 1, "v": v * 0.5 - 0.0}).filter(
            lambda k, v: (k < 6) & ((v == v) | (v > 1e300)))
        return r.concat(step).distinct()
    return start.iterate(body)


VIEWS = {
    # cases of FOUND
    "uint64_scalar_add": lambda t: t.map(lambda i: {"r": i + np.uint64(1)}),
    "longdouble_compare": lambda t: t.filter(lambda y: y <= np.longdouble("0.1")).select("y", "j"),
    "dtype_attr_dispatch": lambda t: t.map(_dtype_dispatch),
    "inplace_add_alias": lambda t: t.map(lambda x: {"x": x * 1.0}).map(_iadd_alias),  # a function that
    # writes into its columns gets its own copies on the engine (never the batch others read), and Spark's
    # workers pass writable arrays of their own too
    "isinstance_branch": lambda t: t.map(_isinstance_branch),
    "str_const_trailing_nul": lambda t: t.filter(lambda s: s == "\x00").select("s", "j"),
    # strings with trailing NULs: the engine stored "a\x00" as "a" where the frame also had "a" (pandas'
    # factorize hashes C strings), and Spark keeps it
    "str_trailing_nul_select": lambda t: t.select("s", "j"),
    "str_trailing_nul_traced_map": lambda t: t.map(lambda s, j: {"s": s, "j": j}),
    "str_trailing_nul_python_map": lambda t: t.map(lambda s, j: {"s": s.copy(), "j": j}),
    # covered
    "loop_filter": _loop_filter,
    "nested_loops": _nested,
    "kwargs": lambda t: t.map(_kw_map),
    "ignored_params_and_reuse": lambda t: t.map(lambda i, j, x, s, b: {"a": j, "b": j, "c": x, "d": b}),
    "neg_zero_outputs": lambda t: t.map(lambda x, y: {"a": -x, "b": x * 0.0, "c": -(y * 0.0)}).distinct(),
    "mixed_compare_filter": lambda t: t.filter(lambda i, x, b: (i < x) | (b & (x != x))).select("i", "x"),
    "int_near_limits": lambda t: t.map(lambda i, j: {"r": i - j * 0, "q": i * 0 + (2 ** 63 - 1)}),
    "str_filter": lambda t: t.filter(lambda s: (s != "a") & (s != "")).select("j"),
}


@pytest.fixture(scope="module")
def both(spark):
    frames = {"T": _frame()}

    def build(df):
        t = df.input("T")
        return {n: f(t) for n, f in VIEWS.items()}
    return _engine(build, frames), _on_spark(build, frames, spark)


@pytest.mark.parametrize("view", list(VIEWS))
def test_kp_spark_run_matches_the_engine(both, view):
    want, got = both
    assert dict(got[view]) == dict(want[view]), f"{view}: engine {dict(want[view])} != spark {dict(got[view])}"
