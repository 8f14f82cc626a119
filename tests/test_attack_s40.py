"""Session 40 attack on 423622c (a loop's arrange, join and reduce no longer step on a move of their input
frontier to another epoch without due work: ``Graph.run`` calls ``follow_epoch`` instead, which lets the
traces they read compact to the new frontier, and their own traces' uppers wait for their next real step).

The claim checked: answers at every epoch, ``at=`` reads of view history, ``follow()`` streams and the live
(logically compacted) records of every loop trace (``eng.arrangements(live=True)``) are what eager stepping
(``lazy_rounds = False`` on ArrangeOp, JoinOp and ReduceOp) gives, and the answers are those of
from-scratch references (networkx, tests/reference.py, tests/datalog_reference.py). Scenarios: random
loop programs (nested loops, mutual recursion, rows entering at later rounds, bounded loops) over streams
with epochs that bring nothing and several epochs sealed at once; joins that produce their output in
chunks of 1 or 3 rows; dataflows installed later that import an export of a loop-containing dataflow,
dropped and installed again; the graph library's loops (bfs, reachable, scc, wcc, sssp, pagerank, khop,
min labels entering by bit length) with bursts of epochs reaching the loop at once and a thread reading
views, live arrangements and statistics all along; a min's pending work at later rounds while epochs move;
an input closed under a loop while another keeps advancing; two inputs advanced at different paces (a
loop's joins seeing one side's frontier epochs ahead of the other's); Datalog with recursion, negation, aggregates
and recursive min, with goals asked and retracted in epochs without data. W = 1, 2, 3; seeded.

What was found: no wrong answer, hang, crash or difference in any of the above while inputs stay open
(several hundred random programs and streams were run while writing this file; the tests keep a sample).
Each test kind but the crafted pending-work one fails when follow_epoch is left out (no epoch_moved), and
most when JoinOp's or ReduceOp's follow_epoch drops its part. (Two look-alikes that are not bugs: a goal's
ask lends the inputs it reads an epoch, so rows written next go in one epoch later, as InputSession.
advance_to documents; the Datalog check brings every input to the same epoch first. And live records read
while one input is epochs ahead of another are not at a quiescent point; they are compared once level.)
One difference from eager stepping was found, older than 423622c (at faedb16 too, from the lazy rounds
within an epoch): once every input of a loop was closed, its traces kept the compaction of the last
frontier they stepped at, (e, 0), where eager steps left (e, 1) (or, nested, {(e, 0, 1), (e, 1, 0)}), so
they held more live records for as long as the dataflow stayed installed. Fixed in session 40: a reduce
whose input frontier is empty lets go of its input and its output trace (as a join lets go of a side
whose other side closed), so a closed loop's own traces are freed either way
(``test_closing_every_input_leaves_loop_traces_as_eager_steps_would``).
"""
from __future__ import annotations

import gc
import threading
from collections import Counter
from contextlib import contextmanager, nullcontext

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.operators import join as join_module
from kpgnb.engine.operators.arrange import ArrangeOp
from kpgnb.engine.operators.join import JoinOp
from kpgnb.engine.operators.reduce import ReduceOp

import datalog_reference as DR
from reference import COLS, build, evaluate, random_program, random_updates, toggle_root
from test_many_times import held_scheduler

LAZY = (ArrangeOp, JoinOp, ReduceOp)
T = 60  # seconds: every wait's timeout


def _set_lazy(monkeypatch, lazy: bool):
    for c in LAZY:
        monkeypatch.setattr(c, "lazy_rounds", lazy)


def _rows(view, at=None):
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


def _counter(view, at=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def _live(eng, dataflows):
    """(name, dataflow, live records) of every arrangement of these dataflows, once no dataflow has work
    left (a view is current before every operator behind it has stepped: a loop's last compaction, or its
    release once every input closed, may come after), and once released traces in reference cycles are
    collected."""
    eng.wait(timeout=T)
    gc.collect()
    return sorted((a["name"], a["dataflow"], a["live"]) for a in eng.arrangements(live=True)
                  if a["dataflow"] in dataflows)


def _flat(frames):
    """A follower's frames as one consolidated list of (row..., time, diff): how they were grouped into
    frames depends on when the follower looked."""
    acc = Counter()
    for f in frames:
        for r in f.values.tolist():
            acc[tuple(r[:-1])] += int(r[-1])
    return sorted((k, v) for k, v in acc.items() if v)


def _clean(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v})


