"""Session 44 attack on the memory modes of the recursive graph queries (issue 14) and on the Datalog
front end (issue 13), against from-scratch references.

(a) kpgnb.graphs.sssp/khop/wcc/pagerank/rpq in memory="full", "jod" and many "drop" variants, side by side
in one engine over a scripted-random stream of edge multisets: self-loops, parallel edges (one row given
twice, and the same (src, dst) with two weights), weight 0 and large weights, weight changes as a
retract + insert in one epoch, an edge deleted and inserted back (in one epoch: no net change; and across
epochs), every edge deleted and the graph reloaded, sources added, removed, given twice, removed once,
sources that are no node, sources changing in the same epoch as edges, epochs that skip numbers, epochs
in which nothing changes. Every epoch: every mode's rows with multiplicities (diffs=True) equal full's,
and full's equal a from-scratch oracle (Dijkstra over the multigraph, BFS, components, power iteration,
a product BFS). The history (``to_pandas(at=)``) agrees too, where it is readable.

(b) Datalog over str and float columns (``.decl``), repeated variables, constants in atoms, recursive
min and max over floats and strings, mutual recursion, stratified negation, arithmetic; random
insert/retract streams; goals of every binding pattern with str and float bindings asked and retracted
between input changes; DatalogError positions.
"""
from __future__ import annotations

import heapq
import math
import random
from collections import Counter, defaultdict

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

from datalog_reference import diff_rows, evaluate, rows_of, same_rows

WAIT = 120

# ======================================================================================================
# (a) memory modes
# ======================================================================================================

DROPS = {
    "jod": ("jod", None),
    "p0-deg-exact": ("drop", kp.Drop(p=0.0, policy="degree", tracker="exact", tau_min=0)),
    "p1-rand-exact": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
    "p1-rand-bloom64": ("drop", kp.Drop(p=1.0, policy="random", tracker="bloom", bloom_bits=64, bloom_hashes=1)),
    "half-deg-bloom": ("drop", kp.Drop(p=0.5, policy="degree", tracker="bloom", bloom_bits=256, tau_min=1,
                                       tau_max_percentile=50, seed=3)),
    "deg-pct0": ("drop", kp.Drop(p=0.7, policy="degree", tracker="exact", tau_min=3, tau_max_percentile=0)),
    "deg-pct100": ("drop", kp.Drop(p=0.3, policy="degree", tracker="exact", tau_min=0, tau_max_percentile=100,
                                   seed=11)),
    "rand-bloom16h": ("drop", kp.Drop(p=0.6, policy="random", tracker="bloom", bloom_bits=128, bloom_hashes=16)),
}


def _frame(view, cols, at=None):
    df = view.to_pandas(at=at, diffs=True)
    return sorted(tuple(v.item() if hasattr(v, "item") else v for v in r)
                  for r in df[cols + ["diff"]].itertuples(index=False, name=None))


