"""Graph algorithms as dataflow fragments over the public API: pass collections (or arrangements) from
an ``eng.dataflow`` block and get maintained results back. Used by the demo, the benchmarks and the tests.

Edges are collections with columns (src, dst); roots and nodes have a column ``node``."""
from __future__ import annotations

import numpy as np

from .engine.collection import Arranged, Collection, Variable
from .engine.columns import is_int
from .engine.errors import ArgumentTypeError, SchemaError
from .engine.ife import report_full
from .engine.kernels.times import bit_lengths


_COLUMNS = {"edges": ("src", "dst"), "roots": ("node",), "sources": ("source",)}  # what each argument reads


def _collections(fn: str, edge_columns=("src", "dst"), **args):
    """Refuse what is not a collection of a dataflow block (an input session, a DataFrame) with what to
    pass instead, and a collection without a column the query reads (``edge_columns`` for ``edges``),
    naming the query, argument and column rather than the internal operator that would fail on it."""
    for what, x in args.items():
        if not isinstance(x, Collection):
            raise ArgumentTypeError(f"graphs.{fn}: {what}: expected a Collection of the dataflow (df.input(NAME), "
                                    f"df.use(NAME) or a result of its operators), got {type(x).__name__}")
        need = edge_columns if what == "edges" else _COLUMNS.get(what, ())
        missing = [c for c in need if c not in x.schema.names]
        if missing:
            raise SchemaError(f"graphs.{fn}: {what} has no column {missing[0]!r}: it needs columns {list(need)}, "
                              f"and has {list(x.schema.names)} (rename(old=new) them)")
    # node ids: src, dst and the roots' or sources' ids are one type (else an internal concat or join fails)
    edges = args.get("edges")
    if edges is not None:
        ids = [("edges", "src"), ("edges", "dst")] + [(w, _COLUMNS[w][0]) for w in ("roots", "sources") if w in args]
        types = [(w, c, args[w].schema.dtype(c)) for w, c in ids]
        for w, c, t in types[1:]:
            if t != types[0][2]:
                raise SchemaError(f"graphs.{fn}: {w} column {c!r} is {t} and edges column 'src' is {types[0][2]}: "
                                  f"node ids must be one type (cast one with map)")


def bfs(edges, roots, memory: str = "full", drop=None):
    """Distances from a set of roots: iterate + min. ``edges`` (src, dst), ``roots`` (node); output (node,
    dist). ``memory`` ("full", "jod" or "drop", with ``drop=kp.Drop(...)``) as in ``Collection.ife``: the
    answer is the same."""
    _collections("bfs", edges=edges, roots=roots)
    start = roots.map(lambda node: {"node": node, "dist": np.zeros(len(node), np.int64)})  # (any node type)
    if memory != "full" or drop is not None:
        return start.ife(edges, key="node", node="node", value="dist",
                         message=lambda dist: dist + 1, agg="min", memory=memory, drop=drop, name="bfs")

    traces = []

    def step(d):
        dk = d.arrange_by("node")  # (the arrangement the join would make: named, to be reported)
        res = (dk.join(edges, left_on="node", right_on="src")
               .map(lambda dst, dist: {"node": dst, "dist": dist + 1})
               .concat(start)
               .min(by="node", col="dist"))
        traces[:] = [res.op.inputs[0].owned_trace(), dk.op.owned_trace(), res.op.owned_trace()]
        return res
    out = start.iterate(step)
    report_full(start.builder, "bfs", traces[0], traces[1:], "min")
    return out


def reachable(edges, roots, memory: str = "full", drop=None):
    """The nodes reachable from ``roots`` (node) along ``edges`` (src, dst), the roots included; output
    (node). ``memory`` and ``drop`` as in ``bfs``."""
    _collections("reachable", edges=edges, roots=roots)
    roots = roots.select("node")
    if memory != "full" or drop is not None:
        start = roots.map(lambda node: {"node": node, "seen": np.zeros(len(node), np.int64)})
        return start.ife(edges, key="node", node="node", value="seen",
                         message=lambda seen: seen, agg="min", memory=memory, drop=drop,
                         name="reachable").select("node")
    traces = []

    def step(r):
        rk = r.arrange_by("node")  # (the arrangement the join would make: named, to be reported)
        res = rk.join(edges, left_on="node", right_on="src").map(lambda dst: {"node": dst}).concat(roots).distinct()
        traces[:] = [res.op.inputs[0].owned_trace(), rk.op.owned_trace(), res.op.owned_trace()]
        return res
    out = roots.iterate(step)
    # (a distinct: the min of a constant, as the other modes compute it)
    report_full(roots.builder, "reachable", traces[0], traces[1:], "min")
    return out


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


