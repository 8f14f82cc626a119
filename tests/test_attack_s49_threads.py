"""Attack (session 49): the engine as a service many threads use at once (README "Many threads, one
engine" and "Watching the engine").

Money moved between accounts (the total is conserved in every epoch) read at once through every kind of
reader (``to_pandas``, ``at=``, a follower, a subscription, a trace handle, a dataflow installed over the
export and dropped again); Ctrl-C (an asynchronous KeyboardInterrupt) in a replacing install and in
``eng.cancel`` while the scheduler is held in a step; ``eng.close()`` with every kind of call queued
behind a step; what a follower and the "Watching the engine" calls say once the engine is closed; and a
dataflow installed over an input whose rows are still being loaded (and then fail to load) by another
thread.

Where a test needs the scheduler held in a step, a user function of a dataflow of its own blocks on an
Event ("gate") the test sets: no test depends on how long anything takes (a sleep only gives a thread the
chance to block where the test wants it; the outcome asserted holds either way). Every wait is bounded,
threads are joined with a bound, and a watchdog dumps the stacks and ends the process if a test hangs.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

import kpgnb as kp
from threads import T, async_raise, gated, join_all, watchdog

_watchdog = watchdog(120)


def _queued(eng, before: int):
    """Wait (bounded) until a command was sent to the scheduler after ``before`` (its count of commands
    then): the interrupted call is waiting for its reply, not still on its way to sending it."""
    deadline = time.monotonic() + T
    while eng._scheduler.submitted == before and time.monotonic() < deadline:
        time.sleep(0.005)
    assert eng._scheduler.submitted > before
    time.sleep(0.05)  # (and it is back in its wait for the reply)


def _hold(src, gate, inside):
    """Hold the scheduler in the gated dataflow's step (the next epoch of ``src`` holds the row 7)."""
    gate.clear()
    inside.clear()
    src.insert([(7,)])
    src.advance_to(src.epoch + 1)
    assert inside.wait(T)


# -- 1. what works: a conserved total through every kind of reader -------------------------------------------

ACCOUNTS, START, EPOCHS = 6, 100, 60
TOTAL = ACCOUNTS * START


