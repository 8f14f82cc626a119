"""Session 44 attack on the data boundary: str / float64 / bool columns (NaN, +-inf, -0.0, empty and
unicode strings, NUL characters, fresh strings that shift the lexicographic ranks), keyed inputs, Arrow and
pandas variants, views (at=, diffs=True, columns(), follow) and the operators over such data, each checked
against a from-scratch reference of the README's semantics at every epoch.

The last section's tests are bugs this attack found, fixed in the same session."""
import functools
import math
import random
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from numba import njit

import kpgnb as kp

# -- value model of the README ("Reductions compare values by value") --------------------------------------
NAN = "NaN!"  # a hashable stand-in for NaN, so rows holding it compare equal (the engine keeps one NaN)


def cv(v):
    """A Python value as the engine stores it: -0.0 as 0.0, every NaN the same."""
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return NAN if math.isnan(v) else v + 0.0
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def back(row):
    return tuple(float("nan") if v is NAN else v for v in row)


def okey(v):
    """Floats numerically with NaN after +inf; str by code point; bool False < True."""
    return (1, 0.0) if v is NAN else (0, v)


def rkey(row):
    return tuple(okey(v) for v in row)


def got(view, at=None):
    df = view.to_pandas(at=at, diffs=True)
    out = Counter()
    for r in df.itertuples(index=False):
        out[tuple(cv(v) for v in r[:-1])] += int(r[-1])
    return out


def perm(row, first):
    """A row as a reduction outputs it: the key columns first, then the others in their order."""
    return tuple(row[i] for i in first) + tuple(v for i, v in enumerate(row) if i not in first)


def ref_count(ms, by):
    g = Counter()
    for row, m in ms.items():
        g[tuple(row[i] for i in by)] += m
    return Counter({k + (c,): 1 for k, c in g.items() if c})


def _proj(ms, by, col):
    proj = Counter()
    for row, m in ms.items():
        proj[tuple(row[i] for i in by) + (row[col],)] += m
    return proj


def ref_sum(ms, by, col):
    g = {}
    for r, m in _proj(ms, by, col).items():
        if m:
            g.setdefault(r[:-1], []).append((r[-1], m))
    out = Counter()
    for k, vals in g.items():
        s = 0.0
        for v, m in vals:
            s += (float("nan") if v is NAN else v) * m
        out[k + (cv(s),)] += 1
    return out


def ref_extreme(ms, by, col, biggest):
    g = {}
    for r, m in _proj(ms, by, col).items():
        if m > 0:
            g.setdefault(r[:-1], []).append(r[-1])
    return Counter({k + ((max if biggest else min)(vals, key=okey),): 1 for k, vals in g.items()})


def ref_arg(ms, by, col, biggest):
    g = {}
    for row, m in ms.items():
        if m > 0:
            g.setdefault(tuple(row[i] for i in by), []).append(row)
    out = Counter()
    for rows in g.values():
        sign = -1 if biggest else 1
        best = sorted(rows, key=functools.cmp_to_key(lambda a, b: _cmp(a, b, col, sign)))[0]
        out[perm(best, by)] += 1
    return out


def _cmp(a, b, col, sign):
    ka, kb = okey(a[col]), okey(b[col])
    if ka != kb:
        return sign * (-1 if ka < kb else 1)
    ra, rb = rkey(a), rkey(b)
    return (ra > rb) - (ra < rb)


def ref_topk(ms, by, col, k, descending=True):
    g = {}
    for row, m in ms.items():
        if m > 0:
            g.setdefault(tuple(row[i] for i in by), []).append((row, m))
    out = Counter()
    sign = -1 if descending else 1
    for rows in g.values():
        rows.sort(key=functools.cmp_to_key(lambda a, b: _cmp(a[0], b[0], col, sign)))
        left = k
        for r, m in rows:
            if left <= 0:
                break
            t = min(m, left)
            out[perm(r, by)] += t
            left -= t
    return out


def ref_join(a, b, ka, kb, first):
    out = Counter()
    for ra, ma in a.items():
        for rb, mb in b.items():
            if ra[ka] == rb[kb]:
                out[perm(ra, [ka]) + tuple(v for j, v in enumerate(rb) if j != kb)] += ma * mb
    return Counter({r: m for r, m in out.items() if m})


STRS = ["", "a", "A", "a\x00", "é", "e\u0301", "日本", "\U0001F600", "zz", " a"]
FLTS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, float("inf"), float("-inf"), float("nan"), 3.0, -2.5]


