"""The runtime: input forms and errors, installs and drops, sharing, views, batching, failures, workers."""
import threading
import time
import traceback
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import kpgnb as kp
from kpgnb.engine.columns import SchemaError


@pytest.fixture(params=[1, 2])
def eng(request):
    e = kp.Engine(workers=request.param)
    yield e
    e.close()


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


# -- inputs ---------------------------------------------------------------------------------------

def test_input_forms_and_dtypes(eng):
    t = eng.input("t", ["name", "score", "ok", "n"], dtypes={"name": "str", "score": "float64", "ok": "bool"})
    t.insert([("a", 1.5, True, 1), ("b", -0.0, False, 2)])
    t.insert({"name": np.array(["c"]), "score": np.array([np.nan]), "ok": [True], "n": [3]})
    t.insert(pd.DataFrame({"name": ["d"], "score": [2.0], "ok": [False], "n": [4]}))
    t.insert(pa.table({"name": ["e"], "score": [3.0], "ok": [True], "n": [5]}))
    t.advance_to(1)
    with eng.dataflow("all") as df:
        v = df.input("t").view("all")
    eng.wait(v)
    got = v.to_pandas().sort_values("n").reset_index(drop=True)
    assert got["name"].tolist() == ["a", "b", "c", "d", "e"]
    assert got["ok"].tolist() == [True, False, True, False, True]
    assert got["score"].iloc[0] == 1.5 and np.isnan(got["score"].iloc[2]) and str(got["score"].iloc[1]) == "0.0"
    assert got["n"].dtype == np.int64


@pytest.mark.parametrize("bad,match", [
    ([(1, 2, 3)], r"row 0 has 3 values; expected 2 values for columns \['src', 'dst'\]"),
    ([(1, "x")], r"column 'dst' is int64 but row 0 holds 'x'"),
    ([(1, 2.5)], r"column 'dst' is int64 but row 0 holds 2.5"),
    ({"src": [1]}, r"missing columns \['dst'\]"),
    ({"src": [1], "dst": [2], "w": [3]}, r"unexpected columns \['w'\]"),
    ({"src": [1, 2], "dst": [2]}, r"different lengths"),
    ([(1, 2 ** 70)], r"column 'dst'"),
])
def test_bad_input_is_refused_and_changes_nothing(eng, bad, match):
    e = eng.input("edges", ["src", "dst"])
    e.insert([(1, 2)])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("edges").view("v")
    eng.wait(v)
    with pytest.raises(SchemaError, match=match):
        e.insert(bad)
    e.insert([(3, 4)])
    e.advance_to(2)
    eng.wait(v)
    assert rows(v) == [(1, 2), (3, 4)]


def test_epochs_only_advance(eng):
    e = eng.input("x", ["a"])
    e.advance_to(3)
    with pytest.raises(ValueError, match="epochs only advance"):
        e.advance_to(2)
    with pytest.raises(TypeError):
        e.advance_to(2.5)
    e.close()
    with pytest.raises(ValueError, match="closed"):
        e.insert([1])


def test_update_with_diffs_and_negative_multiplicity(eng):
    e = eng.input("x", ["a"])
    e.update([1, 2, 3], [2, 1, -1])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
    eng.wait(v)
    assert Counter(zip(*v.columns(diffs=True).values())) == Counter({(1, 2): 1, (2, 1): 1, (3, -1): 1})
    with pytest.raises(ValueError, match="negative multiplicity"):
        v.to_pandas()
    with pytest.raises(kp.UsageError, match="negative multiplicity"):  # (was 3: a count to_pandas cannot give)
        len(v)
    e.update([3, 4], [1, -3])  # -3 alone: the sum was negative (a bare ValueError from __len__)
    e.advance_to(2)
    eng.wait(v)
    with pytest.raises(kp.UsageError, match="negative multiplicity"):
        len(v)
    e.update([4], [3])
    e.advance_to(3)
    eng.wait(v)
    assert len(v) == len(v.to_pandas()) == 3


# -- building and installing -----------------------------------------------------------------------

def test_wrong_column_fails_at_definition_and_installs_nothing(eng):
    e = eng.input("edges", ["src", "dst"])
    e.insert([(1, 2)])
    e.advance_to(1)
    with eng.dataflow("keep") as df:
        keep = df.input("edges").arrange_by("src").export("by_src")
        kv = keep.view("kv")
    eng.wait(kv)
    with pytest.raises(SchemaError, match=r"parameter 'dts' is not a column; columns are \['src', 'dst'\]"):
        with eng.dataflow("bad") as df:
            df.input("edges").map(lambda dts: {"x": dts}).view("v")
    with pytest.raises(SchemaError, match="no left_on column 'nope'"):
        with eng.dataflow("bad") as df:
            df.input("edges").join(df.use("by_src"), left_on="nope", right_on="src")
    with pytest.raises(SchemaError, match="join key 'src' is int64 but 'w' is str"):
        eng.input("w", ["w"], dtypes=["str"])
        with eng.dataflow("bad") as df:
            df.input("edges").join(df.input("w"), left_on="src", right_on="w")
    with pytest.raises(ZeroDivisionError):
        with eng.dataflow("bad") as df:
            df.input("edges").view("half")
            raise ZeroDivisionError("the cell failed halfway")
    assert set(eng.dataflows()) == {"keep"} and set(eng.catalog()) == {"by_src"}
    e.insert([(5, 6)])
    e.advance_to(2)
    eng.wait(kv)
    assert rows(kv) == [(1, 2), (5, 6)]
    with eng.dataflow("bad") as df:  # the name is free again
        df.input("edges").view("v")


