"""Projections fused at install (``operators.basic.fuse_projections``): a join gathers only the columns a
chain of select/rename after it keeps, a chain of projections copies once, a rename copies nothing, and
a flat_map that keeps every row in order passes times and diffs on as they are. Each shape is checked
against a from-scratch reference at every epoch of random insertions and removals, for 1, 2 and 3
workers: a wrongly composed column list or a shared buffer gives other rows."""
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

DOM = 5


def _rows(rng, n):
    return [tuple(int(v) for v in rng.integers(0, DOM, 3)) for _ in range(n)]


def _counter(view, cols, at=None):
    c = view.columns(at=at, diffs=True)
    return Counter({tuple(int(c[n][i]) for n in cols): int(c["diff"][i])
                    for i in range(len(c["diff"])) if c["diff"][i]})


def _clean(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v})


def _join(A: Counter, B: Counter) -> list:
    """(k, x, y, z, w, multiplicity) for every pair of rows with equal k."""
    by = {}
    for (k, z, w), d in B.items():
        by.setdefault(k, []).append((z, w, d))
    return [(k, x, y, z, w, da * db) for (k, x, y), da in A.items() for z, w, db in by.get(k, ())]


def _project(pairs, pick) -> Counter:
    out = Counter()
    for *row, d in pairs:
        out[pick(*row)] += d
    return _clean(out)


SHAPES = {
    # name: (build(a, b) -> {view name: (collection, columns read back)}, reference(A, B) -> {view: Counter})
    "join_select": (
        lambda a, b: {"v": (a.join(b, on="k").select("z", "x"), ["z", "x"])},
        lambda A, B: {"v": _project(_join(A, B), lambda k, x, y, z, w: (z, x))}),
    "join_chain": (  # select, rename, select again: one composed column list
        lambda a, b: {"v": (a.join(b, on="k").select("w", "k", "y").rename(w="p", y="q").select("q", "p"),
                            ["q", "p"])},
        lambda A, B: {"v": _project(_join(A, B), lambda k, x, y, z, w: (y, w))}),
    "join_two_readers": (  # the join's whole output is read too: nothing fused into it
        lambda a, b: {"v": (a.join(b, on="k").select("x", "w"), ["x", "w"]),
                      "n": (a.join(b, on="k").count(by="z"), ["z", "count"])},
        lambda A, B: {"v": _project(_join(A, B), lambda k, x, y, z, w: (x, w)),
                      "n": _count(_join(A, B))}),
    "shared_join": (
        None,  # built by _shared_join below: one join collection read by a select and a reduce
        lambda A, B: {"v": _project(_join(A, B), lambda k, x, y, z, w: (y, k)),
                      "n": _count(_join(A, B))}),
    "map_chain": (  # projections after a map: the chain's first projection gathers once
        lambda a, b: {"v": (a.map(lambda k, x, y: {"k": k, "s": x + y, "x": x}).select("x", "s", "k")
                            .rename(s="t").select("t", "k"), ["t", "k"])},
        lambda A, B: {"v": _rows_of(A, lambda k, x, y: (x + y, k))}),
    "permute_rename": (  # a permutation (not the identity) and a rename alone
        lambda a, b: {"v": (a.select("y", "k", "x").rename(y="m"), ["m", "k", "x"])},
        lambda A, B: {"v": _clean(Counter({(y, k, x): d for (k, x, y), d in A.items()}))}),
    "semijoin": (  # the left reordered, so that the join's output (key first) is projected back
        lambda a, b: {"v": (a.select("y", "k", "x").semijoin(b, on="k"), ["y", "k", "x"])},
        lambda A, B: {"v": _rows_of({r: d for r, d in A.items() if r[0] in _keys(B)}, lambda k, x, y: (y, k, x))}),
    "antijoin": (
        lambda a, b: {"v": (a.select("x", "k").antijoin(b, on="k"), ["x", "k"])},
        lambda A, B: {"v": _rows_of({r: d for r, d in A.items() if r[0] not in _keys(B)}, lambda k, x, y: (x, k))}),
    "rename_alone": (  # identity columns: passes the flattened input on
        lambda a, b: {"v": (a.rename(x="q"), ["k", "q", "y"])},
        lambda A, B: {"v": _clean(Counter(A))}),
    "flat_map_all_rows": (  # an identity index (times pass on as they are) and a reversed one
        lambda a, b: {"v": (a.flat_map(lambda k, x, y: ({"k": k, "x": x * 2}, np.arange(len(k))),
                                       out={"k": "int64", "x": "int64"}, repeat=False), ["k", "x"]),
                      "r": (a.flat_map(lambda k, x, y: ({"k": k[::-1], "x": y[::-1]}, np.arange(len(k))[::-1]),
                                       out={"k": "int64", "x": "int64"}, repeat=False), ["k", "x"])},
        lambda A, B: {"v": _rows_of(A, lambda k, x, y: (k, 2 * x)),
                      "r": _rows_of(A, lambda k, x, y: (k, y))}),
}


