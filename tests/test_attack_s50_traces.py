"""Session 50 attack on the trace API and compaction (README "Arrangements, sharing and compaction"):
``eng.trace(name)`` handles (``accumulate(at)``, cursors and ``seek_keys``, ``set_logical_compaction`` /
``set_physical_compaction``), handles garbage-collected, handles on a failed producer, records under long
insert/retract churn while several handles move their frontiers at different paces.

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

import collections
import gc
import random
import time

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp

T = 60


def _arr(eng, name) -> dict:
    return {a["name"]: a for a in eng.arrangements(live=True)}[name]


def _bag(keys, vals, mult) -> dict:
    rows = np.concatenate([keys, vals], axis=0) if vals.shape[0] else keys
    c = collections.Counter()
    for j in range(len(mult)):
        c[tuple(int(x) for x in rows[:, j])] += int(mult[j])
    return {r: m for r, m in c.items() if m}


def _churn(a, e):
    """Epoch e of a 4-key churn: each epoch inserts (e % 4, e) and retracts the row of 4 epochs ago."""
    a.insert([(e % 4, e)])
    if e >= 4:
        a.update([((e - 4) % 4, e - 4)], [-1])
    a.advance_to(e + 1)


def _settle(eng, name, bound, seconds=2.0) -> dict:
    """The arrangement's figures once its records are within ``bound(figures)`` or ``seconds`` passed."""
    eng.wait(timeout=T)
    deadline = time.monotonic() + seconds
    while True:
        x = _arr(eng, name)
        if bound(x) or time.monotonic() > deadline:
            return x
        time.sleep(0.05)


# -- bugs ---------------------------------------------------------------------------------------------------

def test_accumulate_of_a_str_and_float_arrangement_gives_the_collection():
    """README: ``accumulate(at)`` "gives the collection as of a time". An input with a str key and a float
    value, arranged by the str and exported; ``eng.trace("an").accumulate(0)`` returns
    ``(array([[1, 0]]), array([[4612811918334230528, 4609434218613702656]]), ...)``: symbol-table ids and
    the floats' bits, with no documented way to decode them. ``seek_keys(np.array(["bob"]))`` refuses the
    str with "a str or float key column is stored encoded ...: read such an arrangement with
    accumulate()", which gives the same encoding. Expected: the rows ("bob", 1.5) and ("al", 2.5).
    Likely cause: engine/trace.py ``TraceHandle.accumulate`` returns ``accumulate_batches`` raw; the
    handle knows no schema to decode with (``Trace.key_names`` only)."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["name", "x"], dtypes={"name": str, "x": float})
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("name").export("an")
        a.insert(pd.DataFrame({"name": ["bob", "al"], "x": [1.5, 2.5]}))
        a.advance_to(1)
        eng.wait(timeout=T)
        h = eng.trace("an")
        try:
            keys, vals, mult = h.accumulate(0)
            rows = collections.Counter()
            for j in range(len(mult)):
                rows[(keys[0][j], vals[0][j])] += int(mult[j])
            assert dict(rows) == {("bob", 1.5): 1, ("al", 2.5): 1}
        finally:
            h.close()


def _quiet(eng, name, seconds=0.6):
    """Let the engine finish its idle maintenance and settle (no merges in progress, figures unchanged)."""
    eng.wait(timeout=T)
    deadline = time.monotonic() + 5
    last = None
    while time.monotonic() < deadline:
        x = _arr(eng, name)
        now = (x["records"], x["batches"], x["merges"])
        if now == last and x["merges"] == 0:
            break
        last = now
        time.sleep(0.2)
    time.sleep(seconds)


@pytest.mark.parametrize("frontier", ["logical", "physical"])
def test_moving_a_handle_frontier_while_the_engine_is_idle_compacts(frontier):
    """README: readers' frontiers "let the spine compact history", and "right after each step, and while
    the engine is idle, the scheduler spends spare time on this". A handle holds the export back (logical
    at 0, or physical at 5 with the logical frontier following every epoch) through 40 epochs of a 4-key
    churn; the engine goes idle; then the handle lets go (``set_logical_compaction(39)``, or
    ``set_physical_compaction(Antichain())``). Live is 4, but the export keeps its 76 (or ~70) records
    for as long as no epoch comes (2 s here; ``eng.wait()`` does not help); set while the engine is still
    busy, the same call compacts to 4 at once, and so does ``h.close()`` (it submits a Collect).
    Likely cause: engine/trace.py ``Trace._set_reader`` (from ``TraceHandle.set_logical_compaction`` /
    ``set_physical_compaction``) only marks the trace ``_unsettled``; the settled scheduler loop
    (engine/scheduler.py, ``settle_at is None``) sleeps on ``_wake`` with no timeout and nothing sets it."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
        h = eng.trace("ak")
        try:
            if frontier == "physical":
                h.set_physical_compaction(5)
            for e in range(40):
                _churn(a, e)
                eng.wait(timeout=T)
                if frontier == "physical":
                    h.set_logical_compaction(e)
            _quiet(eng, "ak")
            held = _arr(eng, "ak")
            assert held["live"] == (76 if frontier == "logical" else 4) and held["records"] > 40
            if frontier == "logical":
                h.set_logical_compaction(39)
            else:
                h.set_physical_compaction(kp.Antichain())
            x = _settle(eng, "ak", lambda x: x["records"] <= 2 * x["live"], seconds=2.0)
            assert x["live"] == 4 and x["records"] <= 8, (x["records"], x["batches"])
        finally:
            h.close()


