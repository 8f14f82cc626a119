"""Value order in reductions (issue 9, "Wrong answers"): min/max/argmin/argmax/top_k and a user reduce
order float64 numerically (negative values included), str lexicographically and bool as 0 < 1, and break
ties between rows by the other columns' values, whatever the history of the data (the order in which
strings were first seen, epochs, worker count). Randomized against a reference that sorts Python values.
"""
from collections import Counter

import numpy as np
import pytest
from numba import njit

import kpgnb as kp
from kpgnb.engine.kernels import reduce as rk

# -- the order-key transform ----------------------------------------------------------------------


def _bits(x):
    return np.array(x, dtype=np.float64).view(np.int64)


def _keys(floats):
    bits = _bits(floats).reshape(1, -1)
    return rk.order_keys(bits, np.array([rk.MODE_FLOAT], np.int64), np.zeros(0, np.int64))[0]


def test_float_order_keys_on_edge_cases():
    tiny = np.finfo(np.float64).tiny
    sub = 5e-324
    big = np.finfo(np.float64).max
    vals = [-np.inf, -big, -1e300, -2.0, -1.5, -1.0, -0.25, -tiny, -sub, 0.0, sub, tiny, 0.25, 1.0, 1.5,
            2.0, 1e300, big, np.inf]
    keys = _keys(vals)
    assert (np.diff(keys) > 0).all(), "keys must strictly increase with the values"
    # -0.0 (even uncanonicalized) has the key of +0.0
    assert _keys([-0.0])[0] == _keys([0.0])[0] == 0
    # every NaN (either sign, any payload) orders after +inf, and all NaNs tie
    nans = np.array([np.nan, -np.nan], np.float64).view(np.int64).tolist() + [0x7FF0000000000001,
                                                                              -0x0000000000000001]
    nk = rk.order_keys(np.array([nans], np.int64), np.array([rk.MODE_FLOAT], np.int64), np.zeros(0, np.int64))[0]
    assert (nk == nk[0]).all() and nk[0] > _keys([np.inf])[0]


def test_float_order_keys_random_against_numpy_sort():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-300, 300, 5000),
                        rng.integers(-5, 5, 2000).astype(np.float64), [np.inf, -np.inf, 0.0]])
    keys = _keys(x)
    order = np.argsort(keys, kind="stable")
    assert (np.diff(x[order]) >= 0).all()
    # equal keys exactly for equal values
    ux, inv = np.unique(x, return_inverse=True)
    uk = np.unique(keys)
    assert len(uk) == len(ux)


def test_string_and_int_order_keys():
    vals = np.array([[3, 0, 2], [-5, 7, 1]], np.int64)
    rank = np.array([2, 0, 1, 3], np.int64)
    out = rk.order_keys(vals, np.array([rk.MODE_RANK, rk.MODE_INT], np.int64), rank)
    assert out.tolist() == [[3, 2, 1], [-5, 7, 1]]


# -- the examples from the issue ------------------------------------------------------------------

def _rows(view):
    df = view.to_pandas()
    return sorted(map(tuple, df.itertuples(index=False)))


