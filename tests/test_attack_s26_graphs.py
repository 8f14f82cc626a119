"""Session-26 attack on kpgnb.graphs (sssp, khop, wcc, pagerank, rpq, scc, bfs, reachable) and the memory
modes of ``Collection.ife`` (issue 14): random graphs with self-loops, multiplicity-2 edges, isolated
nodes, source-only nodes, negative and huge (int64 extreme) node ids, disconnected parts and cycles, under
random update streams; every epoch is checked against a from-scratch Python oracle AND across the modes
full / jod / drop (policy degree|random, tracker exact|bloom, p in {0, 0.3, 1}, tau extremes), at W=1,2,3.

Tests named ``test_bug_*`` keep minimal deterministic repros of mismatches found (they fail until fixed)."""
from __future__ import annotations

import heapq
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from readback import close_enough, read
from test_memory_modes_attack import pagerank_oracle

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "deg-exact-p0": ("drop", kp.Drop(p=0.0, policy="degree", tracker="exact")),
    "deg-bloom-p.3-tau0-pct0": ("drop", kp.Drop(p=0.3, policy="degree", tracker="bloom", bloom_bits=64,
                                                tau_min=0, tau_max_percentile=0.0)),
    "deg-exact-p1-tau100-pct100": ("drop", kp.Drop(p=1.0, policy="degree", tracker="exact", tau_min=100,
                                                   tau_max_percentile=100.0)),
    "rnd-exact-p1": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
    "rnd-bloom-p.3": ("drop", kp.Drop(p=0.3, policy="random", tracker="bloom", bloom_bits=64, seed=3)),
    "deg-bloom-p1-pct100": ("drop", kp.Drop(p=1.0, policy="degree", tracker="bloom", tau_min=0,
                                            tau_max_percentile=100.0, bloom_bits=1 << 12)),
}


# -- oracles (from scratch, over multisets: an edge is present while its net count is positive) ---------
def live(c: Counter):
    return [k for k, v in c.items() if v > 0]


def o_sssp(edges, sources):
    adj = {}
    for a, b, w in live(edges):
        adj.setdefault(a, []).append((b, w))
    out = []
    for s in live(sources):
        dist = {s: 0}
        pq = [(0, s)]
        while pq:
            d, v = heapq.heappop(pq)
            if d > dist[v]:
                continue
            for b, w in adj.get(v, ()):
                if b not in dist or d + w < dist[b]:
                    dist[b] = d + w
                    heapq.heappush(pq, (d + w, b))
        out += [(s, v, d) for v, d in dist.items()]
    return sorted(out)


def o_khop(k):
    def oracle(edges, sources):
        adj = {}
        for a, b, *_ in live(edges):
            adj.setdefault(a, set()).add(b)
        out = []
        for s in live(sources):
            hops, frontier = {s: 0}, [s]
            for h in range(1, k + 1):
                nxt = []
                for v in frontier:
                    for b in adj.get(v, ()):
                        if b not in hops:
                            hops[b] = h
                            nxt.append(b)
                frontier = nxt
            out += [(s, v, d) for v, d in hops.items()]
        return sorted(out)
    return oracle


def o_wcc(edges, _=None):
    parent = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b, *_ in live(edges):
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return sorted((v, min(u for u in parent if find(u) == find(v))) for v in parent)


o_pagerank = pagerank_oracle


def o_rpq(trans, accept, start_state=0, label=lambda w: w % 2):
    def oracle(edges, sources):
        E = [(a, b, label(w)) for a, b, w in live(edges)]
        out = set()
        for s in live(sources):
            seen, todo = {(s, start_state)}, [(s, start_state)]
            while todo:
                v, q = todo.pop()
                for a, b, lab in E:
                    if a != v:
                        continue
                    for q0, l0, q1 in trans:
                        if q0 == q and l0 == lab and (b, q1) not in seen:
                            seen.add((b, q1))
                            todo.append((b, q1))
            out |= {(s, v) for v, q in seen if q in set(accept)}
        return sorted(out)
    return oracle


