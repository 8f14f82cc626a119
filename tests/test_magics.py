"""The notebook extension through IPython's own shell: %load_ext, %%dataflow cells (inputs, views, exports,
failures that install nothing, --replace, -o), the %dataflow subcommands, %reset, unload and reload."""
import re
import threading
import time

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

import kpgnb as kp
from kpgnb import kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    yield sh
    sh.run_line_magic("unload_ext", "kpgnb")


@pytest.fixture(params=[1, 2, 3])
def ip(request, shell, capsys):
    """The shell with the extension loaded and a fresh kernel engine of W workers."""
    kernel.close()
    shell.run_line_magic("load_ext", "kpgnb")
    kernel.configure(workers=request.param)
    shell.user_ns.update(np=np, pd=pd, kp=kp)
    capsys.readouterr()
    yield shell
    kernel.close()
    for k in [k for k in shell.user_ns if not k.startswith("_") and k not in ("In", "Out", "get_ipython", "exit", "quit")]:
        shell.user_ns.pop(k, None)


def run(sh, capsys, code):
    """Run a cell; (result, stdout+stderr without colour codes)."""
    r = sh.run_cell(code)
    out = capsys.readouterr()
    return r, ANSI.sub("", out.out + out.err)


def frame(rng, n=200, nodes=40):
    return pd.DataFrame({"src": rng.integers(0, nodes, n), "dst": rng.integers(0, nodes, n),
                         "label": np.array([f"n{i % 7}" for i in range(n)], dtype=object)})


def test_load_registers_magics_and_says_so_once(shell, capsys):
    kernel.close()
    shell.run_line_magic("unload_ext", "kpgnb")
    capsys.readouterr()
    shell.run_line_magic("load_ext", "kpgnb")
    out = capsys.readouterr().out
    assert out.count("kpgnb:") == 1 and len(out.strip().splitlines()) == 1  # one line
    shell.run_line_magic("load_ext", "kpgnb")  # IPython says it is loaded already; nothing else happens
    assert "kpgnb:" not in capsys.readouterr().out
    assert shell.find_cell_magic("dataflow") is not None and shell.find_line_magic("dataflow") is not None


def test_help_documents_the_options(ip, capsys):
    _, out = run(ip, capsys, "%%dataflow?")
    assert "--inputs" in out and "--replace" in out and "-o" in out and "df.use" in out
    _, out = run(ip, capsys, "%dataflow?")
    for sub in ("list", "drop", "wait", "stats", "config", "dashboard"):
        assert f"%dataflow {sub}" in out


def test_first_cell_inputs_views_and_a_second_cell_attaching(ip, capsys):
    rng = np.random.default_rng(7)
    ip.user_ns["edges_df"] = edges = frame(rng)
    r, out = run(ip, capsys, """%%dataflow deg --inputs e=edges_df
by_src = e.arrange_by("src").export("edges_by_src")
out_degree = by_src.count(by="src").view("out_degree")
labels = e.select("label").distinct().view("labels")
""")
    assert r.success, out
    assert "dataflow 'deg' installed" in out and "exports: edges_by_src" in out
    view = ip.user_ns["out_degree"]
    got = view.to_pandas().sort_values("src").reset_index(drop=True)
    want = edges.groupby("src").size().reset_index(name="count")
    assert got.to_dict("list") == want.to_dict("list")
    assert sorted(ip.user_ns["labels"].to_pandas()["label"]) == sorted(set(edges["label"]))
    records_before = kp.engine().catalog()["edges_by_src"]["records"]

    r, out = run(ip, capsys, """%%dataflow two_hop
g = df.use("edges_by_src")
hops = g.join(g, left_on="dst", right_on="src").select("src", "dst_right").distinct().view("two_hop")
""")
    assert r.success, out
    assert "imports: edges_by_src" in out
    cat = kp.engine().catalog()
    assert len(cat) == 1 and cat["edges_by_src"]["records"] == records_before  # attached, not re-indexed
    pairs = edges.merge(edges, left_on="dst", right_on="src")[["src_x", "dst_y"]].drop_duplicates()
    got = ip.user_ns["two_hop"].to_pandas()
    assert len(got) == len(pairs)
    assert set(map(tuple, got.to_numpy())) == set(map(tuple, pairs.to_numpy()))

    # the DataFrame became an engine input named after its variable; later cells change it
    kp.input("edges_df").insert(pd.DataFrame({"src": [1000], "dst": [1001], "label": ["new"]}))
    kp.input("edges_df").advance_to(2)
    run(ip, capsys, "%dataflow wait")
    assert 1000 in set(view.to_pandas()["src"])


def test_view_renders_as_table_with_frontier_and_rows(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [3, 1, 2], "v": [0.5, 1.5, 2.5]})
    run(ip, capsys, "%%dataflow show --inputs t=t\nshown = t.view('shown')\n")
    r, out = run(ip, capsys, "shown")
    assert "view 'shown'" in out and "final before epoch 1" in out and "3 rows" in out
    assert [ln.split()[0] for ln in out.strip().splitlines()[-3:]] == ["1", "2", "3"]  # sorted
    html = ip.user_ns["shown"]._repr_html_()
    assert "<table" in html and "3 rows" in html and "last update" in html


