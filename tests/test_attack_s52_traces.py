"""Attack (session 52) on arrangements and their traces as a user sees them: ``arrange_by`` / ``export`` /
``df.use`` across dataflows, compaction (``history=``, ``to_pandas(at=)`` of earlier epochs, what is refused
once compacted, ``eng.trace`` handles and their frontiers), merges of many batches at every merge effort,
consolidation to zero, dropping and replacing a dataflow that others import, ``eng.stats()`` trace sizes
against what the readers can still tell apart, and every non-loop operator (join, semijoin, antijoin,
a numba reduce, count, distinct, threshold, min/max, sum, concat, negate, map, filter, flat_map,
consolidate) against a from-scratch reference on random update streams with retractions, int, str and
float columns, at W = 1, 2 and 3.

A random run of the operators (about 60 seeds x 3 worker counts, every epoch read back with ``at=``), of
exports imported by dataflows installed late and of an exporter replaced under its readers (about 40 seeds x
3 worker counts x 3 merge efforts), and of a late reachability / BFS-by-min loop over an imported
arrangement (40 seeds x 3 worker counts), of an operator chain with a float numba reduce inside a loop cut by
``max_rounds`` (partially ordered times), of ``inspect`` after a late import, of 30,000-row joins and
reductions over extreme int64 and str keys, and of a handle reading every epoch while a feeder thread
advances, found no wrong answer: the operators hold. The defects are in what the traces keep (a burst of
epochs over repeated rows is never compacted), in the trace-handle API (frontiers a handle takes or refuses
for the wrong reason, reads after ``eng.close()``), in ``kp.Antichain``'s input checks and in what
``stats()`` and ``df.use`` say.

Tests marked xfail(strict=True) assert the documented (or obviously expected) behaviour for a defect this
attack found."""
from __future__ import annotations

import collections
import random
import time

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp
from threads import watchdog

T = 60
_watchdog = watchdog(240)


def _arr(eng, name) -> dict:
    return {a["name"]: a for a in eng.arrangements(live=True)}[name]


def _settle(eng, names, ok, seconds=2.0) -> dict:
    """The arrangements' figures once ``ok(figures)`` holds for each of ``names`` or ``seconds`` passed."""
    eng.wait(timeout=T)
    deadline = time.monotonic() + seconds
    while True:
        xs = {n: _arr(eng, n) for n in names}
        if all(ok(x) for x in xs.values()) or time.monotonic() > deadline:
            return xs
        time.sleep(0.05)


def _bag(view, at=None) -> dict:
    d = view.to_pandas(at=at, diffs=True)
    c = collections.Counter()
    for row in d.itertuples(index=False):
        row = tuple(row)
        c[row[:-1]] += int(row[-1])
    return {r: m for r, m in c.items() if m}


# -- 1. bug: a trace formed from a burst of epochs is never compacted when its balance looks live ---------------

def _copies(a, wait, n=60):
    """Seven rows inserted ``n`` times each at epoch 0, then one copy of each removed per epoch, n - 1
    epochs submitted without waiting; then 20 epochs of one new row each, waiting for each. Live: 27."""
    rows = [(k, 10 * k) for k in range(7)]
    a.update(rows, [n] * len(rows))
    a.advance_to(1)
    wait()
    for e in range(n - 1):
        a.remove(rows)
        a.advance_to(2 + e)
    for e in range(20):
        a.insert([(100 + e, e)])
        a.advance_to(n + 1 + e)
        wait()
    return 27


def _clicks(a, wait, n=300):
    """A click stream over 10 distinct rows (3 clicks an epoch), one click retracted every 10th epoch, ``n``
    epochs submitted without waiting. Live: 10."""
    rng = random.Random(3)
    cur = collections.Counter()
    for e in range(n):
        rows = [(rng.randrange(5), rng.randrange(2)) for _ in range(3)]
        a.insert(rows)
        cur.update(rows)
        if e % 10 == 9:
            r = rng.choice(sorted(k for k in cur if cur[k] > 0))
            a.remove([r])
            cur[r] -= 1
        a.advance_to(e + 1)
    return sum(1 for m in cur.values() if m)


