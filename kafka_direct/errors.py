"""The exception hierarchy of kafka-direct.

Every error the library raises on purpose derives from :class:`KafkaDirectError`::

    KafkaDirectError
    ├── ConfigurationError          bad arguments or Kafka parameters (also a ValueError)
    ├── UnknownTopicOrPartitionError  a topic or partition the cluster does not have
    ├── KafkaUnavailableError       the brokers did not answer the driver, retries exhausted
    ├── PartitionsRevokedError      a rebalance took partitions away from a stream
    ├── KafkaReadError              an executor could not read an offset range
    │   ├── DataLossError           records of the range were deleted (retention, delete_records)
    │   ├── OffsetOutOfRangeError   the range ends beyond the log end
    │   └── PollTimeoutError        no progress on the range within the poll timeout
    ├── RecordError                 a record that cannot become a row (a timestamp overflowing)
    │   └── BadRecordError          a record the ingest job cannot decode or fit into its table
    ├── SchemaChangeError           a field's new type does not fit its table column
    ├── SchemaRegistryError         the Schema Registry refused or did not answer
    ├── OffsetMismatchError         a stored offset is neither the range's start nor its end
    ├── SinkWriteError              writing a range's results failed; none of them was committed
    ├── OffsetStoreError            an offset store could not be read or written; nothing changed
    ├── GroupBusyError              another running job holds the consumer group
    ├── StreamingStateError         a StreamingContext used in a state that forbids it
    ├── StreamingQueryFailedError   a Structured Streaming query failed with an error not ours
    ├── CheckpointError             a checkpoint directory that cannot be read or restored
    └── ServiceError                an embedded test service failed to start or stop

Errors carry their context as attributes (``topic``, ``partition``, offsets ...) and pickle
with them. An error raised in an executor task reaches the driver as the same type, carried as
data (class name, message, scalar context), never as a pickle (see
:mod:`kafka_direct.task_errors`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRecordError",
    "CheckpointError",
    "ConfigurationError",
    "DataLossError",
    "GroupBusyError",
    "KafkaDirectError",
    "KafkaReadError",
    "KafkaUnavailableError",
    "OffsetMismatchError",
    "OffsetOutOfRangeError",
    "OffsetStoreError",
    "PartitionsRevokedError",
    "PollTimeoutError",
    "RecordError",
    "SchemaChangeError",
    "SchemaRegistryError",
    "ServiceError",
    "SinkWriteError",
    "StreamingQueryFailedError",
    "StreamingStateError",
    "UnknownTopicOrPartitionError",
]


def _rebuild(cls: type[KafkaDirectError], message: str, context: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    KafkaDirectError.__init__(error, message, **context)
    return error


class KafkaDirectError(Exception):
    """Root of every error kafka-direct raises.

    Args:
        message: What went wrong and how to fix it.
        **context: Attributes that describe where it went wrong (topic, partition, offsets).
            Each becomes an attribute of the error and survives pickling.
    """

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = dict(context)
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


class ConfigurationError(KafkaDirectError, ValueError):
    """An argument or a Kafka parameter is invalid; the message names it and the fix."""


class UnknownTopicOrPartitionError(KafkaDirectError):
    """The cluster has no such topic or partition.

    Raised on the driver when a stream or ``createRDD`` names one, and by an executor whose
    range's topic was deleted after the range was planned (or whose partition is beyond
    the topic's count): then it also names the range.

    Attributes:
        topic: The topic asked for.
        partition: The partition asked for, or None when the whole topic is unknown.
        fromOffset: The start of the range that could not be read (None on the driver).
        untilOffset: The end of that range, exclusive (None on the driver).
    """

    topic: str
    partition: int | None
    fromOffset: int | None = None
    untilOffset: int | None = None

    def __init__(self, message: str, *, topic: str, partition: int | None = None,
                 **context: Any) -> None:
        super().__init__(message, topic=topic, partition=partition, **context)


class KafkaUnavailableError(KafkaDirectError):
    """The driver could not get an answer from Kafka, after its retries.

    Attributes:
        attempts: How many times it tried.
    """

    attempts: int


class PartitionsRevokedError(KafkaDirectError):
    """A consumer group rebalance gave partitions of a stream to another member.

    Usually a second stream (or consumer) using the same ``group.id``: each stream needs a
    group of its own.

    Attributes:
        group: The consumer group.
        partitions: The partitions taken away, as ``topic-partition`` strings.
    """

    group: str
    partitions: list[str]


class KafkaReadError(KafkaDirectError):
    """An executor could not read the records of an offset range.

    Attributes:
        topic: Topic of the range.
        partition: Partition of the range.
        fromOffset: First offset of the range (inclusive).
        untilOffset: End of the range (exclusive).
    """

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        fromOffset: int,
        untilOffset: int,
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            topic=topic,
            partition=partition,
            fromOffset=fromOffset,
            untilOffset=untilOffset,
            **context,
        )


class DataLossError(KafkaReadError):
    """Records of a range no longer exist (retention or ``delete_records`` removed them).

    Attributes:
        logStartOffset: The earliest offset the broker still has.
    """

    logStartOffset: int


class OffsetOutOfRangeError(KafkaReadError):
    """The range ends beyond the partition's log end.

    Attributes:
        logEndOffset: The partition's end offset (high watermark) when it was checked.
    """

    logEndOffset: int


class PollTimeoutError(KafkaReadError):
    """No record and no progress of the consumer position within the poll timeout.

    Attributes:
        position: The next offset the consumer would have read.
        timeoutMs: The poll timeout in milliseconds.
    """

    position: int
    timeoutMs: int


class RecordError(KafkaDirectError):
    """A record the source cannot turn into a row as it is.

    Such as a timestamp beyond what Spark's timestamp (microseconds in a 64-bit integer)
    holds: usually a producer that set nanoseconds (``time.time_ns()``) where Kafka wants
    milliseconds. Delivering it wrapped around would be silent corruption, so the read fails
    and names the record.

    Attributes:
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset.
        cause: Why it cannot be a row.
    """

    topic: str
    partition: int
    offset: int
    cause: str

    def __init__(self, message: str, *, topic: str, partition: int, offset: int, cause: str,
                 **context: Any) -> None:
        super().__init__(message, topic=topic, partition=partition, offset=offset,
                         cause=cause, **context)


class BadRecordError(RecordError):
    """A record the ingest job cannot turn into a row of its table.

    It cannot be decoded (not JSON, an unknown schema id, bytes that are not Avro), or a
    value does not fit its column (text in an integer column, a key column missing). With
    ``--on-bad-record fail`` (the default) the batch stops with this error and nothing of it
    is written; ``--on-bad-record dead-letter`` writes the raw record and the reason into
    the dead-letter table instead, in the batch's transaction.

    Attributes:
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset.
        cause: Why it cannot be a row (never the record's bytes).
    """


class SchemaChangeError(KafkaDirectError):
    """The records' schema changed a field in a way its table column cannot hold.

    A new field adds a nullable column and a widened one widens its column (a ``long``
    into an ``integer`` column: ``bigint``); a field whose type no column change can hold
    (a string into a ``bigint`` column, a narrower type, a widening PostgreSQL refuses)
    stops the job, whatever ``--on-bad-record`` says, since every record of the new schema
    would fail.
    Change the column (``ALTER TABLE ... ALTER COLUMN ... TYPE ...``) or the schema, then
    run the job again: it resumes at the batch that stopped.

    Attributes:
        table: The target table (schema-qualified).
        field: The field, which is the column's name.
        columnType: The column's PostgreSQL type.
        newType: The PostgreSQL type the field's new values need.
        topic: The topic of a record with the new type (None when not known).
        partition: That record's partition (None when not known).
        offset: That record's offset (None when not known).
    """

    table: str
    field: str
    columnType: str
    newType: str
    topic: str | None
    partition: int | None
    offset: int | None


class SchemaRegistryError(KafkaDirectError):
    """The Schema Registry did not answer, or refused a request (not a missing schema).

    A schema id the registry does not know makes its record a bad record; this is the
    registry itself failing (unreachable, a refused login, a server error), so the batch
    stops and nothing of it is written: run the job again once the registry answers.

    Attributes:
        status: The HTTP status of the answer (None when there was none).
        cause: What the client said (no URL credentials, no password).
    """

    status: int | None
    cause: str


class OffsetMismatchError(KafkaDirectError):
    """A stored offset is neither the start nor the end of the range being committed.

    That is a gap or an overlap: committing would lose or duplicate records, so nothing is
    written.

    Attributes:
        group: The consumer group.
        topic: The range's topic.
        partition: The range's partition.
        stored: The stored next offset (None when the store has none).
        fromOffset: The range's start, which the stored offset should equal.
        untilOffset: The range's end.
    """

    group: str
    topic: str
    partition: int
    stored: int | None
    fromOffset: int
    untilOffset: int

    def __init__(self, message: str, *, group: str, topic: str, partition: int,
                 stored: int | None, fromOffset: int, untilOffset: int) -> None:
        super().__init__(message, group=group, topic=topic, partition=partition,
                         stored=stored, fromOffset=fromOffset, untilOffset=untilOffset)


class SinkWriteError(KafkaDirectError):
    """Writing results into the database failed.

    With ``outcome == "rolled back"`` nothing of the failed write is committed (rows nor
    offsets), so re-running it (a task retry, a restarted job resuming from the store)
    neither loses nor duplicates records. With ``outcome == "unknown"`` the connection broke
    during COMMIT: the write may or may not be in the database. The offsets committed with
    it (transactional sinks) or the unique key (idempotent sinks) still decide, on the
    next run, whether its records are written again, so resume from the store; never
    assume either way.

    Attributes:
        table: The target table (schema-qualified).
        topic: The range's topic (None for a per-batch write).
        partition: The range's partition (None for a per-batch write).
        fromOffset: The range's start (None for a per-batch write).
        untilOffset: The range's end (None for a per-batch write).
        cause: The database driver's message (no connection string).
        outcome: ``"rolled back"`` or ``"unknown"`` (a COMMIT whose answer was lost).
    """

    table: str
    topic: str | None
    partition: int | None
    fromOffset: int | None
    untilOffset: int | None
    cause: str
    outcome: str | None = None


class OffsetStoreError(KafkaDirectError):
    """An offset store could not be read or written (its database failed).

    Nothing changed, unless ``outcome == "unknown"``: the connection broke during COMMIT,
    and the stored offsets may or may not have moved; load them again before going on.

    Attributes:
        store: The store (its description, never a connection string).
        cause: The database driver's message.
        outcome: ``"rolled back"`` or ``"unknown"`` where a commit was under way, else None.
    """

    store: str
    cause: str
    outcome: str | None = None


class GroupBusyError(KafkaDirectError):
    """Another job holds the consumer group: two writers of one group would race.

    Attributes:
        group: The consumer group.
    """

    group: str


class StreamingStateError(KafkaDirectError, RuntimeError):
    """A StreamingContext was asked for something its state forbids (start after stop...)."""


class StreamingQueryFailedError(KafkaDirectError):
    """A Structured Streaming query failed with an error that is not one of ours.

    Attributes:
        query: The query's name.
    """

    query: str


class CheckpointError(KafkaDirectError):
    """A checkpoint directory cannot be read, or its checkpoint does not fit the application.

    Attributes:
        directory: The checkpoint directory.
    """

    directory: str


class ServiceError(KafkaDirectError):
    """An embedded service (broker, database) failed to start, answer or stop.

    Attributes:
        service: The service's name.
        log_tail: The last lines of the service's log, to see why.
    """

    service: str
    log_tail: str
