"""The one thread that refreshes the widgets of an engine.

Widgets are created on the caller's (the kernel's main) thread; afterwards a single updater thread per
engine refreshes every open widget a few times a second: it takes one :class:`~.reading.Reading` from the
engine's published snapshots and hands it to each widget that is due, which sets its traits under
``hold_sync`` (one comm message per widget and refresh). It never holds an engine lock and never waits
on the engine, so neither a cell nor the scheduler ever waits for it.

Cost is bounded twice: each widget says how often it wants refreshing (``min_interval``: tables a few
times a second, plots once a second or two), and a widget that took ``t`` seconds to render waits at least
``COST_FACTOR * t`` before its next turn, so a slow render (a big live view, a busy machine) cannot take
more than about 1/COST_FACTOR of a core. The thread ends when its last widget is closed (or goes away) or
when the engine closes (each widget first shows that it did); :meth:`Updater.close` ends it at once.
"""
from __future__ import annotations

import threading
import time
import weakref

from .reading import Reading

PERIOD = 0.25       # seconds between looks: the fastest any widget refreshes
COST_FACTOR = 20    # a widget that rendered in t seconds waits at least COST_FACTOR * t for its next turn

_registry: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # engine -> its Updater
_registry_lock = threading.Lock()


def check_engine(engine, what: str):
    """Refuse an argument that is not an engine where ``what`` needs one."""
    from ..engine.errors import ArgumentTypeError
    from ..engine.runtime import Engine
    if not isinstance(engine, Engine):
        raise ArgumentTypeError(f"{what} watches an engine (kp.Engine, kp.engine()), got {type(engine).__name__} "
                                f"{engine!r}")


class Updater:
    """Refreshes the widgets of one engine from one daemon thread (see the module docstring)."""

    def __init__(self, engine, period: float = PERIOD):
        self._engine = weakref.ref(engine)
        self.period = period
        self._parts: dict = {}          # widget -> when it is next due (perf_counter)
        self._lock = threading.Lock()   # guards _parts and the thread's start and end
        self._stop = threading.Event()
        self._refreshing = threading.Lock()  # held by the thread while it refreshes one widget (see leave)
        self.thread: threading.Thread | None = None
        self.refreshes = 0              # readings taken
        self.cpu_s = 0.0                # CPU time the thread spent refreshing (what the dashboard costs)
        self.cpu_by_part: dict = {}     # widget class name -> CPU seconds spent refreshing it
        self.last_error: BaseException | None = None

    @classmethod
    def of(cls, engine) -> "Updater":
        """The engine's updater (one per engine, made on first use)."""
        check_engine(engine, "a widget")
        with _registry_lock:
            u = _registry.get(engine)
            if u is None:
                u = _registry[engine] = cls(engine)
            return u

    # -- widgets --------------------------------------------------------------------------------------
    def add(self, part):
        """Refresh ``part`` from now on (``part.refresh(reading)``, at most every ``part.min_interval``
        seconds), starting the thread if it is not running."""
        with self._lock:
            self._parts[part] = 0.0
            self._stop.clear()  # (a thread told to stop because its last widget went stays for this one)
            if self.thread is None or not self.thread.is_alive():
                # not in the caller's context: ipykernel then sends the widgets' updates as part of whichever
                # cell is running, so a notebook executed by nbclient stores their latest state
                self.thread = threading.Thread(target=self._loop, name="kpgnb-widgets", daemon=True)
                self.thread.start()

    def remove(self, *parts, wait: float = 5.0):
        """Stop refreshing ``parts``; if no widget is left, end the thread and wait for it (``wait``
        seconds at most), so that closing the last widget leaves no thread behind."""
        with self._lock:
            for p in parts:
                self._parts.pop(p, None)
            if self._parts:
                return
            self._stop.set()
            t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(wait)

    def leave(self, *parts):
        """Stop refreshing ``parts`` (watched from another engine now, or stopped), and wait for a refresh of
        one in progress on the thread, so that nothing this updater reads is shown in them after this returns."""
        self.remove(*parts, wait=0)
        if threading.current_thread() is not self.thread:
            with self._refreshing:
                pass

    def parts(self) -> list:
        with self._lock:
            return list(self._parts)

    @property
    def running(self) -> bool:
        t = self.thread
        return t is not None and t.is_alive()

    def close(self, timeout: float = 5.0):
        """Stop refreshing every widget and end the thread (waits for a refresh in progress)."""
        self.remove(*self.parts(), wait=timeout)

    def refresh_now(self, parts=None):
        """One refresh of ``parts`` (default: all) on the calling thread: the first paint of new widgets."""
        engine = self._engine()
        if engine is None:
            return
        parts = parts if parts is not None else self.parts()
        reading = self._take(engine, parts)
        for p in parts if reading is not None else ():
            self._refresh(p, reading)

    # -- the thread -----------------------------------------------------------------------------------
    def _loop(self):
        while True:
            self._stop.wait(self.period)
            engine = self._engine()
            now = time.perf_counter()
            with self._lock:
                self._stop.clear()  # it ends below when no widget is left, never on the event alone
                for p in [p for p in self._parts if not p.alive]:
                    del self._parts[p]
                if engine is None or not self._parts:
                    self.thread = None
                    return
                due = [p for p, t in self._parts.items() if t <= now]
            if not due:
                continue
            c0 = time.thread_time()
            reading = self._take(engine, due)
            if reading is None:
                for p in due:
                    self._next_turn(p, 0.0)
                continue
            self.refreshes += 1
            self.cpu_by_part["Reading"] = self.cpu_by_part.get("Reading", 0.0) + time.thread_time() - c0
            for p in (self.parts() if reading.closed else due):
                time.sleep(0)  # let the engine's threads have the GIL between widgets
                with self._refreshing:
                    if p not in self._parts:  # (closed, or left for another engine's updater, meanwhile)
                        continue
                    spent = self._refresh(p, reading)
                self._next_turn(p, spent)
            self.cpu_s += time.thread_time() - c0
            if reading.closed:  # every widget has shown that the engine closed: nothing will change again
                with self._lock:
                    self._parts.clear()
                    self.thread = None
                return

    def _next_turn(self, part, spent: float):
        """When ``part`` is due again, after a refresh that took ``spent`` seconds."""
        with self._lock:
            if part in self._parts:
                self._parts[part] = time.perf_counter() + max(part.min_interval, COST_FACTOR * spent)

    def _take(self, engine, parts):
        """A reading of ``engine``, or None when reading it failed: then ``parts`` that show readings say why."""
        try:
            return Reading.take(engine)
        except Exception as e:  # noqa: BLE001 - the widgets say so and the thread lives on
            self.last_error = e
            for p in parts:
                if getattr(p, "shows_reading", True):
                    self._show_error(p, e)
            return None

    @staticmethod
    def _show_error(part, error):
        try:
            part.show_error(error)
        except Exception:  # noqa: BLE001 - nothing more to do for it
            pass

    def _refresh(self, part, reading) -> float:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            part.refresh(reading)
        except Exception as e:  # noqa: BLE001 - one widget's failure must not stop the others
            self.last_error = e
            self._show_error(part, e)
        name = type(part).__name__
        self.cpu_by_part[name] = self.cpu_by_part.get(name, 0.0) + time.thread_time() - c0
        return time.perf_counter() - t0


