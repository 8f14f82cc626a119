"""Session-46 attack on kpgnb.graphs in its default (full) mode: bfs, reachable, wcc, scc, sssp, khop,
pagerank and rpq checked against networkx on random graphs (self-loops, parallel edges, isolated and
root-only nodes, int64-extreme, str and float node ids, float weights 0 .. 1e300) under random insert /
delete streams of edges and roots, at W = 1, 2, 3 and at every epoch; each query twice in one dataflow on
one shared edge arrangement; historical reads (``view.to_pandas(at=)``) of every epoch; queries installed
late over inputs with many epochs (keyed inputs, an exported arrangement, epochs skipped, several epochs
submitted before a wait); the queries inside an outer ``iterate``; the ``python -m kpgnb demo`` answer.

Tests marked xfail(strict=True) are bugs found here: each asserts the behaviour the README promises."""
from __future__ import annotations

import warnings
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
K, IT = 2, 3                                      # khop's k, pagerank's iterations
TRANS, ACC = [(0, 0, 1), (1, 1, 0), (1, 0, 1)], [1]   # rpq: label 0 then (1 0*)* ... over labels w != 0

IDS = {
    "ext": [I64_MIN, I64_MIN + 1, -1, 0, 1, 7, 1 << 40, I64_MAX - 1, I64_MAX],
    "str": ["", "a", "B", "zz", "\u00e9", "a b", "0", "10", "9"],
    "float": [-1e300, -2.5, -0.0, 0.5, 3.0, 1e18, 1e300, 7.25, 11.0],
}
DTYPE = {"ext": "int64", "str": "str", "float": "float64"}
WEIGHTS = (0.0, 1.0, 2.5, 1e300, 1e3)


# -- networkx oracles (an edge (u, v, w) is present while its net count is positive) -------------------
def _live(c):
    return [k for k, v in c.items() if v > 0]


def _graph(edges, multi=False):
    g = nx.MultiDiGraph() if multi else nx.DiGraph()
    for (a, b, w), c in edges.items():
        for _ in range(max(c, 0)):
            if multi:
                g.add_edge(a, b)
            elif g.has_edge(a, b):
                g[a][b]["w"] = min(g[a][b]["w"], w)
            else:
                g.add_edge(a, b, w=w)
    return g


def o_bfs(E, R):
    g, out = _graph(E), {}
    for r in _live(R):
        out[r] = 0
        if r in g:
            for v, d in nx.single_source_shortest_path_length(g, r).items():
                out[v] = min(out.get(v, d), d)
    return sorted(out.items())


def o_reach(E, R):
    return sorted((v,) for v, _ in o_bfs(E, R))


def o_wcc(E, R):
    out = []
    for comp in nx.connected_components(_graph(E).to_undirected()):
        out += [(v, min(comp)) for v in comp]
    return sorted(out)


def o_scc(E, R):
    lab = {}
    for i, comp in enumerate(nx.strongly_connected_components(_graph(E))):
        lab.update({v: i for v in comp})
    c = Counter()
    for (a, b, _), n in E.items():
        if n > 0 and lab[a] == lab[b]:
            c[(a, b)] += n
    return sorted(k for k, n in c.items() for _ in range(n))


def o_sssp(E, S):
    g, out = _graph(E), []
    for s in _live(S):
        d = nx.single_source_dijkstra_path_length(g, s, weight="w") if s in g else {s: 0}
        out += [(s, v, float(x)) for v, x in d.items()]
    return sorted(out)


def o_khop(E, S):
    g, out = _graph(E), []
    for s in _live(S):
        d = nx.single_source_shortest_path_length(g, s, cutoff=K) if s in g else {s: 0}
        out += [(s, v, x) for v, x in d.items()]
    return sorted(out)


def o_pagerank(E, S):
    g, a = _graph(E, multi=True), 0.85
    rank = {v: 1 - a for v in g.nodes}
    for _ in range(IT):
        new = {v: 1 - a for v in g.nodes}
        for u, v in g.edges():
            new[v] += a * rank[u] / g.out_degree(u)
        rank = new
    return sorted(rank.items())


