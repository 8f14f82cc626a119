"""Times, antichains and frontier algebra (DESIGN.md section 2, K-Pg appendix A).

A time is a tuple of ints of some depth d, ordered by the product order: the epoch first, then one
round per enclosing ``iterate``. ``lub`` is the element-wise max and ``glb`` the element-wise min.
A frontier is an antichain: the set of minimal times that may still appear. The empty antichain
means "nothing more will come" (a closed input).

Scalar forms are for the scheduler; the matrix forms (times as an ``n x d`` int64 array) are what the
kernels use.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .errors import ArgumentTypeError, UsageError

Time = tuple


def _time(t) -> Time:
    """``t`` as a time: a tuple of Python ints (NumPy ints converted), else ArgumentTypeError (the slow path
    of ``Antichain.insert``: a time of plain ints never gets here)."""
    try:
        parts = t if t.__class__ is tuple else tuple(t)
    except TypeError:
        raise ArgumentTypeError(f"an Antichain holds times, each a tuple of ints (an epoch is (e,)), got "
                                f"{t!r}") from None
    out = []
    for x in parts:
        if x.__class__ is int:
            out.append(x)
        elif isinstance(x, np.integer) or (isinstance(x, int) and not isinstance(x, bool)):
            out.append(int(x))
        else:
            raise ArgumentTypeError(f"a time is a tuple of ints (an epoch and one round per enclosing loop), "
                                    f"got {t!r}: {x!r} is a {type(x).__name__}")
    return tuple(out)


def lub(a: Time, b: Time) -> Time:
    """Least upper bound: element-wise max."""
    return tuple(map(max, a, b))


def glb(a: Time, b: Time) -> Time:
    """Greatest lower bound: element-wise min."""
    return tuple(map(min, a, b))


def leq(a: Time, b: Time) -> bool:
    """Product order: every coordinate of ``a`` is <= the same coordinate of ``b``."""
    n = len(a)  # (epochs and one loop's rounds spelled out: frontiers are compared on every pass)
    if n == 1:
        return a[0] <= b[0]
    if n == 2:
        return a[0] <= b[0] and a[1] <= b[1]
    for x, y in zip(a, b):
        if x > y:
            return False
    return True


class Antichain:
    """A set of mutually incomparable times, kept sorted so that equal antichains compare equal.

    Mutated only through :meth:`insert` while being built; once published as a frontier it is treated
    as immutable (operations return new antichains).
    """

    __slots__ = ("elements", "_mat")

    def __init__(self, times: Iterable[Time] = ()):
        self.elements: tuple = ()
        self._mat = None  # the elements as a matrix, made on first use (an antichain never changes once built)
        for t in times:
            self.insert(t)

    @classmethod
    def _of(cls, elements: tuple) -> "Antichain":
        """An antichain of these elements (canonical: minimal, sorted int tuples), without checking."""
        out = _new(cls)
        out.elements = elements
        out._mat = None
        return out

    @classmethod
    def of(cls, *times: Time) -> "Antichain":
        return cls(times)

    def insert(self, t: Time) -> bool:
        """Add ``t`` unless some element is <= it; drop elements >= it. Returns whether it changed."""
        if t.__class__ is not tuple:
            t = _time(t)
        else:
            for x in t:  # (the usual case, plain ints, costs a class test each: antichains are built often)
                if x.__class__ is not int:
                    t = _time(t)
                    break
        els = self.elements
        self._mat = None
        if not els:
            self.elements = (t,)
            return True
        if len(t) != len(els[0]):  # (``leq`` would compare the common prefix only)
            raise UsageError(f"the times of an Antichain have one depth: {t} has depth {len(t)}, "
                             f"{els[0]} has depth {len(els[0])}")
        for e in els:
            if leq(e, t):
                return False
        kept = [e for e in els if not leq(t, e)]
        kept.append(t)
        kept.sort()
        self.elements = tuple(kept)
        return True

    # -- queries -------------------------------------------------------------------------------
    def dominates(self, t: Time) -> bool:
        """Whether ``t`` is in advance of this frontier (>= some element)."""
        for e in self.elements:
            if leq(e, t):
                return True
        return False

    in_advance = dominates

    def less_equal(self, other: "Antichain") -> bool:
        """Frontier order: every time in advance of ``other`` is in advance of ``self``."""
        a, b = self.elements, other.elements
        if a == b or not b:
            return True
        if len(a) == 1 and len(b) == 1:
            return leq(a[0], b[0])
        for o in b:
            for e in a:
                if leq(e, o):
                    break
            else:
                return False
        return True

    def is_empty(self) -> bool:
        return not self.elements

    @property
    def depth(self) -> int | None:
        return len(self.elements[0]) if self.elements else None

    # -- algebra -------------------------------------------------------------------------------
    def meet(self, other: "Antichain") -> "Antichain":
        """The frontier of times in advance of either (minimal elements of the union): one of the two
        when it is the answer, as built antichains are never changed."""
        a, b = self.elements, other.elements
        if not b or a == b:
            return self
        if not a:
            return other
        if len(a) == 1 and len(b) == 1:  # the common case (one time each): no rebuilding
            if leq(a[0], b[0]):
                return self
            if leq(b[0], a[0]):
                return other
        # both hold canonical int tuples: keep the minimal elements of the union
        kept = list(a)
        changed = False
        for t in b:
            for e in kept:
                if leq(e, t):
                    break
            else:
                kept = [e for e in kept if not leq(t, e)]
                kept.append(t)
                changed = True
        if not changed:
            return self
        kept.sort()
        return Antichain._of(tuple(kept))

    def join(self, other: "Antichain") -> "Antichain":
        """The frontier of times in advance of both (minimal pairwise lubs)."""
        a, b = self.elements, other.elements
        if a == b:
            return self
        if len(a) == 1 and len(b) == 1:  # the common case: one time each
            return Antichain._of((lub(a[0], b[0]),))
        lubs = {lub(x, y) for x in a for y in b}
        kept = sorted(t for t in lubs if not any(u != t and leq(u, t) for u in lubs))
        return Antichain._of(tuple(kept))

    def copy(self) -> "Antichain":
        return Antichain._of(self.elements)

    def map(self, fn) -> "Antichain":
        return Antichain(fn(t) for t in self.elements)

    def matrix(self, depth: int | None = None) -> np.ndarray:
        """The elements as an ``m x d`` int64 array (``depth`` is needed when empty)."""
        if not self.elements:
            return np.zeros((0, depth or 0), dtype=np.int64)
        if self._mat is None:  # (shared by every caller: kernels only read it)
            self._mat = np.array(self.elements, dtype=np.int64).reshape(len(self.elements), self.depth)
        return self._mat

    # -- python protocol ----------------------------------------------------------------------
    def __iter__(self):
        return iter(self.elements)

    def __len__(self):
        return len(self.elements)

    def __eq__(self, other):
        return self is other or (isinstance(other, Antichain) and self.elements == other.elements)

    def __ne__(self, other):  # (not through __eq__: frontiers are compared on every scheduling pass)
        return self is not other and not (isinstance(other, Antichain) and self.elements == other.elements)

    def __hash__(self):
        return hash(self.elements)

    def __repr__(self):
        inner = ", ".join("(" + ", ".join(map(str, t)) + ")" for t in self.elements)
        return "{" + inner + "}"


_new = object.__new__


def rep(t: Time, frontier: Antichain) -> Time:
    """rep_F(t) = glb over f in F of lub(t, f): the coarsest time indistinguishable from ``t`` by every
    time in advance of F (K-Pg appendix A). With an empty F nothing can observe ``t`` and it is returned
    unchanged, as differential dataflow does."""
    els = frontier.elements
    if not els:
        return tuple(t)
    out = lub(t, els[0])
    for f in els[1:]:
        out = glb(out, lub(t, f))
    return out


# -- matrix forms -------------------------------------------------------------------------------

def in_advance_mask(times: np.ndarray, frontier: Antichain) -> np.ndarray:
    """bool[n]: which rows of the ``n x d`` time matrix are in advance of the frontier."""
    n = times.shape[0]
    if not frontier.elements:
        return np.zeros(n, dtype=bool)
    f = frontier.matrix()
    if times.shape[1] == 1:
        return times[:, 0] >= f[0, 0]
    from .kernels.times import in_advance_rows
    return in_advance_rows(np.ascontiguousarray(times, dtype=np.int64), np.ascontiguousarray(f, dtype=np.int64))


def rep_matrix(times: np.ndarray, frontier: Antichain) -> np.ndarray:
    """rep_F applied to every row of a time matrix (element-wise min over f of max(t, f))."""
    if not frontier.elements:
        return times.copy()
    if len(frontier.elements) == 1:  # the usual case: one time, no minimum to take
        return np.maximum(times, np.array(frontier.elements[0], np.int64))
    f = frontier.matrix()
    return np.min(np.maximum(times[:, None, :], f[None, :, :]), axis=1)


def antichain_of(times: np.ndarray) -> Antichain:
    """The minimal times of a time matrix (the lower frontier of a batch of updates)."""
    n, d = times.shape
    if n == 0:
        return Antichain._of(())
    if n == 1:
        return Antichain._of((tuple(times[0].tolist()),))
    if d == 1:
        return Antichain._of(((int(times[:, 0].min()),),))
    # the kernel's rows are distinct and mutually incomparable already: only sort them
    from .kernels.times import minimal_times
    rows = minimal_times(np.ascontiguousarray(times, dtype=np.int64)).tolist()
    return Antichain._of(tuple(sorted(map(tuple, rows))))
