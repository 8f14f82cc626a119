"""Attack: kpgnb.graphs in every memory mode (full, jod, drop with several kp.Drop variants) against
networkx on every epoch of a random multigraph stream: duplicate and parallel weighted edges, self
loops, zero weights, empty epochs, single-edge epochs and bursts, sources added/removed, and the
edges input running ahead of the sources input."""
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "d1": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2)),
    "d2": ("drop", kp.Drop(p=1.0, policy="random", tracker="bloom", bloom_bits=64, bloom_hashes=1)),
    "d3": ("drop", kp.Drop(p=0.3, policy="random", tracker="exact", seed=7)),
    "d4": ("drop", kp.Drop(p=0.9, policy="degree", tracker="bloom", tau_min=0, tau_max_percentile=0.0,
                           bloom_bits=1 << 10)),
}


class MultiStream:
    def __init__(self, rng, n):
        self.rng, self.n = rng, n
        self.E = Counter()  # (src, dst, w) -> multiplicity

    def step(self, session, size):
        ins, rem = [], []
        for _ in range(size):
            r = self.rng.random()
            live = [k for k, m in self.E.items() if m > 0]
            if live and r < 0.4:
                k = live[self.rng.integers(len(live))]
                rem.append(k)
                self.E[k] -= 1
            elif live and r < 0.5:
                k = live[self.rng.integers(len(live))]  # duplicate an existing edge
                ins.append(k)
                self.E[k] += 1
            else:
                a, b = (int(x) for x in self.rng.integers(0, self.n, 2))
                if self.rng.random() < 0.1:
                    b = a
                k = (a, b, int(self.rng.integers(0, 5)))
                ins.append(k)
                self.E[k] += 1
        net = Counter(ins)
        net.subtract(Counter(rem))
        rows = [k for k, v in net.items() if v]
        if rows:
            session.update(rows, [net[k] for k in rows])

    def graph(self):
        g = nx.DiGraph()
        for (a, b, w), m in self.E.items():
            if m > 0 and (not g.has_edge(a, b) or g[a][b]["w"] > w):
                g.add_edge(a, b, w=w)
        return g


def rows(view, cols):
    df = view.to_pandas()
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


def o_sssp(s, src):
    g = s.graph()
    g.add_nodes_from(src)
    return sorted((x, v, d) for x in src for v, d in nx.single_source_dijkstra_path_length(g, x, weight="w").items())


def o_khop(k):
    def o(s, src):
        g = s.graph()
        g.add_nodes_from(src)
        return sorted((x, v, d) for x in src for v, d in nx.single_source_shortest_path_length(g, x, cutoff=k).items())
    return o


def o_wcc(s, src):
    g = nx.Graph()
    g.add_edges_from((a, b) for (a, b, _), m in s.E.items() if m > 0)
    return sorted((v, min(c)) for c in nx.connected_components(g) for v in c)


def o_pagerank(s, src, iterations=4, alpha=0.85):
    es = sorted({(a, b) for (a, b, _), m in s.E.items() if m > 0})
    nodes = sorted({a for a, _ in es} | {b for _, b in es})
    rank = {v: 1 - alpha for v in nodes}
    outdeg = Counter(a for a, _ in es)
    for _ in range(iterations):
        new = {v: 1 - alpha for v in nodes}
        for a, b in es:
            new[b] += alpha * rank[a] / outdeg[a]
        rank = new
    return sorted(rank.items())


def o_rpq(s, src):
    out = set()
    g = [(a, b, w % 2) for (a, b, w), m in s.E.items() if m > 0]
    for x in src:
        seen = {(x, 0)}
        todo = [(x, 0)]
        while todo:
            v, q = todo.pop()
            for a, b, lab in g:
                if a == v:
                    nxt = 1 if (q == 0 and lab == 1) or (q == 1 and lab == 0) else None
                    if nxt is not None and (b, nxt) not in seen:
                        seen.add((b, nxt))
                        todo.append((b, nxt))
        out |= {(x, v) for v, q in seen if q == 1}
    return sorted(out)


