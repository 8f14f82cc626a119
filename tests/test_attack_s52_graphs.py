"""Session 52 attack on kpgnb.graphs and ``Collection.ife`` in every memory mode (issue 14, README "Memory
modes for recursive graph queries") and on issue 14's benchmark, from angles earlier rounds did not take:

- the values a custom ``ife`` message may return for an int64 state (README: "an int64 state refuses float
  messages rather than truncating them"): whole floats and unsigned ints past int64's range;
- the sender's out-degree (``degree``) past 2**53 (edge multiplicities), against ``memory="full"`` bit for bit;
- what ``ife`` says when its own arguments name one column twice (the state's value is a key column, the
  edges' src is their dst), and when ``name=`` is not a str;
- ``python -m bench.memory_modes`` given options it cannot run (unknown query names, drop knobs ``kp.Drop``
  refuses, zero batches, zero sources, more edges than the nodes hold), with nothing written to
  bench/results/;
- ``eng.stats()["ife"]`` against ``eng.arrangements(live=True)`` while edges and sources stream: the drop
  mode's live timeline plus its remembered dropped pairs is jod's live timeline, at W = 1, 2, 3;
- readers of a view of a many-round query while epochs land (a reader sees a whole epoch or nothing);
- ``graphs.propagate_min_label`` (a public helper of the module) with and without delayed label entry,
  labels added, changed and removed, against a from-scratch reference at W = 1, 2, 3.

Probed and found holding (not all kept as tests): every query in every mode (full, jod, drop with degree/
random policies and exact/bloom trackers) against from-scratch references on random multigraph streams with
self-loops, duplicate edges, deletes of every copy and heavy source churn at W = 1, 2, 3; scc under
retractions; queries on renamed and reversed exports; queries installed on an export while another thread
streams updates (final and historical epochs); NaN/inf float states under min and max; int sums whose
partial products leave int64.

The bugs are the xfail tests.
"""
from __future__ import annotations

import heapq
import random
import threading
from collections import Counter, defaultdict

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

WAIT = 60


def _rows(view, cols=None):
    """A view's rows as sorted tuples of Python scalars (each repeated by its multiplicity)."""
    df = view.to_pandas()
    if cols is not None:
        df = df[cols]
    return sorted(tuple(x.item() if hasattr(x, "item") else x for x in r) for r in df.itertuples(index=False, name=None))


def _sssp_ref(E, S):
    adj = defaultdict(list)
    for (u, v, w), m in E.items():
        if m > 0:
            adj[u].append((v, w))
    out = []
    for s in set(S):
        d = {s: 0}
        pq = [(0, s)]
        while pq:
            dd, u = heapq.heappop(pq)
            if dd > d[u]:
                continue
            for v, w in adj[u]:
                if dd + w < d.get(v, 1 << 62):
                    d[v] = dd + w
                    heapq.heappush(pq, (dd + w, v))
        out += [(s, v, x) for v, x in d.items()]
    return sorted(out)


def _triangle(memory, build, workers=2, timeout=20):
    """Build ``build(edges, starts, memory)`` over the edges 0 -> 1 -> 2 -> 0 (weights 2, 3, 1) and the start
    node 0; returns the view's rows, or the exception waiting for it raised."""
    with kp.Engine(workers=workers) as eng:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 2), (1, 2, 3), (2, 0, 1)])
        S = eng.input("s", ["node"], rows=[(0,)])
        with eng.dataflow("q") as df:
            v = build(df.input("edges"), df.input("s"), memory).view("v")
        E.advance_to(1)
        S.advance_to(1)
        try:
            eng.wait(v, timeout=timeout)
        except Exception as ex:  # noqa: BLE001 - returned for the test to judge
            return ex
        return _rows(v)


def _int_state(s):
    return s.map(lambda node: {"node": node, "d": np.zeros(len(node), np.int64)})


# -- bugs: what a message may return for an int64 state ------------------------------------------------------