def _cell_error_text(out):
    assert "Traceback" in out
    return out


@pytest.mark.parametrize("body, expect, line", [
    ("x = e.select('nope')\n", "no column 'nope'", 2),
    ("y = 1\nx = e.join(e, left_on='src', right_on='label')\n", "label", 3),
    ("x = 1\nx = e.select('src'\n", "SyntaxError", 3),
    ("x = 1\n  y = 2\n", "IndentationError", 3),
    ("x = df.input('nosuch')\n", "no input named 'nosuch'", 2),
])
def test_failing_cell_installs_nothing_and_points_at_its_line(ip, capsys, body, expect, line):
    ip.user_ns["edges_df"] = frame(np.random.default_rng(1))
    run(ip, capsys, "%%dataflow base --inputs e=edges_df\nkeep = e.arrange_by('src').export('by_src').view('keep')\n")
    before = (kp.engine().dataflows(), kp.engine().catalog(), ip.user_ns["keep"].to_pandas())
    r, out = run(ip, capsys, "%%dataflow broken --inputs e=edges_df\n" + body)
    assert not r.success
    assert expect in out, out
    if line is not None:
        assert re.search(rf"Cell In\[\d+\], line {line}", out), out
    assert "kpgnb/" not in out and "engine/" not in out and "run_cell_magic" not in out  # the magic's frames hidden
    assert kp.engine().dataflows() == before[0] and kp.engine().catalog() == before[1]
    pd.testing.assert_frame_equal(ip.user_ns["keep"].to_pandas(), before[2])
    assert "broken" not in kp.engine().dataflows()


def test_user_function_failing_on_its_first_batch_installs_nothing(ip, capsys):
    ip.user_ns["edges_df"] = frame(np.random.default_rng(2))
    run(ip, capsys, "%%dataflow base --inputs e=edges_df\nkeep = e.arrange_by('src').export('by_src').view('keep')\n")
    r, out = run(ip, capsys, """%%dataflow fails --inputs e=edges_df
def check(src):
    if (src > 5).any():
        raise ValueError(f"src {src.max()} is out of range")
    return src
bad = df.use("by_src").map(lambda src: {"s": check(src)}).view("bad")
""")
    assert not r.success
    assert "ValueError" in out and "out of range" in out and "failed on its first computation" in out
    assert re.search(r"Cell In\[\d+\], line 4", out), out
    assert list(kp.engine().dataflows()) == ["base"] and "bad" not in ip.user_ns
    assert len(ip.user_ns["keep"].to_pandas()) == 200


def test_replace_swaps_and_keeps_exports_that_others_read(ip, capsys):
    ip.user_ns["edges_df"] = edges = frame(np.random.default_rng(3))
    run(ip, capsys, "%%dataflow src_df --inputs e=edges_df\nv1 = e.arrange_by('src').export('by_src').count(by='src').view('counts')\n")
    run(ip, capsys, "%%dataflow reader\nfan = df.use('by_src').count(by='src').view('fan')\n")
    r, out = run(ip, capsys, "%%dataflow src_df --inputs e=edges_df\nv = e.view('counts')\n")
    assert not r.success and "--replace" in out
    r, out = run(ip, capsys, "%%dataflow src_df --replace --inputs e=edges_df\n"
                             "v = e.arrange_by('src').export('by_src').distinct().view('counts')\n")
    assert r.success, out
    assert "replaced" in out
    assert len(ip.user_ns["counts"].to_pandas()) == len(edges.drop_duplicates())
    # the reader keeps the old arrangement, still maintained
    kp.input("edges_df").insert([(999, 1, "x")])
    kp.input("edges_df").advance_to(2)
    run(ip, capsys, "%dataflow wait")
    assert 999 in set(ip.user_ns["fan"].to_pandas()["src"])
    # a later cell gets the new export
    r, out = run(ip, capsys, "%%dataflow later\nn = df.use('by_src').view('n')\n")
    assert r.success, out
    assert len(ip.user_ns["n"].to_pandas()) == len(edges) + 1


def test_a_dropped_cell_runs_again_while_its_export_is_read(ip, capsys):
    """Attack s32: `%dataflow drop base` while `reader` reads base's export, then running base's cell
    again (with or without --replace) failed with "an arrangement named 'by_src' is exported already",
    naming no one. The dropped dataflow's export gives its name up: reader keeps the old arrangement (still
    maintained), a later use gets the new one; a name held by an installed dataflow is refused naming it."""
    ip.user_ns["edges_df"] = edges = frame(np.random.default_rng(5))
    cell = "%%dataflow base{} --inputs e=edges_df\nbv = e.arrange_by('src').export('by_src').count(by='src').view('bv')\n"
    run(ip, capsys, cell.format(""))
    run(ip, capsys, "%%dataflow reader\nfan = df.use('by_src').count(by='src').view('fan')\n")
    run(ip, capsys, "%dataflow drop base")
    r, out = run(ip, capsys, cell.format(""))
    assert r.success, out
    r, out = run(ip, capsys, cell.format(" --replace"))
    assert r.success, out
    assert "by_src" in kp.engine().catalog() and any(n.startswith("by_src~") for n in kp.engine().catalog())
    kp.input("edges_df").insert([(998, 1, "x")])
    kp.input("edges_df").advance_to(2)
    run(ip, capsys, "%dataflow wait")
    assert 998 in set(ip.user_ns["fan"].to_pandas()["src"]) and 998 in set(ip.user_ns["bv"].to_pandas()["src"])
    r, out = run(ip, capsys, "%%dataflow later\nn = df.use('by_src').view('n')\n")
    assert r.success, out
    assert len(ip.user_ns["n"].to_pandas()) == len(edges) + 1
    r, out = run(ip, capsys, "%%dataflow other --inputs e=edges_df\nx = e.arrange_by('src').export('by_src')\n")
    assert not r.success and "exported already (by dataflow 'base')" in out


def test_object_columns_that_are_not_strings_are_refused_by_what_they_hold(ip, capsys):
    """Attack s32: a pandas column of Decimal, date, Period or Interval values was taken as a str column
    and refused as "column 'd' is str but row 0 holds Decimal(...)": it is not a str column."""
    import datetime
    from decimal import Decimal
    cases = {"dec": ([Decimal("1.5")], "Decimal"), "day": ([datetime.date(2020, 1, 1)], "date"),
             "per": (pd.period_range("2020-01", periods=2, freq="M"), "Period"),
             "ivl": (pd.interval_range(0, 2), "Interval")}
    for name, (values, what) in cases.items():
        ip.user_ns["fr_" + name] = pd.DataFrame({"d": values})
        r, out = run(ip, capsys, f"%%dataflow w_{name} --inputs x=fr_{name}\nv_{name} = x.view('v_{name}')\n")
        assert not r.success
        assert f"column 'd': cannot store {what} values" in out and "is str" not in out, out
    ip.user_ns["fr_ok"] = pd.DataFrame({"d": pd.array(["a", "b"], dtype="string")})
    r, out = run(ip, capsys, "%%dataflow w_ok --inputs x=fr_ok\nv_ok = x.view('v_ok')\n")
    assert r.success and sorted(ip.user_ns["v_ok"].to_pandas()["d"]) == ["a", "b"]


def test_output_handle_and_subcommands(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [1, 2, 2]})
    r, out = run(ip, capsys, "%%dataflow h -o flow --inputs t=t\nc = t.count(by='k').view('c')\n")
    assert r.success, out
    flow = ip.user_ns["flow"]
    assert flow.status == "running" and flow["c"] is ip.user_ns["c"] and flow.replaced is False
    r, out = run(ip, capsys, "%dataflow list")
    assert "h" in out and "running" in out and "t" in out
    r, out = run(ip, capsys, "%dataflow stats")
    assert r.success and "arrangements" in out
    r, out = run(ip, capsys, "%dataflow config")
    assert "workers" in out
    r, out = run(ip, capsys, "%dataflow drop h")
    assert r.success and kp.engine().dataflows() == {}
    for bad in ("%dataflow", "%dataflow frobnicate", "%dataflow drop", "%dataflow drop nosuch",
                "%dataflow wait --timeout x", "%%dataflow\nx = 1\n", "%%dataflow q --bogus\nx = 1\n"):
        r, out = run(ip, capsys, bad)
        assert not r.success, bad
        assert "UsageError" in out and "Traceback" not in out, (bad, out)


def test_dataframe_inputs_are_reused_not_reloaded(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [1, 2]})
    run(ip, capsys, "%%dataflow a --inputs t=t\nva = t.view('va')\n")
    r, out = run(ip, capsys, "%%dataflow b --inputs t=t\nvb = t.view('vb')\n")
    assert r.success, out
    assert list(kp.engine().inputs()) == ["t"]
    ip.user_ns["t"] = pd.DataFrame({"k": [7]})   # a different object under the same name
    r, out = run(ip, capsys, "%%dataflow c --inputs t=t\nvc = t.view('vc')\n")
    assert not r.success and "exists already" in out
    assert sorted(ip.user_ns["va"].to_pandas()["k"]) == [1, 2]
    r, out = run(ip, capsys, "%%dataflow d --inputs t=nosuch\nvd = t.view('vd')\n")
    assert not r.success and "nosuch" in out
    ip.user_ns["notaframe"] = 42
    r, out = run(ip, capsys, "%%dataflow e --inputs t=notaframe\nve = t.view('ve')\n")
    assert not r.success and "int" in out and "DataFrame" in out


def test_input_that_fails_to_load_leaves_its_name_free(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"a": ["x", 3, "y"]})   # a string column with an int in row 1
    r, out = run(ip, capsys, "%%dataflow a --inputs t=t\nva = t.view('va')\n")
    assert not r.success and "'a'" in out and "row 1" in out, out
    assert kp.engine().inputs() == {} and kp.engine().dataflows() == {} and "va" not in ip.user_ns
    ip.user_ns["t"] = pd.DataFrame({"a": ["x", "3", "y"]})  # corrected, under the same name
    r, out = run(ip, capsys, "%%dataflow a --inputs t=t\nva = t.view('va')\n")
    assert r.success, out
    assert sorted(ip.user_ns["va"].to_pandas()["a"]) == ["3", "x", "y"]


