"""The order of a batch's partitions, kept from batch to batch while they stay the same.

A batch lists its ranges in (topic, partition) order. Sorting a thousand partitions, and
splitting them into topics and numbers, each batch again cost the driver about a
millisecond of a batch's planning; the partitions of a stream rarely change. The layout
keeps the last order and takes it again whenever a batch's partitions are the same objects
in the same order (checked by one list comparison, in C), or the same partitions at all
(checked after a sort); any other set of partitions, one added or one gone, gets a layout
of its own at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafka_direct.topic_partition import TopicPartition, partition_order

__all__ = ["PartitionLayout"]


class PartitionLayout:
    """The partitions of the latest batch in (topic, partition) order, and what follows.

    Attributes:
        partitions: The partitions, sorted by (topic, partition).
        topics: Their topics, in the same order.
        numbers: Their partition numbers, in the same order.
    """

    def __init__(self) -> None:
        self.partitions: list[TopicPartition] = []
        self.topics: list[str] = []
        self.numbers: list[int] = []
        # The input description's text with a ``%d to %d`` for each range's offsets.
        self._template: str | None = None

    def arrange(self, offsets: Mapping[TopicPartition, int]) -> list[int]:
        """The values of ``offsets`` in layout order, the layout first made ``offsets``' own.

        Args:
            offsets: An offset for each partition of the batch.
        """
        keys = list(offsets)
        if keys == self.partitions:  # the same partitions in the same order: no lookup
            return list(offsets.values())
        ordered = sorted(keys, key=partition_order)
        if ordered != self.partitions:
            self.partitions = ordered
            self.topics = [tp.topic for tp in ordered]
            self.numbers = [tp.partition for tp in ordered]
            self._template = None
        return list(map(offsets.__getitem__, self.partitions))

    def pick(self, offsets: Mapping[TopicPartition, int]) -> list[int]:
        """The offsets of the layout's partitions in its order (``offsets`` may hold more).

        Read in order, without a lookup, when ``offsets`` holds just the layout's
        partitions in its order (as :meth:`merge` leaves them).

        Raises:
            KeyError: A partition of the layout is not in ``offsets``.
        """
        if list(offsets) == self.partitions:
            return list(offsets.values())
        return list(map(offsets.__getitem__, self.partitions))

    @staticmethod
    def merge(positions: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
              ) -> dict[TopicPartition, int]:
        """``{**positions, **ends}``, in ``ends``' order first (keys' stored hashes reused)."""
        merged = {**ends, **positions}
        merged.update(ends)
        return merged

    def describe(self, fromOffsets: Sequence[int], untilOffsets: Sequence[int]) -> str:
        r"""Spark's input description of ranges in layout order (see ``describe_ranges``).

        The same text, made by one ``%`` formatting of a template kept per layout (each
        range's ``topic: t\tpartition: p\toffsets: %d to %d``): a thousand ranges'
        ``format`` calls were twice its time. The offsets are ints (checked by the ranges
        made from them), which ``%d`` writes as ``str`` does.

        Raises:
            ValueError: ``fromOffsets`` or ``untilOffsets`` is not as long as the layout.
        """
        count = len(self.partitions)
        if len(fromOffsets) != count or len(untilOffsets) != count:
            raise ValueError(f"describing {len(fromOffsets)} from and {len(untilOffsets)} "
                             f"until offsets with a layout of {count} partitions")
        if self._template is None:
            # A topic's own '%' escaped: only the offsets are formatted.
            self._template = "\n".join(
                f"topic: {topic}\tpartition: {partition}\toffsets: ".replace("%", "%%")
                + "%d to %d" for topic, partition in zip(self.topics, self.numbers,
                                                         strict=True))
        values: list[int] = [0] * (2 * count)
        values[::2] = fromOffsets
        values[1::2] = untilOffsets
        return self._template % tuple(values)

    def latest(self, offsets: Mapping[TopicPartition, int]) -> list[tuple[str, int, int]]:
        """``(topic, partition, offset)`` of each of ``offsets``, sorted by partition."""
        if list(offsets) == self.partitions:
            return list(zip(self.topics, self.numbers, offsets.values(), strict=True))
        return [(topic, partition, offset) for (topic, partition), offset
                in sorted(zip(map(partition_order, offsets), offsets.values(), strict=True))]
