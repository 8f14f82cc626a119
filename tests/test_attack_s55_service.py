"""Attack s55 (service): the memory modes of issue 14 under random multiset streams, views read from
several threads while inputs change, and bad input.

- Memory modes: sssp, khop, wcc, pagerank and rpq in "full", "jod" and "drop" (policies degree/random,
  trackers exact/bloom, tiny tau_min, p up to 1) on small random graphs with random streams of inserts,
  deletes, weight changes, self-loops, duplicate edges (multiplicity 2, then one delete), sources added
  (twice) and removed, a graph emptied and refilled, at W = 1, 2, 3; over a keyed edge input, with half the
  modes installed late, epochs that jump, several epochs submitted before a wait, and every epoch read
  back with ``at=``; edges closed early while the sources lag behind and reader threads check each read
  against networkx; memory-mode dataflows installed and dropped while a feeder thread advances; follow()
  of a late memory-mode view; extreme node ids; pagerank over duplicate edges and self-loops.
- Views from threads: a sum kept constant by transfers and a count read from three threads (whole epochs
  only, old epochs through ``at=``); dropping or cancelling a dataflow while readers and a follower read;
  user functions that raise (BaseException subclasses too).
- Bad input: a SchemaError naming the column for each kind of bad value, and nothing loaded lost.

(An edge of negative net multiplicity, removed without being inserted, makes the modes disagree, and full's
loop need not settle: the README's "Edges are a graph" says so and asks to remove only edges inserted.)
Each test is seeded and takes a few seconds."""
import threading
import time

import networkx as nx
import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb import graphs

MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "deg_exact": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=1)),
    "rnd_bloom": ("drop", kp.Drop(p=0.6, policy="random", tracker="bloom")),
    "rnd_exact": ("drop", kp.Drop(p=0.9, policy="random", tracker="exact", tau_min=1)),
    "deg_bloom": ("drop", kp.Drop(p=1.0, policy="degree", tracker="bloom", tau_min=1, tau_max_percentile=50,
                                  bloom_bits=64, bloom_hashes=1)),
}

COLS = {"sssp": ["source", "node", "dist"], "khop": ["source", "node", "hops"], "wcc": ["node", "label"],
        "pagerank": ["node", "rank"], "rpq": ["source", "node"]}


class MultiSet:
    def __init__(self, c=None):
        self.c = dict(c or {})

    def add(self, r, d):
        self.c[r] = self.c.get(r, 0) + d
        if self.c[r] == 0:
            del self.c[r]

    def items(self):
        return [r for r, m in self.c.items() if m > 0]


def sssp_oracle(E, S):
    g = nx.DiGraph()
    for a, b, w in E.items():
        if g.has_edge(a, b):
            g[a][b]["w"] = min(g[a][b]["w"], w)
        else:
            g.add_edge(a, b, w=w)
    out = set()
    for (s,) in S.items():
        if s not in g:
            out.add((s, s, 0))
            continue
        out |= {(s, v, d) for v, d in nx.single_source_dijkstra_path_length(g, s, weight="w").items()}
    return sorted(out)


def khop_oracle(E, S, k=3):
    g = nx.DiGraph()
    g.add_edges_from((a, b) for a, b, _ in E.items())
    out = set()
    for (s,) in S.items():
        if s not in g:
            out.add((s, s, 0))
            continue
        out |= {(s, v, d) for v, d in nx.single_source_shortest_path_length(g, s, cutoff=k).items()}
    return sorted(out)


def wcc_oracle(E, S):
    g = nx.Graph()
    g.add_edges_from((a, b) for a, b, _ in E.items())
    return sorted((v, min(c)) for c in nx.connected_components(g) for v in c)


def rpq_oracle(E, S):
    # an edge's label is its weight's parity; the query is (odd)(even)*
    es = E.items()
    out = set()
    for (src,) in S.items():
        seen, todo = {(src, 0)}, [(src, 0)]
        while todo:
            v, q = todo.pop()
            for a, b, w in es:
                if a != v:
                    continue
                lab = w % 2
                nxt = 1 if (q == 0 and lab == 1) or (q == 1 and lab == 0) else None
                if nxt is not None and (b, nxt) not in seen:
                    seen.add((b, nxt))
                    todo.append((b, nxt))
        out |= {(src, v) for v, q in seen if q == 1}
    return sorted(out)


