"""The runtime (DESIGN.md section 3, layer 7): an Engine with one persistent scheduler thread and a pool
of W worker threads, its input sessions, installed dataflows, the catalog of named arrangements, views,
and statistics.

The scheduler thread owns all dataflow state. Callers talk to it through a command queue: inserting
rows only encodes them and appends to the session's buffer (a cell that inserts returns at once);
``advance_to`` hands the buffered rows to the scheduler as one epoch; installing or dropping a dataflow
waits for the scheduler to do it between steps. ``wait`` blocks only its caller.
"""
from __future__ import annotations

import os
import threading
import time
import traceback
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .batch import Batch
from .columns import Schema, SymbolTable, decode_column
from .dataflow import DataflowError
from .inputs import diffs_array, rows_to_columns
from .kernels.exchange import partition
from .lattice import Antichain
from .trace import CompactedError, Trace


PARALLEL_ROWS = 10_000  # below this many rows a step's shards run inline: a pool hand-off costs more


class WorkerPool:
    """W persistent threads. ``run(fn, items, rows)`` runs fn over items, the first on the calling thread
    and the rest on the pool (when ``rows``, the work's size, is unknown or large enough); kernels release
    the GIL, so shards run concurrently. Exceptions raised in a worker surface in the caller with the
    worker's traceback."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers - 1), thread_name_prefix="kpgnb-worker") \
            if workers > 1 else None
        self.busy = np.zeros(workers)  # seconds of work per shard index

    def run(self, fn, items, rows: int | None = None) -> list:
        items = list(items)
        if not items:
            return []
        timed = self._timed(fn)
        if self._pool is None or len(items) == 1 or (rows is not None and rows < PARALLEL_ROWS):
            return [timed(i) for i in items]
        futures = [self._pool.submit(timed, i) for i in items[1:]]
        first = timed(items[0])
        return [first] + [f.result() for f in futures]

    def _timed(self, fn):
        busy = self.busy

        def call(item):
            t0 = time.perf_counter()
            try:
                return fn(item)
            finally:
                if isinstance(item, int) and 0 <= item < len(busy):
                    busy[item] += time.perf_counter() - t0
        return call

    def shutdown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class InputSession:
    """Feeds rows into an engine input. Rows inserted since the last ``advance_to`` belong to the
    current epoch; ``advance_to(e)`` closes every epoch before ``e`` and makes them visible to the
    dataflows. The input keeps an arrangement of its contents, so dataflows installed later start from
    its current state."""

    def __init__(self, engine: "Engine", name: str, schema: Schema):
        self.engine = engine
        self.name = name
        self.schema = schema
        self.epoch = 0
        self.closed = False
        self._buffer: list = []
        self._lock = threading.Lock()
        self.trace = Trace(len(schema), 0, 1, engine.workers, Antichain([(0,)]), engine.effort, f"input:{name}")
        # the session's own reader: keeps the trace alive and compacted to the last complete epoch
        self.handle = self.trace.handle(logical=Antichain([(0,)]))

    def _encode(self, rows) -> np.ndarray:
        if self.closed:
            raise ValueError(f"input {self.name!r} is closed")
        return rows_to_columns(rows, self.schema, self.engine.symbols)

    def insert(self, rows):
        """Add rows (list of tuples, dict of arrays, pandas/Arrow/Spark DataFrame) at the current epoch."""
        data = self._encode(rows)
        self._append(data, np.ones(data.shape[1], np.int64))

    def remove(self, rows):
        """Retract rows at the current epoch."""
        data = self._encode(rows)
        self._append(data, np.full(data.shape[1], -1, np.int64))

    def update(self, rows, diffs):
        """Add rows with explicit multiplicity changes (negative retracts)."""
        data = self._encode(rows)
        self._append(data, diffs_array(diffs, data.shape[1]))

    def _append(self, data, diffs):
        if data.shape[1]:
            with self._lock:
                self._buffer.append((data, diffs))

    def advance_to(self, epoch: int):
        """Close every epoch before ``epoch``: the updates inserted so far become visible as of epoch-1."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise TypeError(f"epoch must be an integer, not {type(epoch).__name__}")
        epoch = int(epoch)
        if self.closed:
            raise ValueError(f"input {self.name!r} is closed")
        with self._lock:
            if epoch <= self.epoch:
                if epoch == self.epoch:
                    return
                raise ValueError(f"input {self.name!r} is at epoch {self.epoch}; epochs only advance "
                                 f"(asked for {epoch})")
            buf, self._buffer = self._buffer, []
            start, self.epoch = self.epoch, epoch
        buf = [(data, diffs, start) for data, diffs in buf]
        self.engine._submit(("seal", self, buf, start, Antichain([(epoch,)]), time.perf_counter()))

    def flush(self):
        """Advance to the next epoch."""
        self.advance_to(self.epoch + 1)

    def close(self):
        """No more updates: seal the current epoch and close the input (its frontier becomes empty)."""
        if self.closed:
            return
        with self._lock:
            buf, self._buffer = self._buffer, []
            start = self.epoch
            self.closed = True
        buf = [(data, diffs, start) for data, diffs in buf]
        self.engine._submit(("seal", self, buf, start, Antichain(), time.perf_counter()))

    def _seal(self, buf, start: int, upper: Antichain):
        """On the scheduler thread: arrange the updates of the epochs [start, upper) into the input trace,
        as one batch. ``buf`` holds (columns, diffs, epoch) chunks."""
        W = self.engine.workers
        k = len(self.schema)
        lower = self.trace.upper
        if buf:
            data = np.concatenate([b[0] for b in buf], axis=1) if len(buf) > 1 else buf[0][0]
            diffs = np.concatenate([b[1] for b in buf]) if len(buf) > 1 else buf[0][1]
            times = np.concatenate([np.full(len(b[1]), b[2], np.int64) for b in buf]).reshape(-1, 1)
        else:
            data, diffs = np.zeros((k, 0), np.int64), np.zeros(0, np.int64)
            times = np.zeros((0, 1), np.int64)
        novals = np.zeros((0, len(diffs)), np.int64)
        if W == 1:
            batches = [Batch.form(data, novals, times, diffs, lower, upper)]
        else:
            perm, offs, _ = partition(np.ascontiguousarray(data), W)

            def form(s):
                idx = perm[offs[s]:offs[s + 1]]
                return Batch.form(data[:, idx], novals[:, idx], times[idx], diffs[idx], lower, upper)
            batches = self.engine.run(form, range(W), rows=len(diffs))
        self.trace.insert(batches, self.engine.run)
        if upper.elements:
            self.handle.set_logical_compaction(Antichain([(max(upper.elements[0][0] - 1, 0),)]))
        else:
            self.handle.set_logical_compaction(Antichain())

    def __repr__(self):
        return f"InputSession({self.name!r}, {self.schema}, epoch={self.epoch}{', closed' if self.closed else ''})"


