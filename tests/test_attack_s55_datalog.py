"""Attack (session 55) on the Datalog front end (issue 13): random programs of new shapes (mutual recursion,
negation over recursive relations, non-recursive aggregates over recursive ones, recursive min/max, also
mutually recursive mins, head constants, repeated variables, facts, string and float columns) against a
reference evaluator of this file's own (its own tokenizer and parser of the subset used, naive bottom-up,
strata by SCC), over insert/retract streams (insert-only epochs first, then retractions, duplicates with one
copy retracted, everything retracted and inserted again) at W = 1, 2, 3; goals of every binding pattern
with asks and retracts between input changes, the same binding asked twice, a binding never asked
retracted.

Bugs found, fixed in the same session: an ask made between the owner's advances of two inputs of the
program (one advanced, the other with rows buffered) stayed buffered in the goal's bindings input after the
owner's second advance completed the epoch, so ``eng.wait(g.view)`` returned without its answer until every
input advanced again (now ``Goal._led``, called through ``InputSession.when_led``, seals it); a goal asked
NaN missed rows the full relation has where the magic rewrite turns an assignment into a comparison (``=``
was NumPy's, NaN != NaN, while joins and sets hold NaN equal to itself; now ``=`` and ``!=`` are the join's).

Held: everything else here (random programs at every epoch and read back with ``at=``, goals of random
patterns with the inputs advanced before the asks or all buffered and advanced after them, keyed inputs,
variables named like internal columns or Python keywords).
"""
from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import pytest

import kpgnb as kp

WAIT_S = 60

# =====================================================================================================
# A small parser of the subset of the language this file writes (independent of kpgnb's lark grammar)
# =====================================================================================================

_TOK = re.compile(r'\s*(?:(:-)|(!=|<=|>=|==)|(\d+\.\d+|\d+)|("[^"]*")|([A-Za-z_][A-Za-z0-9_]*)|(.))')
AGGS = ("min", "max", "count", "sum", "avg", "countd")


def _tokens(text):
    out = []
    for line in text.split("\n"):
        line = line.split("//")[0]
        pos = 0
        while pos < len(line):
            m = _TOK.match(line, pos)
            if m is None or m.end() == pos:
                break
            pos = m.end()
            rule, op, num, s, name, ch = m.groups()
            if rule:
                out.append(("op", ":-"))
            elif op:
                out.append(("op", "=" if op == "==" else op))
            elif num:
                out.append(("c", float(num) if "." in num else int(num)))
            elif s:
                out.append(("c", s[1:-1]))
            elif name:
                out.append(("name", name))
            elif ch and not ch.isspace():
                out.append(("op", ch))
    return out


class _P:
    def __init__(self, toks):
        self.t, self.i, self.anon = toks, 0, itertools.count()

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else (None, None)

    def take(self, want=None):
        tok = self.t[self.i]
        self.i += 1
        if want is not None and tok[1] != want:
            raise SyntaxError(f"want {want} got {tok}")
        return tok

    def rules(self):
        out = []
        while self.i < len(self.t):
            head = self.atom(head=True)
            body = []
            if self.peek()[1] == ":-":
                self.take()
                body.append(self.literal())
                while self.peek()[1] == ",":
                    self.take()
                    body.append(self.literal())
            self.take(".")
            out.append((head, body))
        return out

    def atom(self, head=False):
        pred = self.take()[1]
        self.take("(")
        args = []
        while True:
            if head and self.peek()[1] in AGGS and self.peek(1)[1] == "<":
                f = self.take()[1]
                self.take("<")
                v = self.take()[1]
                self.take(">")
                args.append(("agg", f, v))
            else:
                args.append(self.expr())
            if self.peek()[1] == ",":
                self.take()
                continue
            self.take(")")
            return (pred, tuple(args))

    def literal(self):
        if self.peek()[1] in ("!", "not") and self.peek(1)[0] == "name" and self.peek(2)[1] == "(":
            self.take()
            p, a = self.atom()
            return ("neg", p, a)
        if self.peek()[0] == "name" and self.peek(1)[1] == "(":
            p, a = self.atom()
            return ("pos", p, a)
        left = self.expr()
        op = self.take()[1]
        right = self.expr()
        return ("cmp", op, left, right)

    def expr(self):
        e = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            e = ("bin", op, e, self.term())
        return e

    def term(self):
        e = self.factor()
        while self.peek()[1] in ("*", "/", "%"):
            op = self.take()[1]
            e = ("bin", op, e, self.factor())
        return e

    def factor(self):
        kind, v = self.take()
        if kind == "c":
            return ("c", v)
        if v == "(":
            e = self.expr()
            self.take(")")
            return e
        if v == "_":
            return ("v", f"_{next(self.anon)}")
        return ("v", v)


