"""A grouped KafkaRDD on the real broker: the same records as one partition per range."""

import pytest

from kafka_direct import ConfigurationError, KafkaUtils, OffsetRange

PARTITIONS = 12


@pytest.fixture
def topic(kafka, kafka_topic):
    name = kafka_topic(partitions=PARTITIONS)
    for p in range(PARTITIONS):
        kafka.produce(name, [f"{p}-{i}".encode() for i in range(p % 5 + 1)], partition=p)
    return name


def all_ranges(topic):
    return [OffsetRange(topic, p, 0, p % 5 + 1) for p in range(PARTITIONS)]


def records(rdd):
    return [(r.topic, r.partition, r.offset, r.value) for r in rdd.collect()]


def test_a_grouped_rdd_reads_the_same_records_in_fewer_tasks(spark, kafka, topic):
    ranges = all_ranges(topic)
    plain = KafkaUtils.createRDD(spark, kafka.params(), ranges)
    grouped = KafkaUtils.createRDD(spark, kafka.params(), ranges, minOffsetsPerTask=1000)
    assert not plain.isGrouped() and grouped.isGrouped()
    assert plain.rangeGroups() == [(r,) for r in ranges]
    groups = grouped.rangeGroups()
    assert grouped.getNumPartitions() == len(groups) < len(ranges)
    assert len(groups) >= spark.defaultParallelism  # the cores stay busy
    assert grouped.offsetRanges() == ranges == [r for g in groups for r in g]
    assert records(grouped) == records(plain)  # the same records, in the same order
    assert grouped.count() == plain.count() == sum(r.count() for r in ranges)
    assert sorted(grouped.toDF().select("partition", "offset").collect()) == sorted(
        plain.toDF().select("partition", "offset").collect())


def test_each_task_knows_its_own_ranges(spark, kafka, topic):
    rdd = KafkaUtils.createRDD(spark, kafka.params(), all_ranges(topic), minOffsetsPerTask=1000)

    def check(ranges, items):
        mine = {(r.topic, r.partition): r for r in ranges}
        seen = 0
        for record in items:
            r = mine[(record.topic, record.partition)]  # never a record of another task
            assert r.fromOffset <= record.offset < r.untilOffset
            seen += 1
        yield (len(ranges), seen, sum(r.count() for r in ranges))

    found = rdd.mapPartitionsWithRanges(check).collect()
    assert [n for n, _, _ in found] == [len(g) for g in rdd.rangeGroups()]
    assert all(seen == offsets for _, seen, offsets in found)

    # The idiom with a partition index: the groups, never offsetRanges(), by index.
    groups = rdd.rangeGroups()

    def by_index(index, items):
        from pyspark import TaskContext

        assert TaskContext.get().partitionId() == index
        yield sorted({(r.partition) for r in items}) == sorted(r.partition
                                                              for r in groups[index])

    assert all(rdd.mapPartitionsWithIndex(by_index).collect())


def test_a_retried_grouped_task_reads_exactly_the_same_records(spark, kafka, topic):
    rdd = KafkaUtils.createRDD(spark, kafka.params(), all_ranges(topic), minOffsetsPerTask=1000)

    def flaky(index, items):
        from pyspark import TaskContext

        taken = [(r.partition, r.offset) for r in items]
        if TaskContext.get().attemptNumber() == 0 and index == 0:
            raise RuntimeError("the first attempt dies after reading its records")
        yield (index, taken)

    first = dict(rdd.mapPartitionsWithIndex(lambda i, items: [
        (i, [(r.partition, r.offset) for r in items])]).collect())
    retried = dict(rdd.mapPartitionsWithIndex(flaky).collect())  # local[2,2]: two attempts
    assert retried == first


def test_grouping_with_two_ranges_of_a_partition_is_refused_before_reading(spark, kafka,
                                                                          topic):
    ranges = [OffsetRange(topic, 0, 0, 1), OffsetRange(topic, 1, 0, 1),
              OffsetRange(topic, 0, 1, 1)]
    with pytest.raises(ConfigurationError, match="minOffsetsPerTask"):
        KafkaUtils.createRDD(spark, kafka.params(), ranges, minOffsetsPerTask=1000)
    with pytest.raises(ConfigurationError, match="maxRangesPerTask"):
        KafkaUtils.createRDD(spark, kafka.params(), ranges[:2], minOffsetsPerTask=1000,
                             maxRangesPerTask=0)


def _named_by_index(ranges):
    def task(records):
        from pyspark import TaskContext

        mine = ranges[TaskContext.get().partitionId()]  # Spark's idiom
        yield (mine.topic, mine.partition)
    return task


def test_sparks_index_idiom_on_a_grouped_rdd_fails_typed_not_silently(spark, kafka, topic):
    # offsetRanges()[partitionId()] names what a task read only with one range a task;
    # grouped, it would name another range, and a writer storing it would store wrong
    # offsets: a typed error instead, in the driver and in the tasks.
    rdd = KafkaUtils.createRDD(spark, kafka.params(), all_ranges(topic), minOffsetsPerTask=1000)
    ranges = rdd.offsetRanges()
    with pytest.raises(ConfigurationError, match=r"rangeGroups\(\)"):
        ranges[0]
    with pytest.raises(Exception, match=r"rangeGroups\(\)"):
        rdd.mapPartitions(_named_by_index(ranges)).collect()
    # What needs no index still works: iteration, length, slices, equality, a copy.
    assert list(ranges) == all_ranges(topic) and len(ranges) == PARTITIONS
    assert ranges[:2] == all_ranges(topic)[:2] and list(ranges) == list(ranges.copy())
    # Ungrouped, Spark's idiom is right, as in Spark.
    plain = KafkaUtils.createRDD(spark, kafka.params(), all_ranges(topic))
    found = plain.mapPartitions(_named_by_index(plain.offsetRanges())).collect()
    assert found == [(r.topic, r.partition) for r in all_ranges(topic)]
