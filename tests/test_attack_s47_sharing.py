"""Attack (session 47): shared arrangements across dataflows (README "Arrangements, sharing and compaction").

Exports and ``df.use`` across many dataflows at W=1,2,3: late dataflows attaching to exports mid-stream
(their answers equal a from-scratch computation at every epoch they keep), chains of exports, replacing and
dropping producers (with and without cascade) while readers run, re-exports of one arrangement under
several names (renames and ``vals=`` projections included), trace handles on an export whose producer is
replaced and then dropped, and what ``eng.catalog()`` / ``eng.arrangements()`` list meanwhile.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import collections
import random

import pytest

import kpgnb as kp

T = 60


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


def _churn(rng, session, cur, n, kmax, vmax):
    """n random inserts/removals of (k, v) rows into ``session``, mirrored in the Counter ``cur``."""
    for _ in range(n):
        r = (rng.randrange(kmax), rng.randrange(vmax))
        if cur[r] and rng.random() < 0.5:
            session.remove([r])
            cur[r] -= 1
        else:
            session.insert([r])
            cur[r] += 1


# -- bugs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("middle", ["dropped", "replaced"])
def test_cascade_drop_reaches_readers_through_a_dropped_dataflow_kept_for_its_exports(middle):
    """A exports g; B reads g and exports h; C reads h. B is then dropped (or replaced by a new B: C keeps
    the old one, h~k) and kept, as documented, while C reads h. eng.drop("A", cascade=True) 'drops the
    readers too', but C, which depends on A through the kept B, is left running, and so A's and the old
    B's operators keep being maintained: the cascade stops at the kept B. Had B not been dropped first,
    the same cascade drops B and C (the chain is followed), and a failure or a cancel of A does reach C
    through the kept B (C fails with it): only the cascade misses it."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 2), (1, 3), (2, 3)])
        e.advance_to(1)
        with eng.dataflow("A") as df:
            df.input("e").arrange_by("dst").export("g")
        with eng.dataflow("B") as df:
            df.use("g").count(by="dst").export("h")
        with eng.dataflow("C") as df:
            vc = df.use("h").view("vc")
        eng.wait(vc, timeout=T)
        assert rows(vc) == [(2, 1), (3, 2)]
        if middle == "dropped":
            eng.drop("B")
            assert eng.dataflows() == {"A": "running", "C": "running"}
        else:
            with eng.dataflow("B", replace=True) as df:
                df.use("g").count(by="dst").export("h")
            assert sorted(eng.catalog()) == ["g", "h", "h~1"]
        eng.drop("A", cascade=True)
        eng.wait(timeout=T)
        assert eng.dataflows() == {}
        assert eng.catalog() == {}
        assert [a["name"] for a in eng.arrangements()] == ["input:e"]


@pytest.mark.parametrize("how", ["dropped", "replaced"])
def test_drop_with_cascade_of_a_kept_dataflow_drops_its_readers_or_says_why_not(how):
    """After eng.drop("A") (or a replace, which lists the old one as A~1) A is kept while B reads its
    export: `%dataflow list` shows it with status 'dropped (kept while its exports are read)' and the
    catalog names it as g's dataflow. The user then asks eng.drop(<that name>, cascade=True) to get rid of
    it and its readers, and gets UnknownNameError "no dataflow named 'A'; installed: ['B']", which
    contradicts the listing and says nothing of why A still runs. Either the cascade drops B (and so A),
    or the error says A was dropped and is kept while B reads it (as eng.drop_input's refusal does)."""
    from kpgnb.listing import Listing
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 2)])
        e.advance_to(1)
        with eng.dataflow("A") as df:
            df.input("e").arrange_by("dst").export("g")
        with eng.dataflow("B") as df:
            df.use("g").view("b")
        if how == "dropped":
            eng.drop("A")
            kept = "A"
        else:
            with eng.dataflow("A", replace=True) as df:
                df.input("e").arrange_by("src").export("g")
            kept = "A~1"
        eng.wait(timeout=T)
        listed = Listing.of(eng).dataflows
        assert kept in set(listed["dataflow"])
        try:
            eng.drop(kept, cascade=True)
        except kp.KpgnbError as err:
            assert "'B'" in str(err) and "kept" in str(err), str(err)
        else:
            assert "B" not in eng.dataflows()
            assert [c for c in eng.catalog() if c.startswith("g~")] == [] and \
                eng.catalog().get("g", {}).get("dataflow", "A") == "A"