def parse_rules(text):
    return _P(_tokens(text)).rules()


# =====================================================================================================
# Reference: naive bottom-up evaluation
# =====================================================================================================

class _NoValue(Exception):
    pass


def _vars(e):
    if e[0] == "v":
        return {e[1]}
    if e[0] == "c":
        return set()
    if e[0] == "bin":
        return _vars(e[2]) | _vars(e[3])
    if e[0] == "agg":
        return {e[2]}
    raise AssertionError(e)


def _ev(e, b):
    if e[0] == "v":
        return b[e[1]]
    if e[0] == "c":
        return e[1]
    x, y = _ev(e[2], b), _ev(e[3], b)
    op = e[1]
    if op in "/%" and y == 0:
        raise _NoValue
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return x // y if isinstance(x, int) and isinstance(y, int) else x / y
    return x % y


def _cmp(op, x, y):
    return {"=": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def _anon(name):
    return name.startswith("_")


def _match(args, row, b):
    b = dict(b)
    for a, v in zip(args, row):
        if a[0] == "v" and _anon(a[1]):
            continue
        if a[0] == "v" and a[1] not in b:
            b[a[1]] = v
            continue
        try:
            if _ev(a, b) != v:
                return None
        except _NoValue:
            return None
    return b


def _solve(body, rel, b):
    if not body:
        yield b
        return
    # the first comparison or negation that is ready, else the first positive atom
    pick = None
    for i, lit in enumerate(body):
        if lit[0] == "cmp":
            lv, rv = _vars(lit[2]), _vars(lit[3])
            if (lv | rv) <= set(b) or (lit[1] == "=" and (
                    (lit[2][0] == "v" and lit[2][1] not in b and rv <= set(b)) or
                    (lit[3][0] == "v" and lit[3][1] not in b and lv <= set(b)))):
                pick = i
                break
        elif lit[0] == "neg":
            if all(v in b for a in lit[2] for v in _vars(a) if not _anon(v)):
                pick = i
                break
    if pick is None:
        pick = next(i for i, lit in enumerate(body) if lit[0] == "pos")
    lit, rest = body[pick], body[:pick] + body[pick + 1:]
    if lit[0] == "pos":
        for row in rel[lit[1]]:
            nb = _match(lit[2], row, b)
            if nb is not None:
                yield from _solve(rest, rel, nb)
    elif lit[0] == "neg":
        if not any(_match(lit[2], row, b) is not None for row in rel[lit[1]]):
            yield from _solve(rest, rel, b)
    else:
        _, op, l, r = lit
        try:
            if (_vars(l) | _vars(r)) <= set(b):
                if _cmp(op, _ev(l, b), _ev(r, b)):
                    yield from _solve(rest, rel, b)
            elif l[0] == "v" and l[1] not in b:
                yield from _solve(rest, rel, {**b, l[1]: _ev(r, b)})
            else:
                yield from _solve(rest, rel, {**b, r[1]: _ev(l, b)})
        except _NoValue:
            return


def _strata(rules, derived):
    deps = {p: set() for p in derived}
    for (hp, _), body in rules:
        for lit in body:
            if lit[0] in ("pos", "neg") and lit[1] in derived:
                deps[hp].add(lit[1])
    # SCCs by reachability (small programs), ordered dependencies first
    reach = {p: set() for p in derived}
    for p in derived:
        todo = list(deps[p])
        while todo:
            q = todo.pop()
            if q not in reach[p]:
                reach[p].add(q)
                todo += deps[q]
    comps, seen = [], set()
    for p in derived:
        if p in seen:
            continue
        comp = {p} | {q for q in reach[p] if p in reach[q]}
        seen |= comp
        comps.append(comp)
    order = []
    while comps:
        for c in comps:
            below = set().union(*(reach[p] for p in c)) - c
            if below <= set().union(set(), *order):
                order.append(c)
                comps.remove(c)
                break
    return [(c, any(q in reach[p] for p in c for q in c)) for c in order]


def _apply(rules_of, rel):
    """Each predicate's relation from its rules over ``rel``."""
    out = {}
    for pred, rules in rules_of.items():
        agg = [i for i, a in enumerate(rules[0][0][1]) if a[0] == "agg"]
        rows = []
        for (hp, hargs), body in rules:
            if not agg:
                for b in _solve(body, rel, {}):
                    try:
                        rows.append(tuple(_ev(a, b) for a in hargs))
                    except _NoValue:
                        pass
            else:
                seen = set()
                for b in _solve(body, rel, {}):
                    key = tuple(sorted((k, v) for k, v in b.items() if not _anon(k)))
                    if key in seen:
                        continue
                    seen.add(key)
                    try:
                        rows.append(tuple(b[a[2]] if a[0] == "agg" else _ev(a, b) for a in hargs))
                    except _NoValue:
                        pass
        if not agg:
            out[pred] = set(rows)
            continue
        funcs = {i: a[1] for i, a in enumerate(rules[0][0][1]) if a[0] == "agg"}
        groups = {}
        for r in rows:
            groups.setdefault(tuple(v for i, v in enumerate(r) if i not in funcs), []).append(r)
        res = set()
        for g, rs in groups.items():
            it = iter(g)
            row = []
            for i in range(len(rules[0][0][1])):
                if i not in funcs:
                    row.append(next(it))
                    continue
                vals = [r[i] for r in rs]
                f = funcs[i]
                row.append(min(vals) if f == "min" else max(vals) if f == "max" else len(vals) if f == "count"
                           else sum(vals) if f == "sum" else sum(vals) / len(vals) if f == "avg"
                           else len(set(vals)))
            res.add(tuple(row))
        out[pred] = res
    return out


def reference(text, inputs, max_rounds=500):
    """Derived predicate -> set of rows. ``inputs``: predicate -> set of rows (present rows)."""
    rules = parse_rules(text)
    derived = list(dict.fromkeys(h[0] for h, _ in rules))
    rel = {p: set(rows) for p, rows in inputs.items()}
    for comp, rec in _strata(rules, derived):
        rules_of = {p: [r for r in rules if r[0][0] == p] for p in derived if p in comp}
        for p in comp:
            rel[p] = set()
        if not rec:
            rel.update(_apply(rules_of, rel))
            continue
        for _ in range(max_rounds):
            new = _apply(rules_of, rel)
            if all(new[p] == rel[p] for p in comp):
                break
            rel.update(new)
        else:
            raise RuntimeError("reference: no fixed point")
    return {p: rel[p] for p in derived}


# =====================================================================================================
# Comparing
# =====================================================================================================

def _py(v):
    return v.item() if hasattr(v, "item") else v


def norm(rows):
    out = []
    for r in rows:
        out.append(tuple(("s", v) if isinstance(v, str) else ("n", round(float(_py(v)), 9)) for v in r))
    return sorted(out)


def view_rows(view):
    df = view.to_pandas()
    return norm(df.itertuples(index=False, name=None))


def test_reference_sanity():
    text = ("a(x, y) :- e(x, y).\nb(x, y) :- a(x, z), e(z, y), x != y.\na(x, y) :- b(y, x).\n"
            "na(x) :- n(x), !a(x, _).\nc(x, count<y>, max<y>) :- a(x, y).\n"
            "sp(y, min<d>) :- n(y), y = 1, d = 0.\nsp(y, min<d>) :- sp(x, d1), e(x, y), d = d1 + 1.\n"
            "f(3, 4).\nq(v) :- v = 7 / 2.\nr(x) :- e(x, x).\n")
    got = reference(text, {"e": {(1, 2), (2, 3), (4, 4)}, "n": {(1,), (5,)}})
    assert got["a"] == {(1, 2), (2, 3), (3, 1), (4, 4)} and got["b"] == {(1, 3), (3, 2)}
    assert got["na"] == {(5,)}
    assert got["sp"] == {(1, 0), (2, 1), (3, 2)}
    assert got["f"] == {(3, 4)} and got["q"] == {(3,)} and got["r"] == {(4,)}
    assert got["c"] == {(1, 1, 2), (2, 1, 3), (3, 1, 1), (4, 1, 4)}


# =====================================================================================================
# Random programs and streams
# =====================================================================================================

INPUTS = {"e": ("int64", "int64"), "n": ("int64",), "s": ("str", "int64"), "w": ("int64", "int64", "float64")}
STRS = ["a", "b", "c", "ab"]
FLOATS = [0.5, 1.0, 2.5]


def _value(rng, t):
    return rng.randrange(6) if t == "int64" else rng.choice(FLOATS) if t == "float64" else rng.choice(STRS)


# (text with {P} the name, {Q} an earlier int-int relation, {U} an earlier int relation, {k}, {m} small ints;
#  what it makes: (suffix, kind) with kind "bin" int-int set, "un" int set, "" anything else)
TEMPLATES = [
    # mutual recursion
    ("{P}a(x, y) :- {Q}(x, y).\n{P}b(x, y) :- {P}a(x, z), e(z, y), x != y.\n{P}a(x, y) :- {P}b(y, x).",
     [("a", "bin"), ("b", "bin")]),
    ("{P}ev(x, x) :- {U}(x).\n{P}od(x, y) :- {P}ev(x, z), e(z, y).\n{P}ev(x, y) :- {P}od(x, z), e(z, y).",
     [("ev", "bin"), ("od", "bin")]),
    ("{P}x(x) :- {U}(x), x < {k}.\n{P}y(y) :- {P}x(x), {Q}(x, y).\n{P}x(y) :- {P}y(x), e(y, x).",
     [("x", "un"), ("y", "un")]),
    # plain recursion with head constants, repeated variables, facts
    ("{P}(x, {k}) :- {U}(x).\n{P}(y, c) :- {P}(x, c), e(x, y).", [("", "bin")]),
    ("{P}(x, x) :- {U}(x).\n{P}(x, z) :- {P}(x, y), {Q}(y, z).", [("", "bin")]),
    ("{P}(x) :- e(x, x).\n{P}(y) :- {P}(x), e(x, y), !e(y, y).", [("", "un")]),
    ("{P}({k}, {m}).\n{P}({m}, 5).\n{P}(x, y) :- {P}(y, z), e(z, x).", [("", "bin")]),
    ("{P}(v) :- v = {k} * 2 % 6.\n{P}(y) :- {P}(x), e(x, y).", [("", "un")]),
    ("{P}(x, y) :- {Q}(x, y), x < y.\n{P}(x, z) :- {P}(x, y), {P}(y, z).", [("", "bin")]),
    ("{P}(l, x) :- s(l, x), l < \"b\".\n{P}(l, y) :- {P}(l, x), e(x, y), l != \"c\".", [("", "")]),
    # stratified negation over recursive relations
    ("{P}(x) :- n(x), !{Q}(x, _).", [("", "un")]),
    ("{P}(x, y) :- {Q}(x, y), !{Q}(y, x).", [("", "bin")]),
    ("{P}(x) :- {U}(x), !{Q}(x, x).", [("", "un")]),
    ("{P}(x) :- n(x), !{Q}(_, x), !{Q}({k}, x).", [("", "un")]),
    ("{P}(x) :- n(x), !{U}(x).\n{P}(y) :- {P}(x), e(x, y).", [("", "un")]),
    ("{P}(x) :- n(x), e(_, _), !{Q}(_, _).", [("", "un")]),
    # aggregates over recursive relations (and over aggregates)
    ("{P}(x, count<y>) :- {Q}(x, y).", [("", "bin")]),
    ("{P}(x, sum<y>, min<y>, max<y>) :- {Q}(x, y).", [("", "")]),
    ("{P}(y, avg<x>, countd<x>) :- {Q}(x, y).", [("", "")]),
    ("{P}(count<x>) :- {U}(x).", [("", "un")]),
    ("{P}(l, countd<x>, count<x>) :- s(l, x).", [("", "")]),
    ("{P}(x, sum<c>) :- w(x, _, c).", [("", "")]),
    ("{P}(x, max<y>) :- {Q}(x, y), y > {k}.", [("", "bin")]),
    ("{P}({k}, sum<y>) :- {Q}(_, y).", [("", "bin")]),
    ("{P}(x % 2, count<y>) :- {Q}(x, y).", [("", "bin")]),
    ("{P}(l, min<x>, max<x>) :- s(l, x), {U}(x).", [("", "")]),
    ("{P}(x) :- {Q}(x, c), c > 1.", [("", "un")]),
    # recursive min / max
    ("{P}(y, min<d>) :- n(y), y = {k}, d = 0.\n{P}(y, min<d>) :- {P}(x, d1), e(x, y), d = d1 + 1.",
     [("", "bin")]),
    ("{P}(x, min<l>) :- s(l, x).\n{P}(y, min<l>) :- {P}(x, l), e(x, y).", [("", "")]),
    ("{P}(y, min<d>) :- n(y), y < {k}, d = 0.0.\n{P}(y, min<d>) :- {P}(x, d1), w(x, y, c), d = d1 + c.",
     [("", "")]),
    ("{P}(y, max<d>) :- n(y), d = 0.\n{P}(y, max<d>) :- {P}(x, d1), e(x, y), x < y, d = d1 + 1.",
     [("", "bin")]),
    ("{P}(y, min<d>) :- n(y), d = y.\n{P}(y, min<d>) :- {P}(x, d1), e(x, y), d1 < {k}, d = d1 + 2.",
     [("", "bin")]),
    ("{P}a(y, min<d>) :- n(y), d = y * 2.\n{P}b(y, min<d>) :- {P}a(x, d), e(x, y).\n"
     "{P}a(y, min<d>) :- {P}b(y, d1), d = d1 + 1.", [("a", "bin"), ("b", "bin")]),
    ("{P}(x, min<l>) :- {U}(x), l = x.\n{P}(y, min<l>) :- {P}(x, l), {Q}(x, y).", [("", "bin")]),
    # arithmetic, comparisons, floats
    ("{P}(x, z) :- e(x, y), z = (x + y) % 4, z != {k}.", [("", "bin")]),
    ("{P}(x, q) :- {Q}(x, y), q = x / y.", [("", "bin")]),
    ("{P}(x, y) :- w(x, y, c), c >= 1.0, x + 0.5 < y.", [("", "bin")]),
    ("{P}(x, c * 2.0) :- w(x, y, c), {U}(y).", [("", "")]),
]


def gen_program(seed, n=4):
    rng = random.Random(seed)
    lines, bins, uns = [], ["e"], ["n"]
    for i in range(n):
        text, makes = rng.choice(TEMPLATES)
        name = f"p{i}"
        k = rng.randrange(1, 5)
        lines.append(text.format(P=name, Q=rng.choice(bins), U=rng.choice(uns), k=k, m=rng.randrange(6)))
        for suffix, kind in makes:
            (bins if kind == "bin" else uns if kind == "un" else []).append(name + suffix)
    return "\n".join(lines) + "\n"


def gen_stream(seed, epochs=7):
    """Per epoch, per input: (rows, diffs). Insertions only first (duplicates too), then retractions of
    present rows (one copy of a duplicate), now and then of absent ones, one epoch retracting everything,
    and re-insertions of what was retracted."""
    rng = random.Random(seed * 7919 + 1)
    state = {p: Counter() for p in INPUTS}
    retracted = {p: [] for p in INPUTS}
    out = []
    wipe = rng.randrange(epochs // 2, epochs - 1)
    for ep in range(epochs):
        step = {}
        for p, ts in INPUTS.items():
            rows, diffs = [], []
            if ep == wipe:
                for r, c in state[p].items():
                    if c > 0:
                        rows.append(r)
                        diffs.append(-c)
                        retracted[p].append(r)
            else:
                for _ in range(rng.randint(0, 4 if ep == 0 else 3)):
                    rows.append(tuple(_value(rng, t) for t in ts))
                    diffs.append(rng.choice([1, 1, 2]))
                if ep >= 2:
                    live = sorted(r for r, c in state[p].items() if c > 0)
                    for _ in range(rng.randint(0, 2)):
                        if live and rng.random() < 0.85:
                            r = rng.choice(live)
                            rows.append(r)
                            diffs.append(-1)
                            retracted[p].append(r)
                        else:
                            rows.append(tuple(_value(rng, t) for t in ts))
                            diffs.append(-1)
                if ep > wipe and retracted[p]:
                    take = retracted[p][:4]
                    del retracted[p][:4]
                    rows += take
                    diffs += [1] * len(take)
            for r, d in zip(rows, diffs):
                state[p][r] += d
            step[p] = (rows, diffs)
        out.append(step)
    return out


def initial_rows(seed):
    rng = random.Random(seed * 104729 + 3)
    return {p: [tuple(_value(rng, t) for t in ts) for _ in range(8 if len(ts) > 1 else 4)]
            for p, ts in INPUTS.items()}


def present(state):
    return {p: {r for r, c in cnt.items() if c > 0} for p, cnt in state.items()}


def load(eng, init):
    ses, st = {}, {}
    for p, ts in INPUTS.items():
        ses[p] = eng.input(p, [f"c{i}" for i in range(len(ts))], dtypes=list(ts), rows=init[p])
        ses[p].advance_to(1)
        st[p] = Counter(init[p])
    return ses, st


def apply_step(ses, st, step, epoch):
    for p, (rows, diffs) in step.items():
        if rows:
            ses[p].update(rows, diffs)
            for r, d in zip(rows, diffs):
                st[p][r] += d
    for s in ses.values():
        s.advance_to(epoch)


def check_all(prog, st, text, where):
    want = reference(text, present(st))
    for pred, rows in want.items():
        got = view_rows(prog[pred])
        assert got == norm(rows), (where, pred, text)


# =====================================================================================================
# Goals
# =====================================================================================================

def domain(t):
    return list(range(6)) if t == "int64" else FLOATS if t == "float64" else STRS


def goal_patterns(rng, types, k=3):
    """Up to ``k`` patterns over columns of ``types``: ? (asked), _ or a constant per argument, at least
    one ? each."""
    out = set()
    for _ in range(20):
        args = []
        for t in types:
            r = rng.random()
            args.append("?" if r < 0.5 else "_" if r < 0.8 else rng.choice(domain(t)))
        if "?" not in args:
            args[rng.randrange(len(args))] = "?"
        out.add(tuple(args))
        if len(out) >= k:
            break
    return sorted(out, key=repr)


def pattern_text(pred, args):
    return f"{pred}(" + ", ".join(a if a in ("?", "_") else f'"{a}"' if isinstance(a, str) else repr(a)
                                  for a in args) + ")"


def filtered(rows, args, asked):
    qs = [i for i, a in enumerate(args) if a == "?"]
    out = set()
    for r in rows:
        if any(a not in ("?", "_") and r[i] != a for i, a in enumerate(args)):
            continue
        if tuple(r[i] for i in qs) in asked:
            out.add(r)
    return out


# =====================================================================================================
# Held: random programs over streams, checked at every epoch
# =====================================================================================================

def drive_program(seed, workers, n=5):
    text = gen_program(seed, n)
    with kp.Engine(workers=workers) as eng:
        ses, st = load(eng, initial_rows(seed))
        prog = eng.datalog(text, name="P")
        eng.wait("P", timeout=WAIT_S)
        check_all(prog, st, text, ("start", seed))
        for ep, step in enumerate(gen_stream(seed), start=2):
            apply_step(ses, st, step, ep)
            eng.wait("P", timeout=WAIT_S)
            check_all(prog, st, text, (ep, seed))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 12, 205, 231])
