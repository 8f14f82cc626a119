"""Session 37 attack on commit 43bc2a2: the scheduler passing over dataflows it thinks quiet
(``Graph.quiet``: the last run ended idle and no source operator got work since; commands wake every
graph), and formations of at most 32 rows in one kernel call (``form_tiny``).

Every engine answer is compared with a from-scratch computation (Counters, pandas, networkx) at the epoch
the read says it holds; every ``eng.wait`` has a timeout, so a dataflow wrongly passed over shows as a
``TimeoutError`` rather than a hang. Seeded, no timing asserts."""
from __future__ import annotations

import threading
from collections import Counter

import networkx as nx
import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb.engine import batch as B
from kpgnb.engine import dataflow as D
from kpgnb.engine.kernels import MAX_MULT
from kpgnb.graphs import bfs, reachable, wcc

T = 20  # seconds: every wait's timeout (an answer that should be ready comes in milliseconds)


def rows_of(frame, cols) -> Counter:
    """A view's rows (repeated by multiplicity) as a Counter of tuples."""
    if not len(frame):
        return Counter()
    return Counter(tuple(v.item() if hasattr(v, "item") else v for v in r)
                   for r in frame[list(cols)].itertuples(index=False))


def pos(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v > 0})


def nonzero(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v != 0})


# -- form_tiny against the bucketed formation ---------------------------------------------------------

def _form_both(parts, workers, time):
    def one():
        try:
            return B.form_parts(parts, workers, time=time)
        except OverflowError:
            return "overflow"
    tiny = one()
    keep = B.TINY_ROWS
    B.TINY_ROWS = -1
    try:
        wide = one()
    finally:
        B.TINY_ROWS = keep
    return tiny, wide


def _same_formation(tiny, wide):
    if isinstance(tiny, str) or isinstance(wide, str):
        assert tiny == wide
        return
    assert len(tiny) == len(wide)
    for x, y in zip(tiny, wide):
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)


