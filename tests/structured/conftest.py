"""A SparkSession for the Structured Streaming tests, with kafka-direct's formats registered."""

import pytest


@pytest.fixture(scope="session")
def spark_session(spark):
    """A classic SparkSession over the session's SparkContext (``spark``), registered."""
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    session = SparkSession.builder.getOrCreate()
    # Few shuffle partitions: the tests' aggregations are tiny, and each task costs.
    session.conf.set("spark.sql.shuffle.partitions", "2")
    kafka_direct.sql.register(session)
    return session
