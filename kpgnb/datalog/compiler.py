"""An analysed program to collections in one dataflow: each rule body a chain of joins over shared
arrangements with filters, assignments and antijoins placed as soon as their variables are bound; each
predicate the distinct union of its rules (or their aggregate); each recursive stratum one loop whose
Variables are its predicates, so semi-naive evaluation is differential iteration; strata in order.

Inside a rule, the bindings collection has one column per variable, named ``<prefix><var>``, with a
prefix no relation column starts with, so join outputs never clash."""
from __future__ import annotations

import inspect
import keyword
import re

import numpy as np

from ..engine.collection import Arranged, Variable
from ..engine.dataflow import Site, given_site
from ..graphs import bit_length_rounds
from .analysis import Analysis, RulePlan, expr_dtype
from .errors import at
from .syntax import EXPR_VAR, Aggregate, Atom, BinOp, Comparison, Const, Var, hidden, show, variables


class Relations:
    """The relations visible to the rules being compiled: predicate -> collection (top level, or the
    loop Variable while its stratum is compiled), and arrangements by key positions, built once and
    shared by every rule that joins on them (the same index, as in K-Pg)."""

    def __init__(self, df, analysis: Analysis, shared=None):
        """``shared(pred, key names)``: an arrangement another dataflow exported for that predicate and
        key, to import instead of building one (or None)."""
        self.df = df
        self.a = analysis
        self.shared = shared
        self.top: dict = {}        # pred -> top-level collection with the predicate's columns
        self.loop: dict = {}       # pred -> Variable, while its stratum's loop is built
        self.arranged: dict = {}   # (pred, key positions, in loop?) -> Arranged
        self.named: dict = {}      # top-level (pred, key positions) -> Arranged, exported by the program

    def get(self, pred):
        return self.loop.get(pred, self.top.get(pred))

    def cols(self, pred) -> list:
        return self.a.columns[pred]

    def arranged_by(self, pred, rel, keys: tuple):
        """``rel`` (the predicate's current collection, maybe filtered) arranged by column positions."""
        names = [self.cols(pred)[i] for i in keys]
        if rel is not self.get(pred):  # filtered by constants: its own arrangement, not shared
            return rel.arrange_by(*names)
        slot = (pred, keys, pred in self.loop)
        if slot not in self.arranged:
            imported = self.shared(pred, names) if self.shared and pred not in self.loop else None
            if isinstance(rel, Arranged) and rel.key_names == names:
                self.arranged[slot] = rel
            elif imported is not None:
                self.arranged[slot] = imported
            else:
                self.arranged[slot] = rel.arrange_by(*names)
            if pred not in self.loop:
                self.named[(pred, keys)] = self.arranged[slot]
        return self.arranged[slot]


