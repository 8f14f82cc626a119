"""A reduce handed many distinct times at once: a backlog of epochs for one key (the scheduler held while
they queue, so that they reach the reduce as one batch), and loops whose reduces see many (epoch, round)
times. The results must equal the reference at every epoch, and the work the reduce kernels count must
grow linearly with the times and updates, not with their product (which it did: a backlog of 2000 epochs
for one key took minutes)."""
import threading
from collections import Counter

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine import faults
from kpgnb.engine.kernels import reduce as rk
from kpgnb.engine.operators.reduce import ReduceOp

from reference import COLS, build, evaluate

# -- helpers --------------------------------------------------------------------------------------


def reduce_ops(view) -> list:
    """The reduce operators upstream of a view."""
    seen, stack, out = set(), [view.op], []
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if isinstance(op, ReduceOp):
            out.append(op)
        stack.extend(op.inputs)
    return out


def work(view) -> Counter:
    total = Counter()
    for op in reduce_ops(view):
        total.update(op.work_done())
    return total


class held_scheduler:
    """Hold the scheduler (before it serves its commands) until the block ends, so that every epoch
    sealed meanwhile reaches the dataflows as one batch."""

    def __enter__(self):
        self.go = threading.Event()
        self.ctx = faults.armed("scheduler", times=1, action=lambda: self.go.wait(60))
        self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self.go.set()
        self.ctx.__exit__(*exc)
        return False


def view_counter(view, at=None) -> Counter:
    cols = view.columns(at=at, diffs=True)
    return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def backlog_stream(seed, epochs, keys=1, width=40):
    """Per epoch, (rows, diffs): a few insertions, mostly into key a=0, and retractions of rows present
    (and now and then of one that is not, so multiplicities go negative)."""
    rng = np.random.default_rng(seed)
    state = Counter()
    steps = []
    for _ in range(epochs):
        rows, diffs = [], []
        for _ in range(int(rng.integers(1, 5))):
            rows.append((int(rng.integers(keys)), int(rng.integers(width))))
            diffs.append(int(rng.choice([1, 1, 2])))
        live = sorted(r for r, m in state.items() if m > 0)
        for _ in range(int(rng.integers(0, 3))):
            if live and rng.random() < 0.9:
                rows.append(live[int(rng.integers(len(live)))])
            else:
                rows.append((int(rng.integers(keys)), int(rng.integers(width))))
            diffs.append(-1)
        for r, d in zip(rows, diffs):
            state[r] += d
        steps.append((rows, diffs))
    return steps


def run_backlog(progs: dict, seed: int, workers: int, epochs: int, keys: int = 1, width: int = 40):
    """Install ``progs`` (name -> reference program over input A), then seal ``epochs`` epochs while the
    scheduler is held; every view must equal the reference at every epoch. Returns the views."""
    steps = backlog_stream(seed, epochs, keys, width)
    state = {"A": Counter()}
    expected = {0: {n: evaluate(p, state) for n, p in progs.items()}}
    with kp.Engine(workers=workers) as eng:
        a = eng.input("A", COLS)
        a.advance_to(1)
        with eng.dataflow("p") as df:
            views = {n: build(p, df).view(n, history=epochs + 3) for n, p in progs.items()}
        for v in views.values():
            eng.wait(v)
        with held_scheduler():
            for e, (rows, diffs) in enumerate(steps, start=1):
                a.update(rows, diffs)
                a.advance_to(e + 1)
                for r, d in zip(rows, diffs):
                    state["A"][r] += d
                expected[e] = {n: evaluate(p, state) for n, p in progs.items()}
        for v in views.values():
            eng.wait(v, timeout=120)
        for e, want in expected.items():
            for n, v in views.items():
                assert view_counter(v, at=e) == want[n], (n, "at epoch", e)
        return {n: work(v) for n, v in views.items()}


REDUCTIONS = {
    "count": ("count", ("input", "A")),
    "sum": ("sum", ("input", "A")),
    "min": ("min", ("input", "A")),
    "max": ("max", ("input", "A")),
    "argmin": ("argmin", ("input", "A")),
    "argmax": ("argmax", ("input", "A")),
    "topk": ("topk", ("input", "A"), 3),
    "distinct": ("distinct", ("input", "A")),
    "threshold": ("threshold", ("input", "A")),
    "reduce": ("reduce", ("input", "A")),
}


