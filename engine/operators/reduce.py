"""The reduce family (K-Pg section 5.3.2): count, sum, min, max, distinct, threshold, argmin/argmax,
top-k and a general reduce with a user ``@njit`` function.

For every key with new input, and every (key, time) of pending work whose time the input frontier has
passed, the operator recomputes the output at each lub of the key's input times not yet final, and
emits the difference from what its output trace accumulates to there. Lubs beyond the frontier
become pending work. The output is kept in an arrangement of its own, which others can share. A
distinct, min or max first drops the keys whose new rows cannot change its output (``_settle``): their
input history is never read.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ..batch import Batch, form_arrays
from ..columns import float_bits, threshold_counts
from ..dataflow import Batches, Operator
from ..kernels import multiplicity_overflow
from ..kernels import reduce as rk
from ..kernels.seek import merge_key_lists, seek_keys
from ..cursor import Cursor, Histories
from ..lattice import Antichain, antichain_of, in_advance_mask
from ..trace import Trace
from .reader import ArrangedInput


@dataclass
class ReduceSpec:
    """What to compute per key. ``op`` is a kernels.reduce op code; ``col`` indexes the input value
    columns; ``mode`` is that column's kind (int, float, or string rank; SUM reads it); ``modes`` gives
    every input value column's kind, from which the ops that need value order (min, max, argmin, argmax,
    top_k, user reduce) compute order keys; ``out_kv`` is the number of output value columns."""

    op: int
    out_kv: int
    col: int = 0
    mode: int = rk.MODE_INT
    k: int = 0
    desc: bool = False
    float_out: bool = False        # SUM over a float column
    fn: object = None              # THRESHOLD: vectorized counts -> counts; USER: njit (vals, counts)
    user_cols: list = field(default_factory=list)
    user_float: bool = False
    out_float: bool = False        # USER: output buffer dtype
    out_dtypes: list = field(default_factory=list)  # USER: the output columns' dtypes (bool and str are checked)
    out_names: list = field(default_factory=list)   # USER: and their names (for errors)
    symbols: object = None
    modes: list = field(default_factory=list)  # per input value column: MODE_INT, MODE_FLOAT or MODE_RANK

    def ordered(self) -> bool:
        """Whether the op reads its groups' rows in value order (order keys)."""
        return self.op in (rk.MIN, rk.MAX, rk.ARGMIN, rk.ARGMAX, rk.TOPK, USER)


USER = 100


class ReduceOp(Operator):
    kind = "reduce"
    family = "reduce"
    arranged = True
    lazy_rounds = True

    def __init__(self, scope, input, spec: ReduceSpec, kk: int, workers: int, effort="default", site=None,
                 name="reduce"):
        super().__init__(scope, [input], site)
        self.kind = name
        self.spec = spec
        self.workers = workers
        d = scope.depth
        self.upper = Antichain([(0,) * d])
        self.out_trace = Trace(kk, spec.out_kv, d, workers, self.upper, effort, name)
        self.h_out = self.out_trace.handle(owner=f"{self.label()} (its output)")
        self._out = weakref.ref(self.out_trace)  # (what readers find once the operator is released)
        self.pending = [None] * workers  # per shard: (kh, keys, times) of future (key, time) work
        self.input = None  # ArrangedInput, from install until released
        self.held = Antichain()  # minimal times of pending work: where output may still change
        # per shard: what the kernels count as work (see work_done)
        self.work = [[0, 0, 0, 0] for _ in range(workers)]
        # what phase 1 lists per group: COUNT reads the total only; MIN and MAX (over their one value
        # column, in value order) the first or last value of positive multiplicity; the rest everything
        self._listing = {rk.COUNT: rk.LIST_TOTAL, rk.MIN: rk.LIST_FIRST, rk.MAX: rk.LIST_LAST}.get(spec.op, rk.LIST_ALL)

    def work_done(self) -> dict:
        """Totals over all shards since install: the times and updates phase 1 visited, the output updates
        and values phase 3 visited (sorting aside), and the keys each phase took the general route for
        (times not totally ordered). A measure of algorithmic cost that tests assert on without timing."""
        names = ("times", "diff", "times_general", "diff_general")
        return {n: sum(w[i] for w in self.work) for i, n in enumerate(names)}

    def capabilities(self):
        return self.held

    def due(self) -> bool:
        return bool(self.held.elements) and not self.frontier.less_equal(self.held)

    def follow_epoch(self):
        # (later output lies at or after the frontier: pending work is not due, so none comes before it)
        self.h_out.set_logical_compaction(self.frontier)
        self.input.compact(self.frontier)

    @property
    def trace(self):
        return self._out()

    def owned_trace(self):
        return self._out()

    def install(self, rt):
        self.input = ArrangedInput(self.inputs[0], self.label())
        if self.spec.op in (rk.DISTINCT, rk.THRESHOLD) and self.input.kv == 0:
            # a group's rows are all one (empty) value: its total multiplicity is all that phase 2 reads
            self._listing = rk.LIST_TOTAL
        # which keys _settle may drop: a min's (1), a max's (-1), a value-less distinct's (0); None: none
        self._settles = {rk.MIN: 1, rk.MAX: -1}.get(self.spec.op)
        if self.spec.op == rk.DISTINCT and self._listing == rk.LIST_TOTAL:
            self._settles = 0

    def release(self):
        """The input's handle, and the output trace: whoever still holds this operator (a view of the
        dropped dataflow, through its graph) must not keep it; importers of an export hold their own."""
        if self.input is not None:
            self.input.release()
        if self.out_trace is not None:
            self.h_out.close()
            self.out_trace = None

    def step(self, rt):
        msgs = self.take()
        F = self.frontier
        if not msgs and F == self.upper:
            return
        bound = self.held
        for m in msgs:
            bound = bound.meet(m.lower)
        W = self.workers
        delta = [tuple(b for m in msgs for b in m.shards[s] if len(b)) for s in range(W)]
        self.input.acknowledge(msgs)
        lower = self.upper
        work = sum(len(b) for bs in delta for b in bs) + sum(0 if p is None else len(p[0]) for p in self.pending)
        if work:
            batches = rt.run(lambda s: self._shard(s, delta[s], lower, F), range(W), rows=work)
        else:  # only the frontier moved (a loop round elsewhere) and nothing is pending: nothing to read
            batches = [Batch.empty(self.input.kk, self.spec.out_kv, self.scope.depth, lower, F) for _ in range(W)]
        self.upper = F
        self.out_trace.insert(batches, rt.run)
        if any(len(b) for b in batches):
            self.send(Batches([(b,) for b in batches], bound, F, F))
        pend = [p[2] for p in self.pending if p is not None and len(p[2])]
        self.held = antichain_of(np.concatenate(pend, axis=0)) if pend else Antichain()
        if F.elements:
            self.h_out.set_logical_compaction(F)
            self.input.compact(F)
        else:  # every input closed: this operator reads neither trace again (readers elsewhere hold their own)
            self.input.release()
            self.h_out.close()
            self.out_trace = None

    # -- one shard ----------------------------------------------------------------------------
    def _shard(self, s, delta, lower, upper) -> Batch:
        inp = self.input
        kk = inp.kk
        d = self.scope.depth
        spec = self.spec
        # pending work whose time the frontier has passed
        pend = self.pending[s]
        ready_kh = ready_keys = ready_times = None
        if pend is not None:
            pkh_all, pkeys_all, ptimes_all = pend
            later = in_advance_mask(ptimes_all, upper) if upper.elements else np.zeros(len(pkh_all), bool)
            ready = ~later
            if ready.any():
                ready_kh, ready_keys, ready_times = pkh_all[ready], pkeys_all[:, ready], ptimes_all[ready]
                self.pending[s] = (pkh_all[later], pkeys_all[:, later], ptimes_all[later]) if later.any() else None
        if not delta and ready_kh is None:
            return Batch.empty(kk, spec.out_kv, d, lower, upper)
        dcur = inp.cursor(delta)
        pkh, pkeys = dcur.keys() if delta else (np.zeros(0, np.int64), np.zeros((kk, 0), np.int64))
        dh = hout = None
        if delta and self._settles is not None:
            dh = dcur.seek(pkh, pkeys)
            hout = self._output_cursor(s).seek(pkh, pkeys)
            pkh, pkeys, dh, hout = self._settle(s, pkh, pkeys, dh, hout)
            if not len(pkh) and ready_kh is None:
                return Batch.empty(kk, spec.out_kv, d, lower, upper)
            if ready_kh is not None:  # (the keys with pending work due join the probe keys below, and
                dh = hout = None      # these are sought again for them all)
        if ready_kh is not None:
            # pending work is kept in arrangement order, so the ready part is sorted by key already
            rk_sorted, rkeys_sorted, rtimes = ready_kh, np.ascontiguousarray(ready_keys), ready_times
            keep = np.ones(len(rk_sorted), bool)
            if len(rk_sorted) > 1:
                same = rk_sorted[1:] == rk_sorted[:-1]
                if kk:
                    same &= (rkeys_sorted[:, 1:] == rkeys_sorted[:, :-1]).all(axis=0)
                keep[1:] = ~same
            pkh, pkeys = merge_key_lists(pkh, pkeys, rk_sorted[keep], np.ascontiguousarray(rkeys_sorted[:, keep]))
        m = len(pkh)
        # seeds: times of new input for each probe key, and ready pending times
        if dh is None and delta:
            dh = dcur.seek(pkh, pkeys)
        if ready_kh is None:  # the new input's times alone, already grouped by probe key
            stimes, soff = np.ascontiguousarray(dh.times), dh.off
        else:
            seed_probe = [np.repeat(np.arange(m), np.diff(dh.off))] if dh is not None else []
            seed_times = [dh.times] if dh is not None else []
            seed_probe.append(seek_keys(pkh, pkeys, rk_sorted, rkeys_sorted))
            seed_times.append(rtimes)
            sp = np.concatenate(seed_probe)
            st = np.concatenate(seed_times, axis=0)
            order = np.argsort(sp, kind="stable")
            stimes = np.ascontiguousarray(st[order])
            soff = np.zeros(m + 1, np.int64)
            np.add.accumulate(np.bincount(sp, minlength=m), out=soff[1:])
        # histories of input (through the acknowledged frontier) and of our own output
        if (self._settles is not None and dh is not None and ready_kh is None and self.pending[s] is None and not len(hout)
                and self._insertions_only(s)):
            hin = dh  # (see _insertions_only)
        else:
            hin = inp.cursor(inp.history(s)).seek(pkh, pkeys)
        if hout is None:
            hout = self._output_cursor(s).seek(pkh, pkeys)
        if dh is not None and _fresh(dh, hin, hout, soff, upper):
            return self._first(s, pkh, pkeys, dh, hin, lower, upper)
        return self._phases(s, pkh, pkeys, hin, hout, soff, stimes, lower, upper)

    def _settle(self, s, pkh, pkeys, dh, hout):
        """The probe keys (with their new rows ``dh`` and output ``hout``) left once those whose output
        cannot change are dropped (``settled_keys``): keys whose new rows are insertions, whose output
        rows sum to 1 and all lie at or before every new row's time, and, for a min or max, are of one
        value that no new value beats. The output is then that one row at every time t from the new rows
        on. Where no work of the key pending at or before t remains, it is right (the key present, its
        extreme value present), and insertions that do not beat it keep it so; work pending reads the
        whole history when it runs. The input history of a settled key is never read: in a recursive
        rule these are the rows derived again in later rounds, most of what a Datalog rule's distinct is
        offered, and the labels or distances that do not improve on a node's own."""
        if not len(hout):
            return pkh, pkeys, dh, hout
        settled = rk.settled_keys(hout.off, hout.times, hout.diffs, self._order_keys(hout.vals), dh.off, dh.times,
                                  dh.diffs, self._order_keys(dh.vals), self._settles)
        if not settled.any():
            return pkh, pkeys, dh, hout
        idx = np.flatnonzero(~settled)
        pkh, pkeys = pkh[idx], pkeys.take(idx, axis=1)
        return pkh, pkeys, _subset(dh, idx, pkh, pkeys), _subset(hout, idx, pkh, pkeys)

    def _insertions_only(self, s) -> bool:
        """Whether every row of the input history in shard ``s`` is an insertion (a first load, a
        recursion's rounds, or retractions since compacted away). Then, with no work pending, a key
        without output rows has no input rows but its new ones: an earlier row would make the key
        present from its time on, with an output row there."""
        return all(b.balance == len(b) for b in self.input.history(s))

    def _output_cursor(self, s) -> Cursor:
        return Cursor(self.out_trace.snapshot.batches(s), self.spec.out_kv, self.scope.depth)

    def _phases(self, s, pkh, pkeys, hin, hout, soff, stimes, lower, upper) -> Batch:
        """The three phases for these probe keys: the output batch; lubs beyond ``upper`` become pending
        work."""
        spec = self.spec
        d = self.scope.depth
        up = upper.matrix(d)
        okeys = self._order_keys(hin.vals)
        g_key, g_time, g_off, acc_row, acc_cnt, f_key, f_time, work = rk.reduce_times(
            hin.off, okeys, hin.times, hin.diffs, hout.off, hout.times, soff, stimes, up, self._listing)
        self.work[s][0] += work[0]
        self.work[s][2] += work[1]
        if len(f_key):
            self._add_pending(s, pkh[f_key], pkeys[:, f_key], f_time)
        if not len(g_key):
            return Batch.empty(pkeys.shape[0], spec.out_kv, d, lower, upper)
        des_off, des_cnt, des_vals = self._apply(g_off, acc_row, acc_cnt, hin.vals, okeys)
        c_key, c_vals, c_time, c_diff, work = rk.reduce_diff(g_key, g_time, des_off, des_vals, des_cnt,
                                                             hout.off, hout.vals, hout.times, hout.diffs)
        self.work[s][1] += work[0]
        self.work[s][3] += work[1]
        if not len(c_key):
            return Batch.empty(pkeys.shape[0], spec.out_kv, d, lower, upper)
        return _output(pkh, pkeys, c_key, c_vals, c_time, c_diff, lower, upper)

    def _first(self, s, pkh, pkeys, dh, hin, lower, upper) -> Batch:
        """The output where every probe key is fresh (``_fresh``): a key's output at its one time is phase 2
        over its rows, with no earlier output to subtract and no later time to visit."""
        spec = self.spec
        d = self.scope.depth
        m = len(pkh)
        times = _first_times(dh)
        self.work[s][0] += len(hin) + m  # (what phase 1 would visit: each row, and each key's seed)
        if spec.op == rk.DISTINCT:  # a key's rows are distinct values at one time: each positive one, once
            keep = hin.diffs > 0
            n = int(np.count_nonzero(keep))
            self.work[s][1] += n
            if not n:
                return Batch.empty(pkeys.shape[0], spec.out_kv, d, lower, upper)
            if n == len(hin):
                return Batch(pkh, pkeys, hin.off, np.ascontiguousarray(hin.vals), np.ascontiguousarray(hin.times),
                             np.ones(n, np.int64), lower, upper)
            kept = np.zeros(len(hin) + 1, np.int64)
            np.cumsum(keep, out=kept[1:])
            per = kept[hin.off[1:]] - kept[hin.off[:-1]]
            has = per > 0
            koff = np.zeros(int(np.count_nonzero(has)) + 1, np.int64)
            np.cumsum(per[has], out=koff[1:])
            return Batch(pkh[has], np.ascontiguousarray(pkeys[:, has]), koff, np.ascontiguousarray(hin.vals[:, keep]),
                         np.ascontiguousarray(hin.times[keep]), np.ones(n, np.int64), lower, upper)
        rows = np.arange(len(hin), dtype=np.int64)
        okeys = self._order_keys(hin.vals)
        if okeys is not hin.vals:  # phase 2 reads a group's rows in value order: by their order keys
            rows = rows[np.lexsort((*okeys[::-1], np.repeat(np.arange(m), np.diff(hin.off))))]
        des_off, des_cnt, des_vals = self._apply(hin.off, rows, np.ascontiguousarray(hin.diffs[rows]), hin.vals,
                                                 okeys)
        per = np.diff(des_off)
        self.work[s][1] += len(des_cnt)
        if not len(des_cnt):
            return Batch.empty(pkeys.shape[0], spec.out_kv, d, lower, upper)
        return _output(pkh, pkeys, np.repeat(np.arange(m), per), des_vals, np.repeat(times, per, axis=0),
                       des_cnt, lower, upper)

    def _order_keys(self, vals):
        """Order keys of the input's value columns (their value order as signed int64), for the ops that
        read rows in value order; the stored values themselves otherwise (or when all are int64/bool)."""
        spec = self.spec
        modes = spec.modes
        if not spec.ordered() or not any(m != rk.MODE_INT for m in modes):
            return vals
        if len(modes) != vals.shape[0]:
            raise AssertionError(f"reduce spec has {len(modes)} column modes for {vals.shape[0]} value columns")
        rank = spec.symbols.ranks() if rk.MODE_RANK in modes else np.zeros(0, np.int64)
        return rk.order_keys(np.ascontiguousarray(vals), np.asarray(modes, np.int64), rank)

    def _apply(self, g_off, acc_row, acc_cnt, ivals, okeys):
        spec = self.spec
        if spec.op == USER:
            uv = ivals[spec.user_cols]
            uv = np.ascontiguousarray(uv.view(np.float64) if spec.user_float else uv)
            proto = np.empty((0, spec.out_kv), np.float64 if spec.out_float else np.int64)
            des_off, des_cnt, out, bad, badv, over, frac, fracv, shape = rk.reduce_apply_user(
                spec.fn, g_off, acc_row, acc_cnt, uv, proto)
            if shape[0] >= 0:
                raise ValueError(f"the reduce function returned values of shape ({shape[0]}, {shape[1]}) and "
                                 f"counts of shape ({shape[2]},); expected values of shape (p, {spec.out_kv}), "
                                 f"one column per output column {spec.out_names}, and p counts")
            if over:
                raise multiplicity_overflow()
            if frac:  # (as threshold's counts: truncating would drop or change rows silently)
                raise ValueError(f"the reduce function returned the count {fracv!r}: counts are multiplicities, "
                                 f"whole numbers (return them as integers)")
            if bad >= 0:
                name, dt = spec.out_names[bad % spec.out_kv], spec.out_dtypes[bad % spec.out_kv]
                raise ValueError(f"the reduce function returned {badv!r} for output column {name!r}, which the "
                                 f"dataflow declared {dt}: declare the output columns with out= (e.g. "
                                 f"out={{{name!r}: 'float64'}})")
            out = np.ascontiguousarray(out.T)
            des_vals = out.view(np.int64) if spec.out_float else out.astype(np.int64, copy=False)
            if spec.out_float:
                des_vals = _canonical_floats(des_vals)
            des_vals = np.ascontiguousarray(des_vals)
            _check_user_outputs(des_vals, spec, des_off, g_off, acc_row, ivals)
            return des_off, des_cnt, des_vals
        A = len(acc_row)
        out = np.zeros((spec.out_kv, max(A, 1)), np.int64)
        fvals = ivals.view(np.float64)
        des_off, des_cnt, n = rk.reduce_apply(spec.op, g_off, acc_row, acc_cnt, ivals, fvals, okeys, spec.mode,
                                              spec.col, spec.k, spec.desc, out, out.view(np.float64))
        if n == -2:
            raise multiplicity_overflow()  # (a count: the multiplicities of a group's rows summed)
        if n < 0:
            return _exact_int_sums(g_off, acc_row, acc_cnt, ivals[spec.col])
        des_vals = out[:, :n]
        if spec.float_out:
            des_vals = _canonical_floats(des_vals)
        if spec.op == rk.THRESHOLD:
            des_cnt = threshold_counts(spec.fn, des_cnt)
        return des_off, des_cnt, np.ascontiguousarray(des_vals)

    def _add_pending(self, s, kh, keys, times):
        cur = self.pending[s]
        if cur is None:
            # phase 1 lists a key's future times once each, keys in probe (arrangement) order: already
            # distinct (key, time) pairs in the order kept (times copied: they view a kernel buffer)
            self.pending[s] = (kh, keys, times.copy())
            return
        keys, times = np.ascontiguousarray(keys), np.ascontiguousarray(times)
        okh, okeys, otimes, ok = rk.merge_pending(cur[0], np.ascontiguousarray(cur[1]), cur[2], kh, keys, times)
        if ok:
            self.pending[s] = (okh, okeys, otimes)
            return
        kh = np.concatenate([cur[0], kh])
        keys = np.concatenate([cur[1], keys], axis=1)
        times = np.concatenate([cur[2], times], axis=0)
        # distinct (key, time) pairs
        n = len(kh)
        okh, okeys, koff, _, otimes, _ = form_arrays(np.ascontiguousarray(keys), np.zeros((0, n), np.int64),
                                                     np.ascontiguousarray(times), np.ones(n, np.int64))
        rep = np.diff(koff)
        self.pending[s] = (np.repeat(okh, rep), np.repeat(okeys, rep, axis=1), otimes)


