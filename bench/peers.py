"""Peer implementations of the graph queries of ``bench.graphs``: one function per (peer, query), each
driven through the peer's fastest honest API, each returning its answer in the normal form below so that
``bench.graphs.check`` can compare it with any other.

Normal forms (all NumPy int64):
    reach -> sorted array of the nodes reachable from the roots (the roots included)
    bfs   -> (nodes, dist): the reachable nodes sorted, and their fewest hops from any root
    wcc   -> (nodes, label): every node that has an edge (a self-loop counts), sorted, and the smallest node
             id of its weakly connected component

Every peer is imported inside the functions that use it: the peers are the optional ``[bench]`` extra.
A peer has (where it has one) a ``build`` (the graph loaded into the peer's own structure: an igraph Graph,
a DuckDB table, a cached Spark DataFrame) and one function per query taking what ``build`` returned plus
the roots; ``PEERS`` lists them. Pathway's build only writes the CSV file it reads; its queries run the
whole program. ``*_apply`` (igraph, DuckDB) applies one edge change to the built structure in place, for
the edit + recompute measurement; ``pathway_stream_bfs`` is Pathway in streaming mode.
"""
from __future__ import annotations

import os
import time

import numpy as np

QUERIES = ("reach", "bfs", "wcc")

# -- normal forms -----------------------------------------------------------------------------------------


def norm_reach(nodes) -> np.ndarray:
    """Sorted, duplicates kept (an answer listing a node twice is wrong)."""
    return np.sort(np.asarray(nodes, dtype=np.int64))


