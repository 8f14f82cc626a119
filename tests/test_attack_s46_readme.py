"""Attack (session 46): the README read top to bottom by a new user.

Every code block runs (tests/test_readme.py runs them already); this file checks the prose's concrete
claims with small experiments: what ``eng.wait(NAME)`` and ``%dataflow wait`` wait for now that a view's
wait reads only its own inputs, what Ctrl-C in ``eng.wait(view)`` cancels, the error classes the Errors
section promises for arguments of the wrong type, ``own_inputs``, view names, the kernel count of the
cold-start paragraph, and the memory modes' and Datalog's newly documented details.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import os
import re
import threading
import time

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from notebook_shell import run, shell  # noqa: F401 - shell is a fixture
from threads import async_raise

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
T = 20  # generous bound on any wait that should end (a gate left closed would otherwise hang a test)


def rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


def _gated():
    """A map function that blocks while ``gate`` is clear, and the gate (set)."""
    gate = threading.Event()
    gate.set()

    def fn(a):
        if len(a):
            gate.wait(T)
        return {"a": a}
    return fn, gate


def _two_view_dataflow(eng, fn):
    """Inputs x and s at epoch 1; dataflow ``f`` with view ``v`` (x through ``fn``) and view ``w`` (s)."""
    x = eng.input("x", ["a"], rows=[(1,)])
    s = eng.input("s", ["a"], rows=[(1,)])
    x.advance_to(1)
    s.advance_to(1)
    with eng.dataflow("f") as df:
        v = df.input("x").map(fn).view("v")
        w = df.input("s").view("w")
    eng.wait(v, timeout=T)
    eng.wait(w, timeout=T)
    return x, s, v, w


# -- eng.wait(NAME): "waits for every view of the dataflow" ---------------------------------------------

def test_wait_on_a_dataflow_name_waits_for_every_view():
    """README: ``eng.wait(view)`` waits for the epochs the view's own inputs were advanced to, and
    ``eng.wait(NAME)`` waits for every view of the dataflow. Dataflow ``f`` has a view of ``x`` (through a
    map that blocks) and a view of ``s``; ``x`` is advanced to 2, ``s`` stays at 1. ``eng.wait(v)`` times
    out, as it should (v cannot reach epoch 2 while its map blocks), but ``eng.wait("f")`` returns at once
    with ``v`` still at epoch 1: the goal is min(x's epoch, s's epoch) = 1 and the dataflow's frontier."""
    fn, gate = _gated()
    with kp.Engine(workers=1) as eng:
        try:
            x, s, v, w = _two_view_dataflow(eng, fn)
            gate.clear()
            x.insert([(2,)])
            x.advance_to(2)
            with pytest.raises(TimeoutError):
                eng.wait(v, timeout=0.3)
            with pytest.raises(TimeoutError):
                eng.wait("f", timeout=0.3)  # today: returns, with v.to_pandas().attrs["epoch"] == 1
        finally:
            gate.set()


