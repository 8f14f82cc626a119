"""Views: maintained results, read from any thread while the engine keeps them current.

Every read goes through one published snapshot of the view's trace, so it sees whole epochs only.
``follow()`` and ``subscribe(fn)`` deliver the view's contents once and then every completed epoch's
changes, registered on the scheduler thread so that nothing is missed or repeated, whenever a follower
arrives.
"""
from __future__ import annotations

import contextvars
import sys
import threading
import time
import warnings
from collections import deque

import numpy as np

from .columns import check_flag, check_timeout, decode_column, is_int
from .commands import Follow
from .cursor import accumulate_batches
from .errors import ArgumentTypeError, CompactedError, DataflowError, EngineError, KpgnbError, UsageError, not_copyable
from .lattice import Antichain
from .scope import epoch_of


class View:
    """A maintained result, readable from the notebook while the engine keeps it current."""

    # how a reader keeps more history, as a compacted read advises it (a front end that makes views for
    # its users, such as eng.datalog, names its own knob on its views)
    history_advice = "with .view(name, history=...)"

    def __reduce__(self):  # (pickle, copy.copy, copy.deepcopy)
        raise not_copyable(self)

    def __init__(self, engine, dataflow: str, name: str, op, schema):
        self.engine = engine
        self.dataflow = dataflow
        self.name = name
        self.op = op
        self.schema = schema
        self.serial = None  # which install of its dataflow it belongs to (set when installed)
        # why its dataflow let go of it: the error it failed or was cancelled with, or a sentence (dropped,
        # replaced); set by the scheduler before it releases the trace, so a reader that finds the trace
        # gone knows why at once
        self.end_reason: BaseException | str | None = None

    def live_trace(self):
        """The trace the view reads, or None once its dataflow let go of it (see ``released``)."""
        h = self.op.handle
        return h.live_trace() if h is not None else None

    @property
    def frontier(self) -> Antichain:
        """Every epoch before this frontier is final in the view."""
        t = self.live_trace()
        return t.snapshot.upper if t is not None else Antichain()

    @property
    def released(self) -> bool:
        """Whether the view's dataflow let go of it (dropped, failed or cancelled)."""
        return self.live_trace() is None

    @property
    def epoch(self):
        """The first epoch not yet final (None when every input is closed, or once the view is ``released``)."""
        return epoch_of(self.frontier)

    def _check(self, snap=None) -> bool:
        """Raise if the view cannot be read: the engine is closed, the view is not installed, its dataflow
        ended (``end_reason``, whatever the snapshot), or ``snap`` (default the latest snapshot) shows it
        failed, cancelled, dropped or replaced. False when the trace is gone and neither says why yet."""
        if self.engine.closed:
            raise EngineError("the engine is closed")
        if self.op.handle is None:
            builder = getattr(self.op.graph, "builder", None)
            if builder is not None and builder.state == "discarded":
                why = "" if builder.error is None else f": {builder.error}"
                raise UsageError(f"view {self.name!r} was never installed: dataflow {self.dataflow!r}'s block "
                                 f"ended without installing it{why}")
            raise UsageError(f"view {self.name!r} is not installed yet (the dataflow block has not finished)")
        if self.end_reason is not None:
            self._released()
        info = (snap or self.engine.snapshot()).dataflows.get(self.dataflow)
        if info is not None and info.serial == self.serial:
            if info.error is not None:
                raise_failure(self.dataflow, info.error)
            if any(n == self.name for n, _ in info.views):
                return self.live_trace() is not None
        raise UsageError(f"view {self.name!r}: dataflow {self.dataflow!r} has been dropped")

    def check(self, snap=None):
        """Raise why the view cannot be read (the engine is closed; its dataflow failed, was cancelled,
        dropped or replaced): what the scheduler recorded when it let go of the view, else what the engine
        snapshot ``snap`` (default: the latest) shows."""
        if not self._check(snap):
            self._released()

    def _released(self):
        """Raise why the view's trace is gone."""
        if self.engine.closed:
            raise EngineError("the engine is closed")
        why = self.end_reason
        if isinstance(why, BaseException):
            raise_failure(self.dataflow, why)
        raise UsageError(f"view {self.name!r}: {why or f'dataflow {self.dataflow!r} has been dropped'}")

    def _snapshot(self):
        """The view's trace snapshot, or raise why the view cannot be read."""
        trace = self.live_trace() if self._check() else None
        if trace is None:
            self._released()
        return trace.snapshot

    def _accumulate(self, at, snap):
        try:
            return self.op.handle.accumulate(at, snapshot=snap)
        except UsageError:
            if self.live_trace() is None:  # released while being read
                self._released()
            raise

    def columns(self, at=None, diffs: bool = False) -> dict:
        """The view's rows as a dict of NumPy arrays (decoded), as of epoch ``at`` (default: latest)."""
        return self._read(at, diffs)[0]

    def _read_raw(self, at, diffs):
        """The engine's int64 column matrix, the multiplicities (rows repeated unless ``diffs``) and the
        first epoch the rows do not include (None: none is missing, every input closed)."""
        check_flag(diffs, f"view {self.name!r}: diffs")
        snap = self._snapshot()
        if at is not None:
            if not is_int(at):
                raise ArgumentTypeError(f"view {self.name!r}: at= takes an epoch (an int), got {at!r}")
            at = int(at)
            if at < 0:  # (no history holds it: a CompactedError, as for any epoch it does not hold)
                raise CompactedError(f"view {self.name!r} cannot be read at epoch {at}: epochs are numbered "
                                     f"from 0, so no history holds a negative one")
            up = snap.upper
            if up.elements and at >= epoch_of(up):
                raise UsageError(f"epoch {at} is not final yet in view {self.name!r} (its frontier is {up}); "
                                 f"call eng.wait(view) or read an earlier epoch")
        upto = epoch_of(snap.upper) if at is None else at + 1
        if at is None and self._unborn(snap):
            return np.zeros((len(self.schema.names), 0), np.int64), np.zeros(0, np.int64), 0
        if at is not None and self.op.born > 0 and at < self.op.born:
            raise CompactedError(f"view {self.name!r} cannot be read at epoch {at}: dataflow {self.dataflow!r} "
                                 f"started from its inputs as of epoch {self.op.born} and has no answer for "
                                 f"earlier epochs")
        try:
            keys, vals, cnt = self._counted(at, snap)
        except CompactedError as e:
            raise CompactedError(f"view {self.name!r} cannot be read at epoch {at}: {e}. Keep more history "
                                 f"{self.history_advice}") from None
        data = np.concatenate([keys, vals], axis=0)
        if not diffs:
            if (cnt < 0).any():
                raise UsageError(f"view {self.name!r} holds rows with negative multiplicity; read it with "
                                 f"diffs=True")
            if not (cnt == 1).all():
                if cnt.sum(dtype=np.float64) > MAX_LISTED:
                    raise UsageError(f"view {self.name!r} holds {cnt.sum(dtype=np.float64):.4g} rows counting "
                                     f"multiplicity (a row {int(cnt.max())} times), more than can be listed one by "
                                     f"one; read it with diffs=True (each row once, with its multiplicity)")
                idx = np.repeat(np.arange(len(cnt)), cnt)
                data, cnt = data[:, idx], cnt[idx]
        return data, cnt, upto

    def _unborn(self, snap) -> bool:
        """Whether the view holds no complete epoch yet: a dataflow installed late answers from the epoch its
        imports start at (``born``) on, and until that epoch is final what its trace holds is a part of it
        (e.g. rows of an input that is behind the others)."""
        upto = epoch_of(snap.upper)
        return upto is not None and upto <= self.op.born

    def _read(self, at, diffs):
        """(columns as columns() gives them, number of rows, the first epoch not included): the count matters
        for a view of no columns."""
        data, cnt, upto = self._read_raw(at, diffs)
        out = self._decode(data)
        if diffs:
            out[self.schema.free("diff")] = cnt
        return out, len(cnt), upto

    def _decode(self, data) -> dict:
        return {n: decode_column(data[i], d, self.engine.symbols)
                for i, (n, d) in enumerate(zip(self.schema.names, self.schema.dtypes))}

    def to_pandas(self, at=None, diffs: bool = False):
        """The view as a pandas DataFrame (rows repeated by multiplicity, or with a ``diff`` column: ``diff_``
        when the view has a column named diff). A view
        with no columns (e.g. ``threshold(by=[], ...)``) gives a frame of no columns and one row per row.
        ``df.attrs["epoch"]`` is the first epoch the rows do not include (None when every input is closed),
        read from the same snapshot as the rows: ``view.epoch`` read separately may already be later."""
        import pandas as pd
        out, n, upto = self._read(at, diffs)
        df = pd.DataFrame(out, index=pd.RangeIndex(n))
        df.attrs["epoch"] = upto
        return df

    def to_arrow(self, at=None, diffs: bool = False):
        """The view as a pyarrow Table (int64, float64 -> double, bool, str -> string; rows repeated by
        multiplicity, or with an int64 ``diff`` column). Strings are built from the distinct ids, not row by
        row; an empty view keeps its column types."""
        data, cnt, _ = self._read_raw(at, diffs)
        return arrow_table(data, self.schema, self.engine.symbols, {self.schema.free("diff"): cnt} if diffs else None,
                           len(cnt))

    def to_spark(self, spark, at=None, diffs: bool = False):
        """The view as a Spark DataFrame of ``spark`` (a SparkSession), through Arrow: columns long, double,
        boolean and string (an empty view keeps them)."""
        if not callable(getattr(spark, "createDataFrame", None)):  # (duck typed: classic or Spark Connect)
            raise ArgumentTypeError(f"view {self.name!r}: to_spark(spark) takes a SparkSession (kp.spark.session() "
                                    f"makes a local one), not {type(spark).__name__}")
        return spark.createDataFrame(self.to_arrow(at, diffs))

    def __len__(self):
        """The number of rows ``to_pandas()`` gives (each row repeated by its multiplicity); a view holding
        rows of negative multiplicity has no such count, and says so as ``to_pandas()`` does."""
        snap = self._snapshot()
        if self._unborn(snap):
            return 0
        cnt = self._counted(None, snap)[2]
        if (cnt < 0).any():
            raise UsageError(f"view {self.name!r} holds rows with negative multiplicity, so it has no number of "
                             f"rows; count them with view.to_pandas(diffs=True)")
        total = _total(cnt)
        if total > sys.maxsize:
            raise OverflowError(f"view {self.name!r} holds {total} rows (counting multiplicities), more than "
                                f"len() can return; read them with view.to_pandas(diffs=True)")
        return total

    def _counted(self, at, snap):
        """``_accumulate``, a multiplicity summed over the epochs to 2**62 or more failing as the dataflow
        would (a DataflowError with the OverflowError cause), not as a bare error of the read."""
        try:
            return self._accumulate(at, snap)
        except OverflowError as e:
            raise DataflowError(f"view {self.name!r} of dataflow {self.dataflow!r}: {e}") from e

    # -- following ------------------------------------------------------------------------------------
    def follow(self, timeout: float | None = None, progress: bool = False) -> "Follower":
        """An iterator of change DataFrames (the view's columns, ``time`` and ``diff``, named ``time_`` and
        ``diff_`` where the view has columns of those names: ``follower.time_col``/``diff_col``): first the contents
        at the current frontier (``time`` = its last complete epoch), then each completed epoch's changes in
        order (several epochs in one frame for a reader that fell behind). It ends when the view is dropped
        or every input is closed; it raises if the dataflow fails. ``timeout`` bounds each wait for the next
        frame (TimeoutError: no change within it). ``progress=True`` also yields an empty frame when epochs
        complete that change nothing in the view, so a loop that reads ``follower.epoch`` after each frame
        sees every epoch pass (and ``timeout`` then bounds the wait for the next epoch)."""
        self._check()
        check_timeout(timeout, f"view {self.name!r}: follow")
        f = Follower(self, timeout, check_flag(progress, f"view {self.name!r}: follow(progress=)"))
        self.engine.call(Follow(self, f))
        return f

    def subscribe(self, fn) -> "Subscription":
        """Call ``fn(changes)`` (a DataFrame as ``follow`` yields) for the contents and then every completed
        epoch's changes, on a thread of the subscription's own; ``.close()`` stops it."""
        if not callable(fn):
            raise ArgumentTypeError(f"view {self.name!r}: subscribe(fn) takes a function of a changes DataFrame, "
                                    f"got {type(fn).__name__} {fn!r}")
        return Subscription(self.follow(), fn)

    def __repr__(self):
        return f"View({self.name!r} in {self.dataflow!r}, {self.schema}, frontier={self.frontier})"

    HEAD = 20  # rows a notebook rendering shows

    _UNREAD = object()

    def summary(self, epoch=_UNREAD) -> str:
        """One line for a notebook: dataflow, frontier, rows and the latency of the last update. ``epoch``:
        the one the rows shown were read at (``df.attrs["epoch"]``), so the line says what they are."""
        info = self.engine.snapshot().dataflows.get(self.dataflow)
        e = self.epoch if epoch is View._UNREAD else epoch
        state = "released (dropped, failed or cancelled)" if self.released else \
            "all inputs closed" if e is None else f"final before epoch {e}"
        parts = [f"view {self.name!r} of dataflow {self.dataflow!r}", state]
        if info is not None and info.latency_s is not None:
            parts.append(f"last update {_duration(info.latency_s)}")
        return " · ".join(parts)

    def head(self, k: int | None = None) -> tuple:
        """(the first ``k`` rows in sorted order as a DataFrame, the row count): what a notebook shows
        (``HEAD`` rows by default), the same for the same contents whatever the workers' order. The head's
        ``attrs["epoch"]`` is the epoch the rows were read at, as ``to_pandas`` says."""
        k = self.HEAD if k is None else k
        if not is_int(k) or k < 0:
            raise (UsageError if is_int(k) else ArgumentTypeError)(
                f"view {self.name!r}: head(k) takes a number of rows k >= 0, got {k!r}")
        df = self.to_pandas(diffs=True)  # (distinct rows: a multiplicity of 2**61 is not repeated)
        diff = self.schema.free("diff")
        cnt = df[diff].to_numpy()
        if (cnt < 0).any():
            raise UsageError(f"view {self.name!r} holds rows with negative multiplicity; read it with diffs=True")
        head = _sorted_head(df, k)
        head = head.loc[head.index.repeat(np.minimum(head[diff].to_numpy(), k))].head(k).drop(columns=[diff])
        head = head.reset_index(drop=True)
        head.attrs["epoch"] = df.attrs.get("epoch")
        return head, _total(cnt)

    def _render(self):
        """(summary, the first rows in sorted order as a DataFrame, row count), or (summary, None, error
        text). Sorted so that the same contents always render the same, whatever the workers' order."""
        try:
            head, n = self.head()
        except Exception as e:  # noqa: BLE001 - rendering must not raise
            return f"view {self.name!r}", None, f"{type(e).__name__}: {e}"
        return f"{self.summary(head.attrs.get('epoch'))} · {n} row{'' if n == 1 else 's'}", head, n

    def _repr_pretty_(self, p, cycle):
        head, df, n = self._render()
        if df is None:
            p.text(f"{head}: {n}")
            return
        if not len(df.columns):  # (pandas would show its rows as "Empty DataFrame")
            p.text(f"{head}\n{_no_columns(n)}")
            return
        more = f"\n... {n - len(df)} more rows" if n > len(df) else ""
        p.text(f"{head}\n{df.to_string(index=False) if len(df) else '(empty)'}{more}")

    def _repr_html_(self):
        import html
        head, df, n = self._render()
        if df is None:
            return f"<div><b>{html.escape(head)}</b>: {html.escape(n)}</div>"
        if not len(df.columns):
            return f"<div><b>{html.escape(head)}</b></div><div>{html.escape(_no_columns(n))}</div>"
        more = f"<div>&hellip; {n - len(df)} more rows</div>" if n > len(df) else ""
        return f"<div><b>{html.escape(head)}</b></div>" + df.to_html(index=False) + more


