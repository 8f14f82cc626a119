"""Failures, cancellation and interrupts in the control plane.

Faults are injected at the named points of ``kpgnb.engine.faults`` around real workloads (several epochs
of thousands of rows, so spines really merge), and the outcome is checked precisely: which object the
error is attached to (an input, a dataflow, the engine), what every reader sees, and that nothing is lost
or duplicated. Where several places hit the same point, the test either arms it while only one of them
can run (the engine is quiet and one input advances: an input's seal runs before any dataflow), or arms
it with an action that raises only for the object under test (found from the fault point's caller frame).

Every wait is bounded, so a hang fails the test instead of stalling the suite.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine import faults
from kpgnb.engine.faults import InjectedFault

T = 30          # bound on every wait that is expected to succeed or raise
LIVENESS = 10   # drop/cancel/interrupt must take effect within this many seconds (generous on purpose)
WORKERS = (1, 2, 3)


# -- helpers -----------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_faults_left():
    faults.disarm()
    yield
    faults.disarm()


@pytest.fixture(params=WORKERS, ids=lambda w: f"W{w}")
def eng(request):
    e = kp.Engine(workers=request.param, effort="eager")
    yield e
    faults.disarm()
    e.close()


def caused_by(exc: BaseException, cls) -> bool:
    """Whether ``cls`` is somewhere on the explicit cause chain of ``exc``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, cls):
            return True
        seen.add(id(exc))
        exc = exc.__cause__
    return False


class Feed:
    """Rows (k, v) with unique v inserted into one input, and what it must contain: rows of a call that
    raised are not counted (a call that raises has no effect)."""

    def __init__(self, session, seed: int, keys: int = 20_000):
        self.s = session
        self.rng = np.random.default_rng(seed)
        self.keys = keys
        self.next_v = 0
        self.ks: list = []
        self.vs: list = []

    def insert(self, n: int):
        k = self.rng.integers(0, self.keys, n)
        v = np.arange(self.next_v, self.next_v + n)
        self.s.insert({"k": k, "v": v})
        self.next_v += n
        self.ks.append(k)
        self.vs.append(v)

    def advance(self):
        self.s.advance_to(self.s.epoch + 1)

    def expected(self):
        k = np.concatenate(self.ks) if self.ks else np.zeros(0, np.int64)
        v = np.concatenate(self.vs) if self.vs else np.zeros(0, np.int64)
        order = np.argsort(v)
        return k[order], v[order]


def check_raw(view, feed: Feed, expected=None):
    """The view holds exactly the rows inserted (or ``expected``): none lost, none duplicated."""
    cols = view.columns()
    order = np.argsort(cols["v"], kind="stable")
    k, v = feed.expected() if expected is None else expected
    assert len(cols["v"]) == len(v), f"{view.name}: {len(cols['v'])} rows, expected {len(v)}"
    np.testing.assert_array_equal(cols["v"][order], v)
    np.testing.assert_array_equal(cols["k"][order], k)


def check_counts(view, feed: Feed):
    cols = view.columns()
    order = np.argsort(cols["k"])
    k, _ = feed.expected()
    keys, counts = np.unique(k, return_counts=True)
    np.testing.assert_array_equal(cols["k"][order], keys)
    np.testing.assert_array_equal(cols["count"][order], counts)


def install_reader(eng, name: str, inp: str, export: str | None = None):
    """A dataflow over input ``inp``: a view of its rows (no arrange) and a count by k (arrange + reduce,
    optionally exported)."""
    with eng.dataflow(name) as df:
        x = df.input(inp)
        raw = x.view("raw")
        c = x.count(by="k")
        if export:
            c = c.export(export)
        cnt = c.view("cnt")
    return df, raw, cnt


class Two:
    """Inputs A and B; dataflow "da" reads A (and exports its counts as "a_counts"), "db" reads B, and
    "dc" imports "a_counts"."""

    def __init__(self, eng, epochs: int = 3, rows: int = 3000):
        self.eng = eng
        self.A = Feed(eng.input("A", ["k", "v"]), 1)
        self.B = Feed(eng.input("B", ["k", "v"]), 2)
        for _ in range(epochs):
            self.A.insert(rows)
            self.B.insert(rows)
            self.A.advance()
            self.B.advance()
        self.da, self.va_raw, self.va_cnt = install_reader(eng, "da", "A", export="a_counts")
        self.db, self.vb_raw, self.vb_cnt = install_reader(eng, "db", "B")
        with eng.dataflow("dc") as df:
            self.vc = df.use("a_counts").view("imported")
        self.dc = df
        self.wait_all()
        self.check_all()
        eng.wait(timeout=T)  # quiet: no dataflow has work left

    def wait_all(self):
        for v in (self.va_raw, self.va_cnt, self.vb_raw, self.vb_cnt, self.vc):
            self.eng.wait(v, timeout=T)

    def check_all(self):
        check_raw(self.va_raw, self.A)
        check_counts(self.va_cnt, self.A)
        check_counts(self.vc, self.A)
        check_raw(self.vb_raw, self.B)
        check_counts(self.vb_cnt, self.B)

    def check_b(self):
        self.eng.wait(self.vb_raw, timeout=T)
        self.eng.wait(self.vb_cnt, timeout=T)
        check_raw(self.vb_raw, self.B)
        check_counts(self.vb_cnt, self.B)


def fail_when(pred, counter: list | None = None):
    """A fault action raising InjectedFault only when the object whose method hit the point (the
    caller's ``self``: a Batcher for seal/exchange, a Spine for merge) satisfies ``pred``."""
    def action():
        owner = sys._getframe(2).f_locals.get("self")
        if pred(owner):
            if counter is not None:
                counter.append(owner)
            raise InjectedFault(f"injected fault in {type(owner).__name__}")
    return action


def input_batcher(feed: Feed):
    b = feed.s._batcher
    return lambda owner: owner is b


def input_spines(feed: Feed):
    ids = {id(s) for s in feed.s.trace.spines}
    return lambda owner: id(owner) in ids


def arrange_batchers(builder):
    ids = {id(op.batcher) for op in builder.graph.ops if hasattr(op, "batcher")}
    assert ids, "the dataflow has no arrange operator"
    return lambda owner: id(owner) in ids


def dataflow_spines(eng, name: str):
    info = eng.snapshot().dataflows[name]
    ids = {id(s) for _, ref in info.traces if ref() is not None for s in ref().spines}
    assert ids, f"dataflow {name!r} maintains no trace"
    return lambda owner: id(owner) in ids


def until(cond, timeout: float = LIVENESS, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)


def recover_a(eng, s, n: int):
    """After a seal fault on A was disarmed: the next retry (every RETRY_S while failing) succeeds, until
    then waits still report the failure; then A takes ``n`` more rows in a new epoch."""
    until(lambda: eng.snapshot().inputs["A"].failure is None, what="the retried seal succeeding")
    eng.wait(s.va_raw, timeout=T)
    insert_after_report(s.A, n)
    s.A.advance()


def insert_after_report(feed: Feed, n: int):
    """After a persistent input fault was cleared, the input may still report its last failure once:
    the next call raises it (chained to the fault), the call after succeeds."""
    try:
        feed.insert(n)
    except kp.EngineError as e:
        assert caused_by(e, InjectedFault)
        feed.insert(n)


# -- 1. fault injection: inputs -------------------------------------------------------------------------

@pytest.mark.parametrize("point", ["seal", "exchange"])
def test_input_fault_once_is_retried_and_reported_once(eng, point):
    s = Two(eng)
    with faults.armed(point, times=1):
        s.A.insert(4000)
        s.A.advance()
        eng.wait(s.va_raw, timeout=T)  # the automatic retry seals the epoch
        assert faults.hits(point) == 1
    assert eng.dataflows() == {"da": "running", "db": "running", "dc": "running"}
    assert eng.snapshot().inputs["A"].failure is None
    with pytest.raises(kp.EngineError) as ei:
        s.A.insert(10)              # the next call reports the failure, once
    assert caused_by(ei.value, InjectedFault)
    s.A.insert(500)                 # and the call after works
    s.A.advance()
    s.B.insert(500)
    s.B.advance()
    s.B.insert(1)                   # B never failed: its calls never raise
    s.B.advance()
    s.wait_all()
    s.check_all()