class View:
    """A maintained result, readable from the notebook while the engine keeps it current."""

    def __init__(self, engine, dataflow: str, name: str, op, schema: Schema):
        self.engine = engine
        self.dataflow = dataflow
        self.name = name
        self.op = op
        self.schema = schema

    @property
    def frontier(self) -> Antichain:
        """Every epoch before this frontier is final in the view."""
        h = self.op.handle
        return h.upper if h is not None and h.alive else Antichain()

    @property
    def epoch(self):
        """The first epoch not yet final (None when every input is closed)."""
        f = self.frontier
        return f.elements[0][0] if f.elements else None

    def _check(self):
        df = self.engine._dataflows.get(self.dataflow)
        if df is None:
            raise ValueError(f"view {self.name!r}: dataflow {self.dataflow!r} has been dropped")
        if df.error is not None:
            raise DataflowError(f"dataflow {self.dataflow!r} failed: {df.error}") from df.error
        if self.op.handle is None:
            raise ValueError(f"view {self.name!r} is not installed yet (the dataflow block has not finished)")

    def columns(self, at=None, diffs: bool = False) -> dict:
        """The view's rows as a dict of NumPy arrays (decoded), as of epoch ``at`` (default: latest)."""
        self._check()
        if at is not None:
            up = self.frontier
            if up.elements and at >= up.elements[0][0]:
                raise ValueError(f"epoch {at} is not final yet in view {self.name!r} (its frontier is {up}); "
                                 f"call eng.wait(view) or read an earlier epoch")
        try:
            keys, vals, cnt = self.op.handle.accumulate(at)
        except CompactedError as e:
            raise CompactedError(f"view {self.name!r} cannot be read at epoch {at}: {e}. Keep more history "
                                 f"with .view(name, history=...)") from None
        data = np.concatenate([keys, vals], axis=0)
        if not diffs:
            if (cnt < 0).any():
                raise ValueError(f"view {self.name!r} holds rows with negative multiplicity; read it with "
                                 f"diffs=True")
            if not (cnt == 1).all():
                idx = np.repeat(np.arange(len(cnt)), cnt)
                data, cnt = data[:, idx], cnt[idx]
        out = {n: decode_column(data[i], d, self.engine.symbols)
               for i, (n, d) in enumerate(zip(self.schema.names, self.schema.dtypes))}
        if diffs:
            out["diff"] = cnt
        return out

    def to_pandas(self, at=None, diffs: bool = False):
        """The view as a pandas DataFrame (rows repeated by multiplicity, or with a ``diff`` column)."""
        import pandas as pd
        return pd.DataFrame(self.columns(at, diffs))

    def __len__(self):
        self._check()
        _, _, cnt = self.op.handle.accumulate(None)
        return int(cnt.sum())

    def __repr__(self):
        return f"View({self.name!r} in {self.dataflow!r}, {self.schema}, frontier={self.frontier})"

    def _repr_html_(self):
        try:
            df = self.to_pandas()
        except Exception as e:  # noqa: BLE001 - rendering must not raise
            return f"<b>view {self.name}</b>: {type(e).__name__}: {e}"
        head = df.head(20).to_html(index=False)
        return (f"<div><b>view {self.name}</b> &middot; frontier {self.frontier} &middot; {len(df)} rows</div>"
                + head)


