"""Memory modes of the iterate-join-aggregate operators (issue 14): every mode gives the collection the
full differential computation gives, on every epoch, and networkx agrees.

Random graphs with random update streams (inserts, deletes, weight changes, batches of one edge and of
many, sources added and removed) at W = 1, 2, 3; the paper's running example; what eng.stats() reports;
and the errors for bad arguments."""
import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kpgnb as kp
from kpgnb import graphs

MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "det-degree": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2)),
    "prob-random": ("drop", kp.Drop(p=0.7, policy="random", tracker="bloom", bloom_bits=1 << 12)),
    "all-dropped": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
}


def rows(view, cols):
    df = view.to_pandas()
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


class Stream:
    """A random graph (unique (src, dst) pairs with weights) and its random changes, mirrored in an input."""

    def __init__(self, rng, n, m, weighted=True):
        self.rng, self.n, self.weighted = rng, n, weighted
        self.E = {}
        while len(self.E) < m:
            a, b = (int(x) for x in rng.integers(0, n, 2))
            self.E[(a, b)] = int(rng.integers(1, 10))

    def rows(self, items):
        return [(a, b, w) if self.weighted else (a, b) for (a, b), w in items]

    def change(self, session, size):
        """``size`` random changes: removals, weight changes and insertions."""
        ins, rem = [], []
        for _ in range(size):
            kind = self.rng.random()
            if self.E and kind < 0.35:
                k = list(self.E)[self.rng.integers(len(self.E))]
                rem.append((k, self.E.pop(k)))
            elif self.E and kind < 0.6 and self.weighted:
                k = list(self.E)[self.rng.integers(len(self.E))]
                rem.append((k, self.E[k]))
                self.E[k] = int(self.rng.integers(1, 10))
                ins.append((k, self.E[k]))
            else:
                a, b = (int(x) for x in self.rng.integers(0, self.n, 2))
                if (a, b) not in self.E:
                    self.E[(a, b)] = int(self.rng.integers(1, 10))
                    ins.append(((a, b), self.E[(a, b)]))
        # a weight changed twice in one batch: net out the intermediate rows
        net = {}
        for it in rem:
            net[it] = net.get(it, 0) - 1
        for it in ins:
            net[it] = net.get(it, 0) + 1
        if any(v < 0 for v in net.values()):
            session.remove(self.rows([k for k, v in net.items() if v < 0]))
        if any(v > 0 for v in net.values()):
            session.insert(self.rows([k for k, v in net.items() if v > 0]))

    def digraph(self):
        g = nx.DiGraph()
        g.add_nodes_from(range(max(self.n, 8)))  # (sources 0, 3, 7 even in small graphs)
        for (a, b), w in self.E.items():
            g.add_edge(a, b, w=w)
        return g


def same(a, b, close=False):
    """Equal rows; with ``close``, the last column (floats summed in another order) to 1e-9."""
    if not close:
        return a == b
    return (len(a) == len(b) and [r[:-1] for r in a] == [r[:-1] for r in b]
            and np.allclose([r[-1] for r in a], [r[-1] for r in b], rtol=1e-9, atol=1e-12))


def run_modes(workers, seed, build, cols, oracle, weighted=True, sources=True, epochs=8, n=24, m=60, close=False):
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    try:
        edges = eng.input("edges", ["src", "dst", "w"] if weighted else ["src", "dst"])
        srcs = eng.input("sources", ["source"]) if sources else None
        s = Stream(rng, n, m, weighted)
        edges.insert(s.rows(s.E.items()))
        live = {0, 3}
        if srcs is not None:
            srcs.insert([(x,) for x in sorted(live)])
        views = {}
        for label, (memory, drop) in MODES.items():
            with eng.dataflow(label.replace("-", "_")) as df:
                views[label] = build(df, memory, drop).view("out")
        for ep in range(1, epochs + 1):
            edges.advance_to(ep)
            if srcs is not None:
                srcs.advance_to(ep)
            for v in views.values():
                eng.wait(v, timeout=120)
            got = {label: rows(v, cols) for label, v in views.items()}
            expect = oracle(s, sorted(live))
            for label, g in got.items():
                assert same(g, got["full"], close), f"epoch {ep}: {label} differs from full"
            if expect is not None:
                assert same(got["full"], expect, close), f"epoch {ep}: full differs from the oracle"
            s.change(edges, 1 if ep % 2 else int(rng.integers(2, 12)))
            if srcs is not None and ep == 3:
                srcs.insert([(7,)])
                live.add(7)
            if srcs is not None and ep == 5:
                srcs.remove([(0,)])
                live.discard(0)
        return eng.stats()["ife"]
    finally:
        eng.close()


