"""Attack (session 50): conformance to the documented public names (DESIGN.md section 4, the README, the
issues), exercised through their documented forms.

Most of the surface conforms (Engine/input/dataflow/view/follow/trace/datalog/graphs/widgets/magics/bench
flags were all probed). The bugs found are on the reader side of arrangements: ``TraceHandle`` (DESIGN
section 3: "TraceHandle (a reader: logical and physical compaction frontiers ...)", README: ``eng.trace(NAME)``
returns a ``TraceHandle``) takes compaction frontiers it cannot use, and the failure surfaces later, on the
*producing* dataflow; plus a few wrong-typed arguments that are not refused as ``ArgumentTypeError`` at the
call (README "Errors": "an argument of the wrong type ... is its subclass ``ArgumentTypeError``"),
``kp.Variable(initial=coll)`` refused, and a ``%%dataflow -o`` handle whose status turns from ``dropped`` to
``replaced``.

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour.
The others pin down behaviour probed and found right that earlier rounds do not cover."""
from __future__ import annotations

import pytest

import kpgnb as kp

from notebook_shell import ip, ok, quiet, run, shell  # noqa: F401 - fixtures

T = 20  # generous bound on any wait that should end


def _exporter(eng):
    """Input ``a`` (k, v) with one row at epoch 0, dataflow ``q`` exporting it (through a map, so the export
    is the dataflow's own arrangement) as ``x`` and counting it by k into view ``c``; waited for."""
    a = eng.input("a", ["k", "v"], rows=[(1, 2)])
    a.advance_to(1)
    with eng.dataflow("q") as df:
        c = df.input("a").map(lambda k, v: {"k": k, "v": v}).arrange_by("k").export("x").count(by="k").view("c")
    eng.wait(c, timeout=T)
    return a, c


def _feed_and_check(eng, a, c, h):
    """More epochs into ``a``; the producing dataflow must keep running and ``c`` be right, and the handle
    still read the arrangement as of a recent epoch."""
    for e in range(2, 8):
        a.insert([(e, e)])
        a.advance_to(e)
    eng.wait(c, timeout=T)
    assert eng.dataflows() == {"q": "running"}
    assert sorted(c.to_pandas()["k"].tolist()) == [1, 2, 3, 4, 5, 6, 7]  # (row e is inserted at epoch e - 1)
    keys, vals, mult = h.accumulate(6)
    assert sorted(zip(keys[0].tolist(), vals[0].tolist(), mult.tolist())) == \
        [(1, 2, 1), (2, 2, 1), (3, 3, 1), (4, 4, 1), (5, 5, 1), (6, 6, 1), (7, 7, 1)]


# -- TraceHandle compaction frontiers -------------------------------------------------------------------

@pytest.mark.parametrize("frontier", [2, (2,), None], ids=["int", "tuple", "none"])
def test_bug_physical_compaction_not_an_antichain_never_fails_the_producer(frontier):
    """A reader that passes an epoch (as ``accumulate(at)`` takes one) to ``set_physical_compaction`` gets
    it taken or refused with a ``KpgnbError`` at the call; either way the dataflow that produces the
    arrangement keeps running. Today the call returns and the producer fails at its next step (its views
    raise ``DataflowError: ... AttributeError``): one reader's argument kills every reader's data."""
    with kp.Engine(workers=1) as eng:
        a, c = _exporter(eng)
        h = eng.trace("x")
        try:
            try:
                h.set_physical_compaction(frontier)
            except kp.KpgnbError:
                pass
            _feed_and_check(eng, a, c, h)
        finally:
            h.close()


def test_bug_logical_compaction_of_the_wrong_depth_is_refused_at_the_call():
    """Times of a top-level arrangement have depth 1 (``accumulate`` refuses a time of another depth with
    ``UsageError``); a logical compaction frontier of depth 2 must be refused the same way, not stored."""
    with kp.Engine(workers=1) as eng:
        a, c = _exporter(eng)
        h = eng.trace("x")
        try:
            with pytest.raises(kp.KpgnbError):
                h.set_logical_compaction(kp.Antichain([(2, 0)]))
            _feed_and_check(eng, a, c, h)
        finally:
            h.close()


