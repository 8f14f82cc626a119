"""Join proportionality (K-Pg section 6.5, Fig. 6f): install, execute and complete dataflows that join a
small collection of 10 .. 100,000 keys against a pre-arranged --keys collection, with and without the
shared arrangement, and DuckDB answering the same join.

    python -m bench.join_install [--keys 10000000] [--compare-keys 1000000] [--sizes 10,100,1000,10000,100000]
                                 [--repeats 5] [--unshared-repeats 2] [--workers 1] [--peer-timeout 300] [--quick]

Per big size (--keys, then --compare-keys, to show that the time does not follow the big side): a
collection ``big(k, v)`` of unique keys (inserted in random order, random values) is loaded once, arranged
by ``k`` and exported (``df.input("big").arrange_by("k").export("big")``). Then, per small size m and
repeat, a new input ``small(k)`` of m distinct keys (about 91% of them in big) is created and advanced, a
dataflow ``df.input(small).join(df.use("big"), on="k").view(...)`` installed and waited for: the time runs
from creating the small input to the view being current (install + execute + complete; also split into
input, install and wait), then reading the answer (``view.columns()``) is timed too ("answer ms"). The
dataflow and the small input are dropped after each repeat; each repeat joins different keys. "unshared"
is the same dataflow arranging big itself (``df.input("big").arrange_by("k")``). Every answer is compared
with pandas (a merge of the small frame with the big frame indexed by ``k``): row count and sorted rows.

Peer: DuckDB, in a subprocess (--peer-timeout), with as many threads as kpgnb has workers
(--duckdb-threads): the big table loaded once from the same pandas frame (``CREATE TABLE big AS SELECT *
FROM frame``), then the same small frames joined one query each (``register`` + ``SELECT s.k, b.v FROM
small s JOIN big b ON s.k = b.k`` + ``fetchnumpy``): on the plain table (what a user does first), then
again after ``CREATE UNIQUE INDEX ON big(k)``. Ratio columns: DuckDB's median time over kpgnb's (shared)
median time to the same answer in NumPy arrays ("answer ms"): above 1, kpgnb is faster.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import parse_args, table, write_result

SIZES = [10, 100, 1_000, 10_000, 100_000]
QUICK = {"keys": 1_000_000, "compare_keys": 100_000, "repeats": 3, "unshared_repeats": 1}


# -- data (the same in the benchmark process and the peer's subprocess) -----------------------------

def big_frame(n: int, seed: int = 0):
    """``big(k, v)``: the keys 0..n-1 in random order with random values."""
    import pandas as pd
    rng = np.random.default_rng([seed, n])
    k = rng.permutation(n).astype(np.int64)
    v = rng.integers(0, 1_000_000_000, n, dtype=np.int64)
    return pd.DataFrame({"k": k, "v": v})


def small_frame(n_big: int, m: int, rep: int, seed: int = 0):
    """``small(k)``: m distinct keys drawn from 0 .. 1.1 n_big (so about 9% are not in big)."""
    import pandas as pd
    rng = np.random.default_rng([seed, n_big, m, rep, 1])
    k = rng.choice(n_big + n_big // 10, m, replace=False).astype(np.int64)
    return pd.DataFrame({"k": k})


COLS = ["k", "v"]


def expected_join(small, big_by_k):
    """The reference answer: pandas merge of the small frame with big indexed by k (rows k, v)."""
    out = small.merge(big_by_k, left_on="k", right_index=True, how="inner")
    return {c: out[c].to_numpy(np.int64) for c in COLS}


def _sorted_rows(cols: dict) -> np.ndarray:
    a = np.stack([np.asarray(cols[c], np.int64) for c in COLS])
    return a[:, np.lexsort(a[::-1])]


def check_join(got: dict, expected: dict) -> str | None:
    """None if ``got`` (columns k, v) holds exactly the expected rows, else what differs."""
    missing = [c for c in COLS if c not in got]
    if missing:
        return f"wrong answer: columns {missing} missing (got {sorted(got)})"
    n, m = len(got["k"]), len(expected["k"])
    if n != m:
        return f"wrong answer: {n:,} rows, expected {m:,}"
    if not np.array_equal(_sorted_rows(got), _sorted_rows(expected)):
        return "wrong answer: the rows differ from pandas' merge"
    return None


# -- kpgnb ------------------------------------------------------------------------------------------

def kpgnb_side(n_big: int, sizes, repeats: int, unshared_repeats: int, workers: int, seed: int = 0,
               expected=None, log=print) -> dict:
    """Load and export big, then time the small joins with and without the export. ``expected(m, rep)``
    gives the reference answer of repeat ``rep`` at small size ``m``."""
    import kpgnb as kp
    big = big_frame(n_big, seed)
    out = {"keys": n_big, "workers": workers, "shared": {}, "unshared": {}}
    with kp.Engine(workers=workers) as eng:
        t0 = time.perf_counter()
        inp = eng.input("big", ["k", "v"])
        inp.insert({"k": big["k"].to_numpy(), "v": big["v"].to_numpy()})
        inp.advance_to(1)
        t1 = time.perf_counter()
        with eng.dataflow("base") as df:
            df.input("big").arrange_by("k").export("big")
        eng.wait("base")
        t2 = time.perf_counter()
        out["load_s"], out["arrange_export_s"] = t1 - t0, t2 - t1
        del big
        # warm the join path (kernels compiled or loaded from the cache) outside the measurements
        for shared in (True, False):
            _one(eng, "warm", small_frame(n_big, 10, 1_000_000, seed), shared=shared, cheap=True)
        for shared, reps in ((True, repeats), (False, unshared_repeats)):
            for m in sizes:
                runs = []
                for r in range(reps):
                    small = small_frame(n_big, m, r, seed)
                    res = _one(eng, f"j{m}_{r}", small, shared)
                    got = res.pop("columns")
                    res["answer"] = check_join(got, expected(m, r)) if expected is not None else None
                    res["answer"] = res["answer"] or "ok"
                    res["rows"] = len(got["k"])
                    runs.append(res)
                key = "shared" if shared else "unshared"
                out[key][m] = _summary(runs)
                r = out[key][m]
                log(f"  kpgnb {key:>8} big {n_big:>11,} small {m:>7,}: "
                    + (f"{r['total_ms']:9.2f} ms (install {r['install_ms']:.2f} ms), ok" if r["answer"] == "ok"
                       else r["answer"]))
    return out


def _one(eng, name: str, small, shared: bool, cheap: bool = False) -> dict:
    """One small join: (create the input, install, wait, read) timed; then drop both."""
    sname = f"small_{name}_{'s' if shared else 'u'}"
    dname = f"{name}_{'s' if shared else 'u'}"
    t0 = time.perf_counter()
    s = eng.input(sname, ["k"], rows={"k": small["k"].to_numpy()})
    s.advance_to(1)
    t1 = time.perf_counter()
    with eng.dataflow(dname) as df:
        right = df.use("big") if shared else df.input("big").arrange_by("k")
        view = df.input(sname).join(right, on="k").view("out")
    t2 = time.perf_counter()
    eng.wait(view)
    t3 = time.perf_counter()
    cols = view.columns()
    t4 = time.perf_counter()
    eng.drop(dname)
    eng.drop_input(sname)
    if cheap:
        return {}
    return {"input_ms": (t1 - t0) * 1e3, "install_ms": (t2 - t1) * 1e3, "wait_ms": (t3 - t2) * 1e3,
            "total_ms": (t3 - t0) * 1e3, "read_ms": (t4 - t3) * 1e3, "answer_ms": (t4 - t0) * 1e3,
            "columns": cols}


def _summary(runs: list) -> dict:
    bad = [r["answer"] for r in runs if r["answer"] != "ok"]
    out = {"repeats": len(runs), "answer": bad[0] if bad else "ok", "rows": [r["rows"] for r in runs],
           "runs": runs}
    for f in ("input_ms", "install_ms", "wait_ms", "total_ms", "read_ms", "answer_ms"):
        out[f] = float(np.median([r[f] for r in runs]))
    out["total_min_ms"] = float(min(r["total_ms"] for r in runs))
    if bad:  # a wrong answer is a failure, never a number (no time of any part of it, nor of its runs)
        for f in ("input_ms", "install_ms", "wait_ms", "total_ms", "read_ms", "answer_ms", "total_min_ms"):
            out[f] = None
        out["runs"] = [{"answer": r["answer"], "rows": r["rows"]} for r in runs]
    return out


# -- the DuckDB peer (subprocess) ---------------------------------------------------------------------

def duckdb_side(n_big: int, sizes, repeats: int, seed: int = 0, threads: int = 0, indexes=(False, True)) -> dict:
    """In the peer's process: load big once, then time each small join; with ``True`` in ``indexes`` the
    same again after creating a unique index on big(k). Returns times and the answers (for checking)."""
    import duckdb
    big = big_frame(n_big, seed)
    con = duckdb.connect(config={"threads": threads} if threads else {})
    t0 = time.perf_counter()
    con.register("big_frame", big)
    con.execute("CREATE TABLE big AS SELECT * FROM big_frame")
    con.unregister("big_frame")
    out = {"version": duckdb.__version__, "threads": con.execute("SELECT current_setting('threads')").fetchall()[0][0],
           "load_s": time.perf_counter() - t0, "configs": {}}
    del big
    for index in indexes:
        cfg = {}
        if index:
            t0 = time.perf_counter()
            con.execute("CREATE UNIQUE INDEX big_k ON big(k)")
            cfg["index_s"] = time.perf_counter() - t0
        q = "SELECT s.k, b.v FROM small s JOIN big b ON s.k = b.k"
        con.register("small", small_frame(n_big, 10, 1_000_000, seed))  # warm
        con.execute(q).fetchnumpy()
        con.unregister("small")
        for m in sizes:
            times, answers = [], []
            for r in range(repeats):
                small = small_frame(n_big, m, r, seed)
                t0 = time.perf_counter()
                con.register("small", small)
                res = con.execute(q).fetchnumpy()
                con.unregister("small")
                times.append((time.perf_counter() - t0) * 1e3)
                answers.append({c: np.asarray(res[c], np.int64) for c in COLS})
            cfg[m] = {"times_ms": times, "answers": answers}
        out["configs"]["index" if index else "table"] = cfg
    return out


def _peer_main(conn, fn, args):
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        import traceback
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        conn.close()


def run_peer(fn, args, timeout: float):
    """Run ``fn(*args)`` in a fresh ('spawn') process: ("ok", result), ("error", text), ("timeout", None)
    or ("not installed", module)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_peer_main, args=(send, fn, args), daemon=True)
    p.start()
    send.close()
    try:
        if not recv.poll(timeout):
            return "timeout", None
        return recv.recv()
    except EOFError:
        return "error", f"the peer's process died (exit code {p.exitcode})"
    finally:
        if p.is_alive():
            p.terminate()
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()


