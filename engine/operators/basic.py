"""Stateless operators over update messages: map, filter, flat_map, concat, negate, inspect, and the
scope operators enter, leave and the loop's variable/feedback pair."""
from __future__ import annotations

import numpy as np

from ..batch import Batch, form_arrays, may_meet, merge_arrays
from ..columns import (SchemaError, UpdateBatch, check_rounds, decode_column, encode_outputs, filter_mask,
                       flat_map_how, flat_map_rows)
from ..dataflow import Batches, Operator, Updates
from ..kernels.rows import is_identity
from ..lattice import Antichain
from ..scope import enter, enter_at_times, enter_times, leave, leave_times, next_round


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _per_shard(rt, fn, shards):
    """Apply fn to every non-empty shard batch (in parallel on the pool when there is enough work)."""
    work = [i for i, b in enumerate(shards) if b is not None and len(b)]
    out = [None] * len(shards)
    if not work:
        return out
    res = rt.run(lambda i: fn(shards[i]), work, rows=sum(len(shards[i]) for i in work))
    for i, r in zip(work, res):
        out[i] = r
    return out


class UserFunctionOp(Operator):
    """Base for operators calling a vectorized user function with the columns its parameters name."""

    passive = True

    def __init__(self, scope, input, fn, params, schema, symbols, site):
        super().__init__(scope, [input], site)
        self.fn = fn
        self.params = params  # names of the input columns the function takes (None: all, as **kwargs)
        self.in_schema = schema
        self.symbols = symbols
        self.writes = False   # the function was seen writing into its input columns: give it copies
        self._plan = None

    def user_columns(self, batch: UpdateBatch, copy: bool = False) -> dict:
        """The columns the function takes. Numeric ones are views of the batch, which other operators read
        too: read-only, or (``copy``) the function's own copies."""
        plan = self._plan
        if plan is None:  # (name, row of the column matrix, dtype) per parameter, worked out once
            schema = self.in_schema
            names = self.params if self.params is not None else schema.names
            plan = self._plan = tuple((n, schema.index(n), schema.dtype(n)) for n in names)
        data, symbols = batch.data, self.symbols
        out = {}
        for n, i, dtype in plan:
            col = decode_column(data[i], dtype, symbols)
            if col.base is not None:  # a view (bool and str columns are decoded into new arrays)
                col = col.copy() if copy else _read_only(col)
            out[n] = col
        return out

    def call(self, batch: UpdateBatch):
        """The function on a batch's columns. They are read-only views; a function that writes into them
        (``a += 1``) is called again, then and from now on, with its own copies: it never changes what
        other operators see, and pure functions cost no copy."""
        if self.writes:
            return self.fn(**self.user_columns(batch, copy=True))
        try:
            return self.fn(**self.user_columns(batch))
        except Exception as e:  # noqa: BLE001 - NumPy's and Numba's errors for a write into a read-only array
            if "read-only" not in str(e) and "readonly" not in str(e):
                raise
        self.writes = True
        return self.fn(**self.user_columns(batch, copy=True))

    def _send_rows(self, shards, lower):
        """Send the function's output, unless it has no rows (a filter that kept none): an empty message
        would only make the operators downstream step for nothing, every round of a loop."""
        if any(b is not None and len(b) for b in shards):
            self.send(Updates(shards, lower))


class MapOp(UserFunctionOp):
    kind = "map"
    inferred = False  # the output schema came from a trial call, not from out=

    def __init__(self, scope, input, fn, params, in_schema, out_schema, symbols, site):
        super().__init__(scope, input, fn, params, in_schema, symbols, site)
        self.out_schema = out_schema

    def step(self, rt):
        for msg in self.take():
            def one(b):
                data = encode_outputs(self.call(b), self.out_schema, len(b), self.symbols, "the map function",
                                     self.inferred)
                return UpdateBatch(data, b.times, b.diffs)
            self._send_rows(_per_shard(rt, one, msg.shards), msg.lower)


class FilterOp(UserFunctionOp):
    kind = "filter"

    def step(self, rt):
        for msg in self.take():
            def one(b):
                keep = filter_mask(self.call(b), len(b))
                return b if keep.all() else b.take(np.flatnonzero(keep))
            self._send_rows(_per_shard(rt, one, msg.shards), msg.lower)


class FlatMapOp(UserFunctionOp):
    """The function returns (columns, how): ``how`` is either an index array (output row i comes from
    input row how[i]) or repeat counts (input row j makes how[j] output rows). ``repeat`` says which; left
    as None, the first call that tells (``columns.flat_map_rows``) decides it for the calls after."""

    kind = "flat_map"
    inferred = False  # the output schema came from a trial call, not from out=

    def __init__(self, scope, input, fn, params, in_schema, out_schema, symbols, site, repeat=None):
        super().__init__(scope, input, fn, params, in_schema, symbols, site)
        self.out_schema = out_schema
        self.repeat = repeat

    def step(self, rt):
        for msg in self.take():
            def one(b):
                res = self.call(b)
                if not (isinstance(res, tuple) and len(res) == 2) or not isinstance(res[0], dict):
                    raise SchemaError("the flat_map function must return (dict of columns, index or counts)")
                cols, how = res
                how = flat_map_how(how)
                lengths = {len(np.atleast_1d(v)) for v in cols.values()}
                n_out = max(lengths) if lengths else 0
                idx, learned = flat_map_rows(self.repeat, how, len(b), n_out)
                if learned is not None:
                    self.repeat = learned  # later calls read the same way, even when their lengths agree
                data = encode_outputs(cols, self.out_schema, len(idx), self.symbols, "the flat_map function",
                                      self.inferred)
                if len(idx) == len(b) and is_identity(np.ascontiguousarray(idx, np.int64)):
                    return UpdateBatch(data, b.times, b.diffs)  # every row kept, in order
                return UpdateBatch(data, b.times[idx], b.diffs[idx])
            parts = [b for b in msg.shards if b is not None and len(b)]
            if self.repeat is None and len(parts) > 1:
                # undecided: one call on the step's rows together, as one worker makes it, so that what the
                # first call tells (counts or an index, or neither) does not depend on how rows fall into shards
                one_call = one(UpdateBatch(np.concatenate([b.data for b in parts], axis=1),
                                           np.concatenate([b.times for b in parts]),
                                           np.concatenate([b.diffs for b in parts])))
                self._send_rows([one_call] + [None] * (len(msg.shards) - 1), msg.lower)
                continue
            self._send_rows(_per_shard(rt, one, msg.shards), msg.lower)


class InspectOp(UserFunctionOp):
    """Calls fn(columns, times, diffs) for every batch and passes the updates through unchanged."""

    kind = "inspect"

    def step(self, rt):
        for msg in self.take():
            for b in msg.shards:
                if b is not None and len(b):  # (read-only: an observer does not change what flows on)
                    cols = dict(zip(self.in_schema.names, self.user_columns(b).values()))
                    self.fn(cols, _read_only(b.times), _read_only(b.diffs))
            self.send(msg)


class ConcatOp(Operator):
    kind = "concat"
    passive = True

    def __init__(self, scope, inputs, perms, site):
        super().__init__(scope, inputs, site)
        self.perms = perms  # per input: column order to match the first input's schema (None: same)

    def step(self, rt):
        for port in range(len(self.inputs)):
            perm = self.perms[port]
            for msg in self.take(port):
                if perm is not None:
                    msg = Updates([None if b is None else UpdateBatch(b.data[perm], b.times, b.diffs)
                                   for b in msg.shards], msg.lower)
                self.send(msg)


class NegateOp(Operator):
    kind = "negate"
    passive = True

    def step(self, rt):
        for msg in self.take():
            self.send(Updates([None if b is None else UpdateBatch(b.data, b.times, -b.diffs) for b in msg.shards],
                              msg.lower))


class ProjectOp(Operator):
    """Select (and reorder) columns: a cheap map that runs no user code."""

    kind = "project"
    passive = True

    def __init__(self, scope, input, cols, site):
        super().__init__(scope, [input], site)
        self.cols = np.asarray(cols, np.int64)
        self.gather = self.cols  # what this step copies out (None: nothing; see fuse_projections)

    def step(self, rt):
        for msg in self.take():
            if self.gather is not None:
                msg = Updates([None if b is None else UpdateBatch(b.data[self.gather], b.times, b.diffs)
                               for b in msg.shards], msg.lower)
            self.send(msg)

    def finish_install(self):
        if self.gather is None:  # fused into the operator upstream
            return
        rest = fuse_projections(self)
        cols = self.cols if rest is None else self.cols[rest]
        up = self.inputs[0].schema
        self.gather = None if up is not None and len(cols) == len(up.names) and is_identity(cols) else cols


