"""Installed Datalog programs: ``eng.datalog(text, inputs=, name=)`` makes one dataflow whose derived
relations are views (``prog["tc"]``) and exported arrangements (``NAME.tc``); ``prog.goal("tc(?, _)")``
adds a goal-directed dataflow (magic sets) that answers the bindings asked of it."""
from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..engine.collection import Arranged
from ..engine.columns import SymbolTable, encode_column, object_column
from ..engine.errors import (ArgumentTypeError, Cancelled, DatalogError, DataflowError, EngineError, KpgnbError,
                             SchemaError, UnknownNameError, UsageError)
from ..engine.session import InputSession
from .analysis import analyze
from .compiler import Compiler, IntOverflow, Relations, evaluate, ground_defined
from .errors import at
from .magic import Pattern, parse_pattern, program_for, rewrite, seed_names
from .parser import parse
from .syntax import Atom, Var, variables



def install(eng, text: str, inputs: dict | None = None, name: str | None = None,
            materialize: bool = True, flag: str = "inputs=", history: int = 1) -> "Program":
    """Parse, check and install ``text`` as one dataflow (see ``Engine.datalog``). With
    ``materialize=False`` the dataflow only indexes the inputs (by each column a rule joins on, exported
    for goals to share) and derives nothing: for programs asked only through ``prog.goal``. ``flag`` is
    what errors about the bindings name (``--inputs`` for a ``%%datalog`` cell, whose ``inputs`` are the
    engine inputs and exported arrangements its variables stand for)."""
    from ..cell import drop_loaded, input_for, loaded_for_program, seal_loaded
    program = parse(text)
    if inputs is not None and not isinstance(inputs, dict):
        raise ArgumentTypeError(f"inputs= maps predicates to what they read (an engine input's name, an exported "
                         f"arrangement's name, an input session or a DataFrame), got a {type(inputs).__name__}")
    _check_bindings(program, inputs, flag)
    bound, created = {}, []   # pred -> Source
    shared = []  # inputs loaded from the same DataFrame for an earlier program (not a cell): co-owned
    prog = None
    try:
        catalog = eng.snapshot().catalog
        for pred, src in (inputs or {}).items():
            if isinstance(src, Source):  # (a %%datalog cell's view of another program's relation)
                if src.kind == "use" and src.name not in catalog:
                    raise UsageError(f"{flag} {pred}: arrangement {src.name!r} is no longer exported; "
                                     f"arrangements are {sorted(catalog)}")
                bound[pred] = src
            elif isinstance(src, str):
                if src in eng.inputs():
                    bound[pred] = Source("input", src)
                elif src in catalog:
                    bound[pred] = Source("use", src)
                else:
                    raise UsageError((f"inputs={{{pred!r}: {src!r}}}" if flag == "inputs=" else f"{flag} {pred}")
                                     + f": no engine input or exported arrangement "
                                     f"named {src!r}; inputs are {sorted(eng.inputs())}, arrangements "
                                     f"{sorted(catalog)}")
            else:
                input_name, session = input_for(eng, pred, src, flag="inputs=")
                bound[pred] = Source("input", input_name)
                if session is not None:
                    created.append(session)
                elif not isinstance(src, InputSession) and loaded_for_program(eng, input_name):
                    shared.append(input_name)  # (not an input a notebook cell loaded: the cell's)
        sessions = eng.inputs()

        def input_schema(pred):
            src = bound.get(pred, Source("input", pred))
            if src.kind == "use":
                schema = catalog[src.name].schema
            else:
                s = sessions.get(src.name)
                if s is None:
                    return None
                schema = s.schema
            return list(schema.names), list(schema.dtypes)
        analysis = analyze(program, input_schema, bound, flag)
        name = _free_name(eng, "datalog") if name is None else name
        prog = Program(eng, name, analysis, materialize, history)
        prog.sources = {p: bound.get(p, Source("input", p)) for p in analysis.inputs}
        # made from DataFrames for the program: dropped with it (with the last of the programs sharing one)
        prog.owned = [s.name for s in created] + shared
        # (the inputs made from DataFrames are sealed once the dataflow reading them is installed: by
        # ``_build``, so that a Ctrl-C after the install undoes it, or leaves a program that works)
        prog._build(lambda df, p: prog.sources[p].read(df), finish=lambda: seal_loaded(created))
    except BaseException:
        if prog is None or not prog._installed():  # (one left installed reads them, sealed: see _build)
            drop_loaded(eng, [s for s in created if not s.dropped])  # (not those its undone install dropped)
        raise
    return prog


def as_set(c):
    """The rows of ``c`` whose multiplicity is positive, each once. An input keyed by its leading
    columns (``eng.input(..., key=)``) stays arranged by them: rules joining on that key read this
    set's own index, which the keyed input's arrangement formed once."""
    if isinstance(c, Arranged) and c.val_names and c.key_names + c.val_names == list(c.schema.names):
        return c.distinct(key=c.key_names)
    return c.distinct()


