"""The ingest command's Kafka client: admin, producer and watermarks, with the user's properties.

Everything the job does on a cluster besides the stream (checking that it answers, listing
and creating topics, producing sample events, reading the log end for the summary) goes
through :class:`KafkaCluster`, so the properties given for SASL or SSL apply to all of it.
Errors from librdkafka are redacted: they may quote configuration. Its log lines go through
this module's logger (and so through the command line's redacting formatter), never raw to
stderr.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct.errors import (
    ConfigurationError,
    KafkaDirectError,
    KafkaUnavailableError,
    UnknownTopicOrPartitionError,
)
from kafka_direct.redaction import redact_text

#: How long a created topic may take to show in metadata.
_CREATED_TIMEOUT_S = 30.0

__all__ = ["LEGAL_TOPIC", "KafkaCluster", "check_topic_name"]

logger = logging.getLogger(__name__)

#: Kafka's rule for topic names.
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._\-]{1,249}")

# How long the first metadata request may take before the cluster counts as unreachable;
# a shorter ``socket.timeout.ms`` given by the user shortens it.
_ANSWER_TIMEOUT_S = 10.0


def check_topic_name(name: str) -> None:
    """Raise ConfigurationError unless ``name`` is a legal Kafka topic name."""
    if not LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        raise ConfigurationError(
            f"{name!r} is not a valid Kafka topic name: use 1 to 249 of a-z, A-Z, 0-9, '.', "
            "'_' and '-' (and not '.' or '..')")


class KafkaCluster:
    """A Kafka cluster reached with the given client properties.

    Args:
        params: librdkafka properties, ``bootstrap.servers`` included.

    Raises:
        ConfigurationError: librdkafka rejects a property (an unknown name, a bad value).
    """

    def __init__(self, params: Mapping[str, Any]) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from kafka_direct.client.params import resolve_callbacks

        self.params = resolve_callbacks(params)
        self.bootstrap_servers = str(self.params["bootstrap.servers"])
        try:
            self._admin = AdminClient(self.params, logger=logger)
        except (KafkaException, ValueError, TypeError) as error:
            raise ConfigurationError(
                f"the Kafka client properties are not accepted: {redact_text(str(error))} "
                "(librdkafka's property names apply, not the Java client's)") from error

    def _fail(self, what: str, error: BaseException) -> KafkaDirectError:
        return KafkaUnavailableError(
            f"{what} on the Kafka cluster at {self.bootstrap_servers} failed: "
            f"{redact_text(str(error))}", attempts=1)

    def check(self) -> None:
        """Make sure the cluster answers (its metadata), or raise KafkaUnavailableError."""
        from confluent_kafka import KafkaException

        timeout = _ANSWER_TIMEOUT_S
        configured = self.params.get("socket.timeout.ms")
        if configured is not None and str(configured).isdigit():
            timeout = min(timeout, max(1.0, int(configured) / 1000))
        try:
            self._admin.list_topics(timeout=timeout)
        except KafkaException as error:
            raise KafkaUnavailableError(
                f"no Kafka broker answers at {self.bootstrap_servers} within {timeout:.0f} s "
                f"({redact_text(str(error))}); check --bootstrap-servers and the security "
                "properties (--kafka-param, --kafka-properties)", attempts=1) from error

    def topics(self) -> dict[str, int]:
        """Every topic's partition count (internal topics included)."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._admin.list_topics(timeout=10)
        except KafkaException as error:
            raise self._fail("listing the topics", error) from error
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()
                if topic.error is None}

    def require_topics(self, names: Iterable[str]) -> None:
        """Raise UnknownTopicOrPartitionError for the first of ``names`` the cluster lacks."""
        existing = self.topics()
        missing = [name for name in names if name not in existing]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"topic {missing[0]!r} does not exist on {self.bootstrap_servers}"
                + (f" (nor {', '.join(map(repr, missing[1:]))})" if missing[1:] else "")
                + "; check the name, or pass --create-topics to create it with --partitions "
                "partitions", topic=missing[0])

    def create_topics(self, names: Sequence[str], partitions: int,
                      replication: int = -1) -> list[str]:
        """Create those of ``names`` that do not exist; returns the ones created.

        Args:
            names: Topic names.
            partitions: Partitions of each new topic.
            replication: Replication factor (-1: the cluster's default).
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        existing = self.topics()
        wanted = [name for name in dict.fromkeys(names) if name not in existing]
        if not wanted:
            return []
        try:
            futures = self._admin.create_topics(
                [NewTopic(name, partitions, replication) for name in wanted],
                operation_timeout=30)
        except (ValueError, TypeError) as error:
            raise ConfigurationError(
                f"topics {wanted} cannot be created with {partitions} partitions and "
                f"replication {replication}: {redact_text(str(error))}") from error
        except KafkaException as error:
            raise self._fail(f"creating topics {wanted}", error) from error
        for name, future in futures.items():
            try:
                future.result(30)
            except KafkaException as error:
                raise self._fail(f"creating topic {name!r}", error) from error
        # Kafka answers CreateTopics before every broker's metadata shows the topic: what
        # comes next (starting offsets checked against partition counts, the stream's first
        # listing) must see it whole.
        deadline = time.monotonic() + _CREATED_TIMEOUT_S
        while True:
            counts = self.topics()
            if all(counts.get(name, 0) >= partitions for name in wanted):
                break
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    f"topics {wanted} were created on {self.bootstrap_servers} but its "
                    f"metadata did not show them within {_CREATED_TIMEOUT_S:.0f} s",
                    attempts=1)
            time.sleep(0.05)
        logger.info("created topics %s with %d partitions", wanted, partitions)
        return wanted

    def end_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(log start, log end) per partition of ``topic``."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({**self.params, "group.id": "kafka-direct-watermarks",
                             "enable.auto.commit": False}, logger=logger)
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                      cached=False)
                    for p in partitions}
        except KafkaException as error:
            raise self._fail(f"reading the log end of {topic!r}", error) from error
        finally:
            consumer.close()

    def produce(self, topic: str, values: Iterable[bytes], *,
                keys: Sequence[bytes] | None = None) -> int:
        """Produce records and wait for every acknowledgement; returns how many."""
        from confluent_kafka import Producer

        producer = Producer({**self.params, "linger.ms": 5}, logger=logger)
        errors: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(error)

        count = 0
        for index, value in enumerate(values):
            while True:
                try:
                    producer.produce(topic, value=value,
                                     key=None if keys is None else keys[index],
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
        remaining = producer.flush(60)
        if remaining or errors:
            raise KafkaUnavailableError(
                f"producing to {topic!r} failed: {redact_text(str(errors[:3]))} "
                f"({remaining} undelivered)", attempts=1)
        return count
