"""Which Kafka broker the environment asks for: Apache Kafka's own unless told otherwise.

* ``KAFKA_DIRECT_BOOTSTRAP=host:port[,...]``: a broker that already runs
  (:class:`~kafka_direct.testing.kafka.ExternalKafka`);
* else ``KAFKA_DIRECT_BROKER``: ``apache`` (the default: Apache Kafka, KRaft, started by the
  code itself, :class:`~kafka_direct.testing.apache_kafka.ApacheKafka`), ``noida`` or
  ``tansu`` (Kafka-protocol emulators) or ``testcontainers`` (Apache Kafka in Docker).

:func:`kafka_service` gives the broker a test session or a job shares; :func:`local_kafka`
gives a broker of the test's own, which it may stop, kill or pause (a local process even
when the session's broker is an external one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kafka_direct.errors import ConfigurationError
from kafka_direct.testing.apache_kafka import ApacheKafka
from kafka_direct.testing.kafka import (
    BOOTSTRAP_ENV,
    EmbeddedKafka,
    ExternalKafka,
    KafkaService,
    TestcontainersKafka,
)

__all__ = ["BROKERS", "BROKER_ENV", "broker_choice", "kafka_service", "local_kafka", "main",
           "prepare"]

BROKER_ENV = "KAFKA_DIRECT_BROKER"
#: The values ``KAFKA_DIRECT_BROKER`` takes; the first is the default.
BROKERS = ("apache", "noida", "tansu", "testcontainers")


def broker_choice() -> str:
    """``KAFKA_DIRECT_BROKER``, checked (``apache`` when unset).

    Raises:
        ConfigurationError: Any other value, naming the variable and the choices.
    """
    choice = os.environ.get(BROKER_ENV, "").strip().lower() or BROKERS[0]
    if choice not in BROKERS:
        raise ConfigurationError(
            f"{BROKER_ENV} must be one of {', '.join(BROKERS)} (apache when unset), "
            f"got {os.environ.get(BROKER_ENV)!r}")
    return choice


def kafka_service() -> KafkaService:
    """The broker the environment asks for (not started yet).

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_BROKER`` names no broker.
    """
    choice = broker_choice()
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        return ExternalKafka(external)
    if choice == "testcontainers":
        return TestcontainersKafka()
    if choice in ("noida", "tansu"):
        return EmbeddedKafka(choice)
    return ApacheKafka()


def local_kafka(brokers: int = 1, data_dir: str | Path | None = None,
                port: int | None = None) -> ApacheKafka | EmbeddedKafka:
    """A broker process of the caller's own, not started yet.

    An emulator when ``KAFKA_DIRECT_BROKER`` chooses one, else Apache Kafka with ``brokers``
    nodes.

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_BROKER`` names no broker, or an emulator is chosen
            and ``brokers`` is more than one (an emulator is one process).
    """
    choice = broker_choice()
    if choice in ("noida", "tansu"):
        if brokers != 1:
            raise ConfigurationError(
                f"{BROKER_ENV}={choice} runs one broker; a cluster of {brokers} needs "
                f"{BROKER_ENV}=apache")
        return EmbeddedKafka(choice, data_dir=data_dir, port=port)
    return ApacheKafka(brokers, data_dir=data_dir, port=port)


def prepare() -> str | None:
    """Get the chosen broker ready to start: Apache Kafka's jars resolved and cached.

    Returns:
        The folder of Kafka's jars, or None when the broker chosen needs none (an external
        one, an emulator, testcontainers).

    Raises:
        ConfigurationError: ``KAFKA_DIRECT_BROKER`` or ``KAFKA_HOME`` is wrong.
        ServiceError: The jars could not be resolved (the message names the three ways).
    """
    from kafka_direct.testing.kafka_jars import kafka_jars
    from kafka_direct.testing.kafka_storage import bootstrap_snapshot

    if broker_choice() != "apache" or os.environ.get(BOOTSTRAP_ENV):
        return None
    jars = kafka_jars()
    bootstrap_snapshot(jars)  # the storage format's snapshot, made once per release
    return str(jars)


def main() -> int:
    """The set-up ``./run`` does before the tests, the ingest job and the demo.

    Resolves and caches Apache Kafka's jars when it is the broker chosen (the first time:
    about 60 MB from Maven Central, its progress on the error output). Exit code 2 for a
    wrong setting, 1 when the jars cannot be had, naming the ways to get them.
    """
    from kafka_direct.errors import ServiceError

    try:
        folder = prepare()
    except ConfigurationError as error:
        print(f"kafka-direct: {error}", file=sys.stderr)
        return 2
    except ServiceError as error:
        print(f"kafka-direct: {error}", file=sys.stderr)
        return 1
    if folder is not None:
        print(folder)
    return 0

