"""Attack (session 50): the engine as a service many threads use at once (README "Many threads, one
engine" and "Watching the engine"), from new angles: ``eng.stats()`` read while other threads drop
dataflows, advance and create inputs (README: "``eng.stats()`` takes every part from one [snapshot]: a
dataflow is listed in all its tables or in none"); Datalog goals asked and retracted from several threads
while the program's input changes; ``eng.close()`` racing installs, waits, followers and pollers; Ctrl-C
(an asynchronous KeyboardInterrupt) reaching a thread blocked in a follower.

Where a bug needs one thread to act at a precise moment inside another thread's ``eng.stats()`` call, the
test makes that interleaving deterministic: the engine's own ``dataflow_stats`` (which ``stats`` calls
after reading the snapshot) is wrapped on the instance so that the "other thread's" action (a drop, an
``advance_to``, a new input) happens exactly there. Each of these was also seen with two real threads (a
writer or installer looping while a poller calls ``stats()`` with a short pause): see each docstring.

Every wait is bounded, threads are joined with a bound, and a watchdog dumps the stacks and ends the
process if a test hangs. Tests marked xfail(strict=True) assert the documented behaviour for a bug this
attack found."""
from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pandas as pd
import pytest

import kpgnb as kp
from kpgnb import graphs
from threads import T, async_raise, gated, join_all, watchdog

_watchdog = watchdog(120)


def _during_stats(eng, action):
    """Run ``action`` (what another thread does) once, inside the next ``eng.stats()`` call, right after it
    took its snapshot and built the dataflow table from it (``stats()`` builds it with ``_dataflow_stats``)."""
    attr = "_dataflow_stats" if hasattr(eng, "_dataflow_stats") else "dataflow_stats"
    orig = getattr(eng, attr)
    fired = []

    def hooked(*args, **kwargs):
        out = orig(*args, **kwargs)
        if not fired:
            fired.append(True)
            action()
        return out

    setattr(eng, attr, hooked)
    return fired


# -- 1. bugs: eng.stats() mixes its snapshot with live state -------------------------------------------------

def test_stats_ife_table_lists_a_dataflow_the_other_tables_list_while_it_is_dropped():
    """README: ``eng.stats()`` takes every part from one snapshot, a dataflow is listed in all its tables or
    in none. A dataflow with a ``memory="jod"`` sssp (one ife operator) is dropped by another thread while
    ``stats()`` runs: the snapshot it took lists the dataflow, and so do ``stats()["dataflows"]`` and
    ``stats()["arrangements"]`` (pinned), but ``stats()["ife"]`` comes from ``Engine.ife_stats``, which
    matches the snapshot's dataflows against the scheduler's *live* ``dataflows`` / ``retired`` and so
    drops the entry. With real threads (an installer/dropper loop and a poller pausing 2 ms) about 1 in
    100 ``stats()`` calls showed {'spsp'} in the dataflow table and nothing in the ife table."""
    with kp.Engine(workers=1) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 4), (0, 2, 1), (2, 1, 2), (1, 3, 5)])
        sources = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("spsp") as df:
            graphs.sssp(df.input("edges"), df.input("sources"), memory="jod").view("jod")
        edges.advance_to(1)
        sources.advance_to(1)
        eng.wait("spsp", timeout=T)
        st = eng.stats()
        assert [r["dataflow"] for r in st["ife"]] == ["spsp"]  # (listed when nothing races)
        fired = _during_stats(eng, lambda: eng.drop("spsp"))
        st = eng.stats()
        assert fired
        listed = {d["name"] for d in st["dataflows"]}
        in_arrangements = {a["dataflow"] for a in st["arrangements"] if a["dataflow"] is not None}
        in_ife = {r["dataflow"] for r in st["ife"]}
        assert listed == in_arrangements  # (the snapshot's: the drop came after it)
        assert in_ife == listed, (listed, in_ife)


