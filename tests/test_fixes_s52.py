"""Session 52: defects found outside the attack rounds, each with the test that failed before its fix."""
import pandas as pd
import pytest

import kpgnb as kp


def test_datalog_float_literal_beyond_float64_is_an_error_at_its_column():
    with kp.Engine() as eng:
        with pytest.raises(kp.DatalogError, match="beyond the largest float64") as err:
            eng.datalog("p(x) :- e(x), x < 1e400.", inputs={"e": pd.DataFrame({"a": [1.0]})})
        assert (err.value.line, err.value.column) == (1, 19)
        prog = eng.datalog("p(x) :- e(x), x < 1.5e300.", inputs={"e": pd.DataFrame({"a": [1.0, 2.0]})})
        eng.wait(prog["p"], timeout=60)
        assert sorted(prog["p"].to_pandas()["x"]) == [1.0, 2.0]


@pytest.mark.parametrize("shape", ["random", "runs", "equal", "descending", "short"])
def test_sort_index_segment_is_a_stable_sort_by_key_val_time(shape):
    """The natural merge sort orders any input as a stable lexicographic sort would, whatever runs it
    starts from (random rows, a few sorted runs as a trace's batches give, all equal, reversed)."""
    import numpy as np
    from kpgnb.engine.kernels.sort import sort_index_segment

    rng = np.random.default_rng(52)
    for trial in range(40):
        n = int(rng.integers(2, 24 if shape == "short" else 600))
        keys = rng.integers(0, 3, (1, n))
        vals = rng.integers(0, 4 if shape != "equal" else 1, (2, n))
        times = rng.integers(0, 5 if shape != "equal" else 1, (n, 2))
        if shape == "equal":
            keys[:] = 1
        idx = np.arange(n, dtype=np.int64)
        order = np.lexsort((times[:, 1], times[:, 0], vals[1], vals[0], keys[0]))  # stable
        if shape == "runs":  # rows given as a few sorted runs of the final order, as a trace's batches give
            rank = np.argsort(order)
            cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(1, 8))), replace=False))
            idx = np.concatenate([part[np.argsort(rank[part])] for part in np.split(rng.permutation(n), cuts)])
        elif shape == "descending":
            idx = order[::-1].astype(np.int64).copy()
        s = int(rng.integers(0, 3))
        padded = np.concatenate([np.full(s, -7), idx, np.full(2, -9)]).astype(np.int64)
        tmp = np.zeros_like(padded)
        sort_index_segment(padded, s, s + n, keys, vals, times, tmp)
        got = padded[s:s + n]
        assert padded[:s].tolist() == [-7] * s and padded[s + n:].tolist() == [-9, -9]
        want = idx[np.lexsort((times[idx, 1], times[idx, 0], vals[1, idx], vals[0, idx], keys[0, idx]))]
        assert got.tolist() == want.tolist(), (shape, trial, n)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lend_skips_its_epoch_in_every_input_not_past_it(workers):
    """A goal's ask seals the epoch of the inputs it reads empty: the owner's next epoch then goes in one
    input epoch later in those and in every other input not past them, so a transaction over an input the
    goal reads and one it does not stays one input epoch (it split before: the read input's rows landed an
    epoch after the other's). An input ahead of the goal's keeps its numbering, and the ask still answers
    at once."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["x"], rows=[(0,), (1,)])
        c = eng.input("c", ["x"], rows=[(5,)])
        a.advance_to(1)
        c.advance_to(1)
        prog = eng.datalog("q(x) :- a(x).\n", name="p")
        with eng.dataflow("inv") as df:
            tot = df.input("a").concat(df.input("c")).count(by=[]).view("tot", history=50)
        g = prog.goal("q(?)")
        g.ask(1)  # lends input epoch 1: a moves to 2; c's next owner epoch goes in at 2 as well
        eng.wait(g.view, timeout=60)
        assert g.view.to_pandas()["x"].tolist() == [1]
        assert (a.epoch, a.position, c.epoch, c.position) == (2, 2, 1, 2)
        a.remove([(0,)])
        c.insert([(0,)])
        a.advance_to(2)  # the owner's epoch 1 -> input epoch 2 in both
        c.advance_to(2)
        eng.wait(tot, timeout=60)
        counts = {e: tot.to_pandas(at=e)["count"].tolist() for e in range(0, 3)}
        assert counts == {0: [3], 1: [3], 2: [3]}, counts
        c.insert([(7,)])
        c.advance_to(5)  # c ahead of a
        g.ask(0)         # answered at once: a is sealed (empty) up to c's numbering
        eng.wait(g.view, timeout=60)
        assert sorted(g.view.to_pandas()["x"]) == [1]  # (0 was removed from a)
        a.insert([(0,)])
        a.advance_to(3)
        eng.wait(g.view, timeout=60)
        assert sorted(g.view.to_pandas()["x"]) == [0, 1]
        eng.wait(tot, timeout=60)
        assert tot.to_pandas()["count"].tolist() == [5]
