"""An input keyed by its leading columns (``eng.input(..., key=...)``) keeps its rows arranged by them, so
a join or a graph query on those columns reads the input's own arrangement instead of indexing the rows
again (K-Pg: the input arranged once, shared). Checked against the same programs on an input arranged
by all its columns: random insert/retract streams, dataflows installed late (the input's history),
``at=`` reads, W = 1, 2, 3; and that bad keys are refused, leaving the engine as it was."""
from __future__ import annotations

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.errors import SchemaError
from reference import random_edge_edits, shortest_distances


def _rows(view, at=None) -> list:
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


def _arranges(eng, dataflow: str) -> int:
    return sum(o["kind"] == "arrange" for o in eng.operator_stats(dataflow))


def _programs(df, edges):
    """Queries on the edges: a join on src (the pairs of edges leaving a node, the right side renamed),
    a BFS, a count by src, a distinct."""
    e = df.input(edges)
    fan = e.join(e.rename(src="from", dst="other"), left_on="src", right_on="from").select("dst", "other")
    return {"fan": fan.view("fan", history=50), "deg": e.count(by="src").view("deg", history=50),
            "set": e.distinct().view("set", history=50),
            "bfs": graphs.bfs(e, df.input("roots")).view("bfs", history=50)}


def _reference(edges: dict, roots) -> dict:
    rows = [k for k, m in edges.items() for _ in range(m)]
    fan = sorted((b, d) for (a, b) in rows for (c, d) in rows if a == c)
    deg: dict = {}
    for a, _ in rows:
        deg[a] = deg.get(a, 0) + 1
    return {"fan": fan, "deg": sorted(deg.items()), "set": sorted(edges), "bfs": shortest_distances(list(edges), roots)}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_keyed_input_answers_as_the_unkeyed_one(workers):
    rng = np.random.default_rng(7 + workers)
    n = 14
    edges: dict = {}
    for _ in range(20):
        k = (int(rng.integers(n)), int(rng.integers(n)))
        edges[k] = edges.get(k, 0) + 1
    start = sorted(k for k, m in edges.items() for _ in range(m))
    with kp.Engine(workers=workers) as eng:
        keyed = eng.input("ek", ["src", "dst"], rows=start, key="src")
        plain = eng.input("ep", ["src", "dst"], rows=start)
        roots = eng.input("roots", ["node"], rows=[(0,), (1,)])
        with eng.dataflow("k") as df:
            vk = _programs(df, "ek")
        with eng.dataflow("p") as df:
            vp = _programs(df, "ep")
        # the join on src (both sides) and the BFS read the keyed input's own arrangement, where the
        # input arranged by all its columns is arranged again by src for each; only the distinct
        # arranges anew
        assert _arranges(eng, "k") < _arranges(eng, "p") - 1
        seen = []
        late = None
        for t in range(1, 12):
            if t > 1:
                ups, diffs = random_edge_edits(rng, edges, n, int(rng.integers(1, 5)), remove=0.4)
                keyed.update(ups, diffs)
                plain.update(ups, diffs)
            for i in (keyed, plain, roots):
                i.advance_to(t)
            if t == 6:  # installed late: it starts from the keyed input's history
                with eng.dataflow("late") as df:
                    late = _programs(df, "ek")
            want = _reference(edges, [0, 1])
            for views in (vk, vp) + ((late,) if late else ()):
                for name, v in views.items():
                    eng.wait(v, timeout=60)
                    assert _rows(v) == want[name], (name, t)
            seen.append((t, want))
        for t, want in seen:  # every epoch again, through at=
            for name, v in vk.items():
                assert _rows(v, at=t - 1) == want[name], (name, t)


