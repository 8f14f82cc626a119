"""The builder API (DESIGN.md section 4): Collection, Arranged, Variable and DataflowBuilder.

A Collection names an operator's output inside a dataflow being built, with its schema and scope.
Methods validate their arguments against the schema right away, so a wrong column name fails at the
line that used it, before anything is installed. Collections from enclosing scopes used inside a loop
body are entered automatically (arrangements by wrapping, without a copy).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .columns import Schema, SchemaError, as_column, check_flag, check_name, is_int, na_row, value_dtype
from .dataflow import Site
from .errors import ArgumentTypeError, UsageError
from .scope import Scope
from .kernels import reduce as rk
from .operators.arrange import ArrangeOp, ExportOp, ViewOp
from .operators.basic import (ConcatOp, DelayOp, EnterArrangedOp, EnterAtOp, EnterOp, FeedbackOp, FilterOp, FlatMapOp, FlattenOp,
                              InspectOp, LeaveOp, MapOp, NegateOp, ProjectOp, VariableOp)
from .operators.join import JoinOp
from .operators.reduce import USER, ReduceOp, ReduceSpec

if TYPE_CHECKING:
    from .view import View


def _names(cols, what="columns") -> list:
    if cols is None:
        return []
    if isinstance(cols, str):
        return [cols]
    if isinstance(cols, (dict, bytes, set, frozenset)) or not hasattr(cols, "__iter__"):
        raise SchemaError(f"{what} must be a column name (str) or a list of them"
                          + (" in order (a set has none)" if isinstance(cols, (set, frozenset)) else "")
                          + f", got {cols!r}")
    out = list(cols)
    for c in out:
        if not isinstance(c, str):
            raise SchemaError(f"{what} must be column names (str), got {c!r}")
    return out


@dataclass(frozen=True)
class Export:
    """An arrangement a dataflow publishes under a name (the catalog entry it becomes at install)."""
    op: object
    schema: Schema
    keys: tuple
    vals: tuple


class Collection:
    """A collection being defined in a dataflow: an operator's output, its schema and its scope."""

    def __init__(self, builder: "DataflowBuilder", op, schema: Schema, scope: Scope):
        self.builder = builder
        self.op = op
        self.schema = schema
        self.scope = scope
        self._entered: dict = {}
        if op.schema is None:  # the recorded graph says what each operator outputs (kpgnb.spark.run reads it)
            op.schema = schema

    # -- basics -------------------------------------------------------------------------------
    @property
    def columns(self) -> list:
        return list(self.schema.names)

    def __repr__(self):
        return f"{type(self).__name__}({self.schema}, depth={self.scope.depth})"

    def _stream(self):
        """The operator whose output carries this collection as update messages."""
        return self.op

    def _derive(self, op, schema: Schema) -> "Collection":
        return Collection(self.builder, op, schema, op.scope)

    def check_columns(self, names, what="column"):
        """Raises SchemaError naming the first of ``names`` that is not a column of this collection."""
        for n in names:
            if n not in self.schema.names:
                raise SchemaError(f"no {what} {n!r} in this collection; columns are {list(self.schema.names)}")

    def _live(self):
        self.builder.check_building()

    # -- scopes -------------------------------------------------------------------------------
    def enter(self, scope: Scope) -> "Collection":
        """This collection inside ``scope`` (a loop nested, possibly deeply, in its own scope; or a
        collection of that loop, such as its variable, for its scope)."""
        self._live()
        scope = _scope_of(scope, "enter")
        if scope is self.scope:
            return self
        if not self.scope.is_ancestor_of(scope):
            raise SchemaError("a collection can only enter a loop nested inside its own scope")
        if scope in self._entered:
            return self._entered[scope]
        if _reads_scope(self.op, scope):  # (a cycle through the enclosing scope: no round could ever complete)
            raise SchemaError("a loop cannot read its own result: this collection is computed from the loop it "
                              "would enter (a leave() of it, or of a loop inside it); each round must use the "
                              "loop's collections directly, not left ones")
        out = self._enter_child(scope) if scope.parent is self.scope else self.enter(scope.parent).enter(scope)
        self._entered[scope] = out
        return out

    def enter_at(self, scope: Scope, fn) -> "Collection":
        """This collection inside the loop ``scope``, each row arriving at the round ``fn(**columns)`` gives
        it (an int array, >= 0) instead of round 0. The loop's fixed point is the same; the order in which
        rows join it changes, which can save much work: kpgnb.graphs.wcc enters small labels first."""
        self._live()
        scope = _scope_of(scope, "enter_at")
        if scope.parent is None or not self.scope.is_ancestor_of(scope) or scope is self.scope:
            raise SchemaError("enter_at() takes a loop scope nested inside this collection's scope")
        if scope.parent is not self.scope:
            return self.enter(scope.parent).enter_at(scope, fn)
        site = Site.capture()
        op = EnterAtOp(scope, self._stream(), fn, self._params(fn, "enter_at"), self.schema,
                       self.builder.engine.symbols, site)
        return Collection(self.builder, op, self.schema, scope)

    def delay(self, fn) -> "Collection":
        """This loop collection with each row held back to the round ``fn(**columns)`` gives it (an int
        array) where that is later than its own: (t, r) becomes (t, max(r, fn(row))). In a loop whose
        fixed point does not depend on the order rows arrive in (a monotone min, say) the answer is the
        same; the order can save most of the work (small distances first)."""
        self._live()
        if self.scope.parent is None:
            raise SchemaError("delay() holds rows back to later rounds of a loop; this collection is at the top level")
        op = DelayOp(self.scope, self._stream(), fn, self._params(fn, "delay"), self.schema,
                     self.builder.engine.symbols, Site.capture())
        return Collection(self.builder, op, self.schema, self.scope)

    def _enter_child(self, scope):
        return Collection(self.builder, EnterOp(scope, [self._stream()], Site.capture()), self.schema, scope)

    def shared(self, tag, make):
        """``make(self)``, built once per dataflow for this collection (its operator, scope, columns and, when
        arranged, key) and ``tag``: queries over the same collection (two sssp on one edge input) then read
        one result of it (an arrangement of the edges), not a copy each. The key holds the operator and
        scope objects themselves, so no id is reused while the dataflow is built."""
        lens = (tuple(self.key_names), tuple(self.val_names)) if isinstance(self, Arranged) else None
        key = (self.op, self.scope, tuple(self.schema.names), tuple(self.schema.dtypes), lens, tag)
        return self.builder.memo(key, lambda: make(self))

    def leave(self) -> "Collection":
        """This collection in the enclosing scope: it accumulates every round, i.e. the loop's fixed point."""
        self._live()
        if self.scope.parent is None:
            raise SchemaError("leave() outside of a loop: this collection is at the top level")
        return Collection(self.builder, LeaveOp(self.scope.parent, [self._stream()], Site.capture()),
                          self.schema, self.scope.parent)

    def _align(self, other: "Collection"):
        if not isinstance(other, Collection):
            raise ArgumentTypeError(f"expected a Collection, got {type(other).__name__}")
        if other.builder is not self.builder:
            raise SchemaError("collections from different dataflows cannot be combined; export an arrangement "
                              "and df.use() it instead")
        if other.scope is self.scope:
            return self, other
        if other.scope.is_ancestor_of(self.scope):
            return self, other.enter(self.scope)
        if self.scope.is_ancestor_of(other.scope):
            return self.enter(other.scope), other
        raise SchemaError("collections from different loops cannot be combined: leave() one of them first, or, "
                          "to nest a loop inside a loop body, start it from a collection entered into that "
                          "body (outer.enter(inner.scope).iterate(...))")

    # -- user functions -------------------------------------------------------------------------
    def _params(self, fn, who):
        if not callable(fn):
            raise ArgumentTypeError(f"the {who} function must be a function of the columns "
                                    f"{list(self.schema.names)} (called with NumPy arrays), got "
                                    f"{type(fn).__name__} {fn!r:.80}")
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            raise SchemaError(f"cannot read the parameters of the {who} function {fn!r}") from None
        names = []
        for p in sig.parameters.values():
            if p.kind == p.VAR_KEYWORD:
                return None
            if p.kind == p.VAR_POSITIONAL:
                raise SchemaError(f"the {who} function takes *args; name the columns it needs as parameters")
            if p.name in self.schema.names:
                names.append(p.name)
            elif p.default is p.empty:
                raise SchemaError(f"the {who} function's parameter {p.name!r} is not a column; columns are "
                                  f"{list(self.schema.names)}")
        return names


    def _out_schema(self, fn, params, out, who, site):
        if out is not None:
            if not isinstance(out, dict) or not out:
                raise SchemaError(f"out= must map output column names to dtypes, got {out!r}")
            return Schema.of(list(out), list(out.values()))
        from .columns import user_column
        names = params if params is not None else list(self.schema.names)

        def trial_call(n_rows):
            trial = {}
            for n in names:
                d = self.schema.dtype(n)
                trial[n] = np.full(n_rows, "", object) if d == "str" else user_column(np.zeros(n_rows, np.int64), d)
            with np.errstate(all="ignore"):
                return fn(**trial)

        error = None
        for n_rows in (0, 1):  # an empty batch first; functions that index their input get one zero row
            try:
                res = trial_call(n_rows)
                break
            except Exception as err:  # noqa: BLE001 - explained below if no trial works
                error = err
        else:
            raise SchemaError(f"could not learn the output columns of the {who} function at {site} by calling it "
                              f"on a trial batch ({type(error).__name__}: {error}); pass out={{name: dtype, ...}}"
                              ) from error
        schema = _out_schema_of(res, who, site, n_rows)
        if n_rows == 0 and _ambiguous(res):
            # an empty list or object array says nothing of its type (np.asarray([]) is float64): ask a
            # one-row batch, and keep what the empty one said where that fails or disagrees
            try:
                one = trial_call(1)
            except Exception:  # noqa: BLE001 - the empty trial's answer stands
                one = None
            if isinstance(one, dict) and list(one) == list(schema.names):
                dtypes = list(schema.dtypes)
                for i, n in enumerate(schema.names):
                    if n in _ambiguous(res):
                        arr = np.asarray(one[n])
                        if arr.ndim == 1 and arr.size:
                            try:
                                # (nulls only say nothing of the type: the empty trial's answer stands; rows
                                # that hold nulls are then refused as nulls, other values by their dtype)
                                dtypes[i] = value_dtype(arr) or dtypes[i]
                            except SchemaError:
                                pass
                schema = Schema(schema.names, tuple(dtypes))
        return schema

    # -- stateless operators ------------------------------------------------------------------
    def map(self, fn, out: dict | None = None) -> "Collection":
        """fn(**columns) -> dict of output columns, called once per batch with NumPy arrays."""
        self._live()
        site = Site.capture()
        params = self._params(fn, "map")
        schema = self._out_schema(fn, params, out, "map", site)
        op = MapOp(self.scope, self._stream(), fn, params, self.schema, schema, self.builder.engine.symbols, site)
        op.inferred = out is None
        return self._derive(op, schema)

    def filter(self, fn) -> "Collection":
        """fn(**columns) -> boolean array: keep the rows where it is True."""
        self._live()
        site = Site.capture()
        params = self._params(fn, "filter")
        op = FilterOp(self.scope, self._stream(), fn, params, self.schema, self.builder.engine.symbols, site)
        return self._derive(op, self.schema)

    def flat_map(self, fn, out: dict | None = None, repeat: bool | None = None) -> "Collection":
        """fn(**columns) -> (dict of output columns, how): ``how`` is an index array (index[i] is the input
        row of output row i) or repeat counts (counts[j] output rows for input row j). Pass repeat=True or
        False to say which; by default they are told apart by length."""
        self._live()
        site = Site.capture()
        params = self._params(fn, "flat_map")
        if repeat is not None:
            repeat = check_flag(repeat, "flat_map's repeat")

        shapes = []  # what each trial call returned: (dict of columns, how) is what every batch must return

        def cols_only(**kw):
            res = fn(**kw)
            paired = isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], dict)
            shapes.append(paired or (f"a tuple of {len(res)}" if isinstance(res, tuple) else
                                     "only a dict of columns" if isinstance(res, dict) else type(res).__name__))
            return res[0] if isinstance(res, tuple) and res else res
        schema = self._out_schema(cols_only, params, out, "flat_map", site)
        if shapes and True not in shapes:
            raise SchemaError(f"the flat_map function at {site} must return (dict of columns, index or counts): "
                              f"the output columns and, for each output row, its input row (an index array) or, "
                              f"for each input row, how many output rows it makes (counts); it returned "
                              f"{shapes[0]} (called on a trial batch)")
        op = FlatMapOp(self.scope, self._stream(), fn, params, self.schema, schema, self.builder.engine.symbols,
                       site, repeat)
        op.inferred = out is None
        return self._derive(op, schema)

    def inspect(self, fn) -> "Collection":
        """fn(columns: dict, times: n x d array, diffs) for every batch; the updates pass unchanged."""
        self._live()
        if not callable(fn):
            raise ArgumentTypeError(f"inspect takes a function fn(columns, times, diffs), got "
                                    f"{type(fn).__name__} {fn!r:.80}")
        op = InspectOp(self.scope, self._stream(), fn, None, self.schema, self.builder.engine.symbols,
                       Site.capture())
        return self._derive(op, self.schema)

    def select(self, *cols) -> "Collection":
        """Keep (and reorder) the named columns."""
        self._live()
        names = _names(cols[0] if len(cols) == 1 and not isinstance(cols[0], str) else cols)
        self.check_columns(names)
        if names == list(self.schema.names):
            return self
        op = ProjectOp(self.scope, self._stream(), self.schema.indices(names), Site.capture())
        return self._derive(op, self.schema.select(names))

    def rename(self, /, **mapping) -> "Collection":
        """Rename columns: rename(old=new, ...)."""
        self._live()
        self.check_columns(mapping)
        names = [mapping.get(n, n) for n in self.schema.names]
        op = ProjectOp(self.scope, self._stream(), list(range(len(names))), Site.capture())
        return self._derive(op, self.schema.rename(names))

    def concat(self, *others) -> "Collection":
        """The multiset union (diffs add up). Columns are matched by name."""
        self._live()
        site = Site.capture()
        cols = [self]
        for o in others:
            a, b = cols[0]._align(o)
            if a is not cols[0]:
                cols = [c.enter(a.scope) for c in cols]
            cols.append(b)
        base = cols[0].schema
        perms = [None]
        for o in cols[1:]:
            if set(o.schema.names) != set(base.names):
                raise SchemaError(f"concat needs the same columns: {list(base.names)} vs {list(o.schema.names)}")
            for n in base.names:
                if o.schema.dtype(n) != base.dtype(n):
                    raise SchemaError(f"concat: column {n!r} is {base.dtype(n)} on one side and "
                                      f"{o.schema.dtype(n)} on the other")
            perms.append(None if o.schema.names == base.names else np.asarray(o.schema.indices(base.names)))
        op = ConcatOp(cols[0].scope, [c._stream() for c in cols], perms, site)
        return Collection(self.builder, op, base, cols[0].scope)

    def negate(self) -> "Collection":
        """Every diff negated."""
        self._live()
        return self._derive(NegateOp(self.scope, [self._stream()], Site.capture()), self.schema)

    def consolidate(self) -> "Collection":
        """The same collection with updates to equal (row, time) summed and zeros dropped."""
        return self.arrange_by(*self.schema.names).as_collection()

    # -- arrangements -------------------------------------------------------------------------
    def arrange_by(self, *keys, vals=None) -> "Arranged":
        """Index by the key columns (the rest, or ``vals``, become values): a shareable arrangement."""
        self._live()
        key_names = _names(keys[0] if len(keys) == 1 and not isinstance(keys[0], str) else keys, "keys")
        self.check_columns(key_names)
        val_names = [n for n in self.schema.names if n not in key_names] if vals is None else _names(vals, "vals")
        self.check_columns(val_names)
        if set(key_names) & set(val_names):
            raise SchemaError(f"columns {sorted(set(key_names) & set(val_names))} cannot be both key and value")
        if isinstance(self, Arranged) and self.key_names == key_names and self.val_names == val_names:
            return self
        eng = self.builder.engine
        # an arrangement is re-arranged from its batches directly (no flattened copy in between)
        src = self.op if isinstance(self, Arranged) else self._stream()
        op = ArrangeOp(self.scope, src, self.schema.indices(key_names), self.schema.indices(val_names),
                       eng.workers, eng.effort, Site.capture())
        schema = self.schema.select(key_names + val_names)
        return Arranged(self.builder, op, schema, self.scope, key_names, val_names)

    def join(self, other: "Collection", on=None, left_on=None, right_on=None) -> "Collection":
        """Pairs of rows with equal keys. Output: the key columns (named as on the left), the left's other
        columns, the right's other columns (clashing names get the suffix ``_right``)."""
        self._live()
        left, right, lk, rk_ = self._join_args(other, on, left_on, right_on)
        site = Site.capture()
        la = left.arrange_by(*lk) if not (isinstance(left, Arranged) and left.key_names == lk) else left
        ra = right.arrange_by(*rk_) if not (isinstance(right, Arranged) and right.key_names == rk_) else right
        op = JoinOp(la.scope, la.op, ra.op, self.builder.engine.workers, site)
        names = list(lk) + list(la.val_names)
        dtypes = [la.schema.dtype(n) for n in names]
        for n in ra.val_names:
            out = n
            while out in names:
                out = out + "_right"
            names.append(out)
            dtypes.append(ra.schema.dtype(n))
        return Collection(self.builder, op, Schema(tuple(names), tuple(dtypes)), la.scope)

    def _join_args(self, other, on, left_on, right_on):
        if on is not None:
            if left_on is not None or right_on is not None:
                raise SchemaError("pass either on= or left_on=/right_on=, not both")
            left_on = right_on = on
        if left_on is None or right_on is None:
            raise SchemaError("join needs on= (the same column names on both sides) or left_on= and right_on=")
        lk, rk_ = _names(left_on, "left_on"), _names(right_on, "right_on")
        if len(lk) != len(rk_):
            raise SchemaError(f"left_on {lk} and right_on {rk_} must name the same number of columns")
        left, right = self._align(other)
        left.check_columns(lk, "left_on column")
        right.check_columns(rk_, "right_on column")
        for a, b in zip(lk, rk_):
            if left.schema.dtype(a) != right.schema.dtype(b):
                raise SchemaError(f"join key {a!r} is {left.schema.dtype(a)} but {b!r} is {right.schema.dtype(b)}")
        return left, right, lk, rk_

    def semijoin(self, other: "Collection", on=None, left_on=None, right_on=None) -> "Collection":
        """The rows whose key appears in ``other`` (once, whatever other's multiplicity); keeps the
        left's columns."""
        self._live()
        left, right, lk, rk_ = self._join_args(other, on, left_on, right_on)
        keys = right.select(rk_).distinct()
        la = left.arrange_by(*lk) if not (isinstance(left, Arranged) and left.key_names == lk) else left
        op = JoinOp(la.scope, la.op, keys.op, self.builder.engine.workers, Site.capture())
        joined = Collection(self.builder, op, la.schema, la.scope)
        return joined.select(list(left.schema.names))

    def antijoin(self, other: "Collection", on=None, left_on=None, right_on=None) -> "Collection":
        """The rows whose key does not appear in ``other``; keeps the left's columns."""
        self._live()
        left, right = self._align(other)
        semi = left.semijoin(right, on=on, left_on=left_on, right_on=right_on)
        return left.concat(semi.negate())

    # -- reductions ---------------------------------------------------------------------------
    def _reduce(self, by, vals, spec: ReduceSpec, out_vals: list, out_dtypes: list, name: str) -> "Arranged":
        self._live()
        by = _names(by, "by")
        self.check_columns(by, "by column")
        clash = [n for n in out_vals if n in by]
        if clash:
            raise SchemaError(f"{name}(by={by}): its output column {clash[0]!r} is also a group column; rename "
                              f"that column first (.rename({clash[0]}=...))")
        arr = self.arrange_by(*by, vals=vals)
        eng = self.builder.engine
        op = ReduceOp(arr.scope, arr.op, spec, len(by), eng.workers, eng.effort, Site.capture(), name)
        schema = Schema(tuple(by) + tuple(out_vals), tuple(arr.schema.dtype(n) for n in by) + tuple(out_dtypes))
        return Arranged(self.builder, op, schema, arr.scope, by, list(out_vals))

    def _mode(self, col):
        d = self.schema.dtype(col)
        return {"int64": rk.MODE_INT, "bool": rk.MODE_INT, "float64": rk.MODE_FLOAT, "str": rk.MODE_RANK}[d]

    def count(self, by=()) -> "Arranged":
        """Number of rows per group, in a column ``count``: the group's net multiplicity. A group whose
        count is 0 (its rows cancel) has no row; a negative count (more removals than insertions) is
        output as it is."""
        return self._reduce(by, [], ReduceSpec(rk.COUNT, 1), ["count"], ["int64"], "count")

    def distinct(self, key=None) -> "Arranged":
        """Each row once: the rows whose multiplicity is positive (zero or negative ones are absent).
        The result is arranged by ``key`` (default: every column), the key columns first, the rest as
        values. An arrangement by that key is read as it is: the distinct of an input keyed by ``src``
        with ``key="src"`` needs no second index of the rows, and a join on ``src`` reads its result."""
        if key is None:
            return self._reduce(list(self.schema.names), [], ReduceSpec(rk.DISTINCT, 0), [], [], "distinct")
        self._live()
        key = _names(key, "key")
        self.check_columns(key)
        vals = [n for n in self.schema.names if n not in key]
        return self._reduce(key, vals, ReduceSpec(rk.DISTINCT, len(vals)), vals,
                            [self.schema.dtype(n) for n in vals], "distinct")

    def threshold(self, by=None, fn=None) -> "Arranged":
        """Rows of the ``by`` columns (default: all) with multiplicity fn(count); fn is vectorized over an
        int64 array of counts (``threshold(fn)`` works too). fn sees every row's non-zero net count,
        negative counts included (never 0); rows for which it returns 0 are absent. With ``by=[]`` the
        result has no columns and ``to_pandas()`` one empty row per unit of multiplicity."""
        if callable(by) and fn is None:
            by, fn = None, by
        if not callable(fn):
            raise ArgumentTypeError(f"threshold needs fn=, a function from an int64 array of counts to counts, not "
                                    f"{type(fn).__name__} ({fn!r})")
        by = list(self.schema.names) if by is None else _names(by, "by")
        return self._reduce(by, [], ReduceSpec(rk.THRESHOLD, 0, fn=fn), [], [], "threshold")

    def _by_col(self, first, by, col, what, col_arg="col"):
        """(by, col) for the reductions over one column: ``f(by=, col=)`` (DESIGN), positionally
        ``f(by, col)``, and ``f("x")``, which reduces column x over the whole collection. ``first`` is
        the positional first argument (positional-only, so that ``f(by="k")`` without col= is an error,
        not a reduction of column k)."""
        self._live()
        if first is not None:
            if col is None and isinstance(first, str):
                col = first  # f("x") or f("x", by=...): column x
            elif by is not None:
                raise SchemaError(f"{what} got by twice: as its first argument and as by=")
            else:
                by = first
        if by is None:
            by = ()
        if col is None:
            raise SchemaError(f"{what} needs {col_arg}=, the column to reduce")
        if not isinstance(col, str):
            raise SchemaError(f"{what}: {col_arg} must be a column name, got {col!r}")
        self.check_columns([col])
        by = _names(by, "by")
        if col in by:
            raise SchemaError(f"column {col!r} is also a by column")
        return by, col

    def sum(self, first=None, /, col: str | None = None, *, by=None) -> "Arranged":
        """Sum of ``col`` (weighted by multiplicity, negative multiplicities included) per group of the
        ``by`` columns. A group has a row while any of its rows has a non-zero net multiplicity, even when
        the sum is 0; a group whose rows all cancel has none."""
        by, col = self._by_col(first, by, col, "sum")
        d = self.schema.dtype(col)
        if d == "str":
            raise SchemaError(f"cannot sum column {col!r}: it holds strings")
        fl = d == "float64"
        spec = ReduceSpec(rk.SUM, 1, 0, rk.MODE_FLOAT if fl else rk.MODE_INT, float_out=fl)
        return self._reduce(by, [col], spec, [col], ["float64" if fl else "int64"], "sum")

    def _extreme(self, op, first, by, col, name):
        by, col = self._by_col(first, by, col, name)
        spec = ReduceSpec(op, 1, 0, self._mode(col), symbols=self.builder.engine.symbols,
                          modes=[self._mode(col)])
        return self._reduce(by, [col], spec, [col], [self.schema.dtype(col)], name)

    def min(self, first=None, /, col: str | None = None, *, by=None) -> "Arranged":
        """Smallest ``col`` per group, among the rows of positive multiplicity (a group with none has no
        row). Values compare by value: numbers numerically (NaN after +inf), strings lexicographically
        (by code point), False < True."""
        return self._extreme(rk.MIN, first, by, col, "min")

    def max(self, first=None, /, col: str | None = None, *, by=None) -> "Arranged":
        """Largest ``col`` per group, among the rows of positive multiplicity (value order as in ``min``)."""
        return self._extreme(rk.MAX, first, by, col, "max")

    def _rows(self, op, first, by, col, name, k=0, desc=False, col_arg="col"):
        by, col = self._by_col(first, by, col, name, col_arg)
        rest = [n for n in self.schema.names if n not in by]
        spec = ReduceSpec(op, len(rest), rest.index(col), self._mode(col), k=k, desc=desc,
                          symbols=self.builder.engine.symbols, modes=[self._mode(n) for n in rest])
        return self._reduce(by, rest, spec, rest, [self.schema.dtype(n) for n in rest], name)

    def argmin(self, first=None, /, col: str | None = None, *, by=None) -> "Arranged":
        """The whole row with the smallest ``col`` per group, once whatever its multiplicity, among the
        rows of positive multiplicity. Ties on ``col`` go to the smallest row: the one whose other columns
        are smallest by value, compared in column order (value order as in ``min``), whatever the
        history of the data."""
        return self._rows(rk.ARGMIN, first, by, col, "argmin")

    def argmax(self, first=None, /, col: str | None = None, *, by=None) -> "Arranged":
        """The whole row with the largest ``col`` per group, once whatever its multiplicity, among the rows
        of positive multiplicity. Ties on ``col`` go to the smallest row, as for ``argmin`` (so argmax is
        ``top_k(k=1)`` and argmin ``top_k(k=1, descending=False)`` on sets)."""
        return self._rows(rk.ARGMAX, first, by, col, "argmax")

    def top_k(self, by=(), order_by: str = None, k: int = 1, descending: bool = True) -> "Arranged":
        """The k rows with the largest (or, descending=False, smallest) ``order_by`` per group, counting
        multiplicity: a row of multiplicity m fills up to m of the k places, and comes out with that
        multiplicity. Only rows of positive multiplicity take part; ties on ``order_by`` go to the smaller
        rows first (value order and tie-break as in ``argmin``)."""
        if order_by is None:
            raise SchemaError("top_k needs order_by=")
        if not is_int(k) and not isinstance(k, (bool, np.bool_)):  # (a bool stays the SchemaError below)
            raise ArgumentTypeError(f"top_k's k is a number of rows (an int >= 1), not {type(k).__name__} ({k!r})")
        if not is_int(k) or k < 1:
            raise SchemaError(f"top_k needs k >= 1, got {k!r}")
        if not isinstance(descending, (bool, np.bool_)):
            raise ArgumentTypeError(f"top_k's descending is True or False, not {type(descending).__name__} "
                                    f"({descending!r})")
        k = min(int(k), np.iinfo(np.int64).max)  # (no group holds more rows: larger k keep them all too)
        return self._rows(rk.TOPK, None, by, order_by, "top_k", k=k, desc=bool(descending), col_arg="order_by")

    def reduce(self, by, fn, columns, out: dict | None = None) -> "Arranged":
        """A general reduction: fn(values (m x len(columns)), counts (m,)) -> (out values (p x len(out)),
        counts (p,)), a numba ``@njit`` function called once per group and time with the group's distinct
        values and their net multiplicities. Every value whose multiplicity is non-zero is passed, negative
        ones included; a group with none is not called and has no output. Rows come sorted by value,
        lexicographically over ``columns``: int64 and float64 numerically (float64 arrive as float64, NaN
        last), bool as 0 < 1, and str columns as their int64 interned ids, ordered by the strings'
        lexicographic order (not by id). ``out`` maps output column names to dtypes; by default the output
        has the input ``columns``' names and dtypes."""
        from numba.core.dispatcher import Dispatcher
        self._live()
        site = Site.capture()
        columns = _names(columns, "columns")
        self.check_columns(columns)
        if out is None and not columns:
            raise SchemaError("reduce(columns=[]) gives fn no value columns, so the output has no columns to "
                              "take names and dtypes from: name them with out={name: dtype}")
        if out is None:
            out = {c: self.schema.dtype(c) for c in columns}
        if not isinstance(out, dict) or not out:
            raise SchemaError("reduce's out= must map output column names to dtypes")
        out_schema = Schema.of(list(out), list(out.values()))
        in_kinds = {"float" if self.schema.dtype(c) == "float64" else "int" for c in columns}
        out_kinds = {"float" if d == "float64" else "int" for d in out_schema.dtypes}
        if len(in_kinds) > 1 or len(out_kinds) > 1:
            raise SchemaError("reduce columns must all be float64 or all integer-like (int64, bool, str ids), "
                              "and so must its outputs")
        if not callable(fn):
            raise ArgumentTypeError(f"reduce's fn is a function (values, counts) -> (values, counts), numba "
                                    f"@njit or plain Python, not {type(fn).__name__} ({fn!r})")
        if not isinstance(fn, Dispatcher):
            from numba import njit
            fn = njit(fn)
        by = _names(by, "by")
        spec = ReduceSpec(USER, len(out_schema), fn=fn, user_cols=list(range(len(columns))),
                          user_float=in_kinds == {"float"}, out_float=out_kinds == {"float"},
                          out_dtypes=list(out_schema.dtypes), out_names=list(out_schema.names),
                          symbols=self.builder.engine.symbols,
                          modes=[self._mode(c) for c in columns])
        _compile_user_reduce(spec, len(columns), site)
        return self._reduce(by, columns, spec, list(out_schema.names), list(out_schema.dtypes), "reduce")

    # -- loops --------------------------------------------------------------------------------
    def iterate(self, body, max_rounds: int | None = None) -> "Collection":
        """The fixed point of ``body`` applied repeatedly, starting from this collection. Inside the body,
        collections and arrangements from outside may be used directly. With ``max_rounds=n`` the result
        is ``body`` applied n times to this collection (body(body(...(self)))), or the fixed point if the
        loop converges in fewer rounds: rounds from n on are dropped, whether or not it converged."""
        self._live()
        if not callable(body):
            raise ArgumentTypeError(f"iterate's body is a function of the loop variable returning a Collection, "
                                    f"not {type(body).__name__} ({body!r})")
        max_rounds = _rounds(max_rounds)
        if max_rounds == 0:
            return self  # the body applied no times
        scope = self.scope.loop()
        var = Variable(scope, self)
        try:
            result = body(var)
            if not isinstance(result, Collection):
                raise SchemaError(f"the iterate body must return a Collection, got {type(result).__name__}")
        except BaseException:
            # a refused body: the loop is closed on itself (it settles at once and feeds nothing), so that a
            # caller who catches the error can still install the rest of the block
            var.set(var)
            raise
        return var.set(result, max_rounds=max_rounds).leave()

    def ife(self, edges: "Collection", *, key, node, value, src="src", dst="dst", message, agg="min",
            rounds=None, memory="full", drop=None, start_rounds=None, symmetric=False,
            name="ife") -> "Collection":
        """Iterative frontier expansion from this collection of start states (columns ``key`` + ``value``;
        ``node``, the last key columns, name the vertex): D_0 = agg(start), D_{r+1}(v) = agg(start(v) +
        message(D_r(u), edge) for each edge u -> v of ``edges`` (columns ``src``, ``dst`` and payload)),
        to a fixed point or for ``rounds`` rounds. ``agg`` is min, max or sum; ``message`` names its
        arguments by column (the state's ``value``, edge payload columns, ``degree`` for the sender's
        out-degree) and returns the candidates, or (candidates, keep mask: one boolean per candidate,
        or one for all; another shape is an error); edge columns it does not name are not read (a parameter
        named like the state's ``value`` is the state, not an edge column of that name), and edges
        arranged by ``src`` with the columns it reads first among the values (a keyed input) are read in
        place, not arranged again. ``memory`` is "full"
        (join + reduce in ``iterate``), "jod" (join on demand: no join output kept) or "drop" (also drops
        state differences as ``drop=kp.Drop(...)`` says); every mode gives the same collection.
        ``symmetric=True`` promises that every edge u -> v comes with v -> u and the same payload (as
        ``kpgnb.graphs.wcc`` builds them): "jod" and "drop" then find in-neighbours in the one arrangement
        by source instead of keeping a second one by destination. ``start_rounds`` (memory="full") maps the
        start states' columns to the round at which each enters the loop (``kpgnb.graphs.bit_length_rounds``:
        small labels first): the same fixed point with fewer candidates, but not the same D_r on the way, so
        with ``rounds`` bounded a start state given a round above 0 fails the dataflow. See engine/ife.py."""
        self._live()
        from .ife import ife
        return ife(self, edges, key=key, node=node, value=value, src=src, dst=dst, message=message, agg=agg,
                   rounds=rounds, memory=memory, drop=drop, start_rounds=start_rounds, symmetric=symmetric,
                   name=name)

    # -- outputs ------------------------------------------------------------------------------
    def view(self, name: str, history: int = 1) -> "View":
        """Maintain this collection for reading from the notebook (``to_pandas``); ``history`` epochs
        before the frontier stay readable with ``at=``."""
        self._live()
        if not isinstance(name, str):
            raise ArgumentTypeError(f"a view's name is a non-empty str, not {type(name).__name__} {name!r}")
        if not name:
            raise UsageError("a view's name is a non-empty str, not ''")
        if self.scope.parent is not None:
            raise SchemaError("views must be defined at the top level of a dataflow (leave() the loop first)")
        if name in self.builder.views:
            raise UsageError(f"this dataflow has a view named {name!r} already")
        if not is_int(history):
            raise ArgumentTypeError(f"view {name!r}: history= takes a number of epochs (an int >= 1), got "
                                    f"{history!r}")
        if history < 1:
            raise UsageError(f"view {name!r}: history={history}; at least 1 (the latest epoch)")
        arr = self if isinstance(self, Arranged) else self.arrange_by(*self.schema.names)
        op = ViewOp(arr.scope, arr.op, history, Site.capture())
        op.name = name
        from .view import View
        view = View(self.builder.engine, self.builder.name, name, op, arr.schema)
        self.builder.views[name] = view
        return view


