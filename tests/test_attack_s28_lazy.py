"""Session 28 attack on lazy loop rounds (operators in loops skip frontier moves within an epoch) and on the
late-install consolidation (an import's history read with times advanced to the import frontier, the +1
and -1 of a row that came and went before the install cancelling before user functions see them).

Random graph loops under churn (tests/attack_s28_lazy_gen.py) and the s26 generator's programs forced to
loop are checked epoch by epoch (latest, at=, follow) against from-scratch references, with a thread
reading stats and arrangements all along.
"""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.lattice import Antichain

import attack_s28_lazy_gen as L


# -- the bug: history already compacted to exactly the import frontier -----------------------------------

def _compacted_to_the_start(workers, how, n):
    """Row 1 is inserted at epoch 0 and removed at epoch 2; the late dataflow starts at epoch 2 (the
    export's upper is 3), when 1 is gone. A reader of the export (a trace handle, as any lagging operator's
    handle can) has let the history compact to epoch 2 but keeps a batch boundary there, so the spine holds
    [0, 2) with (1, t=2, +1) and [2, 3) with (1, t=2, -1): no time moves under the import's lens."""
    seen = []

    def check(v):
        seen.extend(v.tolist())
        return {"v": v}
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["v"])
        b = eng.input("b", ["v"], rows=[(1,), (2,)])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("v").export("A")
        h = eng.trace("A")
        a.insert([(1,)] + [(v,) for v in range(100, 100 + n)])
        a.advance_to(1)
        eng.wait("p")
        a.insert([(v,) for v in range(2, 2 + n)])
        a.advance_to(2)
        eng.wait("p")
        a.remove([(1,)])
        a.advance_to(3)
        b.advance_to(3)
        eng.wait("p")
        h.set_compaction(Antichain([(2,)]), Antichain([(2,)]))
        time.sleep(0.3)  # maintenance merges [0, 1) and [1, 2), compacted to 2
        with eng.dataflow("late") as df:
            A = df.use("A")
            if how == "map":
                out = A.as_collection().map(check)
            elif how == "filter":
                out = A.as_collection().filter(lambda v: check(v)["v"] >= 0)
            else:  # a join on the imported arrangement itself (keyed by all its columns)
                out = A.join(df.input("b").map(lambda v: {"v": v}), on="v").map(check)
            x = out.view("x")
        eng.wait(x, timeout=60)
        got = sorted(x.to_pandas()["v"].tolist())
        h.close()
    return got, seen


@pytest.mark.parametrize("how", ["map", "filter", "join"])
@pytest.mark.parametrize("workers", [1])
def test_late_import_compacted_to_its_start_hides_cancelled_rows(workers, how):
    # (one worker: with more, whether row 1's shard merges [0, 1) and [1, 2) after the handle moved
    # depends on where the other rows hash)
    got, seen = _compacted_to_the_start(workers, how, 1)
    assert got == ([2] if how == "join" else [2, 100]), got
    assert 1 not in seen, seen


# -- what held up -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("which", L.PROGRAMS)
def test_graph_loops_under_churn(which, workers):
    fails = L.run_case(which, 28_100 + workers, workers, close_roots_at=3 if workers == 2 else None)
    assert not fails, fails[:3]


@pytest.mark.parametrize("seed", range(8))
def test_s26_programs_forced_to_loop(seed):
    import attack_s26_gen as G
    from test_attack_s26_ops import expected_of, run_case
    rng = np.random.default_rng(280_000 + seed)
    prog = L.loop_prog(rng, int(rng.integers(2, 5)))
    try:
        expected_of(prog, {"A": Counter(), "B": Counter()})
    except (G.NotConverged, RecursionError):
        pytest.skip("the oracle does not converge")
    mode = ["normal", "normal", "skew", "empty"][seed % 4]
    fails = run_case(prog, seed, 1 + seed % 3, mode=mode, steps=7, per_step=8, batched=(seed % 5 == 0))
    assert not fails, (prog, fails[:2])


@pytest.mark.parametrize("how", ["map", "join", "joinarr", "loop"])
@pytest.mark.parametrize("seed", range(4))
def test_late_install_random_histories(seed, how):
    W = 1 + seed % 3
    got, state, bad = L.late_case(seed, W, ["eager", "default", "lazy"][seed % 3], seed % 2 == 0, how)
    if how == "map":
        want = state
    elif how == "loop":
        want = Counter({k: 1 for k, m in state.items() if m > 0})
    else:
        want = Counter({k: m * m for k, m in state.items()})
    assert not bad, bad
    assert got == want


@pytest.mark.parametrize("act", ["cancel", "drop"])
@pytest.mark.parametrize("workers", [1, 3])
def test_cancel_or_drop_mid_loop(workers, act):
    """A 3000-round loop cancelled or dropped while it runs: a small loop beside it carries on, and a
    re-install computes from the current contents."""
    from kpgnb import graphs
    N = 3000
    with kp.Engine(workers=workers) as eng:
        e = eng.input("edges", ["src", "dst"], rows=[(i, i + 1) for i in range(N)])
        r = eng.input("roots", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("small") as df:
            s = graphs.bfs(df.input("edges").filter(lambda src: src < 50), df.input("roots")).view("s")
        with eng.dataflow("long") as df:
            graphs.bfs(df.input("edges"), df.input("roots")).view("v")
        time.sleep(1.0)
        (eng.cancel if act == "cancel" else eng.drop)("long")
        e.remove([(10, 11)])
        e.advance_to(2)
        r.advance_to(2)
        eng.wait(s, timeout=60)
        assert sorted(map(tuple, s.to_pandas().values.tolist())) == [(i, i) for i in range(11)]
        if act == "cancel":
            eng.drop("long")
        with eng.dataflow("long") as df:
            v = graphs.bfs(df.input("edges").filter(lambda src: src < 200), df.input("roots")).view("v")
        e.insert([(10, 11)])
        e.advance_to(3)
        r.advance_to(3)
        eng.wait(v, timeout=60)
        eng.wait(s, timeout=60)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == [(i, i) for i in range(201)]
        assert sorted(map(tuple, s.to_pandas().values.tolist())) == [(i, i) for i in range(51)]