def pagerank_oracle(E, S, iterations=5, alpha=0.85):
    """Over the multiset of (src, dst): a duplicate edge counts twice, in the degree too."""
    m = {}
    for (a, b, _), c in E.c.items():
        if c > 0:
            m[(a, b)] = m.get((a, b), 0) + c
    nodes = sorted({a for a, _ in m} | {b for _, b in m})
    outdeg = {}
    for (a, _), c in m.items():
        outdeg[a] = outdeg.get(a, 0) + c
    rank = {v: 1 - alpha for v in nodes}
    for _ in range(iterations):
        new = {v: 1 - alpha for v in nodes}
        for (a, b), c in m.items():
            new[b] += c * alpha * rank[a] / outdeg[a]
        rank = new
    return sorted(rank.items())


ORACLE = {"sssp": sssp_oracle, "khop": khop_oracle, "wcc": wcc_oracle, "rpq": rpq_oracle,
          "pagerank": pagerank_oracle}


def build(q, df, mem, drop):
    e = df.input("edges")
    if q == "sssp":
        return graphs.sssp(e, df.input("sources"), memory=mem, drop=drop)
    if q == "khop":
        return graphs.khop(e.select("src", "dst"), df.input("sources"), 3, memory=mem, drop=drop)
    if q == "wcc":
        return graphs.wcc(e.select("src", "dst"), memory=mem, drop=drop)
    if q == "pagerank":
        return graphs.pagerank(e.select("src", "dst"), iterations=5, memory=mem, drop=drop)
    ee = e.map(lambda src, dst, w: {"src": src, "label": w % 2, "dst": dst})
    return graphs.rpq(ee, df.input("sources"), [(0, 1, 1), (1, 0, 1)], accept=[1], memory=mem, drop=drop)


def rows_of(frame, cols):
    return sorted(tuple(r) for r in frame[cols].itertuples(index=False, name=None))


def same(q, got, exp):
    if q != "pagerank":
        return got == exp
    return len(got) == len(exp) and all(a[0] == b[0] and abs(a[1] - b[1]) < 1e-9 for a, b in zip(got, exp))


# -- 1. memory modes against full and networkx ----------------------------------------------------------