@pytest.mark.parametrize("workers", [1, 2])
def test_transfers_conserve_the_total_through_every_kind_of_reader(workers):
    """A writer moves money between two accounts in each epoch (remove both rows, insert the new balances):
    in every whole epoch there are ACCOUNTS rows and the balances add up to TOTAL. At the same time: a
    reader of ``to_pandas()`` and ``to_pandas(at=)`` of the rows and of a ``sum`` view, a follower whose
    rebuilt contents are checked after every frame, a subscription to the rows, a thread opening trace
    handles on the exported arrangement and accumulating them, and a thread installing (and dropping) a
    dataflow that sums ``df.use`` of the export. No reader may ever see a torn epoch."""
    rng = random.Random(49 + workers)
    with kp.Engine(workers=workers) as eng:
        acc = eng.input("acc", ["id", "bal"])
        acc.insert([(i, START) for i in range(ACCOUNTS)])
        acc.advance_to(1)
        with eng.dataflow("bank") as df:
            a = df.input("acc").arrange_by("id").export("acc_by_id")
            rows = a.view("rows", history=3)
            total = a.sum(col="bal").view("total")
        eng.wait("bank", timeout=T)
        bad, counts = [], Counter()
        done = threading.Event()

        def writer():
            bal = {i: START for i in range(ACCOUNTS)}
            try:
                for e in range(1, EPOCHS):
                    x, y = rng.sample(range(ACCOUNTS), 2)
                    amount = rng.randint(1, 20)
                    acc.remove([(x, bal[x]), (y, bal[y])])
                    bal[x] -= amount
                    bal[y] += amount
                    acc.insert([(x, bal[x]), (y, bal[y])])
                    acc.advance_to(e + 1)
                    if e % 4 == 0:
                        time.sleep(0.002)
            finally:
                done.set()

        def whole(what, frame, epoch):
            counts[what] += 1
            if len(frame) != ACCOUNTS or int(frame["bal"].sum()) != TOTAL or frame["id"].nunique() != ACCOUNTS:
                bad.append((what, epoch, frame.values.tolist()))

        def reader():
            while not done.is_set():
                d = rows.to_pandas()
                whole("to_pandas", d, d.attrs["epoch"])
                t = total.to_pandas()
                if len(t) and int(t["bal"].iloc[0]) != TOTAL:
                    bad.append(("sum", t.attrs["epoch"], t.values.tolist()))
                e = d.attrs["epoch"]
                if e is not None and e > 1:
                    try:
                        whole("at", rows.to_pandas(at=e - 1), e - 1)
                    except kp.CompactedError:
                        pass  # (the view moved on by more than its history meanwhile)

        def follower():
            cur = Counter()
            f = rows.follow(timeout=T)
            try:
                for frame in f:
                    for i, b, d in zip(frame["id"], frame["bal"], frame["diff"]):
                        cur[(int(i), int(b))] += int(d)
                    live = +cur
                    counts["follow"] += 1
                    if sum(live.values()) != ACCOUNTS or sum(b * m for (_, b), m in live.items()) != TOTAL:
                        bad.append(("follow", f.epoch, sorted(live.items())))
                    if f.epoch >= EPOCHS:
                        break
            finally:
                f.close()

        def tracer():
            while not done.is_set():
                h = eng.trace("acc_by_id")
                try:
                    keys, vals, cnt = h.accumulate()
                    counts["handle"] += 1
                    if int(cnt.sum()) != ACCOUNTS or int((vals[0] * cnt).sum()) != TOTAL:
                        bad.append(("handle", str(h.upper), keys.tolist(), vals.tolist(), cnt.tolist()))
                finally:
                    h.close()

        def installer():
            i = 0
            while not done.is_set():
                with eng.dataflow(f"audit{i}") as df:
                    v = df.use("acc_by_id").sum(col="bal").view("t")
                eng.wait(v, timeout=T)
                t = v.to_pandas()
                counts["install"] += 1
                if len(t) and int(t["bal"].iloc[0]) != TOTAL:
                    bad.append(("install", t.attrs["epoch"], t.values.tolist()))
                eng.stats()
                eng.drop(f"audit{i}")
                i += 1

        sub_frames = []
        sub = rows.subscribe(sub_frames.append)
        threads = [threading.Thread(target=f, name=f.__name__)
                   for f in (writer, reader, follower, tracer, installer)]
        for t in threads:
            t.start()
        join_all(threads)
        eng.wait(rows, timeout=T)
        deadline = time.monotonic() + T
        while sum(len(f) for f in sub_frames) and max(int(f["time"].max()) for f in sub_frames if len(f)) \
                < EPOCHS - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        sub.close()
        assert sub.error is None
        cur = Counter()
        for frame in sub_frames:  # epoch by epoch (a frame may carry several): whole at each
            for e in sorted(set(frame["time"])):
                part = frame[frame["time"] == e]
                for i, b, d in zip(part["id"], part["bal"], part["diff"]):
                    cur[(int(i), int(b))] += int(d)
                live = +cur
                if sum(live.values()) != ACCOUNTS or sum(b * m for (_, b), m in live.items()) != TOTAL:
                    bad.append(("subscribe", e, sorted(live.items())))
        assert not bad, bad[:5]
        assert counts["follow"] and counts["to_pandas"] and counts["handle"] and counts["install"], counts


# -- 2. Ctrl-C in a replacing install and in eng.cancel ------------------------------------------------------

def test_ctrl_c_in_a_replacing_install_still_queued_keeps_the_old_dataflow():
    """README: "An install interrupted by Ctrl-C leaves nothing behind (a replacing one that the interrupt
    reaches after the old dataflow was swapped out keeps the new one)". Here the interrupt reaches the
    installing thread (and it has raised) while its install still waits behind another dataflow's step, so
    before any swap: the old dataflow must stay installed, answering as before, and the new one must never
    be installed."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        src = eng.input("src", ["k"], rows=[(1,)])
        x.advance_to(1)
        src.advance_to(1)
        gate, inside = gated(eng, "busy", "src")
        with eng.dataflow("rep") as df:
            old = df.input("x").map(lambda k: {"k": k * 0}).view("v")
        eng.wait(old, timeout=T)
        seen = []
        for i in range(1, 6):
            _hold(src, gate, inside)
            got = {}

            def install(i=i, got=got):
                try:
                    with eng.dataflow("rep", replace=True) as df:
                        df.input("x").map(lambda k: {"k": k * 0 + i}).view("v")
                    got["r"] = "returned"
                except KeyboardInterrupt:
                    got["r"] = "interrupted"

            before = eng._scheduler.submitted
            t = threading.Thread(target=install, name=f"replacer{i}")
            t.start()
            _queued(eng, before)
            async_raise(t)
            join_all([t])  # (it raised while the scheduler is still held: before the swap)
            gate.set()
            eng.wait("busy", timeout=T)
            eng.wait(timeout=T)
            seen.append((got.get("r"), eng.dataflows().get("rep"), sorted(old.to_pandas()["k"])))
        assert seen == [("interrupted", "running", [0])] * 5, seen


def test_ctrl_c_in_cancel_stops_the_wait_not_the_cancel():
    """README (``Engine.cancel``): "Returns once the snapshot shows it ...; Ctrl-C stops that wait, not the
    cancel". The cancel is queued behind another dataflow's step when the interrupt reaches the caller;
    once the step ends, the dataflow is cancelled all the same, and its views say so."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        src = eng.input("src", ["k"], rows=[(1,)])
        x.advance_to(1)
        src.advance_to(1)
        gate, inside = gated(eng, "busy", "src")
        for i in range(4):
            with eng.dataflow(f"victim{i}") as df:
                v = df.input("x").distinct().view("d")
            eng.wait(v, timeout=T)
            _hold(src, gate, inside)
            got = {}

            def cancel(i=i, got=got):
                try:
                    eng.cancel(f"victim{i}")
                    got["r"] = "returned"
                except KeyboardInterrupt:
                    got["r"] = "interrupted"

            before = eng._scheduler.submitted
            t = threading.Thread(target=cancel, name=f"canceller{i}")
            t.start()
            _queued(eng, before)
            async_raise(t)
            join_all([t])
            gate.set()
            eng.wait("busy", timeout=T)
            eng.wait(timeout=T)
            assert got["r"] == "interrupted"
            assert eng.dataflows()[f"victim{i}"] == "cancelled"
            with pytest.raises(kp.Cancelled):
                v.to_pandas()
            eng.drop(f"victim{i}")


