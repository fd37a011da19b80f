"""A range whose topic or partition the cluster does not have fails typed, and soon.

The driver plans ranges of the topics it sees; a topic deleted before the executors read
(or a range given to ``KafkaUtils.createRDD`` naming a partition beyond the topic's count)
leaves the reader fetching nothing. It waited out its poll timeout (two minutes by default)
and failed with a PollTimeoutError that blamed the broker. Both readers, a consumer made
for the range, one reused or handed over from another partition, and a fetch session each
fail with an UnknownTopicOrPartitionError naming the range and the fix within seconds,
while a topic missing only for a moment (just created) is read as any other.
"""

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from kafka_direct import OffsetRange, UnknownTopicOrPartitionError
from kafka_direct.client import absent_partitions
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.columnar import ColumnarConsumerCache, native_status
from kafka_direct.client.fetch_session import FetchSession, SessionConsumers
from kafka_direct.client.params import executor_params
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, in_session, read_task
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.task_errors import CarriedTaskError, carried_error

#: The poll timeout of the reads here: what the reads used to wait before failing.
POLL_MS = 30_000
#: Time to the typed error: seconds (a grace for a topic that is only briefly unknown, a
#: question to the cluster), far below the poll timeout.
BOUND_S = 5.0
RECORDS = 5
#: The absence rule's grace (1 s) in the tests that are not about it: the same rule, a shorter
#: wait. The tests named in DEFAULT_GRACE keep the reader's own: a topic created while its
#: range waits, a poll timeout shorter than the grace, and a deleted topic's new consumer,
#: whose typed error must come within BOUND_S with the default too.
SHORT_GRACE_S = 0.2
DEFAULT_GRACE = frozenset({"test_a_topic_created_while_its_range_waits_is_read",
                           "test_a_short_poll_timeout_still_names_a_missing_topic",
                           "test_a_new_consumer_of_a_deleted_topic_fails_typed_at_once"})


@pytest.fixture(autouse=True)
def _grace(request, monkeypatch):
    assert SHORT_GRACE_S < absent_partitions.ABSENT_GRACE_S
    if request.node.originalname not in DEFAULT_GRACE:
        monkeypatch.setattr(absent_partitions, "ABSENT_GRACE_S", SHORT_GRACE_S)


def settings(kafka, group="missing", **extra):
    return executor_params(kafka.params(**{"group.id": group, **extra}))


def cache_of(kind, capacity=64):
    if kind == "native":
        if not native_status()[0]:
            pytest.skip(native_status()[1])
        return ColumnarConsumerCache(capacity)
    return ConsumerCache(capacity)


def read(consumer, start, until, pollTimeoutMs=POLL_MS):
    """How many records ``consumer`` reads of ``[start, until)`` (either reader)."""
    if hasattr(consumer, "read_chunks"):
        return sum(c.count for c in consumer.read_chunks(start, until, pollTimeoutMs,
                                                           columns=0))
    return sum(len(b) for b in consumer.read_batches(start, until, pollTimeoutMs))


def read_range(cache, params, offsetRange, pollTimeoutMs=POLL_MS):
    with cache.lease(offsetRange.topic, offsetRange.partition, params) as consumer:
        return read(consumer, offsetRange.fromOffset, offsetRange.untilOffset, pollTimeoutMs)


def failing(cache, params, offsetRange, pollTimeoutMs=POLL_MS):
    """The UnknownTopicOrPartitionError reading the range raises, and the seconds it took."""
    started = time.monotonic()
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        read_range(cache, params, offsetRange, pollTimeoutMs)
    return raised.value, time.monotonic() - started


def filled(kafka, kafka_topic, partitions=1):
    topic = kafka_topic(partitions=partitions)
    for p in range(partitions):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(RECORDS)], partition=p)
    return topic


def assert_names_the_range(error, topic, partition, start, until):
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == (
        topic, partition, start, until)
    text = str(error)
    assert f"{topic}-{partition}" in text and f"[{start}, {until})" in text