def norm_pairs(nodes, values):
    nodes = np.asarray(nodes, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    order = np.argsort(nodes, kind="stable")
    return nodes[order], values[order]


def norm_dense(values, missing) -> tuple:
    """(nodes, values) from a dense array indexed by node, leaving out entries where ``missing`` is True."""
    values = np.asarray(values)
    nodes = np.flatnonzero(~np.asarray(missing))
    return nodes.astype(np.int64), values[nodes].astype(np.int64)


def has_edge_mask(src, dst, nodes: int) -> np.ndarray:
    mask = np.zeros(nodes, dtype=bool)
    mask[src] = True
    mask[dst] = True
    return mask


def min_label_per_component(membership, nodes: int) -> np.ndarray:
    """Dense label array: each node's component's smallest node id, from a component id per node."""
    memb = np.asarray(membership, dtype=np.int64)
    lowest = np.full(int(memb.max()) + 1 if len(memb) else 0, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lowest, memb, np.arange(nodes, dtype=np.int64))
    return lowest[memb]


# -- igraph ----------------------------------------------------------------------------------------------


def igraph_version():
    import igraph
    return igraph.__version__


def igraph_build(src, dst, nodes):
    import igraph
    return igraph.Graph(nodes, edges=list(zip(src.tolist(), dst.tolist())), directed=True)


def _igraph_min_dist(g, roots):
    return np.asarray(g.distances(source=roots.tolist(), mode="out"), dtype=np.float64).min(axis=0)


def igraph_reach(g, roots):
    # one BFS per root (``distances``); measured faster here than the union of ``subcomponent``s
    return np.flatnonzero(np.isfinite(_igraph_min_dist(g, roots))).astype(np.int64)


def igraph_bfs(g, roots):
    d = _igraph_min_dist(g, roots)
    return norm_dense(np.where(np.isfinite(d), d, -1), ~np.isfinite(d))


def igraph_wcc(g, roots=None):
    n = g.vcount()
    labels = min_label_per_component(g.connected_components(mode="weak").membership, n)
    return norm_dense(labels, np.asarray(g.degree(), dtype=np.int64) == 0)


def igraph_apply(g, change):
    """Apply one change ("+"/"-", u, v) to the Graph in place (an edge delete removes one copy)."""
    op, u, v = change
    if op == "+":
        g.add_edge(u, v)
    else:
        g.delete_edges([g.get_eid(u, v)])


# -- networkx --------------------------------------------------------------------------------------------


def networkx_version():
    import networkx
    return networkx.__version__


def networkx_build(src, dst, nodes):
    import networkx as nx
    g = nx.DiGraph()
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    return g


def networkx_reach(g, roots):
    # one multi-source BFS (bfs_layers): much faster than the union of nx.descendants per root
    import networkx as nx
    rs = [r for r in roots.tolist() if r in g]
    seen = [r for r in roots.tolist() if r not in g]   # a root with no edge reaches itself
    for layer in nx.bfs_layers(g, rs) if rs else []:
        seen.extend(layer)
    return norm_reach(seen)


def networkx_bfs(g, roots):
    import networkx as nx
    rs = [r for r in roots.tolist() if r in g]
    nodes, dist = [r for r in roots.tolist() if r not in g], [0] * sum(r not in g for r in roots.tolist())
    for d, layer in enumerate(nx.bfs_layers(g, rs) if rs else []):
        nodes.extend(layer)
        dist.extend([d] * len(layer))
    return norm_pairs(nodes, dist)


def networkx_wcc(g, roots=None):
    import networkx as nx
    nodes, labels = [], []
    for comp in nx.weakly_connected_components(g):
        low = min(comp)
        nodes.extend(comp)
        labels.extend([low] * len(comp))
    return norm_pairs(nodes, labels)


# -- DuckDB ----------------------------------------------------------------------------------------------

DUCKDB_REACH = """
WITH RECURSIVE reach(node) AS (
    SELECT node FROM roots
    UNION
    SELECT e.dst FROM reach r JOIN edges e ON e.src = r.node
)
SELECT node FROM reach"""

# USING KEY (DuckDB >= 1.3): one row per node; the recursive step sees only the nodes found in the last
# round (the working table) and skips every node found before (recurring.bfs): a level-synchronous BFS.
DUCKDB_BFS = """
WITH RECURSIVE bfs(node, dist) USING KEY (node) AS (
    SELECT node, 0 AS dist FROM roots
    UNION
    SELECT e.dst, min(b.dist) + 1
    FROM bfs b JOIN edges e ON e.src = b.node
    LEFT JOIN recurring.bfs seen ON seen.node = e.dst
    WHERE seen.node IS NULL
    GROUP BY e.dst
)
SELECT node, dist FROM bfs"""

# Label propagation over both directions: every node starts with its own id; each round the nodes whose
# label dropped in the last round (the working table) offer it to their neighbours, and a neighbour takes
# the smallest offer below its current label (recurring.cc holds every node's current label).
DUCKDB_WCC = """
WITH RECURSIVE sym(src, dst) AS MATERIALIZED (
    SELECT src, dst FROM edges UNION ALL SELECT dst, src FROM edges
), cc(node, label) USING KEY (node) AS (
    SELECT DISTINCT src AS node, src AS label FROM sym
    UNION
    SELECT s.dst, min(c.label)
    FROM cc c JOIN sym s ON s.src = c.node
    JOIN recurring.cc cur ON cur.node = s.dst
    GROUP BY s.dst
    HAVING min(c.label) < min(cur.label)
)
SELECT node, label FROM cc"""


def duckdb_version():
    import duckdb
    return duckdb.__version__


def duckdb_info():
    import duckdb
    return {"threads": duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]}


def duckdb_warm():
    """First use: the first Arrow scan loads DuckDB's Arrow support (about 1 s), once per process."""
    import duckdb
    import pyarrow as pa
    con = duckdb.connect()
    con.register("frame", pa.table({"x": np.arange(3)}))
    con.execute("SELECT sum(x) FROM frame").fetchall()
    con.close()


def duckdb_build(src, dst, nodes):
    import duckdb
    import pyarrow as pa
    con = duckdb.connect()
    frame = pa.table({"src": src, "dst": dst})
    con.register("frame", frame)
    con.execute("CREATE TABLE edges AS SELECT src, dst FROM frame")
    con.unregister("frame")
    con.execute("CREATE TABLE roots(node BIGINT)")
    return con