@pytest.mark.parametrize("block", range(8))
def test_form_tiny_wide_fuzz(block):
    """0..32 rows, up to 4 key and 4 value columns, times of depth 1..3, 1..3 parts (some empty, 0 rows
    too), 1..4 workers, given times, and sums near the multiplicity bound: form_tiny gives the bucketed
    formation's arrays exactly, and refuses exactly the sums it refuses."""
    pool_all = np.array([-(1 << 63), -(1 << 62), -3, -1, 0, 1, 2, 1 << 40, (1 << 63) - 1], np.int64)
    for seed in range(block * 250, (block + 1) * 250):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, B.TINY_ROWS + 1))
        kk, kv, d = int(rng.integers(0, 5)), int(rng.integers(0, 5)), int(rng.integers(1, 4))
        pool = pool_all if seed % 2 else pool_all[rng.choice(len(pool_all), 2)]
        keys, vals = rng.choice(pool, (kk, n)), rng.choice(pool, (kv, n))
        times = rng.integers(0, 3, (n, d)).astype(np.int64)
        if seed % 5 == 0:
            diffs = rng.choice(np.array([MAX_MULT - 1, 1, -1, -(MAX_MULT - 1), 2]), n).astype(np.int64)
        else:
            diffs = rng.integers(-3, 4, n).astype(np.int64)
        cuts = sorted(rng.integers(0, n + 1, int(rng.integers(0, 3))).tolist())
        bounds = [0, *cuts, n]
        parts = [(keys[:, a:b], vals[:, a:b], times[a:b], diffs[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        time = tuple(int(x) for x in rng.integers(0, 5, d)) if seed % 3 == 1 else None
        for workers in (1, 2, 3, 4):
            _same_formation(*_form_both(parts, workers, time))


# -- chains of dataflows through exports -------------------------------------------------------------

def _mutate(rng, inp, state: Counter, width: int, domain: int):
    """A few random inserts and removals of live rows, some cancelling in the same epoch."""
    for _ in range(int(rng.integers(0, 4))):
        if state and rng.random() < 0.4:
            live = list(state.elements())
            r = live[int(rng.integers(0, len(live)))]
            inp.remove([r])
            state[r] -= 1
            if not state[r]:
                del state[r]
        else:
            r = tuple(int(x) for x in rng.integers(0, domain, width))
            inp.insert([r])
            state[r] += 1
            if rng.random() < 0.3:  # +1 and -1 of one row in one epoch
                inp.insert([r])
                inp.remove([r])


def _join(left: Counter, right: Counter) -> Counter:
    out = Counter()
    for (x, y), m in left.items():
        for (y2, z), m2 in right.items():
            if y == y2:
                out[(x, z)] += m * m2
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_chain_of_exports_random_epochs(workers, seed):
    """A exports a's arrangement, B joins it with b and exports the join, C and D read B's export. Inputs
    change at random (or not at all) and are advanced in random order; after each epoch every view equals
    the Counter computation at the epoch it reports."""
    rng = np.random.default_rng(100 + seed)
    A, Bs = Counter(), Counter()
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["x", "y"])
        b = eng.input("b", ["y", "z"])
        with eng.dataflow("A") as df:
            df.input("a").arrange_by("y").export("a_by_y")
            va = df.input("a").count(by="x").view("va")
        with eng.dataflow("B") as df:
            j = df.use("a_by_y").join(df.input("b"), on="y").select("x", "z")
            j.arrange_by("x").export("ab_by_x")
            vb = j.view("vb")
        with eng.dataflow("C") as df:
            vc = df.use("ab_by_x").as_collection().count(by="x").view("vc")
        with eng.dataflow("D") as df:
            vd = df.use("ab_by_x").as_collection().select("z").distinct().view("vd")
        states = {}
        for epoch in range(12):
            if rng.random() < 0.7:
                _mutate(rng, a, A, 2, 4)
            if rng.random() < 0.5:
                _mutate(rng, b, Bs, 2, 4)
            states[epoch] = (Counter(A), Counter(Bs))
            for inp in ([a, b] if rng.random() < 0.5 else [b, a]):
                inp.advance_to(epoch + 1)
            for v in (vd, vc, vb, va):
                eng.wait(v, timeout=T)
            SA, SB = states[epoch]
            J = _join(SA, SB)
            got = vb.to_pandas()
            assert got.attrs["epoch"] == epoch + 1
            assert rows_of(got, ["x", "z"]) == pos(J)
            cnt = Counter()
            for (x, _), m in J.items():
                cnt[x] += m
            assert rows_of(vc.to_pandas(), ["x", "count"]) == Counter({(x, c): 1 for x, c in cnt.items() if c})
            assert set(vd.to_pandas()["z"].tolist()) == {z for (_, z), m in J.items() if m > 0}
            cx = Counter()
            for (x, _), m in SA.items():
                cx[x] += m
            assert rows_of(va.to_pandas(), ["x", "count"]) == Counter({(x, c): 1 for x, c in cx.items() if c})


@pytest.mark.parametrize("workers", [1, 2])
def test_long_chain_one_change_after_many_idle_epochs(workers):
    """Five dataflows in a chain (each re-exports what it read, mapped), fed by one input that is advanced
    without data for many epochs, while another input keeps an unrelated dataflow busy; then one row at a
    late epoch must come out at the chain's end, and be retracted again."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k"])
        y = eng.input("y", ["k"])
        with eng.dataflow("busy") as df:
            vy = df.input("y").count().view("vy")
        with eng.dataflow("c0") as df:
            df.input("x").map(lambda k: {"k": k + 1}).arrange_by("k").export("e0")
        for i in range(1, 5):
            with eng.dataflow(f"c{i}") as df:
                df.use(f"e{i - 1}").as_collection().map(lambda k: {"k": k + 1}).arrange_by("k").export(f"e{i}")
        with eng.dataflow("end") as df:
            vend = df.use("e4").as_collection().view("vend")
        for e in range(1, 30):
            y.insert([(e,)])
            y.advance_to(e)
            x.advance_to(e)
            eng.wait(vy, timeout=T)
            eng.wait(vend, timeout=T)
            assert vend.to_pandas().attrs["epoch"] == e and len(vend.to_pandas()) == 0
        x.insert([(100,)])
        x.advance_to(30)
        eng.wait(vend, timeout=T)
        assert vend.to_pandas()["k"].tolist() == [105]
        y.advance_to(31)
        eng.wait(vy, timeout=T)
        x.remove([(100,)])
        x.advance_to(32)
        eng.wait(vend, timeout=T)
        got = vend.to_pandas()
        assert got.attrs["epoch"] == 32 and len(got) == 0


# -- loops: bfs, reachable, wcc over single-edge changes ---------------------------------------------

def _nx_bfs(edges, roots):
    g = nx.DiGraph()
    g.add_edges_from(edges)
    out = {}
    for r in roots:
        if r not in g:
            out[r] = 0
            continue
        for v, dd in nx.single_source_shortest_path_length(g, r).items():
            out[v] = min(out.get(v, dd), dd)
    return out


def _toggle(inp, members: set, x: int):
    """Remove row (x,) from a one-column input if it is there (keeping at least one), else insert it."""
    if x in members and len(members) > 1:
        inp.remove([(x,)])
        members.discard(x)
    elif x not in members:
        inp.insert([(x,)])
        members.add(x)


def _advance_and_wait(eng, inputs, epoch: int, views):
    """Advance the inputs in the order given, then wait for every view."""
    for inp in inputs:
        inp.advance_to(epoch)
    for v in views:
        eng.wait(v, timeout=T)


def _nx_wcc(edges):
    g = nx.Graph()
    g.add_edges_from(edges)
    return {v: min(c) for c in nx.connected_components(g) for v in c}


@pytest.mark.parametrize("memory", ["full", "jod"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_graph_loops_single_edge_changes(workers, memory):
    """bfs, reachable and wcc in three dataflows over one exported edge arrangement, plus a degree
    dataflow reading the export; edges and roots change one row at a time (often only one of the two
    inputs, sometimes neither), each epoch checked against networkx."""
    rng = np.random.default_rng(7 + workers)
    N = 14
    E = set()
    while len(E) < 20:
        s, t = (int(v) for v in rng.integers(0, N, 2))
        if s != t:
            E.add((s, t))
    R = {0}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
        roots = eng.input("roots", ["node"], rows=[(0,)])
        edges.advance_to(1)
        roots.advance_to(1)
        with eng.dataflow("g") as df:
            df.input("edges").arrange_by("src").export("edges_by_src")
        with eng.dataflow("dist") as df:
            vdist = bfs(df.use("edges_by_src"), df.input("roots"), memory=memory).view("dist")
        with eng.dataflow("reach") as df:
            vreach = reachable(df.use("edges_by_src"), df.input("roots"), memory=memory).view("reach")
        with eng.dataflow("cc") as df:
            vcc = wcc(df.use("edges_by_src").as_collection(), memory=memory).view("cc")
        with eng.dataflow("deg") as df:
            vdeg = df.use("edges_by_src").as_collection().count(by="src").view("deg")
        for epoch in range(1, 16):
            what = rng.random()
            if what < 0.6:
                if E and rng.random() < 0.5:
                    e = sorted(E)[int(rng.integers(0, len(E)))]
                    edges.remove([e])
                    E.discard(e)
                else:
                    s, t = (int(v) for v in rng.integers(0, N, 2))
                    if s != t and (s, t) not in E:
                        edges.insert([(s, t)])
                        E.add((s, t))
            elif what < 0.8:
                _toggle(roots, R, int(rng.integers(0, N)))
            _advance_and_wait(eng, [edges, roots] if rng.random() < 0.5 else [roots, edges], epoch + 1,
                              (vdeg, vcc, vreach, vdist))
            dist = vdist.to_pandas()
            assert dist.attrs["epoch"] == epoch + 1
            want = _nx_bfs(E, R)
            assert dict(zip(dist["node"].tolist(), dist["dist"].tolist())) == want and len(dist) == len(want)
            assert sorted(vreach.to_pandas()["node"].tolist()) == sorted(want)
            cc = vcc.to_pandas()
            assert dict(zip(cc["node"].tolist(), cc["label"].tolist())) == _nx_wcc(E) and len(cc) == len(_nx_wcc(E))
            deg = Counter(s for s, _ in E)
            assert rows_of(vdeg.to_pandas(), ["src", "count"]) == Counter({(s, c): 1 for s, c in deg.items()})


# -- Datalog programs and goals sharing inputs -------------------------------------------------------

TC = """
tc(x, y) :- edge(x, y).
tc(x, y) :- tc(x, z), edge(z, y).
node(x) :- edge(x, _).
node(y) :- edge(_, y).
reach(y) :- root(y).
reach(y) :- reach(x), edge(x, y).
unreached(x) :- node(x), !reach(x).
sp(y, min<d>) :- root(y), d = 0.
sp(y, min<d>) :- sp(x, d1), edge(x, y), d = d1 + 1.
"""


def _closure(E):
    g = nx.DiGraph()
    g.add_edges_from(E)
    return {(u, v) for u in g for s in g.successors(u) for v in nx.descendants(g, s) | {s}}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_datalog_goals_asked_and_retracted_while_edges_change(workers):
    """A program (tc, reach, unreached, sp) and two goals on it (tc(?, _) and reach(?)) over shared
    inputs: asks, retracts, edge and root changes interleave; each goal view and relation equals the
    networkx answer once waited for."""
    rng = np.random.default_rng(workers)
    N = 10
    E = {(0, 1), (1, 2), (2, 3), (5, 6)}
    R = {0}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
        root = eng.input("root", ["node"], rows=[(0,)])
        edges.advance_to(1)
        root.advance_to(1)
        prog = eng.datalog(TC, inputs={"edge": "edges"}, name="gq")
        g1 = prog.goal("tc(?, _)")
        g2 = prog.goal("reach(?)")
        asked1, asked2 = set(), set()
        for step in range(14):
            r = rng.random()
            if r < 0.3:
                s, t = (int(v) for v in rng.integers(0, N, 2))
                if (s, t) in E:
                    edges.remove([(s, t)])
                    E.discard((s, t))
                elif s != t:
                    edges.insert([(s, t)])
                    E.add((s, t))
                edges.advance_to(edges.epoch + 1)
                root.advance_to(edges.epoch)
            elif r < 0.4:
                n = int(rng.integers(0, N))
                if n in R and len(R) > 1:
                    root.remove([(n,)])
                    R.discard(n)
                elif n not in R:
                    root.insert([(n,)])
                    R.add(n)
                root.advance_to(root.epoch + 1)
                edges.advance_to(root.epoch)
            elif r < 0.7:
                n = int(rng.integers(0, N))
                if n in asked1 and rng.random() < 0.5:
                    g1.retract(n)
                    asked1.discard(n)
                else:
                    g1.ask(n)
                    asked1.add(n)
            else:
                n = int(rng.integers(0, N))
                if n in asked2 and rng.random() < 0.5:
                    g2.retract(n)
                    asked2.discard(n)
                else:
                    g2.ask(n)
                    asked2.add(n)
            for v in (g1.view, g2.view, prog["tc"], prog["unreached"], prog["sp"]):
                eng.wait(v, timeout=T)
            C = _closure(E)
            reach = set(_nx_bfs(E, R))
            assert set(map(tuple, prog["tc"].to_pandas().to_numpy().tolist())) == C
            got1 = set(map(tuple, g1.view.to_pandas().to_numpy().tolist()))
            assert got1 == {(u, v) for (u, v) in C if u in asked1}, (step, asked1)
            got2 = set(g2.view.to_pandas().iloc[:, 0].tolist())
            assert got2 == asked2 & reach, (step, asked2)
            nodes = {u for e in E for u in e}
            assert set(prog["unreached"].to_pandas().iloc[:, 0].tolist()) == nodes - reach
            sp = prog["sp"].to_pandas()
            assert dict(zip(sp.iloc[:, 0].tolist(), sp.iloc[:, 1].tolist())) == _nx_bfs(E, R)


# -- installs, drops and replacements among running dataflows ----------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_replace_and_drop_producers_while_readers_run(workers):
    """P exports a's arrangement; R1 reads it. P is replaced (R1 keeps the old arrangement, now P~k's,
    maintained by the dropped dataflow), R2 reads the new one; then P is dropped (kept for R2) and R1 is
    dropped (P~k collected). Each remaining reader follows every later change of a."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        b = eng.input("b", ["k"])
        with eng.dataflow("other") as df:
            vo = df.input("b").count().view("vo")
        with eng.dataflow("P") as df:
            df.input("a").arrange_by("k").export("a_by_k")
        with eng.dataflow("R1") as df:
            v1 = df.use("a_by_k").as_collection().sum(by="k", col="v").view("v1")
        A = Counter()

        def step(epoch, rows, also_b=False):
            for r, m in rows:
                a.update([r], [m])
                A[r] += m
            if also_b:
                b.insert([(epoch,)])
            a.advance_to(epoch)
            b.advance_to(epoch)

        def sums():
            out = Counter()
            for (k, v), m in A.items():
                out[k] += v * m
            live = {k for (k, _), m in A.items() if m}
            return {k: out[k] for k in live}

        step(1, [((1, 10), 1), ((2, 5), 2)])
        eng.wait(v1, timeout=T)
        assert dict(v1.to_pandas()[["k", "v"]].itertuples(index=False)) == sums()
        with eng.dataflow("P", replace=True) as df:  # the new P exports the same name
            df.input("a").map(lambda k, v: {"k": k, "v": v * 100}).arrange_by("k").export("a_by_k")
        with eng.dataflow("R2") as df:
            v2 = df.use("a_by_k").as_collection().sum(by="k", col="v").view("v2")
        for epoch in range(2, 10):
            step(epoch, [((epoch % 3, epoch), 1)] + ([((1, 10), -1)] if epoch == 5 else []), also_b=epoch % 2 == 0)
            for v in ((v1, v2, vo) if epoch <= 6 else (v2, vo)):
                eng.wait(v, timeout=T)
            if epoch <= 6:
                assert dict(v1.to_pandas()[["k", "v"]].itertuples(index=False)) == sums()
            assert dict(v2.to_pandas()[["k", "v"]].itertuples(index=False)) == {k: s * 100 for k, s in sums().items()}
            if epoch == 4:
                eng.drop("P")  # kept: R2 reads its export
            if epoch == 6:
                eng.drop("R1")  # the replaced P~k has no reader left
        assert vo.to_pandas()["count"].tolist() == [4]
        assert sorted(eng.snapshot().dataflows) == ["R2", "other"]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_install_between_epochs_of_a_quiet_chain(workers):
    """Readers installed and dropped between epochs, each reading an export of a dataflow that has been
    idle for a while: the new reader starts from the current contents and follows later changes; the old
    ones are unaffected."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"])
        with eng.dataflow("P") as df:
            df.input("a").distinct().export("ad")
        S = Counter()
        views = {}
        for epoch in range(1, 12):
            if epoch % 3 == 0:
                a.insert([(epoch,), (epoch,)])
                S[epoch] += 2
            if epoch % 4 == 1 and S:
                k = sorted(S)[0]
                a.remove([(k,)])
                S[k] -= 1
                if not S[k]:
                    del S[k]
            a.advance_to(epoch)
            name = f"r{epoch}"
            with eng.dataflow(name) as df:
                views[name] = df.use("ad").as_collection().count().view("c")
            if epoch > 3:
                eng.drop(f"r{epoch - 3}")
                del views[f"r{epoch - 3}"]
            for v in views.values():
                eng.wait(v, timeout=T)
                got = v.to_pandas()["count"].tolist()
                assert got == ([len(S)] if S else []), (epoch, v.dataflow)


# -- many threads, followers ----------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_threads_on_separate_inputs_with_a_join_across(workers):
    """Three writer threads, each on its own input with its own dataflow (mostly quiet while the others
    work), each waiting on its own view after every epoch and checking it; a fourth dataflow joins two of
    the inputs and a follower streams it. Every thread's answers, and the follower's sum, are exact."""
    K = 3
    rounds = 25
    with kp.Engine(workers=workers) as eng:
        ins = [eng.input(f"i{t}", ["k", "v"]) for t in range(K)]
        views = []
        for t in range(K):
            with eng.dataflow(f"d{t}") as df:
                views.append(df.input(f"i{t}").count(by="k").view("c"))
        with eng.dataflow("j") as df:
            vj = df.input("i0").join(df.input("i1"), on="k").count(by="k").view("j")
        f = vj.follow(timeout=T)
        errors = []
        finals = [Counter() for _ in range(K)]

        def writer(t):
            rng = np.random.default_rng(50 + t)
            S = finals[t]
            try:
                for e in range(1, rounds + 1):
                    if rng.random() < 0.6:
                        k = int(rng.integers(0, 3))
                        r = (k, int(rng.integers(0, 2)))
                        if S[r] and rng.random() < 0.4:
                            ins[t].remove([r])
                            S[r] -= 1
                        else:
                            ins[t].insert([r])
                            S[r] += 1
                    ins[t].advance_to(e)
                    eng.wait(views[t], timeout=T)
                    got = views[t].to_pandas()
                    want = Counter()
                    for (k, _), m in S.items():
                        want[k] += m
                    assert got.attrs["epoch"] >= e
                    if got.attrs["epoch"] == e:
                        assert rows_of(got, ["k", "count"]) == Counter({(k, c): 1 for k, c in want.items() if c})
            except BaseException as ex:  # noqa: BLE001
                errors.append((t, ex))
        threads = [threading.Thread(target=writer, args=(t,)) for t in range(K)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        for v in views:
            eng.wait(v, timeout=T)
        eng.wait(vj, timeout=T)
        want = Counter()
        for (k, _), m in finals[0].items():
            for (k2, _), m2 in finals[1].items():
                if k == k2:
                    want[k] += m * m2
        want = Counter({(k, c): 1 for k, c in want.items() if c})
        assert rows_of(vj.to_pandas(), ["k", "count"]) == want
        ins[0].close()
        ins[1].close()
        total = Counter()
        for frame in f:  # (ends: every input of the view is closed)
            for r in frame.itertuples(index=False):
                total[(r.k, r.count)] += r.diff
        f.close()
        assert nonzero(total) == want


@pytest.mark.parametrize("workers", [1, 2])
def test_followers_along_a_chain_see_every_epoch(workers):
    """A follower on the last view of a three-dataflow chain, started before any data: summed up to each
    epoch, its frames give the view's contents at that epoch (epochs that change nothing upstream
    included), and it ends when the input closes."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"])
        with eng.dataflow("A") as df:
            df.input("a").arrange_by("k").export("ak")
        with eng.dataflow("B") as df:
            df.use("ak").as_collection().map(lambda k: {"k": k % 3}).count(by="k").export("bk")
        with eng.dataflow("C") as df:
            vc = df.use("bk").as_collection().view("vc")
        f = vc.follow(timeout=T)
        S = Counter()
        wants = []
        rng = np.random.default_rng(3)
        for e in range(1, 20):
            if rng.random() < 0.6:
                k = int(rng.integers(0, 9))
                if S[k] and rng.random() < 0.5:
                    a.remove([(k,)])
                    S[k] -= 1
                else:
                    a.insert([(k,)])
                    S[k] += 1
            a.advance_to(e)
            want = Counter()
            for k, m in S.items():
                want[k % 3] += m
            wants.append(Counter({(k, c): 1 for k, c in want.items() if c}))
            if e % 5 == 0:
                eng.wait(vc, timeout=T)
                assert rows_of(vc.to_pandas(), ["k", "count"]) == wants[-1]
        a.close()
        frames = list(f)
        assert len(frames[0]) == 0  # the contents before any data
        changes = pd.concat(frames[1:])
        for e, want in enumerate(wants):
            upto = changes[changes["time"] <= e]
            acc = Counter()
            for r in upto.itertuples(index=False):
                acc[(r.k, r.count)] += r.diff
            assert nonzero(acc) == want, e


