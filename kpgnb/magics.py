"""The ``%%dataflow`` and ``%%datalog`` cell magics and the ``%dataflow`` line magic (registered by ``%load_ext kpgnb``).

Parsing lives here (``magic_arguments``, so ``%%dataflow?`` shows the options); running a cell lives in
:mod:`kpgnb.cell`, the kernel's engine in :mod:`kpgnb.kernel`, listings in :mod:`kpgnb.listing`.
"""
from __future__ import annotations

import argparse
import shlex
import time

from IPython.core.error import UsageError as IPyUsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from . import cell, kernel
from .cellerror import CellInterrupt
from .engine.errors import KpgnbError
from .engine.pool import MAX_WORKERS

def _name_ok(name: str) -> bool:
    """A dataflow or program name: one word of letters and digits (any script's, as ``str.isalnum``
    says), '_', '.' and '-'."""
    return bool(name) and all(c.isalnum() or c in "_.-" for c in name)


class _Once(argparse.Action):
    """An option given at most once (a second ``-o`` would silently win over the first)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{'/'.join(self.option_strings)} given twice ({getattr(namespace, self.dest)} and "
                         f"{values}); give it once")
        setattr(namespace, self.dest, values)


def _inputs_text(values) -> str | None:
    """The bindings of every ``--inputs``/``-i`` (the option may be repeated: ``-i a=x -i b=y``)."""
    return None if values is None else ",".join(values)


SUBCOMMANDS = ("list", "drop", "cancel", "wait", "stats", "config", "dashboard")


@magics_class
class DataflowMagics(Magics):
    def __init__(self, shell, warmer=None):
        super().__init__(shell)
        self.warmer = warmer

    @magic_arguments("%dataflow")  # (the usage line puts one "%" before it: a cell magic's "%%")
    @argument("name", help="the dataflow's name (views and exports are named inside the cell)")
    @argument("--inputs", "-i", default=None, action="append", metavar="a=x,b=y",
              help="bind collections in the cell: a is the engine input for x, a pandas or Spark DataFrame, "
                   "Arrow table, dict of arrays or input session in the notebook (a DataFrame becomes an "
                   "engine input named x, kept for later cells); may be repeated (-i a=x -i b=y)")
    @argument("--replace", action="store_true",
              help="swap out an installed dataflow of this name (dataflows reading its exports keep them)")
    @argument("-o", "--output", default=None, action=_Once, metavar="VAR",
              help="bind a handle on the dataflow to VAR")
    @argument("--no-wait", action="store_true", help="return once installed, without waiting for results")
    @cell_magic
    def dataflow(self, line, body):
        """Build and install one dataflow from the cell's Python code.

        The cell runs with ``df``, the dataflow builder (what ``eng.dataflow(NAME)`` yields), in scope,
        and each ``--inputs`` name bound to a collection. ``df.input("name")`` reads an engine input,
        ``df.use("name")`` imports an arrangement an earlier cell exported (no re-indexing). When the
        cell ends the dataflow is installed atomically and its first results are awaited; its views are
        bound in the notebook by their names. A failing cell installs nothing and keeps every earlier
        dataflow and arrangement. Example::

            %%dataflow reach --inputs edges=edges_df
            g = edges.arrange_by("src").export("edges_by_src")
            reach = df.input("roots").iterate(lambda r: r.join(g, left_on="node", right_on="src")
                                              .select("dst").rename(dst="node").concat(r).distinct()).view("reach")
        """
        args = _parse_line(self.dataflow, line, "%%dataflow")
        if not _name_ok(args.name):
            raise IPyUsageError(f"%%dataflow {args.name}: a dataflow name is one word of letters, digits, "
                                f"'_', '.' and '-'")
        _check_output("%%dataflow", args.output)
        try:
            spec = cell.CellSpec(args.name, cell.parse_inputs(_inputs_text(args.inputs)), args.replace,
                                 args.output, not args.no_wait)
        except KpgnbError as e:
            raise IPyUsageError(str(e)) from None
        if not body.strip():
            raise IPyUsageError(f"%%dataflow {args.name}: the cell is empty; build the dataflow in its body")
        handle = cell.run(self.shell, _engine(f"%%dataflow {args.name}"), spec, line, body, self.warmer)
        print(_summary(handle))

    @magic_arguments("%datalog")
    @argument("name", help="the program's name: its dataflow, and the prefix of its exports (NAME.pred)")
    @argument("--inputs", "-i", default=None, action="append", metavar="edge=x,...",
              help="bind input predicates: edge is read from x, a pandas or Spark DataFrame, Arrow table, "
                   "dict of arrays or input session in the notebook (a DataFrame becomes an engine input "
                   "named x); by default a predicate reads the engine input of its own name; may be repeated")
    @argument("-o", "--output", default=None, action=_Once, metavar="VAR",
              help="bind the Program (prog.goal(...)) to VAR")
    @argument("--no-wait", action="store_true", help="return once installed, without waiting for results")
    @cell_magic
    def datalog(self, line, body):
        """Install the cell as a Datalog program (``eng.datalog``): rules ``head :- body.``, ``.decl``,
        ``!`` / ``not`` for stratified negation, comparisons and arithmetic, aggregates ``min<v> max<v>
        count<v> sum<v> avg<v> countd<v>`` in heads (min/max also recursive), ``//`` and ``#`` comments.

        Every derived relation becomes a view bound in the notebook under its name and an arrangement
        exported as ``NAME.pred``. Errors name the cell's line and column. Example::

            %%datalog graph --inputs edge=edges_df
            reach(y) :- root(y).
            reach(y) :- reach(x), edge(x, y).
            sp(y, min<d>) :- root(y), d = 0.
            sp(y, min<d>) :- sp(x, d1), edge(x, y), d = d1 + 1.
        """
        args = _parse_line(self.datalog, line, "%%datalog")
        if not _name_ok(args.name):
            raise IPyUsageError(f"%%datalog {args.name}: a program name is one word of letters, digits, "
                                f"'_', '.' and '-'")
        _check_output("%%datalog", args.output)
        if not body.strip():
            raise IPyUsageError(f"%%datalog {args.name}: the cell is empty; write the program's rules in it")
        try:
            inputs = cell.parse_inputs(_inputs_text(args.inputs))
        except KpgnbError as e:
            raise IPyUsageError(str(e)) from None
        from .datalog import cell as datalog_cell
        prog, handle = datalog_cell.run(self.shell, _engine(f"%%datalog {args.name}"), args.name, inputs, body,
                                        args.output, not args.no_wait, self.warmer, line)
        print(_summary(handle).replace("dataflow", "Datalog program", 1))

    @line_magic("dataflow")
    def dataflow_line(self, line):
        """Manage the kernel's dataflows.

        %dataflow list                      dataflows, views, inputs and exported arrangements
        %dataflow drop NAME [--cascade]     uninstall (--cascade: also the dataflows reading its exports)
        %dataflow cancel NAME               stop its computation (it stays listed as cancelled)
        %dataflow wait [NAME] [--timeout S] wait for NAME's views (default: every dataflow); Ctrl-C stops
                                            waiting and leaves the dataflow running
        %dataflow stats                     sizes, frontiers, latencies and worker load
        %dataflow config [--workers N] [--restart]
                                            show or set the engine's worker count (KPGNB_WORKERS; default
                                            the cores); --restart closes the engine, losing its state
        %dataflow dashboard                 the live dashboard (kpgnb.widgets)

        A cell starting with %%dataflow NAME builds a dataflow (see %%dataflow?).
        """
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise IPyUsageError(f"%dataflow: {e}") from None
        if not words:
            raise IPyUsageError(f"%dataflow needs a subcommand: {', '.join(SUBCOMMANDS)} (see %dataflow?)")
        sub, rest = words[0], words[1:]
        if sub not in SUBCOMMANDS:
            raise IPyUsageError(f"%dataflow {sub}: unknown subcommand; expected one of {', '.join(SUBCOMMANDS)}")
        try:
            return getattr(self, f"_{sub}")(rest)
        except KpgnbError as e:
            raise IPyUsageError(f"%dataflow {sub}: {e}") from None
        except CellInterrupt:  # (%dataflow wait: says how far the dataflow got)
            raise
        except KeyboardInterrupt:  # Ctrl-C: what became of the command, not the engine's frames
            raise CellInterrupt(KeyboardInterrupt(_interrupted(sub, rest)), None) from None

    # -- subcommands ------------------------------------------------------------------------------
    def _list(self, rest):
        _no_args("list", rest)
        from .listing import Listing
        return Listing.of(kernel.engine())

    def _drop(self, rest):
        a = _parse(rest, "drop", [("name", {}), ("--cascade", {"action": "store_true"})])
        eng = kernel.engine()
        before = set(eng.dataflows())
        try:
            eng.drop(a.name, cascade=a.cascade)
        except KpgnbError as e:  # (the engine's message names its own API; the notebook's is this option)
            api = f"eng.drop({a.name!r}, cascade=True)"
            if api not in str(e):
                raise
            raise type(e)(str(e).replace(api, f"%dataflow drop {a.name} --cascade")) from None
        also = sorted(before - set(eng.dataflows()) - {a.name})  # (the dataflows --cascade took with it)
        print(f"dropped dataflow {a.name!r}" + (", and those reading its exports: " + ", ".join(map(repr, also))
                                               if also else "") + _kept_for(eng, a.name))

    def _cancel(self, rest):
        a = _parse(rest, "cancel", [("name", {})])
        eng = kernel.engine()
        if a.name not in eng.dataflows() and a.name in eng.snapshot().retired:
            raise KpgnbError(f"dataflow {a.name!r} was dropped or replaced and is kept only while its exports are "
                             f"read: there is no computation of its own to cancel; %dataflow drop {a.name} "
                             f"--cascade drops it with the dataflows reading it")
        eng.cancel(a.name)
        print(f"cancelled dataflow {a.name!r}")

    def _wait(self, rest):
        a = _parse(rest, "wait", [("name", {"nargs": "?"}), ("--timeout", {"type": float, "default": None})])
        eng = kernel.engine()
        names = [a.name] if a.name else [n for n, s in eng.dataflows().items() if s == "running"]
        from .handle import DataflowHandle
        if a.timeout is not None and not a.timeout > 0:  # (NaN too: it would wait without limit)
            raise KpgnbError(f"--timeout must be a positive number of seconds, not {a.timeout:g}")
        deadline = None if a.timeout is None else time.monotonic() + a.timeout  # for all of them together
        for n in names:  # (a dropped or replaced one kept while its exports are read, NAME~k, is listed: waited for)
            if n not in eng.dataflows() and n not in eng.snapshot().retired:
                raise KpgnbError(f"no dataflow named {n!r}; installed: {sorted(eng.dataflows())}")
        for n in names:
            try:
                cell.wait(eng, DataflowHandle(eng, n, {}, []), self.warmer, deadline=deadline)
            except TimeoutError:
                behind = [m for m in names if not _current(eng, m)] or [n]
                raise IPyUsageError(f"%dataflow wait: not up to date after {a.timeout:g} s: "
                                    + "; ".join(cell.how_far(eng, m) for m in behind)) from None
        failed = [f"{n!r} {s}" for n, s in eng.dataflows().items() if s in ("failed", "cancelled")]
        print("up to date: " + (", ".join(repr(n) for n in names) if names else "no running dataflows")
              + ("; not computing: " + ", ".join(failed) + " (%dataflow list shows why)" if failed else ""))

    def _stats(self, rest):
        _no_args("stats", rest)
        return kernel.engine().stats()

    def _config(self, rest):
        a = _parse(rest, "config", [("--workers", {"type": int, "default": None}),
                                    ("--restart", {"action": "store_true"})])
        if a.workers is not None and a.workers < 1:  # (refused before a restart loses anything)
            raise IPyUsageError(f"%dataflow config --workers {a.workers}: workers must be at least 1")
        if a.workers is not None and a.workers > MAX_WORKERS:  # (likewise: the engine is not closed first)
            raise IPyUsageError(f"%dataflow config --workers {a.workers}: workers must be at most {MAX_WORKERS} "
                                f"(one thread each)")
        if a.restart:
            kernel.close()
        if a.workers is not None:
            kernel.configure(workers=a.workers)
        eng = kernel.current()
        failed = eng.snapshot().error if eng else None
        state = (f"running with {eng.workers} workers" if failed is None else
                 f"failed, {eng.workers} workers ({' '.join(str(failed).split())}; --restart starts a new "
                 f"engine, losing every dataflow and input)") if eng else "not started (starts on first use)"
        warm = "compiled" if self.warmer is None or self.warmer.done else "compiling in the background"
        print(f"engine: {state}; workers when started: {kernel.configured_workers()}; kernels: {warm}")

    def _dashboard(self, rest):
        _no_args("dashboard", rest)
        try:
            from .widgets import dashboard
        except ImportError:
            print("the dashboard is not available in this version of kpgnb.widgets; %dataflow stats shows "
                  "the same figures")
            return None
        return dashboard(kernel.engine())


def _engine(magic: str):
    """The kernel's engine, for a cell magic: one that cannot start (a bad KPGNB_WORKERS) is the magic's
    one-line usage error, as the line magic's is, not a traceback through the magics."""
    try:
        return kernel.engine()
    except KpgnbError as e:
        raise IPyUsageError(f"{magic}: {e}") from None


