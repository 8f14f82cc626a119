"""Session 45 attack: a new user reading README.md and the tutorials, trying the variation of each
documented promise that comes next (other dtypes, empty and zero-column collections, duplicate rows,
negative diffs, epochs advanced by more than one, old epochs through ``at=``, W = 1, 2, 3). Answers are
checked against small from-scratch references written here, never against the engine itself. Tests
marked xfail(strict=True) are bugs: they assert the documented behaviour."""
from __future__ import annotations

import random
from collections import Counter, defaultdict

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from kpgnb import graphs

from threads import T, join_all, watchdog

_watchdog = watchdog(120)

WORKERS = [1, 2, 3]


# -- helpers ----------------------------------------------------------------------------------------------
def bag(view, at=None) -> dict:
    """The view as {row tuple: multiplicity} (diffs=True, so negative multiplicities read too)."""
    d = view.to_pandas(at=at, diffs=True)
    cols = [c for c in d.columns if c != "diff"]
    out = {}
    for r in d[cols + ["diff"]].itertuples(index=False):
        out[tuple(_py(x) for x in r[:-1])] = int(r[-1])
    return out


def _py(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def net(updates) -> dict:
    """{row: net multiplicity != 0} of (row, diff) pairs."""
    c = Counter()
    for r, d in updates:
        c[r] += d
    return {r: m for r, m in c.items() if m}


def install(eng, name, build, timeout=T):
    """Install a dataflow of one view built by ``build(df)`` and wait for it."""
    with eng.dataflow(name) as df:
        v = build(df).view(name)
    eng.wait(v, timeout=timeout)
    return v


# -- the README's first dataflow, with the variations a user tries next ------------------------------------
@pytest.mark.parametrize("W", WORKERS)
def test_readme_first_dataflow_and_degree(W):
    with kp.Engine(workers=W) as eng:
        edges = eng.input("edges", ["src", "dst"])
        roots = eng.input("roots", ["node"])
        edges.insert([(1, 2), (2, 3), (3, 4)])
        roots.insert([1])
        edges.advance_to(1)
        roots.advance_to(1)
        with eng.dataflow("reach") as df:
            g = df.input("edges").arrange_by("src").export("edges_by_src")
            r = df.input("roots").iterate(
                lambda r: r.join(g, left_on="node", right_on="src")
                .map(lambda dst: {"node": dst})
                .concat(r).distinct())
            view = r.view("reachable")
        eng.wait(view, timeout=T)
        assert sorted(view.to_pandas()["node"]) == [1, 2, 3, 4]
        with eng.dataflow("degree") as df:
            deg = df.input("roots").join(df.use("edges_by_src"), left_on="node", right_on="src").count(by="node")
            dv = deg.view("degree")
        eng.wait(dv, timeout=T)
        assert bag(dv) == {(1, 1): 1}
        edges.remove([(2, 3)])
        edges.advance_to(2)
        roots.advance_to(2)
        eng.wait(view, timeout=T)
        assert sorted(view.to_pandas()["node"]) == [1, 2]
        eng.drop("degree")
        eng.drop("reach")
        assert eng.dataflows() == {}


# -- reductions over negative and netted multiplicities -----------------------------------------------------
def _reductions_reference(rows: dict):
    """rows: {(k, v, w): net multiplicity}. The README's rules for each reduction by k."""
    out = {}
    cnt = Counter()
    for (k, v, w), m in rows.items():
        cnt[k] += m
    out["count"] = {(k, n): 1 for k, n in cnt.items() if n}
    kv = Counter()
    for (k, v, w), m in rows.items():
        kv[(k, v)] += m
    kv = {r: m for r, m in kv.items() if m}
    sums = Counter()
    for (k, v), m in kv.items():
        sums[k] += v * m
    out["sum"] = {(k, sums[k]): 1 for k in {k for k, v in kv}}
    pos_kv = [(k, v) for (k, v), m in kv.items() if m > 0]
    mins, maxs = {}, {}
    for k, v in pos_kv:
        mins[k] = min(mins.get(k, v), v)
        maxs[k] = max(maxs.get(k, v), v)
    out["min"] = {(k, v): 1 for k, v in mins.items()}
    out["max"] = {(k, v): 1 for k, v in maxs.items()}
    pos = {r: m for r, m in rows.items() if m > 0}
    am, ax = {}, {}
    for (k, v, w) in sorted(pos):
        if k not in am or v < am[k][1]:
            am[k] = (k, v, w)
        if k not in ax or v > ax[k][1]:
            ax[k] = (k, v, w)
    out["argmin"] = {r: 1 for r in am.values()}
    out["argmax"] = {r: 1 for r in ax.values()}
    out["distinct"] = {r: 1 for r in pos}
    groups = defaultdict(list)
    for r, m in pos.items():
        groups[r[0]].append((r, m))
    tk = {}
    for k, lst in groups.items():
        lst.sort(key=lambda x: (-x[0][1], x[0]))  # largest v first, ties to the smaller row
        left = 2
        for r, m in lst:
            if left <= 0:
                break
            tk[r] = min(m, left)
            left -= tk[r]
    out["top2"] = tk
    return out


@pytest.mark.parametrize("W", WORKERS)
def test_reductions_with_negative_and_netted_multiplicities(W):
    """README 'What they do with multiplicities': rows removed more often than inserted, values held +1
    by one row and -3 by another, sums of 0 over live rows."""
    ups = [((1, 0, 1), 1), ((2, 5, 1), 1), ((2, 5, 2), -1), ((3, 4, 1), 1), ((3, 4, 2), -3), ((3, 1, 9), 1),
           ((4, 7, 1), 2), ((4, 7, 2), -1), ((4, 2, 3), 1), ((5, 3, 3), -1), ((6, -2, 0), 1), ((6, 2, 0), 1),
           ((7, 9, 1), 5), ((7, 9, 0), 1), ((7, 8, 0), 3)]
    with kp.Engine(workers=W) as eng:
        a = eng.input("a", ["k", "v", "w"])
        a.update([r for r, d in ups], [d for r, d in ups])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("a")
            views = {"count": c.count(by="k"), "sum": c.sum(by="k", col="v"), "min": c.min(by="k", col="v"),
                     "max": c.max(by="k", col="v"), "argmin": c.argmin(by="k", col="v"),
                     "argmax": c.argmax(by="k", col="v"), "distinct": c.distinct(),
                     "top2": c.top_k(by="k", order_by="v", k=2)}
            views = {n: x.view(n) for n, x in views.items()}
        ref = _reductions_reference(net(ups))
        for n, v in views.items():
            eng.wait(v, timeout=T)
            assert bag(v) == ref[n], n


def test_negative_view_len_and_to_pandas_refuse():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"])
        a.remove([(1,)])
        a.advance_to(1)
        v = install(eng, "neg", lambda df: df.input("a"))
        assert bag(v) == {(1,): -1}
        with pytest.raises(kp.UsageError, match="negative"):
            len(v)
        with pytest.raises(kp.UsageError, match="diffs=True"):
            v.to_pandas()


def test_threshold_sees_negative_counts_and_by_empty_has_no_columns():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"])
        a.update([(1, 1), (1, 2), (2, 2), (3, 3)], [3, -2, 1, -1])
        a.advance_to(1)
        seen = []

        def fn(n):
            seen.append(n.copy())
            return np.abs(n)
        with eng.dataflow("t") as df:
            c = df.input("a")
            t0 = c.threshold(by=[], fn=lambda n: n).view("t0")
            t1 = c.threshold(by=["k"], fn=fn).view("t1")
            t2 = c.threshold(lambda n: (n > 0).astype(np.int64)).view("t2")
        for v in (t0, t1, t2):
            eng.wait(v, timeout=T)
        assert bag(t0) == {(): 1}                      # 3 - 2 + 1 - 1
        frame = t0.to_pandas()
        assert frame.shape == (1, 0)
        assert bag(t1) == {(1,): 1, (2,): 1, (3,): 1}  # |1|, |1|, |-1|
        assert all((s != 0).all() for s in seen)
        assert -1 in np.concatenate(seen)
        assert bag(t2) == {(1, 1): 1, (2, 2): 1}


def test_zero_column_input_counts_rows():
    with kp.Engine(workers=3) as eng:
        z = eng.input("z", [])
        z.insert([(), (), ()])
        z.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("z")
            cnt = c.count().view("cnt")
            dis = c.distinct().view("dis")
            raw = c.view("raw", history=5)
        for v in (cnt, dis, raw):
            eng.wait(v, timeout=T)
        assert bag(cnt) == {(3,): 1}
        assert bag(dis) == {(): 1}
        assert raw.to_pandas().shape == (3, 0) and len(raw) == 3
        z.remove([()])
        z.advance_to(3)
        eng.wait(raw, timeout=T)
        assert bag(cnt) == {(2,): 1}
        assert raw.to_pandas(at=0).shape == (3, 0)
        assert raw.to_pandas(at=2).shape == (2, 0)


# -- dtypes: float, bool, str -------------------------------------------------------------------------------
@pytest.mark.parametrize("W", [1, 2])
def test_float_values_compare_by_value(W):
    """-0.0 is stored as 0.0, NaN after +inf, NaN equal to NaN as a value."""
    rows = [(1, -0.0), (1, 0.0), (1, float("nan")), (1, float("nan")), (2, float("inf")), (2, -float("inf")),
            (3, 1.5)]
    with kp.Engine(workers=W) as eng:
        a = eng.input("a", ["k", "f"], dtypes={"f": "float64"}, rows=rows)
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("a")
            cf = c.count(by="f").view("cf")
            mn = c.min(by="k", col="f").view("mn")
            mx = c.max(by="k", col="f").view("mx")
        for v in (cf, mn, mx):
            eng.wait(v, timeout=T)
        counts = {(("nan" if f != f else f), n) for (f, n) in bag(cf)}
        assert counts == {(0.0, 2), ("nan", 2), (float("inf"), 1), (-float("inf"), 1), (1.5, 1)}
        assert {k: v for k, v in bag(mn)} == {1: 0.0, 2: -float("inf"), 3: 1.5}
        mxd = {k: v for k, v in bag(mx)}
        assert np.isnan(mxd[1]) and mxd[2] == float("inf") and mxd[3] == 1.5
        assert np.signbit(mn.to_pandas().set_index("k")["f"].loc[1]) == False  # noqa: E712  (stored as 0.0)


def test_bool_column_reductions():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "b"], dtypes={"b": "bool"}, rows=[(1, True), (1, False), (1, True), (2, False)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("a")
            mn = c.min(by="k", col="b").view("mn")
            mx = c.max(by="k", col="b").view("mx")
            cb = c.count(by="b").view("cb")
        for v in (mn, mx, cb):
            eng.wait(v, timeout=T)
        assert bag(mn) == {(1, False): 1, (2, False): 1}
        assert bag(mx) == {(1, True): 1, (2, False): 1}
        assert bag(cb) == {(True, 2): 1, (False, 2): 1}
        assert mn.to_pandas()["b"].dtype == bool


STRS = ["a", "a\x00", "\x00", "", "\uffff", "\U00010000", "B", "b", "é", "e\u0301", "a\x00b"]


@pytest.mark.parametrize("W", [1, 3])
def test_strings_ordered_by_code_point_and_kept_distinct(W):
    """Strings compare lexicographically by code point; NULs, the empty string and astral characters stay
    themselves (a NumPy fixed-width detour would strip trailing NULs)."""
    rows = [(i % 2, s) for i, s in enumerate(STRS)]
    with kp.Engine(workers=W) as eng:
        a = eng.input("s", ["k", "s"], dtypes={"s": "str"}, rows=rows)
        a.insert(pd.DataFrame({"k": [5, 5], "s": ["a", "a\x00"]}))
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("s")
            dis = c.select("s").distinct().view("dis")
            mn = c.min(by="k", col="s").view("mn")
            mx = c.max(by="k", col="s").view("mx")
            srt = c.top_k(by=[], order_by="s", k=100, descending=False).view("srt")
        for v in (dis, mn, mx, srt):
            eng.wait(v, timeout=T)
        allrows = rows + [(5, "a"), (5, "a\x00")]
        assert sorted(s for (s,) in bag(dis)) == sorted(set(STRS))
        ref_min = {k: min(s for kk, s in allrows if kk == k) for k in (0, 1, 5)}
        ref_max = {k: max(s for kk, s in allrows if kk == k) for k in (0, 1, 5)}
        assert dict(bag(mn)) == {(k, s): 1 for k, s in ref_min.items()}
        assert dict(bag(mx)) == {(k, s): 1 for k, s in ref_max.items()}
        assert sum(bag(srt).values()) == len(allrows)


def test_str_reduce_gets_ids_in_string_order_and_refuses_foreign_ids():
    from numba import njit

    @njit
    def first(vals, cnts):
        return vals[:1].copy(), np.ones(1, np.int64)

    @njit
    def bad(vals, cnts):
        out = vals[:1].copy()
        out[0, 0] = 987654321
        return out, np.ones(1, np.int64)
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "s"], dtypes={"s": "str"})
        a.insert([(1, "zeta"), (1, "alpha"), (1, "mid"), (2, "b")])  # "zeta" interned first
        a.advance_to(1)
        v = install(eng, "first", lambda df: df.input("a").reduce(by="k", fn=first, columns=["s"]))
        assert bag(v) == {(1, "alpha"): 1, (2, "b"): 1}
        with eng.dataflow("bad") as df:
            w = df.input("a").reduce(by="k", fn=bad, columns=["s"]).view("bad")
        with pytest.raises(kp.DataflowError, match="id"):
            eng.wait(w, timeout=T)


