"""Attack s35: engine/pool.py WorkerPool.run, whose caller now cancels the items no pool thread has started
and runs them itself (in a copy of the context). Items of very uneven cost at W = 2..4, errors and
KeyboardInterrupt in items, nested runs, context variables, and the engine over it: user functions that
fail in some shards, many dataflows at once, close while a step's items are in flight."""
import contextvars
import threading
import time
import warnings
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.pool import WorkerPool

VAR = contextvars.ContextVar("s35", default="unset")


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.ran = Counter()
        self.running = 0
        self.threads = {}

    def __call__(self, spec):
        i, cost, fail = spec
        with self.lock:
            self.ran[i] += 1
            self.running += 1
            self.threads[i] = threading.current_thread().name
        try:
            if cost:
                time.sleep(cost)
            if fail == "value":
                raise ValueError(f"item {i}")
            if fail == "kbd":
                raise KeyboardInterrupt(f"item {i}")
            return i * 10
        finally:
            with self.lock:
                self.running -= 1


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_every_item_runs_once_in_order_and_nothing_runs_after(workers):
    rng = np.random.default_rng(workers)
    pool = WorkerPool(workers)
    try:
        for trial in range(60):
            n = int(rng.integers(1, 3 * workers + 2))
            specs = []
            for i in range(n):
                cost = float(rng.choice([0, 0, 0.0005, 0.003]))
                fail = rng.choice(["", "", "", "", "value", "kbd"]) if trial % 2 else ""
                specs.append((i, cost, str(fail)))
            rec = Recorder()
            try:
                out = pool.run(rec, specs)
                assert out == [i * 10 for i in range(n)]
                assert all(rec.ran[i] == 1 for i in range(n)), rec.ran
            except (ValueError, KeyboardInterrupt) as e:
                failing = {f"item {i}" for i, _, f in specs if f}
                assert str(e).strip("'") in failing, (e, failing)
                assert all(v == 1 for v in rec.ran.values()), rec.ran
            assert rec.running == 0  # every item stopped before run returned or raised
    finally:
        pool.shutdown()


def _ctx_fn(i):
    seen = VAR.get()
    VAR.set(f"item {i}")
    time.sleep(0.001 * (i % 3))
    return seen


@pytest.mark.parametrize("workers", [2, 3])
def test_items_see_the_callers_context(workers):
    pool = WorkerPool(workers)
    try:
        for _ in range(20):
            out = contextvars.copy_context().run(_run_in_ctx, pool, workers)
            assert out == ["caller"] * (3 * workers)
    finally:
        pool.shutdown()


def _run_in_ctx(pool, workers):
    VAR.set("caller")
    return pool.run(_ctx_fn, range(3 * workers))


@pytest.mark.parametrize("workers", [2, 3])
def test_nested_runs_finish(workers):
    pool = WorkerPool(workers)
    try:
        def inner(i):
            time.sleep(0.001)
            return i
        def outer(i):
            return sum(pool.run(inner, range(4)))
        done = []
        t = threading.Thread(target=lambda: done.append(pool.run(outer, range(2 * workers))), daemon=True)
        t.start()
        t.join(20)
        assert done == [[6] * (2 * workers)], "nested pool.run hung"
    finally:
        pool.shutdown()


def test_the_first_failing_item_in_order_surfaces():
    """Item 2, which the caller takes from the queue, fails before item 1 on the pool thread does: item
    1's error is the one raised (the first in item order, as when the items run one after another)."""
    pool = WorkerPool(2)
    try:
        def fn(i):
            if i == 0:
                time.sleep(0.05)
                return 0
            if i == 1:
                time.sleep(0.2)
                raise ValueError("item 1")
            raise ValueError(f"item {i}")
        with pytest.raises(ValueError, match="item 1"):
            pool.run(fn, [0, 1, 2])
    finally:
        pool.shutdown()


