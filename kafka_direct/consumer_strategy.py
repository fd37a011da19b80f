"""ConsumerStrategies: which partitions a direct stream reads, and where it starts.

A strategy holds the user's Kafka parameters and decides, on the driver, which topic-
partitions belong to the stream: ``Subscribe`` and ``SubscribePattern`` join the consumer
group (the group assigns the partitions, new partitions and new matching topics included);
``Assign`` names fixed partitions and never joins the group. Executors read with parameters
derived from the same dict (:func:`kafka_params.executor_params`).

Where a partition starts, first match wins: ``offsets`` given to the strategy, the group's
committed offset, ``startingTimestamp`` (the first offset at or after it), then the
``auto.offset.reset`` policy (``earliest`` or ``latest``, Kafka's default). Partitions that
appear while the stream runs start at ``newPartitionOffsets`` (``earliest`` by default: a new
partition's first records would be lost with ``latest``).

Subclass :class:`ConsumerStrategy` for other policies: implement :meth:`onStart` (subscribe
or check, through the driver consumer) and :meth:`topicPartitions`.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import ConfigurationError, UnknownTopicOrPartitionError
from kafka_direct.kafka_params import executor_params, force_param, validate_params
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.driver_consumer import DriverConsumer

__all__ = ["Assign", "ConsumerStrategies", "ConsumerStrategy", "Subscribe", "SubscribePattern"]

logger = logging.getLogger(__name__)

_POLICIES = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
             "latest": "latest", "largest": "latest", "end": "latest",
             "error": "none", "none": "none"}


def _offsets(offsets: Any) -> dict[TopicPartition, int]:
    if offsets is None:
        return {}
    if not isinstance(offsets, Mapping):
        raise ConfigurationError(
            f"offsets must be a dict {{TopicPartition: offset}}, got {type(offsets).__name__}")
    checked = {}
    for tp, offset in offsets.items():
        if not isinstance(tp, TopicPartition):
            raise ConfigurationError(f"offsets keys must be TopicPartition, got {tp!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(f"offsets[{tp}] must be an int >= 0, got {offset!r}",
                                     topic=tp.topic, partition=tp.partition)
        checked[tp] = offset
    return checked


def _topics(topics: Any, what: str) -> list[str]:
    if isinstance(topics, str):
        raise ConfigurationError(
            f"{what} takes a list of topic names, got the string {topics!r}; "
            f"write [{topics!r}]")
    names = list(topics) if isinstance(topics, Iterable) else None
    if not names or not all(isinstance(t, str) and t for t in names):
        raise ConfigurationError(f"{what} needs a non-empty list of topic names, got {topics!r}")
    return names


class ConsumerStrategy(ABC):
    """Which partitions a stream reads; the driver consumer's set-up.

    Args:
        kafkaParams: librdkafka properties; ``bootstrap.servers`` and ``group.id`` required.
        offsets: Starting offsets that override the group's committed ones.
        startingTimestamp: Start partitions without a given or committed offset at the
            first offset at or after this time (epoch ms), or a dict of times per partition.
        newPartitionOffsets: Where partitions found while running start: ``earliest``
            (default) or ``latest``.
    """

    #: Whether the driver consumer joins the consumer group (subscriptions do).
    usesGroupManagement = False

    def __init__(self, kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, *,
                 startingTimestamp: int | Mapping[TopicPartition, int] | None = None,
                 newPartitionOffsets: str = "earliest") -> None:
        self.kafkaParams = validate_params(kafkaParams, require_group=True)
        self.offsets = _offsets(offsets)
        if startingTimestamp is not None and not isinstance(startingTimestamp, int | Mapping):
            raise ConfigurationError(
                "startingTimestamp must be epoch milliseconds or {TopicPartition: ms}")
        self.startingTimestamp = startingTimestamp
        if newPartitionOffsets not in ("earliest", "latest"):
            raise ConfigurationError(
                f"newPartitionOffsets must be 'earliest' or 'latest', got {newPartitionOffsets!r}")
        self.newPartitionOffsets = newPartitionOffsets
        policy = str(self.kafkaParams.get("auto.offset.reset", "latest")).lower()
        if policy not in _POLICIES:
            raise ConfigurationError(
                f"auto.offset.reset must be earliest, latest or none, got {policy!r}")
        self.resetPolicy = _POLICIES[policy]

    @property
    def groupId(self) -> str:
        """The consumer group."""
        return str(self.kafkaParams["group.id"])

    def driverParams(self) -> dict[str, Any]:
        """What the driver consumer runs with: never committing or storing by itself."""
        params = dict(self.kafkaParams)
        force_param(params, "enable.auto.commit", False,
                    "the driver commits only what commitAsync is given", "driver")
        force_param(params, "enable.auto.offset.store", False,
                    "the driver never reads records", "driver")
        params.pop("auto.offset.reset", None)  # start offsets are decided explicitly
        if self.usesGroupManagement:
            # New partitions and matching topics are found when metadata is refreshed.
            params.setdefault("topic.metadata.refresh.interval.ms", 5000)
        return params

    def executorParams(self) -> dict[str, Any]:
        """What executors read with."""
        return executor_params(self.kafkaParams)

    def timestampFor(self, tp: TopicPartition) -> int | None:
        """The starting timestamp of ``tp``, if one applies."""
        if isinstance(self.startingTimestamp, Mapping):
            value = self.startingTimestamp.get(tp)
            return int(value) if value is not None else None
        return self.startingTimestamp

    @abstractmethod
    def onStart(self, driver: DriverConsumer) -> None:
        """Set the driver consumer up (subscribe, or check the partitions exist)."""

    @abstractmethod
    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        """The partitions the stream reads now (called every batch)."""


class Subscribe(ConsumerStrategy):
    """Subscribe to topics by name; the group assigns the partitions.

    Args:
        topics: Topic names (a list, not a single string).
        kafkaParams: See :class:`ConsumerStrategy`.
        offsets: See :class:`ConsumerStrategy`.
        groupManagement: Join the consumer group (default). False: read every partition of
            the topics, found in the cluster's metadata each batch (new partitions too),
            without joining the group — for offsets kept outside Kafka, where a restart
            after a crash must not wait out the dead member's session timeout. Something
            else must then keep two jobs apart (``PostgresOffsetStore.lockGroup``).
    """

    def __init__(self, topics: Iterable[str], kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, *,
                 groupManagement: bool = True, **options: Any) -> None:
        self.topics = _topics(topics, "Subscribe")
        self.usesGroupManagement = bool(groupManagement)
        super().__init__(kafkaParams, offsets, **options)

    def onStart(self, driver: DriverConsumer) -> None:
        """Check the topics exist, then join the group (when managed by the group)."""
        found = driver.partitionsOf(self.topics)
        missing = [t for t in self.topics if t not in found]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"Subscribe: topic(s) {missing} do not exist on the cluster; create them or "
                "fix the names", topic=missing[0])
        if self.usesGroupManagement:
            driver.subscribe(self.topics)

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        """The group's current assignment (or every partition of the topics)."""
        if self.usesGroupManagement:
            return driver.assignment()
        return {TopicPartition(t, p) for t, n in driver.partitionsOf(self.topics).items()
                for p in range(n)}

    def __repr__(self) -> str:
        return f"Subscribe({self.topics!r}, group={self.groupId!r})"


