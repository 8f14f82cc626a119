"""Scopes and the one place that moves times between them (DESIGN.md section 2).

A dataflow's root scope has depth 1: times are (epoch,). Every ``iterate`` nests a scope that adds a
round coordinate. Entering a scope appends zero rounds, leaving drops the last coordinate, and the loop's
feedback edge adds 1 to the round. Readers that see a trace from another scope (an import compacted to
the importer's start, an arrangement entered into a loop) use a :class:`TimeLens` instead of copying.
Top-level frontiers are single epochs; ``epoch_of``/``at_epoch`` convert.
"""
from __future__ import annotations

import numpy as np

from .lattice import Antichain, rep_matrix


class Scope:
    """A timestamp domain: the dataflow's root (depth 1, the epoch) or an iterative scope nested in it."""

    def __init__(self, graph, parent: "Scope | None" = None):
        self.graph = graph
        self.parent = parent
        self.depth = 1 if parent is None else parent.depth + 1

    def loop(self) -> "Scope":
        """A new iterative scope nested in this one."""
        return Scope(self.graph, self)

    def is_ancestor_of(self, other: "Scope") -> bool:
        s = other.parent
        while s is not None:
            if s is self:
                return True
            s = s.parent
        return False

    def __repr__(self):
        return f"Scope(depth={self.depth})"


# -- frontiers between scopes ---------------------------------------------------------------------

def enter(frontier: Antichain, rounds: int = 1) -> Antichain:
    """A frontier of the outer scope seen inside ``rounds`` nested loops: t -> (t, 0, ...) (which keeps
    an antichain one, in the same order)."""
    if not rounds:
        return frontier
    zeros = (0,) * rounds
    return Antichain._of(tuple(t + zeros for t in frontier.elements))


def leave(frontier: Antichain, rounds: int = 1) -> Antichain:
    """A frontier of a nested scope seen ``rounds`` levels out: the last coordinates dropped."""
    els = frontier.elements
    if not rounds:
        return frontier
    if len(els) == 1:  # (several may become comparable once their rounds are dropped)
        return Antichain._of((els[0][:-rounds],))
    return Antichain(t[:-rounds] for t in els)


def next_round(frontier: Antichain, max_rounds: int | None = None) -> Antichain:
    """The loop feedback's summary: round r -> r + 1 (times reaching ``max_rounds`` vanish)."""
    # (one more round for every element keeps an antichain one, in the same order)
    return Antichain._of(tuple(t[:-1] + (t[-1] + 1,) for t in frontier.elements
                               if max_rounds is None or t[-1] + 1 < max_rounds))


def enter_times(times: np.ndarray, rounds: int = 1) -> np.ndarray:
    return np.concatenate([times, np.zeros((times.shape[0], rounds), np.int64)], axis=1)


def enter_at_times(times: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """Times entering one loop at the given rounds: t -> (t, round)."""
    return np.concatenate([times, np.asarray(rounds, np.int64).reshape(-1, 1)], axis=1)


def leave_times(times: np.ndarray, rounds: int = 1) -> np.ndarray:
    return np.ascontiguousarray(times[:, :-rounds])


# -- epochs (top-level times) ----------------------------------------------------------------------

def epoch_of(frontier: Antichain) -> int | None:
    """The first epoch a top-level frontier has not completed (None: the frontier is empty)."""
    return frontier.elements[0][0] if frontier.elements else None


def at_epoch(epoch: int) -> Antichain:
    return Antichain._of(((int(epoch),),))


def last_complete(upper: Antichain, current: Antichain | None = None) -> Antichain:
    """The last complete epoch of a top-level upper frontier ({upper - 1}), never behind ``current``."""
    u = epoch_of(upper)
    c = epoch_of(current) if current is not None and current.elements else 0
    if u is None:
        return current.copy() if current is not None and current.elements else at_epoch(0)
    return at_epoch(max(u - 1, c))


class TimeLens:
    """How a reader sees a trace's times without copying it: advanced to a frontier (an import compacted
    to the importer's start) and extended with zero rounds (entering loop scopes)."""

    __slots__ = ("frontier", "extend")

    def __init__(self, frontier: Antichain | None = None, extend: int = 0):
        self.frontier = frontier if frontier is not None and frontier.elements else None
        self.extend = extend

    @property
    def identity(self) -> bool:
        return self.frontier is None and self.extend == 0

    def entered(self) -> "TimeLens":
        return TimeLens(self.frontier, self.extend + 1)

    def past(self, batches) -> "TimeLens":
        """This lens for reading ``batches``: without its frontier where every batch starts in advance of
        it (minted after the import's start), since advancing times already past it changes nothing (a
        batch's times lie at or after its lower)."""
        f = self.frontier
        if f is None or not all(f.less_equal(b.lower) for b in batches):
            return self
        return TimeLens(None, self.extend) if self.extend else IDENTITY

    def apply(self, times: np.ndarray) -> np.ndarray:
        """Trace times as the reader sees them."""
        if self.frontier is not None:
            times = rep_matrix(times, self.frontier)
        return enter_times(times, self.extend) if self.extend else times

    def native(self, frontier: Antichain) -> Antichain:
        """A frontier in the reader's scope mapped back to the trace's own times."""
        return leave(frontier, self.extend)

    def __repr__(self):
        return f"TimeLens(frontier={self.frontier}, extend={self.extend})"


IDENTITY = TimeLens()