@pytest.mark.parametrize("point", ["seal", "exchange"])
def test_input_fault_persisting_then_cleared(eng, point):
    s = Two(eng)
    faults.arm(point, times=None)
    try:
        before = s.A.expected()
        s.A.insert(4000)
        s.A.advance()
        with pytest.raises(kp.EngineError) as ei:
            eng.wait(s.va_raw, timeout=T)
        assert caused_by(ei.value, InjectedFault)
        with pytest.raises(kp.EngineError):
            eng.wait(s.va_cnt, timeout=T)
        with pytest.raises(kp.EngineError):
            eng.wait(timeout=T)
        with pytest.raises(kp.EngineError) as ei:
            s.A.insert(10)          # the input's own calls raise while it cannot seal
        assert caused_by(ei.value, InjectedFault)
        assert faults.hits(point) >= 1
        # readers still see every epoch sealed before the fault, complete
        check_raw(s.va_raw, s.A, before)
        assert eng.dataflows() == {"da": "running", "db": "running", "dc": "running"}
    finally:
        faults.disarm(point)
    recover_a(eng, s, 700)
    s.B.insert(700)
    s.B.advance()
    s.wait_all()
    s.check_all()
    eng.wait(timeout=T)


@pytest.mark.parametrize("point", ["seal", "exchange"])
def test_input_fault_is_confined_to_its_input(eng, point):
    """Only A's own batcher fails (every time): B and the dataflow reading it carry on meanwhile."""
    s = Two(eng)
    hit: list = []
    faults.arm(point, times=None, action=fail_when(input_batcher(s.A), hit))
    try:
        s.A.insert(3000)
        s.A.advance()
        s.B.insert(3000)
        s.B.advance()
        s.check_b()
        with pytest.raises(kp.EngineError) as ei:
            eng.wait(s.va_cnt, timeout=T)
        assert caused_by(ei.value, InjectedFault)
        assert hit
        s.B.insert(100)
        s.B.advance()
        s.check_b()
        assert eng.dataflows() == {"da": "running", "db": "running", "dc": "running"}
    finally:
        faults.disarm(point)
    recover_a(eng, s, 100)
    s.wait_all()
    s.check_all()


@pytest.mark.parametrize("times", [1, None], ids=["once", "always"])
def test_merge_fault_on_an_input_trace(eng, times):
    """A merge of the input's own trace fails: the batches are in (readers see every epoch), the input's
    next call reports it, and merging resumes later."""
    s = Two(eng)
    hit: list = []
    pred = input_spines(s.A)
    if times == 1:
        def once(owner):
            return pred(owner) and not hit
        action = fail_when(once, hit)
    else:
        action = fail_when(pred, hit)
    with faults.armed("merge", times=None, action=action):
        for _ in range(8):
            s.A.insert(3000)
            s.A.advance()
            eng.wait(s.va_raw, timeout=T)   # sealed epochs are visible although a merge failed
            if hit:
                break
        assert hit, "no merge of the input's trace happened"
        check_raw(s.va_raw, s.A)
        with pytest.raises(kp.EngineError) as ei:
            s.A.insert(10)                  # the input's next call reports the failed merge, once
        assert caused_by(ei.value, InjectedFault)
        s.A.insert(3000)
        s.A.advance()
        eng.wait(s.va_cnt, timeout=T)
        for _ in range(3):                  # more epochs while the fault is (or is no longer) armed
            insert_after_report(s.A, 3000)
            s.A.advance()
            eng.wait(s.va_cnt, timeout=T)
        check_raw(s.va_raw, s.A)
        check_counts(s.va_cnt, s.A)
    for _ in range(3):
        insert_after_report(s.A, 3000)
        s.A.advance()
    s.B.insert(10)
    s.B.advance()
    s.wait_all()
    s.check_all()
    assert eng.dataflows() == {"da": "running", "db": "running", "dc": "running"}


# -- 1. fault injection: inside a dataflow -----------------------------------------------------------------

