"""Cold start: how long until the engine's kernels are ready and a first small dataflow has its result,
right after an install (empty kernel cache: "cold") and afterwards ("warm").

    python -m bench.coldstart [--repeat 2] [--rows 2000] [--scenarios script,lazy,notebook] [--quick]

Every measurement runs in a fresh Python process. Cold runs point the kernel cache at a new empty
directory (``KPGNB_CACHE_DIR``; ``NUMBA_CACHE_DIR`` for code that predates engine/kernels/cache.py), warm
runs reuse the directory the cold run filled. Each child also counts the kernel specializations numba
compiled and the ones it loaded from the cache, so a "cold" run that was not cold shows.

Scenarios:

- ``script``: ``import kpgnb.engine.runtime``, ``warm_kernels()`` (what ``python -m kpgnb demo`` does),
  then a first dataflow (a count and a join over an input of --rows rows) until its views are ready.
- ``lazy``: the same first dataflow without a warm-up: numba compiles what it runs on first use.
- ``notebook``: IPython's ``InteractiveShell``: ``%load_ext kpgnb``, then at once a first ``%%dataflow``
  cell with the same dataflow; the time from ``%load_ext`` to the cell's result (its views computed).
  Needs the extension (kpgnb/extension.py); skipped, and said so, without it.

Times are seconds from the start of the child's code (interpreter start-up excluded; ``wall_s`` includes
it). The machine's load average is recorded with each run: timings on a busy machine are not comparable.
Each child checks the first dataflow's answer after its clock stops (``check_first``: the out-degrees and
the two-hop counts against NumPy); a wrong answer fails the child, and the run reports no time.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .common import check_counts, parse_args, table, write_result

QUICK = {"repeat": 1, "rows": 500, "scenarios": "script,notebook"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MARK = "coldstart-result:"

# the first dataflow: a count and a join, over one input of ROWS edges (core, reduce and join kernels)
CELL = ('deg = e.count(by="src").view("deg")\n'
        'two = e.join(e, left_on="dst", right_on="src").count(by="src").view("two")\n')


def _edges(rows: int):
    import numpy as np
    rng = np.random.default_rng(0)
    nodes = max(2, rows // 4)
    return {"src": rng.integers(0, nodes, rows), "dst": rng.integers(0, nodes, rows)}


def _counters():
    """numba compile events of kpgnb kernels, from now on."""
    from numba.core import event as ev
    compiled = []

    class Listener(ev.Listener):
        def on_start(self, event):
            pass

        def on_end(self, event):
            fn = event.data["dispatcher"].py_func
            if fn.__module__.startswith("kpgnb"):
                compiled.append(fn.__qualname__)

    ev.register("numba:compile", Listener())
    return compiled


def _cache_loads() -> int:
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import kpgnb.engine.kernels as K
    n = 0
    for m in pkgutil.iter_modules(K.__path__):
        mod = importlib.import_module("kpgnb.engine.kernels." + m.name)
        for f in vars(mod).values():
            if isinstance(f, CPUDispatcher) and f.__module__ == mod.__name__:
                n += sum(f._cache_hits.values())
    return n


def check_first(deg, two, rows: int):
    """The first dataflow's views against NumPy (WrongAnswer if they differ): ``deg`` counts each src's
    edges; ``two`` counts each src's two-hop paths (sum over its edges u -> d of d's out-degree, when
    positive)."""
    import numpy as np
    e = _edges(rows)
    src, dst = e["src"], e["dst"]
    check_counts(deg, src, "coldstart deg", key="src")
    outdeg = np.bincount(src, minlength=int(max(src.max(), dst.max())) + 1)
    hops = np.bincount(src, weights=outdeg[dst], minlength=len(outdeg)).astype(np.int64)
    keep = np.flatnonzero(hops > 0)
    check_counts(two, np.repeat(keep, hops[keep]), "coldstart two", key="src")


def _first_dataflow(eng, rows: int):
    e = eng.input("e", ["src", "dst"])
    e.insert(_edges(rows))
    e.advance_to(1)
    with eng.dataflow("first") as df:
        e_ = df.input("e")
        scope = {"e": e_, "df": df}
        exec(CELL, scope)  # noqa: S102 - the same body as the notebook cell
        views = [scope["deg"], scope["two"]]
    for v in views:
        eng.wait(v)
    return views


def child_script(rows: int, warm: bool) -> dict:
    t0 = time.perf_counter()
    import numba  # noqa: F401 - imported first so that compile events can be counted
    compiled = _counters()
    import kpgnb.engine.runtime as rt
    out = {"import_s": time.perf_counter() - t0}
    if warm:
        from kpgnb.engine.warmup import warm_kernels
        warm_kernels()
        out["warm_s"] = time.perf_counter() - t0
    with rt.Engine(workers=2) as eng:
        views = _first_dataflow(eng, rows)
        out["first_result_s"] = time.perf_counter() - t0
        check_first(*views, rows)
        out["rows_out"] = sum(len(v.to_pandas()) for v in views)
    out["compiled"] = len(compiled)
    out["cache_loads"] = _cache_loads()
    return out


def child_notebook(rows: int) -> dict:
    t0 = time.perf_counter()
    import numba  # noqa: F401
    compiled = _counters()
    import numpy as np
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.user_ns.update(np=np, edges=_edges(rows))
    out = {"ipython_s": time.perf_counter() - t0}
    t_load = time.perf_counter()
    shell.run_line_magic("load_ext", "kpgnb")
    out["load_ext_s"] = time.perf_counter() - t_load
    shell.run_cell_magic("dataflow", "first --inputs e=edges", CELL)
    out["first_result_s"] = time.perf_counter() - t_load  # from %load_ext
    deg, two = shell.user_ns.get("deg"), shell.user_ns.get("two")
    if deg is None or two is None:
        raise RuntimeError("the %%dataflow cell did not bind its views")
    check_first(deg, two, rows)
    out["rows_out"] = len(deg.to_pandas()) + len(two.to_pandas())
    from kpgnb import extension
    w = extension.warmer()
    if w is not None and hasattr(w, "timings"):
        out["warmer_timings"] = dict(w.timings)
        w.wait(timeout=600)
        out["warmer_done_s"] = time.perf_counter() - t_load
    out["compiled"] = len(compiled)
    out["cache_loads"] = _cache_loads()
    shell.run_line_magic("unload_ext", "kpgnb")
    return out


def has_extension() -> bool:
    return os.path.isfile(os.path.join(ROOT, "kpgnb", "extension.py"))


def has_build_cache() -> bool:
    return os.path.isfile(os.path.join(ROOT, "engine", "kernels", "cache.py"))


def run_child(scenario: str, rows: int, cache_dir: str) -> dict:
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("KPGNB_CACHE_DIR", None)
    env["NUMBA_CACHE_DIR" if not has_build_cache() else "KPGNB_CACHE_DIR"] = cache_dir
    env["KPGNB_PROGRESS"] = "0"
    env["KPGNB_WORKERS"] = "2"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = (f"import json, sys; from bench import coldstart as c; "
            f"r = c.child_{'notebook' if scenario == 'notebook' else 'script'}"
            f"({rows}{'' if scenario == 'notebook' else ', ' + str(scenario == 'script')}); "
            f"print({_MARK!r} + json.dumps(r))")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1800)
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(_MARK)]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{scenario} child failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    r = json.loads(lines[-1][len(_MARK):])
    r.update(wall_s=wall, load_before=load)
    return r


def measure(scenarios, rows: int, repeat: int) -> list:
    rows_out = []
    for scenario in scenarios:
        if scenario == "notebook" and not has_extension():
            print("notebook: skipped (no kpgnb/extension.py in this tree)")
            continue
        for i in range(repeat):
            d = tempfile.mkdtemp(prefix="kpgnb-coldstart-")
            try:
                for state in ("cold", "warm"):
                    r = run_child(scenario, rows, d)
                    r.update(scenario=scenario, cache=state, run=i)
                    rows_out.append(r)
                    print(f"{scenario:9s} {state}: first result {r['first_result_s']:.2f} s, "
                          f"compiled {r['compiled']}, loaded {r['cache_loads']} (load avg {r['load_before']:.2f})",
                          flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    return rows_out


def summarize(results: list) -> list:
    out = []
    keys = sorted({(r["scenario"], r["cache"]) for r in results},
                  key=lambda k: (["script", "lazy", "notebook"].index(k[0]), k[1]))
    for sc, state in keys:
        rs = [r for r in results if r["scenario"] == sc and r["cache"] == state]
        best = min(rs, key=lambda r: r["first_result_s"])
        row = {"scenario": sc, "cache": state, "runs": len(rs), "first_result_s": best["first_result_s"],
               "compiled": best["compiled"], "loaded": best["cache_loads"], "load_avg": best["load_before"]}
        if "warm_s" in best:
            row["kernels_ready_s"] = best["warm_s"]
        if "load_ext_s" in best:
            row["load_ext_s"] = best["load_ext_s"]
        if "warmer_done_s" in best:
            row["kernels_ready_s"] = best["warmer_done_s"]
        out.append(row)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.coldstart", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=2, help="cold/warm pairs per scenario (the best is reported)")
    p.add_argument("--rows", type=int, default=2000, help="rows of the first dataflow's input")
    p.add_argument("--scenarios", default="script,lazy,notebook",
                   help="comma-separated: script, lazy, notebook")
    a = parse_args(p, argv, QUICK, positive=("repeat", "rows"))
    scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    for s in scenarios:
        if s not in ("script", "lazy", "notebook"):
            p.error(f"unknown scenario {s!r}")
    results = measure(scenarios, a.rows, a.repeat)
    summary = summarize(results)
    print(table(summary, ["scenario", "cache", "runs", "kernels_ready_s", "load_ext_s", "first_result_s",
                          "compiled", "loaded", "load_avg"]))
    payload = {"rows": a.rows, "repeat": a.repeat, "extension": has_extension(), "build_cache": has_build_cache(),
               "summary": summary, "runs": results}
    try:
        payload["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    except OSError:
        pass
    print("wrote", write_result("coldstart", payload, a.quick))
    return payload


if __name__ == "__main__":
    main()
