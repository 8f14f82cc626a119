"""Session 47 attack: a differential fuzzer over random dataflow programs, at W = 1, 2 and 3.

Rows are (a int64, b int64, s str, f float64) throughout. What this generator leans on (beside what
tests/test_oracle.py, test_attack_s45_random.py and test_attack_s46_ops.py cover):

- joins on two-column keys mixing int and str columns, in the input's key order and swapped
  (``left_on=["s", "b"], right_on=["s", "a"]``), and joins on a float column (-0.0 and 0.0 one key);
- fixed-point loops whose variable feeds two operators at once, loops nested three deep reading the
  outer variables, reductions (count, float sum, min of str, max of float, top_k, argmax, threshold) over a
  join inside a loop cut by ``max_rounds``, ``kp.Variable`` loops of three collections;
- ``arrange_by(key, vals=[...])`` as a projection, ``distinct(key=[...])`` in another column order;
- a second dataflow installed mid-stream that ``use``s an export of the first, while one input lags and
  the others advance one or two epochs at a time;
- every view read with ``at=`` for each epoch its ``history=`` keeps, and a follower opened at install
  whose accumulated changes are compared, epoch by epoch, with the oracle after every input is closed;
- update streams with retractions, multiplicities above 1, removals of rows never inserted, and rows
  inserted and retracted in the same epoch.

The oracle recomputes every view from scratch on Counters (loops by naive iteration).
"""
from __future__ import annotations
from collections import Counter
import numpy as np
import pytest

import kpgnb as kp

COLS = ["a", "b", "s", "f"]
DT = ["int64", "int64", "str", "float64"]
OUT = dict(zip(COLS, DT))
S = ["", "p", "q", "\u00e9"]
F = [0.0, -0.0, 0.5, -1.25, 2.0, float("inf")]
S_ARR = np.array(S, dtype=object)
INPUTS = {"A": None, "B": "a", "C": ["a", "b"]}


def nf(x):
    return float(x) + 0.0


def canon(r):
    return (int(r[0]), int(r[1]), str(r[2]), nf(r[3]))


def clean(c):
    return Counter({k: v for k, v in c.items() if v})


# engine functions
def e_swap(a, b, s, f):
    return {"a": b, "b": a, "s": s, "f": f}


def e_step(a, b, s, f):
    return {"a": a, "b": (b + 1) % 4, "s": s, "f": f}


def e_sf(a, b, s, f):
    return {"a": a, "b": b, "s": S_ARR[(a + b) % 4], "f": np.where(f > 0, f * 0.5, f)}


def e_filt(a, b, s, f):
    return (a != b) | np.array([x == "p" for x in s], dtype=bool)


def e_filtf(f):
    return f >= 0.5


def z(n):
    return np.zeros(n, np.int64)


def zs(n):
    return np.full(n, "", dtype=object)


def m_cnt(a, s, count):
    return {"a": a, "b": count, "s": s, "f": np.zeros(len(a))}


def m_sum(a, b, f):
    return {"a": a, "b": b, "s": zs(len(a)), "f": f}


def m_mins(b, s):
    return {"a": z(len(b)), "b": b, "s": s, "f": np.zeros(len(b))}


def m_maxf(s, f):
    return {"a": z(len(s)), "b": z(len(s)), "s": s, "f": f}


def t_odd(c):
    return np.where(c % 2 == 1, c, 0)


def m_proj(a, s):
    return {"a": a, "b": z(len(a)), "s": s, "f": np.zeros(len(a))}


def e_rep(a, b, s, f):
    c = (b % 3).astype(np.int64)
    return {"a": np.repeat(a, c), "b": np.repeat(b, c), "s": np.repeat(s, c), "f": np.repeat(f, c)}, c


def ref_map(op, r):
    a, b, s, f = r
    if op == "swap":
        return (b, a, s, f)
    if op == "step":
        return (a, (b + 1) % 4, s, f)
    if op == "sf":
        return (a, b, S[(a + b) % 4], nf(f * 0.5 if f > 0 else f))
    raise ValueError(op)