def peer_duckdb(n_big, sizes, repeats, seed, timeout, expected, threads: int = 0) -> dict:
    try:
        import duckdb  # noqa: F401 - only whether it is installed
    except ImportError:
        return {"status": "not installed"}
    t0 = time.perf_counter()
    status, res = run_peer(duckdb_side, (n_big, list(sizes), repeats, seed, threads), timeout)
    if status == "timeout":
        return {"status": f"> {timeout:g} s"}
    if status != "ok":
        return {"status": "failed", "error": res}
    out = {"status": "ok", "version": res["version"], "threads": res["threads"], "load_s": res["load_s"],
           "wall_s": time.perf_counter() - t0, "configs": {}}
    for cname, cfg in res["configs"].items():
        c = {"index_s": cfg.get("index_s")}
        for m in sizes:
            answers = cfg[m]["answers"]
            bad = [e for e in (check_join(a, expected(m, r)) for r, a in enumerate(answers)) if e]
            c[m] = {"times_ms": cfg[m]["times_ms"], "answer": bad[0] if bad else "ok",
                    "median_ms": None if bad else float(np.median(cfg[m]["times_ms"]))}
        out["configs"][cname] = c
    return out


# -- the benchmark ------------------------------------------------------------------------------------

def reference(n_big: int, sizes, repeats: int, seed: int = 0):
    """expected(m, rep) for big size n_big, computed with pandas (cached per small set)."""
    big_by_k = big_frame(n_big, seed).set_index("k")
    cache: dict = {}

    def expected(m, r):
        if (m, r) not in cache:
            cache[(m, r)] = expected_join(small_frame(n_big, m, r, seed), big_by_k)
        return cache[(m, r)]
    return expected


