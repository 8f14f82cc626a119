"""Session 25 attack on the memory modes API (Collection.ife, kpgnb.graphs.sssp/khop/wcc/pagerank/rpq):
bad arguments must be clear errors at build time (never a failure later or a silently wrong answer), and
every mode must give the same collection as memory="full" and as a from-scratch reference, for weighted
graphs with float weights, duplicate edges (the same row twice, and one pair with several weights), zero
and negative-zero weights, under churn, at several worker counts."""
import heapq
from collections import Counter, defaultdict

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "det": ("drop", kp.Drop(p=0.7, policy="random", tracker="exact", seed=3)),
    "bloom": ("drop", kp.Drop(p=0.5, policy="degree", tracker="bloom", bloom_bits=64, tau_min=1)),
}


def rows_of(view, cols, at=None):
    df = view.to_pandas(at=at)
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


def dijkstra(edges: Counter, sources: Counter):
    """(source, node, dist) for every node reachable from a live source; edges (src, dst, w) live when
    their multiplicity is positive."""
    adj = defaultdict(list)
    for (s, d, w), c in edges.items():
        if c > 0:
            adj[s].append((d, w))
    out = []
    for src in sorted(s for s, c in sources.items() if c > 0):
        dist = {src: 0.0}
        heap = [(0.0, src)]
        while heap:
            dd, u = heapq.heappop(heap)
            if dd > dist[u]:
                continue
            for v, w in adj[u]:
                nd = dd + w
                if v not in dist or nd < dist[v]:
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        out += [(src, v, float(x)) for v, x in dist.items()]
    return sorted(out)


def pagerank_ref(edges: Counter, iterations, alpha=0.85):
    """graphs.pagerank's definition from scratch: duplicate edges count by multiplicity."""
    live = {e: c for e, c in edges.items() if c > 0}
    nodes = sorted({s for s, _ in live} | {d for _, d in live})
    deg = Counter()
    for (s, _), c in live.items():
        deg[s] += c
    rank = {n: 1 - alpha for n in nodes}
    for _ in range(iterations):
        new = {n: 1 - alpha for n in nodes}
        for (s, d), c in live.items():
            new[d] += c * alpha * rank[s] / deg[s]
        rank = new
    return sorted((n, r) for n, r in rank.items())


def close(a, b, tol=1e-9):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if isinstance(p, float) or isinstance(q, float):
                if not (p == q or abs(p - q) <= tol * max(1.0, abs(p), abs(q))):
                    return False
            elif p != q:
                return False
    return True


WEIGHTS = [0.0, -0.0, 0.1, 0.2, 0.30000000000000004, 0.5, 1.0, 1e-12, 2.5, 1e6]


