"""The ingest job on Structured Streaming: ``kafka-direct`` source -> ``kafka-direct-postgres``.

The same job as :func:`kafka_direct.app.ingest_job.run_ingest` (same table, same summary),
as a streaming query: the source subscribes as the job's options say and records each
batch's offsets under the job's group name; the sink writes each batch and those offsets
in one PostgreSQL transaction. The checkpoint directory is a convenience: without it (a
fresh one every run) the query resumes from the offsets in PostgreSQL, nothing lost or
repeated. Once started, the query is followed by :mod:`~kafka_direct.app.query_progress`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from kafka_direct.app.ingest_options import (
    IngestOptions,
    IngestResult,
    local_parallelism,
    spark_context_arguments,
)
from kafka_direct.app.ingest_table import ensure_table
from kafka_direct.app.interrupts import TwoStageInterrupt
from kafka_direct.app.query_progress import QueryProgress, follow
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.offsets_json import offsets_from_json, offsets_to_json
from kafka_direct.sql.kafka_options import KAFKA_PREFIX
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["FIRST_BATCH_RECORDS", "QUERY_NAME", "job_settings", "run_structured_ingest",
           "sink_options", "source_options", "stored_offsets"]

logger = logging.getLogger(__name__)

#: The streaming query's name (Spark's UI and progress reports show it).
QUERY_NAME = "kafka_direct_ingest"

#: The most records the first batch of a run reads, unless ``--first-batch-records`` says
#: otherwise. The first batch pays for the query's start (Spark's planning processes, its
#: code generation, the workers' first tasks, the sink's first write planning and commit):
#: about 1.5 s beyond a later batch on a quiet machine. With a backlog, a first batch of
#: a whole interval's records (200,000 in the benchmark) commits its first rows that much
#: later again; 10,000 records add tens of milliseconds to it. The later batches read as
#: the rate says, so a run takes about as long.
FIRST_BATCH_RECORDS = 10_000


def stored_offsets(dsn: str, schema: str, group: str) -> dict[TopicPartition, int]:
    """The next offsets the sink stored under ``group`` (empty before the first batch)."""
    from kafka_direct.sql.link.source_side import SourceLink

    committed = SourceLink(dsn=dsn, store=group, schema=schema).committed() or {}
    return offsets_from_json(committed, f"the offsets stored under {group!r}")


def _spark_starting_offsets(options: IngestOptions) -> str:
    policy, explicit = options.starting
    if not explicit:
        return policy
    # Spark's JSON: -2 is the earliest offset, -1 the latest, for partitions not named.
    return json.dumps(offsets_to_json(explicit))


#: The source's columns the job reads, and how the table names them.
_INGEST_COLUMNS = ("topic", "partition", "offset", "key", "value")
_INGEST_NAMES = ("topic", "kafka_partition", "kafka_offset", "key", "value")


def source_options(options: IngestOptions, bootstrapServers: str, dsn: str,
                   kafkaParams: Mapping[str, Any]) -> dict[str, str]:
    """The ``kafka-direct`` source's options for the job (DSN included: never log them).

    ``maxRatePerPartition`` becomes the source's ``maxOffsetsPerPartitionPerTrigger``
    (records per partition and batch interval, at least one as the direct stream's): the
    source multiplies it by the partitions it sees at each trigger, so partitions a
    pattern's topics gain while the job runs get their share. ``firstBatchRecords`` (default
    :data:`FIRST_BATCH_RECORDS`) becomes ``maxOffsetsFirstTrigger``: the run's first batch
    reads no more, and commits before the later ones catch up. Every offset is read once
    either way: a batch's end is in the query's offset log before it runs.

    Args:
        options: What to read (topics or pattern, starting offsets, rate, group).
        bootstrapServers: The Kafka cluster.
        dsn: libpq connection string of the offset store's database.
        kafkaParams: More librdkafka properties (security settings...).
    """
    source = {f"kafka.{key}": str(value) for key, value in kafkaParams.items()}
    source["kafka.bootstrap.servers"] = bootstrapServers
    if options.pattern:
        source["subscribePattern"] = options.pattern
    else:
        source["subscribe"] = ",".join(options.topics)
    source["startingOffsets"] = _spark_starting_offsets(options)
    if options.maxRatePerPartition:
        perPartition = max(int(options.maxRatePerPartition * options.batchInterval), 1)
        source["maxOffsetsPerPartitionPerTrigger"] = str(perPartition)
    # Each batch's end goes to the consumer group after its commit, for lag tools only:
    # the query resumes from its checkpoint or the offset store, never from the group.
    first = (FIRST_BATCH_RECORDS if options.firstBatchRecords is None
             else options.firstBatchRecords)
    if first:
        source["maxOffsetsFirstTrigger"] = str(first)
    source["kafka.group.id"] = options.group
    source["commitOffsetsToGroup"] = "true"
    source["offsetStore.name"] = options.group
    source["offsetStore.dsn"] = dsn
    source["offsetStore.schema"] = options.schema
    # The sink's tasks read the records (sink_options): no record crosses Spark's JVM.
    source["emit"] = "offsetRanges"
    return source


def sink_options(options: IngestOptions, dsn: str) -> dict[str, str]:
    """The ``kafka-direct-postgres`` sink's options for the raw job (DSN included: never log).

    Beside these the sink gets the source's ``kafka.*`` options and ``recordColumns``: it
    reads the offset ranges the source hands on, and its tasks COPY the records straight
    into the table, claiming their offsets (``offsetColumns``); each batch's commit stores
    its offsets (``offsetStore.name``).

    Args:
        options: The table, schema and group.
        dsn: libpq connection string of the database.
    """
    return {"dsn": dsn, "schema": options.schema, "table": options.table,
            "columns": ",".join(_INGEST_NAMES),
            "offsetColumns": "topic,kafka_partition,kafka_offset",
            "offsetStore.name": options.group, "offsetStore.schema": options.schema}


#: Where Spark's local file system keeps a checkpoint without a shell command per file.
_LOCAL_CHECKPOINT_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                             "FileSystemBasedCheckpointFileManager")


def job_settings(master: str, checkpoint: str) -> dict[str, str]:
    """The Spark settings the job runs its query with, beyond the runtime's (documented).

    A micro-batch every fraction of a second pays Spark's fixed costs every time, so:

    * ``spark.default.parallelism`` = the local master's threads (``local[N]``: N; a
      cluster keeps Spark's): the source keeps at least that many tasks a batch
      (:func:`~kafka_direct.sql.source.planning.pack_ranges`); more than the cores run in
      waves, each task paying for its Python workers' hand-over and its PostgreSQL
      transactions.
    * ``spark.sql.streaming.checkpointFileManagerClass`` = Spark's FileSystem-based
      manager, for a checkpoint on the local file system only: Spark's default (the
      FileContext one) has Hadoop run a ``readlink`` process for each file it renames (four
      a batch: the offset log, the commit log and their checksums), tens of milliseconds
      a batch. A local rename is atomic either way. Other file systems keep Spark's.
    * ``spark.sql.ui.explainMode`` = ``simple``: Spark describes each batch's plan for its
      listeners; the default (formatted) walks the plan twice more.
    * ``spark.sql.streaming.noDataProgressEventInterval`` = ``0``: Spark reports every
      trigger that found no new offsets (by default one in ten seconds), so
      ``--stop-after-idle N`` ends the job right after N such triggers, as the direct
      stream after N batches that read nothing, instead of N batch intervals later.

    Args:
        master: The Spark master.
        checkpoint: The query's checkpoint location.
    """
    settings = {"spark.sql.ui.explainMode": "simple",
                "spark.sql.streaming.noDataProgressEventInterval": "0"}
    parallelism = local_parallelism(master)
    if parallelism is not None:
        settings["spark.default.parallelism"] = parallelism
    scheme = urlsplit(checkpoint).scheme.lower()
    if scheme == "file" or (not scheme and master.startswith("local")):
        settings["spark.sql.streaming.checkpointFileManagerClass"] = _LOCAL_CHECKPOINT_MANAGER
    return settings


def _metadata_selection(records: TypedOptions | None) -> tuple[str, ...]:
    """The source's timestamp and headers columns the record options need (if any)."""
    if records is None:
        return ()
    return ((("timestamp",) if records.timestampColumn is not None else ())
            + (("headers",) if records.headerColumns else ()))


