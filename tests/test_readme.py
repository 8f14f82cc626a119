"""The README's examples run as written."""
import contextlib
import io
import linecache
import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def blocks(lang="python"):
    text = open(README).read()
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def run_block(block, n, ns, source=None, first_line=1):
    """Execute README python block ``n`` (numbered from 1 in reading order), or the part of it ``source``
    that starts at its line ``first_line``, in ``ns``. Tracebacks name the file README-block-n and show
    the block's own line numbers and text."""
    filename = f"README-block-{n}"
    linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
    source = block if source is None else source
    exec(compile("\n" * (first_line - 1) + source, filename, "exec"), ns)


def test_first_lines_are_the_two_commands():
    """The README opens with its title and one shell block of exactly two commands: the demo, then the
    tests (.ci/run runs the second as written)."""
    lines = open(README).read().splitlines()
    assert lines[0] == "# kpgnb"
    assert lines[1] == ""
    assert re.fullmatch(r"```(sh|shell|bash|console)?", lines[2]), lines[2]
    demo, test = lines[3], lines[4]
    assert "python -m kpgnb demo" in demo
    assert "pytest" in test and "kpgnb demo" not in test
    assert lines[5] == "```", "the shell block must hold exactly the two commands"
    assert lines[6] == ""


def test_readme_examples_run():
    """Every python block, in order, in one namespace (a later block continues the earlier ones)."""
    code = blocks()
    assert len(code) >= 2
    # no python example hides behind another spelling of the fence
    assert len(re.findall(r"^```[ \t]*(py|python|python3|pycon|ipython)\b", open(README).read(), re.M)) == \
        len(code) + len(blocks("ipython"))
    ns = {}
    try:
        for n, block in enumerate(code, 1):
            if n == 1:
                body, last = block.rstrip().rsplit("\n", 1)
                assert last.startswith("eng.drop")
                run_block(block, n, ns, body)
                assert sorted(ns["view"].to_pandas()["node"]) == [1, 2]
                assert sorted(ns["dv"].to_pandas()["count"]) == [1]
                run_block(block, n, ns, last, first_line=body.count("\n") + 2)
                eng = ns["eng"]
                assert eng.dataflows() == {} and eng.catalog() == {}
            elif ".inspect(" in block and "kp.spark.run" in block:
                printed = io.StringIO()  # the scale-out refusal: the error is caught and printed
                with contextlib.redirect_stdout(printed):
                    run_block(block, n, ns)
                assert "cannot translate the inspect" in printed.getvalue(), printed.getvalue()
            else:
                run_block(block, n, ns)
            if "kp.spark.follow" in block:
                # the Spark example: the sink's changes sum to the view, which took the streamed batch
                net = ns["changes"].groupBy("user", "count").sum("diff").where("`sum(diff)` != 0").toPandas()
                rows = sorted(map(tuple, ns["per_user"].to_pandas().itertuples(index=False)))
                assert sorted(zip(net["user"], net["count"])) == rows == [("ann", 1), ("bob", 1), ("cy", 1)]
            if "kp.spark.run(levels" in block:
                # scale out: Spark's views hold what the engine's view holds, and BFS from node 1 gives
                as_rows = lambda pdf: sorted(map(tuple, pdf.itertuples(index=False)))  # noqa: E731
                assert as_rows(ns["out"]["per_level"].toPandas()) == as_rows(ns["per_level"].to_pandas()) == \
                    [(0, 1), (1, 2), (2, 1)]
                assert as_rows(ns["out"]["dist"].toPandas()) == [(1, 0), (2, 1), (3, 2), (4, 1)]
            if "kp.spark.run(" in block and 'diff_col="diff"' in block:
                # the log's net multiplicities: (1, 4) was inserted and retracted
                assert sorted(map(tuple, ns["deg"]["out_edges"].toPandas().itertuples(index=False))) == \
                    [(1, 2), (2, 1)]
            if n == 2:
                # the second block continues with the same engine
                eng.wait(ns["both"])
                closure = ns["both"].to_pandas()
                # a accumulates b, b is the transitive closure of the edges (1,2),(3,4) that remain
                assert {(1, 2), (3, 4)} <= set(zip(closure["src"], closure["dst"]))
    finally:
        import kpgnb as kp
        engines = {id(v): v for v in ns.values() if isinstance(v, kp.Engine)}
        for e in engines.values():
            e.close()



def test_readme_notebook_examples_run():
    """The ipython blocks (the notebook section), in order, as cells of one IPython shell."""
    from IPython.core.interactiveshell import InteractiveShell

    from kpgnb import kernel
    shell = InteractiveShell.instance()
    kernel.close()
    try:
        for n, block in enumerate(blocks("ipython"), 1):
            r = shell.run_cell(block)
            assert r.success, (n, r.error_in_exec)
        assert sorted(shell.user_ns["dist"].to_pandas()["node"]) == [1, 2, 3, 4]
        assert "edges_by_src" in kernel.engine().catalog()
    finally:
        shell.run_line_magic("unload_ext", "kpgnb")
