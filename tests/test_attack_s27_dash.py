"""Attack s27: the live dashboard and widgets, and the benchmarks' --quick runs and answer checks.
Each test is a bug found by attacking (it fails until the product is fixed)."""
import threading

import numpy as np
import pytest

import kpgnb as kp
from threads import until

widgets = pytest.importorskip("kpgnb.widgets")
from kpgnb.widgets.reading import Reading  # noqa: E402
from kpgnb.widgets.updater import Part, Updater  # noqa: E402

WAIT = 20


def widget_threads():
    return [t for t in threading.enumerate() if t.name == "kpgnb-widgets" and t.is_alive()]


def small_engine():
    eng = kp.Engine(workers=2)
    a = eng.input("a", ["k"], rows=[(1,), (2,), (3,)])
    a.advance_to(1)
    with eng.dataflow("p") as df:
        v = df.input("a").arrange_by("k").export("a_by_k").count(by="k").view("pc")
    eng.wait(v)
    return eng, a, v


# -- one reading, one snapshot -------------------------------------------------------------------------------

def test_a_reading_takes_every_part_from_one_snapshot():
    """Reading.take (what every widget of one refresh shows) calls engine.snapshot() and then
    arrangements(), dataflow_stats() and ife_stats() without passing it that snapshot: each reads the
    latest one again, so a refresh that races an install/drop shows a dataflow in the frontiers table whose
    arrangements are missing from the arrangement table (or the reverse). Here snapshot() is made to
    alternate between the snapshot before and after installing dataflow 'q', as a racing scheduler would
    publish them."""
    eng, a, v = small_engine()
    try:
        old = eng.snapshot()
        with eng.dataflow("q") as df:
            vq = df.input("a").count(by="k").view("qc")
        eng.wait(vq)
        new = eng.snapshot()
        assert "q" in new.dataflows and "q" not in old.dataflows
        seq = [new, old]
        calls = []

        def racing_snapshot():
            calls.append(1)
            return seq[(len(calls) - 1) % 2]

        eng.snapshot = racing_snapshot
        try:
            r = Reading.take(eng)
        finally:
            del eng.snapshot
        listed = {d["name"] for d in r.dataflows}
        shown = {row["dataflow"] for row in r.arrangements if row["dataflow"]}
        lat = set(r.latency)
        # all from one snapshot: the same dataflows everywhere (either both with 'q' or both without)
        assert ("q" in listed) == ("q" in shown), (listed, shown)
        assert lat <= listed, (lat, listed)
    finally:
        eng.close()


# -- a failing reading -----------------------------------------------------------------------------------------

def test_a_failing_reading_shows_in_the_widgets_and_the_thread_lives_on():
    """Reading.take runs outside the updater's try/except: when reading the engine raises (a bug in
    arrangements(), a set changing size under a racing scheduler...), the updater thread dies with a
    traceback on stderr and every widget silently keeps its stale content; nothing in the widget says so.
    The error must show in the widgets (show_error) and the thread keep refreshing."""
    eng, a, v = small_engine()
    try:
        table = widgets.ArrangementTable().watch(eng)
        u = Updater.of(eng)
        real = type(eng).arrangements
        fail = threading.Event()
        fail.set()

        def flaky(self, *args, **kwargs):
            if fail.is_set():
                raise RuntimeError("reading failed <once>")
            return real(self, *args, **kwargs)

        type(eng).arrangements = flaky
        old_hook = threading.excepthook
        threading.excepthook = lambda args: None  # keep a dying thread quiet in the test's output
        try:
            shown = until(lambda: "reading failed" in table.value, 10)
            alive = u.running
        finally:
            type(eng).arrangements = real
            threading.excepthook = old_hook
        assert shown, f"the widget does not show the failure: {table.value[:200]!r}"
        assert alive, "the updater thread died on a failing reading"
    finally:
        eng.close()


def test_dashboard_of_an_engine_whose_reading_fails_still_opens():
    """Dashboard.__init__ -> Updater.refresh_now -> Reading.take is unguarded: kp.dashboard(eng) raises
    (a traceback instead of a dashboard that says what failed)."""
    eng, a, v = small_engine()
    real = type(eng).dataflow_stats

    def broken(self, *args, **kwargs):
        raise RuntimeError("stats broke")

    type(eng).dataflow_stats = broken
    dash = None
    try:
        dash = kp.dashboard(eng)
        assert "stats broke" in dash.frontiers.value
    finally:
        type(eng).dataflow_stats = real
        if dash is not None:
            dash.close()
        eng.close()


# -- the updater thread's lifetime ------------------------------------------------------------------------