@pytest.mark.parametrize("workers,shape", [(1, "copies"), (2, "copies"), (3, "copies"), (2, "clicks")])
def test_a_burst_of_epochs_over_repeated_rows_compacts_once_read_past(workers, shape):
    """README (Arrangements, sharing and compaction): "Under steady churn a trace stays within twice the
    distinct (data, time) pairs its readers can still tell apart ... right after each step, and while the
    engine is idle, the scheduler spends spare time on this". A feeder advances epochs without waiting for
    the engine (as a stream does), so many epochs reach an arrangement as one batch whose times are still
    apart; every reader is then past them all:

    - ``copies``: seven rows inserted 60 times each, then one copy of each removed per epoch: the input's and
      the export's traces keep 420 records for 7 live rows however long the engine idles (the export also
      after 20 more epochs that each wait: 440 records for 27 live), at W = 1, 2 and 3. The same holds for
      every arrangement downstream (a ``count``'s, ``distinct``'s and ``threshold``'s inputs, a join's
      output) and for a key-only arrangement (``select("k").arrange_by("k")``), which keeps 300 records for
      0 live rows once a handle that held it back closes.
    - ``clicks``: a click stream over 10 distinct rows with one click in 30 retracted: 400-700 records for 10
      live rows, where the same stream without the retractions compacts (README: the click-stream rule) and
      so does the same stream advanced one epoch at a time with waits (14 records).

    Likely cause: engine/spine.py ``Spine.bloated`` / ``live_estimate`` judge a spine by its balance of
    records (records with positive diffs minus those with negative ones), which counts every (row, time) as
    live unless a record of the opposite sign offsets it: the 59 records (row, t, -1) of a row outweigh its
    one (row, 0, +60), and duplicates of a row at many times all count, so tidying never starts, although
    compacting the batch to the readers' frontier (``Batch.collapses``) would leave one record per row;
    ``_may_repeat`` (the click-stream rule) gives up at the first retraction."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
        live = (_copies if shape == "copies" else _clicks)(a, lambda: eng.wait(timeout=T))
        xs = _settle(eng, ["ak", "input:a"], lambda x: x["records"] <= 2 * x["live"] + 8)
        assert {n: x["live"] for n, x in xs.items()} == {"ak": live, "input:a": live}
        assert all(x["records"] <= 2 * x["live"] + 8 for x in xs.values()), \
            {n: (x["records"], x["live"], x["batches"]) for n, x in xs.items()}


# -- 2. bug: df.use of a name this very block exports says the name is not exported at all ----------------------

def test_use_of_an_export_of_the_same_block_says_so():
    """A user who exports an arrangement and then, in the same ``with eng.dataflow(...)`` block (or
    ``%%dataflow`` cell), imports it by name as a later cell would, gets ``SchemaError: no arrangement named
    'ebs' is exported; the catalog has []``: the name *is* exported, by this block, and nothing tells the
    user that the ``Arranged`` that ``export`` returned is what to read here (or that exports are published
    when the block installs). Expected: the error names this dataflow as the exporter and says to use the
    arrangement ``export`` returned. The builder knows (``DataflowBuilder.export_holder`` answers "this
    dataflow" for that name); ``DataflowBuilder.use`` (engine/builder.py) only looks at the catalog."""
    with kp.Engine(workers=1) as eng:
        eng.input("edges", ["src", "dst"])
        with eng.dataflow("p") as df:
            df.input("edges").arrange_by("src").export("ebs")
            with pytest.raises(kp.KpgnbError) as info:
                df.use("ebs")
        msg = str(info.value)
        assert "this dataflow" in msg or "same dataflow" in msg or "'p'" in msg, msg
        assert "catalog has []" not in msg, msg


# -- 3. bug: stats() names a shared arrangement by one export and gives the key columns of another -----------------

def test_arrangement_exported_under_two_schemas_is_listed_with_its_names_key():
    """README: "A rename of an arranged collection is the same arrangement under the new names", and an
    arrangement may be exported as it is and renamed (``g.export("by_s")``, ``g.rename(s="name",
    k="id").export("by_name")``): one trace, two catalog entries, ``eng.catalog()`` right about both
    (by_s keyed by ``s``, by_name keyed by ``name``). ``eng.arrangements()`` (what ``eng.stats()`` and the
    dashboard's arrangement table show) lists the trace once, as ``by_name`` (the first export name in
    order) with ``key ['s']``: a column by_name does not have. Expected: the row's key columns are those of
    the export it is named after. Likely cause: engine/runtime.py ``Engine._arrangements`` names the row
    ``cnames[0]`` but takes ``key`` from ``Trace.key_names``, which the first ``Arranged`` over the trace set
    (collection.py ``Arranged.__init__``), not from that catalog entry."""
    with kp.Engine(workers=2) as eng:
        a = eng.input("a", ["k", "s"], dtypes={"k": int, "s": str})
        a.insert(pd.DataFrame({"k": [1, 2], "s": ["x", "y"]}))
        a.advance_to(1)
        with eng.dataflow("p") as df:
            g = df.input("a").arrange_by("s")
            g.export("by_s")
            g.rename(s="name", k="id").export("by_name")
        eng.wait(timeout=T)
        cat = eng.catalog()
        assert cat["by_s"]["key"] == ["s"] and cat["by_name"]["key"] == ["name"]
        rows = [r for r in eng.arrangements() if r["exports"]]
        assert len(rows) == 1 and sorted(rows[0]["exports"]) == ["by_name", "by_s"]
        r = rows[0]
        assert r["key"] == cat[r["name"]]["key"], (r["name"], r["key"], cat[r["name"]]["key"])


# -- 4. bug: a closed trace handle takes some frontier moves and refuses others for the wrong reason -------------------

def test_frontier_moves_on_a_closed_handle_say_it_is_closed():
    """A ``TraceHandle`` from ``eng.trace`` is closed (``h.close()``; its reads then raise ``UsageError: this
    trace handle is closed``). Moving its logical frontier afterwards answers three ways: the frontier it
    has is accepted silently, an earlier one raises "logical compaction frontier may only advance: {(3)} ->
    {(1)}" (as if the handle were open and the call wrong), and a later one raises "this trace handle is
    closed" but only after storing the new frontier (``h.logical`` then says {(4)}, a frontier no trace
    has). Expected: every move on a closed handle raises that it is closed and changes nothing. Likely
    cause: engine/trace.py ``TraceHandle._move`` compares and assigns the frontiers before touching
    ``self.trace`` (the property that raises for a closed handle)."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
        for e in range(4):
            a.insert([(e, e)])
            a.advance_to(e + 1)
        eng.wait(timeout=T)
        h = eng.trace("ak")
        h.set_logical_compaction(3)
        h.close()
        for f in (3, 1, 4):
            with pytest.raises(kp.UsageError, match="closed"):
                h.set_logical_compaction(f)
        assert h.logical == kp.Antichain([(3,)])


# -- 5. bug: kp.Antichain truncates float and str coordinates and drops a time of another depth --------------------

@pytest.mark.parametrize("times", [[(2.5,)], [("7",)], [(3,), (5, 1)]], ids=["float", "str", "depths"])
def test_antichain_refuses_times_that_are_not_int_tuples_of_one_depth(times):
    """README: ``h.set_logical_compaction(f)`` takes "``f`` a ``kp.Antichain`` of the trace's times or one time
    (an int epoch)"; an epoch given as a str or a float is refused elsewhere (``accumulate(at=2.5)``,
    ``set_logical_compaction(2.5)``: ``ArgumentTypeError``), and a frontier of another depth is refused at the
    call. Built through the public ``kp.Antichain`` the same mistakes pass: ``kp.Antichain([(2.5,)])`` is
    ``{(2)}`` (the handle then compacts away epoch 2's distinctions the user meant to keep until 2.5 — or
    refuses the move as going back, naming a frontier the user never wrote), ``kp.Antichain([("7",)])`` is
    ``{(7)}``, and ``kp.Antichain([(3,), (5, 1)])`` is ``{(3)}``: the depth-2 time is silently dropped as if
    (3,) <= (5, 1). Likely cause: engine/lattice.py ``Antichain.insert`` converts each coordinate with
    ``int()`` and ``leq`` compares times of different lengths with ``zip``, which stops at the shorter."""
    with pytest.raises((TypeError, ValueError)):
        kp.Antichain(times)


# -- 6. bug: a trace handle reads on after eng.close(), where a view of the same arrangement raises -----------------

def test_trace_handle_calls_after_engine_close_raise_engine_error():
    """README (Errors): "After ``eng.close()`` every call (inputs, ``insert``/``advance_to``, building, ``drop``,
    ``wait``, ``trace``, view reads, ``follow``) raises ``EngineError("the engine is closed")``", and (Many
    threads) ``eng.trace(name)`` reads are listed with view reads as reads of published snapshots. A view of
    an arrangement raises after close; a handle opened on the same arrangement before the close answers
    ``accumulate(0)`` with the rows, seeks keys, and takes ``set_logical_compaction`` (which tries to wake a
    scheduler that is gone): its reads look like those of a live engine, and it keeps the closed engine's
    trace in memory for as long as the handle lives. Expected: the handle's calls raise ``EngineError`` as
    the view's do (``close()`` of the handle itself may stay a no-op). Likely cause: engine/trace.py
    ``TraceHandle`` knows nothing of its engine (``View._check`` asks ``engine.closed`` first)."""
    eng = kp.Engine(workers=2)
    a = eng.input("a", ["k", "v"])
    with eng.dataflow("p") as df:
        df.input("a").arrange_by("k").export("ak")
        v = df.input("a").view("v")
    a.insert([(1, 1)])
    a.advance_to(1)
    eng.wait(timeout=T)
    h = eng.trace("ak")
    eng.close()
    with pytest.raises(kp.EngineError, match="closed"):
        v.to_pandas()
    with pytest.raises(kp.EngineError, match="closed"):
        h.accumulate(0)
    with pytest.raises(kp.EngineError, match="closed"):
        h.cursor(0).seek_keys(np.array([1]))
    with pytest.raises(kp.EngineError, match="closed"):
        h.set_logical_compaction(1)
    h.close()


# -- 7. bug: a physical compaction frontier may be set behind boundaries already merged away --------------------------

def test_physical_compaction_behind_merged_boundaries_is_refused_or_kept():
    """README: ``h.set_physical_compaction(f)`` "asks for batch boundaries kept at ``f`` (as in differential
    dataflow ...)", so that a reader can read the trace "through" ``f`` (``h.batches(shard, through=f)``,
    ``h.cursor(shard, through=f)``). In differential dataflow a handle starts at the trace's physical frontier
    and may only advance it. Here a handle opened before ten epochs holds its logical frontier at 0 (every
    epoch stays readable) but starts physically unconstrained, so the epochs are merged into batches [0, 8)
    and [8, 10); it then accepts ``set_physical_compaction(5)`` and ``2`` (going back), and reading through
    {(2)} gives no batch at all: a cursor through the frontier the handle asked for reads an empty trace,
    where epochs 0 and 1 hold two rows (``h.accumulate(1)`` gives them). Expected: a frontier that goes back, or behind the boundaries
    the trace still has, is refused (``UsageError``, as the logical frontier's "may only advance"), or the
    batches through it hold the rows before it. Likely cause: engine/trace.py ``TraceHandle._move`` checks
    only the logical frontier's order, and a new handle's physical frontier is ``Antichain()``
    (unconstrained) rather than what the trace can still honour."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"])
        with eng.dataflow("p") as df:
            df.input("a").arrange_by("k").export("ak")
        h = eng.trace("ak")
        for e in range(10):
            a.insert([(e, e)])
            a.advance_to(e + 1)
            eng.wait(timeout=T)
        assert h.logical == kp.Antichain([(0,)]) and len(h.accumulate(1)[2]) == 2
        refused = 0
        for f in (5, 2):
            try:
                h.set_physical_compaction(f)
            except kp.UsageError:
                refused += 1
        if not refused:
            from kpgnb.engine.cursor import accumulate_batches
            keys, vals, mult = accumulate_batches(list(h.batches(0, through=kp.Antichain([(2,)]))), 1, 1, 1, (1,))
            assert sorted(zip(keys[0].tolist(), vals[0].tolist())) == [(0, 0), (1, 1)], (keys, vals)
        h.close()


