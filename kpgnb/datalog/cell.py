"""One ``%%datalog NAME`` cell: the cell is the program. Its ``--inputs`` are bound (DataFrames become
engine inputs named after their variables, as in ``%%dataflow``), the program is installed, its first
results awaited, and every derived relation bound in the notebook as a view. A failing cell installs
nothing and drops the inputs it loaded; a Datalog error points at the cell's own line."""
from __future__ import annotations

import time

from ..cell import (bind_output, bind_views, cell_source, drop_loaded, input_for, output_clash, seal_loaded,
                    view_export, view_gone, wait, wrap)
from ..cellerror import REPORTS, CellError, CellInterrupt
from ..engine.dataflow import no_site
from ..engine.errors import DatalogError, UsageError
from ..engine.view import View
from ..handle import DataflowHandle
from .parser import parse
from .program import Source, install


def run(shell, eng, name: str, inputs: dict, body: str, output: str | None = None, wait_first: bool = True,
        warmer=None, line: str = ""):
    ns = shell.user_ns
    created, bound = [], {}
    try:
        if name in eng.dataflows():
            raise UsageError(f"a dataflow named {name!r} is installed already: %dataflow drop {name} --cascade "
                             f"first, or pick another name")
        if output is not None:  # (-o naming a relation the cell derives: refused before anything is loaded)
            lead = cell_source("datalog", line, body)[1]
            if output in {r.head.pred for r in parse("\n" * lead + body).rules}:
                raise UsageError(output_clash(output, "relation", "the Datalog program"))
        for pred, var in inputs.items():
            if var not in ns:
                raise UsageError(f"--inputs: no variable named {var!r} in the notebook")
            view = ns[var]
            if isinstance(view, View):  # another program's relation (or a view exported by its name)
                export = view_export(eng, view) if view.engine is eng else None
                if export is None:
                    raise UsageError(f"--inputs: {var} is a view {_unreadable(eng, view)}")
                bound[pred] = Source("use", export)
                continue
            bound[pred], session = input_for(eng, var, ns[var])
            if session is not None:
                created.append(session)
        t0 = time.perf_counter()
        # leading newlines: the program's line numbers are the cell's (after the %%datalog line, and those
        # of cell magics wrapping it, %%time say)
        lead = cell_source("datalog", line, body)[1]
        with no_site():  # (its failures name the program's line and column, not IPython's call of the magic)
            prog = install(eng, "\n" * lead + body, inputs=bound, name=name, flag="--inputs")
        install_s = time.perf_counter() - t0
    except DatalogError as e:
        drop_loaded(eng, created)
        raise CellError(e, None) from None
    except BaseException as e:
        drop_loaded(eng, created)
        raise wrap(e, f"nothing was installed: {name!r} is as it was") from None
    seal_loaded(created)
    info = eng.snapshot().dataflows.get(name)  # (its exports: the relations', then its inputs' arrangements)
    exports = [f"{name}.{p}" for p in prog.views]
    exports += [e for e in (info.exports if info is not None else ()) if e not in exports]
    handle = DataflowHandle(eng, name, prog.views, exports, install_s, False)
    if wait_first:
        try:
            wait(eng, handle, warmer, first=True)
        except REPORTS as e:
            if isinstance(e, CellInterrupt):  # installed, still computing: bound like a success
                _bind(ns, prog.views, inputs)
                bind_output(ns, output, prog, set(inputs.values()))
            else:
                if not eng.closed:  # (the cell's error is what it reports, not the drop's on a closed engine)
                    prog.drop()
                drop_loaded(eng, created)
            raise
    _bind(ns, prog.views, inputs)
    bind_output(ns, output, prog, set(inputs.values()))
    return prog, handle


def _bind(ns: dict, views: dict, inputs: dict):
    """``bind_views``, except over a variable the cell's --inputs read (``--inputs edge=tc`` with a relation
    ``tc``): the notebook's frame (or view) stays, so the same cell run again reads what it read."""
    read = set(inputs.values())
    bind_views(ns, {v: view for v, view in views.items() if v not in read})
    for var in sorted(read & set(views)):
        print(f"view {var!r} is not bound: the notebook's {var!r} is what the cell reads (--inputs); run the "
              f"cell with -o VAR and read it as VAR[{var!r}]")


def _unreadable(eng, view) -> str:
    """Why a %%datalog cell cannot read ``view`` (no export of its own arrangement it could ``use``)."""
    gone = view_gone(eng, view)
    if gone is not None:
        return gone
    other = f" ({view.name!r} is exported, but is another arrangement than the view's)" if view.name in eng.catalog() \
        else ""
    return (f"that its dataflow does not export{other}; export the view's own arrangement (the collection it is "
            f"a view of: .export('NAME')) in that dataflow's cell, and this cell reads it")
