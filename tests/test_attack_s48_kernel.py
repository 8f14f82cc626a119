"""Attack (session 48) on the notebook face in a REAL Jupyter kernel (jupyter_client, ipykernel from the venv):
true SIGINTs (``km.interrupt_kernel()``) landing in a plain ``eng.wait`` on a sleeping map, in a
``%%dataflow`` / ``%%datalog`` cell whose install waits behind a busy scheduler, in a Datalog goal, and in a
``follow`` loop; and a live view paused and resumed by the frontend's own comm messages.

The scheduler is made busy deterministically with ``kpgnb.engine.faults`` (every operator step waits on a
gate, at most a few seconds), not with sleeps racing the interrupt. One kernel for the module.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` assert the correct behaviour of a defect found here;
the others pin down behaviour that was probed and found right."""
from __future__ import annotations

import json
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


class Cell:
    """What one cell did: reply status, text of its outputs (tracebacks included) and the comm messages
    seen meanwhile (from any thread: a widget's updater sends them outside the cell)."""

    def __init__(self, status, text, comms):
        self.status, self.text, self.comms = status, text, comms


def execute(kc, code, timeout=60, interrupts=(), km=None) -> Cell:
    """Run a cell; ``interrupts``: seconds after the start at which to send the kernel a SIGINT."""
    msg_id = kc.execute(code)
    t0 = time.monotonic()
    for at in interrupts:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        km.interrupt_kernel()
    texts, comms = [], []
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.5, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"cell hung for {timeout} s: {code[:80]!r}") from None
        kind, content = msg["msg_type"], msg["content"]
        if kind.startswith("comm"):
            comms.append((kind, content))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
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
    if interrupts:
        time.sleep(0.5)  # (an interrupt sent late must not land in the next cell)
    return Cell(reply["content"]["status"], "".join(texts), comms)


def ok(kc, code, **kw) -> str:
    cell = execute(kc, code, **kw)
    assert cell.status == "ok", cell.text
    return cell.text


def pump(kc, seconds: float) -> list:
    """The comm messages the kernel sends in the next ``seconds`` (widgets refreshed by the updater)."""
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            continue
        if msg["msg_type"].startswith("comm"):
            out.append((msg["msg_type"], msg["content"]))
    return out


@pytest.fixture(scope="module")
def loaded(kernel):
    km, kc = kernel
    ok(kc, "%load_ext kpgnb")
    ok(kc, "import os, threading, time, kpgnb as kp\nfrom kpgnb.engine import faults\neng = kp.engine()\n"
           "busy_in = eng.input('busy_in', ['x'], rows=[(1,)]); busy_in.advance_to(1)")
    ok(kc, "%%dataflow busy\nbusy_v = df.input('busy_in').count(by='x').view('busy_v')\n")
    return km, kc


def _hold(kc, seconds: int = 8):
    """Make the scheduler busy: every operator step waits on ``gate`` (at most ``seconds``), and one step is
    running now (a new epoch of ``busy_in``)."""
    ok(kc, f"gate = threading.Event()\nfaults.arm('operator_step', times=None, action=lambda: gate.wait({seconds}))\n"
           "busy_in.insert([(int(time.monotonic() * 1000),)]); busy_in.advance_to(busy_in.epoch + 1)\n"
           "t0 = time.monotonic()\nwhile faults.hits('operator_step') == 0 and time.monotonic() - t0 < 20:\n"
           "    time.sleep(0.02)\nassert faults.hits('operator_step') > 0")


def _release(kc):
    ok(kc, "gate.set(); faults.disarm(); eng.wait(busy_v, timeout=30); None")