def run_stream(q, seed, workers, epochs=10, n=12, m=20, late=4):
    """Random multiset stream over a keyed edge input; half the modes installed at epoch ``late``; epochs
    jump by 1-3; waits only every third epoch; every epoch read back with at= against full and the oracle."""
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    E, S = MultiSet(), MultiSet()
    try:
        edges = eng.input("edges", ["src", "dst", "w"], key="src")
        srcs = eng.input("sources", ["source"])

        def edge(r, d=1):
            E.add(r, d)
            (edges.insert if d > 0 else edges.remove)([r])
        for _ in range(m):
            a, b = (int(x) for x in rng.integers(0, n, 2))
            edge((a, b, int(rng.integers(1, 6))))
        for s in (0, 3):
            S.add((s,), 1)
            srcs.insert([(s,)])
        views = {}

        def install(labels):
            for label in labels:
                mem, drop = MODES[label]
                with eng.dataflow(label) as df:
                    views[label] = build(q, df, mem, drop).view("out", history=100)
        labels = list(MODES)
        install(labels[:1] + labels[1::2])
        T = prev = 0
        todo = []
        for ep in range(1, epochs + 1):
            T += int(rng.integers(1, 4))
            edges.advance_to(T)
            srcs.advance_to(T)
            exp = ORACLE[q](E, S)
            todo += [(t, exp) for t in range(prev, T)]
            prev = T
            if ep == late:
                for v in views.values():
                    eng.wait(v, timeout=120)
                install(labels[2::2])
                todo = todo[-1:]
            if ep % 3 == 0 or ep == epochs:
                for v in views.values():
                    eng.wait(v, timeout=120)
                for t, exp in todo:
                    full = rows_of(views["full"].to_pandas(at=t), COLS[q])
                    assert same(q, full, exp), f"{q} W={workers} epoch {t}: full differs from networkx"
                    for label, v in views.items():
                        if v.op.born <= t:
                            got = rows_of(v.to_pandas(at=t), COLS[q])
                            assert same(q, got, full), f"{q} W={workers} epoch {t}: {label} differs from full"
                todo = []
            for _ in range(int(rng.integers(1, 6))):
                k = rng.random()
                live = E.items()
                if k < 0.25 and live:
                    edge(live[rng.integers(len(live))], -1)
                elif k < 0.4 and live:  # a weight change
                    r = live[rng.integers(len(live))]
                    edge(r, -1)
                    edge((r[0], r[1], int(rng.integers(1, 6))))
                elif k < 0.5:  # a self-loop
                    a = int(rng.integers(0, n))
                    edge((a, a, int(rng.integers(1, 6))))
                elif k < 0.6 and live:  # a duplicate (multiplicity 2; a later delete takes one)
                    edge(live[rng.integers(len(live))], 1)
                elif k < 0.7:  # a source added (again: multiplicity 2) or removed; some never in the graph
                    s = int(rng.integers(0, n + 3))
                    if (s,) in S.c and rng.random() < 0.7:
                        S.add((s,), -1)
                        srcs.remove([(s,)])
                    else:
                        S.add((s,), 1)
                        srcs.insert([(s,)])
                elif k < 0.75:  # the graph emptied
                    for r, c in list(E.c.items()):
                        for _ in range(c):
                            edge(r, -1)
                else:
                    a, b = (int(x) for x in rng.integers(0, n, 2))
                    edge((a, b, int(rng.integers(1, 6))))
    finally:
        eng.close()


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("q", ["sssp", "khop", "wcc", "pagerank", "rpq"])
def test_memory_modes_equal_full_and_networkx_on_multiset_streams(q, workers):
    run_stream(q, 100 + workers, workers)


def run_closed_edges(q, seed, workers, epochs=12, n=14, m=22, close_at=6):
    """Edges closed at ``close_at``, sources advanced every third epoch only, two threads checking every
    read of every mode against the oracle of the epoch the read says it holds."""
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    E, S = MultiSet(), MultiSet()
    expect, errs, stop = {}, [], threading.Event()
    try:
        edges = eng.input("edges", ["src", "dst", "w"])
        srcs = eng.input("sources", ["source"])

        def edge(r, d=1):
            E.add(r, d)
            (edges.insert if d > 0 else edges.remove)([r])
        for _ in range(m):
            a, b = (int(x) for x in rng.integers(0, n, 2))
            edge((a, b, int(rng.integers(1, 6))))
        for s in (0, 3):
            S.add((s,), 1)
            srcs.insert([(s,)])
        views = {}
        for label, (mem, drop) in MODES.items():
            with eng.dataflow(label) as df:
                views[label] = build(q, df, mem, drop).view("out", history=100)

        def reader():
            while not stop.is_set():
                for label, v in views.items():
                    d = v.to_pandas()
                    ep = d.attrs["epoch"]
                    exp = expect.get(ep - 1) if ep else None
                    if exp is not None and not same(q, rows_of(d, COLS[q]), exp):
                        errs.append((label, ep - 1))
                        return
                time.sleep(0.001)
        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        ST, Esnap = 0, {}
        for ep in range(1, epochs + 1):
            Esnap[ep - 1] = dict(E.c) if ep <= close_at else Esnap[close_at - 1]
            if ep <= close_at:
                edges.advance_to(ep)
                if ep == close_at:
                    edges.close()
            if ep % 3 == 0 or ep == epochs:
                for t in range(ST, ep):
                    expect[t] = ORACLE[q](MultiSet(Esnap[t]), S)
                srcs.advance_to(ep)
                ST = ep
                for v in views.values():
                    eng.wait(v, timeout=120)
                for t in range(max(0, ep - 3), ep):
                    full = rows_of(views["full"].to_pandas(at=t), COLS[q])
                    assert same(q, full, expect[t]), f"{q} epoch {t}: full differs from networkx"
                    for label, v in views.items():
                        assert same(q, rows_of(v.to_pandas(at=t), COLS[q]), full), f"{q} epoch {t}: {label}"
            for _ in range(int(rng.integers(1, 6))):
                k = rng.random()
                live = E.items()
                if ep < close_at and k < 0.3 and live:
                    edge(live[rng.integers(len(live))], -1)
                elif ep < close_at and k < 0.6:
                    a, b = (int(x) for x in rng.integers(0, n, 2))
                    edge((a, b, int(rng.integers(1, 6))))
                else:
                    s = int(rng.integers(0, n + 2))
                    if (s,) in S.c:
                        S.add((s,), -1)
                        srcs.remove([(s,)])
                    else:
                        S.add((s,), 1)
                        srcs.insert([(s,)])
        stop.set()
        for t in threads:
            t.join()
        assert not errs, f"a reader saw a wrong answer: {errs[0]}"
    finally:
        stop.set()
        eng.close()