def test_random_programs_through_insert_retract_wipe_reinsert(seed, workers):
    """Mutual recursion, negation over recursive relations, aggregates over them, recursive min/max
    (mutually recursive mins too), head constants, repeated variables, facts, str and float columns,
    read at every epoch of a stream with duplicates, one copy of a duplicate retracted, absent rows
    retracted, everything retracted and inserted again."""
    drive_program(seed, workers, n=5 + seed % 3)


@pytest.mark.parametrize("seed", [301, 305, 317])
def test_random_programs_read_back_at_every_epoch_after_one_wait(seed):
    """The whole stream written without waiting, each epoch read back with ``at=`` (``history=``)."""
    text = gen_program(seed, 6)
    with kp.Engine(workers=3) as eng:
        ses, st = load(eng, initial_rows(seed))
        prog = eng.datalog(text, name="P", history=20)
        snaps = [present(st)]
        for ep, step in enumerate(gen_stream(seed, 9), start=2):
            apply_step(ses, st, step, ep)
            snaps.append(present(st))
        eng.wait("P", timeout=WAIT_S)
        for i, snap in enumerate(snaps):
            for pred, rows in reference(text, snap).items():
                df = prog[pred].to_pandas(at=i)
                assert norm(df.itertuples(index=False, name=None)) == norm(rows), (i, pred, text)


