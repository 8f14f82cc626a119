"""Attack: random programs with nested iteration over random update streams with empty epochs, bursts,
inputs advanced unevenly (one far ahead of the other) and closed inputs; the engine's view must equal
the reference evaluator at its frontier after every step, and at every earlier epoch (at=) at the end."""
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

from reference import COLS, build, evaluate, random_program, random_updates, _leaves

HAND = [
    # a loop whose body converges at once, nested in a loop (a body that is just its variable spins
    # forever: repro/loop_identity_body.py)
    ("iterate", ("input", "A"), ("iterate", ("var", 0), ("distinct", ("var", 0)), None), None),
    ("iterate", ("input", "A"), ("concat", ("var", 0), ("iterate", ("var", 0), ("distinct", ("var", 0)), 2)), 3),
    # loop in loop in loop with delayed entries
    ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("iterate", ("delay", ("input", "B")),
     ("distinct", ("concat", ("var", 0), ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0),
      ("join", ("var", 0), ("var", 1)))), None))), None))), None),
    # bounded loop inside unbounded loop, with a reduction in the body
    ("iterate", ("input", "B"), ("distinct", ("concat", ("var", 0), ("swap", ("iterate", ("var", 0),
     ("min", ("concat", ("var", 0), ("mix", ("var", 0)))), 3)))), None),
    ("iterate", ("count", ("input", "A")), ("concat", ("var", 0), ("semijoin", ("input", "B"), ("var", 0))), 4),
    ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("delay", ("input", "B"))))), None),
    ("concat", ("iterate", ("input", "A"), ("var", 0), 1), ("iterate", ("input", "B"), ("negate", ("var", 0)), 3)),
]


def view_counter(view, at=None) -> Counter:
    return counter_of(view.columns(at=at, diffs=True))


def counter_of(cols) -> Counter:
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def state_at(hist, upto):
    """Inputs accumulated over every update at an epoch < upto (None: all)."""
    out = {}
    for n, h in hist.items():
        c = Counter()
        for e, r, d in h:
            if upto is None or e < upto:
                c[r] += d
        out[n] = c
    return out


def run_uneven(prog, seed, workers, steps=16):
    rng = np.random.default_rng(seed)
    used = sorted({leaf[1] for leaf in _leaves(prog) if leaf[0] == "input"} |
                  {x[1][1] for x in _walk(prog) if x[0] == "delay"})
    hist = {"A": [], "B": []}
    cur = {"A": 0, "B": 0}
    closed = set()
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in hist}

        def change(n, k):
            rows, diffs = random_updates(rng, k)
            if rows:
                sessions[n].update(rows, diffs)
            hist[n] += [(cur[n], r, d) for r, d in zip(rows, diffs)]

        for n in hist:
            change(n, int(rng.integers(0, 8)))
        with eng.dataflow("p") as df:
            view = build(prog, df).view("out", history=1000)
        seen = []
        for step in range(steps):
            for n in hist:
                if n in closed:
                    continue
                r = rng.random()
                if r < 0.25:
                    pass  # an epoch with no changes
                elif r < 0.35:
                    change(n, int(rng.integers(30, 80)))  # a burst
                else:
                    change(n, int(rng.integers(1, 6)))
                r = rng.random()
                if r < 0.15:
                    cur[n] += int(rng.integers(4, 9))  # far ahead
                elif r < 0.85:
                    cur[n] += 1
                if step >= steps - 3 and rng.random() < 0.3:
                    sessions[n].close()
                    closed.add(n)
                else:
                    sessions[n].advance_to(cur[n])
            eng.wait(view)
            open_used = [cur[n] for n in used if n not in closed]
            want_epoch = min(open_used) if open_used else None
            # the view reflects at least every epoch all its inputs passed; it may be further on when its
            # value does not depend on a lagging input (the reference then agrees at its frontier), and it
            # may move on while we read: the rows and their epoch come from one snapshot
            read = view.to_pandas(diffs=True)
            got_epoch = read.attrs["epoch"]
            if want_epoch is None:
                assert got_epoch is None, (prog, step, got_epoch, cur, closed)
            else:
                assert got_epoch is None or got_epoch >= want_epoch, (prog, step, got_epoch, want_epoch, cur, closed)
            want_epoch = got_epoch
            want = evaluate(prog, state_at(hist, want_epoch))
            got = counter_of(read)
            assert got == want, (prog, step, "frontier", want_epoch, sorted((got - want).items()),
                                 sorted((want - got).items()))
            if want_epoch is not None and want_epoch > 0:
                seen.append(want_epoch - 1)
        for e in sorted(set(seen)):
            want = evaluate(prog, state_at(hist, e + 1))
            assert view_counter(view, at=e) == want, (prog, "at", e)