def fuse_projections(op) -> np.ndarray | None:
    """At install: the chain of projections that alone consume ``op``'s output (a join's, another
    projection's, ...), composed into one column list, which ``op`` then produces itself; each projection
    of the chain passes its messages on as they come. None (nothing fused) where no projection alone
    consumes ``op``. Install-time only: ``cols`` stay what the dataflow says. A rename (identity columns)
    alone also becomes a pass-through, with nothing to fuse into."""
    chain, nxt = [], op
    while len(nxt.consumers) == 1 and isinstance(nxt.consumers[0][0], ProjectOp):
        nxt = nxt.consumers[0][0]
        chain.append(nxt)
    if not chain:
        return None
    cols = chain[0].cols
    for p in chain[1:]:
        cols = cols[p.cols]
    for p in chain:
        p.gather = None
    return cols



# -- scopes -------------------------------------------------------------------------------------

class EnterOp(Operator):
    """Bring a collection into a nested scope: time t becomes (t, 0)."""

    kind = "enter"
    passive = True

    def summary(self, frontier):
        return enter(frontier)

    def step(self, rt):
        for msg in self.take():
            self.send(Updates([None if b is None else UpdateBatch(b.data, enter_times(b.times), b.diffs)
                               for b in msg.shards], enter(msg.lower)))


def _rounds(op: UserFunctionOp, b: UpdateBatch) -> np.ndarray:
    """The rounds ``enter_at``'s or ``delay``'s function gives a batch's rows, as int64, checked."""
    return check_rounds(op.call(b), len(b), op.kind)


class EnterAtOp(UserFunctionOp):
    """Bring a collection into a nested scope at the rounds a user function gives its rows: t becomes
    (t, fn(row)). Rows are held back from the loop until that round (differential dataflow's enter_at),
    e.g. to introduce small labels first so that large ones mostly never propagate (kpgnb.graphs.wcc)."""

    kind = "enter_at"

    def summary(self, frontier):
        return enter(frontier)  # rounds are >= 0: (t, 0) bounds every output time from below

    def step(self, rt):
        def one(b):
            return UpdateBatch(b.data, enter_at_times(b.times, _rounds(self, b)), b.diffs)
        for msg in self.take():
            self.send(Updates(_per_shard(rt, one, msg.shards), enter(msg.lower)))


class DelayOp(UserFunctionOp):
    """Hold each row of a loop's collection back to the round a user function gives it: (t, r) becomes
    (t, max(r, fn(row))). Times only move later, and a row and its retraction move alike, so this is a
    collection again (differential dataflow's ``delay``, by row); the rows wait in the next arrangement's
    batcher until the loop reaches their round."""

    kind = "delay"

    def step(self, rt):
        def one(b):
            times = np.array(b.times, order="C")
            np.maximum(times[:, -1], _rounds(self, b), out=times[:, -1])
            return UpdateBatch(b.data, times, b.diffs)
        for msg in self.take():
            self.send(Updates(_per_shard(rt, one, msg.shards), msg.lower))


class LeaveOp(Operator):
    """Return a collection to the enclosing scope: (t, round) becomes t, so the outer collection
    accumulates every round's changes, i.e. the fixed point."""

    kind = "leave"
    passive = True

    def summary(self, frontier):
        return leave(frontier)

    def step(self, rt):
        for msg in self.take():
            self.send(Updates([None if b is None else UpdateBatch(b.data, leave_times(b.times), b.diffs)
                               for b in msg.shards], leave(msg.lower)))


class VariableOp(Operator):
    """A loop variable: the collection is its (entered) initial value plus what the feedback edge
    returns one round later."""

    kind = "variable"
    passive = True

    def __init__(self, scope, initial, site):
        super().__init__(scope, [initial], site)
        self.feedback = None

    def connect(self, feedback: "FeedbackOp"):
        self.inputs.append(feedback)
        feedback.consumers.append((self, 1))
        self.queues.append([])
        self.port_frontiers.append(Antichain())
        self.graph.cyclic = True

    def step(self, rt):
        for port in range(len(self.inputs)):
            for msg in self.take(port):
                self.send(msg)


class FeedbackOp(Operator):
    """The back edge of a loop: round r becomes r + 1. With ``max_rounds`` it drops updates that would
    reach that round."""

    kind = "feedback"
    passive = True

    def __init__(self, scope, input, site, max_rounds=None):
        super().__init__(scope, [input], site)
        self.max_rounds = max_rounds

    def summary(self, frontier):
        return next_round(frontier, self.max_rounds)

    def step(self, rt):
        msgs = self.take()
        if not msgs:
            return
        lower = msgs[0].lower
        for m in msgs[1:]:
            lower = lower.meet(m.lower)
        shards = []
        for s in range(len(msgs[0].shards)):
            parts = [m.shards[s] for m in msgs if m.shards[s] is not None and len(m.shards[s])]
            if not parts:
                shards.append(None)
                continue
            b = parts[0] if len(parts) == 1 else _consolidated(parts)
            t = b.times.copy()
            t[:, -1] += 1
            if self.max_rounds is not None:
                keep = t[:, -1] < self.max_rounds
                if not keep.all():
                    b = b.take(np.flatnonzero(keep))
                    t = t[keep]
            shards.append(UpdateBatch(b.data, t, b.diffs) if len(b) else None)
        lower = self.summary(lower)
        if lower.elements and any(b is not None for b in shards):  # nothing to feed back: the
            self.send(Updates(shards, lower))                       # loop may settle


