"""The runtime's public face (DESIGN.md section 3, layer 7): ``Engine``, over the scheduler (the one
writer), the worker pool, input sessions and views.

Threads: any number of callers (notebook cells, a dashboard, Spark's streaming thread) may use one
engine at once. Inserting only encodes and buffers; ``advance_to``, installs, drops and cancels are
commands to the scheduler; ``wait``, ``dataflows()``, ``catalog()`` and ``stats()`` read the published
snapshots. The registry of input sessions is the one piece of state written outside the scheduler
(``input()`` adds a session under ``_lock``); a session's sealed state is the scheduler's.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import latency
from .builder import DataflowBuilder
from .columns import Schema, SymbolTable, check_flag, check_name, check_timeout, is_int
from .commands import Cancel, Collect, Discard, Drop, DropInput, Install, OpenHandle, Own
from .errors import ArgumentTypeError, EngineError, UnknownNameError, UsageError, not_copyable
from .lattice import Antichain
from .pool import MAX_WORKERS, WorkerPool
from .scheduler import Scheduler
from .scope import epoch_of
from .session import InputSession, input_key
from .snapshot import EngineSnapshot
from .spine import EFFORT
from .trace import live_records, trace_stats
from .view import View, raise_failure


_INSTALLS: contextvars.ContextVar = contextvars.ContextVar("kpgnb_installs", default=None)  # see recording_installs
_INPUTS: contextvars.ContextVar = contextvars.ContextVar("kpgnb_inputs", default=None)      # see recording_inputs


def unrecorded(ctx: contextvars.Context) -> contextvars.Context:
    """``ctx`` recording no installs: a thread of its own that runs in a copy of a block's context (a
    subscription's) is not that block, and what it installs is not the block's to undo."""
    ctx.run(_INSTALLS.set, None)
    ctx.run(_INPUTS.set, None)  # (nor the inputs it creates: recording_inputs)
    return ctx


@dataclass(frozen=True)
class _InputNow:
    """An input session with its epoch and closing as read at one moment (``Engine._inputs_now``)."""
    session: InputSession
    epoch: int
    closed: bool


class Engine:
    """A differential dataflow engine with W key-sharded workers (default: the number of cores)."""

    def __reduce__(self):  # (pickle, copy.copy, copy.deepcopy)
        raise not_copyable(self)

    def __init__(self, workers: int | None = None, effort: str = "default"):
        if not isinstance(effort, str) or effort not in EFFORT:
            raise (UsageError if isinstance(effort, str) else ArgumentTypeError)(
                f"effort must be one of {sorted(EFFORT)}, got {effort!r}")
        if workers is None:
            workers = os.cpu_count() or 1
        if not is_int(workers):
            raise ArgumentTypeError(f"workers must be an int, at least 1 (None: one per core), got {workers!r}")
        if not 1 <= workers <= MAX_WORKERS:
            raise UsageError(f"workers must be an int, at least 1 and at most {MAX_WORKERS} (None: one per core), "
                             f"got {workers!r}")
        self.workers = int(workers)
        self.effort = effort
        self.symbols = SymbolTable()
        self._lock = threading.Lock()
        self._inputs: dict = {}
        self._loading: set = set()  # names of inputs whose first rows are being read (not inputs yet)
        self._pool = WorkerPool(self.workers)
        self._scheduler = Scheduler(self._pool)
        self._move_wake = 0  # the command number of the last wake a handle's frontier move sent
        self._closed = False

    # -- inputs and dataflows -------------------------------------------------------------------------
    def input(self, name: str, columns, dtypes=None, rows=None, key=None) -> InputSession:
        """Create an input collection with named columns (dtypes default to int64; str is interned;
        ``columns`` may map names to dtypes instead). ``rows`` are inserted at epoch 0; if they cannot be (a bad value, an interrupt) no input is
        created, so the name stays free for a corrected retry. The input keeps its rows arranged by
        ``key``, its leading columns (default: all of them): a dataflow that joins on those columns reads
        that arrangement itself, instead of indexing the rows a second time."""
        self._live()
        if not isinstance(name, str):
            raise ArgumentTypeError(f"an input's name must be a non-empty str, got {type(name).__name__} {name!r}")
        if not name:
            raise UsageError(f"an input's name must be a non-empty str, got {name!r}")
        if isinstance(columns, str):
            columns = [columns]
        if isinstance(columns, dict):  # {name: dtype}
            if dtypes is not None:
                raise ArgumentTypeError(f"input {name!r}: columns is a dict of dtypes and dtypes= is given too: "
                                        f"give the dtypes once")
            columns, dtypes = list(columns), list(columns.values())
        if isinstance(columns, (bytes, set, frozenset)) or not hasattr(columns, "__iter__"):
            raise ArgumentTypeError(f"input {name!r}: columns must be a list of column names (str)"
                                    + (" in order (a set has none)" if isinstance(columns, (set, frozenset)) else "")
                                    + f", got {columns!r}")
        schema = Schema.of(columns, dtypes)
        nkey = input_key(schema, key)
        with self._lock:
            self._live()
            self._forget_dropped()
            if name in self._inputs:
                raise UsageError(f"an input named {name!r} exists already")
            if name in self._loading:
                raise UsageError(f"an input named {name!r} is being created (its rows are being read) by "
                                 f"another call")
            session = InputSession(name, schema, self.symbols, self.workers, self.effort, self._scheduler.submit,
                                   lambda: self._closed, nkey, lambda: list(self._inputs.values()))
            if rows is None:
                self._inputs[name] = session
                _record_input(self, session)
                return session
            self._loading.add(name)  # the name is taken, the input not there yet: no dataflow reads it and
        loaded = False               # no thread writes it before its rows are in
        try:
            session.insert(rows)  # buffered only: nothing reached the scheduler if it fails
            loaded = True
        finally:
            with self._lock:
                self._loading.discard(name)
                if loaded:
                    self._inputs[name] = session
        _record_input(self, session)
        return session

    def inputs(self) -> dict:
        with self._lock:
            self._forget_dropped()
            return dict(self._inputs)

    def _forget_dropped(self):
        """Let go of sessions the engine dropped itself (inputs a dropped dataflow owned), under the lock."""
        if any(s.dropped for s in self._inputs.values()):
            self._inputs = {n: s for n, s in self._inputs.items() if not s.dropped}

    def dataflow(self, name: str, replace: bool = False) -> DataflowBuilder:
        """A builder for a new dataflow, installed atomically when its ``with`` block ends. With
        ``replace=True`` it takes the place of an installed dataflow of that name in the same step: the old
        one's views end, its exports that the new one defines again pass to the new one for later
        readers, while dataflows already reading them keep the old arrangement (renamed ``NAME~k``, kept
        while read)."""
        self._live()
        if not isinstance(name, str) or not name:
            raise (UsageError if isinstance(name, str) else ArgumentTypeError)(
                f"a dataflow's name must be a non-empty str, got {name!r}")
        replace = check_flag(replace, f"eng.dataflow({name!r}): replace")
        if not replace and name in self.snapshot().dataflows:
            raise UsageError(f"a dataflow named {name!r} is installed already; eng.drop({name!r}) first "
                             f"or replace it (eng.dataflow({name!r}, replace=True))")
        return DataflowBuilder(self, name, lambda b: self._install(b, replace), replace=replace)

    def datalog(self, text: str, inputs: dict | None = None, name: str | None = None, materialize: bool = True,
                history: int = 1):
        """Install a Datalog program as one dataflow ``name``; returns its ``kpgnb.datalog.Program``
        (``prog["tc"]`` is a view; ``prog.goal("tc(?, _)")`` a goal-directed query). A body predicate no
        rule defines is an input: ``inputs={pred: engine input name, input session or DataFrame}``, by
        default the engine input of the same name. ``materialize=False`` derives nothing until asked through
        goals (the inputs are indexed and shared with them). ``history``: epochs before the frontier each
        relation's view keeps readable with ``at=``. The front end lives in ``kpgnb.datalog``
        (imported here on first use: the engine itself knows nothing of Datalog)."""
        import importlib
        self._live()  # (before the program is checked: a closed engine has no inputs to name)
        if name is not None and (not isinstance(name, str) or not name):
            raise (UsageError if isinstance(name, str) else ArgumentTypeError)(
                f"a Datalog program's name must be a non-empty str (or None: datalogN), got {name!r}")
        materialize = check_flag(materialize, "eng.datalog's materialize")
        if not is_int(history):
            raise ArgumentTypeError(f"eng.datalog's history= takes a number of epochs (an int >= 1), got "
                                    f"{type(history).__name__} {history!r}")
        if history < 1:
            raise UsageError(f"eng.datalog's history={history}: at least 1 (the latest epoch)")
        history = int(history)
        return importlib.import_module("kpgnb.datalog").install(self, text, inputs=inputs, name=name,
                                                                 materialize=materialize, history=history)

    @contextlib.contextmanager
    def recording_installs(self):
        """A list of (name, serial) of the dataflows installed in the block by this thread (its context),
        in order: what a failed notebook cell undoes (another thread's installs meanwhile are not its)."""
        made: list = []
        token = _INSTALLS.set(made)
        try:
            yield made
        finally:
            _INSTALLS.reset(token)

    @contextlib.contextmanager
    def recording_inputs(self):
        """A list of the input sessions of this engine created in the block by this thread (its context), in
        order: what a failed notebook cell drops again (another thread's inputs made meanwhile are not its)."""
        made: list = []
        token = _INPUTS.set((self, made))
        try:
            yield made
        finally:
            _INPUTS.reset(token)

    def _install(self, builder, replace: bool = False):
        self._live()
        cmd = Install(builder, replace, contextvars.copy_context())
        try:
            done = self._scheduler.call(cmd)
            made = _INSTALLS.get()
            if made is not None:
                made.append((builder.name, builder.serial))
            return done
        except BaseException:
            if cmd.reply.took_effect() and not cmd.replaced:
                # interrupted as it finished: undone, as one abandoned before it finished is (one that
                # replaced a dataflow keeps the new one: the old one is gone already)
                try:
                    self._scheduler.submit(Discard(builder.name, builder.serial))
                except EngineError:
                    pass  # (closed meanwhile: nothing is left anyway)
            raise

    def discard(self, name: str, serial: int):
        """Uninstall the install ``serial`` of dataflow ``name`` whose maker was interrupted once it was
        installed (a Datalog program's build), as an install interrupted as it finished is: queued (a second
        Ctrl-C cannot leave it), then waited for, so that the caller's next look finds it gone. One whose
        exports a dataflow installed meanwhile reads is kept (it is in use)."""
        try:
            seq = self._scheduler.submit(Discard(name, serial))
        except EngineError:
            return  # (closed: nothing is left anyway)
        if self._scheduler.inside():
            return
        while True:  # until a snapshot published after the discard ran (as ``cancel``)
            snap = self.snapshot()
            if snap.seq >= seq or self.closed:
                return
            self._scheduler.wait_published(snap, 0.5)

    def drop(self, name: str, cascade: bool = False):
        """Uninstall a dataflow, stopping any computation in flight: its views go at once. Arrangements it
        exported stay alive, maintained, as long as other dataflows (or handles from ``trace``) read them;
        only the operators feeding those are kept running. ``cascade=True`` drops the dataflows that
        import its exports as well."""
        self._live()
        check_name(name, "eng.drop", "a dataflow")
        self._scheduler.call(Drop(name, check_flag(cascade, "eng.drop's cascade")))
        with self._lock:
            self._forget_dropped()  # (the inputs it owned)

    def own_inputs(self, dataflow: str, *inputs: str):
        """Drop ``inputs`` when the installed dataflow ``dataflow`` is gone (dropped, and no longer kept for
        readers of its exports), whichever way it goes: inputs made for it alone. (A builder's
        ``own_inputs`` records them with the install itself.)"""
        self._live()
        check_name(dataflow, "eng.own_inputs", "a dataflow")
        for n in inputs:
            check_name(n, "eng.own_inputs", "an input")
        with self._lock:
            sessions = [self._inputs.get(n) for n in inputs]
        missing = [n for n, s in zip(inputs, sessions) if s is None or s.dropped]
        if missing:
            raise UnknownNameError(f"no input named {missing[0]!r}; inputs are {sorted(self.inputs())}")
        self._scheduler.call(Own(dataflow, sessions))

    def drop_input(self, name: str, wait: bool = True):
        """Forget an input that no installed dataflow reads (UsageError naming the readers otherwise): its
        rows go and the name is free for a new ``input``; the session refuses every later call.
        ``wait=False`` queues the drop and frees the name at once, without waiting for a busy scheduler:
        for the cleanup of a cell interrupted before its dataflow was installed (nothing reads the input;
        were something to, the drop would be refused with nobody to tell)."""
        self._live()
        check_name(name, "eng.drop_input", "an input")
        wait = check_flag(wait, "eng.drop_input: wait")
        with self._lock:
            session = self._inputs.get(name)
        if session is None or session.dropped:
            raise UnknownNameError(f"no input named {name!r}; inputs are {sorted(self.inputs())}")
        cmd = DropInput(name, session)
        if wait:
            self._scheduler.call(cmd)
        else:
            session.let_go()
            self._scheduler.submit(cmd)
        with self._lock:
            if self._inputs.get(name) is session:
                del self._inputs[name]

    def cancel(self, name: str, reason: str = "cancelled by the user"):
        """Stop a dataflow's computation (between operator steps); it stays listed as ``cancelled`` and its
        waits raise ``Cancelled`` until it is dropped. Returns once the snapshot shows it (so ``status``
        read right after says ``cancelled``); Ctrl-C stops that wait, not the cancel. From inside a dataflow
        (a user function that stops its own dataflow) it returns at once: the cancel runs after the step."""
        self._live()
        check_name(name, "eng.cancel", "a dataflow")
        if name not in self.snapshot().dataflows:
            raise UnknownNameError(f"no dataflow named {name!r}; installed: {sorted(self.snapshot().dataflows)}")
        seq = self._scheduler.submit(Cancel(name, reason))
        if self._scheduler.inside():
            return
        while True:  # until a snapshot published after the cancel ran (not by name: it may be installed anew)
            snap = self.snapshot()
            if snap.seq >= seq:
                return
            if self._closed:
                raise EngineError("the engine is closed")  # (before the cancel ran: as every call queued)
            self._scheduler.wait_published(snap, 0.5)

    def call(self, cmd):
        """Send a command and wait for its reply (used by views)."""
        self._live()
        return self._scheduler.call(cmd)

    # -- reading published state --------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        """The state the scheduler published last (immutable)."""
        return self._scheduler.snapshot

    def catalog(self, snapshot: EngineSnapshot | None = None) -> dict:
        """Named arrangements: name -> {dataflow, key, values, records, readers, upper}; from ``snapshot``
        where the caller reads several tables of one."""
        out = {}
        for name, e in (snapshot or self.snapshot()).catalog.items():
            trace = e.live_trace()
            if trace is None:
                continue
            st = trace.stats()
            out[name] = {"dataflow": e.dataflow + (" (dropped)" if e.dropped else ""), "key": list(e.key),
                         "values": list(e.values), "records": st["records"], "readers": st["readers"],
                         "upper": st["upper"]}
        return out

    def dataflows(self) -> dict:
        """Installed dataflows: name -> "running", "failed" or "cancelled"."""
        return {n: d.status for n, d in self.snapshot().dataflows.items()}

    def trace(self, name: str):
        """A TraceHandle on a named arrangement, for reading it directly (cursors, ``accumulate``). It keeps
        the trace alive, even after its producer is dropped, and holds back compaction until closed."""
        self._live()
        check_name(name, "eng.trace", "an exported arrangement")
        cmd = OpenHandle(name, self._handle_closed, self._handle_moved, self.symbols, self)
        try:
            return self._scheduler.call(cmd)
        except BaseException:
            if cmd.reply.took_effect():  # interrupted as it opened: a handle nobody gets would hold compaction
                cmd.reply.result.close()  # back for as long as the traceback lives (the scheduler closes one
            raise                         # opened after the caller gave up)

    def _handle_closed(self):
        try:
            self._scheduler.submit(Collect())
        except EngineError:
            pass  # closed engine

    def _handle_moved(self):
        """A user's handle moved its frontiers: wake the scheduler (with a Collect, no reply) so that
        idle maintenance compacts what the move released, also while no epoch comes. One wake in flight
        at a time: a move while the last one is still queued or running is seen by it (the frontiers
        are set before this is called, and the scheduler reads them after the command)."""
        sched = self._scheduler
        if self._move_wake > sched.done():
            return
        try:
            self._move_wake = sched.submit(Collect())
        except EngineError:
            pass  # closed engine

    def _inputs_now(self, snap: EngineSnapshot) -> dict:
        """The session of every input ``snap`` lists (dropped since or not) and of those made since, with its
        epoch and closing read once: the tables of one ``stats()`` agree on them and on the snapshot's
        dataflows (another thread may advance, close, make or drop an input meanwhile)."""
        sessions = {n: i.session for n, i in snap.inputs.items() if i.session is not None}
        for n, s in self.inputs().items():  # (and those made since, which no dataflow of ``snap`` reads)
            sessions.setdefault(n, s)
        return {n: _InputNow(s, s.epoch, s.closed) for n, s in sessions.items()}

    def arrangements(self, live: bool = False, snapshot: EngineSnapshot | None = None) -> list:
        """Every arrangement the engine maintains, exported or internal, inputs included: one dict each
        with ``name`` (the catalog name of an export, ``input:NAME``, else the operator's label),
        ``dataflow``, ``kind`` (input, export or internal), ``exports`` (the catalog names it is exported
        under: an input can be exported as it is), ``key`` (column names), ``records``, ``keys``,
        ``batches``, ``bytes``, ``readers``, ``since``, ``upper``, ``logical``, ``merges`` (in progress),
        ``merge_shortfall`` (rows they still have to merge), ``skew`` (max over mean shard records),
        ``shards`` (per-shard figures), and ``blocker`` / ``blocked_epochs`` (the reader holding compaction
        furthest back, when it is more than an epoch behind). Reads published snapshots and the readers'
        frontiers only, so any thread may call it while the engine runs. With ``live=True`` each also
        reports ``live``: the records it would hold if fully merged and compacted to its readers' frontier
        (exact, and costs a pass over every trace). ``snapshot``: read that engine snapshot (``stats`` reads
        all its parts from one)."""
        live = check_flag(live, "eng.arrangements: live")
        snap = snapshot or self.snapshot()
        return self._arrangements(live, snap, self._inputs_now(snap))

    def _arrangements(self, live: bool, snap: EngineSnapshot, inputs: dict) -> list:
        exported: dict = {}
        for cname, entry in sorted(snap.catalog.items()):
            tr = entry.live_trace()
            if tr is not None:
                exported.setdefault(id(tr), []).append(cname)
        rows, seen = [], set()

        def add(tr, ts, name, dataflow, kind):  # ts: its contents as of ``snap`` (None: read it now)
            if id(tr) in seen:
                return
            seen.add(id(tr))
            ts = ts or tr.snapshot
            entry = snap.catalog.get(name) if kind == "export" else None  # (a rename's export: its own key)
            row = dict(trace_stats(ts, tr.readers, tr.logical, holders=tr.reader_frontiers()),
                       name=name, dataflow=dataflow, kind=kind,
                       key=list(entry.key if entry is not None else tr.key_names),
                       exports=exported.get(id(tr), []))
            if live:
                row["live"] = live_records(ts, tr.kk, tr.kv, tr.depth, tr.logical)
            rows.append(row)

        for name, now in inputs.items():
            info = snap.inputs.get(name)
            add(now.session.trace, info and info.contents, f"input:{name}", None, "input")
        for infos in (snap.dataflows, snap.retired):
            for info in infos.values():
                label = info.name + (" (dropped)" if info.name in snap.retired else "")
                contents = info.trace_contents or (None,) * len(info.traces)
                for (tname, ref), ts in zip(info.traces, contents):
                    tr = ref()
                    if tr is not None:
                        cnames = exported.get(id(tr))
                        add(tr, ts, cnames[0] if cnames else tname, label, "export" if cnames else "internal")
        return rows

    def dataflow_stats(self, retired: bool = False, snapshot: EngineSnapshot | None = None) -> list:
        """Every installed dataflow (with ``retired``, also dropped ones kept for their read exports): one
        dict each with ``name``, ``status``, ``error`` (text), ``operators``, ``busy_s``, ``steps``, its
        output ``frontier`` (and ``epoch``, its first epoch not final), its ``inputs`` (name -> the epoch
        it was advanced to and its sealed frontier) and their meet ``input_frontier``, how far it lags
        behind them (``lag_epochs``, and ``lag_s``: seconds since the oldest ``advance_to`` it does not
        reflect yet, or since its install if later), ``latency_s`` (its last update's), ``updates`` (latencies measured so far) and
        ``updated_at`` (wall-clock time its frontier last moved), ``serial`` (which install of the name: a
        replacement gets another). Any thread may call it."""
        retired = check_flag(retired, "eng.dataflow_stats: retired")
        snap = snapshot or self.snapshot()
        return self._dataflow_stats(retired, snap, self._inputs_now(snap))

    def _dataflow_stats(self, retired: bool, snap: EngineSnapshot, inputs: dict) -> list:
        now = time.perf_counter()
        out = []
        for infos in (snap.dataflows, snap.retired) if retired else (snap.dataflows,):
            for n, d in infos.items():
                if snap.gone(d):  # dropped since the snapshot: its arrangements are listed nowhere either
                    continue
                ins, meet, open_epochs, all_epochs, behind = {}, Antichain(), [], [], []
                at = epoch_of(d.frontier)
                for src in sorted(d.sources):
                    s, i = inputs.get(src), snap.inputs.get(src)
                    sealed = i.sealed if i is not None else Antichain([(0,)])
                    ins[src] = {"epoch": s.epoch if s is not None else None, "sealed": sealed,
                                "closed": bool(s is not None and s.closed)}
                    meet = meet.meet(sealed)
                    if s is not None:
                        all_epochs.append(s.epoch)
                        if not s.closed:
                            open_epochs.append(s.epoch)
                        if at is not None:
                            t = s.session.advanced_past(at)
                            if t is not None:
                                behind.append(t)
                goal = min(open_epochs) if open_epochs else max(all_epochs, default=None)
                if at is None or goal is None or at >= goal:
                    behind = []  # caught up: an input ahead of another it is joined with is not a lag
                counts = d.latency_counts
                out.append({"name": n, "status": d.status, "error": None if d.error is None else str(d.error),
                            "operators": d.operators, "busy_s": d.busy_s, "steps": d.steps,
                            "frontier": d.frontier, "epoch": at, "inputs": ins, "input_frontier": meet,
                            "lag_epochs": 0 if at is None or goal is None else max(0, goal - at),
                            "lag_s": max(0.0, now - max(min(behind), d.installed_at or 0.0)) if behind else 0.0,
                            "latency_s": d.latency_s, "updated_at": d.updated_at,
                            "updates": 0 if counts is None else int(counts.sum()), "retired": n in snap.retired,
                            "serial": d.serial})
        return out

    def operator_stats(self, name: str) -> list:
        """Where dataflow ``name`` spends its time: one dict per operator (``operator``, its label as in
        errors, e.g. ``bfs: min#12``; ``kind``; ``busy_s``, seconds its steps took; ``steps``), busiest
        first. Read while the engine runs: each figure is at most one step old."""
        check_name(name, "eng.operator_stats", "a dataflow")
        self._live()
        df = self._scheduler.dataflows.get(name)
        if df is None:  # a replaced or dropped dataflow kept (as NAME~k) while others read its exports
            df = next((d for d in list(self._scheduler.retired) if d.name == name), None)
        if df is None:
            raise UnknownNameError(f"no dataflow named {name!r}; installed: {sorted(self.dataflows())}")
        ops = [{"operator": op.label(), "kind": op.kind, "busy_s": op.busy, "steps": op.steps}
               for op in list(df.graph.ops)]
        return sorted(ops, key=lambda o: -o["busy_s"])

    def wait_snapshot(self, seen: EngineSnapshot | None = None, timeout: float | None = None) -> EngineSnapshot:
        """The next published snapshot after ``seen`` (default: the current one), waiting up to ``timeout``
        seconds; the current one if none came. For pollers that react to every change of the engine's state
        without spinning (benchmarks, dashboards)."""
        seen = self.snapshot() if seen is None else seen
        if self._closed and seen is self.snapshot():
            raise EngineError("the engine is closed")  # (a poller saw the last snapshot: none will follow)
        self._scheduler.wait_published(seen, timeout)
        return self.snapshot()

    def latency_histogram(self, name: str) -> tuple:
        """(bucket edges in seconds, counts) of every update latency dataflow ``name`` measured: fixed
        log-spaced buckets (``kpgnb.engine.latency``: counts[0] is below edges[0], counts[i] in
        [edges[i-1], edges[i]), the last at or above edges[-1]); ``latency.ccdf(counts)`` gives its
        complementary CDF. Raises UnknownNameError for a dataflow that is not installed."""
        check_name(name, "eng.latency_histogram", "a dataflow")
        self._live()
        snap = self.snapshot()
        info = snap.dataflows.get(name) or snap.retired.get(name)
        if info is None:
            raise UnknownNameError(f"no dataflow named {name!r}; installed: {sorted(snap.dataflows)}")
        counts = info.latency_counts if info.latency_counts is not None else np.zeros(latency.BUCKETS, np.int64)
        return latency.EDGES, counts

    def stats(self, live: bool = False) -> dict:
        """Sizes and frontiers of every arrangement (``arrangements()``), dataflow status and progress
        (``dataflow_stats()``), latencies and worker load. With ``live=True`` each arrangement also
        reports ``live`` (see ``arrangements``)."""
        live = check_flag(live, "eng.stats: live")
        snap = self.snapshot()  # every part from this one snapshot: a dataflow listed anywhere is in all
        with snap.pinned():
            return self._stats(snap, live)

    def _stats(self, snap: EngineSnapshot, live: bool) -> dict:
        lat = np.array(self._scheduler.latency_samples()) * 1e3
        inputs = self._inputs_now(snap)
        return {
            "workers": self.workers,
            "arrangements": self._arrangements(live, snap, inputs),
            "dataflows": self._dataflow_stats(False, snap, inputs),
            "inputs": [{"name": n, "epoch": s.epoch, "closed": s.closed,
                        "failure": None if n not in snap.inputs or snap.inputs[n].failure is None
                        else str(snap.inputs[n].failure)} for n, s in inputs.items()],
            "latency_ms": {"count": int(len(lat)),
                           "p50": float(np.percentile(lat, 50)) if len(lat) else None,
                           "p99": float(np.percentile(lat, 99)) if len(lat) else None},
            "shard_busy_s": self._pool.busy.tolist(),
            "rounds": snap.rounds,
            "error": None if snap.error is None else str(snap.error),
            "ife": self.ife_stats(snap),
        }

    def ife_stats(self, snapshot: EngineSnapshot | None = None) -> list:
        """Per iterative-frontier-expansion operator (``Collection.ife``, ``kpgnb.graphs``' memory modes):
        ``dataflow``, ``operator``, ``mode`` (full, jod or drop), ``state_differences`` and
        ``join_differences`` (records kept), ``dropped`` (dropped pairs remembered), ``dropped_total``,
        ``recomputed`` (states recomputed because their entry was dropped), and ``bytes`` of each
        structure (``state``, ``join``, ``dropped_tracker``). Any thread; each figure is at most one step
        old. Only dataflows the (given, else current) snapshot lists are reported, retired ones (dropped or
        replaced, kept for readers of their exports: ``NAME~k``) included."""
        snap = snapshot or self.snapshot()
        out = []
        for name, info in list(snap.dataflows.items()) + list(snap.retired.items()):
            if not snap.gone(info):  # (as the other tables of one stats() skip it)
                out += [dict(r.report(), dataflow=name) for r in info.reports]
        return out

    # -- waiting ------------------------------------------------------------------------------------
    def wait(self, target=None, timeout: float | None = None, cancel_on_interrupt: bool = True):
        """Block the caller until ``target`` is current: a View (reflects every epoch its inputs were
        advanced to), a dataflow's name (all of its views do), an int epoch e (every view is final for the
        epochs before e), or None (every command sent so far is
        done and no dataflow has work left). Raises what the dataflow, its inputs or the engine failed
        with, TimeoutError after ``timeout`` seconds. Ctrl-C cancels the computation it waited for, unless
        ``cancel_on_interrupt=False`` (then it only stops waiting: the notebook's ``%dataflow wait``).
        Refused inside a dataflow (a user function): the scheduler running it is what it would wait for."""
        self._live()
        self._scheduler.refuse_inside()
        check_timeout(timeout, "eng.wait")
        cancel_on_interrupt = check_flag(cancel_on_interrupt, "eng.wait: cancel_on_interrupt")
        deadline = None if timeout is None else time.monotonic() + timeout
        if isinstance(target, View):
            if target.engine is not self:
                raise UsageError(f"eng.wait({target!r}): the view belongs to another engine; wait on it with "
                                 f"that engine")
            goal = self._view_goal(target)
            done = lambda snap: self._view_done(snap, target, goal)  # noqa: E731
        elif isinstance(target, str):
            snap = self.snapshot()
            if target not in snap.dataflows and target not in snap.retired:  # (kept NAME~k: its exports)
                raise UsageError(f"eng.wait({target!r}): no dataflow named {target!r} is installed "
                                 f"(dataflows: {', '.join(sorted(snap.dataflows)) or 'none'})")
            goals = self._view_goals(self._check_dataflow(snap, target))
            done = lambda snap: self._dataflow_done(snap, target, goals)  # noqa: E731
        elif target is None:
            seq = self._scheduler.submitted
            done = lambda snap: self._idle(snap, seq)  # noqa: E731
        elif isinstance(target, (int, np.integer)) and not isinstance(target, bool):
            e = int(target)
            done = lambda snap: self._epoch_done(snap, e)  # noqa: E731
        else:
            raise ArgumentTypeError(f"wait() takes a View, a dataflow name, an epoch or nothing, not "
                                    f"{type(target).__name__}")
        try:
            while True:
                self._live()
                snap = self.snapshot()
                if snap.error is not None:
                    raise EngineError(f"the engine failed: {snap.error}") from snap.error
                if done(snap):
                    return target
                left = 0.5
                if deadline is not None:
                    left = min(left, deadline - time.monotonic())
                    if left <= 0:
                        raise TimeoutError(f"eng.wait({target!r}) timed out after {timeout} s")
                self._scheduler.wait_published(snap, left)
        except KeyboardInterrupt:
            if cancel_on_interrupt:
                self._cancel_behind(target)
            raise

    def _view_goal(self, view: View):
        info = self._view_info(self.snapshot(), view)
        return self._goal_of(info, dict(info.view_sources).get(view.name))

    def _view_goals(self, info) -> dict:
        """Each view's goal (``_goal_of`` the inputs it reads), and the dataflow's own under None."""
        return {None: self._goal_of(info), **{n: self._goal_of(info, srcs) for n, srcs in info.view_sources}}

    def _dataflow_done(self, snap, name: str, goals: dict) -> bool:
        """Dataflow ``name``'s frontier has reached its goal, and every view its own."""
        info = self._check_dataflow(snap, name)
        if not _past(info.frontier, goals[None]):
            return False
        uppers = dict(info.view_uppers)
        return all(_past(uppers[n], g) for n, g in goals.items() if n is not None and n in uppers)

    def _view_info(self, snap, view: View):
        """The view's install in ``snap``; raises what the view's reads raise once it is gone (another
        install of the dataflow's name is not the view's)."""
        view.check(snap)
        return self._check_dataflow(snap, view.dataflow)

    @staticmethod
    def _check_dataflow(snap, name: str):
        # (a dropped or replaced dataflow kept while its exports are read is waited for by its listed name)
        info = snap.dataflows.get(name) or snap.retired.get(name)
        if info is None:
            raise UsageError(f"dataflow {name!r} was dropped")
        if info.error is not None:
            raise_failure(name, info.error)
        for src in info.sources:
            inp = snap.inputs.get(src)
            if inp is not None and inp.failure is not None:
                raise EngineError(f"input {src!r}, which dataflow {name!r} reads, cannot seal its epochs: "
                                  f"{inp.failure} ({_how(inp)})") from inp.failure
        return info

    def _view_done(self, snap, view: View, goal) -> bool:
        """Decided on the published snapshot, not the view's live trace: a wait returns with the state the
        scheduler published after the step (its tidying done, what ``stats()`` shows next), never from
        the middle of a scheduler pass."""
        info = self._view_info(snap, view)
        f = dict(info.view_uppers).get(view.name)
        # (a view released after the check above is not done: the next pass raises why)
        return f is not None and not view.released and _past(f, goal)

    def _epoch_done(self, snap, epoch: int) -> bool:
        for name, info in snap.dataflows.items():
            self._check_dataflow(snap, name)
            if not all(_past(f, epoch) for _, f in info.view_uppers):
                return False
        return True

    def _idle(self, snap, seq: int) -> bool:
        for name, inp in snap.inputs.items():
            if inp.failure is not None:
                raise EngineError(f"input {name!r} cannot seal its epochs: {inp.failure} ({_how(inp)})") \
                    from inp.failure
        return snap.seq >= seq and snap.quiet

    def _cancel_behind(self, target):
        """Ctrl-C in wait: cancel the computations the caller was waiting for that have not caught up with
        their inputs (a wait for an epoch the inputs have not reached spares those that have: they are
        not computing)."""
        snap = self.snapshot()
        for name, info in snap.dataflows.items():
            if info.error is not None or (isinstance(target, View) and (name, info.serial) != (target.dataflow,
                                                                                    target.serial)) or \
                    (isinstance(target, str) and name != target):
                continue
            goals = self._view_goals(info)  # (None under None: the dataflow's own frontier, exports too)
            if isinstance(target, (int, np.integer)):
                goals = {n: int(target) if g is None else min(g, int(target)) for n, g in goals.items()}
            uppers = dict(info.view_uppers)
            if isinstance(target, View):
                behind = target.name in uppers and not _past(uppers[target.name], goals.get(target.name))
            else:
                behind = not _past(info.frontier, goals[None]) or any(
                    not _past(uppers[n], g) for n, g in goals.items() if n is not None and n in uppers)
            if behind:
                self._scheduler.submit(Cancel(name, "interrupted while waiting (KeyboardInterrupt)", info.serial))

    def _goal_of(self, info, sources=None):
        """The epoch a dataflow's views must reach: the least its open inputs (or ``sources``, those one
        view reads) were advanced to (None: every one closed, so the frontiers must become empty)."""
        inputs = self.inputs()
        goals = [inputs[n].epoch for n in (info.sources if sources is None else sources)
                 if n in inputs and not inputs[n].closed]
        return min(goals) if goals else None

    # -- lifecycle ------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: every call but the introspection ones (``stats``, ``dataflows``,
        ``catalog``, ``inputs``, ``snapshot``) then raises EngineError("the engine is closed")."""
        return self._closed

    def _live(self):
        if self._closed:
            raise EngineError("the engine is closed")

    def close(self):
        """Stop the scheduler and worker threads; every dataflow is released."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.stop()  # (its thread shuts the worker pool down as it ends)

    shutdown = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        snap = self.snapshot()
        return (f"Engine(workers={self.workers}, inputs={sorted(self.inputs())}, "
                f"dataflows={sorted(snap.dataflows)}, arrangements={sorted(snap.catalog)})")


def _record_input(engine, session):
    """An input of ``engine`` created: into the list of ``recording_inputs`` where this thread records them."""
    recording = _INPUTS.get()
    if recording is not None and recording[0] is engine:
        recording[1].append(session)


def _past(frontier: Antichain, goal) -> bool:
    """Whether a top-level frontier has reached epoch ``goal`` (None: it must be empty, all inputs closed)."""
    e = epoch_of(frontier)
    if e is None:
        return True
    return goal is not None and e >= goal


def _how(inp) -> str:
    """What becomes of an input's failed seal (a snapshot's InputInfo)."""
    return f"for good: eng.drop_input({inp.name!r}) and load it again" if inp.broken else "retrying"