class Compiler:
    def __init__(self, df, analysis: Analysis, rel: Relations, unit=None, facts=None):
        """``unit``: a collection of one row (for rules without positive atoms); ``facts``: pred ->
        collection of the program's ground facts for that predicate."""
        self.df = df
        self.a = analysis
        self.rel = rel
        self.unit = unit
        self.facts = facts or {}
        used = [c for cols in analysis.columns.values() for c in cols]
        k = 0
        self.pre = "v_"
        while any(c.startswith(self.pre) or c == self.pre + "unit_" for c in used):
            k += 1
            self.pre = f"v{k}_"
        self.unit_col = self.pre[:-1] + "unit_"

    def err(self, node, msg):
        return at(self.a.program.text, node, msg)

    # -- strata ----------------------------------------------------------------------------------
    def strata(self, strata):
        for s in strata:
            if s.recursive:
                self._loop(s)
            else:
                for pred in s.preds:
                    self.rel.top[pred] = self._define(pred, [p for p in s.rules if p.rule.head.pred == pred])

    def _loop(self, s):
        scope = self.df.loop()
        for pred in s.preds:
            self.rel.loop[pred] = Variable(scope, columns=self.rel.cols(pred), dtypes=self.a.dtypes[pred])
        results = {}
        for pred in s.preds:
            plans = [p for p in s.rules if p.rule.head.pred == pred]
            by_size = len(s.preds) == 1 and _monotone_min(pred, [p.rule for p in plans], self.a.aggregates[pred])
            results[pred] = self._define(pred, plans, scope, by_size)
        for pred in s.preds:
            var = self.rel.loop[pred]
            results[pred] = var.set(results[pred])
        for pred in s.preds:
            self.rel.top[pred] = results[pred].leave()
            del self.rel.loop[pred]
        self.rel.arranged = {k: v for k, v in self.rel.arranged.items() if not k[2]}

    def _define(self, pred, plans, scope=None, by_size=False):
        """The predicate's collection: the union of its rules, as a set, or aggregated per group. Inside
        a loop, ``by_size`` enters the rows from outside it by the size of their min (``_enter``)."""
        cols = self.rel.cols(pred)
        aggs = self.a.aggregates[pred]
        outs = []
        for p in plans:
            if p.rule.body:
                o = self._rule(p)
                if scope is not None and o.scope is scope and by_size and _computes_min(p.rule, aggs[0][0]):
                    o = self._delay(o, pred)
                outs.append(o)
        if pred in self.facts:
            outs.append(self.facts[pred])
        outs = [self._enter(o, scope, pred, by_size) if scope is not None and o.scope is not scope else o
                for o in outs]
        union = outs[0].concat(*outs[1:]) if len(outs) > 1 else outs[0]
        if not aggs:
            return union.distinct()
        group = [c for i, c in enumerate(cols) if i not in dict(aggs)]
        parts = []
        for pos, func in aggs:
            col = cols[pos]
            u = union.select(group + [col])
            with given_site(self._site(plans, pred, pos)):  # (an int sum's overflow names the aggregate)
                parts.append(self._aggregate(u, func, group, col))
        out = parts[0]
        for p in parts[1:]:
            out = self._join_on(out, p, group)
        if list(out.schema.names) != cols:
            out = out.select(cols)
        want = dict(zip(cols, self.a.dtypes[pred]))  # a count or int sum declared float is a float
        if any(out.schema.dtype(c) == "int64" and t == "float64" for c, t in want.items()):
            out = out.map(lambda **c: {n: c[n].astype(np.float64) if t == "float64" else c[n]
                                       for n, t in want.items()}, out=want)
        return out

    def _enter(self, o, scope, pred, by_size):
        """A rule's rows from outside the loop, into it. With ``by_size`` (a monotone recursive min, see
        ``_monotone_min``) over int64, each row enters at the round of its value's bit length
        (``enter_at``), as ``kpgnb.graphs.wcc`` enters labels: small values spread first and beat most
        others on arrival, so the others rarely spread at all."""
        if by_size:
            col = self.rel.cols(pred)[self.a.aggregates[pred][0][0]]
            if o.schema.dtype(col) == "int64":
                return o.enter_at(scope, _size_rounds(col))
        return o.enter(scope)

    def _delay(self, o, pred):
        """A recursive rule's rows of a monotone min held back to the round of their value's bit length
        (``delay``), where the rule computes that value (``d = d1 + w``): a long distance waits for the
        shorter ones to settle, so it mostly arrives beaten and never spreads (Dijkstra's order, by powers
        of two). sssp on an R-MAT graph of 500,000 edges: 350 -> 230 ms, single-edge changes p50 4.0 ->
        1.7 ms. A value passed on unchanged (``cc``'s label) entered by size already: delaying it would
        only add rounds to every change."""
        col = self.rel.cols(pred)[self.a.aggregates[pred][0][0]]
        return o.delay(_size_rounds(col)) if o.schema.dtype(col) == "int64" else o

    def _site(self, plans, pred, pos):
        """Where the aggregate at head position ``pos`` of ``pred`` is written (its first rule's), named
        after the relation as the user wrote it (a goal's rewritten ``s__bf`` is the user's ``s``)."""
        head = next((p.rule.head for p in plans if p.rule.body), None)
        node = head.args[pos] if head is not None else None
        span = getattr(node, "span", None)
        if span is None:
            return None
        lines = self.a.program.text.split("\n")  # (lines as the parser counts them, as errors.py does)
        line = lines[span.line - 1].strip()
        return _ProgramSite(span.line, span.column, f"{node.func}<{node.var.name}> of "
                                                    f"{_written(lines, head.span) or pred}", line)

    def _aggregate(self, u, func, group, col):
        """``func`` of ``col`` per ``group``. Group columns named like the columns the engine's count
        makes (``count``, and ``n_COL`` for avg) are renamed around it."""
        clash = {g for g in group if g in ("count", "n_" + col)}
        if clash:
            taken = set(u.schema.names) | {"count", "n_" + col}
            ren = {}
            for g in sorted(clash):
                k = 1
                while f"{g}_{k}" in taken:
                    k += 1
                ren[g] = f"{g}_{k}"
                taken.add(ren[g])
            out = self._aggregate(u.rename(**ren), func, [ren.get(g, g) for g in group], col)
            return out.rename(**{v: g for g, v in ren.items()})
        if func in ("min", "max"):
            return getattr(u, func)(by=group, col=col)
        if func == "sum":
            return u.sum(by=group, col=col)
        if func == "count":
            return u.count(by=group).rename(count=col)
        if func == "countd":
            return u.distinct().count(by=group).rename(count=col)
        if func == "avg":
            s = u.sum(by=group, col=col)
            n = u.count(by=group).rename(count="n_" + col)
            j = self._join_on(s, n, group)
            return j.map(lambda **c: {**{g: c[g] for g in group},
                                      col: c[col].astype(np.float64) / c["n_" + col]},
                         out={**{g: j.schema.dtype(g) for g in group}, col: "float64"})
        raise AssertionError(func)

    def _join_on(self, a, b, keys):
        if keys:
            return a.join(b, on=keys)
        return self._with_unit(a).join(self._with_unit(b), on=[self.unit_col]).select(
            [n for n in list(a.schema.names) + list(b.schema.names) if n != self.unit_col])

    # -- rules -----------------------------------------------------------------------------------
    def _rule(self, plan: RulePlan):
        """The rule's head rows, one per satisfying binding of its body variables (aggregated predicates
        count and sum over distinct bindings: the body's bindings are made a set first)."""
        atoms = [st for st in plan.steps if st.kind == "atom"]
        rest = [st for st in plan.steps if st.kind != "atom"]
        columns = {a.name: self.a.dtypes[st.node.pred][i] for st in atoms  # each atom variable's type
                   for i, a in enumerate(st.node.args) if isinstance(a, Var)}
        head = plan.rule.head
        bindings = self.a.aggregates[head.pred] and any(a.func not in ("min", "max")
                                                        for _, a in plan.rule.aggregates)
        b, bound = None, set()
        while atoms:
            nxt = next((st for st in atoms if b is not None and
                        any(isinstance(x, Var) and x.name in bound for x in st.node.args)), atoms[0])
            atoms.remove(nxt)
            b = self._join_atom(b, bound, nxt.node)
            b = self._apply_ready(b, bound, rest, columns, None if bindings else (head, atoms))
            if atoms and not bindings:
                b = self._live(b, head, atoms + rest)
        if b is None:
            if self.unit is None:
                raise self.err(plan.rule, "a rule without a positive atom needs the program's unit input")
            b = self.unit
            b = self._apply_ready(b, bound, rest, columns, None if bindings else (head, atoms))
        assert not rest, rest
        if bindings:
            named = [c for c in b.schema.names if c != self.unit_col and not hidden(c[len(self.pre):])]
            b = b.select(named).distinct() if named else b.select([self.unit_col]).distinct()
        return self._head(b, head)

    def _live(self, b, head, steps):
        """``b`` without the variables that neither the head nor any step still to come reads, so the
        next join arranges and copies fewer columns (sg's ``a`` once ``sg(a, b)`` is joined). Set
        semantics make the projection's extra multiplicity harmless: the head's ``distinct`` (or min/max)
        removes it; a count or sum over bindings keeps them all (the caller does not call this)."""
        keep = self._kept(b, _needed(head, steps))
        return b.select(keep) if keep and len(keep) < len(b.schema.names) else b

    def _kept(self, b, need) -> list:
        return [c for c in b.schema.names if c == self.unit_col or c[len(self.pre):] in need]

    def _apply_ready(self, b, bound, rest, columns, later=None):
        """The steps whose variables are bound, in turn. ``later`` (the head and the atoms still to
        join; None where a count or sum over bindings must keep them all): an assignment's map then
        carries on only the columns still read, rather than copying every column of the bindings."""
        def need(st):
            return None if later is None else _needed(later[0], [*later[1], *(x for x in rest if x is not st)])
        progress = True
        while progress:
            progress = False
            for st in list(rest):
                target = self._key_from_expression(b, bound, st, columns)
                if target is not None:
                    # an atom's expression argument (``e(y + 1, z)``), computed before the atom is joined,
                    # so that the join is on it instead of a product filtered afterwards
                    b = self._assign(b, target, st.node.right, need(st))
                    bound.add(target.name)
                elif st.kind == "filter" and all(v.name in bound for v in variables(st.node)):
                    b = self._filter(b, st.node)
                elif st.kind == "assign" and all(v.name in bound for v in variables(st.expr)):
                    b = self._assign(b, st.var, st.expr, need(st))
                    bound.add(st.var.name)
                elif st.kind == "anti" and all(v.name in bound for v in variables(st.node) if not v.anonymous):
                    b = self._antijoin(b, st.node)
                else:
                    continue
                rest.remove(st)
                progress = True
        return b

    def _key_from_expression(self, b, bound, st, columns):
        """The variable ``_εN`` of an equality ``_εN = expression`` that the rule's plan checks after
        its atom, when the expression can be computed now and has the column's type: else None."""
        if b is None or st.kind != "filter" or st.node.op != "=":
            return None
        target, expr = st.node.left, st.node.right
        if not (isinstance(target, Var) and target.name.startswith(EXPR_VAR) and target.name not in bound):
            return None
        if not all(v.name in bound for v in variables(expr)):
            return None
        got = expr_dtype(expr, lambda v: b.schema.dtype(self.pre + v))
        return target if columns.get(target.name) == got else None

    def _atom_parts(self, atom: Atom):
        """(first column of each named variable, filter for constants and repeated variables or None)."""
        cols = self.rel.cols(atom.pred)
        first, conds = {}, []
        for i, a in enumerate(atom.args):
            if isinstance(a, Const):
                conds.append(("const", cols[i], a.value))
            elif isinstance(a, Var) and not a.anonymous:
                if a.name in first:
                    conds.append(("same", cols[i], first[a.name]))
                else:
                    first[a.name] = cols[i]
        return first, conds

    def _relation(self, atom):
        rel = self.rel.get(atom.pred)
        if rel is None:
            raise self.err(atom, f"internal: {atom.pred!r} is not defined yet")
        first, conds = self._atom_parts(atom)
        if conds:
            rel = rel.filter(_condition(conds, {c: rel.schema.dtype(c) == "float64" for _, c, _ in conds}))
        return rel, first

    def _join_atom(self, b, bound: set, atom: Atom):
        rel, first = self._relation(atom)
        cols = self.rel.cols(atom.pred)
        new = {v: c for v, c in first.items() if v not in bound}
        if b is None:
            bound.update(first)
            if not first:
                return self._unit_of(rel)
            return rel.select(list(first.values())).rename(**{c: self.pre + v for v, c in first.items()})
        shared = [v for v in first if v in bound]
        if not shared:
            if not new:  # an existence test: a semijoin on the unit column
                return self._with_unit(b).semijoin(self._unit_of(rel), on=[self.unit_col]).select(list(b.schema.names))
            right = rel.select(list(new.values())).rename(**{c: self.pre + v for v, c in new.items()})
            bound.update(new)
            return self._join_on(b, right, [])
        keys = tuple(cols.index(first[v]) for v in shared)
        arr = self.rel.arranged_by(atom.pred, rel, keys)
        j = b.join(arr, left_on=[self.pre + v for v in shared], right_on=[first[v] for v in shared])
        bound.update(new)
        keep = list(b.schema.names) + list(new.values())
        return j.select(keep).rename(**{c: self.pre + v for v, c in new.items()})

    def _antijoin(self, b, atom: Atom):
        rel, first = self._relation(atom)
        if not first:
            return self._with_unit(b).antijoin(self._unit_of(rel), on=[self.unit_col]).select(list(b.schema.names))
        names = list(first)
        return b.antijoin(rel, left_on=[self.pre + v for v in names], right_on=[first[v] for v in names])

    # (the functions given to map read locals only, never ``self``: kp.spark.datalog ships them to Spark's
    # workers, and a compiler holds the builder, the engine and their locks)
    def _unit_of(self, rel):
        col, unit = rel.columns[0], self.unit_col
        return rel.map(lambda **c: {unit: np.zeros(len(c[col]), np.int64)}, out={unit: "int64"})

    def _with_unit(self, b):
        unit = self.unit_col
        if unit in b.schema.names:
            return b
        names = list(b.schema.names)
        return b.map(lambda **c: {**c, unit: np.zeros(len(c[names[0]]), np.int64)},
                     out={**{n: b.schema.dtype(n) for n in names}, unit: "int64"})

    def _defined(self, b, *exprs):
        """Keep the rows on which every division and remainder in ``exprs`` has a non-zero divisor: one by
        zero has no value, so the rule derives nothing for that binding."""
        divisors = [d for e in exprs for d in _divisors(e)]
        if not divisors:
            return b
        pre, n0 = self.pre, b.schema.names[0]

        def keep(**c):
            mask = np.ones(len(c[n0]), bool)
            with np.errstate(all="ignore"):
                for d in divisors:
                    mask &= np.broadcast_to(np.asarray(evaluate(d, c, pre)) != 0, mask.shape)
            return mask
        return b.filter(keep)

    def _filter(self, b, cmp):
        b = self._defined(b, cmp.left, cmp.right)
        pre, n0 = self.pre, b.schema.names[0]
        dtype = lambda v: b.schema.dtype(pre + v)  # noqa: E731
        floats = "float64" in (expr_dtype(cmp.left, dtype), expr_dtype(cmp.right, dtype))
        return b.filter(lambda **c: np.broadcast_to(_compare(cmp, c, pre, floats), (len(c[n0]),)))

    def _assign(self, b, var: Var, expr, need=None):
        """``b`` with the variable ``var`` computed from ``expr``; with ``need``, only the columns of
        those variables besides it."""
        b = self._defined(b, expr)
        pre, names = self.pre, list(b.schema.names)
        keep = names if need is None else self._kept(b, need - {var.name})
        dtype = expr_dtype(expr, lambda v: b.schema.dtype(pre + v))
        return b.map(lambda **c: {**{n: c[n] for n in keep},
                                  pre + var.name: _column(evaluate(expr, c, pre), len(c[names[0]]), dtype)},
                     out={**{n: b.schema.dtype(n) for n in keep}, pre + var.name: dtype})

    def _head(self, b, head: Atom):
        cols, dtypes, pre = self.rel.cols(head.pred), list(self.a.dtypes[head.pred]), self.pre
        for i, a in enumerate(head.args):  # what count<v> counts keeps its own type (str, say)
            if isinstance(a, Aggregate) and a.func in ("count", "countd"):
                dtypes[i] = b.schema.dtype(pre + a.var.name)
        args = [a.var if isinstance(a, Aggregate) else a for a in head.args]
        b = self._defined(b, *args)
        plain = all(isinstance(a, Var) for a in args) and len({a.name for a in args}) == len(args) and all(
            b.schema.dtype(pre + a.name) == t for a, t in zip(args, dtypes))
        if plain:
            return b.select([pre + a.name for a in args]).rename(**{pre + a.name: c for a, c in zip(args, cols)})
        n0 = b.schema.names[0]
        return b.map(lambda **c: {col: _column(evaluate(a, c, pre), len(c[n0]), t)
                                  for a, col, t in zip(args, cols, dtypes)},
                     out=dict(zip(cols, dtypes)))


