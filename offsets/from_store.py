"""Start a stream or a batch job where an offset store says, in one call.

* :func:`createDirectStreamFromStore`: a direct stream whose partitions start at the
  store's offsets (its driver does not join the Kafka group: see ``groupManagement``);
  partitions the store does not know start at ``startingOffsets`` if given, else per the
  strategy's policy (``startingTimestamp``, then ``auto.offset.reset`` at start and
  ``newPartitionOffsets`` for partitions found while running), never at the Kafka group's
  committed offsets: the store, not the group, says where the stream is. They are seeded
  into the store with that starting offset before their first batch is read, so a restart
  finds them there.
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
    DataLossError,
    DirectKafkaInputDStream,
    KafkaUtils,
    LocationStrategies,
    LocationStrategy,
    OffsetRange,
    TopicPartition,
)
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.dstream.consumer_strategy import (
    Assign,
    ConsumerStrategy,
    Subscribe,
    SubscribePattern,
)
from offsets.offset_store import OffsetStore

__all__ = ["createDirectStreamFromStore", "offsetRangesFromStore"]

logger = logging.getLogger(__name__)


def _fillStarts(strategy: ConsumerStrategy, driver: DriverConsumer,
                partitions: set[TopicPartition], started: bool) -> set[TopicPartition]:
    """Give each of ``partitions`` an explicit start, so the stream never asks the group.

    The direct stream takes a partition's start from the strategy's ``offsets`` first and
    falls back to the group's committed offset; filling ``offsets`` for each partition as it
    appears (the store's offset, given ones, else the policy) keeps the group out.
    """
    missing = partitions - set(strategy.offsets)
    if missing:
        policy = strategy.newPartitionOffsets if started else strategy.resetPolicy
        strategy.offsets.update(_policyOffsets(strategy, driver, missing, policy))
    return partitions


def _policyOffsets(strategy: ConsumerStrategy, driver: DriverConsumer,
                   partitions: set[TopicPartition], policy: str) -> dict[TopicPartition, int]:
    chosen: dict[TopicPartition, int] = {}
    timestamps = {tp: ts for tp in partitions if (ts := strategy.timestampFor(tp)) is not None}
    if timestamps:
        chosen.update(driver.offsetsForTimes(timestamps))
    rest = partitions - set(chosen)
    if rest and policy == "none":
        raise ConfigurationError(
            f"the offset store has no offset for {sorted(str(tp) for tp in rest)} of group "
            f"{strategy.groupId!r} and auto.offset.reset is none; seed the store or give "
            "startingOffsets= (the Kafka group's commits are not used in store mode)")
    if rest:
        lookup = driver.earliestOffsets if policy == "earliest" else driver.latestOffsets
        chosen.update(lookup(rest))
        logger.info("partitions %s of group %s are new to the store: they start at their "
                    "%s offsets", sorted(str(tp) for tp in rest), strategy.groupId, policy)
    return chosen


class _StoreStarts:
    """Mixin of the store strategies: explicit starts for every partition, checked once.

    On the first answer with partitions, the store's offsets are checked against the logs:
    an offset past its partition's end (a re-created or truncated topic) is the store's
    mistake, and the error says so, naming the store and the group (whatever
    ``failOnDataLoss`` says: the store must be reset before the new log can be committed).
    """

    _started = False
    _storeName = "the offset store"
    _stored: Mapping[TopicPartition, int] = {}

    def _storePartitions(self, strategy: ConsumerStrategy, driver: DriverConsumer,
                         partitions: set[TopicPartition]) -> set[TopicPartition]:
        if not self._started and partitions:
            self._checkStored(strategy, driver, partitions)
        _fillStarts(strategy, driver, partitions, self._started)
        self._started = self._started or bool(partitions)
        return partitions

    def _checkStored(self, strategy: ConsumerStrategy, driver: DriverConsumer,
                     partitions: set[TopicPartition]) -> None:
        stored = {tp: o for tp, o in self._stored.items() if tp in partitions}
        if not stored:
            return
        # The high watermark where the driver can tell it (read_committed's end is held
        # back by open transactions, which is no loss).
        ends = getattr(driver, "highWatermarks", driver.latestOffsets)(set(stored))
        for tp in sorted(stored):
            offset, end = stored[tp], ends.get(tp)
            if end is None or offset <= end:
                continue
            # Always an error, whatever failOnDataLoss says: reading on from the new log
            # would leave the store at the old offset, and every commit would mismatch.
            raise DataLossError(
                f"{self._storeName} holds offset {offset} of {tp} for group "
                f"{strategy.groupId!r}, past the partition's end {end}: the topic was "
                "re-created or truncated after the store's last commit; reset the group's "
                "offsets in the store (or delete its rows for this topic) to read the new log",
                topic=tp.topic, partition=tp.partition, fromOffset=offset,
                untilOffset=offset, logStartOffset=None, store=self._storeName,
                group=strategy.groupId, logEndOffset=end)


class _StoreSubscribe(_StoreStarts, Subscribe):
    """``Subscribe`` : partitions new to the store start per policy, not per the group."""

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        return self._storePartitions(self, driver, super().topicPartitions(driver))


class _StoreSubscribePattern(_StoreStarts, SubscribePattern):
    """``SubscribePattern`` : partitions new to the store start per policy, not per the group."""

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        return self._storePartitions(self, driver, super().topicPartitions(driver))


class _StoreAssign(_StoreStarts, Assign):
    """``Assign`` : partitions new to the store start per policy, not per the group."""

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        return self._storePartitions(self, driver, super().topicPartitions(driver))


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
    strategy: _StoreSubscribe | _StoreSubscribePattern | _StoreAssign
    if topics is not None:
        names = [topics] if isinstance(topics, str) else list(topics)
        stored = store.load(group, names)
        strategy = _StoreSubscribe(names, params, {**startingOffsets, **stored}, **options)
    elif pattern is not None:
        stored = store.load(group)
        strategy = _StoreSubscribePattern(pattern, params, {**startingOffsets, **stored},
                                          **options)
    else:
        partitions = list(topicPartitions or ())
        stored = store.load(group, {tp.topic for tp in partitions})
        offsets = {**startingOffsets, **stored}
        strategy = _StoreAssign(partitions, params,
                                {tp: o for tp, o in offsets.items() if tp in partitions},
                                **options)
    strategy._stored = dict(stored)
    strategy._storeName = repr(store)
    return strategy


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
            unknown to the store start (the group's committed offsets are never used).
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
                f"{store!r} holds offset {start} of {tp} for group {group!r}, past the "
                f"partition's end {end}: was the topic re-created? Reset the group's "
                "offsets in the store",
                topic=tp.topic, partition=tp.partition)
        if maxOffsetsPerPartition is not None:
            end = min(end, start + maxOffsetsPerPartition)
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges
