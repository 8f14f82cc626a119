"""Attack s32: bugs that independent attacks (random programs through the public operators, the notebook
and Spark layers, the control plane) found through the public API, each reproduced here and checked
against an answer computed another way. (The notebook's are in test_magics.py, Spark's in
test_spark.py.)"""
import time

import pytest

import kpgnb as kp


def _rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).values.tolist()))


# -- an import of the export of a dataflow installed late -----------------------------------------------

def _slow(b, x):
    if len(b):
        time.sleep(0.5)  # keeps the exporting dataflow in its first steps while the importer installs
    return {"b": b, "x": x}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_import_of_a_late_export_refuses_epochs_before_its_producer_started(workers):
    """`base` is installed when its input is at epoch 3, so it computes from the input as of epoch 2 and its
    export holds rows dated 2. `p`, installed before base's first step, imported the export from the
    frontier of base's own readers (still 0) and answered at=0 and at=1 with an empty collection; it must
    refuse them (CompactedError), as a dataflow installed late does, and answer from epoch 2 on."""
    with kp.Engine(workers=workers) as eng:
        B = eng.input("B", ["b", "x"], dtypes=["int64", "float64"])
        B.insert([(0, 2.0), (1, -1.5)])
        B.advance_to(1)
        B.advance_to(3)
        eng.wait(None)
        with eng.dataflow("base") as df:
            df.input("B").map(_slow).distinct().export("Bx")
        with eng.dataflow("p") as df:
            v = df.use("Bx").view("out", history=100)
        B.advance_to(5)
        eng.wait(v)
        for t in (0, 1):
            with pytest.raises(kp.CompactedError):
                v.to_pandas(at=t)
        for t in (2, 3, 4):
            assert _rows(v, at=t) == [(0, 2.0), (1, -1.5)]
