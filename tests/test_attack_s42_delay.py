"""Attack on ``Collection.delay`` (review helper s42): delayed rows in loops (weighted shortest paths through
streams of insertions, removals, weight changes, disconnections and re-additions; odd delay functions:
negative, zero, huge, bool, uint, int32, writing into their columns, reading str columns; nested loops;
mutual recursion with ``kp.Variable``; ``at=`` reads; a dataflow installed late), the Datalog compiler's
delayed recursive min (weighted sssp, BFS, multi-source, max-plus that must not be delayed, goals, float
mins) and the Spark backend's exact DelayOp. Every answer is compared with networkx or plain Python, with
exact rows, at W = 1, 2, 3."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb.engine.collection import Collection
from kpgnb.engine.errors import SchemaError
from kpgnb.graphs import bit_length_rounds
from reference import shortest_distances

WORKERS = [1, 2, 3]
WSSSP = """
.decl wedge(src: int, dst: int, w: int)
sp(y, min<d>) :- y = 0, d = 0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
"""


# -- helpers -------------------------------------------------------------------------------------------

def _rows(view, at=None) -> list:
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


def _zero_dist(roots):
    return roots.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})


def _sssp(edges, roots, delay_fn=None, tag=False):
    """Weighted distances (node, dist) from roots along edges (src, dst, w), the candidates delayed by
    ``delay_fn`` (None: no delay). ``tag``: the candidates carry a str column (its node as text) that
    the delay function may read, dropped before the min."""
    start = _zero_dist(roots)

    def step(d):
        if tag:
            cand = d.join(edges, left_on="node", right_on="src").map(
                lambda dst, dist, w: {"node": dst, "dist": dist + w,
                                      "tag": np.array(["n%d" % x for x in dst], dtype=object)},
                out={"node": "int64", "dist": "int64", "tag": "str"})
        else:
            cand = d.join(edges, left_on="node", right_on="src").map(
                lambda dst, dist, w: {"node": dst, "dist": dist + w})
        if delay_fn is not None:
            cand = cand.delay(delay_fn)
        if tag:
            cand = cand.select("node", "dist")
        return cand.concat(start).min(by="node", col="dist")
    return start.iterate(step)


def _writer(dist):
    """A delay function that writes into its input column (must not change what the loop sees)."""
    dist *= 1000
    dist += 7
    return bit_length_rounds(dist) % 5


DELAYS = {
    "none": None,
    "bits": lambda dist: bit_length_rounds(dist),
    "negative": lambda dist: -(dist + 1) * 3,        # negative rounds: no delay
    "zero": lambda dist: np.zeros(len(dist), np.int64),
    "huge": lambda dist: np.where(dist % 3 == 0, 60, 0).astype(np.int64),
    "bool": lambda dist: dist > 4,
    "uint": lambda dist: (dist % 7).astype(np.uint64),
    "int32": lambda dist: ((dist * 3) % 11).astype(np.int32),
    "bynode": lambda node: (node % 5) * 4,
    "writes": _writer,
    "list": lambda dist: [int(x) % 3 for x in dist],
}


def _random_edges(rng, n, m, wmax=9, wmin=0):
    edges = {}
    while len(edges) < m:
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges[(u, v)] = int(rng.integers(wmin, wmax + 1))
    return edges


def _churn(rng, edges, n, t, wmin=0, wmax=9, removed_store=None):
    """One epoch of changes to ``edges`` (a dict), returned as (rows, diffs): removals, weight changes,
    additions; every 4th epoch cuts all edges into one node (it must go unreachable or farther), every 4th
    + 2 puts such cut edges back."""
    ups, diffs = [], []
    if t % 4 == 0 and edges:
        victim = sorted({v for (_, v) in edges})[int(rng.integers(len({v for (_, v) in edges})))]
        for (u, v), w in sorted(edges.items()):
            if v == victim:
                ups.append((u, v, w))
                diffs.append(-1)
                del edges[(u, v)]
                if removed_store is not None:
                    removed_store.append((u, v, w))
    elif t % 4 == 2 and removed_store:
        while removed_store:
            u, v, w = removed_store.pop()
            if (u, v) not in edges:
                edges[(u, v)] = w
                ups.append((u, v, w))
                diffs.append(1)
    for _ in range(4):
        kind = int(rng.integers(4))
        if kind < 3 and edges:
            (u, v), w = sorted(edges.items())[int(rng.integers(len(edges)))]
            ups.append((u, v, w))
            diffs.append(-1)
            del edges[(u, v)]
            if kind == 1:  # weight change
                edges[(u, v)] = int(rng.integers(wmin, wmax + 1))
                ups.append((u, v, edges[(u, v)]))
                diffs.append(1)
        else:
            a, b = (int(x) for x in rng.integers(0, n, 2))
            if a != b and (a, b) not in edges:
                edges[(a, b)] = int(rng.integers(wmin, wmax + 1))
                ups.append((a, b, edges[(a, b)]))
                diffs.append(1)
    return ups, diffs


# -- engine: delay in iterate --------------------------------------------------------------------------

@pytest.mark.parametrize("workers", WORKERS)
def test_many_delay_functions_through_a_long_stream_vs_dijkstra(workers):
    """Every delay function (none, bit length, negative, zero, 60 rounds, bool, uint64, int32, by another
    column, one writing into its column, a list) gives Dijkstra's distances at every epoch of a stream
    that removes, re-weighs (to 0 too), adds, cuts every edge into a node and puts them back; and the
    history read back with ``at=`` is every epoch's answer."""
    rng = np.random.default_rng(4200 + workers)
    n = 22
    edges = _random_edges(rng, n, 50)
    roots = [0, 7]
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst", "w"], key="src", rows=[(u, v, w) for (u, v), w in edges.items()])
        r = eng.input("r", ["node"], rows=[(x,) for x in roots])
        with eng.dataflow("q") as df:
            views = {name: _sssp(df.input("e"), df.input("r"), fn).view(name, history=30)
                     for name, fn in DELAYS.items()}
            views["tagged"] = _sssp(df.input("e"), df.input("r"),
                                    lambda tag: np.array([len(s) * 9 for s in tag], np.int64),
                                    tag=True).view("tagged", history=30)
        seen = []
        cut = []
        for t in range(1, 15):
            if t > 1:
                ups, diffs = _churn(rng, edges, n, t, removed_store=cut)
                if t == 9:  # a root goes, and comes back at 11
                    r.update([(7,)], [-1])
                    roots = [0]
                if t == 11:
                    r.update([(7,)], [1])
                    roots = [0, 7]
                if ups:
                    e.update(ups, diffs)
            e.advance_to(t)
            r.advance_to(t)
            want = shortest_distances(edges, roots, weights=True)
            for name, v in views.items():
                eng.wait(v, timeout=60)
                assert _rows(v) == want, (name, t)
            seen.append((t - 1, want))
        for at, want in seen:
            for name, v in views.items():
                assert _rows(v, at=at) == want, (name, at)


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_by_a_huge_round_on_every_candidate(workers):
    """Every candidate held back to round 60 (or 1,000,000): the loop still finishes each epoch with the
    exact distances, also when the edges that gave them go and distances grow."""
    chain = {(i, i + 1): 1 for i in range(8)}
    chain[(0, 8)] = 20
    chain[(3, 6)] = 1
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in chain.items()])
        r = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("q") as df:
            a = _sssp(df.input("e"), df.input("r"), lambda dist: np.full(len(dist), 60)).view("a")
            b = _sssp(df.input("e"), df.input("r"), lambda dist: np.full(len(dist), 1_000_000)).view("b")
            c = _sssp(df.input("e"), df.input("r"),
                      lambda dist: np.where(dist > 5, 60, -60)).view("c")
        steps = [([], []), ([(3, 6, 1)], [-1]), ([(4, 5, 1)], [-1]), ([(4, 5, 1), (3, 6, 1)], [1, 1]),
                 ([(0, 1, 1), (0, 1, 0)], [-1, 1]), ([(0, 8, 20)], [-1])]
        for t, (ups, diffs) in enumerate(steps, start=1):
            for (u, v, w), d in zip(ups, diffs):
                if d < 0:
                    del chain[(u, v)]
                else:
                    chain[(u, v)] = w
            if ups:
                e.update(ups, diffs)
            e.advance_to(t)
            r.advance_to(t)
            want = shortest_distances(chain, [0], weights=True)
            for v in (a, b, c):
                eng.wait(v, timeout=60)
                assert _rows(v) == want, (v.name, t)


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_inside_a_nested_loop(workers):
    """Outer loop: X = roots + every node within distance K of X (K-hop closure of the weighted distance);
    inner loop: multi-source weighted distances from X, candidates delayed by bit length (the innermost
    round), and also the outer loop's new members delayed by their node id. Checked against an
    all-pairs Dijkstra closure through changes."""
    K = 6
    rng = np.random.default_rng(77 + workers)
    n = 16
    edges = _random_edges(rng, n, 26, wmax=8, wmin=1)
    roots = [0]

    def want_closure():
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        for (u, v), w in edges.items():
            g.add_edge(u, v, weight=w)
        dist = dict(nx.all_pairs_dijkstra_path_length(g))
        X = set(roots)
        while True:
            nxt = X | {v for u in X for v, d in dist[u].items() if d <= K}
            if nxt == X:
                break
            X = nxt
        return sorted((x,) for x in X), shortest_distances(edges, sorted(X), weights=True)

    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in edges.items()])
        r = eng.input("r", ["node"], rows=[(x,) for x in roots])
        with eng.dataflow("q") as df:
            E = df.input("e")
            R = df.input("r")

            def outer(X):
                inner = _sssp(E, X, lambda dist: bit_length_rounds(dist))  # a loop in the loop
                near = inner.filter(lambda dist: dist <= K).select("node")
                near = near.delay(lambda node: node % 4)                    # the outer loop's rounds
                return near.concat(R).distinct()
            closure = R.iterate(outer)
            cv = closure.view("closure")
            dv = _sssp(E, closure, lambda dist: bit_length_rounds(dist) * 2).view("dists")
        for t in range(1, 7):
            if t > 1:
                ups, diffs = _churn(rng, edges, n, t, wmin=1, wmax=8)
                if ups:
                    e.update(ups, diffs)
            e.advance_to(t)
            r.advance_to(t)
            want_x, want_d = want_closure()
            eng.wait(cv, timeout=60)
            eng.wait(dv, timeout=60)
            assert _rows(cv) == want_x, t
            assert _rows(dv) == want_d, t


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_on_mutually_recursive_variables(workers):
    """Alternating paths: red(y) the shortest distance to y by a path whose last edge is red, blue(y) the
    same for blue, each extending the other (a red edge after blue, a blue after red); both Variables'
    candidates delayed (bit length; 60 rounds for the odd ones). Reference: Dijkstra on the product graph,
    through a stream of changes."""
    rng = np.random.default_rng(9 + workers)
    n = 14
    red = _random_edges(rng, n, 22, wmax=7)
    blue = _random_edges(rng, n, 22, wmax=7)

    def want():
        g = nx.DiGraph()
        g.add_node(("s", 0))
        for (u, v), w in red.items():
            g.add_edge(("b", u), ("r", v), weight=w)
            if u == 0:
                g.add_edge(("s", 0), ("r", v), weight=w)
        for (u, v), w in blue.items():
            g.add_edge(("r", u), ("b", v), weight=w)
            if u == 0:
                g.add_edge(("s", 0), ("b", v), weight=w)
        d = nx.single_source_dijkstra_path_length(g, ("s", 0))
        return (sorted((v, x) for (c, v), x in d.items() if c == "r"),
                sorted((v, x) for (c, v), x in d.items() if c == "b"))

    with kp.Engine(workers=workers) as eng:
        er = eng.input("red", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in red.items()])
        eb = eng.input("blue", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in blue.items()])
        r = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("q") as df:
            loop = df.loop()
            start = _zero_dist(df.input("r"))
            R = df.input("red").enter(loop)
            B = df.input("blue").enter(loop)
            s = start.enter(loop)
            vr = kp.Variable(loop, columns=["node", "dist"], dtypes=["int64", "int64"])
            vb = kp.Variable(loop, columns=["node", "dist"], dtypes=["int64", "int64"])

            def ext(src, edges, delay):
                c = src.join(edges, left_on="node", right_on="src").map(
                    lambda dst, dist, w: {"node": dst, "dist": dist + w})
                return c.delay(delay)
            red_next = vr.set(ext(vb.concat(s), R, lambda dist: bit_length_rounds(dist)).min(by="node", col="dist"))
            blue_next = vb.set(ext(vr.concat(s), B, lambda dist: np.where(dist % 2 == 1, 60, 0))
                               .min(by="node", col="dist"))
            rv = red_next.leave().view("red_d", history=10)
            bv = blue_next.leave().view("blue_d", history=10)
        seen = []
        for t in range(1, 7):
            if t > 1:
                for edges, inp in ((red, er), (blue, eb)):
                    ups, diffs = _churn(rng, edges, n, t, wmax=7)
                    if ups:
                        inp.update(ups, diffs)
            er.advance_to(t)
            eb.advance_to(t)
            r.advance_to(t)
            wr, wb = want()
            eng.wait(rv, timeout=60)
            eng.wait(bv, timeout=60)
            assert _rows(rv) == wr, t
            assert _rows(bv) == wb, t
            seen.append((t - 1, wr, wb))
        for at, wr, wb in seen:
            assert _rows(rv, at=at) == wr, at
            assert _rows(bv, at=at) == wb, at


