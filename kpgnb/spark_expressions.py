"""A vectorized map or filter function as a Spark Column expression, when it is plain arithmetic.

``kp.spark.run`` runs user functions per Arrow batch in Python workers (``mapInArrow``): every row goes
from the JVM to Python and back, in every round of a loop. Most functions in loop bodies are plain
arithmetic over their columns (``lambda dst, dist: {"node": dst, "dist": dist + 1}``). Called once on
the driver with symbolic columns, such a function builds the Spark expression that computes the same
thing, and its rows never leave the JVM.

Only what means the same in NumPy and in Spark is traced: ``+ - *``, unary ``-`` and ``abs()`` on int64
and float64 columns; comparisons, with NumPy's rules for NaN (unequal to everything, never less or
greater, where Spark orders NaN above every number); ``& | ^ ~`` on bools; ``==`` and ``!=`` between
strings; Python and NumPy scalars as constants. Anything else (a NumPy function, ``/``, ``//``, ``%``,
``len()``, a method, an ``if`` on a column, an output that is not a column of the declared dtype) ends
the trace, and the function runs in Python workers as before. One difference remains: int64 overflow,
which NumPy wraps around and Spark (ANSI mode, its default) reports as an error.
"""
from __future__ import annotations

import numpy as np

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class Untraceable(Exception):
    """The function did something a Spark expression cannot mean the same way."""


def _lit(v) -> "Sym":
    """A constant as a typed Sym."""
    from pyspark.sql import functions as F
    if isinstance(v, Sym):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Sym(F.lit(bool(v)), "bool")
    if isinstance(v, (int, np.integer)):
        if not _INT64[0] <= int(v) <= _INT64[1]:
            raise Untraceable("an integer constant beyond int64")
        return Sym(F.lit(int(v)).cast("long"), "int64")
    if isinstance(v, (float, np.floating)):
        return Sym(F.lit(float(v)).cast("double"), "float64")
    if isinstance(v, str):
        return Sym(F.lit(v), "str")
    raise Untraceable(f"a constant of type {type(v).__name__}")


def _numeric(a: "Sym", b: "Sym"):
    """Both operands as Spark expressions of their common NumPy result dtype (int64 or float64)."""
    if a.dtype not in ("int64", "float64") or b.dtype not in ("int64", "float64"):
        raise Untraceable(f"arithmetic on {a.dtype} and {b.dtype}")
    if a.dtype == b.dtype:
        return a.expr, b.expr, a.dtype
    return a.expr.cast("double"), b.expr.cast("double"), "float64"