def o_rpq(E, S):
    es = [(a, b, int(w != 0)) for a, b, w in _live(E)]
    out = set()
    for s in _live(S):
        seen, todo = {(s, 0)}, [(s, 0)]
        while todo:
            v, q = todo.pop()
            for a, b, lab in es:
                if a == v:
                    for q0, l0, q1 in TRANS:
                        if q0 == q and l0 == lab and (b, q1) not in seen:
                            seen.add((b, q1))
                            todo.append((b, q1))
        out |= {(s, v) for v, q in seen if q in ACC}
    return sorted(out)


ORACLES = {"bfs": (o_bfs, ["node", "dist"]), "reach": (o_reach, ["node"]), "wcc": (o_wcc, ["node", "label"]),
           "scc": (o_scc, ["src", "dst"]), "sssp": (o_sssp, ["source", "node", "dist"]),
           "khop": (o_khop, ["source", "node", "hops"]), "pr": (o_pagerank, ["node", "rank"]),
           "rpq": (o_rpq, ["source", "node"])}


def queries(g, e, r):
    """Every query over the edges ``g`` (src, dst, w; maybe arranged), ``e`` the plain edges, roots ``r``."""
    s = r.rename(node="source")
    labelled = e.map(lambda src, dst, w: {"src": src, "label": (w != 0).astype(np.int64), "dst": dst})
    return {"bfs": graphs.bfs(g, r), "reach": graphs.reachable(g, r), "wcc": graphs.wcc(g),
            "scc": graphs.scc(g.select("src", "dst")), "sssp": graphs.sssp(g, s), "khop": graphs.khop(g, s, K),
            "pr": graphs.pagerank(g, IT), "rpq": graphs.rpq(labelled, s, TRANS, ACC)}


def read(view, cols, at=None):
    df = view.to_pandas(at=at)
    return sorted(tuple(x) for x in df[cols].itertuples(index=False, name=None))


