"""Scale out on Spark: the operator graph a builder function records, evaluated as Spark DataFrame jobs
(``kpgnb.spark.run``; DESIGN.md sections 4 and 6).

The builder function is the one a user calls inside ``with eng.dataflow(...) as df``. It runs against a
recording builder over empty inputs with the DataFrames' schemas, so every check the engine makes (column
names, dtypes, user function outputs) happens here too, before any Spark job. The recorded operators are
then translated one by one:

- A collection is a DataFrame of its columns, named by position (``_c0``, ``_c1``, ...), and an int64
  multiplicity ``_d``; rows are consolidated (``groupBy`` all columns, sum ``_d``, drop zeros) where an
  operator's meaning depends on it (reductions, the loop's change test), so ``negate``, ``antijoin`` and
  ``threshold`` mean what they mean in the engine.
- map / filter / flat_map run the same vectorized user functions per Arrow batch (``mapInArrow``), except
  that a map or filter function of plain arithmetic becomes a Spark expression (``spark_expressions``,
  traced once on the driver) and its rows stay in the JVM; join is
  a DataFrame join whose multiplicity is the product; the reduce family is ``groupBy().agg`` or a window
  (``top_k``, ``argmin``), and a user ``@njit`` reduce runs per group through ``applyInArrow``.
- A loop is a driver loop of semi-naive rounds. In round r every collection in the loop has a change
  (delta): linear operators map it, a join is bilinear (dA x B_old + A_new x dB), a reduction recomputes
  only the keys whose input changed (and min/max over insert-only input just compare with the old
  result). A variable's change in round r+1 is its result's change in round r (consolidated), plus its
  initial value's; the loop ends when a round changes no variable (or at ``max_rounds``, which drops
  feedback as the engine does). A loop nested in a loop body runs to its fixed point in every round of
  the outer one. State kept across rounds (the changes, and the values joins and reductions read) is
  ``localCheckpoint``-ed, so lineage never grows with the rounds; a value read with many pieces is merged
  into one. A checkpoint gets its real size as Spark's estimate (so small changes are broadcast) and its
  partitioning by keys when it has one.

Inputs are static: the result is what the engine's views hold once every input row is loaded.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .engine.builder import DataflowBuilder
from .engine.collection import Collection
from .engine.columns import Schema, check_flag, is_int
from .engine.errors import ArgumentTypeError, DataflowError, SchemaError
from .engine.inputs import DIFF_LIMIT, arrow_dtype
from .engine.kernels import reduce as rk
from .engine.operators.arrange import ArrangeOp, ImportOp, SinkOp
from .engine.operators.basic import (ConcatOp, DelayOp, EmptyOp, EnterArrangedOp, EnterAtOp, EnterOp, FeedbackOp,
                                     FilterOp, FlatMapOp, FlattenOp, LeaveOp, MapOp, NegateOp, ProjectOp,
                                     VariableOp)
from .engine.operators.join import JoinOp
from .engine.operators.reduce import USER, ReduceOp
from .engine.view import View
from .spark_expressions import trace
from .spark_workers import D, MARK, RND, SCHEMA_MARK, Threshold, UserBatches, UserReduce, c as _c, cols as _cols

__all__ = ["run", "Plan", "record"]


def _spark_type(dtype: str):
    from pyspark.sql import types as T
    return {"int64": T.LongType(), "float64": T.DoubleType(), "bool": T.BooleanType(),
            "str": T.StringType()}[dtype]


def _struct(dtypes, extra=(D,)):
    from pyspark.sql import types as T
    return T.StructType([T.StructField(_c(i), _spark_type(d)) for i, d in enumerate(dtypes)]
                        + [T.StructField(e, T.LongType()) for e in extra])


# -- recording the graph ----------------------------------------------------------------------------------

class _Recorder(DataflowBuilder):
    """A builder that records and never installs. Spark has no catalog: ``df.use(name)`` reads the input
    of that name."""

    def use(self, name: str):
        return self.input(name)


@dataclass
class Plan:
    """A recorded dataflow: its operators in build order and its views (name -> View)."""
    ops: list
    views: dict
    inputs: dict  # input name -> Schema


def record(build, schemas: dict, name: str = "spark") -> Plan:
    """Call ``build(df)`` on a recording builder whose inputs have ``schemas`` (name -> Schema). A
    Collection (or a dict of them) returned instead of views becomes views (named ``result`` or by key)."""
    from .engine.runtime import Engine
    with Engine(workers=1) as eng:  # scratch: the builder reads input schemas and the symbol table from it
        for n, s in schemas.items():
            eng.input(n, list(s.names), list(s.dtypes))
        b = _Recorder(eng, name, install=lambda b: None)
        with b:
            ret = build(b)
            if isinstance(ret, Collection):
                ret = {"result": ret}
            if isinstance(ret, dict):
                for k, v in ret.items():
                    if isinstance(v, Collection) and not isinstance(v, View):
                        v.view(str(k))
    if not b.views and isinstance(ret, (list, tuple)) and any(isinstance(v, Collection) for v in ret):
        raise SchemaError(f"the builder function returned a {type(ret).__name__} of collections, which names no "
                          f"view: return one Collection (the view 'result') or a dict of them (view name -> "
                          f"Collection), or call .view(name) on each")
    if not b.views:
        raise SchemaError("the builder function defined no view: call .view(name) on the collections to "
                          "compute (or return one, or a dict name -> collection)")
    plan = Plan(list(b.graph.ops), dict(b.views), dict(schemas))
    _check(plan)
    return plan


_TRANSLATED = (ImportOp, ArrangeOp, FlattenOp, MapOp, FilterOp, FlatMapOp, ProjectOp, ConcatOp, NegateOp,
               JoinOp, ReduceOp, EnterOp, EnterArrangedOp, EnterAtOp, LeaveOp, VariableOp, FeedbackOp,
               EmptyOp, SinkOp, DelayOp)


def _label(op) -> str:
    return f"{op.kind}" + (f" (defined at {op.site})" if op.site is not None else "")


def _refused(op) -> DataflowError:
    where = f" (defined at {op.site})" if op.site is not None else ""
    return DataflowError(f"the Spark backend cannot translate the {op.kind} operator{where}")


def _check(plan: Plan):
    """Refuse, before any job runs, an operator the backend cannot translate."""
    for op in _needed(plan):
        if not isinstance(op, _TRANSLATED):
            hint = {"inspect": "it calls a function with every batch on the driver's side; Spark runs "
                               "functions on its executors, so drop .inspect() for Spark",
                    "ife": "memory modes are the in-kernel engine's; build it with memory=\"full\" (the "
                           "same collection), which Spark runs as a loop"}.get(op.kind, "")
            err = _refused(op)
            raise DataflowError(f"{err}: {hint}" if hint else str(err))


def _needed(plan: Plan) -> list:
    """The operators the views depend on, in build order (a Variable's feedback included)."""
    seen = set()
    stack = [v.op for v in plan.views.values()]
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(op.inputs)
    return [op for op in plan.ops if id(op) in seen]


def _dtypes(op) -> list:
    while op.schema is None:  # a flattened arrangement, a feedback edge, a sink: their input's columns
        op = op.inputs[0]
    return list(op.schema.dtypes)


def _kk(op) -> int:
    """The number of key columns of an arranged operator's output."""
    while isinstance(op, EnterArrangedOp):
        op = op.inputs[0]
    if isinstance(op, ArrangeOp):
        return len(op.key_idx)
    if isinstance(op, ReduceOp):
        return op.out_trace.kk
    return op.trace.kk


# -- the driver ---------------------------------------------------------------------------------------------

@dataclass
class Delta:
    """A collection's change in one round: its DataFrame, whether every multiplicity in it is known to be
    positive (insertions only: what lets min/max skip re-reading their input), and whether it is
    checkpointed (then it is also consolidated, and not empty)."""
    df: object
    positive: bool
    materialized: bool = False


def _union(parts):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    df = parts[0].df
    for p in parts[1:]:
        df = df.unionAll(p.df)
    return Delta(df, all(p.positive for p in parts))


def _checkpointed(df, rows: int, width: int, keys: int = 0, partitions: int = 0):
    """A checkpointed DataFrame with its own size estimate (``rows`` rows of ``width`` 8-byte columns) and,
    when it was hash-partitioned by its first ``keys`` columns into ``partitions``, that partitioning.

    A checkpoint keeps the estimate of the plan it replaced, and Spark estimates a join as the product of
    its inputs' sizes. Kept across a loop's rounds, estimates compound (squaring where both sides of a join
    change every round: transitive closure, scc) until planning a round spends minutes multiplying
    BigIntegers of millions of bits. An honest estimate also lets Spark broadcast a small change. And a
    checkpoint forgets how its rows are partitioned (under adaptive execution): declared again, a join or
    an aggregation by those keys does not shuffle them again."""
    import warnings
    from pyspark.sql import DataFrame
    try:
        plan = df._jdf.logicalPlan()
        if plan.getClass().getSimpleName() != "LogicalRDD":
            return df
        session, _, constraints, from_checkpoint = (plan.otherCopyArgs().apply(i) for i in range(4))
        jvm = df.sparkSession._jvm
        # Spark's Statistics takes a scala BigInt, which Py4J cannot hand over: take a Range's, 8 bytes a row
        stats = session.range(0, max(1, rows) * width).queryExecution().optimizedPlan().stats()
        partitioning = plan.outputPartitioning()
        if keys and plan.rdd().getNumPartitions() == partitions:
            partitioning = jvm.org.apache.spark.sql.catalyst.plans.physical.HashPartitioning(
                plan.output().take(keys), partitions)
        plan = plan.copy(plan.output(), plan.rdd(), partitioning, plan.outputOrdering(), plan.isStreaming(),
                         plan.stream(), session, jvm.scala.Some(stats), constraints, from_checkpoint)
        return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(session, plan), df.sparkSession)
    except Exception as err:  # noqa: BLE001 - a Spark whose internals differ: plan with its own estimate
        warnings.warn(f"kpgnb.spark.run cannot set a checkpoint's size estimate on this Spark "
                      f"({type(err).__name__}); a loop whose joins change on both sides may plan slowly")
        return df


