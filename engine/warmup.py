"""Compiling (or loading from the on-disk cache) the engine's numba kernels ahead of their first use.

Every kernel has exactly one specialization (C-contiguous, writeable int64 arrays; see
engine/kernels/__init__.py), so warming is compiling a known list of (kernel, argument types), grouped by
operator family:

- ``core``: exchange, sorting, batch formation, seeking and trace merging: every dataflow needs these
  (inputs, arrange, map/filter/concat, iterate at any depth, views, exports);
- ``join``: join products (join, semijoin, antijoin);
- ``reduce``: the three reduce phases (count, sum, min/max, distinct, argmin/argmax, top_k, threshold);
- ``views``: no kernels: imports pandas, which views read into;
- ``ife``: the memory modes' timelines and dropped-pair trackers (``Collection.ife`` with jod or drop).

Loop depth adds nothing: times are ``n x d`` matrices whatever d is, so a dataflow iterating three
scopes deep runs the same machine code as a flat one. User reduce functions (``reduce(fn=...)``) compile
when their dataflow is defined and are not warmed here.

After an install, ``core`` compiles in about 16 s, ``reduce`` in 16 s and ``join`` in 0.5 s (2-core
development machine, numba 0.68); afterwards each family loads from the cache in well under a second
(engine/kernels/cache.py says where the cache lives and why any installation of the same sources can
use it).

Two ways to warm:

- ``warm(families=None, progress=None)``: synchronously, in the calling thread (``warm_kernels()``, used
  by ``python -m kpgnb demo``, warms every family).
- ``Warmer(...).start()``: in the background, for the notebook extension. A daemon thread at low
  priority compiles ``core`` in-process and loads each other family as soon as it is ready; families
  that are not cached yet compile in parallel in low-priority subprocesses (one per spare core) that
  only fill the cache, so a notebook's process never holds the GIL for them. Nothing is printed,
  ever; ``progress()``, ``done``, ``error`` and ``wait(...)`` report.

Numba compiles under one process-wide lock, and a kernel that is already compiled is never compiled
again. So a cell that calls a kernel while the warmer thread compiles another waits for at most that
one compile (the longest, ``merge_step``, is about 5 s cold) and then finds its own kernel compiled, or
compiles it itself; work is never done twice in one process. Families that a subprocess compiles are
another matter: before an operator of such a family runs, the engine waits for the warmer to load it
(``ensure``, called by the dataflow's run loop) instead of compiling it a second time. A first cell
therefore waits only for the families its dataflow uses (``families_for``), and the notebook's progress
line, which reads ``Warmer.progress()``, shows what it waits for.
"""
from __future__ import annotations

import collections
import os
import queue
import subprocess
import sys
import threading
import time

FAMILIES = ("core", "views", "reduce", "join", "ife")
_MARK = "kpgnb-warm:"
_lock = threading.Lock()
_active: list = []  # started warmers that are not finished
READY: set = set()  # families known to be compiled in this process (the fast path of ensure())


def kernel_signatures(family: str) -> list:
    """The (dispatcher, argument types) pairs a family compiles, in the order of first use."""
    from numba.core import types

    from .kernels import exchange, form, join, merge, rows, seek, sort, times
    from .kernels import reduce as rk
    i8, b1 = types.int64, types.boolean
    I1, I2 = types.int64[::1], types.int64[:, ::1]
    U1, F1, F2 = types.uint64[::1], types.float64[::1], types.float64[:, ::1]
    if family == "core":
        return [(exchange.bucket_counts, (I1, i8, i8, i8)),
                (exchange.exchange_rows, (I1, I2, I2, I2, I1, i8, i8, i8, i8, I1, I1, I1, I1, I1, I2, I1)),
                (sort.hash_pack, (I2,)),
                (sort.unpack_positions, (U1,)),
                (sort.fix_hash_runs, (I1, I1, I2, I2, I2)),
                (sort.hash_keys_into, (I2, i8, i8, I1)),
                (form.form_buckets, (I1, I1, I2, I2, I2, I1, I1, I2, I2, I2, I1, I1)),
                (form.close_rows, (I1, i8, i8, i8)),
                (form.form_tiny, (I1, I2, I2, I2, I1, I1)),
                (times.minimal_times, (I2,)),
                (times.one_time, (I2,)),
                (times.time_bounds, (I2,)),
                (times.fill_times, (I2, I1)),
                (times.in_advance_rows, (I2, I2)),
                (rows.is_identity, (I1,)),
                (times.time_groups, (I2, i8)),
                (times.group_rows, (I2, I2, I2, I1, I1, i8)),
                (times.count_positive, (I1,)),
                (times.bit_lengths, (I1,)),
                (seek.unique_sorted_keys, (I1, I2)),
                (seek.index_packed, (U1, I2)),
                (seek.distinct_keys, (I2, i8)),
                (seek.seek_keys, (I1, I2, I1, I2)),
                (seek.seek_rows, (I1, I2, I1, I1, I2, I1, I1)),
                (seek.gather_rows, (I1, I1, I2, I2, I1, I1, I2, I2, I1, I1)),
                (seek.merge_key_lists, (I1, I2, I1, I2)),
                (merge.merge_step, (I1, I2, I1, I2, I2, I1) * 3 + (I1, I2, i8)),
                (merge.normalize_groups, (I1, I2, I2, I1)),
                (merge.merge_whole, (I1, I2, I1, I2, I2, I1) * 2 + (I2,))]
    if family == "join":
        return [(join.product_total, (I1, I1)),
                (join.join_product, (I1, I2, I1, I1, I2, I1, I1, i8))]
    if family == "reduce":
        return [(rk._reduce_times, (I1, I2, I2, I1, I1, I2, I1, I2, I2, i8)),
                (rk.order_keys, (I2, I1, I1)),
                (rk.reduce_apply, (i8, I1, I1, I1, I2, F2, I2, i8, i8, i8, b1, I2, F2)),
                (rk._reduce_diff, (I1, I2, I1, I2, I1, I1, I2, I2, I1)),
                (rk.probe_runs, (I1, I2, I2, I1)),
                (rk.settled_keys, (I1, I2, I1, I2, I1, I2, I1, I2, i8)),
                (rk.merge_pending, (I1, I2, I2, I1, I2, I2))]
    if family == "views":
        return []
    if family == "ife":
        from .kernels import ife
        return [(ife.timeline_at, (I1,) * 8),
                (ife.mask_latest, (I1,) * 8),
                (ife.bloom_add, (U1, i8, I1, I1)),
                (ife.bloom_latest, (U1, i8, I1, I1, I1, I1)),
                (ife.float_sums, (F1, I1, I1, F1)),
                (ife.extremes, (I1, I1, I1, b1, b1, I1)),
                (ife.degree_sums, (I1, I1, I1))]
    raise ValueError(f"unknown kernel family {family!r}; families are {list(FAMILIES)}")


def _check(families) -> list:
    if families is None:
        return list(FAMILIES)
    if isinstance(families, str):
        families = [families]
    families = list(dict.fromkeys(families))
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown kernel family {f!r}; families are {list(FAMILIES)}")
    return [f for f in FAMILIES if f in families]  # canonical order: core first


def is_ready(family: str) -> bool:
    """Whether every kernel of the family is compiled (or loaded) in this process."""
    if family == "views":
        return "pandas" in sys.modules
    return all(tuple(sig) in disp.overloads for disp, sig in kernel_signatures(family))


def is_cached(family: str) -> bool:
    """Whether every kernel of the family has machine code in the on-disk cache (best effort: False when
    numba's cache internals cannot be read)."""
    if family == "views":
        return True
    try:
        for disp, sig in kernel_signatures(family):
            if tuple(sig) in disp.overloads:
                continue
            cache = disp._cache
            key = cache._index_key(tuple(sig), disp.targetctx.codegen())
            if key not in cache._cache_file._load_index():
                return False
        return True
    except Exception:  # noqa: BLE001 - numba internals changed: assume not cached
        return False


class _Stopped(Exception):
    """A warmer stopped between two kernels of a family."""


def load_family(family: str, step=None) -> None:
    """Compile or load the family's kernels in this process (``step(i, n)`` after each kernel)."""
    if family == "views":
        import pandas  # noqa: F401
        return
    sigs = kernel_signatures(family)
    for i, (disp, sig) in enumerate(sigs):
        disp.compile(tuple(sig))
        if step is not None:
            step(i + 1, len(sigs))
    READY.add(family)


def families_for(dataflow) -> list:
    """The families a dataflow (a builder, its graph, or a list of operators) runs: ``core`` always."""
    graph = getattr(dataflow, "graph", dataflow)
    ops = getattr(graph, "ops", graph)
    return _check({"core", *(getattr(op, "family", "core") for op in ops)})


def active():
    """The most recently started Warmer that has not finished, or None."""
    with _lock:
        return _active[-1] if _active else None


def ensure(family: str, timeout: float = 600.0) -> None:
    """Called by the engine before an operator of ``family`` runs (its dataflow's computation, on the
    scheduler): when a started warmer is compiling that family in a subprocess, wait for it (silently;
    the notebook's progress line shows the warmer's progress) rather than compile the same kernels a
    second time here. Families the warmer works on in this process need no wait (numba's lock)."""
    if not _active:  # no warmer started (outside notebooks, the usual case): nothing to wait for
        return
    w = active()
    if w is not None and family in w._remote:
        w.wait([family], timeout=timeout)