def _needed(head, steps) -> set:
    """The variables the head and ``steps`` (rule steps still to come) read or bind."""
    need = {v.name for v in variables(head)}
    for st in steps:
        need.update(v.name for v in (variables(st.expr) + [st.var] if st.kind == "assign" else variables(st.node)))
    return need


def _monotone_min(pred, rules, aggs) -> bool:
    """Whether ``pred``, alone in its recursive stratum, is a min whose recursive rules are monotone in
    the mins they read: each recursive atom reads its min into a variable of its own, used nowhere but
    as the value the rule derives (``cc(y, min<l>) :- cc(x, l), ...``) or in the one assignment of that
    value, plus terms that read no min (``d = d1 + w``; the value is then used nowhere else either).
    Rounds then only improve each group's min, so the iteration reaches the least fixed point whatever
    round each row from outside the loop enters at. A rule that compares, subtracts or joins on a min
    (``d1 > 3``, ``d = 10 - d1``, ``p(x, l), p(y, l)``) may settle elsewhere when rows enter later: its
    predicate keeps entering them at round 0."""
    if len(aggs) != 1 or aggs[0][1] != "min":
        return False
    pos = aggs[0][0]
    for r in rules:
        rec = [b for b in r.body if isinstance(b, Atom) and b.pred == pred]
        if not rec:
            continue
        read = []  # the variables the rule reads mins into
        for b in rec:
            a = b.args[pos]
            if b.negated or not isinstance(a, Var):
                return False
            if not a.anonymous:
                read.append(a.name)
        if len(set(read)) < len(read):  # two mins joined on equality
            return False
        tracked = set(read)
        value = r.head.args[pos].var.name
        bound = {v.name for b in r.body if isinstance(b, Atom) and not b.negated for v in variables(b)}
        assign = [b for b in r.body if isinstance(b, Comparison) and b.op == "=" and isinstance(b.left, Var)
                  and b.left.name == value] if value not in bound else []
        if len(assign) > 1 or (assign and not _plus(assign[0].right, tracked)):
            return False
        if assign:
            tracked.add(value)
        for b in r.body:
            if assign and b is assign[0]:
                continue
            args = b.args[:pos] + b.args[pos + 1:] if isinstance(b, Atom) and b in rec else \
                b.args if isinstance(b, Atom) else (b,)
            if any(v.name in tracked for a in args for v in variables(a)):
                return False
        if any(v.name in tracked for i, a in enumerate(r.head.args) if i != pos for v in variables(a)):
            return False
    return True