def _loop_program(rng):
    """A random program of tests/reference.py with at least one loop."""
    while True:
        p = random_program(rng, depth=4)
        if "iterate" in repr(p) or "mutual" in repr(p):
            return p


# == random loop programs, late imports, drops, chunked joins ===========================================

class _Proxy:
    """``build``'s df, with input A read from the export P of the first dataflow instead."""

    def __init__(self, df):
        self.df = df

    def input(self, name):
        return self.df.use("P").as_collection() if name == "A" else self.df.input(name)


def _script(rng):
    sc = []
    for _ in range(int(rng.integers(8, 16))):
        if rng.random() < 0.5:
            for n in ("A", "B"):
                if rng.random() < 0.6:
                    sc.append(("upd", n) + random_updates(rng, int(rng.integers(1, 6))))
        sc.append(("adv", int(rng.choice([1, 1, 1, 2, 3, 5]))))  # often epochs that bring nothing
        x = rng.random()
        if x < 0.15:
            sc.append(("late",))
        elif x < 0.22:
            sc.append(("drop",))
        if rng.random() < 0.6:
            sc.append(("check",))
    return sc


def _run_program(monkeypatch, lazy, prog, prog2, script, workers, chunk):
    _set_lazy(monkeypatch, lazy)
    monkeypatch.setattr(join_module, "CHUNK", chunk)
    out = []
    with kp.Engine(workers=workers) as eng:
        ses = {n: eng.input(n, list(COLS)) for n in ("A", "B")}
        with eng.dataflow("p") as df:
            c = build(prog, df)
            views = {"p": (c.view("v", history=200), prog, 0, False)}
            c.arrange_by("a", "b").export("P")
        follower = views["p"][0].follow(timeout=T)
        state = {n: Counter() for n in ses}
        hist, epoch, late = {}, 0, 0
        for step in script:
            if step[0] == "upd":
                _, n, rows, diffs = step
                ses[n].update(rows, diffs)
                for r, d in zip(rows, diffs):
                    state[n][r] += d
            elif step[0] == "adv":
                for e in range(epoch, epoch + step[1]):
                    hist[e] = {n: Counter(c) for n, c in state.items()}
                epoch += step[1]
                for s in ses.values():
                    s.advance_to(epoch)
            elif step[0] == "late":
                late += 1
                name = f"q{late % 2}"  # (the same name again after a drop: installed anew)
                if name in views:
                    continue
                with eng.dataflow(name) as df:
                    w = build(prog2, _Proxy(df)).view(name, history=200)
                views[name] = (w, prog2, epoch, True)
            elif step[0] == "drop":
                for name in [k for k in views if k != "p"][:1]:
                    eng.drop(name)
                    del views[name]
            else:
                for w, *_ in views.values():
                    eng.wait(w, timeout=T)
                out.append(("check", epoch, {k: sorted(_counter(w).items()) for k, (w, *_) in views.items()},
                            _live(eng, set(views))))
        for w, *_ in views.values():
            eng.wait(w, timeout=T)
        for k, (w, p, born, imported) in views.items():
            for e in range(max(born - 1, 0), epoch):  # every epoch the view has seen, read back with at=
                got = _counter(w, at=e)
                if imported:
                    want = _clean(evaluate(p, {"A": evaluate(prog, hist[e]), "B": hist[e]["B"]}))
                else:
                    want = _clean(evaluate(p, hist[e]))
                assert got == want, (k, "lazy" if lazy else "eager", "epoch", e, want - got, got - want)
                out.append(("at", k, e, sorted(got.items())))
        for s in ses.values():
            s.close()
        out.append(("follow", _flat(follower)))
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_random_loop_programs_with_late_imports_drops_and_chunked_joins(monkeypatch, workers):
    """Random loop programs over streams with empty epochs and several epochs sealed at once; a second
    dataflow, installed at a later epoch, imports an export of the first and loops over it, is dropped
    and installed again; joins produce their output in chunks (1 row, 3 rows, unbounded). Lazy and
    eager give the same answers, at= reads, follow streams and live records, and both the reference's."""
    for k in range(24):
        seed = 40_000 + 100 * workers + k
        rng = np.random.default_rng(seed)
        prog, prog2 = _loop_program(rng), _loop_program(rng)
        script = _script(rng)
        chunk = (1, 3, 1 << 20)[k % 3]
        lazy = _run_program(monkeypatch, True, prog, prog2, script, workers, chunk)
        eager = _run_program(monkeypatch, False, prog, prog2, script, workers, chunk)
        assert lazy == eager, (seed, prog, prog2)


