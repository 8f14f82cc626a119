"""bench.graphs at a tiny size: kpgnb's side (index, reach / BFS / WCC on the shared arrangement, then
single-edge changes) answers like networkx, the answer check rejects a wrong answer, each installed peer
answers like networkx, and the program end to end. No timings are asserted."""
import json
import os

import numpy as np
import pytest

nx = pytest.importorskip("networkx")

from bench import graphs as G  # noqa: E402
from bench import peers as P  # noqa: E402

SPEC = {"nodes": 2000, "edges": 10_000, "seed": 3, "roots": 3}
QUERIES = ("reach", "bfs", "wcc")


def reference(query, src, dst, roots):
    g = P.networkx_build(src, dst, SPEC["nodes"])
    return getattr(P, f"networkx_{query}")(g, roots)


@pytest.fixture(scope="module")
def graph():
    return G.make_graph(SPEC)


@pytest.fixture(scope="module")
def want(graph):
    src, dst, roots = graph
    return {q: reference(q, src, dst, roots) for q in QUERIES}


def test_graph_is_the_demo_generator(graph):
    src, dst, roots = graph
    rng = np.random.default_rng(SPEC["seed"])
    assert np.array_equal(src, rng.integers(0, SPEC["nodes"], SPEC["edges"]))
    assert np.array_equal(dst, rng.integers(0, SPEC["nodes"], SPEC["edges"]))
    assert len(set(roots.tolist())) == 3


def test_changes_alternate_and_remove_present_edges(graph):
    src, dst, _ = graph
    ch = G.make_changes(SPEC, src, dst, 40)
    assert [c[0] for c in ch] == ["+", "-"] * 20
    removed = [c[3] for c in ch if c[0] == "-"]
    assert len(set(removed)) == len(removed)
    assert all((src[e], dst[e]) == (u, v) for op, u, v, e in ch if op == "-")
    s2, d2 = G.final_edges(src, dst, ch)
    assert len(s2) == len(src)    # 20 inserted, 20 removed


@pytest.mark.parametrize("workers", [1, 2])
def test_kpgnb_side_answers_like_networkx(graph, want, workers):
    src, dst, roots = graph
    msgs = []
    G.kpgnb_side(lambda *m: msgs.append(m), SPEC, workers, QUERIES, changes_n=30)
    kinds = [m[0] for m in msgs]
    assert kinds[:2] == ["warm", "index"]
    answers = {m[1]: m[3] for m in msgs if m[0] == "query"}
    assert set(answers) == set(QUERIES)
    for q in QUERIES:
        assert G.check(q, answers[q], want[q]) is None, q
        times = next(m[2] for m in msgs if m[0] == "query" and m[1] == q)
        assert times["total_s"] >= times["query_s"] > 0
    (inc,) = [m for m in msgs if m[0] == "incremental"]
    assert inc[1]["changes"] == 30 and len(inc[1]["latencies_ms"]) == 30
    s2, d2 = G.final_edges(src, dst, G.make_changes(SPEC, src, dst, 30))
    assert G.check("bfs", inc[2], reference("bfs", s2, d2, roots)) is None


def test_check_rejects_wrong_answers(want):
    assert G.check("reach", want["reach"], want["reach"]) is None
    assert "missing" in G.check("reach", want["reach"][1:], want["reach"])
    assert "repeated" in G.check("reach", np.sort(np.r_[want["reach"], want["reach"][:1]]), want["reach"])
    for q in ("bfs", "wcc"):
        nodes, vals = want[q]
        assert G.check(q, (nodes, vals), want[q]) is None
        bad = vals.copy()
        bad[len(bad) // 2] += 1
        assert "values differ" in G.check(q, (nodes, bad), want[q])
        assert "missing" in G.check(q, (nodes[1:], vals[1:]), want[q])
    assert G.check("bfs", None, want["bfs"]) == "no answer"


def test_collect_reports_wrong_answer_not_a_time(want):
    nodes, vals = want["bfs"]
    bad = vals.copy()
    bad[0] += 1
    msgs = [("index", {"index_s": 1.0}), ("query", "bfs", {"query_s": 0.5, "build_s": 1.0, "total_s": 1.5},
                                         (nodes, bad))]
    out = G._collect(msgs, {}, ["bfs"], {"bfs": want["bfs"]}, SPEC, "test")
    assert out["queries"]["bfs"]["status"] == "wrong answer"
    assert out["queries"]["bfs"]["answer"] == "wrong answer"   # what notebook 04's failure check reads
    rows, _ = G.summarize({"kpgnb": {"W=2": out}, "peers": {}}, ["bfs"], [2], {})
    assert rows[0]["total s"] is None and rows[0]["note"] == "wrong answer"


def test_run_child_kills_a_step_past_the_limit():
    msgs, status = G.run_child(G._idle_side, (120.0,), timeout=15.0)  # (the child must start and report first)
    assert status == "timeout" and msgs == [("start", "idle")]
    msgs, status = G.run_child(G._idle_side, (0.0,), timeout=20.0)
    assert status == "done"


@pytest.mark.parametrize("peer", ["igraph", "duckdb", "networkx", "pathway"])
def test_peer_answers_like_networkx(graph, want, peer):
    pytest.importorskip(P.PEERS[peer]["module"])
    src, dst, roots = graph
    p = P.PEERS[peer]
    if "warm" in p:
        p["warm"]()
    state = p["build"](src, dst, SPEC["nodes"])
    try:
        for q in QUERIES:
            assert G.check(q, p[q](state, roots), want[q]) is None, (peer, q)
        if "apply" in p:   # edit + recompute: the answer of the edited graph
            ch = G.make_changes(SPEC, src, dst, 2)
            for op, u, v, _ in ch:
                p["apply"](state, (op, u, v))
            s2, d2 = G.final_edges(src, dst, ch)
            assert G.check("bfs", p["bfs"](state, roots), reference("bfs", s2, d2, roots)) is None
    finally:
        if "cleanup" in p:
            p["cleanup"](state)


def test_pathway_streaming_reflects_each_change(graph):
    pytest.importorskip("pathway")
    src, dst, roots = graph
    ch = G.make_changes(SPEC, src, dst, 12)
    bad = []

    def progress(i, answer):
        s2, d2 = G.final_edges(src, dst, ch[:i])
        if G.check("bfs", answer, reference("bfs", s2, d2, roots)) is not None:
            bad.append(i)
    r = P.pathway_stream_bfs(src, dst, SPEC["nodes"], roots, ch, check_every=1, on_progress=progress)
    assert bad == []
    assert len(r["latencies_s"]) == 12
    s2, d2 = G.final_edges(src, dst, ch)
    assert G.check("bfs", r["answer"], reference("bfs", s2, d2, roots)) is None


def test_program_end_to_end(tmp_path, monkeypatch):
    pytest.importorskip("igraph")
    import bench.common
    monkeypatch.setattr(bench.common, "RESULTS", str(tmp_path))
    out = G.main(["--quick", "--nodes", "500", "--edges", "2500", "--workers", "1", "--peers", "igraph,duckdb",
                  "--queries", "reach,bfs,wcc", "--changes", "6", "--recomputes", "2", "--peer-timeout", "120"])
    ks = out["results"]["kpgnb"]["W=1"]
    assert all(ks["queries"][q]["status"] == "ok" for q in QUERIES)
    assert ks["incremental"]["final"] == "ok" and len(ks["incremental"]["latencies_ms"]) == 6
    if "duckdb" in out["results"]["peers"]:
        assert all(out["results"]["peers"]["duckdb"]["queries"][q]["status"] == "ok" for q in QUERIES)
    saved = json.load(open(os.path.join(tmp_path, "graphs-quick.json")))
    assert saved["quick"] and saved["reference"] == "igraph"
    assert {g["goal"].split(":")[0] for g in saved["goals"]} >= {"reach", "bfs", "wcc"}
