"""Retrier: how the driver asks Kafka a question again after a transient failure."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kafka_direct.conf_values import parse_int
from kafka_direct.errors import ConfigurationError, KafkaDirectError, KafkaUnavailableError
from kafka_direct.redaction import redact_text

__all__ = ["Retrier"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Retrier:
    """Runs a driver-side Kafka question up to ``maxRetries + 1`` times.

    Our own errors (a ``KafkaDirectError``: a decision, not a glitch) are never retried.
    Answers a partition's leader gives while its leadership moves (a broker failed or was
    fenced, an election ran: "not leader", "leader high watermark not caught up", a fenced
    or unknown leader epoch) are waited out for up to ``leadershipTimeoutMs``
    whatever ``maxRetries`` says, as the Java consumer waits them out until its
    ``default.api.timeout.ms`` (60 s): a broker's failure is a pause, not a stop.

    Attributes:
        maxRetries: Retries after the first attempt (>= 0).
        backoffMs: Pause between attempts in milliseconds (>= 0).
        servers: The bootstrap servers, named in the final error.
        sleep: Pauses for seconds (injectable for tests).
        leadershipTimeoutMs: How long a moving leadership is waited out (>= 0).
        clock: Seconds, monotonic (injectable for tests).

    Raises:
        ConfigurationError: ``maxRetries`` or ``backoffMs`` negative or not an int.
    """

    maxRetries: int = 1
    backoffMs: int = 200
    servers: str = ""
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    leadershipTimeoutMs: int = 60_000
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        parse_int("spark.streaming.kafka.maxRetries", self.maxRetries, 0)
        parse_int("spark.streaming.kafka.retryBackoffMs", self.backoffMs, 0)
        parse_int("leadershipTimeoutMs", self.leadershipTimeoutMs, 0)

    def __call__(self, what: str, action: Callable[[], T]) -> T:
        """``action()``, retried on failure.

        Args:
            what: What the action does, for log lines and the error (``"reading offsets"``).
            action: The question.

        Raises:
            KafkaUnavailableError: Every attempt failed; chained to the last failure.
            ConfigurationError: librdkafka answered ``_INVALID_ARG`` (not retried).
            KafkaDirectError: Raised by ``action`` (not retried).
        """
        attempts = self.maxRetries + 1
        attempt = 1
        asked = 0  # every call, leadership waits included
        settling: float | None = None  # when leadership was first seen moving
        while True:
            try:
                asked += 1
                return action()
            except KafkaDirectError:
                raise
            except Exception as error:
                if _leadership_moving(error):
                    now = self.clock()
                    pause = max(self.backoffMs, 100) / 1000.0
                    if settling is None:
                        settling = now
                        logger.info("%s: a partition's leadership is moving; asking again "
                                    "until it settles (up to %d ms): %s", what,
                                    self.leadershipTimeoutMs, redact_text(str(error)))
                    left = self.leadershipTimeoutMs / 1000.0 - (now - settling)
                    if left > 0:
                        self.sleep(min(pause, left))
                        continue
                    raise KafkaUnavailableError(
                        f"{what} failed: a partition's leadership did not settle within "
                        f"{self.leadershipTimeoutMs} ms ({asked} attempts), last with: "
                        f"{redact_text(str(error))}. Is Kafka at {self.servers} up and its "
                        "brokers in sync?", attempts=asked) from error
                if _invalid_argument(error):
                    # librdkafka refused the question or the configuration: asking again
                    # gets the same answer, and Kafka being down is not why.
                    raise ConfigurationError(
                        f"{what} was refused by librdkafka as invalid: "
                        f"{redact_text(str(error))}; check kafkaParams and the stream's "
                        "settings (the client was not retried)") from None
                if attempt >= attempts:
                    raise KafkaUnavailableError(
                        f"{what} failed {attempts} times, last with: {error}. Is Kafka at "
                        f"{self.servers} up? spark.streaming.kafka.maxRetries sets how often "
                        "to retry", attempts=attempts) from error
                logger.warning("%s failed (attempt %d of %d), retrying in %d ms: %s", what,
                               attempt, attempts, self.backoffMs, error)
                self.sleep(self.backoffMs / 1000.0)
                attempt += 1


def _leadership_moving(error: Exception) -> bool:
    """Whether ``error`` is an answer Kafka gives while a partition's leadership moves."""
    from confluent_kafka import KafkaError, KafkaException

    from kafka_direct.client.offset_answers import UnansweredError

    # Answers only a live partition's leader gives. Not LEADER_NOT_AVAILABLE: librdkafka
    # answers it from its metadata cache for a topic being deleted too, where waiting would
    # only hold up the finding that the topic is gone.
    moving = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE,
              KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}
    if isinstance(error, UnansweredError):
        return error.code in moving
    if isinstance(error, KafkaException) and error.args:
        code = getattr(error.args[0], "code", None)
        return callable(code) and code() in moving
    return False


def _invalid_argument(error: Exception) -> bool:
    """Whether ``error`` is librdkafka's ``_INVALID_ARG`` (a refusal, not a glitch)."""
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(error, KafkaException) or not error.args:
        return False
    code = getattr(error.args[0], "code", None)
    return callable(code) and code() == KafkaError._INVALID_ARG
