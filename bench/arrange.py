"""Arrangement throughput: batch formation and trace maintenance for random 64-bit keys, against the time
NumPy takes merely to sort the same keys (the practical floor); with ``--edges N``, the whole path a user
sees for one large batch (N random edges loaded into an input, then ``arrange_by("src")``, at each of
``--workers``, against NumPy's sort of the src keys); and, with ``--open-loop``, the K-Pg
open-loop latency experiment (paper section 6.5, Fig. 6a and 6e).

    python -m bench.arrange [--batches 100] [--batch-size 100000] [--keys 10000000] [--quick]
                            [--edges 10000000 --nodes 1000000 --workers 1 2 --repeats 3]
    python -m bench.arrange --open-loop [--keys 10000000] [--rates 1000000,500000,...] [--seconds 10]
                            [--min-rate 31250] [--effort-rate R] [--quick]

Open loop: one worker (``Engine(workers=1)``), an input of --keys random 64-bit keys, arranged by its key
(an input is arranged by all its columns, which for ``k`` alone is ``arrange_by("k")``), with a view on
the arrangement as its consumer. A driver thread offers updates at a fixed rate by the wall clock: every
tick (--tick, 1 ms) it inserts the updates due since the previous epoch (half insertions of fresh keys,
half retractions of the oldest live keys, so the collection keeps --keys records) and advances the
epoch; if the engine falls behind the driver does not slow down (the scheduler then applies the queued
epochs together). The latency of every update runs from its scheduled time (start + i / rate) to the
moment the arrangement's frontier passes its epoch, observed by a monitor thread blocked in
``eng.wait(epoch, timeout=...)`` (woken by every snapshot the scheduler publishes) that then reads
``view.frontier``. Output per offered rate: p50/p99/max, the latency CCDF (a log-bucketed histogram), the
achieved throughput and whether the engine kept up; then the merge efforts ``eager``, ``default`` and
``lazy`` (``Engine(effort=...)``) at one rate. The arrangement's final contents are checked against the
expected multiset (count and an order-independent hash) before any figure is reported: a run whose
contents differ reports "wrong answer" and no latency or throughput figure (they are None).

Batch formation (the default): after each effort's timed loop, the trace's accumulated contents are
compared with the multiset of every key formed (``bench.common.check_rows``); with --edges, each
arrangement's records and keys are compared with NumPy's count of the distinct edges and sources. A
difference raises ``WrongAnswer`` instead of reporting a time.
"""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from .common import WrongAnswer, check_rows, parse_args, table, write_result

QUICK = {"batches": 20, "batch_size": 10_000, "keys": 1_000_000}
OPEN_QUICK = {"keys": 100_000, "seconds": 1.5, "warmup": 0.3, "max_rate": 200_000, "min_rate": 50_000}
EFFORTS = ("eager", "default", "lazy")


def run(batches: int, size: int, keyspace: int, seed: int = 0) -> dict:
    from kpgnb.engine.batch import Batch
    from kpgnb.engine.lattice import Antichain
    from kpgnb.engine.trace import Trace

    rng = np.random.default_rng(seed)
    data = [rng.integers(0, keyspace, (1, size), dtype=np.int64) for _ in range(batches)]
    want = {"k": np.concatenate([k[0] for k in data])}  # every update inserts its key once
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
        keys, _, cnt = handle.accumulate()  # the trace's contents, checked after the clock
        check_rows({"k": keys[0]}, want, f"batch formation ({effort})", counts=cnt)
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


