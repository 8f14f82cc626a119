"""Attack (session 50): worker counts 4..8 (README "Workers": results are identical for every W).

Sessions 48 and 49 (tests/test_attack_s48_workers.py, tests/test_attack_s49_workers.py) covered the random
program fuzzers, sssp/wcc/pagerank memory modes, large parallel steps, one-shard keys, late installs and a
Datalog program. What ran here, each compared with W = 1 epoch by epoch, found nothing wrong at any W;
these tests keep what adds coverage:

- bfs, reachable, khop, rpq and wcc in every memory mode (and scc), node ids that all fall in a few
  shards, epochs of a single change, roots and sources changed between epochs; every mode agrees too;
- global reductions (``by=[]``: every row in one shard) and zero-column collections, with at= reads;
- Datalog goals asked and retracted between epochs, recursive min, negation and count;
- a loop nested in a Variable loop, mutually recursive Variables through top_k and argmin;
- str node ids (bfs, wcc, scc, float-weighted sssp), and jod refused the same way at every W;
- joins against an imported two-column arrangement with the key columns swapped or renamed;
- delay/enter_at to rounds around 2**40..2**50 in a loop (no hang, same answer).

Also checked and not kept (no difference at any W): argmin/top_k/count/sum/max with str and float columns
on exports used by dataflows installed at later epochs, follow() streams (the same changes), live records
and key placement in eng.stats(live=True), errors raised in parallel map/reduce steps (same DataflowError,
the other dataflows run on), float keys -0.0/NaN payloads through joins, counts and distinct(key=),
workers= validation, TraceHandle.cursor shard validation."""
from __future__ import annotations

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

T = 60


def _rows(view, at=None):
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


# -- graph queries in every memory mode ---------------------------------------------------------------------

def _modes():
    return [("full", None), ("jod", None), ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2))]


