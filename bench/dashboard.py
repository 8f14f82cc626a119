"""What the live dashboard costs: update throughput of bench.latency's closed loop (a count over --keys
keys; insert one row, advance the epoch, wait for the view) with the dashboard closed and with it open
and refreshing, in one program, on one engine and the same data, alternating --rounds times.

    python -m bench.dashboard [--keys 1000000] [--updates 1500] [--rounds 3] [--workers 1] [--quick]

There is no kernel here, so every widget message is serialized as ipykernel would (jupyter_client's
Session: JSON, buffers, HMAC signature) and dropped instead of sent. Reported: updates/s and p50/p99
latency per phase, the updater's refreshes, messages and CPU share while open, and the ratio open/closed
(target: at least 0.95, under 5% slowdown).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import parse_args, percentile, table, write_result

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


def _phase(eng, inp, view, rng, keys: int, updates: int) -> dict:
    lat = []
    t_start = time.perf_counter()
    for _ in range(updates):
        t0 = time.perf_counter()
        inp.insert([(int(rng.integers(0, keys)),)])
        inp.advance_to(inp.epoch + 1)
        eng.wait(view)
        lat.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - t_start
    lat = np.array(lat) * 1e3
    return {"updates_per_s": updates / elapsed, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}


def measure(keys: int, updates: int, rounds: int, workers: int, seed: int = 0) -> dict:
    import kpgnb as kp
    from kpgnb.widgets import Dashboard
    wire = _Wire()
    wire.install()
    rng = np.random.default_rng(seed)
    closed, opened = [], []
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("keys", ["k"])
        inp.insert({"k": rng.integers(0, keys, keys)})
        inp.advance_to(1)
        with eng.dataflow("count") as df:
            view = df.input("keys").count(by="k").view("counts")
        eng.wait(view)
        _phase(eng, inp, view, rng, keys, max(50, updates // 10))  # warm-up
        Dashboard(eng).close()  # the first one pays matplotlib's imports and font cache
        for _ in range(rounds):
            closed.append(_phase(eng, inp, view, rng, keys, updates))
            dash = Dashboard(eng)
            m0, b0, r0, c0 = wire.messages, wire.bytes, dash.updater.refreshes, dash.updater.cpu_s
            t0 = time.perf_counter()
            res = _phase(eng, inp, view, rng, keys, updates)
            secs = time.perf_counter() - t0
            res.update(refreshes_per_s=(dash.updater.refreshes - r0) / secs, messages_per_s=(wire.messages - m0) / secs,
                       kib_per_s=(wire.bytes - b0) / secs / 1024, updater_cpu_share=(dash.updater.cpu_s - c0) / secs)
            dash.close()
            opened.append(res)
    med = lambda rs, k: float(np.median([r[k] for r in rs]))  # noqa: E731
    return {"keys": keys, "updates": updates, "rounds": rounds, "workers": workers, "closed": closed, "open": opened,
            "closed_updates_per_s": med(closed, "updates_per_s"), "open_updates_per_s": med(opened, "updates_per_s"),
            "ratio": med(opened, "updates_per_s") / med(closed, "updates_per_s"),
            "open_refreshes_per_s": med(opened, "refreshes_per_s"), "open_messages_per_s": med(opened, "messages_per_s"),
            "open_kib_per_s": med(opened, "kib_per_s"), "updater_cpu_share": med(opened, "updater_cpu_share")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--updates", type=int, default=1500, help="closed-loop updates per phase")
    p.add_argument("--rounds", type=int, default=3, help="closed/open phase pairs, alternating")
    p.add_argument("--workers", type=int, default=1)
    a = parse_args(p, argv, QUICK)
    res = measure(a.keys, a.updates, a.rounds, a.workers)
    rows = [{"dashboard": "closed", "updates/s": res["closed_updates_per_s"],
             "p50 ms": float(np.median([r["p50_ms"] for r in res["closed"]])),
             "p99 ms": float(np.median([r["p99_ms"] for r in res["closed"]]))},
            {"dashboard": "open, refreshing", "updates/s": res["open_updates_per_s"],
             "p50 ms": float(np.median([r["p50_ms"] for r in res["open"]])),
             "p99 ms": float(np.median([r["p99_ms"] for r in res["open"]])),
             "refreshes/s": res["open_refreshes_per_s"], "messages/s": res["open_messages_per_s"],
             "KiB/s": res["open_kib_per_s"], "updater CPU": f"{100 * res['updater_cpu_share']:.1f}%"}]
    print(table(rows, ["dashboard", "updates/s", "p50 ms", "p99 ms", "refreshes/s", "messages/s", "KiB/s",
                       "updater CPU"]))
    print(f"open/closed throughput: {res['ratio']:.3f} (target >= 0.95)")
    print("wrote", write_result("dashboard", res, a.quick))
    return res


if __name__ == "__main__":
    main()
