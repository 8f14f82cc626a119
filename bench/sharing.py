"""Shared arrangements under interactive graph queries (K-Pg section 6.2, "interactive graph queries", Fig. 5).

    python -m bench.sharing [--nodes 1000000] [--edges 10000000] [--rate 1000] [--duration 60] [--quick]

A random directed graph (no self-loops, no duplicate edges) is loaded into an engine input ``edges``. Four
query classes take their arguments from input collections of their own; a query arrives by inserting its
argument row, is answered when its view is final for that epoch, and is retired later by removing the row
(each class keeps its ``--live`` most recent queries; the arrival of the next one retires the oldest):

- ``lookup`` (``q_lookup(x)``): the out-edges of x, rows (x, dst);
- ``hop1`` (``q_hop1(x)``): the nodes one step from x along an edge either way (out- and in-neighbours), (x, n);
- ``hop2`` (``q_hop2(x)``): the nodes at the end of a two-step directed path from x, (x, z);
- ``path`` (``q_path(x, y)``): the length of a shortest directed path from x to y of at most 4 steps,
  (x, y, d): walks of up to two steps forward from x and up to two steps backward from y (with their
  lengths), joined on the middle node, the least total length per (x, y).

The input is keyed by src (``eng.input(..., key="src")``), so its own arrangement is the edges by src.
Shared: the query dataflows read that arrangement (``df.input``) and the edges by dst, which one dataflow
arranges and exports (``df.use()``). Unshared: each query dataflow arranges its own copies from the
input's rows (lookup 1, hop1 2, hop2 1, path 2: six arrangements of the edges against one; the input's own
arrangement exists in both).

Workload, open loop as in the paper: events are scheduled at ``--rate`` per second whatever the answers
do, ``--graph-share`` (half) of them single-edge changes (an insert of a new edge or a removal of an
existing one, alternately) and the rest query arrivals (spread evenly over the four classes, each
retiring its class's oldest live query). As in K-Pg's worker loop, events due while the engine computes
accumulate: once the last epoch is final in every view (``--inflight`` epochs may be outstanding), the
driver issues everything due as one epoch (insert/remove + advance_to on the five inputs). A query's
latency runs from its *scheduled* arrival, so queueing behind a slow epoch counts, to the first engine
snapshot published after its view became final for the query's epoch (what ``eng.wait(view)`` observes;
polling the view's own frontier instead would see an answer a few ms sooner, before the scheduler's pass
over the other dataflows ends). The first ``--warmup`` seconds are left out of the statistics. Before the
stream, a closed loop (one query at a time on the static graph: insert, advance, wait) gives each class's
single-query latency, K-Pg's Table 10 measure.

Memory: each mode runs in a subprocess of its own, which first runs the whole program at a tiny size so
that every kernel is loaded; baseline = RSS then (process, kernels, empty engine), before any data. Peak
RSS = VmHWM of the process; RSS "live" = RSS at the end after glibc's ``malloc_trim`` (what the process
holds, not the free heap the allocator keeps); RSS and the merges in progress sampled each second; trace
bytes = ``eng.stats()["arrangements"]`` summed. Answers: every live query at the end of the
stream and ``--checks`` snapshots during it (read at an epoch with ``view.columns(at=)``) are compared with
a NumPy/pandas reference computed on the graph as of that epoch; a mode whose answers differ is reported as
"wrong answer", never as a number.

Peer: kuzu (embedded graph database), in a subprocess with ``--peer-timeout``: the same graph (COPY FROM
pandas frames into a node table and a rel table), the same four queries in parameterized Cypher on the
static graph, one at a time (closed loop, results fetched), answers checked against the same reference;
its load time, peak RSS and database size.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import parse_args, peak_rss_bytes, percentile, table, write_result

QUICK = {"nodes": 10_000, "edges": 100_000, "rate": 400.0, "duration": 6.0, "warmup": 1.0, "live": 20,
         "closed_queries": 20, "kuzu_queries": 40, "checks": 2}

CLASSES = ("lookup", "hop1", "hop2", "path")
INPUTS = {"lookup": ("q_lookup", ["x"]), "hop1": ("q_hop1", ["x"]), "hop2": ("q_hop2", ["x"]),
          "path": ("q_path", ["x", "y"])}
COLUMNS = {"lookup": ["x", "dst"], "hop1": ["x", "n"], "hop2": ["x", "z"], "path": ["x", "y", "d"]}
CYPHER = {
    "lookup": "MATCH (a:N)-[:E]->(b:N) WHERE a.id = $x RETURN b.id",
    "hop1": "MATCH (a:N)-[:E]-(b:N) WHERE a.id = $x RETURN DISTINCT b.id",
    "hop2": "MATCH (a:N)-[:E]->(:N)-[:E]->(c:N) WHERE a.id = $x RETURN DISTINCT c.id",
    "path": "MATCH (a:N)-[e:E* SHORTEST 1..4]->(b:N) WHERE a.id = $x AND b.id = $y RETURN length(e)",
}
# event kinds in the stream
EDGE_INS, EDGE_DEL = 0, 1  # query arrivals of class c are 2 + c


# -- data ---------------------------------------------------------------------------------------------
def make_graph(nodes: int, edges: int, seed: int = 0):
    """``edges`` distinct directed edges without self-loops over ``nodes`` nodes, sorted by (src, dst)."""
    rng = np.random.default_rng(seed)
    if edges > nodes * (nodes - 1) // 2:
        raise ValueError("too many edges for that many nodes")
    packed = np.zeros(0, np.int64)
    while len(packed) < edges:
        m = int((edges - len(packed)) * 1.05) + 16
        s, d = rng.integers(0, nodes, m), rng.integers(0, nodes, m)
        keep = s != d
        packed = _sorted_unique(np.concatenate([packed, s[keep] * nodes + d[keep]]))
    if len(packed) > edges:
        packed = np.sort(rng.choice(packed, edges, replace=False))
    return packed // nodes, packed % nodes


def _sorted_unique(x):
    """np.unique by sorting: NumPy 2.4's np.unique (hash-based) takes 30 s on 10.5M distinct int64 here,
    a sort and a comparison 1.2 s."""
    x = np.sort(x)
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


def make_stream(cfg: dict, src, dst) -> dict:
    """The open-loop schedule: event times (s), kinds, arguments (edge src/dst or query x/y) and, for a
    query arrival, the index of the arrival it retires (-1: none). Deterministic for a given cfg."""
    nodes, rate, duration, live = cfg["nodes"], cfg["rate"], cfg["duration"], cfg["live"]
    rng = np.random.default_rng(cfg["seed"] + 1)
    n = int(rate * duration)
    t = np.arange(n) / rate
    is_graph = np.zeros(n, bool)
    is_graph[rng.choice(n, int(n * cfg.get("graph_share", 0.5)), replace=False)] = True
    kind = np.empty(n, np.int64)
    g = np.flatnonzero(is_graph)
    kind[g] = np.where(np.arange(len(g)) % 2 == 0, EDGE_INS, EDGE_DEL)
    q = np.flatnonzero(~is_graph)
    kind[q] = 2 + np.arange(len(q)) % 4
    a, b = np.zeros(n, np.int64), np.zeros(n, np.int64)
    # removals: distinct existing edges; inserts: distinct new edges (never removed again)
    dels = np.flatnonzero(kind == EDGE_DEL)
    pick = rng.choice(len(src), len(dels), replace=False)
    a[dels], b[dels] = src[pick], dst[pick]
    ins = np.flatnonzero(kind == EDGE_INS)
    base = src * nodes + dst
    new = np.zeros(0, np.int64)
    while len(new) < len(ins):
        m = 2 * (len(ins) - len(new)) + 16
        s, d = rng.integers(0, nodes, m), rng.integers(0, nodes, m)
        p = (s * nodes + d)[s != d]
        p = p[~_isin_sorted(p, base)]
        _, first = np.unique(np.concatenate([new, p]), return_index=True)
        new = np.concatenate([new, p])[np.sort(first)]
    new = new[:len(ins)]
    a[ins], b[ins] = new // nodes, new % nodes
    # query arguments: x uniform; for path, y at the end of a random walk of 2-4 steps from x (so that most
    # answers exist), or uniform when the walk dies out
    indptr = np.searchsorted(src, np.arange(nodes + 1))
    for c in range(4):
        idx = np.flatnonzero(kind == 2 + c)
        x = rng.integers(0, nodes, len(idx))
        a[idx] = x
        if CLASSES[c] == "path":
            y = x.copy()
            for step in range(4):
                deg = indptr[y + 1] - indptr[y]
                go = (deg > 0) & ((step < 2) | (rng.random(len(y)) < 0.5))
                off = (rng.random(len(y)) * np.maximum(deg, 1)).astype(np.int64)
                y = np.where(go, dst[np.minimum(indptr[y] + off, len(dst) - 1)], y)
            bad = y == x
            y[bad] = (x[bad] + 1 + rng.integers(0, nodes - 1, bad.sum())) % nodes
            b[idx] = y
    retire = np.full(n, -1, np.int64)
    for c in range(4):
        idx = np.flatnonzero(kind == 2 + c)
        if len(idx) > live:
            retire[idx[live:]] = idx[:-live]
    return {"t": t, "kind": kind, "a": a, "b": b, "retire": retire}


def _isin_sorted(values, sorted_arr):
    if not len(sorted_arr):
        return np.zeros(len(values), bool)
    pos = np.minimum(np.searchsorted(sorted_arr, values), len(sorted_arr) - 1)
    return sorted_arr[pos] == values


# -- reference ------------------------------------------------------------------------------------------
class Graph:
    """The graph as of some epoch: the base edges (CSR both ways) minus removed plus inserted edges."""

    def __init__(self, nodes, src, dst, ins=None, dels=None):
        self.nodes = nodes
        self.out_ptr = np.searchsorted(src, np.arange(nodes + 1))
        self.out_nbr = dst
        order = np.lexsort((src, dst))
        self.in_ptr = np.searchsorted(dst[order], np.arange(nodes + 1))
        self.in_nbr = src[order]
        self._changes(ins, dels)

    def _changes(self, ins, dels):
        e = np.zeros(0, np.int64)
        ins = (e, e) if ins is None else ins
        dels = (e, e) if dels is None else dels
        self.dels = np.sort(dels[0] * self.nodes + dels[1])
        o = np.argsort(ins[0], kind="stable")
        self.ins_out = (ins[0][o], ins[1][o])
        o = np.argsort(ins[1], kind="stable")
        self.ins_in = (ins[1][o], ins[0][o])

    def at(self, ins, dels) -> "Graph":
        """The same base graph with other inserted / removed edges (the base arrays are shared)."""
        g = object.__new__(Graph)
        g.nodes, g.out_ptr, g.out_nbr, g.in_ptr, g.in_nbr = \
            self.nodes, self.out_ptr, self.out_nbr, self.in_ptr, self.in_nbr
        g._changes(ins, dels)
        return g

    @staticmethod
    def _gather(ptr, nbr, extra, q):
        """(owner index into q, neighbour) for every neighbour of every q[i] in CSR (ptr, nbr) + extra."""
        starts, lens = ptr[q], ptr[q + 1] - ptr[q]
        owner = np.repeat(np.arange(len(q)), lens)
        pos = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(starts, lens)
        nb = nbr[pos]
        ek, ev = extra
        if len(ek) and len(q):
            lo, hi = np.searchsorted(ek, q, "left"), np.searchsorted(ek, q, "right")
            elen = hi - lo
            eo = np.repeat(np.arange(len(q)), elen)
            ep = np.arange(elen.sum()) - np.repeat(np.cumsum(elen) - elen, elen) + np.repeat(lo, elen)
            owner, nb = np.concatenate([owner, eo]), np.concatenate([nb, ev[ep]])
        return owner, nb

    def out(self, q):
        owner, nb = self._gather(self.out_ptr, self.out_nbr, self.ins_out, q)
        keep = ~_isin_sorted(q[owner] * self.nodes + nb, self.dels)
        return owner[keep], nb[keep]

    def into(self, q):
        owner, nb = self._gather(self.in_ptr, self.in_nbr, self.ins_in, q)
        keep = ~_isin_sorted(nb * self.nodes + q[owner], self.dels)
        return owner[keep], nb[keep]


def _rows(*cols):
    return np.stack([np.asarray(c, np.int64) for c in cols], axis=1) if cols else np.zeros((0, 0), np.int64)


def _unique_rows(r):
    return np.unique(r, axis=0) if len(r) else r


def reference(g: Graph, cls: str, args: np.ndarray) -> np.ndarray:
    """The expected rows (sorted) of class ``cls`` for the live query rows ``args`` (n x 1, or n x 2 for
    path; repeated rows are repeated queries)."""
    if cls == "lookup":
        x = args[:, 0]
        o, nb = g.out(x)
        return _sort_rows(_rows(x[o], nb), 2)
    if cls == "hop1":
        x = np.unique(args[:, 0])
        o1, n1 = g.out(x)
        o2, n2 = g.into(x)
        return _unique_rows(_rows(np.concatenate([x[o1], x[o2]]), np.concatenate([n1, n2])))
    if cls == "hop2":
        x = np.unique(args[:, 0])
        o1, m = g.out(x)
        o2, z = g.out(m)
        return _unique_rows(_rows(x[o1][o2], z))
    if cls == "path":
        import pandas as pd
        q = _unique_rows(args[:, :2])
        if not len(q):
            return np.zeros((0, 3), np.int64)
        qi = np.arange(len(q))

        def levels(step, start):
            frames = [pd.DataFrame({"q": qi, "m": start, "d": 0})]
            o1, m1 = step(start)
            frames.append(pd.DataFrame({"q": qi[o1], "m": m1, "d": 1}))
            o2, m2 = step(m1)
            frames.append(pd.DataFrame({"q": qi[o1][o2], "m": m2, "d": 2}))
            return pd.concat(frames).groupby(["q", "m"], as_index=False)["d"].min()
        f, b = levels(g.out, q[:, 0]), levels(g.into, q[:, 1])
        j = f.merge(b, on=["q", "m"])
        if not len(j):
            return np.zeros((0, 3), np.int64)
        j["d"] = j["d_x"] + j["d_y"]
        best = j.groupby("q")["d"].min()
        qq = best.index.to_numpy()
        return _sort_rows(_rows(q[qq, 0], q[qq, 1], best.to_numpy()), 3)
    raise ValueError(cls)


def _sort_rows(r, k):
    if not len(r):
        return np.zeros((0, k), np.int64)
    return r[np.lexsort(r.T[::-1])]


def compare(expected: np.ndarray, actual: np.ndarray) -> dict:
    """Whether two row multisets are equal; with a few differing rows when they are not."""
    k = expected.shape[1] if expected.ndim == 2 and expected.size else (actual.shape[1] if actual.size else 0)
    e = _sort_rows(np.asarray(expected, np.int64).reshape(-1, k) if k else expected, k)
    a = _sort_rows(np.asarray(actual, np.int64).reshape(-1, k) if k else actual, k)
    ok = e.shape == a.shape and bool((e == a).all())
    out = {"ok": ok, "expected_rows": int(len(e)), "actual_rows": int(len(a))}
    if not ok:
        es = {tuple(r) for r in e.tolist()}
        as_ = {tuple(r) for r in a.tolist()}
        out["missing"] = sorted(es - as_)[:5]
        out["extra"] = sorted(as_ - es)[:5]
    return out


def graph_at(base: Graph, stream, ev_epoch, epoch) -> Graph:
    """The graph after every event issued at an epoch <= ``epoch``."""
    done = (ev_epoch >= 0) & (ev_epoch <= epoch)
    k, a, b = stream["kind"], stream["a"], stream["b"]
    ins, dels = done & (k == EDGE_INS), done & (k == EDGE_DEL)
    return base.at((a[ins], b[ins]), (a[dels], b[dels]))


def live_args(stream, ev_epoch, epoch, c: int) -> np.ndarray:
    """The argument rows of class ``c``'s live queries as of ``epoch``."""
    done = (ev_epoch >= 0) & (ev_epoch <= epoch)
    arrived = done & (stream["kind"] == 2 + c)
    retired = stream["retire"][done & (stream["kind"] == 2 + c) & (stream["retire"] >= 0)]
    live = arrived.copy()
    live[retired] = False
    idx = np.flatnonzero(live)
    return _rows(stream["a"][idx], stream["b"][idx])[:, :len(INPUTS[CLASSES[c]][1])]


