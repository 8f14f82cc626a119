"""bench.datalog at a tiny size: the graph generators, the NumPy/SciPy references against networkx and a
naive evaluator, kpgnb's side (batch, goal-directed asks, streaming) answering like the references, the
answer check rejecting wrong answers, each installed peer, and the program end to end. No timings are
asserted."""
import json
import os

import numpy as np
import pytest

nx = pytest.importorskip("networkx")
pytest.importorskip("scipy")

from bench import datalog as D  # noqa: E402

TREE = {"name": "tree-4", "kind": "tree", "height": 4}
GRID = {"name": "grid-6", "kind": "grid", "side": 6}
GNP = {"name": "gnp-200", "kind": "gnp", "n": 200, "p": 0.01, "seed": 3}
RMAT = {"name": "rmat1-7", "kind": "rmat", "config": 1, "scale": 7, "edges": 600, "seed": 4, "max_weight": 4}
PAIR_GRAPHS = (TREE, GRID, GNP)


def nx_graph(g, weighted=False):
    G = nx.DiGraph()
    G.add_nodes_from(range(g["n"]))
    if weighted:
        for u, v, w in zip(g["src"].tolist(), g["dst"].tolist(), g["w"].tolist()):
            if not G.has_edge(u, v) or G[u][v]["weight"] > w:
                G.add_edge(u, v, weight=w)
    else:
        G.add_edges_from(zip(g["src"].tolist(), g["dst"].tolist()))
    return G


def nx_tc(g):
    G = nx_graph(g)
    xs, ys = [], []
    for x in range(g["n"]):
        d = set(nx.descendants(G, x))
        if G.has_edge(x, x) or any(G.has_edge(y, x) for y in d):
            d.add(x)
        xs += [x] * len(d)
        ys += sorted(d)
    return D.norm_rel2(xs, ys, g["n"])


def naive_sg(g):
    kids = {}
    for a, b in zip(g["src"].tolist(), g["dst"].tolist()):
        kids.setdefault(a, []).append(b)
    sg = {(x, y) for cs in kids.values() for x in cs for y in cs if x != y}
    delta = set(sg)
    while delta:
        new = {(x, y) for a, b in delta for x in kids.get(a, ()) for y in kids.get(b, ())} - sg
        sg |= new
        delta = new
    return D.norm_rel2([p[0] for p in sg], [p[1] for p in sg], g["n"])


def nx_answer(program, g):
    if program == "tc":
        return nx_tc(g)
    if program == "sg":
        return naive_sg(g)
    G = nx_graph(g, weighted=program == "sssp")
    root = int(g["root"][0])
    if program == "reach":
        return D.norm_set(sorted(nx.descendants(G, root) | {root}))
    if program == "cc":
        lab = [min(nx.ancestors(G, x) | {x}) for x in range(g["n"])]
        return D.norm_map(np.arange(g["n"]), lab)
    dist = nx.single_source_dijkstra_path_length(G, root)
    return D.norm_map(list(dist), list(dist.values()))


def jobs_of(specs):
    out = []
    for spec in specs:
        for program in D.programs_for(spec, D.ALL_PROGRAMS):
            out.append((f"{program}@{spec['name']}", program, spec))
    return out


@pytest.fixture(scope="module")
def want():
    return {key: nx_answer(program, D.make_graph(spec)) for key, program, spec in jobs_of(PAIR_GRAPHS + (RMAT,))}


def test_generators():
    src, dst, n = D.tree_graph(3)
    assert n == 15 and len(src) == 14 and set(dst.tolist()) == set(range(1, 15))
    assert all(d in (2 * s + 1, 2 * s + 2) for s, d in zip(src.tolist(), dst.tolist()))
    src, dst, n = D.grid_graph(2)
    assert n == 9 and len(src) == 12                  # 2 * 3 * 2 edges, right and down
    assert set(zip(src.tolist(), dst.tolist())) >= {(0, 1), (0, 3), (4, 5), (4, 7)}
    src, dst, n = D.gnp_graph(300, 0.02, seed=1)
    assert not np.any(src == dst) and len(np.unique(src * n + dst)) == len(src)
    assert abs(len(src) - 300 * 299 * 0.02) < 5 * np.sqrt(300 * 299 * 0.02)
    assert np.array_equal(src, D.gnp_graph(300, 0.02, seed=1)[0])
    for c, params in D.RMAT_PARAMS.items():
        assert abs(sum(params) - 1) < 1e-12
        src, dst, n = D.rmat_graph(8, 2000, params, seed=c)
        assert n == 256 and src.max() < n and dst.max() < n
        assert len(np.unique(src * n + dst)) == len(src) <= 2000
    # config 1 is skewed toward node 0's quadrant, config 2 is uniform
    s1, _, _ = D.rmat_graph(10, 20000, D.RMAT_PARAMS[1], seed=0)
    s2, _, _ = D.rmat_graph(10, 20000, D.RMAT_PARAMS[2], seed=0)
    assert np.mean(s1 < 512) > 0.65 and abs(np.mean(s2 < 512) - 0.5) < 0.05
    g = D.make_graph(RMAT)
    assert g["w"].min() >= 1 and g["w"].max() <= 4 and len(g["root"]) == 1


