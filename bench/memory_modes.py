"""Memory modes of the recursive graph queries (issue 14): full differential computation, join on demand
(JOD) and partial dropping of vertex-state differences, against recomputing from scratch.

    python -m bench.memory_modes [--nodes 32768] [--edges 100000] [--batches 100] [--budget-mb 256] [--quick]

The third paper's setup (optimizing-differentially-maintained-recursive-queries, section 6) at sizes that
fit here: a power-law graph (``--graph rmat``: R-MAT with a, b, c = 0.57, 0.19, 0.19; or ``ba``:
Barabasi-Albert), seeded NumPy, self-loops and duplicate edges dropped, weights uniform 1..10; 90% of the
shuffled edges are loaded first, then ``--batches`` batches of ``--batch-size`` single-edge changes: inserts
of the held-out 10%, and with ``--delete-fraction`` removals of present edges.

Queries (``kpgnb.graphs``): SPSP (``sssp`` from ``--sources`` sources given as an input collection), K-hop
(``khop``, K = ``--k``, the same sources), WCC (``wcc``) and PageRank (``pagerank``, ``--iterations``
rounds). Modes: ``full`` (differential dataflow: join, concat and reduce inside ``iterate``), ``jod`` (no
join-output differences), ``drop-degree-exact`` (DET-DROP, Degree policy), ``drop-degree-bloom``
(PROB-DROP, Degree policy, a Bloom filter of ``--bloom-bits``, by default of the size the engine picks) and
``drop-random-exact`` (DET-DROP, Random policy), the drop modes with p = ``--drop-p`` (Degree: tau_min 2,
tau_max the 80th percentile).

Each mode runs in a subprocess of its own (every query of the mode in turn, each on a fresh engine; before
each, the heap is trimmed and the process's peak RSS reset through /proc/self/clear_refs, so peak RSS is
that query's; ``--isolate run`` gives each (query, mode) a process instead). Per (query, mode): load time
(insert the 90%, install the dataflow, first answer), trace bytes (the sum of ``eng.stats()["arrangements"]``
bytes plus the dropped-pair trackers, which are not arrangements the catalog lists; sampled after the load
and after every batch, the peak reported) and the IFE report's bytes (state, join, tracker), RSS (baseline,
peak, end), time per update batch (change + advance_to + ``eng.wait``: p50, p99, mean; updates stop after
``--run-seconds``, at least 3 batches, which bounds PageRank), and the differences kept, dropped and
recomputed (``eng.stats()["ife"]``).

SCRATCH recomputes each query per batch with scipy.sparse.csgraph (Dijkstra from every source, with
``limit=K`` and unit weights for K-hop, connected components) or a sparse matrix-vector power iteration
(PageRank): its time per batch is the algorithm on a CSR graph (the CSR rebuild is timed apart and left
out, so SCRATCH is at its best), its memory the CSR graph.

Budget: how many concurrent SPSP queries fit ``--budget-mb`` of trace bytes, per mode. One engine per mode
starts from ``--sources`` sources and doubles them (10, 20, 40, ...: the sources are an input collection,
so a query arrives by inserting its row), running ``--budget-batches`` update batches at each size, until
the trace bytes exceed the budget (or ``--budget-max`` sources, or ``--budget-seconds``). The largest size
within the budget is the answer; SCRATCH's per-update time at that many sources is measured too.

Sweep (the paper's Fig. 6): K-hop under DET-DROP with the Degree and the Random policy at each p of
``--sweep-p``: time per update against the differences dropped.

Answers: after the last batch every mode's result is compared with scipy's on the graph as of that batch
(SPSP distances, K-hop hop counts, WCC labels; PageRank within ``--rtol`` of a NumPy power iteration of
kpgnb.graphs.pagerank's unnormalised formula); so are the budget runs' results at their largest size. A
mismatch is reported as "wrong answer", never as a number.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import parse_args, peak_rss_bytes, percentile, table, write_result

QUICK = {"nodes": 512, "edges": 2000, "batches": 10, "budget_mb": 4.0, "budget_batches": 2,
         "budget_max": 160, "budget_seconds": 4.0, "run_seconds": 1.5, "bloom_bits": 1 << 16,
         "sweep_p": "0.9", "job_timeout": 8.0, "mem_limit_gb": 2.0}

QUERIES = ("spsp", "khop", "wcc", "pagerank")
MODES = {  # label: (memory, Drop keywords or None)
    "full": ("full", None),
    "jod": ("jod", None),
    "drop-degree-exact": ("drop", {"policy": "degree", "tracker": "exact"}),
    "drop-degree-bloom": ("drop", {"policy": "degree", "tracker": "bloom"}),
    "drop-random-exact": ("drop", {"policy": "random", "tracker": "exact"}),
}
COLUMNS = {"spsp": ["source", "node", "dist"], "khop": ["source", "node", "hops"], "wcc": ["node", "label"],
           "pagerank": ["node", "rank"]}
ALPHA = 0.85


# -- data ---------------------------------------------------------------------------------------------------
def _rmat(scale: int, m: int, rng, a=0.57, b=0.19, c=0.19):
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for i in range(scale):
        u = rng.random(m)
        src |= (u >= a + b).astype(np.int64) << i
        dst |= (((u >= a) & (u < a + b)) | (u >= a + b + c)).astype(np.int64) << i
    return src, dst


def _ba(n: int, m: int, rng):
    """Barabasi-Albert: each new node attaches ceil(m / n) edges to earlier nodes chosen in proportion to
    their degree (from the list of edge endpoints so far), each edge oriented at random."""
    d = max(1, -(-m // n))
    ends = np.zeros(2 * n * d + 2, np.int64)
    ends[:2] = (0, 1)
    filled = 2
    src, dst = [np.array([0])], [np.array([1])]
    for v in range(2, n):
        t = ends[rng.integers(0, filled, d)]
        src.append(np.full(d, v))
        dst.append(t)
        ends[filled:filled + d] = v
        ends[filled + d:filled + 2 * d] = t
        filled += 2 * d
    src, dst = np.concatenate(src), np.concatenate(dst)
    flip = rng.random(len(src)) < 0.5
    return np.where(flip, dst, src), np.where(flip, src, dst)


class GraphSizeError(ValueError):
    """The graph cannot have the edges asked for (more than its nodes hold, or more distinct ones than
    R-MAT's draws reach): an argument error, said before (or instead of) drawing for ever."""


def graph_nodes(cfg: dict) -> int:
    """The graph's number of nodes: ``nodes``, rounded up to a power of two (at least 2) for R-MAT."""
    if cfg.get("graph", "rmat") == "ba":
        return int(cfg["nodes"])
    return 1 << max(1, int(np.ceil(np.log2(max(2, int(cfg["nodes"]))))))


def check_graph_size(cfg: dict):
    """GraphSizeError unless the graph can hold ``edges`` edges: n nodes hold n * (n - 1) edges without
    self-loops or duplicates, and Barabasi-Albert needs 2 nodes to start from."""
    n, m = graph_nodes(cfg), int(cfg["edges"])
    if m < 1:
        raise GraphSizeError(f"--edges {m}: the graph needs at least 1 edge")
    if n < 2:
        raise GraphSizeError(f"--nodes {cfg['nodes']}: the graph needs at least 2 nodes")
    if m > n * (n - 1):
        raise GraphSizeError(f"--edges {m}: {n:,} nodes{' (--nodes rounded up to a power of two)' if n != int(cfg['nodes']) else ''} "
                             f"hold at most {n * (n - 1):,} edges without self-loops or duplicates; ask for fewer "
                             f"edges or more nodes")


RMAT_DRAWS = 64  # R-MAT's draws stop at this many times the first: a graph too dense for it is refused


def make_graph(cfg: dict):
    """(n, src, dst, w): a power-law graph of about ``edges`` edges, no self-loops or duplicate edges,
    shuffled; weights uniform 1..10. GraphSizeError when it cannot have that many edges."""
    check_graph_size(cfg)
    rng = np.random.default_rng(cfg["seed"])
    m = int(cfg["edges"])
    n = graph_nodes(cfg)
    if cfg.get("graph", "rmat") == "ba":
        s, d = _ba(n, m, rng)
        keep = s != d
        pk = np.unique(s[keep] * n + d[keep])
    else:
        scale = n.bit_length() - 1
        pk = np.zeros(0, np.int64)
        first = want = int(m * 1.3) + 16
        while True:  # R-MAT repeats edges: draw until there are enough distinct ones
            s, d = _rmat(scale, want, rng)
            keep = s != d
            pk = np.unique(np.concatenate([pk, s[keep] * n + d[keep]]))
            if len(pk) >= m:
                break
            if want * 2 > RMAT_DRAWS * first:
                raise GraphSizeError(f"--edges {m}: R-MAT drew only {len(pk):,} distinct edges on {n:,} nodes (in "
                                     f"{2 * want - first:,} draws); its skew leaves the rest unlikely: ask for fewer "
                                     f"edges or more nodes")
            want *= 2
    pk = rng.permutation(pk)[:m]
    src, dst = pk // n, pk % n
    w = rng.integers(1, 11, len(src)).astype(np.int64)
    return n, src.astype(np.int64), dst.astype(np.int64), w


def make_stream(cfg: dict, m: int, batches: int) -> dict:
    """The first 90% of the (shuffled) edges are loaded; ``batches`` batches of ``batch_size`` changes
    follow: with probability ``delete_fraction`` the removal of a present edge, else the insertion of the
    next held-out edge. Indices into the edge arrays."""
    rng = np.random.default_rng(cfg["seed"] + 1)
    k = int(m * 0.9)
    present = list(range(k))
    nxt = k
    ins, dels = [], []
    for _ in range(batches):
        bi, bd = [], []
        for _ in range(int(cfg["batch_size"])):
            if (rng.random() < cfg["delete_fraction"] or nxt >= m) and present:
                j = int(rng.integers(len(present)))
                present[j], present[-1] = present[-1], present[j]
                bd.append(present.pop())
            elif nxt < m:
                bi.append(nxt)
                present.append(nxt)
                nxt += 1
        ins.append(np.array(bi, np.int64))
        dels.append(np.array(bd, np.int64))
    return {"loaded": k, "ins": ins, "dels": dels}


def present_after(stream: dict, m: int, b: int) -> np.ndarray:
    """Indices of the edges present after ``b`` batches."""
    on = np.zeros(m, bool)
    on[:stream["loaded"]] = True
    for i in range(b):
        on[stream["ins"][i]] = True
        on[stream["dels"][i]] = False
    return np.flatnonzero(on)


def pick_sources(cfg: dict, src, stream) -> np.ndarray:
    """Every node with an out-edge in the loaded graph, in a seeded random order: the first c are the
    sources of a run with c SPSP / K-hop queries."""
    rng = np.random.default_rng(cfg["seed"] + 2)
    return rng.permutation(np.unique(src[:stream["loaded"]]))


def data(cfg: dict) -> dict:
    n, src, dst, w = make_graph(cfg)
    total = max(int(cfg["batches"]), _budget_batches_needed(cfg))
    stream = make_stream(cfg, len(src), total)
    return {"n": n, "src": src, "dst": dst, "w": w, "stream": stream, "sources": pick_sources(cfg, src, stream)}


def _budget_counts(cfg: dict) -> list:
    """The numbers of SPSP sources of the budget search: ``sources``, doubled up to ``budget_max``."""
    counts, c = [], int(cfg["sources"])
    if c < 1:  # (0 doubled stays 0: the search would never end)
        raise ValueError(f"the budget search starts from --sources {c}; it needs at least 1 source")
    while c <= int(cfg["budget_max"]):
        counts.append(c)
        c *= 2
    return counts or [int(cfg["sources"])]


def _budget_batches_needed(cfg: dict) -> int:
    return len(_budget_counts(cfg)) * int(cfg["budget_batches"])


# -- reference answers (scipy) and SCRATCH ------------------------------------------------------------------
def csr(n, src, dst, w):
    import scipy.sparse as sp
    return sp.csr_matrix((w.astype(np.float64), (src, dst)), shape=(n, n))


def reference(query: str, n: int, src, dst, w, sources, k: int, iterations: int, A=None) -> dict:
    """The query's answer as kpgnb's view gives it (columns as arrays, rows sorted), from scipy/NumPy."""
    from scipy.sparse.csgraph import connected_components, dijkstra
    if query in ("spsp", "khop"):
        A = csr(n, src, dst, w if query == "spsp" else np.ones(len(src))) if A is None else A
        sources = np.asarray(sources, np.int64)
        if query == "spsp":
            D = dijkstra(A, directed=True, indices=sources)
        else:
            D = dijkstra(A, directed=True, indices=sources, unweighted=True, limit=k)
        i, j = np.nonzero(np.isfinite(D))
        out = {"source": sources[i], "node": j.astype(np.int64), "x": D[i, j].astype(np.int64)}
        out = {COLUMNS[query][2] if c == "x" else c: v for c, v in out.items()}
        return _sorted(out, COLUMNS[query])
    has = np.zeros(n, bool)
    has[src] = True
    has[dst] = True
    nodes = np.flatnonzero(has)
    if query == "wcc":
        A = csr(n, src, dst, np.ones(len(src))) if A is None else A
        _, lab = connected_components(A, directed=True, connection="weak")
        mins = np.full(lab.max() + 1, n, np.int64)
        np.minimum.at(mins, lab[nodes], nodes)
        return {"node": nodes, "label": mins[lab[nodes]]}
    rank = pagerank_numpy(n, src, dst, iterations)
    return {"node": nodes, "rank": rank[nodes]}


def pagerank_numpy(n, src, dst, iterations: int, P=None):
    """kpgnb.graphs.pagerank's formula: rank(v) = (1 - alpha) + alpha * sum over u -> v of rank(u) /
    outdeg(u), from 1 - alpha, ``iterations`` rounds, at the nodes with an edge (0 elsewhere)."""
    has = np.zeros(n, bool)
    has[src] = True
    has[dst] = True
    if P is None:
        P = pagerank_matrix(n, src, dst)
    r = np.where(has, 1.0 - ALPHA, 0.0)
    for _ in range(iterations):
        r = np.where(has, (1.0 - ALPHA) + ALPHA * (P @ r), 0.0)
    return r


def pagerank_matrix(n, src, dst):
    import scipy.sparse as sp
    deg = np.bincount(src, minlength=n).astype(np.float64)
    return sp.csr_matrix((1.0 / deg[src], (dst, src)), shape=(n, n))


def _sorted(cols: dict, names: list) -> dict:
    order = np.lexsort(tuple(np.asarray(cols[c]) for c in reversed(names)))
    return {c: np.asarray(cols[c])[order] for c in names}


def compare(query: str, expected: dict, got: dict, rtol: float = 1e-9) -> dict:
    """Whether kpgnb's rows (``got``) are the reference's; PageRank within ``rtol``."""
    names = COLUMNS[query]
    if set(got) < set(names):
        return {"ok": False, "why": f"columns {sorted(got)}"}
    g = _sorted({c: np.asarray(got[c]) for c in names}, names)
    e = _sorted({c: np.asarray(expected[c]) for c in names}, names)
    ne, ng = len(e[names[0]]), len(g[names[0]])
    if ne != ng:
        return {"ok": False, "why": f"{ng} rows, expected {ne}", "rows": ng, "expected_rows": ne}
    if query == "pagerank":
        same_nodes = bool(np.array_equal(e["node"], g["node"]))
        close = np.isclose(g["rank"], e["rank"], rtol=rtol, atol=rtol)
        bad = int((~close).sum()) if same_nodes else ne
        err = 0.0
        if same_nodes and ne:
            err = float(np.max(np.abs(g["rank"] - e["rank"]) / np.maximum(np.abs(e["rank"]), 1e-300)))
        return {"ok": same_nodes and bad == 0, "rows": ng, "mismatches": bad, "max_rel_err": err}
    bad = np.zeros(ne, bool)
    for c in names:
        bad |= e[c] != g[c]
    return {"ok": not bad.any(), "rows": ng, "mismatches": int(bad.sum())}


def scratch(cfg: dict, d: dict, query: str, batches: int, nsources: int | None = None) -> dict:
    """SCRATCH: recompute the query after each of the first ``batches`` batches. ``algo_ms`` is the
    algorithm on a CSR graph; ``build_ms`` the CSR rebuild (left out of the comparison)."""
    from scipy.sparse.csgraph import connected_components, dijkstra
    n, src, dst, w, stream = d["n"], d["src"], d["dst"], d["w"], d["stream"]
    m = len(src)
    sources = d["sources"][: nsources or cfg["sources"]]
    on = np.zeros(m, bool)
    on[:stream["loaded"]] = True
    algo, build, graph_bytes = [], [], 0
    for b in range(batches):
        on[stream["ins"][b]] = True
        on[stream["dels"][b]] = False
        idx = np.flatnonzero(on)
        s, t, ww = src[idx], dst[idx], w[idx]
        t0 = time.perf_counter()
        if query == "pagerank":
            A = pagerank_matrix(n, s, t)
        else:
            A = csr(n, s, t, ww if query == "spsp" else np.ones(len(s)))
        t1 = time.perf_counter()
        if query == "spsp":
            dijkstra(A, directed=True, indices=sources)
        elif query == "khop":
            dijkstra(A, directed=True, indices=sources, unweighted=True, limit=cfg["k"])
        elif query == "wcc":
            connected_components(A, directed=True, connection="weak")
        else:
            pagerank_numpy(n, s, t, cfg["iterations"], P=A)
        t2 = time.perf_counter()
        build.append((t1 - t0) * 1e3)
        algo.append((t2 - t1) * 1e3)
        graph_bytes = int(A.data.nbytes + A.indices.nbytes + A.indptr.nbytes)
    return {"batches": batches, "sources": len(sources) if query in ("spsp", "khop") else None,
            "algo_p50_ms": percentile(algo, 50), "algo_p99_ms": percentile(algo, 99),
            "algo_mean_ms": float(np.mean(algo)) if algo else None,
            "build_p50_ms": percentile(build, 50), "graph_bytes": graph_bytes, "algo_ms": algo, "build_ms": build}


# -- memory -------------------------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim():
    """Collect garbage and hand the C heap's free memory back (glibc ``malloc_trim``)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux: ``5`` to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trace_bytes(eng) -> dict:
    """Bytes of every arrangement (``eng.stats()["arrangements"]``), of the IFE operators' structures
    (``eng.stats()["ife"]``) and their dropped-pair trackers (not among the arrangements): ``total`` is
    arrangements + trackers."""
    arr = int(sum(a["bytes"] for a in eng.arrangements()))
    ife = eng.ife_stats()
    tracker = int(sum(r["bytes"]["dropped_tracker"] for r in ife))
    return {"arrangements": arr, "tracker": tracker, "total": arr + tracker,
            "ife": int(sum(sum(r["bytes"].values()) for r in ife))}


# -- the engine side ----------------------------------------------------------------------------------------
def budget_bloom_bits(cfg: dict) -> int:
    """The budget runs' Bloom filter: 1/32 of the budget (a power of two), so that it stays sparse at the
    number of dropped differences the budget can hold."""
    return 1 << max(10, int(np.floor(np.log2(float(cfg["budget_mb"]) * 2**20 / 32 * 8))))


def make_drop(cfg: dict, label: str, p: float | None = None, bloom_bits: int | None = None):
    import kpgnb as kp
    memory, kw = MODES[label]
    if kw is None:
        return memory, None
    bits = int(bloom_bits or cfg["bloom_bits"]) or None  # 0: sized by the engine at the first drop
    return memory, kp.Drop(p=cfg["drop_p"] if p is None else p, bloom_bits=bits, seed=int(cfg["seed"]), **kw)


def build(df, query: str, memory: str, drop, k: int, iterations: int):
    from kpgnb import graphs
    e = df.input("edges")
    if query == "spsp":
        return graphs.sssp(e, df.input("sources"), memory=memory, drop=drop)
    plain = e.select("src", "dst")
    if query == "khop":
        return graphs.khop(plain, df.input("sources"), k, memory=memory, drop=drop)
    if query == "wcc":
        return graphs.wcc(plain, memory=memory, drop=drop)
    return graphs.pagerank(plain, iterations, memory=memory, drop=drop)


def _rows(d: dict, idx):
    return {"src": d["src"][idx], "dst": d["dst"][idx], "w": d["w"][idx]}


class Driver:
    """One engine with the edges and sources inputs, one query dataflow, and the update stream."""

    def __init__(self, cfg, d, query, label, nsources, p=None, bloom_bits=None):
        import kpgnb as kp
        self.cfg, self.d, self.query = cfg, d, query
        self.memory, self.drop = make_drop(cfg, label, p, bloom_bits)
        self.eng = kp.Engine(workers=int(cfg["workers"]))
        self.edges = self.eng.input("edges", ["src", "dst", "w"])
        self.srcs = self.eng.input("sources", ["source"])
        self.epoch = 1
        self.batch = 0
        self.nsources = nsources
        self.peak = {"arrangements": 0, "tracker": 0, "total": 0, "ife": 0}
        t0 = time.perf_counter()
        self.edges.insert(_rows(d, np.arange(d["stream"]["loaded"])))
        self.srcs.insert({"source": d["sources"][:nsources]})
        self._advance()
        with self.eng.dataflow(query) as df:
            self.view = build(df, query, self.memory, self.drop, int(cfg["k"]), int(cfg["iterations"])).view("out")
        self.eng.wait(self.view)
        self.load_s = time.perf_counter() - t0
        self.sample()

    def _advance(self):
        self.epoch += 1
        self.edges.advance_to(self.epoch)
        self.srcs.advance_to(self.epoch)

    def sample(self) -> dict:
        tb = trace_bytes(self.eng)
        for key, v in tb.items():
            self.peak[key] = max(self.peak[key], v)
        return tb

    def update(self) -> float:
        """One batch of the stream: change, advance, wait; seconds."""
        st = self.d["stream"]
        t0 = time.perf_counter()
        dels, ins = st["dels"][self.batch], st["ins"][self.batch]
        if len(dels):
            self.edges.remove(_rows(self.d, dels))
        if len(ins):
            self.edges.insert(_rows(self.d, ins))
        self._advance()
        self.eng.wait(self.view)
        dt = time.perf_counter() - t0
        self.batch += 1
        return dt

    def grow(self, count: int) -> float:
        t0 = time.perf_counter()
        self.srcs.insert({"source": self.d["sources"][self.nsources:count]})
        self.nsources = count
        self._advance()
        self.eng.wait(self.view)
        return time.perf_counter() - t0

    def output(self) -> dict:
        cols = self.view.columns()
        return {c: np.asarray(cols[c]) for c in COLUMNS[self.query]}

    def ife(self) -> dict:
        rep = self.eng.ife_stats()
        return rep[0] if rep else {}

    def close(self):
        self.eng.close()


def _lat_stats(lat_s) -> dict:
    ms = [x * 1e3 for x in lat_s]
    return {"batches": len(ms), "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
            "mean_ms": float(np.mean(ms)) if ms else None, "max_ms": max(ms) if ms else None, "latencies_ms": ms}


def run_query(cfg: dict, d: dict, query: str, label: str, p: float | None = None) -> tuple:
    """One (query, mode): load, the update batches, statistics. Returns (result, output columns)."""
    trim()
    reset_peak()
    base = rss_bytes()
    drv = Driver(cfg, d, query, label, int(cfg["sources"]), p)
    try:
        rss_loaded = rss_bytes()
        lat = []
        t_end = time.perf_counter() + float(cfg["run_seconds"])
        while drv.batch < int(cfg["batches"]) and (len(lat) < 3 or time.perf_counter() < t_end):
            lat.append(drv.update())
            drv.sample()
        out = drv.output()
        res = {"query": query, "mode": label, "p": (cfg["drop_p"] if p is None else p) if MODES[label][1] else None,
               "sources": int(cfg["sources"]) if query in ("spsp", "khop") else None,
               "load_s": drv.load_s, **_lat_stats(lat), "stopped_early": drv.batch < int(cfg["batches"]),
               "trace_bytes_peak": drv.peak, "trace_bytes_end": drv.sample(), "ife": drv.ife(),
               "rss_baseline": base, "rss_loaded": rss_loaded, "rss_end": rss_bytes(), "peak_rss": peak_rss_bytes(),
               "rows": int(len(next(iter(out.values()))))}
    finally:
        drv.close()
    return res, out


def run_budget(cfg: dict, d: dict, label: str) -> tuple:
    """Grow the SPSP sources (doubling) until the trace bytes exceed the budget."""
    trim()
    reset_peak()
    base = rss_bytes()
    budget = float(cfg["budget_mb"]) * 2**20
    counts = _budget_counts(cfg)
    drv = Driver(cfg, d, "spsp", label, counts[0], bloom_bits=budget_bloom_bits(cfg))
    steps, stop = [], "max"
    t_end = time.perf_counter() + float(cfg["budget_seconds"])
    try:
        for i, c in enumerate(counts):
            grow_s = drv.load_s if i == 0 else drv.grow(c)
            after_grow = drv.sample()
            lat = [drv.update() for _ in range(int(cfg["budget_batches"]))]
            tb = drv.sample()
            peak = max(after_grow["total"], tb["total"])
            steps.append({"queries": c, "grow_s": grow_s, "trace_bytes": peak, "arrangements": tb["arrangements"],
                          "tracker": tb["tracker"], "ife_bytes": tb["ife"], "rss": rss_bytes(),
                          "fits": peak <= budget, **{k: v for k, v in _lat_stats(lat).items()}})
            if peak > budget:
                stop = "budget"
                break
            if time.perf_counter() > t_end and i + 1 < len(counts):
                stop = "time"
                break
        out = drv.output()
        res = {"mode": label, "budget_bytes": budget, "bloom_bits": budget_bloom_bits(cfg) if "bloom" in label else None,
               "steps": steps, "stopped_by": stop, "batches_done": drv.batch,
               "final_queries": drv.nsources, "ife": drv.ife(), "rss_baseline": base, "peak_rss": peak_rss_bytes()}
        fit = [s["queries"] for s in steps if s["fits"]]
        res["largest_fitting"] = max(fit) if fit else 0
        res["capped"] = stop != "budget"  # the largest measured still fit: the true answer is at least that
    finally:
        drv.close()
    return res, out


def warm(cfg: dict):
    """Run the job's query and mode once at a tiny size, so that every kernel is compiled or loaded before
    a baseline is taken."""
    tiny = {**cfg, "nodes": 64, "edges": 200, "batches": 2, "sources": 3, "budget_max": 6, "budget_batches": 1,
            "run_seconds": 0.0, "bloom_bits": 1 << 10}
    td = data(tiny)
    return td, tiny


def run_jobs(cfg: dict, jobs: list, out_dir: str, warm_up: bool = True) -> list:
    """Run jobs (dicts with kind "query" or "budget", query, mode, p) in this process, writing each result
    and output as it finishes, and which job runs since when (``progress.json``), so that a parent that
    kills this process for time or memory knows which job it was and keeps the ones done."""
    d = data(cfg)
    results, warmed = [], set()
    for j, job in enumerate(jobs):
        if out_dir:
            with open(os.path.join(out_dir, "progress.json"), "w") as f:
                json.dump({"index": j, "started": time.time()}, f)
        if warm_up and (job["kind"], job.get("query"), job["mode"]) not in warmed:
            warmed.add((job["kind"], job.get("query"), job["mode"]))
            td, tiny = warm(cfg)
            if job["kind"] == "budget":
                run_budget(tiny, td, job["mode"])
            else:
                run_query(tiny, td, job["query"], job["mode"], job.get("p"))
        t0 = time.perf_counter()
        try:
            if job["kind"] == "budget":
                res, out = run_budget(cfg, d, job["mode"])
            else:
                res, out = run_query(cfg, d, job["query"], job["mode"], job.get("p"))
        except Exception:  # noqa: BLE001 - reported as this job's failure, the others go on
            import traceback
            res, out = {"failure": "error", "error": traceback.format_exc()[-3000:]}, None
        res.update({"job": job, "wall_s": time.perf_counter() - t0})
        if out is not None and out_dir:
            np.savez(os.path.join(out_dir, f"out{j}.npz"), **out)
            res["output"] = f"out{j}.npz"
        results.append(res)
        if out_dir:
            with open(os.path.join(out_dir, "res.json"), "w") as f:
                json.dump(results, f, default=float)
    return results


def _child(spec: str):
    kw = json.loads(spec)
    run_jobs(kw["cfg"], kw["jobs"], kw["out"])


def _read_done(d: str) -> list:
    """(result, output columns) of every job a child finished, from its directory."""
    path = os.path.join(d, "res.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        done = json.load(f)
    pairs = []
    for r in done:
        out = None
        if r.get("output"):
            with np.load(os.path.join(d, r.pop("output"))) as z:
                out = {k: z[k] for k in z.files}
        pairs.append((r, out))
    return pairs


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def bounded(cfg: dict, jobs: list, job_timeout: float, mem_limit: float) -> list:
    """Run jobs in a subprocess of this program, one after another. A job that runs longer than
    ``job_timeout`` seconds, or during which the process's RSS passes ``mem_limit`` bytes, is killed and
    reported as "> N s" / "out of memory"; a fresh subprocess goes on with the jobs after it."""
    pairs, remaining = [], list(jobs)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while remaining:
        with tempfile.TemporaryDirectory(prefix="kpgnb-memory-modes-") as d:
            cmd = [sys.executable, "-m", "bench.memory_modes", "--child",
                   json.dumps({"cfg": cfg, "jobs": remaining, "out": d})]
            why = None
            with open(os.path.join(d, "stderr"), "w") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=root)
                peak = 0
                while proc.poll() is None:
                    time.sleep(0.1)
                    rss = _rss_of(proc.pid)
                    peak = max(peak, rss)
                    try:
                        with open(os.path.join(d, "progress.json")) as f:
                            prog = json.load(f)
                        started = prog["started"]
                        budget_job = remaining[prog["index"]]["kind"] == "budget"
                        limit = job_timeout + (float(cfg["budget_seconds"]) if budget_job else 0.0)
                    except (OSError, ValueError, KeyError, IndexError):
                        started = None
                    if rss > mem_limit:
                        why = {"failure": "out of memory", "rss_at_kill": rss, "mem_limit": mem_limit}
                    elif started is not None and time.time() - started > limit:
                        why = {"failure": f"> {limit:.0f} s", "timeout_s": limit}
                    if why:
                        proc.kill()
                        proc.wait()
                        break
            done = _read_done(d)
            pairs += done
            if len(done) < len(remaining):
                if why is None:
                    with open(os.path.join(d, "stderr")) as f:
                        why = {"failure": "error", "error": f.read()[-3000:], "returncode": proc.returncode}
                try:
                    with open(os.path.join(d, "progress.json")) as f:
                        why["wall_s"] = time.time() - json.load(f)["started"]
                except (OSError, ValueError, KeyError):
                    pass
                pairs.append(({"job": remaining[len(done)], **why}, None))
                print(f"    {remaining[len(done)]}: {why['failure']}", flush=True)
            remaining = remaining[len(done) + 1:]
    return pairs


def run_all(cfg: dict, jobs: list, isolate: str, job_timeout: float, mem_limit: float) -> list:
    """Group jobs into subprocesses (one per mode, one per job, or none) and run them."""
    if isolate == "none":
        with tempfile.TemporaryDirectory(prefix="kpgnb-memory-modes-") as d:
            run_jobs(cfg, jobs, d, warm_up=False)
            return _read_done(d)
    groups: dict = {}
    for i, job in enumerate(jobs):
        key = i if isolate == "run" else job["mode"]
        groups.setdefault(key, []).append(job)
    pairs = []
    for g in groups.values():
        what = ", ".join((j["kind"] if j["kind"] == "budget" else j["query"])
                         + ("" if j.get("p") is None else f" (p={j['p']})") for j in g)
        print(f"  {g[0]['mode']}: {what} ...", flush=True)
        got = bounded(cfg, g, job_timeout, mem_limit)
        for r, _ in got:
            if "failure" not in r:
                j = r["job"]
                print(f"    {j.get('query', 'budget')}{'' if j.get('p') is None else ' p=' + str(j['p'])}: "
                      + (f"largest within budget {r['largest_fitting']} ({r['stopped_by']})" if j["kind"] == "budget"
                         else f"load {r['load_s']:.1f} s, {r['batches']} batches, p50 {r['p50_ms']:.1f} ms")
                      + f", {r['wall_s']:.0f} s", flush=True)
        pairs += got
    return pairs


# -- checks --------------------------------------------------------------------------------------------------
def check(cfg: dict, d: dict, res: dict, out: dict | None, refs: dict) -> dict:
    """Compare a job's output with the reference on the graph as of its last batch."""
    job = res["job"]
    if out is None:
        return {"ok": False, "why": "no output"}
    if job["kind"] == "budget":
        query, nb, ns = "spsp", res["batches_done"], res["final_queries"]
    else:
        query, nb, ns = job["query"], res["batches"], res.get("sources") or cfg["sources"]
    key = (query, nb, ns)
    if key not in refs:
        idx = present_after(d["stream"], len(d["src"]), nb)
        refs[key] = reference(query, d["n"], d["src"][idx], d["dst"][idx], d["w"][idx], d["sources"][:ns],
                              int(cfg["k"]), int(cfg["iterations"]))
    return compare(query, refs[key], out, float(cfg["rtol"]))


# -- main ------------------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", choices=("rmat", "ba"), default="rmat")
    p.add_argument("--nodes", type=int, default=32768, help="nodes (R-MAT: rounded up to a power of two)")
    p.add_argument("--edges", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=100, help="update batches after the initial 90%%")
    p.add_argument("--batch-size", type=int, default=1, help="single-edge changes per batch")
    p.add_argument("--delete-fraction", type=float, default=0.0, help="fraction of changes that remove an edge")
    p.add_argument("--sources", type=int, default=10, help="SPSP and K-hop sources (queries)")
    p.add_argument("--k", type=int, default=5, help="K of K-hop")
    p.add_argument("--iterations", type=int, default=10, help="PageRank rounds")
    p.add_argument("--queries", default=",".join(QUERIES))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--drop-p", type=float, default=0.5, help="drop probability p of the drop modes")
    p.add_argument("--bloom-bits", type=int, default=0,
                   help="Bloom filter bits of drop-degree-bloom (0: the engine's default, sized at the first "
                        "epoch that drops entries); the budget runs take 1/32 of the budget")
    p.add_argument("--budget-mb", type=float, default=256.0, help="trace memory budget for the SPSP queries")
    p.add_argument("--budget-modes", default="full,jod,drop-degree-exact,drop-degree-bloom")
    p.add_argument("--budget-max", type=int, default=1280, help="most SPSP sources tried in the budget search")
    p.add_argument("--budget-batches", type=int, default=10, help="update batches timed at each budget size")
    p.add_argument("--budget-seconds", type=float, default=150.0, help="stop growing a budget run after this")
    p.add_argument("--sweep-p", default="0.1,0.9", help="extra p for the K-hop Degree/Random sweep ('' for none)")
    p.add_argument("--run-seconds", type=float, default=30.0,
                   help="stop a (query, mode)'s updates after this many seconds (at least 3 batches)")
    p.add_argument("--rtol", type=float, default=1e-9, help="PageRank's relative tolerance")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--isolate", choices=("mode", "run", "none"), default="mode",
                   help="a subprocess per mode (default), per (query, mode), or none (RSS then shared)")
    p.add_argument("--job-timeout", type=float, default=240.0,
                   help="seconds allowed to one (query, mode) run before it is killed (budget runs: this plus "
                        "--budget-seconds)")
    p.add_argument("--mem-limit-gb", type=float, default=4.0,
                   help="RSS at which a run is killed and reported as out of memory")
    p.add_argument("--tag", default="", help="write bench/results/memory_modes-TAG.json instead (another size)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: jobs, in a subprocess
    if argv is None and "--child" in sys.argv:
        return _child(sys.argv[sys.argv.index("--child") + 1])
    a = parse_args(p, argv, QUICK, positive=("batches", "batch_size", "sources", "iterations"),
                   floats={"delete_fraction": (0.0, 1.0), "drop_p": (0.0, 1.0), "rtol": (0.0, None),
                           "budget_mb": ((">", 0.0), float(1 << 22)),  # (4 TiB: a Bloom filter of 1/32 of it
                           # is the largest kp.Drop takes, 2**40 bits) "budget_seconds": (0.0, None),
                           "run_seconds": (0.0, None), "job_timeout": ((">", 0.0), None),
                           "mem_limit_gb": ((">", 0.0), None)})
    cfg = {k: getattr(a, k) for k in ("graph", "nodes", "edges", "batches", "batch_size", "delete_fraction",
                                     "sources", "k", "iterations", "drop_p", "bloom_bits", "budget_mb",
                                     "budget_max", "budget_batches", "budget_seconds", "run_seconds", "rtol",
                                     "workers", "seed")}
    queries = [q for q in a.queries.split(",") if q]
    modes = [m for m in a.modes.split(",") if m]
    budget_modes = [m for m in a.budget_modes.split(",") if m]
    for m in modes + budget_modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}; choose from {list(MODES)}")
    for q in queries:
        if q not in QUERIES:
            hint = " (kpgnb.graphs' sssp is the benchmark's 'spsp')" if q == "sssp" else ""
            p.error(f"unknown query {q!r}{hint}; choose from {list(QUERIES)}")
    try:
        sweep = [float(x) for x in a.sweep_p.split(",") if x.strip()]
    except ValueError:
        p.error(f"--sweep-p: expected comma-separated probabilities, got {a.sweep_p!r}")
    _check_drop_knobs(p, cfg, sweep)
    try:
        check_graph_size(cfg)
    except GraphSizeError as ex:
        p.error(str(ex))
    t_start = time.perf_counter()
    try:
        d = data(cfg)
    except GraphSizeError as ex:  # (R-MAT's draws did not reach that many distinct edges)
        p.error(str(ex))
    jobs = []
    for m in modes:
        jobs += [{"kind": "query", "query": q, "mode": m} for q in queries]
        if m in budget_modes:
            jobs.append({"kind": "budget", "mode": m})
    jobs += [{"kind": "budget", "mode": m} for m in budget_modes if m not in modes]
    if "khop" in queries:
        for pp in sweep:
            if pp != a.drop_p:
                jobs += [{"kind": "query", "query": "khop", "mode": m, "p": pp}
                         for m in ("drop-degree-exact", "drop-random-exact")]
    print(f"graph: {a.graph}, {d['n']:,} nodes ({len(np.unique(np.r_[d['src'], d['dst']])):,} with edges), "
          f"{len(d['src']):,} edges; {len(jobs)} jobs", flush=True)
    pairs = run_all(cfg, jobs, a.isolate, a.job_timeout, a.mem_limit_gb * 2**30)
    refs: dict = {}
    runs, budget, sweep_runs = [], [], []
    for res, out in pairs:
        if "failure" not in res:
            chk = check(cfg, d, res, out, refs)
            res["check"] = chk
            if not chk["ok"]:
                res["failure"] = "wrong answer"
        job = res["job"]
        (budget if job["kind"] == "budget" else sweep_runs if job.get("p") is not None else runs).append(res)
    print("SCRATCH ...", flush=True)
    sc = {}
    for q in queries:
        nb = max([r.get("batches", 0) for r in runs if r["job"].get("query") == q and "failure" not in r] or [3])
        sc[q] = scratch(cfg, d, q, min(max(nb, 3), int(cfg["batches"])))
    sc_budget = {}
    for c in sorted({s["queries"] for b in budget for s in b.get("steps", [])}):
        sc_budget[c] = scratch(cfg, d, "spsp", min(int(cfg["budget_batches"]) or 1, 5) or 1, nsources=c)
    import kpgnb
    import scipy
    versions = {"kpgnb": kpgnb.__version__, "numpy": np.__version__, "scipy": scipy.__version__}
    payload = {"parameters": {**cfg, "queries": queries, "modes": modes, "budget_modes": budget_modes,
                              "sweep_p": sweep, "isolate": a.isolate},
               "graph": {"kind": a.graph, "nodes": d["n"], "edges": int(len(d["src"])),
                         "nodes_with_edges": int(len(np.unique(np.r_[d["src"], d["dst"]]))),
                         "loaded": d["stream"]["loaded"], "max_out_degree": int(np.bincount(d["src"]).max()),
                         "load_average": os.getloadavg()},
               "versions": versions, "runs": runs, "budget": budget, "sweep": sweep_runs,
               "scratch": sc, "scratch_budget": {str(k): v for k, v in sc_budget.items()}}
    payload["summary"] = summarize(payload)
    payload["total_s"] = time.perf_counter() - t_start
    report(payload)
    print("wrote", write_result(f"memory_modes-{a.tag}" if a.tag else "memory_modes", payload, a.quick))
    return payload


