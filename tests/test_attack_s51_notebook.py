"""Attack (session 51) on the notebook face: the ``%dataflow`` line magics on dataflows kept for their readers
(``NAME~k`` after a replace, a dropped producer), handles (``-o VAR``) on such dataflows, the options'
validation (``--inputs`` names, ``KPGNB_WORKERS``), errors of the magics themselves (one line, the notebook's
words rather than the engine API's), cell bodies that install or advance things themselves, a --replace failing
on its first batch, a failed scheduler seen through %dataflow list/config, Datalog cells (summary, re-runs, goals
dropped by the magic), Progress.follow on a kept dataflow, and README/cell flows (BFS, scc, mutual recursion,
Datalog, str reductions) at W = 1, 2 and 3 with retractions, checked against from-scratch Python references.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` assert the correct behaviour of a defect found here;
the others pin down behaviour that was probed and found right."""
from __future__ import annotations

import random
import re

import pytest

import kpgnb as kp
from kpgnb import kernel

from notebook_shell import ip, ok, quiet, run, shell  # noqa: F401 - fixtures

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("quiet")]


def rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


EDGES = "edges_df = pd.DataFrame({'src': [1, 2, 3, 1], 'dst': [2, 3, 4, 3]})"
BASE = "%%dataflow base --inputs e=edges_df -o hb\ng = e.arrange_by('src').export('g')\nb = e.view('b')\n"
READER = "%%dataflow reader -o hr\nr = df.use('g').as_collection().count(by='src').view('r')\n"


def _kept_base(ip, capsys, replace: bool):
    """base exporting g, reader reading g; then base replaced (base~1 kept) or dropped (base kept)."""
    ok(ip, capsys, EDGES)
    ok(ip, capsys, BASE)
    ok(ip, capsys, READER)
    if replace:
        ok(ip, capsys, BASE.replace("-o hb", "--replace -o hb2"))
        return "base~1"
    ok(ip, capsys, "%dataflow drop base")
    return "base"


# -- the magics on dataflows kept for their readers ----------------------------------------------------------
def test_bug_drop_of_a_kept_dataflow_names_the_engine_api_not_the_magics_option(ip, capsys):
    name = _kept_base(ip, capsys, replace=False)
    r, out = run(ip, capsys, f"%dataflow drop {name}")
    assert not r.success and "reader" in out, out                    # refused, naming the reader (holds)
    assert sorted(kp.engine().dataflows()) == ["reader"]             # nothing changed (holds)
    assert f"%dataflow drop {name} --cascade" in out and "eng.drop(" not in out, out


def test_bug_wait_refuses_a_kept_dataflow_that_list_shows_and_drop_takes(ip, capsys):
    name = _kept_base(ip, capsys, replace=True)
    listing = ok(ip, capsys, "%dataflow list")
    assert re.search(rf"^\s*{re.escape(name)}\s+dropped", listing, re.M), listing   # listed (holds)
    ok(ip, capsys, "kp.input('edges_df').insert([(5, 6)]); kp.input('edges_df').advance_to(2)")
    r, out = run(ip, capsys, f"%dataflow wait {name} --timeout 20")
    assert r.success and f"no dataflow named {name!r}" not in out, out
    assert rows(ip.user_ns["r"]) == [(1, 2), (2, 1), (3, 1), (5, 1)]


def test_drop_cascade_of_a_replaced_dataflows_kept_name_drops_its_readers(ip, capsys):
    name = _kept_base(ip, capsys, replace=True)
    out = ok(ip, capsys, f"%dataflow drop {name} --cascade")
    assert "'reader'" in out, out
    assert kp.engine().dataflows() == {"base": "running"} and sorted(kp.engine().catalog()) == ["g"]
    assert rows(ip.user_ns["b"]) == [(1, 2), (1, 3), (2, 3), (3, 4)]


