"""Live views: a view shown as a cell's result stays current in place.

A :class:`LiveView` is a table of the view's first rows (sorted, as the static rendering shows them) under
a line with the view's frontier, row count and last update latency, and a pause button. The engine's
updater thread re-reads the view (one published snapshot, whole epochs only) whenever its frontier has
moved, at most every ``min_interval`` seconds, longer if reading it is slow (see ``updater``).

``kpgnb`` registers :func:`mimebundle` with IPython's display formatter in a kernel, so ``view`` on a
cell's last line or ``display(view)`` shows a LiveView; in a terminal, or where widgets are unavailable,
views render as before (text, or static HTML). At most ``MAX_LIVE`` live views per engine refresh at once:
showing one more freezes the oldest (it says so).
"""
from __future__ import annotations

import os
import threading
import weakref

import ipywidgets as w

from ..engine.errors import KpgnbError
from . import fmt
from .updater import Part, Updater, close_models, close_tree

HEAD = 20          # rows shown, as the static rendering shows
MAX_LIVE = 16      # live views refreshed at once per engine

_live: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # engine -> [LiveView], oldest first
_live_lock = threading.Lock()


class LiveView(w.VBox, Part):
    """A view rendered live (module docstring). ``header`` (HTML: view, dataflow, frontier, rows, last
    update latency), ``table`` (HTML: the first ``HEAD`` rows, sorted) and ``pause`` (a ToggleButton: while
    down the table keeps what it shows). ``frontier`` and ``rows`` are what is shown (``error``: why the view
    could not be read at that frontier, shown instead of its rows, read again once the frontier moves); it
    stops refreshing for good when the view's dataflow is dropped or fails (saying so), or the engine closes."""

    min_interval = 0.5
    shows_reading = False  # (it reads its view, not the engine's reading)

    def __init__(self, view, **kwargs):
        _check_view(view)  # (before anything is made: a refused one leaves no widget behind)
        self.view = view
        self.header = w.HTML(value="")
        self.table = w.HTML(value="")
        self.pause = w.ToggleButton(value=False, description="pause", icon="pause",
                                    tooltip="keep the table as it is; the view itself stays current",
                                    layout=w.Layout(width="90px"))
        super().__init__(children=[w.HBox([self.pause, self.header]), self.table], **kwargs)
        self.frontier = None
        self.rows = None
        self.error = None          # why the view could not be read at ``frontier`` (KpgnbError), or None
        self.state = "live"        # live | paused | ended
        self.pause.observe(self._paused, "value")
        self._updater = Updater.of(view.engine)
        self.refresh(None)         # the first paint, on the creating thread
        if self.state == "live":
            _admit(self)
            self._updater.add(self)

    # -- refreshing -----------------------------------------------------------------------------------
    def refresh(self, reading):
        if self.state == "ended":
            return
        view, engine = self.view, self.view.engine
        if engine.closed or (reading is not None and reading.closed):
            self._end("the engine is closed")
            return
        try:
            view.check()
        except KpgnbError as e:  # failed, cancelled, dropped or replaced: say which
            self._end(str(e))
            return
        if self.state == "paused":
            return
        frontier = view.frontier  # (read before the rows: if it moves meanwhile, the next refresh reads again)
        if frontier == self.frontier:
            return  # nothing new is final: nothing to read
        try:
            head, n = view.head(HEAD)
        except KpgnbError as e:  # (rows of negative multiplicity, say): say why where the table would be
            # read again only once the frontier moves (its contents cannot change before), not every turn
            self.frontier, self.rows, self.error = frontier, None, e
            with self.hold_sync():
                self.header.value = (f"<b>{fmt.html.escape(view.summary())}</b> · "
                                     f"<i>{'paused' if self.state == 'paused' else 'live'}</i>")
                self.table.value = _error_html(e)
            return
        self.error = None
        more = f"<div>&hellip; {n - len(head)} more rows</div>" if n > len(head) else ""
        table = (head.to_html(index=False) if len(head) else "<i>(empty)</i>") + more
        # the line says the epoch the rows were read at (one read), not the view's epoch now
        summary = view.summary(head.attrs.get("epoch"))
        header = (f"<b>{fmt.html.escape(summary)} · {n:,} row{'' if n == 1 else 's'}</b> · "
                  f"<i>live</i>")
        self.frontier, self.rows = frontier, n
        with self.hold_sync():
            self.header.value = header
            self.table.value = table

    def _paused(self, change):
        if self.state == "ended":
            return  # (a click sent before the disabled button reached the browser): it stays ended
        if change["new"]:
            self.state = "paused"
            self.pause.description, self.pause.icon = "resume", "play"
            self.header.value = self.header.value.replace("<i>live</i>", "<i>paused</i>")
        elif self.state == "paused":
            self.state = "live"
            self.pause.description, self.pause.icon = "pause", "pause"
            self.frontier = None  # redraw on the next refresh

    def _end(self, why: str):
        self.state = "ended"
        self._stopped = True
        with self.hold_sync():
            self.pause.disabled = True
            self.header.value = (self.header.value.replace(" · <i>live</i>", "").replace(" · <i>paused</i>", "")
                                 + f" · <i>{fmt.html.escape(why)}; not updating</i>")
        self._updater.remove(self, wait=0)

    def stop(self, why: str = "stopped"):
        """Stop refreshing (the table keeps what it shows)."""
        if self.state != "ended":
            self._end(why)

    def close(self):
        """Stop refreshing and close the widget and every widget inside it (header, table, button, box)."""
        if getattr(self, "_updater", None) is None:  # (its argument was refused: nothing was made to close)
            return
        self.stop("closed")
        close_tree(self.children)
        super().close()
        close_models(self)

    def show_error(self, error):
        """A refresh failed: shown until the next one, which reads the view again (its frontier may not move)."""
        self.frontier = None
        self.table.value = _error_html(error)


