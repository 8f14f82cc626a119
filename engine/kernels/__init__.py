"""Numba kernels: all per-row work of the engine (DESIGN.md section 3, layer 3).

Every kernel is ``@njit(nogil=True, cache=True)`` with plain array arguments and explicit int64 dtypes,
so the worker pool runs them concurrently and their machine code is cached across kernel restarts.
Layout conventions: key and value columns are ``k x n`` int64 matrices (one row per column, so a column
is contiguous), times are ``n x d`` int64 matrices, diffs are int64 vectors.
"""
from numba import njit

kernel = njit(nogil=True, cache=True)

# Tiny scalar helpers (the key hash) inlined at the numba IR level: calls between separately compiled
# numba functions are not inlined, which measured 2x slower for hashing. Kernels with loops stay calls.
helper = njit(nogil=True, cache=True, inline="always")
