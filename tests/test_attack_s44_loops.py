"""Attack s44 (loops): kpgnb.graphs (bfs, reachable, wcc, scc, sssp full, khop, pagerank,
propagate_min_label with and without label_rounds) and hand-written ``iterate`` loops -- nested loops
whose inner body reads the outer variable and top-level inputs, ``max_rounds`` (walk-count multiplicities,
nested cut loops), ``enter_at``, ``delay``, and count/top_k/distinct/min inside loops -- under random
insert/retract streams sent several epochs at a time without waiting, each epoch then read back with
``view.columns(at=e, diffs=True)`` and compared exactly (multiplicities included) with a from-scratch
Python oracle. Node ids include int64 extremes, negatives and 0; edges repeat (inserted twice, removed
once) and self-loops occur. W = 1, 2, 3, 4."""
from __future__ import annotations

import heapq
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
IDS = [I64_MIN, I64_MIN + 1, -5, -1, 0, 1, 7, 1 << 40, I64_MAX - 1, I64_MAX]


# -- streams -----------------------------------------------------------------------------------------
def edge_stream(rng, epochs, ids=IDS, weighted=False, roots=True, max_ops=5):
    """Per epoch: {"edges": [(row, diff)], "roots": [(row, diff)]}; edges repeat, self-loops happen,
    a live edge is sometimes removed once of twice, roots are inserted twice and removed."""
    live = Counter()
    rlive = Counter()
    out = []
    for ep in range(epochs):
        ch = {"edges": [], "roots": []}
        n_ops = int(rng.integers(0, max_ops + 1)) if ep else 8
        for _ in range(n_ops):
            k = rng.random()
            cand = [e for e, c in live.items() if c > 0]
            if k < 0.45 or not cand:
                u = ids[int(rng.integers(len(ids)))]
                v = u if rng.random() < 0.15 else ids[int(rng.integers(len(ids)))]
                e = (u, v) + ((int(rng.integers(0, 4)),) if weighted else ())
                d = 1
            elif k < 0.6:
                e, d = cand[int(rng.integers(len(cand)))], 1   # the same edge again
            else:
                e, d = cand[int(rng.integers(len(cand)))], -1  # one copy out
            live[e] += d
            ch["edges"].append((e, d))
        if roots and (ep == 0 or rng.random() < 0.6):
            r = ids[int(rng.integers(len(ids)))]
            d = -1 if rlive[r] > 0 and rng.random() < 0.5 else 1
            rlive[r] += d
            ch["roots"].append(((r,), d))
        out.append(ch)
    return out


def drive(workers, inputs, build, oracles, stream, seed, group_max=4, lag=(), install_at=0):
    """Install ``build(df) -> {name: collection}`` over ``inputs`` ({name: (cols, dtypes)}), play
    ``stream`` sending 1..group_max epochs before waiting, and compare every epoch with
    ``oracles[name](state)`` (state: {input: Counter(row -> net count)}) -> Counter(row -> diff).
    Inputs named in ``lag`` stay one epoch behind through a group (advanced to each epoch just before
    its changes, and past the group at its end). ``install_at``: the dataflow is installed after that
    many epochs have been sent (and completed); epochs before it are not read."""
    rng = np.random.default_rng(seed)
    hist = len(stream) + 2
    with kp.Engine(workers=workers) as eng:
        ins = {n: eng.input(n, list(spec[0]), dtypes=list(spec[1]), **(spec[2] if len(spec) > 2 else {}))
               for n, spec in inputs.items()}
        views = None
        state = {n: Counter() for n in inputs}
        wants = []
        e = 0
        while e < len(stream):
            if views is None and e >= install_at:
                with eng.dataflow("q") as df:
                    views = {n: c.view(n, history=hist) for n, c in build(df).items()}
            g = int(rng.integers(1, group_max + 1)) if views is not None else 1
            group = list(range(e, min(len(stream), e + g)))
            for ep in group:
                for n, ch in stream[ep].items():
                    if n in lag and ep > group[0]:
                        ins[n].advance_to(ep)
                    if ch:
                        ins[n].update([tuple(r) for r, _ in ch], [d for _, d in ch])
                        for r, d in ch:
                            state[n][tuple(r)] += d
                for n, inp in ins.items():
                    if n not in lag or ep == group[-1]:
                        inp.advance_to(ep + 1)
                snap = {n: Counter({k: v for k, v in c.items() if v != 0}) for n, c in state.items()}
                wants.append({n: o(snap) for n, o in oracles.items()})
            if views is None:
                e = group[-1] + 1
                continue
            for v in views.values():
                eng.wait(v, timeout=120)
            for ep in group:
                for n, v in views.items():
                    got = read_counter(v, ep)
                    check(got, wants[ep][n], (n, ep, workers, seed))
            e = group[-1] + 1
        # every epoch again, from the start (history kept)
        for ep in range(max(install_at, 0), len(stream)):
            for n, v in views.items():
                check(read_counter(v, ep), wants[ep][n], ("reread", n, ep, workers, seed))


