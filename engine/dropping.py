"""Partial dropping of vertex-state differences (the third paper, section 5): which entries of a
vertex's timeline to drop, and how to remember that one was dropped.

- ``Drop`` is the user's knob: the probability ``p``, the ``policy`` choosing entries ("degree": always
  drop vertices of out-degree below ``tau_min``, never those above the ``tau_max_percentile``-th percentile
  of out-degrees (hubs, whose states many vertices read), the rest with probability p; "random": every entry with probability p), and the
  ``tracker`` ("exact": the dropped (vertex, round) pairs in an arrangement of their own, DET-DROP;
  "bloom": a Bloom filter, PROB-DROP, of a fixed size whatever is dropped later: ``bloom_bits``, or by
  default sized at the first epoch that drops entries, at BITS_PER_PAIR bits per pair it drops, with
  ``bloom_hashes`` (by default) chosen for twice that many pairs. A query asks about a range of rounds,
  so a filter's false-positive rate is paid once per round of the range: a filter of fixed size filled
  with many more pairs than it was sized for names undropped rounds on many reads and recomputes there
  (SPSP on 1M edges with a 2 MiB filter: 33x the recomputations of the exact tracker, 14x its time).
- A tracker answers, for a vertex and a range of rounds (lo, hi], the latest round whose entry may have
  been dropped. The exact one answers precisely; the Bloom filter never misses a dropped entry (no false
  negatives) and may name one that was kept or rewritten since: the caller then recomputes a value it
  could have read, which costs time, never correctness.

Choices are deterministic functions of (vertex, round, seed), so a run is reproducible."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .batch import Batch, form_shards
from .columns import SchemaError, is_int
from .cursor import Cursor, key_index
from .kernels import ife as ik
from .kernels.sort import hash_keys
from .lattice import Antichain
from .trace import Trace


MAX_BITS = 1 << 40  # the largest filter a Drop may ask for (128 GiB)


@dataclass(frozen=True)
class Drop:
    """How ``memory="drop"`` chooses and remembers the vertex-state differences it drops."""

    p: float = 0.5
    policy: str = "degree"
    tracker: str = "exact"
    tau_min: int = 2
    tau_max_percentile: float = 80.0
    bloom_bits: int | None = None  # None: sized at the first epoch that drops entries
    bloom_hashes: int | None = None  # None: chosen for the filter's size and that epoch's pairs
    seed: int = 0

    def __post_init__(self):
        if not _real(self.p) or not 0.0 <= float(self.p) <= 1.0:
            raise SchemaError(f"Drop(p={self.p!r}): p is a probability, a number between 0 and 1")
        if not is_int(self.seed):
            raise SchemaError(f"Drop(seed={self.seed!r}): an int")
        if self.policy not in ("degree", "random"):
            raise SchemaError(f"Drop(policy={self.policy!r}): choose 'degree' or 'random'")
        if self.tracker not in ("exact", "bloom"):
            raise SchemaError(f"Drop(tracker={self.tracker!r}): choose 'exact' or 'bloom'")
        if not is_int(self.tau_min) or self.tau_min < 0:
            raise SchemaError(f"Drop(tau_min={self.tau_min!r}): a degree, an int >= 0")
        if not _real(self.tau_max_percentile) or not 0.0 <= float(self.tau_max_percentile) <= 100.0:
            raise SchemaError(f"Drop(tau_max_percentile={self.tau_max_percentile!r}): a percentile, 0 to 100")
        if self.bloom_bits is not None and (not is_int(self.bloom_bits) or not 64 <= self.bloom_bits <= MAX_BITS):
            raise SchemaError(f"Drop(bloom_bits={self.bloom_bits!r}): 64 to 2**40 bits (rounded up to a power of "
                              f"two), or None (sized at the first epoch that drops entries)")
        if self.bloom_hashes is not None and (not is_int(self.bloom_hashes) or not 1 <= self.bloom_hashes <= 16):
            raise SchemaError(f"Drop(bloom_hashes={self.bloom_hashes!r}): 1 to 16 hash functions, or None "
                              f"(chosen for the filter's size)")

    def choose(self, kh: np.ndarray, rounds: np.ndarray, degree: np.ndarray, tau_max: float) -> np.ndarray:
        """Which of these entries (vertex key hash, round, the vertex's out-degree) to drop."""
        u = _uniform(kh, rounds, self.seed)
        pick = u < self.p
        if self.policy == "degree":
            pick = np.where(degree < self.tau_min, True, np.where(degree > tau_max, False, pick))
        return pick


def _real(x) -> bool:
    """A number (not text, not a bool)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _uniform(kh, rounds, seed) -> np.ndarray:
    """A deterministic uniform [0, 1) number per (key hash, round)."""
    with np.errstate(over="ignore"):  # (multiplication modulo 2**64 is the point)
        x = (kh.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (rounds.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9))
        x ^= np.full(len(x), _seed64(seed), np.uint64) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xD6E8FEB86659FD93)
        x ^= x >> np.uint64(32)
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _seed64(seed) -> int:
    """Every bit of an int seed folded into 64 (its low 64 bits as they are, so small seeds choose as
    before): seeds differing anywhere choose differently."""
    s = int(seed)
    x = s & 0xFFFFFFFFFFFFFFFF
    s >>= 64
    while s not in (0, -1):  # (a seed past 64 bits: each further word mixed in)
        x = ((x ^ (s & 0xFFFFFFFFFFFFFFFF)) * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF
        s >>= 64
    return x


class ExactTracker:
    """DET-DROP: the dropped (vertex, round) pairs, exactly, as an arrangement keyed by vertex whose values
    are (block, mask): bit b of block k stands for round 64 k + b, so a vertex costs one record per 64
    rounds however many of its entries are dropped. A pair is forgotten when its vertex's entry at that
    round is rewritten."""

    kind = "exact"

    def __init__(self, kk: int, workers: int, name: str, key_names=()):
        self.trace = Trace(kk, 2, 1, workers, name=name)
        self.trace.key_names = tuple(key_names)  # (keyed by the state's key: named for statistics)
        self.handle = self.trace.handle(owner=name)
        self.upper = 0
        self.markers = 0

    def _masks(self, keys, index=None):
        """(history, inverse) of these keys' (block, mask) rows; ``index``: ``key_index(keys)`` if known."""
        pkh, pkeys, inv = index if index is not None else key_index(keys)
        return Cursor(self.trace.snapshot.all_batches(), 2, 1).seek(pkh, pkeys), inv

    def latest(self, keys, kh, lo, hi, index=None) -> np.ndarray:
        """For each key, the latest round in (lo, hi] whose entry was dropped, or -1. ``index``:
        ``key_index(keys)``, where the caller has it."""
        n = keys.shape[1]
        out = np.full(n, -1, np.int64)
        if n:
            h, inv = self._masks(keys, index)
            ik.mask_latest(h.off, np.ascontiguousarray(h.vals[0]), np.ascontiguousarray(h.vals[1]), h.diffs, inv,
                           np.ascontiguousarray(lo, dtype=np.int64), np.ascontiguousarray(hi, dtype=np.int64), out)
        return out

    def update(self, keys, rounds, diffs, epoch: int, run):
        """Remember (+1) or forget (-1) pairs as of ``epoch``; called once per processed epoch."""
        kk = keys.shape[0]
        block = rounds >> 6
        bit = np.left_shift(np.int64(1), rounds & 63)
        # one row per (vertex, block): the bits to set and to clear
        kb = np.concatenate([keys, block[None, :]], axis=0)
        _, ukeys, inv = key_index(kb)
        m = ukeys.shape[1]
        setb = np.zeros(m, np.int64)
        clrb = np.zeros(m, np.int64)
        np.bitwise_or.at(setb, inv[diffs > 0], bit[diffs > 0])
        np.bitwise_or.at(clrb, inv[diffs < 0], bit[diffs < 0])
        vkeys, vblock = np.ascontiguousarray(ukeys[:kk]), ukeys[kk]
        old = np.zeros(m, np.int64)
        h, hinv = self._masks(vkeys)
        probe = np.repeat(np.arange(len(h.off) - 1), np.diff(h.off))
        if len(h.diffs):
            # live (probe, block, mask) rows: net positive multiplicity
            order = np.lexsort((h.vals[1], h.vals[0], probe))
            pb, bb, mb, db = probe[order], h.vals[0][order], h.vals[1][order], h.diffs[order]
            new = np.r_[True, (pb[1:] != pb[:-1]) | (bb[1:] != bb[:-1]) | (mb[1:] != mb[:-1])]
            starts = np.flatnonzero(new)
            net = np.add.reduceat(db, starts)
            live = starts[net > 0]
            # match each (vertex, block) to its live row: (probe, block) as one sortable number
            span = int(max(bb.max(), vblock.max())) + 1
            code = pb[live] * span + bb[live]
            want = hinv * span + vblock
            at = np.searchsorted(code, want)
            hit = at < len(code)
            hit[hit] = code[at[hit]] == want[hit]
            old[hit] = mb[live][at[hit]]
        newm = (old & ~clrb) | setb  # (a pair forgotten and dropped again in one epoch stays)
        out_keys, out_vals, out_diffs = [], [], []
        had, has = old != 0, newm != 0
        changed = old != newm
        for sel, vals, sign in ((changed & had, old, -1), (changed & has, newm, 1)):
            out_keys.append(vkeys[:, sel])
            out_vals.append(np.stack([vblock[sel], vals[sel]]))
            out_diffs.append(np.full(int(sel.sum()), sign, np.int64))
        K = np.ascontiguousarray(np.concatenate(out_keys, axis=1))
        V = np.ascontiguousarray(np.concatenate(out_vals, axis=1))
        D = np.concatenate(out_diffs)
        shards = form_shards(K, V, np.full((len(D), 1), epoch, np.int64), D, self.trace.workers, run)
        lower, upper = Antichain([(self.upper,)]), Antichain([(epoch + 1,)])
        self.trace.insert([Batch(*s, lower, upper) for s in shards], run)
        self.upper = epoch + 1
        self.handle.set_logical_compaction(upper)
        self.markers += int(_popcount(newm).sum() - _popcount(old).sum())

    def nbytes(self) -> int:
        return int(self.trace.stats()["bytes"])

    def close(self):
        """Stop reading and free the pairs: an empty trace in their place (whoever still holds the
        operator, a builder kept after its dataflow was dropped, keeps none of them)."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None
            t = self.trace
            self.trace = Trace(t.kk, t.kv, t.depth, t.workers, name=t.name)
            self.trace.key_names = t.key_names
            self.markers = 0


def _popcount(x: np.ndarray) -> np.ndarray:
    x = x.view(np.uint64)
    return np.unpackbits(x.view(np.uint8)).reshape(len(x), 64).sum(axis=1, dtype=np.int64) if len(x) else np.zeros(0, np.int64)


BITS_PER_PAIR = 32  # an automatic filter's bits per pair its first dropping epoch inserts: room for twice
# as many pairs at 16 bits each (a false positive per round read about 1 in 2,000 at that fill)
MIN_BITS = 1 << 16  # the least automatic filter (8 KiB)
MAX_AUTO_HASHES = 8  # more hashes than this barely lower the rate at the design fill and raise it past it


class BloomTracker:
    """PROB-DROP: a Bloom filter over (vertex key hash, round); it only grows (stale pairs are false
    positives). ``bits``/``hashes`` None: fixed at the first insertion (see the module docstring)."""

    kind = "bloom"

    def __init__(self, bits: int | None, hashes: int | None):
        self.bits = None if bits is None else _filter(bits)
        self.size = None if bits is None else int(self.bits.shape[0] * 64)  # (kept once the bits are freed)
        self.hashes = None if hashes is None else int(hashes)
        self.markers = 0

    def latest(self, keys, kh, lo, hi, index=None) -> np.ndarray:
        out = np.full(len(kh), -1, np.int64)
        if self.bits is not None and self.hashes is not None:
            ik.bloom_latest(self.bits, self.hashes, np.ascontiguousarray(kh), np.ascontiguousarray(lo),
                            np.ascontiguousarray(hi), out)
        return out

    def update(self, keys, rounds, diffs, epoch: int, run):
        add = diffs > 0
        n = int(add.sum())
        if n:
            self._size(n)
            ik.bloom_add(self.bits, self.hashes, hash_keys(np.ascontiguousarray(keys[:, add])),
                         np.ascontiguousarray(rounds[add]))
            self.markers += n

    def _size(self, n: int):
        """Fix what was left to the first insertion (of n pairs): the size, then the number of hashes,
        optimal (ln 2 bits per pair per hash) for twice n pairs."""
        if self.bits is None:
            self.bits = _filter(max(MIN_BITS, BITS_PER_PAIR * n))
            self.size = int(self.bits.shape[0] * 64)
        if self.hashes is None:
            m = self.bits.shape[0] * 64
            self.hashes = int(min(MAX_AUTO_HASHES, max(1, round(math.log(2) * m / (2 * n)))))

    def describe(self) -> dict:
        """The filter's size and hash count (None until the first insertion fixes them). Other threads
        call this: ``_size`` sets the bits before the hashes, so hashes read first imply bits."""
        hashes = self.hashes
        return {"bits": self.size, "hashes": hashes}

    def nbytes(self) -> int:
        bits = self.bits
        return 0 if bits is None else int(bits.nbytes)

    def close(self):
        """Free the filter (nothing reads it again; ``describe`` still gives its size)."""
        self.bits = None
        self.markers = 0


def _filter(bits: int) -> np.ndarray:
    """A zeroed filter of at least ``bits`` bits: a power of two many uint64 words (its hashes are masked)."""
    words = 1 << max(0, (int(bits) - 1).bit_length() - 6)
    try:
        return np.zeros(words, np.uint64)
    except MemoryError:
        raise MemoryError(f"a Bloom filter of {bits} bits ({8 * words} bytes) does not fit in memory: give "
                          f"kp.Drop a smaller bloom_bits, or tracker='exact'") from None


def make_tracker(drop: Drop, kk: int, workers: int, name: str, key_names=()):
    if drop.tracker == "exact":
        return ExactTracker(kk, workers, name, key_names)
    return BloomTracker(drop.bloom_bits, drop.bloom_hashes)