# -- checked, working ---------------------------------------------------------------------------------------

STRS = ["a", "bb", "é", "", "zz", "b"]
FLOATS = [0.5, -1.0, 2.25, 0.0, 3.5, -0.5]


def _reduce_fn():
    from numba import njit

    @njit
    def fn(vals, counts):  # values of positive multiplicity, and the sum of value * multiplicity
        n = 0
        s = 0
        for i in range(len(counts)):
            if counts[i] > 0:
                n += 1
            s += vals[i, 0] * counts[i]
        out = np.empty((1, 2), np.int64)
        out[0, 0] = n
        out[0, 1] = s
        return out, np.ones(1, np.int64)
    return fn


def _fm(k, s):
    rep = k % 3
    idx = np.repeat(np.arange(len(k)), rep)
    off = np.arange(len(idx)) - np.repeat(np.cumsum(rep) - rep, rep)
    return {"k": k[idx] + off, "s": s[idx]}, idx


def _build_ops(df, fn):
    a, b = df.input("A"), df.input("B")
    v = {"map": a.map(lambda k, s, f: {"k": k % 3, "s": s, "f": f * 2}),
         "filter": a.filter(lambda f: f > 0),
         "flat_map": a.flat_map(_fm, repeat=False),
         "join": a.join(b, on="k"),
         "join_str": a.join(b, left_on="s", right_on="t"),
         "semi": a.semijoin(b, on="k"),
         "anti": a.antijoin(b, on="k"),
         "count": a.count(by="s"),
         "distinct": a.distinct(),
         "threshold": a.threshold(by=["k"], fn=lambda c: np.where(c > 1, c, 0)),
         "min": a.min(by="k", col="f"),
         "max_str": a.max(by="k", col="s"),
         "sum": a.sum(by="s", col="f"),
         "reduce": a.reduce(by="s", fn=fn, columns=["k"], out={"n": "int64", "tot": "int64"}),
         "concat2": a.concat(a),
         "negate": a.negate(),
         "consolidate": a.consolidate()}
    return {n: c.view(n, history=100) for n, c in v.items()}