def read_counter(view, at):
    cols = view.columns(at=at, diffs=True)
    diff = cols.pop("diff")
    names = list(cols)
    rows = zip(*[cols[c].tolist() for c in names]) if names else [()] * len(diff)
    out = Counter()
    for r, d in zip(rows, diff.tolist()):
        out[tuple(r)] += d
    return Counter({k: v for k, v in out.items() if v != 0})


def check(got, want, ctx):
    if isinstance(want, tuple) and want and want[0] == "approx":
        want = want[1]
        assert set(got) == set(want) or _approx_keys(got, want), ctx
        return
    if got != want:
        only_got = {k: v for k, v in got.items() if want.get(k) != v}
        only_want = {k: v for k, v in want.items() if got.get(k) != v}
        raise AssertionError(f"{ctx}: engine-only {sorted(only_got.items())[:8]}, "
                             f"oracle-only {sorted(only_want.items())[:8]}")


def _approx_keys(got, want, tol=1e-9):
    g = sorted(got.items())
    w = sorted(want.items())
    if len(g) != len(w):
        raise AssertionError(f"approx: {g[:6]} vs {w[:6]}")
    for (kg, cg), (kw, cw) in zip(g, w):
        assert cg == cw and kg[0] == kw[0], (kg, kw)
        assert abs(kg[1] - kw[1]) <= tol * max(1.0, abs(kw[1])), (kg, kw)
    return True


# -- oracles -------------------------------------------------------------------------------------------
def pos(c):
    return [k for k, v in c.items() if v > 0]


def adjacency(edges):
    adj = {}
    for e in pos(edges):
        adj.setdefault(e[0], set()).add(e[1])
    return adj


def bfs_dists(adj, roots, limit=None):
    dist = {r: 0 for r in roots}
    frontier = list(roots)
    d = 0
    while frontier and (limit is None or d < limit):
        d += 1
        nxt = []
        for u in frontier:
            for v in adj.get(u, ()):
                if v not in dist:
                    dist[v] = d
                    nxt.append(v)
        frontier = nxt
    return dist


def o_bfs(s):
    roots = [r for (r,) in pos(s["roots"])]
    return Counter({(v, d): 1 for v, d in bfs_dists(adjacency(s["edges"]), roots).items()})


def o_reach(s, limit=None):
    roots = [r for (r,) in pos(s["roots"])]
    return Counter({(v,): 1 for v in bfs_dists(adjacency(s["edges"]), roots, limit)})


def o_wcc(s):
    parent = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for u, v in pos(s["edges"]):
        parent.setdefault(u, u)
        parent.setdefault(v, v)
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return Counter({(x, min(y for y in parent if find(y) == find(x))): 1 for x in parent})


def o_scc(s):
    adj = adjacency(s["edges"])
    reach = {}
    for u in {e[0] for e in pos(s["edges"])} | {e[1] for e in pos(s["edges"])}:
        reach[u] = set(bfs_dists(adj, [u]))
    return Counter({(u, v): c for (u, v), c in s["edges"].items()
                    if c > 0 and v in reach[u] and u in reach[v]})


def o_khop(k):
    def o(s):
        adj = adjacency(s["edges"])
        out = Counter()
        for (r,) in pos(s["roots"]):
            for v, d in bfs_dists(adj, [r], k).items():
                out[(r, v, d)] = 1
        return out
    return o


def o_sssp(s):
    adj = {}
    for a, b, w in pos(s["edges"]):
        adj.setdefault(a, []).append((b, w))
    out = Counter()
    for (src,) in pos(s["roots"]):
        dist = {src: 0}
        pq = [(0, src)]
        while pq:
            d, v = heapq.heappop(pq)
            if d > dist[v]:
                continue
            for b, w in adj.get(v, ()):
                if b not in dist or d + w < dist[b]:
                    dist[b] = d + w
                    heapq.heappush(pq, (d + w, b))
        for v, d in dist.items():
            out[(src, v, d)] = 1
    return out


def o_minlabel(s):
    """propagate_min_label over edges from nodes (node, label): the smallest label of a node reaching
    each node (itself included); nodes only reached carry a label too."""
    adj = adjacency(s["edges"])
    out = Counter()
    best = {}
    for (n, lab) in pos(s["nodes"]):
        for v in bfs_dists(adj, [n]):
            if v not in best or lab < best[v]:
                best[v] = lab
    for v, lab in best.items():
        out[(v, lab)] = 1
    return out


