"""The kernel's one engine: created on first use, kept for the life of the process.

It lives in this module, not in the notebook's namespace, so ``%reset`` does not lose it (nor the
arrangements it holds). ``kp.engine()`` and the magics reach it through :func:`engine`; the extension
configures it (worker count) and closes it on ``%unload_ext``.
"""
from __future__ import annotations

import os
import threading

from .engine.columns import is_int
from .engine.errors import ArgumentTypeError, UsageError
from .engine.pool import MAX_WORKERS

_lock = threading.Lock()
_engine = None
_workers: int | None = None        # set by %dataflow config --workers / kp.configure(workers=)


def default_workers() -> int:
    """``KPGNB_WORKERS`` if set, else the machine's cores."""
    env = os.environ.get("KPGNB_WORKERS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise UsageError(f"KPGNB_WORKERS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise UsageError(f"KPGNB_WORKERS must be a positive integer, got {env!r}")
        return n
    return os.cpu_count() or 1


def configured_workers() -> int:
    """The worker count the kernel's engine is (next) created with."""
    return _workers or default_workers()


def _check_workers(workers):
    if workers is not None and not is_int(workers):
        raise ArgumentTypeError(f"workers must be an int, at least 1 (None: the configured count), got {workers!r}")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"workers must be an int, at least 1 and at most {MAX_WORKERS} (None: the configured "
                         f"count), got {workers!r}")


def engine(workers: int | None = None):
    """The kernel's engine, created on first call with ``workers`` (else the configured count, else
    ``KPGNB_WORKERS``, else the cores). Asking an existing engine for another worker count is an error:
    its arrangements are sharded for the count it has."""
    global _engine
    _check_workers(workers)
    with _lock:
        if _engine is not None and _engine.closed:
            _engine = None
        if _engine is None:
            from .engine.runtime import Engine
            _engine = Engine(workers=workers or _workers or default_workers())
        elif workers is not None and workers != _engine.workers:
            raise UsageError(f"the kernel's engine runs {_engine.workers} workers; its arrangements are sharded "
                             f"that way. Close it first (%dataflow config --restart) to change to {workers}")
        return _engine


def current():
    """The kernel's engine if one is running, else None (never creates one)."""
    with _lock:
        return _engine if _engine is not None and not _engine.closed else None


def configure(workers: int | None = None):
    """Set the worker count the kernel's engine is (next) created with."""
    global _workers
    _check_workers(workers)
    if workers is not None:
        with _lock:
            running = _engine is not None and not _engine.closed
            if running and _engine.workers != int(workers):
                raise UsageError(f"the kernel's engine is running with {_engine.workers} workers; "
                                 f"%dataflow config --restart --workers {workers} closes it and starts anew "
                                 f"(every dataflow and input is lost)")
            _workers = int(workers)


def close():
    """Close the kernel's engine (its threads stop; every dataflow and input is released)."""
    global _engine
    with _lock:
        eng, _engine = _engine, None
    if eng is not None:
        eng.close()