# == the graph library's loops, bursts of epochs, a reader thread ========================================

KINDS = ["bfs", "reach", "scc", "wcc", "sssp", "pagerank", "khop", "labels"]


def _graph(kind, df):
    e, r = df.input("e"), df.input("r")
    es = e.select("src", "dst")
    src = r.map(lambda node: {"source": node})
    return {
        "bfs": lambda: graphs.bfs(es, r),
        "reach": lambda: graphs.reachable(es, r),
        "scc": lambda: graphs.scc(es),
        "wcc": lambda: graphs.wcc(es),
        "sssp": lambda: graphs.sssp(e, src),
        "pagerank": lambda: graphs.pagerank(es, iterations=4),
        "khop": lambda: graphs.khop(es, src, 2),
        "labels": lambda: graphs.propagate_min_label(
            es, e.map(lambda src: {"node": src, "label": (src * 7) % 11}).distinct(), graphs.bit_length_rounds),
    }[kind]()


def _graph_reference(kind, edges, roots):
    """From scratch; edges are a set of (src, dst, w) (w a function of the pair), roots a set of nodes."""
    g = nx.DiGraph()
    for s, d, w in edges:
        g.add_edge(s, d, w=w)
    for r in roots:
        g.add_node(r)
    if kind == "bfs":
        out = {}
        for r in roots:
            for n, d in nx.single_source_shortest_path_length(g, r).items():
                out[n] = min(out.get(n, d), d)
        return sorted(out.items())
    if kind == "reach":
        return sorted((n,) for n in set(roots).union(*(nx.descendants(g, r) for r in roots)))
    if kind == "scc":
        comp = {n: i for i, c in enumerate(nx.strongly_connected_components(g)) for n in c}
        return sorted((s, d) for s, d, _ in edges if comp[s] == comp[d])
    if kind == "wcc":
        return sorted((n, min(c)) for c in nx.weakly_connected_components(g) if len(c) > 1 or g.degree(min(c))
                      for n in c)
    if kind == "sssp":
        return sorted((r, n, d) for r in roots for n, d in nx.single_source_dijkstra_path_length(g, r, weight="w").items())
    if kind == "khop":
        return sorted((r, n, d) for r in roots
                      for n, d in nx.single_source_shortest_path_length(g, r, cutoff=2).items())
    if kind == "labels":
        srcs = {s for s, _, _ in edges}
        out = []
        for v in g.nodes:
            labels = [(u * 7) % 11 for u in nx.ancestors(g, v) | {v} if u in srcs]
            if labels:
                out.append((v, min(labels)))
        return sorted(out)
    return None  # pagerank: against eager stepping only


