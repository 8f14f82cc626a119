"""Attack (session 48): the control plane under many threads -- Ctrl-C (an asynchronous KeyboardInterrupt)
landing in an install's wait for its reply and in ``eng.wait(NAME)`` of an index-only dataflow, a follower's
``timeout`` while epochs that change nothing go by, ``eng.drop_input(wait=False)`` with the session still
held, ``eng.stats()`` read while another dataflow holds the scheduler in a step, cancel and cascade drop
of a chain of dataflows with threads following and waiting on it, and abandoned followers.

Where a test needs the scheduler held in a step (so that a command stays queued, or a snapshot stays
unpublished), a user function of a dataflow of its own blocks on an Event ("gate") that the test sets: no
test depends on how long anything takes. Every wait is bounded, threads are joined with a bound, and a
watchdog dumps the stacks and ends the process if a test hangs anyway."""
from __future__ import annotations

import gc
import random
import threading
import time
import weakref

import pytest

import kpgnb as kp
from threads import T, async_raise, gated, join_all, watchdog

_watchdog = watchdog(120)


# -- 1. Ctrl-C in an install ------------------------------------------------------------------------------

def test_install_that_raises_keyboard_interrupt_leaves_nothing_installed():
    """README: "An install interrupted by Ctrl-C leaves nothing behind". A thread installs ``t{i}`` while the
    scheduler is held in another dataflow's step, so the install waits in the queue; Ctrl-C reaches the
    thread while it waits for the reply; the step then ends and the install runs. Whatever the timing, the
    outcome must be one of the two consistent ones: the install returned and ``t{i}`` is installed, or it
    raised KeyboardInterrupt and nothing is installed. Today the interrupt is raised as the reply wakes the
    thread (``Reply.wait``: ``abandon()`` comes too late to undo the finished install), so the caller sees
    KeyboardInterrupt and ``t{i}`` is installed anyway: running the cell again fails with "a dataflow named
    't0' is installed already"."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        src = eng.input("src", ["k"], rows=[(1,)])
        x.advance_to(1)
        src.advance_to(1)
        gate, inside = gated(eng, "busy", "src")
        with eng.dataflow("warm") as df:  # (the kernels the installs use, compiled now)
            df.input("x").distinct().view("d")
        eng.wait("warm", timeout=T)
        seen = []
        for i in range(6):
            gate.clear()
            inside.clear()
            src.insert([(7,)])
            src.advance_to(i + 2)
            assert inside.wait(T)  # the scheduler is in busy's step now
            got = {}

            def install(i=i, got=got):
                try:
                    with eng.dataflow(f"t{i}") as df:
                        df.input("x").distinct().view("d")
                    got["r"] = "returned"
                except KeyboardInterrupt:
                    got["r"] = "interrupted"

            t = threading.Thread(target=install, name=f"installer{i}")
            t.start()
            time.sleep(0.1)  # (the install is queued behind the step; the thread waits for its reply)
            async_raise(t)
            gate.set()
            join_all([t])
            eng.wait("busy", timeout=T)
            eng.wait(timeout=T)  # every command sent so far done (an abandoned install undone)
            seen.append((got.get("r"), f"t{i}" in eng.dataflows()))
        assert all(installed == (r == "returned") for r, installed in seen), seen


# -- 2. Ctrl-C in eng.wait(NAME) of a dataflow that only exports ------------------------------------------

@pytest.mark.parametrize("kind", [
    "view",
    "export",
])
def test_ctrl_c_in_wait_on_a_dataflow_name_cancels_it_whatever_it_maintains(kind):
    """README: "Ctrl-C in eng.wait(view) cancels the computation it was waiting for" and, for the notebook,
    "Plain eng.wait cancels what it waited for". A dataflow that builds an index (``arrange_by().export()``,
    the README's ``edges_by_src``) and has no view is waited for by name; Ctrl-C reaches the waiting thread
    while the dataflow is behind (its step is held by a gate). With a view the dataflow is cancelled; with
    only an export it keeps running, and the wait that was interrupted cancelled nothing."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        gate, inside = threading.Event(), threading.Event()

        def hold(k):
            if (k == 7).any():
                inside.set()
                gate.wait(T)
            return {"k": k}

        with eng.dataflow("idx") as df:
            a = df.input("x").map(hold).arrange_by("k")
            if kind == "export":
                a.export("idx_by_k")
            else:
                a.view("idx_v")
        eng.wait("idx", timeout=T)
        x.insert([(7,)])
        x.advance_to(2)
        assert inside.wait(T)
        got = {}

        def waiter():
            try:
                eng.wait("idx", timeout=T)
                got["r"] = "returned"
            except KeyboardInterrupt:
                got["r"] = "interrupted"

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        time.sleep(0.1)
        assert async_raise(t)
        join_all([t])  # (it wakes at its next poll of the snapshot, the step still held)
        assert got["r"] == "interrupted"
        gate.set()
        with pytest.raises(kp.Cancelled):
            eng.wait("idx", timeout=T)
        assert eng.dataflows()["idx"] == "cancelled"
        eng.drop("idx")
        assert "idx_by_k" not in eng.catalog()


def test_ctrl_c_in_wait_for_a_future_epoch_spares_dataflows_that_are_caught_up():
    """``eng.wait(e)`` waits until every view is final before epoch ``e``; Ctrl-C "cancels the computation
    it was waiting for". Here the input is at epoch 1 and both dataflows have computed everything it holds
    (idle): the wait for epoch 5 waits for a writer (a stream) that has not advanced yet, not for any
    computation. Ctrl-C in that wait must not cancel them; today both become ``cancelled`` (their views raise
    Cancelled until dropped and installed again), because ``_cancel_behind`` measures them against the
    epoch asked for rather than against their inputs."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("a") as df:
            va = df.input("x").count(by=[]).view("c")
        with eng.dataflow("b") as df:
            df.input("x").distinct().view("d")
        eng.wait("a", timeout=T)
        eng.wait("b", timeout=T)
        eng.wait(timeout=T)
        got = {}

        def waiter():
            try:
                eng.wait(5, timeout=T)
                got["r"] = "returned"
            except KeyboardInterrupt:
                got["r"] = "interrupted"

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        time.sleep(0.1)
        assert async_raise(t)
        join_all([t])
        assert got["r"] == "interrupted"
        eng.wait(timeout=T)
        assert eng.dataflows() == {"a": "running", "b": "running"}
        x.insert([(2,)])
        x.advance_to(2)
        eng.wait(va, timeout=T)
        assert va.to_pandas()["count"].tolist() == [2]


# -- 3. a follower's timeout ---------------------------------------------------------------------------------

def test_follow_timeout_bounds_next_while_epochs_change_nothing_in_the_view():
    """``view.follow(timeout=)``: "timeout bounds each wait for the next item (TimeoutError)", whose message
    says "no change of view ... within N s". A writer advances the input every 20 ms with rows the view
    filters out, so no frame comes; ``next()`` with a 0.2 s timeout must raise TimeoutError while the writer
    is still going. Today every epoch (an empty change) wakes the follower and starts its wait again, so
    ``next()`` blocks for as long as the writer runs (it stops itself after 3 s here; in a dashboard fed
    by a stream, forever)."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").filter(lambda k: k < 100).view("v")
        eng.wait(v, timeout=T)
        f = v.follow(timeout=0.2)
        assert next(f)["k"].tolist() == [1]
        done, info = threading.Event(), {}

        def writer():
            e, t0 = 1, time.monotonic()
            while not done.is_set() and time.monotonic() - t0 < 3:
                x.insert([(1000 + e,)])
                e += 1
                x.advance_to(e)
                time.sleep(0.02)
            info["stopped_by_reader"] = done.is_set()

        w = threading.Thread(target=writer, name="writer")
        w.start()
        try:
            with pytest.raises(TimeoutError):
                next(f)
        finally:
            done.set()
            join_all([w])
            f.close()
        assert info["stopped_by_reader"], "next() waited for the writer to stop before it timed out"


