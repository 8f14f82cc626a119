"""IPython's InteractiveShell with kpgnb loaded, for the tests that drive cells in-process: a module
fixture (``shell``) and ``run``, which runs a cell and returns its result with what it printed."""
import re
import sys

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kpgnb import kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def shell():
    """The shell with the extension loaded for a test module (closed and unloaded after it)."""
    sh = InteractiveShell.instance()
    kernel.close()
    sh.run_line_magic("load_ext", "kpgnb")
    yield sh
    kernel.close()
    sh.run_line_magic("unload_ext", "kpgnb")
    # the shell's __main__ module lost __spec__ if a test ran %reset (it clears that module's namespace):
    # multiprocessing's spawn, which later tests use, reads it
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None


def run(sh, capsys, code, history: bool = False):
    """Run a cell: (result, stdout+stderr without colour codes). ``history``: as a kernel runs it (the
    cell gets an execution number)."""
    r = sh.run_cell(code, store_history=history)
    out = capsys.readouterr()
    return r, ANSI.sub("", out.out + out.err)


KEEP = ("In", "Out", "get_ipython", "exit", "quit", "open")  # the namespace entries a test leaves in place


@pytest.fixture
def quiet(monkeypatch):
    """Views render as text (a live view needs a kernel with comms) and no progress lines; set per test,
    so that later test modules see the environment as it was."""
    monkeypatch.setenv("KPGNB_LIVE_VIEWS", "0")
    monkeypatch.setenv("KPGNB_PROGRESS", "0")


@pytest.fixture
def ip(shell, capsys):
    """The shell with the extension loaded (a test may have unloaded it), a fresh kernel engine of 2
    workers and a namespace holding np, pd and kp; what a test adds to it is removed after it."""
    import numpy as np
    import pandas as pd

    import kpgnb as kp
    from kpgnb.engine import faults
    if shell.find_cell_magic("dataflow") is None:
        shell.run_line_magic("load_ext", "kpgnb")
    kernel.close()
    kernel.configure(workers=2)
    shell.user_ns.update(np=np, pd=pd, kp=kp)
    capsys.readouterr()
    yield shell
    faults.disarm()
    kernel.close()
    for k in [k for k in shell.user_ns if not k.startswith("_") and k not in KEEP]:
        shell.user_ns.pop(k, None)


def ok(sh, capsys, code):
    """Run a cell that must succeed; what it printed."""
    r, out = run(sh, capsys, code)
    assert r.success, out
    return out


def run_numbered(sh, capsys, code):
    """``run`` as a kernel does: with history on."""
    return run(sh, capsys, code, history=True)


def state():
    """The kernel engine's dataflows, inputs and arrangements' names: what a failed cell must leave as it
    was."""
    import kpgnb as kp
    eng = kp.engine()
    return dict(eng.dataflows()), sorted(eng.inputs()), sorted(a["name"] for a in eng.arrangements())