# -- history, closing, advancing without data ---------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_history_reads_and_closing_inputs_of_quiet_dataflows(workers):
    """Views with history=4 over an export chain read at= each of the last epochs exactly; inputs are
    advanced without data for stretches (the dataflows stay quiet, frontiers must still move), then one
    input closes (its readers' waits return, frontier empty), then the other."""
    rng = np.random.default_rng(11 + workers)
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        b = eng.input("b", ["k"])
        with eng.dataflow("A") as df:
            df.input("a").arrange_by("k").export("ak")
            va = df.input("a").max(by="k", col="v").view("va", history=4)
        with eng.dataflow("J") as df:
            vj = df.use("ak").as_collection().semijoin(df.input("b"), on="k").view("vj", history=4)
        SA, SB = Counter(), Counter()
        at_a, at_j = {}, {}
        for e in range(1, 18):
            if e % 6 in (1, 2):
                r = (int(rng.integers(0, 4)), int(rng.integers(0, 9)))
                a.insert([r])
                SA[r] += 1
                if SA and rng.random() < 0.5:
                    r = sorted(SA)[int(rng.integers(0, len(SA)))]
                    a.remove([r])
                    SA[r] -= 1
                    if not SA[r]:
                        del SA[r]
            if e % 6 == 3:
                k = int(rng.integers(0, 4))
                b.insert([(k,)])
                SB[(k,)] += 1
            a.advance_to(e)
            b.advance_to(e)
            mx = {}
            for (k, v), m in SA.items():
                if m > 0:
                    mx[k] = max(mx.get(k, v), v)
            at_a[e - 1] = Counter({(k, v): 1 for k, v in mx.items()})
            at_j[e - 1] = Counter({(k, v): m for (k, v), m in SA.items() if SB[(k,)] > 0})
            eng.wait(va, timeout=T)
            eng.wait(vj, timeout=T)
            for back in range(0, min(4, e)):
                t = e - 1 - back
                assert rows_of(va.to_pandas(at=t), ["k", "v"]) == at_a[t], (e, t)
                assert rows_of(vj.to_pandas(at=t), ["k", "v"]) == pos(at_j[t]), (e, t)
        b.close()
        a.advance_to(20)
        eng.wait(vj, timeout=T)
        eng.wait(va, timeout=T)
        assert vj.to_pandas().attrs["epoch"] == 20  # a closed, b still open: limited by a
        a.close()
        eng.wait(vj, timeout=T)
        eng.wait(va, timeout=T)
        assert vj.to_pandas().attrs["epoch"] is None and va.to_pandas().attrs["epoch"] is None
        assert rows_of(vj.to_pandas(), ["k", "v"]) == pos(at_j[16])
        assert rows_of(va.to_pandas(), ["k", "v"]) == at_a[16]


