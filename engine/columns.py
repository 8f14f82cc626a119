"""Schemas, the engine-wide symbol table, and update batches (DESIGN.md section 2).

Every column is stored as int64 so that every kernel sees fixed-width numbers: int64 as is, float64 by
its bit pattern (with -0.0 and NaN canonicalised so equal values have equal bits), bool as 0/1, and
strings as ids from one engine-wide :class:`SymbolTable`.
"""
from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

import numpy as np

from .errors import MAX_MULT, ArgumentTypeError, SchemaError, multiplicity_overflow

DTYPES = ("int64", "float64", "bool", "str")
_DTYPE_ALIASES = {
    "int": "int64", "int64": "int64", "i8": "int64", "integer": "int64",
    "float": "float64", "float64": "float64", "f8": "float64", "double": "float64",
    "bool": "bool", "boolean": "bool",
    "str": "str", "string": "str", "object": "str",
}


def is_int(x) -> bool:
    """An integer argument (a Python or NumPy int, not a bool, which Python counts as one)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_timeout(timeout, who: str):
    """A timeout argument: None (no limit) or a number of seconds, not NaN (no time is past it: a wait that
    never ends)."""
    if timeout is None:
        return
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.number)):
        raise ArgumentTypeError(f"{who}: timeout is a number of seconds or None, not {type(timeout).__name__} "
                                f"({timeout!r})")
    if timeout != timeout:
        raise ArgumentTypeError(f"{who}: timeout is NaN; give a number of seconds or None")


def check_flag(value, who: str) -> bool:
    """An option that is True or False (None, 0 and 1 read as such): a str or anything else is refused,
    which Python's truth would take as True ("no")."""
    if value is None:
        return False
    if isinstance(value, (bool, np.bool_)) or (is_int(value) and value in (0, 1)):
        return bool(value)
    raise ArgumentTypeError(f"{who} is True or False, not {type(value).__name__} ({value!r})")


def check_name(name, call: str, of: str):
    """Refuse a name argument that is not a str, saying which name the object given would have meant (a
    view's dataflow, an input session's name)."""
    if isinstance(name, str):
        return
    hint = ""
    if hasattr(name, "dataflow") and hasattr(name, "to_pandas"):
        hint = f" (that view belongs to dataflow {name.dataflow!r})"
    elif hasattr(name, "advance_to") and hasattr(name, "name"):
        hint = f" (that input session is named {name.name!r})"
    raise ArgumentTypeError(f"{call} takes the name of {of}, a str, not a {type(name).__name__}{hint}")


def _one_dtype(dtypes) -> bool:
    """Whether a ``dtypes`` argument is one dtype (a name, a type, a NumPy or pandas dtype) rather than one
    per column: a str would otherwise be read letter by letter, and a type cannot be iterated."""
    if isinstance(dtypes, (str, type, np.dtype)):
        return True
    return not isinstance(dtypes, (dict, list, tuple)) and hasattr(dtypes, "kind") and hasattr(dtypes, "name")


def normalize_dtype(dtype) -> str:
    if dtype in (int, np.int64):
        return "int64"
    if dtype in (float, np.float64):
        return "float64"
    if dtype in (bool, np.bool_):
        return "bool"
    if dtype is str:
        return "str"
    key = str(dtype).lower()
    if key not in _DTYPE_ALIASES:
        raise SchemaError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return _DTYPE_ALIASES[key]