@pytest.mark.parametrize("kind", ["float", "uint64"])
@pytest.mark.parametrize("memory", ["full", "jod", "drop"])
def test_message_values_past_int64_are_refused_not_wrapped(memory, kind):
    """README: "an int64 state refuses float messages rather than truncating them". A message returning the
    whole float 2.0**63 (or the uint64 2**63 + 5) for an int64 state has no int64 value. Today
    ``engine/operators/ife.py`` ``message_ints`` takes any whole float (``whole``) and any unsigned int and
    ``astype(np.int64)``s it: 2.0**63 becomes -2**63 (and d + 2.0**63 never settles in full mode: the
    dataflow runs until dropped), 2**63 + 5 wraps to -2**63 + 5, a silent wrong distance; ``jod`` and
    ``drop`` then fail saying "a state of -9223372036854775808 (the int64 minimum) cannot be kept", a value
    the user never returned. Every mode should fail the dataflow saying the message's value is outside
    int64."""
    if kind == "float":
        msg = lambda d: np.full(len(d), 2.0 ** 63)  # noqa: E731
    else:
        msg = lambda d: np.full(len(d), 2 ** 63 + 5, np.uint64)  # noqa: E731
    got = _triangle(memory, lambda e, s, m: _int_state(s).ife(e, key="node", node="node", value="d", message=msg,
                                                              agg="min", memory=m), timeout=15)
    assert isinstance(got, kp.DataflowError), got
    assert "int64 minimum" not in str(got) and "int64" in str(got), str(got)


@pytest.mark.parametrize("memory", ["jod", "drop"])
def test_out_degree_past_2_53_reaches_the_message_exactly_in_every_mode(memory):
    """README: every mode gives the same collection, bit for bit. A message reading ``degree`` (the sender's
    out-degree, edge multiplicities summed) gets it exactly in ``full`` (``edges.count(by=src)``), but
    ``engine/operators/ife.py`` ``IfeOp._values`` sums the multiplicities with ``np.bincount(out.q,
    weights=out.counts)``, in float64, and casts back: node 0 with edges to 1 (multiplicity 2**53) and to
    2 (multiplicity 1) has out-degree 2**53 + 1 in full mode and 2**53 in jod and drop (an int message,
    e.g. ``d // degree`` or ``degree`` itself, then differs; ``_degrees``, for the degree policy, sums the
    same way)."""
    def run(mem):
        with kp.Engine(workers=1) as eng:
            E = eng.input("edges", ["src", "dst"])
            E.update([(0, 1), (0, 2)], [2 ** 53, 1])
            S = eng.input("s", ["node"], rows=[(0,)])
            with eng.dataflow("q") as df:
                v = _int_state(df.input("s")).ife(df.input("edges"), key="node", node="node", value="d",
                                                  message=lambda degree: degree, agg="max", memory=mem).view("v")
            E.advance_to(1)
            S.advance_to(1)
            eng.wait(v, timeout=WAIT)
            return _rows(v)
    full = run("full")
    assert full == [(0, 0), (1, 2 ** 53 + 1), (2, 2 ** 53 + 1)]
    assert run(memory) == full


@pytest.mark.parametrize("memory", ["full", "jod"])
@pytest.mark.parametrize("bad", [-1, float("nan")])
def test_sssp_bad_weight_on_str_node_ids_names_the_edge(memory, bad):
    """README: "sssp checks every weight as it arrives: a negative one (or NaN) fails the dataflow, naming
    the edge". Over str node ids the dataflow fails with ``AttributeError: 'str' object has no attribute
    'item'``: ``kpgnb/graphs.py`` ``_non_negative_weights`` formats ``src[bad][0].item()``, and a str column
    reaches the filter as Python strs. The message should name the weight and the edge b -> c."""
    wdt = "int64" if isinstance(bad, int) else "float64"
    with kp.Engine(workers=1) as eng:
        E = eng.input("edges", ["src", "dst", "w"], dtypes=["str", "str", wdt], rows=[("a", "b", 1), ("b", "c", bad)])
        S = eng.input("sources", ["source"], dtypes=["str"], rows=[("a",)])
        with eng.dataflow("q") as df:
            v = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("v")
        E.advance_to(1)
        S.advance_to(1)
        with pytest.raises(kp.DataflowError) as info:
            eng.wait(v, timeout=WAIT)
        msg = str(info.value)
        assert "non-negative" in msg and "'b'" in msg and "'c'" in msg, msg


# -- bugs: ife's own arguments naming one column twice -------------------------------------------------------