@pytest.mark.parametrize("workers", WORKERS)
def test_a_dataflow_with_delay_installed_late(workers):
    """A delayed sssp installed after eight epochs of churn (its input's history compacted into its start)
    is right at once and through the epochs after; an early one beside it agrees throughout."""
    rng = np.random.default_rng(300 + workers)
    n = 20
    edges = _random_edges(rng, n, 40)
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst", "w"], key="src", rows=[(u, v, w) for (u, v), w in edges.items()])
        r = eng.input("r", ["node"], rows=[(3,)])
        with eng.dataflow("early") as df:
            early = _sssp(df.input("e"), df.input("r"), lambda dist: bit_length_rounds(dist)).view("early")
        late = None
        for t in range(1, 14):
            if t > 1:
                ups, diffs = _churn(rng, edges, n, t)
                if ups:
                    e.update(ups, diffs)
            e.advance_to(t)
            r.advance_to(t)
            if t == 8:
                with eng.dataflow("late") as df:
                    late = _sssp(df.input("e"), df.input("r"),
                                 lambda dist: np.where(dist > 6, 60, bit_length_rounds(dist))).view(
                        "late", history=10)
            want = shortest_distances(edges, [3], weights=True)
            for v in (early, late):
                if v is not None:
                    eng.wait(v, timeout=60)
                    assert _rows(v) == want, (v.name, t)