class Graph:
    """A multiset of weighted edges (src, dst, w) and of sources, mirrored into engine inputs."""

    def __init__(self, rng, n, float_w=False):
        self.rng, self.n, self.float_w = rng, n, float_w
        self.E = Counter()
        self.S = Counter()

    def w(self):
        r = self.rng.random()
        if r < 0.15:
            v = 0
        elif r < 0.2:
            v = 10 ** 9 + int(self.rng.integers(0, 3))
        else:
            v = int(self.rng.integers(1, 8))
        return float(v) + (0.5 if self.float_w and self.rng.random() < 0.5 else 0.0) if self.float_w else v

    def node(self):
        return int(self.rng.integers(0, self.n))

    def present(self):
        return sorted(k for k, c in self.E.items() if c > 0)

    def events(self, ep):
        """One epoch's edge and source changes: (edge rows +, edge rows -, source rows +, source rows -)."""
        rng = self.rng
        ins, rem, sins, srem = [], [], [], []
        kinds = ["add", "add", "del", "reweight", "selfloop", "parallel", "dup", "flap", "samepair"]
        for _ in range(int(rng.integers(1, 6))):
            k = kinds[int(rng.integers(len(kinds)))]
            live = [e for e in self.present() if self.E[e] - rem.count(e) > 0]
            if k == "add":
                ins.append((self.node(), self.node(), self.w()))
            elif k == "selfloop":
                v = self.node()
                ins.append((v, v, self.w()))
            elif k == "parallel" and live:  # the same row again: multiplicity 2
                ins.append(live[int(rng.integers(len(live)))])
            elif k == "samepair" and live:  # the same (src, dst) with another weight
                a, b, _ = live[int(rng.integers(len(live)))]
                ins.append((a, b, self.w()))
            elif k == "del" and live:
                rem.append(live[int(rng.integers(len(live)))])
            elif k == "reweight" and live:
                e = live[int(rng.integers(len(live)))]
                rem.append(e)
                ins.append((e[0], e[1], self.w()))
            elif k == "flap" and live:  # deleted and inserted back in one epoch
                e = live[int(rng.integers(len(live)))]
                rem.append(e)
                ins.append(e)
            elif k == "dup":  # inserted twice in one batch
                e = (self.node(), self.node(), self.w())
                ins += [e, e]
        if ep % 5 == 4:  # every edge gone, then (next epoch) back
            rem = [e for e in self.present() for _ in range(self.E[e])]
            ins = []
        r = rng.random()
        live_s = [s for s, c in self.S.items() if c > 0]
        if r < 0.2:
            sins.append(self.node())
        elif r < 0.3:
            sins.append(self.n + 5)  # no node
        elif r < 0.4 and live_s:
            srem.append(live_s[int(rng.integers(len(live_s)))])
        elif r < 0.5 and live_s:
            sins.append(live_s[int(rng.integers(len(live_s)))])  # twice
        elif r < 0.6 and live_s:  # one removed, another added
            srem.append(live_s[0])
            sins.append(self.node())
        for e in ins:
            self.E[e] += 1
        for e in rem:
            self.E[e] -= 1
        for s in sins:
            self.S[s] += 1
        for s in srem:
            self.S[s] -= 1
        assert all(c >= 0 for c in self.E.values()) and all(c >= 0 for c in self.S.values())
        return ins, rem, sins, srem

    def sources(self):
        return sorted(s for s, c in self.S.items() if c > 0)

    def adj(self):
        """src -> {dst: smallest weight} over the present edges."""
        out = defaultdict(dict)
        for (a, b, w), c in self.E.items():
            if c > 0:
                out[a][b] = min(w, out[a].get(b, math.inf))
        return out


def sssp_ref(g):
    adj = g.adj()
    out = []
    for s in g.sources():
        dist = {s: 0.0 if g.float_w else 0}
        pq = [(dist[s], s)]
        while pq:
            d, v = heapq.heappop(pq)
            if d > dist[v]:
                continue
            for u, w in adj.get(v, {}).items():
                if d + w < dist.get(u, math.inf):
                    dist[u] = d + w
                    heapq.heappush(pq, (d + w, u))
        out += [(s, v, d, 1) for v, d in dist.items()]
    return sorted(out)


def khop_ref(k):
    def ref(g):
        adj = g.adj()
        out = []
        for s in g.sources():
            hops = {s: 0}
            frontier = [s]
            for h in range(1, k + 1):
                nxt = []
                for v in frontier:
                    for u in adj.get(v, {}):
                        if u not in hops:
                            hops[u] = h
                            nxt.append(u)
                frontier = nxt
            out += [(s, v, h, 1) for v, h in hops.items()]
        return sorted(out)
    return ref


def wcc_ref(g):
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for (a, b, _), c in g.E.items():
        if c > 0:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    comp = defaultdict(list)
    for v in list(parent):
        comp[find(v)].append(v)
    return sorted((v, min(vs), 1) for vs in comp.values() for v in vs)


def pagerank_ref(iterations, alpha=0.85):
    def ref(g):
        mult = Counter()
        for (a, b, _), c in g.E.items():
            if c > 0:
                mult[(a, b)] += c  # (pagerank selects src, dst: two weights of one pair are two edges)
        nodes = sorted({a for a, _ in mult} | {b for _, b in mult})
        outdeg = Counter()
        for (a, _), c in mult.items():
            outdeg[a] += c
        rank = {v: 1 - alpha for v in nodes}
        for _ in range(iterations):
            new = {v: 1 - alpha for v in nodes}
            for (a, b), c in mult.items():
                new[b] += c * alpha * rank[a] / outdeg[a]
            rank = new
        return sorted((v, r, 1) for v, r in rank.items())
    return ref


RPQ_TRANS = [(0, 1, 1), (1, 0, 1), (1, 2, 2), (2, 1, 3), (0, 0, 0)]
RPQ_ACCEPT = [1, 3]


