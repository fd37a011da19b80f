"""DriverConsumer: the direct stream's one consumer on the driver, which never reads records.

It exists to ask Kafka questions — which partitions (and, for subscriptions, which the
consumer group assigns to this stream), where each starts and ends, what the group committed —
and to commit the group's offsets when the application says so. Assigned partitions are
paused at once, so it never fetches records, and it never commits by itself.

Under the eager rebalance protocol (``range``, ``roundrobin``) every rebalance revokes the
whole assignment and hands out a whole new one. Under the cooperative protocol
(``partition.assignment.strategy=cooperative-sticky``, or ``group.protocol=consumer``) the
callbacks deliver increments: partitions added, partitions removed; the rest stay assigned.

Offsets of many partitions are asked in one ``ListOffsets`` request with the stream's
isolation level: under ``read_committed``, librdkafka's default, the end is the last stable
offset, so no batch ever waits for an open transaction. Ends and starts are asked through a
second consumer that never joins the group (``offsets_for_times`` with Kafka's special times
-1, latest, and -2, earliest): one blocking call answering a list, where the AdminClient
builds a Python future per partition (at a thousand partitions that was most of a batch's
planning), so that an offsets question waiting for a slow broker never holds up the group
member's poll (librdkafka holds a consumer's poll while it asks). Metadata is asked of the
member, whose refreshed metadata starts its rebalance when a subscribed topic grows; what
its answers say of topics is read by :mod:`kafka_direct.client.topic_metadata`. The
AdminClient asks what the consumer's isolation
level cannot: high watermarks under ``read_committed``, and offsets by timestamp.

A question of more than one request may be asked by a few asking consumers at once
(``askers``, the direct stream's :data:`STREAM_ASKERS`), each from a thread of its own: see
:mod:`kafka_direct.client.asking_consumers`.

The user's callbacks (``error_cb``, ``stats_cb``, ``throttle_cb``, ``oauth_cb``, a
``logger``...) are given to every client, and called as by one consumer: never two at once,
whichever client calls them from whichever thread (one lock per driver consumer; see
:mod:`kafka_direct.client.callbacks`). Each client still asks ``oauth_cb`` for its own token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_direct.client import topic_metadata
from kafka_direct.client.asking_consumers import STREAM_ASKERS, AskingConsumers, check_askers
from kafka_direct.client.callbacks import one_at_a_time
from kafka_direct.client.error_codes import error_code
from kafka_direct.client.offset_answers import (
    EARLIEST_TIME,
    LATEST_TIME,
    answered_future,
    offset_spec,
)
from kafka_direct.client.params import reads_committed, refusal
from kafka_direct.client.topic_metadata import TopicListing
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["STREAM_ASKERS", "DriverConsumer", "admin_params", "is_cooperative"]

logger = logging.getLogger(__name__)

ClientFactory = Callable[[dict[str, Any]], Any]

_ADMIN_PREFIXES = ("bootstrap.servers", "metadata.broker.list", "security.", "ssl.", "sasl.",
                   "client.id", "socket.", "broker.", "api.version", "reconnect.", "retry.",
                   "client.dns", "connections.max", "debug", "log_level", "topic.metadata",
                   "metadata.max", "enable.ssl",
                   # A token provider: an admin client under OAUTHBEARER needs it as much.
                   "oauth_cb")

#: A group's coordinator loading, unknown or moving (COORDINATOR_LOAD_IN_PROGRESS,
#: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR; librdkafka's own "waiting for the
#: coordinator"): what a broker answers for a moment about a group it has just begun to own.
_COORDINATOR_MOVING = frozenset({14, 15, 16, -180})
#: The first pause before a group request is asked again; it doubles up to 1 s.
_COORDINATOR_BACKOFF_S = 0.05


def admin_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and security properties of ``params`` (what an AdminClient takes).

    Never topic creation: an AdminClient is a producer to librdkafka, whose metadata request
    for a topic by name would have a broker with ``auto.create.topics.enable`` create it
    again right after its deletion, hiding the deletion from the stream.
    """
    admin = {k: v for k, v in params.items() if k.startswith(_ADMIN_PREFIXES)}
    admin["allow.auto.create.topics"] = False
    return admin