class Arranged(Collection):
    """A collection indexed by key columns (an arrangement): shareable by joins and reductions in this
    dataflow and, once exported, by later dataflows."""

    def __init__(self, builder, op, schema, scope, key_names, val_names):
        super().__init__(builder, op, schema, scope)
        self.key_names = list(key_names)
        self.val_names = list(val_names)
        self._flat = None
        self._renamed_from = None  # the Arranged this one renames: its rows are flattened once, for both
        trace = op.owned_trace()
        if trace is not None and not trace.key_names:  # named for statistics
            trace.key_names = tuple(self.key_names)

    def __repr__(self):
        return f"Arranged(by={self.key_names}, values={self.val_names}, depth={self.scope.depth})"

    def _stream(self):
        if self._flat is None and self._renamed_from is not None:
            self._flat = self._renamed_from._stream()  # (the same columns in the same order: names aside)
        if self._flat is None:
            self._flat = FlattenOp(self.scope, self.op, Site.capture())
            self._flat.schema = self.schema  # (key columns, then value columns, as this collection names them)
        return self._flat

    def as_collection(self) -> Collection:
        """The arranged updates as a plain collection."""
        self._live()
        return Collection(self.builder, self._stream(), self.schema, self.scope)

    def rename(self, /, **mapping) -> "Arranged":
        """Rename columns: rename(old=new, ...). The same arrangement under the new names (renaming
        moves no row, so a join on the renamed key still reads this index)."""
        self._live()
        self.check_columns(mapping)
        schema = self.schema.rename([mapping.get(n, n) for n in self.schema.names])
        out = Arranged(self.builder, self.op, schema, self.scope, [mapping.get(n, n) for n in self.key_names],
                       [mapping.get(n, n) for n in self.val_names])
        out._renamed_from = self
        return out

    def _enter_child(self, scope):
        op = EnterArrangedOp(scope, self.op, Site.capture())
        return Arranged(self.builder, op, self.schema, scope, self.key_names, self.val_names)

    def leave(self) -> Collection:
        return self.as_collection().leave()

    def export(self, name: str) -> "Arranged":
        """Publish this arrangement in the engine catalog under ``name``: later dataflows import it with
        ``df.use(name)`` in milliseconds, without re-indexing. It lives while any dataflow reads it."""
        self._live()
        if self.scope.parent is not None:
            raise SchemaError("only top-level arrangements can be exported (leave() the loop first)")
        check_name(name, "export", "the arrangement in the catalog")
        if not name:
            raise SchemaError("export needs a non-empty name")
        holder = self.builder.export_holder(name)
        if holder is not None:
            raise UsageError(f"an arrangement named {name!r} is exported already (by {holder})")
        op = ExportOp(self.scope, self.op, 1, Site.capture())
        op.name = name
        self.builder.exports[name] = Export(op, self.schema, tuple(self.key_names), tuple(self.val_names))
        trace = self.op.trace
        if trace is not None and trace.name is None:
            trace.name = name  # statistics show the arrangement under its catalog name
        return self