# -- 3. close with every kind of call queued or blocked -------------------------------------------------------

def _closing(eng, calls: dict, gate) -> dict:
    """Run each of ``calls`` on a thread of its own while the scheduler is held, close the engine (the gate
    opens a moment later, so that close() has to wait for the step), and return what each call did."""
    got = {}

    def run(name, fn):
        try:
            fn()
            got[name] = "returned"
        except StopIteration:
            got[name] = "StopIteration"
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            got[name] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=run, args=(n, f), name=n) for n, f in calls.items()]
    for t in threads:
        t.start()
    time.sleep(0.2)  # (each call is queued or blocked by now; if not, it meets the closed engine: same answer)
    opener = threading.Timer(0.2, gate.set)
    opener.start()
    eng.close()
    join_all(threads + [opener])
    return got


def test_close_answers_every_queued_or_blocked_call_with_engine_closed():
    """README: "eng.close() answers every call still queued (an eng.drop or an install waiting behind a long
    step) with EngineError("the engine is closed")", and after close every call raises it. Queued behind a
    held step: an install, a replacing install, drop, drop_input, eng.trace, view.follow(), eng.cancel, and
    eng.wait on a view, a dataflow name, an epoch and everything. Each ends with that EngineError."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        src = eng.input("src", ["k"], rows=[(1,)])
        eng.input("y", ["k"], rows=[(1,)]).advance_to(1)
        x.advance_to(1)
        src.advance_to(1)
        gate, inside = gated(eng, "busy", "src")
        with eng.dataflow("other") as df:
            df.input("x").arrange_by("k").export("xk")
            ov = df.input("src").view("ov")  # (behind while the step is held: a wait on it blocks)
        eng.wait(timeout=T)
        _hold(src, gate, inside)

        def install():
            with eng.dataflow("new") as df:
                df.input("x").view("nv")

        def replace():
            with eng.dataflow("other", replace=True) as df:
                df.input("x").view("ov")

        calls = {"install": install, "replace": replace, "drop": lambda: eng.drop("other"),
                 "drop_input": lambda: eng.drop_input("y"), "trace": lambda: eng.trace("xk"),
                 "follow": lambda: ov.follow(), "cancel": lambda: eng.cancel("other"),
                 "wait_view": lambda: eng.wait(ov), "wait_name": lambda: eng.wait("busy"),
                 "wait_epoch": lambda: eng.wait(3), "wait_all": lambda: eng.wait()}
        got = _closing(eng, calls, gate)
    finally:
        eng.close()
    assert got == {n: "EngineError: the engine is closed" for n in calls}, got


def test_a_follower_waiting_when_the_engine_closes_says_the_engine_is_closed():
    """README: "After eng.close() every call (..., view reads, follow) raises EngineError("the engine is
    closed")", and a follower "ends when the view is dropped or all its inputs are closed" -- neither
    happened here. A dashboard thread in ``for changes in view.follow(): ...`` is blocked waiting for the
    next epoch when another thread closes the engine; its loop just ends, exactly as it would had the
    view's inputs all been closed (the view's data is complete), and a subscription ends with ``error``
    None. Every other call blocked at that moment (``eng.wait``, an install, ``eng.trace``...) gets
    ``EngineError("the engine is closed")``; so does ``view.follow()`` itself called after the close, while
    ``next()`` on the follower made before it says StopIteration. The blocked ``next()`` should raise that
    EngineError too (and so should a later ``next()``)."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").count(by=[]).view("v")
        eng.wait(v, timeout=T)
        f = v.follow(timeout=T)
        next(f)  # the contents; the next frame would be epoch 1's changes
        got = {}

        def follow():
            try:
                for _ in f:
                    pass
                got["r"] = "ended"
            except BaseException as e:  # noqa: BLE001 - recorded for the assertion
                got["r"] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=follow, name="follower")
        t.start()
        time.sleep(0.1)  # (blocked in next(): nothing changes in the view)
        eng.close()
        join_all([t])
        later = None
        try:
            next(f)
        except BaseException as e:  # noqa: BLE001
            later = f"{type(e).__name__}: {e}"
    finally:
        eng.close()
    assert (got["r"], later) == ("EngineError: the engine is closed",) * 2