def is_cooperative(consumer: Any, params: Mapping[str, Any]) -> bool:
    """Whether ``consumer`` rebalances incrementally (the cooperative protocol).

    Asks the consumer when it can tell (``rebalance_protocol()``, which confluent-kafka does
    not expose to Python as of 2.16); otherwise decides from the configuration as librdkafka
    does: KIP-848's ``group.protocol=consumer`` is always incremental, and the classic
    protocol is cooperative when ``partition.assignment.strategy`` names
    ``cooperative-sticky`` (librdkafka refuses a list mixing it with eager strategies).
    """
    protocol = getattr(consumer, "rebalance_protocol", None)
    if callable(protocol):
        return str(protocol()).upper() == "COOPERATIVE"
    if str(params.get("group.protocol", "classic")).strip().lower() == "consumer":
        return True
    strategies = str(params.get("partition.assignment.strategy", "range,roundrobin"))
    return "cooperative-sticky" in {name.strip().lower() for name in strategies.split(",")}


def _consumer(params: dict[str, Any]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(params)


def _admin(params: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(params)


def _create(what: str, factory: ClientFactory, params: dict[str, Any]) -> Any:
    """``factory(params)``; a client librdkafka refuses to create is a ConfigurationError.

    Creating a client contacts no broker, so its failure is the configuration (a Java-client
    ``sasl.jaas.config``, a value of the wrong type), never a glitch worth a retry.
    """
    from confluent_kafka import KafkaException

    try:
        return factory(params)
    except (KafkaException, ValueError, TypeError) as error:
        logger.debug("creating the driver's %s failed", what)
        # Not chained: librdkafka's own text may quote a secret value; refusal() cuts it out.
        raise refusal(error, params) from None


class DriverConsumer:
    """Kafka questions and commits for one direct stream.

    Args:
        params: Driver Kafka parameters (auto-commit already off).
        requestTimeoutMs: How long one question may take.
        consumerFactory: Builds the confluent-kafka Consumer (injectable for tests).
        adminFactory: Builds the AdminClient (injectable for tests).
        askers: Most consumers asking one question's requests at once (1: one after the
            other). The consumers beyond the first are made when a question first has
            more than one request, and closed with this one.

    Callbacks in ``params`` (functions, or ``package.module:function`` names) are given to
    every client this makes, each call holding one lock of this driver consumer: the user's
    callbacks are never called twice at once (see :mod:`kafka_direct.client.callbacks`).

    Raises:
        ConfigurationError: ``askers`` is not a positive whole number, a callback named
            in ``params`` does not import, or librdkafka refuses a client's configuration.
    """

    def __init__(self, params: Mapping[str, Any], requestTimeoutMs: int = 30_000,
                 consumerFactory: ClientFactory = _consumer,
                 adminFactory: ClientFactory = _admin, askers: int = 1) -> None:
        check_askers(askers)  # before any client is made
        self.params = dict(params)
        self.groupId = str(self.params.get("group.id", ""))
        self.timeout = requestTimeoutMs / 1000.0
        self.readCommitted = reads_committed(self.params)
        # The user's callbacks, as every client of this driver consumer calls them: one at
        # a time, whichever client and thread calls (see kafka_direct.client.callbacks).
        self._callbackLock = threading.RLock()
        clientParams = one_at_a_time(self.params, self._callbackLock)
        # Two consumers: one that asks for offsets and never joins the group, and the
        # group's member (metadata, commits). librdkafka holds a consumer's poll while that
        # consumer asks for offsets, and a question may wait for a slow broker up to the
        # request timeout: the member's poll (its group callbacks, kept by the keeper
        # thread) must not.
        questions = _create("consumer", consumerFactory, clientParams)
        made = [questions]
        try:
            self._consumer = _create("consumer", consumerFactory, clientParams)
            made.append(self._consumer)
            self._admin = _create("admin client", adminFactory, admin_params(clientParams))
        except BaseException:
            for client in made:
                client.close()
            raise
        self._lock = threading.RLock()
        # The asking consumers: the first, and the others made when a question first has
        # more than one request.
        self._questions = AskingConsumers(
            questions, lambda: _create("consumer", consumerFactory, clientParams), askers,
            self.timeout, self.groupId)
        self._assigned: set[TopicPartition] = set()
        self._closed = threading.Event()
        self._keeper: threading.Thread | None = None
        self.subscribed = False

    # -- group membership ---------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Join the consumer group for ``topics``, or change the topics if already joined.

        Args:
            topics: Topic names. Patterns are matched by the caller (``SubscribePattern``)
                and never handed to librdkafka, whose regex dialect differs from Python's.

        Raises:
            ConfigurationError: A name starts with ``^`` (librdkafka would take it for a
                pattern; Kafka topic names cannot contain ``^``).
        """
        patterns = [t for t in topics if t.startswith("^")]
        if patterns:
            raise ConfigurationError(
                f"the driver consumer subscribes to topic names, not to the pattern(s) "
                f"{patterns}; use ConsumerStrategies.SubscribePattern")
        cooperative = is_cooperative(self._consumer, self.params)

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            # Assign here rather than after the callback returns, so the pause below applies
            # to partitions already assigned: the driver never fetches records.
            if cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if partitions:
                consumer.pause(partitions)
            given = {TopicPartition(p.topic, p.partition) for p in partitions}
            with self._lock:
                # Cooperative callbacks carry only what is added; eager ones the whole set.
                self._assigned = self._assigned | given if cooperative else given
                total = len(self._assigned)
            logger.info("group %s assigned %d partition(s) to this stream, %d in all",
                        self.groupId, len(given), total)

        def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
            # Eager revocations name every partition, cooperative ones the removed few:
            # removing what is named is right for both. librdkafka unassigns after the call.
            with self._lock:
                self._assigned -= {TopicPartition(p.topic, p.partition) for p in partitions}
            if partitions:
                logger.info("group %s revoked %d partition(s) from this stream", self.groupId,
                            len(partitions))

        with self._lock:
            self._consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke,
                                     on_lost=on_revoke)
            self.subscribed = True
        if self._keeper is None:
            # Rebalances are served by poll(): keep polling between batches, so another
            # member's join is answered at once and a long batch interval never exceeds
            # max.poll.interval.ms (which would throw this stream out of its group).
            self._keeper = threading.Thread(target=self._keep_membership, daemon=True,
                                            name=f"driver-consumer-{self.groupId}")
            self._keeper.start()

    def unsubscribe(self) -> None:
        """Leave every topic (the group revokes the assignment); the keeper goes on polling."""
        with self._lock:
            if self.subscribed:
                self._consumer.unsubscribe()
            self._assigned = set()

    def _keep_membership(self) -> None:
        while not self._closed.wait(0.2):
            try:
                self.poll()
            except Exception as error:  # a closed consumer, or a broker away: try again
                logger.debug("driver consumer poll failed: %s", error)

    def poll(self) -> None:
        """Serve group callbacks (assignments, revocations) without taking records.

        The asking consumer's events (statistics, errors) are served too, unless it is
        answering a question (it serves them after each one): left unserved, they pile up.
        """
        with self._lock:
            message = self._consumer.poll(0)
        if message is not None and message.error() is not None:
            logger.warning("driver consumer of group %s: %s", self.groupId,
                           message.error().str())
        self._questions.serve()

    def assignment(self, waitSeconds: float = 0.0) -> set[TopicPartition]:
        """The partitions the group gives this stream.

        Waits up to ``waitSeconds`` while the assignment is empty (a rebalance under way).
        """
        deadline = time.monotonic() + waitSeconds
        while True:
            self.poll()
            with self._lock:
                assigned = set(self._assigned)
            if assigned or time.monotonic() >= deadline:
                return assigned
            time.sleep(0.05)

    # -- questions ----------------------------------------------------------------------------

    def partitionsOf(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition counts of the topics that exist (a missing topic is left out)."""
        return dict(self.listTopics(topics).counts)

    def listTopics(self, topics: Iterable[str]) -> TopicListing:
        """Partition counts of ``topics``, and which of them the cluster says do not exist.

        See :func:`~kafka_direct.client.topic_metadata.list_topics`.
        """
        return topic_metadata.list_topics(self._metadata, topics)

    def listMatching(self, matches: Callable[[str], bool], known: Iterable[str] = ()
                     ) -> TopicListing:
        """:meth:`topicsMatching`, and which ``known`` topics the cluster says do not exist.

        See :func:`~kafka_direct.client.topic_metadata.list_matching`.
        """
        return topic_metadata.list_matching(self._metadata, matches, known)

    def topicsMatching(self, matches: Callable[[str], bool]) -> dict[str, int]:
        """Partition counts of every topic whose name ``matches`` (Kafka's own left out)."""
        return topic_metadata.topics_matching(self._metadata, matches)

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, str]:
        """The host of each partition's leader broker."""
        return topic_metadata.leaders(self._metadata, partitions)

    def _metadata(self, topic: str | None = None) -> Any:
        """The cluster's metadata, asked of the group's member: of every topic, or ``topic``'s."""
        with self._lock:
            if topic is None:
                return self._consumer.list_topics(timeout=self.timeout)
            return self._consumer.list_topics(topic, timeout=self.timeout)

    def _listOffsets(self, partitions: Iterable[TopicPartition], spec: Any,
                     readCommitted: bool | None = None, timestamp: bool = False
                     ) -> dict[TopicPartition, int]:
        """One ListOffsets request for ``partitions``.

        Args:
            partitions: The partitions.
            spec: An OffsetSpec (latest, earliest, for_timestamp).
            readCommitted: The isolation level; the stream's own when None.
            timestamp: ``spec`` asks by timestamp (-1, no such record, is an answer).

        Raises:
            UnansweredError: A partition's answer timed out or was no offset (retryable).
        """
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        request = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in partitions}
        if not request:
            return {}
        committed = self.readCommitted if readCommitted is None else readCommitted
        level = (IsolationLevel.READ_COMMITTED if committed
                 else IsolationLevel.READ_UNCOMMITTED)
        for attempt in (1, 2):
            futures = self._admin.list_offsets(request, isolation_level=level,
                                               request_timeout=self.timeout)
            try:
                return {TopicPartition(k.topic, k.partition): answered_future(k, f, self.timeout,
                                                                        timestamp)
                        for k, f in futures.items()}
            except Exception as error:
                if attempt == 2 or "leader" not in str(error).lower():
                    raise
                # A partition just created: refresh the admin client's metadata, once.
                for topic in {tp.topic for tp in request}:
                    self._admin.list_topics(topic, timeout=self.timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    def latestOffsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """End offsets: the last stable offset under read_committed, else the high watermark."""
        return self._questions.offsets(partitions, LATEST_TIME)

    def highWatermarks(self, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, int]:
        """High watermarks: the end of each log whatever the isolation level.

        ``ListOffsets(latest)`` under ``READ_UNCOMMITTED``. Beside :meth:`latestOffsets`
        under ``read_committed`` (the last stable offset) it tells a position held back by
        an open transaction (at or below the high watermark: the records exist) from a log
        that lost offsets (the high watermark below the position too); see
        :func:`kafka_direct.client.log_positions.check_positions`.
        """
        if not self.readCommitted:  # the consumer's own level
            return self._questions.offsets(partitions, LATEST_TIME)
        return self._listOffsets(partitions, offset_spec("latest"), readCommitted=False)

    def earliestOffsets(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, int]:
        """Log start offsets."""
        return self._questions.offsets(partitions, EARLIEST_TIME)

    def offsetsForTimes(self, timestamps: Mapping[TopicPartition, int]
                        ) -> dict[TopicPartition, int]:
        """The first offset at or after each timestamp (ms); the end offset if none."""
        result = {}
        for tp, timestamp in timestamps.items():
            found = self._listOffsets([tp], offset_spec("for_timestamp", int(timestamp)),
                                      timestamp=True)
            result.update(found)
        missing = [tp for tp, offset in result.items() if offset < 0]
        if missing:
            result.update(self.latestOffsets(missing))
        return result

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        request = [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions]
        if not request:
            return {}
        answers = self._group_request(
            lambda: self._consumer.committed(request, timeout=self.timeout))
        return {TopicPartition(a.topic, a.partition): int(a.offset) for a in answers
                if a.offset is not None and a.offset >= 0}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit next-to-read offsets to the group, synchronously."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        request = [KafkaTopicPartition(tp.topic, tp.partition, offset)
                   for tp, offset in sorted(offsets.items())]
        if request:
            self._group_request(lambda: self._consumer.commit(offsets=request,
                                                              asynchronous=False))

    def _group_request(self, action: Callable[[], Any]) -> Any:
        """``action()``, a request to the group's coordinator, retried while it moves.

        Asked again while the coordinator is loading or moving, up to the request timeout.
        The Java consumer waits such answers out until its ``default.api.timeout.ms``: a
        group Kafka has just begun to own answers "not the coordinator" for a moment, which
        is no reason to fail an offset store's commit. Any other error is raised at once.
        """
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout
        pause = _COORDINATOR_BACKOFF_S
        while True:
            try:
                with self._lock:
                    return action()
            except KafkaException as error:
                if (error_code(error) not in _COORDINATOR_MOVING
                        or time.monotonic() + pause > deadline):
                    raise
                logger.debug("the coordinator of group %r is moving (%s): asking again",
                             self.groupId, error)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def close(self) -> None:
        """Leave the group and close the clients."""
        self._closed.set()
        if self._keeper is not None:
            self._keeper.join(5)
        # Once no question is under way (it holds the asking consumers' lock).
        self._questions.close()
        with self._lock:
            try:
                self._consumer.close()
            except Exception as error:
                logger.debug("closing the driver consumer failed: %s", error)