def rpq_ref(g):
    """Labels w % 3; automaton RPQ_TRANS from state 0, accepting RPQ_ACCEPT."""
    by = defaultdict(set)
    for (a, b, w), c in g.E.items():
        if c > 0:
            by[a].add((int(w) % 3, b))
    out = set()
    for s in g.sources():
        seen = {(s, 0)}
        todo = [(s, 0)]
        while todo:
            v, q = todo.pop()
            for lab, u in by.get(v, ()):
                for q0, l2, q2 in RPQ_TRANS:
                    if q0 == q and l2 == lab and (u, q2) not in seen:
                        seen.add((u, q2))
                        todo.append((u, q2))
        out |= {(s, v, 1) for v, q in seen if q in RPQ_ACCEPT}
    return sorted(out)


def build_sssp(df, mem, drop):
    return graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop)


def build_khop(k):
    def b(df, mem, drop):
        return graphs.khop(df.input("edges").select("src", "dst"), df.input("sources"), k, memory=mem, drop=drop)
    return b


def build_wcc(df, mem, drop):
    return graphs.wcc(df.input("edges").select("src", "dst"), memory=mem, drop=drop)


def build_pagerank(it):
    def b(df, mem, drop):
        return graphs.pagerank(df.input("edges").select("src", "dst"), iterations=it, memory=mem, drop=drop)
    return b


def build_rpq(df, mem, drop):
    lab = df.input("edges").map(lambda src, dst, w: {"src": src, "label": (w % 3).astype(np.int64), "dst": dst})
    return graphs.rpq(lab, df.input("sources"), RPQ_TRANS, RPQ_ACCEPT, memory=mem, drop=drop)


def run_stream(workers, seed, build, cols, ref, modes, epochs=10, n=9, float_w=False, close=False,
               history=True):
    """One engine: full and every mode in ``modes`` over one random stream; returns eng.stats()['ife']."""
    rng = np.random.default_rng(seed)
    g = Graph(rng, n, float_w)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], dtypes=["int64", "int64", "float64" if float_w else "int64"])
        srcs = eng.input("sources", ["source"], dtypes=["int64"])
        init = [(g.node(), g.node(), g.w()) for _ in range(2 * n)]
        init += [init[0], (init[1][0], init[1][1], g.w())]
        g.E.update(init)
        g.S.update([0, 0, n + 1])
        edges.insert(init)
        srcs.insert([(0,), (0,), (n + 1,)])
        views = {}
        for label, (mem, drop) in {"full": ("full", None), **modes}.items():
            with eng.dataflow("m_" + label.replace("-", "_")) as df:
                views[label] = build(df, mem, drop).view("out", history=100)
        epoch = 1
        seen_epochs = []
        for ep in range(epochs):
            edges.advance_to(epoch)
            srcs.advance_to(epoch)
            for v in views.values():
                eng.wait(v, timeout=WAIT)
            got = {label: _frame(v, cols) for label, v in views.items()}
            want = ref(g)
            if close:
                full = got["full"]
                assert len(full) == len(want) and all(
                    a[:-2] == b[:-2] and a[-1] == b[-1] and math.isclose(a[-2], b[-2], rel_tol=1e-9, abs_tol=1e-12)
                    for a, b in zip(full, want)), f"seed {seed} epoch {epoch}: full differs from the reference"
            else:
                assert got["full"] == want, (f"seed {seed} epoch {epoch}: full differs from the reference: "
                                             f"missing {sorted(set(want) - set(got['full']))[:8]} "
                                             f"extra {sorted(set(got['full']) - set(want))[:8]}")
            for label, rows in got.items():  # bit for bit, as the README promises
                assert rows == got["full"], (f"seed {seed} epoch {epoch}: {label} differs from full: "
                                             f"missing {sorted(set(got['full']) - set(rows))[:8]} "
                                             f"extra {sorted(set(rows) - set(got['full']))[:8]}")
            seen_epochs.append((epoch - 1, got["full"]))
            ins, rem, sins, srem = g.events(ep)
            if rem:
                edges.remove(rem)
            if ins:
                edges.insert(ins)
            if srem:
                srcs.remove([(s,) for s in srem])
            if sins:
                srcs.insert([(s,) for s in sins])
            epoch += 1 if rng.random() < 0.7 else 3  # epochs that skip numbers
            if rng.random() < 0.15:  # an epoch with no change at all
                edges.advance_to(epoch)
                srcs.advance_to(epoch)
                epoch += 1
        if history:  # the views' history (kept for 100 epochs): each epoch read back as it was then
            for at, then in seen_epochs:
                if at < 1:
                    continue
                for label, v in views.items():
                    assert _frame(v, cols, at=at) == then, f"seed {seed}: {label} at={at} differs from full then"
        return eng.stats()["ife"]


