"""Attack (session 49): what a user sees of a running engine (README "Watching the engine").

Checked through the public API: ``eng.arrangements()`` / ``eng.stats()`` readers against the importing
dataflows and handles across installs, failed installs and drops; the compaction blocker naming a view's
``history=``; ``eng.stats()["ife"]`` against the arrangement table; a ``Progress`` following a dataflow that
is replaced; what the table keeps after a handle on a cancelled/failed export closes and after every input closes.

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs


def _row(eng, name):
    rows = [r for r in eng.arrangements() if r["name"] == name]
    assert len(rows) == 1, [r["name"] for r in eng.arrangements()]
    return rows[0]


def _graph(eng, seed=1, n=60, m=300):
    rng = np.random.default_rng(seed)
    src, dst, w = rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(1, 9, m)
    edges = eng.input("edges", ["src", "dst", "w"], rows={"src": src, "dst": dst, "w": w})
    sources = eng.input("sources", ["source"], rows=[(0,)])
    return edges, sources, (src, dst, w)


# -- things that work (coverage the earlier rounds lack) -----------------------------------------------------

def test_readers_come_back_to_the_baseline_after_every_kind_of_importer_and_failed_install():
    """Each kind of reader of an export (join, semijoin, antijoin, map, count, a loop, a self-join) adds
    readers while installed and gives every one back when dropped; a body that raises, a dataflow that
    fails on its first batch and an unknown ``df.use`` leave no reader behind. The catalog agrees."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 1), (2, 2)])
        b = eng.input("b", ["k"], rows=[(1,)])
        a.advance_to(1)
        b.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
            v = df.input("a").count(by="k").view("c")
        eng.wait(v)
        base = _row(eng, "x")["readers"]
        assert eng.catalog()["x"]["readers"] == base
        builds = {
            "join": lambda df: df.use("x").join(df.input("b"), on="k"),
            "semijoin": lambda df: df.use("x").semijoin(df.input("b"), on="k"),
            "antijoin": lambda df: df.input("b").antijoin(df.use("x"), on="k"),
            "map": lambda df: df.use("x").map(lambda k, v: {"k": k}),
            "count": lambda df: df.use("x").count(by="k"),
            "loop": lambda df: df.input("b").iterate(
                lambda r: r.join(df.use("x"), on="k").map(lambda k, v: {"k": v}).concat(r).distinct()),
            "selfjoin": lambda df: df.use("x").join(df.use("x"), on="k"),
        }
        for name, fn in builds.items():
            with eng.dataflow(name) as df:
                out = fn(df).view("o")
            eng.wait(out)
            r = _row(eng, "x")
            assert r["readers"] > base, name
            assert eng.catalog()["x"]["readers"] == r["readers"], name
            eng.drop(name)
            eng.wait()
            assert _row(eng, "x")["readers"] == base, name
        with pytest.raises(RuntimeError):
            with eng.dataflow("bad") as df:
                df.use("x").count(by="k").view("o")
                raise RuntimeError("the body fails")
        with pytest.raises(kp.KpgnbError):
            with eng.dataflow("bad2") as df:
                df.use("x").count(by="k").view("o")
                df.use("no_such_export")

        def boom(k):
            raise ValueError("boom")
        with eng.dataflow("bad3") as df:
            df.use("x").filter(boom).view("o")
        with pytest.raises(kp.DataflowError):
            eng.wait("bad3")
        eng.wait()
        gc.collect()
        assert _row(eng, "x")["readers"] == base
        assert eng.catalog()["x"]["readers"] == base