def sssp_oracle(s, live):
    g = s.digraph()
    return sorted((src, v, d) for src in live for v, d in nx.single_source_dijkstra_path_length(g, src, weight="w").items())


def khop_oracle(k):
    def oracle(s, live):
        g = s.digraph()
        return sorted((src, v, d) for src in live
                      for v, d in nx.single_source_shortest_path_length(g, src, cutoff=k).items())
    return oracle


def wcc_oracle(s, live):
    g = nx.Graph()
    g.add_edges_from(s.E)
    return sorted((v, min(c)) for c in nx.connected_components(g) for v in c)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sssp_modes_agree(workers):
    stats = run_modes(workers, 10 + workers,
                      lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop),
                      ["source", "node", "dist"], sssp_oracle)
    by_mode = {r["dataflow"]: r for r in stats}
    assert by_mode["jod"]["join_differences"] == 0 and by_mode["full"]["join_differences"] > 0
    assert by_mode["jod"]["state_differences"] < by_mode["full"]["state_differences"]
    assert by_mode["all_dropped"]["state_differences"] == 0 and by_mode["all_dropped"]["dropped"] > 0
    assert by_mode["all_dropped"]["recomputed"] > 0
    assert by_mode["prob_random"]["bytes"]["dropped_tracker"] == (1 << 12) // 8


@pytest.mark.parametrize("workers", [1, 3])
def test_khop_modes_agree(workers):
    run_modes(workers, 20 + workers,
              lambda df, mem, drop: graphs.khop(df.input("edges"), df.input("sources"), 3, memory=mem, drop=drop),
              ["source", "node", "hops"], khop_oracle(3), weighted=False)


@pytest.mark.parametrize("workers", [1, 2])
def test_wcc_modes_agree(workers):
    run_modes(workers, 30 + workers, lambda df, mem, drop: graphs.wcc(df.input("edges"), memory=mem, drop=drop),
              ["node", "label"], wcc_oracle, weighted=False, sources=False)


def pagerank_oracle(s, live, iterations=6, alpha=0.85):
    nodes = sorted({a for a, _ in s.E} | {b for _, b in s.E})
    rank = {v: 1 - alpha for v in nodes}
    outdeg = {}
    for a, _ in s.E:
        outdeg[a] = outdeg.get(a, 0) + 1
    for _ in range(iterations):
        new = {v: 1 - alpha for v in nodes}
        for a, b in s.E:
            new[b] += alpha * rank[a] / outdeg[a]
        rank = new
    return sorted(rank.items())


@pytest.mark.parametrize("workers", [1, 2])
def test_pagerank_modes_agree(workers):
    def build(df, mem, drop):
        return graphs.pagerank(df.input("edges"), iterations=6, memory=mem, drop=drop)
    run_modes(workers, 40 + workers, build, ["node", "rank"], pagerank_oracle, weighted=False, sources=False,
              close=True)


def rpq_oracle(s, live):
    # labels: an edge's weight parity is its label; the query is (odd)(even)*: one odd edge, then even ones
    out = set()
    for src in live:
        seen = {(src, 0)}
        todo = [(src, 0)]
        while todo:
            v, q = todo.pop()
            for (a, b), w in s.E.items():
                if a != v:
                    continue
                lab = w % 2
                nxt = 1 if (q == 0 and lab == 1) or (q == 1 and lab == 0) else None
                if nxt is not None and (b, nxt) not in seen:
                    seen.add((b, nxt))
                    todo.append((b, nxt))
        out |= {(src, v) for v, q in seen if q == 1}
    return sorted(out)


@pytest.mark.parametrize("workers", [1, 2])
def test_rpq_modes_agree(workers):
    def build(df, mem, drop):
        e = df.input("edges").map(lambda src, dst, w: {"src": src, "label": w % 2, "dst": dst})
        return graphs.rpq(e, df.input("sources"), [(0, 1, 1), (1, 0, 1)], accept=[1], memory=mem, drop=drop)
    run_modes(workers, 50 + workers, build, ["source", "node"], rpq_oracle)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), workers=st.sampled_from([1, 2, 3]), n=st.integers(4, 30),
       density=st.floats(0.5, 4.0))
def test_sssp_random_streams(seed, workers, n, density):
    run_modes(workers, seed, lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"),
                                                               memory=mem, drop=drop),
              ["source", "node", "dist"], sssp_oracle, epochs=6, n=n, m=max(1, int(n * density)))


