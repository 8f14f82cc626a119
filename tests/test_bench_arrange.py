"""bench.arrange's open-loop mode (K-Pg Fig. 6a/6e) at a tiny size: the structure of its results and its
answer check (timings are not asserted)."""
import numpy as np

from bench import arrange as A


def test_update_stream_keeps_the_collection_size():
    keys = 1000
    k, d = A.updates_of(0, 10, keys)
    assert list(d) == [1, -1] * 5
    assert ((k >= 0) & (k < keys)).all()
    # after an even number of updates the collection holds `keys` records again
    assert A.expected_contents(0, keys)[0] == keys
    assert A.expected_contents(400, keys)[0] == keys
    assert A.expected_contents(401, keys)[0] == keys + 1
    # the stream is the same however it is cut into epochs
    a = np.concatenate([A.updates_of(0, 7, keys)[0], A.updates_of(7, 20, keys)[0]])
    assert np.array_equal(a, A.updates_of(0, 20, keys)[0])


def test_contents_check_rejects_wrong_contents():
    exp = A.expected_contents(100, 500)
    assert A.check_contents(exp, exp) is None
    assert A.check_contents((exp[0] - 1, exp[1]), exp).startswith("wrong answer")
    assert A.check_contents((exp[0], exp[1] ^ 1), exp).startswith("wrong answer")


def test_open_loop_tiny_run_structure():
    res = A.open_loop(2_000, [4_000, 2_000], seconds=0.4, efforts=["eager", "lazy"], warmup=0.1,
                      log=lambda *a: None)
    assert res["mode"] == "open-loop" and res["workers"] == 1
    assert [r["offered_per_s"] for r in res["runs"]] == [4_000, 2_000]
    assert [r["effort"] for r in res["efforts"]] == ["eager", "lazy"]
    assert res["effort_rate"] in (4_000, 2_000)
    for r in res["runs"] + res["efforts"]:
        assert r["answer"] == "ok", r["answer"]
        assert r["drained"] and r["incomplete"] == 0
        assert r["updates"] == round(r["offered_per_s"] * 0.4)
        assert sum(r["histogram"]) == r["measured_updates"] > 0
        assert r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["achieved_per_s"] > 0 and isinstance(r["kept_up"], bool)
        fracs = [y for _, y in r["ccdf"]]
        assert fracs[0] == 1.0 and all(a >= b for a, b in zip(fracs, fracs[1:]))
        assert r["epochs"] >= 1 and sum(r["engine_histogram"]) > 0


def test_halving():
    assert A.halving(1_000_000, 125_000) == [1_000_000, 500_000, 250_000, 125_000]