def ref_filt(op, r):
    a, b, s, f = r
    if op == "filt":
        return a != b or s == "p"
    return f >= 0.5


class NotConverged(Exception):
    pass


def jn(x, y, lk, rk, emit):
    idx = {}
    for r, m in y.items():
        idx.setdefault(tuple(r[i] for i in rk), []).append((r, m))
    out = Counter()
    for r, m in x.items():
        for r2, m2 in idx.get(tuple(r[i] for i in lk), ()):
            out[emit(r, r2)] += m * m2
    return clean(out)


def ev(x, st, env=()):
    op = x[0]
    E = lambda y: ev(y, st, env)  # noqa
    if op == "in":
        return st[x[1]]
    if op == "use":
        return ev(x[2], st, ())
    if op == "var":
        return env[-1 - x[1]]
    if op in ("swap", "step", "sf"):
        out = Counter()
        for r, m in E(x[1]).items():
            out[ref_map(op, r)] += m
        return clean(out)
    if op in ("filt", "filtf"):
        return Counter({r: m for r, m in E(x[1]).items() if ref_filt(op, r)})
    if op == "neg":
        return Counter({r: -m for r, m in E(x[1]).items()})
    if op == "dist":
        return Counter({r: 1 for r, m in E(x[1]).items() if m > 0})
    if op == "cat":
        out = Counter(E(x[1]))
        for r, m in E(x[2]).items():
            out[r] += m
        return clean(out)
    if op == "cnt":  # count by (a, s)
        out = Counter()
        for r, m in E(x[1]).items():
            out[(r[0], r[2])] += m
        return Counter({(a, c, s, 0.0): 1 for (a, s), c in out.items() if c})
    if op == "sum":  # sum f by (a, b): a group has a row while any (a,b,f) projection is non-zero
        proj = Counter()
        for r, m in E(x[1]).items():
            proj[(r[0], r[1], r[3])] += m
        groups = {}
        for (a, b, f), m in proj.items():
            if m:
                groups.setdefault((a, b), []).append((f, m))
        out = Counter()
        for (a, b), vs in groups.items():
            tot = 0.0
            for f, m in sorted(vs, key=lambda t: t[0]):
                tot += f * m
            out[(a, b, "", nf(tot))] = 1
        return out
    if op == "mins":  # min s by b
        proj = Counter()
        for r, m in E(x[1]).items():
            proj[(r[1], r[2])] += m
        best = {}
        for (b, s), m in proj.items():
            if m > 0 and (b not in best or s < best[b]):
                best[b] = s
        return Counter({(0, b, s, 0.0): 1 for b, s in best.items()})
    if op == "maxf":  # max f by s
        proj = Counter()
        for r, m in E(x[1]).items():
            proj[(r[2], r[3])] += m
        best = {}
        for (s, f), m in proj.items():
            if m > 0 and (s not in best or f > best[s]):
                best[s] = f
        return Counter({(0, 0, s, f): 1 for s, f in best.items()})
    if op == "jas":  # join on (a, s): (a, b_right, s, f)
        return jn(E(x[1]), E(x[2]), (0, 2), (0, 2), lambda l, r: (l[0], r[1], l[2], l[3]))
    if op == "jsb":  # left (s, b) = right (s, a): (a, b_right, s, f_right)
        return jn(E(x[1]), E(x[2]), (2, 1), (2, 0), lambda l, r: (l[0], r[1], l[2], r[3]))
    if op == "jf":  # join on f: (a, b_right, s, f)
        return jn(E(x[1]), E(x[2]), (3,), (3,), lambda l, r: (l[0], r[1], l[2], l[3]))
    if op in ("semi", "anti"):
        keys = Counter()
        for r, m in E(x[2]).items():
            keys[(r[0], r[2])] += m
        ks = {k for k, m in keys.items() if m > 0}
        L = E(x[1])
        if op == "semi":
            return Counter({r: m for r, m in L.items() if (r[0], r[2]) in ks})
        return Counter({r: m for r, m in L.items() if (r[0], r[2]) not in ks})
    if op == "topk":  # top 2 by b per s, ascending, ties to smaller rows
        proj = Counter()
        for r, m in E(x[1]).items():
            proj[r] += m
        groups = {}
        for r, m in proj.items():
            if m > 0:
                groups.setdefault(r[2], []).append((r, m))
        out = Counter()
        for g, rs in groups.items():
            left = 2
            for r, m in sorted(rs, key=lambda t: (t[0][1], t[0][0], t[0][2], t[0][3])):
                if left <= 0:
                    break
                take = min(m, left)
                out[r] += take
                left -= take
        return out
    if op == "argmaxf":  # argmax f by a, ties to the smallest row
        groups = {}
        for r, m in E(x[1]).items():
            if m > 0:
                groups.setdefault(r[0], []).append(r)
        out = Counter()
        for g, rs in groups.items():
            best = max(r[3] for r in rs)
            out[min((r for r in rs if r[3] == best), key=lambda r: (r[0], r[1], r[2], r[3]))] = 1
        return out
    if op == "thr":  # threshold: c -> c if c odd (neg too) else 0
        return Counter({r: m for r, m in E(x[1]).items() if m % 2 == 1})
    if op == "distk":  # distinct(key=["s","a"])
        return Counter({r: 1 for r, m in E(x[1]).items() if m > 0})
    if op == "proj":  # arrange_by("a", vals=["s"]) -> rows (a, 0, s, 0.0) summed
        out = Counter()
        for r, m in E(x[1]).items():
            out[(r[0], 0, r[2], 0.0)] += m
        return clean(out)
    if op == "flat":  # each row b%3 times
        return clean(Counter({r: m * (r[1] % 3) for r, m in E(x[1]).items()}))
    if op == "iter":
        _, init, body, nr = x
        cur = E(init)
        n = 0
        while True:
            if nr is not None and n >= nr:
                return cur
            nxt = ev(body, st, env + (cur,))
            n += 1
            if nxt == cur:
                return cur
            cur = nxt
            if n > 40:
                raise NotConverged()
    if op == "mut":
        _, inits, bodies, nr = x
        cur = [E(i) for i in inits]
        n = 0
        while True:
            if nr is not None and n >= nr:
                return cur[0]
            nxt = [ev(b, st, env + tuple(cur)) for b in bodies]
            n += 1
            if nxt == cur:
                return cur[0]
            cur = nxt
            if n > 40:
                raise NotConverged()
    raise ValueError(op)


