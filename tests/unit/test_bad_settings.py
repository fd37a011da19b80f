# ruff: noqa: E501  (the table of cases: one line per case, however long)
"""Bad settings fail at construction with a ConfigurationError that says what and how to fix.

One line per case: (build, expected error class, expected message fragment). ``build`` makes
the object the setting reaches: a direct stream with a Spark setting (``conf``), one with
constructor arguments (``stream``), ``createRDD`` (``rdd``), or a value type. Adding a case
is adding a line.
"""

import math

import pytest

from kafka_direct import (
    ConfigurationError,
    ConsumerStrategies,
    DefaultPerPartitionConfig,
    KafkaUtils,
    OffsetRange,
    TopicPartition,
)
from tests.unit.fake_cluster import FakeCluster, FakeSparkContext, make_stream

PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g"}
T0 = TopicPartition("t", 0)
BEYOND_INT64 = 2**63
K = "spark.streaming.kafka."


def conf(key, value):
    """A direct stream built with the Spark setting ``key=value``."""
    return lambda: _stream(conf={key: value})


def stream(**arguments):
    """A direct stream built with constructor ``arguments``."""
    return lambda: _stream(**arguments)


def rdd(conf=None, **arguments):
    """``createRDD`` of no range with ``arguments`` (fails before asking any broker)."""
    return lambda: KafkaUtils.createRDD(FakeSparkContext(conf), PARAMS, [], **arguments)


def _stream(conf=None, offsets=None, **arguments):
    cluster = FakeCluster()
    cluster.create("t", 1)
    return make_stream(cluster, ConsumerStrategies.Assign([T0], PARAMS, offsets=offsets), conf,
                       **arguments)