def _check_output(magic: str, var):
    """``-o VAR`` names a notebook variable: an identifier that is not a keyword (else the handle would be
    bound where no cell can read it)."""
    if var is not None and not cell.notebook_name(var):
        raise IPyUsageError(f"{magic} -o {var}: VAR is the notebook variable to bind, a Python identifier that is "
                            f"not a keyword")


def _summary(handle) -> str:
    parts = [f"dataflow {handle.name!r} {'replaced' if handle.replaced else 'installed'} in "
             f"{handle.install_s * 1e3:.1f} ms"]
    info = handle.engine.snapshot().dataflows.get(handle.name)
    if handle.views:
        parts.append("views: " + ", ".join(handle.views))
    if handle.exports:
        parts.append("exports: " + ", ".join(handle.exports))
    if info is not None and info.uses:
        parts.append("imports: " + ", ".join(info.uses))
    return " · ".join(parts)


def _kept_for(eng, name: str) -> str:
    """After dropping ``name``: that it runs on for the dataflows reading its exports (listed as dropped,
    kept while its exports are read), and which; "" when it went."""
    snap = eng.snapshot()
    kept = snap.retired.get(name)
    if kept is None:
        return ""
    readers = sorted(n for infos in (snap.dataflows, snap.retired) for n, i in infos.items()
                     if n != name and set(i.uses) & set(kept.exports))
    if not readers:  # (read through trace handles only)
        return "; it is kept running while open trace handles read its exports (close them and it goes)"
    return (f"; it is kept running while its exports are read by {', '.join(map(repr, readers))} "
            f"(%dataflow drop {name} --cascade drops them too)")


