"""The dataflow graph: scopes, messages, operators and progress tracking (DESIGN.md section 3, layer 5).

Operators are created in build order, which is a topological order of the graph once loop feedback
edges are set aside. Progress tracking is a fixed point over that order: the frontier of an operator's
input is its upstream operator's output frontier (a step takes every message queued at the operator, so
when it runs, every update before that frontier is in its queue or already consumed); an operator's
output frontier is the meet of its capabilities (work it holds back) and of its input frontier and the
lower bounds of the messages still queued at it, mapped through its path summary (enter adds a round,
leave drops it, feedback adds 1).
Operators run when they have messages or their frontier moved (in a nested scope, a ``lazy_rounds``
operator runs only if work is ``due``, and follows a move to another epoch by letting its inputs compact);
many logical times travel in one physical message (K-Pg principle 1).
"""
from __future__ import annotations

import contextlib
import contextvars
import linecache
import os
import sys
import time

from . import faults, warmup
from .errors import DataflowError
from .lattice import Antichain
from .scope import IDENTITY, Scope

_EMPTY = Antichain()  # shared, never mutated: "nothing more will come"

__all__ = ["Site", "Scope", "Updates", "Batches", "Operator", "Graph", "DataflowError"]

_PKG_DIRS = tuple({os.path.dirname(os.path.abspath(__file__)),
                   os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kpgnb")})


_ABSPATHS: dict = {}  # code file name -> its absolute path (a capture walks many frames of few files)


def _abspath(fn: str) -> str:
    got = _ABSPATHS.get(fn)
    if got is None:
        got = _ABSPATHS[fn] = os.path.abspath(fn) if not fn.startswith("<") else fn
    return got


def _shell_dirs() -> tuple:
    """IPython's and the standard library's directories: a cell magic's call (``%%datalog``, whose
    operators kpgnb's compiler defines) is no line of the user's to point at."""
    ip = sys.modules.get("IPython")
    dirs = (os.path.dirname(_abspath(os.__file__)) + os.sep,)
    return dirs + ((os.path.dirname(_abspath(ip.__file__)) + os.sep,) if ip is not None else ())


_NO_SITE = contextvars.ContextVar("kpgnb_no_site", default=False)


@contextlib.contextmanager
def no_site():
    """Operators defined inside have no site: code that is not Python the user wrote (a ``%%datalog`` cell,
    whose errors name the program's own line and column) has no line of theirs to point at."""
    token = _NO_SITE.set(True)
    try:
        yield
    finally:
        _NO_SITE.reset(token)


_GIVEN_SITE = contextvars.ContextVar("kpgnb_given_site", default=None)


@contextlib.contextmanager
def given_site(site):
    """Operators defined inside are sited at ``site``: a front end's own location (a Datalog rule's
    aggregate), for code whose Python line is the compiler's."""
    token = _GIVEN_SITE.set(site)
    try:
        yield
    finally:
        _GIVEN_SITE.reset(token)


class Site:
    """Where in the user's code an operator was defined (for error messages)."""

    __slots__ = ("filename", "lineno", "line")

    def __init__(self, filename, lineno, line):
        self.filename, self.lineno, self.line = filename, lineno, line

    @classmethod
    def capture(cls) -> "Site | None":
        given = _GIVEN_SITE.get()
        if given is not None:
            return given
        if _NO_SITE.get():
            return None
        f = sys._getframe(1)
        skip = _PKG_DIRS + _shell_dirs()
        while f is not None:
            fn = _abspath(f.f_code.co_filename)
            if not fn.startswith(skip) and "importlib" not in fn:
                line = linecache.getline(f.f_code.co_filename, f.f_lineno, f.f_globals).strip()
                return cls(f.f_code.co_filename, f.f_lineno, line)
            f = f.f_back
        return None

    def __str__(self):
        fn = self.filename
        if "ipykernel" in fn or fn.startswith("<ipython-input"):
            where = f"cell line {self.lineno}"
        else:
            where = f"{os.path.basename(fn)}:{self.lineno}"
        return f"{where}: {self.line}" if self.line else where


# -- messages -------------------------------------------------------------------------------------

class Updates:
    """A message of unarranged updates: one UpdateBatch (or None) per worker shard."""

    __slots__ = ("shards", "lower")

    def __init__(self, shards, lower: Antichain):
        self.shards = shards
        self.lower = lower


class Batches:
    """A message of arranged batches: a tuple of batches per shard, covering [lower, upper) in the
    receiving scope's times; ``native_upper`` is the upper in the trace's own times."""

    __slots__ = ("shards", "lower", "upper", "native_upper")

    def __init__(self, shards, lower: Antichain, upper: Antichain, native_upper: Antichain):
        self.shards = shards
        self.lower = lower
        self.upper = upper
        self.native_upper = native_upper


# -- operators ----------------------------------------------------------------------------------

class Operator:
    """Base of all operators: the interface the graph and the runtime rely on.

    - ``step(rt)`` does the work: take every queued message (``frontier`` counts on it), send results
      (``rt.run`` runs per-shard work on the pool). A ``passive`` operator steps only when messages
      are queued; the others also step when their input frontier moved (``lazy_rounds`` ones, in a
      nested scope, only when work is ``due()``; ``follow_epoch()`` when it moved to another epoch).
    - ``summary(frontier)`` maps an input frontier to the output (how times change), and
      ``capabilities()`` is the antichain of times the operator may still emit at without new input.
    - ``install(rt)`` runs on the scheduler when the dataflow is installed (open trace handles), then
      ``finish_install()`` once every operator is installed; ``release()`` gives up every handle and
      subscription (dropped, failed or cancelled). Both are idempotent.
    - ``trace`` / ``lens``: for operators whose output is arranged (``arranged = True``), the trace that
      readers of this stream read and how they see its times; ``owned_trace()`` is a trace this operator
      itself maintains (shown in statistics), None for operators that only pass one through.
    """

    kind = "operator"
    family = "core"  # the kernels it runs, as engine/warmup.py groups them
    passive = False  # it only passes messages on (no state, no capabilities): a moved frontier gives it no work
    # in a nested scope (times of depth >= 2), a move of the input frontier gives it work only if ``due()``:
    # extending its trace's upper over a span without updates can wait for its next step, which covers the
    # span. A move to another epoch still lets its inputs compact (``follow_epoch``), so loop traces hold
    # what eager steps would leave at every epoch
    lazy_rounds = False
    arranged = False  # whether the output stream carries Batches messages
    wakes_graph = False  # a source that calls ``graph.wake()`` whenever it gets work (no need to poll it)
    lens = IDENTITY
    trace = None
    schema = None  # the output's columns, positionally, as the first Collection over it names them

    def __init__(self, scope: Scope, inputs, site: Site | None = None):
        self.scope = scope
        self.graph = scope.graph
        self.inputs = list(inputs)
        self.consumers: list = []
        for i, up in enumerate(self.inputs):
            up.consumers.append((self, i))
        self.queues = [[] for _ in self.inputs]
        self.port_frontiers = [Antichain() for _ in self.inputs]
        self.frontier = Antichain()
        self.last_frontier = None
        self.out_frontier = Antichain()
        self._stale = True        # its frontiers need recomputing (Graph._settle)
        self._loop = None         # the operators of the loop it is part of, if any (Graph._plan)
        self._back = None         # its loop's one time-changing operator, if the loop has one (Graph._plan)
        self._pos = 0             # its position in the graph's operator list (Graph._plan)
        self._summary_memo = None  # (input frontier's elements, summary of it)
        self._keeps_times = type(self).summary is Operator.summary  # its summary is the identity
        self.site = site
        self.busy = 0.0
        self.steps = 0
        self.index = self.graph.add(self)

    # -- progress -------------------------------------------------------------------------------
    def summary(self, frontier: Antichain) -> Antichain:
        return frontier

    def capabilities(self) -> Antichain:
        return _EMPTY

    def has_work(self) -> bool:
        for q in self.queues:
            if q:
                return True
        if self.passive:
            return False
        last = self.last_frontier
        if last is None:
            return True
        f, g = self.frontier.elements, last.elements
        if f == g:
            return False
        if self.lazy_rounds and f and g and len(f[0]) > 1:
            return self.due()
        return True

    def due(self) -> bool:
        """For ``lazy_rounds`` operators: whether the input frontier has passed work the operator holds
        (it must step for the loop's frontier to move on)."""
        return True

    def epoch_moved(self) -> bool:
        """For ``lazy_rounds`` operators in a loop without work: whether the input frontier's least epoch
        moved since the last step or ``follow_epoch`` (elements are sorted: the first holds it)."""
        f, g = self.frontier.elements, self.last_frontier.elements
        return bool(f) and bool(g) and f[0][0] != g[0][0]

    def follow_epoch(self):
        """For ``lazy_rounds`` operators in a loop: the input frontier moved to another epoch and no work
        is due. Let the traces it reads compact to the frontier, as a step would, without stepping (no
        empty batch extends its own trace, whose readers compact it the same way)."""

    # -- data -------------------------------------------------------------------------------------
    def take(self, port: int = 0) -> list:
        q = self.queues[port]
        if not q:
            return q
        self.queues[port] = []
        return q

    def send(self, msg):
        for op, port in self.consumers:
            op.queues[port].append(msg)
            op._stale = True

    # -- lifecycle --------------------------------------------------------------------------------
    def install(self, rt):
        """Called on the scheduler thread when the dataflow is installed."""

    def finish_install(self):
        """Called once every operator of the dataflow is installed."""

    @property
    def since(self) -> Antichain | None:
        """Imports: the frontier their history arrives compacted to (None: not an import)."""
        return None

    def readable_from(self, epoch: int):
        """Sinks (views, exports): the dataflow cannot tell apart the epochs before ``epoch``."""

    def release(self):
        """Give up handles and subscriptions (dropped, failed or cancelled)."""

    def owned_trace(self):
        """The trace this operator maintains, if any (for statistics)."""
        return None

    def owned_traces(self) -> list:
        """Every trace this operator maintains (``owned_trace`` and any other: what statistics list and idle
        maintenance tidies)."""
        t = self.owned_trace()
        return [] if t is None else [t]

    def step(self, rt):
        raise NotImplementedError

    def describe(self) -> str:
        where = f" (defined at {self.site})" if self.site else ""
        return f"{self.kind}{where}"

    def label(self) -> str:
        """Who this operator is in statistics, e.g. ``reach: join#3`` or ``q2: import 'edges_by_src'``
        (naming, say, the reader that holds an arrangement's compaction back)."""
        builder = getattr(self.graph, "builder", None)
        name = getattr(self, "name", None)
        what = f"{self.kind} {name!r}" if isinstance(name, str) else f"{self.kind}#{self.index}"
        return f"{builder.name}: {what}" if builder is not None else what


def _refresh(op: Operator, inputs_moved: bool = True) -> bool:
    """Recompute one operator's frontiers; returns whether its output frontier changed. Its port and
    input frontiers are its upstream operators' output frontiers: a step takes every message queued at
    the operator, so once it runs, everything before them has arrived. Its output frontier also holds
    back for the messages still queued (their lower bounds), mapped through its summary, and for its
    capabilities. Right after its own step (``inputs_moved=False``) only the output side can have
    changed."""
    inputs = op.inputs
    held = None
    if not inputs_moved:
        inp = op.frontier
        for q in op.queues:
            for msg in q:
                held = msg.lower if held is None else held.meet(msg.lower)
    elif len(inputs) == 1:
        inp = inputs[0].out_frontier
        pf = [inp]
        for msg in op.queues[0]:
            held = msg.lower if held is None else held.meet(msg.lower)
    else:
        pf = []
        inp = None
        for i, up in enumerate(inputs):
            f = up.out_frontier
            pf.append(f)
            inp = f if inp is None else inp.meet(f)
            for msg in op.queues[i]:
                held = msg.lower if held is None else held.meet(msg.lower)
        if inp is None:
            inp = _EMPTY
    if inputs_moved:
        op.port_frontiers = pf
        op.frontier = inp
    if held is not None:
        inp = inp.meet(held)
    if op._keeps_times:
        out = inp
    else:  # summaries are pure functions of the frontier: remember the last one
        memo = op._summary_memo
        if memo is not None and memo[0] == inp.elements:
            out = memo[1]
        else:
            out = op.summary(inp)
            op._summary_memo = (inp.elements, out)
    if not op.passive:  # (a passive operator holds no capabilities)
        caps = op.capabilities()
        if caps.elements:
            out = out.meet(caps)
    if out.elements != op.out_frontier.elements:
        op.out_frontier = out
        op.graph.changes += 1
        return True
    return False


def _update(op: Operator, inputs_moved: bool = True):
    """Refresh an operator that may have changed and mark its consumers when its output frontier moved.
    An operator inside a loop stays marked: its refreshed frontiers lean on the feedback's from before,
    so the next pass recomputes its loop from scratch (``Graph._settle``)."""
    if _refresh(op, inputs_moved):
        for c, _ in op.consumers:
            c._stale = True
    if op._loop is None:
        op._stale = False


def _restart(loop, seen=None) -> int:
    """Mark a loop for recomputation from the empty frontier (the top of the lattice). A loop whose only
    operator that changes times is its back edge starts there from its exact frontier instead (``_seed``),
    so that one sweep settles it. Loops that read this one restart too: their frontiers were computed from
    this loop's, which now start again from above, and a loop left to climb from below towards a fixed
    point that is the empty frontier (every input closed) would climb a round per sweep for ever. Returns
    the least position of the operators restarted."""
    seen = set() if seen is None else seen
    seen.add(id(loop))
    downstream = []
    for op in loop:
        op.out_frontier = _EMPTY
        op._stale = True
        for c, _ in op.consumers:
            c._stale = True
            if c._loop is not None and c._loop is not loop and id(c._loop) not in seen:
                seen.add(id(c._loop))
                downstream.append(c._loop)
    back = loop[0]._back
    if back is not None:
        back.out_frontier = _seed(loop, back)
    least = loop[0]._pos
    for later in downstream:
        least = min(least, _restart(later, seen))
    return least


def _seed(loop, back) -> Antichain:
    """The back edge's output frontier, when every other operator of the loop passes times through
    unchanged: its summary of the meet of every time the loop may still see (its inputs from outside,
    the capabilities and queued messages of its operators), since each of those reaches the back edge's
    input along a path that does not change times. A stale input from outside only makes the seed
    lower than the fixed point; the sweep then climbs to it (and the input's refresh restarts the loop)."""
    m = _EMPTY
    for op in loop:
        for up in op.inputs:
            if up._loop is not loop:
                m = m.meet(up.out_frontier)
        for q in op.queues:
            for msg in q:
                m = m.meet(msg.lower)
        if op is not back:
            caps = op.capabilities()
            if caps.elements:
                m = m.meet(caps)
    out = back.summary(m)
    caps = back.capabilities()
    return out.meet(caps) if caps.elements else out


class Graph:
    """The operators of one dataflow in build order, with progress tracking and the run loop.

    Progress tracking is incremental: an operator is marked stale when it steps, when a message is
    sent to it, or when an upstream operator's output frontier moves, and only stale operators are
    recomputed. Loops (strongly connected sets of operators, joined by feedback edges) are the
    exception: their frontiers are a greatest fixed point, so whenever one of their operators is stale
    the whole loop restarts from the empty frontier and iterates until it settles, as
    ``compute_frontiers`` does for the whole graph."""

    def __init__(self):
        self.ops: list = []
        self.root = Scope(self)
        self.cyclic = False
        self._resume = 0  # where an interrupted pass stopped
        self._planned = None  # the ops list that ``_loops`` describes
        self._loops: list = []
        self.changes = 0  # bumped whenever an operator steps or an output frontier moves (what is published)
        self.idle = False  # the last ``run`` ended because no operator had work (not interrupted)

    def add(self, op: Operator) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def start_reads(self):
        """After install: the dataflow sees its imports' history compacted to their frontiers, so its
        sinks can be read from the latest of those epochs on (a dataflow installed at epoch 5 has no
        answer for epoch 2, rather than an empty one)."""
        epochs = [op.since.elements[0][0] for op in self.ops if op.since is not None and op.since.elements]
        if epochs:
            for op in self.ops:
                op.readable_from(max(epochs))

    def _plan(self):
        """Number the operators by position and find the loops (Tarjan's strongly connected
        components), once per shape of the graph."""
        ops = self.ops
        if self._planned is ops and self._planned_n == len(ops):
            return
        for i, op in enumerate(ops):
            op._pos = i
            op._loop = None
            op._back = None
        live = set(map(id, ops))
        index, low, on_stack, stack, loops = {}, {}, set(), [], []
        for root in ops:
            if id(root) in index:
                continue
            work = [(root, iter(root.inputs))]
            index[id(root)] = low[id(root)] = len(index)
            stack.append(root)
            on_stack.add(id(root))
            while work:
                v, it = work[-1]
                for w in it:
                    if id(w) not in live:
                        continue
                    if id(w) not in index:
                        index[id(w)] = low[id(w)] = len(index)
                        stack.append(w)
                        on_stack.add(id(w))
                        work.append((w, iter(w.inputs)))
                        break
                    if id(w) in on_stack:
                        low[id(v)] = min(low[id(v)], index[id(w)])
                else:
                    work.pop()
                    if work:
                        u = work[-1][0]
                        low[id(u)] = min(low[id(u)], low[id(v)])
                    if low[id(v)] == index[id(v)]:
                        comp = []
                        while True:
                            w = stack.pop()
                            on_stack.discard(id(w))
                            comp.append(w)
                            if w is v:
                                break
                        if len(comp) > 1 or any(u is v for u in v.inputs):
                            comp.sort(key=lambda o: o._pos)
                            moving = [o for o in comp if type(o).summary is not Operator.summary]
                            simple = len(moving) == 1 and all(o.scope is comp[0].scope for o in comp)
                            for o in comp:
                                o._loop = comp
                                o._back = moving[0] if simple else None
                            loops.append(comp)
        self._loops = loops
        self._polled = [op for op in ops if not op.inputs and not op.wakes_graph]  # see ``quiet``
        self._planned, self._planned_n = ops, len(ops)

    def _settle(self):
        """Bring every stale operator's frontiers up to date (see the class docstring)."""
        self._plan()
        ops = self.ops
        for loop in self._loops:
            if any(op._stale for op in loop):
                _restart(loop)
        again = True
        while again:
            again = False
            for i, op in enumerate(ops):
                if op._stale:
                    op._stale = False
                    if _refresh(op):
                        for c, _ in op.consumers:
                            c._stale = True
                            if c._loop is not None and c._loop is not op._loop:
                                # a loop's input moved: its frontiers are a greatest fixed point, which
                                # only iteration from the top reaches (from below, rounds would climb
                                # one per sweep without end)
                                again = _restart(c._loop) <= i or again
                            if c._pos <= i:
                                again = True

    def compute_frontiers(self):
        """Every operator's input and output frontiers, from scratch: one sweep in build order, repeated
        to a fixed point when loops feed back."""
        for op in self.ops:
            op.out_frontier = _EMPTY
            op._stale = True
        self._settle()

    def run(self, rt) -> bool:
        """Run operators until none has work, or until ``rt.interrupted()`` (checked between operator
        steps) asks to yield. A pass that yielded resumes at the operator it stopped before, so operators
        late in the order are not starved by early ones that always have work. Returns whether anything
        ran.

        Within a pass, an operator that stepped is refreshed right after its step, and every later one
        that became stale (a message, an upstream frontier that moved) before it is looked at: progress
        reaches downstream in the same pass, so an update moves through the whole graph in one pass
        instead of one operator per pass (a reduce sees its input's new frontier together with the new
        batch and settles it in one step rather than holding it as pending work for a second). Frontiers
        of operators further down the order (loop feedback) are those of the pass's start: no later than
        their current ones, so the refreshed frontiers stay safe lower bounds."""
        did = False
        self.idle = False
        while True:
            self._settle()
            ops = self.ops
            stepped = []  # operators that stepped in this pass
            start, self._resume = self._resume, 0
            for i in range(start, len(ops)):
                op = ops[i]
                if op._stale:
                    _update(op)
                if op.has_work():
                    if stepped and rt.interrupted():
                        self._resume = i
                        return True
                    op.last_frontier = op.frontier
                    if op.family not in warmup.READY:
                        warmup.ensure(op.family)
                    t0 = time.perf_counter()
                    try:
                        faults.point("operator_step")
                        op.step(rt)
                    except BaseException as e:  # noqa: BLE001 - re-raised with the operator named (a user
                        # function's own DataflowError too: it read a view of a dataflow that failed)
                        raise DataflowError(f"{op.describe()} failed: {type(e).__name__}: {e}") from e
                    finally:
                        op._stale = True
                    op.busy += time.perf_counter() - t0
                    op.steps += 1
                    self.changes += 1
                    stepped.append(op)
                    _update(op, inputs_moved=False)
                elif op.lazy_rounds and op.last_frontier is not None and op.epoch_moved():
                    op.last_frontier = op.frontier
                    op.follow_epoch()
            if not stepped:
                if start:
                    continue  # a resumed pass saw only the tail: look at every operator before concluding
                self.idle = True
                return did
            did = True
            if rt.interrupted():
                return True
            if not start and not any(op._stale for op in ops) and not any(op.has_work() for op in stepped):
                # another pass would find no work: what a step changes reaches the operators after it in
                # this pass, except through a loop's feedback, which leaves the loop's operators marked
                self.idle = True
                return True

    def quiet(self) -> bool:
        """Whether a run would find nothing to do: the last one ended idle, and since then no source
        operator got work. Only sources (operators without inputs) take work from outside the graph: an
        import wakes the graph when a batch reaches it (``wakes_graph``), the others are asked; a
        scheduler command that may touch the graph otherwise calls ``wake`` too."""
        if not self.idle:
            return False
        self._plan()
        return not any(op.has_work() for op in self._polled)

    def wake(self):
        """Something outside the run loop may have given an operator work: the next run looks."""
        self.idle = False

    def has_work(self) -> bool:
        """Whether any operator would run (frontiers brought up to date first)."""
        self._settle()
        return any(op.has_work() for op in self.ops)
