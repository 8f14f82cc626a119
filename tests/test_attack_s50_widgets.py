"""Attack (session 50): the live widgets and the dashboard (README "Watching the engine").

Checked as a user would, through the widgets' traits and the PNGs the plots send (no browser): the latency
CCDF against ``eng.latency_histogram()`` (a dataflow with one update, the histogram the engine publishes
anew, the count in its title once updates stop, more dataflows than the colour cycle), a live view whose
pause button is toggled after it ended, what the widgets show after one refresh could not read the engine,
the widget models a closed dashboard leaves open, the tables' ``rows`` once the engine closed, a failed
dataflow in every widget, a progress bar following a dataflow that fails, and widgets refreshed from
another thread while a cell churns inputs, dataflows and handles.

Tests marked xfail(strict=True) are bugs: they assert the documented (or obviously expected) behaviour."""
from __future__ import annotations

import io
import re
import threading
import time

import numpy as np
import pytest

import kpgnb as kp
from threads import until

widgets = pytest.importorskip("kpgnb.widgets")
from kpgnb.engine import latency as lat  # noqa: E402
from kpgnb.widgets.reading import Reading  # noqa: E402

WAIT = 20
C0 = (0x1F, 0x77, 0xB4)  # matplotlib's first colour: the first dataflow's curve


def widget_threads():
    return [t for t in threading.enumerate() if t.name == "kpgnb-widgets" and t.is_alive()]


def counts(by_seconds: dict) -> np.ndarray:
    """A latency histogram as the engine publishes one (read-only int64 counts per bucket)."""
    c = np.zeros(lat.BUCKETS, np.int64)
    for s, n in by_seconds.items():
        c[lat.bucket_of(s)] += n
    c.setflags(write=False)
    return c


def reading(at: float, hists: dict) -> Reading:
    return Reading(at, time.time(), False, latency=hists)


def pixels(png: bytes, rgb=C0, upper_half: bool = True) -> int:
    """How many pixels of the PNG have (about) colour ``rgb``, in its upper half (the legend sits in the
    lower left corner, so what is counted there are curves)."""
    from PIL import Image
    im = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    if upper_half:
        im = im[: im.shape[0] // 2]
    return int(((np.abs(im - np.array(rgb)) < 40).all(axis=-1)).sum())


# -- things that work (coverage the earlier rounds lack) -----------------------------------------------------

def test_a_failed_dataflow_in_every_widget():
    with kp.Engine(workers=2) as eng:
        x = eng.input("x", ["k"], rows=[(1,), (2,)])
        x.advance_to(1)
        with eng.dataflow("ok") as df:
            v = df.input("x").count(by="k").view("v")
        eng.wait(v)

        def bad(k):
            if (k == 99).any():
                raise ValueError("boom")
            return k
        with eng.dataflow("bad") as df:
            df.input("x").map(lambda k: {"k": bad(k)}).view("bv")
        x.insert([(99,)])
        x.advance_to(2)
        eng.wait(v)
        assert until(lambda: eng.dataflows().get("bad") == "failed")
        time.sleep(1.1)  # (the failed one's lag passes the bar's threshold: it must not be named behind)
        dash = kp.dashboard(eng)
        try:
            assert "· 1 dataflows running · 1 failed ·" in dash.header.value
            assert re.search(r"<tr class='bad'><td class='l'>bad</td><td class='l'>failed</td>", dash.frontiers.value)
            assert "ValueError: boom" in dash.frontiers.value
            assert "all up to date" in dash.progress.label.value, dash.progress.label.value
            with pytest.raises(kp.KpgnbError):
                widgets.Progress.follow(eng, "nope")
            p = widgets.Progress.follow(eng, "bad")
            assert p.state == "failed" and "ValueError: boom" in p.label.value and p.bar.bar_style == "danger"
            p.close()
            eng.drop("bad")
            dash.refresh()
            assert [d["name"] for d in dash.frontiers.rows] == ["ok"]
            assert "failed" not in dash.header.value
        finally:
            dash.close()
        assert until(lambda: not widget_threads())


def test_a_progress_following_a_dataflow_that_fails_says_why_and_lets_its_thread_go():
    gate = threading.Event()
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)

        def f(k):
            if (k == 7).any():  # (not in the trial call that finds the output's schema)
                gate.wait(WAIT)
                raise ValueError("boom")
            return k
        with eng.dataflow("d") as df:
            v = df.input("x").map(lambda k: {"k": f(k)}).view("v")
        eng.wait(v)
        x.insert([(7,)])
        x.advance_to(3)
        p = widgets.Progress.follow(eng, "d")
        try:
            assert p.state == "running" and p.bar.value == 0.0
            assert "0 / 2 epochs · final before epoch 1 of 3" in p.label.value, p.label.value
            gate.set()
            assert until(lambda: p.state != "running")
            assert p.state == "failed" and "ValueError: boom" in p.label.value and p.bar.bar_style == "danger"
            assert until(lambda: not widget_threads())
        finally:
            gate.set()
            p.close()


