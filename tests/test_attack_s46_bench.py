"""Attack s46: the benchmarks (bench/, bench/README.md, README "Benchmarks").

The promises checked (README, bench/README.md, issue 12): every ``python -m bench.NAME`` answers ``--help``
and ``--quick``; it writes JSON with its parameters, machine, versions and every raw figure; "every benchmark
checks its answers before reporting a time, and a wrong answer is reported as a failure, not a number";
integer options are checked before anything runs. Everything here runs in-process at tiny sizes, with
``bench.common.RESULTS`` pointed at a temporary directory (nothing is written to bench/results), and the
kpgnb side made wrong by monkeypatching (never the reference). No timings are asserted."""
from __future__ import annotations

import argparse
import importlib
import json

import numpy as np
import pytest


MODULES = ["arrange", "churn", "coldstart", "dashboard", "datalog", "graphs", "join_install", "latency",
           "many_times", "memory_modes", "scaling", "sharing", "spark_load", "spark_scaleout"]


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    from bench import common
    monkeypatch.setattr(common, "RESULTS", str(tmp_path))
    return tmp_path


def _refused(exc: BaseException) -> bool:
    """A benchmark refusing to report a time for a wrong answer: WrongAnswer (an AssertionError) or any
    error that says so."""
    return isinstance(exc, AssertionError) or "wrong" in str(exc).lower()


# -- engine answers made wrong (the kpgnb side only) ----------------------------------------------------------

def _wrong_bfs(monkeypatch):
    """kpgnb.graphs.bfs answers every distance one too far, as an engine bug would."""
    import kpgnb.graphs as graphs
    real = graphs.bfs

    def bfs(*args, **kwargs):
        return real(*args, **kwargs).map(lambda node, dist: {"node": node, "dist": dist + 1})

    monkeypatch.setattr(graphs, "bfs", bfs)


def _wrong_count(monkeypatch):
    """Every count(by=...) answers one too many."""
    from kpgnb.engine.collection import Collection
    real = Collection.count

    def count(self, *args, **kwargs):
        return real(self, *args, **kwargs).map(lambda k, count: {"k": k, "count": count + 1})

    monkeypatch.setattr(Collection, "count", count)


def _wrong_join(monkeypatch):
    """Every join answers the right rows with a wrong value column (same row count)."""
    from kpgnb.engine.collection import Collection
    real = Collection.join

    def join(self, *args, **kwargs):
        return real(self, *args, **kwargs).map(lambda k, v: {"k": k, "v": v + 1})

    monkeypatch.setattr(Collection, "join", join)


# -- what works ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_help_exits_zero_and_lists_quick(name, capsys):
    """``python -m bench.NAME --help`` (in-process: main(["--help"])) prints the options, --quick among
    them, and exits 0 without running anything."""
    mod = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "usage" in out.lower()


def test_latency_bfs_rejects_a_wrong_bfs(monkeypatch):
    """bench.latency's BFS loop compares the view with a NumPy BFS (check_bfs): a wrong distance raises
    WrongAnswer instead of a p50. (The control for the scaling test below: the same wrong bfs.)"""
    from bench import latency
    from bench.common import WrongAnswer
    _wrong_bfs(monkeypatch)
    with pytest.raises(WrongAnswer):
        latency.bfs_latency(nodes=60, edges=300, updates=4, workers=1)


# -- answers not checked before a time is reported --------------------------------------------------------------

def test_scaling_bfs_throughput_checks_its_answer(monkeypatch):
    from bench import scaling
    _wrong_bfs(monkeypatch)
    try:
        rate = scaling.bfs_throughput(workers=1, nodes=60, edges=300)
    except Exception as e:  # noqa: BLE001 - refusing is the right outcome
        assert _refused(e), e
        return
    pytest.fail(f"a wrong BFS was timed and reported: {rate:,.0f} edges/s")


def test_latency_install_checks_the_join_answer(monkeypatch):
    from bench import latency
    _wrong_join(monkeypatch)
    try:
        r = latency.install_latency(records=200, queries=10, workers=1, repeats=2)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"a wrong join was timed and reported: install p50 {r['install_with_import_p50_ms']:.2f} ms")