def here(c, env):
    """Enter c into the innermost loop scope of env (if any)."""
    if not env:
        return c
    target = env[-1].scope
    while c.scope is not target:
        # enter one level at a time
        chain = []
        s = target
        while s is not None and s is not c.scope:
            chain.append(s)
            s = s.parent
        c = c.enter(chain[-1])
    return c


def bld(x, df, env=()):
    op = x[0]
    B = lambda y: bld(y, df, env)  # noqa
    if op == "in":
        return here(df.input(x[1]), env)
    if op == "use":
        return here(df.use(x[1]), env)
    if op == "var":
        return env[-1 - x[1]]
    if op in ("swap", "step", "sf"):
        return B(x[1]).map({"swap": e_swap, "step": e_step, "sf": e_sf}[op], out=OUT)
    if op == "filt":
        return B(x[1]).filter(e_filt)
    if op == "filtf":
        return B(x[1]).filter(e_filtf)
    if op == "neg":
        return B(x[1]).negate()
    if op == "dist":
        return B(x[1]).distinct()
    if op == "cat":
        return B(x[1]).concat(B(x[2]))
    if op == "cnt":
        return B(x[1]).count(by=["a", "s"]).map(m_cnt, out=OUT)
    if op == "sum":
        return B(x[1]).sum(by=["a", "b"], col="f").map(m_sum, out=OUT)
    if op == "mins":
        return B(x[1]).min(by="b", col="s").map(m_mins, out=OUT)
    if op == "maxf":
        return B(x[1]).max(by="s", col="f").map(m_maxf, out=OUT)
    if op == "jas":
        return B(x[1]).join(B(x[2]), on=["a", "s"]).select("a", "b_right", "s", "f").rename(b_right="b")
    if op == "jsb":
        j = B(x[1]).join(B(x[2]), left_on=["s", "b"], right_on=["s", "a"])
        return j.select("a", "b_right", "s", "f_right").rename(b_right="b", f_right="f")
    if op == "jf":
        return B(x[1]).join(B(x[2]), on="f").select("a", "b_right", "s", "f").rename(b_right="b")
    if op == "semi":
        return B(x[1]).semijoin(B(x[2]), on=["a", "s"])
    if op == "anti":
        return B(x[1]).antijoin(B(x[2]), on=["a", "s"])
    if op == "topk":
        return B(x[1]).top_k(by="s", order_by="b", k=2, descending=False).select(*COLS)
    if op == "argmaxf":
        return B(x[1]).argmax(by="a", col="f").select(*COLS)
    if op == "thr":
        return B(x[1]).threshold(t_odd)
    if op == "distk":
        return B(x[1]).distinct(key=["s", "a"]).select(*COLS)
    if op == "proj":
        return B(x[1]).arrange_by("a", vals=["s"]).map(m_proj, out=OUT)
    if op == "flat":
        return B(x[1]).flat_map(e_rep, out=OUT, repeat=True)
    if op == "iter":
        _, init, body, nr = x
        return B(init).iterate(lambda v: bld(body, df, env + (v,)), max_rounds=nr)
    if op == "mut":
        _, inits, bodies, nr = x
        i0 = [B(i) for i in inits]
        scope = i0[0].scope.loop()
        vs = [kp.Variable(scope, c) for c in i0]
        res = [bld(b, df, env + tuple(vs)) for b in bodies]
        outs = [v.set(r, max_rounds=nr) for v, r in zip(vs, res)]
        return outs[0].leave()
    raise ValueError(op)


