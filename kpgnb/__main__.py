"""``python -m kpgnb demo``: the main job. Builds a random graph, maintains BFS distances from a few
roots, reuses the exported edge arrangement in a second dataflow, and times single-edge updates."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def demo(nodes: int, edges: int, roots: int, updates: int, workers: int | None, seed: int) -> dict:
    import kpgnb as kp
    from kpgnb.engine.warmup import warm_kernels
    from kpgnb.graphs import bfs

    warm_s = warm_kernels()  # compiles on the first run after install, loads cached code afterwards
    rng = np.random.default_rng(seed)
    eng = kp.Engine(workers=workers)
    try:
        t0 = time.perf_counter()
        src = rng.integers(0, nodes, edges)
        dst = rng.integers(0, nodes, edges)
        e_in = eng.input("edges", ["src", "dst"], key="src")  # kept indexed by src: the arrangement BFS joins on
        r_in = eng.input("roots", ["node"])
        e_in.insert({"src": src, "dst": dst})
        root_ids = rng.choice(nodes, size=roots, replace=False)
        r_in.insert({"node": root_ids})
        e_in.advance_to(1)
        r_in.advance_to(1)
        with eng.dataflow("bfs") as df:
            g = df.input("edges").arrange_by("src").export("edges_by_src")  # (the input's own arrangement)
            dist = bfs(g, df.input("roots")).view("dist")
        eng.wait(dist)
        load_s = time.perf_counter() - t0
        # the first dataflow's install included loading; report compute separately from a fresh count
        compute_s = eng.stats()["dataflows"][0]["busy_s"]

        t1 = time.perf_counter()
        with eng.dataflow("out_degree") as df:
            g = df.use("edges_by_src")
            probe = df.input("roots")
            deg = probe.join(g, left_on="node", right_on="src").count(by="node").view("degree")
        eng.wait(deg)
        install_s = time.perf_counter() - t1

        # single-edge changes: inserts of random edges alternating with removals of present ones (the
        # i-th loaded edge, or past the loaded ones an inserted one)
        lat, inserted = [], []
        for i in range(updates):
            t = time.perf_counter()
            if i % 2 == 0:
                inserted.append((int(rng.integers(nodes)), int(rng.integers(nodes))))
                e_in.insert([inserted[-1]])
            else:
                e_in.remove([(int(src[i]), int(dst[i])) if i < edges else inserted.pop()])
            e_in.advance_to(i + 2)
            r_in.advance_to(i + 2)
            eng.wait(dist)
            eng.wait(deg)
            lat.append(time.perf_counter() - t)
        lat_ms = np.array(lat) * 1e3
        d = dist.to_pandas()
        return {
            "nodes": nodes, "edges": edges, "roots": roots, "workers": eng.workers, "warmup_s": warm_s,
            "load_s": load_s, "initial_compute_s": compute_s, "install_second_ms": install_s * 1e3,
            "update_p50_ms": float(np.percentile(lat_ms, 50)) if updates else None,
            "update_p99_ms": float(np.percentile(lat_ms, 99)) if updates else None,
            "reached": int(len(d)), "max_dist": int(d["dist"].max()) if len(d) else 0,
        }
    finally:
        eng.close()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m kpgnb", description="kpgnb command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="random graph, BFS, a second dataflow on the shared arrangement, updates")
    d.add_argument("--nodes", type=int, default=100_000)
    d.add_argument("--edges", type=int, default=1_000_000)
    d.add_argument("--roots", type=int, default=4)
    d.add_argument("--updates", type=int, default=200)
    d.add_argument("--workers", type=int, default=None)
    d.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.cmd == "demo":
        for name in ("nodes", "edges", "roots", "updates"):
            if getattr(a, name) < (1 if name in ("nodes", "roots") else 0):
                p.error(f"--{name} must be at least {1 if name in ('nodes', 'roots') else 0}")
        if a.roots > a.nodes:
            p.error(f"--roots ({a.roots}) cannot exceed --nodes ({a.nodes}): the roots are distinct nodes")
        if a.workers is not None and a.workers < 1:
            p.error("--workers must be at least 1")
        r = demo(a.nodes, a.edges, a.roots, a.updates, a.workers, a.seed)
        print(f"kpgnb demo: {r['nodes']:,} nodes, {r['edges']:,} edges, {r['roots']} roots, {r['workers']} workers")
        print(f"  kernels ready                  {r['warmup_s']:.2f} s (compiled once after install, then cached)")
        print(f"  load (input + arrange + BFS)   {r['load_s']:.2f} s")
        print(f"  initial compute (BFS)          {r['initial_compute_s']:.2f} s")
        print(f"  install of second dataflow     {r['install_second_ms']:.1f} ms (reuses the exported arrangement)")
        if r["update_p50_ms"] is not None:
            print(f"  single-edge update latency     p50 {r['update_p50_ms']:.2f} ms, p99 {r['update_p99_ms']:.2f} ms")
        print(f"  reachable nodes {r['reached']:,}, max distance {r['max_dist']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