SSSP_COLS = ["source", "node", "dist"]


@pytest.mark.parametrize("workers,seed", [(1, 1), (2, 2), (3, 3), (1, 4), (2, 5), (3, 6)])
def test_sssp_multigraph_streams_every_mode(workers, seed):
    stats = run_stream(workers, seed, build_sssp, SSSP_COLS, sssp_ref, DROPS, epochs=14, n=7 + 3 * seed)
    by = {r["dataflow"]: r for r in stats}
    # what the stats promise, exactly: p=0 drops nothing and keeps what jod keeps; p=1 (random) keeps nothing
    assert by["m_p0_deg_exact"]["dropped_total"] == 0 and by["m_p0_deg_exact"]["dropped"] == 0
    assert by["m_p1_rand_exact"]["state_differences"] == 0 and by["m_p1_rand_exact"]["dropped_total"] > 0
    assert by["m_jod"]["join_differences"] == 0 and by["m_jod"]["mode"] == "jod"
    assert by["m_p1_rand_bloom64"]["bytes"]["dropped_tracker"] == 8


@pytest.mark.parametrize("workers,seed", [(1, 21), (2, 22)])
def test_sssp_float_weights_every_mode(workers, seed):
    run_stream(workers, seed, build_sssp, SSSP_COLS, sssp_ref, DROPS, float_w=True)


@pytest.mark.parametrize("workers,seed,k", [(1, 31, 0), (2, 32, 1), (3, 33, 2), (1, 34, 3)])
def test_khop_streams_every_mode(workers, seed, k):
    run_stream(workers, seed, build_khop(k), ["source", "node", "hops"], khop_ref(k), DROPS)


@pytest.mark.parametrize("workers,seed", [(1, 41), (2, 42), (3, 43)])
def test_wcc_streams_every_mode(workers, seed):
    run_stream(workers, seed, build_wcc, ["node", "label"], wcc_ref, DROPS)


@pytest.mark.parametrize("workers,seed,it", [(1, 51, 1), (2, 52, 4), (3, 53, 7)])
def test_pagerank_streams_every_mode(workers, seed, it):
    run_stream(workers, seed, build_pagerank(it), ["node", "rank"], pagerank_ref(it), DROPS, close=True)


@pytest.mark.parametrize("workers,seed", [(1, 61), (2, 62), (3, 63)])
def test_rpq_streams_every_mode(workers, seed):
    run_stream(workers, seed, build_rpq, ["source", "node"], rpq_ref, DROPS)


# ======================================================================================================
# (b) Datalog over str, float and int columns, with goals
# ======================================================================================================

TYPED = {"e": (["a", "b"], ["str", "str"]), "w": (["a", "b", "c"], ["str", "str", "float64"]),
         "u": (["a"], ["str"]), "k": (["a", "b"], ["int64", "float64"]),
         "n": (["a", "b"], ["int64", "int64"]), "v": (["a"], ["int64"])}
STRS = ["a", "b", "c", "é", "Z", "", "a b"]
FLOATS = [0.0, 0.5, 1.0, 2.5, 0.1, 3.0]
SIGNED = [-1.5, 0.0, 2.25, 3.0, 0.1, -0.5]

DECLS = """
.decl e(a: str, b: str)
.decl w(a: str, b: str, c: float)
.decl u(a: str)
.decl k(a: int, b: float)
"""