class Variable(Collection):
    """A loop variable for mutually recursive definitions. Its value in round r+1 is what ``set`` gave
    it in round r; in round 0 it is ``initial`` (or empty)."""

    def __init__(self, scope=None, initial: Collection | None = None, columns=None, dtypes=None):
        if isinstance(scope, Collection):
            # Variable(collection): a new loop nested in the collection's scope, starting from it
            if initial is not None:
                raise SchemaError("pass Variable(scope, initial) or Variable(initial), not both collections")
            scope, initial = scope.scope.loop(), scope
        elif scope is None and isinstance(initial, Collection):  # Variable(initial=collection): the same
            scope = initial.scope.loop()
        if not isinstance(scope, Scope):
            raise SchemaError("a Variable needs a loop scope (df.loop(), or another variable's .scope) or an "
                              "initial collection")
        if scope.parent is None:
            raise SchemaError("a Variable lives in a loop scope: use df.loop() (or the scope of an iterate body)")
        if initial is not None and not isinstance(initial, Collection):
            raise ArgumentTypeError(f"a Variable's initial value is a Collection (or None), not "
                                    f"{type(initial).__name__} ({initial!r})")
        builder = scope.graph.builder
        builder.check_building()
        site = Site.capture()
        if initial is None:
            if columns is None:
                raise SchemaError("a Variable without an initial collection needs columns= (and dtypes=)")
            schema = Schema.of(_names(columns), dtypes)
            from .operators.basic import EmptyOp
            init = Collection(builder, EmptyOp(scope, site), schema, scope)
        else:
            if initial.builder is not builder:
                raise SchemaError("a Variable's initial collection is of another dataflow: collections from "
                                  "different dataflows cannot be combined; export an arrangement and df.use() it")
            if initial.scope is not scope and not initial.scope.is_ancestor_of(scope):
                raise SchemaError("a Variable's initial collection is of " + (
                    "a loop nested in the variable's" if scope.is_ancestor_of(initial.scope) else "another loop")
                    + ": leave() it first")
            init = initial.enter(scope) if initial.scope is not scope else initial
            schema = init.schema
            if columns is not None or dtypes is not None:  # (they name a variable with no initial: here, checked)
                given = Schema.of(list(schema.names) if columns is None else _names(columns),
                                  list(schema.dtypes) if dtypes is None else dtypes)
                if given.names != schema.names or given.dtypes != schema.dtypes:
                    raise SchemaError(f"kp.Variable: columns={columns!r}, dtypes={dtypes!r} disagree with the "
                                      f"initial collection's {schema}; leave them out")
        op = VariableOp(scope, init._stream(), site)
        super().__init__(builder, op, schema, scope)
        self.initial = init
        self.site = site
        self.result = None
        builder.variables.append(self)

    def _coerce(self, result: Collection) -> Collection:
        if not isinstance(result, Collection):
            raise ArgumentTypeError(f"Variable.set takes the Collection of the next round's value, not "
                                    f"{type(result).__name__} ({result!r})")
        if result.builder is not self.builder:
            raise SchemaError("a Variable can only be set from the same dataflow")
        if result.scope is not self.scope:
            if not result.scope.is_ancestor_of(self.scope):
                raise SchemaError("the next round's value is a collection of a loop nested in this one: leave() "
                                  "it first" if self.scope.is_ancestor_of(result.scope) else
                                  "the next round's value is a collection of another loop, not of this one")
            if _reads_scope(result.op, self.scope):
                raise SchemaError("the next round's value is computed outside the loop from the loop's own "
                                  "result (a leave() fed back in): each round must be computed inside the loop; "
                                  "use the loop's collections directly, not left ones")
            result = result.enter(self.scope)
        if set(result.schema.names) != set(self.schema.names):
            raise SchemaError(f"the loop result has columns {list(result.schema.names)}; the variable has "
                              f"{list(self.schema.names)}")
        for n in self.schema.names:
            if result.schema.dtype(n) != self.schema.dtype(n):
                raise SchemaError(f"loop column {n!r} changes dtype from {self.schema.dtype(n)} to "
                                  f"{result.schema.dtype(n)}")
        return result.select(list(self.schema.names)) if result.schema.names != self.schema.names else result

    def set(self, result: Collection, max_rounds: int | None = None) -> Collection:
        """Define the variable's next-round value (once). ``max_rounds`` stops the loop after that many
        rounds even if it has not converged (at least 1: round 0 is ``result`` of the initial value, so a
        loop of no rounds is the initial collection itself, which ``iterate(body, max_rounds=0)`` gives)."""
        self._live()
        if self.result is not None:
            raise SchemaError("this Variable has been set already")
        max_rounds = _rounds(max_rounds)
        if max_rounds == 0:
            raise UsageError("Variable.set(max_rounds=0): a loop runs at least round 0, which already applies "
                             "the body once; use the initial collection itself for no rounds")
        result = self._coerce(result)
        delta = result.concat(self.initial.negate())
        fb = FeedbackOp(self.scope, delta._stream(), Site.capture(), max_rounds)
        self.op.connect(fb)
        self.result = result
        return result


