"""Kafka's own log cleaner and retention acting under a reader (Apache Kafka's broker).

The offsets of a range are planned first; then the broker compacts the log or deletes its
oldest segments while the range is read. Compaction leaves gaps, which a read skips (each
key's latest record always stays); retention below the range's start is data loss, a typed
error by default, or a jump to the log start with ``failOnDataLoss=False``.
"""

import time

import pytest
from confluent_kafka import Producer

from kafka_direct import DataLossError, KafkaUtils, OffsetRange
from kafka_direct.task_errors import carried_error
from kafka_direct.testing import EmbeddedKafka
from kafka_direct.testing.kafka import ANY_TIMESTAMP, COMPACTING, retaining
from kafka_direct.testing.process import wait_for


@pytest.fixture
def broker(kafka):
    if isinstance(kafka, EmbeddedKafka):
        pytest.skip("an emulator has no log cleaner")
    return kafka


def produce_rounds(kafka, topic, rounds, per_round, pause=0.15, prefix="k", timestamp=0):
    """``rounds`` batches of keys k0..k9, a pause between them so that segments roll."""
    producer = Producer(kafka.params(**{"linger.ms": 0}))
    produced = []
    for round_ in range(rounds):
        for i in range(per_round):
            key, value = f"{prefix}{i % 10}".encode(), f"{round_}:{i}".encode()
            producer.produce(topic, key=key, value=value, partition=0, timestamp=timestamp)
            produced.append((key, value))
        assert producer.flush(30) == 0
        time.sleep(pause)
    return produced


def test_a_range_read_while_the_log_cleaner_compacts_it(broker, kafka_topic, spark, params):
    topic = kafka_topic(config=COMPACTING)
    produced = produce_rounds(broker, topic, rounds=8, per_round=50)
    # A record of another key rolls the last segment (the cleaner leaves the active one).
    produce_rounds(broker, topic, rounds=1, per_round=1, pause=0, prefix="roll")
    (_, high), = broker.end_offsets(topic, [0]).values()
    latest = {}
    for offset, (key, value) in enumerate(produced):
        latest[key] = (offset, value)
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, len(produced))])
    reads = []

    def read_once():
        records = [(r.offset, r.key, r.value) for r in rdd.collect()]
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets)), "out of order or repeated"
        for offset, key, value in records:  # every record is the one written there
            assert produced[offset] == (key, value), offset
        by_key = {key: (offset, value) for offset, key, value in records}
        assert by_key == latest  # each key's latest record always stays
        reads.append(len(records))
        return len(records) < len(produced)

    # Read again and again while the cleaner works, until a read finds the log compacted.
    assert wait_for(read_once, 90, interval=0.2), f"never compacted: {reads}"
    assert reads[-1] >= len(latest) and high == len(produced) + 1


def test_retention_deleting_segments_under_a_slow_reader_is_data_loss(broker, kafka_topic,
                                                                      spark, params):
    topic = kafka_topic(config={**retaining(1000), **ANY_TIMESTAMP})
    produce_rounds(broker, topic, rounds=5, per_round=20)  # old segments, rolled
    # The newest records are stamped an hour ahead: retention, which goes by the records'
    # timestamps, keeps them whatever the test's pace (an expired active segment goes too).
    ahead = int(time.time() * 1000) + 3_600_000
    produce_rounds(broker, topic, rounds=1, per_round=20, pause=0, prefix="new",
                   timestamp=ahead)
    (_, high), = broker.end_offsets(topic, [0]).values()
    planned = OffsetRange(topic, 0, 0, high)
    strict = KafkaUtils.createRDD(spark, params, [planned])
    lenient = KafkaUtils.createRDD(spark, params, [planned], failOnDataLoss=False)
    # The reader is slow: retention deletes the oldest segments before it reads.
    assert wait_for(lambda: broker.end_offsets(topic, [0])[0][0] > 0, 60), "nothing deleted"
    (low, _), = broker.end_offsets(topic, [0]).values()
    assert low <= 100  # the newest records stayed
    with pytest.raises(Exception) as raised:
        strict.collect()
    error = carried_error(raised.value)
    assert isinstance(error, DataLossError), raised.value
    assert (error.topic, error.partition, error.fromOffset) == (topic, 0, 0)
    offsets = [r.offset for r in lenient.collect()]
    # From wherever the log started when the read began, to the planned end, each once.
    assert offsets and offsets[0] >= low and offsets == list(range(offsets[0], high))