def o_scc(edges, _=None):
    """Edges whose endpoints lie in one strongly connected component (one row per live edge, as a set)."""
    es = {(a, b) for a, b, *_ in live(edges)}
    adj, radj = {}, {}
    for a, b in es:
        adj.setdefault(a, set()).add(b)
        radj.setdefault(b, set()).add(a)

    def reach(s, g):
        seen, todo = {s}, [s]
        while todo:
            v = todo.pop()
            for b in g.get(v, ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen
    return sorted((a, b) for a, b in es if b in reach(a, adj) and a in reach(b, adj))


# -- harness ------------------------------------------------------------------------------------------
class Multi:
    """One engine, one dataflow per mode on the shared inputs; ``close()`` ends an epoch and checks it."""

    def __init__(self, workers, build, cols, oracle=None, modes=MODES, edge_cols=("src", "dst", "w"),
                 approx=False, set_compare=False):
        self.eng = kp.Engine(workers=workers)
        self.E = self.eng.input("edges", list(edge_cols))
        self.S = self.eng.input("sources", ["source"])
        self.cols, self.oracle, self.approx, self.set_compare = cols, oracle, approx, set_compare
        self.build, self.modes = build, modes
        self.edges, self.sources = Counter(), Counter()
        self.views, self.ep = {}, 0

    def install(self):
        for label, (memory, drop) in self.modes.items():
            with self.eng.dataflow(label) as df:
                self.views[label] = self.build(df, memory, drop).view("out")
        return self

    def edge(self, rows, diffs):
        if rows:
            self.E.update([tuple(r) for r in rows], list(diffs))
            for r, d in zip(rows, diffs):
                self.edges[tuple(r)] += d

    def source(self, rows, diffs):
        if rows:
            self.S.update([(s,) for s in rows], list(diffs))
            for s, d in zip(rows, diffs):
                self.sources[s] += d

    def close(self):
        self.ep += 1
        self.E.advance_to(self.ep)
        self.S.advance_to(self.ep)
        for v in self.views.values():
            self.eng.wait(v, timeout=120)
        got = {label: read(v, self.cols) for label, v in self.views.items()}
        same = close_enough if self.approx else (lambda a, b: a == b)
        ref = got["full"]
        if self.set_compare:
            ref = sorted(set(ref))
        if self.oracle is not None:
            want = self.oracle(self.edges, self.sources)
            assert same(ref, want), (f"epoch {self.ep - 1}: full vs oracle: only full {sorted(set(ref) - set(want))[:6]}"
                                     f", only oracle {sorted(set(want) - set(ref))[:6]}")
        for label, g in got.items():
            assert same(g, got["full"]), (f"epoch {self.ep - 1}: {label} differs from full: only {label} "
                                          f"{sorted(set(g) - set(got['full']))[:6]}, only full "
                                          f"{sorted(set(got['full']) - set(g))[:6]}")
        return got

    def ife_stats(self):
        return {r["dataflow"]: r for r in self.eng.stats()["ife"]}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.eng.close()


ODD_IDS = [I64_MIN, I64_MIN + 1, -7, -1, 0, 1, 2, 3, 5, 8, 1 << 40, I64_MAX - 1, I64_MAX]


def random_stream(seed, n_nodes=9, m0=14, epochs=6, weights=(0, 5), odd_ids=True, max_batch=6, no_min=False):
    """(initial edges, initial sources, steps); a step is (edge rows, edge diffs, source rows, source diffs)."""
    rng = np.random.default_rng(seed)
    pool = [x for x in ODD_IDS if not (no_min and x == I64_MIN)]
    ids = list(rng.choice(pool, size=n_nodes, replace=False)) if odd_ids else list(range(n_nodes))
    ids = [int(x) for x in ids]

    def rnd_edge():
        a = ids[int(rng.integers(len(ids) - 1))]          # the last id only ever gets in-edges / isolated
        b = ids[int(rng.integers(len(ids)))] if rng.random() > 0.15 else a   # self-loops
        return (a, b, int(rng.integers(weights[0], weights[1] + 1)))
    edges0 = [rnd_edge() for _ in range(m0)]
    edges0 += edges0[:2]                                    # multiplicity 2
    sources0 = [ids[0], ids[-1]]                            # ids[-1]: maybe no out-edges
    cur = Counter(edges0)
    scur = Counter(sources0)
    steps = []
    for ep in range(epochs):
        rows, diffs = [], []
        size = int(rng.choice([1, 1, 2, max_batch]))
        for _ in range(size):
            kind = rng.choice(["new", "del", "flash", "dup", "reweight", "deltwice"])
            lv = sorted(k for k, v in cur.items() if v > 0)
            if kind == "new" or not lv:
                e = rnd_edge()
                rows.append(e), diffs.append(1)
                cur[e] += 1
            elif kind == "del":
                e = lv[int(rng.integers(len(lv)))]
                rows.append(e), diffs.append(-1)
                cur[e] -= 1
            elif kind == "flash":
                e = rnd_edge()
                rows += [e, e]
                diffs += [1, -1]
            elif kind == "dup":
                e = lv[int(rng.integers(len(lv)))]
                rows.append(e), diffs.append(1)
                cur[e] += 1
            elif kind == "reweight":
                e = lv[int(rng.integers(len(lv)))]
                e2 = (e[0], e[1], int(rng.integers(weights[0], weights[1] + 1)))
                rows += [e, e2]
                diffs += [-1, 1]
                cur[e] -= 1
                cur[e2] += 1
            else:                                           # remove every copy, one diff each
                e = lv[int(rng.integers(len(lv)))]
                c = cur[e]
                rows += [e] * c
                diffs += [-1] * c
                cur[e] = 0
        srows, sdiffs = [], []
        if rng.random() < 0.5:
            s = ids[int(rng.integers(len(ids)))] if rng.random() < 0.8 else 123456789   # 123456789: no node
            srows.append(s), sdiffs.append(1)
            scur[s] += 1
        if rng.random() < 0.3:
            ls = sorted(k for k, v in scur.items() if v > 0)
            if ls:
                s = ls[int(rng.integers(len(ls)))]
                srows.append(s), sdiffs.append(-1)
                scur[s] -= 1
        steps.append((rows, diffs, srows, sdiffs))
    return edges0, sources0, steps


def play(m: Multi, stream):
    edges0, sources0, steps = stream
    m.edge(edges0, [1] * len(edges0))
    m.source(sources0, [1] * len(sources0))
    m.install()
    m.close()
    for rows, diffs, srows, sdiffs in steps:
        m.edge(rows, diffs)
        m.source(srows, sdiffs)
        m.close()
    return m


# -- builders -----------------------------------------------------------------------------------------
def b_sssp(df, memory, drop):
    return graphs.sssp(df.input("edges"), df.input("sources"), memory=memory, drop=drop)


def b_khop(k):
    return lambda df, memory, drop: graphs.khop(df.input("edges").select("src", "dst"), df.input("sources"), k,
                                                memory=memory, drop=drop)


def b_wcc(df, memory, drop):
    return graphs.wcc(df.input("edges"), memory=memory, drop=drop)


def b_pagerank(iterations, alpha=0.85):
    return lambda df, memory, drop: graphs.pagerank(df.input("edges"), iterations=iterations, alpha=alpha,
                                                    memory=memory, drop=drop)


def b_rpq(trans, accept, start_state=0):
    def build(df, memory, drop):
        e = df.input("edges").map(lambda src, dst, w: {"src": src, "label": w % 2, "dst": dst})
        return graphs.rpq(e, df.input("sources"), trans, accept, start_state=start_state, memory=memory, drop=drop)
    return build


SEEDS_W = [(0, 1), (1, 2), (2, 3), (3, 1), (4, 2), (5, 3)]


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_sssp_odd_ids_random_streams(seed, workers):
    with Multi(workers, b_sssp, ["source", "node", "dist"], o_sssp) as m:
        play(m, random_stream(seed))


@pytest.mark.parametrize("k", [0, 1, 3, 1000])
@pytest.mark.parametrize("seed, workers", SEEDS_W[:3])
def test_khop_odd_ids_random_streams(seed, workers, k):
    with Multi(workers, b_khop(k), ["source", "node", "hops"], o_khop(k)) as m:
        play(m, random_stream(seed + 10))


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_wcc_odd_ids_random_streams(seed, workers):
    with Multi(workers, b_wcc, ["node", "label"], o_wcc) as m:
        play(m, random_stream(seed + 20, no_min=True))   # int64 min: see test_bug_wcc_jod_int64_min_node


@pytest.mark.parametrize("iterations", [1, 3, 7])
@pytest.mark.parametrize("seed, workers", SEEDS_W[:3])
def test_pagerank_odd_ids_random_streams(seed, workers, iterations):
    with Multi(workers, b_pagerank(iterations), ["node", "rank"], o_pagerank(iterations), approx=True) as m:
        play(m, random_stream(seed + 30))


RPQ_CASES = {
    # (transitions, accept, start_state)
    "odd-then-even*": ([(0, 1, 1), (1, 0, 1)], [1], 0),
    "empty-language": ([(0, 1, 1), (1, 0, 0)], [], 0),
    "no-transitions-accept-start": ([], [0], 0),           # epsilon only: each source reaches itself
    "accept-start-and-loop": ([(0, 0, 0), (0, 1, 0)], [0], 0),
    "unreachable-accept": ([(0, 1, 1)], [5], 0),
    "start-state-not-in-automaton": ([(0, 1, 1), (1, 1, 0)], [0, 7], 7),
    "nondeterministic": ([(0, 1, 0), (0, 1, 1), (1, 0, 2), (2, 1, 2)], [2], 0),
}


@pytest.mark.parametrize("case", sorted(RPQ_CASES))
@pytest.mark.parametrize("seed, workers", SEEDS_W[:3])
def test_rpq_automata_random_streams(seed, workers, case):
    trans, accept, q0 = RPQ_CASES[case]
    with Multi(workers, b_rpq(trans, accept, q0), ["source", "node"], o_rpq(trans, accept, q0)) as m:
        play(m, random_stream(seed + 40))


# -- bugs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("memory", ["jod", "drop"])
def test_wcc_jod_refuses_the_int64_minimum_as_a_node_id(memory):
    """jod and drop keep int64 min as their "no state" marker, and a wcc label is a node id: the dataflow
    fails saying so (documented in wcc's docstring) instead of answering wrong, and full answers."""
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst"], rows=[(I64_MIN, 1), (2, 3)])
        with eng.dataflow("w") as df:
            v = graphs.wcc(df.input("edges"), memory=memory).view("out")
        with eng.dataflow("f") as df:
            f = graphs.wcc(df.input("edges")).view("out")
        E.advance_to(1)
        with pytest.raises(kp.DataflowError, match="int64 minimum"):
            eng.wait(v, timeout=60)
        eng.wait(f, timeout=60)
        assert read(f, ["node", "label"]) == [(I64_MIN, I64_MIN), (1, I64_MIN), (2, 2), (3, 2)]
    finally:
        eng.close()


# -- scc, bfs, reachable (memory="full" only) on odd ids --------------------------------------------
def o_bfs(edges, roots):
    adj = {}
    for a, b, *_ in live(edges):
        adj.setdefault(a, set()).add(b)
    dist = {}
    frontier = [r for r in live(roots)]
    for r in frontier:
        dist[r] = 0
    d = 0
    while frontier:
        d += 1
        nxt = []
        for v in frontier:
            for b in adj.get(v, ()):
                if b not in dist:
                    dist[b] = d
                    nxt.append(b)
        frontier = nxt
    return sorted(dist.items())


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_scc_bfs_reachable_odd_ids_random_streams(seed, workers):
    def build(df, memory, drop):
        e = df.input("edges").select("src", "dst")
        return graphs.scc(e)
    with Multi(workers, build, ["src", "dst"], o_scc, modes={"full": MODES["full"]}, set_compare=True) as m:
        edges0, sources0, steps = random_stream(seed + 50)
        m.edge(edges0, [1] * len(edges0))
        m.install()
        eng = m.eng
        with eng.dataflow("bfs") as df:
            roots = df.input("sources").map(lambda source: {"node": source})
            vb = graphs.bfs(df.input("edges").select("src", "dst"), roots).view("out")
            vr = graphs.reachable(df.input("edges").select("src", "dst"), roots).view("reach")
        m.source(sources0, [1] * len(sources0))
        for step in [None] + list(steps):
            if step is not None:
                rows, diffs, srows, sdiffs = step
                m.edge(rows, diffs)
                m.source(srows, sdiffs)
            got = m.close()["full"]
            # scc: one row per live (src, dst) pair inside a component; duplicates keep their multiplicity
            assert sorted(set(got)) == o_scc(m.edges)
            want = o_bfs(m.edges, m.sources)
            assert read(vb, ["node", "dist"]) == want, f"bfs epoch {m.ep - 1}"
            assert read(vr, ["node"]) == [(v,) for v, _ in want], f"reachable epoch {m.ep - 1}"


# -- eng.stats()["ife"] ---------------------------------------------------------------------------------
STAT_MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "p0": ("drop", kp.Drop(p=0.0, policy="random", tracker="exact")),
    "p1": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
    "p.3": ("drop", kp.Drop(p=0.3, policy="random", tracker="exact")),
    "p.3b": ("drop", kp.Drop(p=0.3, policy="random", tracker="bloom", bloom_bits=1 << 10)),
    "deg": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2)),
    "deg-none": ("drop", kp.Drop(p=0.0, policy="degree", tracker="exact", tau_min=0, tau_max_percentile=0.0)),
}
KEYS = {"dataflow", "operator", "mode", "state_differences", "join_differences", "dropped", "dropped_total",
        "recomputed", "bytes"}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ife_stats_consistent(workers):
    with Multi(workers, b_sssp, ["source", "node", "dist"], o_sssp, modes=STAT_MODES) as m:
        edges0, sources0, steps = random_stream(7, n_nodes=12, m0=30, epochs=7, odd_ids=False)
        m.edge(edges0, [1] * len(edges0))
        m.source(sources0, [1] * len(sources0))
        m.install()
        prev = None
        for step in [None] + list(steps):
            if step is not None:
                m.edge(step[0], step[1])
                m.source(step[2], step[3])
            m.close()
            s = m.ife_stats()
            assert set(s) == set(STAT_MODES)
            for label, r in s.items():
                assert KEYS <= set(r), (label, sorted(KEYS - set(r)))
                assert r["mode"] == STAT_MODES[label][0]
                assert set(r["bytes"]) == {"state", "join", "dropped_tracker"}
                assert all(isinstance(v, int) and v >= 0 for v in r["bytes"].values()), (label, r["bytes"])
                for k in ("state_differences", "join_differences", "dropped", "dropped_total", "recomputed"):
                    assert isinstance(r[k], int) and r[k] >= 0, (label, k, r[k])
                assert r["dropped"] <= r["dropped_total"], (label, r)
                if r["mode"] != "drop":
                    assert r["dropped"] == r["dropped_total"] == r["recomputed"] == 0, (label, r)
                    assert r["bytes"]["dropped_tracker"] == 0
                if r["mode"] != "full":
                    assert r["join_differences"] == 0 and r["bytes"]["join"] == 0
                if r["dropped_total"] == 0:
                    assert r["recomputed"] == 0, (label, r)       # nothing dropped: nothing to recompute
                if prev is not None:
                    for k in ("dropped_total", "recomputed", "evaluated", "rounds", "join_rows", "epochs"):
                        if k in r:
                            assert r[k] >= prev[label][k], (label, k)
                    if prev[label]["dropped_total"] == 0 and label != "full":
                        pass
            assert s["full"]["join_differences"] > 0 and s["full"]["bytes"]["join"] > 0
            for label in ("p0", "deg-none"):
                assert s[label]["dropped_total"] == 0
                assert s[label]["state_differences"] == s["jod"]["state_differences"]
                assert s[label]["evaluated"] == s["jod"]["evaluated"]
            assert s["p1"]["state_differences"] == 0 and s["p1"]["bytes"]["state"] == 0
            assert s["p1"]["dropped_total"] > 0
            assert s["p.3b"]["bytes"]["dropped_tracker"] == (1 << 10) // 8
            prev = s


