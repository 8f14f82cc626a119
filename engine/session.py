"""Input sessions: how rows get into the engine.

Two sides, two owners:
- the caller's side (any thread; ``_lock`` guards the buffer and the epoch): ``insert``/``remove``/
  ``update`` encode rows and buffer them (they return at once); ``advance_to`` hands the buffered rows to
  the scheduler as a :class:`~.commands.Seal`;
- the scheduler's side (scheduler thread only): ``accept`` takes a Seal (cannot fail), ``apply`` shards,
  forms and appends the epochs to the input's trace through the shared :class:`~.batcher.Batcher`. An
  input is an ordinary arrangement (keyed by all its columns), so dataflows installed later start from
  its current state.

A failure while sealing loses nothing: the rows stay with the scheduler and the seal is retried; the
error is raised once from the session's next call, and ``eng.wait`` on a dataflow reading it raises
while the failure lasts. A row whose multiplicity reaches 2**62 (sealing or merging its epochs) is the
data's failure, which no retry mends: the input is *broken*, the dataflows reading it (and any installed
later) fail, and every later call says so.
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque

import numpy as np

from .batcher import Batcher
from .columns import Schema, check_flag
from .commands import Chunk, Seal
from .errors import ArgumentTypeError, EngineError, SchemaError, UsageError, not_copyable
from .cursor import Cursor
from .inputs import diffs_array, is_pandas, rows_to_columns
from .kernels import MAX_MULT, multiplicity_overflow
from .lattice import Antichain
from .scope import at_epoch, epoch_of, last_complete
from .trace import Trace


_MAX_EPOCH = 2 ** 63 - 1  # times are int64


def input_key(schema: Schema, key) -> int:
    """How many leading columns an input's rows are arranged by: ``key`` None (all of them), a column
    name, or a list of names that must be the first columns in order (the arrangement's columns are
    the key's, then the rest: the input's own order, which positional readers such as Datalog rely on)."""
    if key is None:
        return len(schema)
    names = [key] if isinstance(key, str) else key
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise SchemaError(f"an input's key is a column name or a non-empty list of them, got {key!r}")
    for i, n in enumerate(names):
        if n not in schema.names:
            raise SchemaError(f"key column {n!r} is not a column of the input; its columns are {list(schema.names)}")
        if i >= len(schema.names) or schema.names[i] != n:
            raise SchemaError(f"an input's key must be its leading columns in order: key column {n!r} is column "
                              f"{schema.names.index(n)} of {list(schema.names)}, expected {schema.names[i]!r} "
                              f"at position {i}; list the key columns first")
    return len(names)


HISTORY = 256  # seals an input holds before the scheduler forgets those every reader reflects (``forget``)


class InputSession:
    """Feeds rows into an engine input. Rows inserted since the last ``advance_to`` belong to the
    current epoch; ``advance_to(e)`` closes every epoch before ``e`` and makes them visible to the
    dataflows."""

    def __reduce__(self):  # (pickle, copy.copy, copy.deepcopy)
        raise not_copyable(self)

    def __init__(self, name: str, schema: Schema, symbols, workers: int, effort: str, submit,
                 engine_closed=lambda: False, nkey: int | None = None, inputs=lambda: ()):
        self.name = name
        self.schema = schema
        self._symbols = symbols
        self._submit = submit
        self._engine_closed = engine_closed
        self.epoch = 0
        self.closed = False
        self.dropped = False  # set by the scheduler (Engine.drop_input); every later call refuses
        self._forgotten = False  # its drop is queued (drop_input(wait=False)): later calls refuse already
        self._buffer: list = []
        self._lock = threading.Lock()
        self._followers = weakref.WeakSet()  # inputs that advance with this one while idle (``follow``)
        self._carry = False  # (as a follower) whether buffered rows advance with the leader too
        self._when_led = None  # (as a follower) called after each leader's move (``when_led``)
        self._owner = 0      # the epoch its owner last asked for (``lend`` and ``follow`` may move it past)
        # the owner's epochs as input epochs: input epochs a ``lend`` left empty are skipped (``_to_input``);
        # ``_shift`` counts those below the owner's epoch, ``_skips`` holds the later ones as ascending,
        # disjoint [start, end) runs (an input nobody advances while asks go on gathers one run)
        self._shift = 0
        self._skips: list = []
        self._leaders = 0  # the inputs it ``follow``s: a follower is numbered by its leaders, not by lends
        self._inputs = inputs  # the engine's input sessions (a lend skips its epoch in those not ahead)
        self._sent: deque = deque()  # (epoch advanced to or None, perf_counter): how long ago (``forget``)
        k = len(schema)
        self.nkey = k if nkey is None else nkey  # the leading columns its rows are arranged by
        self._shape = (workers, effort)
        self.trace = self._new_trace()
        # scheduler side
        # keeps the trace compacted to the last epoch
        self._handle = self.trace.handle(logical=at_epoch(0), owner=f"input {name!r}")
        self._batcher = Batcher(self.nkey, k - self.nkey, 1, workers)
        self._incoming: list = []
        self._target = at_epoch(0)
        self.failure: BaseException | None = None  # the seal failure being retried (scheduler-owned)
        self.broken: BaseException | None = None   # a failure no retry mends: no more epochs
        self._mass = 0.0  # the magnitudes of every diff buffered, summed (caller side; ``_check_totals``)
        self.appends = 0  # calls whose rows were buffered: a caller interrupted in one tells whether it took
        self.seals: deque = deque()                 # (epoch sealed to or None, submitted): for latencies
        self.forget_at = HISTORY                    # the scheduler prunes both once seals pass this many
        self._report: BaseException | None = None   # raised once by the caller's next call

    # -- caller side --------------------------------------------------------------------------------
    def _check(self):
        if self._engine_closed():
            raise EngineError("the engine is closed")
        if self.broken is not None:
            raise EngineError(f"input {self.name!r} is broken and takes no more rows: {self.broken}; "
                              f"eng.drop_input({self.name!r}) and load it again") from self.broken
        err, self._report = self._report, None
        if err is not None:
            raise EngineError(f"input {self.name!r} failed to seal or merge its epochs: {err}. The rows of the "
                              f"epochs advanced so far are kept and applied once it succeeds; this call did "
                              f"nothing, repeat it") from err
        self._open()

    def _encode(self, rows) -> np.ndarray:
        self._check()
        return rows_to_columns(rows, self.schema, self._symbols)

    def insert(self, rows):
        """Add rows (list of tuples, dict of arrays, pandas/Arrow/Spark DataFrame) at the current epoch."""
        data = self._encode(rows)
        self._append(data, np.ones(data.shape[1], np.int64), data.shape[1])

    def remove(self, rows):
        """Retract rows at the current epoch."""
        data = self._encode(rows)
        self._append(data, np.full(data.shape[1], -1, np.int64), data.shape[1])

    def update(self, rows, diffs):
        """Add rows with explicit multiplicity changes (negative retracts)."""
        if _labels(diffs) is not None and _labels(rows) is not None and _reordered(diffs.index, rows.index):
            # (diffs are paired with rows by position, whatever their index; labels that are the rows' own in
            # another order look like an alignment by label that would not happen)
            raise SchemaError("update: the diffs Series holds the rows' labels in another order; rows and diffs "
                              "are paired by position, not aligned by label: pass diffs.reindex(rows.index)")
        n = _row_count(rows)  # (diffs checked before the rows, whose strings encoding interns, when it can)
        checked = diffs_array(diffs, n) if n is not None else None
        data = self._encode(rows)
        diffs = checked if checked is not None and n == data.shape[1] else diffs_array(diffs, data.shape[1])
        self._append(data, diffs, float(np.abs(diffs).sum(dtype=np.float64)))  # (int64 could wrap)

    def _append(self, data, diffs, mass: float):
        """Buffer rows; ``mass``, the magnitudes of their diffs summed, is counted before any seal of them
        reaches the scheduler (``_check_totals`` reads the sum there)."""
        if data.shape[1]:
            with self._lock:
                self._open()  # closed while the rows were encoded: refuse rather than lose them
                self._buffer.append((data, diffs))
                self.appends += 1
                self._mass += mass

    def let_go(self):
        """The engine let this input go (its drop is queued, its name free): every later call refuses now,
        not only once the scheduler gets to the drop (rows taken meanwhile would be thrown away)."""
        with self._lock:
            self._forgotten = True

    def _open(self):
        """Refuse a call on a closed or dropped input. Called under ``_lock``, which ``close`` holds too, so
        nothing is buffered or sealed after the closing seal; ``dropped`` is set by the scheduler, which skips
        the seals of a dropped input anyway."""
        if self.dropped or self._forgotten:
            raise UsageError(f"input {self.name!r} was dropped")
        if self.closed:
            raise UsageError(f"input {self.name!r} is closed")

    def advance_to(self, epoch: int):
        """Close every epoch before ``epoch``: the updates inserted so far become visible as of epoch-1.
        Epochs are the owner's: where goals' lends sealed input epochs empty (``lend``), the owner's epochs
        go in at the input epochs after them (``_to_input``), in every input alike; one beyond where the
        input's next rows go (``position``) is the input's own epoch again from there. An input a leader
        moved past its owner's epochs (``follow``) seals the rows inserted since as its next epoch. Asking
        for the owner's epoch again does nothing; one below it is refused."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise ArgumentTypeError(f"input {self.name!r}: an epoch is an integer, not {type(epoch).__name__} ({epoch!r})")
        epoch = int(epoch)
        if epoch > _MAX_EPOCH:
            raise UsageError(f"input {self.name!r}: epochs are int64 times; advance_to({epoch}) is beyond the last "
                             f"one, {_MAX_EPOCH}")
        self._check()
        self._advance(lambda: epoch)

    def _to_input(self, epoch: int) -> int:
        """The input epoch of the owner's ``epoch`` (at least the owner's own): the epochs lends left empty
        are skipped, in every input not ahead of the lent one alike, so an owner's epoch is one input epoch
        in all the inputs it advances together."""
        x = epoch + self._shift
        for start, end in self._skips:
            if start > x:
                break
            x += end - start
        return x

    @property
    def position(self) -> int:
        """The input epoch its owner's rows go in at now: its epoch, or later where lends skipped epochs
        its owner has not written yet (what a goal's lend compares)."""
        with self._lock:
            return self._rows_at()

    def _skip(self, start: int, end: int):
        """Input epochs ``start`` to ``end - 1`` are no owner epochs of this input (a lend sealed them
        empty)."""
        merged: list = []
        for a, b in sorted(self._skips + [(start, end)]):  # (a union: runs that meet or overlap become one)
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self._skips = merged

    def _rows_at(self) -> int:
        """The input epoch the rows buffered now belong to: the owner's open epoch's, or the input's own
        where a leader moved it past that (``follow``: its rows go in as its next epoch)."""
        return max(self._to_input(self._owner), self.epoch)

    def _advance(self, asked):
        """``advance_to`` of the epoch ``asked()`` gives under the lock (``flush`` asks for one past the
        owner's epoch there, so that callers on several threads each move it on by one)."""
        with self._lock:
            self._open()
            epoch = asked()
            if epoch < self._owner:
                raise UsageError(f"input {self.name!r} is at epoch {self.epoch}; epochs only advance "
                                 f"(asked for {epoch})")
            owner, shift, skips = self._owner, self._shift, self._skips
            if epoch > owner:
                at = self._rows_at()
                self._owner = epoch
                if epoch > at and self._to_input(epoch) - epoch == self._to_input(owner) - owner:
                    # beyond where its rows go, past no epoch a lend left empty in it since: the owner's
                    # numbering is the input's again
                    target = epoch
                    self._shift, self._skips = 0, [r for r in skips if r[0] > epoch]
                else:  # (an input a leader moved past its owner's epochs seals its rows as its next one)
                    target = max(self._to_input(epoch), at + 1 if self._buffer else self.epoch)
                    while self._skips and self._skips[0][1] <= target:  # (passed: counted, not listed)
                        start, end = self._skips[0]
                        self._shift += end - start
                        self._skips = self._skips[1:]
                if target > self.epoch:
                    try:
                        self._send(target, at)
                    except BaseException:
                        if self.epoch != target:  # (not sent: the owner's epoch too is as it was, for a retry)
                            self._owner, self._shift, self._skips = owner, shift, skips
                        raise
        # (also when asked again: an advance interrupted before its followers caught up completes)
        for f in list(self._followers):
            f._catch_up(self.epoch)

    @staticmethod
    def lend(sessions, epoch: int) -> bool:
        """Seal ``sessions`` empty up to ``epoch`` on behalf of a goal, so that a binding it was just asked
        (at ``epoch - 1``) is answered at once (the goal reads these inputs, and its answers are final only
        where every input it reads is sealed). The input epochs sealed empty are no owner's epochs: their
        owners' next epoch goes in at ``epoch``, and so does that of every other input the engine has
        that is not past them (``_to_input``), so what an owner writes to several inputs as one epoch
        stays one input epoch whichever of them goals read. All or none, under all their locks: nothing
        moves when one of them has rows buffered (an owner mid-epoch). An ask that lands while an owner is
        mid-way through advancing inputs one by one (some of them an epoch ahead) still splits that
        epoch: nothing tells a finished advance from half of one. Returns whether they moved."""
        lent = {id(s): s for s in sessions if not (s.closed or s.dropped)}
        others = {id(s): s for s in _engine_inputs(lent.values())
                  if id(s) not in lent and not (s.closed or s.dropped) and not s._leaders}
        ordered = sorted([*lent.values(), *others.values()], key=id)
        with contextlib.ExitStack() as held:
            for s in ordered:
                held.enter_context(s._lock)
            # (looked at again under the locks: an owner on another thread may have closed one meanwhile,
            # and a seal past its closing one would move its frontier back)
            lent = {k: s for k, s in lent.items() if not (s.closed or s.dropped)}
            live = [s for s in others.values() if not (s.closed or s.dropped)]
            if not lent or ordered[0]._engine_closed() or any(s._buffer for s in lent.values()):
                return False
            at = {id(s): s._rows_at() for s in [*lent.values(), *live]}  # (where each one's next rows go)
            moved = [s for s in lent.values() if at[id(s)] < epoch]
            if not moved:
                return False
            low = min(at[id(s)] for s in moved)
            staged = []
            try:  # (one submit of every seal: all queued or none, and those not queued put back)
                for s in moved:
                    staged.append(s._sealed(epoch))
                ordered[-1]._submit([seal for seal, _ in staged])
            except BaseException:
                for seal, undo in staged:
                    if not seal.queued:
                        undo()
                raise
            for s in moved:  # the epochs sealed empty are no owner's epochs now, nor, in another input not
                s._skip(at[id(s)], epoch)  # past them, those from the least lent one's on (an input advanced
            for s in live:                 # with that one, at its epoch, moves as it does)
                if at[id(s)] < epoch:
                    s._skip(max(at[id(s)], low), epoch)
        for s in moved:
            for f in list(s._followers):
                f._catch_up(epoch)
        return True

    def follow(self, leader: "InputSession", carry: bool = False):
        """Advance with ``leader`` whenever it advances and this input has nothing buffered, so that an
        input written only now and then (a goal's asked bindings) never holds back the dataflows that
        read both: their frontier is the least of their inputs'. With ``carry``, rows buffered here
        advance too: they were written to go with the leader's epoch."""
        if not isinstance(leader, InputSession):
            raise ArgumentTypeError(f"input {self.name!r}: follow(leader) takes an InputSession, got "
                                    f"{type(leader).__name__} {leader!r}")
        if leader._submit != self._submit or leader is self:
            raise UsageError(f"input {self.name!r}: follow({leader.name!r}) takes another input of the same "
                             f"engine")
        carry = check_flag(carry, f"input {self.name!r}: follow(carry=)")
        if self not in leader._followers:
            self._leaders += 1
        leader._followers.add(self)
        self._carry = self._carry or carry
        # (a closed leader's last epoch is complete: as closing it moves its followers past it)
        self._catch_up(min(leader.epoch + 1, _MAX_EPOCH) if leader.closed else leader.epoch)

    def unfollow(self, leader: "InputSession"):
        if self in leader._followers:
            self._leaders -= 1
        leader._followers.discard(self)

    def when_led(self, fn):
        """Call ``fn()`` after each move of a leader (an advance, a close, a lend) has caught this input up,
        or found it there already, with no input's lock held. A goal then seals a binding that waited for an
        owner's buffered rows: an advance that seals those rows does not move a follower already at its
        epoch. ``fn`` runs on the thread that moved the leader; None removes it."""
        self._when_led = fn

    def _catch_up(self, epoch: int):
        with self._lock:
            if not (self.closed or self.dropped or (self._buffer and not self._carry) or epoch <= self.epoch
                    or self._engine_closed()):
                self._send(epoch)
        fn = self._when_led
        if fn is not None:
            fn()

    def advanced_past(self, epoch: int):
        """When (``time.perf_counter()``) this input was first advanced beyond ``epoch`` (or closed); None if
        it has not been. Any thread: for measuring how far behind a dataflow reading it is (advances every
        reader reflects are forgotten, ``forget``)."""
        with self._lock:
            for ep, t in self._sent:
                if ep is None or ep > epoch:
                    return t
        return None

    @property
    def engine_closed(self) -> bool:
        """Whether the engine this input belongs to was closed (every call then refuses)."""
        return self._engine_closed()

    @property
    def buffered(self) -> bool:
        """Whether rows were inserted since the last advance (they are not sealed yet)."""
        with self._lock:
            return bool(self._buffer)

    def flush(self):
        """Advance to the next epoch: one past its owner's epoch when the call takes effect (where goals'
        lends shifted the owner's epochs, the next input epoch they map to)."""
        self._check()
        self._advance(lambda: self._owner + 1)

    def close(self):
        """No more updates: seal the current epoch and close the input (its frontier becomes empty)."""
        if self.closed:
            return
        self._check()
        with self._lock:
            if self.closed:
                return
            self._open()
            last = self.epoch
            self._send(None, self._rows_at())
        for f in list(self._followers):  # (the epoch the close sealed is complete for them too)
            f._catch_up(min(last + 1, _MAX_EPOCH))

    def _send(self, target: int | None, at: int | None = None):
        """Hand the buffered rows to the scheduler, sealed up to epoch ``target`` (None: closed), and move
        the input there. The input moves first, so a Ctrl-C landing once the seal is queued leaves it where
        the scheduler takes it (a repeated call does nothing twice); if the seal was not queued (refused by
        a closed engine, or interrupted before) the input is put back as it was, rows and all."""
        seal, undo = self._sealed(target, at)
        try:
            self._submit(seal)
        except BaseException:
            if not seal.queued:
                undo()
            raise

    def _sealed(self, target: int | None, at: int | None = None):
        """(the Seal of the buffered rows, at input epoch ``at`` (the input's own by default), up to
        ``target``, a function putting the input back): the input moved there, for ``_send`` (or ``lend``)
        to queue the seal."""
        buf, epoch, closed = self._buffer, self.epoch, self.closed
        upper = Antichain() if target is None else at_epoch(target)
        now = time.perf_counter()
        seal = Seal(self, [Chunk(data, diffs, epoch if at is None else at) for data, diffs in buf], upper, now)
        self._buffer = []
        if target is None:
            self.closed = True
        else:
            self.epoch = target
        self._sent.append((target, now))

        def undo():
            self._buffer, self.epoch, self.closed = buf, epoch, closed
            self._sent.pop()
        return seal, undo

    # -- scheduler side -----------------------------------------------------------------------------
    def forget(self, through):
        """Drop the advances and seals up to epoch ``through`` (None: every one of an epoch), which every
        dataflow reading this input reflects: its latencies are counted and it lags no more behind them.
        What a lagging reader still needs stays, however many advances it is behind."""
        def prune(q):
            while q and q[0][0] is not None and (through is None or q[0][0] <= through):
                q.popleft()
        prune(self.seals)
        with self._lock:
            prune(self._sent)
        self.forget_at = max(HISTORY, 2 * len(self.seals))

    def accept(self, seal: Seal):
        """Take a seal's rows and target frontier (cannot fail)."""
        self._incoming.extend(seal.chunks)
        self._target = seal.upper
        self.seals.append((epoch_of(seal.upper), seal.submitted))

    @property
    def pending(self) -> bool:
        return bool(self._incoming) or self._target != self.trace.upper

    def apply(self, run):
        """Shard, form and append everything accepted so far as one batch per shard. On failure the rows
        stay (in ``_incoming`` or the batcher) for the next try, and the failure is recorded."""
        if self.broken is not None:
            return  # (no try can seal the epoch that broke it, nor any after it)
        batches = None
        try:
            if self._incoming:
                nk = self.nkey
                self._batcher.push([(c.data[:nk], c.data[nk:], np.full((len(c.diffs), 1), c.epoch, np.int64), c.diffs)
                                    for c in self._incoming], run)
                self._incoming = []
            if self._target != self.trace.upper:
                batches = self._batcher.seal(self.trace.upper, self._target, run)
                if self._mass >= MAX_MULT / 2:
                    self._check_totals(batches)
        except Exception as e:  # noqa: BLE001 - reported on the input, retried unless it broke the input
            self._failed(e, seal=True)
            return
        self.failure = None
        if self._target.elements:
            self._handle.set_logical_compaction(last_complete(self._target, self._handle.logical))
        else:
            self._handle.set_logical_compaction(Antichain())
        try:
            if batches is not None:
                self.trace.insert(batches, run)  # appending cannot fail; one snapshot for both
            else:
                self.trace.maintain(run)
        except Exception as e:  # noqa: BLE001 - the batches are in; merging resumes next time
            self._failed(e, seal=False)

    def _failed(self, e: BaseException, seal: bool):
        """A seal (retried while it fails) or a merge (its batches are in) failed: reported from the next
        call. A multiplicity at 2**62 (an OverflowError there) is the data's failure, which no retry mends:
        the input is broken."""
        self._report = e
        if seal or isinstance(e, OverflowError):
            self.failure = e
        if isinstance(e, OverflowError):
            self.broken = e

    def _check_totals(self, batches):
        """Refuse (an OverflowError) new batches that would take a row's multiplicity over every epoch to
        2**62, which readers summing the epochs could not hold. Asked only once the magnitudes of every diff
        ever buffered (``_mass``, which bounds any row's total) reach 2**61: never with ordinary diffs."""
        for s, b in enumerate(batches):
            if not len(b):
                continue
            h = Cursor(list(self.trace.snapshot.batches(s)) + [b], b.vals.shape[0], 1).seek(b.kh, b.keys)
            probe = np.repeat(np.arange(len(h.off) - 1), np.diff(h.off))
            _, group = np.unique(np.vstack([probe[None, :], h.vals]), axis=1, return_inverse=True)
            group = group.reshape(-1)
            near = np.abs(np.bincount(group, weights=h.diffs.astype(np.float64))) >= MAX_MULT / 2
            for g in np.flatnonzero(near):  # (exact, in Python ints, where float sums come close)
                if abs(sum(int(d) for d in h.diffs[group == g])) >= MAX_MULT:
                    raise multiplicity_overflow()

    def _new_trace(self) -> Trace:
        workers, effort = self._shape
        k = len(self.schema)
        trace = Trace(self.nkey, k - self.nkey, 1, workers, at_epoch(0), effort, f"input:{self.name}")
        trace.key_names = tuple(self.schema.names[:self.nkey])
        return trace

    def release(self):
        """Dropped (scheduler side): let go of the rows, the trace's too (the session may be kept: a
        notebook variable, or a builder a kept view refers to), leaving an empty one for late readers."""
        self._handle.close()
        self.trace = self._new_trace()
        self._incoming, self._buffer = [], []
        self._batcher = None

    def tidy(self, fuel: int, run):
        """Idle maintenance of the input's trace; a failure is reported like a failed merge in ``apply``."""
        try:
            self.trace.exert(fuel, run)
        except Exception as e:  # noqa: BLE001 - the batches are intact; merging resumes next time
            self._failed(e, seal=False)

    def __repr__(self):
        return f"InputSession({self.name!r}, {self.schema}, epoch={self.epoch}{', closed' if self.closed else ''})"