def _duckdb_roots(con, roots):
    con.execute("DELETE FROM roots")
    con.executemany("INSERT INTO roots VALUES (?)", [[int(r)] for r in roots])


def duckdb_reach(con, roots):
    _duckdb_roots(con, roots)
    out = con.execute(DUCKDB_REACH).fetchnumpy()
    return norm_reach(out["node"])


def duckdb_bfs(con, roots):
    _duckdb_roots(con, roots)
    out = con.execute(DUCKDB_BFS).fetchnumpy()
    return norm_pairs(out["node"], out["dist"])


def duckdb_wcc(con, roots=None):
    out = con.execute(DUCKDB_WCC).fetchnumpy()
    return norm_pairs(out["node"], out["label"])


def duckdb_apply(con, change):
    op, u, v = change
    if op == "+":
        con.execute("INSERT INTO edges VALUES (?, ?)", [u, v])
    else:  # remove one copy of the edge
        con.execute("DELETE FROM edges WHERE rowid = (SELECT min(rowid) FROM edges WHERE src = ? AND dst = ?)",
                    [u, v])


# -- PySpark (DataFrame iteration, local[2]) -------------------------------------------------------------

SPARK_CHECKPOINT_EVERY = 3


def pyspark_version():
    import pyspark
    return pyspark.__version__


def pyspark_setup():
    """The session (JVM start-up; not part of the measured load-to-answer)."""
    import kpgnb.spark as ks
    return ks.session(app="bench.graphs", cores=2)


def pyspark_build(src, dst, nodes, spark=None):
    import pyarrow as pa
    spark = spark or pyspark_setup()
    edges = spark.createDataFrame(pa.table({"src": src, "dst": dst})).cache()
    edges.count()
    return spark, edges


def _spark_frame(spark, **cols):
    import pyarrow as pa
    return spark.createDataFrame(pa.table({k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}))


def _spark_collect(df, *cols):
    t = df.toArrow()
    return [t.column(c).to_numpy() for c in cols]


def _spark_frontier_loop(state, roots, with_dist: bool):
    """Semi-naive BFS: the frontier (nodes first found in the last round) joins the edges; the targets not
    yet visited form the next frontier. Lineage is cut with localCheckpoint every few rounds. ``roots``:
    an array, or a Spark DataFrame with a ``node`` column (bench.spark_scaleout's, shared with
    kp.spark.run)."""
    from pyspark.sql import functions as F
    spark, edges = state
    e = edges.select(F.col("src").alias("node"), F.col("dst"))
    if hasattr(roots, "sparkSession"):
        start = roots.select(F.col("node").cast("long"))
    else:
        start = _spark_frame(spark, node=roots)
    frontier = start.withColumn("dist", F.lit(0).cast("long")).localCheckpoint()
    visited = frontier
    d = 0
    while True:
        d += 1
        nxt = (frontier.join(e, "node").select(F.col("dst").alias("node")).distinct()
               .join(visited.select("node"), "node", "left_anti").withColumn("dist", F.lit(d).cast("long"))
               .localCheckpoint())
        if nxt.count() == 0:
            break
        visited = visited.unionByName(nxt)
        if d % SPARK_CHECKPOINT_EVERY == 0:
            visited = visited.localCheckpoint()
        frontier = nxt
    if with_dist:
        n, dist = _spark_collect(visited, "node", "dist")
        return norm_pairs(n, dist)
    (n,) = _spark_collect(visited, "node")
    return norm_reach(n)


def pyspark_reach(state, roots):
    return _spark_frontier_loop(state, roots, False)


def pyspark_bfs(state, roots):
    return _spark_frontier_loop(state, roots, True)


