"""Session 47 attack on sizes, skew and worker counts: reductions and joins at the row counts where batch
formation changes strategy (engine/batch.py TINY_ROWS = 32, SMALL_ROWS = 10,000, PARALLEL_ROWS =
100,000; engine/kernels/sort.py ONE_BUCKET = 65,536 rows per shard), all rows on one key against all keys
distinct, at W = 1, 2, 3 and 4 against pandas; many-to-many joins whose output per shard exceeds the join's
chunk (engine/operators/join.py CHUNK = 2**20 rows) with several epochs queued at once; multiplicities near
the documented bound of 2**62 in the reads of a view (``len``, the notebook rendering).

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp

M62 = 2 ** 62 - 1  # the largest multiplicity a row may hold


def _rows(df: pd.DataFrame) -> list:
    return sorted(tuple(int(x) for x in r) for r in df.itertuples(index=False, name=None))


# -- what works (coverage not in earlier rounds) ----------------------------------------------------------

@pytest.mark.parametrize("n", [33, 10_001, 131_073])
@pytest.mark.parametrize("skew", ["one_key", "distinct"])
def test_reductions_at_formation_thresholds_agree_with_pandas_for_every_worker_count(n, skew):
    """count, sum, min, top_k and distinct of one batch of n rows (just above TINY_ROWS, SMALL_ROWS and
    2 x ONE_BUCKET) with every row on one key, or every key distinct, are pandas' answers at W = 1..4."""
    rng = np.random.default_rng(n)
    k = np.zeros(n, np.int64) if skew == "one_key" else rng.permutation(n).astype(np.int64) * 7919 - 10 ** 12
    v = rng.integers(-1000, 1000, n)
    pdf = pd.DataFrame({"k": k, "v": v})
    g = pdf.groupby("k")["v"]
    want = {
        "c": _rows(g.size().reset_index()),
        "s": _rows(g.sum().reset_index()),
        "mn": _rows(g.min().reset_index()),
        "tk": _rows(pdf.sort_values(["k", "v"], ascending=[True, False]).groupby("k").head(2)),
        "dd": _rows(pdf.drop_duplicates()),
    }
    for workers in (1, 2, 3, 4):
        with kp.Engine(workers=workers) as eng:
            inp = eng.input("t", ["k", "v"])
            inp.insert({"k": k, "v": v})
            inp.advance_to(1)
            with eng.dataflow("d") as df:
                t = df.input("t")
                views = {"c": t.count(by="k").view("c"), "s": t.sum(by="k", col="v").view("s"),
                         "mn": t.min(by="k", col="v").view("mn"),
                         "tk": t.top_k(by="k", order_by="v", k=2).view("tk"), "dd": t.distinct().view("dd")}
            eng.wait("d")
            for name, view in views.items():
                assert _rows(view.to_pandas()) == want[name], (name, workers)


@pytest.mark.parametrize("workers", [1, 3])
def test_many_to_many_join_beyond_one_chunk_with_queued_epochs(workers):
    """1,100 rows per side on one key per epoch, four epochs queued before the engine runs: the join's
    output (1.2 to 19 million rows, all in one shard) goes out in chunks of 2**20, and the count over it
    is exact at every epoch (history) and moves once per epoch in follow(), never through a partial sum."""
    m = 1100
    with kp.Engine(workers=workers) as eng:
        a = eng.input("a", ["k", "x"])
        b = eng.input("b", ["k", "y"])
        with eng.dataflow("d") as df:
            j = df.input("a").join(df.input("b"), on="k")
            cv = j.count(by="k").view("c", history=4)
        fol = cv.follow(timeout=60)
        for e in range(4):
            a.insert({"k": np.zeros(m, np.int64), "x": np.arange(m) + e * m})
            b.insert({"k": np.zeros(m, np.int64), "y": np.arange(m) + e * m})
            a.advance_to(e + 1)
            b.advance_to(e + 1)
        eng.wait("d")
        for e in range(4):
            assert cv.to_pandas(at=e)["count"].tolist() == [((e + 1) * m) ** 2]
        frames = []
        for fr in fol:
            frames.append(fr)
            if fol.epoch >= 4:
                break
        fol.close()
        ch = pd.concat(frames)
        got = sorted(zip(ch["time"].tolist(), ch["count"].tolist(), ch["diff"].tolist()))
        want = [(0, m * m, 1)]
        for e in range(1, 4):
            want += [(e, (e * m) ** 2, -1), (e, ((e + 1) * m) ** 2, 1)]
        assert got == sorted(want)