def _check_view(view):
    """Refuse an argument that is not a view (the engine, an input session, a view's name)."""
    from ..engine.errors import ArgumentTypeError
    from ..engine.view import View
    if isinstance(view, View):
        return
    hint = ""
    if isinstance(view, str):
        hint = f"; pass the view itself (the variable its cell bound, e.g. {view}), not its name"
    elif hasattr(view, "advance_to") and hasattr(view, "name"):
        hint = (f"; that is input session {view.name!r}: show a view of a dataflow reading it "
                f"(df.input({view.name!r}).view('name'))")
    elif hasattr(view, "dataflows") and hasattr(view, "wait"):
        hint = "; that is an engine: kp.dashboard(eng) shows it live"
    raise ArgumentTypeError(f"LiveView shows a view (what .view('name') returns in a dataflow); got "
                            f"{type(view).__name__}{hint}")


def _error_html(error) -> str:
    return f"<pre>{fmt.html.escape(f'{type(error).__name__}: {error}')}</pre>"


def _admit(lv: LiveView):
    """Count a new live view against MAX_LIVE, freezing the oldest still refreshing beyond it."""
    with _live_lock:
        views = [v for v in _live.get(lv.view.engine, []) if v.state != "ended"]
        views.append(lv)
        _live[lv.view.engine] = views
        over = views[:-MAX_LIVE] if len(views) > MAX_LIVE else []
    for old in over:
        old.stop(f"more than {MAX_LIVE} live views; show it again to resume")


def available() -> bool:
    """Whether a live view can be shown: a kernel with comms (not a terminal) and KPGNB_LIVE_VIEWS not 0."""
    if os.environ.get("KPGNB_LIVE_VIEWS", "1").lower() in ("0", "", "false", "no"):
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def mimebundle(view):
    """IPython's mimebundle formatter for views: the widget's ``application/vnd.jupyter.widget-view+json``
    only (IPython adds the usual text/plain and text/html, so notebooks without the widget still show the
    static table), or None (render as before) outside a kernel, or when the view cannot be read."""
    if not available() or view.engine.closed or view.released:
        return None
    lv = LiveView(view)
    if lv.state == "ended":
        return None
    if lv.error is not None:  # (the static rendering says why in its one line)
        lv.close()
        return None
    data = lv._repr_mimebundle_()
    return {k: v for k, v in data.items() if k != "text/plain"}
