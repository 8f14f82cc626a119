"""Closed-loop single-update latency (insert one row, advance the epoch, wait for the view) and the
install latency of a dataflow that imports an exported arrangement.

    python -m bench.latency [--keys 1000000] [--updates 2000] [--import-records 10000000] [--workers 1] [--quick]

Measures: a count over --keys keys; BFS on the demo graph (100,000 nodes, 1,000,000 edges); installing a
dataflow that joins 10 query keys with an exported --import-records arrangement, against building the
same dataflow without the export.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import check_bfs, check_counts, check_rows, equi_join, parse_args, percentile, table, write_result

QUICK = {"keys": 10_000, "updates": 200, "bfs_updates": 50, "nodes": 5_000, "edges": 50_000,
         "import_records": 100_000}


def count_latency(keys: int, updates: int, workers: int, seed: int = 0) -> dict:
    import kpgnb as kp
    rng = np.random.default_rng(seed)
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("keys", ["k"])
        first = rng.integers(0, keys, keys)
        inp.insert({"k": first})
        inp.advance_to(1)
        with eng.dataflow("count") as df:
            view = df.input("keys").count(by="k").view("counts")
        eng.wait(view)
        lat, more = [], rng.integers(0, keys, updates)
        for e in range(2, updates + 2):
            t0 = time.perf_counter()
            inp.insert([(int(more[e - 2]),)])
            inp.advance_to(e)
            eng.wait(view)
            lat.append(time.perf_counter() - t0)
        check_counts(view, np.concatenate([first, more]), "count update")
    lat = np.array(lat[len(lat) // 10:]) * 1e3  # drop warm-up
    return {"keys": keys, "updates": len(lat), "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "max_ms": float(lat.max()), "latencies_ms": lat.tolist()}


def bfs_latency(nodes: int, edges: int, updates: int, workers: int, seed: int = 0) -> dict:
    import kpgnb as kp
    from kpgnb.graphs import bfs
    rng = np.random.default_rng(seed)
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edges", ["src", "dst"])
        r_in = eng.input("roots", ["node"])
        src, dst = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
        e_in.insert({"src": src, "dst": dst})
        roots = rng.choice(nodes, 4, replace=False)
        r_in.insert({"node": roots})
        e_in.advance_to(1)
        r_in.advance_to(1)
        with eng.dataflow("bfs") as df:
            view = bfs(df.input("edges").arrange_by("src"), df.input("roots")).view("dist")
        eng.wait(view)
        lat = []
        present = np.ones(edges, bool)  # the original edges not removed
        added = rng.integers(0, nodes, (updates, 2))
        for i in range(updates):
            t0 = time.perf_counter()
            if i % 2:
                e_in.remove([(int(src[i]), int(dst[i]))])
                present[i] = False
            else:
                e_in.insert([(int(added[i, 0]), int(added[i, 1]))])
            e_in.advance_to(i + 2)
            r_in.advance_to(i + 2)
            eng.wait(view)
            lat.append(time.perf_counter() - t0)
        ins = added[0::2]
        check_bfs(view, np.concatenate([src[present], ins[:, 0]]), np.concatenate([dst[present], ins[:, 1]]),
                  nodes, roots, "BFS update")
    lat = np.array(lat[len(lat) // 10:]) * 1e3
    if not len(lat):
        return {"nodes": nodes, "edges": edges, "updates": 0, "p50_ms": None, "p99_ms": None, "max_ms": None,
                "latencies_ms": []}
    return {"nodes": nodes, "edges": edges, "updates": len(lat), "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99), "max_ms": float(lat.max()), "latencies_ms": lat.tolist()}


def install_latency(records: int, queries: int, workers: int, repeats: int = 20, seed: int = 0) -> dict:
    import kpgnb as kp
    rng = np.random.default_rng(seed)
    with kp.Engine(workers=workers) as eng:
        big = eng.input("big", ["k", "v"])
        q = eng.input("q", ["k"])
        bk, bv = rng.integers(0, records, records), rng.integers(0, 1000, records)
        big.insert({"k": bk, "v": bv})
        big.advance_to(1)
        qk = rng.integers(0, records, queries)
        q.insert({"k": qk})
        q.advance_to(1)
        t0 = time.perf_counter()
        with eng.dataflow("base") as df:
            df.input("big").arrange_by("k").export("big_by_k")
        eng.wait()
        export_s = time.perf_counter() - t0
        want_k, want_v = equi_join(qk, bk, bv)  # the reference: NumPy, outside the timed installs
        want = {"k": want_k, "v": want_v}
        with_import = []
        for i in range(repeats):
            t0 = time.perf_counter()
            with eng.dataflow(f"q{i}") as df:
                view = df.input("q").join(df.use("big_by_k"), on="k").view("out")
            eng.wait(view)
            with_import.append(time.perf_counter() - t0)
            check_rows(view, want, f"install (import, repeat {i})")
            eng.drop(f"q{i}")
        t0 = time.perf_counter()
        with eng.dataflow("scratch") as df:
            view = df.input("q").join(df.input("big").arrange_by("k"), on="k").view("out")
        eng.wait(view)
        without = time.perf_counter() - t0
        check_rows(view, want, "install (without export)")
    w = np.array(with_import[1:]) * 1e3
    return {"records": records, "queries": queries, "export_s": export_s, "install_with_import_p50_ms": percentile(w, 50),
            "install_with_import_max_ms": float(w.max()), "install_without_export_ms": without * 1e3,
            "speedup": without * 1e3 / percentile(w, 50), "first_install_ms": with_import[0] * 1e3}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--updates", type=int, default=2000)
    p.add_argument("--bfs-updates", type=int, default=300)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--import-records", type=int, default=10_000_000)
    p.add_argument("--workers", type=int, default=1)
    a = parse_args(p, argv, QUICK, positive=("keys", "updates", "bfs_updates", "edges", "import_records"),
                   least={"nodes": 4})
    if a.bfs_updates > a.edges:
        p.error(f"--bfs-updates {a.bfs_updates}: at most --edges ({a.edges}), whose edges the odd updates remove")
    res = {"workers": a.workers,
           "count": count_latency(a.keys, a.updates, a.workers),
           "bfs": bfs_latency(a.nodes, a.edges, a.bfs_updates, a.workers),
           "install": install_latency(a.import_records, 10, a.workers)}
    rows = [{"measure": f"count update ({a.keys:,} keys)", "p50 ms": res["count"]["p50_ms"],
             "p99 ms": res["count"]["p99_ms"], "target": "p50 <= 1, p99 <= 5"},
            {"measure": f"BFS update ({a.nodes:,} nodes, {a.edges:,} edges)", "p50 ms": res["bfs"]["p50_ms"],
             "p99 ms": res["bfs"]["p99_ms"], "target": "-"},
            {"measure": f"install: import {a.import_records:,} + join 10 keys", "p50 ms":
             res["install"]["install_with_import_p50_ms"], "p99 ms": res["install"]["install_with_import_max_ms"],
             "target": "<= 20"},
            {"measure": "install without export", "p50 ms": res["install"]["install_without_export_ms"],
             "target": f"speedup {res['install']['speedup']:,.0f}x (>= 100x)"}]
    print(table(rows, ["measure", "p50 ms", "p99 ms", "target"]))
    print("wrote", write_result("latency", res, a.quick))
    return res


if __name__ == "__main__":
    main()