def _check_drop_knobs(p, cfg: dict, sweep: list):
    """The drop modes' knobs (``--drop-p``, each ``--sweep-p``, ``--bloom-bits``, and the budget runs' Bloom
    filter sized from ``--budget-mb``) checked as ``kp.Drop`` checks them, before anything runs: an argparse
    error, not a failed drop run per job reported after the whole benchmark."""
    import kpgnb as kp
    flags = [("--drop-p", cfg["drop_p"])] + [("--sweep-p", x) for x in sweep]
    for flag, x in flags:
        try:
            kp.Drop(p=x, seed=int(cfg["seed"]))
        except kp.KpgnbError as ex:
            p.error(f"{flag} {x}: {ex}")
    for flag, bits in (("--bloom-bits", int(cfg["bloom_bits"]) or None), ("--budget-mb", budget_bloom_bits(cfg))):
        try:
            kp.Drop(p=float(cfg["drop_p"]), tracker="bloom", bloom_bits=bits, seed=int(cfg["seed"]))
        except kp.KpgnbError as ex:
            why = "" if flag == "--bloom-bits" else f" (the budget runs' Bloom filter of {bits:,} bits, 1/32 of it)"
            p.error(f"{flag} {cfg[flag[2:].replace('-', '_')]}{why}: {ex}")


