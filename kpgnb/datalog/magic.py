"""Magic sets: a program rewritten for one query predicate and binding pattern (``tc(?, _)``), so that
only facts relevant to the bound values are derived. Rules are adorned left to right (sideways
information passing in body order); each adorned predicate ``p__bf`` gets a magic predicate ``m__p__bf``
holding the bound values it is asked for, seeded from the goal's input of asked bindings.

Derived predicates that are read negated, or with no argument bound, are not rewritten: they are the
full program's relations (imported from its exports). Aggregated arguments are never bound (a min is not
known before it is computed); bound group arguments restrict whole groups, which keeps aggregates exact."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .analysis import Analysis
from .errors import datalog_error
from .parser import ASK, INT64, parse_goal
from .syntax import Atom, BinOp, Comparison, Const, Decl, Program, Rule, Var, hidden, variables

GOAL = "goal__"      # the input of asked bindings (one column per '?')
ANSWER = "answer__"  # the asked predicate's rows for the asked bindings


def seed_names(a: Analysis) -> tuple:
    """The names a goal's rewriting gives the asked bindings' input and the answer (``GOAL``, ``ANSWER``):
    made unique against the program's own predicates and inputs (a user may call one ``answer__``)."""
    taken = set(a.derived) | set(a.inputs)
    goal, answer = GOAL, ANSWER
    while goal in taken:
        goal += "_"
    while answer in taken or answer == goal:
        answer += "_"
    return goal, answer