def test_stats_input_epochs_agree_between_the_inputs_table_and_the_dataflow_table():
    """One ``stats()`` result says two different epochs for one input: ``stats()["inputs"]`` reads
    ``s.epoch`` of the live sessions after ``dataflow_stats`` read it (also live) for each dataflow's
    ``inputs``; a writer's ``advance_to`` in between makes them disagree. With real threads (a writer
    looping insert/advance_to, a poller calling ``stats()``) 71 of 2000 calls disagreed, e.g. the dataflow
    table said ``src`` epoch 2956 and the inputs table 2957. Cause: ``Engine._stats`` /
    ``Engine.dataflow_stats`` (engine/runtime.py) call ``self.inputs()`` and read ``epoch`` / ``closed``
    separately instead of once per ``stats()`` call."""
    with kp.Engine(workers=1) as eng:
        src = eng.input("src", ["k"], rows=[(1,)])
        src.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("src").count(by="k").view("c")
        eng.wait("d", timeout=T)

        def writer_advances():
            src.insert([(2,)])
            src.advance_to(2)

        fired = _during_stats(eng, writer_advances)
        st = eng.stats()
        assert fired
        table = {r["name"]: r["epoch"] for r in st["inputs"]}
        per_dataflow = {n: v["epoch"] for d in st["dataflows"] for n, v in d["inputs"].items()}
        assert per_dataflow["src"] == table["src"], (per_dataflow, table)


def test_stats_lists_an_input_created_during_the_call_in_both_tables_or_neither():
    """Every input has an arrangement (``input:NAME`` in ``eng.arrangements()``). An input another thread
    creates while ``stats()`` runs shows in ``stats()["inputs"]`` but not in ``stats()["arrangements"]``:
    ``arrangements`` and ``_stats`` each call ``self.inputs()`` (the live sessions) at different moments.
    Same cause as the epoch test above (engine/runtime.py ``Engine._stats``)."""
    with kp.Engine(workers=1) as eng:
        src = eng.input("src", ["k"], rows=[(1,)])
        src.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("src").count(by="k").view("c")
        eng.wait("d", timeout=T)

        def another_thread_creates_an_input():
            y = eng.input("y", ["k"], rows=[(1,)])
            y.advance_to(1)

        fired = _during_stats(eng, another_thread_creates_an_input)
        st = eng.stats()
        assert fired
        inputs_table = {r["name"] for r in st["inputs"]}
        arranged = {a["name"][len("input:"):] for a in st["arrangements"] if a["kind"] == "input"}
        assert inputs_table == arranged, (inputs_table, arranged)


# -- 2. bug: Ctrl-C in a wait on an old view cancels another thread's new install -----------------------------

def test_ctrl_c_in_wait_on_a_view_spares_the_install_that_replaced_its_dataflow():
    """README: "Ctrl-C in ``eng.wait(view)`` cancels the computation it was waiting for", and a view of an
    earlier install of a name is never read through the new one. While the scheduler is held in another
    dataflow's step: the input of dataflow ``d`` advances (``d`` is behind), thread B queues
    ``eng.dataflow("d", replace=True)``, thread A waits on the old view ``v`` and gets Ctrl-C. When the
    step ends the replacement is installed first, then A's cancel runs, by name only, and cancels B's new
    ``d``: ``eng.dataflows()`` says ``{'d': 'cancelled'}`` and B's new view raises ``Cancelled``
    "interrupted while waiting", though nobody waited on it. Cause: ``Engine._cancel_behind``
    (engine/runtime.py) matches the view's serial in the snapshot but submits ``Cancel(name, reason)``,
    and the scheduler's Cancel handler (engine/scheduler.py) looks the dataflow up by name only (``Discard``
    carries a serial; ``Cancel`` does not)."""
    with kp.Engine(workers=1) as eng:
        g = eng.input("g", ["k"], rows=[(1,)])
        g.advance_to(1)
        s = eng.input("s", ["k"], rows=[(1,)])
        s.advance_to(1)
        gate, inside = gated(eng, "busy", "g")
        with eng.dataflow("d") as df:
            v = df.input("s").distinct().view("v")
        eng.wait(v, timeout=T)
        g.insert([(7,)])
        g.advance_to(2)
        assert inside.wait(T)  # the scheduler is held in busy's step
        s.insert([(2,)])
        s.advance_to(2)  # d is behind now
        out = {}

        def replacer():
            try:
                with eng.dataflow("d", replace=True) as df:
                    out["v2"] = df.input("s").distinct().view("v")
                out["B"] = "installed"
            except BaseException as e:  # noqa: BLE001
                out["B"] = repr(e)

        def waiter():
            try:
                eng.wait(v, timeout=T)
                out["A"] = "returned"
            except KeyboardInterrupt:
                out["A"] = "interrupted"
            except BaseException as e:  # noqa: BLE001
                out["A"] = repr(e)

        try:
            before = eng._scheduler.submitted
            b = threading.Thread(target=replacer)
            b.start()
            deadline = time.monotonic() + T
            while eng._scheduler.submitted == before and time.monotonic() < deadline:
                time.sleep(0.005)  # (B's install is queued behind the step)
            time.sleep(0.05)
            a = threading.Thread(target=waiter)
            a.start()
            time.sleep(0.1)  # (A is in its wait)
            async_raise(a)
            join_all([a])
        finally:
            gate.set()
        join_all([b])
        eng.wait("busy", timeout=T)
        assert out["A"] == "interrupted" and out["B"] == "installed", out
        assert eng.dataflows()["d"] == "running"
        eng.wait(out["v2"], timeout=T)
        assert sorted(out["v2"].to_pandas()["k"]) == [1, 2]


