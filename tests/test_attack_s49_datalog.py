"""Session 49 attack on the Datalog front end: the language's lexical corners, goal constants, error texts.

Held (plain tests): comment markers inside string constants, `<-`, `not` followed by a comment or a line
break; error locations in CRLF programs and after multi-line block comments; goals with str, float,
negative and -0.0 constants and ask/retract of (str, float) bindings; a program reading another program's
exports by every exported name (`A.edge[src]`, `A.edge`, `A.tc`) and goals on it.

Bugs (xfail, strict): a goal constant 1.0 for an int column is refused although the same constant in a
rule's atom (`tc(1.0, y)`) and `g.ask(1.0)` are both accepted and mean 1; truncated `\\uHHHH` / `\\xHH`
escapes (`'\\u12'`, `'\\x'`, `'\\x4g'`) are silently read as the letters (`'u12'`) instead of being a
located error; an out-of-range negative literal (`-9223372036854775809`) is reported as the positive
integer and the message suggests the positive float, which flips the sign; errors about a unary minus name
`(0 - y)`, an expression the user never wrote; a doubly negated -2**63 (`--9223372036854775808`,
`-(-9223372036854775808)`) is folded to 2**63 without the int64 check, so it silently wraps to -2**63 in
assignments and heads, fails a fact with a SchemaError on an internal column 'c0', fails `x + --...` with
Python's "int too large to convert to C long", and is accepted as a goal constant.
"""
from __future__ import annotations

import pytest

import kpgnb as kp

WAIT_S = 60

TC = "tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n"


def rows_of(view) -> set:
    return {tuple(v.item() if hasattr(v, "item") else v for v in r)
            for r in view.to_pandas().itertuples(index=False, name=None)}


def _edges(eng, rows=((1, 2), (2, 3))):
    e = eng.input("edge", ["src", "dst"], rows=list(rows))
    e.advance_to(1)
    return e


# =====================================================================================================
# Held
# =====================================================================================================

def test_comment_markers_inside_strings_and_not_before_a_comment_or_newline():
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        prog = eng.datalog("""
s('a // b'). s("# c"). s('/* d */').   // a comment after the facts
r(x) <- edge(x, _), not/*c*/edge(_, x).  # Nexus arrow, not then a comment
t(x) :- edge(x, _), not
        edge(_, x).
""", name="lex")
        eng.wait(prog.name, timeout=WAIT_S)
        assert rows_of(prog["s"]) == {("a // b",), ("# c",), ("/* d */",)}
        assert rows_of(prog["r"]) == {(1,)}
        assert rows_of(prog["t"]) == {(1,)}


@pytest.mark.parametrize("text,line,column", [
    ("a(x) :- edge(x, _).\r\nb(x) :- a(x), z > 1.\r\n", 2, 15),
    ("a(x) :- edge(x, _). /* x\ny */ b(x) :- a(x), z > 1.", 2, 20),
])
def test_error_location_with_crlf_and_after_a_block_comment(text, line, column):
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        with pytest.raises(kp.DatalogError) as info:
            eng.datalog(text, name="bad")
        assert (info.value.line, info.value.column) == (line, column)
        assert "\r" not in str(info.value)
        assert "bad" not in eng.dataflows()


def test_goal_constants_of_every_type_and_asks_of_str_float_bindings():
    with kp.Engine(workers=2) as eng:
        f = eng.input("f", ["a", "b", "w"], dtypes=["str", "str", "float64"],
                      rows=[("x", "y", 1.5), ("y", "z", -2.0), ("z", "x", 0.5), ("y", "y'", 2.0), ("q", "x", -0.0)])
        f.advance_to(1)
        prog = eng.datalog("""
r(a, b, w) :- f(a, b, w).
r(a, c, w) :- r(a, b, w1), f(b, c, w2), w = w1 + w2, w < 10.0, w > -10.0.
n(a, k) :- r(a, _, _), k = -1.
""", name="p")
        eng.wait(prog.name, timeout=WAIT_S)
        full = rows_of(prog["r"])
        for pattern, keep in [("r(_, _, -2.0)", lambda t: t[2] == -2.0), ("r(_, _, -2)", lambda t: t[2] == -2.0),
                              ("r(_, _, -0.0)", lambda t: t[2] == 0.0), ("r('y', \"y'\", _)", lambda t: t[:2] == ("y", "y'"))]:
            g = prog.goal(pattern)
            eng.wait(g.view, timeout=WAIT_S)
            assert rows_of(g.view) == {t for t in full if keep(t)}, pattern
        g = prog.goal("r(?, _, ?)")
        g.ask(("y", -2.0)); g.ask(("q", 0.0))
        eng.wait(g.view, timeout=WAIT_S)
        assert rows_of(g.view) == {t for t in full if (t[0], t[2]) in {("y", -2.0), ("q", 0.0)}}
        g.retract(("q", -0.0))  # -0.0 == 0.0: the same binding
        eng.wait(g.view, timeout=WAIT_S)
        assert rows_of(g.view) == {t for t in full if (t[0], t[2]) == ("y", -2.0)}
        n = prog.goal("n(?, -1)")
        n.ask("x")
        eng.wait(n.view, timeout=WAIT_S)
        assert rows_of(n.view) == {("x", -1)}


