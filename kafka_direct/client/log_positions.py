"""Where a direct stream stands against a partition's log: truncation, re-creation, data loss.

A stream's position in a partition (the next offset to read) is always an end offset it saw
before, or a start offset checked against one. Neither the high watermark nor the last
stable offset (the end under ``read_committed``) of a live log moves backwards, so an end
offset below the position means the log lost offsets the stream had read: it was truncated
(an unclean leader election) or its topic deleted and re-created. Waiting until the new log
passes the old position would skip the new log's first records without a word.

Only under ``read_committed`` can an end sit below a position that still exists: a position
another run read under ``read_uncommitted``, held back by an open transaction. It is at or
below the high watermark, and there (only there) the stream waits. A re-created topic whose
new log already grew past the old position cannot be told apart from the old log by offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import DataLossError
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.client.driver_consumer import DriverConsumer

__all__ = ["check_positions"]

logger = logging.getLogger(__name__)

Retrying = Callable[[str, Callable[[], Any]], Any]


def check_positions(name: str, ends: Mapping[TopicPartition, int],
                    positions: dict[TopicPartition, int], driver: DriverConsumer,
                    failOnDataLoss: bool, retrying: Retrying) -> dict[TopicPartition, int]:
    """The ends a batch may read to; moves positions that a log no longer has.

    Args:
        name: The stream's name, for log lines and errors.
        ends: End offsets of the partitions read this batch (the driver consumer's).
        positions: The stream's positions (next offsets to read), changed in place where
            data was lost and ``failOnDataLoss`` is false: to the log start offset.
        driver: Reads log start offsets and, where it can, high watermarks.
        failOnDataLoss: Raise rather than warn and go on.
        retrying: Runs a Kafka question with the stream's retries.

    Returns:
        ``ends``, with a partition held back by an open transaction ending at its position.

    Raises:
        DataLossError: A log ends below the position (topic, partition, position,
            logStartOffset, logEndOffset), when ``failOnDataLoss``.
    """
    behind = {tp: end for tp, end in ends.items() if end < positions[tp]}
    checked = dict(ends)
    if behind and driver.readCommitted:
        high = _highWatermarks(driver, list(behind), retrying)
        for tp in [tp for tp in behind if high.get(tp, -1) >= positions[tp]]:
            logger.info("%s: %s waits at %d for an open transaction (stable end %d)", name,
                        tp, positions[tp], behind.pop(tp))
            checked[tp] = positions[tp]
    if not behind:
        return checked
    starts: dict[TopicPartition, int] = retrying(
        "reading log start offsets", lambda: driver.earliestOffsets(list(behind)))
    for tp, end in sorted(behind.items()):
        position, start = positions[tp], min(starts.get(tp, 0), end)
        if failOnDataLoss:
            raise DataLossError(
                f"{name}: the log of {tp} ends at {end}, below the stream's position "
                f"{position}: it was truncated or its topic re-created, and records were "
                "lost. Set spark.streaming.kafka.failOnDataLoss=false to go on from the log "
                f"start offset {start}", topic=tp.topic, partition=tp.partition,
                fromOffset=position, untilOffset=position, position=position,
                logStartOffset=start, logEndOffset=end)
        logger.warning("%s: the log of %s ends at %d, below the stream's position %d: it was "
                       "truncated or re-created (data lost); going on from its log start "
                       "offset %d", name, tp, end, position, start)
        positions[tp] = start
    return checked


def _highWatermarks(driver: DriverConsumer, partitions: list[TopicPartition],
                    retrying: Retrying) -> dict[TopicPartition, int]:
    # DriverConsumer.highWatermarks reads the high watermark beside the last stable offset
    # and so tells "held back" apart; a driver of other making without it cannot, and a
    # position past the end is then data loss (the safe answer).
    lookup = getattr(driver, "highWatermarks", None)
    if lookup is None:
        return {}
    found: dict[TopicPartition, int] = retrying("reading high watermarks",
                                                lambda: lookup(partitions))
    return found