@pytest.mark.parametrize("q", ["sssp", "khop", "wcc", "pagerank", "rpq"])
def test_memory_modes_with_edges_closed_and_sources_lagging_read_from_threads(q):
    run_closed_edges(q, 7, 2)


def test_memory_modes_empty_graph_source_outside_it_and_graph_emptied_then_refilled():
    eng = kp.Engine(workers=2)
    try:
        edges = eng.input("edges", ["src", "dst", "w"])
        srcs = eng.input("sources", ["source"])
        srcs.insert([(5,)])
        views = {}
        for label, (mem, drop) in MODES.items():
            with eng.dataflow(label) as df:
                views[label] = (graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop).view("s"),
                                graphs.wcc(df.input("edges").select("src", "dst"), memory=mem, drop=drop).view("w"))
        E, S = MultiSet(), MultiSet({(5,): 1})
        steps = [
            [],                                                        # empty graph, source outside it
            [((1, 2, 3), 1), ((2, 3, 1), 1), ((3, 1, 1), 1), ((5, 1, 2), 1), ((4, 4, 1), 1)],
            [((1, 2, 3), -1), ((2, 3, 1), -1), ((3, 1, 1), -1), ((5, 1, 2), -1), ((4, 4, 1), -1)],   # emptied
            [((5, 1, 2), 1), ((5, 1, 2), 1), ((1, 2, 1), 1)],          # refilled, a duplicate
            [((5, 1, 2), -1)],                                         # one copy of the duplicate goes
            [((5, 1, 2), -1), ((2, 5, 1), 1)],
        ]
        for ep, step in enumerate(steps, 1):
            for r, d in step:
                E.add(r, d)
                (edges.insert if d > 0 else edges.remove)([r])
            edges.advance_to(ep)
            srcs.advance_to(ep)
            for label, (sv, wv) in views.items():
                eng.wait(sv, timeout=60)
                eng.wait(wv, timeout=60)
                assert rows_of(sv.to_pandas(), COLS["sssp"]) == sssp_oracle(E, S), (ep, label)
                assert rows_of(wv.to_pandas(), COLS["wcc"]) == wcc_oracle(E, S), (ep, label)
    finally:
        eng.close()


