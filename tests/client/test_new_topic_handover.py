"""A reused consumer's first range of a topic it has not read before starts at once.

librdkafka learns a topic first named in an assignment only at its once-a-second scan of
unknown topics: a consumer handed over from one topic's range to another topic's waited up
to a second before its first fetch (0.3-1 s measured on a broker). A worker's consumers
meet new topics whenever a job reads several (ten topics of a hundred partitions and a
cache of 64 consumers: hand-overs between topics in every batch's first tasks).
"""

import socket
import time

import pytest

from kafka_direct import OffsetRange, PollTimeoutError
from kafka_direct.client.columnar import ColumnarDataConsumer, native_status
from kafka_direct.client.data_consumer import (
    KafkaDataConsumer,
    _confluent_consumer,
    learn_topics,
    partition_count,
)
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


def dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_kept_session_consumer_with_the_broker_down_hands_back_within_the_poll_timeout():
    # A kept session consumer meets 8 new topics while the broker is unreachable: the
    # session hands its ranges back after min(pollTimeoutMs, 2 s) without progress, the
    # metadata questions included (one after the other, they took a second each).
    settings = executor_params({"bootstrap.servers": f"127.0.0.1:{dead_port()}",
                                "group.id": "review-dead"})
    consumers = SessionConsumers()
    consumers.give_back(settings, _confluent_consumer, _confluent_consumer(dict(settings)))
    ranges = [OffsetRange(f"new-{i}", 0, 0, 5) for i in range(8)]
    started = time.monotonic()
    try:
        parts = list(FetchSession(settings, _confluent_consumer, consumers).read(ranges, 1000))
    finally:
        consumers.clear()
    elapsed = time.monotonic() - started
    assert consumers.reused == 1
    assert len(parts) == 8 and all(p.messages == [] for p in parts)
    assert elapsed < 3.0, f"the session handed its ranges back after {elapsed:.1f} s"


def test_learning_many_topics_costs(kafka):
    consumer = _confluent_consumer(executor_params(kafka.params(**{"group.id": "review-n"})))
    try:
        consumer.list_topics(timeout=10)  # connected
        names = [f"review-absent-{time.monotonic_ns()}-{i}" for i in range(200)]
        started, cpu = time.monotonic(), time.process_time()
        asked = []

        def ask(topic, seconds):
            asked.append(topic)
            return partition_count(consumer, topic, seconds) > 0

        # Time enough for all 200 on a busy machine (the job's own bound is what the
        # questions may cost a task: a bound reached leaves the rest to the scan).
        known = learn_topics(ask, names, frozenset(), timeout=60)
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        # Each asked, none learnt: the cluster has none of them (asked again next time).
        assert asked == names and known == frozenset()
        listed = consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    print(f"\nlearning 200 topics: {elapsed * 1000:.0f} ms "
          f"({elapsed / 200 * 1e6:.0f} us a topic), CPU {cpu / 200 * 1e6:.0f} us a topic")
    # No question created a topic (a consumer never asks the broker to auto-create).
    assert not [n for n in names if n in listed and listed[n].error is None]


def _reader(kind):
    """The consumer class of ``kind`` and a read of a range that counts its records."""
    if kind == "native":
        if not native_status()[0]:
            pytest.skip(native_status()[1])
        return ColumnarDataConsumer, lambda c, a, b, t: sum(
            ch.count for ch in c.read_chunks(a, b, t, columns=0))
    return KafkaDataConsumer, lambda c, a, b, t: sum(len(x) for x in c.read_batches(a, b, t))


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_handed_over_read_with_the_broker_down_fails_within_its_poll_timeout(kind):
    maker, read = _reader(kind)
    settings = executor_params({"bootstrap.servers": f"127.0.0.1:{dead_port()}",
                                "group.id": "review-dead-range"})
    consumer = maker("a", 0, settings)
    try:
        consumer.retarget("b", 0)
        started = time.monotonic()
        with pytest.raises(PollTimeoutError):
            read(consumer, 0, 5, 2000)
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    print(f"\n{kind}: PollTimeoutError of a 2000 ms poll timeout after {elapsed:.2f} s")
    # The question counts in the poll timeout (the stall check's watermarks add 0.5 s+).
    assert elapsed < 3.0
