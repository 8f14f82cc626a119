"""A vectorized map or filter function as a Spark Column expression, when it is plain arithmetic.

``kp.spark.run`` runs user functions per Arrow batch in Python workers (``mapInArrow``): every row goes
from the JVM to Python and back, in every round of a loop. Most functions in loop bodies are plain
arithmetic over their columns (``lambda dst, dist: {"node": dst, "dist": dist + 1}``). Called once on
the driver with symbolic columns, such a function builds the Spark expression that computes the same
thing, and its rows never leave the JVM.

Only what means the same in NumPy and in Spark is traced: ``+ - *``, unary ``-`` and ``abs`` on int64 and
float64 columns; comparisons, with NumPy's rules for NaN (unequal to everything, never less or greater,
where Spark orders NaN above every number); ``& | ^ ~`` on bools; ``==`` and ``!=`` between strings; Python
and NumPy scalars as constants (the NumPy ufuncs of those operators too). Anything else (another NumPy
function, ``/``, ``//``, ``%``, ``len()``, an ``if`` on a column, an in-place operator) ends the trace, and
the function runs in Python workers as before.

Each symbolic column also carries its *shadow*: the NumPy array the same operations give on a probe
batch of awkward values (NaN, infinities, ints beyond 2**53, non-ASCII strings). The function is then
called on the probe batch itself; if what it returns differs from the shadows (it branched on
``isinstance``, caught an error, gave another dtype), the trace is not used. One difference remains:
int64 overflow, which NumPy wraps around and Spark (in ANSI mode, its default) reports as an error.
"""
from __future__ import annotations

import operator

import numpy as np

_NUMBERS = ("int64", "float64")


class Untraceable(BaseException):
    """The function did something a Spark expression cannot mean the same way. A BaseException, so that a
    user's ``except Exception`` around a NumPy call cannot turn it into a different branch."""


def _kind(shadow) -> str:
    dt = np.asarray(shadow).dtype
    for kind, want in (("int64", np.int64), ("float64", np.float64), ("bool", np.bool_)):
        if dt == want:
            return kind
    if dt == object:
        return "str"
    raise Untraceable(f"a {dt} result")


def _constant(v) -> "Sym":
    """A Python or NumPy scalar as a Sym whose shadow is the scalar itself (NumPy's promotion rules then
    apply to it exactly as in the function)."""
    from pyspark.sql import functions as F
    if isinstance(v, (bool, np.bool_)):
        return Sym(F.lit(bool(v)), v, "bool")
    if isinstance(v, (int, np.signedinteger)):  # not unsigned: NumPy mixes uint64 and int64 as float64
        if not -(2 ** 63) <= int(v) < 2 ** 63:
            raise Untraceable("an integer constant beyond int64")
        return Sym(F.lit(int(v)).cast("long"), v, "int64")
    if isinstance(v, (float, np.floating)) and np.dtype(type(v)).itemsize <= 8:
        return Sym(F.lit(float(v)).cast("double"), v, "float64")
    if isinstance(v, str) and "\x00" not in v:  # NumPy drops a constant's trailing NULs, Spark does not
        return Sym(F.lit(v), v, "str")
    raise Untraceable(f"a constant of type {type(v).__name__}")


def _operand(v) -> "Sym":
    return v if isinstance(v, Sym) else _constant(v)


def _result(expr, shadow, kind: str) -> "Sym":
    s = Sym(expr, shadow, _kind(shadow))
    if s.kind != kind:
        raise Untraceable(f"NumPy gives {s.kind} where the expression gives {kind}")
    return s


def _refuse(self, *args, **kwargs):
    raise Untraceable("an operation without a Spark expression of the same meaning")


# NumPy ufuncs (``np.add(x, 1)``, and a NumPy scalar on the left of an operator) -> the Sym method
_UFUNCS = {np.add: "__add__", np.subtract: "__sub__", np.multiply: "__mul__", np.less: "__lt__",
           np.less_equal: "__le__", np.greater: "__gt__", np.greater_equal: "__ge__", np.equal: "__eq__",
           np.not_equal: "__ne__", np.bitwise_and: "__and__", np.bitwise_or: "__or__",
           np.bitwise_xor: "__xor__", np.negative: "__neg__", np.positive: "__pos__",
           np.absolute: "__abs__", np.invert: "__invert__"}
# the same operators on Spark columns (for bools: ^ is !=)
_SPARK_OPS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
              np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
              np.greater_equal: operator.ge, np.equal: operator.eq, np.not_equal: operator.ne,
              np.bitwise_and: operator.and_, np.bitwise_or: operator.or_, np.bitwise_xor: operator.ne}
