"""Graph computations against networkx on seeded random graphs, under 20+ epochs of random edge
insertions and removals, for 1, 2 and 3 workers."""
import networkx as nx
import numpy as np
import pytest

import kpgnb as kp

from kpgnb.graphs import bfs, reachable, scc, wcc

EPOCHS = 22


def random_graph_stream(seed, n=40, m=70, epochs=EPOCHS, churn=6):
    rng = np.random.default_rng(seed)
    edges = set()
    while len(edges) < m:
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges.add((u, v))
    initial = set(edges)
    steps = []
    for _ in range(epochs):
        adds, dels = set(), set()
        for _ in range(int(rng.integers(1, churn))):
            if edges and rng.random() < 0.5:
                e = sorted(edges)[int(rng.integers(len(edges)))]
                if e not in adds:
                    dels.add(e)
            else:
                u, v = (int(x) for x in rng.integers(0, n, 2))
                if u != v and (u, v) not in edges:
                    adds.add((u, v))
        dels -= adds
        steps.append((sorted(adds), sorted(dels)))
        edges = (edges | adds) - dels
    return sorted(initial), steps


def run_graph(seed, workers, build, check, epochs=EPOCHS, roots=(0, 1), ids=None):
    """``ids``: node id -> the id the engine sees (default: the same), to spread ids over int64."""
    initial, steps = random_graph_stream(seed, epochs=epochs)
    if ids is not None:
        relabel = lambda es: sorted((ids[u], ids[v]) for u, v in es)  # noqa: E731
        initial, roots = relabel(initial), tuple(ids[r] for r in roots)
        steps = [(relabel(a), relabel(d)) for a, d in steps]
    current = set(initial)
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edges", ["src", "dst"])
        r_in = eng.input("roots", ["node"])
        e_in.insert(initial)
        r_in.insert(list(roots))
        e_in.advance_to(1)
        r_in.advance_to(1)
        with eng.dataflow("g") as df:
            view = build(df.input("edges"), df.input("roots")).view("out")
        for epoch, (adds, dels) in enumerate(steps, start=1):
            eng.wait(view)
            check(view.to_pandas(), current, roots, epoch)
            e_in.insert(adds) if adds else None
            e_in.remove(dels) if dels else None
            current |= set(adds)
            current -= set(dels)
            e_in.advance_to(epoch + 1)
            r_in.advance_to(epoch + 1)
        eng.wait(view)
        check(view.to_pandas(), current, roots, len(steps) + 1)


def digraph(edges):
    g = nx.DiGraph()
    g.add_edges_from(edges)
    return g


def check_bfs(df, edges, roots, epoch):
    g = digraph(edges)
    g.add_nodes_from(roots)
    want = nx.multi_source_dijkstra_path_length(g, set(roots))
    got = dict(zip(df["node"].tolist(), df["dist"].tolist()))
    assert got == want, f"epoch {epoch}"


def check_reach(df, edges, roots, epoch):
    g = digraph(edges)
    g.add_nodes_from(roots)
    want = set().union(*(nx.descendants(g, r) | {r} for r in roots))
    got = df["node"].tolist()
    assert len(got) == len(set(got)) and set(got) == want, f"epoch {epoch}"


def check_wcc(df, edges, roots, epoch):
    g = nx.Graph()
    g.add_edges_from(edges)
    want = {v: min(c) for c in nx.connected_components(g) for v in c}
    got = dict(zip(df["node"].tolist(), df["label"].tolist()))
    assert got == want, f"epoch {epoch}"


def check_scc(df, edges, roots, epoch):
    comp = {}
    for i, c in enumerate(nx.strongly_connected_components(digraph(edges))):
        for v in c:
            comp[v] = i
    want = sorted((u, v) for u, v in edges if comp[u] == comp[v])
    got = sorted(zip(df["src"].tolist(), df["dst"].tolist()))
    assert got == want, f"epoch {epoch}"


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_bfs_distances(seed, workers):
    run_graph(seed, workers, lambda e, r: bfs(e, r), check_bfs)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [2, 3])