def test_seek_keys_refuses_a_wrongly_shaped_key_array_on_every_shard():
    """README: seek_keys takes 'key columns as a kk x n int64 array, or a 1-D array for a one-column key',
    and each shard is to be sought in turn (range(eng.workers)). For an export keyed by (a, b) at W=3, a
    1-D array np.array([1, 2]) (a user meaning the key (1, 2)) is refused with ValueError only by the
    shard that holds rows; the other shards (and every shard while the arrangement is empty) accept it and
    answer nothing, so whether the mistake is reported depends on where the data hashed. The Cursor is
    built without the trace's key width (it reads it from the first batch, if any)."""
    import numpy as np
    with kp.Engine(workers=3) as eng:
        e = eng.input("e", ["a", "b", "c"])
        with eng.dataflow("A") as df:
            df.input("e").arrange_by("a", "b").export("ab")
        e.insert([(1, 1, 5)])
        e.advance_to(1)
        eng.wait(timeout=T)
        h = eng.trace("ab")
        try:
            for shard in range(eng.workers):
                with pytest.raises(ValueError, match="2 x n"):
                    h.cursor(shard).seek_keys(np.array([1, 2]))
        finally:
            h.close()


@pytest.mark.parametrize("call", ["use-list", "use-int", "use-none", "export-int", "export-list"])
def test_use_and_export_refuse_a_name_of_the_wrong_type_as_argument_type_errors(call):
    """README, Errors: 'an argument of the wrong type ... is ArgumentTypeError, also a TypeError', and every
    error kpgnb raises on purpose derives from KpgnbError. eng.trace(3) and eng.drop(3) follow it
    ('eng.trace takes the name of an exported arrangement, a str, not a int'), but df.use(["x"]) raises
    Python's own TypeError "unhashable type: 'list'" from the builder's cache, df.use(3) a SchemaError
    "no arrangement named 3 is exported", and export(3) a SchemaError "export needs a non-empty name"."""
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], rows=[(1, 2)])
        with pytest.raises(kp.ArgumentTypeError):
            with eng.dataflow("X") as df:
                kind, what = call.split("-")
                name = {"list": ["g"], "int": 3, "none": None}[what]
                if kind == "use":
                    df.use(name)
                else:
                    df.input("e").arrange_by("a").export(name)
        assert eng.dataflows() == {} and eng.catalog() == {}


# -- what held ----------------------------------------------------------------------------------------------

