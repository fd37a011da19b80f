"""OffsetStore: where a stream resumes from.

Contract, for every store:

* An offset is the *next offset to read* of a (group, topic, partition): after the records
  of ``OffsetRange(t, p, 10, 20)`` are processed, the stored offset is 20.
* ``commit`` advances a partition from a range's ``fromOffset`` to its ``untilOffset``. A
  repeated commit of the same range (a retried task, a re-run batch) finds the stored offset
  already at ``untilOffset`` and changes nothing. Any other stored offset is a gap or an
  overlap: :class:`~kafka_direct.errors.OffsetMismatchError`, and nothing of the commit is
  written (transactional stores) — records are neither lost nor counted twice.
* One commit may carry several ranges of one partition (e.g. ``[0, 10)`` and ``[10, 20)``):
  consecutive ones are chained into one range (claim 0, store 20), in any order; ranges of a
  partition that do not chain (a hole or an overlap between them) are an
  :class:`~kafka_direct.errors.OffsetMismatchError` and nothing of the commit is written.
  Every store plans a commit with :func:`chain_ranges` and :func:`check_commit`, so they all
  agree.
* ``load`` returns the stored offsets; partitions the store has never seen are absent, so a
  stream starts them by its own policy (and ``seed`` records where they started).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from kafka_direct import OffsetMismatchError, OffsetRange, TopicPartition

__all__ = ["OffsetStore", "chain_ranges", "check_and_seed", "check_commit", "check_range"]


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


def chain_ranges(group: str, offsetRanges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """One range per partition: each partition's ranges chained end to start.

    Returns:
        The chained ranges, sorted by (topic, partition) (the order stores lock rows in).

    Raises:
        OffsetMismatchError: Two ranges of a partition do not chain (a hole or an overlap
            between them); ``stored`` is then the end of the chain so far.
    """
    byPartition: dict[TopicPartition, list[OffsetRange]] = {}
    for r in offsetRanges:
        byPartition.setdefault(r.topicPartition(), []).append(r)
    chained = []
    for tp in sorted(byPartition):
        parts = sorted(byPartition[tp], key=lambda r: (r.fromOffset, r.untilOffset))
        start, end = parts[0].fromOffset, parts[0].untilOffset
        for r in parts[1:]:
            if r.fromOffset != end:
                what = "a hole" if r.fromOffset > end else "an overlap"
                raise OffsetMismatchError(
                    f"cannot commit [{r.fromOffset}, {r.untilOffset}) of {tp} for group "
                    f"{group!r} with [{start}, {end}) in the same commit: {what} between "
                    f"them; ranges of one partition in one commit must follow each other",
                    group=group, topic=tp.topic, partition=tp.partition, stored=end,
                    fromOffset=r.fromOffset, untilOffset=r.untilOffset)
            end = r.untilOffset
        chained.append(OffsetRange(tp.topic, tp.partition, start, end))
    return chained


def check_commit(group: str, offsetRanges: Iterable[OffsetRange],
                 stored: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """The chained ranges of a commit that advance their partition, all checked first.

    Args:
        group: The consumer group (for errors).
        offsetRanges: The commit's ranges (several per partition allowed, see
            :func:`chain_ranges`).
        stored: The stored next offsets (partitions absent: none stored).

    Returns:
        The chained ranges to apply (stored offset == ``fromOffset``, not empty); ranges
        applied before are left out.

    Raises:
        OffsetMismatchError: A partition's chain neither continues nor repeats its stored
            offset, or the ranges of a partition do not chain; raised before anything is
            applied, so the caller writes nothing.
    """
    return [r for r in chain_ranges(group, offsetRanges)
            if check_range(group, r, stored.get(r.topicPartition()))]


def check_and_seed(store: OffsetStore, group: str, offsetRanges: Iterable[OffsetRange]
                   ) -> list[OffsetRange]:
    """Check a batch against the stored offsets, then seed the partitions new to the store.

    A partition the store has never seen starts where the batch's chain of it starts (its
    lowest ``fromOffset``, whatever the order of its ranges), and is checked as if stored
    there. Seeds are written only once the whole batch passed: a refused batch leaves no
    seed behind, which a later start would resume from.

    Returns:
        The chained ranges that advance their partition (see :func:`check_commit`).

    Raises:
        OffsetMismatchError: A chain neither continues nor repeats its stored offset, or
            ranges of a partition do not chain; nothing was seeded.
    """
    ranges = chain_ranges(group, offsetRanges)
    stored = store.load(group, sorted({r.topic for r in ranges}))
    starts = {r.topicPartition(): r.fromOffset for r in ranges
              if r.topicPartition() not in stored}
    pending = check_commit(group, ranges, {**stored, **starts})
    if starts:
        store.seed(group, starts)
    return pending


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
        """Advance each range's partition from ``fromOffset`` to ``untilOffset``, all or nothing.

        Consecutive ranges of one partition are chained (see :func:`chain_ranges`).

        Raises:
            OffsetMismatchError: A stored offset is neither the chain's ``fromOffset`` nor
                its ``untilOffset`` (or is missing), or ranges of a partition do not chain;
                nothing is committed then.
        """

    def verifyLock(self, group: str) -> int | None:
        """Before writing: check that this job still holds ``group``, if the store locks groups.

        Returns:
            A fencing generation for stores that lock groups, else None (the default: the
            store has no group locks).

        Raises:
            GroupBusyError: The job's lock was lost to another job.
        """
        return None