def test_reachability(seed, workers):
    run_graph(seed, workers, lambda e, r: reachable(e.arrange_by("src"), r), check_reach)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [4, 5])
def test_weakly_connected_components(seed, workers):
    run_graph(seed, workers, lambda e, r: wcc(e), check_wcc)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_wcc_over_the_whole_int64_range(workers):
    """wcc enters each label at the round of its bit length: ids from -2**63 to 2**63 - 1 (negative ones
    at round 0, the largest at round 63) give the same components as networkx."""
    rng = np.random.default_rng(workers)
    wide = rng.integers(-2**63, 2**63 - 1, 40, dtype=np.int64, endpoint=True)
    wide[:3] = [-2**63, 2**63 - 1, 0]
    ids = {i: int(x) for i, x in enumerate(wide)}
    assert len(set(ids.values())) == 40
    run_graph(9, workers, lambda e, r: wcc(e), check_wcc, epochs=8, ids=ids)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [6, 7])
def test_strongly_connected_components(seed, workers):
    run_graph(seed, workers, lambda e, r: scc(e), check_scc)


# -- the recursive queries of the memory-modes paper (issue 14), in full differential mode ---------------
def weighted_stream(seed, n=30, m=60, epochs=12):
    """Random weighted edges, then epochs of insertions, deletions and weight changes (a weight change is
    a deletion and an insertion in the same epoch)."""
    rng = np.random.default_rng(seed)
    edges = {}
    while len(edges) < m:
        u, v = (int(x) for x in rng.integers(0, n, 2))
        edges[(u, v)] = int(rng.integers(1, 10))
    steps, cur = [], dict(edges)
    for _ in range(epochs):
        adds, dels = [], []
        for _ in range(int(rng.integers(1, 6))):
            r = rng.random()
            keys = sorted(cur)
            if r < 0.35 and keys:
                k = keys[int(rng.integers(len(keys)))]
                dels.append((*k, cur.pop(k)))
            elif r < 0.6 and keys:
                k = keys[int(rng.integers(len(keys)))]
                dels.append((*k, cur[k]))
                cur[k] = int(rng.integers(1, 10))
                adds.append((*k, cur[k]))
            else:
                u, v = (int(x) for x in rng.integers(0, n, 2))
                if (u, v) not in cur:
                    cur[(u, v)] = int(rng.integers(1, 10))
                    adds.append((u, v, cur[(u, v)]))
        steps.append((adds, dels, dict(cur)))
    return edges, steps


def run_weighted(seed, workers, build, check, sources=(0, 1, 2)):
    initial, steps = weighted_stream(seed)
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edges", ["src", "dst", "w"], rows=[(u, v, w) for (u, v), w in initial.items()])
        s_in = eng.input("sources", ["source"], rows=[(s,) for s in sources])
        e_in.advance_to(1)
        s_in.advance_to(1)
        with eng.dataflow("g") as df:
            view = build(df.input("edges"), df.input("sources")).view("out")
        eng.wait(view)
        check(view.to_pandas(), initial, sources, 0)
        for epoch, (adds, dels, now) in enumerate(steps, start=1):
            if dels:
                e_in.remove(dels)
            if adds:
                e_in.insert(adds)
            e_in.advance_to(epoch + 1)
            s_in.advance_to(epoch + 1)
            eng.wait(view)
            check(view.to_pandas(), now, sources, epoch)