class _Marker:
    """A goal argument that is not a constant (a string constant "?" or "_" is a constant)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return self.text


ASKED, ANY = _Marker("?"), _Marker("_")


@dataclass(frozen=True)
class Pattern:
    """A goal such as ``tc(?, _)`` or ``path(3, ?, _)``: per argument ASKED, ANY or a constant; ``spans``
    locate the arguments in ``text`` (for errors)."""
    pred: str
    args: tuple
    text: str = field(default="", compare=False)
    spans: tuple = field(default=(), compare=False)
    span: object = field(default=None, compare=False)  # the whole goal's

    @property
    def asked(self) -> list:
        return [i for i, a in enumerate(self.args) if a is ASKED]

    def __str__(self):
        # (a bool column's constant as written: the language has no bool literal, 1 and 0 are true and false)
        return f"{self.pred}({', '.join(repr(int(x) if isinstance(x, bool) else x) for x in self.args)})"


def rewrite(a: Analysis, pattern: Pattern, whole_aggregates: bool = False) -> tuple:
    """(rewritten rules, names of the original derived predicates they read whole, the generated
    predicates: name -> (original predicate, the argument positions it keeps)). ``whole_aggregates``:
    aggregated predicates in rule bodies are read whole too (see ``Goal``)."""
    derived, rules_of = a.derived, {}
    for r in a.program.rules:
        rules_of.setdefault(r.head.pred, []).append(r)
    fresh = itertools.count(1)
    agg_pos = {p: {i for i, _ in a.aggregates.get(p, [])} for p in derived}

    def adornment(pred, args, bound):
        return "".join("b" if i not in agg_pos.get(pred, ()) and _is_bound(x, bound) else "f"
                       for i, x in enumerate(args))

    out, whole, todo, seen = [], set(), [], set()
    names, made = {}, {}  # generated predicate -> (original, kept argument positions); (kind, pred, adn) -> name
    goal_pred, answer_pred = seed_names(a)
    taken = set(derived) | set(a.inputs) | {goal_pred, answer_pred}

    def generated(kind, pred, adn):
        """The name of ``pred``'s adorned (kind "") or magic (kind "m") predicate for ``adn``: ``tc__bf``,
        ``m__tc__bf``, made unique against the program's own predicates (a user may call one ``m__x__b``)."""
        key = (kind, pred, adn)
        if key not in made:
            name = f"m__{pred}__{adn}" if kind else f"{pred}__{adn}"
            while name in taken:
                name += "_"
            taken.add(name)
            made[key] = name
            names[name] = (pred, [i for i, c in enumerate(adn) if c == "b"] if kind else list(range(len(adn))))
        return made[key]

    def want(pred, adn):
        if (pred, adn) not in seen:
            seen.add((pred, adn))
            todo.append((pred, adn))
        return generated("", pred, adn)

    query = pattern.pred
    qbound = {i for i, x in enumerate(pattern.args) if x is not ANY}
    if query in derived:
        qadn = "".join("b" if i in qbound and i not in agg_pos[query] else "f" for i in range(len(pattern.args)))
        if "b" not in qadn:
            whole.add(query)
            target = query
        else:
            target = want(query, qadn)
    else:
        qadn, target = None, query

    while todo:
        pred, adn = todo.pop()
        magic = generated("m", pred, adn)
        for r in rules_of[pred]:
            head_args = r.head.args
            margs = tuple(head_args[i] for i, c in enumerate(adn) if c == "b")
            # a bound head argument that is an expression (q(x + 1, y)) binds none of its variables: x is
            # not known from x + 1. The magic atom is then read twice: first with such arguments left out,
            # passing on what the others bind, and last in full, once the body has bound their variables
            exprs = any(isinstance(x, BinOp) for x in margs)
            passed = tuple(Var(f"_#m{next(fresh)}") if isinstance(x, BinOp) else x for x in margs)
            m_atom = Atom(magic, passed, False, r.head.span)
            bound = {v.name for x in passed for v in variables(x) if not v.anonymous}
            body = [m_atom]
            for lit in r.body:
                if isinstance(lit, Atom) and lit.pred in derived:
                    if lit.negated or (whole_aggregates and a.aggregates.get(lit.pred)):
                        whole.add(lit.pred)
                        body.append(lit)
                        continue
                    adn2 = adornment(lit.pred, lit.args, bound)
                    if "b" not in adn2:
                        whole.add(lit.pred)
                        body.append(lit)
                    else:
                        name = want(lit.pred, adn2)
                        m2 = Atom(generated("m", lit.pred, adn2),
                                  tuple(x for x, c in zip(lit.args, adn2) if c == "b"), False, lit.span)
                        prefix = _safe_prefix(body, lit)
                        if prefix != [m2]:  # m(x) :- m(x) says nothing
                            out.append(Rule(m2, tuple(prefix), r.span))
                        body.append(Atom(name, lit.args, False, lit.span))
                else:
                    body.append(lit)
                if isinstance(lit, Atom) and not lit.negated:
                    bound |= _binds(lit)
                elif isinstance(lit, Comparison) and lit.op == "=":
                    for t, e in ((lit.left, lit.right), (lit.right, lit.left)):
                        if isinstance(t, Var) and all(v.name in bound for v in variables(e)):
                            bound.add(t.name)
            if exprs:
                body.append(Atom(magic, margs, False, r.head.span))
            elif any(_same_binding(lit, generated("", pred, adn), margs, adn) for lit in body[1:]):
                # a recursive atom bound like the head: its facts are all for asked values already, so
                # the magic join would filter nothing (every round)
                body = body[1:]
            out.append(Rule(Atom(generated("", pred, adn), head_args, False, r.head.span), tuple(body), r.span))

    # the seed and the answer
    gvars = {i: Var(f"g{i}") for i in pattern.asked}
    args = []
    for i, x in enumerate(pattern.args):
        args.append(gvars[i] if x is ASKED else Var(f"_q{next(fresh)}") if x is ANY else Const(x))
    goal_atom = Atom(goal_pred, tuple(gvars[i] for i in pattern.asked))
    if qadn is not None and "b" in qadn:
        margs = tuple(args[i] for i, c in enumerate(qadn) if c == "b")
        out.append(Rule(Atom(generated("m", query, qadn), margs), (goal_atom,) if gvars else ()))
    answer_body = [goal_atom, Atom(target, tuple(args))] if gvars else [Atom(target, tuple(args))]
    out.append(Rule(Atom(answer_pred, tuple(args)), tuple(answer_body)))
    return out, whole, names


def program_for(a: Analysis, pattern: Pattern, rules, names: dict) -> Program:
    """The rewritten rules with declarations giving every generated predicate (``names``, from
    ``rewrite``) the original's columns."""
    decls = []
    for pred in {r.head.pred for r in rules}:
        if pred in names:
            base, keep = names[pred]
        else:
            base = pattern.pred if pred == seed_names(a)[1] else pred
            keep = range(len(a.columns[base]))
        cols = tuple((a.columns[base][i], _decl_type(a.dtypes[base][i]), None) for i in keep)
        decls.append(Decl(pred, cols))
    return Program(tuple(rules), tuple(decls), a.program.text)


def _decl_type(dtype) -> str:
    return {"int64": "int", "float64": "float", "str": "str", "bool": "bool"}[dtype]


def _same_binding(lit, name, margs, adn) -> bool:
    """Whether ``lit`` is a positive ``name`` atom whose bound arguments are the head's, variable for
    variable."""
    if not (isinstance(lit, Atom) and not lit.negated and lit.pred == name):
        return False
    bound = tuple(x for x, c in zip(lit.args, adn) if c == "b")
    return all(isinstance(a, Var) and isinstance(b, Var) and a.name == b.name for a, b in zip(bound, margs))