# -- bugs ------------------------------------------------------------------------------------------------

def test_len_of_a_view_whose_row_count_leaves_int64_is_not_a_wrong_number():
    """Five distinct rows, each of multiplicity 2**62 - 1 (each below the documented bound): the view has
    5 * (2**62 - 1) rows, more than a Python len() can hold. len(view) must say so (an OverflowError, as
    len() of any object with more than sys.maxsize items does, or a KpgnbError), never return another
    number. Today cnt.sum() wraps around in int64 and len() is 2**62 - 5."""
    with kp.Engine(workers=2) as eng:
        inp = eng.input("t", ["k"])
        inp.update({"k": np.arange(5)}, np.full(5, M62))
        inp.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait("d")
        assert v.to_pandas(diffs=True)["diff"].tolist() == [M62] * 5  # the rows themselves are right
        with pytest.raises((OverflowError, kp.KpgnbError)):
            n = len(v)
            assert n == 5 * M62, n  # (unreachable once len refuses; documents the wrong value otherwise)


@pytest.mark.parametrize("workers", [1, 2])
def test_view_multiplicity_reaching_the_bound_over_several_epochs_fails_the_dataflow(workers):
    """Four distinct input rows (1, 0) .. (1, 3), each of multiplicity 2**60, one per epoch; the view
    select("k") holds k=1 with multiplicity 4 * 2**60 = 2**62 as of epoch 3. The README: a multiplicity that
    reaches 2**62 in a dataflow fails that dataflow (a DataflowError with an OverflowError cause), as
    count(by="k") over the same rows does at epoch 3. Today eng.wait returns at epoch 3 with the dataflow
    'running', and to_pandas()/len() raise a bare OverflowError from the read (not a KpgnbError); the
    dataflow fails only at a later epoch, when the view's spine merges."""
    with kp.Engine(workers=workers) as eng:
        inp = eng.input("t", ["k", "v"])
        with eng.dataflow("d") as df:
            v = df.input("t").select("k").view("v")
        for e in range(3):
            inp.update({"k": [1], "v": [e]}, [2 ** 60])
            inp.advance_to(e + 1)
        eng.wait("d")
        assert v.to_pandas(diffs=True)["diff"].tolist() == [3 * 2 ** 60]
        inp.update({"k": [1], "v": [3]}, [2 ** 60])
        inp.advance_to(4)
        with pytest.raises(kp.DataflowError) as err:
            eng.wait("d", timeout=30)
            v.to_pandas(diffs=True)
        chain, e = [], err.value
        while e is not None:
            chain.append(type(e))
            e = e.__cause__
        assert OverflowError in chain


def test_notebook_rendering_of_a_view_with_a_large_multiplicity_shows_its_rows():
    """A view of two rows, k=1 with multiplicity 2**61 and k=2 with 3 (both below the bound of 2**62), shown
    as a cell's result: the README promises a table of its first 20 rows, sorted, with its size. Today
    View.head() materializes to_pandas() (every row repeated by its multiplicity) and the rendering is the
    error 'ValueError: array is too big ...' for both the text and the HTML forms."""
    from IPython.lib.pretty import pretty
    with kp.Engine(workers=2) as eng:
        inp = eng.input("t", ["k"])
        inp.update({"k": [1, 2]}, [2 ** 61, 3])
        inp.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("t").view("v")
        eng.wait("d")
        text = pretty(v)
        html = v._repr_html_()
        assert "Error" not in text and "Error" not in html, text
        assert f"{2 ** 61 + 3} rows" in text, text
