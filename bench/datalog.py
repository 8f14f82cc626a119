"""Datalog on kpgnb against the peers a user would pick instead: batch evaluation of recursive programs,
goal-directed (magic sets) queries, and streaming updates with retractions (issue 13's benchmarks).

    python -m bench.datalog [--workers 1,2] [--programs tc,sg,reach,cc,sssp] [--graphs tree,grid,gnp,rmat1,...]
                            [--tree-height 11] [--grid-side 150] [--gnp-n 10000] [--gnp-p 0.001]
                            [--rmat-scale 16] [--rmat-edges 500000] [--max-weight 4] [--max-rows 30000000]
                            [--peers duckdb,pyspark,clingo] [--peer-timeout 300] [--asks 200] [--ask-seconds 60]
                            [--updates 1000] [--latency-workers 1,2] [--seed 0] [--tag TAG] [--quick]

Graphs (NumPy, seeded, no per-row Python):
    tree-H    the complete binary tree of height H (2^(H+1) - 1 nodes), edges parent -> child
    grid-K    the (K+1) x (K+1) grid, edges right and down (BigDatalog's Grid150 is K = 150)
    gnp-N     directed G(N, p): each ordered pair (u, v), u != v, an edge with probability p
    rmatC-S   RMAT with 2^S nodes and about --rmat-edges distinct edges, Nexus's parameter set C (1-4):
              (a, b, c, d) = (0.45, 0.25, 0.15, 0.15), (0.25, 0.25, 0.25, 0.25), (0.50, 0.20, 0.10, 0.20),
              (0.35, 0.25, 0.15, 0.25) (Imran et al., "Fast Datalog evaluation for batch and stream graph
              processing", WWW 2022, Section 7.1); duplicate edges dropped; integer weights 1..--max-weight;
              the root is the node of largest out-degree

Programs (the Datalog text of issue 13): tc and sg on tree, grid and gnp; reach, cc (min label propagated
along the edges, every node of the RMAT graph starting with its own id) and sssp (recursive min over a
weighted edge relation ``wedge(src, dst, w)``) on the RMAT graphs. ``PROGRAMS`` holds the texts.

Batch: for each program and graph, kpgnb at each W of --workers: ``eng.input(...)`` of the base relations
(NumPy arrays), ``eng.datalog(TEXT, inputs=...)``, ``eng.wait`` on the answer's view: "total" is input load
to the answer being current; reading it out (``to_pandas``) is timed apart ("read"). Peers on the same data,
each in a subprocess killed after --peer-timeout seconds without progress (a time limit, an out-of-memory kill
or error are reported as such, never as a time):
    duckdb   recursive CTEs (tc, sg, reach: ``WITH RECURSIVE ... UNION``; cc and sssp with ``USING KEY``
             and a min per key, or "not expressible" where the installed DuckDB lacks USING KEY); time =
             loading the tables from Arrow + ``CREATE TABLE answer AS <query>``
    pyspark  semi-naive DataFrame iteration on local[2] (kpgnb.spark.session(); session start not
             counted), localCheckpoint each round; time = createDataFrame from Arrow + the loop
    clingo   the program in ASP syntax with the graph as facts (fact text built before the clock starts);
             time = parse + ground + solve; cc as a stratified min over the ancestors (quadratic: skipped
             when a strongly connected component of S nodes gives S^2 > --max-rows atoms), sssp "not
             expressible" (no recursive min in ASP without grounding every path length)
A (program, graph) whose reference answer has more than --max-rows rows is skipped for every system (tc on
grid-150 has 131.7 M rows, on G(10,000, 0.001) about 100 M: --max-rows 0 runs them anyway).

Interactive (K-Pg Table 2): ``g = prog.goal("tc(?, _)")`` of a program installed with ``materialize=False``
on tree, grid and gnp; for --asks random x (or until --ask-seconds have passed): ``g.ask(x)`` +
``eng.wait(g.view)`` (the latency), the answer for x checked, then ``g.retract(x)`` + wait.
Streaming: after loading an RMAT graph (config 1) and the program's answer, --updates single-edge changes,
alternately inserting a random edge and deleting an original one; latency = the change + advancing every
input's epoch + ``eng.wait`` of the program's view; the final answer checked. For reach, cc and sssp.

Every answer (kpgnb's and each peer's) is checked against a NumPy/SciPy reference (tc: reachability bitsets
over the strongly connected components; sg: NumPy semi-naive evaluation; reach/sssp: SciPy BFS/Dijkstra;
cc: vectorized min-label fixpoint) and a mismatch is reported as "wrong answer", never as a time (the
interactive and streaming tables show no p50/p99/max for such a run either). Binary relations are
compared by row count, rows per first column and an order-independent hash of the rows.
Results: bench/results/datalog.json (datalog-quick.json for --quick), and a table. ``--quick``: tree-8,
grid-20, G(2,000, 0.0005), RMAT 2^10 nodes / 5,000 edges, 20 asks, 100 changes, W=1 for the latencies,
no PySpark (``--peers`` to add it).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

from .common import parse_args, percentile, table, write_result
from .peers import norm_pairs, norm_reach

# -- the programs -----------------------------------------------------------------------------------------

PROGRAMS = {
    "tc": """
.decl edge(src: int, dst: int)
tc(x, y) :- edge(x, y).
tc(x, y) :- tc(x, z), edge(z, y).
""",
    "sg": """
.decl edge(src: int, dst: int)
sg(x, y) :- edge(p, x), edge(p, y), x != y.
sg(x, y) :- edge(a, x), sg(a, b), edge(b, y).
""",
    "reach": """
.decl edge(src: int, dst: int)
.decl root(node: int)
reach(y) :- root(y).
reach(y) :- reach(x), edge(x, y).
""",
    "cc": """
.decl edge(src: int, dst: int)
.decl node(node: int)
cc(x, min<l>) :- node(x), l = x.
cc(y, min<l>) :- cc(x, l), edge(x, y).
""",
    "sssp": """
.decl wedge(src: int, dst: int, w: int)
.decl root(node: int)
sssp(y, min<d>) :- root(y), d = 0.
sssp(y, min<d>) :- sssp(x, d1), wedge(x, y, w), d = d1 + w.
""",
}
# the base relations each program reads (an engine input of the same name each)
PROGRAM_INPUTS = {"tc": ("edge",), "sg": ("edge",), "reach": ("edge", "root"), "cc": ("edge", "node"),
                  "sssp": ("wedge", "root")}
INPUT_COLUMNS = {"edge": ["src", "dst"], "root": ["node"], "node": ["node"], "wedge": ["src", "dst", "w"]}
# every program joins its edges on the source: keyed by it, the input's own arrangement is that index
INPUT_KEYS = {"edge": ("src",), "wedge": ("src",)}
PAIR_PROGRAMS = ("tc", "sg")          # on tree, grid, gnp
RMAT_PROGRAMS = ("reach", "cc", "sssp")
ALL_PROGRAMS = PAIR_PROGRAMS + RMAT_PROGRAMS

# Nexus (Imran et al. 2022, Section 7.1): the four RMAT parameter sets (a, b, c, d)
RMAT_PARAMS = {1: (0.45, 0.25, 0.15, 0.15), 2: (0.25, 0.25, 0.25, 0.25), 3: (0.50, 0.20, 0.10, 0.20),
               4: (0.35, 0.25, 0.15, 0.25)}

# --quick: small graphs (answers of 3,600 to 110,000 rows; G(2000, 0.0005) has out-degree 1 on average, so
# no giant strongly connected component and a tc of 104,000 rows instead of 2.6 M at p = 0.001)
QUICK = {"tree_height": 8, "grid_side": 20, "gnp_n": 2000, "gnp_p": 0.0005, "rmat_scale": 10,
         "rmat_edges": 5_000, "peer_timeout": 20.0, "asks": 20, "ask_seconds": 5.0, "updates": 100,
         "latency_workers": "1", "max_rows": 300_000}
SLOW_PEERS = ("pyspark",)   # left out at --quick unless --peers names it
DEFAULT_PEERS = ("duckdb", "pyspark", "clingo")
PEER_MODULES = {"duckdb": "duckdb", "pyspark": "pyspark", "clingo": "clingo"}

# -- the graphs -------------------------------------------------------------------------------------------


def tree_graph(height: int):
    """The complete binary tree of ``height`` (levels 0..height): node i's children are 2i+1 and 2i+2."""
    n = 2 ** (height + 1) - 1
    child = np.arange(1, n, dtype=np.int64)
    return (child - 1) // 2, child, n