def test_dashboard_checks_the_count_it_times(monkeypatch):
    import comm
    from bench import dashboard
    monkeypatch.setattr(comm, "create_comm", comm.create_comm)  # measure() replaces it for good: restore
    _wrong_count(monkeypatch)
    try:
        r = dashboard.measure(keys=50, updates=5, rounds=1, workers=1)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"a wrong count was timed and reported: {r['closed_updates_per_s']:,.0f} updates/s closed")


def _churn_args(**kw):
    a = dict(rows=300, churn=20, keys=None, bfs=False, nodes=50, edges=200, edge_churn=5, workers=1,
             minutes=0.0, epochs=3, sample_s=0.05, seed=0, plot=False, quick=False)
    a.update(kw)
    return argparse.Namespace(**a)


def test_churn_checks_its_views(monkeypatch):
    from bench import churn
    _wrong_count(monkeypatch)
    try:
        r = churn.run(_churn_args())
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"a wrong count was churned and reported: {r['summary']['updates_per_s']} updates/s")


def test_many_times_loop_checks_its_answer(monkeypatch):
    from bench import many_times
    from kpgnb.engine.collection import Collection
    real = Collection.iterate

    def iterate(self, *args, **kwargs):   # the loop's result with a wrong column
        return real(self, *args, **kwargs).map(lambda a, b: {"a": a, "b": b + 100})

    monkeypatch.setattr(Collection, "iterate", iterate)
    try:
        r = many_times.loop(epochs=3, workers=1)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"a wrong loop answer was timed and reported: {r['total_s']:.3f} s, {r['out_rows']} rows")


def test_spark_load_checks_what_was_loaded(monkeypatch):
    """No Spark needed: load_once only calls ``sdf.toArrow()``. The engine's input loses the first row of
    each insert (as an encoding bug would)."""
    import pyarrow as pa

    from bench import spark_load
    from kpgnb.engine.session import InputSession
    n = 50
    tbl = pa.table({"k": np.arange(n, dtype=np.int64), "x": np.arange(n, dtype=np.float64) / 2,
                    "s": [f"user_{i % 7}" for i in range(n)]})

    class FakeFrame:
        def toArrow(self):
            return tbl

    real = InputSession._encode
    monkeypatch.setattr(InputSession, "_encode", lambda self, rows: real(self, rows)[:, 1:])
    try:
        r = spark_load.load_once(FakeFrame(), workers=1)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"{r['records']} of {n} rows loaded and timed: total {r['total_s']:.4f} s")


def test_arrange_formation_checks_its_trace(monkeypatch):
    from bench import arrange
    from kpgnb.engine.batch import Batch
    real = Batch.form.__func__ if hasattr(Batch.form, "__func__") else Batch.form

    def form(cls, keys, vals, times, diffs, lower, upper):   # every batch loses its first update
        return real(cls, keys[:, 1:], vals[:, 1:], times[1:], diffs[1:], lower, upper)

    monkeypatch.setattr(Batch, "form", classmethod(form))
    try:
        r = arrange.run(batches=3, size=200, keyspace=10**12)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    got = {k: v["final_records"] for k, v in r["efforts"].items()}
    pytest.fail(f"600 updates formed into {got} records and timed")


def test_arrange_open_loop_wrong_contents_report_no_latency(monkeypatch):
    from bench import arrange
    monkeypatch.setattr(arrange, "contents_of", lambda view: (0, None))
    try:
        r = arrange.open_loop_run(2000, 500, 0.3, warmup=0.05, drain=10.0)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    assert r["drained"], "precondition: the run drained (its answer was checked)"
    assert "wrong" in r["answer"]
    figures = {k: r[k] for k in ("p50_ms", "p99_ms", "max_ms", "achieved_per_s")}
    assert all(v is None for v in figures.values()), f"a wrong answer reported with figures {figures}"