# -- 1. random streams over str/float/int/bool columns: every operator, every epoch ------------------------
@pytest.mark.parametrize("seed, workers, key", [(0, 1, None), (1, 2, None), (2, 2, "k"), (3, 1, ["k", "f"]),
                                                (4, 2, ["k", "f"]), (5, 2, "k")])
def test_reductions_and_joins_over_str_float_bool_match_the_reference_at_every_epoch(seed, workers, key):
    rng = random.Random(seed)
    K, F, N, B = 0, 1, 2, 3
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k", "f", "n", "b"], dtypes=["str", "float64", "int64", "bool"], key=key)
        y = eng.input("y", ["w", "k"], dtypes=["float64", "str"], key="w" if key else None)
        H = 100
        with eng.dataflow("d") as df:
            X, Y = df.input("x"), df.input("y")
            views = dict(
                ct=X.count(by="k"), ctf=X.count(by=["f", "b"]), sm=X.sum(by="k", col="f"),
                mn=X.min(by="k", col="f"), mx=X.max(by="k", col="f"), mnk=X.min(by="f", col="k"),
                mxk=X.max(by="b", col="k"), am=X.argmin(by="k", col="f"), ax=X.argmax(by="f", col="k"),
                tk=X.top_k(by="k", order_by="f", k=2), tka=X.top_k(by="b", order_by="k", k=3, descending=False),
                ds=X.distinct(), js=X.join(Y, on="k"), jf=X.join(Y, left_on="f", right_on="w"),
                sj=X.semijoin(Y, left_on="f", right_on="w"), aj=X.antijoin(Y, on="k"),
                ab=X.arrange_by("f", "k"),
            )
            views = {n: c.view(n, history=H) for n, c in views.items()}
        MX, MY, refs = Counter(), Counter(), []
        for e in range(8):
            for _ in range(rng.randint(0, 12)):
                r = (rng.choice(STRS), rng.choice(FLTS), rng.randint(-2, 2), rng.random() < 0.5)
                m = rng.choice([1, 1, 1, 2])
                x.insert([r]) if m == 1 else x.update([r], [m])
                MX[tuple(cv(v) for v in r)] += m
            for _ in range(rng.randint(0, 4)):
                live = [r for r, m in MX.items() if m > 0]
                if live:
                    r = rng.choice(live)
                    # -0.0 removes a stored 0.0
                    rr = back(r)
                    if rr[F] == 0.0 and rng.random() < 0.5:
                        rr = rr[:F] + (-0.0,) + rr[F + 1:]
                    x.remove([rr])
                    MX[r] -= 1
            for _ in range(rng.randint(0, 4)):
                r = (rng.choice(FLTS), rng.choice(STRS))
                y.insert([r])
                MY[tuple(cv(v) for v in r)] += 1
            live = [r for r, m in MY.items() if m > 0]
            if live and rng.random() < 0.3:
                r = rng.choice(live)
                y.remove([back(r)])
                MY[r] -= 1
            x.advance_to(e + 1)
            y.advance_to(e + 1)
            mx_, my_ = +MX, +MY
            yw = {r[0] for r in my_}
            yk = {r[1] for r in my_}
            refs.append(dict(
                ct=ref_count(mx_, [K]), ctf=ref_count(mx_, [F, B]), sm=ref_sum(mx_, [K], F),
                mn=ref_extreme(mx_, [K], F, False), mx=ref_extreme(mx_, [K], F, True),
                mnk=ref_extreme(mx_, [F], K, False), mxk=ref_extreme(mx_, [B], K, True),
                am=ref_arg(mx_, [K], F, False), ax=ref_arg(mx_, [F], K, True),
                tk=ref_topk(mx_, [K], F, 2), tka=ref_topk(mx_, [B], K, 3, descending=False),
                ds=Counter({r: 1 for r in mx_}),
                js=ref_join(mx_, my_, K, 1, [K]), jf=ref_join(mx_, my_, F, 0, [F]),
                sj=Counter({r: m for r, m in mx_.items() if r[F] in yw}),
                aj=Counter({r: m for r, m in mx_.items() if r[K] not in yk}),
                ab=Counter({perm(r, [F, K]): m for r, m in mx_.items()}),
            ))
            if rng.random() < 0.4:
                eng.wait()
        eng.wait()
        for e, ref in enumerate(refs):
            for name, v in views.items():
                assert got(v, at=e) == ref[name], (e, name)
        # the latest contents, read without at=, and columns() agree too
        last = refs[-1]
        for name, v in views.items():
            assert got(v) == last[name], name
            cols = v.columns(diffs=True)
            assert len(cols[v.schema.free("diff")]) == len(last[name]), name