def run_structured_ingest(options: IngestOptions, bootstrapServers: str, dsn: str,
                          out: TextIO | None = None,
                          kafkaParams: Mapping[str, Any] | None = None,
                          signals: TwoStageInterrupt | None = None,
                          result: IngestResult | None = None,
                          checkpointDir: str | Path | None = None,
                          records: TypedOptions | None = None) -> IngestResult:
    """Run the ingest job as a streaming query until stopped, idle long enough, or failed.

    Args:
        options: What to read and write (``options.api`` is ``structured``).
        bootstrapServers: The Kafka cluster.
        dsn: libpq connection string of the database (never logged).
        out: Where per-batch progress lines go (None: the log only).
        kafkaParams: More librdkafka properties (security settings...).
        signals: Stop once ``signals.requested`` is set, after the running batch.
        result: Count into this result.
        checkpointDir: The query's checkpoint location (None: a fresh temporary one; the
            query then starts from the offsets in PostgreSQL).
        records: How records become rows (:mod:`kafka_direct.app.typed`); None or raw:
            the raw bytes through the ``kafka-direct-postgres`` sink.

    Returns:
        What the run did (``result`` when given).

    Raises:
        KafkaDirectError: What stopped the query (the source's or the sink's typed error);
            run again to resume.
    """
    from pyspark.sql import SparkSession

    from kafka_direct.app.typed.routing import TableRoute
    from kafka_direct.runtime.spark import spark_context
    from kafka_direct.runtime.spark_log import quiet_spark_log
    from kafka_direct.sql import POSTGRES_SINK_FORMAT, SOURCE_FORMAT, register

    typed = TableRoute(options.table).perTopic or (records is not None and records.active)
    if typed:
        from kafka_direct.app.typed.table import prepare_tables

        records = records or TypedOptions()  # raw key and value columns, a table per topic
        prepare_tables(dsn, options.schema, options.table, records, structured=True,
                       topics=options.topics)
    else:
        ensure_table(dsn, options.schema, options.table)
    result = IngestResult() if result is None else result
    stopRequested = signals.requested if signals is not None else threading.Event()
    if stopRequested.is_set():
        result.offsets = stored_offsets(dsn, options.schema, options.group)
        return result
    local = options.master.startswith("local")
    scratch = tempfile.TemporaryDirectory(prefix="kafka-direct-ingest-")
    location = str(checkpointDir) if checkpointDir else str(Path(scratch.name) / "checkpoint")
    pauseFile = Path(scratch.name) / "pause"
    # The parallelism is the context's (spark_context_arguments); the session's settings
    # give way to spark-submit's.
    settings = job_settings(options.master, location)
    settings.pop("spark.default.parallelism", None)
    with scratch, spark_context(
            **spark_context_arguments(options, signals is not None)) as sc, \
            contextlib.ExitStack() as scope:
        if signals is not None:
            signals.install()
        if not logger.isEnabledFor(logging.INFO):
            scope.enter_context(quiet_spark_log(sc))
        # While the session is made (the JVM's work, on one core): Spark's lookup of the
        # Python data sources, which the registration would wait for, and its imports.
        from kafka_direct.app.warm_up import look_up_data_sources_ahead

        look_up_data_sources_ahead(sc)
        spark = SparkSession(sc)
        given_conf = sc.getConf()
        for key, value in settings.items():
            if not given_conf.contains(key):
                spark.conf.set(key, value)
        register(spark)
        if local:
            from kafka_direct.rdd.worker_exit import end_lookup_daemon

            # Spark's data source lookup is done; its idle worker would print a traceback
            # when Spark closes it a minute later (see the module).
            end_lookup_daemon(sc)
        reader = spark.readStream.format(SOURCE_FORMAT)
        given = source_options(options, bootstrapServers, dsn, kafkaParams or {})
        # A stop pauses the source first: no batch starts after the running one.
        given["pauseFile"] = str(pauseFile)
        for key, value in given.items():
            reader = reader.option(key, value)
        # The records never become Spark rows: the source hands on the offset ranges and
        # the sink's tasks read them (the reading options are the source's).
        ranges = reader.load()
        reading = {key: value for key, value in given.items()
                   if key.startswith(KAFKA_PREFIX)}
        columns = (*_INGEST_COLUMNS, *_metadata_selection(records if typed else None))
        reading["recordColumns"] = ",".join(columns)
        if typed:
            assert records is not None
            query = _typed_query(spark, ranges, records, options, dsn, location, reading)
        else:
            writer = ranges.writeStream.format(POSTGRES_SINK_FORMAT)
            sink = sink_options(options, dsn)
            for key, value in {**sink, **reading}.items():
                writer = writer.option(key, value)
            query = _trigger(writer.option("checkpointLocation", location)
                             .queryName(QUERY_NAME), options).start()
        # Raw rows are at their offsets: a batch's rows can be counted there afterwards.
        counts = BatchCounts(dsn, options, str(query.id), rowsAtOffsets=not typed)
        progress = QueryProgress(result, options.stopAfterIdleBatches, options.batchInterval,
                                 out, counts)
        try:
            follow(query, progress, stopRequested, QUERY_NAME, pause=pauseFile.touch,
                   endsByItself=options.availableNow)
        finally:
            if query.isActive:
                query.stop()
        result.offsets = stored_offsets(dsn, options.schema, options.group)
    return result


