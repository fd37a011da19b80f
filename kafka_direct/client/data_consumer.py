"""Executor-side consumers: one per topic-partition, reading one range at a time.

A :class:`KafkaDataConsumer` reads exactly the records of ``[fromOffset, untilOffset)`` of
one partition: it assigns the partition at ``fromOffset`` and unassigns it at the end (an
idle consumer must not keep fetching). Two client calls a range, whichever partition the
next range reads: the cache of a Python worker's consumers
(:mod:`kafka_direct.client.cached_consumers`) hands an idle consumer over to another
partition for nothing.

Contract of :meth:`KafkaDataConsumer.read`:

* Records come in offset order, each with ``fromOffset <= offset < untilOffset``.
* Offsets without a record (transaction markers, aborted transactions under
  ``read_committed``, compaction) are skipped silently. The range is done when the
  consumer's *position* reaches ``untilOffset``, not when offset ``untilOffset - 1`` is seen.
* A retried task (attempt > 0) never reuses a cached consumer: it starts from a fresh one
  (see :mod:`kafka_direct.client.cached_consumers`).
* A partition the cluster does not have (its topic deleted after the range was planned, a
  partition beyond the topic's count) is an :class:`UnknownTopicOrPartitionError` naming
  the range, raised once the cluster has said so for a grace and confirmed it, long before
  the poll timeout: librdkafka itself only fetches nothing. A topic missing for a moment
  (just created, its metadata not everywhere yet) is read as any other. The rule lives in
  :mod:`kafka_direct.client.absent_partitions`.
* A user's callbacks in the parameters are called one at a time in a Python worker, by
  whichever of its consumers (see :mod:`kafka_direct.client.callbacks`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kafka_direct.client.absent_partitions import (
    ABSENT_CODES,
    AbsenceCheck,
    missing_partition,
    partition_count,
)
from kafka_direct.client.callbacks import WORKER_CALLBACKS, one_at_a_time
from kafka_direct.client.error_codes import error_code
from kafka_direct.errors import (
    DataLossError,
    KafkaReadError,
    OffsetOutOfRangeError,
    PollTimeoutError,
)

__all__ = ["KafkaDataConsumer", "learn_topics", "partition_count"]

logger = logging.getLogger(__name__)

ConsumerFactory = Callable[[dict[str, Any]], Any]

#: How long one ``consume`` call may wait before the loop checks the consumer position.
_POLL_SLICE_S = 0.1
#: Most records taken from librdkafka in one call; bounds the task's memory.
MAX_BATCH = 5000
#: Longest wait for a topic's metadata before a consumer's first range of it: never longer
#: than librdkafka's own scan of unknown topics (once a second) would have made it wait.
_LEARN_TIMEOUT_S = 1.0


def _confluent_consumer(params: dict[str, Any]) -> Any:
    """A confluent-kafka consumer whose callbacks hold the worker's one callback lock."""
    from confluent_kafka import Consumer

    return Consumer(one_at_a_time(params, WORKER_CALLBACKS))


def learn_topics(ask: Callable[[str, float], bool], topics: Iterable[str],
                 known: frozenset[str], timeout: float = _LEARN_TIMEOUT_S) -> frozenset[str]:
    """Ask a consumer for the metadata of ``topics`` before it assigns them.

    librdkafka learns a topic first named in an assignment only at its once-a-second scan
    of unknown topics: a reused consumer's first fetch of a new topic waited up to a
    second (0.3-1 s measured). One metadata request per topic it has not met instead, all
    within ``timeout`` together; the first that fails ends the questions (a broker that
    does not answer one will not answer the next), leaving the rest to the scan, as
    before: the fetch reports what is wrong. A topic the cluster says it does not have is
    not learnt (asked again next time); the questions go on.

    Args:
        ask: Asks a topic's metadata within a timeout in seconds: whether the cluster has
            the topic (raises when the question fails).
        topics: The topics it is about to assign.
        known: The topics whose metadata it has.
        timeout: Longest time all the questions take (seconds).

    Returns:
        ``known`` with the topics learnt.
    """
    learnt = set(known)
    deadline = time.monotonic() + timeout
    for topic in topics:
        if topic in learnt:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            exists = ask(topic, left)
        except Exception as error:  # the fetch reports what is wrong; the scan retries
            logger.debug("asking the metadata of topic %s failed: %s", topic, error)
            break
        if exists:
            learnt.add(topic)
    return frozenset(learnt)