@pytest.mark.parametrize("workers", [1, 2])
def test_input_advanced_far_without_data_then_changed(workers):
    """A dataflow whose only input is advanced by big jumps without data while other dataflows run; a row
    then arrives at a much later epoch, and the view has it exactly then (and not before, at=)."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k"])
        y = eng.input("y", ["k"])
        with eng.dataflow("X") as df:
            vx = df.input("x").count().view("vx", history=3)
        with eng.dataflow("Y") as df:
            vy = df.input("y").distinct().view("vy")
        for e in (1, 2, 50, 51, 1000):
            x.advance_to(e)
            y.insert([(e,)])
            y.advance_to(e)
            eng.wait(vx, timeout=T)
            eng.wait(vy, timeout=T)
            assert vx.to_pandas().attrs["epoch"] == e and len(vx.to_pandas()) == 0
        x.insert([(1,)])
        x.advance_to(10_000)
        eng.wait(vx, timeout=T)
        assert vx.to_pandas()["count"].tolist() == [1]
        assert vx.to_pandas(at=9_999)["count"].tolist() == [1]
        assert vx.to_pandas(at=9_997)["count"].tolist() == [1]  # (it went in at epoch 1000)


# -- tiny formations end to end: strings, floats, many columns, multiplicities -------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_small_batches_of_mixed_columns_around_the_tiny_bound(workers):
    """Epochs of 1..40 updates (either side of form_tiny's 32) over str, float, bool and int columns:
    equal rows, +1/-1 of one row in one epoch, multiplicities via update(); the view (all columns), a count
    by the str column, a sum of the float by the bool, and a distinct of 9 columns equal pandas."""
    rng = np.random.default_rng(workers)
    cols = ["s", "f", "b", "i", "c4", "c5", "c6", "c7", "c8"]
    words = ["", "a", "b", "ä", "longer string", "z"]
    floats = [0.0, -0.0, 1.5, -2.25, float("inf"), 1e300]
    S = Counter()
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("t", cols, ["str", "float64", "bool", "int64"] + ["int64"] * 5)
        with eng.dataflow("d") as df:
            t = df.input("t")
            vall = t.view("all")
            vcnt = t.count(by="s").view("cnt")
            vsum = t.sum(by="b", col="f").view("sum")
            vdis = t.distinct().view("dis")
        for e in range(1, 16):
            n = int(rng.integers(1, 41))
            rows, diffs = [], []
            for _ in range(n):
                if S and rng.random() < 0.3:
                    live = sorted(S, key=repr)
                    r = live[int(rng.integers(0, len(live)))]
                    m = -int(rng.integers(1, S[r] + 1))
                else:
                    r = (words[int(rng.integers(0, len(words)))], floats[int(rng.integers(0, 4 if e % 2 else 6))],
                         bool(rng.integers(0, 2)), int(rng.integers(-2, 2)),
                         *(int(v) for v in rng.integers(0, 2, 5)))
                    m = int(rng.integers(1, 4))
                rows.append(r)
                diffs.append(m)
                S[r] += m
                if rng.random() < 0.2:  # cancelling pair of one row
                    rows += [r, r]
                    diffs += [1, -1]
                if not S[r]:
                    del S[r]
            inp.update(pd.DataFrame(rows, columns=cols), diffs)
            inp.advance_to(e)
            for v in (vall, vcnt, vsum, vdis):
                eng.wait(v, timeout=T)
            norm = Counter()
            for r, m in S.items():
                norm[(r[0], r[1] + 0.0, *r[2:])] += m
            assert rows_of(vall.to_pandas(), cols) == norm, e
            assert rows_of(vdis.to_pandas(), cols) == Counter(dict.fromkeys(norm, 1))
            cnt = Counter()
            for r, m in norm.items():
                cnt[r[0]] += m
            assert rows_of(vcnt.to_pandas(), ["s", "count"]) == Counter({(k, c): 1 for k, c in cnt.items() if c})
            sm, live = {}, set()
            for r, m in norm.items():
                sm[r[2]] = sm.get(r[2], 0.0) + r[1] * m
                live.add(r[2])
            got = vsum.to_pandas()
            gd = dict(zip(got["b"].tolist(), got["f"].tolist()))
            assert set(gd) == live
            for k in live:
                assert gd[k] == pytest.approx(sm[k]) or (np.isinf(sm[k]) and gd[k] == sm[k]) or \
                    (np.isnan(sm[k]) and np.isnan(gd[k]))


# -- nested loops, memory modes, round limits ---------------------------------------------------------

def _scc_edges(E):
    g = nx.DiGraph()
    g.add_edges_from(E)
    comp = {v: i for i, c in enumerate(nx.strongly_connected_components(g)) for v in c}
    return {(s, t) for s, t in E if comp[s] == comp[t]}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_nested_loops_and_memory_modes_over_shared_edges(workers):
    """scc (a doubly nested loop), sssp and khop with memory='drop', and a two-round iterate, each in its
    own dataflow over one exported edge arrangement, edges and sources changing one row at a time."""
    from kpgnb.graphs import khop, scc, sssp
    rng = np.random.default_rng(20 + workers)
    N = 9
    E = {(0, 1), (1, 2), (2, 0), (3, 4), (4, 3), (5, 6)}
    W = {e: int(rng.integers(1, 4)) for e in E}
    srcs = {0}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(s, t, W[(s, t)]) for s, t in sorted(E)])
        sources = eng.input("sources", ["source"], rows=[(0,)])
        edges.advance_to(1)
        sources.advance_to(1)
        with eng.dataflow("g") as df:
            df.input("edges").arrange_by("src").export("e")
        with eng.dataflow("scc") as df:
            vscc = scc(df.use("e").as_collection().select("src", "dst")).view("scc")
        with eng.dataflow("sssp") as df:
            vsp = sssp(df.use("e").as_collection(), df.input("sources"), memory="drop",
                       drop=kp.Drop(p=0.5, policy="random", seed=1)).view("sp")
        with eng.dataflow("khop") as df:
            vk = khop(df.use("e").as_collection(), df.input("sources"), 2, memory="jod").view("k")
        with eng.dataflow("two") as df:
            e = df.use("e").as_collection().select("src", "dst")
            v2 = df.input("sources").map(lambda source: {"node": source}).iterate(
                lambda r: r.join(e, left_on="node", right_on="src").map(lambda dst: {"node": dst})
                .concat(r).distinct(), max_rounds=2).view("two")
        for epoch in range(1, 14):
            r = rng.random()
            if r < 0.6:
                s, t = (int(v) for v in rng.integers(0, N, 2))
                if (s, t) in E:
                    edges.remove([(s, t, W.pop((s, t)))])
                    E.discard((s, t))
                elif s != t:
                    W[(s, t)] = int(rng.integers(1, 4))
                    edges.insert([(s, t, W[(s, t)])])
                    E.add((s, t))
            elif r < 0.8:
                _toggle(sources, srcs, int(rng.integers(0, N)))
            _advance_and_wait(eng, [edges, sources] if epoch % 2 else [sources, edges], epoch + 1,
                              (vscc, vsp, vk, v2))
            assert set(map(tuple, vscc.to_pandas()[["src", "dst"]].to_numpy().tolist())) == _scc_edges(E)
            g = nx.DiGraph()
            g.add_nodes_from(srcs)
            for (s, t), w in W.items():
                g.add_edge(s, t, weight=w)
            want_sp = {(s, n, d) for s in srcs for n, d in nx.single_source_dijkstra_path_length(g, s).items()}
            assert set(map(tuple, vsp.to_pandas()[["source", "node", "dist"]].to_numpy().tolist())) == want_sp
            want_k = {(s, n, d) for s in srcs
                      for n, d in nx.single_source_shortest_path_length(g, s, cutoff=2).items()}
            assert set(map(tuple, vk.to_pandas()[["source", "node", "hops"]].to_numpy().tolist())) == want_k
            want2 = {n for s in srcs for n in nx.single_source_shortest_path_length(g, s, cutoff=2)}
            assert sorted(v2.to_pandas()["node"].tolist()) == sorted(want2)


# -- interrupted runs: a long computation beside a stream of small updates ------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_long_computation_interrupted_by_seals_of_a_quiet_neighbour(workers, monkeypatch):
    """A wcc over a few thousand edges is computing (its runs cut into slices, and cut short by every
    seal) while another thread streams single rows into a second input whose chain of two dataflows is
    quiet between them; each small answer is exact as soon as waited for, and the wcc's final answer
    equals networkx's. The slice is shortened so that the big runs are interrupted often."""
    from kpgnb.engine import scheduler as S
    monkeypatch.setattr(S, "SLICE_S", 0.002)
    rng = np.random.default_rng(5)
    n = 3000
    src = rng.integers(0, n, 4000)
    dst = rng.integers(0, n, 4000)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows={"src": src, "dst": dst})
        small = eng.input("small", ["k"])
        edges.advance_to(1)
        small.advance_to(1)
        with eng.dataflow("s1") as df:
            df.input("small").map(lambda k: {"k": k * 2}).arrange_by("k").export("s2k")
        with eng.dataflow("s2") as df:
            vs = df.use("s2k").as_collection().sum(by=[], col="k").view("vs")
        with eng.dataflow("big") as df:
            vcc = wcc(df.input("edges")).view("cc")
        total = 0
        errors = []
        for e in range(2, 40):
            k = int(rng.integers(1, 100))
            small.insert([(k,)])
            total += 2 * k
            small.advance_to(e)
            if e % 7 == 0:  # the big one gets new work now and then
                s, t = (int(v) for v in rng.integers(0, n, 2))
                edges.insert([(s, t)])
                src, dst = np.append(src, s), np.append(dst, t)
                edges.advance_to(e)
            eng.wait(vs, timeout=T)
            got = vs.to_pandas()
            if got["k"].tolist() != [total]:
                errors.append((e, got["k"].tolist(), total))
        edges.advance_to(40)
        small.advance_to(40)
        eng.wait(vcc, timeout=60)
        assert not errors, errors
        cc = vcc.to_pandas()
        want = _nx_wcc(list(zip(src.tolist(), dst.tolist())))
        assert dict(zip(cc["node"].tolist(), cc["label"].tolist())) == want


