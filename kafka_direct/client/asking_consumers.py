"""The driver's asking consumers: one question's ListOffsets requests asked by a few at once.

A :class:`~kafka_direct.client.driver_consumer.DriverConsumer` asks ends and starts through
consumers that never join the group (``offsets_for_times`` with Kafka's special times -1,
latest, and -2, earliest): one blocking call answering a list. A question of more than one
request may be asked by a few of them at once (``askers``, the direct stream's
:data:`STREAM_ASKERS`): a broker answers one connection's requests one after the other, and
each consumer has a connection of its own, so ten requests of a thousand partitions wait for
about a third of the round trips. The first asking consumer asks in the calling thread; the
others, made when a question first has more than one request, each ask in a thread of its
own, and all are closed together (:meth:`AskingConsumers.close`).

Each asking consumer serves its events (statistics, errors) after each request it asks, in
the thread that asked it: a user's callbacks reach these consumers wrapped so that they are
called one at a time (see :mod:`kafka_direct.client.callbacks`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kafka_direct.client.error_codes import error_code
from kafka_direct.client.offset_answers import UnansweredError, answered_list, stale_metadata
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition, partition_order

__all__ = ["STREAM_ASKERS", "AskingConsumers", "check_askers"]

logger = logging.getLogger(__name__)

#: Most partitions in one ListOffsets request through a consumer (see
#: :meth:`AskingConsumers.offsets`).
_REQUEST_PARTITIONS = 100

#: Consumers asking a question's requests at once, for a direct stream (see
#: :meth:`AskingConsumers.offsets`). Measured on one broker at a thousand partitions (ten
#: requests): two or three halve the wait, more gain nothing.
STREAM_ASKERS = 3


@dataclass(frozen=True, slots=True)
class _Request:
    """One ListOffsets request through the consumer, asked again as long as it applies.

    Attributes:
        partitions: The partitions asked, in (topic, partition) order.
        request: librdkafka's partitions of the request (with the time asked), in that order.
        topics: The topic of each, in that order: what the answer is checked by.
        numbers: The partition number of each, in that order: likewise.
    """

    partitions: list[TopicPartition]
    request: list[Any]
    topics: list[str]
    numbers: list[int]

    def __post_init__(self) -> None:
        if not (len(self.partitions) == len(self.request) == len(self.topics)
                == len(self.numbers)):
            raise ValueError("a ListOffsets request's partitions, request, topics and "
                             "numbers differ in length")


def check_askers(askers: int) -> None:
    """Refuse a number of asking consumers that is not a positive whole number.

    Raises:
        ConfigurationError: ``askers`` is not an int of at least 1.
    """
    if type(askers) is not int or askers < 1:
        raise ConfigurationError(f"DriverConsumer askers must be a whole number of at "
                                 f"least 1 (1: requests asked one after the other); got "
                                 f"{askers!r}")


class AskingConsumers:
    """The consumers asking one driver consumer's offset questions, and their threads.

    Args:
        first: The first asking consumer (made by the caller, which owns it from now on:
            :meth:`close` closes it).
        make: Makes one more asking consumer (the same configuration as ``first``).
        askers: Most consumers asking one question's requests at once (1: one after the
            other). The consumers beyond the first are made when a question first has
            more than one request.
        timeout: How long one request may take (seconds).
        name: What the logs and the asking threads are named after (the group).

    Raises:
        ConfigurationError: ``askers`` is not a positive whole number.
    """

    def __init__(self, first: Any, make: Callable[[], Any], askers: int, timeout: float,
                 name: str) -> None:
        check_askers(askers)
        self._questions = first
        self._make = make
        self._askers = askers
        self.timeout = timeout
        self._name = name
        # Held while an asking consumer answers a question or serves its events; close()
        # waits for it.
        self._asking = threading.RLock()
        # The last requests per time asked, for the partitions they ask (see _requests).
        self._kept: dict[int, tuple[frozenset[TopicPartition], list[_Request]]] = {}
        # The asking consumers beyond the first, and the threads they ask from: made when a
        # question first has more than one request (see offsets).
        self._helpers: list[Any] = []
        self._pool: ThreadPoolExecutor | None = None
        self._closed = threading.Event()
        # Set in a thread while it serves an asking consumer's events: a user's callback
        # that asks a question then (an end-offsets hook in stats_cb) gets its answer
        # without events served inside it, so callbacks never nest without end, and no
        # consumer is asked from inside its own poll.
        self._serving = threading.local()

    @property
    def consumers(self) -> list[Any]:
        """The asking consumers made so far, the first first."""
        return [self._questions, *self._helpers]

    def serve(self) -> None:
        """Serve every asking consumer's events, unless one is answering a question.

        A consumer answering a question serves its events after each request: left
        unserved, they pile up.
        """
        if self._asking.acquire(blocking=False):
            try:
                self._serve()
            finally:
                self._asking.release()

    def _serve(self, consumer: Any = None) -> None:
        """Serve the events of an asking consumer (the first when None), or of all of them.

        Args:
            consumer: The asking consumer; None: every asking consumer.
        """
        if getattr(self._serving, "now", False):
            return  # a callback's question: its events wait for the serving under way
        self._serving.now = True
        try:
            for asking in ([self._questions, *self._helpers] if consumer is None
                           else [consumer]):
                # Never assigned a partition: what poll returns is an event, never a record.
                event = asking.poll(0)
                if event is not None and event.error() is not None:
                    logger.debug("driver consumer of group %s (questions): %s", self._name,
                                 event.error().str())
        finally:
            self._serving.now = False

    def offsets(self, partitions: Iterable[TopicPartition], query: int
                ) -> dict[TopicPartition, int]:
        """``ListOffsets`` of ``partitions`` through the asking consumers, at their isolation level.

        Asked in (topic, partition) order, in requests of at most
        :data:`_REQUEST_PARTITIONS` partitions: librdkafka matches an answer to its request
        partition by partition, in time quadratic in the request's size: a thousand
        partitions cost the driver's asking thread about 10 ms of CPU in one request, about
        4 ms in four of 250, about 2.5 ms in ten of 100; smaller requests save little more.
        Sorted, a fifth less again.

        With more than one request and more than one asker, the requests are dealt to the
        asking consumers in turn (request ``i`` to consumer ``i % askers``), each asking
        its share one after the other, the first in the calling thread and the others in
        threads of their own: a broker answers one connection's requests one at a time,
        while librdkafka waits with Python's lock released. The answer is the same, in the
        same order, as asked one after the other; a share that fails raises, after every
        share ended, the error of the first request (in request order) that failed, as
        asked one after the other.

        A partition the asking consumer's metadata does not know yet (just added, or its
        leader just moved) gets its request's topics' metadata refreshed on that consumer
        and that request asked once more, as the AdminClient path does.

        Args:
            partitions: The partitions.
            query: ``LATEST_TIME`` or ``EARLIEST_TIME`` (see
                :mod:`kafka_direct.client.offset_answers`).

        Raises:
            UnansweredError: The request timed out, or a partition's answer was an error
                or no offset (retryable).
            KafkaException: librdkafka refused the request as a whole (a topic it does
                not know, a refused argument).
        """
        requests = self._requests(partitions, query)
        if not requests:
            return {}
        with self._asking:
            if len(requests) == 1:
                return self._askRefreshing(requests[0], self._questions)
            askers = self._askingConsumers(len(requests))
            if len(askers) == 1:
                found: dict[TopicPartition, int] = {}
                for request in requests:
                    found.update(self._askRefreshing(request, self._questions))
                return found
            return self._askShared(requests, askers)

    def _askingConsumers(self, requests: int) -> list[Any]:
        """The consumers to ask ``requests`` requests with, the helpers made when first needed.

        Called with ``_asking`` held.
        """
        wanted = min(self._askers, requests)
        if len(self._helpers) + 1 < wanted and not self._closed.is_set():
            made = []
            try:
                for _ in range(wanted - 1 - len(self._helpers)):
                    made.append(self._make())
            except BaseException:
                for client in made:
                    client.close()
                raise
            self._helpers.extend(made)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._askers - 1, thread_name_prefix=f"driver-questions-{self._name}")
        return [self._questions, *self._helpers][:wanted]

    def _askShared(self, requests: list[_Request], askers: list[Any]
                   ) -> dict[TopicPartition, int]:
        """``requests`` dealt to ``askers`` in turn and asked at once (see offsets).

        Called with ``_asking`` held (the helpers ask while the calling thread waits).
        """
        pool = self._pool
        if pool is None:  # made with the helpers
            raise AssertionError("the asking threads were not made")  # pragma: no cover
        count = len(askers)
        answers: list[dict[TopicPartition, int] | None] = [None] * len(requests)
        # The helpers' threads ask only: their consumers' events (the user's callbacks) are
        # served here, by the calling thread, once every share has ended. Served in the
        # helpers' threads, a callback would wait for the user's callback lock, which the
        # calling thread may hold (a callback that asks end offsets), while the calling
        # thread waits for the helpers' answers: a deadlock.
        futures: list[Future[tuple[int, BaseException] | None]] = [
            pool.submit(self._askShare, requests, answers, first, count, askers[first], False)
            for first in range(1, count)]
        failures = []
        own = self._askShare(requests, answers, 0, count, askers[0], True)
        if own is not None:
            failures.append(own)
        # Every share ended before the answer (or the failure) is given: none is still
        # asking when the caller asks again or closes the consumers.
        failures.extend(failure for failure in (future.result() for future in futures)
                        if failure is not None)
        for helper in askers[1:]:
            self._serve(helper)
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        found: dict[TopicPartition, int] = {}
        for answer in answers:
            found.update(answer or {})
        return found

    def _askShare(self, requests: list[_Request], answers: list[dict[TopicPartition, int] | None],
                  first: int, step: int, consumer: Any, serve: bool
                  ) -> tuple[int, BaseException] | None:
        """Ask ``requests[first::step]`` with ``consumer``, one after the other.

        Each answer goes to its place in ``answers``. Returns None, or the index of the
        request that failed and its error (the share's later requests are not asked).
        ``serve``: whether ``consumer``'s events are served after each request (only in the
        thread that asked the question).
        """
        for index in range(first, len(requests), step):
            try:
                answers[index] = self._askRefreshing(requests[index], consumer, serve)
            except Exception as error:
                return index, error
        return None

    def _requests(self, partitions: Iterable[TopicPartition], query: int
                  ) -> list[_Request]:
        """The requests asking ``query`` of ``partitions``, kept while they are the same.

        A stream asks the ends of the same partitions batch after batch: the sorted
        partitions and librdkafka's request objects are made once for a set of partitions
        (its equality with the last one is checked in C, on the set's stored hashes) and
        asked again while it stays; any other set gets requests of its own.
        """
        kept = self._kept.get(query)
        if kept is not None and isinstance(partitions, (set, frozenset)) \
                and partitions == kept[0]:
            return kept[1]
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        # In (topic, partition) order: librdkafka answers a sorted request with about a
        # fifth less CPU, and a request holds few topics.
        wanted = sorted(partitions, key=partition_order)
        requests = [_Request(chunk, [KafkaTopicPartition(tp.topic, tp.partition, query)
                                     for tp in chunk],
                             [tp.topic for tp in chunk], [tp.partition for tp in chunk])
                    for chunk in (wanted[first:first + _REQUEST_PARTITIONS]
                                  for first in range(0, len(wanted), _REQUEST_PARTITIONS))]
        if isinstance(partitions, (set, frozenset)):
            self._kept[query] = (frozenset(partitions), requests)
        return requests

    def _askRefreshing(self, request: _Request, consumer: Any, serve: bool = True
                       ) -> dict[TopicPartition, int]:
        """One request; on stale metadata, its topics refreshed and the request asked again.

        Called with ``_asking`` held (by the calling thread, for all of its askers).
        """
        from confluent_kafka import KafkaException

        wanted = request.partitions
        for attempt in (1, 2):
            try:
                return self._askConsumer(request, consumer, serve)
            except (UnansweredError, KafkaException) as error:
                if attempt == 2 or not stale_metadata(error):
                    raise
                for topic in sorted({tp.topic for tp in wanted}):
                    consumer.list_topics(topic, timeout=self.timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    def _askConsumer(self, asked: _Request, consumer: Any, serve: bool = True
                     ) -> dict[TopicPartition, int]:
        from confluent_kafka import KafkaError, KafkaException

        request = asked.request
        try:
            try:
                answers = consumer.offsets_for_times(request, timeout=self.timeout)
            finally:
                if serve:
                    self._serve(consumer)
        except KafkaException as error:
            if error_code(error) != KafkaError._TIMED_OUT:
                raise
            first = request[0]
            raise UnansweredError(
                f"ListOffsets for {len(request)} partition(s) ({first.topic}-"
                f"{first.partition} first): no answer within {self.timeout:g} s") from None
        return answered_list(answers, asked.partitions, asked.topics, asked.numbers)


    def close(self) -> None:
        """Close every asking consumer, once no question is under way; make no more."""
        self._closed.set()
        with self._asking:
            # No question is under way (it holds _asking): the helpers' threads are idle.
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            for client in (self._questions, *self._helpers):
                try:
                    client.close()
                except Exception as error:
                    logger.debug("closing an asking consumer of %s failed: %s", self._name,
                                 error)
            self._helpers = []