NAME_PROGRAMS = [
    "p(count, count<y>) :- e(count, y).",
    "p(n_y, avg<y>) :- e(n_y, y).",
    "p(class, lambda) :- e(class, lambda).\nq(None, min<True>) :- p(None, True).",
    "p(sum<y>, count<y>, avg<y>) :- e(_, y).",
    "p(min<y>, max<y>) :- e(y, _), y > 2.",
    "p(v_x, y) :- e(v_x, y).\nq(x, v1_y) :- p(x, v1_y), e(v1_y, x).",
    "p(x, x, y) :- e(x, y).\nq(a, c) :- p(a, a, c), p(c, c, a).",
    "p(x) :- e(x, x), e(x, x).\nq(x) :- e(x, y), e(y, x), x = y.",
    "p(l, sum<c>, countd<c>) :- s(l, x), w(x, _, c).",
    "p(c, count<x>) :- w(x, _, c).\nq(c, min<d>) :- p(c, d), c > 0.6.",
    "p(x, min<l>) :- s(l, x).\np(y, min<l>) :- p(x, l), e(x, y), l != \"b\".",
    "p(x, max<l>) :- s(l, x).\np(y, max<l>) :- p(x, l), e(x, y).",
    "p(y, max<d>) :- w(y, _, d).\np(y, max<d>) :- p(x, d1), w(x, y, c), d = d1 * 0.5 + c * 0.0.",
    "r(x) :- n(x).\nr(y) :- r(x), e(x, y).\nu(x) :- e(x, _), !r(x).\nu(x) :- e(_, x), !r(x).\nc(count<x>) :- u(x).",
    "p(x, y) :- e(x, y), !q(y).\nq(y) :- n(y), !e(y, _).",
    "a(x) :- n(x), x < 3.\nb(x) :- a(x).\na(x) :- b(y), e(y, x).\nc(x) :- n(x), !a(x), !b(x).",
]


