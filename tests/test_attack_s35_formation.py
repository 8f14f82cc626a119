"""Attack s35: batch formation (kernels/form.py) and one-time parts (batcher.Part.single, form_parts
``time``) through the engine's public API. Random streams over str and int keys, with huge numbers of
equal keys (runs of equal hash far longer than SHORT_RUN), several inserts per epoch, epochs submitted
before the engine gets to them (parts of different times in one seal), and loops nested two deep (times
of depth 2 and 3); count, sum, min, max and distinct compared with pandas / plain Python at every epoch,
for W = 1, 2, 3."""
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp

KEYS = np.array(["same", "", "a", "b", "é", "a\x00b", "zz" * 20] + [f"k{i}" for i in range(40)], dtype=object)


def _rows(rng, n, hot):
    """n rows (k str, g int, v int): with ``hot``, most rows share one key."""
    if hot:
        k = np.where(rng.random(n) < 0.9, "same", KEYS[rng.integers(0, len(KEYS), n)])
    else:
        k = KEYS[rng.integers(0, len(KEYS), n)]
    g = rng.choice(np.array([-(1 << 62), -1, 0, 1, 7, (1 << 62)], np.int64), n)
    v = rng.integers(-3, 4, n)
    return pd.DataFrame({"k": k.astype(object), "g": g, "v": v})


def _expected(live: Counter):
    """From scratch in plain Python (pandas' groupby merges the keys "a" and "a\\x00b")."""
    cnt, sums, mins, maxs, dist = Counter(), {}, {}, {}, set()
    for (k, g, v), m in live.items():
        if m <= 0:
            continue
        cnt[k] += m
        sums[(k, g)] = sums.get((k, g), 0) + v * m
        mins[k] = min(mins.get(k, v), v)
        maxs[(k, g)] = max(maxs.get((k, g), v), v)
        dist.add((k, v % 3))
    return dict(cnt), sums, mins, maxs, dist


def _same(got, want, e):
    for name, g, w in zip(("count", "sum", "min", "max", "distinct"), got, want):
        if g != w:
            if isinstance(g, dict):
                bad = sorted((k for k in set(g) | set(w) if g.get(k) != w.get(k)), key=repr)
                raise AssertionError(f"epoch {e} {name}: {len(bad)} differ, e.g. " +
                                     ", ".join(f"{k!r}: got {g.get(k)!r} want {w.get(k)!r}" for k in bad[:5]))
            raise AssertionError(f"epoch {e} {name}: got-want {sorted(g - w)[:5]} want-got {sorted(w - g)[:5]}")


def _got(views):
    c, s, mi, ma, di = (v.to_pandas() for v in views)
    return (dict(zip(c["k"], c["count"])), dict(zip(zip(s["k"], s["g"]), s["v"])), dict(zip(mi["k"], mi["v"])),
            dict(zip(zip(ma["k"], ma["g"]), ma["v"])), set(zip(di["k"], di["m"])))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("hot", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_reductions_over_str_keys_match_pandas_every_epoch(workers, hot, big):
    rng = np.random.default_rng(workers * 10 + hot * 2 + big)
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("t", ["k", "g", "v"], dtypes=["str", "int64", "int64"])
        with eng.dataflow("d") as df:
            t = df.input("t")
            views = [t.count(by="k").view("c"), t.sum(by=["k", "g"], col="v").view("s"),
                     t.min(by="k", col="v").view("mi"), t.max(by=["k", "g"], col="v").view("ma"),
                     t.map(lambda k, v: {"k": k, "m": v % 3}).distinct().view("di")]
        live = Counter()
        expected = {}
        for e in range(6):
            for _ in range(int(rng.integers(1, 4))):  # several parts per epoch
                n = int(rng.choice([1, 3, 50, 2_000] + ([15_000, 40_000] if big else [])))
                new = _rows(rng, n, hot)
                inp.insert(new)
                for r in new.itertuples(index=False):
                    live[(r.k, r.g, r.v)] += 1
            if live and rng.random() < 0.8:
                cand = list(live.elements())
                idx = rng.choice(len(cand), min(len(cand), int(rng.integers(1, 3000))), replace=False)
                rem = [cand[i] for i in idx]
                inp.remove(rem)
                for r in rem:
                    live[r] -= 1
                live = +live
            inp.advance_to(e + 1)
            expected[e] = _expected(live)
            if rng.random() < 0.5:  # else several epochs reach the engine at once
                for v in views:
                    eng.wait(v, timeout=60)
                _same(_got(views), expected[e], e)
        for v in views:
            eng.wait(v, timeout=60)
        _same(_got(views), expected[5], 5)


def _closure_ref(live: Counter, cap: int, step_out: int, step_in: int):
    """The outer loop's fixed point computed literally: A = A0 | (closure_in(A) + step_out), where
    closure_in adds step_in any number of times; additions capped at cap."""
    def closure_in(s):
        out, todo = set(), list(s)
        while todo:
            r = todo.pop()
            if r not in out:
                out.add(r)
                todo.append((r[0], min(r[1] + step_in, cap)))
        return out
    a0 = {r for r, m in live.items() if m > 0}
    a = set(a0)
    while True:
        nxt = a0 | {(k, min(x + step_out, cap)) for k, x in closure_in(a)}
        if nxt == a:
            return a
        a = nxt


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("strkeys", [False, True])
def test_nested_loops_one_time_rounds_match_reference(workers, strkeys):
    """An iterate nested in an iterate (times of depth 3), its rounds' outputs one-time parts; the
    inputs change every epoch and some epochs reach the engine together."""
    cap = 24
    rng = np.random.default_rng(500 + workers + 10 * strkeys)
    dt = "str" if strkeys else "int64"
    keyv = (lambda i: f"key{i}") if strkeys else (lambda i: i * 1_000_003 - 7)
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("p", ["k", "x"], dtypes=[dt, "int64"])
        with eng.dataflow("n") as df:
            p = df.input("p")

            def inner(a):
                return a.map(lambda k, x: {"k": k, "x": np.minimum(x + 3, cap)}).concat(a).distinct()

            def outer(a):
                return a.iterate(inner).map(lambda k, x: {"k": k, "x": np.minimum(x + 5, cap)}).concat(a).distinct()
            view = p.distinct().iterate(outer).view("out")
        live = Counter()
        for e in range(6):
            ins = [(keyv(int(rng.integers(0, 6))), int(rng.integers(0, cap))) for _ in range(int(rng.integers(1, 8)))]
            inp.insert(ins)
            for r in ins:
                live[r] += 1
            if live and rng.random() < 0.6:
                cand = list(live.elements())
                r = cand[int(rng.integers(0, len(cand)))]
                inp.remove([r])
                live[r] -= 1
                live = +live
            inp.advance_to(e + 1)
            if e % 2:
                eng.wait(view, timeout=60)
                got = view.to_pandas()
                assert len(got) == len(set(zip(got["k"], got["x"])))
                assert set(zip(got["k"], got["x"])) == _closure_ref(live, cap, 5, 3), e