def run_edges(n: int, nodes: int, workers: list, repeats: int, seed: int = 0) -> dict:
    """Load n edges into an input (insert, advance, wait), then install ``arrange_by("src").export`` and
    wait for it, in a fresh engine per repeat; process CPU seconds (the fair measure on a shared machine)
    and wall seconds of each, the arrangements' sizes checked against NumPy."""
    import kpgnb as kp

    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, n, dtype=np.int64)
    dst = rng.integers(0, nodes, n, dtype=np.int64)
    sorts = []
    for _ in range(3):
        c0 = time.process_time()
        np.sort(src)
        sorts.append(time.process_time() - c0)
    pairs = len(np.unique(src * nodes + dst))
    keys = len(np.unique(src))
    out = {"edges": n, "nodes": nodes, "sort_floor_cpu_s": min(sorts), "runs": {}}
    for w in workers:
        runs = []
        for _ in range(repeats):
            with kp.Engine(workers=w) as eng:
                warm = eng.input("warm", ["src", "dst"], rows={"src": src[:1000], "dst": dst[:1000]})
                warm.advance_to(1)
                with eng.dataflow("warm") as df:
                    df.input("warm").arrange_by("src").export("warm_by_src")
                eng.wait(None)
                c0, t0 = time.process_time(), time.perf_counter()
                edges = eng.input("edges", ["src", "dst"], rows={"src": src, "dst": dst})
                edges.advance_to(1)
                eng.wait(None)
                c1, t1 = time.process_time(), time.perf_counter()
                with eng.dataflow("idx") as df:
                    df.input("edges").arrange_by("src").export("by_src")
                eng.wait("idx")
                eng.wait(None)
                c2, t2 = time.process_time(), time.perf_counter()
                sizes = {a["name"]: (a["records"], a["keys"]) for a in eng.arrangements()}
            if sizes["input:edges"] != (pairs, pairs) or sizes["by_src"] != (pairs, keys):
                raise WrongAnswer(f"arrange edges: wrong answer: arrangement sizes {sizes}, expected input:edges {(pairs, pairs)} and "
                                     f"by_src {(pairs, keys)}")
            runs.append({"load_cpu_s": c1 - c0, "load_wall_s": t1 - t0, "arrange_cpu_s": c2 - c1,
                         "arrange_wall_s": t2 - t1})
        out["runs"][w] = runs
    return out


# -- open loop (K-Pg Fig. 6a / 6e) -----------------------------------------------------------------------

_M1, _M2, _M3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(x) -> np.ndarray:
    """splitmix64 of an int64/uint64 array (wrapping arithmetic): the key stream and the answer hash."""
    z = np.asarray(x).astype(np.uint64) * _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return z ^ (z >> np.uint64(31))


def key_of(i, keys: int, seed: int = 0) -> np.ndarray:
    """The i-th key of the stream: a pseudo-random 64-bit identifier below ``keys``."""
    return (mix64(np.asarray(i, np.uint64) + np.uint64(seed) * _M1) % np.uint64(keys)).astype(np.int64)


def updates_of(j0: int, j1: int, keys: int, seed: int = 0):
    """Updates j0..j1-1 of the stream (keys, diffs): even j inserts key ``keys + j//2`` of the key stream,
    odd j retracts key ``j//2`` (the oldest live one), so the collection keeps ``keys`` records."""
    j = np.arange(j0, j1, dtype=np.int64)
    ins = (j & 1) == 0
    idx = np.where(ins, keys + (j >> 1), j >> 1)
    return key_of(idx, keys, seed), np.where(ins, 1, -1).astype(np.int64)


def expected_contents(n_updates: int, keys: int, seed: int = 0):
    """(record count, order-independent hash) of the collection after the load and n_updates updates."""
    removed, inserted = n_updates // 2, (n_updates + 1) // 2
    k = key_of(np.arange(removed, keys + inserted), keys, seed)
    return len(k), int(mix64(k).sum(dtype=np.uint64))


def contents_of(view):
    """(record count, hash) of what the view holds, read through its public API."""
    cols = view.columns(diffs=True)
    k, d = cols["k"], cols["diff"]
    if (d < 0).any():
        return int(d.sum()), None
    return int(d.sum()), int((mix64(k) * d.astype(np.uint64)).sum(dtype=np.uint64))


