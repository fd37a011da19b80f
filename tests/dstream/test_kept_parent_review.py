"""Batches over the stream's kept JVM parent: each partition reads its own batch's range.

Review checks on the real broker: two jobs of different batches at once, a window over
batches, a repartitioned and a unioned RDD, partitions added between batches, and a topic
deleted and made again under the same partitions.
"""

import time

from pyspark import TaskContext

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.rdd import kept_parent
from tests.streaming.helpers import Driver


def _tagged(rdd):
    """Each record with the range its partition was given (by the driver's list)."""
    ranges = [(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in rdd.offsetRanges()]

    def tag(index, records):
        assert index == TaskContext.get().partitionId()
        topic, partition, start, end = ranges[index]
        for record in records:
            yield (record.topic, record.partition, record.offset,
                   record.topic == topic and record.partition == partition
                   and start <= record.offset < end)

    return rdd.mapPartitionsWithIndex(tag)


def test_each_batch_reads_its_own_ranges_with_windows_unions_and_new_partitions(
        spark, kafka, kafka_topic, monkeypatch):
    made = []
    real = kept_parent.located_rdd
    monkeypatch.setattr(kept_parent, "located_rdd",
                        lambda sc, elements, locations: made.append(len(elements))
                        or real(sc, elements, locations))
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [b"a"] * 5, partition=p)
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    params = kafka.params(**{"group.id": f"kept-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest",
                             "topic.metadata.refresh.interval.ms": 500})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))
    batches, windows, previous = {}, {}, []

    def per_batch(t, rdd):
        tagged = _tagged(rdd).collect()
        assert all(ok for *_, ok in tagged), f"a record outside its partition's range: {tagged}"
        records = sorted(r[:3] for r in tagged)
        # The same RDD read again through a shuffle and beside the previous batch's RDD.
        assert sorted((r.topic, r.partition, r.offset)
                      for r in rdd.repartition(3).collect()) == records
        if previous:
            both = sorted((r.topic, r.partition, r.offset)
                          for r in rdd.union(previous[-1][1]).collect())
            assert both == sorted(records + previous[-1][0])
        previous.append((records, rdd))
        batches[int(t.timestamp() * 1000)] = records

    stream.foreachRDD(per_batch)
    stream.window(2, 1).foreachRDD(
        lambda t, rdd: windows.__setitem__(int(t.timestamp() * 1000),
                                           sorted((r.topic, r.partition, r.offset)
                                                  for r in rdd.collect())))
    driver.start()
    try:
        driver.run(1)
        kafka.produce(topic, [b"b"] * 3, partition=1)
        driver.run(1)
        kafka.add_partitions(topic, 3)
        kafka.produce(topic, [b"c"] * 4, partition=2, acks="all")
        kafka.produce(topic, [b"c"] * 2, partition=0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            driver.run(1)
            if any(p == 2 for _, p, _ in batches[max(batches)]):
                break
        kafka.produce(topic, [b"d"] * 2, partition=2, acks="all")
        driver.run(2)
    finally:
        driver.stop()
    seen = [r for records in batches.values() for r in records]
    assert len(seen) == len(set(seen))
    assert sorted(seen) == sorted((topic, p, o) for p, n in ((0, 7), (1, 8), (2, 6))
                                  for o in range(n))
    times = sorted(batches)
    for t in times[1:]:
        if t in windows:
            assert windows[t] == sorted(batches[t] + batches[t - 1000]), t
    # Over the kept parent: one made for 2 partitions, one for 3, whatever the batches.
    assert made == [2, 3], made
