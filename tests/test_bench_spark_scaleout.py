"""bench.spark_scaleout at a tiny size: the program end to end (engine, kp.spark.run and the hand-written
PySpark BFS on two scales, every answer checked against the reference, the JSON's ratios and growth), a
wrong answer reported as a failure rather than a time, and the deadline that cancels a Spark step. No
timings are asserted."""
import json
import os
import threading

import numpy as np
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("igraph")

from bench import spark_scaleout as S  # noqa: E402


def test_program_end_to_end(spark, tmp_path, monkeypatch):
    import bench.common
    monkeypatch.setattr(bench.common, "RESULTS", str(tmp_path))
    # a dense little graph: few BFS levels and WCC rounds (the backend's cost is per round, not per row);
    # one scale (the growth between scales: test_growth_... below)
    out = S.main(["--quick", "--nodes", "6", "--edges", "40", "--doublings", "0", "--partitions", "2", "--queries", "bfs,wcc",
                  "--no-warmup"])
    saved = json.load(open(os.path.join(tmp_path, "spark_scaleout-quick.json")))
    assert saved["quick"] and saved["benchmark"] == "spark_scaleout"
    assert saved["params"]["scales"] == [1] and saved["params"]["engine_scales"] == [1]
    assert not saved["params"]["session_started_here"]   # the fixture's session, left running
    assert [(r["nodes"], r["edges"]) for r in saved["sizes"]] == [(6, 40)]
    for rec in saved["sizes"]:
        assert rec["reference"] == "igraph" and rec["spark_load"]["s"] > 0
        for q in ("bfs", "wcc"):
            systems = ("engine", "backend", "hand") if q == "bfs" else ("engine", "backend")
            for name in systems:
                r = rec["queries"][q][name]
                assert r["status"] == "ok" and r["answer"] == "ok", (rec["scale"], q, name, r)
                assert r["total_s"] > 0
            assert rec["queries"][q]["backend"]["jobs"] > 0 and rec["queries"][q]["backend"]["tasks"] > 0
            assert "hand" not in rec["queries"]["wcc"]
    assert saved["checked"] == {"checked": 5, "wrong": [], "failed": []}
    for q in ("bfs", "wcc"):
        r = saved["ratios"][q]
        assert set(r["backend_over_engine"]) == {"1"} and set(r["backend_over_engine_from_arrays"]) == {"1"}
        assert r["growth"] == {}
    assert set(saved["ratios"]["bfs"]["backend_over_hand"]) == {"1"}
    assert saved["ratios"]["wcc"]["backend_over_hand"] == {}
    assert len(saved["table"]) == 2 and all(row["backend s"] is not None for row in saved["table"])
    assert {(g["query"], g["system"]) for g in saved["growth"]} == {
        ("bfs", "backend"), ("bfs", "hand-written"), ("bfs", "engine"), ("wcc", "backend"), ("wcc", "engine")}
    assert out["checked"] == saved["checked"]


def test_a_wrong_answer_is_a_failure_not_a_time():
    nodes = np.arange(5, dtype=np.int64)
    want = (nodes, np.array([0, 1, 1, 2, 3]))
    ok = S.verdict("bfs", {"total_s": 1.0, "jobs": 4}, want, want)
    assert ok["status"] == "ok" and ok["total_s"] == 1.0
    bad = S.verdict("bfs", {"run_s": 0.5, "total_s": 1.0, "jobs": 4}, (nodes, np.array([0, 1, 2, 2, 3])), want)
    assert bad["status"] == "wrong answer" and "values differ" in bad["detail"]
    assert not any(k.endswith("_s") for k in bad) and bad["jobs"] == 4
    rec = {"scale": 1, "nodes": 5, "edges": 9, "engine_load_s": 0.1, "spark_load": {"s": 0.2},
           "queries": {"bfs": {"engine": ok, "backend": bad, "hand": ok}}}
    rows, growth, ratios, checked = S.summarize([rec], ["bfs"])
    assert rows[0]["backend s"] is None and rows[0]["backend/engine"] is None
    assert "backend: wrong answer" in rows[0]["note"]
    assert checked["checked"] == 3 and len(checked["wrong"]) == 1
    assert ratios["bfs"]["backend_over_engine"] == {}


def test_growth_is_the_time_of_each_doubling_over_the_one_before():
    def rec(s, t):
        return {"scale": s, "nodes": s, "edges": s, "spark_load": {"s": 0.1}, "engine_load_s": 0.1,
                "queries": {"wcc": {"engine": {"status": "ok", "total_s": 1.0},
                                    "backend": {"status": "ok", "total_s": t, "jobs": 1}}}}
    rows, growth, ratios, _ = S.summarize([rec(1, 2.0), rec(2, 5.0), rec(4, 9.0)], ["wcc"])
    assert ratios["wcc"]["growth"] == {"2x/1x": 2.5, "4x/2x": 1.8}
    assert ratios["wcc"]["backend_over_engine"] == {"1": 2.0, "2": 5.0, "4": 9.0}
    assert ratios["wcc"]["backend_over_engine_from_arrays"]["1"] == pytest.approx(2.1 / 1.1)
    (back,) = [g for g in growth if g["system"] == "backend"]
    assert back["4x/2x"] == 1.8


def test_deadline_cancels_the_job_group_until_the_step_ends():
    class FakeContext:
        def __init__(self):
            self.cancelled = []
            self.event = threading.Event()

        def cancelJobGroup(self, group):
            self.cancelled.append(group)
            self.event.set()

    sc = FakeContext()
    with S.Deadline(sc, "g", 0.05) as dl:
        assert sc.event.wait(10)
    assert dl.fired and sc.cancelled[0] == "g"
    sc = FakeContext()
    with S.Deadline(sc, "h", 30.0) as dl:
        pass
    assert not dl.fired and sc.cancelled == []

