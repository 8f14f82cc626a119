"""Compile (or load from numba's on-disk cache) the engine's kernels by running a tiny workload that
touches every operator family, at loop depths 1 to 3. The first run after installing compiles for a
while; later runs load cached machine code in about a second."""
from __future__ import annotations

import time

import numpy as np


def warm_kernels(workers: int = 2) -> float:
    """Run the warm-up workload; returns the seconds it took."""
    from .runtime import Engine

    t0 = time.perf_counter()
    with Engine(workers=workers) as eng:
        e = eng.input("e", ["src", "dst"])
        r = eng.input("r", ["node"])
        f = eng.input("f", ["k", "x"], dtypes={"x": "float64"})
        e.insert([(0, 1), (1, 2), (2, 0), (2, 3)])
        r.insert([0])
        f.insert([(1, 0.5), (1, 1.5), (2, 2.0)])
        for s in (e, r, f):
            s.advance_to(1)
        with eng.dataflow("warm") as df:
            edges = df.input("e")
            g = edges.arrange_by("src")
            dist = df.input("r").map(lambda node: {"node": node, "dist": node * 0}).iterate(
                lambda d: d.join(g, left_on="node", right_on="src")
                           .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                           .concat(d).min(by="node", col="dist"))
            nested = edges.iterate(lambda x: x.iterate(lambda y: y.concat(y.join(x, left_on="dst", right_on="src")
                                   .select("src", "dst_right").rename(dst_right="dst")).distinct()))
            pos = edges.filter(lambda src: src > 0)
            views = [dist.view("dist"), nested.view("nested"),
                     edges.count(by="src").view("count"), edges.max(by="src", col="dst").view("max"),
                     edges.argmin(by="src", col="dst").view("argmin"),
                     edges.top_k(by="src", order_by="dst", k=1).view("topk"),
                     edges.semijoin(df.input("r"), left_on="src", right_on="node").view("semi"),
                     edges.antijoin(df.input("r"), left_on="src", right_on="node").view("anti"),
                     edges.select("src").threshold(lambda c: c).view("threshold"),
                     df.input("f").sum(by="k", col="x").view("sum"),
                     df.input("f").argmax(by="k", col="x").view("argmax_f"),  # order keys of floats
                     pos.flat_map(lambda src, dst: ({"a": src, "b": dst}, 1 + 0 * src))
                        .concat(pos.rename(src="a", dst="b").negate()).consolidate().view("misc")]
            edges.arrange_by("dst").export("warm_by_dst")
        for v in views:
            eng.wait(v)
            v.to_pandas()
        h = eng.trace("warm_by_dst")
        h.cursor(0).seek_keys(np.array([[1, 2]], np.int64))
        h.close()
        e.remove([(2, 3)])
        e.advance_to(2)
        r.advance_to(2)
        f.advance_to(2)
        for v in views:
            eng.wait(v)
    return time.perf_counter() - t0
