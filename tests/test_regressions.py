"""Counterexamples found by the randomized suite, kept as regression tests (shrunk by hand)."""
import numpy as np

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

        def boom(a):
            if threading.current_thread().name.startswith("kpgnb-worker") and len(a):
                raise KeyError("no such node")
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
