"""The Spark bridge (DESIGN.md section 6): a loopback session, Spark DataFrames as engine inputs through
Arrow, Structured Streaming feeding a live input, and views going back out to Spark.

    spark = kpgnb.spark.session()                         # local[2] on 127.0.0.1, UI off, Arrow on
    edges = kpgnb.spark.input_from(eng, "edges", sdf)      # schema from sdf.schema, rows through toArrow()
    query = kpgnb.spark.follow(stream_df, input="edges", diff_col="diff")   # one epoch per micro-batch
    view.to_spark(spark)                                   # current contents, through Arrow
    w = kpgnb.spark.write_changes(view, spark, path)       # the view's changes appended to a sink; w.close()
    out = kpgnb.spark.run(build, inputs={"edges": sdf}, spark=spark)   # the same dataflow as Spark jobs

Importing this module imports neither pyspark nor pyarrow; each function imports what it needs.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

from .engine.columns import Schema, check_flag, is_int
from .engine.errors import ArgumentTypeError, DataflowError, SchemaError, UsageError
from .engine.inputs import arrow_dtype, arrow_family, check_arrow, is_arrow_table, spark_arrow

__all__ = ["run", "datalog", "session", "dtypes_of", "input_from", "follow", "BatchFeeder", "write_changes", "ChangeWriter"]

# -- the session ------------------------------------------------------------------------------------------


def session(app: str = "kpgnb", cores: int = 2, partitions: int | None = None, log_level: str = "ERROR",
            **conf):
    """A SparkSession on loopback (``getOrCreate``: the running one if there is one, with the settings given
    here applied to it as pyspark does; a running session's shuffle partitions change only when
    ``partitions`` is given): master ``local[cores]``, driver host and bind address 127.0.0.1, UI and
    console progress bars off, ``spark.sql.shuffle.partitions = partitions`` (4 for a new session), Arrow on, time zone UTC. ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` are set to this interpreter before the JVM starts (Python workers would
    otherwise pick a Python without pyarrow). ``conf`` adds Spark settings (dots as in Spark:
    ``session(**{"spark.driver.memory": "2g"})``). The JVM's stderr is ``sys.stderr``'s descriptor: in a Jupyter
    kernel, the kernel's log rather than the running cell."""
    if cores != "*" and not (is_int(cores) and cores >= 1):
        raise ArgumentTypeError(f"kp.spark.session: cores is a number of cores >= 1 (or '*', all of them), "
                                f"got {cores!r}")
    if partitions is not None and not (is_int(partitions) and partitions >= 1):
        raise ArgumentTypeError(f"kp.spark.session: partitions is a number >= 1 (or None), got {partitions!r}")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        **{k: str(v) for k, v in conf.items()},
    }
    from pyspark import SparkContext
    if partitions is not None or SparkContext._active_spark_context is None:
        settings["spark.sql.shuffle.partitions"] = str(4 if partitions is None else int(partitions))
    master = f"local[{cores if cores == '*' else int(cores)}]"
    _start_jvm(master, app, settings)
    builder = SparkSession.builder.master(master).appName(app)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _start_jvm(master: str, app: str, settings: dict):
    """Start Spark's JVM (once per process, as ``getOrCreate`` would) with its stderr on the file descriptor
    behind ``sys.stderr``. In a plain process that is fd 2, as before. In a Jupyter kernel, ipykernel
    points fd 2 at a pipe whose output it forwards to whichever cell is running, while ``sys.stderr``'s
    descriptor is the kernel's own stderr (its log): the JVM's startup lines (a JDK warning, log4j's
    banner, warnings logged before ``setLogLevel``) and any later log lines go there, not into cells."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    if (SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
            or "SPARK_REMOTE" in os.environ or "SPARK_CONNECT_MODE_ENABLED" in os.environ
            or "spark.remote" in settings
            or str(settings.get("spark.api.mode", os.environ.get("SPARK_API_MODE", ""))).lower() == "connect"):
        return  # running already, or not ours to start (Spark Connect)
    try:
        stderr = sys.stderr if sys.stderr is not None and sys.stderr.fileno() >= 0 else None
    except (AttributeError, OSError, ValueError):  # no descriptor (e.g. a captured stream): inherit fd 2
        stderr = None
    if stderr is None:
        return
    from pyspark.java_gateway import launch_gateway
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app).setAll(list(settings.items()))
    with SparkContext._lock:
        if SparkContext._gateway is None:
            SparkContext._gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr})
            SparkContext._jvm = SparkContext._gateway.jvm


# -- argument checks ------------------------------------------------------------------------------------------

def check_session(spark, where: str, optional: bool = False):
    """Refuse what is not a SparkSession (duck typed, so that a Spark Connect session passes and pyspark is
    not imported) with an ArgumentTypeError naming ``where``, before any job runs."""
    if optional and spark is None:
        return
    if not callable(getattr(spark, "createDataFrame", None)):
        raise ArgumentTypeError(f"{where}: spark= must be a SparkSession (kp.spark.session() makes a local one)"
                                f"{' or None' if optional else ''}, not {type(spark).__name__}"
                                f"{f' {spark!r}' if isinstance(spark, (str, int, float)) else ''}")


def _check_engine(eng, where: str):
    from .engine.runtime import Engine
    if not isinstance(eng, Engine):
        raise ArgumentTypeError(f"{where}: the engine must be a kp.Engine (kp.engine() is the notebook's), not "
                                f"{type(eng).__name__}")


# -- Spark DataFrames as inputs -----------------------------------------------------------------------------

_SPARK_TYPES = {"byte": "int64", "short": "int64", "integer": "int64", "long": "int64",
                "float": "float64", "double": "float64", "boolean": "bool",
                "string": "str", "char": "str", "varchar": "str"}


def _advice(name: str, kind: str) -> str:
    """How to make a column of Spark type ``kind`` one kpgnb stores: only what Spark can do to that type
    (Spark refuses to cast a date, a timestamp_ntz, binary or a nested value to a number)."""
    c = f"F.col({name!r})"
    return {
        "date": f"convert it first: F.unix_date({c}) (days since 1970-01-01) or {c}.cast('string')",
        "timestamp": f"convert it first: {c}.cast('long') (seconds since 1970), F.unix_micros({c}) or "
                     f"{c}.cast('string')",
        "timestamp_ntz": f"convert it first: F.unix_micros({c}.cast('timestamp')) (microseconds, read in the "
                         f"session's time zone) or {c}.cast('string')",
        "binary": f"convert it first: F.hex({c}) or {c}.cast('string') (UTF-8 bytes)",
        "array": f"a nested type: one row per element with F.explode({c}), or select elements ({c}[0]), "
                 f"or keep it as text with F.to_json({c})",
        "map": f"a nested type: one row per entry with df.select(..., F.explode({c})) (key and value columns), "
               f"or select values ({c}['key']), or keep it as text with F.to_json({c})",
        "struct": f"a nested type: select its fields (df.select('{name}.*') or {c}.getField('a')), or keep it "
                  f"as text with F.to_json({c})",
        "decimal": f"cast it first: {c}.cast('double') or, for whole numbers, .cast('long')",
        "variant": f"extract what it holds first, e.g. F.variant_get({c}, '$.a', 'long') or F.to_json({c})",
        "void": "a column of nothing but nulls, which kpgnb columns cannot hold: drop it or fill it "
                "(F.lit(0).alias(...))",
    }.get(kind, f"convert it first, e.g. {c}.cast('long'), .cast('double') or .cast('string') where Spark "
                f"casts this type")


def dtypes_of(df) -> dict:
    """Column name -> engine dtype for a Spark DataFrame (from ``df.schema``, nothing collected) or an Arrow
    table. Types kpgnb cannot store (timestamps, decimals, arrays, ...) raise a SchemaError naming the
    column and type."""
    if is_arrow_table(df):
        fields = list(df.schema)
    elif hasattr(df, "sparkSession") and hasattr(df, "schema"):
        fields = df.schema.fields
    else:
        raise ArgumentTypeError(f"a Spark DataFrame or an Arrow table is needed here, not {type(df).__name__}; "
                                f"load pandas frames and rows with eng.input(name, rows=...)")
    names = [f.name for f in fields]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise SchemaError(f"the DataFrame has several columns named {', '.join(map(repr, dup))} (what a join of "
                          f"two frames gives); rename or drop the extra ones first")
    if is_arrow_table(df):
        return {f.name: arrow_dtype(f.name, f.type) for f in fields}
    out = {}
    for f in fields:
        t = f.dataType
        dtype = _SPARK_TYPES.get(t.typeName())
        if dtype is None:
            raise SchemaError(f"column {f.name!r} has Spark type {t.simpleString()}, which kpgnb cannot store; "
                              f"supported: tinyint, smallint, int, bigint, float, double, boolean, string "
                              f"({_advice(f.name, t.typeName())})")
        out[f.name] = dtype
    return out


def input_from(eng, name: str, df, advance: bool = True, progress=None):
    """Create the engine input ``name`` with the columns and dtypes of ``df`` (a Spark DataFrame, or an
    Arrow table) and insert its rows (through ``toArrow()``; strings interned). With ``advance`` (the
    default) the rows are sealed as epoch 0 (``advance_to(1)``), so dataflows see them at once. A
    DataFrame the engine cannot take (a type, a null) raises a SchemaError before the input is created.
    ``progress``: a ``kpgnb.widgets.Progress`` (or anything with its ``update``/``finish``/``fail``) told
    each stage (reading from Spark, loading the rows, sealing). Returns the InputSession."""
    _check_engine(eng, f"input_from(eng, {name!r}, df)")
    if not isinstance(name, str):
        raise ArgumentTypeError(f"input_from(eng, name, df): an input's name must be a non-empty str, got "
                                f"{type(name).__name__} {name!r}")
    if not name:
        raise UsageError("input_from(eng, name, df): an input's name must be a non-empty str, got ''")
    advance = check_flag(advance, f"input_from(eng, {name!r}, df): advance")
    if progress is not None and not all(callable(getattr(progress, m, None)) for m in ("update", "finish", "fail")):
        raise ArgumentTypeError(f"input_from(eng, {name!r}, df): progress is a kpgnb.widgets.Progress (or anything "
                                f"with its update, finish and fail methods) or None, not {type(progress).__name__}"
                                f"{f' ({progress!r})' if isinstance(progress, (str, int, float)) else ''}")
    if name in eng.inputs():  # (refused before the frame is read: eng.input would, after the whole read)
        err = UsageError(f"input_from(eng, {name!r}, df): an input named {name!r} exists already (drop it first "
                         f"with eng.drop_input({name!r}), or pick another name)")
        if progress is not None:
            progress.fail(f"UsageError: {err}")
        raise err
    try:
        if progress is not None:
            progress.update(note="reading the DataFrame (toArrow)")
        dtypes = dtypes_of(df)
        table = spark_arrow(df) if hasattr(df, "toArrow") else df
        schema = Schema.of(list(dtypes), dtypes)
        check_arrow(table, schema, "the Spark DataFrame" if table is not df else "the Arrow table")
        if progress is not None:
            progress.update(0, table.num_rows, note=f"loading into input {name!r}")
        inp = eng.input(name, list(dtypes), dtypes, rows=table)
        if advance:
            inp.advance_to(inp.epoch + 1)
    except BaseException as e:
        if progress is not None:
            progress.fail(f"{type(e).__name__}: {e}")
        raise
    if progress is not None:
        progress.finish(f"input {name!r} loaded" + (" and sealed as epoch 0" if advance else ""))
    return inp


# -- Structured Streaming into a live input -------------------------------------------------------------

# input session -> {(checkpoint location, query id): last batch id applied}, so that a query restarted from
# its checkpoint in this process ignores the batch Spark replays (and a new query on a fresh checkpoint at
# the same location, which numbers its batches from 0 again, does not)
_APPLIED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_APPLIED_LOCK = threading.Lock()


class BatchFeeder:
    """The ``foreachBatch`` function of :func:`follow`: ``feeder(batch_df, batch_id)`` applies one
    micro-batch as one epoch of the input (insert its rows, or ``update`` them by ``diff_col``; then
    ``advance_to(epoch + 1)``). A ``batch_id`` at or below the last applied one is a replay and is ignored.
    It uses only the input session's public, thread-safe methods; whatever they raise propagates, which
    fails the streaming query. ``batch_df`` may be a Spark DataFrame, an Arrow table or a pandas frame."""

    def __init__(self, inp, diff_col: str | None = None, resume_key=None):
        if not all(callable(getattr(inp, m, None)) for m in ("insert", "update", "flush")):  # (duck typed)
            hint = (f" (an input's name: pass the session, eng.inputs()[{inp!r}], or use kp.spark.follow, which "
                    f"takes a name)" if isinstance(inp, str) else "")
            raise ArgumentTypeError(f"BatchFeeder(inp, ...) takes an InputSession (what eng.input returns), not "
                                    f"{type(inp).__name__} {inp!r}{hint}")
        if diff_col is not None and not isinstance(diff_col, str):
            raise ArgumentTypeError(f"BatchFeeder(diff_col=...) takes the name of the micro-batches' diff column (a "
                                    f"str) or None, not {type(diff_col).__name__} ({diff_col!r})")
        if resume_key is not None and not isinstance(resume_key, (str, os.PathLike)):
            raise ArgumentTypeError(f"BatchFeeder(resume_key=...) takes the query's checkpoint location (a str or a "
                                    f"path) or None, not {type(resume_key).__name__} ({resume_key!r})")
        self.input = inp
        self.diff_col = diff_col
        self.resume_key = resume_key
        self._key = None          # (resume_key, the query id in its checkpoint), read at the first batch
        self.last_batch_id: int | None = None
        self.applied = 0          # micro-batches applied
        self.replayed = 0         # micro-batches ignored as replays
        self.rows = 0             # rows applied
        self.error: BaseException | None = None
        self._buffered: int | None = None  # batch whose rows are in the input but not yet sealed
        self._lock = threading.Lock()

    def __call__(self, batch_df, batch_id):
        batch_id = int(batch_id)
        with self._lock:
            if self.resume_key is not None and self._key is None:
                # Spark writes the query's id into the checkpoint before its first batch
                self._key = (_local_path(self.resume_key), _checkpoint_query_id(self.resume_key))
                with _APPLIED_LOCK:
                    self.last_batch_id = _APPLIED.get(self.input, {}).get(self._key)
            if self.last_batch_id is not None and batch_id <= self.last_batch_id:
                self.replayed += 1
                return
            try:
                if self._buffered != batch_id:
                    self.rows += self._insert(batch_df)
                    self._buffered = batch_id
                # a refused advance keeps the rows buffered in the input: a retry of this batch id only
                # advances
                self.input.flush()  # (one past the input's epoch, read under its lock: another feeder
                # advancing the same input meanwhile cannot make this ask for an epoch behind it)
            except BaseException as e:
                self.error = e
                raise
            self._buffered = None
            self.last_batch_id = batch_id
            self.applied += 1
            if self._key is not None:
                with _APPLIED_LOCK:
                    _APPLIED.setdefault(self.input, {})[self._key] = batch_id

    def _insert(self, batch_df) -> int:
        if hasattr(batch_df, "columns") and hasattr(batch_df, "iloc"):  # pandas: read as the input reads it
            if self.diff_col is None:                                  # (an empty frame has no Arrow types)
                self.input.insert(batch_df)
                return len(batch_df)
            if self.diff_col not in batch_df.columns:
                raise SchemaError(f"the micro-batch has no diff column {self.diff_col!r}; its columns are "
                                  f"{list(batch_df.columns)}")
            # (the Series itself: the engine reads a pandas NA as a null diff, where to_numpy() makes it NaN)
            self.input.update(batch_df.drop(columns=[self.diff_col]), batch_df[self.diff_col])
            return len(batch_df)
        table = _as_arrow(batch_df)
        if self.diff_col is None:
            self.input.insert(table)
            return table.num_rows
        if self.diff_col not in table.column_names:
            raise SchemaError(f"the micro-batch has no diff column {self.diff_col!r}; its columns are "
                              f"{list(table.column_names)}")
        col = table.column(self.diff_col)
        if arrow_family(col.type) not in ("int", "float"):
            raise SchemaError(f"diff column {self.diff_col!r} has Arrow type {col.type}; it must hold integers")
        if col.null_count:
            raise SchemaError(f"diff column {self.diff_col!r} has {col.null_count} null value(s)")
        diffs = col.to_numpy()
        self.input.update(table.drop_columns([self.diff_col]), diffs)
        return table.num_rows


def _local_path(location) -> str:
    """A checkpoint location as one spelling of its path (``file:///x/``, ``/x`` and ``x`` relative to
    the working directory are one place), so that a query resumed from it is known by whichever spelling."""
    import os
    path = str(location)
    for scheme in ("file://", "file:"):
        if path.startswith(scheme):
            path = path[len(scheme):]
            break
    return os.path.realpath(path) if "://" not in path else path.rstrip("/")


def _checkpoint_query_id(location) -> str | None:
    """The streaming query id Spark keeps in a local checkpoint's ``metadata`` file (None when the
    location is not a local directory or has none yet)."""
    import json
    import os
    try:
        with open(os.path.join(_local_path(location), "metadata")) as f:
            return json.load(f).get("id")
    except (OSError, ValueError):
        return None


def _as_arrow(df):
    if hasattr(df, "toArrow") and callable(df.toArrow):
        return spark_arrow(df)
    if is_arrow_table(df):
        return df
    if hasattr(df, "columns") and hasattr(df, "iloc"):
        import pyarrow as pa
        return pa.Table.from_pandas(df, preserve_index=False)
    raise UsageError(f"a micro-batch must be a Spark DataFrame, an Arrow table or a pandas DataFrame, "
                     f"not {type(df).__name__}")


def follow(streaming_df, input, diff_col: str | None = None, engine=None, *, trigger: dict | None = None,
           checkpoint: str | None = None, name: str | None = None):
    """Feed the engine input ``input`` (a name or an InputSession) from a streaming Spark DataFrame: a
    Structured Streaming query whose ``foreachBatch`` applies each micro-batch as one epoch (its rows
    inserted, or, with ``diff_col``, updated by that integer column, which is not part of the row), then
    advances the input. A replayed batch id is ignored (at-least-once delivery; with ``checkpoint`` this
    holds across queries restarted from it in this process). The input is created from the stream's schema
    if the engine has none by that name. An engine-side error (a schema mismatch, a closed engine) is raised
    from the batch function and fails the query: ``query.exception()`` and ``query.awaitTermination()``
    show it.

    ``engine`` defaults to ``kp.engine()``; ``trigger`` is passed to ``writeStream.trigger`` (e.g.
    ``{"processingTime": "1 second"}`` or ``{"availableNow": True}``), ``checkpoint`` sets
    ``checkpointLocation``, ``name`` the query name. Returns the StreamingQuery; its ``kpgnb_feeder``
    attribute is the :class:`BatchFeeder` (counts of applied and replayed batches)."""
    from collections.abc import Mapping
    from .engine.session import InputSession
    if not isinstance(input, (str, InputSession)):
        raise ArgumentTypeError(f"follow(input=...) takes an input's name (str) or an InputSession, not "
                                f"{type(input).__name__} {input!r}")
    if diff_col is not None and not isinstance(diff_col, str):
        raise ArgumentTypeError(f"follow(diff_col=...) takes the name of the stream's diff column (a str) or None, "
                                f"not {type(diff_col).__name__} ({diff_col!r})")
    if trigger is not None and not isinstance(trigger, Mapping):
        raise ArgumentTypeError(f"follow(trigger=...) takes a dict of writeStream.trigger's arguments (e.g. "
                                f"{{'processingTime': '1 second'}} or {{'availableNow': True}}) or None, not "
                                f"{type(trigger).__name__} ({trigger!r})")
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ArgumentTypeError(f"follow(checkpoint=...) takes the checkpoint location (a str or a path) or None, "
                                f"not {type(checkpoint).__name__} ({checkpoint!r})")
    if name is not None and not isinstance(name, str):
        raise ArgumentTypeError(f"follow(name=...) takes the query's name (a str) or None, not "
                                f"{type(name).__name__} ({name!r})")
    if engine is not None:
        _check_engine(engine, "follow(engine=...)")
    if engine is None and isinstance(input, str):  # (a session needs no engine: it feeds its own)
        import kpgnb
        engine = kpgnb.engine()
    if not isinstance(input, str) and engine is not None and engine.inputs().get(input.name) is not input:
        raise UsageError(f"follow(input=...): the input session {input.name!r} is not an input of the engine "
                         f"given (it belongs to another engine, or was dropped)")
    if not getattr(streaming_df, "isStreaming", False):
        raise UsageError("follow() needs a streaming DataFrame (spark.readStream...); insert a static one with "
                         "input.insert(df) or kpgnb.spark.input_from")
    columns = list(streaming_df.columns)
    # (refuses two columns of one name, and types the engine cannot take, up front); the diff column is
    # taken out by its exact name: Spark would read "d.x" as a path and "K" as "k"
    dtypes = dtypes_of(streaming_df)
    folded = [c for c in columns if [d.lower() for d in columns].count(c.lower()) > 1]
    if folded and streaming_df.sparkSession.conf.get("spark.sql.caseSensitive", "false").lower() != "true":
        raise SchemaError(f"the stream's columns {', '.join(map(repr, folded))} differ only by case, which Spark "
                          f"reads as one column (spark.sql.caseSensitive is off): rename one, or turn that on")
    if diff_col is not None:
        if diff_col not in columns:
            raise SchemaError(f"diff column {diff_col!r} is not in the stream's columns {columns}")
        dtype = dtypes.pop(diff_col)
        if dtype != "int64":
            raise SchemaError(f"diff column {diff_col!r} is {dtype}; it must hold integers")
    made = None
    if isinstance(input, str):
        inp = engine.inputs().get(input)
        if inp is None:
            inp = made = engine.input(input, list(dtypes), dtypes)
    else:
        inp = input
    try:
        _check_stream_schema(inp, dtypes)
        feeder = BatchFeeder(inp, diff_col, resume_key=checkpoint)
        writer = streaming_df.writeStream.foreachBatch(feeder)
        if name is not None:
            writer = writer.queryName(name)
        if checkpoint is not None:
            writer = writer.option("checkpointLocation", str(checkpoint))
        if trigger:
            writer = writer.trigger(**trigger)
        query = writer.start()
    except BaseException:
        if made is not None:  # (a query that did not start leaves no input behind: a corrected retry may
            engine.drop_input(made.name, wait=False)  # make it with another schema; queued: Ctrl-C)
        raise
    query.kpgnb_feeder = feeder
    return query


_ACCEPTS = {"int64": {"int64", "bool", "float64"}, "float64": {"int64", "float64", "bool"},
            "bool": {"bool", "int64"}, "str": {"str"}}


def _check_stream_schema(inp, dtypes: dict):
    schema = inp.schema
    if set(dtypes) != set(schema.names):
        raise SchemaError(f"the stream's columns {sorted(dtypes)} do not match input {inp.name!r}'s "
                          f"{list(schema.names)}")
    for n, d in zip(schema.names, schema.dtypes):
        if dtypes[n] not in _ACCEPTS[d]:
            raise SchemaError(f"column {n!r} of input {inp.name!r} is {d} but the stream has it as {dtypes[n]}")


# -- view changes out to a Spark sink -------------------------------------------------------------------------

class ChangeWriter:
    """Follows a view on a thread of its own and appends every item ``view.follow()`` yields (the contents
    first, then each completed epoch's changes: the view's columns plus ``time`` and ``diff``, or
    ``time_``/``diff_`` where the view has columns of those names) to a Spark sink. ``wait(epoch)`` blocks until the changes of every epoch before ``epoch`` are written; ``close()``
    stops following (after the write in progress) and raises what the writer failed with, if anything."""

    _POLL = 0.2  # how often the thread looks up from an idle follower (to report progress, to see close())

    def __init__(self, view, spark, path: str, format: str = "parquet", options: dict | None = None):
        from .engine.view import View
        if not isinstance(view, View):
            raise ArgumentTypeError(f"write_changes(view, spark, path): view must be a View, not "
                                    f"{type(view).__name__}")
        check_session(spark, f"write_changes(view {view.name!r}, spark, path)")
        if not isinstance(path, (str, os.PathLike)):
            raise ArgumentTypeError(f"write_changes(view {view.name!r}, spark, path): path must be a str or a "
                                    f"path, not {type(path).__name__}")
        if not isinstance(format, str):
            raise ArgumentTypeError(f"write_changes(view {view.name!r}, spark, path): format is the name of a Spark "
                                    f"data source (a str: 'parquet', 'json', ...), not {type(format).__name__} "
                                    f"({format!r})")
        from collections.abc import Mapping
        if options is not None and not isinstance(options, Mapping):
            raise ArgumentTypeError(f"write_changes(view {view.name!r}, spark, path): options is a dict of the "
                                    f"writer's options, not {type(options).__name__}")
        self.view = view
        self.spark = spark
        self.path = str(path)
        self.format = format
        self.options = dict(options or {})
        self.rows = 0                 # change rows written
        self.writes = 0               # Spark writes made
        self.error: BaseException | None = None
        self.stopped: DataflowError | None = None  # why the writer stopped early without failing (a drop)
        self.written: int | None = 0  # every epoch before this one is in the sink (None: all of them)
        self.done = False
        self._closing = False
        self._cond = threading.Condition()
        self._follower = view.follow(timeout=self._POLL)
        self._schema = _arrow_schema(view.schema, self._follower.time_col, self._follower.diff_col)
        self.thread = threading.Thread(target=self._run, name=f"kpgnb-write-{view.name}", daemon=True)
        self.thread.start()

    def _run(self):
        import pyarrow as pa
        f = self._follower
        try:
            while not self._closing:
                try:
                    changes = next(f)
                except StopIteration:
                    if not self._closing and f.epoch is not None:  # (not every input closed: the view went)
                        self.stopped = DataflowError(
                            f"view {self.view.name!r} was dropped (its dataflow {self.view.dataflow!r} is gone): "
                            f"the sink holds its changes before epoch {self.written} and none after")
                    break
                except TimeoutError:  # nothing new: everything taken so far is written
                    self._progress(f.epoch)
                    continue
                if len(changes):
                    table = pa.Table.from_pandas(changes, schema=self._schema, preserve_index=False)
                    (self.spark.createDataFrame(table).write.mode("append").format(self.format)
                     .options(**self.options).save(self.path))
                    self.rows += len(changes)
                    self.writes += 1
                self._progress(f.epoch)
        except BaseException as e:  # noqa: BLE001 - kept, raised by wait() and close()
            self.error = e
        finally:
            with self._cond:
                self.done = True
                self._cond.notify_all()

    def _progress(self, epoch):
        with self._cond:
            self.written = epoch
            self._cond.notify_all()

    def wait(self, epoch: int, timeout: float | None = 60.0) -> "ChangeWriter":
        """Block until the changes of every epoch before ``epoch`` are in the sink (or the writer stopped);
        raises what the writer failed with, a DataflowError if the view was dropped before ``epoch`` was
        written (no change of it will come), TimeoutError after ``timeout`` seconds."""
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not (self.done or self.written is None or self.written >= epoch):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"changes of view {self.view.name!r} before epoch {epoch} not written "
                                       f"within {timeout} s (written up to {self.written})")
                self._cond.wait(left)
        if self.error is not None:
            raise self.error
        if self.stopped is not None and self.written is not None and self.written < epoch:
            raise self.stopped
        return self

    def close(self, timeout: float = 60.0):
        """Stop writing (the write in progress completes); raises what the writer failed with, if anything."""
        self._closing = True
        self._follower.close()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)
        if self.error is not None:
            raise self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _arrow_schema(schema, time_col: str, diff_col: str):
    import pyarrow as pa
    from .spark_workers import arrow_type
    return pa.schema([pa.field(n, arrow_type(d)) for n, d in zip(schema.names, schema.dtypes)]
                     + [pa.field(time_col, pa.int64()), pa.field(diff_col, pa.int64())])


def write_changes(view, spark, path, format: str = "parquet", **options) -> ChangeWriter:
    """Append the changes of ``view`` to the Spark sink at ``path`` (``format``: parquet, json, csv, orc,
    delta...; ``options`` for the writer) from a background thread: first the contents, then each completed
    epoch's changes, as rows of the view's columns plus ``time`` and ``diff`` (so summing ``diff`` by row
    gives the view). Returns a :class:`ChangeWriter` (``wait(epoch)``, ``close()``)."""
    return ChangeWriter(view, spark, path, format, options)


def run(build, inputs: dict, spark=None, *, diff_col: str | None = None, diffs: bool = False,
        compact_every: int = 8) -> dict:
    """Evaluate a dataflow as Spark DataFrame jobs, for data one machine cannot hold: ``build(df)`` is the
    function a user calls inside ``with eng.dataflow(...) as df`` (it defines views, or returns its
    collections); ``inputs`` maps the input names it reads to Spark DataFrames. Returns view name -> Spark
    DataFrame with the view's columns (rows repeated by multiplicity, or with ``diffs=True`` a ``diff``
    column, ``diff_`` for a view with a column named diff), equal to what the engine's views would hold. An operator Spark cannot run raises a
    DataflowError naming it before any job starts. See kpgnb/spark_backend.py."""
    check_session(spark, "kp.spark.run", optional=True)
    from .spark_backend import run as run_on_spark
    return run_on_spark(build, inputs, spark, diff_col=diff_col, diffs=diffs, compact_every=compact_every)


def datalog(text: str, inputs: dict, spark=None, *, diffs: bool = False) -> dict:
    """A Datalog program (the language of ``eng.datalog``) evaluated as Spark jobs: ``inputs`` maps each
    input predicate to a Spark (or pandas) DataFrame, columns by position. Returns derived predicate ->
    Spark DataFrame, equal to the engine's ``prog[pred]`` on the same inputs."""
    check_session(spark, "kp.spark.datalog", optional=True)
    if not isinstance(text, str):
        raise ArgumentTypeError(f"kp.spark.datalog: the program is Datalog text (a str), not {type(text).__name__}")
    if inputs is not None and not isinstance(inputs, dict):
        raise ArgumentTypeError(f"kp.spark.datalog: inputs= maps input predicates to Spark (or pandas) DataFrames "
                                f"({{'edge': sdf}}), not a {type(inputs).__name__}")
    diffs = check_flag(diffs, "kp.spark.datalog: diffs")
    if isinstance(inputs, dict):
        for pred, f in inputs.items():
            if getattr(f, "isStreaming", False) is True:
                raise SchemaError(f"input {pred!r} is a streaming DataFrame: kp.spark.datalog evaluates static "
                                  f"ones; feed a stream into an engine input with kp.spark.follow and run the "
                                  f"program there (eng.datalog)")
    from .datalog.program import run_on_spark
    return run_on_spark(text, inputs, spark, diffs=diffs)
