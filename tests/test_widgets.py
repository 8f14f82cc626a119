"""The live dashboard without a browser: widgets over a live engine (W = 1, 2, 3), checked through their
traits as the updater thread refreshes them; the engine's introspection they read (the arrangement
listing, dataflow frontiers and lag, the bounded latency histogram); the updater thread's lifetime; and a
notebook executed by nbclient that stores the widgets' state."""
import json
import os
import threading
import time

import numpy as np
import pytest

import kpgnb as kp
from kpgnb.engine import latency
from kpgnb.engine.lattice import Antichain
from kpgnb.engine.trace import Trace

widgets = pytest.importorskip("kpgnb.widgets")

WAIT = 30  # seconds a refresh may take to show (generous: the suite may run beside other work)


def until(cond, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not show within {timeout} s")
        time.sleep(0.02)


def widget_threads():
    return [t for t in threading.enumerate() if t.name == "kpgnb-widgets" and t.is_alive()]


def graph_engine(workers: int):
    eng = kp.Engine(workers=workers)
    edges = eng.input("edges", ["src", "dst"], rows={"src": np.arange(200) % 50, "dst": np.arange(200)})
    edges.advance_to(1)
    with eng.dataflow("reach") as df:
        g = df.input("edges").arrange_by("src").export("edges_by_src")
        view = g.count(by="src").view("out_degree")
    eng.wait(view)
    return eng, edges, view


def advance(eng, inp, view, epochs, rows=1):
    for _ in range(epochs):
        e = inp.epoch
        inp.insert({"src": np.arange(rows) + e, "dst": np.full(rows, 10_000 + e)})
        inp.advance_to(e + 1)
        eng.wait(view)


def row(table, name):
    return next((r for r in table.rows if r["name"] == name), None)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_dashboard_follows_the_engine(workers):
    eng, edges, view = graph_engine(workers)
    try:
        dash = kp.dashboard(eng)
        assert widget_threads(), "the updater thread runs while the dashboard is open"
        # the first reading is shown at once, on the creating thread
        names = {r["name"] for r in dash.arrangements.rows}
        assert {"input:edges", "edges_by_src"} <= names
        assert "edges_by_src" in dash.arrangements.value and "reach" in dash.frontiers.value
        exported = row(dash.arrangements, "edges_by_src")
        assert exported["kind"] == "export" and exported["key"] == ["src"] and exported["dataflow"] == "reach"
        assert exported["exports"] == ["edges_by_src"]
        assert any(r["kind"] == "internal" for r in dash.arrangements.rows)  # the count's own arrangements
        assert len(exported["shards"]) == workers and exported["skew"] >= 1.0

        # rows appear and disappear as dataflows are installed and dropped
        with eng.dataflow("q2") as df:
            df.use("edges_by_src").count(by="src").view("q2_counts")
        until(lambda: any(r["dataflow"] == "q2" for r in dash.arrangements.rows), "q2's arrangements")
        until(lambda: "q2" in dash.frontiers.value, "q2's frontier row")
        eng.drop("q2")
        until(lambda: not any(r["dataflow"] == "q2" for r in dash.arrangements.rows), "q2's rows going")
        until(lambda: "q2" not in dash.frontiers.value, "q2's frontier row going")

        # frontiers advance; the CCDF is redrawn; trace sizes grow
        ccdf_before = dash.latency.value
        records_before = row(dash.arrangements, "edges_by_src")["records"]
        samples_before = len(dash.sizes.samples)
        advance(eng, edges, view, 5, rows=20)
        goal = edges.epoch
        reach = lambda: next(d for d in dash.frontiers.rows if d["name"] == "reach")  # noqa: E731
        until(lambda: reach()["epoch"] == goal and f"<td class=''>{goal}</td>" in dash.frontiers.value,
              "the frontier reaching the last epoch")  # (a refresh sets rows, then the HTML: both in the wait)
        assert reach()["input_frontier"] == Antichain([(goal,)]) and reach()["lag_epochs"] == 0
        until(lambda: dash.latency.value != ccdf_before, "a redrawn CCDF")
        assert dash.latency.value[:8] == b"\x89PNG\r\n\x1a\n"
        assert "reach" in dash.latency.curves
        until(lambda: row(dash.arrangements, "edges_by_src")["records"] >= records_before + 100, "a grown trace")
        # (a sample taken while the epochs were advancing may hold fewer: wait for one with all of them)
        until(lambda: len(dash.sizes.samples) > samples_before
              and dash.sizes.samples[-1][1].get("edges_by_src (reach)", (0,))[0] >= records_before + 100,
              "a new trace size sample with the grown trace")
        assert dash.sizes.value[:4] == b"\x89PNG"

        # a reader that holds compaction back is named
        handle = eng.trace("edges_by_src")
        advance(eng, edges, view, 4)
        until(lambda: (row(dash.arrangements, "edges_by_src") or {}).get("blocker") == "eng.trace('edges_by_src')"
              and row(dash.arrangements, "edges_by_src")["blocked_epochs"] >= 4
              and "eng.trace(&#x27;edges_by_src&#x27;)" in dash.arrangements.value,
              "the handle named as the compaction blocker, 4 epochs behind")
        handle.close()
        advance(eng, edges, view, 2)
        until(lambda: row(dash.arrangements, "edges_by_src")["blocker"] is None, "the blocker going away")

        # a failed dataflow shows its error
        def boom(src):
            if (src == 4242).any():
                raise ValueError("boom at 4242")
            return src
        with eng.dataflow("bad") as df:
            df.input("edges").map(lambda src: {"src": boom(src)}).view("bad")
        edges.insert([(4242, 0)])
        edges.advance_to(edges.epoch + 1)
        until(lambda: "boom at 4242" in dash.frontiers.value, "the failed dataflow's error")
        assert "<tr class='bad'>" in dash.frontiers.value
        assert next(d for d in dash.frontiers.rows if d["name"] == "bad")["status"] == "failed"

        dash.close()
        assert not widget_threads(), "closing the dashboard ends the updater thread"
        assert dash.updater.last_error is None, dash.updater.last_error
    finally:
        eng.close()


def test_engine_close_stops_the_updater():
    eng, edges, view = graph_engine(2)
    dash = widgets.Dashboard(eng)
    assert widget_threads()
    eng.close()
    until(lambda: not widget_threads(), "the updater ending with the engine")
    assert "closed" in dash.header.value and "closed" in dash.arrangements.value
    dash.close()  # closing afterwards is harmless


def test_latency_histogram_is_bounded_and_counts_what_the_engine_reports():
    eng, edges, view = graph_engine(2)
    try:
        info = lambda: eng.snapshot().dataflows["reach"]  # noqa: E731
        until(lambda: info().latency_s is not None, "the first latency")
        reported = [info().latency_s]  # the install's first computation
        for _ in range(300):
            e = edges.epoch
            edges.insert([(e % 50, e)])
            edges.advance_to(e + 1)
            eng.wait(view)
            until(lambda: info().frontier == Antichain([(e + 1,)]), "the published frontier")
            reported.append(info().latency_s)
        edges_, counts = eng.latency_histogram("reach")
        assert counts.dtype == np.int64 and counts.shape == (latency.BUCKETS,) and not counts.flags.writeable
        assert edges_ is latency.EDGES and edges_[0] == latency.LOW and edges_[-1] == pytest.approx(latency.HIGH)
        # one closed-loop update per epoch: the histogram holds exactly the latencies the engine reported
        expected = np.bincount([latency.bucket_of(s) for s in reported], minlength=latency.BUCKETS)
        assert counts.tolist() == expected.tolist()
        assert next(d for d in eng.dataflow_stats() if d["name"] == "reach")["updates"] == len(reported)
        # many more updates: the same fixed size, every one counted
        for _ in range(3):
            advance(eng, edges, view, 200)
        until(lambda: int(eng.latency_histogram("reach")[1].sum()) == len(reported) + 600, "all updates counted")
        assert eng.latency_histogram("reach")[1].shape == (latency.BUCKETS,)
        x, y = latency.ccdf(eng.latency_histogram("reach")[1])
        assert y[0] == 1.0 and np.all(np.diff(y) < 0) and np.all(np.diff(x) > 0)
        with pytest.raises(kp.UnknownNameError):
            eng.latency_histogram("nope")
    finally:
        eng.close()


def test_histogram_buckets():
    assert latency.bucket_of(0.0) == 0 and latency.bucket_of(latency.LOW / 2) == 0
    assert latency.bucket_of(latency.HIGH) == latency.BUCKETS - 1 and latency.bucket_of(1e9) == latency.BUCKETS - 1
    for i, edge in enumerate(latency.EDGES[:-1]):  # each finite bucket starts at its lower edge
        assert latency.bucket_of(float(edge)) == i + 1
        assert latency.bucket_of(float(edge) * 1.0001) == i + 1
    h = latency.LatencyHistogram()
    for s in (1e-3, 1e-3, 2e-2, 5.0):
        h.add(s)
    x, y = latency.ccdf(h.published())
    assert y.tolist() == [1.0, 0.5, 0.25]
    assert latency.quantile(h.published(), 0.5) == pytest.approx(latency.EDGES[latency.bucket_of(1e-3)])


def test_lag_in_epochs_and_seconds():
    eng = kp.Engine(workers=2)
    try:
        inp = eng.input("slow_in", ["x"], rows=[(1,)])
        gate = threading.Event()

        def nap(x):
            if (x == 7).any():
                gate.wait(20)
            return x
        with eng.dataflow("slow") as df:
            view = df.input("slow_in").map(lambda x: {"x": nap(x)}).view("slow")
        inp.advance_to(1)
        eng.wait(view)
        inp.insert([(7,)])
        for e in range(2, 6):
            inp.advance_to(e)
        time.sleep(0.3)
        d = next(d for d in eng.dataflow_stats() if d["name"] == "slow")
        assert d["epoch"] == 1 and d["lag_epochs"] == 4 and d["lag_s"] >= 0.2
        assert d["inputs"]["slow_in"]["epoch"] == 5
        # the dashboard's bar names the dataflow once it has been behind for a while
        dash = widgets.Dashboard(eng)
        until(lambda: "dataflow &#x27;slow&#x27;" in dash.progress.label.value, "the lagging dataflow's bar")
        assert "final before epoch 1 of 5" in dash.progress.label.value and dash.progress.state == "running"
        gate.set()
        eng.wait(view)
        until(lambda: "all up to date" in dash.progress.label.value, "the bar once caught up")
        dash.close()
        until(lambda: next(d for d in eng.dataflow_stats() if d["name"] == "slow")["lag_epochs"] == 0, "caught up")
        d = next(d for d in eng.dataflow_stats() if d["name"] == "slow")
        assert d["lag_s"] == 0.0 and d["epoch"] == 5
    finally:
        gate.set()
        eng.close()


def test_introspection_from_another_thread_while_the_engine_runs():
    eng, edges, view = graph_engine(2)
    errors, seen = [], []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                rows = eng.arrangements()
                seen.append(len(rows))
                eng.dataflow_stats(retired=True)
                for r in rows:
                    assert r["records"] >= 0 and r["merge_shortfall"] >= 0
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(20):
            with eng.dataflow(f"tmp{i}") as df:
                v = df.use("edges_by_src").join(df.input("edges"), on="src").view("j")
            advance(eng, edges, view, 2, rows=50)
            eng.wait(v)
            eng.drop(f"tmp{i}")
    finally:
        stop.set()
        t.join(30)
        eng.close()
    assert not errors, errors
    assert seen


def test_merge_shortfall_is_published():
    """A trace's snapshot says how many rows its merges in progress still have to merge."""
    t = Trace(1, 0, 1, workers=1, effort="lazy")
    from kpgnb.engine.batch import Batch
    lower = Antichain([(0,)])
    n = 50_000
    for e in range(2):
        upper = Antichain([(e + 1,)])
        keys = np.arange(n, dtype=np.int64)[None, :] + e * n
        b = Batch.form(keys, np.zeros((0, n), np.int64), np.full((n, 1), e, np.int64), np.ones(n, np.int64),
                               lower, upper)
        t.append([b])
        lower = upper
    t.exert(1000)  # starts merging the two equal batches, spending a little fuel
    st = t.stats()
    assert st["merges"] == 1 and 0 < st["merge_shortfall"] < 2 * n
    before = st["merge_shortfall"]
    t.exert(10_000)
    assert t.stats()["merge_shortfall"] < before  # progress is published even before the merge completes
    t.exert(10 * n)
    assert t.stats()["merges"] == 0 and t.stats()["merge_shortfall"] == 0


def test_live_view_updates_pauses_and_ends():
    eng, edges, view = graph_engine(2)
    try:
        lv = widgets.LiveView(view)
        assert lv.state == "live" and lv.rows == 50 and "final before epoch 1" in lv.header.value
        assert "<table" in lv.table.value and "more rows" in lv.table.value
        edges.insert([(1000, 1)])
        edges.advance_to(2)
        eng.wait(view)
        until(lambda: lv.rows == 51 and "final before epoch 2" in lv.header.value
              and "last update" in lv.header.value, "the new row")  # (rows are set before the header)
        lv.pause.value = True
        assert lv.state == "paused" and "paused" in lv.header.value
        edges.insert([(1001, 1)])
        edges.advance_to(3)
        eng.wait(view)
        time.sleep(1.0)
        assert lv.rows == 51, "a paused live view keeps what it shows"
        lv.pause.value = False
        until(lambda: lv.rows == 52, "the resumed live view")
        eng.drop("reach")
        until(lambda: lv.state == "ended" and "dropped" in lv.header.value and lv.pause.disabled,
              "the live view ending with its dataflow")
        until(lambda: not widget_threads(), "the updater ending with its last widget")
    finally:
        eng.close()


def test_views_render_as_before_outside_a_kernel():
    from kpgnb import display
    from kpgnb.widgets import liveview
    eng, edges, view = graph_engine(1)
    try:
        assert not liveview.available()  # no kernel here
        assert liveview.mimebundle(view) is None
        assert display.register() is False
        assert "<table" in view._repr_html_()
    finally:
        eng.close()


def test_progress_by_hand_and_following_a_dataflow():
    p = widgets.Progress("loading edges", unit="rows")
    p.update(250, 1000, note="encoding")
    assert p.bar.value == 0.25 and "250 / 1,000 rows" in p.label.value and "encoding" in p.label.value
    p.finish()
    assert p.bar.value == 1.0 and p.bar.bar_style == "success"
    with pytest.raises(RuntimeError):
        with widgets.Progress("doomed") as q:
            raise RuntimeError("nope")
    assert q.bar.bar_style == "danger" and "nope" in q.label.value

    eng = kp.Engine(workers=2)
    gate = threading.Event()
    try:
        inp = eng.input("xs", ["x"], rows=[(1,)])

        def nap(x):
            gate.wait(20)
            return x
        with eng.dataflow("big") as df:
            view = df.input("xs").map(lambda x: {"x": nap(x)}).view("big")
        inp.advance_to(3)
        follow = widgets.Progress.follow(eng, "big")
        until(lambda: "final before epoch 0 of 3" in follow.label.value, "the dataflow's progress")
        assert follow.state == "running" and follow.bar.value == 0.0
        gate.set()
        eng.wait(view)
        until(lambda: follow.state == "finished" and follow.bar.value == 1.0 and "up to date" in follow.label.value,
              "the finished progress bar")  # (the state is set before the bar and the label)
        until(lambda: not widget_threads(), "the updater ending once the bar finished")
    finally:
        gate.set()
        eng.close()


def test_spark_input_from_reports_progress():
    pa = pytest.importorskip("pyarrow")
    from kpgnb import spark
    eng = kp.Engine(workers=1)
    try:
        p = widgets.Progress("edges")
        spark.input_from(eng, "edges", pa.table({"src": [1, 2, 3], "dst": [2, 3, 4]}), progress=p)
        assert p.state == "finished" and p.total == 3 and "sealed" in p.label.value
        p = widgets.Progress("again")
        with pytest.raises(kp.UsageError):
            spark.input_from(eng, "edges", pa.table({"src": [1], "dst": [2]}), progress=p)
        assert p.state == "failed"
    finally:
        eng.close()


NOTEBOOK = [
    """import time, kpgnb as kp
eng = kp.engine()
edges = eng.input("edges", ["src", "dst"], rows=[(1, 2), (2, 3), (3, 4)])
edges.advance_to(1)
with eng.dataflow("reach") as df:
    g = df.input("edges").arrange_by("src").export("edges_by_src")
    degree = g.count(by="src").view("out_degree")
eng.wait(degree)""",
    "dash = kp.dashboard()\ndash",
    """for e in range(2, 12):
    edges.insert([(e, e + 1)])
    edges.advance_to(e)
    eng.wait(degree)
deadline = time.time() + 60
while dash.latency.curves.get("reach") is None or "<td class=''>11</td>" not in dash.frontiers.value:
    assert time.time() < deadline
    time.sleep(0.1)
time.sleep(1.0)""",
    "degree",
]


def test_notebook_stores_widget_state(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("KPGNB_WORKERS", "2")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in NOTEBOOK]
    client = nbclient.NotebookClient(nb, kernel_name="python3", store_widget_state=True, timeout=300,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    nbformat.write(nb, str(tmp_path / "dashboard.ipynb"))
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    html = [m["state"].get("value", "") for m in state.values() if m["model_name"] == "HTMLModel"]
    table = [v for v in html if "edges_by_src" in v and "input:edges" in v]
    assert table, "the arrangement table's state names the arrangements"
    assert any("reach" in v and "<td class=''>11</td>" in v for v in html), "the frontiers' state is current"
    images = [m for m in state.values() if m["model_name"] == "ImageModel"]
    assert len(images) >= 2
    # the dashboard and the live view are the outputs of their cells, with static fallbacks beside them
    out = nb.cells[1].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in out
    live = nb.cells[3].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in live and "text/html" in live and "text/plain" in live
    assert live["application/vnd.jupyter.widget-view+json"]["model_id"] in state
    assert any("view &#x27;out_degree&#x27;" in v or "view 'out_degree'" in v for v in html)
    json.dumps(nb.metadata["widgets"])  # serializable as stored


def test_dataflow_dashboard_magic():
    from IPython.core.interactiveshell import InteractiveShell
    from kpgnb import kernel
    sh = InteractiveShell.instance()
    kernel.close()
    sh.run_line_magic("load_ext", "kpgnb")
    try:
        kernel.configure(workers=2)
        eng = kp.engine()
        inp = eng.input("magic_in", ["x"], rows=[(1,), (2,)])
        inp.advance_to(1)
        with eng.dataflow("magic") as df:
            view = df.input("magic_in").arrange_by("x").export("magic_by_x").view("mv")
        eng.wait(view)
        r = sh.run_cell("%dataflow dashboard")
        dash = r.result
        assert isinstance(dash, widgets.Dashboard) and dash.engine is eng
        assert "input:magic_in (exported as magic_by_x)" in dash.arrangements.value
        assert "magic" in dash.frontiers.value
        assert widget_threads()
    finally:
        sh.run_line_magic("unload_ext", "kpgnb")  # closes the kernel's engine: the updater ends with it
    until(lambda: not widget_threads(), "the updater ending with the kernel's engine")


def test_a_widget_on_its_own_watches_an_engine():
    eng, edges, view = graph_engine(2)
    try:
        table = widgets.ArrangementTable().watch(eng)
        assert row(table, "edges_by_src") is not None, "the first reading is shown at once"
        assert widget_threads()
        upper = row(table, "edges_by_src")["upper"]
        advance(eng, edges, view, 3)
        until(lambda: row(table, "edges_by_src")["upper"] != upper, "the table following the engine")
        table.close()
        until(lambda: not widget_threads(), "the updater ending once the widget closed")
    finally:
        eng.close()
