"""A distinct settles a key without reading its input history where the key's new rows are insertions at
or after all of its output rows, which sum to 1 (``ReduceOp._settle``, ``settled_keys``): the rows a
recursive rule derives again in later rounds. A min or max does too where its output rows are of one
value that no new value beats (the random programs below have both). While every row of its input history is an insertion, a
key without output rows reads no history either (``ReduceOp._insertions_only``). These
check the kernel against its definition, that the short cuts are taken (the phase work of an insert-only
recursion stays proportional to its output, not to its derivations), and that answers stay right
through insert-only epochs, then retractions, then re-insertions of what was retracted, at W = 1, 2, 3."""
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine.kernels import reduce as rk

from reference import COLS, build, evaluate, random_program
from test_many_times import reduce_ops, view_counter

TC = "tc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n"


def _settled_by_definition(times, diffs, vals, seeds, sdiffs, svals, sense) -> bool:
    if not (len(diffs) > 0 and diffs.sum() == 1 and (sdiffs > 0).all()
            and all((t <= s).all() for t in times for s in seeds)):
        return False
    if sense == 0:
        return True
    return len(set(vals.tolist())) == 1 and all(sense * (v - vals[0]) >= 0 for v in svals)


@pytest.mark.parametrize("sense", [0, 1, -1])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_settled_keys_matches_its_definition(d, sense):
    """Settled exactly where the new rows are insertions and the output rows sum to 1, each at or before
    every new row's time; for a min (sense 1) or max (-1), of one value that no new value beats."""
    rng = np.random.default_rng(d)
    hits = 0
    for _ in range(60):
        m = int(rng.integers(1, 30))
        nrows = rng.integers(0, 4, m)
        nseeds = rng.integers(1, 4, m)
        hoff = np.concatenate([[0], np.cumsum(nrows)]).astype(np.int64)
        soff = np.concatenate([[0], np.cumsum(nseeds)]).astype(np.int64)
        htimes = rng.integers(0, 3, (int(hoff[-1]), d)).astype(np.int64)
        hdiffs = rng.choice([1, 1, 1, -1, 2], int(hoff[-1])).astype(np.int64)
        stimes = rng.integers(1, 5, (int(soff[-1]), d)).astype(np.int64)
        sdiffs = rng.choice([1, 1, 1, 1, 2, -1], int(soff[-1])).astype(np.int64)
        width = 0 if sense == 0 else 1
        hvals = rng.choice([3, 3, 3, 4], (width, int(hoff[-1]))).astype(np.int64)
        svals = rng.integers(1, 6, (width, int(soff[-1]))).astype(np.int64)
        got = rk.settled_keys(hoff, htimes, hdiffs, hvals, soff, stimes, sdiffs, svals, sense)
        for p in range(m):
            h, sd = slice(hoff[p], hoff[p + 1]), slice(soff[p], soff[p + 1])
            hv = hvals[0, h] if width else np.zeros(0, np.int64)
            sv = svals[0, sd] if width else np.zeros(0, np.int64)
            want = _settled_by_definition(htimes[h], hdiffs[h], hv, stimes[sd], sdiffs[sd], sv, sense)
            assert got[p] == want, (p, htimes[h], hdiffs[h], hv, stimes[sd], sdiffs[sd], sv)
            hits += want
    assert hits > 10  # (the random cases reach both answers)


def _random_edges(rng, nodes, n):
    return sorted({(int(a), int(b)) for a, b in rng.integers(0, nodes, (n, 2)) if a != b})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_insert_only_recursion_reads_each_key_once(workers):
    """Transitive closure of a random cyclic graph derives most pairs several times, in several rounds;
    the distincts' phase work must stay about two visits per output row (its first derivation), where
    reading every derivation's history costs several times more (2,884 visits here, 10,577 before the
    short cut)."""
    rng = np.random.default_rng(3)
    edges = _random_edges(rng, 40, 120)
    with kp.Engine(workers=workers) as eng:
        eng.input("edge", ["src", "dst"], rows=edges).flush()
        view = eng.datalog(TC, name="g")["tc"]
        eng.wait(view)
        got = {tuple(r) for r in view.to_pandas().itertuples(index=False)}
        work = Counter()
        for op in reduce_ops(view):
            work.update(op.work_done())
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    want = set()
    for x in succ:
        seen, stack = set(), list(succ[x])
        while stack:
            y = stack.pop()
            if y not in seen:
                seen.add(y)
                stack.extend(succ.get(y, ()))
        want |= {(x, y) for y in seen}
    assert got == want
    assert work["times"] <= 2 * (len(want) + len(edges)) + 16, (work, len(want), len(edges))


