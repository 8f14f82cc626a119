"""Named fault points, so tests can make the engine fail where real failures would happen.

Code that can fail in interesting ways calls ``point(name)``: free when nothing is armed (one dict
lookup on an empty dict). A test arms a point to raise once, ``times`` times or every time, or to run
an action (e.g. block until an event is set, to hold the scheduler at a known place)::

    with faults.armed("seal", times=1):
        ...

Points: ``seal`` (forming an epoch's batches, inputs and arrange), ``exchange`` (partitioning updates to
shards), ``merge`` (a spine merge step), ``operator_step`` (before an operator runs), ``scheduler``
(the scheduler loop itself, outside any dataflow or input, before it serves the waiting commands).
"""
from __future__ import annotations

import contextlib
import threading

from .errors import UsageError

POINTS = ("seal", "exchange", "merge", "operator_step", "scheduler")


class InjectedFault(RuntimeError):
    """The error an armed fault point raises by default."""


class _Arm:
    __slots__ = ("times", "error", "action", "hits")

    def __init__(self, times, error, action):
        self.times, self.error, self.action, self.hits = times, error, action, 0


_armed: dict = {}
_lock = threading.Lock()


def arm(name: str, times: int | None = 1, error: BaseException | None = None, action=None):
    """Make ``point(name)`` raise ``error`` (default InjectedFault) or call ``action()``: ``times`` times,
    or every time when None."""
    if name not in POINTS:
        raise UsageError(f"unknown fault point {name!r}; points are {POINTS}")
    with _lock:
        _armed[name] = _Arm(times, error, action)


def disarm(name: str | None = None):
    """Disarm one point, or all."""
    with _lock:
        if name is None:
            _armed.clear()
        else:
            _armed.pop(name, None)


def hits(name: str) -> int:
    """How often the armed point ``name`` fired."""
    a = _armed.get(name)
    return 0 if a is None else a.hits


@contextlib.contextmanager
def armed(name: str, times: int | None = 1, error: BaseException | None = None, action=None):
    arm(name, times, error, action)
    try:
        yield
    finally:
        disarm(name)


def point(name: str):
    """A fault point: does nothing unless a test armed it."""
    if not _armed:
        return
    with _lock:
        a = _armed.get(name)
        if a is None or (a.times is not None and a.hits >= a.times):
            return
        a.hits += 1
    if a.action is not None:
        a.action()
        return
    raise a.error if a.error is not None else InjectedFault(f"injected fault at {name!r}")