def test_memory_modes_extreme_node_ids():
    ids = [-2**63 + 1, -1, 0, 1, 2**62, 2**63 - 1, 2**63 - 2, -2**40, 12345]
    rng = np.random.default_rng(3)
    eng = kp.Engine(workers=3)
    try:
        e = eng.input("edges", ["src", "dst", "w"])
        s = eng.input("sources", ["source"])
        E, S = MultiSet(), MultiSet()
        for _ in range(14):
            r = (ids[rng.integers(len(ids))], ids[rng.integers(len(ids))], int(rng.integers(1, 5)))
            E.add(r, 1)
            e.insert([r])
        for x in (ids[0], ids[1], ids[5]):
            S.add((x,), 1)
            s.insert([(x,)])
        views = {}
        for label, (m, d) in MODES.items():
            with eng.dataflow(label) as df:
                views[label] = (graphs.sssp(df.input("edges"), df.input("sources"), memory=m, drop=d).view("s"),
                                graphs.wcc(df.input("edges").select("src", "dst"), memory=m, drop=d).view("w"))
        for ep in range(1, 5):
            e.advance_to(ep)
            s.advance_to(ep)
            for label, (sv, wv) in views.items():
                eng.wait(sv, timeout=60)
                eng.wait(wv, timeout=60)
                assert rows_of(sv.to_pandas().astype(object), COLS["sssp"]) == sssp_oracle(E, S), (ep, label)
                assert rows_of(wv.to_pandas().astype(object), COLS["wcc"]) == wcc_oracle(E, S), (ep, label)
            for _ in range(3):
                live = E.items()
                if live and rng.random() < 0.5:
                    r = live[rng.integers(len(live))]
                    E.add(r, -1)
                    e.remove([r])
                else:
                    r = (ids[rng.integers(len(ids))], ids[rng.integers(len(ids))], int(rng.integers(1, 5)))
                    E.add(r, 1)
                    e.insert([r])
    finally:
        eng.close()


def test_memory_mode_queries_installed_and_dropped_while_a_feeder_thread_advances():
    rng = np.random.default_rng(11)
    eng = kp.Engine(workers=2)
    E, S = MultiSet(), MultiSet()
    snaps, stop = {}, threading.Event()
    e = eng.input("edges", ["src", "dst", "w"])
    s = eng.input("sources", ["source"])
    for _ in range(20):
        r = (int(rng.integers(0, 12)), int(rng.integers(0, 12)), int(rng.integers(1, 5)))
        E.add(r, 1)
        e.insert([r])
    for x in (0, 4):
        S.add((x,), 1)
        s.insert([(x,)])

    def feeder():
        r2 = np.random.default_rng(12)
        ep = 0
        while not stop.is_set() and ep < 400:
            snaps[ep] = (dict(E.c), dict(S.c))
            ep += 1
            e.advance_to(ep)
            s.advance_to(ep)
            for _ in range(int(r2.integers(1, 4))):
                live = E.items()
                if live and r2.random() < 0.4:
                    r = live[r2.integers(len(live))]
                    E.add(r, -1)
                    e.remove([r])
                elif r2.random() < 0.15:
                    x = int(r2.integers(0, 12))
                    if (x,) in S.c:
                        S.add((x,), -1)
                        s.remove([(x,)])
                    else:
                        S.add((x,), 1)
                        s.insert([(x,)])
                else:
                    r = (int(r2.integers(0, 12)), int(r2.integers(0, 12)), int(r2.integers(1, 5)))
                    E.add(r, 1)
                    e.insert([r])
            time.sleep(0.002)
    t = threading.Thread(target=feeder)
    t.start()
    try:
        for i, q in enumerate(["sssp", "wcc", "rpq", "khop"] * 2):
            mem, drop = list(MODES.values())[i % len(MODES)]
            with eng.dataflow("q") as df:
                v = build(q, df, mem, drop).view("o")
            eng.wait(v, timeout=60)
            for _ in range(2):
                d = v.to_pandas()
                Ec, Sc = snaps[d.attrs["epoch"] - 1]
                assert rows_of(d, COLS[q]) == ORACLE[q](MultiSet(Ec), MultiSet(Sc)), (q, mem, drop)
                time.sleep(0.01)
            eng.drop("q")
    finally:
        stop.set()
        t.join()
        eng.close()