def _fresh(dh, hin, hout, soff, upper) -> bool:
    """Whether every probe key is fresh: its whole input history is its new updates (the delta's rows
    ``dh``), distinct values all at one time the frontier has passed, with no output yet and no other work
    due (a first load, or what a loop derives for the first time: sg's pairs, each derived once). Checked
    cheapest first, so a step with an older key is told in a few calls."""
    if len(hout) or len(hin) != len(dh) or not np.array_equal(dh.off, hin.off) or not np.array_equal(soff, dh.off):
        return False
    if not np.array_equal(hin.times, dh.times):  # (the rows line up: same offsets, probe order)
        return False
    first = _first_times(dh)
    counts = np.diff(dh.off)
    if len(dh) > len(counts):  # a key with several rows: one time, and distinct values in order (advancing
        # times through an import's lens can give rows of two batches one time without consolidating them)
        if not (dh.times == np.repeat(first, counts, axis=0)).all():
            return False
        key = np.repeat(np.arange(len(counts)), counts)
        ahead, tied = np.zeros(len(key) - 1, bool), np.ones(len(key) - 1, bool)
        for col in hin.vals:
            ahead |= tied & (col[:-1] < col[1:])
            tied &= col[:-1] == col[1:]
        if ((key[1:] == key[:-1]) & ~ahead).any():
            return False
    return not (upper.elements and in_advance_mask(first, upper).any())


