"""What Spark's Python workers run for ``kpgnb.spark.run`` (kpgnb/spark_backend.py): the user functions of
map, filter, flat_map, enter_at, threshold and reduce over Arrow batches. Pickled by the driver; kept apart
so that a worker imports NumPy, pyarrow and the engine's column checks only, not the engine."""
from __future__ import annotations

import numpy as np

from .engine.columns import (Schema, SymbolTable, check_rounds, decode_column, encode_outputs, filter_mask,
                             flat_map_how, flat_map_rows, threshold_counts)
from .engine.errors import KpgnbError, SchemaError

D = "_d"           # the multiplicity column
RND = "_round"     # enter_at: the round a row enters at
MARK = "[kpgnb] "  # how an error raised in a worker is found again in the driver's exception
SCHEMA_MARK = "[kpgnb schema] "  # likewise for bad input data (a null), raised again as a SchemaError


def c(i: int) -> str:
    """The positional name of column i."""
    return f"_c{i}"


def cols(n: int) -> list:
    return [c(i) for i in range(n)]


def _arrow_col(col, dtype):
    """An Arrow column as the NumPy array a user function sees."""
    arr = col.to_numpy(zero_copy_only=False)
    if dtype == "str":
        return arr.astype(object)
    return arr if arr.flags.writeable else arr.copy()  # writable, as the engine's are (NumPy's += works)


def arrow_type(dtype: str):
    """The Arrow type of an engine dtype."""
    import pyarrow as pa
    return {"int64": pa.int64, "float64": pa.float64, "bool": pa.bool_, "str": pa.string}[dtype]()


def _arrow_array(values, dtype):
    import pyarrow as pa
    return pa.array(values, type=arrow_type(dtype))


def _fail(label, err):
    raise KpgnbError(f"{MARK}{label}: {type(err).__name__}: {err}") from err


def _encode(result, schema: Schema, n: int, who: str, inferred: bool) -> list:
    """The engine's checks of a user function's output columns, then the columns in their dtypes."""
    symbols = SymbolTable()
    data = encode_outputs(result, schema, n, symbols, who, inferred)
    return [decode_column(data[i], d, symbols) for i, d in enumerate(schema.dtypes)]


class UserBatches:
    """The ``mapInArrow`` function of a map, filter, flat_map, enter_at or delay operator (the last two
    append each row's round)."""

    def __init__(self, op, label: str):
        self.kind = op.kind
        self.fn = op.fn
        self.params = op.params
        self.in_schema = op.in_schema
        self.out_schema = getattr(op, "out_schema", None)
        self.inferred = getattr(op, "inferred", False)
        self.repeat = getattr(op, "repeat", None)
        self.label = label

    def __call__(self, batches):
        import pyarrow as pa
        names = list(self.in_schema.names)
        for rb in batches:
            try:
                n = rb.num_rows
                args = {nm: _arrow_col(rb.column(i), self.in_schema.dtypes[i]) for i, nm in enumerate(names)
                        if self.params is None or nm in self.params}
                d = rb.column(len(names))
                with np.errstate(all="ignore"):
                    res = self.fn(**args)
                if self.kind == "filter":
                    yield rb.filter(pa.array(filter_mask(res, n)))  # the engine's check
                elif self.kind in ("enter_at", "delay"):
                    rounds = check_rounds(res, n, self.kind)  # the engine's check
                    yield pa.RecordBatch.from_arrays(list(rb.columns) + [pa.array(rounds)],
                                                     names=list(rb.schema.names) + [RND])
                elif self.kind == "map":
                    out = _encode(res, self.out_schema, n, "the map function", self.inferred)
                    yield self._batch(out, d)
                else:  # flat_map
                    if not (isinstance(res, tuple) and len(res) == 2) or not isinstance(res[0], dict):
                        raise SchemaError("the flat_map function must return (dict of columns, index or counts)")
                    cols_out, how = res
                    how = flat_map_how(how)
                    lengths = {len(np.atleast_1d(v)) for v in cols_out.values()}
                    idx, learned = flat_map_rows(self.repeat, how, n, max(lengths) if lengths else 0)
                    if learned is not None:
                        self.repeat = learned
                    out = _encode(cols_out, self.out_schema, len(idx), "the flat_map function", self.inferred)
                    yield self._batch(out, d.take(pa.array(idx)))
            except Exception as err:  # noqa: BLE001 - named after the operator, read back by the driver
                _fail(self.label, err)

    def _batch(self, columns, d):
        import pyarrow as pa
        arrays = [_arrow_array(x, t) for x, t in zip(columns, self.out_schema.dtypes)] + [d]
        return pa.RecordBatch.from_arrays(arrays, names=cols(len(columns)) + [D])


