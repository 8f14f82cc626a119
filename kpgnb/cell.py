"""One ``%%dataflow NAME`` cell, start to end: its inputs bound, its body run with the builder as ``df``,
the dataflow installed atomically, its first results waited for, its views bound in the notebook.

A cell that fails at any of these steps leaves the engine as it was: the body's builder is discarded
(nothing installed), a dataflow whose first computation fails (a user function that raises on its first
batch) is dropped again, and the inputs the cell loaded from DataFrames (or its body created) are dropped
with it, so a corrected cell loads (or creates) them afresh.
"""
from __future__ import annotations

import ast
import copy
import os
import re
import symtable
import sys
import time
import weakref
from dataclasses import dataclass, field

from .cellerror import REPORTS, CellError, CellInterrupt
from .cellerror import wrap as _wrap
from .engine.errors import ArgumentTypeError, DataflowError, KpgnbError, SchemaError, UsageError
from .handle import DataflowHandle

PROGRESS_AFTER_S = 2.0   # a wait longer than this shows a progress line (stderr), refreshed as it waits
WAIT_STEP_S = 0.5        # a wait looks at the dataflow (and lets Ctrl-C in, and the progress line) this often


@dataclass
class CellSpec:
    """What the magic's line says."""
    name: str
    inputs: dict = field(default_factory=dict)   # collection name in the body -> user namespace variable
    replace: bool = False
    output: str | None = None                    # -o VAR: bind the DataflowHandle there
    wait: bool = True                            # wait for the first results before returning


def parse_inputs(text: str | None) -> dict:
    """``a=x,b=y`` (or ``x`` for ``x=x``) -> {"a": "x", "b": "y"}."""
    out = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, var = part.partition("=")
        name, var = name.strip(), (var.strip() or name.strip())
        for what, ident in (("name", name), ("variable", var)):
            if not ident.isidentifier():
                raise UsageError(f"--inputs: {ident!r} is not a valid {what} (write --inputs a=x,b=y)")
            if not notebook_name(ident):  # (bound where the cell's code cannot read it, as -o refuses)
                raise UsageError(f"--inputs: {ident!r} is a Python keyword, not a valid {what}; pick "
                                 f"another (write --inputs a=x,b=y)")
        if name in out:
            raise UsageError(f"--inputs names {name!r} twice")
        out[name] = var
    return out


# -- inputs from the notebook's namespace ---------------------------------------------------------------
_loaded = weakref.WeakKeyDictionary()   # engine -> {input name: _Source it was loaded from}


class _Source:
    """What an input was loaded from, without keeping it alive: a weak reference, or, for a dict (which
    cannot be referenced weakly), its id and weak references to its arrays; the session loaded from it
    (weakly: an input of that name made otherwise later is not this one); and whether a program loaded it
    (``eng.datalog(inputs={...: frame})``, which later programs reusing it co-own) or a notebook cell
    (``--inputs``: the cell's, which no program owns)."""

    def __init__(self, obj, session, for_program: bool = False):
        self.session = weakref.ref(session)
        self.for_program = for_program
        try:
            self._ref, self._parts = weakref.ref(obj), None
        except TypeError:
            self._ref, self._id = None, id(obj)
            self._parts = {k: _weak(v) for k, v in obj.items()}

    def is_(self, obj) -> bool:
        if self._ref is not None:
            return self._ref() is obj
        return (id(obj) == self._id and isinstance(obj, dict) and obj.keys() == self._parts.keys()
                and all(ref() is obj[k] for k, ref in self._parts.items()))


def _weak(v):
    try:
        return weakref.ref(v)
    except TypeError:  # a list: small, kept
        return lambda: v


