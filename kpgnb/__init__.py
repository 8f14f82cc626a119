"""kpgnb: differential dataflow (the K-Pg design) inside a Jupyter kernel.

``import kpgnb as kp`` is cheap: the engine (and numba) load on first use of a name below.
"""
from __future__ import annotations

import os as _os
import sys as _sys

# When run from a source checkout without installing, find the sibling engine/ and widgets/ folders.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_root, "engine")) and _os.path.isfile(_os.path.join(_root, "pyproject.toml")):
    if _root not in __path__:
        __path__.append(_root)

__all__ = ["Engine", "Variable", "Antichain", "Schema", "KpgnbError", "SchemaError", "DataflowError", "CompactedError",
           "EngineError", "Cancelled", "DatalogError", "UsageError", "ArgumentTypeError", "UnknownNameError", "Drop", "engine",
           "input", "dashboard"]
__version__ = "0.1.0"

_LAZY = {
    "Engine": ("kpgnb.engine.runtime", "Engine"),
    "InputSession": ("kpgnb.engine.session", "InputSession"),
    "View": ("kpgnb.engine.view", "View"),
    "Variable": ("kpgnb.engine.collection", "Variable"),
    "Collection": ("kpgnb.engine.collection", "Collection"),
    "Arranged": ("kpgnb.engine.collection", "Arranged"),
    "Antichain": ("kpgnb.engine.lattice", "Antichain"),
    "Schema": ("kpgnb.engine.columns", "Schema"),
    "KpgnbError": ("kpgnb.engine.errors", "KpgnbError"),
    "SchemaError": ("kpgnb.engine.errors", "SchemaError"),
    "DataflowError": ("kpgnb.engine.errors", "DataflowError"),
    "CompactedError": ("kpgnb.engine.errors", "CompactedError"),
    "EngineError": ("kpgnb.engine.errors", "EngineError"),
    "Cancelled": ("kpgnb.engine.errors", "Cancelled"),
    "DatalogError": ("kpgnb.engine.errors", "DatalogError"),
    "UsageError": ("kpgnb.engine.errors", "UsageError"),
    "ArgumentTypeError": ("kpgnb.engine.errors", "ArgumentTypeError"),
    "UnknownNameError": ("kpgnb.engine.errors", "UnknownNameError"),
    "Drop": ("kpgnb.engine.dropping", "Drop"),
}


def __getattr__(name):
    if name in ("spark", "widgets", "graphs"):  # kp.spark: the Spark bridge (pyspark only when a function
        import importlib  # needs it); kp.widgets: the dashboard's widgets (ipywidgets, matplotlib); kp.graphs
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kpgnb' has no attribute {name!r}")


def __dir__():
    """The public names, the lazy ones included (``dir(kp)``, tab completion)."""
    return sorted(set(__all__) | set(_LAZY) | {"spark", "widgets", "graphs", "__version__"})


def _kernel_engine(workers: int | None = None):
    """The kernel's engine: created on first call and kept for the life of the process (it survives
    ``%reset``, since it lives in ``kpgnb.kernel`` and not in the user namespace)."""
    from .kernel import engine
    return engine(workers)


def input(name: str):  # noqa: A001 - kp.input(name), as eng.inputs()[name] with a helpful error
    """The kernel's engine input ``name`` (e.g. one a ``%%dataflow --inputs`` DataFrame became)."""
    from .engine.errors import UnknownNameError
    inputs = _kernel_engine().inputs()
    if name not in inputs:
        raise UnknownNameError(f"no input named {name!r}; inputs are {sorted(inputs)}")
    return inputs[name]


def dashboard(engine=None):
    """The live dashboard (``kpgnb.widgets.Dashboard``) over ``engine``, by default the kernel's engine:
    arrangements, frontiers, latency CCDFs and trace sizes, refreshed a few times a second by one
    background thread until ``.close()`` or until the engine closes."""
    from .widgets import dashboard as make
    return make(engine if engine is not None else _kernel_engine())


# ``kpgnb.engine`` names the engine's package too, and importing it (which any use of the engine does)
# binds that name here. So the package is made callable: ``kp.engine()`` is the kernel's engine, while
# ``kpgnb.engine.runtime`` and friends import as usual. The package itself knows nothing of this.
class _CallableEngineModule(type(_os)):
    def __call__(self, workers: int | None = None):
        """The kernel's engine (see ``kpgnb.kernel.engine``)."""
        return _kernel_engine(workers)


from . import engine  # noqa: E402 - cheap: no numba until a runtime module is imported

engine.__class__ = _CallableEngineModule

if "IPython" in _sys.modules:  # in a kernel, views shown as a cell's result render live (kpgnb/display.py)
    from . import display as _display
    _display.register()


def load_ipython_extension(ipython):
    """``%load_ext kpgnb``: the magics, the kernel's engine (on first use) and a background warm-up."""
    from .extension import load
    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext kpgnb``: stop every engine thread and unregister the magics."""
    from .extension import unload
    unload(ipython)
