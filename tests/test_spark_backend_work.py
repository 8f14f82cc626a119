"""The work kp.spark.run does per loop round, counted rather than timed: a user function in a loop body
should see each of the round's rows once. Found by bench.spark_scaleout (issue 15)."""
import sys

import numpy as np
import pandas as pd
import pytest

import kpgnb as kp

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import the tests


def counting_bfs(log_path):
    """BFS whose hop map appends the number of rows it is given to ``log_path`` (from Spark's workers)."""
    def hop(dst, dist):
        with open(log_path, "a") as f:
            f.write(f"{len(dst)}\n")
        return {"node": dst, "dist": dist + 1}

    def build(df):
        edges, roots = df.input("edges"), df.input("roots")
        start = roots.map(lambda node: {"node": node, "dist": node * 0})
        return start.iterate(lambda d: d.join(edges, left_on="node", right_on="src").map(hop)
                             .concat(start).min(by="node", col="dist")).view("bfs")
    return build


@pytest.mark.xfail(strict=True, reason="the insert-only min/max path builds its + and - rows as two branches "
                                       "of a union over the same uncached change (_ScopeRun.reduce), so all "
                                       "since the last checkpoint, the hop map included, runs twice")
def test_a_loop_body_map_sees_each_row_once(spark, tmp_path):
    # a path 0 -> 1 -> 2 -> 3 -> 4 from root 0: the join gives one row in each of rounds 0-3, none in round 4
    log = tmp_path / "hop.log"
    edges = spark.createDataFrame(pd.DataFrame({"src": [0, 1, 2, 3], "dst": [1, 2, 3, 4]}).astype("int64"))
    roots = spark.createDataFrame(pd.DataFrame({"node": [0]}).astype("int64"))
    out = kp.spark.run(counting_bfs(str(log)), {"edges": edges, "roots": roots}, spark=spark)
    got = out["bfs"].toPandas().sort_values("node")
    assert got["node"].tolist() == [0, 1, 2, 3, 4] and got["dist"].tolist() == [0, 1, 2, 3, 4]
    rows = np.array([int(x) for x in log.read_text().split()]) if log.exists() else np.zeros(0, int)
    assert rows.sum() == 4, f"the hop map saw {rows.sum()} rows in {len(rows)} batches; 4 rows reach it"