def test_reduce_njit_sees_negative_multiplicities_sorted_and_bool_output():
    from numba import njit

    @njit
    def stats(vals, cnts):
        out = np.empty((1, 3), np.int64)
        s = 0
        for i in range(vals.shape[0]):
            s += vals[i, 0] * cnts[i]
        out[0, 0] = s
        out[0, 1] = vals.shape[0]
        out[0, 2] = vals[0, 0]  # the smallest value
        return out, np.ones(1, np.int64)

    @njit
    def nonzero(vals, cnts):
        out = np.empty((1, 1), np.int64)
        out[0, 0] = 7
        return out, np.ones(1, np.int64)
    with kp.Engine(workers=3) as eng:
        a = eng.input("a", ["k", "v"])
        a.update([(1, 5), (1, 7), (2, 3), (2, 3), (1, 9), (1, -4)], [2, 1, 1, -1, -1, 1])
        a.advance_to(1)
        with eng.dataflow("r") as df:
            c = df.input("a")
            r = c.reduce(by="k", fn=stats, columns=["v"], out={"s": "int64", "nd": "int64", "lo": "int64"}).view("r")
            b = c.reduce(by="k", fn=nonzero, columns=["v"], out={"nz": "bool"}).view("b")
        eng.wait(r, timeout=T)
        eng.wait(b, timeout=T)
        # group 2 nets to nothing: not called, no row
        assert bag(r) == {(1, 10 + 7 - 9 - 4, 4, -4): 1}
        assert bag(b) == {(1, True): 1}


