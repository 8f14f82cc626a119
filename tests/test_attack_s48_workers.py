"""Attack (session 48): worker counts other than 1, 2 and 3 (README "Workers": ``kp.Engine(workers=W)``
keeps W threads, every arrangement is W spines partitioned by key hash, results are identical for every W,
``eng.stats()`` reports per shard records, bytes and busy time).

What ran at W = 4, 5, 7, 8, 16 (and 32, 64 for the fuzzers): the random programs of
tests/test_attack_s48_oracle.py (seeds 100-140, 6012, 6056) and tests/test_attack_s47_fuzz.py (the same
seeds), the random typed Datalog programs and goals of tests/test_attack_datalog_random.py (seeds 0-40,
20 goal seeds) against tests/datalog_reference.py, every memory mode of sssp/khop/wcc/pagerank/rpq
against networkx (tests/test_memory_modes.py's harness), float sums of cancelling values read with at=
at 30 epochs (bit for bit equal to W = 1), all rows on one key, exactly W rows, keys chosen to hash to one
shard (first and last), str keys, empty epochs, followers and to_pandas(at=) (same frames, same row
order), eng.stats() shard figures, trace cursors of every shard, eng.cancel / eng.wait from a user function
running on a pool thread, and steps of more than 10,000 rows (below that the shards run inline on the
scheduler thread, so small tests never reach the pool or the parallel exchange), skewed and with a
two-column key, with wcc/bfs/joins/reductions. No wrong answer at any W.

What differs with W: ``flat_map`` without ``repeat=`` decides counts-or-index from "the first call", and
the function is called once per shard, so whether a program works depends on how its rows fall into
shards. Tests marked xfail(strict=True) assert the documented behaviour for it."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb import graphs

import attack_datalog_gen as dlgen
import test_attack_s48_oracle as oracle48
import test_memory_modes as modes
from datalog_reference import diff_rows, evaluate, rows_of, same_rows

T = 60
WIDE = [4, 5, 7, 8, 16]


def _shard_of(key: int, workers: int) -> int:
    """The shard an int64 one-column key lives in (README: each shard holds the keys that hash to it),
    worked out through a trace cursor of every shard, so the test reads it through the public API."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k"], key="k")
        a.insert([(key,)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("A").arrange_by("k").export("ak")
        eng.wait("d", timeout=T)
        tr = eng.trace("ak")
        try:
            hit = [s for s in range(workers) if len(tr.cursor(s).seek_keys(np.array([key], np.int64)))]
        finally:
            tr.close()
    assert len(hit) == 1, hit
    return hit[0]


def _keys_by_shard(workers: int, wanted: dict, upto: int = 200) -> dict:
    """{shard: [keys]}: the first keys from 1 on that live in each wanted shard (``wanted``: shard -> how
    many), found with one engine: an arrangement of 1..upto read shard by shard."""
    out = {s: [] for s in wanted}
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k"], key="k")
        a.insert([(k,) for k in range(1, upto)])
        a.advance_to(1)
        with eng.dataflow("d") as df:
            df.input("A").arrange_by("k").export("ak")
        eng.wait("d", timeout=T)
        tr = eng.trace("ak")
        try:
            probe = np.arange(1, upto, dtype=np.int64)
            for s in wanted:
                h = tr.cursor(s).seek_keys(probe)
                present = sorted(int(h.keys[0, p]) for p in range(h.keys.shape[1]) if h.off[p + 1] > h.off[p])
                out[s] = present[:wanted[s]]
        finally:
            tr.close()
    for s, n in wanted.items():
        assert len(out[s]) == n, (workers, s, out[s])
    return out


def _rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


# -- bugs -----------------------------------------------------------------------------------------------------

def _repeat_from_column(k, r, v):
    """Each row r times: repeat counts (the user did not say repeat=True)."""
    return {"k": np.repeat(k, r), "v": np.repeat(v, r)}, r


def _flat_map_outcome(workers, rows, fn):
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k", "r", "v"], key="k")
        a.insert(rows)
        a.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("A").flat_map(fn).view("v")
        try:
            eng.wait(v, timeout=T)
        except kp.DataflowError as err:
            return ("failed", "repeat=True" in str(err))
        return ("rows", _rows(v))


@pytest.mark.parametrize("workers", [4, 8])
def test_flat_map_without_repeat_works_at_every_worker_count_where_it_works_at_one(workers):
    """README: results are identical for every W; flat_map's ``repeat`` left out is decided by the first
    call that tells. Rows (K, 1, 10), (K, 1, 11), (K2, 3, 0), (K3, 0, 0), the input keyed by k, and a
    function returning repeat counts r: at W = 1 its one call gets 4 rows and 4 counts summing to 5
    outputs, which can only be counts, and the result is K twice and K2 three times. At W = 4 (8) with K in
    shard 0 and K2, K3 in shards 1 and 2, shard 0's call has 2 rows, counts [1, 1] and 2 outputs, which
    read both ways, and the dataflow fails asking for repeat= - for the same program and data."""
    ks = _keys_by_shard(workers, {0: 1, 1: 1, 2: 1})
    k1, k2, k3 = ks[0][0], ks[1][0], ks[2][0]
    rows = [(k1, 1, 10), (k1, 1, 11), (k2, 3, 0), (k3, 0, 0)]
    one = _flat_map_outcome(1, rows, _repeat_from_column)
    assert one == ("rows", sorted([(k1, 10), (k1, 11)] + [(k2, 0)] * 3))
    assert _flat_map_outcome(workers, rows, _repeat_from_column) == one


def _reverse_index(k, r, v):
    """An index (the user did not say repeat=False): rows in reverse order, 3 in, 3 out."""
    return {"k": k[::-1], "v": v[::-1]}, np.arange(len(k))[::-1]


@pytest.mark.parametrize("workers", [4, 16])
def test_flat_map_that_cannot_be_told_is_refused_at_every_worker_count(workers):
    """tests/test_runtime.py's case (3 rows, the index [2, 1, 0]: also valid counts, with other rows) at
    W = 1 is a DataflowError asking for repeat= (README: a first call that could be either, with
    different rows, is an error asking for repeat=). With the 3 keys in 3 different shards each call gets
    one row, whose index [0] reads one way only, and the same program is accepted."""
    ks = _keys_by_shard(workers, {0: 1, 1: 1, 2: 1})
    rows = [(ks[s][0], 0, s) for s in range(3)]
    assert _flat_map_outcome(1, rows, _reverse_index) == ("failed", True)
    assert _flat_map_outcome(workers, rows, _reverse_index) == ("failed", True)


# -- what was checked and works (kept as regression tests) ----------------------------------------------------

@pytest.mark.parametrize("workers", WIDE)
def test_random_programs_match_reference_at_wider_worker_counts(workers):
    """tests/test_attack_s48_oracle.py's random program pair (late import, drop, trace handle, history,
    followers) at W = 4..16."""
    checks = [0]
    assert oracle48.run(6012, workers, checks=checks) is None
    assert checks[0] > 10


@pytest.mark.parametrize("workers,seed", [(5, 11), (16, 12)])
def test_sssp_memory_modes_match_networkx_at_wider_worker_counts(workers, seed):
    modes.run_modes(workers, seed,
                    lambda df, mem, drop: graphs.sssp(df.input("edges"), df.input("sources"), memory=mem, drop=drop),
                    ["source", "node", "dist"], modes.sssp_oracle, epochs=5)


def test_wcc_memory_modes_match_networkx_at_seven_workers():
    modes.run_modes(7, 37, lambda df, mem, drop: graphs.wcc(df.input("edges"), memory=mem, drop=drop),
                    ["node", "label"], modes.wcc_oracle, weighted=False, sources=False, epochs=5)


def test_random_datalog_program_matches_reference_at_eight_workers():
    seed = 7
    text, _ = dlgen.program(seed)
    init, steps = dlgen.stream(seed, 3)
    with kp.Engine(workers=8) as eng:
        sess, state = {}, {}
        for p, types in dlgen.INPUTS.items():
            sess[p] = eng.input(p, [f"c{i}" for i in range(len(types))], dtypes=[dlgen.DTYPES[t] for t in types])
            sess[p].insert(init[p])
            state[p] = Counter(init[p])
            sess[p].advance_to(1)
        prog = eng.datalog(text, name="fz")
        for epoch in range(len(steps) + 1):
            if epoch:
                for p, (ins, rem) in steps[epoch - 1].items():
                    if ins:
                        sess[p].insert(ins)
                    if rem:
                        sess[p].remove(rem)
                    state[p].update(ins)
                    state[p].subtract(rem)
                for s in sess.values():
                    s.advance_to(epoch + 1)
            for pred, rows in evaluate(text, state).items():
                eng.wait(prog[pred], timeout=T)
                got = rows_of(prog[pred], prog.columns(pred))
                assert same_rows(got, rows), f"epoch {epoch} {pred}: {diff_rows(got, rows)}"


def _one_shard_program(workers, keys, other):
    """A chain over ``keys`` then ``other``: bfs, wcc, a count joined back, sum and top_k, then an edge of
    the chain removed. Rows of every view, before and after."""
    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"], key="src")
        r = eng.input("R", ["node"])
        chain = keys + other
        e.insert([(chain[i], chain[i + 1]) for i in range(len(chain) - 1)])
        r.insert([(keys[0],)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("d") as df:
            E = df.input("E")
            views = [graphs.bfs(E, df.input("R")).view("bfs", history=5), graphs.wcc(E).view("wcc"),
                     E.count(by="src").join(E, on="src").view("cj"), E.sum(by="src", col="dst").view("s"),
                     E.top_k(by="src", order_by="dst", k=1).view("tk"), E.count(by=[]).view("n")]
        eng.wait("d", timeout=T)
        out = [[_rows(v) for v in views]]
        e.advance_to(2)  # an empty epoch
        r.advance_to(2)
        e.remove([(keys[2], keys[3])])
        e.advance_to(3)
        r.advance_to(3)
        eng.wait("d", timeout=T)
        out.append([_rows(v) for v in views])
        out.append([sorted(map(tuple, v.to_pandas(at=1).values.tolist())) for v in views[:1]])
        return out


@pytest.mark.parametrize("workers", [8, 16])
def test_keys_that_all_hash_to_the_last_shard_give_the_answer_of_one_worker(workers):
    """Every key of a chain in the last shard (the others empty), its tail in shard 0."""
    ks = _keys_by_shard(workers, {workers - 1: 8, 0: 3})
    assert _one_shard_program(workers, ks[workers - 1], ks[0]) == _one_shard_program(1, ks[workers - 1], ks[0])


def _parallel_program(workers, n=6000):
    """Two parts of n rows per input per epoch (12,000 rows a step: above the pool's 10,000-row threshold, so
    the exchange and the shards run in parallel), A skewed (half its rows on key 3), B keyed by two
    columns; joins, reductions and wcc; then a third of A and E retracted."""
    rng = np.random.default_rng(5)
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", ["k", "j", "v"])
        b = eng.input("B", ["k", "j", "w"], key=["k", "j"])
        e = eng.input("E", ["src", "dst"], key="src")
        with eng.dataflow("d") as df:
            A, B, E = df.input("A"), df.input("B"), df.input("E")
            views = [A.count(by="k").view("cnt"), A.sum(by=["k", "j"], col="v").view("sm"),
                     A.min(by="k", col="v").view("mn"), A.top_k(by="j", order_by="v", k=2).view("tk"),
                     A.join(B, on=["k", "j"]).count(by="k").view("jn"),
                     A.antijoin(B, on=["k", "j"]).count(by="j").view("anti"),
                     graphs.wcc(E).count(by="label").view("w")]
        sent = {"A": [], "E": []}
        out = []
        for ep in range(2):
            for _ in range(2):
                k = np.where(rng.random(n) < 0.5, 3, rng.integers(0, 2000, n))
                j = rng.integers(0, 40, n)
                rows_a = {"k": k, "j": j, "v": rng.integers(-5, 100, n)}
                a.insert(rows_a)
                b.insert({"k": rng.integers(0, 2000, n), "j": j, "w": rng.integers(0, 9, n)})
                rows_e = {"src": rng.integers(0, 2000, n), "dst": rng.integers(0, 2000, n)}
                e.insert(rows_e)
                sent["A"].append(rows_a)
                sent["E"].append(rows_e)
            if ep == 1:
                a.remove({c: x[: n // 3] for c, x in sent["A"][0].items()})
                e.remove({c: x[: n // 3] for c, x in sent["E"][1].items()})
            for s in (a, b, e):
                s.advance_to(ep + 1)
            eng.wait("d", timeout=T)
            out.append([_rows(v) for v in views])
        return out


def test_parallel_steps_at_seven_workers_give_the_answer_of_one_worker():
    assert _parallel_program(7) == _parallel_program(1)


@pytest.mark.parametrize("workers", [5, 16])
def test_stats_cursors_history_and_followers_at_wider_worker_counts(workers):
    """eng.stats(): every arrangement has W shard figures adding up to its records, shard_busy_s has W
    entries; with exactly W rows an epoch, every key is found by exactly one shard's cursor and cursor(W) is a UsageError; to_pandas(at=)
    and a follower read epoch by epoch are what W = 1 gives, frame for frame."""
    def run(w, nrows):
        with kp.Engine(workers=w) as eng:
            a = eng.input("A", ["k", "s"], dtypes=["int64", "str"], key="k")
            with eng.dataflow("d") as df:
                x = df.input("A")
                c = x.count(by="k")
                c.export("cnt")
                v = c.view("cnt", history=10)
                vs = x.count(by="s").view("bys", history=10)
            fol = vs.follow(timeout=T)
            frames = [next(fol).to_dict("list")]
            for ep in range(5):
                if ep != 2:  # epoch 2 is empty
                    a.insert([(i * 7 + ep, ["x", "y", "é", ""][(i + ep) % 4]) for i in range(nrows)])
                if ep == 3:
                    a.remove([(7, "y")])
                a.advance_to(ep + 1)
                eng.wait("d", timeout=T)
                if ep != 2:  # (an epoch that changes nothing gives no frame)
                    frames.append(next(fol).to_dict("list"))
            fol.close()
            st = eng.stats()
            assert len(st["shard_busy_s"]) == w
            for arr in st["arrangements"]:
                assert len(arr["shards"]) == w, arr["name"]
                assert sum(s["records"] for s in arr["shards"]) == arr["records"], arr["name"]
            tr = eng.trace("cnt")
            try:
                probe = np.arange(0, 40, dtype=np.int64)
                where = {}
                for s in range(w):
                    h = tr.cursor(s).seek_keys(probe)
                    for p in range(h.keys.shape[1]):
                        if h.off[p + 1] > h.off[p]:
                            where.setdefault(int(h.keys[0, p]), []).append(s)
                with pytest.raises(kp.UsageError):
                    tr.cursor(w)
            finally:
                tr.close()
            assert all(len(s) == 1 for s in where.values()), where
            hist = [[_rows_at(view, ep) for ep in range(5)] for view in (v, vs)]
            return frames, hist, sorted(where)
    got, one = run(workers, workers), run(1, workers)  # exactly W rows an epoch
    assert got == one


def _rows_at(view, at):
    return sorted(map(tuple, view.to_pandas(at=at).values.tolist()))


def test_shard_helper_agrees_with_key_placement():
    """(The helpers above find shards through trace cursors.)"""
    ks = _keys_by_shard(4, {0: 1, 3: 1})
    assert _shard_of(ks[0][0], 4) == 0 and _shard_of(ks[3][0], 4) == 3