def test_paper_running_example():
    """Figure 2 / Table 3: a->b 30, a->d 20, a->e 10, b->c 10, d->c 20, d->e 10, c->d 10 (a..e = 0..4);
    then a->d becomes 100 (G1), then b->c becomes 100 (G2)."""
    a, b, c, d, e = range(5)
    want = {0: {a: 0, b: 30, c: 40, d: 20, e: 10}, 1: {a: 0, b: 30, c: 40, d: 50, e: 10},
            2: {a: 0, b: 30, c: 120, d: 100, e: 10}}
    for memory, drop in MODES.values():
        eng = kp.Engine(workers=1)
        try:
            edges = eng.input("edges", ["src", "dst", "w"])
            srcs = eng.input("sources", ["source"])
            edges.insert([(a, b, 30), (a, d, 20), (a, e, 10), (b, c, 10), (d, c, 20), (d, e, 10), (c, d, 10)])
            srcs.insert([(a,)])
            with eng.dataflow("spsp") as df:
                v = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory, drop=drop).view("d")
            for g in range(3):
                edges.advance_to(g + 1)
                srcs.advance_to(g + 1)
                eng.wait(v, timeout=60)
                assert {node: dist for _, node, dist in rows(v, ["source", "node", "dist"])} == want[g], (memory, g)
                if g == 0:
                    edges.remove([(a, d, 20)]), edges.insert([(a, d, 100)])
                elif g == 1:
                    edges.remove([(b, c, 10)]), edges.insert([(b, c, 100)])
        finally:
            eng.close()


def test_float_weights_and_shared_edges():
    """Float weights; two SPSP dataflows share one exported edge arrangement."""
    eng = kp.Engine(workers=2)
    try:
        edges = eng.input("edges", ["src", "dst", "w"], dtypes={"w": "float64"})
        srcs = eng.input("sources", ["source"])
        edges.insert([(0, 1, 0.5), (1, 2, 0.25), (0, 2, 1.0), (2, 3, 2.0)])
        srcs.insert([(0,), (1,)])
        with eng.dataflow("index") as df:
            df.input("edges").arrange_by("src").export("edges_by_src")
        views = {}
        for memory in ("full", "jod"):
            with eng.dataflow(memory) as df:
                views[memory] = graphs.sssp(df.use("edges_by_src"), df.input("sources"), memory=memory).view("d")
        edges.advance_to(1), srcs.advance_to(1)
        for v in views.values():
            eng.wait(v, timeout=60)
        assert rows(views["jod"], ["source", "node", "dist"]) == rows(views["full"], ["source", "node", "dist"])
        assert (0, 3, 2.75) in rows(views["jod"], ["source", "node", "dist"])
    finally:
        eng.close()


def test_bad_arguments():
    eng = kp.Engine(workers=1)
    try:
        eng.input("edges", ["src", "dst", "w"])
        eng.input("sources", ["source"])
        with pytest.raises(kp.SchemaError, match="memory='jd'; choose one of"):
            with eng.dataflow("x") as df:
                graphs.sssp(df.input("edges"), df.input("sources"), memory="jd")
        with pytest.raises(kp.SchemaError, match="drop= applies to memory='drop' only"):
            with eng.dataflow("x") as df:
                graphs.sssp(df.input("edges"), df.input("sources"), memory="jod", drop=kp.Drop())
        with pytest.raises(kp.SchemaError, match="inside a loop use memory='full'"):
            with eng.dataflow("x") as df:
                s = df.input("sources").map(lambda source: {"source": source, "node": source, "dist": source * 0})
                s.iterate(lambda d: d.ife(df.input("edges"), key=["source", "node"], node="node", value="dist",
                                          message=lambda dist, w: dist + w, memory="jod"))
        with pytest.raises(kp.SchemaError, match="message parameter 'weight' is not"):
            with eng.dataflow("x") as df:
                s = df.input("sources").map(lambda source: {"source": source, "node": source, "dist": source * 0})
                s.ife(df.input("edges"), key=["source", "node"], node="node", value="dist",
                      message=lambda dist, weight: dist + weight, memory="jod")
        with pytest.raises(kp.SchemaError, match="symmetric= takes True or False"):
            with eng.dataflow("x") as df:
                s = df.input("sources").map(lambda source: {"source": source, "node": source, "dist": source * 0})
                s.ife(df.input("edges"), key=["source", "node"], node="node", value="dist",
                      message=lambda dist, w: dist + w, memory="jod", symmetric="yes")
        with pytest.raises(ValueError, match="policy='degre'"):
            kp.Drop(policy="degre")
        with pytest.raises(ValueError, match="p is a probability"):
            kp.Drop(p=1.5)
        assert eng.dataflows() == {} or "x" not in eng.dataflows()
    finally:
        eng.close()