def o_pagerank(iterations, alpha=0.85):
    def o(s):
        E = [((a, b), c) for (a, b), c in s["edges"].items() if c > 0]
        nodes = {a for (a, _), _ in E} | {b for (_, b), _ in E}
        outdeg = Counter()
        for (a, _), c in E:
            outdeg[a] += c
        rank = {v: 1 - alpha for v in nodes}
        for _ in range(iterations):
            new = {v: 1 - alpha for v in nodes}
            for (a, b), c in E:
                new[b] += c * alpha * rank[a] / outdeg[a]
            rank = new
        return ("approx", Counter({(v, r): 1 for v, r in rank.items()}))
    return o


EDGE_IN = {"edges": (("src", "dst"), ("int64", "int64")), "roots": (("node",), ("int64",))}
W_EDGE_IN = {"edges": (("src", "dst", "w"), ("int64", "int64", "int64")),
             "roots": (("source",), ("int64",))}

SEEDS_W = [(0, 1), (1, 2), (2, 3), (3, 4)]


# -- kpgnb.graphs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_graphs_library_async_epochs(seed, workers):
    rng = np.random.default_rng(1000 + seed)
    stream = edge_stream(rng, 12)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"bfs": graphs.bfs(e, r), "reach": graphs.reachable(e, r), "wcc": graphs.wcc(e),
                "scc": graphs.scc(e),
                "khop": graphs.khop(e, r.rename(node="source"), 2)}
    drive(workers, EDGE_IN, build,
          {"bfs": o_bfs, "reach": o_reach, "wcc": o_wcc, "scc": o_scc, "khop": o_khop(2)},
          stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_sssp_full_async_epochs(seed, workers):
    rng = np.random.default_rng(2000 + seed)
    stream = edge_stream(rng, 10, weighted=True)
    for ch in stream:
        ch["roots"] = ch["roots"]

    def build(df):
        return {"sssp": graphs.sssp(df.input("edges"), df.input("roots"), memory="full")}
    drive(workers, W_EDGE_IN, build, {"sssp": o_sssp}, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_pagerank_async_epochs(seed, workers):
    rng = np.random.default_rng(3000 + seed)
    stream = edge_stream(rng, 8, roots=False)
    for ch in stream:
        del ch["roots"]
    drive(workers, {"edges": EDGE_IN["edges"]},
          lambda df: {"pr": graphs.pagerank(df.input("edges"), iterations=4)},
          {"pr": o_pagerank(4)}, stream, seed)


def label_rounds_odd(label):
    label = np.asarray(label)
    return (np.abs(label % 7) + (label % 3 == 0) * 5).astype(np.int64)


@pytest.mark.parametrize("rounds", [None, "bits", "odd"])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_propagate_min_label_with_enter_at(seed, workers, rounds):
    rng = np.random.default_rng(4000 + seed)
    stream = edge_stream(rng, 10)
    # nodes (node, label): the root stream's node with a random label, labels at int64 extremes too
    for ch in stream:
        ch["nodes"] = [((r[0], IDS[int(rng.integers(len(IDS)))]), d) for r, d in ch.pop("roots")]
    # a removal must remove a present (node, label): rebuild removals to match
    live = Counter()
    for ch in stream:
        fixed = []
        for (n, lab), d in ch["nodes"]:
            if d < 0:
                have = [k for k, c in live.items() if c > 0 and k[0] == n]
                if not have:
                    continue
                fixed.append((have[0], -1))
                live[have[0]] -= 1
            else:
                fixed.append(((n, lab), 1))
                live[(n, lab)] += 1
        ch["nodes"] = fixed
    fn = {None: None, "bits": graphs.bit_length_rounds, "odd": label_rounds_odd}[rounds]
    drive(workers, {"edges": EDGE_IN["edges"], "nodes": (("node", "label"), ("int64", "int64"))},
          lambda df: {"lab": graphs.propagate_min_label(df.input("edges"), df.input("nodes"), fn)},
          {"lab": o_minlabel}, stream, seed)


# -- hand-written loops ------------------------------------------------------------------------------
def succ(x, edges):
    return x.join(edges, left_on="node", right_on="src").map(lambda dst: {"node": dst})


def walks_oracle(s, n):
    """roots.iterate(lambda x: succ(x) + roots, max_rounds=n): multiplicities count walks of length
    <= n from the roots (each edge counted with its multiplicity)."""
    E = [((a, b), c) for (a, b), c in s["edges"].items() if c != 0]
    R = Counter({k: v for k, v in s["roots"].items() if v != 0})
    x = Counter(R)
    for _ in range(n):
        y = Counter(R)
        for (a,), c in x.items():
            for (u, v), m in E:
                if u == a:
                    y[(v,)] += c * m
        x = Counter({k: v for k, v in y.items() if v != 0})
    return x


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_walk_counts_max_rounds(seed, workers, n):
    rng = np.random.default_rng(5000 + seed)
    stream = edge_stream(rng, 10, ids=IDS[:7])

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"w": r.iterate(lambda x: succ(x, e).concat(r), max_rounds=n),
                "reach": r.iterate(lambda x: succ(x, e).concat(r).distinct(), max_rounds=n)}
    drive(workers, EDGE_IN, build,
          {"w": lambda s: walks_oracle(s, n), "reach": lambda s: o_reach(s, n)}, stream, seed)


def nested_walks_oracle(s, n_out, n_in):
    E = [((a, b), c) for (a, b), c in s["edges"].items() if c != 0]
    R = Counter({k: v for k, v in s["roots"].items() if v != 0})

    def sc(x):
        y = Counter()
        for (a,), c in x.items():
            for (u, v), m in E:
                if u == a:
                    y[(v,)] += c * m
        return y

    def inner(yv):
        x = Counter(yv)
        for _ in range(n_in):
            z = sc(x)
            z.update(yv)
            x = Counter({k: v for k, v in z.items() if v != 0})
        return x
    y = Counter(R)
    for _ in range(n_out):
        z = inner(y)
        z.update(R)
        y = Counter({k: v for k, v in z.items() if v != 0})
    return y


@pytest.mark.parametrize("n_out, n_in", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1)])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_nested_cut_loops_walk_counts(seed, workers, n_out, n_in):
    """outer(y) = inner_loop(y) + roots, inner(x) = succ(x) + y: both cut by max_rounds; exact counts."""
    rng = np.random.default_rng(6000 + seed)
    stream = edge_stream(rng, 8, ids=IDS[:6], max_ops=3)

    def build(df):
        e, r = df.input("edges"), df.input("roots")

        def outer(y):
            return y.iterate(lambda x: succ(x, e).concat(y), max_rounds=n_in).concat(r)
        return {"w": r.iterate(outer, max_rounds=n_out)}
    drive(workers, EDGE_IN, build, {"w": lambda s: nested_walks_oracle(s, n_out, n_in)}, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_nested_fixed_point_inner_reads_outer_variable(seed, workers):
    """Reachability as a loop of loops: the inner loop closes the outer set under edges whose source is in
    the outer set (a semijoin with the outer variable) -- the answer is plain reachability."""
    rng = np.random.default_rng(7000 + seed)
    stream = edge_stream(rng, 12)

    def build(df):
        e, r = df.input("edges"), df.input("roots")

        def outer(y):
            ey = e.semijoin(y, left_on="src", right_on="node")

            def inner(x):
                return x.join(ey, left_on="node", right_on="src").map(lambda dst: {"node": dst}) \
                        .concat(x).distinct()
            return y.iterate(inner).concat(r).distinct()
        d = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

        def outer_bfs(z):
            # inner: relax distances along edges from z, with a min inside the inner loop
            def inner(x):
                return x.join(e, left_on="node", right_on="src").map(
                    lambda dst, dist: {"node": dst, "dist": dist + 1}).concat(z).min(by="node", col="dist")
            return z.iterate(inner, max_rounds=1).concat(d).min(by="node", col="dist")
        return {"reach": r.iterate(outer), "bfs": d.iterate(outer_bfs)}
    drive(workers, EDGE_IN, build, {"reach": o_reach, "bfs": o_bfs}, stream, seed)


def prune_oracle(s, K):
    edges = {k: v for k, v in s["edges"].items() if v > 0}
    R = {u for u, _ in edges} | {v for _, v in edges}
    while True:
        indeg = Counter()
        for (u, v), c in edges.items():
            if u in R:
                indeg[v] += c
        R2 = {v for v in R if indeg[v] >= K}
        if R2 == R:
            return Counter({(v,): 1 for v in R})
        R = R2


@pytest.mark.parametrize("K", [1, 2])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_count_inside_loop_pruning(seed, workers, K):
    """A shrinking fixed point: keep nodes with >= K in-edges (counted with multiplicity) from kept
    nodes. A count inside the loop whose answer goes down as well as up under retractions."""
    rng = np.random.default_rng(8000 + seed)
    stream = edge_stream(rng, 12, roots=False)
    for ch in stream:
        del ch["roots"]

    def build(df):
        e = df.input("edges")
        nodes = e.map(lambda src: {"node": src}).concat(e.map(lambda dst: {"node": dst})).distinct()

        def body(R):
            cnt = e.semijoin(R, left_on="src", right_on="node").count(by="dst")
            keep = cnt.filter(lambda count: count >= K).map(lambda dst: {"node": dst})
            return keep.semijoin(R, on="node").distinct()
        return {"core": nodes.iterate(body)}
    drive(workers, {"edges": EDGE_IN["edges"]}, build, {"core": lambda s: prune_oracle(s, K)}, stream, seed)


def top2_oracle(s):
    adj = adjacency(s["edges"])
    labels = {}
    for (r,) in pos(s["roots"]):
        for v in bfs_dists(adj, [r]):
            labels.setdefault(v, set()).add(r)
    out = Counter()
    for v, ls in labels.items():
        for lab in sorted(ls)[:2]:
            out[(v, lab)] = 1
    return out


def max_oracle(s):
    adj = adjacency(s["edges"])
    best = {}
    for (r,) in pos(s["roots"]):
        for v in bfs_dists(adj, [r]):
            best[v] = max(best.get(v, r), r)
    return Counter({(v, lab): 1 for v, lab in best.items()})


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_top_k_and_max_inside_loops(seed, workers):
    rng = np.random.default_rng(9000 + seed)
    stream = edge_stream(rng, 12)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        start = r.map(lambda node: {"node": node, "label": node})

        def body_top(x):
            return x.join(e, left_on="node", right_on="src").map(lambda dst, label: {"node": dst, "label": label}) \
                    .concat(start).distinct().top_k(by="node", order_by="label", k=2, descending=False)

        def body_max(x):
            return x.join(e, left_on="node", right_on="src").map(lambda dst, label: {"node": dst, "label": label}) \
                    .concat(start).max(by="node", col="label")
        return {"top": start.iterate(body_top), "max": start.iterate(body_max)}
    drive(workers, EDGE_IN, build, {"top": top2_oracle, "max": max_oracle}, stream, seed)


def delay_rounds(dist):
    return ((dist * 5) % 7).astype(np.int64)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_delay_and_enter_at_in_hand_loops(seed, workers):
    """bfs with candidate distances held back by an arbitrary (non-monotone) round function, and the
    roots entering at rounds given by their id: the fixed point is the same."""
    rng = np.random.default_rng(10000 + seed)
    stream = edge_stream(rng, 12)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        start = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

        def step(d):
            return (d.join(e, left_on="node", right_on="src")
                     .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                     .delay(delay_rounds)
                     .concat(start).min(by="node", col="dist"))
        scope = df.loop()
        var = kp.Variable(scope, columns=["node", "dist"], dtypes=["int64", "int64"])
        late = start.enter_at(scope, lambda node: (np.abs(node % 5)).astype(np.int64))
        bfs2 = var.set(var.join(e, left_on="node", right_on="src")
                       .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                       .concat(late).min(by="node", col="dist")).leave()
        return {"bfs": start.iterate(step), "bfs_at": bfs2}
    drive(workers, EDGE_IN, build, {"bfs": o_bfs, "bfs_at": o_bfs}, stream, seed)


# -- more: uneven inputs, late installs, negative multiplicities, trivial bodies, delay in cut loops ----
def churn_stream(rng, epochs, ids, negative=False, same_epoch=True):
    """Like edge_stream, plus within-epoch insert+remove of one row, duplicated inserts in one batch and
    (``negative``) removals of rows never inserted (net counts below zero) on the roots."""
    st = edge_stream(rng, epochs, ids=ids)
    for ch in st:
        if same_epoch and rng.random() < 0.5:
            u, v = ids[int(rng.integers(len(ids)))], ids[int(rng.integers(len(ids)))]
            ch["edges"] += [((u, v), 1), ((u, v), 1), ((u, v), -1)]
        if same_epoch and rng.random() < 0.3:
            r = ids[int(rng.integers(len(ids)))]
            ch["roots"] += [((r,), 1), ((r,), -1)]
        if negative and rng.random() < 0.3:
            ch["roots"].append(((ids[int(rng.integers(len(ids)))],), -1))
    return st


@pytest.mark.parametrize("lag", [("roots",), ("edges",)])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_graphs_uneven_inputs_and_late_install(seed, workers, lag):
    rng = np.random.default_rng(11000 + seed)
    stream = churn_stream(rng, 14, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"bfs": graphs.bfs(e, r), "reach": graphs.reachable(e, r), "scc": graphs.scc(e),
                "khop": graphs.khop(e, r.rename(node="source"), 3)}
    drive(workers, EDGE_IN, build, {"bfs": o_bfs, "reach": o_reach, "scc": o_scc, "khop": o_khop(3)},
          stream, seed, lag=lag, install_at=3 + seed)


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_walk_counts_with_negative_roots(seed, workers, n):
    rng = np.random.default_rng(12000 + seed)
    stream = churn_stream(rng, 12, IDS[:6], negative=True)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"w": r.iterate(lambda x: succ(x, e).concat(r), max_rounds=n)}
    drive(workers, EDGE_IN, build, {"w": lambda s: walks_oracle(s, n)}, stream, seed)


