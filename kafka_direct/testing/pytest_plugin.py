"""pytest fixtures for pipelines built on kafka-direct (enabled by installing the package).

Session-wide: ``kafka`` (a started :class:`KafkaService`: Apache Kafka unless the
environment names another), ``kafka_cluster`` (Apache Kafka with three brokers),
``postgres`` (a started :class:`PostgresService`), ``spark`` (a ``local[2,2]``
SparkContext whose Python processes fork from a pre-imported server), ``spark_connect``
(a started :class:`SparkConnectServer`), ``connect_session`` (a Spark Connect client
session on it) and ``schema_registry`` (a Schema Registry for Avro tests). Per test:
``kafka_topic`` (a factory of fresh topics) and ``pg_schema`` (a fresh schema, dropped
after).
Services start on first use only, so a test run that needs none starts none.

Every test that uses one of the fixtures that start a service (directly or through a fixture
of its own) is marked ``services``: ``pytest -m "not services"`` runs the tests that need no
broker, no PostgreSQL and no Spark JVM.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_direct.errors import ServiceError
from kafka_direct.runtime.spark import spark_context
from kafka_direct.testing.apache_kafka import ApacheKafka
from kafka_direct.testing.broker_choice import kafka_service
from kafka_direct.testing.kafka import KafkaService, TestcontainersKafka
from kafka_direct.testing.postgres import PostgresService, postgres_service
from kafka_direct.testing.spark_connect import SparkConnectServer

_names = itertools.count()

#: The fixtures that start a real service; a test using any of them gets the ``services`` mark.
#: (``schema_registry`` is a thread of the test process, no service.)
SERVICE_FIXTURES = frozenset({"kafka", "kafka_cluster", "postgres", "spark", "spark_connect",
                              "connect_session", "kafka_topic", "pg_schema"})


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``services`` mark."""
    config.addinivalue_line(
        "markers", "services: the test needs real services (a Kafka broker, PostgreSQL, a "
        "Spark JVM); deselect with -m 'not services'")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``services`` every test that uses a service fixture (before -m selects)."""
    for item in items:
        # fixturenames is the closure: fixtures that use a service fixture count too.
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaService]:
    """A Kafka broker for the test session (embedded unless the environment names one)."""
    service = kafka_service()
    try:
        service.start()
    except ServiceError as error:
        getattr(service, "close", service.stop)()  # what a failed start made goes too
        if isinstance(service, TestcontainersKafka):
            pytest.skip(f"testcontainers Kafka unavailable: {error}")
        raise
    yield service
    close = getattr(service, "close", service.stop)
    close()


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[ApacheKafka]:
    """Apache Kafka with three brokers for the test session, for fault tests.

    Replication factor 3, ``min.insync.replicas=2``, unclean leader election off; its nodes
    can be killed, restarted and paused (:class:`ApacheKafka`'s fault helpers). A test that
    leaves a node down or paused brings it back before it ends.
    """
    with ApacheKafka(brokers=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresService]:
    """A PostgreSQL server for the test session (embedded unless KAFKA_DIRECT_PG_DSN is set)."""
    service = postgres_service()
    service.start()
    yield service
    close = getattr(service, "close", service.stop)
    close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2,2] SparkContext for the session.

    Its Python processes (workers, the data sources' planners) fork from a server that has
    their imports done, as the ingest job's do (:mod:`kafka_direct.runtime.fork_server`):
    a structured query's tests then start in a fraction of the time. With
    ``KAFKA_DIRECT_FORK_SERVER=off`` they start as PySpark starts them, each a new
    interpreter.
    """
    with spark_context(fork_server=True) as sc:
        yield sc


@pytest.fixture(scope="session")
def spark_connect() -> Iterator[SparkConnectServer]:
    """A local Spark Connect server (its own JVM and Python workers) for the session."""
    server = SparkConnectServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def connect_session(spark_connect: SparkConnectServer) -> Iterator[Any]:
    """A Spark Connect client session on :func:`spark_connect`'s server."""
    session = spark_connect.session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[Any]:
    """A Confluent-compatible Schema Registry on 127.0.0.1 for the session.

    Served over HTTP, so Spark's executors reach it too
    (:class:`~kafka_direct.testing.schema_registry.LocalSchemaRegistry`).
    """
    from kafka_direct.testing.schema_registry import LocalSchemaRegistry

    with LocalSchemaRegistry() as registry:
        yield registry


@pytest.fixture
def kafka_topic(kafka: KafkaService) -> Callable[..., str]:
    """Create a fresh, uniquely named topic: ``kafka_topic(partitions=3)`` -> its name."""

    def create(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None
               ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}-{next(_names)}"
        return kafka.create_topic(name, partitions, config)

    return create


@pytest.fixture
def pg_schema(postgres: PostgresService) -> Iterator[str]:
    """A fresh PostgreSQL schema for the test, dropped afterwards."""
    name = f"test_{uuid.uuid4().hex[:10]}"
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE SCHEMA "{name}"')
    yield name
    connection = postgres.connect()
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        connection.close()