def test_spark_dataframes_in_and_out(ip, capsys, spark):
    ip.user_ns["spark"] = spark
    ip.user_ns["clicks"] = spark.createDataFrame([("ann", 1), ("bob", 2), ("ann", 3), ("cy", None)],
                                                  "user string, page long").where("page is not null")
    ip.user_ns["stamped"] = spark.sql("select 'ann' as user, timestamp'2026-01-01 00:00:00' as at")
    r, out = run(ip, capsys, "%%dataflow bad --inputs s=stamped\nv = s.view('v')\n")
    assert not r.success and "'at'" in out and "timestamp" in out, out
    assert kp.engine().inputs() == {} and kp.engine().dataflows() == {}
    r, out = run(ip, capsys, "%%dataflow per_user --inputs c=clicks\n"
                             "per_user = c.count(by='user').view('per_user')\n")
    assert r.success, out
    r, out = run(ip, capsys, "back = per_user.to_spark(spark).orderBy('user').collect()")
    assert r.success, out
    assert [tuple(row) for row in ip.user_ns["back"]] == [("ann", 2), ("bob", 1)]
    r, out = run(ip, capsys, "kp.input('clicks').insert(spark.createDataFrame([('bob', 9)], 'user string, page long'))\n"
                             "kp.input('clicks').advance_to(2)\n%dataflow wait per_user")
    assert r.success, out
    assert sorted(map(tuple, ip.user_ns["per_user"].to_pandas().itertuples(index=False))) == [("ann", 2), ("bob", 2)]


def test_a_failing_cell_drops_the_inputs_it_loaded(ip, capsys):
    ip.user_ns.update(strs=pd.DataFrame({"s": ["a", "b"]}), ints=pd.DataFrame({"node": [1, 2]}))
    r, out = run(ip, capsys, "%%dataflow bad --inputs s=strs,n=ints\nj = n.join(s, left_on='node', right_on='s').view('j')\n")
    assert not r.success and "join key 'node' is int64 but 's' is str" in out
    assert kp.engine().inputs() == {}
    r, out = run(ip, capsys, "%%dataflow bad --inputs s=strs\nj = s.map(lambda s: {'x': s.astype(int)}, out={'x': 'int64'}).view('j')\n")
    assert not r.success and "ValueError" in out and "nothing was installed" in out, out  # on its first batch
    assert kp.engine().inputs() == {} and kp.engine().dataflows() == {}
    r, out = run(ip, capsys, "%%dataflow good --inputs s=strs\nj = s.view('j')\n")  # loaded afresh
    assert r.success and sorted(ip.user_ns["j"].to_pandas()["s"]) == ["a", "b"]


@pytest.mark.parametrize("frame_code, expect", [
    ("pd.DataFrame({0: [1]})", "column name 0 is of type int"),
    ("pd.DataFrame([[1, 2]], columns=['a', 'a'])", "duplicate column name 'a'"),
    ("pd.DataFrame({'a': pd.array([2**53 + 1, None], dtype='Int64')})", "column 'a' holds a null (NA) at row 1"),
])
def test_dataframes_the_engine_cannot_take_are_named(ip, capsys, frame_code, expect):
    run(ip, capsys, "bad_df = " + frame_code)
    r, out = run(ip, capsys, "%%dataflow b --inputs t=bad_df\nv = t.view('v')\n")
    assert not r.success and expect in out, out
    assert "Traceback" not in out and "<string>" not in out
    assert kp.engine().inputs() == {} and kp.engine().dataflows() == {}


def test_nullable_pandas_columns_keep_their_types(ip, capsys):
    run(ip, capsys, "ok_df = pd.DataFrame({'a': pd.array([2**53 + 1, 3], dtype='Int64'), "
                    "'s': pd.array(['x', 'y'], dtype='string'), 'b': pd.array([True, False], dtype='boolean')})")
    r, out = run(ip, capsys, "%%dataflow n --inputs t=ok_df\nv = t.view('v')\n")
    assert r.success, out
    got = ip.user_ns["v"].to_pandas().sort_values("a")
    assert got["a"].tolist() == [3, 2**53 + 1] and got["s"].tolist() == ["y", "x"] and got["b"].tolist() == [False, True]


def test_names_views_and_rebinding(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [1, 2]})
    r, out = run(ip, capsys, "%%dataflow 'my flow' --inputs t=t\nv = t.view('v')\n")
    assert not r.success and "UsageError" in out and "one word" in out
    r, out = run(ip, capsys, "%%dataflow names --inputs t=t\nt.view('kp')\nt.view('my view')\n"
                             "t.view('class')\nt = t.map(lambda k: {'k2': k * 2})\nv2 = t.view('v2')\n")
    assert r.success, out
    assert ip.user_ns["kp"] is kp and "view 'kp' is not bound" in out and "a module" in out
    assert "view 'my view' has no notebook name" in out
    assert "view 'class' has no notebook name" in out and "class" not in ip.user_ns  # (a keyword: no name)
    # README: the --inputs names are back to the notebook's own once the body has run, even where the body
    # rebound them (the cell runs again as it is)
    assert isinstance(ip.user_ns["t"], pd.DataFrame) and ip.user_ns["t"]["k"].tolist() == [1, 2]
    assert sorted(ip.user_ns["v2"].to_pandas()["k2"]) == [2, 4]