def test_widgets_refreshed_from_another_thread_while_a_cell_churns():
    """Readings taken and drawn on a second thread (as the updater does) while the main thread makes inputs,
    installs and drops dataflows, opens handles and advances epochs: no refresh fails, and the dashboard
    agrees with ``eng.stats()`` at the end."""
    errors: list = []
    with kp.Engine(workers=2) as eng:
        stop = threading.Event()
        dash = kp.dashboard(eng)
        parts = [widgets.Frontiers(), widgets.ArrangementTable(), widgets.LatencyCCDF(), widgets.TraceSizes()]

        def reader():
            while not stop.is_set():
                try:
                    r = Reading.take(eng)
                    for p in parts:
                        p.refresh(r)
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
        t = threading.Thread(target=reader)
        t.start()
        handles = []
        try:
            rng = np.random.default_rng(5)
            for i in range(12):
                x = eng.input(f"x{i}", ["k", "v"], rows={"k": rng.integers(0, 10, 40), "v": rng.integers(0, 99, 40)})
                x.advance_to(1)
                with eng.dataflow(f"d{i}") as df:
                    df.input(f"x{i}").arrange_by("k").export(f"e{i}").count(by="k").view("v")
                if i % 3 == 0:
                    handles.append(eng.trace(f"e{i}"))
                x.insert({"k": [1], "v": [2]})
                x.advance_to(2)
                if i % 2:
                    eng.drop(f"d{i}")
            eng.wait(None)
        finally:
            stop.set()
            t.join()
            for p in parts:
                p.close()
        try:
            assert errors == [] and dash.updater.last_error is None, (errors, dash.updater.last_error)
            dash.refresh()
            st = eng.stats()
            assert {r["name"] for r in dash.arrangements.rows} == {r["name"] for r in st["arrangements"]}
            running = {d["name"] for d in st["dataflows"]}
            assert running == {f"d{i}" for i in range(0, 12, 2)}
            assert f"· {len(running)} dataflows running · {len(st['arrangements'])} arrangements" in dash.header.value
            shown = {d["name"] for d in dash.frontiers.rows}
            assert running <= shown and shown - running == {"d3", "d9"}, shown  # dropped, kept for the handles
            assert {d["status"] for d in dash.frontiers.rows if d["retired"]} == {"dropped (kept while its exports are read)"}
        finally:
            for h in handles:
                h.close()
            dash.close()


# -- bugs ----------------------------------------------------------------------------------------------------

