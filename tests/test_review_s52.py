"""Review of the s52 diff (5ad517b..HEAD): each test pins a defect found there (xfail until fixed)."""
from __future__ import annotations

import pytest

import kpgnb as kp
from kpgnb.engine.session import InputSession


def test_lend_with_a_read_input_ahead_keeps_an_owners_inputs_together():
    with kp.Engine(workers=1) as eng:
        a = eng.input("a", ["x"], rows=[(1,)])   # a and w: one owner, advanced together
        w = eng.input("w", ["x"], rows=[(1,)])
        c = eng.input("c", ["x"], rows=[(9,)])   # another owner, ahead
        a.advance_to(2)
        w.advance_to(2)
        c.advance_to(5)
        prog = eng.datalog("q(x) :- a(x), c(y).\n", name="p")
        with eng.dataflow("inv") as df:
            tot = df.input("a").concat(df.input("w")).count(by=[]).view("tot", history=50)
        g = prog.goal("q(?)")
        g.ask(1)
        eng.wait(g.view, timeout=60)
        assert g.view.to_pandas()["x"].tolist() == [1]
        a.insert([(2,)])  # one transaction of the owner: its epoch 2 in both inputs
        w.insert([(2,)])
        a.advance_to(3)
        w.advance_to(3)
        a.advance_to(9)
        w.advance_to(9)
        eng.wait(tot, timeout=60)
        counts = sorted({tot.to_pandas(at=e)["count"].tolist()[0] for e in range(1, 9)})
        # the transaction is seen whole or not at all: never one of its two rows alone
        assert 3 not in counts, (counts, a.position, w.position)
