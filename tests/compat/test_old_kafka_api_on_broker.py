"""Spark 2.x pyspark.streaming.kafka code, imports changed, against the real broker.

Adapted from the streaming-kafka-0-8 guide's Python snippets and PySpark 2.x's
``pyspark/streaming/tests.py`` KafkaStreamTests.
"""

from kafka_direct import StreamingContext
from kafka_direct.compat.pyspark_kafka import (
    Broker,
    KafkaUtils,
    OffsetRange,
    TopicAndPartition,
)
from tests.streaming.helpers import Driver


def produce_keyed(kafka, topic, partitions, count):
    """``count`` records per partition: key ``k<p>-<i>``, value ``v<p>-<i>`` (one tombstone)."""
    for p in range(partitions):
        values = [f"v{p}-{i}".encode() for i in range(count)]
        values[-1] = None
        kafka.produce(topic, values, partition=p,
                      keys=[f"k{p}-{i}".encode() for i in range(count)])


def test_create_rdd_with_offset_ranges_leaders_and_message_handler(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    produce_keyed(kafka, topic, 2, 5)
    kafkaParams = {"metadata.broker.list": kafka.bootstrap_servers}
    # The guide: offsetRanges = [OffsetRange("test", 0, 0, 100), ...]; createRDD(sc, ...).
    offsetRanges = [OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 1, 1, 3)]
    rdd = KafkaUtils.createRDD(spark, kafkaParams, offsetRanges)
    assert rdd.offsetRanges() == offsetRanges
    assert sorted(rdd.collect(), key=str) == sorted(
        [(f"k0-{i}", f"v0-{i}") for i in range(4)] + [("k0-4", None)]
        + [("k1-1", "v1-1"), ("k1-2", "v1-2")], key=str)

    # test_kafka_rdd_with_leaders
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    leaders = {TopicAndPartition(topic, 0): Broker(host, int(port))}
    rdd = KafkaUtils.createRDD(spark, kafkaParams, offsetRanges, leaders)
    assert rdd.count() == 7

    # test_kafka_rdd_message_handler
    def getKeyAndDoubleMessage(m):
        return m and (m.key, m.message * 2 if m.message else m.message)

    rdd = KafkaUtils.createRDD(spark, kafkaParams, [OffsetRange(topic, 1, 0, 2)],
                               messageHandler=getKeyAndDoubleMessage)
    assert rdd.collect() == [("k1-0", "v1-0v1-0"), ("k1-1", "v1-1v1-1")]

    # Raw bytes with no decoders.
    rdd = KafkaUtils.createRDD(spark, kafkaParams, [OffsetRange(topic, 0, 3, 5)],
                               keyDecoder=None, valueDecoder=None)
    assert rdd.collect() == [(b"k0-3", b"v0-3"), (b"k0-4", None)]


def test_direct_stream_offset_ranges_through_transform(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    produce_keyed(kafka, topic, 2, 4)
    driver = Driver(spark)
    ssc = driver.ssc
    assert isinstance(ssc, StreamingContext)
    # The guide: createDirectStream(ssc, [topic], {"metadata.broker.list": brokers}).
    directKafkaStream = KafkaUtils.createDirectStream(
        ssc, [topic], {"metadata.broker.list": kafka.bootstrap_servers,
                       "auto.offset.reset": "smallest"})

    # The guide's storeOffsetRanges / printOffsetRanges, collecting instead of printing.
    offsetRanges = []
    printed = []
    values = []

    def storeOffsetRanges(rdd):
        nonlocal offsetRanges
        offsetRanges = rdd.offsetRanges()
        return rdd

    def printOffsetRanges(rdd):
        for o in offsetRanges:
            printed.append(f"{o.topic} {o.partition} {o.fromOffset} {o.untilOffset}")
        values.extend(rdd.collect())

    directKafkaStream \
        .transform(storeOffsetRanges) \
        .map(lambda kv: kv[1]) \
        .foreachRDD(printOffsetRanges)

    # test_kafka_direct_stream_foreach_get_offsetRanges: straight on the stream too.
    foreach_ranges = []
    directKafkaStream.foreachRDD(lambda rdd: foreach_ranges.extend(rdd.offsetRanges()))
    driver.start()
    try:
        driver.run(1)
        produce_keyed(kafka, topic, 1, 2)  # partition 0, offsets 4 and 5
        driver.run(1)
    finally:
        driver.stop()
    assert printed == [f"{topic} 0 0 4", f"{topic} 1 0 4", f"{topic} 0 4 6", f"{topic} 1 4 4"]
    assert foreach_ranges == [OffsetRange(topic, 0, 0, 4), OffsetRange(topic, 1, 0, 4),
                              OffsetRange(topic, 0, 4, 6), OffsetRange(topic, 1, 4, 4)]
    assert sorted(values, key=str) == sorted(
        [f"v{p}-{i}" for p in range(2) for i in range(3)] + [None, None, "v0-0", None],
        key=str)


def test_direct_stream_from_offsets_with_message_handler(spark, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    produce_keyed(kafka, topic, 2, 5)
    driver = Driver(spark)
    # test_kafka_direct_stream_from_offset / _message_handler: only partition 1, from 2.
    fromOffsets = {TopicAndPartition(topic, 1): 2}
    stream = KafkaUtils.createDirectStream(
        driver.ssc, [topic], {"metadata.broker.list": kafka.bootstrap_servers},
        fromOffsets, messageHandler=lambda m: (m.partition, m.offset, m.key, m.message))
    batches = []
    stream.foreachRDD(lambda rdd: batches.append((rdd.offsetRanges(), rdd.collect())))
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    [(ranges, records)] = [b for b in batches if b[1]]
    assert ranges == [OffsetRange(topic, 1, 2, 5)]
    assert records == [(1, 2, "k1-2", "v1-2"), (1, 3, "k1-3", "v1-3"), (1, 4, "k1-4", None)]
