"""Datalog on kpgnb against the peers a user would pick instead: batch evaluation of recursive programs,
goal-directed (magic sets) queries, and streaming updates with retractions (issue 13's benchmarks).

    python -m bench.datalog [--workers 1,2] [--programs tc,sg,reach,cc,sssp] [--graphs tree,grid,gnp,rmat1,...]
                            [--tree-height 11] [--grid-side 150] [--gnp-n 10000] [--gnp-p 0.001]
                            [--rmat-scale 16] [--rmat-edges 500000] [--max-weight 4] [--max-rows 30000000]
                            [--peers duckdb,pyspark,clingo] [--peer-timeout 300] [--asks 200]
                            [--updates 1000] [--latency-workers 1] [--seed 0] [--quick]

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
             time = parse + ground + solve; cc as a stratified min over the ancestors (quadratic), sssp
             "not expressible" (no recursive min in ASP without grounding every path length)
A (program, graph) whose reference answer has more than --max-rows rows is skipped for every system (tc on
grid-150 has 131.7 M rows, on G(10,000, 0.001) about 100 M: --max-rows 0 runs them anyway).

Interactive (K-Pg Table 2): ``g = prog.goal("tc(?, _)")`` on tree, grid and gnp; for --asks random x:
``g.ask(x)`` + ``eng.wait(g.view)`` (the latency), the answer for x checked, then ``g.retract(x)`` + wait.
Streaming: after loading an RMAT graph (config 1) and the program's answer, --updates single-edge changes,
alternately inserting a random edge and deleting an original one; latency = the change + advancing every
input's epoch + ``eng.wait`` of the program's view; the final answer checked. For reach, cc and sssp.

Every answer (kpgnb's and each peer's) is checked against a NumPy/SciPy reference (tc: reachability bitsets
over the strongly connected components; sg: NumPy semi-naive evaluation; reach/sssp: SciPy BFS/Dijkstra;
cc: vectorized min-label fixpoint) and a mismatch is reported as "wrong answer". Binary relations are
compared by row count, rows per first column and an order-independent hash of the rows.
Results: bench/results/datalog.json (datalog-quick.json for --quick), and a table.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

from .common import parse_args, percentile, table, write_result

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
PAIR_PROGRAMS = ("tc", "sg")          # on tree, grid, gnp
RMAT_PROGRAMS = ("reach", "cc", "sssp")
ALL_PROGRAMS = PAIR_PROGRAMS + RMAT_PROGRAMS

# Nexus (Imran et al. 2022, Section 7.1): the four RMAT parameter sets (a, b, c, d)
RMAT_PARAMS = {1: (0.45, 0.25, 0.15, 0.15), 2: (0.25, 0.25, 0.25, 0.25), 3: (0.50, 0.20, 0.10, 0.20),
               4: (0.35, 0.25, 0.15, 0.25)}

QUICK = {"tree_height": 8, "grid_side": 40, "gnp_n": 2000, "rmat_scale": 11, "rmat_edges": 10_000,
         "peer_timeout": 60.0, "asks": 30, "updates": 100, "latency_workers": "1"}
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


def norm_set(nodes) -> np.ndarray:
    """A unary relation: its values sorted, duplicates kept (a node listed twice is wrong)."""
    return np.sort(np.asarray(nodes, dtype=np.int64))


def norm_map(nodes, values):
    """A relation node -> value (cc, sssp): sorted by node, duplicates kept."""
    nodes = np.asarray(nodes, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    order = np.argsort(nodes, kind="stable")
    return nodes[order], values[order]


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
    found). Returns the normal form, or None once more than ``max_rows`` rows (when > 0) are found."""
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
