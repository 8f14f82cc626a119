"""The errors kpgnb raises on purpose. Each says what it concerns; all derive from KpgnbError, so a
notebook can catch every deliberate failure with one clause and let real bugs through."""
from __future__ import annotations


class KpgnbError(Exception):
    """Base of every error kpgnb raises on purpose."""


class SchemaError(KpgnbError, ValueError):
    """Input that does not fit a collection's schema; the message names the column and what was expected."""


class DataflowError(KpgnbError, RuntimeError):
    """A dataflow failed while running (an operator raised, or a dataflow it reads from failed); the
    message says which operator and where it was defined, and the cause is chained."""


class CompactedError(KpgnbError, ValueError):
    """A read asked for a time the trace can no longer distinguish."""


class EngineError(KpgnbError, RuntimeError):
    """The engine itself (or one of its inputs) hit an internal failure; the cause is chained."""


class Cancelled(KpgnbError):
    """A computation was cancelled (dropped, or interrupted while a caller waited for it)."""


class UsageError(KpgnbError, ValueError):
    """A call that cannot be made as asked (a name taken already, an input that is closed, epochs that go
    back, a view of another engine); nothing was changed. Also a ValueError."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument of the wrong type (an epoch given as a str, a program that is not text): a UsageError,
    and the TypeError Python code expects."""


class UnknownNameError(KpgnbError, KeyError):
    """No dataflow or arrangement by that name; the message lists the ones there are. Also a KeyError."""

    def __str__(self):  # a KeyError would print its message quoted
        return str(self.args[0]) if self.args else ""


class DatalogError(KpgnbError, ValueError):
    """A Datalog program that cannot be parsed or compiled; the message names the rule."""


MAX_MULT = 1 << 62  # a multiplicity's bound: diffs, and sums of equal updates, reaching it are refused


def multiplicity_overflow() -> OverflowError:
    """The error of every path that sums multiplicities (formation, merges, reduce, join on demand, a
    threshold function's counts) when a sum reaches ``MAX_MULT``."""
    return OverflowError("a row's multiplicity reaches 2**62 or more (equal updates summed); int64 "
                         "multiplicities would wrap")


def not_copyable(obj) -> TypeError:
    """What pickling or copying a live engine object raises (its ``__reduce__``): it stands for state the
    engine's threads own, which a copy would share half of (a copied input's rows went in twice) and a
    pickle cannot carry (Spark, multiprocessing and joblib pickle closures)."""
    name = type(obj).__name__
    return TypeError(f"a kpgnb {name} cannot be pickled or copied: it is a live handle on engine state; pass "
                     f"what it holds instead (e.g. a view's to_pandas(), an input's name)")
