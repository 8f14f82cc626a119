"""Attack s44 on introspection: eng.arrangements()/stats()/catalog()/dataflows()/operator_stats()/
latency_histogram(), %dataflow list (kpgnb.listing) and the dashboard widgets.

Figures are checked exactly against what the arrangements hold (an independent multiset of the updates
sent), frontiers against the views' epochs, latency counts against the advances made, and lifetimes
(traces, readers, threads) against a baseline. Seven tests are bugs found here and fixed in the same session (named in their docstrings)."""
import gc
import threading
import time
import traceback
import weakref
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.lattice import Antichain
from kpgnb.engine.trace import Trace
from kpgnb.listing import Listing
from threads import until

WAIT = 20


def _traces() -> int:
    gc.collect()  # type(), not isinstance: isinstance of a dead weakref.proxy (py4j keeps some) raises
    return sum(1 for o in gc.get_objects() if issubclass(type(o), Trace))


def _row(eng, name):
    rows = [r for r in eng.arrangements(live=True) if r["name"] == name]
    assert len(rows) == 1, [r["name"] for r in eng.arrangements()]
    return rows[0]


# -- figures against contents ------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_arrangement_figures_match_what_the_arrangement_holds(workers):
    """After every epoch of a random insert/retract stream: ``live`` equals the distinct (data, time) pairs
    left once the updates sent are advanced to the readers' logical frontier; the trace read back holds
    exactly the live multiset; and where every shard holds one batch (all compacted to one ``since``),
    ``records`` and ``keys`` are exactly the distinct (data, time) pairs and keys of that compaction."""
    rng = np.random.default_rng(44 + workers)
    eng = kp.Engine(workers=workers)
    try:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("q") as df:
            x = df.input("a")
            x.arrange_by("k").export("abk")
            v = x.count(by="k").view("c")
        live, hist, exact = Counter(), [], 0
        for e in range(40):
            rows = list(zip(rng.integers(0, 20, 15).tolist(), rng.integers(0, 5, 15).tolist()))
            a.insert(rows)
            for r in rows:
                live[r] += 1
                hist.append((r, e, 1))
            cand = sorted(r for r, c in live.items() if c > 0)
            rem = [cand[i] for i in rng.choice(len(cand), min(5, len(cand)), replace=False)]
            a.remove(rem)
            for r in rem:
                live[r] -= 1
                hist.append((r, e, -1))
            a.advance_to(e + 1)
            eng.wait(v)
            row = _row(eng, "abk")
            assert row["kind"] == "export" and row["dataflow"] == "q" and row["key"] == ["k"]
            assert row["upper"] == Antichain([(e + 1,)])
            lo = min(t[0] for t in row["logical"].elements)
            adv = Counter()
            for r, t, d in hist:
                adv[(r, max(t, lo))] += d
            assert row["live"] == sum(1 for c in adv.values() if c), (e, row["live"])
            assert row["records"] >= row["live"]
            assert sum(s["records"] for s in row["shards"]) == row["records"]
            assert len(row["shards"]) == workers
            h = eng.trace("abk")
            try:
                snap = h.snapshot()
                keys, vals, m = h.accumulate()
            finally:
                h.close()
            got = Counter()
            for k, val, c in zip(keys[0].tolist(), vals[0].tolist(), m.tolist()):
                got[(k, val)] += c
            assert +got == +live
            batches = [b for bs in snap.shards for b in bs]
            sinces = {tuple(b.since.elements) for b in batches if len(b)}
            if row["batches"] == len(batches) and len(sinces) == 1 and all(len(bs) <= 1 for bs in snap.shards):
                S = list(sinces)[0][0][0]
                c = Counter()
                for r, t, d in hist:
                    c[(r, max(t, S))] += d
                want = (sum(1 for n in c.values() if n), len({r[0] for (r, _), n in c.items() if n}))
                assert (row["records"], row["keys"]) == want, (e, S)
                exact += 1
        assert exact >= 2, "the one-batch-per-shard case never came up: the exact check did not run"
        # the catalog agrees with the arrangement table
        cat = eng.catalog()["abk"]
        assert (cat["records"], cat["dataflow"], cat["key"], cat["values"]) == \
            (_row(eng, "abk")["records"], "q", ["k"], ["v"])
    finally:
        eng.close()


