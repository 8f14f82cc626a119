"""The extension in a real Jupyter kernel (jupyter_client): Ctrl-C (the kernel's interrupt) during a long
``%dataflow wait``, the engine surviving ``%reset``, and output from engine threads reaching the cell
that installed the dataflow (or subscribed), never the cell that happens to run."""
import os
import queue
import time

import pytest
from jupyter_client.manager import start_new_kernel


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_new_kernel(kernel_name="python3", env=dict(os.environ, KPGNB_WORKERS="2"))
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def execute(kc, code, timeout=180, on_start=None):
    """Run a cell; (its msg_id, its status, every output message seen meanwhile, as (parent msg_id, kind,
    text))."""
    msg_id = kc.execute(code)
    if on_start is not None:
        on_start()
    outs = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
        parent = msg["parent_header"].get("msg_id")
        kind = msg["msg_type"]
        if kind == "status" and parent == msg_id and msg["content"]["execution_state"] == "idle":
            break
        if kind == "stream":
            outs.append((parent, kind, msg["content"]["text"]))
        elif kind == "error":
            outs.append((parent, kind, msg["content"]["ename"] + ": " + msg["content"]["evalue"]))
        elif kind in ("execute_result", "display_data"):
            outs.append((parent, kind, msg["content"]["data"].get("text/plain", "")))
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    return msg_id, reply["content"]["status"], outs


def drain(kc, seconds=1.0):
    out = []
    try:
        while True:
            msg = kc.get_iopub_msg(timeout=seconds)
            if msg["msg_type"] == "stream":
                out.append((msg["parent_header"].get("msg_id"), "stream", msg["content"]["text"]))
    except queue.Empty:
        return out


def test_load_then_interrupt_a_long_wait(kernel):
    km, kc = kernel
    _, status, outs = execute(kc, "%load_ext kpgnb")
    assert status == "ok" and any("kpgnb:" in t for _, _, t in outs)
    _, status, outs = execute(kc, """
import time, kpgnb as kp
slow_in = kp.engine().input("slow_in", ["x"])
slow_in.insert([(i,) for i in range(10)])
slow_in.advance_to(1)
""")
    assert status == "ok", outs
    _, status, outs = execute(kc, """%%dataflow slow --no-wait
def nap(x):
    if (x == 9).any():
        time.sleep(12)  # (long enough that the interrupt below lands in the wait, even under load)
    return x
slow = df.input("slow_in").map(lambda x: {"x": nap(x)}).view("slow")
""")
    assert status == "ok", outs
    t0 = time.monotonic()
    _, status, outs = execute(kc, "%dataflow wait slow", on_start=lambda: (time.sleep(2.0), km.interrupt_kernel()))
    assert time.monotonic() - t0 < 11  # a hang check: control came back before the nap ended
    text = "".join(t for _, _, t in outs)
    assert status == "error" and "KeyboardInterrupt" in text and "still installed and computing" in text, outs
    _, status, outs = execute(kc, "%dataflow wait slow\nprint(sorted(slow.to_pandas()['x']))")
    assert status == "ok" and "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in "".join(t for _, _, t in outs), outs


def test_engine_survives_reset(kernel):
    _, kc = kernel
    execute(kc, "%load_ext kpgnb")
    execute(kc, "import kpgnb as kp\nkeep_in = kp.engine().input('keep_in', ['k'])\nkeep_in.insert([(1,), (2,)])\n"
                "keep_in.advance_to(1)")
    _, status, outs = execute(kc, "%%dataflow keep\nkept = df.input('keep_in').view('kept')\n")
    assert status == "ok", outs
    _, status, _ = execute(kc, "%reset -f")
    assert status == "ok"
    _, status, outs = execute(kc, "import kpgnb as kp\nprint(sorted(kp.engine().dataflows()), "
                                  "sorted(kp.engine().inputs()))")
    text = "".join(t for _, _, t in outs)
    assert status == "ok" and "'keep'" in text and "'keep_in'" in text, outs


def test_thread_output_reaches_the_cell_that_caused_it(kernel):
    _, kc = kernel
    execute(kc, "%load_ext kpgnb")
    execute(kc, "import kpgnb as kp\nloud_in = kp.engine().input('loud_in', ['a'])\nloud_in.insert([(1,)])\n"
                "loud_in.advance_to(1)")
    install_id, status, outs = execute(kc, """%%dataflow loud
def shout(a):
    if (a > 0).any():
        print("FROM-MAP", a.max())
    return a
loud = df.input("loud_in").map(lambda a: {"a": shout(a)}).view("loud")
""")
    assert status == "ok", outs
    sub_id, status, outs = execute(kc, "sub = loud.subscribe(lambda ch: print('FROM-SUB', len(ch)))")
    assert status == "ok", outs
    later_id, status, outs = execute(kc, "loud_in.insert([(5,)]); loud_in.advance_to(2); kp.engine().wait(loud)\n"
                                         "import time; time.sleep(0.5)\nprint('LATER-CELL')")
    assert status == "ok", outs
    seen = outs + drain(kc)
    by_parent: dict = {}
    for parent, _, text in seen:
        by_parent.setdefault(parent, "")
        by_parent[parent] += text
    assert "FROM-MAP 5" in by_parent.get(install_id, ""), seen
    assert "FROM-SUB" in by_parent.get(sub_id, ""), seen
    assert "LATER-CELL" in by_parent[later_id]
    assert "FROM-MAP" not in by_parent[later_id] and "FROM-SUB" not in by_parent[later_id], seen
