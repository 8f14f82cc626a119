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


def run(sh, capsys, code):
    """Run a cell: (result, stdout+stderr without colour codes)."""
    r = sh.run_cell(code)
    out = capsys.readouterr()
    return r, ANSI.sub("", out.out + out.err)