# -- bad input: clear kp.KpgnbError subclasses, engine usable afterwards ----------------------------
def _engine():
    eng = kp.Engine(workers=2)
    E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1), (1, 2, 2)])
    S = eng.input("sources", ["source"], rows=[(0,)])
    eng.input("lab", ["src", "label", "dst"], dtypes=["int64", "str", "int64"], rows=[(0, "a", 1)])
    eng.input("e2", ["a", "b"], rows=[(0, 1)])
    eng.input("fsources", ["source"], dtypes=["float64"], rows=[(0.0,)])
    with eng.dataflow("ok") as df:
        ok = graphs.sssp(df.input("edges"), df.input("sources"), memory="jod").view("out")
    return eng, E, S, ok


def _still_usable(eng, E, S, ok):
    assert set(eng.dataflows()) == {"ok"}
    E.insert([(2, 3, 4)])
    for h in eng.inputs().values():
        h.advance_to(1)
    eng.wait(ok, timeout=60)
    assert read(ok, ["source", "node", "dist"]) == [(0, 0, 0), (0, 1, 1), (0, 2, 3), (0, 3, 7)]


SCHEMA_CASES = {   # refused today with a kp.SchemaError, as they should be
    "sssp-no-w": lambda df: graphs.sssp(df.input("e2"), df.input("sources")),
    "sssp-sources-float": lambda df: graphs.sssp(df.input("edges"), df.input("fsources")),
    "sssp-memory-bogus": lambda df: graphs.sssp(df.input("edges"), df.input("sources"), memory="bogus"),
    "sssp-drop-with-full": lambda df: graphs.sssp(df.input("edges"), df.input("sources"), drop=kp.Drop()),
    "khop-no-src": lambda df: graphs.khop(df.input("e2"), df.input("sources"), 2),
    "wcc-jod-with-drop": lambda df: graphs.wcc(df.input("edges"), memory="jod", drop=kp.Drop()),
    "rpq-no-label": lambda df: graphs.rpq(df.input("edges"), df.input("sources"), [(0, 1, 1)], [1]),
    "scc-no-dst": lambda df: graphs.scc(df.input("e2")),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_bad_graph_input_schema_errors(case):
    eng, E, S, ok = _engine()
    try:
        with pytest.raises(kp.SchemaError):
            with eng.dataflow("bad") as df:
                SCHEMA_CASES[case](df).view("out")
        _still_usable(eng, E, S, ok)
    finally:
        eng.close()


BUG_CASES = {   # refused, but with a plain builtins.ValueError, not a kp.KpgnbError
    "khop-k-negative": lambda df: graphs.khop(df.input("edges"), df.input("sources"), -1),
    "khop-k-float": lambda df: graphs.khop(df.input("edges"), df.input("sources"), 1.5),
    "pagerank-iterations-0": lambda df: graphs.pagerank(df.input("edges"), iterations=0),
    "pagerank-iterations-float": lambda df: graphs.pagerank(df.input("edges"), iterations=2.0),
    "rpq-int-labels-on-str-column": lambda df: graphs.rpq(df.input("lab"), df.input("sources"), [(0, 1, 1)], [1]),
    "rpq-transition-not-a-triple": lambda df: graphs.rpq(df.input("lab"), df.input("sources"), [(0, "a")], [1]),
    "rpq-state-not-an-int": lambda df: graphs.rpq(df.input("lab"), df.input("sources"), [("q", "a", 1)], [1]),
    "drop-p-out-of-range": lambda df: graphs.sssp(df.input("edges"), df.input("sources"), memory="drop",
                                                  drop=kp.Drop(p=2.0)),
}


@pytest.mark.parametrize("case", sorted(BUG_CASES))
def test_bug_graph_argument_errors_are_not_kpgnb_errors(case):
    """README 'Errors': 'Every error kpgnb raises on purpose derives from kp.KpgnbError'. These argument
    checks in kpgnb/graphs.py (khop's k, pagerank's iterations, rpq's labels) and engine/dropping.py
    (kp.Drop's knobs) raise a bare builtins.ValueError; malformed rpq transitions leak an unpacking/int()
    ValueError. (The engine stays usable; only the error class is wrong.)"""
    eng, E, S, ok = _engine()
    try:
        with pytest.raises(ValueError) as info:
            with eng.dataflow("bad") as df:
                BUG_CASES[case](df).view("out")
        assert isinstance(info.value, kp.KpgnbError), f"{type(info.value).__module__}.{type(info.value).__name__}: {info.value}"
        _still_usable(eng, E, S, ok)
    finally:
        eng.close()


@pytest.mark.parametrize("memory", ["full", "jod", "drop"])
def test_negative_weight_at_run_time_fails_only_its_dataflow(memory):
    eng = kp.Engine(workers=2)
    try:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1), (1, 2, 2)])
        S = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("ok") as df:      # same edges, no weight check
            ok = graphs.khop(df.input("edges"), df.input("sources"), 5, memory=memory).view("out")
        with eng.dataflow("neg") as df:
            bad = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("out")
        E.insert([(1, 5, -3)])
        E.advance_to(1)
        S.advance_to(1)
        with pytest.raises(kp.KpgnbError, match="negative"):
            eng.wait(bad, timeout=60)
        eng.wait(ok, timeout=60)
        assert read(ok, ["source", "node", "hops"]) == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 5, 2)]
        eng.drop("neg")
        E.remove([(1, 5, -3)])
        E.advance_to(2)
        S.advance_to(2)
        eng.wait(ok, timeout=60)
        with eng.dataflow("later") as df:   # installed once the negative edge is gone
            later = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("out")
        E.advance_to(3)
        S.advance_to(3)
        eng.wait(later, timeout=60)
        eng.wait(ok, timeout=60)
        assert read(later, ["source", "node", "dist"]) == [(0, 0, 0), (0, 1, 1), (0, 2, 3)]
        assert read(ok, ["source", "node", "hops"]) == [(0, 0, 0), (0, 1, 1), (0, 2, 2)]
    finally:
        eng.close()


