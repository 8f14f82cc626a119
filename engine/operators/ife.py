"""Iterative frontier expansion (IFE) with join-on-demand and partial dropping: the third paper's
memory modes for the iterate-join-aggregate pattern (``Collection.ife``).

The pattern: a state per vertex, D_0 = agg(start) and D_{r+1}(v) = agg(start(v) + {msg(D_r(u), edge) for
each edge u -> v}), to a fixed point (or for ``rounds`` rounds). ``memory="full"`` builds it from join,
concat and a reduce inside ``iterate`` (engine/collection.py), which keeps the join's output differences.
This operator (``"jod"`` and ``"drop"``) keeps none of them:

- Epochs are processed in order, each to completion (top-level times are totally ordered), so each
  vertex keeps a one-dimensional timeline: the (round, value) entries where its state changes on the
  current graph (eager merging along the version coordinate: an epoch retracts the entries it rewrites,
  and the trace's compaction to the epoch merges them away). The timeline is an arrangement keyed by
  vertex, so it is sharded, merged and reported like every other trace.
- An epoch re-runs the rounds from 0. X_r is the set of vertices whose new state at round r differs from
  the old timeline's. A vertex is recomputed at round r+1 (join on demand: its in-edges, its
  in-neighbours' round-r states, the aggregate) when its inputs at round r may differ from the old ones:
  an in-neighbour is in X_r; one of its in-edges changed (and the sender had a state); its start rows
  changed; or, for messages that read the sender's out-degree, a sender's out-edges changed. Any other
  vertex keeps its old state at r+1 (the paper's direct and upper-bound rules, restated on timelines).
- Where no vertex has an old entry at round r+1 (``hist`` counts entries per round) and every change at r
  is known, a vertex's state at r+1 can only differ from its state at r if an in-neighbour changed at r:
  the round is semi-naive. A first load runs so throughout, and so do groups (e.g. SPSP sources) new at
  an epoch, which run apart from the others.
- The epoch ends at the first round past the old timeline's last round where no state changes from the
  round before: a fixed point of the new graph (with ``rounds``, at that round or at ``rounds``, whichever
  comes first: past a fixed point every round up to the limit has the same states). It pauses between rounds when the
  scheduler has commands waiting (the timeline is written only at its end), so a query that does not
  converge can still be dropped.
- ``"drop"`` leaves some timeline entries out (``engine/dropping.py`` chooses and remembers them). An old
  state whose latest entry may have been dropped is recomputed from the old graph: every (vertex, round)
  it needs is found level by level down the rounds, then computed from the lowest round up, once per epoch.

Work is vectorized per round (NumPy plus kernels/ife.py); the operator runs on the scheduler thread and
reads every shard of its inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..batch import Batch, form_shards
from ..columns import SchemaError, UpdateBatch, float_bits, whole
from ..cursor import Cursor, key_index
from ..dataflow import Operator, Updates
from ..dropping import Drop, make_tracker
from ..kernels import multiplicity_overflow
from ..kernels import ife as ik
from ..kernels.merge import normalize_groups
from ..kernels import sort as sortk
from ..kernels.seek import seek_keys
from ..kernels.sort import hash_keys  # (the trackers' hash, as engine/dropping.py binds it: not the test hooks)
from ..lattice import Antichain
from ..trace import Trace
from .reader import ArrangedInput

ABSENT = np.iinfo(np.int64).min  # "no state": the bit pattern of -0.0, which canonical floats never have
AGGS = ("min", "max", "sum")


def _exact_sums(x, c, starts, limit: int, error):
    """``np.add.reduceat(x * c, starts)`` (c None: x alone) for int64 columns, exact: a group whose terms'
    magnitudes could pass ``limit`` (estimated in float64) is summed in Python integers, and a total of
    magnitude ``limit`` or more raises ``error(total)`` instead of wrapping."""
    c = np.ones_like(x) if c is None else c
    risky = np.flatnonzero(np.add.reduceat(np.abs(x.astype(np.float64) * c), starts) >= limit / 4)
    sums = np.add.reduceat(x * c, starts)
    ends = np.r_[starts[1:], len(x)]
    for g in risky:
        a, b = int(starts[g]), int(ends[g])
        total = sum(int(v) * int(w) for v, w in zip(x[a:b], c[a:b]))
        if abs(total) >= limit:
            raise error(total)
        sums[g] = total
    return sums


def _degree_sums(out, n: int) -> np.ndarray:
    """The out-degree of each of n queried senders: its out-edges' multiplicities (``out``, rows of
    ``_rows``) summed exactly in int64 (as the full mode's ``count`` sums them), not rounded in float64."""
    deg = np.zeros(n, np.int64)
    if ik.degree_sums(np.ascontiguousarray(out.q, np.int64), np.ascontiguousarray(out.counts, np.int64), deg):
        raise multiplicity_overflow()
    return deg


def _absent_state() -> ValueError:
    return ValueError(f"a state of {ABSENT} (the int64 minimum) cannot be kept: memory='jod' and 'drop' "
                      f"reserve it for 'no state'; use memory='full' or another value")


def _sum_overflow(total: int) -> OverflowError:
    return OverflowError(f"an int64 sum overflows: a node's total is {total}, outside int64; sum a float64 "
                         f"value for such totals")


@dataclass
class IfeSpec:
    """What the operator computes. State keys are ``ng`` group columns then ``nn`` node columns; edges
    carry ``npay`` payload columns; ``message(values, payloads, degrees)`` maps sender states (and the
    edges' payload columns, and the senders' out-degrees when ``degree``) to candidate states, or to
    (candidates, keep mask)."""

    ng: int
    nn: int
    npay: int
    agg: str
    message: object
    value_float: bool = False
    degree: bool = False
    rounds: int | None = None
    mode: str = "jod"
    drop: Drop | None = None


class _Rows:
    """Rows of some input for a list of query keys: query index, value columns, net multiplicity."""

    __slots__ = ("q", "vals", "counts")

    def __init__(self, q, vals, counts):
        self.q, self.vals, self.counts = q, vals, counts


def message_split(res) -> tuple:
    """A message function's result, values or (values, keep mask), as (values, keep or None)."""
    if not isinstance(res, tuple):
        return res, None
    if len(res) != 2:
        raise SchemaError(f"the message function must return the messages' values, or (values, keep mask); "
                          f"got a tuple of {len(res)}")
    return res


def message_keep(keep, n: int) -> np.ndarray:
    """A message function's keep mask as n booleans (one value stands for every row); any other shape is
    an error, not a silent selection of the wrong rows."""
    keep = np.asarray(keep)
    if keep.dtype.kind not in "biu" or keep.shape not in ((), (n,)):
        raise SchemaError(f"the message function's keep mask must be {n} booleans (one per message) or one "
                          f"boolean, got dtype {keep.dtype} and shape {keep.shape}")
    return np.broadcast_to(keep.astype(bool, copy=False), (n,))


def message_values(res, n: int) -> np.ndarray:
    """A message function's values as n of them (one value stands for every message); any other shape is
    an error, not NumPy's broadcast failure or a silent spreading of the first candidate."""
    res = np.asarray(res)
    if res.shape not in ((), (n,)):
        raise SchemaError(f"the message function must return {n} values (one per message) or one value, got "
                          f"shape {res.shape}")
    return np.broadcast_to(res, (n,))


def _past_int64(res: np.ndarray, bad) -> OverflowError:
    return OverflowError(f"the message returned {res.dtype} values such as {bad!r}, outside int64 (from "
                         f"{-(1 << 63)} to {(1 << 63) - 1}), for an int64 state: an int64 state cannot hold "
                         f"them (they are not cast); return values in int64's range, or make the state "
                         f"column float64")


def message_ints(res: np.ndarray) -> np.ndarray:
    """A message's values for an int64 state: integers (floats with no fractional part too); anything
    else is an error, not a silent truncation, and so is a value past int64's range (a whole float of
    2**63 or more, a uint64 past int64's maximum), not a cast that wraps it."""
    kind = res.dtype.kind
    if kind in "ib":
        return res.astype(np.int64, copy=False)
    if kind == "u":
        big = res > np.uint64(np.iinfo(np.int64).max)
        if big.any():
            raise _past_int64(res, int(res[big][0]))
        return res.astype(np.int64, copy=False)
    if kind == "f":
        ok = whole(res)
        if ok.all():
            # int64's range is [-2**63, 2**63): both bounds are exact in float64
            out = (res < -(2.0 ** 63)) | (res >= 2.0 ** 63)
            if out.any():
                raise _past_int64(res, float(res[out][0]))
            return res.astype(np.int64)
        bad = res[~ok][0]
    else:
        bad = res.reshape(-1)[0] if res.size else None
    raise SchemaError(f"the message returned {res.dtype} values such as {bad!r} for an int64 state: return "
                      f"integers, or make the state column float64")


class IfeOp(Operator):
    kind = "ife"
    family = "ife"

    def __init__(self, scope, start, by_src, by_dst, spec: IfeSpec, workers: int, site=None, name="ife",
                 key_names=()):
        super().__init__(scope, [start, by_src, by_dst], site)
        self.spec = spec
        self.workers = workers
        self.name = name
        kk = spec.ng + spec.nn
        self.timeline = Trace(kk, 2, 1, workers, name=f"{name} (state timeline)")
        self.timeline.key_names = tuple(key_names)  # (keyed by the state's key: named for statistics)
        self.h_timeline = self.timeline.handle(owner=f"{name} (its timeline)")
        self.tracker = make_tracker(spec.drop, kk, workers, f"{name} (dropped)", key_names) \
            if spec.mode == "drop" else None
        self.sides = [None, None, None]
        self.stash = [[], [], []]   # per input: (keys, vals, epochs, diffs) of updates not yet processed
        self.pending: set = set()   # epochs with updates not yet processed
        self.job = None              # (epoch, generator): the epoch in progress, paused between rounds
        self.done = -1               # the last epoch processed
        self.t_upper = 0             # the timeline's upper (its next batch's lower)
        self.hist = np.zeros(0, np.int64)  # per round: the timeline entries (kept or dropped) at it
        self.tau_max = None          # the degree policy's upper degree threshold (``_degree_threshold``)
        self.edges = 0               # the edges' multiplicities summed, and that sum when tau_max was taken
        self.tau_edges = 0
        self._memo = None            # this epoch's recomputed old states: (hashes, keys + round, values)
        self.counters = {"epochs": 0, "rounds": 0, "evaluated": 0, "recomputed": 0, "dropped": 0,
                         "join_rows": 0}

    # -- graph interface --------------------------------------------------------------------------
    def capabilities(self):
        held = set(self.pending) | ({self.job[0]} if self.job is not None else set())
        return Antichain([(min(held),)]) if held else Antichain()

    def owned_trace(self):
        return self.timeline

    def owned_traces(self) -> list:
        exact = self.tracker is not None and self.tracker.kind == "exact"  # (its dropped pairs: an arrangement)
        return [t for t in (self.timeline, self.tracker.trace if exact else None) if t is not None]

    def install(self, rt):
        self.sides = [ArrangedInput(up, self.label()) for up in self.inputs]

    def release(self):
        for side in self.sides:
            if side is not None:
                side.release()
        if self.h_timeline is not None:
            self.h_timeline.close()
            self.h_timeline = None
            t = self.timeline  # an empty one in its place: whoever holds this operator keeps no state
            self.timeline = Trace(t.kk, t.kv, t.depth, t.workers, name=t.name)
            self.timeline.key_names = t.key_names
        if self.tracker is not None:
            self.tracker.close()  # (frees its pairs or filter too: a kept builder keeps none of them)

    def has_work(self):
        return self.job is not None or bool(self._ready()) or super().has_work()

    def _ready(self) -> list:
        """The pending epochs the input frontier has passed (in any order)."""
        F = self.frontier
        f = F.elements[0][0] if F.elements else None
        return [e for e in self.pending if f is None or e < f]

    def step(self, rt):
        for port in range(3):
            msgs = self.take(port)
            for m in msgs:
                for bs in m.shards:
                    for b in bs:
                        if len(b):
                            ep = b.times[:, 0]
                            self.stash[port].append((b.key_rows(), b.vals, ep, b.diffs))
                            self.pending.update(np.unique(ep).tolist())
            self.sides[port].acknowledge(msgs)
        while True:
            if self.job is None:
                ready = self._ready()
                if not ready:
                    break
                self.job = (min(ready), self._epoch(min(ready), rt))
            e, job = self.job
            try:
                next(job)
                return  # paused between rounds: commands wait, or the time slice is over
            except StopIteration as done:
                out = done.value
            self.job = None
            if out is not None:
                self.send(Updates([out] + [None] * (self.workers - 1), Antichain([(e,)])))
            for side in self.sides:
                if side.open:
                    side.compact(Antichain([(self.done,)]))
            if rt.interrupted():
                break
        if not self.frontier.elements and self.job is None and not self.pending:
            # every input closed and every epoch processed: nothing reads the state again, so free it
            # (the timeline, the drop tracker, the input handles), as a full-mode loop's traces are freed
            self.release()

    # -- reading inputs and the timeline ------------------------------------------------------------
    def _rows(self, port: int, keys, at: int, kh=None) -> _Rows:
        """The rows of input ``port`` under each query key, accumulated as of epoch ``at``. ``kh``: the
        keys' hashes, where the keys are distinct and in arrangement order (``key_index``'s), so they
        are the probe as they are and the rows come out in their order without a gather."""
        side = self.sides[port]
        kv = side.kv
        # the edges' value columns read: the neighbours and the payload (edges arranged in place, a keyed
        # input's, may carry further columns after them, which no message reads: left out, rows consolidate)
        width = kv if port == 0 else self.spec.nn + self.spec.npay
        n = keys.shape[1]
        if not n:
            return _Rows(np.zeros(0, np.int64), np.zeros((width, 0), np.int64), np.zeros(0, np.int64))
        pkh, pkeys, inv = (kh, keys, None) if kh is not None else key_index(keys)
        batches = [b for s in range(self.workers) for b in side.history(s)]
        h = Cursor(batches, kv, 1).seek(pkh, pkeys)
        sel = h.times[:, 0] <= at
        kept = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(sel, out=kept[1:])
        poff = kept[h.off]  # each probe's rows as of ``at``, in its run
        vals, diffs = np.ascontiguousarray(h.vals[:width, sel]), h.diffs[sel]  # (copies: consolidated in place)
        # consolidate each probe's rows per value (the batches' runs, each in value order, are merged
        # by a kernel: a NumPy lexsort of every row was most of a first load's time)
        if normalize_groups(poff, vals, np.zeros((len(diffs), 0), np.int64), diffs) < 0:
            raise multiplicity_overflow()
        vals, diffs = vals[:, :poff[-1]], diffs[:poff[-1]]
        if inv is None:
            return _Rows(np.repeat(np.arange(n), np.diff(poff)), vals, diffs)
        lens = np.diff(poff)[inv]
        q = np.repeat(np.arange(n), lens)
        rows = np.arange(len(q)) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(poff[:-1][inv], lens)
        return _Rows(q, vals[:, rows], diffs[rows])

    def _stored(self, keys, q, index=None):
        """(round, value) of each key's latest stored timeline entry at a round <= q (round -1: none).
        ``index``: ``key_index(keys)``, where the caller has it."""
        n = keys.shape[1]
        r, v = np.empty(n, np.int64), np.empty(n, np.int64)
        batches = [b for b in self.timeline.snapshot.all_batches() if len(b)]
        if not n or not batches:
            r[:] = -1
            return r, v
        pkh, pkeys, inv = index if index is not None else key_index(keys)
        h = Cursor(batches, 2, 1).seek(pkh, pkeys)
        ik.timeline_at(h.off, np.ascontiguousarray(h.vals[0]), np.ascontiguousarray(h.vals[1]), h.diffs, inv,
                       np.ascontiguousarray(q, dtype=np.int64), r, v)
        return r, v

    def _old(self, keys, q, e: int):
        """The states at rounds q on the old timeline (the graph as of epoch e - 1); where the latest
        entry may have been dropped, the state comes from this epoch's memo of recomputed states
        (``_recompute`` fills it)."""
        v, need, d = self._old_stored(keys, q)
        if len(need):
            sub = np.ascontiguousarray(keys[:, need])
            got, hit = self._memo_get(sub, d[need])
            if not hit.all():
                self._recompute(np.ascontiguousarray(sub[:, ~hit]), d[need][~hit], e)
                got, hit = self._memo_get(sub, d[need])
            v[need] = got
        return v

    def _old_stored(self, keys, q):
        """The states the stored entries give, the queries whose latest entry may be a dropped one, and
        (for every query) the round of that dropped entry."""
        tracked = self.tracker is not None and self.tracker.markers and keys.shape[1]
        index = key_index(keys) if tracked else None  # (one index for the timeline and the tracker)
        g, v = self._stored(keys, q, index)
        v = np.where(g >= 0, v, ABSENT)
        none = np.zeros(0, np.int64)
        if not tracked:
            return v, none, none
        d = self.tracker.latest(keys, hash_keys(np.ascontiguousarray(keys)), g, np.asarray(q, np.int64), index)
        return v, np.flatnonzero(d > g), d

    def _memo_get(self, keys, rounds):
        """This epoch's recomputed old states of (key, round) pairs, and which were there."""
        mkh, mkeys, mval = self._memo
        if not len(mkh) or not len(rounds):
            return np.full(len(rounds), ABSENT, np.int64), np.zeros(len(rounds), bool)
        pkh, pkeys, inv = key_index(np.concatenate([keys, rounds[None, :]], axis=0))
        idx = seek_keys(mkh, mkeys, pkh, pkeys)[inv]
        hit = idx >= 0
        return np.where(hit, mval[np.maximum(idx, 0)], ABSENT), hit

    def _recompute(self, keys, rounds, e):
        """Recompute old states whose latest entries were dropped, from the old graph (as of e - 1): find
        every (vertex, round) that needs, level by level down the rounds, then compute them from the lowest
        round up, each once. Iterative, so a long chain neither recurses deeply nor repeats work along
        every path to a state."""
        ng, nn = self.spec.ng, self.spec.nn
        todo = np.concatenate([keys, rounds[None, :]], axis=0)
        wanted = [todo]
        while todo.shape[1]:
            k, r = np.ascontiguousarray(todo[:-1]), todo[-1]
            later = np.flatnonzero(r > 0)
            ed = self._rows(2, np.ascontiguousarray(k[ng:, later]), e - 1)
            q = later[ed.q]
            senders = np.ascontiguousarray(np.concatenate([k[:ng, q], ed.vals[:nn]], axis=0))
            _, need, d = self._old_stored(senders, r[q] - 1)
            nxt = np.ascontiguousarray(np.concatenate([senders[:, need], d[need][None, :]], axis=0))
            _, hit = self._memo_get(np.ascontiguousarray(nxt[:-1]), nxt[-1])
            nxt = nxt[:, ~hit]
            if not nxt.shape[1]:
                break
            skh, skeys, _ = key_index(np.concatenate(wanted, axis=1))
            nkh, nkeys, _ = key_index(nxt)
            todo = np.ascontiguousarray(nkeys[:, seek_keys(skh, skeys, nkh, nkeys) < 0])
            wanted.append(todo)
        _, allk, _ = key_index(np.concatenate(wanted, axis=1))
        allk = allk[:, np.argsort(allk[-1], kind="stable")]
        cuts = np.flatnonzero(np.r_[True, allk[-1, 1:] != allk[-1, :-1], True])
        for i in range(len(cuts) - 1):  # a round at a time, lowest first: whatever it reads is known by then
            part = np.ascontiguousarray(allk[:, cuts[i]:cuts[i + 1]])
            self.counters["recomputed"] += part.shape[1]
            vals = self._values(np.ascontiguousarray(part[:-1]), part[-1], e - 1, lambda k, q: self._old(k, q, e))
            self._memo_add(part, vals)

    def _memo_add(self, keys_rounds, values):
        mkh, mkeys, mval = self._memo
        nkh, nkeys, inv = key_index(np.concatenate([mkeys, keys_rounds], axis=1))
        vals = np.empty(len(nkh), np.int64)
        vals[inv] = np.concatenate([mval, values])
        self._memo = (nkh, nkeys, vals)

    # -- one round's aggregate, joined on demand ----------------------------------------------------
    def _values(self, keys, rounds, at: int, prev, kh=None):
        """The aggregate at round rounds[i] for each key: its start rows as of ``at``, plus at rounds > 0
        the messages along its in-edges (as of ``at``) from the senders' states at the round before,
        which ``prev(sender keys, rounds)`` gives. ``kh`` as in ``_rows``."""
        spec = self.spec
        ng, nn = spec.ng, spec.nn
        n = keys.shape[1]
        self.counters["evaluated"] += n
        st = self._rows(0, keys, at, kh)
        qs, vs, cs = [st.q], [st.vals[0]], [st.counts]
        later = np.flatnonzero(rounds > 0)
        if len(later):
            ed = self._rows(2, np.ascontiguousarray(keys[ng:, later]), at,
                            kh[later] if kh is not None and not ng else None)
            q = later[ed.q]
            senders = np.concatenate([keys[:ng, q], ed.vals[:nn]], axis=0)
            sv = prev(np.ascontiguousarray(senders), rounds[q] - 1)
            live = (sv != ABSENT) & (ed.counts > 0) if spec.agg != "sum" else sv != ABSENT
            q, sv, pay, cnt = q[live], sv[live], ed.vals[nn:, live], ed.counts[live]
            self.counters["join_rows"] += len(q)
            if len(q):
                deg = None
                if spec.degree:
                    out = self._rows(1, np.ascontiguousarray(ed.vals[:nn, live]), at)
                    deg = _degree_sums(out, len(q))
                mv, keep = self._message(sv, pay, deg)
                qs.append(q[keep]), vs.append(mv[keep]), cs.append(cnt[keep])
        return self._aggregate(n, np.concatenate(qs), np.concatenate(vs), np.concatenate(cs))

    def _message(self, sv, pay, deg):
        spec = self.spec
        fl = spec.value_float
        res = spec.message(sv.view(np.float64) if fl else sv, pay, deg)
        res, keep = message_split(res)
        keep = np.ones(len(sv), bool) if keep is None else message_keep(keep, len(sv))
        res = message_values(res, len(sv))
        if fl:
            return float_bits(res), keep  # (canonical, as full mode's columns are: one NaN, no -0.0)
        return message_ints(res), keep

    def _aggregate(self, n, q, v, c):
        """Per query: the aggregate of its rows (value, multiplicity), ABSENT where it has none."""
        spec = self.spec
        out = np.full(n, ABSENT, np.int64)
        if spec.agg != "sum":  # min, max: one pass over rows of positive multiplicity
            if ik.extremes(q, v, c, spec.value_float, spec.agg == "max", out):
                raise _absent_state()
            return out
        nz = c != 0
        q, v, c = q[nz], v[nz], c[nz]
        if not len(q):
            return out
        if spec.value_float:
            return self._float_sums(out, q, v, c)
        order = np.lexsort((v, q))  # a fixed order: sums come out the same bits every time
        q, v = q[order], v[order]
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        agg = _exact_sums(v, c[order], starts, 1 << 63, _sum_overflow)
        if (agg == ABSENT).any():
            raise _absent_state()
        out[q[starts]] = agg
        return out

    @staticmethod
    def _float_sums(out, q, v, c):
        """A float sum per query, with the bits the full mode's reduce gives it: equal values' counts
        summed first, then value times count added one at a time in the order of the values' int64 bits
        (the reduce's order of a group's values)."""
        order = np.lexsort((v, q))
        q, v, c = q[order], v[order], c[order]
        first = np.flatnonzero(np.r_[True, (q[1:] != q[:-1]) | (v[1:] != v[:-1])])
        q, v, c = q[first], v[first], np.add.reduceat(c, first)
        nz = c != 0
        q, v, c = q[nz], v[nz], c[nz]
        if len(q):
            starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
            sums = np.empty(len(starts), np.float64)
            ik.float_sums(np.ascontiguousarray(v).view(np.float64), c, starts, sums)
            out[q[starts]] = float_bits(sums)
        return out

    # -- one epoch --------------------------------------------------------------------------------
    def _take(self, port: int, e: int):
        """The updates of input ``port`` at epoch e (removed from the stash)."""
        keys, vals, diffs, rest = [], [], [], []
        for k, v, ep, d in self.stash[port]:
            at = ep == e
            if at.any():
                keys.append(k[:, at]), vals.append(v[:, at]), diffs.append(d[at])
            if not at.all():
                later = ~at
                rest.append((k[:, later], v[:, later], ep[later], d[later]))
        self.stash[port] = rest
        if not diffs:
            return None
        return np.concatenate(keys, axis=1), np.concatenate(vals, axis=1), np.concatenate(diffs)

    def _groups(self, *ats):
        """(hashes, keys) of the groups with start rows as of any of the epochs ``ats`` (one empty key
        when the state has no group columns)."""
        ng = self.spec.ng
        if not ng:
            return np.zeros(1, np.int64), np.zeros((0, 1), np.int64)
        side = self.sides[0]
        batches = [b for s in range(self.workers) for b in side.history(s)]
        keys = Cursor(batches, side.kv, 1).keys()[1]
        live = np.unique(np.concatenate([self._rows(0, keys, at).q for at in ats])) if keys.shape[1] else []
        if not len(live):
            return np.zeros(0, np.int64), np.zeros((ng, 0), np.int64)
        kh, g, _ = key_index(np.ascontiguousarray(keys[:ng, live]))
        return kh, g

    @staticmethod
    def _cross(groups, nodes):
        """Every (group, node) pair as state keys."""
        ng, G = groups.shape
        n = nodes.shape[1]
        if not ng:
            return np.ascontiguousarray(nodes)
        return np.ascontiguousarray(np.concatenate([np.repeat(groups, n, axis=1), np.tile(nodes, (1, G))], axis=0))

    def _epoch(self, e: int, rt):
        """Process epoch e, a round at a time (a generator: it pauses between rounds when the scheduler
        has commands waiting); returns the output's updates, or None. Groups (e.g. SPSP sources) new at e
        have no old timeline: they run apart, as a first evaluation (semi-naive from round 0)."""
        spec = self.spec
        ng, nn = spec.ng, spec.nn
        kk = ng + nn
        self.pending.discard(e)
        self._memo = (np.zeros(0, np.int64), np.zeros((kk + 1, 0), np.int64), np.zeros(0, np.int64))
        start = self._take(0, e)
        srcd = self._take(1, e)
        dstd = self._take(2, e)
        s_keys = key_index(start[0])[1] if start is not None else np.zeros((kk, 0), np.int64)
        # changed edges (sender node -> receiver node), and senders whose out-degree changed
        if dstd is not None:
            ch_u, ch_v = np.ascontiguousarray(dstd[1][:nn]), dstd[0]
            if self.hist.any():  # (only rounds with an old timeline read them: a first load leaves them be)
                pairs = key_index(np.concatenate([ch_u, ch_v], axis=0))[1]  # distinct
                ch_u, ch_v = np.ascontiguousarray(pairs[:nn]), np.ascontiguousarray(pairs[nn:])
        else:
            ch_u = ch_v = np.zeros((nn, 0), np.int64)
        deg_u = (key_index(srcd[0])[1] if srcd is not None else np.zeros((nn, 0), np.int64)) if spec.degree \
            else np.zeros((nn, 0), np.int64)
        if srcd is not None:
            self.edges += int(srcd[2].sum())
        if self.tracker is not None and spec.drop.policy == "degree" and self.edges and (
                self.tau_max is None or not self.tau_edges / 2 < self.edges < 2 * self.tau_edges):
            # taken at the first epoch with edges, again once their number halved or doubled since
            # (exactly half or twice included, as the README says)
            self.tau_max, self.tau_edges = self._degree_threshold(e), self.edges
        tl, marks = ([], [], []), ([], [], [])   # timeline and dropped-pair updates: (keys, values, diffs)
        parts = [(s_keys, self.hist)]
        if ng and s_keys.shape[1] and self.hist.any():
            gkh, gkeys = self._groups(e - 1)
            if len(gkh):
                hkh, hkeys, inv = key_index(s_keys[:ng])
                fresh = seek_keys(gkh, gkeys, hkh, hkeys)[inv] < 0
            else:
                fresh = np.ones(s_keys.shape[1], bool)
            if fresh.any():
                parts = [(np.ascontiguousarray(s_keys[:, ~fresh]), self.hist),
                         (np.ascontiguousarray(s_keys[:, fresh]), np.zeros(0, np.int64))]
        finals = []
        for i, (keys, hist) in enumerate(parts):
            changed = (ch_u, ch_v, deg_u) if i == 0 else (np.zeros((nn, 0), np.int64),) * 3
            X = yield from self._rounds(e, rt, keys, hist, *changed, tl, marks)
            finals.append(X)
        self.counters["epochs"] += 1
        self.done = e
        self._commit(e, tl, marks, rt)
        # output: the final states that changed
        parts_k, parts_v, parts_d = [], [], []
        for xkh, xkeys, xnew, xold in finals:
            for vals, sign in ((xold, -1), (xnew, 1)):
                has = vals != ABSENT
                parts_k.append(xkeys[:, has]), parts_v.append(vals[has]), parts_d.append(np.full(int(has.sum()), sign))
        keys = np.concatenate(parts_k, axis=1)
        if not keys.shape[1]:
            return None
        data = np.concatenate([keys, np.concatenate(parts_v)[None, :]], axis=0)
        d = np.concatenate(parts_d).astype(np.int64)
        return UpdateBatch(np.ascontiguousarray(data), np.full((len(d), 1), e, np.int64), d)

    def _rounds(self, e, rt, s_keys, hist, ch_u, ch_v, deg_u, tl, marks):
        """The rounds of epoch e for the vertices whose old timeline entries ``hist`` counts per round;
        returns the final X (the vertices whose final state changed: keys, new and old states)."""
        spec = self.spec
        kk = spec.ng + spec.nn
        groups = self._groups(e - 1, e)[1] if (ch_u.shape[1] or deg_u.shape[1]) else np.zeros((spec.ng, 0 if spec.ng else 1), np.int64)
        static = bool(s_keys.shape[1] or ch_u.shape[1] or deg_u.shape[1])
        old_max = int(np.flatnonzero(hist)[-1]) if hist.any() else -1
        quiet = lambda r: r >= len(hist) or hist[r] == 0  # noqa: E731 - no old entry at round r anywhere
        none = np.zeros((kk, 0), np.int64)
        # round 0: the start rows
        n0 = s_keys.shape[1]
        ckh = sortk.key_hashes(s_keys, np.empty(n0, np.int64))  # (s_keys: distinct, in arrangement order)
        new = self._values(s_keys, np.zeros(n0, np.int64), e, None, ckh) if n0 else np.zeros(0, np.int64)
        old = self._old(s_keys, np.zeros(n0, np.int64), e) if n0 else np.zeros(0, np.int64)
        ch = new != old
        X = (ckh[ch], np.ascontiguousarray(s_keys[:, ch]), new[ch], old[ch])
        empty_X = (np.zeros(0, np.int64), none, np.zeros(0, np.int64), np.zeros(0, np.int64))
        want_any, delta = self._rewrite(0, X, empty_X, e, tl, marks, hist)
        if quiet(0):  # nothing else had a state at round 0: the states present now are the round's changes
            delta = np.ascontiguousarray(s_keys[:, new != ABSENT])
        r = 0
        while True:
            self.counters["rounds"] += 1
            if spec.rounds is not None and r >= spec.rounds:
                break  # D_rounds
            if r > old_max and not want_any:
                # a fixed point of the new graph, past the old timeline's last entry: no state changes at r
                # and no old entry lies past r, so every later round (up to any round limit) has X_r's states
                # and X_r's old ones (the timeline keeps no entry past r: a later epoch reads the same)
                break
            if not len(X[0]) and not static and r > 0:
                break  # nothing differs at round r and nothing else changed: every later state is the old one
            if delta is not None and quiet(r + 1):
                X, want_any, delta = self._seminaive(r + 1, X, delta, e, tl, marks)
            else:
                X, want_any, delta = self._general(r + 1, X, e, s_keys, groups, ch_u, ch_v, deg_u, tl, marks, hist)
            r += 1
            if rt.interrupted():
                yield  # the old timeline is untouched until _commit: the epoch resumes where it stopped
        return X

    def _out_keys(self, keys, e, kh=None):
        """The state keys of the out-neighbours (as of epoch e) of these state keys (``kh`` as in
        ``_rows``)."""
        ng, nn = self.spec.ng, self.spec.nn
        outs = self._rows(1, np.ascontiguousarray(keys[ng:]), e, None if ng else kh)
        return np.concatenate([keys[:ng, outs.q], outs.vals[:nn]], axis=0)

    def _general(self, r, X, e, s_keys, groups, ch_u, ch_v, deg_u, tl, marks, hist):
        """Round r (>= 1) when the old timeline may change at r: recompute every vertex whose inputs at
        round r - 1 may differ from the old ones (X-driven and static candidates)."""
        cand = [s_keys]
        if X[1].shape[1]:  # (a vertex that lost its state changes its out-neighbours' inputs too)
            cand.append(self._out_keys(X[1], e, X[0]))
        for senders, edge_driven in ((ch_u, True), (deg_u, False)):
            if senders.shape[1]:
                snd = self._cross(groups, senders)
                had = self._old(snd, np.full(snd.shape[1], r - 1), e) != ABSENT
                if edge_driven:
                    cand.append(self._cross(groups, ch_v)[:, had])
                elif had.any():
                    cand.append(self._out_keys(snd[:, had], e))
        ckh, ckeys, _ = key_index(np.concatenate(cand, axis=1))
        n = len(ckh)
        rr = np.full(n, r, np.int64)
        new = self._values(ckeys, rr, e, lambda k, qq: self._current(k, qq, X, e), ckh) if n else np.zeros(0, np.int64)
        old = self._old(ckeys, rr, e) if n else np.zeros(0, np.int64)
        ch = new != old
        X_next = (ckh[ch], np.ascontiguousarray(ckeys[:, ch]), new[ch], old[ch])
        want_any, delta = self._rewrite(r, X_next, X, e, tl, marks, hist)
        return X_next, want_any, delta

    def _seminaive(self, r, X, delta, e, tl, marks):
        """Round r (>= 1) when no vertex has an old entry at r and every change at r - 1 is known
        (``delta``): only the out-neighbours of those changes can change now (semi-naive evaluation);
        every other state stays what it was at r - 1."""
        xkh, xkeys, xnew, xold = X
        if not delta.shape[1]:
            return X, False, delta
        bkh, bkeys, _ = key_index(self._out_keys(delta, e))
        n = len(bkh)
        rr = np.full(n, r, np.int64)
        new = self._values(bkeys, rr, e, lambda k, qq: self._current(k, qq, X, e), bkh) if n else np.zeros(0, np.int64)
        before = self._current(bkeys, rr - 1, X, e)
        old = self._old(bkeys, rr, e)
        moved = new != before
        # X at r: X at r - 1 outside B (same states), and the recomputed ones that differ from old
        stay = seek_keys(bkh, bkeys, xkh, xkeys) < 0 if len(xkh) else np.zeros(0, bool)
        ch = new != old
        kh = np.concatenate([xkh[stay], bkh[ch]])
        keys = np.concatenate([xkeys[:, stay], bkeys[:, ch]], axis=1)
        nv, ov = np.concatenate([xnew[stay], new[ch]]), np.concatenate([xold[stay], old[ch]])
        okh, okeys, inv = key_index(keys) if len(kh) else (kh, keys, np.zeros(0, np.int64))
        order = np.empty(len(okh), np.int64)
        order[inv] = np.arange(len(inv))
        X_next = (okh, okeys, nv[order], ov[order])
        self._store(r, bkh[moved], np.ascontiguousarray(bkeys[:, moved]), new[moved], e, tl, marks)
        return X_next, bool(moved.any()), np.ascontiguousarray(bkeys[:, moved])

    def _current(self, keys, q, X, e):
        """New states at rounds q (all one round, the one X describes): X's where it has them, else old."""
        xkh, xkeys, xnew, _ = X
        if not len(xkh) or not keys.shape[1]:
            return self._old(keys, q, e)
        pkh, pkeys, inv = key_index(keys)
        idx = seek_keys(xkh, xkeys, pkh, pkeys)[inv]
        hit = idx >= 0
        out = np.empty(len(idx), np.int64)
        out[hit] = xnew[idx[hit]]
        miss = ~hit
        if miss.any():  # (the old timeline is read, and dropped states recomputed, only where X is silent)
            out[miss] = self._old(np.ascontiguousarray(keys[:, miss]), np.broadcast_to(q, len(idx))[miss], e)
        return out

    def _rewrite(self, r, X, prev_X, e, tl, marks, hist):
        """Queue the timeline changes at round r for the vertices in X (= X_r) and prev_X (X_{r-1}), the
        only ones whose entry at r can change. Returns whether any of them changes state at round r on
        the new timeline, and the keys of every vertex that does (None when some vertex outside them
        has an old entry at r: its change is unknown here)."""
        keys = np.concatenate([X[1], prev_X[1]], axis=1)
        if not keys.shape[1]:
            return False, (np.zeros((keys.shape[0], 0), np.int64) if r >= len(hist) or hist[r] == 0 else None)
        pkh, keys, _ = key_index(keys)
        n = len(pkh)
        cur = self._current(keys, np.full(n, r, np.int64), X, e)
        before = self._current(keys, np.full(n, r - 1, np.int64), prev_X, e) if r > 0 else np.full(n, ABSENT, np.int64)
        want = cur != before
        g, v = self._stored(keys, np.full(n, r, np.int64))
        at_r = g == r
        found = int(at_r.sum())
        if found:  # retract the stored entry at r
            tl[0].append(keys[:, at_r]), tl[1].append(np.stack([g[at_r], v[at_r]])), tl[2].append(np.full(found, -1))
        if self.tracker is not None and self.tracker.kind == "exact":
            d = self.tracker.latest(keys, pkh, np.full(n, r - 1, np.int64), np.full(n, r, np.int64),
                                    (pkh, keys, np.arange(n)))  # (keys distinct, in arrangement order)
            gone = d == r
            if gone.any():
                k = int(gone.sum())
                found += k
                marks[0].append(keys[:, gone]), marks[1].append(np.full(k, r)), marks[2].append(np.full(k, -1))
        elif self.tracker is not None:
            # a Bloom filter cannot tell which pairs it holds are live, but the old timeline had an entry
            # at (v, r) exactly where the old state changed from r - 1 (X and prev_X carry the old states,
            # elsewhere old = new): one not stored was dropped. Its -1 leaves the filter as it is (a
            # stale pair is a false positive) and keeps ``hist`` exact, so that rounds past the new
            # timeline's end are not re-run for ever after
            had = (self._old_at(pkh, keys, X, cur) != self._old_at(pkh, keys, prev_X, before)) & ~at_r
            if had.any():
                k = int(had.sum())
                found += k
                marks[0].append(keys[:, had]), marks[1].append(np.full(k, r)), marks[2].append(np.full(k, -1))
        self._store(r, pkh[want], np.ascontiguousarray(keys[:, want]), cur[want], e, tl, marks)
        complete = r >= len(hist) or found == hist[r]
        return bool(want.any()), (np.ascontiguousarray(keys[:, want]) if complete else None)

    @staticmethod
    def _old_at(pkh, pkeys, X, new):
        """Old states of these keys (distinct, in arrangement order) at X's round: X's old ones where X has
        them, else their ``new`` states (outside X the new state is the old)."""
        out = new.copy()
        if len(X[0]):
            idx = seek_keys(X[0], X[1], pkh, pkeys)
            hit = idx >= 0
            out[hit] = X[3][idx[hit]]
        return out

    def _store(self, r, kh, keys, values, e, tl, marks):
        """Queue new timeline entries (vertex, r, value), leaving out those the drop policy picks."""
        n = keys.shape[1]
        if not n:
            return
        drop = np.zeros(n, bool)
        if self.tracker is not None:
            deg = self._degrees(keys[self.spec.ng:], e) if self.spec.drop.policy == "degree" else np.zeros(n)
            drop = self.spec.drop.choose(kh, np.full(n, r), deg, self.tau_max if self.tau_max is not None else 0.0)
        keep = ~drop
        k = int(keep.sum())
        if k:
            tl[0].append(keys[:, keep]), tl[1].append(np.stack([np.full(k, r), values[keep]])), tl[2].append(np.ones(k, np.int64))
        if k < n:
            marks[0].append(keys[:, drop]), marks[1].append(np.full(n - k, r)), marks[2].append(np.ones(n - k, np.int64))
            self.counters["dropped"] += n - k

    def _degrees(self, nodes, e):
        """Out-degrees as of epoch e (edge multiplicities summed), for the degree policy."""
        out = self._rows(1, np.ascontiguousarray(nodes), e)
        return _degree_sums(out, nodes.shape[1])

    def _commit(self, e, tl, marks, rt):
        """Append the epoch's timeline (and dropped-pair) changes at time e and compact to e + 1: a
        rewritten entry's retraction and its old insertion then merge away. ``hist`` counts the entries
        (kept or dropped) per round."""
        kk = self.spec.ng + self.spec.nn
        t_keys, t_vals, t_diffs = tl
        if t_diffs:
            keys = np.ascontiguousarray(np.concatenate(t_keys, axis=1), np.int64)
            vals = np.ascontiguousarray(np.concatenate(t_vals, axis=1), np.int64)
            diffs = np.concatenate(t_diffs).astype(np.int64)
            self._count(vals[0], diffs)
        else:
            keys, vals, diffs = np.zeros((kk, 0), np.int64), np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
        shards = form_shards(keys, vals, np.full((len(diffs), 1), e, np.int64), diffs, self.workers, rt.run)
        lower, upper = Antichain([(self.t_upper,)]), Antichain([(e + 1,)])
        self.timeline.insert([Batch(*s, lower, upper) for s in shards], rt.run)
        self.t_upper = e + 1
        self.h_timeline.set_logical_compaction(upper)
        m_keys, m_rounds, m_diffs = marks
        if self.tracker is not None and m_diffs:
            mk = np.ascontiguousarray(np.concatenate(m_keys, axis=1), np.int64)
            mr, md = np.concatenate(m_rounds).astype(np.int64), np.concatenate(m_diffs).astype(np.int64)
            self.tracker.update(mk, mr, md, e, rt.run)
            self._count(mr, md)  # (a Bloom filter's -1s too: its pairs rewritten, see ``_rewrite``)

    def _count(self, rounds, diffs):
        top = int(rounds.max()) + 1 if len(rounds) else 0
        if top > len(self.hist):
            self.hist = np.concatenate([self.hist, np.zeros(top - len(self.hist), np.int64)])
        np.add.at(self.hist, rounds, diffs)

    def _degree_threshold(self, e) -> float:
        """The degree policy's tau_max: the given percentile of the vertices' out-degrees as of epoch e
        (of the vertices with out-edges then: a key whose edges were all removed is in the history still)."""
        side = self.sides[1]
        nodes = Cursor([b for s in range(self.workers) for b in side.history(s)], side.kv, 1).keys()[1]
        degrees = self._degrees(nodes, e) if nodes.shape[1] else np.zeros(0, np.int64)
        degrees = degrees[degrees > 0]
        if not len(degrees):
            return 0.0
        return float(np.percentile(degrees, self.spec.drop.tau_max_percentile))

    # -- statistics --------------------------------------------------------------------------------
    def report(self) -> dict:
        """What this operator keeps, drops and recomputes (any thread: published snapshots and counters)."""
        ts = self.timeline.stats()
        out = {"operator": self.label(), "mode": self.spec.mode, "agg": self.spec.agg,
               "state_differences": int(ts["records"]), "join_differences": 0,
               "dropped": int(self.tracker.markers) if self.tracker is not None else 0,
               "bytes": {"state": int(ts["bytes"]), "join": 0,
                         "dropped_tracker": self.tracker.nbytes() if self.tracker is not None else 0}}
        bloom = self.tracker is not None and self.tracker.kind == "bloom"
        out["bloom"] = self.tracker.describe() if bloom else None  # (no Bloom filter: none to describe)
        out.update({k: int(v) for k, v in self.counters.items() if k != "dropped"})
        out["dropped_total"] = int(self.counters["dropped"])
        return out
