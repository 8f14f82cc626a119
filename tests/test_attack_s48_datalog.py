"""Session 48 attack on the Datalog front end (eng.datalog, .decl, inputs= bound to DataFrames, facts).

Held (plain tests): random stratified programs of a new shape (mutual recursion through reversed edges,
negation with expression arguments, heads with repeated variables and expressions, aggregates pooled over
two rules and reduced modulo the domain, recursive min/max label propagation) against
``datalog_reference.evaluate`` through insert/retract streams at W=1,2,3; recursive min/max and
shortest paths over values near +-2**62 (entry by bit length with negative labels); DataFrame inputs whose
columns are int32, object ints, categorical or pandas ``string``; a rule chaining 25 atoms; strings with
NUL and astral characters compared, min/max'ed and asked in Python's code point order.

Bugs (xfail, strict): a predicate whose only rules are ground facts that all divide by zero crashes the
install with an internal ``IndexError`` instead of deriving nothing; a ``.decl`` ``int`` column is silently
widened to float64 by a float fact or rule (``.decl p(x: int)`` then ``p(1.5).`` gives a float column
holding 1.5) where a declared str column refuses an int; a predicate whose first rule derives a bool column
(from a DataFrame) and second an int one is refused, while the same two rules in the other order are
accepted; a ``.decl`` that disagrees with its input's column type puts the caret under the whole ``.decl``,
not under the offending column; a column named ``self`` (an input's, a head variable's or a ``.decl``'s)
cannot be read by any rule or goal (``TypeError: rename() got multiple values for argument 'self'``).
"""
from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp

sys.path.insert(0, str(Path(__file__).parent))
from datalog_reference import diff_rows, evaluate, rows_of as ref_rows_of, same_rows  # noqa: E402

WAIT_S = 60


def rows_of(view) -> set:
    return set(map(tuple, view.to_pandas().itertuples(index=False)))


# =====================================================================================================
# Held: random programs of another shape against the reference evaluator
# =====================================================================================================

DOM = 5


def _program(seed: int) -> str:
    rng = random.Random(seed)
    lines, preds, n = [], {"e": 2, "u": 1}, [0]

    def fresh(p):
        n[0] += 1
        return f"{p}{n[0]}"

    for _ in range(rng.randint(3, 6)):
        two = [p for p in preds if preds[p] == 2]
        kind = rng.random()
        if kind < 0.3:  # mutual recursion, sometimes through reversed edges
            a, b = fresh("r"), fresh("r")
            lines.append(f"{a}(x, y) :- {rng.choice(two)}(x, y).")
            lines.append(f"{b}(x, y) :- {a}(x, z), e(z, y)." if rng.random() < 0.5
                         else f"{b}(x, y) :- e(x, z), {a}(z, y).")
            lines.append(f"{a}(x, y) :- {b}(x, y)" + (", x != y." if rng.random() < 0.3 else "."))
            if rng.random() < 0.4:
                lines.append(f"{b}(y, x) :- {b}(x, y), u(x).")
            preds[a] = preds[b] = 2
        elif kind < 0.5:  # negation, with `_`, swapped or computed arguments
            a = fresh("n")
            p2 = rng.choice(list(preds))
            neg = f"{p2}(x)" if preds[p2] == 1 else rng.choice(
                [f"{p2}(y, x)", f"{p2}(x, _)", f"{p2}(_, y)", f"{p2}(x, y)", f"{p2}(y + 1, x)"])
            lines.append(f"{a}(x, y) :- {rng.choice(two)}(x, y), !{neg}.")
            if rng.random() < 0.5:
                lines.append(f"{a}(x, x) :- u(x).")
            preds[a] = 2
        elif kind < 0.7:  # aggregates, pooled over two rules, counts folded back into the domain
            a = fresh("g")
            f = rng.choice(["min", "max", "count", "sum", "countd", "avg"])
            if f == "avg":
                lines.append(f"{a}(x, avg<y>) :- {rng.choice(two)}(x, y).")
                h = fresh("h")
                lines.append(f"{h}(x, y) :- {a}(x, m), e(x, y), y > m.")
                preds[h] = 2
            else:
                grp, oth = rng.choice([("x", "y"), ("y", "x")])
                lines.append(f"{a}({grp}, {f}<{oth}>) :- {rng.choice(two)}(x, y).")
                if rng.random() < 0.5:
                    lines.append(f"{a}({grp}, {f}<{oth}>) :- e(x, y), {oth} < 3.")
                preds[a] = 2
                if f in ("count", "sum", "countd"):
                    c = fresh("c")
                    lines.append(f"{c}(x, m) :- {a}(x, k), m = k % {DOM}.")
                    preds[c] = 2
        elif kind < 0.85:  # recursive min/max label propagation
            a = fresh("m")
            f, src = rng.choice(["min", "max"]), rng.choice(two)
            lines.append(f"{a}(x, {f}<l>) :- {src}(x, _), l = x.")
            lines.append(f"{a}(y, {f}<l>) :- {a}(x, l), {src}(x, y).")
            preds[a] = 2
        else:  # arithmetic, comparisons, an expression in the head
            a = fresh("a")
            src = rng.choice(two)
            lines.append(f"{a}(x, w) :- {src}(x, y), w = (x * y + 1) % {DOM}, x <= y.")
            lines.append(f"{a}(y - 1, x) :- {src}(x, y), y > 0, !e(y, x).")
            preds[a] = 2
    return "\n".join(lines)


