"""Attack s48: the benchmark harness (bench/, bench/README.md, README "Benchmarks", issues 12-14).

The promise checked (README "Benchmarks", issue 12): "each answer is checked before a time is reported (a
wrong answer is a failure, not a number)", ratios as labelled, goals that a wrong answer cannot meet,
options refused with an argparse error rather than a traceback, and a missing optional peer reported
rather than crashing. Everything runs in-process at tiny sizes; ``bench.common.RESULTS`` is pointed at a
temporary directory (nothing is written to bench/results). A wrong answer is made by monkeypatching the
system under test (the kpgnb side or a peer), never the reference. No timings are asserted. The earlier
round (tests/test_attack_s46_bench.py) covers --help, the answer checks of latency/scaling/dashboard/churn/
many_times.loop/spark_load/arrange/coldstart and the incremental table of bench.graphs; this file does not
repeat them."""
from __future__ import annotations

import importlib.util
import sys

import pytest


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    from bench import common
    monkeypatch.setattr(common, "RESULTS", str(tmp_path))
    return tmp_path


def _graphs_in_process(monkeypatch):
    """bench.graphs with its sides run in this process (no spawned children), so patches apply."""
    from bench import graphs as G

    def in_process(target, args, timeout, env=None):
        msgs = []
        target(lambda *m: msgs.append(m), *args)
        return msgs, "done"

    monkeypatch.setattr(G, "run_child", in_process)
    return G


TINY_GRAPH = ["--nodes", "300", "--edges", "1500", "--peer-timeout", "60"]


# -- bench.join_install ------------------------------------------------------------------------------------------

def test_join_install_wrong_answer_reports_no_install_time(monkeypatch):
    """kpgnb's join answers every row with a wrong v: the size is reported "wrong answer" in "shared ms",
    yet the same row of the table (and the summary in the JSON) carries the install time of that wrong
    run, a number beside a failure."""
    from bench import join_install as J
    from kpgnb.engine.collection import Collection
    real = Collection.join

    def join(self, *args, **kwargs):
        return real(self, *args, **kwargs).map(lambda k, v: {"k": k, "v": v + 1})

    monkeypatch.setattr(Collection, "join", join)
    expected = J.reference(2000, [10], 1)
    res = J.kpgnb_side(2000, [10], 1, 1, 1, 0, expected, log=lambda s: None)
    shared = res["shared"][10]
    assert shared["answer"] != "ok", "precondition: the wrong join was detected"
    row = J.rows_of({"sizes": [10], "bigs": {2000: res}})[0]
    assert row["shared ms"] == "wrong answer"
    figures = {"install ms": row["install ms"], "answer ms": row["answer ms"]}
    assert all(v is None or isinstance(v, str) for v in figures.values()), \
        f"a wrong answer reported with times {figures}"
    timed = {f: shared[f] for f in ("input_ms", "install_ms", "wait_ms", "read_ms") if shared.get(f) is not None}
    assert not timed, f"the JSON summary of a wrong answer holds times {timed}"


def test_join_install_missing_duckdb_is_reported(monkeypatch, results_dir, capsys):
    """DuckDB not importable: the run completes, the peer's cells say "not installed" and no version is
    claimed for it."""
    from bench import join_install as J
    monkeypatch.setitem(sys.modules, "duckdb", None)
    res = J.main(["--keys", "2000", "--compare-keys", "0", "--sizes", "10", "--repeats", "1",
                  "--unshared-repeats", "1"])
    assert res["bigs"][2000]["duckdb"] == {"status": "not installed"}
    assert "duckdb" not in res.get("versions", {})
    assert "not installed" in capsys.readouterr().out
    assert (results_dir / "join_install.json").exists()


# -- bench.graphs --------------------------------------------------------------------------------------------------

def test_graphs_peer_recompute_answers_are_checked(monkeypatch, results_dir):
    """DuckDB answers BFS right on the loaded graph but wrong (every distance + 1) once an edit has been
    applied: the batch BFS is checked (ok), the "edit + BFS" recomputes are not, and their median is
    reported as DuckDB's incremental figure."""
    pytest.importorskip("igraph")
    pytest.importorskip("duckdb")
    G = _graphs_in_process(monkeypatch)
    from bench import peers as P
    edited = set()
    real_apply, real_bfs = P.PEERS["duckdb"]["apply"], P.PEERS["duckdb"]["bfs"]

    def apply(con, change):
        real_apply(con, change)
        edited.add(id(con))

    def bfs(con, roots):
        nodes, dist = real_bfs(con, roots)
        return (nodes, dist + 1) if id(con) in edited else (nodes, dist)

    monkeypatch.setitem(P.PEERS["duckdb"], "apply", apply)
    monkeypatch.setitem(P.PEERS["duckdb"], "bfs", bfs)
    out = G.main(TINY_GRAPH + ["--workers", "1", "--peers", "igraph,duckdb", "--queries", "bfs",
                               "--changes", "4", "--recomputes", "2"])
    assert out["results"]["peers"]["duckdb"]["queries"]["bfs"]["status"] == "ok", "precondition"
    assert edited, "precondition: DuckDB applied edits"
    row = [r for r in out["incremental_table"] if r["system"] == "duckdb: edit + BFS"]
    timed = [r for r in row if r.get("p50 ms") is not None]
    assert not timed, f"wrong recomputed answers reported with a time: {timed}"