_REFLECTED = {"__add__": "__radd__", "__sub__": "__rsub__", "__mul__": "__rmul__", "__lt__": "__gt__",
              "__le__": "__ge__", "__gt__": "__lt__", "__ge__": "__le__", "__eq__": "__eq__", "__ne__": "__ne__",
              "__and__": "__rand__", "__or__": "__ror__", "__xor__": "__rxor__"}


class Sym:
    """A column of a traced function: its Spark expression, its shadow on the probe batch, and the engine
    dtype it has (``dtype`` is NumPy's, as code that dispatches on it expects)."""

    __hash__ = None

    def __init__(self, expr, shadow, kind: str):
        self.expr = expr
        self.shadow = shadow
        self.kind = kind

    @property
    def dtype(self):
        return np.asarray(self.shadow).dtype

    # whatever needs the values, or has no expression of the same meaning
    __array__ = __bool__ = __len__ = __iter__ = __index__ = __int__ = __float__ = __contains__ = _refuse
    __getitem__ = __setitem__ = __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refuse
    __mod__ = __rmod__ = __pow__ = __rpow__ = __divmod__ = __rdivmod__ = __lshift__ = __rshift__ = _refuse
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = __ipow__ = _refuse
    __iand__ = __ior__ = __ixor__ = __matmul__ = __rmatmul__ = __round__ = _refuse

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = _UFUNCS.get(ufunc)
        if method != "__call__" or kwargs or name is None or any(isinstance(i, np.ndarray) for i in inputs):
            raise Untraceable(f"NumPy's {getattr(ufunc, '__name__', ufunc)}")
        if len(inputs) == 1:
            return getattr(inputs[0], name)()
        a, b = inputs
        return getattr(a, name)(b) if isinstance(a, Sym) else getattr(b, _REFLECTED[name])(a)

    # arithmetic
    def _arith(self, other, ufunc, reflected=False):
        a, b = (_operand(other), self) if reflected else (self, _operand(other))
        if a.kind not in _NUMBERS or b.kind not in _NUMBERS:
            raise Untraceable(f"arithmetic on {a.kind} and {b.kind}")
        x, y, kind = (a.expr, b.expr, a.kind) if a.kind == b.kind else \
            (a.expr.cast("double"), b.expr.cast("double"), "float64")
        with np.errstate(all="ignore"):
            return _result(_SPARK_OPS[ufunc](x, y), ufunc(a.shadow, b.shadow), kind)

    def __add__(self, o): return self._arith(o, np.add)  # noqa: E704
    def __radd__(self, o): return self._arith(o, np.add, True)  # noqa: E704
    def __sub__(self, o): return self._arith(o, np.subtract)  # noqa: E704
    def __rsub__(self, o): return self._arith(o, np.subtract, True)  # noqa: E704
    def __mul__(self, o): return self._arith(o, np.multiply)  # noqa: E704
    def __rmul__(self, o): return self._arith(o, np.multiply, True)  # noqa: E704

    def _unary(self, ufunc, expr, kinds):
        if self.kind not in kinds:
            raise Untraceable(f"{ufunc.__name__} of a {self.kind} column")
        with np.errstate(all="ignore"):
            return _result(expr, ufunc(self.shadow), self.kind)

    def __neg__(self): return self._unary(np.negative, -self.expr, _NUMBERS)  # noqa: E704
    def __pos__(self): return self._unary(np.positive, self.expr, _NUMBERS)  # noqa: E704
    def __invert__(self): return self._unary(np.invert, ~self.expr, ("bool",))  # noqa: E704

    def __abs__(self):
        from pyspark.sql import functions as F
        return self._unary(np.absolute, F.abs(self.expr), _NUMBERS)

    # comparisons
    def _compare(self, other, ufunc):
        from pyspark.sql import functions as F
        b = _operand(other)
        if "str" in (self.kind, b.kind) or "bool" in (self.kind, b.kind):
            if self.kind != b.kind or self.kind == "str" and ufunc not in (np.equal, np.not_equal):
                raise Untraceable(f"comparing {self.kind} with {b.kind}")
            x, y, nans = self.expr, b.expr, []
        else:
            x, y = (self.expr, b.expr) if self.kind == b.kind else (self.expr.cast("double"), b.expr.cast("double"))
            nans = [F.isnan(s.expr) for s in (self, b) if s.kind == "float64"]
        cmp = _SPARK_OPS[ufunc](x, y)
        for nan in nans:  # NumPy: NaN is unequal to everything, and neither less nor greater
            cmp = cmp | nan if ufunc is np.not_equal else cmp & ~nan
        with np.errstate(all="ignore"):
            return _result(cmp, ufunc(self.shadow, b.shadow), "bool")

    def __lt__(self, o): return self._compare(o, np.less)  # noqa: E704
    def __le__(self, o): return self._compare(o, np.less_equal)  # noqa: E704
    def __gt__(self, o): return self._compare(o, np.greater)  # noqa: E704
    def __ge__(self, o): return self._compare(o, np.greater_equal)  # noqa: E704
    def __eq__(self, o): return self._compare(o, np.equal)  # noqa: E704
    def __ne__(self, o): return self._compare(o, np.not_equal)  # noqa: E704

    # logic on bools
    def _logic(self, other, ufunc, reflected=False):
        a, b = (_operand(other), self) if reflected else (self, _operand(other))
        if a.kind != "bool" or b.kind != "bool":
            raise Untraceable(f"bitwise operators on {a.kind} and {b.kind}")
        return _result(_SPARK_OPS[ufunc](a.expr, b.expr), ufunc(a.shadow, b.shadow), "bool")

    def __and__(self, o): return self._logic(o, np.bitwise_and)  # noqa: E704
    def __rand__(self, o): return self._logic(o, np.bitwise_and, True)  # noqa: E704
    def __or__(self, o): return self._logic(o, np.bitwise_or)  # noqa: E704
    def __ror__(self, o): return self._logic(o, np.bitwise_or, True)  # noqa: E704
    def __xor__(self, o): return self._logic(o, np.bitwise_xor)  # noqa: E704
    def __rxor__(self, o): return self._logic(o, np.bitwise_xor, True)  # noqa: E704


