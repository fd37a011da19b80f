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
batch) as ``writeStream`` does. A batch Spark runs again after a restart (its function
ran, then the driver died before the batch's commit log) finds its record and writes
nothing. The options are the sink's (:mod:`kafka_direct.sql.sink_options`), offset-store
link included; ``mode=complete`` writes with ``mode("overwrite")``.

Limits:

* Classic Spark only: over Spark Connect, ``foreachBatch`` does not see the query's id.
  Use ``writeStream.format("kafka-direct-postgres")`` there (``append`` or ``complete``).
* One call per target per batch: the commit record is per (query, target), so a second
  write of the same batch to the same table is taken for a re-run and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.registration import POSTGRES_SINK_FORMAT
from kafka_direct.sql.sink_options import resolve_mode

__all__ = ["ForeachBatchSink", "foreach_batch_sink"]

_RESERVED = ("microbatch.queryid", "microbatch.batchid")


class ForeachBatchSink:
    """A ``foreachBatch`` function writing each micro-batch exactly once into PostgreSQL.

    Build it with :func:`foreach_batch_sink`. Its repr names the target, never the DSN or
    the password.
    """

    __slots__ = ("_options", "_saveMode")

    def __init__(self, options: Mapping[str, Any]) -> None:
        lowered = {str(k).lower(): v for k, v in options.items()}
        taken = [k for k in _RESERVED if k in lowered]
        if taken:
            raise ConfigurationError(
                f"foreach_batch_sink sets option {taken[0]} itself for each batch: drop it",
                setting=taken[0])
        if lowered.get("table") is None or not str(lowered["table"]).strip():
            raise ConfigurationError(
                "foreach_batch_sink needs option table: the target table's name (and option "
                "schema for its schema)", setting="table")
        mode = resolve_mode(lowered.get("mode"), overwrite=False)
        self._options = {str(k): str(v) for k, v in options.items()}
        self._saveMode = "overwrite" if mode == "complete" else "append"

    def __repr__(self) -> str:
        lowered = {k.lower(): v for k, v in self._options.items()}
        return (f"foreach_batch_sink({lowered.get('schema') or 'public'}."
                f"{lowered['table']}, {self._saveMode})")

    def __call__(self, batch: Any, batchId: int) -> None:
        """Write ``batch``, micro-batch ``batchId`` of the running query, exactly once.

        Raises:
            ConfigurationError: Not called by a streaming query's ``foreachBatch`` on
                classic Spark (no query id to commit under), or a bad sink option.
            SinkWriteError: As the sink's commit.
        """
        queryId = _query_id(batch)
        (batch.write.format(POSTGRES_SINK_FORMAT).options(**self._options)
         .option("microBatch.queryId", queryId).option("microBatch.batchId", str(batchId))
         .mode(self._saveMode).save())


def _query_id(batch: Any) -> str:
    # Not at the module's top: importing kafka_direct.sql must not need PySpark >= 4.2.
    from kafka_direct.sql.postgres_sink import QUERY_ID_PROPERTY

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
    if not queryId:
        raise ConfigurationError(
            "foreach_batch_sink runs as a streaming query's foreachBatch function "
            "(writeStream.foreachBatch(...)): called elsewhere there is no query id to commit "
            "under; use df.write.format('kafka-direct-postgres') for a batch DataFrame",
            setting="foreachBatch")
    return str(queryId)


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
