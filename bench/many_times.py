"""A reduce handed many distinct times for one key at once: a backlog of epochs.

    python -m bench.many_times [--epochs 250 500 1000 2000 4000] [--workers 1 2] [--rows 10] [--repeat 3]
                               [--loop-epochs 250 1000] [--timeout 300] [--live 30] [--quick]
                               [--name many_times]

Backlog: a dataflow ``count(by=[])`` (one key) is installed and waited for; then --epochs epochs of --rows
rows each are inserted (``insert`` and ``advance_to(e + 1)`` per epoch) as fast as Python can, and the
view is waited for. ``total s`` runs from the first insertion to the view being current, ``wait s`` from
the last ``advance_to``. The same epochs inserted *before* the install (so the reduce reads them as
compacted history) are the floor. Each case runs in a subprocess of its own; one that does not finish
within --timeout seconds is killed and reported as such, and the larger cases of that worker count are
skipped.

Loop (--loop-epochs): the same kind of backlog (3 rows per epoch over 2 keys) fed to
``a.iterate(lambda x: a.concat(x.count(by="a").map(...).flat_map(...)).distinct(), max_rounds=6)``: the
count inside the loop sees (epoch, round) times, which are only partially ordered.

Answers are checked after each clock stops: the backlog's count against the rows inserted, the loop's rows
against a NumPy evaluation of its body (``loop_reference``); a wrong one fails its case (``WrongAnswer``),
which is then reported as failed with the error, never as a time.

Live (--live SECONDS, 0 to skip): a writer thread inserts 10 rows per epoch every 10 ms into a
``count(by="g")`` (3 keys), a reader thread loops ``view.to_pandas()`` (and a read one epoch back), and
every second for 4 seconds another dataflow ``map(...).count(by=[])`` is installed on the same input.
Reported: how far each dataflow's frontier trails the input at the end, and how long they take to catch
up once the writer stops (or that they did not within 60 s); once caught up, every view's counts are
checked against the rows the writer inserted (a wrong one: ``WrongAnswer``, reported as failed).

The program uses only the public API (plus ``work_done()`` of the reduce operators where they have it),
so the same file measures an older checkout: copy it there and run it with that checkout on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

from .common import WrongAnswer, check_counts, check_rows, parse_args, table, write_result

QUICK = {"epochs": [250, 500], "workers": [1], "live": 0, "timeout": 60, "repeat": 1, "loop_epochs": [100]}


def _reduce_work(view):
    from kpgnb.engine.operators.reduce import ReduceOp
    op = view.op.inputs[0]
    if isinstance(op, ReduceOp) and hasattr(op, "work_done"):
        return op.work_done()
    return None


def backlog(epochs: int, workers: int, rows: int, before_install: bool = False) -> dict:
    import kpgnb as kp
    eng = kp.Engine(workers=workers)
    try:
        st = eng.input("st", ["k", "g"])
        st.advance_to(1)

        def feed():
            for e in range(1, epochs + 1):
                st.insert([(e * rows + i, i % 3) for i in range(rows)])
                st.advance_to(e + 1)

        t0 = time.perf_counter()
        if before_install:
            feed()
            time.sleep(0.5)  # let the scheduler take the epochs in before the clock starts
            t0 = time.perf_counter()
        with eng.dataflow("a") as df:
            v = df.input("st").count(by=[]).view("c")
        eng.wait(v)
        if not before_install:
            t0 = time.perf_counter()
            feed()
        t1 = time.perf_counter()
        eng.wait(v, timeout=3600)
        t2 = time.perf_counter()
        got = v.to_pandas()["count"].tolist()
        if got != [epochs * rows]:
            raise WrongAnswer(f"backlog count: wrong answer: {got}, expected [{epochs * rows}]")
        return {"epochs": epochs, "workers": workers, "rows": rows, "before_install": before_install,
                "total_s": t2 - t0, "wait_s": t2 - t1, "work": _reduce_work(v)}
    finally:
        eng.close()


def _flat(a, b):
    idx = np.repeat(np.arange(len(a)), 2)
    return {"a": a[idx], "b": np.where(np.arange(len(idx)) % 2 == 0, b[idx], (b[idx] + 1) % 6)}, idx


def loop_reference(a, b, rounds: int = 6) -> dict:
    """The loop's answer computed with NumPy: x = A, then ``rounds`` times x = distinct(A + flat(b = count
    of x's rows per a, mod 6)) (``iterate(max_rounds=rounds)`` applies the body that many times)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    xa, xb = a, b
    for _ in range(rounds):
        ka, cnt = np.unique(xa, return_counts=True)
        fa, fb = np.repeat(ka, 2), np.stack([cnt % 6, (cnt % 6 + 1) % 6], axis=1).ravel()
        rows = np.unique(np.stack([np.concatenate([a, fa]), np.concatenate([b, fb])], axis=1), axis=0)
        xa, xb = rows[:, 0], rows[:, 1]
    return {"a": xa, "b": xb}


