"""Many threads on one engine: a writer inserting large, skewed batches and advancing epochs while readers
call to_pandas, stats, catalog, dataflows and wait, and followers stream a view's changes. Every read must
equal the oracle's contents at some complete epoch, reads never go back in time, a read right after
``wait`` sees that epoch, and every followed stream adds up to the final contents."""
import threading
import time

import numpy as np
import pytest

import kpgnb as kp

K = 4000  # key space


def epochs(seed: int, n_epochs: int, rows: int):
    """Deterministic update stream: per epoch (keys, vals, diffs), inserts plus removals of earlier rows.
    Half the epochs put most rows on a handful of keys (one shard gets almost everything)."""
    rng = np.random.default_rng(seed)
    live_k, live_v = np.zeros(0, np.int64), np.zeros(0, np.int64)
    out = []
    for e in range(n_epochs):
        if e % 2:
            k = np.where(rng.random(rows) < 0.9, rng.integers(0, 4, rows), rng.integers(0, K, rows))
        else:
            k = rng.integers(0, K, rows)
        v = rng.integers(-5, 100, rows)
        n_rm = min(len(live_k), rows // 3)
        rm = rng.choice(len(live_k), n_rm, replace=False) if n_rm else np.zeros(0, np.int64)
        keys = np.concatenate([k, live_k[rm]])
        vals = np.concatenate([v, live_v[rm]])
        diffs = np.concatenate([np.ones(rows, np.int64), -np.ones(n_rm, np.int64)])
        keep = np.ones(len(live_k), bool)
        keep[rm] = False
        live_k = np.concatenate([live_k[keep], k])
        live_v = np.concatenate([live_v[keep], v])
        out.append((keys.astype(np.int64), vals.astype(np.int64), diffs))
    return out


def oracle_states(stream):
    """Per epoch, the fingerprint of count(by=k) and sum(by=k, col=v) after that epoch."""
    counts = np.zeros(K, np.int64)
    sums = np.zeros(K, np.int64)
    states = []
    for keys, vals, diffs in stream:
        np.add.at(counts, keys, diffs)
        np.add.at(sums, keys, vals * diffs)
        states.append((counts.copy(), sums.copy()))
    return states


def count_vector(df):
    out = np.zeros(K, np.int64)
    out[df["k"].to_numpy()] = df["count"].to_numpy()
    return out


def sum_vector(df):
    out = np.zeros(K, np.int64)
    out[df["k"].to_numpy()] = df["v"].to_numpy()
    return out


@pytest.mark.parametrize("workers", [2, 3])
def test_readers_see_whole_epochs_while_a_writer_advances(workers):
    stream = epochs(seed=workers, n_epochs=16, rows=20_000)
    states = oracle_states(stream)
    count_index = {s[0].tobytes(): e for e, s in enumerate(states)}
    sum_index = {s[1].tobytes(): e for e, s in enumerate(states)}
    empty = np.zeros(K, np.int64).tobytes()
    count_index.setdefault(empty, -1)
    sum_index.setdefault(empty, -1)

    eng = kp.Engine(workers=workers)
    x = eng.input("x", ["k", "v"])
    with eng.dataflow("agg") as df:
        xs = df.input("x")
        counts = xs.count(by="k").view("counts")
        sums = xs.sum(by="k", col="v").view("sums")
        xs.arrange_by("k").export("x_by_k")
    problems, done = [], threading.Event()
    reads = {"count": 0, "sum": 0, "other": 0}

    def reader(view, index, vector, key):
        last = -1
        while not done.is_set():
            got = vector(view.to_pandas()).tobytes()
            e = index.get(got)
            if e is None:
                problems.append(f"{key}: a read matches no complete epoch (after epoch {last})")
                return
            if e < last:
                problems.append(f"{key}: read went back from epoch {last} to {e}")
                return
            last = e
            reads[key] += 1
            time.sleep(0.002)  # a busy reader, but one that lets go of the GIL between reads

    def prober():
        while not done.is_set():
            st = eng.stats()
            for a in st["arrangements"]:
                if sum(s["records"] for s in a["shards"]) != a["records"]:
                    problems.append(f"stats of {a['name']}: shard records do not add up")
            cat = eng.catalog()
            if "x_by_k" not in cat or eng.dataflows() != {"agg": "running"}:
                problems.append(f"catalog or dataflows changed: {cat}, {eng.dataflows()}")
            eng.wait(counts, timeout=120)
            reads["other"] += 1

    follows = []

    def follower():
        acc = {}
        last_time = -1
        for frame in counts.follow(timeout=120):
            times = frame["time"].to_numpy()
            if len(times) and (times.min() < last_time or (np.diff(times) < 0).any()):
                problems.append("follow: changes out of time order")
            if len(times):
                last_time = times.max()
            for k, c, d in zip(frame["k"].tolist(), frame["count"].tolist(), frame["diff"].tolist()):
                acc[(k, c)] = acc.get((k, c), 0) + d
        follows.append({kc: d for kc, d in acc.items() if d})

    threads = [threading.Thread(target=reader, args=(counts, count_index, count_vector, "count")),
               threading.Thread(target=reader, args=(sums, sum_index, sum_vector, "sum")),
               threading.Thread(target=prober)]
    fthreads = [threading.Thread(target=follower) for _ in range(2)]
    for t in threads + fthreads[:1]:
        t.start()
    try:
        for e, (keys, vals, diffs) in enumerate(stream):
            x.update({"k": keys, "v": vals}, diffs)
            x.advance_to(e + 1)
            if e == len(stream) // 2:
                fthreads[1].start()  # a follower arriving in the middle
            if e % 3 != 1:  # sometimes let epochs pile up (one physical batch for several)
                eng.wait(counts, timeout=120)
                eng.wait(sums, timeout=120)
                got_c = count_vector(counts.to_pandas())
                got_s = sum_vector(sums.to_pandas())
                assert (got_c == states[e][0]).all(), f"after wait, counts are not epoch {e}"
                assert (got_s == states[e][1]).all(), f"after wait, sums are not epoch {e}"
        x.close()
        eng.wait(counts, timeout=120)
    finally:
        done.set()
        for t in threads:
            t.join(60)
        for t in fthreads:
            t.join(60)
        eng.close()
    assert not problems, problems[:5]
    final = {(k, int(c)): 1 for k, c in enumerate(states[-1][0]) if c}
    assert len(follows) == 2 and all(f == final for f in follows)
    assert reads["count"] > 0 and reads["sum"] > 0 and reads["other"] > 0


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_many_writers_and_dataflows_installed_and_dropped_meanwhile(workers):
    """Several inputs fed from their own threads while other threads install, read and drop dataflows; a
    dataflow installed late starts from the current state."""
    eng = kp.Engine(workers=workers)
    names = ["a", "b", "c"]
    sessions = {n: eng.input(n, ["k"]) for n in names}
    n_epochs = 30
    errors = []

    def writer(n, seed):
        rng = np.random.default_rng(seed)
        s = sessions[n]
        try:
            for e in range(n_epochs):
                s.insert({"k": rng.integers(0, 50, 2000)})
                s.advance_to(e + 1)
                time.sleep(0.001)
            s.close()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def installer(i):
        try:
            for j in range(6):
                name = f"q{i}-{j}"
                src = names[(i + j) % 3]
                with eng.dataflow(name) as df:
                    v = df.input(src).count(by="k").view("v")
                before = sessions[src].epoch  # epochs advanced before the wait: all of them must show
                eng.wait(v, timeout=120)
                total = int(v.to_pandas()["count"].sum())
                if not 2000 * before <= total <= 2000 * n_epochs or total % 2000:
                    errors.append(f"{name}: {total} rows after waiting for {before} epochs of 2000")
                if j % 2:
                    eng.drop(name)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n, i)) for i, n in enumerate(names)]
    threads += [threading.Thread(target=installer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors[:3]
        eng.wait(timeout=120)
        # every surviving view holds exactly its input's final contents
        snap = eng.snapshot()
        assert sorted(snap.dataflows) == sorted(f"q{i}-{j}" for i in range(2) for j in range(0, 6, 2))
        with eng.dataflow("check") as df:
            totals = {n: df.input(n).count(by=[]).view(n) for n in names}
        for n, v in totals.items():
            eng.wait(v, timeout=120)
            assert v.to_pandas()["count"].tolist() == [2000 * n_epochs]
    finally:
        eng.close()


def test_pool_caller_takes_the_items_no_thread_has_started():
    """With more items than pool threads (formation's row ranges), the calling thread runs the items
    still queued, from the last, instead of waiting while one pool thread works through them all:
    results in item order, each item run once, exceptions still raised after every item stopped."""
    import threading
    from kpgnb.engine.pool import WorkerPool
    pool = WorkerPool(2)  # one pool thread
    try:
        released = threading.Event()
        ran = []

        def fn(i):
            ran.append((i, threading.current_thread().name))
            if i == 1:  # the pool thread holds item 1 until the caller has run item 4
                assert released.wait(10), "item 4 waited behind item 1 in the pool's queue"
            if i == 4:
                released.set()
            return i * i
        assert pool.run(fn, range(5)) == [0, 1, 4, 9, 16]
        assert sorted(i for i, _ in ran) == [0, 1, 2, 3, 4]
        caller = threading.current_thread().name
        assert {i for i, name in ran if name == caller} >= {0, 4}

        def bad(i):
            if i == 3:
                raise ValueError("item 3")
            return i
        with pytest.raises(ValueError, match="item 3"):
            pool.run(bad, range(5))
    finally:
        pool.shutdown()
