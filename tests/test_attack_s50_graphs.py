"""Session 50 attack on kpgnb.graphs in every memory mode (README "Operators" on ``kpgnb.graphs`` and
"Memory modes for recursive graph queries"), from angles earlier rounds did not take:

- ``pagerank(iterations=N)`` (any ``rounds=``) with N far beyond the round where the graph settles;
- ``rpq`` automaton states and labels outside int64 (the automaton is "checked when the dataflow is built");
- float node ids (NaN, -0.0, infinities) and int64 extremes as ids, in every query and mode;
- sources computed from the edges in the same dataflow (they change in the same epochs as the edges);
- rpq and pagerank together over str / sparse int64 ids, disconnecting deletes, W = 2 and 3;
- ``eng.stats()["ife"]`` figures at a first load: what ``drop`` keeps plus what it drops is what ``jod``
  keeps, ``p=0`` keeps exactly what ``jod`` keeps, the exact tracker's bytes are its arrangement's.

The bugs are the xfail tests.
"""
from __future__ import annotations

import math
import re
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

WAIT = 60


def _rows(view):
    """A view's rows, each repeated by its multiplicity, as sorted tuples of Python scalars (repr order,
    so NaN ids sort too)."""
    df = view.to_pandas(diffs=True)
    out = []
    for r in df.itertuples(index=False, name=None):
        out += [tuple(x.item() if hasattr(x, "item") else x for x in r[:-1])] * int(r[-1])
    return sorted(out, key=repr)


