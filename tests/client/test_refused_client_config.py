"""A configuration librdkafka refuses is a ConfigurationError: never retried, never "is Kafka
up?" (KafkaUnavailableError), and never quoting a secret."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct import ConsumerStrategies, TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.errors import ConfigurationError
from tests.fakes.fake_cluster import FakeCluster, make_stream

SECRET = "Qw7-not-to-be-shown"
PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "sasl.password": SECRET}


def refused(params):
    raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                    f'Invalid value "{SECRET}" for configuration property '
                                    '"sasl.password"'))


def test_a_driver_consumer_librdkafka_refuses_fails_once_as_a_configuration_error():
    cluster = FakeCluster()
    cluster.create("t", 1)
    attempts = []

    def factory(params):
        attempts.append(params)
        return DriverConsumer(params, consumerFactory=refused, adminFactory=refused)

    stream = make_stream(cluster, ConsumerStrategies.Assign([TopicPartition("t", 0)], PARAMS),
                         {"spark.streaming.kafka.maxRetries": "3",
                          "spark.streaming.kafka.retryBackoffMs": "0"})
    stream._driverFactory = factory
    with pytest.raises(ConfigurationError) as caught:
        stream.start()
    assert len(attempts) == 1
    assert "sasl.password" in str(caught.value)
    assert "librdkafka" in str(caught.value)
    assert SECRET not in f"{caught.value} {caught.value!r}"


def test_an_invalid_argument_is_not_retried_nor_called_unavailable():
    calls = []

    def action():
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "Invalid argument"))

    with pytest.raises(ConfigurationError) as caught:
        Retrier(maxRetries=3, backoffMs=0, servers="k:9092")("reading end offsets", action)
    assert calls == [1]
    assert "Is Kafka" not in str(caught.value)
    assert "reading end offsets" in str(caught.value)
