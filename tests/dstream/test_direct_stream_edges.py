"""The direct stream at its edges, against the real broker: a failed batch is never
committed, a successful one always is (also on stop), a re-created topic is data loss."""

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from kafka_direct import ConsumerStrategies, DataLossError, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver


class Boom(Exception):
    pass


def group(name):
    return f"{name}-{time.monotonic_ns()}"


def direct(driver, kafka, topic, name, **strategy_options):
    params = kafka.params(**{"group.id": name, "auto.offset.reset": "earliest",
                             "topic.metadata.refresh.interval.ms": 500})
    return KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([topic], params, **strategy_options))


def committed(kafka, name, topic, partitions=1):
    plain = Consumer(kafka.params(**{"group.id": name}))
    try:
        return {tp.partition: tp.offset for tp in plain.committed(
            [KafkaTP(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        plain.close()


def test_a_failed_batch_is_not_committed_and_is_read_again(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 5, partition=0)
    name = group("failed")
    driver = Driver(spark)
    stream = direct(driver, kafka, topic, name)
    outcomes = []
    stream.foreachRDD(lambda rdd: stream.commitAsync(
        rdd.offsetRanges(), lambda offsets, error: outcomes.append((offsets, error))))

    def second_output(time_, rdd):
        rdd.count()
        raise Boom("the second output operation fails")

    stream.foreachRDD(second_output)
    driver.start()
    driver.clock.advance(1000)
    with pytest.raises(Boom):
        driver.ssc.awaitTermination(60)
    assert driver.ssc.state == "STOPPED"
    assert committed(kafka, name, topic) == {0: -1001}  # nothing committed
    assert outcomes and outcomes[0][0] is None and "did not succeed" in str(outcomes[0][1])

    again = Driver(spark)
    restarted = direct(again, kafka, topic, name)
    seen = []
    restarted.foreachRDD(lambda rdd: (seen.extend(rdd.offsetRanges()),
                                      restarted.commitAsync(rdd.offsetRanges())))
    again.start()
    try:
        again.run(1)
    finally:
        again.stop()
    assert [(r.fromOffset, r.untilOffset) for r in seen] == [(0, 5)]
    assert committed(kafka, name, topic) == {0: 5}


def test_the_last_successful_batch_is_committed_on_stop(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 4, partition=0)
    name = group("last")
    driver = Driver(spark)
    stream = direct(driver, kafka, topic, name)
    stream.foreachRDD(lambda rdd: stream.commitAsync(rdd.offsetRanges()))
    driver.start()
    try:
        driver.run(1)
        kafka.produce(topic, [b"y"] * 3, partition=0)
        driver.run(1)
    finally:
        driver.stop(graceful=True)
    assert committed(kafka, name, topic) == {0: 7}
    outcome = []
    stream.commitAsync(stream.batchRanges[max(stream.batchRanges)],
                       lambda offsets, error: outcome.append(error))
    assert "stopped" in str(outcome[0])


def test_a_recreated_topic_stops_the_stream_with_data_loss(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 6, partition=0)
    driver = Driver(spark)
    stream = direct(driver, kafka, topic, group("recreated"), groupManagement=False)
    stream.foreachRDD(lambda rdd: rdd.count())
    driver.start()
    try:
        driver.run(1)
        admin = kafka.admin()
        try:
            admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
        except Exception as error:
            pytest.skip(f"the broker cannot delete topics: {error}")
        deadline = time.monotonic() + 30
        while True:  # the deletion shows in the metadata, then create it afresh
            try:
                kafka.create_topic(topic, 1)
                break
            except Exception:
                assert time.monotonic() < deadline, "the topic could not be re-created"
                time.sleep(0.2)
        kafka.produce(topic, [b"new"] * 2, partition=0)
        driver.clock.advance(1000)
        with pytest.raises(DataLossError) as caught:
            driver.ssc.awaitTermination(60)
    finally:
        driver.stop()
    error = caught.value
    assert (error.topic, error.partition, error.position, error.logEndOffset) == (topic, 0, 6, 2)
