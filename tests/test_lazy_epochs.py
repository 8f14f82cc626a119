"""A loop's arrange, join and reduce step on a move to another epoch only when work is due: otherwise they
let their inputs compact (``Operator.follow_epoch``) and their traces' uppers wait for their next step.
Checked against eager stepping (``lazy_rounds`` off): the same answers at every epoch, also read back
with ``at=``, and the same live (logically compacted) records in every loop trace, on random streams
with epochs that bring nothing, several epochs advanced at once, retractions, W = 1, 2, 3. Once every input
is closed, the loop's traces are let go of."""
from __future__ import annotations

import gc
from contextlib import contextmanager

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs
from kpgnb.engine.batcher import Batcher
from kpgnb.engine.operators.arrange import ArrangeOp
from kpgnb.engine.operators.join import JoinOp
from kpgnb.engine.operators.reduce import ReduceOp
from reference import random_edge_edits

LAZY = (ArrangeOp, JoinOp, ReduceOp)


def _program(kind, df):
    e = df.input("e")
    r = df.input("r")
    if kind == "reach":
        return graphs.reachable(e, r)
    if kind == "bfs":
        return graphs.bfs(e, r)
    return graphs.scc(e)  # loops nested in a loop


def _run(monkeypatch, lazy: bool, kind: str, seed: int, workers: int):
    for c in LAZY:
        monkeypatch.setattr(c, "lazy_rounds", lazy)
    rng = np.random.default_rng(seed)
    n = 16
    edges = {}
    out = []
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"])
        ri = eng.input("r", ["node"], rows=[(0,)])
        pad = eng.input("pad", ["x"])  # an input no dataflow reads, advanced with the others
        with eng.dataflow("p") as df:
            v = _program(kind, df).view("v", history=100)
        t = 0
        for _ in range(14):
            what = rng.integers(4)
            if what:  # epochs with updates; what == 0: an epoch that brings nothing to the loop
                ei.update(*random_edge_edits(rng, edges, n, int(rng.integers(1, 5)), remove=0.35))
            if rng.random() < 0.3:
                pad.update([(t,)], [1])
            t += int(rng.integers(1, 3))  # sometimes two epochs at once
            for i in (ei, ri, pad):
                i.advance_to(t)
            if rng.random() < 0.7:
                eng.wait(v, timeout=120)
                rows = sorted(map(tuple, v.to_pandas().values.tolist()))
                live = sorted((a["name"], a["live"]) for a in eng.arrangements(live=True) if a["dataflow"] == "p")
                out.append((t, rows, live, _reference(kind, dict(edges), n)))
        eng.wait(v, timeout=120)
        # every epoch read again through at=: the view's history holds each one as it was
        back = [sorted(map(tuple, v.to_pandas(at=t - 1).values.tolist())) for t, *_ in out]
    assert back == [rows for _, rows, *_ in out]
    return out


@contextmanager
def _bfs(workers: int, edges: list):
    """An engine with a BFS dataflow ``p`` over ``edges`` from root 0, answered at epoch 0."""
    with kp.Engine(workers=workers) as eng:
        ei = eng.input("e", ["src", "dst"], rows=edges)
        ri = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("p") as df:
            v = graphs.bfs(df.input("e"), df.input("r")).view("v")
        ei.advance_to(1)
        ri.advance_to(1)
        eng.wait(v)
        yield eng, ei, ri, v


def _reference(kind, edges, n):
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    if kind == "reach":
        return sorted((x,) for x in nx.descendants(g, 0) | {0})
    if kind == "bfs":
        return sorted(nx.single_source_shortest_path_length(g, 0).items())
    return None


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["reach", "bfs", "scc"])
def test_lazy_epochs_match_eager_stepping(monkeypatch, kind, workers):
    for seed in range(3):
        lazy = _run(monkeypatch, True, kind, seed, workers)
        eager = _run(monkeypatch, False, kind, seed, workers)
        assert [o[:3] for o in lazy] == [o[:3] for o in eager], (kind, seed)
        for t, rows, _, ref in lazy:
            if ref is not None:
                assert rows == ref, (kind, seed, t)