@pytest.mark.parametrize("case", ["value_is_the_node", "value_is_a_group", "src_is_dst"])
def test_ife_arguments_naming_one_column_twice_are_refused_naming_the_arguments(case):
    """``ife(key=, node=, value=, src=, dst=)`` with the state's value column also a key column, or the edges'
    src column also their dst, is refused when built (good) but with ``SchemaError: duplicate column names:
    ['node']`` from an internal ``select`` (``engine/ife.py`` ``ife``: ``start.select(*key, value)`` and
    ``edges.select(*(src + dst + payload))``), which names neither the ife nor which of its arguments
    clash; every other bad ife argument is refused as ``ife('NAME'): ...`` naming it."""
    with kp.Engine(workers=1) as eng:
        eng.input("edges", ["src", "dst", "w"])
        eng.input("s", ["node"])
        with pytest.raises(kp.SchemaError) as info:
            with eng.dataflow("q") as df:
                e, s = df.input("edges"), df.input("s")
                if case == "value_is_the_node":
                    s.map(lambda node: {"node": node}).ife(e, key="node", node="node", value="node",
                                                           message=lambda node: node + 1, name="mine")
                elif case == "value_is_a_group":
                    s.map(lambda node: {"g": node, "node": node}).ife(e, key=["g", "node"], node="node", value="g",
                                                                      message=lambda g: g + 1, name="mine")
                else:
                    _int_state(s).ife(e, key="node", node="node", value="d", src="src", dst="src",
                                      message=lambda d: d + 1, name="mine")
        msg = str(info.value)
        assert "ife('mine')" in msg, msg
        assert ("value" in msg) if case.startswith("value") else ("src" in msg and "dst" in msg), msg


@pytest.mark.parametrize("name", [None, 5, "", ["x"]])
def test_ife_name_must_be_a_non_empty_str(name):
    """``ife(name=)`` names the operator in ``eng.stats()["ife"]`` (``"q: ife 'sssp'"``) and its
    arrangements in ``eng.arrangements()`` (``"sssp (state timeline)"``). ``engine/ife.py`` ``ife`` never
    checks it: ``name=None`` or ``5`` gives arrangements named ``"None (state timeline)"`` / ``"5 (state
    timeline)"``, ``""`` one named ``" (state timeline)"``, and ``name=["x"]`` fails with the internal
    ``TypeError: unhashable type: 'list'`` (``_unique_name``), where a view's name of the wrong type is
    refused as "a view's name is a non-empty str". It should be refused as such, naming ``name=``."""
    with kp.Engine(workers=1) as eng:
        eng.input("edges", ["src", "dst", "w"])
        eng.input("s", ["node"])
        with pytest.raises(kp.KpgnbError, match="name"):
            with eng.dataflow("q") as df:
                _int_state(df.input("s")).ife(df.input("edges"), key="node", node="node", value="d",
                                              message=lambda d: d + 1, memory="jod", name=name)


# -- bugs: python -m bench.memory_modes (issue 14's benchmark) with parameters it cannot run -----------------

_TINY = {"--nodes": "64", "--edges": "200", "--batches": "2", "--queries": "spsp", "--modes": "jod",
         "--budget-modes": "", "--sweep-p": "", "--isolate": "none", "--sources": "2"}


def _argv(**over):
    """The tiny benchmark's command line, with options replaced (``drop_p="2"`` for ``--drop-p 2``)."""
    opts = dict(_TINY, **{"--" + k.replace("_", "-"): v for k, v in over.items()})
    return ["--quick"] + [x for k, v in opts.items() for x in (k, v)]


class _WouldRun(Exception):
    """Raised in place of the benchmark's work: the arguments were taken."""


@pytest.fixture
def bench_mm(monkeypatch):
    """bench.memory_modes with nothing written to bench/results/."""
    pytest.importorskip("scipy")
    from bench import memory_modes as M
    monkeypatch.setattr(M, "write_result", lambda name, payload, quick=False: "(not written)")
    return M


def _refused_before_running(M, monkeypatch, argv):
    """Run ``M.main(argv)`` with the data generation replaced by a stand-in that raises ``_WouldRun``:
    returns the argparse exit status, or raises ``_WouldRun`` when the arguments were accepted."""
    def would_run(cfg):
        raise _WouldRun(f"bench.memory_modes took {argv}")
    monkeypatch.setattr(M, "data", would_run)
    with pytest.raises(SystemExit) as info:
        M.main(argv)
    return info.value.code


@pytest.mark.parametrize("name", ["foo", "sssp"])
def test_bench_memory_modes_refuses_an_unknown_query_name(bench_mm, monkeypatch, name):
    """``--modes foo`` is an argparse error ("unknown mode 'foo'; choose from [...]"), but ``--queries foo``
    (or ``sssp``, the ``kpgnb.graphs`` name of the benchmark's ``spsp``) is taken: the benchmark runs its
    minutes of other jobs, skips the query, and reports "Degree vs Random, foo at p=0.5: Degree error"
    (``bench/memory_modes.py`` ``main`` never checks ``queries`` against ``QUERIES``)."""
    assert _refused_before_running(bench_mm, monkeypatch, _argv(queries=name)) == 2