class _EndsItself(widgets.Progress):
    """A part that, like a LiveView whose dataflow was dropped or a Progress that finished, removes itself
    from the updater during its refresh (on the updater thread); it then waits until the test has opened a
    dashboard, as a cell running at that moment would."""

    def __init__(self, engine, go: threading.Event, ended: threading.Event):
        super().__init__("ends itself")
        self._engine, self._go, self._ended = engine, go, ended

    def refresh(self, reading):
        if reading is None or threading.current_thread().name != "kpgnb-widgets":
            return
        self._stopped = True
        Updater.of(self._engine).remove(self, wait=0)
        self._ended.set()
        self._go.wait(10)


def test_a_dashboard_opened_while_the_last_widget_ends_itself_is_refreshed():
    """Updater.remove() of the last part from the updater thread (LiveView._end, Progress._stop) sets _stop
    while the thread is still running; add() then sees a live thread, starts none and does not clear
    _stop; the thread exits and the new dashboard is never refreshed again."""
    eng, a, v = small_engine()
    go, ended = threading.Event(), threading.Event()
    dash = None
    try:
        u = Updater.of(eng)
        part = _EndsItself(eng, go, ended)
        u.add(part)
        assert ended.wait(10)
        dash = kp.dashboard(eng)   # the user opens a dashboard at this moment
        go.set()
        with eng.dataflow("later") as df:
            vl = df.input("a").distinct().view("later_v")
        eng.wait(vl)
        assert until(lambda: "later" in dash.frontiers.value, 10), \
            f"the dashboard stopped refreshing; updater running: {u.running}"
    finally:
        go.set()
        if dash is not None:
            dash.close()
        eng.close()


# -- benchmarks: bad arguments, answer checks, what the JSON records -----------------------------------------

class _Ran(Exception):
    """The benchmark went on to build an engine (or write a result) with the arguments it was given."""


def _no_running(monkeypatch, mod):
    """Make the benchmark stop with _Ran as soon as it would build an engine or write a result: a bad
    argument must be refused before that."""
    def ran(*a, **k):
        raise _Ran("the benchmark ran with the bad argument instead of refusing it")
    monkeypatch.setattr(kp, "Engine", ran)
    monkeypatch.setattr(mod, "write_result", ran, raising=False)


BAD_ARGS = [
    ("latency", ["--workers", "0", "--keys", "50", "--updates", "3", "--bfs-updates", "2", "--nodes", "50",
                 "--edges", "100", "--import-records", "100"]),
    ("latency", ["--keys", "-5", "--updates", "3", "--bfs-updates", "2", "--nodes", "50", "--edges", "100",
                 "--import-records", "100"]),
    ("dashboard", ["--workers", "0", "--keys", "50", "--updates", "3", "--rounds", "1"]),
    ("dashboard", ["--updates", "-3", "--keys", "50", "--rounds", "1"]),
    ("scaling", ["--workers", "0", "--updates", "100", "--batch", "10", "--keys", "10", "--nodes", "20",
                 "--edges", "40", "--repeats", "1"]),
    ("scaling", ["--updates", "0", "--batch", "10", "--keys", "10", "--nodes", "20", "--edges", "40",
                 "--repeats", "1", "--workers", "1"]),
    ("churn", ["--workers", "0", "--rows", "100", "--churn", "10", "--epochs", "2", "--no-bfs", "--no-plot"]),
    ("join_install", ["--workers", "0", "--keys", "100", "--sizes", "10", "--repeats", "1",
                      "--unshared-repeats", "1", "--no-peers"]),
    ("join_install", ["--sizes", "-5", "--keys", "100", "--repeats", "1", "--unshared-repeats", "1",
                      "--no-peers"]),
    ("arrange", ["--workers", "0", "--batches", "2", "--batch-size", "10", "--keys", "100", "--edges", "0",
                 "--repeats", "1"]),
]


@pytest.mark.parametrize("name,argv", BAD_ARGS, ids=[f"{n}:{' '.join(a[:2])}" for n, a in BAD_ARGS])
def test_bench_bad_arguments_are_argparse_errors(name, argv, monkeypatch, capsys):
    """--workers 0 is taken as 'the default' by kp.Engine (2 workers here) while the benchmark labels and
    records the run as W=0; negative or zero sizes end in a numpy/IndexError traceback (or run). Both
    must be a one-line argparse error (exit status 2) before anything runs."""
    import importlib
    mod = importlib.import_module(f"bench.{name}")
    _no_running(monkeypatch, mod)
    try:
        mod.main(argv)
    except SystemExit as e:
        assert e.code == 2, f"exit status {e.code}"
        assert "error" in capsys.readouterr().err
        return
    except _Ran as e:
        pytest.fail(f"bench.{name} {' '.join(argv)}: {e}")
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"bench.{name} {' '.join(argv)}: a traceback ({type(e).__name__}: {e}), not an argparse error")
    pytest.fail(f"bench.{name} {' '.join(argv)} returned without refusing the argument")