def test_follower_that_timed_out_goes_on_without_gaps():
    """A TimeoutError from ``next()`` is not the end: the next call gets the epochs that came since, all of
    them, in order (README: "without gaps or repeats")."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"], rows=[(0,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").count(by=[]).view("v")
        eng.wait(v, timeout=T)
        f = v.follow(timeout=0.05)
        first = next(f)
        assert first["count"].tolist() == [1]
        with pytest.raises(TimeoutError):
            next(f)
        for e in range(1, 6):
            x.insert([(e,)])
            x.advance_to(e + 1)
        eng.wait(v, timeout=T)
        f.timeout = T
        net = {1: 1}
        while f.epoch is not None and f.epoch < 6:
            fr = next(f)
            for c, d in zip(fr["count"], fr["diff"]):
                net[int(c)] = net.get(int(c), 0) + int(d)
        f.close()
        assert {c: n for c, n in net.items() if n} == {6: 1}


# -- 4. drop_input(wait=False) -------------------------------------------------------------------------------

def test_session_dropped_without_waiting_refuses_rows_at_once():
    """``eng.drop_input(name, wait=False)`` "queues the drop and frees the name at once"; the session
    "refuses every later call" (``drop_input``'s docstring), as it does after ``wait=True``. With the
    scheduler busy (another dataflow's step), the dropped session still accepts ``insert`` and
    ``advance_to`` after ``drop_input`` returned, and those rows go nowhere: nothing says so. (A notebook
    that re-creates the input under its name and writes to the old variable loses its rows silently.)"""
    with kp.Engine(workers=1) as eng:
        src = eng.input("src", ["k"], rows=[(1,)])
        src.advance_to(1)
        gate, inside = gated(eng, "busy", "src")
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        src.insert([(7,)])
        src.advance_to(2)
        assert inside.wait(T)
        try:
            eng.drop_input("x", wait=False)
            assert "x" not in eng.inputs()
            with pytest.raises(kp.UsageError, match="dropped"):
                x.insert([(2,)])
            with pytest.raises(kp.UsageError, match="dropped"):
                x.advance_to(2)
        finally:
            gate.set()
        eng.wait(timeout=T)


def test_drop_input_without_waiting_then_a_new_input_of_the_name_reads_only_its_own_rows():
    """``drop_input(name, wait=False)`` then ``eng.input(name)`` at once, repeated, with a thread reading
    ``stats()``/``catalog()``/``dataflows()`` meanwhile: each new input of the name holds its own rows only,
    and a dataflow over it sees exactly them."""
    with kp.Engine(workers=2) as eng:
        stop, problems = threading.Event(), []

        def poller():
            while not stop.is_set():
                try:
                    s = eng.stats()
                    names = [i["name"] for i in s["inputs"]]
                    if len(names) != len(set(names)):
                        problems.append(("two inputs of one name", names))
                    eng.catalog()
                    eng.dataflows()
                except Exception as e:  # noqa: BLE001
                    problems.append(repr(e))
                time.sleep(0.002)

        p = threading.Thread(target=poller, name="poller")
        p.start()
        try:
            for i in range(15):
                x = eng.input("x", ["k"], rows=[(i,)] * 3)
                x.insert([(100 + i,)])
                x.advance_to(1)
                eng.drop_input("x", wait=False)
                y = eng.input("x", ["k"], rows=[(1000 + i,)])
                y.advance_to(1)
                with eng.dataflow("d") as df:
                    v = df.input("x").view("v")
                eng.wait(v, timeout=T)
                assert v.to_pandas()["k"].tolist() == [1000 + i]
                eng.drop("d")
                eng.drop_input("x")
        finally:
            stop.set()
            join_all([p])
        assert problems == []
        assert eng.inputs() == {} and eng.dataflows() == {}


# -- 5. stats() from one snapshot ---------------------------------------------------------------------------

def test_stats_reports_a_dataflow_and_its_arrangements_from_one_snapshot():
    """README: "eng.stats() takes every part from one" published snapshot. Dataflow ``fast`` (a map and a
    view) has taken epoch 1 in the scheduler's pass, which is then held in dataflow ``slow``'s step before
    it publishes: ``stats()["dataflows"]`` says ``fast`` is final before epoch 1 (the snapshot), while
    ``stats()["arrangements"]`` shows ``fast``'s arrangement with upper 2 and epoch 1's row (read from the
    live trace). A dashboard built from one ``stats()`` shows the two tables disagreeing."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("fast") as df:
            df.input("x").map(lambda k: {"k": k * 2}).view("v")
        gate, inside = gated(eng, "slow", "x")
        eng.wait("fast", timeout=T)
        x.insert([(7,)])
        x.advance_to(2)
        assert inside.wait(T)
        try:
            s = eng.stats()
        finally:
            gate.set()
        fast = {d["name"]: d for d in s["dataflows"]}["fast"]
        arrs = [a for a in s["arrangements"] if a["dataflow"] == "fast"]
        assert arrs
        assert [(str(a["upper"]), a["records"]) for a in arrs] == [(str(fast["frontier"]), 1)] * len(arrs), \
            (fast["frontier"], [(a["name"], a["upper"], a["records"]) for a in arrs])


# -- 6. cancel and cascade drop of a chain, with threads on it ----------------------------------------------

def test_cancel_of_the_head_of_a_chain_ends_its_readers_and_cascade_drop_clears_it_repeatedly():
    """A exports e; B reads e and exports e2 (and has a view); C reads e2. A thread follows C's view, another
    waits on B's view and advances the input; the main thread cancels A at a different moment each round.
    Then A is cancelled, B and C failed (README: "dataflows reading a cancelled one's exports fail with
    it"), the follower and the waiter end with the failure (or the waiter returned first), and
    ``eng.drop('A', cascade=True)`` leaves nothing, so the three install again under their names."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        x.advance_to(1)
        epoch = [1]
        for rnd in range(6):
            with eng.dataflow("A") as df:
                df.input("x").arrange_by("k").export("e")
            with eng.dataflow("B") as df:
                b = df.use("e").map(lambda k: {"k": k + 10}).arrange_by("k").export("e2")
                vb = b.view("vb")
            with eng.dataflow("C") as df:
                vc = df.use("e2").count(by=[]).view("vc")
            eng.wait("C", timeout=T)
            assert vc.to_pandas()["count"].tolist() == [2 + rnd]
            got = {}

            def follow(vc=vc, got=got):
                try:
                    for _ in vc.follow(timeout=T):
                        pass
                    got["f"] = "ended"
                except kp.KpgnbError as e:
                    got["f"] = type(e).__name__

            def wait_and_write(vb=vb, got=got, rnd=rnd):
                try:
                    eng.wait(vb, timeout=T)
                    x.insert([(100 + rnd,)])
                    epoch[0] += 1
                    x.advance_to(epoch[0])
                    eng.wait(vb, timeout=T)
                    got["w"] = "returned"
                except kp.KpgnbError as e:
                    got["w"] = type(e).__name__

            threads = [threading.Thread(target=follow, name="follower"),
                       threading.Thread(target=wait_and_write, name="waiter")]
            for t in threads:
                t.start()
            time.sleep(0.01 * rnd)
            eng.cancel("A")
            join_all(threads)
            assert eng.dataflows() == {"A": "cancelled", "B": "failed", "C": "failed"}, eng.dataflows()
            assert got["f"] == "DataflowError", got
            assert got["w"] in ("DataflowError", "returned"), got
            with pytest.raises(kp.DataflowError, match="cancelled"):
                vc.to_pandas()
            eng.drop("A", cascade=True)
            assert eng.dataflows() == {} and eng.catalog() == {}
            assert eng.dataflow_stats(retired=True) == []


# -- 7. followers abandoned without close ----------------------------------------------------------------------

def test_abandoned_followers_are_collected_and_the_view_goes_on():
    """Followers created and dropped without ``close()`` (a generator left half-read in a cell), some read
    once, some never, on two threads while a writer advances: each is garbage once unreferenced (the engine
    holds them weakly), and the view and a follower kept alongside are exact."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"], rows=[(0,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").count(by=[]).view("v")
        eng.wait(v, timeout=T)
        kept = v.follow(timeout=T)
        refs, stop = [], threading.Event()
        lock = threading.Lock()

        def abandon(seed):
            r = random.Random(seed)
            while not stop.is_set():
                f = v.follow(timeout=T)
                if r.random() < 0.5:
                    next(f)
                with lock:
                    refs.append(weakref.ref(f))
                del f

        threads = [threading.Thread(target=abandon, args=(s,), name=f"abandon{s}") for s in range(2)]
        for t in threads:
            t.start()
        for e in range(1, 30):
            x.insert([(e,)])
            x.advance_to(e + 1)
            time.sleep(0.002)
        stop.set()
        join_all(threads)
        eng.wait(v, timeout=T)
        gc.collect()
        assert refs and all(r() is None for r in refs)
        assert v.to_pandas()["count"].tolist() == [30]
        net = {}
        while kept.epoch is not None and kept.epoch < 30:
            fr = next(kept)
            for c, d in zip(fr["count"], fr["diff"]):
                net[int(c)] = net.get(int(c), 0) + int(d)
        kept.close()
        assert {c: n for c, n in net.items() if n} == {30: 1}