def loop(epochs: int, workers: int, rows: int = 3) -> dict:
    """A backlog of epochs into a loop whose body counts a key: the reduce sees (epoch, round) times,
    which are only partially ordered. The answer is checked against ``loop_reference`` after the clock."""
    import kpgnb as kp
    rng = np.random.default_rng(0)
    eng = kp.Engine(workers=workers)
    try:
        a_in = eng.input("A", ["a", "b"])
        a_in.advance_to(1)
        with eng.dataflow("loop") as df:
            a = df.input("A")
            v = a.iterate(lambda x: a.concat(x.count(by="a").map(lambda a, count: {"a": a, "b": count % 6})
                                             .flat_map(_flat)).distinct(), max_rounds=6).view("out")
        eng.wait(v)
        sent = []
        t0 = time.perf_counter()
        for e in range(1, epochs + 1):
            batch = [(int(rng.integers(2)), int(rng.integers(40))) for _ in range(rows)]
            a_in.insert(batch)
            a_in.advance_to(e + 1)
            sent.append(batch)
        t1 = time.perf_counter()
        eng.wait(v, timeout=3600)
        t2 = time.perf_counter()
        got = v.to_pandas()
        sent = np.asarray(sent, np.int64).reshape(-1, 2)
        check_rows(got, loop_reference(sent[:, 0], sent[:, 1]), "loop")
        return {"epochs": epochs, "workers": workers, "rows": rows, "total_s": t2 - t0, "wait_s": t2 - t1,
                "out_rows": len(got)}
    finally:
        eng.close()


