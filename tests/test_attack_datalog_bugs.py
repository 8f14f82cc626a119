"""Regressions for the Datalog front-end bugs an attack found (each failed before its fix), and error
handling (DatalogError line/column; the engine and existing programs intact afterwards)."""
from __future__ import annotations

import pytest

import kpgnb as kp

from datalog_reference import rows_of

WAIT_S = 30
TC = "tc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n"


@pytest.fixture
def eng():
    e = kp.Engine(workers=2)
    e.input("e", ["a", "b"], rows=[(1, 2), (2, 3), (3, 4)]).flush()
    yield e
    e.close()


def state(eng):
    s = eng.snapshot()
    return sorted(s.dataflows), sorted(eng.inputs()), sorted(s.catalog)


def test_expression_argument_in_body_atom(eng):
    prog = eng.datalog("p(x, y) :- e(x, y), e(y + 1, z).\n", name="a")
    eng.wait(prog["p"], timeout=WAIT_S)
    assert rows_of(prog["p"]) == {(1, 2)}


def test_goal_on_expression_head(eng):
    prog = eng.datalog("q(x + 1, y) :- e(x, y).\n", name="b")
    g = prog.goal("q(?, _)")
    g.ask(2)
    eng.wait(g.view, timeout=WAIT_S)
    assert rows_of(g.view) == {(2, 2)}


def test_non_ascii_string_constant():
    eng = kp.Engine(workers=1)
    try:
        eng.input("city", ["n", "c"], dtypes=["str", "str"], rows=[("ann", "Zürich"), ("bob", "Bern")]).flush()
        prog = eng.datalog('here(n) :- city(n, "Zürich").\ntag(n, "café") :- city(n, "Bern").\n', name="u")
        eng.wait(prog["here"], timeout=WAIT_S)
        eng.wait(prog["tag"], timeout=WAIT_S)
        assert rows_of(prog["here"]) == {("ann",)}
        assert rows_of(prog["tag"]) == {("bob", "café")}
    finally:
        eng.close()


def test_goal_asks_in_the_epoch_of_buffered_input_changes(eng):
    prog = eng.datalog(TC, name="g")
    g = prog.goal("tc(?, _)")
    e = eng.inputs()["e"]
    e.insert([(4, 5)])      # buffered in the current epoch
    g.ask(1)
    g.ask(2)
    g.ask(3)
    e.flush()
    eng.wait(prog["tc"], timeout=WAIT_S)
    eng.wait(g.view, timeout=WAIT_S)
    want = {r for r in rows_of(prog["tc"]) if r[0] in (1, 2, 3)}
    assert rows_of(g.view) == want


def test_goal_retract_of_a_binding_never_asked(eng):
    prog = eng.datalog(TC, name="g")
    g = prog.goal("tc(?, _)")
    g.retract(1)            # never asked: nothing happens (the bindings are a set), not a pending -1
    g.ask(1)
    eng.wait(g.view, timeout=WAIT_S)
    assert rows_of(g.view) == {(1, 2), (1, 3), (1, 4)}


def test_goal_on_predicate_named_m(eng):
    prog = eng.datalog("m(x, y) :- e(x, y).\nm(x, y) :- m(x, z), e(z, y).\n", name="prog")
    eng.wait(prog["m"], timeout=WAIT_S)
    before = state(eng)
    try:
        g = prog.goal("m(?, _)")
    except kp.DatalogError:
        assert state(eng) == before
        pytest.fail("a goal on a predicate named m is refused")
    g.ask(1)
    eng.wait(g.view, timeout=WAIT_S)
    assert rows_of(g.view) == {(1, 2), (1, 3), (1, 4)}


def test_failed_install_with_taken_name_leaves_no_fact_inputs(eng):
    eng.datalog("p(x) :- e(x, _).\np(7).\n", name="taken")
    before = state(eng)
    with pytest.raises(kp.KpgnbError):
        eng.datalog("q(x) :- e(x, _).\nq(9).\np(1).\n", name="taken")
    assert state(eng) == before


