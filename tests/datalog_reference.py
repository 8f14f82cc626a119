"""An independent reference evaluator for kpgnb's Datalog, and a generator of random stratified programs.

``evaluate(text, inputs)`` is naive bottom-up evaluation over Python sets of tuples: strata (strongly
connected components of the predicate graph, computed here with networkx) in dependency order; within a
stratum T_{i+1} = F(T_i) from empty until nothing changes, where F applies every rule of the stratum to the
current relations (bindings as dicts, one nested loop per body literal) and then takes each predicate's
set (or aggregate). For positive recursion this is the least fixpoint; for recursive min/max it is what
the engine's iterate computes (the least fixpoint for monotone programs such as shortest paths).

Only the parser's AST is shared with the engine (``kpgnb.datalog.parser.parse``); safety, strata and
evaluation are independent.

Semantics (the front end's definitions):
- relations are sets; an input row is present when its net multiplicity is > 0;
- ``!p(...)``: no row of p matches (each ``_`` in it is existential);
- ``x = expr`` binds x when x is unbound, else compares; int/int ``/`` is floor division, ``%`` is Python's;
- aggregates in the head: per rule, the body's satisfying bindings of its named variables form a set;
  each gives one head row; the rows of all the predicate's rules (a multiset) are grouped by the
  non-aggregate head arguments; count = rows in the group, sum, avg = sum/count (float), countd = distinct
  values, min, max; a group with no rows has no output row.
"""
from __future__ import annotations

import math
import random
from collections import Counter

import networkx as nx

from kpgnb.datalog.parser import parse
from kpgnb.datalog.syntax import Aggregate, Atom, BinOp, Comparison, Const, Var

MAX_ROUNDS = 10_000


class ReferenceError_(Exception):
    pass


# -- evaluation -------------------------------------------------------------------------------------

def _value(e, b):
    if isinstance(e, Var):
        return b[e.name]
    if isinstance(e, Const):
        return e.value
    if isinstance(e, BinOp):
        left, right = _value(e.left, b), _value(e.right, b)
        if e.op == "+":
            return left + right
        if e.op == "-":
            return left - right
        if e.op == "*":
            return left * right
        if e.op == "/":
            if isinstance(left, int) and isinstance(right, int):
                return left // right
            return left / right
        if e.op == "%":
            return left % right
    raise ReferenceError_(f"not an expression: {e!r}")


def _vars(e) -> set:
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, Const):
        return set()
    if isinstance(e, (BinOp, Comparison)):
        return _vars(e.left) | _vars(e.right)
    if isinstance(e, Atom):
        return set().union(*(_vars(a) for a in e.args)) if e.args else set()
    if isinstance(e, Aggregate):
        return {e.var.name}
    raise ReferenceError_(f"? {e!r}")


def _anon(name: str) -> bool:
    return name.startswith("_#")


_CMP = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _match(atom, row, b):
    """The binding ``b`` extended so that ``atom`` matches ``row``, or None."""
    out = dict(b)
    for a, v in zip(atom.args, row):
        if isinstance(a, Var):
            if a.name in out:
                if out[a.name] != v:
                    return None
            else:
                out[a.name] = v
        else:  # a constant or an expression over bound variables
            try:
                if _value(a, out) != v:
                    return None
            except ZeroDivisionError:  # no value: nothing matches
                return None
    return out


def _ready(lit, bound) -> bool:
    if isinstance(lit, Atom) and not lit.negated:
        # an expression argument needs its variables bound
        return all(isinstance(a, (Var, Const)) or _vars(a) <= bound for a in lit.args)
    if isinstance(lit, Atom):
        return all(n in bound for n in _vars(lit) if not _anon(n))
    if isinstance(lit, Comparison):
        if _vars(lit) <= bound:
            return True
        if lit.op == "=":
            for t, e in ((lit.left, lit.right), (lit.right, lit.left)):
                if isinstance(t, Var) and t.name not in bound and _vars(e) <= bound:
                    return True
        return False
    raise ReferenceError_(f"? {lit!r}")


def _order(body):
    """An evaluation order: filters, assignments and negations as soon as ready, else the next atom."""
    pending, bound, order = list(body), set(), []
    while pending:
        pick = None
        for lit in pending:
            if not (isinstance(lit, Atom) and not lit.negated) and _ready(lit, bound):
                pick = lit
                break
        if pick is None:
            pick = next((lit for lit in pending if isinstance(lit, Atom) and not lit.negated and _ready(lit, bound)),
                        None)
        if pick is None:
            raise ReferenceError_(f"unsafe rule body {body!r}")
        pending.remove(pick)
        order.append(pick)
        if isinstance(pick, Atom) and not pick.negated:
            bound |= _vars(pick)
        elif isinstance(pick, Comparison) and pick.op == "=":
            bound |= _vars(pick)
    return order


def bindings(body, rel) -> list:
    """Every satisfying binding (dict var -> value) of a rule body over ``rel`` (pred -> set of tuples)."""
    out = [{}]
    for lit in _order(body):
        nxt = []
        if isinstance(lit, Atom) and not lit.negated:
            for b in out:
                for row in rel.get(lit.pred, ()):
                    m = _match(lit, row, b)
                    if m is not None:
                        nxt.append(m)
        elif isinstance(lit, Atom):
            for b in out:
                if not any(_match(lit, row, b) is not None for row in rel.get(lit.pred, ())):
                    nxt.append(b)
        else:
            for b in out:
                try:  # a division or remainder by zero has no value: the binding fails
                    if _vars(lit) <= set(b):
                        if _CMP[lit.op](_value(lit.left, b), _value(lit.right, b)):
                            nxt.append(b)
                    else:  # an assignment
                        t, e = (lit.left, lit.right) if isinstance(lit.left, Var) and lit.left.name not in b \
                            else (lit.right, lit.left)
                        nb = dict(b)
                        nb[t.name] = _value(e, b)
                        nxt.append(nb)
                except ZeroDivisionError:
                    pass
        out = nxt
    return out


def _aggregate(func, values):
    if func == "count":
        return len(values)
    if func == "countd":
        return len(set(values))
    if func == "sum":
        return sum(values)
    if func == "min":
        return min(values)
    if func == "max":
        return max(values)
    if func == "avg":
        return float(sum(values)) / len(values)
    raise ReferenceError_(func)


def _apply(rules, rel) -> set:
    """One predicate's relation from its rules over ``rel``."""
    aggs = [(i, a) for i, a in enumerate(rules[0].head.args) if isinstance(a, Aggregate)]
    rows = []  # a multiset of head rows
    for r in rules:
        bs = bindings(r.body, rel)
        if aggs:  # the bindings of the named variables, as a set
            seen = {}
            for b in bs:
                key = tuple(sorted((k, v) for k, v in b.items() if not _anon(k)))
                seen.setdefault(key, b)
            bs = list(seen.values())
        for b in bs:
            try:
                rows.append(tuple(b[a.var.name] if isinstance(a, Aggregate) else _value(a, b) for a in r.head.args))
            except ZeroDivisionError:  # a head expression with no value derives nothing
                pass
    if not aggs:
        return set(rows)
    pos = [i for i, _ in aggs]
    groups = {}
    for row in rows:
        groups.setdefault(tuple(v for i, v in enumerate(row) if i not in pos), []).append(row)
    out = set()
    for key, grp in groups.items():
        it = iter(key)
        agg = dict(aggs)
        out.add(tuple(_aggregate(agg[i].func, [r[i] for r in grp]) if i in agg else next(it)
                      for i in range(len(rules[0].head.args))))
    return out


def strata(program) -> list:
    """Lists of derived predicates, one per strongly connected component, dependencies first."""
    derived = []
    for r in program.rules:
        if r.head.pred not in derived:
            derived.append(r.head.pred)
    g = nx.DiGraph()
    g.add_nodes_from(derived)
    for r in program.rules:
        for lit in r.body:
            if isinstance(lit, Atom) and lit.pred in derived:
                g.add_edge(lit.pred, r.head.pred)
    cond = nx.condensation(g)
    return [sorted(cond.nodes[c]["members"], key=derived.index) for c in nx.topological_sort(cond)]


def evaluate(text_or_program, inputs: dict) -> dict:
    """pred -> set of tuples for every derived predicate. ``inputs``: pred -> iterable of rows, or a
    Counter of rows (present when the count is > 0)."""
    program = parse(text_or_program) if isinstance(text_or_program, str) else text_or_program
    rel = {}
    for p, rows in inputs.items():
        if isinstance(rows, Counter):
            rel[p] = {tuple(r) for r, c in rows.items() if c > 0}
        else:
            rel[p] = {tuple(r) for r in rows}
    for comp in strata(program):
        rules = {p: [r for r in program.rules if r.head.pred == p] for p in comp}
        current = {p: set() for p in comp}
        for _ in range(MAX_ROUNDS):
            env = {**rel, **current}
            nxt = {p: _apply(rules[p], env) for p in comp}
            if nxt == current:
                break
            current = nxt
        else:
            raise ReferenceError_(f"no fixpoint for {comp} after {MAX_ROUNDS} rounds")
        rel.update(current)
    derived = {r.head.pred for r in program.rules}
    return {p: rel[p] for p in derived}