class KafkaDataConsumer:
    """A confluent-kafka consumer of one topic-partition, assigned while it reads a range.

    Args:
        topic: Topic to read.
        partition: Partition to read.
        params: Executor Kafka parameters (see :func:`kafka_params.executor_params`).
        factory: Builds the underlying consumer from ``params`` (injectable for tests).
    """

    def __init__(self, topic: str, partition: int, params: Mapping[str, Any],
                 factory: ConsumerFactory = _confluent_consumer) -> None:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        self.topic = topic
        self.partition = partition
        self._params = dict(params)
        self._tp = KafkaTopicPartition
        self._consumer = factory(self._params)
        self._assigned = False
        # The topics whose metadata this client has (see _begin): the first one it was made
        # for, whose metadata its first connection asks for.
        self._known = frozenset([topic])
        # Whether the current range's partition is gone (see absent_partitions).
        self._absence = AbsenceCheck(self._partition_count)
        self.closed = False

    def _begin(self, offset: int, pollTimeoutMs: int) -> None:
        """Start a range: its partition assigned at ``offset``, its topic's leader known.

        The first time this consumer meets a topic, its metadata is asked first
        (:func:`learn_topics`), within the range's poll timeout: else its first fetch
        waited up to a second. Whether or not the question was answered, a range of the
        topic read to its end means the client has the topic's metadata (:meth:`_finish`).
        """
        self._absence.reset()
        if self.topic not in self._known:
            self._known = self._learn(self._known, min(_LEARN_TIMEOUT_S, pollTimeoutMs / 1000))
        self._assign(offset)

    def _learn(self, known: frozenset[str], timeout: float) -> frozenset[str]:
        """``known`` and this consumer's topic, its metadata asked (see :func:`learn_topics`)."""
        return learn_topics(self._ask_metadata, [self.topic], known, timeout)

    def _ask_metadata(self, topic: str, timeout: float) -> bool:
        """Whether the cluster has ``topic`` (its metadata now known to the client).

        An answer that it or this consumer's partition does not exist starts the grace
        of the absence rule (:class:`~kafka_direct.client.absent_partitions.AbsenceCheck`).
        """
        count = partition_count(self._consumer, topic, timeout)
        if topic == self.topic and self.partition >= count:
            self._absence.noticed()
        return count > 0

    def _partition_count(self, timeout: float) -> int:
        """The partition count of this consumer's topic, asked of the cluster now."""
        return partition_count(self._consumer, self.topic, timeout)

    def _assign(self, offset: int) -> None:
        """Read this partition from ``offset`` (replacing whatever was assigned)."""
        self._consumer.assign([self._tp(self.topic, self.partition, offset)])
        self._assigned = True

    def _unassign(self) -> None:
        self._consumer.unassign()
        self._assigned = False

    def _switch(self, topic: str, partition: int) -> None:
        """Make ``topic``-``partition`` the one :meth:`_assign` assigns (nothing assigned)."""

    def _finish(self) -> None:
        """After a range: unassign the partition, so that the idle consumer fetches nothing.

        Dozens of idle cached consumers fetching past their ranges slow every other read
        down. Unassigning costs one client call, as a pause would, and leaves nothing to
        undo: the next range of any partition is one assignment at its start (a paused
        partition had to be resumed first, and unassigned before a hand-over: four calls
        a range instead of two).
        """
        self._known |= {self.topic}
        self._unassign()

    def retarget(self, topic: str, partition: int) -> None:
        """Read ``topic``-``partition`` from now on (the cache's hand-over of an idle consumer).

        An idle consumer has nothing assigned (each range ends by unassigning); the next
        range assigns the new partition. Costs a fraction of a new consumer (no threads
        started, no connections made).

        Raises:
            RuntimeError: The consumer is closed.
        """
        if self.closed:
            raise RuntimeError(f"the consumer of {self.topic}-{self.partition} is closed")
        if self._assigned:
            self._unassign()
        self._switch(topic, partition)
        self.topic, self.partition = topic, partition

    def _watermarks(self, timeout: float = 10.0) -> tuple[int, int]:
        low, high = self._consumer.get_watermark_offsets(
            self._tp(self.topic, self.partition), timeout=timeout, cached=False)
        return int(low), int(high)

    def _position(self) -> int:
        positions = self._consumer.position([self._tp(self.topic, self.partition)])
        return int(positions[0].offset) if positions else -1

    def _context(self, fromOffset: int, untilOffset: int) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "fromOffset": fromOffset, "untilOffset": untilOffset}

    def read(self, fromOffset: int, untilOffset: int, pollTimeoutMs: int,
             failOnDataLoss: bool = True) -> Iterator[Any]:
        """Yield the raw confluent-kafka messages of ``[fromOffset, untilOffset)``.

        The same as :meth:`read_batches`, one message at a time.
        """
        for batch in self.read_batches(fromOffset, untilOffset, pollTimeoutMs, failOnDataLoss):
            yield from batch

    def read_batches(self, fromOffset: int, untilOffset: int, pollTimeoutMs: int,
                     failOnDataLoss: bool = True) -> Iterator[list[Any]]:
        """Yield the raw confluent-kafka messages of ``[fromOffset, untilOffset)`` in lists.

        Raises:
            DataLossError: Offsets of the range are below the log start (deleted), and
                ``failOnDataLoss`` is true. Otherwise a warning is logged and reading goes
                on from the log start.
            OffsetOutOfRangeError: The range ends beyond the log end, and ``failOnDataLoss``
                is true. Otherwise (a log that shrank since the range was planned: a
                re-created topic, a truncation) a warning is logged and the range ends with
                what exists.
            PollTimeoutError: No progress for ``pollTimeoutMs`` milliseconds.
            UnknownTopicOrPartitionError: The partition does not exist (its topic deleted
                since the range was planned, a partition beyond the topic's count): raised
                within about two seconds of the range's start (see
                :class:`~kafka_direct.client.absent_partitions.AbsenceCheck`), or
                at the poll timeout when that is shorter.
        """
        if fromOffset >= untilOffset:
            return
        last_progress = time.monotonic()  # the metadata question counts in the poll timeout
        self._begin(fromOffset, pollTimeoutMs)
        position = fromOffset
        while position < untilOffset:
            wanted = max(1, min(MAX_BATCH, untilOffset - position))
            batch = self._consumer.consume(wanted, _POLL_SLICE_S)
            progressed = False
            if batch and self._plain(batch, position, untilOffset) and self._own(batch[0]):
                # The common case, without per-record Python work: one partition's offsets
                # only grow, so first and last inside the range means all are.
                position = batch[-1].offset() + 1
                progressed = True
                yield batch
            elif batch:
                accepted: list[Any] = []
                for message in batch:
                    if not self._own(message):
                        continue  # queued before a retarget (librdkafka drops these too)
                    error = message.error()
                    if error is not None:
                        restart = self._on_error(error, position, fromOffset, untilOffset,
                                                 failOnDataLoss)
                        if restart is None:
                            continue
                        position = restart
                        progressed = True
                        break
                    offset = message.offset()
                    if offset < position:
                        continue  # a stale record from before a reassignment
                    if offset >= untilOffset:
                        # Past the range (the records between were compacted away); the
                        # next range seeks to its own start anyway.
                        position = untilOffset
                        break
                    position = offset + 1
                    progressed = True
                    accepted.append(message)
                if accepted:
                    yield accepted
            if position >= untilOffset:
                break
            if not batch:
                consumer_position = self._position()
                if consumer_position > position:
                    position = min(consumer_position, untilOffset)
                    progressed = True
                    continue
            if progressed:
                last_progress = time.monotonic()
            elif self._check_stalled(position, fromOffset, untilOffset, pollTimeoutMs,
                                     last_progress, failOnDataLoss):
                break
        self._finish()

    @staticmethod
    def _plain(batch: list[Any], position: int, untilOffset: int) -> bool:
        """Whether every message of the batch is a record inside ``[position, untilOffset)``."""
        for message in batch:
            if message.error() is not None:
                return False
        return bool(batch[0].offset() >= position and batch[-1].offset() < untilOffset)

    def _own(self, message: Any) -> bool:
        """Whether ``message`` is of this consumer's partition, or of none (an event).

        Messages of a partition come in order after those queued before a retarget, so the
        first message of a batch answers for the batch.
        """
        partition = message.partition()
        return partition is None or partition < 0 or (
            partition == self.partition and message.topic() == self.topic)

    def _on_error(self, error: Any, position: int, fromOffset: int, untilOffset: int,
                  failOnDataLoss: bool) -> int | None:
        from confluent_kafka import KafkaError

        code = error.code()
        context = self._context(fromOffset, untilOffset)
        if code == KafkaError._PARTITION_EOF:
            return None
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            low, high = self._watermarks()
            if position < low:
                if failOnDataLoss:
                    raise DataLossError(
                        f"offsets [{position}, {min(low, untilOffset)}) of {self.topic}-"
                        f"{self.partition} are gone: the log now starts at {low} (retention "
                        f"or delete_records removed them) while reading [{fromOffset}, "
                        f"{untilOffset}). Set failOnDataLoss=False (KafkaRDD's and the direct "
                        "stream's read setting; the option failOnDataLoss=false of the "
                        "kafka-direct source, or of the sink reading its offset ranges) to "
                        "skip to the earliest offset with a warning, or restart from offsets "
                        "that still exist",
                        logStartOffset=low, **context)
                logger.warning(
                    "data loss on %s-%d: offsets [%d, %d) were deleted; reading on from %d "
                    "(failOnDataLoss=False)", self.topic, self.partition, position,
                    min(low, untilOffset), min(low, untilOffset))
                if low >= untilOffset:
                    return untilOffset
                self._assign(low)
                return low
            if position >= high and not failOnDataLoss:
                self._warn_beyond(position, untilOffset, high)
                return untilOffset
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition} has no offset {position}: the log holds "
                f"[{low}, {high}) but the range is [{fromOffset}, {untilOffset})",
                logStartOffset=low, logEndOffset=high, **context)
        if code in ABSENT_CODES:
            raise missing_partition(self.topic, self.partition, fromOffset, untilOffset, None,
                                    error.str())
        if error.fatal():
            raise KafkaReadError(
                f"fatal Kafka error reading {self.topic}-{self.partition} "
                f"[{fromOffset}, {untilOffset}): {error.str()}", **context)
        logger.warning("Kafka error reading %s-%d (will retry until the poll timeout): %s",
                       self.topic, self.partition, error.str())
        return None

    def _warn_beyond(self, position: int, untilOffset: int, high: int) -> None:
        logger.warning(
            "data loss on %s-%d: offsets [%d, %d) of %s-%d do not exist, the log now ends at "
            "%d (truncated, or its topic re-created, since the range was planned); the range "
            "ends with what exists (failOnDataLoss=False)", self.topic, self.partition,
            position, untilOffset, self.topic, self.partition, high)

    def _check_stalled(self, position: int, fromOffset: int, untilOffset: int,
                       pollTimeoutMs: int, last_progress: float,
                       failOnDataLoss: bool = True) -> bool:
        """Fail a read that makes no progress; True when the range ends here instead.

        It ends here when the log now ends at or below the position and ``failOnDataLoss``
        is false: the rest of the range no longer exists.
        """
        waited_ms = (time.monotonic() - last_progress) * 1000.0
        context = self._context(fromOffset, untilOffset)
        if waited_ms >= min(1000.0, pollTimeoutMs):
            try:
                low, high = self._watermarks(
                    timeout=max(0.5, (pollTimeoutMs - waited_ms) / 1000.0))
            except Exception as error:
                logger.debug("cannot read watermarks of %s-%d: %s",
                             self.topic, self.partition, error)
                if error_code(error) in ABSENT_CODES:
                    # librdkafka fetches nothing of a partition it does not find, and
                    # reports nothing either: this answer is the only sign.
                    self._absence.check(self.topic, self.partition, fromOffset, untilOffset,
                                        waited_ms >= pollTimeoutMs)
                low, high = -1, untilOffset
            else:
                self._absence.reset()
            if high <= position < untilOffset:
                if not failOnDataLoss:
                    self._warn_beyond(position, untilOffset, high)
                    return True
                raise OffsetOutOfRangeError(
                    f"range [{fromOffset}, {untilOffset}) of {self.topic}-{self.partition} "
                    f"ends beyond the log end {high}; ask only for offsets below the end "
                    "offset (high watermark)", logStartOffset=low, logEndOffset=high,
                    **context)
        if waited_ms >= pollTimeoutMs:
            raise PollTimeoutError(
                f"no progress reading {self.topic}-{self.partition} [{fromOffset}, "
                f"{untilOffset}) at offset {position} for {pollTimeoutMs} ms (an open "
                "transaction holding back read_committed, or an unreachable broker?); raise "
                "spark.streaming.kafka.consumer.poll.ms if the cluster is just slow",
                position=position, timeoutMs=pollTimeoutMs, **context)
        return False

    def close(self) -> None:
        """Close the underlying consumer; the object cannot read afterwards."""
        if not self.closed:
            self.closed = True
            try:
                self._consumer.close()
            except Exception as error:
                logger.debug("closing consumer of %s-%d failed: %s",
                             self.topic, self.partition, error)
