"""Magic sets: a program rewritten for one query predicate and binding pattern (``tc(?, _)``), so that
only facts relevant to the bound values are derived. Rules are adorned left to right (sideways
information passing in body order); each adorned predicate ``p__bf`` gets a magic predicate ``m__p__bf``
holding the bound values it is asked for, seeded from the goal's input of asked bindings.

Derived predicates that are read negated, or with no argument bound, are not rewritten: they are the
full program's relations (imported from its exports). Aggregated arguments are never bound (a min is not
known before it is computed); bound group arguments restrict whole groups, which keeps aggregates exact."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .analysis import Analysis
from .syntax import Atom, BinOp, Comparison, Const, Decl, Program, Rule, Var, variables

GOAL = "goal__"      # the input of asked bindings (one column per '?')
ANSWER = "answer__"  # the asked predicate's rows for the asked bindings


@dataclass(frozen=True)
class Pattern:
    """A goal such as ``tc(?, _)`` or ``path(3, ?, _)``: per argument '?', '_' or a constant."""
    pred: str
    args: tuple

    @property
    def asked(self) -> list:
        return [i for i, a in enumerate(self.args) if a == "?"]


def rewrite(a: Analysis, pattern: Pattern) -> tuple:
    """(rewritten rules, names of the original derived predicates they read whole, the generated
    predicates: name -> (original predicate, the argument positions it keeps))."""
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
    taken = set(derived) | set(a.inputs) | {GOAL, ANSWER}

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
    qbound = {i for i, x in enumerate(pattern.args) if x != "_"}
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
            m_atom = Atom(magic, margs, False, r.head.span)
            bound = {v.name for x in margs for v in variables(x)}
            body = [m_atom]
            for lit in r.body:
                if isinstance(lit, Atom) and lit.pred in derived:
                    if lit.negated:
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
                    bound |= {v.name for v in variables(lit)}
                elif isinstance(lit, Comparison) and lit.op == "=":
                    for t, e in ((lit.left, lit.right), (lit.right, lit.left)):
                        if isinstance(t, Var) and all(v.name in bound for v in variables(e)):
                            bound.add(t.name)
            if any(_same_binding(lit, generated("", pred, adn), margs, adn) for lit in body[1:]):
                # a recursive atom bound like the head: its facts are all for asked values already, so
                # the magic join would filter nothing (every round)
                body = body[1:]
            out.append(Rule(Atom(generated("", pred, adn), head_args, False, r.head.span), tuple(body), r.span))

    # the seed and the answer
    gvars = {i: Var(f"g{i}") for i in pattern.asked}
    args = []
    for i, x in enumerate(pattern.args):
        args.append(gvars[i] if x == "?" else Var(f"_q{next(fresh)}") if x == "_" else Const(x))
    goal_atom = Atom(GOAL, tuple(gvars[i] for i in pattern.asked))
    if qadn is not None and "b" in qadn:
        margs = tuple(args[i] for i, c in enumerate(qadn) if c == "b")
        out.append(Rule(Atom(generated("m", query, qadn), margs), (goal_atom,) if gvars else ()))
    answer_body = [goal_atom, Atom(target, tuple(args))] if gvars else [Atom(target, tuple(args))]
    out.append(Rule(Atom(ANSWER, tuple(args)), tuple(answer_body)))
    return out, whole, names


def program_for(a: Analysis, pattern: Pattern, rules, names: dict) -> Program:
    """The rewritten rules with declarations giving every generated predicate (``names``, from
    ``rewrite``) the original's columns."""
    decls = []
    for pred in {r.head.pred for r in rules}:
        if pred in names:
            base, keep = names[pred]
        else:
            base = pattern.pred if pred == ANSWER else pred
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


def _safe_prefix(body, upto) -> list:
    """The body so far, without the comparisons and negations whose variables it does not bind (dropping
    a filter from a magic rule only enlarges the magic set: still exact, a little more work)."""
    bound, kept = set(), []
    for lit in body:
        if isinstance(lit, Atom) and not lit.negated:
            kept.append(lit)
            bound |= {v.name for v in variables(lit)}
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


def parse_pattern(text: str) -> Pattern:
    import re
    m = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*\((.*)\)\s*\.?\s*", text or "")
    if not m:
        raise ValueError("expected a goal like tc(?, _): the predicate, then per argument ? (asked), _ "
                         "(any) or a constant")
    args = []
    for raw in _split_args(m.group(2)):
        s = raw.strip()
        if s in ("?", "_"):
            args.append(s)
        elif len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
            args.append(s[1:-1])
        else:
            try:
                args.append(int(s))
            except ValueError:
                try:
                    args.append(float(s))
                except ValueError:
                    raise ValueError(f"goal argument {s!r}: expected ?, _ or a constant") from None
    return Pattern(m.group(1), tuple(args))


def _split_args(s: str) -> list:
    parts, cur, quote = [], "", None
    for ch in s:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts
