"""Session 46: regression tests for fixes beyond the attack files' own tests."""
from __future__ import annotations

import pytest

import kpgnb as kp


def rows_of(view):
    return set(map(tuple, view.to_pandas().itertuples(index=False)))


def test_inputs_an_ask_lent_together_stay_together_when_the_idle_one_advances_first():
    """An ask lends e and u (both read by the goal) an epoch; the owner then inserts into e only and advances
    u first, then e (tests/test_attack_s46_datalog.py has e first): e seals its rows one past the lent
    epoch and u (nothing buffered, advanced already) is taken along, so a relation reading both shows the
    new row after the wait."""
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["a", "b"], ["int64", "int64"], rows=[(1, 2)])
        u = eng.input("u", ["a"], ["int64"], rows=[(1,)])
        e.advance_to(1)
        u.advance_to(1)
        prog = eng.datalog("reach(x) :- u(x).\nreach(y) :- reach(x), e(x, y).\n", name="P")
        g = prog.goal("reach(?)")
        g.ask(2)
        eng.wait(g.view, timeout=60)
        e.insert([(2, 3)])
        u.advance_to(2)
        e.advance_to(2)
        assert e.epoch == u.epoch
        eng.wait(prog["reach"], timeout=60)
        assert rows_of(prog["reach"]) == {(1,), (2,), (3,)}
        assert rows_of(g.view) == {(2,)}


def _interrupt_entering_submit():
    """A trace function raising KeyboardInterrupt once, at the entry of ``Scheduler.submit``: before the seal
    is queued."""
    fired = []

    def tracer(frame, event, arg):
        if event == "call" and not fired and frame.f_code.co_name == "submit" \
                and frame.f_code.co_filename.endswith("scheduler.py"):
            fired.append(1)
            raise KeyboardInterrupt
        return None
    return tracer, fired


@pytest.mark.parametrize("how", ["advance_to", "close"])
def test_ctrl_c_before_the_seal_is_queued_keeps_the_rows_and_the_epoch(how):
    """Ctrl-C landing before an advance's (or close's) seal reaches the scheduler: the input is put back as
    it was (rows buffered, epoch or open state unchanged), so repeating the call seals the rows once."""
    import sys
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").count(by=[]).view("v")
        x.insert([(1,), (2,)])
        tracer, fired = _interrupt_entering_submit()
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                x.advance_to(1) if how == "advance_to" else x.close()
        finally:
            sys.settrace(old)
        assert fired and x.epoch == 0 and not x.closed and x.buffered
        x.advance_to(1) if how == "advance_to" else x.close()
        eng.wait(v, timeout=60)
        d = v.to_pandas()
        assert d["count"].tolist() == [2]
        assert d.attrs["epoch"] == (1 if how == "advance_to" else None)


def test_cancel_from_inside_its_own_dataflow_takes_effect():
    """An ``inspect`` that cancels its own dataflow on a bad row: the call returns at once (the cancel runs
    after the step), the dataflow's waits raise Cancelled, and another dataflow carries on."""
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["a"])

        def guard(cols, times, diffs):
            if (cols["a"] == 666).any():
                eng.cancel("d", "a bad row")
        with eng.dataflow("d") as df:
            v = df.input("x").inspect(guard).count(by=[]).view("v")
        with eng.dataflow("other") as df:
            o = df.input("x").count(by=[]).view("o")
        x.insert([(1,), (666,)])
        x.advance_to(1)
        with pytest.raises(kp.Cancelled):
            eng.wait(v, timeout=60)
        eng.wait(o, timeout=60)
        assert o.to_pandas()["count"].tolist() == [2]
        assert eng.dataflows()["d"] == "cancelled"


def test_a_nan_timeout_is_refused():
    with kp.Engine(workers=1) as eng:
        eng.input("x", ["a"])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        with pytest.raises(kp.ArgumentTypeError, match="NaN"):
            eng.wait(v, timeout=float("nan"))
        with pytest.raises(kp.ArgumentTypeError, match="NaN"):
            v.follow(timeout=float("nan"))


def test_a_subscription_whose_function_raises_closes_its_follower():
    """The subscription stops at the function's exception (kept in ``error``) and its follower collects no
    more changes: it is closed."""
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["a"], rows=[(1,)])
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        x.advance_to(1)
        eng.wait(v)

        def fn(changes):
            raise ValueError("boom")
        sub = v.subscribe(fn)
        sub.thread.join(30)
        assert not sub.thread.is_alive() and isinstance(sub.error, ValueError)
        x.insert([(2,)])
        x.advance_to(2)
        eng.wait(v)
        assert list(sub.follower) == []  # closed: ends at once, nothing kept


def test_drop_refuses_a_bloom_filter_beyond_its_limit():
    with pytest.raises(kp.SchemaError, match="2\\*\\*40"):
        kp.Drop(tracker="bloom", bloom_bits=2 ** 62)
    assert kp.Drop(tracker="bloom", bloom_bits=2 ** 40).bloom_bits == 2 ** 40