def _consolidate(df, n, label: str = "kp.spark.run"):
    from pyspark.sql import functions as F
    g = df.groupBy(*_cols(n)) if n else df.groupBy()
    return g.agg(_multiplicity(F.sum(F.col(D).cast(_WIDE)), label).alias(D)).filter(F.col(D) != 0)


_WIDE = "decimal(38,0)"  # multiplicities summed or multiplied exactly, whatever spark.sql.ansi.enabled says


def _multiplicity(wide, label: str):
    """A multiplicity computed wide (a sum or a product) as a long, or the engine's error where it reaches
    2**62: Spark's long arithmetic would wrap (ANSI mode off) or pass values the engine refuses."""
    from pyspark.sql import functions as F
    over = F.raise_error(F.lit(f"{MARK}{label}: OverflowError: a row's multiplicity reaches 2**62 or more "
                               f"(equal updates summed, or a join's product); int64 multiplicities would wrap"))
    return F.when(F.abs(wide) >= F.lit(2 ** 62).cast(_WIDE), over.cast("long")).otherwise(wide.cast("long"))


def _exact_int_sum(v, label: str):
    """The aggregate sum of a long column ``v`` times the multiplicities, exact as the engine's: a total
    outside int64 fails the job (whatever spark.sql.ansi.enabled says), a total in range is exact whatever
    its partial sums. A product (below 2**125) fits decimal(38,0) but sums of a few do not, so each value is
    split as hi * 2**32 + lo (0 <= lo < 2**32): the sums of hi * d and lo * d (each below 2**94) fit
    decimal(38,0) for up to 2**32 rows a group; the total is then top * 2**32 + r with 0 <= r < 2**32,
    in int64 exactly when -2**31 <= top < 2**31. A part sum that overflows anyway (null with ANSI off)
    fails too, never a group silently gone."""
    from pyspark.sql import functions as F
    b = F.lit(1 << 32).cast(_WIDE)
    d = F.col(D).cast(_WIDE)
    hi = F.sum(F.shiftright(v, 32).cast(_WIDE) * d)
    lo = F.sum(v.bitwiseAND(F.lit((1 << 32) - 1)).cast(_WIDE) * d)
    r = F.pmod(lo, b)
    top = hi + ((lo - r) / b).cast(_WIDE)  # (an exact division)
    about = hi.cast("double") * float(1 << 32) + lo.cast("double")
    over = F.raise_error(F.concat(F.lit(f"{MARK}{label}: OverflowError: an int64 sum overflows: a group's total "
                                        f"is about "), about.cast("string"),
                                  F.lit(", outside int64; sum a float64 column for such totals")))
    return (F.when(F.count(F.lit(1)) == 0, F.lit(None).cast("long"))  # no rows: no total (Spark's global agg)
            .when(top.isNull() | (top < -(1 << 31)) | (top >= 1 << 31), over.cast("long"))
            .otherwise((top * b + r).cast("long")))