@pytest.mark.parametrize("opt", [{"drop_p": "2"}, {"sweep_p": "1.5"}, {"bloom_bits": "3"}])
def test_bench_memory_modes_refuses_drop_knobs_kp_drop_refuses(bench_mm, monkeypatch, opt):
    """``parse_args`` checks that integer options are not negative "before anything runs", but the drop
    probability (``--drop-p``, ``--sweep-p``: a probability, 0 to 1) and ``--bloom-bits`` (64 or more, or 0
    for the default) are passed to ``kp.Drop`` in the child processes, where each drop-mode run fails
    (``SchemaError: Drop(p=2.0): p is a probability``) and the summary says "Degree error" after the whole
    run. They should be argparse errors, as ``--k -1`` is."""
    assert _refused_before_running(bench_mm, monkeypatch, _argv(**opt)) == 2


@pytest.mark.parametrize("opt", [{"rtol": "-1"}, {"delete_fraction": "2"}, {"budget_mb": "-1"},
                                 {"job_timeout": "0"}])
def test_bench_memory_modes_refuses_float_options_out_of_range(bench_mm, monkeypatch, opt):
    """``bench/common.py`` ``parse_args`` checks the integer options only. ``--rtol -1`` (PageRank's
    relative tolerance) is taken, and the benchmark then marks kpgnb's PageRank, equal to NumPy's, as a
    ``failure: "wrong answer"`` in its results; ``--delete-fraction 2`` (a fraction), ``--budget-mb -1`` and
    ``--job-timeout 0`` (every job killed at once) are taken too. They should be argparse errors before
    anything runs, as ``--k -1`` is."""
    assert _refused_before_running(bench_mm, monkeypatch, _argv(**opt)) == 2


def test_bench_memory_modes_zero_batches_is_refused_or_reported(bench_mm, capsys):
    """``--batches 0`` passes ``parse_args`` (integers >= 0), runs every job and SCRATCH, then fails in
    ``bench/memory_modes.py`` ``summarize``: ``s["algo_p50_ms"] / r["p50_ms"]`` with both None (no batch
    timed), a TypeError, and no result is written. It should be an argparse error (at least one batch) or
    a report without per-batch figures."""
    try:
        out = bench_mm.main(_argv(batches="0"))
    except SystemExit as ex:
        assert ex.code == 2
    else:
        assert isinstance(out, dict) and out["runs"], out


class _Stuck(Exception):
    """Raised into code that kept going far past what its arguments need."""


def _outcome(M, monkeypatch, argv):
    """Run ``M.main(argv)`` with the jobs replaced by a stand-in (``_WouldRun``: the data were made and the
    benchmark would run); returns "refused" (an argparse error), "ran", or the exception's name."""
    def would_run(*a, **k):
        raise _WouldRun("data made")
    monkeypatch.setattr(M, "run_all", would_run)
    try:
        M.main(argv)
    except SystemExit as ex:
        return "refused" if ex.code == 2 else f"exit {ex.code}"
    except _WouldRun:
        return "ran"
    except Exception as ex:  # noqa: BLE001 - the test names it
        return f"{type(ex).__name__}: {ex}"
    return "ran"


def test_bench_memory_modes_zero_sources_does_not_loop_for_ever(bench_mm, monkeypatch):
    """``--sources 0`` passes ``parse_args`` (integers >= 0); ``data`` then calls ``_budget_counts``, whose
    ``while c <= budget_max: counts.append(c); c *= 2`` never ends for c = 0 (even with no budget modes):
    the benchmark hangs while its memory grows. It should be an argparse error (sources >= 1), or run.
    (Here a line tracer stops ``_budget_counts`` after 100,000 lines.)"""
    import sys
    code = bench_mm._budget_counts.__code__
    lines = [0]

    def local(frame, event, arg):
        if event == "line":
            lines[0] += 1
            if lines[0] > 100_000:
                raise _Stuck("_budget_counts ran 100,000 lines")
        return local

    old = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        got = _outcome(bench_mm, monkeypatch, _argv(sources="0"))
    finally:
        sys.settrace(old)
    assert got in ("refused", "ran"), got


