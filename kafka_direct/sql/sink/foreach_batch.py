"""Exactly-once PostgreSQL writes from ``writeStream.foreachBatch``: the way to ``update``.

Spark (4.3) refuses ``outputMode("update")`` for every Python streaming sink, the
``kafka-direct-postgres`` one included. ``foreachBatch`` takes every output mode, so::

    from kafka_direct.sql import foreach_batch_sink

    (counts.writeStream.outputMode("update")
        .foreachBatch(foreach_batch_sink(dsn=dsn, password=secret, table="counts",
                                         mode="update", keyColumns="key"))
        .option("checkpointLocation", "/chk/counts").start())

Each call writes the micro-batch with ``df.write.format("kafka-direct-postgres")`` under
the query's id and the batch id (options ``microBatch.queryId`` / ``microBatch.batchId``):
tasks stage, and the commit moves the rows in one transaction that records (query,
target, batch) as ``writeStream`` does. A batch Spark runs again after a restart (its
function ran, then the driver died before the batch's commit log) finds its record and
writes nothing. The options are the sink's (:mod:`kafka_direct.sql.sink.options`),
offset-store link included; ``mode`` must be given, because the function cannot see the
query's output mode: ``update`` (upsert on ``keyColumns``) for ``outputMode("update")``,
``complete`` (replace the rows, written with ``mode("overwrite")``) for
``outputMode("complete")``, ``append`` for ``outputMode("append")``.

Limits:

* Classic Spark only, called on the thread Spark calls the function on: over Spark
  Connect ``foreachBatch`` does not see the query's id. Use
  ``writeStream.format("kafka-direct-postgres")`` there (``append`` or ``complete``).
* One write per table per batch (the commit record is per (query, target), so a second
  one would be taken for a re-run): a second write of a batch to a table in one run is
  refused; union the DataFrames first.
* With ``offsetStore.name``: one linked table per store (the others without the option),
  and the function must write every batch, empty ones included (a batch not written
  leaves its offsets unstored and the next batch is refused with OffsetMismatchError).
  The store restores the source's offsets, not a stateful query's state: after a lost
  checkpoint, an aggregation starts from empty state (counts start again from the
  stored offsets).
* With DEBUG logging on, py4j logs the commands PySpark sends, options included: the DSN
  and password then reach py4j's log. Give the password through ``PGPASSWORD`` or
  ``~/.pgpass`` where that matters.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.formats import (
    BATCH_ID_PROPERTY,
    POSTGRES_SINK_FORMAT,
    QUERY_ID_PROPERTY,
    RUN_ID_PROPERTY,
)
from kafka_direct.sql.sink.options import resolve_mode

__all__ = ["ForeachBatchSink", "foreach_batch_sink"]

_RESERVED = ("microbatch.queryid", "microbatch.batchid")
_SCALARS = (str, bool, int, float)

# What this process wrote in each run of a query: (run, target) -> the newest batch, and
# (run, offset store) -> the one target linked to it. A run is one start of the query, so
# a restart that runs a batch again starts afresh (its commit record then writes nothing).
_written: dict[tuple[str, str], int] = {}
_linked: dict[tuple[str, str], str] = {}
_mutex = threading.Lock()


class ForeachBatchSink:
    """A ``foreachBatch`` function writing each micro-batch exactly once into PostgreSQL.

    Build it with :func:`foreach_batch_sink`. Its repr names the target, never the DSN or
    the password.
    """

    __slots__ = ("_options", "_saveMode", "_store", "_target")

    def __init__(self, options: Mapping[str, Any]) -> None:
        given = {str(k): _option_text(str(k), v) for k, v in options.items() if v is not None}
        lowered = {k.lower(): v for k, v in given.items()}
        taken = [k for k in _RESERVED if k in lowered]
        if taken:
            raise ConfigurationError(
                f"foreach_batch_sink sets option {taken[0]} itself for each batch: drop it",
                setting=taken[0])
        if not lowered.get("table", "").strip():
            raise ConfigurationError(
                "foreach_batch_sink needs option table: the target table's name (and option "
                "schema for its schema)", setting="table")
        if "mode" not in lowered:
            raise ConfigurationError(
                "foreach_batch_sink needs option mode, as it cannot see the query's output "
                "mode: update (upsert on keyColumns) for outputMode('update'), complete for "
                "outputMode('complete'), append for outputMode('append')", setting="mode")
        mode = resolve_mode(lowered["mode"], overwrite=False)
        self._options = given
        self._saveMode = "overwrite" if mode == "complete" else "append"
        self._target = f"{lowered.get('schema') or 'public'}.{lowered['table']}"
        store = lowered.get("offsetstore.name")
        self._store = (None if store is None else
                       f"{lowered.get('offsetstore.schema') or 'public'}.{store}")

    def __repr__(self) -> str:
        return f"foreach_batch_sink({self._target}, {self._saveMode})"

    def __call__(self, batch: Any, batchId: int) -> None:
        """Write ``batch``, micro-batch ``batchId`` of the running query, exactly once.

        Raises:
            ConfigurationError: Not called by a streaming query's ``foreachBatch`` on
                classic Spark (no query id to commit under), ``batchId`` not the running
                batch's, a second write of the batch to this table, a second table linked
                to the offset store, or a bad sink option.
            SinkWriteError: As the sink's commit.
        """
        queryId, runId = _running(batch, batchId)
        self._check(runId, batchId)
        (batch.write.format(POSTGRES_SINK_FORMAT).options(**self._options)
         .option("microBatch.queryId", queryId).option("microBatch.batchId", str(batchId))
         .mode(self._saveMode).save())
        with _mutex:  # only once written: a write that failed may be tried again
            _written[(runId, self._target)] = batchId

    def _check(self, runId: str, batchId: int) -> None:
        with _mutex:
            if _written.get((runId, self._target)) == batchId:
                raise ConfigurationError(
                    f"micro-batch {batchId} was written to {self._target} already in this run: "
                    "a second write of a batch to a table would be taken for a re-run and "
                    "write nothing; union the DataFrames and write once", setting="table")
            if self._store is not None:
                linked = _linked.setdefault((runId, self._store), self._target)
                if linked != self._target:
                    raise ConfigurationError(
                        f"offset store {self._store} is linked to {linked} in this query "
                        f"already: link one table per store (write {self._target} without "
                        "offsetStore.name)", setting="offsetStore.name")


def _option_text(key: str, value: Any) -> str:
    if not isinstance(value, _SCALARS):
        raise ConfigurationError(
            f"option {key} must be text, a number or a boolean, got "
            f"{type(value).__name__} (a list of columns is one comma-separated text)",
            setting=key)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _running(batch: Any, batchId: Any) -> tuple[str, str]:
    """The running query's id and run id, checking ``batchId`` is the running batch's."""
    # Not at the module's top: importing kafka_direct.sql must not need PySpark >= 4.2.

    try:
        context = batch.sparkSession.sparkContext
    except Exception:  # Spark Connect has no SparkContext (PySparkNotImplementedError)
        context = None
    if context is None:
        raise ConfigurationError(
            "foreach_batch_sink needs classic Spark: over Spark Connect foreachBatch does not "
            "see the query's id, so batches could not be committed once. Use "
            "writeStream.format('kafka-direct-postgres') there (outputMode append or "
            "complete)", setting="foreachBatch")
    queryId = context.getLocalProperty(QUERY_ID_PROPERTY)
    running = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not queryId or running is None:
        raise ConfigurationError(
            "foreach_batch_sink runs as a streaming query's foreachBatch function "
            "(writeStream.foreachBatch(...)), on the thread Spark calls it on: called "
            "elsewhere (another thread, a batch job) there is no query id to commit under; "
            "use df.write.format('kafka-direct-postgres') for a batch DataFrame",
            setting="foreachBatch")
    if isinstance(batchId, bool) or not isinstance(batchId, int) or str(batchId) != running:
        raise ConfigurationError(
            f"foreach_batch_sink was given batch id {batchId!r} while Spark runs micro-batch "
            f"{running}: pass on the batch id foreachBatch gives the function",
            setting="batchId")
    return str(queryId), str(context.getLocalProperty(RUN_ID_PROPERTY) or queryId)


def foreach_batch_sink(options: Mapping[str, Any] | None = None, /,
                       **more: Any) -> ForeachBatchSink:
    """A ``foreachBatch`` function writing each micro-batch exactly once (see the module).

    Args:
        options: The sink's options (``dsn``, ``password``, ``table``, ``mode``,
            ``keyColumns``, ``offsetStore.name`` ...), as a mapping.
        **more: More options, as keywords (they win over ``options``).

    Raises:
        ConfigurationError: No ``table``, an unknown ``mode``, or an option the function
            sets itself. The rest is checked at the first batch, against its columns.
    """
    return ForeachBatchSink({**(options or {}), **more})