# -- the invariant itself ---------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_graph_passed_over_as_quiet_has_no_operator_with_work(workers, monkeypatch):
    """Whenever ``Graph.quiet`` says True, a full look (every operator's frontiers brought up to date,
    then ``has_work`` of each) finds nothing to do either: over loops, a Datalog program with a goal, an
    ife, export chains, replacement and drops, with inputs advanced without data and in varying order."""
    wrong = []
    calls = [0]
    quiet = D.Graph.quiet

    def checked(self):
        q = quiet(self)
        if q:
            calls[0] += 1
            self._settle()
            busy = [op.label() for op in self.ops if op.has_work()]
            if busy:
                wrong.append(busy)
        return q
    monkeypatch.setattr(D.Graph, "quiet", checked)
    rng = np.random.default_rng(60 + workers)
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=[(0, 1), (1, 2), (2, 0), (3, 4)])
        root = eng.input("root", ["node"], rows=[(0,)])
        other = eng.input("other", ["k"])
        for inp in (edges, root, other):
            inp.advance_to(1)
        with eng.dataflow("g") as df:
            df.input("edges").arrange_by("src").export("es")
        with eng.dataflow("b") as df:
            vb = bfs(df.use("es"), df.input("root")).view("b")
        with eng.dataflow("w") as df:
            vw = wcc(df.use("es").as_collection(), memory="jod").view("w")
        with eng.dataflow("o") as df:
            vo = df.input("other").count().view("o")
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n",
                           inputs={"edge": "edges"}, name="p")
        goal = prog.goal("tc(?, _)")
        E = {(0, 1), (1, 2), (2, 0), (3, 4)}
        log = [(0, edge, 1) for edge in E]  # (epoch, edge, diff): goals' asks move edges ahead of root
        for e in range(2, 22):
            r = rng.random()
            if r < 0.4:
                s, t = (int(v) for v in rng.integers(0, 7, 2))
                if (s, t) in E:
                    edges.remove([(s, t)])
                    E.discard((s, t))
                    log.append((edges.epoch, (s, t), -1))
                elif s != t:
                    edges.insert([(s, t)])
                    E.add((s, t))
                    log.append((edges.epoch, (s, t), 1))
            elif r < 0.6:
                other.insert([(e,)])
            elif r < 0.7:
                goal.ask(int(rng.integers(0, 7)))
            elif r < 0.8:
                with eng.dataflow("g", replace=True) as df:  # b and w keep reading the old arrangement
                    df.input("edges").arrange_by("src").export("es")
            for inp in sorted((edges, root, other), key=lambda _: rng.random()):
                inp.advance_to(max(inp.epoch + 1, e))
            for v in (vb, vw, vo, goal.view, prog["tc"]):
                eng.wait(v, timeout=T)
            assert set(map(tuple, prog["tc"].to_pandas().to_numpy().tolist())) == _closure(E)
            w = vw.to_pandas()
            assert dict(zip(w["node"].tolist(), w["label"].tolist())) == _nx_wcc(E)
            d = vb.to_pandas()  # (as of root's epoch: edges may be ahead)
            then = Counter()
            for at, edge, m in log:
                if at < d.attrs["epoch"]:
                    then[edge] += m
            assert dict(zip(d["node"].tolist(), d["dist"].tolist())) == _nx_bfs(set(pos(then)), {0})
        eng.drop("b")
        eng.drop("w")
        other.close()
        eng.wait(vo, timeout=T)
        eng.wait(None, timeout=T)
    assert calls[0] > 0
    assert not wrong, wrong[:3]


