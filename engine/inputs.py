"""Turning user rows (lists of tuples, dicts of arrays, pandas, Arrow or Spark DataFrames) into the
engine's int64 column matrix, with errors that say which column or row is wrong and what was expected.
No pandas, Arrow or Spark import: those are recognised by duck typing.

Arrow columns (a Spark DataFrame arrives as ``toArrow()``) are checked whole first (type, nulls) so a bad
table changes nothing; string columns are dictionary-encoded by Arrow and each distinct string is interned
once, the rows then mapped with NumPy (pandas string columns likewise through ``factorize``)."""
from __future__ import annotations

import numpy as np

from .columns import Schema, SchemaError, SymbolTable, distinct_text, encode_column, object_column, text_problem, whole
from .kernels import MAX_MULT


STREAMING = ("the Spark DataFrame is a stream: it has no rows to read at once; feed it into an input with "
             "kp.spark.follow(stream, input=NAME), one epoch per micro-batch")


def spark_arrow(df):
    """A (batch) Spark DataFrame as an Arrow table. Spark's ``toArrow()`` of a frame of no columns has no
    rows; read through one column dropped again, the table keeps their count."""
    if getattr(df, "isStreaming", False) is True:
        raise SchemaError(STREAMING)
    if df.columns:
        return df.toArrow()
    return df.selectExpr("1 AS rows__").toArrow().drop_columns(["rows__"])


def rows_to_columns(rows, schema: Schema, symbols: SymbolTable) -> np.ndarray:
    """A ``k x n`` int64 matrix for the rows, in schema column order."""
    what = "the Arrow table"
    if hasattr(rows, "toArrow") and callable(rows.toArrow):  # a Spark DataFrame (Spark 4)
        rows, what = spark_arrow(rows), "the Spark DataFrame"
    if is_arrow_table(rows):  # an Arrow Table or RecordBatch (its row count: a table may have no columns)
        return _from_mapping(arrow_columns(rows, schema, what), schema, symbols, what, rows.num_rows)
    if hasattr(rows, "columns") and hasattr(rows, "iloc"):  # a pandas DataFrame
        _check_names([str(c) for c in rows.columns], schema, "the DataFrame")  # (two of one name, first)
        dtypes = dict(zip(schema.names, schema.dtypes))
        return _from_mapping({str(c): _pandas_column(rows[c], dtypes.get(str(c))) for c in rows.columns},
                             schema, symbols, "the DataFrame", len(rows))
    if isinstance(rows, dict):
        _check_series_aligned(rows)
        return _from_mapping(rows, schema, symbols, "the dict")
    if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
        keys = [k for k in rows[0]]
        for i, r in enumerate(rows):
            if set(r) != set(keys):
                raise SchemaError(f"record {i} has keys {sorted(r)}; record 0 has {sorted(keys)}")
        return _from_mapping({k: [r[k] for r in rows] for k in keys}, schema, symbols, "the records", len(rows))
    if rows is None or isinstance(rows, (str, bytes, int, float, bool, np.generic)) or not hasattr(rows, "__iter__"):
        raise SchemaError(f"rows must be a list of tuples, a dict of columns, or a pandas/Arrow/Spark DataFrame; "
                          f"got {type(rows).__name__} {rows!r:.80}")
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        if rows.shape[1] != len(schema):
            raise SchemaError(f"a 2-D array of rows needs {len(schema)} columns {list(schema.names)}, "
                              f"got shape {rows.shape}")
        return _encode_all([rows[:, i] for i in range(len(schema))], schema, symbols, rows.shape[0])
    return _from_tuples(rows, schema, symbols)


# -- Arrow (duck-typed: Table, RecordBatch, Array, ChunkedArray; no pyarrow import) ---------------------

_ARROW_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_ARROW_FLOATS = {"halffloat", "float", "double", "float16", "float32", "float64"}
_ARROW_STRINGS = {"string", "large_string", "string_view", "utf8", "large_utf8"}
# which Arrow type families each engine dtype takes (values are checked further by encode_column)
_ARROW_ACCEPTS = {"int64": {"int", "bool", "float"}, "float64": {"int", "float", "bool"},
                  "bool": {"bool", "int"}, "str": {"str"}}
