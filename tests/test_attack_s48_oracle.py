"""Attack (session 48): a differential fuzzer with a new operator mix, checked against a from-scratch
Python reference (collections.Counter) at W = 1, 2 and 3.

Rows are (k int64, s str, f float64, g bool), with f drawn from 0.0, -0.0, 0.5, -1.25, 2.0, +-inf and NaN,
and s from '', 'a', 'b', 'é'. The operator mix (beside what tests/test_attack_s47_fuzz.py covers): maps that
make -0.0 and -NaN, filters on bool/float/str, flat_map, select/rename round trips, consolidate, negate,
distinct() and distinct(key=) (on the input's own key and others), count(by=[k, g]) and count(), threshold
over all columns and by a subset, float sum (inf, -inf, NaN), min of float (NaN after +inf), max of str and
of bool, argmin/argmax/top_k (with their tie-breaks), a numba reduce over (int, bool) and one over float,
joins on str, float (NaN and -0.0 keys), bool and (int, str) keys, semijoin/antijoin, joins against renamed
arrangements (a renamed keyed input, a renamed distinct(key=), names swapped: ``rename(k="s", s="k")``), a
self-join of an arrangement with its own rename, and a fixed-point loop.

Update streams: insertions, retractions below zero (rows never inserted), equal rows inserted many times,
rows inserted and retracted in one epoch, several epochs submitted before a wait and one by one, epochs
skipped (``advance_to(e + 3)``), one input lagging. Dataflows: the first installed after some epochs, its
export (``arrange_by``, ``distinct(key=)``, a renamed ``distinct(key=)``) read by a dataflow installed late,
the producer dropped while the reader goes on, a third dataflow importing the kept export after the drop, a
trace handle on the export holding compaction back. Every view is read with ``at=`` at every epoch its
``history=`` (1, 2, 3 or 100) keeps.

Also a fixed-point loop joining its variable against a renamed outer arrangement, and followers of the late
dataflow compared epoch by epoch once every input is closed. About 2,500 programs ran (seeds at W = 1, 2, 3).
The engine's answers matched the reference in every run; what the fuzzer found is that ``eng.wait`` on a
view importing an export returns early, and the cause (an import is taken to read every input of the
export's producer) shows in ``drop_input`` and in broken-input failures too (below).

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from numba import njit

T = 60


def _slow_ident(k):
    time.sleep(0.3)  # a step that takes a while: a wait that returns early sees the view behind
    return {"k": k}


# -- the fuzzer: engine functions, the reference (ev), the builder (bld), the generator, the driver (run) --

COLS = ["k", "s", "f", "g"]
DT = ["int64", "str", "float64", "bool"]
OUT = dict(zip(COLS, DT))
S = ["", "a", "b", "\u00e9"]
S_ARR = np.array(S, dtype=object)
NAN = float("nan")
F = [0.0, -0.0, 0.5, -1.25, 2.0, float("inf"), float("-inf"), NAN]
KMAX = 4
NMAX = 8
INPUTS = {"A": None, "B": "k", "C": ["k", "s"]}


def nf(x):
    x = float(x)
    if x != x:
        return NAN
    return x + 0.0


def fk(x):
    return (1, 0.0) if x != x else (0, x)


def canon(r):
    return (int(r[0]), str(r[1]), nf(r[2]), bool(r[3]))


def rk(r):  # value order of a whole row
    return (r[0], r[1], fk(r[2]), r[3])


def clean(c):
    return Counter({k: v for k, v in c.items() if v})


# ---- engine functions
def e_m1(k, s, f, g):
    return {"k": (k + 1) % KMAX, "s": s, "f": -f, "g": ~g}


def e_m2(k, s, f, g):
    return {"k": k, "s": S_ARR[k % 4], "f": np.where(g, f * 2, f), "g": g}


def e_fg(g):
    return g


def e_ff(f):
    return f > 0


def e_fs(s):
    return np.array([x != "" for x in s], dtype=bool)


def e_flat(k, s, f, g):
    c = (k % 3).astype(np.int64)
    return {"k": np.repeat(k, c), "s": np.repeat(s, c), "f": np.repeat(f, c), "g": np.repeat(g, c)}, c


def t_fn(c):
    return np.where(c < 0, -1, np.minimum(c, 2))


def z(n):
    return np.zeros(n, np.int64)


def m_cnt(k, g, count):
    return {"k": k, "s": np.full(len(k), "", dtype=object), "f": count.astype(np.float64), "g": g}


def m_sum(s, g, f):
    return {"k": z(len(s)), "s": s, "f": f, "g": g}


def m_mink(s, f):
    return {"k": z(len(s)), "s": s, "f": f, "g": np.zeros(len(s), bool)}


def m_maxs(g, s):
    return {"k": z(len(s)), "s": s, "f": np.zeros(len(s)), "g": g}


def m_maxg(k, g):
    return {"k": k, "s": np.full(len(k), "", dtype=object), "f": np.zeros(len(k)), "g": g}


@njit
def r_fn(vals, counts):
    npos = 0
    tot = 0
    for i in range(vals.shape[0]):
        if counts[i] > 0:
            npos += 1
        tot += counts[i]
    out = np.empty((1, 2), np.int64)
    out[0, 0] = npos
    out[0, 1] = abs(tot) % 2
    return out, np.ones(1, np.int64)


@njit
def r_fl(vals, counts):
    n = vals.shape[0]
    out = np.empty((2, 1), np.float64)
    out[0, 0] = vals[0, 0]
    out[1, 0] = vals[n - 1, 0]
    c = np.empty(2, np.int64)
    c[0] = 1
    c[1] = counts[n - 1]
    return out, c


def m_redf(g, f):
    return {"k": z(len(g)), "s": np.full(len(g), "", dtype=object), "f": f, "g": g}


def t_k(c):
    return np.abs(c) % 3


def m_thrk(k):
    return {"k": k, "s": np.full(len(k), "", dtype=object), "f": np.zeros(len(k)), "g": np.zeros(len(k), bool)}


def m_cnt0(count):
    n = len(count)
    return {"k": z(n), "s": np.full(n, "", dtype=object), "f": count.astype(np.float64), "g": np.zeros(n, bool)}


def m_red(s, k, g):
    return {"k": k, "s": s, "f": np.zeros(len(s)), "g": g}


def ref_map(op, r):
    k, s, f, g = r
    if op == "m1":
        return ((k + 1) % KMAX, s, nf(-f), not g)
    if op == "m2":
        return (k, S[k % 4], nf(f * 2 if g else f), g)
    raise ValueError(op)


def jn(x, y, lk, rk_, emit):
    idx = {}
    for r, m in y.items():
        idx.setdefault(tuple(r[i] for i in rk_), []).append((r, m))
    out = Counter()
    for r, m in x.items():
        for r2, m2 in idx.get(tuple(r[i] for i in lk), ()):
            out[emit(r, r2)] += m * m2
    return clean(out)


def proj(c, idx):
    out = Counter()
    for r, m in c.items():
        out[tuple(r[i] for i in idx)] += m
    return clean(out)


def ev(x, st):
    op = x[0]
    E = lambda y: ev(y, st)  # noqa
    if op == "in":
        return st[x[1]]
    if op == "use":
        return ev(x[2], st)
    if op in ("m1", "m2"):
        out = Counter()
        for r, m in E(x[1]).items():
            out[ref_map(op, r)] += m
        return clean(out)
    if op == "fg":
        return Counter({r: m for r, m in E(x[1]).items() if r[3]})
    if op == "ff":
        return Counter({r: m for r, m in E(x[1]).items() if r[2] > 0})
    if op == "fs":
        return Counter({r: m for r, m in E(x[1]).items() if r[1] != ""})
    if op == "flat":
        return clean(Counter({r: m * (r[0] % 3) for r, m in E(x[1]).items()}))
    if op in ("sel", "ren", "cons", "arr"):
        return E(x[1])
    if op == "neg":
        return Counter({r: -m for r, m in E(x[1]).items()})
    if op in ("dist", "distk_s", "distk_gk", "distk_k", "distk_ks"):
        return Counter({r: 1 for r, m in E(x[1]).items() if m > 0})
    if op == "cnt":
        p = proj(E(x[1]), (0, 3))
        return Counter({(k, "", float(c), g): 1 for (k, g), c in p.items()})
    if op == "thr":
        out = Counter()
        for r, m in E(x[1]).items():
            v = -1 if m < 0 else min(m, 2)
            if v:
                out[r] = v
        return out
    if op == "sum":
        p = proj(E(x[1]), (1, 3, 2))
        groups = {}
        for (s, g, f), m in p.items():
            groups.setdefault((s, g), []).append((f, m))
        out = Counter()
        for (s, g), vs in groups.items():
            tot = 0.0
            for f, m in vs:
                tot += f * m
            out[(0, s, nf(tot), g)] = 1
        return out
    if op == "mink":
        p = proj(E(x[1]), (1, 2))
        best = {}
        for (s, f), m in p.items():
            if m > 0 and (s not in best or fk(f) < fk(best[s])):
                best[s] = f
        return Counter({(0, s, f, False): 1 for s, f in best.items()})
    if op == "maxs":
        p = proj(E(x[1]), (3, 1))
        best = {}
        for (g, s), m in p.items():
            if m > 0 and (g not in best or s > best[g]):
                best[g] = s
        return Counter({(0, s, 0.0, g): 1 for g, s in best.items()})
    if op == "maxg":
        p = proj(E(x[1]), (0, 3))
        best = {}
        for (k, g), m in p.items():
            if m > 0 and (k not in best or g > best[k]):
                best[k] = g
        return Counter({(k, "", 0.0, g): 1 for k, g in best.items()})
    if op == "argmin":  # by g, col f; ties: (k, s, f)
        groups = {}
        for r, m in E(x[1]).items():
            if m > 0:
                groups.setdefault(r[3], []).append(r)
        return Counter({min(rs, key=lambda r: (fk(r[2]), r[0], r[1])): 1 for rs in groups.values()})
    if op == "argmax":  # by s, col k; ties to smallest (k, f, g)
        groups = {}
        for r, m in E(x[1]).items():
            if m > 0:
                groups.setdefault(r[1], []).append(r)
        out = Counter()
        for rs in groups.values():
            b = max(r[0] for r in rs)
            out[min((r for r in rs if r[0] == b), key=lambda r: (r[0], fk(r[2]), r[3]))] = 1
        return out
    if op == "topk":  # by k, order_by s desc, k=2, ties: smaller (s, f, g)
        groups = {}
        for r, m in E(x[1]).items():
            if m > 0:
                groups.setdefault(r[0], []).append((r, m))
        out = Counter()
        for rs in groups.values():
            rs.sort(key=lambda t: (fk(t[0][2]), t[0][3]))
            rs.sort(key=lambda t: t[0][1], reverse=True)
            left = 2
            for r, m in rs:
                if left <= 0:
                    break
                t = min(m, left)
                out[r] += t
                left -= t
        return out
    if op == "red":  # reduce by s over (k, g)
        p = proj(E(x[1]), (1, 0, 3))
        groups = {}
        for (s, k, g), m in p.items():
            groups.setdefault(s, []).append(m)
        out = Counter()
        for s, ms in groups.items():
            out[(sum(1 for m in ms if m > 0), s, 0.0, abs(sum(ms)) % 2 == 1)] += 1
        return out
    if op == "cat":
        out = Counter(E(x[1]))
        for r, m in E(x[2]).items():
            out[r] += m
        return clean(out)
    if op == "js":
        return jn(E(x[1]), E(x[2]), (1,), (1,), lambda l, r: (l[0], l[1], r[2], l[3]))
    if op == "jf":
        return jn(E(x[1]), E(x[2]), (2,), (2,), lambda l, r: (l[0], r[1], l[2], r[3]))
    if op == "jg":
        return jn(E(x[1]), E(x[2]), (3,), (3,), lambda l, r: (r[0], l[1], l[2], l[3]))
    if op == "jks":
        return jn(E(x[1]), E(x[2]), (0, 1), (0, 1), lambda l, r: (l[0], l[1], l[2], r[3]))
    if op == "rjk":  # right renamed, join k = k2
        return jn(E(x[1]), E(x[2]), (0,), (0,), lambda l, r: (l[0], r[1], l[2], r[3]))
    if op == "rjs":  # right distinct(key=s) renamed, join s = t
        R = Counter({r: 1 for r, m in E(x[2]).items() if m > 0})
        return jn(E(x[1]), R, (1,), (1,), lambda l, r: (l[0], l[1], r[2], l[3]))
    if op == "pj":
        return jn(E(x[1]), E(x[2]), (0,), (0,), lambda l, r: (l[0], r[1], l[2], l[3]))
    if op == "pd":
        return Counter({r: 1 for r, m in E(x[1]).items() if m > 0})
    if op == "pc":
        return ev(("cnt", x[1]), st)
    if op == "psj":
        return ev(("semi", x[1], x[2]), st)
    if op == "pself":
        y = E(x[1])
        return jn(y, y, (1,), (1,), lambda l, r: (l[0], l[1], r[2], l[3]))
    if op == "thrk":
        p = proj(E(x[1]), (0,))
        return clean(Counter({(k, "", 0.0, False): abs(m) % 3 for (k,), m in p.items()}))
    if op == "cnt0":
        tot = sum(E(x[1]).values())
        return Counter({(0, "", float(tot), False): 1}) if tot else Counter()
    if op == "topg":
        rs = [(r, m) for r, m in E(x[1]).items() if m > 0]
        rs.sort(key=lambda t: (t[0][0], t[0][1], t[0][3]))
        rs.sort(key=lambda t: fk(t[0][2]), reverse=True)
        out = Counter(); left = 3
        for r, m in rs:
            if left <= 0:
                break
            t = min(m, left); out[r] += t; left -= t
        return out
    if op == "redf":
        p = proj(E(x[1]), (3, 2))
        groups = {}
        for (g, f), m in p.items():
            groups.setdefault(g, []).append((f, m))
        out = Counter()
        for g, vs in groups.items():
            vs.sort(key=lambda t: fk(t[0]))
            out[(0, "", vs[0][0], g)] += 1
            out[(0, "", vs[-1][0], g)] += vs[-1][1]
        return clean(out)
    if op == "iterj":
        cur = E(x[1])
        R = E(x[2])
        for _ in range(60):
            j = jn(cur, R, (0,), (0,), lambda l, r: (l[0], r[1], l[2], l[3]))
            tot = Counter(cur)
            for r, m in j.items():
                tot[r] += m
            nxt = Counter({r: 1 for r, m in tot.items() if m > 0})
            if nxt == cur:
                return cur
            cur = nxt
        raise RuntimeError("nc")
    if op == "swj":
        return jn(E(x[1]), E(x[2]), (0,), (0,), lambda l, r: (l[0], l[1], r[2], l[3]))
    if op in ("semi", "anti"):
        keys = proj(E(x[2]), (0,))
        ks = {k for k, m in keys.items() if m > 0}
        L = E(x[1])
        if op == "semi":
            return Counter({r: m for r, m in L.items() if (r[0],) in ks})
        return Counter({r: m for r, m in L.items() if (r[0],) not in ks})
    if op == "antis":
        keys = proj(E(x[2]), (1,))
        ks = {k for k, m in keys.items() if m > 0}
        return Counter({r: m for r, m in E(x[1]).items() if (r[1],) not in ks})
    if op == "iter":  # fixed point of dist(v + m1(v) filtered)
        cur = E(x[1])
        for _ in range(50):
            nxt = Counter(cur)
            for r, m in cur.items():
                nxt[ref_map("m1", r)] += m
            nxt = Counter({r: 1 for r, m in nxt.items() if m > 0 and r[0] != 3})
            if nxt == cur:
                return cur
            cur = nxt
        raise RuntimeError("nc")
    raise ValueError(op)


def bld(x, df):
    op = x[0]
    B = lambda y: bld(y, df)  # noqa
    if op == "in":
        return df.input(x[1])
    if op == "use":
        u = df.use(x[1])
        if "t" in u.schema.names:
            u = u.rename(t="s", kk="k")
        return u
    if op == "m1":
        return B(x[1]).map(e_m1, out=OUT)
    if op == "m2":
        return B(x[1]).map(e_m2, out=OUT)
    if op == "fg":
        return B(x[1]).filter(e_fg)
    if op == "ff":
        return B(x[1]).filter(e_ff)
    if op == "fs":
        return B(x[1]).filter(e_fs)
    if op == "flat":
        return B(x[1]).flat_map(e_flat, out=OUT, repeat=True)
    if op == "sel":
        return B(x[1]).select("g", "f", "s", "k").select(*COLS)
    if op == "ren":
        return B(x[1]).rename(k="kk", s="ss").rename(ss="s", kk="k")
    if op == "cons":
        return B(x[1]).consolidate()
    if op == "arr":
        return B(x[1]).arrange_by("g", "s")
    if op == "neg":
        return B(x[1]).negate()
    if op == "dist":
        return B(x[1]).distinct()
    if op == "distk_s":
        return B(x[1]).distinct(key="s")
    if op == "distk_k":
        return B(x[1]).distinct(key="k")
    if op == "distk_ks":
        return B(x[1]).distinct(key=["k", "s"])
    if op == "swj":
        R = B(x[2]).rename(k="s", s="k")
        j = B(x[1]).join(R, left_on="k", right_on="s")
        return j.select("k", "s", "f_right", "g").rename(f_right="f")
    if op == "pj":
        L = B(x[1]).rename(k="f", f="k")
        R = B(x[2]).rename(k="f", f="k")
        j = L.join(R, on="f")
        return j.select("f", "s_right", "k", "g").rename(f="k", k="f", s_right="s")
    if op == "pd":
        return B(x[1]).rename(s="k", k="s").distinct(key="s").rename(s="k", k="s")
    if op == "pc":
        return B(x[1]).rename(g="k", k="g").count(by=["g", "k"]).rename(g="k", k="g").map(m_cnt, out=OUT)
    if op == "psj":
        return B(x[1]).rename(k="kk").semijoin(B(x[2]).rename(k="kk", s="ss"), on="kk").rename(kk="k")
    if op == "pself":
        R = B(x[1])
        j = R.join(R.rename(k="k2", s="s2", f="f2", g="g2"), left_on="s", right_on="s2")
        return j.select("k", "s", "f2", "g").rename(f2="f")
    if op == "thrk":
        return B(x[1]).threshold(by=["k"], fn=t_k).map(m_thrk, out=OUT)
    if op == "cnt0":
        return B(x[1]).count().map(m_cnt0, out=OUT)
    if op == "topg":
        return B(x[1]).select(*COLS).top_k(order_by="f", k=3, descending=True)
    if op == "redf":
        return B(x[1]).reduce(by="g", fn=r_fl, columns=["f"]).map(m_redf, out=OUT)
    if op == "iterj":
        R = B(x[2]).rename(k="k2", s="s2", f="f2", g="g2")
        def body(v):
            j = v.join(R, left_on="k", right_on="k2").select("k", "s2", "f", "g").rename(s2="s")
            return v.concat(j).distinct()
        return B(x[1]).iterate(body)
    if op == "distk_gk":
        return B(x[1]).distinct(key=["g", "k"])
    if op == "cnt":
        return B(x[1]).count(by=["k", "g"]).map(m_cnt, out=OUT)
    if op == "thr":
        return B(x[1]).threshold(t_fn)
    if op == "sum":
        return B(x[1]).sum(by=["s", "g"], col="f").map(m_sum, out=OUT)
    if op == "mink":
        return B(x[1]).min(by="s", col="f").map(m_mink, out=OUT)
    if op == "maxs":
        return B(x[1]).max(by="g", col="s").map(m_maxs, out=OUT)
    if op == "maxg":
        return B(x[1]).max(by="k", col="g").map(m_maxg, out=OUT)
    if op == "argmin":
        return B(x[1]).select(*COLS).argmin(by="g", col="f")
    if op == "argmax":
        return B(x[1]).select(*COLS).argmax(by="s", col="k")
    if op == "topk":
        return B(x[1]).select(*COLS).top_k(by="k", order_by="s", k=2, descending=True)
    if op == "red":
        return B(x[1]).reduce(by="s", fn=r_fn, columns=["k", "g"], out={"k": "int64", "g": "bool"}).map(m_red, out=OUT)
    if op == "cat":
        return B(x[1]).concat(B(x[2]))
    if op == "js":
        j = B(x[1]).join(B(x[2]), on="s")
        return j.select("k", "s", "f_right", "g").rename(f_right="f")
    if op == "jf":
        j = B(x[1]).join(B(x[2]), on="f")
        return j.select("k", "s_right", "f", "g_right").rename(s_right="s", g_right="g")
    if op == "jg":
        j = B(x[1]).join(B(x[2]), on="g")
        return j.select("k_right", "s", "f", "g").rename(k_right="k")
    if op == "jks":
        j = B(x[1]).join(B(x[2]), on=["k", "s"])
        return j.select("k", "s", "f", "g_right").rename(g_right="g")
    if op == "rjk":
        R = B(x[2]).rename(k="k2", s="s2", f="f2", g="g2")
        j = B(x[1]).join(R, left_on="k", right_on="k2")
        return j.select("k", "s2", "f", "g2").rename(s2="s", g2="g")
    if op == "rjs":
        R = B(x[2]).distinct(key="s").rename(s="t", k="k2", f="f2", g="g2")
        j = B(x[1]).join(R, left_on="s", right_on="t")
        return j.select("k", "s", "f2", "g").rename(f2="f")
    if op == "semi":
        return B(x[1]).semijoin(B(x[2]), on="k")
    if op == "anti":
        return B(x[1]).antijoin(B(x[2]), on="k")
    if op == "antis":
        return B(x[1]).antijoin(B(x[2]), on="s")
    if op == "iter":
        return B(x[1]).iterate(lambda v: v.concat(v.map(e_m1, out=OUT)).filter(lambda k: k != 3).distinct())
    raise ValueError(op)


UN = ["m1", "m2", "fg", "ff", "fs", "flat", "sel", "ren", "cons", "arr", "neg", "dist", "distk_s", "distk_gk",
      "distk_k", "distk_ks", "pd", "pc", "pself", "thrk", "cnt0", "topg", "redf",
      "cnt", "thr", "sum", "mink", "maxs", "maxg", "argmin", "argmax", "topk", "red", "iter"]
BIN = ["cat", "js", "jf", "jg", "jks", "rjk", "rjs", "semi", "anti", "antis", "swj", "pj", "psj", "iterj", "iterj"]


class Gen:
    def __init__(self, rng, uses=()):
        self.rng = rng
        self.uses = list(uses)

    def p(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def leaf(self):
        return self.p([("in", "A"), ("in", "B"), ("in", "C")] + self.uses * 3)

    def expr(self, d):
        if d <= 0 or self.rng.random() < 0.15:
            return self.leaf()
        if self.rng.random() < 0.55:
            return (self.p(UN), self.expr(d - 1))
        return (self.p(BIN), self.expr(d - 1), self.expr(d - 1))


def rrow(rng):
    return (int(rng.integers(0, KMAX)), S[int(rng.integers(4))], F[int(rng.integers(len(F)))], bool(rng.integers(2)))


def submit(rng, sess, state, log, ep, nmax=None):
    rows, diffs = [], []
    n = int(rng.integers(1, nmax or NMAX))
    for _ in range(n):
        t = rng.random()
        if t < 0.25 and state:
            keys = sorted(state, key=rk)
            r = keys[int(rng.integers(len(keys)))]
            rows.append(r); diffs.append(-int(rng.integers(1, 3)))
        elif t < 0.32:
            r = rrow(rng); rows += [r, r]; diffs += [2, -2]
        elif t < 0.42:  # remove a row never inserted
            rows.append(rrow(rng)); diffs.append(-1)
        elif t < 0.5:
            r = rrow(rng); rows += [r] * 4; diffs += [1, 1, 3, 1]
        else:
            rows.append(rrow(rng)); diffs.append(int(rng.choice([1, 1, 2])))
    sess.update(rows, diffs)
    for r, d in zip(rows, diffs):
        c = canon(r)
        state[c] += d
        log.append((ep, c, d))
        if not state[c]:
            del state[c]


def at_state(log, e):
    out = Counter()
    for ep, r, d in log:
        if ep <= e:
            out[r] += d
    return clean(out)


def vcounter(view, at=None):
    c = view.columns(at=at, diffs=True)
    out = Counter()
    for k, s, f, g, d in zip(c["k"], c["s"], c["f"], c["g"], c["diff"]):
        out[canon((k, s, f, g))] += int(d)
    return clean(out)


def diff(got, exp):
    return (sorted((got - exp).items(), key=lambda t: rk(t[0]))[:5],
            sorted((exp - got).items(), key=lambda t: rk(t[0]))[:5])


def subst_use(x, uexpr):
    if not isinstance(x, tuple):
        return x
    if x and x[0] == "use":
        return ("use", x[1], uexpr)
    return tuple(subst_use(y, uexpr) for y in x)


def run(seed, workers, steps=9, depth=4, prog1=None, export_expr=None, prog2=None, late=None, drop_at=None,
        hold=True, checks=None):
    """One random program pair on a random update stream; None, or what first disagreed with the reference."""
    checks = checks if checks is not None else [0]
    rng = np.random.default_rng(seed)
    logs = {n: [] for n in INPUTS}
    states = {n: Counter() for n in INPUTS}
    ep = {n: 0 for n in INPUTS}
    gen = Gen(rng)
    if prog1 is None:
        prog1 = gen.expr(depth)
    if export_expr is None:
        export_expr = gen.expr(2)
    exp_kind = int(rng.integers(4))
    if late is None:
        late = int(rng.integers(2, steps))
    if drop_at is None:
        drop_at = int(rng.integers(late, steps + 1))
    H = int(rng.choice([1, 2, 3, 100, 100]))
    p1_at = int(rng.integers(0, 3))
    with kp.Engine(workers=workers, effort=["default", "eager", "lazy"][seed % 3]) as eng:
        ins = {n: eng.input(n, COLS, dtypes=DT, key=k) for n, k in INPUTS.items()}
        for n in INPUTS:
            submit(rng, ins[n], states[n], logs[n], 0)
        for _ in range(p1_at):
            for n in INPUTS:
                ep[n] += 1
                ins[n].advance_to(ep[n])
                submit(rng, ins[n], states[n], logs[n], ep[n])
        with eng.dataflow("p1") as df:
            v1 = bld(prog1, df).view("v1", history=H)
            xe = bld(export_expr, df)
            if exp_kind == 0:
                xe.arrange_by("s").export("X")
            elif exp_kind == 1:
                xe.distinct(key=["g", "k"]).export("X")
            elif exp_kind == 2:
                xe.arrange_by("k", "s").export("X")
            else:
                xe.distinct(key="k").rename(s="t", k="kk").export("X")
        uexpr = export_expr if exp_kind in (0, 2) else ("dist", export_expr)
        views = [[v1, prog1, None if p1_at else 0, True]]
        tr = None
        answered = {}  # view -> the first epoch it answered (a late one refuses those before its start)
        FOL = []
        hold_at = int(rng.integers(0, steps)) if hold and rng.random() < 0.6 else -1
        p3_at = int(rng.integers(0, steps))
        prog3 = None
        for step in range(steps):
            if step == hold_at and not (late <= drop_at <= step):
                tr = eng.trace("X")
            one_by_one = rng.random() < 0.5
            nep = int(rng.integers(1, 4))
            for _ in range(nep):
                for n in INPUTS:
                    if rng.random() < 0.8:
                        submit(rng, ins[n], states[n], logs[n], ep[n])
                for n in INPUTS:
                    if n == "C" and rng.random() < 0.4 and step < steps - 1:
                        continue
                    ep[n] += 1 if rng.random() < 0.8 else 3
                    ins[n].advance_to(ep[n])
                if one_by_one:
                    for v in views:
                        if v[3]:
                            eng.wait(v[0], timeout=T)
            if step == late:
                if prog2 is None:
                    prog2 = Gen(rng, uses=[("use", "X", uexpr)]).expr(depth)
                else:
                    prog2 = subst_use(prog2, uexpr)
                with eng.dataflow("p2") as df:
                    v2 = bld(prog2, df).view("v2", history=H)
                views.append([v2, prog2, None, True])
                FOL.append((v2.follow(timeout=60), prog2, v2))
            if step == drop_at and late <= step:
                eng.drop("p1")
                views[0][3] = False
            if step == p3_at and step > drop_at and late <= drop_at:
                prog3 = Gen(rng, uses=[("use", "X", uexpr)]).expr(depth)
                if "X" in eng.catalog():
                    with eng.dataflow("p3") as df:
                        v3 = bld(prog3, df).view("v3", history=H)
                    views.append([v3, prog3, None, True])
            for v, prog, born, live in views:
                if not live:
                    continue
                eng.wait(v, timeout=T)
                fr = v.to_pandas(diffs=True).attrs["epoch"]
                for e in range(0, fr):
                    st = {n: at_state(logs[n], e) for n in INPUTS}
                    exp = ev(prog, st)
                    try:
                        got = vcounter(v, at=e)
                    except kp.CompactedError:
                        # before a late dataflow's start, or out of history= (re-read: the view may have moved
                        # on since the wait, see the first bug below)
                        fr2 = v.to_pandas(diffs=True).attrs["epoch"]
                        if (born is None and e < answered.get(v.name, e + 1)) or e < fr2 - H:
                            continue
                        raise
                    answered.setdefault(v.name, e)
                    checks[0] += 1
                    if got != exp:
                        return ("MISMATCH", seed, workers, v.name, step, e, fr, prog, diff(got, exp))
        if tr is not None:
            tr.close()
        for n in INPUTS:
            ins[n].close()
        for fol, prog, v in FOL:
            acc = []
            for fr_ in fol:
                for k, s_, f, g, t, d in zip(fr_["k"], fr_["s"], fr_["f"], fr_["g"], fr_["time"], fr_["diff"]):
                    acc.append((int(t), canon((k, s_, f, g)), int(d)))
            t0 = min((t for t, _, _ in acc), default=None)
            if t0 is None:
                continue
            for e in range(t0, max(ep.values())):
                got = Counter()
                for t, r, d in acc:
                    if t <= e:
                        got[r] += d
                got = clean(got)
                exp = ev(prog, {n: at_state(logs[n], e) for n in INPUTS})
                if got != exp:
                    return ("FOLLOW", seed, workers, e, t0, prog, diff(got, exp))
    return None


def many_epochs(seed, workers, ne=60, nprogs=3):
    """``ne`` epochs of every input submitted before any wait (one physical batch per operator), then each
    of ``nprogs`` random programs read with at= at every epoch (history keeps them all)."""
    rng = np.random.default_rng(seed)
    logs = {n: [] for n in INPUTS}
    states = {n: Counter() for n in INPUTS}
    ep = {n: 0 for n in INPUTS}
    gen = Gen(rng)
    progs = [gen.expr(3) for _ in range(nprogs)]
    with kp.Engine(workers=workers, effort=["default", "eager", "lazy"][seed % 3]) as eng:
        ins = {n: eng.input(n, COLS, dtypes=DT, key=k) for n, k in INPUTS.items()}
        with eng.dataflow("p") as df:
            vs = [bld(p, df).view(f"v{i}", history=ne + 5) for i, p in enumerate(progs)]
        for e in range(ne):
            for n in INPUTS:
                if rng.random() < 0.7:
                    submit(rng, ins[n], states[n], logs[n], ep[n], nmax=4)
                ep[n] += 1
                ins[n].advance_to(ep[n])
        for v, p in zip(vs, progs):
            eng.wait(v, timeout=T)
            for e in range(ne):
                exp = ev(p, {n: at_state(logs[n], e) for n in INPUTS})
                got = vcounter(v, at=e)
                if got != exp:
                    return ("MISMATCH", seed, workers, e, p, diff(got, exp))
    return None


# -- bugs -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["view", "name"])
def test_wait_on_importing_view_ignores_unrelated_lagging_input_of_producer(target):
    """README: ``eng.wait(view)`` blocks until it has caught up with the epochs its inputs (the ones it reads,
    not every input of its dataflow) were advanced to. v2 reads the export X, which only input A reaches;
    the producer p1 also reads C (for a view of its own), and C lags. After A advances to e and
    ``eng.wait(v2)`` returns, v2 must hold epoch e - 1: its ``attrs["epoch"]`` is e."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("A", ["k"])
        c = eng.input("C", ["k"])
        a.insert([(1,)])
        a.advance_to(1)
        c.advance_to(1)
        with eng.dataflow("p1") as df:
            df.input("A").map(_slow_ident).distinct().export("X")
            df.input("C").view("v1")
        with eng.dataflow("p2") as df:
            v2 = df.use("X").count().view("v2")
        eng.wait(v2, timeout=T)
        seen = []
        for e in (2, 3):
            a.insert([(e,)])
            a.advance_to(e)
            eng.wait(v2 if target == "view" else "p2", timeout=T)
            got = v2.to_pandas()
            seen.append((e, got.attrs["epoch"], got["count"].tolist()))
        assert seen == [(2, 2, [2]), (3, 3, [3])]


def test_drop_input_does_not_name_an_importer_that_never_reads_it():
    """p1 exports X from input A and has a view of input C; p2 imports X and reads nothing else. p2 does
    not read C: ``eng.drop_input("C")`` must not be refused because of p2 (README: it forgets an input no
    dataflow reads, and the refusal names the readers)."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("A", ["k"])
        c = eng.input("C", ["k"])
        a.insert([(1,)])
        a.advance_to(1)
        c.advance_to(1)
        with eng.dataflow("p1") as df:
            df.input("A").distinct().export("X")
            df.input("C").view("v1")
        with eng.dataflow("p2") as df:
            v2 = df.use("X").count().view("v2")
        eng.wait(v2, timeout=T)
        eng.drop("p1", cascade=False)  # kept for p2: only A feeds X
        try:
            eng.drop_input("C")
        except kp.UsageError as err:
            assert "'p2'" not in str(err), str(err)
        a.insert([(2,)])
        a.advance_to(2)
        eng.wait(v2, timeout=T)
        assert v2.to_pandas()["count"].tolist() == [2]


def test_broken_input_does_not_fail_an_importer_it_does_not_reach():
    """README: an input whose rows reach a multiplicity of 2**62 is broken; the dataflows reading it fail,
    nothing else is touched. p1 exports X (from A only) and had a view of C; p1 is dropped, kept running for
    X's reader p2. C then breaks. p1's kept operators are not failed and X goes on; p2 reads only X, so it
    must go on too and count A's new row."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("A", ["k"])
        c = eng.input("C", ["k"])
        a.insert([(1,)])
        a.advance_to(1)
        c.advance_to(1)
        with eng.dataflow("p1") as df:
            df.input("A").distinct().export("X")
            df.input("C").view("v1")
        with eng.dataflow("p2") as df:
            v2 = df.use("X").count().view("v2")
        eng.wait(v2, timeout=T)
        eng.drop("p1")
        c.update([(1,)], [2**62 - 1])
        c.advance_to(2)
        try:
            c.update([(1,)], [2**62 - 1])
            c.advance_to(3)
        except kp.KpgnbError:
            pass  # (C is broken: what it says is not this test's concern)
        a.insert([(2,)])
        a.advance_to(2)
        eng.wait(v2, timeout=T)
        assert eng.dataflows().get("p2") == "running"
        assert v2.to_pandas()["count"].tolist() == [2]


# -- what was checked and works (kept as regression tests) ----------------------------------------------------
# Explored: seeds 0-40, 100-160, 200-300, 500-620, 700-820, 900-1150, 3100-3200, 6000-6080 at W = 1, 2, 3
# (plus 2000-2040 and 3300-3340 with 12 keys and up to 30 rows an epoch; the operator mix grew along the
# way), and many_epochs seeds 0-15: no wrong answer.

@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [6012, 6056])
def test_random_programs_with_late_imports_drops_and_history_match_reference(seed, workers):
    checks = [0]
    fails = run(seed, workers, checks=checks)
    assert fails is None, fails
    assert checks[0] > 10


@pytest.mark.parametrize("workers", [1, 3])
def test_many_epochs_submitted_at_once_read_back_at_every_epoch(workers):
    assert many_epochs(4, workers) is None


@njit
def _neg_zero_and_neg_nan(vals, counts):
    out = np.empty((2, 1), np.float64)
    out[0, 0] = -0.0
    out[1, 0] = -np.abs(np.nan)
    return out, np.ones(2, np.int64)


def _flat_neg(k, f):
    n = len(k)
    cols = {"k": np.concatenate([k, k]), "f": np.concatenate([np.full(n, -0.0), -np.abs(np.full(n, np.nan))])}
    return cols, np.concatenate([np.arange(n), np.arange(n)])


