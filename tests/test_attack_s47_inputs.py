"""Attack (session 47): input sessions and reading history.

Input sessions (insert/remove/update with multiplicities, rows= and key= at creation, list/dict/pandas/Arrow
rows, refused rows and diffs, ``follow`` between inputs) and reading history (``at=`` reads kept by
``history=``, followers started before a late dataflow's first epoch is final).

Tests marked xfail(strict=True) assert the documented behaviour for a bug this attack found."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp


def _rows(view, **kw):
    return sorted(map(tuple, view.to_pandas(**kw).itertuples(index=False)))


# -- what works ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_kept_epoch_is_the_sum_of_the_updates_sealed_into_it(workers):
    """Random multiplicities (negative ones too) on a str-keyed input, advance_to skipping epochs: an
    ``at=e`` read of the view and of a count equals the updates of epochs <= e summed, for every epoch the
    view's history keeps (skipped epochs included)."""
    rng = np.random.default_rng(4700 + workers)
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["a", "b"], dtypes=["str", "int64"], key="a")
        with eng.dataflow("d") as df:
            v = df.input("x").view("v", history=100)
            c = df.input("x").count(by="a").view("c", history=100)
        live, want, ep = Counter(), {}, 0
        for _ in range(10):
            n = int(rng.integers(0, 6))
            rows = [(str(int(rng.integers(0, 3))), int(rng.integers(0, 3))) for _ in range(n)]
            diffs = [int(rng.integers(-3, 4)) for _ in range(n)]
            if rows:
                x.update(rows, diffs)
            for r, d in zip(rows, diffs):
                live[r] += d
            skip = int(rng.integers(1, 3))
            for e in range(ep, ep + skip):
                want[e] = {r: m for r, m in live.items() if m}
            ep += skip
            x.advance_to(ep)
        eng.wait(v)
        eng.wait(c)
        for e, rows in want.items():
            got = {(a, int(b)): int(d) for a, b, d in _rows(v, at=e, diffs=True)}
            assert got == rows, e
            per = Counter()
            for (a, _), m in rows.items():
                per[a] += m
            assert {(a, int(n)): int(d) for a, n, d in _rows(c, at=e, diffs=True)} == \
                {(a, m): 1 for a, m in per.items() if m}, e
        with pytest.raises(kp.UsageError, match="not final"):
            v.to_pandas(at=ep)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_follower_of_a_late_dataflow_gets_the_start_then_later_epochs_delivered_together(workers):
    """A dataflow installed with one input at 5 and another at 2 starts at epoch 4; a follower taken before
    epoch 4 is final gets the contents as of 4 (the lagging input's rows of epochs 2-3 included), then the
    later epochs' changes at their own times, although all of them arrive in one step."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["a"])
        y = eng.input("y", ["a"])
        for e in range(1, 6):
            x.insert([(e,)])
            x.advance_to(e)
        y.insert([(100,)])
        y.advance_to(2)
        with eng.dataflow("d") as df:
            v = df.input("x").concat(df.input("y")).view("v")
        f = v.follow(timeout=10)
        for e in range(3, 10):
            y.insert([(100 + e,)])
            if e == 6:
                y.remove([(100,)])
            y.advance_to(e)
        x.insert([(50,)])
        x.advance_to(9)
        eng.wait(v)
        x.close()
        y.close()
        frames = list(f)
        got = [(int(t), int(a), int(d)) for fr in frames for t, a, d in zip(fr["time"], fr["a"], fr["diff"])]
        start = sorted(r for r in got if r[0] == 4)
        assert start == sorted((4, a, 1) for a in (1, 2, 3, 4, 5, 100, 103, 104, 105))
        assert sorted(r for r in got if r[0] != 4) == [(5, 50, 1), (5, 100, -1), (5, 106, 1), (6, 107, 1),
                                                      (7, 108, 1), (8, 109, 1)]
        with pytest.raises(kp.CompactedError):
            v.to_pandas(at=3)


def test_input_moved_on_by_its_leader_seals_its_owners_rows_as_the_next_epoch():
    """``y.follow(x)``: y moves with x while it has nothing buffered; rows y's owner inserted meanwhile go
    in, at y's owner's next advance, as the epoch after the one x moved y to."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        y = eng.input("y", ["a"])
        y.follow(x)
        with eng.dataflow("d") as df:
            v = df.input("x").concat(df.input("y")).view("v", history=20)
        x.insert([(1,)])
        x.advance_to(3)
        assert y.epoch == 3
        y.insert([(10,)])
        x.insert([(2,)])
        x.advance_to(5)
        assert y.epoch == 3 and y.buffered  # (rows buffered: y is not carried along)
        y.advance_to(1)                     # y's owner's epoch 1: "seal what I inserted"
        assert y.epoch == 4
        x.advance_to(6)
        eng.wait(v)
        assert [_rows(v, at=e) for e in range(6)] == [[(1,)]] * 3 + [[(1,), (2,), (10,)]] * 3
        with pytest.raises(kp.UsageError, match="only advance"):
            y.advance_to(0)


# -- bugs -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,good,bad", [("int64", 2, "x"), ("float64", 2.0, "x"), ("bool", True, "x")])
def test_refused_str_in_a_numeric_column_names_the_row_that_holds_it(dtype, good, bad):
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a", "b"], dtypes=["int64", dtype])
        with pytest.raises(kp.SchemaError) as err:
            x.insert([(1, good), (3, bad)])
        msg = str(err.value)
        assert "row 1" in msg and repr(bad) in msg, msg
        with pytest.raises(kp.SchemaError) as err:
            x.insert({"a": [1, 3], "b": [good, bad]})
        msg = str(err.value)
        assert "row 1" in msg and repr(bad) in msg, msg
        assert not x.buffered


def test_masked_diff_is_refused_and_nothing_is_inserted():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        with pytest.raises(kp.SchemaError):
            x.update([(1,), (2,)], np.ma.masked_array([1, 5], mask=[False, True]))
        x.advance_to(1)
        eng.wait(v)
        assert _rows(v, diffs=True) == []


def test_diffs_series_indexed_unlike_the_rows_is_aligned_or_refused():
    """Columns of a dict of Series with different indexes are refused because kpgnb reads by position;
    diffs given as a Series labelled for the frame's rows but in another order are the same hazard: they
    must either go to the rows their labels name or be refused, never be paired by position."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        rows = pd.DataFrame({"a": [5, 6]}, index=[10, 20])
        diffs = pd.Series([3, 1], index=[20, 10])      # row 20 (a=6) x3, row 10 (a=5) x1
        try:
            x.update(rows, diffs)
        except kp.SchemaError:
            refused = True
        else:
            refused = False
        x.advance_to(1)
        eng.wait(v)
        assert _rows(v, diffs=True) == ([] if refused else [(5, 1), (6, 3)])
