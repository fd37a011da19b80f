"""OffsetRange: the records of one Kafka partition that one batch reads, and how far a batch goes.

* :class:`OffsetRange`, :class:`HasOffsetRanges`, :class:`CanCommitOffsets`: a batch's
  ranges, as Spark's Scala API names them;
* :data:`Offsets`: the next offset to read per partition, where ranges start and end;
* :func:`prorate_by_lag`: the ends of a batch capped at a total, shared over the partitions
  by their lag: the one split the direct stream (``maxRecordsPerBatch``) and the source
  (``maxOffsetsPerTrigger``) both use.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from kafka_direct.conf_values import MAX_OFFSET, check_offset
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["CanCommitOffsets", "HasOffsetRanges", "OffsetRange", "Offsets", "prorate_by_lag"]

#: The next offset to read per partition: where a batch's ranges start, or end.
Offsets = Mapping[TopicPartition, int]


def _check_offset(name: str, value: Any, topic: str, partition: int) -> None:
    check_offset(f"OffsetRange {name} for {topic}-{partition}", value, topic=topic,
                 partition=partition)


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The half-open offset interval ``[fromOffset, untilOffset)`` of one topic-partition.

    Offsets are Kafka offsets: ``fromOffset`` is the first offset to read and ``untilOffset``
    the first offset *not* read, which is also the next offset to read once the range is done
    (what an offset store keeps). ``OffsetRange("t", 0, 5, 5)`` is empty.

    :meth:`count` is ``untilOffset - fromOffset``, the number of *offsets*. A range may hold
    fewer records than that: transaction markers, aborted transactions and compaction leave
    offsets without a record, so count the records themselves when exactness matters.

    Args:
        topic: Topic name.
        partition: Partition number.
        fromOffset: First offset of the range (inclusive), in ``[0, 2**63 - 1]``.
        untilOffset: End of the range (exclusive), in ``[fromOffset, 2**63 - 1]``.

    Raises:
        ConfigurationError: An offset is not an int, negative, beyond int64, or
            ``fromOffset > untilOffset``.
    """

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int

    def __post_init__(self) -> None:
        if type(self.topic) is str and self.topic and type(self.partition) is int \
                and self.partition >= 0 and type(self.fromOffset) is int \
                and type(self.untilOffset) is int \
                and 0 <= self.fromOffset <= self.untilOffset <= MAX_OFFSET:
            return  # the usual case, checked at once (planning builds thousands a batch)
        TopicPartition(self.topic, self.partition)  # validates topic and partition
        _check_offset("fromOffset", self.fromOffset, self.topic, self.partition)
        _check_offset("untilOffset", self.untilOffset, self.topic, self.partition)
        if self.fromOffset > self.untilOffset:
            raise ConfigurationError(
                f"OffsetRange for {self.topic}-{self.partition} has fromOffset "
                f"{self.fromOffset} > untilOffset {self.untilOffset}; the range is "
                "[fromOffset, untilOffset), so fromOffset must not exceed untilOffset",
                topic=self.topic,
                partition=self.partition,
                fromOffset=self.fromOffset,
                untilOffset=self.untilOffset,
            )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled once per range and batch when a KafkaRDD is built: the constructor's
        # arguments pickle twice as fast as a slotted dataclass's state.
        return (OffsetRange, (self.topic, self.partition, self.fromOffset, self.untilOffset))

    @classmethod
    def many(cls, topics: Sequence[str], partitions: Sequence[int],
             fromOffsets: Sequence[int], untilOffsets: Sequence[int]) -> list[OffsetRange]:
        """The ranges ``(topics[i], partitions[i], fromOffsets[i], untilOffsets[i])``.

        The same ranges, and the same checks, as building each with the constructor, but
        checked all at once: a batch of a thousand partitions builds a thousand ranges, and
        the constructor's check, a Python call each, was a millisecond of its planning.
        When any value fails, the ranges are built one by one so that the first bad one
        raises its own error.

        Raises:
            ConfigurationError: As the constructor, for the first bad range.
        """
        count = len(topics)
        if not (len(partitions) == len(fromOffsets) == len(untilOffsets) == count):
            raise ConfigurationError(
                f"OffsetRange.many needs as many partitions, fromOffsets and untilOffsets "
                f"as topics ({count}); got {len(partitions)}, {len(fromOffsets)} and "
                f"{len(untilOffsets)}")
        if not count:
            return []
        if cls is not OffsetRange or not _all_valid(topics, partitions, fromOffsets,
                                                     untilOffsets):
            # A subclass's ranges are its own, made by its constructor.
            return list(map(cls, topics, partitions, fromOffsets, untilOffsets))
        return _checked_ranges(topics, partitions, fromOffsets, untilOffsets)

    @classmethod
    def create(
        cls, topicPartition: TopicPartition, fromOffset: int, untilOffset: int
    ) -> OffsetRange:
        """Build a range for ``topicPartition``, as Scala's ``OffsetRange.create``."""
        return cls(topicPartition.topic, topicPartition.partition, fromOffset, untilOffset)

    def topicPartition(self) -> TopicPartition:
        """The range's topic and partition."""
        return TopicPartition(self.topic, self.partition)

    def count(self) -> int:
        """``untilOffset - fromOffset``: offsets covered, an upper bound on the records."""
        return self.untilOffset - self.fromOffset

    def __str__(self) -> str:
        return (
            f"OffsetRange(topic: '{self.topic}', partition: {self.partition}, "
            f"range: [{self.fromOffset} -> {self.untilOffset}])"
        )


