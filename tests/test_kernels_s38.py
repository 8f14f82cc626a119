"""Session 38: a merge advances times inline and re-normalizes a key's rows only where advancing moved a
time. Checked against the definition: both batches' rows, each time advanced to rep_F(t) (the meet over
the frontier's elements of the join with t), formed from scratch. And the scheduler running dataflows
after the producers of what they import (``Scheduler._run_order``)."""
import numpy as np
import pytest

import kpgnb as kp

from kpgnb.engine import batch as B


def _formed(rng, n, kk, kv, d, pool):
    keys = pool[rng.integers(0, len(pool), (kk, n))]
    vals = pool[rng.integers(0, len(pool), (kv, n))]
    times = rng.integers(0, 4, (n, d)).astype(np.int64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 3], np.int64), n)
    return B.form_parts([(keys, vals, times, diffs)], 1)[0]


def _rows(arrays):
    kh, keys, koff, vals, times, diffs = arrays
    per = np.diff(koff)
    return np.repeat(keys, per, axis=1), vals, times, diffs


def _expected(a, b, frontier):
    parts = []
    for arrays in (a, b):
        keys, vals, times, diffs = _rows(arrays)
        if len(frontier):
            times = np.min(np.maximum(times[:, None, :], frontier[None, :, :]), axis=1)
        parts.append((keys, vals, np.ascontiguousarray(times), diffs))
    return B.form_parts(parts, 1)[0]


@pytest.mark.parametrize("seed", range(60))
def test_a_merge_equals_its_rows_advanced_and_formed(seed):
    rng = np.random.default_rng(seed)
    kk, kv, d = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 4))
    pool = np.arange(int(rng.integers(2, 40)), dtype=np.int64)  # few keys: rows of one key in both batches
    a = _formed(rng, int(rng.integers(0, 300)), kk, kv, d, pool)
    b = _formed(rng, int(rng.integers(0, 300)), kk, kv, d, pool)
    frontier = rng.integers(0, 4, (int(rng.integers(0, 4)), d)).astype(np.int64)
    m = B.Merger(a, b, frontier if len(frontier) else None)
    fuel = int(rng.integers(1, 50))
    while not m.work(fuel):  # resumed in small steps, as a spine's maintenance does
        pass
    got, want = m.result, _expected(a, b, frontier)
    for x, y in zip(got, want):
        assert np.array_equal(x, y)


def test_a_merge_under_a_loop_frontier_keeps_every_round_apart():
    """Inside a loop the frontier {(e, i), (e + 1, 0)} leaves times (e, j < i) as they are (they matter to
    the next epoch): nothing moves, nothing consolidates, and the merge is the plain union."""
    n = 1000
    keys = np.arange(n, dtype=np.int64).reshape(1, n) % 97
    none = np.zeros((0, n), np.int64)
    one = np.ones(n, np.int64)
    a = B.form_parts([(keys, none, np.tile(np.array([[0, 3]], np.int64), (n, 1)), one)], 1)[0]
    b = B.form_parts([(keys, none, np.tile(np.array([[0, 7]], np.int64), (n, 1)), one)], 1)[0]
    m = B.Merger(a, b, np.array([[0, 9], [1, 0]], np.int64))
    m.work(None)
    kh, k, koff, vals, times, diffs = m.result
    assert len(diffs) == 2 * 97 and set(map(tuple, times.tolist())) == {(0, 3), (0, 7)}
    assert diffs.sum() == 2 * n


@pytest.mark.parametrize("seed", range(60))
def test_a_spine_merge_advances_exactly_where_the_frontier_moves_a_time(seed):
    """``batch.advancing`` hands a merge no frontier where it moves no time of either batch: the merged
    batch still equals both batches' rows advanced to ``since`` and formed, whether the frontier moves
    times of both batches, of one, or of none, and it is handed on exactly where some time moves."""
    from kpgnb.engine.lattice import Antichain
    rng = np.random.default_rng(1000 + seed)
    kk, kv, d = int(rng.integers(1, 3)), int(rng.integers(0, 2)), int(rng.integers(1, 4))
    pool = np.arange(int(rng.integers(2, 30)), dtype=np.int64)
    arrays = [_formed(rng, int(rng.integers(0, 200)), kk, kv, d, pool) for _ in range(2)]
    older, newer = (B.Batch(*a, Antichain([(0,) * d]), Antichain()) for a in arrays)
    since = Antichain([tuple(int(x) for x in rng.integers(0, 4, d)) for _ in range(int(rng.integers(1, 4)))])
    f = since.matrix(d)
    got = B.merged(older, newer, since)
    want = _expected(arrays[0], arrays[1], f)
    for x, y in zip(got.arrays, want):
        assert np.array_equal(x, y)
    moves = any(len(b) and (b.times < f.min(axis=0)).any() for b in (older, newer))
    assert (B.advancing(since, older, newer) is not None) == moves