def _stream(seed: int, epochs: int):
    rng = random.Random(seed + 99)
    state = {"e": Counter(), "u": Counter()}
    for ep in range(epochs):
        step = {}
        for p, k in (("e", 2), ("u", 1)):
            ins, rem = [], []
            for _ in range(rng.randint(1, 8 if ep == 0 else 4)):
                present = [r for r, c in state[p].items() if c > 0]
                if present and rng.random() < 0.4:
                    r = rng.choice(present)
                    rem.append(r)
                    state[p][r] -= 1
                else:
                    r = tuple(rng.randrange(DOM) for _ in range(k))
                    ins.append(r)
                    state[p][r] += 1
            step[p] = (ins, rem)
        yield step, {p: Counter(c) for p, c in state.items()}


@pytest.mark.parametrize("seed,w", [(3, 1), (5, 2), (9, 3)])
def test_random_programs_of_another_shape_match_the_reference(seed, w):
    text = _program(seed)
    with kp.Engine(workers=w) as eng:
        ses = {"e": eng.input("e", ["a", "b"]), "u": eng.input("u", ["n"])}
        prog = None
        for ep, (step, state) in enumerate(_stream(seed, 4)):
            for p, (ins, rem) in step.items():
                if ins:
                    ses[p].insert(ins)
                if rem:
                    ses[p].remove(rem)
            for s in ses.values():
                s.advance_to(ep + 1)
            if prog is None:
                prog = eng.datalog(text, name="P")
            for pred, want in evaluate(text, state).items():
                eng.wait(prog[pred], timeout=WAIT_S)
                got = ref_rows_of(prog[pred], prog.columns(pred))
                assert same_rows(got, want), f"epoch {ep} {pred}: {diff_rows(got, want)}\n{text}"


def test_recursive_min_max_and_paths_over_values_near_two_to_the_62():
    """Labels and distances far from the small domain: negative labels, +-2**62 (entry by bit length)."""
    big = [-(2 ** 62), -2 ** 40, -7, -1, 0, 1, 3, 2 ** 40, 2 ** 62]
    text = ("cc(x, min<l>) :- e(x, _), l = x.\ncc(y, min<l>) :- cc(x, l), e(x, y).\n"
            "hi(x, max<l>) :- e(x, _), l = x.\nhi(y, max<l>) :- hi(x, l), e(y, x).\n"
            "sp(y, min<d>) :- u(y), d = y.\nsp(y, min<d>) :- sp(x, d1), w(x, y, c), d = d1 + c.\n")
    rng = random.Random(48)
    with kp.Engine(workers=2) as eng:
        E, U, W = eng.input("e", ["a", "b"]), eng.input("u", ["n"]), eng.input("w", ["a", "b", "c"])
        st = {"e": Counter(), "u": Counter(), "w": Counter()}
        prog = None
        for ep in range(4):
            for _ in range(5):
                present = [k for k, v in st["e"].items() if v > 0]
                if present and rng.random() < 0.3:
                    r = rng.choice(present)
                    E.remove([r])
                    st["e"][r] -= 1
                else:
                    r = (rng.choice(big), rng.choice(big))
                    E.insert([r])
                    st["e"][r] += 1
                r3 = (rng.choice(big[2:7]), rng.choice(big[2:7]), rng.randint(0, 5))
                W.insert([r3])
                st["w"][r3] += 1
            ru = (rng.choice(big[2:7]),)
            U.insert([ru])
            st["u"][ru] += 1
            for s in (E, U, W):
                s.advance_to(ep + 1)
            if prog is None:
                prog = eng.datalog(text, name="big")
            for pred, want in evaluate(text, st).items():
                eng.wait(prog[pred], timeout=WAIT_S)
                assert rows_of(prog[pred]) == want, f"epoch {ep} {pred}"


