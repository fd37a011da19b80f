"""How executors read a KafkaRDD's ranges: the settings shipped with every task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_direct.conf_values import parse_int
from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import redact_params

__all__ = ["Deserializer", "ReadSettings"]

#: A user function turning a key's or a value's bytes into what the record holds.
Deserializer = Callable[[bytes], Any]


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How executors read: shipped to every task with the RDD's function.

    Attributes:
        params: Executor Kafka parameters (already fixed for executors).
        pollTimeoutMs: Longest wait without progress before a task fails.
        failOnDataLoss: Raise DataLossError on deleted offsets (else warn and skip them).
        useConsumerCache: Reuse consumers across tasks in a Python worker.
        keyDeserializer: Turns key bytes into the record's key (None keeps bytes).
        valueDeserializer: Turns value bytes into the record's value (None keeps bytes).
        messageHandler: Turns each ConsumerRecord into what the RDD holds (None keeps it).

    Raises:
        ConfigurationError: ``pollTimeoutMs`` not an int > 0, a flag not a bool, or a
            deserializer or handler given that is not callable.
    """

    params: dict[str, Any]
    pollTimeoutMs: int = 120_000
    failOnDataLoss: bool = True
    useConsumerCache: bool = True
    keyDeserializer: Deserializer | None = None
    valueDeserializer: Deserializer | None = None
    messageHandler: Callable[[ConsumerRecord], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.params, dict):
            raise ConfigurationError(f"ReadSettings params must be a dict, got "
                                     f"{type(self.params).__name__}")
        parse_int("pollTimeoutMs (spark.streaming.kafka.consumer.poll.ms)",
                  self.pollTimeoutMs, 1)
        if not isinstance(self.failOnDataLoss, bool):
            raise ConfigurationError(f"failOnDataLoss must be True or False, got "
                                     f"{self.failOnDataLoss!r}")
        if not isinstance(self.useConsumerCache, bool):
            raise ConfigurationError(f"useConsumerCache must be True or False, got "
                                     f"{self.useConsumerCache!r}")
        # Checked here, on the driver: on an executor a non-callable would fail every task
        # with a TypeError far from the line that passed it.
        for name, shape in (("keyDeserializer", "bytes -> key"),
                            ("valueDeserializer", "bytes -> value"),
                            ("messageHandler", "ConsumerRecord -> element")):
            function = getattr(self, name)
            if function is not None and not callable(function):
                raise ConfigurationError(
                    f"{name} must be a function ({shape}) or None, got "
                    f"{type(function).__name__} {function!r}")

    def __repr__(self) -> str:
        # Public as ``stream.settings``: the parameters may hold SASL and SSL secrets.
        return (f"ReadSettings(params={redact_params(self.params)!r}, "
                f"pollTimeoutMs={self.pollTimeoutMs}, failOnDataLoss={self.failOnDataLoss}, "
                f"useConsumerCache={self.useConsumerCache}, "
                f"keyDeserializer={self.keyDeserializer!r}, "
                f"valueDeserializer={self.valueDeserializer!r}, "
                f"messageHandler={self.messageHandler!r})")
