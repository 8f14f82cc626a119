"""Review of 73ec3d9..HEAD (goals lending epochs, views knowing why they ended, bench checks).
Each test fails on the commit it was written against; the docstring says what should hold."""
import argparse

import numpy as np
import pytest

import kpgnb as kp

TC = "tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y)."


@pytest.fixture
def eng():
    e = kp.Engine(workers=1)
    yield e
    e.close()


def _goal(eng, owner_epoch):
    edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3)])
    edges.advance_to(owner_epoch)
    prog = eng.datalog(TC, inputs={"edge": "edges"}, name="graphq")
    return edges, prog.goal("tc(?, _)")


# --- 1. InputSession.lend / advance_to --------------------------------------------------------------

def test_lend_does_not_swallow_going_back_below_the_owners_own_epoch(eng):
    """The owner itself advanced to 5; a goal then lent one empty epoch (6). advance_to(2) is below what the
    owner itself asked for: an owner bug, which must still raise "epochs only advance" (the lent branch
    should cover only the epochs the owner did not know of, 5 < e <= 6). It returns silently instead,
    and with rows buffered it seals them at epoch 6 as if the owner had meant it."""
    edges, g = _goal(eng, 5)
    g.ask(1)
    eng.wait(g.view, timeout=30)
    assert edges.epoch == 6
    with pytest.raises(kp.UsageError, match="epochs only advance"):
        edges.advance_to(2)
    edges.insert([(3, 4)])
    with pytest.raises(kp.UsageError, match="epochs only advance"):
        edges.advance_to(0)


def test_lent_flag_makes_a_repeated_advance_seal_twice(eng):
    """After a lend (input at 2, owner at 1) the owner seals its rows with advance_to(2) (-> epoch 3, as
    documented). Repeating advance_to(2) is a no-op for any input (rows inserted after it wait for the
    next epoch), but ``_lent`` stays True forever, so the repeat seals the new rows as yet another epoch:
    the owner's numbering is not tracked, every call at or below seals, and the owner's epochs silently
    split/shift (reads at= the owner's epochs miss rows)."""
    edges, g = _goal(eng, 1)
    g.ask(1)
    eng.wait(g.view, timeout=30)
    assert edges.epoch == 2
    edges.insert([(3, 4)])
    edges.advance_to(2)            # documented: sealed as the next epoch
    assert edges.epoch == 3
    edges.insert([(4, 5)])
    edges.advance_to(2)            # the same advance again: must not seal a new epoch
    assert edges.epoch == 3 and edges.buffered


def test_ask_racing_the_owners_advance_does_not_raise(eng):
    """Goal._change reads the inputs' epochs, then calls ``self._session.advance_to(epoch)``. If the owner
    advances the graph input in between (another thread; simulated deterministically here), ``follow``
    carries the bindings' input past ``epoch`` and the goal's own advance_to raises "epochs only advance"
    out of ``g.ask`` (the same window exists before ``advance_to(epoch + 1)``, after the binding was
    already recorded as asked, so a retry is a silent no-op)."""
    edges, g = _goal(eng, 1)
    s = g._session
    orig = s.advance_to
    fired = []

    def racing(e):
        if not fired:
            fired.append(e)
            edges.advance_to(edges.epoch + 3)   # the owner's thread, between the read and the advance
        return orig(e)

    s.advance_to = racing
    g.ask(1)
    eng.wait(g.view, timeout=30)
    assert sorted(map(tuple, g.view.to_pandas().itertuples(index=False))) == [(1, 2), (1, 3)]


def test_ask_racing_the_owners_advance_after_insert_does_not_raise(eng):
    """The second window: the binding is inserted and recorded, then the owner advances (carrying the
    binding), then the goal's ``advance_to(epoch + 1)`` raises."""
    edges, g = _goal(eng, 1)
    s = g._session
    orig = s.advance_to
    calls = []

    def racing(e):
        calls.append(e)
        if len(calls) == 2:
            edges.advance_to(edges.epoch + 3)
        return orig(e)

    s.advance_to = racing
    g.ask(1)
    eng.wait(g.view, timeout=30)
    assert sorted(map(tuple, g.view.to_pandas().itertuples(index=False))) == [(1, 2), (1, 3)]


def test_two_goals_asking_on_two_threads_do_not_raise(eng):
    """Two goals of one program read the same input; their bindings' inputs both follow it. Goal 2 reads
    the epochs, then goal 1's ask (another thread; simulated at that point) lends the shared input an
    epoch, whose followers carry goal 2's bindings input past what goal 2 read: goal 2's own
    ``advance_to(epoch)`` raises "epochs only advance". No owner is involved at all."""
    edges, g1 = _goal(eng, 1)
    g2 = g1.program.goal("tc(_, ?)")
    s = g2._session
    orig = s.advance_to
    fired = []

    def racing(e):
        if not fired:
            fired.append(e)
            g1.ask(1)          # the other thread's ask lands between goal 2's read and its advance
        return orig(e)

    s.advance_to = racing
    g2.ask(3)
    eng.wait(g2.view, timeout=30)
    assert sorted(map(tuple, g2.view.to_pandas().itertuples(index=False))) == [(1, 3), (2, 3)]


# --- 5. bench argument checks -------------------------------------------------------------------------

def test_latency_refuses_bfs_sizes_that_cannot_run(monkeypatch):
    """parse_args promises integer options are checked before anything runs. bench.latency accepts
    --bfs-updates 0 (bfs_latency then takes max() of no latencies: ValueError) and --nodes 3 (it picks 4
    distinct roots: ValueError), after the count benchmark already ran."""
    from bench import latency
    ran = []
    def ran(*a, **k):
        raise AssertionError("a benchmark ran: the options passed parse_args")
    for f in ("count_latency", "bfs_latency", "install_latency"):
        monkeypatch.setattr(latency, f, ran)
    for bad in (["--bfs-updates", "0"], ["--nodes", "3"]):
        with pytest.raises(SystemExit) as e:
            latency.main(["--quick", *bad])
        assert e.value.code == 2, bad


def test_bfs_latency_with_no_updates_is_an_error_after_timing():
    """What the unchecked option does: bfs_latency(updates=0) fails with a bare NumPy error."""
    from bench.latency import bfs_latency
    try:
        bfs_latency(50, 200, 0, 1)
    except ValueError as e:
        pytest.fail(f"--bfs-updates 0 passed parse_args but the benchmark fails: {e}")


def test_scaling_refuses_nodes_that_cannot_run(monkeypatch):
    """bench.scaling: --nodes 2 passes the checks; bfs_throughput then needs 4 distinct roots
    (rng.choice(nodes, 4, replace=False): ValueError) after the count runs. And --workers ',' passes
    (no integers to check) and dies on ws[0] after the warm-up runs."""
    from bench import scaling
    def ran(*a, **k):
        raise AssertionError("a benchmark ran: the options passed parse_args")
    for f in ("count_throughput", "bfs_throughput", "write_result"):
        monkeypatch.setattr(scaling, f, ran)
    for bad in (["--nodes", "2"], ["--workers", ","]):
        with pytest.raises(SystemExit) as e:
            scaling.main(["--quick", *bad])
        assert e.value.code == 2, bad
