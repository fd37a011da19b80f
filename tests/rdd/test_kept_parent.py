"""KafkaRDDs over a kept JVM parent: the offsets in the batch's function, the parent kept.

Against the real broker and a real local Spark (``local[2,2]``: a failed task is retried
once): each batch's RDD reads exactly its ranges, partition ``i`` range ``i``, a retried
task the same records; counting and the DataFrame view see the same ranges; the parent is
the same JVM RDD while the partitions and their locations stay, a new one otherwise. A
grouped batch's RDD reads exactly its groups, partition ``i`` group ``i``, over a parent
kept for its number of groups.
"""

import json
import pickle

import pytest

from kafka_direct import KafkaDirectError, KafkaRDD, LocationStrategies, OffsetRange
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.kept_parent import (
    GroupsAt,
    KeptGroups,
    KeptParent,
    RangesAt,
    pack_offsets,
    pack_places,
)
from kafka_direct.rdd.range_groups import cut
from kafka_direct.topic_partition import TopicPartition


def fill(kafka, topic, partitions, per_partition):
    for p in range(partitions):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(per_partition)], partition=p)


def batch(kept, spark, ranges, settings):
    partitions = [r.topicPartition() for r in ranges]
    locations = KeptParent.locations(spark, partitions, LocationStrategies.PreferConsistent(),
                                     None)
    offsets = pack_offsets([r.fromOffset for r in ranges], [r.untilOffset for r in ranges])
    return kept.kafka_rdd(spark, partitions, offsets, settings, locations, lambda: ranges)


def test_the_offsets_of_a_range_are_read_back_at_its_index_in_a_task():
    at = RangesAt(pack_offsets([0, 5, 2**63 - 2], [3, 5, 2**63 - 1]), 3)
    at = pickle.loads(pickle.dumps(at))  # as a task gets it
    assert list(at(1, iter([("t", 7)]))) == [("t", 7, 5, 5)]
    assert list(at(2, iter([("u", 0)]))) == [("u", 0, 2**63 - 2, 2**63 - 1)]
    with pytest.raises(KafkaDirectError, match="partition 3 .* 3 ranges"):
        at(3, iter([("t", 0)]))
    with pytest.raises(KafkaDirectError, match="holds 2 elements"):
        at(0, iter([("t", 0), ("t", 1)]))
    with pytest.raises(KafkaDirectError, match="2 ranges must be 32 bytes"):
        RangesAt(b"\0" * 16, 2)
    assert pack_offsets([2**63], [2**63]) is None  # beyond int64: the ranges refuse it


def test_batches_over_a_kept_parent_read_exactly_their_ranges(kafka, kafka_topic, spark,
                                                               params, tmp_path):
    topic = kafka_topic(partitions=3)
    fill(kafka, topic, 3, 40)
    settings = ReadSettings(params=params)
    kept = KeptParent()
    first = [OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 5, 5),
             OffsetRange(topic, 2, 0, 20)]
    second = [OffsetRange(topic, 0, 10, 40), OffsetRange(topic, 1, 5, 12),
              OffsetRange(topic, 2, 20, 21)]
    rdds = [batch(kept, spark, ranges, settings) for ranges in (first, second)]
    assert rdds[0]._prev_jrdd is rdds[1]._prev_jrdd  # one JVM parent for both batches
    seen_dir = str(tmp_path)

    def fail_first_attempt(index, records):
        import os

        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        offsets = [(r.partition, r.offset, r.value) for r in records]
        with open(os.path.join(seen_dir, f"{index}-{attempt}"), "w") as f:
            f.write(json.dumps([[p, o, v.decode()] for p, o, v in offsets]))
        if attempt == 0:
            raise RuntimeError("first attempt fails on purpose")
        return [(index, offsets)]

    for ranges, rdd in zip((first, second), rdds, strict=True):
        assert isinstance(rdd, KafkaRDD) and rdd.offsetRanges() == ranges
        assert rdd.getNumPartitions() == 3
        expected = {index: [(r.partition, o, f"{r.partition}:{o}".encode())
                            for o in range(r.fromOffset, r.untilOffset)]
                    for index, r in enumerate(ranges)}
        got = dict(rdd.mapPartitionsWithIndex(
            lambda i, records: [(i, [(r.partition, r.offset, r.value) for r in records])])
            .collect())
        assert got == expected
        assert rdd.count() == sum(r.count() for r in ranges)
        assert rdd._ranges_rdd.collect() == [(r.topic, r.partition, r.fromOffset,
                                              r.untilOffset) for r in ranges]
        assert sorted(row.offset for row in rdd.toDF().collect()) == sorted(
            o for r in ranges for o in range(r.fromOffset, r.untilOffset))
        # A retried task reads exactly the records of its range again.
        assert dict(rdd.mapPartitionsWithIndex(fail_first_attempt).collect()) == expected
        for index, records in expected.items():
            for attempt in (0, 1):
                assert json.loads((tmp_path / f"{index}-{attempt}").read_text()) == [
                    [p, o, v.decode()] for p, o, v in records]


