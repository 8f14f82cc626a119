"""Attack: thousands of tiny epochs (1-3 rows each, inserts and retractions) through arrange, join,
reduce and iterate (spine merging of small batches, trace compaction), checked at random epochs and at
the end; an exported arrangement read by a dataflow installed mid-stream; views read at= history."""
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

from reference import COLS, DOM, build, evaluate

PROGS = [
    ("join", ("input", "A"), ("input", "B")),
    ("count", ("input", "A")),
    ("reduce", ("concat", ("input", "A"), ("input", "B"))),
    ("min", ("antijoin", ("input", "A"), ("input", "B"))),
    ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("input", "B")))), None),
    ("iterate", ("input", "B"), ("distinct", ("concat", ("var", 0), ("mix", ("var", 0)))), 2),
    ("topk", ("concat", ("input", "A"), ("swap", ("input", "B"))), 2),
]


def counter(view, at=None):
    cols = view.columns(at=at, diffs=True)
    names = [c for c in cols if c != "diff"]
    return Counter({tuple(int(cols[n][i]) for n in names): int(cols["diff"][i])
                    for i in range(len(cols["diff"])) if cols["diff"][i]})


def tiny_stream(rng, state, sessions):
    """1-3 rows into one or both inputs: inserts, and retractions of rows present."""
    for name in sessions:
        if rng.random() < 0.4:
            continue
        rows, diffs = [], []
        for _ in range(int(rng.integers(1, 4))):
            live = [r for r, m in state[name].items() if m > 0]
            if live and rng.random() < 0.45:
                r = live[rng.integers(len(live))]
                rows.append(r)
                diffs.append(-1)
            else:
                rows.append((int(rng.integers(DOM)), int(rng.integers(DOM))))
                diffs.append(1)
        sessions[name].update(rows, diffs)
        for r, d in zip(rows, diffs):
            state[name][r] += d


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_thousands_of_tiny_epochs(workers):
    rng = np.random.default_rng(100 + workers)
    state = {"A": Counter(), "B": Counter()}
    epochs = 1500
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            views = [build(p, df).view(f"v{i}", history=40) for i, p in enumerate(PROGS)]
            df.input("A").arrange_by("a").export("A_by_a")
        checks = set(int(x) for x in rng.integers(1, epochs, 25))
        late = None
        expected_hist = {}
        for e in range(1, epochs + 1):
            tiny_stream(rng, state, sessions)
            for s in sessions.values():
                s.advance_to(e)
            if e == epochs // 2:
                with eng.dataflow("late") as df2:
                    a = df2.use("A_by_a")
                    late = (a.join(df2.input("B"), on="a").map(lambda b, b_right: {"a": b, "b": b_right})
                            .concat(a.count(by="a").map(lambda a, count: {"a": a, "b": count % DOM}))
                            .view("late", history=40))
            if e in checks or e == epochs or e % 97 == 0:
                for v in views:
                    eng.wait(v)
                snap = {n: Counter(c) for n, c in state.items()}
                for i, (p, v) in enumerate(zip(PROGS, views)):
                    want = evaluate(p, snap)
                    assert counter(v) == want, (workers, e, p)
                if late is not None:
                    eng.wait(late)
                    want = evaluate(("concat", ("join", ("input", "A"), ("input", "B")), ("count", ("input", "A"))), snap)
                    assert counter(late) == want, (workers, e, "late")
                expected_hist[e - 1] = snap
        # history: the last 40 epochs are still readable and right
        for e in range(epochs - 30, epochs):
            if e in expected_hist:
                for p, v in zip(PROGS, views):
                    assert counter(v, at=e) == evaluate(p, expected_hist[e]), (workers, "at", e, p)
        # compaction: the traces stay small (a few times the live rows), not thousands of tiny batches
        st = eng.stats()
        for arr in st["arrangements"] if isinstance(st, dict) and "arrangements" in st else []:
            if isinstance(arr, dict) and "batches" in arr:
                assert arr["batches"] < 200, arr


@pytest.mark.parametrize("workers", [1, 3])
def test_tiny_epochs_checked_every_epoch(workers):
    rng = np.random.default_rng(7 + workers)
    state = {"A": Counter(), "B": Counter()}
    progs = [PROGS[0], PROGS[4], ("distinct", ("join", ("input", "A"), ("swap", ("input", "A"))))]
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            views = [build(p, df).view(f"v{i}", history=3) for i, p in enumerate(progs)]
        prev = None
        for e in range(1, 400):
            tiny_stream(rng, state, sessions)
            for s in sessions.values():
                s.advance_to(e)
            for v in views:
                eng.wait(v)
            snap = {n: Counter(c) for n, c in state.items()}
            for p, v in zip(progs, views):
                assert counter(v) == evaluate(p, snap), (workers, e, p)
                if prev is not None:
                    assert counter(v, at=e - 2) == evaluate(p, prev), (workers, "at", e - 2, p)
            prev = snap


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_thousands_of_waited_tiny_epochs(workers):
    """Every epoch waited for, so every batch is tiny: spines merge thousands of 1-3 row batches in place;
    the traces must stay logarithmic in batches and bounded in records."""
    rng = np.random.default_rng(900 + workers)
    state = {"A": Counter(), "B": Counter()}
    epochs = 2000
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            views = [build(p, df).view(f"v{i}", history=5) for i, p in enumerate(PROGS)]
            df.input("B").arrange_by("a").export("B_by_a")
        late = None
        checks = set(int(x) for x in rng.integers(1, epochs, 30))
        for e in range(1, epochs + 1):
            tiny_stream(rng, state, sessions)
            for s in sessions.values():
                s.advance_to(e)
            eng.wait(views[-1])
            if e == 700:
                with eng.dataflow("late") as df2:
                    b = df2.use("B_by_a")
                    late = (df2.input("A").semijoin(b, on="a").concat(b.distinct()).view("late"))
            if e in checks or e == epochs:
                for v in views:
                    eng.wait(v)
                snap = {n: Counter(c) for n, c in state.items()}
                for p, v in zip(PROGS, views):
                    assert counter(v) == evaluate(p, snap), (workers, e, p)
                if late is not None:
                    eng.wait(late)
                    want = evaluate(("concat", ("semijoin", ("input", "A"), ("input", "B")),
                                     ("distinct", ("input", "B"))), snap)
                    assert counter(late) == want, (workers, e, "late")
        import time
        deadline = time.monotonic() + 30  # let idle maintenance finish (slowly under load)
        while any(a["merges"] for a in eng.stats()["arrangements"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(a["merges"] for a in eng.stats()["arrangements"]), "idle merging did not finish"
        for arr in eng.stats()["arrangements"]:
            for sh in arr["shards"]:
                assert sh["batches"] <= 2 * max(1, sh["records"]).bit_length() + 4, (arr["name"], sh)
            if arr["kind"] == "input" or arr.get("dataflow") == "late":
                assert arr["records"] <= 400, (arr["name"], arr["records"])