def test_compaction_blocker_names_an_open_handle_by_the_epochs_it_lags():
    eng = kp.Engine(workers=2)
    try:
        a = eng.input("a", ["k", "v"], rows=[(1, 1)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
            v = df.input("a").count(by="k").view("c")
        eng.wait(v)
        assert _row(eng, "x")["blocker"] is None
        h = eng.trace("x")
        lo = min(t[0] for t in h.logical.elements)
        for e in range(2, 8):
            a.insert([(e, e)])
            a.advance_to(e)
            eng.wait(v)
        r = _row(eng, "x")
        assert (r["blocker"], r["blocked_epochs"]) == ("eng.trace('x')", 7 - lo)
        assert r["readers"] == 2
        h.close()
        a.insert([(9, 9)])
        a.advance_to(8)
        eng.wait(v)
        r = _row(eng, "x")
        assert (r["blocker"], r["blocked_epochs"], r["readers"]) == (None, 0, 1)
    finally:
        eng.close()


# -- frontiers against views ---------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 3])
def test_dataflow_frontiers_agree_with_views_and_inputs(workers):
    """Random advances and closes of three inputs, dataflows reading them directly and through an import:
    after each wait, every dataflow's ``epoch`` is its view's epoch and the least open input epoch, its
    inputs are exactly its sources at the epochs they were advanced to, and it lags by 0 epochs."""
    rng = np.random.default_rng(workers)
    eng = kp.Engine(workers=workers)
    try:
        ins = {n: eng.input(n, ["k"], rows=[(1,)]) for n in "abc"}
        with eng.dataflow("pa") as df:
            df.input("a").arrange_by("k").export("ea")
            va = df.input("a").count(by="k").view("v")
        with eng.dataflow("pab") as df:
            vab = df.use("ea").join(df.input("b"), on="k").view("v")
        with eng.dataflow("pbc") as df:
            vbc = df.input("b").concat(df.input("c")).distinct().view("v")
        views = {"pa": (va, "a"), "pab": (vab, "ab"), "pbc": (vbc, "bc")}
        ep, closed = {n: 0 for n in "abc"}, set()
        for _ in range(30):
            n = "abc"[int(rng.integers(0, 3))]
            if n in closed:
                continue
            if rng.random() < 0.06:
                ins[n].close()
                closed.add(n)
            else:
                ep[n] += int(rng.integers(1, 4))
                ins[n].insert([(int(rng.integers(0, 5)),)])
                ins[n].advance_to(ep[n])
            eng.wait()
            st = {d["name"]: d for d in eng.dataflow_stats()}
            listing = Listing.of(eng).dataflows.set_index("dataflow")["frontier"].to_dict()
            for name, (view, srcs) in views.items():
                opens = [ep[s] for s in srcs if s not in closed]
                want = min(opens) if opens else None
                d = st[name]
                assert (d["epoch"], view.epoch, d["lag_epochs"]) == (want, want, 0), name
                assert {s: (i["epoch"], i["closed"]) for s, i in d["inputs"].items()} == \
                    {s: (ep[s], s in closed) for s in srcs}, name
                assert listing[name] == ("closed" if want is None else want)
    finally:
        eng.close()


# -- latency ---------------------------------------------------------------------------------------------------

def test_latency_histogram_counts_every_seal_of_every_source():
    """One sample per seal of each source the dataflow reads, whether epochs are waited one at a time
    or several complete in one frontier move (README: every update's latency)."""
    eng = kp.Engine(workers=2)
    try:
        a, b = eng.input("a", ["k"]), eng.input("b", ["k"])
        with eng.dataflow("q") as df:
            v = df.input("a").count(by="k").view("c")
        with eng.dataflow("r") as df:
            df.input("a").join(df.input("b"), on="k").view("j")
        eng.wait()
        for e in range(1, 11):
            a.insert([(e,)])
            a.advance_to(e)
            eng.wait(v)
        for e in range(11, 31):
            a.insert([(e,)])
            a.advance_to(e)
        eng.wait(v)
        for e in range(1, 31):
            b.advance_to(e)
        eng.wait()
        ups = {d["name"]: d["updates"] for d in eng.dataflow_stats()}
        assert ups == {"q": 30, "r": 60}
        assert int(eng.latency_histogram("q")[1].sum()) == 30
        assert int(eng.latency_histogram("r")[1].sum()) == 60
        a.close()
        b.close()
        eng.wait()
        assert {d["name"]: d["updates"] for d in eng.dataflow_stats()} == {"q": 31, "r": 62}
    finally:
        eng.close()


def _blocked_advances(n: int):
    """While the scheduler is stuck in a user function of another dataflow, input 'a' is advanced to 1, and
    (after a pause) to 2..n; returns q's dataflow_stats read then (with the times bracketing it), and q's
    latency update count once it caught up."""
    eng = kp.Engine(workers=1)
    gate, entered = threading.Event(), threading.Event()

    def slow(k):
        if k == 7:
            entered.set()
            gate.wait(30)
        return {"k": k}

    try:
        a, g = eng.input("a", ["k"]), eng.input("gate", ["k"])
        with eng.dataflow("blocker") as df:
            df.input("gate").map(slow).view("b")
        with eng.dataflow("q") as df:
            v = df.input("a").count(by="k").view("c")
        eng.wait()
        g.insert([(7,)])
        g.advance_to(1)
        assert entered.wait(10)
        a.insert([(0,)])
        a.advance_to(1)
        t1 = time.perf_counter()
        time.sleep(0.3)
        for e in range(2, n + 1):
            a.insert([(e,)])
            a.advance_to(e)
        t3 = time.perf_counter()
        during = {d["name"]: d for d in eng.dataflow_stats()}["q"]
        gate.set()
        eng.wait(v, timeout=60)
        after = {d["name"]: d for d in eng.dataflow_stats()}["q"]
        return during, t3 - t1, after, int(eng.latency_histogram("q")[1].sum())
    finally:
        gate.set()
        eng.close()


def test_latency_and_lag_while_the_scheduler_is_busy_within_256_advances():
    during, lower, after, hist = _blocked_advances(200)
    assert during["lag_epochs"] == 200
    assert during["lag_s"] >= lower   # the oldest advance_to not reflected is the one to epoch 1
    assert (after["updates"], hist, after["epoch"]) == (200, 200, 200)


def test_latency_and_lag_while_the_scheduler_is_busy_beyond_256_advances():
    """An input kept only its last 256 advances and seals: a dataflow more than 256 behind counted 256
    updates and measured its lag from the 256th-last advance. Inputs now forget only what every reader
    reflects (engine/session.py forget, engine/scheduler.py _forget_reflected)."""
    during, lower, after, hist = _blocked_advances(300)
    assert during["lag_epochs"] == 300
    assert (after["updates"], hist, after["epoch"]) == (300, 300, 300), "latency samples lost"
    assert during["lag_s"] >= lower, f"lag_s {during['lag_s']:.3f} s, the oldest advance was {lower:.3f} s ago"


# -- replacing ended dataflows ----------------------------------------------------------------------------

def _exporter_of_e(eng, fails: bool):
    """Dataflow 'd' over input 'a' (rows 1 and 3) exporting 'e', and with ``fails`` a map raising on 3."""
    a = eng.input("a", ["k"], rows=[(1,), (3,)])
    a.advance_to(1)

    def boom(k):
        if k == 3:
            raise ValueError("boom")
        return {"k": k}

    with eng.dataflow("d") as df:
        x = df.input("a")
        x.arrange_by("k").export("e")
        if fails:
            x.map(boom).view("m")


@pytest.mark.parametrize("how", ["failed", "cancelled"])
def test_replacing_an_ended_dataflow_with_exports(how):
    """replace=True of a failed or cancelled dataflow with exports raised AttributeError (its exports had
    left the catalog when it ended, and _replace renamed them)."""
    eng = kp.Engine(workers=1)
    try:
        _exporter_of_e(eng, how == "failed")
        if how == "failed":
            assert until(lambda: eng.dataflows().get("d") == "failed")
        else:
            eng.wait()
            eng.cancel("d")
        assert eng.dataflows() == {"d": how}
        with eng.dataflow("d", replace=True) as df:   # the cell fixed and run again with --replace
            df.input("a").arrange_by("k").export("e")
            v = df.input("a").count(by="k").view("c")
        eng.wait(v)
        assert eng.dataflows() == {"d": "running"} and list(eng.catalog()) == ["e"]
        assert sorted(v.to_pandas()["k"]) == [1, 3]
    finally:
        eng.close()


# -- dropped, replaced and retired dataflows ---------------------------------------------------------------

def test_replaced_and_dropped_dataflows_leave_the_tables():
    eng = kp.Engine(workers=2)
    try:
        a = eng.input("a", ["k", "v"], rows=[(i % 7, i) for i in range(100)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("abk")
            df.input("a").count(by="k").view("pc")
        with eng.dataflow("r") as df:
            df.use("abk").distinct().view("rd")
        eng.wait()
        with eng.dataflow("p", replace=True) as df:
            df.input("a").arrange_by("k").export("abk")
            df.input("a").count(by="k").view("pc")
        eng.wait()
        arr = {(r["name"], r["dataflow"]) for r in eng.arrangements()}
        assert ("abk~1", "p~1 (dropped)") in arr and ("abk", "p") in arr
        assert sorted(eng.catalog()) == ["abk", "abk~1"]
        assert eng.catalog()["abk~1"]["dataflow"] == "p~1 (dropped)"
        assert [(d["name"], d["retired"]) for d in eng.dataflow_stats(retired=True)
                if d["name"].startswith("p")] == [("p", False), ("p~1", True)]
        assert eng.catalog()["abk~1"]["records"] == eng.catalog()["abk"]["records"] == 100
        lst = Listing.of(eng)
        assert set(lst.dataflows["dataflow"]) == {"p", "r", "p~1"}
        eng.drop("r")
        eng.wait()
        assert {r["dataflow"] for r in eng.arrangements()} == {None, "p"}
        assert sorted(eng.catalog()) == ["abk"]
        assert [d["name"] for d in eng.dataflow_stats(retired=True)] == ["p"]
        for n in ("r", "p~1"):
            with pytest.raises(kp.UnknownNameError):
                eng.operator_stats(n)
            with pytest.raises(kp.UnknownNameError):
                eng.latency_histogram(n)
        eng.drop("p")
        eng.wait()
        assert [r["name"] for r in eng.arrangements()] == ["input:a"]
        assert eng.catalog() == {} and eng.dataflow_stats(retired=True) == [] and eng.stats()["ife"] == []
        lst = Listing.of(eng)
        assert (len(lst.dataflows), len(lst.arrangements), list(lst.inputs["records"])) == (0, 0, [100])
    finally:
        eng.close()


def test_operator_stats_of_a_retired_dataflow():
    """operator_stats refused a replaced dataflow kept for its readers (it looked among installed ones)."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
        with eng.dataflow("r") as df:
            df.use("x").distinct().view("d")
        eng.wait()
        with eng.dataflow("p", replace=True) as df:
            df.input("a").arrange_by("k").export("x")
        eng.wait()
        assert "p~1" in {d["name"] for d in eng.dataflow_stats(retired=True)}
        eng.latency_histogram("p~1")
        ops = eng.operator_stats("p~1")
        assert ops and all(o["operator"].startswith("p~1: ") or o["operator"].startswith("p: ") for o in ops)
    finally:
        eng.close()


def test_listing_takes_every_table_from_one_snapshot():
    """Listing.of read the arrangements from a later snapshot than the dataflows."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        old = eng.snapshot()
        with eng.dataflow("q") as df:
            df.input("a").arrange_by("k").export("qa")
            v = df.input("a").count(by="k").view("c")
        eng.wait(v)
        new = eng.snapshot()
        seq, calls = [old, new], []

        def racing_snapshot():  # what a scheduler publishing between the two reads looks like
            calls.append(1)
            return seq[(len(calls) - 1) % 2]

        eng.snapshot = racing_snapshot
        try:
            lst = Listing.of(eng)
        finally:
            del eng.snapshot
        flows = set(lst.dataflows["dataflow"])
        owners = set(lst.arrangements["dataflow"])
        assert owners <= flows, (owners, flows)
    finally:
        eng.close()


def test_stats_lists_no_running_dataflow_without_its_arrangements():
    """A dataflow dropped after the snapshot was listed running with no arrangements (its traces, held
    weakly, were gone): stats() now pins the traces and leaves such a dataflow out of every table."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("a").count(by="k").view("c")
        eng.wait(v)
        before = eng.snapshot()    # taken by a reader ...
        eng.drop("q")              # ... just before the scheduler drops q
        del v, df
        eng.wait()
        gc.collect()
        eng.snapshot = lambda: before
        try:
            st = eng.stats()
        finally:
            del eng.snapshot
        owners = {r["dataflow"] for r in st["arrangements"]}
        running = {d["name"] for d in st["dataflows"] if d["status"] == "running"}
        assert running <= owners, (running, owners)
    finally:
        eng.close()


def test_using_the_export_of_a_failed_dataflow_says_it_failed():
    """df.use of a failed dataflow's export said only that no such arrangement is exported."""
    eng = kp.Engine(workers=1)
    try:
        _exporter_of_e(eng, True)
        assert until(lambda: eng.dataflows().get("d") == "failed")
        with pytest.raises(kp.KpgnbError) as ei:
            with eng.dataflow("u") as df:
                df.use("e").view("u")
        msg = str(ei.value)
        assert "'d'" in msg and "failed" in msg and "boom" in msg, msg
    finally:
        eng.close()


# -- memory returns ------------------------------------------------------------------------------------------

def test_churn_of_dataflows_handles_and_followers_returns_every_trace():
    """30 rounds of replace (with exports read by others), importing dataflows (some failing), trace handles
    and followers; after dropping everything only the input's trace is alive, with its own reader only."""
    eng = kp.Engine(workers=2)

    def boom(k, v):
        if k == 3:
            raise ValueError("boom")
        return {"k": k, "v": v}

    try:
        a = eng.input("a", ["k", "v"], rows={"k": np.arange(3000) % 100, "v": np.arange(3000)})
        a.advance_to(1)
        eng.wait()
        base = _traces()
        for i in range(30):
            with eng.dataflow(f"p{i % 3}", replace=True) as df:
                x = df.input("a")
                x.arrange_by("k").export(f"x{i % 3}")
                x.count(by="k").view("c")
            with eng.dataflow(f"r{i}") as df:
                y = df.use(f"x{i % 3}").join(df.input("a"), on="k").count(by="k").view("j")
                if i % 4 == 1:
                    df.input("a").map(boom).view("m")
            h = eng.trace(f"x{i % 3}")
            f = y.follow()
            next(f)
            a.insert({"k": np.arange(20), "v": np.arange(20) + 10000 * i})
            a.advance_to(i + 2)
            try:
                eng.wait()
            except kp.DataflowError:
                pass
            f.close()
            h.close()
            if i >= 2:
                eng.drop(f"r{i - 2}")
        del df, x, y, f, h
        for n in list(eng.dataflows()):
            eng.drop(n)
        eng.wait()
        assert eng.dataflows() == {} and eng.catalog() == {} and eng.dataflow_stats(retired=True) == []
        assert [(r["name"], r["readers"]) for r in eng.arrangements()] == [("input:a", 1)]
        assert _traces() == base
        assert (eng._scheduler.retired, eng._scheduler.dataflows) == ([], {})
    finally:
        eng.close()


def test_closed_engines_release_traces_and_threads():
    base_threads = {t.ident for t in threading.enumerate()}
    base = _traces()
    refs = []
    for _ in range(3):
        eng = kp.Engine(workers=3)
        a = eng.input("a", ["k", "v"], rows={"k": np.arange(2000) % 100, "v": np.arange(2000)})
        a.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("a").count(by="k").view("c")
            df.input("a").arrange_by("k").export("x")
        eng.wait(v)
        h = eng.trace("x")
        st = eng.stats(live=True)
        assert {r["name"] for r in st["arrangements"]} >= {"x", "input:a"}
        eng.close()
        # still answer after close
        assert eng.dataflows() == {} and eng.catalog() == {}
        eng.stats()
        refs.append(weakref.ref(eng))
        del eng, a, v, df, h, st
    gc.collect()
    assert all(r() is None for r in refs)
    assert until(lambda: {t.ident for t in threading.enumerate() if t.is_alive()} <= base_threads, 10), \
        [t.name for t in threading.enumerate()]
    assert _traces() == base


# -- threads ---------------------------------------------------------------------------------------------------

def test_introspection_from_threads_while_dataflows_churn_fail_and_the_engine_closes():
    """Two readers poll stats(live=...), catalog(), dataflows(), Listing.of, Reading.take, operator_stats and
    latency_histogram while the main thread replaces dataflows with exports, installs importers, opens and
    closes trace handles, drops, cancels, fails dataflows and finally closes the engine. Never an
    exception; within one stats() every arrangement's dataflow is listed and figures are sane (keys <=
    records, live <= records)."""
    widgets = pytest.importorskip("kpgnb.widgets")  # noqa: F841
    from kpgnb.widgets.reading import Reading

    eng = kp.Engine(workers=2)
    stop = threading.Event()
    errors, torn, examples = [], Counter(), {}

    def reader():
        n = 0
        while not stop.is_set():
            n += 1
            try:
                st = eng.stats(live=(n % 5 == 0))
                names = {d["name"] for d in st["dataflows"]}
                for r in st["arrangements"]:
                    d = r["dataflow"]
                    if d is not None and not d.endswith(" (dropped)") and d not in names:
                        torn["arrangement without dataflow"] += 1
                        examples.setdefault("arrangement", (r["name"], d, sorted(names)))
                    if r["keys"] > r["records"] or r["bytes"] < 0 or r.get("live", 0) > r["records"]:
                        torn["figures"] += 1
                        examples.setdefault("figures", r)
                # (a running dataflow listed without its arrangements: the stale-snapshot bug below; not
                # asserted here)
                eng.catalog()
                eng.dataflows()
                Listing.of(eng)
                Reading.take(eng)
                for d in names:
                    try:
                        eng.operator_stats(d)
                        eng.latency_histogram(d)
                    except kp.UnknownNameError:
                        pass
                    except kp.EngineError:  # README: once closed, calls other than stats/dataflows/catalog say so
                        if not eng.closed:
                            raise
            except BaseException:  # noqa: BLE001 - reported below
                errors.append(traceback.format_exc())
                return
            time.sleep(0.001)

    def boom(k, v):
        if k == 3:
            raise ValueError("boom")
        return {"k": k, "v": v}

    rng = np.random.default_rng(1)
    threads = [threading.Thread(target=reader) for _ in range(2)]
    handles = []
    try:
        a = eng.input("a", ["k", "v"], rows={"k": rng.integers(0, 50, 2000), "v": rng.integers(0, 50, 2000)})
        a.advance_to(1)
        for t in threads:
            t.start()
        for i in range(30):
            name = f"d{i % 4}"
            if eng.dataflows().get(name) in ("failed", "cancelled"):
                eng.drop(name)  # (replacing an ended dataflow with exports is the bug above)
            with eng.dataflow(name, replace=True) as df:
                x = df.input("a")
                x.arrange_by("k").export(f"e{i % 4}")
                x.count(by="k").view("c")
                if i % 7 == 3:
                    x.map(boom).view("m")
            if i % 5 == 0:
                try:
                    with eng.dataflow(f"u{i}") as df:
                        df.use(f"e{i % 4}").distinct().view("u")
                except (kp.DataflowError, kp.SchemaError):
                    pass  # its producer failed in the meantime (see the unclear-error test below)
            if i % 6 == 0 and f"e{i % 4}" in eng.catalog():
                handles.append(eng.trace(f"e{i % 4}"))
            if len(handles) > 2:
                handles.pop(0).close()
            if i % 9 == 8:
                for n in list(eng.dataflows()):
                    if n.startswith("u"):
                        eng.drop(n)
            if i % 11 == 10 and name in eng.dataflows():
                eng.cancel(name)
            a.insert({"k": rng.integers(0, 50, 30), "v": rng.integers(0, 50, 30)})
            a.advance_to(i + 2)
    finally:
        eng.close()
        time.sleep(0.2)  # the readers go on over the closed engine
        stop.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    assert not torn, (dict(torn), examples)


# -- widgets ---------------------------------------------------------------------------------------------------

def test_dashboard_follows_installs_drops_and_survives_close():
    widgets = pytest.importorskip("kpgnb.widgets")  # noqa: F841
    from kpgnb.widgets.updater import Updater

    eng = kp.Engine(workers=2)
    dash = None
    try:
        a = eng.input("a", ["k", "v"], rows=[(i % 5, i) for i in range(50)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("a_by_k")
            vp = df.input("a").count(by="k").view("pc")
        eng.wait(vp)
        dash = kp.dashboard(eng)
        assert [d["name"] for d in dash.frontiers.rows] == ["p"]
        with eng.dataflow("q") as df:
            vq = df.use("a_by_k").distinct().view("qd")
        eng.wait(vq)
        assert until(lambda: {d["name"] for d in dash.frontiers.rows} == {"p", "q"})
        assert until(lambda: {r["dataflow"] for r in dash.arrangements.rows} == {None, "p", "q"})
        # figures shown are the engine's
        assert until(lambda: {r["name"]: r["records"] for r in dash.arrangements.rows}.get("a_by_k") == 50)
        for e in range(2, 6):
            a.insert([(e, 100 + e)])
            a.advance_to(e)
        eng.wait()
        assert until(lambda: {d["name"]: d["epoch"] for d in dash.frontiers.rows} == {"p": 5, "q": 5})
        assert until(lambda: {r["name"]: r["records"] for r in dash.arrangements.rows}.get("a_by_k") == 54)
        eng.drop("q")
        eng.wait()
        assert until(lambda: {d["name"] for d in dash.frontiers.rows} == {"p"})
        assert until(lambda: {r["dataflow"] for r in dash.arrangements.rows} == {None, "p"})
        assert until(lambda: "1 dataflows running" in dash.header.value)
        u = Updater.of(eng)
        eng.close()
        assert until(lambda: "closed" in dash.header.value and "closed" in dash.frontiers.value)
        assert until(lambda: not u.running), "the updater thread outlived the engine"
    finally:
        if dash is not None:
            dash.close()
        eng.close()
    assert until(lambda: not [t for t in threading.enumerate() if t.name == "kpgnb-widgets"], 10)


def test_an_input_forgets_the_advances_its_readers_reflect():
    """Inputs no longer cap their seal history at 256 (a reader that lags keeps what it needs); what every
    reader reflects is forgotten, so a long stream holds a bounded history: with a reader keeping up, and
    with none."""
    from kpgnb.engine.session import HISTORY
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"])
        b = eng.input("b", ["k"])
        with eng.dataflow("q") as df:
            v = df.input("a").count(by="k").view("c")
        for e in range(1, 2001):
            a.insert([(e % 7,)])
            a.advance_to(e)
            b.advance_to(e)  # (no reader)
            if e % 50 == 0:
                eng.wait(v)
        eng.wait(v)
        assert len(a.seals) <= 2 * HISTORY + 50 and len(b.seals) <= 2 * HISTORY + 50, (len(a.seals), len(b.seals))
        assert eng.dataflow_stats()[0]["updates"] == 2000
    finally:
        eng.close()
