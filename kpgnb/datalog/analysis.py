"""What a parsed program means before it becomes a dataflow: which predicates are inputs, their arities,
column names and types, the safety of every rule (each variable bound before it is used), and the strata:
the strongly connected components of the predicate graph in dependency order, with negation and
non-monotone aggregates refused inside a cycle. Every refusal is a DatalogError pointing at the text."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .errors import at
from .syntax import EXPR_VAR, Aggregate, Atom, BinOp, Comparison, Const, Program, Rule, Var, hidden, show, variables

TYPES = {"int": "int64", "float": "float64", "str": "str", "string": "str", "symbol": "str", "number": "int64",
         "bool": "bool"}
AGGREGATES = ("min", "max", "count", "sum", "avg", "countd")
RECURSIVE_AGGREGATES = ("min", "max")


@dataclass
class Step:
    """One body literal in evaluation order: a positive ``atom`` joined in, a ``filter`` comparison, an
    ``assign`` (``var = expr``) or a negated atom (``anti``)."""
    kind: str  # "atom" | "filter" | "assign" | "anti"
    node: object
    var: Var | None = None   # assign: the variable it binds
    expr: object = None      # assign: the expression


@dataclass
class RulePlan:
    rule: Rule
    steps: list
    bound: list  # the named variables bound by the body, in binding order


@dataclass
class Stratum:
    """Predicates defined together: one strongly connected component. ``recursive`` when a predicate
    reads itself (directly or through the others), so the stratum compiles to one loop."""
    preds: list
    recursive: bool
    rules: list = field(default_factory=list)  # RulePlans of the rules whose head is in preds


@dataclass
class Analysis:
    program: Program
    inputs: dict       # input predicate -> arity
    derived: dict      # derived predicate -> arity, in order of first definition
    columns: dict      # predicate -> column names
    dtypes: dict       # predicate -> engine dtypes (int64, float64, str, bool)
    aggregates: dict   # derived predicate -> [(position, func)] ([] when not aggregated)
    strata: list
    plans: dict        # id(rule) -> RulePlan


def analyze(program: Program, input_schema, bound_inputs=(), flag: str = "inputs=") -> Analysis:
    """``input_schema(pred) -> (column names, dtypes)`` for a predicate that no rule defines, or None when
    no input by that name exists; ``bound_inputs`` are the predicates the caller bound explicitly, with
    ``flag`` (errors name it: ``inputs=`` of ``eng.datalog``, ``--inputs`` of a ``%%datalog`` cell)."""
    return _Analyzer(program, input_schema, set(bound_inputs), flag).run()


class _Analyzer:
    def __init__(self, program, input_schema, bound_inputs, flag: str = "inputs="):
        self.p = program
        self.flag = flag
        self.text = program.text
        self.input_schema = input_schema
        self.bound_inputs = bound_inputs
        self.fresh = itertools.count(1)

    def err(self, node, message):
        return at(self.text, node, message)

    def run(self) -> Analysis:
        decls = self._decls()
        arity = self._arities(decls)
        derived = {}
        for r in self.p.rules:
            derived.setdefault(r.head.pred, arity[r.head.pred])
        for pred in self.bound_inputs:
            if pred in derived:
                rule = next(r for r in self.p.rules if r.head.pred == pred)
                raise self.err(rule.head, f"{self.flag} binds {pred!r}, but rules define it; a predicate is either "
                                          f"an input or defined by rules")
        inputs, columns, dtypes = {}, {}, {}
        for r in self.p.rules:
            for lit in r.body:
                if isinstance(lit, Atom) and lit.pred not in derived and lit.pred not in inputs:
                    schema = self.input_schema(lit.pred)
                    if schema is None:
                        raise self.err(lit, f"unknown predicate {lit.pred!r}: no rule defines it and there is no "
                                            f"engine input named {lit.pred!r} (bind one with {self.flag})")
                    names, types = list(schema[0]), list(schema[1])
                    if len(names) != arity[lit.pred]:
                        raise self.err(lit, f"{lit.pred!r} is bound to an input with {len(names)} columns "
                                            f"({', '.join(names)}), but is used with {arity[lit.pred]} arguments")
                    if lit.pred in decls:
                        for (cname, ctype, span), t in zip(decls[lit.pred].columns, types):
                            if TYPES[ctype] != t and not (TYPES[ctype] == "int64" and t == "bool"):
                                raise self.err(_Spanned(span), f"column {cname!r} of {lit.pred!r} is declared "
                                                               f"{ctype}, but the input's column is {t}")
                    inputs[lit.pred] = arity[lit.pred]
                    columns[lit.pred], dtypes[lit.pred] = names, types
        aggregates = self._aggregates(derived)
        plans = {id(r): self._plan(r) for r in self.p.rules}
        strata = self._strata(derived, aggregates, plans)
        for pred in derived:
            columns[pred] = self._column_names(pred, decls)
        self._types(strata, decls, dtypes, aggregates, plans)
        return Analysis(self.p, inputs, derived, columns, dtypes, aggregates, strata, plans)

    # -- declarations and arities -------------------------------------------------------------------
    def _decls(self) -> dict:
        decls = {}
        for d in self.p.decls:
            if d.pred in decls:
                raise self.err(d, f"{d.pred!r} is declared twice")
            seen = set()
            for name, typ, span in d.columns:
                if typ not in TYPES:
                    raise self.err(_Spanned(span), f"unknown type {typ!r}; expected int, float or str")
                if name in seen:
                    raise self.err(_Spanned(span), f"column {name!r} is declared twice in {d.pred!r}")
                seen.add(name)
            decls[d.pred] = d
        return decls

    def _arities(self, decls) -> dict:
        arity, where = {}, {}
        for pred, d in decls.items():
            arity[pred], where[pred] = len(d.columns), d
        for r in self.p.rules:
            for a in [r.head] + [b for b in r.body if isinstance(b, Atom)]:
                if not a.args:
                    raise self.err(a, f"{a.pred!r} has no arguments; predicates take at least one")
                if a.pred in arity and arity[a.pred] != a.arity:
                    first = where[a.pred]
                    raise self.err(a, f"{a.pred!r} takes {arity[a.pred]} arguments (line {first.span.line}: "
                                      f"{show(first) if not hasattr(first, 'columns') else 'its .decl'}), "
                                      f"but {a.arity} are given here")
                arity.setdefault(a.pred, a.arity)
                where.setdefault(a.pred, a)
        return arity

    def _aggregates(self, derived) -> dict:
        out = {}
        for pred in derived:
            rules = [r for r in self.p.rules if r.head.pred == pred]
            sig = [(i, a.func) for i, a in rules[0].aggregates]
            for r in rules:
                mine = [(i, a.func) for i, a in r.aggregates]
                if mine != sig:
                    raise self.err(r.head, f"every rule for {pred!r} must aggregate the same way: "
                                           f"{show(rules[0].head)} (line {rules[0].span.line}) vs {show(r.head)}")
                for i, a in r.aggregates:
                    if a.var.anonymous:
                        raise self.err(a, "an aggregate needs a named variable, not _")
                    others = {v.name for arg in r.head.args if not isinstance(arg, Aggregate)
                              for v in variables(arg)}
                    if a.var.name in others:
                        raise self.err(a, f"the aggregated variable {a.var.name!r} also appears in the head "
                                          f"outside the aggregate")
            out[pred] = sig
        return out

    # -- safety: an evaluation order in which every variable is bound before use --------------------
    def _plan(self, r: Rule) -> RulePlan:
        if r.head.negated:
            raise self.err(r.head, "a rule's head cannot be negated")
        if not r.body:
            for a in r.head.args:
                if not isinstance(a, Const) and not (isinstance(a, BinOp) and not variables(a)):
                    raise self.err(a, f"a fact must be ground: {show(a)} is not a constant")
            return RulePlan(r, [], [])
        atoms, pending = [], []
        for lit in r.body:
            if isinstance(lit, Atom):
                args = []
                for a in lit.args:  # an expression argument becomes a fresh variable and an equality
                    if isinstance(a, BinOp):
                        v = Var(f"{EXPR_VAR}{next(self.fresh)}", a.span)
                        pending.append(Comparison("=", v, a, a.span))
                        args.append(v)
                    else:
                        args.append(a)
                # (a negated atom's expressions are assigned first: the atom then tests their values)
                (pending if lit.negated else atoms).append(Atom(lit.pred, tuple(args), lit.negated, lit.span))
            else:
                pending.append(lit)
        steps, bound = [], []
        for a in atoms:
            steps.append(Step("atom", a))
            for v in variables(a):
                if v.name not in bound:
                    bound.append(v.name)
        progress = True
        while pending and progress:
            progress = False
            for lit in list(pending):
                step = self._step(lit, bound)
                if step is not None:
                    steps.append(step)
                    if step.kind == "assign":
                        bound.append(step.var.name)
                    pending.remove(lit)
                    progress = True
        if pending:
            lit = pending[0]
            free = [v for v in variables(lit) if v.name not in bound and not v.name.startswith(EXPR_VAR)
                    and not (isinstance(lit, Atom) and v.anonymous)]
            if isinstance(lit, Comparison) and isinstance(lit.left, Var) and lit.left.name.startswith(EXPR_VAR):
                # an atom's expression argument (rewritten as a hidden variable and an assignment)
                v = free[0] if free else lit.right
                name = "_" if getattr(v, "anonymous", False) else show(v)
                raise self.err(v, f"{name} in the argument {show(lit.right)} has no value: an atom's expression "
                                  f"argument is computed from variables that other positive atoms bind")
            if isinstance(lit, Comparison) and lit.op == "=":
                # 'y = z * 2' with z unbound: y is what it would assign; z is what is missing
                for lone, other in ((lit.left, lit.right), (lit.right, lit.left)):
                    if isinstance(lone, Var) and not isinstance(other, Var):
                        inner = [v for v in free if v.name != lone.name and v.name in {w.name for w in variables(other)}]
                        if inner:
                            free = inner
                            break
            what = "negated atom" if isinstance(lit, Atom) else "comparison"
            raise self.err(free[0] if free else lit,
                           f"variable {show(free[0]) if free else '?'!s} in the {what} {show(lit)} is not bound: "
                           f"bind it with a positive atom (or, in a comparison, with 'var = expression')")
        for a in r.head.args:
            for v in variables(a):
                if v.anonymous:
                    raise self.err(v, "_ cannot appear in a rule's head")
                if v.name not in bound:
                    raise self.err(v, f"head variable {v.name!r} is not bound in the body of the rule")
        return RulePlan(r, steps, [b for b in bound if not hidden(b)])

    def _step(self, lit, bound) -> Step | None:
        if isinstance(lit, Atom):  # negated: its named variables must be bound
            if all(v.name in bound for v in variables(lit) if not v.anonymous):
                return Step("anti", lit)
            return None
        lv = [v.name for v in variables(lit.left)]
        rv = [v.name for v in variables(lit.right)]
        if all(n in bound for n in lv + rv):
            return Step("filter", lit)
        if lit.op == "=":
            for target, expr, ev in ((lit.left, lit.right, rv), (lit.right, lit.left, lv)):
                if isinstance(target, Var) and target.name not in bound and all(n in bound for n in ev):
                    if target.anonymous:
                        return None
                    return Step("assign", lit, target, expr)
        return None

    # -- strata ----------------------------------------------------------------------------------
    def _strata(self, derived, aggregates, plans) -> list:
        deps = {p: [] for p in derived}  # head -> [(body pred, rule, negated)]
        for r in self.p.rules:
            for lit in r.body:
                if isinstance(lit, Atom) and lit.pred in derived:
                    deps[r.head.pred].append((lit.pred, r, lit))
        comps = _sccs(list(derived), {p: [b for b, _, _ in deps[p]] for p in derived})
        strata = []
        for comp in comps:  # dependencies first
            members = set(comp)
            recursive = len(comp) > 1 or any(b == comp[0] for b, _, _ in deps[comp[0]])
            for p in comp:
                for b, r, lit in deps[p]:
                    if b not in members:
                        continue
                    cycle = " -> ".join(_cycle(p, b, deps, members))  # (p reads b: b feeds p)
                    if lit.negated:
                        raise self.err(lit, f"negation through recursion in the rule for {p!r} (line "
                                            f"{r.span.line}): {show(lit)} is part of the cycle {cycle}; "
                                            f"negation must refer to a predicate of a lower stratum")
                    bad = [a for _, a in r.aggregates if a.func not in RECURSIVE_AGGREGATES]
                    if bad:
                        raise self.err(bad[0], f"{bad[0].func}<> inside recursion (rule for {p!r}, line "
                                               f"{r.span.line}, cycle {cycle}); only min<> and max<> may be "
                                               f"recursive")
                    if len(r.aggregates) > 1:
                        raise self.err(r.head, f"a recursive predicate takes one min<>/max<> aggregate; "
                                               f"{p!r} has {len(r.aggregates)} (cycle {cycle})")
            rules = [plans[id(r)] for r in self.p.rules if r.head.pred in members]
            strata.append(Stratum(list(comp), recursive, rules))
        return strata

    # -- columns and types -----------------------------------------------------------------------
    def _column_names(self, pred, decls) -> list:
        if pred in decls:
            return [c[0] for c in decls[pred].columns]
        rule = next(r for r in self.p.rules if r.head.pred == pred)
        names = []
        for i, a in enumerate(rule.head.args):
            name = a.name if isinstance(a, Var) else a.var.name if isinstance(a, Aggregate) else f"c{i}"
            if isinstance(a, Aggregate) and name in names:
                name = f"{a.func}_{name}"
            if name in names or not name.isidentifier():
                name = f"c{i}"
            while name in names:
                name += "_"
            names.append(name)
        return names

    def _types(self, strata, decls, dtypes, aggregates, plans):
        for s in strata:
            for pred in s.preds:
                if pred in decls:
                    dtypes[pred] = [TYPES[c[1]] for c in decls[pred].columns]
            # rules whose body types are known give head types; recursive ones wait for base rules
            todo = list(s.rules)
            while todo:
                progress = False
                for plan in list(todo):
                    body_preds = [st.node.pred for st in plan.steps if st.kind in ("atom", "anti")]
                    if any(p not in dtypes for p in body_preds):
                        continue
                    head = self._rule_types(plan, dtypes)
                    self._unify(plan.rule, head, dtypes, plan.rule.head.pred in decls)
                    todo.remove(plan)
                    progress = True
                if not progress:
                    plan = todo[0]
                    raise self.err(plan.rule.head, f"cannot tell the column types of {plan.rule.head.pred!r}: "
                                                   f"every rule defining it reads it; add a non-recursive rule or "
                                                   f"a .decl")
            # a column widened by a later rule (int to float) widens what the stratum's earlier rules derived
            # from it: typed again until nothing changes (columns only widen, so this ends)
            changed = True
            while changed:
                before = {p: list(dtypes[p]) for p in s.preds}
                for plan in s.rules:
                    self._unify(plan.rule, self._rule_types(plan, dtypes), dtypes, plan.rule.head.pred in decls)
                changed = any(dtypes[p] != before[p] for p in s.preds)

    def _rule_types(self, plan: RulePlan, dtypes) -> list:
        vt = {}
        for st in plan.steps:
            if st.kind == "atom":
                for a, t in zip(st.node.args, dtypes[st.node.pred]):
                    if isinstance(a, Var):
                        if a.name in vt and vt[a.name] != t:
                            raise self._mixed(a, vt[a.name], st.node, t)
                        vt.setdefault(a.name, t)
                    elif isinstance(a, Const):
                        self._compare_types(a, _const_t(a), t, st.node)
            elif st.kind == "assign":
                vt[st.var.name] = self._expr_type(st.expr, vt)
            elif st.kind == "filter":
                self._compare_types(st.node, self._expr_type(st.node.left, vt), self._expr_type(st.node.right, vt),
                                    st.node, st.node.op)
            elif st.kind == "anti":
                for a, t in zip(st.node.args, dtypes[st.node.pred]):
                    if isinstance(a, Var) and a.name in vt and vt[a.name] != t:
                        if a.name.startswith(EXPR_VAR):  # an expression argument, assigned before the test
                            expr = next(s.expr for s in plan.steps if s.kind == "assign" and s.var is a)
                            raise self.err(expr, f"the argument {show(expr)} is {_show_t(vt[a.name])} but column "
                                                 f"{_col(st.node, a)} of {st.node.pred!r} is {_show_t(t)}: a negated "
                                                 f"atom tests for rows with its arguments' values, of its columns' types")
                        raise self._mixed(a, vt[a.name], st.node, t)
                    if isinstance(a, Const):
                        self._compare_types(a, _const_t(a), t, st.node)
        out = []
        for a in plan.rule.head.args:
            if isinstance(a, Aggregate):
                t = vt[a.var.name]
                if a.func in ("count", "countd"):
                    t = "int64"
                elif a.func == "avg":
                    self._numeric(a, t)
                    t = "float64"
                elif a.func == "sum":
                    self._numeric(a, t)
                    t = "float64" if t == "float64" else "int64"
                out.append(t)
            else:
                out.append(self._expr_type(a, vt))
        return out

    def _mixed(self, a, t0, atom, t):
        """The error for a variable shared by columns of two types: atoms sharing a variable are joined
        on it, and a join compares columns of one type."""
        msg = (f"variable {a.name!r} is {_show_t(t0)} elsewhere in the rule but column {_col(atom, a)} of "
               f"{atom.pred!r} is {_show_t(t)}")
        if _kind(t0) == _kind(t):
            msg += (f": atoms sharing a variable are joined on it, which needs one type; to match values of "
                    f"both, use another variable here and compare the two (e.g. {a.name}2 with "
                    f"{a.name}2 = {a.name})")
        return self.err(a, msg)

    def _expr_type(self, e, vt) -> str:
        try:
            return expr_dtype(e, vt.__getitem__)
        except StringArithmetic as bad:
            raise self.err(bad.node, f"arithmetic on strings: {show(bad.node)}") from None

    def _compare_types(self, node, a, b, where, op="="):
        if _kind(a) != _kind(b):
            raise self.err(node, f"{show(where)} compares {_show_t(a)} with {_show_t(b)}")

    def _numeric(self, node, t):
        if t == "str":
            raise self.err(node, f"{show(node)} over strings; sum<> and avg<> need numbers")

    def _unify(self, rule, head, dtypes, declared=False):
        """The rule's head types into its predicate's column types. Rules of one predicate widen a column
        along bool < int < float (whichever rule comes first: rule order has no meaning); a column
        given by a .decl (``declared``) is never widened, only takes narrower rows."""
        pred = rule.head.pred
        if pred not in dtypes:
            dtypes[pred] = list(head)
            return
        known = dtypes[pred]
        for i, (k, t) in enumerate(zip(known, head)):
            if k == t or (k == "float64" and t in ("int64", "bool")) or (k == "int64" and t == "bool"):
                continue
            if not declared and k in ("int64", "bool") and t in ("int64", "float64"):
                known[i] = t  # bool and int rules: the column is int; int (or bool) and float: float
                continue
            if declared:
                raise self.err(rule.head.args[i], f"column {i + 1} of {pred!r} is declared {_show_t(k)} but "
                                                  f"{_show_t(t)} here")
            raise self.err(rule.head.args[i], f"column {i + 1} of {pred!r} is {_show_t(k)} in another rule "
                                              f"but {_show_t(t)} here")


@dataclass(frozen=True)
class _Spanned:
    span: object


class StringArithmetic(ValueError):
    def __init__(self, node):
        super().__init__(node)
        self.node = node


def expr_dtype(e, var_dtype) -> str:
    """The engine dtype of an expression: a variable's (``var_dtype(name)``), a constant's, and for
    arithmetic float64 if either side is, else int64 (StringArithmetic on strings)."""
    if isinstance(e, Var):
        return var_dtype(e.name)
    if isinstance(e, Const):
        return _const_t(e)
    kinds = {expr_dtype(e.left, var_dtype), expr_dtype(e.right, var_dtype)}
    if "str" in kinds:
        raise StringArithmetic(e)
    return "float64" if "float64" in kinds else "int64"


def _kind(t) -> str:
    return "str" if t == "str" else "num"


def _show_t(t) -> str:
    return {"int64": "int", "float64": "float", "str": "str", "bool": "bool"}.get(t, t)


def _const_t(c: Const) -> str:
    return {"int": "int64", "float": "float64", "str": "str", "bool": "bool"}[c.type]


def _col(atom: Atom, v: Var) -> int:
    return next(i for i, a in enumerate(atom.args) if a is v) + 1


def _sccs(nodes, edges) -> list:
    """Tarjan's strongly connected components, each list in node order, dependencies before dependents
    (edges point from a predicate to the predicates it reads)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = itertools.count()
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = next(counter)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = next(counter)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(sorted(comp, key=nodes.index))
    return out


def _cycle(start, end, deps, members) -> list:
    """A path start -> ... -> end within one component (for error messages), each predicate feeding the
    next (read by it), closed back to start: ``end`` feeds ``start``."""
    prev, frontier = {start: None}, [start]
    readers = {p: [h for h in members if any(b == p for b, _, _ in deps[h])] for p in members}
    while frontier:
        nxt = []
        for p in frontier:
            for h in readers[p]:
                if h not in prev:
                    prev[h] = p
                    nxt.append(h)
        frontier = nxt
    path, p = [], end
    while p is not None:
        path.append(p)
        p = prev.get(p)
    path.reverse()
    return (path if path[0] == start else [start, end]) + [start]
