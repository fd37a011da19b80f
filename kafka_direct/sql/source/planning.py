"""A batch's offset ranges and the input partitions (Spark tasks) that read them.

:func:`plan_ranges` turns a batch's start and end offsets into one
:class:`~kafka_direct.offset_range.OffsetRange` per topic-partition with something to read,
then splits them as Spark's ``KafkaOffsetRangeCalculator`` does:

* ``maxRecordsPerPartition``: a range longer than that is cut into equal parts.
* ``minPartitions``: while there are fewer ranges than that, large ranges are cut in
  proportion to their share of all offsets (a range whose share rounds to one part stays
  whole, and its size is left out of the others' shares).

Every offset of the batch is in exactly one range; ranges of one partition follow each other
in offset order. A pure function of the offsets, so a batch replayed after a failure is
planned the same way.

:func:`pack_ranges` then groups consecutive small ranges into one task (``minOffsetsPerTask``,
ours): a task of a Python data source costs Spark about 10 ms before it reads anything (the
task, its Python worker's start of the read, the Arrow stream), as long as reading 10,000
records, so a batch spread thin over many partitions would spend most of its time on
tasks. Packing keeps the order of the ranges (a query's rows come in the same order), never
puts more than ``maxRecordsPerPartition`` offsets nor more than ``maxRangesPerTask`` ranges
(ours) in a task, and never leaves fewer tasks than ``minPartitions`` or, without it, the
cluster's parallelism (:func:`default_parallelism`): the cores stay busy.

A task of several small ranges of distinct partitions reads them with one consumer in one
fetch session (:func:`kafka_direct.rdd.arrow_reader.in_session`): one assignment and one
stream of fetches for all its partitions, instead of an assignment, a first fetch and a
pause per range. Which ranges a task holds is a pure function of the planned ranges and
the options, and a retried task reads exactly its ranges' records again, in the same order.
The rule lives in :mod:`kafka_direct.rdd.range_groups`, shared with a grouped KafkaRDD.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, islice, repeat
from typing import Any

from pyspark.sql.datasource import InputPartition

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.range_groups import pack_ranges
from kafka_direct.sql.source.admission import NEW_PARTITION_START
from kafka_direct.sql.source.options import SourceOptions
from kafka_direct.topic_partition import TopicPartition, partition_order, same_partitions

__all__ = ["KafkaInputPartition", "default_parallelism", "pack_ranges", "plan_ranges",
           "plan_tasks", "restore_input_partition", "split_ranges"]

#: Numbers a range takes in a pickled input partition: topic index, partition, from, length.
_FIELDS = 4


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task of the source: the records of one or more offset ranges, in order.

    Attributes:
        offsetRanges: ``[fromOffset, untilOffset)`` ranges, read one after the other (see
            :func:`pack_ranges`); at least one.
        planId: The batch's plan in a linked offset store, which the task binds to its
            query and batch; None without a store.
    """

    offsetRanges: tuple[OffsetRange, ...]
    planId: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.offsetRanges, tuple) or not self.offsetRanges or not all(
                map(isinstance, self.offsetRanges, repeat(OffsetRange))):
            raise TypeError("KafkaInputPartition needs a tuple of one or more OffsetRanges")

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark's runner pickles each input partition of a trigger into its task. Ranges
        # as one flat tuple of numbers (each topic named once, a range's length rather
        # than its end: small numbers pickle short) are written by the C pickler alone;
        # an OffsetRange each went through cloudpickle's Python hook per range (about 4 ms
        # and 36 KB a trigger at 1,000 ranges).
        topics: dict[str, int] = {}
        flat: list[int] = []
        index = topics.setdefault
        for r in self.offsetRanges:
            flat += (index(r.topic, len(topics)), r.partition, r.fromOffset,
                     r.untilOffset - r.fromOffset)
        return (restore_input_partition, (tuple(topics), tuple(flat), self.planId))

    def __repr__(self) -> str:
        text = ", ".join(f"{r.topic}-{r.partition} [{r.fromOffset}, {r.untilOffset})"
                         for r in self.offsetRanges[:3])
        more = len(self.offsetRanges) - 3
        return f"KafkaInputPartition({text}{f' and {more} more' if more > 0 else ''})"