def _no_columns(n: int) -> str:
    """How a view of no columns shows its rows (each the empty row)."""
    return f"({n} row{'' if n == 1 else 's'} of no columns, each the empty row ())" if n else "(empty)"


def _total(cnt: np.ndarray) -> int:
    """The multiplicities summed exactly (an int64 sum of a few near 2**62 would wrap)."""
    return int(cnt.sum()) if cnt.sum(dtype=np.float64) < 2.0 ** 62 else int(cnt.astype(object).sum())


def _sorted_head(df, k: int):
    """The first k rows of ``df`` in sorted order without sorting all of it: they are among the rows whose
    first column is at most its k-th smallest value (ties included), usually a handful."""
    if not len(df.columns):
        return df.head(k)
    if len(df) > 4 * k:
        col = df[df.columns[0]]
        vals = col.to_numpy()
        kth = np.partition(vals, k - 1)[k - 1] if vals.dtype.kind in "iufb" else np.sort(col.unique())[
            min(k, col.nunique()) - 1]
        if kth == kth:  # not NaN (fewer than k numbers): then sort it all
            df = df[col <= kth]
    return df.sort_values(list(df.columns)).head(k)


def _duration(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def arrow_table(data: np.ndarray, schema, symbols, extra: dict | None = None, rows: int | None = None):
    """A pyarrow Table of engine columns (``data``: the k x n int64 matrix in ``schema`` order) and
    ``extra`` int64 columns. str columns are dictionary arrays of the distinct ids' strings, decoded by
    Arrow; a table of no columns keeps its row count."""
    import pyarrow as pa
    names, arrays = [], []
    for i, (n, d) in enumerate(zip(schema.names, schema.dtypes)):
        col = data[i]
        if d == "str":
            uniq, inv = np.unique(col, return_inverse=True)
            dictionary = pa.array(symbols.lookup(uniq), pa.string())
            arr = pa.DictionaryArray.from_arrays(pa.array(inv.reshape(-1).astype(np.int32)), dictionary)
            arr = arr.dictionary_decode()
        elif d == "float64":
            arr = pa.array(col.view(np.float64), pa.float64())
        elif d == "bool":
            arr = pa.array(col.astype(bool), pa.bool_())
        else:
            arr = pa.array(col, pa.int64())
        names.append(n)
        arrays.append(arr)
    for n, col in (extra or {}).items():
        names.append(n)
        arrays.append(pa.array(np.asarray(col, np.int64), pa.int64()))
    if not arrays:  # no columns: carry the row count through a column dropped afterwards
        n = 0 if rows is None else rows
        return pa.table({"_": pa.nulls(n)}).drop_columns(["_"])
    return pa.Table.from_arrays(arrays, names=names)


def decode_rows(data: np.ndarray, dtypes, symbols) -> np.ndarray:
    """A ``k x n`` matrix of engine columns (int64, ``dtypes`` their types) as the user's values: the
    same matrix when every column is int64, else one of the columns' common type (float64, bool, or
    objects for str and for columns of different types). Vectorized per column."""
    dtypes = tuple(dtypes)
    if all(d == "int64" for d in dtypes):
        return data
    kinds = set(dtypes)
    cols = [decode_column(data[i], d, symbols) for i, d in enumerate(dtypes)]
    dtype = {"float64": np.float64, "bool": bool}.get(next(iter(kinds)), object) if len(kinds) == 1 else object
    out = np.empty(data.shape, dtype)
    for i, c in enumerate(cols):
        out[i] = c
    return out


def rows_decoder(schema, kk: int, symbols):
    """``decode(keys, vals)`` for a trace whose ``kk`` key columns then values have ``schema``'s types
    (``decode_rows`` of each part), or None when every column is int64 (nothing to decode)."""
    dtypes = tuple(schema.dtypes)
    if all(d == "int64" for d in dtypes):
        return None
    kd, vd = dtypes[:kk], dtypes[kk:]
    return lambda keys, vals: (decode_rows(keys, kd, symbols), decode_rows(vals, vd, symbols))


def raise_failure(dataflow: str, error: BaseException):
    """Raise the error a dataflow ended with, as its own type when it is one of ours."""
    if isinstance(error, KpgnbError) and not isinstance(error, DataflowError):
        raise type(error)(str(error)) from error
    raise DataflowError(f"dataflow {dataflow!r} failed: {error}") from error


MAX_LISTED = 2 ** 32  # rows a read lists one by one (repeated by multiplicity) at most


class Follower:
    """The receiving end of ``View.follow``. The scheduler calls ``start``, ``deliver`` and ``end``;
    the consumer iterates. Decoding happens on the consumer's thread."""

    def __init__(self, view: View, timeout: float | None = None, progress: bool = False):
        self.view = view
        self.timeout = timeout
        self.progress = progress  # an empty frame for epochs that complete with no change (View.follow)
        # the columns each frame adds (``time_``/``diff_`` where the view has its own time or diff)
        self.time_col, self.diff_col = view.schema.free("time"), view.schema.free("diff")
        self.frontier = Antichain([(0,)])
        self._items: deque = deque()
        self._cond = threading.Condition()
        self._ended = False
        self._error: BaseException | None = None
        self._closed = False
        self._unborn = False  # started before the view's first answerable epoch was final
        self._complete = False  # the last frame is queued (every input closed): nothing can fail it now

    # scheduler side
    def start(self, snap):
        born = self.view.op.born
        last = epoch_of(snap.upper)
        if born and last is not None and last <= born:
            # installed late: no epoch before ``born`` has an answer, and ``born`` is not final yet; the
            # contents come with the append that makes it final (``deliver``)
            self._unborn = True
            return
        t = self.view.op.handle.trace
        keys, vals, cnt = accumulate_batches(snap.all_batches(), t.kk, t.kv, t.depth)
        if last is not None:
            epoch = max(last - 1, 0)
        else:  # every input closed: the contents are final from the last time anything changed on (noted
            epoch = max(self.view.op.last_change(), born)  # as it came: compaction may cancel it)
        self._put(("contents", np.concatenate([keys, vals], axis=0), cnt, epoch, snap.upper))

    def deliver(self, batches, lower, upper):
        if self._ended:
            # the view is gone, but the trace it read may live on (an input's or another dataflow's
            # arrangement) and still append: nothing after the end is the view's
            return
        parts = [b for b in batches if len(b)]
        if self._unborn:
            born, last = self.view.op.born, epoch_of(upper)
            if last is not None and last <= born:
                return  # (only epochs before the start: nothing to tell)
            self._unborn = False
            # the contents as of ``born``, then this append's later updates as its changes
            t = self.view.op.handle.trace
            keys, vals, cnt = accumulate_batches(t.snapshot.all_batches(), t.kk, t.kv, t.depth, at=(born,))
            self._put(("contents", np.concatenate([keys, vals], axis=0), cnt, born, Antichain([(born + 1,)])))
            parts = [_Later(b, born) for b in parts if (b.times[:, 0] > born).any()]
        with self._cond:
            if self._items and self._items[-1][0] == "changes":
                # not read yet: one frame for several appends (a reader that falls behind, or appends
                # that changed nothing, cost no queued item each)
                parts = self._items.pop()[1] + parts
            self._put(("changes", parts, None, None, upper))

    def end(self, error: BaseException | None):
        """No more frames: the view was dropped or failed (``error``), or the engine closed (an EngineError,
        unless every frame is queued already: then the stream ends as it would have)."""
        with self._cond:
            self._ended = True
            self._error = None if self._complete else error
            self._cond.notify_all()

    def _put(self, item):
        with self._cond:
            if not self._closed:  # (a closed follower the user still holds buffers nothing)
                self._items.append(item)
                self._complete = not item[4].elements
                self._cond.notify_all()

    @property
    def epoch(self):
        """The first epoch this follower has not seen complete (None: the view's inputs are closed)."""
        return epoch_of(self.frontier)

    # consumer side
    def __iter__(self):
        return self

    def __next__(self):
        # one deadline for the call: epochs that change nothing in the view wake the wait without a frame
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            item = None
            try:
                with self._cond:
                    while not self._items and not self._ended and not self._closed:
                        left = None if deadline is None else deadline - time.monotonic()
                        if (left is not None and left <= 0) or not self._cond.wait(left):
                            raise TimeoutError(f"no change of view {self.view.name!r} within {self.timeout} s")
                    if self._closed:
                        raise StopIteration
                    if not self._items:
                        if self._error is not None:
                            raise_failure(self.view.dataflow, self._error)
                        raise StopIteration
                    item = self._items.popleft()
                frame = self._frame(*item)
            except BaseException:  # (Ctrl-C while decoding: the frame is still the next one, nothing is lost)
                if item is not None:
                    with self._cond:
                        if not self._closed:
                            self._items.appendleft(item)
                raise
            moved = epoch_of(item[4]) != epoch_of(self.frontier)
            self.frontier = upper = item[4]
            if not upper.elements:  # nothing more will come
                self.end(self._error)
            if frame is not None:
                return frame
            if moved and self.progress:  # epochs completed that change nothing the view shows
                return self._empty()

    def _empty(self):
        import pandas as pd
        cols = self.view._decode(np.zeros((len(self.view.schema.names), 0), np.int64))
        cols[self.time_col] = np.zeros(0, np.int64)
        cols[self.diff_col] = np.zeros(0, np.int64)
        return pd.DataFrame(cols)

    def _frame(self, kind, data, cnt, epoch, upper):
        """A queued item as the DataFrame it yields (None: changes that add no row)."""
        import pandas as pd
        if kind == "contents":
            cols = self.view._decode(data)
            cols[self.time_col] = np.full(len(cnt), epoch, np.int64)
            cols[self.diff_col] = cnt
            return pd.DataFrame(cols)
        if not data:
            return None
        keys = np.concatenate([np.concatenate([b.key_rows(), b.vals], axis=0) for b in data], axis=1)
        times = np.concatenate([b.times[:, 0] for b in data])
        diffs = np.concatenate([b.diffs for b in data])
        order = np.argsort(times, kind="stable")
        cols = self.view._decode(keys[:, order])
        cols[self.time_col] = times[order]
        cols[self.diff_col] = diffs[order]
        return pd.DataFrame(cols)

    def close(self):
        """Stop following (the scheduler forgets this follower once it is garbage)."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Later:
    """The updates of a batch after epoch ``born`` (what a late follower's first append adds to the
    contents as of ``born``), read as ``Follower`` reads a batch."""

    def __init__(self, b, born: int):
        keep = b.times[:, 0] > born
        self._keys, self.vals, self.times, self.diffs = b.key_rows()[:, keep], b.vals[:, keep], b.times[keep], \
            b.diffs[keep]

    def key_rows(self):
        return self._keys


class Subscription:
    """Calls a function with every item of a Follower, on a thread of its own. An exception in the
    function (or the view's dataflow failing) stops the subscription: it is kept in ``error`` and a
    RuntimeWarning says so where the subscriber's output goes (in Jupyter, the cell that subscribed), as
    nothing else would show it."""

    def __init__(self, follower: Follower, fn):
        self.follower = follower
        self.fn = fn
        self.error: BaseException | None = None
        # run in the subscriber's context: in Jupyter, what fn prints goes to the cell that subscribed
        from .runtime import unrecorded
        self.thread = threading.Thread(target=unrecorded(contextvars.copy_context()).run, args=(self._run,),
                                       name=f"kpgnb-subscription-{follower.view.name}", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for item in self.follower:
                self.fn(item)
        except BaseException as e:  # noqa: BLE001 - kept for the owner to inspect
            if isinstance(e, EngineError) and self.follower.view.engine.closed:
                return  # (the engine closed: the stream ended, no fault of the subscriber's)
            self.error = e
            warnings.warn(f"the subscription to view {self.follower.view.name!r} stopped: "
                          f"{type(e).__name__}: {e} (kept in its .error)", RuntimeWarning, stacklevel=1)
        finally:
            self.follower.close()  # (stopped: its follower collects no more changes)

    def close(self, timeout: float = 5.0):
        self.follower.close()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)
