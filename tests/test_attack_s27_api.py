"""Public surface against the spec (DESIGN.md and the issue texts), written from the spec only.
Each test here failed on the commit it was written against; the docstring says what the spec says."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows(view):
    return sorted(map(tuple, view.to_pandas().itertuples(index=False)))


# --- notebook layer (issue 10) ---------------------------------------------------------------------

@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell
    from kpgnb import kernel
    sh = InteractiveShell.instance()
    kernel.close()
    sh.run_line_magic("load_ext", "kpgnb")
    kernel.configure(workers=1)
    yield sh
    sh.run_line_magic("unload_ext", "kpgnb")
    kernel.close()


def test_unload_ext_unregisters_every_magic(shell):
    """Issue 10: "`%unload_ext kpgnb` stops every engine thread and unregisters everything".
    The %%datalog cell magic (issue 13's, registered by the same extension) stays registered."""
    assert shell.find_cell_magic("datalog") is not None
    shell.run_line_magic("unload_ext", "kpgnb")
    try:
        assert shell.find_cell_magic("dataflow") is None
        assert shell.find_line_magic("dataflow") is None
        assert shell.find_cell_magic("datalog") is None, "%%datalog is still registered after %unload_ext kpgnb"
    finally:
        shell.run_line_magic("load_ext", "kpgnb")  # the fixture unloads again


def test_dataflow_cell_help_example_runs(shell):
    """Issue 10: `%%dataflow?` with real help. The example its help shows is
    `... .select(node="dst") ...`, and Collection.select takes no keywords: the example raises TypeError."""
    import pandas as pd
    doc = shell.find_cell_magic("dataflow").__doc__
    example = doc.split("Example::", 1)[1]
    lines = [ln for ln in example.splitlines() if ln.strip()]
    indent = len(lines[0]) - len(lines[0].lstrip())
    cell = []
    for ln in lines:
        if len(ln) - len(ln.lstrip()) < indent:
            break
        cell.append(ln[indent:])
    cell = "\n".join(cell)
    assert cell.startswith("%%dataflow reach --inputs edges=edges_df")
    eng = kp.engine()
    roots = eng.input("roots", ["node"], rows=[(1,)])
    roots.advance_to(1)
    shell.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    result = shell.run_cell(cell)
    assert result.success, f"the help's own example fails: {result.error_in_exec!r}"
    assert sorted(shell.user_ns["reach"].to_pandas()["node"]) == [1, 2, 3, 4]


# --- graphs (DESIGN section 4) ----------------------------------------------------------------------

@pytest.mark.parametrize("query", ["bfs", "reachable"])
@pytest.mark.parametrize("memory", ["jod", "drop"])
def test_recursive_graph_queries_take_memory(query, memory):
    """DESIGN 4: "`kpgnb.graphs` (bfs, reachable, wcc, scc, sssp, khop, pagerank, rpq; the recursive ones take
    `memory="full" | "jod" | "drop"`)". bfs and reachable are recursive (iterate + min / distinct) but take
    no memory= (TypeError)."""
    eng = kp.Engine(workers=1)
    try:
        edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3), (3, 1), (4, 5)])
        roots = eng.input("roots", ["node"], rows=[(1,)])
        edges.advance_to(1)
        roots.advance_to(1)
        fn = getattr(graphs, query)
        with eng.dataflow("g") as df:
            e, r = df.input("edges"), df.input("roots")
            full = fn(e, r).view("full")
            other = fn(e, r, memory=memory).view("other")
        eng.wait(full, timeout=60)
        eng.wait(other, timeout=60)
        assert rows(other) == rows(full)
    finally:
        eng.close()


# --- Datalog goals (issue 13) -----------------------------------------------------------------------

def test_goal_ask_leaves_the_users_input_epochs_alone():
    """Issue 13: `g.ask(5)` "adds a binding (an input collection of bound values)" and inputs "change at any
    time". ask moves the program's graph input `edges` to the next epoch behind the user's back, so the
    user's next `edges.insert(...); edges.advance_to(2)` silently seals nothing: (3, 4) never shows up in
    `tc` and no error is raised."""
    eng = kp.Engine(workers=1)
    try:
        edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3)])
        edges.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).",
                           inputs={"edge": "edges"}, name="graphq")
        eng.wait(prog["tc"], timeout=30)
        g = prog.goal("tc(?, _)")
        g.ask(1)
        eng.wait(g.view, timeout=30)
        assert rows(g.view) == [(1, 2), (1, 3)]
        edges.insert([(3, 4)])
        edges.advance_to(2)
        eng.wait(prog["tc"], timeout=30)
        eng.wait(g.view, timeout=30)
        assert (3, 4) in rows(prog["tc"]), f"edge (3, 4) inserted at epoch 1 is missing: input at epoch {edges.epoch}"
        assert rows(g.view) == [(1, 2), (1, 3), (1, 4)]
    finally:
        eng.close()