def _same(got, want):
    def eq(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return (a != a and b != b) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return a == b
    return len(got) == len(want) and all(len(x) == len(y) and all(map(eq, x, y)) for x, y in zip(got, want))


# -- rounds= past the fixed point -----------------------------------------------------------------------------
# ``ife(rounds=N)`` (pagerank's iterations) means "at most N rounds": full mode (differential iterate) stops
# as soon as a round changes nothing. jod and drop loop over every round up to N at every epoch that has
# any change (``engine/operators/ife.py``, ``_rounds``: with ``spec.rounds`` set, the only way out before
# N is "nothing differs and nothing static changed", and the start rows / edge changes are "static"), so a
# chain that settles at round 2 costs N rounds per epoch: pagerank(iterations=2**62) never answers there,
# where full answers at once.

LONG = 20_000


@pytest.mark.parametrize("memory,drop", [("jod", None),
                                         ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
                                         ("drop", kp.Drop(p=0.5, policy="degree", tracker="bloom"))],
                         ids=["jod", "drop_exact", "drop_bloom"])
def test_pagerank_many_iterations_stops_at_the_fixed_point(memory, drop):
    """0 -> 1 -> 2 settles after two rounds (node 2's rank is final at round 2), and adding 2 -> 3 at the
    next epoch settles after three: the answers equal full's, and the operator does not go through the
    twenty thousand rounds where nothing can change (its ``rounds`` counter stays small)."""
    want = {1: [(0, 0.15000000000000002), (1, 0.2775), (2, 0.385875)],
            2: [(0, 0.15000000000000002), (1, 0.2775), (2, 0.385875), (3, 0.47799375)]}
    with kp.Engine(workers=1) as eng:
        E = eng.input("edges", ["src", "dst"], rows=[(0, 1), (1, 2)])
        with eng.dataflow("full") as df:
            full = graphs.pagerank(df.input("edges"), iterations=LONG).view("v")
        with eng.dataflow("q") as df:
            v = graphs.pagerank(df.input("edges"), iterations=LONG, memory=memory, drop=drop).view("v")
        for ep in (1, 2):
            if ep == 2:
                E.insert([(2, 3)])
            E.advance_to(ep)
            eng.wait(full, timeout=WAIT)
            eng.wait(v, timeout=WAIT)
            assert _same(_rows(full), want[ep]), ep
            assert _rows(v) == _rows(full), ep
        (r,) = [r for r in eng.stats()["ife"] if r["dataflow"] == "q"]
        assert r["rounds"] < 100, r["rounds"]


def test_pagerank_iterations_far_past_the_fixed_point_in_full_mode_answers():
    """The full mode's side of the above: iterations=2**62 on a chain answers at once, and again after an
    edge is added (the loop stops at the round where nothing changes)."""
    with kp.Engine(workers=2) as eng:
        E = eng.input("edges", ["src", "dst"], rows=[(0, 1), (1, 2)])
        with eng.dataflow("q") as df:
            v = graphs.pagerank(df.input("edges"), iterations=2 ** 62).view("v")
        E.advance_to(1)
        eng.wait(v, timeout=WAIT)
        assert _same(_rows(v), [(0, 0.15), (1, 0.2775), (2, 0.385875)])
        E.insert([(2, 3)])
        E.advance_to(2)
        eng.wait(v, timeout=WAIT)
        assert _same(_rows(v), [(0, 0.15), (1, 0.2775), (2, 0.385875), (3, 0.47799375)])


# -- rpq automaton values outside int64 -----------------------------------------------------------------------
# README: "rpq's automaton (int states, labels of the edges' label type) are checked when the dataflow is
# built", and every error kpgnb raises on purpose is a KpgnbError. An int state that int64 cannot hold gets
# through rpq's own checks (``is_int``): ``accept`` then fails in NumPy with a bare OverflowError ("Python int
# too large to convert to C long"), and a start/transition state fails inside rpq's internal map/flat_map
# with "could not learn the output columns of the map function ... pass out={name: dtype, ...}", advice the
# user cannot follow (rpq takes no out=). A transition label outside int64 on an int64 label column is
# accepted and silently matches nothing, where an int64 input column refuses such a value.

_BIG = 2 ** 70


@pytest.mark.parametrize("what", ["accept", "start_state", "next_state", "from_state", "label"])
def test_rpq_automaton_value_outside_int64_is_refused_naming_rpq(what):
    kw = {"transitions": [(0, 1, 1)], "accept": [1]}
    if what == "accept":
        kw["accept"] = [1, _BIG]
    elif what == "start_state":
        kw["start_state"] = _BIG
    elif what == "next_state":
        kw["transitions"] = [(0, 1, _BIG)]
    elif what == "from_state":
        kw["transitions"] = [(_BIG, 1, 1)]
    else:
        kw["transitions"] = [(0, _BIG, 1)]
    with kp.Engine(workers=1) as eng:
        eng.input("edges", ["src", "label", "dst"])
        eng.input("sources", ["source"])
        with pytest.raises(kp.SchemaError) as ei:
            with eng.dataflow("q") as df:
                graphs.rpq(df.input("edges"), df.input("sources"), **kw).view("v")
        msg = str(ei.value)
        assert re.match(r"(graphs\.)?rpq\b", msg), msg
        assert "out=" not in msg, msg
        assert "q" not in eng.dataflows()


# -- float node ids: NaN, -0.0, infinities ------------------------------------------------------------------
# README: values compare by value (NaN after +inf, -0.0 stored as 0.0); jod and drop keep float states as
# bits with the int64 minimum (the bits of -0.0) as "no state". Node ids of those values must behave as
# full mode's joins do in every mode: -0.0 and 0.0 are one node, NaN is one node that joins NaN.

_ALL_MODES = {
    "full": ("full", None),
    "jod": ("jod", None),
    "drop_rand_exact": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
    "drop_deg_bloom64": ("drop", kp.Drop(p=0.5, policy="degree", tracker="bloom", bloom_bits=64, tau_min=2)),
}


def test_float_node_ids_nan_negative_zero_and_infinities_in_every_query_and_mode():
    nan, inf = float("nan"), float("inf")
    edges = [(0.0, 1.5, 1.0), (-0.0, 2.5, 2.0), (1.5, nan, 0.5), (nan, 3.0, 0.25), (3.0, inf, 0.0),
             (inf, -inf, 4.0)]
    want = {
        "khop": [(0.0, 0.0, 0), (0.0, 1.5, 1), (0.0, 2.5, 1), (0.0, nan, 2),
                 (nan, 3.0, 1), (nan, inf, 2), (nan, nan, 0)],
        "sssp": [(0.0, -inf, 5.75), (0.0, 0.0, 0.0), (0.0, 1.5, 1.0), (0.0, 2.5, 2.0), (0.0, 3.0, 1.75),
                 (0.0, inf, 1.75), (0.0, nan, 1.5), (nan, -inf, 4.25), (nan, 3.0, 0.25), (nan, inf, 0.25),
                 (nan, nan, 0.0)],
        "bfs": [(-inf, 3), (0.0, 0), (1.5, 1), (2.5, 1), (3.0, 1), (inf, 2), (nan, 0)],
    }
    with kp.Engine(workers=2) as eng:
        E = eng.input("edges", ["src", "dst", "w"], dtypes=["float64", "float64", "float64"], rows=edges)
        S = eng.input("sources", ["source"], dtypes=["float64"], rows=[(-0.0,), (nan,)])
        views = {}
        for label, (mem, drop) in _ALL_MODES.items():
            with eng.dataflow(label) as df:
                e, s = df.input("edges"), df.input("sources")
                pl = e.select("src", "dst")
                views[label] = {"khop": graphs.khop(pl, s, 2, memory=mem, drop=drop).view("k"),
                                "sssp": graphs.sssp(e, s, memory=mem, drop=drop).view("s"),
                                "bfs": graphs.bfs(pl, s.rename(source="node"), memory=mem, drop=drop).view("b"),
                                "pr": graphs.pagerank(pl, iterations=3, memory=mem, drop=drop).view("p")}
        E.advance_to(1), S.advance_to(1)
        got = {}
        for label, vs in views.items():
            for q, v in vs.items():
                eng.wait(v, timeout=WAIT)
                got[label, q] = _rows(v)
        for q, w in want.items():
            assert _same(got["full", q], sorted(w, key=repr)), q
        for (label, q), rows in got.items():
            assert repr(rows) == repr(got["full", q]), (label, q)  # bit for bit, NaN ids included
        assert len(got["full", "pr"]) == 7  # 0.0 (and -0.0: one node), 1.5, 2.5, NaN, 3.0, inf, -inf


# -- eng.stats()["ife"] at a first load ------------------------------------------------------------------------
# At a first load nothing is rewritten, so the figures can be checked exactly: each (vertex, round) entry
# jod keeps is either kept or dropped by drop; p=0 drops nothing (and sizes no Bloom filter); nothing is
# recomputed; the exact tracker's bytes are its arrangement's, listed as "NAME (dropped)".

_STAT_VARIANTS = {
    "jod": ("jod", None),
    "p0_exact": ("drop", kp.Drop(p=0.0, policy="random", tracker="exact")),
    "p0_bloom": ("drop", kp.Drop(p=0.0, policy="random", tracker="bloom")),
    "p1_exact": ("drop", kp.Drop(p=1.0, policy="random", tracker="exact")),
    "deg_exact": ("drop", kp.Drop(p=0.5, policy="degree", tracker="exact", tau_min=2, seed=7)),
    "deg_bloom": ("drop", kp.Drop(p=0.5, policy="degree", tracker="bloom", tau_min=2, seed=7)),
}


def test_ife_stats_at_a_first_load_partition_jods_entries_in_every_query():
    names = [f"v{i:02d}" for i in range(16)]
    edges = [(names[i], "ab"[i % 2], names[(3 * i + 1) % 16]) for i in range(16)] + \
            [(names[i], "b", names[(5 * i + 2) % 16]) for i in range(0, 16, 3)]
    with kp.Engine(workers=2) as eng:
        E = eng.input("edges", ["src", "label", "dst"], dtypes=["str", "str", "str"], rows=edges)
        S = eng.input("sources", ["source"], dtypes=["str"], rows=[(names[0],), (names[5],)])
        views = []
        for label, (mem, drop) in _STAT_VARIANTS.items():
            with eng.dataflow(label) as df:
                e, s = df.input("edges"), df.input("sources")
                pl = e.select("src", "dst")
                views += [graphs.khop(pl, s, 3, memory=mem, drop=drop).view("k"),
                          graphs.pagerank(pl, iterations=4, memory=mem, drop=drop).view("p"),
                          graphs.rpq(e, s, [(0, "a", 1), (1, "b", 0)], [1], memory=mem, drop=drop).view("r")]
        E.advance_to(1), S.advance_to(1)
        for v in views:
            eng.wait(v, timeout=WAIT)
        stats = eng.stats()
        arrs = {(a["dataflow"], a["name"]): a for a in eng.arrangements()}
    by = {(r["dataflow"], r["operator"].split("'")[1]): r for r in stats["ife"]}
    assert len(by) == 3 * len(_STAT_VARIANTS)
    for q in ("khop", "pagerank", "rpq"):
        jod = by["jod", q]
        assert jod["state_differences"] > 0 and jod["bloom"] is None
        assert (jod["dropped"], jod["dropped_total"], jod["recomputed"], jod["join_differences"]) == (0, 0, 0, 0)
        assert jod["bytes"]["join"] == 0 and jod["bytes"]["dropped_tracker"] == 0
        for label in _STAT_VARIANTS:
            r = by[label, q]
            assert r["mode"] == ("jod" if label == "jod" else "drop")
            assert r["recomputed"] == 0, (label, q)
            for c in ("evaluated", "join_rows", "rounds"):
                assert r[c] == jod[c], (label, q, c)
            assert r["state_differences"] + r["dropped"] == jod["state_differences"], (label, q)
            assert r["dropped"] == r["dropped_total"], (label, q)
        for label in ("p0_exact", "p0_bloom"):
            r = by[label, q]
            assert r["state_differences"] == jod["state_differences"] and r["dropped"] == 0
            assert r["bytes"] == jod["bytes"], (label, q)
        assert by["p0_bloom", q]["bloom"] == {"bits": None, "hashes": None}
        assert by["p1_exact", q]["state_differences"] == 0 and by["p1_exact", q]["bytes"]["state"] == 0
        for label in ("p1_exact", "deg_exact"):
            r = by[label, q]
            assert r["bytes"]["dropped_tracker"] == arrs[label, f"{q} (dropped)"]["bytes"] > 0, (label, q)
        bloom = by["deg_bloom", q]
        assert bloom["bloom"]["bits"] == 1 << 16 and 1 <= bloom["bloom"]["hashes"] <= 8  # the least automatic size
        assert bloom["bytes"]["dropped_tracker"] == (1 << 16) // 8


# -- sources computed from the edges, changing in the same epochs ---------------------------------------------
# Sources that are a function of the graph (here: the nodes with an out-edge of weight 0) appear and vanish
# in the very epoch the edges change, so jod/drop see new and retired source groups together with edge
# changes; rpq's sources too. Every mode equals networkx at every epoch (W = 3, sparse huge int64 ids).

def test_sources_derived_from_the_edges_in_every_mode_equal_networkx():
    rng = np.random.default_rng(50)
    ids = [int((i * 0x9E3779B97F4A7C15) % 2 ** 64 - 2 ** 63) for i in range(7)]
    trans, accept = [(0, 1, 1), (1, 0, 0), (1, 2, 2)], [2]
    with kp.Engine(workers=3) as eng:
        E = eng.input("edges", ["src", "dst", "w"])
        views = {}
        for label, (mem, drop) in _ALL_MODES.items():
            with eng.dataflow(label) as df:
                e = df.input("edges")
                s = e.filter(lambda w: w == 0).map(lambda src: {"source": src}).distinct()
                views[label] = {"sssp": graphs.sssp(e, s, memory=mem, drop=drop).view("s"),
                                "khop": graphs.khop(e.select("src", "dst"), s, 2, memory=mem, drop=drop).view("k"),
                                "rpq": graphs.rpq(e.rename(w="label"), s, trans, accept, memory=mem,
                                                  drop=drop).view("r")}
        Ec = Counter()
        for ep in range(1, 8):
            upd = Counter()
            for _ in range(int(rng.integers(2, 9))):
                live = [k for k, c in Ec.items() if c + upd[k] > 0]
                r = rng.random()
                if r < 0.5 or not live:
                    upd[(ids[int(rng.integers(7))], ids[int(rng.integers(7))], int(rng.integers(0, 3)))] += 1
                elif r < 0.8:
                    upd[live[int(rng.integers(len(live)))]] -= 1
                else:  # a weight change: a node may become (or stop being) a source
                    k = live[int(rng.integers(len(live)))]
                    upd[k] -= 1
                    upd[(k[0], k[1], int(rng.integers(0, 3)))] += 1
            upd = {k: c for k, c in upd.items() if c}
            for k, c in upd.items():
                Ec[k] += c
            E.update(list(upd), list(upd.values()))
            E.advance_to(ep)
            g, pg = nx.DiGraph(), nx.DiGraph()
            for (a, b, w), c in Ec.items():
                if c > 0:
                    if not g.has_edge(a, b) or g[a][b]["w"] > w:
                        g.add_edge(a, b, w=w)
                    pg.add_edges_from(((a, q), (b, q2)) for q, lab, q2 in trans if lab == w)
            src = sorted({a for (a, b, w), c in Ec.items() if c > 0 and w == 0})
            want = {"sssp": sorted((s, v, d) for s in src
                                   for v, d in nx.single_source_dijkstra_path_length(g, s, weight="w").items()),
                    "khop": sorted((s, v, d) for s in src
                                   for v, d in nx.single_source_shortest_path_length(g, s, cutoff=2).items()),
                    "rpq": sorted({(s, v) for s in src for v, q in
                                   (nx.descendants(pg, (s, 0)) | {(s, 0)} if (s, 0) in pg else {(s, 0)})
                                   if q in accept})}
            for label, vs in views.items():
                for q, v in vs.items():
                    eng.wait(v, timeout=WAIT)
                    assert sorted(_rows(v)) == want[q], (ep, label, q)


# -- str ids that are easy to confuse ----------------------------------------------------------------------------
# The empty string, NUL inside a string, "é" composed and decomposed (two different strings), an astral
# character and a space as node ids and labels: every mode agrees with full, and full with networkx.

def test_confusable_str_ids_in_every_query_and_mode():
    ids = ["", "\x00", "e\u0301", "\u00e9", "a\x00b", "\U0001F600", " ", "a"]
    rows = [(ids[i], "x" if i % 2 else "y", ids[(i + 1) % 8], float(i)) for i in range(8)] + \
           [("", "x", "\U0001F600", 0.5)]
    trans, accept = [(0, "x", 1), (1, "y", 0)], [1]
    steps = [(None, (None, None)), ([rows[0], rows[3]], ("e\u0301", ""))]
    with kp.Engine(workers=3) as eng:
        E = eng.input("edges", ["src", "label", "dst", "w"], dtypes=["str", "str", "str", "float64"], rows=rows)
        S = eng.input("sources", ["source"], dtypes=["str"], rows=[("",), ("\u00e9",)])
        views = {}
        for label, (mem, drop) in _ALL_MODES.items():
            with eng.dataflow(label) as df:
                e, s = df.input("edges"), df.input("sources")
                views[label] = {"sssp": graphs.sssp(e.select("src", "dst", "w"), s, memory=mem, drop=drop).view("s"),
                                "khop": graphs.khop(e.select("src", "dst"), s, 3, memory=mem, drop=drop).view("k"),
                                "rpq": graphs.rpq(e, s, trans, accept, memory=mem, drop=drop).view("r"),
                                "pr": graphs.pagerank(e.select("src", "dst"), iterations=4, memory=mem,
                                                      drop=drop).view("p")}
        live, src = list(rows), {"", "\u00e9"}
        for ep, (gone, (add, rm)) in enumerate(steps, 1):
            if gone:
                E.remove(gone)
                live = [r for r in live if r not in gone]
                S.insert([(add,)]), S.remove([(rm,)])
                src = (src | {add}) - {rm}
            E.advance_to(ep), S.advance_to(ep)
            g, pg = nx.DiGraph(), nx.DiGraph()
            for a, lab, b, w in live:
                g.add_edge(a, b, w=w)
                pg.add_edges_from(((a, q), (b, q2)) for q, tl, q2 in trans if tl == lab)
            want = {"sssp": sorted(((s, v, d) for s in src for v, d in
                                    (nx.single_source_dijkstra_path_length(g, s, weight="w") if s in g
                                     else {s: 0.0}).items()), key=repr),
                    "khop": sorted(((s, v, d) for s in src for v, d in
                                    (nx.single_source_shortest_path_length(g, s, cutoff=3) if s in g
                                     else {s: 0}).items()), key=repr),
                    "rpq": sorted({(s, v) for s in src for v, q in
                                   (nx.descendants(pg, (s, 0)) | {(s, 0)} if (s, 0) in pg else {(s, 0)})
                                   if q in accept}, key=repr)}
            got = {}
            for label, vs in views.items():
                for q, v in vs.items():
                    eng.wait(v, timeout=WAIT)
                    got[label, q] = _rows(v)
            for q, w in want.items():
                assert got["full", q] == w, (ep, q)
            for (label, q), r in got.items():
                assert r == got["full", q], (ep, label, q)