def bounded(timeout: float, **kw) -> dict:
    """One measurement (``case`` is backlog or live) in a subprocess of this program, killed after
    ``timeout`` seconds (then {"timed_out": True, ...}): a case that runs away cannot slow the next."""
    cmd = [sys.executable, "-m", "bench.many_times", "--case", json.dumps(kw)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        return {**kw, "timed_out": True, "total_s": None, "wait_s": None, "timeout_s": timeout}
    lines = [x for x in out.stdout.splitlines() if x.startswith(_MARK)]
    if out.returncode != 0 or not lines:
        return {**kw, "error": (out.stderr or out.stdout)[-2000:]}
    return json.loads(lines[-1][len(_MARK):])


_MARK = "many_times-result:"


def _case(spec: str):
    kw = json.loads(spec)
    kind = kw.pop("case")
    backlog(20, kw.get("workers", 1), 10)  # load the kernels outside the measurement
    res = {"backlog": backlog, "live": live, "loop": loop}[kind](**kw)
    print(_MARK + json.dumps(res), flush=True)


def live(duration: float, workers: int, sleep: float = 0.01, sides: int = 4) -> dict:
    import kpgnb as kp
    eng = kp.Engine(workers=workers)
    try:
        st = eng.input("st", ["k", "g"])
        st.advance_to(1)
        with eng.dataflow("tot") as df:
            v = df.input("st").count(by="g").view("total")
        eng.wait(v)
        stop = threading.Event()
        written = [0]   # batches of 10 rows inserted (and advanced past)

        def writer():
            e = 1
            while not stop.is_set():
                st.insert([(e * 10 + i, i % 3) for i in range(10)])
                e += 1
                st.advance_to(e)
                written[0] += 1
                time.sleep(sleep)

        def reader():
            while not stop.is_set():
                v.to_pandas()
                fe = v.epoch
                if fe and fe >= 2:
                    v.to_pandas(at=fe - 1)
                time.sleep(0.002)

        threads = [threading.Thread(target=writer, daemon=True), threading.Thread(target=reader, daemon=True)]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        views = {"tot": v}
        for i in range(sides):
            time.sleep(1)
            with eng.dataflow(f"side{i}") as df:
                views[f"side{i}"] = df.input("st").map(lambda k, g: {"k2": k * 2}).count(by=[]).view(f"side{i}")
        time.sleep(max(0.0, duration - (time.perf_counter() - t0)))
        lag = {n: st.epoch - (x.epoch or 0) for n, x in views.items()}
        stop.set()
        for t in threads:
            t.join()
        t1 = time.perf_counter()
        caught = True
        try:
            for x in views.values():
                eng.wait(x, timeout=60)
        except TimeoutError:
            caught = False
        if caught:   # the answers checked before any figure is reported
            n = written[0]
            check_counts(v, np.tile(np.arange(10) % 3, n), "live: count(by='g')", key="g")
            for name in views.keys() - {"tot"}:   # map(...).count(by=[]): every row inserted
                got = views[name].to_pandas()["count"].tolist()
                if got != [10 * n]:
                    raise WrongAnswer(f"live: {name}: wrong answer: {got}, expected [{10 * n}]")
        return {"workers": workers, "duration_s": duration, "input_epochs": st.epoch, "lag_epochs": lag,
                "max_lag_epochs": max(lag.values()), "caught_up": caught,
                "catch_up_s": time.perf_counter() - t1 if caught else None}
    finally:
        eng.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, nargs="*", default=[250, 500, 1000, 2000, 4000])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rows", type=int, default=10)
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds after which a backlog case is reported as timed out")
    p.add_argument("--loop-epochs", type=int, nargs="*", default=[250, 1000],
                   help="backlogs fed to a loop that counts inside (partially ordered times)")
    p.add_argument("--live", type=float, default=30.0, help="seconds of the live scenario (0: skip it)")
    p.add_argument("--repeat", type=int, default=3, help="runs per backlog case; the median is reported")
    p.add_argument("--name", default="many_times", help="result file name (e.g. many_times-before)")
    p.add_argument("--case", help=argparse.SUPPRESS)  # internal: one measurement, in a subprocess
    if argv is None and "--case" in sys.argv:
        return _case(sys.argv[sys.argv.index("--case") + 1])
    a = parse_args(p, argv, QUICK, positive=("epochs", "rows", "repeat", "loop_epochs"))
    results, rows, stopped = [], [], {}  # worker count -> why its larger cases are skipped
    for w in a.workers:
        for n in a.epochs:
            if w in stopped:
                r = {"epochs": n, "workers": w, "rows": a.rows, "skipped": stopped[w]}
            else:
                runs = []
                for _ in range(a.repeat):
                    runs.append(bounded(a.timeout, case="backlog", epochs=n, workers=w, rows=a.rows))
                    if runs[-1].get("total_s") is None:
                        break
                if all(x.get("total_s") is not None for x in runs):
                    runs.sort(key=lambda x: x["total_s"])
                    r = {**runs[len(runs) // 2], "runs_total_s": [x["total_s"] for x in runs]}
                else:
                    r = runs[-1]
                    if r.get("timed_out"):
                        stopped[w] = f"a smaller case ({n:,} epochs) timed out"
                    else:
                        err = str(r.get("error") or "no result").strip().splitlines() or ["no result"]
                        stopped[w] = f"a smaller case ({n:,} epochs) failed: {err[-1][:200]}"
            floor = bounded(a.timeout, case="backlog", epochs=n, workers=w, rows=a.rows, before_install=True)
            r["history_then_install_s"] = floor.get("total_s")
            results.append(r)
            work = r.get("work") or {}
            rows.append({"workers": w, "epochs": n,
                         "total s": r.get("total_s") if r.get("total_s") is not None else
                         (f"> {a.timeout:.0f}" if r.get("timed_out") else "failed" if r.get("error") else "-"),
                         "wait s": r.get("wait_s"), "history first s": r["history_then_install_s"],
                         "phase 1 work": work.get("times"), "phase 3 work": work.get("diff")})
            print(table(rows[-1:], list(rows[-1])), flush=True)
    if rows:
        print(table(rows, list(rows[0])))
    out = {"rows_per_epoch": a.rows, "backlog": results, "loop": []}
    lrows = []
    for w in a.workers:
        for n in a.loop_epochs:
            r = bounded(a.timeout, case="loop", epochs=n, workers=w)
            out["loop"].append(r)
            lrows.append({"workers": w, "epochs": n, "total s": r.get("total_s") if r.get("total_s") is not None
                          else (f"> {a.timeout:.0f}" if r.get("timed_out") else "failed" if r.get("error") else "-"),
                          "wait s": r.get("wait_s")})
    if lrows:
        print(table(lrows, list(lrows[0])))
    if a.live:
        out["live"] = [bounded(a.live + 120, case="live", duration=a.live, workers=w) for w in a.workers]
        print(table([{"workers": x.get("workers"), "input epochs": x.get("input_epochs"),
                      "max lag (epochs)": x.get("max_lag_epochs"),
                      "caught up": {True: "yes", False: "no within 60 s"}.get(
                          x.get("caught_up"), "failed" if x.get("error") else "-"),
                      "catch-up s": x.get("catch_up_s")} for x in out["live"]],
                    ["workers", "input epochs", "max lag (epochs)", "caught up", "catch-up s"]))
    print("wrote", write_result(a.name, out, a.quick))
    return out


if __name__ == "__main__":
    main()