def _clean(c) -> dict:
    return {r: m for r, m in c.items() if m}


def _ref_ops(A: dict, B: dict) -> dict:
    """Every operator of ``_build_ops`` from scratch. A: (k, s, f) -> multiplicity; B: (k, t) -> m."""
    C = collections.Counter
    out = {}
    m = C()
    for (k, s, f), d in A.items():
        m[(k % 3, s, f * 2)] += d
    out["map"] = _clean(m)
    out["filter"] = {r: d for r, d in A.items() if r[2] > 0}
    fm = C()
    for (k, s, f), d in A.items():
        for j in range(k % 3):
            fm[(k + j, s)] += d
    out["flat_map"] = _clean(fm)
    j, js = C(), C()
    for (k, s, f), d in A.items():
        for (k2, t), d2 in B.items():
            if k == k2:
                j[(k, s, f, t)] += d * d2
            if s == t:
                js[(s, k, f, k2)] += d * d2
    out["join"], out["join_str"] = _clean(j), _clean(js)
    bk = C()
    for (k, t), d in B.items():
        bk[k] += d
    pos = {k for k, d in bk.items() if d > 0}
    out["semi"] = {r: d for r, d in A.items() if r[0] in pos}
    out["anti"] = {r: d for r, d in A.items() if r[0] not in pos}
    cnt, tk, kf, ks, sf, sk = C(), C(), C(), C(), C(), C()
    for (k, s, f), d in A.items():
        cnt[s] += d
        tk[k] += d
        kf[(k, f)] += d
        ks[(k, s)] += d
        sf[(s, f)] += d
        sk[(s, k)] += d
    out["count"] = {(s, c): 1 for s, c in cnt.items() if c}
    out["distinct"] = {r: 1 for r, d in A.items() if d > 0}
    out["threshold"] = _clean({(k,): (c if c > 1 else 0) for k, c in tk.items() if c})
    mn, mx, sm, groups = {}, {}, {}, {}
    for (k, f), d in kf.items():
        if d > 0:
            mn[k] = min(mn.get(k, f), f)
    out["min"] = {(k, f): 1 for k, f in mn.items()}
    for (k, s), d in ks.items():
        if d > 0:
            mx[k] = max(mx.get(k, s), s)
    out["max_str"] = {(k, s): 1 for k, s in mx.items()}
    for (s, f), d in sorted(sf.items(), key=lambda x: x[0][1]):
        if d:
            sm[s] = sm.get(s, 0.0) + f * d
    out["sum"] = {(s, v): 1 for s, v in sm.items()}
    for (s, k), d in sk.items():
        if d:
            groups.setdefault(s, []).append((k, d))
    out["reduce"] = {(s, sum(1 for k, d in g if d > 0), sum(k * d for k, d in g)): 1 for s, g in groups.items()}
    out["concat2"] = {r: 2 * d for r, d in A.items()}
    out["negate"] = {r: -d for r, d in A.items()}
    out["consolidate"] = dict(A)
    return out


