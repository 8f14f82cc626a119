"""Session 48 fixes, each with the test that failed before it."""
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb import graphs

WAIT = 60


def _rows(view):
    return sorted(map(tuple, view.to_pandas().itertuples(index=False)))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("memory", ["full", "jod", "drop"])
def test_keyed_edges_with_unread_columns_net_like_their_projection(workers, memory):
    """khop over an input keyed by src with a weight and a str label it does not read, read in place: the
    rows it reads are the edges' (src, dst) projection, netted. (0, 1) is held +1, +1, -1 by three weights
    (an edge); (1, 2) +1 and -1 by two (no edge, although each weighted row is there); the label column is
    str, which no message could read."""
    with kp.Engine(workers=workers) as eng:
        E = eng.input("edges", ["src", "dst", "w", "label"], dtypes=["int64", "int64", "int64", "str"], key="src")
        E.insert([(0, 1, 5, "a"), (0, 1, 7, "b"), (1, 2, 3, "c"), (2, 3, 1, "d")])
        E.remove([(0, 1, 9, "e"), (1, 2, 4, "f")])
        S = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("q") as df:
            v = graphs.khop(df.input("edges"), df.input("sources"), 3, memory=memory).view("o")
            b = graphs.bfs(df.input("edges"), df.input("sources").rename(source="node"), memory=memory).view("b")
        E.advance_to(1)
        S.advance_to(1)
        eng.wait(v, timeout=WAIT)
        eng.wait(b, timeout=WAIT)
        assert _rows(v) == [(0, 0, 0), (0, 1, 1)]
        assert _rows(b) == [(0, 0), (1, 1)]
        E.insert([(1, 2, 4, "f")])  # (1, 2) nets +1 now: 2 and 3 are reached
        E.advance_to(2)
        S.advance_to(2)
        eng.wait(v, timeout=WAIT)
        eng.wait(b, timeout=WAIT)
        assert _rows(v) == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3)]
        assert _rows(b) == [(0, 0), (1, 1), (2, 2), (3, 3)]
        by_src = [x for x in eng.stats()["arrangements"] if x["dataflow"] == "q" and x["key"] == ["src"]]
        assert by_src == []  # (the input's own arrangement is read)


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_sssp_reads_keyed_edges_with_a_label_in_place_and_equals_the_projection(memory):
    rows = [(0, 1, 2, "x"), (0, 1, 1, "y"), (1, 2, 5, "x"), (0, 2, 9, "z")]
    with kp.Engine(workers=2) as eng:
        ins = [eng.input("edges", ["src", "dst", "w", "label"], dtypes=["int64", "int64", "int64", "str"],
                         key="src", rows=rows),
               eng.input("plain", ["src", "dst", "w"], rows=[r[:3] for r in rows]),
               eng.input("sources", ["source"], rows=[(0,)])]
        with eng.dataflow("q") as df:
            a = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("a")
            p = graphs.sssp(df.input("plain"), df.input("sources"), memory=memory).view("p")
        for i in ins:
            i.advance_to(1)
        eng.wait(a, timeout=WAIT)
        eng.wait(p, timeout=WAIT)
        assert _rows(a) == _rows(p) == [(0, 0, 0), (0, 1, 1), (0, 2, 6)]


@pytest.mark.parametrize("workers", [1, 2])
def test_symmetric_ife_over_keyed_edges_nets_the_columns_it_reads(workers):
    """ife(symmetric=True) finds in-neighbours in the edges' own arrangement by src. Read in place, with a
    weight the message does not read, 0 - 1 is held +1 at w=5 and -1 at w=6 both ways: no edge, as in
    the (src, dst) projection, so node 1 keeps its own label."""
    with kp.Engine(workers=workers) as eng:
        E = eng.input("edges", ["src", "dst", "w"], key="src")
        E.insert([(0, 1, 5), (1, 0, 5)])
        E.remove([(0, 1, 6), (1, 0, 6)])
        N = eng.input("nodes", ["node", "label"], rows=[(0, 0), (1, 1)])
        with eng.dataflow("q") as df:
            outs = {m: df.input("nodes").ife(df.input("edges"), key="node", node="node", value="label",
                                             message=lambda label: label, agg="min", memory=m,
                                             symmetric=True, name=m).view(m)
                    for m in ("full", "jod")}
        E.advance_to(1)
        N.advance_to(1)
        for v in outs.values():
            eng.wait(v, timeout=WAIT)
            assert _rows(v) == [(0, 0), (1, 1)]


