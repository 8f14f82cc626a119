"""Graph algorithms as dataflow fragments over the public API: pass collections (or arrangements) from
an ``eng.dataflow`` block and get maintained results back. Used by the demo, the benchmarks and the tests.

Edges are collections with columns (src, dst); roots and nodes have a column ``node``."""
from __future__ import annotations


def bfs(edges, roots):
    """Distances from a set of roots: iterate + min. ``edges`` (src, dst), ``roots`` (node)."""
    start = roots.map(lambda node: {"node": node, "dist": node * 0})

    def step(d):
        return (d.join(edges, left_on="node", right_on="src")
                 .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
                 .concat(start)
                 .min(by="node", col="dist"))
    return start.iterate(step)


def reachable(edges, roots):
    return roots.iterate(lambda r: r.join(edges, left_on="node", right_on="src")
                         .map(lambda dst: {"node": dst}).concat(roots).distinct())


def propagate_min_label(edges, nodes):
    """Smallest label reachable along edges (src, dst) from each node, starting from ``nodes`` (node, label)."""
    return nodes.iterate(lambda lab: lab.join(edges, left_on="node", right_on="src")
                         .map(lambda dst, label: {"node": dst, "label": label})
                         .concat(nodes).min(by="node", col="label"))


def wcc(edges):
    """Weakly connected components: every node labelled with the smallest node id of its component."""
    sym = edges.concat(edges.map(lambda src, dst: {"src": dst, "dst": src}))
    nodes = sym.map(lambda src: {"node": src, "label": src}).distinct()
    return propagate_min_label(sym, nodes)


def scc(edges):
    """Edges (src, dst) whose endpoints lie in the same strongly connected component: repeatedly keep the
    edges whose endpoints get the same label from forward and then backward label propagation (a doubly
    nested iteration)."""
    def trim(cycle, es):
        # label each node by the smallest node reaching it along `cycle`; keep `es` edges within a label,
        # reversed (so two trims restore the orientation)
        nodes = es.map(lambda dst: {"node": dst, "label": dst}).distinct()
        labels = propagate_min_label(cycle, nodes)
        l1 = es.join(labels, left_on="src", right_on="node").map(
            lambda src, dst, label: {"src": src, "dst": dst, "l1": label})
        l2 = l1.join(labels, left_on="dst", right_on="node")
        return l2.filter(lambda l1, label: l1 == label).map(lambda src, dst: {"src": dst, "dst": src})

    def body(inner):
        graph = edges.enter(inner.scope)
        trans = inner.map(lambda src, dst: {"src": dst, "dst": src})
        return trim(trim(inner, graph), trans)
    return edges.iterate(body)
