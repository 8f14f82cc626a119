"""A small, obviously-correct reference evaluator, and random programs it shares with the engine.

A program is a nested tuple over collections with two int64 columns (a, b), so that every operator
composes with every other. ``evaluate`` recomputes a program from scratch on plain Counters (row ->
multiplicity) for the inputs as of one epoch; ``build`` constructs the same program as an engine
dataflow. The randomized suite checks that the engine's maintained view equals the reference at every
epoch of a random update stream.
"""
from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np
from numba import njit

from kpgnb.engine.collection import Variable

COLS = ("a", "b")
DOM = 6  # values live in a small domain so that joins and reductions collide


def clean(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v != 0})


# -- the user functions both sides apply ----------------------------------------------------------

def f_swap(a, b):
    return {"a": b, "b": a}


def f_mix(a, b):
    return {"a": a, "b": (a * 3 + b) % DOM}


def f_keep(a, b):
    return (a + b) % 3 != 0


def f_flat(a, b):
    idx = np.repeat(np.arange(len(a)), 2)
    return {"a": a[idx], "b": np.where(np.arange(len(idx)) % 2 == 0, b[idx], (b[idx] + 1) % DOM)}, idx


def f_pair(b, b_right):
    return {"a": b, "b": b_right}


def f_mod(a, count):
    return {"a": a, "b": count % DOM}


def f_thresh(c):
    return (c > 1).astype(np.int64) + (c > 2).astype(np.int64)


def f_round(a, b):
    """The round at which a row enters a loop through ``delay`` (enter_at)."""
    return (a + 2 * b) % DELAYS


DELAYS = 3  # f_round's rounds are 0 .. DELAYS - 1
_ROUNDS: list = []  # the round of each enclosing loop being evaluated, innermost last (for "delay")

RMOD = 6  # f_reduce's modulus: a constant, since numba freezes globals when it compiles


@njit
def f_reduce(vals, counts):
    """Per group: (number of distinct values with positive count, sum of value * count) -> one row
    (x, 1), where x mixes both, plus a second row when the group has several values."""
    npos = 0
    s = 0
    for i in range(vals.shape[0]):
        if counts[i] > 0:
            npos += 1
        s += vals[i, 0] * counts[i]
    n = 2 if vals.shape[0] > 1 else 1
    out = np.empty((n, 1), np.int64)
    cnt = np.ones(n, np.int64)
    out[0, 0] = (npos * 7 + s) % RMOD
    if n == 2:
        out[1, 0] = vals[vals.shape[0] - 1, 0] % RMOD
    return out, cnt


def ref_reduce(rows: Counter) -> Counter:
    vals = sorted(rows)
    out = Counter()
    npos = sum(1 for v in vals if rows[v] > 0)
    s = sum(v * rows[v] for v in vals)
    out[(npos * 7 + s) % RMOD] += 1
    if len(vals) > 1:
        out[vals[-1] % RMOD] += 1
    return out


# -- reference semantics --------------------------------------------------------------------------

def groups(c: Counter):
    g: dict = {}
    for (a, b), m in c.items():
        if m:
            g.setdefault(a, Counter())[b] += m
    return g