def _runs(eng, graphs: dict, inputs, rows):
    """How many times each of ``graphs`` (graph -> name) ran with work while ``rows`` went into the first
    of ``inputs`` one per epoch, every input advancing with it, each epoch waited for."""
    from kpgnb.engine import dataflow as D
    counts = dict.fromkeys(graphs.values(), 0)
    orig = D.Graph.run

    def run(self, rt):
        ran = orig(self, rt)
        if ran and self in graphs:
            counts[graphs[self]] += 1
        return ran
    D.Graph.run = run
    try:
        for row in rows:
            inputs[0].insert([row])
            for inp in inputs:
                inp.advance_to(inp.epoch + 1)
            eng.wait()
    finally:
        D.Graph.run = orig
    return counts


@pytest.mark.parametrize("workers", [1, 2])
def test_an_update_runs_an_index_and_its_reader_once_each(workers):
    """The scheduler runs a dataflow after the ones whose exports it imports: an update to an index runs
    the index, then its reader, once each, also when the reader has an input of its own that advances with
    the update (as BFS's roots do): run before the index, it would run again for the same epoch. Also when
    the producer is a replaced index that the reader still reads (retired, so listed after the live ones)."""
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 1)])
        r = eng.input("r", ["a", "b"], rows=[(2, 2)])
        e.advance_to(1), r.advance_to(1)
        with eng.dataflow("index") as df:
            df.input("e").arrange_by("a").export("e_by_a")
        with eng.dataflow("reader") as df:
            v = df.use("e_by_a").as_collection().concat(df.input("r")).count(by="a").view("v")
        eng.wait(v)
        sched = eng._scheduler
        index, reader = sched.dataflows["index"].graph, sched.dataflows["reader"].graph
        counts = _runs(eng, {index: "index", reader: "reader"}, [e, r], [(100 + i, i) for i in range(40)])
        # (the scheduler may take the first seal alone, if the OS stops the client between its two
        # advances: then the reader runs twice for that epoch; run before its producer, it does every time)
        assert counts["index"] == 40 and 40 <= counts["reader"] <= 50, counts
        assert len(v.to_pandas()) == 42
        with eng.dataflow("index", replace=True) as df:  # the reader keeps the old index, now retired
            df.input("e").arrange_by("a").export("e_by_a")
        eng.wait(v)
        assert [d.graph for d in sched.retired] == [index]
        counts = _runs(eng, {index: "old index", reader: "reader"}, [e, r], [(500 + i, i) for i in range(30)])
        assert counts["old index"] == 30 and 30 <= counts["reader"] <= 38, counts
        assert len(v.to_pandas()) == 72


def test_run_order_puts_producers_first_in_long_chains():
    """``_run_order`` on a chain of 3,000 dataflows listed readers first (no recursion limit), and with a
    retired producer listed after its reader."""
    from types import SimpleNamespace as NS

    from kpgnb.engine.scheduler import Scheduler
    n = 3000
    chain = [NS(name=f"d{i}", exports=[f"e{i}"], uses={f"e{i - 1}"} if i else set()) for i in range(n)]
    s = Scheduler.__new__(Scheduler)
    s.dataflows = {d.name: d for d in reversed(chain)}
    s.retired = []
    s._order, s._commands = ((), []), 0
    assert [d.name for d in s._run_order()] == [d.name for d in chain]
    old = NS(name="old", exports=["x"], uses=set())
    s.dataflows = {"r": NS(name="r", exports=[], uses={"x", "e0"}), "d0": chain[0]}
    s.retired = [old]
    names = [d.name for d in s._run_order()]
    assert sorted(names) == ["d0", "old", "r"] and names[-1] == "r"