def _computes_min(rule, pos) -> bool:
    """Whether the rule derives its head's min value by an assignment (``d = d1 + 1``) rather than
    reading it from a body atom (``cc(y, l) :- cc(x, l), ...``)."""
    value = rule.head.args[pos].var.name
    return not any(v.name == value for b in rule.body if isinstance(b, Atom) for v in variables(b))


def _size_rounds(col):
    """``enter_at``'s or ``delay``'s function: the bit lengths of column ``col``. Its signature names that
    column only, so entering rows decodes no other (strings, say), unless the name cannot be a parameter
    (``in``, ``class``): then it reads every column."""
    def rounds(**c):
        return bit_length_rounds(c[col])
    if col.isidentifier() and not keyword.iskeyword(col):
        rounds.__signature__ = inspect.Signature([inspect.Parameter(col, inspect.Parameter.KEYWORD_ONLY)])
    return rounds


def _plus(e, read) -> bool:
    """Whether ``e`` is a read variable, or one plus terms that read none (monotone in it)."""
    if isinstance(e, Var):
        return True
    if isinstance(e, BinOp) and e.op == "+":
        left = {v.name for v in variables(e.left)} & read
        right = {v.name for v in variables(e.right)} & read
        if not right:
            return _plus(e.left, read) if left else True
        if not left:
            return _plus(e.right, read)
    return not ({v.name for v in variables(e)} & read)