# -- summary -----------------------------------------------------------------------------------------------------
def _ok(r):
    return r is not None and "failure" not in r


def summarize(P: dict) -> dict:
    runs = {(r["job"]["query"], r["job"]["mode"]): r for r in P["runs"]}
    sc = P["scratch"]
    rows = []
    for (q, m), r in runs.items():
        row = {"query": q, "mode": m}
        if not _ok(r):
            row["failure"] = r.get("failure")
            rows.append(row)
            continue
        f = runs.get((q, "full"))
        row.update({"load_s": r["load_s"], "trace_mb": r["trace_bytes_peak"]["total"] / 2**20,
                    "ife_mb": r["trace_bytes_peak"]["ife"] / 2**20,
                    "peak_rss_mb": r["peak_rss"] / 2**20,
                    "rss_above_base_mb": (r["peak_rss"] - r["rss_baseline"]) / 2**20,
                    "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "mean_ms": r["mean_ms"], "batches": r["batches"],
                    "state_diffs": r["ife"].get("state_differences"), "join_diffs": r["ife"].get("join_differences"),
                    "dropped": r["ife"].get("dropped"), "dropped_total": r["ife"].get("dropped_total"),
                    "recomputed": r["ife"].get("recomputed")})
        if _ok(f):
            row["mem_ratio_vs_full"] = f["trace_bytes_peak"]["total"] / r["trace_bytes_peak"]["total"]
            row["ife_ratio_vs_full"] = f["trace_bytes_peak"]["ife"] / max(r["trace_bytes_peak"]["ife"], 1)
            row["time_ratio_vs_full"] = r["p50_ms"] / f["p50_ms"]
        s = sc.get(q)
        if s:
            row["scratch_ms"] = s["algo_p50_ms"]
            row["speedup_vs_scratch"] = s["algo_p50_ms"] / r["p50_ms"]
        rows.append(row)
    goals = {}
    # JOD: >= 2x less trace memory than full at <= 2x its update time (a failed JOD or full run: not met)
    jod = []
    for q in P["parameters"]["queries"]:
        bad = [(m, runs[(q, m)]) for m in ("jod", "full") if (q, m) in runs and not _ok(runs[(q, m)])]
        if (q, "jod") in runs and bad:
            jod.append({"query": q, "failure": f"{bad[0][0]}: {bad[0][1].get('failure')}", "met": False})
            continue
        row = next((x for x in rows if x["query"] == q and x["mode"] == "jod" and "mem_ratio_vs_full" in x), None)
        if row:
            jod.append({"query": q, "mem_ratio": row["mem_ratio_vs_full"], "ife_ratio": row["ife_ratio_vs_full"],
                        "time_ratio": row["time_ratio_vs_full"],
                        "met": row["mem_ratio_vs_full"] >= 2 and row["time_ratio_vs_full"] <= 2})
    goals["jod"] = {"per_query": jod, "met_for": [x["query"] for x in jod if x["met"]],
                    "status": _status([x["met"] for x in jod])}
    # budget: >= 5x more SPSP queries than full, >= 100x faster per update than SCRATCH at that size
    budget = float(P["parameters"]["budget_mb"]) * 2**20
    bud = {b["mode"]: b for b in P["budget"] if _ok(b)}
    scb = P["scratch_budget"]
    brows = []
    for m, b in bud.items():
        c = b["largest_fitting"]
        st = next((s for s in b["steps"] if s["queries"] == c), None)
        sx = scb.get(str(c))
        # the paper's accounting: only what the IFE keeps (differences and dropped-pair records), not the
        # edges' arrangements or the output; the growth stopped on the total, so this is often a lower bound
        fit_ife = [s["queries"] for s in b["steps"] if s["ife_bytes"] <= budget]
        brows.append({"mode": m, "largest_fitting": c, "capped": b["capped"],
                      "trace_mb": st["trace_bytes"] / 2**20 if st else None,
                      "ife_mb": st["ife_bytes"] / 2**20 if st else None,
                      "p50_ms": st["p50_ms"] if st else None,
                      "scratch_ms": sx["algo_p50_ms"] if sx else None,
                      "speedup_vs_scratch": sx["algo_p50_ms"] / st["p50_ms"] if st and sx and st["p50_ms"] else None,
                      "largest_fitting_ife": max(fit_ife) if fit_ife else 0,
                      "ife_capped": bool(b["steps"]) and b["steps"][-1]["ife_bytes"] <= budget})
    full = next((x for x in brows if x["mode"] == "full"), None)
    for x in brows:
        x["queries_vs_full"] = (x["largest_fitting"] / full["largest_fitting"]
                                if full and full["largest_fitting"] else None)
        x["queries_vs_full_ife"] = (x["largest_fitting_ife"] / full["largest_fitting_ife"]
                                    if full and full["largest_fitting_ife"] else None)
    drops = [x for x in brows if x["mode"].startswith("drop")]
    best = max(drops, key=lambda x: (x["largest_fitting"], -(x["p50_ms"] or 0)), default=None)
    more = bool(best and best["queries_vs_full"] and best["queries_vs_full"] >= 5)
    faster = bool(best and best["speedup_vs_scratch"] and best["speedup_vs_scratch"] >= 100)
    goals["budget"] = {"per_mode": brows, "full_fits": full["largest_fitting"] if full else None,
                       "best_drop": best["mode"] if best else None,
                       "queries_ratio": best["queries_vs_full"] if best else None,
                       "speedup_vs_scratch": best["speedup_vs_scratch"] if best else None,
                       "five_x_queries": more, "hundred_x_scratch": faster, "status": _status([more, faster])}
    # Degree vs Random at the same p (a Random run that failed while Degree finished counts for Degree),
    # and along the K-hop sweep at matched numbers of dropped differences
    deg = []
    for q in P["parameters"]["queries"]:
        a, b = runs.get((q, "drop-degree-exact")), runs.get((q, "drop-random-exact"))
        if a is None or b is None:
            continue
        if not _ok(a):   # a failed Degree run counts against the goal
            deg.append({"query": q, "p": P["parameters"]["drop_p"], "degree_failure": a.get("failure")})
            continue
        x = {"query": q, "p": P["parameters"]["drop_p"], "degree_ms": a["p50_ms"],
             "degree_dropped": a["ife"].get("dropped_total"), "degree_recomputed": a["ife"].get("recomputed")}
        if _ok(b):
            x.update({"random_ms": b["p50_ms"], "ratio": b["p50_ms"] / a["p50_ms"],
                      "random_dropped": b["ife"].get("dropped_total"), "random_recomputed": b["ife"].get("recomputed")})
        else:
            x["random_failure"] = b.get("failure")
        deg.append(x)
    pts = sweep_points(P)
    mt = matched(pts)
    oom = [False if "degree_failure" in x else x["ratio"] >= 100 if "ratio" in x
           else x["random_failure"] != "wrong answer" for x in deg]
    goals["degree_vs_random"] = {"same_p": deg, "matched_drops": mt,
                                 "status": _status(oom + [x["ratio"] >= 100 for x in mt])}
    return {"rows": rows, "goals": goals, "sweep_points": pts}