def test_an_index_over_a_keyed_input_is_the_input_itself():
    """``arrange_by`` of the key the input keeps, exported and used by another dataflow: no second
    arrangement, and the catalog's arrangement is the input's trace, keyed as declared."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("edges", ["src", "dst"], rows=[(0, 1), (1, 2), (2, 3)], key=["src"])
        r = eng.input("roots", ["node"], rows=[(0,)])
        with eng.dataflow("index") as df:
            df.input("edges").arrange_by("src").export("edges_by_src")
        with eng.dataflow("q") as df:
            v = graphs.bfs(df.use("edges_by_src"), df.input("roots")).view("v")
        for i in (e, r):
            i.advance_to(1)
        eng.wait(v)
        assert _rows(v) == [(0, 0), (1, 1), (2, 2), (3, 3)]
        assert _arranges(eng, "index") == 0
        arr = {a["name"]: a for a in eng.arrangements()}
        assert arr["input:edges"]["key"] == ["src"]
        assert "edges_by_src" not in arr or arr["edges_by_src"]["key"] == ["src"]
        e.remove([(1, 2)])
        for i in (e, r):
            i.advance_to(2)
        eng.wait(v)
        assert _rows(v) == [(0, 0), (1, 1)]


@pytest.mark.parametrize("key, why", [
    (["dst"], "leading columns"), (["src", "src"], "leading columns"), (["x"], "'x' is not a column"),
    ([], "non-empty"), (5, "column name"), (["src", "dst", "w", "v"], "not a column")])
def test_bad_keys_are_refused_and_leave_the_name_free(key, why):
    with kp.Engine(workers=1) as eng:
        with pytest.raises(SchemaError, match=why):
            eng.input("e", ["src", "dst", "w"], key=key)
        e = eng.input("e", ["src", "dst", "w"], rows=[(1, 2, 3)], key=["src", "dst"])
        e.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("e").view("v")
        eng.wait(v)
        assert _rows(v) == [(1, 2, 3)]
        assert {a["name"]: a["key"] for a in eng.arrangements()}["input:e"] == ["src", "dst"]


def test_a_renamed_arrangement_shares_its_rows_flattened_once():
    """A rename of an arranged collection is the same arrangement under new names: joined on the renamed
    key it reads that arrangement, and used as plain rows under either name it is flattened once."""
    from kpgnb.engine.operators.basic import FlattenOp
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 2), (2, 3)], key="src")
        e.advance_to(1)
        with eng.dataflow("q") as df:
            a = df.input("e")
            b = a.rename(src="x", dst="y")
            v1 = a.map(lambda src, dst: {"s": src + dst}).view("v1")
            v2 = b.filter(lambda x, y: x > 1).view("v2")
            v3 = a.join(b, left_on="src", right_on="x").view("v3")
        eng.wait(v1)
        eng.wait(v2)
        eng.wait(v3)
        assert _rows(v1) == [(3,), (5,)] and _rows(v2) == [(2, 3)] and _rows(v3) == [(1, 2, 2), (2, 3, 3)]
        assert b.op is a.op and sum(isinstance(op, FlattenOp) for op in df.graph.ops) == 1
        assert _arranges(eng, "q") == 3  # the three views' own; the join reads the input's


def test_distinct_by_key_reads_a_keyed_input_and_keeps_its_index():
    """``distinct(key=)`` is the set of rows arranged by that key: over an input keyed so, it reads the
    input's own arrangement, and a join on the key reads the distinct's. Rows of multiplicity 2 come once,
    rows removed more often than added (multiplicity -1) not at all, and its columns are the key first."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst", "w"], key="src",
                      rows=[(1, 2, 5), (1, 2, 5), (1, 3, 5), (2, 3, 7)])
        e.remove([(4, 4, 4)])
        e.advance_to(1)
        with eng.dataflow("q") as df:
            s = df.input("e").distinct(key="src")
            pairs = s.join(s.rename(src="x", dst="y", w="v"), left_on="dst", right_on="x")
            v = s.view("set")
            vj = pairs.view("pairs")
            vd = df.input("e").distinct(key=["dst", "w"]).view("by_dst")
        assert s.key_names == ["src"] and s.val_names == ["dst", "w"]
        for x in (v, vj, vd):
            eng.wait(x)
        assert _rows(v) == [(1, 2, 5), (1, 3, 5), (2, 3, 7)]
        assert list(vd.to_pandas().columns) == ["dst", "w", "src"]
        assert _rows(vd) == [(2, 5, 1), (3, 5, 1), (3, 7, 2)]
        assert _rows(vj) == [(2, 1, 5, 3, 7)]
        # the join arranges its left side by dst, the other distinct its input by (dst, w), the join's
        # view its output; the distinct by src reads the input's arrangement, the join's right side the
        # distinct's, and the views of the two distincts read theirs
        assert _arranges(eng, "q") == 3
        e.update([(1, 2, 5), (1, 2, 5), (4, 4, 4), (4, 4, 4)], [-1, -1, 1, 1])
        e.advance_to(2)
        eng.wait(v)
        assert _rows(v) == [(1, 3, 5), (2, 3, 7), (4, 4, 4)]
        with pytest.raises(SchemaError, match="'x'"):
            with eng.dataflow("bad") as df:
                df.input("e").distinct(key="x")
        with pytest.raises(SchemaError, match="column names"):
            with eng.dataflow("bad") as df:
                df.input("e").distinct(key=[3])
        assert "bad" not in eng.snapshot().dataflows


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_datalog_over_a_keyed_input_reads_its_index(workers):
    """A Datalog program whose rules join the edges on src, over edges keyed by src, answers as over
    edges arranged by all their columns and arranges the edges once fewer (its set of the edges is
    the index the rules join on); goals too."""
    text = "reach(y) :- root(y).\nreach(y) :- reach(x), edge(x, y).\n" \
           "sp(y, min<d>) :- root(y), d = 0.\nsp(y, min<d>) :- sp(x, d1), edge(x, y), d = d1 + 1.\n"
    rng = np.random.default_rng(workers)
    n = 16
    edges: dict = {}
    random_edge_edits(rng, edges, n, 24, remove=0.0)
    start = sorted(k for k, m in edges.items() for _ in range(m))
    with kp.Engine(workers=workers) as eng:
        ins = [eng.input("ek", ["src", "dst"], rows=start, key="src"), eng.input("ep", ["src", "dst"], rows=start),
               eng.input("root", ["node"], rows=[(0,)])]
        progs = [eng.datalog(text, inputs={"edge": name}, name=f"p_{name}") for name in ("ek", "ep")]
        goals = [p.goal("reach(?)") for p in progs]
        arranges = [_arranges(eng, p.name) for p in progs]
        assert arranges[0] < arranges[1], arranges
        for t in range(1, 8):
            if t > 1:
                ups, diffs = random_edge_edits(rng, edges, n, 3, remove=0.4)
                ins[0].update(ups, diffs)
                ins[1].update(ups, diffs)
            for i in ins:
                i.advance_to(t)
            for g in goals:
                g.ask(t % n)
            want = _reference(edges, [0])["bfs"]
            for p, g in zip(progs, goals):
                assert _rows(eng.wait(p["sp"], timeout=60)) == want, (p.name, t)
                assert _rows(eng.wait(p["reach"], timeout=60)) == [(x,) for x, _ in want], (p.name, t)
                got = _rows(eng.wait(g.view, timeout=60))
                assert got == sorted((x,) for x, _ in want if 1 <= x <= t), (p.name, t)