ALGOS = {
    "sssp": (lambda e, s, m, d: graphs.sssp(e, s, memory=m, drop=d), ["source", "node", "dist"], o_sssp, False),
    "khop": (lambda e, s, m, d: graphs.khop(e.select("src", "dst"), s, 2, memory=m, drop=d),
             ["source", "node", "hops"], o_khop(2), False),
    "wcc": (lambda e, s, m, d: graphs.wcc(e.select("src", "dst"), memory=m, drop=d), ["node", "label"], o_wcc, False),
    "pagerank": (lambda e, s, m, d: graphs.pagerank(e.select("src", "dst").distinct(), iterations=4, memory=m, drop=d),
                 ["node", "rank"], o_pagerank, True),
    "rpq": (lambda e, s, m, d: graphs.rpq(e.map(lambda src, dst, w: {"src": src, "label": w % 2, "dst": dst}), s,
                                          [(0, 1, 1), (1, 0, 1)], accept=[1], memory=m, drop=d),
            ["source", "node"], o_rpq, False),
}


def close_rows(a, b):
    return (len(a) == len(b) and [r[:-1] for r in a] == [r[:-1] for r in b]
            and np.allclose([r[-1] for r in a], [r[-1] for r in b], rtol=1e-9, atol=1e-12))


def run_algo(name, workers, seed, epochs=14, n=14):
    build, cols, oracle, approx = ALGOS[name]
    rng = np.random.default_rng(seed)
    s = MultiStream(rng, n)
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edges", ["src", "dst", "w"])
        s_in = eng.input("sources", ["source"])
        s.step(e_in, 20)
        live = {0, 3}
        s_in.insert([(x,) for x in sorted(live)])
        views = {}
        for label, (mem, drop) in MODES.items():
            with eng.dataflow(label) as df:
                views[label] = build(df.input("edges"), df.input("sources"), mem, drop).view("out")
        e_ep = s_ep = 0
        for ep in range(epochs):
            r = rng.random()
            size = 0 if r < 0.2 else (1 if r < 0.6 else int(rng.integers(5, 25)))
            s.step(e_in, size)
            # the edges run ahead of the sources now and then: the views then show the state at the sources' epoch
            e_ep += 1
            e_in.advance_to(e_ep)
            if rng.random() < 0.7 or ep == epochs - 1:
                target = e_ep
            else:
                target = s_ep
            if target > s_ep:
                s_ep = target
                s_in.advance_to(s_ep)
            for v in views.values():
                eng.wait(v, timeout=120)
            if s_ep == e_ep:
                want = oracle(s, sorted(live))
                for label, v in views.items():
                    got = rows(v, cols)
                    ok = close_rows(got, want) if approx else got == want
                    assert ok, (name, label, ep, sorted(set(got) ^ set(want))[:10])
            if rng.random() < 0.3:
                x = int(rng.integers(0, n))
                if x in live:
                    s_in.remove([(x,)])
                    live.discard(x)
                else:
                    s_in.insert([(x,)])
                    live.add(x)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(ALGOS))
def test_graph_modes_vs_networkx(name, workers, seed):
    run_algo(name, workers, seed=sorted(ALGOS).index(name) * 100 + 17 * workers + 1000 * seed,
             epochs=30, n=10 + 6 * seed)


def test_bfs_reachable_multigraph():
    for workers in (1, 2, 3):
        rng = np.random.default_rng(3 + workers)
        s = MultiStream(rng, 12)
        with kp.Engine(workers=workers) as eng:
            e_in = eng.input("edges", ["src", "dst", "w"])
            r_in = eng.input("roots", ["node"])
            s.step(e_in, 15)
            r_in.insert([(0,), (5,)])
            with eng.dataflow("g") as df:
                e = df.input("edges").select("src", "dst")
                vb = graphs.bfs(e, df.input("roots")).view("bfs")
                vr = graphs.reachable(e, df.input("roots")).view("reach")
            for ep in range(1, 16):
                e_in.advance_to(ep)
                r_in.advance_to(ep)
                eng.wait(vb)
                eng.wait(vr)
                g = s.graph()
                g.add_nodes_from([0, 5])
                want = nx.multi_source_dijkstra_path_length(g, {0, 5})
                assert rows(vb, ["node", "dist"]) == sorted(want.items()), (workers, ep)
                assert rows(vr, ["node"]) == sorted((v,) for v in want), (workers, ep)
                s.step(e_in, int(rng.integers(0, 6)))