class Threshold:
    """Per Arrow batch of (keys, net count): the multiplicity the threshold function gives each count."""

    def __init__(self, fn, label: str):
        self.fn = fn
        self.label = label

    def __call__(self, batches):
        import pyarrow as pa
        for rb in batches:
            try:
                cnt = rb.column(rb.num_columns - 1).to_numpy()
                out = threshold_counts(self.fn, cnt)
                yield pa.RecordBatch.from_arrays(list(rb.columns[:-1]) + [pa.array(out)],
                                                 names=list(rb.schema.names))
            except Exception as err:  # noqa: BLE001
                _fail(self.label, err)


class UserReduce:
    """The ``applyInArrow`` function of a user reduce: one group's consolidated rows (keys, values, net
    count), sorted by value as the engine passes them (strings as ids that follow their order), to
    ``fn(values, counts)``; its rows come back with the group's keys."""

    def __init__(self, fn, user_float: bool, kk: int, in_dtypes, out_dtypes, label: str):
        self.fn = fn
        self.kk = kk
        self.in_dtypes = in_dtypes
        self.out_dtypes = out_dtypes
        self.user_float = user_float
        self.label = label

    def __call__(self, table):
        import pyarrow as pa
        try:
            kk, kv = self.kk, len(self.in_dtypes)
            n = table.num_rows
            raw = [table.column(kk + j).to_numpy(zero_copy_only=False) for j in range(kv)]
            # strings as Python objects: NumPy's fixed-width str drops trailing NULs ("a\x00" is "a")
            text = [r.astype(object) for r, dt in zip(raw, self.in_dtypes) if dt == "str"]
            strings = np.unique(np.concatenate(text)) if text else np.zeros(0, object)
            columns = [np.searchsorted(strings, r.astype(object)) if dt == "str" else r
                       for r, dt in zip(raw, self.in_dtypes)]
            kind = np.float64 if self.user_float else np.int64
            order = np.lexsort([np.asarray(x, kind) for x in columns[::-1]]) if kv else np.arange(n)
            vals = np.empty((n, kv), kind)
            for j, x in enumerate(columns):
                vals[:, j] = np.asarray(x, kind)[order]
            counts = table.column(kk + kv).to_numpy().astype(np.int64)[order]
            out, cnt = self.fn(vals, counts)
            out, cnt = np.asarray(out), np.asarray(cnt, np.int64)
            p = len(cnt)
            arrays = [table.column(i).take(pa.array(np.zeros(p, np.int64))) for i in range(kk)]
            for j, dt in enumerate(self.out_dtypes):
                col = out[:, j]
                if dt == "str":
                    ids = col.astype(np.int64)
                    if p and (ids.min() < 0 or ids.max() >= len(strings)):
                        raise SchemaError(f"output column {j} holds strings, but the reduce function returned "
                                          f"ids that are none of its group's strings")
                    col = strings[ids].astype(object)
                else:
                    col = col.astype({"bool": bool, "int64": np.int64, "float64": np.float64}[dt])
                arrays.append(_arrow_array(col, dt))
            arrays.append(pa.array(cnt))
            return pa.Table.from_arrays(arrays, names=cols(kk + len(self.out_dtypes)) + [D])
        except Exception as err:  # noqa: BLE001
            _fail(self.label, err)