def pyspark_wcc(state, roots=None):
    """Semi-naive min-label propagation: only the nodes whose label dropped last round send it on."""
    from pyspark.sql import functions as F
    spark, edges = state
    sym = edges.select("src", "dst").unionByName(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    sym = sym.localCheckpoint()
    labels = sym.select(F.col("src").alias("node")).distinct().withColumn("label", F.col("node")).localCheckpoint()
    changed = labels
    rounds = 0
    while True:
        rounds += 1
        offers = (changed.join(sym, changed.node == sym.src).groupBy(sym.dst.alias("node"))
                  .agg(F.min("label").alias("offer")))
        improved = (offers.join(labels, "node").where(F.col("offer") < F.col("label"))
                    .select("node", F.col("offer").alias("label")).localCheckpoint())
        if improved.count() == 0:
            break
        labels = (labels.join(improved.withColumnRenamed("label", "new"), "node", "left")
                  .select("node", F.coalesce("new", "label").alias("label")))
        if rounds % SPARK_CHECKPOINT_EVERY == 0:
            labels = labels.localCheckpoint()
        changed = improved
    n, lab = _spark_collect(labels, "node", "label")
    return norm_pairs(n, lab)


# -- Pathway (pw.iterate, run as a batch) ----------------------------------------------------------------


def pathway_version():
    import pathway
    return pathway.__version__


def pathway_build(src, dst, nodes, workdir=None):
    """Pathway evaluates the whole program at once (read, iterate, table_to_pandas), so each query times
    everything from the input file. Its fastest static input is a CSV file read by ``pw.io.csv.read(...,
    mode="static")`` (Rust parser): 2.9 s for 1,000,000 edges here, against 50 s through
    ``pw.debug.table_from_pandas`` (a Python loop over the rows). The "build" is writing that file."""
    import tempfile
    import pandas as pd
    fd, path = tempfile.mkstemp(suffix=".csv", prefix="bench-graphs-edges-", dir=workdir)
    os.close(fd)
    pd.DataFrame({"src": src, "dst": dst}).to_csv(path, index=False)
    return path


def _pw_edges(path):
    import pathway as pw

    class Edge(pw.Schema):
        src: int
        dst: int
    return pw.io.csv.read(path, schema=Edge, mode="static")


def _pw_roots(roots):
    import pandas as pd
    import pathway as pw
    return pw.debug.table_from_pandas(pd.DataFrame({"node": np.asarray(roots, dtype=np.int64)}))


def pathway_bfs_table(edges, roots):
    """BFS distances as a Pathway table (node, dist): iterate a join with the edges and a min per node."""
    import pathway as pw
    start = roots.select(node=roots.node, dist=0)

    def step(dist, edges, start):
        hop = dist.join(edges, dist.node == edges.src).select(node=edges.dst, dist=dist.dist + 1)
        cand = pw.Table.concat_reindex(hop, start)
        return dict(dist=cand.groupby(cand.node).reduce(cand.node, dist=pw.reducers.min(cand.dist)))
    return pw.iterate(step, dist=pw.iterate_universe(start), edges=edges, start=start).dist


def pathway_reach_table(edges, roots):
    import pathway as pw
    start = roots.select(node=roots.node)

    def step(reach, edges, start):
        hop = reach.join(edges, reach.node == edges.src).select(node=edges.dst)
        cand = pw.Table.concat_reindex(hop, start)
        return dict(reach=cand.groupby(cand.node).reduce(cand.node))
    return pw.iterate(step, reach=pw.iterate_universe(start), edges=edges, start=start).reach


def pathway_wcc_table(edges):
    import pathway as pw
    sym = pw.Table.concat_reindex(edges.select(src=edges.src, dst=edges.dst),
                                  edges.select(src=edges.dst, dst=edges.src))
    start = sym.groupby(sym.src).reduce(node=sym.src, label=sym.src)

    def step(cc, sym, start):
        hop = cc.join(sym, cc.node == sym.src).select(node=sym.dst, label=cc.label)
        cand = pw.Table.concat_reindex(hop, start)
        return dict(cc=cand.groupby(cand.node).reduce(cand.node, label=pw.reducers.min(cand.label)))
    return pw.iterate(step, cc=pw.iterate_universe(start), sym=sym, start=start).cc


def _pw_run(table, cols):
    import pathway as pw
    out = pw.debug.table_to_pandas(table, include_id=False)
    pw.internals.parse_graph.G.clear()
    return [out[c].to_numpy() for c in cols]


def pathway_reach(frame, roots):
    (n,) = _pw_run(pathway_reach_table(_pw_edges(frame), _pw_roots(roots)), ["node"])
    return norm_reach(n)


def pathway_bfs(frame, roots):
    n, d = _pw_run(pathway_bfs_table(_pw_edges(frame), _pw_roots(roots)), ["node", "dist"])
    return norm_pairs(n, d)


def pathway_wcc(frame, roots=None):
    n, lab = _pw_run(pathway_wcc_table(_pw_edges(frame)), ["node", "label"])
    return norm_pairs(n, lab)


PEERS = {
    "igraph": {"module": "igraph", "version": igraph_version, "build": igraph_build,
               "reach": igraph_reach, "bfs": igraph_bfs, "wcc": igraph_wcc, "apply": igraph_apply},
    "networkx": {"module": "networkx", "version": networkx_version, "build": networkx_build,
                 "reach": networkx_reach, "bfs": networkx_bfs, "wcc": networkx_wcc},
    "duckdb": {"module": "duckdb", "version": duckdb_version, "warm": duckdb_warm, "info": duckdb_info, "build": duckdb_build,
               "reach": duckdb_reach, "bfs": duckdb_bfs, "wcc": duckdb_wcc, "apply": duckdb_apply},
    "pyspark": {"module": "pyspark", "version": pyspark_version, "setup": pyspark_setup, "build": pyspark_build,
                "reach": pyspark_reach, "bfs": pyspark_bfs, "wcc": pyspark_wcc},
    "pathway": {"module": "pathway", "version": pathway_version, "build": pathway_build,
                "reach": pathway_reach, "bfs": pathway_bfs, "wcc": pathway_wcc, "cleanup": os.unlink},
}


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


# -- Pathway in streaming mode ----------------------------------------------------------------------------


def pathway_stream_bfs(src, dst, nodes, roots, changes, workdir=None, check_every: int = 0, on_progress=None,
                       on_initial=None):
    """Pathway maintaining BFS distances while single-edge changes arrive, in a closed loop.

    The initial edges come from a static CSV file (the fastest bulk input; feeding 1,000,000 rows through
    the Python connector's ``next`` took 80 s here), the changes from a ``pw.io.python.ConnectorSubject``
    driven by this process's driver thread: a row (cid, eid, src, dst, op) per change, op = +1 inserts edge
    ``eid``, op = -1 removes it (the table of removed edges is subtracted by id, as the CSV source cannot
    retract). The BFS output and the change rows go to one ``pw.io.subscribe``: its ``on_time_end(t)``
    comes once the output is complete for time t (a frontier that cannot pass t before the iteration
    has), and because every change adds a row to that output at its own time, every change gets an
    ``on_time_end`` even when no distance changed. Latency: from handing the change to the subject (which
    calls ``next`` and ``commit`` at once) to the ``on_time_end`` for the change's time.

    ``changes``: list of ("+"|"-", u, v, eid). ``check_every``: with k > 0, every k-th change's result is
    handed to ``on_progress(i, answer)`` (for tests); ``on_initial(seconds)`` is called once the initial
    computation is complete. Returns initial_s, latencies_s, final answer."""
    import queue
    import tempfile
    import threading

    import pandas as pd
    import pathway as pw

    fd, path = tempfile.mkstemp(suffix=".csv", prefix="bench-graphs-stream-", dir=workdir)
    os.close(fd)
    try:
        pd.DataFrame({"eid": np.arange(len(src)), "src": src, "dst": dst}).to_csv(path, index=False)

        class EdgeSchema(pw.Schema):
            eid: int = pw.column_definition(primary_key=True)
            src: int
            dst: int

        class ChangeSchema(pw.Schema):
            cid: int = pw.column_definition(primary_key=True)
            eid: int
            src: int
            dst: int
            op: int

        cmds: queue.Queue = queue.Queue()

        class Changes(pw.io.python.ConnectorSubject):
            def run(self):
                while True:
                    c = cmds.get()
                    if c is None:
                        return
                    self.next(**c)
                    self.commit()

            @property
            def _deletions_enabled(self):
                return False

        initial = pw.io.csv.read(path, schema=EdgeSchema, mode="static")
        ch = pw.io.python.read(Changes(), schema=ChangeSchema, autocommit_duration_ms=None)
        added = ch.filter(ch.op == 1).with_id_from(pw.this.eid).select(pw.this.src, pw.this.dst)
        gone = ch.filter(ch.op == -1).with_id_from(pw.this.eid).select()
        pw.universes.promise_are_pairwise_disjoint(initial, added)
        edges = pw.Table.concat(initial.select(pw.this.src, pw.this.dst), added).difference(gone)
        rt = pw.debug.table_from_pandas(pd.DataFrame({"node": np.asarray(roots, dtype=np.int64)}))
        dist = pathway_bfs_table(edges, rt)
        out = pw.Table.concat_reindex(dist.select(node=dist.node, dist=dist.dist, cid=-1),
                                      ch.select(node=-1, dist=-1, cid=ch.cid))

        cond = threading.Condition()
        st = {"in_time": {}, "end": -1, "dist": {}, "error": None}

        def on_change(key, row, time, is_addition):
            with cond:
                if row["cid"] >= 0:
                    st["in_time"][row["cid"]] = time
                elif is_addition:
                    st["dist"][row["node"]] = row["dist"]
                elif st["dist"].get(row["node"]) == row["dist"]:
                    del st["dist"][row["node"]]

        def on_time_end(time):
            with cond:
                st["end"] = max(st["end"], time)
                cond.notify_all()

        pw.io.subscribe(out, on_change=on_change, on_time_end=on_time_end)

        result = {}

        def reflected(cid):
            t = st["in_time"].get(cid)
            return t is not None and st["end"] >= t

        def answer():
            with cond:
                items = list(st["dist"].items())
            return norm_pairs([k for k, _ in items], [v for _, v in items])

        def driver():
            try:
                t0 = time.perf_counter()
                with cond:   # the initial computation: every source read and the output complete
                    while not (st["end"] >= 0 and len(st["dist"]) > 0):
                        cond.wait(1)
                # the static sources are read and the first time closed; send a no-op change to be sure
                # everything before it is reflected
                cmds.put({"cid": 0, "eid": -1, "src": -1, "dst": -1, "op": 0})
                with cond:
                    while not reflected(0):
                        cond.wait(1)
                result["initial_s"] = time.perf_counter() - t0
                if on_initial is not None:
                    on_initial(result["initial_s"])
                lat = []
                for i, (op, u, v, eid) in enumerate(changes, start=1):
                    t = time.perf_counter()
                    cmds.put({"cid": i, "eid": eid, "src": u, "dst": v, "op": 1 if op == "+" else -1})
                    with cond:
                        while not reflected(i):
                            cond.wait()
                    lat.append(time.perf_counter() - t)
                    if check_every and on_progress is not None and i % check_every == 0:
                        on_progress(i, answer())
                result["latencies_s"] = lat
                result["answer"] = answer()
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                result["error"] = repr(e)
            finally:
                cmds.put(None)

        th = threading.Thread(target=driver, daemon=True)
        t_run = time.perf_counter()
        th.start()
        pw.run(monitoring_level=pw.MonitoringLevel.NONE)
        th.join()
        result["run_s"] = time.perf_counter() - t_run
        pw.internals.parse_graph.G.clear()
        if "error" in result:
            raise RuntimeError(result["error"])
        return result
    finally:
        os.unlink(path)