def test_graphs_incremental_wrong_answer_is_not_a_latency(monkeypatch, results_dir):
    pytest.importorskip("igraph")
    from bench import graphs as G

    def in_process(target, args, timeout, env=None):   # no spawned children: the patch below applies
        msgs = []
        target(lambda *m: msgs.append(m), *args)
        return msgs, "done"

    real = G.kpgnb_side

    def wrong_side(emit, *args):
        def emit2(*m):
            if m[0] == "incremental":
                nodes, dist = m[2]
                m = (m[0], m[1], (nodes, np.asarray(dist) + 1))
            emit(*m)
        real(emit2, *args)

    monkeypatch.setattr(G, "run_child", in_process)
    monkeypatch.setattr(G, "kpgnb_side", wrong_side)
    out = G.main(["--nodes", "300", "--edges", "1500", "--workers", "1", "--peers", "igraph", "--queries", "bfs",
                  "--changes", "6", "--recomputes", "1", "--peer-timeout", "60"])
    inc = out["results"]["kpgnb"]["W=1"]["incremental"]
    assert inc["final"] == "wrong answer", inc
    met = [g for g in out["goals"] if g["goal"].startswith("incremental BFS W=1") and g["met"] == "yes"]
    row = [r for r in out["incremental_table"] if r["system"] == "kpgnb W=1"][0]
    assert met == [] and row["p50 ms"] is None and row["p99 ms"] is None, (met, row)


def test_datalog_latency_rows_hide_wrong_answers():
    from bench import datalog
    spec = {"name": "rmat1", "kind": "rmat"}
    results = {"kpgnb": {"W=1": {"jobs": {"reach@rmat1": {"status": "wrong answer", "answer": "wrong answer",
                                                           "updates": 10, "p50_ms": 0.5, "p99_ms": 0.9,
                                                           "max_ms": 1.0, "initial_s": 0.1}}}}}
    _, streams = datalog.summarize_latency(results, [], [("reach@rmat1", None, "reach", spec, None)], [1], {})
    assert streams[0]["final answer"] != "ok"
    assert streams[0]["p50 ms"] is None and streams[0]["p99 ms"] is None, streams[0]


# -- options: documented values refused, accepted values that end in a traceback ---------------------------------

def test_join_install_compare_keys_zero_means_none(results_dir):
    from bench import join_install
    res = join_install.main(["--keys", "2000", "--compare-keys", "0", "--sizes", "10", "--repeats", "1",
                             "--unshared-repeats", "1", "--no-peers"])
    assert list(res["bigs"]) == [2000]


class _Spark:
    def stop(self):
        pass


class _Frame:
    def unpersist(self):
        pass


def _zero_repeat_cases():
    return [
        ("latency", ["--keys", "20", "--updates", "3", "--bfs-updates", "2", "--nodes", "20", "--edges", "60",
                     "--workers", "1", "--import-records", "0"]),
        ("join_install", ["--keys", "2000", "--compare-keys", "1000", "--sizes", "10", "--repeats", "1",
                          "--unshared-repeats", "0", "--no-peers"]),
        ("many_times", ["--epochs", "10", "--workers", "1", "--repeat", "0", "--loop-epochs", "--live", "0"]),
        ("spark_load", ["--rows", "10", "--repeats", "0", "--no-pandas"]),
    ]


@pytest.mark.parametrize("name,argv", _zero_repeat_cases(), ids=[c[0] for c in _zero_repeat_cases()])
def test_zero_counts_are_refused_or_run(name, argv, results_dir, monkeypatch, capsys):
    mod = importlib.import_module(f"bench.{name}")
    if name == "spark_load":   # no Spark: a fake session and frame, the load itself not run
        import kpgnb.spark as ks
        monkeypatch.setattr(ks, "session", lambda **kw: _Spark())
        monkeypatch.setattr(mod, "frame", lambda *a, **k: _Frame())
        monkeypatch.setattr(mod, "load_once", lambda sdf, workers: {
            "to_arrow_s": 1.0, "encode_insert_s": 1.0, "advance_arrange_s": 1.0, "engine_s": 2.0, "total_s": 3.0,
            "records": 10, "symbols": 1, "arrow_chunks": 1})
    try:
        mod.main(argv)
    except SystemExit as e:
        assert e.code == 2 and "error" in capsys.readouterr().err
    except (ValueError, IndexError, ZeroDivisionError) as e:
        pytest.fail(f"bench.{name} {' '.join(argv)}: a traceback ({type(e).__name__}: {e})")


