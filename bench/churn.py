"""Memory under churn: does a steady stream of retractions and insertions keep the engine's memory flat?

    python -m bench.churn [--rows 1000000] [--churn 10000] [--keys ROWS/10] [--bfs | --no-bfs]
                          [--nodes 100000] [--edges 1000000] [--edge-churn 1000] [--workers 1]
                          [--minutes 30 | --epochs N] [--sample-s 10] [--seed 0] [--plot | --no-plot] [--quick]

An input ``rows`` (k, v) holds --rows live rows (k from --keys keys, v unique ids) under ``count(by="k")``
and ``distinct()`` views; with --bfs a second dataflow maintains BFS distances over a random graph whose
edges churn too. Each epoch (closed loop) retracts --churn random live rows, inserts as many new ones,
swaps --edge-churn edges, advances every input and waits. The live set never grows, so neither should
memory: every --sample-s seconds the program records process RSS and, per arrangement, records held
against ``live`` records (what a full merge and compaction would leave). A records/live ratio that keeps
rising, or RSS that keeps growing, means compaction or merging falls behind the churn. After the last
epoch (outside the loop's clock) every view is checked against NumPy before anything is reported: the
counts against ``np.unique`` of the live keys, ``distinct()`` against the live rows, the BFS distances
against a NumPy breadth-first search over the live edges; a wrong one raises ``WrongAnswer``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .common import RESULTS, check_bfs, check_counts, check_rows, parse_args, table, write_result

QUICK = {"rows": 100_000, "churn": 1_000, "nodes": 10_000, "edges": 100_000, "edge_churn": 100,
         "minutes": 0.5, "sample_s": 1.0}
WARMUP = 0.2  # fraction of samples dropped from the summary


def rss_mb() -> float:
    """Resident set size of this process (the workers are threads, so this covers the whole engine)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def swap(rng, cols: dict, n: int, fresh: dict) -> tuple[dict, dict]:
    """Replace ``n`` random live rows of ``cols`` (arrays, modified in place) by ``fresh``; return the
    (retracted, inserted) rows. The arrays always hold exactly the live multiset, so any position is a
    valid retraction, and the work is vectorized (no Python per row)."""
    idx = rng.choice(len(next(iter(cols.values()))), n, replace=False)
    old = {c: a[idx] for c, a in cols.items()}
    for c, a in cols.items():
        a[idx] = fresh[c]
    return old, {c: a[idx] for c, a in cols.items()}


def sample(eng) -> dict:
    """RSS and per-arrangement sizes. ``stats(live=True)`` consolidates every trace, so it is timed (the
    loop leaves that time out of throughput) and RSS is read before it as well as after (its temporary
    copies must not pass for engine state)."""
    rss = rss_mb()
    t0 = time.perf_counter()
    arrs = eng.stats(live=True)["arrangements"]
    stats_s = time.perf_counter() - t0
    per = [{"name": a["name"], "dataflow": a["dataflow"], "records": int(a["records"]), "live": int(a["live"]),
            "bytes": int(a["bytes"]), "ratio": a["records"] / max(a["live"], 1)} for a in arrs]
    worst = max(per, key=lambda a: a["ratio"])
    records, live = sum(a["records"] for a in per), sum(a["live"] for a in per)
    return {"rss_mb": rss, "rss_after_stats_mb": rss_mb(), "stats_s": stats_s, "records": records, "live": live,
            "bytes": sum(a["bytes"] for a in per), "ratio": records / max(live, 1), "worst_ratio": worst["ratio"],
            "worst": f"{worst['dataflow'] or '-'}/{worst['name']}", "arrangements": per}