_NAN = object()  # a NaN binding's stand-in in the set of bindings asked (NaN != NaN in a Python set)


@dataclass(frozen=True)
class Source:
    """Where an input predicate's rows come from: an engine input or an exported arrangement."""
    kind: str  # "input" | "use"
    name: str

    def read(self, df):
        return df.input(self.name) if self.kind == "input" else df.use(self.name)


_NAMES_LOCK = threading.Lock()
_GIVEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # engine -> names handed out


def _free_name(eng, base: str) -> str:
    """``base`` numbered from 1, neither installed nor handed out before by this engine: two threads
    installing unnamed programs at once get different names (not both the first free one)."""
    with _NAMES_LOCK:
        given = _GIVEN.setdefault(eng, set())
        taken = eng.snapshot().dataflows
        for k in itertools.count(1):
            name = f"{base}{k}"
            if name not in taken and name not in given:
                given.add(name)
                return name


_BUILDING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # engine -> names being built (_build)


def _claim(eng, name: str):
    """Reserve ``name`` for a build (``Program._build``) before any helper input is made under it: two
    threads installing programs of one name at once, the one that comes second is told that a dataflow
    of that name is installed or being installed (not that the first's helper inputs or exports exist)."""
    with _NAMES_LOCK:
        building = _BUILDING.setdefault(eng, set())
        if name in eng.snapshot().dataflows:
            raise UsageError(f"a dataflow named {name!r} is installed already")
        if name in building:
            raise UsageError(f"a dataflow named {name!r} is being installed by another call (another thread's "
                             f"eng.datalog); drop it once installed, or pick another name")
        building.add(name)


def _unclaim(eng, name: str):
    with _NAMES_LOCK:
        _BUILDING.get(eng, set()).discard(name)


class Program:
    """A Datalog program installed as the dataflow ``name``. ``prog[pred]`` is the View of a derived
    relation; each is also the arrangement ``name.pred`` in the engine's catalog, for later dataflows
    (``df.use``) and Datalog programs."""

    def __init__(self, eng, name: str, analysis, materialize: bool = True, history: int = 1):
        self.engine = eng
        self.history = history  # epochs before the frontier its views keep readable with ``at=``
        self.name = name
        self.analysis = analysis
        self.materialized = materialize
        self.views: dict = {}
        self.sources: dict = {}    # input predicate -> Source
        self._helpers: list = []   # engine inputs holding the program's facts
        # its goals, weakly: a goal lives while its dataflow holds its answer view (``Goal.__init__``), so
        # one dropped by name (``eng.drop(g.name)``) is let go with its dataflow; ``goals`` lists the live ones
        self._goals: list = []
        self._lock = threading.Lock()  # goals are named and installed one at a time
        self._install = None  # the builder of its dataflow (its serial tells this install from a later one)
        self.owned: list = []  # names of engine inputs made for it by the caller (dropped with it)
        self._dropped = False  # prog.drop() was called: no more goals

    def _build(self, source, view_preds=None, export=True, shared=None, view_names=None, finish=None):
        """Compile into a new dataflow; ``source(df, pred)`` gives each input predicate's collection and
        ``shared(df, pred, keys)`` an arrangement of it to import (see ``Relations``); ``view_names``
        renames views (a goal's answer is a view named after the relation it answers). ``finish()`` runs
        once it is installed (the caller's inputs sealed). Interrupted (or failing) at any point, it leaves
        nothing behind: an install that finished is undone too (``_undo``)."""
        a, eng = self.analysis, self.engine
        _claim(eng, self.name)  # before any helper input is made under its name
        try:
            facts = self._fact_inputs() if self.materialized else {}
            with eng.dataflow(self.name) as df:
                self._install = df
                rel = Relations(df, a, None if shared is None else lambda p, keys: shared(df, p, keys))
                for pred in a.inputs:
                    rel.top[pred] = source(df, pred)
                    if export:
                        # relations are sets: an input row is there while its multiplicity is positive
                        # (removing a row that is not there must not cancel another); goals read this
                        rel.top[pred] = as_set(rel.top[pred])
                        rel.top[pred].export(f"{self.name}.{pred}")
                if not self.materialized:
                    for pred in a.inputs:
                        for i in _join_columns(a, pred):
                            rel.arranged_by(pred, rel.top[pred], (i,))
                    view_preds = []
                    a = _inputs_only(a)
                unit = df.input(self._unit_input()) if self.materialized and self._needs_unit() else None
                comp = Compiler(df, a, rel, unit, {p: df.input(n) for p, n in facts.items()})
                comp.strata(a.strata)
                for pred in (a.derived if view_preds is None else view_preds):
                    final = final_relation(rel, a, pred)
                    if export:
                        final.export(f"{self.name}.{pred}")
                    self.views[pred] = final.view((view_names or {}).get(pred, pred), history=self.history)
                    self.views[pred].history_advice = "with eng.datalog(..., history=N)"
                if export:
                    for (pred, keys), arr in rel.named.items():
                        if arr is not rel.top.get(pred) and pred in a.inputs | a.derived:
                            label = ",".join(a.columns[pred][i] for i in keys)
                            export_name = f"{self.name}.{pred}[{label}]"
                            if not df.exported(export_name):
                                arr.export(export_name)
                df.own_inputs(*[s.name for s in self._helpers], *self.owned)  # dropped with it, whoever drops it
            for s in self._helpers:
                s.close()  # ground facts never change: closed, they hold no frontier back
            if finish is not None:
                finish()
        except BaseException as e:
            if not self._undo():  # (kept: read meanwhile by a dataflow installed on another thread)
                self._complete(finish)
            elif isinstance(e, KpgnbError) and self.name in eng.snapshot().dataflows:
                # (another call installed a dataflow of this name meanwhile: its exports or inputs clashed)
                raise UsageError(f"a dataflow named {self.name!r} is installed already") from None
            raise
        finally:
            _unclaim(eng, self.name)

    def _undo(self) -> bool:
        """Undo a build that failed or was interrupted: its dataflow where it was installed (a Ctrl-C once
        the install returned), and its helper inputs. False where the install is kept: a dataflow installed
        meanwhile (another thread's) reads its exports."""
        serial = getattr(self._install, "serial", None)
        if serial is not None:
            self.engine.discard(self.name, serial)  # (and the inputs it owns: ``own_inputs``)
            if self._installed():
                return False
        self._drop_helpers()
        return True

    def _complete(self, finish):
        """What an install left installed after an interrupt needs to compute: its helper inputs closed (their
        facts sealed) and the caller's ``finish``. Each is a seal queued, not waited for."""
        for helper in self._helpers:
            try:
                helper.close()
            except KpgnbError:
                pass
        if finish is not None:
            try:
                finish()
            except KpgnbError:
                pass

    def _fact_inputs(self) -> dict:
        a, out = self.analysis, {}
        for pred, rows in fact_rows(a).items():
            out[pred] = self._helper(f"{self.name}#facts.{pred}", a.columns[pred], a.dtypes[pred], rows)
        return out

    def _helper(self, base: str, columns, dtypes, rows) -> str:
        """A new engine input holding rows of the program's own, named ``base`` or, where an input of that
        name is kept for a dropped program of this name (read by another dataflow still), ``base~k``."""
        inputs = self.engine.inputs()
        for k in itertools.count(1):
            name = base if k == 1 else f"{base}~{k}"
            if name not in inputs:
                try:
                    self._helpers.append(self.engine.input(name, columns, dtypes, rows=rows))
                    return name
                except UsageError:
                    inputs = self.engine.inputs()
                    if name not in inputs:
                        raise

    def _needs_unit(self) -> bool:
        return needs_unit(self.analysis)

    def _unit_input(self) -> str:
        return self._helper(f"{self.name}#unit", ["unit"], ["int64"], [(0,)])

    def _drop_helpers(self):
        """Undo the helper inputs of a failed build. Queued, not waited for (as ``cell.drop_loaded``): a
        build interrupted while the engine is busy returns at once, and a second Ctrl-C leaves nothing."""
        for s in self._helpers:
            if s.dropped:  # (with the dataflow that owned it)
                continue
            try:
                self.engine.drop_input(s.name, wait=False)
            except KpgnbError:
                pass
        self._helpers.clear()

    # -- the user's side ---------------------------------------------------------------------------
    def __getitem__(self, pred: str):
        if not self.materialized and pred in self.analysis.derived:
            raise UsageError(f"program {self.name!r} was installed with materialize=False: it derives nothing "
                             f"itself; ask {pred!r} through prog.goal(...)")
        if pred not in self.views:
            raise UnknownNameError(f"no relation {pred!r} in Datalog program {self.name!r}; relations are "
                                   f"{sorted(self.views)}")
        return self.views[pred]

    def __contains__(self, pred) -> bool:
        return pred in self.views

    @property
    def relations(self) -> list:
        return list(self.views)

    def columns(self, pred: str) -> list:
        """The column names of relation or input ``pred``."""
        cols = self.analysis.columns.get(pred) if isinstance(pred, str) else None
        if cols is None:
            a = self.analysis
            raise (UnknownNameError if isinstance(pred, str) else ArgumentTypeError)(
                f"no relation {pred!r} in Datalog program {self.name!r}; relations are {sorted(a.derived)}, "
                f"inputs {sorted(a.inputs)}")
        return list(cols)

    def goal(self, pattern: str) -> "Goal":
        """A goal-directed query for ``pattern`` (e.g. ``"tc(?, _)"``): its own dataflow, rewritten with
        magic sets, reading this program's inputs and relations through their shared arrangements.
        ``g.ask(v)`` adds a binding of the ``?`` arguments and ``g.view`` holds the answers of every
        binding asked."""
        a = self.analysis
        pat = parse_pattern(pattern, a.columns, a.dtypes)
        known = {**a.inputs, **a.derived}
        if pat.pred not in known:
            raise at(pattern, pat, f"goal {pattern!r}: no relation {pat.pred!r}; relations are "
                                   f"{sorted(a.derived)}, inputs {sorted(a.inputs)}")
        if len(pat.args) != known[pat.pred]:
            raise at(pattern, pat, f"goal {pattern!r}: {pat.pred!r} takes {known[pat.pred]} arguments")
        with self._lock:  # (prog.drop() takes it: a goal is made before the drop, and dropped by it, or refused)
            self._check_installed(f"goal {pattern!r}")
            self._check_running(f"goal {pattern!r}")
            self._goals = [r for r in self._goals if r() is not None]
            g = Goal(self, pat)  # (among its goals once complete: ``Goal.__init__``)
            if not self._installed():  # dropped meanwhile, by eng.drop: what it read may be a successor's
                g._uninstall()
                g._forget()
                self._check_installed(f"goal {pattern!r}")
        return g

    @property
    def goals(self) -> list:
        """Its goals whose dataflows are installed (one dropped, by ``g.drop()``, ``prog.drop()`` or
        ``eng.drop(g.name)``, is no longer listed, nor kept)."""
        return [g for g in (r() for r in list(self._goals)) if g is not None and g._installed()]

    def _check_running(self, what: str):
        """Refuse ``what`` of a program whose dataflow failed or was cancelled (a goal would read its
        exports, released with it): the program's failure, not the exports', is what to tell."""
        info = self.engine.snapshot().dataflows.get(self.name)
        if info is None or info.error is None or self._install is None or info.serial != self._install.serial:
            return
        cancelled = info.status == "cancelled"
        raise (Cancelled if cancelled else DataflowError)(
            f"{what}: Datalog program {self.name!r} {'was cancelled' if cancelled else 'failed'}: {info.error}; "
            f"drop it (prog.drop()) and install it again (eng.datalog(...))") from info.error

    def _installed(self) -> bool:
        """Whether the dataflow named ``self.name`` is this program's install (not a later one's)."""
        info = self.engine.snapshot().dataflows.get(self.name)
        return info is not None and self._install is not None and info.serial == self._install.serial

    def _check_installed(self, what: str):
        if self.engine.closed:
            raise EngineError("the engine is closed")
        if self._dropped or not self._installed():
            anew = self.name in self.engine.snapshot().dataflows
            again = " (a dataflow of its name is installed anew)" if anew else ""
            raise UsageError(f"{what}: Datalog program {self.name!r} has been dropped{again}; install it again "
                             f"(eng.datalog(...)) and ask the new program")

    def drop(self):
        """Uninstall the program's dataflow, its goals' dataflows and the inputs they made (those made from
        DataFrames by ``inputs=`` too; not those a notebook cell loaded from its variables, which later
        cells may read). Dataflows that import its relations keep them. On a closed engine it raises
        EngineError, as every call does (its snapshot lists no dataflow: the drop is not done)."""
        if self.engine.closed:
            raise EngineError("the engine is closed")
        with self._lock:
            self._dropped = True
            goals = self.goals
        errors = []
        for g in goals:  # (each one: a goal another thread dropped meanwhile, say, stops none of the others)
            try:
                g.drop()
            except KpgnbError as e:
                errors.append(e)
        if self._installed():
            try:
                self.engine.drop(self.name)  # (and its own inputs: ``own_inputs``, engine/builder.py)
            except UnknownNameError:
                if self._installed():
                    raise  # (not dropped by another thread meanwhile, as asked)
        if errors:
            raise errors[0]

    def __repr__(self):
        return f"<Datalog program {self.name!r}: relations {', '.join(self.views)}>"


def _nothing():
    pass


class Goal:
    """A goal-directed query of a program (see ``Program.goal``)."""

    def __init__(self, prog: Program, pattern: Pattern):
        self.program = prog
        self.pattern = pattern
        a, eng = prog.analysis, prog.engine
        self.name = _free_name(eng, f"{prog.name}.goal")
        asked = pattern.asked
        self._session = None
        self._leaders: list = []
        gp = None
        goal_pred, answer_pred = seed_names(a)
        if asked:
            self._session = eng.input(f"{self.name}#asked", [a.columns[pattern.pred][i] for i in asked],
                                      [a.dtypes[pattern.pred][i] for i in asked])
        try:
            self.analysis, whole = self._rewritten()
            gp = Program(eng, self.name, self.analysis, history=prog.history)
            gp.owned = [self._session.name] if self._session is not None else []

            def source(df, pred):
                if pred == goal_pred:
                    return df.input(self._session.name)
                return df.use(f"{prog.name}.{pred}")  # a derived relation, or an input as a set
            def shared(df, pred, keys):
                if pred == goal_pred or (pred not in a.inputs and pred not in whole):
                    return None
                export = f"{prog.name}.{pred}[{','.join(keys)}]"
                return df.use(export) if export in eng.snapshot().catalog else None
            gp._build(source, view_preds=[answer_pred], export=False, shared=shared,
                      view_names={answer_pred: pattern.pred})
            self._goal_program = gp
            self.view = gp.views[answer_pred]
            self._lock = threading.Lock()
            self._asked: set = set()  # the bindings asked (as the rows of the bindings' input, NaN as _NAN)
            self._unsealed = False  # a change went in that is not yet sealed and lent (see ``_change``)
            # every engine input the goal reads, closed ones too: a binding goes in no earlier than their last
            # epoch (a closed input's last changes, and the arrangements imported from dataflows installed
            # after it advanced, are at times up to it; a binding below them would never see them)
            self._reads = self._upstream() if self._session is not None else []
            self._waiting = None  # the epoch of a binding that went in while an input the goal reads had rows
            # buffered (``_led``)
            for s in self._reads:  # the bindings' input keeps up with the open inputs the goal reads, and
                if not s.closed:   # bindings waiting for an input's changes go with them
                    self._leaders.append(s)
                    self._session.follow(s, carry=True)
            if self._session is not None:
                led = weakref.WeakMethod(self._led)
                self._session.when_led(lambda: (led() or _nothing)())
            # the goal lives as long as its dataflow holds its answer view (the engine, while it is installed;
            # the program lists it weakly): dropped any way, by name too, it is let go with its dataflow
            self.view._goal = self
            prog._goals.append(weakref.ref(self))
        except BaseException as e:  # (a failure, or a Ctrl-C: before or after the install, nothing is left)
            for s in self._leaders:
                self._session.unfollow(s)
            if gp is not None and gp._installed():
                gp._undo()  # (its inputs too: the bindings' input is its own)
            if self._session is not None and not self._session.dropped:  # (queued: see Program._drop_helpers)
                try:
                    eng.drop_input(self._session.name, wait=False)
                except KpgnbError:
                    pass
            if isinstance(e, KpgnbError):
                prog._check_running(f"goal {pattern}")  # (the program failed meanwhile: what went wrong)
            raise

    def _rewritten(self) -> tuple:
        """The goal's program (magic sets), analysed, and the program's relations it reads whole. Adorning
        an aggregated relation that a recursive rule reads can put its aggregate in a cycle that only the
        magic predicates make (m__c -> c__bf -> d__bf -> m__d -> m__c, where the program itself had none):
        a count there is refused, and a min or max would be iterated from empty with the loop instead of
        computed over its finished relation (a partial value can derive rows that then hold themselves
        up, or the loop never settles). The goal is then rewritten with aggregated relations read whole,
        as negated ones are."""
        prog, pattern = self.program, self.pattern
        a = prog.analysis
        extra = {seed_names(a)[0]: (self._session.schema.names, self._session.schema.dtypes)} if self._session else {}
        for whole_aggregates in (False, True):
            rules, whole, names = rewrite(a, pattern, whole_aggregates)
            if not prog.materialized and whole:  # nothing to import: the goal derives those relations itself
                rules = rules + [r for r in a.program.rules if r.head.pred in _dependencies(a, whole)]
                whole = set()

            def input_schema(pred, whole=whole):
                if pred in extra:
                    return list(extra[pred][0]), list(extra[pred][1])
                if pred in a.inputs or pred in whole:
                    return a.columns[pred], a.dtypes[pred]
                return None
            try:
                goal = analyze(program_for(a, pattern, rules, names), input_schema)
            except DatalogError:
                if whole_aggregates or not any(a.aggregates.values()):
                    raise
                continue
            if whole_aggregates or not _loops_made(a, goal, names):
                return goal, whole

    def _upstream(self) -> list:
        """The engine inputs the goal's dataflow reads (directly or through imports), but its own, and
        every input of its program: a binding lends the open ones its epoch, so the program's inputs move
        on together, whichever goals are asked (lent one goal's inputs at a time, they drift apart, and a
        binding sealed at the furthest one waits for the others' owners to catch up)."""
        eng = self.program.engine
        sessions = eng.inputs()
        snap = eng.snapshot()
        names = set()
        for df in (self.name, self.program.name):
            info = snap.dataflows.get(df)
            names |= set(info.sources) if info is not None else set()
        return [sessions[n] for n in sorted(names) if n in sessions and n != self._session.name]

    def _rows(self, values):
        k = len(self.pattern.asked)
        if k == 0:
            raise UsageError(f"goal {self.pattern} has no '?' argument to ask")
        if len(values) == 1 and isinstance(values[0], (tuple, list)):  # ask((1, 2)) as ask(1, 2); (1,) as 1
            values = tuple(values[0])
        if len(values) != k:
            raise UsageError(f"ask/retract take {k} value(s), one per '?' of the goal; got {len(values)}")
        a, pred = self.program.analysis, self.pattern.pred
        want = {"int64": "an int", "float64": "a number", "str": "a string", "bool": "a bool"}
        for i, v in zip(self.pattern.asked, values):
            dt = a.dtypes[pred][i]
            try:
                hash(v)  # (a set, a dict: no column holds one, and the bindings are a set of rows)
                encode_column(object_column([v]), dt, SymbolTable())  # (checked here, interning nothing)
            except (TypeError, SchemaError) as e:
                kind = {"int64": int, "float64": (int, float), "str": str, "bool": bool}.get(dt, object)
                why = f"the value must be {want.get(dt, dt)}" if not isinstance(v, kind) else \
                    str(e).split(" holds ", 1)[-1]  # (of the right type, but not one the column holds: why)
                raise (ArgumentTypeError if isinstance(e, TypeError) else SchemaError)(
                    f"ask/retract: the value for argument {i + 1} of goal {self.pattern} is {v!r} "
                    f"({type(v).__name__}), but column {a.columns[pred][i]!r} of {pred!r} is {dt}: {why}") from None
        return [tuple(values)]

    def ask(self, *values):
        """Add a binding of the '?' arguments; its answers join ``view`` (``eng.wait(g.view)``). The
        bindings are a set: asking one that is asked already changes nothing."""
        self._change(values, True)

    def retract(self, *values):
        """Remove a binding asked before; its answers leave ``view``. One that is not asked: nothing."""
        self._change(values, False)

    def _change(self, values, ask: bool):
        """The binding goes in at the latest epoch of the inputs the goal reads. If one of them has
        changes buffered, the binding waits for them: it is sealed when that input advances (``follow``),
        so it is answered as of those changes. Otherwise it is sealed at once, and the inputs advance with
        it (an empty epoch each, all or none: ``InputSession.lend``), so the answer is complete at once, as
        K-Pg's interactive queries advance the graph and the query inputs together."""
        dropped = self._dropped_error()
        if dropped is not None:
            raise dropped
        row = self._rows(values)[0]
        key = tuple(_NAN if isinstance(v, float) and v != v else v for v in row)  # (NaN is one value here too)
        base = [s for s in self._leaders if not s.closed]
        with self._lock:
            try:
                if self._unsealed:  # (an earlier change, interrupted once its row went in: finished first)
                    self._finish(base)
                if (key in self._asked) == ask:
                    return
                # (closed inputs too: their last changes are at their last epoch, which the binding must reach)
                epoch = max([s.position for s in self._reads] + [self._session.epoch])
                self._session.advance_to(epoch)
                taken = self._session.appends
                try:
                    (self._asked.add if ask else self._asked.discard)(key)
                    self._unsealed = True  # (until sealed and lent: a Ctrl-C from here on, the next call finishes it)
                    (self._session.insert if ask else self._session.remove)([row])
                except BaseException:  # (a Ctrl-C: the set says whether the row went in, so a retry is right)
                    if self._session.appends == taken:
                        (self._asked.discard if ask else self._asked.add)(key)
                        self._unsealed = False
                    raise
                # an input's advance on another thread may have carried the bindings on (``follow``): then the
                # advances below ask for epochs it is past already, which seal nothing more (see advance_to)
                epoch = self._session.epoch
                self._waiting = epoch  # (before the test: an advance on another thread then finds it, ``_led``)
                if any(s.buffered for s in base):  # (an owner mid-epoch: the binding goes once it advanced)
                    self._unsealed = False
                    return
                self._waiting = None  # (before the lend, which calls ``_led`` on this thread)
                self._session.advance_to(epoch + 1)
                InputSession.lend(base, epoch + 1)  # (all or none: unless an owner buffered rows meanwhile)
                self._unsealed = False
            except KpgnbError as e:  # (a drop on another thread meanwhile, a seal that failed: the goal's)
                own = self._own_error(e)
                if own is e:
                    raise
                raise own from own.__cause__

    def _led(self):
        """An input the goal reads moved (``InputSession.when_led``): a binding that waited for an owner's
        buffered rows (``_change``) is sealed and lent as ``_finish`` does, once none of those inputs has
        rows buffered; the owner's advance that sealed them did not move the bindings' input, which was at
        that epoch already, so without this the binding would wait for the next advance."""
        if self._waiting is None:
            return
        with self._lock:
            base = [s for s in self._leaders if not s.closed]
            at = self._waiting
            if at is None or any(s.buffered for s in base):
                return
            self._waiting = None
            self._unsealed = True  # (a failure or a Ctrl-C from here on: the next ask or retract finishes it)
            try:
                self._finish(base, at)
            except KpgnbError:  # (the engine closed or the goal was dropped meanwhile: nothing to answer, and
                pass            # the owner's advance that called this must not fail for the goal's sake)

    def _finish(self, base, at: int | None = None):
        """What ``_change`` leaves to do when interrupted (a Ctrl-C) once its row went in, or when its
        binding waited for an owner's rows (``_led``, ``at`` its epoch): the row sealed and the inputs the
        goal reads lent the step past its epoch (the same ask repeated finds the binding asked already, and
        would otherwise leave it unanswered until those inputs next advance). Only to the step past the
        binding: where an owner's advance carried the bindings' input further (``follow``), a lend to
        there would seal the other inputs' epochs empty up to it and set their owners out of step."""
        self._waiting = None  # (before any lend, which calls ``_led`` on this thread, under the goal's lock)
        if any(s.buffered for s in base):  # (the row goes once the owner advanced: ``_led``)
            self._waiting = self._session.epoch if at is None else at
        elif self._session.buffered:  # (not sealed yet)
            at = self._session.epoch
            self._session.advance_to(at + 1)
            InputSession.lend(base, at + 1)
        else:  # (sealed: only the inputs' step is left; none where they are past it already)
            InputSession.lend(base, self._session.epoch if at is None else at + 1)
        self._unsealed = False

    def _dropped_error(self):
        """The error of a call on a goal whose dataflow was dropped (by ``g.drop()``, ``prog.drop()`` or
        ``eng.drop(g.name)``), or None. Its bindings' input is an internal one: the goal is named."""
        if self._session is None or not self._session.dropped:
            return None
        prog = self.program
        return UsageError(f"goal {self.pattern} was dropped (its dataflow {self.name!r} is gone); "
                          + (f"its program {prog.name!r} was dropped too" if prog._dropped else
                             f"ask a new goal of the program (prog.goal('{self.pattern}'))"))

    def _own_error(self, e: KpgnbError) -> KpgnbError:
        """``e``, raised by the goal's bindings' input, told of the goal: the user never made that input."""
        dropped = self._dropped_error()
        if dropped is not None:
            dropped.__cause__ = None
            return dropped
        name = self._session.name
        text = str(e)
        if repr(name) not in text:
            return e
        text = text.replace(f"input {name!r}", "its bindings' input").replace(repr(name), "its bindings' input")
        try:
            own = type(e)(f"goal {self.pattern}: {text}")
        except Exception:  # noqa: BLE001 - a class taking other arguments: as it was
            return e
        own.__cause__ = e.__cause__
        return own

    def _installed(self) -> bool:
        """Whether the goal's dataflow is installed (as its own install, not a later one of its name)."""
        return self._goal_program._installed()

    def _forget(self):
        """No longer among its program's goals (the caller holds the program's lock)."""
        prog = self.program
        prog._goals = [r for r in prog._goals if r() is not None and r() is not self]

    def drop(self):
        """Uninstall the goal's dataflow and forget its bindings."""
        self._uninstall()
        with self.program._lock:
            self._forget()

    def _uninstall(self):
        eng = self.program.engine
        if eng.closed:  # (its snapshot lists no dataflow: skipping the drop would pass for one)
            raise EngineError("the engine is closed")
        if self.name in eng.snapshot().dataflows:
            try:
                eng.drop(self.name)  # (and the inputs made for it: ``own_inputs``, engine/builder.py)
            except UnknownNameError:
                if self.name in eng.snapshot().dataflows:
                    raise
                # (dropped by another thread meanwhile: as asked)
        for s in self._leaders:
            self._session.unfollow(s)

    def __repr__(self):
        return f"<goal {self.pattern} of {self.program.name!r}: dataflow {self.name!r}>"