def test_cascade_drop_follows_a_chain_of_live_readers_and_keeps_the_producers_upstream():
    """The counterpart of the bug above with B never dropped: cascade from the middle of A -> B -> C drops
    B and C and leaves A (and its export) alone; a cascade from A then leaves nothing."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 2), (1, 3), (2, 3)])
        e.advance_to(1)
        with eng.dataflow("A") as df:
            df.input("e").arrange_by("dst").export("g")
        with eng.dataflow("B") as df:
            df.use("g").count(by="dst").export("h")
        with eng.dataflow("C") as df:
            df.use("h").view("vc")
        with eng.dataflow("D") as df:
            vd = df.use("g").view("vd")
        eng.wait(timeout=T)
        eng.drop("B", cascade=True)
        assert eng.dataflows() == {"A": "running", "D": "running"}
        assert sorted(eng.catalog()) == ["g"]
        e.insert([(4, 3)])
        e.advance_to(2)
        eng.wait(vd, timeout=T)
        assert rows(vd) == [(2, 1), (3, 1), (3, 2), (3, 4)]
        eng.drop("A", cascade=True)
        assert eng.dataflows() == {} and eng.catalog() == {}
        assert [a["name"] for a in eng.arrangements()] == ["input:e"]


@pytest.mark.parametrize("workers", [1, 3])
def test_late_readers_of_shared_reductions_match_from_scratch_at_every_kept_epoch(workers):
    """A producer exports a count, an arrangement by v, a distinct(key=) and a min; readers installed at
    epochs 3 and 7 (without waiting for the producer first) join them. At every epoch from its start each
    reader's view (read with at=, history kept) equals the answer computed from scratch; the producer is
    replaced at epoch 5 (readers keep the old arrangements, maintained) and dropped at 9."""
    rng = random.Random(47 + workers)
    hist = []
    views = {}
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["k", "v"])

        def producer(replace=False):
            with eng.dataflow("A", replace=replace) as df:
                x = df.input("e")
                x.count(by="k").export("cnt")
                x.arrange_by("v").export("byv")
                x.distinct(key="k").export("dk")
                x.min(col="v", by="k").export("mn")
        producer()
        cur = collections.Counter()
        for ep in range(1, 12):
            _churn(rng, e, cur, 4, 5, 4)
            hist.append(collections.Counter(cur))
            e.advance_to(ep)
            if ep in (3, 7):
                with eng.dataflow(f"B{ep}") as df:
                    j = df.use("cnt").join(df.use("byv"), left_on="k", right_on="v").view(f"j{ep}", history=20)
                    m = df.use("mn").join(df.use("dk"), on="k").view(f"m{ep}", history=20)
                views[ep] = (j, m)
            if ep == 5:
                producer(replace=True)
            if ep == 9:
                eng.drop("A")
        eng.wait(timeout=T)
        for start, (j, m) in views.items():
            for t in range(start, 11):
                live = [r for r, n in hist[t].items() for _ in range(n)]
                cnt = collections.Counter(k for k, _ in live)
                mn = {}
                for k, v in live:
                    mn[k] = min(mn.get(k, v), v)
                assert rows(j, at=t) == sorted((v, cnt[v], k) for k, v in live if cnt[v] > 0), (start, t)
                assert rows(m, at=t) == sorted((k, mn[k], v) for k, v in set(live)), (start, t)
        assert sorted(eng.dataflows()) == ["B3", "B7"]


def test_one_arrangement_under_several_names_renames_and_projections():
    """An arrangement exported as itself, renamed and re-projected (vals= reordered, key-only): the catalog
    lists each with its own columns, eng.arrangements() one row for the input's arrangement naming both
    exports it is read under, and readers of the projections see the projected columns through changes.
    After the producer is dropped, only the exports still read stay in the catalog (raw goes)."""
    with kp.Engine(workers=3) as eng:
        e = eng.input("e", ["src", "dst", "w"], key="src", rows=[(1, 2, 10), (1, 3, 11), (2, 3, 12)])
        e.advance_to(1)
        with eng.dataflow("A") as df:
            g = df.input("e")
            g.export("raw")
            g.rename(src="s", dst="d").export("ren")
            g.arrange_by("src", vals=["w", "dst"]).export("swap")
            g.arrange_by("src", vals=[]).export("keys")
        cat = eng.catalog()
        assert {n: (c["key"], c["values"]) for n, c in cat.items()} == {
            "raw": (["src"], ["dst", "w"]), "ren": (["s"], ["d", "w"]),
            "swap": (["src"], ["w", "dst"]), "keys": (["src"], [])}
        inp = [a for a in eng.arrangements() if a["name"] == "input:e"]
        assert len(inp) == 1 and sorted(inp[0]["exports"]) == ["raw", "ren"]
        with eng.dataflow("B") as df:
            v1 = df.use("ren").join(df.use("swap"), left_on="s", right_on="src").view("v1")
            v2 = df.use("keys").count(by="src").view("v2")
        eng.wait(timeout=T)
        assert list(v1.to_pandas().columns) == ["s", "d", "w", "w_right", "dst"]
        e.remove([(1, 2, 10)])
        e.insert([(3, 1, 5)])
        e.advance_to(2)
        eng.wait(timeout=T)
        assert rows(v1) == [(1, 3, 11, 11, 3), (2, 3, 12, 12, 3), (3, 1, 5, 5, 1)]
        assert rows(v2) == [(1, 1), (2, 1), (3, 1)]
        eng.drop("A")
        assert sorted(eng.catalog()) == ["keys", "ren", "swap"]
        e.insert([(2, 7, 1)])
        e.advance_to(3)
        eng.wait(timeout=T)
        assert rows(v1)[-2:] == [(2, 7, 1, 12, 3), (3, 1, 5, 5, 1)]
        assert sorted(eng.catalog()) == ["keys", "ren", "swap"]


def test_trace_handle_keeps_reading_an_export_through_replace_and_drop_of_its_producer():
    """A handle opened on an export at epoch 3 reads every later epoch exactly (accumulate(t)) while its
    producer is replaced (the handle keeps the old arrangement, listed as cnt~k and maintained) and the new
    producer is dropped; only the old arrangement stays in the catalog, for the handle."""
    rng = random.Random(7)
    hist = []
    with kp.Engine(workers=3) as eng:
        e = eng.input("e", ["k", "v"])
        with eng.dataflow("A") as df:
            df.input("e").count(by="k").export("cnt")
        cur = collections.Counter()
        h = None
        try:
            for ep in range(1, 12):
                _churn(rng, e, cur, 4, 5, 3)
                hist.append(collections.Counter(cur))
                e.advance_to(ep)
                if ep == 3:
                    eng.wait(timeout=T)
                    h = eng.trace("cnt")
                if ep == 5:
                    with eng.dataflow("A", replace=True) as df:
                        df.input("e").count(by="v").export("cnt")
                if ep == 8:
                    eng.drop("A")
            eng.wait(timeout=T)
            assert [n.split("~")[0] for n in eng.catalog()] == ["cnt"] and "cnt" not in eng.catalog()
            for t in range(3, 11):
                c = collections.Counter()
                for (k, _), n in hist[t].items():
                    c[k] += n
                ks, vs, ms = h.accumulate(t)
                got = sorted((int(ks[0][i]), int(vs[0][i])) for i in range(len(ms)) for _ in range(int(ms[i])))
                assert got == sorted((k, n) for k, n in c.items() if n), t
        finally:
            if h is not None:
                h.close()
        eng.wait(timeout=T)
        assert eng.catalog() == {}


def test_exports_refused_inside_a_loop_and_a_use_of_an_input_name_says_it_is_not_exported():
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["src", "dst"], key="src", rows=[(1, 2)])
        with pytest.raises(kp.SchemaError, match="top-level"):
            with eng.dataflow("L") as df:
                df.input("e").iterate(lambda r: r.arrange_by("dst").export("inloop").as_collection())
        with pytest.raises(kp.SchemaError, match="no arrangement named 'e' is exported"):
            with eng.dataflow("U") as df:
                df.use("e")
        assert eng.dataflows() == {} and eng.catalog() == {}
