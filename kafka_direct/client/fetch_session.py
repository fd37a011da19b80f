"""One consumer reading the ranges of many partitions at once: one fetch session for a task.

A task of the Structured Streaming source may hold the small ranges of hundreds of
partitions. Read one after the other, each range pays for an assignment, a first fetch (a
round trip, and up to ``fetch.wait.max.ms`` behind the previous partition's long poll), a
pause and a hand-over of the cached consumer: about a millisecond of CPU and often far more
of waiting, for a range of a few records. :class:`FetchSession` assigns every partition of
the task to one consumer at once, so the broker answers for all of them in the same fetches,
and sorts the records it receives into their ranges.

Contract of :meth:`FetchSession.read` (the same as
:meth:`~kafka_direct.client.data_consumer.KafkaDataConsumer.read_batches` per range):

* Each range's records come in offset order, each with ``fromOffset <= offset <
  untilOffset``; the ranges come in the order given, whatever order the broker answers in,
  so a retried task reads the same records in the same order.
* Offsets without a record (transaction markers, aborted transactions, compaction) are
  skipped; a range is done when its partition's position reaches ``untilOffset``.
* Anything else is left to the per-range reader, which decides it with its one set of rules
  (data loss, a log end below the range, a partition that does not exist, stalls): a
  partition that reports an error, or that made no progress for a while, leaves the session,
  and its range is handed back with the offset to resume from (:attr:`SessionRange.resumeAt`).
* A session's consumer is its own, created for the session and closed after it: a retried
  task never meets a consumer of the failed attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.client.data_consumer import _POLL_SLICE_S, MAX_BATCH, _confluent_consumer
from kafka_direct.offset_range import OffsetRange

__all__ = ["FetchSession", "SessionRange", "session_ranges"]

logger = logging.getLogger(__name__)

#: Longest wait without progress before the partitions still open leave the session for the
#: per-range reader (never longer than the poll timeout): it tells a stall, a log that ends
#: below the range and a slow broker apart, with its watermark questions.
_HAND_BACK_MS = 2000


@dataclass(frozen=True, slots=True)
class SessionRange:
    """What the session read of one range.

    Attributes:
        offsetRange: The range, as given.
        messages: Its records read in the session, in offset order (confluent-kafka
            messages).
        resumeAt: None when the range is complete; otherwise the offset from which the
            per-range reader must read the rest (``[resumeAt, untilOffset)``).
    """

    offsetRange: OffsetRange
    messages: list[Any]
    resumeAt: int | None = None


def session_ranges(ranges: Sequence[OffsetRange]) -> bool:
    """Whether ``ranges`` can share a session: several, non-empty, one per partition."""
    seen = {(r.topic, r.partition) for r in ranges}
    return len(ranges) > 1 and len(seen) == len(ranges) and all(
        r.count() > 0 for r in ranges)


class _Open:
    """A range the session is reading: where its partition stands."""

    __slots__ = ("index", "messages", "position", "until")

    def __init__(self, index: int, offsetRange: OffsetRange) -> None:
        self.index = index
        self.position = offsetRange.fromOffset
        self.until = offsetRange.untilOffset
        self.messages: list[Any] = []


class FetchSession:
    """Reads the ranges of many partitions with one consumer.

    Args:
        params: Executor Kafka parameters (see
            :func:`~kafka_direct.client.params.executor_params`).
        factory: Builds the confluent-kafka consumer (injectable for tests).
    """

    def __init__(self, params: Mapping[str, Any],
                 factory: Callable[[dict[str, Any]], Any] = _confluent_consumer) -> None:
        self._params = dict(params)
        self._factory = factory

    def read(self, ranges: Sequence[OffsetRange], pollTimeoutMs: int
             ) -> Iterator[SessionRange]:
        """The ranges' records, range by range in the order given.

        Args:
            ranges: Non-empty ranges, at most one per topic-partition
                (:func:`session_ranges`).
            pollTimeoutMs: The read's poll timeout: the session hands its open ranges back
                after ``min(pollTimeoutMs, 2000)`` ms without progress.

        Raises:
            ValueError: ``ranges`` cannot share a session.
        """
        if not session_ranges(ranges):
            raise ValueError("a fetch session reads several non-empty ranges, one per "
                             "partition")
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        consumer = self._factory(dict(self._params))
        try:
            yield from self._read(consumer, KafkaTopicPartition, ranges,
                                  min(pollTimeoutMs, _HAND_BACK_MS))
        finally:
            try:
                consumer.close()
            except Exception as error:  # closing is best effort: the reads are done
                logger.debug("closing a fetch session's consumer failed: %s", error)

    def _read(self, consumer: Any, tp: Any, ranges: Sequence[OffsetRange],
              handBackMs: int) -> Iterator[SessionRange]:
        opened = {(r.topic, r.partition): _Open(i, r) for i, r in enumerate(ranges)}
        consumer.assign([tp(r.topic, r.partition, r.fromOffset) for r in ranges])
        finished: dict[int, SessionRange] = {}
        emitted = 0
        last_progress = time.monotonic()
        while opened:
            batch = consumer.consume(MAX_BATCH, _POLL_SLICE_S)
            # Ended in this batch (a dict: ordered, and a partition ends once even when a
            # later run of the same batch brings more of its records).
            done: dict[tuple[str, int], None] = {}
            progressed = False
            for key, run in _runs(batch):
                state = opened.get(key)
                if state is None or key in done:
                    # A record past its range (fetched before its pause took, or after its
                    # range ended earlier in this batch), or an event of the consumer
                    # rather than of a partition.
                    continue
                if run[0].error() is not None or any(m.error() is not None for m in run):
                    # Errors are the per-range reader's to decide: the records before the
                    # error are kept, the rest of the range is read again by it.
                    for message in run:
                        if message.error() is not None:
                            break
                        offset = message.offset()
                        if state.position <= offset < state.until:
                            state.messages.append(message)
                            state.position = offset + 1
                    finished[state.index] = self._hand_back(state, ranges, "an error")
                    done[key] = None
                    continue
                first, last = run[0].offset(), run[-1].offset()
                if first >= state.position and last < state.until:
                    state.messages.extend(run)  # the common case: no per-record step
                    state.position = last + 1
                else:
                    for message in run:
                        offset = message.offset()
                        if state.position <= offset < state.until:
                            state.messages.append(message)
                            state.position = offset + 1
                        elif offset >= state.until:
                            state.position = state.until  # the rest was compacted away
                progressed = True
                if state.position >= state.until:
                    finished[state.index] = SessionRange(ranges[state.index], state.messages)
                    done[key] = None
            if not batch and opened:
                # Offsets without records at a range's end (markers, compaction): the
                # consumer's position moves past them with no record to show for it.
                keys = [key for key in opened if key not in done]
                for key, position in self._positions(consumer, tp, keys):
                    state = opened[key]
                    if position > state.position:
                        state.position = min(position, state.until)
                        progressed = True
                        if state.position >= state.until:
                            finished[state.index] = SessionRange(ranges[state.index],
                                                                 state.messages)
                            done[key] = None
            if done:
                for key in done:
                    del opened[key]
                # A finished partition must not keep fetching past its range.
                consumer.pause([tp(topic, partition) for topic, partition in done])
            if progressed:
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000.0 >= handBackMs:
                for state in opened.values():
                    finished[state.index] = self._hand_back(state, ranges, "no progress")
                opened.clear()
            while emitted in finished:
                yield finished.pop(emitted)
                emitted += 1
        while emitted in finished:
            yield finished.pop(emitted)
            emitted += 1

    @staticmethod
    def _positions(consumer: Any, tp: Any, keys: list[tuple[str, int]]
                   ) -> Iterator[tuple[tuple[str, int], int]]:
        if not keys:
            return
        for answer in consumer.position([tp(topic, partition) for topic, partition in keys]):
            if answer.error is None and answer.offset >= 0:
                yield (answer.topic, answer.partition), int(answer.offset)

    @staticmethod
    def _hand_back(state: _Open, ranges: Sequence[OffsetRange], why: str) -> SessionRange:
        offsetRange = ranges[state.index]
        logger.debug("fetch session: %s-%d [%d, %d) goes on from %d in its own read (%s)",
                     offsetRange.topic, offsetRange.partition, offsetRange.fromOffset,
                     offsetRange.untilOffset, state.position, why)
        return SessionRange(offsetRange, state.messages, state.position)


def _runs(batch: list[Any]) -> Iterator[tuple[tuple[str, int], list[Any]]]:
    """The batch cut into runs of consecutive messages of one partition.

    librdkafka hands over a fetch response partition by partition, so runs are long and the
    cut costs two calls per message (no Python object is made for a message).
    """
    if not batch:
        return
    start = 0
    key = _key(batch[0])
    for i in range(1, len(batch)):
        message = batch[i]
        partition = message.partition()
        if partition != key[1] or message.topic() != key[0]:
            yield key, batch[start:i]
            start = i
            key = _key(message)
    yield key, batch[start:]


def _key(message: Any) -> tuple[str, int]:
    """A message's (topic, partition); (topic or "", -1) for an event of the consumer."""
    partition = message.partition()
    return (message.topic() or "", partition if partition is not None else -1)
