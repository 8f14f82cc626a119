"""Arrangement throughput: batch formation and trace maintenance for random 64-bit keys, against the time
NumPy takes merely to sort the same keys (the practical floor).

    python -m bench.arrange [--batches 100] [--batch-size 100000] [--keys 10000000] [--quick]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import parse_args, table, write_result

QUICK = {"batches": 20, "batch_size": 10_000, "keys": 1_000_000}


def run(batches: int, size: int, keyspace: int, seed: int = 0) -> dict:
    from kpgnb.engine.batch import Batch
    from kpgnb.engine.lattice import Antichain
    from kpgnb.engine.trace import Trace

    rng = np.random.default_rng(seed)
    data = [rng.integers(0, keyspace, (1, size), dtype=np.int64) for _ in range(batches)]
    novals = np.zeros((0, size), np.int64)
    ones = np.ones(size, np.int64)
    times = [np.full((size, 1), e, np.int64) for e in range(batches)]
    # warm the kernels
    Batch.form(data[0], novals, times[0], ones, Antichain([(0,)]), Antichain([(1,)]))

    t0 = time.perf_counter()
    for k in data:
        np.sort(k[0])
    sort_s = time.perf_counter() - t0

    out = {"batches": batches, "batch_size": size, "keys": keyspace, "updates": batches * size,
           "sort_floor_s": sort_s, "sort_floor_updates_per_s": batches * size / sort_s, "efforts": {}}
    for effort in ("eager", "default", "lazy"):
        trace = Trace(1, 0, 1, 1, effort=effort)
        handle = trace.handle()
        form_s = maint_s = 0.0
        worst = 0.0
        for e, k in enumerate(data):
            t0 = time.perf_counter()
            b = Batch.form(k, novals, times[e], ones, Antichain([(e,)]), Antichain([(e + 1,)]))
            t1 = time.perf_counter()
            trace.insert([b])
            handle.set_logical_compaction(Antichain([(e,)]))
            t2 = time.perf_counter()
            form_s += t1 - t0
            maint_s += t2 - t1
            worst = max(worst, t2 - t1)
        st = trace.stats()
        n = batches * size
        out["efforts"][effort] = {
            "formation_s": form_s, "maintenance_s": maint_s,
            "formation_updates_per_s": n / form_s, "maintenance_updates_per_s": n / maint_s,
            "total_updates_per_s": n / (form_s + maint_s),
            "ratio_to_sort_floor": (form_s + maint_s) / sort_s,
            "worst_insert_ms": worst * 1e3, "final_batches": st["batches"], "final_records": st["records"],
            "final_bytes": st["bytes"],
        }
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=0)
    a = parse_args(p, argv, QUICK)
    res = run(a.batches, a.batch_size, a.keys, a.seed)
    rows = [{"effort": k, "formation/s": v["formation_updates_per_s"], "maintenance/s": v["maintenance_updates_per_s"],
             "total/s": v["total_updates_per_s"], "x sort floor": v["ratio_to_sort_floor"],
             "worst insert ms": v["worst_insert_ms"], "batches": v["final_batches"]}
            for k, v in res["efforts"].items()]
    rows.append({"effort": "numpy sort (floor)", "total/s": res["sort_floor_updates_per_s"], "x sort floor": 1.0})
    print(table(rows, ["effort", "formation/s", "maintenance/s", "total/s", "x sort floor", "worst insert ms",
                       "batches"]))
    print("wrote", write_result("arrange", res, a.quick))
    return res


if __name__ == "__main__":
    main()
