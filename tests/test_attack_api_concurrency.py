"""A notebook's view of concurrency: a background thread feeds an input (good batches interleaved with bad
ones, which must be refused without leaving anything behind) while the main thread installs, reads and
drops dataflows. Every dataflow installed at any point must end with exactly the model's answer, every
read at ``at=`` an epoch must equal the model at that epoch, and no refused batch may leak in."""
import threading

import numpy as np
import pytest

import kpgnb as kp

K = 50
EPOCHS = 40


def _stream(seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(EPOCHS):
        n = int(rng.integers(1, 30))
        out.append((rng.integers(0, K, n).astype(np.int64), rng.integers(-3, 10, n).astype(np.int64)))
    return out


def _model(stream, upto):
    counts = np.zeros(K, np.int64)
    sums = np.zeros(K, np.int64)
    for keys, vals in stream[:upto]:
        np.add.at(counts, keys, 1)
        np.add.at(sums, keys, vals)
    return counts, sums


def _vec(df, col):
    out = np.zeros(K, np.int64)
    out[df["k"].to_numpy()] = df[col].to_numpy()
    return out


@pytest.mark.parametrize("seed", [3, 11])
def test_writer_thread_with_refused_batches_while_main_installs_and_reads(seed):
    stream = _stream(seed)
    eng = kp.Engine(workers=2)
    try:
        x = eng.input("x", ["k", "v"])
        refused, errors = [], []

        def writer():
            try:
                for e, (keys, vals) in enumerate(stream):
                    x.insert({"k": keys, "v": vals})
                    # bad batches between good ones: each must be refused and change nothing
                    for bad in ({"k": keys[:1], "v": np.array([1.5])},                  # fraction
                                {"k": np.array([2 ** 63], np.uint64), "v": [1]},          # beyond int64
                                [(1, None)],                                                # a null
                                [(1, 2, 3)]):                                               # wrong arity
                        try:
                            x.insert(bad)
                        except kp.SchemaError:
                            refused.append(e)
                    x.advance_to(e + 1)
            except BaseException as err:  # noqa: BLE001 - reported by the main thread
                errors.append(err)

        th = threading.Thread(target=writer)
        th.start()
        views = []
        i = 0
        while th.is_alive() or i < 3:
            with eng.dataflow(f"q{i}") as df:
                src = df.input("x")
                c = src.count(by="k").view("c")
                s = src.sum(by="k", col="v").view("s", history=EPOCHS + 1)
            views.append((c, s))
            eng.wait(s, timeout=30)
            # a read at a final epoch equals the model at that epoch
            e = s.epoch
            if e is not None and e >= 1:
                got = _vec(s.to_pandas(at=e - 1), "v")
                assert np.array_equal(got, _model(stream, e)[1]), f"sum at epoch {e - 1} differs"
            if i % 3 == 2:
                eng.drop(f"q{i - 1}")
                views = [(c, s) for c, s in views if c.dataflow != f"q{i - 1}"]
            i += 1
        th.join(60)
        assert not errors, errors
        assert len(refused) == 4 * EPOCHS
        counts, sums = _model(stream, EPOCHS)
        for c, s in views:
            eng.wait(c, timeout=30)
            eng.wait(s, timeout=30)
            assert np.array_equal(_vec(c.to_pandas(), "count"), counts), c.dataflow
            assert np.array_equal(_vec(s.to_pandas(), "v"), sums), s.dataflow
        assert x.epoch == EPOCHS
    finally:
        eng.close()


def test_inputs_created_and_dropped_while_another_thread_feeds():
    """input()/drop_input() from the main thread while a writer feeds a different input: the fed input's
    rows are all there at the end, and the names come and go cleanly."""
    eng = kp.Engine(workers=2)
    try:
        x = eng.input("x", ["k"])
        with eng.dataflow("cx") as df:
            cx = df.input("x").count().view("cx")
        done = []

        def writer():
            for e in range(200):
                x.insert([e % 7])
                x.advance_to(e + 1)
            done.append(True)

        th = threading.Thread(target=writer)
        th.start()
        for j in range(30):
            tmp = eng.input(f"tmp{j % 3}", ["a"], rows=[(j,)])
            tmp.advance_to(1)
            eng.drop_input(f"tmp{j % 3}")
            with pytest.raises(kp.UsageError):
                tmp.insert([1])
        th.join(60)
        assert done
        eng.wait(cx, timeout=30)
        assert cx.to_pandas()["count"].tolist() == [200]
        assert sorted(eng.inputs()) == ["x"]
    finally:
        eng.close()