# -- handles (-o VAR) ----------------------------------------------------------------------------------------
def test_bug_handle_cannot_cascade_drop_its_kept_dataflow(ip, capsys):
    _kept_base(ip, capsys, replace=False)
    hb = ip.user_ns["hb"]
    assert hb.status == "dropped"
    hb.drop(cascade=True)
    assert kp.engine().dataflows() == {} and kp.engine().catalog() == {}


def test_handle_of_a_cancelled_reader_raises_cancelled_and_drops(ip, capsys):
    _kept_base(ip, capsys, replace=False)
    hr = ip.user_ns["hr"]
    hr.cancel()
    assert hr.status == "cancelled"
    with pytest.raises(kp.Cancelled):
        hr.wait(timeout=10)
    hr.drop()
    assert hr.status == "dropped" and kp.engine().dataflows() == {} and kp.engine().catalog() == {}
    assert sorted(kp.engine().inputs()) == ["edges_df"]


# -- the options -------------------------------------------------------------------------------------------
def test_bug_inputs_under_a_keyword_name_are_accepted(ip, capsys):
    ok(ip, capsys, EDGES)
    r, out = run(ip, capsys, "%%dataflow kw --inputs class=edges_df\nv = df.input('edges_df').view('v')\n")
    assert not r.success and "class" in out and "keyword" in out, out
    assert kp.engine().dataflows() == {} and kp.engine().inputs() == {}


def test_bug_bad_kpgnb_workers_shows_the_magics_frames(ip, capsys, monkeypatch):
    kernel.close()
    monkeypatch.setattr(kernel, "_workers", None)
    monkeypatch.setenv("KPGNB_WORKERS", "zero")
    r, out = run(ip, capsys, "%dataflow list")
    assert not r.success and "KPGNB_WORKERS" in out and "kernel.py" not in out, out   # (holds)
    for cell in ("%%dataflow x\nv = 1\n", "%%datalog p\nedge(1, 2).\n"):
        r, out = run(ip, capsys, cell)
        assert not r.success and "KPGNB_WORKERS must be a positive integer" in out, out
        assert "run_cell_magic" not in out and "magics.py" not in out and "kernel.py" not in out, out
    monkeypatch.delenv("KPGNB_WORKERS")
    ok(ip, capsys, "%dataflow config --workers 2")


# -- README commands as written, W = 1, 2, 3, retractions ------------------------------------------------------
def _bfs(edges, roots):
    dist = {r: 0 for r in roots}
    frontier = list(roots)
    while frontier:
        nxt = []
        for u in frontier:
            for (s, d) in edges:
                if s == u and d not in dist:
                    dist[d] = dist[u] + 1
                    nxt.append(d)
        frontier = nxt
    return sorted(dist.items())


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_readme_notebook_cells_with_changes_match_a_reference(ip, capsys, workers):
    ok(ip, capsys, f"%dataflow config --restart --workers {workers}")
    # the README's "In a notebook" cells, as written
    ok(ip, capsys, "import pandas as pd, kpgnb as kp\n"
                   "edges_df = pd.DataFrame({\"src\": [1, 2, 3], \"dst\": [2, 3, 4]})\n"
                   "roots = kp.engine().input(\"roots\", [\"node\"])      # the kernel's engine\n"
                   "roots.insert([1]); roots.advance_to(1)")
    ok(ip, capsys, "%%dataflow bfs --inputs edges=edges_df\nfrom kpgnb.graphs import bfs\n"
                   "g = edges.arrange_by(\"src\").export(\"edges_by_src\")\n"
                   "dist = bfs(g, df.input(\"roots\")).view(\"dist\")\n")
    assert kp.engine().workers == workers
    edges, roots = {(1, 2), (2, 3), (3, 4)}, {1}
    assert rows(ip.user_ns["dist"]) == _bfs(edges, roots)
    ok(ip, capsys, "%%dataflow deg\ndeg = df.use('edges_by_src').as_collection().count(by='src').view('deg')\n")
    rng = random.Random(51 + workers)
    for epoch in range(2, 7):
        add = {(rng.randrange(1, 8), rng.randrange(1, 8)) for _ in range(3)} - edges
        gone = set(rng.sample(sorted(edges), min(2, len(edges))))
        new_roots = {rng.randrange(1, 8)} - roots
        ip.user_ns.update(_add=sorted(add), _gone=sorted(gone), _roots=sorted((r,) for r in new_roots))
        ok(ip, capsys, "kp.input('edges_df').insert(_add); kp.input('edges_df').remove(_gone)\n"
                       f"roots.insert(_roots)\nkp.input('edges_df').advance_to({epoch}); roots.advance_to({epoch})")
        edges = (edges | add) - gone
        roots |= new_roots
        ok(ip, capsys, "%dataflow wait --timeout 60")
        assert rows(ip.user_ns["dist"]) == _bfs(edges, roots), epoch
        degree = {}
        for s, _ in edges:
            degree[s] = degree.get(s, 0) + 1
        assert rows(ip.user_ns["deg"]) == sorted(degree.items()), epoch


