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

from kafka_direct import OffsetRange, TopicPartition

__all__ = ["OffsetStore"]


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