@pytest.mark.parametrize("mode", ["jod", "rnd_bloom"])
def test_follow_of_a_memory_mode_view_installed_late_replays_every_epoch(mode):
    mem, drop = MODES[mode]
    rng = np.random.default_rng(5)
    eng = kp.Engine(workers=2)
    try:
        e = eng.input("edges", ["src", "dst", "w"])
        s = eng.input("sources", ["source"])
        E = {}

        def churn(r2):
            for _ in range(int(r2.integers(1, 4))):
                if E and r2.random() < 0.4:
                    k = list(E)[r2.integers(len(E))]
                    e.remove([(k[0], k[1], E.pop(k))])
                else:
                    a, b = (int(x) for x in r2.integers(0, 12, 2))
                    if (a, b) in E:
                        e.remove([(a, b, E[(a, b)])])
                    E[(a, b)] = int(r2.integers(1, 5))
                    e.insert([(a, b, E[(a, b)])])
        churn(rng)
        s.insert([(0,), (5,)])
        stop, EP = threading.Event(), [0]

        def feeder():
            r2 = np.random.default_rng(6)
            while not stop.is_set() and EP[0] < 300:
                churn(r2)
                EP[0] += 1
                e.advance_to(EP[0])
                s.advance_to(EP[0])
                time.sleep(0.002)
        ft = threading.Thread(target=feeder)
        ft.start()
        try:
            time.sleep(0.05)
            with eng.dataflow("q") as df:
                v = graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop).view("d", history=1000)
            f = v.follow(timeout=30, progress=True)
            frames = []
            for fr in f:
                frames.append(fr)
                if f.epoch is not None and f.epoch >= v.op.born + 15:
                    break
            f.close()
        finally:
            stop.set()
            ft.join()
        eng.wait(v, timeout=60)
        allf = pd.concat(frames)
        acc = {}
        for tm in range(0, int(allf["time"].max()) + 1):
            for r in allf[allf["time"] == tm].itertuples(index=False):
                k = (r.source, r.node, r.dist)
                acc[k] = acc.get(k, 0) + r.diff
                if acc[k] == 0:
                    del acc[k]
            if tm >= v.op.born:
                assert acc == {x: 1 for x in rows_of(v.to_pandas(at=tm), COLS["sssp"])}, tm
    finally:
        eng.close()


# -- 2. views from threads ---------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 3])
def test_readers_on_three_threads_see_whole_epochs_of_a_sum_and_a_count(workers):
    rng = np.random.default_rng(workers)
    eng = kp.Engine(workers=workers)
    try:
        a = eng.input("acct", ["k", "v"])
        a.insert([(i, 100) for i in range(10)])
        a.advance_to(1)
        with eng.dataflow("tot") as df:
            acct = df.input("acct")
            tv = acct.map(lambda k, v: {"g": k * 0, "v": v}).sum(by="g", col="v").view("tot", history=1000)
            cv = acct.map(lambda k: {"g": k * 0}).count(by="g").view("cnt", history=1000)
        eng.wait(tv)
        counts, errors, stop = {0: 10}, [], threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    d = tv.to_pandas()
                    if d["v"].tolist() != [1000]:
                        errors.append(("sum", d["v"].tolist(), d.attrs))
                    c = cv.to_pandas()
                    ep = c.attrs["epoch"]
                    if ep and c["count"].tolist() != [counts[ep - 1]]:
                        errors.append(("count", ep, c["count"].tolist(), counts[ep - 1]))
                    if ep and ep > 2:
                        o = cv.to_pandas(at=ep - 2)
                        if o["count"].tolist() != [counts[ep - 2]]:
                            errors.append(("at", ep - 2, o["count"].tolist()))
                    if len(cv) != 1:
                        errors.append(("len", len(cv)))
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(("exception", repr(e)))
                    return
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        rows, nxt = {i: 100 for i in range(10)}, 10
        for ep in range(1, 60):  # each epoch splits an account in two: the sum stays 1000
            k = list(rows)[rng.integers(len(rows))]
            v = rows.pop(k)
            a.remove([(k, v)])
            x = int(rng.integers(0, v + 1))
            a.insert([(nxt, x), (nxt + 1, v - x)])
            rows[nxt], rows[nxt + 1] = x, v - x
            nxt += 2
            counts[ep] = len(rows)
            a.advance_to(ep + 1)
            if ep % 7 == 0:
                eng.wait(tv)
            time.sleep(0.002)
        eng.wait(tv)
        eng.wait(cv)
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert cv.to_pandas()["count"].tolist() == [len(rows)]
    finally:
        eng.close()


@pytest.mark.parametrize("how", ["drop", "cancel"])
def test_dropping_or_cancelling_while_readers_and_a_follower_read(how):
    eng = kp.Engine(workers=2)
    try:
        a = eng.input("a", ["k", "v"])
        a.insert([(i, i) for i in range(50)])
        a.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("a").map(lambda k, v: {"k": k % 5, "v": v}).sum(by="k", col="v").view("s", history=50)
        eng.wait(v)
        errs, ends = [], []

        def reader():
            while True:
                try:
                    d = v.to_pandas()
                    if int(d["v"].sum()) != sum(range(50)):
                        errs.append(("sum", int(d["v"].sum())))
                    len(v)
                except kp.UsageError as e:
                    ends.append("usage")
                    if "dropped" not in str(e):
                        errs.append(repr(e))
                    return
                except kp.Cancelled:
                    ends.append("cancelled")
                    return
                except Exception as e:  # noqa: BLE001
                    errs.append(repr(e))
                    return

        def follower():
            try:
                for _ in v.follow(timeout=20, progress=True):
                    pass
                ends.append("follow ended")
            except kp.Cancelled:
                ends.append("follow cancelled")
            except Exception as e:  # noqa: BLE001
                errs.append("follow " + repr(e))
        threads = [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=follower)]
        for t in threads:
            t.start()
        for ep in range(1, 20):
            a.insert([(100 + ep, 0)])
            a.advance_to(ep + 1)
            time.sleep(0.001)
        (eng.drop if how == "drop" else eng.cancel)("q")
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert not errs, errs
        assert len(ends) == 3
        with eng.dataflow("q2") as df:
            v2 = df.input("a").map(lambda k: {"g": k * 0}).count(by="g").view("c")
        eng.wait(v2)
        assert v2.to_pandas()["count"].tolist() == [69]
    finally:
        eng.close()


class _MyBase(BaseException):
    pass


@pytest.mark.parametrize("exc", [ValueError("boom"), SystemExit(3), KeyboardInterrupt(), _MyBase("x"),
                                 StopIteration(), MemoryError("oom")], ids=lambda e: type(e).__name__)
def test_a_raising_user_function_fails_its_dataflow_and_its_readers_only(exc):
    eng = kp.Engine(workers=2)
    try:
        a = eng.input("a", ["k"])
        a.insert([(i,) for i in range(5)])
        a.advance_to(1)

        def bad(k):
            if (k == 13).any():
                raise exc
            return {"k": k}
        with eng.dataflow("good") as df:
            g = df.input("a").map(lambda k: {"z": k * 0}).count(by="z").view("g")
            df.input("a").arrange_by("k").export("a_by_k")
        with eng.dataflow("bad") as df:
            b = df.input("a").map(bad).view("b")
        with eng.dataflow("reader") as df:
            df.use("a_by_k").map(bad).view("r")
        eng.wait(b)
        a.insert([(13,)])
        a.advance_to(2)
        with pytest.raises(kp.DataflowError, match=type(exc).__name__) as info:
            eng.wait(b, timeout=30)
        assert "dataflow 'bad' failed" in str(info.value) and "map" in str(info.value)
        with pytest.raises(kp.DataflowError):
            b.to_pandas()
        with pytest.raises(kp.DataflowError):
            eng.wait("reader", timeout=30)
        a.insert([(20,)])
        a.advance_to(3)
        eng.wait(g, timeout=30)
        assert g.to_pandas()["count"].tolist() == [7]
        assert eng.dataflows() == {"good": "running", "bad": "failed", "reader": "failed"}
        eng.drop("bad")
        with eng.dataflow("bad") as df:
            b = df.input("a").map(lambda k: {"k": k + 1}).view("b")
        eng.wait(b, timeout=30)
        assert sorted(b.to_pandas()["k"]) == [1, 2, 3, 4, 5, 14, 21]
    finally:
        eng.close()


# -- 3. bad input ------------------------------------------------------------------------------------

