"""A bounded latency histogram: what each dataflow keeps of its update latencies.

A run may last the whole kernel session, so a dataflow cannot keep every latency it measured. It keeps
counts in fixed log-spaced buckets instead (``PER_DECADE`` per decade from ``LOW`` to ``HIGH`` seconds,
plus one below and one above): fixed memory whatever the run length, and enough resolution (about 26%
wide buckets) for the complementary CDFs of the K-Pg paper's figures. The scheduler thread adds samples;
readers get an immutable copy published with the dataflow's snapshot.
"""
from __future__ import annotations

import math

import numpy as np

LOW = 1e-6        # seconds: the lower edge of the first finite bucket
HIGH = 1e3        # seconds: the upper edge of the last finite bucket
PER_DECADE = 10
DECADES = round(math.log10(HIGH / LOW))
# bucket i (1..n) holds samples in [EDGES[i-1], EDGES[i]); bucket 0 holds those below LOW, the last bucket
# those at or above HIGH
EDGES = LOW * 10.0 ** (np.arange(DECADES * PER_DECADE + 1) / PER_DECADE)
BUCKETS = len(EDGES) + 1
EDGES.setflags(write=False)
_EDGES = EDGES.tolist()  # (Python floats: compared once per sample, on every epoch of every dataflow)


def bucket_of(seconds: float) -> int:
    """The bucket a latency falls in."""
    if not seconds >= LOW:  # also NaN
        return 0
    if seconds >= HIGH:
        return BUCKETS - 1
    i = int(math.log10(seconds / LOW) * PER_DECADE) + 1
    # guard the float rounding at a bucket's edge
    if seconds < _EDGES[i - 1]:
        i -= 1
    elif i < len(_EDGES) and seconds >= _EDGES[i]:
        i += 1
    return i


class LatencyHistogram:
    """Counts of latencies per bucket (int64), added to by one thread; ``published()`` is a read-only
    copy taken when the counts changed since the last one (so an idle dataflow costs no copy)."""

    __slots__ = ("counts", "_published")

    def __init__(self):
        self.counts = np.zeros(BUCKETS, np.int64)
        self._published = None

    def add(self, seconds: float):
        self.counts[bucket_of(seconds)] += 1
        self._published = None

    def published(self) -> np.ndarray:
        if self._published is None:
            c = self.counts.copy()
            c.setflags(write=False)
            self._published = c
        return self._published


def ccdf(counts: np.ndarray) -> tuple:
    """The complementary CDF of a histogram: (x, fraction of samples at or above x) at the lower edge of
    every non-empty finite bucket (samples below ``LOW`` are counted at ``LOW``). Empty arrays when there
    are no samples."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0), np.zeros(0)
    at_or_above = total - np.concatenate([[0], np.cumsum(counts)[:-1]])  # per bucket: samples in it or later
    lower = np.concatenate([[LOW], EDGES])  # bucket 0 (below LOW) is shown at LOW
    keep = counts > 0
    return lower[keep], at_or_above[keep] / total


def quantile(counts: np.ndarray, q: float):
    """The upper edge of the bucket holding quantile ``q`` (an upper bound for it), or None if empty."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return None
    i = int(np.searchsorted(np.cumsum(counts), q * total, side="left"))
    upper = np.concatenate([EDGES, [np.inf]])
    return float(upper[min(i, len(upper) - 1)])
