"""What the live dashboard costs: update throughput of bench.latency's closed loop (a count over --keys
keys; insert one row, advance the epoch, wait for the view) with the dashboard closed and with it open
and refreshing, in one program, on one engine and the same data, alternating --rounds times.

    python -m bench.dashboard [--keys 1000000] [--updates 500] [--rounds 12] [--workers 1] [--quick]

There is no kernel here, so every widget message is serialized as ipykernel would (jupyter_client's
Session: JSON, buffers, HMAC signature) and dropped instead of sent. Reported: updates/s and p50/p99
latency and process CPU time per update per phase, the updater's refreshes, messages and CPU share while open, and the throughput ratio
open/closed: each round's (its two phases ran back to back), their median (target: at least 0.95, under
5% slowdown) and the ratio of the medians. After the last phase (outside every timed phase) the view's
counts are compared with ``np.unique`` of every inserted key (``bench.common.check_counts``): a wrong count
raises ``WrongAnswer`` and no throughput is reported.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import check_counts, parse_args, percentile, table, write_result

QUICK = {"keys": 20_000, "updates": 300, "rounds": 2}


class _Wire:
    """Counts and serializes what the widgets would send to the frontend."""

    def __init__(self):
        from jupyter_client.session import Session
        self.session = Session(key=b"bench")
        self.messages = 0
        self.bytes = 0

    def install(self):
        import comm
        from comm.base_comm import BaseComm
        wire = self

        class SerializingComm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
                msg = wire.session.msg(msg_type, content={"data": data or {}, "comm_id": self.comm_id, **keys},
                                       metadata=metadata or {})
                parts = wire.session.serialize(msg)
                wire.messages += 1
                wire.bytes += sum(len(p) for p in parts) + sum(len(memoryview(b)) for b in buffers or ())

        comm.create_comm = SerializingComm


def _phase(eng, inp, view, rng, keys: int, updates: int, inserted: list) -> dict:
    lat = []
    more = rng.integers(0, keys, updates)
    inserted.append(more)  # for the answer check after the phases
    t_start, c_start = time.perf_counter(), time.process_time()
    for i in range(updates):
        t0 = time.perf_counter()
        inp.insert([(int(more[i]),)])
        inp.advance_to(inp.epoch + 1)
        eng.wait(view)
        lat.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - c_start
    lat = np.array(lat) * 1e3
    return {"updates_per_s": updates / elapsed, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "cpu_ms_per_update": cpu / updates * 1e3}


def med(rs, k) -> float:
    return float(np.median([r[k] for r in rs]))


def measure(keys: int, updates: int, rounds: int, workers: int, seed: int = 0) -> dict:
    import kpgnb as kp
    from kpgnb.widgets import Dashboard
    wire = _Wire()
    wire.install()
    rng = np.random.default_rng(seed)
    closed, opened = [], []
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("keys", ["k"])
        inserted = [rng.integers(0, keys, keys)]
        inp.insert({"k": inserted[0]})
        inp.advance_to(1)
        with eng.dataflow("count") as df:
            view = df.input("keys").count(by="k").view("counts")
        eng.wait(view)
        _phase(eng, inp, view, rng, keys, max(50, updates // 10), inserted)  # warm-up
        Dashboard(eng).close()  # the first one pays matplotlib's imports and font cache
        for i in range(rounds):
            # closed-open, then open-closed: a machine whose load drifts during the run favours neither
            for is_open in ((False, True) if i % 2 == 0 else (True, False)):
                if not is_open:
                    closed.append(_phase(eng, inp, view, rng, keys, updates, inserted))
                    continue
                dash = Dashboard(eng)
                m0, b0, r0, c0 = wire.messages, wire.bytes, dash.updater.refreshes, dash.updater.cpu_s
                t0 = time.perf_counter()
                res = _phase(eng, inp, view, rng, keys, updates, inserted)
                secs = time.perf_counter() - t0
                res.update(refreshes_per_s=(dash.updater.refreshes - r0) / secs,
                           messages_per_s=(wire.messages - m0) / secs, kib_per_s=(wire.bytes - b0) / secs / 1024,
                           updater_cpu_share=(dash.updater.cpu_s - c0) / secs)
                dash.close()
                opened.append(res)
        check_counts(view, np.concatenate(inserted), "dashboard count")
    return {"keys": keys, "updates": updates, "rounds": rounds, "workers": workers, "closed": closed, "open": opened,
            "closed_updates_per_s": med(closed, "updates_per_s"), "open_updates_per_s": med(opened, "updates_per_s"),
            "ratio": med(opened, "updates_per_s") / med(closed, "updates_per_s"),
            "paired_ratios": [o["updates_per_s"] / c["updates_per_s"] for o, c in zip(opened, closed)],
            "median_paired_ratio": float(np.median([o["updates_per_s"] / c["updates_per_s"]
                                                    for o, c in zip(opened, closed)])),
            "cpu_ratio": med(opened, "cpu_ms_per_update") / med(closed, "cpu_ms_per_update"),
            "open_refreshes_per_s": med(opened, "refreshes_per_s"), "open_messages_per_s": med(opened, "messages_per_s"),
            "open_kib_per_s": med(opened, "kib_per_s"), "updater_cpu_share": med(opened, "updater_cpu_share")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--updates", type=int, default=500, help="closed-loop updates per phase")
    p.add_argument("--rounds", type=int, default=12, help="closed/open phase pairs (closed-open, open-closed, ...)")
    p.add_argument("--workers", type=int, default=1)
    a = parse_args(p, argv, QUICK, positive=("keys", "updates", "rounds"))
    res = measure(a.keys, a.updates, a.rounds, a.workers)
    rows = [{"dashboard": "closed", "updates/s": res["closed_updates_per_s"],
             "CPU ms/update": med(res["closed"], "cpu_ms_per_update"),
             "p50 ms": med(res["closed"], "p50_ms"), "p99 ms": med(res["closed"], "p99_ms")},
            {"dashboard": "open, refreshing", "updates/s": res["open_updates_per_s"],
             "CPU ms/update": med(res["open"], "cpu_ms_per_update"),
             "p50 ms": med(res["open"], "p50_ms"), "p99 ms": med(res["open"], "p99_ms"),
             "refreshes/s": res["open_refreshes_per_s"], "messages/s": res["open_messages_per_s"],
             "KiB/s": res["open_kib_per_s"], "updater CPU": f"{100 * res['updater_cpu_share']:.1f}%"}]
    print(table(rows, ["dashboard", "updates/s", "p50 ms", "p99 ms", "CPU ms/update", "refreshes/s", "messages/s",
                       "KiB/s", "updater CPU"]))
    print(f"open/closed throughput: {res['median_paired_ratio']:.3f} (median of the rounds' ratios; target >= 0.95; "
          f"ratio of the medians {res['ratio']:.3f}); per round: " + ", ".join(f"{r:.3f}" for r in res["paired_ratios"]))
    print("wrote", write_result("dashboard", res, a.quick))
    return res


if __name__ == "__main__":
    main()