# -- checked, working ---------------------------------------------------------------------------------------

def test_a_garbage_collected_handle_releases_compaction_and_a_dropped_producer():
    """A handle held at 0 through 40 epochs of churn keeps every update (records == live == 76); once the
    handle is garbage-collected (no close()) the export compacts to the 4 live rows. A handle on the
    export of a dropped producer keeps it running (later inserts reach it); garbage-collecting that handle
    ends the kept dataflow and frees its name, so the input can be dropped."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
        h = eng.trace("ak")
        for e in range(40):
            _churn(a, e)
            eng.wait(timeout=T)
        held = _arr(eng, "ak")
        assert held["records"] == held["live"] == 76
        del h
        gc.collect()
        x = _settle(eng, "ak", lambda x: x["records"] <= 2 * x["live"])
        assert x["live"] == 4 and x["records"] <= 8, x
        h = eng.trace("ak")
        eng.drop("p")
        assert eng.catalog()["ak"]["dataflow"] == "p (dropped)"
        a.insert([(9, 9)])
        a.advance_to(41)
        eng.wait(timeout=T)
        assert _bag(*h.accumulate(40)) == {(0, 36): 1, (1, 37): 1, (2, 38): 1, (3, 39): 1, (9, 9): 1}
        with pytest.raises(kp.UsageError, match="eng.trace"):
            eng.drop_input("a")
        del h
        gc.collect()
        eng.wait(timeout=T)
        deadline = time.monotonic() + 5
        while eng.catalog() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert eng.catalog() == {} and eng.dataflows() == {}
        eng.drop_input("a")
        assert eng.inputs() == {}


def test_records_stay_bounded_while_handles_move_their_frontiers_at_different_paces():
    """W=3, random insert/retract churn over 20 keys for 200 epochs; an export and a keyed distinct, with
    one handle following each epoch, one lagging 5 epochs and moving every 10, one on the distinct:
    records stay within twice live (plus the lagging handle's window) and every handle reads exactly."""
    rng = random.Random(7)
    with kp.Engine(workers=3) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
            df.input("a").distinct(key="k").export("dk")
        h1, h2, h3 = eng.trace("ak"), eng.trace("ak"), eng.trace("dk")
        try:
            live, worst = [], []
            for e in range(200):
                ins = [(rng.randrange(20), rng.randrange(5)) for _ in range(3)]
                a.insert(ins)
                live += ins
                if len(live) > 30:
                    out = [live.pop(rng.randrange(len(live))) for _ in range(3)]
                    a.update(out, [-1] * 3)
                a.advance_to(e + 1)
                eng.wait(timeout=T)
                h1.set_logical_compaction(e)
                if e % 10 == 0:
                    h2.set_logical_compaction(max(0, e - 5))
                h3.set_logical_compaction(e)
                if e % 40 == 39:
                    x, y = _arr(eng, "ak"), _arr(eng, "dk")
                    worst.append((x["records"], x["live"], y["records"], y["live"]))
                    expect = collections.Counter(live)
                    assert _bag(*h1.accumulate(e)) == dict(expect)
                    assert _bag(*h3.accumulate(e)) == {r: 1 for r in expect}
            assert all(xr <= 2 * xl and yr <= 2 * yl for xr, xl, yr, yl in worst), worst
        finally:
            for h in (h1, h2, h3):
                h.close()


def test_a_handle_on_a_failed_producer_reads_as_of_the_failure_and_late_use_is_refused():
    """README: a handle keeps the arrangement it reads after its dataflow fails ("its upper stops
    moving"). The producer's map raises at epoch 1: the handle's upper stays {(1)}, epoch 0 reads
    exactly, epoch 1 is refused as not final (not read as a partial epoch), a late ``df.use`` of the
    export is refused naming the failure, and ``eng.drop`` then closing the handle frees everything."""
    def bad(k, v):
        if (k == 99).any():
            raise ValueError("boom")
        return {"k": k, "v": v}

    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").map(bad).arrange_by("k").export("ak")
        h = eng.trace("ak")
        a.insert([(1, 1), (2, 2)])
        a.advance_to(1)
        eng.wait(timeout=T)
        a.insert([(99, 1), (3, 3)])
        a.advance_to(2)
        with pytest.raises(kp.DataflowError):
            eng.wait("p", timeout=T)
        assert eng.dataflows() == {"p": "failed"}
        assert h.upper == kp.Antichain([(1,)])
        assert _bag(*h.accumulate(0)) == {(1, 1): 1, (2, 2): 1}
        with pytest.raises(kp.UsageError, match="not final"):
            h.accumulate(1)
        with pytest.raises(kp.KpgnbError, match="failed"):
            with eng.dataflow("late") as df:
                df.use("ak").view("lv")
        eng.drop("p")
        assert _bag(*h.accumulate(0)) == {(1, 1): 1, (2, 2): 1}
        h.close()
        eng.wait(timeout=T)
        assert eng.dataflows() == {} and eng.catalog() == {}
