"""Session 27 reduce attack: random reductions over a typed schema, checked epoch by epoch (and at every
past epoch through a view's history) against a from-scratch oracle.

Schema of every collection: k int64, s str, f float64, b bool, v int64. A reduction is one of count, sum
(int, float, bool), min, max, distinct, threshold, argmin, argmax, top_k or a user reduce, grouped by 0, 1
or 2 of (k, s, f, b) in any order. ``canon`` maps any reduction's output back to the schema (by name;
``count`` goes to v), so a reduction composes inside loops.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
from numba import njit

from attack_s26_gen import clean, wrap

COLS = ["k", "s", "f", "b", "v"]
DTYPES = ["int64", "str", "float64", "bool", "int64"]
DEFAULT = {"k": 0, "s": "", "f": 0.0, "b": False, "v": 0}
S = ["", "a", "ab", "b", "Z", "\u00e4", "a\u00e4", "zz"]
F = [-1.5, -0.0, 0.0, 0.5, 2.0, 3.5]


def norm_val(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        return float(x) + 0.0
    if isinstance(x, (int, np.integer)):
        return int(x)
    return str(x)


# -- user functions -----------------------------------------------------------------------------------

@njit
def u_int(vals, counts):
    """columns [v]: (sum v*c mod 7, 1) and, for several values, (number of values, total count)."""
    m = vals.shape[0]
    s = 0
    tot = 0
    for i in range(m):
        s += vals[i, 0] * counts[i]
        tot += counts[i]
    n = 2 if m > 1 and tot != 0 else 1
    out = np.empty((n, 1), np.int64)
    cnt = np.ones(n, np.int64)
    out[0, 0] = s % 7
    if n == 2:
        out[1, 0] = m
        cnt[1] = tot
    return out, cnt


def ref_u_int(g: Counter) -> Counter:
    vals = sorted(g)
    s = sum(v * m for v, m in g.items())
    tot = sum(g.values())
    out = Counter({(s % 7,): 1})
    if len(vals) > 1 and tot != 0:
        out[(len(vals),)] += tot
    return clean(out)


@njit
def u_str(vals, counts):
    """columns [s]: the largest string of the group (rows come in string order) with the sign of the
    total count, and the smallest once."""
    m = vals.shape[0]
    tot = 0
    for i in range(m):
        tot += counts[i]
    out = np.empty((2, 1), np.int64)
    cnt = np.ones(2, np.int64)
    out[0, 0] = vals[m - 1, 0]
    cnt[0] = -1 if tot < 0 else 1
    out[1, 0] = vals[0, 0]
    return out, cnt


def ref_u_str(g: Counter) -> Counter:
    vals = sorted(g)
    tot = sum(g.values())
    out = Counter()
    out[(vals[-1],)] += -1 if tot < 0 else 1
    out[(vals[0],)] += 1
    return clean(out)


@njit
def u_float(vals, counts):
    """columns [f]: sum f*c, and the smallest value with positive count (if any)."""
    m = vals.shape[0]
    s = 0.0
    best = 0.0
    found = False
    for i in range(m):
        s += vals[i, 0] * counts[i]
        if counts[i] > 0 and not found:
            best = vals[i, 0]
            found = True
    n = 2 if found else 1
    out = np.empty((n, 1), np.float64)
    cnt = np.ones(n, np.int64)
    out[0, 0] = s
    if found:
        out[1, 0] = best
        cnt[1] = 3
    return out, cnt


def ref_u_float(g: Counter) -> Counter:
    vals = sorted(g)
    out = Counter({(sum(f * m for f, m in g.items()) + 0.0,): 1})
    pos = [f for f in vals if g[f] > 0]
    if pos:
        out[(pos[0] + 0.0,)] += 3
    return clean(out)


USER = {"u_int": (u_int, ["v"], {"v": "int64"}, ref_u_int),
        "u_str": (u_str, ["s"], {"s": "str"}, ref_u_str),
        "u_float": (u_float, ["f"], {"f": "float64"}, ref_u_float)}


def t_ge2(c):
    return np.where(c >= 2, 1, 0)


def t_abs(c):
    return np.abs(c)


def t_neg(c):
    return np.where(c < 0, 2, c)


THRESH = {"ge2": t_ge2, "abs": t_abs, "neg": t_neg}


# -- random reductions ---------------------------------------------------------------------------------

KEYABLE = ["k", "s", "f", "b"]
ORDERED = ["k", "s", "f", "b", "v"]


def random_red(rng):
    """A reduction: (op, by, arg...)."""
    nby = int(rng.choice([0, 1, 1, 2, 2]))
    by = tuple(str(x) for x in rng.permutation(KEYABLE)[:nby])
    rest = [c for c in COLS if c not in by]
    op = str(rng.choice(["count", "sum", "min", "max", "distinct", "threshold", "argmin", "argmax", "top_k",
                         "reduce"]))
    if op == "count":
        return ("count", by)
    if op == "sum":
        col = str(rng.choice([c for c in ["v", "f", "b", "k"] if c in rest]))
        return ("sum", by, col)
    if op in ("min", "max", "argmin", "argmax"):
        return (op, by, str(rng.choice(rest)))
    if op == "top_k":
        return (op, by, str(rng.choice(rest)), int(rng.integers(1, 4)), bool(rng.random() < 0.5))
    if op == "distinct":
        return ("distinct", by)  # select(by + v) then distinct (by empty: every column)
    if op == "threshold":
        return ("threshold", by, str(rng.choice(sorted(THRESH))))
    name = str(rng.choice(sorted(USER)))
    if USER[name][1][0] in by:
        name = "u_int"
    return ("reduce", by, name)


def out_cols(red):
    op, by = red[0], list(red[1])
    rest = [c for c in COLS if c not in by]
    if op == "count":
        return by + ["count"]
    if op in ("sum", "min", "max"):
        return by + [red[2]]
    if op in ("argmin", "argmax", "top_k"):
        return by + rest
    if op == "distinct":
        return by + ["v"] if by else list(COLS)
    if op == "threshold":
        return by
    return by + list(USER[red[2]][2])


def ref_red(red, c: Counter) -> Counter:
    """The reduction of c (rows in COLS order -> multiplicity) as rows in out_cols order."""
    op, by = red[0], list(red[1])
    bi = [COLS.index(x) for x in by]
    rest = [c_ for c_ in COLS if c_ not in by]
    ri = [COLS.index(x) for x in rest]
    groups: dict = {}
    for r, m in c.items():
        if m:
            groups.setdefault(tuple(r[i] for i in bi), Counter())[tuple(r[i] for i in ri)] += m
    for g in groups.values():
        for x in [x for x, m in g.items() if m == 0]:
            del g[x]
    groups = {k: g for k, g in groups.items() if g}
    out = Counter()
    if op == "count":
        for k, g in groups.items():
            t = sum(g.values())
            if t:
                out[k + (t,)] += 1
    elif op == "sum":
        j = rest.index(red[2])
        for k, g in groups.items():  # (a group has a row while a value of the column has a non-zero count)
            proj: dict = {}
            for x, m in g.items():
                proj[x[j]] = proj.get(x[j], 0) + m
            if not any(proj.values()):
                continue
            t = sum(x[j] * m for x, m in g.items())
            t = t + 0.0 if red[2] == "f" else wrap(int(t))
            out[k + (t,)] += 1
    elif op in ("min", "max"):
        j = rest.index(red[2])
        for k, g in groups.items():  # (the rows projected on the column first, as the engine reads them)
            proj = Counter()
            for x, m in g.items():
                proj[x[j]] += m
            pos = [x for x, m in proj.items() if m > 0]
            if pos:
                out[k + ((min if op == "min" else max)(pos),)] += 1
    elif op in ("argmin", "argmax", "top_k"):
        j = rest.index(red[2])
        desc = op == "argmax" or (op == "top_k" and red[4])
        kk = red[3] if op == "top_k" else 1
        for k, g in groups.items():
            rows = sorted(x for x, m in g.items() if m > 0)
            rows = sorted(rows, key=lambda x: x[j], reverse=desc)
            left = kk
            for x in rows:
                if left <= 0:
                    break
                take = min(g[x], left) if op == "top_k" else 1
                out[k + x] += take
                left -= take if op == "top_k" else left
    elif op == "distinct":
        if by:
            proj = Counter()
            vi = COLS.index("v")
            for r, m in c.items():
                proj[tuple(r[i] for i in bi) + (r[vi],)] += m
        else:
            proj = c
        for r, m in proj.items():
            if m > 0:
                out[r] = 1
    elif op == "threshold":
        fn = THRESH[red[2]]
        for k, g in groups.items():
            t = sum(g.values())
            if t:
                x = int(fn(np.array([t], np.int64))[0])
                if x:
                    out[k] += x
    else:
        _, cols, outspec, ref = USER[red[2]]
        ci = [rest.index(x) for x in cols]
        for k, g in groups.items():
            gg = Counter()
            for x, m in g.items():
                gg[x[ci[0]]] += m
            gg = clean(gg)
            if gg:
                for r, m in ref(gg).items():
                    out[k + r] += m
    return clean(out)


REDUCES: list = []  # the output traces of the reductions built (structural checks)


def build_red(red, coll):
    out = _build_red(red, coll)
    REDUCES.append(out.op.out_trace)
    return out


def check_trace_batches(trace, workers):
    """Every batch of every shard: sorted by (hash, key, val, time), consolidated, no empty keys, hashes
    matching the keys (as the engine computes them now), each key in the shard owning its hash."""
    from kpgnb.engine.kernels import sort as sortk
    errs = []
    for s, spine in enumerate(trace.spines):
        for b in spine.batches():
            kh, keys, koff, vals, times, diffs = b.arrays
            where = f"shard {s} batch {b.lower}..{b.upper} since {b.since}"
            if len(kh) and not (kh == sortk.hash_keys(np.ascontiguousarray(keys))).all():
                errs.append(f"{where}: key hashes do not match the keys")
            if not (diffs != 0).all():
                errs.append(f"{where}: zero diffs")
            if len(koff) != len(kh) + 1 or koff[0] != 0 or koff[-1] != len(diffs) or not (np.diff(koff) > 0).all():
                errs.append(f"{where}: bad key offsets {koff.tolist()[:20]}")
                continue
            seen = [(int(kh[i]),) + tuple(keys[:, i].tolist()) for i in range(len(kh))]
            if seen != sorted(seen) or len(set(seen)) != len(seen):
                errs.append(f"{where}: keys not sorted/distinct")
            if len(kh) and workers > 1:
                sh = (kh.astype(object) * workers) >> sortk.HASH_BITS
                if not all(int(x) == s for x in sh):
                    errs.append(f"{where}: keys of another shard")
            for i in range(len(kh)):
                rows = [tuple(vals[:, r].tolist()) + tuple(times[r].tolist()) for r in range(koff[i], koff[i + 1])]
                if rows != sorted(rows) or len(set(rows)) != len(rows):
                    errs.append(f"{where}: key {seen[i]} rows not sorted/distinct: {rows[:8]}")
                    break
    return errs


def _build_red(red, coll):
    op, by = red[0], list(red[1])
    if op == "count":
        return coll.count(by=by)
    if op == "sum":
        return coll.sum(by=by, col=red[2])
    if op == "min":
        return coll.min(by=by, col=red[2])
    if op == "max":
        return coll.max(by=by, col=red[2])
    if op == "argmin":
        return coll.argmin(by=by, col=red[2])
    if op == "argmax":
        return coll.argmax(by=by, col=red[2])
    if op == "top_k":
        return coll.top_k(by=by, order_by=red[2], k=red[3], descending=red[4])
    if op == "distinct":
        return (coll.select(*by, "v") if by else coll).distinct()
    if op == "threshold":
        return coll.threshold(by=by, fn=THRESH[red[2]])
    fn, cols, outspec, _ = USER[red[2]]
    return coll.reduce(by=by, fn=fn, columns=cols, out=outspec)


def canon_row(names, row):
    d = dict(zip(names, row))
    if "count" in d:
        d["v"] = d.pop("count")
    if "b" in d:
        d["b"] = bool(d["b"])
    return tuple(d.get(c, DEFAULT[c]) for c in COLS)


def canon_ref(red, c: Counter) -> Counter:
    names = out_cols(red)
    out = Counter()
    for r, m in c.items():
        out[canon_row(names, r)] += m
    return clean(out)


def canon_build(red, coll):
    names = out_cols(red)
    present = set(names)

    def fill(**cols):
        n = len(next(iter(cols.values()))) if cols else 0
        out = {}
        for c in COLS:
            src = "count" if c == "v" and "count" in cols else c
            if src in cols:
                out[c] = cols[src] != 0 if c == "b" else cols[src]  # (sum of b is int64)
            elif c == "s":
                out[c] = np.full(n, "", object)
            elif c == "f":
                out[c] = np.zeros(n, np.float64)
            elif c == "b":
                out[c] = np.zeros(n, bool)
            else:
                out[c] = np.zeros(n, np.int64)
        return out
    assert names, "threshold(by=[]) has no columns to map (tests keep it at top level)"
    args = ", ".join(names)
    ns = {"fill": fill}
    exec(f"def f({args}):\n    return fill({', '.join(f'{a}={a}' for a in names)})", ns)
    f = ns["f"]
    f.__name__ = "canon_" + "_".join(sorted(present))
    return coll.map(f, out=dict(zip(COLS, DTYPES)))


# -- loop bodies ---------------------------------------------------------------------------------------

MODK = 7


def e_mod(k, s, f, b, v):
    return {"k": k % MODK, "s": s, "f": f, "b": b, "v": v % 5}


def ref_mod(c: Counter) -> Counter:
    out = Counter()
    for (k, s, f, b, v), m in c.items():
        out[(k % MODK, s, f, b, v % 5)] += m
    return clean(out)


def random_prog(rng, depth):
    """('red', red) at top level, or ('loop', red, rounds, inner) where inner is a prog one level deeper:
    loop x0 = A; x_{i+1} = A + mod(canon(red(inner(x_i)))) (inner of a loop body: the variable itself,
    or a nested loop started from it)."""
    red = random_red(rng)
    if depth == 0:
        return ("red", red)
    inner = random_prog(rng, depth - 1) if depth > 1 else None
    semi = bool(red[1]) and rng.random() < 0.4  # the reduction's arrangement read by a join in the loop
    return ("loop", red, int(rng.integers(1, 4)), inner, semi)


def ref_prog(prog, a: Counter, x=None) -> Counter:
    """Contents as canon rows (schema COLS)."""
    if prog[0] == "red":
        return canon_ref(prog[1], ref_red(prog[1], a if x is None else x))
    _, red, rounds, inner, semi = prog
    cur = clean(Counter(a if x is None else x))
    for _ in range(rounds):
        y = cur if inner is None else ref_prog(inner, a, cur)
        z = ref_red(red, y)
        if semi:
            z = ref_semi(red, z, a)
        nxt = Counter(a)
        for r, m in ref_mod(canon_ref(red, z)).items():
            nxt[r] += m
        nxt = clean(nxt)
        if nxt == cur:
            break
        cur = nxt
    return cur


def ref_semi(red, rows: Counter, a: Counter) -> Counter:
    """R.semijoin(A, on=by): R's rows whose by-key A holds with a positive count."""
    by = list(red[1])
    names = out_cols(red)
    keys = Counter()
    for r, m in a.items():
        keys[tuple(r[COLS.index(c)] for c in by)] += m
    live = {k for k, m in keys.items() if m > 0}
    return Counter({r: m for r, m in rows.items() if tuple(r[names.index(c)] for c in by) in live})


