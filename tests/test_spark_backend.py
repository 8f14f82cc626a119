"""kpgnb.spark.run: the same builder function evaluated as Spark jobs gives what the engine's views hold.

The oracle suite's random programs (every operator, loops, nested loops, mutual recursion, delayed entry,
max_rounds) run on both with the same inputs, multiplicities and retractions included (kpgnb.graphs'
algorithms over random graphs: test_spark_backend_attack.py); an operator Spark cannot run is refused
before any job."""
import sys
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from numba import njit

import kpgnb as kp

import reference
from reference import COLS, build, evaluate, random_program, random_updates

cloudpickle = pytest.importorskip("pyspark.cloudpickle")
cloudpickle.register_pickle_by_value(reference)  # Spark's workers cannot import the tests' modules
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _inputs(seed: int, n: int = 14, positive: bool = False):
    """Random inputs A and B over the small domain, as (row -> multiplicity) Counters with retractions
    (unless ``positive``: a loop whose body joins with a negative row need not converge)."""
    rng = np.random.default_rng(seed)
    state = {}
    for name in ("A", "B"):
        rows, diffs = random_updates(rng, n)
        c = Counter()
        for r, d in zip(rows, diffs):
            c[r] += d
        state[name] = Counter({r: abs(m) if positive else m for r, m in c.items() if m})
    return state


def _frame(c: Counter) -> pd.DataFrame:
    return pd.DataFrame({"a": [r[0] for r in c], "b": [r[1] for r in c], "diff": list(c.values())},
                        columns=["a", "b", "diff"]).astype("int64")


def _engine(prog, state, workers=2) -> Counter:
    with kp.Engine(workers=workers) as eng:
        for name, c in state.items():
            s = eng.input(name, COLS)
            if c:
                s.update(list(c), list(c.values()))
            s.advance_to(1)
        with eng.dataflow("p") as df:
            view = build(prog, df).view("out")
        eng.wait(view)
        cols = view.columns(diffs=True)
        return Counter({(int(a), int(b)): int(d) for a, b, d in zip(cols["a"], cols["b"], cols["diff"]) if d})


def _spark(prog, state, spark) -> Counter:
    inputs = {n: spark.createDataFrame(_frame(c), "a long, b long, diff long") for n, c in state.items()}
    out = kp.spark.run(lambda df: build(prog, df).view("out"), inputs, spark=spark, diff_col="diff", diffs=True)
    rows = out["out"].collect()
    return Counter({(r["a"], r["b"]): r["diff"] for r in rows})


def both_ways(prog, seed, spark, positive=False):
    state = _inputs(seed, positive=positive)
    want = evaluate(prog, state)
    assert _engine(prog, state) == want, prog
    assert _spark(prog, state, spark) == want, prog


@pytest.mark.parametrize("seed", range(12))
def test_random_programs(seed, spark):
    rng = np.random.default_rng(7000 + seed)
    both_ways(random_program(rng, depth=3), seed, spark)


def test_every_operator_at_once(spark):
    """Every unary and binary operator of the oracle suite over inputs with retractions, in one job graph."""
    from reference import BINARY, UNARY
    prog = ("input", "A")
    for i, op in enumerate(UNARY):
        leaf = (op, ("input", "A"), 2) if op == "topk" else (op, ("input", "A"))
        prog = (BINARY[i % len(BINARY)], prog, leaf) if i % 2 else ("concat", prog, leaf)
    for seed in range(2):
        both_ways(prog, seed, spark)


def test_nested_loops_mutual_recursion_and_delays(spark):
    inner = ("iterate", ("var", 0), ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("var", 1)))), None)
    nested = ("iterate", ("input", "A"), ("distinct", ("concat", ("var", 0), ("swap", inner))), None)
    mutual = ("mutual", ("input", "A"), ("input", "B"),
              ("distinct", ("concat", ("var", 0), ("join", ("var", 1), ("input", "A")))),
              ("distinct", ("concat", ("var", 1), ("swap", ("var", 0)))), 4)
    delayed = ("iterate", ("input", "B"),
               ("distinct", ("concat", ("var", 0), ("join", ("var", 0), ("delay", ("input", "A"))))), None)
    capped = ("iterate", ("input", "A"), ("concat", ("var", 0), ("mix", ("var", 0))), 3)
    for prog in (nested, mutual, delayed, capped):
        both_ways(prog, 3, spark, positive=True)


DATALOG = """
.decl edge(src: int, dst: int)
node(x) :- edge(x, _).
node(y) :- edge(_, y).
root(0).
reach(y) :- root(y).
reach(y) :- reach(x), edge(x, y).
unreached(x) :- node(x), !reach(x).
sp(y, min<d>) :- root(y), d = 0.
sp(y, min<d>) :- sp(x, d1), edge(x, y), d = d1 + 1.
wsp(y, min<d>) :- root(y), d = 0.
wsp(y, min<d>) :- wsp(x, d1), edge(x, y), d = d1 + x % 5 + 1.   // delayed by distance (DelayOp)
cc(x, min<l>) :- node(x), l = x.
cc(y, min<l>) :- cc(x, l), edge(x, y).
size(l, count<x>) :- cc(x, l).
seven(x) :- x = 7.
"""


