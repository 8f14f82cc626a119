"""``Collection.ife``: the iterate-join-aggregate pattern (the third paper's iterative frontier expansion)
in three memory modes, and the statistics each reports.

- ``"full"``: join, concat and a reduce inside ``iterate`` — differential dataflow as everywhere else,
  which keeps the join's output differences (the reference).
- ``"jod"``: one operator (engine/operators/ife.py) that keeps only a per-vertex timeline of states and
  joins on demand.
- ``"drop"``: the same, leaving some timeline entries out (engine/dropping.py).

All three give the same collection at every epoch. ``message`` names its arguments by column: the
state's value column, any edge payload column, and ``degree`` (the sender's out-degree)."""
from __future__ import annotations

import functools
import inspect
import weakref

import numpy as np

from .columns import SchemaError, is_int
from .dataflow import Site
from .errors import ArgumentTypeError, UsageError
from .dropping import Drop
from .operators.ife import AGGS, IfeOp, IfeSpec, message_ints, message_keep, message_split, message_values

MODES = ("full", "jod", "drop")


class FullReport:
    """What a ``memory="full"`` IFE keeps: the join's output (the reduce's input arrangement) and the
    states (the loop variable's arrangement and the reduce's output)."""

    def __init__(self, builder, name, join_trace, state_traces, agg):
        self.name = name
        self.label = f"{builder.name}: ife {name!r}"  # (as an IfeOp names itself)
        self.agg = agg
        self.join = [weakref.ref(join_trace)] if join_trace is not None else []  # (none: rounds=0)
        self.states = [weakref.ref(t) for t in state_traces]

    def report(self) -> dict:
        def size(refs):
            recs = byts = 0
            for ref in refs:
                t = ref()
                if t is not None:
                    st = t.stats()
                    recs += st["records"]
                    byts += st["bytes"]
            return int(recs), int(byts)
        jr, jb = size(self.join)
        sr, sb = size(self.states)
        return {"operator": self.label, "mode": "full", "agg": self.agg, "state_differences": sr,
                "join_differences": jr, "dropped": 0, "dropped_total": 0, "bloom": None, "recomputed": 0,
                "bytes": {"state": sb, "join": jb, "dropped_tracker": 0}}


def report_full(builder, name: str, join_trace, state_traces, agg: str) -> str:
    """List a full-mode IFE built as a plain ``iterate`` (``kpgnb.graphs``' bfs, reachable, wcc over str
    ids) in ``eng.stats()["ife"]`` as ``_full``'s are, so the modes can be compared; returns its name."""
    name = _unique_name(builder, name)
    builder.reports.append(FullReport(builder, name, join_trace, [t for t in state_traces if t is not None], agg))
    return name


def _message_adapter(message, value, payload, who):
    """message(value=..., payload columns..., degree=...) as fn(values, payload arrays, degrees)."""
    if not callable(message):
        raise ArgumentTypeError(f"{who}: message must be a function of the state's {value!r} column (and edge "
                                f"payload columns, and degree), got {type(message).__name__} {message!r:.80}")
    try:
        params = inspect.signature(message).parameters
    except (TypeError, ValueError):
        raise SchemaError(f"{who}: cannot read the parameters of message {message!r}") from None
    allowed = [value, *payload, "degree"]
    for p in params.values():
        if p.name not in allowed and p.default is p.empty:
            raise SchemaError(f"{who}: message parameter {p.name!r} is not the state column {value!r}, an edge "
                              f"payload column {list(payload)} or 'degree'")
    wants = [p for p in payload if p in params and p != value]  # (the state's name is the state: an edge
    # column of that name is not read)
    degree = "degree" in params
    if degree and "degree" in (value, *payload):
        raise SchemaError(f"{who}: message parameter 'degree' is both the sender's out-degree and the "
                          f"{'state' if value == 'degree' else 'edge payload'} column 'degree': rename the column")

    def call(values, pay, deg):  # (pay: the columns of ``wants``, in order)
        kw = {value: values} if value in params else {}
        for i, p in enumerate(wants):
            kw[p] = pay[i]
        if degree:
            kw["degree"] = deg
        return message(**kw)
    return call, degree, wants


