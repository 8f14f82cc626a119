"""Attack (session 46): races and flakiness. Many reader threads read views (``to_pandas``, ``columns(at=)``,
``len``, ``follow``) while a writer advances several inputs and another thread installs, replaces and drops
dataflows, at W = 1, 2, 3; every read is checked against a from-scratch reference for the epoch it reports.

What the stress runs found is written down here as deterministic reproductions: the race window is widened
with a slow user function (a ``map`` on a side branch that sleeps once), so the interleaving that shows
once in a few runs under load happens every time.

Every wait is bounded and a watchdog ends the process if a test hangs anyway."""
from __future__ import annotations

import random
import threading
import time
import traceback
from collections import Counter

import pandas as pd
import pytest

import kpgnb as kp
from threads import T, join_all, watchdog

_watchdog = watchdog(120)


def _rebuild(frames, cols, epochs):
    """The view's contents at each epoch ``e`` in ``epochs``, rebuilt from followed frames (rows with
    ``time <= e``); None for epochs before the first frame's time (the follower says nothing about them)."""
    allf = pd.concat(frames)
    first = int(allf["time"].min()) if len(allf) else None
    out = {}
    for e in epochs:
        if first is None or e < first:
            out[e] = None
            continue
        part = allf[allf["time"] <= e]
        acc = Counter()
        for row in zip(*[part[c].tolist() for c in cols + ["diff"]]):
            acc[row[:-1]] += row[-1]
        out[e] = +acc
    return out


# -- 1. a follower arriving between the arrangement's last append and the view's own step ----------------

def _slow_once(started):
    def slow(k):
        if len(k):
            started.set()
            time.sleep(1.0)  # holds the scheduler between two operator steps of one pass
        return {"k": k}
    return slow


@pytest.mark.parametrize("workers", [1, 2])
def test_follower_of_a_closed_view_dates_its_contents_right_whenever_it_arrives(workers):
    """x gets one row per epoch for 5 epochs and is closed; a dataflow keeps x's history (a view with
    ``history=100``). A dataflow installed now computes count(x) over that history: 1 at epoch 0, ... 5 at
    epoch 4. A follower started while that dataflow's first pass is still running (between the count
    arrangement's append, which already closes the trace, and the view operator's own step) gets the
    contents 5 dated at epoch 0 and nothing more: rebuilt epoch by epoch, it says the count was 5 at epochs
    0..3. The README: the contents come dated at the last epoch anything changed (4), or the history comes
    as changes; either way each epoch it covers is right. Under load the window is hit without the slow
    side branch (stress: late-installed dataflows followed at once while the writer closes, about 1 run
    in 3 at W=2)."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k"])
        with eng.dataflow("keep") as df:
            keep = df.input("x").count(by=[]).view("keep", history=100)
        for e in range(5):
            x.insert([(e,)])
            x.advance_to(e + 1)
        x.close()
        eng.wait(keep, timeout=T)
        started = threading.Event()
        with eng.dataflow("late") as df:
            xs = df.input("x")
            c = xs.count(by=[])
            xs.map(_slow_once(started)).view("side")
            v = c.view("v")
        assert started.wait(T)
        time.sleep(0.05)
        frames = list(v.follow(timeout=T))
        got = _rebuild(frames, ["count"], range(5))
        for e in range(5):
            assert got[e] in (None, Counter({(e + 1,): 1})), (e, got[e], [f.to_dict("records") for f in frames])
        assert got[4] == Counter({(5,): 1})


@pytest.mark.parametrize("workers", [1, 2])
def test_follower_arriving_during_insert_then_close_dates_the_last_rows_at_their_epoch(workers):
    """No late install, no history: a count view over x, epochs 0..2 get one row each (count 3), then a
    writer inserts (99,) at epoch 3 and closes x. A follower that arrives while that last epoch is being
    processed gets the count 4 dated at epoch 2, where the count was 3 (``to_pandas(at=2)`` would say 3 if
    the view kept history): a notebook rebuilding the view's history from ``follow()`` records a change
    at the wrong epoch. The window (the trace closed, the view operator's step not yet run) is widened by
    a slow function on a side branch of the same dataflow."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k"])
        started = threading.Event()

        def slow(k):
            if (k == 99).any():
                started.set()
                time.sleep(1.0)
            return {"k": k}
        with eng.dataflow("d") as df:
            xs = df.input("x")
            c = xs.count(by=[])
            xs.map(slow).view("side")
            v = c.view("v")
        for e in range(3):
            x.insert([(e,)])
            x.advance_to(e + 1)
        eng.wait(v, timeout=T)
        x.insert([(99,)])
        x.close()
        assert started.wait(T)
        time.sleep(0.05)
        frames = list(v.follow(timeout=T))
        got = _rebuild(frames, ["count"], range(4))
        for e in range(4):
            assert got[e] in (None, Counter({(min(e, 3) + 1,): 1})), (e, [f.to_dict("records") for f in frames])
        assert got[3] == Counter({(4,): 1})