def test_other_partitions_make_a_new_parent(kafka, kafka_topic, spark, params):
    topic = kafka_topic(partitions=3)
    fill(kafka, topic, 3, 5)
    settings = ReadSettings(params=params)
    kept = KeptParent()
    two = [OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 0, 3)]
    grown = [*two, OffsetRange(topic, 2, 0, 4)]  # a partition added
    reordered = [two[1], two[0]]
    rdds = [batch(kept, spark, ranges, settings) for ranges in (two, two, grown, reordered)]
    parents = [rdd._prev_jrdd for rdd in rdds]
    assert parents[0] is parents[1]
    assert parents[2] is not parents[1] and parents[3] is not parents[2]
    for ranges, rdd in zip((two, two, grown, reordered), rdds, strict=True):
        assert rdd.mapPartitions(lambda records: [[(r.partition, r.offset)
                                                   for r in records]]).collect() == [
            [(r.partition, o) for o in range(r.fromOffset, r.untilOffset)] for r in ranges]
    assert kept.holds([r.topicPartition() for r in reordered], [[], []])
    assert not kept.holds([TopicPartition(topic, 1), TopicPartition(topic, 9)], [[], []])
    assert not kept.holds([r.topicPartition() for r in reordered], [["host"], []])
    kept.forget()
    assert not kept.holds([r.topicPartition() for r in reordered], [[], []])


def grouped_batch(kept, spark, ranges, sizes, settings):
    partitions = [r.topicPartition() for r in ranges]
    locations = KeptParent.locations(spark, partitions, LocationStrategies.PreferConsistent(),
                                     None)
    offsets = pack_offsets([r.fromOffset for r in ranges], [r.untilOffset for r in ranges])
    return kept.kafka_rdd(spark, partitions, offsets, sizes, settings, locations,
                          lambda: ranges)


def test_the_ranges_of_a_group_are_read_back_at_its_index_in_a_task():
    ranges = [OffsetRange("t", 3, 0, 4), OffsetRange("u", 0, 7, 7),
              OffsetRange("t", 1, 2**63 - 2, 2**63 - 1)]
    topics, places = pack_places([r.topicPartition() for r in ranges])
    assert topics == ("t", "u")
    at = GroupsAt(topics, places, pack_offsets([r.fromOffset for r in ranges],
                                               [r.untilOffset for r in ranges]), [2, 1])
    at = pickle.loads(pickle.dumps(at))  # as a task gets it
    assert list(at(0, iter([0]))) == [[("t", 3, 0, 4), ("u", 0, 7, 7)]]
    assert list(at(1, iter([1]))) == [[("t", 1, 2**63 - 2, 2**63 - 1)]]
    with pytest.raises(KafkaDirectError, match="partition 2 .* 2 groups"):
        at(2, iter([2]))
    with pytest.raises(KafkaDirectError, match="partition 0 .* holds \\[1\\]"):
        at(0, iter([1]))  # another group's partition: never read as this one
    with pytest.raises(KafkaDirectError, match="no empty group"):
        GroupsAt(topics, places, b"\0" * 48, [3, 0])
    with pytest.raises(KafkaDirectError, match="2 groups of 3 ranges"):
        GroupsAt(topics, places, b"\0" * 32, [2, 1])
    assert pack_places([TopicPartition("t", 2**31)]) is None  # beyond int32