# -- flat_map ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("repeat", [True, False, None])
def test_flat_map_counts_and_index(repeat):
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "n"], rows=[(1, 0), (2, 3), (3, 1), (3, 1)])
        a.advance_to(1)
        if repeat is False:
            fn = lambda k, n: ({"k": np.repeat(k, n)}, np.repeat(np.arange(len(k)), n))  # noqa: E731
        else:
            fn = lambda k, n: ({"k": np.repeat(k, n)}, n)  # noqa: E731
        v = install(eng, "fm", lambda df: df.input("a").flat_map(fn, repeat=repeat))
        assert bag(v) == {(2,): 3, (3,): 2}


def test_flat_map_ambiguous_first_call_asks_for_repeat():
    """Three input rows, three output rows, how = [2, 0, 1]: valid as counts and as an index, giving
    different rows: the README says it is an error asking for repeat=."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(10,), (20,), (30,)])
        a.advance_to(1)
        with eng.dataflow("fm") as df:
            v = df.input("a").flat_map(lambda k: ({"o": np.arange(len(k))}, np.array([2, 0, 1])[:len(k)])).view("fm")
        with pytest.raises(kp.DataflowError, match="repeat="):
            eng.wait(v, timeout=T)


def test_flat_map_all_ones_index_is_not_silently_counts():
    def fn(k, n):  # an index array: output row i comes from input row idx[i]
        idx = np.repeat(np.arange(len(k)), n)
        return {"k": k[idx]}, idx
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "n"])
        a.update([(5, 0), (6, 2)], [1, 3])   # one batch: idx = [1, 1]
        a.advance_to(1)
        with eng.dataflow("fm") as df:
            v = df.input("a").flat_map(fn).view("fm")
        try:
            eng.wait(v, timeout=T)
        except kp.DataflowError as e:   # the documented answer: asks for repeat=
            assert "repeat=" in str(e)
            return
        # or, had it been read as the index it is: row (6, n=2) of multiplicity 3 gives 6 twice -> 6
        assert bag(v) == {(6,): 6}


def test_flat_map_all_ones_index_with_repeat_false_is_right():
    def fn(k, n):
        idx = np.repeat(np.arange(len(k)), n)
        return {"k": k[idx]}, idx
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "n"])
        a.update([(5, 0), (6, 2)], [1, 3])
        a.advance_to(1)
        v = install(eng, "fm", lambda df: df.input("a").flat_map(fn, repeat=False))
        assert bag(v) == {(6,): 6}


# -- map / filter column rules --------------------------------------------------------------------------------
def test_map_writing_into_its_columns_does_not_leak():
    def bump(k, v):
        k += 100
        return {"k": k, "v": v}
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 10), (2, 20), (3, 30)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("a")
            m = c.map(bump).view("m")
            raw = c.view("raw")
            s = c.sum(col="k").view("s")
        for v in (m, raw, s):
            eng.wait(v, timeout=T)
        assert bag(m) == {(101, 10): 1, (102, 20): 1, (103, 30): 1}
        assert bag(raw) == {(1, 10): 1, (2, 20): 1, (3, 30): 1}
        assert bag(s) == {(6,): 1}
        a.insert([(4, 40)])
        a.advance_to(2)
        for v in (m, raw, s):
            eng.wait(v, timeout=T)
        assert bag(m)[(104, 40)] == 1 and bag(raw)[(4, 40)] == 1 and bag(s) == {(10,): 1}


def test_keyword_column_through_kwargs_and_refused_names():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["class", "x"], rows=[(1, 2)])
        a.advance_to(1)
        v = install(eng, "kw", lambda df: df.input("a").map(lambda **c: {"o": c["class"] + c["x"]}))
        assert bag(v) == {(3,): 1}
        with pytest.raises(kp.SchemaError, match="a b"):
            eng.input("bad", ["a b"])
        with pytest.raises(kp.SchemaError, match="a.b"):
            eng.input("bad2", ["a.b"])


def test_map_scalar_column_refused_with_hint():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        with pytest.raises(kp.SchemaError, match="np.full"):
            with eng.dataflow("m") as df:
                df.input("a").map(lambda k: {"o": 1}).view("m")
        assert "m" not in eng.dataflows()


def test_join_column_naming_and_suffix_chain():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v", "v_right"], rows=[(1, 10, 100)])
        b = eng.input("b", ["kk", "v", "w"], rows=[(1, 20, 30)])
        a.advance_to(1)
        b.advance_to(1)
        v = install(eng, "j", lambda df: df.input("a").join(df.input("b"), left_on="k", right_on="kk"))
        d = v.to_pandas()
        assert list(d.columns)[:3] == ["k", "v", "v_right"]
        assert set(d.columns) == {"k", "v", "v_right", "v_right_right", "w"}
        assert d.iloc[0].to_dict() == {"k": 1, "v": 10, "v_right": 100, "v_right_right": 20, "w": 30}


def test_view_with_diff_and_time_columns():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["time", "diff"], rows=[(7, 8)])
        a.advance_to(1)
        v = install(eng, "td", lambda df: df.input("a"))
        d = v.to_pandas(diffs=True)
        assert d.to_dict("records") == [{"time": 7, "diff": 8, "diff_": 1}]
        f = v.follow(timeout=T)
        first = next(f)
        assert (f.time_col, f.diff_col) == ("time_", "diff_")
        assert first.to_dict("records") == [{"time": 7, "diff": 8, "time_": 0, "diff_": 1}]
        f.close()


# -- semijoin / antijoin ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("W", [1, 2])
def test_semijoin_antijoin_positive_keys_only(W):
    A = [(1, 1), (1, 1), (2, 2), (3, 3), (4, 4)]
    B = {(1,): 3, (2,): -1, (3,): 2}
    with kp.Engine(workers=W) as eng:
        a = eng.input("a", ["k", "v"], rows=A)
        b = eng.input("b", ["k"])
        b.update(list(B), list(B.values()))
        a.advance_to(1)
        b.advance_to(1)
        with eng.dataflow("d") as df:
            x, y = df.input("a"), df.input("b")
            semi = x.semijoin(y, on="k").view("semi")
            anti = x.antijoin(y, on="k").view("anti")
        eng.wait(semi, timeout=T)
        eng.wait(anti, timeout=T)
        keys = {k for (k,), m in B.items() if m > 0}
        ca = Counter(A)
        assert bag(semi) == {r: m for r, m in ca.items() if r[0] in keys}
        assert bag(anti) == {r: m for r, m in ca.items() if r[0] not in keys}


# -- iterate, max_rounds, Variable ----------------------------------------------------------------------------
def test_iterate_max_rounds_applies_body_n_times():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"], rows=[(1,), (2,), (2,)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            c = df.input("a")
            vs = {n: c.iterate(lambda x: x.map(lambda k: {"k": k + 1}), max_rounds=n).view(f"r{n}")
                  for n in (0, 1, 3)}
            ident = c.iterate(lambda x: x).view("ident")
        for n, v in vs.items():
            eng.wait(v, timeout=T)
            assert bag(v) == {(1 + n,): 1, (2 + n,): 2}
        eng.wait(ident, timeout=T)
        assert bag(ident) == {(1,): 1, (2,): 2}
        for bad, err in ((True, kp.ArgumentTypeError), (-1, kp.UsageError), (2.0, kp.ArgumentTypeError)):
            with pytest.raises(err):
                with eng.dataflow("bad") as df:
                    df.input("a").iterate(lambda x: x, max_rounds=bad)


def _closure(edges):
    s = set(edges)
    while True:
        n = s | {(a, d) for a, b in s for c, d in s if b == c}
        if n == s:
            return s
        s = n


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_readme_variable_example_is_transitive_closure(seed):
    rng = random.Random(seed)
    edges = sorted({(rng.randrange(7), rng.randrange(7)) for _ in range(9)})
    with kp.Engine(workers=seed % 3 + 1) as eng:
        E = eng.input("edges", ["src", "dst"], rows=edges)
        E.advance_to(1)
        with eng.dataflow("loops") as df:
            loop = df.loop()
            a = kp.Variable(loop, df.input("edges"))
            b = kp.Variable(loop, df.input("edges"))
            a_next = a.set(a.concat(b).distinct())
            b.set(b.join(a, left_on="dst", right_on="src").select("src", "dst_right").rename(dst_right="dst")
                  .concat(b).distinct())
            both = a_next.leave().view("closure")
        eng.wait(both, timeout=T)
        assert bag(both) == {r: 1 for r in _closure(edges)}
        E.remove(edges[:2])
        E.advance_to(2)
        eng.wait(both, timeout=T)
        assert bag(both) == {r: 1 for r in _closure(edges[2:])}


# -- epochs, at=, history=, late installs ---------------------------------------------------------------------
@pytest.mark.parametrize("W", WORKERS)
def test_random_updates_epoch_jumps_at_reads_match_reference(W):
    """Epochs advanced by 1, 2 or 5, a dataflow installed after some of them, every epoch read back with
    at= against a from-scratch reference."""
    rng = random.Random(100 + W)
    with kp.Engine(workers=W) as eng:
        A = eng.input("A", ["k", "v"])
        hist = []
        epoch = 0
        views = None
        first = None
        for step in range(7):
            if step == 2:
                with eng.dataflow("q") as df:
                    c = df.input("A")
                    views = {"count": c.count(by="k").view("count", history=100),
                             "sum": c.sum(by="k", col="v").view("sum", history=100),
                             "max": c.max(by="k", col="v").view("max", history=100)}
                first = epoch
            for _ in range(rng.randint(0, 5)):
                r = (rng.randint(0, 3), rng.randint(-3, 3))
                d = rng.choice([1, 1, -1, 2])
                A.update([r], [d])
                hist.append((epoch, r, d))
            epoch += rng.choice([1, 2, 5])
            A.advance_to(epoch)
        for v in views.values():
            eng.wait(v, timeout=T)
        for e in range(first - 1, epoch):
            rows = net([(r, d) for t, r, d in hist if t <= e])
            cnt, sums, live, mx = Counter(), Counter(), set(), {}
            for (k, v), m in rows.items():
                cnt[k] += m
                sums[k] += v * m
                live.add(k)
                if m > 0:
                    mx[k] = max(mx.get(k, v), v)
            assert bag(views["count"], at=e) == {(k, n): 1 for k, n in cnt.items() if n}, e
            assert bag(views["sum"], at=e) == {(k, sums[k]): 1 for k in live}, e
            assert bag(views["max"], at=e) == {(k, v): 1 for k, v in mx.items()}, e
        with pytest.raises(kp.CompactedError):   # started from the inputs as of epoch first - 1
            views["count"].to_pandas(at=first - 2)
        with pytest.raises(kp.UsageError, match="not final"):
            views["count"].to_pandas(at=epoch)


def test_history_keeps_that_many_epochs():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("a").count().view("c", history=3)
        for e in range(1, 6):
            a.insert([(e,)] * e)
            a.advance_to(e * 3)
        eng.wait(v, timeout=T)
        # frontier 15: epochs 12, 13, 14 readable
        assert bag(v, at=12) == {(15,): 1}
        assert bag(v, at=14) == {(15,): 1}
        with pytest.raises(kp.CompactedError, match="history"):
            v.to_pandas(at=11)
        assert v.to_pandas().attrs["epoch"] == 15


def test_late_install_refuses_earlier_epochs():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"])
        for e in range(1, 5):
            a.insert([(e,)])
            a.advance_to(e)
        with eng.dataflow("late") as df:
            v = df.input("a").view("v", history=50)
        eng.wait(v, timeout=T)
        assert sorted(k for (k,) in bag(v, at=3)) == [1, 2, 3, 4]
        with pytest.raises(kp.CompactedError, match="started"):
            v.to_pandas(at=2)
        a.insert([(9,)])
        a.advance_to(7)
        eng.wait(v, timeout=T)
        assert (9,) in bag(v, at=4) and (9,) in bag(v, at=6)
        assert (9,) not in bag(v, at=3)


@pytest.mark.parametrize("read", ["to_pandas", "to_arrow", "columns"])
def test_at_given_as_str_is_argument_type_error(read):
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"], rows=[(1,)])
        a.advance_to(1)
        v = install(eng, "v", lambda df: df.input("a"))
        with pytest.raises(kp.ArgumentTypeError, match="at="):
            getattr(v, read)(at="0")


def test_epoch_arguments_refused_with_types():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"])
        with pytest.raises(kp.ArgumentTypeError):
            a.advance_to("3")
        with pytest.raises(kp.ArgumentTypeError):
            a.advance_to(True)
        with pytest.raises(kp.ArgumentTypeError):
            a.advance_to(2.0)
        a.advance_to(np.int64(2))
        with pytest.raises(kp.UsageError, match="only advance"):
            a.advance_to(1)
        a.advance_to(2)  # the same epoch again: nothing to do
        with pytest.raises(kp.UsageError, match="int64"):
            a.advance_to(2 ** 63)
        assert a.epoch == 2


# -- follow / subscribe -----------------------------------------------------------------------------------------
def test_follow_jumps_and_close():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"])
        for e in range(1, 5):
            a.insert([(e,)])
            a.advance_to(e)
        v = install(eng, "v", lambda df: df.input("a"))
        f = v.follow(timeout=T)
        first = next(f)
        assert sorted(first["k"]) == [1, 2, 3, 4] and set(first["time"]) == {3}
        a.remove([(1,)])
        a.insert([(9,)])
        a.advance_to(8)
        a.insert([(10,)])
        a.advance_to(20)
        a.insert([(11,)])
        a.close()
        rest = pd.concat(list(f))
        got = sorted(zip(rest["k"], rest["time"], rest["diff"]))
        assert got == [(1, 4, -1), (9, 4, 1), (10, 8, 1), (11, 20, 1)]
        assert v.to_pandas().attrs["epoch"] is None
        # a follower arriving after every input closed: contents dated at the last epoch anything changed
        f2 = v.follow(timeout=T)
        frames = list(f2)
        assert len(frames) == 1 and set(frames[0]["time"]) == {20}
        assert sorted(frames[0]["k"]) == [2, 3, 4, 9, 10, 11]


def test_readme_threads_example():
    import threading
    with kp.Engine(workers=2) as eng:
        clicks = eng.input("clicks", ["user", "page"])
        with eng.dataflow("per_user") as df:
            per_user = df.input("clicks").count(by="user").view("per_user")

        def read(feed, seen):
            for changes in feed:
                seen.append(changes)
                if feed.epoch == 2:
                    break
        seen = []
        reader = threading.Thread(target=read, args=(per_user.follow(timeout=10), seen))
        reader.start()
        for epoch in range(1, 3):
            clicks.insert([(epoch, 10), (epoch, 11)])
            clicks.advance_to(epoch)
        join_all([reader])
        allc = pd.concat(seen)
        assert sorted(zip(allc["user"], allc["count"], allc["time"], allc["diff"])) == [(1, 2, 0, 1), (2, 2, 1, 1)]
        got = []
        sub = per_user.subscribe(lambda changes: got.append(changes))
        clicks.insert([(1, 12)])
        clicks.advance_to(3)
        eng.wait(per_user, timeout=T)
        import time
        deadline = time.monotonic() + T
        while time.monotonic() < deadline and not any((g["time"] == 2).any() for g in got):
            time.sleep(0.02)
        sub.close()
        changes = pd.concat(got)
        last = changes[changes["time"] == 2]
        assert sorted(zip(last["user"], last["count"], last["diff"])) == [(1, 2, -1), (1, 3, 1)]


# -- replace=True, drop, exports, trace handles -----------------------------------------------------------------
def test_replace_keeps_old_export_for_readers():
    with kp.Engine(workers=2) as eng:
        a = eng.input("edges", ["src", "dst"], key="src", rows=[(1, 2), (2, 3), (1, 3)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            g = df.input("edges").arrange_by("src").export("e_by_src")
            old = g.count(by="src").view("deg")
        q = install(eng, "q", lambda df: df.use("e_by_src").select("dst"))
        eng.wait(old, timeout=T)
        with eng.dataflow("p", replace=True) as df:
            g = df.input("edges").filter(lambda src: src > 1).arrange_by("src").export("e_by_src")
            new = g.count(by="src").view("deg")
        eng.wait(new, timeout=T)
        assert bag(new) == {(2, 1): 1}
        with pytest.raises(kp.UsageError, match="replaced"):
            old.to_pandas()
        assert sorted(eng.catalog()) == ["e_by_src", "e_by_src~1"]
        a.insert([(5, 6)])
        a.advance_to(2)
        eng.wait(q, timeout=T)
        eng.wait(new, timeout=T)
        assert bag(q) == {(2,): 1, (3,): 2, (6,): 1}    # the old (unfiltered) arrangement
        assert bag(new) == {(2, 1): 1, (5, 1): 1}
        r = install(eng, "r", lambda df: df.use("e_by_src"))
        assert bag(r) == {(2, 3): 1, (5, 6): 1}          # the new one
        with pytest.raises(kp.UsageError, match="installed already"):
            eng.dataflow("p")


def test_drop_keeps_export_maintained_for_trace_handle():
    with kp.Engine(workers=3) as eng:
        a = eng.input("e", ["src", "dst"], key="src", rows=[(1, 2), (1, 3), (2, 3), (5, 1)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("e").arrange_by("src").export("by_src").count(by="src").view("c")
        eng.wait(v, timeout=T)
        h = eng.trace("by_src")
        try:
            a.remove([(1, 2)])
            a.insert([(7, 7)])
            a.advance_to(3)
            eng.wait(v, timeout=T)
            eng.drop("d")
            with pytest.raises(kp.UsageError, match="dropped"):
                v.to_pandas()
            a.insert([(8, 8)])
            a.advance_to(4)
            eng.wait(timeout=T)
            import time
            deadline = time.monotonic() + T
            while h.upper != kp.Antichain([(4,)]) and time.monotonic() < deadline:
                time.sleep(0.02)
            keys, vals, mult = h.accumulate(3)
            assert sorted(zip(keys[0].tolist(), vals[0].tolist(), mult.tolist())) == \
                [(1, 3, 1), (2, 3, 1), (5, 1, 1), (7, 7, 1), (8, 8, 1)]
            hist = []
            for s in range(eng.workers):
                hs = h.cursor(s).seek_keys(np.array([1, 99]))
                for p in range(hs.keys.shape[1]):
                    for i in range(hs.off[p], hs.off[p + 1]):
                        hist.append((int(hs.keys[0, p]), int(hs.vals[0, i]), int(hs.times[i][0]), int(hs.diffs[i])))
            net_hist = net([((k, v), d) for k, v, t, d in hist])
            assert net_hist == {(1, 3): 1}
        finally:
            h.close()
        with pytest.raises(kp.UnknownNameError):
            eng.drop("d")
        with pytest.raises(KeyError):
            eng.trace("nope")


def test_cancel_fails_readers_and_others_carry_on():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            pv = df.input("a").arrange_by("k").export("ak").count().view("pv")
        qv = install(eng, "q", lambda df: df.use("ak").count())
        rv = install(eng, "r", lambda df: df.input("a").count())
        eng.cancel("p")
        assert eng.dataflows()["p"] == "cancelled"
        with pytest.raises(kp.DataflowError):
            eng.wait(qv, timeout=T)
        with pytest.raises(kp.Cancelled):
            pv.to_pandas()
        a.insert([(3,)])
        a.advance_to(2)
        eng.wait(rv, timeout=T)
        assert bag(rv) == {(3,): 1}
        with pytest.raises(kp.UsageError, match="read by"):
            eng.drop_input("a")
        eng.drop("r")
        eng.drop("q")
        eng.drop("p")
        eng.drop_input("a")
        with pytest.raises(kp.UsageError, match="dropped"):
            a.insert([(1,)])
        assert list(eng.input("a", ["x"]).schema.names) == ["x"]   # the name is free again


def test_closed_engine_refuses_but_reports():
    eng = kp.Engine(workers=1)
    a = eng.input("a", ["k"], rows=[(1,)])
    a.advance_to(1)
    v = install(eng, "v", lambda df: df.input("a"))
    eng.close()
    for call in (lambda: eng.input("z", ["x"]), lambda: a.insert([(2,)]), lambda: a.advance_to(5),
                 lambda: eng.dataflow("x"), lambda: eng.drop("v"), lambda: eng.wait(v), lambda: eng.trace("v"),
                 lambda: v.to_pandas(), lambda: v.follow(), lambda: len(v)):
        with pytest.raises(kp.EngineError, match="the engine is closed"):
            call()
    assert isinstance(eng.stats(), dict) and isinstance(eng.dataflows(), dict) and isinstance(eng.catalog(), dict)
    eng.close()


# -- input parsing ------------------------------------------------------------------------------------------------
def test_input_row_forms_agree():
    import pyarrow as pa
    forms = [
        [(1, "x"), (2, "y")],
        [[1, "x"], [2, "y"]],
        {"k": np.array([1, 2]), "s": np.array(["x", "y"], dtype=object)},
        pd.DataFrame({"s": ["x", "y"], "k": [1, 2]}),                     # columns by name
        pd.DataFrame({"k": pd.array([1, 2], dtype="Int64"), "s": pd.Categorical(["x", "y"])}, index=[7, 3]),
        pa.table({"k": pa.array([1, 2], type=pa.int32()), "s": pa.array(["x", "y"], type=pa.large_string())}),
        {"k": np.array([1.0, 2.0]), "s": ["x", "y"]},
        ((k, s) for k, s in [(1, "x"), (2, "y")]),
    ]
    with kp.Engine(workers=2) as eng:
        sessions = []
        for i, rows in enumerate(forms):
            s = eng.input(f"i{i}", ["k", "s"], dtypes={"s": "str"})
            s.insert(rows)
            s.advance_to(1)
            sessions.append(s)
        with eng.dataflow("all") as df:
            views = [df.input(s.name).view(s.name) for s in sessions]
        for v in views:
            eng.wait(v, timeout=T)
            assert bag(v) == {(1, "x"): 1, (2, "y"): 1}, v.name


@pytest.mark.parametrize("rows,match", [
    ([(1, None)], "'s'"),
    ([(2 ** 63, "a")], "int64"),
    ([(1.5, "a")], "not an integer"),
    ([(1, "\ud800")], "surrogate"),
    ([(1, 2)], "'s' is str"),
    ([(1,)], "expected 2 values"),
    ({"k": [1, 2], "s": ["x"]}, "different lengths"),
    ({"k": [1], "s": ["x"], "z": [0]}, "unexpected columns"),
    ({"k": 1, "s": "x"}, "single value"),
    (None, "rows must be"),
    ({"k": np.array([2 ** 63], np.uint64), "s": ["x"]}, "outside int64"),
])
def test_bad_rows_refused_naming_what_and_change_nothing(rows, match):
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "s"], dtypes={"s": "str"}, rows=[(0, "ok")])
        with pytest.raises(kp.SchemaError, match=match):
            a.insert(rows)
        a.advance_to(1)
        v = install(eng, "v", lambda df: df.input("a"))
        assert bag(v) == {(0, "ok"): 1}


def test_diffs_bounds():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k"])
        with pytest.raises(kp.SchemaError, match="2\\*\\*62"):
            a.update([(1,)], [2 ** 62])
        with pytest.raises(kp.SchemaError, match="integers"):
            a.update([(1,)], [1.5])
        a.update([(1,), (2,)], 3)
        a.update([(1,)], [-(2 ** 62 - 1)])
        a.advance_to(1)
        v = install(eng, "v", lambda df: df.input("a"))
        assert bag(v) == {(1,): 3 - (2 ** 62 - 1), (2,): 3}


def test_input_multiplicity_overflow_in_one_epoch_is_not_a_wedged_input():
    with kp.Engine(workers=2) as eng:
        b = eng.input("b", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("b").view("v")
        refused = False
        try:
            b.update([(1,)], [2 ** 61])
            b.update([(1,)], [2 ** 61])
            b.update([(2,)], [1])
            b.advance_to(1)
        except (kp.SchemaError, kp.UsageError, OverflowError):
            refused = True
        if refused:
            return
        with pytest.raises(kp.DataflowError) as info:
            eng.wait(v, timeout=10)
        assert isinstance(info.value.__cause__, OverflowError) or "OverflowError" in str(info.value)
        assert eng.dataflows()["d"] == "failed"


def test_join_product_overflow_fails_dataflow():
    with kp.Engine(workers=2) as eng:
        c = eng.input("c", ["k"])
        c.update([(1,)], [2 ** 31])
        c.advance_to(1)
        with eng.dataflow("j") as df:
            v = df.input("c").join(df.input("c"), on="k").view("j")
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait(v, timeout=T)
        assert eng.dataflows()["j"] == "failed"


def test_int_sum_exact_in_range_and_overflow_fails():
    big = 2 ** 62 - 1
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, big), (1, big), (2, 2 ** 62), (2, -(2 ** 62))])
        a.advance_to(1)
        v = install(eng, "s", lambda df: df.input("a").sum(by="k", col="v"))
        assert bag(v) == {(1, 2 * big): 1, (2, 0): 1}
        with eng.dataflow("o") as df:
            c = df.input("a")
            o = c.concat(c.map(lambda k, v: {"k": k, "v": v})).sum(by="k", col="v").view("o")
        with pytest.raises(kp.DataflowError, match="overflow"):
            eng.wait(o, timeout=T)


# -- kpgnb.graphs against networkx ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["full", "jod"])
@pytest.mark.parametrize("seed", [0, 5])
def test_graphs_match_networkx_under_changes(seed, mode):
    nx = pytest.importorskip("networkx")
    rng = random.Random(seed)
    n = 8
    edges = {(rng.randrange(n), rng.randrange(n), rng.randint(0, 5)) for _ in range(12)}
    roots = {rng.randrange(n) for _ in range(2)}
    with kp.Engine(workers=1 + seed % 3) as eng:
        E = eng.input("e", ["src", "dst", "w"], rows=list(edges))
        R = eng.input("r", ["node"], rows=[(r,) for r in roots])
        E.advance_to(1)
        R.advance_to(1)
        with eng.dataflow("g") as df:
            e = df.input("e")
            e2 = e.select("src", "dst")
            r = df.input("r")
            vs = dict(bfs=graphs.bfs(e2, r, memory=mode).view("bfs"),
                      wcc=graphs.wcc(e2, memory=mode).view("wcc"),
                      sssp=graphs.sssp(e, r.rename(node="source"), memory=mode).view("sssp"),
                      khop=graphs.khop(e2, r.rename(node="source"), 2, memory=mode).view("khop"))
        for step in range(2):
            for v in vs.values():
                eng.wait(v, timeout=T)
            G = nx.MultiDiGraph()
            G.add_weighted_edges_from(edges)
            G.add_nodes_from(roots)
            bref = {}
            for r0 in roots:
                for node, d in nx.single_source_shortest_path_length(G, r0).items():
                    bref[node] = min(bref.get(node, d), d)
            assert bag(vs["bfs"]) == {(k, d): 1 for k, d in bref.items()}
            und = nx.Graph()
            und.add_edges_from((a, b) for a, b, w in edges)
            assert bag(vs["wcc"]) == {(x, min(c)): 1 for c in nx.connected_components(und) for x in c}
            sref = {(r0, node, d) for r0 in roots for node, d in nx.single_source_dijkstra_path_length(G, r0).items()}
            assert set(bag(vs["sssp"])) == sref
            kref = {(r0, node, d) for r0 in roots
                    for node, d in nx.single_source_shortest_path_length(G, r0, cutoff=2).items()}
            assert set(bag(vs["khop"])) == kref
            rm = rng.sample(sorted(edges), 3)
            edges -= set(rm)
            add = {(rng.randrange(n), rng.randrange(n), rng.randint(0, 5)) for _ in range(3)} - edges
            edges |= add
            E.remove(rm)
            E.insert(sorted(add))
            E.advance_to(step + 2)
            R.advance_to(step + 2)


def test_graphs_str_node_ids_and_scc():
    nx = pytest.importorskip("networkx")
    rng = random.Random(2)
    names = ["n%d" % i for i in range(6)] + ["", "Z", "é"]
    edges = sorted({(rng.choice(names), rng.choice(names)) for _ in range(10)})
    root = edges[0][0]
    with kp.Engine(workers=2) as eng:
        E = eng.input("e", ["src", "dst"], dtypes=["str", "str"], rows=edges)
        R = eng.input("r", ["node"], dtypes=["str"], rows=[(root,)])
        E.advance_to(1)
        R.advance_to(1)
        with eng.dataflow("g") as df:
            e, r = df.input("e"), df.input("r")
            w = graphs.wcc(e).view("wcc")
            b = graphs.bfs(e, r).view("bfs")
            s = graphs.scc(e).view("scc")
        for v in (w, b, s):
            eng.wait(v, timeout=T)
        und = nx.Graph(edges)
        assert bag(w) == {(x, min(c)): 1 for c in nx.connected_components(und) for x in c}
        G = nx.DiGraph(edges)
        assert bag(b) == {(k, d): 1 for k, d in nx.single_source_shortest_path_length(G, root).items()}
        comp = {x: i for i, c in enumerate(nx.strongly_connected_components(G)) for x in c}
        assert set(bag(s)) == {(a, c) for a, c in edges if comp[a] == comp[c]}


def test_pagerank_matches_formula():
    edges = [(0, 1), (0, 2), (1, 2), (2, 0), (3, 2), (3, 3), (0, 1)]

    def ref(it, alpha=0.85):
        nodes = {a for a, b in edges} | {b for a, b in edges}
        deg = Counter(a for a, b in edges)
        rank = {x: 1 - alpha for x in nodes}
        for _ in range(it):
            new = {x: 1 - alpha for x in nodes}
            for a, b in edges:
                new[b] += alpha * rank[a] / deg[a]
            rank = new
        return rank
    with kp.Engine(workers=2) as eng:
        E = eng.input("e", ["src", "dst"], rows=edges)
        E.advance_to(1)
        with eng.dataflow("p") as df:
            v = graphs.pagerank(df.input("e"), iterations=4).view("pr")
        eng.wait(v, timeout=T)
        got = {k: x for (k, x) in bag(v)}
        r = ref(4)
        assert set(got) == set(r)
        assert all(abs(got[k] - r[k]) < 1e-9 for k in r)


@pytest.mark.parametrize("W", [1, 2])
def test_view_multiplicity_overflow_across_epochs_fails_the_dataflow(W):
    with kp.Engine(workers=W) as eng:
        b = eng.input("b", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("b").view("v")
        b.update([(1,)], [2 ** 61])
        b.advance_to(1)
        eng.wait(v, timeout=T)
        b.update([(1,)], [2 ** 61])
        b.advance_to(2)
        with pytest.raises(kp.DataflowError) as info:
            eng.wait(v, timeout=10)
            v.to_pandas(diffs=True)
        assert "2**62" in str(info.value)
        assert eng.dataflows()["d"] == "failed"


def test_count_over_overflowing_multiplicity_fails_dataflow():
    """The documented behaviour where it holds: the projection to k sums 2**61 + 2**61."""
    with kp.Engine(workers=2) as eng:
        b = eng.input("b", ["k", "v"])
        b.update([(1, 1), (1, 2)], [2 ** 61, 2 ** 61])
        b.advance_to(1)
        with eng.dataflow("c") as df:
            v = df.input("b").count(by="k").view("c")
        with pytest.raises(kp.DataflowError, match="2\\*\\*62") as info:
            eng.wait(v, timeout=T)
        assert isinstance(info.value.__cause__, (OverflowError, kp.DataflowError))
        assert eng.dataflows()["c"] == "failed"
        s = install(eng, "s", lambda df: df.input("b").sum(by="k", col="v"))
        assert bag(s) == {(1, 3 * 2 ** 61): 1}   # a total in range is exact


@pytest.mark.parametrize("red", ["sum", "min", "max", "argmin"])
def test_reduction_with_by_keyword_and_no_col_is_refused(red):
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 10), (2, 20), (2, 5)])
        a.advance_to(1)
        with pytest.raises(kp.SchemaError, match="col="):
            with eng.dataflow("r") as df:
                getattr(df.input("a"), red)(by="k").view("r")


def test_reduction_positional_shorthand_reduces_whole_collection():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 10), (2, 20), (2, 5)])
        a.advance_to(1)
        with eng.dataflow("r") as df:
            c = df.input("a")
            s = c.sum("v").view("s")
            m = c.min("v").view("m")
        eng.wait(s, timeout=T)
        eng.wait(m, timeout=T)
        assert bag(s) == {(35,): 1} and bag(m) == {(5,): 1}
        with pytest.raises(kp.SchemaError, match="col="):
            with eng.dataflow("bad") as df:
                df.input("a").sum(by=["k"]).view("bad")


def test_ife_stats_entries_have_documented_fields():
    with kp.Engine(workers=2) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 4), (0, 2, 1), (2, 1, 2), (1, 3, 5)])
        sources = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("spsp") as df:
            e, s = df.input("edges"), df.input("sources")
            views = [graphs.sssp(e, s, memory="full").view("full"), graphs.sssp(e, s, memory="jod").view("jod"),
                     graphs.sssp(e, s, memory="drop", drop=kp.Drop(p=0.5, tracker="exact")).view("exact")]
        edges.advance_to(1)
        sources.advance_to(1)
        for v in views:
            eng.wait(v, timeout=T)
        for r in eng.stats()["ife"]:
            for field in ("dataflow", "operator", "mode", "state_differences", "join_differences", "dropped",
                          "dropped_total", "bloom", "recomputed", "bytes"):
                assert field in r, (r["mode"], field)


def test_memory_modes_agree_and_stats_fields():
    with kp.Engine(workers=2) as eng:
        edges = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 4), (0, 2, 1), (2, 1, 2), (1, 3, 5)])
        sources = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("spsp") as df:
            e, s = df.input("edges"), df.input("sources")
            views = {"full": graphs.sssp(e, s).view("full"),
                     "jod": graphs.sssp(e, s, memory="jod").view("jod"),
                     "bloom": graphs.sssp(e, s, memory="drop", drop=kp.Drop(p=0.5, policy="degree",
                                                                            tracker="bloom")).view("bloom"),
                     "exact": graphs.sssp(e, s, memory="drop", drop=kp.Drop(p=1.0, policy="random",
                                                                            tracker="exact")).view("exact")}
        edges.advance_to(1)
        sources.advance_to(1)
        for v in views.values():
            eng.wait(v, timeout=T)
        for v in views.values():
            assert bag(v) == {(0, 0, 0): 1, (0, 1, 3): 1, (0, 2, 1): 1, (0, 3, 8): 1}
        st = {r["mode"] + ("/b" if r["bloom"] is not None else ""): r for r in eng.stats()["ife"]}
        assert st["drop/b"]["bloom"]["bits"] >= 65536
        for r in eng.stats()["ife"]:
            if r["mode"] != "full":
                assert {"rounds", "evaluated", "join_rows"} <= set(r)
        edges.remove([(0, 2, 1)])
        edges.insert([(3, 0, 1)])
        edges.advance_to(2)
        sources.advance_to(2)
        for v in views.values():
            eng.wait(v, timeout=T)
            assert bag(v) == {(0, 0, 0): 1, (0, 1, 4): 1, (0, 3, 9): 1}
        w = eng.input("wn", ["src", "dst", "w"], rows=[(0, 1, -1)])
        w.advance_to(1)
        with eng.dataflow("negw") as df:
            nv = graphs.sssp(df.input("wn"), df.input("sources"), memory="jod").view("negw")
        with pytest.raises(kp.DataflowError, match="non-negative"):
            eng.wait(nv, timeout=T)
        with pytest.raises(kp.SchemaError, match="probability"):
            kp.Drop(p=1.5)


def test_reduce_float_results_for_int_column_are_not_truncated():
    from numba import njit

    @njit
    def halves(vals, cnts):
        return vals.astype(np.float64) * 0.5, np.ones(len(cnts), np.int64)
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 5), (1, 7), (2, 3)])
        a.advance_to(1)
        try:
            with eng.dataflow("r") as df:
                v = df.input("a").reduce(by="k", fn=halves, columns=["v"]).view("r")
        except kp.SchemaError as e:  # refused where the dataflow is defined: nothing installed
            assert "float64" in str(e) and "int64" in str(e) and "out=" in str(e)
            assert "r" not in eng.dataflows()
            return
        try:
            eng.wait(v, timeout=T)
        except kp.DataflowError as e:
            assert "float64" in str(e) and "int64" in str(e)
            return
        assert bag(v) == {(1, 2.5): 1, (1, 3.5): 1, (2, 1.5): 1}


def test_reduce_float_results_with_out_declared():
    from numba import njit

    @njit
    def halves(vals, cnts):
        return vals.astype(np.float64) * 0.5, np.ones(len(cnts), np.int64)
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 5), (1, 7), (2, 3)])
        a.advance_to(1)
        v = install(eng, "r", lambda df: df.input("a").reduce(by="k", fn=halves, columns=["v"], out={"h": "float64"}))
        assert bag(v) == {(1, 2.5): 1, (1, 3.5): 1, (2, 1.5): 1}


def test_threshold_output_multiplicity_overflow_fails_dataflow():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"], rows=[(1,), (2,)])
        a.advance_to(1)
        with eng.dataflow("t") as df:
            t = df.input("a").threshold(lambda n: np.full(len(n), -2 ** 63))
            v = t.concat(t).consolidate().view("t")
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait(v, timeout=T)
            v.to_pandas(diffs=True)


def test_threshold_multiplicities_in_range_are_kept():
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k"], rows=[(1,), (1,), (2,)])
        a.advance_to(1)
        v = install(eng, "t", lambda df: df.input("a").threshold(lambda n: n * 1000 - 1))
        assert bag(v) == {(1,): 1999, (2,): 999}


# -- Datalog -----------------------------------------------------------------------------------------------------
README_PROGRAM = """
.decl edge(src: int, dst: int)          // optional: column names and types (int, float, str)
tc(x, y) :- edge(x, y).
tc(x, y) :- tc(x, z), edge(z, y).
node(x) :- edge(x, _).
node(y) :- edge(_, y).
reach(y) :- root(y).
reach(y) :- reach(x), edge(x, y).
unreached(x) :- node(x), !reach(x).     # stratified negation (also `not reach(x)`)
sp(y, min<d>) :- root(y), d = 0.        // recursive min: shortest distances
sp(y, min<d>) :- sp(x, d1), edge(x, y), d = d1 + 1.
size(l, count<x>) :- sp(x, l).          // count, sum, avg, countd, min, max outside recursion
"""


def test_readme_datalog_program_goal_and_retraction():
    with kp.Engine(workers=2) as eng:
        edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3), (3, 1), (4, 5)])
        root = eng.input("root", ["node"], rows=[(1,)])
        edges.advance_to(1)
        root.advance_to(1)
        prog = eng.datalog(README_PROGRAM, inputs={"edge": "edges"}, name="graphq")
        want = {"tc": {(a, b) for a in (1, 2, 3) for b in (1, 2, 3)} | {(4, 5)},
                "node": {(1,), (2,), (3,), (4,), (5,)}, "reach": {(1,), (2,), (3,)},
                "unreached": {(4,), (5,)}, "sp": {(1, 0), (2, 1), (3, 2)}, "size": {(0, 1), (1, 1), (2, 1)}}
        for pred, rows in want.items():
            eng.wait(prog[pred], timeout=T)
            assert bag(prog[pred]) == {r: 1 for r in rows}, pred
        g = prog.goal("tc(?, _)")
        g.ask(4)
        eng.wait(g.view, timeout=T)
        assert bag(g.view) == {(4, 5): 1}
        g.ask(1)
        g.retract(4)
        g.retract(99)   # never asked: nothing changes
        eng.wait(g.view, timeout=T)
        assert bag(g.view) == {(1, 1): 1, (1, 2): 1, (1, 3): 1}
        edges.remove([(3, 1)])
        edges.advance_to(5)
        root.advance_to(5)
        eng.wait(prog["sp"], timeout=T)
        eng.wait(prog["unreached"], timeout=T)
        eng.wait(g.view, timeout=T)
        assert bag(prog["unreached"]) == {(4,): 1, (5,): 1}
        assert bag(g.view) == {(1, 2): 1, (1, 3): 1}
        eng.drop("graphq")
        with pytest.raises(kp.UsageError, match="dropped"):
            prog.goal("tc(?, _)")


def test_datalog_aggregates_over_distinct_bindings():
    with kp.Engine(workers=2) as eng:
        e = eng.input("edges", ["src", "dst"], rows=[(1, 2), (3, 2), (4, 2), (4, 5)])
        e.update([(1, 2)], [2])       # relations are sets: (1, 2) counts once
        e.advance_to(1)
        prog = eng.datalog("""
        sm(sum<y>) :- edges(_, y).
        sm2(sum<y>) :- edges(x, y).
        cnt(count<y>) :- edges(x, y).
        cd(countd<y>) :- edges(x, y).
        av(avg<y>) :- edges(x, y).
        mx(x, max<y>) :- edges(x, y).
        dv(x, z) :- edges(x, y), z = 7 / (y - 2).
        md(x, z) :- edges(x, y), z = (0 - y) % 3.
        """, name="agg")
        want = {"sm": {(7,)}, "sm2": {(11,)}, "cnt": {(4,)}, "cd": {(2,)}, "av": {(2.75,)},
                "mx": {(1, 2), (3, 2), (4, 5)}, "dv": {(4, 7 // 3)}, "md": {(1, -2 % 3), (3, -2 % 3), (4, -2 % 3), (4, -5 % 3)}}
        for pred, rows in want.items():
            eng.wait(prog[pred], timeout=T)
            assert bag(prog[pred]) == {r: 1 for r in rows}, pred


@pytest.mark.parametrize("text,line,column", [
    ("p(x, y) :- edges(x, _).", 1, 6),
    ("p(x) :- edges(x).", 1, 9),
    ("p(x) :- nope(x).", 1, 9),
    ("ok(x) :- edges(x, _).\np(x) :- edges(x, _), !p(x).", 2, 22),
    ("p(x) :- edges(x, _)", 1, 20),
])
def test_datalog_errors_carry_line_and_column_and_install_nothing(text, line, column):
    with kp.Engine(workers=1) as eng:
        e = eng.input("edges", ["src", "dst"], rows=[(1, 2)])
        e.advance_to(1)
        with pytest.raises(kp.DatalogError) as info:
            eng.datalog(text, name="bad")
        assert (info.value.line, info.value.column) == (line, column)
        assert eng.dataflows() == {}


def test_datalog_string_constants_with_trailing_nul():
    rows = [("\x00", 1), ("a\x00", 2), ("a", 3), ("", 4)]
    with kp.Engine(workers=1) as eng:
        names = eng.input("names", ["s", "n"], dtypes={"s": "str"}, rows=rows)
        e = eng.input("e", ["a"], rows=[(1,)])
        names.advance_to(1)
        e.advance_to(1)
        p = eng.datalog(r'''
        c1(n) :- names("\0", n).
        c2(n) :- names("a\0", n).
        c3(n) :- names(s, n), s = "a\0".
        c4(n) :- names(s, n), s != "a\0".
        k(s) :- e(_), s = "a\0".
        ''', name="z")
        want = {"c1": {(1,)}, "c2": {(2,)}, "c3": {(2,)}, "c4": {(1,), (3,), (4,)}, "k": {("a\x00",)}}
        got = {}
        for pred in want:
            eng.wait(p[pred], timeout=T)
            got[pred] = set(bag(p[pred]))
        assert got == want


def test_datalog_string_constants_and_comments():
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["a"], rows=[(1,)])
        e.advance_to(1)
        p = eng.datalog(r'''
        a(s) :- e(_), s = "x // y".     // a comment after a string holding //
        b(s) :- e(_), s = '# z'.        # and one after a string holding #
        c(s) :- e(_), s = "\q\\\"".
        d(s) :- e(_), s = "\x41\u00e9\n\t".
        f("\0"). /* a fact
        over two lines */
        ''', name="strs")
        want = {"a": "x // y", "b": "# z", "c": 'q\\"', "d": "A\u00e9\n\t", "f": "\x00"}
        for pred, s in want.items():
            eng.wait(p[pred], timeout=T)
            assert set(bag(p[pred])) == {(s,)}, pred


def test_datalog_lone_surrogate_constant_refused_at_install():
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["a"], rows=[(1,)])
        e.advance_to(1)
        with pytest.raises(kp.KpgnbError):
            eng.datalog(r'p(s) :- e(_), s = "\ud800".', name="b")
        assert "b" not in eng.dataflows()


@pytest.mark.parametrize("columns", [5, None])
def test_input_columns_of_wrong_type_refused_clearly(columns):
    with kp.Engine(workers=1) as eng:
        with pytest.raises(kp.KpgnbError, match="column"):
            eng.input("q", columns)