def check_contents(got, expected) -> str | None:
    """None if the arrangement holds what the updates say it must, else what differs."""
    if got[0] != expected[0]:
        return f"wrong answer: the arrangement holds {got[0]:,} records, expected {expected[0]:,}"
    if got[1] != expected[1]:
        return "wrong answer: the arrangement's records differ from the expected multiset (hash mismatch)"
    return None


def histogram(lat_s: np.ndarray) -> np.ndarray:
    """Counts in kpgnb's fixed log buckets (kpgnb.engine.latency: 10 per decade, 1 us .. 1000 s)."""
    from kpgnb.engine import latency
    idx = np.searchsorted(latency.EDGES, lat_s, side="right")
    return np.bincount(idx, minlength=latency.BUCKETS)


def ccdf_points(counts) -> list:
    from kpgnb.engine import latency
    x, y = latency.ccdf(np.asarray(counts))
    return [[float(a), float(b)] for a, b in zip(x, y)]


def open_loop_run(rate: float, keys: int, seconds: float, effort: str = "default", tick: float = 0.001,
                  warmup: float = 1.0, drain: float | None = None, seed: int = 0, keep_raw: bool = False) -> dict:
    """One open-loop run at ``rate`` updates/s for ``seconds`` on a fresh single-worker engine."""
    import kpgnb as kp
    drain = max(10.0, seconds) if drain is None else drain
    eng = kp.Engine(workers=1, effort=effort)
    try:
        inp = eng.input("keys", ["k"])
        t0 = time.perf_counter()
        inp.insert({"k": key_of(np.arange(keys), keys, seed)})
        inp.advance_to(1)
        with eng.dataflow("arrange") as df:
            view = df.input("keys").arrange_by("k").view("arranged")
        eng.wait(view)
        load_s = time.perf_counter() - t0

        total = int(round(rate * seconds))
        epochs: list = []       # (epoch, first update, end update, submitted at)
        marks: list = []        # (first epoch not final, observed at)
        stop = threading.Event()
        errors: list = []
        start = time.perf_counter() + 0.05

        def drive():
            try:
                sent, epoch = 0, 1
                while sent < total:
                    now = time.perf_counter()
                    due = min(total, int((now - start) * rate)) if now >= start else 0
                    if due > sent:
                        k, d = updates_of(sent, due, keys, seed)
                        inp.update({"k": k}, d)
                        inp.advance_to(epoch + 1)
                        epochs.append((epoch, sent, due, now))
                        epoch, sent = epoch + 1, due
                    if sent >= total:
                        break
                    # sleep to the next tick, or to the next update's scheduled time if later
                    nxt = max(now + tick, start + (sent + 1) / rate)
                    left = nxt - time.perf_counter()
                    if left > 0:
                        time.sleep(left)
            except BaseException as e:  # noqa: BLE001 - reported by the caller
                errors.append(e)
            finally:
                stop.set()

        def monitor():
            last = 1
            c0 = time.thread_time()
            try:
                while True:
                    if stop.is_set() and epochs and last > epochs[-1][0]:
                        return
                    try:
                        eng.wait(last + 1, timeout=0.1)
                    except TimeoutError:
                        if stop.is_set() and time.perf_counter() > end_at[0] + drain:
                            return
                        continue
                    now = time.perf_counter()
                    e = view.epoch
                    if e is None or e > last:
                        last = e if e is not None else last + 1
                        marks.append((last, now))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            finally:
                monitor_cpu[0] = time.thread_time() - c0

        monitor_cpu = [0.0]
        end_at = [start + seconds]
        drv = threading.Thread(target=drive, name="open-loop-driver")
        mon = threading.Thread(target=monitor, name="open-loop-monitor")
        mon.start()
        drv.start()
        drv.join()
        end_at[0] = max(end_at[0], time.perf_counter())
        mon.join()
        if errors:
            raise errors[0]
        offered_end = start + seconds
        drained = bool(epochs) and bool(marks) and marks[-1][0] > epochs[-1][0]
        drain_s = (marks[-1][1] - offered_end) if drained else None

        # per-update latency: the time the frontier passed its epoch minus its scheduled time
        ep = np.array([e[0] for e in epochs], np.int64)
        lo = np.array([e[1] for e in epochs], np.int64)
        hi = np.array([e[2] for e in epochs], np.int64)
        sub = np.array([e[3] for e in epochs])
        mk_e = np.array([m[0] for m in marks], np.int64)
        mk_t = np.array([m[1] for m in marks])
        pos = np.searchsorted(mk_e, ep, side="right")  # first mark whose frontier is past the epoch
        done = np.where(pos < len(mk_t), mk_t[np.minimum(pos, len(mk_t) - 1)], np.nan)
        counts = hi - lo
        n = int(counts.sum())
        idx = np.arange(n)
        sched = start + idx / rate
        done_u = np.repeat(done, counts)
        lat = done_u - sched
        incomplete = int(np.isnan(lat).sum())
        censored_at = time.perf_counter()
        lat = np.where(np.isnan(lat), censored_at - sched, lat)  # not done: at least this long
        keep = sched >= start + warmup
        lat_k = lat[keep]
        hist = histogram(lat_k)
        driver_lag = sub - (start + lo / rate)  # how late each epoch's first update was handed over
        completed_in_window = int(counts[np.nan_to_num(done, nan=np.inf) <= offered_end].sum())
        # throughput: the measured updates over the time from the first one's scheduled time to the
        # completion of the last (offering time plus the drain when the engine falls behind)
        last_done = np.nanmax(done_u[keep]) if keep.any() and drained else np.nan
        achieved = float(keep.sum() / (last_done - (start + warmup))) if drained and keep.any() else None
        epoch_lat = done - sub  # per epoch, from its advance_to: what the engine's own histogram measures
        check = None
        if drained:
            check = check_contents(contents_of(view), expected_contents(n, keys, seed))
        out = {
            "offered_per_s": rate, "keys": keys, "seconds": seconds, "warmup_s": warmup, "effort": effort,
            "tick_s": tick, "load_s": load_s, "updates": n, "epochs": len(epochs),
            "mean_epoch_updates": n / max(1, len(epochs)),
            "achieved_per_s": achieved,
            "completed_in_window": completed_in_window,
            # kept up: the backlog at the end of the offering cleared within 1 s (or 10% of the run)
            "kept_up": bool(drained and check is None and drain_s is not None
                            and drain_s <= max(1.0, 0.1 * seconds)),
            "drained": drained, "drain_s": drain_s, "incomplete": incomplete,
            "measured_updates": int(keep.sum()),
            "p50_ms": float(np.percentile(lat_k, 50) * 1e3) if len(lat_k) else None,
            "p99_ms": float(np.percentile(lat_k, 99) * 1e3) if len(lat_k) else None,
            "p999_ms": float(np.percentile(lat_k, 99.9) * 1e3) if len(lat_k) else None,
            "max_ms": float(lat_k.max() * 1e3) if len(lat_k) else None,
            # median latency in each quarter of the measured window: it grows when the engine falls behind
            "p50_by_quarter_ms": [float(np.median(q) * 1e3) for q in np.array_split(lat_k, 4) if len(q)],
            "monitor_cpu_s": monitor_cpu[0], "monitor_wakeups": len(marks),
            "driver_lag_p99_ms": float(np.percentile(driver_lag, 99) * 1e3) if len(driver_lag) else None,
            "driver_lag_max_ms": float(driver_lag.max() * 1e3) if len(driver_lag) else None,
            "histogram": hist.tolist(), "ccdf": ccdf_points(hist),
            "epoch_histogram": histogram(epoch_lat[~np.isnan(epoch_lat)]).tolist(),
            "engine_histogram": eng.latency_histogram("arrange")[1].tolist(),
            "arrangement": _arrangement_stats(eng),
            "answer": "ok" if check is None and drained else (check or "not drained (not checked)"),
        }
        if keep_raw:
            out["latencies_ms"] = (lat_k * 1e3).tolist()
        if check is not None:  # a wrong answer is a failure, never a number
            out.update({f: None for f in _FIGURES if f in out})
        return out
    finally:
        eng.close()


