"""Scale-out on Spark (issue 15): BFS and WCC through ``kpgnb.spark.run`` against the in-kernel engine,
against a hand-written PySpark loop, and as the graph doubles.

    python -m bench.spark_scaleout [--nodes 1000000] [--edges 10000000] [--doublings 2] [--queries bfs,wcc]
                                   [--workers 2] [--engine-scales 1] [--cores 2] [--partitions 4]
                                   [--spark-memory 6g] [--timeout 1800] [--seed 0] [--tag TAG] [--quick]

The graph is bench.graphs' (``make_graph``: ``--edges`` edges with src and dst drawn uniformly from
``--nodes`` nodes, 3 roots, duplicates and self-loops kept). Scale s (1, 2, 4, ... up to 2^``--doublings``)
has s times the nodes and s times the edges, same seed. The queries are ``kpgnb.graphs.bfs(edges, roots)``
(node, dist) and ``kpgnb.graphs.wcc(edges)`` (node, label), and the engine and the Spark backend run the
same builder function (``build_bfs`` / ``build_wcc`` below): inside ``with eng.dataflow(q) as df`` and
through ``kp.spark.run(build, inputs={...}, spark=spark)``.

What is timed, per scale and query (seconds, ``time.perf_counter``):

- Spark backend: the input DataFrames exist already (``spark.createDataFrame`` of the Arrow edge and
  root tables, ``.cache()``, ``.count()``: "spark load", timed once per scale and reported apart).
  ``total`` = ``kp.spark.run(...)`` (recording the builder, every loop round as Spark jobs) + reading the
  view (``toArrow()`` of the returned DataFrame) + putting it in the normal form of bench.peers.
- Hand-written PySpark BFS: bench.peers' semi-naive frontier loop (``pyspark_bfs``: frontier join edges,
  distinct, anti-join the visited nodes, ``localCheckpoint`` each round) on the same session and the same
  cached edge and root DataFrames; ``total`` = the loop + ``toArrow()`` of the answer + the normal form,
  from the same starting point as the backend. WCC has no hand-written loop here (bench.graphs has one).
- Engine (``kp.Engine(workers=--workers)``, kernels warmed first and timed apart): ``load`` =
  ``eng.input`` of the NumPy arrays + ``advance_to`` + ``eng.wait()``, once per scale; ``query`` =
  installing the dataflow + ``eng.wait(view)``; ``read`` = ``view.columns()`` + the normal form. It runs
  at the scales of ``--engine-scales`` (the base scale by default: the engine is the in-memory baseline,
  the doublings are the backend's).

A Spark session is started first (not timed into anything), then a warm-up: the backend's and the
hand-written BFS on an 8-node graph (timed apart, answers checked), since a session's first jobs pay for
the JVM's JIT and the Python workers' start (the first backend BFS of a session took 2.6x its second
here). Each Spark step gets a job group: its jobs, the stages that ran and their tasks are reported, and
after ``--timeout`` seconds its jobs are cancelled and the step is reported as "> T s" (that query is then
skipped at the larger scales).

Ratios: backend / engine (``total`` against the engine's query + read, both from loaded inputs; and
``from arrays``: spark load + total against load + query + read), backend / hand-written (BFS), and the
growth per doubling, time(2s) / time(s) of the backend's total (2.0 is linear).

Every answer (engine, backend, hand-written) is checked against igraph (networkx where igraph is missing)
on the same graph before any time is reported; a mismatch is "wrong answer", never a number. Results:
bench/results/spark_scaleout.json (spark_scaleout-quick.json for --quick, spark_scaleout-TAG.json with
--tag).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import threading
import time

import numpy as np

from . import peers as P
from .common import parse_args, table, write_result
from .graphs import check, make_graph, reference

# --quick: a tiny dense graph (few BFS levels), BFS only, one doubling. The backend's cost is per loop round
# and per job, not per row, at this size; --queries bfs,wcc adds WCC (~15 rounds, about a minute more).
QUICK = {"nodes": 200, "edges": 1000, "doublings": 1, "partitions": 2, "spark_memory": "1g",
         "engine_scales": "all", "timeout": 300.0, "queries": "bfs"}
QUERIES = ("bfs", "wcc")
ROOTS = 3
WARM = {"nodes": 8, "edges": 40, "seed": 12345, "roots": ROOTS}   # the warm-up's graph (BFS only): few rounds


# -- the builder functions: the same for the engine and for kp.spark.run ----------------------------------


def build_bfs(df):
    from kpgnb.graphs import bfs
    return bfs(df.input("edges"), df.input("roots")).view("bfs")


def build_wcc(df):
    from kpgnb.graphs import wcc
    return wcc(df.input("edges")).view("wcc")


BUILDERS = {"bfs": build_bfs, "wcc": build_wcc}
VALUE = {"bfs": "dist", "wcc": "label"}


def answer_of(query: str, cols: dict):
    """A view's columns (or an Arrow table's) in the normal form of bench.peers."""
    return P.norm_pairs(np.asarray(cols["node"]), np.asarray(cols[VALUE[query]]))


# -- checking -------------------------------------------------------------------------------------------


def verdict(query: str, times: dict, got, want) -> dict:
    """A step's result: its times and ``status: ok`` when ``got`` is the reference answer ``want``; else
    ``status: wrong answer`` and what differs, and no times (a wrong answer is not a number)."""
    bad = check(query, got, want)
    if bad is None:
        return {"status": "ok", "answer": "ok", **times}
    extra = {k: v for k, v in times.items() if not k.endswith("_s")}   # job counts etc. stay
    return {"status": "wrong answer", "answer": "wrong answer", "detail": bad, **extra}


# -- Spark steps: job groups, deadlines -------------------------------------------------------------------


class Deadline:
    """Cancels a Spark job group once ``seconds`` have passed (and every second after, in case the driver
    submits more jobs) until the step leaves the ``with`` block; ``fired`` tells whether it did."""

    def __init__(self, sc, group: str, seconds: float):
        self.sc, self.group, self.seconds = sc, group, seconds
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name=f"deadline-{group}")

    def _watch(self):
        if self._done.wait(self.seconds):
            return
        self.fired = True
        while not self._done.is_set():
            try:
                self.sc.cancelJobGroup(self.group)
            except Exception:  # noqa: BLE001 - the session went away: nothing left to cancel
                return
            self._done.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(5)
        return False


class SparkSteps:
    """Runs each Spark step in a job group of its own, with a deadline, and counts its jobs and tasks."""

    def __init__(self, spark, timeout: float):
        self.spark = spark
        self.sc = spark.sparkContext
        self.timeout = timeout
        self.n = 0

    def run(self, label: str, fn):
        """(result or None, {step_s, jobs, stages, tasks} + {"status": why} when it failed). ``step_s`` is
        the step's wall time (the whole of ``fn``)."""
        self.n += 1
        group = f"bench.spark_scaleout-{self.n}-{label}"
        self.sc.setJobGroup(group, label, interruptOnCancel=True)
        dl = Deadline(self.sc, group, self.timeout)
        t0 = time.perf_counter()
        try:
            with dl:
                out = fn()
        except Exception as e:  # noqa: BLE001 - reported as the step's status
            why = (f"> {self.timeout:g} s" if dl.fired
                   else f"error: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
            return None, {"status": why, "step_s": time.perf_counter() - t0, **self.counts(group)}
        finally:
            self.sc.setLocalProperty("spark.jobGroup.id", None)
            self.sc.setLocalProperty("spark.job.description", None)
        return out, {"step_s": time.perf_counter() - t0, **self.counts(group)}

    def counts(self, group: str) -> dict:
        """The group's jobs, the stages that ran (a stage whose shuffle output existed is skipped) and
        their completed tasks."""
        st = self.sc.statusTracker()
        jobs = st.getJobIdsForGroup(group)
        stages = set()
        for j in jobs:
            info = st.getJobInfo(j)
            if info is not None:
                stages.update(info.stageIds)
        ran = tasks = 0
        for s in stages:
            info = st.getStageInfo(s)
            if info is not None and info.numCompletedTasks:
                ran += 1
                tasks += info.numCompletedTasks
        return {"jobs": len(jobs), "stages": ran, "tasks": tasks}


def spark_inputs(spark, src, dst, roots):
    """The cached input DataFrames (what both Spark sides start from)."""
    import pyarrow as pa
    edges = spark.createDataFrame(pa.table({"src": src, "dst": dst})).cache()
    edges.count()
    rdf = spark.createDataFrame(pa.table({"node": np.asarray(roots, dtype=np.int64)})).cache()
    rdf.count()
    return edges, rdf


def backend_query(spark, query: str, edges, rdf) -> tuple:
    """kp.spark.run + toArrow + normal form: (answer, times)."""
    import kpgnb as kp
    inputs = {"edges": edges, "roots": rdf} if query == "bfs" else {"edges": edges}
    t0 = time.perf_counter()
    out = kp.spark.run(BUILDERS[query], inputs=inputs, spark=spark)
    t1 = time.perf_counter()
    tab = out[query].toArrow()
    ans = answer_of(query, {c: tab.column(c).to_numpy() for c in tab.column_names})
    t2 = time.perf_counter()
    return ans, {"run_s": t1 - t0, "read_s": t2 - t1, "total_s": t2 - t0}


def hand_bfs(spark, edges, rdf) -> tuple:
    """bench.peers' PySpark BFS loop (+ its toArrow and normal form) on the same DataFrames."""
    t0 = time.perf_counter()
    ans = P.pyspark_bfs((spark, edges), rdf)
    return ans, {"total_s": time.perf_counter() - t0}


# -- the engine -------------------------------------------------------------------------------------------


def engine_side(src, dst, roots, queries, workers: int, timeout: float) -> tuple:
    """({query: (answer, times)}, load times): the same builders in ``eng.dataflow`` blocks on one engine
    whose inputs are loaded once."""
    import kpgnb as kp
    out = {}
    with kp.Engine(workers=workers) as eng:
        t0 = time.perf_counter()
        e_in = eng.input("edges", ["src", "dst"], rows={"src": src, "dst": dst})
        e_in.advance_to(1)
        r_in = eng.input("roots", ["node"], rows={"node": np.asarray(roots, dtype=np.int64)})
        r_in.advance_to(1)
        eng.wait(timeout=timeout)
        load = {"load_s": time.perf_counter() - t0}
        for q in queries:
            try:
                t1 = time.perf_counter()
                with eng.dataflow(q) as df:
                    view = BUILDERS[q](df)
                eng.wait(view, timeout=timeout)
                t2 = time.perf_counter()
                ans = answer_of(q, view.columns())
                t3 = time.perf_counter()
                out[q] = (ans, {"query_s": t2 - t1, "read_s": t3 - t2, "total_s": t3 - t1})
                eng.drop(q)
            except TimeoutError:
                out[q] = (None, {"status": f"> {timeout:g} s"})
    return out, load


# -- the program ------------------------------------------------------------------------------------------


def scales_of(doublings: int) -> list:
    return [1 << k for k in range(doublings + 1)]


def engine_scales(arg: str, scales: list) -> list:
    if arg == "all":
        return list(scales)
    want = [int(x) for x in arg.split(",") if x.strip()]
    bad = [s for s in want if s not in scales]
    if bad:
        raise ValueError(f"--engine-scales {arg!r}: {bad} are not among the scales {scales}")
    return want


def run_scale(spec, scale, queries, steps, spark, workers, with_engine, timeout, skip, log) -> dict:
    """One graph size: reference, engine (if ``with_engine``), Spark inputs, backend per query, hand BFS."""
    src, dst, roots = make_graph(spec)
    rec = {"scale": scale, "nodes": spec["nodes"], "edges": spec["edges"], "roots": roots.tolist(), "queries": {}}
    t0 = time.perf_counter()
    want, ref = {}, None
    for q in queries:
        want[q], ref = reference(q, src, dst, spec["nodes"], roots)
    rec["reference"] = ref
    rec["reference_s"] = time.perf_counter() - t0
    for q in queries:
        rec["queries"][q] = {"rows": len(want[q][0])}
        if q == "bfs":
            rec["queries"][q]["levels"] = int(want[q][1].max()) if len(want[q][1]) else 0
        else:
            rec["queries"][q]["components"] = int(len(np.unique(want[q][1])))
    log(f"  scale {scale}: {spec['nodes']:,} nodes, {spec['edges']:,} edges; reference ({ref}) "
        f"{rec['reference_s']:.1f} s")

    if with_engine:
        got, load = engine_side(src, dst, roots, queries, workers, timeout)
        rec["engine_load_s"] = load["load_s"]
        for q in queries:
            ans, times = got[q]
            r = verdict(q, times, ans, want[q]) if ans is not None else times
            rec["queries"][q]["engine"] = r
            log(f"    engine W={workers} {q}: {_say(r)} (load {load['load_s']:.2f} s apart)")

    frames, info = steps.run("spark load", lambda: spark_inputs(spark, src, dst, roots))
    rec["spark_load"] = {"s": info.pop("step_s"), **info}
    if frames is None:
        log(f"    spark load failed: {info['status']}")
        for q in queries:
            rec["queries"][q]["backend"] = {"status": "not run (spark load failed)"}
        return rec
    edges, rdf = frames
    log(f"    spark load (createDataFrame, cache, count): {rec['spark_load']['s']:.2f} s")
    try:
        for q in queries:
            if q in skip:
                rec["queries"][q]["backend"] = {"status": skip[q]}
                if q == "bfs":
                    rec["queries"][q]["hand"] = {"status": skip[q]}
                continue
            res, info = steps.run(f"backend {q}", lambda: backend_query(spark, q, edges, rdf))
            r = verdict(q, {**res[1], **info}, res[0], want[q]) if res is not None else info
            rec["queries"][q]["backend"] = r
            log(f"    backend {q}: {_say(r)}")
            if r["status"].startswith(">"):
                skip[q] = f"skipped: {r['status']} at scale {scale}"
            if q == "bfs":
                res, info = steps.run("hand bfs", lambda: hand_bfs(spark, edges, rdf))
                r = verdict(q, {**res[1], **info}, res[0], want[q]) if res is not None else info
                rec["queries"][q]["hand"] = r
                log(f"    hand-written PySpark bfs: {_say(r)}")
    finally:
        edges.unpersist()
        rdf.unpersist()
    return rec


def _say(r: dict) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status')}" + (f" ({r['detail']})" if r.get("detail") else "")
    jobs = f", {r['jobs']} jobs, {r['tasks']} tasks" if "jobs" in r else ""
    return f"{r['total_s']:.2f} s{jobs}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=10_000_000)
    p.add_argument("--doublings", type=int, default=2, help="the backend also runs at 2x, 4x, ... the graph")
    p.add_argument("--queries", default="bfs,wcc")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="engine workers")
    p.add_argument("--engine-scales", default="1",
                   help="the scales (1, 2, 4, ...) the engine runs at, comma-separated, or 'all'")
    p.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    p.add_argument("--partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    p.add_argument("--spark-memory", default="6g", help="spark.driver.memory (local mode: all of Spark's heap)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds a Spark step (load, backend query, hand loop) or an engine query may take")
    p.add_argument("--no-warmup", action="store_true", help="skip the Spark warm-up")
    p.add_argument("--tag", default="", help="write bench/results/spark_scaleout-TAG.json instead (a partial run)")
    a = parse_args(p, argv, QUICK)
    queries = [q.strip() for q in a.queries.split(",") if q.strip()]
    for q in queries:
        if q not in QUERIES:
            p.error(f"unknown query {q!r}; choose from {','.join(QUERIES)}")
    if a.doublings < 0:
        p.error("--doublings must be >= 0")
    scales = scales_of(a.doublings)
    try:
        eng_scales = engine_scales(a.engine_scales, scales)
    except ValueError as e:
        p.error(str(e))
    if importlib.util.find_spec("pyspark") is None:
        p.error("pyspark is not installed (the [spark] extra)")
    cmd = "python -m bench.spark_scaleout " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"bench.spark_scaleout: {a.nodes:,} nodes, {a.edges:,} edges, scales {scales}, queries "
          f"{','.join(queries)}, engine W={a.workers} at scales {eng_scales}, Spark local[{a.cores}], "
          f"{a.partitions} shuffle partitions, timeout {a.timeout:g} s/step", flush=True)
    load_start = os.getloadavg()

    from kpgnb.engine.warmup import warm_kernels
    import kpgnb as kp
    from pyspark import SparkContext
    t0 = time.perf_counter()
    warm_s = warm_kernels()
    print(f"  engine kernels ready in {time.perf_counter() - t0:.1f} s", flush=True)
    ours = SparkContext._active_spark_context is None
    t0 = time.perf_counter()
    conf = {"spark.driver.memory": a.spark_memory} if ours else {}   # the JVM's heap: only at its start
    spark = kp.spark.session(app="bench.spark_scaleout", cores=a.cores, partitions=a.partitions, **conf)
    session_s = time.perf_counter() - t0
    print(f"  Spark session in {session_s:.1f} s ({'started' if ours else 'the running one'})", flush=True)
    spark_master = spark.sparkContext.master
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    steps = SparkSteps(spark, a.timeout)
    log = lambda s: print(s, flush=True)  # noqa: E731
    results = {"sizes": []}
    try:
        if not a.no_warmup:
            t0 = time.perf_counter()
            warm = run_scale(WARM, 0, ["bfs"], steps, spark, a.workers, False, a.timeout, {}, lambda s: None)
            results["warmup"] = {"s": time.perf_counter() - t0,
                                 **{k: v.get("status") for k, v in warm["queries"]["bfs"].items()
                                    if isinstance(v, dict)}}
            print(f"  Spark warm-up (backend and hand-written BFS, {WARM['nodes']} nodes): "
                  f"{results['warmup']['s']:.1f} s", flush=True)
        skip = {}
        for s in scales:
            spec = {"nodes": a.nodes * s, "edges": a.edges * s, "seed": a.seed, "roots": ROOTS}
            results["sizes"].append(run_scale(spec, s, queries, steps, spark, a.workers, s in eng_scales,
                                              a.timeout, skip, log))
    finally:
        if ours:
            spark.stop()

    rows, growth, ratios, checked = summarize(results["sizes"], queries)
    print("\nseconds from loaded inputs (engine: query + read; backend: kp.spark.run + read; hand-written: "
          "loop + read);\nbackend/engine and backend/hand above 1: the backend is slower")
    print(table(rows, ["scale", "nodes", "edges", "query", "engine s", "backend s", "hand s", "backend/engine",
                       "backend/hand", "backend jobs", "note"]))
    print()
    print(table(growth, ["query", "system", *[f"{s}x s" for s in scales],
                         *[f"{s}x/{s // 2}x" for s in scales[1:]]]))
    print(f"\nanswers checked: {checked['checked']}, wrong: {len(checked['wrong'])}, failed steps: "
          f"{len(checked['failed'])}")
    import pyspark
    payload = {"command": cmd,
               "params": {"nodes": a.nodes, "edges": a.edges, "doublings": a.doublings, "scales": scales,
                          "queries": queries, "seed": a.seed, "roots": ROOTS, "workers": a.workers,
                          "engine_scales": eng_scales, "cores": a.cores, "partitions": partitions,
                          "spark_memory": a.spark_memory, "timeout_s": a.timeout,
                          "spark_master": spark_master, "session_started_here": ours,
                          "load_average_start": load_start, "load_average_end": os.getloadavg()},
               "versions": {"numpy": np.__version__, "pyspark": pyspark.__version__,
                            "igraph": _version("igraph")},
               "warm_kernels_s": warm_s, "session_s": session_s, **results,
               "ratios": ratios, "checked": checked, "table": rows, "growth": growth}
    print("wrote", write_result(f"spark_scaleout-{a.tag}" if a.tag else "spark_scaleout", payload, a.quick))
    return payload


def _version(mod):
    try:
        return importlib.import_module(mod).__version__
    except Exception:  # noqa: BLE001
        return None


# -- tables -----------------------------------------------------------------------------------------------


def _ok(r):
    return r is not None and r.get("status") == "ok"


def summarize(sizes: list, queries) -> tuple:
    """(rows, growth rows, ratios, checked): the table of each scale and query, the growth of each
    system's time per doubling, the ratios the issue asks for, and what was checked."""
    rows, ratios = [], {q: {"backend_over_engine": {}, "backend_over_engine_from_arrays": {},
                            "backend_over_hand": {}, "growth": {}} for q in queries}
    checked = {"checked": 0, "wrong": [], "failed": []}
    for rec in sizes:
        s = rec["scale"]
        for q in queries:
            qr = rec["queries"][q]
            e, b, h = qr.get("engine"), qr.get("backend"), qr.get("hand")
            for name, r in (("engine", e), ("backend", b), ("hand", h)):
                if r is None:
                    continue
                if r.get("answer") in ("ok", "wrong answer"):
                    checked["checked"] += 1
                if r.get("status") == "wrong answer":
                    checked["wrong"].append(f"{name} {q} scale {s}: {r.get('detail')}")
                elif r.get("status") != "ok":
                    checked["failed"].append(f"{name} {q} scale {s}: {r.get('status')}")
            notes = [f"{n}: {r['status']}" for n, r in (("engine", e), ("backend", b), ("hand", h))
                     if r is not None and not _ok(r)]
            be = b["total_s"] / e["total_s"] if _ok(b) and _ok(e) else None
            bh = b["total_s"] / h["total_s"] if _ok(b) and _ok(h) else None
            if be is not None:
                ratios[q]["backend_over_engine"][str(s)] = be
                load = (rec.get("spark_load") or {}).get("s")
                if load is not None and rec.get("engine_load_s") is not None:
                    ratios[q]["backend_over_engine_from_arrays"][str(s)] = \
                        (load + b["total_s"]) / (rec["engine_load_s"] + e["total_s"])
            if bh is not None:
                ratios[q]["backend_over_hand"][str(s)] = bh
            rows.append({"scale": s, "nodes": rec["nodes"], "edges": rec["edges"], "query": q,
                         "engine s": e["total_s"] if _ok(e) else None,
                         "backend s": b["total_s"] if _ok(b) else None,
                         "hand s": h["total_s"] if _ok(h) else None,
                         "backend/engine": be, "backend/hand": bh,
                         "backend jobs": b.get("jobs") if b else None, "note": "; ".join(notes)})
    growth = []
    scales = [rec["scale"] for rec in sizes]
    for q in queries:
        for name in ("backend", "hand", "engine"):
            t = {rec["scale"]: rec["queries"][q].get(name) for rec in sizes}
            if not any(_ok(r) for r in t.values()):
                continue
            row = {"query": q, "system": {"hand": "hand-written"}.get(name, name)}
            for s in scales:
                row[f"{s}x s"] = t[s]["total_s"] if _ok(t[s]) else None
            for s in scales[1:]:
                if _ok(t[s]) and _ok(t.get(s // 2)):
                    g = t[s]["total_s"] / t[s // 2]["total_s"]
                    row[f"{s}x/{s // 2}x"] = g
                    if name == "backend":
                        ratios[q]["growth"][f"{s}x/{s // 2}x"] = g
            growth.append(row)
    return rows, growth, ratios, checked


if __name__ == "__main__":
    main()