# -- a failing cell changes nothing ---------------------------------------------------------------------------
def test_bug_failing_cell_leaves_a_dataflow_its_body_installed(ip, capsys):
    ok(ip, capsys, "t = kp.engine().input('t', ['a']); t.insert([1, 2]); t.advance_to(1)")
    r, out = run(ip, capsys, "%%dataflow outer\nwith kp.engine().dataflow('inner') as d2:\n"
                             "    iv = d2.input('t').view('iv')\nov = df.input('t').view('ov')\n"
                             "raise RuntimeError('boom')\n")
    assert not r.success and "boom" in out and "nothing was installed" in out, out
    assert "iv" not in ip.user_ns and "ov" not in ip.user_ns      # the names go back (holds)
    assert kp.engine().dataflows() == {}, kp.engine().dataflows()  # ... but 'inner' runs on, unreachable


# -- what a %%datalog cell says it exports --------------------------------------------------------------------
def test_bug_datalog_cell_summary_omits_the_input_exports(ip, capsys):
    ok(ip, capsys, EDGES)
    out = ok(ip, capsys, "%%datalog g --inputs edge=edges_df\ntc(x, y) :- edge(x, y).\n"
                         "tc(x, y) :- tc(x, z), edge(z, y).\n")
    exported = sorted(e for e, a in kp.engine().catalog().items() if a["dataflow"] == "g")
    assert exported == ["g.edge", "g.edge[src]", "g.tc"], exported
    summary = re.search(r"exports: (.*)$", out, re.M).group(1)
    assert sorted(summary.split(", ")) == exported, out


# -- --inputs values the cell cannot take ---------------------------------------------------------------------
@pytest.mark.parametrize("value, what", [("{}", "no columns"), ("{1: [1, 2]}", "of type int")])
def test_bug_a_dict_that_is_not_a_table_is_refused_without_saying_why(ip, capsys, value, what):
    ok(ip, capsys, f"d = {value}")
    r, out = run(ip, capsys, "%%dataflow x --inputs e=d\nv = e.view('v')\n")
    assert not r.success and kp.engine().dataflows() == {} and kp.engine().inputs() == {}   # (holds)
    assert "d is a dict; expected" not in out and what in out, out


@pytest.mark.parametrize("value, expect", [
    ("{'a': np.arange(3), 'b': np.arange(4)}", "different lengths: a=3, b=4"),
    ("{'a': 1, 'b': 2}", "column 'a' of the dict must be a sequence"),
    ("{'a': [1, None]}", "row 1 holds None"),
    ("{'a b': [1]}", "'a b' must be a Python identifier"),
    ("pd.Series([1, 2], name='a')", "d is a Series"),
    ("pd.DataFrame({'a': pd.to_datetime(['2020-01-01'])})", "datetime64"),
])
def test_bad_inputs_values_are_named_and_leave_nothing(ip, capsys, value, expect):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, "%%dataflow keep --inputs e=edges_df\nkept = e.view('kept')\n")
    ok(ip, capsys, f"d = {value}")
    r, out = run(ip, capsys, "%%dataflow x --inputs e=d\nv = e.view('v')\n")
    assert not r.success and expect in out and "--inputs: d" in out, out
    assert kp.engine().dataflows() == {"keep": "running"} and sorted(kp.engine().inputs()) == ["edges_df"]
    assert rows(ip.user_ns["kept"]) == [(1, 2), (1, 3), (2, 3), (3, 4)] and "v" not in ip.user_ns


