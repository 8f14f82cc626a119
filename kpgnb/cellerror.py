"""How a failing ``%%dataflow`` cell reports: the user's error, at the cell's own line.

The magic raises :class:`CellError` around the original exception (:class:`CellInterrupt` around a
KeyboardInterrupt, which stays no Exception). The extension registers
:func:`show` as IPython's handler for it, which prints the original exception with a traceback cut to
the user's frames (the cell, and functions the user wrote elsewhere): the magic's and the engine's
frames are dropped, so the traceback reads ``Cell In[n], line k`` and then the message naming the
column or type. The cell still counts as failed (a "run all" stops there).
"""
from __future__ import annotations

import os
import sys
import types

_HIDDEN = tuple(os.path.dirname(os.path.abspath(p)) + os.sep for p in (
    __file__,                                                     # kpgnb/
    os.path.join(os.path.dirname(__file__), "engine", "x"),        # kpgnb/engine (installed layout)
    os.path.join(os.path.dirname(os.path.dirname(__file__)), "engine", "x"),  # engine/ (source layout)
    types.__file__,                                               # the standard library
))


_GENERATED = ("<string>", "<frozen ")  # code Python generates (dataclass __init__s), importlib


class CellError(Exception):
    """A ``%%dataflow`` cell failed with ``error``; ``tb`` is its traceback cut to the user's frames.
    ``CellError(error, tb)`` makes an instance of a subclass that is also of ``error``'s class where Python
    allows (``cell_error_class``), so that what a cell's result and a kernel's reply name (``ename``) is
    the user's error, ``SchemaError`` say, and ``except SchemaError`` catches it."""

    def __new__(cls, error: BaseException, tb=None, note: str | None = None):
        if cls is CellError:
            cls = cell_error_class(type(error))
        return super().__new__(cls)

    def __init__(self, error: BaseException, tb, note: str | None = None):
        Exception.__init__(self, f"{type(error).__name__}: {error}")
        self.error = error
        self.tb = tb
        self.note = note

    def __str__(self):
        return Exception.__str__(self)


class CellInterrupt(KeyboardInterrupt):
    """Ctrl-C (a KeyboardInterrupt, ``error``) stopped a cell, in its body or while it waited for results:
    reported as a CellError is (``error``, ``tb``, ``note``; the extension's handler shows ``error`` at the
    cell's line, with the user's frames only), yet a KeyboardInterrupt only, no Exception, so that it stops
    the cell (and a "run all") as Ctrl-C does, ``except KeyboardInterrupt`` catches it and ``except
    Exception`` does not. Named ``KeyboardInterrupt`` (what a cell's result and a kernel's reply call it),
    as CellError names other failures as the user's error."""

    def __init__(self, error: BaseException, tb=None, note: str | None = None):
        KeyboardInterrupt.__init__(self, f"{type(error).__name__}: {error}")
        self.error = error
        self.tb = tb
        self.note = note

    def __str__(self):
        return KeyboardInterrupt.__str__(self)


CellInterrupt.__name__ = CellInterrupt.__qualname__ = "KeyboardInterrupt"
CellInterrupt.__module__ = KeyboardInterrupt.__module__

REPORTS = (CellError, CellInterrupt)  # what a failing cell raises: the handler shows its ``error``


_classes: dict = {}


def cell_error_class(etype: type) -> type:
    """CellError and ``etype`` in one class named as ``etype`` (CellError itself where they cannot be
    combined, or for BaseExceptions that are no Exceptions: Ctrl-C stays a KeyboardInterrupt's report)."""
    got = _classes.get(etype)
    if got is None:
        got = CellError
        if issubclass(etype, Exception) and etype is not Exception:
            try:
                got = type(etype.__name__, (CellError, etype), {"__module__": etype.__module__,
                                                                "__qualname__": etype.__qualname__})
            except TypeError:  # (classes whose layouts do not combine)
                pass
        _classes[etype] = got
    return got


def user_frames(tb):
    """The traceback without the frames of kpgnb itself and of the standard library (threads, pools)."""
    kept = []
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename) if not \
            tb.tb_frame.f_code.co_filename.startswith("<") else tb.tb_frame.f_code.co_filename
        if not filename.startswith(_HIDDEN + _GENERATED) and "site-packages" + os.sep not in filename:
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def user_error(error: BaseException) -> BaseException:
    """The exception a user should see: a dataflow that failed because a user function raised is shown
    as that function's exception (the engine wraps it, keeping it as the cause)."""
    from .engine.errors import DataflowError
    seen = set()
    while isinstance(error, DataflowError) and error.__cause__ is not None and id(error) not in seen:
        seen.add(id(error))
        cause = error.__cause__
        if user_frames(cause.__traceback__) is None and not isinstance(cause, DataflowError):
            break
        error = cause
    return error


def wrap(error: BaseException, note: str | None = None) -> CellError | CellInterrupt:
    """``error`` as a cell reports it: a CellError, or a CellInterrupt for a KeyboardInterrupt (Ctrl-C in
    the cell's body, or while it loads its inputs or waits)."""
    shown = user_error(error)
    seen, e = set(), shown.__cause__ or shown.__context__
    while e is not None and id(e) not in seen:  # the causes IPython prints above it: user frames too
        seen.add(id(e))
        e.__traceback__ = user_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    if isinstance(shown, KeyboardInterrupt):
        return CellInterrupt(shown, user_frames(shown.__traceback__), note)
    return CellError(shown, user_frames(shown.__traceback__), note)


def show(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler for CellError and CellInterrupt (anything else: IPython's usual
    traceback)."""
    if not isinstance(value, REPORTS):
        return shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    err = value.error
    # what %tb and %debug read (IPython sets them where it shows a traceback itself)
    sys.last_type, sys.last_value = type(err), err
    sys.last_traceback = value.tb if value.tb is not None else err.__traceback__
    if value.note and value.note not in getattr(err, "__notes__", ()):
        err.add_note(value.note)
    if isinstance(err, SyntaxError):  # "Cell In[n], line k", the line and a caret, as IPython shows them
        stb = shell.SyntaxTB.structured_traceback(type(err), err, None)
        shell._showtraceback(type(err), err, stb + list(getattr(err, "__notes__", ())))
        return None
    if value.tb is None:  # nothing of the user's to point at: the message alone
        stb = [f"{type(err).__name__}: {err}"] + list(getattr(err, "__notes__", ()))
        shell._showtraceback(type(err), err, stb)
        return None
    stb = shell.InteractiveTB.structured_traceback(type(err), err, value.tb, tb_offset=0)
    shell._showtraceback(type(err), err, stb)
    return None

