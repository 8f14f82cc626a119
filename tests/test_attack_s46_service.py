"""Attack (session 46): the engine as a service used by many threads at once -- user functions that call
back into the engine, Ctrl-C landing while a follower hands out a frame, reads of a late-installed view
(``len`` against ``to_pandas``), close() racing waiters, and consistency of two views of one input read
at the epoch each reports while a writer advances and other threads install, replace and drop readers.

Every scenario is bounded: waits carry timeouts, threads are joined with a bound (a thread still alive
fails the test), and a watchdog dumps the stacks and ends the process if a test hangs anyway."""
from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from collections import Counter

import pandas as pd
import pytest

import kpgnb as kp
from threads import T, async_raise, join_all, watchdog

_watchdog = watchdog(180)


# -- 1. a user function that calls back into the engine ---------------------------------------------------

def test_cancel_called_from_a_user_function_does_not_hang_the_engine():
    """An ``inspect`` that stops its own dataflow when it sees a bad row: ``eng.cancel('d')`` from inside the
    dataflow. Either the cancel takes effect (waits raise Cancelled) or the call is refused with an error,
    as ``eng.drop``/``eng.trace`` are ("engine calls that wait for the scheduler cannot be made from inside a
    dataflow"); the engine must not wedge. Today the cancel loops forever on the scheduler thread waiting
    for a snapshot that thread would publish: every dataflow stops, ``eng.wait`` times out."""
    eng = kp.Engine(workers=2)
    errors = []
    try:
        x = eng.input("x", ["a"])

        def guard(cols, times, diffs):
            if len(diffs) and (cols["a"] == 666).any():
                try:
                    eng.cancel("d")
                except kp.KpgnbError as e:
                    errors.append(e)

        with eng.dataflow("d") as df:
            v = df.input("x").inspect(guard).count(by=[]).view("v")
        with eng.dataflow("other") as df:
            o = df.input("x").count(by=[]).view("o")
        x.insert([(1,), (666,)])
        x.advance_to(1)
        try:
            eng.wait(v, timeout=5)
        except kp.Cancelled:
            pass
        eng.wait(o, timeout=5)  # the other dataflow carries on either way
        assert o.to_pandas()["count"].tolist() == [2]
    finally:
        eng.close()  # (also ends the hung cancel: it gives up once the engine is closed)


def test_wait_called_from_a_user_function_raises_instead_of_hanging():
    """A ``map`` that calls ``eng.wait()`` (a helper shared with cell code, say): the scheduler thread is
    the one that would have to make progress, so the call can never return. ``eng.drop``, ``eng.trace``,
    ``view.follow`` and installs raise EngineError there at once; ``eng.wait`` (and ``eng.cancel``) block
    the scheduler instead, and with it every dataflow of the engine."""
    eng = kp.Engine(workers=2)
    seen = []
    try:
        x = eng.input("x", ["a"])

        def fn(a):
            if len(a):
                try:
                    eng.wait(timeout=None)
                    seen.append("returned")
                except kp.KpgnbError as e:
                    seen.append(e)
            return {"a": a}

        with eng.dataflow("d") as df:
            v = df.input("x").map(fn).count(by=[]).view("v")
        x.insert([(1,)])
        x.advance_to(1)
        eng.wait(v, timeout=5)
        assert v.to_pandas()["count"].tolist() == [1]
        assert seen and isinstance(seen[0], kp.EngineError), seen
    finally:
        eng.close()  # (ends the hung wait inside the map: it raises once the engine is closed)