class _Runner:
    """Evaluates a Plan on a SparkSession."""

    def __init__(self, spark, plan: Plan, frames: dict, positive: dict, compact_every: int):
        self.spark = spark
        self.plan = plan
        self.frames = frames          # input name -> DataFrame (_c0.., _d)
        self.positive = positive      # input name -> whether its multiplicities are all 1
        self.compact_every = compact_every
        self.partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        ops = _needed(plan)
        self.by_scope: dict = {}
        for op in ops:
            self.by_scope.setdefault(op.scope, []).append(op)
        self.valued = set()  # operators whose value (not just change) someone reads
        for op in ops:
            if isinstance(op, JoinOp):
                self.valued.update(id(i) for i in op.inputs)
            elif isinstance(op, (ReduceOp, LeaveOp)):
                self.valued.update((id(op), id(op.inputs[0])))
            elif isinstance(op, (EnterOp, EnterArrangedOp, EnterAtOp, SinkOp)):
                self.valued.add(id(op.inputs[0]))
        consumers: dict = {}
        for op in ops:
            for i in op.inputs:
                consumers[id(i)] = consumers.get(id(i), 0) + 1
        self.consumers = consumers
        self.rounds = 0
        self.traced: dict = {}  # id(map or filter op) -> its Spark expressions, or None

    # -- helpers ------------------------------------------------------------------------------------------
    def materialize(self, df, n, op=None) -> Delta | None:
        """Consolidate and checkpoint a change; None if it is empty. An arrangement's rows are partitioned
        by its keys, so that joins on them (every round of a loop, for an arrangement entering it) do not
        shuffle it again."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        keys = _kk(op) if op is not None and op.arranged else 0
        if keys:  # hash-partitioned by keys, which also clusters the consolidation: one shuffle
            df = df.repartition(self.partitions, *_cols(keys))
        seen = Observation()  # filling the checkpoint also tells whether the change is empty, or insertions only
        with _named(op):
            df = _consolidate(df, n).observe(seen, F.count(F.lit(1)).alias("n"), F.min(D).alias("m")) \
                .localCheckpoint(eager=True)
            row = seen.get
        if row["n"] == 0:
            return None
        return Delta(_checkpointed(df, row["n"], n + 1, keys, self.partitions), bool(row["m"] > 0), True)

    def expressions(self, op):
        """A map's or filter's function as Spark expressions, when it is plain arithmetic (traced once);
        else None, and it runs in Python workers."""
        from pyspark.sql import functions as F
        if id(op) not in self.traced:
            self.traced[id(op)] = None if isinstance(op, FlatMapOp) else trace(op, lambda i: F.col(_c(i)))
        return self.traced[id(op)]

    def empty(self, dtypes):
        return self.spark.createDataFrame([], _struct(dtypes))

    # -- scopes -------------------------------------------------------------------------------------------
    def run_scope(self, scope, outer: dict) -> "_ScopeRun":
        s = _ScopeRun(self, scope, outer)
        s.run()
        return s


class _ScopeRun:
    """One scope evaluated round by round (the top level: one round)."""

    def __init__(self, runner: _Runner, scope, outer: dict):
        self.r = runner
        self.scope = scope
        self.ops = runner.by_scope.get(scope, [])
        self.outer = outer            # id(op of the parent scope) -> its value (Delta) this parent round
        self.delta: dict = {}         # id(op) -> Delta | None, this round
        self.pieces: dict = {}        # id(op) -> [Delta]: its value before this round is their sum
        self.fed: dict = {}           # id(FeedbackOp) -> Delta | None: what it feeds into the next round
        self.tagged: dict = {}        # id(EnterAtOp) -> (DataFrame with its rows' rounds, last round)
        self.held: dict = {}          # id(DelayOp) -> [(rows held for later rounds, with their rounds, last
                                      # round, whether every diff is positive)]
        self.children: dict = {}      # child scope -> its _ScopeRun for this round
        self.round = 0

    def run(self):
        root = self.scope.parent is None
        while True:
            self.children = {}
            for op in self.ops:
                d = self.step(op)
                if d is not None and not d.materialized and (
                        self.r.consumers.get(id(op), 0) > 1  # else each reader recomputes it
                        or not root and isinstance(op, (ReduceOp, LeaveOp))):  # read again next round
                    d = self.r.materialize(d.df, len(_dtypes(op)), op)
                self.delta[id(op)] = d
            for op in self.ops:
                if id(op) in self.r.valued and self.delta[id(op)] is not None:
                    self.keep(op, self.delta[id(op)])
            if root:
                return
            self.r.rounds += 1
            nxt = self.round + 1
            for op in self.ops:
                if isinstance(op, FeedbackOp):
                    d = self.delta[id(op.inputs[0])]
                    if op.max_rounds is not None and nxt >= op.max_rounds:
                        d = None
                    if d is not None and not d.materialized:
                        d = self.r.materialize(d.df, len(_dtypes(op)), op)
                    self.fed[id(op)] = d
            if not any(d is not None for d in self.fed.values()):
                # nothing fed back: the next round with work is the first holding rows entered or delayed
                # to it (rounds between are empty: skipping them saves a job each, as the engine skips them)
                nxt = self.next_held(nxt)
                if nxt is None:
                    return
            self.round = nxt

    # -- values -------------------------------------------------------------------------------------------
    def keep(self, op, d: Delta):
        """Add a change to the op's value. Pieces are merged when the value is read (a loop's variable is
        often never read again after its first round, and a min over insertions never reads its input's
        value, whose pieces are every round's join), or when there are very many of them."""
        parts = self.pieces.setdefault(id(op), [])
        parts.append(d)
        if len(parts) > 8 * self.r.compact_every:
            self.value_delta(op, compact=True)

    def value_delta(self, op, compact=False) -> Delta | None:
        """The op's value before this round (the sum of its pieces) as one Delta. Changes kept unevaluated
        are checkpointed together when first read; more than ``compact_every`` pieces, or ``compact``,
        make every piece one."""
        parts = self.pieces.get(id(op), [])
        lazy = [p for p in parts if not p.materialized]
        compact = compact or len(parts) > self.r.compact_every
        if lazy or compact and len(parts) > 1:
            merge = parts if compact else lazy
            m = self.r.materialize(_union(merge).df, len(_dtypes(op)), op)
            parts = [p for p in parts if not any(p is q for q in merge)] + ([m] if m is not None else [])
            self.pieces[id(op)] = parts
        return _union(parts)

    def value_new(self, op) -> Delta | None:
        """The op's value including this round's change."""
        return _union([self.value_delta(op), self.delta.get(id(op))])

    # -- one operator, one round --------------------------------------------------------------------------
    def step(self, op) -> Delta | None:
        from pyspark.sql import functions as F
        ins = [self.delta.get(id(i)) for i in op.inputs]
        if isinstance(op, ImportOp):
            if self.round:
                return None
            return Delta(self.r.frames[op.name], self.r.positive[op.name])
        if isinstance(op, (EnterOp, EnterArrangedOp)):
            return self.outer.get(id(op.inputs[0])) if self.round == 0 else None
        if isinstance(op, EnterAtOp):
            return self.enter_at(op)
        if isinstance(op, DelayOp):
            return self.delay(op)
        if isinstance(op, EmptyOp) or isinstance(op, SinkOp):
            return None
        if isinstance(op, VariableOp):
            fb = self.fed.get(id(op.inputs[1])) if self.round and len(op.inputs) > 1 else None
            return _union([ins[0], fb])
        if isinstance(op, FeedbackOp):
            return None  # what it feeds is taken at the end of the round
        if isinstance(op, LeaveOp):
            return self.leave(op)
        if isinstance(op, JoinOp):
            return self.join(op)
        if isinstance(op, ReduceOp):
            return self.reduce(op)
        if isinstance(op, ConcatOp):
            parts = []
            for d, perm in zip(ins, op.perms):
                if d is not None and perm is not None:
                    d = Delta(d.df.select(*[_c(int(j)) for j in perm], D)
                              .toDF(*_cols(len(perm)), D), d.positive)
                parts.append(d)
            return _union(parts)
        d = ins[0]
        if d is None:
            return None
        if isinstance(op, FlattenOp):
            return d
        if isinstance(op, NegateOp):
            return Delta(d.df.withColumn(D, -F.col(D)), False)
        if isinstance(op, (ProjectOp, ArrangeOp)):
            idx = [int(j) for j in (op.cols if isinstance(op, ProjectOp) else list(op.key_idx) + list(op.val_idx))]
            if idx == list(range(len(_dtypes(op.inputs[0])))):
                return d
            permuted = sorted(idx) == list(range(len(_dtypes(op.inputs[0]))))  # still consolidated
            return Delta(d.df.select(*[F.col(_c(j)).alias(_c(k)) for k, j in enumerate(idx)], D),
                         d.positive, d.materialized and permuted)
        if isinstance(op, (MapOp, FilterOp, FlatMapOp)):
            expr = self.r.expressions(op)
            if isinstance(op, FilterOp) and expr is not None:
                return Delta(d.df.filter(expr), d.positive)
            if expr is not None:
                return Delta(d.df.select(*[e.alias(_c(i)) for i, e in enumerate(expr)], D), d.positive)
            return Delta(d.df.mapInArrow(UserBatches(op, _label(op)), _struct(_dtypes(op))), d.positive)
        raise _refused(op)  # _check refused it before any job

    def enter_at(self, op) -> Delta | None:
        from pyspark.sql import functions as F
        if id(op) not in self.tagged:
            src = self.outer.get(id(op.inputs[0]))
            if src is None:
                self.tagged[id(op)] = (None, -1)
            else:
                schema = _struct(_dtypes(op), (D, RND))
                with _named(op):
                    tagged = src.df.mapInArrow(UserBatches(op, _label(op)), schema).localCheckpoint(eager=False)
                    last = tagged.agg(F.max(RND)).first()[0]
                self.tagged[id(op)] = (tagged, -1 if last is None else int(last))
        tagged, last = self.tagged[id(op)]
        if tagged is None or self.round > last:
            return None
        src = self.outer.get(id(op.inputs[0]))
        return Delta(tagged.filter(F.col(RND) == self.round).drop(RND), src.positive)

    def delay(self, op) -> Delta | None:
        """This round's rows whose round (the op's function) has come, and the rows held for this round."""
        from pyspark.sql import functions as F
        held = self.held.setdefault(id(op), [])
        out = [Delta(t.filter(F.col(RND) == self.round).drop(RND), pos) for t, last, pos in held
               if last >= self.round]
        self.held[id(op)] = [h for h in held if h[1] > self.round]
        d = self.delta.get(id(op.inputs[0]))
        if d is not None:
            with _named(op):
                tagged = d.df.mapInArrow(UserBatches(op, _label(op)), _struct(_dtypes(op), (D, RND))) \
                    .localCheckpoint(eager=False)
                later = tagged.filter(F.col(RND) > self.round)
                last = later.agg(F.max(RND)).first()[0]
            out.append(Delta(tagged.filter(F.col(RND) <= self.round).drop(RND), d.positive))
            if last is not None:
                self.held[id(op)].append((later, int(last), d.positive))
        return _union(out)

    def next_held(self, rnd: int) -> int | None:
        """The first round at or after ``rnd`` for which an ``enter_at`` or a ``delay`` holds rows (one
        small job per such source), or None."""
        from pyspark.sql import functions as F
        frames = [t for t, last in self.tagged.values() if t is not None and last >= rnd] + \
            [t for held in self.held.values() for t, last, _ in held if last >= rnd]
        firsts = [t.filter(F.col(RND) >= rnd).agg(F.min(RND)).first()[0] for t in frames]
        firsts = [int(f) for f in firsts if f is not None]
        return min(firsts) if firsts else None

    def leave(self, op) -> Delta | None:
        child_scope = op.inputs[0].scope
        changed = self.round == 0 or any(self.delta.get(id(e.inputs[0])) is not None
                                         for e in self.r.by_scope.get(child_scope, [])
                                         if isinstance(e, (EnterOp, EnterArrangedOp, EnterAtOp)))
        if not changed:
            return None
        child = self.children.get(child_scope)
        if child is None:
            outer = {}
            for e in self.r.by_scope.get(child_scope, []):
                if isinstance(e, (EnterOp, EnterArrangedOp, EnterAtOp)):
                    src = e.inputs[0]
                    v = self.value_new(src)
                    if v is not None and not v.materialized:
                        v = self.r.materialize(v.df, len(_dtypes(src)), src)
                    outer[id(src)] = v
            child = self.r.run_scope(child_scope, outer)
            self.children[child_scope] = child
        result = child.value_delta(op.inputs[0])
        old = self.value_delta(op)
        n = len(_dtypes(op))
        if old is None:
            return result
        from pyspark.sql import functions as F
        parts = [result, Delta(old.df.withColumn(D, -F.col(D)), False)]
        return Delta(_consolidate(_union(parts).df, n), False)

    def parts(self, op) -> list:
        """The op's value before this round as checkpointed pieces, each partitioned by the op's keys when
        it is an arrangement: a join or a key restriction then shuffles only the other side."""
        self.value_delta(op)
        return list(self.pieces.get(id(op), []))

    def checkpointed(self, op) -> Delta | None:
        """This round's change of ``op``, checkpointed (and kept so) before a second read of it, which would
        otherwise recompute it (its join, its user functions)."""
        d = self.delta.get(id(op))
        if d is not None and not d.materialized:
            d = self.delta[id(op)] = self.r.materialize(d.df, len(_dtypes(op)), op)
        return d

    def join(self, op) -> Delta | None:
        """d(A x B) = dA x B_old + A_new x dB, piece by piece."""
        a, b = op.inputs
        da, db = self.delta.get(id(a)), self.delta.get(id(b))
        if da is not None and db is not None or da is not None and len(self.parts(b)) > 1:
            da = self.checkpointed(a)
        if db is not None and len(self.parts(a)) + (da is not None) > 1:
            db = self.checkpointed(b)
        terms = []
        if da is not None:
            terms += [self._join(op, da, p) for p in self.parts(b)]
        if db is not None:
            terms += [self._join(op, p, db) for p in self.parts(a) + ([da] if da is not None else [])]
        return _union(terms)

    def _join(self, op, left: Delta, right: Delta) -> Delta:
        from pyspark.sql import functions as F
        a, b = op.inputs
        kk, na, nb = _kk(a), len(_dtypes(a)), len(_dtypes(b))
        L = left.df.toDF(*[f"l{i}" for i in range(na)], "ld")
        R = right.df.toDF(*[f"r{i}" for i in range(nb)], "rd")
        if kk:
            j = L.join(R, on=[F.col(f"l{i}") == F.col(f"r{i}") for i in range(kk)])
        else:
            j = L.crossJoin(R)
        out = [F.col(f"l{i}") for i in range(na)] + [F.col(f"r{i}") for i in range(kk, nb)]
        prod = _multiplicity(F.col("ld").cast(_WIDE) * F.col("rd").cast(_WIDE), _label(op))
        j = j.select(*[c.alias(_c(k)) for k, c in enumerate(out)], prod.alias(D))
        return Delta(j, left.positive and right.positive)

    def restricted(self, op, keys_df) -> Delta | None:
        """The op's value before this round, restricted to the keys in ``keys_df`` (unconsolidated)."""
        kk = _kk(op)
        return _union([Delta(p.df.join(keys_df, on=_cols(kk), how="left_semi") if kk else p.df, p.positive)
                       for p in self.parts(op)])

    def reduce(self, op) -> Delta | None:
        """The output changes only at keys whose input changed: recompute those from the input's new
        value, minus their old output. Min and max over insertions only just compare with the old output."""
        from pyspark.sql import functions as F
        src = op.inputs[0]
        d = self.delta.get(id(src))
        if d is None:
            return None
        kk = _kk(op)
        n_out = len(_dtypes(op))
        kept = self.pieces.get(id(src), [])
        if not kept:
            return Delta(self.r_apply(op, d.df), op.spec.op in (rk.COUNT, rk.DISTINCT, rk.SUM, rk.MIN, rk.MAX,
                                                               rk.ARGMIN, rk.ARGMAX, rk.TOPK))
        keys = _cols(kk)
        one = F.lit(1).cast("long")
        if op.spec.op in (rk.MIN, rk.MAX) and d.positive and all(p.positive for p in kept) and kk:
            agg = F.min if op.spec.op == rk.MIN else F.max
            cand = d.df.groupBy(*keys).agg(agg(_c(kk)).alias("new"))
            old = self.value_delta(op)  # whole, not restricted to cand's keys: cand is read once
            if old is None:
                return Delta(cand.select(*keys, F.col("new").alias(_c(kk)), one.alias(D)), True)
            old = (old.df if old.materialized else _consolidate(old.df, n_out)).select(
                *keys, F.col(_c(kk)).alias("old"))
            j = cand.join(old, on=keys, how="left")
            better = (F.col("new") < F.col("old")) if op.spec.op == rk.MIN else (F.col("new") > F.col("old"))
            j = j.filter(F.col("old").isNull() | better)
            # +new and -old in one pass over j (a union of two branches would compute j, the join, twice)
            pm = F.array(F.struct(F.col("new").alias("v"), one.alias("d")),
                         F.struct(F.col("old").alias("v"), (-one).alias("d")))
            rows = j.select(*keys, F.explode(F.filter(pm, lambda x: x["v"].isNotNull())).alias("_pm"))
            return Delta(rows.select(*keys, F.col("_pm.v").alias(_c(kk)), F.col("_pm.d").alias(D)), False)
        d = self.checkpointed(src)  # read three times below
        if d is None:
            return None
        touched = d.df.select(*keys).distinct() if kk else None
        new_in = _union([self.restricted(src, touched), d])
        parts = [Delta(self.r_apply(op, new_in.df), False)]
        old_out = self.restricted(op, touched)
        if old_out is not None:
            parts.append(Delta(old_out.df.withColumn(D, -F.col(D)), False))
        return Delta(_consolidate(_union(parts).df, n_out), False)

    def r_apply(self, op, df):
        """The reduction of ``df`` (rows of key and value columns, any multiplicities) from scratch."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        spec = op.spec
        kk = _kk(op)
        in_dt = _dtypes(op.inputs[0])
        n_in = len(in_dt)
        keys = _cols(kk)
        one = F.lit(1).cast("long").alias(D)
        g = (lambda x: x.groupBy(*keys)) if kk else (lambda x: x.groupBy())
        if spec.op == rk.COUNT:
            c = g(df).agg(_multiplicity(F.sum(F.col(D).cast(_WIDE)), _label(op)).alias("n")).filter(F.col("n") != 0)
            return c.select(*keys, F.col("n").alias(_c(kk)), one)
        if spec.op == rk.DISTINCT:
            return _consolidate(df, n_in, _label(op)).filter(F.col(D) > 0).select(*_cols(n_in), one)
        if spec.op == rk.THRESHOLD:
            c = _consolidate(df, n_in, _label(op))
            return c.mapInArrow(Threshold(op.spec.fn, _label(op)), _struct(in_dt)).filter(F.col(D) != 0)
        c = _consolidate(df, n_in, _label(op))
        if spec.op in (rk.SUM, rk.MIN, rk.MAX):
            v = F.col(_c(kk))
            if spec.op == rk.SUM and spec.float_out:
                agg = g(c).agg(F.sum(v * F.col(D).cast("double")).alias(_c(kk)))
            elif spec.op == rk.SUM:
                agg = g(c).agg(_exact_int_sum(v.cast("long"), _label(op)).alias(_c(kk)))  # bools: 0/1
            else:
                fn = F.min if spec.op == rk.MIN else F.max
                agg = g(c.filter(F.col(D) > 0)).agg(fn(v).alias(_c(kk)))
            # a group has a row only if it has rows; Spark's global aggregate of nothing is one row of null
            return agg.filter(F.col(_c(kk)).isNotNull()).select(*keys, _c(kk), one)
        if spec.op in (rk.ARGMIN, rk.ARGMAX, rk.TOPK):
            first = F.col(_c(kk + spec.col))
            desc = spec.op == rk.ARGMAX or (spec.op == rk.TOPK and spec.desc)
            order = [first.desc() if desc else first.asc()] + [F.col(c).asc() for c in _cols(n_in)[kk:]]
            w = (Window.partitionBy(*keys) if kk else Window.partitionBy()).orderBy(*order)
            pos = c.filter(F.col(D) > 0)
            if spec.op != rk.TOPK:
                return pos.withColumn("_rn", F.row_number().over(w)).filter(F.col("_rn") == 1) \
                    .select(*_cols(n_in), one)
            # summed wide: a long running sum of multiplicities (each below 2**62) would overflow
            run = F.sum(F.col(D).cast(_WIDE)).over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow))
            m = F.least(F.col(D).cast(_WIDE), F.lit(spec.k) - (F.col("_run") - F.col(D)))
            return pos.withColumn("_run", run).withColumn("_m", m).filter(F.col("_m") > 0) \
                .select(*_cols(n_in), F.col("_m").cast("long").alias(D))  # (at most the row's own)
        if spec.op == USER:
            out_dt = _dtypes(op)[kk:]
            fn = UserReduce(op.spec.fn, op.spec.user_float, kk, in_dt[kk:], out_dt, _label(op))
            schema = _struct(in_dt[:kk] + out_dt)
            if kk:
                res = c.groupBy(*keys).applyInArrow(lambda table: fn(table), schema)
            else:  # one group of everything
                res = c.withColumn("_g", F.lit(0)).groupBy("_g").applyInArrow(
                    lambda table: fn(table.drop_columns(["_g"])), schema)
            return _consolidate(res, kk + len(out_dt))
        raise _refused(op)


@contextmanager
def _named(op):
    """A failed Spark job as a DataflowError naming the operator whose function failed (the worker put its
    name after MARK), or else the operator being computed."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - Py4J and PySpark errors alike
        text = str(err)
        m = re.search(re.escape(SCHEMA_MARK) + r"(.*)", text)
        if m:
            raise SchemaError(m.group(1).strip()) from None
        m = re.search(re.escape(MARK) + r"(.*)", text)
        if m:
            raise DataflowError(f"on Spark, {m.group(1).strip()}") from None
        where = f" while computing the {_label(op)} operator" if op is not None else ""
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        raise DataflowError(f"a Spark job failed{where}: {first}") from None