def _stream(rng, epochs):
    """Per epoch and input, (rows, diffs): insertions only for the first third, then retractions of rows
    present (and now and then of absent ones) mixed in, then the retracted rows inserted again."""
    state = {"A": Counter(), "B": Counter()}
    retracted = {"A": [], "B": []}
    out = []
    for e in range(epochs):
        step = {}
        for name in state:
            rows, diffs = [], []
            for _ in range(int(rng.integers(0, 7))):
                rows.append((int(rng.integers(6)), int(rng.integers(6))))
                diffs.append(int(rng.choice([1, 1, 2])))
            if e >= epochs // 3:
                live = sorted(r for r, c in state[name].items() if c > 0)
                for _ in range(int(rng.integers(0, 4))):
                    if live and rng.random() < 0.85:
                        r = live[int(rng.integers(len(live)))]
                        rows.append(r)
                        diffs.append(-state[name][r])
                        retracted[name].append(r)
                    else:
                        rows.append((int(rng.integers(6)), int(rng.integers(6))))
                        diffs.append(-1)
            if e >= 2 * epochs // 3 and retracted[name]:
                for r in retracted[name][:3]:
                    rows.append(r)
                    diffs.append(1)
                del retracted[name][:3]
            for r, dd in zip(rows, diffs):
                state[name][r] += dd
            step[name] = (rows, diffs)
        out.append(step)
    return out


def _recursive_program(rng):
    """A random program with a loop in it (whose unbounded bodies end in a distinct, as Datalog's do)."""
    while True:
        prog = random_program(rng, depth=3)
        if "iterate" in repr(prog):
            return prog


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", range(60))
def test_programs_through_insertions_retractions_and_reinsertions(workers, seed):
    """Random programs with loops, read at every epoch against the reference, over a stream that starts
    with insertions only (where the short cut applies) and then retracts and re-inserts rows (where it
    must stop: an output row left by a retracted key no longer means the key is present)."""
    rng = np.random.default_rng(4000 + seed)
    prog = _recursive_program(rng)
    stream = _stream(rng, 12)
    state = {"A": Counter(), "B": Counter()}
    with kp.Engine(workers=workers) as eng:
        sessions = {n: eng.input(n, COLS) for n in state}
        with eng.dataflow("p") as df:
            view = build(prog, df).view("out")
        for e, step in enumerate(stream):
            for name, (rows, diffs) in step.items():
                if rows:
                    sessions[name].update(rows, diffs)
                for r, dd in zip(rows, diffs):
                    state[name][r] += dd
            for s in sessions.values():
                s.advance_to(e + 1)
            eng.wait(view)
            assert view_counter(view) == evaluate(prog, state), (prog, e)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_reachability_after_a_retraction_and_reinsertion(workers):
    """Reach through edges inserted over several epochs, one removed (every node behind it unreached)
    and inserted again: the nodes come back, though their output rows from before the removal were
    what an insert-only input would have settled them by."""
    chain = [(i, i + 1) for i in range(12)]
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("edge", ["src", "dst"])
        r_in = eng.input("root", ["node"], rows=[(0,)])
        prog = eng.datalog("reach(y) :- root(y).\nreach(y) :- reach(x), edge(x, y).\n", name="r")
        view = prog["reach"]

        def reached():
            e_in.flush()
            r_in.flush()  # (the program's epoch advances with both its inputs)
            eng.wait(view)
            return {int(r[0]) for r in view.to_pandas().itertuples(index=False)}

        for k in range(0, 12, 4):  # insertions only, four edges an epoch
            e_in.insert(chain[k:k + 4])
            assert reached() == set(range(k + 5))
        e_in.remove([(5, 6)])
        assert reached() == set(range(6))
        e_in.insert([(5, 6), (3, 9)])
        assert reached() == set(range(13))
        e_in.remove([(5, 6)])
        assert reached() == set(range(6)) | set(range(9, 13))


def f_next(b, b_right):
    return {"a": b_right, "b": b}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pending_corrections_of_settled_keys_still_run(workers):
    """Node 9 reached at round 3 in one epoch and at round 1 in the next has a correction due at (next
    epoch, round 3), where the two derivations meet (its multiplicity there would be 2); a third
    derivation arriving at that very time must not settle the node before the correction runs. Read
    straight from the loop, a node's multiplicity is 1."""
    with kp.Engine(workers=workers) as eng:
        e_in = eng.input("E", COLS, rows=[(0, 1), (1, 2), (2, 9), (9, 10)])
        r_in = eng.input("R", COLS, rows=[(0, 0)])
        with eng.dataflow("reach") as df:
            edges, roots = df.input("E"), df.input("R")
            view = roots.iterate(lambda v: v.join(edges, on="a").map(f_next).concat(roots).distinct()).view("out")

        def reached():
            e_in.flush()
            r_in.flush()
            eng.wait(view)
            return view_counter(view)

        assert reached() == Counter({(n, 0): 1 for n in (0, 1, 2, 9, 10)})
        e_in.insert([(0, 9), (0, 3), (3, 4), (4, 9)])  # 9 at round 1, and again at round 3
        assert reached() == Counter({(n, 0): 1 for n in (0, 1, 2, 3, 4, 9, 10)})
        e_in.insert([(10, 11), (0, 5), (5, 11)])
        assert reached() == Counter({(n, 0): 1 for n in (0, 1, 2, 3, 4, 5, 9, 10, 11)})