def test_dataflow_wait_magic_names_a_dataflow_whose_view_is_behind(shell, capsys):  # noqa: F811
    """README: ``%dataflow wait [NAME] [--timeout S]`` waits until NAME has caught up with its inputs, and
    a timeout's error names every dataflow still behind. A dataflow with a view of an input advanced past
    where its (blocked) map got, beside a view of another input left behind, is reported up to date."""
    r, out = run(shell, capsys, "import threading, kpgnb as kp\n"
                                "s46r_gate = threading.Event(); s46r_gate.set()\n"
                                "def s46r_fn(a):\n"
                                "    if len(a): s46r_gate.wait(20)\n"
                                "    return {'a': a}\n"
                                "s46r_x = kp.engine().input('s46r_x', ['a'], rows=[(1,)]); s46r_x.advance_to(1)\n"
                                "s46r_s = kp.engine().input('s46r_s', ['a'], rows=[(1,)]); s46r_s.advance_to(1)")
    assert r.success, out
    try:
        r, out = run(shell, capsys, "%%dataflow s46r_f\n"
                                    "s46r_v = df.input('s46r_x').map(s46r_fn).view('s46r_v')\n"
                                    "s46r_w = df.input('s46r_s').view('s46r_w')")
        assert r.success, out
        r, out = run(shell, capsys, "s46r_gate.clear(); s46r_x.insert([(2,)]); s46r_x.advance_to(2)")
        assert r.success, out
        r, out = run(shell, capsys, "%dataflow wait s46r_f --timeout 0.5")
        assert not r.success and "up to date: " not in out, out  # (the refusal says "not up to date after")
        r, out = run(shell, capsys, "%dataflow wait --timeout 0.5")
        assert not r.success and "s46r_f" in out, out
    finally:
        shell.user_ns["s46r_gate"].set()
        eng = kp.engine()
        eng.wait(timeout=T)
        if "s46r_f" in eng.dataflows():
            eng.drop("s46r_f")
        for name in ("s46r_x", "s46r_s"):
            if name in eng.inputs():
                eng.drop_input(name)


# -- Ctrl-C in eng.wait(view) -----------------------------------------------------------------------------


def test_ctrl_c_in_wait_on_a_view_cancels_it_while_another_input_lags():
    """README: Ctrl-C in ``eng.wait(view)`` cancels the computation it was waiting for (its status becomes
    ``cancelled`` when the operator step running then ends). With the view's input at epoch 2 (its map
    blocked) and another input of the dataflow at epoch 1, the interrupted wait raises KeyboardInterrupt
    but the dataflow stays ``running`` (with both inputs at 2 it is cancelled, as promised)."""
    fn, gate = _gated()
    with kp.Engine(workers=1) as eng:
        try:
            x, s, v, w = _two_view_dataflow(eng, fn)
            gate.clear()
            x.insert([(2,)])
            x.advance_to(2)
            res, started = {}, threading.Event()

            def waiter():
                started.set()
                try:
                    eng.wait(v, timeout=T)
                    res["r"] = "returned"
                except BaseException as e:  # noqa: BLE001
                    res["r"] = type(e).__name__
            t = threading.Thread(target=waiter, daemon=True)
            t.start()
            started.wait(T)
            time.sleep(0.3)
            assert async_raise(t)
            t.join(T)
            assert res == {"r": "KeyboardInterrupt"}
        finally:
            gate.set()
        deadline = time.monotonic() + 5
        while eng.dataflows().get("f") == "running" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert eng.dataflows() == {"f": "cancelled"}


# -- arguments of the wrong type: ArgumentTypeError --------------------------------------------------------

def test_arguments_of_the_wrong_type_are_argument_type_errors():
    """README (Errors): an argument of the wrong type is ``ArgumentTypeError``, also a ``TypeError``.
    ``max_rounds='3'``, ``at='1'``, ``eng.wait(timeout='1')`` and ``eng.drop(view)`` are; a worker count
    given as a str and an input name given as an int are not."""
    with pytest.raises(kp.ArgumentTypeError):
        kp.Engine(workers="2")
    with pytest.raises(kp.ArgumentTypeError):
        kp.engine(workers="2")  # refused before the kernel's engine is made
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.ArgumentTypeError):
            eng.input(5, ["a"])


def test_own_inputs_given_input_sessions():
    """README: ``df.own_inputs(*inputs)`` in a dataflow's block, or ``Engine.own_inputs(dataflow, *inputs)``,
    drops those inputs with the dataflow. A user passes the sessions ``eng.input`` returned; they are
    either taken (and dropped with the dataflow) or refused as a wrong type (``ArgumentTypeError``, as
    ``eng.drop_input`` does), never reported missing while the message lists them."""
    with kp.Engine(workers=1) as eng:
        extra = eng.input("extra", ["a"], rows=[(1,)])
        extra.advance_to(1)
        try:
            with eng.dataflow("o") as df:
                df.input("extra").view("ov")
                df.own_inputs(extra)
        except kp.ArgumentTypeError:
            pass
        else:
            eng.drop("o")
            assert "extra" not in eng.inputs()
        other = eng.input("other", ["a"], rows=[(1,)])
        other.advance_to(1)
        with eng.dataflow("o2") as df:
            df.input("other").view("ov")
        try:
            eng.own_inputs("o2", other)
        except kp.ArgumentTypeError:
            pass
        else:
            eng.drop("o2")
            assert "other" not in eng.inputs()