def test_calls_that_cannot_be_answered_from_a_user_function_raise_and_others_work():
    """From inside a user function, a drop, a trace, a follow and an install raise EngineError at once (they
    wait for the scheduler, which is running the function), while reads of published state (another view's
    ``to_pandas``, ``stats``) and feeding an input (``insert``/``advance_to``: buffered and sent, nothing
    waits) work; the dataflow carries on and the fed rows arrive."""
    eng = kp.Engine(workers=2)
    got = {}
    try:
        x = eng.input("x", ["a"])
        y = eng.input("y", ["a"])
        with eng.dataflow("side") as df:
            side = df.input("y").count(by=[]).view("side")

        def fn(a):
            if len(a) and not got:
                def install():
                    with eng.dataflow("new") as df:
                        df.input("y").view("n")
                for what, call in (("drop", lambda: eng.drop("side")), ("trace", lambda: eng.trace("nothing")),
                                   ("follow", lambda: side.follow()), ("install", install)):
                    try:
                        call()
                        got[what] = "returned"
                    except kp.EngineError as e:
                        got[what] = "cannot be made from inside a dataflow" in str(e)
                    except Exception as e:  # noqa: BLE001
                        got[what] = repr(e)
                got["read"] = len(side.to_pandas())
                got["stats"] = "dataflows" in eng.stats()
                y.insert([(7,)])
                y.advance_to(1)
            return {"a": a}

        with eng.dataflow("d") as df:
            v = df.input("x").map(fn).count(by=[]).view("v")
        x.insert([(1,), (2,)])
        x.advance_to(1)
        eng.wait(v, timeout=T)
        eng.wait(side, timeout=T)
        assert got == {"drop": True, "trace": True, "follow": True, "install": True, "read": 0, "stats": True}
        assert v.to_pandas()["count"].tolist() == [2]
        assert side.to_pandas()["count"].tolist() == [1]
        assert eng.dataflows() == {"side": "running", "d": "running"}
    finally:
        eng.close()


# -- 2. Ctrl-C while a follower hands out a frame ---------------------------------------------------------

def test_ctrl_c_while_a_follower_decodes_a_frame_loses_no_changes():
    """``for changes in follower`` in a notebook cell; Ctrl-C lands while ``__next__`` builds the frame (the
    decode and the DataFrame are most of its time). The follower is an ordinary iterator that can be
    iterated again after the interrupt (a TimeoutError or Ctrl-C while waiting loses nothing), and the
    README promises every epoch's changes without gaps. But the frame was popped from the queue before it
    was decoded, so it is gone: resuming yields epoch 1's row only, epoch 0's two rows never come.
    The interrupt is placed deterministically with a trace function raising KeyboardInterrupt when the
    decode is entered (where a SIGINT handler would raise it)."""
    eng = kp.Engine(workers=2)
    try:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").count(by="a").view("v")
        fol = v.follow(timeout=T)
        frames = [next(fol)]  # the (empty) contents
        x.insert([(1,), (2,)])
        x.advance_to(1)
        eng.wait(v, timeout=T)
        fired = []

        def tracer(frame, event, arg):
            if event == "call" and frame.f_code.co_name == "_decode" and not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return None
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                next(fol)
        finally:
            sys.settrace(old)
        assert fired
        x.insert([(3,)])
        x.close()
        frames += list(fol)  # resumed: ends when the input is closed
        allf = pd.concat(frames)
        got = Counter((int(a), int(c), int(t), int(d)) for a, c, t, d in
                      zip(allf["a"], allf["count"], allf["time"], allf["diff"]))
        assert got == Counter({(1, 1, 0, 1): 1, (2, 1, 0, 1): 1, (3, 1, 1, 1): 1}), got
    finally:
        eng.close()


@pytest.mark.parametrize("workers", [1, 3])
def test_ctrl_c_in_one_of_two_waiters_cancels_for_both_and_spares_the_rest(workers):
    """Two threads wait on the view of a dataflow whose map blocks; Ctrl-C in one of them cancels the
    dataflow: that wait raises KeyboardInterrupt, the other raises Cancelled (not a timeout), a follower of
    the view raises Cancelled, a dataflow beside it is exact, and after ``eng.drop`` the name installs
    again."""
    eng = kp.Engine(workers=workers)
    gate = threading.Event()
    try:
        x = eng.input("x", ["a"])

        def slow(a):
            if len(a):
                gate.wait(T)
            return {"a": a}
        with eng.dataflow("d") as df:
            v = df.input("x").map(slow).count(by=[]).view("v")
        with eng.dataflow("o") as df:
            o = df.input("x").count(by=[]).view("o")
        fol = v.follow(timeout=T)
        next(fol)
        res = {}

        def waiter(key):
            try:
                eng.wait(v, timeout=T)
                res[key] = "returned"
            except BaseException as e:  # noqa: BLE001
                res[key] = type(e).__name__

        def follower():
            try:
                list(fol)
                res["follow"] = "ended"
            except BaseException as e:  # noqa: BLE001
                res["follow"] = type(e).__name__
        x.insert([(1,), (2,)])
        x.advance_to(1)
        ts = [threading.Thread(target=waiter, args=(k,), daemon=True) for k in ("a", "b")]
        ts.append(threading.Thread(target=follower, daemon=True))
        for t in ts:
            t.start()
        deadline = time.monotonic() + T
        while eng.snapshot().dataflows["d"].steps == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert async_raise(ts[0])
        ts[0].join(T)
        gate.set()
        join_all(ts)
        assert res == {"a": "KeyboardInterrupt", "b": "Cancelled", "follow": "Cancelled"}, res
        assert eng.dataflows() == {"d": "cancelled", "o": "running"}
        eng.wait(o, timeout=T)
        assert o.to_pandas()["count"].tolist() == [2]
        eng.drop("d")
        with eng.dataflow("d") as df:
            v2 = df.input("x").count(by=[]).view("v")
        eng.wait(v2, timeout=T)
        assert v2.to_pandas()["count"].tolist() == [2]
    finally:
        gate.set()
        eng.close()


