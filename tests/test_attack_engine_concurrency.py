"""Attack: a reader thread reading views (to_pandas, columns(at=)) and eng.stats() in a tight loop while
updates run must only ever see complete epochs, never going back in time; cancelling or dropping a
dataflow in the middle of a long computation leaves the other dataflows correct."""
import threading
import time
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

from reference import COLS, build, evaluate

PROG = ("concat", ("count", ("input", "A")),
        ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("input", "B")))), None))


def as_counter(cols):
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def key(c):
    return tuple(sorted(c.items()))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_readers_see_whole_epochs(workers):
    rng = np.random.default_rng(40 + workers)
    state = {"A": Counter(), "B": Counter()}
    epochs = 120
    # the whole stream up front, and the answer at every epoch
    stream, answers = [], {}
    for e in range(epochs):
        step = {}
        for n in state:
            rows = [(int(rng.integers(6)), int(rng.integers(6))) for _ in range(int(rng.integers(1, 5)))]
            diffs = []
            for r in rows:
                d = -1 if state[n][r] > 0 and rng.random() < 0.4 else 1
                state[n][r] += d
                diffs.append(d)
            step[n] = (rows, diffs)
        stream.append(step)
        answers[e] = evaluate(PROG, {n: Counter(c) for n, c in state.items()})
    by_answer = {}
    for e, a in answers.items():
        by_answer.setdefault(key(a), []).append(e)

    errors, seen = [], []
    stop = threading.Event()
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            view = build(PROG, df).view("out", history=epochs + 5)

        def reader():
            r = np.random.default_rng(1)
            last = -1
            while not stop.is_set():
                try:
                    c = as_counter(view.columns(diffs=True))
                    k = key(c)
                    if not c:
                        continue  # before the first epoch
                    es = by_answer.get(k)
                    if es is None:
                        errors.append(("not any epoch's answer", sorted(c.items())))
                        return
                    if max(es) < last:
                        errors.append(("went back", es, last))
                        return
                    last = max(last, min(e for e in es if e >= last) if any(e >= last for e in es) else max(es))
                    seen.append(last)
                    ep = view.epoch
                    if ep is not None and ep > 1:
                        at = int(r.integers(0, ep - 1))
                        got = as_counter(view.columns(at=at, diffs=True))
                        if got != answers[at]:
                            errors.append(("at", at, sorted(got.items()), sorted(answers[at].items())))
                            return
                    st = eng.stats()
                    for arr in st["arrangements"]:
                        if arr["records"] < 0 or arr["batches"] < 0:
                            errors.append(("stats", arr))
                            return
                except kp.CompactedError:
                    pass
                except Exception as ex:  # noqa: BLE001
                    errors.append(("raised", repr(ex)))
                    return

        t = threading.Thread(target=reader)
        t.start()
        try:
            for e, step in enumerate(stream):
                for n, (rows, diffs) in step.items():
                    sessions[n].update(rows, diffs)
                for s in sessions.values():
                    s.advance_to(e + 1)
                if e % 7 == 0:
                    eng.wait(view)
                    assert as_counter(view.columns(diffs=True)) == answers[e]
            eng.wait(view)
            deadline = time.monotonic() + 30  # the reader has read a few times (slowly under load)
            while len(seen) <= 10 and not errors and t.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            t.join(30)
        assert not t.is_alive()
        assert not errors, errors[:3]
        assert as_counter(view.columns(diffs=True)) == answers[epochs - 1]
        assert len(seen) > 10