def test_handles_cancel_and_timeouts(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [1, 2]})
    run(ip, capsys, "%%dataflow h -o H --inputs t=t\nv = t.count().view('v')\n")
    run(ip, capsys, "%%dataflow h --replace -o H2 --inputs t=t\nv = t.view('v')\n")
    H, H2 = ip.user_ns["H"], ip.user_ns["H2"]
    assert H.status == "replaced" and H2.status == "running"
    with pytest.raises(kp.UsageError, match="replaced"):
        H.drop()
    assert "h" in kp.engine().dataflows()  # the old handle did not drop the new version
    H2.cancel()
    assert H2.status == "cancelled"          # visible as soon as cancel returns
    r, out = run(ip, capsys, "%dataflow cancel nosuch")
    assert not r.success and "no dataflow named 'nosuch'" in out and "Traceback" not in out
    for bad in ("-1", "nan"):  # (NaN waited without limit)
        r, out = run(ip, capsys, f"%dataflow wait h --timeout {bad}")
        assert not r.success and "positive" in out and "Traceback" not in out, (bad, out)
    H2.drop()
    run(ip, capsys, "slow_df = pd.DataFrame({'k': [1]})")
    r, out = run(ip, capsys, "%%dataflow slow --no-wait --inputs t=slow_df\nimport time\n"
                             "v = t.map(lambda k: (time.sleep(3), {'k': k})[1], out={'k': 'int64'}).view('slow')\n")
    assert r.success, out
    r, out = run(ip, capsys, "%dataflow wait slow --timeout 0.3")
    assert not r.success and "not up to date after 0.3 s" in out and "Traceback" not in out, out
    r, out = run(ip, capsys, "%dataflow wait slow")
    assert r.success and ip.user_ns["slow"].to_pandas()["k"].tolist() == [1]


def test_wait_timeout_names_every_dataflow_still_behind(ip, capsys):
    run(ip, capsys, "slow_df2 = pd.DataFrame({'k': [1]})")
    for name in ("slow_a", "slow_b"):
        r, out = run(ip, capsys, f"%%dataflow {name} --no-wait --inputs t=slow_df2\nimport time\n"
                                 f"v = t.map(lambda k: (time.sleep(2), {{'k': k}})[1], out={{'k': 'int64'}}).view('{name}v')\n")
        assert r.success, out
    r, out = run(ip, capsys, "%dataflow wait --timeout 0.3")
    assert not r.success and "not up to date after 0.3 s" in out, out
    assert "'slow_a'" in out and "'slow_b'" in out, out
    r, out = run(ip, capsys, "%dataflow wait")
    assert r.success and "'slow_a', 'slow_b'" in out, out
    for name in ("slow_a", "slow_b"):
        run(ip, capsys, f"%dataflow drop {name}")


def test_sorted_head_of_a_large_view_matches_a_full_sort():
    from kpgnb.engine.view import _sorted_head
    rng = np.random.default_rng(3)
    n = 5000
    for first in (rng.integers(0, 50, n), rng.normal(size=n).round(1), np.array([f"s{i % 97}" for i in range(n)], object),
                  np.where(rng.random(n) < 0.999, np.nan, 1.0)):
        f = pd.DataFrame({"a": first, "b": rng.integers(0, 5, n)})
        pd.testing.assert_frame_equal(_sorted_head(f, 20), f.sort_values(["a", "b"]).head(20))


def test_dict_inputs_are_not_kept_alive(ip, capsys):
    import gc
    import weakref
    arr = np.arange(1000)
    ref = weakref.ref(arr)
    ip.user_ns["d"] = {"a": arr}
    del arr
    run(ip, capsys, "%%dataflow dd --inputs t=d\nv = t.view('v')\n")
    r, out = run(ip, capsys, "%%dataflow dd2 --inputs t=d\nv2 = t.view('v2')\n")   # recognised: reused
    assert r.success, out
    run(ip, capsys, "%dataflow drop dd\n%dataflow drop dd2\ndel d")
    gc.collect()
    assert ref() is None


def test_engine_survives_reset(ip, capsys):
    ip.user_ns["t"] = pd.DataFrame({"k": [1, 2, 3]})
    run(ip, capsys, "%%dataflow keep --inputs t=t\nkept = t.view('kept')\n")
    eng = kp.engine()
    run(ip, capsys, "%reset -f")
    assert "kept" not in ip.user_ns
    assert kp.engine() is eng and "keep" in eng.dataflows()
    r, out = run(ip, capsys, "%%dataflow again\nagain = df.input('t').view('again')\n")
    assert r.success, out
    assert sorted(ip.user_ns["again"].to_pandas()["k"]) == [1, 2, 3]