def _all_valid(topics: Sequence[str], partitions: Sequence[int], fromOffsets: Sequence[int],
               untilOffsets: Sequence[int]) -> bool:
    """Whether every range passes the constructor's check (each test a C loop, no call)."""
    # Types first, compared without hashing the values (a list is no topic, and no set
    # member: the constructor's error names it).
    return (set(map(type, topics)) == {str} and all(topics)
            and set(map(type, partitions)) == {int} and min(partitions) >= 0
            and set(map(type, fromOffsets)) == {int} and set(map(type, untilOffsets)) == {int}
            and min(fromOffsets) >= 0 and max(untilOffsets) <= MAX_OFFSET
            and all(map(operator.le, fromOffsets, untilOffsets)))


_new_object = object.__new__
# The slots' own setters: a frozen dataclass refuses ``setattr``, which is what makes its
# instances immutable to their users; ranges checked above are filled in directly.
_set_topic = OffsetRange.__dict__["topic"].__set__
_set_partition = OffsetRange.__dict__["partition"].__set__
_set_from = OffsetRange.__dict__["fromOffset"].__set__
_set_until = OffsetRange.__dict__["untilOffset"].__set__


def _checked_ranges(topics: Sequence[str], partitions: Sequence[int],
                    fromOffsets: Sequence[int], untilOffsets: Sequence[int]
                    ) -> list[OffsetRange]:
    """The ranges of values :func:`_all_valid` accepted (the constructor's check passes).

    Made and filled field by field, each a loop in C over all the ranges: a Python call
    per range was most of the time a thousand ranges took.
    """
    ranges: list[OffsetRange] = list(map(_new_object, repeat(OffsetRange, len(topics))))
    # Each setter returns None: any() runs it over every range.
    any(map(_set_topic, ranges, topics))
    any(map(_set_partition, ranges, partitions))
    any(map(_set_from, ranges, fromOffsets))
    any(map(_set_until, ranges, untilOffsets))
    return ranges


class HasOffsetRanges(ABC):
    """Something that knows the offset ranges it was built from (a KafkaRDD).

    ``offsetRanges()`` lists one range per Spark partition, in partition order, so the
    ``i``-th range is what partition ``i`` read (``TaskContext.get().partitionId()``). A
    grouped KafkaRDD (several ranges per Spark partition, opt-in) lists all its ranges
    group after group: there, partition ``i`` reads ``rangeGroups()[i]``, not the ``i``-th
    range.
    """

    @abstractmethod
    def offsetRanges(self) -> Sequence[OffsetRange]:
        """The ranges, one per Spark partition, in partition order."""


class CanCommitOffsets(ABC):
    """A stream that can commit offset ranges to its Kafka consumer group (the direct stream).

    Committed offsets are *next offsets to read*: committing ``OffsetRange(t, p, 10, 20)``
    stores 20 for ``t-p``, where a consumer of the group resumes.
    """

    @abstractmethod
    def commitAsync(self, offsetRanges: Sequence[OffsetRange],
                    callback: Callable[[dict[TopicPartition, int] | None,
                                        Exception | None], None] | None = None) -> None:
        """Queue ranges to commit once the current batch's output operations finish.

        Args:
            offsetRanges: Ranges whose records were processed; per partition the largest
                ``untilOffset`` is committed.
            callback: Called with the committed offsets, or with the error.
        """


def prorate_by_lag(latest: Offsets, current: Offsets, maxTotal: int
                   ) -> dict[TopicPartition, int]:
    """Ends that read at most ``maxTotal`` offsets in all, shared in proportion to lag.

    Each partition's share of ``maxTotal`` by its lag (``latest - current``) is floored;
    the offsets left over go one each to the largest remainders (ties by partition), so
    the total is exactly ``min(maxTotal, total lag)``. Integer arithmetic throughout: exact
    for any int64 offsets, where floating point shares overshoot the cap once lags pass
    2**53.

    Args:
        latest: Where each partition could read to.
        current: Where each partition's range starts (a partition missing here has no
            lag).
        maxTotal: The cap; 0 or less, or a total lag within it, leaves ``latest`` as is.
    """
    lag = {tp: max(end - current.get(tp, end), 0) for tp, end in latest.items()}
    total = sum(lag.values())
    if maxTotal <= 0 or total <= maxTotal:
        return dict(latest)
    shares = {tp: partition_lag * maxTotal // total for tp, partition_lag in lag.items()}
    remainders = {tp: partition_lag * maxTotal % total for tp, partition_lag in lag.items()}
    left = maxTotal - sum(shares.values())
    for tp in sorted(remainders, key=lambda t: (-remainders[t], t))[:left]:
        shares[tp] += 1
    return {tp: current.get(tp, latest[tp]) + shares[tp] for tp in latest}