def test_a_column_named_self_can_be_renamed_on_plain_and_arranged_collections():
    """rename(**mapping) took ``self`` as its own first parameter: a column named self could not be
    renamed (TypeError: got multiple values for argument 'self'), so Datalog could not read it."""
    with kp.Engine(workers=1) as eng:
        S = eng.input("s", ["self", "b"], rows=[(1, 2)])
        with eng.dataflow("q") as df:
            a = df.input("s").rename(self="x").view("a")
            b = df.input("s").arrange_by("self").rename(self="y").view("b")
            c = df.input("s").map(lambda self, b: {"self": self + b}).rename(self="z").view("c")
        S.advance_to(1)
        for v in (a, b, c):
            eng.wait(v, timeout=WAIT)
        assert list(a.to_pandas().columns) == ["x", "b"] and _rows(a) == [(1, 2)]
        assert list(b.to_pandas().columns) == ["y", "b"] and _rows(b) == [(1, 2)]
        assert _rows(c) == [(3,)]


def test_a_subscription_whose_callback_raises_warns_and_keeps_the_error():
    """A subscription's thread swallowed the callback's exception (kept in ``sub.error`` only): nothing
    showed it. It warns now, in the subscriber's context."""
    import warnings as _w
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        with eng.dataflow("q") as df:
            v = df.input("x").view("v")
        x.advance_to(1)
        eng.wait(v, timeout=WAIT)
        with _w.catch_warnings(record=True) as caught:
            _w.simplefilter("always")

            def bad(changes):
                raise ValueError("boom")
            sub = v.subscribe(bad)
            sub.thread.join(WAIT)
        assert isinstance(sub.error, ValueError)
        assert any(issubclass(w.category, RuntimeWarning) and "boom" in str(w.message) and "'v'" in str(w.message)
                   for w in caught), [str(w.message) for w in caught]
        sub.close()


def test_a_trace_handle_opened_as_its_caller_was_interrupted_is_closed():
    """Ctrl-C reaching ``eng.trace(name)`` while its command waits behind a busy step: the handle the
    scheduler then opens (or opened just as the interrupt landed) is closed, not kept by the traceback,
    where it held the arrangement's compaction back."""
    import ctypes
    import threading
    import time
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        with eng.dataflow("p") as df:
            df.input("x").arrange_by("k").export("xs")
        gate, inside = threading.Event(), threading.Event()

        def hold(k):
            if (k == 7).any():
                inside.set()
                gate.wait(WAIT)
            return {"k": k}
        with eng.dataflow("busy") as df:
            df.input("x").map(hold).view("b")
        x.advance_to(1)
        eng.wait(timeout=WAIT)
        base = eng.catalog()["xs"]["readers"]
        for _ in range(3):
            gate.clear()
            inside.clear()
            x.insert([(7,)])
            x.advance_to(x.epoch + 1)
            assert inside.wait(WAIT)
            got = {}

            def opener(got=got):
                try:
                    got["h"] = eng.trace("xs")
                except KeyboardInterrupt as e:
                    got["r"] = "interrupted"
                    got["e"] = e  # (kept, as IPython keeps sys.last_traceback: its frames hold the command)
            t = threading.Thread(target=opener)
            t.start()
            time.sleep(0.1)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(KeyboardInterrupt))
            gate.set()
            t.join(WAIT)
            eng.wait(timeout=WAIT)
            assert got.get("r") == "interrupted" or "h" in got
            if "h" in got:  # (returned: the caller has it)
                assert eng.catalog()["xs"]["readers"] == base + 1
                got["h"].close()
                eng.wait(timeout=WAIT)
            assert eng.catalog()["xs"]["readers"] == base, eng.catalog()["xs"]