@pytest.mark.parametrize("i", range(len(NAME_PROGRAMS)))
def test_variables_named_like_internal_columns_and_keywords(i):
    """Variables named ``count``, ``n_y`` (the columns avg's count makes), ``v_x`` (the compiler's
    prefix), Python keywords; several aggregates with no group; repeated variables."""
    text = NAME_PROGRAMS[i]
    with kp.Engine(workers=1 + i % 3) as eng:
        ses, st = load(eng, initial_rows(i))
        prog = eng.datalog(text, name="P")
        eng.wait("P", timeout=WAIT_S)
        check_all(prog, st, text, "start")
        for ep, step in enumerate(gen_stream(i), start=2):
            apply_step(ses, st, step, ep)
            eng.wait("P", timeout=WAIT_S)
            check_all(prog, st, text, ep)


# =====================================================================================================
# Held: goals of random patterns, asks and retracts between input changes
# =====================================================================================================

def drive_goals(seed, workers, n, buffered):
    """Goals of random binding patterns over a random program (materialized or not); per epoch, asks and
    retracts (the same binding twice, bindings never asked), then the input changes. ``buffered``: the
    changes are inserted before the asks and every input advanced after them (the binding goes in with
    them), else all inputs are advanced before the asks."""
    text = gen_program(seed, n)
    rng = random.Random(seed)
    with kp.Engine(workers=workers) as eng:
        ses, st = load(eng, initial_rows(seed))
        prog = eng.datalog(text, name="P", materialize=rng.random() < 0.6)
        a = prog.analysis
        goals = []
        preds = list(a.derived)
        for pred in rng.sample(preds, min(3, len(preds))):
            for args in goal_patterns(rng, a.dtypes[pred], 2):
                goals.append((prog.goal(pattern_text(pred, args)), pred, args, set()))
        stream = gen_stream(seed)
        epoch = 1
        for step in stream + [None]:
            if step is not None:
                epoch += 1
                for p in INPUTS:
                    rows, diffs = step[p]
                    if rows:
                        ses[p].update(rows, diffs)
                        for r, d in zip(rows, diffs):
                            st[p][r] += d
                if not buffered:
                    for s in ses.values():
                        s.advance_to(max(epoch, s.epoch))
            for g, pred, args, asked in goals:
                types = [t for t, x in zip(a.dtypes[pred], args) if x == "?"]
                for _ in range(rng.randint(0, 3)):
                    b = tuple(rng.choice(domain(t)) for t in types)
                    if rng.random() < 0.7:
                        g.ask(*b)
                        asked.add(b)
                    else:
                        g.retract(*b)
                        asked.discard(b)
            if buffered:
                for s in ses.values():
                    s.advance_to(max(epoch, s.epoch))
            want = reference(text, present(st))
            for g, pred, args, asked in goals:
                eng.wait(g.view, timeout=WAIT_S)
                assert view_rows(g.view) == norm(filtered(want[pred], args, asked)), \
                    (epoch, pattern_text(pred, args), sorted(asked), text)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 13, 28])