def scaled(s, f):
    return Counter({k: v * f for k, v in s["roots"].items() if v * f != 0})


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_trivial_bodies(seed, workers):
    """negate / double / identity / constant bodies, cut and uncut, over roots with negative counts."""
    rng = np.random.default_rng(13000 + seed)
    stream = churn_stream(rng, 10, IDS, negative=True)

    def build(df):
        r = df.input("roots")
        e = df.input("edges")
        return {"neg3": r.iterate(lambda x: x.negate(), max_rounds=3),
                "neg2": r.iterate(lambda x: x.negate(), max_rounds=2),
                "dbl3": r.iterate(lambda x: x.concat(x), max_rounds=3),
                "id": r.iterate(lambda x: x),
                "idmap": r.iterate(lambda x: x.map(lambda node: {"node": node})),
                "const": r.iterate(lambda x: e.map(lambda src: {"node": src})),
                "const2": r.iterate(lambda x: e.map(lambda src: {"node": src}), max_rounds=2)}
    def src_counts(s):
        out = Counter()
        for (a, b), c in s["edges"].items():
            out[(a,)] += c
        return Counter({k: v for k, v in out.items() if v != 0})
    drive(workers, EDGE_IN, build,
          {"neg3": lambda s: scaled(s, -1), "neg2": lambda s: scaled(s, 1), "dbl3": lambda s: scaled(s, 8),
           "id": lambda s: scaled(s, 1), "idmap": lambda s: scaled(s, 1), "const": src_counts,
           "const2": src_counts}, stream, seed)