TYPED_PROGRAMS = {
    # closure, repeated variables, string constants and comparisons, mutual recursion and negation
    "strings": DECLS + """
tc(x, y) :- e(x, y).
tc(x, y) :- tc(x, z), e(z, y).
loop(x) :- e(x, x).
selfreach(x) :- tc(x, x), !loop(x).
froma(y) :- e("a", y).
toempty(x) :- tc(x, "").
lt(x, y) :- e(x, y), x < y.
ge(x, y) :- tc(x, y), x >= y, x != "Z".
even(y) :- u(y).
even(y) :- odd(x), e(x, y).
odd(y) :- even(x), e(x, y).
unr(x) :- e(x, _), !even(x), not odd(x).
both(x) :- even(x), odd(x).
cnt(x, count<y>) :- tc(x, y).
dist(countd<y>) :- tc(_, y).
lab(x, max<l>) :- u(x), l = x.
lab(y, max<l>) :- lab(x, l), e(x, y).
low(x, min<l>) :- e(x, _), l = x.
low(y, min<l>) :- low(x, l), e(x, y).
first(min<x>, y) :- e(x, y).
""",
    # float weights: recursive min over sums, constants, arithmetic, float aggregates
    "floats": DECLS + """
sp(y, min<d>) :- u(y), d = 0.0.
sp(y, min<d>) :- sp(x, d1), w(x, y, c), d = d1 + c.
hops(y, min<h>) :- u(y), h = 0.
hops(y, min<h>) :- hops(x, h1), w(x, y, _), h = h1 + 1.
heavy(x, y) :- w(x, y, 2.5).
free(x, y) :- w(x, y, 0.0), x != y.
dbl(x, d) :- w(x, _, c), d = c * 2.0 + 1.0.
tot(x, sum<c>) :- w(x, _, c).
av(x, avg<c>) :- w(x, _, c).
top(x, max<c>) :- w(x, x, c).
near(x, y) :- sp(x, d1), sp(y, d2), d1 < d2, d2 - d1 <= 1.0.
cheap(y) :- sp(y, d), d < 1.0, !heavy(_, y).
wlt(x, c) :- w(x, _, c), c < 1, c > 0.
""",
    # int and float mixed: division, remainder, negative values
    "mixed": DECLS + """
m(a, s) :- k(a, b), s = a + b.
r(a, s) :- k(a, b), s = b % 2.0.
q(a, s) :- k(a, _), s = a / (0 - 3).
q2(a, s) :- k(a, _), s = a % (0 - 3).
q3(a, s) :- k(a, b), s = a * b - b / 2.0.
pos(a) :- k(a, b), b > 0, a >= 0 - 1.
pairs(a, c) :- k(a, b), k(c, b), a < c.
same(a) :- k(a, b), b = a.
sums(b, sum<a>) :- k(a, b).
cnts(b, count<a>, min<a>, max<a>) :- k(a, b).
""",
    # int graphs: mutual recursion through min, an aggregate before the group, three-column min
    "ints": """
ma(y, min<d>) :- v(y), d = 0.
ma(y, min<d>) :- mb(x, d1), n(x, y), d = d1 + 1.
mb(y, min<d>) :- ma(x, d1), n(x, y), d = d1 + 2.
sp(min<d>, y) :- v(y), d = 0.
sp(min<d>, y) :- sp(d1, x), n(x, y), d = d1 + 1.
g(x, y, min<d>) :- n(x, y), d = 1.
g(x, z, min<d>) :- g(x, y, d1), n(y, z), d = d1 + 1.
p(x, y) :- n(x, y), x = y.
p(x, y) :- n(x, x), n(x, y).
p(x, y) :- p(y, x).
q(x) :- p(x, x), !n(x, 3).
big(x, max<l>) :- n(x, _), l = x * 10.
big(y, max<l>) :- big(x, l), n(x, y).
""",
}


def _typed_value(rng, dtype, pred, col):
    if dtype == "str":
        return rng.choice(STRS)
    if dtype == "float64":
        return rng.choice(FLOATS if pred == "w" else SIGNED)
    return rng.randint(-4, 4) if pred == "k" else rng.randint(0, 6)


def _typed_row(rng, pred):
    cols, dts = TYPED[pred]
    return tuple(_typed_value(rng, d, pred, c) for c, d in zip(cols, dts))


def _pattern(rng, pred, arity, dtypes, ref_rows):
    """A random goal pattern: '?', '_' or a constant taken from a row (or a random value) per argument."""
    args = []
    for i in range(arity):
        r = rng.random()
        if r < 0.5:
            args.append("?")
        elif r < 0.75:
            args.append("_")
        else:
            pool = [row[i] for row in ref_rows] or [None]
            c = rng.choice(pool)
            if c is None:
                c = {"str": "a", "float64": 0.5}.get(dtypes[i], 1)
            args.append(c)
    if "?" not in args:
        args[rng.randrange(arity)] = "?"
    return args


def _lit(c):
    if isinstance(c, str) and c not in ("?", "_"):
        return '"' + c + '"'
    if isinstance(c, float):
        return repr(c)
    return str(c)


