"""Backpressure and initialRate on the real broker, with processing slowed on purpose."""

import time

import pytest

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from tests.streaming.helpers import Driver

PER_RECORD_S = 0.002  # what processing costs: at most 500 records a second
INITIAL_RATE = 100.0
MIN_RATE = 10.0
PARTITIONS = 2


def pid_estimate(batch, records, interval_ms):
    """Spark's PID estimate after ``batch``, with the default gains (1, 0.2, 0).

    The proportional term replaces the previous rate by the batch's measured processing
    rate, the integral term takes off a fifth of the backlog its scheduling delay shows, and
    the derivative term is off: so the estimate depends on this batch's figures alone.
    """
    processing_rate = records / batch.processingDelay * 1000.0
    backlog = batch.schedulingDelay * processing_rate / interval_ms
    return max(processing_rate - 0.2 * backlog, MIN_RATE)


def test_initial_rate_bounds_the_first_batch_and_backpressure_follows_processing(
        spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=PARTITIONS)
    kafka.produce(topic, [b"x"] * 2500, partition=0)
    kafka.produce(topic, [b"x"] * 2500, partition=1)
    driver = Driver(spark, conf={"spark.streaming.backpressure.enabled": "true",
                                 "spark.streaming.backpressure.initialRate": str(INITIAL_RATE),
                                 "spark.streaming.backpressure.pid.minRate": str(MIN_RATE)})
    params = kafka.params(**{"group.id": f"bp-{time.monotonic_ns()}",
                             "auto.offset.reset": "earliest"})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))

    counted, spans = [], []  # what each batch's RDD held; when its processing ran (ms)

    def slow(rdd):
        entered = time.time() * 1000
        records = rdd.count()
        time.sleep(records * PER_RECORD_S)
        counted.append(records)
        spans.append((entered, time.time() * 1000))

    stream.foreachRDD(slow)
    rates = []  # the controller's rate after each batch: what the next batch is cut by
    returned = []  # when each batch's run returned (ms)
    driver.start()
    try:
        for _ in range(8):
            driver.run(1)
            returned.append(time.time() * 1000)
            stream.rateController.waitUntilIdle()
            rates.append(stream.rateController.getLatestRate())
    finally:
        driver.stop()
    batches = driver.recorder.completed
    sizes = [b.streamIdToInputInfo[stream.inputStreamId].numRecords for b in batches]
    print(f"batch sizes {sizes}, processing ms {[b.processingDelay for b in batches]}, "
          f"scheduling ms {[b.schedulingDelay for b in batches]}, rates {rates}")
    # The figures judged are the batches' own: what each RDD held is what the stream
    # reported, and each batch's processing time spans its work (order, not speed: ms
    # rounded), so neither a rate limit the RDD ignores nor a misreported delay passes.
    assert counted == sizes, (counted, sizes)
    for batch, (entered, left), back in zip(batches, spans, returned, strict=True):
        assert batch.processingStartTime <= entered + 1, batch
        assert left <= batch.processingEndTime + 1 and batch.processingEndTime <= back + 1, (
            batch, left, back)
    # Judged by those figures, never by a bound on the wall clock: a loaded machine slows
    # processing, which lowers the estimate and, with it, the next batch.
    assert sizes[0] <= INITIAL_RATE, sizes  # initialRate x 1 s, not the 5000-record backlog
    # The first batch only sets the estimator's baseline (as in Spark); each later estimate
    # is what the batch before it managed: its records over its processing delay.
    assert rates[0] == -1, rates
    expected = [pid_estimate(b, n, driver.interval)
                for b, n in zip(batches[1:], sizes[1:], strict=True)]
    assert rates[1:] == pytest.approx(expected, rel=1e-9), (sizes, rates)
    # Each batch is the rate in force times 1 s: initialRate until the first estimate, then
    # the latest estimate. Each partition's share is rounded down, so a batch falls short of
    # the rate by less than one record a partition.
    in_force = [INITIAL_RATE, INITIAL_RATE, *rates[1:-1]]
    for size, rate in zip(sizes, in_force, strict=True):
        assert rate - PARTITIONS <= size <= rate, (sizes, in_force)
    # A record costs at least 2 ms of sleep whatever the load, so processing never manages
    # more than 500 records a second: a bigger batch would mean misread delays.
    assert all(size <= 700 for size in sizes[2:]), sizes
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
