"""Attack s35: kpgnb.graphs wcc (ife _full with start_rounds), bfs and sssp over random insert/delete
streams of edges, at W = 1, 2, 3, compared at every epoch with networkx recomputed from scratch. Node ids
are mapped through transforms: small ints, negatives and 0, huge ints (near 2**62), and floats."""
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb.graphs import bfs, sssp, wcc

TRANSFORMS = {
    "small": lambda i: int(i),
    "negative": lambda i: int(i) - 12,                     # negatives and 0 among the ids
    "huge": lambda i: (1 << 62) - 7 + int(i) if i % 2 else -(1 << 62) + int(i),
    "maxint": lambda i: np.iinfo(np.int64).max - int(i),   # bit length 63
    "float": lambda i: float(i) * 0.5 - 3.25,
}
N = 18


def _stream(rng, epochs, weighted=False):
    """Per epoch: (inserted edges, removed edges) as multisets of (u, v[, w]); edges may repeat."""
    live = Counter()
    out = []
    for _ in range(epochs):
        ins, rem = [], []
        for _ in range(int(rng.integers(1, 10))):
            e = (int(rng.integers(0, N)), int(rng.integers(0, N)))
            if weighted:
                e = e + (int(rng.integers(0, 5)),)
            ins.append(e)
        cand = [e for e, c in live.items() for _ in range(c)]
        for _ in range(int(rng.integers(0, 5))):
            if cand:
                e = cand.pop(int(rng.integers(0, len(cand))))
                rem.append(e)
        for e in ins:
            live[e] += 1
        for e in rem:
            live[e] -= 1
        live = +live
        out.append((ins, rem, Counter(live)))
    return out


def _wcc_ref(live, f):
    g = nx.Graph()
    for (u, v) in live:
        g.add_edge(f(u), f(v))
    want = {}
    for comp in nx.connected_components(g):
        m = min(comp)
        for x in comp:
            want[x] = m
    return want


def _bfs_ref(live, roots, f):
    g = nx.DiGraph()
    for (u, v) in live:
        g.add_edge(f(u), f(v))
    want = {}
    for r in roots:
        fr = f(r)
        want[fr] = 0
        if fr in g:
            for x, d in nx.single_source_shortest_path_length(g, fr).items():
                want[x] = min(want.get(x, d), d)
    return want


def _sssp_ref(live, sources, f):
    g = nx.DiGraph()
    for (u, v, w) in live:
        a, b = f(u), f(v)
        if g.has_edge(a, b):
            g[a][b]["weight"] = min(g[a][b]["weight"], w)
        else:
            g.add_edge(a, b, weight=w)
    want = {}
    for s in sources:
        fs = f(s)
        want[(fs, fs)] = 0
        if fs in g:
            for x, d in nx.single_source_dijkstra_path_length(g, fs).items():
                want[(fs, x)] = d
    return want


def _dtype(tname):
    return "float64" if tname == "float" else "int64"


def _rows(edges, f):
    return [tuple(f(x) for x in e[:2]) + tuple(e[2:]) for e in edges]


@pytest.mark.parametrize("tname", list(TRANSFORMS))
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_wcc_matches_networkx_every_epoch(workers, tname):
    f = TRANSFORMS[tname]
    dt = _dtype(tname)
    for seed in range(2):
        rng = np.random.default_rng(seed * 7 + workers)
        stream = _stream(rng, 7)
        with kp.Engine(workers=workers) as eng:
            edges = eng.input("edges", ["src", "dst"], dtypes=[dt, dt])
            with eng.dataflow("w") as df:
                view = wcc(df.input("edges")).view("wcc")
            for e, (ins, rem, live) in enumerate(stream):
                if ins:
                    edges.insert(_rows(ins, f))
                if rem:
                    edges.remove(_rows(rem, f))
                edges.advance_to(e + 1)
                eng.wait(view)
                got = view.to_pandas()
                got = dict(zip(got["node"].tolist(), got["label"].tolist()))
                assert len(view.to_pandas()) == len(got)
                assert got == _wcc_ref(live, f), (seed, e, workers, tname)