def weighted_digraph(edges):
    g = nx.DiGraph()
    for (u, v), w in edges.items():
        g.add_edge(u, v, w=w)
    return g


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sssp_many_sources_with_weight_changes(workers):
    from kpgnb.graphs import sssp

    def check(df, edges, sources, epoch):
        g = weighted_digraph(edges)
        g.add_nodes_from(sources)
        want = {(s, v): d for s in sources for v, d in nx.single_source_dijkstra_path_length(g, s, weight="w").items()}
        got = {(a, b): c for a, b, c in zip(df["source"].tolist(), df["node"].tolist(), df["dist"].tolist())}
        assert got == want, f"epoch {epoch}"
    run_weighted(3, workers, sssp, check)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_khop(workers):
    from kpgnb.graphs import khop

    def check(df, edges, sources, epoch):
        g = weighted_digraph(edges)
        g.add_nodes_from(sources)
        want = {(s, v): h for s in sources for v, h in nx.single_source_shortest_path_length(g, s, cutoff=3).items()}
        got = {(a, b): c for a, b, c in zip(df["source"].tolist(), df["node"].tolist(), df["hops"].tolist())}
        assert got == want, f"epoch {epoch}"
    run_weighted(4, workers, lambda e, s: khop(e.select("src", "dst"), s, 3), check)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pagerank_matches_power_iteration(workers):
    from kpgnb.graphs import pagerank

    def check(df, edges, sources, epoch):
        nodes = sorted({u for u, _ in edges} | {v for _, v in edges})
        deg = {u: sum(1 for a, _ in edges if a == u) for u in nodes}
        rank = {u: 0.15 for u in nodes}
        for _ in range(8):
            nxt = {u: 0.15 for u in nodes}
            for (u, v) in edges:
                nxt[v] += 0.85 * rank[u] / deg[u]
            rank = nxt
        got = dict(zip(df["node"].tolist(), df["rank"].tolist()))
        assert got.keys() == rank.keys(), f"epoch {epoch}"
        assert all(abs(got[u] - rank[u]) < 1e-9 for u in nodes), f"epoch {epoch}"
        assert len(df) == len(got)  # retractions cancel exactly: one row per node
    run_weighted(5, workers, lambda e, s: pagerank(e.select("src", "dst"), iterations=8), check)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_regular_path_query(workers):
    """(ab)* over labels derived from the weights (odd: a, even: b), against a product-graph search."""
    from kpgnb.graphs import rpq
    trans, accept = [(0, "a", 1), (1, "b", 0)], [0]

    def check(df, edges, sources, epoch):
        want = set()
        for s in sources:
            seen, todo = {(s, 0)}, [(s, 0)]
            while todo:
                v, q = todo.pop()
                for (u, x), w in edges.items():
                    lab = "a" if w % 2 else "b"
                    for q0, l0, q1 in trans:
                        if u == v and q0 == q and l0 == lab and (x, q1) not in seen:
                            seen.add((x, q1))
                            todo.append((x, q1))
            want |= {(s, v) for v, q in seen if q in accept}
        got = set(zip(df["source"].tolist(), df["node"].tolist()))
        assert got == want and len(df) == len(got), f"epoch {epoch}"

    def build(e, s):
        labelled = e.map(lambda src, dst, w: {"src": src, "label": np.where(w % 2 == 1, "a", "b").astype(object),
                                              "dst": dst})
        return rpq(labelled, s, trans, accept)
    run_weighted(6, workers, build, check)


def test_scc_takes_memory_full_and_refuses_the_top_level_modes():
    """DESIGN: the recursive graph queries take memory=; scc's propagations are nested, so only "full"."""
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(1, 2), (2, 1), (2, 3)])
        e.advance_to(1)
        with eng.dataflow("s") as df:
            v = scc(df.input("e"), memory="full").view("v")
        eng.wait(v)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == [(1, 2), (2, 1)]
        for kw in ({"memory": "jod"}, {"memory": "drop", "drop": kp.Drop(p=0.5)}):
            with pytest.raises(kp.SchemaError, match="scc: memory=.*inside a loop"):
                with eng.dataflow("s2") as df:
                    scc(df.input("e"), **kw).view("v2")