def test_interrupt_stops_waiting_and_leaves_the_dataflow_running(ip, capsys):
    """Ctrl-C during a long first computation: control returns, the cell says how far it got, the
    dataflow keeps computing and `%dataflow wait` later gives the full answer."""
    eng = kp.engine()
    s = eng.input("slow_in", ["x"])
    s.insert([(i,) for i in range(30)])
    s.advance_to(1)
    ip.user_ns.update(time=time, threading=threading)
    t0 = time.monotonic()
    r, out = run(ip, capsys, """%%dataflow slow
def nap(x):
    if (x == 29).any():  # a real batch (the trial call that learns the output columns passes zeros)
        threading.Timer(0.3, __import__("_thread").interrupt_main).start()  # Ctrl-C while the cell waits
        time.sleep(3)
    return x
slow = df.input("slow_in").map(lambda x: {"x": nap(x)}).view("slow")
""")
    assert time.monotonic() - t0 < 30  # a hang check, not a timing
    assert not r.success and "KeyboardInterrupt" in out and "still installed and computing" in out, out
    assert eng.dataflows() == {"slow": "running"}
    r, out = run(ip, capsys, "%dataflow wait slow")
    assert r.success, out
    assert sorted(ip.user_ns["slow"].to_pandas()["x"]) == list(range(30))


def test_unload_stops_engine_threads_and_reload_works(shell, capsys):
    kernel.close()
    shell.run_line_magic("load_ext", "kpgnb")
    shell.user_ns["t"] = pd.DataFrame({"k": [1]})
    assert shell.run_cell("%%dataflow u --inputs t=t\nu = t.view('u')\n").success
    eng = kp.engine()
    shell.run_line_magic("unload_ext", "kpgnb")
    assert eng.closed
    assert shell.find_cell_magic("dataflow") is None and shell.find_line_magic("dataflow") is None
    assert not [t for t in threading.enumerate() if t.name.startswith(("kpgnb-scheduler", "kpgnb-worker"))]
    shell.run_line_magic("load_ext", "kpgnb")
    shell.run_line_magic("reload_ext", "kpgnb")
    r = shell.run_cell("%%dataflow u2 --inputs t=t\nu2 = t.view('u2')\n")
    assert r.success
    assert list(shell.user_ns["u2"].to_pandas()["k"]) == [1]
    capsys.readouterr()


SLOW_BODY = """def nap(k):
    if (k == 2).any():
        time.sleep(2.5)
    return k
v = t.map(lambda k: {"k": nap(k)}).view("v")
"""


def test_a_long_wait_shows_a_progress_line(ip, capsys, monkeypatch):
    from kpgnb import cell
    monkeypatch.setenv("KPGNB_PROGRESS", "1")
    monkeypatch.setattr(cell, "PROGRESS_AFTER_S", 0.0)
    ip.user_ns.update(time=time, t=pd.DataFrame({"k": [1, 2]}))
    r, out = run(ip, capsys, "%%dataflow slowish --inputs t=t\n" + SLOW_BODY)
    assert r.success, out
    assert re.search(r"computing dataflow 'slowish': final before epoch 0 of 1 · \d+ s", out), out


