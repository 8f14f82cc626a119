"""What reductions do with zero and negative multiplicities, multiplicity of argmin/argmax winners, and
what iterate(max_rounds=n) returns, as the README's Operators section states them (issue 9)."""
from collections import Counter

import numpy as np
from numba import njit

import kpgnb as kp


def _got(view):
    return Counter(map(tuple, view.to_pandas(diffs=True).itertuples(index=False)))


def _diffs(view):
    """{row: multiplicity} (rows with negative multiplicity included)."""
    df = view.to_pandas(diffs=True)
    return {tuple(r[:-1]): r[-1] for r in df.itertuples(index=False)}


@njit
def _echo_counts(vals, cnts):
    """(value, count) for every distinct value the reduce receives."""
    m = vals.shape[0]
    out = np.empty((m, 2), np.int64)
    for i in range(m):
        out[i, 0] = vals[i, 0]
        out[i, 1] = cnts[i]
    return out, np.ones(m, np.int64)


def test_zero_and_negative_totals():
    with kp.Engine(workers=2) as eng:
        x = eng.input("X", ["g", "v"])
        # group 0: +1 row and -1 row of different values (count 0; sum 5 - 2 = 3)
        # group 1: rows that cancel exactly (no row anywhere)
        # group 2: live rows whose values sum to 0 (sum row 0)
        # group 3: only a negative row
        # group 4: a row of multiplicity 3
        x.update([(0, 5), (0, 2), (1, 7), (1, 7), (2, 4), (2, -4), (3, 9), (4, 6), (4, 1)],
                 [1, -1, 1, -1, 1, 1, -2, 3, 1])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("X")
            vs = dict(
                count=X.count(by="g").view("count"),
                sum=X.sum(by="g", col="v").view("sum"),
                min=X.min(by="g", col="v").view("min"),
                max=X.max(by="g", col="v").view("max"),
                argmin=X.argmin(by="g", col="v").view("argmin"),
                argmax=X.argmax(by="g", col="v").view("argmax"),
                top=X.top_k(by="g", order_by="v", k=2).view("top"),
                distinct=X.distinct().view("distinct"),
                thr=X.threshold(fn=lambda c: c * 10).view("thr"),
                red=X.reduce(by="g", fn=_echo_counts, columns=["v"], out={"v": "int64", "c": "int64"}).view("red"),
            )
        for v in vs.values():
            eng.wait(v)
        # count: the net number of rows; zero drops the group, negative counts appear as they are
        assert _diffs(vs["count"]) == {(2, 2): 1, (3, -2): 1, (4, 4): 1}
        # sum: a row for every group with a row of non-zero total (negative totals weigh negatively);
        # a group whose rows all cancel has none; a sum of 0 over live rows stays as 0
        assert _diffs(vs["sum"]) == {(0, 3): 1, (2, 0): 1, (3, -18): 1, (4, 19): 1}
        # min/max/argmin/argmax/top_k: only rows of positive total take part
        assert _diffs(vs["min"]) == {(0, 5): 1, (2, -4): 1, (4, 1): 1}
        assert _diffs(vs["max"]) == {(0, 5): 1, (2, 4): 1, (4, 6): 1}
        # argmin/argmax: the winning row once, whatever its multiplicity
        assert _diffs(vs["argmax"]) == {(0, 5): 1, (2, 4): 1, (4, 6): 1}
        assert _diffs(vs["argmin"]) == {(0, 5): 1, (2, -4): 1, (4, 1): 1}
        # top_k counts multiplicity: (4, 6) x3 fills k=2
        assert _diffs(vs["top"]) == {(0, 5): 1, (2, 4): 1, (2, -4): 1, (4, 6): 2}
        # distinct: rows of positive total, once
        assert _diffs(vs["distinct"]) == {(0, 5): 1, (2, 4): 1, (2, -4): 1, (4, 6): 1, (4, 1): 1}
        # threshold: fn sees every non-zero total, negative ones included
        assert _diffs(vs["thr"]) == {(0, 5): 10, (0, 2): -10, (2, 4): 10, (2, -4): 10, (3, 9): -20,
                                     (4, 6): 30, (4, 1): 10}
        # a user reduce: every value of non-zero total with its total; never called for an empty group
        assert _diffs(vs["red"]) == {(0, 2, -1): 1, (0, 5, 1): 1, (2, -4, 1): 1, (2, 4, 1): 1, (3, 9, -2): 1,
                                     (4, 1, 1): 1, (4, 6, 3): 1}
        # a sum group that empties later vanishes; one whose live rows sum to 0 stays
        x.update([(2, 4), (2, -4), (0, 1)], [-1, -1, 1])
        x.advance_to(2)
        eng.wait(vs["sum"])
        assert _diffs(vs["sum"]) == {(0, 4): 1, (3, -18): 1, (4, 19): 1}


def test_argmax_ties_take_the_smallest_row():
    with kp.Engine(workers=1) as eng:
        x = eng.input("X", ["g", "v", "w"])
        x.insert([(0, 5, 3), (0, 5, 1), (0, 5, 2), (0, 1, 0)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("X")
            a = X.argmax(by="g", col="v").view("a")
            b = X.argmin(by="g", col="v").view("b")
            t = X.top_k(by="g", order_by="v", k=2).view("t")
        for v in (a, b, t):
            eng.wait(v)
        assert _diffs(a) == {(0, 5, 1): 1}
        assert _diffs(b) == {(0, 1, 0): 1}
        assert _diffs(t) == {(0, 5, 1): 1, (0, 5, 2): 1}


def test_iterate_max_rounds_applies_the_body_n_times():
    with kp.Engine(workers=1) as eng:
        x = eng.input("X", ["n"])
        x.insert([(0,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            X = df.input("X")
            step = {r: X.iterate(lambda v: v.map(lambda n: {"n": n + 1}), max_rounds=r).view(f"s{r}")
                    for r in (1, 2, 3)}
            grow = {r: X.iterate(lambda v: v.map(lambda n: {"n": n + 1}).concat(v).distinct(),
                                 max_rounds=r).view(f"g{r}") for r in (1, 3)}
            conv = X.iterate(lambda v: v.map(lambda n: {"n": np.minimum(n + 1, 2)}).concat(v).distinct(),
                             max_rounds=50).view("c")
        for v in list(step.values()) + list(grow.values()) + [conv]:
            eng.wait(v)
        for r, v in step.items():
            assert sorted(v.to_pandas()["n"]) == [r]          # body applied r times
        assert sorted(grow[1].to_pandas()["n"]) == [0, 1]
        assert sorted(grow[3].to_pandas()["n"]) == [0, 1, 2, 3]
        assert sorted(conv.to_pandas()["n"]) == [0, 1, 2]     # a fixed point reached sooner