def close_tree(widgets):
    """Close ``widgets`` and every widget inside them, with their Layout and Style models (ipywidgets keeps
    every widget not closed, with its comm; closing a box leaves its children open, closing a widget its
    layout and style)."""
    for c in widgets:
        close_tree(getattr(c, "children", ()))
        c.close()
        close_models(c)


def close_models(widget):
    """Close ``widget``'s Layout and Style: models of their own, which ``widget.close()`` leaves open."""
    for attr in ("layout", "style"):
        sub = getattr(widget, attr, None)
        if sub is not None and hasattr(sub, "close"):
            sub.close()


class Part:
    """What the updater refreshes: a widget with ``refresh(reading)`` (on the updater thread, setting
    traits under ``hold_sync``), ``min_interval`` seconds between refreshes, and ``alive`` while it
    should be refreshed (not closed; a closed widget drops out by itself)."""

    min_interval = 0.5
    shows_reading = True  # False: it shows something else (a view), which a failed reading leaves as it is

    @property
    def alive(self) -> bool:
        return getattr(self, "comm", None) is not None and not getattr(self, "_stopped", False)

    def watch(self, engine):
        """Show ``engine`` in this widget on its own (outside a dashboard): a first reading now, on the
        calling thread, then refreshed by the engine's updater thread until closed. Returns the widget,
        so ``kp.widgets.ArrangementTable().watch(eng)`` on a cell's last line shows it."""
        u = Updater.of(engine)
        before = getattr(self, "_watched", None)
        if before is not None and before is not u:  # (watched again, another engine: it shows this one only)
            before.leave(self)
        self._watched = u
        u.refresh_now([self])
        u.add(self)
        return self

    def refresh(self, reading):
        raise NotImplementedError

    def show_error(self, error: BaseException):
        """A refresh failed: say so where the widget's content would be, until the next refresh redraws it."""
