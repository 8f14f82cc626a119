"""The typed commands other threads send to the scheduler, and the reply a caller waits on.

Callers never touch engine state: they append a command to the scheduler's queue (``Scheduler.submit``)
and, for the synchronous ones, wait on its :class:`Reply`. A reply can be abandoned (the caller was
interrupted): a command not yet taken is then skipped, and one the scheduler already executed is undone
by it, so an interrupted install leaves nothing behind.
"""
from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field

import numpy as np

from .lattice import Antichain


class Reply:
    """The outcome of a synchronous command: pending -> taken -> done, or abandoned by the caller."""

    def __init__(self):
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.state = "pending"
        self.result = None
        self.error: BaseException | None = None

    def take(self) -> bool:
        """Scheduler: start executing; False if the caller gave up already."""
        with self._lock:
            if self.state != "pending":
                return False
            self.state = "taken"
            return True

    def finish(self, result=None, error: BaseException | None = None) -> bool:
        """Scheduler: hand over the outcome; False if the caller gave up meanwhile (undo the command)."""
        with self._lock:
            abandoned = self.state == "abandoned"
            self.state = "done"
            self.result, self.error = result, error
        self._done.set()
        return not abandoned

    def abandon(self):
        """Caller: no longer interested (interrupted)."""
        with self._lock:
            if self.state in ("pending", "taken"):
                self.state = "abandoned"

    def took_effect(self) -> bool:
        """Whether the command ran to success: also where the caller was interrupted as it finished (the
        interrupt lands when the finished reply wakes it), too late for ``abandon`` to undo it."""
        with self._lock:
            return self.state == "done" and self.error is None

    def wait(self, timeout: float | None = None):
        """Block until done; return the result or raise the error. Interruptible (KeyboardInterrupt
        abandons the command first)."""
        try:
            while not self._done.wait(0.2 if timeout is None else timeout):
                if timeout is not None:
                    self.abandon()
                    raise TimeoutError("the engine did not answer in time")
        except BaseException:
            self.abandon()
            raise
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class Chunk:
    """Rows inserted during one epoch: a ``k x n`` int64 column matrix and n diffs."""
    data: np.ndarray
    diffs: np.ndarray
    epoch: int


@dataclass
class Seal:
    """An input advanced: its chunks so far belong to epochs before ``upper`` (empty: closed)."""
    session: object
    chunks: list
    upper: Antichain
    submitted: float
    queued: bool = False  # set by ``Scheduler.submit`` as it queues it (the sender's commit point)


@dataclass
class Install:
    """Install a built dataflow; ``replace`` swaps out an installed one of the same name (see
    ``Scheduler._replace``). The dataflow's steps run in ``context`` (a copy of the installing thread's
    context variables), so what its user functions print or warn goes where the installer's output goes
    (in Jupyter: the cell that installed it, never whichever cell runs when an epoch is computed)."""
    builder: object
    replace: bool = False
    context: contextvars.Context | None = None   # the installer's, for the dataflow's user code
    reply: Reply = field(default_factory=Reply)
    replaced: bool = False                       # set by the scheduler once an installed one was swapped out


@dataclass
class Drop:
    name: str
    cascade: bool = False
    reply: Reply = field(default_factory=Reply)


@dataclass
class DropInput:
    """Forget an input that no dataflow reads: its rows go, its name is free again."""
    name: str
    session: object
    reply: Reply = field(default_factory=Reply)


@dataclass
class Discard:
    """Remove the dataflow an install made (``serial``), whose caller was interrupted as the install
    finished: as an install abandoned sooner, it leaves nothing behind (no reply: Ctrl-C must not wait)."""
    name: str
    serial: int


@dataclass
class Cancel:
    """Stop a dataflow's computation (no reply: Ctrl-C must not wait); with ``serial``, only that install of
    the name (a wait interrupted on a view spares the install that replaced its dataflow meanwhile)."""
    name: str
    reason: str
    serial: int | None = None


@dataclass
class OpenHandle:
    """A TraceHandle on a named arrangement, for a caller outside the dataflows: ``on_close`` and
    ``on_move`` as in TraceHandle; ``symbols`` decode its str columns (by the export's schema); ``engine``:
    the engine giving it out (its calls raise once that is closed)."""
    name: str
    on_close: object
    on_move: object
    symbols: object
    engine: object = None
    reply: Reply = field(default_factory=Reply)


@dataclass
class Follow:
    """Start feeding a follower a view's contents, then its changes."""
    view: object
    follower: object
    reply: Reply = field(default_factory=Reply)


@dataclass
class Own:
    """Give an installed dataflow inputs to drop when it is gone (``Engine.own_inputs``)."""
    dataflow: str
    sessions: list
    reply: Reply = field(default_factory=Reply)


@dataclass
class Collect:
    """Forget exports whose last reader went away (sent when a handle closes; no reply)."""
