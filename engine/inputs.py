"""Turning user rows (lists of tuples, dicts of arrays, pandas, Arrow or Spark DataFrames) into the
engine's int64 column matrix, with errors that say which column or row is wrong and what was expected.
No pandas, Arrow or Spark import: those are recognised by duck typing."""
from __future__ import annotations

import numpy as np

from .columns import Schema, SchemaError, SymbolTable, encode_column


def rows_to_columns(rows, schema: Schema, symbols: SymbolTable) -> np.ndarray:
    """A ``k x n`` int64 matrix for the rows, in schema column order."""
    if hasattr(rows, "toArrow") and callable(rows.toArrow):  # a Spark DataFrame (Spark 4)
        rows = rows.toArrow()
    if hasattr(rows, "column_names") and hasattr(rows, "column"):  # an Arrow Table or RecordBatch
        cols = {name: rows.column(name) for name in rows.column_names}
        return _from_mapping({n: _arrow_to_numpy(c) for n, c in cols.items()}, schema, symbols, "the Arrow table")
    if hasattr(rows, "columns") and hasattr(rows, "iloc"):  # a pandas DataFrame
        return _from_mapping({str(c): rows[c].to_numpy() for c in rows.columns}, schema, symbols, "the DataFrame")
    if isinstance(rows, dict):
        return _from_mapping(rows, schema, symbols, "the dict")
    if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
        keys = [k for k in rows[0]]
        for i, r in enumerate(rows):
            if set(r) != set(keys):
                raise SchemaError(f"record {i} has keys {sorted(r)}; record 0 has {sorted(keys)}")
        return _from_mapping({k: [r[k] for r in rows] for k in keys}, schema, symbols, "the records")
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        if rows.shape[1] != len(schema):
            raise SchemaError(f"a 2-D array of rows needs {len(schema)} columns {list(schema.names)}, "
                              f"got shape {rows.shape}")
        return _encode_all([rows[:, i] for i in range(len(schema))], schema, symbols)
    return _from_tuples(rows, schema, symbols)


def _arrow_to_numpy(col):
    arr = col.to_numpy(zero_copy_only=False) if hasattr(col, "to_numpy") else np.asarray(col)
    return arr


def _from_mapping(mapping, schema: Schema, symbols, what: str) -> np.ndarray:
    missing = [n for n in schema.names if n not in mapping]
    extra = [n for n in mapping if n not in schema.names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if extra:
            parts.append(f"unexpected columns {extra}")
        raise SchemaError(f"{what} does not match the schema {list(schema.names)}: " + "; ".join(parts))
    # lists stay lists, so that Python ints are converted exactly (NumPy would make floats of a list mixing
    # ints beyond int64 with negative ones)
    cols = [mapping[n] if isinstance(mapping[n], (list, tuple)) else np.asarray(mapping[n]) for n in schema.names]
    lengths = {len(c) for c in cols}
    if len(lengths) > 1:
        raise SchemaError(f"columns of {what} have different lengths: "
                          + ", ".join(f"{n}={len(c)}" for n, c in zip(schema.names, cols)))
    return _encode_all(cols, schema, symbols)


def _from_tuples(rows, schema: Schema, symbols) -> np.ndarray:
    rows = list(rows)
    k = len(schema)
    if k == 1:
        rows = [r[0] if isinstance(r, (tuple, list)) and len(r) == 1 else r for r in rows]
        return _encode_all([np.array(rows, dtype=object) if schema.dtypes[0] == "str" else rows], schema, symbols)
    for i, r in enumerate(rows):
        if not isinstance(r, (tuple, list)) or len(r) != k:
            got = f"{len(r)} values" if isinstance(r, (tuple, list)) else f"{type(r).__name__} {r!r}"
            raise SchemaError(f"row {i} has {got}; expected {k} values for columns {list(schema.names)}")
    cols = list(zip(*rows)) if rows else [()] * k
    return _encode_all([np.array(c, dtype=object) if d == "str" else list(c) for c, d in zip(cols, schema.dtypes)],
                       schema, symbols)


def _encode_all(cols, schema: Schema, symbols) -> np.ndarray:
    n = len(cols[0]) if cols else 0
    data = np.empty((len(schema), n), np.int64)
    for i, (c, name, dtype) in enumerate(zip(cols, schema.names, schema.dtypes)):
        try:
            data[i] = encode_column(c, dtype, symbols, name)
        except SchemaError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise SchemaError(f"column {name!r} ({dtype}): {e}") from None
    return data


def diffs_array(diffs, n: int) -> np.ndarray:
    d = np.asarray(diffs)
    if d.ndim == 0:
        d = np.full(n, int(d), np.int64)
    if d.shape != (n,):
        raise SchemaError(f"diffs must be one integer per row ({n}), got shape {d.shape}")
    if d.dtype.kind == "u" and (d > np.uint64(2 ** 63 - 1)).any():
        i = int(np.flatnonzero(d > np.uint64(2 ** 63 - 1))[0])
        raise SchemaError(f"diffs must fit in int64, but row {i} has diff {d[i].item()}")
    if d.dtype.kind not in "iu":
        if d.dtype.kind == "f" and np.all(np.floor(d) == d):
            d = d.astype(np.int64)
        else:
            raise SchemaError(f"diffs must be integers, got {d.dtype}")
    return np.array(d, dtype=np.int64)  # a copy of our own: writeable and contiguous (one kernel signature)
