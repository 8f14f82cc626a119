"""Session 28 lazy-rounds attack: graph loops (plain, nested, enter_at-delayed) under random edge churn,
checked at every epoch (latest, ``at=`` history and ``follow()``) against from-scratch references, with a
thread reading ``eng.stats()`` / ``eng.arrangements()`` all along (uppers must never move backwards)."""
from __future__ import annotations

import threading
import time
from collections import Counter, deque

import numpy as np

import kpgnb as kp
from kpgnb import graphs


# -- references ---------------------------------------------------------------------------------------

def ref_bfs(edges, roots):
    adj = {}
    for s, d in edges:
        adj.setdefault(s, set()).add(d)
    dist = {r: 0 for r in roots}
    q = deque(roots)
    while q:
        u = q.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    return Counter({(n, d): 1 for n, d in dist.items()})


def _reach_sets(edges):
    adj = {}
    nodes = set()
    for s, d in edges:
        adj.setdefault(s, set()).add(d)
        nodes |= {s, d}
    out = {}
    for n in nodes:
        seen = {n}
        st = [n]
        while st:
            u = st.pop()
            for v in adj.get(u, ()):
                if v not in seen:
                    seen.add(v)
                    st.append(v)
        out[n] = seen
    return out


def ref_scc_edges(edges):
    r = _reach_sets(edges)
    return Counter({(s, d): 1 for s, d in edges if s in r.get(d, ()) and d in r.get(s, ())})


def ref_min_label(edges, labels):
    """labels {node: label}: each node's min label over the labelled nodes reaching it (itself included)."""
    r = _reach_sets(edges)
    out = {}
    for n, lab in labels.items():
        for m in r.get(n, {n}):
            if m not in out or lab < out[m]:
                out[m] = lab
    return Counter({(n, lab): 1 for n, lab in out.items()})


def ref_khop(edges, roots, k):
    adj = {}
    for s, d in edges:
        adj.setdefault(s, set()).add(d)
    front = set(roots)
    seen = set(roots)
    for _ in range(k):
        front = {v for u in front for v in adj.get(u, ())} - seen
        seen |= front
    return seen


# -- the programs ---------------------------------------------------------------------------------------

PROGRAMS = ["bfs", "reach", "scc", "minlabel_at", "reach_max", "twoloops"]


def _rounds3(label):
    return np.asarray(label) % 3 * 2   # labels enter at rounds 0, 2, 4: arrangements fed every other round


def build(df, which):
    e = df.input("edges")
    roots = df.input("roots")
    if which == "bfs":
        return graphs.bfs(e, roots.rename(r="node")).view("out", history=100)
    if which == "reach":
        return graphs.reachable(e, roots.rename(r="node")).view("out", history=100)
    if which == "scc":
        return graphs.scc(e).view("out", history=100)
    if which == "minlabel_at":
        nodes = e.map(lambda src: {"node": src, "label": (src * 7) % 11}).distinct()
        return graphs.propagate_min_label(e, nodes, label_rounds=_rounds3).view("out", history=100)
    if which == "reach_max":  # a loop cut by max_rounds: nodes within 3 hops
        start = roots.rename(r="node")
        return start.iterate(lambda x: x.join(e.enter(x.scope), left_on="node", right_on="src")
                             .map(lambda dst: {"node": dst}).concat(x).distinct(), max_rounds=3).view(
            "out", history=100)
    if which == "twoloops":  # reach, then a second loop over its result (the reached subgraph's bfs)
        r = graphs.reachable(e, roots.rename(r="node"))
        sub = e.semijoin(r.rename(node="src"), on="src")
        return graphs.bfs(sub, roots.rename(r="node")).view("out", history=100)
    raise ValueError(which)


def expected(which, edges, roots):
    es = [k for k, m in edges.items() if m > 0]
    rs = [k[0] for k, m in roots.items() if m > 0]
    if which in ("bfs", "twoloops"):
        return ref_bfs(es, rs)
    if which == "reach":
        return Counter({(n,): 1 for n in ref_khop(es, rs, 10 ** 6)})
    if which == "reach_max":
        return Counter({(n,): 1 for n in ref_khop(es, rs, 3)})
    if which == "scc":
        return ref_scc_edges(es)
    if which == "minlabel_at":
        labels = {s: (s * 7) % 11 for s, _ in es}
        return ref_min_label(es, labels)
    raise ValueError(which)