def grid_graph(side: int):
    """The (side+1) x (side+1) grid, node r * (side+1) + c, edges right and down."""
    s = side + 1
    ids = np.arange(s * s, dtype=np.int64).reshape(s, s)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    return src, dst, s * s


def gnp_graph(n: int, p: float, seed: int):
    """Directed G(n, p) without self-loops: the number of edges is drawn from Binomial(n(n-1), p), then that
    many distinct ordered pairs uniformly."""
    rng = np.random.default_rng(seed)
    total = n * (n - 1)
    m = int(rng.binomial(total, p))
    idx = rng.choice(total, size=m, replace=False).astype(np.int64)
    idx.sort()
    u = idx // (n - 1)
    r = idx % (n - 1)
    return u, r + (r >= u), n


def rmat_graph(scale: int, edges: int, params, seed: int):
    """RMAT (Chakrabarti et al.): each edge picks one quadrant per level with probabilities (a, b, c, d);
    duplicates are dropped (so a little fewer than ``edges``), self-loops kept. Nodes 0..2^scale-1."""
    rng = np.random.default_rng(seed)
    a, b, c, d = params
    src = np.zeros(edges, dtype=np.int64)
    dst = np.zeros(edges, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(edges)
        src = (src << 1) | (r >= a + b)                       # quadrant c or d: lower half
        dst = (dst << 1) | (((r >= a) & (r < a + b)) | (r >= a + b + c))   # b or d: right half
    code = _uniq(src * (1 << scale) + dst)
    return code >> scale, code & ((1 << scale) - 1), 1 << scale


def graph_specs(a) -> list:
    """The graphs of a run, from the parsed options."""
    out = []
    for g in a.graphs:
        if g == "tree":
            out.append({"name": f"tree-{a.tree_height}", "kind": "tree", "height": a.tree_height})
        elif g == "grid":
            out.append({"name": f"grid-{a.grid_side}", "kind": "grid", "side": a.grid_side})
        elif g == "gnp":
            out.append({"name": f"gnp-{a.gnp_n}", "kind": "gnp", "n": a.gnp_n, "p": a.gnp_p, "seed": a.seed})
        elif g.startswith("rmat"):
            c = int(g[4:])
            out.append({"name": f"rmat{c}-{a.rmat_scale}", "kind": "rmat", "config": c, "scale": a.rmat_scale,
                        "edges": a.rmat_edges, "seed": a.seed + c, "max_weight": a.max_weight})
    return out


def make_graph(spec: dict) -> dict:
    """The graph of ``spec`` as arrays: src, dst, n; RMAT graphs add w (weights), root and nodes."""
    kind = spec["kind"]
    if kind == "tree":
        src, dst, n = tree_graph(spec["height"])
    elif kind == "grid":
        src, dst, n = grid_graph(spec["side"])
    elif kind == "gnp":
        src, dst, n = gnp_graph(spec["n"], spec["p"], spec["seed"])
    elif kind == "rmat":
        src, dst, n = rmat_graph(spec["scale"], spec["edges"], RMAT_PARAMS[spec["config"]], spec["seed"])
    else:
        raise ValueError(f"unknown graph kind {kind!r}")
    g = {"name": spec["name"], "src": src, "dst": dst, "n": n}
    if kind == "rmat":
        rng = np.random.default_rng(spec["seed"] + 1000)
        g["w"] = rng.integers(1, spec.get("max_weight", 1) + 1, len(src)).astype(np.int64)
        g["root"] = np.array([int(np.argmax(np.bincount(src, minlength=n)))], dtype=np.int64)
        g["nodes"] = np.arange(n, dtype=np.int64)
    return g


def base_relations(g: dict, program: str) -> dict:
    """{relation: {column: array}} for the inputs ``program`` reads."""
    rel = {"edge": {"src": g["src"], "dst": g["dst"]}}
    if "w" in g:
        rel["wedge"] = {"src": g["src"], "dst": g["dst"], "w": g["w"]}
        rel["root"] = {"node": g["root"]}
        rel["node"] = {"node": g["nodes"]}
    return {r: rel[r] for r in PROGRAM_INPUTS[program]}


def programs_for(spec: dict, programs) -> list:
    ok = RMAT_PROGRAMS if spec["kind"] == "rmat" else PAIR_PROGRAMS
    return [p for p in programs if p in ok]


# -- normal forms and the answer check --------------------------------------------------------------------

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64."""
    z = z.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def pair_hash(x, y) -> int:
    """Order-independent hash of the rows (x, y): the wrapping sum of mix(mix(x) + y)."""
    x = np.asarray(x, dtype=np.int64).view(np.uint64)
    y = np.asarray(y, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return int(np.sum(_mix(_mix(x) + y), dtype=np.uint64))


def norm_rel2(x, y, n: int) -> dict:
    """A binary relation's normal form: row count, rows per x (a length-n count), hash of the rows. Small
    enough to send between processes at any size; duplicates show in the row count."""
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if len(x) and (x.min() < 0 or x.max() >= n):
        return {"rows": len(x), "per_x": None, "hash": pair_hash(x, y), "bad_x": True}
    return {"rows": len(x), "per_x": np.bincount(x, minlength=n).astype(np.int64), "hash": pair_hash(x, y)}


# a unary relation: its values sorted, duplicates kept (a node listed twice is wrong); a relation
# node -> value (cc, sssp): sorted by node, duplicates kept. The same normal forms as bench.graphs.
norm_set, norm_map = norm_reach, norm_pairs


def normalize(program: str, cols: list, n: int):
    """The normal form of ``program``'s answer from its columns (in order)."""
    if program in PAIR_PROGRAMS:
        return norm_rel2(cols[0], cols[1], n)
    if program == "reach":
        return norm_set(cols[0])
    return norm_map(cols[0], cols[1])


def check(program: str, got, want) -> str | None:
    """None when ``got`` equals ``want`` (both normal forms of ``program``'s answer), else what differs."""
    if got is None:
        return "no answer"
    if want is None:
        return "no reference"
    if program in PAIR_PROGRAMS:
        if got.get("bad_x"):
            return f"{got['rows']:,} rows, some with a first column outside the graph's nodes"
        msg = []
        if got["rows"] != want["rows"]:
            msg.append(f"{got['rows']:,} rows, want {want['rows']:,}")
        gx, wx = got["per_x"], want["per_x"]
        if len(gx) != len(wx) or not np.array_equal(gx, wx):
            bad = np.flatnonzero(gx != wx) if len(gx) == len(wx) else np.arange(min(len(gx), len(wx)))
            if len(bad):
                i = int(bad[0])
                msg.append(f"{len(bad):,} x with a different number of rows (e.g. x={i}: {int(gx[i]):,}, "
                           f"want {int(wx[i]):,})")
        if got["hash"] != want["hash"]:
            msg.append("the rows' hash differs")
        return "; ".join(msg) or None
    if program == "reach":
        got, want = np.asarray(got), np.asarray(want)
        if len(got) == len(want) and np.array_equal(got, want):
            return None
        missing, extra = np.setdiff1d(want, got), np.setdiff1d(got, want)
        dup = len(got) - len(_uniq(got))
        return (f"{len(got):,} nodes, want {len(want):,}: {len(missing):,} missing (e.g. {missing[:3].tolist()}), "
                f"{len(extra):,} extra (e.g. {extra[:3].tolist()}), {dup:,} repeated")
    (gn, gv), (wn, wv) = got, want
    if len(gn) == len(wn) and np.array_equal(gn, wn) and np.array_equal(gv, wv):
        return None
    if len(gn) != len(wn) or not np.array_equal(gn, wn):
        missing, extra = np.setdiff1d(wn, gn), np.setdiff1d(gn, wn)
        dup = len(gn) - len(_uniq(gn))
        return (f"{len(gn):,} nodes, want {len(wn):,}: {len(missing):,} missing (e.g. {missing[:3].tolist()}), "
                f"{len(extra):,} extra (e.g. {extra[:3].tolist()}), {dup:,} repeated")
    bad = np.flatnonzero(gv != wv)
    i = bad[0]
    return f"{len(bad):,} of {len(wn):,} values differ (e.g. node {int(wn[i])}: {int(gv[i])}, want {int(wv[i])})"


# -- reference answers (NumPy / SciPy) --------------------------------------------------------------------


def _uniq(a) -> np.ndarray:
    """Sorted distinct values (a sort: NumPy 2's hash-based ``np.unique`` was 10x slower on int64 here)."""
    a = np.sort(np.asarray(a))
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


def _csr(src, dst, n):
    import scipy.sparse as sp
    return sp.csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))