def check_dataflow_failed(eng, s: Two):
    """da failed with the injected fault; dc (importing its export) failed too; db is fine and keeps
    producing correct results for later epochs; da can be dropped and installed again."""
    until(lambda: eng.dataflows().get("da") == "failed", what="da failing")
    for v in (s.va_raw, s.va_cnt):
        with pytest.raises(kp.DataflowError) as ei:
            eng.wait(v, timeout=T)
        assert caused_by(ei.value, InjectedFault), repr(ei.value)
    with pytest.raises(kp.DataflowError):
        s.va_cnt.columns()
    # the dataflow importing da's export fails instead of hanging
    with pytest.raises(kp.DataflowError) as ei:
        eng.wait(s.vc, timeout=T)
    assert caused_by(ei.value, InjectedFault), repr(ei.value)
    assert eng.dataflows() == {"da": "failed", "db": "running", "dc": "failed"}
    assert "a_counts" not in eng.catalog()
    # the other dataflow keeps producing
    for _ in range(2):
        s.B.insert(2000)
        s.B.advance()
        s.check_b()
    # and the failed one is replaced
    eng.drop("da")
    eng.drop("dc")
    assert eng.dataflows() == {"db": "running"}
    s.A.insert(1000)
    s.A.advance()
    _, raw, cnt = install_reader(eng, "da", "A", export="a_counts")
    with eng.dataflow("dc") as df:
        vc = df.use("a_counts").view("imported")
    for v in (raw, cnt, vc):
        eng.wait(v, timeout=T)
    check_raw(raw, s.A)
    check_counts(cnt, s.A)
    check_counts(vc, s.A)
    s.check_b()
    assert eng.dataflows() == {"da": "running", "db": "running", "dc": "running"}


@pytest.mark.parametrize("times", [1, None], ids=["once", "always"])
def test_operator_step_fault_fails_its_dataflow_only(eng, times):
    s = Two(eng)
    follower = s.va_cnt.follow(timeout=T)
    first = next(follower)          # the contents: one row per distinct k
    assert len(first) == len(np.unique(s.A.expected()[0]))
    with faults.armed("operator_step", times=times):
        s.A.insert(3000)       # only da has work: its first operator step is the first to run
        s.A.advance()
        until(lambda: eng.dataflows().get("da") == "failed", what="da failing")
        assert faults.hits("operator_step") >= 1
        if times == 1:
            assert faults.hits("operator_step") == 1
    # a follower of the failed view ends with the failure instead of waiting forever
    with pytest.raises(kp.DataflowError):
        for _ in range(100):
            next(follower)
    # nothing was lost on the input side: a new dataflow reading A sees every row
    check_dataflow_failed(eng, s)


@pytest.mark.parametrize("point", ["seal", "exchange", "merge"])
@pytest.mark.parametrize("times", [1, None], ids=["once", "always"])
def test_fault_in_a_dataflows_arrangement_fails_that_dataflow(eng, point, times):
    """seal/exchange in da's arrange operator, or a merge of one of da's traces: da fails, the input A
    is untouched (its calls do not raise), every other dataflow carries on."""
    s = Two(eng)
    hit: list = []
    pred = arrange_batchers(s.da) if point != "merge" else dataflow_spines(eng, "da")
    if times == 1:
        def once(owner):
            return pred(owner) and not hit
        action = fail_when(once, hit)
    else:
        action = fail_when(pred, hit)
    with faults.armed(point, times=None, action=action):
        for _ in range(8):
            s.A.insert(3000)    # epochs of thousands of rows, one at a time: spines merge
            s.A.advance()
            try:
                eng.wait(s.va_cnt, timeout=T)
            except kp.DataflowError:
                break
        assert hit, f"the {point} point was not reached in dataflow da"
        until(lambda: eng.dataflows().get("da") == "failed", what="da failing")
    assert eng.snapshot().inputs["A"].failure is None
    s.A.insert(10)              # the input never failed: its calls do not raise
    s.A.advance()
    check_dataflow_failed(eng, s)


def test_use_of_a_failed_dataflows_export(eng):
    """After da failed, its export is gone: df.use refuses it (SchemaError), and a block that imported it
    before the failure installs nothing and says why: a DataflowError ("a dataflow it reads from
    failed", errors.py), not a ValueError claiming the export "was dropped"."""
    s = Two(eng)
    with pytest.raises(kp.DataflowError):
        with eng.dataflow("late") as df:
            g = df.use("a_counts")
            v = g.view("v")
            with faults.armed("operator_step", times=1):
                s.A.insert(100)
                s.A.advance()
                until(lambda: eng.dataflows().get("da") == "failed", what="da failing")
    assert "late" not in eng.dataflows()
    with pytest.raises(kp.SchemaError):
        with eng.dataflow("later") as df:
            df.use("a_counts")
    del v