_SUPPORTED = ("int8..int64, uint8..uint64, float16/32/64, bool, string, large_string, string_view and "
              "dictionaries of strings")


def is_arrow_table(obj) -> bool:
    return hasattr(obj, "column_names") and hasattr(obj, "column") and hasattr(obj, "schema")


def arrow_family(arrow_type) -> str | None:
    """'int', 'float', 'bool' or 'str' for an Arrow type (by its name), None when kpgnb cannot store it."""
    name = str(arrow_type)
    if name in _ARROW_INTS:
        return "int"
    if name in _ARROW_FLOATS:
        return "float"
    if name == "bool":
        return "bool"
    if name in _ARROW_STRINGS:
        return "str"
    if name.startswith("dictionary<") and hasattr(arrow_type, "value_type"):
        inner = arrow_family(arrow_type.value_type)
        return None if inner is None else "dict-" + inner
    return None


ARROW_DTYPES = {"int": "int64", "float": "float64", "bool": "bool", "str": "str"}


def arrow_dtype(name: str, arrow_type) -> str:
    """The engine dtype for an Arrow column (SchemaError naming the column and type when there is none)."""
    fam = arrow_family(arrow_type)
    if fam is None:
        raise SchemaError(f"column {name!r} has Arrow type {arrow_type}, which kpgnb cannot store; supported: "
                          f"{_SUPPORTED} (cast it first, e.g. a timestamp to int64 or a decimal to double)")
    return ARROW_DTYPES[fam.removeprefix("dict-")]


def check_arrow(table, schema: Schema, what: str = "the Arrow table"):
    """Refuse an Arrow table that cannot go into ``schema`` (names, types, nulls) without encoding anything:
    a SchemaError names the column, and for nulls the first null row."""
    _check_names(list(table.column_names), schema, what)
    for name, dtype in zip(schema.names, schema.dtypes):
        _check_arrow_column(table.column(name), name, dtype, what)


def _check_arrow_column(col, name: str, dtype: str, what: str) -> str:
    """Refuse an Arrow column (Array or ChunkedArray) that cannot go into a ``dtype`` column; its family."""
    fam = arrow_family(col.type)
    if fam is None:
        arrow_dtype(name, col.type)  # raises
    base = fam.removeprefix("dict-")
    if base not in _ARROW_ACCEPTS[dtype]:
        raise SchemaError(f"column {name!r} is {dtype} but {what} has it as Arrow type {col.type}")
    if col.null_count or fam.startswith("dict-"):
        nulls = _null_rows(col)
        if len(nulls):
            raise SchemaError(f"column {name!r} has {len(nulls)} null value(s), the first at row {nulls[0]}; "
                              f"kpgnb columns cannot hold nulls: drop or fill them first (e.g. df.na.drop() "
                              f"or df.na.fill(...) in Spark)")
    return fam


