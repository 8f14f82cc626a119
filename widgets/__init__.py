"""kpgnb.widgets: a live view of the engine for Jupyter (ipywidgets 8 and matplotlib; DESIGN.md section 7).

``kp.dashboard()`` (or ``%dataflow dashboard``) shows every widget over the kernel's engine; each is also
usable alone: :class:`ArrangementTable`, :class:`Frontiers`, :class:`LatencyCCDF`, :class:`TraceSizes`,
:class:`Progress`, :class:`LiveView`. They are created on the calling thread and refreshed by one updater
thread per engine (:class:`Updater`), from the engine's published snapshots. Imports the engine only.
"""
from .arrangements import ArrangementTable
from .dashboard import Dashboard, dashboard
from .frontiers import Frontiers
from .latency import LatencyCCDF
from .liveview import LiveView
from .progress import Progress
from .tracesizes import TraceSizes
from .updater import Updater

__all__ = ["ArrangementTable", "Dashboard", "Frontiers", "LatencyCCDF", "LiveView", "Progress", "TraceSizes",
           "Updater", "dashboard"]
