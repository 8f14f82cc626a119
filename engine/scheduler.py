"""The scheduler: the one thread that changes engine state (DESIGN.md section 3, layer 7).

Ownership, written down because everything else relies on it:
- The scheduler thread alone writes traces, installed dataflows, the catalog and the sealed state of
  inputs. Other threads append typed commands (:mod:`.commands`) to ``_cmds`` (under ``_submit_lock``,
  which also numbers them) and wait on a command's reply if they need an answer.
- After every step it publishes an immutable :class:`~.snapshot.EngineSnapshot` (one assignment, then
  ``_published`` is notified). Readers only ever look at snapshots (and at traces' own snapshots), so they
  see complete steps and never block the scheduler.
- The heavy per-shard work runs on the worker pool (``run``), inside a step, on behalf of the scheduler.

Errors are attached to what they concern: an operator's to its dataflow (failed; dataflows reading its
exports fail too), a seal's to its input (retried; the input's next call raises), anything else to the
engine (sticky: every wait raises). Commands arriving while dataflows compute make the graph yield
between operator steps, so drops, cancels and installs are served while a long computation runs.
"""
from __future__ import annotations

import contextvars
import itertools
import sys
import threading
import time
import warnings
import weakref
from collections import Counter, deque

from . import faults
from .catalog import Catalog, CatalogEntry
from .commands import Cancel, Collect, Discard, Drop, DropInput, Follow, Install, OpenHandle, Own, Seal
from .errors import Cancelled, DataflowError, EngineError, KpgnbError, UnknownNameError, UsageError
from .lattice import Antichain
from .latency import LatencyHistogram
from .scope import epoch_of
from .snapshot import DataflowInfo, EngineSnapshot, InputInfo
from .view import rows_decoder

RETRY_S = 0.2  # how soon a failed seal is tried again when nothing else wakes the scheduler
SLICE_S = 0.05  # a dataflow runs this long before the next one gets its turn
PUBLISH_S = 0.5  # during a long computation, statistics are published this often
STOP_WAIT_S = 10.0  # how long close() waits for a step in progress (a slow user function) before it warns
IDLE_S = 0.02  # merges are finished after this long without commands (a closed loop of updates never waits for it)
IDLE_FUEL = 20_000  # rows of merging per shard per idle maintenance step (a fraction of a millisecond)
SWITCH_S = 0.001  # the interpreter's thread switch interval, at most (see Scheduler.__init__)


_SERIALS = itertools.count(1)


def _reads(op, inputs, imported: dict) -> frozenset:
    """The names of the inputs whose changes reach ``op`` (a view's sink)."""
    return frozenset(s.name for s in _reaching(op, inputs, imported))


def _reaching(op, inputs, imported: dict) -> set:
    """The input sessions whose changes reach ``op``: the sessions behind the imports upstream of it, an
    imported export's being those that reach it in its producer (``imported``: export name -> sessions),
    not every input its producer reads."""
    by_trace = {id(s.trace): s for s in inputs}
    seen, todo, out = set(), [op], set()
    while todo:
        op = todo.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.kind == "import":
            session = by_trace.get(id(op.trace))
            out |= {session} if session is not None else imported.get(op.name, set())
        todo.extend(op.inputs)
    return out