def test_graphs_ratio_column_names_its_base(monkeypatch, results_dir):
    """With ``--workers 1`` the ratios are taken over kpgnb W=1's total (the printed line even says "x kpgnb
    W=2 = total / kpgnb W=1's total"), but the table and graphs.json keep the key "x kpgnb W=2", so a reader
    (or notebooks/04-benchmarks) takes them for ratios over a W=2 run that never happened."""
    pytest.importorskip("igraph")
    G = _graphs_in_process(monkeypatch)
    out = G.main(TINY_GRAPH + ["--workers", "1", "--peers", "igraph", "--queries", "bfs", "--changes", "0"])
    assert "W=2" not in out["results"]["kpgnb"], "precondition: no W=2 run"
    mislabelled = [r for r in out["table"] if r.get("x kpgnb W=2") is not None]
    assert not mislabelled, f"ratios over W=1 under the label 'x kpgnb W=2': {mislabelled}"


def test_graphs_without_igraph_checks_against_networkx(monkeypatch, results_dir):
    """igraph missing: the reference falls back to networkx, igraph is reported "not installed" in the
    table, and kpgnb's answers (batch and after the changes) are still checked."""
    pytest.importorskip("networkx")
    G = _graphs_in_process(monkeypatch)
    monkeypatch.setitem(sys.modules, "igraph", None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "igraph" else real(name, *a))
    out = G.main(TINY_GRAPH + ["--workers", "1", "--peers", "igraph,networkx", "--queries", "bfs,wcc",
                               "--changes", "4", "--recomputes", "1"])
    assert out["reference"] == "networkx"
    assert out["notes"].get("igraph") == "not installed"
    k = out["results"]["kpgnb"]["W=1"]
    assert {q: r["status"] for q, r in k["queries"].items()} == {"bfs": "ok", "wcc": "ok"}
    assert k["incremental"]["final"] == "ok"
    assert any(r["system"] == "igraph" and r.get("note") == "not installed" for r in out["table"])


# -- bench.datalog ---------------------------------------------------------------------------------------------------

def test_datalog_batch_goal_not_met_with_a_wrong_answer():
    """kpgnb is right and faster on reach, wrong on cc; DuckDB finishes both. The goal "kpgnb faster than
    every peer where the peer finishes" leaves the cc job out ("faster in 1 of 1") and reads "yes"."""
    from bench import datalog as D
    batch = [("reach@g", "reach", {}), ("cc@g", "cc", {})]
    results = {"kpgnb": {"W=1": {"jobs": {
        "reach@g": {"status": "ok", "answer": "ok", "total_s": 1.0},
        "cc@g": {"status": "wrong answer", "answer": "wrong answer", "total_s": 0.5}}}},
        "peers": {"duckdb": {"jobs": {"reach@g": {"status": "ok", "total_s": 2.0},
                                      "cc@g": {"status": "ok", "total_s": 2.0}}}}}
    refs = {"reach@g": {"rows": 5}, "cc@g": {"rows": 7}}
    rows, goals = D.summarize_batch(results, batch, {}, refs, [1], ["duckdb"], {})
    assert [r["kpgnb W=1 s"] for r in rows if r["program"] == "cc"] == ["WRONG"], "precondition"
    met = [g for g in goals if g["met"] == "yes"]
    assert not met, f"a goal met although kpgnb answered cc wrong: {met}"


@pytest.mark.parametrize("value", ["rmat9", "tree"])
def test_datalog_unknown_stream_graph_is_an_option_error(value, monkeypatch, results_dir, capsys):
    """--graphs is validated ("unknown graph ...; choose from tree,grid,gnp,rmat1..rmat4", exit 2);
    --stream-graph, "the RMAT configuration the streaming runs use", is not: ``rmat9`` raises KeyError 9 and
    ``tree`` ValueError (int('')), after the references were computed."""
    pytest.importorskip("scipy")   # the references computed before the option is read
    from bench import datalog as D
    from bench import graphs as G

    def ran(*a, **k):
        raise AssertionError("the benchmark ran with an unknown --stream-graph")

    monkeypatch.setattr(G, "run_steps", ran)
    with pytest.raises(SystemExit) as e:
        D.main(["--quick", "--programs", "reach", "--graphs", "rmat1", "--stream-graph", value, "--asks", "0",
                "--workers", "1", "--latency-workers", "1", "--peers", "duckdb"])
    assert e.value.code == 2 and "--stream-graph" in capsys.readouterr().err


