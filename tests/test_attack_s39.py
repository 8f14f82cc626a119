"""Session 39 attack on 455557e: a distinct (no value columns) whose input in a shard has had only
insertions settles keys whose new rows are covered by an earlier output row without reading their input
history, and takes a key's input history to be its new rows where it has no output and no work pends.

The short cuts are wrong exactly where an output row no longer means "present from here on" (a key
inserted, retracted and inserted again), where a key has input but no output (a negative count: a
negated collection concatenated in; rows whose output still pends), or where an output row lies at a
time not at or before the new row (loops: a node derived at a later round in an earlier epoch). The
tests drive those through the engine, every result against a from-scratch reference at every epoch
(through the views' history): crafted cases in loops (bounded and unbounded, with rows entering at
later rounds), retractions arriving while corrections pend, bursts of epochs reaching the distinct as
one batch, dataflows installed late over an input's history, multiplicities above 1, goal-directed
Datalog with asks and retracts, and random programs over insert-only-then-retracting streams; W = 1,
2, 3. Seeded; no timing asserts.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

import datalog_reference as DR
from reference import COLS, DOM, build, evaluate, f_round, random_program
from test_many_times import held_scheduler, reduce_ops, view_counter

T = 60  # seconds: every wait's timeout


def _reach(root_rows, delayed_neg=True):
    """Reach from R over E inside an unbounded loop (rows (0, node)), with N's rows entering negated at
    round f_round(row): x' = distinct(join(swap(x), E) + R - delay(N))."""
    step = ("concat", ("join", ("swap", ("var", 0)), ("input", "E")), ("input", "R"))
    if delayed_neg:
        step = ("concat", step, ("negate", ("delay", ("input", "N"))))
    return ("iterate", ("input", "R"), ("distinct", step), None)


def _bounded_reach(rounds):
    return ("iterate", ("input", "R"),
            ("distinct", ("concat", ("join", ("swap", ("var", 0)), ("input", "E")), ("input", "R"))), rounds)


class _Driver:
    """An engine with inputs named after the program's, one dataflow of programs, and a history of the
    inputs per epoch; ``check`` compares every view at every epoch still readable."""

    def __init__(self, eng, names, progs, history=40, start=1):
        self.eng = eng
        self.state = {n: Counter() for n in names}
        self.sessions = {n: eng.input(n, COLS) for n in names}
        self.progs = progs
        self.epoch = 0
        self.hist = {}
        self.views = {}
        if progs:
            self.install("p", progs, history)

    def install(self, name, progs, history=40):
        with self.eng.dataflow(name) as df:
            for k, p in progs.items():
                self.views[k] = build(p, df).view(f"{name}_{k}", history=history)
        return progs

    def update(self, name, rows, diffs=None):
        diffs = [1] * len(rows) if diffs is None else diffs
        if rows:
            self.sessions[name].update(rows, diffs)
        for r, d in zip(rows, diffs):
            self.state[name][r] += d

    def seal(self):
        self.hist[self.epoch] = {n: Counter(c) for n, c in self.state.items()}
        self.epoch += 1
        for s in self.sessions.values():
            s.advance_to(self.epoch)

    def check(self, progs=None, since=0, tag=""):
        progs = progs or self.progs
        for k in progs:
            self.eng.wait(self.views[k], timeout=T)
        for e in range(since, self.epoch):
            at = e if e < self.epoch - 1 else None
            for k, p in progs.items():
                want = evaluate(p, self.hist[e])
                got = view_counter(self.views[k], at=at)
                assert got == want, (tag, k, p, "epoch", e, "missing", want - got, "extra", got - want)