def run(a) -> dict:
    import kpgnb as kp
    rng = np.random.default_rng(a.seed)
    keys = a.keys or max(1, a.rows // 10)
    rows = {"k": rng.integers(0, keys, a.rows), "v": np.arange(a.rows, dtype=np.int64)}
    next_v = a.rows
    per_epoch = 2 * a.churn + (2 * a.edge_churn if a.bfs else 0)
    with kp.Engine(workers=a.workers) as eng:
        t0 = time.perf_counter()
        inputs = [eng.input("rows", ["k", "v"])]
        inputs[0].insert(rows)
        if a.bfs:
            from kpgnb.graphs import bfs
            edges = {"src": rng.integers(0, a.nodes, a.edges), "dst": rng.integers(0, a.nodes, a.edges)}
            e_in, r_in = eng.input("edges", ["src", "dst"]), eng.input("roots", ["node"])
            e_in.insert(edges)
            roots = rng.choice(a.nodes, 4, replace=False)
            r_in.insert({"node": roots})
            inputs += [e_in, r_in]
        for i in inputs:
            i.advance_to(1)
        with eng.dataflow("churn") as df:
            r = df.input("rows")
            counts = r.count(by="k").view("counts")
            distinct = r.distinct().view("distinct")
        if a.bfs:
            with eng.dataflow("bfs") as df:
                dist = bfs(df.input("edges").arrange_by("src"), df.input("roots")).view("dist")
        eng.wait()
        load_s = time.perf_counter() - t0

        samples = []
        start = time.perf_counter()
        stats_total = 0.0  # seconds spent sampling, left out of throughput

        def take(epoch):
            nonlocal stats_total
            elapsed, work = time.perf_counter() - start, time.perf_counter() - start - stats_total
            s = {"elapsed_s": elapsed, "epoch": epoch, "epochs_per_s": None, "updates_per_s": None}
            if samples and work > samples[-1]["work_s"]:
                s["epochs_per_s"] = (epoch - samples[-1]["epoch"]) / (work - samples[-1]["work_s"])
                s["updates_per_s"] = s["epochs_per_s"] * per_epoch
            s.update(sample(eng), work_s=work)
            stats_total += s["stats_s"]
            samples.append(s)

        take(0)
        epoch, deadline = 0, start + a.minutes * 60
        while (a.epochs is None or epoch < a.epochs) and (a.epochs is not None or time.perf_counter() < deadline):
            epoch += 1
            old, new = swap(rng, rows, a.churn, {"k": rng.integers(0, keys, a.churn),
                                                 "v": np.arange(next_v, next_v + a.churn)})
            next_v += a.churn
            inputs[0].remove(old)
            inputs[0].insert(new)
            if a.bfs and a.edge_churn:
                old, new = swap(rng, edges, a.edge_churn, {"src": rng.integers(0, a.nodes, a.edge_churn),
                                                           "dst": rng.integers(0, a.nodes, a.edge_churn)})
                e_in.remove(old)
                e_in.insert(new)
            for i in inputs:
                i.advance_to(epoch + 1)
            eng.wait()
            if time.perf_counter() - start - samples[-1]["elapsed_s"] - samples[-1]["stats_s"] >= a.sample_s:
                take(epoch)
        if samples[-1]["epoch"] != epoch:
            take(epoch)
        # the answers after the last epoch, against NumPy (after the clock, before anything is reported)
        check_counts(counts, rows["k"], "churn count")
        check_rows(distinct, rows, "churn distinct")  # v is unique: the live rows are their own distinct()
        if a.bfs:
            check_bfs(dist, edges["src"], edges["dst"], a.nodes, roots, "churn BFS")
    return {"params": {"rows": a.rows, "churn": a.churn, "keys": keys, "bfs": a.bfs, "nodes": a.nodes,
                       "edges": a.edges, "edge_churn": a.edge_churn, "workers": a.workers, "minutes": a.minutes,
                       "epochs": a.epochs, "sample_s": a.sample_s, "seed": a.seed, "updates_per_epoch": per_epoch},
            "load_s": load_s, "summary": summarize(samples[int(len(samples) * WARMUP):], per_epoch),
            "samples": samples}


def summarize(after: list, per_epoch: int) -> dict:
    """Figures over the samples after warm-up; throughput is total epochs over total work time (stats
    passes excluded), which weights intervals by their length."""
    rss = [s["rss_mb"] for s in after]
    work = after[-1]["work_s"] - after[0]["work_s"]
    eps = (after[-1]["epoch"] - after[0]["epoch"]) / work if work > 0 else after[-1]["epochs_per_s"]
    return {"samples": len(after), "from_elapsed_s": after[0]["elapsed_s"], "epochs": after[-1]["epoch"],
            "max_worst_ratio": max(s["worst_ratio"] for s in after),
            "worst_arrangement": max(after, key=lambda s: s["worst_ratio"])["worst"],
            "max_total_ratio": max(s["ratio"] for s in after),
            "rss_first_mb": rss[0], "rss_last_mb": rss[-1], "rss_max_mb": max(rss),
            "rss_growth_mb": rss[-1] - rss[0], "rss_growth_pct": 100 * (rss[-1] - rss[0]) / rss[0],
            "epochs_per_s": eps, "updates_per_s": None if eps is None else eps * per_epoch,
            "stats_s_mean": float(np.mean([s["stats_s"] for s in after]))}


def plot(samples: list, path: str, title: str) -> str | None:
    """Three panels over elapsed time: RSS, total records against live, worst records/live ratio."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    t = [s["elapsed_s"] for s in samples]
    fig = Figure(figsize=(9, 9), layout="constrained")
    ax = fig.subplots(3, 1, sharex=True)
    ax[0].plot(t, [s["rss_mb"] for s in samples], marker=".")
    ax[0].set_ylabel("RSS (MB)")
    ax[0].set_title(title)
    ax[1].plot(t, [s["records"] for s in samples], marker=".", label="records")
    ax[1].plot(t, [s["live"] for s in samples], marker=".", label="live")
    ax[1].set_ylabel("records, all arrangements")
    ax[1].legend()
    ax[2].plot(t, [s["worst_ratio"] for s in samples], marker=".")
    ax[2].axhline(2.0, color="red", linestyle="--", linewidth=1)
    ax[2].set_ylabel("worst records/live")
    ax[2].set_xlabel("elapsed (s)")
    fig.savefig(path, dpi=100)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="live rows in the input")
    p.add_argument("--churn", type=int, default=10_000, help="rows retracted and inserted per epoch")
    p.add_argument("--keys", type=int, default=None, help="distinct k values (default rows/10)")
    p.add_argument("--bfs", action=argparse.BooleanOptionalAction, default=True,
                   help="also run BFS over a churning random graph")
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--edge-churn", type=int, default=1_000, help="edges removed and inserted per epoch")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--minutes", type=float, default=30.0, help="wall time of the churn loop")
    p.add_argument("--epochs", type=int, default=None, help="run this many epochs instead of --minutes")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", action=argparse.BooleanOptionalAction, default=True)
    a = parse_args(p, argv, QUICK, positive=("rows",))
    if not 0 < a.churn <= a.rows or (a.bfs and not 0 <= a.edge_churn <= a.edges):
        p.error("--churn must be in 1..rows and --edge-churn in 0..edges")
    res = run(a)
    samples, s = res["samples"], res["summary"]
    shown = samples if len(samples) <= 20 else [samples[i] for i in np.unique(np.linspace(0, len(samples) - 1, 20)
                                                                              .round().astype(int))]
    print(table([{"t s": x["elapsed_s"], "epoch": x["epoch"], "RSS MB": x["rss_mb"], "records": x["records"],
                  "live": x["live"], "ratio": x["ratio"], "worst": x["worst_ratio"], "worst arrangement": x["worst"],
                  "epochs/s": x["epochs_per_s"], "stats s": x["stats_s"]} for x in shown],
                ["t s", "epoch", "RSS MB", "records", "live", "ratio", "worst", "worst arrangement", "epochs/s",
                 "stats s"]))
    print(f"load {res['load_s']:.2f} s; summary over {s['samples']} samples from t={s['from_elapsed_s']:.1f} s "
          f"(first {WARMUP:.0%} dropped as warm-up), {s['epochs']:,} epochs in all")
    print(f"  records/live: worst arrangement max {s['max_worst_ratio']:.3f} ({s['worst_arrangement']}), "
          f"total max {s['max_total_ratio']:.3f}")
    print(f"  RSS MB: first {s['rss_first_mb']:.1f}, last {s['rss_last_mb']:.1f}, max {s['rss_max_mb']:.1f}, "
          f"growth {s['rss_growth_mb']:+.1f} MB ({s['rss_growth_pct']:+.1f}%)")
    if s["epochs_per_s"] is not None:
        print(f"  throughput: {s['epochs_per_s']:.2f} epochs/s, {s['updates_per_s']:,.0f} updates/s "
              f"(stats passes excluded; mean pass {s['stats_s_mean']:.3f} s)")
    if a.plot:
        name = "churn-quick" if a.quick else "churn"
        os.makedirs(RESULTS, exist_ok=True)
        res["plot"] = plot(samples, os.path.join(RESULTS, f"{name}.png"),
                           f"churn: {a.rows:,} rows, {a.churn:,}/epoch, W={a.workers}"
                           + (f", BFS {a.nodes:,}/{a.edges:,}, {a.edge_churn:,}/epoch" if a.bfs else ""))
        if res["plot"]:
            print("plot", res["plot"])
    print("wrote", write_result("churn", res, a.quick))
    return res


if __name__ == "__main__":
    main()
