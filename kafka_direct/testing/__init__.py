"""Real services for testing pipelines: Apache Kafka, PostgreSQL and Spark, self-started.

Use them as context managers::

    with ApacheKafka() as kafka, EmbeddedPostgres() as pg, spark_context() as sc:
        kafka.create_topic("events", partitions=3)
        ...

or as pytest fixtures (``kafka``, ``kafka_cluster``, ``postgres``, ``spark``,
``spark_connect``, ``connect_session``, ``kafka_topic``, ``pg_schema``), registered by
the ``kafka_direct`` pytest plugin that installing kafka-direct enables.

:class:`KafkaConnect` runs a Kafka Connect standalone worker beside them, with connector
plugins such as Debezium's JDBC sink: the benchmarks' JVM peers.
"""

from __future__ import annotations

from kafka_direct.runtime.spark import spark_context
from kafka_direct.testing.apache_kafka import ApacheKafka
from kafka_direct.testing.broker_choice import kafka_service, local_kafka
from kafka_direct.testing.kafka import (
    EmbeddedKafka,
    ExternalKafka,
    KafkaService,
    TestcontainersKafka,
)
from kafka_direct.testing.kafka_connect import KafkaConnect
from kafka_direct.testing.postgres import (
    EmbeddedPostgres,
    ExternalPostgres,
    PostgresService,
    postgres_service,
)
from kafka_direct.testing.process import free_port
from kafka_direct.testing.spark_cluster import local_cluster_context, wait_for_executors
from kafka_direct.testing.spark_connect import SparkConnectServer

__all__ = [
    "ApacheKafka",
    "EmbeddedKafka",
    "EmbeddedPostgres",
    "ExternalKafka",
    "ExternalPostgres",
    "KafkaConnect",
    "KafkaService",
    "PostgresService",
    "SparkConnectServer",
    "TestcontainersKafka",
    "free_port",
    "kafka_service",
    "local_cluster_context",
    "local_kafka",
    "postgres_service",
    "spark_context",
    "wait_for_executors",
]