def _norm(bag: dict) -> dict:
    return {tuple(x if isinstance(x, str) else (float(x) if isinstance(x, (float, np.floating)) else int(x))
                  for x in r): m for r, m in bag.items()}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_non_loop_operator_over_str_and_float_columns_matches_a_reference(workers):
    """Join (int and str keys), semijoin, antijoin, a numba reduce, count, distinct, threshold, min (float),
    max (str), sum (float), concat, negate, map, filter, flat_map and consolidate over a random update stream
    with retractions (rows removed more often than inserted too) of int, str and float columns: every epoch,
    read back with ``at=``, equals a from-scratch reference. (About 60 seeds x W = 1, 2, 3 in the attack.)"""
    fn = _reduce_fn()
    for seed in range(2):
        rng = random.Random(seed * 10 + workers)
        with kp.Engine(workers=workers) as eng:
            A = eng.input("A", ["k", "s", "f"], dtypes={"k": int, "s": str, "f": float})
            B = eng.input("B", ["k", "t"], dtypes={"k": int, "t": str})
            with eng.dataflow("p") as df:
                views = _build_ops(df, fn)
            ra, rb, hist = collections.Counter(), collections.Counter(), []
            for e in range(6):
                ua, ub = [], []
                for _ in range(rng.randrange(6)):
                    if ra and rng.random() < 0.4:
                        ua.append((rng.choice(sorted(ra)), -rng.choice([1, 1, 2])))
                    else:
                        ua.append(((rng.randrange(5), rng.choice(STRS), rng.choice(FLOATS)), rng.choice([1, 1, 2, -1])))
                for _ in range(rng.randrange(4)):
                    if rb and rng.random() < 0.4:
                        ub.append((rng.choice(sorted(rb)), -1))
                    else:
                        ub.append(((rng.randrange(5), rng.choice(STRS)), rng.choice([1, 1, -1])))
                if ua:
                    A.update(pd.DataFrame([r for r, _ in ua], columns=["k", "s", "f"]), [d for _, d in ua])
                if ub:
                    B.update(pd.DataFrame([r for r, _ in ub], columns=["k", "t"]), [d for _, d in ub])
                for r, d in ua:
                    ra[r] += d
                for r, d in ub:
                    rb[r] += d
                ra, rb = collections.Counter(_clean(ra)), collections.Counter(_clean(rb))
                hist.append((dict(ra), dict(rb)))
                A.advance_to(e + 1)
                B.advance_to(e + 1)
                if rng.random() < 0.5:
                    eng.wait(timeout=T)
            eng.wait(timeout=T)
            for e, (xa, xb) in enumerate(hist):
                ref = _ref_ops(xa, xb)
                for name, view in views.items():
                    assert _norm(_bag(view, e)) == _norm(ref[name]), (seed, name, e)