@pytest.mark.parametrize("workers", [2, 3])
def test_a_failed_shard_leaves_no_shard_running_in_the_background(workers):
    """A step's shards run on the pool; when one fails, the step raises only once every other shard has
    stopped: spines are the scheduler's, lent to one worker for the length of a step, so nothing may
    still be writing one when the scheduler carries on."""
    from kpgnb.engine.pool import WorkerPool
    pool = WorkerPool(workers)
    finished = []

    def shard(i):
        if i == 0:
            raise InjectedFault("shard 0")
        time.sleep(0.3)
        finished.append(i)
    try:
        with pytest.raises(InjectedFault):
            pool.run(shard, range(workers))
        assert sorted(finished) == list(range(1, workers))
    finally:
        pool.shutdown()


def test_failed_merge_on_one_shard_loses_nothing():
    """W=2, a step large enough to run shards on the pool: shard 0's merge fails while shard 1 merges.
    The input reports it, and every row stays. (On a busy machine the scheduler may fail a merge before
    the loop's next call, which then raises the report and did nothing: it is repeated, as the error
    says, as in test_failing_idle_maintenance_does_not_spin_the_scheduler.)"""
    with kp.Engine(workers=2, effort="eager") as eng:
        A = Feed(eng.input("A", ["k", "v"]), 1)
        A.insert(12_000)
        A.advance()
        with eng.dataflow("d") as df:
            v = df.input("A").view("raw")
        eng.wait(v, timeout=T)
        s0 = A.s.trace.spines[0]

        def action():
            if sys._getframe(2).f_locals.get("self") is s0:
                raise InjectedFault("shard 0 merge")
        def repeating(call):
            for _ in range(50):
                try:
                    return call()
                except kp.EngineError as err:
                    assert caused_by(err, InjectedFault)
            raise AssertionError("the input kept reporting the failed merge")
        with faults.armed("merge", times=None, action=action):
            for _ in range(4):
                repeating(lambda: A.insert(12_000))
                repeating(A.advance)
            eng.wait(v, timeout=T)
        check_raw(v, A)


# -- 1. fault injection: the scheduler --------------------------------------------------------------------

def test_scheduler_fault_is_sticky(eng):
    s = Two(eng)
    with faults.armed("scheduler", times=1):
        s.A.insert(100)
        s.A.advance()       # wakes the scheduler, whose loop fails
        with pytest.raises(kp.EngineError) as ei:
            eng.wait(s.va_raw, timeout=T)
        assert caused_by(ei.value, InjectedFault)
        assert faults.hits("scheduler") == 1
    # every wait raises from now on, whatever it waits for
    s.B.insert(100)
    s.B.advance()
    for target in (s.va_raw, s.va_cnt, s.vb_raw, s.vb_cnt, s.vc, None, 0, 10):
        t0 = time.monotonic()
        with pytest.raises(kp.EngineError) as ei:
            eng.wait(target, timeout=T)
        assert caused_by(ei.value, InjectedFault)
        assert time.monotonic() - t0 < LIVENESS
    assert eng.stats()["error"] is not None


@pytest.mark.parametrize("command", ["drop", "install"])
def test_scheduler_fault_does_not_strand_the_command_that_woke_it(command):
    """The scheduler's loop fails in the step that a command woke it for: that command must still be
    answered (done, or refused with an error), not left queued until some other command happens to wake
    the scheduler, with its caller blocked (engine calls have no timeout)."""
    with kp.Engine(workers=2, effort="eager") as eng:
        _stranded(eng, command)


def _stranded(eng, command, bound: float = 5.0):
    Two(eng)
    out: dict = {}

    def call():
        try:
            if command == "drop":
                eng.drop("db")
            else:
                install_reader(eng, "de", "B")
            out["result"] = "done"
        except BaseException as e:  # noqa: BLE001 - inspected below
            out["result"] = e
    with faults.armed("scheduler", times=1):
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(bound)
        answered = not caller.is_alive()
        assert faults.hits("scheduler") == 1
    if not answered:
        eng.input("_wake", ["a"]).advance_to(1)  # any command frees the stranded one; lets the caller end
        caller.join(T)
    assert answered, f"eng.{command}(...) got no answer within {bound} s after the scheduler failed"
    assert out["result"] == "done" or isinstance(out["result"], kp.KpgnbError), repr(out["result"])
    with pytest.raises(kp.EngineError):
        eng.wait(timeout=T)