class SubscribePattern(ConsumerStrategy):
    """Subscribe to every topic whose name matches a regular expression (new ones too).

    Args:
        pattern: A regular expression (``re`` syntax) matched against whole topic names.
        kafkaParams: See :class:`ConsumerStrategy`.
        offsets: See :class:`ConsumerStrategy`.
        groupManagement: See :class:`Subscribe`; False finds matching topics in the
            cluster's metadata each batch.
    """

    def __init__(self, pattern: str | re.Pattern[str], kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, *,
                 groupManagement: bool = True, **options: Any) -> None:
        self.usesGroupManagement = bool(groupManagement)
        text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        if not isinstance(text, str) or not text:
            raise ConfigurationError(f"SubscribePattern needs a regular expression, got "
                                     f"{pattern!r}")
        try:
            self.pattern = re.compile(text)
        except re.error as error:
            raise ConfigurationError(f"SubscribePattern: {text!r} is not a valid regular "
                                     f"expression: {error}") from error
        super().__init__(kafkaParams, offsets, **options)

    def onStart(self, driver: DriverConsumer) -> None:
        """Join the group with the pattern (librdkafka's ``^regex`` subscription)."""
        if not self.usesGroupManagement:
            return
        regex = self.pattern.pattern
        regex = regex if regex.startswith("^") else "^" + regex
        driver.subscribe([regex if regex.endswith("$") else regex + "$"])

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        """The group's current assignment (or every partition of the matching topics)."""
        if self.usesGroupManagement:
            return driver.assignment()
        return {TopicPartition(t, p)
                for t, n in driver.topicsMatching(self._matches).items()
                for p in range(n)}

    def _matches(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None

    def __repr__(self) -> str:
        return f"SubscribePattern({self.pattern.pattern!r}, group={self.groupId!r})"


class Assign(ConsumerStrategy):
    """Read fixed partitions, without joining the consumer group.

    Args:
        topicPartitions: The partitions.
        kafkaParams: See :class:`ConsumerStrategy`.
        offsets: See :class:`ConsumerStrategy`.
    """

    def __init__(self, topicPartitions: Iterable[TopicPartition],
                 kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, **options: Any) -> None:
        partitions = list(topicPartitions) if isinstance(topicPartitions, Iterable) else []
        if not partitions or not all(isinstance(tp, TopicPartition) for tp in partitions):
            raise ConfigurationError(
                f"Assign needs a non-empty list of TopicPartition, got {topicPartitions!r}")
        self.partitions = set(partitions)
        super().__init__(kafkaParams, offsets, **options)

    def onStart(self, driver: DriverConsumer) -> None:
        """Check every partition exists."""
        counts = driver.partitionsOf({tp.topic for tp in self.partitions})
        for tp in sorted(self.partitions):
            if tp.topic not in counts:
                raise UnknownTopicOrPartitionError(
                    f"Assign: topic {tp.topic!r} does not exist on the cluster", topic=tp.topic)
            if tp.partition >= counts[tp.topic]:
                raise UnknownTopicOrPartitionError(
                    f"Assign: topic {tp.topic!r} has partitions 0..{counts[tp.topic] - 1}, not "
                    f"{tp.partition}", topic=tp.topic, partition=tp.partition)

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        """The assigned partitions."""
        return set(self.partitions)

    def __repr__(self) -> str:
        return f"Assign({sorted(self.partitions)!r}, group={self.groupId!r})"


class ConsumerStrategies:
    """Factories of consumer strategies, named as in Spark's Scala API."""

    @staticmethod
    def Subscribe(topics: Iterable[str], kafkaParams: Mapping[str, Any],
                  offsets: Mapping[TopicPartition, int] | None = None,
                  **options: Any) -> ConsumerStrategy:
        """Subscribe to topics by name (see :class:`Subscribe`)."""
        return Subscribe(topics, kafkaParams, offsets, **options)

    @staticmethod
    def SubscribePattern(pattern: str | re.Pattern[str], kafkaParams: Mapping[str, Any],
                         offsets: Mapping[TopicPartition, int] | None = None,
                         **options: Any) -> ConsumerStrategy:
        """Subscribe to topics matching a pattern (see :class:`SubscribePattern`)."""
        return SubscribePattern(pattern, kafkaParams, offsets, **options)

    @staticmethod
    def Assign(topicPartitions: Iterable[TopicPartition], kafkaParams: Mapping[str, Any],
               offsets: Mapping[TopicPartition, int] | None = None,
               **options: Any) -> ConsumerStrategy:
        """Read fixed partitions (see :class:`Assign`)."""
        return Assign(topicPartitions, kafkaParams, offsets, **options)
