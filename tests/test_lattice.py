"""Time lattice and frontier algebra, checked by brute force over small grids."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpgnb.engine.lattice import (Antichain, antichain_of, glb, in_advance_mask, leq, lub, rep, rep_matrix)

GRID = {1: 6, 2: 5, 3: 3}


def grid(depth):
    return list(itertools.product(range(GRID[depth]), repeat=depth))


def frontiers(depth, count=60, seed=0):
    """Random antichains over the grid, plus every single-element one."""
    rng = np.random.default_rng(seed)
    pts = grid(depth)
    out = [Antichain([p]) for p in pts]
    for _ in range(count):
        k = int(rng.integers(1, 4))
        out.append(Antichain([pts[int(i)] for i in rng.integers(0, len(pts), k)]))
    return out


def indistinguishable(a, b, frontier, depth):
    """t1 ==_F t2: for every f in advance of F (within a padded grid), a <= f iff b <= f."""
    span = range(GRID[depth] + 2)
    for f in itertools.product(span, repeat=depth):
        if frontier.dominates(f) and leq(a, f) != leq(b, f):
            return False
    return True


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_rep_correct_optimal_idempotent(depth):
    pts = grid(depth)
    for F in frontiers(depth):
        reps = {t: rep(t, F) for t in pts}
        for t in pts:
            r = reps[t]
            assert leq(t, r), (t, r, F)
            assert indistinguishable(t, r, F, depth), (t, r, F)
            assert rep(r, F) == r
        for t1, t2 in itertools.combinations(pts, 2):
            if indistinguishable(t1, t2, F, depth):
                assert reps[t1] == reps[t2], (t1, t2, F)


def test_rep_worked_cases():
    F = Antichain([(3, 0)])
    assert rep((1, 0), F) == (3, 0)
    assert rep((2, 1), F) == (3, 1)
    F = Antichain([(2, 2)])
    assert rep((0, 5), F) == (2, 5)
    assert rep((4, 1), F) == (4, 2)
    F = Antichain([(3, 0), (1, 4)])
    assert rep((0, 2), F) == (1, 2)
    assert rep((2, 1), F) == (2, 1)


def test_rep_empty_frontier_is_identity():
    assert rep((4, 2), Antichain()) == (4, 2)


def test_lub_glb():
    assert lub((1, 5), (3, 2)) == (3, 5)
    assert glb((1, 5), (3, 2)) == (1, 2)
    assert leq((1, 2), (1, 3)) and not leq((2, 1), (1, 3))


def test_antichain_insert_keeps_minimal():
    a = Antichain()
    assert a.insert((2, 3))
    assert a.insert((3, 1))
    assert not a.insert((4, 4))  # dominated by (2, 3)
    assert a.insert((1, 1))      # dominates both
    assert a.elements == ((1, 1),)
    assert a.dominates((5, 1)) and not a.dominates((0, 9))


def test_antichain_meet_join_order():
    a = Antichain([(2, 0), (0, 3)])
    b = Antichain([(1, 1)])
    m = a.meet(b)
    assert set(m) == {(2, 0), (0, 3), (1, 1)}
    j = a.join(b)
    assert set(j) == {(2, 1), (1, 3)}
    assert m.less_equal(a) and m.less_equal(b)
    assert a.less_equal(j) and b.less_equal(j)
    assert Antichain().is_empty() and a.less_equal(Antichain())


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_meet_join_semantics(depth):
    """t in advance of meet(a, b) iff in advance of a or b; of join iff of both."""
    fs = frontiers(depth, count=15, seed=depth)
    pts = grid(depth)
    for a, b in itertools.product(fs[-15:], repeat=2):
        m, j = a.meet(b), a.join(b)
        for t in pts:
            assert m.dominates(t) == (a.dominates(t) or b.dominates(t))
            assert j.dominates(t) == (a.dominates(t) and b.dominates(t))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.data())
def test_matrix_forms_match_scalar(depth, data):
    times = data.draw(st.lists(st.tuples(*[st.integers(0, 6)] * depth), min_size=0, max_size=30))
    fr = data.draw(st.lists(st.tuples(*[st.integers(0, 6)] * depth), min_size=0, max_size=3))
    F = Antichain(fr)
    T = np.array(times, dtype=np.int64).reshape(len(times), depth)
    assert in_advance_mask(T, F).tolist() == [F.dominates(t) for t in times]
    assert [tuple(r) for r in rep_matrix(T, F).tolist()] == [rep(t, F) for t in times]
    expect = Antichain(times)
    assert antichain_of(T) == expect
