"""Views render live in a notebook: IPython's display formatter learns to show a view as a
``kpgnb.widgets.LiveView`` (a table that stays current) when ``kpgnb`` is imported in a kernel.

Registered by type name, so nothing heavy is imported until a view is actually shown; outside a kernel
(a terminal, IPython's test shell) nothing is registered and views render as text or static HTML, as the
engine's ``View`` does by itself. The engine knows nothing of this (it imports no IPython, no widgets).
"""
from __future__ import annotations

import sys


def register(ip=None) -> bool:
    """Register the live rendering of views with ``ip`` (default: the running IPython, if any). Returns
    whether it did: only in a kernel (where widgets have comms)."""
    if ip is None:
        if "IPython" not in sys.modules:
            return False
        from IPython import get_ipython
        ip = get_ipython()
    if ip is None or getattr(ip, "kernel", None) is None:
        return False
    ip.display_formatter.mimebundle_formatter.for_type_by_name("kpgnb.engine.view", "View", _live_view)
    return True


def _live_view(view):
    try:
        from .widgets.liveview import mimebundle
    except ImportError:  # no ipywidgets: the static rendering
        return None
    return mimebundle(view)
