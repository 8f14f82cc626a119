"""Multi-worker scaling: throughput of arrange + count and of a join-heavy BFS computation with W workers.

    python -m bench.scaling [--workers 1,2] [--updates 4000000] [--batch 200000] [--nodes 200000 --edges 2000000]
                            [--quick]

Reports updates/s (arrange + count) and edges/s (BFS from scratch) per W, and the speedup over W=1 (none
when W=1 is not among --workers). Every run's answer is checked after its clock stops and before its rate
is reported: the counts against ``np.unique`` of the inserted keys, the BFS distances against a NumPy
breadth-first search (``bench.common.check_counts`` / ``check_bfs``); a wrong one raises ``WrongAnswer``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .common import check_bfs, check_counts, parse_args, table, write_result

QUICK = {"workers": "1,2", "updates": 200_000, "batch": 20_000, "keys": 50_000, "nodes": 10_000,
         "edges": 100_000, "repeats": 1}


def count_throughput(workers: int, updates: int, batch: int, keys: int, seed: int = 0) -> float:
    import kpgnb as kp
    rng = np.random.default_rng(seed)
    data = [rng.integers(0, keys, batch) for _ in range(max(1, updates // batch))]
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("keys", ["k"])
        with eng.dataflow("count") as df:
            view = df.input("keys").count(by="k").view("counts")
        # warm up kernels on a small epoch
        inp.insert({"k": data[0][:1000]})
        inp.advance_to(1)
        eng.wait(view)
        t0 = time.perf_counter()
        for e, d in enumerate(data, start=2):
            inp.insert({"k": d})
            inp.advance_to(e)
            eng.wait(view)
        rate = len(data) * batch / (time.perf_counter() - t0)
        check_counts(view, np.concatenate([data[0][:1000], *data]), "count throughput")
        return rate


def bfs_throughput(workers: int, nodes: int, edges: int, seed: int = 0) -> float:
    import kpgnb as kp
    from kpgnb.graphs import bfs
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edges", ["src", "dst"])
        r_in = eng.input("roots", ["node"])
        e_in.insert({"src": src, "dst": dst})
        roots = rng.choice(nodes, 4, replace=False)
        r_in.insert({"node": roots})
        e_in.advance_to(1)
        r_in.advance_to(1)
        with eng.dataflow("edges") as df:
            df.input("edges").arrange_by("src").export("g")
        eng.wait()
        # warm up on a tiny graph, then time BFS over the shared arrangement
        t0 = time.perf_counter()
        with eng.dataflow("bfs") as df:
            view = bfs(df.use("g"), df.input("roots")).view("dist")
        eng.wait(view)
        rate = edges / (time.perf_counter() - t0)
        check_bfs(view, src, dst, nodes, roots, "BFS throughput")
        return rate


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default=None, help="comma-separated worker counts (default 1,2 and, with more "
                                                   "cores, 4,8,16 up to the core count)")
    p.add_argument("--updates", type=int, default=4_000_000)
    p.add_argument("--batch", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--edges", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=3)
    a = parse_args(p, argv, QUICK, positive=("updates", "batch", "keys", "repeats", "edges"),
                   least={"nodes": 4})
    cores = os.cpu_count() or 1
    ws = [int(x) for x in a.workers.split(",")] if a.workers else [1, 2] + [w for w in (4, 8, 16) if w <= cores]
    # warm-up run compiles every kernel
    count_throughput(1, a.batch * 2, a.batch, a.keys)
    bfs_throughput(1, 2000, 20000)
    rows, res = [], {"params": {"workers": ws, "updates": a.updates, "batch": a.batch, "keys": a.keys,
                                "nodes": a.nodes, "edges": a.edges, "repeats": a.repeats,
                                "speedup_over": "W=1" if 1 in ws else None},
                     "cores": cores, "runs": {}}
    for w in ws:
        cs = [count_throughput(w, a.updates, a.batch, a.keys) for _ in range(a.repeats)]
        bs = [bfs_throughput(w, a.nodes, a.edges) for _ in range(a.repeats)]
        res["runs"][w] = {"count_updates_per_s": max(cs), "bfs_edges_per_s": max(bs),
                          "count_runs_updates_per_s": cs, "bfs_runs_edges_per_s": bs}
    base = res["runs"].get(1)  # the speedup is over one worker; without a W=1 run there is none
    for w in ws:
        r = res["runs"][w]
        r["count_speedup"] = r["count_updates_per_s"] / base["count_updates_per_s"] if base else None
        r["bfs_speedup"] = r["bfs_edges_per_s"] / base["bfs_edges_per_s"] if base else None
        rows.append({"workers": w, "arrange+count updates/s": r["count_updates_per_s"],
                     "speedup": r["count_speedup"], "BFS edges/s": r["bfs_edges_per_s"], "BFS speedup": r["bfs_speedup"]})
    print(table(rows, ["workers", "arrange+count updates/s", "speedup", "BFS edges/s", "BFS speedup"]))
    if base is None:
        print("no W=1 run in --workers: no speedups")
    print("targets on 2 cores: arrange+count >= 1.6x, BFS >= 1.4x")
    print("wrote", write_result("scaling", res, a.quick))
    return res


if __name__ == "__main__":
    main()
