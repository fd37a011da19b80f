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

from kafka_direct.client.params import executor_params, force_param, validate_params
from kafka_direct.conf_values import check_offset
from kafka_direct.errors import ConfigurationError, UnknownTopicOrPartitionError
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.client.driver_consumer import DriverConsumer

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
        checked[tp] = check_offset(f"offsets[{tp}]", offset, topic=tp.topic,
                                   partition=tp.partition)
    return checked


def _timestamp(what: str, value: Any, **context: Any) -> int:
    """``value`` as a starting time in epoch milliseconds: an int >= 0, not a bool.

    Kafka's ListOffsets reads -1 and -2 as "the log end" and "the log start": passed on, they
    would silently mean ``latest`` / ``earliest``; other negatives fail only at the start.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        hint = ("; to start at the log start or end use auto.offset.reset='earliest' or "
                "'latest' instead of Kafka's -2 / -1" if value in (-1, -2)
                and not isinstance(value, bool) else "")
        raise ConfigurationError(
            f"{what} must be epoch milliseconds (an int >= 0, not a bool), got {value!r}; "
            f"e.g. int(datetime.timestamp() * 1000){hint}", **context)
    return value


def _timestamps(value: Any) -> int | dict[TopicPartition, int] | None:
    """``startingTimestamp`` checked: None, epoch ms, or ``{TopicPartition: epoch ms}``.

    Raises:
        ConfigurationError: Names the value, the partition and what to give instead.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        checked = {}
        for tp, ms in value.items():
            if not isinstance(tp, TopicPartition):
                raise ConfigurationError(
                    f"startingTimestamp keys must be TopicPartition, got {tp!r}; write "
                    "{TopicPartition(topic, partition): ms}")
            checked[tp] = _timestamp(f"startingTimestamp[{tp}]", ms, topic=tp.topic,
                                     partition=tp.partition)
        return checked
    if isinstance(value, int) or (isinstance(value, float) and not isinstance(value, bool)):
        return _timestamp("startingTimestamp", value)
    raise ConfigurationError(
        "startingTimestamp must be epoch milliseconds or a dict {TopicPartition: ms}, got "
        f"{value!r} ({type(value).__name__})")


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
            first offset at or after this time (epoch ms, an int >= 0), or a dict of such
            times per TopicPartition.
        newPartitionOffsets: Where partitions found while running start: ``earliest``
            (default) or ``latest``.

    Raises:
        ConfigurationError: Bad parameters, offsets or starting timestamps (a bool, a
            negative number such as Kafka's -1 / -2, a non-int; keys not TopicPartition).
    """

    #: Whether the driver consumer joins the consumer group (subscriptions do).
    usesGroupManagement = False

    def __init__(self, kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, *,
                 startingTimestamp: int | Mapping[TopicPartition, int] | None = None,
                 newPartitionOffsets: str = "earliest") -> None:
        self.kafkaParams = validate_params(kafkaParams, require_group=True)
        self.offsets = _offsets(offsets)
        self.startingTimestamp = _timestamps(startingTimestamp)
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

    @property
    def checkpointIdentity(self) -> str:
        """What the strategy reads, as text that is the same in every run.

        A checkpoint matches a direct stream's state by it (unless the stream is named), so
        it holds what selects the data, in a canonical order, and the group.id; not starting
        offsets or other settings. This default knows only the class and the group:
        override it in strategies of your own to add what they read.
        """
        return f"{type(self).__qualname__}(group={self.groupId!r})"

    def driverParams(self) -> dict[str, Any]:
        """What the driver consumer runs with: never committing or storing by itself."""
        params = dict(self.kafkaParams)
        force_param(params, "enable.auto.commit", False,
                    "the driver commits only what commitAsync is given", "driver")
        force_param(params, "enable.auto.offset.store", False,
                    "the driver never reads records", "driver")
        params.pop("auto.offset.reset", None)  # start offsets are decided explicitly
        if self.usesGroupManagement:
            # librdkafka finds new partitions of subscribed topics when it refreshes metadata
            # (new topics matching a SubscribePattern are found by listing topics each batch).
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

    def _partitionsOf(self, counts: Mapping[str, int]) -> set[TopicPartition]:
        """Every partition of the topics ``counts`` gives partition counts of.

        Asked every batch of a listing that rarely changes: the partitions are built once
        for the counts (a thousand TopicPartitions a batch otherwise) and given again while
        the counts stay the same; a topic added, grown or gone builds them anew at once.
        """
        listed: tuple[dict[str, int], frozenset[TopicPartition]] | None = \
            getattr(self, "_listed", None)
        if listed is None or listed[0] != counts:
            listed = (dict(counts), frozenset(TopicPartition(topic, partition)
                                              for topic, count in counts.items()
                                              for partition in range(count)))
            self._listed = listed
        return set(listed[1])

    def canRead(self, tp: TopicPartition) -> bool:
        """Whether the strategy can ever give the stream ``tp`` (True when it cannot tell).

        A checkpoint's ranges are checked with it before a recovered stream replays them.
        """
        return True


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
        return self._partitionsOf(driver.partitionsOf(self.topics))

    def canRead(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is of one of the topics."""
        return tp.topic in self.topics

    @property
    def checkpointIdentity(self) -> str:
        """The topics (sorted, without repeats) and the group.

        Whether the group manages the partitions is left out: either way the same
        partitions are read.
        """
        return f"Subscribe(topics={sorted(set(self.topics))!r}, group={self.groupId!r})"

    def __repr__(self) -> str:
        return f"Subscribe({self.topics!r}, group={self.groupId!r})"


class SubscribePattern(ConsumerStrategy):
    r"""Subscribe to every topic whose name matches a regular expression (new ones too).

    One dialect in both modes: Python's ``re``, matched against the whole topic name
    (``re.fullmatch``: ``a|b`` reads ``a`` and ``b``, never ``a-archive``; ``pat\d`` reads
    ``pat1``, never ``patd``). Kafka's internal topics (``__consumer_offsets``,
    ``__transaction_state``) never match. The pattern is never handed to librdkafka, whose
    POSIX dialect differs: the driver lists the cluster's topics, matches them itself and
    subscribes to the names that match.

    New matching topics are picked up at the next batch in both modes: every batch lists the
    cluster's topics again. With group management a changed list is subscribed anew (the
    group rebalances and assigns the new topic's partitions, which start at
    ``newPartitionOffsets``); without it the new topic's partitions are read at once. A
    topic created between batches is thus found within one batch interval (plus the
    rebalance, with the group).

    Args:
        pattern: A regular expression: a ``str``, or a compiled ``re.Pattern[str]`` whose
            flags are kept.
        kafkaParams: See :class:`ConsumerStrategy`.
        offsets: See :class:`ConsumerStrategy`.
        groupManagement: See :class:`Subscribe`.

    Raises:
        ConfigurationError: The pattern is empty, not text, or does not compile.
    """

    def __init__(self, pattern: str | re.Pattern[str], kafkaParams: Mapping[str, Any],
                 offsets: Mapping[TopicPartition, int] | None = None, *,
                 groupManagement: bool = True, **options: Any) -> None:
        self.usesGroupManagement = bool(groupManagement)
        text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        if not isinstance(text, str) or not text:
            raise ConfigurationError(f"SubscribePattern needs a regular expression (text), "
                                     f"got {pattern!r}")
        try:
            self.pattern = pattern if isinstance(pattern, re.Pattern) else re.compile(text)
        except re.error as error:
            raise ConfigurationError(f"SubscribePattern: {text!r} is not a valid regular "
                                     f"expression: {error}") from error
        #: The topic names the driver consumer is subscribed to (group management only).
        self._subscribed: list[str] = []
        super().__init__(kafkaParams, offsets, **options)

    def onStart(self, driver: DriverConsumer) -> None:
        """Join the group for the topics that match now (if any)."""
        self._subscribed = []  # a new driver consumer holds no subscription yet
        if self.usesGroupManagement:
            self._follow(driver)

    def topicPartitions(self, driver: DriverConsumer) -> set[TopicPartition]:
        """The group's current assignment (or every partition of the matching topics).

        With group management, first subscribes anew when the matching topics changed.
        """
        if self.usesGroupManagement:
            self._follow(driver)
            return driver.assignment()
        return self._partitionsOf(driver.topicsMatching(self._matches))

    def _follow(self, driver: DriverConsumer) -> None:
        matching = sorted(driver.topicsMatching(self._matches))
        if matching == self._subscribed:
            return  # a new subscription means a rebalance: only when something changed
        if matching:
            logger.info("%r subscribes to %s", self, matching)
            driver.subscribe(matching)
        else:
            logger.warning("%r: no topic matches any longer", self)
            driver.unsubscribe()
        self._subscribed = matching

    def _matches(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None

    def canRead(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s topic matches the pattern."""
        return self._matches(tp.topic)

    @property
    def checkpointIdentity(self) -> str:
        """The regular expression's text, its flags (if any besides the default), the group."""
        flags = self.pattern.flags & ~re.UNICODE
        shown = f", flags={flags}" if flags else ""
        return (f"SubscribePattern(pattern={self.pattern.pattern!r}{shown}, "
                f"group={self.groupId!r})")

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

    def canRead(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is one of the assigned partitions."""
        return tp in self.partitions

    @property
    def checkpointIdentity(self) -> str:
        """The partitions (sorted) and the group."""
        partitions = [str(tp) for tp in sorted(self.partitions)]
        return f"Assign(partitions={partitions!r}, group={self.groupId!r})"

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