# -- 2. fresh strings every epoch: lexicographic ranks move under the reductions' state ---------------------
@pytest.mark.parametrize("seed, workers", [(0, 1), (1, 2), (2, 2), (3, 1)])
def test_string_order_holds_while_new_strings_shift_the_ranks(seed, workers):
    rng = random.Random(seed)
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["g", "s", "f"], dtypes=["int64", "str", "float64"])
        with eng.dataflow("d") as df:
            X = df.input("x")
            views = dict(mn=X.min(by="g", col="s"), mx=X.max(by="g", col="s"), am=X.argmin(by="g", col="s"),
                         tk=X.top_k(by="g", order_by="s", k=2),
                         tka=X.top_k(by="g", order_by="s", k=2, descending=False),
                         mnf=X.min(by="s", col="f"), ax=X.argmax(by="g", col="f"))
            views = {n: c.view(n, history=100) for n, c in views.items()}
        M, refs = Counter(), []
        for e in range(12):
            for _ in range(rng.randint(1, 6)):
                w = "".join(rng.choice("abAB\x00é") for _ in range(rng.randint(0, 3))) + "x" * e
                r = (rng.randint(0, 2), w[::-1], rng.choice(FLTS))
                x.insert([r])
                M[tuple(cv(v) for v in r)] += 1
            for _ in range(rng.randint(0, 3)):
                live = [r for r, m in M.items() if m > 0]
                if not live:
                    break
                r = rng.choice(live)
                x.remove([back(r)])
                M[r] -= 1
            x.advance_to(e + 1)
            mc = +M
            refs.append(dict(mn=ref_extreme(mc, [0], 1, False), mx=ref_extreme(mc, [0], 1, True),
                             am=ref_arg(mc, [0], 1, False), tk=ref_topk(mc, [0], 1, 2),
                             tka=ref_topk(mc, [0], 1, 2, descending=False),
                             mnf=ref_extreme(mc, [1], 2, False), ax=ref_arg(mc, [0], 2, True)))
            if rng.random() < 0.3:
                eng.wait()
        eng.wait()
        for e, ref in enumerate(refs):
            for name, v in views.items():
                assert got(v, at=e) == ref[name], (e, name)


# -- 3. user functions over str and float columns -------------------------------------------------------------
def test_map_filter_flat_map_see_strings_and_canonical_floats():
    with kp.Engine(workers=2) as eng:
        rows = [("a", 1.0), ("b", -0.0), ("é", float("nan")), ("", 2.0), ("a\x00", float("-inf"))]
        x = eng.input("x", ["k", "f"], dtypes=["str", "float64"], rows=rows)
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("x")
            neg = X.map(lambda k, f: {"k": k, "g": f * -1.0}).view("neg")
            eq = X.filter(lambda k: k == "a").view("eq")
            gt = X.filter(lambda k: k > "a").view("gt")
            pos = X.filter(lambda f: f > 0).view("pos")  # NaN > 0 is False
            bang = X.map(lambda k: {"s": np.array([s + "!" for s in k], dtype=object)}).view("bang")
            dup = X.flat_map(lambda k, f: ({"k": np.repeat(k, 2), "f": np.repeat(f, 2)}, np.full(len(k), 2)),
                             repeat=True).view("dup")
            # a join on a float key a map computed: -0.0 meets 0.0, NaN meets NaN
            key = X.map(lambda k, f: {"z": np.nan_to_num(f, nan=np.nan, posinf=np.nan, neginf=np.nan) * 0.0 - 0.0,
                                      "k": k})  # -0.0 - 0.0 = -0.0; +-inf and NaN -> NaN
            jz = key.join(X.map(lambda f: {"z": np.where(np.isnan(f), np.nan, 0.0)}), on="z").view("jz")
        assert neg.schema.dtypes == ("str", "float64") and bang.schema.dtypes == ("str",)
        eng.wait()
        g = neg.columns()
        assert not np.signbit(g["g"][g["k"] == "b"]).any()  # -(0.0) is stored as 0.0
        assert got(neg) == Counter({(k, cv(-f)): 1 for k, f in rows})
        assert got(eq) == Counter({("a", 1.0): 1})
        assert got(gt) == Counter({r: 1 for r in [("b", 0.0), ("é", NAN), ("a\x00", float("-inf"))]})  # "a\x00" > "a"
        assert got(pos) == Counter({("a", 1.0): 1, ("", 2.0): 1})
        assert got(bang) == Counter({(k + "!",): 1 for k, _ in rows})
        assert got(dup) == Counter({(k, cv(f)): 2 for k, f in rows})
        # z of each row: 0.0 for finite f, NaN for NaN and +-inf; right side: 0.0 x4, NaN x1
        zs = {"a": 0.0, "b": 0.0, "é": NAN, "": 0.0, "a\x00": NAN}
        want = Counter()
        for k, z in zs.items():
            want[(z, k)] += 4 if z == 0.0 else 1
        assert got(jz) == want