def _topological_levels(csrc, cdst, k):
    """Kahn's algorithm by levels on a DAG with k nodes: the nodes in topological order (NumPy per level)."""
    indeg = np.bincount(cdst, minlength=k)
    order = np.argsort(csrc, kind="stable")
    s, d = csrc[order], cdst[order]
    start = np.searchsorted(s, np.arange(k + 1))
    out = []
    frontier = np.flatnonzero(indeg == 0)
    while len(frontier):
        out.append(frontier)
        cnt = start[frontier + 1] - start[frontier]
        idx = np.repeat(start[frontier], cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        targets = d[idx]
        np.subtract.at(indeg, targets, 1)
        t = _uniq(targets)
        frontier = t[indeg[t] == 0]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class TCReference:
    """Transitive closure by reachability bitsets over the strongly connected components: component c's
    bitset is every node reachable from c by a path of length >= 1. ``row(x)`` gives tc's y for one x."""

    def __init__(self, src, dst, n):
        from scipy.sparse.csgraph import connected_components
        self.n = n
        k, lab = connected_components(_csr(src, dst, n), directed=True, connection="strong")
        lab = lab.astype(np.int64)
        self.label = lab
        words = (n + 63) // 64
        cs, cd = lab[src], lab[dst]
        inner = cs == cd                                   # an edge inside a component: a cycle through it
        cyclic = np.zeros(k, dtype=bool)
        cyclic[cs[inner]] = True
        code = _uniq(cs[~inner] * k + cd[~inner])
        csrc, cdst = code // k, code % k
        order = _topological_levels(csrc, cdst, k)
        member = np.zeros((k, words), dtype=np.uint64)
        nodes = np.arange(n, dtype=np.int64)
        np.bitwise_or.at(member, (lab, nodes >> 6), np.left_shift(np.uint64(1), (nodes & 63).astype(np.uint64)))
        strict = np.zeros((k, words), dtype=np.uint64)
        o = np.argsort(csrc, kind="stable")
        s_sorted, d_sorted = csrc[o], cdst[o]
        start = np.searchsorted(s_sorted, np.arange(k + 1))
        for c in order[::-1].tolist():                     # successors first
            kids = d_sorted[start[c]:start[c + 1]]
            if len(kids):
                acc = np.bitwise_or.reduce(strict[kids] | member[kids], axis=0)
            else:
                acc = np.zeros(words, dtype=np.uint64)
            if cyclic[c]:                                  # x reaches itself through a cycle
                acc = acc | member[c]
            strict[c] = acc
        self.bits = strict
        counts = _popcount_rows(strict)
        self.per_x = counts[lab]
        self.rows = int(self.per_x.sum())

    def row(self, x: int) -> np.ndarray:
        b = self.bits[self.label[x]].view(np.uint8)
        return np.flatnonzero(np.unpackbits(b, bitorder="little")[:self.n]).astype(np.int64)

    def normal_form(self, chunk: int = 1 << 22) -> dict:
        """norm_rel2 of the whole relation, enumerating the rows a block of x at a time."""
        h = np.uint64(0)
        xs = np.arange(self.n, dtype=np.int64)
        step = max(1, chunk // max(1, self.n))
        for i in range(0, self.n, step):
            block = self.bits[self.label[xs[i:i + step]]].view(np.uint8)
            m = np.unpackbits(block, axis=1, bitorder="little")[:, :self.n]
            r, y = np.nonzero(m)
            with np.errstate(over="ignore"):
                h = h + np.uint64(pair_hash(r + i, y))
        return {"rows": self.rows, "per_x": self.per_x.astype(np.int64), "hash": int(h)}


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _popcount_rows(m: np.ndarray) -> np.ndarray:
    out = np.zeros(len(m), dtype=np.int64)
    for i in range(0, len(m), 4096):
        out[i:i + 4096] = _POP8[m[i:i + 4096].view(np.uint8)].sum(axis=1)
    return out


def sg_reference(src, dst, n, max_rows: int = 0):
    """Same generation by semi-naive evaluation in NumPy (pairs coded x * n + y; a bitmap of the pairs
    found). Returns the normal form, or None (with ``max_rows`` > 0) once more than ``max_rows`` rows are
    found or one round would derive more than 2 x ``max_rows`` candidate rows (G(10,000, 0.001)'s second
    round: about 100 M)."""
    order = np.argsort(src, kind="stable")
    s, d = src[order], dst[order]
    start = np.searchsorted(s, np.arange(n + 1))
    deg = start[1:] - start[:-1]

    def children(keys, node):
        """Each (key, child) for child an out-neighbour of node."""
        cnt = deg[node]
        idx = np.repeat(start[node], cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        return np.repeat(keys, cnt), d[idx]

    seen = np.zeros((n * n + 7) // 8, dtype=np.uint8)
    # base: edge(p, x), edge(p, y), x != y
    px, x = s, d
    pairs_p, y = children(np.arange(len(px)), px)
    xx = x[pairs_p]
    keep = xx != y
    cand = _uniq(xx[keep] * n + y[keep])
    total, per_x, h = 0, np.zeros(n, dtype=np.int64), np.uint64(0)
    while len(cand):
        new = cand[((seen[cand >> 3] >> (cand & 7).astype(np.uint8)) & 1) == 0]
        if not len(new):
            break
        np.bitwise_or.at(seen, new >> 3, np.left_shift(np.uint8(1), (new & 7).astype(np.uint8)))
        a, b = new // n, new % n
        total += len(new)
        if max_rows and total > max_rows:
            return None
        per_x += np.bincount(a, minlength=n)
        with np.errstate(over="ignore"):
            h = h + np.uint64(pair_hash(a, b))
        # sg(x, y) :- edge(a, x), sg(a, b), edge(b, y)
        if max_rows and int(np.sum(deg[a] * deg[b])) > 2 * max_rows:
            return None
        i, xx = children(np.arange(len(a)), a)          # (index into a, x)
        j, yy = children(np.arange(len(i)), b[i])        # (index into i / xx, y)
        cand = _uniq(xx[j] * n + yy)
    return {"rows": total, "per_x": per_x, "hash": int(h)}


def reach_reference(src, dst, n, roots) -> np.ndarray:
    from scipy.sparse.csgraph import breadth_first_order
    g = _csr(src, dst, n)
    seen = np.zeros(n, dtype=bool)
    for r in np.asarray(roots).tolist():
        seen[breadth_first_order(g, r, directed=True, return_predecessors=False)] = True
    return np.flatnonzero(seen).astype(np.int64)


def cc_reference(src, dst, nodes) -> tuple:
    """cc(x, min<l>): every node's smallest label among itself and the nodes that reach it (vectorized
    fixpoint: each round lowers every edge's target to its source's label)."""
    lab = np.asarray(nodes, dtype=np.int64).copy()
    while True:
        new = lab.copy()
        np.minimum.at(new, dst, lab[src])
        if np.array_equal(new, lab):
            return norm_map(np.arange(len(lab)), lab)
        lab = new


def sssp_reference(src, dst, w, n, roots) -> tuple:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra
    code = src * n + dst
    order = np.lexsort((w, code))       # parallel edges: keep the lightest (csr_matrix would add them)
    code, ws = code[order], w[order]
    first = np.r_[True, code[1:] != code[:-1]]
    code, ws = code[first], ws[first]
    g = csr_matrix((ws.astype(np.float64), (code // n, code % n)), shape=(n, n))
    dist = dijkstra(g, directed=True, indices=np.asarray(roots), min_only=True)
    ok = np.isfinite(dist)
    return norm_map(np.flatnonzero(ok), dist[ok].astype(np.int64))


def reference(program: str, g: dict, max_rows: int = 0, cache: dict | None = None):
    """The reference answer's normal form (None if ``max_rows`` > 0 and the answer is bigger), and its row
    count."""
    if program == "tc":
        ref = tc_ref(g, cache)
        if max_rows and ref.rows > max_rows:
            return None, ref.rows
        return ref.normal_form(), ref.rows
    if program == "sg":
        out = sg_reference(g["src"], g["dst"], g["n"], max_rows)
        return out, (out["rows"] if out else None)
    if program == "reach":
        out = reach_reference(g["src"], g["dst"], g["n"], g["root"])
    elif program == "cc":
        out = cc_reference(g["src"], g["dst"], g["nodes"])
    else:
        out = sssp_reference(g["src"], g["dst"], g["w"], g["n"], g["root"])
    return out, len(out if program == "reach" else out[0])


def tc_ref(g: dict, cache: dict | None = None) -> TCReference:
    if cache is not None and ("tc", g["name"]) in cache:
        return cache[("tc", g["name"])]
    ref = TCReference(g["src"], g["dst"], g["n"])
    if cache is not None:
        cache[("tc", g["name"])] = ref
    return ref


# -- streaming changes ------------------------------------------------------------------------------------


def make_changes(g: dict, count: int, seed: int) -> list:
    """``count`` single-edge changes (op, u, v, w, eid): alternately insert a random edge (uniform
    endpoints, a random weight; eid = m, m+1, ...) and delete an edge of the original graph not deleted
    before (eid = its index)."""
    rng = np.random.default_rng(seed + 7)
    n, m = g["n"], len(g["src"])
    wmax = int(g["w"].max()) if "w" in g and len(g["w"]) else 1
    gone = rng.choice(m, size=min(m, (count + 1) // 2), replace=False)
    out, new = [], m
    for i in range(count):
        if i % 2 == 0:
            u, v = (int(x) for x in rng.integers(0, n, 2))
            out.append(("+", u, v, int(rng.integers(1, wmax + 1)), new))
            new += 1
        else:
            e = int(gone[i // 2])
            w = int(g["w"][e]) if "w" in g else 1
            out.append(("-", int(g["src"][e]), int(g["dst"][e]), w, e))
    return out


def final_graph(g: dict, changes) -> dict:
    """``g`` after ``changes`` (a multiset: an inserted copy of an original edge survives its deletion)."""
    keep = np.ones(len(g["src"]), dtype=bool)
    add = [(u, v, w) for op, u, v, w, _ in changes if op == "+"]
    for op, u, v, w, eid in changes:
        if op == "-":
            keep[eid] = False
    a = np.asarray(add, dtype=np.int64).reshape(-1, 3)
    out = dict(g)
    out["src"] = np.concatenate([g["src"][keep], a[:, 0]])
    out["dst"] = np.concatenate([g["dst"][keep], a[:, 1]])
    if "w" in g:
        out["w"] = np.concatenate([g["w"][keep], a[:, 2]])
    return out


# -- kpgnb ------------------------------------------------------------------------------------------------

_GRAPHS: dict = {}


def _graph(spec: dict) -> dict:
    """make_graph, remembered per process (several jobs use one graph)."""
    key = repr(sorted(spec.items()))
    if key not in _GRAPHS:
        _GRAPHS.clear()
        _GRAPHS[key] = make_graph(spec)
    return _GRAPHS[key]


def _load(eng, g: dict, program: str) -> dict:
    """One engine input per base relation of ``program``, loaded from the arrays and advanced to 1."""
    sessions = {}
    for rel, cols in base_relations(g, program).items():
        s = eng.input(rel, INPUT_COLUMNS[rel], key=INPUT_KEYS.get(rel), rows=cols)
        s.advance_to(1)
        sessions[rel] = s
    return sessions


def _busy(eng, names, top: int = 6) -> dict:
    """Where the dataflows' time went (busiest operators), for the JSON."""
    from .graphs import operator_busy
    out = {}
    for name in names:
        try:
            b = operator_busy(eng, name, top=top)
        except Exception:  # noqa: BLE001 - the dataflow is gone: no figures
            continue
        b.pop("all", None)
        out[name] = b
    return out


def _rows(view) -> int:
    cols = view.columns()
    return len(next(iter(cols.values()))) if cols else 0


def kpgnb_batch(eng, g: dict, program: str) -> tuple:
    """Load ``g``, install ``program``, wait for its answer: (times, normal form)."""
    c0, t0 = time.process_time(), time.perf_counter()
    _load(eng, g, program)
    prog = eng.datalog(PROGRAMS[program], name=program)
    view = prog[program]
    eng.wait(view)
    t1 = time.perf_counter()
    cols = view.columns()
    ans = normalize(program, list(cols.values()), g["n"])
    t2 = time.perf_counter()
    return {"total_s": t1 - t0, "read_s": t2 - t1, "cpu_s": time.process_time() - c0,
            "columns": list(cols), "operators": _busy(eng, [program])}, ans


def kpgnb_asks(eng, g: dict, asks: int, seed: int, seconds: float = 0) -> tuple:
    """Goal-directed tc(?, _) (a program installed with materialize=False: only the inputs' indexes): for
    each of ``asks`` random x, ask + wait (the latency), read the answer, retract + wait; stops early once
    ``seconds`` (> 0) have passed. Returns (figures, answer: per ask (x, rows, hash of the rows), rows left
    after each retract)."""
    rng = np.random.default_rng(seed + 11)
    xs = rng.choice(g["n"], size=min(asks, g["n"]), replace=False).astype(np.int64)
    t0 = time.perf_counter()
    _load(eng, g, "tc")
    prog = eng.datalog(PROGRAMS["tc"], name="tc", materialize=False)
    goal = prog.goal("tc(?, _)")
    eng.wait(goal.view)
    setup_s = time.perf_counter() - t0
    ask_s, retract_s, got, left = [], [], [], 0
    start = time.perf_counter()
    for x in xs.tolist():
        if seconds and ask_s and time.perf_counter() - start > seconds:
            break
        t = time.perf_counter()
        goal.ask(x)
        eng.wait(goal.view)
        ask_s.append(time.perf_counter() - t)
        cols = list(goal.view.columns().values())
        got.append((x, len(cols[0]), pair_hash(cols[0], cols[1]), bool(np.all(cols[0] == x))))
        t = time.perf_counter()
        goal.retract(x)
        eng.wait(goal.view)
        retract_s.append(time.perf_counter() - t)
        left += _rows(goal.view)
    a = np.asarray(ask_s) * 1e3
    r = np.asarray(retract_s) * 1e3
    return ({"setup_s": setup_s, "asks": len(a), "p50_ms": percentile(a, 50), "p99_ms": percentile(a, 99),
             "max_ms": float(a.max()), "first_ms": float(a[0]), "retract_p50_ms": percentile(r, 50),
             "retract_p99_ms": percentile(r, 99), "mean_rows": float(np.mean([x[1] for x in got])),
             "ask_ms": a.tolist(), "retract_ms": r.tolist(), "operators": _busy(eng, [goal.name])},
            {"asks": got, "left_after_retract": left})


def kpgnb_stream(eng, g: dict, program: str, updates: int, seed: int) -> tuple:
    """Load, install, wait; then ``updates`` single-edge changes, one epoch each (change, advance every
    input, wait for the view). Returns (figures, final answer)."""
    t0 = time.perf_counter()
    sessions = _load(eng, g, program)
    prog = eng.datalog(PROGRAMS[program], name=program)
    view = prog[program]
    eng.wait(view)
    initial_s = time.perf_counter() - t0
    rel = "wedge" if program == "sssp" else "edge"
    target = sessions[rel]
    others = [s for r, s in sessions.items() if r != rel]
    before = _busy(eng, [program], top=10_000)
    lat, epoch = [], 1
    for op, u, v, w, _ in make_changes(g, updates, seed):
        row = {"src": np.array([u], dtype=np.int64), "dst": np.array([v], dtype=np.int64)}
        if rel == "wedge":
            row["w"] = np.array([w], dtype=np.int64)
        t = time.perf_counter()
        (target.insert if op == "+" else target.remove)(row)
        epoch += 1
        target.advance_to(epoch)
        for s in others:
            s.advance_to(epoch)
        eng.wait(view)
        lat.append(time.perf_counter() - t)
    cols = list(view.columns().values())
    ms = np.asarray(lat) * 1e3
    after = _busy(eng, [program], top=10_000)
    busy = after.get(program, {}).get("busy_s", 0) - before.get(program, {}).get("busy_s", 0)
    return ({"initial_s": initial_s, "updates": len(ms), "p50_ms": percentile(ms, 50),
             "p99_ms": percentile(ms, 99), "max_ms": float(ms.max()) if len(ms) else None,
             "mean_ms": float(ms.mean()) if len(ms) else None, "operator_busy_s": busy,
             "latencies_ms": ms.tolist()}, normalize(program, cols, g["n"]))


def warm_datalog():
    """The Datalog front end's one-time costs (imports, building the lark parser: 0.8 s here), paid
    before any job is timed, as the kernels are."""
    import kpgnb as kp
    with kp.Engine(workers=1) as eng:
        e = eng.input("edge", ["src", "dst"], rows={"src": np.array([0, 1]), "dst": np.array([1, 2])})
        e.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n"
                           "m(y, min<d>) :- edge(y, _), d = 0.\nm(y, min<d>) :- m(x, d1), edge(x, y), d = d1 + 1.\n",
                           name="warm")
        eng.wait(prog["m"])


def kpgnb_side(emit, workers: int, jobs: list):
    """kpgnb at ``workers``, one engine per job. ``jobs``: (key, kind, program, spec, extra) with kind
    "batch", "ask" or "stream"; emits ("warm", {...}), then ("start", key) and ("query", key, figures,
    answer) per job."""
    import kpgnb as kp
    from kpgnb.engine.warmup import warm_kernels
    t = time.perf_counter()
    warm_kernels()
    warm_datalog()
    emit("warm", {"s": time.perf_counter() - t})
    for key, kind, program, spec, extra in jobs:
        g = _graph(spec)
        emit("start", key)
        with kp.Engine(workers=workers) as eng:
            if kind == "batch":
                figs, ans = kpgnb_batch(eng, g, program)
            elif kind == "ask":
                figs, ans = kpgnb_asks(eng, g, extra["asks"], extra["seed"], extra.get("seconds", 0))
            else:
                figs, ans = kpgnb_stream(eng, g, program, extra["updates"], extra["seed"])
        emit("query", key, figs, ans)


# -- peers ------------------------------------------------------------------------------------------------

DUCKDB_SQL = {
    "tc": """
WITH RECURSIVE tc(x, y) AS (
    SELECT src, dst FROM edge
    UNION
    SELECT tc.x, e.dst FROM tc JOIN edge e ON e.src = tc.y
)
SELECT x, y FROM tc""",
    "sg": """
WITH RECURSIVE sg(x, y) AS (
    SELECT e1.dst, e2.dst FROM edge e1 JOIN edge e2 ON e1.src = e2.src WHERE e1.dst <> e2.dst
    UNION
    SELECT e1.dst, e2.dst FROM sg JOIN edge e1 ON e1.src = sg.x JOIN edge e2 ON e2.src = sg.y
)
SELECT x, y FROM sg""",
    "reach": """
WITH RECURSIVE reach(y) AS (
    SELECT node FROM root
    UNION
    SELECT e.dst FROM reach r JOIN edge e ON e.src = r.y
)
SELECT y FROM reach""",
    # USING KEY (DuckDB >= 1.3): one row per key; the recursive step reads the rows changed in the last
    # round (the working table) and recurring.cc, every key's current row: semi-naive min propagation
    "cc": """
WITH RECURSIVE cc(x, l) USING KEY (x) AS (
    SELECT node, node FROM node
    UNION
    SELECT e.dst, min(c.l)
    FROM cc c JOIN edge e ON e.src = c.x
    JOIN recurring.cc cur ON cur.x = e.dst
    GROUP BY e.dst
    HAVING min(c.l) < min(cur.l)
)
SELECT x, l FROM cc""",
    "sssp": """
WITH RECURSIVE sssp(y, d) USING KEY (y) AS (
    SELECT node, 0::BIGINT FROM root
    UNION
    SELECT e.dst, min(s.d + e.w)
    FROM sssp s JOIN wedge e ON e.src = s.y
    LEFT JOIN recurring.sssp cur ON cur.y = e.dst
    GROUP BY e.dst
    HAVING min(cur.d) IS NULL OR min(s.d + e.w) < min(cur.d)
)
SELECT y, d FROM sssp""",
}


def duckdb_side(emit, jobs: list, memory_limit: str | None = None):
    """DuckDB: per job a fresh in-memory database, the base relations loaded from Arrow, then
    ``CREATE TABLE answer AS <recursive CTE>``."""
    t = time.perf_counter()
    import duckdb
    import pyarrow as pa
    from .peers import duckdb_warm
    duckdb_warm()
    info = {"version": duckdb.__version__, "s": time.perf_counter() - t}
    for key, program, spec in jobs:
        g = _graph(spec)
        emit("start", key)
        con = duckdb.connect()
        if memory_limit:
            con.execute(f"SET memory_limit = '{memory_limit}'").fetchall()
        info.setdefault("threads", con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        emit("import", info)
        c0, t0 = time.process_time(), time.perf_counter()
        for rel, cols in base_relations(g, program).items():
            con.register("frame", pa.table(cols))
            con.execute(f'CREATE TABLE "{rel}" AS SELECT * FROM frame').fetchall()
            con.unregister("frame")
        try:
            con.execute("CREATE TABLE answer AS " + DUCKDB_SQL[program]).fetchall()
        except duckdb.ParserException as e:
            if "USING KEY" in DUCKDB_SQL[program]:
                emit("query", key, {"status": f"not expressible (this DuckDB has no USING KEY: {e})"}, None)
                con.close()
                continue
            raise
        t1 = time.perf_counter()
        out = con.execute("SELECT * FROM answer").fetchnumpy()
        ans = normalize(program, [np.asarray(out[c]) for c in out], g["n"])
        t2 = time.perf_counter()
        con.close()
        emit("query", key, {"total_s": t1 - t0, "read_s": t2 - t1, "cpu_s": time.process_time() - c0}, ans)


SPARK_CHECKPOINT_EVERY = 3


def _spark_pairs_loop(spark, edges, program: str):
    """Semi-naive tc / sg: each round joins the pairs found in the last round (delta) with the edges,
    keeps the pairs not found before (left anti join), localCheckpoint per round (cuts the lineage)."""
    from pyspark.sql import functions as F
    e = edges.select("src", "dst")
    if program == "tc":
        found = e.select(F.col("src").alias("x"), F.col("dst").alias("y")).distinct().localCheckpoint()
    else:
        e1, e2 = e.alias("e1"), e.alias("e2")
        found = (e1.join(e2, F.col("e1.src") == F.col("e2.src")).where(F.col("e1.dst") != F.col("e2.dst"))
                 .select(F.col("e1.dst").alias("x"), F.col("e2.dst").alias("y")).distinct().localCheckpoint())
    if program == "tc":
        def step(delta):
            return delta.join(e, delta.y == e.src).select(delta.x, F.col("dst").alias("y"))
    else:
        e1 = e.select(F.col("src").alias("a"), F.col("dst").alias("nx"))
        e2 = e.select(F.col("src").alias("b"), F.col("dst").alias("ny"))

        def step(delta):
            return (delta.join(e1, delta.x == e1.a).join(e2, delta.y == e2.b)
                    .select(F.col("nx").alias("x"), F.col("ny").alias("y")))
    return _spark_fixpoint(found, step)


def _spark_fixpoint(found, step):
    """Semi-naive rounds: ``step(delta)`` gives the rows one round derives from the last round's new
    ones; those not found before (left anti join) are the next delta, until a round adds nothing.
    localCheckpoint each round (and ``found`` every few) cuts the lineage."""
    delta, rounds = found, 0
    while True:
        rounds += 1
        new = step(delta).distinct().join(found, found.columns, "left_anti").localCheckpoint()
        if new.count() == 0:
            break
        found = found.unionByName(new)
        if rounds % SPARK_CHECKPOINT_EVERY == 0:
            found = found.localCheckpoint()
        delta = new
    return found.localCheckpoint()


def _spark_reach(spark, edges, roots):
    from pyspark.sql import functions as F
    e = edges.select(F.col("src").alias("y"), F.col("dst"))
    found = roots.select(F.col("node").alias("y")).distinct().localCheckpoint()
    return _spark_fixpoint(found, lambda delta: delta.join(e, "y").select(F.col("dst").alias("y")))


def _spark_min_loop(spark, start, edges, weighted: bool):
    """Semi-naive recursive min (cc: labels along the edges; sssp: distances, dist + w): the keys whose
    value dropped in the last round offer value (+ w) to their out-neighbours; a key takes the smallest
    offer below its current value (or its first)."""
    from pyspark.sql import functions as F
    val = start.localCheckpoint()
    changed, rounds = val, 0
    while True:
        rounds += 1
        j = changed.join(edges, changed.k == edges.src)
        offer = (F.col("v") + F.col("w")) if weighted else F.col("v")
        offers = j.groupBy(F.col("dst").alias("k")).agg(F.min(offer).alias("o"))
        improved = (offers.join(val, "k", "left").where(F.col("v").isNull() | (F.col("o") < F.col("v")))
                    .select("k", F.col("o").alias("v")).localCheckpoint())
        if improved.count() == 0:
            break
        val = (val.join(improved.withColumnRenamed("v", "nv"), "k", "full")
               .select("k", F.coalesce("nv", "v").alias("v")))
        if rounds % SPARK_CHECKPOINT_EVERY == 0:
            val = val.localCheckpoint()
        changed = improved
    return val.localCheckpoint()


def pyspark_side(emit, jobs: list, driver_memory: str = "4g", warm: bool = True):
    """PySpark on local[2] (the session start is emitted as "setup", not counted): per job the base
    relations from Arrow (cached), then the semi-naive loop, the answer checkpointed."""
    t = time.perf_counter()
    import pyarrow as pa
    import pyspark
    from pyspark.sql import functions as F
    import kpgnb.spark as ks
    emit("import", {"version": pyspark.__version__, "s": time.perf_counter() - t})
    t = time.perf_counter()
    spark = ks.session(app="bench.datalog", cores=2, **{"spark.driver.memory": driver_memory})
    # the JVM's first joins, aggregations and checkpoints (code generation, class loading) on a 3-edge
    # graph: one-time costs, counted with the session start and not against the first job
    tiny = None if not warm else spark.createDataFrame(pa.table({"src": np.array([0, 1, 1]), "dst": np.array([1, 2, 0]),
                                           "w": np.array([1, 1, 1])}))
    if warm:
        _spark_pairs_loop(spark, tiny, "tc").count()
        _spark_min_loop(spark, tiny.select(F.col("src").alias("k"), F.col("src").alias("v")).distinct(), tiny,
                        True).count()
    emit("setup", {"s": time.perf_counter() - t})
    for key, program, spec in jobs:
        g = _graph(spec)
        emit("start", key)
        c0, t0 = time.process_time(), time.perf_counter()
        rel = {r: spark.createDataFrame(pa.table(cols)).cache() for r, cols in base_relations(g, program).items()}
        for d in rel.values():
            d.count()
        if program in PAIR_PROGRAMS:
            out, cols = _spark_pairs_loop(spark, rel["edge"], program), ["x", "y"]
        elif program == "reach":
            out, cols = _spark_reach(spark, rel["edge"], rel["root"]), ["y"]
        elif program == "cc":
            start = rel["node"].select(F.col("node").alias("k"), F.col("node").alias("v"))
            out, cols = _spark_min_loop(spark, start, rel["edge"], False), ["k", "v"]
        else:
            start = rel["root"].select(F.col("node").alias("k"), F.lit(0).cast("long").alias("v"))
            out, cols = _spark_min_loop(spark, start, rel["wedge"], True), ["k", "v"]
        t1 = time.perf_counter()
        tab = out.toArrow()
        ans = normalize(program, [tab.column(c).to_numpy() for c in cols], g["n"])
        t2 = time.perf_counter()
        for d in rel.values():
            d.unpersist()
        spark.catalog.clearCache()
        emit("query", key, {"total_s": t1 - t0, "read_s": t2 - t1, "cpu_s": time.process_time() - c0}, ans)


CLINGO_ASP = {
    "tc": "tc(X,Y) :- edge(X,Y).\ntc(X,Y) :- tc(X,Z), edge(Z,Y).\n#show tc/2.\n",
    "sg": "sg(X,Y) :- edge(P,X), edge(P,Y), X != Y.\nsg(X,Y) :- edge(A,X), sg(A,B), edge(B,Y).\n#show sg/2.\n",
    "reach": "reach(Y) :- root(Y).\nreach(Y) :- reach(X), edge(X,Y).\n#show reach/1.\n",
    # no recursive min in (stratified) ASP: every ancestor's label, then the min per node (quadratic)
    "cc": "lab(X,X) :- node(X).\nlab(Y,L) :- lab(X,L), edge(X,Y).\ncc(X,M) :- node(X), M = #min{L : lab(X,L)}.\n"
          "#show cc/2.\n",
    "sssp": None,
}
CLINGO_NOT_EXPRESSIBLE = ("not expressible (a recursive min over path lengths: grounding it needs every "
                          "length of every walk)")


def _facts(pred: str, cols: dict) -> str:
    arrays = [np.asarray(c).astype(str) for c in cols.values()]
    body = arrays[0]
    for a in arrays[1:]:
        body = np.char.add(np.char.add(body, ","), a)
    return "".join((pred + "(" + np.char.add(body, ").\n").astype(object)).tolist())


def clingo_side(emit, jobs: list, max_rows: int = 0):
    """clingo: the program's ASP rules and the graph as facts (text built before the clock starts);
    time = parse + ground + solve (the model's symbols); reading them into arrays is "read". cc grounds
    lab(y, l) for every ancestor l of y: at least S^2 atoms for a strongly connected component of S nodes,
    so it is skipped when that exceeds ``max_rows`` (> 0), as the other systems skip answers that big."""
    t = time.perf_counter()
    import clingo
    emit("import", {"version": clingo.__version__, "s": time.perf_counter() - t})
    for key, program, spec in jobs:
        g = _graph(spec)
        emit("start", key)
        if CLINGO_ASP[program] is None:
            emit("query", key, {"status": CLINGO_NOT_EXPRESSIBLE}, None)
            continue
        if program == "cc" and max_rows:
            from scipy.sparse.csgraph import connected_components
            _, lab = connected_components(_csr(g["src"], g["dst"], g["n"]), directed=True, connection="strong")
            big = int(np.bincount(lab).max())
            if big * big > max_rows:
                emit("query", key, {"status": f"skipped: its grounding has >= {big:,}^2 = {big * big:,} lab atoms "
                                              f"(a strongly connected component of {big:,} nodes) > --max-rows"},
                     None)
                continue
        facts = "".join(_facts(rel, cols) for rel, cols in base_relations(g, program).items())
        c0, t0 = time.process_time(), time.perf_counter()
        ctl = clingo.Control(["--warn=none"])
        ctl.add("base", [], facts)
        ctl.add("base", [], CLINGO_ASP[program])
        ctl.ground([("base", [])])
        syms = None
        with ctl.solve(yield_=True) as h:
            for m in h:
                syms = m.symbols(shown=True)
                break
        t1 = time.perf_counter()
        arity = 1 if program == "reach" else 2
        flat = np.fromiter((a.number for s in syms for a in s.arguments), dtype=np.int64,
                           count=len(syms) * arity)
        cols = [flat[i::arity] for i in range(arity)]
        ans = normalize(program, cols, g["n"])
        t2 = time.perf_counter()
        del ctl, syms
        emit("query", key, {"total_s": t1 - t0, "read_s": t2 - t1, "cpu_s": time.process_time() - c0,
                            "facts_bytes": len(facts)}, ans)


PEER_SIDES = {"duckdb": duckdb_side, "pyspark": pyspark_side, "clingo": clingo_side}


# -- the program ------------------------------------------------------------------------------------------

KPG_TABLE2_MS = {"tree": 2.56, "grid": 346.0, "gnp": 18.3}   # K-Pg Table 2: tc(?, _) medians, 32 workers


def _status(reason: str) -> str:
    """A failure as the table and the JSON name it."""
    r = str(reason)
    if "OutOfMemory" in r or "Out of Memory" in r or "MemoryError" in r or "java heap" in r.lower():
        return "out of memory"
    if "exit code -9" in r:
        return "killed by SIGKILL (out of memory?)"
    return r


def _short(status: str) -> str:
    s = str(status)
    for k, v in (("not expressible", "n/e"), ("out of memory", "OOM"), ("SIGKILL", "killed"),
                 ("wrong answer", "WRONG"), ("not installed", "not inst."), ("skipped", "skipped")):
        if k in s:
            return v
    if s.startswith(">"):
        return s.split("(")[0].strip()
    return "error" if s.startswith("error") or s.startswith("died") else s


def collect(msgs, failures: dict, keys, checker) -> dict:
    """{key: figures + status} from one side's messages; ``checker(key, answer)`` -> None or what differs."""
    out, steps = {}, {}
    for m in msgs:
        if m[0] in ("warm", "import", "setup"):
            steps[m[0]] = m[1]
    err = next((m for m in msgs if m[0] == "error"), None)
    for key in keys:
        got = [m for m in msgs if m[0] == "query" and m[1] == key]
        if got:
            _, _, figs, ans = got[-1]
            if "status" in figs:
                out[key] = dict(figs)
                continue
            bad = checker(key, ans)
            if bad:
                out[key] = {**figs, "status": "wrong answer", "answer": "wrong answer", "detail": bad}
                print(f"    {key}: wrong answer: {bad}", flush=True)
            else:
                out[key] = {**figs, "status": "ok", "answer": "ok"}
        else:
            reason = failures.get(key) or (err[1] if err else "not run")
            out[key] = {"status": _status(reason)}
            if err is not None and key == next(iter(failures), None):
                out[key]["traceback"] = err[2]
    return {"steps": steps, "jobs": out}


def check_asks(ref: "TCReference", ans) -> str | None:
    """Each asked x's rows against the reference; and nothing left after the retracts."""
    if ans is None:
        return "no answer"
    bad = []
    for x, rows, h, only_x in ans["asks"]:
        ys = ref.row(x)
        if rows != len(ys) or h != pair_hash(np.full(len(ys), x), ys) or not only_x:
            bad.append(f"x={x}: {rows:,} rows, want {len(ys):,}" + ("" if only_x else " (rows of other x)"))
    if ans["left_after_retract"]:
        bad.append(f"{ans['left_after_retract']:,} rows left in the view after the retracts")
    return (f"{len(bad)} of {len(ans['asks'])} asks wrong: " + "; ".join(bad[:3])) if bad else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="1,2", help="kpgnb worker counts for the batch runs, comma-separated")
    p.add_argument("--latency-workers", default="1,2",
                   help="worker counts for the interactive and streaming runs (a subset of --workers)")
    p.add_argument("--programs", default=",".join(ALL_PROGRAMS))
    p.add_argument("--graphs", default="tree,grid,gnp,rmat1,rmat2,rmat3,rmat4")
    p.add_argument("--tree-height", type=int, default=11)
    p.add_argument("--grid-side", type=int, default=150)
    p.add_argument("--gnp-n", type=int, default=10_000)
    p.add_argument("--gnp-p", type=float, default=0.001)
    p.add_argument("--rmat-scale", type=int, default=16, help="RMAT graphs have 2^scale nodes")
    p.add_argument("--rmat-edges", type=int, default=500_000, help="RMAT edges drawn (duplicates dropped)")
    p.add_argument("--max-weight", type=int, default=4, help="sssp's edge weights are 1..this")
    p.add_argument("--max-rows", type=int, default=30_000_000,
                   help="skip a (program, graph) whose answer has more rows than this (0: no limit)")
    p.add_argument("--peers", default=None, help="comma-separated, from " + ",".join(DEFAULT_PEERS) +
                   " (default: all installed; pyspark not at --quick)")
    p.add_argument("--peer-timeout", type=float, default=300.0,
                   help="seconds a system may take for one job (kpgnb included) before it is killed")
    p.add_argument("--peer-memory", default="8GB", help="DuckDB's memory_limit")
    p.add_argument("--spark-memory", default="4g", help="spark.driver.memory (local mode: all of Spark's heap)")
    p.add_argument("--asks", type=int, default=200, help="goal-directed tc(?, _) asks per graph (0: none)")
    p.add_argument("--ask-seconds", type=float, default=60.0,
                   help="stop asking on a graph after this many seconds (0: no limit; grid-150's asks take "
                        "about 150 rounds each)")
    p.add_argument("--updates", type=int, default=1000, help="streaming single-edge changes (0: none)")
    p.add_argument("--stream-graph", default="rmat1", help="the RMAT configuration the streaming runs use")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="", help="write bench/results/datalog-TAG.json instead (a partial run)")
    a = parse_args(p, argv, QUICK)
    argv_list = sys.argv[1:] if argv is None else list(argv)
    a.graphs = [x.strip() for x in a.graphs.split(",") if x.strip()]
    programs = [x.strip() for x in a.programs.split(",") if x.strip()]
    for x in programs:
        if x not in PROGRAMS:
            p.error(f"unknown program {x!r}; choose from {','.join(PROGRAMS)}")
    def rmat_ok(x):
        return x.startswith("rmat") and x[4:].isdigit() and int(x[4:]) in RMAT_PARAMS
    for x in a.graphs:
        if x not in ("tree", "grid", "gnp") and not rmat_ok(x):
            p.error(f"unknown graph {x!r}; choose from tree,grid,gnp,rmat1..rmat4")
    if not rmat_ok(a.stream_graph):
        p.error(f"--stream-graph {a.stream_graph!r}: unknown; choose from rmat1..rmat4")
    workers = [int(w) for w in a.workers.split(",")]
    lat_workers = [int(w) for w in a.latency_workers.split(",") if int(w) in workers]
    notes = {}
    if a.peers is None:
        peers = []
        for name in DEFAULT_PEERS:
            if name in SLOW_PEERS and a.quick:
                notes[name] = "skipped at --quick (--peers to run it)"
            else:
                peers.append(name)
    else:
        peers = [x.strip() for x in a.peers.split(",") if x.strip()]
        for x in peers:
            if x not in PEER_SIDES:
                p.error(f"unknown peer {x!r}; choose from {','.join(PEER_SIDES)}")
    installed = []
    for name in peers:
        if importlib.util.find_spec(PEER_MODULES[name]) is not None:
            installed.append(name)
        else:
            notes[name] = "not installed"
    load0 = os.getloadavg()
    specs = graph_specs(a)
    print(f"bench.datalog: graphs {', '.join(s['name'] for s in specs)}; programs {','.join(programs)}; kpgnb "
          f"W={a.workers} (latency W={','.join(map(str, lat_workers))}); peers {','.join(installed) or '-'}; "
          f"timeout {a.peer_timeout:g} s/job; load average {load0[0]:.2f}", flush=True)

    # -- references and the jobs
    cache, refs, skipped, graph_info = {}, {}, {}, {}
    batch = []      # (key, program, spec)
    for spec in specs:
        g = make_graph(spec)
        graph_info[spec["name"]] = {**spec, "nodes": g["n"], "edges": len(g["src"])}
        for program in programs_for(spec, programs):
            key = f"{program}@{spec['name']}"
            t = time.perf_counter()
            want, rows = reference(program, g, a.max_rows, cache)
            refs[key] = {"answer": want, "rows": rows, "s": time.perf_counter() - t}
            if want is None:
                skipped[key] = (f"skipped: the answer has {rows:,} rows > --max-rows {a.max_rows:,}" if rows else
                                f"skipped: the answer has > --max-rows {a.max_rows:,} rows (or the reference's "
                                f"evaluation derives > 2x that many in one round)")
            else:
                batch.append((key, program, spec))
    asks = []       # (key, "ask", "tc", spec, extra)
    if a.asks > 0:
        for spec in specs:
            if spec["kind"] in ("tree", "grid", "gnp"):
                asks.append((f"ask:tc@{spec['name']}", "ask", "tc", spec,
                             {"asks": a.asks, "seed": a.seed, "seconds": a.ask_seconds}))
                tc_ref(make_graph(spec), cache)
    streams = []
    stream_refs = {}
    if a.updates > 0:
        c = int(a.stream_graph[4:])
        spec = {"name": f"rmat{c}-{a.rmat_scale}", "kind": "rmat", "config": c, "scale": a.rmat_scale,
                "edges": a.rmat_edges, "seed": a.seed + c, "max_weight": a.max_weight}
        g = make_graph(spec)
        fg = final_graph(g, make_changes(g, a.updates, a.seed))
        graph_info.setdefault(spec["name"], {**spec, "nodes": g["n"], "edges": len(g["src"])})
        for program in RMAT_PROGRAMS:
            if program in programs:
                key = f"stream:{program}@{spec['name']}"
                streams.append((key, "stream", program, spec, {"updates": a.updates, "seed": a.seed}))
                stream_refs[key] = reference(program, fg)[0]
    print(f"  references ready: {sum(r['s'] for r in refs.values()):.1f} s; batch jobs {len(batch)}, skipped "
          f"{len(skipped)}", flush=True)

    def checker(key, ans):
        if key.startswith("ask:"):
            return check_asks(cache[("tc", key.split("@", 1)[1])], ans)
        if key.startswith("stream:"):
            return check(key[7:].split("@")[0], ans, stream_refs[key])
        return check(key.split("@")[0], ans, refs[key]["answer"])

    results = {"kpgnb": {}, "peers": {}}
    from kpgnb.engine.warmup import warm_kernels
    from .graphs import run_steps
    t0 = time.perf_counter()
    warm_kernels()   # compiled into the shared cache here, so each child only loads it
    print(f"  kpgnb kernels ready in {time.perf_counter() - t0:.1f} s", flush=True)
    for w in workers:
        jobs = [(k, "batch", prog, spec, {}) for k, prog, spec in batch]
        if w in lat_workers:
            jobs += asks + streams
        keys = [j[0] for j in jobs]
        t0 = time.perf_counter()
        msgs, fails = run_steps(kpgnb_side, lambda pend, jobs=jobs, w=w: (w, [j for j in jobs if j[0] in pend]),
                                keys, a.peer_timeout)
        results["kpgnb"][f"W={w}"] = collect(msgs, fails, keys, checker)
        print(f"  kpgnb W={w} done in {time.perf_counter() - t0:.1f} s", flush=True)
    for name in installed:
        keys = [k for k, _, _ in batch]
        extra = ()
        if name == "duckdb":
            extra = (a.peer_memory,)
        elif name == "clingo":
            extra = (a.max_rows,)
        elif name == "pyspark":
            extra = (a.spark_memory,)
        t0 = time.perf_counter()
        msgs, fails = run_steps(PEER_SIDES[name],
                                lambda pend, extra=extra: ([j for j in batch if j[0] in pend], *extra),
                                keys, a.peer_timeout)
        results["peers"][name] = collect(msgs, fails, keys, checker)
        print(f"  {name} done in {time.perf_counter() - t0:.1f} s", flush=True)

    batch_rows, goals = summarize_batch(results, batch, skipped, refs, workers, installed, notes)
    ask_rows, stream_rows = summarize_latency(results, asks, streams, lat_workers, graph_info)
    goals += goals_latency(results, asks, lat_workers, specs)
    kcols = [f"kpgnb W={w} s" for w in workers]
    pcols = []
    for name in installed:
        pcols += [f"{name} s", f"x {name}"]
    print(f"\nbatch: seconds from loading the inputs to the answer; x PEER = peer's time / kpgnb's best W "
          f"(above 1: kpgnb faster); n/e = not expressible, WRONG = wrong answer")
    print(table(batch_rows, ["program", "graph", "rows"] + kcols + pcols))
    if notes:
        print("peers left out: " + "; ".join(f"{k}: {v}" for k, v in notes.items()))
    if ask_rows:
        print("\ninteractive: tc(?, _) goal, g.ask(x) + eng.wait(g.view), then g.retract(x)")
        print(table(ask_rows, ["graph", "W", "asks", "p50 ms", "p99 ms", "max ms", "rows/ask", "retract p50 ms",
                               "K-Pg p50 ms", "answers"]))
    if stream_rows:
        print("\nstreaming: one edge inserted or deleted per epoch; update + advance + eng.wait(view)")
        print(table(stream_rows, ["program", "graph", "W", "updates", "p50 ms", "p99 ms", "max ms", "initial s",
                                  "final answer"]))
    print()
    print(table(goals, ["goal", "measured", "met"]))
    load1 = os.getloadavg()
    versions = {"numpy": np.__version__}
    for name, r in results["peers"].items():
        versions[name] = r["steps"].get("import", {}).get("version")
    for name in ("scipy", "networkx"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except ImportError:
            pass
    payload = {"command": "python -m bench.datalog " + " ".join(argv_list),
               "params": {"graphs": graph_info, "programs": programs, "workers": workers,
                          "latency_workers": lat_workers, "peers": installed, "peer_timeout_s": a.peer_timeout,
                          "ask_seconds": a.ask_seconds,
                          "peer_memory": a.peer_memory, "spark_memory": a.spark_memory, "max_rows": a.max_rows,
                          "asks": a.asks,
                          "updates": a.updates, "seed": a.seed, "rmat_params": RMAT_PARAMS,
                          "load_average_start": load0, "load_average_end": load1},
               "programs": {k: PROGRAMS[k] for k in programs}, "duckdb_sql": DUCKDB_SQL, "clingo_asp": CLINGO_ASP,
               "versions": versions, "notes": notes, "skipped": skipped,
               "references": {k: {"rows": r["rows"], "s": r["s"]} for k, r in refs.items()},
               "results": results, "batch_table": batch_rows, "interactive_table": ask_rows,
               "streaming_table": stream_rows, "goals": goals}
    print("wrote", write_result(f"datalog-{a.tag}" if a.tag else "datalog", payload, a.quick))
    return payload


def _cell(r: dict | None):
    if r is None:
        return None
    return r["total_s"] if r.get("status") == "ok" else _short(r.get("status", ""))


def summarize_batch(results, batch, skipped, refs, workers, installed, notes):
    rows, goals = [], []
    keys = [k for k, _, _ in batch] + list(skipped)
    wins, finished = 0, 0
    for key in sorted(keys, key=lambda k: (ALL_PROGRAMS.index(k.split("@")[0]), k)):
        program, graph = key.split("@")
        row = {"program": program, "graph": graph, "rows": refs[key]["rows"]}
        if key in skipped:
            row.update({f"kpgnb W={w} s": "skipped" for w in workers})
            row.update({f"{n} s": "skipped" for n in installed})
            rows.append(row)
            continue
        best, wrong = None, False
        for w in workers:
            r = results["kpgnb"][f"W={w}"]["jobs"].get(key)
            row[f"kpgnb W={w} s"] = _cell(r)
            if r and r.get("status") == "ok":
                best = r["total_s"] if best is None else min(best, r["total_s"])
            wrong = wrong or bool(r and r.get("status") == "wrong answer")
        for name in installed:
            r = results["peers"][name]["jobs"].get(key)
            row[f"{name} s"] = _cell(r)
            if r and r.get("status") == "ok" and (best or wrong):
                if best:
                    row[f"x {name}"] = r["total_s"] / best
                finished += 1
                wins += not wrong and r["total_s"] > best   # kpgnb wrong at some W: a loss, whatever its time
        rows.append(row)
    if finished:
        goals.append({"goal": "batch: kpgnb faster than every peer where the peer finishes",
                      "measured": f"faster in {wins} of {finished} (program, graph, peer) runs",
                      "met": "yes" if wins == finished else "NO"})
    return rows, goals


def summarize_latency(results, asks, streams, lat_workers, graph_info):
    ask_rows, stream_rows = [], []
    for key, _, _, spec, _ in asks:
        for w in lat_workers:
            r = results["kpgnb"][f"W={w}"]["jobs"].get(key, {})
            ok = r.get("status") == "ok"  # a wrong answer is a failure, never a latency
            ask_rows.append({"graph": spec["name"], "W": w, "asks": r.get("asks"),
                             "p50 ms": r.get("p50_ms") if ok else None, "p99 ms": r.get("p99_ms") if ok else None,
                             "max ms": r.get("max_ms") if ok else None, "rows/ask": r.get("mean_rows"),
                             "retract p50 ms": r.get("retract_p50_ms") if ok else None,
                             "K-Pg p50 ms": KPG_TABLE2_MS.get(spec["kind"]),
                             "answers": "ok" if ok else _short(r.get("status", "not run"))})
    for key, _, program, spec, _ in streams:
        for w in lat_workers:
            r = results["kpgnb"][f"W={w}"]["jobs"].get(key, {})
            ok = r.get("status") == "ok"
            stream_rows.append({"program": program, "graph": spec["name"], "W": w, "updates": r.get("updates"),
                                "p50 ms": r.get("p50_ms") if ok else None, "p99 ms": r.get("p99_ms") if ok else None,
                                "max ms": r.get("max_ms") if ok else None,
                                "initial s": r.get("initial_s") if ok else None,
                                "final answer": "ok" if ok else _short(r.get("status", "not run"))})
    return ask_rows, stream_rows


def goals_latency(results, asks, lat_workers, specs):
    goals = []
    for key, _, _, spec, _ in asks:
        kpg = KPG_TABLE2_MS[spec["kind"]]
        for w in lat_workers:
            r = results["kpgnb"][f"W={w}"]["jobs"].get(key, {})
            if r.get("status") != "ok":
                continue
            same = (spec.get("height") == 11 or spec.get("side") == 150 or
                    (spec["kind"] == "gnp" and spec["n"] == 10_000 and spec["p"] == 0.001))
            goals.append({"goal": f"interactive tc(?, _) on {spec['name']} W={w}: p50 <= K-Pg's {kpg:g} ms",
                          "measured": f"{r['p50_ms']:.2f} ms",
                          "met": ("yes" if r["p50_ms"] <= kpg else "NO") if same else
                                 "n/a: not K-Pg's graph"})
    return goals


if __name__ == "__main__":
    main()