# -- what the JSON records -----------------------------------------------------------------------------------------

SCALING_ARGV = ["--workers", "2,1", "--updates", "200", "--batch", "100", "--keys", "50", "--nodes", "40",
                "--edges", "120", "--repeats", "1"]


def _walk_keys(d) -> set:
    out = set()
    if isinstance(d, dict):
        for k, v in d.items():
            out.add(str(k))
            out |= _walk_keys(v)
    elif isinstance(d, list):
        for v in d:
            out |= _walk_keys(v)
    return out


def test_scaling_json_records_its_parameters(results_dir):
    from bench import scaling
    scaling.main(SCALING_ARGV)
    data = json.loads((results_dir / "scaling.json").read_text())
    keys = _walk_keys(data)
    assert {"machine", "versions"} <= set(data)
    missing = {"updates", "batch", "keys", "nodes", "edges", "repeats"} - keys
    assert not missing, f"parameters missing from scaling.json: {sorted(missing)}"


def test_scaling_speedup_is_over_one_worker(results_dir):
    from bench import scaling
    res = scaling.main(SCALING_ARGV)
    assert res["runs"][1]["count_speedup"] == 1.0 and res["runs"][1]["bfs_speedup"] == 1.0, res["runs"]


def test_join_install_versions_name_duckdb(results_dir):
    pytest.importorskip("duckdb")
    from bench import join_install
    res = join_install.main(["--keys", "2000", "--compare-keys", "1000", "--sizes", "10", "--repeats", "1",
                             "--unshared-repeats", "1", "--peer-timeout", "120"])
    duck = res["bigs"][2000]["duckdb"]
    assert duck["status"] == "ok", duck
    data = json.loads((results_dir / "join_install.json").read_text())
    assert data["versions"].get("duckdb") == duck["version"], data["versions"]


class _Ran(Exception):
    pass


def test_sharing_unknown_mode_is_refused(monkeypatch, results_dir, capsys):
    from bench import sharing

    def ran(*a, **k):
        raise _Ran("the benchmark ran an unknown mode")

    monkeypatch.setattr(sharing, "bounded", ran)
    with pytest.raises(SystemExit) as e:
        sharing.main(["--quick", "--modes", "sharde,unshared"])
    assert e.value.code == 2 and "sharde" in capsys.readouterr().err


def test_coldstart_checks_the_first_result(monkeypatch):
    from bench import coldstart
    monkeypatch.setattr(coldstart, "_counters", lambda: [])      # no global numba listener from a test
    monkeypatch.setattr(coldstart, "_cache_loads", lambda: 0)
    from kpgnb.engine.session import InputSession
    real = InputSession._encode
    monkeypatch.setattr(InputSession, "_encode", lambda self, rows: real(self, rows)[:, 1:])  # loses a row
    try:
        r = coldstart.child_script(200, False)
    except Exception as e:  # noqa: BLE001
        assert _refused(e), e
        return
    pytest.fail(f"a wrong first result was timed: {r['first_result_s']:.2f} s, rows_out {r['rows_out']}")


def test_many_times_skip_reason_names_the_error(monkeypatch, results_dir):
    from bench import many_times

    def bounded(timeout, **kw):   # the first backlog case fails its answer check in the child
        if kw.get("case") == "backlog" and not kw.get("before_install"):
            return {**kw, "error": "AssertionError: [2499]"}
        return {**kw, "total_s": 0.1, "wait_s": 0.1}

    monkeypatch.setattr(many_times, "bounded", bounded)
    out = many_times.main(["--epochs", "10", "20", "--workers", "1", "--repeat", "1", "--loop-epochs", "--live", "0"])
    first, second = out["backlog"]
    assert "error" in first
    assert "timed out" not in str(second.get("skipped", "")), second