def _null_rows(col) -> np.ndarray:
    """The rows of an Arrow column that read as null: its own nulls and, in a dictionary-encoded chunk,
    indices to a null dictionary entry (which Arrow's null_count leaves out)."""
    parts = []
    for c in _chunks(col):
        if getattr(c, "dictionary", None) is not None and c.dictionary.null_count:
            c = c.dictionary_decode()
        parts.append(c.is_null().to_numpy(zero_copy_only=False) if c.null_count else np.zeros(len(c), bool))
    return np.flatnonzero(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def arrow_columns(table, schema: Schema, what: str = "the Arrow table") -> dict:
    """Columns of an Arrow table ready for encoding: NumPy arrays, strings as :class:`Coded` (one interning
    per distinct string, through dictionary encoding)."""
    _check_names(list(table.column_names), schema, what)
    return {name: _arrow_column(table.column(name), name, dtype, what) for name, dtype in zip(schema.names, schema.dtypes)}


def _is_arrow_array(obj) -> bool:
    """An Arrow Array or ChunkedArray (duck-typed: no pyarrow import)."""
    return hasattr(obj, "null_count") and hasattr(obj, "type") and (hasattr(obj, "chunks") or hasattr(obj, "buffers"))


def _arrow_column(col, name: str, dtype: str, what: str):
    """One Arrow column checked (``_check_arrow_column``) and ready for encoding."""
    fam = _check_arrow_column(col, name, dtype, what)
    if fam.startswith("dict-") and fam != "dict-str":  # a dictionary of numbers: decode it
        col = _chunks_map(col, lambda c: c.dictionary_decode())
        fam = fam.removeprefix("dict-")
    if fam not in ("str", "dict-str"):
        return _arrow_numbers(col)
    try:
        return _arrow_strings(col)
    except Exception as err:  # noqa: BLE001 - bytes that are not UTF-8 (Arrow does not check them)
        bad = _not_text(col)
        if bad is None:
            raise
        raise SchemaError(f"column {name!r} is str but row {bad[0]} holds {bad[1]!r}, bytes that are not "
                          f"UTF-8 text (read with the wrong encoding?)") from err


def _not_text(col):
    """(row, bytes) of the first value of an Arrow string column that is not UTF-8, or None."""
    import pyarrow as pa
    at = 0
    for c in _chunks(col):
        if getattr(c, "dictionary", None) is not None:
            c = c.dictionary_decode()
        for i, b in enumerate(c.cast(pa.binary()).to_pylist()):
            if b is not None:
                try:
                    b.decode("utf-8")
                except UnicodeDecodeError:
                    return at + i, b
        at += len(c)
    return None


def _chunks(col) -> list:
    if isinstance(col, list):
        return col
    return list(col.chunks) if hasattr(col, "chunks") else [col]


def _chunks_map(col, fn):
    return [fn(c) for c in _chunks(col)]


def _arrow_numbers(col) -> np.ndarray:
    parts = [c.to_numpy(zero_copy_only=False) for c in _chunks(col)]
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _arrow_strings(col) -> "Coded":
    """Dictionary-encode a string column (or take its dictionary encoding): codes per row, distinct values.
    Chunks sharing a dictionary (as Arrow's dictionary_encode of a chunked array makes them) share one."""
    if not str(col.type).startswith("dictionary<"):
        col = col.dictionary_encode()
    chunks = _chunks(col)
    uniques, codes, offset, prev = [], [], 0, None
    for c in chunks:
        d = c.dictionary
        if prev is None or not d.equals(prev):
            uniques.append(d.to_numpy(zero_copy_only=False))
            base, offset, prev = offset, offset + len(d), d
        idx = c.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        codes.append(idx + base if base else idx)
    if not codes:
        return Coded(np.zeros(0, np.int64), np.empty(0, object))
    return Coded(codes[0] if len(codes) == 1 else np.concatenate(codes),
                 uniques[0] if len(uniques) == 1 else np.concatenate(uniques))


def _pandas_column(series, dtype):
    """A pandas column: factorized when it goes into a str column (one interning per distinct value),
    else its NumPy values."""
    if dtype == "str" and hasattr(series, "factorize"):
        try:
            codes, uniques = series.factorize(use_na_sentinel=True)
        except Exception:  # noqa: BLE001 - values pandas cannot hash (lists, dicts, arrays): refused one by one
            values = np.empty(len(series), object)
            for i, v in enumerate(series):  # (not np.asarray: lists of one length would make a 2-D array)
                values[i] = v
            return values
        codes, uniques = np.asarray(codes, np.int64), np.asarray(uniques, dtype=object)
        values = series.to_numpy(dtype=object)
        seen = codes >= 0
        # pandas hashes object strings as C strings: "a" and "a\x00" become one value. Where that
        # happened the column is taken value by value instead.
        if not (values[seen] == uniques[codes[seen]]).all():
            return values
        return Coded(codes, uniques, nulls="null (None, NaN or NA)")
    dtype = getattr(series, "dtype", None)  # (a duplicated column name gives a frame)
    # a pandas extension column (Int64, Float64, boolean, categorical, Arrow-backed) with NA: a null, which
    # NumPy would make a NaN value (a float column would take it) or an NA object
    masked = dtype is not None and not isinstance(dtype, np.dtype)
    if masked and getattr(dtype, "name", "").startswith("Sparse") and getattr(dtype, "subtype", None) is not None \
            and np.dtype(dtype.subtype).kind == "f":
        masked = False  # (a Sparse float column has no NA: its NaN are values, as in a dense float64 column)
    if masked and series.hasnans:
        i = int(np.flatnonzero(np.asarray(series.isna()))[0])
        raise SchemaError(f"column {str(series.name)!r} holds a null (NA) at row {i}; kpgnb columns cannot hold "
                          f"nulls: drop or fill them first (e.g. df.dropna() or df.fillna(...))")
    return series.to_numpy()


class Coded:
    """A dictionary-encoded column: ``uniques[codes]`` are its values (``codes == -1``: a null)."""

    __slots__ = ("codes", "uniques", "nulls")

    def __init__(self, codes: np.ndarray, uniques: np.ndarray, nulls: str = "null"):
        self.codes = codes
        self.uniques = uniques
        self.nulls = nulls

    def __len__(self):
        return len(self.codes)

    def encode(self, dtype: str, symbols: SymbolTable, name: str) -> np.ndarray:
        if dtype != "str":
            return encode_column(self.values(name), dtype, symbols, name)
        uniq, inverse = self.distinct(symbols, name)
        return symbols.intern_distinct(uniq)[inverse]

    def values(self, name: str) -> np.ndarray:
        missing = self.codes < 0
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise SchemaError(f"column {name!r} holds a {self.nulls} at row {i}; kpgnb columns cannot hold "
                              f"nulls: drop or fill them first")
        return self.uniques[self.codes]

    def distinct(self, symbols: SymbolTable, name: str) -> tuple:
        """As ``distinct_text``: the dictionary's values that rows read, and each row's index among them."""
        self.values(name)  # (nulls refused)
        used = np.zeros(len(self.uniques), bool)
        used[self.codes] = True
        try:  # (a value no row reads, an Arrow dictionary's spare entry, does not count)
            uniq, _ = symbols.distinct(self.uniques[used])
        except SchemaError:
            bad = [(int(np.flatnonzero(self.codes == k)[0]), w)
                   for k, w in enumerate(map(text_problem, self.uniques.tolist())) if w is not None and used[k]]
            i, why = min(bad)
            raise SchemaError(f"column {name!r} is str but row {i} holds {why}") from None
        where = np.full(len(self.uniques), -1, np.int64)
        where[used] = np.arange(int(used.sum()))
        return self.uniques[used], where[self.codes]


def _check_names(names, schema: Schema, what: str):
    dup = sorted({str(n) for n in names if list(names).count(n) > 1})
    if dup:
        raise SchemaError(f"{what} has several columns named {', '.join(map(repr, dup))} (schema "
                          f"{list(schema.names)}); rename or drop the extra ones first")
    missing = [n for n in schema.names if n not in names]
    extra = [n for n in names if n not in schema.names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if extra:
            parts.append(f"unexpected columns {extra}")
        raise SchemaError(f"{what} does not match the schema {list(schema.names)}: " + "; ".join(parts))


def is_pandas(obj) -> bool:
    """Whether ``obj`` is a pandas object (or of a subclass of one): labelled by an index."""
    return any(k.__module__.startswith("pandas") for k in type(obj).__mro__)


def _mapping_column(c, name: str, dtype: str):
    """One column of a mapping as ``encode_column`` takes it. Lists stay lists, so that Python ints are
    converted exactly (NumPy would make floats of a list mixing ints beyond int64 with negative ones); a
    pandas Series, Index or array is read as a DataFrame's column is (its NA a null, not the NaN NumPy makes of
    it); asanyarray keeps a masked array's mask (refused where it hides values)."""
    if isinstance(c, (list, tuple, Coded)):
        return c
    if _is_arrow_array(c):  # (its nulls refused, not read as the NaN NumPy makes of them)
        return _arrow_column(c, name, dtype, "the dict")
    if is_pandas(c):
        # (imported here, not read from sys.modules: another thread, such as the kernel warm-up's, may be
        # importing pandas right now, and the module it lists then is half made)
        import pandas as pd
        if isinstance(c, (pd.Series, pd.Index, pd.api.extensions.ExtensionArray)):
            return _pandas_column(pd.Series(c, name=name, copy=False), dtype)
    return np.asanyarray(c)


def _check_series_aligned(mapping: dict):
    """Columns are read by position; pandas Series given with different indexes would pair rows that
    pandas (``pd.DataFrame(mapping)``) aligns by label, so they are refused rather than silently paired."""
    series = [(str(k), v.index) for k, v in mapping.items() if hasattr(v, "index") and hasattr(v, "iloc")]
    for name, index in series[1:]:
        if not index.equals(series[0][1]):
            raise SchemaError(f"columns {series[0][0]!r} and {name!r} of the dict are pandas Series with different "
                              f"indexes; kpgnb reads columns by position: pass pd.DataFrame(...) of them to align "
                              f"them by index, or reset their indexes")


def _from_mapping(mapping, schema: Schema, symbols, what: str, n: int | None = None) -> np.ndarray:
    _check_names(list(mapping), schema, what)
    cols = [_mapping_column(mapping[n], n, d) for n, d in zip(schema.names, schema.dtypes)]
    for n, c in zip(schema.names, cols):
        if isinstance(c, np.ndarray) and c.ndim != 1:
            raise SchemaError(f"column {n!r} of {what} must be a sequence of values (one per row), got "
                              + (f"the single value {c.item()!r}" if c.ndim == 0 else f"an array of shape {c.shape}"))
    lengths = {len(c) for c in cols}
    if len(lengths) > 1:
        raise SchemaError(f"columns of {what} have different lengths: "
                          + ", ".join(f"{n}={len(c)}" for n, c in zip(schema.names, cols)))
    return _encode_all(cols, schema, symbols, n)


def _from_tuples(rows, schema: Schema, symbols) -> np.ndarray:
    rows = list(rows)
    k = len(schema)
    if k == 1:
        for i, r in enumerate(rows):
            if isinstance(r, (tuple, list)) and len(r) != 1:
                raise SchemaError(f"row {i} has {len(r)} values; expected 1 value for column {schema.names[0]!r} "
                                  f"(a row is a 1-tuple or the value itself)")
        rows = [r[0] if isinstance(r, (tuple, list)) else r for r in rows]
        return _encode_all([object_column(rows) if schema.dtypes[0] == "str" else rows], schema, symbols)
    rows = [r.tolist() if isinstance(r, np.ndarray) and r.ndim == 1 else r for r in rows]  # (list(arr2d))
    for i, r in enumerate(rows):
        if not isinstance(r, (tuple, list)) or len(r) != k:
            got = f"{len(r)} values" if isinstance(r, (tuple, list)) else f"{type(r).__name__} {r!r}"
            raise SchemaError(f"row {i} has {got}; expected {k} values for columns {list(schema.names)}")
    cols = list(zip(*rows)) if rows else [()] * k
    return _encode_all([object_column(c) if d == "str" else list(c) for c, d in zip(cols, schema.dtypes)],
                       schema, symbols, len(rows))


def _encode_all(cols, schema: Schema, symbols, n: int | None = None) -> np.ndarray:
    """The columns as a ``k x n`` matrix; ``n`` counts the rows of a schema of no columns (``()`` rows).
    str columns are interned last, once every column passed: refused rows leave no strings behind."""
    n = len(cols[0]) if cols else (n or 0)
    data = np.empty((len(schema), n), np.int64)
    texts = []
    for i, (c, name, dtype) in enumerate(zip(cols, schema.names, schema.dtypes)):
        try:
            if dtype == "str":
                texts.append((i, c.distinct(symbols, name) if isinstance(c, Coded) else
                              distinct_text(c, symbols, name)))
            else:
                data[i] = c.encode(dtype, symbols, name) if isinstance(c, Coded) else \
                    encode_column(c, dtype, symbols, name)
        except SchemaError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise SchemaError(f"column {name!r} ({dtype}): {e}") from None
    for i, (uniq, inverse) in texts:
        data[i] = symbols.intern_distinct(uniq)[inverse]
    return data


DIFF_LIMIT = MAX_MULT  # a diff's magnitude: sums of a few stay in int64 (|multiplicity| beyond this is an error)


def diffs_array(diffs, n: int) -> np.ndarray:
    """The diffs of ``n`` rows as int64: one integer (every row) or one per row, each of magnitude
    below 2**62. Anything else (fractions, NaN, infinities, strings, None, out-of-range numbers) is
    refused with the row it concerns, before any row is taken."""
    if hasattr(diffs, "sparkSession") and callable(getattr(diffs, "toArrow", None)):  # (NumPy would make it one value)
        raise SchemaError("diffs cannot be a Spark DataFrame (two frames' rows have no order to pair them by): "
                          "give the diffs as a column of the rows' own frame, e.g. t = sdf.toArrow(); "
                          "inp.update(t.drop_columns(['d']), t.column('d')), or feed the frame through "
                          "kp.spark.BatchFeeder(inp, diff_col='d') / kp.spark.follow(..., diff_col='d')")
    if isinstance(diffs, np.ma.MaskedArray) and np.ma.is_masked(diffs):  # (NumPy would read what is masked)
        i = int(np.flatnonzero(np.ma.getmaskarray(diffs))[0])
        raise SchemaError(f"diffs must be integers, but row {i} has a masked (null) diff")
    if is_pandas(diffs) and getattr(diffs, "ndim", 0) == 1 and callable(getattr(diffs, "isna", None)):
        na = np.asarray(diffs.isna()).reshape(-1)  # (a nullable column's NA; a NumPy float's NaN is a value)
        if na.any() and not (isinstance(diffs.dtype, np.dtype) and diffs.dtype.kind == "f"):
            raise SchemaError(f"diffs must be integers, but row {int(np.flatnonzero(na)[0])} has a null diff")
    nulls = getattr(diffs, "null_count", None)  # an Arrow array or chunked array (NumPy would make a null NaN)
    if isinstance(nulls, int) and nulls > 0 and callable(getattr(diffs, "is_null", None)):
        na = np.asarray(diffs.is_null(), dtype=bool).reshape(-1)
        raise SchemaError(f"diffs must be integers, but row {int(np.flatnonzero(na)[0])} has a null diff")
    try:
        d = np.asarray(diffs)
    except (TypeError, ValueError, OverflowError) as e:
        raise SchemaError(f"diffs must be integers, got {diffs!r} ({e})") from None
    if d.ndim == 0:
        d = np.full(n, d)
    if d.shape != (n,):
        raise SchemaError(f"diffs must be one integer per row ({n}), got shape {d.shape}")
    if d.dtype.kind == "O":  # Python ints beyond int64, or mixed objects: each checked as a number
        bad = [i for i, x in enumerate(d.tolist())
               if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or abs(int(x)) >= DIFF_LIMIT]
        if bad:
            raise SchemaError(f"diffs must be integers of magnitude below 2**62, but row {bad[0]} has "
                              f"diff {d[bad[0]]!r}")
        return np.array([int(x) for x in d.tolist()], dtype=np.int64)
    if d.dtype.kind not in "iuf":
        raise SchemaError(f"diffs must be integers, got {d.dtype}")
    if d.dtype.kind == "f" and not whole(d).all():
        i = int(np.flatnonzero(~whole(d))[0])
        raise SchemaError(f"diffs must be integers, but row {i} has diff {d[i].item()!r}")
    if d.dtype.kind == "u":
        big = d >= np.uint64(DIFF_LIMIT)
    elif d.dtype.kind == "i":  # (compared as ints: 2**62 - 1 as a float64 rounds up to 2**62)
        big = (d >= DIFF_LIMIT) | (d <= -DIFF_LIMIT)
    else:
        big = np.abs(d) >= float(DIFF_LIMIT)
    if big.any():
        i = int(np.flatnonzero(big)[0])
        raise SchemaError(f"diffs must be integers of magnitude below 2**62, but row {i} has diff {d[i].item()!r}")
    return np.array(d, dtype=np.int64)  # a copy of our own: writeable and contiguous (one kernel signature)