# -- re-running a %%datalog cell ------------------------------------------------------------------------------
def test_bug_datalog_cell_clobbers_the_frame_its_inputs_read(ip, capsys):
    ok(ip, capsys, "tc = pd.DataFrame({'src': [1, 2, 3], 'dst': [2, 3, 4]})")
    # (the relation's view is not bound over the frame the cell reads: it stays, and the program's handle
    # holds the relation)
    cell = "%%datalog g --inputs edge=tc -o G\ntc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n"
    ok(ip, capsys, cell)
    ok(ip, capsys, "%dataflow drop g")
    r, out = run(ip, capsys, cell)    # the notebook run again from this cell
    assert r.success, out
    assert type(ip.user_ns["tc"]).__name__ == "DataFrame", out
    assert rows(ip.user_ns["G"]["tc"]) == [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]


def _scc_edges(edges):
    """Edges whose endpoints are in one strongly connected component (from scratch: mutual reachability)."""
    nodes = {n for e in edges for n in e}
    reach = {n: {n} for n in nodes}
    changed = True
    while changed:
        changed = False
        for s, d in edges:
            new = reach[d] - reach[s]
            if new:
                reach[s] |= new
                changed = True
    return sorted((s, d) for s, d in edges if s in reach[d] and d in reach[s])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_scc_in_a_cell_over_many_epochs_matches_a_reference(ip, capsys, workers):
    """Doubly nested loops (partially ordered times) with retractions, from a cell, at W workers."""
    ok(ip, capsys, f"%dataflow config --restart --workers {workers}")
    rng = random.Random(510 + workers)
    edges = {(rng.randrange(6), rng.randrange(6)) for _ in range(9)}
    ip.user_ns["g_df"] = __import__("pandas").DataFrame(sorted(edges), columns=["src", "dst"])
    ok(ip, capsys, "%%dataflow comps --inputs e=g_df\nfrom kpgnb.graphs import scc\ncyc = scc(e).view('cyc')\n")
    assert rows(ip.user_ns["cyc"]) == _scc_edges(edges)
    for epoch in range(2, 6):
        add = {(rng.randrange(6), rng.randrange(6)) for _ in range(2)} - edges
        gone = set(rng.sample(sorted(edges), 2))
        ip.user_ns.update(_add=sorted(add), _gone=sorted(gone))
        ok(ip, capsys, f"e = kp.input('g_df'); e.insert(_add); e.remove(_gone); e.advance_to({epoch})")
        edges = (edges | add) - gone
        ok(ip, capsys, "%dataflow wait comps --timeout 60")
        assert rows(ip.user_ns["cyc"]) == _scc_edges(edges), (epoch, sorted(edges))


# -- a --replace whose new version fails on its first batch ---------------------------------------------------
def test_replace_failing_on_its_first_batch_keeps_the_readers_export_maintained(ip, capsys):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, BASE)
    ok(ip, capsys, READER)
    ok(ip, capsys, "def boom(src):\n    raise ValueError('first batch')\n")
    failing = BASE.replace("-o hb", "--replace -o hb2").replace("e.arrange_by", "e.filter(boom).arrange_by")
    r, out = run(ip, capsys, failing)
    assert not r.success and "first batch" in out and "the dataflow it replaced is gone" in out, out
    assert kp.engine().dataflows() == {"reader": "running"} and sorted(kp.engine().catalog()) == ["g~1"]
    assert "hb2" not in ip.user_ns and ip.user_ns["hb"].status == "replaced"
    ok(ip, capsys, "kp.input('edges_df').remove([(1, 2)]); kp.input('edges_df').insert([(3, 9)]); "
                   "kp.input('edges_df').advance_to(2)")
    ok(ip, capsys, "%dataflow wait --timeout 20")
    assert rows(ip.user_ns["r"]) == [(1, 1), (2, 1), (3, 2)]


