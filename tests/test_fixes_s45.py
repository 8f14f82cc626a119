"""Session 45 fixes beyond the attack files: an input whose rows reach a multiplicity of 2**62 is broken
for good (not retried), the dataflows reading it fail (also those installed later) and everything else
goes on; a user reduce whose
values change when cast to the output dtype fails its dataflow, naming the column."""
import numpy as np
import pytest
from numba import njit

import kpgnb as kp

T = 30


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("spread", [False, True])
def test_an_input_past_2_62_is_broken_and_the_rest_goes_on(workers, spread):
    """2**61 + 2**61 of one row, in one epoch or over two: its readers fail, the input refuses later calls,
    dataflows installed later fail at once, another input and its dataflow carry on, and a new input of the
    same name works once the broken one is dropped."""
    with kp.Engine(workers=workers) as eng:
        b = eng.input("b", ["k"], rows=[(5,), (6,)])
        other = eng.input("other", ["x"], rows=[(1,)])
        b.advance_to(1)
        other.advance_to(1)
        with eng.dataflow("reads_b") as df:
            vb = df.input("b").count().view("vb")
        with eng.dataflow("reads_other") as df:
            vo = df.input("other").view("vo")
        eng.wait(vb, timeout=T)
        b.update([(1,)], [2 ** 61])
        if spread:
            b.advance_to(2)
        b.update([(1,)], [2 ** 61])
        b.advance_to(3)
        with pytest.raises(kp.DataflowError, match="2\\*\\*62") as info:
            eng.wait(vb, timeout=T)
        assert "'b'" in str(info.value)
        assert eng.dataflows()["reads_b"] == "failed"
        with pytest.raises(kp.EngineError, match="drop_input"):
            b.insert([(7,)])
        with eng.dataflow("late") as df:  # installed after: failed as the input's readers were
            late = df.input("b").view("late")
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait(late, timeout=T)
        assert eng.dataflows()["late"] == "failed"
        other.insert([(2,)])
        other.advance_to(2)
        eng.wait(vo, timeout=T)
        assert sorted(vo.to_pandas()["x"]) == [1, 2]
        eng.drop("reads_b")
        eng.drop_input("b")
        b2 = eng.input("b", ["k"], rows=[(8,)])
        b2.advance_to(1)
        with eng.dataflow("again") as df:
            v2 = df.input("b").view("v2")
        eng.wait(v2, timeout=T)
        assert v2.to_pandas()["k"].tolist() == [8]


def test_large_diffs_that_stay_below_2_62_are_kept():
    """The exact check behind the magnitudes' bound: diffs near 2**61 that cancel, or whose total stays
    below 2**62, are accepted and read back exactly."""
    with kp.Engine(workers=2) as eng:
        b = eng.input("b", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("b").view("v")
        for e, (k, d) in enumerate([(1, 2 ** 61), (1, -(2 ** 61)), (1, 2 ** 61), (2, 2 ** 61), (1, 2 ** 61 - 1)]):
            b.update([(k,)], [d])
            b.advance_to(e + 1)
        eng.wait(v, timeout=T)
        got = dict(zip(*[v.to_pandas(diffs=True)[c].tolist() for c in ("k", "diff")]))
        assert got == {1: 2 ** 62 - 1, 2: 2 ** 61}
        assert eng.dataflows()["d"] == "running"


def test_user_reduce_values_changed_by_the_output_dtype_fail_the_dataflow():
    """A uint64 value past int64 (its numba type tells nothing at the definition) fails the dataflow at run
    time, naming the output column."""
    @njit
    def big(vals, cnts):
        out = np.empty((1, 1), np.uint64)
        out[0, 0] = np.uint64(2 ** 63) + np.uint64(vals[0, 0])
        return out, np.ones(1, np.int64)

    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["k", "v"], rows=[(1, 5)])
        a.advance_to(1)
        with eng.dataflow("r") as df:
            v = df.input("a").reduce(by="k", fn=big, columns=["v"]).view("r")
        with pytest.raises(kp.DataflowError, match="output column 'v'"):
            eng.wait(v, timeout=T)


def test_many_large_diffs_whose_magnitudes_wrap_int64_are_still_checked():
    """Three rows of 2**62 - 1 in one update (their magnitudes sum past int64, to a negative number there),
    then 2 more of the first in the next epoch: its total over the epochs reaches 2**62. The bound that
    decides whether totals are checked is summed as floats."""
    with kp.Engine(workers=1) as eng:
        b = eng.input("b", ["k"])
        with eng.dataflow("d") as df:
            v = df.input("b").view("v")
        b.update([(0,), (1,), (2,)], [2 ** 62 - 1] * 3)
        b.advance_to(1)
        eng.wait(v, timeout=T)
        b.update([(0,)], [2])
        b.advance_to(2)
        with pytest.raises(kp.DataflowError, match="2\\*\\*62"):
            eng.wait(v, timeout=T)
