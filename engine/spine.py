"""Spine: one shard's collection trace, an append-only list of batches kept at logarithmically many by
merging neighbours of similar size. Merges are amortised (K-Pg section 4.2): each inserted batch spends
fuel proportional to its size on every merge in progress, so no single insertion stalls on a big merge.

Merges respect two frontiers supplied by the trace's readers: the logical compaction frontier (times are
advanced to rep_F while merging) and the physical one (a batch is only merged once its upper is at or
before it, so readers that read "through" a frontier still find a batch boundary there).

Size classes alone do not bound memory under churn: retractions sit in young batches while the records
they cancel sit in the oldest, which size-based merging reaches rarely, and a batch merged while the
readers' frontier lagged keeps times that later became indistinguishable. So a spine also *tidies*:

- when its records exceed ``BLOAT`` times an estimate of its live records, it folds its two oldest
  batches together (once the logical frontier has reached the younger one, so its retractions can
  cancel). The estimate is the balance (records with positive diffs minus those with negative ones)
  over the batches that start at or before the logical frontier (at depth 1 at most their (key, value)
  pairs, counting all records of a batch whose times do not all compact to one: a row inserted 60 times
  and retracted a copy an epoch is 60 records of balance -58 that leave one), plus every record of the batches
  that start past it (times readers still tell apart), plus the oldest batch's records that its balance
  does not explain if compacting it further cannot merge them (it is consolidated, so they are distinct
  live pairs: negative rows, or rounds of an iteration's history). For a set it is exact once compacted;
- when the oldest batch's ``since`` lags the logical frontier and advancing its times could merge some
  of them (its times differ in a coordinate the frontier has passed), it re-compacts that batch alone
  if the next one cannot be folded in yet.

Tidying merges get ``BOOST`` times the usual fuel, so one ends before new records bloat the spine again.
One that did not shrink its input is not retried before the spine grows by ``BLOAT`` or the logical
frontier passes every epoch of its output, so a wrong estimate costs bounded work. The scheduler tidies
right after each step and finishes merges while idle (``exert``).

Owner: a spine is written by the scheduler thread only (or by the one pool worker it hands this shard to
for the length of a step); ``append`` cannot fail and ``maintain`` may fail (a merge error) without
losing or duplicating anything: a merge in progress is resumable. Readers outside the scheduler never
look at a spine: they read the trace's published snapshot.
"""
from __future__ import annotations

from . import faults
from .batch import Batch, Merger, advancing, merged, merged_range
from .lattice import Antichain

EFFORT = {"eager": None, "default": 2.0, "lazy": 1.0}
MIN_FUEL = 1024  # every insertion, even of an empty batch, moves merges along a little
BLOAT = 1.5      # tidy when records exceed this multiple of the estimated live records
BOOST = 4        # fuel multiplier while bloated: a tidying merge ends before new records re-bloat
ANY = object()   # (in a settled key) any frontier: maintenance does not depend on this one
TIDY_ROUNDS = 3  # tidying merges one maintenance call may start and fuel, one after another
SHRINK = 0.9     # a tidying merge whose output keeps more than this share of its input did not help


class _Merging:
    """Two adjacent batches being merged; readers keep seeing both until the merge completes."""

    __slots__ = ("older", "newer", "merger", "since", "tidy", "advanced")

    def __init__(self, older: Batch, newer: Batch, since: Antichain, tidy: bool = False):
        self.older = older
        self.newer = newer
        self.since = since
        self.tidy = tidy  # a tidying merge (module docstring), not one of similar sizes
        f = advancing(since, older, newer)
        self.advanced = f is not None
        self.merger = Merger(older.arrays, newer.arrays, f)

    def __len__(self):
        return len(self.older) + len(self.newer)

    def result(self) -> Batch:
        out = Batch(*self.merger.result, self.older.lower, self.newer.upper, self.since)
        return merged_range(out, self.older, self.newer, self.advanced)


