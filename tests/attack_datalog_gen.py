"""Random typed Datalog programs for the attack tests (int, float and str columns), and input streams.

Independent of ``datalog_reference.ProgramGenerator``: programs mix string and float columns,
non-linear and mutual recursion, recursion through joins with constants/repeated variables, stratified
negation of recursive strata, aggregates over floats and strings, multi-aggregate heads, head
expressions, and recursive min/max (weighted shortest paths with several grouping columns, label
propagation with int/str/float labels, min in mutual recursion)."""
from __future__ import annotations

import random
from collections import Counter

from datalog_reference import churn_step

DOM = 6
STRS = ["a", "b", "cc", "d d"]
FLOATS = [0.5, 1.25, -2.0, 3.0, 0.1]

# input predicate -> column types
INPUTS = {
    "e": ("int", "int"),
    "w": ("int", "int", "int"),       # weighted edge, weight 1..4
    "s": ("str", "int"),
    "fl": ("int", "float"),
    "u": ("int",),
}
DTYPES = {"int": "int64", "float": "float64", "str": "str"}


def random_value(rng, t, pred=None, pos=None):
    if t == "int":
        if pred == "w" and pos == 2:
            return rng.randint(1, 4)
        return rng.randrange(DOM)
    if t == "float":
        return rng.choice(FLOATS)
    return rng.choice(STRS)


def const_text(rng, t):
    if t == "int":
        return str(rng.randrange(DOM))
    if t == "float":
        return repr(rng.choice(FLOATS))
    return '"' + rng.choice(STRS) + '"'