def _goal_want(full, args, asked):
    qs = [i for i, a in enumerate(args) if isinstance(a, str) and a == "?"]
    out = set()
    for r in full:
        if all((isinstance(a, str) and a in ("?", "_")) or r[i] == a for i, a in enumerate(args)) \
                and tuple(r[i] for i in qs) in asked:
            out.add(r)
    return out


def _typed_preds(text):
    from kpgnb.datalog.parser import parse
    prog = parse(text)
    used = set()
    for r in prog.rules:
        for lit in r.body:
            if hasattr(lit, "pred"):
                used.add(lit.pred)
    derived = {r.head.pred for r in prog.rules}
    return sorted(used - derived)


def run_typed(name, workers, seed, epochs=5, n_goals=5, materialize=True):
    text = TYPED_PROGRAMS[name]
    rng = random.Random(seed)
    preds = _typed_preds(text)
    state = {p: Counter() for p in preds}
    with kp.Engine(workers=workers) as eng:
        ses = {}
        for p in preds:
            cols, dts = TYPED[p]
            ses[p] = eng.input(p, cols, dtypes=dts)
            init = [_typed_row(rng, p) for _ in range(12 if len(cols) > 1 else 3)]
            ses[p].insert(init)
            state[p].update(init)
            ses[p].advance_to(1)
        prog = eng.datalog(text, name="typed", materialize=materialize)
        want = evaluate(text, state)
        goals = []
        for _ in range(n_goals):
            pred = rng.choice(sorted(want))
            arity = len(prog.columns(pred))
            dts = list(prog.analysis.dtypes[pred])
            args = _pattern(rng, pred, arity, dts, sorted(want[pred], key=repr))
            pat = f"{pred}({', '.join(_lit(a) for a in args)})"
            goals.append((prog.goal(pat), pred, args, set(), pat, dts))
        for ep in range(epochs + 1):
            if ep:
                for p in preds:
                    for _ in range(rng.randint(0, 5)):
                        present = [r for r, c in state[p].items() if c > 0]
                        x = rng.random()
                        if present and x < 0.45:
                            row = rng.choice(present)
                            ses[p].remove([row])
                            state[p][row] -= 1
                        elif present and x < 0.55:
                            row = rng.choice(present)
                            ses[p].insert([row, row])
                            state[p][row] += 2
                        else:
                            row = _typed_row(rng, p)
                            ses[p].insert([row])
                            state[p][row] += 1
                top = max(s.epoch for s in ses.values()) + 1
                for s in ses.values():
                    s.advance_to(top)
            want = evaluate(text, state)
            for g, pred, args, asked, pat, dts in goals:
                for _ in range(2):
                    qs = [i for i, a in enumerate(args) if isinstance(a, str) and a == "?"]
                    rows = sorted(want[pred], key=repr)
                    if rows and rng.random() < 0.7:
                        b = tuple(rng.choice(rows)[i] for i in qs)
                    else:
                        b = tuple(rng.choice(STRS) if dts[i] == "str" else rng.choice(FLOATS) if dts[i] == "float64"
                                  else rng.randint(-2, 7) for i in qs)
                    if b in asked and rng.random() < 0.5:
                        g.retract(*b)
                        asked.discard(b)
                    else:
                        g.ask(*b)
                        asked.add(b)
            if materialize:
                for pred, rows in want.items():
                    eng.wait(prog[pred], timeout=WAIT)
                    got = rows_of(prog[pred], prog.columns(pred))
                    assert same_rows(got, rows), f"{name} seed {seed} epoch {ep} {pred}: {diff_rows(got, rows)}"
            for g, pred, args, asked, pat, dts in goals:
                eng.wait(g.view, timeout=WAIT)
                got = rows_of(g.view, prog.columns(pred))
                w = _goal_want(want[pred], args, asked)
                assert same_rows(got, w), (f"{name} seed {seed} epoch {ep} goal {pat} asked {sorted(asked, key=repr)}: "
                                           f"{diff_rows(got, w)}")


@pytest.mark.parametrize("name", sorted(TYPED_PROGRAMS))
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_typed_programs_and_goals_match_the_reference(name, workers):
    for s in range(3):
        run_typed(name, workers, 100 * workers + s + 7 * len(name), epochs=6, n_goals=6, materialize=(s != 1))


# -- late installs, several IFEs in one dataflow, a dropped and reinstalled dataflow ---------------------