def _check_bindings(program, inputs, flag: str = "inputs="):
    """``inputs=`` (``flag``) binds only predicates some rule reads (a typo or a stale binding is an error)."""
    read = {lit.pred for r in program.rules for lit in r.body if isinstance(lit, Atom)}
    for pred in inputs or {}:
        if not isinstance(pred, str) or pred not in read:
            raise UsageError(f"{flag} binds {pred!r}, which no rule reads; the predicates rules read are "
                             f"{sorted(read)}")


def fact_rows(a) -> dict:
    """Derived predicate -> the rows of its ground facts (rules with no body), for those that have some
    facts: possibly no rows, when every fact divides by zero (the predicate is then an empty relation,
    not one without any rule to define it)."""
    out = {}
    for pred in a.derived:
        facts = [r for r in a.program.rules if r.head.pred == pred and not r.body]
        try:
            rows = [tuple(_constant(x) for x in r.head.args) for r in facts if ground_defined(r.head.args)]
        except IntOverflow as e:
            raise at(a.program.text, e.node, e.reason) from None
        if facts:
            out[pred] = rows
    return out


def needs_unit(a) -> bool:
    """Whether some rule with a body reads no atom (``p(x) :- x = 1.``): it reads a one-row unit input."""
    return any(r.body and not any(st.kind == "atom" for st in a.plans[id(r)].steps) for r in a.program.rules)