class Sym:
    """A column of a traced function: a Spark expression and the NumPy dtype the engine would give it."""

    __array_ufunc__ = None  # NumPy defers its operators to ours and refuses its functions on a Sym
    __hash__ = None

    def __init__(self, expr, dtype: str):
        self.expr = expr
        self.dtype = dtype

    def _refuse(self, *args, **kwargs):
        raise Untraceable("a column used as a value (len, truth, iteration, conversion)")

    __array__ = __bool__ = __len__ = __iter__ = __index__ = __int__ = __float__ = __contains__ = _refuse

    # arithmetic
    def _arith(self, other, op, reflected=False):
        a, b = (_lit(other), self) if reflected else (self, _lit(other))
        x, y, dtype = _numeric(a, b)
        return Sym(op(x, y), dtype)

    def __add__(self, o): return self._arith(o, lambda x, y: x + y)  # noqa: E704
    def __radd__(self, o): return self._arith(o, lambda x, y: x + y, True)  # noqa: E704
    def __sub__(self, o): return self._arith(o, lambda x, y: x - y)  # noqa: E704
    def __rsub__(self, o): return self._arith(o, lambda x, y: x - y, True)  # noqa: E704
    def __mul__(self, o): return self._arith(o, lambda x, y: x * y)  # noqa: E704
    def __rmul__(self, o): return self._arith(o, lambda x, y: x * y, True)  # noqa: E704

    def __neg__(self):
        if self.dtype not in ("int64", "float64"):
            raise Untraceable(f"negating a {self.dtype} column")
        return Sym(-self.expr, self.dtype)

    def __pos__(self):
        self.__neg__()  # the same check
        return self

    def __abs__(self):
        from pyspark.sql import functions as F
        if self.dtype not in ("int64", "float64"):
            raise Untraceable(f"abs of a {self.dtype} column")
        return Sym(F.abs(self.expr), self.dtype)

    # comparisons
    def _compare(self, other, op: str):
        from pyspark.sql import functions as F
        b = _lit(other)
        if "str" in (self.dtype, b.dtype) or "bool" in (self.dtype, b.dtype):
            if self.dtype != b.dtype or self.dtype == "str" and op not in ("==", "!="):
                raise Untraceable(f"comparing {self.dtype} with {b.dtype}")
            x, y, nans = self.expr, b.expr, []
        else:
            x, y, _ = _numeric(self, b)
            nans = [F.isnan(s.expr) for s in (self, b) if s.dtype == "float64"]
        cmp = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]
        for nan in nans:  # NumPy: NaN is unequal to everything, and neither less nor greater
            cmp = cmp | nan if op == "!=" else cmp & ~nan
        return Sym(cmp, "bool")

    def __lt__(self, o): return self._compare(o, "<")  # noqa: E704
    def __le__(self, o): return self._compare(o, "<=")  # noqa: E704
    def __gt__(self, o): return self._compare(o, ">")  # noqa: E704
    def __ge__(self, o): return self._compare(o, ">=")  # noqa: E704
    def __eq__(self, o): return self._compare(o, "==")  # noqa: E704
    def __ne__(self, o): return self._compare(o, "!=")  # noqa: E704

    # logic on bools
    def _logic(self, other, op):
        b = _lit(other)
        if self.dtype != "bool" or b.dtype != "bool":
            raise Untraceable(f"bitwise operators on {self.dtype} and {b.dtype}")
        return Sym(op(self.expr, b.expr), "bool")

    def __and__(self, o): return self._logic(o, lambda x, y: x & y)  # noqa: E704
    def __rand__(self, o): return self._logic(o, lambda x, y: y & x)  # noqa: E704
    def __or__(self, o): return self._logic(o, lambda x, y: x | y)  # noqa: E704
    def __ror__(self, o): return self._logic(o, lambda x, y: y | x)  # noqa: E704
    def __xor__(self, o): return self._logic(o, lambda x, y: x != y)  # noqa: E704
    def __rxor__(self, o): return self._logic(o, lambda x, y: y != x)  # noqa: E704

    def __invert__(self):
        if self.dtype != "bool":
            raise Untraceable(f"~ on a {self.dtype} column")
        return Sym(~self.expr, "bool")


def _output(value, dtype: str):
    """An output column as an expression of the declared dtype (the conversions the engine makes: int or
    bool into float64, bool into int64), -0.0 stored as 0.0 as the engine stores it."""
    if not isinstance(value, Sym):
        raise Untraceable("an output that is not a column")
    if value.dtype == dtype:
        expr = value.expr
    elif dtype == "float64" and value.dtype in ("int64", "bool") or dtype == "int64" and value.dtype == "bool":
        expr = value.expr.cast("double" if dtype == "float64" else "long")
    else:
        raise Untraceable(f"a {value.dtype} column declared {dtype}")
    return expr + 0.0 if dtype == "float64" else expr


def trace(op, column):
    """The Spark expressions of a map's output columns (a list) or of a filter's condition, or None when
    the function is not plain arithmetic. ``column(i)`` is the Spark column of the op's input column i."""
    names = op.params if op.params is not None else list(op.in_schema.names)
    args = {n: Sym(column(op.in_schema.index(n)), op.in_schema.dtype(n)) for n in names}
    try:
        with np.errstate(all="ignore"):
            res = op.fn(**args)
        if op.kind == "filter":
            if not isinstance(res, Sym) or res.dtype != "bool":
                raise Untraceable("a filter result that is not a bool column")
            return res.expr
        schema = op.out_schema
        if not isinstance(res, dict) or set(res) != set(schema.names):
            raise Untraceable("outputs other than the declared columns")
        return [_output(res[n], d) for n, d in zip(schema.names, schema.dtypes)]
    except Exception:  # noqa: BLE001 - anything the function does with a Sym that fails: run it in Python
        return None
