"""Attack (session 46) on the notebook face: %%dataflow / %%datalog cells in IPython's in-process shell with
history on (as a kernel runs them), Ctrl-C while a cell's install waits for a busy scheduler, how views are
bound over the notebook's callables, where a %%datalog cell's runtime error points, and the widgets
(dashboard, live views, progress) over dataflows that are replaced, dropped and cancelled.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` assert the correct behaviour of a defect found here;
the others pin down behaviour that was probed and found right."""
from __future__ import annotations

import re
import sys
import threading
import time

import pandas as pd
import pytest

import kpgnb as kp
from kpgnb.engine import faults
from threads import until

from notebook_shell import ip, ok, quiet, run, run_numbered, shell, state  # noqa: F401 - fixtures

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("quiet")]

WAIT = 30  # seconds a widget refresh may take to show (a hang check, not a timing)


def rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


def edges():
    return pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})


def _main_thread_in(fn_name: str, filename_part: str, stop: threading.Event, timeout: float = 20.0) -> bool:
    """Whether the main thread enters ``fn_name`` of a file whose path contains ``filename_part`` (polled)."""
    main = threading.main_thread().ident
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        f = sys._current_frames().get(main)
        while f is not None:
            if f.f_code.co_name == fn_name and filename_part in f.f_code.co_filename:
                return True
            f = f.f_back
        time.sleep(0.01)
    return False


BASE = """%%dataflow base --inputs e=edges_df
g = e.arrange_by("src").export("g")
deg = g.count(by="src").view("deg")
"""


# -- 1. the cell's number in its error ---------------------------------------------------------------------------

def test_failing_cell_error_names_the_next_cells_number(ip, capsys):
    ip.user_ns["edges_df"] = edges()
    r0, out0 = run_numbered(ip, capsys, "1/0")
    assert f"Cell In[{r0.execution_count}], line 1" in out0  # IPython's own cells: their number
    r, out = run_numbered(ip, capsys, "%%dataflow bad --inputs e=edges_df\nx = 1\ny = e.select('nope')\n")
    assert not r.success and "no column 'nope'" in out, out
    assert r.execution_count == r0.execution_count + 1
    assert re.findall(r"Cell In\[(\d+)\], line (\d+)", out) == [(str(r.execution_count), "3")], out
    # a syntax error in the body and a function failing on its first batch name the same cell
    r, out = run_numbered(ip, capsys, "%%dataflow bad\nx = (\n")
    assert not r.success and f"Cell In[{r.execution_count}], line 2" in out, out
    r, out = run_numbered(ip, capsys, "%%dataflow late --inputs e=edges_df\n"
                                      "def f(src):\n"
                                      "    raise ValueError('first batch')\n"
                                      "v = e.map(f).view('v')\n")
    assert not r.success and "first batch" in out
    assert set(re.findall(r"Cell In\[(\d+)\]", out)) == {str(r.execution_count)}, out


# -- 2. views bound over the notebook's callables ----------------------------------------------------------------

@pytest.mark.parametrize("setup, name", [
    ("from numpy import log", "log"),
    ("import numba\n@numba.njit\ndef score(x):\n    return x + 1", "score"),
    ("class Meter:\n    def read(self):\n        return 1\nread = Meter().read", "read"),
])
def test_view_bound_over_a_notebook_function(ip, capsys, setup, name):
    ip.user_ns["edges_df"] = edges()
    ok(ip, capsys, setup)
    fn = ip.user_ns[name]
    out = ok(ip, capsys, f"%%dataflow fnv --inputs e=edges_df -o H\nv = e.view({name!r})\n")
    assert ip.user_ns[name] is fn, out  # README: not bound over a function of the notebook's; a line says so
    assert "not bound" in out, out
    assert rows(ip.user_ns["H"][name]) == [(1, 2), (2, 3), (3, 4)]


