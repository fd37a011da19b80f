"""An offset range read as records on an executor: what a KafkaRDD task yields.

:func:`read_range` reads exactly ``[fromOffset, untilOffset)`` of one range, streaming
(memory does not grow with the range), with a consumer leased from the Python worker's cache
(:meth:`~kafka_direct.client.data_consumer.ConsumerCache.lease`): a read that fails or is
abandoned closes the cached consumer, and a retried task (``attempt > 0``) never reuses one,
so it reads exactly the records the failed attempt saw. Gaps, data loss and stalls are
decided by :meth:`~kafka_direct.client.data_consumer.KafkaDataConsumer.read_batches`. Each
record is a :class:`~kafka_direct.consumer_record.ConsumerRecord`, or what the read settings'
deserializers and message handler make of it; a user function that fails raises one
:class:`~kafka_direct.errors.KafkaReadError` naming the function, the range and the offset,
never the record's key or value.

:func:`read_ranges` reads a grouped KafkaRDD's partition (small ranges in one fetch session),
:func:`count_range` counts what :func:`read_range` would yield. The KafkaRDD, its task
functions and its placement are :mod:`kafka_direct.rdd.kafka_rdd`'s; ranges read as Arrow
batches are :mod:`kafka_direct.rdd.arrow_reader`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

from kafka_direct.client.cached_consumers import ConsumerCache, consumer_cache
from kafka_direct.client.columnar import ColumnarDataConsumer, columnar_cache, use_native
from kafka_direct.client.fetch_session import FetchSession, in_session
from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.errors import KafkaDirectError, KafkaReadError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.task_errors import user_failure

__all__ = ["count_range", "read_range", "read_ranges"]

def _user_function_failed(function: str, error: Exception, offsetRange: OffsetRange,
                          offset: int) -> KafkaReadError:
    """One typed error for a user function that failed on a record: where, and the cause.

    It names the function, topic, partition and offset and carries the user's exception type
    and message (shortened), never the record's key or value.
    """
    kind, text = user_failure(error)
    return KafkaReadError(
        f"{function} failed on {offsetRange.topic}-{offsetRange.partition} at offset "
        f"{offset} (range [{offsetRange.fromOffset}, {offsetRange.untilOffset})): {kind}: "
        f"{text}", topic=offsetRange.topic, partition=offsetRange.partition,
        fromOffset=offsetRange.fromOffset, untilOffset=offsetRange.untilOffset, offset=offset,
        function=function, errorType=kind, errorMessage=text)


def _records(batches: Iterator[list[Any]], offsetRange: OffsetRange,
             settings: ReadSettings) -> Iterator[Any]:
    # The hot loop of every task: tuple.__new__ skips the named tuple's Python-level
    # constructor, and topic and partition come from the range instead of two calls a record.
    # confluent-kafka numbers timestamp types 0 (none), 1 (create), 2 (log append); Kafka's
    # Java client and Spark use -1, 0, 1: hence ``kind - 1``.
    topic, partition = offsetRange.topic, offsetRange.partition
    new = tuple.__new__
    record_type = ConsumerRecord
    key_of = settings.keyDeserializer
    value_of = settings.valueDeserializer
    handler = settings.messageHandler
    if key_of is None and value_of is None and handler is None:
        for batch in batches:
            for message in batch:
                kind, timestamp = message.timestamp()
                headers = message.headers()
                yield new(record_type, (topic, partition, message.offset(),
                                        timestamp if kind else -1, kind - 1, message.key(),
                                        message.value(), tuple(headers) if headers else ()))
        return
    # Each user function gets its own try (free in Python >= 3.11 until something raises),
    # so the error names the one that failed. Our own errors pass as they are.
    function = ""
    for batch in batches:
        for message in batch:
            kind, timestamp = message.timestamp()
            headers = message.headers()
            key = message.key()
            value = message.value()
            try:
                function = "keyDeserializer"
                if key_of is not None and key is not None:
                    key = key_of(key)
                function = "valueDeserializer"
                if value_of is not None and value is not None:
                    value = value_of(value)
                record = new(record_type, (
                    topic, partition, message.offset(), timestamp if kind else -1, kind - 1,
                    key, value, tuple(headers) if headers else ()))
                function = "messageHandler"
                element = handler(record) if handler is not None else record
            except KafkaDirectError:
                raise
            except Exception as error:
                raise _user_function_failed(function, error, offsetRange,
                                            message.offset()) from error
            yield element


def read_range(offsetRange: OffsetRange, settings: ReadSettings, *, attempt: int = 0,
               cache: ConsumerCache | None = None) -> Iterator[Any]:
    """Read the records of one range on an executor (what a KafkaRDD task does).

    Args:
        offsetRange: The range to read.
        settings: How to read.
        attempt: The task attempt number; a retry never reuses a cached consumer.
        cache: The consumer cache; the worker-wide one by default.
    """
    if offsetRange.count() == 0:
        return
    cache = cache if cache is not None else consumer_cache
    with cache.lease(offsetRange.topic, offsetRange.partition, settings.params,
                     attempt=attempt, cached=settings.useConsumerCache) as consumer:
        yield from _records(
            consumer.read_batches(offsetRange.fromOffset, offsetRange.untilOffset,
                                  settings.pollTimeoutMs, settings.failOnDataLoss),
            offsetRange, settings)


def read_ranges(offsetRanges: Sequence[OffsetRange], settings: ReadSettings, *,
                attempt: int = 0) -> Iterator[Any]:
    """Read the records of a task's ranges, range after range in the order given.

    Several small non-empty ranges of distinct partitions
    (:func:`~kafka_direct.client.fetch_session.in_session`) are read with one consumer in
    one fetch session (when consumers may be cached); a range the session hands back (an
    error, no progress) is finished by :func:`read_range`, which decides data loss, log
    ends and stalls as for any range. Other ranges are read one after the other by
    :func:`read_range`. Which way is a pure function of the ranges: a retried task reads
    the way the failed attempt did, the same records.

    Args:
        offsetRanges: The task's ranges (a grouped KafkaRDD's partition).
        settings: How to read.
        attempt: The task attempt number; a retry never reuses a cached consumer.
    """
    present = [r for r in offsetRanges if r.untilOffset > r.fromOffset]
    # A session keeps its consumer for the worker's next one: not when consumers must not
    # be cached (spark.streaming.kafka.consumer.cache.enabled=false).
    if not settings.useConsumerCache or not in_session(present):
        for offsetRange in present:
            yield from read_range(offsetRange, settings, attempt=attempt)
        return
    for part in FetchSession(settings.params).read(present, settings.pollTimeoutMs, attempt):
        offsetRange = part.offsetRange
        if part.messages:
            yield from _records(iter((part.messages,)), offsetRange, settings)
        if part.resumeAt is not None and part.resumeAt < offsetRange.untilOffset:
            yield from read_range(OffsetRange(offsetRange.topic, offsetRange.partition,
                                              part.resumeAt, offsetRange.untilOffset),
                                  settings, attempt=attempt)


def count_range(offsetRange: OffsetRange, settings: ReadSettings, *, impl: str | None = None,
                attempt: int = 0, cache: ConsumerCache | None = None) -> int:
    """How many records ``offsetRange`` holds: what :func:`read_range` would yield, counted.

    Raw records (no deserializer or handler, which may fail on a record) are counted by the
    native columnar reader when it applies (:func:`~kafka_direct.client.columnar.use_native`):
    the same contract (gaps, data loss, stalls), and no Python object per record. Otherwise,
    and always when ``cache`` is given, the records :func:`read_range` yields are counted.

    Args:
        offsetRange: The range to count.
        settings: How to read.
        impl: The reader the driver asked for (its ``KAFKA_DIRECT_IMPL``).
        attempt: The task attempt number; a retry never reuses a cached consumer.
        cache: A consumer cache for the Python reader (tests); None: the worker's own.
    """
    if offsetRange.count() == 0:
        return 0
    raw = (settings.keyDeserializer is None and settings.valueDeserializer is None
           and settings.messageHandler is None)
    if cache is not None or not raw or not use_native(settings.params, impl):
        return sum(1 for _ in read_range(offsetRange, settings, attempt=attempt, cache=cache))
    with columnar_cache.lease(offsetRange.topic, offsetRange.partition, settings.params,
                              attempt=attempt, cached=settings.useConsumerCache) as consumer:
        native = cast(ColumnarDataConsumer, consumer)  # the columnar cache's consumer class
        return sum(chunk.count for chunk in native.read_chunks(
            offsetRange.fromOffset, offsetRange.untilOffset, settings.pollTimeoutMs,
            settings.failOnDataLoss, columns=0))  # counted, not copied