def test_nan_and_negative_zero_made_by_operators_are_the_values_inputs_hold():
    """A float sum of inf and -inf (NaN, sign bit set on x86), a numba reduce returning -0.0 and -NaN and a
    flat_map returning them: each is the one NaN / 0.0 of the inputs (README: NaN a value after +inf, -0.0
    stored as 0.0), so distinct over them and the input has one row each and joins on f match."""
    inf, nan = float("inf"), float("nan")
    with kp.Engine(workers=2) as eng:
        a = eng.input("A", ["k", "f"], dtypes=["int64", "float64"])
        a.insert([(1, inf), (1, -inf), (2, nan), (2, 0.0)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            x = df.input("A")
            base = x.select("f")
            made = {"sum": x.sum(by="k", col="f"),
                    "red": x.reduce(by="k", fn=_neg_zero_and_neg_nan, columns=["f"]),
                    "flat": x.flat_map(_flat_neg, repeat=False)}
            views = {}
            for name, c in made.items():
                views[name, "dist"] = c.select("f").concat(base).distinct().view(name + "_dist")
                views[name, "join"] = c.select("f").join(base, on="f").view(name + "_join")
        eng.wait("d", timeout=T)

        def read(v):
            p = v.to_pandas(diffs=True)
            return sorted(((("nan" if f != f else float(f)), int(d), bool(np.signbit(f)))
                           for f, d in zip(p["f"], p["diff"])), key=repr)

        key = repr
        for name in made:
            assert read(views[name, "dist"]) == sorted([(-inf, 1, True), (0.0, 1, False), (inf, 1, False),
                                                        ("nan", 1, False)], key=key), name
        assert read(views["sum", "join"]) == [("nan", 2, False)]
        assert read(views["red", "join"]) == sorted([(0.0, 2, False), ("nan", 2, False)], key=key)
        assert read(views["flat", "join"]) == sorted([(0.0, 4, False), ("nan", 4, False)], key=key)