# -- 3. a late-installed view read while its inputs are at different epochs ----------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_len_of_a_late_view_agrees_with_to_pandas(workers):
    """Input a is at epoch 3, input b (a slower writer) at epoch 2; a dataflow installed now over
    ``a.concat(b)`` starts at epoch 2 and, per the README, reads as nothing (no rows, attrs['epoch'] 0)
    until epoch 2 is final. ``to_pandas()`` and ``columns()`` do; ``len(view)`` -- documented as the number
    of rows to_pandas() gives, and read from a published snapshot so it sees whole epochs or nothing --
    says 2: b's rows of epochs 0 and 1, a part of the start epoch without a's rows."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"])
        b = eng.input("b", ["k"])
        for e in range(1, 4):
            a.insert([(e,)])
            a.advance_to(e)
        for e in range(1, 3):
            b.insert([(10 + e,)])
            b.advance_to(e)
        eng.wait(timeout=T)
        with eng.dataflow("c") as df:
            v = df.input("a").concat(df.input("b")).view("v")
        eng.wait(v, timeout=T)
        d = v.to_pandas()
        assert (len(d), d.attrs["epoch"]) == (0, 0)
        assert len(v) == len(d)
        b.advance_to(3)
        eng.wait(v, timeout=T)
        assert len(v) == len(v.to_pandas()) == 5


# -- 4. Ctrl-C while advance_to / close hands the epoch to the scheduler --------------------------------

def _interrupt_when_the_seal_is_queued():
    """A trace function that raises KeyboardInterrupt once, where a SIGINT arriving while
    ``advance_to``/``close`` queue their seal would surface: at the entry of the wake-up call right after
    the command was appended to the scheduler's queue."""
    fired = []

    def tracer(frame, event, arg):
        if event == "call" and not fired and frame.f_code.co_name == "set" and frame.f_back is not None \
                and frame.f_back.f_code.co_name == "submit":
            fired.append(1)
            raise KeyboardInterrupt
        return None
    return tracer, fired


@pytest.mark.parametrize("how", ["advance_to", "close"])
def test_ctrl_c_in_advance_or_close_neither_duplicates_rows_nor_reopens_the_input(how):
    """Rows (1,), (2,) inserted, then ``advance_to(1)`` (or ``close()``) is interrupted by Ctrl-C just after
    the seal carrying them was queued. The seal is executed, so either the call took effect (epoch 1 /
    closed, nothing buffered) or, if it reports that it did not, it must not have: the README promises a
    refused advance keeps its rows and leaves the epoch as it was, and rows are never lost (nor, surely,
    counted twice). Today the session still holds the rows and its old epoch: repeating ``advance_to(1)``
    sends them again and the count is 4, not 2; likewise repeating an interrupted ``close()`` (count 4),
    and without the repeat the input, closed on the engine already, still takes rows and epochs (insert
    (3,) and advance_to(5) after it: count 5 of 3 rows, a closed view back at epoch 5)."""
    eng = kp.Engine(workers=2)
    try:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").count(by=[]).view("v")
        x.insert([(1,), (2,)])
        tracer, fired = _interrupt_when_the_seal_is_queued()
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                x.advance_to(1) if how == "advance_to" else x.close()
        finally:
            sys.settrace(old)
        assert fired
        if how == "advance_to":
            x.advance_to(1)  # the user repeats the interrupted call
            eng.wait(v, timeout=T)
            d = v.to_pandas()
            assert (d["count"].tolist(), d.attrs["epoch"]) == ([2], 1)
        else:
            try:
                x.close()  # repeated: a no-op, or the close it should have been
                x.insert([(3,)])
                x.advance_to(5)
                took_more = True
            except kp.UsageError:
                took_more = False
            eng.wait(v, timeout=T)
            d = v.to_pandas()
            assert not took_more, "an input closed on the engine took more rows and epochs"
            assert (d["count"].tolist(), d.attrs["epoch"]) == ([2], None)
    finally:
        eng.close()