def test_bad_delay_functions_fail_their_dataflow_only():
    """A delay function returning floats, the wrong number of rounds, or a scalar fails its dataflow with
    a message saying an integer array was expected; a delay outside a loop is a SchemaError; a good
    dataflow beside them keeps working."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=[(0, 1, 2), (1, 2, 3)])
        r = eng.input("r", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("good") as df:
            good = _sssp(df.input("e"), df.input("r"), lambda dist: bit_length_rounds(dist)).view("good")
        eng.wait(good, timeout=60)
        with pytest.raises(SchemaError, match="top level"):
            with eng.dataflow("top") as df:
                _zero_dist(df.input("r")).delay(lambda dist: dist)
        bad = {
            "float": lambda dist: dist * 0.5,
            "short": lambda dist: np.zeros(max(len(dist) - 1, 0), np.int64),
            "long": lambda dist: np.zeros(len(dist) + 1, np.int64),
            "scalar": lambda dist: 3,
            "twod": lambda dist: np.zeros((len(dist), 1), np.int64),
            "strs": lambda dist: np.array(["1"] * len(dist)),
        }
        for name, fn in bad.items():
            with eng.dataflow("bad_" + name) as df:
                v = _sssp(df.input("e"), df.input("r"), fn).view("v_" + name)
            with pytest.raises(kp.KpgnbError, match="integer array"):
                eng.wait(v, timeout=60)
        e.insert([(2, 3, 4)])
        e.advance_to(2)
        r.advance_to(2)
        eng.wait(good, timeout=60)
        assert _rows(good) == [(0, 0), (1, 2), (2, 5), (3, 9)]


# -- Datalog -------------------------------------------------------------------------------------------

PROGRAM = """
.decl wedge(src: int, dst: int, w: int)
.decl root(node: int)
sp(y, min<d>) :- root(y), d = 0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
hops(y, min<d>) :- root(y), d = 0.
hops(y, min<d>) :- hops(x, d1), wedge(x, y, _), d = d1 + 1.
far(y, max<d>) :- root(y), d = 0.
far(y, max<d>) :- far(x, d1), wedge(x, y, w), x < y, d = d1 + w.
ps(d, y) :- sp(y, d).
first(min<d>, y) :- root(y), d = 0.
first(min<d>, y) :- first(d1, x), wedge(x, y, w), d = w + d1.
lbl(x, min<l>) :- wedge(x, _, _), l = x.
lbl(y, min<l>) :- lbl(x, l), wedge(x, y, _).
"""


def _longest_dag(edges, roots):
    """max-plus over the edges x -> y with x < y (a DAG), from the roots."""
    best = {r: 0 for r in roots}
    for x in sorted({u for (u, _) in edges} | set(roots)):
        if x not in best:
            continue
        for (u, v), w in sorted(edges.items()):
            if u == x and u < v:
                best[v] = max(best.get(v, -1), best[x] + w)
    return sorted(best.items())


def _labels(edges):
    g = nx.DiGraph()
    g.add_edges_from(edges)
    out = {}
    for x in {u for (u, _) in edges}:
        for y in nx.descendants(g, x) | {x}:
            out[y] = min(out.get(y, x), x)
    return sorted(out.items())


@pytest.mark.parametrize("workers", WORKERS)
def test_datalog_sssp_bfs_maxplus_and_labels_through_a_stream(workers, monkeypatch):
    """The compiler delays exactly the recursive rules that compute a monotone min (sp, hops), not the
    max (far) nor the passed-on min (lbl); every relation equals its reference at every epoch of a random
    stream of weighted edges (weights 0..9, several roots coming and going)."""
    delayed = []
    orig = Collection.delay

    def spy(self, fn):
        delayed.append(tuple(self.schema.names))
        return orig(self, fn)
    monkeypatch.setattr(Collection, "delay", spy)
    rng = np.random.default_rng(500 + workers)
    n = 18
    edges = _random_edges(rng, n, 36)
    roots = {0, 5}
    with kp.Engine(workers=workers) as eng:
        we = eng.input("we", ["src", "dst", "w"], key="src", rows=[(u, v, w) for (u, v), w in edges.items()])
        ro = eng.input("ro", ["node"], rows=[(x,) for x in sorted(roots)])
        prog = eng.datalog(PROGRAM, inputs={"wedge": "we", "root": "ro"}, name="g")
        assert len(delayed) == 3, delayed  # sp's, hops's and first's recursive rules, nothing else
        for t in range(1, 11):
            if t > 1:
                ups, diffs = _churn(rng, edges, n, t)
                if ups:
                    we.update(ups, diffs)
                if t == 4:
                    ro.update([(5,)], [-1])
                    roots.discard(5)
                if t == 6:
                    ro.update([(11,), (5,)], [1, 1])
                    roots |= {11, 5}
            we.advance_to(t)
            ro.advance_to(t)
            for pred in ("sp", "hops", "far", "lbl"):
                eng.wait(prog[pred], timeout=60)
            assert _rows(prog["sp"]) == shortest_distances(edges, sorted(roots), weights=True), t
            eng.wait(prog["first"], timeout=60)
            assert _rows(prog["first"]) == sorted((d, y) for y, d in shortest_distances(edges, sorted(roots), weights=True)), t
            assert _rows(prog["hops"]) == shortest_distances(list(edges), sorted(roots)), t
            assert _rows(prog["far"]) == _longest_dag(edges, sorted(roots)), t
            assert _rows(prog["lbl"]) == _labels(list(edges)), t


@pytest.mark.parametrize("workers", WORKERS)
def test_datalog_sssp_goal_matches_the_full_relation(workers):
    """``goal("sp(?, _)")`` on the weighted program: asked nodes' distances equal Dijkstra's (and the full
    relation's rows for them) through asks, retractions and edge changes."""
    rng = np.random.default_rng(600 + workers)
    n = 15
    edges = _random_edges(rng, n, 30)
    text = WSSSP
    with kp.Engine(workers=workers) as eng:
        we = eng.input("we", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in edges.items()])
        we.advance_to(1)
        prog = eng.datalog(text, inputs={"wedge": "we"}, name="gp")
        g = prog.goal("sp(?, _)")
        asked = set()
        for t in range(1, 8):
            if t > 1:
                ups, diffs = _churn(rng, edges, n, t)
                if ups:
                    we.update(ups, diffs)
                we.advance_to(t)
            for x in (int(v) for v in rng.integers(0, n, 3)):
                g.ask(x)
                asked.add(x)
            if t % 2 == 0 and asked:
                x = sorted(asked)[int(rng.integers(len(asked)))]
                g.retract(x)
                asked.discard(x)
            eng.wait(g.view, timeout=60)
            eng.wait(prog["sp"], timeout=60)
            full = shortest_distances(edges, [0], weights=True)
            want = [row for row in full if row[0] in asked]
            assert _rows(g.view) == want, t
            assert [row for row in _rows(prog["sp"]) if row[0] in asked] == want, t


