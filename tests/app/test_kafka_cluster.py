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


class _LaggingAdmin:
    """An AdminClient whose metadata shows a created topic only from the third question on
    (Kafka spreads a new topic's metadata to the brokers after it answers CreateTopics)."""

    def __init__(self):
        self.created = {}
        self.asked = 0

    def create_topics(self, topics, operation_timeout):
        from concurrent.futures import Future

        futures = {}
        for topic in topics:
            self.created[topic.topic] = topic.num_partitions
            futures[topic.topic] = Future()
            futures[topic.topic].set_result(None)
        return futures

    def list_topics(self, timeout):
        from types import SimpleNamespace

        self.asked += 1
        shown = self.created if self.asked > 2 else {}
        return SimpleNamespace(topics={
            name: SimpleNamespace(error=None, partitions=dict.fromkeys(range(count)))
            for name, count in shown.items()})


def test_created_topics_are_returned_once_metadata_shows_them():
    # The job checks its starting offsets against the topics' partition counts right after
    # creating them: a topic created but not yet in metadata passed every check.
    cluster = KafkaCluster({"bootstrap.servers": "127.0.0.1:1"})
    cluster._admin = _LaggingAdmin()
    assert cluster.create_topics(["fresh"], 3) == ["fresh"]
    assert cluster.topics() == {"fresh": 3}