@njit
def _last_value(vals, cnts):
    out = np.empty((1, 1), np.int64)
    out[0, 0] = vals[vals.shape[0] - 1, 0]
    return out, np.ones(1, np.int64)


@njit
def _weighted_sum(vals, cnts):
    out = np.empty((1, 1), np.float64)
    t = 0.0
    for i in range(vals.shape[0]):
        t += vals[i, 0] * cnts[i]
    out[0, 0] = t
    return out, np.ones(1, np.int64)


@njit
def _bogus_id(vals, cnts):
    out = np.empty((1, 1), np.int64)
    out[0, 0] = 10 ** 9
    return out, np.ones(1, np.int64)


def test_user_reduce_gets_strings_in_lexicographic_order_and_floats_by_value():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["g", "s", "f"], dtypes=["int64", "str", "float64"])
        # interned in an order unlike the lexicographic one
        x.insert([(1, "b", 1.5), (1, "é", float("nan")), (1, "a", -0.0), (2, "zz", 2.0), (2, "Z", float("inf")),
                  (2, "zz", 2.0)])
        x.advance_to(1)
        with eng.dataflow("r") as df:
            X = df.input("x")
            last = X.reduce(by="g", fn=_last_value, columns=["s"], out={"s": "str"}).view("last")
            tot = X.reduce(by="g", fn=_weighted_sum, columns=["f"], out={"f": "float64"}).view("tot")
        eng.wait()
        assert got(last) == Counter({(1, "é"): 1, (2, "zz"): 1})
        assert got(tot) == Counter({(1, NAN): 1, (2, float("inf")): 1})
        x.remove([(1, "é", float("nan")), (2, "Z", float("inf"))])
        x.insert([(1, "\U0001F600", 0.25)])
        x.advance_to(2)
        eng.wait()
        assert got(last) == Counter({(1, "\U0001F600"): 1, (2, "zz"): 1})
        assert got(tot) == Counter({(1, 1.75): 1, (2, 4.0): 1})
        with eng.dataflow("bad") as df:
            bad = df.input("x").reduce(by="g", fn=_bogus_id, columns=["s"], out={"s": "str"}).view("bad")
        with pytest.raises(kp.DataflowError, match="no id its group received"):
            eng.wait(bad)
        assert eng.dataflows() == {"r": "running", "bad": "failed"}
        assert got(last) == Counter({(1, "\U0001F600"): 1, (2, "zz"): 1})


def test_shortest_float_paths_over_str_nodes_in_a_loop():
    """iterate + join on str + min over float (with an infinite weight), changed edges, against Dijkstra."""
    rng = random.Random(7)
    nodes = ["s", "é", "", "a\x00", "a", "日本"]

    def dijkstra(edges):
        dist = {"s": 0.0}
        while True:
            changed = False
            for (a, b, w), m in edges.items():
                if m > 0 and a in dist and (b not in dist or dist[a] + w < dist[b]):
                    dist[b] = dist[a] + w
                    changed = True
            if not changed:
                return Counter({(n, d): 1 for n, d in dist.items()})

    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["a", "b", "w"], dtypes=["str", "str", "float64"], key="a")
        r = eng.input("root", ["n", "d"], dtypes=["str", "float64"], rows=[("s", 0.0)])
        with eng.dataflow("it") as df:
            E = df.input("e")
            dv = df.input("root").iterate(
                lambda d: d.join(E, left_on="n", right_on="a").map(lambda b, d, w: {"n": b, "d": d + w})
                .concat(d).min(by="n", col="d")).view("dv")
        edges = Counter()
        for epoch in range(6):
            for _ in range(4):
                ed = (rng.choice(nodes), rng.choice(nodes), rng.choice([0.5, 0.25, 1.0, 2.0, float("inf")]))
                if ed[0] != ed[1]:
                    e.insert([ed])
                    edges[ed] += 1
            live = [k for k, m in edges.items() if m > 0]
            if live and epoch % 2:
                ed = rng.choice(live)
                e.remove([ed])
                edges[ed] -= 1
            e.advance_to(epoch + 1)
            r.advance_to(epoch + 1)
            eng.wait(dv)
            assert got(dv) == dijkstra(edges), epoch