def _reads_scope(op, scope: Scope) -> bool:
    """Whether ``op`` reads, through any path upstream, an operator of ``scope`` or of a loop inside it."""
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if o.scope is scope or scope.is_ancestor_of(o.scope):
            return True
        todo.extend(o.inputs)
    return False


def _scope_of(scope, who: str) -> Scope:
    """A loop scope argument: a Scope (``df.loop()``, ``v.scope``) or a collection living in it."""
    if isinstance(scope, Collection):
        return scope.scope
    if not isinstance(scope, Scope):
        raise ArgumentTypeError(f"{who}() takes a loop scope (df.loop(), or a loop variable or collection of "
                                f"the loop), got {type(scope).__name__}")
    return scope


def _rounds(max_rounds) -> int | None:
    """``max_rounds`` checked: None or a whole number of rounds, at least 0."""
    if max_rounds is None:
        return None
    if not is_int(max_rounds):
        raise ArgumentTypeError(f"max_rounds is a number of rounds (an int) or None, not "
                                f"{type(max_rounds).__name__} ({max_rounds!r})")
    if max_rounds < 0:
        raise UsageError(f"max_rounds must be 0 or more, not {max_rounds}")
    return int(max_rounds)


def _out_schema_of(result, who, site, n_rows: int) -> Schema:
    if not isinstance(result, dict):
        raise SchemaError(f"the {who} function at {site} must return a dict of columns, "
                          f"got {type(result).__name__}")
    names, dtypes = [], []
    for n, v in result.items():
        if na_row(v) is not None:
            raise SchemaError(f"the {who} function at {site} returned a null (NA) for column {n!r} (called on "
                              f"a trial batch of {n_rows} rows); kpgnb columns cannot hold nulls")
        arr = as_column(v)
        if arr.ndim == 0:
            raise SchemaError(f"the {who} function at {site} returned a scalar ({v!r}) for column {n!r}; "
                              f"expected a column array with one value per row (called on a trial batch of "
                              f"{n_rows} rows); for a constant use np.full(len(<a column>), value)")
        names.append(n)
        try:
            dtypes.append(value_dtype(arr) or "int64")  # (nulls only say nothing of the type: the default)
        except SchemaError as e:
            raise SchemaError(f"the {who} function at {site} returned column {n!r}: {e}") from None
    return Schema(tuple(names), tuple(dtypes))