def test_datalog_program(spark):
    """kp.spark.datalog: the same program (recursion, negation, recursive min, count, facts, a rule with no
    atom) gives every derived relation the engine's program gives."""
    rng = np.random.default_rng(3)
    edge = pd.DataFrame({"src": rng.integers(0, 25, 40), "dst": rng.integers(0, 25, 40)})
    out = kp.spark.datalog(DATALOG, {"edge": spark.createDataFrame(edge)})
    with kp.Engine(workers=2) as eng:
        prog = eng.datalog(DATALOG, inputs={"edge": edge})
        assert sorted(out) == sorted(prog.relations)
        for pred, sdf in out.items():
            eng.wait(prog[pred])
            want = prog[pred].to_pandas()
            got = sdf.toPandas()
            assert list(got.columns) == list(want.columns), pred
            assert sorted(map(tuple, got.values.tolist())) == sorted(map(tuple, want.values.tolist())), pred


def test_a_failing_user_function_is_named(spark):
    """A user function that raises in a Spark worker is a DataflowError naming its operator and line,
    whichever Spark call first runs it: with adaptive execution on (Spark's default),
    localCheckpoint(eager=False) already runs the shuffle stages below it."""
    def build(df):
        def fails(src):
            if len(src):  # the empty trial batch that learns the output columns passes
                raise ZeroDivisionError("boom")
            return {"x": src}
        return df.input("edges").map(fails).view("x")

    edges = spark.createDataFrame([(1, 2), (2, 3)], "src long, dst long")
    with pytest.raises(kp.DataflowError, match=r"on Spark, map \(defined at .*\): ZeroDivisionError: boom"):
        kp.spark.run(build, inputs={"edges": edges}, spark=spark)["x"].collect()


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


def test_a_loop_body_map_sees_each_row_once(spark, tmp_path):
    """Work counted, not timed: each round's rows reach a loop body's user function once."""
    # a path 0 -> 1 -> 2 -> 3 -> 4 from root 0: the join gives one row in each of rounds 0-3, none in round 4
    log = tmp_path / "hop.log"
    edges = spark.createDataFrame(pd.DataFrame({"src": [0, 1, 2, 3], "dst": [1, 2, 3, 4]}).astype("int64"))
    roots = spark.createDataFrame(pd.DataFrame({"node": [0]}).astype("int64"))
    out = kp.spark.run(counting_bfs(str(log)), {"edges": edges, "roots": roots}, spark=spark)
    got = out["bfs"].toPandas().sort_values("node")
    assert got["node"].tolist() == [0, 1, 2, 3, 4] and got["dist"].tolist() == [0, 1, 2, 3, 4]
    rows = np.array([int(x) for x in log.read_text().split()]) if log.exists() else np.zeros(0, int)
    assert rows.sum() == 4, f"the hop map saw {rows.sum()} rows in {len(rows)} batches; 4 rows reach it"


# -- attack s32 ---------------------------------------------------------------------------------------------

@njit
def _largest_string(vals, counts):
    """A user reduce: the group's largest string (ids follow string order) and how many values it has."""
    out = np.empty((1, 2), np.int64)
    out[0, 0] = vals[vals.shape[0] - 1, 0]
    out[0, 1] = vals.shape[0]
    return out, np.ones(1, np.int64)


def _by_largest(df):
    return df.input("T").reduce(by="k", fn=_largest_string, columns=["s"],
                                out={"s": "str", "n": "int64"}).view("out")


def test_user_reduce_strings_that_differ_by_trailing_nuls_stay_apart(spark):
    """"a" and "a\\x00" are two values: a user reduce on Spark saw one (NumPy's fixed-width str drops
    trailing NULs) and returned it without its NUL, where the engine returns the value as it is."""
    frame = pd.DataFrame({"k": [1, 1, 2, 2], "s": ["a", "a\x00", "x\x00\x00", "x"]})
    want = [(1, "a\x00", 2), (2, "x\x00\x00", 2)]
    with kp.Engine(workers=1) as eng:
        eng.input("T", ["k", "s"], ["int64", "str"], rows=frame).advance_to(1)
        with eng.dataflow("q") as df:
            v = _by_largest(df)
        eng.wait(v)
        assert sorted(map(tuple, v.to_pandas().values.tolist())) == want
    out = kp.spark.run(_by_largest, {"T": frame}, spark=spark)
    assert sorted(tuple(r) for r in out["out"].collect()) == want