def _status(flags: list) -> str:
    if not flags:
        return "not measured"
    return "met" if all(flags) else "partly met" if any(flags) else "missed"


def sweep_points(P: dict) -> list:
    """K-hop under DET-DROP: (policy, p, dropped differences, recomputed, p50 and mean ms per update)."""
    pts = []
    for r in P["runs"] + P["sweep"]:
        job = r["job"]
        if job.get("query") != "khop" or job["mode"] not in ("drop-degree-exact", "drop-random-exact") or not _ok(r):
            continue
        pts.append({"policy": job["mode"].split("-")[1], "p": r["p"], "dropped": r["ife"].get("dropped_total"),
                    "dropped_kept_track": r["ife"].get("dropped"), "recomputed": r["ife"].get("recomputed"),
                    "state_differences": r["ife"].get("state_differences"), "p50_ms": r["p50_ms"],
                    "mean_ms": r["mean_ms"]})
    return sorted(pts, key=lambda x: (x["policy"], x["p"]))


def matched(pts: list) -> list:
    """Random's time per update interpolated (log-log) at each Degree point's number of dropped
    differences, where Random's points span it."""
    rnd = sorted((x["dropped"], x["mean_ms"]) for x in pts if x["policy"] == "random" and x["dropped"])
    out = []
    for x in pts:
        if x["policy"] != "degree" or not x["dropped"] or len(rnd) < 2:
            continue
        xs = np.log([r[0] for r in rnd])
        if not xs[0] <= np.log(x["dropped"]) <= xs[-1]:
            continue
        y = float(np.exp(np.interp(np.log(x["dropped"]), xs, np.log([r[1] for r in rnd]))))
        out.append({"p": x["p"], "dropped": x["dropped"], "degree_mean_ms": x["mean_ms"], "random_mean_ms": y,
                    "ratio": y / x["mean_ms"]})
    return out