def evaluate(expr, inputs: dict, env: list | None = None) -> Counter:
    env = env or []
    op = expr[0]
    ev = lambda e: evaluate(e, inputs, env)  # noqa: E731
    if op == "input":
        return clean(inputs[expr[1]])
    if op == "var":
        return env[-1 - expr[1]]
    if op in ("swap", "mix"):
        f = f_swap if op == "swap" else f_mix
        out = Counter()
        for (a, b), m in ev(expr[1]).items():
            r = f(np.array([a]), np.array([b]))
            out[(int(r["a"][0]), int(r["b"][0]))] += m
        return clean(out)
    if op == "filter":
        return Counter({r: m for r, m in ev(expr[1]).items() if (r[0] + r[1]) % 3 != 0})
    if op == "flat":
        out = Counter()
        for (a, b), m in ev(expr[1]).items():
            out[(a, b)] += m
            out[(a, (b + 1) % DOM)] += m
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
    if op in ("join", "semijoin", "antijoin"):
        left, right = ev(expr[1]), ev(expr[2])
        rg = groups(right)
        out = Counter()
        if op == "join":
            for (a, b), m in left.items():
                for b2, m2 in rg.get(a, {}).items():
                    out[(b, b2)] += m * m2
        else:
            keys = {a for a, g in rg.items() if sum(g.values()) > 0}
            for (a, b), m in left.items():
                if (a in keys) == (op == "semijoin"):
                    out[(a, b)] += m
        return clean(out)
    if op == "count":
        out = Counter()
        for a, g in groups(ev(expr[1])).items():
            total = sum(g.values())
            if total:
                out[(a, total % DOM)] += 1
        return out
    if op in ("distinct", "distinct_a"):
        return Counter({r: 1 for r, m in ev(expr[1]).items() if m > 0})
    if op == "threshold":
        out = Counter()
        for r, m in ev(expr[1]).items():
            v = int(f_thresh(np.array([m]))[0])
            if v:
                out[r] = v
        return out
    if op == "sum":
        out = Counter()
        for a, g in groups(ev(expr[1])).items():
            out[(a, sum(b * m for b, m in g.items()))] += 1
        return out
    if op in ("min", "max", "argmin", "argmax"):
        out = Counter()
        pick = min if op in ("min", "argmin") else max
        for a, g in groups(ev(expr[1])).items():
            pos = [b for b, m in g.items() if m > 0]
            if pos:
                out[(a, pick(pos))] += 1
        return out
    if op == "topk":
        k = expr[2]
        out = Counter()
        for a, g in groups(ev(expr[1])).items():
            left = k
            for b in sorted((b for b, m in g.items() if m > 0), reverse=True):
                if left <= 0:
                    break
                take = min(g[b], left)
                out[(a, b)] += take
                left -= take
        return out
    if op == "reduce":
        out = Counter()
        for a, g in groups(ev(expr[1])).items():
            for x, m in ref_reduce(Counter({b: m for b, m in g.items() if m})).items():
                out[(a, x)] += m
        return clean(out)
    if op == "delay":  # an outer collection entering the innermost loop at round f_round(row)
        return Counter({r: m for r, m in ev(expr[1]).items() if (r[0] + 2 * r[1]) % DELAYS <= _ROUNDS[-1]})
    if op == "iterate":
        _, init, body, rounds = expr
        x = ev(init)
        for i in range(rounds if rounds is not None else 10_000):
            _ROUNDS.append(i)
            try:
                nxt = clean(evaluate(body, inputs, env + [x]))
            finally:
                _ROUNDS.pop()
            if nxt == x and i >= DELAYS - 1:  # converged, and every delayed row has entered
                break
            x = nxt
        return x
    if op == "mutual":
        # two variables: x' = body_x(x, y), y' = body_y(x, y); the result is x
        _, init_x, init_y, body_x, body_y, rounds = expr
        x, y = ev(init_x), ev(init_y)
        for _ in range(rounds):
            nx = clean(evaluate(body_x, inputs, env + [y, x]))
            ny = clean(evaluate(body_y, inputs, env + [y, x]))
            if nx == x and ny == y:
                break
            x, y = nx, ny
        return x
    raise ValueError(op)


# -- the same program on the engine ----------------------------------------------------------------

def here(coll, env):
    """A loop nested in a loop body nests in that body's scope: enter collections from outside first."""
    if env and env[-1].scope is not coll.scope and coll.scope.is_ancestor_of(env[-1].scope):
        return coll.enter(env[-1].scope)
    return coll