@pytest.mark.parametrize("label,col,want", [
    ("int32", np.array([1, 2], dtype=np.int32), [(1, 2), (2, 3)]),
    ("object ints", pd.Series([1, 2], dtype=object), [(1, 2), (2, 3)]),
    ("categorical", pd.Categorical(["x", "y"]), [("x", 2), ("y", 3)]),
    ("pandas string", pd.array(["x", "y"], dtype="string"), [("x", 2), ("y", 3)]),
])
def test_dataframe_inputs_with_other_column_dtypes(label, col, want):
    with kp.Engine(workers=1) as eng:
        prog = eng.datalog("r(x, y) :- b(x, y).", inputs={"b": pd.DataFrame({"a": col, "b": [2, 3]})})
        eng.wait(prog["r"], timeout=WAIT_S)
        assert sorted(rows_of(prog["r"])) == want


def test_a_rule_chaining_25_atoms():
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(25))
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["a", "b"], rows=[(i, i + 1) for i in range(40)])
        e.advance_to(1)
        prog = eng.datalog(f"p(x0, x25) :- {body}.")
        eng.wait(prog["p"], timeout=WAIT_S)
        assert rows_of(prog["p"]) == {(i, i + 25) for i in range(16)}


# =====================================================================================================
# Bugs
# =====================================================================================================

@pytest.mark.parametrize("text", ["p(1 / 0).", "p(0.0 / 0.0).", "p(1, 5 % 0).",
                                  "p(1 / 0).\nq(x) :- p(x)."])
def test_facts_that_all_divide_by_zero_derive_an_empty_relation(text):
    """README, Language: 'a division or remainder by zero has no value, so that binding derives nothing'.
    With another fact beside it (``p(1 / 0). p(2).``) that holds; alone, the install fails with
    ``IndexError: list index out of range`` from ``compiler._define``."""
    with kp.Engine(workers=1) as eng:
        prog = eng.datalog(text)
        eng.wait(prog["p"], timeout=WAIT_S)
        assert rows_of(prog["p"]) == set()


@pytest.mark.parametrize("text", [
    ".decl p(x: int)\np(1.5).",
    ".decl p(x: int, y: int)\np(x, y) :- e(x, y).\np(x, y) :- f(x, y).",
    ".decl p(x: int)\np(x) :- e(x, _).\np(x + 0.5) :- e(x, _).",
])
def test_a_declared_int_column_refuses_float_rows(text):
    """README: ``.decl`` gives a relation's column names and types; a type clash raises DatalogError. A
    ``str`` column declared so refuses an int fact (``.decl p(x: str)\\np(1).``), and an input's int column
    declared ``float`` is refused; but a column declared ``int`` quietly becomes float64 and holds 1.5."""
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], rows=[(1, 2)]).advance_to(1)
        eng.input("f", ["a", "b"], dtypes={"a": "int64", "b": "float64"}, rows=[(1, 0.5)]).advance_to(1)
        with pytest.raises(kp.DatalogError) as ei:
            prog = eng.datalog(text, name="d")
            eng.wait(prog["p"], timeout=WAIT_S)
            assert list(prog["p"].to_pandas().dtypes) == ["int64"] * len(prog.columns("p"))  # (if accepted)
        assert ei.value.line >= 2 and "int" in ei.value.reason


def test_a_declared_str_column_refuses_an_int_fact():
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.DatalogError) as ei:
            eng.datalog(".decl p(x: str)\np(1).")
        assert (ei.value.line, ei.value.column) == (2, 3)


B = pd.DataFrame({"n": [1, 2, 3], "flag": [True, False, True]})