# -- inputs -------------------------------------------------------------------------------------------------

def _arrow_array(v: np.ndarray):
    """A NumPy column in Arrow: None (and pandas' NA in an object column) is null; NaN stays a float value,
    as the engine keeps it."""
    import pyarrow as pa
    if v.dtype != object:
        return pa.array(v)
    try:
        return pa.array(v, from_pandas=False)  # None is null, NaN a value
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(v, from_pandas=True)  # a pd.NA, NaT or a str column's NaN: a null, refused as such


def arrow_input(name: str, frame):
    """A pandas frame (an Arrow table is taken as it is) as an Arrow table of what the engine would take
    from it: NaN stays a float value (Spark's own conversion of pandas makes it null); None, and NA in a
    nullable (extension) column such as Int64, is a null (refused later, as the engine refuses it); an
    object column of str, bool or int values takes their type."""
    import pyarrow as pa

    if not hasattr(frame, "columns"):
        raise SchemaError(f"input {name!r} is a {type(frame).__name__}, not a Spark or pandas DataFrame")
    names = [str(c) for c in (frame.column_names if isinstance(frame, pa.Table) else frame.columns)]
    twice = next((c for c in names if names.count(c) > 1), None)
    if twice is not None:
        raise SchemaError(f"input {name!r} has two columns named {twice!r}; rename or drop one first")
    if isinstance(frame, pa.Table):  # taken as it is, as the engine takes it
        for c, field in zip(names, frame.schema):
            if str(field.type) != "null":
                arrow_dtype(f"{name}.{c}", field.type)
        return pa.table({c: _signed(name, c, frame.column(i)) for i, c in enumerate(names)})
    cols = {}
    for i, c in enumerate(frame.columns):
        series = frame.iloc[:, i]
        try:
            if not isinstance(series.dtype, np.dtype):  # an extension column: Arrow reads its NA as null
                col = pa.array(series, from_pandas=True)
            else:
                col = _arrow_array(series.to_numpy())
        except OverflowError:
            raise SchemaError(f"input {name!r}: column {c!r} holds an int outside int64's range "
                              f"[-2**63, 2**63 - 1]") from None
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise SchemaError(f"input {name!r}: column {c!r} ({series.dtype}) is not int, float, bool or str: "
                              f"{err}") from None
        if str(col.type) != "null":  # (all None: a null, refused as such later)
            arrow_dtype(f"{name}.{c}", col.type)
        cols[str(c)] = _signed(name, c, col)
    return pa.table(cols)