def _ambiguous(result) -> set:
    """Columns of a trial result on an empty batch whose dtype says nothing: empty float64 arrays (what
    NumPy makes of an empty list) and empty object arrays."""
    return {n for n, v in result.items()
            if np.asarray(v).size == 0 and np.asarray(v).dtype.kind in "fO"}


def _compile_user_reduce(spec: ReduceSpec, kv: int, site):
    """Compile the user's reduce function now, so type errors point at the dataflow definition: first on
    its own (its errors and return type are the user's to read), then inside the engine's kernel."""
    from numba import types
    g_off = np.zeros(1, np.int64)
    e = np.zeros(0, np.int64)
    uv = np.zeros((kv, 0), np.float64 if spec.user_float else np.int64)
    proto = np.empty((0, spec.out_kv), np.float64 if spec.out_float else np.int64)
    takes = f"values {uv.dtype} (m x {kv}) and int64 counts"
    ret = _user_return_type(spec.fn, uv.dtype, f"the reduce function at {site} does not compile for {takes}")
    if ret is not None and not (isinstance(ret, types.BaseTuple) and len(ret) == 2
                                and all(isinstance(t, types.Array) for t in ret)
                                and ret[0].ndim == 2 and ret[1].ndim == 1):
        # (the kernel would fail typing this, with a message about the engine's own source)
        raise SchemaError(f"the reduce function at {site} must return (values, counts): a 2-D array of p "
                          f"rows x {spec.out_kv} columns {spec.out_names} and a 1-D array of p counts; for "
                          f"{takes} it returns {ret}")
    try:
        rk.reduce_apply_user(spec.fn, g_off, e, e, uv, proto)
    except Exception as err:  # noqa: BLE001 - reported with the definition site
        raise SchemaError(f"the reduce function at {site} does not compile for {takes}: {err}") from err
    got = _user_output_dtype(ret)
    if got is not None and got.kind == "f" and not spec.out_float:
        raise SchemaError(f"the reduce function at {site} returns {got} values, and its output columns "
                          f"{spec.out_names} are {spec.out_dtypes[0]}: declare them with out= (e.g. "
                          f"out={{{spec.out_names[0]!r}: 'float64'}})")