@pytest.mark.parametrize("workers", WORKERS)
def test_datalog_float_min_is_not_delayed_and_is_exact(workers):
    """A recursive min over float distances (dyadic weights: sums are exact) compiles, is not delayed, and
    equals Dijkstra's through changes."""
    rng = np.random.default_rng(700 + workers)
    n = 14
    edges = {k: int(w) * 0.25 for k, w in _random_edges(rng, n, 28, wmax=12).items()}
    text = """
.decl wedge(src: int, dst: int, w: float)
sp(y, min<d>) :- y = 0, d = 0.0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
"""
    with kp.Engine(workers=workers) as eng:
        we = eng.input("we", ["src", "dst", "w"], dtypes={"w": "float64"},
                       rows=[(u, v, w) for (u, v), w in edges.items()])
        prog = eng.datalog(text, inputs={"wedge": "we"}, name="fp")
        for t in range(1, 6):
            if t > 1:
                (u, v), w = sorted(edges.items())[int(rng.integers(len(edges)))]
                del edges[(u, v)]
                nw = float(int(rng.integers(0, 12)) * 0.25)
                edges[(u, v)] = nw
                we.update([(u, v, w), (u, v, nw)], [-1, 1])
            we.advance_to(t)
            eng.wait(prog["sp"], timeout=60)
            assert _rows(prog["sp"]) == [(a, float(b)) for a, b in shortest_distances(edges, [0], weights=True)], t


