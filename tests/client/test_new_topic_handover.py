"""A reused consumer's first range of a topic it has not read before starts at once.

librdkafka learns a topic first named in an assignment only at its once-a-second scan of
unknown topics: a consumer handed over from one topic's range to another topic's waited up
to a second before its first fetch (0.3-1 s measured on a broker). A worker's consumers
meet new topics whenever a job reads several (ten topics of a hundred partitions and a
cache of 64 consumers: hand-overs between topics in every batch's first tasks).
"""

import time

import pytest

from kafka_direct import OffsetRange
from kafka_direct.client.columnar import ColumnarDataConsumer, native_status
from kafka_direct.client.data_consumer import KafkaDataConsumer
from kafka_direct.client.fetch_session import FetchSession, SessionConsumers
from kafka_direct.client.params import executor_params

TOPICS = 5
RECORDS = 5
#: Each of the 4 hand-overs to a new topic waited for the next scan (about a second each,
#: 3-4 s in all); learning a topic is one metadata request.
BOUND_S = 2.0


def topics(kafka, kafka_topic, partitions=1):
    names = [kafka_topic(partitions=partitions) for _ in range(TOPICS)]
    for name in names:
        for p in range(partitions):
            kafka.produce(name, [f"{p}:{i}".encode() for i in range(RECORDS)], partition=p)
    return names


def params(kafka, group):
    return executor_params(kafka.params(**{"group.id": group}))


def read_python(consumer, start, end):
    return sum(len(batch) for batch in consumer.read_batches(start, end, 30_000))


def read_native(consumer, start, end):
    return sum(chunk.count for chunk in consumer.read_chunks(start, end, 30_000, columns=0))


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_consumer_handed_over_to_new_topics_reads_each_first_range_at_once(
        kafka, kafka_topic, kind):
    if kind == "native" and not native_status()[0]:
        pytest.skip(native_status()[1])
    names = topics(kafka, kafka_topic)
    maker, read = ((KafkaDataConsumer, read_python) if kind == "python"
                   else (ColumnarDataConsumer, read_native))
    consumer = maker(names[0], 0, params(kafka, f"new-topics-{kind}"))
    try:
        assert read(consumer, 0, RECORDS) == RECORDS  # connected, first topic known
        started = time.monotonic()
        for name in names[1:]:
            consumer.retarget(name, 0)
            assert read(consumer, 0, RECORDS) == RECORDS
        elapsed = time.monotonic() - started
        assert elapsed < BOUND_S, f"{TOPICS - 1} hand-overs to new topics took {elapsed:.1f} s"
        # Back to a topic it has read: known, read as at once.
        consumer.retarget(names[0], 0)
        assert read(consumer, 0, RECORDS) == RECORDS
    finally:
        consumer.close()


def test_a_kept_session_consumer_reads_new_topics_at_once(kafka, kafka_topic):
    names = topics(kafka, kafka_topic, partitions=2)
    consumers = SessionConsumers()
    settings = params(kafka, "new-topics-session")

    def session(name):
        ranges = [OffsetRange(name, p, 0, RECORDS) for p in range(2)]
        read = FetchSession(settings, consumers=consumers).read(ranges, 30_000)
        return sum(len(part.messages) for part in read)

    try:
        assert session(names[0]) == 2 * RECORDS
        started = time.monotonic()
        assert [session(name) for name in names[1:]] == [2 * RECORDS] * (TOPICS - 1)
        elapsed = time.monotonic() - started
        assert (consumers.created, consumers.reused) == (1, TOPICS - 1)
        assert elapsed < BOUND_S, f"{TOPICS - 1} sessions of new topics took {elapsed:.1f} s"
    finally:
        consumers.clear()