def check_engine(cfg: dict, res: dict, src=None, dst=None, stream=None, base: Graph | None = None) -> dict:
    """Compare every answer snapshot an engine run returned (``res["answers"]``: epoch and rows per class)
    with the reference. Returns {"ok": bool, "checked": [...], "queries_checked": n}."""
    if src is None:
        src, dst = make_graph(cfg["nodes"], cfg["edges"], cfg["seed"])
    if stream is None:
        stream = make_stream(cfg, src, dst)
    ev_epoch = np.asarray(res["ev_epoch"], np.int64)
    if base is None:
        base = Graph(cfg["nodes"], src, dst)
    checked, ok, nq = [], True, 0
    for snap in res["answers"]:
        g = graph_at(base, stream, ev_epoch, snap["epoch"])
        for c, cls in enumerate(CLASSES):
            args = live_args(stream, ev_epoch, snap["epoch"], c)
            exp = reference(g, cls, args)
            act = np.asarray(snap["rows"][cls], np.int64).reshape(-1, len(COLUMNS[cls]))
            r = compare(exp, act)
            r.update(epoch=snap["epoch"], cls=cls, queries=int(len(args)), when=snap["when"])
            nq += len(args)
            ok &= r["ok"]
            checked.append(r)
    return {"ok": bool(ok and checked), "checked": checked, "queries_checked": nq}