def run(bigs, sizes, repeats: int, unshared_repeats: int, workers: int, peer_timeout: float, seed: int = 0,
        peers: bool = True, duckdb_threads: int | None = None, log=print) -> dict:
    duckdb_threads = workers if duckdb_threads is None else duckdb_threads
    out = {"sizes": list(sizes), "repeats": repeats, "unshared_repeats": unshared_repeats, "workers": workers,
           "duckdb_threads": duckdb_threads or "default", "peer_timeout_s": peer_timeout, "bigs": {}}
    for n in bigs:
        expected = reference(n, sizes, max(repeats, unshared_repeats), seed)
        res = kpgnb_side(n, sizes, repeats, unshared_repeats, workers, seed, expected, log)
        if peers:
            res["duckdb"] = peer_duckdb(n, sizes, repeats, seed, peer_timeout, expected, duckdb_threads)
            log(f"  duckdb big {n:,}: {res['duckdb']['status']}")
        out["bigs"][n] = res
    return out


def rows_of(res: dict) -> list:
    rows = []
    bigs = list(res["bigs"])
    for n, b in res["bigs"].items():
        duck = b.get("duckdb", {})
        for m in res["sizes"]:
            sh, un = b["shared"][m], b["unshared"][m]
            row = {"big": n, "small": m, "shared ms": sh["total_ms"], "install ms": sh["install_ms"],
                   "answer ms": sh["answer_ms"], "unshared ms": un["total_ms"],
                   "unshared/shared": None if not sh["total_ms"] or not un["total_ms"]
                   else un["total_ms"] / sh["total_ms"]}
            if len(bigs) > 1 and n == bigs[0]:
                other = res["bigs"][bigs[1]]["shared"][m]["total_ms"]
                row[f"vs {bigs[1]:,}"] = None if not other or not sh["total_ms"] else sh["total_ms"] / other
            for cname, label in (("table", "duckdb"), ("index", "duckdb+index")):
                if duck.get("status") != "ok":
                    row[label] = duck.get("status", "-")
                    continue
                c = duck["configs"][cname][m]
                if c["median_ms"] is None:
                    row[label] = c["answer"]
                else:
                    row[label] = c["median_ms"]
                    row[f"{label} ratio"] = c["median_ms"] / sh["answer_ms"] if sh["answer_ms"] else None
            for f in ("shared ms", "unshared ms"):
                if row[f] is None:
                    row[f] = "wrong answer"
            rows.append(row)
    return rows


