"""What the scheduler publishes for everyone else to read: one immutable :class:`EngineSnapshot` per
scheduler step, swapped in by one assignment. ``wait``, ``dataflows()``, ``catalog()`` and ``stats()``
read the latest snapshot only, so they never block the scheduler and never see a half-done step.
Traces are referenced weakly: a snapshot never keeps an arrangement alive, only the contents it had when
the snapshot was published (``trace_contents``, ``InputInfo.contents``: immutable batches), which
statistics read so that every figure is of one moment."""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

from .lattice import Antichain


@dataclass(frozen=True)
class DataflowInfo:
    name: str
    status: str                      # running | failed | cancelled | dropped (kept while its exports are read)
    error: BaseException | None
    frontier: Antichain              # the meet of its top-level operators' output frontiers
    sources: frozenset               # names of the inputs it reads, directly or through imports
    exports: tuple
    uses: tuple
    operators: int
    busy_s: float
    steps: int
    traces: tuple = ()               # (label, weakref to Trace) of the arrangements it maintains
    views: tuple = ()                # (view name, weakref to the view's Trace)
    latency_s: float | None = None   # its last epoch: from the input's advance_to to the dataflow's frontier
    updated_at: float | None = None  # wall-clock time (time.time()) its frontier last moved
    serial: int = 0                  # which install this is: a replacement of the same name gets another
    latency_counts: object = None    # read-only int64 counts per bucket of engine/latency.py: every update
    installed_at: float | None = None  # time.perf_counter() when it was installed
    view_uppers: tuple = ()          # (view name, its trace's upper) as of this snapshot: what eng.wait decides on
    view_sources: tuple = ()         # (view name, names of the inputs it reads): what eng.wait(view) waits for
    trace_contents: tuple = ()       # the TraceSnapshot of each of ``traces`` as of this snapshot
    reports: tuple = ()              # its IFE operators' reporters (``report()``: engine/ife.py), for ife_stats


@dataclass(frozen=True)
class InputInfo:
    name: str
    sealed: Antichain                # the upper of the input's trace: epochs before it are in
    closed: bool
    failure: BaseException | None    # a seal that failed and is being retried
    broken: bool = False             # and never will succeed (``InputSession.broken``)
    contents: object = None          # its trace's TraceSnapshot as of this snapshot
    session: object = field(default=None, compare=False, repr=False)  # the InputSession (read by stats())


@dataclass(frozen=True)
class CatalogInfo:
    name: str
    dataflow: str
    dropped: bool
    schema: object
    key: tuple
    values: tuple
    trace: weakref.ref

    def live_trace(self):
        return self.trace()


@dataclass(frozen=True)
class EngineSnapshot:
    seq: int                         # every command submitted up to this number has been executed
    quiet: bool                      # no dataflow had work left when this was published
    dataflows: dict = field(default_factory=dict)
    retired: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    catalog: dict = field(default_factory=dict)
    error: BaseException | None = None   # an internal failure of the scheduler itself (sticky)
    rounds: int = 0
    replaced: frozenset = frozenset()    # serials of the installs a later install of their name replaced

    @contextlib.contextmanager
    def pinned(self):
        """Hold the dataflows' traces still alive (the snapshot holds them weakly) while a reader builds
        several tables from this snapshot, so that a dataflow dropped after it was taken is in every table
        or in none (``gone``)."""
        held = [t for infos in (self.dataflows, self.retired) for info in infos.values()
                for _, ref in info.traces if (t := ref()) is not None]
        yield held

    @staticmethod
    def gone(info) -> bool:
        """Whether a dataflow this snapshot shows running was dropped since: it had traces, and none is
        alive (a failed or cancelled one has let its traces go and is still listed, with its error)."""
        return info.status == "running" and bool(info.traces) and all(ref() is None for _, ref in info.traces)