# -- 2. cancellation -----------------------------------------------------------------------------------

def long_computation(eng, roots: int = 100):
    """Reachability from ``roots`` sources over a random graph of 200k edges: about a minute of work,
    in many operator steps of up to a few hundred ms."""
    rng = np.random.default_rng(7)
    n, m = 50_000, 200_000
    e = eng.input("edges", ["src", "dst"])
    r = eng.input("roots", ["node"])
    e.insert({"src": rng.integers(0, n, m), "dst": rng.integers(0, n, m)})
    r.insert(list(range(roots)))
    e.advance_to(1)
    r.advance_to(1)
    with eng.dataflow("long") as df:
        edges = df.input("edges")
        start = df.input("roots").map(lambda node: {"root": node, "node": node})
        pairs = start.iterate(lambda p: p.join(edges, left_on="node", right_on="src")
                              .map(lambda root, dst: {"root": root, "node": dst})
                              .concat(start).distinct())
        v = pairs.view("pairs")
    return v


def small(eng, name: str, inp: str):
    with eng.dataflow(name) as df:
        v = df.input(inp).count(by="k").view("cnt")
    return v


def running_behind(eng, v):
    """The long computation is under way and not done."""
    time.sleep(0.5)
    assert eng.dataflows()["long"] == "running"
    assert v.epoch == 0, "the long computation finished too soon to test cancelling it"


@pytest.fixture
def eng2():
    e = kp.Engine(workers=2)
    yield e
    e.close()


def test_drop_during_a_long_computation(eng2):
    eng = eng2
    S = Feed(eng.input("S", ["k", "v"]), 3)
    S.insert(1000)
    S.advance()
    v = long_computation(eng)
    running_behind(eng, v)
    dropper = threading.Thread(target=eng.drop, args=("long",), daemon=True)
    dropper.start()
    dropper.join(LIVENESS)  # a hang bound, not a benchmark: the drop must not wait for the computation
    assert not dropper.is_alive(), "drop waited for the long computation to finish"
    assert "long" not in eng.dataflows()
    assert "long" not in eng.snapshot().retired
    w = small(eng, "small", "S")
    eng.wait(w, timeout=T)
    check_counts(w, S)
    S.insert(10)
    S.advance()
    eng.wait(w, timeout=T)
    check_counts(w, S)
    eng.wait(timeout=T)


def test_cancel_during_a_long_computation(eng2):
    eng = eng2
    S = Feed(eng.input("S", ["k", "v"]), 3)
    S.insert(1000)
    S.advance()
    w = small(eng, "small", "S")
    eng.wait(w, timeout=T)
    v = long_computation(eng)
    running_behind(eng, v)
    t0 = time.monotonic()
    eng.cancel("long")
    until(lambda: eng.dataflows()["long"] == "cancelled", what="cancelling")
    assert time.monotonic() - t0 < LIVENESS
    with pytest.raises(kp.Cancelled):
        eng.wait(v, timeout=T)
    with pytest.raises(kp.Cancelled):
        v.columns()
    S.insert(500)
    S.advance()
    eng.wait(w, timeout=T)
    check_counts(w, S)
    assert eng.dataflows() == {"small": "running", "long": "cancelled"}
    eng.drop("long")
    assert eng.dataflows() == {"small": "running"}
    eng.wait(timeout=T)


def test_long_computation_does_not_starve_a_dataflow_installed_after_it(eng2):
    """While "long" computes, a small dataflow installed after it (over another input) keeps up."""
    eng = eng2
    S = Feed(eng.input("S", ["k", "v"]), 3)
    S.insert(1000)
    S.advance()
    v = long_computation(eng)
    running_behind(eng, v)
    w = small(eng, "small", "S")
    try:
        eng.wait(w, timeout=15)  # (well below the long computation's time: it is not starved)
        check_counts(w, S)
        S.insert(10)
        S.advance()
        eng.wait(w, timeout=15)
        check_counts(w, S)
    finally:
        eng.drop("long")


# -- 3. / 4. Ctrl-C ------------------------------------------------------------------------------------