# --- engine and views ---------------------------------------------------------------------------------

def test_engine_refuses_zero_workers():
    """DESIGN 4 / issue 4: `kp.Engine(workers=W)` keeps W worker threads. workers=-1 raises
    UsageError("workers must be at least 1"), but workers=0 is taken as "not given" and silently becomes the
    core count."""
    with pytest.raises(kp.KpgnbError):
        eng = kp.Engine(workers=0)
        eng.close()


def test_follow_after_inputs_closed_gives_a_real_time():
    """Issue 8 item 5: `view.follow()` yields "first the contents at the view's current frontier" with `time`
    and `diff`. For a view whose inputs are all closed, the contents come with time -1, an epoch before the
    rows were ever inserted (they were inserted at epoch 0)."""
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["a"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v, timeout=30)
        x.close()
        eng.wait(v, timeout=30)
        frames = list(v.follow(timeout=10))
        assert frames
        times = set(np.concatenate([f["time"].to_numpy() for f in frames]).tolist())
        assert min(times) >= 0, f"follow() dates the contents at time {sorted(times)}"
    finally:
        eng.close()


def test_export_name_taken_is_a_usage_error():
    """README, Errors: "`UsageError` (also a `ValueError`: a name taken already, ...)". An export name taken
    already (and a view name taken in the same dataflow) raise SchemaError instead."""
    eng = kp.Engine(workers=1)
    try:
        i = eng.input("i", ["a"])
        i.advance_to(1)
        with eng.dataflow("d1") as df:
            df.input("i").arrange_by("a").export("x")
        with pytest.raises(kp.UsageError):
            with eng.dataflow("d2") as df:
                df.input("i").arrange_by("a").export("x")
    finally:
        eng.close()


# --- files and CLIs the issues name -----------------------------------------------------------------

def test_scale_out_tutorial_has_the_name_issue_15_gives():
    """Issue 15: "Docs: a README section and `notebooks/06-scale-out.ipynb`" (it was 07 for a while)."""
    assert os.path.exists(os.path.join(ROOT, "notebooks", "06-scale-out.ipynb"))


def test_bench_arrange_help_lists_quick():
    """Issue 8 ("Every `python -m bench.NAME` accepts `--quick`") and issue 12 (`--help`, `--quick`): the
    option works for bench.arrange, but `--help` exits before `--quick` is added, so its options list lacks
    it (every other benchmark lists it)."""
    out = subprocess.run([sys.executable, "-m", "bench.arrange", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0
    assert re.search(r"^\s+--quick\b", out.stdout, re.M), "bench.arrange --help does not list --quick"


def test_goal_lends_epochs_and_the_owner_keeps_writing():
    """Several asks and retracts move the graph input several epochs on; the owner's advance_to at or below
    that epoch seals its rows as the next epoch, once per call with rows buffered; beyond it, numbering
    resumes; an input no goal moved still refuses to go back."""
    eng = kp.Engine(workers=2)
    try:
        edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3)])
        other = eng.input("other", ["k"])
        edges.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).",
                           inputs={"edge": "edges"}, name="graphq")
        g = prog.goal("tc(?, _)")
        for x in (1, 2, 3):
            g.ask(x)
            eng.wait(g.view, timeout=30)
        g.retract(3)
        eng.wait(g.view, timeout=30)
        moved = edges.epoch
        assert moved > 1
        edges.advance_to(1)                      # nothing buffered: nothing to do, no error
        assert edges.epoch == moved
        edges.insert([(3, 4)])
        edges.advance_to(2)                      # the owner's numbering: its rows go in as the next epoch
        assert edges.epoch == moved + 1
        edges.insert([(4, 5)])
        edges.advance_to(3)
        eng.wait(prog["tc"], timeout=30)
        eng.wait(g.view, timeout=30)
        assert {(3, 4), (4, 5), (1, 5)} <= set(rows(prog["tc"]))
        assert rows(g.view) == [(1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]
        edges.advance_to(edges.epoch + 5)        # beyond: as usual
        with pytest.raises(kp.UsageError, match="epochs only advance"):
            edges.advance_to(edges.epoch - 1)
        other.advance_to(3)
        with pytest.raises(kp.UsageError, match="epochs only advance"):
            other.advance_to(2)
    finally:
        eng.close()