# -- through the engine ------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [2, 3, 4])
def test_user_function_failing_in_some_shards_fails_its_dataflow_only(workers):
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("a", ["x"], rows={"x": np.arange(40_000)})
        inp.advance_to(1)

        def bad(x):
            if (x % 7 == 3).sum() > 1000 and x.min() % 2 == 0:
                raise ValueError("bad shard")
            if x.min() % 2 == 1:
                raise KeyboardInterrupt("user interrupt in a shard")
            return {"x": x}
        with eng.dataflow("bad") as df:
            bv = df.input("a").map(bad, out={"x": "int64"}).count(by=[]).view("bv")
        with eng.dataflow("good") as df:
            gv = df.input("a").map(lambda x: {"x": x % 5}).count(by="x").view("gv")
        with pytest.raises(kp.DataflowError if hasattr(kp, "DataflowError") else Exception):
            eng.wait(bv, timeout=30)
        eng.wait(gv, timeout=30)
        got = gv.to_pandas().sort_values("x")
        assert got["count"].tolist() == [8000] * 5
        inp.insert({"x": np.arange(40_000, 50_000)})
        inp.advance_to(2)
        eng.wait(gv, timeout=30)
        assert gv.to_pandas()["count"].sum() == 50_000
        assert eng.dataflows()["bad"] == "failed"


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_many_dataflows_with_uneven_shards_agree_with_pandas(workers):
    rng = np.random.default_rng(workers)
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("a", ["k", "v"])
        views = []
        for j in range(5):
            def slow(k, v, j=j):
                if len(k) and k.min() % workers == 0:
                    time.sleep(0.002 * (j + 1))  # one shard much slower than the others
                return {"k": (k * (j + 1)) % 97, "v": v}
            with eng.dataflow(f"d{j}") as df:
                views.append((j, df.input("a").map(slow).sum(by="k", col="v").view(f"v{j}")))
        import pandas as pd
        data = pd.DataFrame({"k": [], "v": []}, dtype="int64")
        for e in range(4):
            n = int(rng.integers(5_000, 25_000))
            new = pd.DataFrame({"k": rng.integers(0, 10_000, n), "v": rng.integers(-5, 6, n)})
            inp.insert(new)
            data = pd.concat([data, new])
            if e and rng.random() < 0.7:
                rem = data.sample(n=min(len(data), 3000), random_state=e)
                inp.remove(rem)
                data = data.drop(rem.index.unique()) if False else _minus(data, rem)
            inp.advance_to(e + 1)
            for j, v in views:
                eng.wait(v, timeout=60)
                want = data.assign(k=(data.k * (j + 1)) % 97).groupby("k")["v"].sum()
                got = v.to_pandas().set_index("k")["v"].sort_index()
                assert dict(got) == dict(want), (j, e)


def _minus(data, rem):
    """Multiset difference of rows."""
    c = Counter(map(tuple, data[["k", "v"]].to_numpy().tolist()))
    c.subtract(Counter(map(tuple, rem[["k", "v"]].to_numpy().tolist())))
    rows = [r for r, m in c.items() for _ in range(m)]
    import pandas as pd
    return pd.DataFrame(rows, columns=["k", "v"], dtype="int64") if rows else pd.DataFrame(
        {"k": [], "v": []}, dtype="int64")


@pytest.mark.parametrize("workers", [2, 3])
def test_close_while_items_are_in_flight(workers):
    eng = kp.Engine(workers=workers)
    inp = eng.input("a", ["x"], rows={"x": np.arange(60_000)})
    inp.advance_to(1)
    started = threading.Event()

    def f(x):
        started.set()
        time.sleep(0.5 if x.min() == 0 else 0.0)
        return {"x": x + 1}
    with eng.dataflow("d") as df:
        v = df.input("a").map(f, out={"x": "int64"}).count(by=[]).view("v")
    assert started.wait(20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eng.close()
    for _ in range(50):
        if not any(t.name.startswith("kpgnb-worker") for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name.startswith("kpgnb-worker") for t in threading.enumerate())
    with pytest.raises(Exception, match="closed"):
        v.to_pandas()


def test_no_queued_item_starts_after_a_pool_thread_failed():
    """Item 1 fails on the pool thread (before or while the caller runs item 0): neither the pool thread
    nor the caller starts a queued item after that, and item 1's error is raised."""
    pool = WorkerPool(2)
    ran = []
    try:
        def fn(i):
            ran.append(i)
            if i == 0:
                time.sleep(0.3)
                return 0
            if i == 1:
                raise ValueError("item 1")
            return i
        with pytest.raises(ValueError, match="item 1"):
            pool.run(fn, range(6))
        assert set(ran) <= {0, 1} and 1 in ran, ran
    finally:
        pool.shutdown()


def test_an_interrupt_wins_over_an_earlier_items_error():
    pool = WorkerPool(2)
    try:
        def fn(i):
            if i == 0:
                time.sleep(0.2)
                return 0
            if i == 1:
                time.sleep(0.4)
                raise ValueError("item 1")
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            pool.run(fn, [0, 1, 2])
    finally:
        pool.shutdown()