def same(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if isinstance(p, float) or isinstance(q, float):
                if not (p == q or abs(p - q) <= 1e-9 * max(1.0, abs(p), abs(q))):
                    return False
            elif p != q:
                return False
    return True


def stream(seed, ids, epochs=8):
    """Per epoch: (edge rows, edge diffs, root rows, root diffs): single edges and batches, deletes of live
    edges, self-loops, a parallel edge, roots added and removed (ids[-1] never has out-edges)."""
    rng = np.random.default_rng(seed)

    def edge():
        a = ids[int(rng.integers(len(ids) - 1))]
        b = a if rng.random() < 0.15 else ids[int(rng.integers(len(ids)))]
        return (a, b, WEIGHTS[int(rng.integers(len(WEIGHTS)))])
    e0 = [edge() for _ in range(10)]
    e0 += e0[:2]
    cur, roots = Counter(e0), Counter([ids[0], ids[-1]])
    steps = [(e0, [1] * len(e0), [ids[0], ids[-1]], [1, 1])]
    for _ in range(epochs):
        rows, diffs = [], []
        for _ in range(int(rng.choice([1, 1, 3, 6]))):
            lv = _live(cur)
            if rng.random() < 0.5 or not lv:
                e, d = edge(), 1
            else:
                e, d = lv[int(rng.integers(len(lv)))], -1
            rows.append(e)
            diffs.append(d)
            cur[e] += d
        sr, sd = [], []
        if rng.random() < 0.5:
            sr.append(ids[int(rng.integers(len(ids)))])
            sd.append(1)
        if rng.random() < 0.4 and _live(roots):
            ls = _live(roots)
            sr.append(ls[int(rng.integers(len(ls)))])
            sd.append(-1)
        for s, d in zip(sr, sd):
            roots[s] += d
        steps.append((rows, diffs, sr, sd))
    return steps


# -- what works (coverage that earlier rounds did not have) -------------------------------------------
@pytest.mark.parametrize("kind, workers", [("ext", 1), ("str", 2), ("float", 3), ("ext", 3)])
def test_every_query_twice_on_one_arrangement_every_epoch_and_at_every_past_epoch(kind, workers):
    ids, dt = IDS[kind], DTYPE[kind]
    E, R, wants = Counter(), Counter(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # 1e300 + 1e300 (see the xfail below)
        with kp.Engine(workers=workers) as eng:
            Ei = eng.input("edges", ["src", "dst", "w"], dtypes=[dt, dt, "float64"])
            Ri = eng.input("roots", ["node"], dtypes=[dt])
            with eng.dataflow("q") as df:
                e, r = df.input("edges"), df.input("roots")
                g = e.arrange_by("src")
                views = {}
                for copy in ("", "2"):
                    for name, c in queries(g, e, r).items():
                        views[name + copy] = c.view(name + copy, history=50)
            for ep, (rows, diffs, sr, sd) in enumerate(stream(workers * 10 + len(kind), ids)):
                if rows:
                    Ei.update(rows, diffs)
                if sr:
                    Ri.update([(s,) for s in sr], sd)
                for x, d in zip(rows, diffs):
                    E[x] += d
                for s, d in zip(sr, sd):
                    R[s] += d
                Ei.advance_to(ep + 1)
                Ri.advance_to(ep + 1)
                want = {n: o(E, R) for n, (o, _) in ORACLES.items()}
                wants.append(want)
                for name, v in views.items():
                    eng.wait(v, timeout=60)
                    got = read(v, ORACLES[name.rstrip("2")][1])
                    assert same(got, want[name.rstrip("2")]), (ep, name, got, want[name.rstrip("2")])
            for ep, want in enumerate(wants):
                for name, v in views.items():
                    got = read(v, ORACLES[name.rstrip("2")][1], at=ep)
                    assert same(got, want[name.rstrip("2")]), ("at=", ep, name)


@pytest.mark.parametrize("kind, workers, key, late", [("ext", 2, "src", 3), ("str", 3, None, 1),
                                                      ("float", 1, ["src", "dst"], 5)])
def test_queries_installed_late_on_an_export_with_skipped_and_batched_epochs(kind, workers, key, late):
    ids, dt = IDS[kind], DTYPE[kind]
    rng = np.random.default_rng(late)
    E, R, wants = Counter(), Counter(), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kp.Engine(workers=workers) as eng:
            Ei = eng.input("edges", ["src", "dst", "w"], dtypes=[dt, dt, "float64"], key=key)
            Ri = eng.input("roots", ["node"], dtypes=[dt], key="node")
            with eng.dataflow("g") as df:
                df.input("edges").arrange_by("src").export("g")
            views, ep = {}, 0
            for i, (rows, diffs, sr, sd) in enumerate(stream(late, ids, epochs=9)):
                if i == late:
                    with eng.dataflow("q") as df:
                        qs = queries(df.use("g"), df.input("edges"), df.input("roots"))
                        views = {n: c.view(n, history=100) for n, c in qs.items()}
                    born = ep - 1                                    # the inputs' latest complete epoch
                    wants[born] = {n: o(E, R) for n, (o, _) in ORACLES.items()}
                if rows:
                    Ei.update(rows, diffs)
                if sr:
                    Ri.update([(s,) for s in sr], sd)
                for x, d in zip(rows, diffs):
                    E[x] += d
                for s, d in zip(sr, sd):
                    R[s] += d
                jump = int(rng.integers(1, 4))                       # epochs with no changes
                if views:
                    want = {n: o(E, R) for n, (o, _) in ORACLES.items()}
                    wants.update({e: want for e in range(ep, ep + jump)})
                ep += jump
                Ei.advance_to(ep)
                Ri.advance_to(ep)
                if views and rng.random() < 0.4:                     # else several epochs queue up
                    for name, v in views.items():
                        eng.wait(v, timeout=60)
                        assert same(read(v, ORACLES[name][1]), wants[ep - 1][name]), (ep - 1, name)
            for v in views.values():
                eng.wait(v, timeout=60)
            for e, want in wants.items():
                for name, v in views.items():
                    assert same(read(v, ORACLES[name][1], at=e), want[name]), ("at=", e, name)
            with pytest.raises(kp.CompactedError):
                views["bfs"].to_pandas(at=born - 1)


@pytest.mark.parametrize("workers", [1, 3])
def test_graph_queries_inside_an_outer_iterate_reach_the_reachable_set(workers):
    """khop / sssp (ife in full mode), bfs and pagerank run inside a loop (their own loops nested): the outer
    fixed point of `v + nodes the query finds from v` is the set reachable from the roots."""
    rng = np.random.default_rng(5)
    E, R = Counter(), Counter()
    with kp.Engine(workers=workers) as eng:
        Ei, Ri = eng.input("edges", ["src", "dst", "w"]), eng.input("roots", ["node"])
        with eng.dataflow("q") as df:
            e, r = df.input("edges"), df.input("roots")

            def via(f):
                def body(v):
                    ee = e.enter(v.scope)
                    return f(ee, v).map(lambda node: {"node": node}).concat(v).distinct()
                return r.iterate(body).view(f.__name__)

            def khop1(ee, v):
                return graphs.khop(ee, v.map(lambda node: {"source": node}), 1)

            def sssp(ee, v):
                return graphs.sssp(ee, v.map(lambda node: {"source": node}))

            def bfs(ee, v):
                return graphs.bfs(ee, v)

            def pagerank(ee, v):
                return graphs.pagerank(ee.join(v, left_on="src", right_on="node").select("src", "dst", "w"), 2)
            views = [via(f) for f in (khop1, sssp, bfs, pagerank)]
        for ep in range(8):
            rows, diffs = [], []
            for _ in range(int(rng.integers(1, 6))):
                lv = _live(E)
                if rng.random() < 0.6 or not lv:
                    x, d = (int(rng.integers(0, 12)), int(rng.integers(0, 12)), int(rng.integers(0, 3))), 1
                else:
                    x, d = lv[int(rng.integers(len(lv)))], -1
                rows.append(x)
                diffs.append(d)
                E[x] += d
            Ei.update(rows, diffs)
            if ep == 0 or rng.random() < 0.3:
                s = int(rng.integers(0, 12))
                Ri.insert([(s,)])
                R[s] += 1
            Ei.advance_to(ep + 1)
            Ri.advance_to(ep + 1)
            want = o_reach(E, R)
            for v in views:
                eng.wait(v, timeout=60)
                assert read(v, ["node"]) == want, (ep, v.name)


def test_pagerank_and_sssp_bit_identical_across_workers_and_late_installs():
    """README: results are identical for every W, and a float sum adds a vertex's messages in the same
    order: pagerank and float sssp, maintained from epoch 0 or installed late, agree bit for bit."""
    ids = IDS["float"]
    steps = stream(3, ids, epochs=8)

    def run(workers, late):
        res = {}
        with kp.Engine(workers=workers) as eng:
            Ei = eng.input("edges", ["src", "dst", "w"], dtypes=["float64"] * 3)
            Ri = eng.input("roots", ["node"], dtypes=["float64"])
            vs = None
            for ep, (rows, diffs, sr, sd) in enumerate(steps):
                if ep == late:
                    with eng.dataflow("q") as df:
                        e = df.input("edges")
                        vs = (graphs.pagerank(e, 5).view("pr"),
                              graphs.sssp(e, df.input("roots").rename(node="source")).view("sp"))
                if rows:
                    Ei.update(rows, diffs)
                if sr:
                    Ri.update([(s,) for s in sr], sd)
                Ei.advance_to(ep + 1)
                Ri.advance_to(ep + 1)
                if vs:
                    for v in vs:
                        eng.wait(v, timeout=60)
                    res[ep] = (read(vs[0], ["node", "rank"]), read(vs[1], ["source", "node", "dist"]))
        return res
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        base = run(1, 0)
        for workers, late in ((2, 0), (3, 4), (1, 8)):
            got = run(workers, late)
            for ep, x in got.items():
                assert x == base[ep], (workers, late, ep)


def test_demo_main_job_answer_matches_networkx():
    """`python -m kpgnb demo` at a small size: its final BFS (after its single-edge updates) reaches the
    nodes networkx reaches, with the same largest distance."""
    from kpgnb.__main__ import demo
    nodes, m, roots, updates, seed = 800, 3000, 3, 12, 4
    r = demo(nodes, m, roots, updates, 2, seed)
    rng = np.random.default_rng(seed)        # the demo's own generator, replayed
    src, dst = rng.integers(0, nodes, m), rng.integers(0, nodes, m)
    root_ids = rng.choice(nodes, size=roots, replace=False)
    E = Counter(zip(src.tolist(), dst.tolist()))
    present = list(zip(src[:updates].tolist(), dst[:updates].tolist()))
    for i in range(updates):
        if i % 2 == 0:
            E[(int(rng.integers(nodes)), int(rng.integers(nodes)))] += 1
        else:
            E[present[i]] -= 1
    want = o_bfs(Counter({(a, b, 1): c for (a, b), c in E.items()}), Counter(root_ids.tolist()))
    assert r["reached"] == len(want)
    assert r["max_dist"] == max(d for _, d in want)


# -- bugs -----------------------------------------------------------------------------------------------
def _answer(build, edges_cols, edge_rows, root_cols, root_rows, workers=2, edge_dtypes=None):
    with kp.Engine(workers=workers) as eng:
        E = eng.input("edges", edges_cols, rows=edge_rows, dtypes=edge_dtypes)
        R = eng.input("roots", root_cols, rows=root_rows)
        with eng.dataflow("q") as df:
            v = build(df.input("edges"), df.input("roots")).view("v")
        E.advance_to(1)
        R.advance_to(1)
        eng.wait(v, timeout=60)
        return sorted(v.to_pandas().itertuples(index=False, name=None))


WEIGHTED = [(1, 2, 5), (2, 3, 5), (3, 1, 5), (3, 4, 5), (6, 6, 1)]


def test_scc_over_weighted_edges():
    got = _answer(lambda e, r: graphs.scc(e), ["src", "dst", "w"], WEIGHTED, ["node"], [(1,)])
    assert got == [(1, 2), (2, 3), (3, 1), (6, 6)]


def test_reachable_roots_with_an_extra_column():
    rows = [(1, 2), (2, 3), (3, 1), (3, 4)]
    assert _answer(lambda e, r: graphs.bfs(e, r), ["src", "dst"], rows, ["node", "tag"], [(1, 7)]) == \
        [(1, 0), (2, 1), (3, 2), (4, 3)]                                    # bfs: fine
    got = _answer(lambda e, r: graphs.reachable(e, r), ["src", "dst"], rows, ["node", "tag"], [(1, 7)])
    assert [x[0] for x in got] == [1, 2, 3, 4]


NON_COLLECTIONS = {
    "bfs-sessions": lambda E, R, pdE, pdR: graphs.bfs(E, R),
    "wcc-session": lambda E, R, pdE, pdR: graphs.wcc(E),
    "pagerank-session": lambda E, R, pdE, pdR: graphs.pagerank(E),
    "khop-pandas": lambda E, R, pdE, pdR: graphs.khop(pdE, pdR, 1),
    "bfs-pandas": lambda E, R, pdE, pdR: graphs.bfs(pdE, pdR),
    "reachable-pandas": lambda E, R, pdE, pdR: graphs.reachable(pdE, pdR),
}


@pytest.mark.parametrize("case", sorted(NON_COLLECTIONS))
def test_graph_functions_refuse_non_collections_clearly(case):
    import pandas as pd
    with kp.Engine(workers=1) as eng:
        E = eng.input("edges", ["src", "dst"], rows=[(1, 2)])
        R = eng.input("roots", ["node"], rows=[(1,)])
        pdE = pd.DataFrame({"src": [1], "dst": [2]})
        pdR = pd.DataFrame({"node": [1], "source": [1]})
        with pytest.raises(kp.ArgumentTypeError, match="Collection"):
            with eng.dataflow("q") as df:
                NON_COLLECTIONS[case](E, R, pdE, pdR).view("v")
        assert "q" not in [d["name"] for d in eng.dataflows()]


@pytest.mark.parametrize("source", ["keyed_input", "export"])
def test_sssp_indexes_the_edges_a_second_time(source):
    rng = np.random.default_rng(0)
    n = 300
    rows = {"src": rng.integers(0, 100, n), "dst": rng.integers(0, 100, n), "w": rng.integers(0, 5, n)}
    with kp.Engine(workers=1) as eng:
        E = eng.input("edges", ["src", "dst", "w"], rows=rows, key="src")
        S = eng.input("sources", ["source"], rows=[(1,), (2,)])
        E.advance_to(1)
        S.advance_to(1)
        with eng.dataflow("g") as df:
            df.input("edges").arrange_by("src").export("g")   # (the input's own arrangement)
        with eng.dataflow("q") as df:
            g = df.input("edges") if source == "keyed_input" else df.use("g")
            a = graphs.sssp(g, df.input("sources")).view("a")
            b = graphs.sssp(g, df.input("sources")).view("b")
            bfs = graphs.bfs(g, df.input("sources").rename(source="node")).view("bfs")
        for v in (a, b, bfs):
            eng.wait(v, timeout=60)
        assert read(a, ["source", "node", "dist"]) == read(b, ["source", "node", "dist"])
        by_src = [x for x in eng.stats()["arrangements"] if x["dataflow"] == "q" and x["key"] == ["src"]]
        # bfs, khop over (src, dst) and rpq read the input's arrangement; sssp adds one copy per query
        assert by_src == [], [(x["name"], x["records"]) for x in by_src]


def test_float_sssp_overflowing_to_inf_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with kp.Engine(workers=1) as eng:
            E = eng.input("edges", ["src", "dst", "w"], dtypes=["int64", "int64", "float64"],
                          rows=[(1, 2, 1e308), (2, 3, 1e308), (1, 4, float("inf"))])
            S = eng.input("sources", ["source"], rows=[(1,)])
            with eng.dataflow("q") as df:
                v = graphs.sssp(df.input("edges"), df.input("sources")).view("v")
            E.advance_to(1)
            S.advance_to(1)
            eng.wait(v, timeout=60)
            inf = float("inf")
            assert read(v, ["source", "node", "dist"]) == [(1, 1, 0.0), (1, 2, 1e308), (1, 3, inf), (1, 4, inf)]


@pytest.mark.parametrize("argv", [["--updates", "0"], ["--edges", "6", "--updates", "10"]])
def test_demo_cli_small_update_counts(argv):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "kpgnb", "demo", "--nodes", "50", "--edges", "200", "--workers", "1",
                        *argv], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    # runs (and reports) or is refused as a bad argument (argparse's exit status 2)
    assert (p.returncode == 0 and "reachable nodes" in p.stdout) or p.returncode == 2, (p.returncode, p.stderr[-300:])


def test_rpq_float_labels_refused():
    got = _answer(lambda e, r: graphs.rpq(e, r.rename(node="source"), [(0, 0.5, 1), (1, 1.0, 2)], [2]),
                  ["src", "label", "dst"], [(1, 0.5, 2), (2, 1.0, 3), (2, 0.5, 4)], ["node"], [(1,)],
                  edge_dtypes=["int64", "float64", "int64"])
    assert got == [(1, 3)]