def _is_bound(x, bound) -> bool:
    if isinstance(x, Const):
        return True
    if isinstance(x, (Var, BinOp)):
        vs = variables(x)
        return all(v.name in bound for v in vs) and not any(v.anonymous for v in vs)
    return False


def _binds(atom) -> set:
    """The variables a positive atom binds: its plain variable arguments. An expression argument
    (``e(x * z, b)``) binds none of its variables; it is a condition on them once bound."""
    return {x.name for x in atom.args if isinstance(x, Var) and not x.anonymous}


def _safe_prefix(body, upto) -> list:
    """The body so far, without the comparisons and negations whose variables it does not bind, and
    with ``_`` for an atom's expression argument that reads a variable it does not bind (dropping a
    condition from a magic rule only enlarges the magic set: still exact, a little more work)."""
    bound = set()
    for lit in body:
        if isinstance(lit, Atom) and not lit.negated:
            bound |= _binds(lit)
    kept, k = [], 0
    for lit in body:
        if isinstance(lit, Atom) and not lit.negated:
            args = []
            for x in lit.args:
                if isinstance(x, BinOp) and not {v.name for v in variables(x)} <= bound:
                    k += 1
                    x = Var(f"_#p{k}")
                args.append(x)
            kept.append(Atom(lit.pred, tuple(args), False, lit.span) if tuple(args) != lit.args else lit)
    changed = True
    rest = [lit for lit in body if not (isinstance(lit, Atom) and not lit.negated)]
    while changed:
        changed = False
        for lit in list(rest):
            vs = {v.name for v in variables(lit) if not (isinstance(lit, Atom) and v.anonymous)}
            if vs <= bound:
                kept.append(lit)
                rest.remove(lit)
                changed = True
            elif isinstance(lit, Comparison) and lit.op == "=":
                for t, e in ((lit.left, lit.right), (lit.right, lit.left)):
                    if isinstance(t, Var) and {v.name for v in variables(e)} <= bound:
                        kept.append(lit)
                        rest.remove(lit)
                        bound.add(t.name)
                        changed = True
                        break
    return kept


def parse_pattern(text: str, columns, dtypes) -> Pattern:
    """The goal in ``text``, parsed as programs are (constants, escapes, errors located in the goal), its
    constants checked against the relation's column types (``columns``/``dtypes``: pred -> lists; a
    relation that is not there is the caller's error)."""
    pred, raw, span_all = parse_goal(text)
    args, spans = [], []
    for i, x in enumerate(raw):
        span = getattr(x, "span", None)
        if x == ASK:
            args.append(ASKED)
        elif isinstance(x, Var) and hidden(x.name):
            args.append(ANY)
        elif isinstance(x, Const):
            args.append(x.value)
        else:
            raise datalog_error(text, span.line, span.column, "a goal argument is ? (asked), _ (any) or a "
                                "constant", span)
        spans.append(span)
    pattern = Pattern(pred, tuple(args), text, tuple(spans), span_all)
    if pred in dtypes and len(args) == len(dtypes[pred]):
        pattern = _typed(pattern, columns[pred], dtypes[pred])
    return pattern


def _typed(p: Pattern, columns, dtypes) -> Pattern:
    """``p`` with its constants checked against the columns (an int constant of a float column becomes a
    float): a goal constant of the wrong type would only fail deep in the rewritten program."""
    args = list(p.args)
    for i, (x, col, dt) in enumerate(zip(p.args, columns, dtypes)):
        if x is ASKED or x is ANY:
            continue
        kind = "str" if isinstance(x, str) else "float64" if isinstance(x, float) else "int64"
        if kind == dt or (kind == "int64" and dt == "float64"):
            args[i] = float(x) if dt == "float64" else x
            continue
        if kind == "float64" and dt == "int64" and x.is_integer() and INT64[0] <= x <= INT64[1]:
            args[i] = int(x)  # 1.0 of an int column is 1, as in a rule's atom and as g.ask(1.0) takes it
            continue
        if dt == "bool" and kind != "str" and x in (0, 1):  # the language has no bool literal: 1 is true and
            args[i] = bool(x)  # 0 false, as in a rule's atom (f(x, 1)) and as g.ask(1) takes them
            continue
        span = p.spans[i]
        want = {"int64": "an int", "float64": "a number", "str": "a string",
                "bool": "0 or 1 (false or true)"}.get(dt, dt)
        raise datalog_error(p.text, span.line, span.column, f"argument {i + 1} of the goal is {x!r}, but column "
                            f"{col!r} of {p.pred!r} is {dt}: the constant must be {want}", span)
    return Pattern(p.pred, tuple(args), p.text, p.spans, p.span)