def _subset(h: Histories, idx: np.ndarray, kh, keys) -> Histories:
    """The histories of the probe keys ``idx`` (whose hashes and keys are ``kh``, ``keys``)."""
    starts = h.off[idx]
    counts = h.off[idx + 1] - starts
    off = np.zeros(len(idx) + 1, np.int64)
    np.add.accumulate(counts, out=off[1:])
    if (counts == 1).all():  # (one row a key: a distinct's new rows)
        rows = starts
    else:
        rows = np.arange(off[-1], dtype=np.int64) + np.repeat(starts - off[:-1], counts)
    return Histories(kh, keys, off, h.vals.take(rows, axis=1), h.times.take(rows, axis=0),
                     h.diffs[rows])


def _first_times(h):
    """Each probe key's first row's time: the rows' own times where every key has one row (sg's pairs,
    each derived once), without a gather."""
    return h.times if len(h) == len(h.off) - 1 else h.times[h.off[:-1]]


def _output(pkh, pkeys, c_key, c_vals, c_time, c_diff, lower, upper) -> Batch:
    """The output batch of corrections to probe keys ``c_key``: built in place when phase 3 emitted them
    in batch order (the probe keys are in arrangement order already), formed otherwise."""
    # phase 3's arrays are views of larger buffers: one copy each (C-ordered), so a batch built from them
    # does not keep those buffers alive
    c_vals, c_time, c_diff = np.array(c_vals, order="C"), np.array(c_time, order="C"), c_diff.copy()
    used, koff = rk.probe_runs(c_key, c_vals, c_time, c_diff)  # (empty koff: not in batch order)
    if not len(koff):
        return Batch.form(pkeys[:, c_key], c_vals, c_time, c_diff, lower, upper)
    return Batch(pkh[used], np.ascontiguousarray(pkeys[:, used]), koff, c_vals, c_time, c_diff, lower, upper)


