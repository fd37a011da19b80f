"""Where a direct stream's partitions start: at start, and when new partitions appear.

First match wins: the offsets given to the strategy, the group's committed offset, the
strategy's starting timestamp, then the reset policy (``auto.offset.reset`` at start,
``newPartitionOffsets`` for partitions found while running). Every start offset is checked
against the log: a given offset beyond the end is a mistake, a committed one beyond the end
means the log lost what the group read (data loss, see :mod:`kafka_direct.client.log_positions`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.log_positions import Retrying, check_positions
from kafka_direct.dstream.consumer_strategy import ConsumerStrategy
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["StartingOffsets", "StartingOffsetsCallback"]

logger = logging.getLogger(__name__)

StartingOffsetsCallback = Callable[[dict[TopicPartition, int]], None]


class StartingOffsets:
    """Chooses start offsets for one stream and tells its listeners.

    Args:
        name: The stream's name, for log lines and errors.
        strategy: Given offsets, timestamps and reset policies.
        retrying: Runs a Kafka question with the stream's retries.
        failOnDataLoss: A committed offset beyond the log end raises (else: log start).
    """

    def __init__(self, name: str, strategy: ConsumerStrategy, retrying: Retrying,
                 failOnDataLoss: bool) -> None:
        self.name = name
        self.strategy = strategy
        self.retrying = retrying
        self.failOnDataLoss = failOnDataLoss
        self.callbacks: list[StartingOffsetsCallback] = []

    def choose(self, driver: DriverConsumer, partitions: set[TopicPartition], new: bool
               ) -> dict[TopicPartition, int]:
        """The next offset to read of each of ``partitions``; listeners are told.

        Args:
            driver: Asks Kafka.
            partitions: Partitions without a position yet.
            new: Found while running (``newPartitionOffsets``), not at start.

        Raises:
            ConfigurationError: No offset applies and the policy is ``none``, or a given
                offset is beyond the log end.
            DataLossError: A committed offset is beyond the log end (``failOnDataLoss``).
        """
        if not partitions:
            return {}
        strategy = self.strategy
        chosen = {tp: strategy.offsets[tp] for tp in partitions if tp in strategy.offsets}
        rest = partitions - set(chosen)
        fromGroup: set[TopicPartition] = set()
        if rest:
            committed: dict[TopicPartition, int] = self.retrying(
                "reading committed offsets", lambda: driver.committed(rest))
            chosen.update(committed)
            fromGroup = set(committed)
        rest = partitions - set(chosen)
        timestamps = {tp: ts for tp in rest if (ts := strategy.timestampFor(tp)) is not None}
        if timestamps:
            chosen.update(self.retrying("looking offsets up by time",
                                        lambda: driver.offsetsForTimes(timestamps)))
        rest = partitions - set(chosen)
        policy = strategy.newPartitionOffsets if new else strategy.resetPolicy
        if rest and policy == "none":
            raise ConfigurationError(
                f"no committed offset for {sorted(str(tp) for tp in rest)} in group "
                f"{strategy.groupId!r} and auto.offset.reset is none; give offsets= or set "
                "auto.offset.reset to earliest or latest")
        if rest:
            lookup = driver.earliestOffsets if policy == "earliest" else driver.latestOffsets
            chosen.update(self.retrying(f"reading {policy} offsets", lambda: lookup(rest)))
            for tp in sorted(rest):
                logger.info("%s partition %s starts at its %s offset %d", self.name, tp,
                            policy, chosen[tp])
        self._checkWithinLog(driver, chosen, fromGroup)
        for callback in self.callbacks:
            callback(dict(chosen))
        return chosen

    def _checkWithinLog(self, driver: DriverConsumer, offsets: dict[TopicPartition, int],
                        fromGroup: set[TopicPartition]) -> None:
        """Start offsets must lie within the log; ``offsets`` may change (data loss).

        A given start offset beyond the end is a mistake (``ConfigurationError``); an
        offset the group committed beyond the end means the log lost what the group read:
        data loss, handled as for a running stream (:func:`check_positions`).
        """
        ends: dict[TopicPartition, int] = self.retrying(
            "reading end offsets", lambda: driver.latestOffsets(offsets))
        lost = {tp: ends[tp] for tp in fromGroup if offsets[tp] > ends.get(tp, offsets[tp])}
        if lost:
            check_positions(self.name, lost, offsets, driver, self.failOnDataLoss,
                            self.retrying)
        for tp, offset in offsets.items():
            if tp not in lost and offset > ends.get(tp, offset):
                raise ConfigurationError(
                    f"start offset {offset} of {tp} is beyond its end offset {ends[tp]}; "
                    "start at or below the end", topic=tp.topic, partition=tp.partition)
