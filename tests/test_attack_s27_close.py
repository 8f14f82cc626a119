"""Attack (session 27): review of 1cc8881 (close answers queued commands; inputs refuse calls racing
close; a read of a released view waits for the snapshot that says why; views carry their install's
serial).

Every wait is bounded, and a watchdog (faulthandler) dumps every thread's stack and kills the process if a
test hangs. The races are forced with ``kpgnb.engine.faults`` points (the scheduler held at a known place),
not with sleeps."""
from __future__ import annotations

import threading
import time

import pytest

import kpgnb as kp
from kpgnb.engine import faults
from kpgnb.engine.commands import Cancel
from threads import T, async_raise, watchdog

PROMPT = 3.0  # an answer that is available now must come within this (the engine waits 10 s before guessing)


_watchdog = watchdog(120)


def _count_dataflow(eng, name, inp):
    with eng.dataflow(name) as df:
        return df.input(inp).count(by=[]).view("c")


# -- 1. eng.wait(view) ignores the view's install (serial) ---------------------------------------------

def test_wait_on_a_view_of_a_dropped_dataflow_whose_name_was_reinstalled_raises():
    """The commit gives every view the serial of its install so that a view of an earlier install of a
    name reads as dropped. ``eng.wait(view)`` does not use it: ``_view_goal``/``_view_done`` look the
    dataflow up by name, find the NEW install, and then wait for the old view's released trace to move --
    forever (``eng.wait(old)`` with no timeout never returns). Seen in a notebook as: a dashboard thread
    waits on a view, the user runs ``%dataflow drop a`` and re-runs the ``%%dataflow a`` cell.
    Expected: UsageError (dropped) at once, as ``old.to_pandas()`` raises."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        old = _count_dataflow(eng, "a", "x")
        eng.wait(old, timeout=T)
        eng.drop("a")
        new = _count_dataflow(eng, "a", "x")
        eng.wait(new, timeout=T)
        x.insert([(2,)])
        x.advance_to(2)
        with pytest.raises(kp.UsageError, match="dropped"):
            old.to_pandas()  # reads know the view is gone ...
        t0 = time.monotonic()
        with pytest.raises(kp.UsageError):  # ... waits must too (today: TimeoutError after PROMPT s)
            eng.wait(old, timeout=PROMPT)
        assert time.monotonic() - t0 < PROMPT
    finally:
        eng.close()


def test_ctrl_c_in_a_wait_on_a_stale_view_does_not_cancel_the_new_install_of_its_name():
    """Worse, Ctrl-C in that endless wait runs ``_cancel_behind`` by NAME: it cancels the new, unrelated
    install of ``a`` (whenever that one is behind), so the user's fresh dataflow ends 'cancelled'.
    The new install is held behind with a fault action while the interrupt arrives."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        old = _count_dataflow(eng, "a", "x")
        eng.wait(old, timeout=T)
        eng.drop("a")
        new = _count_dataflow(eng, "a", "x")
        eng.wait(new, timeout=T)
        entered, release = threading.Event(), threading.Event()
        faults.arm("operator_step", times=1, action=lambda: (entered.set(), release.wait(T)))
        x.insert([(2,)])
        x.advance_to(2)
        assert entered.wait(10)
        out = []

        def waiter():
            try:
                eng.wait(old, timeout=T)
                out.append("returned")
            except BaseException as ex:  # noqa: BLE001
                out.append(ex)

        t = threading.Thread(target=waiter, name="stale-waiter", daemon=True)
        t.start()
        time.sleep(0.3)
        if t.is_alive():
            assert async_raise(t, KeyboardInterrupt)
        t.join(10)
        release.set()
        assert not t.is_alive()
        eng.wait(new, timeout=T)  # today: Cancelled("... interrupted while waiting (KeyboardInterrupt)")
        assert new.to_pandas()["count"].tolist() == [2]
        assert eng.dataflows() == {"a": "running"}
    finally:
        faults.disarm()
        eng.close()


# -- 2. _released waits for a snapshot the scheduler does not publish until its step ends -------------

@pytest.mark.parametrize("read", ["to_pandas", "len", "to_arrow"])
def test_read_of_a_cancelled_view_raises_cancelled_while_another_dataflow_steps(read):
    """A cancel (or a failure) releases the dataflow's traces at once, but the snapshot that says why is
    published only when the step ends: after every other dataflow's slice (PUBLISH_S) and after any long
    operator step (a big join, a slow user function). A reader that finds the trace gone meanwhile now
    sits in ``View._released`` for 10 s and then raises UsageError('has been dropped') -- the wrong
    error, late. (Before the commit it said 'dropped' at once.) The scheduler is held in dataflow b's
    operator step right after it executed the Cancel of a. Expected: Cancelled, promptly (the cancel has
    happened; nothing the reader needs is pending)."""
    eng = kp.Engine(workers=1)
    release = threading.Event()
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        y = eng.input("y", ["k"], rows=[(1,)])
        y.advance_to(1)
        va = _count_dataflow(eng, "a", "x")
        vb = _count_dataflow(eng, "b", "y")
        eng.wait(va, timeout=T)
        eng.wait(vb, timeout=T)
        gate, entered = threading.Event(), threading.Event()
        faults.arm("scheduler", times=1, action=lambda: gate.wait(T))
        y.insert([(2,)])
        y.advance_to(2)  # wakes the scheduler; it is held at the top of its loop with b's seal queued
        deadline = time.monotonic() + 10
        while faults.hits("scheduler") == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert faults.hits("scheduler") == 1
        eng._scheduler.submit(Cancel("a", "by the test"))  # what eng.cancel sends (it then waits)
        faults.arm("operator_step", times=1, action=lambda: (entered.set(), release.wait(T)))
        gate.set()
        assert entered.wait(10)  # a is cancelled and released; b's step is running
        assert va.released
        out = []

        def reader():
            t0 = time.monotonic()
            try:
                {"to_pandas": va.to_pandas, "len": lambda: len(va), "to_arrow": va.to_arrow}[read]()
                out.append(("read", time.monotonic() - t0))
            except BaseException as ex:  # noqa: BLE001
                out.append((ex, time.monotonic() - t0))

        t = threading.Thread(target=reader, name="reader", daemon=True)
        t.start()
        t.join(PROMPT)
        blocked = t.is_alive()
        release.set()
        t.join(15)
        assert not t.is_alive()
        assert not blocked, f"the read of a cancelled view blocked while another dataflow stepped: {out}"
        assert isinstance(out[0][0], kp.Cancelled), out
    finally:
        release.set()
        faults.disarm()
        eng.close()
