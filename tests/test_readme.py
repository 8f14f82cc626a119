"""The README's examples run as written."""
import os
import re


README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def blocks():
    text = open(README).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_first_lines_are_the_two_commands():
    lines = open(README).read().splitlines()
    assert "python -m kpgnb demo" in lines[0]
    assert "pytest" in lines[1]
    assert lines[2].strip() == ""


def test_readme_examples_run():
    code = blocks()
    assert len(code) >= 2
    ns = {}
    body, last = code[0].rstrip().rsplit("\n", 1)
    assert last.startswith("eng.drop")
    exec(compile(body, "README-example-1", "exec"), ns)
    assert sorted(ns["view"].to_pandas()["node"]) == [1, 2]
    assert sorted(ns["dv"].to_pandas()["count"]) == [1]
    exec(compile(last, "README-example-1", "exec"), ns)
    eng = ns["eng"]
    assert eng.dataflows() == {} and eng.catalog() == {}
    # the second block continues with the same engine
    exec(compile(code[1], "README-example-2", "exec"), ns)
    eng.wait(ns["both"])
    closure = ns["both"].to_pandas()
    # a accumulates b, b is the transitive closure of the edges (1,2),(3,4) that remain
    assert {(1, 2), (3, 4)} <= set(zip(closure["src"], closure["dst"]))
    eng.close()
