"""Attack: random typed Datalog programs (int/float/str columns, non-linear and mutual recursion,
negation of recursive strata, aggregates over floats and strings, recursive min/max with int, float and
str labels, weighted shortest paths grouped by one or two columns, min through mutual recursion) under
random insert/retract streams, checked against the reference evaluator at every epoch, W = 1, 2, 3;
and goals with random binding patterns (constants of every type, two '?'), asks, repeated asks and
retracts, against the full relation filtered to the live bindings."""
from __future__ import annotations

import random
from collections import Counter

import pytest

import kpgnb as kp

import attack_datalog_gen as G
from datalog_reference import diff_rows, evaluate, rows_of, same_rows

WAIT_S = 60


@pytest.fixture
def make_engine():
    made = []

    def make(w):
        eng = kp.Engine(workers=w)
        made.append(eng)
        return eng
    yield make
    for eng in made:
        eng.close()


def load(eng, init):
    sess, state = {}, {}
    for p, types in G.INPUTS.items():
        sess[p] = eng.input(p, [f"c{i}" for i in range(len(types))], dtypes=[G.DTYPES[t] for t in types])
        sess[p].insert(init[p])
        state[p] = Counter(init[p])
        sess[p].advance_to(1)
    return sess, state


def apply(sess, state, step):
    for p, (ins, rem) in step.items():
        if ins:
            sess[p].insert(ins)
        if rem:
            sess[p].remove(rem)
        state[p].update(ins)
        state[p].subtract(rem)


# seeds whose programs have no head expression (goals on those crash: see test_attack_datalog_bugs)
def _no_head_expr(seed):
    return "+ 10" not in G.program(seed)[0]


FULL_SEEDS = list(range(0, 60))
GOAL_SEEDS = [s for s in range(300, 400) if _no_head_expr(s)][:30]


@pytest.mark.parametrize("seed", FULL_SEEDS)
def test_random_typed_programs(make_engine, seed):
    text, _ = G.program(seed)
    init, steps = G.stream(seed, 4)
    eng = make_engine(seed % 3 + 1)
    sess, state = load(eng, init)
    prog = eng.datalog(text, name="fz")
    for epoch in range(len(steps) + 1):
        if epoch:
            apply(sess, state, steps[epoch - 1])
            for s in sess.values():
                s.advance_to(epoch + 1)
        want = evaluate(text, state)
        for pred, rows in want.items():
            eng.wait(prog[pred], timeout=WAIT_S)
            got = rows_of(prog[pred], prog.columns(pred))
            assert same_rows(got, rows), f"seed {seed} epoch {epoch} {pred}: {diff_rows(got, rows)}\n{text}"


def _fmt(v):
    return f'"{v}"' if isinstance(v, str) else repr(v)


_T = {"int64": "int", "float64": "float", "str": "str", "bool": "int"}


@pytest.mark.parametrize("seed", GOAL_SEEDS)
def test_random_goals(make_engine, seed):
    """Asks and retracts go in between input epochs (the same-epoch case is its own test in
    test_attack_datalog_bugs.py)."""
    rng = random.Random(seed)
    text, _ = G.program(seed)
    init, steps = G.stream(seed, 3)
    eng = make_engine(seed % 3 + 1)
    sess, state = load(eng, init)
    prog = eng.datalog(text, name="gz")
    want = evaluate(text, state)
    goals = []
    for pred in sorted(want):
        arity = len(prog.columns(pred))
        rows = sorted(want[pred], key=repr)
        args = []
        for i in range(arity):
            r = rng.random()
            args.append("?" if r < 0.5 else "_" if r < 0.8 or not rows else rng.choice(rows)[i])
        if "?" not in args:
            args[rng.randrange(arity)] = "?"
        pat = f"{pred}({', '.join(a if a in ('?', '_') else _fmt(a) for a in args)})"
        goals.append((prog.goal(pat), pred, args, set(), pat))
    for epoch in range(len(steps) + 1):
        if epoch:
            apply(sess, state, steps[epoch - 1])
            for s in sess.values():
                s.advance_to(max(x.epoch for x in sess.values()) + 1)
            eng.wait(timeout=WAIT_S)
        cur = evaluate(text, state)
        for g, pred, args, asked, pat in goals:
            qs = [i for i, a in enumerate(args) if a == "?"]
            rows = sorted(cur[pred], key=repr)
            for _ in range(3):
                if rows and rng.random() < 0.6:
                    b = tuple(rows[rng.randrange(len(rows))][i] for i in qs)
                else:
                    b = tuple(G.random_value(rng, _T[prog.analysis.dtypes[pred][i]]) for i in qs)
                if b in asked and rng.random() < 0.5:
                    g.retract(*b)
                    asked.discard(b)
                elif rng.random() < 0.1:
                    g.retract(*b)   # may retract a binding not asked: nothing happens
                    asked.discard(b)
                else:
                    g.ask(*b)   # may ask a value asked before: the bindings are a set
                    asked.add(b)
        for g, pred, args, asked, pat in goals:
            eng.wait(prog[pred], timeout=WAIT_S)
            eng.wait(g.view, timeout=WAIT_S)
            full = rows_of(prog[pred], prog.columns(pred))
            assert same_rows(full, cur[pred]), f"seed {seed} epoch {epoch} {pred}: {diff_rows(full, cur[pred])}"
            qs = [i for i, a in enumerate(args) if a == "?"]
            live = asked
            exp = {r for r in full if all(a in ("?", "_") or r[i] == a for i, a in enumerate(args))
                   and tuple(r[i] for i in qs) in live}
            got = rows_of(g.view, prog.columns(pred))
            assert same_rows(got, exp), (f"seed {seed} epoch {epoch} {pat} asked {sorted(live, key=repr)}: "
                                         f"{diff_rows(got, exp)}\n{text}")