def test_builder_is_sealed_after_install(eng):
    eng.input("x", ["a"])
    with eng.dataflow("d") as df:
        c = df.input("x")
    with pytest.raises(SchemaError, match="installed"):
        c.map(lambda a: {"a": a})


def test_export_use_catalog_and_drop_rules(eng):
    import gc
    import weakref
    e = eng.input("edges", ["src", "dst"])
    e.insert([(1, 2), (1, 3), (2, 3)])
    e.advance_to(1)
    with eng.dataflow("producer") as df:
        df.input("edges").arrange_by("src").export("by_src")
    with eng.dataflow("consumer") as df:
        g = df.use("by_src")
        v = g.count(by="src").view("deg")
    eng.wait(v)
    assert rows(v) == [(1, 2), (2, 1)]
    cat = eng.catalog()
    assert cat["by_src"]["key"] == ["src"] and cat["by_src"]["values"] == ["dst"] and cat["by_src"]["records"] == 3
    # the import reads the producer's own trace, shard by shard: no second index exists
    snap = eng.snapshot()
    exported = snap.catalog["by_src"].live_trace()
    assert len(exported.spines) == eng.workers
    assert [ref() for _, ref in snap.dataflows["producer"].traces] == [exported]
    # the consumer maintains its count (and the key-only arrangement feeding it): the import adds nothing
    assert sorted(name.split("#")[0] for name, _ in snap.dataflows["consumer"].traces) == ["arrange", "count"]
    del snap
    with pytest.raises(kp.UsageError, match="exported already"):
        with eng.dataflow("x") as df:
            df.input("edges").arrange_by("dst").export("by_src")
    # dropping the producer keeps its export alive and maintained while the consumer reads it
    eng.drop("producer")
    assert eng.dataflows() == {"consumer": "running"}
    assert eng.catalog()["by_src"]["dataflow"] == "producer (dropped)"
    e.insert([(2, 4)])
    e.advance_to(2)
    eng.wait(v)
    assert rows(v) == [(1, 2), (2, 2)]
    ref = weakref.ref(exported)
    del exported
    eng.drop("consumer")
    gc.collect()
    assert eng.dataflows() == {} and eng.catalog() == {} and ref() is None
    with pytest.raises(ValueError, match="dropped"):
        v.to_pandas()


def test_drop_cascade_and_handles_keep_exports(eng):
    e = eng.input("edges", ["src", "dst"])
    e.insert([(1, 2)])
    e.advance_to(1)
    with eng.dataflow("producer") as df:
        df.input("edges").arrange_by("src").export("by_src")
    with eng.dataflow("consumer") as df:
        v = df.use("by_src").count(by="src").view("deg")
    eng.wait(v)
    eng.drop("producer", cascade=True)
    assert eng.dataflows() == {} and eng.catalog() == {}
    with eng.dataflow("producer") as df:
        df.input("edges").arrange_by("src").export("by_src")
    h = eng.trace("by_src")
    eng.drop("producer")
    e.insert([(1, 3)])
    e.advance_to(2)
    eng.wait()
    assert h.upper == kp.Antichain([(2,)])  # still maintained for the handle
    assert sorted(h.accumulate()[1][0].tolist()) == [2, 3]
    h.close()
    eng.wait()
    e.advance_to(3)
    eng.wait()
    assert eng.catalog() == {}


def test_dropped_export_trace_is_released(eng):
    import gc
    import weakref
    e = eng.input("x", ["a", "b"])
    e.insert([(1, 2), (2, 3)])
    e.advance_to(1)
    with eng.dataflow("p") as df:
        df.input("x").arrange_by("b").export("xb")
    ref = weakref.ref(eng.snapshot().catalog["xb"].live_trace())
    assert ref() is not eng.inputs()["x"].trace
    eng.drop("p")
    gc.collect()
    assert ref() is None


# -- views, time and batching --------------------------------------------------------------------

def test_view_history_and_errors(eng):
    e = eng.input("x", ["a"])
    with eng.dataflow("d") as df:
        v = df.input("x").view("v", history=2)
    for epoch in range(1, 6):
        e.insert([epoch])
        e.advance_to(epoch)
    eng.wait(v)
    assert v.frontier == kp.Antichain([(5,)]) and v.epoch == 5
    assert rows(v) == [(1,), (2,), (3,), (4,), (5,)]  # row e was inserted during epoch e - 1
    assert rows(v, at=3) == [(1,), (2,), (3,), (4,)]
    with pytest.raises(kp.CompactedError, match="history="):
        v.to_pandas(at=1)
    with pytest.raises(ValueError, match="not final yet"):
        v.to_pandas(at=5)