@pytest.mark.parametrize("key", [k for k, _, _ in jobs_of(PAIR_GRAPHS + (RMAT,))])
def test_reference_matches_networkx(key, want):
    program, name = key.split("@")
    spec = next(s for s in PAIR_GRAPHS + (RMAT,) if s["name"] == name)
    got, rows = D.reference(program, D.make_graph(spec))
    assert D.check(program, got, want[key]) is None
    assert rows == (got["rows"] if program in D.PAIR_PROGRAMS else len(got if program == "reach" else got[0]))


def test_reference_respects_max_rows():
    g = D.make_graph(GRID)
    assert D.reference("tc", g, max_rows=10) == (None, D.tc_ref(g).rows)
    assert D.reference("sg", g, max_rows=10)[0] is None


def test_check_rejects_wrong_answers(want):
    tc = want["tc@gnp-200"]
    assert D.check("tc", tc, tc) is None
    g = D.make_graph(GNP)
    ref = D.tc_ref(g)
    x = int(np.argmax(ref.per_x))
    ys = ref.row(x)
    rows = [(a, b) for a in range(g["n"]) for b in ref.row(a).tolist()]
    xs, yy = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    assert D.check("tc", D.norm_rel2(xs, yy, g["n"]), tc) is None
    assert "rows" in D.check("tc", D.norm_rel2(xs[1:], yy[1:], g["n"]), tc)                  # one missing
    assert "rows" in D.check("tc", D.norm_rel2(np.r_[xs, xs[:1]], np.r_[yy, yy[:1]], g["n"]), tc)   # a duplicate
    moved = yy.copy()
    moved[np.flatnonzero(xs == x)[0]] = (ys[0] + 1) % g["n"] if (ys[0] + 1) % g["n"] not in ys else ys[0]
    if not np.array_equal(moved, yy):
        assert "hash" in D.check("tc", D.norm_rel2(xs, moved, g["n"]), tc)                # same counts, other y
    assert "outside" in D.check("tc", D.norm_rel2(np.r_[xs, [g["n"]]], np.r_[yy, [0]], g["n"]), tc)
    reach = want["reach@rmat1-7"]
    assert "missing" in D.check("reach", reach[1:], reach)
    assert "repeated" in D.check("reach", np.sort(np.r_[reach, reach[:1]]), reach)
    for program in ("cc", "sssp"):
        nodes, vals = want[f"{program}@rmat1-7"]
        bad = vals.copy()
        bad[len(bad) // 2] += 1
        assert "values differ" in D.check(program, (nodes, bad), (nodes, vals))
        assert "missing" in D.check(program, (nodes[1:], vals[1:]), (nodes, vals))
    assert D.check("cc", None, want["cc@rmat1-7"]) == "no answer"


def test_check_asks_rejects_wrong_answers():
    g = D.make_graph(GRID)
    ref = D.tc_ref(g)
    good = {"asks": [(x, len(ref.row(x)), D.pair_hash(np.full(len(ref.row(x)), x), ref.row(x)), True)
                     for x in (0, 5, 20)], "left_after_retract": 0}
    assert D.check_asks(ref, good) is None
    bad = {"asks": [(0, good["asks"][0][1] - 1, good["asks"][0][2], True)] + good["asks"][1:],
           "left_after_retract": 0}
    assert "1 of 3 asks wrong" in D.check_asks(ref, bad)
    assert "left in the view" in D.check_asks(ref, {**good, "left_after_retract": 4})


def test_collect_reports_wrong_answer_not_a_time(want):
    nodes, vals = want["cc@rmat1-7"]
    bad = vals.copy()
    bad[0] += 1
    msgs = [("warm", {"s": 1}), ("query", "cc@rmat1-7", {"total_s": 0.5}, (nodes, bad)),
            ("query", "sssp@rmat1-7", {"status": "not expressible (...)"}, None)]
    out = D.collect(msgs, {"reach@rmat1-7": "> 5 s"}, ["cc@rmat1-7", "sssp@rmat1-7", "reach@rmat1-7"],
                    lambda key, ans: D.check("cc", ans, (nodes, vals)))
    assert out["jobs"]["cc@rmat1-7"]["status"] == "wrong answer"
    assert out["jobs"]["sssp@rmat1-7"]["status"].startswith("not expressible")
    assert out["jobs"]["reach@rmat1-7"]["status"] == "> 5 s"
    results = {"kpgnb": {"W=1": {"jobs": {"cc@rmat1-7": {"status": "ok", "total_s": 1.0}}}},
               "peers": {"duckdb": out}}
    rows, _ = D.summarize_batch(results, [("cc@rmat1-7", "cc", RMAT)], {}, {"cc@rmat1-7": {"rows": 128}}, [1],
                                ["duckdb"], {})
    assert rows[0]["duckdb s"] == "WRONG" and "x duckdb" not in rows[0]


def test_changes_and_final_graph():
    g = D.make_graph(RMAT)
    ch = D.make_changes(g, 20, seed=0)
    assert [c[0] for c in ch] == ["+", "-"] * 10
    gone = [c[4] for c in ch if c[0] == "-"]
    assert len(set(gone)) == len(gone)
    assert all((g["src"][e], g["dst"][e], g["w"][e]) == (u, v, w) for op, u, v, w, e in ch if op == "-")
    f = D.final_graph(g, ch)
    assert len(f["src"]) == len(g["src"]) == len(f["w"])


@pytest.mark.parametrize("workers", [1, 2])
def test_kpgnb_side_answers_like_the_references(want, workers):
    jobs = [(k, "batch", p, s, {}) for k, p, s in jobs_of(PAIR_GRAPHS + (RMAT,))]
    jobs.append(("ask:tc@grid-6", "ask", "tc", GRID, {"asks": 5, "seed": 0}))
    streams = [(f"stream:{p}@rmat1-7", "stream", p, RMAT, {"updates": 8, "seed": 0}) for p in D.RMAT_PROGRAMS]
    msgs = []
    D.kpgnb_side(lambda *m: msgs.append(m), workers, jobs + streams)
    assert msgs[0][0] == "warm"
    answers = {m[1]: (m[2], m[3]) for m in msgs if m[0] == "query"}
    assert set(answers) == {j[0] for j in jobs + streams}
    for key, program, spec in jobs_of(PAIR_GRAPHS + (RMAT,)):
        figs, ans = answers[key]
        assert D.check(program, ans, want[key]) is None, key
        assert figs["total_s"] > 0
    figs, ans = answers["ask:tc@grid-6"]
    assert D.check_asks(D.tc_ref(D.make_graph(GRID)), ans) is None
    assert figs["asks"] == 5 and len(figs["ask_ms"]) == 5
    g = D.make_graph(RMAT)
    final = D.final_graph(g, D.make_changes(g, 8, seed=0))
    for key, _, program, _, _ in streams:
        figs, ans = answers[key]
        assert figs["updates"] == 8
        assert D.check(program, ans, nx_answer(program, final)) is None, key


@pytest.mark.parametrize("peer", ["duckdb", "clingo", "pyspark"])
def test_peer_answers_like_the_references(want, peer, request):
    pytest.importorskip(D.PEER_MODULES[peer])
    if peer == "pyspark":
        request.getfixturevalue("spark")   # the test session's Spark (skips without Java); the side reuses it
    jobs = jobs_of((TREE, GRID, RMAT))
    extra = ()
    if peer == "pyspark":   # every Spark loop once, on the smallest graphs (each round is several Spark jobs)
        tiny = D.make_graph({"name": "tree-2", "kind": "tree", "height": 2})
        rm = {**RMAT, "name": "rmat1-4", "scale": 4, "edges": 30}
        jobs = [("tc@tree-2", "tc", {"name": "tree-2", "kind": "tree", "height": 2}), ("reach@rmat1-4", "reach", rm),
                ("sssp@rmat1-4", "sssp", rm)]
        extra = ("1g", False)
        assert tiny["n"] == 7
    msgs = []
    D.PEER_SIDES[peer](lambda *m: msgs.append(m), jobs, *extra)
    answers = {m[1]: (m[2], m[3]) for m in msgs if m[0] == "query"}
    assert set(answers) == {k for k, _, _ in jobs}
    for key, program, spec in jobs:
        figs, ans = answers[key]
        if peer == "clingo" and program == "sssp":
            assert figs["status"].startswith("not expressible")
            continue
        ref = want[key] if key in want else nx_answer(program, D.make_graph(spec))
        assert D.check(program, ans, ref) is None, key


def test_program_end_to_end(tmp_path, monkeypatch):
    import bench.common
    monkeypatch.setattr(bench.common, "RESULTS", str(tmp_path))
    peers = ",".join(p for p in ("duckdb", "clingo") if __import__("importlib").util.find_spec(p))
    args = ["--quick", "--graphs", "tree,grid,rmat1", "--tree-height", "4", "--grid-side", "5", "--rmat-scale", "6",
            "--rmat-edges", "200", "--workers", "1", "--latency-workers", "1", "--asks", "3", "--updates", "6",
            "--peer-timeout", "120"] + (["--peers", peers] if peers else ["--peers", ""])
    out = D.main(args)
    ks = out["results"]["kpgnb"]["W=1"]["jobs"]
    assert ks and all(r["status"] == "ok" for r in ks.values()), {k: r["status"] for k, r in ks.items()}
    assert {k.split(":")[0] for k in ks if ":" in k} == {"ask", "stream"}
    for name, r in out["results"]["peers"].items():
        for key, j in r["jobs"].items():
            assert j["status"] == "ok" or j["status"].startswith("not expressible"), (name, key, j["status"])
    saved = json.load(open(os.path.join(tmp_path, "datalog-quick.json")))
    assert saved["quick"] and len(saved["batch_table"]) == 7   # tc, sg on tree and grid; reach, cc, sssp
    assert saved["interactive_table"] and saved["streaming_table"]