def listed(kafka, topic):
    """Whether the cluster has ``topic`` (asked without creating it)."""
    asking = AdminClient(kafka.params(**{"allow.auto.create.topics": False}))
    described = asking.list_topics(topic, timeout=10).topics.get(topic)
    return described is not None and described.error is None


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_range_of_a_topic_deleted_after_a_read_fails_typed_at_once(kafka, kafka_topic, kind):
    # The cached consumer read the topic before its deletion: it has its metadata.
    cache = cache_of(kind)
    params = settings(kafka)
    topic = filled(kafka, kafka_topic)
    try:
        assert read_range(cache, params, OffsetRange(topic, 0, 0, 2)) == 2
        kafka.delete_topic(topic)
        error, elapsed = failing(cache, params, OffsetRange(topic, 0, 2, RECORDS))
    finally:
        cache.clear()
    print(f"\n{kind}: a deleted topic's range failed typed after {elapsed:.2f} s")
    assert_names_the_range(error, topic, 0, 2, RECORDS)
    assert "does not exist" in str(error) and "deleted" in str(error)
    assert "stored position" in str(error)
    assert elapsed < BOUND_S, f"the typed error took {elapsed:.1f} s"
    assert cache.created == 1


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_new_consumer_of_a_deleted_topic_fails_typed_at_once(kafka, kafka_topic, kind):
    cache = cache_of(kind)
    params = settings(kafka)
    topic = filled(kafka, kafka_topic)
    kafka.delete_topic(topic)
    try:
        error, elapsed = failing(cache, params, OffsetRange(topic, 0, 0, RECORDS))
    finally:
        cache.clear()
    print(f"\n{kind}: a new consumer's typed error after {elapsed:.2f} s")
    assert_names_the_range(error, topic, 0, 0, RECORDS)
    assert elapsed < BOUND_S, f"the typed error took {elapsed:.1f} s"


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_cached_consumer_handed_over_to_a_missing_topic_fails_typed_at_once(
        kafka, kafka_topic, kind):
    cache = cache_of(kind, capacity=1)
    params = settings(kafka)
    existing = filled(kafka, kafka_topic)
    gone = filled(kafka, kafka_topic)
    kafka.delete_topic(gone)
    try:
        assert read_range(cache, params, OffsetRange(existing, 0, 0, RECORDS)) == RECORDS
        error, elapsed = failing(cache, params, OffsetRange(gone, 0, 1, 3))
        assert cache.handedOver == 1 and cache.created == 1
        # The failed consumer is closed, not kept; the next range reads as ever.
        assert read_range(cache, params, OffsetRange(existing, 0, 0, RECORDS)) == RECORDS
    finally:
        cache.clear()
    print(f"\n{kind}: a handed-over consumer's typed error after {elapsed:.2f} s")
    assert_names_the_range(error, gone, 0, 1, 3)
    assert elapsed < BOUND_S, f"the typed error took {elapsed:.1f} s"


@pytest.mark.parametrize("kind", ["python", "native"])
@pytest.mark.parametrize("handed_over", [False, True])
def test_a_partition_beyond_the_topics_count_fails_typed_naming_the_count(
        kafka, kafka_topic, kind, handed_over):
    cache = cache_of(kind, capacity=1)
    params = settings(kafka)
    topic = filled(kafka, kafka_topic, partitions=2)
    try:
        if handed_over:
            assert read_range(cache, params, OffsetRange(topic, 1, 0, RECORDS)) == RECORDS
        error, elapsed = failing(cache, params, OffsetRange(topic, 5, 0, RECORDS))
    finally:
        cache.clear()
    assert_names_the_range(error, topic, 5, 0, RECORDS)
    assert "partitions 0..1, not 5" in str(error)
    assert elapsed < BOUND_S, f"the typed error took {elapsed:.1f} s"


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_short_poll_timeout_still_names_a_missing_topic(kafka, kafka_topic, kind):
    # A poll timeout shorter than the grace: the error at the timeout says what is wrong.
    cache = cache_of(kind)
    params = settings(kafka)
    topic = filled(kafka, kafka_topic)
    kafka.delete_topic(topic)
    try:
        error, elapsed = failing(cache, params, OffsetRange(topic, 0, 0, RECORDS), 700)
    finally:
        cache.clear()
    assert_names_the_range(error, topic, 0, 0, RECORDS)
    assert elapsed < 2.0


@pytest.mark.parametrize("kind", ["python", "native"])
@pytest.mark.parametrize("handed_over", [False, True])
def test_a_topic_created_while_its_range_waits_is_read(kafka, kafka_topic, kind, handed_over):
    # A topic only briefly unknown to the reader (its metadata not there yet) is no error:
    # the reader first hears that the topic does not exist, then it does.
    cache = cache_of(kind, capacity=1)
    params = settings(kafka)
    late = f"late-{time.time_ns()}"
    if handed_over:
        existing = filled(kafka, kafka_topic)
        assert read_range(cache, params, OffsetRange(existing, 0, 0, RECORDS)) == RECORDS

    def create():
        time.sleep(0.6)
        kafka.create_topic(late, 1)
        kafka.produce(late, [b"x"] * RECORDS, partition=0)

    creating = threading.Thread(target=create)
    creating.start()
    try:
        assert read_range(cache, params, OffsetRange(late, 0, 0, RECORDS)) == RECORDS
    finally:
        creating.join()
        cache.clear()
        kafka.delete_topic(late)
    assert cache.handedOver == (1 if handed_over else 0)