def test_bug_view_of_a_replaced_dataflow_points_to_a_new_one_that_failed(ip, capsys):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, BASE)
    ok(ip, capsys, "def boom(src):\n    raise ValueError('first batch')\n")
    r, out = run(ip, capsys, BASE.replace("-o hb", "--replace").replace("e.arrange_by", "e.filter(boom).arrange_by"))
    assert not r.success and kp.engine().dataflows() == {}
    with pytest.raises(kp.UsageError) as e:
        ip.user_ns["b"].to_pandas()
    assert "read the new one's view" not in str(e.value), str(e.value)


# -- the engine's scheduler failed -----------------------------------------------------------------------------
def test_bug_list_and_config_hide_a_failed_scheduler(ip, capsys):
    import time

    from kpgnb.engine import faults
    ok(ip, capsys, EDGES)
    ok(ip, capsys, "%%dataflow base --inputs e=edges_df\nb = e.count(by='src').view('b')\n")
    faults.arm("scheduler", times=1)
    ok(ip, capsys, "kp.input('edges_df').insert([(7, 8)]); kp.input('edges_df').advance_to(2)")
    deadline = time.monotonic() + 10
    while kp.engine().stats()["error"] is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "scheduler failed" in kp.engine().stats()["error"]
    r, out = run(ip, capsys, "%dataflow wait --timeout 5")
    assert not r.success and "scheduler failed" in out, out          # the wait says so (holds)
    listing = ok(ip, capsys, "%dataflow list")
    config = ok(ip, capsys, "%dataflow config")
    assert "scheduler failed" in listing, listing
    assert "scheduler failed" in config and "running with" not in config, config


# -- %dataflow wait with a short timeout ------------------------------------------------------------------------
def test_bug_wait_with_a_short_timeout_calls_an_up_to_date_dataflow_behind(ip, capsys):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, "%%dataflow base --inputs e=edges_df\nb = e.count(by='src').view('b')\n")
    kp.engine().wait("base", timeout=1e-6)      # up to date: the engine's own wait returns at once (holds)
    r, out = run(ip, capsys, "%dataflow wait base --timeout 0.000001")
    assert r.success and "up to date: 'base'" in out, out


def _closure(edges):
    tc = set(edges)
    while True:
        more = {(a, d) for (a, b) in tc for (c, d) in tc if b == c} - tc
        if not more:
            return sorted(tc)
        tc |= more


@pytest.mark.parametrize("workers", [1, 3])
def test_readme_mutual_recursion_in_a_cell_with_retractions(ip, capsys, workers):
    ok(ip, capsys, f"%dataflow config --restart --workers {workers}")
    rng = random.Random(5100 + workers)
    edges = {(rng.randrange(7), rng.randrange(7)) for _ in range(8)}
    ip.user_ns["_rows"] = sorted(edges)
    ok(ip, capsys, "edges = kp.engine().input('edges', ['src', 'dst']); edges.insert(_rows); edges.advance_to(1)")
    ok(ip, capsys, "%%dataflow loops\n"                 # the README's block, as a cell
                   "loop = df.loop()\n"
                   "a = kp.Variable(loop, df.input(\"edges\"))\n"
                   "b = kp.Variable(loop, df.input(\"edges\"))\n"
                   "a_next = a.set(a.concat(b).distinct())\n"
                   "b.set(b.join(a, left_on=\"dst\", right_on=\"src\").select(\"src\", \"dst_right\")"
                   ".rename(dst_right=\"dst\")\n"
                   "       .concat(b).distinct())\n"
                   "both = a_next.leave().view(\"closure\")\n")
    assert rows(ip.user_ns["closure"]) == _closure(edges)
    for epoch in range(2, 6):
        add = {(rng.randrange(7), rng.randrange(7)) for _ in range(2)} - edges
        gone = set(rng.sample(sorted(edges), 2))
        ip.user_ns.update(_add=sorted(add), _gone=sorted(gone))
        ok(ip, capsys, f"edges.insert(_add); edges.remove(_gone); edges.advance_to({epoch})")
        edges = (edges | add) - gone
        ok(ip, capsys, "%dataflow wait loops --timeout 60")
        assert rows(ip.user_ns["closure"]) == _closure(edges), epoch