class Gen:
    def __init__(self, seed, groups=None):
        self.rng = random.Random(seed)
        self.types = dict(INPUTS)
        self.lines = []
        self.n = 0
        self.groups = groups if groups is not None else self.rng.randint(2, 4)
        # relations whose int columns hold only domain values (safe inside recursion)
        self.finite = set(INPUTS)
        self.features = set()

    def fresh(self, p):
        self.n += 1
        return f"{p}{self.n}"

    # -- a rule body -------------------------------------------------------------------------------
    def body(self, sources, must=(), negate_from=(), arith=True, recursive=False):
        """(literals, {var: type}) over positive atoms of ``sources`` (always including ``must``)."""
        rng = self.rng
        vt = {}
        lits = []
        atoms = list(must)
        while len(atoms) < rng.choice([1, 2, 2, 3]):
            atoms.append(rng.choice(sources))
        rng.shuffle(atoms)
        k = 0
        for pred in atoms:
            args = []
            for i, t in enumerate(self.types[pred]):
                r = rng.random()
                same = [v for v, tt in vt.items() if tt == t]
                if r < 0.1:
                    args.append(const_text(rng, t))
                    self.features.add("const")
                elif r < 0.2:
                    args.append("_")
                elif same and r < 0.6:
                    v = rng.choice(same)
                    if v in args:
                        self.features.add("repeated-var")
                    args.append(v)
                else:
                    k += 1
                    v = f"{t[0]}{k}"
                    vt[v] = t
                    args.append(v)
            lits.append(f"{pred}({', '.join(args)})")
        if not vt:
            pred = rng.choice(sources)
            t = self.types[pred][0]
            vt["z0"] = t
            lits.append(f"{pred}(z0{', _' * (len(self.types[pred]) - 1)})")
        # comparisons
        if rng.random() < 0.5:
            v = rng.choice(list(vt))
            t = vt[v]
            ops = ["=", "!=", "<", "<=", ">", ">="]
            same = [x for x, tt in vt.items() if tt == t and x != v]
            if same and rng.random() < 0.5:
                lits.append(f"{v} {rng.choice(ops)} {rng.choice(same)}")
            else:
                lits.append(f"{v} {rng.choice(ops)} {const_text(rng, t)}")
            self.features.add("comparison")
        # an assignment (ints and floats)
        nums = [x for x, t in vt.items() if t in ("int", "float")]
        if arith and nums and rng.random() < 0.45:
            a, b = rng.choice(nums), rng.choice(nums)
            expr = rng.choice([f"{a} + 1", f"{a} * 2 - {b}", f"{a} - {b}", f"({a} - 5) / 2", f"{a} / 3",
                               f"({a} - {b}) % 4", f"{a} * {b} + 3", f"{a} % 3", f"-{a} + {b}", f"{a} / 2.0"])
            ftype = "float" if (vt[a] == "float" or vt[b] == "float" or "2.0" in expr) else "int"
            if recursive:
                if ftype == "float":
                    expr = None
                else:
                    expr = f"({expr}) % {DOM}"
            if expr is not None:
                lits.append(f"v = {expr}" if rng.random() < 0.7 else f"{expr} = v")
                vt["v"] = ftype
                self.features.add("assignment")
        # a negation
        if negate_from and rng.random() < 0.4:
            pred = rng.choice(negate_from)
            args = []
            for t in self.types[pred]:
                same = [x for x, tt in vt.items() if tt == t]
                r = rng.random()
                args.append(rng.choice(same) if same and r < 0.6 else const_text(rng, t) if r < 0.8 else "_")
            lits.append(("!" if rng.random() < 0.7 else "not ") + f"{pred}({', '.join(args)})")
            self.features.add("negation")
        if rng.random() < 0.3:
            rng.shuffle(lits)
        return lits, vt

    def head_args(self, vt, types=None):
        rng = self.rng
        if types is None:
            n = rng.choice([1, 2, 2, 3])
            args = []
            for _ in range(n):
                if rng.random() < 0.08:
                    t = rng.choice(["int", "str"])
                    args.append((const_text(rng, t), t))
                    self.features.add("const-head")
                else:
                    v = rng.choice(list(vt))
                    args.append((v, vt[v]))
            return args
        out = []
        for t in types:
            same = [x for x, tt in vt.items() if tt == t]
            if not same:
                return None
            out.append((rng.choice(same), t))
        return out

    # -- groups ------------------------------------------------------------------------------------
    def g_plain(self):
        p = self.fresh("p")
        srcs = list(self.types)
        types = None
        for k in range(self.rng.choice([1, 2])):
            for _ in range(30):
                lits, vt = self.body(srcs, negate_from=srcs)
                h = self.head_args(vt, types)
                if h is not None:
                    break
            else:
                return
            # a head expression now and then
            if self.rng.random() < 0.15 and h[0][1] == "int":
                h[0] = (f"{h[0][0]} + 10", "int")
                self.features.add("head-expr")
            types = [t for _, t in h]
            self.lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
        self.types[p] = tuple(types)
        # finite if all int head args are plain variables from atoms... keep it simple: not finite
        # when it has arithmetic
        if not any("=" in l and "v" in l for l in self.lines[-2:]) and "+ 10" not in self.lines[-1]:
            self.finite.add(p)

    def g_rec(self, size):
        rng = self.rng
        preds = [self.fresh("r") for _ in range(size)]
        base = [p for p in self.types if p in self.finite]
        lower = list(self.types)
        for p in preds:
            for _ in range(30):
                lits, vt = self.body(base, negate_from=lower, arith=False)
                h = self.head_args(vt)
                if h is not None:
                    break
            self.types[p] = tuple(t for _, t in h)
            self.lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
        for p in preds:
            for _ in range(rng.choice([1, 2])):
                q = rng.choice(preds)
                must = [q] + ([rng.choice(preds)] if rng.random() < 0.3 else [])  # non-linear now and then
                if len(must) > 1:
                    self.features.add("non-linear")
                for _ in range(40):
                    lits, vt = self.body(base + preds, must=must, negate_from=lower,
                                         recursive=True)
                    h = self.head_args(vt, self.types[p])
                    if h is not None:
                        break
                else:
                    continue
                self.lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
        if rng.random() < 0.3:
            p = rng.choice(preds)
            self.lines.append(f"{p}({', '.join(const_text(rng, t) for t in self.types[p])}).")
            self.features.add("fact")
        self.features.add("recursion" if size == 1 else "mutual")
        self.finite.update(preds)

    def g_agg(self):
        rng = self.rng
        p = self.fresh("a")
        srcs = list(self.types)
        for _ in range(40):
            lits, vt = self.body(srcs, negate_from=srcs)
            if len(vt) >= 2:
                break
        else:
            lits, vt = ["fl(i1, f1)"], {"i1": "int", "f1": "float"}
        names = list(vt)
        rng.shuffle(names)
        ngroup = rng.choice([0, 1, 1, 2]) if len(names) > 2 else rng.choice([0, 1])
        group = names[:ngroup]
        rest = names[ngroup:]
        aggs = []
        for _ in range(rng.choice([1, 1, 2])):
            v = rng.choice(rest)
            t = vt[v]
            funcs = ["count", "countd", "min", "max"] + (["sum", "avg"] if t != "str" else [])
            f = rng.choice(funcs)
            aggs.append((f, v, t))
        args = group + [f"{f}<{v}>" for f, v, _ in aggs]
        types = [vt[g] for g in group] + [
            "int" if f in ("count", "countd") else "float" if f == "avg" else t for f, v, t in aggs]
        self.lines.append(f"{p}({', '.join(args)}) :- {', '.join(lits)}.")
        # a second rule for the same aggregate, now and then
        if rng.random() < 0.3:
            for _ in range(30):
                lits2, vt2 = self.body(srcs)
                need = [vt[g] for g in group] + [t for _, _, t in aggs]
                pick = self.head_args(vt2, need)
                if pick is not None:
                    args2 = [a for a, _ in pick[:len(group)]] + [f"{f}<{a}>" for (f, _, _), (a, _) in
                                                                  zip(aggs, pick[len(group):])]
                    if len({a for a, _ in pick}) == len(pick):
                        self.lines.append(f"{p}({', '.join(args2)}) :- {', '.join(lits2)}.")
                    break
        self.types[p] = tuple(types)
        for f, _, _ in aggs:
            self.features.add("agg-" + f)

    def g_min(self):
        rng = self.rng
        p = self.fresh("m")
        kind = rng.choice(["sp", "sp2", "label", "label", "strlabel", "flabel", "mutual"])
        agg = "min" if rng.random() < 0.7 else "max"
        roots = [x for x in self.types if self.types[x] == ("int",)] or ["u"]
        root = rng.choice(roots)
        L = self.lines
        if kind == "sp":
            L.append(f"{p}(y, min<d>) :- {root}(y), d = 0.")
            L.append(f"{p}(y, min<d>) :- {p}(x, d1), w(x, y, c), d = d1 + c.")
            if rng.random() < 0.5:
                L.append(f"{p}(y, min<d>) :- {p}(x, d1), e(x, y), d = d1 + 2.")
            self.types[p] = ("int", "int")
        elif kind == "sp2":  # two grouping columns: all-pairs from sources
            L.append(f"{p}(x, x, min<d>) :- {root}(x), d = 0.")
            L.append(f"{p}(s, y, min<d>) :- {p}(s, x, d1), w(x, y, c), d = c + d1.")
            self.types[p] = ("int", "int", "int")
        elif kind == "label":
            L.append(f"{p}(x, {agg}<l>) :- e(x, _), l = x * 3 % 7 - 2.")
            L.append(f"{p}(y, {agg}<l>) :- {p}(x, l), e(x, y).")
            if rng.random() < 0.5:
                L.append(f"{p}(x, {agg}<l>) :- {p}(y, l), e(x, y).")
            self.types[p] = ("int", "int")
        elif kind == "strlabel":
            L.append(f"{p}(x, {agg}<l>) :- s(l, x).")
            L.append(f"{p}(y, {agg}<l>) :- {p}(x, l), e(x, y).")
            self.types[p] = ("int", "str")
        elif kind == "flabel":
            L.append(f"{p}(x, {agg}<l>) :- fl(x, l).")
            L.append(f"{p}(y, {agg}<l>) :- {p}(x, l), e(x, y).")
            self.types[p] = ("int", "float")
        else:  # min through mutual recursion with a plain predicate
            q = self.fresh("h")
            L.append(f"{p}(y, min<d>) :- {root}(y), d = 0.")
            L.append(f"{p}(y, min<d>) :- {q}(y, d).")
            L.append(f"{q}(y, d) :- {p}(x, d1), w(x, y, c), d = d1 + c.")
            self.types[p] = ("int", "int")
            self.types[q] = ("int", "int")
        self.features.add(f"rec-{agg}-{kind}")

    def generate(self):
        kinds = ["plain", "plain", "rec", "rec", "mutual", "agg", "agg", "min", "min"]
        for _ in range(self.groups):
            k = self.rng.choice(kinds)
            if k == "plain":
                self.g_plain()
            elif k == "rec":
                self.g_rec(1)
            elif k == "mutual":
                self.g_rec(2)
            elif k == "agg":
                self.g_agg()
            else:
                self.g_min()
        return "\n".join(self.lines) + "\n"


def program(seed):
    g = Gen(seed)
    return g.generate(), g.features


def stream(seed, epochs, initial=12, churn=5):
    """(initial rows per input, per-epoch {pred: (insertions, removals)}); removals take present rows,
    insertions may duplicate present rows."""
    rng = random.Random(seed * 31 + 7)
    state = {p: Counter() for p in INPUTS}
    init = {}
    for p, types in INPUTS.items():
        n = initial if len(types) > 1 else 3
        rows = [tuple(random_value(rng, t, p, i) for i, t in enumerate(types)) for _ in range(n)]
        init[p] = rows
        state[p].update(rows)
    steps = [{p: churn_step(rng, state[p], churn,
                            lambda p=p, types=types: tuple(random_value(rng, t, p, i) for i, t in enumerate(types)))
              for p, types in INPUTS.items()} for _ in range(epochs)]
    return init, steps
