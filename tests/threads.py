"""Shared by the concurrency tests: every wait is bounded, threads are joined with a bound, and a watchdog
(faulthandler) dumps every thread's stack and ends the process if a test hangs instead of failing."""
from __future__ import annotations

import faulthandler

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
