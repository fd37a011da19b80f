"""A stream read only through a window commits next to another stream's per-batch output.

Stream B is read only by ``window(2 s, 2 s)``; stream A has an output every 1 s batch. B's
odd batches are computed by the next window job, after their own batch time completed (A's
job): they pass with that window job's batch, so B's ``commitAsync`` reaches Kafka after each
window (it used to never commit, and every callback failed at stop).
"""

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver


def test_a_windowed_stream_next_to_a_per_batch_output_commits_after_each_window(
        spark, kafka, kafka_topic):
    ta, tb = kafka_topic(), kafka_topic()
    kafka.produce(ta, [b"a"] * 3)
    kafka.produce(tb, [b"b"] * 4)
    driver = Driver(spark)
    pa = kafka.params(**{"group.id": f"ga-{ta}", "auto.offset.reset": "earliest"})
    pb = kafka.params(**{"group.id": f"gb-{tb}", "auto.offset.reset": "earliest"})
    a = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                      ConsumerStrategies.Subscribe([ta], pa))
    b = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                      ConsumerStrategies.Subscribe([tb], pb))
    a.foreachRDD(lambda rdd: a.commitAsync(rdd.offsetRanges()))
    seen, results, committed = [], [], []

    def remember(rdd):
        seen.extend(rdd.offsetRanges())
        return rdd

    b.transform(remember).window(2, 2).foreachRDD(
        lambda rdd: b.commitAsync(list(seen), lambda o, e: results.append((o, e))))
    driver.start()
    try:
        for batch in range(4):
            driver.run(1)
            if batch == 1:
                committed.append(dict(b.committedOffsets))
                kafka.produce(tb, [b"c"] * 2)
        committed.append(dict(b.committedOffsets))
    finally:
        driver.stop()
    assert [sorted(c.values()) for c in committed] == [[4], [6]], (committed, results)
    assert results and all(error is None for _, error in results), results
    assert a.committedOffsets and sorted(a.committedOffsets.values()) == [3]