def _wrong_count(monkeypatch):
    """Make every count(by="k") answer one too many, as an engine bug would."""
    from kpgnb.engine.collection import Collection
    real = Collection.count

    def count(self, *args, **kwargs):
        return real(self, *args, **kwargs).map(lambda k, count: {"k": k, "count": count + 1})

    monkeypatch.setattr(Collection, "count", count)


def test_bench_latency_checks_the_count_it_times(monkeypatch):
    """bench.latency's count_latency times the closed loop but never compares the view with the counts it
    inserted: an engine computing wrong counts still reports p50/p99 (issue 12: every benchmark checks its
    answers; a wrong one reports a failure, not a number). bench.scaling.count_throughput and
    bench.dashboard.measure have the same hole."""
    from bench import latency
    _wrong_count(monkeypatch)
    try:
        r = latency.count_latency(keys=20, updates=5, workers=1)
    except Exception as e:  # noqa: BLE001 - refusing to report is fine
        assert "wrong" in str(e).lower(), e
        return
    assert r.get("p50_ms") is None and "wrong" in str(r).lower(), \
        f"a wrong count was timed and reported: p50 {r.get('p50_ms')} ms"


def test_bench_scaling_checks_the_count_it_times(monkeypatch):
    from bench import scaling
    _wrong_count(monkeypatch)
    try:
        r = scaling.count_throughput(workers=1, updates=200, batch=50, keys=20)
    except Exception as e:  # noqa: BLE001
        assert "wrong" in str(e).lower(), e
        return
    pytest.fail(f"a wrong count was timed and reported: {r:,.0f} updates/s")


def test_bench_results_record_versions(monkeypatch, tmp_path):
    """Issue 12: the JSON holds parameters, machine and versions. bench.common.write_result adds the
    machine only; bench.latency (likewise arrange, churn, coldstart, dashboard, join_install, many_times,
    scaling, spark_load) records no numpy/numba/kpgnb version."""
    import json
    from bench import common, latency
    monkeypatch.setattr(common, "RESULTS", str(tmp_path))
    monkeypatch.setattr(latency, "install_latency", lambda *a, **k: {
        "install_with_import_p50_ms": 1.0, "install_with_import_max_ms": 1.0, "install_without_export_ms": 1.0,
        "speedup": 1.0})
    monkeypatch.setattr(latency, "bfs_latency", lambda *a, **k: {"p50_ms": 1.0, "p99_ms": 1.0})
    latency.main(["--keys", "20", "--updates", "3", "--workers", "1"])
    data = json.loads((tmp_path / "latency.json").read_text())
    versions = data.get("versions") or data.get("machine", {}).get("versions") or {}
    assert {"numpy", "numba"} <= set(versions), f"no versions recorded: keys {sorted(data)}"


# -- what the dashboard says -------------------------------------------------------------------------------

def test_trace_sizes_keep_two_arrangements_of_the_same_label_apart():
    """Two internal arrangements of one dataflow can share a name (two count(by=...) reductions are both
    'count'); TraceSizes keys its samples by 'name (dataflow)', so one of them overwrites the other and its
    curve disappears from the plot (the arrangement table lists both, indistinguishably)."""
    eng = kp.Engine(workers=1)
    try:
        a = eng.input("a", ["k"], rows=[(i,) for i in range(30)])
        a.advance_to(1)
        with eng.dataflow("two") as df:
            x = df.input("a")
            v1 = x.count(by="k").view("c1")
            v2 = x.map(lambda k: {"k": k % 3}).count(by="k").view("c2")
        eng.wait(v1)
        eng.wait(v2)
        sizes = widgets.TraceSizes()
        Updater.of(eng).refresh_now([sizes])
        rows = Reading.take(eng).arrangements
        assert len(sizes.samples[-1][1]) == len(rows), (sorted(sizes.samples[-1][1]), [r["name"] for r in rows])
    finally:
        eng.close()


def test_header_does_not_count_a_cancelled_dataflow_as_failed():
    """The header counts every dataflow with an error as 'failed'; a cancelled one (status 'cancelled',
    shown as such in the frontiers table) makes it say '1 failed'."""
    eng, a, v = small_engine()
    try:
        eng.cancel("p")
        assert until(lambda: eng.dataflows().get("p") == "cancelled", 10)
        dash = kp.dashboard(eng)
        try:
            assert "failed" not in dash.header.value, dash.header.value
        finally:
            dash.close()
    finally:
        eng.close()
