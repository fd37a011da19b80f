"""The main job: a direct stream from Kafka into a PostgreSQL table, exactly once.

:func:`run_ingest` reads topics (or a pattern) with a direct stream that resumes from a
:class:`~offsets.PostgresOffsetStore` and writes each batch with the transactional sink
(rows and offsets in one transaction per partition) or the idempotent sink (upsert on the
record's topic, partition and offset; offsets stored after the write). Whatever stops it — a
kill -9, a failed database, a lost broker — running it again resumes after the last
committed range: nothing is lost, nothing is written twice.

The job holds its consumer group for as long as it runs (an advisory lock in the database),
so a second job of the same group fails at once with :class:`GroupBusyError` and writes
nothing. Its table is created when missing: ``topic text, kafka_partition int,
kafka_offset bigint, key bytea, value bytea`` with the primary key (topic, kafka_partition,
kafka_offset).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from kafka_direct.errors import ConfigurationError, OffsetStoreError
from kafka_direct.streaming.batch_info import BatchInfo
from kafka_direct.streaming.batch_log import BatchLogListener
from kafka_direct.streaming.durations import to_ms
from kafka_direct.streaming.listener import StreamingListener, StreamingListenerBatchCompleted
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.app.stop_signals import StopSignals
    from kafka_direct.app.typed.options import TypedOptions

__all__ = ["TASK_ATTEMPTS", "IngestOptions", "IngestResult", "TableCheck", "check_master",
           "check_table", "ensure_table", "parse_starting_offsets", "run_ingest"]

#: Attempts per task: a plain local master gets ``local[N, TASK_ATTEMPTS]`` (local mode
#: ignores spark.task.maxFailures), a cluster master spark.task.maxFailures unless set.
TASK_ATTEMPTS = 4

logger = logging.getLogger(__name__)

SINKS = ("transactional", "idempotent")
#: How the job reads and writes: the direct stream, or a Structured Streaming query.
APIS = ("dstream", "structured")


#: The largest Kafka offset (a signed 64-bit integer).
MAX_OFFSET = 2**63 - 1

#: Spark's master URLs: local, local[N], local[*], local[N,F], local-cluster[N,C,M],
#: spark://host:port[,host:port], yarn, k8s://..., mesos://...
_MASTER = re.compile(
    r"local(?:\[(?:\*|[1-9]\d*)(?:,[1-9]\d*)?\])?"
    r"|local-cluster\[[1-9]\d*,[1-9]\d*,[1-9]\d*\]"
    r"|spark://[^\s/,:]+:\d+(?:,[^\s/,:]+:\d+)*"
    r"|yarn|k8s://\S+|mesos://\S+")


def check_master(master: str, name: str = "the Spark master") -> None:
    """Raise ConfigurationError unless ``master`` is a Spark master URL of a known form."""
    if not _MASTER.fullmatch(master):
        raise ConfigurationError(
            f"{name} must be local, local[N], local[*], local[N,F], "
            f"local-cluster[N,C,M], spark://HOST:PORT, yarn, k8s://... or mesos://... "
            f"(N, F >= 1), got {master!r}")


def _offset_document(text: str) -> dict[TopicPartition, int]:
    def strict(value: Any) -> int:
        # JSON numbers only: 1.9, true, "7" and 1e30 are mistakes, not offsets.
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"offset {value!r} is not a whole number")
        return value

    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object of topics")
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"topic {topic!r} maps to {partitions!r}, not to partitions")
        for partition, offset in partitions.items():
            if not re.fullmatch(r"\d{1,9}", partition):
                raise ValueError(f"partition {partition!r} of {topic!r} is not a number "
                                 ">= 0")
            offsets[TopicPartition(topic, int(partition))] = strict(offset)
    return offsets


def parse_starting_offsets(text: str) -> tuple[str, dict[TopicPartition, int]]:
    """``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}`` -> (policy, offsets).

    JSON offsets are next offsets to read for the partitions they name (whole numbers from
    0 to 2**63-1); other partitions start at their earliest offset.

    Raises:
        ConfigurationError: Anything else.
    """
    if text in ("earliest", "latest"):
        return text, {}
    try:
        offsets = _offset_document(text)
    except ValueError as error:
        raise ConfigurationError(
            f"starting offsets must be earliest, latest or JSON like "
            f"'{{\"events\": {{\"0\": 42}}}}', got {text!r} ({error})") from error
    negative = [str(tp) for tp, o in offsets.items() if o < 0]
    if negative:
        raise ConfigurationError(f"starting offsets must be >= 0; {negative} are not "
                                 "(use earliest or latest for the ends of the log)")
    huge = [str(tp) for tp, o in offsets.items() if o > MAX_OFFSET]
    if huge:
        raise ConfigurationError(f"starting offsets must be at most {MAX_OFFSET} (Kafka's "
                                 f"largest offset); {huge} are not")
    return "earliest", offsets


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """What the ingest job reads and writes.

    Attributes:
        topics: Topics to subscribe to (or ``pattern``).
        pattern: A regular expression of topic names (instead of ``topics``).
        group: Consumer group the offsets are stored under.
        table: Target table (created when missing).
        schema: Schema of the table and of the offsets table ``kafka_offsets``.
        batchInterval: Seconds per batch.
        maxRatePerPartition: Records per second per partition (0: no limit).
        backpressure: PID backpressure on.
        sink: ``transactional`` or ``idempotent``.
        startingOffsets: Where partitions without stored offsets start: ``earliest``,
            ``latest`` or JSON ``{"topic": {"partition": offset}}``.
        stopAfterIdleBatches: Stop after this many batches in a row read nothing (0: run
            until stopped).
        master: Spark master. A local one (``local...``) runs with the quick-start settings
            of :mod:`kafka_direct.testing.spark`; any other gets Spark's own defaults and
            spark-submit's settings, with ``spark.task.maxFailures`` = :data:`TASK_ATTEMPTS`
            unless set there.
        loopbackDriver: Bind the Spark driver to 127.0.0.1 (right when embedded services
            listen there only); None: when the master is local.
        statementTimeoutMs: ``statement_timeout`` of the writing transactions.
        uiPort: Serve the streaming statistics page and metrics on 127.0.0.1 at this
            port (0: a free one); None: no page.
        api: ``dstream`` (the direct stream) or ``structured`` (a Structured Streaming
            query through the kafka-direct source and sink).
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    group: str = "kafka-direct-ingest"
    table: str = "kafka_events"
    schema: str = "public"
    batchInterval: float = 2.0
    maxRatePerPartition: int = 0
    backpressure: bool = False
    sink: str = "transactional"
    startingOffsets: str = "earliest"
    stopAfterIdleBatches: int = 0
    master: str = "local[2]"
    statementTimeoutMs: int | None = 60_000
    uiPort: int | None = None
    loopbackDriver: bool | None = None
    api: str = "dstream"

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ConfigurationError(f"api must be one of {APIS}, got {self.api!r}")
        if bool(self.topics) == bool(self.pattern):
            raise ConfigurationError("give topics or a pattern (one of them)")
        if self.sink not in SINKS:
            raise ConfigurationError(f"sink must be one of {SINKS}, got {self.sink!r}")
        if not (math.isfinite(self.batchInterval) and self.batchInterval > 0):
            raise ConfigurationError(f"the batch interval must be > 0 s, got "
                                     f"{self.batchInterval}")
        to_ms(self.batchInterval, "the batch interval")  # whole milliseconds, >= 1 ms
        check_master(self.master)
        for name in ("maxRatePerPartition", "stopAfterIdleBatches"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.uiPort is not None and not 0 <= self.uiPort <= 65535:
            raise ConfigurationError(f"the statistics page's port must be 0 (any free port) "
                                     f"to 65535, got {self.uiPort}")
        if not self.group or not self.table or not self.schema:
            raise ConfigurationError("group, table and schema must be non-empty names")
        _, explicit = parse_starting_offsets(self.startingOffsets)
        pattern = re.compile(self.pattern) if self.pattern else None
        unread = sorted({tp.topic for tp in explicit
                         if (tp.topic not in self.topics if pattern is None
                             else not pattern.fullmatch(tp.topic))})
        if unread:
            raise ConfigurationError(
                f"starting offsets name topics the job does not read: {unread} (it reads "
                + (f"the pattern {self.pattern!r})" if pattern is not None
                   else f"{list(self.topics)})"))


@dataclass(slots=True)
class IngestResult:
    """What a run did.

    Attributes:
        batches: Batches completed.
        records: Records read.
        rowsWritten: Rows written (transactional) or upserted as new (idempotent).
        rangesSkipped: Ranges found applied already (a re-run after a crash).
        offsets: The stored next offsets of the group when the run ended.
        batchesNotRun: Batches queued behind the running one when a stop was asked for:
            neither read nor written (nor their offsets stored); the next run reads them.
    """

    batches: int = 0
    records: int = 0
    rowsWritten: int = 0
    rangesSkipped: int = 0
    batchesNotRun: int = 0
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


def ensure_table(dsn: str, schema: str, table: str) -> None:
    """Create ``schema.table`` with the default columns when it does not exist.

    Only what is missing is created (PostgreSQL checks the CREATE privilege even for
    ``IF NOT EXISTS``), so a role with USAGE on the schema and SELECT, INSERT, UPDATE on an
    existing table needs nothing more.

    Raises:
        OffsetStoreError: The schema or table is missing and the role may not create it
            (the message names the grant), or the database failed.
    """
    import psycopg2
    from psycopg2 import sql

    from offsets.database import connect, fix_for, schema_exists, table_exists

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            if not schema_exists(cursor, schema):
                cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(schema)))
            if not table_exists(cursor, schema, table):
                cursor.execute(sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (topic text NOT NULL, kafka_partition "
                    "integer NOT NULL, kafka_offset bigint NOT NULL, key bytea, value bytea, "
                    "PRIMARY KEY (topic, kafka_partition, kafka_offset))").format(
                    sql.Identifier(schema, table)))
    except psycopg2.Error as error:
        cause = " ".join(str(error).split())
        raise OffsetStoreError(
            f"creating the table {schema}.{table} failed: {cause}. "
            f"{fix_for(error, schema, table)}", store="PostgreSQL", cause=cause) from error
    finally:
        connection.close()


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
               row: Any = None, signals: StopSignals | None = None,
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
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.testing.spark import spark_context
    from offsets.from_store import createDirectStreamFromStore
    from offsets.postgres_offset_store import PostgresOffsetStore
    from sinks.idempotent_postgres_sink import IdempotentPostgresSink
    from sinks.transactional_postgres_sink import TransactionalPostgresSink, default_row

    policy, explicit = parse_starting_offsets(options.startingOffsets)
    store = PostgresOffsetStore(dsn, schema=options.schema)
    store.ensure_schema()
    typed = records is not None and records.active
    if typed:
        from kafka_direct.app.typed.table import prepare_tables

        assert records is not None
        prepare_tables(dsn, options.schema, options.table, records)
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

    local = options.master.startswith("local")
    loopback = local if options.loopbackDriver is None else options.loopbackDriver
    defaults = {} if local else {"spark.task.maxFailures": str(TASK_ATTEMPTS)}
    # A reused Python worker reading its next task when the context stops fails to flush
    # and prints a traceback on the way out; a worker per task ends cleanly (few tasks a
    # batch here, so the fork costs nothing worth keeping).
    defaults["spark.python.worker.reuse"] = "false"
    with store.lockGroup(options.group), spark_context(
            options.master, "kafka-direct-ingest", test_conf=local, loopback=loopback,
            defaults=defaults, own_session=signals is not None) as sc:
        if signals is not None:
            signals.install()
        conf = {"spark.streaming.kafka.maxRatePerPartition": str(options.maxRatePerPartition),
                "spark.streaming.backpressure.enabled": str(options.backpressure).lower()}
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