# what a run whose final contents are wrong does not report
_FIGURES = ("achieved_per_s", "completed_in_window", "drain_s", "p50_ms", "p99_ms", "p999_ms", "max_ms",
            "p50_by_quarter_ms", "driver_lag_p99_ms", "driver_lag_max_ms", "histogram", "ccdf", "epoch_histogram",
            "engine_histogram", "latencies_ms")


def _arrangement_stats(eng) -> dict:
    rows = [a for a in eng.arrangements() if a["kind"] == "input"]
    if not rows:
        return {}
    a = rows[0]
    return {k: a.get(k) for k in ("records", "batches", "bytes", "merges", "merge_shortfall")}


def halving(max_rate: float, min_rate: float) -> list:
    out, r = [], float(max_rate)
    while r >= min_rate * (1 - 1e-9):
        out.append(int(r) if r == int(r) else r)
        r /= 2
    return out


def open_loop(keys: int, rates: list, seconds: float, efforts=EFFORTS, effort_rate=None, tick: float = 0.001,
              warmup: float = 1.0, seed: int = 0, log=print) -> dict:
    """The rate sweep at the default effort, then every effort at ``effort_rate`` (default: the highest
    offered rate the default effort kept up with, else the lowest)."""
    import kpgnb as kp
    _warm(kp)
    out = {"mode": "open-loop", "keys": keys, "rates": rates, "seconds": seconds, "tick_s": tick,
           "warmup_s": warmup, "workers": 1, "runs": [], "efforts": []}
    for r in rates:
        res = open_loop_run(r, keys, seconds, "default", tick, warmup, seed=seed)
        out["runs"].append(res)
        log(_line(res))
    if efforts:
        if effort_rate is None:
            kept = [x["offered_per_s"] for x in out["runs"] if x["kept_up"]]
            effort_rate = max(kept) if kept else min(rates)
        out["effort_rate"] = effort_rate
        for e in efforts:
            res = open_loop_run(effort_rate, keys, seconds, e, tick, warmup, seed=seed)
            out["efforts"].append(res)
            log(_line(res))
    return out