def _walk(expr):
    yield expr
    for x in expr[1:]:
        if isinstance(x, tuple):
            yield from _walk(x)


def _has_loop(p):
    return any(x[0] in ("iterate", "mutual") for x in _walk(p))


def programs(n, base):
    out = []
    rng = np.random.default_rng(base)
    while len(out) < n:
        p = random_program(rng, depth=4)
        if _has_loop(p):
            out.append(p)
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("i", range(len(HAND)))
def test_hand_nested(i, workers):
    run_uneven(HAND[i], 10 * i + workers, workers)


RANDOM = programs(150, 777)


@pytest.mark.parametrize("i", range(len(RANDOM)))
def test_random_nested_uneven(i):
    run_uneven(RANDOM[i], 500 + i, workers=1 + i % 3)


# -- enter_at inside loops cut at max_rounds ------------------------------------------------------
# The engine's semantics (iterate's docstring: rounds from n on are dropped by the back edge): the loop
# variable stops changing at round n - 1, while rows entered by enter_at at later rounds still reach the
# body's result. So the result is body(x_{n-1}) with every delayed row in, x_{i+1} = body(x_i) with the
# rows delayed to rounds <= i.

import reference as _R  # noqa: E402


def evaluate_cut(expr, inputs, env=None):
    env = env or []
    if expr[0] == "iterate" and expr[3] is not None:
        _, init, body, n = expr
        x = evaluate_cut(init, inputs, env)
        for i in range(n - 1):
            _R._ROUNDS.append(i)
            try:
                x = _R.clean(evaluate_cut(body, inputs, env + [x]))
            finally:
                _R._ROUNDS.pop()
        _R._ROUNDS.append(10 ** 6)
        try:
            return _R.clean(evaluate_cut(body, inputs, env + [x]))
        finally:
            _R._ROUNDS.pop()
    return _ORIG(expr, inputs, env)


_ORIG = _R.evaluate

CUT = [
    ("iterate", ("input", "A"), ("concat", ("var", 0), ("delay", ("input", "B"))), 1),
    ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("delay", ("input", "B"))))), 2),
    ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("mix", ("concat", ("var", 0), ("delay", ("input", "B")))))), 2),
    ("iterate", ("input", "A"), ("concat", ("var", 0), ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0),
     ("swap", ("delay", ("input", "B"))))), 1)), 3),
    ("iterate", ("input", "A"), ("min", ("concat", ("var", 0), ("mix", ("delay", ("input", "B"))))), 4),
    ("iterate", ("input", "B"), ("distinct", ("concat", ("var", 0), ("iterate", ("var", 0), ("distinct", ("concat",
     ("var", 0), ("join", ("var", 0), ("delay", ("input", "A"))))), None))), 2),
]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("i", range(len(CUT)))
def test_enter_at_in_cut_loops(i, workers, monkeypatch):
    monkeypatch.setattr(_R, "evaluate", evaluate_cut)
    global evaluate
    saved = evaluate
    evaluate = evaluate_cut
    try:
        run_uneven(CUT[i], 40 + 10 * i + workers, workers, steps=10)
    finally:
        evaluate = saved


@pytest.mark.parametrize("body", ["identity", "map"])
def test_loop_whose_body_changes_nothing_settles(body):
    """x.iterate(lambda v: v) reaches its fixed point at round 0: the back edge consolidates what it takes
    in one step, so the round's +x and the initial value's -x cancel instead of circulating forever."""
    with kp.Engine(workers=1) as eng:
        a = eng.input("A", ["a", "b"])
        a.insert([(1, 2)])
        a.advance_to(1)
        with eng.dataflow("p") as df:
            x = df.input("A")
            fn = (lambda v: v) if body == "identity" else (lambda v: v.map(lambda a, b: {"a": a, "b": b}))
            view = x.iterate(fn).view("out")
        try:
            eng.wait(view, timeout=15)
        finally:
            settled = view.epoch == 1
            eng.drop("p")
        assert settled