def test_views_not_bound_over_a_function_the_cell_defines_or_keywords(ip, capsys):
    """A plain function the cell itself defines keeps its name, a keyword gets none, and -o reaches both."""
    ip.user_ns["edges_df"] = edges()
    out = ok(ip, capsys, "%%dataflow own --inputs e=edges_df -o H\n"
                         "def dist(src):\n"
                         "    return {'d': src * 2}\n"
                         "a = e.map(dist).view('dist')\n"
                         "b = e.view('class')\n")
    assert callable(ip.user_ns["dist"]) and not isinstance(ip.user_ns["dist"], type(ip.user_ns["a"]))
    assert "view 'dist' is not bound" in out and "view 'class' has no notebook name" in out, out
    assert rows(ip.user_ns["H"]["dist"]) == [(2,), (4,), (6,)] and len(ip.user_ns["H"]["class"].to_pandas()) == 3
    assert "df" not in ip.user_ns and "e" not in ip.user_ns


# -- 3. Ctrl-C while the install waits for a busy scheduler ------------------------------------------------------

def test_ctrl_c_twice_during_a_cells_install_leaves_its_input_behind(ip, capsys):
    import _thread
    ip.user_ns["edges_df"] = edges()
    ip.user_ns["other_df"] = pd.DataFrame({"a": [1, 2]})
    ok(ip, capsys, BASE)
    gate, stop, interrupts = threading.Event(), threading.Event(), []
    faults.arm("operator_step", times=None, action=lambda: gate.wait(30))

    def interrupter():
        if _main_thread_in("_install", "runtime.py", stop):       # the cell waits for its install
            time.sleep(0.2)
            interrupts.append("install")
            _thread.interrupt_main()
            if _main_thread_in("drop_input", "runtime.py", stop):  # ... and, interrupted, for its clean-up
                time.sleep(0.2)
                interrupts.append("clean-up")
                _thread.interrupt_main()

    t = threading.Thread(target=interrupter, daemon=True)
    try:
        kp.input("edges_df").insert([(7, 8)])
        kp.input("edges_df").advance_to(2)
        assert until(lambda: faults.hits("operator_step") > 0, 20)  # a step of 'base' is running, held
        t.start()
        cell = "%%dataflow newone --inputs o=other_df\nnv = o.view('nv')\n"
        r, out = run(ip, capsys, cell)
        stop.set()
    finally:
        stop.set()
        gate.set()
        faults.disarm()
        t.join(30)
    if not interrupts:  # (the install did not wait for the step: nothing to interrupt)
        assert r.success, out
        return
    assert interrupts[0] == "install" and not r.success, (interrupts, out)
    kp.engine().wait("base", timeout=30)
    assert "newone" not in kp.engine().dataflows()
    # nothing of the interrupted cell is left: the same cell runs again and loads its frame afresh
    r, out = run(ip, capsys, cell)
    assert r.success, out
    assert rows(ip.user_ns["nv"]) == [(1,), (2,)]


# -- 4. %%datalog: where a runtime error points ------------------------------------------------------------------

def test_datalog_cell_runtime_error_names_run_cell_magic(ip, capsys):
    r, out = run(ip, capsys, "%%datalog d5 -o P\n"
                             "edge(2, 3).\n"
                             "r(x, s) :- edge(x, _), s = x * 9223372036854775807.\n")
    assert not r.success and "outside int64" in out and "line 3, column 28" in out, out
    assert state() == ({}, [], [])  # nothing installed, its facts' input dropped again
    assert "P" not in ip.user_ns and "edge" not in ip.user_ns
    assert "run_cell_magic" not in out and "get_ipython" not in out, out