def test_bench_memory_modes_more_edges_than_the_graph_holds_is_refused(bench_mm, monkeypatch):
    """``--nodes 2 --edges 200``: two nodes hold two edges without self-loops or duplicates, but
    ``bench/memory_modes.py`` ``make_graph`` keeps drawing R-MAT edges until it has 200 distinct ones,
    doubling the draw each of 20 times (276 * 2**19 pairs at the last: ~10 GB), so the program runs out of
    memory (MemoryError under a 512 MiB cap after 5 s, minutes of swapping without one) instead of saying
    that the graph cannot have that many edges (``--nodes 0`` is the same). (Here a draw of more than 64
    times the first is stopped.)"""
    real = bench_mm._rmat

    def rmat(scale, want, rng):
        if want > 64 * (int(200 * 1.3) + 16):
            raise _Stuck(f"an R-MAT draw of {want} pairs for 200 edges on {1 << scale} nodes")
        return real(scale, want, rng)
    monkeypatch.setattr(bench_mm, "_rmat", rmat)
    got = _outcome(bench_mm, monkeypatch, _argv(nodes="2"))
    assert got == "refused" or (got.startswith("ValueError") and "edges" in got), got


def test_bench_memory_modes_tiny_command_line_is_taken_and_unknown_modes_refused(bench_mm, monkeypatch):
    """The harness of the benchmark tests above: the tiny command line makes its data and would run, and
    ``--modes foo`` is the argparse error the other options should give."""
    assert _outcome(bench_mm, monkeypatch, _argv()) == "ran"
    assert _outcome(bench_mm, monkeypatch, _argv(modes="foo")) == "refused"


# -- what holds ------------------------------------------------------------------------------------------------

def _random_edges(rnd, E, n, k):
    """k random edge changes (inserts, some duplicates and self-loops, deletes), applied to the Counter E."""
    rows, diffs = [], []
    for _ in range(k):
        pos = [x for x in E if E[x] > 0]
        if pos and rnd.random() < 0.4:
            x = rnd.choice(pos)
            rows.append(x)
            diffs.append(-1)
            E[x] -= 1
        else:
            u = rnd.randrange(n)
            x = (u, u if rnd.random() < 0.1 else rnd.randrange(n), rnd.randrange(0, 4))
            rows.append(x)
            diffs.append(1)
            E[x] += 1
    for x in [x for x, m in E.items() if not m]:
        del E[x]
    return rows, diffs


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_drop_modes_keep_jods_timeline_between_kept_entries_and_remembered_pairs(workers):
    """At every epoch of a random stream (edges and sources in and out): the exact tracker's ``dropped``
    (pairs remembered now) plus the drop mode's live timeline entries is jod's live timeline; p=1 keeps no
    entry; p=0 drops none; the Bloom tracker's bytes are its filter's bits / 8; answers equal Dijkstra's."""
    modes = {"jod": ("jod", None), "half": ("drop", kp.Drop(p=0.5, policy="random", tracker="exact", seed=7)),
             "all": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
             "none": ("drop", kp.Drop(p=0.0, policy="random", tracker="exact")),
             "deg": ("drop", kp.Drop(p=0.7, policy="degree", tracker="exact", tau_min=1)),
             "bloom": ("drop", kp.Drop(p=0.5, policy="random", tracker="bloom", bloom_bits=1000))}
    rnd = random.Random(52 + workers)
    E, S = Counter(), Counter({0: 1, 5: 1})
    with kp.Engine(workers=workers) as eng:
        Ein = eng.input("edges", ["src", "dst", "w"])
        Sin = eng.input("sources", ["source"], rows=[(0,), (5,)])
        views = {}
        for name, (mem, drop) in modes.items():
            with eng.dataflow(name) as df:
                views[name] = graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop).view("v")
        for ep in range(1, 7):
            rows, diffs = _random_edges(rnd, E, 14, 25 if ep == 1 else rnd.choice([1, 3, 6]))
            Ein.update(rows, diffs)
            s = rnd.randrange(15)
            if S[s] and rnd.random() < 0.5:
                Sin.remove([(s,)])
                S[s] -= 1
            else:
                Sin.insert([(s,)])
                S[s] += 1
            S = +S
            Ein.advance_to(ep)
            Sin.advance_to(ep)
            want = _sssp_ref(E, list(S))
            for name, v in views.items():
                eng.wait(v, timeout=WAIT)
                assert _rows(v, ["source", "node", "dist"]) == want, (name, ep)
            st = eng.stats(live=True)
            live = {a["dataflow"]: a["live"] for a in st["arrangements"] if a["name"] == "sssp (state timeline)"}
            ife = {r["dataflow"]: r for r in st["ife"]}
            for name in ("half", "all", "none", "deg"):
                assert live[name] + ife[name]["dropped"] == live["jod"], (name, ep, live, ife[name])
                assert ife[name]["dropped"] <= ife[name]["dropped_total"]
            assert live["all"] == 0 and ife["none"]["dropped_total"] == 0
            assert ife["jod"]["recomputed"] == ife["none"]["recomputed"] == 0
            assert ife["bloom"]["bytes"]["dropped_tracker"] * 8 == ife["bloom"]["bloom"]["bits"] == 1024