@pytest.mark.parametrize("workers,effort", [(1, "eager"), (2, "default"), (3, "lazy")])
def test_late_importers_and_a_replaced_exporter_read_every_epoch_exactly(workers, effort):
    """An exporter of an input arranged by a str column and of a count; a dataflow installed late imports
    both (a join of another input against the str arrangement, the count as it is) while an ``eng.trace``
    handle lags two epochs behind; the exporter is then replaced by a version that filters (the importer
    keeps the old arrangement, ``as~1``), and a third dataflow installed later imports the new one. Every
    view, read at every epoch from its start with ``at=``, equals a from-scratch reference."""
    rng = random.Random(workers)
    m1, m2, m3 = 2, 5, 8
    C = collections.Counter
    with kp.Engine(workers=workers, effort=effort) as eng:
        A = eng.input("A", ["k", "s", "f"], dtypes={"k": int, "s": str, "f": float})
        B = eng.input("B", ["k", "t"], dtypes={"k": int, "t": str})
        with eng.dataflow("p") as df:
            a = df.input("A")
            a.arrange_by("s").export("as")
            a.count(by="k").export("ck")
        ra, rb, hist, views, h = C(), C(), [], {}, None  # views: name -> (view, the epoch it starts at)
        for e in range(11):
            if e == m1:
                with eng.dataflow("q") as df:
                    views["qj"] = (df.input("B").join(df.use("as"), left_on="t", right_on="s").view("qj", history=100), e - 1)
                    views["qc"] = (df.use("ck").view("qc", history=100), e - 1)
                h = eng.trace("as")
            if e == m2:
                with eng.dataflow("p", replace=True) as df:
                    a = df.input("A")
                    a.filter(lambda f: f > 0).arrange_by("s").export("as")
                    a.count(by="k").export("ck")
            if e == m3:
                with eng.dataflow("r") as df:
                    views["rj"] = (df.input("B").join(df.use("as"), left_on="t", right_on="s").view("rj", history=100), e - 1)
            for _ in range(rng.randrange(6)):
                if ra and rng.random() < 0.4:
                    r, d = rng.choice(sorted(ra)), -1
                else:
                    r, d = (rng.randrange(5), rng.choice(STRS), rng.choice(FLOATS)), rng.choice([1, 1, 2, -1])
                A.update(pd.DataFrame([r], columns=["k", "s", "f"]), [d])
                ra[r] += d
            for _ in range(rng.randrange(4)):
                if rb and rng.random() < 0.4:
                    r, d = rng.choice(sorted(rb)), -1
                else:
                    r, d = (rng.randrange(5), rng.choice(STRS)), rng.choice([1, 1, -1])
                B.update(pd.DataFrame([r], columns=["k", "t"]), [d])
                rb[r] += d
            ra, rb = C(_clean(ra)), C(_clean(rb))
            hist.append((dict(ra), dict(rb)))
            A.advance_to(e + 1)
            B.advance_to(e + 1)
            if rng.random() < 0.5 or h is not None:
                eng.wait(timeout=T)
            if h is not None and e - 2 >= h.logical.elements[0][0]:
                h.set_logical_compaction(e - 2)
        eng.wait(timeout=T)
        for e, (xa, xb) in enumerate(hist):
            for name, (view, born) in views.items():
                if e < born:
                    with pytest.raises(kp.CompactedError, match="started from its inputs"):
                        view.to_pandas(at=e)
                    continue
                if name == "qc":
                    cnt = C()
                    for (k, s, f), d in xa.items():
                        cnt[k] += d
                    expect = {(k, n): 1 for k, n in cnt.items() if n}
                else:
                    j = C()
                    for (k2, t), d2 in xb.items():
                        for (k, s, f), d in xa.items():
                            if s == t and (name == "qj" or f > 0):
                                j[(t, k2, k, f)] += d * d2
                    expect = _clean(j)
                assert _norm(_bag(view, e)) == _norm(expect), (name, e)
        assert sorted(eng.catalog()) == ["as", "as~1", "ck", "ck~1"]
        h.close()
