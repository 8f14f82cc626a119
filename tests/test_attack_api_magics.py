"""Attacks on the %%dataflow / %%datalog magics through IPython's own shell (in-process, as
tests/test_magics.py does): errors at the cell's line, help, replace, and what a cell leaves in the
notebook's namespace.

Tests named ``test_bug_*`` assert the documented behaviour for bugs an attack found (each failed before its fix)."""
import re

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

import kpgnb as kp
from kpgnb import kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    yield sh
    sh.run_line_magic("unload_ext", "kpgnb")


@pytest.fixture
def ip(shell, capsys):
    kernel.close()
    shell.run_line_magic("load_ext", "kpgnb")
    kernel.configure(workers=2)
    shell.user_ns.update(np=np, pd=pd, kp=kp)
    shell.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    capsys.readouterr()
    yield shell
    kernel.close()
    for k in [k for k in shell.user_ns if not k.startswith("_") and k not in ("In", "Out", "get_ipython", "exit", "quit")]:
        shell.user_ns.pop(k, None)


def run(sh, capsys, code):
    r = sh.run_cell(code)
    out = capsys.readouterr()
    return r, ANSI.sub("", out.out + out.err)


def test_bug_functions_defined_in_a_cell_see_the_notebook_globals(ip, capsys):
    """A function defined in a %%dataflow cell runs with a copy of the namespace as its globals: a later
    cell's assignments are invisible to it (NameError, or a stale value)."""
    r, out = run(ip, capsys, "%%dataflow r3 --inputs edges=edges_df\nfactor = 2\n"
                             "def helper(src, dst):\n    return {'q': src * factor}\n"
                             "def later():\n    return later_value\n"
                             "rv = edges.map(helper).view('rv')")
    assert r.success, out
    r, out = run(ip, capsys, "later_value = 42\nresult = later()")
    assert r.success, out
    assert ip.user_ns["result"] == 42
    run(ip, capsys, "factor = 10")
    assert ip.user_ns["helper"](np.array([1]), None)["q"].tolist() == [10]


def test_bug_del_in_a_successful_cell_deletes(ip, capsys):
    ip.user_ns["to_delete"] = 5
    r, out = run(ip, capsys, "%%dataflow d2\ndel to_delete\nv2 = df.input('edges_df').view('v2')"
                 if "edges_df" in kp.engine().inputs() else
                 "%%dataflow d2 --inputs e=edges_df\ndel to_delete\nv2 = e.view('v2')")
    assert r.success, out
    assert "to_delete" not in ip.user_ns


def test_bug_categorical_int_column_loads_as_int(ip, capsys):
    """--inputs infers a categorical column as str (CategoricalDtype.kind is 'O'), then refuses its ints
    with 'column 'src' is str but row 0 holds 1 (int)'."""
    ip.user_ns["cat_df"] = pd.DataFrame({"src": pd.Categorical([1, 2]), "dst": [2, 3]})
    r, out = run(ip, capsys, "%%dataflow c1 --inputs edges=cat_df\ncv = edges.view('cv')")
    assert r.success, out
    assert sorted(ip.user_ns["cv"].to_pandas()["src"].tolist()) == [1, 2]


def test_runtime_error_points_at_the_cell_line_and_installs_nothing(ip, capsys):
    before = run(ip, capsys, "x_before = 1")
    r, out = run(ip, capsys, "%%dataflow r1 --inputs edges=edges_df\nok = 1\n\ndef f(src, dst):\n"
                             "    if len(src):\n        raise ValueError('boom in f')\n    return {'q': src}\n"
                             "v = edges.map(f).view('rv')")
    assert not r.success
    assert re.search(r"Cell In\[\d+\], line 6, in f", out), out
    assert "ValueError: boom in f" in out and "failed on its first computation" in out
    assert "ok" not in ip.user_ns and "rv" not in ip.user_ns
    assert kp.engine().dataflows() == {} and "edges_df" not in kp.engine().inputs()


def test_error_in_a_function_from_an_earlier_cell_shows_that_function(ip, capsys):
    run(ip, capsys, "def ext(src, dst):\n    if len(src):\n        return {'q': src + int('x')}\n    return {'q': src}")
    r, out = run(ip, capsys, "%%dataflow r2 --inputs edges=edges_df\n\n\nv = edges.map(ext).view('rv')")
    assert not r.success
    assert re.search(r"Cell In\[\d+\], line 3, in ext", out), out
    assert "invalid literal for int()" in out


def test_syntax_error_help_and_replace(ip, capsys):
    r, out = run(ip, capsys, "%%dataflow d1 --inputs edges=edges_df\ng = edges.view('v1')\nx = (\n")
    assert not r.success and re.search(r"Cell In\[\d+\], line 3", out) and "SyntaxError" in out
    assert kp.engine().dataflows() == {}
    r, out = run(ip, capsys, "%%dataflow?")
    assert "--replace" in out and "--inputs" in out
    r, out = run(ip, capsys, "%%dataflow d1 --inputs edges=edges_df\nv1 = edges.view('v1')")
    assert r.success, out
    r, out = run(ip, capsys, "%%dataflow d1 --inputs edges=edges_df\nv1 = edges.view('v1')")
    assert not r.success and "--replace" in out
    r, out = run(ip, capsys, "%%dataflow d1 --inputs edges=edges_df --replace\n"
                             "v1 = edges.map(lambda src, dst: {'q': src + 100}).view('v1')")
    assert r.success, out
    assert sorted(ip.user_ns["v1"].to_pandas()["q"]) == [101, 102, 103]
    r, out = run(ip, capsys, "%%dataflow d3\nv3 = df.input('edges_df').view('v3')\nw = df.input('nope')")
    assert not r.success and re.search(r"line 3", out) and "no input named 'nope'" in out
    assert "v3" not in ip.user_ns


def test_datalog_cell_errors_name_the_cell_line_after_comments(ip, capsys):
    r, out = run(ip, capsys, "%%datalog g --inputs edge=edges_df\n/* a\n comment */\n// x\n"
                             "ok(x) :- edge(x, _).\nbad(x, w) :- edge(x, y).")
    assert not r.success and "line 6, column 8" in out
    assert kp.engine().dataflows() == {}
    r, out = run(ip, capsys, "%%datalog g2 --inputs edge=edges_df\nq(x) :- edge(x, y), y = 'a'.")
    assert not r.success and "line 2" in out and "compares int with str" in out
