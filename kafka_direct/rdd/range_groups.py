"""Which offset ranges one Spark task reads: consecutive small ranges grouped by size.

A Spark task costs several milliseconds of CPU before it reads a record (its scheduling,
the hand-over to a Python worker, the worker's start of the read), as much as reading
thousands of records. A batch spread thin over a thousand partitions would spend most of
its time on tasks, so consecutive small ranges may share a task: its one consumer reads them
together in one fetch session
(:class:`~kafka_direct.client.fetch_session.FetchSession`).

:func:`pack_ranges` is the one grouping rule: the Structured Streaming source packs its
input partitions with it (``minOffsetsPerTask``), and a grouped KafkaRDD its Spark
partitions (``spark.streaming.kafka.minOffsetsPerTask``, ``createRDD(minOffsetsPerTask=)``,
:func:`group_ranges`). A pure function of the ranges and the settings: a batch replayed after
a failure is grouped the same way, and a retried task reads exactly its group's records, in
the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange

__all__ = ["cut", "group_ranges", "pack_counts", "pack_ranges"]

_Item = TypeVar("_Item")


def pack_ranges(ranges: Sequence[OffsetRange], minOffsetsPerTask: int, minTasks: int = 1,
                maxRecordsPerPartition: int | None = None, maxRangesPerTask: int | None = None
                ) -> list[tuple[OffsetRange, ...]]:
    """The tasks of a batch: consecutive small ranges grouped into larger tasks.

    Each task is filled to a target of ``minOffsetsPerTask`` offsets, lowered so that the
    batch keeps at least ``minTasks`` tasks (as many as it has ranges, at most): the
    cluster's cores stay busy, and only batches spread thin over more partitions than that
    are packed. Ranges are added to the open task until it holds the target; a range of
    the target or more closes the open task first, so it keeps a task of its own. When the
    tasks still fall short of ``minTasks`` (ranges of uneven sizes), the target is lowered
    by a tenth until they do not. A task holds at most ``maxRangesPerTask`` ranges. The order
    of ``ranges`` is kept inside and across tasks. A pure function of its arguments: a
    batch replayed after a failure, and a retried task, get the same tasks.

    Args:
        ranges: The batch's ranges, as :func:`plan_ranges` gives them.
        minOffsetsPerTask: The most a task is filled to; 0 or 1: one range per task.
        minTasks: The fewest tasks (``minPartitions``, else the cluster's parallelism).
        maxRecordsPerPartition: Most offsets a task holds (a task is closed before a range
            would take it past this).
        maxRangesPerTask: Most ranges a task holds; None: no bound.

    Raises:
        ConfigurationError: ``maxRangesPerTask`` is below 1.
    """
    sizes = pack_counts([r.untilOffset - r.fromOffset for r in ranges], minOffsetsPerTask,
                        minTasks, maxRecordsPerPartition, maxRangesPerTask)
    return cut(ranges, sizes)


def pack_counts(counts: Sequence[int], minOffsetsPerTask: int, minTasks: int = 1,
                maxRecordsPerPartition: int | None = None, maxRangesPerTask: int | None = None
                ) -> list[int]:
    """:func:`pack_ranges` on the ranges' offset counts alone: how many ranges each task holds.

    The direct stream groups a batch's ranges from their offsets before the ranges are
    made (the JVM reads the groups while they are). The same rule and arguments as
    :func:`pack_ranges`, ``counts[i]`` being range ``i``'s ``untilOffset - fromOffset``.

    Raises:
        ConfigurationError: ``maxRangesPerTask`` is below 1.
    """
    if maxRangesPerTask is not None and maxRangesPerTask < 1:
        raise ConfigurationError(f"option 'maxRangesPerTask' must be at least 1, not "
                                 f"{maxRangesPerTask}", setting="maxRangesPerTask")
    floor = min(max(minTasks, 1), len(counts))
    target = minOffsetsPerTask
    if floor:
        target = min(target, max(sum(counts) // floor, 1))
    while target > 1:
        sizes = _fill(counts, target, maxRecordsPerPartition, maxRangesPerTask)
        if len(sizes) >= floor:
            return sizes
        # A tenth lower each time: halving could leave twice the tasks needed.
        target = min(target * 9 // 10, target - 1)
    return [1] * len(counts)


def cut(items: Sequence[_Item], sizes: Sequence[int]) -> list[tuple[_Item, ...]]:
    """``items`` cut in order into groups of ``sizes[0]``, ``sizes[1]``, ... items."""
    groups, at = [], 0
    for size in sizes:
        groups.append(tuple(items[at:at + size]))
        at += size
    return groups


def _fill(counts: Sequence[int], target: int, limit: int | None,
          most: int | None = None) -> list[int]:
    """Each task's number of ranges, in order (see :func:`pack_ranges`).

    A task is closed once it holds ``target`` offsets.
    """
    sizes: list[int] = []
    ranges = held = 0
    for count in counts:
        if ranges and (count >= target or (limit is not None and held + count > limit)
                       or (most is not None and ranges >= most)):
            sizes.append(ranges)
            ranges = held = 0
        ranges += 1
        held += count
        if held >= target:
            sizes.append(ranges)
            ranges = held = 0
    if ranges:
        sizes.append(ranges)
    return sizes


def group_ranges(ranges: Sequence[OffsetRange], minOffsetsPerTask: int, minTasks: int = 1,
                 maxRangesPerTask: int | None = None, setting: str = "minOffsetsPerTask"
                 ) -> list[tuple[OffsetRange, ...]]:
    """A KafkaRDD's Spark partitions: its ranges packed by :func:`pack_ranges`.

    Grouping needs at most one range per topic-partition: the ranges of one group are
    written in one transaction by the sinks, and two ranges of a partition in two groups
    would have to wait for each other (the first committed before the second may start).

    Args:
        ranges: The RDD's ranges, in order; their order is kept inside and across groups.
        minOffsetsPerTask: The most a group is filled to; 0 or 1: one range per group (no
            grouping, Spark's one partition per range).
        minTasks: The fewest groups (the cluster's parallelism): the cores stay busy.
        maxRangesPerTask: Most ranges a group holds; None: no bound.
        setting: The setting that asked for grouping, named by the errors.

    Raises:
        ConfigurationError: Grouping is asked for while a topic-partition has several
            ranges, or ``maxRangesPerTask`` is below 1.
    """
    if minOffsetsPerTask <= 1:
        return [(r,) for r in ranges]
    seen: set[tuple[str, int]] = set()
    for r in ranges:
        key = (r.topic, r.partition)
        if key in seen:
            raise ConfigurationError(
                f"{setting}={minOffsetsPerTask} groups ranges into tasks, but "
                f"{r.topic}-{r.partition} has several ranges: a grouped KafkaRDD holds at "
                f"most one range per topic-partition. Merge that partition's ranges into "
                f"one, or set {setting} to 0 (one Spark partition per range)",
                setting=setting, topic=r.topic, partition=r.partition)
        seen.add(key)
    return pack_ranges(ranges, minOffsetsPerTask, minTasks, None, maxRangesPerTask)
