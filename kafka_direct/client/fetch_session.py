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
  So is, at once, a range of a topic the cluster said it does not have (or of a partition
  beyond its count) when the session's kept consumer asked for the topic's metadata.
* A session's consumer comes from the Python worker's :data:`session_consumers`: the idle
  consumer of an earlier session with the same parameters, made anew only when there is
  none. A consumer goes back there only after a session that read every range to its end
  (its partitions resumed and unassigned: an idle consumer fetches nothing); one whose
  session failed, was abandoned or handed a range back is closed. A retried task (attempt
  above 0) never meets a consumer of the failed attempt: it reads with a new one, closed
  after. The records a session returns do not depend on the consumer: each range is
  assigned at its start offset, and records outside the ranges are dropped.

Why a cache: a new consumer per task per batch costs the worker a client (its threads,
connections and first metadata request) and the broker a connection, a metadata answer and a
new fetch session, several times a second at sub-second triggers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.client.absent_partitions import partition_count
from kafka_direct.client.data_consumer import (
    _LEARN_TIMEOUT_S,
    _POLL_SLICE_S,
    MAX_BATCH,
    _confluent_consumer,
    learn_topics,
)
from kafka_direct.offset_range import OffsetRange

__all__ = ["SESSION_MAX_OFFSETS_PER_RANGE", "FetchSession", "SessionConsumers", "SessionRange",
           "in_session", "session_consumers", "session_ranges"]

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


#: A task's ranges are read in one fetch session (:func:`in_session`) when they hold at
#: most this many offsets on average: below it a range's fixed cost (an assignment, a first
#: fetch, a pause) outweighs what the native reader saves per record over the Python
#: client's messages; above it, each range is read on its own by the chosen reader (and a
#: session, which holds a range's records until the range is done, would hold many).
SESSION_MAX_OFFSETS_PER_RANGE = 2048


def in_session(ranges: Sequence[OffsetRange]) -> bool:
    """Whether a task reads ``ranges`` in one fetch session.

    When they are several non-empty ranges of distinct partitions (:func:`session_ranges`)
    holding at most :data:`SESSION_MAX_OFFSETS_PER_RANGE` offsets on average. A pure
    function of the ranges: a retried task reads the way the failed attempt did.
    """
    return session_ranges(ranges) and sum(r.count() for r in ranges) <= (
        SESSION_MAX_OFFSETS_PER_RANGE * len(ranges))


class _Open:
    """A range the session is reading: where its partition stands."""

    __slots__ = ("index", "messages", "position", "until")

    def __init__(self, index: int, offsetRange: OffsetRange) -> None:
        self.index = index
        self.position = offsetRange.fromOffset
        self.until = offsetRange.untilOffset
        self.messages: list[Any] = []


ConsumerFactory = Callable[[dict[str, Any]], Any]