def input_for(eng, var: str, obj, flag: str = "--inputs"):
    """The engine input a namespace value stands for, and the session if this call created it. An
    InputSession is itself; a DataFrame (pandas, Spark, Arrow table, dict of arrays) becomes an input
    named after its variable, its rows loaded (not yet sealed: ``seal_loaded`` does that once the
    dataflow is installed) and kept, so later cells reuse (and may change) it. Another value of the
    variable (the frame made again after ``%reset``) is refused while an installed dataflow reads the input
    loaded from the earlier one, and replaces it (a line says so) once none does. ``flag`` names the option
    in errors (``inputs=`` from ``eng.datalog``, which never replaces an input)."""
    from .engine.session import InputSession
    if isinstance(obj, InputSession):
        if obj.dropped:
            raise UsageError(f"{flag}: {var} is input {obj.name!r}, which was dropped; make it again "
                             f"(kp.engine().input(...))")
        if eng.inputs().get(obj.name) is not obj:
            if obj.engine_closed:  # (the kernel's engine before %dataflow config --restart, say)
                raise UsageError(f"{flag}: {var} is input {obj.name!r} of an engine that was closed (as the "
                                 f"kernel's is by %dataflow config --restart or %unload_ext kpgnb), its rows gone "
                                 f"with it; make it again in the kernel's engine (kp.engine().input(...))")
            raise UsageError(f"{flag}: {var} is an input of another engine; use kp.engine().input(...)")
        return obj.name, None
    from .engine.view import View
    if isinstance(obj, View):
        gone = view_gone(eng, obj)
        if gone is not None:  # (no export of it can be read: the advice below cannot work)
            raise UsageError(f"{flag}: {var} is a view {gone}")
        same = view_export(eng, obj)
        if same is not None:
            how = f"inputs={{{var!r}: {same!r}}}" if flag == "inputs=" else f"df.use({same!r})"
            raise UsageError(f"{flag}: {var} is a view; its dataflow exports it as {same!r}: read that "
                             f"arrangement ({how})")
        raise UsageError(f"{flag}: {var} is a view; export the arrangement in its dataflow "
                         f"(.export('name')) and import it here with df.use('name')")
    kind = _frame_kind(obj)
    if kind is None and isinstance(obj, dict):  # (say what keeps it from being a dict of arrays)
        bad = next((k for k in obj if not isinstance(k, str)), None)
        raise ArgumentTypeError(f"{flag}: {var} is a dict with no columns; a dict of arrays maps column names to "
                                f"arrays" if not obj else
                                f"{flag}: {var} is a dict keyed by {bad!r} of type {type(bad).__name__}; a dict of "
                                f"arrays maps column names (str) to arrays")
    if kind is None:
        raise ArgumentTypeError(f"{flag}: {var} is a {type(obj).__name__}; expected a pandas or Spark DataFrame, "
                         f"an Arrow table, a dict of arrays or an input session")
    sources = _loaded.setdefault(eng, {})
    existing = eng.inputs().get(var)
    if existing is None:
        sources.pop(var, None)  # dropped since
    else:
        src = sources.get(var)
        if src is not None and src.session() is not existing:  # (dropped, and the name made again otherwise)
            sources.pop(var, None)
            src = None
        if src is not None and src.is_(obj):
            return var, None
        readers = _readers(eng, var)
        if src is not None and not readers and flag != "inputs=":
            # loaded by a cell from an earlier value of the variable (before %reset, say) and read by no
            # installed dataflow any more (their cells dropped): released, and this value loaded instead
            try:
                eng.drop_input(var)
            except KpgnbError:  # (a dataflow reading it was installed meanwhile: refused below)
                readers = _readers(eng, var)
            else:
                sources.pop(var, None)
                print(f"input {var!r}: the rows loaded from an earlier value of {var!r} are released (no "
                      f"dataflow reads them any more); loading its value now")
        if var in eng.inputs():
            _refuse_existing(eng, var, flag, src, readers)
    try:
        if kind in ("spark", "arrow"):  # Arrow all the way: strings dictionary-encoded, interned once
            from . import spark
            session = spark.input_from(eng, var, obj, advance=False)
        else:
            columns, dtypes = _schema_of(obj, kind)
            session = eng.input(var, columns, dtypes, rows=obj)
    except KpgnbError as e:  # (a cell may load several frames: the error says which one is wrong)
        raise _naming(e, f"inputs={{{var!r}: ...}}" if flag == "inputs=" else f"{flag}: {var}") from e.__cause__
    sources[var] = _Source(obj, session, for_program=flag == "inputs=")
    return var, session


def loaded_for_program(eng, name: str) -> bool:
    """Whether input ``name`` is one ``input_for`` loaded from a DataFrame for a program
    (``eng.datalog(inputs={...: frame})``), not for a notebook cell: only those may programs own."""
    src = _loaded.get(eng, {}).get(name)
    if src is None or src.session() is not _inputs_of(eng).get(name):
        return False
    return src.for_program


def _naming(error: KpgnbError, prefix: str) -> KpgnbError:
    """``error`` (its class, cause and notes) with its message prefixed by ``prefix``: the variable (or
    predicate) whose value could not be loaded."""
    try:
        named = type(error)(f"{prefix}: {error}")
    except Exception:  # noqa: BLE001 - a class taking other arguments: a note instead
        error.add_note(f"(loading {prefix})")
        return error
    for note in getattr(error, "__notes__", ()):
        named.add_note(note)
    return named


def view_gone(eng, view) -> str | None:
    """Why ``view`` cannot be read by a dataflow of ``eng`` whatever it exports (its engine closed, another
    engine's, its dataflow gone), as the end of "NAME is a view ...", or None."""
    if view.engine is not eng:
        if view.engine.closed:  # (the kernel's engine before %dataflow config --restart, say)
            return ("of an engine that was closed (as the kernel's is by %dataflow config --restart or "
                    "%unload_ext kpgnb), its rows gone with it; run the cell that made it again, in the kernel's "
                    "engine")
        return "of another engine (not the kernel's)"
    if view.released:
        return (f"of dataflow {view.dataflow!r}, which is gone (dropped, failed or cancelled), its rows with it; "
                f"run the cell that made it again")
    return None