class BatchCounts:
    """A committed batch's records and rows, as the offset link and the sink recorded them.

    The raw job's source hands on offset ranges, so Spark counts ranges, not records: the
    records are the offsets of the batch's plan in the link (transaction markers included,
    as the direct stream counts them), the rows those the sink's commit recorded for the
    batch. The commit row holds the newest batch's only: a batch asked about once the next
    one committed (a poll that missed it) counts, on the raw path (``rowsAtOffsets``), the
    table's rows at the plan's offsets, which direct writes put there once and never
    change; the typed path then counts its offsets as rows.
    """

    def __init__(self, dsn: str, options: IngestOptions, queryId: str,
                 rowsAtOffsets: bool = False) -> None:
        from kafka_direct.postgres.connection import Database

        self.database = Database(dsn)
        self.schema, self.store, self.queryId = options.schema, options.group, queryId
        self.table = options.table
        self.target = f"{options.schema}.{options.table}"
        self.rowsAtOffsets = rowsAtOffsets

    def __repr__(self) -> str:
        return f"BatchCounts({self.target})"  # the DSN stays out

    def __call__(self, batchId: int) -> tuple[int, int] | None:
        """``(records, rows)`` of batch ``batchId`` (zeros when it has no plan).

        None when the database does not answer (a warning): the counts only inform, and
        the batch is committed.
        """
        try:
            return self._counts(batchId)
        except Exception as error:
            from kafka_direct.postgres.errors import database_error

            logger.warning("the counts of batch %d are not known: %s", batchId,
                           database_error(error, self.database, doing="counting a batch",
                                          table=self.target))
            return None

    def _counts(self, batchId: int) -> tuple[int, int]:
        from psycopg2 import sql

        from kafka_direct.postgres.connection import transaction
        from kafka_direct.postgres.staging import COMMITS_TABLE
        from kafka_direct.sql.link.sink_side import bound_plan
        from kafka_direct.sql.link.tables import PLANS_TABLE, table_identifier

        with transaction(self.database) as cursor:
            plan = bound_plan(cursor, table_identifier(self.schema, PLANS_TABLE), self.store,
                              self.queryId, batchId)
            cursor.execute(sql.SQL("SELECT rows FROM {} WHERE query_id = %s AND target = %s "
                                   "AND batch_id = %s").format(
                sql.Identifier(self.schema, COMMITS_TABLE)),
                (self.queryId, self.target, batchId))
            found = cursor.fetchone()
            rows = None if found is None else int(found[0])
            ranges = [] if plan is None else _plan_ranges(plan[1], plan[2])
            records = sum(until - first for _, _, first, until in ranges)
            if rows is None and ranges and self.rowsAtOffsets:
                cursor.execute(sql.SQL(
                    "SELECT count(*) FROM {} AS t JOIN unnest(%s::text[], %s::int[], "
                    "%s::bigint[], %s::bigint[]) AS r(topic, p, first, until) ON "
                    "t.topic = r.topic AND t.kafka_partition = r.p AND "
                    "t.kafka_offset >= r.first AND t.kafka_offset < r.until").format(
                    sql.Identifier(self.schema, self.table)),
                    [list(column) for column in zip(*ranges, strict=True)])
                rows = int(cursor.fetchone()[0])
        return records, records if rows is None else rows


