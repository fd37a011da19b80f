"""The direct stream against the real broker: ranges, starts, limits, commits, rebalances."""

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from kafka_direct import (
    ConfigurationError,
    ConsumerStrategies,
    KafkaUnavailableError,
    KafkaUtils,
    LocationStrategies,
    PartitionsRevokedError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from tests.streaming.helpers import Driver


def group(name):
    return f"{name}-{time.monotonic_ns()}"


def direct(driver, kafka, strategy_factory, topics, **params):
    params = kafka.params(**{"group.id": params.pop("group", group("g")),
                             "auto.offset.reset": params.pop("reset", "earliest"), **params})
    return KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                        strategy_factory(topics, params))


def record_batches(stream, sink):
    def output(time, rdd):
        sink.append((int(time.timestamp() * 1000), rdd.offsetRanges(),
                     sorted((r.partition, r.offset) for r in rdd.collect())))
    stream.foreachRDD(output)


def test_consecutive_batches_cover_the_log_exactly_once(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    for p in range(3):
        kafka.produce(topic, [b"x"] * 7, partition=p)
    driver = Driver(spark)
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic])
    batches = []
    record_batches(stream, batches)
    driver.start()
    try:
        driver.run(1)
        kafka.produce(topic, [b"y"] * 5, partition=1)
        driver.run(1)
        driver.run(1)  # nothing new
        kafka.produce(topic, [b"z"] * 4, partition=2)
        kafka.produce(topic, [b"z"] * 2, partition=0)
        driver.run(1)
    finally:
        driver.stop()
    seen = [record for _, _, records in batches for record in records]
    assert sorted(seen) == sorted({(p, o) for p, n in ((0, 9), (1, 12), (2, 11))
                                   for o in range(n)})
    assert len(seen) == len(set(seen))
    ends = {}
    for _, ranges, _ in batches:
        assert [r.partition for r in ranges] == [0, 1, 2]
        for r in ranges:
            assert r.fromOffset == ends.get(r.partition, 0)  # contiguous
            ends[r.partition] = r.untilOffset
    assert ends == {0: 9, 1: 12, 2: 11}
    infos = [b for b in driver.recorder.completed]
    description = infos[0].streamIdToInputInfo[stream.inputStreamId].metadataDescription
    assert f"topic: {topic}\tpartition: 0\toffsets: 0 to 7" in description
    assert infos[0].numRecords == 21


def test_max_rate_and_min_rate_per_partition(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"x"] * 50, partition=0)
    kafka.produce(topic, [b"x"] * 50, partition=1)
    driver = Driver(spark, batch_seconds=2, conf={
        "spark.streaming.kafka.maxRatePerPartition": "5"})
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic])
    batches = []
    record_batches(stream, batches)
    driver.start()
    try:
        driver.run(3)
    finally:
        driver.stop()
    assert [[r.count() for r in ranges] for _, ranges, _ in batches] == [[10, 10]] * 3
    driver = Driver(spark, conf={"spark.streaming.kafka.maxRatePerPartition": "0.5",
                                 "spark.streaming.kafka.minRatePerPartition": "3"})
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic])
    batches = []
    record_batches(stream, batches)
    driver.start()
    try:
        driver.run(2)
    finally:
        driver.stop()
    assert [[r.count() for r in ranges] for _, ranges, _ in batches] == [[3, 3], [3, 3]]


def test_start_offsets_explicit_committed_timestamp_earliest_latest(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"old"] * 10, partition=0)
    kafka.produce(topic, [b"old"] * 10, partition=1)
    cutoff = int(time.time() * 1000) + 1
    time.sleep(0.05)
    kafka.produce(topic, [b"new"] * 3, partition=0)
    committed = group("committed")
    plain = Consumer(kafka.params(**{"group.id": committed}))
    plain.commit(offsets=[KafkaTP(topic, 1, 4)], asynchronous=False)
    plain.close()

    def first_ranges(**kwargs):
        driver = Driver(spark)
        params = kafka.params(**{"group.id": kwargs.pop("group", group("s")),
                                 "auto.offset.reset": kwargs.pop("reset", "earliest")})
        stream = KafkaUtils.createDirectStream(
            driver.ssc, LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], params, kwargs.pop("offsets", None), **kwargs))
        batches = []
        record_batches(stream, batches)
        driver.start()
        try:
            driver.run(1)
        finally:
            driver.stop()
        return {r.partition: (r.fromOffset, r.untilOffset) for r in batches[0][1]}

    assert first_ranges() == {0: (0, 13), 1: (0, 10)}
    assert first_ranges(reset="latest") == {0: (13, 13), 1: (10, 10)}
    assert first_ranges(group=committed) == {0: (0, 13), 1: (4, 10)}
    assert first_ranges(group=committed, offsets={TopicPartition(topic, 1): 7}) == {
        0: (0, 13), 1: (7, 10)}
    assert first_ranges(startingTimestamp=cutoff) == {0: (10, 13), 1: (10, 10)}
    with pytest.raises(ConfigurationError, match="beyond its end offset"):
        first_ranges(offsets={TopicPartition(topic, 0): 99})


def test_commit_async_is_visible_to_the_group_after_each_batch_and_a_graceful_stop(
        spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"x"] * 6, partition=0)
    name = group("commits")
    driver = Driver(spark)
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic], group=name)
    results = []

    def output(time_, rdd):
        rdd.count()
        if time_.timestamp() == 2:
            time.sleep(1)  # still writing when the stop comes
        stream.commitAsync(rdd.offsetRanges(),
                           lambda offsets, error: results.append((offsets, error)))

    stream.foreachRDD(output)
    driver.start()

    def committed():
        plain = Consumer(kafka.params(**{"group.id": name}))
        try:
            return {tp.partition: tp.offset for tp in plain.committed(
                [KafkaTP(topic, 0), KafkaTP(topic, 1)], timeout=10)}
        finally:
            plain.close()

    try:
        driver.run(1)
        assert committed() == {0: 6, 1: 0}
        kafka.produce(topic, [b"x"] * 4, partition=1)
        driver.clock.advance(1000)
        while (driver.ssc.scheduler.jobGenerator.lastTickTime or 0) < 2000:
            time.sleep(0.01)
        # the last batch, still running: committed by the time the graceful stop returns
    finally:
        driver.stop(graceful=True)
    assert committed() == {0: 6, 1: 4}
    assert results[-1][1] is None
    assert results[-1][0] == {TopicPartition(topic, 0): 6, TopicPartition(topic, 1): 4}