# -- expressions over column arrays (one call per batch) ---------------------------------------------
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "%": np.mod}
_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}


def evaluate(e, c, pre=""):
    """An expression over the columns ``c`` (variable v is column ``pre + v``): arrays in, array out,
    or a plain value when ``e`` is constant."""
    if isinstance(e, Var):
        return c[pre + e.name]
    if isinstance(e, Const):
        return e.value
    left, right = _number(evaluate(e.left, c, pre)), _number(evaluate(e.right, c, pre))
    ints = _is_int(left) and _is_int(right)
    if e.op == "/" and not ints:
        return np.true_divide(left, right)
    with np.errstate(all="ignore"):
        out = np.floor_divide(left, right) if e.op == "/" else _ARITH[e.op](left, right)
    if ints and e.op != "%":
        _check_int64(e, left, right, out)
    return out


def _number(x):
    """A bool column in arithmetic as the ints Python reads it as (True + True is 2; NumPy's bool + is
    or, and its bool - fails)."""
    return x.astype(np.int64) if isinstance(x, np.ndarray) and x.dtype.kind == "b" else x


def _check_int64(e, left, right, out):
    """Integer arithmetic is Python's, on int64: a result outside int64 fails the program (as ``sum<v>``
    does) rather than wrap into a wrong value."""
    a, b, r = (np.asarray(x, np.int64) for x in (left, right, out))
    with np.errstate(all="ignore"):
        bad = _wrapped(e.op, a, b, r)
    if np.any(bad):
        shape = np.broadcast(a, b).shape
        i = int(np.flatnonzero(np.broadcast_to(bad, shape))[0])
        x, y = (int(np.broadcast_to(v, shape).reshape(-1)[i]) for v in (a, b))
        raise IntOverflow(e, x, y)