def test_a_views_history_is_named_as_the_blocker_by_exactly_its_epochs():
    """A view kept with ``history=5`` holds its arrangement 5 epochs back and is named for it; two open
    handles lagging alike are both named, and closing one leaves the other named."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 1), (2, 2)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            hv = df.input("a").arrange_by("k").export("x").view("hv", history=5)
            c = df.input("a").count(by="k").view("c")
        for e in range(2, 12):
            a.insert([(e, e)])
            a.advance_to(e)
            eng.wait(c)
        eng.wait(hv)
        r = _row(eng, "x")
        assert (r["blocker"], r["blocked_epochs"]) == ("p: view 'hv'", 5)
        assert len(hv.to_pandas(at=6)) == 8  # (1,1), (2,2) at 0, then (e,e) at epoch e-1
        with pytest.raises(kp.CompactedError):
            hv.to_pandas(at=5)
        h1, h2 = eng.trace("x"), eng.trace("x")
        try:
            for e in range(12, 16):
                a.insert([(e, e)])
                a.advance_to(e)
                eng.wait(c)
            eng.wait(hv)
            r = _row(eng, "x")
            assert r["blocker"] == "eng.trace('x'), eng.trace('x')"
            assert r["blocked_epochs"] == 15 - min(t[0] for t in h1.logical.elements)
            h1.close()
            assert _row(eng, "x")["blocker"] == "eng.trace('x')"
        finally:
            h1.close()
            h2.close()


def test_ife_figures_agree_with_the_arrangement_table():
    """``eng.stats()["ife"]``: a JOD / drop operator's ``state_differences`` and state bytes are its state
    timeline's records and bytes in the arrangement table; ``join_differences`` is 0 without a join trace;
    ``dropped`` never exceeds ``dropped_total``; a Bloom tracker forgets nothing; no report once dropped."""
    with kp.Engine(workers=2) as eng:
        edges, sources, (src, dst, w) = _graph(eng)
        with eng.dataflow("spsp") as df:
            e, s = df.input("edges"), df.input("sources")
            graphs.sssp(e, s, memory="jod").view("jod")
            graphs.sssp(e, s, memory="drop", drop=kp.Drop(p=0.5, policy="random", tracker="exact")).view("dx")
            graphs.sssp(e, s, memory="drop", drop=kp.Drop(p=0.9, policy="random", tracker="bloom")).view("db")
        edges.advance_to(1)
        sources.advance_to(1)
        eng.wait("spsp")
        for k in range(3):
            edges.remove([(int(src[k]), int(dst[k]), int(w[k]))])
            edges.advance_to(2 + k)
            sources.advance_to(2 + k)
        eng.wait("spsp")
        st = eng.stats()
        tables = {r["name"]: r for r in st["arrangements"]}
        reports = {r["operator"]: r for r in st["ife"]}
        assert set(reports) == {"spsp: ife 'sssp'", "spsp: ife 'sssp#2'", "spsp: ife 'sssp#3'"}
        for op, rep in reports.items():
            label = op.split("'")[1]
            tl = tables[f"{label} (state timeline)"]
            assert (rep["state_differences"], rep["bytes"]["state"]) == (tl["records"], tl["bytes"]), op
            assert rep["join_differences"] == 0 and rep["bytes"]["join"] == 0, op
            assert 0 <= rep["dropped"] <= rep["dropped_total"], op
        assert reports["spsp: ife 'sssp'"]["mode"] == "jod" and reports["spsp: ife 'sssp'"]["dropped_total"] == 0
        bloom = reports["spsp: ife 'sssp#3'"]
        assert bloom["dropped"] == bloom["dropped_total"] > 0
        eng.drop("spsp")
        assert eng.stats()["ife"] == []


# -- bugs ------------------------------------------------------------------------------------------------------

def test_the_exact_drop_trackers_arrangement_is_in_the_arrangement_table():
    """README (memory modes): ``tracker="exact"`` keeps the dropped (vertex, round) pairs in "an
    arrangement"; ``eng.arrangements()`` lists "every arrangement the engine maintains, exported or
    internal" (and the dashboard's table and trace sizes are drawn from it). The tracker's bytes show in
    ``stats()["ife"]`` but no row of the arrangement table holds them, so a user adding up the table's
    bytes to see what a dataflow costs misses the tracker."""
    with kp.Engine(workers=2) as eng:
        edges, sources, _ = _graph(eng)
        with eng.dataflow("spsp") as df:
            graphs.sssp(df.input("edges"), df.input("sources"), memory="drop",
                        drop=kp.Drop(p=0.5, policy="random", tracker="exact")).view("dx")
        edges.advance_to(1)
        sources.advance_to(1)
        eng.wait("spsp")
        st = eng.stats()
        (rep,) = st["ife"]
        assert rep["dropped"] > 0 and rep["bytes"]["dropped_tracker"] > 0
        rows = [r for r in st["arrangements"] if r["dataflow"] == "spsp"]
        assert any(r["bytes"] == rep["bytes"]["dropped_tracker"] and r["name"] != "sssp (state timeline)"
                   for r in rows), [(r["name"], r["bytes"]) for r in rows]


def test_a_progress_following_a_replaced_dataflow_does_not_say_it_caught_up():
    """``Progress.follow(eng, "q")`` on a q that lags (its filter holds the step), then q is replaced before
    it reaches its inputs' epoch: the bar goes on to read the *new* q (a different computation, with its
    own step counts) and reports the followed one as finished, "up to date", 3 of 3 epochs. It should say
    the dataflow was replaced, as it says "the dataflow was dropped" for a drop (and as a ``-o`` handle's
    status says ``replaced``)."""
    import threading
    import time

    from kpgnb.widgets import Progress
    from kpgnb.widgets.updater import Updater

    release, entered = threading.Event(), threading.Event()

    def held(k):
        if (k == 99).any():
            entered.set()
            release.wait(20)
        return k > -100

    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        with eng.dataflow("q") as df:
            w = df.input("a").filter(held).view("j")
        eng.wait(w)
        a.insert([(99,)])
        a.advance_to(2)
        assert entered.wait(20)
        a.insert([(5,)])
        a.advance_to(4)
        p = Progress.follow(eng, "q")
        try:
            assert p.state == "running"

            def replace():
                with eng.dataflow("q", replace=True) as df:
                    df.input("a").count(by="k").view("c")
            t = threading.Thread(target=replace)
            t.start()
            time.sleep(1.0)  # the replace is queued behind the held step (so the old q never reaches epoch 4)
            release.set()
            t.join(20)
            eng.wait("q")
            Updater.of(eng).refresh_now([p])
            assert "replaced" in p.label.value, p.label.value
            assert "up to date" not in p.label.value
        finally:
            release.set()
            p.close()


@pytest.mark.parametrize("how", [
    "drop",
    "cancel",
    "fail",
])
def test_closing_the_last_handle_on_an_ended_dataflows_export_frees_it(how):
    """README: a handle keeps the arrangement it reads also after its dataflow is dropped, fails or is
    cancelled; a failed or cancelled dataflow's state is freed (with no handle open, ``x`` leaves the
    table at once). With a handle open at the end, closing it frees ``x`` after a drop, but after a
    cancel or a failure ``x`` stays in ``eng.arrangements()`` with 0 readers and all its records and bytes
    (the catalog no longer lists it, nothing can read it) until the user drops the ended dataflow."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(i, i) for i in range(100)])
        a.advance_to(1)

        def bad(k):
            if (k == 500).any():
                raise ValueError("bad row")
            return k > -1
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
            v = df.input("a").filter(bad).view("c")
        eng.wait(v)
        h = eng.trace("x")
        try:
            if how == "drop":
                eng.drop("p")
            elif how == "cancel":
                eng.cancel("p")
            else:
                a.insert([(500, 500)])
                a.advance_to(2)
                with pytest.raises(kp.DataflowError):
                    eng.wait(v)
            eng.wait()
            r = _row(eng, "x")
            assert r["readers"] >= 1 and r["records"] >= 100
            assert len(h.accumulate()[2]) >= 100
        finally:
            h.close()
        del h
        gc.collect()
        a.insert([(3, 3)])
        a.advance_to(3)
        eng.wait()
        left = [(r["name"], r["dataflow"], r["readers"], r["records"]) for r in eng.arrangements()
                if r["kind"] != "input"]
        assert left == [], left


