"""IPython's InteractiveShell with kpgnb loaded, for the tests that drive cells in-process: a module
fixture (``shell``) and ``run``, which runs a cell and returns its result with what it printed."""
import re

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


def run(sh, capsys, code):
    """Run a cell: (result, stdout+stderr without colour codes)."""
    r = sh.run_cell(code)
    out = capsys.readouterr()
    return r, ANSI.sub("", out.out + out.err)