# -- 4. Arrow and pandas variants load exactly --------------------------------------------------------------
def test_arrow_and_pandas_variants_load_exactly():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k", "f"], dtypes=["str", "float64"])
        want = Counter()

        def ins(t, rows):
            x.insert(t)
            want.update(tuple(cv(v) for v in r) for r in rows)

        d1 = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int8()), pa.array(["a", "b"]))
        d2 = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int8()), pa.array(["c", "a"]))
        d3 = pa.DictionaryArray.from_arrays(pa.array([0], pa.int8()), pa.array(["a", "b"]))
        ins(pa.table({"k": pa.chunked_array([d1, d2, d3]),
                      "f": pa.chunked_array([pa.array([1.0, 2.0, 3.0]), pa.array([4.0, 5.0]), pa.array([6.0])])}),
            [("a", 1.0), ("b", 2.0), ("a", 3.0), ("a", 4.0), ("c", 5.0), ("a", 6.0)])
        ins(pa.table({"k": pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(["z", "z"])),
                      "f": [7.0, 8.0]}), [("z", 7.0), ("z", 8.0)])
        t = pa.table({"k": pa.array(["p", "q", "r", "s"], pa.large_string()),
                      "f": pa.array([1, 2, 3, 4], pa.float16())})
        ins(t.slice(1, 2), [("q", 2.0), ("r", 3.0)])
        ins(pa.table({"k": pa.array(["m", "n", "o"]).dictionary_encode().slice(1),
                      "f": pa.array([1, 2], pa.uint64())}), [("n", 1.0), ("o", 2.0)])
        ins(pa.table({"k": pa.array(["v1", "v2"], pa.string_view()), "f": pa.array([True, False])}),
            [("v1", 1.0), ("v2", 0.0)])
        ins(pa.record_batch({"k": pa.array(["rb"]), "f": pa.array([-0.0])}), [("rb", 0.0)])
        ins(pa.table({"k": pa.chunked_array([], pa.string()), "f": pa.chunked_array([], pa.float64())}), [])
        ins(pa.table({"k": ["df", "df"],
                      "f": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int8()), pa.array([2.5]))}),
            [("df", 2.5), ("df", 2.5)])
        nul = pa.table({"k": pa.array(["n1", None, "n3"]), "f": [1.0, 2.0, float("nan")]})
        ins(nul.slice(2), [("n3", float("nan"))])
        with pytest.raises(kp.SchemaError, match=r"column 'k' has 1 null value\(s\), the first at row 0"):
            x.insert(nul.slice(1))
        ins(pd.DataFrame({"k": ["a\x00", "a", "a\x00b"], "f": [1.0, 1.0, 1.0]}),
            [("a\x00", 1.0), ("a", 1.0), ("a\x00b", 1.0)])
        ins(pd.DataFrame({"k": pd.array(["y\x00", "y"], dtype="string"), "f": [1.0, 1.0]}),
            [("y\x00", 1.0), ("y", 1.0)])
        ins(pd.DataFrame({"k": pd.Series(["zz", "a\x00"], dtype="string[pyarrow]"),
                          "f": pd.Series([0.5, -0.0], dtype="double[pyarrow]")}), [("zz", 0.5), ("a\x00", 0.0)])
        ins({"k": np.array(["u1", "u22"]), "f": np.array([1, 2], np.int32)}, [("u1", 1.0), ("u22", 2.0)])
        ins(pd.DataFrame({"f": [np.float32(0.1), 2.0], "k": ["i1", "i2"]}, index=[10, 10]),
            [("i1", float(np.float32(0.1))), ("i2", 2.0)])
        ins([(np.str_("npstr"), np.float64(-0.0)), ("big", 2 ** 70)], [("npstr", 0.0), ("big", float(2 ** 70))])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        assert got(v) == want


NULLS = [
    ("pd_string_pyarrow_NA", "k", pd.DataFrame({"k": pd.array(["p", None], dtype="string[pyarrow]"), "f": [1.0, 2.0]})),
    ("pd_double_pyarrow_NA", "f", pd.DataFrame({"k": ["p", "q"], "f": pd.Series([1.0, None], dtype="double[pyarrow]")})),
    ("pd_Float64_NA", "f", pd.DataFrame({"k": ["p", "q"], "f": pd.array([1.0, None], dtype="Float64")})),
    ("object_None_float", "f", pd.DataFrame({"k": ["p", "q"], "f": pd.Series([1.0, None], dtype=object)})),
    ("object_NaN_str", "k", pd.DataFrame({"k": ["p", np.nan], "f": [1.0, 2.0]})),
    ("tuple_None_str", "k", [("p", 1.0), (None, 2.0)]),
    ("tuple_NA_str", "k", [("p", 1.0), (pd.NA, 2.0)]),
    ("dict_None_float", "f", {"k": ["p", "q"], "f": [1.0, None]}),
    ("arrow_null_float", "f", pa.table({"k": ["p", "q"], "f": pa.array([1.0, None])})),
    ("bytes_for_str", "k", [(b"p", 1.0)]),
    ("str_for_float", "f", [("p", "1.5")]),
    ("bool_str", "f", [("p", 1.0), ("q", 2 ** 1024)]),
]