def _epoch(rng, edges, seeds, count, ins, rem, f, e, repeat):
    """One epoch of the stream: the edge changes, then one random seed node inserted or (half the time,
    when present) removed (``repeat``: a present one may be inserted again), then both inputs advanced."""
    if ins:
        edges.insert(_rows(ins, f))
    if rem:
        edges.remove(_rows(rem, f))
    r = int(rng.integers(0, N))
    if count[r] and rng.random() < 0.5:
        seeds.remove([(f(r),)])
        count[r] -= 1
    elif repeat or not count[r]:
        seeds.insert([(f(r),)])
        count[r] += 1
    edges.advance_to(e + 1)
    seeds.advance_to(e + 1)


@pytest.mark.parametrize("tname", list(TRANSFORMS))
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_bfs_matches_networkx_every_epoch(workers, tname):
    f = TRANSFORMS[tname]
    dt = _dtype(tname)
    rng = np.random.default_rng(100 + workers)
    stream = _stream(rng, 7)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], dtypes=[dt, dt])
        roots = eng.input("roots", ["node"], dtypes=[dt])
        with eng.dataflow("b") as df:
            view = bfs(df.input("edges"), df.input("roots")).view("bfs")
        rootset = Counter()
        for e, (ins, rem, live) in enumerate(stream):
            _epoch(rng, edges, roots, rootset, ins, rem, f, e, repeat=True)
            eng.wait(view)
            got = view.to_pandas()
            pairs = list(zip(got["node"].tolist(), got["dist"].tolist()))
            assert len(pairs) == len(set(p[0] for p in pairs)), pairs
            assert dict(pairs) == _bfs_ref(live, +rootset, f), (e, workers, tname)


@pytest.mark.parametrize("tname", ["small", "negative", "huge", "float"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sssp_matches_networkx_every_epoch(workers, tname):
    f = TRANSFORMS[tname]
    dt = _dtype(tname)
    rng = np.random.default_rng(200 + workers)
    stream = _stream(rng, 7, weighted=True)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], dtypes=[dt, dt, "int64"])
        srcs = eng.input("sources", ["source"], dtypes=[dt])
        with eng.dataflow("s") as df:
            view = sssp(df.input("edges"), df.input("sources")).view("sssp")
        sset = Counter()
        for e, (ins, rem, live) in enumerate(stream):
            _epoch(rng, edges, srcs, sset, ins, rem, f, e, repeat=False)
            eng.wait(view)
            got = view.to_pandas()
            trip = list(zip(got["source"].tolist(), got["node"].tolist(), got["dist"].tolist()))
            d = {(a, b): c for a, b, c in trip}
            assert len(d) == len(trip)
            assert d == _sssp_ref(live, +sset, f), (e, workers, tname)


def _ife_answer(workers, edges, starts, rounds, mode):
    with kp.Engine(workers=workers) as eng:
        e = eng.input("edges", ["src", "dst"], rows=edges)
        s = eng.input("s", ["node", "d"], rows=starts)
        e.advance_to(1)
        s.advance_to(1)
        with eng.dataflow("x") as df:
            kw = dict(key="node", node="node", value="d", message=lambda d: d + 1, agg="min", rounds=rounds)
            if mode == "zero_start_rounds":
                kw["start_rounds"] = lambda d: np.zeros(len(d), np.int64)
            elif mode == "bit_start_rounds":
                from kpgnb.graphs import bit_length_rounds
                kw["start_rounds"] = lambda d: bit_length_rounds(d)
            elif mode == "jod":
                kw["memory"] = "jod"
            v = df.input("s").ife(df.input("edges"), **kw).view("v")
        eng.wait(v)
        return sorted(map(tuple, v.to_pandas().to_numpy().tolist()))


