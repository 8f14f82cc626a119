"""Attack (session 50): differential correctness of dataflows that attach LATER to shared state.

A seeded generator drives three inputs (W(k, v) with negative multiplicities, duplicates, retractions that
empty whole groups and bring them back, empty epochs; E(src, dst) keyed by src; N(node) roots) and installs,
at random epochs and sometimes while epochs are still in flight, dataflows that attach to what earlier ones
exported: count/min/distinct(key=) exports joined and summed, a reachability loop and a pair of mutually
recursive Variables over an imported edge arrangement, shortest distances with enter_at and delay, a loop
result exported and imported by a later join, a chain of exports (an importer's own export imported again
inside a loop), a dataflow replaced (``replace=True``) while its export is read by dataflows installed before
and after each replacement, several dataflows over the same input installed at different epochs, and a trace
handle on an export read with ``accumulate(at=)``. Every view is read with ``at=`` at every epoch from its
start and compared with a from-scratch Python reference, at W = 1, 2 and 3 (about 600 runs matched, as
did identity and max_rounds loops over imports, loops whose body is an import, delay on an entered import,
semijoin/antijoin/threshold over imported reductions, and installs queued behind a busy scheduler step).

What it found is in where a late dataflow starts: an input (or export) whose rows were all retracted by the
latest complete epoch makes a dataflow installed then start one epoch LATER than the README promises (the
import takes the compacted batches' ``since``, which an empty trace has at its upper): the view reads as
nothing (no rows, ``attrs["epoch"]`` 0) after ``eng.wait`` although another input it reads holds rows, and
its ``at=`` read of the latest complete epoch is refused, and a follower's first frame waits for the next epoch.

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

import kpgnb as kp

T = 60


def _rows(view, at=None):
    d = view.to_pandas(diffs=True, at=at)
    return sorted(map(tuple, d.values.tolist()))


# -- bugs ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_late_dataflow_over_an_emptied_input_answers_after_wait(workers):
    # README: "A dataflow installed late starts from its inputs' current contents, as of the latest complete
    # epoch of the inputs it imports". Z holds 7 and W is empty at epoch 1 (its rows came at 0 and went at 1),
    # both advanced to 2. A dataflow concatenating them, installed then, must answer {7} as of epoch 1 once
    # eng.wait returns: attrs["epoch"] 2. It reads nothing (attrs["epoch"] 0): it took epoch 2 as its start.
    with kp.Engine(workers=workers) as eng:
        w = eng.input("W", ["k"])
        z = eng.input("Z", ["k"])
        w.insert([(1,), (2,)])
        z.insert([(7,)])
        w.advance_to(1); z.advance_to(1)
        w.remove([(1,), (2,)])
        w.advance_to(2); z.advance_to(2)
        with eng.dataflow("late") as df:
            v = df.input("Z").concat(df.input("W")).view("v", history=5)
        eng.wait(v, timeout=T)
        d = v.to_pandas()
        assert (d.attrs["epoch"], d.values.tolist()) == (2, [[7]])


def test_follower_of_late_view_over_an_emptied_input_starts_with_the_contents():
    # README: a late dataflow's "follower's first frame is the contents as of the start", and the start is the
    # latest complete epoch (1 here, where Z holds 7 and W nothing). After eng.wait the first frame must come at
    # once; it times out instead: the dataflow took epoch 2, not final yet, as its start.
    with kp.Engine(workers=1) as eng:
        w = eng.input("W", ["k"])
        z = eng.input("Z", ["k"])
        w.insert([(1,)])
        z.insert([(7,)])
        w.advance_to(1); z.advance_to(1)
        w.remove([(1,)])
        w.advance_to(2); z.advance_to(2)
        with eng.dataflow("late") as df:
            v = df.input("Z").concat(df.input("W")).view("v", history=5)
        eng.wait(v, timeout=T)
        f = v.follow(timeout=2)
        try:
            first = next(f)
        finally:
            f.close()
        assert first[["k", "diff"]].values.tolist() == [[7, 1]]
        assert first["time"].tolist() == [1]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("what", ["count_export", "arrange_export"])
def test_late_import_of_an_emptied_export_reads_the_epoch_it_started_at(workers, what):
    # p0 exports W.count(by="k") and W.arrange_by("k"); W's rows all go at epoch 1. p1, installed with W
    # advanced to 2 (epoch 1 complete and p0 caught up), imports one of them. It starts as of epoch 1, so after
    # W moves on, at=1 is an empty answer, not a CompactedError saying it "started from its inputs as of
    # epoch 2".
    with kp.Engine(workers=workers) as eng:
        w = eng.input("W", ["k", "v"])
        with eng.dataflow("p0") as df:
            df.input("W").count(by="k").export("count_export")
            df.input("W").arrange_by("k").export("arrange_export")
        w.insert([(1, 1), (2, 2)])
        w.advance_to(1)
        w.remove([(1, 1), (2, 2)])
        w.advance_to(2)
        eng.wait("p0", timeout=T)
        with eng.dataflow("p1") as df:
            v = df.use(what).view("v", history=5)
        w.insert([(3, 3)])
        w.advance_to(3)
        eng.wait(v, timeout=T)
        assert _rows(v, at=1) == []
        assert len(_rows(v, at=2)) == 1


# -- the generator: three inputs, dataflows attached later to exports, a replaced one, a trace handle ---------

K = 4       # keys of W
NODES = 6   # node ids of E and N
H = 100     # history= of every view: each epoch from a view's start stays readable


def clean(c):
    return Counter({k: v for k, v in c.items() if v})


def vc(view, at=None):
    d = view.columns(at=at, diffs=True)
    names = [n for n in d if n != "diff"]
    out = Counter()
    for i in range(len(d["diff"])):
        out[tuple(int(d[n][i]) for n in names)] += int(d["diff"][i])
    return clean(out)


# ---- the reference: each view recomputed from scratch on Counters (row -> multiplicity)
def r_count(W):
    c = Counter()
    for (k, v), m in W.items():
        c[k] += m
    return Counter({(k, n): 1 for k, n in c.items() if n})


def r_min(W):
    best = {}
    for (k, v), m in W.items():
        if m > 0:
            best[k] = min(best.get(k, v), v)
    return Counter({(k, v): 1 for k, v in best.items()})


def r_sum(W):
    s, live = Counter(), set()
    for (k, v), m in W.items():
        if m:
            s[k] += v * m
            live.add(k)
    return Counter({(k, s[k]): 1 for k in live})


def r_distinct(W):
    return Counter({r: 1 for r, m in W.items() if m > 0})


def r_join(A, B):
    """A join on the first column, the output (key, A's rest, B's rest)."""
    out = Counter()
    for a, x in A.items():
        for b, y in B.items():
            if a[0] == b[0]:
                out[a + b[1:]] += x * y
    return clean(out)


def r_step(X, E):
    out = Counter()
    for (n,), a in X.items():
        for (s, d), b in E.items():
            if s == n:
                out[(d,)] += a * b
    return out


def r_reach(N, E):
    x = clean(Counter(N))
    for _ in range(100):
        nx_ = r_step(x, E)
        nx_.update(x)
        nx_ = Counter({r: 1 for r, m in nx_.items() if m > 0})
        if nx_ == x:
            return x
        x = nx_
    raise AssertionError("the reference has no fixed point")


def r_evenodd(N, E):
    ev, od = clean(Counter(N)), Counter()
    for _ in range(200):
        j = r_step(od, E)
        j.update(N)
        ev2 = Counter({r: 1 for r, m in j.items() if m > 0})
        od2 = Counter({r: 1 for r, m in r_step(ev, E).items() if m > 0})
        if (ev2, od2) == (ev, od):
            return ev, od
        ev, od = ev2, od2
    raise AssertionError("the reference has no fixed point")


def r_dist(N, E):
    dist = {n: 0 for (n,), m in N.items() if m > 0}
    adj = defaultdict(set)
    for (s, d), m in E.items():
        if m > 0:
            adj[s].add(d)
    fr = list(dist)
    while fr:
        nf = []
        for n in fr:
            for d in sorted(adj[n]):
                if d not in dist:
                    dist[d] = dist[n] + 1
                    nf.append(d)
        fr = nf
    return Counter({(n, d): 1 for n, d in dist.items()})


# ---- engine functions and builders
def f_node(dst):
    return {"node": dst}


def f_step(dst, d):
    return {"node": dst, "d": d + 1}


def f_zero(node):
    return {"node": node, "d": np.zeros(len(node), np.int64)}


def f_round(node):
    return node % 3


def f_delay(node, d):
    return d * 2


def b_reach(start, es):
    return start.iterate(lambda r: r.join(es, left_on="node", right_on="src").map(f_node).concat(r).distinct())


def b_evenodd(df, es):
    loop = df.loop()
    ev = kp.Variable(loop, df.input("N"))
    od = kp.Variable(loop, columns=["node"], dtypes=["int64"])
    ev.set(od.join(es, left_on="node", right_on="src").map(f_node).concat(df.input("N")).distinct())
    od.set(ev.join(es, left_on="node", right_on="src").map(f_node).distinct())
    return ev.leave(), od.leave()


def b_dist(df, es, mode):
    roots = df.input("N").map(f_zero).distinct()
    if mode == "enter_at":
        loop = df.loop()
        v = kp.Variable(loop, None, columns=["node", "d"], dtypes=["int64", "int64"])
        nxt = v.join(es, left_on="node", right_on="src").map(f_step).concat(roots.enter_at(loop, f_round)) \
            .min(by="node", col="d")
        v.set(nxt)
        return nxt.leave()

    def body(r):
        c = r.join(es, left_on="node", right_on="src").map(f_step)
        if mode == "delay":
            c = c.delay(f_delay)
        return c.concat(r).min(by="node", col="d")
    return roots.iterate(body)


# ---- update streams
def _apply(sess, state, rows, diffs):
    if rows:
        sess.update(rows, diffs)
    for r, d in zip(rows, diffs):
        state[r] += d
        if not state[r]:
            del state[r]


def submit_w(rng, sess, state):
    """Negative multiplicities, duplicates, retractions of rows never inserted, whole groups emptied (and
    refilled later), empty epochs."""
    rows, diffs = [], []
    for _ in range(int(rng.integers(0, 6))):
        t = rng.random()
        if t < 0.3 and state:
            ks = sorted(state)
            r = ks[int(rng.integers(len(ks)))]
            rows.append(r); diffs.append(-state[r] if rng.random() < 0.6 else -1)
        elif t < 0.4:
            k = int(rng.integers(K))
            for r in sorted(state):
                if r[0] == k:
                    rows.append(r); diffs.append(-state[r])
        elif t < 0.5:
            rows.append((int(rng.integers(K)), int(rng.integers(-2, 3)))); diffs.append(-1)
        elif t < 0.6:
            r = (int(rng.integers(K)), int(rng.integers(-2, 3))); rows += [r, r]; diffs += [2, -1]
        else:
            rows.append((int(rng.integers(K)), int(rng.integers(-2, 3)))); diffs.append(int(rng.choice([1, 1, 2])))
    _apply(sess, state, rows, diffs)


def submit_e(rng, sess, state):
    """Edges inserted (some twice) and removed (only ones present: a graph, so loops have fixed points)."""
    rows, diffs = [], []
    for _ in range(int(rng.integers(0, 4))):
        if rng.random() < 0.35 and state:
            ks = sorted(state)
            r = ks[int(rng.integers(len(ks)))]
            if r not in rows:
                rows.append(r); diffs.append(-state[r])
        else:
            rows.append((int(rng.integers(NODES)), int(rng.integers(NODES)))); diffs.append(int(rng.choice([1, 1, 2])))
    _apply(sess, state, rows, diffs)


def submit_n(rng, sess, state):
    if rng.random() < 0.5:
        return
    if rng.random() < 0.3 and state:
        r = sorted(state)[int(rng.integers(len(state)))]
        _apply(sess, state, [r], [-state[r]])
    else:
        _apply(sess, state, [(int(rng.integers(NODES)),)], [1])


def run(seed, workers, steps=10, checks=None):
    """One random schedule of late installs and replacements; None, or what first disagreed."""
    checks = checks if checks is not None else Counter()
    rng = np.random.default_rng(seed)
    hist = []  # (W, E, N) as of each epoch
    W, E, N = Counter(), Counter(), Counter()
    ep = 0
    at = [int(x) for x in rng.integers(0, steps, size=9)]
    rep_at = int(rng.integers(1, steps))
    views = []  # [name, view, reference(W, E, N), first epoch answered]
    cur_rep = [None]
    nrd = 0
    tr = None
    with kp.Engine(workers=workers, effort=["default", "eager", "lazy"][seed % 3]) as eng:
        wi = eng.input("W", ["k", "v"], key="k" if seed % 2 else None)
        ei = eng.input("E", ["src", "dst"], key="src")
        ni = eng.input("N", ["node"])

        def add(name, coll, ref):
            views.append([name, coll.view(name, history=H), ref, None])

        def epoch():
            nonlocal ep
            submit_w(rng, wi, W); submit_e(rng, ei, E); submit_n(rng, ni, N)
            hist.append((Counter(W), Counter(E), Counter(N)))
            ep += 1
            wi.advance_to(ep); ei.advance_to(ep); ni.advance_to(ep)

        cat = eng.catalog
        for step in range(steps):
            if rng.random() < 0.5:
                epoch()  # (installs below then come while this epoch is in flight)
            if step == min(at[:6]):
                with eng.dataflow("p0") as df:
                    w = df.input("W")
                    add("p0c", w.count(by="k").export("CNT"), lambda W, E, N: r_count(W))
                    w.min(by="k", col="v").export("MINV")
                    w.distinct(key="k").export("DW")
                    df.input("E").arrange_by("src").export("ES")
            if step == at[1] and "CNT" in cat():
                with eng.dataflow("p1") as df:
                    add("p1j", df.use("CNT").join(df.use("MINV"), on="k"), lambda W, E, N: r_join(r_count(W), r_min(W)))
                    add("p1s", df.use("DW").sum(by="k", col="v"), lambda W, E, N: r_sum(r_distinct(W)))
            if step == at[2] and "ES" in cat():
                with eng.dataflow("p2") as df:
                    es = df.use("ES")
                    rr = b_reach(df.input("N"), es)
                    add("p2r", rr, lambda W, E, N: r_reach(N, E))
                    rr.arrange_by("node").export("R")
                    ev, od = b_evenodd(df, es)
                    add("p2e", ev, lambda W, E, N: r_evenodd(N, E)[0])
                    add("p2o", od, lambda W, E, N: r_evenodd(N, E)[1])
            if step == at[3] and "ES" in cat():
                with eng.dataflow("p3") as df:
                    for mode in ("enter_at", "delay", "plain"):
                        add("p3" + mode, b_dist(df, df.use("ES"), mode), lambda W, E, N: r_dist(N, E))
            if step == at[4]:
                with eng.dataflow("p4") as df:
                    add("p4m", df.input("W").min(by="k", col="v"), lambda W, E, N: r_min(W))
            if step == at[5] and "CNT" in cat() and tr is None:
                tr = eng.trace("CNT")
            if step == at[6] and "CNT" in cat():
                with eng.dataflow("p5") as df:
                    j = df.use("CNT").join(df.use("DW"), on="k").arrange_by("k").export("J")
                    add("p5j", j, lambda W, E, N: r_join(r_count(W), r_distinct(W)))
            if step == at[7] and "J" in cat() and "ES" in cat():
                with eng.dataflow("p6") as df:  # an importer's export imported again, inside a loop
                    st = df.use("J").select("k").rename(k="node").distinct()
                    add("p6r", b_reach(st, df.use("ES")),
                        lambda W, E, N: r_reach(Counter({(k,): 1 for (k, n, v) in r_join(r_count(W), r_distinct(W))}), E))
            if step == at[8] and "R" in cat():
                with eng.dataflow("p7") as df:  # a loop's result, exported, joined by a later dataflow
                    add("p7c", df.use("R").join(df.input("W"), left_on="node", right_on="k").count(by="node"),
                        lambda W, E, N: r_count(Counter({(n, v): m for (n, v), m in r_join(r_reach(N, E), W).items()})))
            if step == rep_at:
                if rng.random() < 0.5:
                    mk, ref = (lambda w: w.min(by="k", col="v")), (lambda W, E, N: r_min(W))
                else:
                    mk, ref = (lambda w: w.count(by="k")), (lambda W, E, N: r_count(W))
                with eng.dataflow("rep", replace=True) as df:
                    x = mk(df.input("W"))
                    add("rep%d" % step, x, ref)
                    x.export("RX")
                cur_rep[0] = ref
                rep_at = int(rng.integers(step + 1, steps + 2))
            if "RX" in cat() and rng.random() < 0.3:  # readers of each version of RX
                nrd += 1
                with eng.dataflow("rd%d" % nrd) as df:
                    add("rd%d" % nrd, df.use("RX"), cur_rep[0])
            for _ in range(int(rng.integers(1, 3))):
                epoch()
                if rng.random() < 0.5:  # else the epochs go to the engine together
                    for v in views:
                        try:
                            eng.wait(v[1], timeout=T)
                        except kp.UsageError:
                            pass
            for v in views:
                name, view, ref, start = v
                try:
                    eng.wait(view, timeout=T)
                except kp.UsageError:  # an earlier version of "rep", replaced
                    continue
                fr = view.to_pandas(diffs=True).attrs["epoch"]
                for e in range(fr):
                    try:
                        got = vc(view, at=e)
                    except kp.CompactedError:
                        if start is None or e < start:
                            continue  # before the dataflow's start
                        raise
                    if v[3] is None:
                        v[3] = start = e
                    exp = ref(*hist[e])
                    checks[name[:3]] += 1
                    if got != exp:
                        return ("MISMATCH", seed, workers, name, step, e, sorted((got - exp).items())[:5],
                                sorted((exp - got).items())[:5])
            if tr is not None:
                for e in range(len(hist)):
                    try:
                        keys, vals, m = tr.accumulate(at=e)
                    except (kp.CompactedError, kp.UsageError):
                        continue  # before the handle opened, or not final yet
                    got = clean(Counter({(int(keys[0][i]), int(vals[0][i])): int(m[i]) for i in range(len(m))}))
                    checks["trace"] += 1
                    if got != r_count(hist[e][0]):
                        return ("TRACE", seed, workers, e, got, r_count(hist[e][0]))
        if tr is not None:
            tr.close()
    return None


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [5, 8])
def test_random_late_attach_replace_and_sharing_match_reference(seed, workers):
    checks = Counter()
    assert run(seed, workers, checks=checks) is None
    assert sum(checks.values()) > 300, checks
