"""Graph algorithms as dataflow fragments over the public API: pass collections (or arrangements) from
an ``eng.dataflow`` block and get maintained results back. Used by the demo, the benchmarks and the tests.

Edges are collections with columns (src, dst); roots and nodes have a column ``node``."""
from __future__ import annotations

import numpy as np

from .engine.collection import Variable


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


def propagate_min_label(edges, nodes, label_rounds=None):
    """Smallest label reachable along edges (src, dst) from each node, starting from ``nodes`` (node, label).

    ``label_rounds(label) -> rounds`` (optional) delays each node's own label to the loop round it gives
    (``enter_at``), as differential dataflow's ``propagate_at`` does: labels likely to win enter first, so
    the others are mostly beaten on arrival and never spread. The answer is the same either way."""
    if label_rounds is None:
        return nodes.iterate(lambda lab: _relax(lab, edges, nodes))
    scope = nodes.scope.loop()
    lab = Variable(scope, columns=nodes.columns, dtypes=[nodes.schema.dtype(c) for c in nodes.columns])
    return lab.set(_relax(lab, edges, nodes.enter_at(scope, label_rounds))).leave()


def _relax(lab, edges, start):
    return (lab.join(edges, left_on="node", right_on="src")
            .map(lambda dst, label: {"node": dst, "label": label})
            .concat(start).min(by="node", col="label"))


def bit_length_rounds(label):
    """A label's round in ``wcc``: its bit length (0 for labels <= 0, and for non-integer labels), so
    label 0 and 1 start, 2-3 follow a round later, 4-7 after that... On a random graph a component's
    smallest labels then reach most nodes before the large ones enter: about one labelling per edge
    instead of one per edge per round."""
    label = np.asarray(label)
    if label.dtype.kind not in "iu":
        return np.zeros(len(label), np.int64)
    y = np.maximum(label.astype(np.int64), 0)
    out = np.zeros(len(y), np.int64)
    for shift in (32, 16, 8, 4, 2, 1):  # binary search on the highest set bit, exact for every int64
        high = y >= (np.int64(1) << shift)
        out[high] += shift
        y = np.where(high, y >> shift, y)
    out += y > 0
    return out


def wcc(edges):
    """Weakly connected components: every node labelled with the smallest node id of its component."""
    sym = edges.concat(edges.map(lambda src, dst: {"src": dst, "dst": src})).arrange_by("src")
    # the nodes are the keys of the one arrangement of the edges (a reduce over it re-sorts nothing)
    nodes = sym.min(by="src", col="dst").map(lambda src: {"node": src, "label": src})
    return propagate_min_label(sym, nodes, label_rounds=bit_length_rounds)


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