@pytest.mark.parametrize("workers", [1, 3])
def test_datalog_negative_weights_without_negative_cycles(workers):
    """Negative weights on a DAG (no negative cycle): delayed rows of negative distance go at round 0 and
    the min is still the least fixed point (Bellman-Ford)."""
    rng = np.random.default_rng(800 + workers)
    n = 12
    edges = {}
    while len(edges) < 26:
        u, v = sorted(int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges[(u, v)] = int(rng.integers(-6, 7))
    text = WSSSP
    with kp.Engine(workers=workers) as eng:
        we = eng.input("we", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in edges.items()])
        we.advance_to(1)
        prog = eng.datalog(text, inputs={"wedge": "we"}, name="np")
        eng.wait(prog["sp"], timeout=60)
        g = nx.DiGraph()
        g.add_node(0)
        for (u, v), w in edges.items():
            g.add_edge(u, v, weight=w)
        want = sorted(nx.single_source_bellman_ford_path_length(g, 0).items())
        assert _rows(prog["sp"]) == want


@pytest.mark.parametrize("workers", [1, 2])
def test_datalog_sssp_over_str_nodes(workers):
    """Nodes named by str (the delay reads only the int distance column)."""
    rng = np.random.default_rng(900 + workers)
    edges = _random_edges(rng, 12, 26)
    text = """
.decl wedge(src: str, dst: str, w: int)
sp(y, min<d>) :- y = "n0", d = 0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
"""
    with kp.Engine(workers=workers) as eng:
        we = eng.input("we", ["src", "dst", "w"], dtypes={"src": "str", "dst": "str"},
                       rows=[("n%d" % u, "n%d" % v, w) for (u, v), w in edges.items()])
        we.advance_to(1)
        prog = eng.datalog(text, inputs={"wedge": "we"}, name="sp_str")
        for t in range(2, 5):
            eng.wait(prog["sp"], timeout=60)
            assert _rows(prog["sp"]) == sorted(("n%d" % k, d) for k, d in shortest_distances(edges, [0], weights=True)), t
            ups, diffs = _churn(rng, edges, 12, t)
            if ups:
                we.update([("n%d" % u, "n%d" % v, w) for u, v, w in ups], diffs)
            we.advance_to(t)
        eng.wait(prog["sp"], timeout=60)
        assert _rows(prog["sp"]) == sorted(("n%d" % k, d) for k, d in shortest_distances(edges, [0], weights=True))


