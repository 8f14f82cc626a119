"""Where the kernels' compiled machine code is cached: one directory per *exact build* of the kernels.

Numba's default (``cache=True``) keeps a function's code next to its source, in ``__pycache__``, or in a
per-user directory named after the source *path* when that is not writable. Since numba 0.68 the index is
stamped with a hash of the source file's contents (numba PR #10659), no longer its mtime, but the
location is still path-bound, so a new virtual environment, a reinstall elsewhere or a read-only
site-packages recompiles everything (half a minute). And numba does not notice when a kernel's callee in
*another* file changes (numba issue #1833): the caller's cached code, with the old callee inlined, stays
valid for it.

The kernels here are cached instead under ``$KPGNB_CACHE_DIR`` (default: the user cache directory,
``~/.cache/kpgnb`` on Linux) in a directory named by the kpgnb, numba, llvmlite, NumPy and Python
versions, the CPU numba compiles for, and a SHA-256 of every source file of this package::

    ~/.cache/kpgnb/kpgnb0.1.0-nb0.68.1-py311-x86_64-znver1-<hash of sources, CPU features, numba flags>/

Any edit to any kernel file gives a new directory, so code compiled from other sources can never be
found, whatever file the edit was in; installs of the same sources (any path, any number of virtual
environments) share one. Inside it numba's own checks still apply (per-file content stamp, bytecode
hash, signature, CPU in the index key). Concurrent writers are safe: numba writes through a temporary
file and ``os.replace``, and machines with different CPUs never share a directory (so never an index
entry pointing at another CPU's code).

``NUMBA_CACHE_DIR`` (numba's own setting) takes precedence when set, and ``KPGNB_CACHE_DIR=off`` gives
numba's default locations back. When the directory cannot be written, numba's defaults apply. Old
directories (other builds) beyond the 4 most recently used are removed once they are a week old.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import threading
import time

from numba.core import caching, config

_HERE = os.path.dirname(os.path.realpath(__file__))
KEEP = 4
PRUNE_AGE_S = 7 * 86400
_state: dict = {}
_lock = threading.Lock()


def _sources_digest(h) -> None:
    for name in sorted(os.listdir(_HERE)):
        if name.endswith(".py"):
            h.update(name.encode() + b"\0")
            with open(os.path.join(_HERE, name), "rb") as f:
                h.update(f.read())
            h.update(b"\0")


def build_tag() -> str:
    """The name of this build's cache directory (see the module docstring)."""
    if "tag" not in _state:
        import llvmlite
        import numba
        import numpy
        from numba.core.registry import cpu_target

        from ... import __version__
        triple, cpu, features = cpu_target.target_context.codegen().magic_tuple()
        h = hashlib.sha256()
        _sources_digest(h)
        for part in (triple, cpu, features, llvmlite.__version__, numpy.__version__, sys.version,
                     str(config.OPT), str(config.BOUNDSCHECK), str(config.DEBUGINFO_DEFAULT),
                     str(config.FASTMATH) if hasattr(config, "FASTMATH") else ""):
            h.update(str(part).encode() + b"\0")
        arch = re.sub(r"[^A-Za-z0-9_.]", "_", f"{triple.split('-')[0]}-{cpu}")
        _state["tag"] = (f"kpgnb{__version__}-nb{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
                         f"-{arch}-{h.hexdigest()[:20]}")
    return _state["tag"]


def base_dir() -> str | None:
    """The root holding one directory per build, or None when kpgnb's location is switched off (numba's
    ``NUMBA_CACHE_DIR`` is set, or ``KPGNB_CACHE_DIR`` is ``off``)."""
    if config.CACHE_DIR:
        return None
    env = os.environ.get("KPGNB_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none", "false") else os.path.abspath(env)
    from numba.misc.appdirs import AppDirs
    return AppDirs(appname="kpgnb", appauthor=False).user_cache_dir


def cache_dir() -> str | None:
    """This build's cache directory, created (and marked as used) on the first call; None when kpgnb's
    location is off or not writable (numba's default locations are used then)."""
    with _lock:
        if "dir" not in _state:
            _state["dir"] = _open_dir()
        return _state["dir"]


def _open_dir():
    base = base_dir()
    if base is None:
        return None
    path = os.path.join(base, build_tag())
    try:
        fresh = not os.path.isdir(path)
        os.makedirs(path, exist_ok=True)
        os.utime(path)  # last use, for pruning
        if fresh:
            _prune(base, keep=path)
    except OSError:
        return None
    return path


def _prune(base: str, keep: str) -> None:
    """Remove other builds' directories beyond the KEEP most recently used, once unused for a week."""
    try:
        entries = [os.path.join(base, n) for n in os.listdir(base) if n.startswith("kpgnb")]
        dirs = sorted((d for d in entries if os.path.isdir(d) and d != keep), key=os.path.getmtime, reverse=True)
        now = time.time()
        for d in dirs[KEEP - 1:]:
            if now - os.path.getmtime(d) > PRUNE_AGE_S:
                shutil.rmtree(d, ignore_errors=True)
    except OSError:
        pass


class BuildCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """Locates a kernel's cache files in this build's directory (see the module docstring)."""

    def __init__(self, py_func, py_file, path):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = path

    def get_cache_path(self):
        return self._cache_path

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.exists(py_file) or os.path.dirname(os.path.realpath(py_file)) != _HERE:
            return None
        path = cache_dir()
        if path is None:
            return None
        self = cls(py_func, py_file, path)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


class _BuildCacheImpl(caching.CompileResultCacheImpl):
    _locator_classes = [BuildCacheLocator] + list(caching.CompileResultCacheImpl._locator_classes)


class KernelCache(caching.FunctionCache):
    """numba's FunctionCache with BuildCacheLocator tried first."""
    _impl_class = _BuildCacheImpl


def kernel_cache(py_func):
    return KernelCache(py_func)
