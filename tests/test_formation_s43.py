"""Session 43: a run of equal hash (one key's many rows) up to RANK_RUN rows is ranked by counting on a
local copy of its column (vectorized), with ties ordered by insertion up to SHORT_RUN rows and column by
column above; a longer run is ordered column by column, by radix passes where the column's values span
few bits for the run's length, else by a merge sort (engine/kernels/form.py _sort_long_run). Checked against the NumPy model of test_formation_s34 on runs
whose columns span exactly 2**k - 1 and 2**k around the radix's limits (one 11-bit digit, several
passes, RADIX_BITS, spans that wrap int64), offset to negative values, with several columns differing
at once and ties to consolidate, through every output mode."""
import numpy as np
import pytest

from kpgnb.engine.kernels import form as formk
from test_formation_s34 import call, model, same

SPANS = [1, 2, 2047, 2048, 4095, 1 << 20, (1 << 22) - 1, (1 << 33) + 5, (1 << formk.RADIX_BITS) - 1,
         1 << formk.RADIX_BITS, 1 << 50, (1 << 63) - 1]


def column(rng, span, n):
    """n values spanning at most ``span`` (the extremes included, so the span is exact), from a random
    least value (negative ones too) that keeps them in int64."""
    lo = int(rng.integers(-(1 << 62), (1 << 62) - 1)) if span < (1 << 61) else -(1 << 62)
    lo = max(min(lo, (1 << 63) - 1 - span), -(1 << 63))
    off = rng.integers(0, span, n, endpoint=True, dtype=np.int64) if span < (1 << 62) else \
        rng.integers(-(1 << 62), (1 << 62) - 1, n, dtype=np.int64) + (1 << 62)
    v = np.int64(lo) + off.astype(np.int64)
    v[:2] = [lo, lo + span]
    return v.astype(np.int64)


@pytest.mark.parametrize("mode", ["separate", "in_place", "koff_hashes"])
def test_long_runs_sorted_by_radix_or_merge_match_the_model(mode):
    rng = np.random.default_rng({"separate": 431, "in_place": 432, "koff_hashes": 433}[mode])
    for trial in range(400):
        kk, kv, d = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
        w = kk + kv + d
        L = int(rng.choice([formk.SHORT_RUN, formk.SHORT_RUN + 1, 40, formk.RANK_RUN, formk.RANK_RUN + 1, 100,
                            700, 3000]))
        M = np.empty((w, L), np.int64)
        M[:kk] = int(rng.integers(-5, 5))  # one key: one run
        for c in range(kk, w):
            r = rng.random()
            if r < 0.2:
                M[c] = int(rng.integers(-9, 9))  # a column every row agrees on (skipped)
            elif r < 0.35:  # few values: ties, and rows equal on every column to consolidate
                M[c] = rng.choice(column(rng, int(rng.choice(SPANS)), 3), L)
            else:
                M[c] = column(rng, int(rng.choice(SPANS)), L)[rng.permutation(L)]
        keys, vals, times = M[:kk], M[kk:kk + kv], np.ascontiguousarray(M[kk + kv:].T)
        diffs = rng.choice(np.array([-1, 1, 1, 2]), L).astype(np.int64)
        h = np.full(L, 11, np.int64)
        if mode != "koff_hashes" and rng.random() < 0.5:  # another bucket before it
            m0 = int(rng.integers(1, 40))
            h = np.concatenate([rng.integers(0, 11, m0), h])
            keys = np.concatenate([rng.integers(-3, 3, (kk, m0)), keys], axis=1)
            vals = np.concatenate([rng.integers(-3, 3, (kv, m0)), vals], axis=1)
            times = np.concatenate([rng.integers(-3, 3, (m0, d)), times])
            diffs = np.concatenate([np.ones(m0, np.int64), diffs])
            order = np.argsort(h, kind="stable")
            h, keys, vals, times, diffs = h[order], keys[:, order], vals[:, order], times[order], diffs[order]
            cnt = np.array([0, m0, m0 + L], np.int64)
        else:
            cnt = np.array([0, len(h)], np.int64)
        overflow, want = model(h, keys, vals, times, diffs)
        assert overflow == "no"
        _, got = call(cnt, h, keys, vals, times, diffs, mode)
        same(got, want)