def view_export(eng, view) -> str | None:
    """The name under which ``view``'s dataflow exports the view's arrangement itself (a Datalog relation's
    view: ``NAME.pred``; a ``%%dataflow`` view: an export of the view's own name, or of another name), or
    None. An export is the view's only where it is the very arrangement the view reads (its trace): a
    dataflow exporting another collection under the view's name does not export the view."""
    try:
        trace = view.live_trace()
        catalog = eng.snapshot().catalog
    except KpgnbError:  # (a closed engine)
        return None
    if trace is None:  # (released: its dataflow dropped, failed or cancelled)
        return None
    own = (view.name, f"{view.dataflow}.{view.name}")
    same = sorted((e not in own, e) for e, entry in catalog.items()
                  if entry.dataflow == view.dataflow and not entry.dropped and entry.live_trace() is trace)
    return same[0][1] if same else None


def _readers(eng, name: str) -> list:
    """The installed dataflows that read input ``name`` (also replaced or dropped ones still kept)."""
    try:
        snap = eng.snapshot()
    except KpgnbError:
        return []
    return sorted({info.name for info in [*snap.dataflows.values(), *snap.retired.values()]
                   if name in info.sources})


def _refuse_existing(eng, var: str, flag: str, src, readers: list):
    """An input named ``var`` exists that is not the value given: UsageError saying what to do."""
    if flag == "inputs=":  # eng.datalog: the input is named after the predicate
        raise UsageError(f"inputs=: an engine input named {var!r} exists already"
                         + (" (loaded from another DataFrame)" if src is not None else "")
                         + f"; bind the predicate to it by name (inputs={{{var!r}: {var!r}}}), or drop it "
                         f"first (eng.drop_input({var!r}))")
    names = [r for r in readers if r in eng.dataflows()]
    read = ""
    if src is not None and names:  # (once nothing reads it, a cell run loads the new value)
        read = (f" and read by dataflow{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}: once "
                f"{'they are' if len(names) > 1 else 'it is'} dropped (%dataflow drop {names[0]}) this cell "
                f"loads the new value")
    raise UsageError(f"{flag}: an engine input named {var!r} exists already"
                     + (f", loaded from an earlier value of the variable{read}" if src is not None else "")
                     + f". Change it through kp.input({var!r}).insert/remove, or load this value under "
                     f"another name")


def seal_loaded(created: list):
    """Seal the rows of the inputs a cell loaded as epoch 0, so its dataflow computes them (not one the
    cell's body advanced, closed or dropped itself: its rows are sealed already)."""
    for session in created:
        if not session.dropped and not session.closed and session.epoch < 1:
            session.advance_to(1)


class CellNumber:
    """The number IPython shows for the cell being run (``In[n]``): ``shell.execution_count`` is n + 1
    while a cell kept in history runs (IPython counts it before running it) and n otherwise; IPython's
    ``pre_execute`` (every cell) and ``pre_run_cell`` (not silent ones) events tell which (the extension
    registers them, and ``post_run_cell``). ``raw`` is the text of the cell being run as the user wrote it
    (None for a silent one), for ``cell_source``.

    A cell may run code as a cell of its own while it runs: ``%%capture`` (and ``%%timeit``-like magics,
    or user code calling ``shell.run_cell``) runs its body with ``shell.run_cell``, whose events fire
    again. Such a nested run that is not kept in history has no number of its own: the cell the user sees
    is still the outer one, so its number and text stay (a nested run kept in history is a cell of its own
    and counts until it ends). Each ``pre_run_cell`` is paired with its ``post_run_cell`` by the execution
    info both carry (IPython fires ``post_run_cell`` also for an empty cell, which had no ``pre_run_cell``)."""

    def __init__(self):
        self.stored = False
        self.raw = None
        self._running = []   # (info, stored, raw before it) of each non-silent cell running, outermost first

    def reset(self):
        """Forget the cells running (the extension is loaded or unloaded: events of the cell doing it
        are not all seen)."""
        self._running.clear()

    def pre_execute(self):
        if not self._running:  # (a silent run inside a cell is not the cell the user sees)
            self.stored = False
            self.raw = None

    def pre_run_cell(self, info):
        stored = bool(getattr(info, "store_history", False))
        self._running.append((info, self.stored, self.raw))
        if len(self._running) > 1 and not stored:
            return  # run by the cell the user sees, which it stays
        self.stored = stored
        raw = getattr(info, "raw_cell", None)
        self.raw = raw if isinstance(raw, str) else None

    def post_run_cell(self, result=None):
        info = getattr(result, "info", None)
        at = next((i for i in range(len(self._running) - 1, -1, -1) if self._running[i][0] is info), None)
        if at is None:
            if result is not None or not self._running:
                return  # (an empty cell: no pre_run_cell; or one that began before the extension was loaded)
            at = len(self._running) - 1  # (a kernel's run that raised reports no result: the latest cell)
        _, stored, raw = self._running[at]
        del self._running[at:]
        if self._running:  # a nested run ended: the cell running it is the one being run again
            self.stored, self.raw = stored, raw

    def of(self, shell) -> int:
        return shell.execution_count - (1 if self.stored else 0)


