"""Session 46 attack: the collection operators against a from-scratch oracle, on random programs and update
streams at W = 1, 2 and 3.

What this generator leans on (less covered by the earlier ones): loops nested in loop bodies with
arbitrary (non-monotone) bodies cut by ``max_rounds`` (partially ordered times), ``kp.Variable`` loops of
two and three collections, every reduction inside loops, joins of a collection with itself on int, str and
float keys, negate/concat giving negative multiplicities, flat_map (repeat counts and index arrays), maps
that change a column's dtype (int -> str, int -> float, float -> bool -> int), an input that stays empty,
epochs advanced without data or several at once, inputs whose epochs advance out of step, and reads of
every epoch a view's ``history=`` keeps.

Rows are (a int64, b str, x float64) throughout: each operator's output is mapped back to those columns.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from numba import njit

import kpgnb as kp
from kpgnb.engine.columns import decode_column
from kpgnb.engine.scope import epoch_of

COLS = ["a", "b", "x"]
DTYPES = ["int64", "str", "float64"]
OUT = dict(zip(COLS, DTYPES))
S = ["", "a", "b", "\u00e9", "ab", "B"]
NAN = float("nan")
INF = float("inf")
XS = [-2.0, -0.0, 0.0, 0.5, 1.5, NAN, INF]
_S_ARR = np.array(S, dtype=object)


def nf(x):
    x = float(x)
    return NAN if x != x else x + 0.0


def fkey(x):
    return (1, 0.0) if x != x else (0, x)


def clean(c):
    return Counter({k: v for k, v in c.items() if v != 0})


def project(c, idx):
    out = Counter()
    for r, m in c.items():
        out[tuple(r[i] for i in idx)] += m
    return clean(out)


# -- engine-side functions ---------------------------------------------------------------------------------

def f_shift(a, b, x):
    return {"a": (a + 1) % 4, "b": b, "x": x}


def f_bs(a, b, x):  # int -> str
    return {"a": a, "b": _S_ARR[a % len(S)], "x": x}


def f_xa(a, b, x):  # int -> float
    return {"a": a, "b": b, "x": a * 0.5}


def f_pos(a, b, x):  # float -> bool (a column of its own) ...
    return {"a": a, "b": b, "x": x, "p": x > 0.0}


def f_unpos(a, b, x, p):  # ... -> int
    return {"a": p.astype(np.int64) + 2 * (a % 2), "b": b, "x": x}


def f_round(a, x):
    return np.where(x > 0.0, a % 3, 2 * (a % 2)).astype(np.int64) + (a < 0)


def f_filt(a, b):
    return (a % 2 == 0) | (b == "a")


def fm_rep(a, b, x):
    c = (a % 3).astype(np.int64)
    c[c < 0] += 3
    return {"a": np.repeat(a, c), "b": np.repeat(b, c), "x": np.repeat(x, c)}, c


def fm_idx(a, b, x):
    n = len(a)
    idx = np.repeat(np.arange(n), 2)
    aa = a[idx].copy()
    aa[1::2] = (aa[1::2] + 1) % 4
    return {"a": aa, "b": b[idx], "x": x[idx]}, idx


def _z(n):
    return np.zeros(n, np.int64)


def _e(n):
    return np.full(n, "", dtype=object)


def m_cnt_b(b, count):
    return {"a": count, "b": b, "x": np.zeros(len(b))}


def m_cnt_x(x, count):
    return {"a": count, "b": _e(len(x)), "x": x}


def m_cnt_all(count):
    return {"a": count, "b": _e(len(count)), "x": np.zeros(len(count))}


def m_sum_ab(b, a):
    return {"a": a, "b": b, "x": np.zeros(len(a))}


def m_min_xa(a, x):
    return {"a": a, "b": _e(len(a)), "x": x}


def m_max_ba(a, b):
    return {"a": a, "b": b, "x": np.zeros(len(a))}


def m_sum_xa(a, x):
    return {"a": a, "b": _e(len(a)), "x": x}


def m_max_xb(b, x):
    return {"a": _z(len(b)), "b": b, "x": x}


def m_cnt_p(p, count):
    return {"a": count + 10 * p.astype(np.int64), "b": _e(len(p)), "x": np.zeros(len(p))}


@njit
def r_flt(vals, counts):
    m = vals.shape[0]
    s = 0.0
    for i in range(m):
        s += vals[i, 0] * counts[i]
    out = np.empty((2, 1), np.float64)
    cnt = np.empty(2, np.int64)
    out[0, 0] = vals[m - 1, 0]
    cnt[0] = m
    out[1, 0] = s
    cnt[1] = 1
    return out, cnt


def ref_r_flt(group):
    g = sorted(group, key=lambda t: fkey(t[0]))
    out = Counter()
    out[nf(g[-1][0])] += len(g)
    s = 0.0
    for x, m in g:
        s += x * m
    out[nf(s)] += 1
    return out


def t_clip(c):
    return np.clip(c, -2, 2)


def t_odd(c):
    return np.where(c % 2 != 0, c, 0)


THRESH = [t_clip, t_odd]


def ref_thresh(i, c):
    return max(-2, min(2, c)) if i == 0 else (c if c % 2 != 0 else 0)


@njit
def r_str(vals, counts):
    m = vals.shape[0]
    out = np.empty((2, 1), np.int64)
    cnt = np.empty(2, np.int64)
    out[0, 0] = vals[m - 1, 0]
    cnt[0] = m
    out[1, 0] = vals[0, 0]
    cnt[1] = counts[0]
    return out, cnt


def ref_r_str(group):
    g = sorted(group)
    out = Counter()
    out[g[-1][0]] += len(g)
    out[g[0][0]] += g[0][1]
    return out


# -- oracle ------------------------------------------------------------------------------------------------

UNARY = ["shift", "bs", "xa", "pos", "filt", "rep", "idx", "neg", "cons", "dist", "cnt_b", "cnt_x", "cnt_all",
         "sum_ab", "min_xa", "max_ba", "argmin_bx", "argmax_ax", "topk", "thr", "red", "sj_a", "sj_b", "sj_x",
         "sum_xa", "max_xb", "cnt_p", "red_f", "topk_s", "argmax_ab"]
BINARY = ["cat", "j_a", "j_b", "semi_b", "anti_a", "minus", "semi_x"]
MONO_UNARY = ["shift", "bs", "xa", "filt", "sj_a", "sj_b", "sj_x", "dist", "cons"]
MONO_BINARY = ["cat", "j_a", "j_b", "semi_b"]


class NotConverged(Exception):
    pass


class TooBig(Exception):
    pass


def _join(l, r, li, ri, emit):
    idx = {}
    for row, m in r.items():
        idx.setdefault(tuple(row[i] for i in ri), []).append((row, m))
    out = Counter()
    for row, m1 in l.items():
        for row2, m2 in idx.get(tuple(row[i] for i in li), ()):
            out[emit(row, row2)] += m1 * m2
    out = clean(out)
    if out and max(abs(m) for m in out.values()) > 2 ** 40:
        raise TooBig()
    return out


class Oracle:
    def __init__(self, logs):
        self.logs = logs
        self.memo = {}

    def input_at(self, name, e):
        c = Counter()
        for ep, r, d in self.logs[name]:
            if ep <= e:
                c[r] += d
        return clean(c)

    def at(self, x, e):
        return self.ev(x, e, ())

    def ev(self, x, e, env):
        if not env:  # (keyed by the logs' lengths too: an epoch read before an input had all its rows)
            key = (x, e, tuple(len(v) for v in self.logs.values()))
            if key not in self.memo:
                self.memo[key] = self._ev(x, e, env)
            return self.memo[key]
        return self._ev(x, e, env)

    def _ev(self, x, e, env):
        op = x[0]
        ev = lambda y: self.ev(y, e, env)  # noqa: E731
        if op == "in":
            return self.input_at(x[1], e)
        if op == "var":
            return env[-1 - x[1]]
        if op == "use":
            return ev(x[2] if x[1] == "ex_a" else ("cnt_b", x[2]))
        if op in ("shift", "bs", "xa", "pos"):
            out = Counter()
            for (a, b, xx), m in ev(x[1]).items():
                if op == "shift":
                    r = ((a + 1) % 4, b, xx)
                elif op == "bs":
                    r = (a, S[a % len(S)], xx)
                elif op == "xa":
                    r = (a, b, nf(a * 0.5))
                else:
                    r = ((1 if xx > 0.0 else 0) + 2 * (a % 2), b, xx)
                out[r] += m
            return clean(out)
        if op == "filt":
            return Counter({r: m for r, m in ev(x[1]).items() if r[0] % 2 == 0 or r[1] == "a"})
        if op == "rep":
            return clean(Counter({r: m * (r[0] % 3) for r, m in ev(x[1]).items()}))
        if op == "idx":
            out = Counter()
            for (a, b, xx), m in ev(x[1]).items():
                out[(a, b, xx)] += m
                out[((a + 1) % 4, b, xx)] += m
            return clean(out)
        if op == "neg":
            return Counter({r: -m for r, m in ev(x[1]).items()})
        if op == "cons":
            return ev(x[1])
        if op == "dist":
            return Counter({r: 1 for r, m in ev(x[1]).items() if m > 0})
        if op == "cnt_b":
            return Counter({(m, g[0], 0.0): 1 for g, m in project(ev(x[1]), [1]).items()})
        if op == "cnt_x":
            return Counter({(m, "", g[0]): 1 for g, m in project(ev(x[1]), [2]).items()})
        if op == "cnt_all":
            c = ev(x[1])
            t = sum(c.values())
            return Counter({(t, "", 0.0): 1}) if t != 0 else Counter()
        if op == "sum_ab":
            groups = {}
            for (b, a), m in project(ev(x[1]), [1, 0]).items():
                groups[b] = groups.get(b, 0) + a * m
            return Counter({(t, b, 0.0): 1 for b, t in groups.items()})
        if op in ("min_xa", "max_ba"):
            idx = [0, 2] if op == "min_xa" else [0, 1]
            groups = {}
            for (g, v), m in project(ev(x[1]), idx).items():
                if m > 0:
                    groups.setdefault(g, []).append(v)
            if op == "min_xa":
                return Counter({(g, "", min(vs, key=fkey)): 1 for g, vs in groups.items()})
            return Counter({(g, max(vs), 0.0): 1 for g, vs in groups.items()})
        if op in ("argmin_bx", "argmax_ax"):
            c = ev(x[1])
            groups = {}
            gi = 1 if op == "argmin_bx" else 0
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[gi], []).append(r)
            out = Counter()
            for g, rows in groups.items():
                if op == "argmin_bx":  # rest columns (a, x): ties on x to the smaller a
                    out[min(rows, key=lambda r: (fkey(r[2]), r[0]))] += 1
                else:  # rest columns (b, x): ties on x to the smaller b
                    best = max((r[2] for r in rows), key=fkey)
                    cand = [r for r in rows if fkey(r[2]) == fkey(best)]
                    out[min(cand, key=lambda r: r[1])] += 1
            return out
        if op == "topk":  # by b, order by a; the rest (a, x) breaks ties, ascending by value
            _, sub, k, desc = x
            c = ev(sub)
            groups = {}
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[1], []).append(r)
            out = Counter()
            for g, rows in groups.items():
                rows.sort(key=lambda r: ((-r[0] if desc else r[0]), r[0], fkey(r[2])))
                left = k
                for r in rows:
                    if left <= 0:
                        break
                    take = min(c[r], left)
                    out[r] += take
                    left -= take
            return out
        if op == "thr":
            _, sub, fi = x
            out = Counter()
            for r, m in ev(sub).items():
                y = ref_thresh(fi, m)
                if y:
                    out[r] += y
            return out
        if op == "red":
            groups = {}
            for (a, b), m in project(ev(x[1]), [0, 1]).items():
                groups.setdefault(a, []).append((b, m))
            out = Counter()
            for a, g in groups.items():
                for b, m in ref_r_str(g).items():
                    out[(a, b, 0.0)] += m
            return clean(out)
        if op == "sum_xa":
            groups = {}
            for (a, xx), m in project(ev(x[1]), [0, 2]).items():
                groups[a] = groups.get(a, 0.0) + xx * m
            return Counter({(a, "", nf(t)): 1 for a, t in groups.items()})
        if op == "max_xb":
            groups = {}
            for (b, xx), m in project(ev(x[1]), [1, 2]).items():
                if m > 0:
                    groups.setdefault(b, []).append(xx)
            return Counter({(0, b, max(vs, key=fkey)): 1 for b, vs in groups.items()})
        if op == "cnt_p":
            c = Counter()
            for (a, b, xx), m in ev(x[1]).items():
                c[xx > 0.0] += m
            return Counter((m + 10 * int(p), "", 0.0) for p, m in c.items() if m != 0)
        if op == "red_f":
            groups = {}
            for (a, xx), m in project(ev(x[1]), [0, 2]).items():
                groups.setdefault(a, []).append((xx, m))
            out = Counter()
            for a, g in groups.items():
                for xx, m in ref_r_flt(g).items():
                    out[(a, "", xx)] += m
            return clean(out)
        if op == "topk_s":  # by a, order by b; the rest (b, x) breaks ties
            _, sub, k, desc = x
            c = ev(sub)
            groups = {}
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[0], []).append(r)
            out = Counter()
            for g, rows in groups.items():
                rows.sort(key=lambda r: fkey(r[2]))
                rows.sort(key=lambda r: r[1], reverse=desc)
                left = k
                for r in rows:
                    if left <= 0:
                        break
                    take = min(c[r], left)
                    out[r] += take
                    left -= take
            return out
        if op == "argmax_ab":
            c = ev(x[1])
            groups = {}
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[0], []).append(r)
            out = Counter()
            for g, rows in groups.items():
                best = max(r[1] for r in rows)
                out[min((r for r in rows if r[1] == best), key=lambda r: fkey(r[2]))] += 1
            return out
        if op == "sj_a":
            c = ev(x[1])
            return _join(c, c, [0], [0], lambda l, r: (l[0], r[1], l[2]))
        if op == "sj_b":
            c = ev(x[1])
            return _join(c, c, [1], [1], lambda l, r: (l[0], l[1], r[2]))
        if op == "sj_x":
            c = ev(x[1])
            return _join(c, c, [2], [2], lambda l, r: (r[0], l[1], l[2]))
        if op == "cat":
            out = Counter(ev(x[1]))
            for r, m in ev(x[2]).items():
                out[r] += m
            return clean(out)
        if op == "minus":
            out = Counter(ev(x[1]))
            for r, m in ev(x[2]).items():
                out[r] -= m
            return clean(out)
        if op == "j_a":
            return _join(ev(x[1]), ev(x[2]), [0], [0], lambda l, r: (l[0], r[1], l[2]))
        if op == "j_b":
            return _join(ev(x[1]), ev(x[2]), [1], [1], lambda l, r: (r[0], l[1], l[2]))
        if op in ("semi_b", "anti_a", "semi_x"):
            a, b = ev(x[1]), ev(x[2])
            i = {"semi_b": 1, "anti_a": 0, "semi_x": 2}[op]
            keys = {g[0] for g, m in project(b, [i]).items() if m > 0}
            semi = op != "anti_a"
            return Counter({r: m for r, m in a.items() if (r[i] in keys) == semi})
        if op in ("iter_at", "delay"):
            if op == "delay":
                return ev(x[1])
            x, op = ("iter", x[1], x[2], None), "iter"
        if op == "iter":
            _, init, body, nr = x
            cur = ev(init)
            for _ in range(nr if nr is not None else 100):
                nxt = clean(self.ev(body, e, env + (cur,)))
                if nxt == cur:
                    break
                cur = nxt
            else:
                if nr is None:
                    raise NotConverged()
            return cur
        if op == "vars":
            _, inits, bodies, nr, which = x
            cs = [ev(i) for i in inits]
            for _ in range(nr if nr is not None else 100):
                nxt = [clean(self.ev(b, e, env + tuple(cs))) for b in bodies]
                if nxt == cs:
                    break
                cs = nxt
            else:
                if nr is None:
                    raise NotConverged()
            return cs[which]
        raise ValueError(op)


# -- building --------------------------------------------------------------------------------------------

def here(coll, env):
    if env and env[-1].scope is not coll.scope and coll.scope.is_ancestor_of(env[-1].scope):
        return coll.enter(env[-1].scope)
    return coll


MAPS = {"shift": f_shift, "bs": f_bs, "xa": f_xa}


def build(x, df, env=()):
    op = x[0]
    bd = lambda y: build(y, df, env)  # noqa: E731
    if op == "in":
        return df.input(x[1])
    if op == "var":
        return env[-1 - x[1]]
    if op == "use":
        u = df.use(x[1])
        if x[1] == "ex_a":
            return u if len(x) > 3 else u.select(*COLS)
        return u.map(m_cnt_b, out=OUT)
    if op in MAPS:
        return bd(x[1]).map(MAPS[op], out=OUT)
    if op == "pos":
        return bd(x[1]).map(f_pos).map(f_unpos, out=OUT)
    if op == "filt":
        return bd(x[1]).filter(f_filt)
    if op == "rep":
        return bd(x[1]).flat_map(fm_rep, out=OUT, repeat=True)
    if op == "idx":
        return bd(x[1]).flat_map(fm_idx, out=OUT, repeat=False)
    if op == "neg":
        return bd(x[1]).negate()
    if op == "cons":
        return bd(x[1]).consolidate()
    if op == "dist":
        return bd(x[1]).distinct().select(*COLS)
    if op == "cnt_b":
        return bd(x[1]).count(by="b").map(m_cnt_b, out=OUT)
    if op == "cnt_x":
        return bd(x[1]).count(by="x").map(m_cnt_x, out=OUT)
    if op == "cnt_all":
        return bd(x[1]).count(by=[]).map(m_cnt_all, out=OUT)
    if op == "sum_ab":
        return bd(x[1]).sum(by="b", col="a").map(m_sum_ab, out=OUT)
    if op == "min_xa":
        return bd(x[1]).min(by="a", col="x").map(m_min_xa, out=OUT)
    if op == "max_ba":
        return bd(x[1]).max(by="a", col="b").map(m_max_ba, out=OUT)
    if op == "argmin_bx":
        return bd(x[1]).argmin(by="b", col="x").select(*COLS)
    if op == "argmax_ax":
        return bd(x[1]).argmax(by="a", col="x").select(*COLS)
    if op == "topk":
        return bd(x[1]).top_k(by="b", order_by="a", k=x[2], descending=x[3]).select(*COLS)
    if op == "thr":
        return bd(x[1]).threshold(THRESH[x[2]]).select(*COLS)
    if op == "red":
        r = bd(x[1]).reduce(by="a", fn=r_str, columns=["b"], out={"b": "str"})
        return r.map(lambda a, b: {"a": a, "b": b, "x": np.zeros(len(a))}, out=OUT)
    if op == "sum_xa":
        return bd(x[1]).sum(by="a", col="x").map(m_sum_xa, out=OUT)
    if op == "max_xb":
        return bd(x[1]).max(by="b", col="x").map(m_max_xb, out=OUT)
    if op == "cnt_p":
        return bd(x[1]).map(f_pos).count(by="p").map(m_cnt_p, out=OUT)
    if op == "red_f":
        r = bd(x[1]).reduce(by="a", fn=r_flt, columns=["x"])
        return r.map(m_sum_xa, out=OUT)
    if op == "topk_s":
        return bd(x[1]).top_k(by="a", order_by="b", k=x[2], descending=x[3]).select(*COLS)
    if op == "argmax_ab":
        return bd(x[1]).argmax(by="a", col="b").select(*COLS)
    if op in ("sj_a", "sj_b", "sj_x"):
        c = bd(x[1])
        if op == "sj_a":
            return c.join(c, on="a").select("a", "b_right", "x").rename(b_right="b")
        if op == "sj_b":
            return c.join(c, on="b").select("a", "b", "x_right").rename(x_right="x")
        return c.join(c, on="x").select("a_right", "b", "x").rename(a_right="a")
    if op == "cat":
        return bd(x[1]).concat(bd(x[2]))
    if op == "minus":
        return bd(x[1]).concat(bd(x[2]).negate())
    if op == "j_a":
        r = x[2]
        if r[0] == "use" and r[1] == "ex_a":
            r = r + (True,)  # (the imported arrangement itself, keyed by a)
        return bd(x[1]).join(bd(r), on="a").select("a", "b_right", "x").rename(b_right="b")
    if op == "j_b":
        return bd(x[1]).join(bd(x[2]), on="b").select("a_right", "b", "x").rename(a_right="a")
    if op == "semi_b":
        return bd(x[1]).semijoin(bd(x[2]), on="b")
    if op == "semi_x":
        return bd(x[1]).semijoin(bd(x[2]), on="x")
    if op == "anti_a":
        return bd(x[1]).antijoin(bd(x[2]), on="a")
    if op == "delay":
        return bd(x[1]).delay(f_round)
    if op == "iter_at":
        _, init, body = x
        i0 = here(bd(init), env)
        loop = i0.scope.loop()
        var = kp.Variable(loop, i0.enter_at(loop, f_round))
        return var.set(build(body, df, env + (var,))).leave()
    if op == "iter":
        _, init, body, nr = x
        return here(bd(init), env).iterate(lambda v: build(body, df, env + (v,)), max_rounds=nr)
    if op == "vars":
        _, inits, bodies, nr, which = x
        i0 = [here(bd(i), env) for i in inits]
        scope = i0[0].scope.loop()
        vs = [kp.Variable(scope, i) for i in i0]
        nexts = [build(b, df, env + tuple(vs)) for b in bodies]
        res = [v.set(n, max_rounds=nr) for v, n in zip(vs, nexts)]
        return res[which].leave()
    raise ValueError(op)


# -- random programs ---------------------------------------------------------------------------------------

def leaves_of(x):
    if x[0] in ("in", "var"):
        return [x]
    if x[0] == "use":
        return [x] + [lf for lf in leaves_of(x[2]) if lf[0] == "in"]
    out = []
    for y in x[1:]:
        if isinstance(y, tuple) and y and isinstance(y[0], str):
            out += leaves_of(y)
        elif isinstance(y, tuple) and y and isinstance(y[0], tuple):
            for z in y:
                out += leaves_of(z)
    return out


class Gen:
    def __init__(self, rng, uses=()):
        self.rng = rng
        self.uses = list(uses)

    def r(self):
        return self.rng.random()

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def leaf(self, nvars, mono=False):
        lf = self.pick([("in", "P"), ("in", "Q"), ("in", "P"), ("in", "Q"), ("in", "E")] + self.uses * 2)
        if nvars and self.r() < 0.6:
            lf = ("var", int(self.rng.integers(nvars)))
        if mono:
            lf = ("dist", lf)
        return lf

    def expr(self, depth, nvars=0, loops=0):
        if depth <= 0 or self.r() < 0.1:
            return self.leaf(nvars)
        r = self.r()
        if r < 0.5:
            op = self.pick(UNARY)
            sub = self.expr(depth - 1, nvars, loops)
            if op in ("topk", "topk_s"):
                return (op, sub, int(self.rng.integers(1, 3)), bool(self.r() < 0.5))
            if op == "thr":
                return (op, sub, int(self.rng.integers(2)))
            return (op, sub)
        if r < 0.8 or loops >= 2:
            return (self.pick(BINARY), self.expr(depth - 1, nvars, loops), self.expr(depth - 1, nvars, loops))
        return self.loop(depth, nvars, loops)

    def mono(self, depth, nvars):
        if depth <= 0 or self.r() < 0.2:
            return self.leaf(nvars, mono=True)
        if self.r() < 0.5:
            return (self.pick(MONO_UNARY), self.mono(depth - 1, nvars))
        return (self.pick(MONO_BINARY), self.mono(depth - 1, nvars), self.mono(depth - 1, nvars))

    def bound(self, body):
        return ("dist", body) if self.r() < 0.4 else ("thr", body, 0)

    def with_var(self, body, i=0, mono=False):
        if ("var", i) not in leaves_of(body):
            body = (self.pick(["cat", "j_a", "semi_b"] + ([] if mono else ["minus"])), ("var", i), body)
        return body

    def loop(self, depth, nvars, loops):
        kind = int(self.rng.integers(5))
        init = self.expr(depth - 1, nvars, loops)
        if kind == 0:  # monotone fixed point
            body = self.with_var(self.mono(depth - 1, nvars + 1), mono=True)
            return ("iter", ("dist", init), ("dist", ("cat", ("var", 0), body)), None)
        if kind == 1:  # any body, cut
            body = self.bound(self.with_var(self.expr(depth - 1, nvars + 1, loops + 1)))
            return ("iter", init, body, int(self.rng.integers(0, 4)))
        if kind == 2:  # a loop in the body of a loop, both cut, the inner reading the outer's variable
            inner_body = self.bound(self.with_var(self.expr(depth - 2, nvars + 2, loops + 2)))
            if ("var", 1) not in leaves_of(inner_body):
                inner_body = ("cat", inner_body, ("thr", ("var", 1), 1))
            inner = ("iter", self.pick([("var", 0), self.expr(1, nvars + 1, loops + 1)]), inner_body,
                     int(self.rng.integers(1, 4)))
            outer_body = self.bound(self.pick([inner, ("cat", ("var", 0), inner), ("minus", inner, ("var", 0)),
                                               ("j_b", ("var", 0), inner)]))
            return ("iter", init, outer_body, int(self.rng.integers(1, 4)))
        if kind == 3 and self.r() < 0.4:  # enter_at and delay (a fixed point: the same answer)
            body = self.with_var(self.mono(depth - 1, nvars + 1), mono=True)
            return ("iter_at", ("dist", init), ("dist", ("cat", ("var", 0), ("delay", body))))
        if kind == 3:  # nested monotone fixed points
            inner = self.with_var(self.mono(depth - 2, nvars + 2), mono=True)
            if ("var", 1) not in leaves_of(inner):
                inner = ("cat", inner, ("j_a", ("var", 0), ("dist", ("var", 1))))
            inner_it = ("iter", ("dist", ("var", 0)), ("dist", ("cat", ("var", 0), inner)), None)
            return ("iter", ("dist", init), ("dist", ("cat", ("var", 0), inner_it)), None)
        # Variables: 2 or 3 collections
        n = int(self.rng.integers(2, 4))
        inits = [init] + [self.expr(depth - 2, nvars, loops) for _ in range(n - 1)]
        if self.r() < 0.5:  # monotone fixed point
            inits = [("dist", i) for i in inits]
            bodies = [("dist", ("cat", ("var", n - 1 - j), self.with_var(self.mono(depth - 2, nvars + n),
                                                                         int(self.rng.integers(n)), mono=True)))
                      for j in range(n)]
            nr = None
        else:
            bodies = [self.bound(self.with_var(self.expr(depth - 2, nvars + n, loops + 1), int(self.rng.integers(n))))
                      for j in range(n)]
            nr = int(self.rng.integers(1, 4))
        return ("vars", tuple(inits), tuple(bodies), nr, int(self.rng.integers(n)))


# -- update streams ----------------------------------------------------------------------------------------

def rand_row(rng):
    return (int(rng.integers(-1, 5)), S[int(rng.integers(len(S)))], XS[int(rng.integers(len(XS)))])


def submit(rng, inp, state, log, epoch, big=1):
    n = int(rng.integers(1, 6)) * big
    rows, diffs = [], []
    for _ in range(n):
        if state and rng.random() < 0.35:
            r = list(state)[int(rng.integers(len(state)))]
            d = -1
        else:
            r = rand_row(rng)
            d = int(rng.choice([1, 1, 1, 2, -1]))
        rows.append(r)
        diffs.append(d)
    if all(d == 1 for d in diffs) and rng.random() < 0.5:
        inp.insert(rows)
    else:
        inp.update(rows, diffs)
    for r, d in zip(rows, diffs):
        c = (r[0], r[1], nf(r[2]))
        log.append((epoch, c, d))
        state[c] += d
        if state[c] == 0:
            del state[c]


def view_counter(view, at=None):
    cols = view.columns(at=at, diffs=True)
    out = Counter()
    for a, b, x, d in zip(cols["a"], cols["b"], cols["x"], cols["diff"]):
        out[(int(a), str(b), nf(x))] += int(d)
    return clean(out)


def _sub(a, b):
    out = Counter(a)
    for r, m in b.items():
        out[r] -= m
    return sorted(clean(out).items(), key=repr)[:8]


def run_case(seed, workers, nviews=3, steps=7, depth=3, late=False, close_p=0.0, big=1, burst=1, exports=False):
    rng = np.random.default_rng(seed)
    gen = Gen(rng)
    xprog = None
    if exports:
        xprog = gen.expr(2)
        gen.uses = [("use", "ex_a", xprog), ("use", "ex_c", xprog)]
    progs = []
    logs = {"P": [], "Q": [], "E": []}
    oracle = Oracle(logs)
    # programs the oracle can evaluate on an empty and on a random input
    tries = 0
    while len(progs) < nviews and tries < 50:
        tries += 1
        p = gen.expr(depth)
        if not any(lf[0] == "in" for lf in leaves_of(p)):
            continue
        progs.append(p)
    PROGS[:] = progs
    states = {n: Counter() for n in logs}
    ep = {n: 0 for n in logs}
    fails = []
    effort = ["default", "eager", "lazy"][int(rng.integers(3))]
    hist = int(rng.integers(1, 6))
    with kp.Engine(workers=workers, effort=effort) as eng:
        ins = {"P": eng.input("P", COLS, dtypes=DTYPES, key="a"),
               "Q": eng.input("Q", COLS, dtypes=DTYPES, key=["a", "b"]),
               "E": eng.input("E", COLS, dtypes=DTYPES)}
        views = []
        born = {}
        if exports:
            with eng.dataflow("x") as df:
                xc = build(xprog, df)
                xc.arrange_by("a").export("ex_a")
                xc.count(by="b").export("ex_c")
            drop_at = int(rng.integers(0, steps))
            handles = [eng.trace("ex_a"), eng.trace("ex_c")]
        for i, p in enumerate(progs):  # (one dataflow each: eng.wait(view) waits for its dataflow's inputs)
            with eng.dataflow(f"q{i}") as df:
                views.append(build(p, df).view(f"v{i}", history=hist))
        closed = set()
        late_at = int(rng.integers(1, steps)) if late else None
        for step in range(steps):
            for _ in range(int(rng.integers(1, burst + 1))):  # (several epochs before the engine looks)
                for n in ("P", "Q"):
                    if n not in closed and rng.random() < 0.75:
                        submit(rng, ins[n], states[n], logs[n], ep[n], big)
                for n in logs:
                    r = rng.random()
                    if n in closed or r < 0.25:
                        continue  # this one lags
                    ep[n] += 1 if r < 0.8 else int(rng.integers(2, 4))
                    ins[n].advance_to(ep[n])
                    if rng.random() < close_p:
                        ins[n].close()
                        closed.add(n)
            if exports and step == drop_at:
                eng.drop("x")
            if step == late_at:  # the same programs installed again, late
                start = max(ep.values())
                for i, p in enumerate(progs):
                    with eng.dataflow(f"late{i}") as df:
                        views.append(build(p, df).view(f"late{i}", history=hist))
                progs = progs + progs
                born = {i: start for i in range(len(views) // 2, len(views))}
            if exports:  # the exports read through trace handles opened at the start: every epoch
                eng.wait(timeout=60)
                for h, ref, dts in ((handles[0], xprog, DTYPES), (handles[1], ("cnt_b", xprog), ["str", "int64"])):
                    up = epoch_of(h.upper)
                    for e in range(0, 10 ** 9 if up is None else up):
                        if up is None and e > max(ep.values()):
                            break
                        try:
                            exp = oracle.at(ref, e)
                        except (TooBig, NotConverged) as ex:
                            STATS[type(ex).__name__] += 1
                            return fails
                        keys, vals, cnt = h.accumulate(at=e, raw=True)
                        data = np.concatenate([keys, vals], axis=0)
                        cols = [decode_column(data[j], d, eng.symbols) for j, d in enumerate(dts)]
                        got = Counter()
                        for *row, m in zip(*cols, cnt):
                            if len(row) == 3:
                                got[(int(row[0]), str(row[1]), nf(row[2]))] += int(m)
                            else:
                                got[(int(row[1]), str(row[0]), 0.0)] += int(m)
                        got = clean(got)
                        STATS["handle_checks"] += 1
                        if got != exp:
                            fails.append((seed, workers, "handle", step, e, ref, _sub(got, exp), _sub(exp, got)))
                            return fails
            for i, v in enumerate(views):
                try:
                    eng.wait(v, timeout=60)
                except kp.DataflowError as err:
                    if "OverflowError" in repr(err) or "2**62" in str(err):
                        STATS["overflow"] += 1
                        return fails
                    raise
                upto = v.epoch
                TRACE.append((step, i, dict(ep), upto, hist))
                if upto is None:  # every input it reads is closed
                    reads = [(None, 10 ** 9)]
                else:
                    reads = [(e, e) for e in range(max(0, upto - hist), upto)]
                    if upto > v.op.born:  # (a late view reads as nothing until its start is final)
                        reads.append((None, upto - 1))
                for at, e in reads:
                    try:
                        exp = oracle.at(progs[i], e)
                    except (TooBig, NotConverged) as ex:
                        STATS[type(ex).__name__] += 1
                        return fails
                    try:
                        got = view_counter(v, at=at)
                    except kp.CompactedError:
                        # (the view may have moved on since: a view that does not depend on an input its
                        # dataflow reads runs ahead of the epoch eng.wait waits for; a late one has no
                        # answer before it started)
                        assert e < v.epoch - hist or e < born.get(i, 0), (e, v.epoch, hist)
                        STATS["compacted"] += 1
                        continue
                    STATS["checks"] += 1
                    STATS["rows"] += len(exp)
                    if got != exp:
                        fails.append((seed, workers, i, step, e, progs[i], _sub(got, exp), _sub(exp, got)))
                        return fails
    STATS["done"] += 1
    return fails


STATS = Counter()  # (how much each run checked: skipped cases, epochs compared, rows)
TRACE = []
PROGS = []


@pytest.mark.parametrize("seed,workers", [(seed, w) for seed in range(6) for w in (1, 2, 3)])
def test_random_ops(seed, workers):
    """Random programs, one dataflow each, over inputs advancing out of step; every epoch history keeps."""
    fails = run_case(1000 + seed, workers, depth=4)
    assert not fails, fails


@pytest.mark.parametrize("seed,workers", [(seed, seed % 3 + 1) for seed in range(8)])
def test_random_ops_shared(seed, workers):
    """The same with exported arrangements (read by the programs, inside loops too, and through trace handles
    opened at the start, after the exporter is dropped), dataflows installed late, several epochs with data
    submitted before each wait, inputs closed midway."""
    fails = run_case(1100 + seed, workers, depth=4, steps=6, big=2, burst=2, exports=True, late=True,
                     close_p=0.05)
    assert not fails, fails


@pytest.mark.parametrize("workers", [1, 3])
def test_swapped_key_joins_on_arrangements(workers):
    """Joins whose key columns are given in another order than an arrangement's key (an input keyed by
    (a, b), arrange_by, a reduction's output, a rename that swaps the key's names) pair the right columns."""
    P_rows = [(1, 2, 5), (2, 1, 6), (1, 1, 7), (3, 4, 8), (2, 1, 9)]
    Q_rows = [(2, 1, 50), (1, 2, 60), (4, 3, 70), (1, 1, 80), (1, 2, 90)]
    with kp.Engine(workers=workers) as eng:
        P = eng.input("P", ["a", "b", "c"], key=["a", "b"])
        Q = eng.input("Q", ["a", "b", "c"], key=["a", "b"])
        P.insert(P_rows)
        Q.insert(Q_rows)
        P.advance_to(1)
        Q.advance_to(1)
        with eng.dataflow("d") as df:
            p, q = df.input("P"), df.input("Q")
            views = {
                "swap": p.join(q, left_on=["a", "b"], right_on=["b", "a"]).select("a", "b", "c", "c_right"),
                "swap_arr": p.arrange_by("a", "b").join(q.arrange_by("a", "b"), left_on=["b", "a"],
                                                        right_on=["a", "b"]).select("a", "b", "c", "c_right"),
                "self": p.join(p, left_on=["a", "b"], right_on=["b", "a"]).select("a", "b", "c", "c_right"),
                "rename": p.arrange_by("a", "b").rename(a="b", b="a").join(q, on=["a", "b"])
                .select("a", "b", "c", "c_right"),
                "count": p.count(by=["b", "a"]).join(q, on=["a", "b"]).select("a", "b", "count", "c"),
                "semi": p.semijoin(q, left_on=["a", "b"], right_on=["b", "a"]),
                "anti": p.antijoin(q, left_on=["a", "b"], right_on=["b", "a"]),
            }
            views = {k: c.view(k) for k, c in views.items()}
        pc = Counter(P_rows)
        exp = {
            "swap": Counter((x[0], x[1], x[2], y[2]) for x in P_rows for y in Q_rows if (x[0], x[1]) == (y[1], y[0])),
            "swap_arr": Counter((x[0], x[1], x[2], y[2]) for x in P_rows for y in Q_rows
                                if (x[1], x[0]) == (y[0], y[1])),
            "self": Counter((x[0], x[1], x[2], y[2]) for x in P_rows for y in P_rows if (x[0], x[1]) == (y[1], y[0])),
            "rename": Counter((x[1], x[0], x[2], y[2]) for x in P_rows for y in Q_rows if (x[1], x[0]) == (y[0], y[1])),
            "count": Counter((y[0], y[1], sum(m for r, m in pc.items() if (r[0], r[1]) == (y[0], y[1])), y[2])
                             for y in Q_rows if any((x[0], x[1]) == (y[0], y[1]) for x in P_rows)),
            "semi": Counter(x for x in P_rows if any((x[0], x[1]) == (y[1], y[0]) for y in Q_rows)),
            "anti": Counter(x for x in P_rows if not any((x[0], x[1]) == (y[1], y[0]) for y in Q_rows)),
        }
        for k, v in views.items():
            eng.wait(v)
            got = Counter(map(tuple, v.to_pandas().values.tolist()))
            assert got == exp[k], k


def _slow_identity(a):
    import time
    time.sleep(0.5)
    return {"a": a}


def test_wait_on_view_waits_for_its_own_inputs():
    with kp.Engine(workers=1) as eng:
        P = eng.input("P", ["a"])
        E = eng.input("E", ["a"])
        with eng.dataflow("d") as df:
            vp = df.input("P").map(_slow_identity).view("vp")  # reads P only
            df.input("E").view("ve")                            # reads E only
        P.insert([(1,)])
        P.advance_to(1)
        E.advance_to(1)
        eng.wait(vp)
        P.insert([(2,)])
        P.advance_to(2)  # E stays at epoch 1: it is not an input of vp
        eng.wait(vp, timeout=30)
        frame = vp.to_pandas()
        # the wait's promise (README: "eng.wait(view) blocks until it has caught up with the epochs its inputs
        # were advanced to"; Engine.wait: "a View (reflects every epoch its inputs were advanced to), a
        # dataflow's name (all of its views do)")
        assert frame.attrs["epoch"] == 2
        assert sorted(frame["a"]) == [1, 2]
