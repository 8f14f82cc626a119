"""One ``%%datalog NAME`` cell: the cell is the program. Its ``--inputs`` are bound (DataFrames become
engine inputs named after their variables, as in ``%%dataflow``), the program is installed, its first
results awaited, and every derived relation bound in the notebook as a view. A failing cell installs
nothing and drops the inputs it loaded; a Datalog error points at the cell's own line."""
from __future__ import annotations

import time

from ..cell import bind_views, drop_loaded, input_for, seal_loaded, wait, wrap
from ..cellerror import CellError
from ..engine.dataflow import no_site
from ..engine.errors import DatalogError, UsageError
from ..handle import DataflowHandle
from .program import install


def run(shell, eng, name: str, inputs: dict, body: str, output: str | None = None, wait_first: bool = True,
        warmer=None):
    ns = shell.user_ns
    created, bound = [], {}
    try:
        if name in eng.dataflows():
            raise UsageError(f"a dataflow named {name!r} is installed already: %dataflow drop {name} --cascade "
                             f"first, or pick another name")
        for pred, var in inputs.items():
            if var not in ns:
                raise UsageError(f"--inputs: no variable named {var!r} in the notebook")
            bound[pred], session = input_for(eng, var, ns[var])
            if session is not None:
                created.append(session)
        t0 = time.perf_counter()
        # a leading newline: the program's line numbers are the cell's (line 1 is the %%datalog line)
        with no_site():  # (its failures name the program's line and column, not IPython's call of the magic)
            prog = install(eng, "\n" + body, inputs=bound, name=name)
        install_s = time.perf_counter() - t0
    except DatalogError as e:
        drop_loaded(eng, created)
        raise CellError(e, None) from None
    except BaseException as e:
        drop_loaded(eng, created)
        raise wrap(e, f"nothing was installed: {name!r} is as it was") from None
    seal_loaded(created)
    handle = DataflowHandle(eng, name, prog.views, [f"{name}.{p}" for p in prog.views], install_s, False)
    if wait_first:
        try:
            wait(eng, handle, warmer, first=True)
        except CellError as e:
            if isinstance(e.error, KeyboardInterrupt):  # installed, still computing: bound like a success
                bind_views(ns, prog.views)
                if output:
                    ns[output] = prog
            else:
                prog.drop()
                drop_loaded(eng, created)
            raise
    bind_views(ns, prog.views)
    if output:
        ns[output] = prog
    return prog, handle