def _signed(name: str, c, col):
    """An unsigned Arrow column as int64, which Spark takes and the engine stores (Spark has no unsigned
    type): a value past int64's range is refused as the engine refuses it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if not pa.types.is_unsigned_integer(col.type):
        return col
    top = pc.max(col).as_py() if len(col) else None
    if top is not None and top > np.iinfo(np.int64).max:
        raise SchemaError(f"input {name!r}: column {c!r} holds {top}, outside int64's range [-2**63, 2**63 - 1]")
    return col.cast(pa.int64())


def _input_column(col: str, dtype: str, at: str):
    """Input column ``col``, read as column ``at`` of the positionally renamed frame, in its engine dtype (a
    tinyint is int64 to user functions, as in the engine). ``run`` has checked it holds no null."""
    from pyspark.sql import functions as F
    cast = F.col(at).cast(_spark_type(dtype).simpleString())
    if dtype == "float64":
        cast = cast + 0.0  # -0.0 is 0.0, as the engine stores it
    return cast


def _scan_input(name: str, df, nullable: list, at: dict, diff_col: str | None):
    """One job over an input: its nulls (in every column, read or not, as the engine refuses them wherever
    they are) and its multiplicities' bound (so that products of multiplicities stay in int64)."""
    from pyspark.sql import functions as F
    checks = [F.max(F.col(at[c]).isNull().cast("int")) for c in nullable]
    if diff_col is not None:
        checks.append(F.max(F.abs(F.col(at[diff_col]).cast("decimal(20,0)"))))
    found = df.agg(*checks).first() if checks else ()
    for c, null in zip(nullable, found):
        if null:
            raise SchemaError(f"input {name!r}: column {c!r} holds a null; kpgnb columns cannot hold nulls: drop "
                              f"or fill them first (df.na.drop() or df.na.fill(...))")
    big = found[-1] if diff_col is not None else None
    if big is not None and big >= DIFF_LIMIT:
        raise SchemaError(f"input {name!r}: the multiplicity column {diff_col!r} holds {big}; diffs must be "
                          f"integers of magnitude below 2**62, as the engine's inputs take them")


