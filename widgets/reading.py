"""One reading of the engine per refresh, shared by every widget the updater refreshes.

Taken through the engine's public, thread-safe introspection only (``arrangements``,
``dataflow_stats``, ``snapshot``, ``ife_stats``): published snapshots and the readers' frontiers, never an engine lock
held while anything renders. Each widget then renders from the same reading, so the table, the frontiers
and the plots of one refresh agree with each other.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Reading:
    at: float                          # time.perf_counter() when taken
    wall: float                        # time.time() when taken
    closed: bool                       # the engine is closed: nothing more will change
    arrangements: list = field(default_factory=list)   # rows of Engine.arrangements()
    dataflows: list = field(default_factory=list)      # rows of Engine.dataflow_stats(retired=True)
    latency: dict = field(default_factory=dict)        # dataflow -> its published latency counts (read-only)
    workers: int = 0
    error: str | None = None           # the engine's own failure, if any
    ife: list = field(default_factory=list)            # rows of Engine.ife_stats(): memory modes at work

    @classmethod
    def take(cls, engine) -> "Reading":
        """Every part from one published snapshot (a dataflow listed anywhere is listed everywhere)."""
        at, wall = time.perf_counter(), time.time()
        if engine.closed:
            return cls(at, wall, True, workers=engine.workers)
        snap = engine.snapshot()
        with snap.pinned():
            return cls._of(engine, snap, at, wall)

    @classmethod
    def _of(cls, engine, snap, at: float, wall: float) -> "Reading":
        latency = {}
        for infos in (snap.dataflows, snap.retired):
            for name, info in infos.items():
                if info.latency_counts is not None:
                    latency[name] = info.latency_counts
        return cls(at, wall, False, engine.arrangements(snapshot=snap), engine.dataflow_stats(True, snap), latency,
                   engine.workers, None if snap.error is None else str(snap.error), engine.ife_stats(snap))