CELL_NUMBER = CellNumber()  # (one per process, as IPython's shell is)


def cell_source(magic: str, line: str, body: str) -> tuple:
    """(the cell's text as the user sees it, the number of its lines before ``body``), so that a failure
    names the line of the cell itself: the raw cell IPython runs, where ``body`` is its end after a
    ``%%magic`` line (the cell starts with it, or with other cell magics wrapping it, such as ``%%time``).
    Where the raw cell is not known or does not end with the body (a cell run silently, or the magic run
    from code), the ``%%magic`` line and the body, the body from line 2."""
    raw = CELL_NUMBER.raw
    if raw and body:
        tail = body
        if not raw.endswith(tail) and tail.endswith("\n") and raw.endswith(tail[:-1]):
            tail = tail[:-1]  # (IPython ends the transformed cell with a newline)
        if tail and raw.endswith(tail):
            head = raw[:len(raw) - len(tail)]
            magic_line = head.rstrip("\r\n").rsplit("\n", 1)[-1].strip()
            if head.endswith(("\n", "\r")) and magic_line.startswith(f"%%{magic}") \
                    and magic_line[len(magic) + 2:][:1] in ("", " ", "\t"):
                return raw, len(re.findall(r"\r\n|\r|\n", head))  # (the line ends Python counts)
    return f"%%{magic} {line}\n{body}", 1


def drop_loaded(eng, created: list):
    """Undo the inputs a failed cell loaded (the dataflow reading them is gone already, or was never
    installed). The drops are queued, not waited for: a cell interrupted while the engine is busy returns
    at once, and a second Ctrl-C cannot leave an input behind."""
    for session in created:
        _loaded.get(eng, {}).pop(session.name, None)
        try:
            eng.drop_input(session.name, wait=False)
        except KpgnbError:
            pass


def _inputs_of(eng) -> dict:
    try:
        return eng.inputs()
    except KpgnbError:  # (a closed engine)
        return {}


def _drop_made_by_body(eng, made: list):
    """Drop the dataflows a failed cell installed (``(name, serial)``, by its body or its own), the latest
    first (a reader before what it reads), those still installed as that install: the cell installs nothing."""
    try:
        now = {name: info.serial for name, info in eng.snapshot().dataflows.items()}
    except KpgnbError:
        return
    for name, serial in reversed(made):
        if now.get(name) == serial:
            try:
                eng.drop(name)
            except KpgnbError:
                pass


def _made_by_body(eng, made: list) -> list:
    """Of the inputs the cell's body created (``made``: ``eng.recording_inputs``, this thread's only), those
    still there that no installed dataflow reads, for a failed cell to drop again."""
    try:
        snap = eng.snapshot()
        read = {src for info in [*snap.dataflows.values(), *snap.retired.values()] for src in info.sources}
    except KpgnbError:
        return []
    now = _inputs_of(eng)
    return [sess for sess in made if now.get(sess.name) is sess and sess.name not in read]


def wrap(error: BaseException, note: str | None = None) -> CellError | CellInterrupt:
    """``cellerror.wrap``: a CellError, or a CellInterrupt for a KeyboardInterrupt (Ctrl-C in the cell's
    body, or while the cell loads its inputs)."""
    return _wrap(error, note)


def _frame_kind(obj) -> str | None:
    if hasattr(obj, "toArrow") and hasattr(obj, "schema"):
        return "spark"
    if hasattr(obj, "column_names") and hasattr(obj, "column"):
        return "arrow"
    if hasattr(obj, "columns") and hasattr(obj, "iloc"):
        return "pandas"
    if isinstance(obj, dict) and obj and all(isinstance(k, str) for k in obj):
        return "dict"
    return None


def _schema_of(obj, kind: str):
    """Column names and dtypes of a pandas frame or a dict of arrays. A pandas extension column (Int64,
    boolean, string, Float64) keeps its type, so that a missing value in it is refused when the rows are
    inserted instead of turning the column into floats."""
    import numpy as np

    from .engine.columns import as_column, infer_dtype
    if kind == "pandas":
        names = list(obj.columns)
        for c in names:
            if not isinstance(c, str):
                raise SchemaError(f"column name {c!r} is of type {type(c).__name__}; engine columns are named by "
                                  f"strings (rename it, e.g. frame.rename(columns=str))")
        dup = sorted({c for c in names if names.count(c) > 1})
        if dup:
            raise SchemaError(f"duplicate column name {dup[0]!r} in the DataFrame")
        cols = {c: obj[c] for c in names}
    else:
        cols = {n: as_column(v) for n, v in obj.items()}
    dtypes = {}
    for n, col in cols.items():
        ext = None
        if kind == "pandas" and not isinstance(col.dtype, np.dtype):
            if getattr(col.dtype, "name", "") == "category":  # the categories' type, not the codes' object
                col = col.cat.categories.to_series()
            else:
                ext = _EXTENSION_KINDS.get(col.dtype.kind)
                if ext == "str" and not str(col.dtype).startswith("string"):
                    ext = None  # Period, Interval: objects that are not strings (refused by what they are)
        try:
            dtypes[n] = ext or infer_dtype(col.to_numpy() if kind == "pandas" else col)
        except KpgnbError as e:
            raise type(e)(f"column {n!r}: {e}") from None
    return list(cols), dtypes


_EXTENSION_KINDS = {"i": "int64", "u": "int64", "b": "bool", "f": "float64", "O": "str"}


# -- the cell ---------------------------------------------------------------------------------------
def run(shell, eng, spec: CellSpec, line: str, body: str, warmer=None) -> DataflowHandle:
    """Run a ``%%dataflow`` cell; raises CellError (shown at the cell's line) when it fails."""
    ns = shell.user_ns
    created: list = []   # inputs this cell loaded: dropped again if it fails
    try:
        if not spec.replace and spec.name in eng.dataflows():
            raise UsageError(f"a dataflow named {spec.name!r} is installed already: run the cell as "
                             f"%%dataflow {spec.name} --replace to swap it (arrangements that other dataflows "
                             f"read stay theirs), or %dataflow drop {spec.name} first")
        if "df" in spec.inputs:
            raise UsageError(f"--inputs: df is the cell's dataflow builder; bind the frame under another name "
                             f"(--inputs {spec.inputs['df'] if spec.inputs['df'] != 'df' else 'rows'}=df reads it "
                             f"as that collection)")
        missing = [v for v in spec.inputs.values() if v not in ns]
        if missing:
            raise UsageError(f"--inputs: no variable named {missing[0]!r} in the notebook")
        sources = {}
        for name, var in spec.inputs.items():
            sources[name], session = input_for(eng, var, ns[var])
            if session is not None:
                created.append(session)
        text, lead = cell_source("dataflow", line, body)
        filename = shell.compile.cache(text, CELL_NUMBER.of(shell))
        try:
            source = _transform(shell, body)
            # the body starts after the cell's first ``lead`` lines (the magic's, and those of cell magics
            # wrapping it: %%time); IPython drops leading blank lines, which must still count
            code = compile("\n" * (lead + _blank_lead(body) - _blank_lead(source)) + source, filename, "exec")
        except SyntaxError as e:
            raise CellError(e, None) from None
    except BaseException as e:
        drop_loaded(eng, created)
        if isinstance(e, REPORTS):
            raise
        raise wrap(e) from None

    replaced = spec.replace and spec.name in eng.dataflows()
    builder = eng.dataflow(spec.name, replace=spec.replace)
    # the body runs in the notebook's namespace (functions it defines see the notebook's later values, as
    # any cell's do); if the cell fails, the names it binds are put back as they were (not the others,
    # which another thread, a subscription's callback say, may set meanwhile); the names it is given (df,
    # its inputs) are the notebook's only while the body runs, as running dataflows' functions may read them
    saved = dict(ns)
    bound = _names_bound(source, filename)
    injected = {"df": builder}
    # the inputs the body itself creates (kp.engine().input(...)) and the dataflows it installs
    # (kp.engine().dataflow(...)) go again if the cell fails: this thread's, not another's made meanwhile
    with eng.recording_installs() as made, eng.recording_inputs() as inputs_made:
        try:
            with builder:
                for name, src in sources.items():
                    injected[name] = builder.input(src)
                ns.update(injected)
                try:
                    exec(code, ns)  # noqa: S102 - the cell's own code
                finally:
                    _unbind(ns, saved, injected)
                if spec.output is not None and spec.output in builder.views:  # (refused before the install)
                    raise UsageError(output_clash(spec.output, "view", "the dataflow's handle"))
                t0 = time.perf_counter()
        except BaseException as e:
            _restore(ns, saved, bound)
            _drop_made_by_body(eng, made)
            drop_loaded(eng, created + _made_by_body(eng, inputs_made))
            raise wrap(e, f"nothing was installed: dataflow {spec.name!r} is as it was") from None
        handle = DataflowHandle(eng, spec.name, builder.views, sorted(builder.exports), time.perf_counter() - t0,
                                replaced)
        try:
            try:
                seal_loaded(created)
            except KpgnbError as e:  # (the engine closed meanwhile, say): the cell's dataflow goes again
                _drop_made_by_body(eng, made)
                raise wrap(e, f"nothing was installed: dataflow {spec.name!r} could not start") from None
            if spec.wait:
                wait(eng, handle, warmer, first=True)
        except REPORTS as e:
            if isinstance(e, CellInterrupt):  # installed, still computing: bound like a success
                _bind(ns, handle, spec.output, set(spec.inputs.values()))
            else:
                _restore(ns, saved, bound)
                _drop_made_by_body(eng, made)  # (its own dataflow was dropped again; those its body made)
                drop_loaded(eng, created + _made_by_body(eng, inputs_made))
            raise
        _bind(ns, handle, spec.output, set(spec.inputs.values()))
        return handle