# -- the public entry ---------------------------------------------------------------------------------------

def check_run_arguments(build, inputs):
    """``build`` a function of the builder and ``inputs`` a dict, or an ArgumentTypeError before any work."""
    if not callable(build):
        raise ArgumentTypeError(f"kp.spark.run: build is the builder function (def build(df): ..., what a "
                                f"dataflow's 'with' block would do), not {type(build).__name__} {build!r:.80}")
    if not isinstance(inputs, dict):
        raise ArgumentTypeError(f"kp.spark.run: inputs= maps input names to Spark (or pandas) DataFrames "
                                f"({{'edges': sdf}}), not a {type(inputs).__name__}")


def run(build, inputs: dict, spark=None, diff_col: str | None = None, diffs: bool = False,
        compact_every: int = 8, name: str = "spark") -> dict:
    """Evaluate ``build`` (the function a user calls inside ``with eng.dataflow(...) as df``) as Spark jobs.

    ``inputs`` maps each input name the builder reads (``df.input(name)`` or ``df.use(name)``) to a Spark
    DataFrame (a pandas DataFrame is converted with ``spark``). With ``diff_col``, an input that has that
    column takes it as each row's multiplicity (retractions included) instead of 1. Returns a dict, view
    name -> Spark DataFrame with the view's columns: rows repeated by multiplicity, or with ``diffs`` one row
    per distinct row and its ``diff``. The returned DataFrames are lazy over checkpointed state: the loops
    have run, the final projections run when they are read. ``compact_every``: a loop's kept value read with
    more than this many pieces (one per round it changed in) is merged into one first."""
    from pyspark.sql import functions as F
    from . import spark as bridge
    bridge.check_session(spark, "kp.spark.run", optional=True)
    check_run_arguments(build, inputs)
    if diff_col is not None and not isinstance(diff_col, str):
        raise ArgumentTypeError(f"kp.spark.run: diff_col is the name of the multiplicity column (a str) or None, "
                                f"not {type(diff_col).__name__} ({diff_col!r})")
    diffs = check_flag(diffs, "kp.spark.run: diffs")
    if not (is_int(compact_every) and compact_every >= 1):
        raise ArgumentTypeError(f"kp.spark.run: compact_every is a number of pieces >= 1, got {compact_every!r}")
    if spark is None:  # (the session of the first Spark input, before any pandas input is converted with it;
        # with none, the active session, as with no DataFrame inputs at all)
        spark = next((df.sparkSession for df in inputs.values() if hasattr(df, "sparkSession")), None)
        if spark is None and inputs:
            from pyspark.sql import SparkSession
            spark = SparkSession.getActiveSession()
    frames, schemas, positive, scans = {}, {}, {}, []
    for n, df in inputs.items():
        if not hasattr(df, "sparkSession"):
            if spark is None:
                raise SchemaError(f"input {n!r} is a {type(df).__name__}, not a Spark DataFrame; pass spark= "
                                  f"to convert it")
            df = spark.createDataFrame(arrow_input(n, df))
        if df.isStreaming:
            raise SchemaError(f"input {n!r} is a streaming DataFrame: kp.spark.run evaluates static ones; feed a "
                              f"stream into an engine input with kp.spark.follow")
        # columns are read by position: Spark resolves names regardless of case, so it cannot tell apart
        # "x" and "X", which are two columns to the engine
        at = {c: f"_in{i}" for i, c in enumerate(df.columns)}
        if len(at) < len(df.columns):
            twice = next(c for c in at if df.columns.count(c) > 1)
            raise SchemaError(f"input {n!r} has two columns named {twice!r} (what a join of two frames gives); "
                              f"rename or drop one first")
        dt = bridge.dtypes_of(df)
        nullable = {f.name: f.nullable for f in df.schema.fields}
        df = df.toDF(*at.values())
        has_diff = diff_col is not None and diff_col in dt
        if has_diff and dt[diff_col] != "int64":
            raise SchemaError(f"input {n!r}: the multiplicity column {diff_col!r} must be an integer column, "
                              f"got {dt[diff_col]}")
        scans.append((n, df, [c for c in at if nullable[c]], at, diff_col if has_diff else None))
        names = [c for c in dt if not (has_diff and c == diff_col)]
        schemas[n] = Schema.of(names, [dt[c] for c in names])
        d = _input_column(diff_col, "int64", at[diff_col]) if has_diff else \
            F.lit(1).cast("long")
        frames[n] = df.select(*[_input_column(c, dt[c], at[c]).alias(_c(i))
                                for i, c in enumerate(names)], d.alias(D))
        positive[n] = not has_diff
    if spark is None:
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise SchemaError("no SparkSession: pass spark= (kpgnb.spark.session() makes a local one)")
    plan = record(build, schemas, name)
    for scan in scans:  # (once the builder is known to translate: a refused one runs no job)
        _scan_input(*scan)
    runner = _Runner(spark, plan, frames, positive, int(compact_every))
    top = runner.run_scope(plan.ops[0].graph.root, {}) if plan.ops else None
    out = {}
    for vname, view in plan.views.items():
        src = view.op.inputs[0]
        dts = list(view.schema.dtypes)
        val = top.value_delta(src, compact=True)  # computed here, so that a failing function is named
        df = val.df if val is not None else runner.empty(dts)
        cols = [F.col(_c(i)).alias(nm) for i, nm in enumerate(view.schema.names)]
        if diffs:
            out[vname] = df.select(*cols, F.col(D).alias(view.schema.free("diff")))
        else:
            neg = F.raise_error(F.lit(f"view {vname!r} holds rows with negative multiplicity; run with "
                                      f"diffs=True"))
            many = F.raise_error(F.lit(f"view {vname!r} holds a row of multiplicity above 2**31 - 1, more copies "
                                       f"than Spark repeats a row; run with diffs=True"))
            checked = df.withColumn(D, F.when(F.col(D) < 0, neg.cast("long"))
                                    .when(F.col(D) > 2**31 - 1, many.cast("long")).otherwise(F.col(D)))
            rep = view.schema.free("rep")  # (a name none of the view's columns has: drop() takes all of a name)
            out[vname] = checked.select(*cols, F.explode(F.array_repeat(F.lit(0), F.col(D).cast("int")))
                                        .alias(rep)).drop(rep)
    return out