# == crafted: retractions meeting the short cuts ======================================================

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_negative_counts_then_insertions_at_top_level(workers):
    """distinct(A - B): B's rows give keys negative counts and no output rows; inserting them into A
    later brings the count to 0 (absent), or to 1 only after a second insertion. A key with no output
    and no pending work must still read its history when the input has had a retraction."""
    prog = ("distinct", ("concat", ("input", "A"), ("negate", ("input", "B"))))
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["A", "B"], {"d": prog})
        keys = [(i, j) for i in range(DOM) for j in range(3)]
        d.update("A", [(9, j) for j in range(8)])  # insertions only, several steps
        d.seal()
        d.check()
        d.update("A", [(8, j) for j in range(8)])
        d.seal()
        d.check()
        d.update("B", keys)  # negative counts, no output rows
        d.seal()
        d.check()
        for _ in range(2):  # each key: count 0, then 1
            d.update("A", keys)
            d.seal()
            d.check()
        d.update("B", keys[::2], [2] * len(keys[::2]))
        d.seal()
        d.update("A", keys[::2])
        d.seal()
        d.update("A", keys[::2])
        d.seal()
        d.check()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_negative_count_first_then_insertions(workers):
    """The distinct's very first rows are negative (a fresh key in a fresh operator), in a burst with
    insertions at later epochs of the same keys, delivered as one batch."""
    prog = ("distinct", ("concat", ("input", "A"), ("negate", ("input", "B"))))
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["A", "B"], {"d": prog})
        keys = [(i, j) for i in range(DOM) for j in range(4)]
        with held_scheduler():
            d.update("B", keys)
            d.seal()
            d.update("A", keys)
            d.seal()
            d.update("A", keys[1::2])
            d.seal()
        d.check()
        d.update("A", keys[::3])
        d.seal()
        d.check()


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("burst", [False, True])
def test_insert_retract_reinsert_at_top_level(workers, burst):
    """Keys inserted (multiplicity 1 or 2), retracted (partly, then fully) and inserted again, each
    step its own epoch, at every epoch read back through the view's history; ``burst``: the epochs after
    the first reach the distinct in one batch."""
    prog = ("distinct", ("input", "A"))
    keys = [(i, j) for i in range(DOM) for j in range(DOM)]
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["A"], {"d": prog})
        d.update("A", keys, [1 + (i % 2) for i in range(len(keys))])
        d.seal()
        d.check()

        def rest():
            d.update("A", keys[::2], [-1] * len(keys[::2]))  # the 1s gone, the 2s at 1
            d.seal()
            d.update("A", keys[1::2], [-1] * len(keys[1::2]))
            d.seal()
            d.update("A", keys[::3])
            d.seal()
            d.update("A", keys[::5], [3] * len(keys[::5]))
            d.seal()

        if burst:
            with held_scheduler():
                rest()
        else:
            for _ in range(1):
                rest()
        d.check()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_negated_rows_entering_later_rounds_while_corrections_pend(workers):
    """Reach in an unbounded loop, with N's rows entering negated at rounds 1 and 2. Epoch 1 adds
    short cuts to nodes first reached at round 2 (their corrections pend at (1, 2)) while the negated
    rows arrive, so their retractions reach the distinct in steps with pending and due work; in epoch 2
    those nodes are inserted as roots: no output rows, no pending work, but a history (the negated row)
    that makes them absent from the round their negation enters."""
    targets = list(range(20, 44))
    ks = [(0, k) for k in range(4, 18) if k % 3]  # entering at rounds 1 and 2 (f_round): while work pends
    prog = _reach(None)
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["E", "R", "N"], {"reach": prog})
        d.update("E", [(0, 1), (1, 2)] + [(2, t) for t in targets])
        d.update("R", [(0, 0)])
        d.seal()
        d.check()
        d.update("E", [(0, t) for t in targets])
        d.update("N", ks)
        d.seal()
        d.check()
        d.update("R", ks)
        d.seal()
        d.check()
        d.update("R", ks[::2])  # multiplicity 2 against one negation
        d.seal()
        d.check()


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("rounds", [2, 3, 4])
def test_bounded_loop_where_a_node_is_reached_earlier_in_a_later_epoch(workers, rounds):
    """Reach cut at ``rounds``: nodes first derived at late rounds are derived at early rounds in later
    epochs (new short cuts). Their output rows lie at a later round than the new rows: not at or before
    them, so nothing may be settled, and the cut result shows it."""
    prog = _bounded_reach(rounds)
    chain = [(i, i + 1) for i in range(8)]
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["E", "R"], {"reach": prog, "full": _reach(None, delayed_neg=False)})
        d.update("E", chain + [(20 + i, 21 + i) for i in range(5)])
        d.update("R", [(0, 0)])
        d.seal()
        d.check()
        d.update("E", [(0, 3)])
        d.seal()
        d.check()
        d.update("E", [(0, 5), (2, 20)])
        d.seal()
        d.check()
        d.update("E", [(0, 7), (0, 22)])
        d.update("R", [(0, 6)])
        d.seal()
        d.check()
        d.update("E", [(0, 3), (0, 5)], [-1, -1])
        d.seal()
        d.check()


