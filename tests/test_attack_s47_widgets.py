"""Attack (session 47): the live widgets and the dashboard (README "Watching the engine").

Checked as a user would, through the widgets' traits (no browser): what each widget shows against
``eng.dataflow_stats()`` / ``eng.arrangements()`` / ``eng.latency_histogram()``, widgets made before any
dataflow and after the engine closed, W = 1, 2, 3, odd names (HTML escaping, plot labels), the dashboard's
"furthest behind" bar, live views while epochs complete, hand-driven and following progress bars, and what
closing a widget releases.

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

import re
import threading
import time
import warnings

import numpy as np
import pytest

import kpgnb as kp
from threads import until

widgets = pytest.importorskip("kpgnb.widgets")
from kpgnb.widgets.reading import Reading  # noqa: E402

WAIT = 20


def widget_threads():
    return [t for t in threading.enumerate() if t.name == "kpgnb-widgets" and t.is_alive()]


def cells(html: str, first: str) -> list:
    """The cells of the table row whose first cell is ``first`` (text as escaped in the HTML)."""
    for row in re.findall(r"<tr class='[a-z]*'>(.*?)</tr>", html):
        tds = re.findall(r"<td class='([a-z ]*)'>(.*?)</td>", row)
        if tds and tds[0][1] == first:
            return tds
    raise AssertionError(f"no row {first!r} in {html[-400:]!r}")


# -- things that work (coverage the earlier rounds lack) -----------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_dashboard_opened_before_any_dataflow_agrees_with_the_engine(workers):
    with kp.Engine(workers=workers) as eng:
        dash = kp.dashboard(eng)
        try:
            assert "no dataflows installed" in dash.frontiers.value
            assert "no arrangements yet" in dash.arrangements.value
            assert f"{workers} workers · 0 dataflows running · 0 arrangements · 0 records · 0 B" in dash.header.value
            assert dash.memory.value == "" and "all up to date" in dash.progress.label.value
            x = eng.input("x", ["k", "v"], rows={"k": np.arange(30) % 7, "v": np.arange(30)})
            x.advance_to(1)
            with eng.dataflow("a") as df:
                v = df.input("x").arrange_by("k").export("xk").count(by="k").view("v")
            eng.wait(v)
            dash.refresh()
            arrs = eng.arrangements()
            assert {r["name"] for r in dash.arrangements.rows} == {r["name"] for r in arrs}
            recs = sum(r["records"] for r in arrs)
            assert f"· 1 dataflows running · {len(arrs)} arrangements · {recs:,} records" in dash.header.value
            row = cells(dash.frontiers.value, "a")
            assert [c for _, c in row[1:6]] == ["running", "x@1", "1", "1", "0"]
            assert row[8][1] == str(eng.latency_histogram("a")[1].sum())
            xk = next(r for r in dash.arrangements.rows if r["name"] == "xk")
            assert xk["exports"] == ["xk"] and xk["dataflow"] == "a" and len(xk["shards"]) == workers
            assert xk["records"] == 30 and "<td class='l'>xk</td><td class='l'>a</td>" in dash.arrangements.value
        finally:
            dash.close()
        assert until(lambda: not widget_threads())


def test_odd_names_are_escaped_in_every_widget():
    from kpgnb import graphs
    with kp.Engine(workers=2) as eng:
        e = eng.input("e<&>", ["src", "dst"], rows=[(0, 1), (1, 2)])
        r = eng.input("r'\"", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)
        with eng.dataflow("<script>x</script>") as df:
            g = df.input("e<&>").arrange_by("src").export("<i>exp</i>")
            v = graphs.bfs(g, df.input("r'\""), memory="jod").view("<b>v</b>")
        eng.wait(v)
        dash = kp.dashboard(eng)
        lv = widgets.LiveView(v)
        try:
            html = [dash.header.value, dash.frontiers.value, dash.arrangements.value, dash.memory.value,
                    lv.header.value, lv.table.value]
            assert "Memory modes" in dash.memory.value
            for h in html:
                for raw in ("<script>", "<i>exp", "<b>v</b>", "e<&>", "r'\""):
                    assert raw not in h, (raw, h[:300])
            assert "&lt;script&gt;x&lt;/script&gt;" in dash.frontiers.value
            assert "&lt;i&gt;exp&lt;/i&gt;" in dash.arrangements.value
        finally:
            lv.close()
            dash.close()


def test_widgets_made_over_a_closed_engine_say_so_and_leave_no_thread():
    eng = kp.Engine(workers=1)
    x = eng.input("x", ["k"], rows=[(1,)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
    eng.wait(v)
    eng.close()
    dash = kp.dashboard(eng)
    lv = widgets.LiveView(v)
    try:
        assert "closed" in dash.header.value and "closed" in dash.frontiers.value
        assert lv.state == "ended" and "closed" in lv.header.value
        assert until(lambda: not widget_threads())
        assert dash.updater.last_error is None
    finally:
        dash.close()
        lv.close()


# -- bugs ----------------------------------------------------------------------------------------------------

def test_a_caught_up_dataflow_over_inputs_at_different_epochs_shows_no_lag():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        y = eng.input("y", ["k"], rows=[(1,)])
        x.advance_to(1)
        y.advance_to(1)
        with eng.dataflow("b") as df:
            w = df.input("x").join(df.input("y"), on="k").view("w")
        eng.wait(w)
        x.insert([(5,)])
        x.advance_to(3)       # y stays at 1: b cannot get past epoch 1, and is as far as it can be
        eng.wait(w)
        time.sleep(1.2)
        d = next(d for d in eng.dataflow_stats() if d["name"] == "b")
        assert d["lag_epochs"] == 0 and d["epoch"] == 1
        fr = widgets.Frontiers().watch(eng)
        try:
            lag_cls, lag = cells(fr.value, "b")[6]
            assert d["lag_s"] == 0.0, f"caught up, yet lag_s = {d['lag_s']:.2f} s"
            assert lag == "-" and "warn" not in lag_cls, (lag, lag_cls)
        finally:
            fr.close()


def test_the_latency_ccdf_keeps_what_was_measured_when_the_engine_closes():
    eng = kp.Engine(workers=1)
    try:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("a") as df:
            v = df.input("x").count(by="k").view("v")
        eng.wait(v)
        for e in range(2, 5):
            x.insert([(e,)])
            x.advance_to(e)
            eng.wait(v)
        dash = kp.dashboard(eng)
        assert "a" in dash.latency.curves
    finally:
        eng.close()
    try:
        assert until(lambda: not dash.updater.running)
        assert "closed" in dash.header.value
        assert "a" in dash.latency.curves, "the plot lost the latencies it had measured"
    finally:
        dash.close()


def test_the_dashboard_bar_stops_saying_a_dataflow_is_behind_once_the_engine_closed():
    eng = kp.Engine(workers=2)
    gate = threading.Event()
    timer = threading.Timer(0.5, gate.set)
    dash = None
    try:
        x = eng.input("x", ["k"], rows=[(7,)])

        def nap(k):
            if (k == 7).any():  # (not in the trial call that finds the output's schema)
                gate.wait(20)
            return k
        with eng.dataflow("slow") as df:
            df.input("x").map(lambda k: {"k": nap(k)}).view("v")
        x.advance_to(3)
        time.sleep(1.3)
        dash = kp.dashboard(eng)
        assert "dataflow &#x27;slow&#x27;" in dash.progress.label.value and "behind" in dash.progress.label.value
        timer.start()         # (close waits for the operator in progress)
        eng.close()
        assert until(lambda: not dash.updater.running)
        assert "closed" in dash.header.value
        assert "behind" not in dash.progress.label.value, dash.progress.label.value
        assert dash.progress.state != "running"
    finally:
        gate.set()
        timer.cancel()
        eng.close()
        if dash is not None:
            dash.close()


def test_control_characters_in_names_do_not_make_the_plots_warn():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("from\tTSV") as df:
            v = df.input("x").arrange_by("k").export("by\tk").count(by="k").view("v")
        eng.wait(v)
        x.insert([(3,)])
        x.advance_to(2)
        eng.wait(v)
        reading = Reading.take(eng)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for part in (widgets.LatencyCCDF(), widgets.TraceSizes()):
                try:
                    part.refresh(reading)
                finally:
                    part.close()
        assert [str(w.message) for w in caught] == []


def test_progress_shows_fractional_amounts():
    p = widgets.Progress("loading", unit="GiB")
    try:
        p.update(0.5, 2.0, note="reading")
        assert p.bar.value == 0.25
        assert "0.5" in p.label.value, p.label.value
    finally:
        p.close()


@pytest.mark.parametrize("kind", ["live view", "progress"])
def test_closing_a_widget_closes_the_widgets_inside_it(kind):
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        if kind == "live view":
            w = widgets.LiveView(v)
            inner = [w.header, w.table, w.pause, w.children[0]]
        else:
            w = widgets.Progress("p")
            inner = [w.bar, w.label]
        w.close()
        assert w.comm is None
        left = [type(c).__name__ for c in inner if c.comm is not None]
        assert left == [], f"still open after close(): {left}"


def test_a_live_view_header_and_rows_come_from_one_epoch():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"], rows=[(0,)])
        x.advance_to(1)
        with eng.dataflow("a") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        real_head = v.head
        release = threading.Event()
        fired = []

        def head(k=None):
            if threading.current_thread().name == "kpgnb-widgets":
                release.wait(WAIT)  # keep the updater's own refresh from repainting over the first paint
            out = real_head(k)
            if not fired:         # an epoch completes while the live view reads the rows
                fired.append(True)
                x.insert([(1,)])
                x.advance_to(2)
                eng.wait(v)
            return out
        v.head = head
        lv = widgets.LiveView(v)
        try:
            m = re.search(r"final before epoch (\d+) · .*?(\d+) rows?</b>", lv.header.value)
            assert m, lv.header.value
            epoch, n = int(m.group(1)), int(m.group(2))
            assert n == epoch, f"the header says final before epoch {epoch} with {n} rows ({lv.header.value})"
        finally:
            release.set()
            lv.close()


def test_refreshing_the_dashboard_by_hand_keeps_the_trace_size_history():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").arrange_by("k").export("xk").view("v")
        eng.wait(v)
        dash = kp.dashboard(eng)
        try:
            first = dash.sizes.samples[0][0]
            for _ in range(dash.sizes.samples.maxlen):
                dash.refresh()   # (README: "takes a reading now"; say once per epoch of a loop)
            # the ring holds WINDOW_S (300 s) of samples taken every SAMPLE_S (1 s): none of it is older
            # than 300 s yet, so the first sample is still there
            assert dash.sizes.samples[0][0] == first, (
                f"the ring now spans {dash.sizes.samples[-1][0] - dash.sizes.samples[0][0]:.3f} s")
        finally:
            dash.close()


def test_memory_modes_list_a_replaced_dataflow_that_is_still_maintained():
    from kpgnb import graphs
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["src", "dst"], rows=[(0, 1), (1, 2), (2, 3)])
        r = eng.input("r", ["node"], rows=[(0,)])
        e.advance_to(1)
        r.advance_to(1)

        def install():
            with eng.dataflow("g", replace="g" in eng.dataflows()) as df:
                d = graphs.bfs(df.input("e"), df.input("r"), memory="jod")
                return d.arrange_by("node").export("dist").view("dv")
        eng.wait(install())
        with eng.dataflow("reader") as df:
            rv = df.use("dist").count(by="dist").view("rv")
        eng.wait(rv)
        eng.wait(install())   # the old g goes on as g~1: reader still reads its export
        e.insert([(3, 4)])
        e.advance_to(2)
        r.advance_to(2)
        eng.wait(None)
        assert sorted(rv.to_pandas()["dist"]) == [0, 1, 2, 3, 4]  # g~1 computed epoch 1 (node 4 at 4)
        dash = kp.dashboard(eng)
        try:
            assert "g~1" in {d["name"] for d in dash.frontiers.rows}
            assert "g~1 (dropped)" in {a["dataflow"] for a in dash.arrangements.rows}
            shown = sorted(m["dataflow"] for m in dash.memory.rows)
            assert len(shown) == 2 and any(n.startswith("g~1") for n in shown), shown
        finally:
            dash.close()


def test_progress_follow_over_a_closed_engine_says_it_is_closed():
    eng = kp.Engine(workers=1)
    x = eng.input("x", ["k"], rows=[(1,)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").view("v")
    eng.wait(v)
    eng.close()
    try:
        p = widgets.Progress.follow(eng, "d")
    except kp.KpgnbError as e:
        assert "closed" in str(e), str(e)
    else:
        try:
            assert p.state == "failed" and "closed" in p.label.value, p.label.value
        finally:
            p.close()