@contextlib.contextmanager
def sigint_after(delay: float, after: threading.Event | None = None):
    """Deliver SIGINT to the main thread after ``delay`` seconds, and once ``after`` is set (Python raises
    KeyboardInterrupt there), as Ctrl-C in a notebook does."""
    assert threading.current_thread() is threading.main_thread()
    main = threading.main_thread().ident
    fired = threading.Event()

    def fire():
        if after is not None:
            after.wait(T)
        fired.set()
        signal.pthread_kill(main, signal.SIGINT)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
        try:
            timer.join()
            time.sleep(0.05)  # a late interrupt lands here, not in pytest
        except KeyboardInterrupt:
            pass
        signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("target", ["view", "everything", "epoch"])
def test_ctrl_c_in_wait_cancels_what_was_behind(eng2, target):
    eng = eng2
    S = Feed(eng.input("S", ["k", "v"]), 3)
    S.insert(1000)
    S.advance()
    w = small(eng, "small", "S")
    eng.wait(w, timeout=T)
    v = long_computation(eng)
    running_behind(eng, v)
    goal = {"view": v, "everything": None, "epoch": 1}[target]  # long is at epoch 0, small at 1
    with sigint_after(0.3) as fired:
        with pytest.raises(KeyboardInterrupt):
            eng.wait(goal, timeout=T)
    assert fired.is_set()
    until(lambda: eng.dataflows()["long"] == "cancelled", what="the interrupted computation cancelled")
    # the dataflow that was current is not touched
    assert eng.dataflows() == {"small": "running", "long": "cancelled"}
    S.insert(300)
    S.advance()
    eng.wait(w, timeout=T)
    check_counts(w, S)
    with pytest.raises(kp.Cancelled):
        eng.wait(v, timeout=T)
    eng.drop("long")
    eng.wait(timeout=T)


def with_small(eng):
    """An input S with 2,000 rows and a small dataflow on it, caught up."""
    S = Feed(eng.input("S", ["k", "v"]), 3)
    S.insert(2000)
    S.advance()
    w = small(eng, "small", "S")
    eng.wait(w, timeout=T)
    return S, w


def reinstall_and_check(eng, S, w):
    """The interrupted install left nothing: "x" installs again, and both views follow later epochs."""
    x = small(eng, "x", "S")
    S.insert(100)
    S.advance()
    for view in (w, x):
        eng.wait(view, timeout=T)
        check_counts(view, S)


@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"W{w}")
def test_ctrl_c_during_install_while_the_scheduler_is_busy(workers):
    """The install command is still queued (the scheduler is held) when Ctrl-C arrives: it is skipped."""
    with kp.Engine(workers=workers) as eng:
        S, w = with_small(eng)
        release = threading.Event()
        try:
            with faults.armed("scheduler", times=1, action=release.wait):
                with sigint_after(0.3) as fired:
                    with pytest.raises(KeyboardInterrupt):
                        with eng.dataflow("x") as df:
                            df.input("S").count(by="k").view("cnt")
                assert fired.is_set()
                assert faults.hits("scheduler") == 1
        finally:
            release.set()
        eng.wait(timeout=T)
        assert "x" not in eng.dataflows()
        assert eng.dataflows() == {"small": "running"}
        reinstall_and_check(eng, S, w)


@pytest.mark.parametrize("workers", WORKERS, ids=lambda w: f"W{w}")
def test_ctrl_c_during_install_while_it_executes(workers):
    """Ctrl-C arrives while the scheduler is executing the install: it is undone."""
    with kp.Engine(workers=workers) as eng:
        S, w = with_small(eng)
        sched = eng._scheduler
        entered, release = threading.Event(), threading.Event()
        real_install = sched._install

        def held_install(cmd):  # instance attribute: the scheduler looks it up per command
            entered.set()
            release.wait(T)
            return real_install(cmd)
        sched._install = held_install
        try:
            with sigint_after(0.3, after=entered) as fired:  # (while the scheduler executes it)
                with pytest.raises(KeyboardInterrupt):
                    with eng.dataflow("x") as df:
                        df.input("S").count(by="k").export("x_counts").view("cnt")
            assert fired.is_set() and entered.is_set()
        finally:
            release.set()
        eng.wait(timeout=T)
        del sched._install
        assert eng.dataflows() == {"small": "running"}
        assert "x_counts" not in eng.catalog()
        reinstall_and_check(eng, S, w)


# -- 5. error classes --------------------------------------------------------------------------------