@dataclass(frozen=True)
class Schema:
    """Named, typed columns of a collection."""

    names: tuple
    dtypes: tuple

    def __post_init__(self):
        if len(self.names) != len(self.dtypes):
            raise SchemaError("a schema needs one dtype per column")
        for n in self.names:  # (first: a list or dict as a name cannot be hashed for the duplicate check)
            if not isinstance(n, str):
                raise SchemaError(f"column name {n!r} ({type(n).__name__}) must be a str, a Python identifier")
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise SchemaError(f"duplicate column names: {dup}")
        for n in self.names:
            if not isinstance(n, str) or not n.isidentifier():
                raise SchemaError(f"column name {n!r} must be a Python identifier")
            if unicodedata.normalize("NFKC", n) != n:  # what Python makes of a parameter of that name
                raise SchemaError(f"column name {n!r} is not in the form Python gives identifiers (NFKC), so "
                                  f"no map/filter parameter could name it; rename it to "
                                  f"{unicodedata.normalize('NFKC', n)!r} (unicodedata.normalize('NFKC', name))")

    @classmethod
    def of(cls, names, dtypes=None) -> "Schema":
        names = tuple(names)
        if dtypes is not None and _one_dtype(dtypes):  # one dtype for every column (as pandas' dtype=float)
            dtypes = (normalize_dtype(dtypes),) * len(names)
        elif dtypes is not None and not isinstance(dtypes, dict) and not hasattr(dtypes, "__iter__"):
            raise ArgumentTypeError(f"dtypes must be a dtype per column (a list, or a dict by column name) or one "
                                    f"dtype for all of them, not {type(dtypes).__name__} ({dtypes!r})")
        if dtypes is None:
            dtypes = ("int64",) * len(names)
        elif isinstance(dtypes, dict):
            unknown = set(dtypes) - set(names)
            if unknown:
                raise SchemaError(f"dtypes given for unknown columns {sorted(unknown)}; columns are {list(names)}")
            dtypes = tuple(normalize_dtype(dtypes.get(n, "int64")) for n in names)
        else:
            dtypes = tuple(normalize_dtype(d) for d in dtypes)
        return cls(names, dtypes)

    def __len__(self):
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise SchemaError(f"no column {name!r}; columns are {list(self.names)}") from None

    def indices(self, names) -> list:
        return [self.index(n) for n in names]

    def dtype(self, name: str) -> str:
        return self.dtypes[self.index(name)]

    def free(self, name: str) -> str:
        """``name``, or ``name_``, ``name__``... whichever no column has in any case: the name of a column a
        read adds (``diff``, ``time``) without hiding one of the view's own, in pandas and in Spark alike
        (Spark resolves column names regardless of case: ``diff`` beside ``DIFF`` is ambiguous there)."""
        taken = {n.casefold() for n in self.names}
        while name.casefold() in taken:
            name += "_"
        return name

    def select(self, names) -> "Schema":
        return Schema(tuple(names), tuple(self.dtype(n) for n in names))

    def __add__(self, other: "Schema") -> "Schema":
        return Schema(self.names + other.names, self.dtypes + other.dtypes)

    def rename(self, names) -> "Schema":
        return Schema(tuple(names), self.dtypes)

    def __repr__(self):
        return "Schema(" + ", ".join(f"{n}: {d}" for n, d in zip(self.names, self.dtypes)) + ")"