def test_grouped_batches_over_kept_parents_read_exactly_their_groups(kafka, kafka_topic, spark,
                                                                    params, tmp_path):
    topic = kafka_topic(partitions=4)
    fill(kafka, topic, 4, 30)
    settings = ReadSettings(params=params)
    kept = KeptGroups()
    batches = [
        ([OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 1, 0, 0),
          OffsetRange(topic, 2, 0, 7), OffsetRange(topic, 3, 0, 3)], [3, 1]),
        ([OffsetRange(topic, 0, 5, 9), OffsetRange(topic, 1, 0, 4),
          OffsetRange(topic, 2, 7, 8), OffsetRange(topic, 3, 3, 30)], [1, 3]),
        ([OffsetRange(topic, 0, 9, 10), OffsetRange(topic, 1, 4, 6),
          OffsetRange(topic, 2, 8, 12), OffsetRange(topic, 3, 30, 30)], [2, 1, 1]),
        ([OffsetRange(topic, 0, 10, 30), OffsetRange(topic, 1, 6, 30),
          OffsetRange(topic, 2, 12, 30), OffsetRange(topic, 3, 30, 30)], [2, 2]),
    ]
    rdds = [grouped_batch(kept, spark, ranges, sizes, settings) for ranges, sizes in batches]
    parents = [rdd._prev_jrdd for rdd in rdds]
    # One parent of two groups for the first, second and fourth batches; one of three.
    assert parents[0] is parents[1] is parents[3] and parents[2] is not parents[0]

    def failing_first_attempts(seen_dir):
        def fail_first_attempt(index, records):
            import os

            from pyspark import TaskContext

            attempt = TaskContext.get().attemptNumber()
            offsets = [[r.partition, r.offset, r.value.decode()] for r in records]
            with open(os.path.join(seen_dir, f"{index}-{attempt}"), "w") as f:
                f.write(json.dumps(offsets))
            if attempt == 0:
                raise RuntimeError("first attempt fails on purpose")
            return [(index, offsets)]
        return fail_first_attempt

    for (ranges, sizes), rdd in zip(batches, rdds, strict=True):
        groups = cut(ranges, sizes)
        assert isinstance(rdd, KafkaRDD) and rdd.isGrouped()
        assert list(rdd.offsetRanges()) == ranges and rdd.rangeGroups() == groups
        assert rdd.getNumPartitions() == len(sizes)
        expected = {index: [[r.partition, o, f"{r.partition}:{o}"] for r in group
                            for o in range(r.fromOffset, r.untilOffset)]
                    for index, group in enumerate(groups)}
        got = dict(rdd.mapPartitionsWithIndex(
            lambda i, records: [(i, [[r.partition, r.offset, r.value.decode()]
                                     for r in records])]).collect())
        assert got == expected
        assert rdd.count() == sum(r.count() for r in ranges)
        assert sorted((row.partition, row.offset) for row in rdd.toDF().collect()) == sorted(
            (r.partition, o) for r in ranges for o in range(r.fromOffset, r.untilOffset))
        # A retried task reads exactly the records of its group again.
        seen = tmp_path / str(rdd.id())
        seen.mkdir()
        assert dict(rdd.mapPartitionsWithIndex(
            failing_first_attempts(str(seen))).collect()) == expected
        for index, records in expected.items():
            for attempt in (0, 1):
                assert json.loads((seen / f"{index}-{attempt}").read_text()) == records


def test_grouped_parents_are_kept_per_number_of_groups_and_locations():
    made = []

    class Parent:
        def mapPartitionsWithIndex(self, at, preserves):
            return self

    kept = KeptGroups()
    from kafka_direct.rdd import kept_parent

    def located(sc, elements, locations):
        made.append((elements, locations))
        return Parent()

    original = kept_parent.located_rdd
    kept_parent.located_rdd = located
    try:
        for sizes, locations in (([2, 1], [["a"], ["b"], ["c"]]), ([1, 2], [["a"], ["b"], ["c"]]),
                                 ([1, 1, 1], [[], [], []]), ([2, 1], [[], [], []]),
                                 ([1, 2], [["a"], ["b"], ["c"]])):
            kept.parent(None, sizes, locations)
        # A parent's partition i holds i, at the hosts of group i's first range.
        assert made == [([0, 1], [["a"], ["c"]]), ([0, 1], [["a"], ["b"]]),
                        ([0, 1, 2], [[], [], []]), ([0, 1], [[], []])]
        assert kept.holds([1, 2], [["a"], ["b"], ["c"]]) and kept.holds([2, 1], [[]] * 3)
        assert not kept.holds([1, 1, 1], [["a"], [], []])
        for count in range(5, 9):  # four more numbers of groups: only the latest few kept
            kept.parent(None, [1] * count, [[]] * count)
        assert not kept.holds([1, 2], [["a"], ["b"], ["c"]])
        assert kept.holds([1] * 5, [[]] * 5) and kept.holds([1] * 8, [[]] * 8)
    finally:
        kept_parent.located_rdd = original
    kept.forget()
    assert not kept.holds([1] * 8, [[]] * 8)
