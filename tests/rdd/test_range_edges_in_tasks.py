"""A KafkaRDD's ranges at their edge values, in offsetRanges() and in its tasks.

The ranges reach the JVM as hand-written pickle frames (a head kept per partition, the
offsets as 4 or 8 bytes): what a task unpickles must be the ranges exactly.
"""

from kafka_direct import LocationStrategies, OffsetRange
from kafka_direct.conf_values import MAX_OFFSET
from kafka_direct.rdd.kafka_rdd import ReadSettings, kafka_rdd

EDGES = [
    OffsetRange("t", 2**31 - 1, MAX_OFFSET, MAX_OFFSET),
    OffsetRange("t", 2**31, 0, MAX_OFFSET),
    OffsetRange("t", 2**40, 2**31 - 1, 2**31),
    OffsetRange("ünïcødé-トピック-\U0001f600", 255, 256, 65536),
    OffsetRange("x" * 249, 65535, 65536, 2**32),
    OffsetRange("y" * 300, 65536, 0, 0),
    OffsetRange("\ud800lone", 7, 1, 2),
]


def test_edge_ranges_reach_the_tasks_exactly(spark):
    settings = ReadSettings(params={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})
    for ranges in (EDGES, EDGES[::-1], [r for r in EDGES if r.untilOffset < 2**31]):
        for _ in range(2):  # the second time from the kept heads
            rdd = kafka_rdd(spark, ranges, settings, LocationStrategies.PreferConsistent())
            assert rdd.offsetRanges() == ranges
            seen = rdd._ranges_rdd.coalesce(1).collect()
            assert [OffsetRange(*element) for element in seen] == ranges
            assert [tuple(map(type, element)) for element in seen] == \
                [(str, int, int, int)] * len(ranges)
