"""Grouping a KafkaRDD's ranges into Spark tasks: the rule and its settings (no services)."""

import pytest

from kafka_direct import OffsetRange
from kafka_direct.dstream.stream_settings import (
    MAX_RANGES_PER_TASK_CONF,
    MIN_OFFSETS_PER_TASK_CONF,
    StreamSettings,
)
from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd.range_groups import group_ranges, pack_ranges


def ranges(sizes, topic="t"):
    return [OffsetRange(topic, p, 10, 10 + n) for p, n in enumerate(sizes)]


def test_without_grouping_each_range_is_a_task_of_its_own():
    found = ranges([1, 2, 0, 5])
    assert group_ranges(found, 0) == group_ranges(found, 1) == [(r,) for r in found]


def test_small_ranges_share_tasks_in_order_and_large_ones_keep_their_own():
    found = ranges([5, 5, 5, 5, 500, 5, 5])
    groups = group_ranges(found, 100, minTasks=2)
    assert [r for group in groups for r in group] == found  # every range once, in order
    assert (found[4],) in groups  # at or above the target: a task of its own
    assert len(groups) < len(found)
    assert groups == pack_ranges(found, 100, 2)  # the structured source's one rule


def test_grouping_keeps_the_fewest_tasks_and_bounds_the_ranges_per_task():
    found = ranges([1] * 100)
    assert len(group_ranges(found, 10_000, minTasks=8)) >= 8
    assert max(len(g) for g in group_ranges(found, 10_000, 1, maxRangesPerTask=7)) == 7


def test_grouping_refuses_two_ranges_of_one_partition():
    found = [OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 5), OffsetRange("t", 0, 5, 9)]
    with pytest.raises(ConfigurationError) as info:
        group_ranges(found, 100, setting=MIN_OFFSETS_PER_TASK_CONF)
    assert "t-0" in str(info.value) and MIN_OFFSETS_PER_TASK_CONF in str(info.value)
    assert group_ranges(found, 0) == [(r,) for r in found]  # ungrouped: as ever


def test_the_stream_settings_are_read_and_checked_with_their_keys():
    conf = {MIN_OFFSETS_PER_TASK_CONF: "5000", MAX_RANGES_PER_TASK_CONF: "50"}
    read = StreamSettings.fromConf(lambda key, default: conf.get(key, default))
    assert (read.minOffsetsPerTask, read.maxRangesPerTask) == (5000, 50)
    default = StreamSettings.fromConf(lambda key, default: default)
    assert (default.minOffsetsPerTask, default.maxRangesPerTask) == (0, 1000)
    for key, bad in [(MIN_OFFSETS_PER_TASK_CONF, "-1"), (MIN_OFFSETS_PER_TASK_CONF, "lots"),
                     (MAX_RANGES_PER_TASK_CONF, "0")]:
        with pytest.raises(ConfigurationError) as info:
            StreamSettings.fromConf(lambda k, d, key=key, bad=bad: bad if k == key else d)
        assert key in str(info.value)