def test_argmin_ties_between_negative_floats():
    with kp.Engine(workers=1) as eng:
        x = eng.input("X", ["k", "f"], {"f": "float64"})
        x.insert([(0, -1.5), (0, -0.25)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("X")
            a = X.argmin(col="k").view("a")
            b = X.argmax(col="k").view("b")
            t = X.top_k(order_by="k", k=1).view("t")
        for v in (a, b, t):
            eng.wait(v)
        assert _rows(a) == [(0, -1.5)]
        assert _rows(b) == [(0, -1.5)]  # ties: the smallest row, for argmax too
        assert _rows(t) == [(0, -1.5)]


@pytest.mark.parametrize("together", [True, False])
def test_string_ties_do_not_depend_on_history(together):
    with kp.Engine(workers=1) as eng:
        s = eng.input("S", ["k", "s"], {"s": "str"})
        s.insert([(0, "b")])
        if together:
            s.insert([(0, "a")])
        s.advance_to(1)
        with eng.dataflow("d") as df:
            S = df.input("S")
            a = S.argmin(col="k").view("a")
            b = S.argmax(col="k").view("b")
            t = S.top_k(order_by="k", k=1, descending=False).view("t")
        eng.wait(a)
        if not together:
            s.insert([(0, "a")])
            s.advance_to(2)
            eng.wait(a)
        for v in (a, b, t):
            eng.wait(v)
            assert _rows(v) == [(0, "a")]


@njit
def _echo(vals, cnts):
    """Each distinct value once, with its position in the order the reduce received them."""
    m = vals.shape[0]
    out = np.empty((m, 2), vals.dtype)
    for i in range(m):
        out[i, 0] = vals[i, 0]
        out[i, 1] = i
    return out, np.ones(m, np.int64)


def test_reduce_receives_floats_in_numeric_order():
    with kp.Engine(workers=1) as eng:
        x = eng.input("X", ["k", "f"], {"f": "float64"})
        x.insert([(0, -0.25), (0, -1.5), (0, 2.0), (0, -np.inf), (0, 0.0)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("X").reduce(by="k", fn=_echo, columns=["f"],
                                     out={"f": "float64", "i": "float64"}).view("r")
        eng.wait(v)
        got = sorted(_rows(v), key=lambda r: r[2])
        assert [r[1] for r in got] == [-np.inf, -1.5, -0.25, 0.0, 2.0]


def test_zero_column_view_to_pandas():
    with kp.Engine(workers=2) as eng:
        x = eng.input("X", ["k"])
        x.insert([(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("X").threshold(by=[], fn=lambda c: c).view("t")
        eng.wait(v)
        assert len(v) == 2
        frame = v.to_pandas()
        assert frame.shape == (2, 0)
        assert list(v.to_pandas(diffs=True)["diff"]) == [2]


# -- randomized ------------------------------------------------------------------------------------

WORDS = ["", "a", "A", "b", "ab", "abc", "b ", "ba", "z", "Z", "é", "aa", "α", "0", "10", "9"]
FLOATS = [-np.inf, -1e300, -2.5, -1.5, -1.0, -0.25, -1e-300, -0.0, 0.0, 1e-300, 0.25, 1.0, 1.5, 2.5,
          1e300, np.inf]


def _norm(v):
    """Python value as the engine returns it (-0.0 is stored as 0.0; numpy scalars to Python)."""
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return 0.0 if v == 0.0 else v
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _ref(op, live: Counter, col: int, k=0, desc=False):
    """Reference for a reduction by column 0 over rows (key, c1, c2) of multiset ``live``; ``col`` indexes
    the row (1 or 2). Rows order by value: the column, then the whole row (smallest row wins ties)."""
    groups = {}
    for r, m in live.items():
        if m > 0:
            groups.setdefault(r[0], []).append((r, m))
    out = Counter()
    for key, rows in groups.items():
        rows.sort(key=lambda rm: rm[0][1:])                     # the smallest row first ...
        rows.sort(key=lambda rm: rm[0][col], reverse=desc)      # ... stably by the column
        if op in ("min", "max"):
            vals = [r[col] for r, _ in rows]
            out[(key, min(vals) if op == "min" else max(vals))] += 1
        elif op == "argmin":
            out[rows[0][0]] += 1
        elif op == "argmax":
            best = max(r[col] for r, _ in rows)
            out[min(r for r, _ in rows if r[col] == best)] += 1
        elif op == "topk":
            left = k
            for r, m in rows:
                if left <= 0:
                    break
                out[r] += min(m, left)
                left -= min(m, left)
        elif op == "reduce":
            vals = sorted({r[col] for r, _ in rows})
            for i, v in enumerate(vals):
                out[(key, v, i)] += 1
    return out


def _got(view):
    df = view.to_pandas()
    return Counter(tuple(_norm(v) for v in r) for r in df.itertuples(index=False))


SCHEMAS = {
    # name: (dtypes of c1, c2), value pools
    "float": ({"c1": "float64", "c2": "float64"}, FLOATS, FLOATS),
    "str": ({"c1": "str", "c2": "str"}, WORDS, WORDS),
    "bool": ({"c1": "bool", "c2": "float64"}, [False, True], FLOATS[:6]),
    "mixed": ({"c1": "float64", "c2": "str"}, FLOATS, WORDS),
}


def _reduce_out(dt):
    if dt == "float64":
        return {"v": "float64", "i": "float64"}
    return {"v": dt, "i": "int64"}


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_random_value_order(workers, kind):
    dtypes, pool1, pool2 = SCHEMAS[kind]
    rng = np.random.default_rng(10 * workers + list(SCHEMAS).index(kind))
    with kp.Engine(workers=workers) as eng:
        x = eng.input("X", ["key", "c1", "c2"], dtypes)
        live = Counter()
        views = {}
        with eng.dataflow("d") as df:
            X = df.input("X")
            for col, name in ((1, "c1"), (2, "c2")):
                views[("min", col)] = X.min(by="key", col=name).view(f"min{col}")
                views[("max", col)] = X.max(by="key", col=name).view(f"max{col}")
                views[("argmin", col)] = X.argmin(by="key", col=name).view(f"argmin{col}")
                views[("argmax", col)] = X.argmax(by="key", col=name).view(f"argmax{col}")
                views[("topk", col, 3, True)] = X.top_k(by="key", order_by=name, k=3).view(f"topd{col}")
                views[("topk", col, 2, False)] = X.top_k(by="key", order_by=name, k=2,
                                                         descending=False).view(f"topa{col}")
                views[("reduce", col)] = X.reduce(by="key", fn=_echo, columns=[name],
                                                  out=_reduce_out(dtypes[name])).view(f"red{col}")
        # several epochs of inserts (new strings first seen at different times) and removals
        for epoch in range(1, 7):
            n_ins = int(rng.integers(1, 12))
            ins = [(int(rng.integers(0, 3)), pool1[rng.integers(len(pool1))], pool2[rng.integers(len(pool2))])
                   for _ in range(n_ins)]
            x.insert(ins)
            for r in ins:
                live[tuple(_norm(v) for v in r)] += 1
            present = [r for r, m in live.items() if m > 0]
            if present and epoch > 1:
                rem = [present[i] for i in rng.choice(len(present), size=min(len(present), int(rng.integers(0, 5))),
                                                     replace=False)]
                x.remove(rem)
                for r in rem:
                    live[r] -= 1
            x.advance_to(epoch)
            for v in views.values():
                eng.wait(v)
            for spec, v in views.items():
                op, col = spec[0], spec[1]
                if op == "topk":
                    want = _ref(op, live, col, k=spec[2], desc=spec[3])
                else:
                    want = _ref(op, live, col)
                got = _got(v)
                if op == "reduce":
                    got = Counter({(a, b, int(i)): m for (a, b, i), m in got.items()})
                assert got == +want, (kind, workers, epoch, spec, sorted(live.items()))


def test_nan_orders_after_inf():
    with kp.Engine(workers=1) as eng:
        x = eng.input("X", ["k", "f"], {"f": "float64"})
        x.insert([(0, np.nan), (0, np.inf), (0, -1.0), (1, np.nan)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("X")
            lo = X.min(by="k", col="f").view("lo")
            hi = X.max(by="k", col="f").view("hi")
            t = X.top_k(by="k", order_by="f", k=2).view("t")
        for v in (lo, hi, t):
            eng.wait(v)
        lo_, hi_, t_ = (v.to_pandas().sort_values(["k", "f"]) for v in (lo, hi, t))
        assert lo_["f"].tolist()[0] == -1.0 and np.isnan(lo_["f"].tolist()[1])
        assert np.isnan(hi_["f"].tolist()).tolist() == [True, True]
        assert t_["k"].tolist() == [0, 0, 1] and t_["f"].tolist()[0] == np.inf