def build(expr, df, env: list | None = None):
    env = env or []
    op = expr[0]
    bd = lambda e: build(e, df, env)  # noqa: E731
    if op == "input":
        return df.input(expr[1])
    if op == "var":
        return env[-1 - expr[1]]
    if op == "swap":
        return bd(expr[1]).map(f_swap)
    if op == "mix":
        return bd(expr[1]).map(f_mix)
    if op == "filter":
        return bd(expr[1]).filter(f_keep)
    if op == "flat":
        return bd(expr[1]).flat_map(f_flat)
    if op == "concat":
        return bd(expr[1]).concat(bd(expr[2]))
    if op == "negate":
        return bd(expr[1]).negate()
    if op == "consolidate":
        return bd(expr[1]).consolidate()
    if op == "join":
        return bd(expr[1]).join(bd(expr[2]), on="a").map(f_pair)
    if op == "semijoin":
        return bd(expr[1]).semijoin(bd(expr[2]), on="a")
    if op == "antijoin":
        return bd(expr[1]).antijoin(bd(expr[2]), on="a")
    if op == "count":
        return bd(expr[1]).count(by="a").map(f_mod)
    if op == "distinct":
        return bd(expr[1]).distinct()
    if op == "distinct_a":  # the same set, arranged by a (its values b listed per key)
        return bd(expr[1]).distinct(key="a")
    if op == "threshold":
        return bd(expr[1]).threshold(f_thresh)
    if op == "sum":
        return bd(expr[1]).sum(by="a", col="b")
    if op == "min":
        return bd(expr[1]).min(by="a", col="b")
    if op == "max":
        return bd(expr[1]).max(by="a", col="b")
    if op == "argmin":
        return bd(expr[1]).argmin(by="a", col="b")
    if op == "argmax":
        return bd(expr[1]).argmax(by="a", col="b")
    if op == "topk":
        return bd(expr[1]).top_k(by="a", order_by="b", k=expr[2])
    if op == "reduce":
        return bd(expr[1]).reduce(by="a", fn=f_reduce, columns=["b"], out={"b": "int64"})
    if op == "delay":
        return bd(expr[1]).enter_at(env[-1].scope, f_round)
    if op == "iterate":
        _, init, body, rounds = expr
        return here(bd(init), env).iterate(lambda v: build(body, df, env + [v]), max_rounds=rounds)
    if op == "mutual":
        _, init_x, init_y, body_x, body_y, rounds = expr
        x0, y0 = here(bd(init_x), env), here(bd(init_y), env)
        scope = x0.scope.loop()
        x = Variable(scope, x0)
        y = Variable(scope, y0)
        nx = build(body_x, df, env + [y, x])
        ny = build(body_y, df, env + [y, x])
        result = x.set(nx, max_rounds=rounds)
        y.set(ny, max_rounds=rounds)
        return result.leave()
    raise ValueError(op)


# -- random programs ---------------------------------------------------------------------------

UNARY = ["swap", "mix", "filter", "flat", "negate", "consolidate", "count", "distinct", "distinct_a", "threshold",
         "sum", "min", "max", "argmin", "argmax", "topk", "reduce"]
BINARY = ["concat", "join", "semijoin", "antijoin"]


def random_program(rng, depth: int = 3, loops: int = 0, inputs=("A", "B"), top: bool = True):
    """A random program; ``loops`` is how many enclosing loop variables may be referenced."""
    leaf_choices = [("input", n) for n in inputs] + [("var", i) for i in range(loops)]
    if loops:  # inputs entering the innermost loop gradually (kept in unbounded loops only: see _undelay)
        leaf_choices += [("delay", ("input", n)) for n in inputs]
    if depth <= 0 or (not top and rng.random() < 0.15):
        return leaf_choices[rng.integers(len(leaf_choices))]
    sub = lambda d, l=loops: random_program(rng, d, l, inputs, top=False)  # noqa: E731
    r = rng.random()
    if r < 0.45:
        op = UNARY[rng.integers(len(UNARY))]
        inner = sub(depth - 1)
        return (op, inner, int(rng.integers(1, 3))) if op == "topk" else (op, inner)
    if r < 0.75 or depth < 2:
        op = BINARY[rng.integers(len(BINARY))]
        return (op, sub(depth - 1), sub(depth - 1))
    if r < 0.93 or loops >= 2:
        init = sub(depth - 1)
        body = sub(depth - 1, loops + 1)
        if ("var", 0) not in _leaves(body):
            body = ("concat", ("var", 0), body)
        rounds = None if rng.random() < 0.3 else int(rng.integers(1, 5))
        if rounds is not None:
            body = _undelay(body)
        if rounds is None:  # unbounded loops must converge: keep the body monotone over a finite domain
            body = ("distinct", ("concat", ("var", 0), _monotone(body)))
        return ("iterate", init, ("distinct", body) if rng.random() < 0.5 else body, rounds)
    body_x = ("distinct", ("concat", ("var", 0), _undelay(sub(depth - 2, loops + 2))))
    body_y = ("distinct", ("concat", ("var", 1), _undelay(sub(depth - 2, loops + 2))))
    return ("mutual", sub(depth - 2), sub(depth - 2), body_x, body_y, int(rng.integers(1, 5)))