def test_goals_of_random_patterns_between_input_changes(seed, workers):
    drive_goals(seed, workers, 4 + seed % 3, buffered=False)


@pytest.mark.parametrize("seed", [0, 9, 19])
def test_goals_asked_while_every_input_has_changes_buffered(seed):
    drive_goals(seed, 2, 4, buffered=True)


def _goal_rows(eng, g):
    eng.wait(g.view, timeout=WAIT_S)
    return sorted(tuple(_py(v) for v in r) for r in g.view.to_pandas().itertuples(index=False, name=None))


def test_goal_bindings_are_a_set_through_buffered_changes_and_duplicates():
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2), (3, 4)])
        n = eng.input("n", ["a"], rows=[(1,)])
        e.advance_to(1)
        n.advance_to(1)
        prog = eng.datalog("p(x, y) :- e(x, y).\np(x, z) :- p(x, y), e(y, z).\nq(x) :- n(x).\n", name="P")
        g = prog.goal("p(?, _)")
        e.insert([(2, 3)])
        g.ask(1)
        g.retract(1)  # asked and retracted before the changes are sealed: nothing
        e.advance_to(2)
        n.advance_to(2)
        assert _goal_rows(eng, g) == []
        g.ask(1)
        g.ask(1)
        g.retract(9)  # never asked
        assert _goal_rows(eng, g) == [(1, 2), (1, 3), (1, 4)]
        e.insert([(5, 1), (5, 1)])  # twice, then one copy retracted: still there
        e.advance_to(3)
        n.advance_to(3)
        e.remove([(5, 1)])
        e.advance_to(4)
        n.advance_to(4)
        g.ask(5)
        assert _goal_rows(eng, g) == [(1, 2), (1, 3), (1, 4), (5, 1), (5, 2), (5, 3), (5, 4)]
        e.remove([(1, 2), (5, 1)])  # everything of 1 and 5 gone
        g.retract(1)
        g.ask(1)
        e.advance_to(5)
        n.advance_to(5)
        assert _goal_rows(eng, g) == []
        e.insert([(1, 2), (5, 1)])  # and back
        e.advance_to(6)
        n.advance_to(6)
        assert _goal_rows(eng, g) == [(1, 2), (1, 3), (1, 4), (5, 1), (5, 2), (5, 3), (5, 4)]
        g2 = prog.goal("p(_, ?)")
        g2.ask(4)
        assert _goal_rows(eng, g2) == [(1, 4), (2, 4), (3, 4), (5, 4)]
        g3 = prog.goal("p(?, ?)")
        g3.ask(1, 4)
        g3.ask((2, 2))
        assert _goal_rows(eng, g3) == [(1, 4)]
        e.close()
        n.close()
        g2.ask(2)
        assert _goal_rows(eng, g2) == [(1, 2), (1, 4), (2, 4), (3, 4), (5, 2), (5, 4)]


