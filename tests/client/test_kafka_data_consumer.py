import logging

import pytest

from kafka_direct import DataLossError, OffsetOutOfRangeError, OffsetRange, PollTimeoutError
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.data_consumer import KafkaDataConsumer
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.record_reader import read_range
from tests.fakes.fake_kafka import FakeConsumer, FakeLog

PARAMS = {"bootstrap.servers": "fake:1", "group.id": "spark-executor-g"}


def reader(log):
    fakes = []

    def factory(params):
        fakes.append(FakeConsumer(log))
        return fakes[-1]

    return KafkaDataConsumer("t", 0, PARAMS, factory), fakes


def offsets(consumer, start, end, **kw):
    return [m.offset() for m in consumer.read(start, end, kw.pop("timeout", 5000), **kw)]


def fake_consumers():
    """A factory of fake consumers over one log of offsets 0-9, and the list it fills."""
    made = []

    def factory(params):
        made.append(FakeConsumer(FakeLog(range(10))))
        return made[-1]

    return made, factory


def test_reads_exactly_the_half_open_range_and_skips_gaps():
    log = FakeLog([0, 1, 2, 4, 5, 7, 8, 9])  # 3 and 6: markers or compacted
    consumer, fakes = reader(log)
    assert offsets(consumer, 1, 8) == [1, 2, 4, 5, 7]
    assert offsets(consumer, 8, 10) == [8, 9]
    assert fakes[0].assigns == [1, 8]  # each range is assigned at its start


def test_a_range_costs_one_assignment_and_one_unassignment():
    # Per range, two client calls: the partition assigned at the range's start and
    # unassigned at its end (an idle consumer fetches nothing). No pause to undo before the
    # next range, no resume, no seek: four calls a range before, for a handed-over consumer.
    consumer, fakes = reader(FakeLog(range(20)))
    fake = fakes[0]
    calls = []

    def recorded(name):
        call = getattr(fake, name)

        def record(*args):
            calls.append(name)
            return call(*args)
        return record

    for name in ("assign", "unassign", "pause", "resume", "seek"):
        setattr(fake, name, recorded(name))
    assert offsets(consumer, 0, 5) == list(range(5))
    assert offsets(consumer, 5, 9) == list(range(5, 9))  # the same partition's next range
    assert fake.pointer is None  # idle: nothing assigned
    consumer.retarget("t", 1)  # a hand-over of the idle consumer: no client call
    assert calls == ["assign", "unassign", "assign", "unassign"]


def test_range_ending_in_markers_ends_when_the_position_reaches_until():
    log = FakeLog([0, 1, 2], high=5)  # offsets 3 and 4 are transaction markers
    consumer, _ = reader(log)
    assert offsets(consumer, 0, 5) == [0, 1, 2]


def test_a_record_fetched_past_the_end_is_read_by_the_next_range():
    log = FakeLog([0, 1, 2, 3, 4, 8, 9])  # 5..7 compacted away
    consumer, fakes = reader(log)
    assert offsets(consumer, 0, 6) == [0, 1, 2, 3, 4]  # fetch brought 8 along
    assert offsets(consumer, 6, 10) == [8, 9]
    assert fakes[0].assigns == [0, 6]


def test_a_range_not_starting_where_the_last_ended_seeks():
    consumer, fakes = reader(FakeLog(range(20)))
    assert offsets(consumer, 0, 5) == list(range(5))
    assert offsets(consumer, 10, 12) == [10, 11]
    assert offsets(consumer, 2, 4) == [2, 3]  # a retried earlier batch reads the same records
    assert fakes[0].assigns == [0, 10, 2]


def test_deleted_offsets_raise_data_loss_naming_partition_and_offsets():
    consumer, _ = reader(FakeLog(range(30), low=20))
    with pytest.raises(DataLossError) as info:
        offsets(consumer, 10, 25)
    error = info.value
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == ("t", 0, 10, 25)
    assert error.logStartOffset == 20
    assert "failOnDataLoss=False" in str(error)


def test_fail_on_data_loss_false_warns_and_reads_from_the_log_start(caplog):
    consumer, _ = reader(FakeLog(range(30), low=20))
    with caplog.at_level(logging.WARNING):
        assert offsets(consumer, 10, 25, failOnDataLoss=False) == list(range(20, 25))
    assert "data loss on t-0" in caplog.text
    consumer, _ = reader(FakeLog(range(30), low=20))
    assert offsets(consumer, 5, 15, failOnDataLoss=False) == []  # all of it gone


def test_a_range_beyond_the_log_end_fails_clearly():
    consumer, _ = reader(FakeLog(range(10)))
    with pytest.raises(OffsetOutOfRangeError) as info:
        offsets(consumer, 5, 15)
    assert info.value.logEndOffset == 10
    consumer, _ = reader(FakeLog(range(10)))
    with pytest.raises(OffsetOutOfRangeError):
        offsets(consumer, 12, 15)