def hold_scheduler(eng):
    """Occupy the scheduler thread until the returned event is set (to queue work deterministically)."""
    from kpgnb.engine import faults
    started, release = threading.Event(), threading.Event()

    def hold():
        started.set()
        release.wait(30)
        faults.disarm("scheduler")
    faults.arm("scheduler", times=1, action=hold)
    eng.input("_wake", ["a"]).advance_to(1)  # any command wakes the scheduler
    assert started.wait(30)
    return release


def test_many_epochs_are_one_physical_batch(eng):
    e = eng.input("x", ["a", "b"])
    seen = []
    with eng.dataflow("d") as df:
        c = df.input("x").inspect(lambda cols, times, diffs: seen.append(np.unique(times[:, 0]).tolist()))
        v = c.count(by="a").view("v", history=20)
    eng.wait(v)
    release = hold_scheduler(eng)
    # the calling thread is never blocked by a busy scheduler: inserting and advancing just queue work
    for epoch in range(1, 11):
        e.insert([(epoch % 3, epoch)])
        e.advance_to(epoch)
    with pytest.raises(TimeoutError):
        eng.wait(timeout=0.2)  # the ten epochs are queued behind the held scheduler
    release.set()
    eng.wait(v)
    batches = [s for s in seen if s]
    assert len(batches) <= eng.workers  # one batch (one per shard) carrying ten epochs
    assert sorted(t for b in batches for t in b) == list(range(10))
    for epoch in range(0, 10):  # the row inserted before advance_to(x) has time x - 1
        want = Counter(x % 3 for x in range(1, epoch + 2))
        assert rows(v, at=epoch) == sorted(want.items())