# -- the probe batch ----------------------------------------------------------------------------------------

_PROBE = {
    "int64": np.array([0, 1, -1, 2, -2, 3, 7, -7, 10, 2 ** 31, -(2 ** 31), 2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 62,
                       -(2 ** 62), 5], np.int64),
    "float64": np.array([0.0, 1.5, -2.5, np.nan, np.inf, -np.inf, 0.1, 1e300, -1e-300, 3.0, 2.0 ** 53 + 2,
                         -1.0, 0.5, 7.0, 1e-5, 2.0]),
    "bool": np.array([True, False] * 8),
    "str": np.array(["", "a", "b", "é", "ab", "\U0001f600", "a\x00", "Z", "e\u0301", "1", " ", "a", "",
                     "zz", "\uffff", "b"], object),
}


def _probe(dtype: str, i: int) -> np.ndarray:
    """Column i's probe values: each column in another order, so that columns meet in many pairs."""
    return _PROBE[dtype][np.random.default_rng(i).permutation(len(_PROBE[dtype]))]


def _same(shadow, value, kind: str) -> bool:
    """Whether the function's own result on the probe is the shadow (dtype, NaN and the sign of zero)."""
    got = np.asarray(value)
    if not isinstance(value, np.ndarray) or got.shape != np.shape(shadow) or _kind(got) != kind:
        return False
    if kind == "float64":
        return bool(np.array_equal(got, shadow, equal_nan=True) and (np.signbit(got) == np.signbit(shadow)).all())
    return bool(np.array_equal(got, shadow))


def _output(value, dtype: str):
    """An output column as an expression of the declared dtype (the conversions the engine makes: int or
    bool into float64, bool into int64), -0.0 stored as 0.0 as the engine stores it."""
    if not isinstance(value, Sym):
        raise Untraceable("an output that is not a column")
    if value.kind == dtype:
        expr = value.expr
    elif dtype == "float64" and value.kind in ("int64", "bool") or dtype == "int64" and value.kind == "bool":
        expr = value.expr.cast("double" if dtype == "float64" else "long")
    else:
        raise Untraceable(f"a {value.kind} column declared {dtype}")
    return expr + 0.0 if dtype == "float64" else expr


def trace(op, column):
    """The Spark expressions of a map's output columns (a list) or of a filter's condition, or None when
    the function is not plain arithmetic. ``column(i)`` is the Spark column of the op's input column i."""
    names = op.params if op.params is not None else list(op.in_schema.names)
    probe = {n: _probe(op.in_schema.dtype(n), op.in_schema.index(n)) for n in names}
    try:
        with np.errstate(all="ignore"):
            res = op.fn(**{n: Sym(column(op.in_schema.index(n)), probe[n], op.in_schema.dtype(n))
                           for n in names})
            real = op.fn(**{n: v.copy() for n, v in probe.items()})
        if op.kind == "filter":
            if not isinstance(res, Sym) or res.kind != "bool" or not _same(res.shadow, real, "bool"):
                raise Untraceable("a filter result that is not this bool column")
            return res.expr
        schema = op.out_schema
        if not isinstance(res, dict) or set(res) != set(schema.names) or not isinstance(real, dict):
            raise Untraceable("outputs other than the declared columns")
        exprs = [_output(res[n], d) for n, d in zip(schema.names, schema.dtypes)]
        if not all(_same(res[n].shadow, real.get(n), res[n].kind) for n in schema.names):
            raise Untraceable("the function computes something else on arrays")
        return exprs
    except (Untraceable, Exception):  # noqa: BLE001 - whatever fails on a Sym: the function runs in Python
        return None