def _graph_queries(workers, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"], key="src")
        le = eng.input("L", ["src", "label", "dst"], key="src")
        s = eng.input("S", ["node"])
        so = eng.input("SO", ["source"])
        live_e, live_l = set(), set()

        def churn(n):
            for _ in range(n):
                a, b = int(rng.integers(8)) * 8, int(rng.integers(8)) * 8   # multiples of 8: few shards
                if (a, b) in live_e:
                    live_e.discard((a, b))
                    e.remove([(a, b)])
                else:
                    live_e.add((a, b))
                    e.insert([(a, b)])
                t = (a, int(rng.integers(2)), b)
                if t in live_l:
                    live_l.discard(t)
                    le.remove([t])
                else:
                    live_l.add(t)
                    le.insert([t])
        churn(10)
        s.insert([0])
        so.insert([0, 8])
        for x in (e, le, s, so):
            x.advance_to(1)
        views = []
        for mem, drop in _modes():
            with eng.dataflow("g" + mem) as df:
                E, S = df.input("E"), df.input("S")
                views.append(graphs.bfs(E, S, memory=mem, drop=drop).view("bfs" + mem))
                views.append(graphs.reachable(E, S, memory=mem, drop=drop).view("r" + mem))
                views.append(graphs.khop(E, df.input("SO"), 2, memory=mem, drop=drop).view("k" + mem))
                views.append(graphs.rpq(df.input("L"), df.input("SO"), [(0, 0, 1), (0, 1, 1), (1, 1, 0)], [1],
                                        memory=mem, drop=drop).view("q" + mem))
                views.append(graphs.wcc(E, memory=mem, drop=drop).view("w" + mem))
        with eng.dataflow("scc") as df:
            views.append(graphs.scc(df.input("E")).view("scc"))
        for ep in range(1, 7):
            for v in views:
                eng.wait(v, timeout=T)
            out.append([_rows(v) for v in views])
            churn(1 if ep % 2 else int(rng.integers(0, 4)))    # single-change epochs, and empty ones
            if ep == 3:
                s.remove([0])
                s.insert([16])
            if ep == 4:
                so.remove([8])
            for x in (e, le, s, so):
                x.advance_to(ep + 1)
    return out


@pytest.mark.parametrize("workers", [4, 7])
def test_graph_queries_in_every_memory_mode_with_few_shard_keys_match_one_worker(workers):
    one = _graph_queries(1)
    for step in one:
        for q in range(5):
            assert step[q] == step[q + 5] == step[q + 10], f"memory modes disagree on query {q}"
    assert any(step[0] for step in one) and any(step[3] for step in one)
    assert _graph_queries(workers) == one


# -- global reductions, zero-column collections -------------------------------------------------------------

def _global(workers, seed=4):
    rng = np.random.default_rng(seed)
    out = []
    with kp.Engine(workers=workers) as eng:
        p = eng.input("P", ["k", "v"], dtypes={"k": "int64", "v": "float64"})
        z = eng.input("Z", [])
        live = []
        p.advance_to(1)
        z.advance_to(1)
        with eng.dataflow("d") as df:
            P = df.input("P")
            vs = [P.count(by=[]).view("c0", history=10), P.sum("v", by=[]).view("s0", history=10),
                  P.min("v", by=[]).view("m0", history=10), P.argmax("v", by=[]).view("a0", history=10),
                  P.top_k(by=[], order_by="v", k=3).view("t0", history=10),
                  P.threshold(by=[], fn=lambda c: c % 3).view("th0", history=10),
                  P.select().distinct().view("d0", history=10),
                  df.input("Z").count(by=[]).view("zc", history=10),
                  df.input("Z").join(P.select(), left_on=[], right_on=[]).count(by=[]).view("zj", history=10)]
        for ep in range(1, 9):
            for v in vs:
                eng.wait(v, timeout=T)
            out.append([_rows(v) for v in vs])
            for _ in range(1 if ep % 2 else int(rng.integers(0, 4))):
                if live and rng.random() < 0.4:
                    r = live.pop(int(rng.integers(len(live))))
                    p.remove([r])
                else:
                    r = (int(rng.integers(20)), float(rng.integers(-3, 3)))
                    live.append(r)
                    p.insert([r])
            if ep in (2, 5):
                z.insert([()])
            if ep == 6:
                z.remove([()])
            p.advance_to(ep + 1)
            z.advance_to(ep + 1)
        for v in vs:
            eng.wait(v, timeout=T)
        out.append([[_rows(v, at=a) for a in range(2, 8)] for v in vs])
    return out


@pytest.mark.parametrize("workers", [4, 7])
def test_global_reductions_and_zero_column_collections_match_one_worker(workers):
    one = _global(1)
    assert one[0][0] == [] and any(step[0] for step in one[:-1])
    assert _global(workers) == one


# -- Datalog goals asked and retracted between epochs -------------------------------------------------------

PROG = """
tc(x, y) :- edge(x, y).
tc(x, z) :- tc(x, y), edge(y, z).
sp(y, min<d>) :- root(y), d = 0.
sp(y, min<d>) :- sp(x, d1), w(x, y, c), d = d1 + c.
node(x) :- edge(x, _).
node(y) :- edge(_, y).
noreach(x) :- node(x), !tc(0, x).
cnt(x, count<y>) :- tc(x, y).
"""


def _datalog(workers, seed=2):
    import random
    rng = random.Random(seed)
    out = []
    with kp.Engine(workers=workers) as eng:
        ses = {"edge": eng.input("edge", ["src", "dst"]), "w": eng.input("w", ["src", "dst", "c"]),
               "root": eng.input("root", ["node"])}
        live = {p: set() for p in ses}

        def tog(p, r):
            if r in live[p]:
                live[p].discard(r)
                ses[p].remove([r])
            else:
                live[p].add(r)
                ses[p].insert([r])

        def churn(n):
            for _ in range(n):
                tog("edge", (rng.randrange(8) * 8, rng.randrange(8) * 8))
                tog("w", (rng.randrange(8) * 8, rng.randrange(8) * 8, rng.randrange(1, 4)))
        churn(15)
        tog("root", (0,))
        for s in ses.values():
            s.advance_to(1)
        prog = eng.datalog(PROG, name="q")
        g = prog.goal("tc(?, _)")
        g.ask(8)
        g.ask(16)
        g2 = prog.goal("sp(?, _)")
        g2.ask(24)
        asked, asked2 = {8, 16}, {24}
        for ep in range(1, 8):
            step = {}
            for pred in ("tc", "sp", "noreach", "cnt"):
                eng.wait(prog[pred], timeout=T)
                step[pred] = _rows(prog[pred])
            for name, gg in (("g", g), ("g2", g2)):
                eng.wait(gg.view, timeout=T)
                step[name] = _rows(gg.view)
            assert step["g"] == [r for r in step["tc"] if r[0] in asked], f"W={workers} epoch {ep}"
            assert step["g2"] == [r for r in step["sp"] if r[0] in asked2], f"W={workers} epoch {ep}"
            out.append(step)
            churn(1 if ep % 2 else rng.randrange(0, 4))
            if ep == 2:
                g.retract(8)
                g.ask(0)
                asked = {0, 16}
            if ep == 4:
                tog("root", (0,))
                tog("root", (40,))
            if ep == 5:
                g2.ask(40)
                g2.retract(24)
                asked2 = {40}
            for s in ses.values():
                s.advance_to(ep + 1)
    return out


@pytest.mark.parametrize("workers", [4, 6])
def test_datalog_goals_asked_and_retracted_between_epochs_match_one_worker(workers):
    assert _datalog(workers) == _datalog(1)


# -- a loop nested in a Variable loop ---------------------------------------------------------------------

def _nested(workers, seed=13):
    rng = np.random.default_rng(seed)
    out = []
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"])
        n = eng.input("N", ["node", "lab"])
        live_e, live_n = set(), set()

        def churn(k):
            for _ in range(k):
                t = (int(rng.integers(7)) * 8, int(rng.integers(7)) * 8)
                (e.remove if t in live_e else e.insert)([t])
                live_e.symmetric_difference_update({t})
                u = (int(rng.integers(7)) * 8, int(rng.integers(30)))
                (n.remove if u in live_n else n.insert)([u])
                live_n.symmetric_difference_update({u})
        churn(10)
        e.advance_to(1)
        n.advance_to(1)
        with eng.dataflow("x") as df:
            outer = df.loop()
            a = kp.Variable(outer, df.input("N"))
            b = kp.Variable(outer, None, columns=["node", "lab"], dtypes=["int64", "int64"])
            eo = df.input("E").enter(outer)
            inner = outer.loop()
            iv = kp.Variable(inner, a)
            step = (iv.join(eo.enter(inner), left_on="node", right_on="src").select("dst", "lab")
                    .rename(dst="node").concat(iv).min("lab", by="node"))
            iv.set(step)
            a.set(step.leave().concat(b).top_k(by="node", order_by="lab", k=2, descending=False)
                  .as_collection().distinct())
            b.set(a.map(lambda node, lab: {"node": node, "lab": lab + 1}).filter(lambda lab: lab < 40)
                  .concat(b).argmin("lab", by="node").as_collection())
            v1, v2 = a.leave().view("a"), b.leave().view("b")
        for ep in range(1, 7):
            for v in (v1, v2):
                eng.wait(v, timeout=T)
            out.append([_rows(v1), _rows(v2)])
            churn(1 if ep % 2 else 3)
            e.advance_to(ep + 1)
            n.advance_to(ep + 1)
    return out


@pytest.mark.parametrize("workers", [5, 8])
def test_loop_nested_in_variable_loop_through_top_k_and_argmin_matches_one_worker(workers):
    one = _nested(1)
    assert all(step[0] and step[1] for step in one)
    assert _nested(workers) == one


# -- str node ids -------------------------------------------------------------------------------------------

def _str_graphs(workers, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"], dtypes="str", key="src")
        w = eng.input("W", ["src", "dst", "w"], dtypes={"src": "str", "dst": "str", "w": "float64"})
        r = eng.input("R", ["node"], dtypes="str")
        so = eng.input("S", ["source"], dtypes="str")
        names = [f"n{i}" for i in range(9)]
        live_e, live_w = set(), set()

        def churn(k):
            for _ in range(k):
                a, b = names[int(rng.integers(9))], names[int(rng.integers(9))]
                (e.remove if (a, b) in live_e else e.insert)([(a, b)])
                live_e.symmetric_difference_update({(a, b)})
                t = (a, b, float(rng.integers(1, 5)) / 2)
                (w.remove if t in live_w else w.insert)([t])
                live_w.symmetric_difference_update({t})
        churn(12)
        r.insert(["n0"])
        so.insert(["n0", "n3"])
        for x in (e, w, r, so):
            x.advance_to(1)
        with eng.dataflow("g") as df:
            vs = [graphs.bfs(df.input("E"), df.input("R")).view("b"),
                  graphs.sssp(df.input("W"), df.input("S")).view("s"),
                  graphs.wcc(df.input("E")).view("w"), graphs.scc(df.input("E")).view("scc")]
        with pytest.raises(kp.SchemaError):
            with eng.dataflow("gj") as df:
                graphs.wcc(df.input("E"), memory="jod").view("wj")
        for ep in range(1, 6):
            for v in vs:
                eng.wait(v, timeout=T)
            out.append([_rows(v) for v in vs])
            churn(1 if ep % 2 else 3)
            for x in (e, w, r, so):
                x.advance_to(ep + 1)
    return out


@pytest.mark.parametrize("workers", [5, 8])
def test_str_node_graph_queries_match_one_worker(workers):
    one = _str_graphs(1)
    assert all(all(q) for q in one[0])
    assert _str_graphs(workers) == one


# -- joins against an imported two-column arrangement --------------------------------------------------------

def _two_column_joins(workers):
    rng = np.random.default_rng(9)
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["a", "b", "c"], key=["a", "b"])
        q = eng.input("Q", ["x", "y"])
        e.insert([(int(rng.integers(5)), int(rng.integers(5)), i) for i in range(40)])
        q.insert([(int(rng.integers(5)), int(rng.integers(5))) for _ in range(10)])
        e.advance_to(1)
        q.advance_to(1)
        with eng.dataflow("d1") as df:
            df.input("E").arrange_by(["a", "b"]).export("ab")
        e.insert([(1, 2, 100)])
        e.advance_to(2)
        q.advance_to(2)
        with eng.dataflow("d2") as df:    # installed an epoch later
            g, Q = df.use("ab"), df.input("Q")
            out = [Q.join(g, left_on=["x", "y"], right_on=["a", "b"]).view("j1"),
                   Q.join(g, left_on=["y", "x"], right_on=["b", "a"]).view("j2"),
                   Q.join(g, left_on=["x", "y"], right_on=["b", "a"]).view("j3"),
                   Q.semijoin(g.rename(a="p", b="r"), left_on=["y", "x"], right_on=["r", "p"]).view("j4"),
                   g.rename(a="b", b="a").join(Q, left_on=["a", "b"], right_on=["x", "y"]).view("j6"),
                   g.count(by=["b", "a"]).join(Q, left_on=["b", "a"], right_on=["x", "y"]).view("j8")]
        for v in out:
            eng.wait(v, timeout=T)
        return [_rows(v) for v in out]


def test_joins_on_swapped_or_renamed_two_column_keys_of_an_import_match_one_worker():
    one = _two_column_joins(1)
    assert one[0] and one[2] and one[0] == sorted((x, y, c) for y, x, c in one[1])  # key columns in left_on order
    for workers in (4, 8):
        assert _two_column_joins(workers) == one


# -- rounds far apart ---------------------------------------------------------------------------------------

def test_delay_and_enter_at_to_very_late_rounds_match_one_worker():
    def run(workers):
        got = []
        with kp.Engine(workers=workers) as eng:
            e = eng.input("E", ["src", "dst"])
            r = eng.input("R", ["node", "d"])
            e.insert([(i * 8, (i + 1) * 8) for i in range(5)])
            r.insert([(0, 0)])
            e.advance_to(1)
            r.advance_to(1)
            with eng.dataflow("x") as df:
                E = df.input("E")
                v = df.input("R").iterate(
                    lambda x: x.join(E, left_on="node", right_on="src")
                    .map(lambda dst, d: {"node": dst, "d": d + 1}).delay(lambda d: d * (1 << 40))
                    .concat(x).min("d", by="node")).view("v")
                loop = df.loop()
                vv = kp.Variable(loop, df.input("R").enter_at(loop, lambda d: d + (1 << 50)))
                vv.set(vv.join(E.enter(loop), left_on="node", right_on="src")
                       .map(lambda dst, d: {"node": dst, "d": d + 1}).concat(vv).distinct())
                v2 = vv.leave().view("v2")
            for ep in (1, 2):
                eng.wait(v, timeout=T)
                eng.wait(v2, timeout=T)
                got.append((_rows(v), _rows(v2)))
                if ep == 1:
                    e.remove([(16, 24)])
                e.advance_to(ep + 1)
                r.advance_to(ep + 1)
        return got
    full = [(i * 8, i) for i in range(6)]
    want = [(full, full), (full[:3], full[:3])]
    assert run(1) == want
    assert run(6) == want