def _warm(kp):
    """Compile (or load) the kernels outside the measurements."""
    with kp.Engine(workers=1) as eng:
        inp = eng.input("w", ["k"])
        inp.insert({"k": np.arange(1000)})
        inp.advance_to(1)
        with eng.dataflow("w") as df:
            v = df.input("w").arrange_by("k").view("w")
        for e in range(2, 6):
            inp.update({"k": np.arange(e, e + 10)}, np.where(np.arange(10) % 2 == 0, 1, -1))
            inp.advance_to(e)
        eng.wait(v)
        v.columns(diffs=True)


def _line(r) -> str:
    if r["p50_ms"] is None:
        return f"  {r['effort']:>7} {r['offered_per_s']:>12,.0f}/s offered: {r['answer']}"
    return (f"  {r['effort']:>7} {r['offered_per_s']:>12,.0f}/s offered: achieved {r['achieved_per_s'] or 0:,.0f}/s, "
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms, "
            f"{'kept up' if r['kept_up'] else 'fell behind'}, {r['answer']}")


def open_loop_rows(res: dict) -> list:
    rows = []
    for r in res["runs"] + res["efforts"]:
        rows.append({"effort": r["effort"], "offered/s": r["offered_per_s"], "achieved/s": r["achieved_per_s"],
                     "p50 ms": r["p50_ms"], "p99 ms": r["p99_ms"], "max ms": r["max_ms"],
                     "updates/epoch": r["mean_epoch_updates"], "kept up": "yes" if r["kept_up"] else "no",
                     "drain s": r["drain_s"],
                     "answer": r["answer"]})
    return rows