# -- random installs, drops and replacements with random readers (a small model-based fuzz) ------------

_FNS = {0: lambda k, v: {"k": k, "v": v}, 1: lambda k, v: {"k": v % 3, "v": k},
        2: lambda k, v: {"k": (k + 1) % 4, "v": v}}


def _xform(kind, S):
    out = Counter()
    for (k, v), m in S.items():
        out[[(k, v), (v % 3, k), ((k + 1) % 4, v)][kind]] += m
    return nonzero(out)


def _reader_answer(kind, A, Bc):
    if kind == "count":
        c = Counter()
        for (k, _), m in A.items():
            c[k] += m
        return Counter({(k, n): 1 for k, n in c.items() if n})
    if kind == "join":
        c = Counter()
        for (k, v), m in A.items():
            for (k2, w), m2 in Bc.items():
                if k == k2:
                    c[(k, v, w)] += m * m2
        return pos(c)
    if kind == "distinct":
        return Counter({(v,): 1 for (_, v), m in A.items() if m > 0})
    mn = {}
    for (k, v), m in A.items():
        if m > 0:
            mn[k] = min(mn.get(k, v), v)
    return Counter({(k, v): 1 for k, v in mn.items()})


def _model_fuzz(seed, workers, steps=40):
    rng = np.random.default_rng(seed)
    NI = 3
    with kp.Engine(workers=workers) as eng:
        inputs = [eng.input(f"i{j}", ["k", "v"]) for j in range(NI)]
        logs = [[] for _ in range(NI)]  # (epoch, row, diff)
        exports = {}  # name -> (input, transform, producer)
        readers = {}  # dataflow -> (view, kind, source a, source b)
        nexp = nrd = 0

        def state(j, E):
            c = Counter()
            for e, r, d in logs[j]:
                if E is None or e < E:
                    c[r] += d
            return nonzero(c)

        def pick():
            if exports and rng.random() < 0.6:
                n = sorted(exports)[int(rng.integers(0, len(exports)))]
                return ("ex", n, exports[n][:2])  # (what the reader reads: the export as of now)
            return ("in", int(rng.integers(0, NI)))

        def coll(df, s):
            return df.input(f"i{s[1]}") if s[0] == "in" else df.use(s[1]).as_collection()

        for step in range(steps):
            act = rng.random()
            if act < 0.45:
                j = int(rng.integers(0, NI))
                for _ in range(int(rng.integers(1, 4))):
                    cur = state(j, None)
                    if cur and rng.random() < 0.4:
                        r = sorted(cur)[int(rng.integers(0, len(cur)))]
                        inputs[j].remove([r])
                        logs[j].append((inputs[j].epoch, r, -1))
                    else:
                        r = (int(rng.integers(0, 4)), int(rng.integers(0, 5)))
                        inputs[j].insert([r])
                        logs[j].append((inputs[j].epoch, r, 1))
                if rng.random() < 0.5:
                    inputs[j].advance_to(inputs[j].epoch + 1)
            elif act < 0.65:
                for j in rng.permutation(NI):
                    if rng.random() < 0.7:
                        inputs[j].advance_to(inputs[j].epoch + int(rng.integers(1, 3)))
            elif act < 0.75:
                j, kind = int(rng.integers(0, NI)), int(rng.integers(0, 3))
                name, dname = f"e{nexp}", f"Pe{nexp}"
                nexp += 1
                with eng.dataflow(dname) as df:
                    df.input(f"i{j}").map(_FNS[kind]).arrange_by("k").export(name)
                exports[name] = (j, kind, dname)
            elif act < 0.9:
                kind = ["count", "join", "distinct", "min"][int(rng.integers(0, 4))]
                sa, sb = pick(), pick()
                name = f"R{nrd}"
                nrd += 1
                with eng.dataflow(name) as df:
                    a = coll(df, sa)
                    if kind == "count":
                        v = a.count(by="k").view("v")
                    elif kind == "join":
                        v = a.join(coll(df, sb).rename(v="w"), on="k").view("v")
                    elif kind == "distinct":
                        v = a.select("v").distinct().view("v")
                    else:
                        v = a.min(by="k", col="v").view("v")
                readers[name] = (v, kind, sa, sb)
            else:
                r = rng.random()
                if readers and r < 0.5:
                    n = sorted(readers)[int(rng.integers(0, len(readers)))]
                    eng.drop(n)
                    del readers[n]
                elif exports and r < 0.8:  # the producer replaced: its readers keep the old arrangement
                    n = sorted(exports)[int(rng.integers(0, len(exports)))]
                    j2, k2 = int(rng.integers(0, NI)), int(rng.integers(0, 3))
                    with eng.dataflow(exports[n][2], replace=True) as df:
                        df.input(f"i{j2}").map(_FNS[k2]).arrange_by("k").export(n)
                    exports[n] = (j2, k2, exports[n][2])
                elif exports:  # dropped: kept while read
                    n = sorted(exports)[int(rng.integers(0, len(exports)))]
                    eng.drop(exports[n][2])
                    del exports[n]
            for name, (v, kind, sa, sb) in readers.items():
                eng.wait(v, timeout=T)
                got = v.to_pandas()
                E = got.attrs["epoch"]

                def st(s):
                    return state(s[1], E) if s[0] == "in" else _xform(s[2][1], state(s[2][0], E))
                cols = ["k", "v", "w"] if kind == "join" else list(got.columns)
                assert rows_of(got, cols) == _reader_answer(kind, st(sa), st(sb)), (step, name, kind, sa, sb, E)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_model_fuzz_of_installs_drops_and_replacements(seed, workers):
    """Random input changes and advances (inputs at different epochs), producers exporting transformed
    inputs, readers (count, join, distinct, min) of inputs and exports installed at any time, readers
    dropped, producers replaced (readers keep the old arrangement) or dropped (kept while read): every
    reader equals the model at the epoch its read reports, after every step."""
    _model_fuzz(seed, workers)