def test_every_deliberate_error_is_a_kpgnb_error():
    from kpgnb.engine import errors
    for cls in (kp.SchemaError, kp.DataflowError, kp.CompactedError, kp.EngineError, kp.Cancelled,
                kp.DatalogError):
        assert issubclass(cls, kp.KpgnbError)
        assert getattr(errors, cls.__name__) is cls
    from kpgnb.engine.columns import SchemaError
    assert SchemaError is kp.SchemaError

    raised = {}
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k", "v"])
        try:
            x.insert([(1, 2, 3)])
        except Exception as e:  # noqa: BLE001
            raised["schema"] = e
        x.insert({"k": np.arange(100) % 7, "v": np.arange(100)})
        x.advance_to(1)
        def explode(k, v):
            if len(k):
                raise ZeroDivisionError("boom")
            return {"k": k, "v": v}
        with eng.dataflow("bad") as df:
            bad = df.input("x").map(explode).view("bad")
        with eng.dataflow("ok") as df:
            ok = df.input("x").count(by="k").view("ok")
        try:
            eng.wait(bad, timeout=T)
        except Exception as e:  # noqa: BLE001
            raised["dataflow"] = e
        for epoch in range(2, 6):
            x.advance_to(epoch)
        eng.wait(ok, timeout=T)
        try:
            ok.columns(at=0)
        except Exception as e:  # noqa: BLE001
            raised["compacted"] = e
        with eng.dataflow("slow") as df:
            slow = df.input("x").view("slow")
        eng.cancel("slow")
        until(lambda: eng.dataflows()["slow"] == "cancelled", what="cancelling")
        try:
            eng.wait(slow, timeout=T)
        except Exception as e:  # noqa: BLE001
            raised["cancelled"] = e
        with faults.armed("scheduler", times=1):
            x.advance_to(7)
            try:
                eng.wait(ok, timeout=T)
            except Exception as e:  # noqa: BLE001
                raised["engine"] = e
    expect = {"schema": kp.SchemaError, "dataflow": kp.DataflowError, "compacted": kp.CompactedError,
              "cancelled": kp.Cancelled, "engine": kp.EngineError}
    for what, cls in expect.items():
        assert what in raised, f"nothing raised for {what}"
        assert isinstance(raised[what], cls), f"{what}: {type(raised[what]).__name__}: {raised[what]}"
        assert isinstance(raised[what], kp.KpgnbError)
    assert caused_by(raised["dataflow"], ZeroDivisionError)


@pytest.mark.parametrize("workers", [1, 2])
def test_failing_idle_maintenance_does_not_spin_the_scheduler(workers):
    """Churn leaves an input's trace with tidying to do; while every merge fails, idle maintenance tries
    once and then leaves that trace alone (no busy loop) until new data arrives; the input reports the
    failure once, nothing is lost, and tidying resumes once merges work again."""
    with kp.Engine(workers=workers) as eng:
        x = eng.input("x", ["k"])
        keys = np.random.default_rng(0).permutation(100_000)[:20_000]
        x.insert({"k": keys})
        x.advance_to(1)
        with eng.dataflow("v") as df:
            v = df.input("x").view("xs")
        eng.wait()
        reports = []

        def repeating(call):  # a reported failure means "this call did nothing, repeat it"
            try:
                call()
            except kp.EngineError as err:
                reports.append(err)
                call()
        with faults.armed("merge", times=None):
            for e in range(1, 30):  # a slow loop (a busy machine) may see a failed merge reported already
                repeating(lambda: x.remove({"k": keys[(e - 1) * 600:e * 600]}))
                repeating(lambda: x.advance_to(e + 1))
            time.sleep(0.5)  # every seal done, idle maintenance tried and failed
            rounds = eng.snapshot().rounds
            time.sleep(1.0)
            assert eng.snapshot().rounds - rounds <= 5
        repeating(lambda: x.advance_to(30))  # (a no-op advance) drains what is left to report
        assert reports and all("injected fault at 'merge'" in str(r) for r in reports)
        x.advance_to(30)                     # reported once: nothing is retried while idle, nothing new
        x.advance_to(31)                     # new data: maintenance resumes
        eng.wait(v)
        assert sorted(v.to_pandas()["k"]) == sorted(keys[29 * 600:].tolist())
        until(lambda: eng.stats()["arrangements"][0]["records"] <= 2 * (20_000 - 29 * 600),
              what="tidying after the fault")