# -- 5. two views of one input, in two dataflows sharing its arrangement, read at a common epoch --------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_count_and_sum_views_of_a_shared_arrangement_agree_at_every_epoch(workers):
    """Every row of x has v == 3, so at any epoch sum(v) by k is 3 * count by k. A count view and a sum
    view live in two dataflows importing one export (``df.use``), with history to read past epochs; a
    writer advances x (inserts and removals), a reader thread reads both views and compares them at the
    older of the two epochs they report (``at=``), two subscriptions rebuild each view epoch by epoch from
    its changes, and a third thread installs and drops more importers meanwhile. Every comparison agrees,
    both followed streams match the reference at every epoch, and nothing hangs."""
    rng = random.Random(workers)
    live, states, stream = Counter(), [], []
    for _ in range(40):
        add = [(rng.randrange(8), 3) for _ in range(3)]
        rm = [rng.choice(sorted(live.elements()))] if live and rng.random() < 0.6 else []
        for q in add:
            live[q] += 1
        for q in rm:
            live[q] -= 1
        live = +live
        stream.append((add, rm))
        states.append({k: m for (k, _), m in live.items()})
    eng = kp.Engine(workers=workers)
    problems, stop = [], threading.Event()
    try:
        x = eng.input("x", ["k", "v"])
        with eng.dataflow("src") as df:
            df.input("x").arrange_by("k").export("xk")
        with eng.dataflow("c") as df:
            cv = df.use("xk").count(by="k").view("c", history=100)
        with eng.dataflow("s") as df:
            sv = df.use("xk").sum(by="k", col="v").view("s", history=100)
        changes = {"c": [], "s": []}
        subs = [cv.subscribe(changes["c"].append), sv.subscribe(changes["s"].append)]

        def reader():
            try:
                while not stop.is_set():
                    ea, eb = cv.to_pandas().attrs["epoch"], sv.to_pandas().attrs["epoch"]
                    n = len(stream)  # (None: x closed, every epoch final)
                    e = min(n if ea is None else ea, n if eb is None else eb)
                    if e:
                        a, b = cv.to_pandas(at=e - 1), sv.to_pandas(at=e - 1)
                        counts = dict(zip(a["k"].tolist(), a["count"].tolist()))
                        sums = dict(zip(b["k"].tolist(), b["v"].tolist()))
                        if {k: 3 * c for k, c in counts.items()} != sums or counts != states[e - 1]:
                            problems.append(("read", e, counts, sums))
                    time.sleep(0.002)
            except Exception:  # noqa: BLE001
                problems.append(("reader", traceback.format_exc()))

        def importer():
            j = 0
            try:
                while not stop.is_set():
                    j += 1
                    with eng.dataflow(f"i{j}") as df:
                        w = df.use("xk").distinct(key="k").count(by="k").view("w")
                    eng.wait(w, timeout=T)
                    eng.drop(f"i{j}")
            except Exception:  # noqa: BLE001
                problems.append(("importer", traceback.format_exc()))
        ts = [threading.Thread(target=reader, daemon=True), threading.Thread(target=importer, daemon=True)]
        for t in ts:
            t.start()
        for e, (add, rm) in enumerate(stream):
            x.insert(add)
            if rm:
                x.remove(rm)
            x.advance_to(e + 1)
            time.sleep(0.003)
        x.close()
        eng.wait(cv, timeout=T)
        eng.wait(sv, timeout=T)
        stop.set()
        join_all(ts)
        for s in subs:
            s.thread.join(T)
            assert not s.thread.is_alive() and s.error is None, s.error
        assert not problems, problems[:3]

        def rebuild(frames, col, scale):
            allf = pd.concat(frames)
            acc, out = Counter(), []
            for e in range(len(stream)):
                part = allf[allf["time"] == e]
                for k, val, d in zip(part["k"].tolist(), part[col].tolist(), part["diff"].tolist()):
                    acc[(k, val)] += d
                out.append({k: val // scale for (k, val), m in acc.items() if m})
            return out
        assert rebuild(changes["c"], "count", 1) == states
        assert rebuild(changes["s"], "v", 3) == states
    finally:
        stop.set()
        eng.close()