def _no_args(sub: str, rest):
    if rest:
        raise IPyUsageError(f"%dataflow {sub} takes no arguments, got {' '.join(rest)!r}")


def _parse(rest, sub: str, spec):
    from IPython.core.magic_arguments import MagicArgumentParser
    p = MagicArgumentParser(prog=f"%dataflow {sub}", add_help=False)
    for name, kw in spec:
        p.add_argument(name, **kw)
    try:
        return p.parse_args(rest)
    except IPyUsageError as e:  # (argparse's message names no command: say which)
        raise IPyUsageError(f"%dataflow {sub}: {e}") from None


def _parse_line(magic_func, line: str, magic: str):
    """The options of a cell magic's line, split as a shell does (``shlex``: quotes around a value are
    taken off, ``--inputs "e=edges_df"``, as ``%dataflow drop 'NAME'`` takes them off); argparse's errors
    name the magic."""
    try:
        argv = shlex.split(line)
    except ValueError as e:  # (an unclosed quote)
        raise IPyUsageError(f"{magic} {line.strip()}: {e}") from None
    try:
        return magic_func.parser.parse_args(argv)
    except IPyUsageError as e:
        raise IPyUsageError(f"{magic}: {e}") from None


def _interrupted(sub: str, rest) -> str:
    """After Ctrl-C in ``%dataflow SUB``: what became of the command (a drop or cancel waits for the
    scheduler, which may be in a long step of some dataflow)."""
    name = rest[0] if rest and not rest[0].startswith("-") else None
    eng = kernel.current()
    try:
        state = eng.dataflows().get(name) if eng is not None and name is not None and not eng.closed else None
    except KpgnbError:
        state = None
    if sub == "drop" and name is not None and eng is not None and not eng.closed:
        if state is None:
            return f"%dataflow drop {name}: stopped waiting; dataflow {name!r} is not installed (it was dropped)"
        return (f"%dataflow drop {name}: stopped waiting for the engine (busy in a step), and the drop with it; "
                f"dataflow {name!r} is still installed ({state}): %dataflow drop {name} drops it once that step "
                f"ends")
    if sub == "cancel" and name is not None and eng is not None and not eng.closed:
        if state == "cancelled":
            return f"%dataflow cancel {name}: stopped waiting; dataflow {name!r} is cancelled"
        return (f"%dataflow cancel {name}: stopped waiting for the engine (busy in a step); the cancel of "
                f"dataflow {name!r} is queued and takes effect once that step ends (%dataflow list shows its "
                f"status{', ' + state + ' now' if state else ''})")
    return f"%dataflow {sub}: interrupted"


def _current(eng, name: str) -> bool:
    """Whether dataflow ``name`` already reflects every epoch its inputs were advanced to (or is gone)."""
    try:
        eng.wait(name, timeout=0.001, cancel_on_interrupt=False)
    except TimeoutError:
        return False
    except Exception:  # noqa: BLE001 - failed or dropped meanwhile: nothing to wait for
        return True
    return True