# -- interrupts -----------------------------------------------------------------------------------------
def test_ctrl_c_in_a_plain_wait_on_a_sleeping_map_cancels_only_it(loaded):
    """README: Ctrl-C in eng.wait(view) cancels the computation it waited for (status ``cancelled`` once
    the running step ends, later waits raise kp.Cancelled); every other dataflow and arrangement carries
    on, and a --replace of the cell computes afresh."""
    km, kc = loaded
    ok(kc, "nap_in = eng.input('nap_in', ['x'], rows=[(i,) for i in range(10)]); nap_in.advance_to(1)")
    ok(kc, "%%dataflow nap_keep\nnap_k = df.input('nap_in').arrange_by('x').export('nap_by_x')\n"
           "nap_kv = df.input('nap_in').count(by='x').view('nap_kv')\n")
    ok(kc, "%%dataflow nap --no-wait\n"
           "def doze(x):\n"
           "    if (x == 9).any():\n"
           "        time.sleep(4)\n"
           "    return x\n"
           "nap_v = df.input('nap_in').map(lambda x: {'x': doze(x)}).view('nap_v')\n")
    cell = execute(kc, "eng.wait(nap_v)", interrupts=(1.0,), km=km)
    assert cell.status == "error" and "KeyboardInterrupt" in cell.text, cell.text
    text = ok(kc, "try:\n    eng.wait(nap_v, timeout=30)\nexcept kp.Cancelled as e:\n    print('CANCELLED', e)\n"
                  "print(eng.dataflows()['nap'], eng.dataflows()['nap_keep'], 'nap_by_x' in eng.catalog())\n"
                  "nap_in.insert([(20,)]); nap_in.advance_to(2); eng.wait(nap_kv, timeout=30)\n"
                  "print(len(nap_kv.to_pandas()))")
    assert "CANCELLED" in text and "cancelled running True" in text and "\n11\n" in text, text
    text = ok(kc, "%%dataflow nap --replace\nnap_v = df.input('nap_in').map(lambda x: {'x': x + 100}).view('nap_v')\n")
    assert "replaced" in text, text
    assert "[109, 120]" in ok(kc, "print(sorted(nap_v.to_pandas()['x'])[-2:])")


def test_ctrl_c_while_a_cells_install_waits_behind_a_busy_scheduler_installs_nothing(loaded):
    """README: an install interrupted by Ctrl-C leaves nothing behind; a cell that fails leaves the notebook's
    names as they were. Here the SIGINT lands while the %%dataflow cell's Install command is queued behind a
    step that holds the scheduler; the cell ran again afterwards installs normally."""
    km, kc = loaded
    ok(kc, "q_in = eng.input('q_in', ['x'], rows=[(i,) for i in range(11)]); q_in.advance_to(1)")
    ok(kc, "%%dataflow q_src\nq_k = df.input('q_in').arrange_by('x').export('q_by_x')\n")
    ok(kc, "q_before = 'kept'")
    _hold(kc)
    try:
        cell = execute(kc, "%%dataflow qd -o q_handle\nq_before = df.use('q_by_x').view('q_before')\n",
                       interrupts=(1.5,), km=km)
    finally:
        _release(kc)
    assert cell.status == "error" and "KeyboardInterrupt" in cell.text, cell.text
    text = ok(kc, "print(repr(q_before), 'qd' in eng.dataflows(), 'q_handle' in dir())")
    assert "'kept' False False" in text, text
    text = ok(kc, "%%dataflow qd -o q_handle\nq_before = df.use('q_by_x').view('q_before')\n")
    assert "installed" in text, text
    assert "running 11" in ok(kc, "print(q_handle.status, len(q_before))")


def test_an_interrupted_follow_loop_loses_no_change(loaded):
    """``for ch in follower`` stopped by Ctrl-C (the only way to leave a follow loop in a notebook): the
    follower goes on from where it was, without gaps or repeats."""
    km, kc = loaded
    ok(kc, "fl_in = eng.input('fl_in', ['k'], rows=[(1,)]); fl_in.advance_to(1)")
    ok(kc, "%%dataflow fl\nfl_v = df.input('fl_in').count(by='k').view('fl_v')\n")
    ok(kc, "fl_f = fl_v.follow(timeout=30)\nfl_seen = [next(fl_f)]")
    cell = execute(kc, "for ch in fl_f:\n    fl_seen.append(ch)\n", interrupts=(1.0,), km=km)
    assert cell.status == "error" and "KeyboardInterrupt" in cell.text, cell.text
    text = ok(kc, "fl_in.insert([(2,), (2,)]); fl_in.advance_to(2)\nfl_seen.append(next(fl_f))\n"
                  "print([sorted(map(tuple, f[['k', 'count', 'time', 'diff']].values.tolist())) for f in fl_seen])")
    assert "[[(1, 1, 0, 1)], [(2, 2, 1, 1)]]" in text, text


