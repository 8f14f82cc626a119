"""Found by the session-29 service attack (many threads on one engine): a view of a dataflow installed
late claimed an epoch before its start with rows missing; a wait by name returned while a view's
arrangement was still behind; two unnamed Datalog installs at once took the same name."""
from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter

import pytest

import kpgnb as kp

TC = "tc(a, b) :- edge(a, b).\ntc(a, c) :- tc(a, b), edge(b, c).\n"


def as_counter(frame, names):
    if not len(frame):
        return Counter()
    cols = [frame[n].to_numpy() for n in names]
    return Counter(tuple(int(c[i]) for c in cols) for i in range(len(frame)))


def _join_counter(frame):
    return as_counter(frame, ["k", "v", "w"])


@pytest.mark.parametrize("workers", [1, 2])
def test_late_join_view_claims_an_epoch_before_it_started_with_no_rows(workers):
    """A dataflow installed while its two inputs are at different epochs (x at 5, y at 3) starts from its
    imports as of epoch 4, so it has no answer before 4: until epoch 4 is final its view reads as nothing
    (no rows, attrs['epoch'] 0) and a follower waits; it read as epoch 2 complete with no rows, although
    both inputs held key 1 then. Once y passes 4: the join as of epoch 4, and the follower's first frame."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k", "v"], rows=[(1, 10)])
        y = eng.input("y", ["k", "w"], rows=[(1, 20)])
        x.advance_to(5)
        y.advance_to(3)
        eng.wait(None, timeout=10)
        with eng.dataflow("j") as df:
            j = df.input("x").join(df.input("y"), on="k").view("j")
        eng.wait(j, timeout=10)
        d = j.to_pandas()
        assert (d.attrs["epoch"], len(d)) == (0, 0)
        with pytest.raises(kp.CompactedError, match="as of epoch 4"):
            j.to_pandas(at=2)
        f = j.follow(timeout=10)
        y.advance_to(6)
        eng.wait(j, timeout=10)
        d = j.to_pandas()
        assert d.attrs["epoch"] == 5 and _join_counter(d) == Counter({(1, 10, 20): 1})
        assert _join_counter(j.to_pandas(at=4)) == Counter({(1, 10, 20): 1})
        first = next(f)
        f.close()
        assert _join_counter(first) == Counter({(1, 10, 20): 1}) and set(first["time"]) == {4}


@pytest.mark.parametrize("workers", [1, 2])
def test_late_iterate_view_claims_an_epoch_before_it_started_with_no_rows(workers):
    """Single input, nothing concurrent but a read right after the install (a dashboard or another cell): a
    loop installed over an input at epoch 5 publishes frontier 4 before it has computed anything, and
    ``to_pandas()`` answers attrs['epoch'] == 4 with no rows (then epoch 5 with 25). Epoch 3 had edges, so
    'no rows at epoch 3' is false; ``to_pandas(at=3)`` refuses it (born 4)."""
    seen_bad = []
    for rep in range(6):
        eng = kp.Engine(workers=workers)
        try:
            e = eng.input("e", ["src", "dst"], rows=[(0, 1), (1, 2)])
            for ep in range(1, 6):
                e.insert([(ep % 5, (ep + 1) % 5)])
                e.advance_to(ep)
            eng.wait(None, timeout=10)
            with eng.dataflow("tc") as df:
                g = df.input("e").arrange_by("src")
                v = df.input("e").iterate(
                    lambda t: t.join(g, left_on="dst", right_on="src").select("src", "dst_right")
                    .rename(dst_right="dst").concat(df.input("e")).distinct()).view("tc")
            seq = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                d = v.to_pandas()
                s = (d.attrs["epoch"], len(d))
                if not seq or seq[-1] != s:
                    seq.append(s)
                if d.attrs["epoch"] == 5:
                    break
            if any(E and not n for E, n in seq):
                seen_bad.append(seq)
        finally:
            eng.close()
    assert not seen_bad, f"{len(seen_bad)} of 6 installs read as (attrs['epoch'], rows): {seen_bad[:3]}"


def test_wait_by_name_returns_while_a_loop_view_is_still_behind():
    """Two feeders (x, y) advance every few ms; three Datalog programs compute tc over the export x_by_k.
    ``eng.wait('g0')`` -- documented as 'until every view of NAME has caught up with its inputs' (README:
    eng.wait on a dataflow's name: all of its views do; %dataflow wait NAME) -- returns while g0's view still
    reads an epoch before x's epoch at the time of the call. The dataflow's published frontier
    (``eng.stats()['dataflows']``) runs ahead of the view's arrangement: the sink's frontier (and its
    compaction, ``history``) moves on while the arrangement feeding it has not stepped, so the view reads
    tens of epochs behind what the engine reports, and ``to_pandas(at=E - 1)`` for the E the view just
    reported is refused as compacted."""
    eng = kp.Engine(workers=3)
    stop = threading.Event()
    try:
        x = eng.input("x", ["k", "v"])
        y = eng.input("y", ["k", "w"])

        def feed(sess, seed):
            r = random.Random(seed)
            e, present = 0, []
            while not stop.is_set():
                rows = [(r.randrange(6), r.randrange(6)) for _ in range(r.randint(1, 3))]
                sess.insert(rows)
                present += rows
                if len(present) > 8:
                    sess.remove([present.pop(r.randrange(len(present)))])
                sess.advance_to(e + 1)
                e += 1
                time.sleep(r.random() * 0.004)

        ts = [threading.Thread(target=feed, args=(sess, i), daemon=True) for i, sess in enumerate((x, y))]
        for t in ts:
            t.start()
        with eng.dataflow("prod") as df:
            df.input("x").arrange_by("k").export("x_by_k")
        progs = [eng.datalog(TC, inputs={"edge": "x_by_k"}, name=f"g{i}") for i in range(3)]
        with eng.dataflow("j") as df:
            df.use("x_by_k").join(df.input("y").arrange_by("k"), on="k").view("v")
        bad, total, worst = 0, 0, 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            for p in progs:
                goal = x.epoch
                try:
                    eng.wait(p.name, timeout=5)
                except TimeoutError:
                    continue
                E = p["tc"].to_pandas().attrs["epoch"]
                total += 1
                if E < goal:
                    bad += 1
                    worst = max(worst, goal - E)
        assert bad == 0, (f"eng.wait(NAME) returned with the program's view behind the goal in {bad} of {total} "
                          f"waits (up to {worst} epochs behind)")
    finally:
        stop.set()
        eng.close()


def test_two_threads_install_unnamed_datalog_programs_at_once():
    """``eng.datalog(text)`` with no ``name=`` picks a free name ('datalog1', ...). Two threads (two cells'
    background jobs, a widget callback) calling it at once both pick 'datalog1' from the same snapshot and
    one fails with UsageError("a dataflow named 'datalog1' is installed already") -- a name the user never
    gave. Expected: both install, under different names."""
    failures = []
    for rep in range(10):
        eng = kp.Engine(workers=2)
        try:
            eng.input("edge", ["src", "dst"], rows=[(0, 1), (1, 2)]).advance_to(1)
            barrier = threading.Barrier(2)
            out = []

            def go():
                barrier.wait(5)
                try:
                    out.append(eng.datalog(TC).name)
                except Exception as err:  # noqa: BLE001
                    out.append(err)

            ts = [threading.Thread(target=go, daemon=True) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            errs = [o for o in out if isinstance(o, Exception)]
            if errs:
                failures.append(repr(errs[0]))
        finally:
            eng.close()
    assert not failures, f"{len(failures)} of 10: {failures[0]}"


def test_ctrl_c_during_a_replacing_install_keeps_a_dataflow():
    """A cell re-runs ``%%dataflow a --replace`` (``eng.dataflow('a', replace=True)``) and the user presses
    Ctrl-C while the scheduler is installing it. README: 'An install interrupted by Ctrl-C leaves nothing
    behind'; for cells: 'A cell that fails installs nothing and changes nothing'. Expected: the old 'a' is
    still installed and running (or, if the interrupt came too late, the new one). The scheduler is slowed
    inside the Install command (a test-side wrapper) so the interrupt lands while it runs: the old one is
    replaced by then, and the new one stays (both were gone)."""
    eng = kp.Engine(workers=1)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    sch = eng._scheduler
    try:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("a") as df:
            old = df.input("x").count(by=[]).view("c")
        eng.wait(old, timeout=10)
        orig = sch._install

        def slow_install(cmd):
            out = orig(cmd)
            time.sleep(0.6)  # the scheduler is still in the command when Ctrl-C lands
            return out

        sch._install = slow_install
        main = threading.main_thread().ident
        timer = threading.Timer(0.2, lambda: signal.pthread_kill(main, signal.SIGINT))
        timer.start()
        interrupted = False
        try:
            with eng.dataflow("a", replace=True) as df:
                df.input("x").distinct().view("d")
            time.sleep(1.0)
        except KeyboardInterrupt:
            interrupted = True
        timer.join()
        sch._install = orig
        time.sleep(0.8)
        eng.wait(None, timeout=10)
        assert interrupted
        state = eng.dataflows()
        assert state == {"a": "running"}, f"after Ctrl-C in the replacing install: dataflows {state}"
        assert sorted(eng.operator_stats("a")[i]["kind"] for i in range(len(eng.operator_stats("a")))).count("distinct") == 1
    finally:
        sch._install = getattr(sch, "_install")
        signal.signal(signal.SIGINT, old_handler)
        eng.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_late_follower_reconstructs_every_epoch_from_its_start(workers):
    """A follower of a view installed late (its dataflow starts at epoch 2) gets the contents as of epoch 2
    once epoch 2 is final, then each later epoch's changes, also when epochs 2..5 arrive in one append: a
    follower's frames rebuild every epoch the view can be read at."""
    from kpgnb.engine import faults
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k", "v"], rows=[(1, 10), (2, 20)])
        y = eng.input("y", ["k", "w"], rows=[(1, 5)])
        x.advance_to(3)
        y.advance_to(1)
        eng.wait(None, timeout=10)
        with eng.dataflow("j") as df:
            j = df.input("x").join(df.input("y"), on="k").view("j", history=20)
        eng.wait(j, timeout=10)
        f = j.follow(timeout=10)
        go = threading.Event()
        with faults.armed("scheduler", times=1, action=lambda: go.wait(30)):
            for e, rows in enumerate([[(2, 6)], [(1, 7)], [(2, 8)], [(3, 9)], [(1, 1)]], start=1):
                y.insert(rows)
                y.advance_to(e + 1)
            x.advance_to(6)
            go.set()
        eng.wait(j, timeout=10)
        frames = [next(f)]
        while f.epoch is None or f.epoch < 6:
            frames.append(next(f))
        f.close()
        state = Counter()
        for fr in frames:
            for k, v, w, t, d in fr[["k", "v", "w", "time", "diff"]].itertuples(index=False):
                state[(int(k), int(v), int(w), int(t))] += int(d)
        assert set(frames[0]["time"]) <= {2}
        for e in range(2, 6):
            want = _join_counter(j.to_pandas(at=e))
            got = Counter()
            for (k, v, w, t), d in state.items():
                if t <= e:
                    got[(k, v, w)] += d
            assert +got == want, e