# -- the engine: a backlog of epochs for one key ----------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_backlog_of_epochs_for_one_key_matches_the_reference(workers):
    run_backlog(REDUCTIONS, seed=workers, workers=workers, epochs=60)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_backlog_of_epochs_for_two_keys_matches_the_reference(workers):
    run_backlog({n: REDUCTIONS[n] for n in ("count", "min", "topk", "reduce")}, seed=10 + workers,
                workers=workers, epochs=40, keys=2, width=12)


@pytest.mark.parametrize("workers", [1, 2])
def test_backlog_work_grows_linearly(workers):
    """A count over one key, fed a backlog of E epochs as one batch: the work the reduce counts is
    linear in E (it was cubic: the closure of E seed times against E history times, each insertion a
    scan of the times found so far, then one scan of the history per time)."""
    epochs = 400
    got = run_backlog({"count": REDUCTIONS["count"]}, seed=5, workers=workers, epochs=epochs)["count"]
    # the batch holds at most 6 updates per epoch; each time and update is visited a few times
    assert got["times"] <= 20 * epochs, got
    assert got["diff"] <= 20 * epochs, got
    assert got["times_general"] == 0 and got["diff_general"] == 0, got


# -- loops: reduces over many (epoch, round) times -------------------------------------------------

LOOPS = {
    # rows climb b -> b+1 (mod 6) round by round: distinct's keys see times (epoch, round) for many epochs
    "climb": ("iterate", ("input", "A"), ("distinct", ("concat", ("input", "A"), ("flat", ("var", 0)))), None),
    # a count and a min inside a loop over one key, for a bounded number of rounds
    "count": ("iterate", ("input", "A"),
              ("distinct", ("concat", ("input", "A"), ("flat", ("count", ("var", 0))))), 6),
    "min": ("iterate", ("input", "A"),
            ("distinct", ("concat", ("input", "A"), ("flat", ("min", ("mix", ("var", 0)))))), 6),
    "nested": ("iterate", ("input", "A"),
               ("distinct", ("concat", ("var", 0),
                             ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0), ("flat", ("var", 0)))),
                              3))), 4),
}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_backlog_into_loops_matches_the_reference(workers):
    w = run_backlog(LOOPS, seed=20 + workers, workers=workers, epochs=25, keys=2, width=6)
    # the backlog reaches the loops' reduces as times of many epochs and rounds at once, which are not
    # totally ordered: the general route is exercised too
    assert sum(x["times_general"] for x in w.values()) > 0, w


# -- the kernels, against a from-scratch definition -------------------------------------------------

def _closure(seeds, hist):
    c = set(seeds)
    frontier = list(c)
    while frontier:
        nxt = []
        for t in frontier:
            for h in hist:
                u = tuple(max(x, y) for x, y in zip(t, h))
                if u not in c:
                    c.add(u)
                    nxt.append(u)
        frontier = nxt
    return c


def _leq(a, b):
    return all(x <= y for x, y in zip(a, b))


def _random_key(rng, d, span):
    R, O, S = (int(rng.integers(0, n)) for n in (14, 6, 5))
    ins = [(int(rng.integers(0, 4)), tuple(int(x) for x in rng.integers(0, span, d)), int(rng.choice([-1, 1, 2])))
           for _ in range(R)]
    outs = [(int(rng.integers(0, 3)), tuple(int(x) for x in rng.integers(0, span, d)), int(rng.choice([-1, 1])))
            for _ in range(O)]
    seeds = [tuple(int(x) for x in rng.integers(0, span, d)) for _ in range(S)]
    return ins, outs, seeds


def _arrays(keys, d):
    def mat(rows, w):
        return np.ascontiguousarray(np.array(rows, np.int64).reshape(-1, w))
    ioff = np.cumsum([0] + [len(k[0]) for k in keys]).astype(np.int64)
    ooff = np.cumsum([0] + [len(k[1]) for k in keys]).astype(np.int64)
    soff = np.cumsum([0] + [len(k[2]) for k in keys]).astype(np.int64)
    ins = [r for k in keys for r in k[0]]
    outs = [r for k in keys for r in k[1]]
    ivals = np.ascontiguousarray(np.array([r[0] for r in ins], np.int64).reshape(1, -1))
    itimes = mat([r[1] for r in ins], d)
    idiffs = np.array([r[2] for r in ins], np.int64)
    ovals = np.ascontiguousarray(np.array([r[0] for r in outs], np.int64).reshape(1, -1))
    otimes = mat([r[1] for r in outs], d)
    odiffs = np.array([r[2] for r in outs], np.int64)
    stimes = mat([s for k in keys for s in k[2]], d)
    return ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes


LISTINGS = {rk.LIST_ALL: rk.DISTINCT, rk.LIST_FIRST: rk.MIN, rk.LIST_LAST: rk.MAX, rk.LIST_TOTAL: rk.COUNT}


def _desired(listing, acc: Counter) -> Counter:
    pos = sorted(v for v, m in acc.items() if m > 0)
    if listing == rk.LIST_ALL:
        return Counter({v: 1 for v in pos})
    if listing == rk.LIST_TOTAL:
        total = sum(acc.values())
        return Counter({total: 1}) if total else Counter()
    if not pos:
        return Counter()
    return Counter({pos[0] if listing == rk.LIST_FIRST else pos[-1]: 1})


@pytest.mark.parametrize("d", [1, 2, 3])
def test_kernels_match_a_from_scratch_definition(d):
    """Phases 1 to 3 on random keys (input, output history and seed times of depth d) against the
    definition: the ready closure times, each one's accumulated input, and corrections that make the
    output accumulate to f(input) at every ready time."""
    rng = np.random.default_rng(d)
    routes = Counter()
    for trial in range(150):
        span = int(rng.integers(2, 6))
        keys = [_random_key(rng, d, span) for _ in range(int(rng.integers(1, 4)))]
        upper = np.ascontiguousarray(np.array([rng.integers(0, span + 1, d) for _ in range(int(rng.integers(0, 3)))],
                                              np.int64).reshape(-1, d))
        ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes = _arrays(keys, d)
        listing = int(rng.integers(0, 4))
        kin = np.zeros((0, len(idiffs)), np.int64) if listing == rk.LIST_TOTAL else ivals
        g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, w1 = rk.reduce_times(
            ioff, kin, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
        routes["p1_general"] += w1[1]

        def ready(t):
            return not any(_leq(tuple(f), t) for f in upper)
        got_groups, want_groups, got_future, want_future = {}, {}, set(), set()
        for p, (ins, outs, seeds) in enumerate(keys):
            if not seeds:
                continue
            for t in _closure(seeds, [r[1] for r in ins] + [r[1] for r in outs]):
                if ready(t):
                    acc = Counter()
                    for v, ti, m in ins:
                        if _leq(ti, t):
                            acc[v] += m
                    want_groups[(p, t)] = Counter({v: m for v, m in acc.items() if m})
                else:
                    want_future.add((p, t))
        for g in range(len(g_key)):
            rows = range(g_off[g], g_off[g + 1])
            if listing == rk.LIST_TOTAL:
                got_groups[(int(g_key[g]), tuple(g_time[g]))] = Counter({"total": int(acc_cnt[a]) for a in rows})
            else:
                got_groups[(int(g_key[g]), tuple(g_time[g]))] = Counter({int(ivals[0, acc_row[a]]): int(acc_cnt[a])
                                                                        for a in rows})
        got_future = {(int(k), tuple(t)) for k, t in zip(f_key, f_time)}
        assert got_future == want_future, trial
        assert set(got_groups) == set(want_groups), trial
        for k, acc in want_groups.items():
            if listing == rk.LIST_TOTAL:
                want = Counter({"total": sum(acc.values())}) if sum(acc.values()) else Counter()
            elif listing == rk.LIST_ALL:
                want = acc
            else:
                want = Counter({v: acc[v] for v in _desired(listing, acc)})
            assert got_groups[k] == want, (trial, k)
        # each key's groups in lexicographic time order
        order = [(int(k), tuple(t)) for k, t in zip(g_key, g_time)]
        assert order == sorted(order), trial
        # phases 2 and 3
        if not len(g_key):
            continue
        op = LISTINGS[listing]
        iv = np.zeros((1, max(len(idiffs), 1)), np.int64) if listing == rk.LIST_TOTAL else ivals
        out = np.zeros((1, max(len(acc_row), 1)), np.int64)
        des_off, des_cnt, n = rk.reduce_apply(op, g_off, acc_row, acc_cnt, iv, iv.view(np.float64), iv, rk.MODE_INT,
                                              0, 0, False, out, out.view(np.float64))
        des_vals = np.ascontiguousarray(out[:, :n])
        c_key, c_vals, c_time, c_diff, w3 = rk.reduce_diff(g_key, g_time, des_off, des_vals, des_cnt,
                                                           ooff, ovals, otimes, odiffs)
        routes["p3_general"] += w3[1]
        for (p, t), acc in want_groups.items():
            have = Counter()
            for v, ti, m in keys[p][1]:
                if _leq(ti, t):
                    have[v] += m
            for i in range(len(c_key)):
                if c_key[i] == p and _leq(tuple(c_time[i]), t):
                    have[int(c_vals[0, i])] += int(c_diff[i])
            have = Counter({v: m for v, m in have.items() if m})
            assert have == _desired(listing, acc), (trial, p, t)
    if d > 1:
        assert routes["p1_general"] > 0 and routes["p3_general"] > 0, routes


@pytest.mark.parametrize("listing", [rk.LIST_TOTAL, rk.LIST_ALL, rk.LIST_FIRST])
@pytest.mark.parametrize("d", [1, 2])
def test_phase_work_is_linear_in_times(listing, d):
    """One key, T seed times over a history of T earlier and T new times (at depth 2: rounds of one
    epoch, a chain too): phase 1's and phase 3's work stay within a constant factor of T."""
    for T in (100, 1000):
        lead = (5,) * (d - 1)
        old = [(int(i % 7), lead + (i,), 1) for i in range(T)]
        new = [(int(i % 5), lead + (T + i,), 1 if i % 3 else -1) for i in range(T)]
        outs = [(0, lead + (i,), 1) for i in range(T)]
        seeds = [lead + (T + i,) for i in range(T)]
        ioff, ivals, itimes, idiffs, ooff, ovals, otimes, odiffs, soff, stimes = _arrays([(old + new, outs, seeds)], d)
        upper = np.array([lead + (2 * T,)], np.int64)
        kin = np.zeros((0, len(idiffs)), np.int64) if listing == rk.LIST_TOTAL else ivals
        g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, w1 = rk.reduce_times(
            ioff, kin, itimes, idiffs, ooff, otimes, soff, stimes, upper, listing)
        assert len(g_key) == T and len(f_key) == 0
        assert w1[1] == 0 and w1[0] <= 20 * T, (T, w1)
        des_off = np.arange(len(g_key) + 1, dtype=np.int64)
        des_vals = np.ascontiguousarray(np.arange(len(g_key), dtype=np.int64).reshape(1, -1) % 3)
        des_cnt = np.ones(len(g_key), np.int64)
        *_, w3 = rk.reduce_diff(g_key, g_time, des_off, des_vals, des_cnt, ooff, ovals, otimes, odiffs)
        assert w3[1] == 0 and w3[0] <= 20 * T, (T, w3)


# -- the live symptom: a writer sealing epochs every few ms, dataflows installed meanwhile ---------------

def test_dataflows_installed_while_a_writer_runs_keep_up():
    """A dataflow whose every step takes longer than the writer's epochs come (its map sleeps 20 ms per
    batch; an epoch is sealed every 2 ms) always has work. Dataflows installed after it must still get
    turns while the writer runs: the scheduler used to give the first dataflow the first turn after every
    command, so later ones froze until the writer stopped."""
    import time

    def slow(k, g):
        time.sleep(0.02)
        return {"k": k, "g": g}

    with kp.Engine(workers=1) as eng:
        st = eng.input("st", ["k", "g"])
        st.advance_to(1)
        with eng.dataflow("busy") as df:
            busy = df.input("st").map(slow).count(by="g").view("busy")
        eng.wait(busy)
        stop = threading.Event()

        def writer():
            e = 1
            while not stop.is_set():
                st.insert([(e, e % 3)])
                e += 1
                st.advance_to(e)
                time.sleep(0.002)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        try:
            time.sleep(0.3)
            with eng.dataflow("late") as df:
                late = df.input("st").count(by=[]).view("late")
            target = st.epoch + 20
            deadline = time.monotonic() + 60
            while (late.epoch or 0) < target and time.monotonic() < deadline and t.is_alive():
                time.sleep(0.05)
            reached = late.epoch or 0
            assert reached >= target, f"the late dataflow is at epoch {reached} while the input is at {st.epoch}"
        finally:
            stop.set()
            t.join()
        eng.wait(late, timeout=60)
        eng.wait(busy, timeout=60)
