"""The public surface exactly as DESIGN.md section 4 writes it."""
import numpy as np
import pandas as pd

import kpgnb as kp


def test_design_example():
    eng = kp.Engine(workers=2)
    edges = eng.input("edges", ["src", "dst"])
    edges.insert([(1, 2), (2, 3)])
    edges.insert({"src": np.array([3]), "dst": np.array([4])})
    edges.insert(pd.DataFrame({"src": [7], "dst": [8]}))
    edges.remove([(7, 8)])
    edges.update([(4, 5)], [1])
    edges.advance_to(1)
    roots = eng.input("roots", ["node"])
    roots.insert([(1,)])
    roots.advance_to(1)
    with eng.dataflow("reach") as df:
        e = df.input("edges")
        g = e.arrange_by("src").export("edges_by_src")
        r = df.input("roots").iterate(
            lambda r: r.join(g, left_on="node", right_on="src")
                       .map(lambda dst: {"node": dst})
                       .concat(r).distinct())
        view = r.view("reachable")
    eng.wait(view)
    assert sorted(view.to_pandas()["node"]) == [1, 2, 3, 4, 5]
    assert view.frontier == kp.Antichain([(1,)])
    st = eng.stats()
    assert any(a["name"] == "edges_by_src" for a in st["arrangements"])
    with eng.dataflow("q2") as df:
        g = df.use("edges_by_src")
        out = g.count(by="src").view("out")
    eng.drop("reach")
    edges.insert([(5, 6)])
    edges.advance_to(2)
    roots.advance_to(2)
    eng.wait(out)
    assert sorted(map(tuple, out.to_pandas().itertuples(index=False))) == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    eng.drop("q2")
    assert eng.catalog() == {}
    edges.close()
    roots.close()
    eng.close()