# == random programs over insert-only, then retracting, then re-inserting streams ======================

def _has(expr, op) -> bool:
    return expr[0] == op or any(isinstance(x, tuple) and _has(x, op) for x in expr[1:])


def _distinct_program(rng, loops_only=False):
    while True:
        prog = random_program(rng, depth=3)
        if _has(prog, "distinct") and (not loops_only or _has(prog, "iterate") or _has(prog, "mutual")):
            return prog


def _phase_updates(rng, phase, state: Counter, n):
    """Phase 0: insertions (multiplicity 1 or 2); 1: also retractions of live rows and of absent ones
    (negative counts); 2: also re-insertions of rows retracted before."""
    rows, diffs = [], []
    for _ in range(n):
        rows.append((int(rng.integers(DOM)), int(rng.integers(DOM))))
        diffs.append(int(rng.choice([1, 1, 2])))
    if phase >= 1:
        live = sorted(r for r, c in state.items() if c > 0)
        for _ in range(int(rng.integers(1, 4))):
            if live and rng.random() < 0.8:
                r = live[int(rng.integers(len(live)))]
                rows.append(r)
                diffs.append(-int(rng.integers(1, state[r] + 1)))
            else:
                rows.append((int(rng.integers(DOM)), int(rng.integers(DOM))))
                diffs.append(-1)
    if phase >= 2:
        dead = sorted(r for r, c in state.items() if c <= 0)
        for _ in range(int(rng.integers(0, 4))):
            if dead:
                r = dead[int(rng.integers(len(dead)))]
                rows.append(r)
                diffs.append(int(rng.integers(1, 3)) - min(state[r], 0))
    return rows, diffs


def random_case(seed, workers, epochs=12, late_at=4, bursts=(2, 7), loops_only=False):
    """Programs over A and B; an epoch stream whose phases move at epochs//3 and 2*epochs//3; the epochs
    in ``bursts`` ranges ([a, b)) sealed with the scheduler held; a second dataflow with the same programs
    installed after epoch ``late_at`` (its inputs imported with their history compacted). Every view at
    every epoch it can read, against the reference."""
    rng = np.random.default_rng(seed)
    progs = {i: _distinct_program(rng, loops_only) for i in range(2)}
    with kp.Engine(workers=workers) as eng:
        d = _Driver(eng, ["A", "B"], progs, history=epochs + 4)
        late = None
        born = None
        e = 0
        while e < epochs:
            held = bursts[0] <= e < bursts[1]
            stop = bursts[1] if held else e + 1
            ctx = held_scheduler() if held else None
            if ctx:
                ctx.__enter__()
            try:
                while e < stop:
                    phase = 0 if e < epochs // 3 else 1 if e < 2 * epochs // 3 else 2
                    for name in ("A", "B"):
                        rows, diffs = _phase_updates(rng, phase, d.state[name], int(rng.integers(0, 6)))
                        d.update(name, rows, diffs)
                    d.seal()
                    e += 1
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
            if late is None and e >= late_at:
                late = d.install("late", {f"late{k}": p for k, p in progs.items()}, history=epochs + 4)
                born = d.epoch - 1
            d.check(tag=f"seed {seed}")
            if late is not None:
                d.check(progs=late, since=born, tag=f"late seed {seed}")
        return progs


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_random_programs_insert_only_then_retracting(workers, seed):
    random_case(39_000 + 10 * seed + workers, workers, loops_only=seed % 2 == 0)