def _user_return_type(fn, vals_dtype, failed: str):
    """The numba return type of user reduce function ``fn`` for (m x kv) values of ``vals_dtype`` and
    int64 counts, compiling it (None where it cannot be told: a function with explicit signatures). A
    typing error of its own is a SchemaError starting with ``failed``, without numba's frames."""
    from numba import types
    from numba.core.errors import NumbaError
    from numba.np.numpy_support import from_dtype
    want = (types.Array(from_dtype(vals_dtype), 2, "C"), types.Array(types.int64, 1, "C"))
    try:
        fn.compile(want)
    except NumbaError as err:
        raise SchemaError(f"{failed}: {err}") from None
    except Exception:  # noqa: BLE001 - compilation disabled (explicit signatures): the kernel call tells
        pass
    return getattr(getattr(fn.overloads.get(want), "signature", None), "return_type", None)


def _user_output_dtype(ret):
    """The dtype of the values of a user reduce function's return type ``ret`` (None where it cannot
    be told)."""
    from numba import types
    from numba.np.numpy_support import as_dtype
    if not isinstance(ret, types.BaseTuple) or not len(ret) or not isinstance(ret[0], types.Array):
        return None
    try:
        return as_dtype(ret[0].dtype)
    except Exception:  # noqa: BLE001 - a type NumPy has no dtype for: left to the run-time check
        return None