# -- bench.memory_modes -----------------------------------------------------------------------------------------------

def _mm_run(query, mode, trace_bytes, p50_ms, failure=None):
    r = {"job": {"kind": "query", "query": query, "mode": mode}, "p": None, "load_s": 0.1,
         "trace_bytes_peak": {"total": trace_bytes, "ife": trace_bytes // 2}, "peak_rss": 2 ** 28,
         "rss_baseline": 2 ** 27, "p50_ms": p50_ms, "p99_ms": 2 * p50_ms, "mean_ms": p50_ms, "batches": 10,
         "ife": {}}
    if failure:
        r["failure"] = failure
    return r


def _mm_payload(runs):
    return {"parameters": {"queries": ["spsp", "khop"], "budget_mb": 4.0, "drop_p": 0.5}, "runs": runs,
            "budget": [], "sweep": [], "scratch": {}, "scratch_budget": {}}


def test_memory_modes_jod_goal_not_met_with_a_wrong_answer():
    """JOD: 4x less trace memory at 1.5x the time for SPSP (meets the goal), a wrong answer for K-hop. The
    goal's status is "met": the wrong K-hop run is silently not part of it."""
    from bench import memory_modes as M
    S = M.summarize(_mm_payload([
        _mm_run("spsp", "full", 4_000_000, 1.0), _mm_run("spsp", "jod", 1_000_000, 1.5),
        _mm_run("khop", "full", 4_000_000, 1.0), _mm_run("khop", "jod", 1_000_000, 1.5, failure="wrong answer")]))
    assert any(r.get("failure") == "wrong answer" for r in S["rows"]), "precondition"
    assert S["goals"]["jod"]["status"] != "met", S["goals"]["jod"]


def test_memory_modes_degree_goal_not_met_with_a_wrong_degree_answer():
    """Degree 200x faster than Random on SPSP, but wrong on K-hop (Random right): status "met". (A wrong
    Random run already counts against the goal; a wrong Degree run is simply skipped.)"""
    from bench import memory_modes as M
    S = M.summarize(_mm_payload([
        _mm_run("spsp", "drop-degree-exact", 1_000_000, 1.0), _mm_run("spsp", "drop-random-exact", 1_000_000, 200.0),
        _mm_run("khop", "drop-degree-exact", 1_000_000, 1.0, failure="wrong answer"),
        _mm_run("khop", "drop-random-exact", 1_000_000, 200.0)]))
    assert S["goals"]["degree_vs_random"]["status"] != "met", S["goals"]["degree_vs_random"]


# -- bench.many_times -------------------------------------------------------------------------------------------------

def test_many_times_live_checks_its_counts(monkeypatch):
    """count(by="g") answers every count one too many: live() still returns caught_up and catch_up_s (a
    time) for views whose answers were never compared with the rows the writer inserted."""
    from bench import many_times as MT
    from kpgnb.engine.collection import Collection
    real = Collection.count

    def count(self, *args, **kwargs):
        by = kwargs.get("by", args[0] if args else ())
        out = real(self, *args, **kwargs)
        return out.map(lambda g, count: {"g": g, "count": count + 1}) if by == "g" else out

    monkeypatch.setattr(Collection, "count", count)
    try:
        r = MT.live(duration=1.0, workers=1, sides=1)
    except Exception as e:  # noqa: BLE001 - refusing is the right outcome
        assert isinstance(e, AssertionError) or "wrong" in str(e).lower(), e
        return
    pytest.fail(f"wrong counts reported with figures: caught_up={r['caught_up']}, catch_up_s={r['catch_up_s']}")


def test_many_times_loop_failure_is_shown_as_failed(monkeypatch, results_dir, capsys):
    """The backlog table says "failed" for a case whose child raised WrongAnswer; the loop table prints the
    same failure as "-", the mark of an empty cell."""
    from bench import many_times as MT

    def bounded(timeout, **kw):
        if kw["case"] == "loop":
            return {**kw, "error": "WrongAnswer: loop: wrong answer: 12 rows, expected 14"}
        return {**kw, "total_s": 0.1, "wait_s": 0.1}

    monkeypatch.setattr(MT, "bounded", bounded)
    out = MT.main(["--epochs", "--workers", "1", "--loop-epochs", "100", "--live", "0", "--repeat", "1"])
    assert "error" in out["loop"][0], "precondition"
    text = capsys.readouterr().out
    loop_lines = [ln for ln in text.splitlines() if ln.startswith("1 ") and "100" in ln]
    assert loop_lines and all(("failed" in ln or "wrong" in ln) for ln in loop_lines), text
