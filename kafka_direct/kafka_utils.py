"""KafkaUtils: the entry points, named and shaped as in Spark's Scala API."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_direct.client.params import (
    executor_params,
    refusal,
    resolve_callbacks,
    validate_params,
)
from kafka_direct.conf_values import parse_bool, parse_int
from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
from kafka_direct.dstream.stream_settings import (
    CACHE_ENABLED_CONF,
    POLL_TIMEOUT_CONF,
    poll_timeout_ms,
)
from kafka_direct.errors import ConfigurationError, UnknownTopicOrPartitionError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD, ReadSettings, kafka_rdd
from kafka_direct.rdd.location_strategy import (
    LocationStrategies,
    LocationStrategy,
    PreferBrokers,
    preferred_locations,
)
from kafka_direct.rdd.range_groups import group_ranges

__all__ = ["KafkaUtils", "check_consumer_params", "check_partitions_exist"]

logger = logging.getLogger(__name__)

_METADATA_TIMEOUT_S = 30.0


def check_consumer_params(params: Mapping[str, Any]) -> Any:
    """Build a consumer from ``params`` to let librdkafka check every property.

    Returns:
        The consumer (the caller closes it).

    Raises:
        ConfigurationError: librdkafka rejects a property; the message names it.
    """
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(resolve_callbacks(params))
    except (KafkaException, ValueError, TypeError) as error:
        # Not chained: librdkafka's own text may quote a secret value; refusal() cuts it out.
        raise refusal(error, params) from None


def check_partitions_exist(consumer: Any, ranges: Iterable[OffsetRange]) -> None:
    """Raise UnknownTopicOrPartitionError for a range whose partition the cluster lacks."""
    from confluent_kafka import KafkaException

    for topic in sorted({r.topic for r in ranges}):
        try:
            metadata = consumer.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise ConfigurationError(
                f"cannot read metadata of topic {topic!r} within {_METADATA_TIMEOUT_S:.0f} s "
                f"({error}); is bootstrap.servers right and the broker up?"
            ) from error
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist on the cluster; create it or fix the name",
                topic=topic)
        for r in ranges:
            if r.topic == topic and r.partition not in described.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has partitions 0..{len(described.partitions) - 1}, not "
                    f"{r.partition} (asked for by {r})", topic=topic, partition=r.partition)


def _conf(sc: Any, key: str, default: str) -> str:
    try:
        return str(sc.getConf().get(key, default))
    except Exception:
        return default


class KafkaUtils:
    """Create Kafka RDDs (and, with the streaming engine, direct streams)."""

    @staticmethod
    def createRDD(
        sc: Any,
        kafkaParams: Mapping[str, Any],
        offsetRanges: Iterable[OffsetRange],
        locationStrategy: LocationStrategy | None = None,
        keyDeserializer: Callable[[bytes], Any] | None = None,
        valueDeserializer: Callable[[bytes], Any] | None = None,
        messageHandler: Callable[[ConsumerRecord], Any] | None = None,
        *,
        failOnDataLoss: bool = True,
        pollTimeoutMs: int | None = None,
        minOffsetsPerTask: int = 0,
        maxRangesPerTask: int = 1000,
    ) -> KafkaRDD:
        """An RDD of the records in ``offsetRanges``, one Spark partition per range.

        Args:
            sc: The SparkContext.
            kafkaParams: librdkafka consumer properties; ``bootstrap.servers`` required.
                Executors read with ``auto.offset.reset=error``, auto-commit off and group
                ``spark-executor-<group.id>`` whatever is given (one warning per override).
            offsetRanges: Ranges to read; partition ``i`` of the RDD reads range ``i``.
            locationStrategy: ``LocationStrategies.PreferConsistent()`` (default) or
                ``PreferFixed(hostMap)``. ``PreferBrokers()`` is rejected: a batch job has
                no driver consumer that knows the leaders (as in Spark).
            keyDeserializer: Applied to each key's bytes on executors (None keeps bytes).
            valueDeserializer: Applied to each value's bytes on executors.
            messageHandler: Maps each ConsumerRecord to the RDD's element.
            failOnDataLoss: Deleted offsets raise DataLossError (default); False logs a
                warning and reads on from the earliest available offset.
            pollTimeoutMs: Longest wait without progress on a range before the task fails;
                default ``spark.streaming.kafka.consumer.poll.ms`` or 120000.
            minOffsetsPerTask: Above 1, consecutive small ranges share a Spark partition up
                to about this many offsets (a grouped KafkaRDD: partition ``i`` reads
                ``rdd.rangeGroups()[i]``, in one fetch session when they are small), keeping
                at least ``sc.defaultParallelism`` partitions; 0 (default) or 1: one
                partition per range. Grouping needs at most one range per topic-partition.
            maxRangesPerTask: Most ranges in one partition when grouped (>= 1).

        Raises:
            ConfigurationError: Bad parameters, ranges or strategy.
            UnknownTopicOrPartitionError: A range names a partition the cluster lacks.
        """
        params = validate_params(kafkaParams)
        ranges = list(offsetRanges) if offsetRanges is not None else []
        for r in ranges:
            if not isinstance(r, OffsetRange):
                raise ConfigurationError(
                    f"offsetRanges must hold OffsetRange values, got {r!r}; build them with "
                    "OffsetRange(topic, partition, fromOffset, untilOffset)")
        strategy = locationStrategy or LocationStrategies.PreferConsistent()
        if isinstance(strategy, PreferBrokers):
            preferred_locations(strategy, [], [])  # raises the explanation
        # One rule for the argument and the Spark setting, shared with the stream: > 0; an
        # error names the one the user wrote.
        pollTimeoutMs = (poll_timeout_ms(_conf(sc, POLL_TIMEOUT_CONF, "120000"))
                         if pollTimeoutMs is None else parse_int("pollTimeoutMs", pollTimeoutMs, 1))
        fixed = executor_params(params)
        # Settings first: a bad argument fails before any broker is asked anything.
        settings = ReadSettings(
            params=fixed,
            pollTimeoutMs=pollTimeoutMs,
            failOnDataLoss=parse_bool("failOnDataLoss", failOnDataLoss),
            useConsumerCache=parse_bool(CACHE_ENABLED_CONF,
                                        _conf(sc, CACHE_ENABLED_CONF, "true")),
            keyDeserializer=keyDeserializer,
            valueDeserializer=valueDeserializer,
            messageHandler=messageHandler,
        )
        minOffsets = parse_int("minOffsetsPerTask", minOffsetsPerTask, 0)
        mostRanges = parse_int("maxRangesPerTask", maxRangesPerTask, 1)
        groups = (group_ranges(ranges, minOffsets, sc.defaultParallelism, mostRanges)
                  if minOffsets > 1 and len(ranges) > 1 else None)
        consumer = check_consumer_params(fixed)
        try:
            check_partitions_exist(consumer, ranges)
        finally:
            consumer.close()
        return kafka_rdd(sc, ranges, settings, strategy, groups=groups)

    @staticmethod
    def createDirectStream(
        ssc: Any,
        locationStrategy: LocationStrategy,
        consumerStrategy: Any,
        perPartitionConfig: Any = None,
        keyDeserializer: Callable[[bytes], Any] | None = None,
        valueDeserializer: Callable[[bytes], Any] | None = None,
        messageHandler: Callable[[ConsumerRecord], Any] | None = None,
        *,
        checkpointId: str | None = None,
    ) -> DirectKafkaInputDStream:
        """A direct stream: one KafkaRDD per batch, one offset range per partition.

        Args:
            ssc: The StreamingContext.
            locationStrategy: Where executors read (``LocationStrategies.PreferConsistent()``).
            consumerStrategy: Which partitions and where to start
                (``ConsumerStrategies.Subscribe([...], kafkaParams)`` ...).
            perPartitionConfig: Per-partition rate limits (default: Spark settings
                ``spark.streaming.kafka.maxRatePerPartition`` / ``minRatePerPartition``).
            keyDeserializer: Applied to key bytes on executors.
            valueDeserializer: Applied to value bytes on executors.
            messageHandler: Maps each ConsumerRecord to the RDD element.
            checkpointId: A name that a checkpoint matches the stream's state by (see
                ``DStream.setCheckpointId``). Default: the stream's topics / pattern /
                partitions and group.id.

        Returns:
            A :class:`~kafka_direct.dstream.direct_kafka_input_dstream.DirectKafkaInputDStream`; its
            RDDs have ``offsetRanges()`` and it has ``commitAsync(ranges, callback)``.
        """
        stream = DirectKafkaInputDStream(ssc, locationStrategy, consumerStrategy,
                                         perPartitionConfig, keyDeserializer,
                                         valueDeserializer, messageHandler)
        if checkpointId is not None:
            stream.setCheckpointId(checkpointId)
        return stream

    @staticmethod
    def _kafkaRDD(sc: Any, ranges: list[OffsetRange], settings: ReadSettings,
                  strategy: LocationStrategy,
                  leaders: Mapping[Any, str] | None = None) -> KafkaRDD:
        """A KafkaRDD from checked inputs (kept for callers of old; see ``kafka_rdd``)."""
        return kafka_rdd(sc, ranges, settings, strategy, leaders)
