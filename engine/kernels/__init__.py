"""Numba kernels: all per-row work of the engine (DESIGN.md section 3, layer 3).

Every kernel is ``@njit(nogil=True, cache=True)`` with plain array arguments and explicit int64 dtypes,
so the worker pool runs them concurrently and their machine code is cached across kernel restarts.
Layout conventions: key and value columns are ``k x n`` int64 matrices (one row per column, so a column
is contiguous), times are ``n x d`` int64 matrices, diffs are int64 vectors; all C-contiguous and
writeable, so that each kernel compiles exactly one specialization (engine/warmup.py lists them).
"""
from numba import njit, types
from numba.core import config
from numba.core.registry import CPUDispatcher

from ..errors import MAX_MULT, multiplicity_overflow  # noqa: F401  (the kernels' bound and its error)


class KernelDispatcher(CPUDispatcher):
    """A CPU dispatcher whose calls *from other kernels* are typed with plain (non-literal) argument
    types. Numba otherwise types a constant argument (``f(idx, 0, n)``, or a loop variable still holding
    its initial constant while type inference iterates) as ``Literal[int](0)`` and compiles, and caches, a
    separate specialization for every combination of literal and non-literal arguments: 8 copies of one
    merge pass, 2 of each reduce phase, about 15 s of a cold start."""

    def get_call_template(self, args, kws):
        return super().get_call_template(tuple(types.unliteral(a) for a in args),
                                         {k: types.unliteral(v) for k, v in kws.items()})

    def enable_caching(self):
        from .cache import kernel_cache
        self._cache = kernel_cache(self.py_func)


def kernel(fn):
    """``@njit(nogil=True, cache=True)`` through KernelDispatcher."""
    if config.DISABLE_JIT:
        return fn
    disp = KernelDispatcher(py_func=fn, locals={},
                            targetoptions={"nopython": True, "nogil": True, "boundscheck": None})
    disp.enable_caching()
    return disp


# Tiny scalar helpers (the key hash) inlined at the numba IR level: calls between separately compiled
# numba functions are not inlined, which measured 2x slower for hashing. Kernels with loops stay calls.
helper = njit(nogil=True, cache=True, inline="always")


@helper
def carried_add(acc, hi, diff):
    """``acc + diff`` with whole MAX_MULTs carried into ``hi`` (see ``carried_total``)."""
    acc += diff
    if acc >= MAX_MULT:
        return acc - MAX_MULT, hi + 1
    if acc <= -MAX_MULT:
        return acc + MAX_MULT, hi - 1
    return acc, hi


@helper
def carried_total(acc, hi):
    """The sum ``hi * MAX_MULT + acc`` of a run of equal updates' diffs, or ``MAX_MULT`` (the overflow mark)
    when it reaches MAX_MULT in magnitude. Summing kernels keep ``acc`` within (-MAX_MULT, MAX_MULT) by
    carrying whole MAX_MULTs into ``hi`` (each diff is below it, so ``acc + diff`` cannot wrap): whether a
    run overflows then depends on its total only, not on the order its diffs come in."""
    if hi == 0:
        return acc
    if hi == 1 and acc < 0:
        return acc + MAX_MULT
    if hi == -1 and acc > 0:
        return acc - MAX_MULT
    return MAX_MULT