def _run_graph(monkeypatch, lazy, kind, seed, workers, reader):
    _set_lazy(monkeypatch, lazy)
    rng = np.random.default_rng(seed)
    n, out, errors = 12, [], []
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst", "w"])
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            v = _graph(kind, df).view("v", history=300)
        follower = v.follow(timeout=T)
        stop = threading.Event()

        def read():
            try:
                while not stop.is_set():
                    v.to_pandas()
                    eng.arrangements(live=True)
                    eng.operator_stats("p")
                    eng.dataflow_stats()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        th = threading.Thread(target=read, daemon=True) if reader else None
        if th is not None:
            th.start()
        edges, roots, hist, t, i = set(), {0}, {}, 0, 0
        while i < 14:
            burst = rng.random() < 0.3  # several epochs reach the loop as one batch
            with held_scheduler() if burst else nullcontext():
                for _ in range(int(rng.integers(2, 5)) if burst else 1):
                    i += 1
                    what = rng.random()
                    if what < 0.55:
                        ins, rem = set(), set()
                        for _ in range(int(rng.integers(1, 6))):
                            if edges and rng.random() < 0.4:
                                rem.add(sorted(edges)[int(rng.integers(len(edges)))])
                            else:
                                s, d = int(rng.integers(n)), int(rng.integers(n))
                                ins.add((s, d, 1 + (s * 5 + d) % 3))
                        ins -= edges
                        rem -= ins
                        if ins:
                            ei.insert(sorted(ins))
                        if rem:
                            ei.remove(sorted(rem))
                        edges = (edges | ins) - rem
                    elif what < 0.65:
                        toggle_root(rng, ri, roots, n)
                    jump = int(rng.choice([1, 1, 2, 3, 6]))  # epochs that bring nothing
                    for e in range(t, t + jump):
                        hist[e] = (set(edges), set(roots))
                    t += jump
                    ei.advance_to(t)
                    ri.advance_to(t)
            if rng.random() < 0.6:
                eng.wait(v, timeout=T)
                rows = _rows(v)
                ref = _graph_reference(kind, edges, roots)
                assert ref is None or rows == ref, (kind, seed, "lazy" if lazy else "eager", t)
                out.append((t, rows, _live(eng, {"p"})))
        eng.wait(v, timeout=T)
        stop.set()
        if th is not None:
            th.join(T)
        assert not errors, errors
        ats = [_rows(v, at=e) for e in range(t)]
        for e in range(t):
            ref = _graph_reference(kind, *hist[e])
            assert ref is None or ats[e] == ref, (kind, seed, "lazy" if lazy else "eager", "at", e)
        ei.close()
        ri.close()
        changes = _flat(follower)
    # the follow stream, accumulated through each epoch, is that epoch's contents
    acc = Counter()
    by_time = {}
    for row, d in changes:
        by_time.setdefault(row[-1], []).append((row[:-1], d))
    for e in range(t):
        for row, d in by_time.get(e, []):
            acc[row] += d
        assert sorted(Counter({r: m for r, m in acc.items() if m}).elements()) == ats[e], (kind, seed, "follow", e)
    out.append(("at", ats))
    out.append(("follow", changes))
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_graph_loops_under_bursts_and_reader_thread(monkeypatch, kind, workers):
    for k in range(3):
        seed = 40_400 + 10 * KINDS.index(kind) + workers + 100 * k
        lazy = _run_graph(monkeypatch, True, kind, seed, workers, reader=k == 0)
        eager = _run_graph(monkeypatch, False, kind, seed, workers, reader=False)
        assert lazy == eager, (kind, seed)


# == crafted: a min's pending work at later rounds while epochs move =====================================

def _pending_run(monkeypatch, lazy, workers, nested):
    """A path 0 -> 1 -> ... -> 15 with a shortcut 0 -> 15 (and its reverse, for scc): removing the
    shortcut moves node 15's distance from 1 to 15, work the min holds for later rounds; the removal
    and a dozen epochs without data reach the loop as one batch, and so does a re-insertion."""
    _set_lazy(monkeypatch, lazy)
    path = [(i, i + 1) for i in range(15)]
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"], rows=path + [(0, 15), (15, 0)])
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            e, r = df.input("e"), df.input("r")
            v = (graphs.scc(e) if nested else graphs.bfs(e, r)).view("v", history=100)
        for s in (ei, ri):
            s.advance_to(1)
        eng.wait(v, timeout=T)
        states = {0: path + [(0, 15), (15, 0)]}
        live = []
        t = 1
        for change in ([(0, 15)], [(15, 0)], [(0, 15), (15, 0)], [(7, 8)]):
            with held_scheduler():
                present = set(states[t - 1])
                rem = [x for x in change if x in present]
                ins = [x for x in change if x not in present]
                if rem:
                    ei.remove(rem)
                if ins:
                    ei.insert(ins)
                now = sorted((present - set(rem)) | set(ins))
                for _ in range(12):
                    states[t] = now
                    t += 1
                    for s in (ei, ri):
                        s.advance_to(t)
            eng.wait(v, timeout=T)
            live.append(_live(eng, {"p"}))
            for _ in range(3):  # then epochs without data, one at a time
                states[t] = now
                t += 1
                for s in (ei, ri):
                    s.advance_to(t)
                eng.wait(v, timeout=T)
                live.append(_live(eng, {"p"}))
        answers = [_rows(v, at=e) for e in range(t)]
    for e, es in states.items():
        g = nx.DiGraph(es)
        if nested:
            comp = {n: i for i, c in enumerate(nx.strongly_connected_components(g)) for n in c}
            want = sorted((a, b) for a, b in es if comp[a] == comp[b])
        else:
            want = sorted(nx.single_source_shortest_path_length(g, 0).items())
        assert answers[e] == want, ("lazy" if lazy else "eager", "epoch", e)
    return answers, live


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pending_work_at_later_rounds_while_epochs_move(monkeypatch, workers, nested):
    assert _pending_run(monkeypatch, True, workers, nested) == _pending_run(monkeypatch, False, workers, nested)