def test_pandas_inputs_convert_as_the_engine_does(spark):
    """A nullable Int64 column with <NA> became a float column holding NaN (no error); an object column
    of bools or ints, which the engine takes, was refused as "not int, float, bool or str"."""
    same = lambda df: df.input("T").view("out")  # noqa: E731
    na = pd.DataFrame({"d": pd.array([1, None], dtype="Int64")})
    with pytest.raises(kp.SchemaError, match=r"input 'T': column 'd' holds a null"):
        kp.spark.run(same, {"T": na}, spark=spark)["out"].collect()
    objects = pd.DataFrame({"b": np.array([True, False], dtype=object), "i": np.array([3, -4], dtype=object)})
    got = kp.spark.run(same, {"T": objects}, spark=spark)["out"].toPandas()
    assert sorted(zip(got["b"], got["i"])) == [(False, -4), (True, 3)]
    from decimal import Decimal
    with pytest.raises(kp.SchemaError, match=r"column 'T.d' has Arrow type decimal"):
        kp.spark.run(same, {"T": pd.DataFrame({"d": [Decimal("1.5")]})}, spark=spark)


def test_input_columns_that_differ_only_by_case_are_two_columns(spark):
    """Spark resolves names regardless of case: reading "x" of a frame with "x" and "X" failed with a raw
    AMBIGUOUS_REFERENCE. The engine takes them as two columns; so does the Spark backend now."""
    sdf = spark.sql("select 1 as x, 2 as X, 3 as diff")
    out = kp.spark.run(lambda df: df.input("T").map(lambda x, X: {"s": x * 10 + X}).view("out"), {"T": sdf},
                       spark=spark, diff_col="diff", diffs=True)
    assert [tuple(r) for r in out["out"].collect()] == [(12, 3)]
    twice = spark.sql("select 1 as x, 2 as x")
    with pytest.raises(kp.SchemaError, match=r"two columns named 'x'"):
        kp.spark.run(lambda df: df.input("T").view("out"), {"T": twice}, spark=spark)


def test_pandas_inputs_with_two_columns_of_one_name_or_nan_in_objects(spark):
    """A pandas frame with two columns of one name failed with an AttributeError (frame[c] is a frame);
    it is refused naming the column. An object column of floats with NaN was refused as a null, where the
    engine keeps NaN as a float value; None in it is still a null."""
    same = lambda df: df.input("T").view("out")  # noqa: E731
    twice = pd.DataFrame([[1, 2]], columns=["x", "x"])
    with pytest.raises(kp.SchemaError, match=r"input 'T' has two columns named 'x'"):
        kp.spark.run(same, {"T": twice}, spark=spark)
    objects = pd.DataFrame({"k": [1, 2], "f": np.array([1.5, np.nan], dtype=object)})
    with kp.Engine(workers=1) as eng:
        eng.input("T", ["k", "f"], ["int64", "float64"], rows=objects).advance_to(1)
        with eng.dataflow("q") as df:
            v = same(df)
        eng.wait(v)
        want = v.to_pandas().sort_values("k")
    got = kp.spark.run(same, {"T": objects}, spark=spark)["out"].toPandas().sort_values("k")
    assert got["k"].tolist() == want["k"].tolist() == [1, 2]
    assert got["f"].iloc[0] == 1.5 and np.isnan(got["f"].iloc[1]) and np.isnan(want["f"].iloc[1])
    nulls = pd.DataFrame({"f": np.array([1.5, None], dtype=object)})
    with pytest.raises(kp.SchemaError, match=r"column 'f' holds a null"):
        kp.spark.run(same, {"T": nulls}, spark=spark)["out"].collect()


def test_pandas_str_nan_big_object_ints_and_arrow_tables(spark):
    """pandas' missing string (NaN in a str column) got "is not int, float, bool or str: Expected bytes",
    where the engine says the column holds a null; an object int past int64 a raw OverflowError; an Arrow
    table, which the engine takes, an AttributeError. Each as the engine takes it now."""
    import pyarrow as pa
    same = lambda df: df.input("T").view("out")  # noqa: E731
    with pytest.raises(kp.SchemaError, match=r"column 's' holds a null"):
        kp.spark.run(same, {"T": pd.DataFrame({"s": ["a", np.nan]})}, spark=spark)["out"].collect()
    big = pd.DataFrame({"k": np.array([1, 2 ** 63], dtype=object)})
    with pytest.raises(kp.SchemaError, match=r"column 'k' holds an int outside int64"):
        kp.spark.run(same, {"T": big}, spark=spark)
    out = kp.spark.run(same, {"T": pa.table({"k": [2, 1], "s": ["x", "y"]})}, spark=spark)["out"].toPandas()
    assert sorted(zip(out["k"], out["s"])) == [(1, "y"), (2, "x")]