# -- comparing with the engine ---------------------------------------------------------------------

def rows_of(view, columns=None) -> set:
    """A view's rows as a set of Python tuples (columns in ``columns`` order)."""
    df = view.to_pandas()
    if columns is not None:
        df = df[list(columns)]
    return {tuple(_py(v) for v in row) for row in df.itertuples(index=False, name=None)}


def _py(v):
    if hasattr(v, "item"):
        v = v.item()
    return v


def _key(row):
    return tuple((0, v) if isinstance(v, str) else (1, float(v)) for v in row)


def same_rows(got, want, rel_tol=1e-9, abs_tol=1e-9) -> bool:
    """Whether two sets of rows are equal, floats compared with a tolerance."""
    if len(got) != len(want):
        return False
    for a, b in zip(sorted(got, key=_key), sorted(want, key=_key)):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) or isinstance(y, float):
                if isinstance(x, str) or isinstance(y, str) or not math.isclose(x, y, rel_tol=rel_tol,
                                                                                abs_tol=abs_tol):
                    return False
            elif x != y:
                return False
    return True


def diff_rows(got, want) -> str:
    return f"missing {sorted(set(want) - set(got), key=_key)[:12]}, extra {sorted(set(got) - set(want), key=_key)[:12]}"


# -- random programs --------------------------------------------------------------------------------

DOM = 7
INPUTS = {"e": 2, "f": 2, "u": 1}
KEYS = {"e": ("a",)}  # e is keyed by its first column: its set and the rules joining on a read that index


def make_input(eng, pred: str):
    """The engine input of the random programs' input ``pred``: columns a(, b), keyed as in KEYS."""
    return eng.input(pred, ["a", "b"][:INPUTS[pred]], key=KEYS.get(pred))