# == inputs closed under a loop ===========================================================================

@contextmanager
def _loop_engine(workers, kind, history):
    """An engine with empty edges ``e``, roots ``r`` = {0} and a dataflow ``p`` whose view ``v`` holds
    ``kind`` (scc, bfs or reach) over them."""
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"])
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            e, r = df.input("e"), df.input("r")
            v = (graphs.scc(e) if kind == "scc" else graphs.bfs(e, r) if kind == "bfs"
                 else graphs.reachable(e, r)).view("v", history=history)
        yield eng, ei, ri, v


def _close_run(monkeypatch, lazy, workers, close_all, kind="bfs", seed=0):
    _set_lazy(monkeypatch, lazy)
    rng = np.random.default_rng(seed)
    out = []
    with _loop_engine(workers, kind, 100) as (eng, ei, ri, v):
        edges, roots = set(), {0}
        for t in range(1, 6):
            ins = {(int(rng.integers(8)), int(rng.integers(8))) for _ in range(4)} - edges
            rem = {x for x in sorted(edges) if rng.random() < 0.3}
            if ins:
                ei.insert(sorted(ins))
            if rem:
                ei.remove(sorted(rem))
            edges = (edges | ins) - rem
            ei.advance_to(t)
            ri.advance_to(t)
        eng.wait(v, timeout=T)
        out.append(_live(eng, {"p"}))
        ei.close()  # the loop holds no data at this point
        if close_all:
            ri.close()
            eng.wait(v, timeout=T)
            out.append((_rows(v), _live(eng, {"p"})))
            return out
        t = 5
        for step in range(8):  # roots keep advancing: epochs without data, then roots come and go
            if step in (3, 6):
                x = int(rng.integers(8))
                if x in roots:
                    ri.remove([(x,)])
                    roots.discard(x)
                else:
                    ri.insert([(x,)])
                    roots.add(x)
            t += int(rng.integers(1, 4))
            ri.advance_to(t)
            eng.wait(v, timeout=T)
            g = nx.DiGraph(sorted(edges))
            g.add_nodes_from(roots)
            want = {}
            for r0 in roots:
                for n, d in nx.single_source_shortest_path_length(g, r0).items():
                    want[n] = min(want.get(n, d), d)
            assert _rows(v) == sorted(want.items()), ("lazy" if lazy else "eager", t)
            out.append((t, _rows(v), _live(eng, {"p"})))
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_edges_closed_while_roots_advance(monkeypatch, workers):
    """The edges input closes while the loop holds no data (the join lets go of the distances' trace
    once the edges' side is closed, on a step or a follow_epoch); the roots go on through epochs without
    data, then roots come and go. Answers and live records as eager steps give."""
    for seed in range(2):
        assert _close_run(monkeypatch, True, workers, False, seed=seed) == \
            _close_run(monkeypatch, False, workers, False, seed=seed)


@pytest.mark.parametrize("kind", ["bfs", "scc"])
def test_closing_every_input_leaves_loop_traces_as_eager_steps_would(monkeypatch, kind):
    """Every input of a loop closed (the loop idle, after epochs with retractions): answers and the live
    records of every arrangement left agree with eager steps. (Before session 40's fix the lazy traces kept
    the compaction of (5, 0) where eager ones reached (5, 1) on their way to the empty frontier: scc, seed
    1, 10 live records in the outer distinct's arrangement against 0.)"""
    for seed in range(2):
        lazy = _close_run(monkeypatch, True, 2, True, kind, seed)
        eager = _close_run(monkeypatch, False, 2, True, kind, seed)
        assert lazy[0] == eager[0] and lazy[1][0] == eager[1][0]  # before the close, and the answers
        assert lazy == eager, (kind, seed)