@pytest.mark.parametrize("text", ["q(f, y) :- fl(_, f), e(f, y).\n", "q(f) :- fl(_, f), !e(f, _).\n"])
def test_float_variable_in_int_column(eng, text):
    """Either an answer or a DatalogError at the text; not an engine SchemaError."""
    eng.input("fl", ["k", "v"], dtypes=["int64", "float64"], rows=[(1, 2.0), (2, 0.5)]).flush()
    try:
        prog = eng.datalog(text, name="ff")
    except kp.DatalogError as err:
        assert err.line == 1
        return
    eng.wait(prog["q"], timeout=WAIT_S)
    assert rows_of(prog["q"]) == ({(2.0, 3)} if "!" not in text else {(0.5,)})


def test_integer_division_by_zero_gives_no_wrong_row(eng):
    eng.inputs()["e"].insert([(3, 0)])
    eng.inputs()["e"].flush()
    prog = eng.datalog("q(x, y, v) :- e(x, y), v = x / y.\nr(x, y, v) :- e(x, y), v = x % y.\n", name="z")
    for p in ("q", "r"):
        eng.wait(prog[p], timeout=WAIT_S)
        assert all(y != 0 for _, y, _ in rows_of(prog[p])), (p, rows_of(prog[p]))


# -- error handling: located, and harmless ---------------------------------------------------------------

ERRORS = [
    # (text, line, column)
    ("/* a\n   b */ p(x) :- e(x, y).\nq(x) :- p(x, y).\n", 3, 9),
    ("p(x) :- e(x, y).\n\tq(x) :-\tp(x), r(x).\n", 2, 16),
    ('p(x) :- e(x, _), s("é", x).\nq(w) :- p(x).\n', 1, 18),     # s is unknown
    (".decl p(a: int, b: strng)\np(x, y) :- e(x, y).\n", 1, 20),
    ("p(x) :-\n   e(x, y),\n   q(w).\n", 3, 4),
    ("p(x) :- e(x, _), !nosuch(x).\n", 1, 18),
    ("p(x, y) :- e(x, _), !e(y, x).\n", 1, 24),
    ("m(x, min<a>, max<b>) :- e(x, a), e(x, b).\nm(y, min<a>, max<b>) :- m(x, a, b), e(x, y).\n", 2, 1),
    ('p(x) :- e(x, "abc).\n', 1, 14),
    ("p(x) :- e(x, y)\nq(x) :- e(x, y).\n", 2, 1),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_located_and_engine_intact(eng, k):
    text, line, column = ERRORS[k]
    ok = eng.datalog(TC, name="ok")
    g = ok.goal("tc(?, _)")
    g.ask(1)
    eng.wait(g.view, timeout=WAIT_S)
    before = state(eng)
    with pytest.raises(kp.DatalogError) as info:
        eng.datalog(text, name="bad")
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert state(eng) == before
    e = eng.inputs()["e"]
    e.insert([(4, 5)])
    e.flush()
    eng.wait(ok["tc"], timeout=WAIT_S)
    assert (1, 5) in rows_of(ok["tc"])
    g.ask(4)
    eng.wait(g.view, timeout=WAIT_S)
    assert rows_of(g.view) == {r for r in rows_of(ok["tc"]) if r[0] in (1, 4)}


def test_eof_error_points_at_the_unfinished_rule(eng):
    """A rule missing its '.', followed by a comment: the error should point at the rule, not at the
    end of the comment line."""
    text = "p(x) :- e(x, y)\n// the end\n"
    with pytest.raises(kp.DatalogError) as info:
        eng.datalog(text, name="bad")
    assert info.value.line == 1, str(info.value)


def test_bad_goals_leave_the_engine_intact(eng):
    prog = eng.datalog(TC, name="ok")
    eng.wait(prog["tc"], timeout=WAIT_S)
    before = state(eng)
    for bad in ('tc(?, "x")', "tc(?, ?, ?)", "nosuch(?)", "tc(?, 1.5.2)"):
        with pytest.raises(kp.KpgnbError):
            prog.goal(bad)
        assert state(eng) == before, bad
