"""Randomized differential testing: random dataflows built from every operator, random insertions and
removals over many epochs, loops and nested loops; the engine's accumulated output must equal the
reference evaluator's at every epoch, for 1, 2 and 3 workers. Input A is arranged by all its columns,
input B keyed by its first (``eng.input(..., key=)``)."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kpgnb as kp

from reference import BINARY, COLS, UNARY, build, evaluate, random_program, random_updates


def view_counter(view, at=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def run_program(prog, seed: int, workers: int, epochs: int = 6, batched: bool = False, per_epoch: int = 8):
    rng = np.random.default_rng(seed)
    state = {"A": Counter(), "B": Counter()}
    with kp.Engine(workers=workers) as eng:
        # B is keyed by a: joins on a, and a distinct keyed by a, read the input's own arrangement
        sessions = {n: eng.input(n, COLS, key="a" if n == "B" else None) for n in state}

        def change():
            for name, s in sessions.items():
                rows, diffs = random_updates(rng, int(rng.integers(0, per_epoch)))
                if rows:
                    s.update(rows, diffs)
                for r, d in zip(rows, diffs):
                    state[name][r] += d

        change()
        for s in sessions.values():
            s.advance_to(1)
        with eng.dataflow("p") as df:
            view = build(prog, df).view("out", history=epochs + 2)
        expected = {}
        for e in range(1, epochs + 1):
            expected[e - 1] = evaluate(prog, state)
            if not batched:
                eng.wait(view)
                assert view_counter(view) == expected[e - 1], (prog, e - 1)
            change()
            for s in sessions.values():
                s.advance_to(e + 1)
        eng.wait(view)
        expected[epochs] = evaluate(prog, state)
        assert view_counter(view) == expected[epochs], (prog, epochs)
        for e, want in expected.items():
            assert view_counter(view, at=e) == want, (prog, "at", e)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(40))
def test_random_programs(seed, workers):
    rng = np.random.default_rng(1000 + seed)
    prog = random_program(rng, depth=3)
    run_program(prog, seed, workers, batched=seed % 3 == 0)


@pytest.mark.parametrize("op", UNARY)
def test_each_unary_operator(op):
    prog = (op, ("input", "A"), 2) if op == "topk" else (op, ("input", "A"))
    for seed in range(3):
        run_program(prog, seed, workers=2, per_epoch=12)


@pytest.mark.parametrize("op", BINARY)
def test_each_binary_operator(op):
    for seed in range(3):
        run_program((op, ("input", "A"), ("input", "B")), seed, workers=2, per_epoch=12)


def test_nested_iteration():
    inner = ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("var", 1)))), None)
    prog = ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("swap", inner))), None)
    for seed in range(3):
        run_program(prog, seed, workers=3, epochs=5)


def test_mutual_recursion():
    prog = ("mutual", ("input", "A"), ("input", "B"),
            ("distinct", ("concat", ("var", 0), ("join", ("var", 1), ("input", "A")))),
            ("distinct", ("concat", ("var", 1), ("swap", ("var", 0)))), 4)
    for seed in range(3):
        run_program(prog, seed, workers=2)


# -- hypothesis: structured programs that shrink to small counterexamples -------------------------

def programs(max_loops=1):
    leaf = st.sampled_from([("input", "A"), ("input", "B")])

    def extend(children):
        unary = st.tuples(st.sampled_from([u for u in UNARY if u != "topk"]), children)
        topk = st.tuples(st.just("topk"), children, st.integers(1, 2))
        binary = st.tuples(st.sampled_from(BINARY), children, children)
        loop = st.tuples(st.just("iterate"), children, st.tuples(st.just("distinct"),
                         st.tuples(st.just("concat"), st.just(("var", 0)), children)), st.integers(1, 4))
        return st.one_of(unary, topk, binary, loop)
    return st.recursive(leaf, extend, max_leaves=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(), seed=st.integers(0, 1000), workers=st.sampled_from([1, 2, 3]))
def test_hypothesis_programs(prog, seed, workers):
    run_program(prog, seed, workers, epochs=4)


LARGE = [("count", ("input", "A")), ("min", ("concat", ("input", "A"), ("input", "B"))),
         ("semijoin", ("input", "A"), ("input", "B")), ("antijoin", ("input", "A"), ("input", "B")),
         ("reduce", ("input", "A")), ("topk", ("input", "A"), 3), ("distinct", ("flat", ("input", "A"))),
         ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("mix", ("var", 0)))), 3)]


@pytest.mark.parametrize("prog", LARGE, ids=[p[0] for p in LARGE])
def test_large_batches_take_the_parallel_paths(prog, monkeypatch):
    """Tens of thousands of distinct rows per epoch: shards run on the pool, spines merge many batches,
    and the join output is cut into small chunks."""
    import reference
    import kpgnb.engine.operators.join as J
    monkeypatch.setattr(reference, "DOM", 300)
    monkeypatch.setattr(J, "CHUNK", 5000)
    run_program(prog, seed=7, workers=3, epochs=4, per_epoch=30_000, batched=True)


@pytest.mark.parametrize("seed", range(15))
def test_deeper_random_programs(seed):
    """Depth-4 programs: loops inside loop bodies, mutual recursion inside iteration."""
    rng = np.random.default_rng(50_000 + seed)
    prog = random_program(rng, depth=4)
    run_program(prog, seed, workers=1 + seed % 3, epochs=5, batched=seed % 2 == 0)


def test_delayed_entry():
    """enter_at: inputs entering a loop at the rounds f_round gives their rows, in a fixed-point loop and
    in a loop nested in another; the fixed point is the one the reference computes round by round."""
    progs = [("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0),
              ("join", ("var", 0), ("delay", ("input", "B"))))), None),
             ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0),
              ("mix", ("concat", ("var", 0), ("delay", ("input", "B")))))), None),
             ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("iterate", ("delay", ("input", "B")),
              ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("delay", ("input", "A"))))), None))),
              None)]
    for i, prog in enumerate(progs):
        for workers in (1, 2, 3):
            run_program(prog, seed=i, workers=workers, epochs=5)
