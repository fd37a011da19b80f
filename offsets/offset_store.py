"""OffsetStore: where a stream resumes from.

Contract, for every store:

* An offset is the *next offset to read* of a (group, topic, partition): after the records
  of ``OffsetRange(t, p, 10, 20)`` are processed, the stored offset is 20.
* ``commit`` advances a partition from a range's ``fromOffset`` to its ``untilOffset``. A
  repeated commit of the same range (a retried task, a re-run batch) finds the stored offset
  already at ``untilOffset`` and changes nothing. Any other stored offset is a gap or an
  overlap: :class:`~kafka_direct.errors.OffsetMismatchError`, and nothing of the commit is
  written (transactional stores) — records are neither lost nor counted twice.
* ``load`` returns the stored offsets; partitions the store has never seen are absent, so a
  stream starts them by its own policy (and ``seed`` records where they started).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from kafka_direct import OffsetMismatchError, OffsetRange, TopicPartition

__all__ = ["OffsetStore", "check_range"]


def check_range(group: str, offsetRange: OffsetRange, stored: int | None) -> bool:
    """Whether to apply ``offsetRange`` given the partition's ``stored`` next offset.

    Returns:
        True when ``stored`` is the range's ``fromOffset`` and the range is not empty (apply
        it); False when the range was applied before (``stored`` is its ``untilOffset``) or
        is empty.

    Raises:
        OffsetMismatchError: Any other stored offset (a gap or an overlap), or none.
    """
    if stored == offsetRange.fromOffset:
        return offsetRange.count() > 0
    if stored == offsetRange.untilOffset:
        return False
    what = ("no stored offset (seed the partition's starting offset first)"
            if stored is None else
            f"stored offset {stored} is "
            + ("ahead of" if stored > offsetRange.untilOffset else
               "inside" if stored > offsetRange.fromOffset else "behind")
            + " the range: " + ("an overlap, records would be written twice"
                                if stored > offsetRange.fromOffset
                                else "a gap, records would be lost"))
    raise OffsetMismatchError(
        f"cannot commit [{offsetRange.fromOffset}, {offsetRange.untilOffset}) of "
        f"{offsetRange.topic}-{offsetRange.partition} for group {group!r}: {what}; "
        f"expected {offsetRange.fromOffset}", group=group, topic=offsetRange.topic,
        partition=offsetRange.partition, stored=stored, fromOffset=offsetRange.fromOffset,
        untilOffset=offsetRange.untilOffset)


class OffsetStore(ABC):
    """Next offsets to read, per consumer group and topic-partition."""

    @abstractmethod
    def load(self, group: str, topics: Iterable[str] | None = None
             ) -> dict[TopicPartition, int]:
        """The stored next offsets of ``group`` (of ``topics`` only, if given)."""

    @abstractmethod
    def seed(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Record starting offsets for partitions the store does not have yet.

        Partitions it has keep their stored offset.
        """

    @abstractmethod
    def commit(self, group: str, offsetRanges: Sequence[OffsetRange]) -> None:
        """Advance each range's partition from ``fromOffset`` to ``untilOffset``.

        Raises:
            OffsetMismatchError: A stored offset is neither ``fromOffset`` nor
                ``untilOffset`` (or is missing).
        """