@pytest.mark.parametrize("rounds", [0, 1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2])
def test_ife_start_rounds_of_zero_with_rounds_matches_plain_ife(workers, rounds):
    """start_rounds giving every start state round 0 is plain entry: with ``rounds=k`` the answer is D_k
    (as without start_rounds, and as memory='jod'). It was D_{k-1} (engine/ife.py _full: the Variable
    starts empty, so the loop's round r holds D_{r-1})."""
    edges = [(i, i + 1) for i in range(6)]
    starts = [(0, 0), (3, 10)]
    want = _ife_answer(workers, edges, starts, rounds, "plain")
    assert _ife_answer(workers, edges, starts, rounds, "jod") == want
    assert _ife_answer(workers, edges, starts, rounds, "zero_start_rounds") == want


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ife_start_rounds_fixed_point_matches_plain_ife(workers):
    rng = np.random.default_rng(workers)
    for _ in range(3):
        edges = [(int(a), int(b)) for a, b in rng.integers(-3, 40, (60, 2))]
        starts = [(int(n), int(d)) for n, d in zip(rng.integers(-3, 40, 8), rng.integers(0, 50, 8))]
        want = _ife_answer(workers, edges, starts, None, "plain")
        assert _ife_answer(workers, edges, starts, None, "bit_start_rounds") == want
        assert _ife_answer(workers, edges, starts, None, "zero_start_rounds") == want


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_star_graph_many_equal_keys_in_one_round(workers):
    """Every message of a round goes to one node (runs of equal hash tens of thousands long, one-time
    parts of a round's output), then half the roots and the hub's out-edge go."""
    n = 30_000
    src = np.arange(1, n + 1)
    with kp.Engine(workers=workers) as eng:
        e = eng.input("edges", ["src", "dst"], rows={"src": np.concatenate([src, [0]]),
                                                    "dst": np.concatenate([np.zeros(n, np.int64), [n + 5]])})
        r = eng.input("roots", ["node"], rows={"node": src})
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("d") as df:
            b = bfs(df.input("edges"), df.input("roots")).view("b")
            w = wcc(df.input("edges")).view("w")
        eng.wait(b)
        eng.wait(w)
        bp = b.to_pandas().set_index("node")["dist"]
        assert len(bp) == n + 2 and bp[0] == 1 and bp[n + 5] == 2 and (bp.loc[src] == 0).all()
        wp = w.to_pandas()
        assert len(wp) == n + 2 and (wp.label == 0).all()
        r.remove({"node": src[::2]})
        e.remove([(0, n + 5)])
        e.advance_to(2)
        r.advance_to(2)
        eng.wait(b)
        eng.wait(w)
        bp = b.to_pandas().set_index("node")["dist"]
        assert len(bp) == n // 2 + 1 and bp[0] == 1 and (bp.drop(0) == 0).all()
        wp = w.to_pandas().set_index("node")["label"]
        assert len(wp) == n + 1 and n + 5 not in wp.index and (wp == 0).all()


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_ife_keep_mask_is_checked_the_same_in_every_mode(memory):
    """A message function's keep mask: one boolean stands for every message; a mask of another length is
    an error naming it, in every mode (full mode once turned a scalar True into 'keep row 0 only')."""
    def answer(message):
        with kp.Engine(workers=1) as eng:
            e = eng.input("edges", ["src", "dst"], rows=[(0, 1), (0, 2), (0, 3), (1, 4), (2, 5)])
            s = eng.input("s", ["node", "d"], rows=[(0, 0)])
            e.advance_to(1)
            s.advance_to(1)
            with eng.dataflow("x") as df:
                v = df.input("s").ife(df.input("edges"), key="node", node="node", value="d", message=message,
                                      agg="min", memory=memory).view("v")
            eng.wait(v)
            return sorted(map(tuple, v.to_pandas().to_numpy().tolist()))
    everything = [(0, 0), (1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]
    assert answer(lambda d: (d + 1, True)) == everything
    assert answer(lambda d: (d + 1, d < 1)) == everything[:4]
    with pytest.raises(kp.DataflowError, match="keep mask must be"):
        answer(lambda d: (d + 1, np.array([True, False, True, False, True, False, True])[:len(d) + 1]))