def check_kuzu(cfg: dict, res: dict, src=None, dst=None, base: Graph | None = None) -> dict:
    """Compare kuzu's answers (one result list per query, on the static graph) with the reference."""
    if base is None:
        if src is None:
            src, dst = make_graph(cfg["nodes"], cfg["edges"], cfg["seed"])
        base = Graph(cfg["nodes"], src, dst)
    g = base
    out, ok = [], True
    for cls in CLASSES:
        args = np.asarray(res["args"][cls], np.int64).reshape(-1, len(INPUTS[cls][1]))
        rows = []
        for q, ans in zip(args.tolist(), res["answers"][cls]):
            for r in ans:
                rows.append(list(q) + list(r))
        act = np.asarray(rows, np.int64).reshape(-1, len(COLUMNS[cls]))
        r = compare(reference(g, cls, args), act)
        r.update(cls=cls, queries=int(len(args)))
        ok &= r["ok"]
        out.append(r)
    return {"ok": bool(ok), "checked": out}


# -- memory -----------------------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim():
    """Hand the C heap's free memory back to the system (glibc ``malloc_trim``), so that RSS counts what
    the process holds rather than what the allocator keeps for reuse; a no-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def trace_bytes(eng) -> tuple:
    arrs = eng.stats()["arrangements"]
    rows = [{k: a[k] for k in ("name", "dataflow", "kind", "key", "records", "bytes")} for a in arrs]
    return int(sum(a["bytes"] for a in arrs)), rows


# -- the engine side --------------------------------------------------------------------------------------
def build_queries(eng, shared: bool, history: int = 8) -> dict:
    """Install the query dataflows (and, shared, the graph dataflow exporting both arrangements); returns
    the four views."""
    if shared:
        with eng.dataflow("graph") as df:
            df.input("edges").arrange_by("dst").export("edges_by_dst")

    def arrangements(df):
        cache = {}

        def get(key):
            if key not in cache:
                if not shared:  # its own index, from the input's rows
                    cache[key] = df.input("edges").as_collection().arrange_by(key)
                else:  # the input's own arrangement (keyed by src), or the one exported by dst
                    cache[key] = df.input("edges") if key == "src" else df.use("edges_by_dst")
            return cache[key]
        return get

    views = {}
    with eng.dataflow("lookup") as df:
        g = arrangements(df)
        views["lookup"] = df.input("q_lookup").join(g("src"), left_on="x", right_on="src").view("lookup", history)
    with eng.dataflow("hop1") as df:
        g = arrangements(df)
        q = df.input("q_hop1")
        out = q.join(g("src"), left_on="x", right_on="src").rename(dst="n")
        inn = q.join(g("dst"), left_on="x", right_on="dst").rename(src="n")
        views["hop1"] = out.concat(inn).distinct().view("hop1", history)
    with eng.dataflow("hop2") as df:
        g = arrangements(df)
        one = df.input("q_hop2").join(g("src"), left_on="x", right_on="src").rename(dst="m")
        two = one.join(g("src"), left_on="m", right_on="src").select("x", "dst").rename(dst="z")
        views["hop2"] = two.distinct().view("hop2", history)
    with eng.dataflow("path") as df:
        g = arrangements(df)
        q = df.input("q_path")

        def side(by, start, other):  # distances 0..2 from start (forward: by src; backward: by dst)
            l0 = q.map(lambda x, y: {"x": x, "y": y, "m": x if start == "x" else y, "d": np.zeros(len(x), np.int64)})
            l1 = q.join(g(by), left_on=start, right_on=by).rename(**{other: "m"}).select("x", "y", "m") \
                .map(lambda x, y, m: {"x": x, "y": y, "m": m, "d": np.ones(len(x), np.int64)})
            l2 = l1.join(g(by), left_on="m", right_on=by).select("x", "y", other).rename(**{other: "m"}) \
                .map(lambda x, y, m: {"x": x, "y": y, "m": m, "d": np.full(len(x), 2, np.int64)})
            return l0.concat(l1, l2)
        fwd, bwd = side("src", "x", "dst"), side("dst", "y", "src")
        j = fwd.join(bwd, on=["x", "y", "m"]).map(lambda x, y, d, d_right: {"x": x, "y": y, "d": d + d_right})
        views["path"] = j.min(by=["x", "y"], col="d").view("path", history)
    return views


def _view_rows(view, cls, at=None) -> list:
    cols = view.columns(at=at)
    return np.stack([np.asarray(cols[c], np.int64) for c in COLUMNS[cls]], axis=1).tolist()


def run_engine(cfg: dict, mode: str, src=None, dst=None, stream=None) -> dict:
    """One mode ("shared" or "unshared") from loading the graph to the end of the stream, in this process.
    Returns timings, latencies, memory and the answer snapshots (for ``check_engine``)."""
    import kpgnb as kp
    shared = mode == "shared"
    eng = kp.Engine(workers=cfg["workers"])
    trim()
    rss_base = rss_bytes()  # the process, its kernels and an empty engine: before any data
    t_gen = time.perf_counter()
    if src is None:
        src, dst = make_graph(cfg["nodes"], cfg["edges"], cfg["seed"])
    if stream is None:
        stream = make_stream(cfg, src, dst)
    gen_s = time.perf_counter() - t_gen
    res = {"mode": mode, "generate_s": gen_s, "rss_baseline": rss_base, "rss_generated": rss_bytes()}
    try:
        t0 = time.perf_counter()
        edges = eng.input("edges", ["src", "dst"], key="src")
        edges.insert({"src": src, "dst": dst})
        qin = {c: eng.input(name, cols) for c, (name, cols) in INPUTS.items()}
        sessions = [edges] + list(qin.values())
        epoch = 1
        for s in sessions:
            s.advance_to(epoch)
        del src, dst  # the stream has what the driver needs; the parent checks against its own copy
        views = build_queries(eng, shared, cfg.get("history", 8))
        for v in views.values():
            eng.wait(v)
        res["load_s"] = time.perf_counter() - t0
        res["trace_bytes_loaded"], _ = trace_bytes(eng)
        res["rss_loaded"] = rss_bytes()

        # closed loop on the static graph: one query at a time (insert, advance, wait), the previous one
        # retired in the same epoch
        rng = np.random.default_rng(cfg["seed"] + 7)
        closed = {}
        for cls in CLASSES:
            name, cols = INPUTS[cls]
            lat, prev = [], None
            for i in range(cfg["closed_queries"] + 3):
                row = {c: rng.integers(0, cfg["nodes"], 1) for c in cols}
                t = time.perf_counter()
                qin[cls].insert(row)
                if prev is not None:
                    qin[cls].remove(prev)
                epoch += 1
                for s in sessions:
                    s.advance_to(epoch)
                eng.wait(views[cls])
                lat.append(time.perf_counter() - t)
                prev = row
            qin[cls].remove(prev)
            closed[cls] = lat[3:]  # the first few compile / warm the query's path
        epoch += 1
        for s in sessions:
            s.advance_to(epoch)
        for v in views.values():
            eng.wait(v)
        res["closed_ms"] = {c: np.round(np.array(v) * 1e3, 3).tolist() for c, v in closed.items()}

        before = {d["name"]: (d["busy_s"], d["steps"]) for d in eng.stats()["dataflows"]}
        ops_before = _op_busy(eng)
        res.update(open_loop(eng, cfg, stream, sessions, edges, qin, views, epoch))
        ep = max(res["epochs"], 1)
        res["per_epoch_ops"] = {k: {"ops": n, "busy_ms": (b - ops_before.get(k, (0, 0.0, 0))[1]) * 1e3 / ep,
                                    "steps": (st - ops_before.get(k, (0, 0.0, 0))[2]) / ep}
                                for k, (n, b, st) in _op_busy(eng).items()}
        res["per_epoch"] = {d["name"]: {"operators": d["operators"],
                                        "busy_ms": (d["busy_s"] - before[d["name"]][0]) * 1e3 / ep,
                                        "steps": (d["steps"] - before[d["name"]][1]) / ep}
                            for d in eng.stats()["dataflows"]}
        res["trace_bytes_end"], res["arrangements"] = trace_bytes(eng)
        res["rss_end"] = rss_bytes()
        res["peak_rss"] = peak_rss_bytes()
        trim()
        res["rss_live"] = rss_bytes()
        res["ok_engine"] = eng.stats()["error"] is None
    finally:
        eng.close()
    return res


def _op_busy(eng) -> dict:
    """{"dataflow/kind": (operators, busy s, steps)}, from eng.operator_stats."""
    out = {}
    for name in eng.dataflows():
        for op in eng.operator_stats(name):
            k = f"{name}/{op['kind']}"
            n, b, st = out.get(k, (0, 0.0, 0))
            out[k] = (n + 1, b + op["busy_s"], st + op["steps"])
    return out


def open_loop(eng, cfg, stream, sessions, edges, qin, views, epoch) -> dict:
    t_ev, kind, a, b, retire = stream["t"], stream["kind"], stream["a"], stream["b"], stream["retire"]
    n = len(t_ev)
    ev_epoch = np.full(n, -1, np.int64)
    ev_issue = np.full(n, np.nan)
    ev_done = np.full(n, np.nan)
    cls_idx = [np.flatnonzero(kind == 2 + c) for c in range(4)]
    done_ptr = [0] * 4
    issued_ptr = [0] * 4
    view_list = [views[c] for c in CLASSES]
    checks_at = list(np.linspace(cfg["warmup"], cfg["duration"], cfg["checks"] + 1)[:-1]
                     + (cfg["duration"] - cfg["warmup"]) / (2 * max(cfg["checks"], 1)))
    answers, rss_samples, epochs_issued = [], [], 0
    cpu0, load0 = time.process_time(), os.getloadavg()
    grace = cfg.get("grace", 60.0)
    inflight = cfg.get("inflight", 1)
    i = 0
    next_rss = 0.0
    start = time.perf_counter()
    while True:
        snap = eng.snapshot()
        now = time.perf_counter() - start
        # completions: a class's arrivals are issued in epoch order, so the done ones are a prefix
        for c in range(4):
            if done_ptr[c] < issued_ptr[c]:
                f = view_list[c].epoch
                idx = cls_idx[c]
                k = done_ptr[c] + int(np.searchsorted(ev_epoch[idx[done_ptr[c]:issued_ptr[c]]], f, "left"))
                if k > done_ptr[c]:
                    ev_done[idx[done_ptr[c]:k]] = now
                    done_ptr[c] = k
        if now >= next_rss:  # once a second: RSS, and the merges the traces have in progress
            arrs = eng.arrangements()
            rss_samples.append((round(now, 3), rss_bytes(), sum(x["merges"] for x in arrs),
                                sum(x["merge_shortfall"] for x in arrs), sum(x["records"] for x in arrs)))
            next_rss = now + 1.0
        if checks_at and now >= checks_at[0] and i < n:
            checks_at.pop(0)
            f = min(v.epoch for v in view_list)
            try:
                rows = {cls: _view_rows(views[cls], cls, at=f - 1) for cls in CLASSES}
                answers.append({"epoch": f - 1, "when": "during", "rows": rows})
            except kp_compacted():
                pass
            continue
        behind = epoch - min(v.epoch for v in view_list)  # epochs issued and not final in every view
        if i < n and t_ev[i] <= now and behind < inflight:
            j = int(np.searchsorted(t_ev, now, "right"))
            sl = slice(i, j)
            k = kind[sl]
            ins, dels = k == EDGE_INS, k == EDGE_DEL
            if ins.any():
                edges.insert({"src": a[sl][ins], "dst": b[sl][ins]})
            if dels.any():
                edges.remove({"src": a[sl][dels], "dst": b[sl][dels]})
            for c, cls in enumerate(CLASSES):
                arr = k == 2 + c
                if arr.any():
                    cols = INPUTS[cls][1]
                    qin[cls].insert({col: v[sl][arr] for col, v in zip(cols, (a, b))})
                    r = retire[sl][arr]
                    r = r[r >= 0]
                    if len(r):
                        qin[cls].remove({col: v[r] for col, v in zip(cols, (a, b))})
                    issued_ptr[c] += int(arr.sum())
            ev_epoch[sl] = epoch
            epoch += 1
            for s in sessions:
                s.advance_to(epoch)
            ev_issue[sl] = time.perf_counter() - start
            epochs_issued += 1
            i = j
            continue
        if i >= n:
            if all(done_ptr[c] == issued_ptr[c] for c in range(4)) or now > t_ev[-1] + grace:
                break
            timeout = 0.05
        elif behind >= inflight:
            timeout = 0.05  # woken by the publication that shows progress
        else:
            timeout = min(0.05, t_ev[i] - now)
        if timeout > 0:
            eng.wait_snapshot(snap, timeout)  # wakes on the next published state
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    for v in view_list:
        eng.wait(v, timeout=grace)
    answers.append({"epoch": epoch - 1, "when": "end", "rows": {cls: _view_rows(views[cls], cls) for cls in CLASSES}})
    lat, lat_issue, unanswered = {}, {}, {}
    for c, cls in enumerate(CLASSES):
        idx = cls_idx[c]
        idx = idx[(t_ev[idx] >= cfg["warmup"]) & (ev_epoch[idx] >= 0)]
        fin = ~np.isnan(ev_done[idx])
        unanswered[cls] = int((~fin).sum())
        lat[cls] = np.round((ev_done[idx][fin] - t_ev[idx][fin]) * 1e3, 3).tolist()  # ms, to the microsecond
        lat_issue[cls] = np.round((ev_done[idx][fin] - ev_issue[idx][fin]) * 1e3, 3).tolist()
    issued = ev_epoch >= 0
    return {"open_ms": lat, "open_from_issue_ms": lat_issue, "unanswered": unanswered, "answers": answers,
            "ev_epoch": ev_epoch.tolist(), "epochs": epochs_issued, "events_issued": int(issued.sum()),
            "stream_s": elapsed, "rss_samples": rss_samples, "cpu_s": cpu,
            "cpu_ms_per_event": cpu * 1e3 / max(int(issued.sum()), 1), "loadavg": [load0, os.getloadavg()],
            "events_per_epoch": float(issued.sum() / max(epochs_issued, 1)),
            "behind_s": float(np.nanmax(ev_issue - t_ev)) if issued.any() else None}


def kp_compacted():
    import kpgnb as kp
    return kp.CompactedError


# -- the peer ---------------------------------------------------------------------------------------------
def peer_args(cfg: dict, stream: dict, per_class: int) -> dict:
    """The first ``per_class`` distinct query arguments of each class in the stream (kuzu's queries)."""
    out = {}
    for c, cls in enumerate(CLASSES):
        idx = np.flatnonzero(stream["kind"] == 2 + c)
        rows = _rows(stream["a"][idx], stream["b"][idx])[:, :len(INPUTS[cls][1])]
        _, first = np.unique(rows, axis=0, return_index=True)
        out[cls] = rows[np.sort(first)][:per_class]
    return out


def run_kuzu(cfg: dict, src=None, dst=None, stream=None) -> dict:
    import kuzu
    import pandas as pd
    if src is None:
        src, dst = make_graph(cfg["nodes"], cfg["edges"], cfg["seed"])
    if stream is None:
        stream = make_stream(cfg, src, dst)
    args = peer_args(cfg, stream, cfg["kuzu_queries"])
    del stream
    trim()
    rss_base = rss_bytes()
    res = {"version": kuzu.__version__, "rss_baseline": rss_base}
    with tempfile.TemporaryDirectory(prefix="kpgnb-kuzu-") as d:
        path = os.path.join(d, "db")
        t0 = time.perf_counter()
        db = kuzu.Database(path)
        conn = kuzu.Connection(db)
        conn.execute("CREATE NODE TABLE N(id INT64, PRIMARY KEY(id))")
        conn.execute("CREATE REL TABLE E(FROM N TO N)")
        nodes_df = pd.DataFrame({"id": np.arange(cfg["nodes"], dtype=np.int64)})  # noqa: F841 - read by COPY
        edges_df = pd.DataFrame({"from": src, "to": dst})  # noqa: F841 - read by COPY
        conn.execute("COPY N FROM nodes_df")
        conn.execute("COPY E FROM edges_df")
        res["load_s"] = time.perf_counter() - t0
        del nodes_df, edges_df, src, dst
        res["rss_loaded"] = rss_bytes()
        lat, answers = {}, {}
        for cls in CLASSES:
            names = INPUTS[cls][1]
            for q in args[cls][:3].tolist():  # warm-up (plan cache, buffer pool)
                conn.execute(CYPHER[cls], dict(zip(names, q))).get_all()
            lat[cls], answers[cls] = [], []
            for q in args[cls].tolist():
                t = time.perf_counter()
                rows = conn.execute(CYPHER[cls], dict(zip(names, q))).get_all()
                lat[cls].append(round((time.perf_counter() - t) * 1e3, 3))
                answers[cls].append(rows)
        res.update(latency_ms=lat, answers=answers, args={c: v.tolist() for c, v in args.items()})
        res["db_bytes"] = _du(d)
        res["rss_end"] = rss_bytes()
        res["peak_rss"] = peak_rss_bytes()
        trim()
        res["rss_live"] = rss_bytes()
        conn.close()
        db.close()
    return res


def _du(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# -- subprocesses --------------------------------------------------------------------------------------------
WARM = {"nodes": 500, "edges": 2500, "rate": 100.0, "duration": 0.5, "warmup": 0.0, "live": 5,
        "closed_queries": 2, "checks": 1, "seed": 1}


def _child(spec: str):
    kw = json.loads(spec)
    cfg, what, out = kw["cfg"], kw["what"], kw["out"]
    if what != "kuzu":  # load every kernel the run uses (numba cache, LLVM) before the baseline is taken
        run_engine({**cfg, **WARM}, what)
    res = run_kuzu(cfg) if what == "kuzu" else run_engine(cfg, what)
    with open(out, "w") as f:
        json.dump(res, f)


def bounded(cfg: dict, what: str, timeout: float) -> dict:
    """Run one mode (or kuzu) in a subprocess of this program, killed after ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="kpgnb-sharing-") as d:
        out = os.path.join(d, "res.json")
        cmd = [sys.executable, "-m", "bench.sharing", "--child", json.dumps({"cfg": cfg, "what": what, "out": out})]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        except subprocess.TimeoutExpired:
            return {"failure": f"> {timeout:.0f} s", "timeout_s": timeout}
        if p.returncode != 0 or not os.path.exists(out):
            err = (p.stderr or p.stdout)[-3000:]
            if what == "kuzu" and "No module named 'kuzu'" in err:
                return {"failure": "not installed"}
            return {"failure": "error", "error": err}
        with open(out) as f:
            res = json.load(f)
        res["wall_s"] = time.perf_counter() - t0
        return res


# -- summary ---------------------------------------------------------------------------------------------------
def _stats(xs) -> dict:
    xs = list(xs)
    return {"n": len(xs), "p50_ms": percentile(xs, 50), "p99_ms": percentile(xs, 99),
            "max_ms": max(xs) if xs else None}


def ccdf(xs, points: int = 200) -> list:
    """[(latency ms, fraction of queries slower)] on a log grid: the paper's plot, precomputed."""
    xs = np.sort(np.asarray(xs, float))
    if not len(xs):
        return []
    grid = np.unique(np.geomspace(max(xs[0], 1e-3), xs[-1], points))
    return [(round(float(g), 3), round(float(1 - np.searchsorted(xs, g, "right") / len(xs)), 6)) for g in grid]


MODES = ("shared", "unshared", "kuzu")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=10_000_000)
    p.add_argument("--rate", type=float, default=1000.0,
                   help="events per second offered (half edge changes, half query arrivals)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of the open-loop stream")
    p.add_argument("--warmup", type=float, default=5.0, help="first seconds left out of the statistics")
    p.add_argument("--graph-share", type=float, default=0.5,
                   help="fraction of the events that are edge changes (the rest are query arrivals)")
    p.add_argument("--inflight", type=int, default=1,
                   help="epochs the driver may have issued and not yet answered before it issues the next")
    p.add_argument("--live", type=int, default=100, help="live queries per class")
    p.add_argument("--closed-queries", type=int, default=100, help="closed-loop queries per class")
    p.add_argument("--kuzu-queries", type=int, default=200, help="kuzu queries per class")
    p.add_argument("--checks", type=int, default=4, help="answer snapshots checked during the stream")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, from " + ",".join(MODES))
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to each engine mode")
    p.add_argument("--peer-timeout", type=float, default=900.0, help="seconds allowed to kuzu")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one mode, in a subprocess
    if argv is None and "--child" in sys.argv:
        return _child(sys.argv[sys.argv.index("--child") + 1])
    a = parse_args(p, argv, QUICK)
    cfg = {"nodes": a.nodes, "edges": a.edges, "rate": a.rate, "duration": a.duration, "warmup": a.warmup,
           "live": a.live, "closed_queries": a.closed_queries, "kuzu_queries": a.kuzu_queries,
           "checks": a.checks, "workers": a.workers, "seed": a.seed, "graph_share": a.graph_share,
           "inflight": a.inflight}
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        p.error(f"--modes: unknown mode(s) {', '.join(map(repr, unknown))}; choose from {','.join(MODES)}"
                if unknown else f"--modes: none given; choose from {','.join(MODES)}")
    modes = list(dict.fromkeys(modes))  # each mode once
    runs = {}
    for m in modes:
        print(f"running {m} ...", flush=True)
        runs[m] = bounded(cfg, m, a.peer_timeout if m == "kuzu" else a.timeout)
    # answers
    src, dst = make_graph(cfg["nodes"], cfg["edges"], cfg["seed"])
    stream = make_stream(cfg, src, dst)
    base = Graph(cfg["nodes"], src, dst)
    for m, r in runs.items():
        if "failure" in r:
            continue
        chk = check_kuzu(cfg, r, base=base) if m == "kuzu" else check_engine(cfg, r, src, dst, stream, base)
        r["check"] = chk
        r.pop("answers", None)
        r.pop("ev_epoch", None)
        if not chk["ok"]:
            r["failure"] = "wrong answer"
    return report(cfg, runs, a.quick)


def report(cfg, runs, quick):
    import kpgnb
    versions = {"kpgnb": kpgnb.__version__, "numpy": np.__version__}
    if "kuzu" in runs and "version" in runs["kuzu"]:
        versions["kuzu"] = runs["kuzu"]["version"]
    rows, summary = [], {}
    for cls in CLASSES:
        row = {"query": cls}
        for m in ("shared", "unshared"):
            r = runs.get(m)
            if r is None:
                continue
            if "failure" in r:
                row[f"{m} p50"] = row[f"{m} p99"] = r["failure"]
                continue
            s = _stats(r["open_ms"][cls])
            c = _stats(r["closed_ms"][cls])
            summary.setdefault(m, {})[cls] = {"open": s, "closed": c, "unanswered": r["unanswered"][cls],
                                              "ccdf": ccdf(r["open_ms"][cls])}
            row[f"{m} p50"], row[f"{m} p99"] = s["p50_ms"], s["p99_ms"]
            row[f"{m} 1-query p50"] = c["p50_ms"]
        k = runs.get("kuzu")
        if k is not None:
            if "failure" in k:
                row["kuzu p50"] = k["failure"]
            else:
                ks = _stats(k["latency_ms"][cls])
                summary.setdefault("kuzu", {})[cls] = ks
                row["kuzu p50"], row["kuzu p99"] = ks["p50_ms"], ks["p99_ms"]
                sh = summary.get("shared", {}).get(cls)
                if sh:
                    row["kuzu/shared p50"] = ks["p50_ms"] / sh["open"]["p50_ms"]
                    row["kuzu/shared 1-query"] = ks["p50_ms"] / sh["closed"]["p50_ms"]
        rows.append(row)
    cols = ["query"] + [c for c in ("shared p50", "shared p99", "unshared p50", "unshared p99",
                                    "shared 1-query p50", "unshared 1-query p50", "kuzu p50", "kuzu p99",
                                    "kuzu/shared p50", "kuzu/shared 1-query") if any(c in r for r in rows)]
    print(f"\nquery latency, ms ({cfg['nodes']:,} nodes, {cfg['edges']:,} edges, {cfg['rate']:,.0f} events/s "
          f"open loop, {cfg.get('graph_share', 0.5):.0%} edge changes, W={cfg['workers']}; 1-query: closed loop, "
          f"static graph; kuzu: static graph)")
    print(table(rows, cols))
    mem = []
    for m in ("shared", "unshared", "kuzu"):
        r = runs.get(m)
        if r is None or r.get("failure") in ("not installed",) or "peak_rss" not in r:
            continue
        mem.append({"mode": m, "load s": r.get("load_s"), "peak RSS MB": r["peak_rss"] / 2**20,
                    "RSS end MB": r["rss_end"] / 2**20, "RSS live MB": r["rss_live"] / 2**20,
                    "baseline MB": r["rss_baseline"] / 2**20,
                    "trace MB": r["trace_bytes_end"] / 2**20 if "trace_bytes_end" in r else None,
                    "db MB": r["db_bytes"] / 2**20 if "db_bytes" in r else None,
                    "epochs": r.get("epochs"), "events/epoch": r.get("events_per_epoch"),
                    "CPU ms/event": r.get("cpu_ms_per_event"),
                    "load avg": r["loadavg"][1][0] if "loadavg" in r else None})
    print()
    print(table(mem, ["mode", "load s", "peak RSS MB", "RSS end MB", "RSS live MB", "baseline MB", "trace MB", "db MB",
                      "epochs", "events/epoch", "CPU ms/event", "load avg"]))
    busy = []
    for m in ("shared", "unshared"):
        r = runs.get(m)
        for name, d in ((r or {}).get("per_epoch") or {}).items():
            busy.append({"mode": m, "dataflow": name, "operators": d["operators"], "busy ms/epoch": d["busy_ms"],
                         "steps/epoch": d["steps"]})
    if busy:
        print("\nwhere an open-loop epoch's time goes (scheduler busy time per dataflow)")
        print(table(busy, ["mode", "dataflow", "operators", "busy ms/epoch", "steps/epoch"]))
    goals = {}
    sh, un = runs.get("shared"), runs.get("unshared")
    if sh and un and "failure" not in sh and "failure" not in un:
        goals["memory_ratio_peak_rss"] = un["peak_rss"] / sh["peak_rss"]
        goals["memory_ratio_trace_bytes"] = un["trace_bytes_end"] / sh["trace_bytes_end"]
        goals["memory_ratio_rss_above_baseline"] = (un["peak_rss"] - un["rss_baseline"]) / \
            (sh["peak_rss"] - sh["rss_baseline"])
        goals["memory_ratio_rss_live_above_baseline"] = (un["rss_live"] - un["rss_baseline"]) / \
            (sh["rss_live"] - sh["rss_baseline"])
        goals["sharing_2x_less_memory"] = {k: goals[f"memory_ratio_{k}"] >= 2 for k in (
            "trace_bytes", "peak_rss", "rss_above_baseline", "rss_live_above_baseline")}
        goals["p99_ratio_unshared_over_shared"] = {c: summary["unshared"][c]["open"]["p99_ms"] /
                                                   summary["shared"][c]["open"]["p99_ms"] for c in CLASSES}
        goals["sharing_lower_p99"] = all(v > 1 for v in goals["p99_ratio_unshared_over_shared"].values())
    k = runs.get("kuzu")
    if sh and k and "failure" not in sh and "failure" not in k:
        goals["median_below_kuzu_open_loop"] = {c: summary["shared"][c]["open"]["p50_ms"] < summary["kuzu"][c]["p50_ms"]
                                                for c in CLASSES}
        goals["median_below_kuzu_closed_loop"] = {c: summary["shared"][c]["closed"]["p50_ms"] <
                                                  summary["kuzu"][c]["p50_ms"] for c in CLASSES}
    print("\ngoals:", json.dumps(goals, indent=1, default=str))
    for m, r in runs.items():
        if "failure" in r:
            print(f"{m}: {r['failure']}", (r.get("check") or {}).get("checked", "")[:2] if r.get("check") else
                  r.get("error", "")[-1500:])
    path = write_result("sharing", {"params": cfg, "versions": versions, "summary": summary, "goals": goals,
                                    "runs": runs}, quick)
    print("wrote", path)
    return {"summary": summary, "goals": goals, "runs": runs}


if __name__ == "__main__":
    main()