def test_bug_drop_does_not_say_the_dataflow_is_kept_for_its_readers(ip, capsys):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, BASE)
    ok(ip, capsys, READER)
    out = ok(ip, capsys, "%dataflow drop base")
    assert "kept while its exports are read" in ok(ip, capsys, "%dataflow list")   # (holds)
    assert "kept" in out and "'reader'" in out, out


# -- a body that moves the input its cell loads -------------------------------------------------------------------
def test_bug_body_advancing_the_loaded_input_fails_after_installing(ip, capsys):
    ok(ip, capsys, EDGES)
    r, out = run(ip, capsys, "%%dataflow base --inputs e=edges_df -o hb\nkp.input('edges_df').advance_to(3)\n"
                             "b = e.count(by='src').view('b')\n")
    assert r.success, out
    assert "session.py" not in out and "hb" in ip.user_ns
    assert rows(ip.user_ns["b"]) == [(1, 2), (2, 1), (3, 1)]


def _datalog_reference(edges):
    tc = _closure(edges)
    nodes = sorted({n for e in edges for n in e})
    cnt = {}
    for x, _ in tc:
        cnt[x] = cnt.get(x, 0) + 1
    lone = sorted((n,) for n in nodes if (n, n) not in set(tc))
    return tc, sorted(cnt.items()), lone


@pytest.mark.parametrize("workers", [1, 3])
def test_datalog_cell_over_changing_edges_matches_a_reference(ip, capsys, workers):
    ok(ip, capsys, f"%dataflow config --restart --workers {workers}")
    rng = random.Random(51000 + workers)
    edges = {(rng.randrange(6), rng.randrange(6)) for _ in range(7)}
    ip.user_ns["_rows"] = sorted(edges)
    ok(ip, capsys, "edge = kp.engine().input('edge', ['src', 'dst']); edge.insert(_rows); edge.advance_to(1)")
    ok(ip, capsys, "%%datalog g -o prog\ntc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n"
                   "n(x) :- edge(x, _).\nn(y) :- edge(_, y).\ncnt(x, count<y>) :- tc(x, y).\n"
                   "lone(x) :- n(x), !tc(x, x).\n")
    for epoch in range(2, 6):
        tc, cnt, lone = _datalog_reference(edges)
        assert (rows(ip.user_ns["tc"]), rows(ip.user_ns["cnt"]), rows(ip.user_ns["lone"])) == (tc, cnt, lone), epoch
        add = {(rng.randrange(6), rng.randrange(6)) for _ in range(2)} - edges
        gone = set(rng.sample(sorted(edges), 2))
        ip.user_ns.update(_add=sorted(add), _gone=sorted(gone))
        ok(ip, capsys, f"edge.insert(_add); edge.remove(_gone); edge.advance_to({epoch})")
        edges = (edges | add) - gone
        ok(ip, capsys, "%dataflow wait g --timeout 60")
    tc, cnt, lone = _datalog_reference(edges)
    assert (rows(ip.user_ns["tc"]), rows(ip.user_ns["cnt"]), rows(ip.user_ns["lone"])) == (tc, cnt, lone)


