"""Which partitions a direct stream reads this batch: new ones, missing ones, revoked ones.

The strategy answers from the cluster's metadata (or the group's assignment). With group
management an answer can be empty or partial for a moment while the group rebalances, so:

* at start the stream waits up to ``driverTimeoutMs`` for the group's first assignment;
* afterwards a batch waits (up to ``rebalanceWaitMs``) only while partitions it already reads
  are missing. With none to wait for (a pattern matching no topic, a topic without
  partitions yet) a batch never waits: it is empty, at once, and the next batch looks again.

A known partition missing from an answer keeps its position (a transient metadata gap, or a
deleted topic); one the group gave to another member stops the stream
(``PartitionsRevokedError``): two streams share a group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.dstream.consumer_strategy import ConsumerStrategy
from kafka_direct.errors import PartitionsRevokedError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["MonotonicClock", "PartitionDiscovery", "WaitClock"]

logger = logging.getLogger(__name__)

#: Between two looks at a settling assignment.
_POLL_INTERVAL_S = 0.05


class WaitClock(Protocol):
    """Seconds on a monotonic clock, and a way to let them pass (injectable for tests)."""

    def now(self) -> float:
        """The current time in seconds (monotonic)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        time.sleep(seconds)


class PartitionDiscovery:
    """Lists a stream's partitions each batch and tells what changed.

    Args:
        name: The stream's name, for log lines and errors.
        strategy: Which partitions.
        startWaitMs: Longest wait at start for a first (non-empty) assignment.
        rebalanceWaitMs: Longest wait in a batch for known partitions a rebalance hides.
        clock: Time and sleep (the real clock by default).
    """

    def __init__(self, name: str, strategy: ConsumerStrategy, startWaitMs: int,
                 rebalanceWaitMs: int, clock: WaitClock | None = None) -> None:
        self.name = name
        self.strategy = strategy
        self.startWaitMs = startWaitMs
        self.rebalanceWaitMs = rebalanceWaitMs
        self.clock: WaitClock = clock or MonotonicClock()
        #: Known partitions missing from the latest answer (their positions are kept).
        self.absent: set[TopicPartition] = set()

    def list(self, driver: DriverConsumer, known: set[TopicPartition], starting: bool
             ) -> set[TopicPartition]:
        """The partitions the stream reads now.

        Args:
            driver: Asks Kafka (or the group).
            known: Partitions the stream has positions for.
            starting: The stream is starting: wait for a first assignment.
        """
        partitions = self.strategy.topicPartitions(driver)
        if not self.strategy.usesGroupManagement:
            return partitions
        if starting:
            wait_ms, expected = self.startWaitMs, set[TopicPartition]()
        else:
            # Partitions already absent (their topic deleted) are not waited for again, and
            # with nothing expected there is nothing a rebalance could be hiding: the batch
            # is empty now rather than 30 s late (every batch, for a pattern matching nothing).
            wait_ms, expected = self.rebalanceWaitMs, known - self.absent
            if not expected:
                return partitions
        deadline = self.clock.now() + wait_ms / 1000.0
        while (not partitions or not expected <= partitions) and self.clock.now() < deadline:
            self.clock.sleep(_POLL_INTERVAL_S)
            partitions = self.strategy.topicPartitions(driver)
        if not partitions:
            logger.warning("group %s assigns no partition to %s", self.strategy.groupId,
                           self.name)
        return partitions

    def reconcile(self, driver: DriverConsumer, partitions: set[TopicPartition],
                  positions: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """Note known partitions gone or back; the partitions that are new.

        Args:
            driver: Asks Kafka whether a missing partition still exists.
            partitions: This batch's answer of :meth:`list`.
            positions: The stream's positions (next offsets to read).

        Returns:
            The partitions of ``partitions`` without a position: they need a start offset.

        Raises:
            PartitionsRevokedError: The group gave a partition that still exists to another
                member (another stream or consumer uses the group).
        """
        known = set(positions)
        lost = known - partitions
        if lost and self.strategy.usesGroupManagement:
            existing = driver.partitionsOf({tp.topic for tp in lost})
            taken = sorted(str(tp) for tp in lost
                           if tp.partition < existing.get(tp.topic, 0))
            if taken:
                raise PartitionsRevokedError(
                    f"partitions {taken} of {self.name} were taken away by a rebalance of "
                    f"consumer group {self.strategy.groupId!r}: another consumer (a second "
                    "stream?) joined the group. Each stream needs a group.id of its own",
                    group=self.strategy.groupId, partitions=taken)
        for tp in sorted(lost - self.absent):
            logger.warning("%s: %s is missing from the cluster's metadata; it keeps its "
                           "position %d and goes on from there if it comes back", self.name,
                           tp, positions[tp])
        for tp in sorted(self.absent & partitions):
            logger.info("%s: %s is back, at position %d", self.name, tp, positions[tp])
        self.absent = lost
        # A partition is new once: a known one that comes back goes on where it stood.
        return partitions - known