def test_a_long_wait_in_a_kernel_shows_a_progress_bar(ip, capsys, monkeypatch):
    """In a kernel (a shell with a kernel) the progress of a long first computation is a
    kpgnb.widgets.Progress bar displayed in the cell's output, not a stderr line."""
    pytest.importorskip("ipywidgets")
    import IPython.display
    from kpgnb import cell
    from kpgnb.widgets import Progress
    monkeypatch.setenv("KPGNB_PROGRESS", "1")
    monkeypatch.setattr(cell, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    ip.user_ns.update(time=time, t=pd.DataFrame({"k": [1, 2]}))
    r, out = run(ip, capsys, "%%dataflow slowbar --inputs t=t\n" + SLOW_BODY)
    assert r.success, out
    assert "computing dataflow" not in out, out
    bars = [b for b in shown if isinstance(b, Progress)]
    assert len(bars) == 1, shown
    bar = bars[0]
    assert bar.state == "finished" and bar.bar.value == 1.0 and "up to date" in bar.label.value
    assert bar.description == "computing dataflow 'slowbar'"


def test_arrow_tables_and_dicts_of_arrays_as_inputs(ip, capsys):
    import pyarrow as pa
    ip.user_ns["tbl"] = pa.table({"k": [1, 2, 2], "name": ["a", "b", "b"], "w": [0.5, 1.0, 1.5]})
    ip.user_ns["cols"] = {"k": np.array([2, 3]), "flag": np.array([True, False])}
    r, out = run(ip, capsys, """%%dataflow mixed --inputs a=tbl,b=cols
j = a.join(b, on="k").view("j")
""")
    assert r.success, out
    got = ip.user_ns["j"].to_pandas().sort_values("w").reset_index(drop=True)
    assert got.to_dict("list") == {"k": [2, 2], "name": ["b", "b"], "w": [1.0, 1.5], "flag": [True, True]}
    assert kp.engine().inputs()["tbl"].schema.dtypes == ("int64", "str", "float64")


def test_datalog_cell_binds_relations_and_errors_point_at_the_cell_line(ip, capsys):
    """%%datalog: the cell is the program; DataFrame inputs, relations bound as views, -o binds the program,
    a later cell reads an exported relation; a broken cell installs nothing, names its own line and column,
    and drops the inputs it loaded."""
    ip.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3, 5], "dst": [2, 3, 1, 6]})
    r, out = run(ip, capsys, "%%datalog g --inputs edge=edges_df -o prog\n"
                             "tc(x, y) :- edge(x, y).\n"
                             "tc(x, y) :- tc(x, z), edge(z, y).\n"
                             "deg(x, count<y>) :- edge(x, y).\n")
    assert r.success, out
    assert "Datalog program 'g' installed" in out and "g.tc" in out
    tc = ip.user_ns["tc"]
    assert len(tc.to_pandas()) == 10  # the 3-cycle's 9 pairs and (5, 6)
    assert sorted(ip.user_ns["deg"].to_pandas()["y"]) == [1, 1, 1, 1]
    assert ip.user_ns["prog"]["tc"] is tc
    r, out = run(ip, capsys, "%%dataflow later\nv = df.use('g.tc').count(by='x').view('per_x')")
    assert r.success, out
    assert sorted(ip.user_ns["per_x"].to_pandas()["count"]) == [1, 3, 3, 3]

    before = (sorted(kp.engine().dataflows()), sorted(kp.engine().inputs()))
    ip.user_ns["more_df"] = pd.DataFrame({"a": [1], "b": [2]})
    r, out = run(ip, capsys, "%%datalog h --inputs e=more_df\n"
                             "ok(x) :- e(x, _).\n"
                             "bad(x, w) :- e(x, y).\n")
    assert not r.success
    assert isinstance(r.error_in_exec.error, kp.DatalogError)
    err = r.error_in_exec.error
    assert (err.line, err.column) == (3, 8)  # the cell's line 3: 'w' in the head
    assert "head variable 'w'" in out and "   3 | bad(x, w) :- e(x, y)." in out
    assert "Traceback" not in out
    assert (sorted(kp.engine().dataflows()), sorted(kp.engine().inputs())) == before
    r, out = run(ip, capsys, "%%datalog?")
    assert "min<v>" in out and "--inputs" in out


# -- found by an attack on the magics (each test_bug_* failed before its fix) -------------------------------

@pytest.fixture
def ipe(ip):
    """The shell, with a small edges frame in the notebook."""
    ip.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    return ip


def test_bug_functions_defined_in_a_cell_see_the_notebook_globals(ipe, capsys):
    """A function defined in a %%dataflow cell runs with a copy of the namespace as its globals: a later
    cell's assignments are invisible to it (NameError, or a stale value)."""
    r, out = run(ipe, capsys, "%%dataflow r3 --inputs edges=edges_df\nfactor = 2\n"
                             "def helper(src, dst):\n    return {'q': src * factor}\n"
                             "def later():\n    return later_value\n"
                             "rv = edges.map(helper).view('rv')")
    assert r.success, out
    r, out = run(ipe, capsys, "later_value = 42\nresult = later()")
    assert r.success, out
    assert ipe.user_ns["result"] == 42
    run(ipe, capsys, "factor = 10")
    assert ipe.user_ns["helper"](np.array([1]), None)["q"].tolist() == [10]


def test_bug_del_in_a_successful_cell_deletes(ipe, capsys):
    ipe.user_ns["to_delete"] = 5
    r, out = run(ipe, capsys, "%%dataflow d2\ndel to_delete\nv2 = df.input('edges_df').view('v2')"
                 if "edges_df" in kp.engine().inputs() else
                 "%%dataflow d2 --inputs e=edges_df\ndel to_delete\nv2 = e.view('v2')")
    assert r.success, out
    assert "to_delete" not in ipe.user_ns


def test_bug_categorical_int_column_loads_as_int(ipe, capsys):
    """--inputs infers a categorical column as str (CategoricalDtype.kind is 'O'), then refuses its ints
    with 'column 'src' is str but row 0 holds 1 (int)'."""
    ipe.user_ns["cat_df"] = pd.DataFrame({"src": pd.Categorical([1, 2]), "dst": [2, 3]})
    r, out = run(ipe, capsys, "%%dataflow c1 --inputs edges=cat_df\ncv = edges.view('cv')")
    assert r.success, out
    assert sorted(ipe.user_ns["cv"].to_pandas()["src"].tolist()) == [1, 2]


def test_runtime_error_points_at_the_cell_line_and_installs_nothing(ipe, capsys):
    before = run(ipe, capsys, "x_before = 1")
    r, out = run(ipe, capsys, "%%dataflow r1 --inputs edges=edges_df\nok = 1\n\ndef f(src, dst):\n"
                             "    if len(src):\n        raise ValueError('boom in f')\n    return {'q': src}\n"
                             "v = edges.map(f).view('rv')")
    assert not r.success
    assert re.search(r"Cell In\[\d+\], line 6, in f", out), out
    assert "ValueError: boom in f" in out and "failed on its first computation" in out
    assert "ok" not in ipe.user_ns and "rv" not in ipe.user_ns
    assert kp.engine().dataflows() == {} and "edges_df" not in kp.engine().inputs()


