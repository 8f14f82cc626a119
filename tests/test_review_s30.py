"""Review of session 30's change set (goals lending every input at their epoch and an offset rule in
``InputSession.advance_to``, both withdrawn after this review; ``Engine.own_inputs``). Each test states
what should hold; each failed on the change set it was written against."""
import kpgnb as kp

TC = "tc(x, y) :- edge(x, y).\ntc(x, z) :- tc(x, y), edge(y, z)."


def _rows(view):
    return sorted(map(tuple, view.to_pandas().itertuples(index=False)))


def test_goal_is_answered_at_once_although_an_unrelated_input_has_rows_buffered():
    """A goal's ask over an input with nothing buffered is answered at once (README: "the answer is
    complete at once"); an input the goal does not read, with rows inserted but not yet advanced, must not
    hold the binding back. On HEAD ``Goal._change`` counts every input at the goal's epoch ("peers") when
    it decides to wait, but only the goal's own leaders (the inputs it reads, through ``follow``) ever
    carry a waiting binding in: the binding stays buffered until ``edge`` advances, which a static graph
    never does. eng.wait(g.view) returns with the answer missing (before the change: [(1, 2), (1, 3)])."""
    with kp.Engine(workers=1) as eng:
        edge = eng.input("edge", ["a", "b"], rows=[(1, 2), (2, 3)])
        edge.advance_to(1)
        other = eng.input("other", ["x"])
        other.advance_to(1)
        other.insert([(5,)])  # unrelated to the program, not advanced yet
        prog = eng.datalog(TC)
        g = prog.goal("tc(?, _)")
        g.ask(1)
        eng.wait(g.view, timeout=30)
        assert _rows(g.view) == [(1, 2), (1, 3)]


def test_goal_answer_arrives_once_the_unrelated_buffered_input_advances():
    """Even when the unrelated input's owner advances it (so nothing is buffered any more), the binding
    asked while it was buffered is never sealed on HEAD: ``follow`` ties the bindings' input to the
    goal's leaders only, not to the peers the ask waited for."""
    with kp.Engine(workers=1) as eng:
        edge = eng.input("edge", ["a", "b"], rows=[(1, 2), (2, 3)])
        edge.advance_to(1)
        other = eng.input("other", ["x"])
        other.advance_to(1)
        other.insert([(5,)])
        prog = eng.datalog(TC)
        g = prog.goal("tc(?, _)")
        g.ask(1)
        other.advance_to(2)  # the rows the ask waited for are sealed
        eng.wait(g.view, timeout=30)
        assert _rows(g.view) == [(1, 2), (1, 3)]


def _asked_goal_of_a_program_with_facts(eng):
    edge = eng.input("edge", ["a", "b"], rows=[(1, 2), (2, 3)])
    edge.advance_to(1)
    g = eng.datalog(TC + "\nok(1).", name="p").goal("tc(?, _)")
    g.ask(1)
    eng.wait(g.view, timeout=30)
    return g


def test_drop_with_cascade_drops_the_goals_inputs_too():
    """README: "eng.drop(NAME) of a program or goal also drops the inputs made for it (its facts, the
    goal's bindings)". ``eng.drop(prog.name, cascade=True)`` drops the goals' dataflows (they import the
    program's exports): each goal's ``#asked`` input must go too (it stayed, following ``edge`` for ever)."""
    with kp.Engine(workers=1) as eng:
        g = _asked_goal_of_a_program_with_facts(eng)
        eng.drop("p", cascade=True)
        assert eng.dataflows() == {}
        assert sorted(eng.inputs()) == ["edge"]


def test_dropping_program_then_its_goal_drops_the_programs_fact_inputs():
    """``eng.drop(prog.name)`` while a goal still imports the program's exports retires the program's
    dataflow; its fact inputs cannot be dropped yet (the retired dataflow reads them), and ``Engine.drop``
    has already popped them from ``_owned``, so when ``eng.drop(goal.name)`` finally releases the retired
    program nothing drops ``p#facts.ok``: it stays for the engine's life (unless the user also calls
    ``prog.drop()``). Expected: after both drops only the user's input is left."""
    with kp.Engine(workers=1) as eng:
        g = _asked_goal_of_a_program_with_facts(eng)
        eng.drop("p")
        eng.drop(g.name)
        assert eng.dataflows() == {}
        assert sorted(eng.inputs()) == ["edge"]


def test_an_ask_between_two_advances_of_one_round_does_not_leave_a_join_behind_for_ever():
    """The owner advances ``edge`` and ``lab`` together each round (the same epoch k); a goal over
    ``edge`` asked on another thread between the two calls of one round lends ``edge`` only (``lab`` is
    one epoch behind at that moment, so it is no "peer"). With the offset rule ``edge`` then stays one
    input epoch ahead of ``lab`` for ever: every later round's rows of ``edge`` are sealed at a time
    ``lab`` has not reached, so a dataflow joining the two, after ``eng.wait``, lacks the last round's
    matches in every later round. Before the change an advance without rows re-aligned ``edge`` with its
    owner's numbering (rounds 3 and 4 here) and the join caught up; now it never does (round 6's row 16 is
    missing after the wait)."""
    with kp.Engine(workers=1) as eng:
        edge = eng.input("edge", ["a", "b"], rows=[(1, 2)])
        lab = eng.input("lab", ["a", "l"], rows=[(1, 0)])
        edge.advance_to(1)
        lab.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).")
        g = prog.goal("tc(?, _)")
        with eng.dataflow("d") as df:
            v = df.input("edge").join(df.input("lab"), on=["a"]).view("j")
        for k in range(2, 8):
            n = k - 1
            if n not in (3, 4):  # rounds 3 and 4 advance without rows
                edge.insert([(10 + n, 0)])
                lab.insert([(10 + n, n)])
            edge.advance_to(k)
            if n == 2:
                g.ask(1)  # (another thread's ask, landing between the owner's two advances)
            lab.advance_to(k)
        eng.wait(v, timeout=30)
        assert sorted(v.to_pandas()["a"].tolist()) == [1, 11, 12, 15, 16]


def test_flush_after_an_ask_advances_one_epoch():
    """``InputSession.flush()`` is "Advance to the next epoch" (``advance_to(self.epoch + 1)``, also the
    idiom of ``kpgnb.spark.BatchFeeder``, ``input_from`` and the random goal tests). The offset rule reads
    its argument in the owner's numbering, ``self.epoch`` is the input's: after a goal lent the input d
    epochs, every flush jumps d + 1 epochs, and with asks between flushes d grows by one per ask, so the
    epochs grow quadratically (10 rounds of ask + flush from epoch 1: epoch 76, before the change 21) and two inputs flushed
    together drift apart at different speeds."""
    with kp.Engine(workers=1) as eng:
        edge = eng.input("edge", ["a", "b"], rows=[(1, 2)])
        edge.advance_to(1)
        prog = eng.datalog("tc(x, y) :- edge(x, y).")
        g = prog.goal("tc(?, _)")
        g.ask(1)
        before = edge.epoch
        edge.insert([(3, 4)])
        edge.flush()
        assert edge.epoch == before + 1
        for n in range(2, 12):
            g.ask(n)
            edge.flush()
        assert edge.epoch <= before + 1 + 2 * 10