class Dataflow:
    """An installed dataflow (scheduler-owned)."""

    def __init__(self, name, graph, views, exports, uses, sources, context=None):
        self.name = name
        self.serial = next(_SERIALS)
        self.context = context or contextvars.copy_context()  # its steps run in it (see commands.Install)
        self.graph = graph
        self.views = views          # view name -> View
        for v in views.values():
            v.serial = self.serial  # which install the view belongs to (a replacement has another)
        self.exports = exports      # names this dataflow exports
        self.uses = set(uses)       # export names it imports
        self.sources = sources      # InputSessions it reads, directly or through imports
        self.view_sources: dict = {}  # view name -> the names of the inputs that view reads (``_reads``)
        self.error: BaseException | None = None
        self.ended = None           # None, "failed" or "cancelled"
        self.dropped = False
        self.pruned = False
        self.followers = weakref.WeakSet()
        self.owned: list = []       # InputSessions made for it alone: dropped when it is gone (``_gone``)
        self.held: list = []        # (failed while dropped) the catalog entries of its exports handles read
        self._shape = None
        self._info = None           # the last DataflowInfo, and what it was computed from
        self._last_ops = self._last_n = self._last_ops_f = None  # the operators ``frontier`` reads, per shape
        self._info_key = None
        self._epoch = 0             # its frontier's epoch when last published
        self._installed = time.perf_counter()
        self.latency_s = None
        self.updated_at = None
        self.latencies = LatencyHistogram()  # every update's latency, in fixed memory (engine/latency.py)

    @property
    def status(self) -> str:
        if self.ended is not None:
            return self.ended
        return "dropped (kept while its exports are read)" if self.dropped else "running"

    def release(self):
        self.end_views(self.error if self.error is not None else f"dataflow {self.name!r} has been dropped")
        for op in self.graph.ops:
            op.release()
        self._info = None  # (it holds the arrangements' last published contents)

    def end_views(self, why):
        """Tell the views why they end (an error, or a sentence), before their traces are released."""
        for v in self.views.values():
            if v.end_reason is None:
                v.end_reason = why

    def frontier(self) -> Antichain:
        """The meet of its top-level operators' output frontiers, and for a view or an export the upper of
        the arrangement it reads (an arrangement whose input frontier moved has not sealed up to it until
        it steps, and readers read the trace). One that feeds another top-level operator is left out: a
        consumer's frontier is never ahead of its input's (top-level operators keep times)."""
        ops = self.graph.ops
        if self._last_ops is not ops or len(ops) != self._last_n:
            self._last_ops, self._last_n = ops, len(ops)
            self._last_ops_f = [op for op in ops if op.scope.depth == 1
                                and not any(c.scope.depth == 1 for c, _ in op.consumers)]
        out = Antichain()
        for op in self._last_ops_f:
            out = out.meet(op.out_frontier)
            trace = op.handle.live_trace() if op.kind in ("view", "export") and op.handle is not None else None
            if trace is not None:
                out = out.meet(trace.snapshot.upper)
        return out

    def reflected(self):
        """The last epoch its published frontier reflects (None: every epoch, its frontier is empty)."""
        return None if self._epoch is None else self._epoch - 1

    def note_progress(self, frontier: Antichain, now: float):
        """When the frontier moved, the latency of its newest epoch: from the first ``advance_to`` that
        let each source reach it (the latest of those, or the install) to now. Every update the move
        completed goes into the histogram: each seal of a source whose epoch the move covered, timed
        from its ``advance_to`` (seals from before the install count once, as the install)."""
        e = epoch_of(frontier)
        if e == self._epoch:
            return
        prev, self._epoch = self._epoch, e
        sealed = [self._installed]
        added, before_install = 0, False
        for s in self.sources:
            t = None  # the first seal that reached e: seals go up in epoch, so look back from the newest
            for ep, t0 in reversed(s.seals):
                if ep is not None and (e is None or ep < e):
                    break
                t = t0
            if t is not None:
                sealed.append(t)
            for ep, t0 in reversed(s.seals):  # newest first, back to the seals an earlier move covered
                if ep is not None and prev is not None and ep <= prev:
                    break
                if e is not None and (ep is None or ep > e):
                    continue  # not reflected yet
                if t0 <= self._installed:
                    before_install = True
                else:
                    self.latencies.add(now - t0)
                    added += 1
        self.latency_s = now - max(sealed)
        if before_install:
            self.latencies.add(now - self._installed)
        elif not added:
            self.latencies.add(self.latency_s)
        self.updated_at = time.time()

    def info(self, commands: int) -> DataflowInfo:
        """What the snapshot shows of it; the last one again while its graph, error, ending and
        arrangements' contents are unchanged and no scheduler command ran (``commands``, the scheduler's
        count of them): its name, links and views change only by commands (an engine with many dataflows
        publishes after every step of any of them)."""
        ops = self.graph.ops
        shape = (len(ops), len(self.views), self.ended, self.dropped)
        if self._shape != shape:  # the arrangements and views only change with the graph's shape
            self._shape = shape
            owned = [(getattr(t, "name", None) or f"{op.kind}#{op.index}", op, t)
                     for op in ops for t in op.owned_traces()]
            seen = Counter(label for label, _, _ in owned)  # a label two traces share gets the operator's index
            self._traces = tuple((label if seen[label] == 1 or "#" in label else f"{label}#{op.index}",
                                  weakref.ref(t)) for label, op, t in owned)
            self._views = tuple((n, weakref.ref(v.op.handle.trace)) for n, v in self.views.items()
                                if v.op.handle is not None and v.op.handle.alive)
            builder = getattr(self.graph, "builder", None)
            self._reports = tuple(builder.reports) if builder is not None else ()
        # the arrangements' contents as of this snapshot (their own snapshots move on within a step, before
        # the engine publishes it): statistics read these, so a dataflow and its arrangements agree
        contents = tuple([None if (t := ref()) is None else t.snapshot for _, ref in self._traces])
        key = (self.graph.changes, self.error, self.ended, self.dropped, commands)
        if self._info is not None and self._info_key == key and all(
                a is b for a, b in zip(contents, self._info.trace_contents)):
            return self._info
        traces, views = self._traces, self._views
        frontier = self.frontier()
        self.note_progress(frontier, time.perf_counter())
        self._info_key = key
        self._info = DataflowInfo(self.name, self.status, self.error, frontier,
                                  frozenset(s.name for s in self.sources), tuple(self.exports),
                                  tuple(sorted(self.uses)), len(ops), sum(op.busy for op in ops),
                                  sum(op.steps for op in ops), traces, views, self.latency_s, self.updated_at,
                                  self.serial, latency_counts=self.latencies.published(),
                                  installed_at=self._installed,
                                  view_uppers=tuple((n, t.snapshot.upper) for n, ref in views
                                                    for t in [ref()] if t is not None),
                                  view_sources=tuple(self.view_sources.items()), trace_contents=contents,
                                  reports=self._reports)
        return self._info