def test_datalog_min_column_named_like_a_python_keyword():
    """A recursive min whose column is named ``in`` (a valid Datalog column name, not a valid Python
    parameter name): the by-size rounds (``enter_at``/``delay``) must not crash the compiler. Found by
    this attack: ``_size_rounds`` built an ``inspect.Parameter("in")`` and the compiler raised a bare
    ValueError ('in' is not a valid parameter name), in the older enter_at path too; fixed in the same
    session (such a column's rounds function reads every column)."""
    text = """
.decl wedge(src: int, dst: int, w: int)
.decl sp(node: int, in: int)
sp(y, min<d>) :- y = 0, d = 0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
"""
    with kp.Engine(workers=1) as eng:
        w = pd.DataFrame({"src": [0, 1, 0], "dst": [1, 2, 2], "w": [1, 1, 5]})
        prog = eng.datalog(text, inputs={"wedge": w})
        eng.wait(prog["sp"], timeout=60)
        assert _rows(prog["sp"]) == [(0, 0), (1, 1), (2, 2)]


# -- Spark ---------------------------------------------------------------------------------------------

SPARK_SSSP = """
.decl wedge(src: int, dst: int, w: int)
sp(y, min<d>) :- y = 0, d = 0.
sp(y, min<d>) :- y = 9, d = 0.
sp(y, min<d>) :- sp(x, d1), wedge(x, y, w), d = d1 + w.
"""