def restore_input_partition(topics: tuple[str, ...], flat: tuple[int, ...],
                            planId: int | None) -> KafkaInputPartition:
    """An input partition from what :meth:`KafkaInputPartition.__reduce__` pickled.

    Every range is checked again as it is built (:class:`OffsetRange`).

    Raises:
        ConfigurationError: The data is not that of an input partition (damaged).
    """
    if not isinstance(topics, tuple) or not isinstance(flat, tuple) or not flat \
            or len(flat) % _FIELDS:
        raise ConfigurationError("a pickled kafka-direct input partition is damaged: its "
                                 "ranges are not four numbers each; plan the batch again")
    count = len(topics)
    indexes = flat[0::_FIELDS]
    if not all(type(k) is int and 0 <= k < count for k in indexes):
        raise ConfigurationError("a pickled kafka-direct input partition is damaged: a range "
                                 "names no topic of it; plan the batch again")
    froms = flat[2::_FIELDS]
    try:
        ranges = tuple(map(OffsetRange, [topics[k] for k in indexes], flat[1::_FIELDS], froms,
                           map(operator.add, froms, flat[3::_FIELDS])))
    except TypeError as error:
        raise ConfigurationError(f"a pickled kafka-direct input partition is damaged "
                                 f"({error}); plan the batch again") from None
    except ConfigurationError as error:
        raise ConfigurationError(f"a pickled kafka-direct input partition is damaged: "
                                 f"{error}") from None
    return KafkaInputPartition(ranges, planId)


def default_parallelism(captured: int | None = None) -> int:
    """The tasks a batch should keep at least, when ``minPartitions`` does not say.

    Args:
        captured: Spark's default parallelism (the executors' cores) where the source was
            registered (:func:`kafka_direct.sql.register`); None: unknown (a Spark Connect
            client without ``spark.default.parallelism``), and the cores of the machine
            planning the batch, the driver's, count instead.
    """
    if captured is not None and captured > 0:
        return captured
    return os.cpu_count() or 1


def _divide(offsetRange: OffsetRange, parts: int) -> list[OffsetRange]:
    """``offsetRange`` in ``parts`` consecutive pieces of (nearly) equal size, none empty."""
    pieces = []
    remaining = offsetRange.count()
    begin = offsetRange.fromOffset
    for part in range(parts):
        size = remaining // (parts - part)  # the last pieces take the rounding
        remaining -= size
        if size > 0:
            pieces.append(OffsetRange(offsetRange.topic, offsetRange.partition, begin,
                                      begin + size))
            begin += size
    return pieces