# -- view names -------------------------------------------------------------------------------------------

def test_view_with_a_non_str_name_is_refused_at_definition():
    """Views are named (README: bound in the notebook by name; ``VAR["view"]``; a follower's frames; the
    dataflow list). ``view(5)`` installs a view named 5: a ``%%dataflow`` cell with it fails after its
    dataflow was installed (breaking "a cell that fails installs nothing") and ``%dataflow list`` then
    fails on ``", ".join`` of the view names. Expected: refused where it is written, an
    ``ArgumentTypeError`` (as eng.drop(5) is), with nothing installed."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"], rows=[(1,)])
        x.advance_to(1)
        with pytest.raises(kp.ArgumentTypeError):
            with eng.dataflow("q") as df:
                df.input("x").view(5)
        assert eng.dataflows() == {}


def test_notebook_cell_with_a_non_str_view_name_installs_nothing_and_list_works(shell, capsys):  # noqa: F811
    """README: a cell that fails installs nothing and changes nothing. A cell whose view is named 5 either
    installs and binds it under a line saying it has no notebook name, or fails with nothing installed;
    either way ``%dataflow list`` keeps working."""
    r, out = run(shell, capsys, "import kpgnb as kp\n"
                                "s46n_x = kp.engine().input('s46n_x', ['a'], rows=[(1,)]); s46n_x.advance_to(1)")
    assert r.success, out
    try:
        r, out = run(shell, capsys, "%%dataflow s46n_q\ns46n_v = df.input('s46n_x').view(5)")
        assert r.success or "s46n_q" not in kp.engine().dataflows(), out
        assert not isinstance(r.error_in_exec, AttributeError), out
        r, out = run(shell, capsys, "%dataflow list")
        assert r.success, out
    finally:
        eng = kp.engine()
        if "s46n_q" in eng.dataflows():
            eng.drop("s46n_q")
        if "s46n_x" in eng.inputs():
            eng.drop_input("s46n_x")


# -- the cold-start paragraph -----------------------------------------------------------------------------

def test_readme_kernel_count_and_families_match_the_warmup_list():
    """README: "Each kernel has one specialization (22 in all), grouped in families: `core` (every
    dataflow), `reduce`, `join`." ``kpgnb.engine.warmup`` (what ``warm_kernels`` compiles) has 29 core,
    2 join, 7 reduce and 6 ife kernels."""
    from kpgnb.engine import warmup
    text = open(README).read()
    m = re.search(r"one specialization \((\d+) in all\), grouped in families: (.*?)\.\n?", text, re.S)
    assert m, "the sentence is gone"
    counts = {f: len(warmup.kernel_signatures(f)) for f in warmup.FAMILIES}
    assert int(m.group(1)) == sum(counts.values()), counts
    for family, n in counts.items():
        if n:
            assert f"`{family}`" in m.group(2), (family, m.group(2))


# -- memory modes ------------------------------------------------------------------------------------------

def test_sssp_negative_weight_error_names_the_edge_plainly():
    """README: ``sssp`` checks every weight as it arrives: a negative one fails the dataflow, naming the
    edge. The message reads "got np.int64(-1) on the edge np.int64(1) -> np.int64(2)"."""
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=[(0, 1, 4), (1, 2, -1)])
        s = eng.input("s", ["source"], rows=[(0,)])
        e.advance_to(1)
        s.advance_to(1)
        with eng.dataflow("q") as df:
            v = graphs.sssp(df.input("e"), df.input("s"), memory="jod").view("v")
        with pytest.raises(kp.DataflowError) as info:
            eng.wait(v, timeout=T)
        msg = str(info.value)
        assert "1 -> 2" in msg and "-1" in msg and "np.int64" not in msg, msg


def test_bloom_bits_rounded_up_and_bloom_none_for_other_trackers_and_modes():
    """README: ``bloom_bits`` is rounded up to a power of two (1000 -> 1024); the default filter is at
    least 64 Kibit; ``eng.stats()["ife"]``'s ``bloom`` is None for the exact tracker, jod and full; every
    mode and tracker gives the same distances."""
    rng = np.random.default_rng(3)
    src, dst, w = rng.integers(0, 60, 400), rng.integers(0, 60, 400), rng.integers(1, 9, 400)
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows={"src": src, "dst": dst, "w": w})
        s = eng.input("s", ["source"], rows=[(0,), (5,)])
        e.advance_to(1)
        s.advance_to(1)
        with eng.dataflow("q") as df:
            ee, ss = df.input("e"), df.input("s")
            views = [graphs.sssp(ee, ss, memory="drop", drop=kp.Drop(p=0.5, tracker="bloom", bloom_bits=1000)),
                     graphs.sssp(ee, ss, memory="drop", drop=kp.Drop(p=0.5, tracker="bloom")),
                     graphs.sssp(ee, ss, memory="drop", drop=kp.Drop(p=0.5, tracker="exact")),
                     graphs.sssp(ee, ss, memory="jod"),
                     graphs.sssp(ee, ss, memory="full")]
            views = [c.view(f"v{i}") for i, c in enumerate(views)]
        for v in views:
            eng.wait(v, timeout=T)
        answers = [rows(v) for v in views]
        assert all(a == answers[0] for a in answers)
        stats = {r["operator"]: r for r in eng.stats()["ife"]}
        blooms = [stats[k]["bloom"] for k in sorted(stats, key=lambda k: (len(k), k))]
        assert blooms[0]["bits"] == 1024
        assert blooms[1]["bits"] >= 64 * 1024 and blooms[1]["bits"] & (blooms[1]["bits"] - 1) == 0
        assert 1 <= blooms[1]["hashes"] <= 8
        assert blooms[2:] == [None, None, None]


# -- Datalog: several rules of one aggregated predicate pool their bindings --------------------------------

def test_datalog_rules_of_one_aggregate_pool_their_bindings():
    """README: values two rules both find are two bindings: ``count`` counts them twice, ``countd`` once,
    ``sum``/``avg`` add over the pooled bindings; ``min`` takes the least of both."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 10), (1, 20), (2, 10)])
        b = eng.input("b", ["k", "v"], rows=[(1, 10), (1, 30)])
        a.advance_to(1)
        b.advance_to(1)
        prog = eng.datalog("""
c(k, count<v>) :- a(k, v).
c(k, count<v>) :- b(k, v).
d(k, countd<v>) :- a(k, v).
d(k, countd<v>) :- b(k, v).
s(k, sum<v>) :- a(k, v).
s(k, sum<v>) :- b(k, v).
m(k, avg<v>) :- a(k, v).
m(k, avg<v>) :- b(k, v).
""", name="pool")
        got = {}
        for p in "cdsm":
            eng.wait(prog[p], timeout=T)
            got[p] = rows(prog[p])
        assert got == {"c": [(1, 4), (2, 1)], "d": [(1, 3), (2, 1)], "s": [(1, 70), (2, 10)],
                       "m": [(1, 17.5), (2, 10.0)]}
        b.remove([(1, 10)])
        b.advance_to(2)
        a.advance_to(2)
        eng.wait("pool", timeout=T)
        assert rows(prog["c"]) == [(1, 3), (2, 1)] and rows(prog["d"]) == [(1, 3), (2, 1)]
