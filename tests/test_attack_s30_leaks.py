"""Attack s30: unbounded growth of memory or internal state in a long-lived engine while the live data
stays constant (the engine lives for hours in a kernel: epochs stream in, dataflows, programs, goals,
followers and widgets come and go). Each test counts records, objects or registry entries, never
timings; thresholds are generous, so each fails only on growth that scales with epochs or installs."""
import gc

import numpy as np
import pytest

import kpgnb as kp


def _alive(typename: str) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == typename)


# -- followers ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["follower", "subscription"])
def test_a_closed_follower_stops_buffering_the_views_changes(how):
    """``Follower.close()`` ("stop following") only sets a flag: the follower stays registered with the
    view's trace (``Trace.listen`` holds it weakly, but the user still holds it: a notebook variable, or
    the Subscription object after ``sub.close()``), so every later epoch's change batches are appended to
    its queue, which nobody will ever read. Observed: +1 queued item and +2 Batch objects per epoch, for
    ever (2000 epochs: 2000 items, 4000 Batches kept alive beside the trace's own)."""
    with kp.Engine(workers=2) as eng:
        rows = eng.input("rows", ["k", "v"], rows=[(1, 1)])
        rows.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("rows").distinct().view("d")
        eng.wait(v)
        if how == "follower":
            f = v.follow()
            next(f)
            f.close()
        else:
            sub = v.subscribe(lambda changes: None)
            sub.close()
            f = sub.follower
        window = []

        def epoch(e):
            new = {"k": np.arange(20) % 5, "v": np.arange(20) + 100 * e}
            rows.insert(new)
            window.append(new)
            if len(window) > 2:
                rows.remove(window.pop(0))
            rows.advance_to(e)
            eng.wait(v)

        for e in range(2, 12):
            epoch(e)
        before = _alive("Batch")
        for e in range(12, 312):
            epoch(e)
        grown = _alive("Batch") - before
        assert len(v) == 41
        # nothing reads the closed follower: it must not keep 300 epochs of change batches
        assert len(f._items) <= 5, f"a closed follower queued {len(f._items)} items in 300 epochs"
        assert grown < 150, f"{grown} more Batch objects alive after 300 epochs of constant live data"


def test_an_unread_follower_of_an_unchanging_view_does_not_grow_per_epoch():
    """A follower that is read rarely (a dashboard thread, a notebook loop) queues an item for every
    append of the view's trace, also for epochs in which the view did not change at all: an empty
    ("changes", [], ...) entry per epoch, which ``__next__`` skips. Observed: +1 queued item (a tuple, a
    list, an Antichain: ~3 objects) per epoch for a view whose contents never change. The README says a
    slow reader gets "several epochs" per frame, not that an idle view costs memory per epoch."""
    with kp.Engine(workers=1) as eng:
        rows = eng.input("rows", ["k", "v"], rows=[(1, 1), (2, 2)])
        rows.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("rows").count(by="k").view("c")  # the counts never change below
        eng.wait(v)
        f = v.follow()
        next(f)  # the contents; then nothing is read for a while
        for e in range(2, 402):
            rows.insert([(1, 100 + e)])
            rows.remove([(1, 100 + e)])
            rows.advance_to(e)
            eng.wait(v)  # (epochs computed one at a time, as they arrive)
        assert len(f._items) < 50, f"{len(f._items)} queued items for 400 epochs that changed nothing"
        f.close()


# -- dropped dataflows -----------------------------------------------------------------------------------------

def _batch_rows() -> int:
    gc.collect()
    return sum(len(o) for o in gc.get_objects() if type(o).__name__ == "Batch")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_view_kept_after_its_dataflow_was_dropped_does_not_keep_the_dataflows_state(workers):
    """Dropping a dataflow releases its operators, but ``ReduceOp.release`` only releases its input: the
    reduction's output trace (``out_trace``, and its handle ``h_out``) stays on the operator, as does an
    IFE operator's state timeline. A View keeps its ViewOp, which keeps the graph and so every operator:
    whoever still holds a view of a dropped (or failed, cancelled, replaced) dataflow keeps every reduce
    output of it. In a notebook that is the rule, not the exception: ``%%dataflow`` binds views in the
    namespace, a view shown as a cell's result stays in ``Out``, a follower or an exception's traceback
    holds one. Observed: 5 dropped dataflows (count + distinct over 20,000 rows), their views kept: the
    reduce outputs' 100,000+ rows stay alive (a join + distinct of 2.5M rows: ~140 MB per kept view)."""
    n = 20_000
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"], rows={"k": np.arange(n) % 1000, "v": np.arange(n)})
        a.advance_to(1)
        with eng.dataflow("warm") as df:
            df.input("a").count(by="k").view("c")
        eng.wait()
        eng.drop("warm")
        before = _batch_rows()  # the input's rows
        kept = []
        for i in range(5):
            with eng.dataflow(f"d{i}") as df:
                x = df.input("a")
                c = x.count(by="k").view("c")
                d = x.distinct().view("d")
            eng.wait()
            assert len(d) == n and len(c) == 1000
            kept.append((c, d))  # as a notebook keeps them (variables, Out[...])
            eng.drop(f"d{i}")
            del df, x, c, d  # (the builder and collections keep the graph too)
        eng.wait()
        grown = _batch_rows() - before
        assert grown < n, f"{grown} rows of batches kept alive by views of 5 dropped dataflows"