def test_spark_datalog_weighted_sssp_equals_engine_and_dijkstra(spark):
    rng = np.random.default_rng(42)
    edges = _random_edges(rng, 12, 24, wmax=5)
    frame = pd.DataFrame([(u, v, w) for (u, v), w in edges.items()], columns=["src", "dst", "w"])
    out = kp.spark.datalog(SPARK_SSSP, {"wedge": spark.createDataFrame(frame)})
    got_sp = sorted(map(tuple, out["sp"].toPandas().values.tolist()))
    assert got_sp == shortest_distances(edges, [0, 9], weights=True)
    with kp.Engine(workers=2) as eng:
        prog = eng.datalog(SPARK_SSSP, inputs={"wedge": frame})
        eng.wait(prog["sp"], timeout=60)
        assert _rows(prog["sp"]) == got_sp


def _spark_build(df):
    E = df.input("edges")
    roots = df.input("roots")
    a = _sssp(E, roots, lambda dist: bit_length_rounds(dist)).view("bits")
    b = _sssp(E, roots, lambda dist, node: np.where((dist > 3) & (node % 2 == 0), 9, -3)).view("odd")
    return a, b


def test_spark_run_delay_in_iterate_equals_engine_and_dijkstra(spark):
    rng = np.random.default_rng(43)
    edges = _random_edges(rng, 12, 24, wmax=5)
    frame = pd.DataFrame([(u, v, w) for (u, v), w in edges.items()], columns=["src", "dst", "w"])
    roots = pd.DataFrame({"node": [0, 4]})
    out = kp.spark.run(_spark_build, {"edges": spark.createDataFrame(frame),
                                       "roots": spark.createDataFrame(roots)}, spark=spark)
    want = shortest_distances(edges, [0, 4], weights=True)
    with kp.Engine(workers=2) as eng:
        eng.input("edges", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in edges.items()]).advance_to(1)
        eng.input("roots", ["node"], rows=[(0,), (4,)]).advance_to(1)
        with eng.dataflow("q") as df:
            views = _spark_build(df)
        for v in views:
            eng.wait(v, timeout=60)
            assert _rows(v) == want, v.name
            assert sorted(map(tuple, out[v.name].toPandas().values.tolist())) == want, v.name