# -- mutual recursion and cancellation ----------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_mutual_recursion_and_cancelled_neighbours(workers):
    """Two Variables (a: edges closed under b; b: the transitive closure) in one loop, beside two readers
    of the same export; one reader is cancelled, the other keeps following; the loop's closure equals
    networkx's after every change."""
    rng = np.random.default_rng(70 + workers)
    E = {(0, 1), (1, 2)}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
        edges.advance_to(1)
        with eng.dataflow("loops") as df:
            loop = df.loop()
            a = kp.Variable(loop, df.input("edges"))
            b = kp.Variable(loop, df.input("edges"))
            a.set(a.concat(b).distinct())
            b_next = b.set(b.join(a, left_on="dst", right_on="src").select("src", "dst_right")
                           .rename(dst_right="dst").concat(b).distinct())
            vclos = b_next.leave().view("closure")
            df.input("edges").arrange_by("src").export("es")
        with eng.dataflow("r1") as df:
            v1 = df.use("es").as_collection().count().view("n")
        with eng.dataflow("r2") as df:
            v2 = df.use("es").as_collection().count(by="src").view("n")
        for e in range(2, 14):
            s, t = (int(v) for v in rng.integers(0, 6, 2))
            if (s, t) in E:
                edges.remove([(s, t)])
                E.discard((s, t))
            elif s != t:
                edges.insert([(s, t)])
                E.add((s, t))
            edges.advance_to(e)
            if e == 6:
                eng.cancel("r1")
            eng.wait(vclos, timeout=T)
            eng.wait(v2, timeout=T)
            assert set(map(tuple, vclos.to_pandas()[["src", "dst"]].to_numpy().tolist())) == _closure(E)
            deg = Counter(s for s, _ in E)
            assert rows_of(v2.to_pandas(), ["src", "count"]) == Counter({(k, c): 1 for k, c in deg.items()})
            if e < 6:
                eng.wait(v1, timeout=T)
                assert v1.to_pandas()["count"].tolist() == [len(E)]
        with pytest.raises(kp.Cancelled):
            eng.wait(v1, timeout=T)