# =====================================================================================================
# Bugs
# =====================================================================================================

@pytest.mark.parametrize("first", ["e", "n"])
def test_ask_between_the_owners_advances_is_answered_once_they_are_done(first):
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2)])
        n = eng.input("n", ["a"], rows=[(1,)])
        e.advance_to(1)
        n.advance_to(1)
        prog = eng.datalog("p(x, y) :- e(x, y), n(x).\np(x, y) :- e(x, y), x = 3.\n", name="P")
        g = prog.goal("p(?, _)")
        e.insert([(3, 3)])
        n.insert([(5,)])
        order = [e, n] if first == "e" else [n, e]
        order[0].advance_to(2)   # one input of the epoch advanced,
        g.ask(3)                 # an ask,
        order[1].advance_to(2)   # the other: every input is at 2, nothing buffered
        eng.wait(prog["p"], timeout=WAIT_S)
        assert sorted(map(tuple, prog["p"].to_pandas().values.tolist())) == [(1, 2), (3, 3)]
        assert _goal_rows(eng, g) == [(3, 3)]   # (got [] until e and n advance again)


def test_goal_asked_nan_matches_the_relation_filtered_to_nan():
    nan = float("nan")
    with kp.Engine(workers=1) as eng:
        v = eng.input("v", ["k", "c"], dtypes=["int64", "float64"], rows=[(1, nan), (3, 1.0)])
        v.advance_to(1)
        prog = eng.datalog("s(x, d) :- v(x, c), d = c + 0.0.\n", name="P")
        eng.wait(prog["s"], timeout=WAIT_S)
        full = prog["s"].to_pandas()
        assert len(full) == 2 and full["d"].isna().sum() == 1   # the full relation holds (1, NaN)
        g = prog.goal("s(_, ?)")
        g.ask(1.0)
        g.ask(nan)
        eng.wait(g.view, timeout=WAIT_S)
        assert sorted(g.view.to_pandas()["x"].tolist()) == [1, 3]   # (got [3]: the NaN binding answers nothing)