@pytest.mark.parametrize("workers,seed", [(1, 0), (2, 1), (3, 2)])
def test_sssp_float_weights_duplicates_and_zeros_agree_with_dijkstra(workers, seed):
    """Float weights with ties made of different sums (0.1 + 0.2 vs 0.30000000000000004), zero and -0.0
    weights (zero-weight cycles), the same (src, dst) pair with several weights, the same row twice; churn
    over 8 epochs, two of them advanced before one wait; every mode equals Dijkstra at every epoch."""
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    try:
        E = eng.input("edges", ["src", "dst", "w"], dtypes={"w": "float64"})
        S = eng.input("sources", ["source"])
        views = {}
        for label, (memory, drop) in MODES.items():
            with eng.dataflow(label) as df:
                views[label] = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory,
                                           drop=drop).view("out", history=16)
        cur, srcs = Counter(), Counter()
        snaps = {}
        S.insert([(0,), (3,)])
        srcs.update([0, 3])
        for ep in range(8):
            rows, diffs = [], []
            for _ in range(int(rng.integers(3, 12))):
                live = [r for r, c in cur.items() if c > 0]
                if live and rng.random() < 0.35:
                    r = live[int(rng.integers(len(live)))]
                    rows.append(r), diffs.append(-1)
                    cur[r] -= 1
                else:
                    r = (int(rng.integers(8)), int(rng.integers(8)), float(WEIGHTS[int(rng.integers(len(WEIGHTS)))]))
                    m = int(rng.integers(1, 3))           # the same row once or twice
                    rows.append(r), diffs.append(m)
                    cur[r] += m
            E.update(rows, diffs)
            if ep == 4:
                S.insert([(5,)])
                srcs[5] += 1
            snaps[ep] = (Counter({(s, d, w + 0.0): c for (s, d, w), c in cur.items()}), Counter(srcs))
            E.advance_to(ep + 1), S.advance_to(ep + 1)
            if ep % 3 != 1:
                for v in views.values():
                    eng.wait(v, timeout=60)
        for v in views.values():
            eng.wait(v, timeout=60)
        for ep, (edges, sources) in snaps.items():
            want = dijkstra(edges, sources)
            full = rows_of(views["full"], ["source", "node", "dist"], ep)
            assert close(full, want, 0), (ep, sorted(set(full) ^ set(want))[:6])
            for label, v in views.items():
                got = rows_of(v, ["source", "node", "dist"], ep)
                assert got == full, (ep, label, sorted(set(got) ^ set(full))[:6])
    finally:
        eng.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_pagerank_and_wcc_with_duplicate_edges_agree_across_modes(workers):
    rng = np.random.default_rng(7 + workers)
    eng = kp.Engine(workers=workers)
    try:
        E = eng.input("edges", ["src", "dst"])
        views = {}
        for label, (memory, drop) in MODES.items():
            with eng.dataflow("pr_" + label) as df:
                views["pr_" + label] = graphs.pagerank(df.input("edges"), iterations=6, memory=memory,
                                                       drop=drop).view("out", history=8)
            with eng.dataflow("wcc_" + label) as df:
                views["wcc_" + label] = graphs.wcc(df.input("edges"), memory=memory, drop=drop).view("out", history=8)
        cur = Counter()
        snaps = {}
        for ep in range(5):
            rows, diffs = [], []
            for _ in range(10):
                live = [r for r, c in cur.items() if c > 0]
                if live and rng.random() < 0.3:
                    r, d = live[int(rng.integers(len(live)))], -1
                else:
                    r, d = (int(rng.integers(9)), int(rng.integers(9))), int(rng.integers(1, 4))
                rows.append(r), diffs.append(d)
                cur[r] += d
            E.update(rows, diffs)
            snaps[ep] = Counter(cur)
            E.advance_to(ep + 1)
            for v in views.values():
                eng.wait(v, timeout=60)
        for ep, edges in snaps.items():
            want = pagerank_ref(edges, 6)
            for label in MODES:
                got = rows_of(views["pr_" + label], ["node", "rank"], ep)
                assert close(got, want), (ep, label, got[:4], want[:4])
            # wcc from scratch: union-find over live edges
            parent = {}

            def find(x):
                while parent.setdefault(x, x) != x:
                    x = parent[x]
                return x
            for (s, d), c in edges.items():
                if c > 0:
                    a, b = find(s), find(d)
                    parent[max(a, b)] = min(a, b)
            want_w = sorted((n, find(n)) for n in parent)
            for label in MODES:
                assert rows_of(views["wcc_" + label], ["node", "label"], ep) == want_w, (ep, label)
    finally:
        eng.close()


# -- bad arguments -----------------------------------------------------------------------------------------

def _engine_with(edge_rows, dtypes=None, cols=("src", "dst", "w")):
    eng = kp.Engine(workers=1)
    eng.input("edges", list(cols), dtypes=dtypes, rows=edge_rows)
    eng.input("sources", ["source"], rows=[(0,)])
    return eng