def ife(start, edges, *, key, node, value, src=("src",), dst=("dst",), message, agg="min", rounds=None,
        memory="full", drop=None, start_rounds=None, symmetric=False, name="ife"):
    """See ``Collection.ife``."""
    from .collection import Arranged, Collection, _names
    if not isinstance(name, str):  # (it names the operator in eng.stats() and its arrangements)
        raise ArgumentTypeError(f"ife: name= is a non-empty str, not {type(name).__name__} {name!r:.80}")
    if not name:
        raise UsageError("ife: name= is a non-empty str, not ''")
    who = f"ife({name!r})"
    if memory not in MODES:
        raise SchemaError(f"{who}: memory={memory!r}; choose one of {list(MODES)}")
    if agg not in AGGS:
        raise SchemaError(f"{who}: agg={agg!r}; choose one of {list(AGGS)}")
    if drop is not None and not isinstance(drop, Drop):
        raise SchemaError(f"{who}: drop= takes a kp.Drop(...), got {drop!r}")
    if memory == "drop" and drop is None:
        drop = Drop()
    if memory != "drop" and drop is not None:
        raise SchemaError(f"{who}: drop= applies to memory='drop' only (memory={memory!r})")
    if not isinstance(symmetric, bool):
        raise SchemaError(f"{who}: symmetric= takes True or False, got {symmetric!r}")
    if rounds is not None and (not is_int(rounds) or rounds < 0):
        raise SchemaError(f"{who}: rounds={rounds!r}; a number of rounds >= 0, or None for a fixed point")
    if agg == "sum" and rounds is None:
        raise SchemaError(f"{who}: a sum need not reach a fixed point; pass rounds=")
    if not isinstance(edges, Collection):
        raise SchemaError(f"{who}: edges must be a Collection, got {type(edges).__name__}")
    key, node, src, dst = _names(key, "key"), _names(node, "node"), _names(src, "src"), _names(dst, "dst")
    _distinct_columns(who, key, value, src, dst)
    start.check_columns(key + [value], "state column")
    edges.check_columns(src + dst, "edge column")
    if key[len(key) - len(node):] != node:
        raise SchemaError(f"{who}: the node columns {node} must be the last of the key {key}")
    if not (len(node) == len(src) == len(dst)):
        raise SchemaError(f"{who}: node {node}, src {src} and dst {dst} must name as many columns")
    for n_, s_, d_ in zip(node, src, dst):
        for e_ in (s_, d_):
            if start.schema.dtype(n_) != edges.schema.dtype(e_):
                raise SchemaError(f"{who}: state column {n_!r} is {start.schema.dtype(n_)} but edge column "
                                  f"{e_!r} is {edges.schema.dtype(e_)}")
    vdt = start.schema.dtype(value)
    if vdt not in ("int64", "float64"):
        raise SchemaError(f"{who}: the state column {value!r} must be int64 or float64, not {vdt}")
    groups = key[:len(key) - len(node)]
    # the payload: the edge columns the message reads (the others are never gathered)
    call, degree, payload = _message_adapter(message, value, [c for c in edges.schema.names if c not in src + dst],
                                             who)
    for c in payload:
        if edges.schema.dtype(c) == "str":
            raise SchemaError(f"{who}: edge payload column {c!r} is str; messages compute on numbers "
                              f"(int64, float64, bool)")
    name = _unique_name(start.builder, name)
    state = start.select(*key, value) if list(start.schema.names) != key + [value] else start
    edges_ = edges
    if not (isinstance(edges, Arranged) and edges.key_names == src and edges.val_names[:len(dst + payload)]
            == dst + payload) and list(edges.schema.names) != src + dst + payload:
        edges_ = edges.select(*(src + dst + payload))
    # (else the edges' own arrangement by src, read in place: a keyed input's further value columns come
    # after the ones read, and the operators read the leading ones)
    if start_rounds is not None and rounds:
        start_rounds = _undelayed(start_rounds, who, rounds)
    if memory == "full":
        return _full(state, edges_, groups, node, value, src, dst, payload, call, degree, agg, rounds,
                     start_rounds, name)
    if start_rounds is not None:
        raise SchemaError(f"{who}: start_rounds= (delayed entry of the start states) is for memory='full' only")
    if start.scope.parent is not None or edges.scope.parent is not None:  # (either read inside a loop)
        raise SchemaError(f"{who}: memory={memory!r} runs on the top-level epochs (which it processes in "
                          f"order); inside a loop use memory='full'")
    by_src = _shared_arrangement(edges_, src, None)
    # in-neighbours: the edges by destination, which for symmetric edges are the edges by source
    by_dst = by_src if symmetric else _shared_arrangement(edges_, dst, src + payload)
    st = state.arrange_by(*key, vals=[value])
    pay_types = [edges_.schema.dtype(p) for p in payload]

    def msg(values, pay, deg):  # (the payload as the message's columns, as memory="full" gives them)
        cols = [pay[i].view(np.float64) if t == "float64" else pay[i] != 0 if t == "bool" else pay[i]
                for i, t in enumerate(pay_types)]
        return call(values, cols, deg)
    spec = IfeSpec(len(groups), len(node), len(payload), agg, msg, vdt == "float64", degree, rounds, memory, drop)
    eng = start.builder.engine
    op = IfeOp(start.scope, st.op, by_src.op, by_dst.op, spec, eng.workers, Site.capture(), name, key)
    start.builder.reports.append(op)
    return Collection(start.builder, op, state.schema, start.scope)


def _distinct_columns(who: str, key: list, value, src: list, dst: list):
    """ife's arguments naming one column twice, refused naming the ife and the arguments that clash (not an
    internal select's "duplicate column names"): the state's value column among its key columns, a key
    column twice, the edges' src columns among their dst columns, or one of them twice."""
    for what, cols in (("key", key), ("src", src), ("dst", dst)):
        twice = sorted({c for c in cols if cols.count(c) > 1})
        if twice:
            raise SchemaError(f"{who}: {what}={cols} names column(s) {twice} twice")
    if value in key:
        raise SchemaError(f"{who}: value={value!r} is also a key column (key={key}): the state's value must be "
                          f"a column apart from its key")
    both = [c for c in src if c in dst]
    if both:
        raise SchemaError(f"{who}: src={src} and dst={dst} both name {both}: an edge's source and destination "
                          f"must be different columns")


def _shared_arrangement(coll, keys, vals):
    """``coll.arrange_by(*keys, vals=vals)``, built once per dataflow for one collection: IFE queries over
    the same edges (two sssp on one keyed input) then read one arrangement of them by destination, as they
    read the input's by source, not a copy each (each reader holds its own compaction handle)."""
    tag = ("arrange_by", tuple(keys), None if vals is None else tuple(vals))
    return coll.shared(tag, lambda c: c.arrange_by(*keys, vals=vals))


def _undelayed(start_rounds, who: str, rounds: int):
    """``start_rounds`` checked to delay no start state: a delayed entry keeps the fixed point only, so with
    ``rounds`` bounded the result would not be D_rounds. Round 0 for every state is plain entry."""
    @functools.wraps(start_rounds)  # (its signature names the columns it reads)
    def check(**columns):
        r = np.asarray(start_rounds(**columns))
        if (r != 0).any():
            raise SchemaError(f"{who}: start_rounds= delays start states (round {int(r.max())}), which keeps "
                              f"only the fixed point: with rounds={rounds} the result would not be D_{rounds}; "
                              f"pass rounds=None or leave start_rounds out")
        return r
    return check


