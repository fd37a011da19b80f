"""Backpressure and initialRate on the real broker, with processing slowed on purpose."""

import time

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver

PER_RECORD_S = 0.002  # what processing costs: about 500 records a second


def test_initial_rate_bounds_the_first_batch_and_backpressure_follows_processing(
        spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"x"] * 2500, partition=0)
    kafka.produce(topic, [b"x"] * 2500, partition=1)
    driver = Driver(spark, conf={"spark.streaming.backpressure.enabled": "true",
                                 "spark.streaming.backpressure.initialRate": "100",
                                 "spark.streaming.backpressure.pid.minRate": "10"})
    params = kafka.params(**{"group.id": f"bp-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest"})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))

    def slow(rdd):
        records = rdd.count()
        time.sleep(records * PER_RECORD_S)

    stream.foreachRDD(slow)
    driver.start()
    try:
        for _ in range(8):
            driver.run(1)
            stream.rateController.waitUntilIdle()
    finally:
        driver.stop()
    batches = driver.recorder.completed
    sizes = [b.numRecords for b in batches]
    delays = [b.processingDelay for b in batches]
    print(f"batch sizes {sizes}, processing ms {delays}")
    assert sizes[0] <= 100  # initialRate x 1 s, not the 5000-record backlog
    # then the rate follows what processing manages: batches take about one interval
    assert all(size <= 700 for size in sizes[2:]), sizes
    assert max(sizes[3:]) >= 200, sizes
    assert all(delay <= 1300 for delay in delays[3:]), delays
    assert stream.rateController.getLatestRate() > 0


def test_without_backpressure_the_backlog_comes_at_once(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 400, partition=0)
    driver = Driver(spark)
    params = kafka.params(**{"group.id": f"nobp-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest"})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))
    stream.foreachRDD(lambda rdd: rdd.count())
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    assert stream.rateController is None
    assert driver.recorder.completed[0].numRecords == 400