def test_dashboard_shows_memory_modes():
    pytest.importorskip("ipywidgets")
    from kpgnb.widgets.memorymodes import MemoryModes
    from kpgnb.widgets.reading import Reading
    eng = kp.Engine(workers=1)
    try:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 2), (1, 2, 2)])
        srcs = eng.input("sources", ["source"], rows=[(0,)])
        part = MemoryModes()
        part.refresh(Reading.take(eng))
        assert part.value == "" and part.rows == []
        with eng.dataflow("q") as df:
            v = graphs.sssp(df.input("edges"), df.input("sources"), memory="jod").view("d")
        edges.advance_to(1), srcs.advance_to(1)
        eng.wait(v, timeout=60)
        part.refresh(Reading.take(eng))
        assert [r["mode"] for r in part.rows] == ["jod"] and part.rows[0]["state_differences"] > 0
        assert "Memory modes" in part.value and "jod" in part.value
    finally:
        eng.close()


def test_an_epoch_that_never_settles_can_be_dropped():
    """A jod epoch runs a round at a time and pauses when commands wait: a query that never converges (max
    along a positive cycle) neither blocks eng.drop nor the other dataflows."""
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1)])
        S = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("plain") as df:
            pv = df.input("edges").view("o")
        with eng.dataflow("loop") as df:
            s = df.input("sources").map(lambda source: {"source": source, "node": source, "x": source * 0})
            v = s.ife(df.input("edges"), key=["source", "node"], node="node", value="x",
                      message=lambda x, w: x + w, agg="max", memory="jod").view("o")
        E.advance_to(1), S.advance_to(1)
        eng.wait(v, timeout=60)
        E.insert([(1, 0, 1)])  # a positive cycle: max grows forever
        E.advance_to(2), S.advance_to(2)
        eng.drop("loop")
        E.insert([(5, 6, 1)])
        E.advance_to(3)
        eng.wait(pv, timeout=60)
        assert (5, 6, 1) in rows(pv, ["src", "dst", "w"])
    finally:
        eng.close()


@pytest.mark.parametrize("workers", [1, 3])
def test_symmetric_edges_give_the_answer_of_two_arrangements(workers):
    """ife(symmetric=True) reads in-neighbours from the arrangement by source; on edges that hold v -> u
    with the same weight for every u -> v it must agree with the arrangement by destination, epoch by epoch."""
    rng = np.random.default_rng(7 + workers)
    und = Stream(rng, 20, 30)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"])
        sources = eng.input("sources", ["source"], rows=[(0,), (3,)])

        def sym(items):
            return und.rows(items) + [(b, a, w) for (a, b), w in items]
        edges.insert(sym(und.E.items()))
        views = {}
        for memory in ("jod", "drop"):
            for symmetric in (False, True):
                with eng.dataflow(f"{memory}{symmetric}") as df:
                    s = df.input("sources").map(lambda source: {"source": source, "node": source,
                                                                "dist": source * 0})
                    d = s.ife(df.input("edges"), key=["source", "node"], node="node", value="dist",
                              message=lambda dist, w: dist + w, memory=memory, symmetric=symmetric)
                    views[memory, symmetric] = d.view("d")
        for epoch in range(1, 7):
            before = dict(und.E)
            und_change(und, rng)
            gone = [(k, w) for k, w in before.items() if und.E.get(k) != w]
            new = [(k, w) for k, w in und.E.items() if before.get(k) != w]
            if gone:
                edges.remove(sym(gone))
            if new:
                edges.insert(sym(new))
            edges.advance_to(epoch)
            sources.advance_to(epoch)
            eng.wait(None)
            got = {k: rows(v, ["source", "node", "dist"]) for k, v in views.items()}
            for memory in ("jod", "drop"):
                assert got[memory, True] == got[memory, False], (epoch, memory)
            assert got["jod", True], epoch


def und_change(und, rng):
    """Remove, reweight or add a few of ``und``'s undirected edges in place."""
    for _ in range(int(rng.integers(1, 6))):
        r = rng.random()
        if und.E and r < 0.4:
            k = list(und.E)[rng.integers(len(und.E))]
            del und.E[k]
        elif und.E and r < 0.6:
            k = list(und.E)[rng.integers(len(und.E))]
            und.E[k] = int(rng.integers(1, 10))
        else:
            a, b = (int(x) for x in rng.integers(0, und.n, 2))
            if a != b and (b, a) not in und.E:
                und.E[(a, b)] = int(rng.integers(1, 10))
