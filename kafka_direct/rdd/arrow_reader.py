"""An offset range read as Arrow record batches, for the source's tasks and ``KafkaRDD.toDF``.

Both run it, which is why it lives beside KafkaRDD and not in ``sql/source/``.

The reading itself is KafkaRDD's: a consumer from the Python worker's cache
(:mod:`kafka_direct.client.data_consumer`) reads exactly ``[fromOffset, untilOffset)`` with
:meth:`~kafka_direct.client.data_consumer.KafkaDataConsumer.read_batches`, so offsets without
a record (transaction markers, aborted transactions under ``read_committed``, compaction)
are gaps, deleted offsets are a :class:`~kafka_direct.errors.DataLossError` (or, with
``failOnDataLoss=false``, a warning and a jump to the log start), so is a range that now ends
beyond its log's end (or a warning, and the range ends with what exists), and a retried task
starts from a fresh consumer. The consumer's life follows
:func:`kafka_direct.rdd.record_reader.read_range`: a read that fails or is abandoned closes the
cached consumer. Our errors travel to the driver as data
(:func:`kafka_direct.task_errors.carry_errors`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kafka_direct.client.cached_consumers import ConsumerCache, consumer_cache
from kafka_direct.client.columnar import (
    IMPL_ENV,
    ColumnarDataConsumer,
    columnar_cache,
    use_native,
)
from kafka_direct.client.data_consumer import KafkaDataConsumer
from kafka_direct.client.fetch_session import (
    SESSION_MAX_OFFSETS_PER_RANGE,
    FetchSession,
    in_session,
)
from kafka_direct.errors import ConfigurationError, DataLossError, OffsetOutOfRangeError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.arrow_rows import ChunkBatchBuilder, RangesBatchBuilder, RecordBatchBuilder
from kafka_direct.rdd.kafka_schema import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, select_columns
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.task_errors import carry_errors

__all__ = ["ROWS_PER_BATCH", "SESSION_MAX_OFFSETS_PER_RANGE", "PartitionReadSettings",
           "in_session", "read_partition", "read_ranges", "read_task", "task_attempt"]

#: Fewest records per Arrow batch handed to Spark (but for a range's last one): the
#: consumer's own batches can be small, and each record batch has a fixed cost. Not much
#: more than a full consumer batch, though: a batch is built while its messages are still in
#: the CPU's caches, and holding twice as many costs more per record than it saves.
ROWS_PER_BATCH = 4096

@dataclass(frozen=True, slots=True)
class PartitionReadSettings:
    """How a range is read as Arrow batches: shipped to executors with the task.

    Attributes:
        read: KafkaRDD's read settings (executor parameters, poll timeout, failOnDataLoss).
        includeHeaders: Whether batches carry the ``headers`` column.
        columns: Only these columns, in this order (column pruning: the others are never
            built, and the native reader does not copy a key or value not asked for); None:
            all of them. Checked by :func:`~kafka_direct.rdd.kafka_schema.select_columns`.
        impl: The reader, ``"c"`` (native columnar) or ``"python"``; None: the executor's
            ``KAFKA_DIRECT_IMPL``, else the native one when it loads (see
            :func:`kafka_direct.client.columnar.choose_impl`).
        planned: The ranges were planned by the source from the log ends it saw: one that
            now ends beyond its log is lost data (a :class:`DataLossError` naming the
            source's option). False (``KafkaRDD.toDF``): the caller chose the range, and it
            is KafkaRDD's :class:`OffsetOutOfRangeError`, as its other actions raise.
    """

    read: ReadSettings
    includeHeaders: bool = False
    columns: tuple[str, ...] | None = None
    impl: str | None = None
    planned: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.read, ReadSettings):
            raise ConfigurationError(f"PartitionReadSettings needs ReadSettings, got "
                                     f"{type(self.read).__name__}")
        if self.columns is not None:
            object.__setattr__(self, "columns",
                               select_columns(self.columns, self.includeHeaders))


def driver_impl() -> str | None:
    """The driver's ``KAFKA_DIRECT_IMPL``, shipped with the reads (None when unset)."""
    return os.environ.get(IMPL_ENV) or None


def _native(settings: PartitionReadSettings) -> bool:
    """Whether this read uses the native columnar reader."""
    return use_native(settings.read.params, settings.impl)


def read_partition(offsetRange: OffsetRange, settings: PartitionReadSettings, *,
                   attempt: int = 0, cache: ConsumerCache | None = None) -> Iterator[Any]:
    """The records of ``offsetRange`` as ``pyarrow.RecordBatch``es, in offset order.

    Args:
        offsetRange: The range to read.
        settings: How to read.
        attempt: The task attempt; a retry never reuses a cached consumer.
        cache: The consumer cache; by default the worker-wide one of the chosen reader. A
            cache of :class:`~kafka_direct.client.columnar.ColumnarDataConsumer`s reads
            with the native reader, any other with the Python one.

    Raises:
        DataLossError: Offsets of the range were deleted, or the range ends beyond the log
            end, and ``failOnDataLoss`` is true. The driver planned the range below the end
            of the log it saw, so a log that ends before it now shrank since (truncated, or
            its topic re-created): the records are lost, as Spark's source says.
        PollTimeoutError: No progress within the poll timeout.
    """
    if offsetRange.count() == 0:
        return
    read = settings.read
    topic, partition = offsetRange.topic, offsetRange.partition
    if cache is None:
        native = _native(settings)
        cache = columnar_cache if native else consumer_cache
    else:
        native = issubclass(cache.consumer_class, ColumnarDataConsumer)
    try:
        with cache.lease(topic, partition, read.params, attempt=attempt,
                         cached=read.useConsumerCache) as consumer:
            if isinstance(consumer, ColumnarDataConsumer):
                yield from _columnar_batches(consumer, offsetRange, settings)
            else:
                yield from _message_batches(consumer, offsetRange, settings)
    except OffsetOutOfRangeError as error:
        if not settings.planned:
            raise
        raise DataLossError(
            f"offsets of {topic}-{partition} the batch planned no longer exist: {error}. The "
            "log shrank since the batch was planned (truncated, or its topic re-created) and "
            "records were lost. Set the option failOnDataLoss=false (the source's, and the "
            "sink's when it reads the source's offset ranges) to read what exists with a "
            "warning", topic=topic, partition=partition,
            fromOffset=offsetRange.fromOffset, untilOffset=offsetRange.untilOffset,
            logStartOffset=error.context.get("logStartOffset", -1),
            logEndOffset=error.context.get("logEndOffset", -1)) from error


def _message_batches(consumer: KafkaDataConsumer, offsetRange: OffsetRange,
                     settings: PartitionReadSettings) -> Iterator[Any]:
    """The Python reader: confluent-kafka messages, Arrow built from them."""
    read = settings.read
    builder = RecordBatchBuilder(offsetRange.topic, offsetRange.partition,
                                 settings.includeHeaders, settings.columns)
    pending: list[Any] = []
    for messages in consumer.read_batches(offsetRange.fromOffset, offsetRange.untilOffset,
                                          read.pollTimeoutMs, read.failOnDataLoss):
        pending.extend(messages)
        if len(pending) >= ROWS_PER_BATCH:
            yield builder.build(pending)
            pending = []
    if pending:
        yield builder.build(pending)


def _columnar_batches(consumer: ColumnarDataConsumer, offsetRange: OffsetRange,
                      settings: PartitionReadSettings) -> Iterator[Any]:
    """The native reader: record batches over the chunks' buffers, small ones joined."""
    read = settings.read
    builder = ChunkBatchBuilder(offsetRange.topic, offsetRange.partition,
                                settings.includeHeaders, settings.columns)
    pending: list[Any] = []
    rows = 0
    for chunk in consumer.read_chunks(offsetRange.fromOffset, offsetRange.untilOffset,
                                      read.pollTimeoutMs, read.failOnDataLoss,
                                      settings.includeHeaders,
                                      (MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS),
                                      columns=builder.native_columns):
        batch = builder.build(chunk)
        if not pending and batch.num_rows >= ROWS_PER_BATCH:
            yield batch  # the common case: a full chunk, handed on as it is
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= ROWS_PER_BATCH:
            yield _joined(pending)
            pending, rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def task_attempt() -> int:
    """The running Spark task's attempt number (0 outside a task)."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.attemptNumber() if context is not None else 0
    except Exception:  # outside a task (tests, a driver-side read)
        return 0


def read_task(offsetRanges: OffsetRange | Sequence[OffsetRange],
              settings: PartitionReadSettings) -> Iterator[Any]:
    """:func:`read_partition` as a task runs it: its attempt number, errors carried as data.

    Several small ranges of distinct partitions (:func:`in_session`) are read together by one
    consumer in one fetch session (:class:`~kafka_direct.client.fetch_session.FetchSession`),
    their batches handed on in the order of the ranges. Other tasks' ranges are read one
    after the other, in order, each with a consumer of the worker's cache: the cache hands
    a consumer it no longer needs over to the next partition rather than close it and make
    another (:meth:`~kafka_direct.client.cached_consumers.ConsumerCache.acquire`).
    """
    if isinstance(offsetRanges, OffsetRange):
        offsetRanges = (offsetRanges,)
    return carry_errors(_read_ranges(tuple(offsetRanges), settings, task_attempt()))


def read_ranges(offsetRanges: Sequence[OffsetRange], settings: PartitionReadSettings, *,
                attempt: int = 0) -> Iterator[Any]:
    """The records of several ranges as ``pyarrow.RecordBatch``es, the ranges in order.

    What :func:`read_task` reads (in one fetch session when :func:`in_session`), for a
    caller that carries errors itself (a sink's task writing a grouped KafkaRDD's
    partition); empty ranges are left out.
    """
    return _read_ranges(tuple(r for r in offsetRanges if r.untilOffset > r.fromOffset),
                        settings, attempt)


def _read_ranges(offsetRanges: tuple[OffsetRange, ...], settings: PartitionReadSettings,
                 attempt: int) -> Iterator[Any]:
    if in_session(offsetRanges):
        yield from _session_batches(offsetRanges, settings, attempt)
        return
    for offsetRange in offsetRanges:
        yield from read_partition(offsetRange, settings, attempt=attempt)


def _session_batches(offsetRanges: tuple[OffsetRange, ...], settings: PartitionReadSettings,
                     attempt: int) -> Iterator[Any]:
    """The ranges read in one fetch session: record batches of many ranges, in their order.

    A range the session hands back (an error, no progress) is finished by
    :func:`read_partition`, which decides data loss, log ends and stalls as for any range.
    """
    read = settings.read
    builder = RangesBatchBuilder(settings.includeHeaders, settings.columns)
    pending: list[tuple[str, int, list[Any]]] = []
    rows = 0
    for part in FetchSession(read.params).read(offsetRanges, read.pollTimeoutMs, attempt):
        offsetRange = part.offsetRange
        if part.messages:
            pending.append((offsetRange.topic, offsetRange.partition, part.messages))
            rows += len(part.messages)
        if part.resumeAt is not None and part.resumeAt < offsetRange.untilOffset:
            if pending:  # the rows before it first: the ranges' order is kept
                yield builder.build_ranges(pending)
                pending, rows = [], 0
            yield from read_partition(
                OffsetRange(offsetRange.topic, offsetRange.partition, part.resumeAt,
                            offsetRange.untilOffset), settings, attempt=attempt)
        elif rows >= ROWS_PER_BATCH:
            yield builder.build_ranges(pending)
            pending, rows = [], 0
    if pending:
        yield builder.build_ranges(pending)