def test_an_executor_never_creates_the_deleted_topic_again(kafka, kafka_topic):
    # The broker creates a topic a metadata request names when the client allows it
    # (auto.create.topics.enable is true here, as by default): the reader's questions about
    # a deleted topic would bring it back empty, and the range would fail as data loss.
    cache = ConsumerCache()
    params = settings(kafka, **{"allow.auto.create.topics": True})
    assert params["allow.auto.create.topics"] is False
    topic = filled(kafka, kafka_topic)
    try:
        assert read_range(cache, params, OffsetRange(topic, 0, 0, 2)) == 2
        kafka.delete_topic(topic)
        error, _ = failing(cache, params, OffsetRange(topic, 0, 2, RECORDS))
    finally:
        cache.clear()
    assert error.topic == topic
    assert not listed(kafka, topic)


# -- fetch sessions ---------------------------------------------------------------------------

def test_a_kept_session_consumer_hands_a_missing_topics_ranges_back_at_once(kafka, kafka_topic):
    existing = filled(kafka, kafka_topic, partitions=2)
    other = filled(kafka, kafka_topic)
    gone = filled(kafka, kafka_topic, partitions=2)
    kafka.delete_topic(gone)
    consumers = SessionConsumers()
    params = settings(kafka, "missing-session")
    try:
        first = [OffsetRange(existing, p, 0, RECORDS) for p in range(2)]
        assert [len(r.messages) for r in FetchSession(params, consumers=consumers).read(
            first, POLL_MS)] == [RECORDS, RECORDS]
        mixed = [OffsetRange(existing, 0, 0, RECORDS), OffsetRange(gone, 0, 1, 3),
                 OffsetRange(existing, 1, 2, RECORDS), OffsetRange(gone, 1, 0, 2),
                 OffsetRange(other, 3, 0, 2), OffsetRange(other, 0, 0, RECORDS)]
        started = time.monotonic()
        parts = list(FetchSession(params, consumers=consumers).read(mixed, POLL_MS))
        elapsed = time.monotonic() - started
    finally:
        consumers.clear()
    assert consumers.reused == 1
    assert [(p.offsetRange, len(p.messages), p.resumeAt) for p in parts] == [
        (mixed[0], RECORDS, None), (mixed[1], 0, 1), (mixed[2], RECORDS - 2, None),
        (mixed[3], 0, 0), (mixed[4], 0, 0), (mixed[5], RECORDS, None)]
    # Handed back as soon as the cluster said they do not exist (a deleted topic, a
    # partition beyond a topic's count), not after the session's two seconds without
    # progress. (The kept consumer asks about the topics it has not met; one it has met
    # is read as any other, and a range of it that cannot progress is handed back later.)
    assert elapsed < 1.5, f"the session took {elapsed:.1f} s"


@pytest.mark.parametrize("reader", ["python", "c"])
@pytest.mark.parametrize("kept", [False, True])
def test_a_task_reading_in_a_session_fails_typed_on_a_deleted_topic(kafka, kafka_topic,
                                                                   reader, kept, monkeypatch):
    import kafka_direct.client.fetch_session as fetch_session

    if reader == "c" and not native_status()[0]:
        pytest.skip(native_status()[1])
    consumers = SessionConsumers()
    monkeypatch.setattr(fetch_session, "session_consumers", consumers)
    topic = filled(kafka, kafka_topic, partitions=3)
    read_settings = PartitionReadSettings(ReadSettings(settings(kafka, "missing-task"),
                                                       pollTimeoutMs=POLL_MS), impl=reader)
    ranges = [OffsetRange(topic, p, 0, RECORDS) for p in range(3)]
    assert in_session(ranges)
    try:
        if kept:  # the worker's session consumer knows the topic from an earlier batch
            assert sum(b.num_rows for b in read_task(ranges, read_settings)) == 3 * RECORDS
            assert len(consumers) == 1
        kafka.delete_topic(topic)
        started = time.monotonic()
        with pytest.raises(CarriedTaskError) as raised:
            list(read_task([OffsetRange(topic, p, 1, RECORDS) for p in range(3)],
                           read_settings))
        elapsed = time.monotonic() - started
    finally:
        consumers.clear()
    error = carried_error(raised.value)
    assert isinstance(error, UnknownTopicOrPartitionError), raised.value
    assert_names_the_range(error, topic, 0, 1, RECORDS)
    print(f"\n{reader}, kept={kept}: a session task's typed error after {elapsed:.2f} s")
    assert elapsed < BOUND_S + 2.0, f"the typed error took {elapsed:.1f} s"