_DYNAMIC = {"get_ipython", "exec", "eval", "globals", "locals", "vars", "__import__"}


def _names_bound(source: str, filename: str) -> set | None:
    """The notebook names the cell's own code binds: assigned, deleted, imported or defined at its top
    level, or declared global and bound in a function or class it defines. None where the code does not
    tell: ``from m import *``, a magic in the body (``%time x = ...`` runs code of its own), ``exec``,
    ``globals()`` and their kind. (A function from an earlier cell that sets globals is not read.)"""
    try:
        tree = ast.parse(source, filename)
        top = symtable.symtable(source, filename, "exec")
    except SyntaxError:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in _DYNAMIC or \
                isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names):
            return None
    names = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    tables = list(top.get_children())
    while tables:
        t = tables.pop()
        names.update(s.get_name() for s in t.get_symbols()
                     if s.is_declared_global() and (s.is_assigned() or s.is_imported() or s.is_namespace()))
        tables.extend(t.get_children())
    return names


def _restore(ns: dict, saved: dict, names: set | None):
    """The ``names`` the cell bound (all names when None) as they were before it: added ones removed,
    changed or deleted ones back."""
    for k in set(ns) | set(saved) if names is None else names:
        if k in saved:
            if ns.get(k, _UNSET) is not saved[k]:
                ns[k] = saved[k]
        else:
            ns.pop(k, None)


def _unbind(ns: dict, saved: dict, injected: dict):
    """The names the cell was given (``df``, its inputs) back as they were (README: the notebook's own once
    the body has run), also where the body rebound or deleted them (``edges = edges.filter(...)``: a
    collection of the builder, of no use once the cell ends, and the frame of that name the cell reads when
    run again). Only a view the body bound under such a name stays (``edges = e.view("edges")``): it is
    live after the cell, as the views bound by their own names are."""
    from .engine.view import View
    for k in injected:
        if isinstance(ns.get(k), View):
            continue
        if k in saved:
            if ns.get(k, _UNSET) is not saved[k]:
                ns[k] = saved[k]
        else:
            ns.pop(k, None)


def _bind(ns: dict, handle: DataflowHandle, output: str | None, reads=()):
    """After the cell: its views by name, then ``-o VAR``. A view is not bound over a module, function or
    class of the notebook's (``kp``, ``pd``), nor under a name that is not an identifier; a line says so."""
    bind_views(ns, handle.views)
    bind_output(ns, output, handle, reads)


def bind_output(ns: dict, output: str | None, value, reads=()):
    """``-o VAR``: ``value`` (the handle, the program) bound as VAR, except over a variable the cell's
    --inputs read (bound there, the same cell could not run again) or a module, function or class of the
    notebook's (``pd``); a line says so, as for views."""
    import types
    from .engine.view import View
    if not output:
        return
    held = ns.get(output)
    if output in reads:
        print(f"-o {output}: not bound: the notebook's {output!r} is what the cell reads (--inputs); pick "
              f"another name for -o")
    elif isinstance(held, types.ModuleType) or (callable(held) and not isinstance(held, View)):
        print(f"-o {output}: not bound: the notebook's {output!r} is a {type(held).__name__}; pick another "
              f"name for -o")
    else:
        ns[output] = value


def output_clash(output: str, what: str, holder: str) -> str:
    """The error for ``-o VAR`` naming a view the cell binds itself (``holder`` would take its place)."""
    return (f"-o {output}: the cell binds its {what} {output!r} in the notebook as {output}, and -o {output} would "
            f"put {holder} there instead. Pick another name for -o (VAR[{output!r}] then reads the {what})")


def notebook_name(name: str) -> bool:
    """Whether a cell can read a variable of this name: an identifier that is not a keyword."""
    import keyword
    return name.isidentifier() and not keyword.iskeyword(name)


_HISTORY = re.compile(r"_{1,3}|_i{1,3}|_i?\d+|In|Out|_oh|_ih|_dh")


def _ipython_owned(name: str) -> bool:
    """Names IPython writes or reads itself: the input/output history (``In``, ``Out``, ``_oh``, ``_``,
    ``_i3``...: written after every cell, so a view there breaks the next one), dunders (``__name__`` is the
    module classes a cell defines belong to) and what the shell hides from ``%who``."""
    if _HISTORY.fullmatch(name) or (name.startswith("__") and name.endswith("__")):
        return True
    from IPython import get_ipython
    shell = get_ipython()
    return shell is not None and name in getattr(shell, "user_ns_hidden", {})