def _installed_version(dist: str):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=10_000_000, help="records in the big, pre-arranged collection")
    p.add_argument("--compare-keys", type=int, default=1_000_000,
                   help="a second big size (0: none), to show the time does not follow the big side")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x], default=SIZES,
                   help="small-side sizes, comma separated")
    p.add_argument("--repeats", type=int, default=5, help="repeats per size with the shared arrangement")
    p.add_argument("--unshared-repeats", type=int, default=2, help="repeats per size without it (at least 1)")
    p.add_argument("--workers", type=int, default=1, help="kpgnb workers (K-Pg's Fig. 6f: one)")
    p.add_argument("--duckdb-threads", type=int, default=None,
                   help="DuckDB threads (default: as many as kpgnb's workers; 0: DuckDB's own default)")
    p.add_argument("--peer-timeout", type=float, default=300.0, help="seconds before a peer is stopped")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = parse_args(p, argv, QUICK, positive=("keys", "repeats", "unshared_repeats"), least={"sizes": 1})
    if a.compare_keys == a.keys:
        p.error(f"--compare-keys {a.compare_keys}: the same as --keys (0: no second size)")
    bigs = [a.keys] + ([a.compare_keys] if a.compare_keys else [])
    sizes = [m for m in a.sizes if m <= min(bigs)]
    res = run(bigs, sizes, a.repeats, a.unshared_repeats, a.workers, a.peer_timeout, a.seed, not a.no_peers,
              a.duckdb_threads)
    rows = rows_of(res)
    cols = [c for c in ["big", "small", "shared ms", "install ms", "answer ms", "unshared ms", "unshared/shared"]
            + [f"vs {bigs[1]:,}" for _ in bigs[1:2]] + ["duckdb", "duckdb ratio", "duckdb+index",
                                                        "duckdb+index ratio"]]
    print(table(rows, cols))
    # the peers this run used: DuckDB's version as its subprocess reported it (else as installed)
    duck = [b["duckdb"] for b in res["bigs"].values() if "duckdb" in b and b["duckdb"]["status"] != "not installed"]
    if duck:
        res["versions"] = {"duckdb": next((d["version"] for d in duck if d.get("version")), None)
                           or _installed_version("duckdb")}
    print("wrote", write_result("join_install", res, a.quick))
    return res


if __name__ == "__main__":
    main()