def test_new_partitions_are_read_from_their_first_offset(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 3, partition=0)
    driver = Driver(spark)
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic], reset="latest",
                    **{"topic.metadata.refresh.interval.ms": 500})
    batches = []
    record_batches(stream, batches)
    driver.start()
    try:
        driver.run(1)
        kafka.add_partitions(topic, 2)
        kafka.produce(topic, [b"new"] * 4, partition=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            driver.run(1)
            if any(r.partition == 1 for r in batches[-1][1]):
                break
    finally:
        driver.stop()
    assert [(r.fromOffset, r.untilOffset) for r in batches[0][1]] == [(3, 3)]
    first_with_new = next(ranges for _, ranges, _ in batches
                          if any(r.partition == 1 for r in ranges))
    assert [(r.partition, r.fromOffset, r.untilOffset) for r in first_with_new
            if r.partition == 1] == [(1, 0, 4)]  # earliest, though the reset policy is latest


def test_pattern_subscriptions_pick_up_new_topics(spark, kafka):
    prefix = f"pat{time.monotonic_ns()}"
    kafka.create_topic(f"{prefix}-a")
    kafka.produce(f"{prefix}-a", [b"a"] * 2)
    driver = Driver(spark)
    stream = direct(driver, kafka, ConsumerStrategies.SubscribePattern, f"{prefix}-.*",
                    **{"topic.metadata.refresh.interval.ms": 500})
    batches = []
    record_batches(stream, batches)
    driver.start()
    try:
        driver.run(1)
        kafka.create_topic(f"{prefix}-b")
        kafka.produce(f"{prefix}-b", [b"b"] * 3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            driver.run(1)
            if any(r.topic.endswith("-b") for r in batches[-1][1]):
                break
    finally:
        driver.stop()
    assert [r.topic for r in batches[0][1]] == [f"{prefix}-a"]
    read = sorted((r.topic, r.untilOffset) for _, ranges, _ in batches for r in ranges
                  if r.count())
    assert read == [(f"{prefix}-a", 2), (f"{prefix}-b", 3)]


def test_another_member_of_the_group_stops_the_stream_with_a_clear_error(spark, kafka,
                                                                         kafka_topic):
    topic = kafka_topic(partitions=4)
    name = group("shared")
    driver = Driver(spark, conf={"spark.streaming.kafka.rebalanceWaitMs": "3000"})
    stream = direct(driver, kafka, ConsumerStrategies.Subscribe, [topic], group=name)
    stream.foreachRDD(lambda rdd: rdd.count())
    driver.start()
    intruder = Consumer(kafka.params(**{"group.id": name, "session.timeout.ms": 6000}))
    intruder.subscribe([topic])
    try:
        driver.run(1)
        deadline = time.monotonic() + 20
        while not intruder.assignment() and time.monotonic() < deadline:
            intruder.poll(0.1)
        assert intruder.assignment()
        driver.clock.advance(1000)
        with pytest.raises(PartitionsRevokedError, match="Each stream needs a group.id") as info:
            while time.monotonic() < deadline + 20:
                intruder.poll(0.1)
                if driver.ssc.awaitTermination(0.1):
                    break
        assert info.value.group == name and info.value.partitions
    finally:
        intruder.close()
        driver.stop()


def test_strategies_reject_bad_input(kafka, spark):
    params = kafka.params(**{"group.id": "g"})
    with pytest.raises(ConfigurationError, match=r"write \['events'\]"):
        ConsumerStrategies.Subscribe("events", params)
    with pytest.raises(ConfigurationError, match="group.id"):
        ConsumerStrategies.Subscribe(["events"], kafka.params())
    with pytest.raises(ConfigurationError, match="bootstrap.servers"):
        ConsumerStrategies.Assign([TopicPartition("t", 0)], {"group.id": "g"})
    with pytest.raises(ConfigurationError, match="regular expression"):
        ConsumerStrategies.SubscribePattern("(", params)
    driver = Driver(spark)
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe([f"missing-{time.monotonic_ns()}"], params))
    stream.foreachRDD(lambda rdd: None)
    with pytest.raises(UnknownTopicOrPartitionError, match="do not exist"):
        driver.start()
    assert driver.ssc.state == "STOPPED"


def test_assign_of_a_missing_partition_fails_at_start(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    driver = Driver(spark)
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Assign([TopicPartition(topic, 3)], kafka.params(**{"group.id": "g"})))
    stream.foreachRDD(lambda rdd: None)
    with pytest.raises(UnknownTopicOrPartitionError, match="not 3"):
        driver.start()


def test_an_unreachable_broker_is_retried_then_a_clear_error(spark, own_kafka):
    own_kafka.create_topic("gone", partitions=1)
    own_kafka.produce("gone", [b"x"] * 3)
    driver = Driver(spark, conf={"spark.streaming.kafka.maxRetries": "2",
                                 "spark.streaming.kafka.retryBackoffMs": "100",
                                 "spark.streaming.kafka.driverTimeoutMs": "1500"})
    stream = KafkaUtils.createDirectStream(
        driver.ssc, LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Assign([TopicPartition("gone", 0)],
                                  own_kafka.params(**{"group.id": "g",
                                                      "auto.offset.reset": "earliest"})))
    stream.foreachRDD(lambda rdd: rdd.count())
    driver.start()
    driver.run(1)
    own_kafka.pause()
    try:
        driver.clock.advance(1000)
        with pytest.raises(KafkaUnavailableError, match="failed 3 times") as info:
            if not driver.ssc.awaitTermination(60):
                # Where the driver's threads are, for a run that neither failed nor ended.
                pytest.fail("the stream neither failed nor stopped; threads:\n"
                            + _thread_stacks())
        assert info.value.attempts == 3
    finally:
        own_kafka.resume()
        driver.stop()


def test_real_time_batches_on_the_system_clock(spark, kafka, kafka_topic):
    from kafka_direct.streaming import StreamingContext

    topic = kafka_topic(partitions=2)
    ssc = StreamingContext(spark, 0.4)
    stream = KafkaUtils.createDirectStream(
        ssc, LocationStrategies.PreferBrokers(),
        ConsumerStrategies.Assign([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                  kafka.params(**{"group.id": group("rt"),
                                                  "auto.offset.reset": "earliest"})),
        valueDeserializer=lambda b: b.decode())
    values = []
    stream.foreachRDD(lambda rdd: values.extend(r.value for r in rdd.collect()))
    ssc.start()
    try:
        for i in range(5):
            kafka.produce(topic, [f"v{i}".encode()], partition=i % 2)
            time.sleep(0.3)
        deadline = time.monotonic() + 20
        while len(values) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        ssc.stop(stopSparkContext=False, stopGracefully=True)
    assert sorted(values) == [f"v{i}" for i in range(5)]


def _thread_stacks():
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
                     for ident, frame in sys._current_frames().items())