# == Datalog: recursion, negation, aggregates, recursive min, goals ======================================

def _datalog_run(monkeypatch, lazy, text, seed, workers, epochs=10):
    _set_lazy(monkeypatch, lazy)
    from kpgnb.datalog.parser import parse
    derived = {}
    for rule in parse(text).rules:
        derived.setdefault(rule.head.pred, rule.head.arity)
    rng = np.random.default_rng(seed)
    init, steps = DR.update_stream(seed, epochs)
    out = []
    with kp.Engine(workers=workers) as eng:
        ses, state = DR.start_inputs(eng, init)
        prog = eng.datalog(text, name="dl")
        goals = DR.random_goals(prog, derived, rng, 0.6)
        epoch = 1
        for k, step in enumerate(steps):
            DR.ask_and_retract(goals, rng)  # (also in epochs that bring no data)
            if rng.random() < 0.6:  # else an epoch without data
                DR.apply_step(ses, state, step)
            epoch = DR.advance_all(ses, epoch + int(rng.choice([1, 1, 2, 4])))
            if rng.random() < 0.6:
                want = DR.evaluate(text, state)
                rec = {}
                for pred in sorted(derived):
                    eng.wait(prog[pred], timeout=T)
                    got = DR.rows_of(prog[pred])
                    assert DR.same_rows(got, want[pred]), (seed, pred, epoch, DR.diff_rows(got, want[pred]))
                    rec[pred] = sorted(map(repr, got))
                for g, pred, args, asked in goals:
                    eng.wait(g.view, timeout=T)
                    got = DR.rows_of(g.view)
                    w = DR.goal_rows(want[pred], args, asked)
                    assert DR.same_rows(got, w), (seed, "goal", pred, args, epoch, DR.diff_rows(got, w))
                    rec[(pred, args)] = sorted(map(repr, got))
                live = sorted((a["name"], str(a["dataflow"]), a["live"]) for a in eng.arrangements(live=True)
                              if a["kind"] != "input")
                out.append((epoch, rec, live))
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_datalog_with_goals_over_epochs_without_data(monkeypatch, workers):
    """A fixed program (transitive closure, reachability with negation, recursive min, a recursive min
    label over a second relation, a count over a recursive relation) and random stratified programs of
    tests/datalog_reference.py, with goals on their relations asked and retracted, also in epochs that
    bring no data, several epochs sealed at once."""
    texts = [(DR.GRAPH_PROGRAM, 4000 + workers)] + [(DR.random_program(s)[0], s) for s in (5 * workers, 5 * workers + 1, 5 * workers + 2, 5 * workers + 3)]
    for text, seed in texts:
        lazy = _datalog_run(monkeypatch, True, text, seed, workers)
        eager = _datalog_run(monkeypatch, False, text, seed, workers)
        assert lazy == eager, (seed, text)


# == a late dataflow over a loop's export, dropped and installed again ===================================

def _late_run(monkeypatch, lazy, workers):
    """p: bfs over (e, r), exported by node. q, installed after epochs without data: the nodes reachable
    from p's nodes at distance <= 2 along e, a loop over the import; dropped after more empty epochs and
    installed again under the same name, each time checked at every epoch it has seen."""
    _set_lazy(monkeypatch, lazy)
    rng = np.random.default_rng(4040 + workers)
    out = []
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"], rows=[(0, 1), (1, 2), (2, 3)])
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            graphs.bfs(df.input("e"), df.input("r")).arrange_by("node").export("D")
        edges, t, hist = {(0, 1), (1, 2), (2, 3)}, 0, {}

        def advance(k, change=None):
            nonlocal t, edges
            if change:
                ins, rem = change
                if ins:
                    ei.insert(sorted(ins))
                if rem:
                    ei.remove(sorted(rem))
                edges = (edges | set(ins)) - set(rem)
            for e in range(t, t + k):
                hist[e] = set(edges)
            t += k
            ei.advance_to(t)
            ri.advance_to(t)

        def want(e):
            g = nx.DiGraph(sorted(hist[e]))
            g.add_node(0)
            near = {n for n, d in nx.single_source_shortest_path_length(g, 0).items() if d <= 2}
            return sorted((n,) for n in near | {m for x in near if x in g for m in g.successors(x)})

        def install():
            with eng.dataflow("q") as df:
                near = df.use("D").as_collection().filter(lambda dist: dist <= 2).select("node")
                e = df.input("e")
                return near.iterate(lambda x: x.concat(near.enter(x.scope).join(e.enter(x.scope), left_on="node", right_on="src")
                                                       .map(lambda dst: {"node": dst})).distinct()).view("w", history=100)
        advance(3)
        for round_ in range(3):
            advance(int(rng.integers(2, 6)))  # epochs without data before the install
            born = t
            w = install()
            for k in range(6):
                if k % 2:
                    x = (int(rng.integers(6)), int(rng.integers(6)))
                    advance(int(rng.integers(1, 4)), ([x], []) if x not in edges else ([], [x]))
                else:
                    advance(int(rng.integers(1, 4)))
                eng.wait(w, timeout=T)
                out.append((t, _rows(w), _live(eng, {"p", "q"})))
            for e in range(born - 1, t):
                assert _rows(w, at=e) == want(e), ("lazy" if lazy else "eager", round_, e)
            eng.drop("q")
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_late_dataflow_over_a_loop_export_dropped_and_installed_again(monkeypatch, workers):
    assert _late_run(monkeypatch, True, workers) == _late_run(monkeypatch, False, workers)