def bind_views(ns: dict, views: dict):
    """Views into the notebook by name (also the ``%%datalog`` cell's relations)."""
    import builtins
    import types
    from .engine.view import View
    for vname, view in views.items():
        held = ns.get(vname)
        if not notebook_name(vname):
            print(f"view {vname!r} has no notebook name (not an identifier, or a Python keyword): run the cell "
                  f"with -o VAR and read it as VAR[{vname!r}]")
        elif isinstance(held, types.ModuleType) or (callable(held) and not isinstance(held, View)):
            # (a module, or anything callable: functions, classes, ufuncs, numba functions, bound methods)
            print(f"view {vname!r} is not bound: the notebook's {vname!r} is a {type(held).__name__}; run "
                  f"the cell with -o VAR and read it as VAR[{vname!r}]")
        elif vname not in ns and hasattr(builtins, vname):  # (len, print, sum, input...: not in user_ns)
            print(f"view {vname!r} is not bound: it would hide Python's builtin {vname!r}; run the cell with "
                  f"-o VAR and read it as VAR[{vname!r}]")
        elif _ipython_owned(vname):
            print(f"view {vname!r} is not bound: {vname!r} is IPython's own (its history, or the notebook "
                  f"module's identity); run the cell with -o VAR and read it as VAR[{vname!r}]")
        else:
            ns[vname] = view


_UNSET = object()


def wait(eng, handle: DataflowHandle, warmer=None, first: bool = False, deadline: float | None = None):
    """Wait for a dataflow's views (Ctrl-C stops waiting, not the dataflow; TimeoutError once
    ``time.monotonic()`` passes ``deadline``). On its first computation (``first``) a failure drops it
    again, so that the cell installs nothing."""
    progress = _Progress(handle.name, warmer)
    try:
        # the epochs to reach are those the inputs are at now, fixed once as eng.wait fixes them: each
        # eng.wait below (short, so that Ctrl-C and the progress line get their turn) would read them again,
        # and never return while a feeder keeps advancing the inputs faster than the dataflow catches up
        goal = _goal(eng, handle.name)
        while True:
            step = WAIT_STEP_S if deadline is None else max(0.0, min(WAIT_STEP_S, deadline - time.monotonic()))
            try:  # (a deadline already past still looks once: an up-to-date dataflow is so)
                eng.wait(handle.name, timeout=step, cancel_on_interrupt=False)
                break
            except TimeoutError:
                if _reached(eng, handle.name, goal):  # (what it failed with, if it did, eng.wait raised)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    progress.end(stopped=f"timed out waiting: {_position(eng, handle.name)}")
                    raise
                progress.show(eng)
    except KeyboardInterrupt:
        progress.end(stopped=f"stopped waiting: {_position(eng, handle.name)}")
        raise CellInterrupt(KeyboardInterrupt(f"stopped waiting: {how_far(eng, handle.name)}"), None) from None
    except (DataflowError, KpgnbError) as e:
        progress.end(f"{type(e).__name__}: {e}")
        if first:
            try:
                eng.drop(handle.name)
            except KpgnbError:
                pass
            raise wrap(e, f"nothing was installed: dataflow {handle.name!r} failed on its first computation"
                          + (" (the dataflow it replaced is gone; exports that others read are kept)"
                             if handle.replaced else "")) from None
        raise wrap(e) from None
    progress.end()


def _goal(eng, name: str):
    """(the install, {None: the epoch dataflow ``name`` must reach, view: the epoch that view must reach})
    for a wait beginning now, as ``eng.wait(name)`` fixes them: the least epoch its open inputs (those
    each view reads) are at; None for a view whose inputs are all closed (it must complete). None when
    ``name`` is not installed."""
    try:
        snap = eng.snapshot()
    except KpgnbError:
        return None
    info = snap.dataflows.get(name) or snap.retired.get(name)
    if info is None:
        return None
    inputs = _inputs_of(eng)

    def least(sources):
        epochs = [inputs[s].epoch for s in sources if s in inputs and not inputs[s].closed]
        return min(epochs) if epochs else None
    return info.serial, {None: least(info.sources), **{v: least(srcs) for v, srcs in info.view_sources}}


def _reached(eng, name: str, goal) -> bool:
    """Whether dataflow ``name`` (the same install) and its views have reached ``goal`` (``_goal``) in the
    latest published snapshot, without a failure."""
    if goal is None:
        return False
    from .engine.scope import epoch_of
    snap = eng.snapshot()
    info = snap.dataflows.get(name) or snap.retired.get(name)
    if info is None or info.serial != goal[0] or info.error is not None:
        return False
    if any(i.failure is not None for s, i in snap.inputs.items() if s in info.sources):
        return False

    def past(frontier, epoch) -> bool:
        e = epoch_of(frontier)
        return e is None or (epoch is not None and e >= epoch)
    uppers = dict(info.view_uppers)
    return past(info.frontier, goal[1][None]) and all(past(uppers[v], e) for v, e in goal[1].items()
                                                      if v is not None and v in uppers)