def _count(pairs) -> Counter:
    """count(by=z) of the join: per z, the total multiplicity."""
    tot = Counter()
    for k, x, y, z, w, d in pairs:
        tot[z] += d
    return _clean(Counter({(z, n): 1 for z, n in tot.items() if n}))


def _keys(B) -> set:
    """The keys present in B (its rows' multiplicities are positive: the stream removes present rows)."""
    return {k for (k, _, _), d in B.items() if d}


def _rows_of(A, f) -> Counter:
    out = Counter()
    for r, d in A.items():
        out[f(*r)] += d
    return _clean(out)


def _shared_join(a, b):
    j = a.join(b, on="k")
    return {"v": (j.select("y", "k"), ["y", "k"]), "n": (j.count(by="z"), ["z", "count"])}


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", range(3))
def test_fused_projections_match_the_reference(shape, seed, workers):
    build, reference = SHAPES[shape]
    build = build or _shared_join
    rng = np.random.default_rng(seed * 31 + len(shape))
    state = {"A": Counter(), "B": Counter()}
    epochs = 5
    with kp.Engine(workers=workers) as eng:
        ins = {"A": eng.input("A", ["k", "x", "y"]), "B": eng.input("B", ["k", "z", "w"])}

        def change():
            for name, s in ins.items():
                rows = _rows(rng, int(rng.integers(1, 40)))
                # removals of present rows as well as insertions (some rows end with multiplicity > 1)
                present = [r for r, d in state[name].items() if d > 0]
                gone = [present[i] for i in rng.choice(len(present), min(len(present), 5), replace=False)] \
                    if present else []
                s.update(rows + gone, [1] * len(rows) + [-1] * len(gone))
                for r in rows:
                    state[name][r] += 1
                for r in gone:
                    state[name][r] -= 1
                state[name] = _clean(state[name])

        change()
        for s in ins.values():
            s.advance_to(1)
        with eng.dataflow("p") as df:
            outs = build(df.input("A"), df.input("B"))
            views = {n: (c.view(n, history=epochs + 2), cols) for n, (c, cols) in outs.items()}
        expected = {}
        for e in range(1, epochs + 1):
            expected[e - 1] = reference(state["A"], state["B"])
            change()
            for s in ins.values():
                s.advance_to(e + 1)
        expected[epochs] = reference(state["A"], state["B"])
        for n, (v, cols) in views.items():
            eng.wait(v)
            for e, want in expected.items():
                assert _counter(v, cols, at=e) == want[n], (shape, n, "epoch", e)


def test_fusion_happens():
    """The shapes above are fused as this module's docstring says (else they would pass unfused too): a
    join gathers only what its select/rename chain keeps, the chain passes messages on, a rename of an
    arranged input copies nothing, and a join whose output another operator reads gathers everything."""
    from kpgnb.engine.operators.basic import ProjectOp
    from kpgnb.engine.operators.join import JoinOp
    with kp.Engine(workers=2) as eng:
        eng.input("A", ["k", "x", "y"]).advance_to(1)
        eng.input("B", ["k", "z", "w"]).advance_to(1)
        with eng.dataflow("p") as df:
            a, b = df.input("A"), df.input("B")
            a.join(b, on="k").select("w", "k", "y").rename(w="p").select("y", "p").view("chain")
            a.rename(x="q").view("renamed")
            j = a.join(b, on="k")
            j.select("x").view("one")
            j.count(by="z").view("two")
        eng.wait()
        ops = df.graph.ops
        joins = [op for op in ops if isinstance(op, JoinOp)]
        assert [op.out_cols for op in joins] == [[(1, 1), (2, 1)], None]  # (y: A's 2nd value; w: B's 2nd)
        projects = [op for op in ops if isinstance(op, ProjectOp)]
        # the chain's three pass on; the select after the shared join gathers; the rename of the arranged
        # input is the same arrangement under new names (no operator at all: its view reads the import)
        assert [op.gather is None for op in projects] == [True, True, True, False]
        renamed = next(op for op in ops if getattr(op, "name", None) == "renamed")
        assert renamed.inputs[0] is a.op