class Spine:
    """One shard of a trace: its batches (oldest first), merges in progress, and its upper frontier."""

    def __init__(self, kk: int, kv: int, depth: int, lower: Antichain, effort: str = "default"):
        if effort not in EFFORT:
            raise ValueError(f"effort must be one of {sorted(EFFORT)}, not {effort!r}")
        self.kk, self.kv, self.depth = kk, kv, depth
        self.effort = effort
        self.lower = lower
        self.cleared_since = lower  # the since of the history folded away when the spine emptied (its since then)
        self.entries: list = []  # batches and merges in progress, oldest first
        self.version = 0         # bumped whenever entries or the upper change (snapshots are rebuilt then)
        self._shape = 0          # bumped whenever the entries change
        self._settled = None     # (logical, physical), each or ANY, at which maintenance last left nothing to do
        self.progress = 0        # bumped whenever merges in progress are given fuel (their shortfall shrinks)
        self._readable = None
        self._merging = None
        self._estimate = (None, 0)  # ((entries' shape, logical frontier), live_estimate) of the last estimate
        self._records = 0        # updates held (both inputs of merges in progress)
        self._balance = 0        # the sum of the held batches' balances
        self.upper = lower
        self._owed = 0  # rows appended since the last maintenance
        self._guard = (0, None)  # (records, time): a failed tidy waits for more records or the frontier past its epoch
        self.merges_completed = 0

    # -- reading (owner only) ------------------------------------------------------------------
    def batches(self) -> tuple:
        """The readable batches, oldest first: merges in progress show as their two inputs."""
        if self._readable is None:
            out = []
            for e in self.entries:
                if isinstance(e, _Merging):
                    out.append(e.older)
                    out.append(e.newer)
                elif len(e):
                    out.append(e)
            self._readable = tuple(out)
        return self._readable

    def _changed(self):
        """The entries changed: readers' view and statistics must be recomputed."""
        self.version += 1
        self._shape += 1
        self._readable = None
        self._merging = None
        self._settled = None

    @property
    def shape(self) -> int:
        """Bumped whenever the entries change (not when only the upper moves)."""
        return self._shape

    def snapshot(self):
        """(batches, upper) as one consistent pair."""
        return self.batches(), self.upper

    @property
    def records(self) -> int:
        """Updates held, counting both inputs of every merge in progress."""
        return self._records

    def live_estimate(self, logical: Antichain) -> int:
        """An estimate of the records left once everything is merged and compacted to ``logical``
        (module docstring)."""
        key = (self._shape, logical.elements)
        if self._estimate[0] == key:
            return self._estimate[1]
        bs = self.batches()
        if not bs:
            return 0
        balance, window, settled = self._balance, 0, len(bs)
        for b in reversed(bs[1:]):  # batches starting past the frontier hold times readers tell apart
            if b.lower.less_equal(logical):
                break
            balance -= b.balance
            window += b.n
            settled -= 1
        core = abs(balance)
        if self.depth == 1:
            # a batch whose every time compacts to one keeps at most one record per (key, value) pair
            core = min(core, sum(b.pairs if b.upper.less_equal(logical) else b.n for b in bs[:settled]))
        first = bs[0]
        hidden = 0 if first.collapses(logical) else first.n - abs(first.balance)
        est = core + hidden + window
        self._estimate = (key, est)
        return est

    def bloated(self, logical: Antichain) -> bool:
        """Whether tidying looks worthwhile: more than ``BLOAT`` times the estimated live records, and
        no failed tidy says it will not help yet (module docstring)."""
        r = self._records
        if self._unfolded(logical):
            return True
        # most calls are answered by the estimate's floor, without it (it is recomputed whenever the
        # logical frontier moves)
        if (r <= BLOAT * self._floor() or r <= BLOAT * self.live_estimate(logical)) \
                and not self._may_repeat():
            return False
        limit, hi = self._guard
        return r > limit or _passed(hi, logical)

    def _floor(self) -> int:
        """The screen ``bloated`` and ``_settle`` apply before the estimate, in O(1) where it can be:
        |balance| (each batch's |balance| is at most its records). At depth 1 with more records
        retracting than inserting, which a collection of positive multiplicities only holds where
        retractions cancel parts of them (a row inserted 60 times and retracted a copy an epoch is 60
        records of balance -58 that leave one), at most the batches' (key, value) pairs, which bound the
        estimate once the batches compact. (With mostly insertions, rows repeated over epochs can leave
        fewer records than |balance|: ``_may_repeat`` catches those past the screen; a bag whose copies
        are all retracted at once with one record, leaving fewer than its balance, is not caught.)"""
        floor = abs(self._balance)
        if self.depth == 1 and self._balance < 0:
            floor = min(floor, sum(b.pairs for b in self.batches()))
        return floor

    def _unfolded(self, logical: Antichain) -> bool:
        """Whether a complete spine (its upper empty: every input closed, nothing more is appended) could
        still shrink: several batches, or one whose times compacting to ``logical`` would merge. It is
        folded into one batch at the readers' frontier, once, whatever the estimates say."""
        if self.upper.elements or not self._records:
            return False
        bs = self.batches()
        return len(bs) > 1 or bs[0].collapses(logical)

    def _may_repeat(self) -> bool:
        """Whether an epoch-timed bag of mostly insertions may hold the same rows in several batches or
        times (a click stream's repeated rows, which the balance counts once per record though compaction
        adds them up; a retracted click does not change that): its records exceed ``BLOAT`` times the
        largest batch's distinct (key, value) pairs (its records, for a batch bigger than that bound allows:
        one merged while a reader held its times apart), a lower bound of its live records where nothing is
        retracted. Tidying is then worth a try; where the rows are all distinct a fold leaves one batch
        holding most records, and the failed-tidy guard bounds the rest. (Not inside loops, whose rounds
        are distinct times.)"""
        r = self._records
        return self.depth == 1 and self._balance > 0 and all(
            r > BLOAT * (b.pairs if BLOAT * len(b) >= r else len(b)) for b in self.batches())

    def settled(self, logical: Antichain, physical: Antichain) -> bool:
        """Whether maintenance has nothing to do at these frontiers: it last found no merge in progress
        and none to start, and since then the entries have not changed, nor a frontier it depends on
        (``_settle``)."""
        s = self._settled
        return (s is not None and (s[0] is ANY or s[0] == logical.elements)
                and (s[1] is ANY or s[1] == physical.elements))

    def _settle(self, logical: Antichain, physical: Antichain):
        """Record that maintenance left nothing to do, and on which frontiers that depends. Only tidying
        reads the logical frontier, and a spine with at most ``BLOAT`` times its ``_floor`` in records is
        never bloated, whatever that frontier. The physical
        frontier only holds merges back: once every batch's upper is at or before it, no other one lets
        more merges start. So a loop's trace stays settled while its readers' frontiers move every
        round, and inserting an empty batch there plans no merges at all."""
        lo = ANY if self._records <= BLOAT * self._floor() and not self._may_repeat() \
            and not self._unfolded(logical) else logical.elements
        # the batches' uppers advance along the spine: the last one's bounds them all
        ph = ANY if self._last_upper().less_equal(physical) else physical.elements
        self._settled = (lo, ph)

    def tidy_work(self, logical: Antichain, physical: Antichain) -> bool:
        """Whether tidying has work now: a tidying merge in progress, or a bloated spine whose oldest
        batch is being merged or could start a tidying merge."""
        if self.settled(logical, physical):
            return False  # maintenance found nothing to start, tidying included, and nothing changed since
        es = self.entries
        if any(isinstance(e, _Merging) and e.tidy for e in es):
            return True
        return bool(es) and self.bloated(logical) and (
            isinstance(es[0], _Merging) or self._tidy_pair(logical, physical) is not None)

    def idle_work(self, logical: Antichain, physical: Antichain) -> bool:
        """Whether maintenance would do anything now: a merge in progress, or tidying."""
        if self.settled(logical, physical):
            return False
        return self._merging_count() > 0 or self.tidy_work(logical, physical)

    def merging(self) -> tuple:
        """(merges in progress, bytes of their output buffers, input rows they still have to merge)."""
        if self._merging is None:
            ms = [e for e in self.entries if isinstance(e, _Merging)]
            self._merging = (len(ms), sum(m.merger.nbytes for m in ms))
        count, nbytes = self._merging
        return count, nbytes, sum(e.merger.remaining for e in self.entries if isinstance(e, _Merging)) if count else 0

    # -- writing ------------------------------------------------------------------------------
    def append(self, batch: Batch):
        """Append a batch whose lower is the current upper. Cannot fail half-way."""
        if batch.lower != self.upper:
            raise ValueError(f"batch lower {batch.lower} does not continue the trace upper {self.upper}")
        self.upper = batch.upper
        if len(batch):
            stored = self._last_upper()
            if stored != batch.lower:
                batch = batch.relabel(stored, batch.upper)
            self.entries.append(batch)
            self._records += len(batch)
            self._balance += batch.balance
            self._changed()
            self._owed += len(batch)
        else:
            self.version += 1  # only the upper moved: the entries (and what maintenance can do) are the same,
            if not batch.upper.elements:  # unless the spine is complete now (it may fold: ``_unfolded``)
                self._settled = None

    def insert(self, batch: Batch, logical: Antichain, physical: Antichain):
        """Append, then spend fuel on maintenance."""
        self.append(batch)
        self.maintain(logical, physical)

    @property
    def owed(self) -> int:
        """Rows appended since the last maintenance (the fuel they are owed)."""
        return self._owed

    def maintain(self, logical: Antichain, physical: Antichain):
        """Spend the fuel owed by appended batches (at least MIN_FUEL) on merges."""
        size, self._owed = self._owed, 0
        self._maintain(size, logical, physical)

    def exert(self, logical: Antichain, physical: Antichain, fuel: int = MIN_FUEL):
        """Spend about ``fuel`` rows of merging without inserting (idle maintenance)."""
        self._maintain(fuel, logical, physical, idle=True)

    def _last_upper(self) -> Antichain:
        if not self.entries:
            return self.lower
        e = self.entries[-1]
        return e.newer.upper if isinstance(e, _Merging) else e.upper

    def _maintain(self, size: int, logical: Antichain, physical: Antichain, idle: bool = False):
        if self.settled(logical, physical):
            return  # no merge in progress and none to start: nothing changed since maintenance last ran
        coef = EFFORT[self.effort]
        bloated = self._start_merges(logical, physical)
        if coef is None:
            while self._work(None, logical):
                self._start_merges(logical, physical)
        else:
            fuel = size if idle else int(coef * max(size, MIN_FUEL) * (BOOST if bloated else 1))
            rounds = 0
            while self._work(fuel, logical):
                bloated = self._start_merges(logical, physical)
                rounds += 1
                if not bloated or rounds >= TIDY_ROUNDS:
                    fuel = 0  # later merges get fuel from later insertions
            if self._merging_count() > 2 * max(1, len(self.entries).bit_length()):
                # lazy settings must not let merges pile up: finish the oldest
                self._finish_oldest(logical)
                self._start_merges(logical, physical)
        if not self._merging_count():
            # the last _start_merges started nothing and nothing changed after it: until the entries or
            # the frontiers change, maintenance has nothing to do
            self._settle(logical, physical)

    def _merging_count(self) -> int:
        n = 0
        for e in self.entries:
            if e.__class__ is _Merging:
                n += 1
        return n

    def _tidy_pair(self, logical: Antichain, physical: Antichain):
        """The tidying merge a bloated spine can start now, as (older, newer), or None: the two oldest
        batches once the logical frontier has reached the younger (so its retractions can cancel),
        else the oldest alone (with an empty batch) if compacting it to ``logical`` could merge times."""
        es = self.entries
        if not es or not isinstance(es[0], Batch):
            return None
        older = es[0]
        if len(es) > 1:
            newer = es[1]
            if isinstance(newer, Batch) and newer.upper.less_equal(physical) and newer.lower.less_equal(logical):
                return older, newer
        if older.collapses(logical):
            return older, Batch.empty(self.kk, self.kv, self.depth, older.upper, older.upper, older.since)
        return None

    def _start_merges(self, logical: Antichain, physical: Antichain) -> bool:
        """Tidy if bloated; merge adjacent complete batches of similar size (the older at most twice the
        newer), and fold empty batches into a neighbour, wherever the newer batch lies at or before
        ``physical``. Returns whether the spine is bloated."""
        es = self.entries
        bloated = self.bloated(logical)
        pair = self._tidy_pair(logical, physical) if bloated else None
        if pair is not None:
            older, newer = pair
            since = _later(logical, _later(older.since, newer.since))
            es[:2 if len(es) > 1 and es[1] is newer else 1] = [_Merging(older, newer, since, tidy=True)]
            self._changed()
        i = len(es) - 1
        while i >= 1:
            newer, older = es[i], es[i - 1]
            # the cheap tests first: most neighbours differ in size (or one is merging)
            if (newer.__class__ is Batch and older.__class__ is Batch
                    and (newer.n == 0 or older.n <= 2 * newer.n) and newer.upper.less_equal(physical)):
                if newer.n == 0 or older.n == 0:
                    keep = older if newer.n == 0 else newer
                    # the kept batch's times are advanced to its own since, not to the empty one's
                    es[i - 1:i + 1] = [keep.relabel(older.lower, newer.upper)]
                    self._changed()
                    i -= 1
                    continue
                since = _later(logical, _later(older.since, newer.since))
                if older.n + newer.n <= MIN_FUEL:
                    # any insertion's fuel finishes a merge this small: merge now, without the
                    # bookkeeping of one in progress, and let the result carry into its older neighbour
                    es[i - 1:i + 1] = [self._merged(older, newer, since)]
                    i -= 1
                    continue
                es[i - 1:i + 1] = [_Merging(older, newer, since)]
                self._changed()
                i -= 2
                continue
            i -= 1
        if len(es) == 1 and isinstance(es[0], Batch) and es[0].n == 0:
            self.lower = es[0].upper
            self.cleared_since = _later(self.cleared_since, es[0].since)
            es.clear()
            self._changed()
        return bloated

    def _work(self, fuel, logical: Antichain) -> bool:
        """Give ``fuel`` to every merge in progress; returns whether any completed."""
        completed = False
        for i, e in enumerate(self.entries):
            if isinstance(e, _Merging):
                faults.point("merge")
                self.progress += 1
            if isinstance(e, _Merging) and e.merger.work(fuel):
                self._complete(i, e, logical)
                completed = True
        return completed

    def _finish_oldest(self, logical: Antichain):
        for i, e in enumerate(self.entries):
            if isinstance(e, _Merging):
                e.merger.work(None)
                self._complete(i, e, logical)
                return

    def _complete(self, i: int, m: _Merging, logical: Antichain):
        out = m.result()
        self.entries[i] = out
        self._account(out, m.older, m.newer)
        if m.tidy and len(out) > SHRINK * len(m):
            # retried once the spine grew, or once the frontier passed every epoch of the result
            self._guard = (int(BLOAT * self._records), out.time_range[1])

    def _merged(self, older: Batch, newer: Batch, since: Antichain) -> Batch:
        """Two adjacent batches merged completely (a small merge, never one in progress)."""
        faults.point("merge")
        out = merged(older, newer, since)
        self._account(out, older, newer)
        return out

    def _account(self, out: Batch, older: Batch, newer: Batch):
        """A merge of ``older`` and ``newer`` into ``out`` completed."""
        self._records += len(out) - len(older) - len(newer)
        self._balance += out.balance - older.balance - newer.balance
        self.merges_completed += 1
        self._changed()


def _passed(t, logical: Antichain) -> bool:
    """Whether every element of ``logical`` has passed the epoch of time ``t``: compacting to it then merges
    every epoch up to t's (in a loop, rounds stay apart whatever the frontier: a frontier of epoch 21 at
    round 0 collapses (20, 5) and (19, 5), and never passes (20, 5) in the product order)."""
    return t is not None and bool(logical.elements) and all(t[0] <= f[0] for f in logical.elements)


def _later(a: Antichain, b: Antichain) -> Antichain:
    """The join of two since-frontiers (times in advance of both)."""
    if not a.elements:
        return b
    if not b.elements:
        return a
    return a.join(b)