def test_datalog_cell_no_wait_failure_then_wait_and_drop(ip, capsys):
    """--no-wait installs a program that then fails: %dataflow wait says why in one line, a wait for all
    lists it as not computing, and dropping it takes its facts' input with it."""
    ok(ip, capsys, "%%datalog ok1\nedge(2, 3).\nr(x, s) :- edge(x, _), s = x + 1.\n")
    ok(ip, capsys, "%%datalog d3 --no-wait -o Q\nedge(2, 3).\nq(x, s) :- edge(x, _), s = x * 9223372036854775807.\n")
    r, out = run(ip, capsys, "%dataflow wait d3")
    assert not r.success and "outside int64" in out and len(out.strip().splitlines()) == 1, out
    out = ok(ip, capsys, "%dataflow wait")
    assert "'ok1'" in out and "'d3' failed" in out, out
    assert sorted(kp.engine().inputs()) == ["d3#facts.edge", "ok1#facts.edge"]
    ok(ip, capsys, "%dataflow drop d3")
    assert sorted(kp.engine().inputs()) == ["ok1#facts.edge"] and kp.engine().dataflows() == {"ok1": "running"}
    assert rows(ip.user_ns["r"]) == [(2, 3)]


# -- 5. widgets over replaced, dropped and cancelled dataflows ---------------------------------------------------

def test_progress_follow_of_an_unknown_dataflow_says_dropped():
    from kpgnb import widgets
    with kp.Engine(workers=1) as eng:
        i = eng.input("i", ["x"], rows=[(1,)])
        i.advance_to(1)
        try:
            p = widgets.Progress.follow(eng, "nosuch")
        except kp.KpgnbError as e:
            assert "nosuch" in str(e)
        else:
            try:
                assert "dropped" not in p.label.value, p.label.value
            finally:
                p.close()


def test_live_views_and_dashboard_through_a_replace_a_drop_and_a_cancel(ip, capsys):
    from kpgnb import widgets
    ip.user_ns["edges_df"] = edges()
    ok(ip, capsys, BASE)
    ok(ip, capsys, "%%dataflow reader\nrv = df.use('g').count(by='src').view('rv')\n")
    old, new = widgets.LiveView(ip.user_ns["deg"]), None
    r, _ = run(ip, capsys, "%dataflow dashboard")
    dash = r.result
    try:
        assert old.state == "live" and old.rows == 3
        ok(ip, capsys, BASE.replace("--inputs", "--replace --inputs")
           .replace('e.arrange_by("src")', 'e.map(lambda src, dst: {"src": src * 10, "dst": dst}).arrange_by("src")'))
        assert until(lambda: old.state == "ended"), old.header.value
        assert "replaced" in old.header.value and "not updating" in old.header.value
        new = widgets.LiveView(ip.user_ns["deg"])
        dash.refresh()
        arrs = {(r["name"], r["dataflow"]) for r in dash.arrangements.rows}
        assert ("g", "base") in arrs and ("g~1", "base~1 (dropped)") in arrs, arrs
        assert {(d["name"], d["retired"]) for d in dash.frontiers.rows} >= {("base", False), ("base~1", True)}
        # the reader goes: so does the old arrangement; the new live view follows new epochs
        ok(ip, capsys, "%dataflow drop reader")
        kp.input("edges_df").insert([(5, 6)])
        kp.input("edges_df").advance_to(2)
        ok(ip, capsys, "%dataflow wait")
        assert until(lambda: new.rows == 4), new.table.value
        assert "<td>50</td>" in new.table.value
        dash.refresh()
        assert not any(r["name"] == "g~1" for r in dash.arrangements.rows)
        assert [d["name"] for d in dash.frontiers.rows] == ["base"]
        # a cancelled dataflow is no lagging dataflow for the dashboard's bar, and the header counts it apart
        ok(ip, capsys, "%dataflow cancel base")
        kp.input("edges_df").insert([(6, 7)])
        kp.input("edges_df").advance_to(3)
        assert until(lambda: new.state == "ended") and "cancelled" in new.header.value
        time.sleep(1.2)  # (the bar names a dataflow once it lags a second)
        dash.refresh()
        assert "all up to date" in dash.progress.label.value and "1 cancelled" in dash.header.value
        assert dash.updater.last_error is None, dash.updater.last_error
    finally:
        dash.close()
        for v in (old, new):
            if v is not None:
                v.close()
    assert until(lambda: not [t for t in threading.enumerate() if t.name == "kpgnb-widgets" and t.is_alive()])