# == inputs advanced at different paces ===================================================================

def _lag_run(monkeypatch, lazy, kind, seed, workers):
    """Edges advance every step (by 0 to 3 epochs); the roots lag behind them and catch up now and then,
    so the loop's joins see one input's frontier epochs ahead of the other's. Answers at every wait and at
    every epoch (at=), and the live records once both inputs are level again."""
    _set_lazy(monkeypatch, lazy)
    rng = np.random.default_rng(seed)
    out = []
    with _loop_engine(workers, kind, 500) as (eng, ei, ri, v):
        edges, roots, te, tr = set(), {0}, 0, 0
        e_hist, r_hist = {}, {}
        pending_roots = set(roots)
        for _ in range(20):
            if rng.random() < 0.5:
                ins = {(int(rng.integers(10)), int(rng.integers(10))) for _ in range(2)} - edges
                rem = {x for x in sorted(edges) if rng.random() < 0.15}
                if ins:
                    ei.insert(sorted(ins))
                if rem:
                    ei.remove(sorted(rem))
                edges = (edges | ins) - rem
            if rng.random() < 0.3:
                x = int(rng.integers(10))
                if x not in pending_roots:
                    ri.insert([(x,)])
                    pending_roots.add(x)
            jump = int(rng.integers(0, 4))
            for t in range(te, te + jump):
                e_hist[t] = set(edges)
            te += jump
            ei.advance_to(te)
            new_tr = te if rng.random() < 0.4 else max(tr, te - 2) if rng.random() < 0.3 else tr
            for t in range(tr, new_tr):
                r_hist[t] = set(pending_roots)
            tr = new_tr
            ri.advance_to(tr)
            if rng.random() < 0.5:
                eng.wait(v, timeout=T)
                out.append((tr, _rows(v)))
        for t in range(tr, te):
            r_hist[t] = set(pending_roots)
        ri.advance_to(te)
        eng.wait(v, timeout=T)
        out.append(_live(eng, {"p"}))
        for t in range(te):
            g = nx.DiGraph(sorted(e_hist[t]))
            if kind == "scc":
                comp = {n: i for i, c in enumerate(nx.strongly_connected_components(g)) for n in c}
                want = sorted((a, b) for a, b in e_hist[t] if comp[a] == comp[b])
            else:
                g.add_nodes_from(r_hist[t])
                dist = {}
                for r0 in r_hist[t]:
                    for n, d in nx.single_source_shortest_path_length(g, r0).items():
                        dist[n] = min(dist.get(n, d), d)
                want = sorted(dist.items()) if kind == "bfs" else sorted((n,) for n in dist)
            assert _rows(v, at=t) == want, (kind, seed, "lazy" if lazy else "eager", "epoch", t)
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["bfs", "reach", "scc"])
def test_inputs_advanced_at_different_paces(monkeypatch, kind, workers):
    for k in range(3):
        seed = 40_700 + 10 * workers + k
        assert _lag_run(monkeypatch, True, kind, seed, workers) == _lag_run(monkeypatch, False, kind, seed, workers)