def final_relation(rel, a, pred):
    """The derived relation ``pred`` arranged by all its columns, in its declared order (its view)."""
    cols = a.columns[pred]
    final = rel.top[pred]
    if not (hasattr(final, "key_names") and list(final.schema.names) == cols):
        final = final.select(cols).arrange_by(*cols)
    return final


def run_on_spark(text: str, inputs: dict, spark=None, diffs: bool = False) -> dict:
    """Evaluate a Datalog program as Spark jobs (``kpgnb.spark.datalog``): the same parse, checks and
    compilation as ``eng.datalog``, recorded and run by ``kpgnb.spark.run``. ``inputs`` maps every input
    predicate to a Spark (or pandas) DataFrame, columns by position. Returns derived predicate -> DataFrame
    with the relation's columns."""
    import pandas as pd
    from .. import spark as bridge
    from ..engine.columns import Schema
    from ..spark_backend import arrow_input
    program = parse(text)
    if inputs is not None and not isinstance(inputs, dict):
        raise UsageError(f"inputs= maps input predicates to Spark (or pandas) DataFrames, got a "
                         f"{type(inputs).__name__}")
    _check_bindings(program, inputs)
    frames = dict(inputs or {})
    if spark is None:
        spark = next((f.sparkSession for f in frames.values() if hasattr(f, "sparkSession")), None)
    if spark is None:  # (facts, a unit input and pandas inputs need one to become DataFrames)
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
    schemas = {}
    for pred, f in frames.items():
        if not hasattr(f, "sparkSession"):
            if spark is None:
                raise UsageError(f"input {pred!r} is a {type(f).__name__}, not a Spark DataFrame; pass spark=")
            frames[pred] = f = spark.createDataFrame(arrow_input(pred, f))  # (as kp.spark.run reads pandas)
        dt = bridge.dtypes_of(f)
        schemas[pred] = (list(dt), list(dt.values()))
    a = analyze(program, schemas.get, set(frames))
    facts = fact_rows(a)
    if spark is None and (facts or needs_unit(a)):
        raise UsageError("no SparkSession: pass spark= (kpgnb.spark.session() makes a local one)")
    for pred, rows in facts.items():
        schema = Schema.of(a.columns[pred], a.dtypes[pred])
        frame = pd.DataFrame(rows, columns=list(schema.names))
        for n, d in zip(schema.names, schema.dtypes):  # (an int fact in a column widened to float: as a float)
            if d != "str":
                frame[n] = frame[n].astype(d)
        frames[f"#facts.{pred}"] = spark.createDataFrame(frame, _spark_schema(schema))
    unit = needs_unit(a)
    if unit:
        frames["#unit"] = spark.createDataFrame(pd.DataFrame({"unit": [0]}))

    def build(df):
        rel = Relations(df, a, None)
        for pred in a.inputs:
            rel.top[pred] = df.input(pred).distinct()  # sets, as in the engine
        comp = Compiler(df, a, rel, df.input("#unit") if unit else None,
                        {p: df.input(f"#facts.{p}") for p in facts})
        comp.strata(a.strata)
        for pred in a.derived:
            final_relation(rel, a, pred).view(pred)
    return bridge.run(build, frames, spark, diffs=diffs)