def build_prog(prog, df, a, x=None):
    """``a``: the input A in the current scope."""
    if prog[0] == "red":
        return canon_build(prog[1], build_red(prog[1], a if x is None else x))
    _, red, rounds, inner, semi = prog
    start = a if x is None else x

    def body(v):
        a_in = a.enter(v.scope)
        y = v if inner is None else build_prog(inner, df, a_in, v)
        z = build_red(red, y)
        if semi:
            z = z.semijoin(a_in, on=list(red[1]))
        return a_in.concat(canon_build(red, z).map(e_mod, out=dict(zip(COLS, DTYPES))))
    return start.iterate(body, max_rounds=rounds)


# -- data ------------------------------------------------------------------------------------------------

def random_row(rng, wide: bool):
    k = int(rng.integers(0, 200)) if wide else int(rng.integers(-2, 4))
    return (k, S[rng.integers(len(S))], F[rng.integers(len(F))], bool(rng.random() < 0.5),
            int(rng.integers(-3, 5)))


def view_counter(view, at=None, names=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    d = cols.pop("diff")
    names = names or list(cols)
    out = Counter()
    arrs = [cols[n] for n in names]
    for i in range(len(d)):
        if d[i]:
            out[tuple(norm_val(a[i]) for a in arrs)] += int(d[i])
    return clean(out)


def norm(c: Counter) -> Counter:
    return clean(Counter({tuple(norm_val(x) for x in r): m for r, m in c.items()}))


# -- colliding key hashes (as tests/test_trace.py's fixture): every key hash one of three values, spread
# over the shards, so equal-hash runs of many keys are ordered by the keys themselves -----------------

class colliding_hashes:
    def __enter__(self):
        from kpgnb.engine.kernels import sort as sortk
        self.sortk = sortk
        self.saved = (sortk.hash_keys, sortk.packed_hashes, sortk.key_hashes)

        def coarse(keys):
            if not keys.shape[0]:
                return np.zeros(keys.shape[1], np.int64)
            return ((np.abs(keys[0]) % 3).astype(np.int64) << np.int64(38)) | (np.abs(keys[-1]) % 2).astype(np.int64)

        def packed(keys):
            n = keys.shape[1]
            return (coarse(keys).astype(np.uint64) << np.uint64(sortk.POS_BITS)) | np.arange(n, dtype=np.uint64)

        def into(keys, out, lo=0, hi=None):
            hi = keys.shape[1] if hi is None else hi
            out[lo:hi] = coarse(keys)[lo:hi]
            return out
        sortk.hash_keys, sortk.packed_hashes, sortk.key_hashes = coarse, packed, into
        return self

    def __exit__(self, *exc):
        self.sortk.hash_keys, self.sortk.packed_hashes, self.sortk.key_hashes = self.saved