def test_watching_calls_after_close_say_the_engine_is_closed_not_that_the_dataflow_is_unknown():
    """README: "After eng.close() every call ... raises EngineError("the engine is closed"); stats(),
    dataflows(), catalog() still answer." ``eng.latency_histogram(name)`` and ``eng.operator_stats(name)``
    (README "Watching the engine") are neither: asked about a dataflow that was running when the engine
    closed, they raise ``UnknownNameError: no dataflow named 'd'; installed: []`` (a KeyError), telling a
    dashboard the dataflow was dropped, or never existed, rather than that the engine is gone. Either the
    figures (they are still in the engine's last snapshot) or EngineError would be right; a claim that
    the dataflow does not exist is not."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("x").count(by=[]).view("v")
        eng.wait("d", timeout=T)
        x.insert([(2,)])
        x.advance_to(2)
        eng.wait("d", timeout=T)
        assert eng.latency_histogram("d")[1].sum() >= 1
        assert eng.operator_stats("d")
    finally:
        eng.close()
    for call in (lambda: eng.latency_histogram("d"), lambda: eng.operator_stats("d")):
        try:
            call()
        except kp.UnknownNameError as e:
            pytest.fail(f"after close: UnknownNameError {e}")
        except kp.EngineError as e:
            assert "the engine is closed" in str(e)


# -- 4. an input whose rows fail to load, read meanwhile by another thread's install ------------------------

def test_a_dataflow_installed_while_an_input_s_rows_fail_to_load_is_not_left_on_a_ghost_input():
    """README: "``rows`` are inserted at epoch 0; if they cannot be (a bad value, an interrupt) no input is
    created, so the name stays free for a corrected retry" (``Engine.input``). A loader thread creates
    input ``y`` with rows that take a while to encode (a column array-like that is slow to produce its
    array, as a big frame is slow to convert) and then turn out bad. Meanwhile another thread (a cell
    waiting for the input to appear in ``eng.inputs()``, which lists ``y`` already) installs a dataflow
    counting ``df.input("y")``, and the install succeeds. The load then fails and ``y`` is taken out of
    ``eng.inputs()``, but the installed dataflow keeps reading the session that was never created: the
    corrected retry ``eng.input("y", rows=...)`` makes a second ``y`` whose rows never reach it, nobody
    can advance or drop the one it reads, and ``eng.wait`` on it never returns. Either the install must
    fail (no input ``y`` exists) or the dataflow must read the ``y`` that does exist."""
    started, release = threading.Event(), threading.Event()

    class SlowBadColumn:  # (numpy asks it for its array when the rows are encoded)
        def __len__(self):
            return 3

        def __array__(self, dtype=None, copy=None):
            started.set()
            release.wait(T)
            raise ValueError("a bad value in the last row")

    with kp.Engine(workers=1) as eng:
        got = {}

        def load():
            try:
                eng.input("y", ["k"], rows={"k": SlowBadColumn()})
                got["load"] = "created"
            except ValueError:
                got["load"] = "refused"

        t = threading.Thread(target=load, name="loader")
        t.start()
        assert started.wait(T)
        installed = False
        if "y" in eng.inputs():
            try:
                with eng.dataflow("r") as df:
                    v = df.input("y").count(by=[]).view("v")
                installed = True
            except kp.KpgnbError:
                pass
        release.set()
        join_all([t])
        assert got["load"] == "refused"
        assert "y" not in eng.inputs()
        y = eng.input("y", ["k"], rows=[(1,), (2,)])  # the corrected retry
        y.advance_to(1)
        if installed:
            eng.wait(v, timeout=3)
            assert v.to_pandas()["count"].tolist() == [2]