class ProgramGenerator:
    """Random small stratified programs over the inputs e(2), f(2), u(1) with values in 0..DOM-1.

    Predicates come in groups, each one stratum: a plain predicate, a self-recursive one, a mutually
    recursive pair, a non-recursive aggregate, or a recursive min/max over the graph e. Recursive rules
    only produce values already in the domain (assignments there are taken ``% DOM``), so every fixpoint
    is finite."""

    def __init__(self, seed: int, groups: int | None = None, plain: bool = False):
        """``plain``: no aggregates, and arithmetic only + * % over non-negative values (clingo's
        / and % of negative numbers differ)."""
        self.plain = plain
        self.rng = random.Random(seed)
        self.groups = groups if groups is not None else self.rng.randint(2, 4)
        self.arity = dict(INPUTS)
        self.joinable = list(INPUTS)   # relations whose values are domain ints (safe to join and recurse over)
        self.numeric = []              # aggregated relations (ints or floats; read but never recursed over)
        self.lines = []
        self.features = set()
        self.n = 0

    def fresh(self, prefix="p"):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self):
        return str(self.rng.randrange(DOM))

    # one body over ``sources`` (positive) binding some variables; returns (literals, bound vars)
    def body(self, sources, recursive_in=(), must_use=None, negate_from=(), allow_arith=True, mod=False):
        rng = self.rng
        pool = ["x", "y", "z", "w"]
        lits, bound = [], []
        n_atoms = rng.choice([1, 1, 2, 2, 2, 3])
        atoms = [must_use] if must_use else []
        while len(atoms) < n_atoms:
            atoms.append(rng.choice(sources))
        rng.shuffle(atoms)
        for pred in atoms:
            args = []
            for _ in range(self.arity[pred]):
                r = rng.random()
                if r < 0.12:
                    args.append(self.const())
                    self.features.add("const-in-atom")
                elif r < 0.22:
                    args.append("_")
                else:
                    # prefer an already bound variable (joins), else a new one
                    if bound and rng.random() < 0.45:
                        v = rng.choice(bound)
                        if v in args:
                            self.features.add("repeated-var")
                        else:
                            self.features.add("join")
                    else:
                        free = [v for v in pool if v not in bound]
                        v = rng.choice(free) if free else rng.choice(pool)
                    args.append(v)
                    if v not in bound:
                        bound.append(v)
            lits.append(f"{pred}({', '.join(args)})")
        if not bound:  # make sure something is bound
            pred = rng.choice([s for s in sources if s not in recursive_in] or sources)
            v = "x"
            args = [v] + ["_"] * (self.arity[pred] - 1)
            lits.append(f"{pred}({', '.join(args)})")
            bound.append(v)
        # comparisons
        if rng.random() < 0.45:
            a = rng.choice(bound)
            kind = rng.random()
            op = rng.choice(["<", "<=", ">", ">=", "!=", "="])
            if kind < 0.4 or len(bound) < 2:
                lits.append(f"{a} {op} {self.const()}")
            elif kind < 0.75:
                b = rng.choice([v for v in bound if v != a])
                lits.append(f"{a} {op} {b}")
            else:
                b = rng.choice(bound)
                lits.append(f"({a} + {b}) % 3 {op} 1" if allow_arith else f"{a} {op} {b}")
            self.features.add("comparison")
        # an assignment
        if allow_arith and rng.random() < 0.4:
            a, b = rng.choice(bound), rng.choice(bound)
            if self.plain:
                expr = rng.choice([f"{a} + 1", f"{a} * {b} + 3", f"{a} % 4", f"({a} + {b}) % 3"])
            else:
                expr = rng.choice([f"{a} + 1", f"{a} * 2 - {b}", f"{a} - {b}", f"({a} - 5) / 2", f"{a} / 2",
                                   f"({a} - {b}) % 3", f"{a} * {b} + 3", f"{a} % 4"])
            if mod:
                expr = f"({expr}) % {DOM}"
            new = "v"
            lits.append(f"{new} = {expr}" if rng.random() < 0.7 else f"{expr} = {new}")
            bound.append(new)
            self.features.add("assignment")
        # a negation
        if negate_from and rng.random() < 0.4:
            pred = rng.choice(negate_from)
            args = []
            for _ in range(self.arity[pred]):
                r = rng.random()
                args.append(rng.choice(bound) if r < 0.6 else self.const() if r < 0.8 else "_")
            lits.append(f"!{pred}({', '.join(args)})" if rng.random() < 0.7 else f"not {pred}({', '.join(args)})")
            self.features.add("negation")
        # shuffle the non-atom literals in among the atoms now and then (order must not matter)
        if rng.random() < 0.3:
            rng.shuffle(lits)
        return lits, bound

    def head(self, pred, bound):
        rng = self.rng
        args = []
        for _ in range(self.arity[pred]):
            r = rng.random()
            if r < 0.08:
                args.append(self.const())
                self.features.add("const-in-head")
            else:
                args.append(rng.choice(bound))
        return args

    def rule(self, head_pred, lits, bound, head_args=None):
        args = head_args if head_args is not None else self.head(head_pred, bound)
        self.lines.append(f"{head_pred}({', '.join(args)}) :- {', '.join(lits)}.")

    def group_plain(self):
        p = self.fresh()
        self.arity[p] = self.rng.choice([1, 2])
        for _ in range(self.rng.choice([1, 2])):
            lits, bound = self.body(self.joinable + self.numeric, negate_from=self.joinable + self.numeric)
            self.rule(p, lits, bound)
        if self.rng.random() < 0.25:
            self.lines.append(f"{p}({', '.join(self.const() for _ in range(self.arity[p]))}).")
            self.features.add("fact")
        self.joinable.append(p)

    def group_recursive(self, size):
        preds = [self.fresh("r") for _ in range(size)]
        for p in preds:
            self.arity[p] = self.rng.choice([1, 2, 2])
        base = list(self.joinable)
        for p in preds:  # a base rule each (types), then recursive rules
            lits, bound = self.body(base, negate_from=base)
            self.rule(p, lits, bound)
        for p in preds:
            for _ in range(self.rng.choice([1, 2])):
                q = self.rng.choice(preds)
                lits, bound = self.body(base + preds, recursive_in=preds, must_use=q, negate_from=base, mod=True)
                self.rule(p, lits, bound)
        if self.rng.random() < 0.25:
            p = self.rng.choice(preds)
            self.lines.append(f"{p}({', '.join(self.const() for _ in range(self.arity[p]))}).")
            self.features.add("fact")
        self.features.add("recursion" if size == 1 else "mutual-recursion")
        self.joinable.extend(preds)

    def group_aggregate(self):
        rng = self.rng
        p = self.fresh("a")
        funcs = [rng.choice(["count", "sum", "min", "max", "countd", "avg"])]
        if rng.random() < 0.3:
            funcs.append(rng.choice(["count", "sum", "min", "max", "countd", "avg"]))
        grouped = rng.random() < 0.8
        nrules = rng.choice([1, 1, 2])
        for k in range(nrules):
            for _ in range(20):
                lits, bound = self.body(self.joinable, negate_from=self.joinable)
                if len(bound) >= (2 if grouped else 1):
                    break
            else:
                lits, bound = ["e(x, y)"], ["x", "y"]
            g = rng.choice(bound) if grouped else None
            vals = [v for v in bound if v != g]
            args = ([g] if grouped else []) + [f"{f}<{rng.choice(vals)}>" for f in funcs]
            self.arity[p] = len(args)
            self.lines.append(f"{p}({', '.join(args)}) :- {', '.join(lits)}.")
        self.features.update(f"agg-{f}" for f in funcs)
        if "avg" not in funcs:
            self.numeric.append(p)  # ints: later rules may read it (not recurse over it)

    def group_min(self):
        rng = self.rng
        p = self.fresh("m")
        self.arity[p] = 2
        kind = rng.choice(["sp", "sp", "label-min", "label-max"])
        src = rng.choice([s for s in self.joinable if self.arity[s] == 1] or ["u"])
        if kind == "sp":
            self.lines.append(f"{p}(y, min<d>) :- {src}(y), d = 0.")
            self.lines.append(f"{p}(y, min<d>) :- {p}(x, d1), e(x, y), d = d1 + 1.")
        else:
            agg = "min" if kind == "label-min" else "max"
            self.lines.append(f"{p}(x, {agg}<l>) :- {src}(x), l = x.")
            self.lines.append(f"{p}(y, {agg}<l>) :- {p}(x, l), e(x, y).")
            if rng.random() < 0.5:
                self.lines.append(f"{p}(x, {agg}<l>) :- {p}(y, l), e(x, y).")
        self.features.add(f"recursive-{kind}")
        self.numeric.append(p)

    def generate(self) -> str:
        kinds = ["plain", "rec", "rec", "mutual", "agg", "agg", "min"]
        if self.plain:
            kinds = ["plain", "plain", "rec", "rec", "mutual"]
        for _ in range(self.groups):
            k = self.rng.choice(kinds)
            if k == "plain":
                self.group_plain()
            elif k == "rec":
                self.group_recursive(1)
            elif k == "mutual":
                self.group_recursive(2)
            elif k == "agg":
                self.group_aggregate()
            else:
                self.group_min()
        return "\n".join(self.lines) + "\n"


