"""The ingest command's Kafka client: librdkafka's lines go through logging, errors are one line."""

import logging

import pytest

from kafka_direct.app.kafka_cluster import KafkaCluster
from kafka_direct.errors import ConfigurationError, KafkaUnavailableError


def test_librdkafka_lines_go_through_logging_not_raw_to_stderr(capfd, caplog):
    cluster = KafkaCluster({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000,
                            "client.id": "kd-log-check"})
    with pytest.raises(KafkaUnavailableError):
        cluster.check()
    with caplog.at_level(logging.DEBUG, logger="kafka_direct.app.kafka_cluster"):
        cluster._admin.poll(0)  # the admin client hands its log lines over when polled
    assert "%3|" not in capfd.readouterr().err  # no raw librdkafka line
    assert any("Connect to" in r.getMessage() or "FAIL" in r.getMessage()
               for r in caplog.records if r.name == "kafka_direct.app.kafka_cluster")


def test_a_topic_the_admin_client_refuses_is_one_clear_error(kafka):
    cluster = KafkaCluster(kafka.params())
    with pytest.raises(ConfigurationError, match="cannot be created with 100000000 partitions"):
        cluster.create_topics(["kd-too-many-partitions"], 100_000_000)