def _relax(lab, edges, start, traces=None):
    """One round of label propagation; ``traces`` (a list): filled with the reduce's input, the labels'
    arrangement and the reduce's output, for ``report_full``."""
    lk = lab.arrange_by("node")  # (the arrangement the join would make)
    res = (lk.join(edges, left_on="node", right_on="src")
           .map(lambda dst, label: {"node": dst, "label": label})
           .concat(start).min(by="node", col="label"))
    if traces is not None:
        traces[:] = [res.op.inputs[0].owned_trace(), lk.op.owned_trace(), res.op.owned_trace()]
    return res


def bit_length_rounds(label):
    """A label's round in ``wcc``: its bit length (0 for labels <= 0, and for non-integer labels), so
    label 0 and 1 start, 2-3 follow a round later, 4-7 after that... On a random graph a component's
    smallest labels then reach most nodes before the large ones enter: about one labelling per edge
    instead of one per edge per round."""
    label = np.asarray(label)
    if label.dtype.kind not in "iu":
        return np.zeros(len(label), np.int64)
    return bit_lengths(np.require(label, np.int64, ["C", "W"]))  # (the one compiled signature: see kernels)


def wcc(edges, memory: str = "full", drop=None):
    """Weakly connected components: every node labelled with the smallest node id of its component.
    ``memory`` (full, jod or drop) and ``drop`` as in ``Collection.ife``; the answer is the same. Node ids
    are int64, float64 or str (str ids, ordered as strings, take memory="full": the memory modes keep
    numeric states); "jod" and "drop" reserve the int64 minimum for "no label" and refuse it as a node id."""
    _collections("wcc", edges=edges)
    edges = edges.select("src", "dst")
    sym = edges.concat(edges.map(lambda src, dst: {"src": dst, "dst": src})).arrange_by("src")
    # the nodes are the keys of the one arrangement of the edges (a reduce over it re-sorts nothing)
    nodes = sym.min(by="src", col="dst").map(lambda src: {"node": src, "label": src})
    if edges.schema.dtype("src") not in ("int64", "float64"):
        if memory != "full":
            raise SchemaError(f"wcc: memory={memory!r} keeps numeric labels; node ids of type "
                              f"{edges.schema.dtype('src')} take memory='full'")
        if drop is not None:
            raise SchemaError("wcc: drop= applies to memory='drop' only (memory='full')")
        traces = []
        out = nodes.iterate(lambda lab: _relax(lab, sym, nodes, traces))  # (propagate_min_label's loop)
        report_full(nodes.builder, "wcc", traces[0], traces[1:], "min")
        return out
    return nodes.ife(sym, key="node", node="node", value="label", message=lambda label: label, agg="min",
                     memory=memory, drop=drop, symmetric=True, name="wcc",
                     start_rounds=bit_length_rounds if memory == "full" else None)


def scc(edges, memory: str = "full", drop=None):
    """Edges (src, dst) whose endpoints lie in the same strongly connected component: repeatedly keep the
    edges whose endpoints get the same label from forward and then backward label propagation (a doubly
    nested iteration). ``memory`` is "full" only: its label propagations run inside the outer loop, and
    join-on-demand and dropping process top-level epochs (``Collection.ife``)."""
    _collections("scc", edges=edges)
    if memory not in ("full", "jod", "drop"):
        raise SchemaError(f"scc: memory must be 'full', 'jod' or 'drop', not {memory!r}")
    if memory != "full" or drop is not None:
        raise SchemaError(f"scc: memory={memory!r}{' with drop=' if drop is not None else ''} is not available: "
                          f"its label propagations run inside a loop (a doubly nested iteration), and the "
                          f"memory modes process top-level epochs; use memory='full'")
    edges = edges.select("src", "dst")

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


def sssp(edges, sources, memory: str = "full", drop=None):
    """Weighted shortest distances from many sources at once, sharing one edge arrangement: ``edges``
    (src, dst, w) with non-negative weights (int or float), ``sources`` (source). Output (source, node,
    dist): every node reachable from a source, with its distance (the paper's SPSP workload).
    ``memory`` is "full", "jod" or "drop" (with ``drop=kp.Drop(...)``): see ``Collection.ife``."""
    _collections("sssp", ("src", "dst", "w"), edges=edges, sources=sources)
    wt = edges.schema.dtype("w")
    if wt not in ("int64", "float64"):
        raise SchemaError(f"sssp: the weight column 'w' must be int64 or float64, not {wt}")
    dist_dtype = np.float64 if wt == "float64" else np.int64
    start = sources.map(lambda source: {"source": source, "node": source,
                                        "dist": np.zeros(len(source), dist_dtype)})
    # weights are data: each one is checked as it arrives (a negative cycle would never settle), by a
    # filter that keeps every row (so that the Spark backend runs it too)
    if isinstance(edges, Arranged) and edges.key_names == ["src"] and edges.val_names[:2] == ["dst", "w"]:
        # the edges' own arrangement by src (a keyed input, an export; further columns after w): the query
        # reads it, and the check runs beside it (read by nothing, built first so it runs first), not on a
        # copy arranged again
        edges.filter(_non_negative_weights)
        checked = edges
    else:
        checked = _checked_edges(edges)
    return start.ife(checked, key=["source", "node"], node="node", value="dist",
                     message=_path_length if wt == "int64" else _float_path_length, agg="min",
                     memory=memory, drop=drop, name="sssp")


def _checked_edges(edges):
    """(src, dst, w) of ``edges`` with the weight check, built once per dataflow for one collection: sssp
    queries over the same edges then read one (src, dst, w) collection, which ``ife`` arranges once for
    them all (engine/ife.py ``_shared_arrangement``), not a copy of the edges each."""
    return edges.shared("sssp edges", lambda e: e.select("src", "dst", "w").filter(_non_negative_weights))


def _float_path_length(dist, w):
    """dist + w for float64 distances: a sum past the largest float is inf, a distance like any other."""
    with np.errstate(over="ignore"):
        return dist + w


def _path_length(dist, w):
    """dist + w for int64 distances, refusing to wrap (weights are non-negative, so a sum below its
    distance wrapped): a wrapped sum would be a negative distance."""
    out = dist + w
    if (out < dist).any():
        i = np.flatnonzero(out < dist)[0]
        raise OverflowError(f"sssp: a path length overflows int64 ({dist[i]} + weight {w[i]}); use "
                            f"float64 weights for such lengths")
    return out


def _non_negative_weights(src, dst, w):
    bad = ~(np.asarray(w) >= 0)  # (NaN too)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"sssp: edge weights must be non-negative numbers, got {_scalar(w[i])!r} on the edge "
                         f"{_scalar(src[i])!r} -> {_scalar(dst[i])!r}")
    return np.ones(len(w), bool)


def _scalar(x):
    """A column's element as a plain Python value: a NumPy scalar's ``.item()``, a str (str node ids reach a
    filter as Python strs, which have no ``.item()``) as it is."""
    return x.item() if isinstance(x, np.generic) else x


def khop(edges, sources, k: int, memory: str = "full", drop=None):
    """The nodes within ``k`` hops of each source: ``edges`` (src, dst), ``sources`` (source). Output
    (source, node, hops), hops the fewest edges from the source (0 for the source itself)."""
    _collections("khop", edges=edges, sources=sources)
    if not is_int(k) or k < 0:
        raise SchemaError(f"khop needs k >= 0 hops (an int), got {k!r}")
    start = sources.map(lambda source: {"source": source, "node": source, "hops": np.zeros(len(source), np.int64)})
    return start.ife(edges, key=["source", "node"], node="node", value="hops",
                     message=lambda hops: (hops + 1, hops < k), agg="min", memory=memory, drop=drop, name="khop")


def pagerank(edges, iterations: int = 10, alpha: float = 0.85, memory: str = "full", drop=None):
    """PageRank by ``iterations`` rounds of power iteration on ``edges`` (src, dst), unnormalised as in
    differential dataflow's example: rank(v) = (1 - alpha) + alpha * sum over u -> v of rank(u) / outdeg(u),
    starting from 1 - alpha at every node with an edge. Output (node, rank), float64. Each round's sum is
    taken over the consolidated values of a node, so retractions cancel exactly."""
    _collections("pagerank", edges=edges)
    if not is_int(iterations) or iterations < 1:
        raise SchemaError(f"pagerank needs iterations >= 1 (an int), got {iterations!r}")
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)) \
            or not 0 <= alpha <= 1:
        raise SchemaError(f"pagerank: alpha is the damping factor, a number from 0 to 1, got {alpha!r}")
    alpha = float(alpha)
    edges = edges.select("src", "dst")
    nodes = edges.map(lambda src: {"node": src}).concat(edges.map(lambda dst: {"node": dst})).distinct()
    base = nodes.map(lambda node: {"node": node, "rank": np.full(len(node), 1.0 - alpha)})
    return base.ife(edges, key="node", node="node", value="rank",
                    message=lambda rank, degree: alpha * rank / degree, agg="sum", rounds=int(iterations),
                    memory=memory, drop=drop, name="pagerank")


_NAN = object()  # rpq's key for a NaN transition label


def _in_int64(x) -> bool:
    """An int (``is_int``) that int64 holds."""
    return -(1 << 63) <= int(x) < (1 << 63)


def rpq(edges, sources, transitions, accept, start_state: int = 0, memory: str = "full", drop=None):
    """A regular path query as a search of the product of the graph with an automaton: ``edges`` (src,
    label, dst), ``sources`` (source), ``transitions`` a list of (state, label, next state) with int
    states and the labels' dtype, ``accept`` the accepting states. Output (source, node): the nodes a
    path from the source reaches whose labels spell a word the automaton accepts."""
    _collections("rpq", ("src", "label", "dst"), edges=edges, sources=sources)
    label_dtype = edges.schema.dtype("label")
    for what, x in (("transitions", transitions), ("accept", accept)):
        if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
            of = "(state, label, next state) triples" if what == "transitions" else "accepting states"
            raise SchemaError(f"rpq: {what} is a list of {of}, got {x!r}")
    accept = list(accept)  # (read twice below: a generator once)
    trans = []
    for t in transitions:
        if not isinstance(t, (tuple, list)) or len(t) != 3 or not is_int(t[0]) or not is_int(t[2]):
            raise SchemaError(f"rpq: a transition is (state, label, next state) with int states, got {t!r}")
        for q in (t[0], t[2]):
            if not _in_int64(q):
                raise SchemaError(f"rpq: transitions: automaton state {int(q)} (in {t!r}) is outside int64")
        trans.append((int(t[0]), t[1], int(t[2])))
    for what, qs in (("start_state", [start_state]), ("accept", accept)):
        for q in qs:
            if not is_int(q):
                raise SchemaError(f"rpq: automaton states are ints, got {q!r} ({what})")
            if not _in_int64(q):
                raise SchemaError(f"rpq: {what}: automaton state {int(q)} is outside int64")
    table = {}  # label -> its (state, next state) pairs; a NaN label as _NAN (it matches NaN, as a join does)
    for q, lab, q2 in trans:
        table.setdefault(_NAN if isinstance(lab, (float, np.floating)) and lab != lab else lab, []).append((q, q2))
    labels = [lab for _, lab, _ in trans]
    accept = np.asarray(sorted(int(q) for q in accept), np.int64)
    start_state = int(start_state)

    def moves(src, label, dst):
        # each edge once per automaton transition on its label: (state, next state) pairs
        idx, qs, q2s = [], [], []
        for lab, pairs in table.items():
            hit = np.flatnonzero(np.isnan(label) if lab is _NAN else label == lab)
            for q, q2 in pairs:
                idx.append(hit)
                qs.append(np.full(len(hit), q, np.int64))
                q2s.append(np.full(len(hit), q2, np.int64))
        index = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        return ({"src": src[index], "state": np.concatenate(qs) if qs else np.zeros(0, np.int64),
                 "dst": dst[index], "next": np.concatenate(q2s) if q2s else np.zeros(0, np.int64)}, index)
    if label_dtype == "str":
        labels_ok = all(isinstance(lab, str) for lab in labels)
    elif label_dtype == "float64":
        labels_ok = all(isinstance(lab, (int, float, np.integer, np.floating)) and not isinstance(lab, bool)
                        for lab in labels)
    elif label_dtype == "bool":
        labels_ok = all(isinstance(lab, (bool, np.bool_)) for lab in labels)
    else:
        labels_ok = all(is_int(lab) for lab in labels)
        wide = [lab for lab in labels if labels_ok and not _in_int64(lab)]
        if wide:  # (it would match no edge: an int64 column holds no such value)
            raise SchemaError(f"rpq: transitions: label {int(wide[0])} is outside int64, the edges' label "
                              f"column's type ({label_dtype})")
    if not labels_ok:
        raise SchemaError(f"rpq: transition labels must be {label_dtype} like the edges' label column")
    product = edges.flat_map(moves, repeat=False)
    start = sources.map(lambda source: {"source": source, "node": source,
                                        "state": np.full(len(source), start_state, np.int64),
                                        "reached": np.zeros(len(source), np.int64)})
    reached = start.ife(product, key=["source", "node", "state"], node=["node", "state"], value="reached",
                        src=["src", "state"], dst=["dst", "next"], message=lambda reached: reached, agg="min",
                        memory=memory, drop=drop, name="rpq")
    return reached.filter(lambda state: np.isin(state, accept)).map(
        lambda source, node: {"source": source, "node": node}).distinct()
