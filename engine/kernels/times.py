"""Kernels over time matrices."""
import numpy as np

from . import kernel
from .rows import leq_time


@kernel
def minimal_rows(times):
    """The rows of a (distinct-row) time matrix that no other row is <= to."""
    n = times.shape[0]
    keep = np.ones(n, np.bool_)
    for i in range(n):
        for j in range(n):
            if i != j and keep[j] and leq_time(times, j, times, i):
                keep[i] = False
                break
    return times[keep]
