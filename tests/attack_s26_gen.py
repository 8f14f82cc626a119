"""An independent random-program generator and from-scratch oracle (session 26, ops attack).

Collections have the schema (k int64, v int64, s str, f float64). Every operator of the program maps that
schema back to itself (reductions and joins are followed by select/rename/map), so anything composes.
``evaluate`` recomputes a program on plain Counters {(k, v, s, f): multiplicity}; ``build`` constructs the
same program through the public API. Leaves: inputs A and B, ``useB`` (B arranged by k, exported by a
separate dataflow and imported with df.use), loop variables, and delayed (enter_at) inputs.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
from numba import njit

import kpgnb as kp

COLS = ["k", "v", "s", "f"]
DTYPES = ["int64", "int64", "str", "float64"]
OUT = dict(zip(COLS, DTYPES))
S = ["", "a", "ab", "b", "Z", "\u00e4", "a\u00e4"]
NEXT = {x: S[(i + 1) % len(S)] for i, x in enumerate(S)}
F = [-1.5, -0.0, 0.0, 0.5, 2.0, 3.5]
M64 = 1 << 64


def wrap(x: int) -> int:
    x %= M64
    return x - M64 if x >= 1 << 63 else x


def clean(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v != 0})


def project(c: Counter, idx) -> Counter:
    out = Counter()
    for r, m in c.items():
        out[tuple(r[i] for i in idx)] += m
    return clean(out)


def str_key(x):
    return x  # python str order is code-point order


# -- user functions (engine side) -------------------------------------------------------------------

def e_swap(k, v, s, f):
    return {"k": v, "v": k, "s": s, "f": f}


def e_mod(k, v, s, f):
    return {"k": k % 3, "v": (v + 1) % 5, "s": s, "f": f}


_S_ARR = np.array(S, dtype=object)


def e_s(k, v, s, f):
    return {"k": k, "v": v, "s": _S_ARR[v % len(S)], "f": -f}


def e_next(k, v, s, f):
    return {"k": k, "v": v, "s": np.array([NEXT[x] for x in s], dtype=object), "f": f}


def e_filter(k, v, s):
    return ((k + v) % 2 == 0) | (s == "a")


def e_filter_f(f):
    return f > 0


def e_flat_rep(k, v, s, f):
    c = v % 3
    return {"k": np.repeat(k, c), "v": np.repeat(v, c), "s": np.repeat(s, c), "f": np.repeat(f, c)}, c


def e_flat_idx(k, v, s, f):
    idx = np.repeat(np.arange(len(k)), 2)
    odd = np.arange(len(idx)) % 2 == 1
    ss = s[idx].copy()
    if odd.any():
        ss[odd] = np.array([NEXT[x] for x in ss[odd]], dtype=object)
    return {"k": k[idx], "v": v[idx], "s": ss, "f": f[idx]}, idx


def e_round(k, v):
    return v % 3


DELAYS = 3


def t1(c):
    return np.where(c >= 2, 1, 0)


def t2(c):
    return np.abs(c)


def t3(c):
    return np.where(c < 0, 2, c)


THRESH = [t1, t2, t3]


@njit
def r_vs(vals, counts):
    m = vals.shape[0]
    tot = 0
    npos = 0
    for i in range(m):
        tot += counts[i]
        if counts[i] > 0:
            npos += 1
    n = 2 if m > 1 else 1
    out = np.empty((n, 2), np.int64)
    cnt = np.ones(n, np.int64)
    out[0, 0] = tot
    out[0, 1] = vals[0, 1]
    if n == 2:
        out[1, 0] = m * 10 + npos
        out[1, 1] = vals[m - 1, 1]
        cnt[1] = 2 if tot >= 0 else -1
    return out, cnt


@njit
def r_f(vals, counts):
    m = vals.shape[0]
    s = 0.0
    best = -1e300
    anypos = False
    for i in range(m):
        s += vals[i, 0] * counts[i]
        if counts[i] > 0:
            anypos = True
            if vals[i, 0] > best:
                best = vals[i, 0]
    n = 2 if anypos else 1
    out = np.empty((n, 1), np.float64)
    cnt = np.ones(n, np.int64)
    out[0, 0] = s
    if anypos:
        out[1, 0] = best
    return out, cnt


# -- the operators ------------------------------------------------------------------------------------

UNARY = ["swap", "mod", "s", "next", "filter", "filter_f", "flat_rep", "flat_idx", "negate", "consolidate",
         "count_k", "count_ks", "sum_v", "sum_f", "min_s", "max_s", "min_f", "argmin_v", "argmax_f", "topk",
         "distinct", "thresh", "reduce_vs", "reduce_f"]
BINARY = ["concat", "join_k", "join_vk", "join_s", "join_ks", "semi_k", "anti_k", "semi_s", "anti_s"]
MONOTONE = {"swap", "mod", "s", "next", "filter", "filter_f", "flat_idx", "concat", "join_k", "join_vk",
            "join_s", "join_ks", "semi_k", "semi_s", "distinct", "consolidate", "semi_use"}


def evaluate(expr, inputs: dict, env=None, rounds=None) -> Counter:
    env = env or []
    rounds = rounds or []
    op = expr[0]
    ev = lambda e: evaluate(e, inputs, env, rounds)  # noqa: E731
    if op == "input":
        return clean(inputs[expr[1]])
    if op == "useB":
        return clean(inputs["B"])
    if op == "var":
        return env[-1 - expr[1]]
    if op == "delay":
        return Counter({r: m for r, m in ev(expr[1]).items() if r[1] % DELAYS <= rounds[-1]})
    if op in ("swap", "mod", "s", "next"):
        out = Counter()
        for (k, v, s, f), m in ev(expr[1]).items():
            if op == "swap":
                r = (v, k, s, f)
            elif op == "mod":
                r = (k % 3, wrap(v + 1) % 5, s, f)
            elif op == "s":
                r = (k, v, S[v % len(S)], -f + 0.0)
            else:
                r = (k, v, NEXT[s], f)
            out[r] += m
        return clean(out)
    if op == "filter":
        return Counter({r: m for r, m in ev(expr[1]).items() if (r[0] + r[1]) % 2 == 0 or r[2] == "a"})
    if op == "filter_f":
        return Counter({r: m for r, m in ev(expr[1]).items() if r[3] > 0})
    if op == "flat_rep":
        return clean(Counter({r: m * (r[1] % 3) for r, m in ev(expr[1]).items()}))
    if op == "flat_idx":
        out = Counter()
        for (k, v, s, f), m in ev(expr[1]).items():
            out[(k, v, s, f)] += m
            out[(k, v, NEXT[s], f)] += m
        return clean(out)
    if op == "concat":
        out = Counter(ev(expr[1]))
        for r, m in ev(expr[2]).items():
            out[r] += m
        return clean(out)
    if op == "negate":
        return Counter({r: -m for r, m in ev(expr[1]).items()})
    if op == "consolidate":
        return ev(expr[1])
    if op.startswith("join"):
        a, b = ev(expr[1]), ev(expr[2])
        out = Counter()
        for (k1, v1, s1, f1), m1 in a.items():
            for (k2, v2, s2, f2), m2 in b.items():
                if op == "join_k" and k1 == k2:
                    out[(k1, v2, s1, f1)] += m1 * m2
                elif op == "join_vk" and v1 == k2:
                    out[(k1, v2, s2, f1)] += m1 * m2
                elif op == "join_s" and s1 == s2:
                    out[(k2, v1, s1, f2)] += m1 * m2
                elif op == "join_ks" and k1 == k2 and s1 == s2:
                    out[(k1, v2, s1, f1)] += m1 * m2
        return clean(out)
    if op in ("semi_k", "anti_k", "semi_s", "anti_s", "semi_use", "anti_use"):
        a = ev(expr[1])
        if op.endswith("use"):
            idx = 0
            keys = {r[0] for r, m in project(clean(inputs["B"]), [0]).items() if m != 0}
        else:
            idx = 0 if op.endswith("_k") else 2
            keys = {r[0] for r, m in project(ev(expr[2]), [idx]).items() if m > 0}
        semi = op.startswith("semi")
        return Counter({r: m for r, m in a.items() if (r[idx] in keys) == semi})
    if op in ("count_k", "count_ks"):
        out = Counter()
        by = [0] if op == "count_k" else [0, 2]
        for g, m in project(ev(expr[1]), by).items():
            out[(g[0], m, g[1] if len(g) > 1 else "", 0.0)] += 1
        return out
    if op == "sum_v":
        groups: dict = {}
        for (k, v), m in project(ev(expr[1]), [0, 1]).items():
            groups[k] = groups.get(k, 0) + v * m
        return Counter({(k, wrap(t), "", 0.0): 1 for k, t in groups.items()})
    if op == "sum_f":
        groups = {}
        for (k, s, f), m in project(ev(expr[1]), [0, 2, 3]).items():
            groups[(k, s)] = groups.get((k, s), 0.0) + f * m
        return Counter({(k, 0, s, t + 0.0): 1 for (k, s), t in groups.items()})
    if op in ("min_s", "max_s", "min_f"):
        idx = [0, 2] if op != "min_f" else [2, 3]
        groups = {}
        for (g, x), m in project(ev(expr[1]), idx).items():
            if m > 0:
                groups.setdefault(g, []).append(x)
        pick = max if op == "max_s" else min
        if op == "min_f":
            return Counter({(0, 0, g, pick(xs) + 0.0): 1 for g, xs in groups.items()})
        return Counter({(g, 0, pick(xs), 0.0): 1 for g, xs in groups.items()})
    if op in ("argmin_v", "argmax_f", "topk"):
        c = ev(expr[1])
        groups = {}
        out = Counter()
        if op == "argmin_v":
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[0], []).append(r)
            for g, rows in groups.items():
                out[min(rows, key=lambda r: (r[1], r[2], r[3]))] += 1
            return out
        if op == "argmax_f":
            for r, m in c.items():
                if m > 0:
                    groups.setdefault(r[2], []).append(r)
            for g, rows in groups.items():
                best = max(r[3] for r in rows)
                out[min((r for r in rows if r[3] == best), key=lambda r: (r[0], r[1], r[3]))] += 1
            return out
        _, _, kk, desc = expr
        for r, m in c.items():
            if m > 0:
                groups.setdefault(r[0], []).append(r)
        for g, rows in groups.items():
            rows.sort(key=lambda r: ((-r[3] if desc else r[3]), r[1], r[2], r[3]))
            left = kk
            for r in rows:
                if left <= 0:
                    break
                take = min(c[r], left)
                out[r] += take
                left -= take
        return out
    if op == "distinct":
        return Counter({r: 1 for r, m in ev(expr[1]).items() if m > 0})
    if op == "thresh":
        _, sub, fi, byall = expr
        fn = THRESH[fi]
        c = ev(sub) if byall else project(ev(sub), [0, 2])
        out = Counter()
        for r, m in c.items():
            x = int(fn(np.array([m]))[0])
            if x:
                out[r if byall else (r[0], 0, r[1], 0.0)] += x
        return out
    if op == "reduce_vs":
        groups = {}
        for (k, v, s), m in project(ev(expr[1]), [0, 1, 2]).items():
            groups.setdefault(k, []).append(((v, s), m))
        out = Counter()
        for k, vals in groups.items():
            vals.sort()
            tot = sum(m for _, m in vals)
            npos = sum(1 for _, m in vals if m > 0)
            out[(k, tot, vals[0][0][1], 0.0)] += 1
            if len(vals) > 1:
                out[(k, len(vals) * 10 + npos, vals[-1][0][1], 0.0)] += 2 if tot >= 0 else -1
        return clean(out)
    if op == "reduce_f":
        groups = {}
        for (k, f), m in project(ev(expr[1]), [0, 3]).items():
            groups.setdefault(k, []).append((f, m))
        out = Counter()
        for k, vals in groups.items():
            vals.sort()
            out[(k, 0, "", sum(f * m for f, m in vals) + 0.0)] += 1
            pos = [f for f, m in vals if m > 0]
            if pos:
                out[(k, 0, "", max(pos) + 0.0)] += 1
        return clean(out)
    if op == "iterate":
        _, init, body, nr = expr
        x = ev(init)
        for i in range(nr if nr is not None else 300):
            nxt = clean(evaluate(body, inputs, env + [x], rounds + [i]))
            if nxt == x and i >= DELAYS - 1:
                break
            x = nxt
        else:
            if nr is None:
                raise NotConverged(expr)
        return x
    if op == "mutual":
        _, ix, iy, bx, by, nr = expr
        x, y = ev(ix), ev(iy)
        for i in range(nr):
            nx = clean(evaluate(bx, inputs, env + [y, x], rounds + [i]))
            ny = clean(evaluate(by, inputs, env + [y, x], rounds + [i]))
            if nx == x and ny == y:
                break
            x, y = nx, ny
        return x
    raise ValueError(op)


class NotConverged(Exception):
    pass


def here(coll, env):
    if env and env[-1].scope is not coll.scope and coll.scope.is_ancestor_of(env[-1].scope):
        return coll.enter(env[-1].scope)
    return coll


def _canon(c):
    return c.select(*COLS)


def build(expr, df, env=None):
    env = env or []
    op = expr[0]
    bd = lambda e: build(e, df, env)  # noqa: E731
    if op == "input":
        return df.input(expr[1])
    if op == "useB":
        return df.use("B_by_k")
    if op == "var":
        return env[-1 - expr[1]]
    if op == "delay":
        return bd(expr[1]).enter_at(env[-1].scope, e_round)
    fns = {"swap": e_swap, "mod": e_mod, "s": e_s, "next": e_next}
    if op in fns:
        return bd(expr[1]).map(fns[op], out=OUT)
    if op == "filter":
        return bd(expr[1]).filter(e_filter)
    if op == "filter_f":
        return bd(expr[1]).filter(e_filter_f)
    if op == "flat_rep":
        return bd(expr[1]).flat_map(e_flat_rep, out=OUT, repeat=True)
    if op == "flat_idx":
        return bd(expr[1]).flat_map(e_flat_idx, out=OUT, repeat=False)
    if op == "concat":
        return bd(expr[1]).concat(bd(expr[2]))
    if op == "negate":
        return bd(expr[1]).negate()
    if op == "consolidate":
        return bd(expr[1]).consolidate()
    if op == "join_k":
        return bd(expr[1]).join(bd(expr[2]), on="k").select("k", "v_right", "s", "f").rename(v_right="v")
    if op == "join_vk":
        j = bd(expr[1]).join(bd(expr[2]), left_on="v", right_on="k")
        return j.select("k", "v_right", "s_right", "f").rename(v_right="v", s_right="s")
    if op == "join_s":
        j = bd(expr[1]).join(bd(expr[2]), on="s")
        return j.select("k_right", "v", "s", "f_right").rename(k_right="k", f_right="f")
    if op == "join_ks":
        j = bd(expr[1]).join(bd(expr[2]), on=["k", "s"])
        return j.select("k", "v_right", "s", "f").rename(v_right="v")
    if op in ("semi_k", "anti_k", "semi_s", "anti_s"):
        key = "k" if op.endswith("_k") else "s"
        a, b = bd(expr[1]), bd(expr[2])
        return a.semijoin(b, on=key) if op.startswith("semi") else a.antijoin(b, on=key)
    if op in ("semi_use", "anti_use"):
        a = bd(expr[1])
        b = df.use("B_cnt")
        return a.semijoin(b, on="k") if op.startswith("semi") else a.antijoin(b, on="k")
    if op == "count_k":
        return bd(expr[1]).count(by="k").map(
            lambda k, count: {"k": k, "v": count, "s": np.full(len(k), "", object), "f": np.zeros(len(k))}, out=OUT)
    if op == "count_ks":
        return bd(expr[1]).count(by=["k", "s"]).map(
            lambda k, s, count: {"k": k, "v": count, "s": s, "f": np.zeros(len(k))}, out=OUT)
    if op == "sum_v":
        return bd(expr[1]).sum(by="k", col="v").map(
            lambda k, v: {"k": k, "v": v, "s": np.full(len(k), "", object), "f": np.zeros(len(k))}, out=OUT)
    if op == "sum_f":
        return bd(expr[1]).sum(by=["k", "s"], col="f").map(
            lambda k, s, f: {"k": k, "v": np.zeros(len(k), np.int64), "s": s, "f": f}, out=OUT)
    if op in ("min_s", "max_s"):
        c = bd(expr[1])
        r = c.min(by="k", col="s") if op == "min_s" else c.max(by="k", col="s")
        return r.map(lambda k, s: {"k": k, "v": np.zeros(len(k), np.int64), "s": s, "f": np.zeros(len(k))},
                     out=OUT)
    if op == "min_f":
        return bd(expr[1]).min(by="s", col="f").map(
            lambda s, f: {"k": np.zeros(len(s), np.int64), "v": np.zeros(len(s), np.int64), "s": s, "f": f},
            out=OUT)
    if op == "argmin_v":
        return _canon(bd(expr[1]).argmin(by="k", col="v"))
    if op == "argmax_f":
        return _canon(bd(expr[1]).argmax(by="s", col="f"))
    if op == "topk":
        return _canon(bd(expr[1]).top_k(by="k", order_by="f", k=expr[2], descending=expr[3]))
    if op == "distinct":
        return bd(expr[1]).distinct()
    if op == "thresh":
        _, sub, fi, byall = expr
        c = bd(sub)
        if byall:
            return c.threshold(THRESH[fi])
        return c.threshold(by=["k", "s"], fn=THRESH[fi]).map(
            lambda k, s: {"k": k, "v": np.zeros(len(k), np.int64), "s": s, "f": np.zeros(len(k))}, out=OUT)
    if op == "reduce_vs":
        return bd(expr[1]).reduce(by="k", fn=r_vs, columns=["v", "s"], out={"v": "int64", "s": "str"}).map(
            lambda k, v, s: {"k": k, "v": v, "s": s, "f": np.zeros(len(k))}, out=OUT)
    if op == "reduce_f":
        return bd(expr[1]).reduce(by="k", fn=r_f, columns=["f"], out={"f": "float64"}).map(
            lambda k, f: {"k": k, "v": np.zeros(len(k), np.int64), "s": np.full(len(k), "", object), "f": f},
            out=OUT)
    if op == "iterate":
        _, init, body, nr = expr
        return here(bd(init), env).iterate(lambda v: build(body, df, env + [v]), max_rounds=nr)
    if op == "mutual":
        _, ix, iy, bx, by_, nr = expr
        x0, y0 = here(bd(ix), env), here(bd(iy), env)
        scope = x0.scope.loop()
        x = kp.Variable(scope, x0)
        y = kp.Variable(scope, y0)
        nx = build(bx, df, env + [y, x])
        ny = build(by_, df, env + [y, x])
        res = x.set(nx, max_rounds=nr)
        y.set(ny, max_rounds=nr)
        return res.leave()
    raise ValueError(op)


# -- random programs -----------------------------------------------------------------------------------

def random_program(rng, depth=3, loops=0, top=True):
    leaves = [("input", "A"), ("input", "B"), ("useB",)] + [("var", i) for i in range(loops)]
    if loops:
        leaves += [("delay", ("input", "A")), ("delay", ("input", "B"))]
    if depth <= 0 or (not top and rng.random() < 0.15):
        return leaves[rng.integers(len(leaves))]
    sub = lambda d, l=loops: random_program(rng, d, l, top=False)  # noqa: E731
    r = rng.random()
    if r < 0.45:
        op = UNARY[rng.integers(len(UNARY))]
        inner = sub(depth - 1)
        if op == "topk":
            return (op, inner, int(rng.integers(1, 4)), bool(rng.random() < 0.5))
        if op == "thresh":
            return (op, inner, int(rng.integers(3)), bool(rng.random() < 0.5))
        return (op, inner)
    if r < 0.72 or depth < 2:
        if rng.random() < 0.15:
            return (["semi_use", "anti_use"][rng.integers(2)], sub(depth - 1))
        op = BINARY[rng.integers(len(BINARY))]
        return (op, sub(depth - 1), sub(depth - 1))
    if r < 0.92 or loops >= 2:
        init = sub(depth - 1)
        body = sub(depth - 1, loops + 1)
        if ("var", 0) not in leaves_of(body):
            body = ("concat", ("var", 0), body)
        nr = None if rng.random() < 0.35 else int(rng.integers(1, 5))
        if nr is not None:
            body = undelay(body)
            return ("iterate", init, ("distinct", body) if rng.random() < 0.5 else body, nr)
        return ("iterate", init, ("distinct", ("concat", ("var", 0), monotone(body))), None)
    bx = ("distinct", ("concat", ("var", 0), undelay(sub(depth - 2, loops + 2))))
    by = ("distinct", ("concat", ("var", 1), undelay(sub(depth - 2, loops + 2))))
    return ("mutual", sub(depth - 2), sub(depth - 2), bx, by, int(rng.integers(1, 5)))


def undelay(expr):
    if expr[0] == "delay":
        return expr[1]
    if expr[0] in ("input", "var", "useB"):
        return expr
    if expr[0] == "iterate":
        return (expr[0], undelay(expr[1])) + expr[2:]
    if expr[0] == "mutual":
        return (expr[0], undelay(expr[1]), undelay(expr[2])) + expr[3:]
    return (expr[0],) + tuple(undelay(x) if isinstance(x, tuple) else x for x in expr[1:])


def monotone(expr):
    """Non-monotone parts replaced by their input; inputs made sets (distinct), so the loop converges."""
    if expr[0] in ("input", "useB"):
        return ("distinct", expr)
    if expr[0] == "var":
        return expr
    if expr[0] == "delay":
        return ("delay", ("distinct", expr[1])) if expr[1][0] != "distinct" else expr
    if expr[0] == "iterate" or expr[0] == "mutual" or expr[0] not in MONOTONE:
        return monotone(expr[1])
    return (expr[0],) + tuple(monotone(x) if isinstance(x, tuple) else x for x in expr[1:])


def leaves_of(expr):
    if expr[0] in ("input", "var", "useB"):
        return [expr]
    out = []
    for x in expr[1:]:
        if isinstance(x, tuple):
            out += leaves_of(x)
    return out


# -- data -----------------------------------------------------------------------------------------------

EXT = 2 ** 62


def random_rows(rng, n, mode):
    rows = []
    for _ in range(n):
        if mode == "skew":
            k = 7
        elif mode == "extreme":
            k = int(rng.choice([EXT, -EXT, 0, -1, EXT - 1]))
        else:
            k = int(rng.integers(-2, 4))
        if mode == "extreme":
            v = int(rng.choice([EXT, -EXT, 1, 3, -7]))
        else:
            v = int(rng.integers(0, 5))
        s = S[rng.integers(len(S))]
        f = F[rng.integers(len(F))]
        rows.append((k, v, s, f))
    diffs = [int(rng.choice([1, 1, 1, -1, 2, 3, -2])) for _ in range(n)]
    return rows, diffs


def view_counter(view, at=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    out = Counter()
    for k, v, s, f, d in zip(cols["k"], cols["v"], cols["s"], cols["f"], cols["diff"]):
        if d:
            out[(int(k), int(v), str(s), float(f) + 0.0)] += int(d)
    return out


def norm(c: Counter) -> Counter:
    return clean(Counter({(int(k), int(v), s, float(f) + 0.0): m for (k, v, s, f), m in c.items()}))