BAD_ROWS = {
    "none_k": ([(None, 1.0, "a", True)], "'k'"),
    "nan_k": ([(float("nan"), 1.0, "a", True)], "'k'"),
    "big_k": ([(2**63, 1.0, "a", True)], "'k'"),
    "small_k": ([(-2**63 - 1, 1.0, "a", True)], "'k'"),
    "str_k": ([("1", 1.0, "a", True)], "'k'"),
    "fraction_k": ([(1.5, 1.0, "a", True)], "'k'"),
    "none_x": ([(1, None, "a", True)], "'x'"),
    "str_x": ([(1, "x", "a", True)], "'x'"),
    "huge_int_x": ([(1, 10**400, "a", True)], "'x'"),
    "none_s": ([(1, 1.0, None, True)], "'s'"),
    "int_s": ([(1, 1.0, 5, True)], "'s'"),
    "bytes_s": ([(1, 1.0, b"a", True)], "'s'"),
    "surrogate_s": ([(1, 1.0, "\ud800", True)], "'s'"),
    "none_b": ([(1, 1.0, "a", None)], "'b'"),
    "int_b": ([(1, 1.0, "a", 2)], "'b'"),
    "nan_b": ([(1, 1.0, "a", float("nan"))], "'b'"),
    "nullable_k": (pd.DataFrame({"k": pd.array([1, None], dtype="Int64"), "x": [1.0, 2.0], "s": ["a", "b"],
                                 "b": [True, False]}), "'k'"),
    "uint64_k": ({"k": np.array([2**64 - 1], np.uint64), "x": [1.0], "s": ["a"], "b": [True]}, "'k'"),
    "object_none_k": ({"k": np.array([1, None], object), "x": [1.0, 2.0], "s": ["a", "b"],
                       "b": [True, False]}, "'k'"),
    "datetime_k": (pd.DataFrame({"k": pd.to_datetime(["2020-01-01"]), "x": [1.0], "s": ["a"], "b": [True]}), "'k'"),
    "complex_x": ({"k": [1], "x": np.array([1 + 2j]), "s": ["a"], "b": [True]}, "'x'"),
    "masked_k": ({"k": np.ma.array([1, 2], mask=[0, 1]), "x": [1.0, 2.0], "s": ["a", "b"],
                  "b": [True, False]}, "'k'"),
    "missing_b": ({"k": [1], "x": [1.0], "s": ["a"]}, "'b'"),
    "short_row": ([(1, 1.0, "a")], "4 values"),
}


def test_bad_rows_are_refused_naming_the_column_and_nothing_loaded_is_lost():
    eng = kp.Engine(workers=2)
    try:
        a = eng.input("a", ["k", "x", "s", "b"], dtypes={"k": "int64", "x": "float64", "s": "str", "b": "bool"})
        good = [(i, i + 0.5, f"s{i}", i % 2 == 0) for i in range(6)]
        a.insert(good)
        a.advance_to(1)
        with eng.dataflow("q") as df:
            v = df.input("a").view("v")
        eng.wait(v)
        for name, (rows, what) in BAD_ROWS.items():
            with pytest.raises(kp.SchemaError, match=what):
                a.insert(rows)
            # a bad row after good ones: none of the batch goes in
            if isinstance(rows, list):
                with pytest.raises(kp.SchemaError, match=what):
                    a.insert([(100, 1.0, "z", True)] * 3 + rows)
        with pytest.raises(kp.SchemaError, match="diff"):
            a.update([(7, 1.0, "a", True), (8, 1.0, "a", True)], [1, 1.5])
        with pytest.raises(kp.SchemaError, match="diff"):
            a.update([(7, 1.0, "a", True), (8, 1.0, "a", True)], [1, 2**62])
        a.insert([(6, 6.5, "s6", True)])
        a.advance_to(2)
        eng.wait(v)
        got = sorted(v.to_pandas().itertuples(index=False, name=None))
        assert got == sorted(good + [(6, 6.5, "s6", True)])
        assert eng.dataflows() == {"q": "running"}
    finally:
        eng.close()