def test_input_with_rows_is_created_only_if_they_load(eng):
    with pytest.raises(SchemaError, match="column 'a'"):
        eng.input("x", ["a"], rows=[(1,), ("q",)])
    assert eng.inputs() == {}
    x = eng.input("x", ["a"], rows=[(1,), (2,)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
    eng.wait(v)
    assert rows(v) == [(1,), (2,)]


def test_arguments_of_the_wrong_type_are_usage_errors(eng):
    """Deliberate refusals are KpgnbErrors (README: Errors); a wrong type is also the TypeError Python code
    expects."""
    x = eng.input("x", ["a"])
    for call in (lambda: x.advance_to("3"), lambda: x.advance_to(3.0), lambda: x.advance_to(None),
                 lambda: eng.wait(3.5), lambda: eng.wait(None, timeout="1"), lambda: eng.datalog(None)):
        with pytest.raises(kp.ArgumentTypeError) as info:
            call()
        assert isinstance(info.value, kp.UsageError) and isinstance(info.value, TypeError)
    x.advance_to(1)  # nothing changed
    assert x.epoch == 1


def test_drop_input_names_what_keeps_a_dropped_dataflow(eng):
    """An input read by a dropped dataflow kept for its export: the error names what holds the export (a
    reading dataflow, an open trace handle), and following its advice lets the input go (it said "drop
    dataflow 'p' first", which was dropped already)."""
    t = eng.input("t", ["g"], rows=[(1,)])
    t.advance_to(1)
    with eng.dataflow("p") as df:
        df.input("t").arrange_by("g").export("ex")
    with eng.dataflow("c") as df:
        df.use("ex").view("cv")
    h = eng.trace("ex")
    eng.drop("p")
    with pytest.raises(kp.UsageError, match=r"dataflow 'c' \(drop it first\).*dropped dataflow 'p'.*open handle "
                                            r"on 'ex' \(eng.trace\('ex'\): close it first\)"):
        eng.drop_input("t")
    eng.drop("c")
    with pytest.raises(kp.UsageError, match=r"^input 't' is read by dropped dataflow 'p', kept for its exports "
                                            r"while an open handle on 'ex'"):
        eng.drop_input("t")
    h.close()
    eng.drop_input("t")
    assert "t" not in eng.inputs()


def test_drop_input_only_when_unread(eng):
    x = eng.input("x", ["a"], rows=[(1,), (2,)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").count().view("v")
    eng.wait(v)
    with pytest.raises(kp.UsageError, match="read by dataflow 'd'"):
        eng.drop_input("x")
    x.insert([(3,)])                       # still usable
    x.advance_to(2)
    eng.wait(v)
    assert rows(v) == [(3,)]
    with pytest.raises(kp.UnknownNameError, match="no input named 'y'"):
        eng.drop_input("y")
    eng.drop("d")
    x.insert([(4,)])                       # buffered, then dropped with the input
    eng.drop_input("x")
    assert "x" not in eng.inputs() and "x" not in eng.snapshot().inputs
    with pytest.raises(kp.UsageError, match="was dropped"):
        x.advance_to(3)
    x2 = eng.input("x", ["a", "b"], rows=[(7, 8)])   # the name is free, with another schema
    x2.advance_to(1)
    with eng.dataflow("d2") as df:
        v2 = df.input("x").view("v2")
    eng.wait(v2)
    assert rows(v2) == [(7, 8)]


def test_wait_forms(eng):
    e = eng.input("x", ["a"])
    with eng.dataflow("d") as df:
        v = df.input("x").count().view("v")
    e.insert([1, 2, 3])
    e.advance_to(4)
    eng.wait(4)
    assert rows(v) == [(3,)]
    e.insert([4])
    e.advance_to(5)
    eng.wait()
    assert rows(v) == [(4,)]
    e.insert([5])
    e.advance_to(6)
    assert eng.wait("d") == "d"
    assert rows(v) == [(5,)]
    with pytest.raises(kp.UsageError, match="no dataflow named 'v'"):
        eng.wait("v")
    with pytest.raises(TypeError):
        eng.wait(2.5)


# -- failures --------------------------------------------------------------------------------------

def test_user_error_surfaces_with_traceback_and_engine_survives(eng):
    e = eng.input("x", ["a"])
    e.insert([1, 2])
    e.advance_to(1)

    def explode(a):
        if (a == 13).any():
            raise RuntimeError("unlucky thirteen")
        return {"a": a * 2}

    with eng.dataflow("fragile") as df:
        bad = df.input("x").map(explode).view("bad")
    with eng.dataflow("sturdy") as df:
        good = df.input("x").count().view("good")
    eng.wait(bad)
    assert rows(bad) == [(2,), (4,)]
    e.insert([13])
    e.advance_to(2)
    with pytest.raises(kp.DataflowError, match="map .*defined at.*test_runtime.py.*unlucky thirteen") as info:
        eng.wait(bad)
    tb = "".join(traceback.format_exception(info.value))
    assert "def explode" in tb or "in explode" in tb
    eng.wait(good)
    assert rows(good) == [(3,)]
    assert eng.dataflows() == {"fragile": "failed", "sturdy": "running"}
    eng.drop("fragile")
    with eng.dataflow("again") as df:
        ok = df.input("x").map(lambda a: {"a": a + 1}).view("ok")
    eng.wait(ok)
    assert rows(ok) == [(2,), (3,), (14,)]


def test_map_output_dtype_mismatch_is_explained(eng):
    """The dtype was inferred (no out=): the message says so, not that the user declared it."""
    e = eng.input("x", ["a"])
    e.insert([1])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").map(lambda a: {"y": a // 2}).map(lambda y: {"z": y / 2 if len(y) else y}).view("v")
    with pytest.raises(kp.DataflowError, match="float64 values for column 'z'.*no dtype was declared.*int64 was inferred.*out=\\{'z': 'float64'\\}"):
        eng.wait(v)


# -- operators beyond the oracle's integer programs -------------------------------------------------

def test_reductions_over_floats_and_strings(eng):
    t = eng.input("t", ["g", "name", "x"], dtypes={"name": "str", "x": "float64"})
    t.insert([(1, "pear", 0.5), (1, "apple", 2.0), (1, "fig", -1.0), (2, "kiwi", 3.0), (2, "date", 3.0)])
    t.advance_to(1)
    with eng.dataflow("d") as df:
        c = df.input("t")
        s = c.sum(by="g", col="x").view("s")
        mn = c.min(by="g", col="name").view("mn")
        mx = c.max(by="g", col="name").view("mx")
        am = c.argmax(by="g", col="x").view("am")
        tk = c.top_k(by="g", order_by="name", k=2, descending=False).view("tk")
        th = c.select("g").threshold(lambda n: (n >= 3).astype(np.int64)).view("th")
    eng.wait(th)
    assert rows(s) == [(1, 1.5), (2, 6.0)]
    assert rows(mn) == [(1, "apple"), (2, "date")]
    assert rows(mx) == [(1, "pear"), (2, "kiwi")]
    assert rows(am) == [(1, "apple", 2.0), (2, "date", 3.0)]  # ties break by the smallest row
    assert rows(tk) == [(1, "apple", 2.0), (1, "fig", -1.0), (2, "date", 3.0), (2, "kiwi", 3.0)]
    assert rows(th) == [(1,)]


def test_general_reduce_with_njit_function(eng):
    from numba import njit

    @njit
    def median(vals, counts):
        total = counts.sum()
        out = np.empty((1, 1), np.float64)
        seen = 0
        for i in range(vals.shape[0]):
            seen += counts[i]
            if 2 * seen >= total:
                out[0, 0] = vals[i, 0]
                break
        return out, np.ones(1, np.int64)

    t = eng.input("t", ["g", "x"], dtypes={"x": "float64"})
    t.insert([(1, 5.0), (1, 1.0), (1, 3.0), (2, 7.0)])
    t.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("t").reduce(by="g", fn=median, columns=["x"], out={"median": "float64"}).view("m")
    eng.wait(v)
    assert rows(v) == [(1, 3.0), (2, 7.0)]
    t.remove([(1, 1.0)])
    t.advance_to(2)
    eng.wait(v)
    assert rows(v) == [(1, 3.0), (2, 7.0)]
    t.remove([(1, 3.0)])
    t.advance_to(3)
    eng.wait(v)
    assert rows(v) == [(1, 5.0), (2, 7.0)]
    with pytest.raises(SchemaError, match="does not compile"):
        with eng.dataflow("bad") as df:
            df.input("t").reduce(by="g", fn=njit(lambda v, c: undefined_name), columns=["x"],  # noqa: F821
                                 out={"y": "float64"})


def test_join_output_is_chunked(eng, monkeypatch):
    import kpgnb.engine.operators.join as J
    monkeypatch.setattr(J, "CHUNK", 7)
    a = eng.input("a", ["k", "x"])
    b = eng.input("b", ["k", "y"])
    a.insert([(k % 3, i) for i, k in enumerate(range(30))])
    b.insert([(k % 3, i) for i, k in enumerate(range(12))])
    a.advance_to(1)
    b.advance_to(1)
    sizes = []
    with eng.dataflow("j") as df:
        j = df.input("a").join(df.input("b"), on="k").inspect(lambda c, t, d: sizes.append(len(d)))
        v = j.count(by="k").view("v")
    eng.wait(v)
    assert rows(v) == [(0, 40), (1, 40), (2, 40)]
    assert sum(sizes) == 120 and max(sizes) <= 7 and len(sizes) >= 120 // 7


def test_flat_map_forms(eng):
    e = eng.input("x", ["a"])
    e.insert([1, 2])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        c = df.input("x")
        v1 = c.flat_map(lambda a: ({"b": np.repeat(a, a)}, np.repeat(np.arange(len(a)), a))).view("v1")
        v2 = c.flat_map(lambda a: ({"b": np.repeat(a * 10, 2)}, np.full(len(a), 2)), repeat=True).view("v2")
    eng.wait(v2)
    assert rows(v1) == [(1,), (2,), (2,)]
    assert rows(v2) == [(10,), (10,), (20,), (20,)]


# -- compaction and statistics -----------------------------------------------------------------------

def test_live_count_over_churn_stays_bounded(eng):
    e = eng.input("x", ["k"])
    with eng.dataflow("d") as df:
        v = df.input("x").count(by="k").view("v")
    keys = np.arange(500)
    sizes = []
    for epoch in range(1, 161):
        if epoch % 2:
            e.insert({"k": keys})
        else:
            e.remove({"k": keys})
        e.advance_to(epoch)
        eng.wait(v)
        sizes.append(sum(a["records"] for a in eng.stats()["arrangements"]))
    assert max(sizes[80:]) <= max(sizes[:80])
    assert max(sizes[80:]) <= 10 * 500


def test_stats_per_shard(eng):
    assert eng.stats()["shard_busy_s"] == [0.0] * eng.workers  # a fresh engine has done nothing
    t0 = time.perf_counter()
    e = eng.input("x", ["k"])
    e.insert({"k": np.arange(1000)})
    e.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").count(by="k").view("v")
    eng.wait(v)
    st = eng.stats()
    arr = [a for a in st["arrangements"] if a["name"] == "input:x"][0]
    assert len(arr["shards"]) == eng.workers
    assert sum(s["records"] for s in arr["shards"]) == arr["records"] == 1000
    assert all(s["bytes"] > 0 for s in arr["shards"])
    busy = np.array(st["shard_busy_s"])
    assert len(busy) == eng.workers and (busy > 0).all()  # every shard holds records, so every shard worked
    assert (busy <= time.perf_counter() - t0).all()       # one thread per shard: never more than wall time
    assert st["latency_ms"]["count"] >= 1


def test_results_identical_across_worker_counts():
    out = []
    for w in (1, 2, 3):
        with kp.Engine(workers=w) as eng:
            e = eng.input("e", ["a", "b"])
            rng = np.random.default_rng(0)
            e.insert({"a": rng.integers(0, 50, 2000), "b": rng.integers(0, 50, 2000)})
            e.advance_to(1)
            with eng.dataflow("d") as df:
                c = df.input("e")
                v = c.join(c, left_on="b", right_on="a").count(by="a").view("v")
            eng.wait(v)
            out.append(rows(v))
    assert out[0] == out[1] == out[2]


def test_flat_map_tells_index_from_counts(eng):
    e = eng.input("x", ["a"])
    e.insert([1, 2, 3])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        c = df.input("x")
        counts = c.flat_map(lambda a: ({"b": np.repeat(a, a)}, a)).view("counts")        # 3 in, 6 out
        index = c.flat_map(lambda a: ({"b": a[np.repeat(np.arange(len(a)), 2)] * 0 + a[0]},
                                      np.repeat(np.arange(len(a)), 2))).view("index")
        ones = c.flat_map(lambda a: ({"b": a * 10}, np.ones(len(a), np.int64)), repeat=True).view("ones")
    eng.wait(ones)
    assert rows(counts) == [(1,), (2,), (2,), (3,), (3,), (3,)]
    assert len(rows(index)) == 6
    assert rows(ones) == [(10,), (20,), (30,)]
    # all ones without repeat= for several rows reads both ways (one row each, or every row from row 1): an
    # error, not a guess (one worker: its one call sees the three rows)
    with kp.Engine(workers=1) as one:
        one.input("x", ["a"], rows=[(1,), (2,), (3,)]).advance_to(1)
        with one.dataflow("d") as df:
            guess = df.input("x").flat_map(lambda a: ({"b": a * 10}, np.ones(len(a), np.int64))).view("guess")
        with pytest.raises(kp.DataflowError, match="repeat="):
            one.wait(guess)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_flat_map_counts_that_sum_to_the_rows_stay_counts(workers):
    """Counts of a later batch can sum to its number of rows (lengths agree): once a call has told counts
    from an index, later calls read the same way, at every W (they were read as an index: wrong rows at
    W=1, an index error at W=2)."""
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["a"], rows=[(2,), (5,)])
        e.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("e").flat_map(lambda a: ({"a": np.repeat(a, a % 3)}, a % 3)).view("v")
        eng.wait(v)
        assert sorted(v.to_pandas()["a"].tolist()) == [2, 2, 5, 5]
        e.remove([(2,)])
        e.insert([(3,), (1,), (4,), (7,)])  # counts 0, 1, 1, 1 and the removal's 2: 5 rows in, 5 out
        e.advance_to(2)
        eng.wait(v)
        assert sorted(v.to_pandas()["a"].tolist()) == [1, 4, 5, 5, 7]


def test_flat_map_that_cannot_be_told_asks_for_repeat():
    """A first call whose integers read as counts and as an index with different rows is an error naming
    repeat=, not a guess; with repeat= the same function works."""
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["a"], rows=[(1,), (2,), (3,)])
        e.advance_to(1)
        fn = lambda a: ({"a": a[::-1]}, np.arange(len(a))[::-1])  # noqa: E731 - 3 in, 3 out: [2, 1, 0]
        with eng.dataflow("d") as df:
            v = df.input("e").flat_map(fn).view("v")
        with pytest.raises(kp.DataflowError, match="repeat=True .* or repeat=False"):
            eng.wait(v, timeout=30)
        with eng.dataflow("d2") as df:
            w = df.input("e").flat_map(fn, repeat=False).view("w")
        eng.wait(w)
        assert sorted(w.to_pandas()["a"].tolist()) == [1, 2, 3]


def test_records_and_default_reduce_output(eng):
    from numba import njit

    @njit
    def largest(vals, counts):
        return vals[-1:, :].copy(), np.ones(1, np.int64)

    t = eng.input("t", ["g", "x"])
    t.insert([{"g": 1, "x": 4}, {"g": 1, "x": 9}, {"g": 2, "x": 3}])
    t.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("t").reduce(by="g", fn=largest, columns=["x"]).view("v")
    eng.wait(v)
    assert list(v.to_pandas().columns) == ["g", "x"] and rows(v) == [(1, 9), (2, 3)]
    with pytest.raises(SchemaError, match="record 1 has keys"):
        t.insert([{"g": 1, "x": 2}, {"g": 1}])


def test_variable_from_a_collection(eng):
    e = eng.input("e", ["src", "dst"])
    e.insert([(1, 2), (2, 3), (3, 4)])
    e.advance_to(1)
    with eng.dataflow("d") as df:
        edges = df.input("e")
        reach = kp.Variable(edges)                    # a new loop starting from the edges
        step = reach.join(edges, left_on="dst", right_on="src").select("src", "dst_right") \
                    .rename(dst_right="dst")
        v = reach.set(reach.concat(step).distinct()).leave().view("closure")
    eng.wait(v)
    assert rows(v) == [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]


def test_closed_inputs_make_views_final(eng):
    a = eng.input("a", ["k"])
    b = eng.input("b", ["k"])
    a.insert([1, 2, 3])
    b.insert([2])
    with eng.dataflow("d") as df:
        v = df.input("a").antijoin(df.input("b"), on="k").view("v")
    a.close()
    b.close()
    eng.wait(v)
    assert v.frontier.is_empty() and v.epoch is None
    assert rows(v) == [(1,), (3,)]


def test_empty_and_global_reductions(eng):
    a = eng.input("a", ["k", "x"])
    with eng.dataflow("d") as df:
        c = df.input("a")
        total = c.count().view("total")
        s = c.sum("x").view("s")
        looped = c.iterate(lambda v: v.distinct()).view("looped")
        j = c.join(c, on="k").view("j")
    a.advance_to(1)
    eng.wait(j)
    assert rows(total) == [] and rows(s) == [] and rows(looped) == [] and rows(j) == []
    a.insert([(1, 5), (2, 7)])
    a.advance_to(2)
    eng.wait(j)
    assert rows(total) == [(2,)] and rows(s) == [(12,)] and rows(looped) == [(1, 5), (2, 7)]
    a.remove([(1, 5), (2, 7)])
    a.advance_to(3)
    eng.wait(j)
    assert rows(total) == [] and rows(s) == [] and rows(looped) == [] and rows(j) == []


def test_exported_reduction_feeds_later_dataflows(eng):
    e = eng.input("e", ["src", "dst"])
    e.insert([(1, 2), (1, 3), (2, 3)])
    e.advance_to(1)
    with eng.dataflow("deg") as df:
        df.input("e").count(by="src").export("out_degree")
    with eng.dataflow("hubs") as df:
        deg = df.use("out_degree")
        big = deg.filter(lambda count: count >= 2).select("src").view("hubs")
        joined = df.input("e").join(deg, on="src").view("joined")
    eng.wait(joined)
    assert rows(big) == [(1,)]
    assert rows(joined) == [(1, 2, 2), (1, 3, 2), (2, 3, 1)]
    e.insert([(2, 4)])
    e.advance_to(2)
    eng.wait(joined)
    assert rows(big) == [(1,), (2,)]
    assert rows(joined) == [(1, 2, 2), (1, 3, 2), (2, 3, 2), (2, 4, 2)]


def test_dropping_dataflows_releases_their_readers(eng):
    e = eng.input("e", ["a", "b"])
    e.insert([(1, 2)])
    e.advance_to(1)
    base = e.trace.readers
    for i in range(5):
        with eng.dataflow(f"d{i}") as df:
            c = df.input("e")
            v = c.join(c.arrange_by("b"), left_on="a", right_on="b").count(by="a").view("v")
        eng.wait(v)
        eng.drop(f"d{i}")
    assert e.trace.readers == base


def test_trace_handle_on_a_named_arrangement(eng):
    e = eng.input("e", ["src", "dst"])
    e.insert([(1, 2), (1, 3), (2, 3)])
    e.advance_to(1)
    with eng.dataflow("p") as df:
        df.input("e").arrange_by("src").export("by_src")
    eng.wait()
    h = eng.trace("by_src")
    hist = h.cursor(shard=0).seek_keys(np.array([[1]], np.int64)) if eng.workers == 1 else None
    keys, vals, cnt = h.accumulate()
    assert sorted(zip(keys[0].tolist(), vals[0].tolist())) == [(1, 2), (1, 3), (2, 3)]
    if hist is not None:
        assert sorted(hist.vals[0].tolist()) == [2, 3]
    # a 1-D array for the one key column, every shard sought: the same histories at any W
    found = [v for s in range(eng.workers) for v in h.cursor(shard=s).seek_keys(np.array([1, 2])).vals[0].tolist()]
    assert sorted(found) == [2, 3, 3]
    with pytest.raises(ValueError, match=r"1 x n array .* got shape \(2, 1\)"):
        [h.cursor(shard=s).seek_keys(np.array([[1], [2]])) for s in range(eng.workers)]
    eng.drop("p")
    keys, vals, cnt = h.accumulate()  # still readable: the handle keeps the trace
    assert len(cnt) == 3
    h.close()
    with pytest.raises(KeyError):
        eng.trace("by_src")


def test_warm_up_compiles_every_kernel():
    """After the warm-up workload (in a fresh process) every numba kernel that Python code calls (from the
    engine's modules, or from the plain-Python wrappers in the kernel modules) has a compiled signature,
    except two that the warm-up cannot reach, and no engine thread is left behind."""
    import subprocess
    import sys
    code = """
import glob, importlib, inspect, os, pkgutil, re, threading
from numba.core.registry import CPUDispatcher
from kpgnb.engine.warmup import warm_kernels
import kpgnb.engine as E
import kpgnb.engine.kernels as K
warm_kernels(workers=2)
root = os.path.dirname(E.__file__)
text = "".join(open(f).read() for f in glob.glob(root + "/*.py") + glob.glob(root + "/operators/*.py"))
called, cold = set(), []
for m in pkgutil.iter_modules(K.__path__):
    mod = importlib.import_module("kpgnb.engine.kernels." + m.name)
    disp = {n: f for n, f in vars(mod).items() if isinstance(f, CPUDispatcher) and f.__module__ == mod.__name__}
    py = "".join(inspect.getsource(f) for f in vars(mod).values()
                 if inspect.isfunction(f) and f.__module__ == mod.__name__)
    for n, f in disp.items():
        if re.search(r"\\b" + n + r"\\(", text + py) and not f.signatures:
            cold.append(m.name + "." + n)
print(sorted(cold))
print(sum(t.name.startswith("kpgnb-") for t in threading.enumerate()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    cold, threads = out.stdout.strip().splitlines()[-2:]
    # compiled per user function; and only for batches of 2**24 rows or more
    assert set(eval(cold)) <= {"reduce.reduce_apply_user", "sort.hash_keys"}, cold
    assert threads == "0"


def test_operator_stats_and_wait_snapshot():
    """Per-operator time of a dataflow, busiest first; wait_snapshot wakes on the next published state and
    otherwise returns the current one after its timeout."""
    with kp.Engine(workers=2) as eng:
        inp = eng.input("xs", ["a"], rows={"a": np.arange(1000) % 7})
        inp.advance_to(1)
        with eng.dataflow("c") as df:
            view = df.input("xs").count(by="a").view("counts")
        eng.wait(view)
        stats = eng.operator_stats("c")
        kinds = {s["kind"] for s in stats}
        assert {"import", "count", "view"} <= kinds, kinds  # count reads the input's own arrangement
        assert all(s["operator"].startswith("c: ") and s["busy_s"] >= 0 and s["steps"] >= 0 for s in stats)
        assert [s["busy_s"] for s in stats] == sorted((s["busy_s"] for s in stats), reverse=True)
        assert sum(s["steps"] for s in stats) > 0
        with pytest.raises(kp.KpgnbError, match="no dataflow named 'nope'"):
            eng.operator_stats("nope")
        seen = eng.snapshot()
        got = eng.wait_snapshot(seen, timeout=0.05)  # nothing to wait for: it returns one of the published ones
        assert got is seen or got.seq >= seen.seq
        inp.insert({"a": [1]})
        inp.advance_to(2)
        deadline = time.monotonic() + 30
        snap = seen
        while view.epoch < 2 and time.monotonic() < deadline:
            snap = eng.wait_snapshot(snap, timeout=1.0)
        assert view.epoch >= 2 and eng.snapshot() is not seen


def test_an_input_follows_its_leader_while_idle():
    """``follow``: an input with nothing buffered advances with its leader, so a dataflow reading both is
    not held back by the idle one; buffered rows stop it until its owner advances it."""
    with kp.Engine(workers=2) as eng:
        lead = eng.input("lead", ["a"], rows=[(1,)])
        side = eng.input("side", ["b"])
        side.follow(lead)
        with eng.dataflow("j") as df:
            v = df.input("lead").concat(df.input("side").rename(b="a")).view("v")
        lead.advance_to(3)
        assert side.epoch == 3
        eng.wait(v, timeout=30)
        assert v.frontier.elements == ((3,),) and v.to_pandas()["a"].tolist() == [1]
        side.insert([(2,)])
        lead.advance_to(5)
        assert side.epoch == 3  # its rows wait for its owner
        side.advance_to(6)
        eng.wait(v, timeout=30)
        assert sorted(v.to_pandas()["a"].tolist()) == [1, 2]
        side.unfollow(lead)
        lead.advance_to(9)
        assert side.epoch == 6


def test_to_pandas_says_which_epoch_its_rows_are():
    """``df.attrs["epoch"]`` comes from the snapshot the rows were read from (``view.epoch`` read apart may
    already be later, e.g. for a view that does not depend on a lagging input)."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["x"])
        b = eng.input("b", ["x"])
        with eng.dataflow("d") as df:
            v = df.input("a").view("v", history=10)
            df.input("b").view("w")
        for e in range(3):
            a.insert([(e,)])
            a.advance_to(e + 1)
        b.advance_to(3)
        eng.wait(v)
        got = v.to_pandas()
        assert got.attrs["epoch"] == 3 and sorted(got["x"]) == [0, 1, 2]
        past = v.to_pandas(at=1)
        assert past.attrs["epoch"] == 2 and sorted(past["x"]) == [0, 1]
        # b lags: eng.wait(v) asks only for epoch 3, v moves on while it is read; the rows say which epoch
        # they are
        for e in range(3, 60):
            a.insert([(e,)])
            a.advance_to(e + 1)
            eng.wait(v)
            got = v.to_pandas()
            assert sorted(got["x"]) == list(range(got.attrs["epoch"]))
        # v does reach epoch 60 without b (how far it got during the loop depends on the machine's load)
        deadline = time.monotonic() + 60
        snap = eng.snapshot()
        while v.epoch != 60 and time.monotonic() < deadline:
            snap = eng.wait_snapshot(snap, timeout=1)
        got = v.to_pandas()
        assert got.attrs["epoch"] == 60 and sorted(got["x"]) == list(range(60))
        a.close()
        b.close()
        eng.wait(v)
        assert v.to_pandas().attrs["epoch"] is None


def test_a_loop_operator_without_work_skips_the_rounds_in_between():
    """lazy_rounds: inside a loop that runs 39 rounds, the arrangement of the variable's rows with k == 1
    (rows only in round 0) steps about once per epoch, not once per round (the loop's other arrangements
    step every round); the answer and the next epoch are as without skipping."""
    with kp.Engine(workers=1) as eng:
        s = eng.input("s", ["k"], rows=[(1,)])
        t = eng.input("t", ["k", "v"], rows=[(k, 10 * k) for k in range(1, 50)])
        s.advance_to(1), t.advance_to(1)
        with eng.dataflow("d") as df:
            tt = df.input("t")

            def body(x):
                nxt = x.map(lambda k: {"k": k + 1}).filter(lambda k: k < 40)
                first = x.filter(lambda k: k == 1).join(tt.enter(x.scope), on="k").map(lambda k, v: {"k": -v})
                return nxt.concat(first).concat(df.input("s").enter(x.scope)).distinct()
            v = df.input("s").iterate(body).view("v")
        eng.wait(v)
        assert sorted(v.to_pandas()["k"]) == list(range(-10, 40))  # -10 counts up too

        def arrange_steps():
            return sorted(o["steps"] for o in eng.operator_stats("d") if o["kind"] == "arrange")
        steps = arrange_steps()  # the input's own arrangement (outside the loop) steps once too
        assert steps[-1] >= 39 and steps[1] <= 3, steps
        s.insert([(2,)]), s.advance_to(2), t.advance_to(2)
        eng.wait(v)
        steps = arrange_steps()
        assert steps[1] <= 5, steps
        assert sorted(v.to_pandas()["k"]) == list(range(-10, 40))  # -10 counts up too