# -- Datalog goals and programs ----------------------------------------------------------------------------

def test_a_program_does_not_keep_every_goal_ever_dropped():
    """``Program.goal()`` appends each goal to ``prog.goals`` and ``Goal.drop()`` never removes it, so a
    long-lived program that is asked goal after goal (each created, asked, dropped) keeps every dropped
    goal with its whole compiled dataflow (operators, schemas, sites, views). Observed: +1 Goal and ~310
    lists / ~90 tuples / ~40 Sites per goal, about 120 KB RSS per goal, for ever."""
    with kp.Engine(workers=1) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=[(i, (i * 3) % 20) for i in range(20)])
        edges.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edges(x, y).\ntc(x, y) :- tc(x, z), edges(z, y).",
                           inputs={"edges": "edges"}, name="p")
        eng.wait()
        for i in range(40):
            g = prog.goal("tc(?, _)")
            g.ask(i % 20)
            eng.wait(g.view)
            g.drop()
        del g
        assert sorted(eng.dataflows()) == ["p"]
        assert _alive("Goal") <= 2, f"{_alive('Goal')} Goal objects alive after 40 goals were dropped"
        assert len(prog.goals) <= 2


def test_dropping_a_datalog_program_by_name_leaves_no_inputs_behind():
    """A Datalog program with ground facts (or a rule without a positive atom) creates helper inputs
    ``NAME#facts.PRED`` / ``NAME#unit``; only ``prog.drop()`` drops them. ``eng.drop(NAME)`` (and so
    ``%dataflow drop NAME`` for a ``%%datalog NAME`` cell) uninstalls the dataflow but leaves the helper
    inputs and their arrangements behind: one input + one arrangement per install, for ever, and
    installing the program again under the same name fails with "an input named 'NAME#facts.base' exists
    already"."""
    text = "base(1). base(2).\nr(x) :- base(x).\nr(y) :- r(x), edges(x, y).\nk(1) :- edges(_, _).\n"
    with kp.Engine(workers=1) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=[(0, 1)])
        edges.advance_to(1)
        for _ in range(20):
            p = eng.datalog(text, inputs={"edges": "edges"})
            eng.wait(p["r"])
            eng.drop(p.name)
        assert list(eng.dataflows()) == []
        assert sorted(eng.inputs()) == ["edges"], sorted(eng.inputs())[:5]
        assert len(eng.stats()["arrangements"]) == 1
        for _ in range(2):  # the same name again
            p = eng.datalog(text, inputs={"edges": "edges"}, name="same")
            eng.wait(p["r"])
            eng.drop("same")


# -- strings -----------------------------------------------------------------------------------------------

# -- widgets and the extension ------------------------------------------------------------------------------

def test_closing_a_dashboard_releases_its_plots():
    """``Dashboard.close()`` closes its seven parts but not the other widgets it made (the section titles
    and the HBox holding the latency CCDF and the trace-size plot). ipywidgets keeps every widget that is
    not closed in its instance registry, so the HBox keeps the two closed plot widgets, and with them
    their matplotlib Figures, alive: +2 Figures, +26 registered widgets, ~3.2 MB RSS per dashboard opened
    and closed (e.g. ``%dataflow dashboard`` in a cell, closed later)."""
    pytest.importorskip("ipywidgets")
    import matplotlib.figure

    def figures():
        gc.collect()
        # type(), not isinstance: isinstance of a dead weakref.proxy (py4j keeps some) raises
        return sum(1 for o in gc.get_objects() if issubclass(type(o), matplotlib.figure.Figure))

    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        d = kp.dashboard(eng)
        d.close()
        del d
        before = figures()
        for _ in range(10):
            d = kp.dashboard(eng)
            d.close()
            del d
        grown = figures() - before
        assert grown <= 2, f"{grown} matplotlib Figures still alive after 10 dashboards were closed"


def test_load_and_unload_of_the_extension_leave_no_warmer_behind():
    """``%load_ext kpgnb`` makes a ``DataflowMagics`` (IPython's ``Magics.__init__`` appends it to
    ``shell.configurables``) holding the load's ``Warmer``; ``%unload_ext`` unregisters the magics but
    never takes it out of ``shell.configurables``, so every load/unload (``%reload_ext kpgnb`` included)
    keeps a DataflowMagics and a Warmer (its state, thread object, condition) for the life of the kernel."""
    import os

    from IPython.core.interactiveshell import InteractiveShell

    from kpgnb import extension, kernel

    os.environ.setdefault("KPGNB_PROGRESS", "0")
    sh = InteractiveShell.instance()
    was_loaded = bool(extension._state)
    if was_loaded:
        sh.run_line_magic("unload_ext", "kpgnb")
    try:
        before = _alive("DataflowMagics")
        for _ in range(8):
            sh.run_line_magic("load_ext", "kpgnb")
            sh.run_line_magic("unload_ext", "kpgnb")
        grown = _alive("DataflowMagics") - before
        assert grown <= 1, f"{grown} DataflowMagics (each with its Warmer) alive after 8 load/unload cycles"
    finally:
        kernel.close()
        if was_loaded:
            sh.run_line_magic("load_ext", "kpgnb")
