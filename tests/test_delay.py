"""``Collection.delay(fn)`` holds each row of a loop's collection back to the round ``fn`` gives it. In a
loop whose fixed point does not depend on the order rows arrive in (a monotone min) the answer is the
same, epoch after epoch, through insertions, removals and weight changes: checked against networkx's
Dijkstra at W = 1, 2, 3 and through ``at=`` reads, with the same loop without the delay beside it; that
rows are held back to their round; and that bad functions and a delay outside a loop are refused."""
from __future__ import annotations

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.errors import SchemaError
from kpgnb.graphs import bit_length_rounds
from reference import shortest_distances


def _sssp(edges, roots, delay: bool):
    """Weighted distances (node, dist) from the roots along edges (src, dst, w)."""
    start = roots.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

    def step(d):
        cand = d.join(edges, left_on="node", right_on="src").map(
            lambda dst, dist, w: {"node": dst, "dist": dist + w})
        if delay:
            cand = cand.delay(lambda dist: bit_length_rounds(dist))
        return cand.concat(start).min(by="node", col="dist")
    return start.iterate(step)


def _rows(view, at=None) -> list:
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_delayed_min_loop_equals_dijkstra_through_changes(workers):
    rng = np.random.default_rng(40 + workers)
    n = 30
    edges = {}
    while len(edges) < 70:
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges[(u, v)] = int(rng.integers(1, 9))
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst", "w"], key="src", rows=[(u, v, w) for (u, v), w in edges.items()])
        r = eng.input("r", ["node"], rows=[(0,)])
        with eng.dataflow("q") as df:
            fast = _sssp(df.input("e"), df.input("r"), delay=True).view("fast", history=20)
            slow = _sssp(df.input("e"), df.input("r"), delay=False).view("slow", history=20)
        seen = []
        for t in range(1, 10):
            if t > 1:  # remove an edge, re-weigh one, add one
                ups, diffs = [], []
                for _ in range(3):
                    (u, v), w = sorted(edges.items())[int(rng.integers(len(edges)))]
                    kind = int(rng.integers(3))
                    ups.append((u, v, w))
                    diffs.append(-1)
                    del edges[(u, v)]
                    if kind == 1:
                        edges[(u, v)] = int(rng.integers(1, 9))
                        ups.append((u, v, edges[(u, v)]))
                        diffs.append(1)
                    elif kind == 2:
                        a, b = (int(x) for x in rng.integers(0, n, 2))
                        if a != b and (a, b) not in edges:
                            edges[(a, b)] = int(rng.integers(1, 9))
                            ups.append((a, b, edges[(a, b)]))
                            diffs.append(1)
                e.update(ups, diffs)
            e.advance_to(t)
            r.advance_to(t)
            want = shortest_distances(edges, [0], weights=True)
            for v in (fast, slow):
                eng.wait(v, timeout=60)
                assert _rows(v) == want, (v.name, t)
            seen.append((t, want))
        for t, want in seen:
            assert _rows(fast, at=t - 1) == want, t


def test_delay_holds_rows_back():
    """Candidates of distance 40 arrive at round 6 (their bit length), not at round 1: a min then sees the
    path of 12 short hops (distance 12, bit length 4) first, and the direct edge's candidate arrives beaten.
    The loop's answer is the same either way."""
    chain = [(i, i + 1, 1) for i in range(12)]
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=chain + [(0, 12, 40)])
        r = eng.input("r", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("q") as df:
            rounds = []
            start = df.input("r").map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})

            def step(d):
                cand = d.join(df.input("e"), left_on="node", right_on="src").map(
                    lambda dst, dist, w: {"node": dst, "dist": dist + w})
                held = cand.delay(lambda dist: bit_length_rounds(dist))
                held = held.inspect(lambda cols, times, diffs: rounds.extend(
                    zip(cols["node"].tolist(), cols["dist"].tolist(), times[:, -1].tolist())))
                return held.concat(start).min(by="node", col="dist")
            v = start.iterate(step).view("v")
        eng.wait(v)
        assert dict(_rows(v))[12] == 12
        assert (12, 40, 6) in rounds  # the direct edge's candidate (40: six bits) came at round 6
        assert all(rd >= int(d).bit_length() for _, d, rd in rounds)  # no row before its round


def test_bad_delay_functions_are_refused_and_leave_the_engine_intact():
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst", "w"], rows=[(0, 1, 1)])
        r = eng.input("r", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("good") as df:
            good = _sssp(df.input("e"), df.input("r"), delay=True).view("good")
        eng.wait(good)
        with pytest.raises(SchemaError, match="top level"):
            with eng.dataflow("bad") as df:
                df.input("e").delay(lambda w: w)
        with eng.dataflow("bad2") as df:
            start = df.input("r").map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})
            v = start.iterate(lambda d: d.delay(lambda dist: dist.astype(float)).concat(start)
                              .min(by="node", col="dist")).view("v")
        with pytest.raises(kp.KpgnbError, match="integer array"):
            eng.wait(v, timeout=60)
        with eng.dataflow("bad3") as df:  # a round the loop could not count past without wrapping
            start = df.input("r").map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})
            v = start.iterate(lambda d: d.delay(lambda dist: np.full(len(dist), 2 ** 63 - 1)).concat(start)
                              .min(by="node", col="dist")).view("v")
        with pytest.raises(kp.KpgnbError, match="below 2\\*\\*62"):
            eng.wait(v, timeout=60)
        assert "bad" not in eng.snapshot().dataflows
        e.insert([(1, 2, 3)])
        e.advance_to(2)
        r.advance_to(2)
        eng.wait(good, timeout=60)
        assert _rows(good) == [(0, 0), (1, 1), (2, 4)]


def test_bit_length_rounds_is_each_values_bit_length():
    """The one-pass kernel (engine/kernels/times.py bit_lengths) against Python's int.bit_length, 0 for
    values <= 0, over int64 extremes, every power of two and its neighbours, random values, and the other
    integer dtypes; non-integer columns enter at round 0."""
    rng = np.random.default_rng(43)
    powers = np.array([1 << k for k in range(63)], np.int64)
    x = np.concatenate([powers, powers - 1, -powers, rng.integers(-(1 << 63), (1 << 63) - 1, 5000, dtype=np.int64),
                        np.array([0, -1, (1 << 63) - 1, -(1 << 63)], np.int64)])
    assert bit_length_rounds(x).tolist() == [max(int(v), 0).bit_length() for v in x]
    for dt in (np.int8, np.int16, np.int32, np.uint8, np.uint32):
        y = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, 300, dtype=dt, endpoint=True)[::2]
        assert bit_length_rounds(y).tolist() == [max(int(v), 0).bit_length() for v in y]
    assert bit_length_rounds(np.array([1.5, 9.0])).tolist() == [0, 0]
    assert bit_length_rounds(np.zeros(0, np.int64)).dtype == np.int64
