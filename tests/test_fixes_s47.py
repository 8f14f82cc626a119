"""Session 47: regression tests for fixes beyond the attack files' own tests."""
from __future__ import annotations

import pytest

import kpgnb as kp


def rows_of(view):
    return set(map(tuple, view.to_pandas().itertuples(index=False)))


def test_variable_set_refuses_zero_rounds_and_iterate_zero_is_the_input():
    """iterate(max_rounds=0) is the input itself; Variable.set(max_rounds=0) used to run round 0 (the body
    once), the same as max_rounds=1: it is refused with a pointer to the initial collection."""
    with kp.Engine(workers=1) as eng:
        eng.input("x", ["a"], ["int64"], rows=[(1,)]).close()

        with eng.dataflow("q") as d:
            x = d.input("x")
            v = kp.Variable(x)
            with pytest.raises(kp.UsageError, match="max_rounds=0"):
                v.set(v.map(lambda a: {"a": a + 1}), max_rounds=0)
            one = v.set(v.map(lambda a: {"a": a + 1}), max_rounds=1).leave().view("one")
            zero = x.iterate(lambda c: c.map(lambda a: {"a": a + 1}), max_rounds=0).view("zero")
        eng.wait("q", timeout=60)
        assert rows_of(one) == {(2,)}
        assert rows_of(zero) == {(1,)}


def test_count_by_a_column_named_count_says_the_output_clashes():
    """count(by="count") failed with only "duplicate column names: ['count']"; it names the clash now."""
    with kp.Engine(workers=1) as eng:
        eng.input("x", ["count"], rows=[(1,)])
        with pytest.raises(kp.SchemaError, match="output column 'count' is also a group column"):
            with eng.dataflow("q") as d:
                d.input("x").count(by="count")
        assert eng.dataflows() == {}