@pytest.mark.parametrize("memory", ["full", "jod", "drop"])
def test_bug_sssp_string_weights_are_refused_at_build_time(memory):
    """Weights of dtype str are no numbers: sssp must refuse them when the dataflow is built. Before:
    memory="full" failed the dataflow at run time (TypeError adding str), and memory="jod"/"drop" silently
    added the interned string ids, giving distances from the string table's numbering."""
    eng = _engine_with([(0, 1, "a"), (1, 2, "b")], {"w": "str"})
    try:
        with pytest.raises(kp.SchemaError, match="w"):
            with eng.dataflow("x") as df:
                graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("d")
        assert "x" not in eng.dataflows()
    finally:
        eng.close()


@pytest.mark.parametrize("kw", [dict(p="0.5"), dict(seed=1.5), dict(seed="a")])
def test_bug_drop_refuses_bad_types_when_built(kw):
    """Drop(p="0.5") and Drop(seed=1.5) were accepted and failed the dataflow at its first epoch (numpy
    'less' on a str; float & int). A knob of the wrong type must be a ValueError from Drop() itself."""
    with pytest.raises(ValueError):
        kp.Drop(**kw)


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_bug_ife_float_messages_into_an_int_state_are_not_truncated(memory):
    """An int64 state and a message giving floats (0.75): both modes silently truncated to 0, an answer
    nobody asked for. Expected: a clear error (at build time, from the trial call, or failing the
    dataflow naming the dtype) rather than a wrong number."""
    eng = kp.Engine(workers=1)
    try:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1), (1, 2, 1)])
        S = eng.input("s", ["node", "dist"], rows=[(0, 0)])
        try:
            with eng.dataflow("x") as df:
                v = df.input("s").ife(df.input("edges"), key="node", node="node", value="dist",
                                      message=lambda dist, w: dist + w * 0.5 + 0.25, memory=memory).view("d")
        except kp.SchemaError:
            return
        E.advance_to(1), S.advance_to(1)
        with pytest.raises(kp.KpgnbError, match="float|dtype"):
            eng.wait(v, timeout=30)
    finally:
        eng.close()


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_bug_sssp_negative_cycle_is_an_error_not_a_hang(memory):
    """sssp documents non-negative weights; a negative weight is accepted and a negative cycle makes the
    epoch never settle (eng.wait times out, the scheduler spins forever). Expected: the dataflow fails
    with an error naming the negative weight (the weights are data, so at run time)."""
    eng = _engine_with([(0, 1, 1), (1, 2, -3), (2, 0, 1)])
    try:
        with eng.dataflow("x") as df:
            v = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("d")
        eng.inputs()["edges"].advance_to(1), eng.inputs()["sources"].advance_to(1)
        with pytest.raises(kp.KpgnbError, match="negative"):
            eng.wait(v, timeout=8)
    finally:
        eng.close()


@pytest.mark.parametrize("call", [
    lambda e, s: graphs.sssp(e.rename(w="weight"), s),
    lambda e, s: graphs.khop(e, s, -1),
    lambda e, s: graphs.khop(e, s, 1.5),
    lambda e, s: graphs.pagerank(e, iterations=0),
    lambda e, s: graphs.sssp(e, s, memory="JOD"),
    lambda e, s: graphs.sssp(e, s, memory="full", drop=kp.Drop()),
    lambda e, s: graphs.wcc(e, memory="drop", drop="bloom"),
    lambda e, s: graphs.rpq(e.rename(w="label"), s, [(0, "a", 1)], [1]),   # int labels, str transitions
])
def test_bad_graph_arguments_refused_at_build_and_nothing_installed(call):
    eng = _engine_with([(0, 1, 2)])
    try:
        with eng.dataflow("ok") as df:
            ok = df.input("edges").view("v")
        with pytest.raises((kp.SchemaError, ValueError)):
            with eng.dataflow("x") as df:
                call(df.input("edges"), df.input("sources")).view("d")
        assert set(eng.dataflows()) == {"ok"}
        eng.inputs()["edges"].insert([(1, 2, 3)])
        eng.inputs()["edges"].advance_to(1)
        eng.wait(ok, timeout=30)
        assert len(ok) == 2
    finally:
        eng.close()