# -- 3. what works -------------------------------------------------------------------------------------------

def test_stats_lists_each_dataflow_in_all_tables_while_threads_replace_and_drop():
    """Two threads replace (and now and then drop) their dataflow in a loop while a writer advances the
    input; a poller checks that every ``stats()`` lists each dataflow in the dataflows table and the
    arrangements table alike (no arrangement of a dataflow the dataflow table does not list, except
    ``(dropped)`` ones kept for readers)."""
    with kp.Engine(workers=2) as eng:
        src = eng.input("src", ["k", "v"], rows=[(i % 5, i) for i in range(20)])
        src.advance_to(1)
        stop, bad, errors = threading.Event(), [], []

        def churn(j):
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    with eng.dataflow(f"d{j}", replace=True) as df:
                        df.input("src").arrange_by("k").count(by="k").view(f"v{j}_{i}")
                    if i % 3 == 0:
                        eng.drop(f"d{j}")
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        def writer():
            e = 1
            while not stop.is_set():
                src.insert([(e % 5, e)])
                e += 1
                src.advance_to(e)
                time.sleep(0.001)

        threads = [threading.Thread(target=churn, args=(j,)) for j in range(2)] + [threading.Thread(target=writer)]
        for t in threads:
            t.start()
        try:
            for _ in range(150):
                st = eng.stats()
                names = {d["name"] for d in st["dataflows"]}
                owners = {a["dataflow"] for a in st["arrangements"] if a["dataflow"] is not None}
                bad += [("no arrangement", n) for n in names - owners]
                bad += [("no dataflow", n) for n in owners - names if not n.endswith("(dropped)")]
                time.sleep(0.002)
        finally:
            stop.set()
            join_all(threads)
        assert not errors and not bad, (errors, bad[:5])


def test_goals_asked_and_retracted_from_threads_while_the_edges_change_answer_the_final_bindings():
    """Three threads ask and retract bindings of one goal (each its own keys) while the owner of the edges
    inserts and removes edges and advances; once all are done the goal's view is the transitive closure
    from exactly the bindings left asked, over the final edges."""
    def closure(edges, sources):
        out = set()
        for s in sources:
            seen, todo = set(), [s]
            while todo:
                x = todo.pop()
                for a, b in edges:
                    if a == x and b not in seen:
                        seen.add(b)
                        todo.append(b)
            out |= {(s, y) for y in seen}
        return out

    for it in range(4):
        rng = random.Random(500 + it)
        with kp.Engine(workers=2) as eng:
            E = {(i, (i + 1) % 8) for i in range(0, 8, 2)}
            edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
            edges.advance_to(1)
            prog = eng.datalog("tc(x, y) :- edges(x, y).\ntc(x, y) :- tc(x, z), edges(z, y).", name="p")
            g = prog.goal("tc(?, _)")
            final, errors = {}, []

            def asker(j):
                r, mine = random.Random(it * 10 + j), set()
                try:
                    for _ in range(20):
                        k = r.randrange(j, 8, 3)
                        if k in mine and r.random() < 0.5:
                            g.retract(k)
                            mine.discard(k)
                        else:
                            g.ask(k)
                            mine.add(k)
                    final[j] = mine
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

            def owner():
                try:
                    for e in range(2, 22):
                        a, b = rng.randrange(8), rng.randrange(8)
                        if (a, b) in E:
                            edges.remove([(a, b)])
                            E.discard((a, b))
                        else:
                            edges.insert([(a, b)])
                            E.add((a, b))
                        edges.advance_to(e)
                except Exception as e:  # noqa: BLE001
                    errors.append("owner: " + repr(e))

            threads = [threading.Thread(target=asker, args=(j,)) for j in range(3)] + [threading.Thread(target=owner)]
            for t in threads:
                t.start()
            join_all(threads)
            assert not errors, errors
            eng.wait(g.view, timeout=T)
            got = set(map(tuple, g.view.to_pandas()[["x", "y"]].itertuples(index=False)))
            assert got == closure(E, set().union(*final.values())), it