def delayed_walks_oracle(s, n, f):
    """x_0 = R, x_{r+1} = succ(x_r restricted to rows with f(row) <= r) + R; the answer is body(x_{n-1})
    with every delayed row in (the variable stops at round n - 1, the body's later rounds still count:
    see test_attack_engine_nested's cut-loop semantics)."""
    E = [((a, b), c) for (a, b), c in s["edges"].items() if c != 0]
    R = Counter({k: v for k, v in s["roots"].items() if v != 0})
    x = Counter(R)
    for r in range(n):
        y = Counter(R)
        for (a,), c in x.items():
            if f(a) > r and r < n - 1:
                continue
            for (u, v), m in E:
                if u == a:
                    y[(v,)] += c * m
        x = Counter({k: v for k, v in y.items() if v != 0})
    return x


def f_delay(node):
    return (np.abs(node % 3)).astype(np.int64)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_delay_in_cut_walk_loop(seed, workers, n):
    rng = np.random.default_rng(14000 + seed)
    stream = churn_stream(rng, 10, IDS[:6])

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"w": r.iterate(lambda x: succ(x.delay(f_delay), e).concat(r), max_rounds=n)}
    drive(workers, EDGE_IN, build,
          {"w": lambda s: delayed_walks_oracle(s, n, lambda a: abs(a % 3))}, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_mutual_recursion_variables(seed, workers):
    """Even / odd walk reachability by two Variables: even = roots + succ(odd), odd = succ(even)."""
    rng = np.random.default_rng(15000 + seed)
    stream = churn_stream(rng, 12, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        loop = df.loop()
        ev = kp.Variable(loop, columns=["node"], dtypes=["int64"])
        od = kp.Variable(loop, columns=["node"], dtypes=["int64"])
        ev_next = ev.set(succ(od, e).concat(r).distinct())
        od_next = od.set(succ(ev, e).distinct())
        return {"even": ev_next.leave(), "odd": od_next.leave()}

    def parity(s, want):
        adj = adjacency(s["edges"])
        seen = {(r, 0) for (r,) in pos(s["roots"])}
        todo = list(seen)
        while todo:
            u, p = todo.pop()
            for v in adj.get(u, ()):
                if (v, 1 - p) not in seen:
                    seen.add((v, 1 - p))
                    todo.append((v, 1 - p))
        return Counter({(v,): 1 for v, p in seen if p == want})
    drive(workers, EDGE_IN, build, {"even": lambda s: parity(s, 0), "odd": lambda s: parity(s, 1)},
          stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_nested_enter_at_and_delay_in_inner_loop(seed, workers):
    """Outer: reach; inner: bfs from the outer set with distances delayed and roots entering the inner
    loop at id-dependent rounds. Output: reach (through the nested loops)."""
    rng = np.random.default_rng(16000 + seed)
    stream = churn_stream(rng, 12, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")

        def outer(y):
            start = y.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})
            scope = y.scope.loop()
            var = kp.Variable(scope, columns=["node", "dist"], dtypes=["int64", "int64"])
            late = start.enter_at(scope, lambda node: np.abs(node % 4).astype(np.int64))
            inner = var.set(var.join(e, left_on="node", right_on="src")
                            .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                            .delay(delay_rounds).concat(late).min(by="node", col="dist")).leave()
            return inner.map(lambda node: {"node": node}).concat(r).distinct()
        return {"reach": r.iterate(outer)}
    drive(workers, EDGE_IN, build, {"reach": o_reach}, stream, seed)


# -- stress: bigger graphs, longer streams, sparse huge rounds ------------------------------------------
def big_ids(rng, n):
    extra = [int(x) for x in rng.integers(-50, 50, n)] + IDS
    return sorted(set(extra))[: n + len(IDS)]


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_stress_graphs_longer_streams(seed, workers):
    rng = np.random.default_rng(17000 + seed)
    ids = big_ids(rng, 14)
    stream = churn_stream(rng, 24, ids)
    for ch in stream:  # more edges per epoch
        for _ in range(int(rng.integers(0, 6))):
            u, v = ids[int(rng.integers(len(ids)))], ids[int(rng.integers(len(ids)))]
            ch["edges"].append(((u, v), 1))

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        return {"bfs": graphs.bfs(e, r), "wcc": graphs.wcc(e), "scc": graphs.scc(e),
                "lab": graphs.propagate_min_label(e, r.map(lambda node: {"node": node, "label": -node}),
                                                  label_rounds_odd)}

    def o_lab(s):
        return o_minlabel({"edges": s["edges"], "nodes": Counter({(n, -n): c for (n,), c in s["roots"].items()
                                                                  if c > 0 and n != I64_MIN})})
    stream2 = stream
    for ch in stream2:  # -I64_MIN overflows: keep the int64 minimum out of the roots here
        ch["roots"] = [((r if r[0] != I64_MIN else (I64_MIN + 1,)), d) for r, d in ch["roots"]]
    drive(workers, EDGE_IN, build, {"bfs": o_bfs, "wcc": o_wcc, "scc": o_scc, "lab": o_lab},
          stream2, seed, group_max=6)


def huge_rounds(dist):
    return (dist * (1 << 40) + 3).astype(np.int64)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_huge_sparse_rounds(seed, workers):
    """delay and enter_at to rounds near 2**40 and 2**61: a fixed-point loop still reaches its answer
    (rounds are times, not steps)."""
    rng = np.random.default_rng(18000 + seed)
    stream = churn_stream(rng, 8, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        start = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

        def step(d):
            return (d.join(e, left_on="node", right_on="src")
                     .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                     .delay(huge_rounds).concat(start).min(by="node", col="dist"))
        nodes = r.map(lambda node: {"node": node, "label": node})
        lab = graphs.propagate_min_label(e, nodes, lambda label: np.where(label % 2 == 0, 1 << 61, 7).astype(np.int64))
        return {"bfs": start.iterate(step), "lab": lab}

    def o_lab(s):
        return o_minlabel({"edges": s["edges"], "nodes": Counter({(n, n): c for (n,), c in s["roots"].items()
                                                                  if c > 0})})
    drive(workers, EDGE_IN, build, {"bfs": o_bfs, "lab": o_lab}, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_max_rounds_beyond_convergence_and_huge(seed, workers):
    rng = np.random.default_rng(19000 + seed)
    stream = churn_stream(rng, 10, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        body = lambda x: succ(x, e).concat(r).distinct()
        start = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

        def step(d):
            return (d.join(e, left_on="node", right_on="src")
                     .map(lambda dst, dist: {"node": dst, "dist": dist + 1}).concat(start).min(by="node", col="dist"))
        return {"r50": r.iterate(body, max_rounds=50), "rhuge": r.iterate(body, max_rounds=1 << 62),
                "b3": start.iterate(step, max_rounds=3), "b0": r.iterate(body, max_rounds=0)}

    def o_b3(s):
        roots = [x for (x,) in pos(s["roots"])]
        return Counter({(v, d): 1 for v, d in bfs_dists(adjacency(s["edges"]), roots, 3).items()})
    drive(workers, EDGE_IN, build, {"r50": o_reach, "rhuge": o_reach, "b3": o_b3,
                                    "b0": lambda s: Counter({k: v for k, v in s["roots"].items() if v})},
          stream, seed)


STR_IDS = ["", "a", "A", "aa", "b", "\u00e9", "\U0001f600", "z" * 30, "0", "-1"]
FLOAT_IDS = [-np.inf, -1e308, -1.5, -0.0, 0.0, 5e-324, 1.0, 2.5, 1e308, np.inf]


@pytest.mark.parametrize("kind", ["str", "float", "keyed"])
@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_graphs_str_float_ids_and_keyed_input(seed, workers, kind):
    rng = np.random.default_rng(20000 + seed)
    ids = {"str": STR_IDS, "float": [float(x) for x in FLOAT_IDS], "keyed": IDS}[kind]
    dt = {"str": "str", "float": "float64", "keyed": "int64"}[kind]
    stream = churn_stream(rng, 12, ids)
    extra = {"key": "src"} if kind == "keyed" else {}
    inputs = {"edges": (("src", "dst"), (dt, dt), extra), "roots": (("node",), (dt,))}

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        out = {"bfs": graphs.bfs(e, r), "reach": graphs.reachable(e, r), "wcc": graphs.wcc(e),
               "scc": graphs.scc(e)}
        if kind != "str":
            out["khop"] = graphs.khop(e, r.rename(node="source"), 2)
        return out
    oracles = {"bfs": o_bfs, "reach": o_reach, "wcc": o_wcc, "scc": o_scc, "khop": o_khop(2)}
    if kind == "str":
        del oracles["khop"]
    drive(workers, inputs, build, oracles, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_loop_over_imported_arrangement_installed_late(seed, workers):
    """dataflow 1 exports the edges arranged by src; dataflow 2, installed epochs later, runs a bfs
    loop and a nested reach over the imported arrangement."""
    rng = np.random.default_rng(21000 + seed)
    stream = churn_stream(rng, 14, IDS)
    with kp.Engine(workers=workers) as eng:
        E = eng.input("edges", ["src", "dst"])
        R = eng.input("roots", ["node"])
        with eng.dataflow("idx") as df:
            df.input("edges").arrange_by("src").export("by_src")
        state = {"edges": Counter(), "roots": Counter()}
        wants, views, born = [], None, 4
        for ep, ch in enumerate(stream):
            for n, inp in (("edges", E), ("roots", R)):
                if ch[n]:
                    inp.update([r for r, _ in ch[n]], [d for _, d in ch[n]])
                    for r, d in ch[n]:
                        state[n][r] += d
            E.advance_to(ep + 1)
            R.advance_to(ep + 1)
            wants.append((o_bfs(state), o_reach(state)))
            if ep + 1 == born:
                with eng.dataflow("q") as df:
                    g = df.use("by_src")
                    r = df.input("roots")
                    vb = graphs.bfs(g, r).view("b", history=40)
                    vr = r.iterate(lambda y: y.iterate(
                        lambda x: x.join(g, left_on="node", right_on="src").map(lambda dst: {"node": dst})
                        .concat(y).distinct()).concat(r).distinct()).view("r", history=40)
                views = (vb, vr)
        eng.wait(views[0], timeout=120)
        eng.wait(views[1], timeout=120)
        for ep in range(len(stream)):
            try:
                gb = read_counter(views[0], ep)
            except kp.CompactedError:
                assert ep < born + 1, ep
                continue
            check(gb, wants[ep][0], ("bfs", ep))
            check(read_counter(views[1], ep), wants[ep][1], ("reach", ep))


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_argmin_parent_tree_inside_loop(seed, workers):
    """bfs with parents: argmin by node over (node, dist, parent); ties on dist go to the smallest parent.
    A root is its own parent at distance 0."""
    rng = np.random.default_rng(22000 + seed)
    stream = churn_stream(rng, 14, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")
        start = r.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64), "parent": node})

        def step(x):
            return (x.join(e, left_on="node", right_on="src")
                     .map(lambda node, dst, dist: {"node": dst, "dist": dist + 1, "parent": node})
                     .concat(start).argmin(by="node", col="dist"))
        return {"tree": start.iterate(step)}

    def o_tree(s):
        roots = [x for (x,) in pos(s["roots"])]
        adj = adjacency(s["edges"])
        dist = bfs_dists(adj, roots)
        out = Counter()
        for v, d in dist.items():
            if d == 0:
                out[(v, 0, v)] = 1
            else:
                p = min(u for u in dist if dist[u] == d - 1 and v in adj.get(u, ()))
                out[(v, d, p)] = 1
        return out
    drive(workers, EDGE_IN, build, {"tree": o_tree}, stream, seed)


@pytest.mark.parametrize("seed, workers", SEEDS_W)
def test_all_epochs_sent_before_any_wait(seed, workers):
    """Thirty epochs of churn sent at once (one physical batch per operator), then every epoch read."""
    rng = np.random.default_rng(23000 + seed)
    stream = churn_stream(rng, 30, IDS)

    def build(df):
        e, r = df.input("edges"), df.input("roots")

        def outer(y):
            return y.iterate(lambda x: succ(x, e).concat(y), max_rounds=2).concat(r)
        return {"bfs": graphs.bfs(e, r), "scc": graphs.scc(e), "wcc": graphs.wcc(e),
                "w": r.iterate(outer, max_rounds=2),
                "khop": graphs.khop(e, r.rename(node="source"), 1)}
    drive(workers, EDGE_IN, build, {"bfs": o_bfs, "scc": o_scc, "wcc": o_wcc,
                                    "w": lambda s: nested_walks_oracle(s, 2, 2), "khop": o_khop(1)},
          stream, seed, group_max=100)