class CatalogEntry:
    """A named arrangement: its trace, schema, and the dataflow that maintains it."""

    def __init__(self, name, trace, schema, key_names, val_names, producer, op):
        self.name = name
        self.trace = trace
        self.schema = schema
        self.key_names = key_names
        self.val_names = val_names
        self.producer = producer      # the Dataflow maintaining it (possibly dropped, kept for readers)
        self.op = op
        self.handles = weakref.WeakSet()  # handles given out by Engine.trace(name)

    @property
    def dataflow(self) -> str:
        return self.producer.name


class Dataflow:
    """An installed dataflow."""

    def __init__(self, name, graph, views, exports, uses, sources):
        self.name = name
        self.graph = graph
        self.views = views
        self.exports = exports      # names this dataflow exports
        self.uses = uses            # export names it imports
        self.sources = sources      # InputSessions it reads, directly or through imports
        self.error: BaseException | None = None
        self.dropped = False
        self.installed_at = time.time()

    @property
    def status(self) -> str:
        if self.dropped:
            return "dropped (kept while its exports are read)"
        return "failed" if self.error is not None else "running"


class Engine:
    """A differential dataflow engine with W key-sharded workers (default: the number of cores)."""

    def __init__(self, workers: int | None = None, effort: str = "default"):
        from .spine import EFFORT
        if effort not in EFFORT:
            raise ValueError(f"effort must be one of {sorted(EFFORT)}")
        self.workers = int(workers) if workers else (os.cpu_count() or 1)
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        self.effort = effort
        self.symbols = SymbolTable()
        self._inputs: dict = {}
        self._dataflows: dict = {}
        self._retired: list = []  # dropped dataflows still maintaining exports that others read
        self._catalog: dict = {}
        self._pool = WorkerPool(self.workers)
        self._cmds: deque = deque()
        self._cv = threading.Condition()
        self._progress = threading.Condition()
        self._busy = False
        self._stop = False
        self.latencies: deque = deque(maxlen=100_000)
        self.rounds = 0
        self.errors: deque = deque(maxlen=100)
        self._thread = threading.Thread(target=self._loop, name="kpgnb-scheduler", daemon=True)
        self._thread.start()

    # -- public API ---------------------------------------------------------------------------
    def input(self, name: str, columns, dtypes=None) -> InputSession:
        """Create an input collection with named columns (dtypes default to int64; str is interned)."""
        if name in self._inputs:
            raise ValueError(f"an input named {name!r} exists already")
        if isinstance(columns, str):
            columns = [columns]
        schema = Schema.of(columns, dtypes)
        session = InputSession(self, name, schema)
        self._inputs[name] = session
        return session

    def inputs(self) -> dict:
        return dict(self._inputs)

    def dataflow(self, name: str):
        """A builder for a new dataflow, installed atomically when its ``with`` block ends."""
        from .collection import DataflowBuilder
        if name in self._dataflows:
            raise ValueError(f"a dataflow named {name!r} is installed already; eng.drop({name!r}) first")
        return DataflowBuilder(self, name)

    def drop(self, name: str, cascade: bool = False):
        """Uninstall a dataflow: its views go at once. Arrangements it exported stay alive, maintained, as
        long as other dataflows (or handles from ``trace``) read them; only the operators feeding those are
        kept running. ``cascade=True`` drops the dataflows that import its exports as well."""
        return self._call(lambda: self._drop(name, cascade))

    def catalog(self) -> dict:
        """Named arrangements: name -> {dataflow, key, values, records, readers}."""
        if self._retired:
            self._call(self._collect)  # forget arrangements whose last reader just went away
        out = {}
        for name, e in list(self._catalog.items()):
            st = e.trace.stats()
            out[name] = {"dataflow": e.dataflow + (" (dropped)" if e.producer.dropped else ""),
                         "key": list(e.key_names), "values": list(e.val_names),
                         "records": st["records"], "readers": st["readers"], "upper": st["upper"]}
        return out

    def dataflows(self) -> dict:
        """Installed dataflows: name -> "running" or "failed"."""
        return {n: df.status for n, df in self._dataflows.items()}

    def trace(self, name: str):
        """A TraceHandle on a named arrangement, for reading it directly (cursors, ``accumulate``). It keeps
        the trace alive, even after its producer is dropped, and holds back compaction until closed."""
        if self._retired:
            self._call(self._collect)  # forget arrangements whose last reader just went away
        entry = self._catalog.get(name)
        if entry is None:
            raise KeyError(f"no arrangement named {name!r}; the catalog has {sorted(self._catalog)}")

        def give():
            h = entry.trace.handle()
            entry.handles.add(h)
            return h
        return self._call(give)

    def wait(self, target=None, timeout: float | None = None):
        """Block the caller until ``target`` is current: a View (reflects every epoch its inputs were
        advanced to), an int epoch (every view has passed it), or None (the engine is idle)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if isinstance(target, View):
            goal = self._view_goal(target)
            pred = lambda: self._view_done(target, goal)  # noqa: E731
        elif target is None:
            pred = self._idle
        elif isinstance(target, (int, np.integer)):
            e = int(target)
            pred = lambda: all(self._view_done(v, e) for df in list(self._dataflows.values())  # noqa: E731
                               for v in df.views.values())
        else:
            raise TypeError("wait() takes a View, an epoch or nothing")
        with self._progress:
            while not pred():
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"eng.wait({target!r}) timed out")
                    self._progress.wait(left)
                else:
                    self._progress.wait(0.5)
        return target

    def stats(self) -> dict:
        """Sizes and frontiers of every arrangement, dataflow status, latencies and worker load."""
        arrs = []
        for name, s in list(self._inputs.items()):
            arrs.append(self._trace_stats(f"input:{name}", None, s.trace))
        for df in list(self._dataflows.values()) + list(self._retired):
            dname = df.name + (" (dropped)" if df.dropped else "")
            for op in df.graph.ops:
                tr = getattr(op, "trace", None) if op.arranged and op.kind not in ("import", "enter_arranged") \
                    else None
                if tr is not None:
                    label = getattr(tr, "name", None) or f"{op.kind}#{op.index}"
                    arrs.append(self._trace_stats(label, dname, tr))
        lat = np.array(self.latencies) * 1e3
        return {
            "workers": self.workers,
            "arrangements": arrs,
            "dataflows": [{"name": n, "status": df.status, "operators": len(df.graph.ops),
                           "frontier": _root_frontier(df), "error": None if df.error is None else str(df.error),
                           "busy_s": sum(op.busy for op in df.graph.ops),
                           "steps": sum(op.steps for op in df.graph.ops)}
                          for n, df in list(self._dataflows.items())],
            "inputs": [{"name": n, "epoch": s.epoch, "closed": s.closed} for n, s in list(self._inputs.items())],
            "latency_ms": {"count": int(len(lat)),
                           "p50": float(np.percentile(lat, 50)) if len(lat) else None,
                           "p99": float(np.percentile(lat, 99)) if len(lat) else None},
            "shard_busy_s": self._pool.busy.tolist(),
            "rounds": self.rounds,
        }

    def close(self):
        """Stop the scheduler and worker threads."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self._pool.shutdown()
        for df in list(self._dataflows.values()):
            for op in df.graph.ops:
                op.release()
        for df in self._retired:
            for op in df.graph.ops:
                op.release()
        self._dataflows.clear()
        self._retired.clear()
        self._catalog.clear()

    shutdown = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- used by operators -------------------------------------------------------------------
    def run(self, fn, items, rows: int | None = None):
        return self._pool.run(fn, items, rows)

    # -- scheduler ----------------------------------------------------------------------------
    def _submit(self, cmd):
        with self._cv:
            if self._stop:
                raise RuntimeError("the engine is closed")
            self._cmds.append(cmd)
            self._cv.notify()

    def _call(self, fn):
        """Run fn on the scheduler thread between steps and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            return fn()
        done = threading.Event()
        box = {}
        self._submit(("call", fn, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def _loop(self):
        while True:
            with self._cv:
                while not self._cmds and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                cmds = list(self._cmds)
                self._cmds.clear()
                self._busy = True
            seals = []
            for cmd in _coalesce_seals(cmds):
                try:
                    if cmd[0] == "seal":
                        _, session, buf, start, upper, t0s = cmd
                        session._seal(buf, start, upper)
                        seals.extend(t0s)
                    elif cmd[0] == "call":
                        _, fn, done, box = cmd
                        try:
                            box["result"] = fn()
                        except BaseException as e:  # noqa: BLE001 - handed back to the caller
                            box["error"] = e
                        done.set()
                except BaseException:  # noqa: BLE001 - the scheduler must survive anything
                    self.errors.append(traceback.format_exc())
            try:
                self._run_dataflows()
                if self._retired:
                    self._collect()
            except BaseException:  # noqa: BLE001 - the scheduler must survive anything
                self.errors.append(traceback.format_exc())
            now = time.perf_counter()
            self.latencies.extend(now - t0 for t0 in seals)
            with self._cv:
                self._busy = bool(self._cmds)
            with self._progress:
                self.rounds += 1
                self._progress.notify_all()

    def _run_dataflows(self):
        progressed = True
        while progressed:
            progressed = False
            for df in list(self._dataflows.values()) + self._retired:
                if df.error is not None:
                    continue
                try:
                    if df.graph.run(self):
                        progressed = True
                except BaseException as e:  # noqa: BLE001 - one failing dataflow must not stop the others
                    self._fail(df, e)

    def _fail(self, df: Dataflow, error: BaseException):
        df.error = error
        self.errors.append(f"dataflow {df.name!r}: {error}")
        for op in df.graph.ops:
            if op.kind == "import":
                op.release()

    def _idle(self) -> bool:
        with self._cv:
            return not self._cmds and not self._busy

    # -- install and drop (scheduler thread) -----------------------------------------------------
    def _install(self, builder):
        return self._call(lambda: self._do_install(builder))

    def _do_install(self, builder):
        name = builder.name
        if name in self._dataflows:
            raise ValueError(f"a dataflow named {name!r} is installed already")
        for ename in builder.exports:
            if ename in self._catalog:
                raise ValueError(f"an arrangement named {ename!r} is exported already "
                                 f"(by dataflow {self._catalog[ename].dataflow!r})")
        for uname in builder.uses:
            if uname not in self._catalog:
                raise ValueError(f"no arrangement named {uname!r} is exported (it was dropped)")
        ops = builder.graph.ops
        done = []
        try:
            for op in ops:
                op.install(self)
                done.append(op)
        except BaseException:
            for op in done:
                op.release()
            raise
        for op in ops:
            fin = getattr(op, "finish_install", None)
            if fin is not None:
                fin()
        sources = set(builder.sources)
        for uname in builder.uses:
            sources |= self._catalog[uname].producer.sources
        df = Dataflow(name, builder.graph, builder.views, list(builder.exports), set(builder.uses), sources)
        for ename, (op, schema, keys, vals) in builder.exports.items():
            self._catalog[ename] = CatalogEntry(ename, op.handle.trace, schema, keys, vals, df, op)
        self._dataflows[name] = df
        return df

    def _drop(self, name: str, cascade: bool):
        df = self._dataflows.pop(name, None)
        if df is None:
            raise KeyError(f"no dataflow named {name!r}; installed: {sorted(self._dataflows)}")
        if cascade:
            for dep in [d.name for d in self._dataflows.values() if d.uses & set(df.exports)]:
                if dep in self._dataflows:
                    self._drop(dep, cascade)
        for op in df.graph.ops:
            if op.kind == "view":
                op.release()
        df.views = {}
        df.dropped = True
        self._retired.append(df)
        self._collect()

    def _read(self, export: str, besides) -> bool:
        entry = self._catalog.get(export)
        if entry is None:
            return False
        if any(h.alive for h in list(entry.handles)):
            return True
        return any(d is not besides and export in d.uses for d in list(self._dataflows.values()) + self._retired)

    def _collect(self):
        """Release dropped dataflows whose exports nobody reads; prune the others to the operators that
        feed the exports still read."""
        changed = True
        while changed:
            changed = False
            for df in list(self._retired):
                live = {e for e in df.exports if self._read(e, df)}
                if live == set(df.exports) and getattr(df, "pruned", False):
                    continue
                for e in set(df.exports) - live:
                    self._catalog.pop(e, None)
                df.exports = sorted(live)
                if not live:
                    for op in df.graph.ops:
                        op.release()
                    self._retired.remove(df)
                    changed = True
                    continue
                keep: set = set()
                stack = [self._catalog[e].op for e in live]
                while stack:
                    op = stack.pop()
                    if op not in keep:
                        keep.add(op)
                        stack.extend(op.inputs)
                for op in df.graph.ops:
                    if op not in keep:
                        op.release()
                    else:
                        op.consumers = [(c, p) for c, p in op.consumers if c in keep]
                df.graph.ops = [op for op in df.graph.ops if op in keep]
                df.pruned = True

    # -- waiting ------------------------------------------------------------------------------
    def _view_goal(self, view: View):
        df = self._dataflows.get(view.dataflow)
        if df is None:
            raise ValueError(f"dataflow {view.dataflow!r} is not installed")
        goals = [s.epoch for s in df.sources if not s.closed]
        return min(goals) if goals else None  # None: every input closed

    def _view_done(self, view: View, goal) -> bool:
        df = self._dataflows.get(view.dataflow)
        if df is None:
            raise ValueError(f"dataflow {view.dataflow!r} was dropped")
        if df.error is not None:
            raise DataflowError(f"dataflow {view.dataflow!r} failed: {df.error}") from df.error
        f = view.frontier
        if not f.elements:
            return True
        if goal is None:
            return False
        return f.elements[0][0] >= goal

    @staticmethod
    def _trace_stats(name, dataflow, trace) -> dict:
        st = trace.stats()
        st["name"] = name
        st["dataflow"] = dataflow
        return st

    def __repr__(self):
        return (f"Engine(workers={self.workers}, inputs={sorted(self._inputs)}, "
                f"dataflows={sorted(self._dataflows)}, arrangements={sorted(self._catalog)})")


def _coalesce_seals(cmds):
    """Consecutive seals of one input become one (logical batching: many epochs, one physical batch).
    Other commands are barriers, so an install between two seals still sees the first and not the second."""
    out = []
    pending: dict = {}
    for cmd in cmds:
        if cmd[0] != "seal":
            out.extend(pending.values())
            pending.clear()
            out.append(cmd)
            continue
        _, session, buf, start, upper, t0 = cmd
        if session in pending:
            prev = pending[session]
            pending[session] = ("seal", session, prev[2] + buf, prev[3], upper, prev[5] + [t0])
        else:
            pending[session] = ("seal", session, list(buf), start, upper, [t0])
    out.extend(pending.values())
    return out


def _root_frontier(df: Dataflow) -> Antichain:
    out = Antichain()
    for op in df.graph.ops:
        if op.scope.depth == 1:
            out = out.meet(op.out_frontier)
    return out

