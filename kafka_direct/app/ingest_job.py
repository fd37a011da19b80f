"""The ingest job on the direct stream: Kafka into a PostgreSQL table, exactly once.

:func:`run_ingest` reads topics (or a pattern) with a direct stream that resumes from a
:class:`~offsets.PostgresOffsetStore` and writes each batch with the transactional sink
(rows and offsets in one transaction per partition) or the idempotent sink (upsert on the
record's topic, partition and offset; offsets stored after the write). Whatever stops it — a
kill -9, a failed database, a lost broker — running it again resumes after the last
committed range: nothing is lost, nothing is written twice.

The job holds its consumer group for as long as it runs (an advisory lock in the database),
so a second job of the same group fails at once with :class:`GroupBusyError` and writes
nothing. Its options are :mod:`~kafka_direct.app.ingest_options`'; its table, created when
missing, is :mod:`~kafka_direct.app.ingest_table`'s.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from kafka_direct.app.ingest_options import IngestOptions, IngestResult, spark_context_arguments
from kafka_direct.app.ingest_table import ensure_table
from kafka_direct.app.stops import reported_once
from kafka_direct.dstream.stream_settings import MIN_OFFSETS_PER_TASK_CONF
from kafka_direct.streaming.batch_info import BatchInfo
from kafka_direct.streaming.batch_log import BatchLogListener
from kafka_direct.streaming.listener import StreamingListener, StreamingListenerBatchCompleted

if TYPE_CHECKING:
    from kafka_direct.app.interrupts import TwoStageInterrupt
    from kafka_direct.app.typed.options import TypedOptions

__all__ = ["INGEST_MIN_OFFSETS_PER_TASK", "run_ingest"]

logger = logging.getLogger(__name__)

#: The job's ``spark.streaming.kafka.minOffsetsPerTask``: a batch's ranges of fewer offsets
#: than this share Spark tasks (at least Spark's default parallelism of them), read in one
#: fetch session and written in one transaction each. A Spark task costs about 5.5 ms of CPU
#: before it reads a record, as much as reading and writing several thousand records; a
#: range of this size or more keeps a task of its own, so large batches (a backlog, a few
#: partitions) run as before and only batches spread thin over many partitions are grouped.
INGEST_MIN_OFFSETS_PER_TASK = 10_000

class _Progress(StreamingListener):
    """Counts batches, and asks the job to stop after enough idle ones.

    A batch without any partition (a pattern that matches no topic yet) is idle too: it
    read nothing, and a job told to stop when idle must not wait forever for a topic.
    """

    def __init__(self, result: IngestResult, idleLimit: int, notRun: set[int]) -> None:
        self.result = result
        self.idleLimit = idleLimit
        self.notRun = notRun
        self.idle = 0
        self.done = threading.Event()

    def onBatchCompleted(self, batchCompleted: StreamingListenerBatchCompleted) -> None:
        info = batchCompleted.batchInfo
        if info.failed:
            return
        if info.batchTime in self.notRun:
            self.result.batchesNotRun += 1
            return
        self.result.batches += 1
        self.result.records += info.numRecords
        self.idle = self.idle + 1 if info.numRecords == 0 else 0
        if self.idleLimit and self.idle >= self.idleLimit:
            self.done.set()


def run_ingest(options: IngestOptions, bootstrapServers: str, dsn: str,
               out: TextIO | None = None, kafkaParams: Mapping[str, Any] | None = None,
               row: Any = None, signals: TwoStageInterrupt | None = None,
               result: IngestResult | None = None, records: TypedOptions | None = None
               ) -> IngestResult:
    """Run the ingest job until it is stopped, idle long enough, or fails.

    Args:
        options: What to read and write.
        bootstrapServers: The Kafka cluster.
        dsn: libpq connection string of the database (never logged).
        out: Where per-batch progress lines go (None: the log only).
        kafkaParams: More librdkafka properties (security settings...).
        row: Record -> row values for the table's columns (default: topic, partition,
            offset, key, value).
        signals: Stop after the running batch once ``signals.requested`` is set: no batch
            is generated after it, and a batch queued behind the running one neither reads
            nor writes (the next run reads it). Its handlers are installed again once Spark
            has started (PySpark replaces the SIGINT handler). None: run until idle,
            stopped or failed.
        result: Count into this result (the caller sees how far a failed run got).
        records: How records become rows (typed columns, upserts, tombstones, dead
            letters: :mod:`kafka_direct.app.typed`); None or raw: the raw bytes.

    Returns:
        What the run did (``result`` when given).

    Raises:
        GroupBusyError: Another job holds the group.
        KafkaDirectError: What stopped the stream (SinkWriteError, KafkaUnavailableError...);
            run again to resume.
    """
    from kafka_direct.runtime.spark import spark_context
    from kafka_direct.runtime.spark_log import quiet_spark_log
    from kafka_direct.streaming.context import StreamingContext
    from offsets.from_store import createDirectStreamFromStore
    from offsets.postgres_offset_store import PostgresOffsetStore
    from sinks.idempotent_postgres_sink import IdempotentPostgresSink
    from sinks.transactional_postgres_sink import TransactionalPostgresSink, default_row

    policy, explicit = options.starting
    store = PostgresOffsetStore(dsn, schema=options.schema)
    store.ensure_schema()
    from kafka_direct.app.typed.routing import TableRoute

    perTopic = TableRoute(options.table).perTopic
    typed = perTopic or (records is not None and records.active)
    if typed:
        from kafka_direct.app.typed.options import TypedOptions
        from kafka_direct.app.typed.table import prepare_tables

        if perTopic and row is not None:
            from kafka_direct.errors import ConfigurationError

            raise ConfigurationError("a row function writes one table: give a --table "
                                     "without {topic}, or no row function")
        records = records or TypedOptions()  # raw key and value columns, a table per topic
        prepare_tables(dsn, options.schema, options.table, records, topics=options.topics)
    else:
        ensure_table(dsn, options.schema, options.table)
    result = IngestResult() if result is None else result
    written: dict[int, tuple[int, int]] = {}
    notRun: set[int] = set()
    totals = {"rows": 0}
    stopRequested = signals.requested if signals is not None else threading.Event()
    if stopRequested.is_set():  # stopped while the services started: not even Spark
        result.offsets = store.load(options.group)
        return result

    def suffix(info: BatchInfo) -> str:
        if info.batchTime in notRun:
            return "  not run: stopping (the next run reads it)"
        rows, skipped = written.pop(info.batchTime, (0, 0))
        totals["rows"] += rows
        return f"  written {rows}" + (f" ({skipped} ranges applied before)" if skipped
                                      else "") + f"  total {totals['rows']}"

    with store.lockGroup(options.group), spark_context(
            **spark_context_arguments(options, signals is not None)) as sc, \
            contextlib.ExitStack() as scope:
        if signals is not None:
            signals.install()
        if not logger.isEnabledFor(logging.INFO):
            # A failed batch: one block at the end, not Spark's pages per task attempt.
            scope.enter_context(quiet_spark_log(sc))
            scope.enter_context(reported_once())
        conf = {"spark.streaming.kafka.maxRatePerPartition": str(options.maxRatePerPartition),
                "spark.streaming.backpressure.enabled": str(options.backpressure).lower(),
                # A batch reads its ranges when the one before it completed, not at its
                # tick: a job that fell behind (its first batch starts Spark's workers) then
                # catches up in its next batch, instead of queueing a batch of one interval
                # after another, each as late as the first.
                "spark.streaming.waitForPreviousBatch": "true",
                # Small ranges share a Spark task (a grouped KafkaRDD): the job owns its
                # sink, which writes a task's ranges in one transaction. See
                # INGEST_MIN_OFFSETS_PER_TASK; a value set in Spark's conf wins.
                MIN_OFFSETS_PER_TASK_CONF: sc.getConf().get(
                    MIN_OFFSETS_PER_TASK_CONF, str(INGEST_MIN_OFFSETS_PER_TASK))}
        if options.uiPort is not None:
            conf.update({"spark.streaming.ui.enabled": "true",
                         "spark.streaming.ui.port": str(options.uiPort)})
        ssc = StreamingContext(sc, options.batchInterval, conf=conf)
        params = {**(kafkaParams or {}), "bootstrap.servers": bootstrapServers,
                  "auto.offset.reset": policy}
        stream = createDirectStreamFromStore(
            ssc, store, options.group, params, topics=options.topics or None,
            pattern=options.pattern, startingOffsets=explicit)
        table = (options.schema, options.table)
        sink: Any
        if typed:
            from kafka_direct.app.typed.dstream import TypedDStreamWriter

            assert records is not None
            sink = TypedDStreamWriter(dsn, table[0], table[1], options.group, records,
                                      options.statementTimeoutMs)
        elif options.sink == "transactional":
            sink = TransactionalPostgresSink(dsn, table[1], options.group,
                                             row=row or default_row, schema=table[0],
                                             statementTimeoutMs=options.statementTimeoutMs)
        else:
            sink = IdempotentPostgresSink(dsn, table[1], row=row or default_row,
                                          schema=table[0], offsetStore=store,
                                          group=options.group,
                                          statementTimeoutMs=options.statementTimeoutMs)

        def write(time: Any, rdd: Any) -> None:
            if stopRequested.is_set():
                # Queued behind the batch that ran when the stop was asked for: it must not
                # start. Nothing is read, written or stored; the next run resumes before it.
                notRun.add(int(time.timestamp() * 1000))
                return
            counts = sink.write(rdd)
            # The batch is in PostgreSQL: its end offsets go to the consumer group, for lag
            # tools only (the job resumes from the offset store; a failed commit warns).
            stream.commitAsync(rdd.offsetRanges())
            rows = counts.get("upserted", counts["rows"])
            result.rowsWritten += rows
            result.rangesSkipped += counts.get("skipped", 0)
            written[int(time.timestamp() * 1000)] = (rows, counts.get("skipped", 0))

        stream.foreachRDD(write)
        progress = _Progress(result, options.stopAfterIdleBatches, notRun)
        ssc.addStreamingListener(progress)
        ssc.addStreamingListener(BatchLogListener(options.batchInterval, out, suffix))
        # Before the first tick: the first batch with records would otherwise start the
        # Python workers, their imports and connections while its records wait.
        from kafka_direct.app.warm_up import warm_workers

        warm_workers(sc, dsn)
        if stopRequested.is_set():  # a signal while setting up: no batch at all
            result.offsets = store.load(options.group)
            return result
        ssc.start()
        if ssc.uiWebUrl and out is not None:
            out.write(f"streaming statistics: {ssc.uiWebUrl} (metrics: {ssc.uiWebUrl}metrics)\n")
        try:
            while not ssc.awaitTerminationOrTimeout(0.2):
                if progress.done.is_set() or stopRequested.is_set():
                    # The running batch (and any already generated) finishes and commits.
                    ssc.stop(stopSparkContext=False, stopGracefully=True)
                    break
            ssc.awaitTermination(0)  # a batch that failed while stopping still fails the run
        finally:
            if ssc.state != "STOPPED":  # a second signal: stop the batches now
                ssc.stop(stopSparkContext=False)
        result.offsets = store.load(options.group)
    return result