def _close(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception as error:  # closing is best effort: the reads are done
        logger.debug("closing a fetch session's consumer failed: %s", error)


class SessionConsumers:
    """The idle consumers of finished fetch sessions, one per parameters (a worker's cache).

    PySpark reuses a Python worker for many tasks, one at a time: the worker's next
    session with the same parameters takes the consumer the last one gave back.

    Args:
        capacity: Most idle consumers kept (of different parameters); the least recently
            given back is closed first.
    """

    def __init__(self, capacity: int = 4) -> None:
        if capacity < 1:
            raise ValueError(f"a session consumer cache holds at least one, not {capacity}")
        self.capacity = capacity
        # Each idle consumer with the topics whose metadata it has.
        self._idle: OrderedDict[tuple[Any, ...], tuple[Any, frozenset[str]]] = OrderedDict()
        self._lock = threading.Lock()
        #: Consumers made for sessions, and sessions that took an idle one (for tests and
        #: benchmarks).
        self.created = 0
        self.reused = 0

    @staticmethod
    def key(params: Mapping[str, Any], factory: ConsumerFactory) -> tuple[Any, ...]:
        """What a consumer is kept under: its parameters (values as text) and its maker."""
        return (factory, tuple(sorted((str(k), str(v)) for k, v in params.items())))

    def take(self, params: Mapping[str, Any], factory: ConsumerFactory, attempt: int
             ) -> tuple[Any, bool, frozenset[str] | None]:
        """A consumer for a session, whether it may be given back after it, its topics.

        The idle one of ``params`` for a first attempt, with the topics whose metadata it
        has; otherwise a new one, and None for its topics (a new client asks for the
        metadata of its first assignment's topics itself). A retried task's consumer is
        never kept: a consumer of a failed attempt is never met again.
        """
        if attempt == 0:
            with self._lock:
                idle = self._idle.pop(self.key(params, factory), None)
                if idle is not None:
                    self.reused += 1
                    return idle[0], True, idle[1]
        consumer = factory(dict(params))
        with self._lock:
            self.created += 1
        return consumer, attempt == 0, None

    def give_back(self, params: Mapping[str, Any], factory: ConsumerFactory,
                  consumer: Any, topics: Iterable[str] = ()) -> None:
        """Keep an idle ``consumer`` (no partition assigned) for the next session.

        Args:
            params: Its parameters.
            factory: Its maker.
            consumer: The consumer.
            topics: The topics whose metadata it has.
        """
        key = self.key(params, factory)
        closing = []
        with self._lock:
            other = self._idle.pop(key, None)
            if other is not None:  # two sessions of one worker at once (threads): one kept
                closing.append(other[0])
            self._idle[key] = (consumer, frozenset(topics))
            while len(self._idle) > self.capacity:
                closing.append(self._idle.popitem(last=False)[1][0])
        for extra in closing:
            _close(extra)

    def clear(self) -> None:
        """Close every idle consumer."""
        with self._lock:
            idle = [consumer for consumer, _ in self._idle.values()]
            self._idle.clear()
        for consumer in idle:
            _close(consumer)

    def __len__(self) -> int:
        return len(self._idle)


#: The worker-wide cache (a module global, because Python workers outlive tasks).
session_consumers = SessionConsumers()


class FetchSession:
    """Reads the ranges of many partitions with one consumer.

    Args:
        params: Executor Kafka parameters (see
            :func:`~kafka_direct.client.params.executor_params`).
        factory: Builds the confluent-kafka consumer (injectable for tests).
        consumers: Where idle consumers wait between sessions (default: the worker's
            :data:`session_consumers`).
    """

    def __init__(self, params: Mapping[str, Any],
                 factory: ConsumerFactory = _confluent_consumer,
                 consumers: SessionConsumers | None = None) -> None:
        self._params = dict(params)
        self._factory = factory
        self._consumers = session_consumers if consumers is None else consumers

    def read(self, ranges: Sequence[OffsetRange], pollTimeoutMs: int, attempt: int = 0
             ) -> Iterator[SessionRange]:
        """The ranges' records, range by range in the order given.

        Args:
            ranges: Non-empty ranges, at most one per topic-partition
                (:func:`session_ranges`).
            pollTimeoutMs: The read's poll timeout: the session hands its open ranges back
                after ``min(pollTimeoutMs, 2000)`` ms without progress.
            attempt: The task's attempt number: above 0, the session's consumer is a new
                one, closed after it.

        Raises:
            ValueError: ``ranges`` cannot share a session.
        """
        if not session_ranges(ranges):
            raise ValueError("a fetch session reads several non-empty ranges, one per "
                             "partition")
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        consumer, keep, known = self._consumers.take(self._params, self._factory, attempt)
        topics = {r.topic for r in ranges}
        handBackMs = min(pollTimeoutMs, _HAND_BACK_MS)
        started = time.monotonic()  # the metadata questions count in the hand-back time
        complete = False
        # The partition counts the cluster answered (0: no such topic).
        counts: dict[str, int] = {}
        try:
            if known is not None:
                def ask(topic: str, seconds: float) -> bool:
                    counts[topic] = partition_count(consumer, topic, seconds)
                    return counts[topic] > 0

                known = learn_topics(ask, topics - known, known,
                                     min(_LEARN_TIMEOUT_S, handBackMs / 1000))
            missing = {(r.topic, r.partition) for r in ranges
                       if r.partition >= counts.get(r.topic, r.partition + 1)}
            complete = yield from self._read(consumer, KafkaTopicPartition, ranges,
                                             handBackMs, started, missing)
        finally:
            # Kept only after a session that read every range to its end, emptied of its
            # partitions; anything else (an error, an abandoned read) closes it.
            if keep and complete and self._idle(consumer, KafkaTopicPartition, ranges):
                self._consumers.give_back(self._params, self._factory, consumer,
                                          topics | (known or frozenset()))
            else:
                _close(consumer)

    @staticmethod
    def _idle(consumer: Any, tp: Any, ranges: Sequence[OffsetRange]) -> bool:
        """Resume the session's partitions and unassign them; False if that failed.

        librdkafka keeps a partition's pause across assignments: a later session assigning
        it again would wait forever.
        """
        try:
            consumer.resume([tp(r.topic, r.partition) for r in ranges])
            consumer.unassign()
        except Exception as error:  # a consumer in doubt is closed, not kept
            logger.debug("emptying a fetch session's consumer failed: %s", error)
            return False
        return True

    def _read(self, consumer: Any, tp: Any, ranges: Sequence[OffsetRange],
              handBackMs: int, started: float, missing: set[tuple[str, int]]
              ) -> Generator[SessionRange, None, bool]:
        """The session's reading (see :meth:`read`); True when no range was handed back.

        ``started`` is when the session began waiting (its clock of progress starts there).
        The ranges of ``missing`` partitions (the cluster said it has none such) are never
        assigned: handed back at once, for the per-range reader to report.
        """
        handedBack = bool(missing)
        finished: dict[int, SessionRange] = {
            i: self._hand_back(_Open(i, r), ranges, "not on the cluster")
            for i, r in enumerate(ranges) if (r.topic, r.partition) in missing}
        opened = {(r.topic, r.partition): _Open(i, r) for i, r in enumerate(ranges)
                  if (r.topic, r.partition) not in missing}
        if opened:
            consumer.assign([tp(r.topic, r.partition, r.fromOffset) for r in ranges
                             if (r.topic, r.partition) not in missing])
        emitted = 0
        last_progress = started
        while opened:
            # librdkafka's consume waits for as many messages as asked or the whole slice:
            # asking for more than the open ranges hold waited a slice (100 ms) every time.
            left = sum(state.until - state.position for state in opened.values())
            batch = consumer.consume(max(1, min(MAX_BATCH, left)), _POLL_SLICE_S)
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
                    handedBack = True
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
                    handedBack = True
                opened.clear()
            while emitted in finished:
                yield finished.pop(emitted)
                emitted += 1
        while emitted in finished:
            yield finished.pop(emitted)
            emitted += 1
        return not handedBack

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
