"""kpgnb: differential dataflow (the K-Pg design) inside a Jupyter kernel.

``import kpgnb as kp`` is cheap: the engine (and numba) load on first use of a name below.
"""
from __future__ import annotations

import os as _os

# When run from a source checkout without installing, find the sibling engine/ and widgets/ folders.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_root, "engine")) and _os.path.isfile(_os.path.join(_root, "pyproject.toml")):
    if _root not in __path__:
        __path__.append(_root)

__all__ = ["Engine", "Variable", "Antichain", "Schema", "KpgnbError", "SchemaError", "DataflowError", "CompactedError",
           "EngineError", "Cancelled", "DatalogError", "UsageError", "UnknownNameError", "engine"]
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
    "UnknownNameError": ("kpgnb.engine.errors", "UnknownNameError"),
}


def __getattr__(name):
    if name == "spark":  # kp.spark: the Spark bridge (imports pyspark only when a function needs it)
        import importlib
        return importlib.import_module(".spark", __name__)
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kpgnb' has no attribute {name!r}")


_engine = None


def engine(workers: int | None = None):
    """The kernel's engine: created on first call and kept for the life of the process (it survives
    ``%reset``, since it lives here and not in the user namespace)."""
    global _engine
    if _engine is None:
        from .engine.runtime import Engine
        _engine = Engine(workers=workers)
    return _engine