def test_bool_and_int_rules_of_one_predicate_are_accepted_in_either_order():
    """``r(x, f) :- e(x, f). r(x, y) :- b(x, y).`` (int rule first, b's second column bool) installs and gives
    r an int column; the same two rules swapped raise 'column 2 of 'r' is bool in another rule ... but int
    here' (analysis._unify widens int to accept bool, not bool to accept int). A Datalog program's meaning
    does not depend on the order of its rules."""
    results = []
    for text in ("r(x, f) :- e(x, f).\nr(x, y) :- b(x, y).", "r(x, f) :- b(x, f).\nr(x, y) :- e(x, y)."):
        with kp.Engine(workers=1) as eng:
            eng.input("e", ["a", "b"], rows=[(1, 2), (2, 0)]).advance_to(1)
            try:
                prog = eng.datalog(text, inputs={"b": B})
                eng.wait(prog["r"], timeout=WAIT_S)
                results.append({(int(a), int(b)) for a, b in rows_of(prog["r"])})
            except kp.DatalogError as e:
                results.append(f"DatalogError: {e.reason}")
    assert results[0] == {(1, 2), (2, 0), (1, 1), (2, 0), (3, 1)}
    assert results[1] == results[0]


def test_decl_input_type_mismatch_points_at_the_column():
    text = ".decl e(a: int, b: str)\nr(x, y) :- e(x, y)."
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], rows=[(1, 2)]).advance_to(1)
        with pytest.raises(kp.DatalogError) as ei:
            eng.datalog(text)
    assert "'b'" in ei.value.reason
    assert ei.value.line == 1 and 17 <= ei.value.column <= 22  # `b: str`, not the `.decl` keyword


@pytest.mark.parametrize("text,pred,want", [
    ("q(x) :- s(x, _).", "q", {(1,)}),                                          # an input's column
    ("p(self) :- e(self, _).\nq(x) :- p(x).", "q", {(1,), (2,)}),               # a head variable
    (".decl p(self: int, b: int)\np(x, y) :- e(x, y).\nq(x) :- p(x, _).", "q", {(1,), (2,)}),  # a .decl
])
def test_a_column_named_self_can_be_read(text, pred, want):
    """Any identifier names a variable or a column (``class``, ``lambda``, ``None`` all work), but a column
    named ``self`` makes the compiler's ``rel.rename(**{'self': ...})`` (compiler._join_atom) collide with
    ``Collection.rename``'s / ``Arranged.rename``'s own ``self`` parameter. The program installs when nothing
    reads that relation, and then every goal on it fails the same way."""
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], rows=[(1, 2), (2, 1)]).advance_to(1)
        eng.input("s", ["self", "b"], rows=[(1, 2)]).advance_to(1)
        prog = eng.datalog(text)
        eng.wait(prog[pred], timeout=WAIT_S)
        assert rows_of(prog[pred]) == want


def test_goal_on_a_relation_with_a_column_named_self():
    with kp.Engine(workers=1) as eng:
        eng.input("e", ["a", "b"], rows=[(1, 2), (2, 1), (3, 3)]).advance_to(1)
        prog = eng.datalog("p(self, other) :- e(self, other).")
        g = prog.goal("p(?, _)")
        g.ask(1)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows_of(g.view) == {(1, 2)}


def test_strings_with_nul_and_astral_characters_order_as_python():
    """String constants written with \\uHHHH and \\0 escapes, an astral character written as is: the set,
    ``<`` between them, min/max over them and goals asking them all follow Python's code point order (an
    engine comparing UTF-16 units would put U+1F600 before U+FF5A)."""
    strs = ["a", "B", "é", "😀", "ｚ", "a\0b", "a\0", "", "ab", "\x7f", "\u0080"]

    def lit(s):
        return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in s) + '"'
    text = ("\n".join(f"s({lit(x)})." for x in strs)
            + '\nlt(x, y) :- s(x), s(y), x < y.\nmn(0, min<x>) :- s(x).\nmx(0, max<x>) :- s(x).\n')
    with kp.Engine(workers=2) as eng:
        prog = eng.datalog(text)
        for p in ("s", "lt", "mn", "mx"):
            eng.wait(prog[p], timeout=WAIT_S)
        assert {r[0] for r in rows_of(prog["s"])} == set(strs)
        assert rows_of(prog["lt"]) == {(x, y) for x in strs for y in strs if x < y}
        assert rows_of(prog["mn"]) == {(0, min(strs))} and rows_of(prog["mx"]) == {(0, max(strs))}
        g = prog.goal('lt("a\\0", ?)')
        g.ask("ab")
        g.ask("a\0b")
        eng.wait(g.view, timeout=WAIT_S)
        assert rows_of(g.view) == {("a\0", "ab"), ("a\0", "a\0b")}
