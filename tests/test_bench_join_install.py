"""bench.join_install at a tiny size: the kpgnb side's answers are checked against pandas, the checker
rejects wrong answers, and the DuckDB peer (when installed) answers the same joins. No timings asserted."""
import time

import numpy as np
import pytest

from bench import join_install as J

N = 3_000
SIZES = [10, 100]


@pytest.fixture(scope="module")
def expected():
    return J.reference(N, SIZES, 2)


def test_kpgnb_side_answers_checked(expected):
    res = J.kpgnb_side(N, SIZES, repeats=2, unshared_repeats=1, workers=1, expected=expected, log=lambda *a: None)
    assert res["keys"] == N and res["load_s"] >= 0 and res["arrange_export_s"] >= 0
    for kind, reps in (("shared", 2), ("unshared", 1)):
        for m in SIZES:
            r = res[kind][m]
            assert r["answer"] == "ok"
            assert r["repeats"] == reps and len(r["runs"]) == reps
            for rep, rows in enumerate(r["rows"]):
                assert rows == len(expected(m, rep)["k"])
            for f in ("input_ms", "install_ms", "wait_ms", "total_ms", "read_ms", "answer_ms"):
                assert r[f] is not None and r[f] >= 0
    # about 91% of the small keys are in big: the answers are not empty
    assert 0 < len(expected(100, 0)["k"]) < 100


def test_checker_rejects_wrong_answers(expected):
    good = expected(100, 0)
    assert J.check_join({c: good[c].copy() for c in J.COLS}, good) is None
    # the same rows in another order are right
    perm = np.random.default_rng(1).permutation(len(good["k"]))
    assert J.check_join({c: good[c][perm] for c in J.COLS}, good) is None
    missing = {c: good[c][1:] for c in J.COLS}
    assert J.check_join(missing, good).startswith("wrong answer")
    changed = {c: good[c].copy() for c in J.COLS}
    changed["v"][0] += 1
    assert J.check_join(changed, good).startswith("wrong answer")
    swapped = {c: good[c].copy() for c in J.COLS}
    swapped["v"][[0, 1]] = swapped["v"][[1, 0]]  # same multiset per column, wrong rows
    assert J.check_join(swapped, good).startswith("wrong answer")
    assert J.check_join({"k": good["k"]}, good).startswith("wrong answer")


def test_wrong_reference_is_reported_as_failure(expected):
    def wrong(m, r):
        e = expected(m, r)
        return {c: e[c][1:] for c in J.COLS}
    res = J.kpgnb_side(N, [10], repeats=1, unshared_repeats=1, workers=1, expected=wrong, log=lambda *a: None)
    for kind in ("shared", "unshared"):
        assert res[kind][10]["answer"].startswith("wrong answer")
        assert res[kind][10]["total_ms"] is None and res[kind][10]["answer_ms"] is None


def test_duckdb_peer(expected):
    pytest.importorskip("duckdb")
    res = J.peer_duckdb(N, SIZES, 2, 0, 120, expected)
    assert res["status"] == "ok", res
    for cfg in ("table", "index"):
        for m in SIZES:
            assert res["configs"][cfg][m]["answer"] == "ok"
            assert len(res["configs"][cfg][m]["times_ms"]) == 2
    # and a wrong reference makes the peer's entry a failure
    bad = J.peer_duckdb(N, [10], 1, 0, 120, lambda m, r: {c: expected(m, r)[c][:-1] for c in J.COLS})
    assert bad["configs"]["table"][10]["answer"].startswith("wrong answer")
    assert bad["configs"]["table"][10]["median_ms"] is None


def test_peer_timeout():
    t0 = time.perf_counter()
    status, _ = J.run_peer(time.sleep, (30,), 1.0)
    assert status == "timeout"
    assert time.perf_counter() - t0 < 20


def test_rows_of_table(expected):
    res = J.run([N, N // 3], [10], 1, 1, 1, 60, peers=False, log=lambda *a: None)
    rows = J.rows_of(res)
    assert len(rows) == 2 and rows[0]["big"] == N and rows[1]["big"] == N // 3
    assert rows[0]["shared ms"] > 0 and f"vs {N // 3:,}" in rows[0]