def report(P: dict):
    S = P["summary"]
    print(table([r if "failure" not in r else {"query": r["query"], "mode": r["mode"], "load_s": r["failure"]}
                 for r in S["rows"]],
                ["query", "mode", "load_s", "trace_mb", "ife_mb", "rss_above_base_mb", "p50_ms", "p99_ms",
                 "dropped_total", "recomputed", "mem_ratio_vs_full", "time_ratio_vs_full", "speedup_vs_scratch"]))
    g = S["goals"]
    print()
    yes = lambda v: "yes" if v else ""  # noqa: E731
    print(table([{**x, "capped": yes(x["capped"]), "ife_capped": yes(x["ife_capped"])}
                 for x in g["budget"]["per_mode"]], ["mode", "largest_fitting", "capped", "trace_mb", "ife_mb", "p50_ms",
                                          "scratch_ms", "speedup_vs_scratch", "queries_vs_full",
                                          "largest_fitting_ife", "ife_capped"]))
    print()
    for q in g["jod"]["per_query"]:
        if "failure" in q:
            print(f"JOD {q['query']}: {q['failure']}: missed")
            continue
        print(f"JOD {q['query']}: {q['mem_ratio']:.2f}x less trace memory ({q['ife_ratio']:.1f}x in the IFE's own "
              f"structures) at {q['time_ratio']:.2f}x the update time: {'met' if q['met'] else 'missed'}")
    b = g["budget"]
    print(f"JOD goal: {g['jod']['status']}")
    print(f"budget: full fits {b['full_fits']}, best drop mode {b['best_drop']}: {b['queries_ratio']}x as many "
          f"queries at {_fmt_x(b['speedup_vs_scratch'])} SCRATCH's speed per update: {b['status']}")
    for x in g["degree_vs_random"]["same_p"]:
        print(f"Degree vs Random, {x['query']} at p={x['p']}: " + (
              f"Degree {x['degree_failure']}" if "degree_failure" in x else
              f"Random {x['ratio']:.1f}x slower per update" if "ratio" in x else
              f"Random {x['random_failure']}, Degree {x['degree_ms']:.1f} ms per update"))
    for x in g["degree_vs_random"]["matched_drops"]:
        print(f"  K-hop at {x['dropped']:,} dropped (Degree p={x['p']}): Random {x['ratio']:.1f}x slower")
    print(f"Degree orders of magnitude faster than Random: {g['degree_vs_random']['status']}")


def _fmt_x(v):
    return "-" if v is None else f"{v:.2f}x"


if __name__ == "__main__":
    main()