@pytest.mark.parametrize("col, bad", [c[1:] for c in NULLS], ids=[c[0] for c in NULLS])
def test_nulls_and_wrong_types_in_str_and_float_columns_are_refused_naming_the_column(col, bad):
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k", "f"], dtypes=["str", "float64"], rows=[("base", float("nan"))])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
            m = df.input("x").max(by="k", col="f").view("m")
        eng.wait()
        with pytest.raises(kp.SchemaError, match=f"column '{col}'"):
            x.insert(bad)
        x.insert([("base", float("inf"))])
        x.advance_to(2)
        eng.wait()
        assert got(v) == Counter({("base", NAN): 1, ("base", float("inf")): 1})
        assert got(m) == Counter({("base", NAN): 1})


def test_refused_rows_at_input_creation_leave_the_name_free():
    with kp.Engine(workers=1) as eng:
        for cols, dtypes, rows in [(["a"], ["str"], [(1,)]), (["a"], ["float64"], [("x",)]),
                                   (["a", "b"], ["str", "bool"], [("x", 2)]), (["a"], ["bool"], [(float("nan"),)])]:
            with pytest.raises(kp.SchemaError, match="column '[ab]'"):
                eng.input("t", cols, dtypes=dtypes, rows=rows)
            assert "t" not in eng.inputs()
        t = eng.input("t", ["a"], dtypes=["str"], rows=[("ok",)])
        t.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait(v)
        assert got(v) == Counter({("ok",): 1})


def test_mixed_dtypes_are_refused_by_join_and_concat_naming_both_columns():
    with kp.Engine(workers=1) as eng:
        eng.input("x", ["k", "f", "b"], dtypes=["str", "float64", "bool"])
        eng.input("y", ["n", "s"], dtypes=["int64", "str"])
        cases = [
            (lambda X, Y: X.join(Y, left_on="f", right_on="n"), "join key 'f' is float64 but 'n' is int64"),
            (lambda X, Y: X.join(Y, left_on="k", right_on="n"), "join key 'k' is str but 'n' is int64"),
            (lambda X, Y: X.semijoin(Y, left_on="b", right_on="n"), "join key 'b' is bool but 'n' is int64"),
            (lambda X, Y: X.antijoin(Y, left_on="f", right_on="n"), "join key 'f' is float64 but 'n' is int64"),
            (lambda X, Y: X.select("f").concat(Y.select("n").rename(n="f")),
             "column 'f' is float64 on one side and int64 on the other"),
            (lambda X, Y: X.sum(by="f", col="k"), "cannot sum column 'k'"),
        ]
        for build, msg in cases:
            with pytest.raises(kp.SchemaError, match=msg):
                with eng.dataflow("bad") as df:
                    build(df.input("x"), df.input("y")).view("v")
            assert eng.dataflows() == {}