@pytest.mark.parametrize("how", ["cancel", "drop"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_stopping_a_long_computation_leaves_others_right(workers, how):
    rng = np.random.default_rng(5 + workers)
    with kp.Engine(workers=workers) as eng:
        chain = eng.input("chain", ["src", "dst"])
        a, b = eng.input("A", COLS), eng.input("B", COLS)
        state = {"A": Counter(), "B": Counter()}
        # a long chain: reachability takes thousands of rounds
        chain.insert([(i, i + 1) for i in range(4000)])
        chain.advance_to(1)
        with eng.dataflow("good") as df:
            good = build(PROG, df).view("out")
            shared = df.input("B").arrange_by("a").export("B_by_a")
        with eng.dataflow("slow") as df:
            e = df.input("chain").arrange_by("src")
            roots = df.input("chain").filter(lambda src: src == 0).map(lambda src: {"node": src})
            r = roots.iterate(lambda r: r.join(e, left_on="node", right_on="src")
                              .map(lambda dst: {"node": dst}).concat(roots).distinct())
            slow = r.view("reach")
            df.use("B_by_a").count(by="a").view("uses")
        for ep in range(1, 30):
            for n, s in (("A", a), ("B", b)):
                rows = [(int(rng.integers(6)), int(rng.integers(6))) for _ in range(3)]
                s.insert(rows)
                for row in rows:
                    state[n][row] += 1
                s.advance_to(ep)
            chain.advance_to(ep + 1)
            if ep == 3:
                time.sleep(0.05)  # the slow loop is running now
                assert slow.epoch is not None and slow.epoch < 1, slow.frontier  # still computing epoch 0
                if how == "cancel":
                    eng.cancel("slow")
                else:
                    eng.drop("slow")
            if ep > 3:
                eng.wait(good, timeout=60)
                want = evaluate(PROG, {n: Counter(c) for n, c in state.items()})
                cols = good.columns(diffs=True)
                assert as_counter(cols) == want, (how, ep)
        if how == "cancel":
            with pytest.raises(kp.KpgnbError):
                eng.wait(slow, timeout=10)
            eng.drop("slow")
        # a new dataflow can still use the export and be right
        with eng.dataflow("again") as df:
            v = df.use("B_by_a").distinct().view("d")
        eng.wait(v, timeout=60)
        assert as_counter(v.columns(diffs=True)) == Counter({r: 1 for r, m in state["B"].items() if m > 0})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_follow_from_mid_stream_reconstructs_every_epoch(workers):
    rng = np.random.default_rng(70 + workers)
    state = {"A": Counter(), "B": Counter()}
    answers = {}
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            view = build(PROG, df).view("out")
        frames = []
        done = threading.Event()

        def consume(f):
            # an epoch that changes nothing in the view yields no frame: when the last ones do not, the
            # follower's epoch reaches 80 inside a next() that then waits for a change that never comes, so
            # the reader polls with a short timeout and reads the follower's epoch (bounded: 60 s in all)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                try:
                    fr = next(f)
                except TimeoutError:
                    if f.epoch is not None and f.epoch >= 80:
                        break
                    continue
                except StopIteration:
                    break
                frames.append(fr)
                if f.epoch is not None and f.epoch >= 80:
                    break

        t = None
        for e in range(80):
            for n in state:
                rows = [(int(rng.integers(6)), int(rng.integers(6))) for _ in range(int(rng.integers(0, 3)))]
                diffs = [(-1 if state[n][r] > 0 and rng.random() < 0.4 else 1) for r in rows]
                for r, d in zip(rows, diffs):
                    state[n][r] += d
                if rows:
                    sessions[n].update(rows, diffs)
            answers[e] = evaluate(PROG, {n: Counter(c) for n, c in state.items()})
            for s in sessions.values():
                s.advance_to(e + 1)
            if e == 25:
                eng.wait(view)
                f = view.follow(timeout=0.5)
                t = threading.Thread(target=consume, args=(f,))
                t.start()
        done.set()
        eng.wait(view)
        t.join(60)
        assert not t.is_alive()
        first = frames[0]
        start = int(first["time"].iloc[0]) if len(first) else None
        acc = Counter()
        for a, b, d in zip(first["a"], first["b"], first["diff"]):
            acc[(int(a), int(b))] += int(d)
        changes = []
        for fr in frames[1:]:
            changes += [(int(tm), (int(a), int(b)), int(d)) for a, b, tm, d in zip(fr["a"], fr["b"], fr["time"], fr["diff"])]
        if start is None:
            start = 25
        assert clean(acc) == answers[start], ("contents", start)
        for e in range(start + 1, 80):
            for tm, r, d in changes:
                if tm == e:
                    acc[r] += d
            assert all(tm > start for tm, _, _ in changes), "a change at or before the contents' epoch"
            assert clean(acc) == answers[e], ("epoch", e)


def clean(c):
    return Counter({k: v for k, v in c.items() if v})