def _share(size: int, total: int, parts: int) -> int:
    """``max(round(size / total * parts), 1)`` in exact integers (halves round up)."""
    return max((2 * size * parts + total) // (2 * total), 1)


def split_ranges(ranges: Sequence[OffsetRange], minPartitions: int | None = None,
                 maxRecordsPerPartition: int | None = None) -> list[OffsetRange]:
    """Empty ranges dropped, then ranges split as Spark's ``KafkaOffsetRangeCalculator``.

    Args:
        ranges: At most one range per topic-partition.
        minPartitions: The fewest ranges wanted, or None.
        maxRecordsPerPartition: The most offsets per range, or None.
    """
    # Offsets counted as untilOffset - fromOffset here and below, not by count(): a call
    # less per range, at a thousand ranges a trigger.
    found = [r for r in ranges if r.untilOffset > r.fromOffset]
    if maxRecordsPerPartition is not None:
        found = [piece for r in found
                 for piece in _divide(r, -(-r.count() // maxRecordsPerPartition))]
    if minPartitions is None or len(found) >= minPartitions:
        return found
    total = sum(r.count() for r in found)
    whole = [r for r in found if _share(r.count(), total, minPartitions) == 1]
    split_total = total - sum(r.count() for r in whole)
    split_parts = max(minPartitions - len(whole), 1)
    result: list[OffsetRange] = []
    whole_set = set(whole)
    for r in found:
        parts = 1 if r in whole_set else _share(r.count(), split_total, split_parts)
        result.extend(_divide(r, parts))
    return result


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                minPartitions: int | None = None, maxRecordsPerPartition: int | None = None
                ) -> list[OffsetRange]:
    """The offset ranges of the batch ``(start, end]``, split for its tasks.

    A partition of ``end`` missing from ``start`` is new and starts at offset 0; one whose
    end is not after its start (nothing new, or the log went back) has no range; one of
    ``start`` missing from ``end`` has none either.
    """
    ordered = _in_order(start, end)
    if ordered is not None:
        topics, numbers, froms, untils = ordered
        ranges = OffsetRange.many(topics, numbers, froms, untils)
        return split_ranges(ranges, minPartitions, maxRecordsPerPartition)
    begin = start.get
    topics = []
    numbers = []
    froms = []
    untils = []
    # Sorted by (topic, partition) tuples, compared in C; partitions are unique, so the
    # ends and TopicPartitions after them are never compared.
    keyed = zip(map(partition_order, end), end.values(), end, strict=True)
    for (topic, partition), until, tp in sorted(keyed):
        first = begin(tp, NEW_PARTITION_START)
        if until > first:
            topics.append(topic)
            numbers.append(partition)
            froms.append(first)
            untils.append(until)
    # Checked all at once, as the constructor checks each (a Python call a range was a
    # millisecond of a trigger at a thousand partitions).
    ranges = OffsetRange.many(topics, numbers, froms, untils)
    return split_ranges(ranges, minPartitions, maxRecordsPerPartition)


def _in_order(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
              ) -> tuple[list[str], list[int], list[int], list[int]] | None:
    """The fields of the ranges of :func:`plan_ranges` read in C, or None.

    Only when ``start`` and ``end`` hold the same partitions in the same order, and that
    order is (topic, partition) order (the usual trigger: the end of one is the start of
    the next, both in the listing's order); otherwise None, and the general path decides.
    """
    if not same_partitions(start, end):
        return None
    orders = list(map(partition_order, end))
    if not all(map(operator.lt, orders, islice(orders, 1, None))):
        return None
    froms, untils = list(start.values()), list(end.values())
    moved = list(map(operator.lt, froms, untils))
    return (list(compress(map(operator.itemgetter(0), orders), moved)),
            list(compress(map(operator.itemgetter(1), orders), moved)),
            list(compress(froms, moved)), list(compress(untils, moved)))


def plan_tasks(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               options: SourceOptions, parallelism: int | None = None
               ) -> tuple[list[OffsetRange], list[tuple[OffsetRange, ...]]]:
    """The batch ``(start, end]``'s ranges and its tasks, as the source's options ask.

    The ranges of :func:`plan_ranges`, packed by :func:`pack_ranges` with ``minPartitions``
    or else the cluster's parallelism as the fewest tasks.

    Args:
        start: The batch's start offsets.
        end: Its end offsets.
        options: The source's options (``minPartitions``, ``maxRecordsPerPartition``,
            ``minOffsetsPerTask``).
        parallelism: Spark's default parallelism where the source was registered, or None
            (:func:`default_parallelism`).
    """
    ranges = plan_ranges(start, end, options.minPartitions, options.maxRecordsPerPartition)
    tasks = pack_ranges(ranges, options.minOffsetsPerTask,
                        options.minPartitions or default_parallelism(parallelism),
                        options.maxRecordsPerPartition, options.maxRangesPerTask)
    return ranges, tasks
