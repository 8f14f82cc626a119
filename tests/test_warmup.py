"""The background warm-up of the kernels (engine/warmup.py) and their per-build cache (engine/kernels/cache.py):
the Warmer's API, which families a dataflow needs, a real cold start in a fresh cache directory (a first
dataflow computed while the warmer compiles, right answers, nothing compiled twice), and a second install
of the same sources at another path loading everything from that cache."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

import kpgnb as kp
from kpgnb.engine import warmup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_warmer_api_with_kernels_cached():
    w = warmup.Warmer(processes=0).start()
    assert w.start() is w                     # starting twice is starting once
    seen = []
    assert w.wait(timeout=300, on_progress=lambda *p: seen.append(p))
    assert w.done and w.error is None
    assert w.progress() == (len(warmup.FAMILIES), len(warmup.FAMILIES), None)
    assert seen[-1] == w.progress() and all(0 <= d <= t for d, t, _ in seen)
    assert set(w.timings) == set(warmup.FAMILIES)
    assert all(warmup.is_ready(f) for f in warmup.FAMILIES)
    w.stop()                                  # after it finished: nothing to do
    assert warmup.active() is not w
    def warming():
        return any(t.name.startswith("kpgnb-warmer") and t.is_alive() for t in threading.enumerate()
                   if t is not threading.current_thread())
    deadline = time.monotonic() + 10
    while warming() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not warming(), "the warmer's threads end once it is done"


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="'joins'.*families are"):
        warmup.Warmer(["core", "joins"])


def test_families_a_dataflow_needs():
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["src", "dst"])
        b = eng.dataflow("plain")
        with b:
            b.input("e").map(lambda src, dst: {"a": dst, "b": src}).view("flipped")
        assert warmup.families_for(b) == ["core"]
        b = eng.dataflow("mixed")
        with b:
            e = b.input("e")
            e.join(e, left_on="dst", right_on="src").count(by="src").view("two")
        assert warmup.families_for(b) == ["core", "reduce", "join"]


CHILD = r"""
import json, sys, time
import numba
from numba.core import event as ev
compiled = []
class L(ev.Listener):
    def on_start(self, e): pass
    def on_end(self, e):
        f = e.data["dispatcher"].py_func
        if f.__module__.startswith("kpgnb"):
            compiled.append(f.__qualname__)
ev.register("numba:compile", L())
import numpy as np
import kpgnb as kp
from kpgnb.engine import warmup, kernels
from kpgnb.engine.kernels import cache
# nice=0: this checks the hand-off through the cache; a niced compile (the default, so that warm-up never
# slows the user's own work) gets almost no CPU beside normal-priority processes that keep the cores busy
w = warmup.Warmer(processes=int(sys.argv[1]), nice=0).start()
rng = np.random.default_rng(5)
src, dst = rng.integers(0, 60, 400), rng.integers(0, 60, 400)
with kp.Engine(workers=2) as eng:
    e = eng.input("e", ["src", "dst"], rows={"src": src, "dst": dst})
    e.advance_to(1)
    with eng.dataflow("first") as df:
        x = df.input("e")
        two = x.join(x, left_on="dst", right_on="src").count(by="src").view("two")
    eng.wait(two)
    got = sorted(map(tuple, two.to_pandas().itertuples(index=False)))
assert w.wait(timeout=900)
out_deg = np.bincount(src, minlength=60)
want = {}
for s, d in zip(src, dst):
    if out_deg[d]:
        want[int(s)] = want.get(int(s), 0) + int(out_deg[d])
print("RESULT" + json.dumps({"ok": got == sorted(want.items()), "error": w.error, "compiled": compiled,
                             "dir": cache.cache_dir(), "remote": sorted(w._remote)}))
"""


def _child(cache_dir, pythonpath, processes, cwd):
    env = dict(os.environ, KPGNB_CACHE_DIR=str(cache_dir), PYTHONPATH=str(pythonpath))
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", CHILD, str(processes)], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-4000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_cold_start_then_another_install_loads_from_the_cache(tmp_path):
    """Cold: an empty cache directory, a warmer compiling non-core families in a subprocess while the first
    dataflow runs. Then the same sources installed at another path find every kernel in
    the cache that the first run filled and compile nothing."""
    cache_dir = tmp_path / "cache"
    cold = _child(cache_dir, ROOT, 1, tmp_path)
    assert cold["ok"] and cold["error"] is None, cold
    assert cold["dir"].startswith(str(cache_dir)) and os.listdir(cold["dir"])
    assert cold["compiled"], "a cold run compiles"
    # nothing compiled twice in the notebook's process: a kernel compiles at most once
    assert len(cold["compiled"]) == len(set(cold["compiled"])), cold["compiled"]
    for fam in cold["remote"]:  # families compiled by the subprocess were loaded here, not compiled
        names = {d.py_func.__qualname__ for d, _ in warmup.kernel_signatures(fam)}
        assert not names & set(cold["compiled"]), (fam, cold["compiled"])

    site = tmp_path / "site"  # what an install lays out: the package-dir mapping of pyproject.toml, copied
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.join(ROOT, "kpgnb"), site / "kpgnb", ignore=skip)
    for pkg in ("engine", "widgets"):
        shutil.copytree(os.path.join(ROOT, pkg), site / "kpgnb" / pkg, ignore=skip)
    again = _child(cache_dir, site, 0, tmp_path)
    assert again["ok"] and again["error"] is None, again
    assert again["dir"] == cold["dir"]
    assert again["compiled"] == [], again["compiled"]
    shutil.rmtree(site, ignore_errors=True)