@pytest.mark.parametrize("workers", [1])
def test_once_every_input_is_closed_records_equal_the_live_figure(workers):
    """README: once every input is closed "every other trace folds its history into the final contents
    (views and exports keep their history= epochs before the last change, as if the engine had caught up
    before the close)". Here the engine HAS caught up before the close (each epoch waited), yet afterwards
    the input's trace is folded (records == live, one batch) while the export ``x`` and the count's trace
    keep their batches: W=1, 30 epochs of churn, then ``a.close()``: x 146 records for 138 live, count 49 for 33,
    for as long as the engine lives. (The s49 arrangements attack has the case of a close
    sent before the engine caught up, where the logical frontier stays at 0; here it moved.)"""
    import time
    rng = np.random.default_rng(0)
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
            c = df.input("a").count(by="k").view("c")
        live = set()
        for e in range(30):
            rows = [(int(rng.integers(0, 50)), e) for _ in range(10)]
            a.insert(rows)
            live |= set(rows)
            rem = sorted(live)[:5]
            a.remove(rem)
            live -= set(rem)
            a.advance_to(e + 1)
            eng.wait(c)
        a.close()
        eng.wait(c)
        eng.wait()
        deadline = time.monotonic() + 3
        while True:
            figures = {r["name"]: (r["records"], r["live"]) for r in eng.arrangements(live=True)}
            if all(rec == lv for rec, lv in figures.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert figures["input:a"][0] == figures["input:a"][1]
        assert all(rec == lv for rec, lv in figures.values()), figures