def _check_user_outputs(vals: np.ndarray, spec: ReduceSpec, des_off, g_off, acc_row, ivals):
    """A user reduce's bool outputs as 0/1 (any non-zero is True, as NumPy converts), and its str
    outputs checked to be ids its group received from a str input column (in place: the buffer is the
    step's own): another id would name whichever string the engine happened to intern under it."""
    str_in = [c for c in spec.user_cols if spec.modes[c] == rk.MODE_RANK]
    for i, dt in enumerate(spec.out_dtypes):
        if dt == "bool":
            vals[i] = vals[i] != 0
        elif dt == "str" and vals.shape[1]:
            groups = len(des_off) - 1
            span = len(spec.symbols) + 1  # (group, id) pairs as one int64: group * span + id
            out_pairs = np.repeat(np.arange(groups), np.diff(des_off)) * span + vals[i]
            in_group = np.repeat(np.arange(groups), np.diff(g_off)) * span
            received = np.concatenate([in_group + ivals[c][acc_row] for c in str_in]) if str_in else in_group[:0]
            bad = (vals[i] < 0) | (vals[i] >= len(spec.symbols)) | ~np.isin(out_pairs, received)
            if bad.any():
                raise ValueError(f"the reduce function returned {int(vals[i][bad][0])} for output column "
                                 f"{spec.out_names[i]!r} (str), which is no id its group received: a str output "
                                 f"must be an id the function received from a str input column of that group")


def _canonical_floats(bits: np.ndarray) -> np.ndarray:
    return float_bits(bits.view(np.float64))



def _exact_int_sums(g_off, acc_row, acc_cnt, vals):
    """SUM's phase 2 in Python integers, for the rare groups where int64 products or partial sums pass
    2**63 (the kernel's wrapping arithmetic would still be exact for a total in range, but cannot tell):
    a total outside int64 fails the dataflow rather than wrapping."""
    des_off, totals = [], []
    for g in range(len(g_off) - 1):
        des_off.append(len(totals))
        a0, a1 = int(g_off[g]), int(g_off[g + 1])
        if a1 > a0:
            total = sum(int(vals[r]) * int(c) for r, c in zip(acc_row[a0:a1], acc_cnt[a0:a1]))
            if not -(1 << 63) <= total < (1 << 63):
                raise OverflowError(f"an int64 sum overflows: a group's total is {total}, outside int64; sum a "
                                    f"float64 column for such totals")
            totals.append(total)
    des_off.append(len(totals))
    return (np.asarray(des_off, np.int64), np.ones(len(totals), np.int64),
            np.asarray([totals], np.int64).reshape(1, len(totals)))