CASES = [
    # Spark settings of the direct stream
    (conf(K + "maxRecordsPerBatch", "-1"), ConfigurationError, "maxRecordsPerBatch must be an integer >= 0"),
    (conf(K + "maxRecordsPerBatch", "nan"), ConfigurationError, "maxRecordsPerBatch must be an integer >= 0"),
    (conf(K + "maxRecordsPerBatch", "inf"), ConfigurationError, "maxRecordsPerBatch must be an integer >= 0"),
    (conf(K + "maxRecordsPerBatch", "1.5"), ConfigurationError, "set it to a whole number"),
    (conf(K + "maxRecordsPerBatch", "lots"), ConfigurationError, "got 'lots'"),
    (conf("spark.streaming.backpressure.initialRate", "-5"), ConfigurationError, "initialRate must be >= 0"),
    (conf("spark.streaming.backpressure.initialRate", "nan"), ConfigurationError, "initialRate must be a finite number"),
    (conf("spark.streaming.backpressure.initialRate", "inf"), ConfigurationError, "initialRate must be a finite number"),
    (conf("spark.streaming.backpressure.initialRate", "fast"), ConfigurationError, "initialRate must be a number"),
    (conf(K + "maxRetries", "-1"), ConfigurationError, "maxRetries must be an integer >= 0, got '-1'"),
    (conf(K + "maxRetries", "nan"), ConfigurationError, "maxRetries must be an integer >= 0"),
    (conf(K + "maxRetries", "two"), ConfigurationError, "maxRetries must be an integer >= 0"),
    (conf(K + "maxRatePerPartition", "-1"), ConfigurationError, "maxRatePerPartition must be >= 0"),
    (conf(K + "maxRatePerPartition", "nan"), ConfigurationError, "maxRatePerPartition must be a finite number"),
    (conf(K + "maxRatePerPartition", "inf"), ConfigurationError, "use 0 for no limit"),
    (conf(K + "maxRatePerPartition", "x"), ConfigurationError, "maxRatePerPartition must be a number"),
    (conf(K + "minRatePerPartition", "0"), ConfigurationError, "minRatePerPartition must be an integer >= 1"),
    (conf(K + "minRatePerPartition", "nan"), ConfigurationError, "minRatePerPartition must be an integer >= 1"),
    (conf(K + "minRatePerPartition", "inf"), ConfigurationError, "minRatePerPartition must be an integer >= 1"),
    (conf(K + "retryBackoffMs", "-1"), ConfigurationError, "retryBackoffMs must be an integer >= 0"),
    (conf(K + "retryBackoffMs", "inf"), ConfigurationError, "retryBackoffMs must be an integer >= 0"),
    (conf(K + "driverTimeoutMs", "0"), ConfigurationError, "driverTimeoutMs must be an integer >= 1"),
    (conf(K + "driverTimeoutMs", "nan"), ConfigurationError, "driverTimeoutMs must be an integer >= 1"),
    (conf(K + "rebalanceWaitMs", "-1"), ConfigurationError, "rebalanceWaitMs must be an integer >= 0"),
    (conf(K + "consumer.poll.ms", "0"), ConfigurationError, "consumer.poll.ms must be an integer >= 1"),
    (conf(K + "consumer.poll.ms", "-1"), ConfigurationError, "consumer.poll.ms must be an integer >= 1"),
    (conf(K + "consumer.poll.ms", "nan"), ConfigurationError, "consumer.poll.ms must be an integer >= 1"),
    (conf(K + "failOnDataLoss", "yes"), ConfigurationError, "failOnDataLoss must be true or false"),
    (conf(K + "consumer.cache.enabled", "maybe"), ConfigurationError, "cache.enabled must be true or false"),
    # createRDD agrees with the stream
    (rdd(pollTimeoutMs=0), ConfigurationError, "consumer.poll.ms must be an integer >= 1, got 0"),
    (rdd(pollTimeoutMs=-5), ConfigurationError, "consumer.poll.ms must be an integer >= 1"),
    (rdd(conf={K + "consumer.poll.ms": "0"}), ConfigurationError, "consumer.poll.ms must be an integer >= 1"),
    (rdd(failOnDataLoss="no"), ConfigurationError, "failOnDataLoss must be true or false"),
    (rdd(keyDeserializer="utf-8"), ConfigurationError, "keyDeserializer must be a function (bytes -> key)"),
    (rdd(valueDeserializer=42), ConfigurationError, "valueDeserializer must be a function (bytes -> value)"),
    (rdd(messageHandler="handle"), ConfigurationError, "messageHandler must be a function"),
    # constructor arguments of the stream
    (stream(keyDeserializer=b"utf-8"), ConfigurationError, "keyDeserializer must be a function"),
    (stream(valueDeserializer="json"), ConfigurationError, "valueDeserializer must be a function"),
    (stream(messageHandler=3), ConfigurationError, "messageHandler must be a function"),
    (stream(perPartitionConfig="fast"), ConfigurationError, "perPartitionConfig must be a PerPartitionConfig"),
    (stream(offsets={T0: BEYOND_INT64}), ConfigurationError, "offsets[t-0] is 9223372036854775808, beyond the largest Kafka offset"),
    (stream(offsets={T0: -1}), ConfigurationError, "offsets[t-0] must be an int >= 0"),
    (stream(offsets={T0: "5"}), ConfigurationError, "offsets[t-0] must be an int >= 0"),
    # value types
    (lambda: OffsetRange("t", 0, 0, BEYOND_INT64), ConfigurationError, "untilOffset for t-0 is 9223372036854775808, beyond the largest Kafka offset"),
    (lambda: OffsetRange("t", 0, BEYOND_INT64, BEYOND_INT64), ConfigurationError, "fromOffset for t-0 is 9223372036854775808"),
    (lambda: OffsetRange("t", 0, 1.0, 2), ConfigurationError, "fromOffset for t-0 must be an int >= 0"),
    (lambda: DefaultPerPartitionConfig({}, maxRates={T0: math.nan}), ConfigurationError, "maxRates[t-0] must be a finite number"),
    (lambda: DefaultPerPartitionConfig({}, maxRates={T0: math.inf}), ConfigurationError, "maxRates[t-0] must be a finite number"),
    (lambda: DefaultPerPartitionConfig({}, minRates={T0: math.inf}), ConfigurationError, "minRates[t-0] must be a finite number"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "error", "fragment"), CASES,
                         ids=[f"{i:02d}-{case[2][:40]}" for i, case in enumerate(CASES)])
def test_a_bad_setting_is_refused_at_construction(build, error, fragment):
    with pytest.raises(error) as caught:
        build()
    assert fragment in str(caught.value)


def test_offsets_up_to_int64_are_fine():
    assert OffsetRange("t", 0, 2**63 - 2, 2**63 - 1).count() == 1


def test_a_refused_maximum_of_retries_never_reaches_the_retry_loop():
    # It used to construct, then fail the start with ``AssertionError: unreachable``.
    with pytest.raises(ConfigurationError):
        _stream(conf={K + "maxRetries": "-1"}).start()