def _combo(df, mem, drop):
    """sssp, khop(2) and wcc over one edge input in one dataflow, concatenated into one collection."""
    e = df.input("edges")
    s = df.input("sources")
    a = graphs.sssp(e, s, memory=mem, drop=drop).map(
        lambda source, node, dist: {"q": np.zeros(len(node), np.int64), "a": source, "b": node, "c": dist})
    b = graphs.khop(e.select("src", "dst"), s, 2, memory=mem, drop=drop).map(
        lambda source, node, hops: {"q": np.ones(len(node), np.int64), "a": source, "b": node, "c": hops})
    c = graphs.wcc(e.select("src", "dst"), memory=mem, drop=drop).map(
        lambda node, label: {"q": np.full(len(node), 2, np.int64), "a": node, "b": label, "c": label})
    d = graphs.sssp(e, s, memory=mem, drop=drop).map(  # a second sssp: 'sssp#2'
        lambda source, node, dist: {"q": np.full(len(node), 3, np.int64), "a": source, "b": node, "c": dist})
    return a.concat(b).concat(c).concat(d)


def _combo_ref(g):
    out = [(0, s, v, d, 1) for s, v, d, _ in sssp_ref(g)]
    out += [(1, s, v, h, 1) for s, v, h, _ in khop_ref(2)(g)]
    out += [(2, v, lab, lab, 1) for v, lab, _ in wcc_ref(g)]
    out += [(3, s, v, d, 1) for s, v, d, _ in sssp_ref(g)]
    return sorted(out)


@pytest.mark.parametrize("workers,seed", [(1, 71), (2, 72), (3, 73)])
def test_late_installs_and_reinstalls_of_every_mode(workers, seed):
    """Each mode's dataflow is installed at its own epoch of a running stream (its first epoch reads the
    inputs' consolidated history), one of them is dropped and installed again later; every epoch each
    installed one equals the reference."""
    rng = np.random.default_rng(seed)
    g = Graph(rng, 8)
    cols = ["q", "a", "b", "c"]
    modes = {"full": ("full", None), **DROPS}
    install_at = {label: int(rng.integers(0, 6)) for label in modes}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], dtypes=["int64"] * 3)
        srcs = eng.input("sources", ["source"], dtypes=["int64"])
        init = [(g.node(), g.node(), g.w()) for _ in range(14)]
        g.E.update(init)
        g.S.update([0, 3])
        edges.insert(init)
        srcs.insert([(0,), (3,)])
        views = {}
        epoch = 1
        for ep in range(10):
            edges.advance_to(epoch)
            srcs.advance_to(epoch)
            for label, (mem, drop) in modes.items():
                if install_at[label] == ep or (label == "jod" and ep == 8):
                    if label in views:
                        eng.drop("c_" + label.replace("-", "_"))
                    with eng.dataflow("c_" + label.replace("-", "_")) as df:
                        views[label] = _combo(df, mem, drop).view("out_" + label.replace("-", "_"))
                if label == "jod" and ep == 6 and label in views:
                    eng.drop("c_jod")
                    del views[label]
            want = _combo_ref(g)
            for label, v in views.items():
                eng.wait(v, timeout=WAIT)
                got = _frame(v, cols)
                assert got == want, (f"seed {seed} epoch {epoch} {label}: missing {sorted(set(want) - set(got))[:6]} "
                                     f"extra {sorted(set(got) - set(want))[:6]}")
            ins, rem, sins, srem = g.events(ep)
            if rem:
                edges.remove(rem)
            if ins:
                edges.insert(ins)
            if srem:
                srcs.remove([(s,) for s in srem])
            if sins:
                srcs.insert([(s,) for s in sins])
            epoch += 1
        names = sorted(r["operator"] for r in eng.stats()["ife"] if r["dataflow"] == "c_jod")
        assert any("'sssp#2'" in n for n in names) and len(names) == 4, names


# -- DatalogError positions --------------------------------------------------------------------------

def _where(text, needle, nth=1):
    """(line, column), 1-based in code points, of the nth occurrence of ``needle``."""
    i = -1
    for _ in range(nth):
        i = text.index(needle, i + 1)
    line = text.count("\n", 0, i) + 1
    return line, i - (text.rfind("\n", 0, i) + 1) + 1


