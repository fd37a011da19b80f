"""One consumer reading many partitions' ranges: records sorted into their ranges, in order."""

import pytest

from kafka_direct import OffsetRange
from kafka_direct.client.fetch_session import FetchSession, session_ranges
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
        self.closed = False

    def assign(self, tps):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def consume(self, num, timeout):
        if not self.script:
            return []
        return [m if isinstance(m, FakeMessage) else FakeMessage(*m, value=b"v")
                for m in self.script.pop(0)]

    def pause(self, tps):
        self.paused.extend((tp.topic, tp.partition) for tp in tps)

    def position(self, tps):
        return [Answer(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition),
                                                                   -1001)) for tp in tps]

    def close(self):
        self.closed = True


def read(consumer, ranges, pollTimeoutMs=120_000):
    session = FetchSession({"group.id": "spark-executor-g"}, factory=lambda params: consumer)
    return [(part.offsetRange, [m.offset() for m in part.messages], part.resumeAt)
            for part in session.read(ranges, pollTimeoutMs)]


def test_interleaved_answers_come_out_range_by_range_in_the_order_given():
    ranges = [OffsetRange("a", 0, 2, 5), OffsetRange("b", 1, 0, 2), OffsetRange("a", 1, 7, 9)]
    consumer = ManyPartitions({}, [
        [("a", 1, 7), ("a", 1, 8), ("b", 1, 0)],  # the last range's records first
        [("a", 0, 1), ("a", 0, 2), ("a", 0, 3)],  # offset 1: before the range (stale)
        [("b", 1, 1), ("a", 0, 4), ("a", 0, 5), ("a", 1, 9)],  # past the ranges: dropped
    ])
    assert read(consumer, ranges) == [(ranges[0], [2, 3, 4], None),
                                      (ranges[1], [0, 1], None), (ranges[2], [7, 8], None)]
    assert consumer.assigned == [("a", 0, 2), ("b", 1, 0), ("a", 1, 7)]
    # A finished partition is paused (it must not keep fetching past its range); the
    # session's consumer is its own, closed after the read.
    assert sorted(consumer.paused) == [("a", 0), ("a", 1), ("b", 1)]
    assert consumer.closed


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
    assert sorted(consumer.paused) == [("a", 0), ("b", 1)]
