"""Session 25 attack on introspection: eng.stats() (arrangements, dataflows, ife, latency), operator_stats
and latency_histogram read from other threads while dataflows compute, install and drop. Never an
exception; never a torn record: every arrangement and every ife entry of one stats() result names a
dataflow that the same result lists; per-dataflow steps, updates and latency counts never go backwards
(each dataflow name is used once, so a reinstall cannot explain a drop)."""
import threading
import traceback
from collections import Counter

import numpy as np

import kpgnb as kp
from kpgnb import graphs


def _reader(eng, stop, errors, torn, examples):
    last = {}
    while not stop.wait(0.002):  # a dashboard polling at up to 500 Hz (a loop with no pause at all slows
        try:                     # the engine many times over: see the note on SWITCH_S in engine/scheduler.py)
            st = eng.stats()
            dfs = {d["name"] for d in st["dataflows"]}
            for a in st["arrangements"]:
                d = a["dataflow"]
                if d is not None and not d.endswith(" (dropped)") and d not in dfs:
                    torn["arrangement"] += 1
                    examples.setdefault("arrangement", (a["name"], d, sorted(dfs)))
            for r in st["ife"]:
                if r["dataflow"] not in dfs:
                    torn["ife"] += 1
                    examples.setdefault("ife", (r["operator"], r["dataflow"], sorted(dfs)))
                if r["state_differences"] < 0 or r["join_differences"] < 0:
                    torn["negative"] += 1
            for d in st["dataflows"]:
                try:
                    steps = sum(o["steps"] for o in eng.operator_stats(d["name"]))
                    lat = int(eng.latency_histogram(d["name"])[1].sum())
                except kp.UnknownNameError:
                    continue
                now = (steps, d["updates"], lat)
                before = last.get(d["name"], now)
                if any(b > n for b, n in zip(before, now)):
                    torn["backwards"] += 1
                    examples.setdefault("backwards", (d["name"], before, now))
                last[d["name"]] = tuple(max(b, n) for b, n in zip(before, now))
        except BaseException:  # noqa: BLE001 - reported by the test
            errors.append(traceback.format_exc())
            return


def test_stats_from_other_threads_while_ife_dataflows_install_and_drop():
    rng = np.random.default_rng(25)
    eng = kp.Engine(workers=2)
    stop = threading.Event()
    errors, torn, examples = [], Counter(), {}
    threads = []
    try:
        E = eng.input("edges", ["src", "dst", "w"], rows={"src": rng.integers(0, 300, 3000),
                                                         "dst": rng.integers(0, 300, 3000),
                                                         "w": rng.integers(1, 9, 3000)})
        S = eng.input("sources", ["source"], rows=[(0,), (1,)])
        E.advance_to(1), S.advance_to(1)
        with eng.dataflow("index") as df:
            df.input("edges").arrange_by("src").export("edges_by_src")
        threads = [threading.Thread(target=_reader, args=(eng, stop, errors, torn, examples)) for _ in range(2)]
        for t in threads:
            t.start()
        for i in range(40):
            if i >= 3:
                eng.drop(f"q{i - 3}")
            with eng.dataflow(f"q{i}") as df:
                v = graphs.sssp(df.use("edges_by_src"), df.input("sources"),
                                memory=("full", "jod", "drop")[i % 3]).view("d")
                df.input("edges").count(by="dst").view("c")
            E.insert({"src": rng.integers(0, 300, 20), "dst": rng.integers(0, 300, 20), "w": rng.integers(1, 9, 20)})
            E.advance_to(i + 2), S.advance_to(i + 2)
            if i % 2:
                eng.wait(v, timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        eng.close()
    assert not errors, errors[0]
    assert not torn, (dict(torn), examples)