def test_nan_joins_itself_in_a_shared_variable():
    """A variable shared by two atoms joins NaN with NaN, and so do an explicit ``c = d`` and a repeated
    variable (``=`` is the join's equality; it was NumPy's, NaN != NaN, until session 55), so that a goal's
    magic set, which turns assignments into comparisons, answers as the full relation does."""
    nan = float("nan")
    with kp.Engine(workers=1) as eng:
        v = eng.input("v", ["k", "c"], dtypes=["int64", "float64"], rows=[(1, nan), (2, nan)])
        v.advance_to(1)
        prog = eng.datalog("j(x, y) :- v(x, c), v(y, c), x < y.\nk(x, y) :- v(x, c), v(y, d), c = d, x < y.\n"
                           "u(x, y) :- v(x, c), v(y, d), c != d.\nr(x) :- w(x, c, c).\nw(x, c, d) :- v(x, c), d = c.\n"
                           "o(x) :- v(x, c), c < 1.0.\no(x) :- v(x, c), c >= 1.0.\n", name="P")
        eng.wait("P", timeout=WAIT_S)
        assert prog["j"].to_pandas().values.tolist() == [[1, 2]]
        assert prog["k"].to_pandas().values.tolist() == [[1, 2]]
        assert prog["u"].to_pandas().values.tolist() == []
        assert sorted(prog["r"].to_pandas()["x"].tolist()) == [1, 2]  # (a repeated variable holds NaN twice)
        assert prog["o"].to_pandas().values.tolist() == []  # (NaN is unordered: neither < nor >=)