def test_bug_logical_compaction_given_an_epoch():
    """``accumulate(at)`` takes an int epoch; ``set_logical_compaction`` given one either takes it (the
    frontier {(2)}) or says what it wants with an ``ArgumentTypeError`` (README "Errors")."""
    with kp.Engine(workers=1) as eng:
        _exporter(eng)
        h = eng.trace("x")
        try:
            try:
                h.set_logical_compaction(2)
            except kp.ArgumentTypeError:
                return
            assert h.logical == kp.Antichain([(2,)])
        finally:
            h.close()


def test_logical_compaction_with_an_antichain_compacts_reads_behind_it():
    """The documented form works: after ``set_logical_compaction(Antichain([(2,)]))`` a read at epoch 0 is a
    ``CompactedError`` and one at epoch 2 sees every row up to it; the producer is unaffected."""
    with kp.Engine(workers=1) as eng:
        a, c = _exporter(eng)
        a.insert([(2, 3)])
        a.advance_to(3)
        eng.wait(c, timeout=T)
        h = eng.trace("x")
        try:
            h.set_logical_compaction(kp.Antichain([(2,)]))
            assert h.logical == kp.Antichain([(2,)])
            with pytest.raises(kp.CompactedError):
                h.accumulate(0)
            keys, vals, mult = h.accumulate(2)
            assert sorted(zip(keys[0].tolist(), vals[0].tolist(), mult.tolist())) == [(1, 2, 1), (2, 3, 1)]
        finally:
            h.close()
        assert eng.dataflows() == {"q": "running"}


# -- wrong-typed arguments refused at the call ----------------------------------------------------------

@pytest.mark.filterwarnings("ignore:the subscription to view:RuntimeWarning")
def test_bug_subscribe_to_something_not_callable_is_an_argument_type_error():
    """README: ``view.subscribe(fn)`` registers a callback; an argument of the wrong type is an
    ``ArgumentTypeError`` (as ``eng.wait(v, timeout="1")`` or ``follow(timeout="5")`` are)."""
    with kp.Engine(workers=1) as eng:
        _, c = _exporter(eng)
        sub = None
        try:
            with pytest.raises(kp.ArgumentTypeError):
                sub = c.subscribe(5)
        finally:
            if sub is not None:
                sub.close()


def test_bug_variable_given_only_its_initial_collection_by_keyword():
    """``kp.Variable(scope=None, initial=None, columns=None, dtypes=None)``: ``Variable(coll)`` makes a new
    loop starting from ``coll``, and the refusal of a Variable with neither says "needs a loop scope
    (df.loop(), ...) or an initial collection". So ``Variable(initial=coll)`` is the same as
    ``Variable(coll)``."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(0,)])
        a.advance_to(1)
        with eng.dataflow("v") as df:
            x = kp.Variable(initial=df.input("a"))
            w = x.set(x.map(lambda k: {"k": k + 1}), max_rounds=3).leave().view("w")
        eng.wait(w, timeout=T)
        assert w.to_pandas()["k"].tolist() == [3]


@pytest.mark.parametrize("call", ["dashboard", "progress_follow"])
def test_bug_widgets_given_something_that_is_not_an_engine(call):
    """README: ``kp.dashboard(eng)`` and ``Progress.follow(eng, name)`` take an engine; anything else is
    an argument of the wrong type, an ``ArgumentTypeError`` that says what was expected."""
    from kpgnb.widgets import Progress
    with pytest.raises(kp.ArgumentTypeError):
        if call == "dashboard":
            kp.dashboard("eng")
        else:
            Progress.follow("eng", "q")


# -- the notebook's dataflow handle ---------------------------------------------------------------------

def test_bug_handle_of_a_dropped_dataflow_stays_dropped_when_the_name_is_reused(ip, capsys, quiet):
    """README: ``-o VAR`` binds a handle whose ``VAR.status`` is ``replaced`` "once a later cell replaced it"
    (``--replace``) and ``dropped`` once dropped. A dataflow dropped with ``%dataflow drop`` was not
    replaced by the cell that later takes its free name (no ``--replace`` was needed or given)."""
    ok(ip, capsys, "a = kp.engine().input('a', ['k'], rows=[(1,)]); a.advance_to(1)")
    ok(ip, capsys, "%%dataflow q -o H\nv = df.input('a').view('v')")
    ok(ip, capsys, "%dataflow drop q")
    assert ip.user_ns["H"].status == "dropped"
    ok(ip, capsys, "%%dataflow q -o H2\nv = df.input('a').view('v')")
    assert ip.user_ns["H2"].status == "running"
    assert ip.user_ns["H"].status == "dropped"


# -- documented forms that work (not covered before) ----------------------------------------------------

def test_variable_max_rounds_agrees_with_iterate_max_rounds():
    """README: ``iterate(body, max_rounds=n)`` applies ``body`` n times; ``kp.Variable(loop, coll).set(body,
    max_rounds=n)`` and ``kp.Variable(coll)`` (a new loop) give the same collection."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(0,)])
        a.advance_to(1)
        for n in (1, 3):
            with eng.dataflow(f"i{n}") as df:
                v = df.input("a").iterate(lambda x: x.map(lambda k: {"k": k + 1}), max_rounds=n).view("v")
                x = kp.Variable(df.loop(), df.input("a"))
                w = x.set(x.map(lambda k: {"k": k + 1}), max_rounds=n).leave().view("w")
                y = kp.Variable(df.input("a"))
                u = y.set(y.map(lambda k: {"k": k + 1}), max_rounds=n).leave().view("u")
            eng.wait(f"i{n}", timeout=T)
            assert v.to_pandas()["k"].tolist() == w.to_pandas()["k"].tolist() == u.to_pandas()["k"].tolist() == [n]


def test_zero_column_collections_through_every_documented_form():
    """README: "a collection may have no columns, its rows still counted": an input of no columns, its
    count, distinct, a select() of nothing, a join and a semijoin on no keys (products), a concat, a map to
    no columns; ``len``, ``to_pandas`` and ``to_pandas(diffs=True)`` agree."""
    with kp.Engine(workers=2) as eng:
        z = eng.input("z", [])
        z.insert([(), (), ()])
        z.remove([()])
        z.advance_to(1)
        a = eng.input("a", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        with eng.dataflow("q") as df:
            zz, aa = df.input("z"), df.input("a")
            views = {
                "plain": zz.view("plain"), "count": zz.count().view("count"), "distinct": zz.distinct().view("distinct"),
                "select": aa.select().view("select"), "join": aa.join(zz, on=[]).view("join"),
                "concat": zz.concat(aa.select()).view("concat"), "semi": aa.semijoin(zz, on=[]).view("semi"),
                "map": aa.map(lambda k: {}).view("map")}
        eng.wait("q", timeout=T)
        got = {n: (len(v), v.to_pandas().shape, v.to_pandas(diffs=True).to_dict("list")) for n, v in views.items()}
        assert got == {
            "plain": (2, (2, 0), {"diff": [2]}), "count": (1, (1, 1), {"count": [2], "diff": [1]}),
            "distinct": (1, (1, 0), {"diff": [1]}), "select": (2, (2, 0), {"diff": [2]}),
            "join": (4, (4, 1), {"k": [1, 2], "diff": [2, 2]}), "concat": (4, (4, 0), {"diff": [4]}),
            "semi": (2, (2, 1), {"k": [1, 2], "diff": [1, 1]}), "map": (2, (2, 0), {"diff": [2]})}


def test_join_suffixes_stack_when_the_suffixed_name_is_taken():
    """DESIGN section 4: a join outputs the key columns (named as on the left), the left's other columns,
    then the right's; clashing names get ``_right``. Where ``v_right`` is taken already the right's ``v``
    does not overwrite it."""
    with kp.Engine(workers=1) as eng:
        eng.input("a", ["k", "v", "v_right"], rows=[(1, 2, 3)]).advance_to(1)
        eng.input("b", ["k", "v"], rows=[(1, 9)]).advance_to(1)
        with eng.dataflow("j") as df:
            v1 = df.input("a").join(df.input("b"), on="k").view("v1")
            v2 = df.input("b").join(df.input("a"), on="k").view("v2")
        eng.wait("j", timeout=T)
        assert v1.to_pandas().to_dict("list") == {"k": [1], "v": [2], "v_right": [3], "v_right_right": [9]}
        assert v2.to_pandas().to_dict("list") == {"k": [1], "v": [9], "v_right": [2], "v_right_right": [3]}
