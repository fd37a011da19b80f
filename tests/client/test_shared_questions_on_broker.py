"""A question's requests asked by a few consumers at once, against the real broker.

Differential: the driver consumer asking with three consumers answers exactly what it
answers asking with one (ends, starts, the kept requests asked again, a partition the
cluster does not have), and closes every client it made.
"""

import threading
import time

import pytest

from kafka_direct.client import asking_consumers
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.topic_partition import TopicPartition

_ASK = Retrier(maxRetries=3, backoffMs=200)


def _driver(kafka, askers):
    return DriverConsumer(kafka.params(**{"group.id": f"shared-{time.monotonic_ns()}"}),
                          10_000, askers=askers)


@pytest.fixture
def small_requests(monkeypatch):
    # Requests of 3 partitions: 20 partitions make 7 requests, dealt to 3 consumers.
    monkeypatch.setattr(asking_consumers, "_REQUEST_PARTITIONS", 3)


@pytest.mark.usefixtures("small_requests")
def test_three_askers_answer_what_one_answers(kafka, kafka_topic):
    topics = [kafka_topic(partitions=5) for _ in range(4)]
    for t, topic in enumerate(topics):
        for partition in range(5):
            kafka.produce(topic, [b"v"] * (1 + t * 5 + partition), partition=partition)
    kafka.delete_records(topics[2], 3, 4)
    partitions = {TopicPartition(topic, p) for topic in topics for p in range(5)}
    serial, shared = _driver(kafka, 1), _driver(kafka, 3)
    try:
        for _ in range(2):  # the second time from the kept requests
            one = _ASK("ends", lambda: serial.latestOffsets(set(partitions)))
            many = _ASK("ends", lambda: shared.latestOffsets(set(partitions)))
            assert many == one == {TopicPartition(topic, p): 1 + t * 5 + p
                                   for t, topic in enumerate(topics) for p in range(5)}
            assert list(many) == list(one)
            starts = _ASK("starts", lambda: shared.earliestOffsets(set(partitions)))
            assert starts == _ASK("starts", lambda: serial.earliestOffsets(set(partitions)))
            assert starts.pop(TopicPartition(topics[2], 3)) == 4
            assert set(starts.values()) == {0}
        kafka.produce(topics[3], [b"w"] * 2, partition=4)
        assert _ASK("ends", lambda: shared.latestOffsets(set(partitions)))[
            TopicPartition(topics[3], 4)] == 22
    finally:
        serial.close()
        shared.close()


@pytest.mark.usefixtures("small_requests")
def test_a_partition_the_cluster_lacks_fails_as_when_asked_by_one(kafka, kafka_topic):
    topics = [kafka_topic(partitions=5) for _ in range(3)]
    # The last topic's partition 9 does not exist: a request of a helper's share.
    partitions = [TopicPartition(topic, p) for topic in topics for p in range(5)]
    partitions.append(TopicPartition(topics[2], 9))
    failures = []
    for askers in (1, 3):
        driver = _driver(kafka, askers)
        try:
            # A topic just made can answer "not leader" for a moment after its metadata
            # shows leaders (the broker has yet to take them on): every partition it has
            # answers before the one it lacks is asked, so that both ask the same cluster.
            _ASK("ends", lambda d=driver: d.latestOffsets(partitions[:-1]))
            with pytest.raises(Exception) as info:  # the type is compared below
                driver.latestOffsets(partitions)
            failures.append((type(info.value), str(info.value)))
        finally:
            driver.close()
    assert failures[0] == failures[1]
    assert f"{topics[2]}-9" in failures[0][1] or "Unknown partition" in failures[0][1]


@pytest.mark.usefixtures("small_requests")
def test_every_client_made_is_closed_with_the_driver_consumer(kafka, kafka_topic):
    from confluent_kafka import Consumer

    topic = kafka_topic(partitions=12)
    partitions = {TopicPartition(topic, p) for p in range(12)}
    made = []

    def factory(params):
        made.append(Consumer(params))
        return made[-1]

    driver = DriverConsumer(kafka.params(**{"group.id": f"shared-{time.monotonic_ns()}"}),
                            10_000, consumerFactory=factory, askers=3)
    try:
        assert _ASK("ends", lambda: driver.latestOffsets(partitions)) == dict.fromkeys(
            partitions, 0)
        assert len(made) == 4  # the asking consumer, the group member, two helpers
        threads = [t for t in threading.enumerate()
                   if t.name.startswith(f"driver-questions-{driver.groupId}_")]
        assert len(threads) == 2
    finally:
        driver.close()
    for consumer in made:  # a closed consumer refuses every call
        with pytest.raises(RuntimeError, match="closed"):
            consumer.poll(0)
    assert not any(t.is_alive() for t in threads)