# -- 5. views: empty dtypes, follow with str/float and time/diff column names --------------------------------
def test_views_keep_dtypes_when_empty_and_follow_str_float_changes():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k", "f", "b", "n"], dtypes=["str", "float64", "bool", "int64"])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v", history=10)
        eng.wait(v)
        want = {"k": np.dtype("O"), "f": np.dtype("float64"), "b": np.dtype("bool"), "n": np.dtype("int64")}
        assert v.to_pandas().dtypes.to_dict() == want
        assert v.to_pandas(diffs=True).dtypes.to_dict() == dict(want, diff=np.dtype("int64"))
        assert {c: a.dtype for c, a in v.columns().items()} == want
        assert [str(t) for t in v.to_arrow().schema.types] == ["string", "double", "bool", "int64"]
        # empty inserts of every shape change nothing
        x.insert(pd.DataFrame({c: pd.Series([], dtype=object) for c in "kfbn"}))
        x.insert([])
        x.insert({"k": [], "f": [], "b": [], "n": []})
        x.insert([("a", 1.0, True, 1), ("b", -0.0, False, 2 ** 63 - 1), ("a", 1.0, True, 1)])
        x.advance_to(2)
        eng.wait(v)
        f = v.follow(timeout=30)
        first = next(f)
        assert Counter(map(tuple, first.itertuples(index=False))) == Counter(
            {("a", 1.0, True, 1, 1, 2): 1, ("b", 0.0, False, 2 ** 63 - 1, 1, 1): 1})
        x.remove([("a", 1.0, True, 1)])
        x.insert([("é", float("nan"), False, -5)])
        x.advance_to(3)
        nxt = next(f)
        assert Counter(tuple(cv(c) for c in r) for r in nxt.itertuples(index=False)) == Counter(
            {("é", NAN, False, -5, 2, 1): 1, ("a", 1.0, True, 1, 2, -1): 1})
        f.close()
        assert got(v, at=1) == Counter({("a", 1.0, True, 1): 2, ("b", 0.0, False, 2 ** 63 - 1): 1})
        y = eng.input("y", ["time", "diff"], dtypes=["str", "float64"], rows=[("t", 1.5)])
        y.advance_to(1)
        with eng.dataflow("e") as df:
            w = df.input("y").view("w")
        eng.wait(w)
        fw = w.follow(timeout=30)
        assert (fw.time_col, fw.diff_col) == ("time_", "diff_")
        assert next(fw).to_dict("list") == {"time": ["t"], "diff": [1.5], "time_": [0], "diff_": [1]}
        y.remove([("t", 1.5)])
        y.advance_to(2)
        assert next(fw).to_dict("list") == {"time": ["t"], "diff": [1.5], "time_": [1], "diff_": [-1]}
        fw.close()


def test_keyed_input_on_float_and_str_with_exported_multi_column_arrangement():
    """A keyed input (str, float) shared by a later dataflow's join on both columns, through an export."""
    rng = random.Random(3)
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k", "f", "n"], dtypes=["str", "float64", "int64"], key=["k", "f"])
        y = eng.input("y", ["k", "f", "s"], dtypes=["str", "float64", "str"])
        with eng.dataflow("p") as df:
            df.input("x").arrange_by("k", "f").export("x_kf")
        MX, MY = Counter(), Counter()
        v = None
        for e in range(6):
            for _ in range(6):
                r = (rng.choice(STRS[:5]), rng.choice(FLTS), rng.randint(0, 3))
                x.insert([r])
                MX[tuple(cv(c) for c in r)] += 1
                r = (rng.choice(STRS[:5]), rng.choice(FLTS), rng.choice(STRS))
                y.insert([r])
                MY[tuple(cv(c) for c in r)] += 1
            x.advance_to(e + 1)
            y.advance_to(e + 1)
            if e == 2:  # installed late: starts from the inputs' contents
                with eng.dataflow("q") as df:
                    v = df.use("x_kf").join(df.input("y"), on=["k", "f"]).view("v")
            if v is not None:
                eng.wait(v)
                want = Counter()
                for a, ma in MX.items():
                    for b, mb in MY.items():
                        if a[:2] == b[:2]:
                            want[a + b[2:]] += ma * mb
                assert got(v) == want, e


