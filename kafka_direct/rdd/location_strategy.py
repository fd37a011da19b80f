"""LocationStrategies: which executor should read which topic-partition.

Placement matters because executors cache one consumer per topic-partition: reading a
partition on the same executor batch after batch reuses its consumer, connection and
prefetched records. A strategy turns ranges plus the live executors into Spark preferred
locations (``executor_<host>_<id>``, the form Spark's scheduler treats as process-local).

Only live executors are ever named. A preference for a host without an executor helps
nobody and, in local mode with a locality wait, can stall a job (SPARK-4939).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = [
    "ExecutorLocation",
    "LocationStrategies",
    "LocationStrategy",
    "PreferBrokers",
    "PreferConsistent",
    "PreferFixed",
    "preferred_locations",
]


@dataclass(frozen=True, slots=True, order=True)
class ExecutorLocation:
    """A live executor: its host and executor id."""

    host: str
    executorId: str

    def taskLocation(self) -> str:
        """Spark's executor-cache task location string for this executor."""
        return f"executor_{self.host}_{self.executorId}"


class LocationStrategy:
    """Base of the placement strategies; use the :class:`LocationStrategies` factories."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)


class PreferConsistent(LocationStrategy):
    """Spread topic-partitions evenly and stably over the live executors.

    The executor for a partition is chosen by the partition's stable hash among the executors
    sorted by host and id, so it stays the same from batch to batch while executors do.
    """

    __slots__ = ()


class PreferBrokers(LocationStrategy):
    """Read each partition on an executor running on its leader broker's host.

    Only useful when executors run on the Kafka brokers' machines. It needs the partition
    leaders, which the direct stream's driver consumer knows; ``KafkaUtils.createRDD`` has no
    driver consumer and rejects it (as Spark does): use :meth:`LocationStrategies.PreferFixed`
    with a host map there.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=True)
class PreferFixed(LocationStrategy):
    """Read the mapped topic-partitions on the given hosts; the rest as PreferConsistent.

    A mapped host with no live executor is ignored for that partition (it falls back to
    PreferConsistent) rather than named, since naming a dead host can only delay the task.

    Args:
        hostMap: Topic-partition -> host name (as executors report their host).
    """

    hostMap: Mapping[TopicPartition, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.hostMap, Mapping):
            raise ConfigurationError(
                "PreferFixed takes a dict {TopicPartition: host}, got "
                f"{type(self.hostMap).__name__}"
            )
        for tp, host in self.hostMap.items():
            if not isinstance(tp, TopicPartition):
                raise ConfigurationError(
                    f"PreferFixed keys must be TopicPartition, got {tp!r}; "
                    "use TopicPartition(topic, partition)"
                )
            if not isinstance(host, str) or not host:
                raise ConfigurationError(
                    f"PreferFixed host for {tp} must be a non-empty string, got {host!r}",
                    topic=tp.topic,
                    partition=tp.partition,
                )
        object.__setattr__(self, "hostMap", MappingProxyType(dict(self.hostMap)))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.hostMap.items())))

    def __repr__(self) -> str:
        return f"PreferFixed({dict(self.hostMap)!r})"


class LocationStrategies:
    """Factories of location strategies, named as in Spark's Scala API."""

    @staticmethod
    def PreferConsistent() -> LocationStrategy:
        """Spread partitions evenly and stably over executors (the usual choice)."""
        return PreferConsistent()

    @staticmethod
    def PreferBrokers() -> LocationStrategy:
        """Prefer executors on the partition leaders' hosts (streams only)."""
        return PreferBrokers()

    @staticmethod
    def PreferFixed(hostMap: Mapping[TopicPartition, str]) -> LocationStrategy:
        """Prefer the given host per topic-partition; others as PreferConsistent."""
        return PreferFixed(hostMap)


def _consistent(tp: TopicPartition, executors: Sequence[ExecutorLocation]) -> list[str]:
    if not executors:
        return []
    return [executors[tp.stableHash() % len(executors)].taskLocation()]


def preferred_locations(
    strategy: LocationStrategy,
    topicPartitions: Sequence[TopicPartition],
    executors: Sequence[ExecutorLocation],
    leaders: Mapping[TopicPartition, str] | None = None,
) -> list[list[str]]:
    """Preferred task locations for each topic-partition, in the order given.

    Args:
        strategy: The location strategy.
        topicPartitions: One entry per Spark partition.
        executors: The live executors (the driver excluded). None live -> no preferences.
        leaders: Leader host per topic-partition; required for PreferBrokers.

    Returns:
        For each topic-partition, a list of zero or one Spark task location strings.

    Raises:
        ConfigurationError: PreferBrokers without leader information.
    """
    live = sorted(set(executors))
    if isinstance(strategy, PreferBrokers):
        if leaders is None:
            raise ConfigurationError(
                "PreferBrokers needs the partition leaders, which only the direct stream's "
                "driver consumer knows; for KafkaUtils.createRDD use "
                "LocationStrategies.PreferFixed({TopicPartition(...): host}) or "
                "PreferConsistent()"
            )
        hostMap: Mapping[TopicPartition, str] = leaders
    elif isinstance(strategy, PreferFixed):
        hostMap = strategy.hostMap
    elif isinstance(strategy, PreferConsistent):
        hostMap = {}
    else:
        raise ConfigurationError(
            f"unknown location strategy {strategy!r}; use LocationStrategies.PreferConsistent(), "
            "PreferBrokers() or PreferFixed(hostMap)"
        )
    result = []
    for tp in topicPartitions:
        host = hostMap.get(tp)
        on_host = [e for e in live if e.host == host] if host is not None else []
        result.append(_consistent(tp, on_host or live))
    return result