def test_fail_on_data_loss_false_skips_what_a_shrunk_log_no_longer_has(caplog):
    # Ranges planned before the log shrank (a re-created topic, a truncation): what exists
    # is read, the rest skipped with a warning.
    consumer, _ = reader(FakeLog(range(10)))
    with caplog.at_level(logging.WARNING):
        assert offsets(consumer, 5, 15, failOnDataLoss=False) == list(range(5, 10))
    assert "offsets [10, 15) of t-0 do not exist" in caplog.text
    consumer, _ = reader(FakeLog(range(10)))  # the start beyond the new end
    assert offsets(consumer, 12, 15, failOnDataLoss=False) == []
    consumer, _ = reader(FakeLog(range(20, 25), low=20))  # below the start and beyond the end
    assert offsets(consumer, 10, 40, failOnDataLoss=False) == list(range(20, 25))
    assert offsets(consumer, 40, 45, failOnDataLoss=False) == []  # the next range too


def test_no_progress_within_the_poll_timeout_fails_naming_range_and_timeout():
    consumer, _ = reader(FakeLog(range(10), stuck_at=5))  # an open transaction at 5
    with pytest.raises(PollTimeoutError) as info:
        offsets(consumer, 0, 10, timeout=300)
    assert info.value.position == 5 and info.value.timeoutMs == 300
    assert "300 ms" in str(info.value)


def test_cache_reuses_consumers_and_gives_retries_a_fresh_one():
    _, factory = fake_consumers()
    cache = ConsumerCache(capacity=2, factory=factory)
    first, release = cache.acquire("t", 0, PARAMS)
    release()
    again, release = cache.acquire("t", 0, PARAMS)
    assert again is first
    # while in use, a second user of the same partition gets its own consumer
    other, release_other = cache.acquire("t", 0, PARAMS)
    assert other is not first
    release_other()
    assert other.closed
    release()
    retry, release = cache.acquire("t", 0, PARAMS, attempt=1)
    release()
    assert retry is not first and first.closed
    for partition in (1, 2):
        _, rel = cache.acquire("t", partition, PARAMS)
        rel()
    # Full: the least recently used idle consumer is handed over to t-2 (not closed).
    assert len(cache) == 2 and not retry.closed and retry.partition == 2
    assert cache.handedOver == 1


def test_a_full_cache_hands_an_idle_consumer_over_to_the_next_partition():
    made, factory = fake_consumers()
    cache = ConsumerCache(capacity=2, factory=factory)
    for partition in (0, 1):
        consumer, release = cache.acquire("t", partition, PARAMS)
        list(consumer.read(0, 3, 5000))  # unassigned at 3
        release()
    assert made[0].unassigned == 1 and made[0].pointer is None
    # Full: the least recently used idle consumer (t-0's) reads t-2 now; it has nothing
    # assigned, so the hand-over makes no client call.
    handed, release = cache.acquire("t", 2, PARAMS)
    assert handed._consumer is made[0] and (handed.topic, handed.partition) == ("t", 2)
    assert made[0].unassigned == 1 and made[0].assigns == [0] and not made[0].closed
    assert cache.handedOver == 1 and cache.created == 2 and len(cache) == 2
    # One in use is never handed over; t-1's idle one is.
    again, release_again = cache.acquire("t", 3, PARAMS)
    assert again._consumer is made[1] and cache.created == 2
    release_again()
    # Nothing idle of these parameters: a consumer of its own; past its capacity, the
    # least recently used idle consumer (t-3's) is closed, the one in use (t-2's) stays.
    other, release_other = cache.acquire("t", 4, {**PARAMS, "group.id": "other"})
    assert other._consumer is made[2] and cache.created == 3
    assert len(cache) == 2 and made[1].closed and not made[0].closed
    release_other()
    release()
    # The other group's idle consumer is handed over to its t-6.
    last, release_last = cache.acquire("t", 6, {**PARAMS, "group.id": "other"})
    release_last()
    assert last._consumer is made[2] and not made[0].closed and len(cache) == 2
    # A retried task never gets a handed-over consumer; the least recently used idle one
    # (t-2's) makes room for it.
    retry, release_retry = cache.acquire("t", 5, PARAMS, attempt=1)
    assert retry._consumer is made[3] and cache.handedOver == 3
    release_retry()
    assert made[0].closed and len(cache) == 2


def test_a_consumer_asks_a_topics_metadata_the_first_time_it_meets_it_only():
    # librdkafka learns a topic first named in an assignment only at its once-a-second
    # scan: a handed-over consumer asks for a new topic's metadata before its first range
    # (tests/client/test_new_topic_handover.py), and never again for that topic.
    consumer, fakes = reader(FakeLog(range(10)))
    fake = fakes[0]
    assert offsets(consumer, 0, 2) == [0, 1]  # its own first topic: its connection asks
    for topic, start in (("u", 2), ("u", 4), ("t", 6), ("v", 8), ("u", 9)):
        consumer.retarget(topic, 0)
        fake.topic = topic
        assert offsets(consumer, start, start + 1) == [start]
    assert fake.asked == ["u", "v"]


def test_a_failed_metadata_question_leaves_the_range_to_read_and_is_not_asked_again():
    # A range of the topic read to its end: the client has the topic's metadata then.
    consumer, fakes = reader(FakeLog(range(10)))
    fake = fakes[0]
    fake.metadata_fails = True
    consumer.retarget("u", 0)
    fake.topic = "u"
    assert offsets(consumer, 0, 3) == [0, 1, 2]
    fake.metadata_fails = False
    assert offsets(consumer, 3, 5) == [3, 4]
    assert fake.asked == ["u"]


class SlowMetadata(FakeConsumer):
    """A broker whose metadata answers take longer than the question's timeout."""

    def list_topics(self, topic=None, timeout=None):
        import time

        from confluent_kafka import KafkaError, KafkaException

        self.asked = [*getattr(self, "asked", []), topic]
        time.sleep(timeout)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


def test_a_topic_read_after_a_timed_out_question_is_not_asked_again_every_range():
    import time

    made = []

    def factory(params):
        made.append(SlowMetadata(FakeLog(range(10))))
        return made[-1]

    consumer = KafkaDataConsumer("t", 0, PARAMS, factory)
    consumer.retarget("u", 0)
    made[0].topic = "u"
    started = time.monotonic()
    for start in (0, 3, 6):
        assert offsets(consumer, start, start + 3) == list(range(start, start + 3))
    elapsed = time.monotonic() - started
    asked = getattr(made[0], "asked", [])
    assert len(asked) <= 1 and elapsed < 1.5, f"asked {asked}, {elapsed:.1f} s for 9 records"


def test_a_failed_read_on_a_partition_in_use_elsewhere_leaves_the_other_consumer_alone():
    made, factory = fake_consumers()
    cache = ConsumerCache(capacity=4, factory=factory)
    with cache.lease("t", 0, PARAMS) as first:
        with pytest.raises(RuntimeError), cache.lease("t", 0, PARAMS) as twin:
            assert twin is not first  # the cached one is in use: one of its own
            raise RuntimeError("the twin's read failed")
        assert twin.closed and not first.closed
        # Still in use by the first read: a third reader gets one of its own too.
        third, release = cache.acquire("t", 0, PARAMS)
        assert third is not first
        release()
    again, release = cache.acquire("t", 0, PARAMS)
    assert again is first and len(made) == 3
    release()


def test_a_consumer_that_cannot_be_handed_over_is_closed_and_a_new_one_made():
    made, factory = fake_consumers()
    cache = ConsumerCache(capacity=1, factory=factory)
    idle, release = cache.acquire("t", 0, PARAMS)
    release()

    def broken(topic, partition):
        raise RuntimeError("the client refused the new partition")

    idle._switch = broken  # as the native reader's retarget may fail
    fresh, release = cache.acquire("t", 1, PARAMS)
    release()
    assert fresh._consumer is made[1] and made[0].closed and cache.handedOver == 0
    assert len(cache) == 1


def test_read_range_builds_records_and_discards_a_consumer_left_mid_range():
    made, factory = fake_consumers()
    cache = ConsumerCache(factory=factory)
    settings = ReadSettings(params=PARAMS, valueDeserializer=lambda b: b.decode())
    records = list(read_range(OffsetRange("t", 0, 2, 5), settings, cache=cache))
    assert [(r.offset, r.value, r.timestamp, r.timestampType) for r in records] == [
        (2, "v2", 1002, 0), (3, "v3", 1003, 0), (4, "v4", 1004, 0)]
    assert len(cache) == 1
    partial = read_range(OffsetRange("t", 0, 5, 9), settings, cache=cache)
    next(partial)
    partial.close()  # like take(1)
    assert len(cache) == 0 and made[0].closed


def test_a_consumer_whose_assignment_failed_assigns_afresh_on_its_next_range():
    # An assignment failing mid-way leaves librdkafka's position unknown: the next range of
    # a caller that keeps the consumer is assigned at its own start, whatever came before.
    consumer, fakes = reader(FakeLog(range(30)))
    assert offsets(consumer, 0, 10) == list(range(10))
    fake = fakes[0]
    assign = fake.assign

    def broken(tps):
        fake.pointer = 25  # somewhere else, as a half-done client call may leave it
        raise RuntimeError("the client failed mid-way")

    fake.assign = broken
    with pytest.raises(RuntimeError, match="failed mid-way"):
        offsets(consumer, 10, 20)
    fake.assign = assign
    assert offsets(consumer, 10, 20) == list(range(10, 20))
    assert fake.assigns == [0, 10]