MONOTONE = {"input", "var", "delay", "swap", "mix", "filter", "flat", "concat", "join", "semijoin", "distinct", "distinct_a",
            "consolidate"}


def _undelay(expr):
    """A loop body whose delayed inputs enter at round 0 (``delay`` is generated for unbounded loops only:
    in a loop cut at max_rounds, rows entering at later rounds still change its last result)."""
    if expr[0] == "delay":
        return expr[1]
    if expr[0] in ("input", "var"):
        return expr
    if expr[0] == "iterate":  # a nested loop's body delays belong to it; its initial value is ours
        return (expr[0], _undelay(expr[1])) + expr[2:]
    if expr[0] == "mutual":
        return (expr[0], _undelay(expr[1]), _undelay(expr[2])) + expr[3:]
    return (expr[0],) + tuple(_undelay(x) if isinstance(x, tuple) else x for x in expr[1:])


def _monotone(expr):
    """Replace non-monotone parts of a loop body by their input, so the loop reaches a fixed point."""
    if expr[0] in ("input", "var"):
        return expr
    if expr[0] not in MONOTONE:
        return _monotone(expr[1])
    return (expr[0],) + tuple(_monotone(x) if isinstance(x, tuple) else x for x in expr[1:])


def _leaves(expr):
    if expr[0] in ("input", "var"):
        return [expr]
    out = []
    for x in expr[1:]:
        if isinstance(x, tuple):
            out += _leaves(x)
    return out


def shortest_distances(edges, roots, weights: bool = False) -> list:
    """Sorted (node, distance) of the nodes reachable from ``roots`` (each root at 0) along ``edges``:
    (src, dst) pairs (hops), or with ``weights`` a dict (src, dst) -> weight (networkx's Dijkstra)."""
    g = nx.DiGraph()
    g.add_nodes_from(roots)
    if weights:
        g.add_weighted_edges_from((u, v, w) for (u, v), w in edges.items())
    else:
        g.add_edges_from(edges)
    if not len(roots):
        return []
    hop = "weight" if weights else (lambda u, v, d: 1)
    return sorted(nx.multi_source_dijkstra_path_length(g, set(roots), weight=hop).items())


def random_updates(rng, n: int):
    """n random (row, diff) changes over the small domain, mostly insertions."""
    rows = [(int(rng.integers(DOM)), int(rng.integers(DOM))) for _ in range(n)]
    diffs = [int(rng.choice([1, 1, 1, -1, 2])) for _ in range(n)]
    return rows, diffs


def random_edge_edits(rng, edges: dict, n: int, count: int, remove: float) -> tuple:
    """``count`` random edge changes among ``n`` nodes, applied to ``edges`` ((src, dst) -> multiplicity):
    with probability ``remove`` one present edge is retracted, else a random edge (maybe present) is
    added. Returns the (rows, diffs) to send."""
    ups, diffs = [], []
    for _ in range(count):
        if edges and rng.random() < remove:
            k = list(edges)[int(rng.integers(len(edges)))]
            edges[k] -= 1
            if not edges[k]:
                del edges[k]
            diffs.append(-1)
        else:
            k = (int(rng.integers(n)), int(rng.integers(n)))
            edges[k] = edges.get(k, 0) + 1
            diffs.append(1)
        ups.append(k)
    return ups, diffs


def toggle_root(rng, ri, roots: set, n: int):
    """A random node of ``n`` becomes a root through the input ``ri``, or stops being one if it is (one
    root always stays)."""
    x = int(rng.integers(n))
    if x in roots and len(roots) > 1:
        ri.remove([(x,)])
        roots.discard(x)
    elif x not in roots:
        ri.insert([(x,)])
        roots.add(x)
