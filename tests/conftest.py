"""Fixtures shared across the suite's folders."""

import pytest

from kafka_direct.testing import EmbeddedKafka


@pytest.fixture
def params(kafka):
    return kafka.params(**{"group.id": "it"})


@pytest.fixture
def own_kafka():
    """A broker of the test's own, for tests that stop, pause or break it."""
    with EmbeddedKafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark_session(spark):
    """A classic SparkSession over the session's SparkContext (``spark``), registered.

    For the Structured Streaming tests, with kafka-direct's formats registered.
    """
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    session = SparkSession.builder.getOrCreate()
    # Few shuffle partitions: the tests' aggregations are tiny, and each task costs.
    session.conf.set("spark.sql.shuffle.partitions", "2")
    kafka_direct.sql.register(session)
    return session
