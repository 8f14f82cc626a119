"""Session 46 attack on shared arrangements and introspection: exports and ``df.use`` across dataflows,
``eng.trace(NAME)`` handles (``accumulate``, cursors, compaction, since/upper/lower as DESIGN.md defines
them), exporters replaced, dropped or failing under their readers, late imports (attach, not re-arrange),
and the figures ``eng.catalog()``, ``eng.stats()``, ``eng.operator_stats()`` and
``eng.latency_histogram()`` report, at W = 1, 2, 3, with inserts and retractions.

Answers are checked against references computed here from the updates sent. Tests marked
xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.lattice import Antichain
from threads import until

WORKERS = [1, 2, 3]


def _boom_on_999(k, v):
    if (v == 999).any():
        raise ValueError("boom999")
    return {"k": k, "v": v}


def _bag(keys, vals, mult) -> Counter:
    out = Counter()
    for k, v, m in zip(keys[0].tolist(), vals[0].tolist(), mult.tolist()):
        out[(k, v)] += m
    return +out


def _ref_at(hist, t) -> Counter:
    c = Counter()
    for row, e, d in hist:
        if e <= t:
            c[row] += d
    return +c


# -- what works (coverage not in earlier rounds) ----------------------------------------------------------

@pytest.mark.parametrize("workers", WORKERS)
def test_handle_reads_every_time_it_holds_and_batches_keep_the_trace_contract(workers):
    """A handle that advances its logical frontier as it goes (set_logical_compaction) reads, at every time
    in advance of that frontier, exactly the collection sent (accumulate, and the cursors of all shards);
    an older time is a CompactedError; every shard's batches chain (lower = previous upper), end at or
    before the published upper, and are compacted to nothing beyond the readers' frontier."""
    rng = np.random.default_rng(460 + workers)
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
        h = eng.trace("x")
        hist, live, lo = [], Counter(), 0
        for e in range(24):
            rows = list(zip(rng.integers(0, 10, 20).tolist(), rng.integers(0, 4, 20).tolist()))
            a.insert(rows)
            hist += [(r, e, 1) for r in rows]
            live.update(rows)
            cand = sorted(r for r, c in live.items() if c > 0)
            rem = [cand[i] for i in rng.choice(len(cand), min(8, len(cand)), replace=False)]
            a.remove(rem)
            hist += [(r, e, -1) for r in rem]
            live.subtract(rem)
            a.advance_to(e + 1)
            eng.wait()
            if e % 3 == 2:
                lo = e - 2
                h.set_logical_compaction(Antichain([(lo,)]))
            snap = h.snapshot()
            assert snap.upper == Antichain([(e + 1,)])
            for bs in snap.shards:
                for prev, b in zip(bs, bs[1:]):
                    assert b.lower == prev.upper
                for b in bs:
                    assert b.since.less_equal(h.logical), (b.since, h.logical)
                if bs:
                    assert bs[-1].upper.less_equal(snap.upper)
            for t in range(lo, e + 1):
                assert _bag(*h.accumulate(t)) == _ref_at(hist, t), (e, t)
            if lo > 0:
                with pytest.raises(kp.CompactedError):
                    h.accumulate(lo - 1)
            got = Counter()
            for s in range(workers):
                hs = h.cursor(s).seek_keys(np.arange(10))
                for p in range(hs.keys.shape[1]):
                    for i in range(hs.off[p], hs.off[p + 1]):
                        got[(int(hs.keys[0, p]), int(hs.vals[0, i]))] += int(hs.diffs[i])
            assert +got == _ref_at(hist, e)
        h.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_late_import_attaches_without_rearranging_and_sees_no_transient_rows(workers):
    """A dataflow installed late on an export whose history a trace handle holds back: its joins, renames
    and loops read the export (no arrangement of its own holds the export's rows), its map never sees a row
    that came and went before it started, and its answers are the collection's."""
    n = 4000
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"], rows={"k": np.arange(n) % 200, "v": np.arange(n)})
        b = eng.input("b", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        b.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
        eng.wait()
        h = eng.trace("x")
        a.insert([(5, -5)])
        a.advance_to(2)
        a.remove([(5, -5)])
        a.advance_to(3)
        b.advance_to(3)
        eng.wait()
        seen = []

        def spy(k, v):
            seen.extend(v.tolist())
            return {"k": k, "v": v}

        with eng.dataflow("q") as df:
            x = df.use("x")
            j = df.input("b").join(x, on="k").view("j")
            r = x.rename(k="kk").join(df.input("b").rename(k="kk"), on="kk").view("r")
            m = x.map(spy).filter(lambda v: v < 0).view("m")
            it = df.input("b").iterate(
                lambda c: c.join(x, on="k").map(lambda v: {"k": v % 3}).concat(c).distinct()).view("it")
        eng.wait()
        assert -5 not in seen
        assert len(m) == 0
        assert sorted(j.to_pandas()["v"]) == [v for v in range(n) if v % 200 in (1, 2)]
        assert len(r) == len(j)
        assert sorted(it.to_pandas()["k"]) == [0, 1, 2]
        big = [(row["name"], row["records"]) for row in eng.arrangements()
               if row["dataflow"] == "q" and row["records"] >= n // 2]
        assert big == [], big
        ops = {o["operator"]: o["kind"] for o in eng.operator_stats("q")}
        assert "q: import 'x'" in ops
        h.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_exporter_dropped_then_reinstalled_under_a_reader_and_everything_freed(workers):
    """q sums over p's export while p is dropped (kept, maintained, listed as dropped), installed again
    (the old one renamed x~1) and q finally dropped; q's answer follows every change, the latency
    counts are one per seal, and at the end only the input's arrangement and the new p's remain."""
    rng = np.random.default_rng(workers)
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        live = Counter()

        def change(e):
            rows = [(int(k), int(v)) for k, v in zip(rng.integers(0, 5, 6), rng.integers(0, 100, 6))]
            a.insert(rows)
            live.update(rows)
            cand = sorted(r for r, c in live.items() if c > 0)
            rem = [cand[i] for i in rng.choice(len(cand), min(3, len(cand)), replace=False)]
            a.remove(rem)
            live.subtract(rem)
            a.advance_to(e)

        def build():
            with eng.dataflow("p") as df:
                df.input("a").arrange_by("k").export("x")

        change(1)
        build()
        with eng.dataflow("q") as df:
            s = df.use("x").sum(by="k", col="v").view("s")
        eng.wait(s)

        def check():
            exp = Counter()
            for (k, v), c in live.items():
                if c:
                    exp[k] += v * c
            got = dict(zip(s.to_pandas()["k"].tolist(), s.to_pandas()["v"].tolist()))
            assert got == dict(exp)

        check()
        eng.drop("p")
        assert eng.catalog()["x"]["dataflow"] == "p (dropped)"
        for e in range(2, 5):
            change(e)
            eng.wait(s)
            check()
        build()
        assert sorted(eng.catalog()) == ["x", "x~1"]
        assert eng.catalog()["x~1"]["dataflow"] == "p~1 (dropped)"
        for e in range(5, 8):
            change(e)
            eng.wait()
            check()
        assert {d["name"]: d["updates"] for d in eng.dataflow_stats()}["q"] == 7  # install (epoch 1) + 6 seals
        assert int(eng.latency_histogram("q")[1].sum()) == 7
        eng.drop("q")
        eng.wait()
        assert sorted(eng.catalog()) == ["x"]
        assert [d["name"] for d in eng.dataflow_stats(retired=True)] == ["p"]
        assert {(r["name"], r["dataflow"]) for r in eng.arrangements()} == {("input:a", None), ("x", "p")}
        assert all(r["bytes"] >= 0 and r["records"] >= 0 for r in eng.arrangements())


# -- bugs -------------------------------------------------------------------------------------------------

def test_failure_of_a_dropped_exporter_kept_for_a_handle_is_reported():
    """README: a handle keeps the arrangement it reads after its dataflow is dropped (the operators feeding
    it keep running) or fails (its upper stops moving; ``eng.dataflows()`` says why). Here the kept
    operators fail after the drop: the handle's upper stops at 1, but eng.dataflows(), dataflow_stats(
    retired=True), the catalog and the arrangement table say nothing, and eng.wait() returns."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 2)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").map(_boom_on_999).arrange_by("k").export("x")
        eng.wait()
        h = eng.trace("x")
        eng.drop("p")
        assert [(d["name"], d["status"]) for d in eng.dataflow_stats(retired=True)] == \
            [("p", "dropped (kept while its exports are read)")]
        a.insert([(1, 999)])
        a.advance_to(2)
        try:
            eng.wait()
        except kp.KpgnbError:
            pass
        assert until(lambda: "boom999" in repr(eng.dataflows())
                     or any("boom999" in (d["error"] or "") for d in eng.dataflow_stats(retired=True)), 3), \
            (h.upper, eng.dataflows(), eng.dataflow_stats(retired=True), eng.catalog())
        h.close()


def test_trace_of_a_failed_dataflows_export_says_it_failed():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 2)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("a").arrange_by("k").export("e")
            df.input("a").map(_boom_on_999).view("m")
        eng.wait()
        a.insert([(1, 999)])
        a.advance_to(2)
        assert until(lambda: eng.dataflows().get("d") == "failed")
        with pytest.raises(kp.KpgnbError) as use_err:
            with eng.dataflow("u") as df:
                df.use("e").view("u")
        assert "failed" in str(use_err.value)       # df.use says so (fixed in session 44)
        with pytest.raises(kp.UnknownNameError) as ei:
            eng.trace("e")
        msg = str(ei.value)
        assert "'d'" in msg and "failed" in msg and "boom999" in msg, msg


@pytest.mark.parametrize("at", ["2", 2.9, True])
def test_accumulate_refuses_an_epoch_that_is_not_an_int(at):
    """README, Errors: an argument of the wrong type, an epoch given as a str, is an ArgumentTypeError (as
    view.to_pandas(at='2') and at=2.9 are). TraceHandle.accumulate converts with int()."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
            v = df.input("a").view("v", history=5)
        h = eng.trace("x")
        for e in range(1, 5):
            a.insert([(e, e)])
            a.advance_to(e)
        eng.wait()
        with pytest.raises(kp.ArgumentTypeError):
            v.to_pandas(at=at)
        with pytest.raises(kp.ArgumentTypeError):
            h.accumulate(at)
        h.close()


def test_cursor_of_a_shard_that_does_not_exist_is_a_usage_error():
    """README: seek every shard (range(eng.workers)); errors kpgnb raises on purpose derive from KpgnbError.
    cursor(eng.workers) is a bare IndexError from engine/trace.py TraceSnapshot.batches."""
    shard = 2
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(k, k) for k in range(20)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("x")
        eng.wait()
        h = eng.trace("x")
        try:
            with pytest.raises(kp.UsageError) as ei:
                h.cursor(shard).seek_keys(np.arange(20))
            assert "shard" in str(ei.value)
        finally:
            h.close()


def _first_frame_after_close(workers):
    """A count by k over input a: (1,1) at epoch 0, (2,2) at 1, (3,3) at 2, (1,1) removed at 3; epochs
    up to 11 pass without changes, each waited for; then a is closed. The first frame of a follower."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("q") as df:
            c = df.input("a").count(by="k").view("c")
        for e in range(1, 4):
            a.insert([(e, e)])
            a.advance_to(e)
            eng.wait()
        a.remove([(1, 1)])
        for e in range(4, 12):
            a.advance_to(e)
            eng.wait()
        a.close()
        eng.wait()
        f = c.follow()
        try:
            frame = next(f)
        finally:
            f.close()
        rows = sorted(zip(frame["k"].tolist(), frame["count"].tolist(), frame["diff"].tolist()))
        return rows, sorted(set(frame["time"].tolist()))


def test_first_follow_frame_after_close_is_dated_at_the_last_change_for_every_worker_count():
    """README: when all its inputs are closed already, the contents come dated at the last epoch anything
    changed (here 3: k=1's row was removed then), and results are identical for every W. At W=2 and 3 the
    count of k=1 (+1 at 0, -1 at 3) has been compacted away in its shard, and engine/view.py Follower.start
    dates the contents by the largest time still stored: 2, an epoch whose contents held k=1 too. (A
    dataflow installed late over a closed import shows the same: epoch 4 at W=1, 2 at W=2.)"""
    got = {w: _first_frame_after_close(w) for w in WORKERS}
    for w, (rows, _) in got.items():
        assert rows == [(2, 1, 1), (3, 1, 1)], (w, rows)
    assert {w: t for w, (_, t) in got.items()} == {w: [3] for w in WORKERS}