@pytest.mark.parametrize("memory", ["full", "jod", "drop"])
def test_bug_sssp_int_weights_overflow_silently(memory):
    """Non-negative int64 weights whose path sum exceeds int64: full wraps around and reports node 2 at
    distance -2**63 (a negative shortest distance over non-negative weights; node 3 at -2**62); jod/drop
    fail with 'a state of -9223372036854775808 (the int64 minimum) cannot be kept', which blames the
    memory mode, not the overflow. Expected: a kp.KpgnbError naming the overflow (as sssp does for a
    negative weight), or correct distances; never a negative distance."""
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1 << 62), (1, 2, 1 << 62), (2, 3, 1 << 62)])
        S = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("q") as df:
            v = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("out")
        E.advance_to(1)
        S.advance_to(1)
        try:
            eng.wait(v, timeout=60)
        except kp.KpgnbError as e:
            assert "overflow" in str(e), str(e)
            return
        got = read(v, ["source", "node", "dist"])
        assert all(d >= 0 for _, _, d in got), got
    finally:
        eng.close()


@pytest.mark.parametrize("kw", [dict(start_state=0.5), dict(transitions=[(0, "a", 1.7)]), dict(accept=[1.7])])
def test_bug_rpq_truncates_non_integer_states(kw):
    """rpq's automaton states are ints ('transitions a list of (state, label, next state) with int
    states'); a float state is silently truncated (int(1.7) == 1, np.full(.., 0.5, np.int64) == 0) and the
    query answers for another automaton. README: int64 columns refuse 1.5 rather than truncate. Expected:
    a kp.KpgnbError at build time."""
    eng = kp.Engine(workers=1)
    try:
        eng.input("lab", ["src", "label", "dst"], dtypes=["int64", "str", "int64"], rows=[(0, "a", 1)])
        eng.input("sources", ["source"], rows=[(0,)])
        args = dict(transitions=[(0, "a", 1)], accept=[1], start_state=0)
        args.update(kw)
        with pytest.raises(kp.KpgnbError):
            with eng.dataflow("q") as df:
                graphs.rpq(df.input("lab"), df.input("sources"), args["transitions"], args["accept"],
                           start_state=args["start_state"]).view("out")
    finally:
        eng.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_bug_wcc_str_node_ids_regressed(workers):
    """Before the memory modes (commit e0d54d2^), graphs.wcc ran propagate_min_label and labelled str
    nodes with the lexicographically smallest id of their component (bit_length_rounds still documents
    'and for non-integer labels'; README: str columns compare lexicographically). Now wcc goes through
    Collection.ife, whose state must be int64/float64, so even memory='full' raises
    SchemaError("ife('wcc'): the state column 'label' must be int64 or float64, not str")."""
    eng = kp.Engine(workers=workers)
    try:
        E = eng.input("edges", ["src", "dst"], dtypes=["str", "str"], rows=[("b", "a"), ("c", "d"), ("d", "d")])
        with eng.dataflow("w") as df:
            v = graphs.wcc(df.input("edges")).view("out")
        E.advance_to(1)
        eng.wait(v, timeout=60)
        assert read(v, ["node", "label"]) == [("a", "a"), ("b", "a"), ("c", "c"), ("d", "c")]
    finally:
        eng.close()