LOCATED = [
    # (program, needle that the error must point at, nth occurrence, word in the message)
    ("p(x) :- e(x, _).\nq(x) :-\te(x, _),\tnosuch(x).\n", "nosuch", 1, "nosuch"),
    ('p(x) :- e("é€", x), nosuch(x).\n', "nosuch", 1, "nosuch"),
    ('p(x) :- e("é€𝄞", x), x < z.\n', "z.", 1, "z"),
    ("// c\n# c\n.decl e(a: str, b: str)\n\np(x, w) :- e(x, y).\n", "w)", 1, "'w'"),
    ("p(x, w) <- e(x, y).\n", "w)", 1, "'w'"),
    ("p(x) :- e(x, _).\r\nq(x, w) :- e(x, _).\r\n", "w)", 1, "'w'"),
    (".decl e(a: str, b: str)\np(x) :- e(x, 3).\n", "3)", 1, "int"),
    ("p(x) :- e(x, y), y > 3.\n", "y > 3", 1, "str"),
    ("p(x, z) :- e(x, y), z = y + 1.\n", "y + 1", 1, "strings"),
    ("p(x) :- e(x, y), f(y, _).\n", "y, _", 1, "'y'"),
    ("p(x) :- e(x, _), !f(x, _).\n", "x, _).", 1, "'x'"),
    ("p(x) :- e(x, _).\np(y) :- f(y, _).\n", "y)", 1, "p"),
    ("s(x, sum<y>) :- e(x, y).\n", "sum<y>", 1, "sum"),
    ("p(x) :- e(x, _), not e(y, x).\n", "y, x", 1, "y"),
    ("s(x, sum<y>) :- f(x, y).\ns(x, sum<y>) :- s(x, z), f(z, y).\n", "sum<y>", 2, "sum"),
    ("p(x) :- f(x, _).\n\n\nq(x) :- p(x, _).\n", "p(x, _)", 1, "p"),
    ("p(x) :- f(x, _), x = = 1.\n", "= 1", 1, ""),
    ("p(x) :- f(x, _) q(x).\n", "q(x)", 1, ""),
]


@pytest.mark.parametrize("case", range(len(LOCATED)))
def test_datalog_errors_point_at_the_offending_text(case):
    text, needle, nth, word = LOCATED[case]
    line, column = _where(text, needle, nth)
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], dtypes=["str", "str"], rows=[("a", "b")])
        eng.input("f", ["a", "b"], rows=[(1, 2)])
        with pytest.raises(kp.DatalogError) as info:
            eng.datalog(text, name="bad")
        err = info.value
        assert isinstance(err, kp.KpgnbError)
        assert (err.line, err.column) == (line, column), (err.line, err.column, str(err))
        msg = str(err)
        assert word in msg
        src = text.split("\n")[line - 1].rstrip("\r")
        lines = msg.split("\n")
        at = next(i for i, m in enumerate(lines) if m.endswith(src))
        assert lines[at + 1].index("^") == len(lines[at]) - len(src) + column - 1, msg
        assert eng.snapshot().dataflows.get("bad") is None


@pytest.mark.parametrize("pattern", ["tc(?, _, _)", "nosuch(?)"])
def test_goal_arity_and_unknown_predicate_errors_locate(pattern):
    """These two goal errors had no line, column or caret (every other goal error has them)."""
    with kp.Engine(workers=1) as eng:
        eng.input("f", ["a", "b"], rows=[(1, 2)])
        prog = eng.datalog("tc(x, y) :- f(x, y).\n", name="ok")
        with pytest.raises(kp.DatalogError) as info:
            prog.goal(pattern)
        assert (info.value.line, info.value.column) == (1, 1), str(info.value)


def test_caret_under_a_line_with_tabs_keeps_the_tabs():
    """The caret line padded a tab with one space, so the caret sat left of the text as displayed."""
    text = "p(x) :- f(x, _).\nq(x) :-\tf(x, _),\tnosuch(x).\n"
    with kp.Engine(workers=1) as eng:
        eng.input("f", ["a", "b"], rows=[(1, 2)])
        with pytest.raises(kp.DatalogError) as info:
            eng.datalog(text, name="bad")
    lines = str(info.value).split("\n")
    src = text.split("\n")[1]
    at = next(i for i, m in enumerate(lines) if m.endswith(src))
    shown_src = lines[at].expandtabs(8)
    shown_caret = lines[at + 1].expandtabs(8)
    assert shown_caret.index("^") == shown_src.index("nosuch"), str(info.value)