def test_the_readme_examples_one_update_shows_in_the_latency_ccdf():
    with kp.Engine(workers=2) as eng:
        edges = eng.input("edges", ["src", "dst"], rows={"src": np.arange(100) % 10, "dst": np.arange(100)})
        edges.advance_to(1)
        with eng.dataflow("degrees") as df:
            degree = df.input("edges").arrange_by("src").export("edges_by_src").count(by="src").view("degree")
        eng.wait(degree)
        dash = kp.dashboard(eng)
        try:
            assert int(eng.latency_histogram("degrees")[1].sum()) == 1
            assert list(dash.latency.curves) == ["degrees"]
            # the curve, at fraction 1, lies in the plot's upper half: some of its pixels must be there
            assert pixels(dash.latency.value) > 0, "the plot shows no curve for 'degrees'"
        finally:
            dash.close()


def test_the_latency_ccdf_draws_a_new_histogram_that_reuses_a_freed_arrays_id():
    lc = widgets.LatencyCCDF()
    try:
        t0 = time.perf_counter()
        first = counts({0.01: 1, 0.02: 1})
        lc.refresh(reading(t0, {"a": first}))
        drawn = id(first)
        del first  # (the engine published a newer histogram: the old array goes with the old snapshot)
        kept, new = [], None
        for _ in range(200):  # CPython hands a freed object's memory to the next object of its size
            c = counts({0.01: 1, 0.02: 1, 5.0: 100})
            if id(c) == drawn:
                new = c
                break
            kept.append(c)
        if new is None:
            pytest.skip("no array reused the freed one's address")
        lc.refresh(reading(t0 + 5, {"a": new}))
        x, y = lat.ccdf(new)
        got_x, got_y = lc.curves["a"]
        assert np.array_equal(got_x, x) and np.allclose(got_y, y), \
            f"the plot still shows {got_x} for a histogram with updates at {x}"
    finally:
        lc.close()


def test_the_latency_ccdf_shows_the_last_count_once_updates_stop():
    t0 = time.perf_counter()
    lc, fresh = widgets.LatencyCCDF(), widgets.LatencyCCDF()
    try:
        before = counts({0.01: 500, 0.1: 500})
        after = counts({0.01: 501, 0.1: 500})  # one more update: the curve looks the same, the count does not
        lc.refresh(reading(t0, {"a": before}))
        lc.refresh(reading(t0 + 1, {"a": after}))
        lc.refresh(reading(t0 + 60, {"a": after}))  # a minute later, nothing more measured
        fresh.refresh(reading(t0 + 60, {"a": after}))
        same = bytes(lc.value) == bytes(fresh.value)
        assert same, "the plot differs from a fresh one of the same histogram (its title " \
                                        "still says 1,000 updates, not 1,001)"
    finally:
        lc.close()
        fresh.close()


def test_each_dataflow_in_the_latency_ccdf_has_its_own_colour():
    from matplotlib.colors import to_hex
    lc = widgets.LatencyCCDF()
    try:
        hists = {f"d{i:02}": counts({0.001: 1, 0.01 * (i + 1): 1}) for i in range(12)}
        lc.refresh(reading(time.perf_counter(), hists))
        assert len(lc.curves) == 12
        legend = lc.plot.fig.axes[0].get_legend()
        entries = {t.get_text(): to_hex(h.get_color()) for t, h in zip(legend.get_texts(), legend.get_lines())}
        by_colour: dict = {}
        for name, colour in entries.items():
            by_colour.setdefault(colour, []).append(name)
        assert all(len(names) == 1 for names in by_colour.values()), \
            [names for names in by_colour.values() if len(names) > 1]
    finally:
        lc.close()


def test_a_live_view_that_ended_stays_ended_when_its_pause_button_toggles():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        lv = widgets.LiveView(v)
        try:
            eng.drop("d")
            assert until(lambda: lv.state == "ended")
            assert "has been dropped; not updating" in lv.header.value
            # a click sent by the browser before the button's disabled state reached it
            lv.pause.value = True
            lv.pause.value = False
            assert lv.state == "ended", f"state {lv.state!r} after the dataflow was dropped"
            assert "not updating" in lv.header.value
        finally:
            lv.close()