def _default_processes(n_noncore_uncached: int) -> int:
    cores = os.cpu_count() or 1
    return max(0, min(cores - 1, n_noncore_uncached))


def _lower_thread_priority(nice: int) -> None:
    """Linux schedules threads separately: lower the calling thread's priority only."""
    if nice and sys.platform.startswith("linux") and hasattr(os, "setpriority"):
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:
            pass


class Warmer:
    """Warms kernel families in the background (see the module docstring).

    ``Warmer(families=None, processes=None, nice=10)``: ``families`` defaults to all; ``processes`` is how
    many subprocesses may compile non-core families not cached yet (default: one per spare core, 0 for
    none); ``nice`` lowers the priority of the thread and the subprocesses.

    - ``start()``: starts the daemon thread (returns self); ``run()`` does the same work in the calling
      thread.
    - ``done``: every family is ready (or was given up: see ``error``).
    - ``progress()``: ``(families done, total, current family or None)``.
    - ``wait(families=None, timeout=None, on_progress=None)``: blocks until those families are ready;
      ``on_progress(done, total, current)`` is called at once, on every change and every half second;
      returns False on timeout. A family whose warming failed counts as done: its kernels then compile on
      first use, as without a warmer.
    - ``stop(timeout=10)``: stop after the kernel being compiled (subprocesses are killed) and wait for the
      thread to end; for ``%unload_ext``.
    - ``error``: None, or a message saying what failed.
    - ``timings``: family -> seconds until it was ready (from ``start``).
    """

    def __init__(self, families=None, processes: int | None = None, nice: int = 10):
        self.families = _check(families)
        self.processes = processes
        self.nice = nice
        self.error: str | None = None
        self.timings: dict = {}
        self._state = {f: "pending" for f in self.families}
        self._current: str | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._children: list = []
        self._readers: list = []
        self._remote: set = set()  # families compiled by subprocesses (ensure() waits for those)
        self._thread: threading.Thread | None = None
        self._t0 = None

    # -- the public face ---------------------------------------------------------------------------
    def start(self) -> "Warmer":
        if self._thread is not None:
            return self
        self._t0 = time.perf_counter()
        with _lock:
            _active.append(self)
        self._thread = threading.Thread(target=self._thread_main, name="kpgnb-warmer", daemon=True)
        self._thread.start()
        return self

    def run(self) -> "Warmer":
        """Warm in the calling thread (at its own priority); returns self."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        self._work()
        return self

    @property
    def done(self) -> bool:
        with self._cond:
            return all(s != "pending" for s in self._state.values())

    def progress(self) -> tuple:
        with self._cond:
            return self._progress_locked()

    def wait(self, families=None, timeout: float | None = None, on_progress=None) -> bool:
        want = [f for f in _check(families) if f in self._state]
        deadline = None if timeout is None else time.monotonic() + timeout
        last, last_t = None, 0.0
        while True:
            with self._cond:
                ok = all(self._state[f] != "pending" for f in want)
                prog = self._progress_locked()
            now = time.monotonic()
            if on_progress is not None and (prog != last or now - last_t >= 0.5 or ok):
                on_progress(*prog)
                last, last_t = prog, now
            if ok:
                return True
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                return False
            with self._cond:
                if self._progress_locked() == prog:
                    self._cond.wait(0.5 if left is None else min(0.5, left))

    def _progress_locked(self) -> tuple:
        return sum(s != "pending" for s in self._state.values()), len(self._state), self._current

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the kernel being compiled, and wait up to ``timeout`` s for the thread to end."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for p in list(self._children):
            try:
                p.kill()
            except OSError:
                pass
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def _step(self, i, n):
        """After each kernel a family compiles here: a stop ends the family there."""
        if self._stop:
            raise _Stopped()

    # -- the work ----------------------------------------------------------------------------------
    def _thread_main(self):
        try:
            _lower_thread_priority(self.nice)
            self._work()
        finally:
            with _lock:
                if self in _active:
                    _active.remove(self)

    def _set(self, family, state):
        with self._cond:
            if self._state.get(family) == "pending":
                self._state[family] = state
                self.timings[family] = time.perf_counter() - self._t0
            if state == "ready":
                READY.add(family)
            self._current = None
            self._cond.notify_all()

    def _set_current(self, family):
        with self._cond:
            self._current = family
            self._cond.notify_all()

    def _fail(self, msg):
        with self._cond:
            self.error = msg if self.error is None else self.error + "; " + msg

    def _work(self):
        try:
            self._plan_and_run()
        except BaseException as e:  # noqa: BLE001 - reported through .error, never printed
            self._fail(f"{type(e).__name__}: {e}")
        finally:
            with self._cond:
                for f, s in self._state.items():
                    if s == "pending":
                        self._state[f] = "given up"
                self._current = None
                self._cond.notify_all()
            for p in self._children:
                if p.poll() is None:
                    p.kill()
            for t in self._readers:
                t.join(5)

    def _plan_and_run(self):
        fams = self.families
        # families cached already: load them (core first) in the order of the list; the rest compile
        uncached = [f for f in fams if f != "core" and not is_ready(f) and not is_cached(f)]
        procs = _default_processes(len(uncached)) if self.processes is None else max(0, int(self.processes))
        procs = min(procs, len(uncached))
        events: queue.Queue = queue.Queue()
        remote = set()
        if procs:
            groups = [uncached[i::procs] for i in range(procs)]  # uncached is in priority order
            for g in groups:
                if self._spawn(g, events):
                    remote.update(g)
        self._remote = remote
        local = [f for f in fams if f not in remote]
        for f in local:
            if self._stop:
                return
            self._load(f)
        while any(self._state[f] == "pending" for f in remote):
            if self._stop:
                return
            self._set_current(next(f for f in fams if self._state[f] == "pending"))
            try:
                kind, fam, info = events.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind == "done" and self._state.get(fam) == "pending":
                self._load(fam)  # from the cache the subprocess filled
            elif kind == "exit":
                # whatever that subprocess did not finish compiles here
                for f in info:
                    if self._state.get(f) == "pending":
                        self._load(f)

    def _load(self, family):
        self._set_current(family)
        try:
            load_family(family, step=self._step)
        except _Stopped:
            self._set(family, "given up")
            return
        except Exception as e:  # noqa: BLE001 - reported through .error
            self._fail(f"warming {family} failed: {type(e).__name__}: {e}")
            self._set(family, "given up")
            return
        self._set(family, "ready")

    def _spawn(self, families, events) -> bool:
        import kpgnb
        root = os.path.dirname(os.path.dirname(os.path.abspath(kpgnb.__file__)))
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from kpgnb.engine.warmup import _child_main; _child_main(sys.argv[2], int(sys.argv[3]))")
        try:
            p = subprocess.Popen([sys.executable, "-c", code, root, ",".join(families), str(self.nice)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, close_fds=True)
        except OSError as e:
            self._fail(f"could not start a compiling subprocess: {e}")
            return False
        self._children.append(p)
        t = threading.Thread(target=self._read_child, args=(p, list(families), events), name="kpgnb-warmer-io",
                             daemon=True)
        t.start()
        self._readers.append(t)
        return True

    def _read_child(self, p, families, events):
        tail = collections.deque(maxlen=20)
        done = []
        for line in p.stdout:
            if line.startswith(_MARK):
                fam = line[len(_MARK):].strip()
                done.append(fam)
                events.put(("done", fam, None))
            else:
                tail.append(line.rstrip())
        rc = p.wait()
        left = [f for f in families if f not in done]
        if left and not self._stop:
            self._fail(f"compiling subprocess for {left} exited with {rc}: " + " | ".join(tail))
        events.put(("exit", None, left))


def _child_main(families: str, nice: int) -> None:
    """Entry point of a compiling subprocess: fill the cache for ``families`` (comma-separated), announcing
    each family on stdout as it is done."""
    if nice and hasattr(os, "nice"):
        try:
            os.nice(nice)
        except OSError:
            pass
    for fam in families.split(","):
        load_family(fam)
        sys.stdout.write(_MARK + fam + "\n")
        sys.stdout.flush()


def warm(families=None, progress=None, processes: int | None = 0) -> float:
    """Compile or load the given families (default: all) now, in this thread; returns the seconds it
    took. ``progress(done, total, current)`` is called as families start and finish. ``processes`` > 0
    (None: one per spare core) compiles uncached non-core families in parallel subprocesses."""
    t0 = time.perf_counter()
    w = Warmer(families, processes=processes, nice=0)
    w._t0 = t0
    if progress is None:
        w.run()
    else:
        th = threading.Thread(target=w.run, name="kpgnb-warm", daemon=True)
        th.start()
        w.wait(on_progress=progress)
        th.join()
    if w.error:
        raise RuntimeError(w.error)
    return time.perf_counter() - t0


def warm_kernels(workers: int = 2, processes: int | None = None) -> float:
    """Warm every family (``workers`` is accepted for compatibility and unused); returns the seconds it
    took: a long while on the first run after installing, under a second afterwards."""
    return warm(processes=processes)