def contents(view, at=None) -> Counter:
    df = view.to_pandas(at=at)
    return Counter(tuple(int(x) for x in row) for row in df.values.tolist())


class Watcher:
    """Reads stats and arrangements from another thread until stopped; records errors and uppers that
    move backwards."""

    def __init__(self, eng):
        self.eng = eng
        self.errors = []
        self.stop = threading.Event()
        self.last = {}
        self.reads = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                self.eng.stats()
                for a in self.eng.arrangements():
                    key = (a["dataflow"], a["name"])
                    up = a["upper"]
                    prev = self.last.get(key)
                    if prev is not None and up is not None and not prev.less_equal(up):
                        self.errors.append(("upper went back", key, prev, up))
                    self.last[key] = up
                self.reads += 1
            except kp.EngineError:
                return
            except Exception as e:  # noqa: BLE001
                self.errors.append(repr(e))
            time.sleep(0.002)

    def close(self):
        self.stop.set()
        self.t.join(5)


def run_case(which, seed, workers, epochs=8, n=14, watch=True, close_roots_at=None):
    rng = np.random.default_rng(seed)
    fails = []
    edges = Counter()
    roots = Counter({(0,): 1})
    for _ in range(int(n * 1.5)):
        edges[(int(rng.integers(n)), int(rng.integers(n)))] += 0
    for _ in range(n + 4):
        edges[(int(rng.integers(n)), int(rng.integers(n)))] = 1
    edges = Counter({k: 1 for k, m in edges.items() if m})
    with kp.Engine(workers=workers) as eng:
        w = Watcher(eng) if watch else None
        ei = eng.input("edges", ["src", "dst"], rows=list(edges))
        ri = eng.input("roots", ["r"], rows=list(roots))
        t = int(rng.integers(1, 3))
        ei.advance_to(t)
        ri.advance_to(t)
        with eng.dataflow("p") as df:
            view = build(df, which)
        follower = view.follow(timeout=1)
        start = t - 1
        hist = {e: expected(which, edges, roots) for e in range(t)}
        roots_closed = False
        for step in range(epochs):
            ups, dns = [], []
            for _ in range(int(rng.integers(1, 5))):
                if edges and rng.random() < 0.5:
                    k = list(edges)[int(rng.integers(len(edges)))]
                    del edges[k]
                    dns.append(k)
                else:
                    k = (int(rng.integers(n)), int(rng.integers(n)))
                    if k not in edges:
                        edges[k] = 1
                        ups.append(k)
            if ups or dns:
                ei.update(ups + dns, [1] * len(ups) + [-1] * len(dns))
            if not roots_closed and rng.random() < 0.3:
                r = int(rng.integers(n))
                if (r,) in roots:
                    if len(roots) > 1:
                        del roots[(r,)]
                        ri.remove([(r,)])
                else:
                    roots[(r,)] = 1
                    ri.insert([(r,)])
            gap = int(rng.integers(1, 4))
            for e in range(t, t + gap):
                hist[e] = expected(which, edges, roots)
            t += gap
            ei.advance_to(t)
            if close_roots_at is not None and step == close_roots_at:
                ri.close()
                roots_closed = True
            elif not roots_closed:
                ri.advance_to(t)
            if rng.random() < 0.6:
                if roots_closed:
                    eng.wait(view, timeout=120)
                else:
                    eng.wait(view, timeout=120)
                got = contents(view)
                if got != hist[t - 1]:
                    fails.append(("latest", step, t - 1, sorted(got - hist[t - 1]), sorted(hist[t - 1] - got)))
        eng.wait(view, timeout=120)
        for e in range(max(start, t - 100), t):
            try:
                got = contents(view, at=e)
            except kp.CompactedError:
                continue
            if got != hist[e]:
                fails.append(("at", e, sorted(got - hist[e]), sorted(hist[e] - got)))
        frames = []
        while follower.epoch is not None and follower.epoch < t:
            try:
                frames.append(next(follower))
            except (TimeoutError, StopIteration):
                break
        follower.close()
        if frames:
            import pandas as pd
            fd = pd.concat(frames, ignore_index=True)
            cols = [c for c in fd.columns if c not in (follower.time_col, follower.diff_col)]
            for e in range(start, t):
                sub = fd[fd[follower.time_col] <= e]
                c = Counter()
                for row, d in zip(sub[cols].values.tolist(), sub[follower.diff_col].tolist()):
                    c[tuple(int(x) for x in row)] += int(d)
                c = Counter({k: m for k, m in c.items() if m})
                if c != hist[e]:
                    fails.append(("follow", e, sorted(c - hist[e]), sorted(hist[e] - c)))
                    break
        if w is not None:
            w.close()
            fails += [("watch", x) for x in w.errors[:3]]
    return fails


