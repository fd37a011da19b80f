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
    LocationStrategies,
    OffsetRange,
    StreamingContext,
    TopicPartition,
)
from tests.fakes.fake_cluster import FakeCluster, FakeSparkContext, make_stream

PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g"}
T0 = TopicPartition("t", 0)
BEYOND_INT64 = 2**63
K = "spark.streaming.kafka."
JAAS_SECRET = "Jz8-secret-jaas"
JAAS = {**PARAMS, "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="u" password="{JAAS_SECRET}";'}


def conf(key, value):
    """A direct stream built with the Spark setting ``key=value``."""
    return lambda: _stream(conf={key: value})


def stream(**arguments):
    """A direct stream built with constructor ``arguments``."""
    return lambda: _stream(**arguments)


def rdd(conf=None, params=PARAMS, **arguments):
    """``createRDD`` of no range with ``arguments`` (fails before asking any broker)."""
    return lambda: KafkaUtils.createRDD(FakeSparkContext(conf), params, [], **arguments)


def direct(params):
    """``KafkaUtils.createDirectStream`` with ``params``, real driver consumer and all."""
    return lambda: KafkaUtils.createDirectStream(
        StreamingContext(FakeSparkContext(), 1), LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe(["t"], params))


def timestamp(value):
    """A consumer strategy with ``startingTimestamp=value``."""
    return lambda: ConsumerStrategies.Assign([T0], PARAMS, startingTimestamp=value)


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
    (conf(K + "minOffsetsPerTask", "-1"), ConfigurationError,
     "minOffsetsPerTask must be an integer >= 0, got '-1'; set it to a whole number from 0"),
    (conf(K + "maxRangesPerTask", "0"), ConfigurationError,
     "maxRangesPerTask must be an integer >= 1, got '0'; set it to a whole number from 1"),
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
    # kafkaParams librdkafka refuses: at construction, never as "is Kafka up?" at the start
    (direct(JAAS), ConfigurationError, "kafkaParams['sasl.jaas.config'] is a Java-client setting"),
    (direct(JAAS), ConfigurationError, "sasl.mechanism, sasl.username and sasl.password"),
    (rdd(params=JAAS), ConfigurationError, "kafkaParams['sasl.jaas.config'] is a Java-client setting"),
    (direct({**PARAMS, "fetch.wait.max.ms": "soon"}), ConfigurationError, 'kafkaParams refused by librdkafka: Invalid value for configuration property "fetch.wait.max.ms"'),
    (rdd(params={**PARAMS, "fetch.wait.max.ms": "soon"}), ConfigurationError, '"fetch.wait.max.ms"'),
    (direct({**PARAMS, "no.such.property": 1}), ConfigurationError, "see librdkafka's CONFIGURATION.md"),
    # createRDD agrees with the stream
    # createRDD's argument is named as the user wrote it, not as the Spark setting it overrides
    (rdd(pollTimeoutMs=0), ConfigurationError, "pollTimeoutMs must be an integer >= 1, got 0"),
    (rdd(pollTimeoutMs=-5), ConfigurationError, "pollTimeoutMs must be an integer >= 1"),
    (rdd(pollTimeoutMs="soon"), ConfigurationError, "pollTimeoutMs must be an integer >= 1"),
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
    (timestamp(True), ConfigurationError, "startingTimestamp must be epoch milliseconds (an int >= 0, not a bool), got True"),
    (timestamp(-1), ConfigurationError, "startingTimestamp must be epoch milliseconds (an int >= 0, not a bool), got -1"),
    (timestamp(-2), ConfigurationError, "auto.offset.reset"),
    (timestamp(-5), ConfigurationError, "got -5"),
    (timestamp(1.5e12), ConfigurationError, "got 1500000000000.0"),
    (timestamp("1700000000000"), ConfigurationError, "startingTimestamp must be epoch milliseconds or a dict"),
    (timestamp({T0: "abc"}), ConfigurationError, "startingTimestamp[t-0] must be epoch milliseconds (an int >= 0, not a bool), got 'abc'"),
    (timestamp({T0: False}), ConfigurationError, "startingTimestamp[t-0] must be epoch milliseconds"),
    (timestamp({T0: -1}), ConfigurationError, "startingTimestamp[t-0] must be epoch milliseconds"),
    (timestamp({("t", 0): 5}), ConfigurationError, "startingTimestamp keys must be TopicPartition, got ('t', 0)"),
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


@pytest.mark.parametrize("build", [direct(JAAS), rdd(params=JAAS),
                                   direct({**JAAS, "sasl.jaas.config": "x", "sasl.password": JAAS_SECRET,
                                           "fetch.wait.max.ms": JAAS_SECRET})])
def test_a_refused_kafka_param_quotes_no_secret(build):
    with pytest.raises(ConfigurationError) as caught:
        build()
    shown = f"{caught.value} {caught.value!r} {caught.value.__cause__!r}"
    assert JAAS_SECRET not in shown, shown