def _wrapped(op, a, b, r):
    """Where int64 ``r = a op b`` wrapped around."""
    if op == "+":
        return ((a ^ r) & (b ^ r)) < 0
    if op == "-":
        return ((a ^ b) & (a ^ r)) < 0
    if op == "*":
        return (a != 0) & ((r // np.where(a != 0, a, 1) != b) | ((a == -1) & (b == _INT_MIN)))
    return (a == _INT_MIN) & (b == -1)  # floor division: only the least int64 by -1


_INT_MIN = np.iinfo(np.int64).min


class IntOverflow(OverflowError):
    """An int64 result out of range, naming the expression (``node``) and where it is in the program."""

    def __init__(self, node, x: int, y: int):
        exact = x // y if node.op == "/" else {"+": x + y, "-": x - y, "*": x * y}[node.op]
        if getattr(node, "unary", False):  # -x, evaluated as 0 - x but named as written
            expr, calc = show(node), f"-({y})"
        else:
            expr, calc = f"{show(node.left)} {node.op} {show(node.right)}", f"{x} {node.op} {y}"
        value = (f"is {calc} = {exact}, outside int64: Datalog's integers are int64, and a result "
                 f"that does not fit fails the program rather than wrap")
        self.node = node
        self.reason = f"{expr} {value}"
        where = f" (line {node.span.line}, column {node.span.column})" if node.span is not None else ""
        super().__init__(f"{expr}{where} {value}")


def ground_defined(exprs) -> bool:
    """Whether every division and remainder in these constant expressions has a non-zero divisor (a
    ground fact with one by zero has no value and derives nothing, as a rule's binding does)."""
    with np.errstate(all="ignore"):
        return all(evaluate(d, {}) != 0 for e in exprs for d in _divisors(e))


def _divisors(e):
    """The right operands of the divisions and remainders in expression ``e``."""
    if isinstance(e, BinOp):
        if e.op in ("/", "%"):
            yield e.right
        yield from _divisors(e.left)
        yield from _divisors(e.right)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _written(lines, span):
    """The predicate name at the start of ``span`` (an atom's) in the program's ``lines``, or None."""
    if span is None or not 0 < span.line <= len(lines):
        return None
    m = _NAME.match(lines[span.line - 1], span.column - 1)
    return m.group() if m else None


def _is_int(x) -> bool:
    return (isinstance(x, (int, np.integer)) and not isinstance(x, bool)) or (
        isinstance(x, np.ndarray) and x.dtype.kind in "iub")


def _compare(cmp, c, pre, floats: bool = False):
    left, right = evaluate(cmp.left, c, pre), evaluate(cmp.right, c, pre)
    return np.asarray(_compared(cmp.op, left, right, floats), dtype=bool)


_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _compared(op, left, right, floats: bool = False):
    """``left op right`` over arrays or plain values, by value: an int64 and a float64 are compared as
    the numbers they are (NumPy rounds the int to float64 first, so 2.0**53 would equal 2**53 + 1).
    ``floats`` (an operand is float64): ``=`` and ``!=`` hold NaN equal to NaN, as a variable shared by
    two atoms joins it and a relation holds it as one value, so that a comparison and the join or
    assignment it stands for agree (a goal's magic set turns ``d = c + 0.0`` into such a comparison).
    Written with ``==``, ``!=``, ``&``, ``|`` and ``~`` only, which the Spark backend translates as they are.
    ``<`` and the other orders keep NumPy's rule: NaN is unordered."""
    if floats and op in ("=", "!="):
        eq = _compared("=", left, right) | (_compared("!=", left, left) & _compared("!=", right, right))
        return eq if op == "=" else ~eq
    if _int_kind(left) and _float_kind(right):
        return _int_vs_float(op, left, right)
    if _float_kind(left) and _int_kind(right):
        return _int_vs_float(_FLIP[op], right, left)
    return _CMP[op](_operand(left), _operand(right))


def _int_kind(x) -> bool:
    return _is_int(x) and not (isinstance(x, np.ndarray) and x.dtype.kind == "b")


def _float_kind(x) -> bool:
    return isinstance(x, (float, np.floating)) or (isinstance(x, np.ndarray) and x.dtype.kind == "f")


_TWO63 = 2.0 ** 63


def _int_vs_float(op, i, f):
    """``i op f`` exactly, for int64 ``i`` and float64 ``f`` (arrays or values; NaN compares unequal and
    unordered). Rounding is monotone, so where float64(i) differs from f it orders them as i and f are
    ordered; where it ties, f is a whole number: compared as an int64 (or, at 2**63 and past, as larger)."""
    i = np.asarray(i, dtype=np.int64)
    f = np.asarray(f, dtype=np.float64)
    fi = i.astype(np.float64)
    tie = fi == f
    exact = tie & (f < _TWO63)  # (a tie of f >= 2**63 is an int64 rounded up to 2**63, below it)
    fint = np.where(exact, f, 0.0).astype(np.int64)
    if op in ("=", "!="):
        eq = exact & (i == fint)
        return eq if op == "=" else ~eq
    less = (fi < f) | (tie & ~exact) | (exact & (i < fint))
    greater = (fi > f) | (exact & (i > fint))
    eq = exact & (i == fint)
    return {"<": less, "<=": less | eq, ">": greater, ">=": greater | eq}[op]


def _operand(x):
    """A str constant as a 0-d object array: NumPy reads a plain str operand as fixed-width unicode,
    which drops trailing NULs ("a\0" would equal "a")."""
    return np.array(x, dtype=object) if isinstance(x, str) else x


def _column(value, n, dtype):
    if dtype == "str":
        arr = np.asarray(value, dtype=object)
        if arr.ndim:
            return arr
        out = np.empty(n, dtype=object)
        out.fill(value)  # (np.full would read the str as fixed-width unicode, dropping trailing NULs)
        return out
    np_dtype = {"int64": np.int64, "float64": np.float64, "bool": np.bool_}[dtype]
    return np.broadcast_to(np.asarray(value).astype(np_dtype), (n,))


def _condition(conds, floats: dict):
    """A filter for an atom's constants (``edge(1, y)``) and repeated variables (``edge(x, x)``, which
    holds a NaN twice as a join on x would); ``floats``: whether each column is float64."""
    def keep(**c):
        mask = None
        for kind, col, other in conds:
            m = _compared("=", c[col], other if kind == "const" else c[other], floats[col])
            mask = m if mask is None else mask & m
        return np.asarray(mask, dtype=bool)
    return keep


class _ProgramSite(Site):
    """A Datalog program's location, for the errors of the operators compiled from it."""

    __slots__ = ("column", "what")

    def __init__(self, line: int, column: int, what: str, text: str):
        super().__init__("<datalog>", line, text)
        self.column, self.what = column, what

    def __str__(self):
        return f"{self.what} (line {self.lineno}, column {self.column}): {self.line}"