def _spark_schema(schema):
    names = {"int64": "long", "float64": "double", "bool": "boolean", "str": "string"}
    return ", ".join(f"`{n}` {names[d]}" for n, d in zip(schema.names, schema.dtypes))


def _join_columns(a, pred) -> list:
    """Positions of ``pred`` at which some rule joins or filters on a variable (worth an index)."""
    out = set()
    for r in a.program.rules:
        counts = {}
        for node in (r.head, *r.body):
            for v in variables(node):
                counts[v.name] = counts.get(v.name, 0) + 1
        for lit in r.body:
            if isinstance(lit, Atom) and lit.pred == pred:
                out |= {i for i, x in enumerate(lit.args) if isinstance(x, Var) and not x.anonymous
                        and counts[x.name] > 1}
    return sorted(out)


def _loops_made(a, goal, names) -> bool:
    """Whether the goal's program ``goal`` computes an aggregate in a loop that the program ``a`` (whose
    predicates ``names`` map back to) does not: where ``a`` computes it once, outside recursion, or in a
    loop of its own that the rewrite joined with others (a recursive min read by the goal's recursive
    predicate): there a partial value would be read before the aggregate's own loop settles."""
    loop_of = {p: set(s.preds) for s in a.strata if s.recursive for p in s.preds}

    def original(p):
        return names.get(p, (p,))[0]
    for s in goal.strata:
        if s.recursive:
            for p in s.preds:
                own = loop_of.get(original(p))
                if goal.aggregates.get(p) and (own is None or any(original(r) not in own for r in s.preds)):
                    return True
    return False


def _dependencies(a, preds) -> set:
    """``preds`` and every derived predicate they read, directly or not."""
    out, todo = set(), list(preds)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo += [lit.pred for r in a.program.rules if r.head.pred == p for lit in r.body
                 if isinstance(lit, Atom) and lit.pred in a.derived]
    return out


def _inputs_only(a):
    """The analysis of a program that derives nothing (a lazy program's dataflow)."""
    return dataclasses.replace(a, derived={}, strata=[], aggregates={})


def _constant(x):
    """A ground head argument's value (a constant, or arithmetic over constants)."""
    value = evaluate(x, {})
    return value.item() if isinstance(value, np.generic) else value
