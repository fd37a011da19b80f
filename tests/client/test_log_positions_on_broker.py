"""Log end below a stream's position on the real broker: an open transaction (wait) versus a
re-created topic (data loss), told apart by the driver consumer's high watermarks."""

import logging
import time

import pytest
from confluent_kafka import Producer

from kafka_direct import DataLossError, TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.client.log_positions import check_positions
from kafka_direct.client.retry import Retrier

NAME = "broker test stream"


def driver_for(kafka, isolation="read_committed"):
    return DriverConsumer(kafka.params(**{"group.id": f"positions-{time.monotonic_ns()}",
                                          "isolation.level": isolation}), 15_000)


def retrying():
    return Retrier(maxRetries=0, backoffMs=0)


def test_a_position_behind_an_open_transaction_waits_and_is_not_data_loss(kafka, kafka_topic):
    topic = kafka_topic()
    tp = TopicPartition(topic, 0)
    kafka.produce(topic, [b"committed"] * 5, partition=0)
    producer = Producer(kafka.params(**{"transactional.id": f"open-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic, value=b"pending", partition=0)
    assert producer.flush(30) == 0  # written, transaction still open
    driver = driver_for(kafka)
    try:
        stable = driver.latestOffsets([tp])
        assert stable == {tp: 5}  # the last stable offset waits for the transaction
        # A read_uncommitted run stored position 8: the records exist, the stream waits.
        positions = {tp: 8}
        ends = check_positions(NAME, stable, positions, driver, True, retrying())
        assert ends == {tp: 8} and positions == {tp: 8}  # an empty range, no DataLossError
        assert driver.highWatermarks([tp]) == {tp: 8}
    finally:
        producer.abort_transaction(30)
        driver.close()


def _recreate(kafka, topic):
    admin = kafka.admin()
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    except Exception as error:
        pytest.skip(f"the broker cannot delete topics: {error}")
    deadline = time.monotonic() + 30
    while True:  # the deletion shows in the metadata, then create it afresh
        try:
            kafka.create_topic(topic, 1)
            return
        except Exception:
            assert time.monotonic() < deadline, "the topic could not be re-created"
            time.sleep(0.2)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_recreated_topic_below_the_position_is_data_loss_naming_the_partition(
        kafka, kafka_topic, isolation):
    topic = kafka_topic()
    tp = TopicPartition(topic, 0)
    kafka.produce(topic, [b"old"] * 6, partition=0)
    _recreate(kafka, topic)
    kafka.produce(topic, [b"new"] * 2, partition=0)
    driver = driver_for(kafka, isolation)
    try:
        ends = driver.latestOffsets([tp])
        assert driver.highWatermarks([tp]) == {tp: 2}
        with pytest.raises(DataLossError) as caught:
            check_positions(NAME, ends, {tp: 6}, driver, True, retrying())
        error = caught.value
        assert (error.topic, error.partition, error.position, error.logEndOffset,
                error.logStartOffset) == (topic, 0, 6, 2, 0)
        assert f"{topic}-0 ends at 2, below the stream's position 6" in str(error)
    finally:
        driver.close()


def test_without_fail_on_data_loss_a_recreated_topic_goes_on_from_its_log_start(
        kafka, kafka_topic, caplog):
    topic = kafka_topic()
    tp = TopicPartition(topic, 0)
    kafka.produce(topic, [b"old"] * 6, partition=0)
    _recreate(kafka, topic)
    kafka.produce(topic, [b"new"] * 2, partition=0)
    driver = driver_for(kafka)
    positions = {tp: 6}
    try:
        with caplog.at_level(logging.WARNING, logger="kafka_direct.client.log_positions"):
            ends = check_positions(NAME, driver.latestOffsets([tp]), positions, driver, False,
                                   retrying())
    finally:
        driver.close()
    assert ends == {tp: 2} and positions == {tp: 0}  # the new log is read from its start
    assert f"{topic}-0 ends at 2, below the stream's position 6" in caplog.text
