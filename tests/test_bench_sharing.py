"""bench.sharing at a tiny size: both modes answer the four interactive queries correctly under the mixed
stream (checked against the NumPy/pandas reference, itself checked against networkx), the check rejects a
wrong answer, and kuzu (when installed) answers the same queries. No timings are asserted."""
import copy

import numpy as np
import pytest

from bench import sharing as S

CFG = {"nodes": 300, "edges": 1500, "rate": 120.0, "duration": 1.5, "warmup": 0.0, "live": 6,
       "closed_queries": 2, "kuzu_queries": 12, "checks": 2, "workers": 1, "seed": 3}


@pytest.fixture(scope="module")
def data():
    src, dst = S.make_graph(CFG["nodes"], CFG["edges"], CFG["seed"])
    return src, dst, S.make_stream(CFG, src, dst)


def test_graph_and_stream(data):
    src, dst, stream = data
    packed = src * CFG["nodes"] + dst
    assert len(src) == CFG["edges"] and (src != dst).all() and (np.diff(packed) > 0).all()
    k = stream["kind"]
    assert len(k) == int(CFG["rate"] * CFG["duration"])
    assert (k < 2).sum() == len(k) // 2  # half edge changes, half query arrivals
    ins = stream["a"][k == S.EDGE_INS] * CFG["nodes"] + stream["b"][k == S.EDGE_INS]
    dels = stream["a"][k == S.EDGE_DEL] * CFG["nodes"] + stream["b"][k == S.EDGE_DEL]
    assert not np.isin(ins, packed).any() and np.isin(dels, packed).all()
    assert len(np.unique(ins)) == len(ins) and len(np.unique(dels)) == len(dels)


def test_reference_matches_networkx(data):
    nx = pytest.importorskip("networkx")
    src, dst, stream = data
    k = stream["kind"]
    half = len(k) // 2  # the graph after the first half of the stream's edge changes
    ins, dels = (k == S.EDGE_INS) & (np.arange(len(k)) < half), (k == S.EDGE_DEL) & (np.arange(len(k)) < half)
    g = S.Graph(CFG["nodes"], src, dst, (stream["a"][ins], stream["b"][ins]), (stream["a"][dels], stream["b"][dels]))
    G = nx.DiGraph()
    G.add_nodes_from(range(CFG["nodes"]))
    G.add_edges_from(zip(src.tolist(), dst.tolist()))
    G.add_edges_from(zip(stream["a"][ins].tolist(), stream["b"][ins].tolist()))
    G.remove_edges_from(zip(stream["a"][dels].tolist(), stream["b"][dels].tolist()))
    xs = np.array([0, 5, 17, 5, 123])
    assert S.reference(g, "lookup", xs[:, None]).tolist() == sorted(
        [x, d] for x in xs.tolist() for d in G.successors(x))
    assert S.reference(g, "hop1", xs[:, None]).tolist() == sorted(
        [x, n] for x, n in {(x, n) for x in xs.tolist() for n in list(G.successors(x)) + list(G.predecessors(x))})
    assert S.reference(g, "hop2", xs[:, None]).tolist() == sorted(
        [x, z] for x, z in {(x, z) for x in xs.tolist() for m in G.successors(x) for z in G.successors(m)})
    pairs = np.array([[0, 1], [5, 17], [17, 5], [123, 200], [3, 4]] + [[i, (7 * i + 11) % 300] for i in range(40)])
    want = []
    for x, y in pairs.tolist():
        try:
            d = nx.shortest_path_length(G, x, y)
        except nx.NetworkXNoPath:
            continue
        if d <= 4:
            want.append([x, y, d])
    assert S.reference(g, "path", pairs).tolist() == sorted(want)
    assert want  # some pairs are within 4 steps


def _wrong(res, cls, nodes):
    bad = copy.deepcopy(res)
    rows = bad["answers"][-1]["rows"][cls]
    if rows:
        rows.pop()
    else:
        rows.append([nodes + 1] * len(S.COLUMNS[cls]))
    return bad


@pytest.mark.parametrize("mode", ["shared", "unshared"])
def test_engine_answers(data, mode):
    src, dst, stream = data
    res = S.run_engine(CFG, mode, src, dst, stream)
    chk = S.check_engine(CFG, res, src, dst, stream)
    assert chk["ok"], [c for c in chk["checked"] if not c["ok"]]
    assert {c["when"] for c in chk["checked"]} == {"during", "end"}
    for cls in S.CLASSES:  # every class answered something non-trivial, and every query was answered
        assert any(c["expected_rows"] > 0 for c in chk["checked"] if c["cls"] == cls), cls
        assert res["unanswered"][cls] == 0 and len(res["open_ms"][cls]) > 0
        assert len(res["closed_ms"][cls]) == CFG["closed_queries"]
        assert not S.check_engine(CFG, _wrong(res, cls, CFG["nodes"]), src, dst, stream)["ok"], cls
    assert res["trace_bytes_end"] > 0 and res["peak_rss"] >= res["rss_baseline"]
    # the input's own arrangement is the edges by src in both modes; besides it the shared mode arranges the
    # edges once (by dst), the unshared six times (each query its own)
    edge_arrs = [a for a in res["arrangements"] if a["key"] in (["src"], ["dst"])]
    assert [a["key"] for a in edge_arrs if a["kind"] == "input"] == [["src"]]
    own = [a for a in edge_arrs if a["kind"] != "input"]
    assert len(own) == (1 if mode == "shared" else 6), own
    if mode == "shared":
        assert own[0]["key"] == ["dst"]


def test_kuzu_answers(data):
    pytest.importorskip("kuzu")
    src, dst, stream = data
    res = S.run_kuzu(CFG, src, dst, stream)
    chk = S.check_kuzu(CFG, res, src, dst)
    assert chk["ok"], [c for c in chk["checked"] if not c["ok"]]
    for cls in S.CLASSES:
        assert len(res["latency_ms"][cls]) == len(res["args"][cls]) > 0
        bad = copy.deepcopy(res)
        answers = bad["answers"][cls]
        i = next((i for i, a in enumerate(answers) if a), None)
        if i is None:
            answers[0].append([CFG["nodes"] + 1] * (len(S.COLUMNS[cls]) - len(S.INPUTS[cls][1])))
        else:
            answers[i].pop()
        assert not S.check_kuzu(CFG, bad, src, dst)["ok"], cls