class Scheduler:
    def __init__(self, pool):
        self.pool = pool
        self._cmds: deque = deque()
        self._submit_lock = threading.Lock()
        self._submitted = 0
        self._done = 0
        self._wake = threading.Event()
        self._published = threading.Condition()
        self.snapshot = EngineSnapshot(seq=0, quiet=True)
        self.dataflows: dict = {}
        self.retired: list = []        # dropped dataflows still maintaining exports that others read
        self._replaced = 0             # dataflows replaced so far (numbers their retired names)
        self.replaced_serials = frozenset()  # the installs replaced by a later one of their name (not dropped)
        self._successor = None         # the dataflow being installed while the one it replaces is dropped
        self.catalog = Catalog()
        self.inputs: dict = {}         # sessions that have sent a seal
        self._input_infos: dict = {}   # name -> the InputInfo last published for it
        self._dirty: dict = {}         # sessions with accepted, unapplied seals (ordered)
        self._failing: dict = {}       # sessions whose last seal failed
        self._commands = 0             # commands other than seals executed (Dataflow.info's short cut)
        self._sealed_at: list = []
        self.error: BaseException | None = None
        self.rounds = 0
        self.latencies: deque = deque(maxlen=100_000)
        self._lat_lock = threading.Lock()
        self._stop = False
        self._slice_end = 0.0
        self._untidied = False         # operators stepped or seals applied since tidying last ran after a step
        self._turn = 0                 # where the next pass over the dataflows starts (round robin)
        self._order = ((), [])         # (the dataflows it was computed for, their run order): ``_run_order``
        # Kernels release the GIL, and each call takes it back: with another thread busy in Python (a cell
        # polling eng.stats() in a loop) every take waits a whole switch interval, 5 ms by default, and a
        # step of a few thousand kernel calls stalls for seconds. A 1 ms interval bounds that.
        if sys.getswitchinterval() > SWITCH_S:
            sys.setswitchinterval(SWITCH_S)
        self.thread = threading.Thread(target=self._loop, name="kpgnb-scheduler", daemon=True)
        self.thread.start()

    # -- other threads ------------------------------------------------------------------------------
    def submit(self, cmd) -> int:
        """Queue a command (or a list of them, all or none: one extend, which no Ctrl-C splits); returns
        the serial of the (last) one."""
        cmds = cmd if isinstance(cmd, list) else [cmd]
        with self._submit_lock:
            if self._stop:
                raise EngineError("the engine is closed")
            first = self._submitted + 1
            self._submitted += len(cmds)
            for c in cmds:
                if isinstance(c, Seal):
                    c.queued = True  # (right before the extend: no Ctrl-C can land between the two)
            self._cmds.extend(zip(range(first, first + len(cmds)), cmds))
        self._wake.set()
        return self._submitted if len(cmds) == 1 else first + len(cmds) - 1

    def inside(self) -> bool:
        """Whether the caller is the scheduler's thread or one of its pool's (a user function running in an
        operator step, on any shard)."""
        return threading.current_thread() is self.thread or self.pool.on_pool()

    def refuse_inside(self):
        if self.inside():
            raise EngineError("engine calls that wait for the scheduler cannot be made from inside a dataflow")

    def call(self, cmd, timeout: float | None = None):
        """Submit a command with a reply and wait for its outcome."""
        self.refuse_inside()
        self.submit(cmd)
        return cmd.reply.wait(timeout)

    @property
    def submitted(self) -> int:
        return self._submitted

    def done(self) -> int:
        """The serial of the last command applied (``submit`` returns each one's)."""
        return self._done

    def wait_published(self, seen: EngineSnapshot, timeout: float):
        """Block until a snapshot newer than ``seen`` is published (or the timeout). Refused on the
        scheduler's own thread, the one that would have to publish it."""
        self.refuse_inside()
        with self._published:
            if self.snapshot is seen and not self._stop:  # (stopped: no snapshot is coming)
                self._published.wait(timeout)

    def stop(self, wait: float = STOP_WAIT_S):
        """Stop the scheduler: its thread answers the commands still queued, releases every dataflow and
        shuts the worker pool down as it ends (it owns that state), after the step it is in. Waits ``wait``
        seconds for that; a step still running then (a slow user function) is not cut short: a
        RuntimeWarning says so, and the thread ends when the step returns."""
        with self._submit_lock:
            self._stop = True
        self._wake.set()
        if self.inside():
            return  # (close() from a user function, on any shard: the loop ends after this step)
        self.thread.join(timeout=wait)
        if self.thread.is_alive():
            # the callers queued behind that step, and the followers, hear now that the engine is closed
            # (the scheduler thread does the rest when the step returns)
            self._refuse_queued()
            self._end_followers()
            warnings.warn(f"kpgnb: the engine is closed, but its scheduler is still running a step (a user "
                          f"function?) after {wait:g} s; it releases the engine's state when that step returns",
                          RuntimeWarning, stacklevel=3)

    def _shutdown(self):
        """The end of the loop once stopped (scheduler thread)."""
        self._refuse_queued()
        self._end_followers()
        for df in list(self.dataflows.values()) + self.retired:
            df.release()
        self.dataflows.clear()
        self.retired.clear()
        self._order = ((), [])
        self.catalog.clear()
        self._publish(True)
        self.pool.shutdown()

    def _end_followers(self):
        """Every follower of every view ends with EngineError (also called from the closing thread while a
        step still runs: the dataflows are only read, and a dict changing meanwhile is read again)."""
        for _ in range(3):
            try:
                dfs = list(self.dataflows.values()) + list(self.retired)
                break
            except RuntimeError:  # (changed size during the copy)
                continue
        else:
            return
        for df in dfs:
            for f in list(df.followers):
                f.end(EngineError("the engine is closed"))

    def _refuse_queued(self):
        """Answer the commands the engine will never execute (it is closed): a caller waiting on one gets
        EngineError instead of blocking forever. Seals still queued are dropped with the engine's state."""
        while True:
            try:
                _, cmd = self._cmds.popleft()
            except IndexError:
                return
            reply = getattr(cmd, "reply", None)
            if reply is not None:
                reply.finish(error=EngineError("the engine is closed"))

    # -- operators' runtime (scheduler thread) ----------------------------------------------------
    def run(self, fn, items, rows: int | None = None):
        return self.pool.run(fn, items, rows)

    def interrupted(self) -> bool:
        """Whether a running graph should yield: a command is waiting, or its time slice is over."""
        return bool(self._cmds) or self._stop or time.perf_counter() > self._slice_end

    # -- the loop -----------------------------------------------------------------------------------
    def _loop(self):
        more = False
        settle_at = None  # when idle merging may run (None: nothing happened since it last ran out of work)
        while True:
            quiet = True
            if not more:
                timeout = RETRY_S if self._failing else None
                if settle_at is not None:
                    wait = max(0.0, settle_at - time.perf_counter())
                    timeout = wait if timeout is None else min(timeout, wait)
                self._wake.wait(timeout)
            self._wake.clear()
            if self._stop:
                self._shutdown()
                return
            try:
                faults.point("scheduler")
                busy = bool(self._cmds)
                self._untidied = self._untidied or busy
                self._execute_commands()
                for s in list(self._failing):
                    self._apply(s)
                more = not self._run_dataflows()
                self._collect()
                quiet = not more
                now = time.perf_counter()
                if busy or more:
                    settle_at = now + IDLE_S
                if quiet and not self._cmds:
                    settled = not busy and settle_at is not None and now >= settle_at
                    # after a step (this iteration's or an earlier one cut short), every trace whose
                    # readers moved is tidied before the quiet snapshot is published
                    every = self._untidied
                    more = self._idle_maintenance(merges=settled, every=every)
                    if every:
                        self._untidied = False
                    if settled and not more:
                        settle_at = None
            except BaseException as e:  # noqa: BLE001 - the scheduler must survive anything
                err = EngineError(f"the engine's scheduler failed: {type(e).__name__}: {e}")
                err.__cause__ = e
                self.error = err
                more, quiet = False, True
                try:
                    self._execute_commands()  # callers waiting on a command still get their answer
                except BaseException:  # noqa: BLE001 - the error above is what the engine reports
                    more = bool(self._cmds)
                    quiet = not more
            now = time.perf_counter()
            if self._sealed_at:
                with self._lat_lock:
                    self.latencies.extend(now - t0 for t0 in self._sealed_at)
                self._sealed_at = []
            self.rounds += 1
            self._publish(quiet)

    def _execute_commands(self):
        while self._cmds:
            seq, cmd = self._cmds.popleft()
            if isinstance(cmd, Seal):
                s = cmd.session
                if s.dropped:
                    self._done = seq
                    continue  # sent just before the input was dropped
                s.accept(cmd)
                self.inputs[s.name] = s
                self._dirty[s] = None
                self._sealed_at.append(cmd.submitted)
            else:
                self._apply_dirty()  # commands are barriers: an install sees the seals sent before it
                self._execute(cmd)
            self._done = seq
        self._apply_dirty()

    def _apply_dirty(self):
        dirty, self._dirty = self._dirty, {}
        for s in dirty:
            self._apply(s)

    def _apply(self, session):
        session.apply(self.run)
        if session.broken is not None:
            self._broken(session)
        elif session.failure is None:
            self._failing.pop(session, None)
        else:
            self._failing[session] = None

    def _broken(self, session):
        """An input that cannot take its epochs (``InputSession.broken``) is not retried, and the dataflows
        reading it fail with its error."""
        self._failing.pop(session, None)
        error = OverflowError(f"input {session.name!r}: {session.broken}")
        for df in list(self.dataflows.values()):
            if df.error is None and session in df.sources:
                self._fail(df, error)

    def _execute(self, cmd):
        self._commands += 1
        for df in list(self.dataflows.values()) + self.retired:
            df.graph.wake()  # (a command may reach into a dataflow: its next run must look)
        if isinstance(cmd, Cancel):
            df = self.dataflows.get(cmd.name)
            if df is not None and df.error is None and cmd.serial in (None, df.serial):
                self._fail(df, Cancelled(f"dataflow {cmd.name!r} was cancelled ({cmd.reason})"), "cancelled")
            return
        if isinstance(cmd, Collect):
            self._collect()
            return
        if isinstance(cmd, Discard):
            df = self.dataflows.get(cmd.name)
            if df is not None and df.serial == cmd.serial and not any(
                    set(df.exports) & d.uses for d in list(self.dataflows.values()) + self.retired if d is not df):
                self._discard(df)  # (a dataflow that reads its exports already keeps it: it is in use)
                self._publish(False)
            return
        handler = {Install: self._install, Drop: self._drop_cmd, DropInput: self._drop_input, Own: self._own,
                   OpenHandle: self._open_handle, Follow: self._follow}[type(cmd)]
        if not cmd.reply.take():
            return  # the caller gave up before we got to it
        try:
            result = handler(cmd)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            cmd.reply.finish(error=e)
            return
        self._publish(False)
        if cmd.reply.finish(result):
            return
        if isinstance(cmd, Install) and not cmd.replaced:
            # interrupted install: leave nothing behind (one that replaced a dataflow keeps the new one: the
            # old one is gone already, and neither would be left)
            self._discard(self.dataflows[cmd.builder.name])
            self._publish(False)
        elif isinstance(cmd, OpenHandle):
            result.close()  # (nobody gets it)

    # -- running ------------------------------------------------------------------------------------
    def _run_dataflows(self) -> bool:
        """Run every live dataflow, a time slice each in turn, until all are quiet (True), a command is
        waiting or it is time to publish progress (False). Turns go round robin across calls: a pass cut
        short resumes with the dataflow after the one it ended with, so that while commands keep coming
        (an input sealing an epoch every few milliseconds) the dataflows installed first, which always
        have the newest epoch to work on, do not starve the others. A dataflow that ran out of work and
        that nothing has reached since (``Graph.quiet``) is not run: an update that one dataflow passes to
        another costs a run of those two, not of every dataflow installed."""
        publish_at = time.perf_counter() + PUBLISH_S
        progressed = True
        while progressed:
            progressed = False
            dfs = [d for d in self._run_order() if d.error is None]
            start = self._turn % len(dfs) if dfs else 0
            for i in range(len(dfs)):
                df = dfs[(start + i) % len(dfs)]
                self._turn = start + i + 1
                if df.error is not None or df.graph.quiet():
                    continue  # failed in this pass (a failure ends its readers too), or nothing reached it
                self._slice_end = time.perf_counter() + SLICE_S
                try:
                    if df.context.run(df.graph.run, self):
                        progressed = self._untidied = True
                except Exception as e:  # noqa: BLE001 - one failing dataflow must not stop the others
                    self._fail(df, e)
                if self._cmds or self._stop or time.perf_counter() > publish_at:
                    return False
        self._turn = 0  # every dataflow is quiet: the next update's pass starts with the producers
        return True

    def _run_order(self) -> list:
        """Live and retired dataflows, each after the dataflows whose exports it imports (else in install
        order), so that one pass carries an update from an index to the queries reading it: a reader run
        before its producer would run again for the same update."""
        dfs = list(self.dataflows.values()) + self.retired
        # what the order depends on changes only by commands (installs, drops, renamed exports), except
        # for dataflows leaving the retired list (``_collect``): a stale order would still run them all
        key = (tuple(dfs), self._commands)
        if key != self._order[0]:
            producer = {e: d for d in dfs for e in d.exports}

            def producers(d):
                return iter([producer[e] for e in sorted(d.uses) if e in producer])
            order, placed = [], set()
            for d in dfs:  # depth first, producers placed before their readers (no recursion: long chains)
                if id(d) in placed:
                    continue
                stack, path = [(d, producers(d))], {id(d)}
                while stack:
                    top, todo = stack[-1]
                    nxt = next((p for p in todo if id(p) not in placed and id(p) not in path), None)
                    if nxt is None:  # (a cycle cannot be built: install order would break one)
                        stack.pop()
                        path.discard(id(top))
                        placed.add(id(top))
                        order.append(top)
                    else:
                        path.add(id(nxt))
                        stack.append((nxt, producers(nxt)))
            self._order = (key, order)
        return self._order[1]

    def _idle_maintenance(self, merges: bool, every: bool = False) -> bool:
        """While nothing else is to do, tidy bloated traces and, once idle for ``IDLE_S`` (``merges``),
        finish merges in progress (K-Pg's idle merging). Right after a step (``every``) each trace whose
        readers' frontiers moved gets one tidying slice before the step is published, so a published
        snapshot does not show what compaction has just made removable; otherwise one trace gets one
        slice, so a command waits at most one slice. Returns whether any trace has more to do. A
        failure is its owner's: an input reports it from its next call, a dataflow fails."""
        found = False
        for s in list(self.inputs.values()):
            if s.broken is None and s.trace.idle_work(merges):
                s.tidy(IDLE_FUEL, self.run)
                if s.broken is not None:
                    self._broken(s)
                if not every:
                    return True
                found = found or s.trace.idle_work(merges)  # (a slice mostly finishes a small tidy)
        for df in list(self.dataflows.values()) + self.retired:
            for op in df.graph.ops:
                if df.error is not None:
                    break
                t = op.owned_trace()
                if t is not None and t.idle_work(merges):
                    try:
                        t.exert(IDLE_FUEL, self.run)
                    except Exception as e:  # noqa: BLE001 - the dataflow's state failed, as in a step
                        self._fail(df, e)
                    if not every:
                        return True
                    found = found or (df.error is None and t.idle_work(merges))
        return found

    def _fail(self, df: Dataflow, error: BaseException, how: str = "failed"):
        """End a dataflow and the dataflows reading its exports: record why, publish it, then free their
        state, so whoever finds a view's trace gone finds the reason in the snapshot too."""
        ended = self._end(df, error, how, [])
        if not ended:
            return
        self._publish(False)
        for d in ended:
            d.release()
            for f in list(d.followers):
                f.end(d.error)
            if self.dataflows.get(d.name) is not d and d not in self.retired:  # a dropped one, kept for
                self._gone(d)                                                   # its readers: gone now

    def _end(self, df: Dataflow, error: BaseException, how: str, ended: list) -> list:
        """``_fail``'s bookkeeping: the error of ``df`` and of every dataflow reading its exports (appended
        to ``ended``); their exports leave the catalog."""
        if df.error is not None:
            return ended
        if not isinstance(error, KpgnbError):
            wrapped = DataflowError(f"{type(error).__name__}: {error}")
            wrapped.__cause__ = error
            error = wrapped
        df.error, df.ended = error, how
        ended.append(df)
        exports = set(df.exports)
        entries = [self.catalog.get(e) for e in exports]
        for e in exports:
            self.catalog.remove(e)
        # a dropped dataflow kept for trace handles stays listed, failed, while they are open (and so does
        # one dropped after it failed): the handles' upper stops moving, and the listing says why
        # (``_collect`` lets it go after)
        df.held = [en for en in entries if en is not None and en.has_handles()]
        if df in self.retired and not df.held:
            self.retired.remove(df)
        for other in list(self.dataflows.values()) + list(self.retired):
            if other.error is None and other.uses & exports:
                err = DataflowError(f"dataflow {other.name!r} reads {sorted(other.uses & exports)} from dataflow "
                                    f"{df.name!r}, which {how}: {error}")
                err.__cause__ = error
                self._end(other, err, "failed", ended)
        return ended

    # -- commands -----------------------------------------------------------------------------------
    def _install(self, cmd: Install):
        b = cmd.builder
        name = b.name
        old = self.dataflows.get(name)
        if old is not None and not cmd.replace:
            raise UsageError(f"a dataflow named {name!r} is installed already")
        held = []  # exports of this name by dropped dataflows, kept for their readers: renamed below
        for ename in b.exports:
            entry = self.catalog.get(ename)
            if entry is not None and entry.producer in self.retired:
                held.append(entry)
            elif entry is not None and (old is None or entry.producer is not old):
                raise UsageError(f"an arrangement named {ename!r} is exported already "
                                 f"(by dataflow {entry.producer.name!r})")
            if ename in b.uses:
                raise UsageError(f"dataflow {name!r} both imports and exports {ename!r}")
        for uname, (ref, producer) in b.uses.items():
            entry = self.catalog.get(uname)
            if entry is None or entry.trace is not ref():
                ended = self.dataflows.get(producer)
                if ended is not None and ended.error is not None:
                    raise DataflowError(f"dataflow {name!r} reads {uname!r} from dataflow {producer!r}, which "
                                        f"{ended.ended}: {ended.error}") from ended.error
                if entry is not None:  # the name is exported again, by a replacement of its dataflow
                    raise UsageError(f"dataflow {name!r} reads {uname!r} as dataflow {producer!r} exported it "
                                     f"when {name!r} was built; {uname!r} has been replaced since (by "
                                     f"dataflow {entry.producer.name!r}): build {name!r} again to read the "
                                     f"new one")
                raise UsageError(f"no arrangement named {uname!r} is exported any more (it was dropped)")
        gone = sorted(src.name for src in b.sources if src.dropped)
        if gone:
            raise UsageError(f"dataflow {name!r} reads input {gone[0]!r}, which was dropped")
        ops = b.graph.ops
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
            op.finish_install()
        b.graph.start_reads()
        b.graph.compute_frontiers()  # a dataflow's published frontier is valid from the start
        sources = set(b.sources)
        imported = {uname: self.catalog.get(uname).sources for uname in b.uses}
        for s_ in imported.values():
            sources |= s_
        df = Dataflow(name, b.graph, b.views, list(b.exports), set(b.uses), sources, cmd.context)
        df.view_sources = {n: _reads(v.op, b.sources, imported) for n, v in b.views.items()}
        b.serial = df.serial
        df.owned = list(b.owned)
        namesakes = [d for d in self.retired if d.name == name]
        if held or namesakes:
            # a dropped dataflow's export, kept while others read it, gives its name up to the new one (the
            # cell that made it is run again): its readers keep the old arrangement; a dropped dataflow of
            # the new one's name is listed as NAME~k
            k = self._suffix([name] if namesakes else [], [entry.name for entry in held])
            for entry in held:
                self._rename_export(entry.producer, entry.name, k)
            for d in namesakes:
                self._rename(d, k)
        if old is not None:
            # the new dataflow reads what it uses already: dropping the old one must not collect an
            # arrangement (of a dropped producer) that only the two of them read
            cmd.replaced = True
            self._successor = df
            try:
                self._replace(old, set(b.exports))
            finally:
                self._successor = None
        for ename, ex in b.exports.items():
            self.catalog.add(CatalogEntry(ename, ex.op.handle.trace, ex.schema, ex.keys, ex.vals, df, ex.op,
                                          _reaching(ex.op, b.sources, imported)))
        self.dataflows[name] = df
        broken = [src for src in sorted(sources, key=lambda src: src.name) if src.broken is not None]
        if broken:  # it can never read the input's next epochs: failed as the input's readers were
            self._broken(broken[0])
        return df.name

    def _discard(self, df: Dataflow):
        self.dataflows.pop(df.name, None)
        df.release()
        for e in df.exports:
            self.catalog.remove(e)
        self._gone(df)

    def _own(self, cmd: Own):
        df = self.dataflows.get(cmd.dataflow)
        if df is None:
            raise UnknownNameError(f"no dataflow named {cmd.dataflow!r}; installed: {sorted(self.dataflows)}")
        df.owned += [s for s in cmd.sessions if s not in df.owned]

    def _gone(self, df: Dataflow):
        """``df`` is listed no more (dropped, and not kept for readers of its exports): the inputs made for
        it alone go too (one that another dataflow reads stays: nothing but its owner should)."""
        for session in df.owned:
            if session.dropped or any(session in d.sources for d in list(self.dataflows.values()) + self.retired
                                      if d.error is None):
                continue
            self._drop_input(DropInput(session.name, session))
        df.owned = []

    def _drop_cmd(self, cmd: Drop):
        self._drop(cmd.name, cmd.cascade)

    def _drop(self, name: str, cascade: bool):
        kept = next((d for d in self.retired if d.name == name), None) if name not in self.dataflows else None
        if name not in self.dataflows and kept is None:
            raise UnknownNameError(f"no dataflow named {name!r}; installed: {sorted(self.dataflows)}")
        handled = [e for e in kept.exports if getattr(self.catalog.get(e), "has_handles", bool)()] \
            if kept is not None else []
        if kept is not None and (not cascade or handled):
            # (a cascade drops dataflows, not the user's trace handles: it would leave the kept one there)
            raise UsageError(f"{self._holders(kept, set())}; eng.drop({name!r}, cascade=True) drops the "
                             f"dataflows{' once the handles are closed' if handled else ' too'}")
        # with cascade, the dataflows reading its exports, and theirs, ... also through dropped ones kept for
        # their readers (those go once nothing reads them)
        found = [self.dataflows[name] if kept is None else kept]
        more = cascade
        while more:
            exports = {e for d in found for e in d.exports}
            more = [d for d in list(self.dataflows.values()) + self.retired
                    if not any(d is f for f in found) and d.uses & exports]
            found += more
        for df in reversed(found):  # (readers first) all retired before anything is collected: a dropped
            if self.dataflows.get(df.name) is df:  # dataflow kept for a trace handle keeps what it reads
                self._retire(self.dataflows.pop(df.name))
        self._collect()

    def _retire(self, df: Dataflow):
        """A dataflow dropped: its views end; it stays (among ``retired``) while its exports are read."""
        for f in list(df.followers):
            f.end(None)
        if df.error is not None:  # failed or cancelled: released already
            if any(en.has_handles() for en in df.held):
                df.dropped = True
                self.retired.append(df)  # listed while trace handles read what it exported
            else:
                self._gone(df)
            return
        df.end_views(f"dataflow {df.name!r} has been dropped")
        for v in df.views.values():
            v.op.release()
        df.views = {}
        df.dropped = True
        self.retired.append(df)

    def _drop_input(self, cmd: DropInput):
        readers = sorted((d for d in list(self.dataflows.values()) + self.retired
                          if d.error is None and any(src.name == cmd.name for src in d.sources)),
                         key=lambda d: d.name)
        if readers:
            live = [repr(d.name) for d in readers if d not in self.retired]
            named = {r.name for r in readers}
            held = [self._holders(d, named) for d in readers if d in self.retired]
            what = []
            if live:
                what.append(f"dataflow{'s' if len(live) > 1 else ''} {', '.join(live)} (drop "
                            f"{'them' if len(live) > 1 else 'it'} first)")
            what += held
            raise UsageError(f"input {cmd.name!r} is read by {'; and by '.join(what)}")
        session = cmd.session
        session.dropped = True
        if self.inputs.get(cmd.name) is session:
            del self.inputs[cmd.name]
            self._input_infos.pop(cmd.name, None)
        self._dirty.pop(session, None)
        self._failing.pop(session, None)
        session.release()

    def _holders(self, df: Dataflow, named: set) -> str:
        """What keeps a dropped dataflow's exports alive (besides the dataflows ``named`` already), for an
        error that asks to let them go."""
        out = []
        for e in df.exports:
            entry = self.catalog.get(e)
            users = sorted(d.name for d in list(self.dataflows.values()) + self.retired
                           if d is not df and d.name not in named and e in d.uses)
            if users:
                out.append(f"dataflow{'s' if len(users) > 1 else ''} {', '.join(map(repr, users))} "
                           f"(reading {e!r}: drop {'them' if len(users) > 1 else 'it'} first)")
            if entry is not None and entry.has_handles():
                out.append(f"an open handle on {e!r} (eng.trace({e!r}): close it first)")
        return (f"dropped dataflow {df.name!r}, kept for its exports while " + " and ".join(out)) if out else \
            f"dropped dataflow {df.name!r}"

    def _replace(self, old: Dataflow, exports: set):
        """Retire ``old`` in favour of a new dataflow of its name (installed in this same step). It is
        renamed ``NAME~k``, and so are its exports the new one defines again, in the catalog and in the
        ``uses`` of their readers: those readers keep the old arrangement, later ``use``s get the new one.
        Then it is dropped as usual (kept, pruned, while its exports are read)."""
        # (a failed or cancelled dataflow's exports left the catalog when it ended: nothing to rename)
        kept = sorted(e for e in set(old.exports) & exports if getattr(self.catalog.get(e), "producer", None) is old)
        k = self._suffix([old.name], kept)
        for e in kept:
            self._rename_export(old, e, k)
        name = old.name
        # (worded for whatever becomes of the new install: it may fail on its first batch and be dropped)
        old.end_views(f"dataflow {name!r} was replaced by a new install of that name; this view ended with the "
                      f"version it read")
        self.replaced_serials = self.replaced_serials | {old.serial}
        self._rename(old, k)
        self.dataflows[old.name] = self.dataflows.pop(name)
        self._drop(old.name, cascade=False)

    def _suffix(self, dataflows: list, exports: list) -> int:
        """The next k (counting renames) for which every ``NAME~k`` of these dataflows and exports is free:
        a user's own dataflow or export may be named so."""
        taken = set(self.dataflows) | {d.name for d in self.retired}
        while True:
            self._replaced += 1
            k = self._replaced
            if not any(f"{n}~{k}" in taken for n in dataflows) and not any(f"{e}~{k}" in self.catalog
                                                                          for e in exports):
                return k

    @staticmethod
    def _rename(df: Dataflow, k: int):
        """``df`` (replaced, or dropped and kept for its exports) listed as ``NAME~k``: its name is free."""
        df.name = f"{df.name}~{k}"
        for v in df.views.values():
            v.dataflow = df.name

    def _rename_export(self, producer: Dataflow, e: str, k: int):
        """``producer``'s export ``e`` renamed ``e~k`` in the catalog and in its readers' ``uses``: they keep
        reading it, and a later ``use`` of ``e`` gets the new export of that name."""
        entry = self.catalog.get(e)
        self.catalog.remove(e)
        entry.name = f"{e}~{k}"
        self.catalog.add(entry)
        producer.exports[producer.exports.index(e)] = entry.name
        for d in list(self.dataflows.values()) + self.retired:
            if e in d.uses:
                d.uses = (d.uses - {e}) | {entry.name}

    def _open_handle(self, cmd: OpenHandle):
        entry = self.catalog.get(cmd.name)
        if entry is None:
            ended = next((d for d in self.dataflows.values() if cmd.name in d.exports and d.error is not None), None)
            if ended is not None:  # (its exports left the catalog when it ended)
                raise UnknownNameError(f"no arrangement named {cmd.name!r} is exported: dataflow {ended.name!r}, "
                                       f"which exported it, {ended.ended}: {ended.error}") from ended.error
            raise UnknownNameError(f"no arrangement named {cmd.name!r}; the catalog has {self.catalog.names()}")
        h = entry.trace.handle(on_close=cmd.on_close, owner=f"eng.trace({cmd.name!r})", final_only=True,
                               on_move=cmd.on_move, decode=rows_decoder(entry.schema, entry.trace.kk, cmd.symbols),
                               engine=cmd.engine)
        entry.handles.add(h)
        return h

    def _follow(self, cmd: Follow):
        view = cmd.view
        df = self.dataflows.get(view.dataflow)
        if df is None or df.views.get(view.name) is not view:
            raise UsageError(f"view {view.name!r}: dataflow {view.dataflow!r} has been dropped")
        if df.error is not None:
            raise df.error
        trace = view.op.handle.trace
        cmd.follower.start(trace.snapshot)
        trace.listen(cmd.follower)
        df.followers.add(cmd.follower)

    # -- dropped dataflows ----------------------------------------------------------------------------
    def _read(self, export: str, besides) -> bool:
        entry = self.catalog.get(export)
        if entry is None:
            return False
        if entry.has_handles():
            return True
        readers = list(self.dataflows.values()) + self.retired + [d for d in (self._successor,) if d is not None]
        # (a failed or cancelled dataflow has released its imports: it reads nothing any more)
        return any(d is not besides and d.error is None and export in d.uses for d in readers)

    def _collect(self):
        """Release dropped dataflows whose exports nobody reads; prune the others to the operators that
        feed the exports still read; let go of the exports of failed or cancelled (installed) dataflows once
        no trace handle reads them."""
        for df in self.dataflows.values():
            if df.held and not any(en.has_handles() for en in df.held):
                df.held = []
        changed = True
        while changed:
            changed = False
            for df in list(self.retired):
                if df.error is not None:  # failed while kept for handles: listed until they are closed
                    if not any(en.has_handles() for en in df.held):
                        self.retired.remove(df)
                        self._gone(df)
                        changed = True
                    continue
                live = {e for e in df.exports if self._read(e, df)}
                if live == set(df.exports) and df.pruned:
                    continue
                for e in set(df.exports) - live:
                    self.catalog.remove(e)
                df.exports = sorted(live)
                if not live:
                    df.release()
                    self.retired.remove(df)
                    self._gone(df)
                    changed = True
                    continue
                keep: set = set()
                stack = [self.catalog.get(e).op for e in live]
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
                df.sources = set().union(*(self.catalog.get(e).sources for e in live))  # what it reads now
                df.pruned = True

    # -- publishing -----------------------------------------------------------------------------------
    def _publish(self, quiet: bool):
        inputs = {n: self._input_info(n, s) for n, s in self.inputs.items()}
        snap = EngineSnapshot(
            seq=self._done, quiet=quiet and not self._failing and not self._cmds,
            dataflows={n: df.info(self._commands) for n, df in self.dataflows.items()},
            retired={df.name: df.info(self._commands) for df in self.retired},
            inputs=inputs, catalog=self.catalog.info(), error=self.error, rounds=self.rounds,
            replaced=self.replaced_serials)
        with self._published:
            self.snapshot = snap
            self._published.notify_all()
        if any(len(s.seals) > s.forget_at for s in self.inputs.values()):
            self._forget_reflected()

    def _forget_reflected(self):
        """Each input forgets the advances and seals that every running dataflow reading it reflects (its
        epoch is past them): a reader that falls behind keeps all it has not reflected, so its latency
        histogram counts every update and its lag is measured from its oldest unreflected advance."""
        through = {}
        for df in list(self.dataflows.values()) + self.retired:
            if df.error is not None:
                continue
            for s in df.sources:
                e = df.reflected()
                through[s] = e if s not in through else (through[s] if e is None else
                                                         e if through[s] is None else min(through[s], e))
        for s in self.inputs.values():
            s.forget(through.get(s))

    def _input_info(self, name, session) -> InputInfo:
        """An input's record for the snapshot (the last one again while unchanged)."""
        contents, closed, failure = session.trace.snapshot, session.closed, session.failure
        last = self._input_infos.get(name)
        if last is None or last.contents is not contents or last.closed != closed or last.failure is not failure \
                or last.session is not session:
            last = self._input_infos[name] = InputInfo(name, contents.upper, closed, failure,
                                                       session.broken is not None, contents, session)
        return last

    def latency_samples(self) -> list:
        with self._lat_lock:
            return list(self.latencies)