class SymbolTable:
    """Engine-wide interning of strings to int64 ids (ids are dense, in first-seen order)."""

    def __init__(self):
        self._ids: dict = {}
        self._strings: list = []
        self._array = np.empty(0, dtype=object)
        self._ranks = None
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._strings)

    def intern(self, s: str) -> int:
        with self._lock:
            i = self._ids.get(s)
            if i is None:
                i = len(self._strings)
                self._ids[s] = i
                self._strings.append(s)
            return i

    def intern_array(self, values) -> np.ndarray:
        """ids for an array of strings: one dict lookup per distinct string, never per row."""
        uniq, inverse = self.distinct(values)
        return self.intern_distinct(uniq)[inverse]

    def distinct(self, values) -> tuple:
        """(the distinct strings, each value's index among them), checked as ``intern_distinct`` checks
        them (SchemaError) but interning nothing: rows are interned only once all their columns passed."""
        arr = np.asarray(values, dtype=object)
        if arr.size == 0:
            return np.empty(0, object), np.zeros(0, np.int64)
        try:
            uniq, inverse = np.unique(arr, return_inverse=True)
        except TypeError:
            bad = next(v for v in arr if not isinstance(v, str))
            raise SchemaError(f"expected str values, found {bad!r} ({type(bad).__name__})") from None
        vals = uniq.tolist()
        if set(map(type, vals)) != {str}:
            for bad in vals:
                if not isinstance(bad, str):
                    raise SchemaError(f"expected str values, found {bad!r} ({type(bad).__name__})")
        get = self._ids.get
        bad = next((v for v in vals if not v.isascii() and get(v, -1) < 0 and not _utf8(v)), None)  # (ASCII: no lookup)
        if bad is not None:
            raise SchemaError(f"expected text, found {text_problem(bad)}")
        return uniq, inverse.reshape(-1)

    def intern_distinct(self, values) -> np.ndarray:
        """ids for a sequence of distinct strings (e.g. the dictionary of a dictionary-encoded column):
        one dict lookup each. Raises SchemaError on a value that is not a str, interning nothing."""
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if values and set(map(type, values)) != {str}:
            bad = next((s for s in values if not isinstance(s, str)), None)
            if bad is not None or any(s is None for s in values):
                raise SchemaError(f"expected str values, found {bad!r} ({type(bad).__name__})")
            # str subclasses (np.str_, a str Enum) are stored as the text they hold, not as their str()
            values = [str.__str__(s) for s in values]
        get = self._ids.get
        with self._lock:
            ids = [get(s, -1) for s in values]
            for k, i in enumerate(ids):  # (new strings checked before any is interned)
                if i < 0 and not _utf8(values[k]):
                    raise SchemaError(f"expected text, found {text_problem(values[k])}")
            for k, i in enumerate(ids):
                if i < 0:
                    s = values[k]
                    i = self._ids.get(s, -1)  # a repeat within values
                    if i < 0:
                        i = len(self._strings)
                        self._ids[s] = i
                        self._strings.append(s)
                    ids[k] = i
        return np.array(ids, dtype=np.int64)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Object array of strings for an array of ids."""
        with self._lock:
            if len(self._array) != len(self._strings):
                self._array = np.array(self._strings + [None], dtype=object)[:-1] if self._strings else np.empty(0, object)
            arr = self._array
        return arr[np.asarray(ids, dtype=np.int64)]

    def ranks(self) -> np.ndarray:
        """rank[id] = position of the string in lexicographic order (for min/max/top-k over strings)."""
        with self._lock:
            if self._ranks is None or len(self._ranks) != len(self._strings):
                order = np.argsort(np.array(self._strings, dtype=object), kind="stable") if self._strings \
                    else np.zeros(0, np.int64)
                r = np.empty(len(order), dtype=np.int64)
                r[order] = np.arange(len(order), dtype=np.int64)
                self._ranks = r
            return self._ranks


# -- encoding and decoding of columns -----------------------------------------------------------

_NAN_BITS = np.array([np.nan], dtype=np.float64).view(np.int64)[0]


def float_bits(f: np.ndarray) -> np.ndarray:
    """The engine's int64 representation of float64 values: their bits, canonical so that equal values
    have equal bits (-0.0 as 0.0, every NaN as NumPy's nan). A fresh array."""
    with np.errstate(invalid="ignore"):  # (a signalling NaN is a NaN like any other)
        f = np.asarray(f, np.float64) + 0.0  # -0.0 -> 0.0
    bits = f.view(np.int64).copy()
    bits[np.isnan(f)] = _NAN_BITS
    return bits


_INT64_MAX = 2 ** 63 - 1
_RANGE = "outside int64's range [-2**63, 2**63 - 1]"
_FLOAT_RANGE = "outside float64's range (its largest finite value is about 1.8e308)"
_INF = float("inf")


def _utf8(s: str) -> bool:
    """Whether UTF-8 can hold ``s`` (Arrow, Spark and files need it): not where it has a lone surrogate."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_problem(v) -> str | None:
    """What keeps ``v`` out of a str column (a value of another type, or text with a lone surrogate), or
    None."""
    if not isinstance(v, str):
        return f"{v!r} ({type(v).__name__}){_NULL if _is_null(v) else ''}"
    if not _utf8(v):
        return f"{v!r}, text with a lone surrogate, which UTF-8 (and so Arrow, Spark and files) cannot hold"
    return None


def as_column(values) -> np.ndarray:
    """A user's column as an array. A Python sequence keeps its values exactly where NumPy would not: str
    values as objects (a NumPy str array drops trailing NULs), and ints NumPy would make floats (one beyond
    int64 among negatives) as objects, which the encoding then refuses by row instead of rounding."""
    if isinstance(values, np.ndarray):
        return values
    try:
        arr = np.asarray(values)
    except ValueError:  # sequences of several lengths among the values: kept whole, refused by row
        return object_column(values)
    if arr.dtype.kind == "U" or (arr.dtype.kind == "f" and arr.ndim == 1 and
                                 all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                     for v in values)):
        return np.asarray(values, dtype=object)
    if arr.dtype.kind in "cSmM" and arr.ndim == 1 and not all(isinstance(v, _KIND_TYPES[arr.dtype.kind])
                                                              for v in values):
        # numbers mixed with complex, bytes or time values: NumPy made every value one (7 as 7+0j, b"7" or
        # 7 seconds); kept as given, the encoding names the row and value that is not a number
        return object_column(values)
    return arr


_KIND_TYPES = {"c": (complex, np.complexfloating), "S": (bytes, np.bytes_), "m": (np.timedelta64,),
               "M": (np.datetime64,)}


def object_column(values) -> np.ndarray:
    """A Python sequence as a 1-D object array, each value kept whole: NumPy would make a 2-D array of values
    that are sequences of one length (a tuple, a list, an array or bytes per row)."""
    if not hasattr(values, "__len__"):
        values = list(values)
    return np.fromiter(values, dtype=object, count=len(values))


def _nested(v) -> bool:
    """Whether a value is a sequence (or bytes) rather than one value: what no column holds."""
    if isinstance(v, (str, np.generic)):
        return False
    if isinstance(v, (bytes, bytearray, memoryview)):
        return True
    try:
        return np.ndim(v) != 0
    except Exception:  # noqa: BLE001 - NumPy cannot shape it (ragged sequences): a sequence
        return True


def _not_one_value(values, arr, dtype: str, name: str) -> SchemaError:
    """The error for a column NumPy read as more than one-dimensional: the row whose value is a sequence."""
    if not isinstance(values, np.ndarray):
        for i, v in enumerate(values):
            if _nested(v):
                what = "bytes" if isinstance(v, (bytes, bytearray, memoryview)) else "a sequence"
                return SchemaError(f"column {name!r} is {dtype} but row {i} holds {_show(v)} ({type(v).__name__}), "
                                   f"{what}; expected one {dtype} value per row")
    return SchemaError(f"column {name!r} is {dtype} and takes one value per row (a one-dimensional column), "
                       f"got shape {arr.shape}")


def _show(v) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def distinct_text(values, symbols: SymbolTable, name: str = "?") -> tuple:
    """A str column's distinct values and each row's index among them (``SymbolTable.distinct``), or the
    error naming the column and the first row that is not text; interns nothing."""
    arr = _as_object(values, name)
    try:
        return symbols.distinct(arr)
    except SchemaError:
        i, why = next((i, w) for i, w in enumerate(map(text_problem, arr.tolist())) if w is not None)
        raise SchemaError(f"column {name!r} is str but row {i} holds {why}") from None


def encode_column(values, dtype: str, symbols: SymbolTable, name: str = "?") -> np.ndarray:
    """Turn user values into the engine's int64 representation, with errors that name the column."""
    if isinstance(values, np.ma.MaskedArray) and np.ma.is_masked(values):  # NumPy would drop the mask
        i = int(np.flatnonzero(np.ma.getmaskarray(values))[0])
        raise SchemaError(f"column {name!r} holds a null (a masked value) at row {i}{_NULL}")
    if dtype == "str":
        uniq, inverse = distinct_text(values, symbols, name)
        return symbols.intern_distinct(uniq)[inverse]
    arr = as_column(values)  # (a list mixing numbers and str stays objects: the error names the row)
    if arr.ndim != 1:  # values that are sequences (NumPy would unwrap or broadcast them)
        raise _not_one_value(values, arr, dtype, name)
    if arr.dtype.kind in "MmSV":  # times, durations, bytes, raw records: not numbers, whatever NumPy casts
        what = {"M": "date/time", "m": "duration", "S": "bytes", "V": "raw"}[arr.dtype.kind]
        hint = "; convert them first (e.g. .astype('int64') for nanoseconds)" if arr.dtype.kind in "Mm" else ""
        raise SchemaError(f"column {name!r} is {dtype} but holds {what} values ({arr.dtype}){hint}")
    if dtype == "int64":
        if not isinstance(values, np.ndarray) and arr.dtype.kind in "fuO":
            # Python values that NumPy would turn into floats or uint64 (ints beyond int64, or ints mixed
            # with floats): convert one by one, exactly
            return _convert_object(_as_object(values, name), name, "int64", int)
        if arr.dtype.kind in "ib":
            return arr.astype(np.int64, copy=False)
        if arr.dtype.kind == "u":
            bad = arr > np.uint64(_INT64_MAX)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SchemaError(f"column {name!r} is int64 but row {i} holds {arr[i].item()!r} "
                                  f"({arr.dtype}), {_RANGE}")
            return arr.astype(np.int64)
        if arr.dtype.kind == "f":
            with np.errstate(invalid="ignore", over="ignore"):  # (float16 and float32 cannot hold 2**63)
                bad = ~whole(arr) | (arr >= 2.0 ** 63) | (arr < -2.0 ** 63)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                v = arr[i].item()
                why = _RANGE if np.isfinite(v) and float(v).is_integer() else "which is not an integer"
                raise SchemaError(f"column {name!r} is int64 but row {i} holds {v!r} ({arr.dtype}), {why}")
            return arr.astype(np.int64)
        return _convert_object(arr, name, "int64", int)
    if dtype == "float64":
        if arr.dtype.kind not in "iufb":
            arr = _convert_object(arr, name, "float64", float)
        elif arr.dtype.kind == "f" and arr.dtype.itemsize > 8:  # a longdouble beyond float64: not inf
            with np.errstate(over="ignore"):
                bad = np.isinf(arr.astype(np.float64)) & np.isfinite(arr)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SchemaError(f"column {name!r} is float64 but row {i} holds {_show(arr[i])} ({arr.dtype}), "
                                  f"{_FLOAT_RANGE}")
        return float_bits(arr)
    if dtype == "bool":
        if arr.dtype.kind == "b":
            return arr.astype(np.int64)
        if arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all():
            return arr.astype(np.int64)
        return _convert_object(arr, name, "bool", _strict_bool)
    raise SchemaError(f"unknown dtype {dtype!r}")


_NULL = "; kpgnb columns cannot hold nulls: drop or fill them first"


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or type(v).__name__ in ("NAType", "NaTType")


def na_row(col) -> int | None:
    """The first row where a pandas nullable column (Int64, Float64, boolean, string, categorical: an
    extension array or a Series of one) holds NA, or None. NumPy would turn its NAs into NaN (a float64
    column) or pd.NA objects, and the error would then be about a dtype rather than a null."""
    dt = getattr(col, "dtype", None)
    if dt is None or isinstance(dt, np.dtype) or not hasattr(col, "isna"):
        return None
    na = np.asarray(col.isna(), bool)
    return int(np.flatnonzero(na)[0]) if na.any() else None


def whole(a: np.ndarray) -> np.ndarray:
    """bool mask: which values of a float array are finite whole numbers (what an int64 may take)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(a) & (np.floor(a) == a)


def _strict_bool(v):
    if isinstance(v, (bool, np.bool_)) or v in (0, 1):
        return int(bool(v))
    raise ValueError


def _as_object(values, name):
    if isinstance(values, (list, tuple)):
        return object_column(values)  # (values that are sequences stay whole: refused by row)
    try:
        arr = np.asarray(values, dtype=object)
    except ValueError:
        arr = object_column(values)
    if arr.ndim != 1:
        raise SchemaError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    return arr


def _convert_object(arr, name, dtype, conv):
    arr = np.asarray(arr, dtype=object).reshape(-1)
    out = np.empty(len(arr), dtype=np.float64 if dtype == "float64" else np.int64)
    for i, v in enumerate(arr.tolist()):
        why = ""
        try:
            if dtype == "int64" and isinstance(v, float) and not v.is_integer():
                why = ", which is not an integer"
                raise ValueError
            if isinstance(v, (str, bytes, bytearray, memoryview, complex, np.complexfloating, np.datetime64,
                              np.timedelta64)) or type(v).__module__ == "datetime":
                raise ValueError  # (int() would parse text and bytes, float() keep a complex's real part;
                #                    times are not numbers)
            if hasattr(v, "__len__") and not (isinstance(v, np.ndarray) and v.ndim == 0):
                why = f", a sequence; expected one {dtype} value per row"  # (float() takes a 1-element array)
                raise ValueError
            if dtype == "int64":
                v_int = conv(v)
                if v_int != v:  # Decimal("1.5"), Fraction(3, 2): int() would truncate
                    why = ", which is not an integer"
                    raise ValueError
                if not -2 ** 63 <= v_int <= _INT64_MAX:
                    why = ", " + _RANGE
                    raise OverflowError
                out[i] = v_int
            elif dtype == "float64":
                try:
                    f = conv(v)  # (an int or Fraction beyond float64 raises OverflowError)
                    if f in (_INF, -_INF) and v != f:  # (a finite Decimal or longdouble beyond it: inf)
                        raise OverflowError
                except OverflowError:
                    why = ", " + _FLOAT_RANGE
                    raise
                out[i] = f
            else:
                out[i] = conv(v)
        except (TypeError, ValueError, OverflowError):
            if _is_null(v) and not isinstance(v, float):  # None, pd.NA (a NaN says why it is refused)
                why = _NULL
            raise SchemaError(f"column {name!r} is {dtype} but row {i} holds {_show(v)} "
                              f"({type(v).__name__}){why}") from None
    return out


def decode_column(ints: np.ndarray, dtype: str, symbols: SymbolTable) -> np.ndarray:
    """The user-facing array for an int64 engine column."""
    if dtype == "int64":
        return ints
    if dtype == "float64":
        return ints.view(np.float64)
    if dtype == "bool":
        return ints.astype(bool)
    return symbols.lookup(ints)


def user_column(ints: np.ndarray, dtype: str) -> np.ndarray:
    """The array a vectorized user function sees (strings stay as interned int64 ids)."""
    if dtype == "float64":
        return ints.view(np.float64)
    if dtype == "bool":
        return ints.astype(bool)
    return ints


def first_value(arr: np.ndarray):
    """The first value of an object array that is not a null (None, NA, NaT; a NaN is a float value), or
    ``_NO_VALUE``. (Iterated: a column rarely starts with many nulls.)"""
    return next((v for v in arr.reshape(-1) if not _null_object(v)), _NO_VALUE)


def _null_object(v) -> bool:
    return _is_null(v) and not isinstance(v, float)


_NO_VALUE = object()


def first_null(arr: np.ndarray) -> int | None:
    """The first row of an object array holding a null (None, NA; a NaN is a float value), or None."""
    if arr.dtype.kind != "O":
        return None
    return next((i for i, v in enumerate(arr.reshape(-1)) if _null_object(v)), None)


def value_dtype(arr: np.ndarray) -> str | None:
    """The column dtype an array a user function returned asks for, or None where it says nothing: an
    object array of nulls only (its nulls are refused as nulls when encoded, whatever the dtype)."""
    if arr.dtype.kind == "O" and arr.size and first_value(arr) is _NO_VALUE:
        return None
    return infer_dtype(arr)


def infer_dtype(arr: np.ndarray) -> str:
    """The column dtype for an array a user function returned (object arrays by their first value that is
    not a null; one of nulls only as str)."""
    kind = arr.dtype.kind
    if kind == "O" and arr.size:
        first = first_value(arr)
        if first is _NO_VALUE:
            return "str"
        if isinstance(first, (bool, np.bool_)):
            return "bool"
        if isinstance(first, (int, np.integer)):
            return "int64"
        if isinstance(first, (float, np.floating)):
            return "float64"
        if not (isinstance(first, str) or _is_null(first)):
            raise SchemaError(f"cannot store {type(first).__name__} values (row 0 holds {first!r}); columns hold "
                              f"int, float, bool or str: convert them first")
    if kind == "b":
        return "bool"
    if kind in "iu":
        return "int64"
    if kind == "f":
        return "float64"
    if kind in "OUS":
        return "str"
    raise SchemaError(f"cannot store values of dtype {arr.dtype}")


# -- update batches ---------------------------------------------------------------------------

class UpdateBatch:
    """Unarranged updates: a ``k x n`` int64 column matrix, an ``n x d`` time matrix and int64 diffs."""

    __slots__ = ("data", "times", "diffs")

    def __init__(self, data: np.ndarray, times: np.ndarray, diffs: np.ndarray):
        self.data = data
        self.times = times
        self.diffs = diffs

    @classmethod
    def empty(cls, k: int, d: int) -> "UpdateBatch":
        return cls(np.zeros((k, 0), np.int64), np.zeros((0, d), np.int64), np.zeros(0, np.int64))

    def __len__(self):
        return len(self.diffs)

    @property
    def width(self) -> int:
        return self.data.shape[0]

    @property
    def depth(self) -> int:
        return self.times.shape[1]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.times.nbytes + self.diffs.nbytes

    def take(self, idx) -> "UpdateBatch":
        return UpdateBatch(self.data[:, idx], self.times[idx], self.diffs[idx])


# -- what vectorized user functions return ---------------------------------------------------------

def encode_outputs(result, schema, n: int, symbols, who: str, inferred: bool = False) -> np.ndarray:
    """Turn a user function's dict of output columns into the engine's int64 column matrix. ``inferred``:
    the schema was learnt from a trial call (no out=), which the errors say."""
    if not isinstance(result, dict):
        raise SchemaError(f"{who} must return a dict of columns, got {type(result).__name__}")
    missing = [c for c in schema.names if c not in result]
    extra = [c for c in result if c not in schema.names]
    if missing or extra:
        raise SchemaError(f"{who} returned columns {list(result)}; the dataflow was built with "
                          f"{list(schema.names)}")
    data = np.empty((len(schema), n), np.int64)
    for i, (name, dtype) in enumerate(zip(schema.names, schema.dtypes)):
        col = result[name]
        if col.__class__ is np.ndarray and col.dtype == np.int64 and dtype == "int64" and col.shape == (n,):
            data[i] = col  # (the common case, with nothing to check or convert)
            continue
        na = na_row(col)
        if na is not None:
            raise SchemaError(f"{who} returned a null (NA) for column {name!r} at row {na}{_NULL}")
        arr = as_column(col)  # (a masked array stays one: encode_column refuses its nulls)
        if arr.ndim == 0:
            raise SchemaError(f"{who} returned a scalar ({col!r}) for column {name!r}; expected a column array "
                              f"of length {n} (one value per row); for a constant use np.full({n}, value)")
        if arr.shape != (n,):
            raise SchemaError(f"{who} returned column {name!r} of shape {arr.shape}; expected ({n},)")
        got = (value_dtype(arr) if arr.size else None) or dtype  # (nulls only: refused as nulls below)
        if got != dtype and not (dtype == "float64" and got in ("int64", "bool")) \
                and not (dtype == "int64" and got == "bool"):
            null = first_null(arr)
            if null is not None:  # (a null says nothing of the dtype: refused as what it is)
                raise SchemaError(f"{who} returned a null ({arr.reshape(-1)[null]!r}) for column {name!r} at row "
                                  f"{null}{_NULL}")
            if inferred:
                hint = ", ".join(f"{c!r}: {got if c == name else d!r}" for c, d in zip(schema.names, schema.dtypes))
                hint = hint.replace(f"{name!r}: {got}", f"{name!r}: {got!r}")
                raise SchemaError(f"{who} returned {got} values for column {name!r}, but no dtype was declared "
                                  f"for it: {dtype} was inferred from a trial call on an empty batch; pass "
                                  f"out={{{hint}}} to declare the output columns")
            raise SchemaError(f"{who} returned {got} values for column {name!r}, which the dataflow declared "
                              f"{dtype}; pass out={{'{name}': '{got}'}} to declare it")
        data[i] = encode_column(arr, dtype, symbols, name)
    return data


def flat_map_how(how) -> np.ndarray:
    """A flat_map function's index or repeat counts as int64 (floats only when whole), or a boolean mask as
    it is (``flat_map_rows`` reads it as 0/1 counts), else an error: the engine's and kp.spark.run's
    workers' one check."""
    how = np.asarray(how).reshape(-1)
    if how.dtype.kind == "b":
        return how
    if how.dtype.kind not in "iu" and len(how) and not (how.dtype.kind == "f" and whole(how).all()):
        raise SchemaError(f"the flat_map function's index or repeat counts must be integers, got "
                          f"{how.dtype} values such as {how[:3].tolist()}")
    return how.astype(np.int64)


MAX_ROUND = 1 << 62  # rounds count up from here without wrapping (a loop's next round is r + 1)


def check_rounds(rounds, n: int, kind: str) -> np.ndarray:
    """The rounds an ``enter_at`` or ``delay`` function gave n rows as int64, checked before the cast (a
    uint64 past int64 would wrap negative): the engine's and kp.spark.run's workers' one check."""
    rounds = np.asarray(rounds)
    if rounds.shape != (n,) or rounds.dtype.kind not in "iub":
        raise SchemaError(f"the {kind} function must return an integer array of length {n} "
                          f"(a round per row), got dtype {rounds.dtype} and shape {rounds.shape}")
    if n and rounds.max() >= MAX_ROUND:
        raise SchemaError(f"the {kind} function returned the round {int(rounds.max())}; rounds must be below "
                          f"2**62")
    if kind == "enter_at" and n and rounds.min() < 0:  # (delay takes max(round, fn(row)): any round will do)
        raise SchemaError(f"the enter_at function returned a negative round ({int(rounds.min())}); "
                          f"rounds start at 0")
    return rounds.astype(np.int64, copy=False)


def filter_mask(res, n: int) -> np.ndarray:
    """What a filter function gives n rows: one boolean per row (the engine's and kp.spark.run's workers'
    one check). One bool for all is refused, not spread: which rows it kept would depend on batching and
    workers."""
    keep = np.asarray(res)
    if keep.ndim == 0:
        raise SchemaError(f"the filter function must return a boolean array of length {n} (one per row), got "
                          f"a scalar ({keep.item()!r})")
    if keep.shape != (n,) or keep.dtype.kind != "b":
        raise SchemaError(f"the filter function must return a boolean array of length {n}, got dtype "
                          f"{keep.dtype} and shape {keep.shape}")
    return keep


def threshold_counts(fn, counts: np.ndarray) -> np.ndarray:
    """What a threshold function gives ``counts``: integers of their shape, each a multiplicity below 2**62
    (the engine's and kp.spark.run's workers' one check)."""
    out = np.asarray(fn(counts.copy()))
    if out.shape != counts.shape or out.dtype.kind not in "iub":
        raise ValueError(f"the threshold function must map an int64 array of counts to integers of the same "
                         f"shape; got dtype {out.dtype} and shape {out.shape}")
    if out.size and (out.max() >= MAX_MULT or (out.dtype.kind == "i" and out.min() <= -MAX_MULT)):
        raise multiplicity_overflow()
    return out.astype(np.int64)


def flat_map_rows(repeat, how: np.ndarray, n_in: int, n_out: int) -> tuple:
    """(the input row of each output row, what ``how`` turned out to be when ``repeat`` left it open: True
    for repeat counts, False for an index, None when nothing told) from the function's index or counts."""
    learned = None
    if how.dtype.kind == "b":  # a mask: which input rows are kept, once each
        if repeat is False:
            raise SchemaError("the flat_map function returned a boolean mask where repeat=False expects an "
                              "index (the input row of each output row); a mask reads as repeat counts (0 or "
                              "1 per input row): pass repeat=True, or leave repeat unset")
        how = how.astype(np.int64)
        learned = True if repeat is None else None
        repeat = True
    if repeat is None and len(how):
        learned = _counts_or_index(how, n_in, n_out)
        repeat = True if learned is None else learned
    if repeat:
        if how.shape != (n_in,) or (how < 0).any() or how.sum() != n_out:
            raise SchemaError(f"flat_map repeat counts must be {n_in} non-negative integers summing to the "
                              f"{n_out} output rows")
        return np.repeat(np.arange(n_in), how), learned
    if len(how) != n_out or (len(how) and (how.min() < 0 or how.max() >= n_in)):
        raise SchemaError(f"a flat_map index must give, for each of the {n_out} output rows, its input row "
                          f"in [0, {n_in})")
    return how, learned


def _counts_or_index(how: np.ndarray, n_in: int, n_out: int) -> bool | None:
    """Whether undeclared ``how`` (non-empty) reads as repeat counts: by length (an index has one entry
    per output row, counts one per input row); where the lengths agree, the one reading that is valid.
    Where both are valid they give different rows (all ones too, from two input rows on: one row each, or
    every row from row 1), and guessing could be silently wrong: an error asks for ``repeat=``."""
    if len(how) == n_out and len(how) != n_in:
        return False
    if len(how) == n_in and len(how) != n_out:
        return True
    counts = bool((how >= 0).all() and how.sum() == n_out)
    index = bool(how.min() >= 0 and how.max() < n_in)
    if counts and index:
        raise SchemaError(f"the flat_map function returned {len(how)} integers for {n_in} input and {n_out} "
                          f"output rows, which read as repeat counts and as an index give different rows: pass "
                          f"repeat=True (counts: how[j] output rows for input row j) or repeat=False (index: "
                          f"output row i comes from input row how[i]) to flat_map")
    return counts