def test_update_with_frames_and_array_like_diffs_on_a_float_keyed_input():
    """update() takes pandas/Arrow rows with a Series/Arrow diffs (positional, whatever the index); NaN and
    -0.0 rows cancel the NaN and 0.0 rows; distinct(key=) and threshold read the right totals."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["f", "k"], dtypes=["float64", "str"], key="f")
        x.update(pd.DataFrame({"f": [np.nan, -0.0, np.inf], "k": ["a", "b", "c"]}), pd.Series([3, 2, 1], index=[7, 8, 9]))
        x.update(pa.table({"f": [float("nan")], "k": ["a"]}), pa.array([-1]))
        x.remove(pd.DataFrame({"f": [0.0], "k": ["b"]}))
        x.update(pa.table({"f": [1.0, 2.0], "k": ["d", "e"]}), pa.chunked_array([[1], [4]]))
        with pytest.raises(kp.SchemaError, match=r"one integer per row \(1\)"):
            x.update([(1.0, "d")], [1, 2])
        with pytest.raises(kp.SchemaError, match="row 0 has diff nan"):
            x.update([(1.0, "d")], [np.nan])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("x")
            v = X.view("v")
            dk = X.distinct(key="f").view("dk")
            t = X.threshold(fn=lambda c: c // 2).view("t")
            neg = X.consolidate().negate().view("neg")
        eng.wait()
        want = Counter({(NAN, "a"): 2, (0.0, "b"): 1, (float("inf"), "c"): 1, (1.0, "d"): 1, (2.0, "e"): 4})
        assert got(v) == want
        assert got(dk) == Counter({r: 1 for r in want})
        assert got(t) == Counter({r: m // 2 for r, m in want.items() if m // 2})
        assert got(neg) == Counter({r: -m for r, m in want.items()})


# -- found by this attack, fixed in session 44 ---------------------------------------------------------------
@pytest.mark.parametrize("dtype,values", [("float64", [1.5, None]), ("int64", [1, None]), ("str", ["a", None])])
def test_arrow_dictionary_null_is_refused_as_a_null(dtype, values):
    """A dictionary-encoded Arrow column whose dictionary holds a null that a row reads was stored as NaN
    (float64) or refused with a misleading message: Arrow's null_count counts only the indices' nulls
    (engine/inputs.py check_arrow now reads the dictionary's too). A null entry no row reads is fine."""
    first = {"float64": 1.0, "int64": 1, "str": "z"}[dtype]
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["f"], dtypes=[dtype], rows=[(first,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        col = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(values))
        assert col.to_pylist() == values  # Arrow reads row 1 as a null
        with pytest.raises(kp.SchemaError, match=r"column 'f' has 1 null value\(s\), the first at row 1"):
            x.insert(pa.table({"f": col}))
        spare = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(values))
        x.insert(pa.table({"f": spare}))
        x.advance_to(2)
        eng.wait(v)
        assert got(v) == Counter({(cv(first),): 1}) + Counter({(cv(values[0]),): 2})


def test_top_k_with_a_k_beyond_int64_keeps_every_row():
    """top_k(k=2**70) was accepted and then failed the dataflow in the kernel (int64 overflow); no group
    holds more than 2**63 - 1 rows, so such a k keeps them all."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k", "f"], dtypes=["str", "float64"], rows=[("a", 1.0), ("a", 2.0)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").top_k(by="k", order_by="f", k=2 ** 70).view("v")
        eng.wait(v)
        assert got(v) == Counter({("a", 1.0): 1, ("a", 2.0): 1})
        with pytest.raises(kp.SchemaError, match="k >= 1"):
            with eng.dataflow("e") as df:
                df.input("x").top_k(by="k", order_by="f", k=True).view("v")


@pytest.mark.parametrize("history,error", [(None, kp.ArgumentTypeError), ("2", kp.ArgumentTypeError),
                                           (1.5, kp.ArgumentTypeError), (True, kp.ArgumentTypeError),
                                           (0, kp.UsageError)])
def test_view_history_must_be_an_int_of_at_least_one(history, error):
    """history=None raised a bare TypeError from int(); "2" and 1.5 were coerced and 0 taken as 1."""
    with kp.Engine(workers=1) as eng:
        eng.input("x", ["a"])
        with pytest.raises(error, match="history"):
            with eng.dataflow("d") as df:
                df.input("x").view("v", history=history)
        assert eng.dataflows() == {}


@pytest.mark.parametrize("rows", [[("\ud800",)], pd.DataFrame({"k": ["fine", "b\udc00"]})])
def test_lone_surrogate_strings_are_refused_naming_the_column(rows):
    """A str value with a lone surrogate went in and then could not come out through Arrow or Spark (a
    bare UnicodeEncodeError): the input now refuses it, naming the column and the row."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], dtypes=["str"], rows=[("ok",)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        with pytest.raises(kp.SchemaError, match=r"column 'k' is str but row \d holds .*lone surrogate"):
            x.insert(rows)
        x.advance_to(2)
        eng.wait(v)
        assert v.to_arrow().to_pylist() == [{"k": "ok"}]


def test_a_negative_at_is_refused_as_such():
    """at=-1 raised a CompactedError advising more history; it is still a CompactedError (as
    tests/test_attack_api_dataflows.py has it), now saying that no negative epoch exists."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"], rows=[(1,)])
        x.advance_to(2)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v", history=3)
        eng.wait(v)
        with pytest.raises(kp.CompactedError, match="epoch -1: epochs are numbered from 0"):
            v.to_pandas(at=-1)


def test_a_dict_of_series_with_different_indexes_is_refused():
    """Columns are read by position: Series whose indexes differ were paired by position where pandas
    aligns them by label (a silent mismatch); the same index, or Series with lists, still load."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a", "b"])
        with pytest.raises(kp.SchemaError, match="'a' and 'b' of the dict are pandas Series with different indexes"):
            x.insert({"a": pd.Series([1, 2], index=[5, 6]), "b": pd.Series([3, 4], index=[6, 5])})
        x.insert({"a": pd.Series([1, 2], index=[5, 6]), "b": pd.Series([3, 4], index=[5, 6])})
        x.insert({"a": pd.Series([7], index=[9]), "b": [8]})
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        assert got(v) == Counter({(1, 3): 1, (2, 4): 1, (7, 8): 1})
