"""ListOffsets requests kept between batches, against the real broker.

The driver keeps its ListOffsets requests while the partition set is the same. A topic
deleted and re-created (same partitions, new logs), partitions added, and sets of more
than one request (over 100 partitions) must still get the broker's current ends.
"""

import time

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.retry import Retrier
from kafka_direct.testing.process import wait_for
from kafka_direct.topic_partition import TopicPartition

#: As the planners ask: a new or re-created partition's leader may still answer "not
#: leader" while the broker takes its leadership up (the Retrier waits that out).
_ASK = Retrier(maxRetries=3, backoffMs=200)


def latest(driver, partitions):
    return _ASK("reading latest offsets", lambda: driver.latestOffsets(partitions))


def earliest(driver, partitions):
    return _ASK("reading earliest offsets", lambda: driver.earliestOffsets(partitions))


def _driver(kafka):
    return DriverConsumer(kafka.params(**{"group.id": f"kept-{time.monotonic_ns()}"}),
                          10000)


def test_kept_requests_answer_a_recreated_topic_and_added_partitions(kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    for partition in range(3):
        kafka.produce(topic, [b"x"] * (5 + partition), partition=partition)
    driver = _driver(kafka)
    try:
        partitions = {TopicPartition(topic, p) for p in range(3)}
        assert latest(driver, set(partitions)) == {
            TopicPartition(topic, p): 5 + p for p in range(3)}
        assert earliest(driver, set(partitions)) == dict.fromkeys(partitions, 0)
        # The same set again, after the topic's logs were replaced by new ones.
        kafka.delete_topic(topic)
        kafka.create_topic(topic, 3)
        kafka.produce(topic, [b"y"] * 2, partition=1)
        assert wait_for(lambda: latest(driver, set(partitions)) == {
            TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 2,
            TopicPartition(topic, 2): 0}, 30), latest(driver, set(partitions))
        # Partitions added: a new set, its new partitions answered too.
        kafka.add_partitions(topic, 5)
        kafka.produce(topic, [b"z"] * 3, partition=4)
        grown = partitions | {TopicPartition(topic, 3), TopicPartition(topic, 4)}
        assert wait_for(lambda: latest(driver, set(grown)).get(
            TopicPartition(topic, 4)) == 3, 30)
        assert latest(driver, set(grown)) == {
            TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 2,
            TopicPartition(topic, 2): 0, TopicPartition(topic, 3): 0,
            TopicPartition(topic, 4): 3}
    finally:
        driver.close()


def test_more_than_one_request_of_partitions_gets_every_end(kafka, kafka_topic):
    topics = [kafka_topic(partitions=90) for _ in range(3)]  # 270 partitions: 3 requests
    kafka.produce(topics[1], [b"v"] * 4, partition=89)
    kafka.produce(topics[2], [b"v"] * 7, partition=0)
    driver = _driver(kafka)
    try:
        partitions = {TopicPartition(t, p) for t in topics for p in range(90)}
        for _ in range(2):  # the second time from the kept requests
            ends = latest(driver, set(partitions))
            assert len(ends) == 270
            assert ends[TopicPartition(topics[1], 89)] == 4
            assert ends[TopicPartition(topics[2], 0)] == 7
            assert sum(ends.values()) == 11
        kafka.produce(topics[0], [b"w"] * 2, partition=45)
        assert latest(driver, set(partitions))[TopicPartition(topics[0], 45)] == 2
    finally:
        driver.close()
