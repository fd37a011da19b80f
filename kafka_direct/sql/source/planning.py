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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafka_direct.offset_range import OffsetRange
from kafka_direct.sql.source.admission import start_of
from kafka_direct.topic_partition import TopicPartition, partition_order

__all__ = ["KafkaInputPartition", "plan_ranges", "split_ranges"]


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task of the source: the records of one offset range.

    Attributes:
        offsetRange: ``[fromOffset, untilOffset)`` of one topic-partition.
        planId: The batch's plan in a linked offset store, which the task binds to its
            query and batch; None without a store.
    """

    offsetRange: OffsetRange
    planId: int | None = None

    def __repr__(self) -> str:
        r = self.offsetRange
        return f"KafkaInputPartition({r.topic}-{r.partition} [{r.fromOffset}, {r.untilOffset}))"


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
    found = [r for r in ranges if r.count() > 0]
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


def _first_partition_order(item: tuple[TopicPartition, int]) -> tuple[str, int]:
    return partition_order(item[0])


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                minPartitions: int | None = None, maxRecordsPerPartition: int | None = None
                ) -> list[OffsetRange]:
    """The offset ranges of the batch ``(start, end]``, split for its tasks.

    A partition of ``end`` missing from ``start`` is new and starts at offset 0; one whose
    end is not after its start (nothing new, or the log went back) has no range; one of
    ``start`` missing from ``end`` has none either.
    """
    ranges = [OffsetRange(tp.topic, tp.partition, start_of(start, tp), until)
              for tp, until in sorted(end.items(), key=_first_partition_order)
              if until > start_of(start, tp)]
    return split_ranges(ranges, minPartitions, maxRecordsPerPartition)
