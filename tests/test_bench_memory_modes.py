"""bench.memory_modes at a tiny size: the graph and update stream are what the benchmark says, the scipy
reference agrees with networkx, every mode's answer after the stream equals the reference (in this
process), the check rejects wrong answers, and the whole program runs end to end. No timings are asserted."""
import numpy as np
import pytest

pytest.importorskip("scipy")
from bench import memory_modes as M  # noqa: E402

CFG = {"graph": "rmat", "nodes": 128, "edges": 600, "batches": 6, "batch_size": 1, "delete_fraction": 0.5,
       "sources": 4, "k": 3, "iterations": 5, "drop_p": 0.5, "bloom_bits": 1 << 12, "budget_mb": 0.6,
       "budget_max": 16, "budget_batches": 2, "budget_seconds": 30.0, "run_seconds": 30.0, "rtol": 1e-9,
       "workers": 1, "seed": 5}


@pytest.fixture(scope="module")
def d():
    return M.data(CFG)


def test_graph_and_stream(d):
    src, dst, w, st = d["src"], d["dst"], d["w"], d["stream"]
    assert len(src) == CFG["edges"] and (src != dst).all()
    assert len(np.unique(src * d["n"] + dst)) == len(src)
    assert w.min() >= 1 and w.max() <= 10
    assert st["loaded"] == int(0.9 * CFG["edges"])
    assert len(st["ins"]) >= CFG["batches"]
    on = set(range(st["loaded"]))
    for ins, dels in zip(st["ins"], st["dels"]):
        assert len(ins) + len(dels) == CFG["batch_size"]
        assert all(i not in on for i in ins.tolist()) and all(i in on for i in dels.tolist())
        on |= set(ins.tolist())
        on -= set(dels.tolist())
    assert sorted(on) == M.present_after(st, len(src), len(st["ins"])).tolist()
    assert any(len(x) for x in st["dels"])
    ba = M.make_graph({**CFG, "graph": "ba"})
    assert (ba[1] != ba[2]).all() and len(np.unique(ba[1] * ba[0] + ba[2])) == len(ba[1])


def test_reference_matches_networkx(d):
    nx = pytest.importorskip("networkx")
    idx = M.present_after(d["stream"], len(d["src"]), 4)
    src, dst, w = d["src"][idx], d["dst"][idx], d["w"][idx]
    G = nx.DiGraph()
    G.add_weighted_edges_from(zip(src.tolist(), dst.tolist(), w.tolist()))
    sources = d["sources"][:5]
    ref = M.reference("spsp", d["n"], src, dst, w, sources, 3, 5)
    want = sorted((s, v, dd) for s in sources.tolist() for v, dd in nx.single_source_dijkstra_path_length(G, s).items())
    assert list(zip(*(ref[c].tolist() for c in M.COLUMNS["spsp"]))) == want
    ref = M.reference("khop", d["n"], src, dst, w, sources, 3, 5)
    want = sorted((s, v, dd) for s in sources.tolist()
                  for v, dd in nx.single_source_shortest_path_length(G, s, cutoff=3).items())
    assert list(zip(*(ref[c].tolist() for c in M.COLUMNS["khop"]))) == want
    ref = M.reference("wcc", d["n"], src, dst, w, sources, 3, 5)
    want = sorted((v, min(c)) for c in nx.weakly_connected_components(G) for v in c)
    assert list(zip(ref["node"].tolist(), ref["label"].tolist())) == want
    # PageRank: the unnormalised formula, by a plain loop
    ref = M.reference("pagerank", d["n"], src, dst, w, sources, 3, 5)
    rank = {v: 0.15 for v in G}
    for _ in range(5):
        new = {v: 0.15 for v in G}
        for a, b in G.edges:
            new[b] += 0.85 * rank[a] / G.out_degree(a)
        rank = new
    assert ref["node"].tolist() == sorted(G)
    assert np.allclose(ref["rank"], [rank[v] for v in sorted(G)], rtol=1e-12)


MODES = ("full", "jod", "drop-degree-exact", "drop-degree-bloom", "drop-random-exact")


@pytest.mark.parametrize("query", M.QUERIES)
def test_modes_answer_right(d, query):
    jobs = [{"kind": "query", "query": query, "mode": m} for m in MODES]
    pairs = M.run_all(CFG, jobs, "none", 0, 0)
    refs = {}
    for res, out in pairs:
        assert "failure" not in res, res
        assert res["batches"] == CFG["batches"] and res["p50_ms"] is not None
        assert res["trace_bytes_peak"]["total"] >= res["trace_bytes_peak"]["arrangements"] > 0
        chk = M.check(CFG, d, res, out, refs)
        assert chk["ok"], (res["job"], chk)
        ife = res["ife"]
        assert ife["mode"] == M.MODES[res["job"]["mode"]][0]
        if ife["mode"] == "full":
            assert ife["join_differences"] > 0
        else:
            assert ife["join_differences"] == 0
        if ife["mode"] == "drop":
            assert ife["dropped_total"] > 0


def test_budget_run(d):
    pairs = M.run_all(CFG, [{"kind": "budget", "mode": "jod"}, {"kind": "budget", "mode": "drop-degree-bloom"}],
                      "none", 0, 0)
    for res, out in pairs:
        assert "failure" not in res, res
        steps = res["steps"]
        assert [s["queries"] for s in steps] == [4, 8, 16][:len(steps)]
        assert all(s["trace_bytes"] > 0 for s in steps)
        assert res["largest_fitting"] == max([s["queries"] for s in steps if s["fits"]] or [0])
        assert M.check(CFG, d, res, out, {})["ok"]


def test_check_rejects_wrong_answers(d):
    idx = M.present_after(d["stream"], len(d["src"]), 2)
    args = (d["n"], d["src"][idx], d["dst"][idx], d["w"][idx], d["sources"][:3], 3, 5)
    for q in M.QUERIES:
        ref = M.reference(q, *args)
        assert M.compare(q, ref, {c: v.copy() for c, v in ref.items()})["ok"]
        bad = {c: v.copy() for c, v in ref.items()}
        last = M.COLUMNS[q][-1]
        bad[last][len(bad[last]) // 2] += 1
        assert not M.compare(q, ref, bad)["ok"], q
        short = {c: v[1:] for c, v in ref.items()}
        assert not M.compare(q, ref, short)["ok"], q
    pr = M.reference("pagerank", *args)
    near = {c: v.copy() for c, v in pr.items()}
    near["rank"] = near["rank"] * (1 + 1e-12)
    assert M.compare("pagerank", pr, near)["ok"]  # within the tolerance


def test_scratch(d):
    for q in M.QUERIES:
        s = M.scratch(CFG, d, q, 3)
        assert s["batches"] == 3 and len(s["algo_ms"]) == 3 and s["graph_bytes"] > 0


@pytest.fixture
def written(monkeypatch, tmp_path):
    """The payloads main() writes, by result name (nothing reaches bench/results)."""
    out = {}

    def fake_write(name, payload, quick=False):
        out[name] = payload
        return str(tmp_path / f"{name}.json")
    monkeypatch.setattr(M, "write_result", fake_write)
    return out


def test_main_end_to_end(written):
    P = M.main(["--nodes", "64", "--edges", "300", "--batches", "3", "--sources", "3", "--queries", "spsp,khop",
                "--modes", "full,jod,drop-degree-exact,drop-random-exact", "--budget-modes", "full,jod",
                "--budget-mb", "0.4", "--budget-max", "12", "--budget-batches", "1", "--sweep-p", "0.9",
                "--bloom-bits", "4096", "--isolate", "none"])
    assert written["memory_modes"] is P
    assert all("failure" not in r for r in P["runs"] + P["budget"] + P["sweep"])
    g = P["summary"]["goals"]
    assert {x["query"] for x in g["jod"]["per_query"]} == {"spsp", "khop"}
    assert g["budget"]["full_fits"] is not None
    assert {x["p"] for x in P["summary"]["sweep_points"]} == {0.5, 0.9}


def test_main_tag_and_the_engines_bloom_size(written):
    """``--tag`` names the results file; ``--bloom-bits`` 0 (the default) leaves the filter's size to the
    engine, which reports the bits and hashes it chose."""
    P = M.main(["--nodes", "64", "--edges", "300", "--batches", "3", "--sources", "3", "--queries", "spsp",
                "--modes", "drop-degree-bloom", "--budget-modes", "", "--sweep-p", "", "--isolate", "none",
                "--tag", "big"])
    assert list(written) == ["memory_modes-big"] and written["memory_modes-big"] is P
    (run,) = P["runs"]
    assert "failure" not in run and run["mode"] == "drop-degree-bloom"
    assert run["ife"]["bloom"]["bits"] >= 1 << 16 and 1 <= run["ife"]["bloom"]["hashes"] <= 8
