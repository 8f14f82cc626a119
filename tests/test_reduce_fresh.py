"""A reduce takes a short cut for the probe keys whose whole history is their new updates, at one time,
with no output yet (``ReduceOp._first``: a first load, or what a loop derives for the first time), and
the three phases for the rest. These check both, and steps that mix them, against a from-scratch
reference where the short cut applies and where it must not (duplicates, negative multiplicities,
history an import's lens advances to one time from several batches, loops), at W = 1, 2 and 3."""
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp

from reference import COLS, build, evaluate, random_updates

OPS = [("count",), ("sum",), ("min",), ("max",), ("argmin",), ("argmax",), ("topk", 2), ("distinct",),
       ("threshold",), ("reduce",)]


def _rows(view, at=None) -> Counter:
    df = view.to_pandas(at=at, diffs=True)
    return Counter({tuple(int(x) for x in r[:-1]): int(r[-1]) for r in df.itertuples(index=False)})


def _distinct(acc: Counter) -> Counter:
    return Counter({k: 1 for k, c in acc.items() if c > 0})


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distinct_matches_reference_through_churn(workers, seed):
    """Random multiset updates (repeats, negative multiplicities, removals of absent rows) over many
    epochs; one dataflow from the start, one installed late (its history arrives compacted), both read
    at every epoch."""
    rng = np.random.default_rng(seed)
    acc = Counter()
    with kp.Engine(workers=workers) as eng:
        x = eng.input("X", ["a", "b"])

        def epoch(e, n):
            rows = [(int(a), int(b)) for a, b in rng.integers(0, 6, (n, 2))]
            diffs = [int(d) for d in rng.choice([-2, -1, 1, 1, 1, 2, 3], n)]
            x.update(rows, diffs)
            for r, d in zip(rows, diffs):
                acc[r] += d
            x.advance_to(e + 1)

        epoch(0, 40)
        with eng.dataflow("early") as df:
            early = df.input("X").distinct().view("early")
        eng.wait(early)
        assert _rows(early) == _distinct(acc)
        late = None
        for e in range(1, 12):
            epoch(e, int(rng.integers(1, 12)))
            if e == 6:
                with eng.dataflow("late") as df:
                    late = df.input("X").distinct().view("late")
            for v in (early, late):
                if v is not None:
                    eng.wait(v)
                    assert _rows(v) == _distinct(acc), (e, v.name)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_distinct_first_load_with_duplicates_and_negatives(workers):
    """One batch: counts 1, 2 and -1 and a row that cancels; only positive counts are kept, each once."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("X", ["k"])
        x.update([(1,), (2,), (2,), (3,), (4,), (4,)], [1, 1, 1, -1, 1, -1])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("X").distinct().view("d")
        eng.wait(v)
        assert _rows(v) == Counter({(1,): 1, (2,): 1})
        x.update([(3,), (3,), (1,)], [1, 1, -1])  # 3: -1 + 2 = 1 appears, 1 leaves
        x.advance_to(2)
        eng.wait(v)
        assert _rows(v) == Counter({(2,): 1, (3,): 1})


@pytest.mark.parametrize("workers", [1, 2])
def test_distinct_after_compacted_history(workers):
    """A late install reading history that compaction merged across epochs (a row inserted, removed and
    inserted again; a row whose negative count is later offset): the short cut must not read a merged
    update as new."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("X", ["k"])
        x.update([(1,), (2,)], [1, -1]); x.advance_to(1)
        x.update([(1,), (2,)], [-1, 2]); x.advance_to(2)
        x.update([(1,), (3,)], [1, 1]); x.advance_to(3)
        with eng.dataflow("d") as df:
            v = df.input("X").distinct().view("d")
        eng.wait(v)
        assert _rows(v) == Counter({(1,): 1, (2,): 1, (3,): 1})
        x.update([(2,), (3,)], [-1, -1]); x.advance_to(4)
        eng.wait(v)
        assert _rows(v) == Counter({(1,): 1})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_reachability_loop_distinct_under_edge_changes(workers):
    """Pairs a loop derives for the first time go through the short cut; pairs derived again, and the
    retractions after an edge removal, through the general path. Transitive closure against a BFS
    reference after every change."""
    rng = np.random.default_rng(7)
    n = 25
    edges = set(map(tuple, rng.integers(0, n, (60, 2)).tolist()))

    def closure(es):
        succ = {}
        for a, b in es:
            succ.setdefault(a, set()).add(b)
        out = set()
        for s in succ:
            seen, stack = set(), [s]
            while stack:
                u = stack.pop()
                for w in succ.get(u, ()):
                    if w not in seen:
                        seen.add(w)
                        stack.append(w)
            out |= {(s, t) for t in seen}
        return out

    with kp.Engine(workers=workers) as eng:
        e = eng.input("E", ["src", "dst"])
        e.insert(sorted(edges)); e.advance_to(1)
        with eng.dataflow("tc") as df:
            E = df.input("E")
            by_src = E.arrange_by("src")
            tc = E.iterate(lambda p: p.join(by_src, left_on="dst", right_on="src")
                           .map(lambda src, dst, dst_right: {"src": src, "dst": dst_right})
                           .concat(p).distinct())
            v = tc.view("tc")
        eng.wait(v)
        assert set(_rows(v)) == closure(edges) and set(_rows(v).values()) == {1}
        for step in range(8):
            if step % 2 and edges:
                gone = sorted(edges)[int(rng.integers(len(edges)))]
                edges.discard(gone)
                e.remove([gone])
            else:
                new = tuple(int(c) for c in rng.integers(0, n, 2))
                if new not in edges:
                    edges.add(new)
                    e.insert([new])
            e.advance_to(step + 2)
            eng.wait(v)
            got = _rows(v)
            assert set(got) == closure(edges) and set(got.values()) <= {1}, step


def _counter(view, at=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_reduction_installed_over_held_history(workers, seed):
    """Epochs of random updates while a reader holds the input's compaction back (so its history stays in
    batches of their own, which a late import reads advanced to one time), then every reduction installed
    at once and read at every later epoch; then each again over a loop (the reduction's input a round's
    rows)."""
    rng = np.random.default_rng(seed)
    state = Counter()
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", COLS)
        with eng.dataflow("hold") as df:
            df.input("A").view("held", history=100)

        def epoch(e):
            rows, diffs = random_updates(rng, int(rng.integers(1, 10)))
            a.update(rows, diffs)
            for r, d in zip(rows, diffs):
                state[r] += d
            a.advance_to(e + 1)

        first = int(rng.integers(2, 7))
        for e in range(first):
            epoch(e)
        progs = [(op[0], ("input", "A"), *op[1:]) for op in OPS]
        progs += [("iterate", ("input", "A"), (op[0], ("concat", ("var", 0), ("input", "A")), *op[1:]), 2)
                  for op in OPS]
        with eng.dataflow("late") as df:
            views = [build(p, df).view(f"v{i}") for i, p in enumerate(progs)]
        for e in range(first, first + 5):
            for p, v in zip(progs, views):
                eng.wait(v)
                assert _counter(v) == evaluate(p, {"A": state}), (p, e)
            epoch(e)