def test_epochs_without_updates_do_not_step_the_loop():
    """Epochs that bring the loop nothing cost no step of its arrangements, join or reduce (eagerly,
    each stepped once per epoch); the loop's traces still compact to every epoch, and the next update
    is answered right."""
    with _bfs(2, [(0, 1), (1, 2), (2, 3)]) as (eng, ei, ri, v):
        def loop_steps():
            return {o["operator"]: o["steps"] for o in eng.operator_stats("p")
                    if o["operator"].split(": ")[1].split("#")[0] in ("arrange", "join", "min")}

        def loop_logical():
            return {a["name"]: a["logical"] for a in eng.arrangements() if a["dataflow"] == "p" and a["logical"]}

        before = loop_steps()
        for t in range(2, 22):
            ei.advance_to(t)
            ri.advance_to(t)
            eng.wait(v)
        after = loop_steps()
        inner = [k for k in before if after[k] != before[k]]
        # only the arrangement outside the loop (the view's, at depth 1) steps once per epoch
        assert len(inner) == 1 and after[inner[0]] - before[inner[0]] == 20, (before, after)
        # the loop's traces (times of depth 2) are compacted to the last epoch
        loops = {n: f for n, f in loop_logical().items() if len(f.elements[0]) == 2}
        assert len(loops) >= 3 and all(f.elements[0][0] == 21 for f in loops.values()), loops
        ei.update([(3, 4), (0, 1)], [1, -1])
        ei.advance_to(22)
        ri.advance_to(22)
        eng.wait(v)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == [(0, 0)]
        ei.update([(0, 2)], [1])
        ei.advance_to(23)
        ri.advance_to(23)
        eng.wait(v)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == [(0, 0), (2, 1), (3, 2), (4, 3)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_closed_loop_lets_go_of_its_traces(workers):
    """Once every input is closed, nothing inside a loop is read again: its reduce lets go of its input
    and output traces (as a join lets go of a side whose other side closed), so the loop's arrangements
    are freed, while the view keeps the answer readable."""
    with _bfs(workers, [(0, 1), (1, 2), (2, 0), (2, 3)]) as (eng, ei, ri, v):
        def loop_traces():
            gc.collect()
            return [a["name"] for a in eng.arrangements() if a["dataflow"] == "p" and a["logical"]
                    and len(a["logical"].elements[0]) == 2]
        assert len(loop_traces()) >= 3
        ei.update([(3, 4)], [1])
        ei.close()
        ri.close()
        eng.wait(v)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
        assert loop_traces() == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_loop_arrangement_seals_only_what_is_due(monkeypatch, workers):
    """A loop's arrange that steps for the messages it received, with nothing buffered that the frontier
    has passed, does not seal: a seal would mint an empty batch into its trace (maintained and published)
    and the next step's seal covers the span. So inside the loop every seal has buffered rows before its
    upper, while single-edge changes are still answered right (before, the step that received a round's
    rows also sealed the span before them, empty)."""
    seals = []
    real = Batcher.seal

    def seal(self, lower, upper, run=None):
        due = bool(self.held.elements) and not upper.less_equal(self.held)  # buffered rows before upper
        seals.append((self.depth, bool(upper.elements), due))
        return real(self, lower, upper) if run is None else real(self, lower, upper, run)
    monkeypatch.setattr(Batcher, "seal", seal)
    rng = np.random.default_rng(5)
    edges = {(int(a), int(b)) for a, b in rng.integers(0, 12, (30, 2))}
    with _bfs(workers, sorted(edges)) as (eng, ei, ri, v):
        del seals[:]
        for t in range(2, 30):
            k = (int(rng.integers(12)), int(rng.integers(12)))
            if k in edges:
                edges.discard(k)
                ei.update([k], [-1])
            else:
                edges.add(k)
                ei.update([k], [1])
            ei.advance_to(t)
            ri.advance_to(t)
            eng.wait(v)
            assert sorted(map(tuple, v.to_pandas().values.tolist())) == _reference("bfs", edges, 12), t
        loop = [due for depth, open_, due in seals if depth == 2 and open_]
        assert loop and all(loop), [i for i, due in enumerate(loop) if not due]