@dataclass(frozen=True, slots=True)
class TableCheck:
    """What a table holds against the log it was ingested from.

    Attributes:
        rows: Rows in the table.
        distinctRecords: Distinct (topic, partition, offset) among them.
        stored: The group's stored next offsets.
        logEnd: The partitions' end offsets.
    """

    rows: int
    distinctRecords: int
    stored: dict[TopicPartition, int]
    logEnd: dict[TopicPartition, int]

    @property
    def duplicates(self) -> int:
        """Rows beyond the first of each record."""
        return self.rows - self.distinctRecords

    @property
    def caughtUp(self) -> bool:
        """Whether the stored offsets are the log end of every partition."""
        return self.stored == self.logEnd


def check_table(dsn: str, schema: str, table: str, group: str,
                logEnd: Mapping[TopicPartition, int],
                stored: Mapping[TopicPartition, int] | None = None) -> TableCheck:
    """Count the table's rows and distinct records, and read the group's stored offsets.

    ``stored`` gives the offsets instead (a structured query keeps them in its own store).
    """
    from psycopg2 import sql

    from offsets.database import connect
    from offsets.postgres_offset_store import PostgresOffsetStore

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql.SQL(
                "SELECT count(*), count(DISTINCT (topic, kafka_partition, kafka_offset)) "
                "FROM {}").format(sql.Identifier(schema, table)))
            rows, distinct = cursor.fetchone()
    finally:
        connection.close()
    if stored is None:
        stored = PostgresOffsetStore(dsn, schema=schema).load(group,
                                                               {tp.topic for tp in logEnd})
    return TableCheck(int(rows), int(distinct), dict(stored), dict(logEnd))