# -- a collection of an earlier cell ------------------------------------------------------------------------------
def test_bug_collection_of_an_earlier_cell_gets_an_engine_api_hint(ip, capsys):
    ok(ip, capsys, "t = kp.engine().input('t', ['a']); t.insert([1, 2]); t.advance_to(1)")
    ok(ip, capsys, "%%dataflow base\ncoll = df.input('t')\nb = coll.view('b')\n")
    r, out = run(ip, capsys, "%%dataflow other\nw = coll.count(by='a').view('w')\n")
    assert not r.success and "'base'" in out and kp.engine().dataflows() == {"base": "running"}, out   # (holds)
    assert "eng.dataflow(" not in out and "df.use" in out, out


def test_bug_progress_cannot_follow_a_kept_dataflow_the_dashboard_lists(ip, capsys):
    from kpgnb.widgets import Progress
    name = _kept_base(ip, capsys, replace=True)
    dash = kp.dashboard()
    try:
        assert name in [r["name"] for r in dash.frontiers.rows]      # (holds)
    finally:
        dash.close()
    p = Progress.follow(kp.engine(), name)
    try:
        assert p.state == "finished", p.label.value
    finally:
        p.close()


# -- a goal whose dataflow %dataflow drop removed --------------------------------------------------------------
def test_bug_ask_on_a_dropped_goal_names_an_internal_input(ip, capsys):
    ok(ip, capsys, EDGES)
    ok(ip, capsys, "%%datalog g --inputs edge=edges_df -o prog\ntc(x, y) :- edge(x, y).\n"
                   "tc(x, y) :- tc(x, z), edge(z, y).\n")
    ok(ip, capsys, "gl = prog.goal('tc(?, _)'); gl.ask(1); kp.engine().wait(gl.view, timeout=10)")
    name = ip.user_ns["gl"].view.dataflow
    ok(ip, capsys, f"%dataflow drop {name}")
    r, out = run(ip, capsys, "gl.ask(2)")
    assert not r.success and isinstance(r.error_in_exec, kp.KpgnbError), out          # refused (holds)
    assert "#asked" not in out and "goal" in str(r.error_in_exec), out


@pytest.mark.parametrize("workers", [1, 3])
def test_string_frame_cell_with_retractions_matches_a_reference(ip, capsys, workers):
    ok(ip, capsys, f"%dataflow config --restart --workers {workers}")
    rng = random.Random(5151 + workers)
    names = ["ann", "bob", "cy", "Dé", "émile", "z"]
    clicks = [(rng.choice(names), rng.randrange(4)) for _ in range(12)]
    ip.user_ns["clicks_df"] = __import__("pandas").DataFrame(clicks, columns=["user", "page"])
    ok(ip, capsys, "%%dataflow per_user --inputs c=clicks_df\n"
                   "n = c.count(by='user').view('n')\nfirst = c.min(by='user', col='page').view('first')\n"
                   "top = c.top_k(by='page', order_by='user', k=1).view('top')\n")
    bag = list(clicks)
    for epoch in range(2, 5):
        gone = rng.sample(bag, 3)
        add = [(rng.choice(names), rng.randrange(4)) for _ in range(2)]
        for g in gone:
            bag.remove(g)
        bag += add
        ip.user_ns.update(_add=add, _gone=gone)
        ok(ip, capsys, f"i = kp.input('clicks_df'); i.remove(_gone); i.insert(_add); i.advance_to({epoch})")
        ok(ip, capsys, "%dataflow wait per_user --timeout 60")
        count, low, top = {}, {}, {}
        for u, p in bag:
            count[u] = count.get(u, 0) + 1
            low[u] = min(low.get(u, p), p)
            top[p] = max(top.get(p, u), u)          # top_k: the largest order_by (descending)
        assert rows(ip.user_ns["n"]) == sorted(count.items()), epoch
        assert rows(ip.user_ns["first"]) == sorted(low.items()), epoch
        assert rows(ip.user_ns["top"]) == sorted(top.items()), epoch