def test_error_in_a_function_from_an_earlier_cell_shows_that_function(ipe, capsys):
    run(ipe, capsys, "def ext(src, dst):\n    if len(src):\n        return {'q': src + int('x')}\n    return {'q': src}")
    r, out = run(ipe, capsys, "%%dataflow r2 --inputs edges=edges_df\n\n\nv = edges.map(ext).view('rv')")
    assert not r.success
    assert re.search(r"Cell In\[\d+\], line 3, in ext", out), out
    assert "invalid literal for int()" in out


def test_syntax_error_help_and_replace(ipe, capsys):
    r, out = run(ipe, capsys, "%%dataflow d1 --inputs edges=edges_df\ng = edges.view('v1')\nx = (\n")
    assert not r.success and re.search(r"Cell In\[\d+\], line 3", out) and "SyntaxError" in out
    assert kp.engine().dataflows() == {}
    r, out = run(ipe, capsys, "%%dataflow?")
    assert "--replace" in out and "--inputs" in out
    r, out = run(ipe, capsys, "%%dataflow d1 --inputs edges=edges_df\nv1 = edges.view('v1')")
    assert r.success, out
    r, out = run(ipe, capsys, "%%dataflow d1 --inputs edges=edges_df\nv1 = edges.view('v1')")
    assert not r.success and "--replace" in out
    r, out = run(ipe, capsys, "%%dataflow d1 --inputs edges=edges_df --replace\n"
                             "v1 = edges.map(lambda src, dst: {'q': src + 100}).view('v1')")
    assert r.success, out
    assert sorted(ipe.user_ns["v1"].to_pandas()["q"]) == [101, 102, 103]
    r, out = run(ipe, capsys, "%%dataflow d3\nv3 = df.input('edges_df').view('v3')\nw = df.input('nope')")
    assert not r.success and re.search(r"line 3", out) and "no input named 'nope'" in out
    assert "v3" not in ipe.user_ns


def test_datalog_cell_errors_name_the_cell_line_after_comments(ipe, capsys):
    r, out = run(ipe, capsys, "%%datalog g --inputs edge=edges_df\n/* a\n comment */\n// x\n"
                             "ok(x) :- edge(x, _).\nbad(x, w) :- edge(x, y).")
    assert not r.success and "line 6, column 8" in out
    assert kp.engine().dataflows() == {}
    r, out = run(ipe, capsys, "%%datalog g2 --inputs edge=edges_df\nq(x) :- edge(x, y), y = 'a'.")
    assert not r.success and "line 2" in out and "compares int with str" in out


def test_failing_cell_puts_back_the_names_it_bound_and_no_others(ip, capsys):
    """A failing cell restores what it assigned (also through ``global`` in a function it defines and calls),
    and only that: names another thread sets while it runs (a subscription's callback, a streaming query's
    batch function) stay as that thread left them (the whole namespace was put back, undoing them)."""
    eng = kp.engine()
    clicks = eng.input("clicks", ["user"])
    clicks.insert([(1,)])
    clicks.advance_to(1)
    started, done = threading.Event(), threading.Event()
    ip.user_ns.update(started=started, done=done, mine=1, shared=1)

    def other():
        started.wait(30)
        ip.user_ns["by_thread"] = 1
        ip.user_ns["shared"] = 2
        done.set()
    t = threading.Thread(target=other)
    t.start()
    r, out = run(ip, capsys, """%%dataflow bad
mine = 2
made = 3
def setter():
    global via_global
    via_global = 4
setter()
started.set()
done.wait(30)
x = df.input("clicks").select("nope")
""")
    t.join(30)
    assert not r.success and "nothing was installed" in out, out
    ns = ip.user_ns
    assert ns["mine"] == 1 and "made" not in ns and "via_global" not in ns and "setter" not in ns and "x" not in ns
    assert ns["by_thread"] == 1 and ns["shared"] == 2
    assert "bad" not in eng.dataflows()
    # code that binds names it does not show (exec, globals(), an import in a function under `global`)
    for body in ("exec('made = 3')", "globals()['made'] = 3", "def f():\n    global made\n    import os as made\nf()"):
        r, out = run(ip, capsys, f"%%dataflow bad\n{body}\nx = df.input('clicks').select('nope')\n")
        assert not r.success and "made" not in ip.user_ns and "x" not in ip.user_ns, (body, out)


@pytest.mark.parametrize("magic", ["dataflow", "datalog"])
@pytest.mark.parametrize("var", ["1x", "class", "a-b"])
def test_output_variable_must_be_a_notebook_name(ip, capsys, magic, var):
    """``-o 1x`` bound the handle under a name no cell can read; it is a usage error and installs nothing."""
    body = "v = df.input('t').view('v')" if magic == "dataflow" else "p(x) :- t(x)."
    ip.user_ns["t"] = pd.DataFrame({"x": [1]})
    r, out = run(ip, capsys, f"%%{magic} named -o {var} --inputs t=t\n{body}\n")
    assert not r.success and f"-o {var}: VAR is the notebook variable" in out, out
    assert "named" not in kp.engine().dataflows()
