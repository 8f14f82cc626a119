"""``%load_ext kpgnb`` / ``%unload_ext kpgnb`` / ``%reload_ext kpgnb``.

Loading registers the magics and IPython's handler for failing ``%%dataflow`` cells, and starts the
background warm-up of the compiled kernels (it never prints; a cell that needs a kernel still compiling
waits for it with a progress line). The engine itself starts on first use (``kp.engine()`` or a first
cell). Unloading stops the warm-up, closes the engine (its threads end) and unregisters everything.
"""
from __future__ import annotations

import weakref

from . import cellerror, kernel

# per shell (a process may hold several: a kernel restarting in-process, an embedded shell), what load()
# set up for unload(): magics, warmer, the previous custom exception handler, the events registered
_state: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def load(ip):
    if ip in _state:
        return
    from .engine.warmup import Warmer
    from .magics import DataflowMagics

    warmer = next((st["warmer"] for st in list(_state.values())), None)  # (one warm-up for the process)
    if warmer is None:
        warmer = Warmer()
        warmer.start()
    magics = DataflowMagics(ip, warmer)
    ip.register_magics(magics)
    previous = (ip.custom_exceptions, getattr(ip, "CustomTB", None))
    handled = tuple(c for c in ip.custom_exceptions if c not in cellerror.REPORTS) + cellerror.REPORTS
    prev_handler = previous[1] if ip.custom_exceptions else None

    def handler(shell, etype, value, tb, tb_offset=None):
        if isinstance(value, cellerror.REPORTS) or prev_handler is None:
            return cellerror.show(shell, etype, value, tb, tb_offset)
        return prev_handler(etype, value, tb, tb_offset)

    ip.set_custom_exc(handled, handler)
    from . import display
    display.register(ip)  # views shown as a cell's result render live
    from .cell import CELL_NUMBER
    CELL_NUMBER.reset()  # (this cell's pre_run_cell was not seen: it ends unpaired)
    events = (("pre_execute", CELL_NUMBER.pre_execute), ("pre_run_cell", CELL_NUMBER.pre_run_cell),
              ("post_run_cell", CELL_NUMBER.post_run_cell))
    for event, fn in events:  # (a failing cell's traceback names it by its number)
        ip.events.register(event, fn)
    _state[ip] = dict(magics=magics, warmer=warmer, previous=previous, events=events)
    print("kpgnb: %%dataflow, %%datalog and %dataflow are ready (%dataflow? for help); the engine starts on first use, "
          "its kernels compile in the background")


def unload(ip):
    state = _state.pop(ip, None)
    if state is None:
        return
    if not any(st["warmer"] is state["warmer"] for st in list(_state.values())):  # (no other shell's)
        state["warmer"].stop()
    kernel.close()  # (another shell's next cell starts a fresh one)
    for event, fn in state["events"]:
        ip.events.unregister(event, fn)
    from .cell import CELL_NUMBER
    CELL_NUMBER.reset()  # (this cell's post_run_cell is not seen)
    for kind, names in state["magics"].magics.items():  # every magic the class registered
        for name in names:
            ip.magics_manager.magics[kind].pop(name, None)
    ip.magics_manager.registry.pop(type(state["magics"]).__name__, None)
    if state["magics"] in ip.configurables:  # (IPython's Magics.__init__ put it there)
        ip.configurables.remove(state["magics"])
    exc, custom_tb = state["previous"]
    if exc:
        ip.custom_exceptions, ip.CustomTB = exc, custom_tb
    else:
        ip.set_custom_exc((), None)


def warmer():
    """The background warm-up of the loaded extension (None when not loaded)."""
    from IPython import get_ipython
    state = _state.get(get_ipython()) if get_ipython() is not None else None
    if state is None:
        state = next(iter(list(_state.values())), None)
    return None if state is None else state["warmer"]
