"""Attack (session 27): kpgnb as a new user meets it in a real Jupyter kernel (jupyter_client), cell by
cell. One kernel for the module; every wait is bounded. Slow first computations are made deterministic
with ``kpgnb.engine.faults`` (an operator step held until the test releases it), not with sleeps."""
from __future__ import annotations

import os
import queue
import re
import time

import pytest
from jupyter_client.manager import start_new_kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_new_kernel(kernel_name="python3",
                              env=dict(os.environ, KPGNB_WORKERS="2", KPGNB_PROGRESS="0", KPGNB_LIVE_VIEWS="0"))
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def execute(kc, code, timeout=120, on_start=None):
    """Run a cell: (its status, the text of everything it output, tracebacks included)."""
    msg_id = kc.execute(code)
    if on_start is not None:
        on_start()
    texts = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.5, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"cell hung for {timeout} s: {code[:80]!r}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "stream":
            texts.append(content["text"])
        elif kind == "error":
            texts.append(ANSI.sub("", "\n".join(content["traceback"])))
        elif kind in ("execute_result", "display_data"):
            texts.append(content["data"].get("text/plain", ""))
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    return reply["content"]["status"], "".join(texts)


def ok(kc, code, **kw):
    status, text = execute(kc, code, **kw)
    assert status == "ok", text
    return text


@pytest.fixture(scope="module")
def loaded(kernel):
    km, kc = kernel
    ok(kc, "%load_ext kpgnb")
    ok(kc, "import threading, kpgnb as kp\nfrom kpgnb.engine import faults\neng = kp.engine()")
    return km, kc


def _hold_operators(kc):
    """Arm the kernel's engine so that every operator step waits (at most 30 s) for ``gate``."""
    ok(kc, "gate = threading.Event()\n"
           "faults.arm('operator_step', times=None, action=lambda: gate.wait(30))")


def _release(kc):
    ok(kc, "gate.set(); faults.disarm()")


def test_bug_ctrl_c_during_a_datalog_cells_first_computation_is_swallowed(loaded):
    """README "In a notebook": Ctrl-C during a wait, including a long first computation, returns at once and
    says how far the dataflow got; it stays installed. A %%dataflow cell does that (KeyboardInterrupt:
    "stopped waiting: dataflow ... is still installed and computing"), but a %%datalog cell interrupted in
    its first computation ends as a success: status ok, "Datalog program 'dlq' installed", nothing says it
    was interrupted or that the relations are still empty (datalog/cell.py catches the CellError wrapping
    the KeyboardInterrupt and does not re-raise it)."""
    km, kc = loaded
    ok(kc, "dl_e = eng.input('dl_e', ['src', 'dst'], rows=[(1, 2), (2, 3)]); dl_e.advance_to(1)")
    _hold_operators(kc)
    try:
        t0 = time.monotonic()
        status, text = execute(kc, "%%datalog dlq --inputs edge=dl_e -o DLQ\n"
                                   "tc(x, y) :- edge(x, y).\n"
                                   "tc(x, y) :- tc(x, z), edge(z, y).\n",
                               on_start=lambda: (time.sleep(1.5), km.interrupt_kernel()))
        assert time.monotonic() - t0 < 20  # control came back before the gate's own timeout
    finally:
        _release(kc)
    assert status == "error" and "KeyboardInterrupt" in text, (status, text)
    assert "still installed and computing" in text, text
    # like %%dataflow: installed and bound, and %dataflow wait picks up
    text = ok(kc, "%dataflow wait dlq --timeout 30\nprint(sorted(map(tuple, tc.to_pandas().values.tolist())))")
    assert "[(1, 2), (1, 3), (2, 3)]" in text, text


def test_ctrl_c_during_a_dataflow_cells_first_computation_says_so(loaded):
    """The %%dataflow counterpart of the test above (passes): the same hold, the same interrupt."""
    km, kc = loaded
    ok(kc, "df_e = eng.input('df_e', ['x'], rows=[(1,), (2,)]); df_e.advance_to(1)")
    _hold_operators(kc)
    try:
        status, text = execute(kc, "%%dataflow dfq -o DFQ\nout = df.input('df_e').view('out')\n",
                               on_start=lambda: (time.sleep(1.5), km.interrupt_kernel()))
    finally:
        _release(kc)
    assert status == "error" and "still installed and computing" in text, (status, text)
    text = ok(kc, "%dataflow wait dfq --timeout 30\nprint(sorted(out.to_pandas()['x']))")
    assert "[1, 2]" in text, text


def test_bug_unload_ext_while_a_user_function_runs_leaves_the_scheduler_thread_silently(loaded):
    """README: ``%unload_ext kpgnb`` closes the engine (its threads end). With a dataflow's user function
    still running (here held at an operator step, as a slow map would be), the cell blocks for 10 s
    (Scheduler.stop's join timeout), then returns ok with no output while the 'kpgnb-scheduler' thread is
    still alive and about to go on running the user's code; meanwhile stop() has already released the
    dataflows and cleared the catalog under it. Expected: the threads end (the running step is abandoned or
    waited for), or at least the cell says that the engine's thread is still running a user function."""
    km, kc = loaded
    ok(kc, "un_in = eng.input('un_in', ['x'], rows=[(1,)]); un_in.advance_to(1)")
    ok(kc, "%%dataflow un\nunv = df.input('un_in').map(lambda x: {'x': x + 1}).view('unv')\n")
    _hold_operators(kc)
    try:
        ok(kc, "un_in.insert([(2,)]); un_in.advance_to(2)")
        ok(kc, "import time\nt0 = time.monotonic()\nwhile faults.hits('operator_step') == 0 and "
               "time.monotonic() - t0 < 20:\n    time.sleep(0.05)\nassert faults.hits('operator_step') > 0")
        status, text = execute(kc, "%unload_ext kpgnb", timeout=60)
        alive = ok(kc, "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('kpgnb')))")
    finally:
        _release(kc)
        ok(kc, "%load_ext kpgnb")
        ok(kc, "eng = kp.engine()")
    assert status == "ok", text
    assert "kpgnb-scheduler" not in alive or "still running" in text, (text, alive)