# -- the s26 generator's programs, forced to loop ----------------------------------------------------------

def loop_prog(rng, depth):
    """A random s26 program with an iterate at the top: nested (an inner fixed point per outer round), cut
    by max_rounds (with or without enter_at-delayed inputs, which feed arrangements only every few rounds),
    or a monotone fixed point."""
    import attack_s26_gen as G
    sub = lambda d, l: G.random_program(rng, d, l, top=False)  # noqa: E731
    init = sub(depth - 1, 0)
    kind = rng.integers(4)
    if kind == 0:
        ib = sub(depth - 1, 2)
        if ("var", 0) not in G.leaves_of(ib):
            ib = ("concat", ("var", 0), ib)
        inner = ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0), G.monotone(ib))), None)
        body = ("distinct", ("concat", ("var", 0), G.monotone(("concat", ("var", 0), inner))))
        return ("iterate", init, body, None)
    body = sub(depth - 1, 1)
    if ("var", 0) not in G.leaves_of(body):
        body = ("concat", ("var", 0), body)
    if kind == 1:
        body = G.undelay(body)
        return ("iterate", init, ("distinct", body) if rng.random() < 0.5 else body, int(rng.integers(1, 8)))
    if kind == 2:
        return ("iterate", init, body, int(rng.integers(3, 12)))
    return ("iterate", init, ("distinct", ("concat", ("var", 0), G.monotone(body))), None)


# -- late installs over random histories -------------------------------------------------------------------

def late_case(seed, workers, effort, lag, how):
    """An input gets random inserts and removes over some epochs (another dataflow reading it, and lagging,
    from a random epoch on when ``lag``); then a dataflow installed late reads it through ``how``. Returns
    (what its view holds, the input's contents, rows its map saw that are not in the contents)."""
    rng = np.random.default_rng(seed)
    seen = []

    def check(v):
        seen.extend(v.tolist())
        return {"v": v}
    with kp.Engine(workers=workers, effort=effort) as eng:
        a = eng.input("a", ["v"])
        state = Counter()
        E = int(rng.integers(2, 9))
        lag_at = int(rng.integers(0, E))
        for e in range(E):
            if lag and e == lag_at:
                with eng.dataflow("other") as df:
                    df.input("a").map(lambda v: (time.sleep(0.1), {"v": v})[1]).count(by=[]).view("o")
                    df.input("a").distinct().view("od")
            rows, diffs = [], []
            for _ in range(int(rng.integers(0, 5))):
                if state and rng.random() < 0.5:
                    r = list(state)[int(rng.integers(len(state)))]
                    rows.append((r,))
                    diffs.append(-1)
                    state[r] -= 1
                    if state[r] == 0:
                        del state[r]
                else:
                    r = int(rng.integers(0, 12))
                    rows.append((r,))
                    diffs.append(1)
                    state[r] += 1
            if rows:
                a.update(rows, diffs)
            a.advance_to(e + 1)
            if rng.random() < 0.3:
                time.sleep(0.05)
        with eng.dataflow("late") as df:
            x = df.input("a")
            if how == "map":
                out = x.map(check)
            elif how == "join":
                out = x.join(x.map(lambda v: {"v": v}), on="v").map(check)
            elif how == "joinarr":
                out = x.arrange_by("v").join(x.arrange_by("v"), on="v").map(check)
            else:  # into a loop
                out = x.iterate(lambda y: y.join(x.enter(y.scope), on="v").map(check).distinct())
            out = out.view("x")
        eng.wait(out, timeout=60)
        got = Counter(int(r[0]) for r in out.to_pandas().values.tolist())
        return got, state, set(seen) - set(state)