def test_follower_of_a_closed_view_after_wait_is_dated_at_the_last_change():
    """The same without the race: once ``eng.wait(view)`` returned, the follower's only frame is the count
    5 dated at epoch 4 (works)."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"])
        with eng.dataflow("keep") as df:
            keep = df.input("x").count(by=[]).view("keep", history=100)
        for e in range(5):
            x.insert([(e,)])
            x.advance_to(e + 1)
        x.close()
        eng.wait(keep, timeout=T)
        with eng.dataflow("late") as df:
            v = df.input("x").count(by=[]).view("v")
        eng.wait(v, timeout=T)
        frames = list(v.follow(timeout=T))
        assert [f.to_dict("records") for f in frames] == [[{"count": 5, "time": 4, "diff": 1}]]


# -- 2. the stress itself, at a size that fits the suite: every read is a whole epoch ---------------------

def _stream(seed, n_epochs):
    rng = random.Random(seed)
    live = {n: Counter() for n in "abc"}
    stream, states = [], []
    for _ in range(n_epochs):
        ep = {}
        for n in "abc":
            add = [(rng.randrange(6), rng.randrange(4)) for _ in range(rng.randrange(0, 4))]
            rm = [rng.choice(sorted(live[n].elements()))] if live[n] and rng.random() < 0.5 else []
            for q in add:
                live[n][q] += 1
            for q in rm:
                live[n][q] -= 1
            live[n] = +live[n]
            ep[n] = (add, rm)
        stream.append(ep)
        states.append({n: Counter(live[n]) for n in "abc"})
    return stream, states


_COLS = {"count": ["k", "count"], "join": ["k", "v", "w"], "dist": ["k", "v"], "min": ["k", "v"]}


def _reference(st):
    a, b, c = st["a"], st["b"], st["c"]
    cnt = Counter()
    for (k, _), m in a.items():
        cnt[k] += m
    join = Counter()
    for (k, v), m in a.items():
        for (k2, w), m2 in b.items():
            if k == k2:
                join[(k, v, w)] += m * m2
    mn = {}
    for (k, v), _ in c.items():
        mn[k] = min(mn.get(k, 99), v)
    return {"count": Counter({(k, m): 1 for k, m in cnt.items() if m}), "join": join,
            "dist": Counter({r: 1 for r in set(a) | set(c)}), "min": Counter({(k, v): 1 for k, v in mn.items()})}


def _build(df, history=None):
    a, b, c = df.input("a"), df.input("b"), df.input("c")
    kw = {"history": history} if history else {}
    return {"count": a.count(by="k").view("count", **kw),
            "join": a.join(b.rename(v="w"), on="k").view("join", **kw),
            "dist": a.concat(c).distinct().view("dist", **kw),
            "min": c.min(by="k", col="v").view("min", **kw)}


def _rows(d, cols):
    return Counter(zip(*[d[c].tolist() for c in cols]))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_readers_followers_and_installs_see_whole_epochs_of_three_inputs(workers):
    """Three inputs advanced epoch by epoch (inserts and removals) by the main thread; a dataflow with a
    count, a join of two inputs, a distinct of a concat and a min (``history`` kept); three readers read
    ``to_pandas`` (checked at its ``attrs['epoch']``), ``columns(at=)`` of an earlier epoch and ``len``;
    followers started before the first epoch rebuild the final contents; an installer thread installs,
    replaces and drops late dataflows of the same views and checks each at the epoch it reports. Every read
    is the reference at its epoch (works: no failure in about 50 stress runs of this shape at W = 1, 2, 3,
    loaded or not)."""
    stream, states = _stream(workers, 30)
    refs = [{k: Counter() for k in _COLS}] + [_reference(s) for s in states]
    problems, stop = [], threading.Event()
    rng = random.Random(workers)
    with kp.Engine(workers=workers) as eng:
        ins = {n: eng.input(n, ["k", "v"]) for n in "abc"}
        with eng.dataflow("main") as df:
            views = _build(df, history=1000)
        for v in views.values():
            eng.wait(v, timeout=T)

        def check(tag, name, got, e):
            ref = refs[-1 if e is None else e][name]
            if got != ref:
                problems.append((tag, name, e, dict(got), dict(ref)))

        def reader(i):
            r = random.Random(i)
            try:
                while not stop.is_set():
                    name = r.choice(list(_COLS))
                    v = views[name]
                    d = v.to_pandas()
                    e = d.attrs["epoch"]
                    check("to_pandas", name, _rows(d, _COLS[name]), e)
                    if e:
                        at = r.randrange(e)
                        check(f"columns(at={at})", name, _rows(v.columns(at=at), _COLS[name]), at + 1)
                    n = len(v)
                    lo = len(states) if e is None else e
                    if not any(sum(refs[x][name].values()) == n for x in range(lo, len(refs))):
                        problems.append(("len", name, e, n))
                    time.sleep(0.001)
            except Exception:  # noqa: BLE001
                problems.append(("reader", traceback.format_exc()))

        followed = {}

        def follower(name, f):
            try:
                acc = Counter()
                for fr in f:
                    for row in zip(*[fr[c].tolist() for c in _COLS[name] + ["diff"]]):
                        acc[row[:-1]] += row[-1]
                followed[name] = +acc
            except Exception:  # noqa: BLE001
                problems.append(("follower", traceback.format_exc()))

        def installer():
            j = 0
            try:
                while not stop.is_set():
                    j += 1
                    nm = f"late{j % 3}"
                    with eng.dataflow(nm, replace=True) as df:
                        lv = _build(df)
                    for name, v in lv.items():
                        eng.wait(v, timeout=T)
                        d = v.to_pandas()
                        e = d.attrs["epoch"]
                        if not (e == 0 and len(d) == 0):
                            check(f"late {nm}", name, _rows(d, _COLS[name]), e)
                    if rng.random() < 0.5:
                        eng.drop(nm)
            except Exception:  # noqa: BLE001
                problems.append(("installer", traceback.format_exc()))

        ts = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
        ts.append(threading.Thread(target=installer, daemon=True))
        ts += [threading.Thread(target=follower, args=(n, views[n].follow(timeout=T)), daemon=True) for n in _COLS]
        for t in ts:
            t.start()
        try:
            for e, ep in enumerate(stream):
                for n in "abc":
                    add, rm = ep[n]
                    if add:
                        ins[n].insert(add)
                    if rm:
                        ins[n].remove(rm)
                    ins[n].advance_to(e + 1)
                time.sleep(rng.random() * 0.02)
            for n in "abc":
                ins[n].close()
            for v in views.values():
                eng.wait(v, timeout=T)
        finally:
            stop.set()
            join_all(ts)
        assert not problems, problems[:3]
        for name, v in views.items():
            assert _rows(v.to_pandas(), _COLS[name]) == refs[-1][name]
            assert followed[name] == refs[-1][name]