def _unique_name(builder, name: str) -> str:
    """``name``, or ``name#2``, ``name#3``... when this dataflow has an IFE of that name already (two
    ``sssp`` queries in one dataflow), so that statistics tell them apart."""
    taken = {r.name for r in builder.reports}
    k = 1
    unique = name
    while unique in taken:
        k += 1
        unique = f"{name}#{k}"
    return unique


def _full(state, edges, groups, node, value, src, dst, payload, call, degree, agg, rounds, start_rounds, name):
    from .collection import Variable
    key = groups + node
    by_src = _shared_arrangement(edges, src, None)
    right = list(by_src.val_names)                    # dst + payload, in the edges' order
    deg = edges.count(by=src) if degree else None
    dtypes = {c: state.schema.dtype(c) for c in key + [value]}
    traces = {}

    def step(d):
        dk = d.arrange_by(*node, vals=groups + [value])
        j = dk.join(by_src, left_on=node, right_on=src)
        jnames = list(j.columns)
        base = len(node) + len(groups) + 1
        rnames = dict(zip(right, jnames[base:base + len(right)]))
        if degree:
            j = j.join(deg, left_on=node, right_on=src)
            cname = list(j.columns)[-1]

        def emit(**c):
            pay = [np.asarray(c[rnames[p]]) for p in payload]
            res = call(np.asarray(c[value]), pay, np.asarray(c[cname]) if degree else None)
            res, keep = message_split(res)
            n = len(c[value])
            res = message_values(res, n)
            rows = np.flatnonzero(message_keep(keep, n)) if keep is not None else np.arange(n)

            def kept(col):  # (every row kept: the column as it is, no copy)
                return col if keep is None else np.asarray(col)[rows]
            out = {g: kept(c[g]) for g in groups}
            for n_, d_ in zip(node, dst):
                out[n_] = kept(c[rnames[d_]])
            res = kept(res)
            out[value] = res.astype(np.float64, copy=False) if dtypes[value] == "float64" else message_ints(res)
            return out, rows
        # only what the messages read leaves the join (its other columns are never gathered)
        needed = list(dict.fromkeys(groups + [value] + [rnames[p] for p in payload] + [rnames[d] for d in dst]
                                    + ([cname] if degree else [])))
        msgs = j.select(needed).flat_map(emit, out={c: dtypes[c] for c in key + [value]}, repeat=False)
        msgs.op.kind = "ife"  # (its failures are the message function's: named as jod's and drop's are)
        entry = state if start_rounds is None else state.enter_at(d.scope, start_rounds)
        cat = msgs.concat(entry).arrange_by(*key, vals=[value])
        res = getattr(cat, agg)(by=key, col=value)
        traces["join"] = cat.op.owned_trace()
        traces["state"] = [dk.op.owned_trace(), res.op.owned_trace()]
        return res

    if start_rounds is None or rounds == 0:
        initial = getattr(state, agg)(by=key, col=value)  # D_0 = agg(start), as in the other modes
        if rounds == 0:  # (no loop, no join: the states alone)
            state.builder.reports.append(FullReport(state.builder, name, None, [initial.op.owned_trace()], agg))
            return initial.as_collection()
        out = initial.iterate(step, max_rounds=rounds)
    else:  # (the loop's own reduce makes D_0 from the entering states: no reduce outside it)
        scope = state.scope.loop()
        var = Variable(scope, columns=list(state.schema.names), dtypes=list(state.schema.dtypes))
        # the variable starts empty, so round r holds D_(r-1): D_rounds is one round further on
        out = var.set(step(var), max_rounds=None if rounds is None else rounds + 1).leave()
    builder = state.builder
    builder.reports.append(FullReport(builder, name, traces["join"], traces["state"], agg))
    return out