def random_program(seed: int) -> tuple:
    """(program text, features it exercises)."""
    g = ProgramGenerator(seed)
    return g.generate(), g.features


def random_rows(rng: random.Random, arity: int, n: int) -> list:
    return [tuple(rng.randrange(DOM) for _ in range(arity)) for _ in range(n)]


def update_stream(seed: int, epochs: int, inputs=INPUTS, initial=10, churn=5):
    """Initial rows and per-epoch (insertions, removals) per input; insertions may repeat present rows
    (multiplicity 2), removals take one copy of a present row."""
    rng = random.Random(seed * 7919 + 1)
    state = {p: Counter() for p in inputs}
    init = {}
    for p, k in inputs.items():
        rows = random_rows(rng, k, initial if k == 2 else max(2, initial // 3))
        init[p] = rows
        state[p].update(rows)
    steps = [{p: churn_step(rng, state[p], churn, lambda k=k: tuple(rng.randrange(DOM) for _ in range(k)))
              for p, k in inputs.items()} for _ in range(epochs)]
    return init, steps


def churn_step(rng: random.Random, state: Counter, churn: int, fresh) -> tuple:
    """One epoch's (insertions, removals) of an input whose rows are ``state`` (updated): up to ``churn``
    changes, each removing a present row, duplicating one, or inserting ``fresh()``."""
    ins, rem = [], []
    for _ in range(rng.randint(0, churn)):
        present = [r for r, c in state.items() if c > 0]
        r = rng.random()
        if present and r < 0.45:
            row = rng.choice(present)
            rem.append(row)
            state[row] -= 1
        elif present and r < 0.55:
            row = rng.choice(present)  # a duplicate
            ins.append(row)
            state[row] += 1
        else:
            row = fresh()
            ins.append(row)
            state[row] += 1
    return ins, rem


# A program over inputs e(x, y), f(x, y), u(x) with recursion, negation, recursive min and a count: what
# the attack tests run goals against.
GRAPH_PROGRAM = """
tc(x, y) :- e(x, y).
tc(x, y) :- tc(x, z), e(z, y).
reach(y) :- u(y).
reach(y) :- reach(x), e(x, y).
cut(x) :- e(x, _), !reach(x).
sp(y, min<d>) :- u(y), d = 0.
sp(y, min<d>) :- sp(x, d1), e(x, y), d = d1 + 1.
lo(x, min<l>) :- e(x, _), l = x.
lo(y, min<l>) :- lo(x, l), f(x, y).
deg(x, count<y>) :- tc(x, y).
"""


def goal_rows(full, args, asked) -> set:
    """The rows of ``full`` (a relation's rows) a goal with ``args`` ("?", "_" or an int constant, as
    strings) answers once the bindings ``asked`` (tuples of the "?" positions) were asked. A constant
    matches numerically, as the engine compares: goal a1(?, 3) matches an avg of 3.0."""
    qs = [i for i, a in enumerate(args) if a == "?"]
    return {r for r in full if all(a in ("?", "_") or r[i] == int(a) for i, a in enumerate(args))
            and tuple(r[i] for i in qs) in asked}


# -- driving an engine through an update stream, with goals (the attack tests' harness) ------------------

def start_inputs(eng, init: dict) -> tuple:
    """The engine inputs of ``INPUTS`` loaded with ``init`` and advanced to 1: (sessions, their contents
    as Counters)."""
    ses = {p: make_input(eng, p) for p in INPUTS}
    state = {p: Counter() for p in ses}
    for p, rows in init.items():
        ses[p].insert(rows)
        state[p].update(rows)
    for s in ses.values():
        s.advance_to(1)
    return ses, state


def random_goals(prog, derived: dict, rng, chance: float) -> list:
    """Goals on some derived predicates (each with probability ``chance``): (goal, pred, args, asked)."""
    goals = []
    for pred, arity in sorted(derived.items()):
        if rng.random() < chance:
            args = tuple(str(rng.choice(["?", "?", "_", str(int(rng.integers(7)))])) for _ in range(arity))
            if "?" not in args:
                args = ("?",) + args[1:]
            goals.append((prog.goal(f"{pred}({', '.join(args)})"), pred, args, set()))
    return goals


def toggle_binding(g, b: tuple, asked: set, rng):
    """Binding ``b`` of goal ``g``: retracted (half the time) if it was asked, else asked."""
    if b in asked and rng.random() < 0.5:
        g.retract(*b)
        asked.discard(b)
    elif b not in asked:
        g.ask(*b)
        asked.add(b)


def ask_and_retract(goals, rng):
    """Each goal, with probability 0.6, asks a random binding or retracts one it asked."""
    for g, pred, args, asked in goals:
        if rng.random() < 0.6:
            toggle_binding(g, tuple(int(rng.integers(7)) for a in args if a == "?"), asked, rng)


def check_program(eng, prog, text, state, where="", timeout: float = 30):
    """Every derived relation of the installed program ``prog`` equals the reference on the current
    input counters ``state``; returns the reference's relations."""
    want = evaluate(text, state)
    for pred, rows in want.items():
        view = prog[pred]
        eng.wait(view, timeout=timeout)
        got = rows_of(view, prog.columns(pred))
        assert same_rows(got, rows), f"{where} relation {pred}: {diff_rows(got, rows)}\n{text}"
    return want


def apply_step(ses, state, step):
    """One epoch's insertions and removals (``update_stream``'s step), to the engine and to ``state``."""
    for p, (ins, rem) in step.items():
        if ins:
            ses[p].insert(ins)
            state[p].update(ins)
        if rem:
            ses[p].remove(rem)
            state[p].subtract(rem)


def advance_all(ses, epoch: int) -> int:
    """Every input advanced to ``epoch``, then all to the latest any reached (a goal's ask lends the inputs
    it reads an epoch), so that the relations reflect every update written. Returns that epoch."""
    for s in ses.values():
        s.advance_to(epoch)
    epoch = max(s.epoch for s in ses.values())
    for s in ses.values():
        s.advance_to(epoch)
    return epoch
