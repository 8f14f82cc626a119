"""Session 43: an assignment's map carries on only the columns the rule still reads (the head, the atoms
still to join, the other steps: kpgnb/datalog/compiler.py ``Compiler._assign``'s ``need``), instead of
every column of the bindings. Programs whose assignments precede a join on the assigned variable, a
filter or a negation reading columns the head drops, chained assignments, an aggregate over bindings
(which keeps every column), an expression argument in an atom, and a recursive min, checked against the
reference evaluator through random insert/remove streams at W = 1, 2, 3."""
from __future__ import annotations

from collections import Counter

import pytest

import kpgnb as kp
from datalog_reference import INPUTS, apply_step, check_program, make_input, update_stream

PROGRAM = """
p1(x, d) :- e(x, y), d = y + 1, f(d, z), z != x.
p2(x) :- e(x, y), w = y * 2, !f(w, x).
p3(x, count<y>, sum<d>) :- e(x, y), d = y - x, d > 0.
p4(x, z) :- e(x, y), f(y + 1, z).
p5(y, min<d>) :- u(y), d = 0.
p5(y, min<d>) :- p5(x, d1), e(x, y), d = d1 + 2, x != y.
p6(s, t) :- e(x, y), s = x + y, t = s - x, f(t, _).
p7(x, v) :- f(x, y), v = x * 3, e(y, w), w < v.
"""


@pytest.mark.parametrize("workers,seed", [(1, 1), (2, 2), (3, 3), (1, 4), (2, 5)])
def test_assignments_keep_only_the_columns_still_read(workers, seed):
    init, steps = update_stream(seed, 5)
    with kp.Engine(workers=workers) as eng:
        state = {p: Counter() for p in INPUTS}
        sessions = {p: make_input(eng, p) for p in INPUTS}
        for p, rows in init.items():
            sessions[p].insert(rows)
            state[p].update(rows)
        for s in sessions.values():
            s.advance_to(1)
        prog = eng.datalog(PROGRAM, name="s43")
        for epoch in range(len(steps) + 1):
            if epoch:
                apply_step(sessions, state, steps[epoch - 1])
                for s in sessions.values():
                    s.advance_to(epoch + 1)
            want = check_program(eng, prog, PROGRAM, state, f"epoch {epoch}")
            assert any(want[p] for p in ("p1", "p2", "p4", "p6", "p7")), "the program derives something"
