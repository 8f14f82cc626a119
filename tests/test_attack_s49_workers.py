"""Attack (session 49): worker counts 4, 5, 7 and 8 (README "Workers": every arrangement is W spines
partitioned by key hash, every step runs its shards in parallel, results are identical for every W).

Session 48 (tests/test_attack_s48_workers.py) ran the random program fuzzers, sssp/wcc memory modes,
one-shard keys, 12,000-row steps of joins and reductions, stats, cursors and followers at W = 4..16.
What ran here, each compared with W = 1 (and a from-scratch reference where there is one), found nothing
wrong at any W; these tests keep what adds coverage:

- pagerank in every memory mode, float ranks bit for bit, with at= reads (no earlier wide-W pagerank);
- loops in steps above the pool's 10,000-row threshold: iterate to a fixed point and cut by max_rounds,
  enter_at + delay in a Variable loop, mutual recursion, top_k over a loop's result, an export shared
  by a second dataflow; then a quarter of the edges retracted; at= reads of the first epoch;
- sssp (full, jod), khop, scc and wcc, argmin/argmax/top_k in 12,000-row steps: rows equal, and in the
  same order (to_pandas's order does not depend on W either);
- 20 epochs of reachable/wcc/scc changes queued before the engine gets to them (one physical batch)
  versus waited one by one, read with at= per epoch, against networkx;
- a Datalog program with recursion, stratified negation, recursive min (sssp, min-label cc), count/max
  aggregates and a goal asked twice, over 5 epochs of changes, against tests/datalog_reference.py;
- a dataflow installed late with its inputs at different epochs (CompactedError/UsageError for the
  epochs it cannot answer, the same at every W), and exports renamed (``name~k``) by re-running the
  cell that made them, read by later dataflows, then cascade drops.

Also checked and not kept (no difference at any W): NaN payloads and -0.0 made by a map as group and
join keys, str/float/bool keys in argmin/top_k/min, trace accumulate/cursor with two-column str keys and
unsorted duplicate probes, multiplicity overflow (failing and net-cancelling), steady churn (records
equal live records per arrangement at W = 8), in-place writes by map/filter functions in parallel steps,
reduce/threshold with negative multiplicities, folding on close and at= reads after it, W = 128, 500."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

sys.path.insert(0, str(Path(__file__).parent))
from datalog_reference import diff_rows, evaluate, rows_of, same_rows  # noqa: E402

T = 120


def _rows(view, at=None):
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


def _ordered(view, at=None):
    return list(map(tuple, view.to_pandas(at=at).values.tolist()))


def _res(fn):
    try:
        return fn()
    except kp.KpgnbError as err:
        return type(err).__name__


# -- pagerank in every memory mode ----------------------------------------------------------------------------

def _pagerank(workers):
    rng = np.random.default_rng(3)
    edges = set()
    while len(edges) < 60:
        edges.add((int(rng.integers(20)), int(rng.integers(20))))
    with kp.Engine(workers=workers) as eng:
        e = eng.input("edges", ["src", "dst"], key="src")
        e.insert(sorted(edges))
        e.advance_to(1)
        views = []
        for mem, drop in [("full", None), ("jod", None),
                          ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2))]:
            with eng.dataflow(f"pr_{mem}") as df:
                views.append(graphs.pagerank(df.input("edges"), iterations=6, memory=mem, drop=drop)
                             .view(f"pr_{mem}", history=10))
        out = []
        for ep in range(1, 5):
            for v in views:
                eng.wait(v, timeout=T)
            out.append([_ordered(v) for v in views])
            live = sorted(edges)
            gone = [live[int(rng.integers(len(live)))] for _ in range(2)]
            new = [(int(rng.integers(20)), int(rng.integers(20))) for _ in range(3)]
            gone = sorted(set(gone))
            new = sorted(set(new) - edges - set(gone))
            edges.difference_update(gone)
            edges.update(new)
            e.remove(gone)
            if new:
                e.insert(new)
            e.advance_to(ep + 1)
        for v in views:
            eng.wait(v, timeout=T)
        out.append([[_ordered(v, at) for at in range(1, 4)] for v in views])
    return out


@pytest.mark.parametrize("workers", [5, 8])
def test_pagerank_in_every_memory_mode_is_bit_identical_at_wider_worker_counts(workers):
    one = _pagerank(1)
    for step in one[:-1]:
        assert step[1] == step[0] and step[2] == step[0]  # every mode, bit for bit (README)
    assert _pagerank(workers) == one


# -- loops in parallel steps ----------------------------------------------------------------------------------

def _loops(workers, n=12000, N=4000):
    rng = np.random.default_rng(2)
    out = []
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"])
        r = eng.input("R", ["node", "d"])
        ea = {"src": rng.integers(0, N, n), "dst": rng.integers(0, N, n)}
        e.insert(ea)
        r.insert({"node": np.arange(0, N, 7), "d": np.arange(0, N, 7) % 13})
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("d") as df:
            E, R = df.input("E"), df.input("R")
            Eb = E.arrange_by("src").export("eb")

            def body(lbl):
                cand = lbl.join(Eb, left_on="node", right_on="src").map(lambda dst, d: {"node": dst, "d": d + 1})
                return cand.concat(lbl).min(by="node", col="d")
            views = [R.iterate(body).view("fix", history=5), R.iterate(body, max_rounds=3).view("cut", history=5)]
            loop = df.loop()
            start = R.enter_at(loop, lambda d: d % 5)
            var = kp.Variable(loop, start)
            nxt = (var.join(Eb, left_on="node", right_on="src").map(lambda dst, d: {"node": dst, "d": d + 1})
                   .delay(lambda d: d // 2))
            views.append(var.set(nxt.concat(start).min(by="node", col="d")).leave().view("ordered", history=5))
            l2 = df.loop()
            a = kp.Variable(l2, R.select("node"))
            b = kp.Variable(l2, R.select("node").filter(lambda node: node % 2 == 0))
            an = a.set(b.join(Eb, left_on="node", right_on="src").map(lambda dst: {"node": dst})
                       .concat(R.select("node").enter(l2)).distinct())
            bn = b.set(a.filter(lambda node: node % 3 != 0)
                       .concat(R.select("node").filter(lambda node: node % 2 == 0).enter(l2)).distinct())
            views += [an.leave().count(by=[]).view("a", history=5),
                      bn.leave().top_k(by=[], order_by="node", k=5).view("b", history=5)]
        with eng.dataflow("d2") as df:
            views.append(df.use("eb").join(df.use("eb"), left_on="dst", right_on="src").count(by="src")
                         .view("two", history=5))
        for ep in (1, 2):
            if ep == 2:
                e.remove({c: x[: n // 4] for c, x in ea.items()})
                r.remove([(7, 7)])
                r.insert([(1, 0)])
                e.advance_to(2)
                r.advance_to(2)
            eng.wait("d", timeout=T)
            eng.wait("d2", timeout=T)
            out.append([_ordered(v) for v in views])
        out.append([_ordered(v, 0) for v in views])
    return out


def test_loops_with_enter_at_delay_and_variables_in_parallel_steps_at_five_workers():
    one = _loops(1)
    assert sorted(one[0][0]) == sorted(one[0][2])  # enter_at/delay: the same fixed point
    assert sorted(one[1][0]) == sorted(one[1][2])
    assert _loops(5) == one


# -- graph queries and row reductions in parallel steps -------------------------------------------------------

def _parallel_graphs(workers, n=12000, N=20000):
    rng = np.random.default_rng(7)
    out = []
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k", "j", "v"])
        e = eng.input("E", ["src", "dst", "w"], key="src")
        s = eng.input("S", ["source"])
        s.insert([(0,), (1,), (2,)])
        ea = {"src": rng.integers(0, N, n), "dst": rng.integers(0, N, n), "w": rng.integers(1, 9, n)}
        ea["src"][:30] = np.arange(30) % 3
        e.insert(ea)
        aa = {"k": np.where(rng.random(n) < 0.3, 5, rng.integers(0, 3000, n)), "j": rng.integers(0, 50, n),
              "v": rng.integers(-9, 9, n)}
        a.insert(aa)
        for x in (a, e, s):
            x.advance_to(1)
        with eng.dataflow("d") as df:
            A, E, S = df.input("A"), df.input("E"), df.input("S")
            views = [A.top_k(by="k", order_by="v", k=3).count(by="k").view("tk", history=5),
                     A.argmin(by="j", col="v").view("am", history=5),
                     A.argmax(by="k", col="j").count(by="j").view("ax", history=5),
                     graphs.sssp(E, S).view("sp", history=5),
                     graphs.sssp(E, S, memory="jod").view("spj", history=5),
                     graphs.khop(E.select("src", "dst"), S, 4).view("kh", history=5),
                     graphs.scc(E.select("src", "dst")).view("scc", history=5),
                     graphs.wcc(E.select("src", "dst")).count(by="label").rename(count="c").count(by="c")
                     .view("wcc", history=5)]
        eng.wait("d", timeout=T)
        out.append([_ordered(v) for v in views])
        e.remove({c: x[100:100 + n // 3] for c, x in ea.items()})
        a.remove({c: x[: n // 3] for c, x in aa.items()})
        for x in (a, e, s):
            x.advance_to(2)
        eng.wait("d", timeout=T)
        out.append([_ordered(v) for v in views])
        out.append([_ordered(v, 0) for v in views])
    return out


def test_graph_queries_and_row_reductions_in_parallel_steps_same_rows_same_order_at_eight_workers():
    one = _parallel_graphs(1)
    assert one[0][3] == one[0][4] and one[1][3] == one[1][4]  # sssp full == jod
    assert _parallel_graphs(8) == one  # rows, and the order to_pandas lists them in


# -- queued epochs against networkx ---------------------------------------------------------------------------

EPOCHS = 20


def _graph_stream(seed=5, n=25):
    rng = np.random.default_rng(seed)
    E = set()
    while len(E) < 30:
        E.add((int(rng.integers(n)), int(rng.integers(n))))
    init, steps = sorted(E), []
    for _ in range(EPOCHS):
        ins, rem = [], []
        for _ in range(3):
            if E and rng.random() < 0.5:
                x = sorted(E)[int(rng.integers(len(E)))]
                E.discard(x)
                rem.append(x)
            else:
                x = (int(rng.integers(n)), int(rng.integers(n)))
                if x not in E and x not in rem:
                    E.add(x)
                    ins.append(x)
        steps.append((ins, rem, sorted(E)))
    return init, steps


def _nx_answers(edges):
    g = nx.DiGraph()
    g.add_node(0)
    g.add_edges_from(edges)
    reach = sorted((v,) for v in nx.descendants(g, 0) | {0})
    ug = nx.Graph()
    ug.add_edges_from(edges)
    labels = sorted((v, min(c)) for c in nx.connected_components(ug) for v in c)
    in_scc = sorted((a, b) for a, b in edges if nx.has_path(g, b, a))  # edges on a cycle
    return [reach, labels, in_scc]


def _queued(workers, wait_each):
    init, steps = _graph_stream()
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"], key="src")
        r = eng.input("R", ["node"])
        e.insert(init)
        r.insert([(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("d") as df:
            E = df.input("E")
            views = [graphs.reachable(E, df.input("R")).view("re", history=100),
                     graphs.wcc(E).view("cc", history=100), graphs.scc(E).view("scc", history=100)]
        for ep, (ins, rem, _) in enumerate(steps, start=1):
            if ins:
                e.insert(ins)
            if rem:
                e.remove(rem)
            e.advance_to(ep + 1)
            r.advance_to(ep + 1)
            if wait_each:
                eng.wait("d", timeout=T)
        eng.wait("d", timeout=T)
        return [[_rows(v, ep) for v in views] for ep in range(1, EPOCHS + 1)]


@pytest.mark.parametrize("workers", [4, 7])
def test_epochs_queued_as_one_batch_match_networkx_at_wider_worker_counts(workers):
    _, steps = _graph_stream()
    want = [_nx_answers(s[2]) for s in steps]
    got = _queued(workers, wait_each=False)
    for ep in range(EPOCHS):
        assert got[ep] == want[ep], f"epoch {ep + 1}"
    assert _queued(workers, wait_each=True) == got


# -- Datalog --------------------------------------------------------------------------------------------------

DATALOG = """
.decl edge(src: int, dst: int)
.decl w(src: int, dst: int, c: int)
tc(x, y) :- edge(x, y).
tc(x, y) :- tc(x, z), edge(z, y).
node(x) :- edge(x, _).
node(y) :- edge(_, y).
reach(y) :- root(y).
reach(y) :- reach(x), edge(x, y).
unreached(x) :- node(x), !reach(x).
sp(y, min<d>) :- root(y), d = 0.
sp(y, min<d>) :- sp(x, d1), w(x, y, c), d = d1 + c.
cc(x, min<l>) :- node(x), l = x.
cc(y, min<l>) :- cc(x, l), edge(x, y).
cc(x, min<l>) :- cc(y, l), edge(x, y).
size(l, count<x>) :- cc(x, l).
deg(x, count<y>) :- edge(x, y).
top(max<d>) :- deg(_, d).
oneway(x, y) :- edge(x, y), !edge(y, x).
"""


def _datalog(workers, seed=3, epochs=5):
    import random
    rng = random.Random(seed)
    got = []
    with kp.Engine(workers=workers) as eng:
        ses = {"edge": eng.input("edge", ["src", "dst"], key="src"), "w": eng.input("w", ["src", "dst", "c"]),
               "root": eng.input("root", ["node"])}
        state = {p: Counter() for p in ses}

        def put(p, rows, sign):
            if rows:
                (ses[p].insert if sign > 0 else ses[p].remove)(rows)
                for row in rows:
                    state[p][row] += sign
        put("edge", [(rng.randrange(30), rng.randrange(30)) for _ in range(40)], 1)
        put("w", [(rng.randrange(30), rng.randrange(30), rng.randrange(1, 6)) for _ in range(50)], 1)
        put("root", [(0,), (1,)], 1)
        for s in ses.values():
            s.advance_to(1)
        prog = eng.datalog(DATALOG, name="q")
        goal = prog.goal("tc(?, _)")
        goal.ask(3)
        goal.ask(4)
        for ep in range(1, epochs + 1):
            if ep > 1:
                for p in ("edge", "w"):
                    live = sorted(r for r, c in state[p].items() if c > 0)
                    put(p, rng.sample(live, 3), -1)
                    put(p, [(rng.randrange(30), rng.randrange(30)) + ((rng.randrange(1, 6),) if p == "w" else ())
                            for _ in range(3)], 1)
                if ep == 3:
                    put("root", [(0,)], -1)
                    put("root", [(7,)], 1)
                for s in ses.values():
                    s.advance_to(ep)
            ref = evaluate(DATALOG, {p: +c for p, c in state.items()})
            step = {}
            for pred, want in ref.items():
                if pred in ses:
                    continue
                eng.wait(prog[pred], timeout=T)
                rows = rows_of(prog[pred], prog.columns(pred))
                assert same_rows(rows, want), f"W={workers} epoch {ep} {pred}: {diff_rows(rows, want)}"
                step[pred] = sorted(rows)
            eng.wait(goal.view, timeout=T)
            asked = _rows(goal.view)
            assert asked == sorted(r for r in ref["tc"] if r[0] in (3, 4)), f"W={workers} epoch {ep} goal"
            step["goal"] = asked
            got.append(step)
    return got


@pytest.mark.parametrize("workers", [5, 8])
def test_datalog_recursion_negation_min_aggregates_and_goals_at_wider_worker_counts(workers):
    assert _datalog(workers) == _datalog(1)


# -- late installs, renamed exports ---------------------------------------------------------------------------

def _late_and_renamed(workers):
    out = []
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k", "v"], key="k")
        b = eng.input("B", ["k", "w"])
        for ep in range(1, 4):
            a.insert([(i, ep) for i in range(ep * 3)])
            a.advance_to(ep)
            b.insert([(i, -ep) for i in range(0, 9, ep)])
            b.advance_to(ep)
        a.insert([(100, 5)])
        a.advance_to(5)  # A ahead of B

        def cell():
            with eng.dataflow("p") as df:
                df.input("A").sum(by="k", col="v").export("sums")
                df.input("A").top_k(by="k", order_by="v", k=2).export("top")
        cell()
        with eng.dataflow("late") as df:
            v = df.use("sums").join(df.input("B"), on="k").view("j", history=10)
            v2 = df.use("top").min(by="k", col="v").view("m", history=10)
        fol = v.follow(timeout=T)
        eng.wait(v, timeout=T)
        out.append(v.to_pandas().attrs["epoch"])
        out.append([_res(lambda at=at: _ordered(x, at)) for x in (v, v2) for at in range(0, 6)])
        b.insert([(100, 1)])
        b.advance_to(6)
        a.advance_to(6)
        eng.wait(v, timeout=T)
        out.append(_ordered(v))
        out.append(list(map(tuple, next(fol).values.tolist())))
        fol.close()
        eng.drop("p")
        cell()  # the same cell again: the kept exports are renamed sums~1, top~1
        with eng.dataflow("r") as df:
            r = df.use("sums").join(df.use("sums~1"), on="k").count(by=[]).view("r", history=5)
        a.insert([(5, 7)])
        a.remove([(0, 1)])
        a.advance_to(7)
        b.advance_to(7)
        eng.wait("r", timeout=T)
        eng.wait("late", timeout=T)
        out.append([_ordered(v), _ordered(v2), _ordered(r), sorted(eng.catalog())])
        eng.drop("late", cascade=True)
        eng.drop("p", cascade=True)
        out.append(sorted(eng.dataflows()))
    return out


@pytest.mark.parametrize("workers", [4, 7])
def test_late_install_and_renamed_exports_at_wider_worker_counts(workers):
    one = _late_and_renamed(1)
    assert one[1][3] == "UsageError" and one[1][4] == "UsageError"  # not final yet: B lags
    assert isinstance(one[1][10], list) and len(one[1][10]) == 10
    assert _late_and_renamed(workers) == one
