"""Attack s31: bugs two independent attacks (the core engine, and the Datalog front end) found through the
public API, each reproduced here and checked against an answer computed another way."""
import numpy as np
import pytest

import kpgnb as kp


def _rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


# -- an import of an export whose dataflow has not caught up --------------------------------------------

def _pair(b, b_right):
    return {"a": b, "b": b_right}


def _mod(a, count):
    return {"a": a, "b": count % 6}


def _loops(df, X, A):
    loop = df.loop()
    xv, yv = kp.Variable(loop, X), kp.Variable(loop, A)
    res = xv.set(xv.concat(yv.count(by="a").map(_mod)).distinct(), max_rounds=2)
    yv.set(yv.concat(X.join(yv, on="a").map(_pair)).distinct(), max_rounds=2)
    return res.leave()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_import_of_an_export_behind_its_readers_frontier(workers):
    """p1 starts at epoch 2 (its input A is compacted there), so its export's readers hold it at epoch 2
    while its upper is still 0 (p1's other input, B, is at epoch 0). p2 imports it into a loop: the import's
    capability was the frontier (2), then fell back to the export's upper (0) at its first step, and an
    operator in the loop failed with "logical compaction frontier may only advance". The answer must equal
    the same loops over the export's definition inlined."""
    with kp.Engine(workers=workers) as eng:
        A = eng.input("A", ["a", "b"])
        B = eng.input("B", ["a", "b"])
        A.insert([(4, 4), (1, 3), (0, 1)])
        B.insert([(5, 5)])
        A.advance_to(3)
        with eng.dataflow("p1") as df:
            df.input("A").antijoin(df.input("B"), on="a").arrange_by("a", "b").export("X")
        with eng.dataflow("p2") as df:
            v = _loops(df, df.use("X"), df.input("A")).view("v")
        B.advance_to(3)
        with eng.dataflow("inline") as df:
            X = df.input("A").antijoin(df.input("B"), on="a").arrange_by("a", "b")
            w = _loops(df, X, df.input("A")).view("w")
        eng.wait(v, timeout=60)
        eng.wait(w, timeout=60)
        assert _rows(v) == _rows(w) != []
        A.insert([(5, 1), (2, 2)])
        B.insert([(4, 0)])
        A.advance_to(4)
        B.advance_to(4)
        eng.wait(v, timeout=60)
        eng.wait(w, timeout=60)
        assert _rows(v) == _rows(w) != []
        assert eng.dataflows() == {"p1": "running", "p2": "running", "inline": "running"}
