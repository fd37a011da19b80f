"""Consumer strategies against the real broker: pattern dialect, cooperative rebalancing."""

import time

import pytest
from confluent_kafka import KafkaException

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver

PATTERN_TOPICS = ("pat1", "patd", "a", "a-archive")


@pytest.fixture
def pattern_topics(kafka):
    for topic in PATTERN_TOPICS:
        try:
            kafka.create_topic(topic)
        except KafkaException as error:  # a second run on the same broker
            if "exist" not in str(error).lower():
                raise
        kafka.produce(topic, [topic.encode()] * 2)
    return PATTERN_TOPICS


@pytest.mark.parametrize("groupManagement", [True, False], ids=["group", "no-group"])
@pytest.mark.parametrize(("pattern", "expected"), [(r"pat\d", {"pat1"}), ("a|b", {"a"})])
def test_pattern_reads_the_topics_python_re_fullmatches(spark, kafka, pattern_topics,
                                                        groupManagement, pattern, expected):
    params = kafka.params(**{"group.id": f"pattern-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest"})
    driver = Driver(spark)
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.SubscribePattern(pattern, params, groupManagement=groupManagement))
    read = []
    stream.foreachRDD(lambda rdd: read.extend({r.topic for r in rdd.collect()}))
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    assert set(read) == expected


def test_cooperative_rebalancing_adds_a_new_partition_without_losing_the_others(
        spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    for partition in (0, 1):
        kafka.produce(topic, [b"x"] * 3, partition=partition)
    params = kafka.params(**{"group.id": f"coop-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "cooperative-sticky",
                             "topic.metadata.refresh.interval.ms": 500})
    driver = Driver(spark, conf={"spark.streaming.kafka.rebalanceWaitMs": "3000"})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))
    batches = []
    stream.foreachRDD(lambda rdd: batches.append(
        sorted((r.partition, r.fromOffset, r.untilOffset) for r in rdd.offsetRanges())))
    driver.start()
    try:
        driver.run(1)
        kafka.add_partitions(topic, 3)
        kafka.produce(topic, [b"new"] * 4, partition=2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(p == 2 for p, _, _ in batches[-1]):
            driver.run(1)
        assert driver.ssc.awaitTermination(0.1) is False  # no PartitionsRevokedError
    finally:
        driver.stop()
    assert batches[0] == [(0, 0, 3), (1, 0, 3)]
    assert batches[-1] == [(0, 3, 3), (1, 3, 3), (2, 0, 4)]