def _min_label_ref(E, L):
    """Each node's smallest label among the labelled nodes that reach it (itself included)."""
    out_ = defaultdict(set)
    for (u, v), m in E.items():
        if m > 0:
            out_[u].add(v)
    best = {}
    for u, lab in L.items():
        seen, todo = {u}, [u]
        while todo:
            for y in out_[todo.pop()]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        for y in seen:
            best[y] = min(best.get(y, 1 << 62), lab)
    return sorted(best.items())


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_propagate_min_label_with_and_without_delayed_labels_under_changes(workers):
    """``graphs.propagate_min_label`` (plain, and with ``label_rounds=graphs.bit_length_rounds``: labels
    delayed by bit length, negative and 2**40 labels among them) while edges come and go and labels are
    added, changed and removed: every epoch equals a from-scratch reference."""
    rnd = random.Random(9 + workers)
    E, L = Counter(), {}
    with kp.Engine(workers=workers) as eng:
        Ein = eng.input("edges", ["src", "dst"])
        Nin = eng.input("nodes", ["node", "label"])
        with eng.dataflow("q") as df:
            e, n = df.input("edges"), df.input("nodes")
            plain = graphs.propagate_min_label(e, n).view("plain")
            delayed = graphs.propagate_min_label(e, n, label_rounds=graphs.bit_length_rounds).view("delayed")
        for ep in range(1, 8):
            rows, diffs = _random_edges(rnd, E, 10, rnd.choice([1, 2, 5]))
            Ein.update([r[:2] for r in rows], diffs)
            E2 = Counter()
            for (u, v, _), m in E.items():
                E2[(u, v)] += m
            for _ in range(rnd.choice([0, 1, 2])):
                u = rnd.randrange(10)
                if u in L:
                    Nin.remove([(u, L.pop(u))])
                if rnd.random() < 0.7:
                    L[u] = rnd.choice([-3, 0, 1, 5, 17, 200, 2 ** 40])
                    Nin.insert([(u, L[u])])
            Ein.advance_to(ep)
            Nin.advance_to(ep)
            want = _min_label_ref(E2, L)
            for v in (plain, delayed):
                eng.wait(v, timeout=WAIT)
                assert _rows(v, ["node", "label"]) == want, (v, ep)


@pytest.mark.parametrize("memory", ["full", "jod"])
def test_readers_of_a_many_round_sssp_see_whole_epochs_only(memory):
    """A 40-node path whose first edge's weight changes every epoch (every distance moves, 40 rounds an
    epoch): a thread reading the view meanwhile always reads one epoch's whole answer."""
    n = 40

    def answer(w0):
        return tuple(sorted([(0, 0, 0)] + [(0, i, w0 + i - 1) for i in range(1, n + 1)]))

    valid = {answer(w) for w in range(1, 30)}
    with kp.Engine(workers=2) as eng:
        E = eng.input("edges", ["src", "dst", "w"], rows=[(0, 1, 1)] + [(i, i + 1, 1) for i in range(1, n)])
        S = eng.input("sources", ["source"], rows=[(0,)])
        with eng.dataflow("q") as df:
            v = graphs.sssp(df.input("edges"), df.input("sources"), memory=memory).view("v")
        E.advance_to(1)
        S.advance_to(1)
        eng.wait(v, timeout=WAIT)
        bad, reads, stop = [], [0], threading.Event()

        def reader():
            while not stop.is_set():
                got = tuple(_rows(v, ["source", "node", "dist"]))
                reads[0] += 1
                if got not in valid:
                    bad.append(got)
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            w = 1
            for ep in range(2, 16):
                nw = 1 + (ep * 5) % 29
                E.remove([(0, 1, w)])
                E.insert([(0, 1, nw)])
                w = nw
                E.advance_to(ep)
                S.advance_to(ep)
            eng.wait(v, timeout=WAIT)
        finally:
            stop.set()
            t.join(10)
        assert not t.is_alive()
        assert not bad, bad[:1]
        assert reads[0] > 0
        assert tuple(_rows(v, ["source", "node", "dist"])) == answer(w)