def _plan_ranges(start: Any, end: Any) -> list[tuple[str, int, int, int]]:
    """A plan's non-empty ranges, ``(topic, partition, from, until)``.

    Its start holds every partition of its end
    (:func:`~kafka_direct.sql.source.stream_reader.plan_offsets`).
    """
    first = offsets_from_json(start, "a batch plan's start")
    return [(tp.topic, tp.partition, first.get(tp, 0), until)
            for tp, until in offsets_from_json(end, "a batch plan's end").items()
            if until > first.get(tp, 0)]


def _typed_query(spark: Any, ranges: Any, records: TypedOptions, options: IngestOptions,
                 dsn: str, location: str, reading: Mapping[str, str]) -> StreamingQuery:
    """Start the query writing typed rows (:mod:`kafka_direct.app.typed.structured`).

    ``reading``: the options the sink's tasks read the source's offset ranges with.
    """
    from kafka_direct.app.typed.formats import fetch_schemas
    from kafka_direct.app.typed.structured import FORMAT, TypedIngestSink, sink_options

    spark.dataSource.register(TypedIngestSink)
    writer = ranges.writeStream.format(FORMAT)
    schemas = fetch_schemas(records, options.topics)  # the tasks need not ask the registry
    given = sink_options(records, dsn, options.schema, options.table, options.group,
                         options.statementTimeoutMs, schemas)
    for key, value in {**given, **reading}.items():
        writer = writer.option(key, value)
    query: StreamingQuery = _trigger(
        writer.option("checkpointLocation", location).queryName(QUERY_NAME), options).start()
    return query


def _trigger(writer: Any, options: IngestOptions) -> Any:
    """``writer`` with the job's trigger: every batch interval, or ``Trigger.AvailableNow``.

    Under ``AvailableNow`` the source fixes its target at the log ends of the query's start
    and Spark runs the batches one after another (each capped as ``maxRatePerPartition``
    times the interval says) until it is reached; the query then ends by itself. A
    processing-time trigger waits for the next interval after each batch even while a
    backlog is left: right for a job that runs on, idle time for one that drains.
    """
    if options.availableNow:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{options.batchInterval} seconds")
