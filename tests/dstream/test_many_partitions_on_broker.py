"""A stream of 120+ partitions on the broker reads every record once and commits it.

Over 100 partitions the ends are asked in more than one ListOffsets request, kept between
batches; the listing's partitions and the batch's layout are kept too, and the ranges reach
the tasks as kept pickle heads. A topic grows partitions midway. Records are read once
each, and the group's committed offsets end at the logs' ends.
"""

import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver


def test_records_of_many_partitions_once_and_committed(spark, kafka):
    prefix = f"rv{uuid.uuid4().hex[:6]}"
    topics = [kafka.create_topic(f"{prefix}-{i}", 40) for i in range(3)]
    produced = {}
    for t_index, topic in enumerate(topics):
        for partition in range(t_index, 40, 7):
            kafka.produce(topic, [b"r"] * 5, partition=partition)
            produced[(topic, partition)] = 5
    group = f"rv-{time.monotonic_ns()}"
    params = kafka.params(**{"group.id": group, "auto.offset.reset": "earliest"})
    driver = Driver(spark, conf={"spark.streaming.kafka.maxRatePerPartition": "2"})
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.SubscribePattern(rf"{prefix}-\d", params, groupManagement=False))
    read, results = [], []

    def output(rdd):
        read.extend((r.topic, r.partition, r.offset) for r in rdd.collect())
        stream.commitAsync(rdd.offsetRanges(),
                           lambda offsets, error: results.append((offsets, error)))

    stream.foreachRDD(output)
    driver.start()
    try:
        driver.run(2)
        kafka.add_partitions(topics[0], 42)
        kafka.produce(topics[0], [b"n"] * 3, partition=41)
        produced[(topics[0], 41)] = 3
        deadline = time.monotonic() + 120
        while len(read) < sum(produced.values()) and time.monotonic() < deadline:
            driver.run(1)
        driver.run(1)
    finally:
        driver.stop(graceful=True)
    assert len(read) == len(set(read)), "a record read twice"
    assert sorted(read) == sorted((t, p, o) for (t, p), n in produced.items()
                                  for o in range(n))
    assert all(error is None for _, error in results)
    plain = Consumer(kafka.params(**{"group.id": group}))
    try:
        committed = {(tp.topic, tp.partition): tp.offset for tp in plain.committed(
            [KafkaTP(t, p) for t, p in produced], timeout=10)}
    finally:
        plain.close()
    assert committed == produced