@pytest.mark.parametrize("source", ["A.edge[src]", "A.edge", "A.tc"])
def test_program_over_every_exported_name_of_another_and_goals_on_it(source):
    with kp.Engine(workers=2) as eng:
        e = _edges(eng, [(1, 2), (2, 3), (3, 4)])
        a = eng.datalog(TC, name="A")
        eng.wait("A", timeout=WAIT_S)
        b = eng.datalog("r(x, y) :- e(x, y).\nr(x, y) :- r(x, z), e(z, y).\n", inputs={"e": source}, name="B")
        g = b.goal("r(?, _)")
        g.ask(2)
        g2 = b.goal("r(_, 4)")
        eng.wait(g.view, timeout=WAIT_S); eng.wait(g2.view, timeout=WAIT_S)
        assert rows_of(g.view) == {(2, 3), (2, 4)}
        assert rows_of(g2.view) == {(1, 4), (2, 4), (3, 4)}
        e.insert([(4, 5)]); e.remove([(1, 2)]); e.advance_to(2)
        eng.wait(g.view, timeout=WAIT_S); eng.wait(g2.view, timeout=WAIT_S)
        assert rows_of(g.view) == {(2, 3), (2, 4), (2, 5)}
        assert rows_of(g2.view) == {(2, 4), (3, 4)}
        eng.wait(b.name, timeout=WAIT_S)
        assert rows_of(b["r"]) == rows_of(a["tc"])  # tc of edge, of tc or of edge by src: tc


# =====================================================================================================
# Bugs
# =====================================================================================================

def test_goal_integral_float_constant_of_an_int_column_is_taken_as_ask_and_rules_take_it():
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        prog = eng.datalog(TC + "one(y) :- tc(1.0, y).\n", name="p")  # a rule may write 1.0 for int 1
        eng.wait(prog.name, timeout=WAIT_S)
        assert rows_of(prog["one"]) == {(2,), (3,)}
        asked = prog.goal("tc(?, _)")
        asked.ask(1.0)  # ask takes 1.0 for the int column too
        eng.wait(asked.view, timeout=WAIT_S)
        assert rows_of(asked.view) == {(1, 2), (1, 3)}
        g = prog.goal("tc(1.0, _)")  # today: DatalogError "the constant must be an int"
        eng.wait(g.view, timeout=WAIT_S)
        assert rows_of(g.view) == {(1, 2), (1, 3)}


@pytest.mark.parametrize("literal", [r"'\u12'", r"'\x'", r"'\x4g'", r'"\u004"'])
def test_truncated_unicode_or_hex_escape_is_a_located_error(literal):
    with kp.Engine(workers=1) as eng:
        text = f"ok('a').\nq({literal}).\n"
        try:
            prog = eng.datalog(text, name="p")
        except kp.DatalogError as e:
            assert (e.line, e.column) == (2, 3), str(e)
            return
        eng.wait(prog.name, timeout=WAIT_S)
        pytest.fail(f"{literal} was accepted as {rows_of(prog['q'])}")


@pytest.mark.parametrize("text", ["q(-9223372036854775809).\n",
                                  "q(x) :- edge(x, _), x > -9223372036854775809.\n"])
def test_negative_int_literal_out_of_range_is_named_with_its_sign(text):
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        with pytest.raises(kp.DatalogError) as info:
            eng.datalog(text, name="p")
        msg = str(info.value)
        assert "-9223372036854775809" in msg.splitlines()[0], msg
        assert "(9223372036854775809.0)" not in msg, msg


@pytest.mark.parametrize("where", ["check", "run"])
def test_unary_minus_is_named_as_written_in_errors(where):
    with kp.Engine(workers=1) as eng:
        s = eng.input("s", ["v"], dtypes=["str"], rows=[("a",)])
        n = eng.input("n", ["v"], rows=[(-2**63,)])
        s.advance_to(1); n.advance_to(1)
        if where == "check":  # arithmetic on a string, refused before install
            with pytest.raises(kp.DatalogError) as info:
                eng.datalog("q(z) :- s(y),\n  z = -y.", name="p")
            msg = str(info.value)
            assert (info.value.line, info.value.column) == (2, 7), msg
        else:  # -(-2**63) is outside int64: the dataflow fails naming the expression
            eng.datalog("q(x, y) :- n(x),\n  y = -x.", name="p")
            with pytest.raises(kp.DataflowError) as info:
                eng.wait("p", timeout=WAIT_S)
            msg = str(info.value)
            assert "line 2, column 7" in msg, msg
        assert "0 - " not in msg, msg


@pytest.mark.parametrize("text", [
    "q(x, y) :- edge(x, _),\n  y = --9223372036854775808.\n",     # today: rows (x, -2**63): wrapped
    "q(x, -(-9223372036854775808)) :- edge(x, _).\n",             # today: rows (x, -2**63): wrapped
    "q(--9223372036854775808).\n",                                 # today: SchemaError on column 'c0'
    "q(x, y) :- edge(x, _),\n  y = x + --9223372036854775808.\n",  # today: OverflowError ... C long
])
def test_double_negation_of_int64_min_fails_instead_of_wrapping(text):
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        try:
            prog = eng.datalog(text, name="p")
        except kp.DatalogError as e:  # as q(9223372036854775807 + 1). is refused, located
            assert e.line is not None and e.column is not None, str(e)
            return
        try:
            eng.wait(prog.name, timeout=WAIT_S)
        except kp.DataflowError as e:  # as y = 9223372036854775807 + 1 fails, naming the expression
            assert "outside int64" in str(e) and "line " in str(e), str(e)
            return
        pytest.fail(f"the program ran and gave {rows_of(prog['q'])}")


def test_goal_constant_double_negated_out_of_int64_is_refused():
    with kp.Engine(workers=1) as eng:
        _edges(eng)
        prog = eng.datalog(TC, name="p")
        with pytest.raises(kp.DatalogError):
            prog.goal("tc(?, 9223372036854775808)")
        with pytest.raises(kp.DatalogError):
            prog.goal("tc(?, --9223372036854775808)")
