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
