"""Shared by the concurrency tests: every wait is bounded, threads are joined with a bound, and a watchdog
(faulthandler) dumps every thread's stack and ends the process if a test hangs instead of failing."""
from __future__ import annotations

import ctypes
import faulthandler
import threading
import time

import pytest

from kpgnb.engine import faults

T = 30  # bound on every wait expected to succeed


def watchdog(seconds: float):
    """An autouse fixture (bind it to a module-level name): faults disarmed around each test, and the
    process's stacks dumped and the process ended after ``seconds``."""
    @pytest.fixture(autouse=True)
    def _watchdog():
        faults.disarm()
        faulthandler.dump_traceback_later(seconds, exit=True)
        yield
        faulthandler.cancel_dump_traceback_later()
        faults.disarm()
    return _watchdog


def join_all(threads, timeout=T):
    """Join each thread within ``timeout``; a thread still running means a hang."""
    for t in threads:
        t.join(timeout)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running (hung?): {alive}"


def async_raise(thread: threading.Thread, exc_type=KeyboardInterrupt) -> bool:
    """Ctrl-C as a thread other than the main one gets it: ``exc_type`` raised asynchronously in ``thread``
    (when it next runs Python code). False if the thread had ended already."""
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))
    assert n in (0, 1), n
    return n == 1


def gated(eng, name: str, source: str):
    """A dataflow ``name`` over input ``source`` whose map blocks (holding the scheduler in its step) when a
    batch holds the row 7, until ``gate`` is set. Returns (gate, inside)."""
    gate, inside = threading.Event(), threading.Event()

    def hold(k):
        if (k == 7).any():
            inside.set()
            gate.wait(T)
        return {"k": k}

    with eng.dataflow(name) as df:
        df.input(source).map(hold).view(f"{name}_v")
    eng.wait(name, timeout=T)
    return gate, inside


def until(cond, timeout: float = T) -> bool:
    """Poll ``cond`` until it holds (True) or ``timeout`` seconds pass (False): for what another thread (a
    widget refresh, the scheduler) makes true some time later."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