def test_ctrl_c_reaching_a_thread_blocked_in_a_follower_loses_no_frame():
    """A reader thread blocked in ``next(follower)`` gets KeyboardInterrupt every other epoch, catches it and
    goes on reading: every row inserted reaches it exactly once (no gap, no repeat)."""
    with kp.Engine(workers=1) as eng:
        src = eng.input("src", ["k"], rows=[(0,)])
        src.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("src").view("v")
        eng.wait(v, timeout=T)
        f = v.follow(timeout=T)
        frames, interrupts = [], [0]

        def reader():
            while True:
                try:
                    frames.append(next(f))
                    if f.epoch is not None and f.epoch >= 121:
                        return
                except KeyboardInterrupt:
                    interrupts[0] += 1
                except StopIteration:
                    return

        t = threading.Thread(target=reader)
        t.start()
        for e in range(2, 122):
            src.insert([(e,)])
            src.advance_to(e)
            if e % 2 == 0:
                async_raise(t)
            time.sleep(0.001)
        join_all([t])
        f.close()
        got = Counter(pd.concat(frames)["k"])
        assert got == Counter([0] + list(range(2, 122)))


def test_close_racing_installs_waits_followers_and_pollers_ends_every_thread_with_engine_closed():
    """Two installer threads replacing their dataflow, a follower, a writer waiting on each epoch and a
    poller of the watching calls run while the main thread closes the engine at a random moment: every
    thread ends (none hangs) and each ends either having finished or with EngineError("the engine is
    closed")."""
    for it in range(12):
        rng = random.Random(5000 + it)
        eng = kp.Engine(workers=1)
        outcomes = []
        try:
            src = eng.input("src", ["k"], rows=[(1,)])
            src.advance_to(1)
            with eng.dataflow("base") as df:
                v = df.input("src").count(by="k").view("bv")
            eng.wait(v, timeout=T)

            def run(tag, fn):
                try:
                    fn()
                    outcomes.append((tag, "done"))
                except kp.EngineError as e:
                    outcomes.append((tag, str(e)))
                except BaseException as e:  # noqa: BLE001
                    outcomes.append((tag, repr(e)))

            def installer(j):
                for i in range(60):
                    with eng.dataflow(f"i{j}", replace=True) as df:
                        df.input("src").map(lambda k: {"k": k + 1}).view(f"iv{j}_{i}")
                    eng.wait(f"i{j}", timeout=T)

            def follower():
                for _ in v.follow(timeout=T):
                    pass

            def writer():
                for e in range(2, 300):
                    src.insert([(e % 3,)])
                    src.advance_to(e)
                    eng.wait(v, timeout=T)

            def poller():
                for _ in range(300):
                    eng.stats()
                    eng.arrangements()
                    eng.dataflow_stats()
                    time.sleep(0.001)

            threads = [threading.Thread(target=run, args=(f"install{j}", lambda j=j: installer(j)))
                       for j in range(2)]
            threads += [threading.Thread(target=run, args=(n, fn))
                        for n, fn in [("follow", follower), ("write", writer), ("poll", poller)]]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.0, 0.2))
        finally:
            eng.close()
        join_all(threads)
        odd = [(tag, what) for tag, what in outcomes if what not in ("done", "the engine is closed")]
        assert not odd and len(outcomes) == 5, (it, outcomes)
