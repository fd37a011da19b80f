"""One consumer reading many partitions' ranges: records sorted into their ranges, in order."""

import pytest

from kafka_direct import OffsetRange
from kafka_direct.client.fetch_session import FetchSession, SessionConsumers, session_ranges
from tests.fakes.fake_kafka import FakeMessage


class Answer:
    def __init__(self, topic, partition, offset, error=None):
        self.topic, self.partition, self.offset, self.error = topic, partition, offset, error


class ManyPartitions:
    """A consumer of several partitions whose answers are scripted batch by batch.

    ``logs`` maps (topic, partition) to that log's offsets with a record; ``script`` is the
    order of deliveries: a list of lists of (topic, partition, offset) or a message.
    """

    def __init__(self, logs, script, positions=None):
        self.logs = logs
        self.script = list(script)
        self.positions = positions or {}
        self.assigned = None
        self.paused = []
        self.everPaused = []
        self.asked = []
        self.closed = False

    def assign(self, tps):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def consume(self, num, timeout):
        self.asked.append(num)
        if not self.script:
            return []
        return [m if isinstance(m, FakeMessage) else FakeMessage(*m, value=b"v")
                for m in self.script.pop(0)]

    def pause(self, tps):
        self.paused.extend((tp.topic, tp.partition) for tp in tps)
        self.everPaused.extend((tp.topic, tp.partition) for tp in tps)

    @property
    def pausedAtSomePoint(self):
        return sorted(self.everPaused)

    def position(self, tps):
        return [Answer(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition),
                                                                   -1001)) for tp in tps]

    def resume(self, tps):
        resumed = {(tp.topic, tp.partition) for tp in tps}
        self.paused = [key for key in self.paused if key not in resumed]

    def unassign(self):
        self.assigned = []

    def close(self):
        self.closed = True


def read(consumer, ranges, pollTimeoutMs=120_000, consumers=None, attempt=0):
    session = FetchSession({"group.id": "spark-executor-g"}, factory=lambda params: consumer,
                           consumers=consumers or SessionConsumers())
    return [(part.offsetRange, [m.offset() for m in part.messages], part.resumeAt)
            for part in session.read(ranges, pollTimeoutMs, attempt)]


def test_interleaved_answers_come_out_range_by_range_in_the_order_given():
    ranges = [OffsetRange("a", 0, 2, 5), OffsetRange("b", 1, 0, 2), OffsetRange("a", 1, 7, 9)]
    consumer = ManyPartitions({}, [
        [("a", 1, 7), ("a", 1, 8), ("b", 1, 0)],  # the last range's records first
        [("a", 0, 1), ("a", 0, 2), ("a", 0, 3)],  # offset 1: before the range (stale)
        [("b", 1, 1), ("a", 0, 4), ("a", 0, 5), ("a", 1, 9)],  # past the ranges: dropped
    ])
    assert read(consumer, ranges) == [(ranges[0], [2, 3, 4], None),
                                      (ranges[1], [0, 1], None), (ranges[2], [7, 8], None)]
    assert consumer.pausedAtSomePoint == [("a", 0), ("a", 1), ("b", 1)]


def test_a_range_ending_in_offsets_without_records_ends_at_the_consumers_position():
    ranges = [OffsetRange("a", 0, 0, 4), OffsetRange("a", 1, 0, 2)]
    # a-0: offset 3 is a transaction marker; only the position says the range is done.
    consumer = ManyPartitions({}, [[("a", 0, 0), ("a", 0, 1), ("a", 0, 2)],
                                   [("a", 1, 0), ("a", 1, 1)], []],
                              positions={("a", 0): 4})
    assert read(consumer, ranges) == [(ranges[0], [0, 1, 2], None), (ranges[1], [0, 1], None)]


def test_a_record_past_the_range_after_a_gap_ends_the_range():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 0, 1)]
    consumer = ManyPartitions({}, [[("a", 0, 0), ("a", 0, 6)], [("a", 1, 0)]])
    assert read(consumer, ranges) == [(ranges[0], [0], None), (ranges[1], [0], None)]


def test_an_error_hands_the_rest_of_its_range_back_to_the_per_range_reader():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 0, 2)]
    lost = FakeMessage("a", 0, 2, error="offset out of range")
    consumer = ManyPartitions({}, [[("a", 0, 0), ("a", 0, 1), lost], [("a", 1, 0), ("a", 1, 1)]])
    # Records before the error are kept; the per-range reader decides the rest (data loss,
    # a warning...) from offset 2 on.
    assert read(consumer, ranges) == [(ranges[0], [0, 1], 2), (ranges[1], [0, 1], None)]


def test_ranges_without_progress_are_handed_back_after_a_while(monkeypatch):
    import kafka_direct.client.fetch_session as module

    clock = iter(range(0, 10_000, 600))
    monkeypatch.setattr(module.time, "monotonic", lambda: next(clock) / 1000.0)
    ranges = [OffsetRange("a", 0, 0, 3), OffsetRange("a", 1, 0, 1)]
    consumer = ManyPartitions({}, [[("a", 1, 0), ("a", 0, 0)]])
    assert read(consumer, ranges, pollTimeoutMs=1000) == [(ranges[0], [0], 1),
                                                           (ranges[1], [0], None)]


@pytest.mark.parametrize(("ranges", "shared"), [
    ([OffsetRange("a", 0, 0, 1), OffsetRange("a", 1, 0, 1)], True),
    ([OffsetRange("a", 0, 0, 1)], False),  # one range: the per-range reader
    ([OffsetRange("a", 0, 0, 1), OffsetRange("a", 0, 1, 2)], False),  # a partition twice
    ([OffsetRange("a", 0, 0, 1), OffsetRange("a", 1, 3, 3)], False),  # an empty range
])
def test_only_several_nonempty_ranges_of_distinct_partitions_share_a_session(ranges, shared):
    assert session_ranges(ranges) is shared
    if not shared:
        with pytest.raises(ValueError, match="one per partition"):
            read(ManyPartitions({}, []), ranges)


def test_a_partition_in_two_runs_of_one_answer_after_its_range_ended_is_done_once():
    # librdkafka may hand over one partition's records in two runs of a batch (two fetch
    # responses): the second, past the finished range, once ended the range a second time
    # (a KeyError that failed the task).
    ranges = [OffsetRange("a", 0, 0, 2), OffsetRange("b", 1, 0, 1)]
    consumer = ManyPartitions({}, [[("a", 0, 0), ("a", 0, 1), ("b", 1, 0), ("a", 0, 2)]])
    assert read(consumer, ranges) == [(ranges[0], [0, 1], None), (ranges[1], [0], None)]
    assert consumer.pausedAtSomePoint == [("a", 0), ("b", 1)]


def batches(partitions, size, count):
    """``count`` consecutive batches of ``size`` offsets on each partition of topic a."""
    return [[OffsetRange("a", p, b * size, (b + 1) * size) for p in partitions]
            for b in range(count)]


def answers(ranges):
    return [[("a", r.partition, o) for o in range(r.fromOffset, r.untilOffset)]
            for r in ranges]


def read_batches(consumers, made, plan, attempt=0):
    """Each batch read in a session of its own, as a worker's successive tasks do."""
    results = []
    current = []

    def factory(params):  # one maker, as a worker's: its consumers are kept under it
        made.append(ManyPartitions({}, answers(current)))
        return made[-1]

    for ranges in plan:
        current[:] = ranges
        for consumer in made:  # an idle consumer, if reused, answers this batch
            consumer.script = answers(ranges)
        session = FetchSession({"group.id": "spark-executor-g"}, factory=factory,
                               consumers=consumers)
        results.append([(part.offsetRange, [m.offset() for m in part.messages],
                         part.resumeAt) for part in session.read(ranges, 120_000, attempt)])
    return results


def test_a_workers_successive_sessions_read_with_one_consumer():
    # Without the cache, every task of every batch made a consumer (a client, connections,
    # a broker's fetch session) and closed it.
    consumers, made = SessionConsumers(), []
    plan = batches([0, 1, 2], size=3, count=4)
    results = read_batches(consumers, made, plan)
    assert results == [[(r, list(range(r.fromOffset, r.untilOffset)), None) for r in ranges]
                       for ranges in plan]
    assert len(made) == 1 and (consumers.created, consumers.reused) == (1, 3)
    idle = made[0]
    # Kept idle: nothing assigned, nothing paused (librdkafka keeps a pause across
    # assignments), not closed.
    assert (idle.assigned, idle.paused, idle.closed) == ([], [], False)
    assert len(consumers) == 1


def test_a_retried_task_reads_with_a_consumer_of_its_own_closed_after():
    consumers, made = SessionConsumers(), []
    plan = batches([0, 1], size=2, count=1)
    read_batches(consumers, made, plan)  # the first attempt's consumer, kept idle
    again = read_batches(consumers, made, plan, attempt=1)
    assert again == [[(r, [0, 1], None) for r in plan[0]]]
    assert len(made) == 2 and made[1].closed and not made[0].closed
    assert (consumers.created, consumers.reused, len(consumers)) == (2, 0, 1)


def test_a_session_that_hands_a_range_back_or_is_abandoned_closes_its_consumer():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 0, 2)]
    consumers = SessionConsumers()
    lost = FakeMessage("a", 0, 2, error="offset out of range")
    failed = ManyPartitions({}, [[("a", 0, 0), ("a", 0, 1), lost], [("a", 1, 0), ("a", 1, 1)]])
    read(failed, ranges, consumers=consumers)
    assert failed.closed and len(consumers) == 0
    abandoned = ManyPartitions({}, answers(ranges))
    reads = FetchSession({}, factory=lambda params: abandoned, consumers=consumers).read(
        ranges, 120_000)
    next(reads)
    reads.close()
    assert abandoned.closed and len(consumers) == 0


def test_idle_consumers_past_the_capacity_are_closed_least_recent_first():
    consumers = SessionConsumers(capacity=2)
    kept = [ManyPartitions({}, []) for _ in range(3)]
    for i, consumer in enumerate(kept):
        consumers.give_back({"bootstrap.servers": f"b{i}"}, ManyPartitions, consumer)
    assert [c.closed for c in kept] == [True, False, False] and len(consumers) == 2
    taken, keep, topics = consumers.take({"bootstrap.servers": "b2"}, ManyPartitions,
                                         attempt=0)
    assert taken is kept[2] and keep and topics == frozenset()
    consumers.clear()
    assert kept[1].closed and len(consumers) == 0
    with pytest.raises(ValueError, match="at least one"):
        SessionConsumers(capacity=0)


def test_a_session_asks_librdkafka_for_no_more_records_than_its_open_ranges_hold():
    # librdkafka's consume returns once it has as many messages as asked, else at the end
    # of the slice: asking for 5,000 made every session wait a slice (100 ms) for records
    # that were never coming.
    ranges = [OffsetRange("a", 0, 2, 5), OffsetRange("b", 1, 0, 2)]
    consumer = ManyPartitions({}, [[("a", 0, 2), ("a", 0, 3)], [("a", 0, 4), ("b", 1, 0)],
                                   [("b", 1, 1)]])
    assert read(consumer, ranges) == [(ranges[0], [2, 3, 4], None), (ranges[1], [0, 1], None)]
    assert consumer.asked == [5, 3, 1]
