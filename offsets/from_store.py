"""Start a stream or a batch job where an offset store says, in one call.

* :func:`createDirectStreamFromStore`: a direct stream whose partitions start at the
  store's offsets (its driver does not join the Kafka group: see ``groupManagement``);
  partitions the store does not know start per the strategy's policy
  (``auto.offset.reset``, ``newPartitionOffsets``) and are seeded into the store with that
  starting offset before their first batch is read, so a restart finds them there.
* :func:`offsetRangesFromStore`: the ranges a ``createRDD`` job reads next, from the
  stored offsets to the current end of each partition (seeding unknown partitions the same
  way).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kafka_direct import (
    ConfigurationError,
    ConsumerStrategies,
    DirectKafkaInputDStream,
    KafkaUtils,
    LocationStrategies,
    LocationStrategy,
    OffsetRange,
    TopicPartition,
)
from kafka_direct.consumer_strategy import ConsumerStrategy
from kafka_direct.driver_consumer import DriverConsumer
from offsets.offset_store import OffsetStore

__all__ = ["createDirectStreamFromStore", "offsetRangesFromStore"]

logger = logging.getLogger(__name__)


def _strategy(store: OffsetStore, group: str, kafkaParams: Mapping[str, Any],
              topics: Iterable[str] | None, pattern: str | None,
              topicPartitions: Iterable[TopicPartition] | None,
              startingOffsets: Mapping[TopicPartition, int],
              options: Mapping[str, Any]) -> ConsumerStrategy:
    chosen = [name for name, value in (("topics", topics), ("pattern", pattern),
                                       ("topicPartitions", topicPartitions)) if value is not None]
    if len(chosen) != 1:
        raise ConfigurationError("give exactly one of topics=, pattern= or topicPartitions= "
                                 f"(got {chosen or 'none'})")
    params = {**kafkaParams, "group.id": group}
    if topics is not None or pattern is not None:
        options = {"groupManagement": False, **options}
    if topics is not None:
        names = [topics] if isinstance(topics, str) else list(topics)
        offsets = {**startingOffsets, **store.load(group, names)}
        return ConsumerStrategies.Subscribe(names, params, offsets, **options)
    if pattern is not None:
        offsets = {**startingOffsets, **store.load(group)}
        return ConsumerStrategies.SubscribePattern(pattern, params, offsets, **options)
    partitions = list(topicPartitions or ())
    offsets = {**startingOffsets, **store.load(group, {tp.topic for tp in partitions})}
    return ConsumerStrategies.Assign(partitions, params,
                                     {tp: o for tp, o in offsets.items() if tp in partitions},
                                     **options)


def createDirectStreamFromStore(
        ssc: Any, store: OffsetStore, group: str, kafkaParams: Mapping[str, Any], *,
        topics: Iterable[str] | None = None, pattern: str | None = None,
        topicPartitions: Iterable[TopicPartition] | None = None,
        startingOffsets: Mapping[TopicPartition, int] | None = None,
        locationStrategy: LocationStrategy | None = None,
        strategyOptions: Mapping[str, Any] | None = None,
        **streamOptions: Any) -> DirectKafkaInputDStream:
    """A direct stream of ``group`` resuming from ``store``.

    Args:
        ssc: The StreamingContext.
        store: Where the group's offsets are (``PostgresOffsetStore``, ...).
        group: The consumer group (``group.id`` is set to it).
        kafkaParams: librdkafka properties; ``auto.offset.reset`` decides where partitions
            unknown to the store start.
        topics: Subscribe to these topics, or
        pattern: subscribe to the topics matching this regular expression, or
        topicPartitions: read these partitions (``Assign``).
        startingOffsets: Where partitions the store does not know start (before
            ``auto.offset.reset``); stored offsets always win, so a restart resumes.
        locationStrategy: Default ``PreferConsistent()``.
        strategyOptions: More arguments of the strategy (``startingTimestamp``,
            ``newPartitionOffsets``). ``groupManagement`` is False unless given: the store,
            not the Kafka group, says where the stream is, and a restart after a crash
            does not wait for the dead driver's group session to time out.
        **streamOptions: More arguments of ``createDirectStream`` (``valueDeserializer``...).

    Returns:
        The stream; seed-on-start is registered with :meth:`onStartingOffsets`.
    """
    strategy = _strategy(store, group, kafkaParams, topics, pattern, topicPartitions,
                         startingOffsets or {}, strategyOptions or {})
    stream: DirectKafkaInputDStream = KafkaUtils.createDirectStream(
        ssc, locationStrategy or LocationStrategies.PreferConsistent(), strategy,
        **streamOptions)

    def seed(offsets: dict[TopicPartition, int]) -> None:
        store.seed(group, offsets)

    stream.onStartingOffsets(seed)
    return stream


def offsetRangesFromStore(store: OffsetStore, group: str, kafkaParams: Mapping[str, Any],
                          topics: Iterable[str],
                          maxOffsetsPerPartition: int | None = None) -> list[OffsetRange]:
    """The next ranges of ``group``: from the stored offsets to the partitions' ends.

    Partitions unknown to the store start per ``auto.offset.reset`` and are seeded into the
    store. Commit the ranges (a sink does it) once their results are written.

    Args:
        store: Where the group's offsets are.
        group: The consumer group.
        kafkaParams: librdkafka properties of the cluster.
        topics: The topics to read.
        maxOffsetsPerPartition: Cap each range at this many offsets (None: up to the end).

    Raises:
        ConfigurationError: ``auto.offset.reset`` is ``none`` and a partition has no
            stored offset; or a stored offset is past its partition's end.
    """
    if maxOffsetsPerPartition is not None and maxOffsetsPerPartition <= 0:
        raise ConfigurationError(
            f"maxOffsetsPerPartition must be > 0 or None, got {maxOffsetsPerPartition!r}")
    names = [topics] if isinstance(topics, str) else list(topics)
    strategy = ConsumerStrategies.Subscribe(names, {**kafkaParams, "group.id": group})
    driver = DriverConsumer(strategy.driverParams())
    try:
        counts = driver.partitionsOf(names)
        partitions = {TopicPartition(t, p) for t, n in counts.items() for p in range(n)}
        stored = store.load(group, names)
        unknown = partitions - set(stored)
        if unknown and strategy.resetPolicy == "none":
            raise ConfigurationError(
                f"group {group!r} has no stored offset for {sorted(map(str, unknown))} and "
                "auto.offset.reset is none; seed the store or set auto.offset.reset")
        starts = dict(stored)
        if unknown:
            lookup = (driver.earliestOffsets if strategy.resetPolicy == "earliest"
                      else driver.latestOffsets)
            seeded = lookup(unknown)
            store.seed(group, seeded)
            starts.update(seeded)
        ends = driver.latestOffsets(partitions)
    finally:
        driver.close()
    ranges = []
    for tp in sorted(partitions):
        start, end = starts[tp], ends[tp]
        if start > end:
            raise ConfigurationError(
                f"the stored offset {start} of {tp} for group {group!r} is past the "
                f"partition's end {end}: was the topic re-created? Reset the group's offsets",
                topic=tp.topic, partition=tp.partition)
        if maxOffsetsPerPartition is not None:
            end = min(end, start + maxOffsetsPerPartition)
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges
