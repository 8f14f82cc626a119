"""Fixes of session 53: a follower of a view that reads a trace outliving the view (an input's arrangement,
or one another dataflow exports) took that trace's appends after its dataflow was dropped, so a change
writer's ``wait`` claimed epochs whose changes were never the view's."""
import pytest

import kpgnb as kp


def _frames(follower):
    out = []
    for frame in follower:
        out.append(frame)
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("over", ["input", "export"])
def test_a_dropped_views_follower_takes_nothing_after_the_drop(workers, over):
    with kp.Engine(workers=workers) as eng:
        t = eng.input("t", ["k"], rows=[(1,), (2,)])
        t.advance_to(1)
        if over == "export":
            with eng.dataflow("idx") as df:
                df.input("t").arrange_by("k").export("t_by_k")
        with eng.dataflow("q") as df:
            src = df.input("t") if over == "input" else df.use("t_by_k")
            v = src.view("v")
        eng.wait(v, timeout=60)
        f = v.follow(timeout=30)
        first = next(f)
        assert sorted(first["k"].tolist()) == [1, 2]
        eng.drop("q")
        t.insert([(3,)])
        t.advance_to(5)
        eng.wait(timeout=60)
        assert _frames(f) == []          # ended: no frame holds the row inserted after the drop
        assert f.epoch == 1              # and it saw no epoch complete after it
