"""Counterexamples found by the randomized suite, kept as regression tests (shrunk by hand)."""
import numpy as np
import pytest

import kpgnb as kp

from reference import evaluate, random_updates  # noqa: F401
from test_oracle import run_program


def test_reduce_of_a_group_that_empties_has_no_output():
    """A user reduce was called with an empty group when all of a key's rows were retracted."""
    run_program(("reduce", ("input", "A")), seed=1, workers=1, per_epoch=12)


def test_semijoin_uses_the_projected_multiplicity():
    """semijoin keeps a left row when the right side's key has positive multiplicity in total."""
    run_program(("semijoin", ("input", "A"), ("input", "B")), seed=0, workers=2, per_epoch=12)


def test_min_in_a_loop_after_compaction_across_epochs():
    """BFS-like loop: min over distances inside an iterate, with history compacted between epochs."""
    prog = ("iterate", ("input", "A"),
            ("min", ("concat", ("var", 0), ("join", ("var", 0), ("input", "B")))), 6)
    for seed in range(4):
        run_program(prog, seed=seed, workers=3, epochs=8)


def test_user_error_raised_on_a_worker_thread():
    """A map over a batch large enough to run on the pool raises in a worker; the error names the
    operator and carries the user's traceback, and the engine keeps serving other dataflows."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        x.insert({"a": np.arange(200_000)})
        x.advance_to(1)

        import threading
        on_pool = threading.Event()

        def boom(a):
            name = threading.current_thread().name
            if name.startswith("kpgnb-worker") and len(a):
                on_pool.set()
                raise KeyError("no such node")
            if name.startswith("kpgnb-scheduler") and len(a):
                # the caller would run a shard still queued itself (WorkerPool.run): hold it until the
                # pool's thread has taken its shard, so the error is raised there
                on_pool.wait(10)
            return {"a": a}

        with eng.dataflow("bad") as df:
            v = df.input("x").map(boom).view("v")
        with eng.dataflow("good") as df:
            c = df.input("x").count().view("c")
        try:
            eng.wait(v)
        except kp.DataflowError as e:
            assert "map" in str(e) and "no such node" in str(e)
            assert isinstance(e.__cause__.__cause__, KeyError)
            frames = []
            tb = e.__cause__.__cause__.__traceback__
            while tb is not None:
                frames.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            assert "boom" in frames
        else:
            raise AssertionError("the map error did not surface")
        eng.wait(c)
        assert c.to_pandas()["count"].tolist() == [200_000]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_loop_fed_by_a_loop_settles_when_an_input_moves_after_install(workers):
    """Two loops in sequence, the first fed by an antijoin whose updates cancel, and an input that is
    advanced only after the dataflow is installed: the second loop's frontier is a greatest fixed point
    and must be recomputed from the top when its input moves (progress tracking used to climb one round
    per sweep from the old frontier, forever: the dataflow hung)."""
    with kp.Engine(workers=workers) as eng:
        f = eng.input("f", ["a", "b"], rows=[(1, 0), (3, 4)])
        f.advance_to(1)
        g = eng.input("g", ["a", "b"], rows=[(1, 4)])
        with eng.dataflow("x") as df:
            base = df.input("g").select("a").antijoin(df.input("f"), left_on="a", right_on="a")
            r2 = base.iterate(lambda v: v.concat(base).distinct())
            view = r2.iterate(lambda v: v.concat(r2).distinct()).view("r4")
        g.advance_to(1)
        eng.wait(view, timeout=60)
        assert view.to_pandas()["a"].tolist() == []
        g.insert([(2, 5)])
        g.advance_to(2)
        f.advance_to(2)
        eng.wait(view, timeout=60)
        assert view.to_pandas()["a"].tolist() == [2]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_join_whose_multiplicities_would_wrap_fails_instead_of_losing_rows(workers):
    """A self-join of a row with diff 2**40 has multiplicity 2**80, which int64 wraps to 0: the row used to
    vanish silently. The join now fails its dataflow and says why; products below 2**62 are exact."""
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k"])
        a.update([(1,), (2,)], [2**40, 2**30])
        a.advance_to(1)
        with eng.dataflow("ok") as df:
            x = df.input("a").filter(lambda k: k == 2)
            fine = x.join(x, on="k").view("fine")
        eng.wait(fine)
        assert fine.to_pandas(diffs=True).values.tolist() == [[2, 2**60]]
        with eng.dataflow("bad") as df:
            x = df.input("a")
            big = x.join(x, on="k").view("big")
        with pytest.raises(kp.DataflowError, match="multiplicity reaches 2\\*\\*62"):
            eng.wait(big, timeout=60)
        eng.drop("bad")
        a.update([(2,)], [-2**30])
        a.advance_to(2)
        eng.wait(fine)
        assert fine.to_pandas(diffs=True).values.tolist() == []