def _epochs(eng, name: str):
    """(the dataflow's first epoch not final or None when complete, the epoch its inputs are at or None),
    or None when it is not installed."""
    snap = eng.snapshot()
    info = snap.dataflows.get(name) or snap.retired.get(name)  # (NAME~k: kept while its exports are read)
    if info is None:
        return None
    from .engine.scope import epoch_of
    inputs = eng.inputs()
    goal = [inputs[s].epoch for s in sorted(info.sources) if s in inputs and not inputs[s].closed]
    return epoch_of(info.frontier), (min(goal) if goal else None)


def _position(eng, name: str) -> str:
    """How far a dataflow got, e.g. "final before epoch 3 of 10" (its inputs are at epoch 10)."""
    where = _epochs(eng, name)
    if where is None:
        return "not installed"
    at, goal = where
    if at is None:
        return "complete"
    return f"final before epoch {at}" + (f" of {goal}" if goal is not None else "")


def how_far(eng, name: str) -> str:
    return (f"dataflow {name!r} is still installed and computing in the background ({_position(eng, name)}); "
            f"%dataflow wait {name} waits again, %dataflow drop {name} removes it")


class _Progress:
    """While a wait lasts more than PROGRESS_AFTER_S (KPGNB_PROGRESS=0: never): in a kernel with widgets, a
    ``kpgnb.widgets.Progress`` bar shown in the cell's output (epochs done of those the inputs were
    advanced to); elsewhere (a terminal, IPython's shell) a line on stderr, refreshed as it waits (every
    WAIT_STEP_S)."""

    def __init__(self, name: str, warmer):
        self.name = name
        self.warmer = warmer
        self.start = time.perf_counter()
        self.shown = False
        self.bar = None        # the widget, once shown
        self.first = None      # the dataflow's epoch when the bar appeared
        self.enabled = os.environ.get("KPGNB_PROGRESS", "1") not in ("0", "", "false", "no")

    def show(self, eng):
        elapsed = time.perf_counter() - self.start
        if not self.enabled or elapsed < PROGRESS_AFTER_S:
            return
        text = f"computing dataflow {self.name!r}: {_position(eng, self.name)}"
        compiling = ""
        if self.warmer is not None and not self.warmer.done:
            done, total, current = self.warmer.progress()
            compiling = f"compiling kernels ({done}/{total}{', ' + current if current else ''})"
        if not self.shown and self.bar is None:
            self.bar = _progress_widget(self.name)
        if self.bar is not None:
            at, goal = _epochs(eng, self.name) or (None, None)
            if self.first is None:
                self.first = at or 0
            note = _position(eng, self.name) + (f"; {compiling}" if compiling else "")
            if at is not None and goal is not None and goal > self.first:
                self.bar.update(max(0, at - self.first), goal - self.first, note=note)
            else:
                self.bar.update(note=note)
            return
        if compiling:
            text += f"; {compiling}"
        sys.stderr.write(f"\r{text} · {elapsed:.0f} s ")
        sys.stderr.flush()
        self.shown = True

    def end(self, error: str | None = None, stopped: str | None = None):
        """The wait ended: caught up, failed (``error``), or stopped waiting with the dataflow still
        computing (``stopped``: the bar keeps where it got to and says why it stopped moving)."""
        if self.bar is not None:
            if stopped is not None:
                self.bar.update(note=stopped)
            elif error is not None:
                self.bar.fail(error)
            else:
                self.bar.finish("up to date")
            self.bar = None
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.shown = False


def _progress_widget(name: str):
    """A progress bar displayed in the running cell's output, in a kernel with ipywidgets; else None."""
    try:
        from IPython import get_ipython
        ip = get_ipython()
        if ip is None or getattr(ip, "kernel", None) is None:
            return None
        from IPython.display import display
        from .widgets import Progress
        bar = Progress(f"computing dataflow {name!r}", unit="epochs")
        display(bar)
        return bar
    except Exception:  # noqa: BLE001 - no widgets: the stderr line instead
        return None


def _transform(shell, body: str) -> str:
    """``shell.transform_cell(body)`` keeping the body's line numbers: IPython joins a magic, shell escape
    or help line continued with backslashes into one line, which moved every later line (and so the line a
    failure points at) up; here each joined line is followed by as many blank lines as it took."""
    manager = shell.input_transformer_manager
    padded = copy.copy(manager)
    padded.token_transformers = [_keeping_lines(t) for t in manager.token_transformers]
    shell.input_transformer_manager = padded  # (the cell runs on the shell's thread, which alone transforms)
    try:
        return shell.transform_cell(body)
    finally:
        shell.input_transformer_manager = manager


def _keeping_lines(transformer: type) -> type:
    """An IPython token transformer whose rewrite keeps the number of physical lines."""
    class KeepingLines(transformer):
        def transform(self, lines):
            out = super().transform(lines)
            at = self.start_line + 1
            return out[:at] + ["\n"] * max(0, len(lines) - len(out)) + out[at:]
    KeepingLines.__name__ = transformer.__name__
    return KeepingLines


def _blank_lead(text: str) -> int:
    """The number of blank lines ``text`` starts with."""
    n = 0
    for line in text.split("\n"):
        if line.strip():
            break
        n += 1
    return n