def _inside(widget):
    """``widget`` and every widget it holds: its children, and the Layout and Style widgets each has (each
    an ipywidgets model with a comm of its own, kept by ipywidgets until closed)."""
    yield widget
    for attr in ("layout", "style"):
        sub = getattr(widget, attr, None)
        if sub is not None and hasattr(sub, "comm"):
            yield sub
    for child in getattr(widget, "children", ()):
        yield from _inside(child)


def test_closing_the_dashboard_closes_every_widget_model_it_made():
    with kp.Engine(workers=1) as eng:
        x = eng.input("x", ["k"], rows=[(1,)])
        x.advance_to(1)
        with eng.dataflow("d") as df:
            v = df.input("x").view("v")
        eng.wait(v)
        dash = kp.dashboard(eng)
        made = list(_inside(dash))
        assert len(made) > 20
        dash.close()
        left = sorted({type(m).__name__ for m in made if m.comm is not None})
        assert left == [], f"{sum(m.comm is not None for m in made)} widget models left open: {left}"


def _failing_once(monkeypatch):
    """Make the next reading taken on the main thread fail (as a refresh that cannot read the engine)."""
    real = Reading.take.__func__
    armed = [False]

    def take(cls, engine):
        if armed[0] and threading.current_thread() is threading.main_thread():
            armed[0] = False
            raise RuntimeError("could not read the engine")
        return real(cls, engine)
    monkeypatch.setattr(Reading, "take", classmethod(take))
    return armed


def _counting(eng):
    x = eng.input("x", ["k"], rows=[(1,)])
    x.advance_to(1)
    with eng.dataflow("d") as df:
        v = df.input("x").count(by="k").view("v")
    eng.wait(v)
    x.insert([(2,)])
    x.advance_to(2)
    eng.wait(v)
    return v


def test_the_latency_ccdf_comes_back_after_a_refresh_that_could_not_read_the_engine(monkeypatch):
    armed = _failing_once(monkeypatch)
    with kp.Engine(workers=1) as eng:
        _counting(eng)
        dash = kp.dashboard(eng)
        try:
            armed[0] = True
            dash.refresh()  # README: "shows the error in the widgets and the thread goes on"
            assert "RuntimeError" in dash.frontiers.value
            error_png = bytes(dash.latency.value)
            assert "RuntimeError" in dash.progress.label.value
            dash.refresh()  # the engine reads again
            assert "RuntimeError" not in dash.frontiers.value
            stuck = [name for name, still in (("latency CCDF", bytes(dash.latency.value) == error_png),
                                              ("bar", "RuntimeError" in dash.progress.label.value)) if still]
            assert stuck == [], f"still showing the error: {stuck}"
            assert "all up to date" in dash.progress.label.value
        finally:
            dash.close()


def test_a_live_view_comes_back_after_a_refresh_that_could_not_read_the_engine(monkeypatch):
    armed = _failing_once(monkeypatch)
    with kp.Engine(workers=1) as eng:
        v = _counting(eng)
        lv = widgets.LiveView(v)
        try:
            rows = lv.table.value
            assert "<td>" in rows and lv.rows == 2
            updater = widgets.Updater.of(eng)
            armed[0] = True
            updater.refresh_now([lv])
            updater.refresh_now([lv])  # the engine reads again; the view has not changed
            assert "RuntimeError" not in lv.table.value, lv.table.value
            assert lv.table.value == rows
        finally:
            lv.close()


def test_the_tables_rows_are_what_they_show_once_the_engine_closed():
    eng = kp.Engine(workers=1)
    try:
        _counting(eng)
        dash = kp.dashboard(eng)
        assert dash.arrangements.rows and dash.frontiers.rows
    finally:
        eng.close()
    try:
        assert until(lambda: not dash.updater.running)
        assert dash.arrangements.value == "<i>the engine is closed</i>" == dash.frontiers.value
        assert dash.memory.rows == []
        assert dash.arrangements.rows == [] and dash.frontiers.rows == [], \
            ([r["name"] for r in dash.arrangements.rows], [d["name"] for d in dash.frontiers.rows])
    finally:
        dash.close()