def _engine_inputs(sessions):
    """The input sessions of the engine these sessions belong to."""
    for s in sessions:
        return s._inputs()
    return ()


def _row_count(rows) -> int | None:
    """How many rows ``rows`` holds, where that is known without encoding them (None otherwise)."""
    if isinstance(rows, (list, tuple)):
        return len(rows)
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        return rows.shape[0]
    if hasattr(rows, "columns") and hasattr(rows, "iloc"):  # a pandas DataFrame
        return len(rows)
    if isinstance(rows, dict) and rows:  # a dict of columns: their common length (None if they disagree)
        if any(isinstance(c, (str, bytes)) or (isinstance(c, np.ndarray) and c.ndim != 1) for c in rows.values()):
            return None  # (not columns: the encoding says what is wrong with them)
        try:
            lengths = {len(c) for c in rows.values()}
        except TypeError:  # (a column with no length, likewise)
            return None
        return lengths.pop() if len(lengths) == 1 else None
    n = getattr(rows, "num_rows", None)  # an Arrow table or record batch
    return n if isinstance(n, int) else None


def _labels(obj):
    """A pandas Series' or DataFrame's index (its rows' labels); None for anything else (a pandas array or
    Index has none)."""
    index = getattr(obj, "index", None)
    return index if is_pandas(obj) and index is not None and not callable(index) else None


def _reordered(a, b) -> bool:
    """Whether pandas index ``a`` holds ``b``'s labels in another order."""
    if len(a) != len(b) or a.equals(b):
        return False
    try:
        return a.sort_values().equals(b.sort_values())
    except TypeError:  # (labels that do not compare)
        return False