OPEN_COLS = ["effort", "offered/s", "achieved/s", "p50 ms", "p99 ms", "max ms", "updates/epoch", "drain s", "kept up",
             "answer"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--edges", type=int, default=0, help="also load and arrange_by this many edges (0: skip)")
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=3)
    g = p.add_argument_group("open loop (K-Pg Fig. 6a/6e)")
    g.add_argument("--open-loop", action="store_true",
                   help="run the open-loop latency experiment instead (writes arrange_open_loop.json)")
    g.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",") if x],
                   help="offered rates in updates/s, comma separated (default: --max-rate halving down to "
                        "--min-rate)")
    g.add_argument("--max-rate", type=float, default=1_000_000)
    g.add_argument("--min-rate", type=float, default=31_250)
    g.add_argument("--seconds", type=float, default=10.0, help="offering time per rate")
    g.add_argument("--warmup", type=float, default=1.0, help="seconds at the start of each run left out of "
                                                              "the statistics")
    g.add_argument("--tick", type=float, default=0.001, help="the driver's shortest epoch, seconds")
    g.add_argument("--efforts", default=",".join(EFFORTS), help="merge efforts to compare ('' for none)")
    g.add_argument("--effort-rate", type=float, default=None,
                   help="offered rate for the effort comparison (default: the highest rate the default "
                        "effort kept up with)")
    pre = argparse.ArgumentParser(add_help=False)  # (--help is answered by the full parser, --quick included)
    pre.add_argument("--open-loop", action="store_true")
    open_mode = pre.parse_known_args(argv)[0].open_loop
    a = parse_args(p, argv, OPEN_QUICK if open_mode else QUICK,
                   positive=("batches", "batch_size", "keys", "repeats"))
    if a.open_loop:
        rates = a.rates or halving(a.max_rate, a.min_rate)
        rates = [int(r) if r == int(r) else r for r in rates]
        efforts = [e for e in a.efforts.split(",") if e]
        res = open_loop(a.keys, rates, a.seconds, efforts, a.effort_rate, a.tick, a.warmup, a.seed)
        print(table(open_loop_rows(res), OPEN_COLS))
        print("wrote", write_result("arrange_open_loop", res, a.quick))
        return res
    res = run(a.batches, a.batch_size, a.keys, a.seed)
    if a.edges:
        res["edges"] = run_edges(a.edges, a.nodes, a.workers, a.repeats, a.seed)
    rows = [{"effort": k, "formation/s": v["formation_updates_per_s"], "maintenance/s": v["maintenance_updates_per_s"],
             "total/s": v["total_updates_per_s"], "x sort floor": v["ratio_to_sort_floor"],
             "worst insert ms": v["worst_insert_ms"], "batches": v["final_batches"]}
            for k, v in res["efforts"].items()]
    rows.append({"effort": "numpy sort (floor)", "total/s": res["sort_floor_updates_per_s"], "x sort floor": 1.0})
    print(table(rows, ["effort", "formation/s", "maintenance/s", "total/s", "x sort floor", "worst insert ms",
                       "batches"]))
    if a.edges:
        e = res["edges"]
        floor = e["sort_floor_cpu_s"]
        erows = []
        for w, runs in e["runs"].items():
            best = min(runs, key=lambda r: r["arrange_cpu_s"])
            erows.append({"workers": w, "load cpu s": best["load_cpu_s"], "load wall s": best["load_wall_s"],
                          "arrange cpu s": best["arrange_cpu_s"], "arrange wall s": best["arrange_wall_s"],
                          "arrange x sort": best["arrange_cpu_s"] / floor,
                          "load+arrange x sort": (best["load_cpu_s"] + best["arrange_cpu_s"]) / floor})
        print(f"\n{e['edges']:,} edges, arrange_by('src') (best of {a.repeats} by CPU; np.sort of the keys "
              f"{floor:.3f} s CPU)")
        print(table(erows, ["workers", "load cpu s", "load wall s", "arrange cpu s", "arrange wall s",
                            "arrange x sort", "load+arrange x sort"]))
    print("wrote", write_result("arrange", res, a.quick))
    return res


if __name__ == "__main__":
    main()