@pytest.mark.parametrize("workers", [1, 2])
def test_goal_asks_on_one_thread_edge_changes_on_another(workers):
    """One thread changes and advances the edges while another asks and retracts bindings of a goal and
    waits on its view after each (no wait may time out); at the end both the goal and the program's
    relation equal networkx's closure."""
    E = {(0, 1), (1, 2), (2, 3)}
    with kp.Engine(workers=workers) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=sorted(E))
        edges.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n",
                           inputs={"edge": "edges"}, name="p")
        g = prog.goal("tc(?, _)")
        asked = set()
        errors = []

        def changer():
            rng = np.random.default_rng(workers)
            try:
                for _ in range(30):
                    s, t = (int(v) for v in rng.integers(0, 8, 2))
                    if (s, t) in E:
                        edges.remove([(s, t)])
                        E.discard((s, t))
                    elif s != t:
                        edges.insert([(s, t)])
                        E.add((s, t))
                    edges.advance_to(edges.epoch + 1)
                    eng.wait(prog["tc"], timeout=T)
            except BaseException as ex:  # noqa: BLE001
                errors.append(ex)

        def asker():
            rng = np.random.default_rng(10 + workers)
            try:
                for _ in range(30):
                    n = int(rng.integers(0, 8))
                    if n in asked and rng.random() < 0.5:
                        g.retract(n)
                        asked.discard(n)
                    else:
                        g.ask(n)
                        asked.add(n)
                    eng.wait(g.view, timeout=T)
            except BaseException as ex:  # noqa: BLE001
                errors.append(ex)
        threads = [threading.Thread(target=changer), threading.Thread(target=asker)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        edges.advance_to(edges.epoch + 1)
        eng.wait(g.view, timeout=T)
        eng.wait(prog["tc"], timeout=T)
        C = _closure(E)
        assert set(map(tuple, prog["tc"].to_pandas().to_numpy().tolist())) == C
        assert set(map(tuple, g.view.to_pandas().to_numpy().tolist())) == {(u, v) for u, v in C if u in asked}
