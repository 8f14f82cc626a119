"""One ``%%dataflow NAME`` cell, start to end: its inputs bound, its body run with the builder as ``df``,
the dataflow installed atomically, its first results waited for, its views bound in the notebook.

A cell that fails at any of these steps leaves the engine as it was: the body's builder is discarded
(nothing installed), and a dataflow whose first computation fails (a user function that raises on its
first batch) is dropped again. Inputs the cell created from DataFrames are kept (they are data the user
loaded, and a corrected cell reuses them).
"""
from __future__ import annotations

import os
import sys
import time
import weakref
from dataclasses import dataclass, field

from .cellerror import CellError, wrap
from .engine.errors import DataflowError, KpgnbError, UsageError
from .handle import DataflowHandle

PROGRESS_AFTER_S = 2.0   # a wait longer than this shows a progress line (stderr), refreshed each second


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
        if name in out:
            raise UsageError(f"--inputs names {name!r} twice")
        out[name] = var
    return out


# -- inputs from the notebook's namespace ---------------------------------------------------------------
_loaded: dict = {}   # (id(engine), input name) -> weak (or strong) reference to the object it was loaded from


def _ref(obj):
    try:
        return weakref.ref(obj)
    except TypeError:   # dicts: keep the object (its arrays are the user's anyway)
        return lambda: obj


def input_for(eng, var: str, obj) -> str:
    """The engine input a namespace value stands for: an InputSession is itself; a DataFrame (pandas,
    Spark, Arrow table, dict of arrays) becomes an input named after its variable, loaded once and
    kept, so later cells reuse (and may change) it."""
    from .engine.session import InputSession
    if isinstance(obj, InputSession):
        if eng.inputs().get(obj.name) is not obj:
            raise UsageError(f"--inputs: {var} is an input of another engine; use kp.engine().input(...)")
        return obj.name
    from .engine.view import View
    if isinstance(obj, View):
        raise UsageError(f"--inputs: {var} is a view; export the arrangement in its dataflow "
                         f"(.export('name')) and import it here with df.use('name')")
    kind = _frame_kind(obj)
    if kind is None:
        raise UsageError(f"--inputs: {var} is a {type(obj).__name__}; expected a pandas or Spark DataFrame, "
                         f"an Arrow table, a dict of arrays or an input session")
    key = (id(eng), var)
    existing = eng.inputs().get(var)
    if existing is not None:
        ref = _loaded.get(key)
        if ref is not None and ref() is obj:
            return var
        raise UsageError(f"--inputs: an engine input named {var!r} exists already"
                         + (", loaded from an earlier value of the variable" if ref is not None else "")
                         + f". Change it through kp.input({var!r}).insert/remove, or load this value under "
                         f"another name")
    if kind in ("spark", "arrow"):  # Arrow all the way: strings dictionary-encoded, interned once
        from . import spark
        spark.input_from(eng, var, obj)
    else:
        columns, dtypes = _schema_of(obj, kind)
        eng.input(var, columns, dtypes, rows=obj).advance_to(1)
    _loaded[key] = _ref(obj)
    return var


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
    """Column names and dtypes of a pandas frame, Arrow table or dict of arrays."""
    import numpy as np

    from .engine.columns import infer_dtype
    if kind == "arrow":
        cols = {n: obj.column(n).to_numpy(zero_copy_only=False) for n in obj.column_names}
    elif kind == "pandas":
        cols = {str(c): obj[c].to_numpy() for c in obj.columns}
    else:
        cols = {n: np.asarray(v) for n, v in obj.items()}
    dtypes = {}
    for n, arr in cols.items():
        try:
            dtypes[n] = infer_dtype(arr)
        except KpgnbError as e:
            raise type(e)(f"column {n!r}: {e}") from None
    return list(cols), dtypes


# -- the cell ---------------------------------------------------------------------------------------
def run(shell, eng, spec: CellSpec, line: str, body: str, warmer=None) -> DataflowHandle:
    """Run a ``%%dataflow`` cell; raises CellError (shown at the cell's line) when it fails."""
    ns = shell.user_ns
    try:
        if not spec.replace and spec.name in eng.dataflows():
            raise UsageError(f"a dataflow named {spec.name!r} is installed already: run the cell as "
                             f"%%dataflow {spec.name} --replace to swap it (arrangements that other dataflows "
                             f"read stay theirs), or %dataflow drop {spec.name} first")
        missing = [v for v in spec.inputs.values() if v not in ns]
        if missing:
            raise UsageError(f"--inputs: no variable named {missing[0]!r} in the notebook")
        sources = {name: input_for(eng, var, ns[var]) for name, var in spec.inputs.items()}
    except Exception as e:  # noqa: BLE001 - reported at the cell
        raise wrap(e) from None

    filename = shell.compile.cache(f"%%dataflow {line}\n{body}", shell.execution_count)
    try:
        code = compile("\n" + shell.transform_cell(body), filename, "exec")
    except SyntaxError as e:
        raise CellError(e, None) from None

    replaced = spec.replace and spec.name in eng.dataflows()
    builder = eng.dataflow(spec.name, replace=spec.replace)
    # the body runs in a copy of the namespace: its assignments reach the notebook only if the cell succeeds
    scope = dict(ns)
    injected = {"df": builder}
    try:
        with builder:
            for name, src in sources.items():
                injected[name] = builder.input(src)
            scope.update(injected)
            exec(code, scope)  # noqa: S102 - the cell's own code
            t0 = time.perf_counter()
    except Exception as e:  # noqa: BLE001 - reported at the cell
        raise wrap(e, f"nothing was installed: dataflow {spec.name!r} is as it was") from None
    handle = DataflowHandle(eng, spec.name, builder.views, sorted(builder.exports), time.perf_counter() - t0,
                            replaced)
    try:
        if spec.wait:
            wait(eng, handle, warmer, first=True)
    except CellError as e:
        if isinstance(e.error, KeyboardInterrupt):  # installed, still computing: bound like a success
            _bind(ns, scope, injected, handle, spec.output)
        raise
    _bind(ns, scope, injected, handle, spec.output)
    return handle


def _bind(ns: dict, scope: dict, injected: dict, handle: DataflowHandle, output: str | None):
    """The cell's own assignments, then its views by name, then ``-o VAR``, into the notebook."""
    for k, v in scope.items():
        if k not in injected and (k not in ns or ns[k] is not v):
            ns[k] = v
    for vname, view in handle.views.items():
        if vname.isidentifier():
            ns[vname] = view
    if output:
        ns[output] = handle


def wait(eng, handle: DataflowHandle, warmer=None, first: bool = False):
    """Wait for a dataflow's views (Ctrl-C stops waiting, not the dataflow). On its first computation
    (``first``) a failure drops it again, so that the cell installs nothing."""
    progress = _Progress(handle.name, warmer)
    try:
        while True:
            try:
                eng.wait(handle.name, timeout=1.0, cancel_on_interrupt=False)
                break
            except TimeoutError:
                progress.show(eng)
    except KeyboardInterrupt:
        progress.end()
        raise CellError(KeyboardInterrupt(f"stopped waiting: {_how_far(eng, handle.name)}"), None) from None
    except (DataflowError, KpgnbError) as e:
        progress.end()
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


def _position(eng, name: str) -> str:
    """How far a dataflow got, e.g. "final before epoch 3 of 10" (its inputs are at epoch 10)."""
    info = eng.snapshot().dataflows.get(name)
    if info is None:
        return "not installed"
    from .engine.scope import epoch_of
    inputs = eng.inputs()
    goal = [inputs[s].epoch for s in sorted(info.sources) if s in inputs and not inputs[s].closed]
    at = epoch_of(info.frontier)
    if at is None:
        return "complete"
    return f"final before epoch {at}" + (f" of {min(goal)}" if goal else "")


def _how_far(eng, name: str) -> str:
    return (f"dataflow {name!r} is still installed and computing in the background ({_position(eng, name)}); "
            f"%dataflow wait {name} waits again, %dataflow drop {name} removes it")


class _Progress:
    """A progress line on stderr while a wait lasts more than PROGRESS_AFTER_S (KPGNB_PROGRESS=0: none)."""

    def __init__(self, name: str, warmer):
        self.name = name
        self.warmer = warmer
        self.start = time.perf_counter()
        self.shown = False
        self.enabled = os.environ.get("KPGNB_PROGRESS", "1") not in ("0", "", "false", "no")

    def show(self, eng):
        elapsed = time.perf_counter() - self.start
        if not self.enabled or elapsed < PROGRESS_AFTER_S:
            return
        text = f"computing dataflow {self.name!r}: {_position(eng, self.name)}"
        if self.warmer is not None and not self.warmer.done:
            done, total, current = self.warmer.progress()
            text += f"; compiling kernels ({done}/{total}{', ' + current if current else ''})"
        sys.stderr.write(f"\r{text} · {elapsed:.0f} s ")
        sys.stderr.flush()
        self.shown = True

    def end(self):
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.shown = False
