"""The worker pool: W persistent threads that run an operator step's shards in parallel. Kernels
release the GIL, so shards really run at once; the first shard runs on the calling (scheduler) thread, and
so do those still queued when it is done."""
from __future__ import annotations

import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PARALLEL_ROWS = 10_000  # below this many rows a step's shards run inline: a pool hand-off costs more
MAX_WORKERS = 1024  # (a thread each, and per-worker arrays: a count past this is a typo, not a machine)


class WorkerPool:
    """W persistent threads. ``run(fn, items, rows)`` runs fn over items, the first on the calling thread
    and the rest on the pool, the caller taking those still queued once it is done (when ``rows``, the
    work's size, is unknown or large enough); kernels release the GIL, so shards run concurrently.
    An exception surfaces in the caller with its item's traceback, after every shard has stopped (so a
    failed step never leaves work running); where several items fail, the first in item order's."""

    def __init__(self, workers: int):
        self.workers = workers
        self._threads: set = set()  # the pool threads' idents (``on_pool``)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers - 1), thread_name_prefix="kpgnb-worker",
                                        initializer=lambda: self._threads.add(threading.get_ident())) \
            if workers > 1 else None
        self.busy = np.zeros(workers)  # seconds of work per shard index

    def on_pool(self) -> bool:
        """Whether the caller is one of the pool's threads (a user function running in a shard)."""
        return threading.get_ident() in self._threads

    def run(self, fn, items, rows: int | None = None) -> list:
        items = list(items)
        if not items:
            return []
        timed = self._timed(fn)
        if self._pool is None or len(items) == 1 or (rows is not None and rows < PARALLEL_ROWS):
            return [timed(i) for i in items]
        ctx = contextvars.copy_context()  # the dataflow's (see commands.Install), one copy per thread
        failed = threading.Event()  # once an item has failed, no other starts (a failed step stops soon)

        def guarded(item):
            if failed.is_set():
                return None
            try:
                return timed(item)
            except BaseException:
                failed.set()
                raise
        futures = [self._pool.submit(ctx.copy().run, guarded, i) for i in items[1:]]
        results, errors = [None] * len(items), {}  # errors: item index -> what it raised
        try:
            results[0] = guarded(items[0])
        except BaseException as e:  # noqa: BLE001 - raised once every shard has stopped
            errors[0] = e
        # then the items no pool thread has started, from the last: with more items than threads
        # (formation's row ranges) the caller takes its share instead of waiting for the pool
        for k in range(len(futures) - 1, -1, -1):
            if futures[k].cancel():
                futures[k] = None
                try:
                    results[k + 1] = ctx.copy().run(guarded, items[k + 1])
                except BaseException as e:  # noqa: BLE001
                    errors[k + 1] = e
        for k, f in enumerate(futures):  # never leave a shard running behind the caller's back
            if f is None:
                continue
            try:
                results[k + 1] = f.result()
            except BaseException as e:  # noqa: BLE001
                errors[k + 1] = e
        if errors:  # an interrupt first, else the first failing item in item order, whichever thread ran it
            raise errors[min(errors, key=lambda k: (isinstance(errors[k], Exception), k))]
        return results

    def _timed(self, fn):
        busy = self.busy

        def call(item):
            t0 = time.perf_counter()
            try:
                return fn(item)
            finally:
                if isinstance(item, int) and 0 <= item < len(busy):
                    busy[item] += time.perf_counter() - t0
        return call

    def shutdown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
