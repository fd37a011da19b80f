"""Whether a range's partition is gone: said by the cluster for a grace, then confirmed.

A range whose partition the cluster does not have (its topic deleted after the range was
planned, a partition beyond the topic's count) can never be read, and librdkafka itself only
fetches nothing: the executor readers fail it with an :class:`UnknownTopicOrPartitionError`
naming the range, long before the poll timeout. Not at the first sign, though: a topic just
created may be unknown for a moment to the broker asked. The rule (:class:`AbsenceCheck`):

* A sign that the partition does not exist (a metadata answer without it, a watermarks
  question failing with one of :data:`ABSENT_CODES`) starts a grace of
  :data:`ABSENT_GRACE_S`; an answer that it exists ends the grace.
* Once the grace is over (or the range's poll timeout is up), the partition count of its
  topic is asked afresh: a count without the partition raises, naming what the cluster
  said (no such topic, or partitions ``0..n-1``); one with it ends the grace; no answer
  starts the grace again, leaving the read to its poll timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka_direct.errors import UnknownTopicOrPartitionError

__all__ = ["ABSENT_CODES", "ABSENT_GRACE_S", "AbsenceCheck", "missing_partition", "partition_count"]

logger = logging.getLogger(__name__)

#: How long the cluster must keep saying that a range's partition does not exist before the
#: read fails (then once more, asked afresh): a topic just created may be unknown for a
#: moment to the broker asked, a deleted one stays unknown.
ABSENT_GRACE_S = 1.0
#: Longest wait for the answer confirming that a partition does not exist.
_CONFIRM_TIMEOUT_S = 2.0
#: librdkafka's codes (its C values, which the native reader reports too) for "no such
#: topic or partition": the broker's UNKNOWN_TOPIC_OR_PART and UNKNOWN_TOPIC_ID, the
#: client's _UNKNOWN_TOPIC and _UNKNOWN_PARTITION (from its metadata).
ABSENT_CODES = frozenset({3, 100, -188, -190})


def partition_count(consumer: Any, topic: str, timeout: float) -> int:
    """How many partitions the cluster says ``topic`` has: 0 when it has no such topic.

    One metadata request of a confluent-kafka client. It never creates the topic: an
    executor's client does not allow it (``allow.auto.create.topics``, see
    :func:`~kafka_direct.client.params.executor_params`).

    Raises:
        KafkaException: No answer within ``timeout`` seconds.
        RuntimeError: The answer tells nothing of the topic's partitions (another error,
            such as a refused authorization).
    """
    from confluent_kafka import KafkaError

    described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if described is None:
        return 0
    error = described.error
    if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return 0
    if error is not None and not described.partitions:
        raise RuntimeError(f"the metadata of topic {topic} says: {error.str()}")
    return len(described.partitions)


def missing_partition(topic: str, partition: int, fromOffset: int, untilOffset: int,
                      count: int | None, cause: str = "") -> UnknownTopicOrPartitionError:
    """The error of a range whose partition the cluster does not have.

    Args:
        topic: The range's topic.
        partition: The range's partition.
        fromOffset: The range's start.
        untilOffset: The range's end.
        count: The topic's partition count as the cluster said (0: no such topic),
            None when not asked.
        cause: What librdkafka said, when it did.
    """
    where = (f"so the range [{fromOffset}, {untilOffset}) of {topic}-{partition} cannot be "
             "read")
    if count == 0:
        what = (f"topic {topic!r} does not exist on the cluster, {where}: the topic was "
                "deleted after the range was planned, or never existed")
    elif count is not None:
        what = (f"topic {topic!r} has partitions 0..{count - 1}, not {partition}, {where}: "
                "the topic was deleted and created again with fewer partitions after the "
                "range was planned, or never had it")
    else:
        what = f"{topic}-{partition} does not exist on the cluster ({cause}), {where}"
    return UnknownTopicOrPartitionError(
        f"{what}. Check the subscription (topic names) and the ranges' partitions, and "
        "restart from a stored position that exists: offsets stored for a deleted "
        "topic do not apply to a topic created again under its name",
        topic=topic, partition=partition, fromOffset=fromOffset, untilOffset=untilOffset)


class AbsenceCheck:
    """The grace of one consumer's current range, since the cluster first said it is gone.

    Args:
        count: Asks the partition count of the consumer's topic now, within a timeout in
            seconds (see :func:`partition_count`).
    """

    __slots__ = ("_count", "since")

    def __init__(self, count: Callable[[float], int]) -> None:
        self._count = count
        #: When the cluster first said, during the current range, that its partition does
        #: not exist (None: it has not, or has said since that it does).
        self.since: float | None = None

    def reset(self) -> None:
        """A range starts, or the cluster said its partition exists: no grace under way."""
        self.since = None

    def noticed(self) -> None:
        """The cluster said the partition does not exist: the grace starts, unless it has."""
        if self.since is None:
            self.since = time.monotonic()

    def check(self, topic: str, partition: int, fromOffset: int, untilOffset: int,
              final: bool) -> None:
        """The cluster said the partition does not exist: raise once that is sure.

        Sure when it has said so for :data:`ABSENT_GRACE_S` (or the poll timeout is up:
        ``final``) and a metadata question asked now confirms it. The question that
        finds the partition (its metadata had not reached the broker asked) ends the
        grace; one that fails (no answer) starts it again.

        Raises:
            UnknownTopicOrPartitionError: The cluster confirms it has no such partition.
        """
        now = time.monotonic()
        self.noticed()
        if not final and now - (self.since or now) < ABSENT_GRACE_S:
            return
        try:
            count = self._count(_CONFIRM_TIMEOUT_S)
        except Exception as error:  # no answer: not known to be missing
            logger.debug("asking whether %s-%d exists failed: %s", topic, partition, error)
            self.since = time.monotonic()
            return
        if partition < count:
            self.since = None
            return
        raise missing_partition(topic, partition, fromOffset, untilOffset, count)