def _consolidated(parts) -> UpdateBatch:
    """Several messages' updates for a shard as one, equal rows at equal times summed and zeros dropped.
    The back edge does this: a body that passes (some of) the variable through unchanged sends the round's
    value and the negated initial value separately, and without cancelling they would circulate, one
    round later each time, and the loop never settle. (Arranged bodies consolidate anyway; a batch from one
    message passes as it is.)"""
    data = np.concatenate([b.data for b in parts], axis=1)
    times = np.concatenate([b.times for b in parts], axis=0)
    diffs = np.concatenate([b.diffs for b in parts])
    _, keys, koff, _, times, diffs = form_arrays(data, np.zeros((0, len(diffs)), np.int64), times, diffs)
    return UpdateBatch(np.repeat(keys, np.diff(koff), axis=1), times, diffs)


def _imported(parts, lens) -> UpdateBatch:
    """A shard of an imported history as the importer sees it: merged with its times advanced to the
    import's start, so updates that cancel there (a row inserted and removed before the dataflow was
    installed) never reach its functions; the dataflow starts from the contents as of its start."""
    first = parts[0]
    f = lens.frontier.matrix(first.depth)
    rest = parts[1:] or [Batch.empty(first.kk, first.kv, first.depth, first.upper, first.upper)]
    arrays = first.arrays
    for b in rest:
        arrays, _ = merge_arrays(arrays, b.arrays, f)
    _, keys, koff, vals, times, diffs = arrays
    data = np.concatenate([np.repeat(keys, np.diff(koff), axis=1), vals], axis=0)
    return UpdateBatch(data, enter_times(times, lens.extend) if lens.extend else times, diffs)


class FlattenOp(Operator):
    """An arranged stream as a stream of updates (key columns, then value columns)."""

    kind = "as_collection"
    passive = True

    def __init__(self, scope, input, site):
        super().__init__(scope, [input], site)

    def step(self, rt):
        lens = self.inputs[0].lens

        def flat(parts):
            if not lens.identity and may_meet(parts, lens.frontier):
                return _imported(parts, lens)
            data = np.concatenate([np.concatenate([b.key_rows(), b.vals], axis=0) for b in parts], axis=1)
            times = np.concatenate([b.times for b in parts], axis=0)
            diffs = np.concatenate([b.diffs for b in parts])
            return UpdateBatch(data, times if lens.identity else lens.apply(times), diffs)
        for msg in self.take():
            parts = [[b for b in batches if len(b)] for batches in msg.shards]
            work = [s for s, p in enumerate(parts) if p]
            shards = [None] * len(parts)
            for s, out in zip(work, rt.run(lambda s: flat(parts[s]), work,
                                           rows=sum(len(b) for s in work for b in parts[s]))):
                shards[s] = out
            if any(b is not None for b in shards):  # an empty message would only hold frontiers back:
                self.send(Updates(shards, msg.lower))  # in a loop it would go round forever


class EnterArrangedOp(Operator):
    """An arrangement entering a nested scope by wrapping: the same trace and batches, read through a
    lens that appends a zero round. Nothing is copied."""

    kind = "enter_arranged"
    passive = True
    arranged = True

    def __init__(self, scope, input, site):
        super().__init__(scope, [input], site)

    @property
    def lens(self):
        return self.inputs[0].lens.entered()

    @property
    def trace(self):
        return self.inputs[0].trace

    def summary(self, frontier):
        return enter(frontier)

    def step(self, rt):
        for msg in self.take():
            self.send(Batches(msg.shards, enter(msg.lower), enter(msg.upper), msg.native_upper))


class EmptyOp(Operator):
    """A source that never sends anything (the initial value of a Variable defined without one)."""

    kind = "empty"

    def __init__(self, scope, site=None):
        super().__init__(scope, [], site)

    def has_work(self):
        return False

    def step(self, rt):
        pass