UN = ["swap", "step", "sf", "filt", "filtf", "neg", "dist", "cnt", "sum", "mins", "maxf", "topk", "argmaxf", "thr", "distk", "proj", "flat"]
BIN = ["cat", "jas", "jsb", "jf", "semi", "anti"]
MONO_UN = ["swap", "step", "sf", "filt", "filtf", "dist", "distk"]
MONO_BIN = ["cat", "jas", "jsb", "jf", "semi"]


class Gen:
    def __init__(self, rng, uses=()):
        self.rng = rng
        self.uses = list(uses)

    def p(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def leaf(self, nv, mono=False):
        opts = [("in", "A"), ("in", "B"), ("in", "C")] + self.uses * 2
        lf = self.p(opts)
        if nv and self.rng.random() < 0.6:
            lf = ("var", int(self.rng.integers(nv)))
        if mono and lf[0] != "var":
            lf = ("dist", lf)
        return lf

    def expr(self, d, nv=0):
        if d <= 0 or self.rng.random() < 0.15:
            return self.leaf(nv)
        r = self.rng.random()
        if r < 0.4:
            return (self.p(UN), self.expr(d - 1, nv))
        if r < 0.75:
            return (self.p(BIN), self.expr(d - 1, nv), self.expr(d - 1, nv))
        return self.loop(d, nv)

    def mono(self, d, nv):
        if d <= 0 or self.rng.random() < 0.2:
            return self.leaf(nv, mono=True)
        if self.rng.random() < 0.45:
            return (self.p(MONO_UN), self.mono(d - 1, nv))
        return (self.p(MONO_BIN), self.mono(d - 1, nv), self.mono(d - 1, nv))

    def loop(self, d, nv):
        kind = int(self.rng.integers(5))
        init = self.expr(d - 1, nv)
        if kind == 0:  # fixed point, monotone body; the variable feeds two operators
            b1 = self.mono(d - 1, nv + 1)
            b2 = (self.p(MONO_BIN), ("var", 0), self.mono(d - 2, nv + 1))
            return ("iter", ("dist", init), ("dist", ("cat", ("cat", ("var", 0), b1), b2)), None)
        if kind == 1:  # any body, cut
            body = (self.p(BIN), ("var", 0), self.expr(d - 1, nv + 1))
            if self.rng.random() < 0.5:
                body = (self.p(["cnt", "sum", "mins", "maxf", "dist", "topk", "argmaxf", "thr"]), body)
            return ("iter", init, body, int(self.rng.integers(0, 4)))
        if kind == 2:  # nested fixed point reading the outer variable
            inner = ("dist", ("cat", ("var", 0), (self.p(MONO_BIN), ("var", 0), ("dist", ("var", 1)))))
            inner_it = ("iter", ("dist", ("var", 0)), inner, None)
            if self.rng.random() < 0.5:  # three deep
                inner2 = ("dist", ("cat", ("var", 0), ("jas", ("var", 0), ("dist", ("var", 2)))))
                inner_it = ("iter", ("dist", ("var", 0)), ("dist", ("cat", inner_it, ("iter", ("var", 0), inner2, None))), None)
            return ("iter", ("dist", init), ("dist", ("cat", ("var", 0), inner_it)), None)
        if kind == 3:  # reduce over a join inside a loop, cut
            body = ("cat", ("var", 0), (self.p(["cnt", "sum", "mins", "maxf"]),
                                         (self.p(["jas", "jsb", "jf"]), ("var", 0), self.leaf(nv))))
            return ("iter", init, ("dist", body), int(self.rng.integers(1, 4)))
        # three variables
        k = 3
        inits = [("dist", init)] + [("dist", self.expr(d - 2, nv)) for _ in range(k - 1)]
        bodies = []
        for i in range(k):
            other = ("var", int(self.rng.integers(k)))
            bodies.append(("dist", ("cat", ("var", k - 1 - i), (self.p(MONO_BIN), other, self.mono(d - 2, nv + k)))))
        return ("mut", inits, bodies, None if self.rng.random() < 0.6 else int(self.rng.integers(1, 4)))


def rrow(rng):
    return (int(rng.integers(0, 4)), int(rng.integers(0, 4)), S[int(rng.integers(4))], F[int(rng.integers(len(F)))])


def submit(rng, sess, state, log, ep):
    rows, diffs = [], []
    n = int(rng.integers(1, NMAX))
    for _ in range(n):
        t = rng.random()
        if t < 0.25 and state:
            r = list(state)[int(rng.integers(len(state)))]
            rows.append(r); diffs.append(-int(rng.integers(1, 3)))
        elif t < 0.35:  # in and out in the same epoch
            r = rrow(rng)
            rows += [r, r]; diffs += [2, -2]
        else:
            rows.append(rrow(rng)); diffs.append(int(rng.choice([1, 1, 2, 3, -1])))
    sess.update(rows, diffs)
    for r, d in zip(rows, diffs):
        c = canon(r)
        state[c] += d
        log.append((ep, c, d))
        if not state[c]:
            del state[c]


STATS = Counter()
NMAX = 10
WAIT = 20


def at_state(log, e):
    out = Counter()
    for ep, r, d in log:
        if ep <= e:
            out[r] += d
    return clean(out)


def vcounter(view, at=None):
    c = view.columns(at=at, diffs=True)
    out = Counter()
    for a, b, s, f, d in zip(c["a"], c["b"], c["s"], c["f"], c["diff"]):
        out[canon((a, b, s, f))] += int(d)
    return clean(out)


def run(seed, workers, steps=6, depth=3, verbose=False):
    rng = np.random.default_rng(seed)
    logs = {n: [] for n in INPUTS}
    states = {n: Counter() for n in INPUTS}
    ep = {n: 0 for n in INPUTS}
    fails = []
    exp_name = "X"
    gen = Gen(rng)
    prog1 = gen.expr(depth)
    export_expr = gen.expr(2)
    H = 3
    FOL = []
    with kp.Engine(workers=workers, effort=["default", "eager", "lazy"][seed % 3]) as eng:
        ins = {n: eng.input(n, COLS, dtypes=DT, key=k) for n, k in INPUTS.items()}
        for n in INPUTS:
            submit(rng, ins[n], states[n], logs[n], 0)
        with eng.dataflow("p1") as df:
            v1 = bld(prog1, df).view("v1", history=H)
            bld(export_expr, df).arrange_by("a", "s").export(exp_name)
        fol = v1.follow(timeout=60)
        views = [(v1, prog1, 0)]
        late_step = int(rng.integers(1, steps))
        for step in range(steps):
            for n in INPUTS:
                if rng.random() < 0.75:
                    submit(rng, ins[n], states[n], logs[n], ep[n])
            if step == late_step:
                gen2 = Gen(rng, uses=[("use", exp_name, export_expr)])
                prog2 = gen2.expr(depth)
                with eng.dataflow("p2") as df:
                    v2 = bld(prog2, df).view("v2", history=H)
                views.append((v2, prog2, None))
                fol2 = v2.follow(timeout=60)
                FOL.append((fol2, prog2))
            # advance at different paces
            for n in INPUTS:
                if n == "C" and rng.random() < 0.5 and step < steps - 1:
                    continue  # lags
                ep[n] += int(rng.choice([1, 1, 2]))
                ins[n].advance_to(ep[n])
            for v, prog, born in views:
                try:
                    eng.wait(v, timeout=WAIT)
                except TimeoutError:
                    fails.append((seed, workers, v.name, step, "HANG", prog, dict(ep)))
                    return fails
                fr = v.to_pandas(diffs=True).attrs["epoch"]
                lo = max(0, fr - H)
                for e in range(lo, fr):
                    st = {n: at_state(logs[n], e) for n in INPUTS}
                    try:
                        exp = ev(prog, st)
                    except NotConverged:
                        STATS["nc"] += 1
                        return fails
                    STATS["checks"] += 1
                    STATS["rows"] += len(exp)
                    try:
                        got = vcounter(v, at=e)
                    except kp.CompactedError as err:
                        if born is None:
                            continue  # late dataflow: epochs before its start
                        fails.append((seed, workers, v.name, "compacted", e, fr, str(err)[:200]))
                        return fails
                    if got != exp:
                        fails.append((seed, workers, v.name, step, e, prog,
                                      sorted((got - exp).items())[:6], sorted((exp - got).items())[:6]))
                        return fails
        for n in INPUTS:
            ins[n].close()
        for fol2, prog2 in FOL:
            acc = []
            for fr_ in fol2:
                for a, b, s_, f, t, d in zip(fr_["a"], fr_["b"], fr_["s"], fr_["f"], fr_["time"], fr_["diff"]):
                    acc.append((int(t), canon((a, b, s_, f)), int(d)))
            t0 = min((t for t, _, _ in acc), default=None)
            if t0 is None:
                continue
            for e in range(t0, max(ep.values())):
                got = Counter()
                for t, r, d in acc:
                    if t <= e:
                        got[r] += d
                got = clean(got)
                exp = ev(prog2, {n: at_state(logs[n], e) for n in INPUTS})
                STATS["follow2"] += 1
                if got != exp:
                    fails.append((seed, workers, "follow2", e, t0, prog2, sorted((got - exp).items())[:6],
                                  sorted((exp - got).items())[:6]))
                    return fails
        acc = []
        for fr_ in fol:
            for a, b, s_, f, t, d in zip(fr_["a"], fr_["b"], fr_["s"], fr_["f"], fr_["time"], fr_["diff"]):
                acc.append((int(t), canon((a, b, s_, f)), int(d)))
        last = max(ep.values())
        t0 = min((t for t, _, _ in acc), default=0)
        for e in range(max(t0, 0), last):
            got = clean(Counter())
            for t, r, d in acc:
                if t <= e:
                    got[r] += d
            got = clean(got)
            st = {n: at_state(logs[n], e) for n in INPUTS}
            exp = ev(prog1, st)
            STATS["follow"] += 1
            if got != exp:
                fails.append((seed, workers, "follow", e, prog1, sorted((got - exp).items())[:6],
                              sorted((exp - got).items())[:6], t0))
                return fails
    return fails


def run_explicit(prog1, export_expr, prog2, seed, workers, steps=6, late_step=2, lag=True, effort="default",
                 wait=20, H=3):
    rng = np.random.default_rng(seed)
    logs = {n: [] for n in INPUTS}
    states = {n: Counter() for n in INPUTS}
    ep = {n: 0 for n in INPUTS}
    exp_name = "X"
    with kp.Engine(workers=workers, effort=effort) as eng:
        ins = {n: eng.input(n, COLS, dtypes=DT, key=k) for n, k in INPUTS.items()}
        for n in INPUTS:
            submit(rng, ins[n], states[n], logs[n], 0)
        with eng.dataflow("p1") as df:
            views = []
            if prog1 is not None:
                views.append((bld(prog1, df).view("v1", history=H), prog1, 0))
            bld(export_expr, df).arrange_by("a", "s").export(exp_name)
        for step in range(steps):
            for n in INPUTS:
                if rng.random() < 0.75:
                    submit(rng, ins[n], states[n], logs[n], ep[n])
            if step == late_step:
                with eng.dataflow("p2") as df:
                    v2 = bld(prog2, df).view("v2", history=H)
                views.append((v2, prog2, None))
            for n in INPUTS:
                if lag and n == "C" and rng.random() < 0.5 and step < steps - 1:
                    continue
                ep[n] += int(rng.choice([1, 1, 2]))
                ins[n].advance_to(ep[n])
            for v, prog, born in views:
                try:
                    eng.wait(v, timeout=wait)
                except TimeoutError:
                    return ("HANG", v.name, step, dict(ep), eng.dataflows())
                fr = v.to_pandas(diffs=True).attrs["epoch"]
                for e in range(max(0, fr - H), fr):
                    st = {n: at_state(logs[n], e) for n in INPUTS}
                    exp = ev(prog, st)
                    try:
                        got = vcounter(v, at=e)
                    except kp.CompactedError:
                        if born is None:
                            continue
                        return ("COMPACTED", v.name, e, fr)
                    if got != exp:
                        return ("MISMATCH", v.name, step, e, sorted((got - exp).items())[:6],
                                sorted((exp - got).items())[:6])
    return None


# -- the sweep (explored: seeds 0-95 at W = 1, 2, 3, no mismatch; a few kept here) ------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [13, 63])
def test_random_programs_with_late_use_and_follow(seed, workers):
    fails = run(seed, workers)
    assert not fails, fails


def test_three_variable_loop_fed_twice_at_every_worker_count():
    """Three Variables, each body reading its own variable and another one, a two-column-key join and a
    float-key join; inputs advance out of step, every epoch of history read with at=."""
    x0 = ("dist", ("in", "A"))
    x1 = ("dist", ("in", "B"))
    x2 = ("dist", ("in", "C"))
    # var 0 is the last Variable (x2), var 2 the first (x0)
    b0 = ("dist", ("cat", ("var", 2), ("jas", ("var", 0), ("dist", ("in", "B")))))
    b1 = ("dist", ("cat", ("var", 1), ("jsb", ("var", 2), ("var", 1))))
    b2 = ("dist", ("cat", ("var", 0), ("jf", ("var", 1), ("var", 0))))
    prog = ("mut", [x0, x1, x2], [b0, b1, b2], None)
    for workers in (1, 2, 3):
        fails = run_explicit(prog, ("in", "A"), ("cnt", ("jas", ("in", "A"), ("use", "X", ("in", "A")))),
                             seed=5, workers=workers)
        assert fails is None, fails


def test_reduce_over_join_inside_nested_loop():
    """A min (of str) over a join of the inner loop variable with the outer one, inside a loop cut by
    max_rounds that sits in the body of a fixed-point loop (a count there would grow without bound)."""
    inner = ("iter", ("var", 0), ("dist", ("cat", ("var", 0), ("mins", ("jas", ("var", 0), ("var", 1))))), 2)
    prog = ("iter", ("dist", ("in", "A")), ("dist", ("cat", ("var", 0), ("filt", inner))), None)
    for workers in (1, 3):
        fails = run_explicit(prog, ("in", "B"), ("sum", ("use", "X", ("in", "B"))), seed=7, workers=workers)
        assert fails is None, fails
