"""Attack (session 48): test-suite strength. Small realistic bugs (mutants) were injected one at a time
into a scratch clone of the engine, and the most relevant existing tests were run against each. Where no
existing test failed, a focused test here passes on the real code and fails on the mutant (each test's
docstring names its mutant). Mutants that existing tests already kill are listed at the end of this
docstring, so that the next round does not redo them.

Mutants no existing test killed (tests here):
- engine/view.py ``Follower.deliver``: the pending unread "changes" frame replaced, not extended, when a
  later append arrives (a follower that falls behind loses every epoch but the last).
- engine/view.py ``_Later``/``Follower.deliver``: a late-installed view's follower repeating, as changes,
  the updates at its start epoch that its first frame (the contents as of the start) already holds.
- engine/view.py ``View._unborn``: ``upto < born`` for ``<=``, so a late view read part of its start
  epoch (one input's rows) while that epoch was not final, where the README promises it reads as nothing.

Mutants killed by existing tests (no test added): min/max/argmin ignoring the sign of multiplicities
(kernels/reduce.py reduce_apply), distinct's fresh-key path keeping negative rows (operators/reduce.py
_first), top_k counting rows instead of multiplicity, settled_keys accepting retractions or a new min
that beats the output by one, threshold called with absolute counts, join_product's total dropping the
last probe key, semijoin using the right side's multiplicity, rep_matrix taking the max over the
frontier, merge_step compacting with the max over the frontier, merge_step dropping a batch's last
row, hash_keys_into differing from hash_pack (formation vs small batches), FeedbackOp keeping one round
more than max_rounds, ife(start_rounds=, rounds=) one round short, delay not taking max(round, fn(row)),
a view's at= read one epoch later, df.attrs["epoch"] off by one for at= reads, a view keeping one epoch of
history less than history=, the follower's contents dated at the frontier instead of the last complete
epoch, a contents frame of a closed view dated at its start, not its last change, the follower's changes
not sorted by time, the follower not ending once every input is closed, the join reading imported
histories without ``exact=True``, len(view) counting distinct rows, ``join_product`` allowing a product of
exactly 2**62, argmax and descending top_k ties going to the largest row, count dropping negative
counts. Equivalent mutants (nothing can kill them): distinct keeping accumulations of multiplicity 0
in reduce_apply (phase 1 never lists a zero accumulation); COUNT's 2**62 bound off by one in reduce_apply
(phase 1 or formation fails the same inputs first). Not shown reachable: merge_step's own 2**62 check on
equal (row, time) pairs off by one (the case tried, two equal updates of 2**61, fails in formation first).
"""
from __future__ import annotations

import pandas as pd

import kpgnb as kp
from threads import T, watchdog

_watchdog = watchdog(120)


def _changes(frames):
    """(row..., time, diff) tuples of the change frames, sorted."""
    if not frames:
        return []
    return sorted(map(tuple, pd.concat(frames).itertuples(index=False)))


def _frames_until(f, epoch):
    """Frames of follower ``f`` until it has seen every epoch before ``epoch`` complete."""
    frames = []
    while f.epoch is not None and f.epoch < epoch:
        frames.append(next(f))
    return frames


def test_a_follower_that_falls_behind_gets_every_epoch_it_missed():
    """README: a follower yields "every completed epoch's changes in time order, without gaps or repeats ...
    (a frame carries several epochs when the reader is slower than the engine)". Mutant: Follower.deliver
    replacing the unread frame instead of extending it (``self._items.pop()`` without keeping its parts):
    a reader that is three epochs behind got only the last epoch's changes. 63 follow tests passed on it."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        x.insert([(0,)])
        x.advance_to(1)
        eng.wait(v, timeout=T)
        with v.follow(timeout=T) as f:
            first = next(f)
            assert sorted(map(tuple, first.itertuples(index=False))) == [(0, 0, 1)]
            for e in range(1, 4):  # three epochs while nobody reads the follower
                x.insert([(10 * e,)])
                x.advance_to(e + 1)
                eng.wait(v, timeout=T)
            x.remove([(10,)])
            x.advance_to(5)
            eng.wait(v, timeout=T)
            got = _changes(_frames_until(f, 5))
        assert got == [(10, 1, 1), (10, 4, -1), (20, 2, 1), (30, 3, 1)]


def test_a_late_views_follower_does_not_repeat_its_start_epoch():
    """README: a dataflow installed late answers from its start epoch on, "a follower's first frame is the
    contents as of the start", then changes "without gaps or repeats". Here the view's inputs are at
    different epochs when it is installed (x at 3, y at 1), so it starts at epoch 2 and is unborn until y
    passes it; the follower is created before that. Mutant: the first append after the start keeping
    updates at the start epoch itself (``_Later``: times >= born), so y's row inserted at epoch 2 came
    twice (in the contents and again as a change at time 2). No existing follow test failed on it."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        y = eng.input("y", ["a"])
        for e in range(3):
            x.insert([(e,)])
            x.advance_to(e + 1)
        y.insert([(100,)])
        y.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").concat(df.input("y")).view("v")
        with v.follow(timeout=T) as f:
            y.insert([(101,)])
            y.advance_to(2)
            y.insert([(102,)])
            y.advance_to(3)
            y.insert([(103,)])
            y.advance_to(4)
            x.insert([(3,)])
            x.advance_to(4)
            eng.wait(v, timeout=T)
            frames = _frames_until(f, 4)
        rows = _changes(frames)
        # every row once: the contents as of epoch 2 (dated 2), then epoch 3's inserts
        assert rows == sorted([(0, 2, 1), (1, 2, 1), (2, 2, 1), (100, 2, 1), (101, 2, 1), (102, 2, 1),
                               (3, 3, 1), (103, 3, 1)])
        assert sorted(r[0] for r in rows) == sorted(v.to_pandas()["a"])


def test_a_late_view_reads_as_nothing_while_its_start_epoch_is_not_final():
    """README: a dataflow installed late "answers from its start epoch on ... read as nothing (no rows,
    attrs["epoch"] 0) until that epoch is final". x is at epoch 3 and y at 1 when the view is installed
    (start 2); once y reaches 2 (the view's frontier is 2: epoch 2 itself not final), to_pandas() and len()
    must still be empty. Mutant: View._unborn testing ``upto < born`` instead of ``<=``, which read x's
    rows (a part of epoch 2) at that point; 75 tests about late installs, epochs and follows passed on it."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        y = eng.input("y", ["a"])
        for e in range(3):
            x.insert([(e,)])
            x.advance_to(e + 1)
        y.insert([(100,)])
        y.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").concat(df.input("y")).view("v")
        y.insert([(101,)])
        y.advance_to(2)
        eng.wait(v, timeout=T)
        df_ = v.to_pandas()
        assert len(df_) == 0 and df_.attrs["epoch"] == 0
        assert len(v) == 0
        y.advance_to(3)
        eng.wait(v, timeout=T)
        df_ = v.to_pandas()
        assert sorted(df_["a"]) == [0, 1, 2, 100, 101] and df_.attrs["epoch"] == 3