def test_a_live_view_paused_and_resumed_by_the_frontend(loaded):
    """README 'Live views': a pause button; while down the table keeps what it shows. Driven as a browser
    does, by comm messages to the ToggleButton's model: an epoch completed while paused does not reach the
    table, resuming redraws it at the new epoch."""
    _, kc = loaded
    ok(kc, "os.environ['KPGNB_LIVE_VIEWS'] = '1'\n"
           "lv_in = eng.input('lv_in', ['x'], rows=[(1,), (2,)]); lv_in.advance_to(1)")
    try:
        ok(kc, "%%dataflow lv\nlv_v = df.input('lv_in').view('lv_v')\n")
        cell = execute(kc, "lv_v")
        opens = {c["comm_id"]: c["data"]["state"] for kind, c in cell.comms if kind == "comm_open"}
        toggle = next(i for i, s in opens.items() if s.get("_model_name") == "ToggleButtonModel")
        header = next(c["comm_id"] for kind, c in cell.comms if "final before epoch 1" in
                      str((c["data"].get("state") or {}).get("value", "")))  # (its first paint)

        def press(value):
            kc.shell_channel.send(kc.session.msg("comm_msg", {
                "comm_id": toggle, "data": {"method": "update", "state": {"value": value}, "buffer_paths": []}}))

        def values(msgs, comm_id):
            return [c["data"]["state"]["value"] for kind, c in msgs if kind == "comm_msg" and
                    c["comm_id"] == comm_id and "value" in c["data"].get("state", {})]

        press(True)
        seen = pump(kc, 1.0)
        assert any("<i>paused</i>" in v for v in values(seen, header)), seen
        seen = execute(kc, "lv_in.insert([(3,)]); lv_in.advance_to(2); eng.wait(lv_v); None").comms + pump(kc, 1.5)
        assert not [v for v in values(seen, header) if "epoch 2" in v], seen
        press(False)
        seen = pump(kc, 2.0)
        assert any("final before epoch 2" in v and "3 rows" in v and "<i>live</i>" in v
                   for v in values(seen, header)), seen
    finally:
        ok(kc, "os.environ['KPGNB_LIVE_VIEWS'] = '0'")


# -- bugs ---------------------------------------------------------------------------------------------------
def test_bug_ctrl_c_twice_in_a_datalog_cell_with_facts_leaves_its_facts_input(loaded):
    """README: an install interrupted by Ctrl-C leaves nothing behind (and kpgnb/cell.py's drop_loaded queues
    its drops so that "a cell interrupted while the engine is busy returns at once, and a second Ctrl-C
    cannot leave an input behind"). A %%datalog cell's ground facts go into a helper input made before the
    install; when the install is interrupted, Program._build's ``_drop_helpers`` calls ``eng.drop_input``
    with wait=True, which waits behind the same busy step: the first Ctrl-C does not return (the cell hangs
    until the step ends) and the second one abandons the drop, so ``dlf#facts.e`` stays in the engine and
    the corrected cell's facts go to ``dlf#facts.e~2``."""
    km, kc = loaded
    _hold(kc, seconds=6)
    try:
        cell = execute(kc, "%%datalog dlf\ne(1).\ne(2).\nr(x) :- e(x).\n", interrupts=(1.5, 3.0), km=km)
    finally:
        _release(kc)
    assert cell.status == "error" and "KeyboardInterrupt" in cell.text, cell.text
    text = ok(kc, "print(sorted(n for n in eng.inputs() if n.startswith('dlf')), 'dlf' in eng.dataflows())")
    assert "[] False" in text, text


def test_bug_ctrl_c_twice_in_a_goal_leaves_its_asked_input(loaded):
    """The same defect in Datalog goals: GoalQuery.__init__ creates ``NAME.goalK#asked`` before installing
    the goal's dataflow and, on any failure, removes it with a waiting ``eng.drop_input``; interrupted twice
    behind a busy step, the input stays in the engine (read by no dataflow) for the life of the kernel."""
    km, kc = loaded
    ok(kc, "gq_in = eng.input('gq_in', ['src', 'dst'], rows=[(1, 2), (2, 3)]); gq_in.advance_to(1)")
    ok(kc, "%%datalog gq -o gq_prog --inputs edge=gq_in\ntc(x, y) :- edge(x, y).\ntc(x, y) :- tc(x, z), edge(z, y).\n")
    _hold(kc, seconds=6)
    try:
        cell = execute(kc, "gq_goal = gq_prog.goal('tc(?, _)')", interrupts=(1.5, 3.0), km=km)
    finally:
        _release(kc)
    assert cell.status == "error" and "KeyboardInterrupt" in cell.text, cell.text
    text = ok(kc, "print(sorted(n for n in eng.inputs() if '#asked' in n), sorted(eng.dataflows()))")
    assert text.startswith("[] "), text
